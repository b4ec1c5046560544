//! NetPIPE's NPmpi, unmodified, built with `volley mpicc` from the source ./scripts/test fetches.

use super::VOLLEY;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn must(o: Output, what: &str) {
    assert!(
        o.status.success(),
        "{what} failed with {:?}\nstdout:\n{}\nstderr:\n{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
}

/// NetPIPE's source, unpacked by ./scripts/test from Debian's source package.
pub fn netpipe_src() -> PathBuf {
    let d = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../target/netpipe/NetPIPE-3.7.2");
    assert!(
        d.join("src/mpi.c").exists(),
        "{} is missing: ./scripts/test fetches NetPIPE's source (apt-get source netpipe)",
        d.display()
    );
    d
}

/// Builds NPmpi from NetPIPE's own makefile with `volley mpicc` as its MPICC (in a copy of the
/// tree: tests run side by side).
pub fn npmpi(dir: &Path) -> PathBuf {
    let src = dir.join("NetPIPE");
    must(
        Command::new("cp")
            .arg("-r")
            .arg(netpipe_src())
            .arg(&src)
            .output()
            .expect("run cp"),
        "copying NetPIPE's source",
    );
    let o = Command::new("make")
        .arg("-C")
        .arg(&src)
        .arg("-s")
        .arg("mpi")
        .arg(format!("MPICC={VOLLEY} mpicc"))
        .output()
        .expect("run make");
    must(o, "building NPmpi");
    let exe = dir.join("NPmpi");
    std::fs::rename(src.join("NPmpi"), &exe).expect("move NPmpi");
    exe
}

/// NetPIPE's results: (bytes, Mbps) per line of its output file.
pub fn np_results(path: &Path) -> Vec<(u64, f64)> {
    let s = std::fs::read_to_string(path).expect("NetPIPE's output file");
    s.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.parse().ok()?))
        })
        .collect()
}

/// NetPIPE's measurement: at least `min_sizes` sizes from 1 byte up to at least 4 MiB, each with
/// a throughput (124 sizes with NetPIPE's perturbations, 46 without: `-p 0`).
pub fn check_np(path: &Path, what: &str, min_sizes: usize) {
    let r = np_results(path);
    assert!(
        r.len() >= min_sizes,
        "{what}: NetPIPE stopped early ({} sizes)",
        r.len()
    );
    assert_eq!(r[0].0, 1, "{what}: NetPIPE's smallest message");
    let last = r.last().unwrap().0;
    assert!(
        last >= 4 << 20,
        "{what}: NetPIPE's largest message was {last} bytes"
    );
    assert!(
        r.iter().all(|&(_, mbps)| mbps > 0.0),
        "{what}: a size measured no throughput"
    );
}

/// NetPIPE's integrity check (`-i`): every size's message is filled with a counting pattern and
/// checked word by word on arrival (NetPIPE exits with -1 at the first wrong word), one trial per
/// size and no perturbed sizes. Its output file gives (bytes, repetitions) per size, and the
/// transmitter says "Integrity check passed" on stderr after each.
pub fn check_np_integrity(path: &Path, stderr: &str, what: &str) {
    let r = np_results(path);
    let passed = stderr.matches("Integrity check passed").count();
    assert!(
        r.len() > 30 && passed == r.len(),
        "{what}: {} sizes in the output file, {passed} integrity checks passed:\n{stderr}",
        r.len()
    );
    let last = r.last().unwrap().0;
    assert!(
        last >= 4 << 20,
        "{what}: NetPIPE's largest checked message was {last} bytes"
    );
    assert!(
        r.iter().all(|&(_, reps)| reps >= 1.0),
        "{what}: a size was sent no times"
    );
}

/// Checks a NetPIPE run made with `flags`: its integrity check where `-i` was given, else its
/// measurement (124 sizes with its perturbations, 46 with `-p 0`).
pub fn check_np_run(path: &Path, stderr: &str, flags: &[&str], what: &str) {
    if flags.contains(&"-i") {
        check_np_integrity(path, stderr, what);
    } else {
        let min = if flags.contains(&"-p") { 40 } else { 100 };
        check_np(path, what, min);
    }
}
