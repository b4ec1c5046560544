//! volley's MPI: `libmpi.so` and `include/mpi.h`, so that unmodified MPI programs in C run on
//! volley (`volley mpicc prog.c && volley run -n 4 ./a.out`).
//!
//! Layer 3, a face beside the C and Python faces: it uses the public `volley` API (endpoints,
//! the matcher, requests on the caller's buffers) and `volley-sys`'s lent buffers, and nothing
//! uses it. It is one of the crates allowed `unsafe`: C hands it raw pointers.
//!
//! What belongs here and what does not: matching, probes and requests are the core's
//! (`volley::Endpoint::recv_matching`, `irecv_lent`, `World::wait_some`); this face adds what
//! MPI defines on top: communicators (a context per communicator, two ports of the core: one for
//! point-to-point, one for collectives and synchronous-send acknowledgements), groups, datatypes,
//! MPI's error handling and send modes. See docs/mpi.md.
//!
//! # Safety contract of every exported function
//! Each `MPI_*`/`PMPI_*` function is `unsafe extern "C"`: the caller (a C program) promises
//! what the MPI standard asks of it: pointers are valid for the counts and datatypes given,
//! output arguments point to writable memory, a buffer lent to a non-blocking operation stays
//! valid and untouched until the operation completes, and calls come from one thread at a time
//! (MPI_THREAD_SERIALIZED at most). Handles are checked; a bad handle is an error, not a crash.
#![deny(unsafe_op_in_unsafe_fn)]
// The exported names are MPI's.
#![allow(non_snake_case)]
// One safety contract covers every exported function: see the crate's documentation.
#![allow(clippy::missing_safety_doc)]

pub mod abi;
mod algos;
mod coll;
mod comm;
mod dtype;
mod env;
mod err;
mod external;
mod hier;
mod info;
mod inter;
mod io;
mod nbc;
mod nbc_shm;
mod p2p;
mod removed;
mod scratch;
mod session;
mod state;
mod tool;
mod topo;
mod win;

pub use err::Fail;

/// Defines an exported MPI function and its PMPI twin (the profiling interface: a tool defines
/// `MPI_X`, does its work and calls `PMPI_X`; a program linked without a tool gets volley's
/// `MPI_X` directly). The body returns `Result<(), Fail>`; a failure goes to the error handler
/// of the communicator named in brackets (MPI_COMM_WORLD's without one).
macro_rules! mpi {
    ($(
        $(#[$m:meta])*
        fn $name:ident / $pname:ident ( $($a:ident : $t:ty),* $(,)? ) $([$comm:ident])? $body:block
    )*) => {$(
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $pname($($a: $t),*) -> std::os::raw::c_int {
            #[allow(unused_mut, unused_assignments)]
            let mut at: usize = $crate::abi::COMM_WORLD;
            $( at = $comm as usize; )?
            #[allow(clippy::redundant_closure_call)]
            let r: Result<(), $crate::Fail> = (|| $body)();
            $crate::err::finish(stringify!($name), at, r)
        }
        $(#[$m])*
        #[no_mangle]
        pub unsafe extern "C" fn $name($($a: $t),*) -> std::os::raw::c_int {
            // SAFETY: the same contract as the caller's, passed on unchanged.
            unsafe { $pname($($a),*) }
        }
    )*};
}
pub(crate) use mpi;
