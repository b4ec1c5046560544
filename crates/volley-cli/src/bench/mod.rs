//! `volley bench`: the seeds' measurements, with volley and the kernel's transports side by side.
//!
//! Two ranks (started by `volley bench` itself through `volley run`, or by an outer `volley run`).
//! Rank 0 leads: for each size, repetition and transport, in that order (so the systems are
//! interleaved A B A B and drift of the virtual CPUs hits all of them alike), it sends rank 1 a
//! command over a volley control endpoint, and both play their part. Rank 0 times, summarises
//! and prints.

pub mod coll;
pub mod links;
pub mod results;
pub mod stats;

use clap::Args;
use links::{Ctl, Kind, Link};
use results::{Placement, Point, Results, Series};
use std::collections::BTreeMap;
use std::io;
use std::time::{Duration, Instant};
use volley::{WaitMode, World};

pub const TESTS: &[&str] = &[
    "pingpong", "stream", "bibw", "rate", "logp", "overlap", "idle",
];

#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// pingpong | stream | bibw | rate | logp | overlap | idle (two ranks), or a collective over
    /// --ranks: barrier | bcast | reduce | allreduce | allgather | alltoall | ibarrier | iallreduce
    pub test: String,
    /// Ranks for the collective tests.
    #[arg(long, short = 'n', default_value_t = 4)]
    pub ranks: usize,
    /// Message sizes: a list (8,64K,1M) or a range of powers of two (1K-1M). Default 0 and powers
    /// of two up to 8 MiB.
    #[arg(long, value_name = "LIST")]
    pub sizes: Option<String>,
    /// Add NetPIPE's perturbations: each size also minus and plus 3 bytes.
    #[arg(long)]
    pub perturb: bool,
    /// Compare in the same run with kernel transports (tcp, udp, udp-busy: kernel UDP polled
    /// without blocking, as sockperf's --nonblocked; uds, pipe), or with MPIs: for
    /// pingpong, volley's own MPI (mpi), openmpi and mpich, each running a small C ping-pong; for
    /// a collective, openmpi and mpich beside volley's MPI. Comma-separated.
    #[arg(long, value_name = "LIST")]
    pub vs: Option<String>,
    /// Pin the ranks to these CPUs (A,B for the two-rank tests; a list for the collectives).
    #[arg(long, value_name = "A,B")]
    pub cpus: Option<String>,
    /// Collectives only: run every MPI's ranks on these hosts, as `volley run --hosts` does
    /// ("h1,h2" round-robin, "h1:4,h2:4" filling each host in order); Open MPI's mpirun
    /// (its TCP transport between hosts) and MPICH's mpiexec are started on the first host
    /// through --launch, their daemons on the others through it too.
    #[arg(long, value_name = "LIST")]
    pub hosts: Option<String>,
    /// With --hosts: how to start a process on a host, {host} where its name goes (as `volley
    /// run --launch`; network namespaces: 'ip netns exec {host}'). Default 'ssh {host}'.
    #[arg(long, value_name = "TEMPLATE", requires = "hosts")]
    pub launch: Option<String>,
    /// Measured iterations per size and transport, at least (time budget permitting more).
    #[arg(long, default_value_t = 200)]
    pub iters: u64,
    /// Time budget per size, transport and repetition, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub budget_ms: u64,
    /// Repetitions of each measurement, interleaved across transports.
    #[arg(long, default_value_t = 3)]
    pub reps: u64,
    /// Bytes per stream (stream, bibw), as in the GAMMA paper.
    #[arg(long, default_value_t = 10_000_000)]
    pub stream_bytes: u64,
    /// Messages in flight (rate, logp).
    #[arg(long, default_value_t = 64)]
    pub window: u64,
    /// How long a rank waits idle per sample in the idle test, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub idle_ms: u64,
    /// Write the results as JSON to FILE ("-" for standard output instead of the table).
    #[arg(long, value_name = "FILE")]
    pub json: Option<String>,
    /// Write the results as CSV to FILE ("-" for standard output).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<String>,
    /// Write NetPIPE-format output (bytes, Mbps, seconds) to FILE, one file per transport
    /// (FILE.TRANSPORT when there are several).
    #[arg(long, value_name = "FILE")]
    pub netpipe: Option<String>,
    /// A label for the run, used in plots.
    #[arg(long)]
    pub label: Option<String>,
    /// Ping-pong from cold buffers: each iteration sends from and receives into a different
    /// place of a 256 MiB pool, so the data is not in the cache (NetPIPE's -I). Shows what a
    /// transfer costs when applications' data misses the cache.
    #[arg(long)]
    pub cold: bool,
}

impl BenchArgs {
    /// The options `volley bench TEST` runs with when none are given.
    pub fn default_for(test: &str) -> BenchArgs {
        use clap::Parser;
        #[derive(Parser)]
        struct P {
            #[command(flatten)]
            a: BenchArgs,
        }
        P::parse_from(["volley-bench", test]).a
    }
}

fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let (num, mult) = match s.as_bytes().last() {
        Some(b'K' | b'k') => (&s[..s.len() - 1], 1u64 << 10),
        Some(b'M' | b'm') => (&s[..s.len() - 1], 1 << 20),
        Some(b'G' | b'g') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>()
        .map(|v| v * mult)
        .map_err(|_| format!("{s:?} is not a size (examples: 8, 64K, 1M)"))
}

