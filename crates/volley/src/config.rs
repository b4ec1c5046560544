//! Settings read from the environment, with their defaults. Each says where it came from.

use crate::error::InitError;
use std::time::Duration;

/// How a process waits for a message (or for room in a full ring).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WaitMode {
    /// Spin on the rings; lowest latency, costs a core. Yields the CPU now and then so that
    /// more ranks than cores still make progress.
    BusyPoll,
    /// Sleep on the process's doorbell (an eventfd) until a sender rings it.
    Block,
    /// Spin, then sleep: spin at most the given time, and less as the endpoint's recent waits
    /// say (about four times a usual short wait; 2 us when waits have been longer than the
    /// limit).
    /// The default.
    SpinThenBlock(Duration),
}

/// Job-wide and per-process settings.
#[derive(Clone, Debug)]
pub struct Config {
    /// Bytes of each ring (per ordered pair of ranks). VOLLEY_SHM_RING_BYTES.
    pub ring_bytes: usize,
    /// Largest record in a ring, header included; larger messages are fragmented.
    /// VOLLEY_SHM_RECORD_BYTES.
    pub record_bytes: usize,
    /// Where the segment lives: None for an anonymous memfd (the default), or a directory such as
    /// /dev/shm in which a file is created and unlinked at once. VOLLEY_SHM_DIR.
    pub shm_dir: Option<std::path::PathBuf>,
    /// VOLLEY_WAIT = busy | block | spin, with VOLLEY_SPIN_US for spin.
    pub wait: WaitMode,
    /// How long a waiting operation sleeps at most before it rechecks its peers.
    pub liveness_poll: Duration,
    /// Print the counters to stderr when the world closes. VOLLEY_COUNTERS=1.
    pub print_counters: bool,
    /// Use single copy (process_vm_readv) where possible. VOLLEY_SINGLE_COPY = auto | off.
    pub single_copy: bool,
    /// A sender that waits for its single-copy rendezvous helps its receiver copy it (see
    /// `volley_shm::coop`). VOLLEY_SINGLE_COPY_HELP = auto | off.
    pub single_copy_help: bool,
    /// ...for messages of at least this many bytes. VOLLEY_SINGLE_COPY_HELP_FROM.
    pub single_copy_help_from: usize,
    /// Messages of at least this many bytes go by single copy. VOLLEY_SINGLE_COPY_THRESHOLD,
    /// else the machine's profile (`volley tune`), else never.
    pub single_copy_threshold: usize,
    /// ...and of fewer than this many (usize::MAX: no bound). VOLLEY_SINGLE_COPY_MAX, else the
    /// profile's when the threshold came from it.
    pub single_copy_max: usize,
    /// The machine's transfer-mode profile: where it was looked for, what it holds, and why it
    /// is ignored if it is (see `profile`).
    pub profile: crate::profile::Loaded,
    /// Act as if the kernel refused process_vm_readv (for tests of the fallback).
    /// VOLLEY_SIMULATE_SINGLE_COPY_REFUSAL=1.
    pub simulate_single_copy_refusal: bool,
    /// Act as if the kernel refused a sender's process_vm_writev when it helps copy (for tests
    /// of that fallback). VOLLEY_SIMULATE_HELP_REFUSAL=1.
    pub simulate_help_refusal: bool,
    /// Start a progress thread at init. VOLLEY_PROGRESS_THREAD=1.
    pub progress_thread: bool,
    /// Bytes of unexpected messages a process may drain out of full rings into buffers of its
    /// own; beyond it their senders wait. VOLLEY_UNEXPECTED_BYTES.
    pub unexpected_bytes: usize,
    /// Largest message on a matched context sent eagerly inside a host; a larger one goes by
    /// rendezvous (see `engine::rendezvous`). VOLLEY_EAGER_BYTES.
    pub eager_bytes: usize,
    /// Whether receives find their messages through the ready summary instead of looking at
    /// every local peer's ring: None lets the rank count decide (more than 8 local ranks).
    /// VOLLEY_SHM_SUMMARY = auto | on | off.
    pub summary: Option<bool>,
    /// Whether a rank about to sleep makes the other ranks' CPUs execute a barrier (membarrier)
    /// so that senders need no fence per message: None lets the machine decide (on where the
    /// kernel offers it, the host runs several ranks and they do not outnumber CPUs, whose
    /// frequent sleeps would each pay the barrier, nor read the ready summary, whose senders
    /// fence anyway). VOLLEY_MEMBARRIER = auto | on | off.
    pub membarrier: Option<bool>,
    /// More ranks on this host than CPUs online: a wait then gives its CPU away at every pass
    /// (the rank it waits for may need it), as Open MPI's yield_when_idle does.
    /// VOLLEY_OVERSUBSCRIBED = auto | 1 | 0.
    pub oversubscribed: bool,
    /// Oversubscribed, a spinning wait yields every this many passes: every pass with up to 4
    /// ranks a CPU (the rank waited for is likely next in the run queue), every 16th beyond
    /// (with 128 ranks a CPU, a yield at every pass made each a context switch: a 256-rank
    /// alltoall on 2 cores took 38-72 s instead of 24). 1024 otherwise.
    pub yield_every: u32,
    /// Oversubscribed, the most a spin-then-block wait spins before it sleeps: 200 us up to 4
    /// ranks a CPU, 20 us beyond (the learned spin and VOLLEY_SPIN_US still bound it).
    /// VOLLEY_SPIN_OVERSUBSCRIBED_US.
    pub spin_oversubscribed: Duration,
    /// Whether each rank's rings and collective slots are placed on its NUMA node (where the
    /// launcher binds it to one): None lets the machine decide (when it has several nodes).
    /// VOLLEY_NUMA = auto | on | off.
    pub numa: Option<bool>,
    /// Where each setting came from: (variable, value, "default", "environment" or "profile").
    pub sources: Vec<(&'static str, String, &'static str)>,
}

