//! Transfer modes (inline, pipelined, single copy) and waiting modes, with real processes.

mod common;
use common::*;
use std::process::Command;

/// Sum of a counter over the ranks' VOLLEY_COUNTERS=1 reports on stderr.
fn counter(stderr: &str, name: &str) -> u64 {
    stderr
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            (w.next() == Some(name))
                .then(|| w.next()?.parse::<u64>().ok())
                .flatten()
        })
        .sum()
}

fn run_counted(args: &[&str], env: &[(&str, &str)]) -> (String, String) {
    let mut env = env.to_vec();
    env.push(("VOLLEY_COUNTERS", "1"));
    let o = volley(args, &env);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{args:?} {env:?} failed\n{out}\n{err}");
    (out, err)
}

const SIZES: [&str; 11] = [
    "0", "1", "7", "8", "63", "64", "4095", "4096", "65537", "1048579", "67108864",
];

#[test]
fn single_copy_delivers_every_size_class() {
    let mut args = vec!["-n", "2", CHECK, "pingpong"];
    args.extend_from_slice(&SIZES);
    let (out, err) = run_counted(&args, &[("VOLLEY_SINGLE_COPY_THRESHOLD", "4096")]);
    assert_eq!(out.matches(" ok").count(), SIZES.len(), "{out}");
    // Sizes from 4096 on went by single copy: 4 sizes x 3 rounds x 2 directions.
    assert_eq!(counter(&err, "single_copy_recvs"), 24, "{err}");
    assert_eq!(counter(&err, "single_copy_sends"), 24, "{err}");
    assert_eq!(counter(&err, "pipelined_sends"), 0, "{err}");
}

#[test]
fn pipelined_copy_delivers_every_size_class() {
    let mut args = vec!["-n", "2", CHECK, "pingpong"];
    args.extend_from_slice(&SIZES);
    let (out, err) = run_counted(&args, &[("VOLLEY_SINGLE_COPY", "off")]);
    assert_eq!(out.matches(" ok").count(), SIZES.len(), "{out}");
    assert_eq!(counter(&err, "single_copy_recvs"), 0, "{err}");
    // 65537, 1 MiB + 3 and 64 MiB are larger than a record: 3 sizes x 3 rounds x 2 directions.
    assert_eq!(counter(&err, "pipelined_sends"), 18, "{err}");
    assert!(counter(&err, "inline_sends") >= 48, "{err}");
}

#[test]
fn mixed_sizes_across_both_thresholds_keep_order() {
    // alltoall sends 0, 8, 100, 4096 (inline), 70000 (pipelined) and 300000 (single copy) bytes
    // interleaved, and checks per-sender order and every byte.
    let (out, err) = run_counted(
        &["-n", "4", CHECK, "alltoall", "60"],
        &[("VOLLEY_SINGLE_COPY_THRESHOLD", "100000")],
    );
    assert_eq!(values(&out, "received"), vec!["240"; 4], "{out}");
    for c in ["inline_sends", "pipelined_sends", "single_copy_recvs"] {
        assert!(counter(&err, c) > 0, "no {c}:\n{err}");
    }
    let (out, _) = run_counted(
        &["-n", "2", CHECK, "ports"],
        &[("VOLLEY_SINGLE_COPY_THRESHOLD", "100")],
    );
    assert!(out.contains("result: ports ok"), "{out}");
    let (out, _) = run_counted(
        &["-n", "4", CHECK, "active", "100"],
        &[("VOLLEY_SINGLE_COPY_THRESHOLD", "30000")],
    );
    assert!(out.contains("result: active handled=300 ok"), "{out}");
}

#[test]
fn without_single_copy_everything_goes_through_the_ring() {
    for (var, val, why) in [
        (
            "VOLLEY_SINGLE_COPY",
            "off",
            "disabled: VOLLEY_SINGLE_COPY=off",
        ),
        (
            "VOLLEY_SIMULATE_SINGLE_COPY_REFUSAL",
            "1",
            "unavailable: process_vm_readv refused: Operation not permitted",
        ),
    ] {
        let env = [("VOLLEY_SINGLE_COPY_THRESHOLD", "4096"), (var, val)];
        let (out, err) = run_counted(
            &[
                "-n", "2", CHECK, "pingpong", "0", "4096", "1048579", "67108864",
            ],
            &env,
        );
        assert_eq!(out.matches(" ok").count(), 4, "{out}");
        let (out, err2) = run_counted(&["-n", "4", CHECK, "alltoall", "40"], &env);
        assert_eq!(values(&out, "received"), vec!["160"; 4], "{out}");
        assert_eq!(
            counter(&err, "single_copy_sends") + counter(&err2, "single_copy_sends"),
            0,
            "{var}"
        );
        assert!(counter(&err, "pipelined_sends") > 0);
        // volley info says which mode is off and why.
        let o = Command::new(VOLLEY).arg("info").envs(env).output().unwrap();
        let info = String::from_utf8_lossy(&o.stdout);
        assert!(o.status.success());
        let line = info
            .lines()
            .find(|l| l.trim_start().starts_with("single copy"))
            .unwrap_or("");
        assert!(line.contains(why), "{var}: {line:?}\n{info}");
    }
}