/// Sizes from `--sizes` (or the default) and `--perturb`.
pub fn parse_sizes(spec: Option<&str>, perturb: bool) -> Result<Vec<u64>, String> {
    let mut v: Vec<u64> = match spec {
        None => std::iter::once(0)
            .chain((0..=23).map(|b| 1u64 << b))
            .collect(),
        Some(spec) => {
            let mut v = Vec::new();
            for part in spec.split(',').filter(|p| !p.trim().is_empty()) {
                if let Some((a, b)) = part.split_once('-') {
                    let (a, b) = (parse_size(a)?, parse_size(b)?);
                    if a > b {
                        return Err(format!("range {part:?} is empty"));
                    }
                    if a == 0 {
                        v.push(0);
                    }
                    let mut p = a.max(1).next_power_of_two();
                    while p <= b {
                        v.push(p);
                        p *= 2;
                    }
                } else {
                    v.push(parse_size(part)?);
                }
            }
            v
        }
    };
    if perturb {
        v = v
            .iter()
            .flat_map(|&s| [s.saturating_sub(3), s, s + 3])
            .collect();
    }
    v.sort_unstable();
    v.dedup();
    if v.is_empty() {
        return Err("no sizes to measure".into());
    }
    Ok(v)
}

// Command codes from rank 0 to rank 1.
const C_DONE: u64 = 0;
const C_PINGPONG: u64 = 1;
const C_STREAM: u64 = 2;
const C_RATE: u64 = 3;
const C_BIBW: u64 = 4;
const C_OS: u64 = 5;
const C_OR: u64 = 6;
const C_ISEND: u64 = 7;
const C_IDLE: u64 = 8;
/// The idle test's fourth "mode": not volley's, a bare eventfd wake-up (the floor).
const IDLE_EVENTFD: u64 = 3;
const C_PROBE: u64 = 9;
const C_AFFINITY: u64 = 10;

/// The one CPU this process is bound to, if it is bound to one (u64::MAX otherwise).
pub(crate) fn pinned_cpu() -> u64 {
    match volley_sys::allowed_cpus()[..] {
        [c] => c as u64,
        _ => u64::MAX,
    }
}

/// Where the two ranks run, in words: "0,1" when each is bound to one CPU (by `--cpus` here or
/// by the launcher that started them: `volley run --cpus`, also across hosts), else what is
/// known.
pub(crate) fn placement_words(mine: u64, peer: u64) -> Option<String> {
    let cpu = |c: u64| (c != u64::MAX).then(|| c.to_string());
    match (cpu(mine), cpu(peer)) {
        (Some(a), Some(b)) => Some(format!("{a},{b}")),
        (Some(a), None) => Some(format!("rank 0 on {a}, rank 1 unpinned")),
        (None, Some(b)) => Some(format!("rank 0 unpinned, rank 1 on {b}")),
        (None, None) => None,
    }
}

/// What rank 0 measured in one command.
#[derive(Default)]
struct Measured {
    samples_us: Vec<f64>,
    cpu: Duration,
    iters: u64,
    extra: Vec<f64>,
}

struct Bench {
    world: World,
    ctl: Ctl,
    links: Vec<Link>,
    buf: Vec<u8>,
    rbuf: Vec<u8>,
    args: BenchArgs,
    probe: Option<volley_sys::SharedLines>,
    probe_round: u64,
    /// Buffer pool for --cold (empty otherwise).
    pool: Vec<u8>,
    /// bibw's receive buffers, one per message of a window (grown on first use).
    rx_window: Vec<u8>,
}

/// Messages of one bibw window: OSU's 64 would hold 1 GiB of receive buffers at 8 MiB; 16,
/// and no more than 64 MiB of them (at least 2).
fn bibw_window(size: usize) -> usize {
    ((64 << 20) / size.max(1)).clamp(2, 16)
}

/// Bytes of the --cold pool: well beyond any last-level cache of today's CPUs.
pub(crate) const COLD_POOL: usize = 256 << 20;

/// The `k`-th region of `size` bytes in the cold pool, page-aligned, cycling through it.
pub(crate) fn cold_region(pool_len: usize, size: usize, k: u64) -> std::ops::Range<usize> {
    let stride = size.max(1).next_multiple_of(4096);
    let slots = (pool_len / stride).max(1);
    let start = (k as usize % slots) * stride;
    start..start + size
}

pub(crate) fn err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