/// The most a wait spins before it sleeps in the default mode. Each endpoint learns from its
/// recent waits how much of it to use (`wait::WaitHistory`): waits that have been short spin
/// about four times their usual length, waits longer than this sleep after 2 us. Large enough that a
/// ring of 16 ranks busy-polling at 14 us a hop (issue 14's server) keeps spinning between its
/// turns (a 210 us wait) instead of paying a wake-up per hop.
pub const DEFAULT_SPIN: Duration = Duration::from_micros(500);

/// Default eager limit for matched messages inside a host: 64 KiB, the usual size of one ring
/// record. Measured on the development machine (MPI NetPIPE, before and after the rendezvous,
/// interleaved): the request's round trip cost 17% at 64 KiB, 8% at 128 KiB, 4% at 256 KiB and
/// nothing measurable from 1 MiB; a message up to this size is written whole (or as the two
/// records a 64 KiB message takes with its header) and, if unexpected, costs the receiver's
/// budget its size.
pub const DEFAULT_EAGER: usize = 64 << 10;

/// Without a profile (`volley tune`) or a setting, messages in [32 KiB, 256 KiB) go by single
/// copy. On the two Intel machines measured (the 16-core server, docs/perf/server-2026-11-25,
/// and the 2-core development VM since its host changed), with buffers in cache single copy took
/// a third to a half of the pipelined copy's time from 16 KiB to 1 MiB (VM, `volley tune`: 1.97
/// against 5.25 us at 32 KiB, 9.45 against 23.55 at 256 KiB), and Open MPI, which copies once
/// from 4 KiB, matched it. Where the single copy reads cold memory or lines still dirty in the
/// sender's cache, it stays within about 10% of the pipeline up to 256 KiB (VM: cold 0.90-1.05x,
/// sending the buffer just received 0.88-1.0x) and loses by 20-40% beyond, where the pipeline's
/// two copies in parallel win: hence an upper bound when the receiver copies alone. A sender that
/// helps (VOLLEY_SINGLE_COPY_HELP, the default) copies in parallel too, and then single copy
/// beat the pipeline at every size on the VM, hot and cold (1 MiB: 25 against 99 us hot, 120
/// against 146 cold; 8 MiB: 489 against 841, 923 against 1306): no upper bound then. (On the AMD development machine of the
/// first measurements, whose cores shared their cache, the pipeline won at every size: a machine
/// like that wants `volley tune`, which measures the window, or VOLLEY_SINGLE_COPY=off.)
pub const DEFAULT_SINGLE_COPY_THRESHOLD: usize = 32 << 10;
/// Smallest single-copy message whose sender helps copy it (see `volley_shm::coop`) where the
/// machine does not say its caches: a quarter of a 2 MiB level-2 cache. Below it, the receiver
/// copying alone leaves a message in its own cache, where the program reads it next; helped,
/// half of it is dirty in the sender's cache instead. A ping-pong whose ranks read what they
/// receive (VM, 2 MiB L2, one-way us, helped from 32 KiB against alone): 64 KiB 12.0 against
/// 5.7, 256 KiB 25.9 against 19.0, 512 KiB 50 against 39, 1 MiB 115-137 against 123-130, 4 MiB
/// 691-733 against 964-978. Exchanges, where both sides copy at once, gain from 512 KiB
/// (2 ranks, helped from 512 KiB against from 1 MiB: MPI_Allgather of 512 KiB 51-53 against
/// 79-80 us, MPI_Alltoall 57 against 82-85, MPI_Allreduce of 1 MiB 209-216 against 294-299),
/// hence a quarter of the cache, not half. A ping-pong that does not read (NetPIPE) gains at
/// every size (64 KiB 2.5 against 3.0, 1 MiB 24 against 47).
pub const DEFAULT_HELP_FROM: usize = 512 << 10;

