//! `mpiexec`: the name MPI users type, for `volley mpiexec`: put `target/release` on PATH and scripts
//! that call `mpiexec` use volley's MPI. It runs the `volley` binary beside it.

use std::os::unix::process::CommandExt;
use std::process::Command;

fn main() {
    let me = std::env::current_exe().unwrap_or_default();
    let volley = me.with_file_name("volley");
    let err = Command::new(&volley)
        .arg("mpiexec")
        .args(std::env::args_os().skip(1))
        .exec();
    eprintln!(
        "mpiexec: cannot run {}: {err}; build it with `cargo build --release --workspace`",
        volley.display()
    );
    std::process::exit(127);
}