/// Entry point of `volley bench`.
pub fn bench(args: BenchArgs) -> i32 {
    let collective = coll::TESTS.contains(&args.test.as_str());
    if !TESTS.contains(&args.test.as_str()) && !collective {
        eprintln!(
            "volley bench: unknown test {:?}; choose one of {}, or a collective: {}",
            args.test,
            TESTS.join(", "),
            coll::TESTS.join(", ")
        );
        return 2;
    }
    let sizes = match parse_sizes(args.sizes.as_deref(), args.perturb) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("volley bench: --sizes: {e}");
            return 2;
        }
    };
    if args.hosts.is_some() && !collective {
        eprintln!(
            "volley bench: --hosts places the ranks of a collective test; {} runs on two ranks under `volley run --hosts ... volley bench {}`",
            args.test, args.test
        );
        return 2;
    }
    if collective {
        // (Sizes default to 8 B .. 1 MiB: the driver's buffers are a rank's part times the ranks.
        // A barrier carries no data: one row, not the same measurement at every size.)
        let sizes = match args.sizes {
            Some(_) => sizes,
            None if matches!(args.test.as_str(), "barrier" | "ibarrier") => vec![0],
            None => (3..=20).map(|b| 1u64 << b).collect(),
        };
        return coll::bench(&args, sizes);
    }
    // MPIs beside the ping-pong: jobs of their own, started from here (see coll::pingpong).
    let listed: Vec<&str> = args
        .vs
        .as_deref()
        .unwrap_or("")
        .split(',')
        .filter(|s| !s.is_empty())
        .collect();
    if listed.iter().any(|s| coll::is_mpi(s)) {
        if args.test != "pingpong" {
            eprintln!(
                "volley bench: --vs: MPIs compare in the pingpong test and the collectives, not in {}",
                args.test
            );
            return 2;
        }
        if std::env::var_os(volley::launch::ENV_RANK).is_some() {
            eprintln!("volley bench: --vs with MPIs starts jobs of its own: run `volley bench pingpong` directly, not under a launcher");
            return 2;
        }
        let (mpis, kernel): (Vec<&str>, Vec<&str>) =
            listed.into_iter().partition(|s| coll::is_mpi(s));
        if let Some(Err(e)) = kernel.iter().map(|k| Kind::parse(k)).find(Result::is_err) {
            eprintln!("volley bench: --vs: {e}");
            return 2;
        }
        return coll::pingpong(&args, sizes, &mpis, &kernel);
    }
    let vs = match args.vs.as_deref().map(|v| {
        v.split(',')
            .filter(|s| !s.is_empty())
            .map(Kind::parse)
            .collect::<Result<Vec<_>, _>>()
    }) {
        Some(Ok(v)) => v,
        Some(Err(e)) => {
            eprintln!("volley bench: --vs: {e}");
            return 2;
        }
        None => Vec::new(),
    };
    if std::env::var_os(volley::launch::ENV_RANK).is_none() {
        return relaunch_two(args.cpus.as_deref());
    }
    match run(args, sizes, vs) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("volley bench: {e}");
            1
        }
    }
}

/// Started by hand: start the two ranks through `volley run` (on `cpus` if given), with this
/// same command line (`volley bench`, `volley tune`).
pub(crate) fn relaunch_two(cpus: Option<&str>) -> i32 {
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => {
            eprintln!("volley: cannot find my own executable: {e}");
            return 1;
        }
    };
    let mut cmd = std::process::Command::new(&exe);
    cmd.args(["run", "-n", "2"]);
    if let Some(c) = cpus {
        cmd.args(["--cpus", c]);
    }
    cmd.arg("--").arg(&exe).args(std::env::args_os().skip(1));
    match cmd.status() {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => {
            eprintln!("volley: cannot start the ranks through volley run: {e}");
            1
        }
    }
}

fn run(args: BenchArgs, sizes: Vec<u64>, vs: Vec<Kind>) -> io::Result<()> {
    let world = World::init().map_err(err)?;
    links::set_volley_label(&world);
    if world.size() != 2 {
        return Err(err(format!(
            "needs exactly 2 ranks, the job has {}",
            world.size()
        )));
    }
    let me = world.rank();
    let ctl = Ctl {
        ep: world.open(60_000).map_err(err)?,
        peer: 1 - me,
    };
    let mut kinds = vec![Kind::Volley];
    kinds.extend(vs.iter().copied().filter(|k| *k != Kind::Volley));
    let mut links = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        links.push(links::connect(&world, &ctl, *k, i)?);
    }
    // A transport that cannot run the test is left out, with a word why.
    if me == 0 {
        for l in links.iter().filter(|l| !l.supports(&args.test)) {
            eprintln!(
                "volley bench: {} left out: it cannot run the {} test ({})",
                l.kind().name(),
                args.test,
                if matches!(l.kind(), Kind::Udp | Kind::UdpBusy) {
                    "no flow control; udp runs pingpong and idle"
                } else {
                    "kernel sockets have no non-blocking send of a whole message"
                }
            );
        }
    }
    links.retain(|l| l.supports(&args.test));
    let maxsize = *sizes.iter().max().unwrap_or(&0) as usize;
    // Shared lines for the placement probe.
    let probe = if me == 0 {
        let (lines, path) = volley_sys::SharedLines::create()?;
        ctl.send_bytes(path.as_bytes())?;
        ctl.recv_u64s()?;
        Some(lines)
    } else {
        let path = String::from_utf8_lossy(&ctl.recv_bytes()?).into_owned();
        let lines = volley_sys::SharedLines::open(&path).ok();
        ctl.send_u64s(&[lines.is_some() as u64])?;
        lines
    };
    let mut b = Bench {
        world,
        ctl,
        links,
        buf: pattern(maxsize.max(64)),
        rbuf: vec![0u8; maxsize.max(64)],
        args,
        probe,
        probe_round: 0,
        pool: Vec::new(),
        rx_window: Vec::new(),
    };
    if b.args.cold {
        b.pool = pattern(COLD_POOL.max(2 * maxsize.next_multiple_of(4096)));
    }
    if me == 1 {
        return b.follow();
    }
    let r = b.lead(&sizes);
    let _ = b.ctl.send_u64s(&[C_DONE]);
    let results = r?;
    results::emit(&results, &b.args)?;
    Ok(())
}