/// Where senders start to help by default: a quarter of this machine's level-2 cache (per
/// core), read from sysfs, else [`DEFAULT_HELP_FROM`].
pub fn default_help_from() -> usize {
    let dir = std::path::Path::new("/sys/devices/system/cpu/cpu0/cache");
    (0..8)
        .find_map(|i| {
            let d = dir.join(format!("index{i}"));
            let read = |f: &str| std::fs::read_to_string(d.join(f)).ok();
            if read("level")?.trim() != "2" || read("type")?.trim() == "Instruction" {
                return None;
            }
            cache_bytes(&read("size")?)
        })
        .map_or(DEFAULT_HELP_FROM, |l2| {
            (l2 / 4).max(volley_shm::COOP_FROM + 1)
        })
}

/// A sysfs cache size ("2048K", "1M", "512").
fn cache_bytes(s: &str) -> Option<usize> {
    let s = s.trim();
    let (num, unit) = match s.strip_suffix('K') {
        Some(n) => (n, 1 << 10),
        None => match s.strip_suffix('M') {
            Some(n) => (n, 1 << 20),
            None => (s, 1),
        },
    };
    num.parse::<usize>()
        .ok()
        .map(|n| n * unit)
        .filter(|&b| b > 0)
}

/// The upper end of the default single-copy window when senders do not help (see
/// [`DEFAULT_SINGLE_COPY_THRESHOLD`]).
pub const DEFAULT_SINGLE_COPY_MAX: usize = 256 << 10;

