//! Joining a job a foreign launcher started (Hydra over PMI-1, Slurm over PMI-2): no volley
//! process is above the ranks, so they set the job up among themselves.
//!
//! 1. Each rank puts `volley-R` = `<host> <pid> <token>` in the job's key-value space (the host is
//!    the kernel's boot id and the network namespace, so namespaces used as hosts count as
//!    hosts; rank 0's token is the job's) and fences once.
//! 2. It reads every rank's record, numbers the hosts in order of their lowest rank, and opens a
//!    pidfd on every other rank of its host (they are alive: they just put their records).
//! 3. The lowest rank of a host creates the segment and the doorbells, listens on an abstract Unix
//!    socket named after the token and the host (no file anywhere; it vanishes with the listener
//!    or the process), and hands the descriptors to each local rank that connects, after checking
//!    with SO_PEERCRED that the process at the other end is one of them. Each local rank checks
//!    the same of the leader. Nothing is left behind however the job ends.
//! 4. Ranks on other hosts trade network address cards through a second put and fence (only in
//!    jobs that span hosts).
//! 5. A watcher thread per rank sleeps on the pidfds and marks a local rank that ended before
//!    closing its world as VANISHED, waking every waiter (see docs/shm-layout.md).

use crate::bootstrap::{create_segment, Attached, JobInfo, Launcher};
use crate::config::Config;
use crate::error::InitError;
use crate::pmi::Pmi;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
use std::sync::Arc;
use std::time::{Duration, Instant};
use volley_shm::{RankState, Segment};
use volley_sys::EventFd;

/// This host, as the ranks of one job tell hosts apart: the kernel's boot id and the network
/// namespace (network namespaces used as hosts get their own shared memory and talk over the
/// network between them, as real hosts do).
fn host_identity() -> String {
    let boot = std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| hostname());
    let ns = std::fs::read_link("/proc/self/ns/net")
        .map(|p| p.display().to_string())
        .unwrap_or_default();
    let ns = ns.trim_start_matches("net:[").trim_end_matches(']');
    format!("{boot}/{ns}")
}

fn hostname() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "unknown-host".into())
}

struct Record {
    host: String,
    pid: u32,
    token: u64,
    /// The NUMA node the rank's CPUs (as its launcher bound it) lie on; None if they span
    /// nodes or it is not bound.
    numa: Option<usize>,
}

fn parse_record(r: usize, v: &[u8]) -> Result<Record, InitError> {
    let bad = || {
        InitError::LocalSetup(format!(
            "rank {r}'s record in the launcher's key-value space is not volley's ({:?}); is every rank of the job the same volley program?",
            String::from_utf8_lossy(v)
        ))
    };
    let s = std::str::from_utf8(v).map_err(|_| bad())?;
    let mut w = s.split(' ');
    let (Some(host), Some(pid), Some(token), Some(numa), None) =
        (w.next(), w.next(), w.next(), w.next(), w.next())
    else {
        return Err(bad());
    };
    Ok(Record {
        host: host.to_string(),
        pid: pid.parse().map_err(|_| bad())?,
        token: u64::from_str_radix(token, 16).map_err(|_| bad())?,
        numa: match numa {
            "-" => None,
            n => Some(n.parse().map_err(|_| bad())?),
        },
    })
}

/// How long local ranks wait for their host's leader to hand them the segment.
const HANDOFF: Duration = Duration::from_secs(60);

