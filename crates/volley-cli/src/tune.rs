//! `volley tune`: measures on this machine where single copy beats the pipelined copy through
//! the ring, from cache-hot and from cold buffers, and writes the machine's profile
//! (`volley::profile`) that every volley process then reads at init (issue 14, point 4).
//!
//! Two ranks, started through `volley run` like `volley bench`. For each size, repetition, mode
//! and temperature, in that order (so drift hits every mode alike), rank 0 tells rank 1 what to
//! play, both set their single-copy range for it (`World::set_single_copy_range`), and rank 0
//! times a ping-pong. The medians decide (`volley::profile::choose_range`).

use crate::bench::links::Ctl;
use crate::bench::{
    cold_region, err, parse_sizes, pattern, pinned_cpu, placement_words, relaunch_two, COLD_POOL,
};
use clap::Args;
use std::io;
use std::path::PathBuf;
use std::time::Instant;
use volley::profile::{self, Hardware, Profile, TunePoint};
use volley::World;

#[derive(Args, Debug, Clone)]
pub struct TuneArgs {
    /// Pin the two ranks to these CPUs (default: volley run's binding, one core each).
    #[arg(long, value_name = "A,B")]
    pub cpus: Option<String>,
    /// Message sizes to try: a list or a range of powers of two.
    #[arg(long, value_name = "LIST", default_value = "4K-8M")]
    pub sizes: String,
    /// Time per size, mode, temperature and repetition, in milliseconds.
    #[arg(long, default_value_t = 40)]
    pub budget_ms: u64,
    /// Repetitions of each measurement (the median counts).
    #[arg(long, default_value_t = 3)]
    pub reps: usize,
    /// Where to write the profile (default: where volley looks for it, see `volley info`).
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Measure and print, write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

// Commands from rank 0 to rank 1: [code, size, iterations].
const T_DONE: u64 = 0;
const T_PIPE_HOT: u64 = 1;
const T_SINGLE_HOT: u64 = 2;
const T_PIPE_COLD: u64 = 3;
const T_SINGLE_COLD: u64 = 4;
const MODES: [u64; 4] = [T_PIPE_HOT, T_SINGLE_HOT, T_PIPE_COLD, T_SINGLE_COLD];

/// Entry point of `volley tune`.
pub fn tune(args: TuneArgs) -> i32 {
    let sizes = match parse_sizes(Some(&args.sizes), false) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("volley tune: --sizes: {e}");
            return 2;
        }
    };
    if sizes.iter().any(|&s| s < 64 || s as usize > COLD_POOL / 4) {
        eprintln!(
            "volley tune: --sizes: sizes must be from 64 bytes to {} MiB",
            COLD_POOL >> 22
        );
        return 2;
    }
    if args.reps == 0 || args.budget_ms == 0 {
        eprintln!("volley tune: --reps and --budget-ms must be at least 1");
        return 2;
    }
    let output = match (&args.output, args.dry_run) {
        (_, true) => None,
        (Some(o), false) => Some(o.clone()),
        (None, false) => match profile::location() {
            Some(p) => Some(p),
            None => {
                eprintln!(
                    "volley tune: nowhere to write the profile (VOLLEY_PROFILE=none, or no HOME): \
                     give --output FILE, or --dry-run to only measure"
                );
                return 2;
            }
        },
    };
    if std::env::var_os(volley::launch::ENV_RANK).is_none() {
        return relaunch_two(args.cpus.as_deref());
    }
    match run(&args, &sizes, output) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("volley tune: {e}");
            1
        }
    }
}