/// `volley info` lists the algorithm each collective runs by size (with the exact switch points
/// of `volley::collectives`), and what VOLLEY_COLL_* forces; a bad value is named there too.
#[test]
fn volley_info_lists_the_collective_algorithms_by_size() {
    let info = |env: &[(&str, &str)]| {
        let o = Command::new(VOLLEY)
            .arg("info")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let out = info(&[]);
    // `which`: "8 ranks, one host", "8 ranks, several hosts", or "64 ranks" where the placement
    // changes nothing.
    let line = |out: &str, coll: &str, which: &str| -> String {
        let mut in_coll = false;
        for l in out.lines() {
            if l.starts_with("  ") && !l.starts_with("   ") {
                in_coll = l.trim_start().starts_with(&format!("{coll} ("));
            } else if in_coll && l.trim_start().starts_with(&format!("{which}:")) {
                return l.to_string();
            }
        }
        panic!("no line for {coll} at {which}:\n{out}")
    };
    let b8 = line(&out, "bcast", "8 ranks, several hosts");
    assert!(
        b8.contains("hierarchical from 0 B")
            && b8.contains("binomial from 4097 B")
            && b8.contains("scatter_ring from 12 KiB"),
        "{b8}"
    );
    let b8 = line(&out, "bcast", "8 ranks, one host");
    assert!(
        b8.contains("shm from 0 B") && b8.contains("binomial from 4097 B"),
        "{b8}"
    );
    let a8 = line(&out, "allreduce", "8 ranks, one host");
    assert!(
        a8.contains("shm from 0 B") && a8.contains("rabenseifner from 4097 B"),
        "{a8}"
    );
    let a64 = line(&out, "allreduce", "64 ranks, one host");
    assert!(
        a64.contains("recursive_doubling from 0 B") && a64.contains("rabenseifner from 2049 B"),
        "{a64}"
    );
    let g6 = line(&out, "allgather", "6 ranks, several hosts");
    assert!(
        g6.contains("ring from 0 B") && !g6.contains("recursive"),
        "{g6}"
    );
    let t8 = line(&out, "alltoall", "8 ranks");
    assert!(
        t8.contains("bruck from 0 B") && t8.contains("linear from 257 B"),
        "{t8}"
    );
    let barrier = line(&out, "barrier", "4 ranks, one host");
    assert!(barrier.contains("shm from 0 B"), "{barrier}");
    let forced = info(&[("VOLLEY_COLL_ALLTOALL", "pairwise")]);
    assert!(
        line(&forced, "alltoall", "4 ranks").contains("pairwise from 0 B (forced)"),
        "{forced}"
    );
    let bad = info(&[("VOLLEY_COLL_ALLTOALL", "nonesuch")]);
    assert!(
        bad.contains("VOLLEY_COLL_ALLTOALL=\"nonesuch\" is not an algorithm of alltoall"),
        "{bad}"
    );
}

#[test]
fn volley_info_names_every_mode_and_its_state() {
    let o = Command::new(VOLLEY).arg("info").output().unwrap();
    assert!(o.status.success());
    let info = String::from_utf8_lossy(&o.stdout);
    for mode in [
        "inline copy",
        "pipelined copy",
        "single copy",
        "busy",
        "block",
        "spin",
    ] {
        let line = info
            .lines()
            .find(|l| l.trim_start().starts_with(mode))
            .unwrap_or_else(|| panic!("no line for {mode}:\n{info}"));
        assert!(
            line.contains("available") || line.contains("disabled"),
            "{line}"
        );
    }
    assert!(info.contains("<- in force"), "{info}");
    for setting in [
        "VOLLEY_WAIT",
        "VOLLEY_SHM_RING_BYTES",
        "VOLLEY_SINGLE_COPY_THRESHOLD",
    ] {
        assert!(info.contains(setting), "{setting} missing:\n{info}");
    }
    assert!(
        info.contains("cores") && info.contains("/dev/shm"),
        "{info}"
    );
    let o = Command::new(VOLLEY)
        .arg("info")
        .env("VOLLEY_WAIT", "block")
        .env("VOLLEY_SPIN_US", "20")
        .output()
        .unwrap();
    let info = String::from_utf8_lossy(&o.stdout);
    let line = info
        .lines()
        .find(|l| l.trim_start().starts_with("VOLLEY_WAIT "))
        .unwrap();
    assert!(
        line.contains("Block") && line.contains("(environment)"),
        "{line}"
    );
    let o = Command::new(VOLLEY)
        .arg("info")
        .env("VOLLEY_WAIT", "sometimes")
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(String::from_utf8_lossy(&o.stderr).contains("must be busy, block or spin"));
}

#[test]
fn a_waiting_rank_in_block_or_spin_mode_costs_almost_no_cpu_and_still_wakes() {
    for mode in ["block", "spin"] {
        let o = volley(
            &["-n", "2", CHECK, "idle", "2000"],
            &[("VOLLEY_WAIT", mode)],
        );
        let out = ok(o);
        let waited: u64 = values(&out, "waited_ms")[0].parse().unwrap();
        let cpu: f64 = values(&out, "cpu_fraction")[0].parse().unwrap();
        assert!(
            waited >= 1900,
            "{mode}: the message came after {waited} ms, not 2 s:\n{out}"
        );
        assert!(
            cpu < 0.05,
            "{mode}: a rank waiting 2 s used {:.1}% of a core",
            cpu * 100.0
        );
    }
    // The measurement itself sees a spinning rank: busy-poll burns its core. Unbound, so that
    // the kernel can move it off a CPU where other tests' ranks are bound.
    let out = ok(volley(
        &["-n", "2", "--bind-to", "none", CHECK, "idle", "500"],
        &[("VOLLEY_WAIT", "busy")],
    ));
    let cpu: f64 = values(&out, "cpu_fraction")[0].parse().unwrap();
    assert!(
        cpu > 0.2,
        "busy-poll measured at {cpu}: the CPU measurement does not work"
    );
}

#[test]
fn with_the_progress_thread_a_large_isend_completes_during_computation() {
    // 32 MiB through the ring (single copy is off by default): 32 times the ring.
    let out = ok(volley(
        &["-n", "2", CHECK, "overlap", "33554432", "20000", "thread"],
        &[],
    ));
    assert!(out.contains("completed_during_compute=true"), "{out}");
    // Without it nothing moves the message while the application computes: the request is
    // still incomplete after a second of computation (and completes in wait()).
    let out = ok(volley(
        &["-n", "2", CHECK, "overlap", "33554432", "1000"],
        &[],
    ));
    assert!(out.contains("completed_during_compute=false"), "{out}");
}

/// The same for a matched message, which goes by rendezvous: the thread writes the request to
/// send, reads the receiver's answer and streams the data while the application computes
/// (with single copy the receiver copies it and the thread reads the answer); without the
/// thread nothing answers the receiver until the application calls volley again.
#[test]
fn with_the_progress_thread_a_large_matched_isend_completes_during_computation() {
    for env in [&[][..], &[("VOLLEY_SINGLE_COPY_THRESHOLD", "65536")][..]] {
        let out = ok(volley(
            &[
                "-n", "2", CHECK, "overlap", "33554432", "20000", "thread", "matched",
            ],
            env,
        ));
        assert!(
            out.contains("completed_during_compute=true"),
            "{env:?}: {out}"
        );
    }
    let out = ok(volley(
        &["-n", "2", CHECK, "overlap", "33554432", "1000", "matched"],
        &[],
    ));
    assert!(out.contains("completed_during_compute=false"), "{out}");
}

#[test]
fn the_progress_thread_keeps_order_and_loses_nothing() {
    let env = [("VOLLEY_PROGRESS_THREAD", "1"), ("VOLLEY_COUNTERS", "1")];
    let o = volley(&["-n", "4", CHECK, "alltoall", "60"], &env);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(values(&out, "received"), vec!["240"; 4], "{out}");
    // Here the ring is full when the isends start (the receiver sleeps), so the thread must
    // finish at least one of them.
    let o = volley(&["-n", "2", CHECK, "backpressure"], &env);
    let (out, err) = text(&o);
    assert!(
        o.status.success() && out.contains("result: backpressure"),
        "{out}\n{err}"
    );
    assert!(
        counter(&err, "progress_thread_sends") > 0,
        "the thread did no work:\n{err}"
    );
    let out = ok(volley(&["-n", "2", CHECK, "ports"], &env));
    assert!(out.contains("result: ports ok"), "{out}");
    let mut args = vec!["-n", "2", CHECK, "pingpong"];
    args.extend_from_slice(&SIZES);
    let out = ok(volley(&args, &env));
    assert_eq!(out.matches(" ok").count(), SIZES.len(), "{out}");
}

#[test]
fn send_with_writes_in_place_and_keeps_order() {
    let out = ok(volley(&["-n", "2", CHECK, "send-with"], &[]));
    assert!(out.contains("result: send_with received=70 ok"), "{out}");
    assert!(out.contains("send_with writes one ring record"), "{out}");
}
