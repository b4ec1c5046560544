//! `volley run`: the launcher.
//!
//! It creates the job's shared state (see volley::launch::JobLaunch), starts the ranks with their
//! environment, forwards their output and the signals it gets, and supervises them: when a rank
//! ends it writes the rank's fate into the job segment and rings every doorbell, so the survivors'
//! waiting operations fail with a peer-lost error at once instead of hanging.

use clap::Args;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley::launch::JobLaunch;
use volley::{Config, Fate};

#[derive(Args, Debug)]
pub struct RunArgs {
    /// Number of ranks.
    #[arg(short = 'n', long = "np", value_name = "N")]
    pub n: usize,
    /// Prefix every line of output with the rank that printed it, as "[rank] ".
    #[arg(long)]
    pub tag_output: bool,
    /// Stop the job after this many seconds (exit code 124).
    #[arg(long, value_name = "SECS", value_parser = seconds)]
    pub timeout: Option<f64>,
    /// Pin rank i to the i-th CPU of this list (round-robin), e.g. 0,1 or 0-3 (instead of
    /// --bind-to's choice).
    #[arg(long, value_name = "LIST")]
    pub cpus: Option<String>,
    /// Bind each rank to one core (the default: packed in topology order, ranks i and i+1
    /// sharing a cache), to the CPUs of one socket, or not at all.
    #[arg(long, value_name = "WHAT", value_enum, default_value_t = crate::bind::BindTo::Core)]
    pub bind_to: crate::bind::BindTo,
    /// Let the other ranks run on when one fails, instead of stopping them.
    #[arg(long)]
    pub keep_going: bool,
    /// After the job, print each rank's counters (published when it closed its world) and
    /// their totals, to standard error.
    #[arg(long)]
    pub counters: bool,
    /// Run the ranks on these hosts: "h1,h2" places ranks round-robin, "h1:4,h2:4" fills each
    /// host's slots in order. Ranks on one host talk through shared memory, across hosts through
    /// the network (VOLLEY_TRANSPORT).
    #[arg(long, value_name = "LIST", conflicts_with = "hostfile")]
    pub hosts: Option<String>,
    /// Like --hosts, one host per line ("name", "name:4" or "name slots=4"; # comments).
    #[arg(long, value_name = "FILE")]
    pub hostfile: Option<std::path::PathBuf>,
    /// How to start a process on a host, with {host} where the host name goes (default
    /// 'ssh {host}'; network namespaces: 'ip netns exec {host}').
    #[arg(long, value_name = "TEMPLATE")]
    pub launch: Option<String>,
    /// Seconds between SIGTERM and SIGKILL when stopping ranks.
    #[arg(long, value_name = "SECS", default_value_t = 2.0, value_parser = grace_seconds)]
    pub grace: f64,
    /// The program and its arguments.
    #[arg(
        required = true,
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "PROGRAM"
    )]
    pub program: Vec<String>,
}

/// How `volley run` reaches the hosts of a Slurm allocation: one agent per host, started as a
/// job step of one task that may share the allocation's CPUs with the others.
pub const SLURM_LAUNCH: &str = "srun --nodes=1 --ntasks=1 --overlap --mpi=none -w {host}";

/// The hosts of the Slurm allocation this `volley run` runs in (from `sbatch` or `salloc`), when
/// it spans several: None on one host (the ranks start here, as without Slurm), outside an
/// allocation, or inside a job step (`srun volley run ...`: the step is this host's share).
fn slurm_allocation() -> anyhow::Result<Option<Vec<crate::multi::Host>>> {
    let Some(list) = std::env::var("SLURM_JOB_NODELIST")
        .ok()
        .filter(|v| !v.is_empty())
    else {
        return Ok(None);
    };
    if std::env::var_os("SLURM_STEP_ID").is_some() {
        return Ok(None);
    }
    // Slurm's own tool expands its host-list syntax (node[01-04,07]).
    let o = Command::new("scontrol")
        .args(["show", "hostnames", &list])
        .output()
        .map_err(|e| anyhow::anyhow!("inside a Slurm allocation (SLURM_JOB_NODELIST={list}), but scontrol cannot run to expand it: {e}; pass --hosts"))?;
    if !o.status.success() {
        anyhow::bail!(
            "scontrol show hostnames {list}: {}; pass --hosts",
            String::from_utf8_lossy(&o.stderr).trim()
        );
    }
    let names: Vec<String> = String::from_utf8_lossy(&o.stdout)
        .split_whitespace()
        .map(String::from)
        .collect();
    if names.len() <= 1 {
        return Ok(None);
    }
    crate::multi::parse_hosts(&names.join(","))
        .map(Some)
        .map_err(|e| anyhow::anyhow!("SLURM_JOB_NODELIST={list}: {e}"))
}