fn run(args: &TuneArgs, sizes: &[u64], output: Option<PathBuf>) -> io::Result<()> {
    let world = World::init().map_err(err)?;
    if world.size() != 2 || world.info().is_multi_node() {
        return Err(err(format!(
            "needs exactly 2 ranks on one host, the job has {} (run `volley tune` by itself)",
            world.size()
        )));
    }
    let me = world.rank();
    let ctl = Ctl {
        ep: world.open(60_010).map_err(err)?,
        peer: 1 - me,
    };
    let data = world.open(60_011).map_err(err)?;
    ctl.send_u64s(&[pinned_cpu()])?;
    let peer_cpu = ctl.recv_u64s()?.first().copied().unwrap_or(u64::MAX);
    let max = *sizes.iter().max().unwrap_or(&64) as usize;
    let mut t = Tuner {
        world: &world,
        ctl,
        data,
        buf: pattern(max),
        rbuf: vec![0u8; max],
        pool: Vec::new(),
    };
    let unavailable = world.single_copy_unavailable().map(str::to_string);
    if unavailable.is_none() {
        t.pool = vec![1u8; COLD_POOL];
    }
    if me == 1 {
        return t.follow();
    }
    let r = t.lead(args, sizes, unavailable.is_some());
    let _ = t.ctl.send_u64s(&[T_DONE]);
    let points = r?;
    let (min, max) = profile::choose_range(&points);
    let p = Profile {
        created: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0),
        volley: format!(
            "{} ({})",
            env!("CARGO_PKG_VERSION"),
            option_env!("VOLLEY_GIT_REVISION").unwrap_or("unknown")
        ),
        hardware: Hardware::this(),
        cpus: placement_words(pinned_cpu(), peer_cpu).unwrap_or_else(|| "unpinned".into()),
        single_copy_min: min,
        single_copy_max: max,
        note: unavailable.map(|u| format!("single copy {u}")),
        points,
    };
    report(&p);
    match output {
        None => println!("(--dry-run: no profile written)"),
        Some(path) => {
            write_atomically(&path, &p.to_text())
                .map_err(|e| err(format!("cannot write the profile {}: {e}", path.display())))?;
            println!("profile written to {}", path.display());
        }
    }
    Ok(())
}

/// Writes `text` to `path` through a temporary file in the same directory, so that a process
/// starting meanwhile reads the old profile or the new one, never half of one.
fn write_atomically(path: &std::path::Path, text: &str) -> io::Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, path).inspect_err(|_| {
        let _ = std::fs::remove_file(&tmp);
    })
}

fn report(p: &Profile) {
    let h = &p.hardware;
    println!(
        "volley tune on {}, {} CPUs, kernel {}, ranks on {}",
        h.cpu_model, h.cpus, h.kernel, p.cpus
    );
    if let Some(n) = &p.note {
        println!("{n}: every message goes through the ring");
        return;
    }
    println!("one-way time (us), median of the repetitions; GB/s in brackets");
    println!(
        "{:>10}  {:>20}  {:>20}  {:>20}  {:>20}  single copy",
        "bytes", "pipelined, hot", "single copy, hot", "pipelined, cold", "single copy, cold"
    );
    let cell = |size: usize, us: f64| format!("{us:.2} ({:.2})", size as f64 / us / 1e3);
    for q in &p.points {
        println!(
            "{:>10}  {:>20}  {:>20}  {:>20}  {:>20}  {}",
            q.size,
            cell(q.size, q.pipe_hot_us),
            cell(q.size, q.single_hot_us),
            cell(q.size, q.pipe_cold_us),
            cell(q.size, q.single_cold_us),
            if q.single_wins() { "wins" } else { "loses" }
        );
    }
    println!("{}", range_words(p.single_copy_min, p.single_copy_max));
}

/// The chosen range in words.
pub fn range_words(min: usize, max: usize) -> String {
    match (min, max) {
        (usize::MAX, _) => {
            "single copy: never (the pipelined copy was as fast or faster at every size)".into()
        }
        (m, usize::MAX) => format!("single copy: messages of {m} bytes and more"),
        (m, x) => format!("single copy: messages of {m} bytes up to {x} (not included)"),
    }
}

struct Tuner<'w> {
    world: &'w World,
    ctl: Ctl,
    data: volley::Endpoint,
    buf: Vec<u8>,
    rbuf: Vec<u8>,
    pool: Vec<u8>,
}