impl Config {
    /// Defaults for a job of `nranks` local ranks, overridden by the environment.
    pub fn from_env(nranks: usize) -> Result<Config, InitError> {
        // 1 MiB per ring keeps 16 records of 64 KiB in flight; beyond 16 local ranks shrink it so
        // that the n*n rings stay within about 256 MiB, down to 8 KiB a ring (at 182 ranks and
        // more; each ring also has a 4 KiB page of control). The segment is then about
        // n * n * 12 KiB: 768 MiB at 256 ranks on a host. A segment larger than the memory the
        // host or the memory cgroup allows is refused when the job starts (`SegmentError::TooBig`),
        // never allocated.
        let default_ring = if nranks <= 16 {
            1 << 20
        } else {
            ((256usize << 20) / nranks.saturating_mul(nranks))
                .next_power_of_two()
                .max(8 << 10)
        };
        let ring_bytes = env_usize("VOLLEY_SHM_RING_BYTES")?.unwrap_or(default_ring);
        if !(4096..=1 << 30).contains(&ring_bytes) {
            return Err(InitError::Env {
                var: "VOLLEY_SHM_RING_BYTES",
                value: ring_bytes.to_string(),
                why: "must be between 4096 and 1073741824".into(),
            });
        }
        let record_bytes = env_usize("VOLLEY_SHM_RECORD_BYTES")?.unwrap_or(64 << 10);
        if record_bytes < 64 {
            return Err(InitError::Env {
                var: "VOLLEY_SHM_RECORD_BYTES",
                value: record_bytes.to_string(),
                why: "must be at least 64".into(),
            });
        }
        let shm_dir = std::env::var_os("VOLLEY_SHM_DIR")
            .filter(|v| !v.is_empty())
            .map(std::path::PathBuf::from);
        let spin = env_usize("VOLLEY_SPIN_US")?
            .map(|us| Duration::from_micros(us as u64))
            .unwrap_or(DEFAULT_SPIN);
        let wait = match std::env::var("VOLLEY_WAIT").ok().as_deref() {
            None | Some("") | Some("spin") => WaitMode::SpinThenBlock(spin),
            Some("busy") => WaitMode::BusyPoll,
            Some("block") => WaitMode::Block,
            Some(other) => {
                return Err(InitError::Env {
                    var: "VOLLEY_WAIT",
                    value: other.to_string(),
                    why: "must be busy, block or spin".into(),
                })
            }
        };
        let print_counters = flag("VOLLEY_COUNTERS");
        let single_copy = env_auto_or_off("VOLLEY_SINGLE_COPY")?;
        let single_copy_help = env_auto_or_off("VOLLEY_SINGLE_COPY_HELP")?;
        let single_copy_help_from =
            env_usize("VOLLEY_SINGLE_COPY_HELP_FROM")?.unwrap_or_else(default_help_from);
        let profile = crate::profile::load();
        let tuned = profile.profile.as_ref();
        let env_threshold = env_usize("VOLLEY_SINGLE_COPY_THRESHOLD")?;
        let (single_copy_threshold, threshold_source) = match (env_threshold, tuned) {
            (Some(t), _) => (t, "environment"),
            (None, Some(p)) => (p.single_copy_min, "profile"),
            (None, None) => (DEFAULT_SINGLE_COPY_THRESHOLD, "default"),
        };
        let (single_copy_max, max_source) =
            match (env_usize("VOLLEY_SINGLE_COPY_MAX")?, env_threshold, tuned) {
                (Some(m), _, _) => (m, "environment"),
                (None, None, Some(p)) => (p.single_copy_max, "profile"),
                (None, None, None) if !single_copy_help => (DEFAULT_SINGLE_COPY_MAX, "default"),
                _ => (usize::MAX, "default"),
            };
        if single_copy_threshold < 64 {
            return Err(InitError::Env {
                var: "VOLLEY_SINGLE_COPY_THRESHOLD",
                value: single_copy_threshold.to_string(),
                why: "must be at least 64 (smaller messages always go inline)".into(),
            });
        }
        if single_copy_max <= single_copy_threshold && single_copy_threshold != usize::MAX {
            return Err(InitError::Env {
                var: "VOLLEY_SINGLE_COPY_MAX",
                value: single_copy_max.to_string(),
                why: format!(
                    "must be above the single-copy threshold ({single_copy_threshold}): messages \
                     in [threshold, max) go by single copy"
                ),
            });
        }
        let summary = auto_on_off("VOLLEY_SHM_SUMMARY")?;
        let membarrier = auto_on_off("VOLLEY_MEMBARRIER")?;
        let numa = auto_on_off("VOLLEY_NUMA")?;
        let numa_nodes = volley_sys::numa::nodes_online().len();
        let cpus = volley_sys::online_cpus();
        let oversubscribed = match std::env::var("VOLLEY_OVERSUBSCRIBED").ok().as_deref() {
            None | Some("") | Some("auto") => nranks > cpus,
            Some("1") => true,
            Some("0") => false,
            Some(other) => {
                return Err(InitError::Env {
                    var: "VOLLEY_OVERSUBSCRIBED",
                    value: other.to_string(),
                    why: "must be auto, 1 or 0".into(),
                })
            }
        };
        let yield_every = match env_usize("VOLLEY_YIELD_EVERY")? {
            Some(n) => n.clamp(1, u32::MAX as usize) as u32,
            None => match oversubscribed {
                false => 1024,
                true if nranks <= 4 * cpus => 1,
                true => 16,
            },
        };
        // Up to 4 ranks a CPU, the rank waited for is likely to run soon: spinning (and
        // yielding at every pass) beats sleeping. 16-core server, MPI ring of 64 ranks: 12.1 us
        // per hop with 20 us, 3.7 with 200, 4.0 with 2000 (Open MPI 4.6); of 256 ranks, 16 a
        // CPU, 28.6 with 20, 32.8 with 200, 36.5 with 2000 (Open MPI 19.4). Beyond, no time at
        // all: a wait still makes its first 64 passes (the clock is read only then), which
        // catches a reply already on its way, and then sleeps. 2-core VM, MPI ring, 20 us -> 0:
        // 64 ranks 21.2, 20.8 -> 9.1, 12.1 us per hop; 256 ranks 33.6, 30.0 -> 16.0, 15.1; over
        // two namespaces (udp) 64 ranks 80, 102 -> 60, 53, 256 ranks 120, 128 -> 79, 77; an 8 B
        // ping-pong between two of 64 ranks while the others wait 0.32 -> 0.27-0.31 us.
        let spin_oversubscribed = Duration::from_micros(
            env_usize("VOLLEY_SPIN_OVERSUBSCRIBED_US")?.unwrap_or(if nranks <= 4 * cpus {
                200
            } else {
                0
            }) as u64,
        );
        let unexpected_bytes = env_usize("VOLLEY_UNEXPECTED_BYTES")?.unwrap_or(16 << 20);
        let eager_bytes = env_usize("VOLLEY_EAGER_BYTES")?.unwrap_or(DEFAULT_EAGER);
        let source = |v: &str| {
            if std::env::var_os(v).is_some_and(|x| !x.is_empty()) {
                "environment"
            } else {
                "default"
            }
        };
        let sources = vec![
            (
                "VOLLEY_PROGRESS_THREAD",
                if flag("VOLLEY_PROGRESS_THREAD") {
                    "1"
                } else {
                    "0"
                }
                .into(),
                source("VOLLEY_PROGRESS_THREAD"),
            ),
            ("VOLLEY_WAIT", format!("{wait:?}"), source("VOLLEY_WAIT")),
            (
                "VOLLEY_SPIN_US",
                spin.as_micros().to_string(),
                source("VOLLEY_SPIN_US"),
            ),
            (
                "VOLLEY_SHM_RING_BYTES",
                ring_bytes.to_string(),
                source("VOLLEY_SHM_RING_BYTES"),
            ),
            (
                "VOLLEY_SHM_RECORD_BYTES",
                record_bytes.to_string(),
                source("VOLLEY_SHM_RECORD_BYTES"),
            ),
            (
                "VOLLEY_OVERSUBSCRIBED",
                format!(
                    "{} ({nranks} ranks here, {cpus} CPUs online)",
                    if oversubscribed { "1" } else { "0" }
                ),
                source("VOLLEY_OVERSUBSCRIBED"),
            ),
            (
                "VOLLEY_YIELD_EVERY",
                yield_every.to_string(),
                source("VOLLEY_YIELD_EVERY"),
            ),
            (
                "VOLLEY_SPIN_OVERSUBSCRIBED_US",
                spin_oversubscribed.as_micros().to_string(),
                source("VOLLEY_SPIN_OVERSUBSCRIBED_US"),
            ),
            (
                "VOLLEY_MEMBARRIER",
                match membarrier {
                    None => format!("auto (on where a host runs several ranks, no more than its CPUs and no more than {}, and the kernel offers it)", crate::engine::SUMMARY_FROM),
                    Some(true) => "on (where the kernel offers it)".into(),
                    Some(false) => "off: a fence per message".into(),
                },
                source("VOLLEY_MEMBARRIER"),
            ),
            (
                "VOLLEY_SHM_SUMMARY",
                match summary {
                    None => format!("auto (on above {} local ranks)", crate::engine::SUMMARY_FROM),
                    Some(true) => "on".into(),
                    Some(false) => "off".into(),
                },
                source("VOLLEY_SHM_SUMMARY"),
            ),
            (
                "VOLLEY_NUMA",
                match numa {
                    None if numa_nodes > 1 => {
                        format!("auto: {numa_nodes} nodes, rings on their receivers' nodes")
                    }
                    None => "auto: one node, nothing to place".into(),
                    Some(true) => format!("on ({numa_nodes} node(s))"),
                    Some(false) => "off".into(),
                },
                source("VOLLEY_NUMA"),
            ),
            (
                "VOLLEY_SHM_DIR",
                shm_dir
                    .as_ref()
                    .map(|d| d.display().to_string())
                    .unwrap_or_else(|| "(memfd)".into()),
                source("VOLLEY_SHM_DIR"),
            ),
            (
                "VOLLEY_SINGLE_COPY",
                if single_copy { "auto" } else { "off" }.into(),
                source("VOLLEY_SINGLE_COPY"),
            ),
            (
                "VOLLEY_SINGLE_COPY_HELP",
                if single_copy_help { "auto" } else { "off" }.into(),
                source("VOLLEY_SINGLE_COPY_HELP"),
            ),
            (
                "VOLLEY_SINGLE_COPY_HELP_FROM",
                single_copy_help_from.to_string(),
                source("VOLLEY_SINGLE_COPY_HELP_FROM"),
            ),
            (
                "VOLLEY_SINGLE_COPY_THRESHOLD",
                match (single_copy_threshold, threshold_source) {
                    (DEFAULT_SINGLE_COPY_THRESHOLD, "default") => format!(
                        "{DEFAULT_SINGLE_COPY_THRESHOLD} (no profile: single copy from 32 KiB on, up to 256 KiB where senders do not help; `volley tune` measures this machine)"
                    ),
                    (usize::MAX, _) => "never".into(),
                    (t, _) => t.to_string(),
                },
                threshold_source,
            ),
            (
                "VOLLEY_SINGLE_COPY_MAX",
                if single_copy_max == usize::MAX {
                    "none".into()
                } else {
                    single_copy_max.to_string()
                },
                max_source,
            ),
            (
                crate::profile::ENV_PROFILE,
                match (&profile.path, &profile.profile) {
                    (Some(p), Some(_)) => p.display().to_string(),
                    (Some(p), None) if profile.warning.is_some() => {
                        format!("{} (ignored: see the warning)", p.display())
                    }
                    (Some(p), None) => format!("{} (none there: run volley tune)", p.display()),
                    (None, _) => "none".into(),
                },
                source(crate::profile::ENV_PROFILE),
            ),
            (
                "VOLLEY_UNEXPECTED_BYTES",
                unexpected_bytes.to_string(),
                source("VOLLEY_UNEXPECTED_BYTES"),
            ),
            (
                "VOLLEY_EAGER_BYTES",
                eager_bytes.to_string(),
                source("VOLLEY_EAGER_BYTES"),
            ),
        ];
        Ok(Config {
            ring_bytes,
            record_bytes,
            shm_dir,
            wait,
            liveness_poll: Duration::from_millis(50),
            print_counters,
            single_copy,
            single_copy_help,
            single_copy_help_from,
            single_copy_threshold,
            single_copy_max,
            profile,
            summary,
            membarrier,
            numa,
            oversubscribed,
            yield_every,
            spin_oversubscribed,
            simulate_single_copy_refusal: flag("VOLLEY_SIMULATE_SINGLE_COPY_REFUSAL"),
            simulate_help_refusal: flag("VOLLEY_SIMULATE_HELP_REFUSAL"),
            progress_thread: flag("VOLLEY_PROGRESS_THREAD"),
            unexpected_bytes,
            eager_bytes,
            sources,
        })
    }
}