pub(crate) fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

impl Bench {
    /// Rank 1: obey commands until told to stop.
    fn follow(&mut self) -> io::Result<()> {
        loop {
            let c = self.ctl.recv_u64s()?;
            let (code, li, size, n, p) = (
                c[0],
                c.get(1).copied().unwrap_or(0),
                c.get(2).copied().unwrap_or(0) as usize,
                c.get(3).copied().unwrap_or(0),
                c.get(4).copied().unwrap_or(0),
            );
            match code {
                C_DONE => return Ok(()),
                C_AFFINITY => self.ctl.send_u64s(&[pinned_cpu()])?,
                C_PROBE => {
                    self.probe_round += 1;
                    if let Some(pl) = &self.probe {
                        pl.pingpong(false, self.probe_round, n, Duration::from_millis(50));
                    }
                }
                C_PINGPONG if p == 1 => {
                    let l = &mut self.links[li as usize];
                    let pool = &mut self.pool;
                    let len = pool.len();
                    for k in 0..n {
                        l.recv(&mut pool[cold_region(len, size, 2 * k)])?;
                        l.send(&pool[cold_region(len, size, 2 * k + 1)])?;
                    }
                }
                C_PINGPONG => {
                    let (buf, rbuf) = (&self.buf[..size], &mut self.rbuf);
                    let l = &mut self.links[li as usize];
                    for _ in 0..n {
                        l.recv(rbuf)?;
                        l.send(buf)?;
                    }
                }
                C_STREAM | C_RATE | C_OS => {
                    // n streams (or windows) of p messages, one ack each.
                    let l = &mut self.links[li as usize];
                    for _ in 0..n {
                        for _ in 0..p {
                            l.recv(&mut self.rbuf)?;
                        }
                        l.send(&[1])?;
                    }
                }
                C_OR => {
                    let buf = &self.buf[..size];
                    let l = &mut self.links[li as usize];
                    for _ in 0..n {
                        for _ in 0..p {
                            l.send(buf)?;
                        }
                        l.recv(&mut self.rbuf)?;
                    }
                }
                C_BIBW => {
                    let (li, n, p) = (li, n, p);
                    for _ in 0..n {
                        self.bibw_once(li, size, p)?;
                    }
                }
                C_ISEND => {
                    let l = &mut self.links[li as usize];
                    for _ in 0..n {
                        l.recv(&mut self.rbuf)?;
                        l.send(&[1])?;
                    }
                }
                C_IDLE if p == IDLE_EVENTFD => {
                    // The floor: the same wait on a bare eventfd the leader writes (it takes a
                    // copy of the descriptor with pidfd_getfd).
                    let ev = volley_sys::EventFd::new()?;
                    self.ctl
                        .send_u64s(&[std::process::id() as u64, ev.raw() as u64])?;
                    for _ in 0..n {
                        self.ctl.send_u64s(&[1])?; // ready: start the clock
                        let cpu0 = volley_sys::cpu_time();
                        let t0 = volley_sys::monotonic_ns();
                        let sent = loop {
                            ev.wait(Duration::from_secs(30));
                            if let Some(v) = ev.take() {
                                break v;
                            }
                        };
                        let now = volley_sys::monotonic_ns();
                        let cpu = volley_sys::cpu_time() - cpu0;
                        self.ctl.send_u64s(&[
                            cpu.as_nanos() as u64,
                            now - t0,
                            now.saturating_sub(sent),
                        ])?;
                    }
                }
                C_IDLE => {
                    let l = &mut self.links[li as usize];
                    if let Link::Volley(ep) = l {
                        ep.set_wait_mode(match p {
                            0 => WaitMode::BusyPoll,
                            1 => WaitMode::Block,
                            _ => WaitMode::SpinThenBlock(
                                volley::Config::from_env(2)
                                    .map(|c| match c.wait {
                                        WaitMode::SpinThenBlock(d) => d,
                                        _ => Duration::from_micros(50),
                                    })
                                    .unwrap_or(Duration::from_micros(50)),
                            ),
                        });
                    }
                    for _ in 0..n {
                        self.ctl.send_u64s(&[1])?; // ready: start the clock
                        let cpu0 = volley_sys::cpu_time();
                        let t0 = volley_sys::monotonic_ns();
                        let k = self.links[li as usize].recv(&mut self.rbuf)?;
                        let now = volley_sys::monotonic_ns();
                        let cpu = volley_sys::cpu_time() - cpu0;
                        let sent =
                            u64::from_le_bytes(self.rbuf[..8.min(k)].try_into().unwrap_or([0; 8]));
                        self.ctl.send_u64s(&[
                            cpu.as_nanos() as u64,
                            now - t0,
                            now.saturating_sub(sent),
                        ])?;
                    }
                    if let Link::Volley(ep) = &self.links[li as usize] {
                        ep.set_wait_mode(self.world.config().wait);
                    }
                }
                other => return Err(err(format!("unknown command {other}"))),
            }
        }
    }

