// `mpicc`, `mpicxx`, `mpirun` and `mpiexec`: the names MPI users type. Each of src/bin/mpi*.rs
// includes this file and runs `volley <its own name>` with the binary beside it. Put
// `target/release` on PATH and scripts that call them use volley's MPI.

use std::os::unix::process::CommandExt;
use std::process::Command;

fn main() {
    let name = env!("CARGO_BIN_NAME");
    let me = std::env::current_exe().unwrap_or_default();
    let volley = me.with_file_name("volley");
    let err = Command::new(&volley)
        .arg(name)
        .args(std::env::args_os().skip(1))
        .exec();
    eprintln!(
        "{name}: cannot run {}: {err}; build it with `cargo build --release --workspace`",
        volley.display()
    );
    std::process::exit(127);
}
