//! Dead peers, leftovers and bad input: real processes, real signals, real shared memory.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

#[test]
fn sigkill_of_a_rank_gives_the_survivor_peer_lost_within_two_seconds() {
    let o = volley(&["-n", "2", "--keep-going", CHECK, "killed-peer"], &[]);
    let (out, err) = text(&o);
    let after: Vec<u64> = values(&out, "after_ms")
        .iter()
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!(after.len(), 1, "survivor did not report:\n{out}\n{err}");
    assert!(
        after[0] <= 2000,
        "peer-lost came {} ms after the last exchange",
        after[0]
    );
    assert!(out.contains("fate=Killed(9)"), "{out}");
    assert_eq!(o.status.code(), Some(128 + 9), "{err}");
    assert!(
        err.contains("rank 1") && err.contains("SIGKILL"),
        "launcher must name rank and signal:\n{err}"
    );
}

#[test]
fn by_default_a_failed_rank_stops_the_others() {
    let o = volley(
        &[
            "-n",
            "3",
            "--grace",
            "1",
            "sh",
            "-c",
            "if [ $VOLLEY_RANK = 1 ]; then kill -9 $$; fi; sleep 100",
        ],
        &[],
    );
    let (_, err) = text(&o);
    assert_eq!(o.status.code(), Some(137), "{err}");
    assert!(
        err.contains("rank 1") && err.contains("signal 9 (SIGKILL)"),
        "{err}"
    );
    assert!(err.contains("stopping the other ranks"), "{err}");
}

/// Kills a job's processes when a test ends, also when it fails, so nothing lingers.
struct Reaper(Vec<u32>);

impl Drop for Reaper {
    fn drop(&mut self) {
        for p in &self.0 {
            let _ = volley_sys::kill(*p, 9);
        }
    }
}

/// Starts `volley run ... volley-check hold`, waits for every rank to report, and returns the
/// launcher, the ranks' pids and the job token.
fn start_holding_job(n: usize, env: &[(&str, &str)]) -> (std::process::Child, Vec<u32>, String) {
    start_holding(n, env, &[CHECK, "hold"])
}

/// Like `start_holding_job`, with the program line given (e.g. through a wrapper).
fn start_holding(
    n: usize,
    env: &[(&str, &str)],
    program: &[&str],
) -> (std::process::Child, Vec<u32>, String) {
    let mut c = Command::new(VOLLEY);
    c.args(["run", "--timeout", "300", "-n", &n.to_string()])
        .args(program)
        .stdout(Stdio::piped())
        .stdin(Stdio::null());
    for (k, v) in env {
        c.env(k, v);
    }
    let mut child = c.spawn().unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let mut pids = Vec::new();
    let mut token = String::new();
    while pids.len() < n {
        let l = lines.next().expect("rank output").unwrap();
        pids.push(values(&l, "pid")[0].parse().unwrap());
        token = values(&l, "token")[0].clone();
    }
    (child, pids, token)
}

