//! Jobs started by Slurm (Debian's slurm-wlm 22.05, with munge): each test brings up a one-node
//! cluster of its own on this machine (`scripts/slurm-local up`: munged, slurmctld and slurmd
//! under a temporary directory, node declared with more CPUs than it has so that 4 ranks fit on
//! 2 cores) and takes it down afterwards, also when the test fails. Ranks started by
//! `srun --mpi=pmi2` speak PMI-2; `volley run` in an `sbatch` script starts its own.

mod common;
use common::netpipe::{check_np_integrity, npmpi};
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Cluster {
    dir: PathBuf,
    conf: String,
}

fn script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/slurm-local")
}

impl Cluster {
    fn up(tag: &str) -> Cluster {
        let dir = std::env::temp_dir().join(format!("volley-slurm-{tag}-{}", std::process::id()));
        let _ = Command::new(script()).arg("down").arg(&dir).output();
        let o = Command::new(script())
            .arg("up")
            .arg(&dir)
            .stdin(Stdio::null())
            .output()
            .expect("run scripts/slurm-local");
        let c = Cluster {
            conf: dir.join("slurm.conf").display().to_string(),
            dir,
        };
        assert!(
            o.status.success(),
            "cannot start a one-node Slurm cluster (./scripts/test installs slurm-wlm and munge):\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        c
    }

    /// Runs a Slurm command against this cluster under a watchdog (it bounds the run).
    fn run(&self, cmd: &str, args: &[&str]) -> Output {
        Command::new("timeout")
            .args(["-k", "5", "180", cmd])
            .args(args)
            .env("SLURM_CONF", &self.conf)
            .env(
                "PATH",
                format!("{}:/usr/sbin", std::env::var("PATH").unwrap_or_default()),
            )
            .stdin(Stdio::null())
            .current_dir(&self.dir)
            .output()
            .unwrap_or_else(|e| panic!("run {cmd}: {e}"))
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = Command::new(script()).arg("down").arg(&self.dir).output();
    }
}

fn must(o: Output, what: &str) -> String {
    let (out, err) = text(&o);
    assert!(
        o.status.success(),
        "{what} failed with {:?}\nstdout:\n{out}\nstderr:\n{err}",
        o.status
    );
    out
}

fn example(name: &str) -> String {
    let p = Path::new(VOLLEY)
        .parent()
        .unwrap()
        .join("examples")
        .join(name);
    assert!(
        p.exists(),
        "{} is missing: build the examples first",
        p.display()
    );
    p.display().to_string()
}

#[test]
fn srun_pmi2_starts_pingpong_alltoall_and_info() {
    let c = Cluster::up("srun");
    let pp = example("pingpong");
    let out = must(
        c.run("srun", &["--mpi=pmi2", "-n", "4", &pp, "--max", "65536"]),
        "srun pingpong",
    );
    assert!(out.contains("# volley pingpong, 4 ranks"), "{out}");
    let out = must(
        c.run("srun", &["--mpi=pmi2", "-n", "4", CHECK, "alltoall", "300"]),
        "srun alltoall",
    );
    assert_eq!(values(&out, "received"), vec!["1200"; 4], "{out}");
    let out = must(
        c.run("srun", &["--mpi=pmi2", "-n", "2", VOLLEY, "info"]),
        "srun volley info",
    );
    assert_eq!(out.matches("launcher: PMI-2").count(), 2, "{out}");
    assert!(out.contains("of 2 on host 0 of 1"), "{out}");
    let out = must(
        c.run("srun", &["--mpi=pmi2", "-n", "5", CHECK, "whoami", "self"]),
        "srun whoami",
    );
    let tokens = values(&out, "token");
    assert_eq!(tokens.len(), 5, "{out}");
    assert!(tokens.iter().all(|t| t == &tokens[0]), "{out}");
    assert!(!segment_alive(&tokens[0]));
}

#[test]
fn a_rank_killed_under_srun_gives_the_survivor_peer_lost_and_the_step_fails() {
    let c = Cluster::up("kill");
    // Without --kill-on-bad-exit srun leaves the survivor running: volley must tell it.
    let o = c.run("srun", &["--mpi=pmi2", "-n", "2", CHECK, "killed-peer"]);
    let (out, err) = text(&o);
    assert!(
        out.contains("peer-lost rank=1 fate=Vanished"),
        "{out}\n{err}"
    );
    let after: u64 = values(&out, "after_ms")[0].parse().unwrap();
    assert!(
        after <= 2000,
        "peer-lost came {after} ms after the last exchange"
    );
    assert_eq!(o.status.code(), Some(137), "{out}\n{err}");
    assert!(err.contains("Killed"), "{err}");
    assert!(dev_shm_volley_entries().is_empty());
    // With --kill-on-bad-exit srun ends the survivor itself (it may or may not have reported the
    // loss first); the step fails naming the killed task, and nothing is left behind.
    let o = c.run(
        "srun",
        &["--mpi=pmi2", "-K", "-n", "2", CHECK, "killed-peer"],
    );
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(err.contains("task 1: Killed"), "{out}\n{err}");
    assert!(dev_shm_volley_entries().is_empty());
}

#[test]
fn mpi_abort_under_srun_ends_the_step() {
    let c = Cluster::up("abort");
    let exe = c.dir.join("abort");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mpi/abort.c");
    let o = Command::new(VOLLEY)
        .arg("mpicc")
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = c.run("srun", &["--mpi=pmi2", "-n", "3", exe.to_str().unwrap()]);
    let (out, err) = text(&o);
    // Slurm's PMI-2 abort kills the step (its exit code is not passed on: srun says 137).
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(!out.contains("not stopped"), "{out}");
    assert!(err.contains("MPI_Abort"), "{err}");
}

#[test]
fn volley_run_in_an_sbatch_script_runs_its_job_and_the_exit_state_is_recorded() {
    let c = Cluster::up("sbatch");
    let job = c.dir.join("job.sh");
    std::fs::write(
        &job,
        format!(
            "#!/bin/sh\n#SBATCH -n 4\n#SBATCH -o {out}\n{VOLLEY} run -n 4 {CHECK} alltoall 200 || exit $?\n{VOLLEY} run -n 2 sh -c 'exit 3'\n",
            out = c.dir.join("job.out").display()
        ),
    )
    .unwrap();
    let o = c.run("sbatch", &["--wait", "--parsable", job.to_str().unwrap()]);
    let (out, err) = text(&o);
    // The job's exit code is that of its last command: volley run's, a rank's 3.
    assert_eq!(o.status.code(), Some(3), "{out}\n{err}");
    let id = out.trim().split(';').next().unwrap().to_string();
    let job_out = std::fs::read_to_string(c.dir.join("job.out")).unwrap_or_default();
    assert_eq!(values(&job_out, "received"), vec!["800"; 4], "{job_out}");
    let acct = must(
        c.run(
            "sacct",
            &["-c", "-n", "-j", &id, "-o", "state,exitcode", "-P"],
        ),
        "sacct",
    );
    assert!(acct.contains("FAILED|3:0"), "{acct}");
}

#[test]
fn salloc_then_volley_run_and_srun_inside_it() {
    let c = Cluster::up("salloc");
    let o = c.run(
        "salloc",
        &["-n", "2", VOLLEY, "run", "-n", "2", CHECK, "whoami"],
    );
    let out = must(o, "salloc volley run");
    assert_eq!(values(&out, "rank").len(), 2, "{out}");
}

/// NPmpi started by Slurm's srun with its PMI2 plugin, with NetPIPE's integrity check (every word
/// of every message checked on arrival; NetPIPE's measurement runs on shared memory and over
/// udp in the MPI tests).
#[test]
fn netpipe_unmodified_under_srun_pmi2() {
    let c = Cluster::up("netpipe");
    let exe = npmpi(&c.dir);
    let out = c.dir.join("np.out");
    let o = c.run(
        "srun",
        &[
            "--mpi=pmi2",
            "-n",
            "2",
            exe.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-i",
        ],
    );
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    must(o, "NPmpi under srun --mpi=pmi2");
    check_np_integrity(&out, &err, "srun");
}
