//! Transfer modes (inline, pipelined, single copy) and waiting modes, with real processes.

mod common;
use common::*;
use std::process::Command;

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

/// A sender waiting for its single-copy message copies part of it into the receiver's buffer
/// (volley_shm::coop); refused, it leaves the chunk to the receiver; off, the receiver copies
/// alone. The data is checked each time.
#[test]
fn a_waiting_sender_helps_copy_and_nothing_is_lost_when_it_cannot() {
    // 8 bytes first: the peer has said it can single copy by the time the large ones go.
    let sizes = ["8", "65537", "131073", "1048579", "13631493"];
    let mut args = vec!["-n", "2", CHECK, "pingpong"];
    args.extend_from_slice(&sizes);
    for (var, val) in [
        ("VOLLEY_SINGLE_COPY_HELP", "auto"),
        ("VOLLEY_SIMULATE_HELP_REFUSAL", "1"),
        ("VOLLEY_SINGLE_COPY_HELP", "off"),
    ] {
        let env = [
            ("VOLLEY_SINGLE_COPY_THRESHOLD", "4096"),
            ("VOLLEY_SINGLE_COPY_MAX", "1000000000"),
            ("VOLLEY_SINGLE_COPY_HELP_FROM", "0"),
            (var, val),
        ];
        let (out, err) = run_counted(&args, &env);
        assert_eq!(
            out.matches(" ok").count(),
            sizes.len(),
            "{var}={val}: {out}"
        );
        assert_eq!(counter(&err, "single_copy_recvs"), 24, "{err}");
        let chunks = counter(&err, "chunks_helped");
        match val {
            "auto" => assert!(chunks > 0, "no sender helped: {err}"),
            _ => assert_eq!(chunks, 0, "{var}={val}: {err}"),
        }
    }
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
        g6.contains("hierarchical from 0 B")
            && g6.contains("ring from 4097 B")
            && !g6.contains("recursive"),
        "{g6}"
    );
    let g6 = line(&out, "allgather", "6 ranks, one host");
    assert!(
        g6.contains("shm from 0 B") && g6.contains("ring from 4097 B"),
        "{g6}"
    );
    let t8 = line(&out, "alltoall", "8 ranks, several hosts");
    assert!(
        t8.contains("bruck from 0 B") && t8.contains("linear from 257 B"),
        "{t8}"
    );
    // In the segment while a rank's blocks for every rank fit its slot (4 KiB / 8).
    let t8 = line(&out, "alltoall", "8 ranks, one host");
    assert!(
        t8.contains("shm from 0 B") && t8.contains("linear from 513 B"),
        "{t8}"
    );
    let g8 = line(&out, "gather", "8 ranks, one host");
    assert!(
        g8.contains("shm from 0 B") && g8.contains("linear from 4097 B"),
        "{g8}"
    );
    let s8 = line(&out, "scatter", "8 ranks, one host");
    assert!(
        s8.contains("shm from 0 B") && s8.contains("linear from 513 B"),
        "{s8}"
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
        check_idle_2s(&ok(o), mode);
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
    // 32 MiB through the ring (single copy off: by default this size goes by it): 32 times
    // the ring.
    let ring = [("VOLLEY_SINGLE_COPY", "off")];
    let out = ok(volley(
        &["-n", "2", CHECK, "overlap", "33554432", "20000", "thread"],
        &ring,
    ));
    assert!(out.contains("completed_during_compute=true"), "{out}");
    // Without it nothing moves the message while the application computes: the request is
    // still incomplete after a second of computation (and completes in wait()).
    let out = ok(volley(
        &["-n", "2", CHECK, "overlap", "33554432", "1000"],
        &ring,
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

#[test]
fn volley_tune_writes_the_profile_that_runs_use_and_a_bad_profile_is_ignored_with_a_warning() {
    let dir = std::env::temp_dir().join(format!("volley-tune-test-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let cache = dir.join("cache");
    let path = cache.join("volley").join("profile");
    // Measured and written where volley looks by default ($XDG_CACHE_HOME/volley/profile).
    let o = Command::new(VOLLEY)
        .args([
            "tune",
            "--sizes",
            "16K,256K",
            "--budget-ms",
            "5",
            "--reps",
            "1",
        ])
        .env_remove("VOLLEY_PROFILE")
        .env("XDG_CACHE_HOME", &cache)
        .output()
        .unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(
        out.contains(&format!("profile written to {}", path.display())),
        "{out}"
    );
    let tuned = volley::profile::Profile::parse(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let sizes: Vec<usize> = tuned.points.iter().map(|p| p.size).collect();
    assert_eq!(sizes, [16384, 262144]);
    for p in &tuned.points {
        for t in [
            p.pipe_hot_us,
            p.single_hot_us,
            p.pipe_cold_us,
            p.single_cold_us,
        ] {
            assert!(t > 0.0, "{p:?}");
        }
    }
    assert_eq!(
        (tuned.single_copy_min, tuned.single_copy_max),
        volley::profile::choose_range(&tuned.points)
    );
    assert_eq!(
        tuned.cpus, "0,1",
        "volley run binds the two ranks to a core each"
    );
    // volley info names it and its figures.
    let info = |env: &[(&str, &std::ffi::OsStr)]| {
        let o = Command::new(VOLLEY)
            .arg("info")
            .env_remove("VOLLEY_PROFILE")
            .envs(env.iter().copied())
            .output()
            .unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).into_owned()
    };
    let shown = info(&[("XDG_CACHE_HOME", cache.as_os_str())]);
    assert!(
        shown.contains(&format!("profile         {}: made", path.display())),
        "{shown}"
    );
    assert!(shown.contains("16384 B one-way: pipelined"), "{shown}");

    // A job follows its profile: single copy from 4 KiB up to (not including) 1 MiB.
    let mut window = tuned.clone();
    window.single_copy_min = 4096;
    window.single_copy_max = 1 << 20;
    std::fs::write(&path, window.to_text()).unwrap();
    let pingpong = [
        "-n", "2", CHECK, "pingpong", "0", "4096", "65537", "1048579",
    ];
    let cache_env = cache.to_str().unwrap();
    let run = |env: &[(&str, &str)]| {
        let mut c = common::volley_command(&pingpong, &[("VOLLEY_COUNTERS", "1")]);
        c.env_remove("VOLLEY_PROFILE")
            .env("XDG_CACHE_HOME", cache_env);
        let o = c.envs(env.iter().copied()).output().unwrap();
        let (out, err) = text(&o);
        assert!(o.status.success(), "{env:?}\n{out}\n{err}");
        assert_eq!(out.matches(" ok").count(), 4, "{out}");
        err
    };
    let err = run(&[]);
    // 4096 and 65537 bytes by single copy, 1 MiB + 3 above the range through the ring: 3
    // rounds x 2 directions each.
    assert_eq!(counter(&err, "single_copy_sends"), 12, "{err}");
    assert_eq!(counter(&err, "pipelined_sends"), 6, "{err}");
    assert!(!err.contains("ignoring"), "{err}");
    let shown = info(&[("XDG_CACHE_HOME", cache.as_os_str())]);
    assert!(
        shown.contains("messages of 4096 bytes up to 1048576 (not included) (from the profile)"),
        "{shown}"
    );
    // The environment overrides the profile.
    let err = run(&[("VOLLEY_SINGLE_COPY_THRESHOLD", "1073741824")]);
    assert_eq!(counter(&err, "single_copy_sends"), 0, "{err}");
    // ...and VOLLEY_PROFILE=none ignores it: the default window (from 32 KiB, with senders that
    // help) applies, which takes 65537 and 1 MiB + 3 bytes by single copy and pipelines nothing.
    let default_window = 12;
    let err = run(&[("VOLLEY_PROFILE", "none")]);
    assert_eq!(counter(&err, "single_copy_sends"), default_window, "{err}");
    assert_eq!(counter(&err, "pipelined_sends"), 0, "{err}");
    // Without help, the default stops at 256 KiB: 1 MiB + 3 goes through the pipeline.
    let err = run(&[
        ("VOLLEY_PROFILE", "none"),
        ("VOLLEY_SINGLE_COPY_HELP", "off"),
    ]);
    assert_eq!(counter(&err, "single_copy_sends"), 6, "{err}");
    assert_eq!(counter(&err, "pipelined_sends"), 6, "{err}");

    // Corrupt, foreign, truncated or missing: the job runs on the defaults and the host says why
    // once (not once per rank).
    let foreign = window.to_text().replace(
        &format!("cpu_model = \"{}\"", tuned.hardware.cpu_model),
        "cpu_model = \"Imaginary CPU 9000\"",
    );
    let text_full = window.to_text();
    let truncated = &text_full[..text_full.find("single_copy_min").unwrap()];
    let future = text_full.replace("format = 1", "format = 7");
    for (content, why) in [
        (
            &b"\x7fELF\x02\x01\x01 not a profile"[..],
            "expected `key = value`",
        ),
        (&b"format = 1\n\xff\xfe"[..], "not text"),
        (&b"single_copy_min = 4096\n"[..], "no `format` line"),
        (foreign.as_bytes(), "made on another machine"),
        (truncated.as_bytes(), "incomplete"),
        (future.as_bytes(), "format 7"),
    ] {
        std::fs::write(&path, content).unwrap();
        let err = run(&[]);
        assert_eq!(
            err.matches("ignoring the profile").count(),
            1,
            "{why}: {err}"
        );
        assert!(
            err.contains(why) && err.contains("volley tune"),
            "{why}: {err}"
        );
        assert_eq!(
            counter(&err, "single_copy_sends"),
            default_window,
            "{why}: {err}"
        );
        assert_eq!(counter(&err, "pipelined_sends"), 0, "{why}: {err}");
        let shown = info(&[("XDG_CACHE_HOME", cache.as_os_str())]);
        assert!(shown.contains(why), "{why}: {shown}");
    }
    let missing = dir.join("no-such-profile");
    let err = run(&[("VOLLEY_PROFILE", missing.to_str().unwrap())]);
    assert!(err.contains("cannot read it"), "{err}");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// Issue 14, point 5: each ring's pages are allocated on its receiver's NUMA node (a
/// preferred-node policy set before the segment's memory is reserved). The development machine
/// has one node, so `VOLLEY_NUMA=on` asks for the placement there too: the policy is then in
/// force on every ring (and the pages are on the receiver's node); with `off`, and by default on
/// one node, the kernel's default policy is.
#[test]
fn each_ring_lives_on_its_receivers_numa_node() {
    for (numa, bind) in [
        ("on", "core"),
        ("on", "none"),
        ("off", "core"),
        ("auto", "core"),
    ] {
        let o = volley(
            &["-n", "3", "--bind-to", bind, CHECK, "numa"],
            &[("VOLLEY_NUMA", numa)],
        );
        let (out, err) = text(&o);
        assert!(o.status.success(), "{numa} {bind}: {out}\n{err}");
        let report = numa_report(&out);
        assert_eq!(report.len(), 3, "{out}");
        let several = volley_sys::numa::nodes_online().len() > 1;
        for (home, rings) in report {
            assert_eq!(rings.len(), 3, "{out}");
            for (mode, nodes, page) in rings {
                let placed = numa == "on" || (numa == "auto" && several);
                if placed && home != "-" {
                    assert_eq!(
                        (mode.as_str(), &nodes),
                        ("1", &home),
                        "{numa} {bind}: {out}"
                    );
                    assert_eq!(page, home, "{numa} {bind}: the page is elsewhere: {out}");
                } else {
                    assert_eq!(mode, "0", "{numa} {bind}: placed anyway: {out}");
                }
            }
        }
        assert!(!err.contains("warning"), "{err}");
    }
    let o = volley(&["-n", "2", CHECK, "numa"], &[("VOLLEY_NUMA", "sometimes")]);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("VOLLEY_NUMA") && err.contains("auto, on or off"),
        "{err}"
    );
}
