//! How a process learns who it is in its job, and how a launcher sets a job up.
//!
//! `volley run` creates the job segment (an anonymous memfd by default) and one eventfd doorbell
//! per rank, and passes their descriptors to every rank by inheritance, with these variables:
//!
//! | variable | meaning |
//! |---|---|
//! | VOLLEY_RANK, VOLLEY_SIZE | rank in the job, number of ranks |
//! | VOLLEY_LOCAL_RANK, VOLLEY_LOCAL_SIZE | the same among the ranks of this node |
//! | VOLLEY_NODE_ID | index of this node in the job |
//! | VOLLEY_JOB_TOKEN | the job's random 64-bit token, in hex |
//! | VOLLEY_SHM_FD | descriptor of the job segment |
//! | VOLLEY_WAKE_FDS | descriptors of the doorbells, one per local rank, comma-separated |
//! | VOLLEY_RANK_NODES | (jobs on several hosts) the node of every rank, comma-separated |
//! | VOLLEY_BOOT_FD | (jobs on several hosts) a socket to the node's agent, for the address exchange |
//!
//! The segment never has a name in a filesystem (or loses it before any rank starts), so nothing
//! is left behind however the job ends, and only processes given the descriptor can map it.

use crate::config::Config;
use crate::error::InitError;
use std::os::fd::RawFd;
use std::sync::Arc;
use volley_shm::{Segment, SegmentParams};
use volley_sys::EventFd;

pub const ENV_RANK: &str = "VOLLEY_RANK";
pub const ENV_SIZE: &str = "VOLLEY_SIZE";
pub const ENV_LOCAL_RANK: &str = "VOLLEY_LOCAL_RANK";
const ENV_LOCAL_SIZE: &str = "VOLLEY_LOCAL_SIZE";
const ENV_NODE_ID: &str = "VOLLEY_NODE_ID";
const ENV_TOKEN: &str = "VOLLEY_JOB_TOKEN";
const ENV_SHM_FD: &str = "VOLLEY_SHM_FD";
const ENV_WAKE_FDS: &str = "VOLLEY_WAKE_FDS";
pub const ENV_RANK_NODES: &str = "VOLLEY_RANK_NODES";
pub const ENV_BOOT_FD: &str = "VOLLEY_BOOT_FD";
/// The most ranks a job may have (a bound checked before anything is sized by the count).
const MAX_RANKS: usize = 1 << 24;
/// The process that started the ranks (`volley run`, or a host's agent): when it is gone, so
/// is the job.
const ENV_LAUNCHER_PID: &str = "VOLLEY_LAUNCHER_PID";

/// Every variable a launcher sets for its ranks. A launcher removes them all from what its ranks
/// inherit before it sets its own: a stale one (from an outer job, or a shell that exported it)
/// must never reach a rank.
pub const OWNED_VARS: &[&str] = &[
    ENV_RANK,
    ENV_SIZE,
    ENV_LOCAL_RANK,
    ENV_LOCAL_SIZE,
    ENV_NODE_ID,
    ENV_TOKEN,
    ENV_SHM_FD,
    ENV_WAKE_FDS,
    ENV_RANK_NODES,
    ENV_BOOT_FD,
    ENV_LAUNCHER_PID,
];

/// Who this process is in its job.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JobInfo {
    pub rank: usize,
    pub size: usize,
    pub local_rank: usize,
    pub local_size: usize,
    pub node_id: usize,
    pub token: u64,
    /// The node of every rank (all 0 in a job on one host).
    pub nodes: Vec<usize>,
    /// Who started the job.
    pub launcher: Launcher,
}

/// Who started the job, as [`crate::World::init`] found it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Launcher {
    /// `volley run` (its variables and inherited descriptors).
    Volley,
    /// A launcher speaking PMI-1 (MPICH's Hydra `mpiexec`).
    Pmi1,
    /// A launcher speaking PMI-2 (Slurm's `srun --mpi=pmi2`, or Hydra).
    Pmi2,
    /// None: a world of one.
    Alone,
}

impl std::fmt::Display for Launcher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Launcher::Volley => "volley run",
            Launcher::Pmi1 => "PMI-1 (Hydra mpiexec, or another PMI-1 launcher)",
            Launcher::Pmi2 => "PMI-2 (Slurm srun --mpi=pmi2, Hydra, or another PMI-2 launcher)",
            Launcher::Alone => "none (a world of one)",
        })
    }
}

impl JobInfo {
    /// The ranks on this node, in order: local index i is global rank `local_ranks()[i]`.
    pub fn local_ranks(&self) -> Vec<usize> {
        (0..self.size)
            .filter(|&r| self.nodes[r] == self.node_id)
            .collect()
    }

