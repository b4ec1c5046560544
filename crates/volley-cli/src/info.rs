//! `volley info`: what volley found on this machine, what it will use, and why not the rest,
//! in the spirit of ucx_info.

use crate::bench::results::Machine;
use volley::{Config, WaitMode};

fn gib(b: u64) -> String {
    format!("{:.1} GiB", b as f64 / (1u64 << 30) as f64)
}

fn mib(b: usize) -> String {
    if b >= 1 << 30 {
        format!("{:.2} GiB", b as f64 / (1u64 << 30) as f64)
    } else {
        format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
    }
}

/// Ring size and segment size for a job of `n` ranks on one host, from the settings in force
/// (the defaults adapt the ring to `n`).
fn shm_for(n: usize) -> Result<(usize, usize), volley::InitError> {
    let cfg = Config::from_env(n)?;
    Ok((cfg.ring_bytes, volley::segment_bytes(n, &cfg)))
}

pub fn info(n: Option<usize>) -> i32 {
    // The settings in force are those of a job of `n` ranks a host when asked (several adapt
    // to it: ring size, oversubscription, spinning), else of two.
    let cfg = match Config::from_env(n.unwrap_or(2)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("volley info: {e}");
            return 2;
        }
    };
    let m = Machine::this();
    println!(
        "volley {} ({})",
        env!("CARGO_PKG_VERSION"),
        option_env!("VOLLEY_GIT_REVISION").unwrap_or("unknown")
    );
    println!(
        "machine: {}, {} cores, kernel {}",
        m.cpu_model, m.cores, m.kernel
    );
    match volley_sys::fs_space(std::path::Path::new("/dev/shm")) {
        Ok((free, total)) => println!("/dev/shm: {} ({} free)", gib(total), gib(free)),
        Err(e) => println!("/dev/shm: unavailable ({e})"),
    }
    let record = (cfg.record_bytes.div_ceil(64)) * 64 - 32;
    println!("\ntransports:");
    println!(
        "  shm             available: a {} segment, rings of {} KiB per ordered pair of ranks",
        cfg.shm_dir
            .as_ref()
            .map(|d| format!("file in {} (unlinked at once)", d.display()))
            .unwrap_or_else(|| "memfd".into()),
        cfg.ring_bytes >> 10
    );
    let mut counts = vec![2, 8, 16, 64, 256];
    if let Some(n) = n {
        if !counts.contains(&n) {
            counts.push(n);
            counts.sort_unstable();
        }
    }
    println!("                  segment by ranks on a host (committed at start; volley info -n N for another count):");
    for &k in &counts {
        match shm_for(k) {
            Ok((ring, seg)) => println!(
                "                    {k:>4} ranks: rings of {} KiB, segment {}{}",
                ring >> 10,
                mib(seg),
                if Some(k) == n { "  <- asked" } else { "" }
            ),
            Err(e) => println!("                    {k:>4} ranks: {e}"),
        }
    }
    println!("  (between ranks on one host; ranks on other hosts use the network:)");
    for line in volley::describe_transports() {
        println!("  net             {line}");
    }

    println!("\ntransfer modes (shared memory), chosen per message by size:");
    println!("  inline copy     available: messages up to about {record} bytes travel whole in one ring record");
    println!("  pipelined copy  available: larger messages travel in fragments the receiver copies while the sender writes");
    let from = cfg
        .sources
        .iter()
        .find(|s| s.0 == "VOLLEY_SINGLE_COPY_THRESHOLD")
        .map_or("default", |s| s.2);
    let whence = match from {
        "default" => {
            "the default without a profile: `volley tune` measures where it wins on this machine"
                .to_string()
        }
        _ => format!("from the {from}"),
    };
    match volley::single_copy_unavailable(&cfg) {
        None => println!(
            "  single copy     available; {} ({whence}), by process_vm_readv",
            crate::tune::range_words(cfg.single_copy_threshold, cfg.single_copy_max)
                .trim_start_matches("single copy: ")
        ),
        Some(why) => println!("  single copy     {why}"),
    }
    if volley::single_copy_unavailable(&cfg).is_none() {
        if cfg.single_copy_help {
            println!(
                "  copy helping    on: a sender waiting for its single-copy message of {} bytes or more copies part of it into the receiver's buffer (process_vm_writev; from a quarter of the level-2 cache: below it the receiver's own copy leaves the data in its cache)",
                cfg.single_copy_help_from.max(volley_shm::COOP_FROM + 1)
            );
        } else {
            println!(
                "  copy helping    off (VOLLEY_SINGLE_COPY_HELP=off): the receiver copies alone"
            );
        }
    }
    profile(&cfg.profile);
    match volley_sys::bias_state() {
        Ok(()) => println!(
            "  state cells     biased: the thread that used a rank's state last takes it with plain loads and stores (membarrier private expedited when another thread takes it over; VOLLEY_EXCLUSIVE_BIAS=off for a compare-and-swap per call)"
        ),
        Err(why) => println!("  state cells     a compare-and-swap per call: {why}"),
    }

    println!("\nwaiting modes (VOLLEY_WAIT, or Endpoint::set_wait_mode):");
    let mark = |w: bool| if w { "  <- in force" } else { "" };
    println!(
        "  busy            available: spin on the rings{}",
        mark(cfg.wait == WaitMode::BusyPoll)
    );
    println!(
        "  block           available: sleep on an eventfd doorbell{}",
        mark(cfg.wait == WaitMode::Block)
    );
    let spin = match cfg.wait {
        WaitMode::SpinThenBlock(d) => Some(d),
        _ => None,
    };
    println!(
        "  spin            available: spin {} us, then sleep{}",
        spin.unwrap_or(volley::DEFAULT_SPIN).as_micros(),
        mark(spin.is_some())
    );
    println!(
        "\nprogress thread: {} (VOLLEY_PROGRESS_THREAD=1 or World::start_progress_thread: finishes large non-blocking sends while the application computes)",
        if cfg.progress_thread { "on" } else { "off" }
    );
    match volley_sys::yama_ptrace_scope() {
        Some(s) => println!("\nyama ptrace_scope: {s}"),
        None => println!("\nyama ptrace_scope: no Yama in this kernel"),
    }
    launcher();
    collectives(
        volley::single_copy_unavailable(&cfg).is_none(),
        cfg.single_copy_threshold,
    );
    println!("\nsettings:");
    for (name, value, source) in &cfg.sources {
        println!("  {name:<30} {value:<28} ({source})");
    }
    0
}

