//! `mpiexec`: `volley mpiexec` under the name MPI users type (see src/mpi_alias.rs).
include!("../mpi_alias.rs");