    /// Both directions at once: `count` messages each way. volley's side goes as OSU's
    /// osu_bibw does: rounds of a window of receives (each into a buffer of its own, allocated
    /// once) and a window of sends from the one send buffer, all posted before any completes,
    /// then waited for; the kernel streams send and receive with one buffer each.
    fn bibw_once(&mut self, li: u64, size: usize, count: u64) -> io::Result<()> {
        let buf = &self.buf[..size];
        match &mut self.links[li as usize] {
            Link::Volley(ep) => {
                let (peer, port) = ep.target_of().ok_or_else(|| err("the link has no peer"))?;
                if port != ep.port() {
                    return Err(err("bibw needs the same port at both ends"));
                }
                let stride = size.max(1);
                let window = bibw_window(size);
                if self.rx_window.len() < window * stride {
                    self.rx_window.resize(window * stride, 0);
                }
                let world = ep.world();
                let mut left = count;
                while left > 0 {
                    let n = left.min(window as u64) as usize;
                    let rx = &mut self.rx_window;
                    world.scope(|s| -> io::Result<()> {
                        let mut ids = Vec::with_capacity(2 * n);
                        for chunk in rx.chunks_mut(stride).take(n) {
                            ids.push(
                                s.irecv(ep, Some(peer), None, &mut chunk[..size])
                                    .map_err(err)?,
                            );
                        }
                        for _ in 0..n {
                            ids.push(s.isend(ep, peer, port, buf).map_err(err)?);
                        }
                        for id in ids {
                            world.wait(id).map_err(err)?;
                        }
                        Ok(())
                    })?;
                    left -= n as u64;
                }
                Ok(())
            }
            Link::Stream { r, w, .. } => {
                // Kernel streams: a thread receives while this one sends.
                let mut r2 = r.try_clone()?;
                let t = std::thread::spawn(move || -> io::Result<()> {
                    let mut rb = vec![0u8; size.max(8)];
                    for _ in 0..count {
                        links::read_msg(&mut r2, &mut rb)?;
                    }
                    Ok(())
                });
                for _ in 0..count {
                    links::write_msg(w, buf)?;
                }
                t.join().map_err(|_| err("receiver thread panicked"))?
            }
            Link::Udp(..) => Err(err("udp cannot run bibw")),
        }
    }

    fn cmd(&self, v: &[u64]) -> io::Result<()> {
        self.ctl.send_u64s(v)
    }

    /// One-way time of a cache-line ping-pong between the two ranks' cores, in ns.
    fn placement_probe(&mut self) -> io::Result<Option<f64>> {
        let n = 200_000;
        self.cmd(&[C_PROBE, 0, 0, n, 0])?;
        self.probe_round += 1;
        Ok(self
            .probe
            .as_ref()
            .and_then(|p| p.pingpong(true, self.probe_round, n, Duration::from_millis(50))))
    }

    fn pingpong(&mut self, li: u64, size: usize, iters: u64) -> io::Result<Measured> {
        let batch = if size <= 4096 { 10 } else { 1 };
        let nb = iters.div_ceil(batch).max(1);
        let cold = !self.pool.is_empty();
        self.cmd(&[C_PINGPONG, li, size as u64, nb * batch, cold as u64])?;
        let (buf, rbuf, pool) = (&self.buf[..size], &mut self.rbuf, &mut self.pool);
        let l = &mut self.links[li as usize];
        let mut k = 0u64;
        let mut m = Measured {
            iters: nb * batch,
            ..Default::default()
        };
        let cpu0 = volley_sys::cpu_time();
        for _ in 0..nb {
            let t = Instant::now();
            for _ in 0..batch {
                let got = if cold {
                    l.send(&pool[cold_region(pool.len(), size, 2 * k + 1)])?;
                    let r = cold_region(pool.len(), size, 2 * k);
                    k += 1;
                    l.recv(&mut pool[r])?
                } else {
                    l.send(buf)?;
                    l.recv(rbuf)?
                };
                if got != size {
                    return Err(err(format!(
                        "{}: echoed {got} bytes, sent {size}",
                        l.kind().name()
                    )));
                }
            }
            m.samples_us
                .push(t.elapsed().as_secs_f64() * 1e6 / (2 * batch) as f64);
        }
        m.cpu = volley_sys::cpu_time() - cpu0;
        Ok(m)
    }