/// The machine's transfer-mode profile: where volley looks for it, and what it holds.
fn profile(l: &volley::profile::Loaded) {
    let path = match &l.path {
        None => {
            println!("  profile         none (VOLLEY_PROFILE=none, or no HOME to look in)");
            return;
        }
        Some(p) => p.display().to_string(),
    };
    match (&l.profile, &l.warning) {
        (Some(p), _) => {
            println!(
                "  profile         {path}: made {} by volley {} on {}, {} CPUs (ranks on {})",
                crate::bench::results::iso_date(p.created),
                p.volley,
                p.hardware.cpu_model,
                p.hardware.cpus,
                p.cpus
            );
            if let Some(n) = &p.note {
                println!("                  {n}");
            }
            for q in &p.points {
                println!(
                    "                  {:>8} B one-way: pipelined {:.2} us hot, {:.2} cold; single copy {:.2} hot, {:.2} cold{}",
                    q.size,
                    q.pipe_hot_us,
                    q.pipe_cold_us,
                    q.single_hot_us,
                    q.single_cold_us,
                    if q.single_wins() { "  <- single copy wins" } else { "" }
                );
            }
        }
        (None, Some(w)) => println!("  profile         {w}"),
        (None, None) => {
            println!("  profile         none at {path} (run `volley tune` to measure this machine)")
        }
    }
}