/// A number of seconds for --timeout and --grace: positive, finite, at most a year (a larger
/// one is certainly a typo, and would overflow the clock arithmetic).
fn seconds(s: &str) -> Result<f64, String> {
    const YEAR: f64 = 365.0 * 24.0 * 3600.0;
    let v: f64 = s
        .trim()
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds"))?;
    if !(v.is_finite() && v > 0.0 && v <= YEAR) {
        return Err(format!(
            "{s:?}: give a number of seconds above 0 and at most {YEAR} (one year); leave the option out for no limit"
        ));
    }
    Ok(v)
}

/// --grace: as [`seconds`], and 0 (SIGKILL right after SIGTERM) is allowed.
fn grace_seconds(s: &str) -> Result<f64, String> {
    if s.trim().parse::<f64>() == Ok(0.0) {
        return Ok(0.0);
    }
    seconds(s)
}

/// CPU numbers in --cpus stay below this (Linux's largest CPU count), so a mistyped range can
/// neither overflow nor ask for gigabytes.
const MAX_CPUS: usize = 8192;

pub(crate) fn parse_cpus(s: &str) -> Result<Vec<usize>, String> {
    let mut v = Vec::new();
    for part in s.split(',').filter(|p| !p.is_empty()) {
        let bad = || format!("--cpus {s:?}: {part:?} is not a CPU number or range like 0-3");
        let cpu = |x: &str| -> Result<usize, String> {
            let c: usize = x.trim().parse().map_err(|_| bad())?;
            if c >= MAX_CPUS {
                return Err(format!(
                    "--cpus {s:?}: CPU {c} is not available to this process (CPU numbers are below {MAX_CPUS}; available: {:?})",
                    volley_sys::allowed_cpus()
                ));
            }
            Ok(c)
        };
        if let Some((a, b)) = part.split_once('-') {
            let (a, b) = (cpu(a)?, cpu(b)?);
            if a > b {
                return Err(bad());
            }
            v.extend(a..=b);
        } else {
            v.push(cpu(part)?);
        }
    }
    if v.is_empty() {
        return Err(format!("--cpus {s:?} names no CPU"));
    }
    let allowed = volley_sys::allowed_cpus();
    if let Some(c) = v.iter().find(|c| !allowed.contains(c)) {
        return Err(format!(
            "--cpus: CPU {c} is not available to this process (available: {allowed:?})"
        ));
    }
    Ok(v)
}

pub(crate) fn fate_of(status: std::process::ExitStatus) -> Fate {
    match (status.code(), status.signal()) {
        (Some(c), _) => Fate::Exited(c),
        (None, Some(s)) => Fate::Killed(s),
        _ => Fate::Exited(255),
    }
}

pub(crate) fn exit_code_of(f: Fate) -> i32 {
    match f {
        Fate::Exited(c) => c,
        Fate::Killed(s) => 128 + s,
        Fate::Finished => 0,
        Fate::Unreachable | Fate::Vanished => 255,
    }
}

struct Rank {
    child: Option<Child>,
    pid: u32,
    fate: Option<Fate>,
}

/// Copies a rank's stream to ours line by line, prefixed with the rank.
fn forward_tagged(
    rank: usize,
    src: impl Read + Send + 'static,
    to_stderr: bool,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut r = BufReader::new(src);
        let mut line = Vec::new();
        loop {
            line.clear();
            match r.read_until(b'\n', &mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {
                    if line.last() != Some(&b'\n') {
                        line.push(b'\n');
                    }
                    let prefix = format!("[{rank}] ");
                    if to_stderr {
                        let mut o = std::io::stderr().lock();
                        let _ = o
                            .write_all(prefix.as_bytes())
                            .and_then(|_| o.write_all(&line));
                    } else {
                        let mut o = std::io::stdout().lock();
                        let _ = o
                            .write_all(prefix.as_bytes())
                            .and_then(|_| o.write_all(&line))
                            .and_then(|_| o.flush());
                    }
                }
            }
        }
    })
}