    /// `n` rounds of `per` messages from rank 0 and one ack back; a sample per round.
    fn windowed(
        &mut self,
        code: u64,
        li: u64,
        size: usize,
        n: u64,
        per: u64,
    ) -> io::Result<Measured> {
        self.cmd(&[code, li, size as u64, n, per])?;
        let buf = &self.buf[..size];
        let l = &mut self.links[li as usize];
        let mut m = Measured {
            iters: n,
            ..Default::default()
        };
        let cpu0 = volley_sys::cpu_time();
        for _ in 0..n {
            let t = Instant::now();
            for _ in 0..per {
                if code == C_OS {
                    let ts = Instant::now();
                    l.send(buf)?;
                    m.extra.push(ts.elapsed().as_secs_f64() * 1e6);
                } else {
                    l.send(buf)?;
                }
            }
            l.recv(&mut self.rbuf)?;
            m.samples_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        m.cpu = volley_sys::cpu_time() - cpu0;
        Ok(m)
    }

    /// Rank 1 sends `per` messages; rank 0 lets them arrive, then times each receive call.
    fn recv_overhead(&mut self, li: u64, size: usize, n: u64, per: u64) -> io::Result<Vec<f64>> {
        self.cmd(&[C_OR, li, size as u64, n, per])?;
        let l = &mut self.links[li as usize];
        let mut v = Vec::new();
        for _ in 0..n {
            std::thread::sleep(Duration::from_millis(2));
            for _ in 0..per {
                let t = Instant::now();
                l.recv(&mut self.rbuf)?;
                v.push(t.elapsed().as_secs_f64() * 1e6);
            }
            l.send(&[1])?;
        }
        Ok(v)
    }

    fn bibw(&mut self, li: u64, size: usize, n: u64, count: u64) -> io::Result<Measured> {
        self.cmd(&[C_BIBW, li, size as u64, n, count])?;
        let mut m = Measured {
            iters: n,
            ..Default::default()
        };
        let cpu0 = volley_sys::cpu_time();
        for _ in 0..n {
            let t = Instant::now();
            self.bibw_once(li, size, count)?;
            m.samples_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        m.cpu = volley_sys::cpu_time() - cpu0;
        Ok(m)
    }

    /// isend of one message of `size`, optionally overlapped with `compute` of busy work.
    fn isend_overlap(
        &mut self,
        li: u64,
        size: usize,
        n: u64,
        compute: Duration,
    ) -> io::Result<Measured> {
        self.cmd(&[C_ISEND, li, size as u64, n, 0])?;
        let Link::Volley(ep) = &mut self.links[li as usize] else {
            return Err(err("overlap needs non-blocking sends: volley only"));
        };
        let mut v = self.buf[..size].to_vec();
        let mut m = Measured {
            iters: n,
            ..Default::default()
        };
        let mut ack = [0u8; 8];
        for _ in 0..n {
            let t = Instant::now();
            let req = ep.isend(std::mem::take(&mut v)).map_err(err)?;
            let c = Instant::now();
            while c.elapsed() < compute {
                std::hint::spin_loop();
            }
            v = req.wait().map_err(err)?;
            ep.recv_into(&mut ack).map_err(err)?;
            m.samples_us.push(t.elapsed().as_secs_f64() * 1e6);
        }
        Ok(m)
    }

    fn idle(&mut self, li: u64, mode: u64, n: u64) -> io::Result<Measured> {
        self.cmd(&[C_IDLE, li, 8, n, mode])?;
        let mut m = Measured {
            iters: n,
            ..Default::default()
        };
        let floor = if mode == IDLE_EVENTFD {
            let r = self.ctl.recv_u64s()?;
            let fd = volley_sys::fd_of_process(r[0] as u32, r[1] as i32).map_err(|e| {
                err(format!(
                    "the eventfd floor needs the peer's descriptor (pidfd_getfd): {e}"
                ))
            })?;
            Some(volley_sys::EventFd::from_owned(fd)?)
        } else {
            None
        };
        let wait = Duration::from_millis(self.args.idle_ms);
        for _ in 0..n {
            self.ctl.recv_u64s()?; // the peer is about to wait
            std::thread::sleep(wait);
            let now = volley_sys::monotonic_ns();
            match &floor {
                Some(ev) => ev.add(now)?,
                None => self.links[li as usize].send(&now.to_le_bytes())?,
            }
            let r = self.ctl.recv_u64s()?;
            let (cpu_ns, wall_ns, wake_ns) = (r[0] as f64, r[1] as f64, r[2] as f64);
            m.samples_us.push(wake_ns / 1e3);
            m.extra.push(cpu_ns / wall_ns.max(1.0));
        }
        Ok(m)
    }

    /// Measured iterations for one measurement, given the time of one (µs): as many as the time
    /// budget holds, at least `min` (the Directed Point method's 200 for ping-pong) as long as
    /// those take no more than five budgets, and never fewer than 10.
    fn iters_for(&self, per_iter_us: f64, min: u64) -> u64 {
        iters_for(self.args.budget_ms, per_iter_us, min)
    }

    /// Rank 0: the whole run.
    fn lead(&mut self, sizes: &[u64]) -> io::Result<Results> {
        let test = self.args.test.clone();
        let reps = self.args.reps.max(1);
        let nlinks = self.links.len() as u64;
        let probe_before = self.placement_probe()?;
        self.cmd(&[C_AFFINITY, 0, 0, 0, 0])?;
        let peer_cpu = self.ctl.recv_u64s()?.first().copied().unwrap_or(u64::MAX);
        let cpus = placement_words(pinned_cpu(), peer_cpu);
        let modes: Vec<(u64, &str)> = if test == "idle" {
            vec![
                (0, "busy"),
                (1, "block"),
                (2, "spin"),
                (IDLE_EVENTFD, "eventfd"),
            ]
        } else {
            vec![(0, "")]
        };
        let sizes: Vec<u64> = if test == "idle" {
            vec![8]
        } else {
            sizes.to_vec()
        };
        let total = sizes.len() as u64 * reps * nlinks;
        let bar = progress_bar(total, &test);
        // series key: (link index, mode index) -> per size: accumulated samples
        let mut acc: BTreeMap<(u64, usize), BTreeMap<u64, Acc>> = BTreeMap::new();
        for &size in &sizes {
            let s = size as usize;
            for _rep in 0..reps {
                for li in 0..nlinks {
                    for (mi, &(mode, _)) in modes.iter().enumerate() {
                        if test == "idle"
                            && mode != 0
                            && self.links[li as usize].kind() != Kind::Volley
                        {
                            continue; // kernel sockets have one way to wait: a blocking read
                        }
                        let a = acc.entry((li, mi)).or_default().entry(size).or_default();
                        self.measure(&test, li, s, mode, a)?;
                    }
                    bar.inc(1);
                }
            }
        }
        bar.finish_and_clear();
        let probe_after = self.placement_probe()?;
        let mut series = Vec::new();
        for ((li, mi), per_size) in acc {
            let kind = self.links[li as usize].kind();
            // Kernel sockets have one way to wait, a blocking read.
            let mode = if kind == Kind::Volley || modes[mi].1.is_empty() {
                modes[mi].1
            } else {
                "blocking"
            };
            let transport = if mode == "eventfd" {
                // Not volley: the floor under its blocked wake-up, in the same run.
                "eventfd/blocking".to_string()
            } else if mode.is_empty() {
                kind.name().to_string()
            } else {
                format!("{}/{}", kind.name(), mode)
            };
            let points = per_size
                .into_iter()
                .filter_map(|(size, a)| a.point(&test, size))
                .collect();
            series.push(Series {
                label: match &self.args.label {
                    Some(l) => format!("{l} {transport}"),
                    None => transport.clone(),
                },
                transport,
                points,
            });
        }
        Ok(Results::new(
            &test,
            &self.args,
            sizes.to_vec(),
            Placement {
                cpus,
                probe_before_ns: probe_before,
                probe_after_ns: probe_after,
            },
            series,
        ))
    }

    /// One measurement (after its warm-up) of `test` over link `li`, added to `a`.
    fn measure(
        &mut self,
        test: &str,
        li: u64,
        size: usize,
        mode: u64,
        a: &mut Acc,
    ) -> io::Result<()> {
        let min = self.args.iters;
        let w = self.args.window.max(1);
        let stream_count = |size: usize, total: u64| (total / size.max(1) as u64).clamp(1, 100_000);
        match test {
            "pingpong" => {
                let warm = self.pingpong(li, size, 20)?;
                let est = median(&warm.samples_us) * 2.0;
                let m = self.pingpong(li, size, self.iters_for(est, min))?;
                a.add(&m, size as u64, 1.0);
            }
            "stream" => {
                let count = stream_count(size, self.args.stream_bytes);
                let warm = self.windowed(C_STREAM, li, size, 1, count)?;
                let m = self.windowed(
                    C_STREAM,
                    li,
                    size,
                    self.iters_for(median(&warm.samples_us), 3).min(min),
                    count,
                )?;
                a.add(&m, count * size as u64, count as f64);
            }
            "rate" => {
                let warm = self.windowed(C_RATE, li, size, 2, w)?;
                let m = self.windowed(
                    C_RATE,
                    li,
                    size,
                    self.iters_for(median(&warm.samples_us), 10).min(min),
                    w,
                )?;
                a.add(&m, w * size as u64, w as f64);
            }
            "bibw" => {
                let count = stream_count(size, self.args.stream_bytes);
                let warm = self.bibw(li, size, 1, count)?;
                let m = self.bibw(
                    li,
                    size,
                    self.iters_for(median(&warm.samples_us), 3).min(min),
                    count,
                )?;
                a.add(&m, 2 * count * size as u64, 2.0 * count as f64);
            }
            "logp" => {
                // Latency from ping-pong; send overhead Os and gap g from a window of
                // back-to-back sends; receive overhead Or from receives of messages that are
                // already there; L = latency - Os - Or. Limits: a memcpy of the same size.
                let per = (512 * 1024 / size.max(1) as u64).clamp(1, w);
                let warm = self.pingpong(li, size, 20)?;
                let pp = self.pingpong(
                    li,
                    size,
                    self.iters_for(median(&warm.samples_us) * 2.0, min),
                )?;
                let n = (min / per).max(3);
                let os = self.windowed(C_OS, li, size, n, per)?;
                let or = self.recv_overhead(li, size, n, per)?;
                let lat = median(&pp.samples_us);
                let (os_us, or_us) = (median(&os.extra), median(&or));
                let g_us = median(&os.samples_us) / per as f64;
                a.add(&pp, size as u64, 1.0);
                a.extra("os_us", os_us);
                a.extra("or_us", or_us);
                a.extra("g_us", g_us);
                a.extra("l_us", (lat - os_us - or_us).max(0.0));
                a.extra("memcpy_limit_us", memcpy_us(size));
            }
            "overlap" => {
                let base = self.isend_overlap(li, size, 10, Duration::ZERO)?;
                let t_comm = median(&base.samples_us);
                let n = self.iters_for(t_comm * 2.0, 20).min(min);
                let m = self.isend_overlap(li, size, n, Duration::from_secs_f64(t_comm / 1e6))?;
                let total = median(&m.samples_us);
                // Fraction of the communication hidden behind an equal amount of computation.
                let overlap = ((2.0 * t_comm - total) / t_comm).clamp(0.0, 1.0);
                a.add(&m, size as u64, 1.0);
                a.extra("t_comm_us", t_comm);
                a.extra("overlap", overlap);
            }
            "idle" => {
                let m = self.idle(li, mode, 3.max(min / 100).min(10))?;
                let cpu = median(&m.extra);
                a.add(&m, 8, 1.0);
                a.extra("cpu_fraction", cpu);
            }
            other => return Err(err(format!("unknown test {other}"))),
        }
        Ok(())
    }
}

fn median(v: &[f64]) -> f64 {
    stats::summarize(v).map(|s| s.median).unwrap_or(0.0)
}

/// Time of one memcpy of `size` bytes between two buffers in this process, in µs (median of 20).
fn memcpy_us(size: usize) -> f64 {
    let src = pattern(size.max(1));
    let mut dst = vec![0u8; size.max(1)];
    let mut v = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        dst.copy_from_slice(&src);
        std::hint::black_box(&mut dst);
        v.push(t.elapsed().as_secs_f64() * 1e6);
    }
    median(&v)
}

/// Samples of one (transport, size) accumulated over repetitions.
#[derive(Default)]
struct Acc {
    samples: Vec<f64>,
    iters: u64,
    cpu: Duration,
    bytes_per_sample: u64,
    msgs_per_sample: f64,
    extra: BTreeMap<String, Vec<f64>>,
}

impl Acc {
    fn add(&mut self, m: &Measured, bytes_per_sample: u64, msgs_per_sample: f64) {
        self.samples.extend_from_slice(&m.samples_us);
        self.iters += m.iters;
        self.cpu += m.cpu;
        self.bytes_per_sample = bytes_per_sample;
        self.msgs_per_sample = msgs_per_sample;
    }

