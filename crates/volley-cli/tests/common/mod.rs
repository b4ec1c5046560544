//! Helpers for the end-to-end tests: run `volley run` with real processes, with a watchdog.
#![allow(dead_code)]

pub mod hosts;
pub mod netpipe;

use std::process::{Command, Output, Stdio};

pub const VOLLEY: &str = env!("CARGO_BIN_EXE_volley");
pub const CHECK: &str = env!("CARGO_BIN_EXE_volley-check");

/// Runs `volley ARGS`; `--timeout 300` is added as a watchdog so that a bug fails the test
/// instead of hanging it (it bounds the run, it does not measure it).
pub fn volley(args: &[&str], env: &[(&str, &str)]) -> Output {
    volley_command(args, env).output().expect("start volley")
}

/// The command `volley` runs (not started), for a test that starts it in the background.
pub fn volley_command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut full = vec!["run", "--timeout", "300"];
    full.extend_from_slice(args);
    let mut c = Command::new(VOLLEY);
    c.args(&full).stdin(Stdio::null());
    // No machine profile (`volley tune`) from the home directory changes the transfer modes a
    // test expects; a test of profiles names one.
    c.env("VOLLEY_PROFILE", "none");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Asserts success and returns stdout.
pub fn ok(o: Output) -> String {
    let (out, err) = text(&o);
    assert!(
        o.status.success(),
        "volley run failed with {:?}\nstdout:\n{out}\nstderr:\n{err}",
        o.status
    );
    out
}

/// Sum of a counter over the ranks' VOLLEY_COUNTERS=1 reports on stderr.
pub fn counter(stderr: &str, name: &str) -> u64 {
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

/// Values of `key=` on the "result:" lines of `out`.
pub fn values(out: &str, key: &str) -> Vec<String> {
    out.lines()
        .filter(|l| l.contains("result:"))
        .filter_map(|l| {
            l.split_whitespace()
                .find_map(|w| w.strip_prefix(&format!("{key}=")).map(str::to_string))
        })
        .collect()
}

/// Whether any live process maps or holds a descriptor to the job segment with this token.
pub fn segment_alive(token: &str) -> bool {
    let needle = format!("volley-{token}");
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let pid = p.file_name();
        if !pid.to_string_lossy().chars().all(|c| c.is_ascii_digit()) {
            continue;
        }
        let maps = std::fs::read_to_string(p.path().join("maps")).unwrap_or_default();
        if maps.contains(&needle) {
            return true;
        }
        if let Ok(fds) = std::fs::read_dir(p.path().join("fd")) {
            for fd in fds.flatten() {
                if let Ok(l) = std::fs::read_link(fd.path()) {
                    if l.to_string_lossy().contains(&needle) {
                        return true;
                    }
                }
            }
        }
    }
    false
}

/// Entries of /dev/shm whose name mentions volley.
pub fn dev_shm_volley_entries() -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.flatten()
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains("volley"))
                .collect()
        })
        .unwrap_or_default()
}

/// One ring into a rank as `volley-check numa` reports it: policy mode, nodes, node of its first
/// page.
pub type RingNuma = (String, String, String);

/// The rings into each rank as `volley-check numa` reports them, one per local sender, with the
/// rank's home node.
pub fn numa_report(out: &str) -> Vec<(String, Vec<RingNuma>)> {
    let homes = values(out, "home");
    let rings = values(out, "rings");
    assert_eq!(homes.len(), rings.len(), "{out}");
    homes
        .into_iter()
        .zip(rings)
        .map(|(h, r)| {
            let rings = r
                .split(',')
                .map(|x| {
                    let f: Vec<&str> = x.split(':').collect();
                    assert_eq!(f.len(), 3, "{out}");
                    (f[0].to_string(), f[1].to_string(), f[2].to_string())
                })
                .collect();
            (h, rings)
        })
        .collect()
}

/// Checks what `volley-check idle 2000` printed: the message came after its 2 s, and the rank
/// that waited for it used under 5% of a core meanwhile (a generous bound on a sleeping wait).
pub fn check_idle_2s(out: &str, what: &str) {
    let waited: u64 = values(out, "waited_ms")[0].parse().unwrap();
    let cpu: f64 = values(out, "cpu_fraction")[0].parse().unwrap();
    assert!(
        waited >= 1900,
        "{what}: the message came after {waited} ms, not 2 s:\n{out}"
    );
    assert!(
        cpu < 0.05,
        "{what}: a rank waiting 2 s used {:.1}% of a core:\n{out}",
        cpu * 100.0
    );
}
