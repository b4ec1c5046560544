//! `volley run` as a launcher: exit codes, output, time-outs, signals, environment, pinning.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};

#[test]
fn exit_code_is_zero_only_if_every_rank_succeeded() {
    let o = volley(&["-n", "3", "sh", "-c", "exit 0"], &[]);
    assert_eq!(o.status.code(), Some(0));
    let o = volley(
        &[
            "-n",
            "3",
            "--keep-going",
            "sh",
            "-c",
            "[ $VOLLEY_RANK = 2 ] && exit 3; exit 0",
        ],
        &[],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(
        err.contains("rank 2") && err.contains("exited with code 3"),
        "{err}"
    );
}

#[test]
fn first_failure_decides_the_exit_code() {
    let o = volley(
        &[
            "-n",
            "2",
            "--keep-going",
            "sh",
            "-c",
            "if [ $VOLLEY_RANK = 0 ]; then exit 5; else sleep 0.5; exit 6; fi",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(5));
}

#[test]
fn tag_output_prefixes_each_line_with_its_rank() {
    let out = ok(volley(
        &[
            "-n",
            "3",
            "--tag-output",
            "sh",
            "-c",
            "echo one $VOLLEY_RANK; echo two $VOLLEY_RANK; echo err >&2",
        ],
        &[],
    ));
    for r in 0..3 {
        assert!(out.contains(&format!("[{r}] one {r}\n")), "{out}");
        assert!(out.contains(&format!("[{r}] two {r}\n")), "{out}");
    }
    let o = volley(
        &["-n", "2", "--tag-output", "sh", "-c", "echo oops >&2"],
        &[],
    );
    let (_, err) = text(&o);
    assert!(
        err.contains("[0] oops") && err.contains("[1] oops"),
        "{err}"
    );
}

#[test]
fn timeout_stops_the_job_with_124() {
    let o = Command::new(VOLLEY)
        .args([
            "run",
            "-n",
            "2",
            "--timeout",
            "1",
            "--grace",
            "1",
            "sleep",
            "100",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(124), "{err}");
    assert!(err.contains("timed out after 1 s"), "{err}");
}

#[test]
fn sigterm_and_sigint_are_forwarded_to_every_rank() {
    for (sig, name) in [(15, "TERM"), (2, "INT")] {
        let script = format!(
            "trap 'echo got {name}; exit 0' {name}; echo ready; while :; do sleep 0.05; done"
        );
        let mut child = Command::new(VOLLEY)
            .args([
                "run",
                "--timeout",
                "60",
                "-n",
                "2",
                "--tag-output",
                "sh",
                "-c",
                &script,
            ])
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut ready = 0;
        while ready < 2 {
            if lines.next().unwrap().unwrap().ends_with("ready") {
                ready += 1;
            }
        }
        volley_sys::kill(child.id(), sig).unwrap();
        let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
        let st = child.wait().unwrap();
        assert!(rest.contains(&format!("[0] got {name}")), "{rest:?}");
        assert!(rest.contains(&format!("[1] got {name}")), "{rest:?}");
        assert_eq!(st.code(), Some(0), "ranks handled the signal and exited 0");
    }
}

#[test]
fn environment_passes_through_and_rank_variables_are_set() {
    let out = ok(volley(
        &[
            "-n",
            "3",
            "--tag-output",
            "sh",
            "-c",
            "echo v=$MY_VAR r=$VOLLEY_RANK s=$VOLLEY_SIZE l=$VOLLEY_LOCAL_RANK",
        ],
        &[("MY_VAR", "kept")],
    ));
    for r in 0..3 {
        assert!(
            out.contains(&format!("[{r}] v=kept r={r} s=3 l={r}")),
            "{out}"
        );
    }
}

#[test]
fn cpus_pins_ranks_round_robin() {
    let cpus = volley_sys::allowed_cpus();
    let list = format!("{},{}", cpus[0], cpus[cpus.len() - 1]);
    let out = ok(volley(
        &[
            "-n",
            "3",
            "--tag-output",
            "--cpus",
            &list,
            "sh",
            "-c",
            "grep Cpus_allowed_list /proc/self/status",
        ],
        &[],
    ));
    assert!(
        out.contains(&format!("[0] Cpus_allowed_list:\t{}\n", cpus[0])),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "[1] Cpus_allowed_list:\t{}\n",
            cpus[cpus.len() - 1]
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!("[2] Cpus_allowed_list:\t{}\n", cpus[0])),
        "{out}"
    );
    let o = volley(&["-n", "2", "--cpus", "0,99999", "true"], &[]);
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.contains("CPU 99999 is not available"),
        "{err}"
    );
}

/// A CPU list as /proc/self/status writes it ("0-3,8").
fn cpu_list(s: &str) -> Vec<usize> {
    let mut v = Vec::new();
    for part in s.trim().split(',') {
        match part.split_once('-') {
            Some((a, b)) => v.extend(a.parse::<usize>().unwrap()..=b.parse().unwrap()),
            None => v.push(part.parse().unwrap()),
        }
    }
    v
}

/// Each rank's allowed CPUs, from its own /proc/self/status, by rank.
fn bound_cpus(extra: &[&str], n: usize) -> Vec<Vec<usize>> {
    let np = n.to_string();
    let mut args = vec!["-n", &np, "--tag-output"];
    args.extend_from_slice(extra);
    args.extend(["sh", "-c", "grep Cpus_allowed_list /proc/self/status"]);
    let out = ok(volley(&args, &[]));
    (0..n)
        .map(|r| {
            let tag = format!("[{r}] Cpus_allowed_list:");
            let line = out
                .lines()
                .find_map(|l| l.strip_prefix(&tag))
                .unwrap_or_else(|| panic!("rank {r} did not report:\n{out}"));
            cpu_list(line)
        })
        .collect()
}

/// Issue 14, point 5: `volley run` binds each rank to one CPU by default, the first ranks to
/// distinct CPUs, wrapping around when there are more ranks than CPUs; `--bind-to socket` binds
/// each rank to every allowed CPU of a package; `--bind-to none` leaves the launcher's mask.
#[test]
fn ranks_are_bound_to_cores_by_default_and_as_bind_to_says() {
    let allowed = volley_sys::allowed_cpus();
    let n = allowed.len() + 1;
    let got = bound_cpus(&[], n);
    for (r, c) in got.iter().enumerate() {
        assert_eq!(c.len(), 1, "rank {r} bound to {c:?}");
        assert!(
            allowed.contains(&c[0]),
            "rank {r} on {c:?}, not in {allowed:?}"
        );
    }
    let mut first: Vec<usize> = got[..allowed.len()].iter().map(|c| c[0]).collect();
    first.sort_unstable();
    assert_eq!(first, allowed, "the first ranks share CPUs: {got:?}");
    assert_eq!(got[allowed.len()], got[0], "no wrap-around: {got:?}");
    assert_eq!(bound_cpus(&["--bind-to", "core"], n), got);

    for c in bound_cpus(&["--bind-to", "none"], 2) {
        assert_eq!(c, allowed);
    }

    let package = |cpu: usize| {
        std::fs::read_to_string(format!(
            "/sys/devices/system/cpu/cpu{cpu}/topology/physical_package_id"
        ))
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
    };
    for c in bound_cpus(&["--bind-to", "socket"], 2) {
        let p = package(c[0]);
        let want: Vec<usize> = allowed
            .iter()
            .copied()
            .filter(|&x| package(x) == p)
            .collect();
        assert_eq!(c, want, "bound to {c:?}, its package holds {want:?}");
    }
    let o = volley(&["-n", "1", "--bind-to", "board", "true"], &[]);
    assert!(!o.status.success());
    assert!(text(&o).1.contains("possible values"), "{}", text(&o).1);
}

#[test]
fn a_program_that_cannot_start_is_reported() {
    let o = volley(&["-n", "2", "/nonexistent/program"], &[]);
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(127));
    assert!(
        err.contains("cannot start") && err.contains("/nonexistent/program"),
        "{err}"
    );
}