    fn extra(&mut self, k: &str, v: f64) {
        self.extra.entry(k.to_string()).or_default().push(v);
    }

    fn point(self, test: &str, size: u64) -> Option<Point> {
        let time = stats::summarize(&self.samples)?;
        let t = time.median;
        let mbps = if t > 0.0 {
            self.bytes_per_sample as f64 / t
        } else {
            0.0
        };
        let msgs = if t > 0.0 {
            self.msgs_per_sample * 1e6 / t
        } else {
            0.0
        };
        let cpu = (self.iters > 0 && test != "idle" && test != "overlap")
            .then(|| self.cpu.as_secs_f64() * 1e6 / self.iters as f64);
        Some(Point {
            bytes: size,
            iterations: self.iters,
            samples: time.n as u64,
            time_us: time,
            bytes_per_sample: self.bytes_per_sample,
            mbytes_per_s: mbps,
            msgs_per_s: msgs,
            cpu_us_per_iter: cpu,
            extra: self
                .extra
                .into_iter()
                .map(|(k, v)| (k, median(&v)))
                .collect(),
        })
    }
}

fn progress_bar(total: u64, test: &str) -> indicatif::ProgressBar {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return indicatif::ProgressBar::hidden();
    }
    let b = indicatif::ProgressBar::new(total);
    b.set_style(
        indicatif::ProgressStyle::with_template("{prefix} [{bar:40}] {pos}/{len} {elapsed}")
            .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar())
            .progress_chars("=> "),
    );
    b.set_prefix(format!("volley bench {test}"));
    b
}