pub fn run(a: RunArgs) -> i32 {
    match run_inner(a) {
        Ok(code) => code,
        Err(e) => {
            eprintln!("volley run: {e:#}");
            2
        }
    }
}

fn run_inner(a: RunArgs) -> anyhow::Result<i32> {
    if a.n == 0 {
        anyhow::bail!("-n must be at least 1");
    }
    let hosts = match (&a.hosts, &a.hostfile) {
        (Some(h), _) => {
            Some(crate::multi::parse_hosts(h).map_err(|e| anyhow::anyhow!("--hosts: {e}"))?)
        }
        (None, Some(f)) => {
            let text = std::fs::read_to_string(f)
                .map_err(|e| anyhow::anyhow!("--hostfile {}: {e}", f.display()))?;
            Some(
                crate::multi::parse_hosts(&text)
                    .map_err(|e| anyhow::anyhow!("--hostfile {}: {e}", f.display()))?,
            )
        }
        (None, None) => {
            if a.launch.is_some() {
                anyhow::bail!(
                    "--launch says how to reach hosts, but no --hosts or --hostfile names them"
                );
            }
            if let Some(h) = slurm_allocation()? {
                // Inside a Slurm allocation the agents start through srun, as mpirun's do.
                let mut a = a;
                a.launch = Some(SLURM_LAUNCH.into());
                return crate::multi::launch(&a, h);
            }
            None
        }
    };
    if let Some(h) = hosts {
        return crate::multi::launch(&a, h);
    }
    let plan = crate::bind::Plan::new(a.cpus.as_deref(), a.bind_to).map_err(anyhow::Error::msg)?;
    let cfg = Config::from_env(a.n)?;
    let homes = plan.homes(a.n, |r| r);
    let job = JobLaunch::create_with_token(a.n, &cfg, volley_sys::random_u64(), &homes)?;

    // Signals are recorded and handled in the supervision loop, not in the handler.
    let got_signal = Arc::new(AtomicUsize::new(0));
    for sig in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
        signal_hook::flag::register_usize(sig, got_signal.clone(), sig as usize)?;
    }
    let wake = Wake::new().map_err(|e| {
        anyhow::anyhow!(
            "cannot set up the launcher's wake-up: {e}; {}",
            spawn_advice(&e, a.n)
        )
    })?;

    let me = std::process::id();
    let mut ranks: Vec<Rank> = Vec::with_capacity(a.n);
    let mut forwarders = Vec::new();
    for rank in 0..a.n {
        let mut cmd = Command::new(&a.program[0]);
        for v in volley::launch::OWNED_VARS
            .iter()
            .chain(volley::launch::PMI_VARS)
        {
            cmd.env_remove(v);
        }
        cmd.args(&a.program[1..])
            .envs(job.env_for(rank))
            .stdin(Stdio::null());
        if a.tag_output {
            cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
        }
        volley_sys::prepare_child(
            &mut cmd,
            volley_sys::ChildSetup {
                inherit: job.inherited_fds(),
                cpus: plan.for_rank(rank),
                parent: me,
            },
        );
        let mut child = match cmd.spawn() {
            Ok(c) => c,
            Err(e) => {
                eprintln!(
                    "volley run: cannot start {:?} for rank {rank}: {e}; {}",
                    a.program[0],
                    spawn_advice(&e, a.n)
                );
                for r in &ranks {
                    let _ = volley_sys::kill_group(r.pid, libc::SIGKILL);
                }
                for r in &mut ranks {
                    if let Some(c) = r.child.as_mut() {
                        let _ = c.wait();
                    }
                }
                return Ok(127);
            }
        };
        if a.tag_output {
            if let Some(o) = child.stdout.take() {
                forwarders.push(forward_tagged(rank, o, false));
            }
            if let Some(e) = child.stderr.take() {
                forwarders.push(forward_tagged(rank, e, true));
            }
        }
        ranks.push(Rank {
            pid: child.id(),
            child: Some(child),
            fate: None,
        });
    }

    let start = Instant::now();
    let deadline = a
        .timeout
        .map(|s| start + Duration::from_secs_f64(s.max(0.0)));
    let grace = Duration::from_secs_f64(a.grace.max(0.0));
    let mut first_failure: Option<(usize, Fate)> = None;
    let mut stopping: Option<Instant> = None; // when SIGTERM went out
    let mut termed = false;
    let mut killed = false;
    let mut timed_out = false;
    let mut interrupts = 0;

    // Each rank leads its own process group; signalling the group also reaches what the rank
    // started (a shell's children), so nothing outlives the job holding its output open.
    let stop_all = |ranks: &mut Vec<Rank>, sig: i32| {
        for r in ranks.iter().filter(|r| r.fate.is_none()) {
            let _ = volley_sys::kill_group(r.pid, sig);
        }
    };

    loop {
        // Reap: only when a child has ended (one waitid a tick), the ranks in turn then; not a
        // wait4 per rank every tick, which at 256 ranks took a tenth of a core from them.
        let ended = volley_sys::ended_child().is_some();
        for (i, r) in ranks.iter_mut().enumerate() {
            if r.fate.is_some() || !ended {
                continue;
            }
            let Some(child) = r.child.as_mut() else {
                continue;
            };
            if let Ok(Some(status)) = child.try_wait() {
                let fate = fate_of(status);
                r.fate = Some(fate);
                job.rank_ended(i, fate);
                if fate.is_failure() && first_failure.is_none() && stopping.is_none() {
                    first_failure = Some((i, fate));
                    eprintln!("volley run: rank {i} (pid {}) {fate}", r.pid);
                    if !a.keep_going {
                        eprintln!("volley run: stopping the other ranks (use --keep-going to let them run on)");
                        stopping = Some(Instant::now());
                    }
                }
            }
        }
        if ranks.iter().all(|r| r.fate.is_some()) {
            break;
        }
        if let Some(t0) = stopping {
            if !termed {
                stop_all(&mut ranks, libc::SIGTERM);
                termed = true;
            }
            if !killed && t0.elapsed() >= grace {
                stop_all(&mut ranks, libc::SIGKILL);
                killed = true;
            }
        }
        let sig = got_signal.swap(0, Ordering::SeqCst);
        if sig != 0 {
            interrupts += 1;
            if interrupts > 1 && sig == libc::SIGINT as usize {
                eprintln!("volley run: second interrupt, killing the ranks");
                stop_all(&mut ranks, libc::SIGKILL);
                killed = true;
            } else {
                stop_all(&mut ranks, sig as i32);
            }
        }
        if let Some(d) = deadline {
            if !timed_out && Instant::now() >= d {
                timed_out = true;
                eprintln!(
                    "volley run: timed out after {} s; stopping the ranks",
                    a.timeout.unwrap_or(0.0)
                );
                stopping = Some(Instant::now());
            }
        }
        // Until a rank ends, a signal comes or a deadline passes: a launcher that looked every
        // 2 ms took a rank's CPU 500 times a second (a 20 us hole in 1% of a 256 KiB
        // ping-pong's round trips on the 2-core VM).
        let mut next: Option<Instant> = deadline.filter(|_| !timed_out);
        if let (Some(t0), false) = (stopping, killed) {
            next = Some(next.map_or(t0 + grace, |d| d.min(t0 + grace)));
        }
        wake.wait(next.map(|t| t.saturating_duration_since(Instant::now())));
    }
    // The job is over: what a rank left running in its process group (a background child)
    // goes too. It would otherwise keep the job's memfd, and so the segment's memory, and the
    // ranks' output pipes (issue 16, defect 8).
    for r in &ranks {
        let _ = volley_sys::kill_group(r.pid, libc::SIGKILL);
    }
    // Output threads end when the ranks' pipes close; a grandchild holding a pipe open must not
    // keep us here, so give them a moment and move on.
    let t = Instant::now();
    while forwarders.iter().any(|h| !h.is_finished()) && t.elapsed() < Duration::from_millis(500) {
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = std::io::stdout().flush();

    if a.counters {
        let per_rank: Vec<Option<Vec<u64>>> = (0..a.n).map(|r| job.rank_counters(r)).collect();
        print_counters(&per_rank);
    }
    if timed_out {
        return Ok(124);
    }
    if let Some((_, fate)) = first_failure {
        return Ok(exit_code_of(fate));
    }
    // A rank stopped by a forwarded signal with no other failure.
    if let Some(f) = ranks.iter().filter_map(|r| r.fate).find(|f| f.is_failure()) {
        return Ok(exit_code_of(f));
    }
    Ok(0)
}