fn wait_gone(pids: &[u32]) {
    let t = Instant::now();
    while pids
        .iter()
        .any(|p| std::path::Path::new(&format!("/proc/{p}")).exists())
    {
        // Zombies of the launcher count as gone once reaped; give the kernel time.
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "processes {pids:?} did not end"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn nothing_left_after_normal_exit() {
    for dir in [None, Some("/dev/shm")] {
        let env: Vec<(&str, &str)> = dir.map(|d| vec![("VOLLEY_SHM_DIR", d)]).unwrap_or_default();
        let before = dev_shm_volley_entries();
        let out = ok(volley(&["-n", "3", CHECK, "alltoall", "20"], &env));
        assert_eq!(values(&out, "received").len(), 3);
        let t = values(&ok(volley(&["-n", "2", CHECK, "whoami"], &env)), "token");
        assert!(
            !segment_alive(&t[0]),
            "segment of job {} still mapped",
            t[0]
        );
        let after = dev_shm_volley_entries();
        let new: Vec<_> = after.iter().filter(|e| !before.contains(e)).collect();
        assert!(new.is_empty(), "left in /dev/shm: {new:?}");
    }
}

#[test]
fn nothing_left_after_kill_9_of_every_rank_and_the_launcher() {
    for dir in [None, Some("/dev/shm")] {
        let env: Vec<(&str, &str)> = dir.map(|d| vec![("VOLLEY_SHM_DIR", d)]).unwrap_or_default();
        let before = dev_shm_volley_entries();
        let (mut launcher, pids, token) = start_holding_job(3, &env);
        let _reaper = Reaper(pids.iter().copied().chain([launcher.id()]).collect());
        assert!(
            segment_alive(&token),
            "the running job should map its segment"
        );
        // The launcher stops the others as soon as it sees the first killed rank, so a rank may
        // be gone before its own kill: that is the point, not an error.
        for p in pids.iter().copied().chain([launcher.id()]) {
            if let Err(e) = volley_sys::kill(p, 9) {
                assert_eq!(e.raw_os_error(), Some(libc::ESRCH), "kill -9 of {p}: {e}");
            }
        }
        launcher.wait().unwrap();
        wait_gone(&pids);
        assert!(
            !segment_alive(&token),
            "segment of job {token} survived kill -9"
        );
        let new: Vec<_> = dev_shm_volley_entries()
            .into_iter()
            .filter(|e| !before.contains(e))
            .collect();
        assert!(new.is_empty(), "left in /dev/shm: {new:?}");
    }
}

#[test]
fn kill_9_of_the_launcher_alone_takes_the_ranks_down() {
    let (mut launcher, pids, token) = start_holding_job(2, &[]);
    let _reaper = Reaper(pids.iter().copied().chain([launcher.id()]).collect());
    volley_sys::kill(launcher.id(), 9).unwrap();
    launcher.wait().unwrap();
    wait_gone(&pids);
    assert!(!segment_alive(&token));
}

/// The ranks run through a wrapper (a shell that starts the real program as its child), so only
/// the wrapper is the launcher's child: kill -9 of the launcher still takes the real programs
/// down (each watches the launcher), and nothing of the job is left (issue 16, defect 4b).
#[test]
fn kill_9_of_the_launcher_takes_down_ranks_started_through_a_wrapper() {
    let script = format!("{CHECK} hold; echo the wrapper outlived its rank");
    let (mut launcher, pids, token) = start_holding(2, &[], &["sh", "-c", &script]);
    let _reaper = Reaper(pids.iter().copied().chain([launcher.id()]).collect());
    // The real programs are not the launcher's children.
    for p in &pids {
        let stat = std::fs::read_to_string(format!("/proc/{p}/stat")).unwrap();
        let ppid: u32 = stat
            .rsplit(") ")
            .next()
            .unwrap()
            .split_whitespace()
            .nth(1)
            .unwrap()
            .parse()
            .unwrap();
        assert_ne!(ppid, launcher.id(), "rank {p} is the launcher's own child");
    }
    volley_sys::kill(launcher.id(), 9).unwrap();
    launcher.wait().unwrap();
    wait_gone(&pids);
    assert!(!segment_alive(&token));
}

#[test]
fn full_shm_dir_is_a_clear_error() {
    let dir = std::env::temp_dir().join(format!("volley-tiny-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let st = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(&dir)
        .status()
        .expect("mount (the tests run as root, as CI does)");
    assert!(st.success(), "mounting a tmpfs needs root");
    let o = volley(
        &["-n", "2", CHECK, "whoami"],
        &[("VOLLEY_SHM_DIR", dir.to_str().unwrap())],
    );
    let _ = Command::new("umount").arg(&dir).status();
    let _ = std::fs::remove_dir(&dir);
    let (_, err) = text(&o);
    assert!(!o.status.success());
    assert!(
        err.contains("shared memory unavailable") && err.contains("the job needs"),
        "{err}"
    );
    assert!(err.contains("VOLLEY_SHM_DIR"), "must say what to do: {err}");
}

#[test]
fn foreign_segment_and_bad_environment_are_clear_errors() {
    let garbage = std::env::temp_dir().join(format!("volley-garbage-{}", std::process::id()));
    std::fs::write(&garbage, vec![0xAB; 8192]).unwrap();
    // The garbage on descriptor 7 (a launcher's descriptors are above 2), doorbells on 8, 9.
    let o = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "exec 7<'{}' 8</dev/null 9</dev/null; exec '{CHECK}' whoami",
            garbage.display()
        ))
        .envs([
            ("VOLLEY_RANK", "0"),
            ("VOLLEY_SIZE", "2"),
            ("VOLLEY_JOB_TOKEN", "1"),
            ("VOLLEY_SHM_FD", "7"),
            ("VOLLEY_WAKE_FDS", "8,9"),
        ])
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&garbage);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(
        err.contains("not a volley job segment") && err.contains("volley run"),
        "{err}"
    );

    for (env, want) in [
        (vec![("VOLLEY_RANK", "0")], "VOLLEY_SIZE is not set"),
        (
            vec![("VOLLEY_RANK", "x"), ("VOLLEY_SIZE", "2")],
            "VOLLEY_RANK=\"x\"",
        ),
        (
            vec![("VOLLEY_RANK", "5"), ("VOLLEY_SIZE", "2")],
            "must be below VOLLEY_SIZE=2",
        ),
    ] {
        let o = Command::new(CHECK)
            .arg("whoami")
            .envs(env)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            !o.status.success() && err.contains(want),
            "wanted {want:?} in {err}"
        );
        assert!(err.contains("volley run"), "must say what to do: {err}");
    }
}

/// A memory cgroup of `bytes`, removed on drop (cgroup v1's memory hierarchy or v2's unified
/// one, whichever the machine has).
struct MemCgroup {
    dir: std::path::PathBuf,
}

