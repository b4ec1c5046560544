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
    let boot = match var(ENV_BOOT_FD) {
        Some(v) => Some(volley_sys::adopt_fd(job_fd(ENV_BOOT_FD, &v)?)),
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
    if std::fs::metadata(format!("/proc/self/fd/{shm_fd}")).is_err() {
        return Err(InitError::Env {
            var: ENV_SHM_FD,
            value: shm_fd.to_string(),
            why: "no such open descriptor in this process (was it closed, or the variable copied from another process?)".into(),
        });
    }
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
    }))
}

/// A world of one: the process made its own segment.
pub(crate) fn singleton(cfg: &Config) -> Result<Attached, InitError> {
    let token = volley_sys::random_u64();
    let seg = create_segment(1, cfg, token)?;
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
    })
}

pub(crate) fn create_segment(
    nranks: usize,
    cfg: &Config,
    token: u64,
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
    Ok(Segment::create(fd, params, &where_)?)
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
        Self::create_with_token(nranks, cfg, volley_sys::random_u64())
    }

    /// The shared state of this node's `nranks` ranks of a job whose token the launcher chose.
    pub fn create_with_token(
        nranks: usize,
        cfg: &Config,
        token: u64,
    ) -> Result<JobLaunch, InitError> {
        let seg = create_segment(nranks, cfg, token)?;
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