#[test]
fn counters_are_collected_from_every_rank() {
    let o = volley(&["-n", "3", "--counters", CHECK, "alltoall", "20"], &[]);
    let (_, err) = text(&o);
    assert!(o.status.success(), "{err}");
    let row = |name: &str| -> Vec<String> {
        err.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row:\n{err}"))
            .split_whitespace()
            .skip(1)
            .map(str::to_string)
            .collect()
    };
    // Three ranks, then the total: each rank sent and received 20 x 3 messages.
    assert_eq!(row("msgs_sent")[..4], ["60", "60", "60", "180"]);
    assert_eq!(row("msgs_recvd")[..4], ["60", "60", "60", "180"]);
    assert_eq!(
        row("bytes_sent")[3],
        row("bytes_recvd")[3],
        "bytes sent and received differ"
    );
    // A rank that never closes its world has nothing to report, and says so.
    let o = volley(
        &[
            "-n",
            "2",
            "--keep-going",
            "--counters",
            CHECK,
            "killed-peer",
        ],
        &[],
    );
    let (_, err) = text(&o);
    assert!(
        err.contains("n/a") && err.contains("did not close its world"),
        "{err}"
    );
}

/// Durations and CPU lists that make no sense are refused before anything starts, with a
/// message that says what to give instead (they used to panic once the ranks ran, or be taken
/// as an immediate time-out, or allocate gigabytes).
#[test]
fn impossible_durations_and_cpu_numbers_are_clear_errors() {
    // Straight to the command: these fail before anything starts (no watchdog needed, and the
    // helper's own --timeout would clash with the one under test).
    let run = |args: &[&str]| {
        std::process::Command::new(VOLLEY)
            .arg("run")
            .args(args)
            .stdin(std::process::Stdio::null())
            .output()
            .expect("start volley")
    };
    for (opt, v) in [
        ("--timeout", "inf"),
        ("--timeout", "1e300"),
        ("--timeout", "0"),
        ("--timeout", "-5"),
        ("--timeout", "nan"),
        ("--grace", "inf"),
        ("--grace", "-1"),
    ] {
        let o = run(&["-n", "1", opt, v, "/bin/true"]);
        let (_, err) = text(&o);
        assert_eq!(o.status.code(), Some(2), "{opt} {v}: {err}");
        assert!(
            err.contains("number of seconds") && !err.contains("panicked"),
            "{opt} {v}: {err}"
        );
    }
    for cpus in ["0-18446744073709551615", "0-4294967295", "99999"] {
        let o = run(&["-n", "1", "--cpus", cpus, "/bin/true"]);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "--cpus {cpus}: {err}");
        assert!(
            err.contains("is not available") && !err.contains("panicked"),
            "--cpus {cpus}: {err}"
        );
    }
    // Sensible values still work, 0 s of grace included.
    let o = run(&["-n", "1", "--timeout", "30", "--grace", "0", "/bin/true"]);
    assert!(o.status.success(), "{}", text(&o).1);
}