impl MemCgroup {
    fn new(bytes: u64) -> MemCgroup {
        let name = format!("volley-test-{}", std::process::id());
        let (dir, limit_file) = if std::path::Path::new("/sys/fs/cgroup/memory").is_dir() {
            (
                std::path::Path::new("/sys/fs/cgroup/memory").join(&name),
                "memory.limit_in_bytes",
            )
        } else {
            (
                std::path::Path::new("/sys/fs/cgroup").join(&name),
                "memory.max",
            )
        };
        std::fs::create_dir(&dir).unwrap_or_else(|e| {
            panic!("cannot create the memory cgroup {dir:?} (needs root): {e}")
        });
        let g = MemCgroup { dir };
        std::fs::write(g.dir.join(limit_file), bytes.to_string())
            .unwrap_or_else(|e| panic!("cannot limit {:?}: {e}", g.dir));
        g
    }

    /// A shell command that joins this cgroup, then runs `cmd`.
    fn run(&self, cmd: &[&str], env: &[(&str, &str)]) -> std::process::Output {
        let procs = self.dir.join("cgroup.procs");
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(format!("echo $$ > {} && exec \"$@\"", procs.display()))
            .arg("sh")
            .args(cmd)
            .stdin(Stdio::null());
        for (k, v) in env {
            c.env(k, v);
        }
        c.output().expect("run sh")
    }
}

impl Drop for MemCgroup {
    fn drop(&mut self) {
        // Its processes have ended; an empty cgroup is removed with rmdir.
        for _ in 0..50 {
            if std::fs::remove_dir(&self.dir).is_ok() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A job whose shared memory would not fit the memory the machine or its memory cgroup allows
/// is refused when it starts, with the size, the limit and what to change (issue 16, defect 2):
/// in a 256 MiB cgroup, 64 ranks with 1 MiB rings (4 GiB), and 1,000 ranks with the default
/// rings. Nothing is killed by the kernel, nothing is left in /dev/shm.
#[test]
fn a_segment_larger_than_the_memory_allowed_is_refused_at_once() {
    let g = MemCgroup::new(256 << 20);
    for (n, env) in [
        ("64", &[("VOLLEY_SHM_RING_BYTES", "1048576")][..]),
        ("1000", &[][..]),
    ] {
        let o = g.run(&[VOLLEY, "run", "-n", n, CHECK, "whoami"], env);
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "-n {n}: {err}");
        assert!(o.status.code().is_some(), "-n {n}: killed: {o:?}");
        assert!(
            err.contains("the job's shared memory would be")
                && err.contains("memory cgroup")
                && err.contains("VOLLEY_SHM_RING_BYTES")
                && err.contains(&format!("{n} ranks on this host")),
            "-n {n}: {err}"
        );
    }
    // The same job in the cgroup with rings that fit runs.
    let o = g.run(
        &[VOLLEY, "run", "-n", "4", CHECK, "whoami"],
        &[("VOLLEY_SHM_RING_BYTES", "65536")],
    );
    assert!(o.status.success(), "{o:?}");
}

/// A rank that leaves a background child behind (`sleep 40 &`): when the job ends the child is
/// gone too, so it holds neither the job's memory nor its output (issue 16, defect 8).
#[test]
fn a_ranks_background_child_does_not_outlive_the_job() {
    let o = Command::new(VOLLEY)
        .args([
            "run",
            "-n",
            "2",
            "sh",
            "-c",
            "sleep 40 >/dev/null 2>&1 & echo child=$!",
        ])
        .stdin(Stdio::null())
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{o:?}");
    let pids: Vec<u32> = out
        .lines()
        .filter_map(|l| l.strip_prefix("child="))
        .map(|p| p.trim().parse().unwrap())
        .collect();
    assert_eq!(pids.len(), 2, "{out}");
    // Gone, or a zombie waiting for init to reap it: either way no longer running.
    let running = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .ok()
            .and_then(|s| s.rsplit(") ").next().map(|r| !r.starts_with('Z')))
            .unwrap_or(false)
    };
    let t = Instant::now();
    while pids.iter().any(|&p| running(p)) && t.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    for p in pids {
        assert!(!running(p), "background child {p} outlived the job");
    }
}

/// Ranks that leave through `process::exit(0)` right after starting non-blocking sends, most
/// still queued behind a full ring, without dropping their world: at exit volley closes the
/// world as dropping it would, so every message arrives (issue 16, point 9: they were lost, and
/// the job could end with code 0).
#[test]
fn a_rank_that_exits_with_sends_queued_loses_none_of_them() {
    let out = ok(volley(
        &["-n", "3", CHECK, "exit-queued", "200", "4000"],
        &[("VOLLEY_SHM_RING_BYTES", "16384")],
    ));
    assert_eq!(values(&out, "received"), vec!["400"], "{out}");
    // The point of the test: the senders left with most of their sends still queued.
    for q in values(&out, "queued") {
        assert!(q.parse::<u64>().unwrap() > 100, "{out}");
    }
    assert!(dev_shm_volley_entries().is_empty());
}