impl Tuner<'_> {
    fn set_mode(&self, mode: u64) {
        match mode {
            T_SINGLE_HOT | T_SINGLE_COLD => self.world.set_single_copy_range(64, usize::MAX),
            _ => self.world.set_single_copy_range(usize::MAX, usize::MAX),
        }
    }

    /// One side of `iters` round trips (plus one untimed first), sending first if `lead`.
    fn pingpong(&mut self, mode: u64, size: usize, iters: u64, lead: bool) -> io::Result<f64> {
        self.set_mode(mode);
        let cold = matches!(mode, T_PIPE_COLD | T_SINGLE_COLD);
        let peer = 1 - self.world.rank();
        let port = self.data.port();
        let mut t0 = Instant::now();
        for k in 0..=iters {
            if k == 1 {
                t0 = Instant::now();
            }
            let (s, r) = if cold {
                let len = self.pool.len();
                (
                    cold_region(len, size, 2 * k + lead as u64),
                    cold_region(len, size, 2 * k + 1 - lead as u64),
                )
            } else {
                (0..size, 0..size)
            };
            if lead {
                self.send(cold, s, peer, port)?;
                self.recv(cold, r)?;
            } else {
                self.recv(cold, r)?;
                self.send(cold, s, peer, port)?;
            }
        }
        Ok(t0.elapsed().as_secs_f64() * 1e6 / (2 * iters) as f64)
    }

    fn send(
        &self,
        cold: bool,
        at: std::ops::Range<usize>,
        peer: usize,
        port: u32,
    ) -> io::Result<()> {
        let b = if cold { &self.pool[at] } else { &self.buf[at] };
        self.data.send_to(peer, port, b).map_err(err)
    }

    fn recv(&mut self, cold: bool, at: std::ops::Range<usize>) -> io::Result<()> {
        let want = at.len();
        let b = if cold {
            &mut self.pool[at]
        } else {
            &mut self.rbuf[at]
        };
        let (n, _) = self.data.recv_into(b).map_err(err)?;
        if n != want {
            return Err(err(format!(
                "a ping-pong message of {want} bytes arrived with {n}"
            )));
        }
        Ok(())
    }

    fn follow(&mut self) -> io::Result<()> {
        loop {
            let c = self.ctl.recv_u64s()?;
            match c[..] {
                [T_DONE, ..] => return Ok(()),
                [mode, size, iters] if MODES.contains(&mode) => {
                    self.pingpong(mode, size as usize, iters, false)?;
                }
                _ => return Err(err(format!("unknown command {c:?}"))),
            }
        }
    }

    fn play(&mut self, mode: u64, size: usize, iters: u64) -> io::Result<f64> {
        self.ctl.send_u64s(&[mode, size as u64, iters])?;
        self.pingpong(mode, size, iters, true)
    }

    fn lead(
        &mut self,
        args: &TuneArgs,
        sizes: &[u64],
        unavailable: bool,
    ) -> io::Result<Vec<TunePoint>> {
        if unavailable {
            return Ok(Vec::new());
        }
        let budget_us = args.budget_ms as f64 * 1e3;
        let mut points = Vec::new();
        for &size in sizes {
            let size = size as usize;
            // Calibrate: as many round trips as fit the budget in the slowest mode tried.
            let mut one = 0f64;
            for mode in MODES {
                one = one.max(self.play(mode, size, 2)?);
            }
            let iters = ((budget_us / (2.0 * one)) as u64).clamp(3, 100_000);
            let mut times: [Vec<f64>; 4] = Default::default();
            for _ in 0..args.reps {
                for (i, mode) in MODES.iter().enumerate() {
                    times[i].push(self.play(*mode, size, iters)?);
                }
            }
            let med = |v: &mut Vec<f64>| {
                v.sort_by(|a, b| a.total_cmp(b));
                v[v.len() / 2]
            };
            let p = TunePoint {
                size,
                pipe_hot_us: med(&mut times[0]),
                single_hot_us: med(&mut times[1]),
                pipe_cold_us: med(&mut times[2]),
                single_cold_us: med(&mut times[3]),
            };
            eprintln!(
                "volley tune: {size:>8} B: pipelined {:.2}/{:.2} us, single copy {:.2}/{:.2} us (hot/cold)",
                p.pipe_hot_us, p.pipe_cold_us, p.single_hot_us, p.single_cold_us
            );
            points.push(p);
        }
        Ok(points)
    }
}