    /// Whether the job spans several hosts.
    pub fn is_multi_node(&self) -> bool {
        self.nodes.iter().any(|&n| n != self.node_id)
    }
}

/// Everything a process attached to: its identity, the segment and the doorbells.
pub(crate) struct Attached {
    pub info: JobInfo,
    pub seg: Arc<Segment>,
    pub doorbells: Vec<EventFd>,
    /// The socket to the node's agent (jobs on several hosts).
    pub boot: Option<std::os::fd::OwnedFd>,
    /// The launcher's PMI connection (jobs Hydra or Slurm started).
    pub pmi: Option<crate::pmi::Pmi>,
    /// Watches the other ranks of this host (jobs Hydra or Slurm started).
    pub watcher: Option<crate::boot_pmi::Watcher>,
    /// Ends this process when the launcher ends (jobs `volley run` started).
    pub launcher_watch: Option<LauncherWatch>,
}

/// Ends the process when the process that started the job's ranks ends (`volley run`, or the
/// host's agent). A rank the launcher started directly dies with it anyway (the parent-death
/// signal); one started through a wrapper (a shell script, `env`, `nice`) is the launcher's
/// grandchild, and without this it would outlive a launcher killed by SIGKILL, holding the
/// job's memory and waiting for ever on ranks that are gone (issue 16, defect 4b).
pub(crate) struct LauncherWatch {
    stop: EventFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl LauncherWatch {
    fn start(pid: u32) -> Result<LauncherWatch, InitError> {
        // ESRCH: no such process.
        const ESRCH: i32 = 3;
        let pidfd = match volley_sys::unix::pidfd_open(pid) {
            Ok(fd) => Some(fd),
            Err(e) if e.raw_os_error() == Some(ESRCH) => {
                return Err(InitError::Env {
                    var: ENV_LAUNCHER_PID,
                    value: pid.to_string(),
                    why: format!(
                        "the launcher (process {pid}) has ended, or the variable is stale"
                    ),
                })
            }
            // No pidfd_open here (a kernel before 5.3, or valgrind): look every 200 ms.
            Err(_) => None,
        };
        let stop = EventFd::new().map_err(InitError::Memfd)?;
        let stop_fd = stop.try_clone().map_err(InitError::Memfd)?;
        let thread = std::thread::Builder::new()
            .name("volley-launcher-watch".into())
            .stack_size(64 * 1024)
            .spawn(move || {
                use std::os::fd::AsRawFd;
                let gone = match &pidfd {
                    Some(p) => {
                        let fds = [stop_fd.raw(), p.as_raw_fd()];
                        let Ok(ready) = volley_sys::unix::poll_any(&fds, None) else {
                            return;
                        };
                        ready.contains(&1) && !ready.contains(&0)
                    }
                    None => loop {
                        if volley_sys::poll_readable(
                            stop_fd.raw(),
                            std::time::Duration::from_millis(200),
                        ) {
                            break false;
                        }
                        if volley_sys::kill(pid, 0).is_err() {
                            break true;
                        }
                    },
                };
                if gone {
                    // The launcher is gone: nothing of the job may outlive it.
                    volley_sys::kill_self_now();
                }
            })
            .map_err(InitError::ProgressThread)?;
        Ok(LauncherWatch {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for LauncherWatch {
    fn drop(&mut self) {
        self.stop.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn var(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn parse<T: std::str::FromStr>(name: &'static str, v: &str) -> Result<T, InitError>
where
    T::Err: std::fmt::Display,
{
    v.trim().parse::<T>().map_err(|e| InitError::Env {
        var: name,
        value: v.to_string(),
        why: format!("{e}"),
    })
}

/// A descriptor the launcher passed in `name`: never standard input, output or error (taking
/// one over would close it when the job ends, and a failure would then go unreported).
fn job_fd(name: &'static str, v: &str) -> Result<RawFd, InitError> {
    let fd: RawFd = parse(name, v)?;
    if fd <= 2 {
        return Err(InitError::Env {
            var: name,
            value: v.to_string(),
            why: "names standard input, output or error; a launcher passes the job's descriptors above 2 (start the program with volley run, or unset the variable)".into(),
        });
    }
    Ok(fd)
}

/// Reads the job environment. `Ok(None)` means no launcher: a world of one.
pub(crate) fn attach_from_env() -> Result<Option<Attached>, InitError> {
    let any = [ENV_RANK, ENV_SIZE, ENV_SHM_FD, ENV_TOKEN, ENV_WAKE_FDS]
        .iter()
        .find(|n| var(n).is_some());
    let Some(&present) = any else {
        return Ok(None);
    };
    let need = |name: &'static str| {
        var(name).ok_or(InitError::Incomplete {
            missing: name,
            present,
        })
    };
    let rank: usize = parse(ENV_RANK, &need(ENV_RANK)?)?;
    let size: usize = parse(ENV_SIZE, &need(ENV_SIZE)?)?;
    if size > MAX_RANKS {
        return Err(InitError::Env {
            var: ENV_SIZE,
            value: size.to_string(),
            why: format!("a job has at most {MAX_RANKS} ranks"),
        });
    }
    if size == 0 || rank >= size {
        return Err(InitError::Env {
            var: ENV_RANK,
            value: rank.to_string(),
            why: format!("must be below VOLLEY_SIZE={size}"),
        });
    }
    let local_rank: usize = var(ENV_LOCAL_RANK)
        .map(|v| parse(ENV_LOCAL_RANK, &v))
        .transpose()?
        .unwrap_or(rank);
    let local_size: usize = var(ENV_LOCAL_SIZE)
        .map(|v| parse(ENV_LOCAL_SIZE, &v))
        .transpose()?
        .unwrap_or(size);
    let node_id: usize = var(ENV_NODE_ID)
        .map(|v| parse(ENV_NODE_ID, &v))
        .transpose()?
        .unwrap_or(0);
    let token_s = need(ENV_TOKEN)?;
    let token = u64::from_str_radix(token_s.trim(), 16).map_err(|e| InitError::Env {
        var: ENV_TOKEN,
        value: token_s.clone(),
        why: format!("not a hexadecimal number ({e})"),
    })?;
    let shm_fd: RawFd = job_fd(ENV_SHM_FD, &need(ENV_SHM_FD)?)?;
    let wake_s = need(ENV_WAKE_FDS)?;
    let wake: Vec<RawFd> = wake_s
        .split(',')
        .map(|s| job_fd(ENV_WAKE_FDS, s))
        .collect::<Result<_, _>>()?;
    let nodes: Vec<usize> = match var(ENV_RANK_NODES) {
        None => vec![node_id; size],
        Some(v) => v
            .split(',')
            .map(|x| parse(ENV_RANK_NODES, x))
            .collect::<Result<_, _>>()?,
    };
    if nodes.len() != size {
        return Err(InitError::Env {
            var: ENV_RANK_NODES,
            value: var(ENV_RANK_NODES).unwrap_or_default(),
            why: format!("needs {size} entries, one node per rank"),
        });
    }
    let mine: Vec<usize> = (0..size).filter(|&r| nodes[r] == node_id).collect();
    if mine.len() != local_size || mine.get(local_rank) != Some(&rank) {
        return Err(InitError::Env {
            var: ENV_LOCAL_RANK,
            value: local_rank.to_string(),
            why: format!(
                "does not agree with VOLLEY_RANK_NODES: node {node_id} has ranks {mine:?}, this is rank {rank}"
            ),
        });
    }
    let boot_fd = match var(ENV_BOOT_FD) {
        Some(v) => Some(job_fd(ENV_BOOT_FD, &v)?),
        None if mine.len() != size => {
            return Err(InitError::Incomplete {
                missing: ENV_BOOT_FD,
                present: ENV_RANK_NODES,
            })
        }
        None => None,
    };
    if wake.len() != local_size {
        return Err(InitError::Env {
            var: ENV_WAKE_FDS,
            value: wake_s,
            why: format!("needs {local_size} descriptors, one per local rank"),
        });
    }
    // Every descriptor is checked before any is adopted: each must be open, and named once
    // (one adopted twice would be closed twice, the second time perhaps someone else's).
    let named: Vec<(&'static str, RawFd)> = std::iter::once((ENV_SHM_FD, shm_fd))
        .chain(wake.iter().map(|&fd| (ENV_WAKE_FDS, fd)))
        .chain(boot_fd.map(|fd| (ENV_BOOT_FD, fd)))
        .collect();
    for (i, &(var, fd)) in named.iter().enumerate() {
        if let Some(&(other, _)) = named[..i].iter().find(|&&(_, f)| f == fd) {
            return Err(InitError::Env {
                var,
                value: fd.to_string(),
                why: format!("descriptor {fd} is also named by {other}: each descriptor of the job is a different one"),
            });
        }
        if std::fs::metadata(format!("/proc/self/fd/{fd}")).is_err() {
            return Err(InitError::Env {
                var,
                value: fd.to_string(),
                why: "no such open descriptor in this process (was it closed, or the variable copied from another process?)".into(),
            });
        }
    }
    let boot = boot_fd.map(volley_sys::adopt_fd);
    let seg = Segment::attach(volley_sys::adopt_fd(shm_fd), token)?;
    if seg.nranks() != local_size {
        return Err(InitError::Env {
            var: ENV_SIZE,
            value: size.to_string(),
            why: format!("the job segment was made for {} ranks", seg.nranks()),
        });
    }
    let doorbells = wake
        .iter()
        .map(|&fd| EventFd::adopt(fd).map_err(|e| InitError::Doorbell { fd, source: e }))
        .collect::<Result<_, _>>()?;
    let launcher_watch = match var(ENV_LAUNCHER_PID) {
        None => None,
        Some(p) => Some(LauncherWatch::start(p.trim().parse().map_err(|_| {
            InitError::Env {
                var: ENV_LAUNCHER_PID,
                value: p.clone(),
                why: "not a process id".into(),
            }
        })?)?),
    };
    let info = JobInfo {
        rank,
        size,
        local_rank,
        local_size,
        node_id,
        token,
        nodes,
        launcher: Launcher::Volley,
    };
    Ok(Some(Attached {
        info,
        seg,
        doorbells,
        boot,
        pmi: None,
        watcher: None,
        launcher_watch,
    }))
}

/// A world of one: the process made its own segment.
pub(crate) fn singleton(cfg: &Config) -> Result<Attached, InitError> {
    let token = volley_sys::random_u64();
    let seg = create_segment(1, cfg, token, &[])?;
    let doorbells = vec![EventFd::new().map_err(InitError::Memfd)?];
    Ok(Attached {
        info: JobInfo {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            node_id: 0,
            token,
            nodes: vec![0],
            launcher: Launcher::Alone,
        },
        seg,
        doorbells,
        boot: None,
        pmi: None,
        watcher: None,
        launcher_watch: None,
    })
}

/// Bytes of the shared segment a job of `nranks` ranks on one host takes with `cfg` (rings,
/// their control pages, the ranks' blocks and collective slots): what `volley run` allocates,
/// committed at start.
pub fn segment_bytes(nranks: usize, cfg: &Config) -> usize {
    let params = SegmentParams::new(nranks, cfg.ring_bytes, cfg.record_bytes, 0);
    volley_shm::Layout::new(&params).total_bytes
}

/// Creates this host's segment for `nranks` local ranks; `homes[r]` is local rank `r`'s NUMA
/// node where known (see [`Config::numa`] for when the rings are placed on them).
pub(crate) fn create_segment(
    nranks: usize,
    cfg: &Config,
    token: u64,
    homes: &[Option<usize>],
) -> Result<Arc<Segment>, InitError> {
    let params = SegmentParams::new(nranks, cfg.ring_bytes, cfg.record_bytes, token);
    // The token in the name tells tools (and the tests) which job a mapping belongs to.
    let name = format!("volley-{token:016x}");
    let (fd, where_) = match &cfg.shm_dir {
        None => (
            volley_sys::memfd_create(&name).map_err(InitError::Memfd)?,
            "memfd".to_string(),
        ),
        Some(dir) => {
            let fd = volley_sys::create_unlinked_file(dir, &name).map_err(|e| {
                InitError::Segment(volley_shm::SegmentError::Create {
                    where_: dir.display().to_string(),
                    source: e,
                })
            })?;
            (fd, dir.display().to_string())
        }
    };
    let homes = if cfg.places_rings(homes) { homes } else { &[] };
    let (seg, placement) = Segment::create_placed(fd, params, &where_, homes)?;
    if let Some(why) = placement.refused {
        // Once per host (only the segment's creator gets here); the job runs unplaced.
        eprintln!(
            "volley: warning: the rings stay where the kernel puts them, not on their receivers' \
             NUMA nodes: {why}; set VOLLEY_NUMA=off to skip the placement"
        );
    }
    Ok(seg)
}

/// The launcher's half: a job's segment and doorbells, and the environment of each rank.
pub struct JobLaunch {
    seg: Arc<Segment>,
    doorbells: Vec<EventFd>,
    token: u64,
}

impl JobLaunch {
    /// Creates the shared state of a job of `nranks` ranks on this machine.
    pub fn create(nranks: usize, cfg: &Config) -> Result<JobLaunch, InitError> {
        Self::create_with_token(nranks, cfg, volley_sys::random_u64(), &[])
    }

    /// The shared state of this node's `nranks` ranks of a job whose token the launcher chose.
    /// `homes[r]` is the NUMA node local rank `r` will run on, where the launcher binds it to
    /// CPUs of one node (empty: not known): its rings and collective slots are placed there.
    pub fn create_with_token(
        nranks: usize,
        cfg: &Config,
        token: u64,
        homes: &[Option<usize>],
    ) -> Result<JobLaunch, InitError> {
        let seg = create_segment(nranks, cfg, token, homes)?;
        let doorbells = (0..nranks)
            .map(|_| EventFd::new().map_err(InitError::Memfd))
            .collect::<Result<_, _>>()?;
        Ok(JobLaunch {
            seg,
            doorbells,
            token,
        })
    }

    pub fn token(&self) -> u64 {
        self.token
    }

    pub fn segment_bytes(&self) -> usize {
        self.seg.layout().total_bytes
    }

    /// Descriptors every rank must inherit (close-on-exec cleared in the child).
    pub fn inherited_fds(&self) -> Vec<RawFd> {
        let mut v = vec![self.seg.fd()];
        v.extend(self.doorbells.iter().map(|d| d.raw()));
        v
    }

    /// The variables that make a process rank `rank` of this job.
    pub fn env_for(&self, rank: usize) -> Vec<(&'static str, String)> {
        let n = self.doorbells.len();
        let wake: Vec<String> = self.doorbells.iter().map(|d| d.raw().to_string()).collect();
        vec![
            (ENV_RANK, rank.to_string()),
            (ENV_SIZE, n.to_string()),
            (ENV_LOCAL_RANK, rank.to_string()),
            (ENV_LOCAL_SIZE, n.to_string()),
            (ENV_NODE_ID, "0".to_string()),
            (ENV_TOKEN, format!("{:016x}", self.token)),
            (ENV_SHM_FD, self.seg.fd().to_string()),
            (ENV_WAKE_FDS, wake.join(",")),
            (ENV_LAUNCHER_PID, std::process::id().to_string()),
        ]
    }

    /// The variables that make a process local rank `local` of this node and rank
    /// `rank` of a job spread over several nodes; `boot_fd` is its socket
    /// to the node's agent.
    pub fn env_for_node(
        &self,
        local: usize,
        rank: usize,
        nodes: &[usize],
        node_id: usize,
        boot_fd: RawFd,
    ) -> Vec<(&'static str, String)> {
        let mut v = self.env_for(local);
        let set = |v: &mut Vec<(&'static str, String)>, k: &'static str, x: String| {
            if let Some(e) = v.iter_mut().find(|e| e.0 == k) {
                e.1 = x;
            } else {
                v.push((k, x));
            }
        };
        set(&mut v, ENV_RANK, rank.to_string());
        set(&mut v, ENV_SIZE, nodes.len().to_string());
        set(&mut v, ENV_LOCAL_RANK, local.to_string());
        set(&mut v, ENV_NODE_ID, node_id.to_string());
        let n: Vec<String> = nodes.iter().map(|x| x.to_string()).collect();
        set(&mut v, ENV_RANK_NODES, n.join(","));
        set(&mut v, ENV_BOOT_FD, boot_fd.to_string());
        v
    }

    /// The counters rank `rank` published when it closed its world (None if it never did, e.g.
    /// because it was killed), in the order of [`crate::counter_table`].
    pub fn rank_counters(&self, rank: usize) -> Option<Vec<u64>> {
        // The rank's process has ended (the caller reaped it), so these are final.
        self.seg.published_counters(rank, crate::TABLE_LEN)
    }

    /// Records that a rank's process ended, and wakes every rank so that those waiting on it
    /// notice at once.
    pub fn rank_ended(&self, rank: usize, fate: crate::Fate) {
        use volley_shm::RankState;
        let state = match fate {
            crate::Fate::Finished => RankState::Finalized,
            crate::Fate::Exited(c) => RankState::Exited(c),
            crate::Fate::Killed(s) => RankState::Killed(s),
            crate::Fate::Unreachable => RankState::Exited(255),
            crate::Fate::Vanished => RankState::Vanished,
        };
        self.seg.set_rank_state(rank, state);
        for d in &self.doorbells {
            d.notify();
        }
    }
}

/// Fuzzing the bootstrap environment on stable Rust (issue 16, defect 11): proptest properties
/// with a fixed budget of cases (`VOLLEY_FUZZ_CASES`, `VOLLEY_FUZZ_SEED` change it), run by
/// `cargo test --release -p volley --lib bootstrap::fuzz`.
///
/// The pure parsers are tested in this process. `attach_from_env` reads `std::env` and adopts
/// descriptors, so it runs in a child process (this test binary again, running only
/// `env_child`) with an environment of its own: the test process's environment is never set.
/// The child's environment starts from what `volley run` gives a real rank (a real segment,
/// doorbells and agent socket, inherited) and is then mutated: variables removed, set to random
/// text, edge numbers, other descriptors of the job, lists, bytes that are not UTF-8.
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;
    use proptest::sample::Index;
    use proptest::test_runner::RngSeed;
    use std::ffi::OsString;
    use std::os::fd::AsRawFd;
    use std::os::unix::ffi::OsStringExt;
    use std::process::{Command, Stdio};

    /// Set in the child: run `env_child` for real.
    const CHILD: &str = "VOLLEY_FUZZ_ENV_CHILD";

    fn config(cases: u32) -> ProptestConfig {
        let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
        ProptestConfig {
            cases: env("VOLLEY_FUZZ_CASES").map_or(cases, |c| c as u32),
            rng_seed: RngSeed::Fixed(env("VOLLEY_FUZZ_SEED").unwrap_or(0x766f_6c6c_6579)),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    /// The child's half: reads its environment as a rank does and says what it made of it.
    /// Whatever it accepts must be a valid configuration, owning each descriptor once. Does
    /// nothing in an ordinary test run.
    #[test]
    fn env_child() {
        if std::env::var_os(CHILD).is_none() {
            return;
        }
        match attach_from_env() {
            Ok(None) => println!("RESULT none"),
            Err(e) => println!("RESULT err {e}"),
            Ok(Some(a)) => {
                let i = &a.info;
                assert!(i.size > 0 && i.rank < i.size, "{i:?}");
                assert_eq!(i.nodes.len(), i.size, "{i:?}");
                assert_eq!(i.nodes[i.rank], i.node_id, "{i:?}");
                let local = i.local_ranks();
                assert_eq!(local.len(), i.local_size, "{i:?}");
                assert_eq!(local.get(i.local_rank), Some(&i.rank), "{i:?}");
                assert_eq!(a.seg.nranks(), i.local_size);
                assert_eq!(a.doorbells.len(), i.local_size);
                assert!(!i.is_multi_node() || a.boot.is_some(), "{i:?}");
                let mut fds = vec![a.seg.fd()];
                fds.extend(a.doorbells.iter().map(|d| d.raw()));
                fds.extend(a.boot.as_ref().map(|b| b.as_raw_fd()));
                let mut distinct = fds.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(
                    distinct.len(),
                    fds.len(),
                    "descriptors {fds:?} owned more than once (each closes when dropped)"
                );
                println!(
                    "RESULT ok rank={} size={} local={}/{} node={} token={:016x} nodes={:?}",
                    i.rank, i.size, i.local_rank, i.local_size, i.node_id, i.token, i.nodes
                );
            }
        }
    }

    /// A real job as `volley run` sets one up for a rank, and the environment it gives it.
    struct Job {
        _launch: JobLaunch,
        _agent: Option<(
            std::os::unix::net::UnixStream,
            std::os::unix::net::UnixStream,
        )>,
        env: Vec<(&'static str, String)>,
        fds: Vec<RawFd>,
        want: String,
    }

    fn job(nodes: &[usize], rank: usize) -> Job {
        let node_id = nodes[rank];
        let local: Vec<usize> = (0..nodes.len()).filter(|&r| nodes[r] == node_id).collect();
        let local_rank = local.iter().position(|&r| r == rank).expect("its own node");
        let cfg = Config::from_env(local.len()).expect("config");
        let launch = JobLaunch::create(local.len(), &cfg).expect("job segment");
        let mut fds = launch.inherited_fds();
        let (env, agent, nodes) = if local.len() == nodes.len() {
            (launch.env_for(rank), None, vec![0; nodes.len()])
        } else {
            let agent = std::os::unix::net::UnixStream::pair().expect("socketpair");
            fds.push(agent.0.as_raw_fd());
            let env = launch.env_for_node(local_rank, rank, nodes, node_id, agent.0.as_raw_fd());
            (env, Some(agent), nodes.to_vec())
        };
        let want = format!(
            "RESULT ok rank={rank} size={} local={local_rank}/{} node={} token={:016x} nodes={nodes:?}",
            nodes.len(),
            local.len(),
            nodes[rank],
            launch.token(),
        );
        Job {
            _launch: launch,
            _agent: agent,
            env,
            fds,
            want,
        }
    }

    /// What a mutation sets a variable to.
    #[derive(Clone, Debug)]
    enum Value {
        Remove,
        Text(String),
        Number(String),
        /// The value it had, with blanks around it.
        Padded,
        /// One of the job's real descriptors (segment, doorbells, agent socket).
        Fd(Index),
        /// A comma-separated list of small numbers, or of the job's descriptors.
        List(Vec<u8>, bool),
        /// The value it had, twice, comma-separated.
        Twice,
        NotUtf8(Vec<u8>),
    }

    fn value() -> impl Strategy<Value = Value> {
        let edge = prop_oneof![
            (-3i64..12).prop_map(|n| n.to_string()),
            Just(i32::MAX.to_string()),
            Just((i32::MAX as i64 + 1).to_string()),
            Just(u32::MAX.to_string()),
            Just(usize::MAX.to_string()),
            Just(format!("{}0", usize::MAX)),
            Just("0x10".to_string()),
            Just("+3".to_string()),
            Just(String::new()),
            any::<u64>().prop_map(|n| format!("{n:016x}")),
            any::<u16>().prop_map(|n| n.to_string()),
        ];
        prop_oneof![
            2 => Just(Value::Remove),
            2 => "[ -~]{0,12}".prop_map(Value::Text),
            3 => edge.prop_map(Value::Number),
            1 => Just(Value::Padded),
            3 => any::<Index>().prop_map(Value::Fd),
            2 => (proptest::collection::vec(0u8..6, 0..6), any::<bool>()).prop_map(|(l, fds)| Value::List(l, fds)),
            1 => Just(Value::Twice),
            1 => proptest::collection::vec(1u8..=255, 1..6).prop_map(|mut b| {
                b[0] = 0xff;
                Value::NotUtf8(b)
            }),
        ]
    }

    /// A child's environment: the job's, edited.
    type Env = Vec<(&'static str, Option<OsString>)>;

    fn child_env(job: &Job, edits: &[(usize, Value)]) -> Env {
        let mut env: Vec<(&'static str, Option<OsString>)> = OWNED_VARS
            .iter()
            .map(|&k| {
                let v = job.env.iter().find(|(n, _)| *n == k).map(|(_, v)| v.into());
                (k, v)
            })
            .collect();
        for (var, v) in edits {
            let (name, cur) = &mut env[*var % OWNED_VARS.len()];
            let old = cur
                .as_ref()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            *cur = match v {
                Value::Remove => None,
                Value::Text(s) | Value::Number(s) => Some(s.into()),
                Value::Padded => Some(format!(" {old}\t").into()),
                Value::Fd(i) => Some(job.fds[i.index(job.fds.len())].to_string().into()),
                Value::List(l, fds) => Some(
                    l.iter()
                        .map(|&x| {
                            if *fds {
                                job.fds[x as usize % job.fds.len()].to_string()
                            } else {
                                x.to_string()
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(",")
                        .into(),
                ),
                Value::Twice => Some(format!("{old},{old}").into()),
                Value::NotUtf8(b) => Some(OsString::from_vec(b.clone())),
            };
            let _ = name;
        }
        env
    }

    /// Runs the child with environment `env` and the job's descriptors; returns its RESULT
    /// line.
    fn run_child(job: &Job, env: &Env) -> String {
        let exe = std::env::current_exe().expect("test binary");
        // Under a 4 GiB address-space limit: a child that tries to allocate far more fails
        // at once (and is reported) instead of exhausting the machine's memory.
        let mut c = Command::new("sh");
        c.arg("-c")
            .arg(r#"ulimit -v 4194304 && exec "$0" "$@""#)
            .arg(exe)
            .args([
                "--exact",
                "bootstrap::fuzz::env_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env_clear()
            .env(CHILD, "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        for (k, v) in env {
            if let Some(v) = v {
                c.env(k, v);
            }
        }
        volley_sys::prepare_child(
            &mut c,
            volley_sys::ChildSetup {
                inherit: job.fds.clone(),
                cpus: None,
                parent: std::process::id(),
            },
        );
        let out = c.output().expect("start the child");
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        // libtest prints the test's name, then (with --nocapture) what it printed.
        let result = text.lines().find_map(|l| l.find("RESULT").map(|i| &l[i..]));
        assert!(
            out.status.success() && result.is_some(),
            "the child failed ({}) with environment {env:?}\n{text}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
        result.unwrap_or_default().to_string()
    }

    proptest! {
        #![proptest_config(config(1000))]

        /// The launcher's variables as `volley run` sets them give exactly the rank's place in
        /// the job; mutated, they give an error or a valid configuration that owns each
        /// descriptor once, never a panic or an abort.
        #[test]
        fn launcher_variables_give_an_error_or_a_valid_configuration(
            nodes in proptest::collection::vec(0usize..3, 1..6),
            rank in any::<Index>(),
            edits in proptest::collection::vec((0usize..32, value()), 0..4),
        ) {
            let job = job(&nodes, rank.index(nodes.len()));
            let env = child_env(&job, &edits);
            if edits.is_empty() {
                prop_assert_eq!(run_child(&job, &env), job.want.clone());
            } else {
                run_child(&job, &env);
            }
        }
    }

    proptest! {
        #![proptest_config(config(5000))]

        /// The numbers and descriptors in the variables: any text gives a value or an error
        /// naming the variable, never a panic; what a launcher writes reads back exactly.
        #[test]
        fn numbers_and_descriptors(s in ".{0,24}", n in any::<usize>(), fd in any::<i32>()) {
            match parse::<usize>(ENV_RANK, &s) {
                Ok(v) => prop_assert_eq!(Ok(v), s.trim().parse::<usize>()),
                Err(InitError::Env { var, value, .. }) => {
                    prop_assert_eq!(var, ENV_RANK);
                    prop_assert_eq!(value, s.clone());
                }
                Err(e) => prop_assert!(false, "{e}"),
            }
            match job_fd(ENV_SHM_FD, &s) {
                Ok(v) => prop_assert!(v > 2),
                Err(e) => prop_assert!(e.to_string().contains(ENV_SHM_FD), "{e}"),
            }
            prop_assert_eq!(parse::<usize>(ENV_SIZE, &format!(" {n}\n")).ok(), Some(n));
            prop_assert_eq!(job_fd(ENV_BOOT_FD, &fd.to_string()).ok(), (fd > 2).then_some(fd));
        }
    }

    /// What `launcher_variables_give_an_error_or_a_valid_configuration` found: a descriptor
    /// named twice (VOLLEY_BOOT_FD = a doorbell's or the segment's descriptor, or one doorbell
    /// twice in VOLLEY_WAKE_FDS) is accepted, and then owned twice: closed twice when the
    /// world drops it, the second time perhaps a descriptor opened since by someone else.
    /// Shrunk input: a one-rank job, VOLLEY_SHM_FD=3 VOLLEY_WAKE_FDS=4 VOLLEY_BOOT_FD=4.
    #[test]
    fn a_descriptor_named_twice_is_refused() {
        let set = |job: &Job, k: &'static str, v: String| -> Env {
            let mut env = child_env(job, &[]);
            match env.iter_mut().find(|(n, _)| *n == k) {
                Some(e) => e.1 = Some(v.into()),
                None => env.push((k, Some(v.into()))),
            }
            env
        };
        let one = job(&[0], 0);
        let two = job(&[0, 0], 0);
        for (job, env) in [
            (&one, set(&one, ENV_BOOT_FD, one.fds[1].to_string())),
            (&one, set(&one, ENV_BOOT_FD, one.fds[0].to_string())),
            (
                &two,
                set(&two, ENV_WAKE_FDS, format!("{0},{0}", two.fds[1])),
            ),
        ] {
            let r = run_child(job, &env);
            assert!(r.starts_with("RESULT err"), "{env:?}: {r}");
        }
    }

    /// A VOLLEY_BOOT_FD naming a descriptor that is not open is adopted without a check (the
    /// segment's and the doorbells' are checked first): the world then owns a descriptor
    /// number that is not its own, and closes it when dropped, perhaps someone else's by then.
    /// In a debug build, dropping it aborts the process ("fatal runtime error: IO Safety
    /// violation: owned file descriptor already closed"), found with VOLLEY_BOOT_FD=9 and
    /// VOLLEY_WAKE_FDS=4,4,4 in a one-rank job (the wrong count fails after the adoption).
    #[test]
    fn a_boot_descriptor_that_is_not_open_is_refused() {
        let one = job(&[0], 0);
        let mut env = child_env(&one, &[]);
        env.retain(|(k, _)| *k != ENV_BOOT_FD);
        env.push((ENV_BOOT_FD, Some("999".into())));
        let r = run_child(&one, &env);
        assert!(
            r.starts_with("RESULT err") && r.contains(ENV_BOOT_FD),
            "{r}"
        );
    }

    /// VOLLEY_SIZE is not bounded before `vec![node_id; size]` (when VOLLEY_RANK_NODES is
    /// absent): 18446744073709551615 panics ("capacity overflow"), 10000000000 asks for 80 GB
    /// ("memory allocation failed", an abort) or, where the kernel overcommits, touches tens
    /// of gigabytes in the scan that follows. Found with VOLLEY_RANK=4294967295
    /// VOLLEY_SIZE=18446744073709551615 (the rank check passes) in a one-rank job.
    #[test]
    fn a_huge_job_size_is_refused() {
        let one = job(&[0], 0);
        let mut env = child_env(&one, &[]);
        for (k, v) in env.iter_mut() {
            if *k == ENV_SIZE {
                *v = Some(usize::MAX.to_string().into());
            }
        }
        let r = run_child(&one, &env);
        assert!(r.starts_with("RESULT err"), "{r}");
    }
}