/// What to do when a rank cannot be started, by the cause: a missing or unusable program, or
/// a limit of the launcher's (descriptors, processes, memory).
pub(crate) fn spawn_advice(e: &std::io::Error, n: usize) -> String {
    match e.raw_os_error() {
        Some(libc::EMFILE) | Some(libc::ENFILE) => format!(
            "the launcher ran out of file descriptors (it holds a few per rank, more with --tag-output): raise the limit (`ulimit -n`, now {}) or start fewer than {n} ranks",
            volley_sys::fd_limit().map_or("unknown".into(), |l| l.to_string())
        ),
        Some(libc::EAGAIN) => format!(
            "the system refused another process (`ulimit -u`, or the pids cgroup's pids.max): raise the limit or start fewer than {n} ranks"
        ),
        Some(libc::ENOMEM) => "not enough memory to start another process: start fewer ranks".into(),
        _ => "check the program path and permissions".into(),
    }
}

/// The table `--counters` prints: one row per counter of volley's table (the network's only
/// where some rank counted something there), one column per rank, then the total.
pub(crate) fn print_counters(per_rank: &[Option<Vec<u64>>]) {
    let n = per_rank.len();
    let mut s =
        String::from("volley run: counters (published by each rank when it closed its world)\n");
    s.push_str(&format!("{:<28}", "counter"));
    for r in 0..n {
        s.push_str(&format!(" {:>12}", format!("rank {r}")));
    }
    s.push_str(&format!(" {:>14}  unit\n", "total"));
    for (i, c) in volley::counter_table().iter().enumerate() {
        let value = |v: &Vec<u64>| v.get(i).copied().unwrap_or(0);
        let total: u64 = per_rank.iter().flatten().map(value).sum();
        if c.layer != volley::Layer::Core && total == 0 {
            continue;
        }
        s.push_str(&format!("{:<28}", c.display_name()));
        for v in per_rank {
            match v {
                Some(v) => s.push_str(&format!(" {:>12}", value(v))),
                None => s.push_str(&format!(" {:>12}", "n/a")),
            }
        }
        s.push_str(&format!(" {total:>14}  {}\n", c.unit));
    }
    if per_rank.iter().any(Option::is_none) {
        s.push_str(
            "n/a: the rank did not close its world (it was killed, or never joined the job)\n",
        );
    }
    eprint!("{s}");
}

