//! Jobs started by the launchers clusters already run, with no volley process above the ranks:
//! MPICH's Hydra (`mpiexec.hydra` from Debian's `mpich`, PMI-1 and PMI-2) on one host and across
//! network namespaces used as hosts, and a launcher that speaks PMI badly (garbage, a closed
//! descriptor, silence). Slurm's srun is in `slurm.rs`.

mod common;
use common::hosts::Hosts;
use common::*;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

const HYDRA: &str = "mpiexec.hydra";

fn example(name: &str) -> String {
    // The examples sit beside the test binaries' target directory.
    let exe = std::path::Path::new(VOLLEY);
    let p = exe.parent().unwrap().join("examples").join(name);
    assert!(
        p.exists(),
        "{} is missing: build the examples first (cargo build --release --examples; ./scripts/test does)",
        p.display()
    );
    p.display().to_string()
}

/// Runs `mpiexec.hydra ARGS` under a watchdog (it bounds the run; it measures nothing).
fn hydra(args: &[&str], env: &[(&str, &str)]) -> Output {
    hydra_in(None, args, env)
}

fn hydra_in(netns: Option<&str>, args: &[&str], env: &[(&str, &str)]) -> Output {
    let mut c = Command::new("timeout");
    c.args(["-k", "5", "120"]);
    if let Some(ns) = netns {
        c.args(["ip", "netns", "exec", ns]);
    }
    c.arg(HYDRA).args(args).stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    c.output()
        .expect("start mpiexec.hydra (Debian package mpich)")
}

fn must(o: Output) -> String {
    let (out, err) = text(&o);
    assert!(
        o.status.success(),
        "mpiexec.hydra failed with {:?}\nstdout:\n{out}\nstderr:\n{err}",
        o.status
    );
    out
}

#[test]
fn hydra_starts_pingpong_and_alltoall_on_one_host() {
    let out = must(hydra(
        &["-n", "4", &example("pingpong"), "--max", "65536"],
        &[],
    ));
    assert!(out.contains("# volley pingpong, 4 ranks"), "{out}");
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("65536")),
        "{out}"
    );

    let out = must(hydra(&["-n", "4", CHECK, "alltoall", "300"], &[]));
    let ok: Vec<String> = values(&out, "received");
    assert_eq!(ok, vec!["1200"; 4], "{out}");
    assert_eq!(out.matches(" ok").count(), 4, "{out}");
}

#[test]
fn hydra_serves_pmi2_too() {
    let out = must(hydra(
        &[
            "-n",
            "3",
            "-genv",
            "VOLLEY_PMI",
            "2",
            CHECK,
            "alltoall",
            "100",
        ],
        &[],
    ));
    assert_eq!(values(&out, "received"), vec!["300"; 3], "{out}");
    let out = must(hydra(
        &["-n", "2", "-genv", "VOLLEY_PMI", "2", VOLLEY, "info"],
        &[],
    ));
    assert_eq!(out.matches("launcher: PMI-2").count(), 2, "{out}");
}

#[test]
fn volley_info_under_hydra_says_who_started_it() {
    let out = must(hydra(&["-n", "2", VOLLEY, "info"], &[]));
    assert_eq!(out.matches("launcher: PMI-1").count(), 2, "{out}");
    assert!(
        out.contains("rank 1 of 2, local rank 1 of 2 on host 0 of 1"),
        "{out}"
    );
    // Hydra's map of one host, understood.
    assert!(out.contains("(node of each rank: [0, 0])"), "{out}");
}

#[test]
fn every_rank_under_hydra_shares_one_token_and_one_segment() {
    let out = must(hydra(&["-n", "5", CHECK, "whoami", "self"], &[]));
    let tokens = values(&out, "token");
    assert_eq!(tokens.len(), 5, "{out}");
    assert!(tokens.iter().all(|t| t == &tokens[0]), "{out}");
    let mut ranks = values(&out, "rank");
    ranks.sort();
    assert_eq!(ranks, ["0", "1", "2", "3", "4"], "{out}");
    assert_eq!(out.matches("selfsend ok").count(), 5, "{out}");
    assert!(!segment_alive(&tokens[0]), "the job's segment outlived it");
}