/// Joins the job the PMI launcher started.
pub(crate) fn attach(mut pmi: Pmi) -> Result<Attached, InitError> {
    let (rank, size) = (pmi.rank(), pmi.size());
    let me = std::process::id();
    let token = if rank == 0 {
        volley_sys::random_u64()
    } else {
        0
    };
    // Where Hydra or Slurm bound this rank: its rings are placed on that node.
    let numa = volley_sys::numa::node_of_cpus(&volley_sys::allowed_cpus())
        .map_or("-".to_string(), |n| n.to_string());
    let rec = format!("{} {me} {token:016x} {numa}", host_identity());
    pmi.put(&format!("volley-{rank}"), rec.as_bytes())?;
    pmi.fence()?;
    let mut recs = Vec::with_capacity(size);
    for r in 0..size {
        let v = pmi.get(&format!("volley-{r}"))?;
        recs.push(parse_record(r, &v)?);
    }
    let token = recs[0].token;
    // Hosts numbered in the order of their lowest rank.
    let mut hosts: Vec<&str> = Vec::new();
    let nodes: Vec<usize> = recs
        .iter()
        .map(|x| match hosts.iter().position(|h| *h == x.host) {
            Some(i) => i,
            None => {
                hosts.push(&x.host);
                hosts.len() - 1
            }
        })
        .collect();
    let node_id = nodes[rank];
    let local: Vec<usize> = (0..size).filter(|&r| nodes[r] == node_id).collect();
    let local_rank = local
        .iter()
        .position(|&r| r == rank)
        .expect("in its own host");
    // Opened now, while every rank is known to run (it just put its record): the pidfd then
    // names that process and no later one that reuses its id.
    let mut pidfds = Vec::new();
    for (li, &r) in local.iter().enumerate() {
        if r == rank {
            continue;
        }
        match volley_sys::unix::pidfd_open(recs[r].pid) {
            Ok(fd) => pidfds.push((li, fd)),
            Err(e) if e.raw_os_error() == Some(3) => {
                // ESRCH: it already ended; the watcher marks it at once.
                pidfds.push((li, dead_marker()?));
            }
            Err(e) => {
                return Err(InitError::LocalSetup(format!(
                    "cannot watch rank {r} (process {}): {e}; volley needs Linux 5.3 or later for pidfd_open",
                    recs[r].pid
                )))
            }
        }
    }
    let cfg = Config::from_env(local.len())?;
    let name = format!("volley-{token:016x}-{node_id}");
    let (seg, doorbells) = if local_rank == 0 {
        let homes: Vec<Option<usize>> = local.iter().map(|&r| recs[r].numa).collect();
        let seg = create_segment(local.len(), &cfg, token, &homes)?;
        let doorbells: Vec<EventFd> = (0..local.len())
            .map(|_| EventFd::new().map_err(InitError::Memfd))
            .collect::<Result<_, _>>()?;
        if local.len() > 1 {
            let pids: Vec<u32> = local[1..].iter().map(|&r| recs[r].pid).collect();
            let mut fds = vec![seg.fd()];
            fds.extend(doorbells.iter().map(|d| d.raw()));
            hand_out(&name, &pids, &fds)?;
        }
        (seg, doorbells)
    } else {
        let leader = local[0];
        let fds = take(&name, recs[leader].pid, local.len() + 1, &pidfds[0].1)?;
        let mut it = fds.into_iter();
        let seg_fd = it.next().expect("counted");
        let seg = Segment::attach(seg_fd, token)?;
        if seg.nranks() != local.len() {
            return Err(InitError::LocalSetup(format!(
                "the segment rank {leader} made has {} ranks, this host has {}",
                seg.nranks(),
                local.len()
            )));
        }
        let doorbells = it
            .map(|fd| {
                let raw = fd.as_raw_fd();
                // adopt checks what the descriptor is and takes it over.
                std::mem::forget(fd);
                EventFd::adopt(raw).map_err(|e| InitError::Doorbell { fd: raw, source: e })
            })
            .collect::<Result<Vec<_>, _>>()?;
        (seg, doorbells)
    };
    let watcher = Watcher::start(
        seg.clone(),
        pidfds,
        doorbells
            .iter()
            .map(|d| d.try_clone())
            .collect::<Result<_, _>>()
            .map_err(InitError::Memfd)?,
    )
    .map_err(InitError::ProgressThread)?;
    let info = JobInfo {
        rank,
        size,
        local_rank,
        local_size: local.len(),
        node_id,
        token,
        nodes,
        launcher: match pmi.flavor() {
            crate::pmi::Flavor::Pmi1 => Launcher::Pmi1,
            crate::pmi::Flavor::Pmi2 => Launcher::Pmi2,
        },
    };
    Ok(Attached {
        info,
        seg,
        doorbells,
        boot: None,
        pmi: Some(pmi),
        watcher: Some(watcher),
        launcher_watch: None,
    })
}

/// A descriptor that is readable at once: stands for a peer whose process had already ended.
fn dead_marker() -> Result<OwnedFd, InitError> {
    let e = EventFd::new().map_err(InitError::Memfd)?;
    e.notify();
    Ok(e.into_owned())
}

/// The leader's half: accepts one connection from each of `pids` and sends it `fds`.
fn hand_out(name: &str, pids: &[u32], fds: &[i32]) -> Result<(), InitError> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| InitError::LocalSetup(format!("socket name {name}: {e}")))?;
    let l = UnixListener::bind_addr(&addr)
        .map_err(|e| InitError::LocalSetup(format!("cannot listen on @{name}: {e}")))?;
    l.set_nonblocking(true)
        .map_err(|e| InitError::LocalSetup(format!("listener: {e}")))?;
    let uid = volley_sys::unix::uid();
    let mut waiting: Vec<u32> = pids.to_vec();
    let deadline = Instant::now() + HANDOFF;
    while !waiting.is_empty() {
        match l.accept() {
            Ok((s, _)) => {
                let Ok((pid, puid)) = volley_sys::unix::peer_cred(s.as_raw_fd()) else {
                    continue;
                };
                let Some(i) = waiting.iter().position(|&p| p == pid) else {
                    // Not a rank of this job on this host (or one already served): refused.
                    continue;
                };
                if puid != uid {
                    continue;
                }
                s.set_nonblocking(false)
                    .map_err(|e| InitError::LocalSetup(format!("socket: {e}")))?;
                send_all(&s, fds).map_err(|e| {
                    InitError::LocalSetup(format!("handing the segment to process {pid}: {e}"))
                })?;
                waiting.swap_remove(i);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline {
                    return Err(InitError::LocalSetup(format!(
                        "processes {waiting:?} of this host did not come for the segment within {} s",
                        HANDOFF.as_secs()
                    )));
                }
                volley_sys::poll_readable(l.as_raw_fd(), Duration::from_millis(100));
            }
            Err(e) => return Err(InitError::LocalSetup(format!("accept on @{name}: {e}"))),
        }
    }
    Ok(())
}