/// Variables a launcher owns, left in the environment by an outer job or a shell, never reach
/// the ranks of a new job (issue 16, defect 9): a stale node list and agent socket made a job on
/// one host fail, or close an unrelated descriptor.
#[test]
fn stale_launcher_variables_in_the_environment_are_ignored() {
    let out = ok(volley(
        &["-n", "2", CHECK, "whoami"],
        &[
            ("VOLLEY_RANK_NODES", "garbage"),
            ("VOLLEY_BOOT_FD", "7"),
            ("VOLLEY_NODE_ID", "5"),
        ],
    ));
    assert_eq!(out.matches("result: rank=").count(), 2, "{out}");
    assert_eq!(values(&out, "node"), vec!["0", "0"], "{out}");
}

/// A job descriptor variable naming standard error (or input, or output) is refused with an
/// error that is still printed (issue 16, defect 9): the failed init used to take fd 2 over,
/// close it, and exit without a word.
#[test]
fn a_job_descriptor_naming_standard_error_is_refused_and_reported() {
    for (var, value) in [("VOLLEY_SHM_FD", "2"), ("VOLLEY_WAKE_FDS", "1")] {
        let mut c = Command::new(CHECK);
        c.arg("whoami").stdin(Stdio::null());
        for (k, v) in [
            ("VOLLEY_RANK", "0"),
            ("VOLLEY_SIZE", "1"),
            ("VOLLEY_JOB_TOKEN", "0000000000000001"),
            ("VOLLEY_SHM_FD", "9"),
            ("VOLLEY_WAKE_FDS", "10"),
        ] {
            c.env(k, v);
        }
        c.env(var, value);
        let o = c.output().expect("start volley-check");
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{var}={value}: {err}");
        assert!(
            err.contains(var) && err.contains("standard input, output or error"),
            "{var}={value}: {err}"
        );
    }
}

/// A bad setting of the user's is reported as such, not as a launcher's variable (issue 16,
/// defect 9: every environment error told the user to start the program with volley run, also
/// when volley run had started it).
#[test]
fn a_bad_setting_says_to_correct_it() {
    let o = volley(&["-n", "1", CHECK, "whoami"], &[("VOLLEY_WAIT", "bogus")]);
    let (_, err) = text(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("VOLLEY_WAIT=\"bogus\"") && err.contains("Correct VOLLEY_WAIT"),
        "{err}"
    );
    assert!(!err.contains("Start the program with"), "{err}");
}

/// Running out of file descriptors while starting ranks says so, with the limit and what to
/// change, not "check the program path" (issue 16, defect 9).
#[test]
fn running_out_of_descriptors_says_so() {
    let o = Command::new("sh")
        .args([
            "-c",
            "ulimit -n 50 && exec \"$@\"",
            "sh",
            VOLLEY,
            "run",
            "-n",
            "40",
        ])
        .args(["--tag-output", CHECK, "whoami"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success(), "{err}");
    assert!(err.contains("ulimit -n"), "{err}");
    assert!(!err.contains("program path"), "{err}");
}

/// While the ranks run, the launcher sleeps until a rank ends, a signal comes or a deadline
/// passes: it wakes at most about once a second, not every few milliseconds, so it does not take
/// the ranks' CPUs from them (a launcher polling every 2 ms preempted a rank 500 times a second).
/// The rank reads its launcher's context switches over one second of its own run.
#[test]
fn an_idle_launcher_does_not_wake_up() {
    let script = "s() { awk '/^voluntary_ctxt_switches/ {print $2}' /proc/$PPID/status; }; \
                  a=$(s); sleep 1; b=$(s); echo result: wakeups=$((b - a))";
    let o = Command::new(VOLLEY)
        .args(["run", "-n", "1", "--timeout", "60", "sh", "-c", script])
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    let n: u64 = values(&out, "wakeups")
        .first()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no count: {out}"));
    assert!(n <= 10, "the launcher woke {n} times in a second");
}