#[test]
fn an_mpi_program_runs_under_hydra_and_mpi_abort_ends_the_job() {
    let dir = tempdir("hydra-mpi");
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/mpi");
    for prog in ["nbc", "abort"] {
        let o = Command::new(VOLLEY)
            .args(["mpicc", "-O1"])
            .arg(src.join(format!("{prog}.c")))
            .arg("-o")
            .arg(dir.join(prog))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let out = must(hydra(&["-n", "4", dir.join("nbc").to_str().unwrap()], &[]));
    assert!(out.contains("nbc: ok"), "{out}");
    let o = hydra(&["-n", "3", dir.join("abort").to_str().unwrap()], &[]);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(7), "{out}\n{err}");
    assert!(!out.contains("not stopped"), "{out}");
    let _ = std::fs::remove_dir_all(&dir);
}

fn tempdir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("volley-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn a_rank_killed_under_hydra_ends_the_job_and_survivors_hear_of_it() {
    // Hydra kills every other rank itself when one is killed by a signal (also with
    // -disable-auto-cleanup, once it reaps the dead one) and exits non-zero.
    let o = hydra(&["-n", "2", CHECK, "killed-peer"], &[]);
    assert!(!o.status.success(), "{:?}", text(&o));
    // Hydra says so with its banner, or (when its proxy meets the dead rank's closed PMI socket
    // first, a race of Hydra's own) with its process manager's error: either way it noticed.
    let (out, err) = text(&o);
    assert!(
        out.contains("BAD TERMINATION") || err.contains("process manager error"),
        "{out}\n{err}"
    );
    assert!(dev_shm_volley_entries().is_empty());
    // With -disable-auto-cleanup, a rank that exits without closing its world leaves the others
    // running (Hydra sends them SIGUSR1, which killed-peer ignores): the survivor must learn of
    // the death from volley. Its report goes to a file: Hydra stops forwarding output once the
    // job has failed.
    let dir = tempdir("hydra-kill");
    let script = format!(
        "exec {CHECK} killed-peer exit > {}/out.$PMI_RANK 2>&1",
        dir.display()
    );
    let o = hydra(
        &["-disable-auto-cleanup", "-n", "2", "sh", "-c", &script],
        &[],
    );
    let out0 = std::fs::read_to_string(dir.join("out.0")).unwrap_or_default();
    assert!(
        out0.contains("peer-lost rank=1 fate=Vanished"),
        "rank 0: {out0}\n{:?}",
        text(&o)
    );
    let after: u64 = values(&out0, "after_ms")[0].parse().unwrap();
    assert!(
        after <= 2000,
        "peer-lost came {after} ms after the last exchange"
    );
    assert!(!o.status.success(), "{:?}", text(&o));
    assert!(dev_shm_volley_entries().is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Hydra across three network namespaces used as hosts: its proxies started with `ip netns exec`
/// (its rsh launcher pointed at a script), mpiexec itself in the first namespace so that the
/// proxies reach it at that host's address.
fn hydra_across(transport: &str) {
    let h = Hosts::new(3, 1500);
    let dir = tempdir(&format!("hydra-ns-{transport}"));
    let exec = dir.join("netns-exec");
    std::fs::write(
        &exec,
        "#!/bin/sh\nhost=$1; shift\nexec ip netns exec \"$host\" sh -c \"$*\"\n",
    )
    .unwrap();
    Command::new("chmod").arg("+x").arg(&exec).status().unwrap();
    let exec_s = exec.display().to_string();
    let hosts = h.list();
    let base = [
        "-launcher",
        "rsh",
        "-launcher-exec",
        &exec_s,
        "-localhost",
        &h.addrs[0],
        "-hosts",
        &hosts,
        "-genv",
        "VOLLEY_TRANSPORT",
        transport,
    ];
    let mut a: Vec<&str> = base.to_vec();
    a.extend(["-n", "6", CHECK, "alltoall", "200"]);
    let out = must(hydra_in(Some(&h.names[0]), &a, &[]));
    assert_eq!(values(&out, "received"), vec!["1200"; 6], "{out}");

    let mut a: Vec<&str> = base.to_vec();
    a.extend(["-n", "6", VOLLEY, "info"]);
    let out = must(hydra_in(Some(&h.names[0]), &a, &[]));
    // Hydra places ranks round-robin: two per host, three hosts.
    assert_eq!(out.matches("of 2 on host").count(), 6, "{out}");
    assert_eq!(out.matches("of 3\n").count(), 6, "{out}");

    let mut a: Vec<&str> = base.to_vec();
    let pp = example("pingpong");
    a.extend(["-n", "2", &pp, "--max", "1048576"]);
    let out = must(hydra_in(Some(&h.names[0]), &a, &[]));
    assert!(
        out.lines().any(|l| l.trim_start().starts_with("1048576")),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn hydra_across_namespaces_over_udp() {
    hydra_across("udp");
}

#[test]
fn hydra_across_namespaces_over_eth() {
    hydra_across("eth");
}

/// A fake launcher: the rank's PMI descriptor is one end of a socket pair whose other end the
/// test plays with.
fn bad_launcher(flavor: &str, play: impl FnOnce(UnixStream) + Send + 'static) -> (Output, u128) {
    let (ours, theirs) = UnixStream::pair().unwrap();
    let fd = theirs.as_raw_fd();
    let mut c = Command::new(CHECK);
    c.arg("whoami")
        .env("PMI_FD", fd.to_string())
        .env("PMI_RANK", "0")
        .env("PMI_SIZE", "2")
        .env("VOLLEY_PMI", flavor)
        .env("VOLLEY_PMI_TIMEOUT_MS", "500")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for v in volley::launch::OWNED_VARS {
        c.env_remove(v);
    }
    volley_sys::prepare_child(
        &mut c,
        volley_sys::ChildSetup {
            inherit: vec![fd],
            cpus: None,
            parent: std::process::id(),
        },
    );
    let t = Instant::now();
    let child = c.spawn().unwrap();
    drop(theirs);
    let player = std::thread::spawn(move || play(ours));
    let pid = child.id();
    // A watchdog: a hang fails the test instead of blocking it.
    let dog = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_secs(60));
        let _ = volley_sys::kill(pid, 9);
    });
    let o = child.wait_with_output().unwrap();
    let ms = t.elapsed().as_millis();
    drop(dog);
    let _ = player.join();
    (o, ms)
}

fn fails_with(o: &Output, ms: u128, want: &str) {
    let (out, err) = text(o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert_ne!(
        o.status.code(),
        None,
        "killed by the watchdog after {ms} ms: a hang\n{err}"
    );
    assert!(err.contains(want), "expected {want:?} in:\n{err}");
    assert!(!out.contains("result:"), "{out}");
}

#[test]
fn a_launcher_that_answers_garbage_closes_or_is_silent_gives_a_clear_error() {
    // PMI-1: garbage.
    let (o, ms) = bad_launcher("1", |s| {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut l = String::new();
        let _ = r.read_line(&mut l);
        let _ = (&s).write_all(b"hello there\n");
        std::thread::sleep(Duration::from_secs(2));
    });
    fails_with(&o, ms, "not a PMI reply");
    // PMI-1: a reply that never ends.
    let (o, ms) = bad_launcher("1", |s| {
        let _ = (&s).write_all(&vec![b'x'; 200_000]);
        std::thread::sleep(Duration::from_secs(2));
    });
    fails_with(&o, ms, "without an end of line");
    // PMI-1: the wrong answer to init.
    let (o, ms) = bad_launcher("1", |s| {
        let mut r = BufReader::new(s.try_clone().unwrap());
        let mut l = String::new();
        let _ = r.read_line(&mut l);
        let _ = (&s).write_all(b"cmd=barrier_out\n");
        std::thread::sleep(Duration::from_secs(2));
    });
    fails_with(&o, ms, "expected \"response_to_init\"");
    // Closed at once.
    let (o, ms) = bad_launcher("1", drop);
    fails_with(&o, ms, "closed the PMI connection");
    let (o, ms) = bad_launcher("2", drop);
    fails_with(&o, ms, "closed the PMI connection");
    // Silent: the deadline (VOLLEY_PMI_TIMEOUT_MS=500) ends it.
    let (o, ms) = bad_launcher("1", |s| {
        std::thread::sleep(Duration::from_secs(5));
        drop(s);
    });
    fails_with(&o, ms, "did not answer within 500 ms");
    // PMI-2 opens with a PMI-1 init line; then no length prefix, and an absurd one.
    fn greet2(s: &UnixStream) {
        let mut l = String::new();
        let _ = BufReader::new(s).read_line(&mut l);
        assert!(l.starts_with("cmd=init pmi_version=2"), "{l}");
        let _ = (&*s).write_all(b"cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n");
    }
    let (o, ms) = bad_launcher("2", |s| {
        greet2(&s);
        let _ = (&s).write_all(b"cmd=fullinit-response;rc=0;");
        std::thread::sleep(Duration::from_secs(2));
    });
    fails_with(&o, ms, "does not start with a length");
    let (o, ms) = bad_launcher("2", |s| {
        greet2(&s);
        let _ = (&s).write_all(b"999999cmd=");
        std::thread::sleep(Duration::from_secs(2));
    });
    fails_with(&o, ms, "does not start with a length");
    // PMI-2: a refusal is reported with the launcher's reason.
    let (o, ms) = bad_launcher("2", |s| {
        greet2(&s);
        let mut b = [0u8; 256];
        let _ = (&s).read(&mut b);
        let m = "cmd=fullinit-response;rc=7;errmsg=no such job;";
        let _ = (&s).write_all(format!("{:<6}{m}", m.len()).as_bytes());
        std::thread::sleep(Duration::from_secs(2));
    });
    fails_with(&o, ms, "rc=7 no such job");
}

#[test]
fn a_stale_pmi_descriptor_is_a_clear_error() {
    let o = Command::new(CHECK)
        .arg("whoami")
        .env("PMI_FD", "77")
        .env("PMI_RANK", "0")
        .env("PMI_SIZE", "2")
        .output()
        .unwrap();
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("PMI_FD") && err.contains("no such open descriptor"),
        "{err}"
    );
}

/// Under Hydra each rank puts the NUMA node its CPUs lie on into its key-value record, and the
/// host's leader places each rank's rings there (VOLLEY_NUMA=on: the development machine has one
/// node); with VOLLEY_NUMA=off nothing is placed.
#[test]
fn ranks_under_hydra_get_their_rings_on_their_numa_node() {
    for numa in ["on", "off"] {
        let out = must(hydra(
            &["-n", "3", "-bind-to", "core", CHECK, "numa"],
            &[("VOLLEY_NUMA", numa)],
        ));
        let report = numa_report(&out);
        assert_eq!(report.len(), 3, "{out}");
        for (home, rings) in report {
            assert_eq!(rings.len(), 3, "{out}");
            for (mode, nodes, page) in rings {
                if numa == "on" && home != "-" {
                    assert_eq!((mode.as_str(), &nodes, &page), ("1", &home, &home), "{out}");
                } else {
                    assert_eq!(mode, "0", "{numa}: {out}");
                }
            }
        }
    }
}