/// Which launcher started this process, found the way every volley program finds it: by joining
/// the job (so `volley info` under mpiexec or srun shows how the ranks were put together).
fn launcher() {
    let started = ["VOLLEY_RANK", "PMI_FD", "PMI_PORT"]
        .iter()
        .any(|v| std::env::var_os(v).is_some());
    if !started {
        println!("\nlauncher: none found (no VOLLEY_RANK, PMI_FD or PMI_PORT): a world of one. volley programs are started by volley run, mpiexec.hydra (PMI-1) or srun --mpi=pmi2 (PMI-2)");
        return;
    }
    match volley::World::init() {
        Ok(w) => {
            let i = w.info();
            let hosts = i.nodes.iter().max().map_or(1, |m| m + 1);
            println!(
                "\nlauncher: {}\n  rank {} of {}, local rank {} of {} on host {} of {}",
                i.launcher, i.rank, i.size, i.local_rank, i.local_size, i.node_id, hosts
            );
            if let Some(d) = volley::launcher_details() {
                println!("  {d}");
            }
        }
        Err(e) => println!("\nlauncher: found, but joining the job failed: {e}"),
    }
}

fn size_name(b: usize) -> String {
    match b {
        b if b >= 1 << 20 && b % (1 << 20) == 0 => format!("{} MiB", b >> 20),
        b if b >= 1 << 10 && b % (1 << 10) == 0 => format!("{} KiB", b >> 10),
        b => format!("{b} B"),
    }
}

/// The algorithm each collective of the MPI face runs, by size, for a few rank counts (a
/// commutative operation; a non-commutative one always reduces by recursive doubling or a tree
/// rooted at rank 0): each algorithm from the exact size where the choice changes to it. On one
/// host, reading across follows this machine's single-copy window (`copy_from`, as the ranks
/// of a job announce it).
fn collectives(cross: bool, copy_from: usize) {
    use volley::collectives::{self as coll, Coll, Shape};
    println!(
        "\ncollective algorithms (MPI face), by size; VOLLEY_COLL_<NAME>=<algorithm> forces one:"
    );
    if let Err(e) = coll::check_env() {
        println!("  {e}");
    }
    for c in Coll::ALL {
        let names: Vec<&str> = c.algos().iter().map(|a| a.name()).collect();
        let forced = coll::forced(c)
            .map(|a| format!("; forced: {}={}", c.env_var(), a.name()))
            .unwrap_or_default();
        println!(
            "  {} (size: {}; algorithms: {}{forced})",
            c.name(),
            c.size_means(),
            names.join(", ")
        );
        for (ranks, shared) in [2, 4, 6, 8, 64]
            .into_iter()
            .flat_map(|r| [(r, true), (r, false)])
        {
            // One host, or several with two ranks or more on each.
            let shape = |bytes: usize| Shape {
                count: bytes / 4,
                shared,
                spread: !shared,
                cross: shared && cross,
                copy_from,
                ..Shape::new(bytes, ranks)
            };
            // Where the placement changes nothing, one line says it for both.
            let same = (0..=26).all(|k| {
                let other = Shape {
                    shared: !shared,
                    spread: shared,
                    ..shape(1 << k)
                };
                coll::select(c, shape(1 << k)) == coll::select(c, other)
            });
            if same && !shared {
                continue;
            }
            let pick = |bytes: usize| coll::select(c, shape(bytes));
            // Sizes 0, 1, 2, 4 ... 64 MiB, and between two that differ the exact switch.
            let mut starts = vec![0usize];
            let mut prev = 0usize;
            let top = if c == Coll::Barrier { 0 } else { 27 };
            for k in 0..top {
                let b = 1usize << k;
                if pick(b) != pick(prev) {
                    let (mut lo, mut hi) = (prev, b);
                    while hi - lo > 1 {
                        let mid = lo + (hi - lo) / 2;
                        if pick(mid) == pick(prev) {
                            lo = mid;
                        } else {
                            hi = mid;
                        }
                    }
                    starts.push(hi);
                }
                prev = b;
            }
            let text: Vec<String> = starts
                .iter()
                .map(|&b| {
                    let a = pick(b);
                    let why = match coll::forced(c) {
                        Some(f) if f == a => "forced".to_string(),
                        Some(f) => format!(
                            "{} cannot run it, so the default: {}",
                            f.name(),
                            coll::default_choice(c, shape(b)).1
                        ),
                        None => coll::default_choice(c, shape(b)).1.to_string(),
                    };
                    format!("{} from {} ({why})", a.name(), size_name(b))
                })
                .collect();
            let place = match (same, shared) {
                (true, _) => "",
                (false, true) => ", one host",
                (false, false) => ", several hosts",
            };
            println!("    {ranks:>3} ranks{place}: {}", text.join("; "));
        }
    }
}