/// Sends `fds` in batches the kernel takes, each with a one-line header.
fn send_all(s: &UnixStream, fds: &[i32]) -> std::io::Result<()> {
    for chunk in fds.chunks(200) {
        let head = format!("volley-fds {}\n", chunk.len());
        volley_sys::unix::send_fds(s.as_raw_fd(), head.as_bytes(), chunk)?;
    }
    Ok(())
}

/// A local rank's half: connects to the leader (retrying until it listens) and takes `n`
/// descriptors. `leader_fd` is the leader's pidfd: if it ends meanwhile, fail at once.
fn take(
    name: &str,
    leader_pid: u32,
    n: usize,
    leader_fd: &OwnedFd,
) -> Result<Vec<OwnedFd>, InitError> {
    let addr = SocketAddr::from_abstract_name(name.as_bytes())
        .map_err(|e| InitError::LocalSetup(format!("socket name {name}: {e}")))?;
    let deadline = Instant::now() + HANDOFF;
    let s = loop {
        match UnixStream::connect_addr(&addr) {
            Ok(s) => break s,
            Err(e) => {
                if volley_sys::unix::pidfd_ended(leader_fd) {
                    return Err(InitError::LocalSetup(format!(
                        "the rank that makes this host's segment (process {leader_pid}) ended before handing it over"
                    )));
                }
                if Instant::now() > deadline {
                    return Err(InitError::LocalSetup(format!(
                        "no answer on @{name} from process {leader_pid} within {} s ({e})",
                        HANDOFF.as_secs()
                    )));
                }
                std::thread::sleep(Duration::from_millis(2));
            }
        }
    };
    match volley_sys::unix::peer_cred(s.as_raw_fd()) {
        Ok((pid, uid)) if pid == leader_pid && uid == volley_sys::unix::uid() => {}
        Ok((pid, _)) => {
            return Err(InitError::LocalSetup(format!(
                "@{name} is held by process {pid}, not by this host's leader (process {leader_pid}): someone else took the name"
            )))
        }
        Err(e) => return Err(InitError::LocalSetup(format!("SO_PEERCRED: {e}"))),
    }
    s.set_read_timeout(Some(HANDOFF))
        .map_err(|e| InitError::LocalSetup(format!("socket: {e}")))?;
    let mut fds = Vec::with_capacity(n);
    let mut head = Vec::new();
    while fds.len() < n {
        let mut buf = [0u8; 64];
        let (got, mut more) =
            volley_sys::unix::recv_fds(s.as_raw_fd(), &mut buf, 200).map_err(|e| {
                InitError::LocalSetup(format!(
                    "receiving the segment from process {leader_pid}: {e}"
                ))
            })?;
        if got == 0 {
            return Err(InitError::LocalSetup(format!(
                "process {leader_pid} closed the connection after {} of {n} descriptors",
                fds.len()
            )));
        }
        head.extend_from_slice(&buf[..got]);
        fds.append(&mut more);
    }
    if fds.len() != n || !head.starts_with(b"volley-fds ") {
        return Err(InitError::LocalSetup(format!(
            "process {leader_pid} sent {} descriptors, {n} expected",
            fds.len()
        )));
    }
    Ok(fds)
}

/// Sleeps on the pidfds of the other ranks of this host and marks those that end before
/// closing their world.
pub(crate) struct Watcher {
    stop: EventFd,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Watcher {
    fn start(
        seg: Arc<Segment>,
        mut peers: Vec<(usize, OwnedFd)>,
        doorbells: Vec<EventFd>,
    ) -> std::io::Result<Watcher> {
        let stop = EventFd::new()?;
        let stop_fd = stop.try_clone()?;
        let thread = std::thread::Builder::new()
            .name("volley-watch".into())
            .stack_size(64 * 1024)
            .spawn(move || loop {
                let mut fds = vec![stop_fd.raw()];
                fds.extend(peers.iter().map(|(_, f)| f.as_raw_fd()));
                let Ok(ready) = volley_sys::unix::poll_any(&fds, None) else {
                    return;
                };
                if ready.contains(&0) {
                    return;
                }
                let mut ended: Vec<usize> = ready.iter().map(|&i| i - 1).collect();
                ended.sort_unstable_by(|a, b| b.cmp(a));
                for i in ended {
                    let (li, _) = peers.swap_remove(i);
                    // The Acquire in state_epoch makes a FINALIZED the rank wrote before it
                    // ended visible here.
                    let _ = seg.state_epoch();
                    if seg.rank_state(li) == RankState::Alive {
                        seg.set_rank_state(li, RankState::Vanished);
                        for d in &doorbells {
                            d.notify();
                        }
                    }
                }
                if peers.is_empty() {
                    return;
                }
            })?;
        Ok(Watcher {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Watcher {
    fn drop(&mut self) {
        self.stop.notify();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