/// What wakes the supervision loop: a byte in a socket pair written by the signal handlers of
/// SIGCHLD (a rank ended) and of the signals the launcher passes on.
struct Wake {
    rx: std::os::unix::net::UnixStream,
}

impl Wake {
    fn new() -> std::io::Result<Wake> {
        use std::os::fd::IntoRawFd;
        let (rx, tx) = std::os::unix::net::UnixStream::pair()?;
        rx.set_nonblocking(true)?;
        // The handlers share the write end for the rest of the process's life.
        let tx = tx.into_raw_fd();
        for sig in [libc::SIGCHLD, libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            signal_hook::low_level::pipe::register_raw(sig, tx)?;
        }
        Ok(Wake { rx })
    }

    /// Waits until a handler wrote or `timeout` passed (None: at most a second, so that a
    /// condition no signal announces is still seen), then empties the pair.
    fn wait(&self, timeout: Option<Duration>) {
        use std::os::fd::AsRawFd;
        // (Whole milliseconds, at least one: poll's unit.)
        let t = timeout.map_or(Duration::from_secs(1), |t| {
            t.clamp(Duration::from_millis(1), Duration::from_secs(1))
        });
        volley_sys::poll_readable(self.rx.as_raw_fd(), t);
        let mut b = [0u8; 64];
        while matches!((&self.rx).read(&mut b), Ok(n) if n > 0) {}
    }
}