impl Config {
    /// Whether a segment for ranks on the NUMA nodes `homes` places their rings: where at least
    /// one is known and the machine has several nodes (or VOLLEY_NUMA=on says so anyway).
    pub fn places_rings(&self, homes: &[Option<usize>]) -> bool {
        homes.iter().any(Option::is_some)
            && self
                .numa
                .unwrap_or_else(|| volley_sys::numa::nodes_online().len() > 1)
    }
}

/// A setting that is `auto` (None; also unset or empty), `on`/`1` or `off`/`0`.
fn auto_on_off(var: &'static str) -> Result<Option<bool>, InitError> {
    match std::env::var(var).ok().as_deref() {
        None | Some("") | Some("auto") => Ok(None),
        Some("on") | Some("1") => Ok(Some(true)),
        Some("off") | Some("0") => Ok(Some(false)),
        Some(other) => Err(InitError::Env {
            var,
            value: other.to_string(),
            why: "must be auto, on or off".into(),
        }),
    }
}

fn flag(var: &str) -> bool {
    matches!(std::env::var(var).ok().as_deref(), Some(v) if v != "0" && !v.is_empty())
}

/// A switch that is `auto` (or `on`, or unset) or `off`.
fn env_auto_or_off(var: &'static str) -> Result<bool, InitError> {
    match std::env::var(var).ok().as_deref() {
        None | Some("") | Some("auto") | Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(InitError::Env {
            var,
            value: other.to_string(),
            why: "must be auto or off".into(),
        }),
    }
}

pub(crate) fn env_usize(var: &'static str) -> Result<Option<usize>, InitError> {
    match std::env::var(var) {
        Err(_) => Ok(None),
        Ok(v) if v.is_empty() => Ok(None),
        Ok(v) => v
            .trim()
            .parse::<usize>()
            .map(Some)
            .map_err(|e| InitError::Env {
                var,
                value: v,
                why: format!("not a number ({e})"),
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_sizes_read_as_sysfs_writes_them() {
        assert_eq!(cache_bytes("2048K\n"), Some(2 << 20));
        assert_eq!(cache_bytes("1M"), Some(1 << 20));
        assert_eq!(cache_bytes("512"), Some(512));
        assert_eq!(cache_bytes("0K"), None);
        assert_eq!(cache_bytes("lots"), None);
        // Whatever the machine, senders help only with messages of more than one chunk.
        assert!(default_help_from() > volley_shm::COOP_FROM);
    }
}