/// See [`Bench::iters_for`]. The budget's fill stops at a million iterations, but never below
/// the `min` asked for (`--iters` beyond a million is honoured).
fn iters_for(budget_ms: u64, per_iter_us: f64, min: u64) -> u64 {
    let budget = budget_ms as f64 * 1e3;
    let fit = (budget / per_iter_us.max(0.01)) as u64;
    let floor = if (min as f64) * per_iter_us <= 5.0 * budget {
        min
    } else {
        10.min(min)
    };
    fit.min(1_000_000).max(floor.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iterations_fill_the_budget_within_the_cap_and_honour_the_minimum_asked() {
        // 200 ms at 5 us each: 40,000.
        assert_eq!(iters_for(200, 5.0, 200), 40_000);
        // Slow ones still get the minimum while it takes at most five budgets...
        assert_eq!(iters_for(200, 2_000.0, 200), 200);
        // ... and 10 beyond that.
        assert_eq!(iters_for(200, 100_000.0, 200), 10);
        // A huge budget stops at a million, unless more were asked for.
        assert_eq!(iters_for(100_000, 0.01, 200), 1_000_000);
        assert_eq!(iters_for(15_000, 5.0, 2_000_000), 2_000_000);
    }

    #[test]
    fn sizes_lists_ranges_and_perturbations() {
        assert_eq!(
            parse_sizes(Some("8,64K,1M"), false).unwrap(),
            vec![8, 65536, 1 << 20]
        );
        assert_eq!(
            parse_sizes(Some("1K-8K"), false).unwrap(),
            vec![1024, 2048, 4096, 8192]
        );
        assert_eq!(parse_sizes(Some("0-4"), false).unwrap(), vec![0, 1, 2, 4]);
        assert_eq!(parse_sizes(Some("8"), true).unwrap(), vec![5, 8, 11]);
        assert_eq!(parse_sizes(Some("1"), true).unwrap(), vec![0, 1, 4]);
        let d = parse_sizes(None, false).unwrap();
        assert_eq!(
            (d[0], d[1], *d.last().unwrap(), d.len()),
            (0, 1, 8 << 20, 25)
        );
        assert!(parse_sizes(Some("abc"), false).is_err());
        assert!(parse_sizes(Some("8K-1K"), false).is_err());
    }
}
