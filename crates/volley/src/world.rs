//! The public face: [`World`], [`Endpoint`], [`Message`], [`SendRequest`], [`ActivePort`].
//!
//! Threading contract: a [`World`] (and its endpoints, messages and requests) is `Send` and
//! `Sync`, and is used by one thread at a time (MPI_THREAD_SERIALIZED, or a Python call with the
//! GIL released): progress has a single owner. The state sits behind [`Exclusive`] cells (one
//! uncontended atomic swap per step, no lock, no system call), so two threads inside volley at
//! once is reported as a panic that says so, never a data race. Waiting operations are loops over the
//! engine's non-blocking steps; the engine is borrowed only for the length of a step and never
//! while user code (an active-port handler) runs, so a handler may send.

use crate::backoff::Backoff;
use crate::bootstrap::{self, JobInfo};
use crate::config::{Config, WaitMode};
use crate::counters::Counter;
use crate::engine::{Cursor, Engine, Partial, Pending, Poll, PortKind};
use crate::error::{InitError, OpenError, RecvError, SendError};
use crate::matching::{Pattern, Status};
use std::ops::Deref;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;
use volley_shm::{Kind, RecordInfo, SharedHeld};
use volley_sys::{Exclusive, ExclusiveGuard};

/// How deep this world is inside active-port handlers. Only the thread that owns progress
/// touches it (see the threading contract above), so relaxed loads and stores suffice.
#[derive(Default)]
struct Depth(AtomicU32);

impl Depth {
    fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
    fn set(&self, v: u32) {
        self.0.store(v, Ordering::Relaxed)
    }
}

static INITIALISED: AtomicBool = AtomicBool::new(false);

/// No port: polls on behalf of active ports only.
const NO_PORT: u32 = u32::MAX;

type Handler = Arc<Exclusive<Box<dyn FnMut(&[u8], Source) + Send>>>;

/// Where a message came from: the sending rank and the port of the sending endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    pub rank: usize,
    pub port: u32,
}

struct Inner {
    eng: Exclusive<Engine>,
    handlers: Exclusive<Vec<(u32, Handler)>>,
    dispatch_depth: Depth,
    info: JobInfo,
    cfg: Config,
    /// Why single copy is off in this process, if it is.
    single_copy_off: Option<String>,
    /// Job rank of each local rank, and local rank (None: on another host) of each job rank.
    l2g: Vec<usize>,
    g2l: Vec<Option<usize>>,
    /// The ranks on other hosts, when there are any.
    net: Option<Exclusive<crate::net::Net>>,
    /// With a network: one descriptor over the doorbell and the socket, for Endpoint::as_raw_fd.
    poll_fd: Option<std::os::fd::OwnedFd>,
}

/// This process's membership of its job. Cheap to clone (all clones are the same world).
#[derive(Clone)]
pub struct World {
    inner: Arc<Inner>,
}

impl World {
    /// Joins the job described by the environment `volley run` sets, or, without it, makes a
    /// world of one rank. One world per process.
    pub fn init() -> Result<World, InitError> {
        if INITIALISED.swap(true, Ordering::SeqCst) {
            return Err(InitError::AlreadyInitialised);
        }
        let r = Self::init_inner();
        if r.is_err() {
            INITIALISED.store(false, Ordering::SeqCst);
        }
        r
    }

    fn init_inner() -> Result<World, InitError> {
        let attached = match bootstrap::attach_from_env()? {
            Some(a) => a,
            None => bootstrap::singleton(&Config::from_env(1)?)?,
        };
        let cfg = Config::from_env(attached.info.local_size)?;
        let single_copy_off = crate::modes::single_copy_unavailable(&cfg);
        let l2g = attached.info.local_ranks();
        let mut g2l = vec![None; attached.info.size];
        for (li, &g) in l2g.iter().enumerate() {
            g2l[g] = Some(li);
        }
        let mut eng = Engine::new(
            attached.seg,
            attached.info.local_rank,
            attached.doorbells,
            single_copy_off.is_none(),
            cfg.single_copy_threshold,
        );
        eng.l2g = l2g.clone();
        eng.multi_node = attached.info.is_multi_node();
        let net = match attached.boot {
            Some(boot) if attached.info.is_multi_node() => {
                Some(Exclusive::new(crate::net::Net::open(&attached.info, boot)?))
            }
            _ => None,
        };
        let poll_fd = match &net {
            Some(n) => Some(
                volley_sys::net::epoll_of(&[eng.doorbell().raw(), n.borrow_mut().fd()])
                    .map_err(InitError::Memfd)?,
            ),
            None => None,
        };
        let world = World {
            inner: Arc::new(Inner {
                eng: Exclusive::new(eng),
                handlers: Exclusive::new(Vec::new()),
                dispatch_depth: Depth::default(),
                info: attached.info,
                cfg,
                single_copy_off,
                l2g,
                g2l,
                net,
                poll_fd,
            }),
        };
        if world.inner.cfg.progress_thread {
            world.start_progress_thread().map_err(InitError::Memfd)?;
        }
        Ok(world)
    }

    pub fn rank(&self) -> usize {
        self.inner.info.rank
    }

    pub fn size(&self) -> usize {
        self.inner.info.size
    }

    pub fn local_rank(&self) -> usize {
        self.inner.info.local_rank
    }

    pub fn node_id(&self) -> usize {
        self.inner.info.node_id
    }

    /// The job's random token: two jobs never share one.
    pub fn token(&self) -> u64 {
        self.inner.info.token
    }

    pub fn info(&self) -> &JobInfo {
        &self.inner.info
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// Starts the progress thread (also VOLLEY_PROGRESS_THREAD=1): from now on a non-blocking
    /// send that cannot finish at once is finished by that thread while the application
    /// computes. Idempotent.
    pub fn start_progress_thread(&self) -> std::io::Result<()> {
        let mut e = self.eng();
        if e.progress.is_none() {
            let t = crate::progress::ProgressThread::start(e.seg.clone(), e.me, &e.doorbells)?;
            e.progress = Some(t);
        }
        Ok(())
    }

    /// The network device carrying messages to ranks on other hosts ("udp", "eth", with
    /// "+faults" when VOLLEY_FAULTS is set), or None in a job on one host.
    pub fn transport(&self) -> Option<String> {
        self.inner.net.as_ref().map(|n| n.borrow_mut().kind())
    }

    /// The network counters (protocol and device), or nothing in a job on one host.
    pub fn net_counters(&self) -> Vec<(String, u64)> {
        self.inner
            .net
            .as_ref()
            .map(|n| n.borrow_mut().counters())
            .unwrap_or_default()
    }

    /// Whether the progress thread runs.
    pub fn progress_thread(&self) -> bool {
        self.eng().progress.is_some()
    }

    /// Why this process cannot use single copy, or None if it can.
    pub fn single_copy_unavailable(&self) -> Option<&str> {
        self.inner.single_copy_off.as_deref()
    }

    /// Largest message that travels as one record (lent in place by recv()).
    pub fn max_inline(&self) -> usize {
        self.eng().max_payload
    }

    /// The process's counters, by name, in the order of [`crate::COUNTERS`].
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        self.eng().counters.snapshot()
    }

    fn eng(&self) -> ExclusiveGuard<'_, Engine> {
        self.inner.eng.borrow_mut()
    }

    fn claim_port(&self, port: u32, kind: PortKind) -> Result<(), OpenError> {
        let mut e = self.eng();
        if port == NO_PORT || e.port_kind(port).is_some() {
            return Err(OpenError::PortInUse { port });
        }
        e.ports.push((port, kind));
        e.ports_gen += 1;
        Ok(())
    }

    /// Opens a Directed-Point endpoint on `port`. Messages sent to (this rank, port) before it
    /// was opened wait in their rings and are delivered once it is.
    pub fn open(&self, port: u32) -> Result<Endpoint, OpenError> {
        self.claim_port(port, PortKind::Endpoint)?;
        Ok(Endpoint {
            world: self.clone(),
            port,
            target: AtomicU64::new(NO_TARGET),
            wait: AtomicU64::new(wait_to_bits(self.inner.cfg.wait)),
            best_effort: AtomicBool::new(false),
        })
    }

    /// Binds a GAMMA active port: `handler` runs with each message that arrives on `port` and its
    /// source, whenever this process makes progress (any volley call that waits, or
    /// [`World::progress`]). The handler may send; it should not wait for messages itself.
    pub fn bind<F>(&self, port: u32, handler: F) -> Result<ActivePort, OpenError>
    where
        F: FnMut(&[u8], Source) + Send + 'static,
    {
        self.claim_port(port, PortKind::Active)?;
        let h: Handler = Arc::new(Exclusive::new(Box::new(handler)));
        self.inner.handlers.borrow_mut().push((port, h));
        Ok(ActivePort {
            world: self.clone(),
            port,
        })
    }

    /// Moves queued sends along and runs handlers for the active-port messages that have arrived.
    /// Never waits. Returns how many messages it completed or handled.
    pub fn progress(&self) -> Result<usize, RecvError> {
        let mut n = self.eng().drive_pending();
        if let Some(net) = self.inner.net.as_ref() {
            n += net.borrow_mut().pump();
        }
        if self.inner.dispatch_depth.get() > 0 {
            return Ok(n);
        }
        n += self.net_dispatch();
        for _ in 0..64 {
            let p = self.eng().poll_port(NO_PORT, true)?;
            match p {
                Poll::Active(src, info) => n += self.dispatch(src, info)?,
                _ => break,
            }
        }
        Ok(n)
    }

    /// Waits until at least one active-port message has been handled or queued send completed.
    pub fn progress_wait(&self) -> Result<usize, RecvError> {
        let mut w = Waiter::new(self.inner.cfg.wait);
        loop {
            self.eng().refresh_fates();
            let n = self.progress()?;
            if n > 0 {
                w.finish(self);
                return Ok(n);
            }
            w.idle(self, NO_PORT, None)?;
        }
    }

    /// Runs the handler for one active-port record (or gathers a fragment of one).
    fn dispatch(&self, src: usize, info: RecordInfo) -> Result<usize, RecvError> {
        let handler = self
            .inner
            .handlers
            .borrow_mut()
            .iter()
            .find(|(p, _)| *p == info.context)
            .map(|(_, h)| h.clone());
        let Some(handler) = handler else { return Ok(0) };
        let source = Source {
            rank: self.inner.l2g[src],
            port: info.tag,
        };
        let depth = &self.inner.dispatch_depth;
        if info.kind == Kind::Whole {
            let held = self.eng().rx[src].take_shared(&info);
            depth.set(depth.get() + 1);
            (handler.borrow_mut())(held.as_slice(), source);
            depth.set(depth.get() - 1);
            let mut e = self.eng();
            e.rx[src].release(held);
            e.counters.add(Counter::ActiveDispatches, 1);
            e.counters.add(Counter::MsgsRecvd, 1);
            e.counters.add(Counter::BytesRecvd, info.len as u64);
            return Ok(1);
        }
        let done = if info.kind == Kind::Rndv {
            let mut e = self.eng();
            let mut buf = e.spare.take().unwrap_or_default();
            copy_single(&mut e, src, &info, Dest::Vec(&mut buf))?;
            Some((buf, info.tag))
        } else {
            gather(&mut self.eng(), info.context, src, &info)?
        };
        if let Some((buf, tag)) = done {
            depth.set(depth.get() + 1);
            (handler.borrow_mut())(
                &buf,
                Source {
                    rank: self.inner.l2g[src],
                    port: tag,
                },
            );
            depth.set(depth.get() - 1);
            let mut e = self.eng();
            e.counters.add(Counter::ActiveDispatches, 1);
            e.counters.add(Counter::MsgsRecvd, 1);
            e.counters.add(Counter::BytesRecvd, buf.len() as u64);
            e.spare = Some(buf);
            return Ok(1);
        }
        Ok(0)
    }

    /// The local rank of job rank `rank`, or None when it is on another host.
    fn route(&self, rank: usize) -> Option<usize> {
        self.inner.g2l[rank]
    }

    fn net(&self) -> ExclusiveGuard<'_, crate::net::Net> {
        self.inner
            .net
            .as_ref()
            .expect("a rank on another host implies the network is open")
            .borrow_mut()
    }

    /// One round of network I/O and the active-port handlers it made due; the network, if any.
    fn net_poll(&self) -> Option<&Exclusive<crate::net::Net>> {
        let net = self.inner.net.as_ref()?;
        net.borrow_mut().pump();
        self.net_dispatch();
        Some(net)
    }

    /// Runs the handlers of active-port messages that came over the network.
    fn net_dispatch(&self) -> usize {
        let Some(net) = self.inner.net.as_ref() else {
            return 0;
        };
        if self.inner.dispatch_depth.get() > 0 {
            return 0;
        }
        let mut n = 0;
        for _ in 0..64 {
            // No list of ports is built: the handlers are looked up in place.
            let got = {
                let handlers = self.inner.handlers.borrow_mut();
                if handlers.is_empty() {
                    break;
                }
                net.borrow_mut()
                    .take_any(|p| handlers.iter().any(|(q, _)| *q == p))
                    .map(|(port, m)| {
                        let h = handlers
                            .iter()
                            .find(|(q, _)| *q == port)
                            .map(|(_, h)| h.clone());
                        (h, m)
                    })
            };
            let Some((handler, m)) = got else { break };
            if let Some(h) = handler {
                let depth = &self.inner.dispatch_depth;
                depth.set(depth.get() + 1);
                (h.borrow_mut())(
                    &m.data,
                    Source {
                        rank: m.src,
                        port: m.tag,
                    },
                );
                depth.set(depth.get() - 1);
                n += 1;
            }
            net.borrow_mut().recycle(m.data);
        }
        n
    }

    /// Why nothing more can come from the network, if so.
    fn net_dead_end(&self, from: Option<usize>) -> Option<RecvError> {
        let net = self.inner.net.as_ref()?.borrow_mut();
        let lost = |r: usize| {
            net.lost
                .iter()
                .find(|(x, _)| *x == r)
                .map(|&(rank, fate)| RecvError::PeerLost(crate::PeerLost { rank, fate }))
        };
        match from {
            Some(r) if self.inner.g2l[r].is_none() => lost(r),
            Some(_) => None,
            None => net
                .lost
                .iter()
                .find(|(_, f)| f.is_failure())
                .map(|&(rank, fate)| RecvError::PeerLost(crate::PeerLost { rank, fate })),
        }
    }

    fn check_rank(&self, rank: usize) -> Result<(), SendError> {
        if rank >= self.size() {
            return Err(SendError::NoSuchRank {
                rank,
                size: self.size(),
            });
        }
        Ok(())
    }

    /// Waits until every queued non-blocking send to `dst` is in its ring.
    fn flush_pending_to(&self, dst: usize) -> Result<(), SendError> {
        let mut b = Backoff::new();
        loop {
            {
                let mut e = self.eng();
                e.drive_pending();
                if e.pending[dst].is_empty() {
                    return Ok(());
                }
                if let Some(l) = e.send_dead_end(dst) {
                    return Err(l.into());
                }
            }
            let _ = self.progress();
            b.snooze();
        }
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        let e = self.eng.get_mut();
        // Nothing is lost: queued sends go out before we say we are finished.
        let mut b = Backoff::new();
        while e.npending > 0
            || !e.inflight.is_empty()
            || e.progress.as_ref().is_some_and(|p| p.lent > 0)
        {
            e.refresh_fates();
            e.collect_returns();
            e.drive_pending();
            // Buffers of single copies in flight must outlive the receivers' reads.
            e.inflight.retain(|p| {
                let d = p.borrow_mut().dst;
                e.fates[d].is_none()
            });
            let stuck: Vec<usize> = (0..e.n)
                .filter(|&d| !e.pending[d].is_empty() && e.send_dead_end(d).is_some())
                .collect();
            for d in stuck {
                let lost = e.pending[d].len();
                eprintln!(
                    "volley: rank {}: {lost} queued message(s) to rank {d} not delivered: {}",
                    self.info.rank,
                    e.send_dead_end(d).expect("checked")
                );
                e.npending -= lost;
                e.pending[d].clear();
            }
            b.snooze();
        }
        if let Some(mut p) = e.progress.take() {
            let _ = p.to.send(crate::progress::ToThread::Stop);
            if let Some(h) = p.handle.take() {
                let _ = h.join();
            }
            while let Ok(r) = p.from.try_recv() {
                e.counters.merge(&r.counters);
            }
        }
        // Everything sent over the network is acknowledged before we leave, then the peers are
        // told we finished (so our silence is not taken for a failure).
        if let Some(net) = self.net.as_ref() {
            let mut n = net.borrow_mut();
            n.flush(std::time::Duration::from_secs(30));
            n.close();
        }
        e.mark_finalized();
        if self.cfg.print_counters {
            let mut s = format!("volley counters, rank {}:\n", self.info.rank);
            for ((name, unit, _), (_, v)) in crate::COUNTERS.iter().zip(e.counters.snapshot()) {
                s.push_str(&format!("  {name:<22} {v:>14} {unit}\n"));
            }
            if let Some(net) = self.net.as_ref() {
                for (name, v) in net.borrow_mut().counters() {
                    s.push_str(&format!("  {name:<22} {v:>14}\n"));
                }
            }
            eprint!("{s}");
        }
    }
}

/// Where a single-copy message goes.
enum Dest<'a> {
    Slice(&'a mut [u8]),
    Vec(&'a mut Vec<u8>),
}

/// Takes the descriptor `info` from the ring from `src` and copies the message it describes
/// straight out of the sender's memory, then tells the sender it may reuse its buffer.
fn copy_single(
    e: &mut Engine,
    src: usize,
    info: &RecordInfo,
    dest: Dest<'_>,
) -> Result<usize, RecvError> {
    let held = e.rx[src].take(info);
    let (addr, len) = match e.rx[src].rndv_desc(&held) {
        Ok(d) => d,
        Err(c) => {
            return Err(RecvError::Corrupt {
                rank: e.l2g[src],
                why: c.0,
            })
        }
    };
    let len = len as usize;
    let pid = e
        .seg
        .rank(src)
        .pid
        .load(std::sync::atomic::Ordering::Relaxed);
    let r = match dest {
        Dest::Slice(buf) => volley_sys::process_vm_read(pid, &mut buf[..len], addr),
        Dest::Vec(v) => volley_sys::process_vm_read_to_vec(pid, addr, len, v),
    };
    match r {
        Ok(()) => {
            e.rx[src].rndv_finish(held, true);
            e.counters.add(Counter::SingleCopyRecvs, 1);
            e.counters.add(Counter::SingleCopyBytes, len as u64);
            Ok(len)
        }
        Err(err) => {
            e.rx[src].rndv_finish(held, false);
            e.refresh_fates();
            if err.raw_os_error() == Some(3) {
                // ESRCH: the sender is gone.
                if let Some(fate) = e.fates[src] {
                    return Err(RecvError::PeerLost(crate::PeerLost {
                        rank: e.l2g[src],
                        fate,
                    }));
                }
            }
            Err(RecvError::SingleCopy {
                rank: e.l2g[src],
                len,
                why: err.to_string(),
            })
        }
    }
}

/// Adds the record `info` (from `src`, for `port`) to the message being gathered, taking and
/// releasing it. Returns the whole message once its last fragment is in.
fn gather(
    e: &mut Engine,
    port: u32,
    src: usize,
    info: &RecordInfo,
) -> Result<Option<(Vec<u8>, u32)>, RecvError> {
    let idx = e
        .partials
        .iter()
        .position(|p| p.port == port && p.src == src);
    let held = e.rx[src].take(info);
    let result = match (info.kind, idx) {
        (Kind::First, None) => {
            let total = info.total_len as usize;
            let mut buf = e.spare.take().unwrap_or_default();
            buf.clear();
            buf.reserve_exact(total);
            buf.extend_from_slice(e.rx[src].payload(&held));
            e.partials.push(Partial {
                port,
                src,
                tag: info.tag,
                total,
                buf,
            });
            Ok(None)
        }
        (Kind::Middle | Kind::Last, Some(i)) => {
            let p = &mut e.partials[i];
            p.buf.extend_from_slice(e.rx[src].payload(&held));
            if p.buf.len() > p.total || (info.kind == Kind::Last) != (p.buf.len() == p.total) {
                Err(RecvError::Corrupt {
                    rank: e.l2g[src],
                    why: format!(
                        "fragments add up to {} bytes, message is {}",
                        p.buf.len(),
                        p.total
                    ),
                })
            } else if info.kind == Kind::Last {
                let p = e.partials.swap_remove(i);
                Ok(Some((p.buf, p.tag)))
            } else {
                Ok(None)
            }
        }
        (kind, _) => Err(RecvError::Corrupt {
            rank: e.l2g[src],
            why: format!("unexpected {kind:?} record for port {port}"),
        }),
    };
    e.rx[src].release(held);
    e.counters.add(Counter::Fragments, 1);
    result
}

/// A Directed-Point endpoint: a port of this process from which messages are sent to targets and
/// at which messages from any rank are received. Closed on drop.
pub struct Endpoint {
    world: World,
    port: u32,
    /// (rank + 1) << 32 | port, or NO_TARGET. Atomics (relaxed: one owner at a time) rather
    /// than Cells, so that an endpoint is Sync like its world.
    target: AtomicU64,
    /// The wait mode, see wait_to_bits.
    wait: AtomicU64,
    /// GAMMA's best-effort mode for messages to other hosts (a property of the sending endpoint,
    /// whatever tag a message carries).
    best_effort: AtomicBool,
}

impl Endpoint {
    pub fn port(&self) -> u32 {
        self.port
    }

    pub fn world(&self) -> &World {
        &self.world
    }

    /// Sets the default destination of [`Endpoint::send`] and friends.
    pub fn target(&self, rank: usize, port: u32) -> Result<(), SendError> {
        self.world.check_rank(rank)?;
        self.target
            .store(((rank as u64 + 1) << 32) | port as u64, Ordering::Relaxed);
        Ok(())
    }

    /// GAMMA's best-effort mode for this endpoint's messages to other hosts: sent once, never
    /// acknowledged or retransmitted, lost whole if a fragment is lost, not ordered with the
    /// reliable messages. Messages within a host are always reliable.
    pub fn set_best_effort(&self, on: bool) {
        self.best_effort.store(on, Ordering::Relaxed);
    }

    /// How this endpoint's receives wait (default: the process's VOLLEY_WAIT).
    pub fn set_wait_mode(&self, mode: WaitMode) {
        self.wait.store(wait_to_bits(mode), Ordering::Relaxed);
    }

    fn dest(&self) -> Result<(usize, u32), SendError> {
        match self.target.load(Ordering::Relaxed) {
            NO_TARGET => Err(SendError::NoTarget { port: self.port }),
            t => Ok(((t >> 32) as usize - 1, t as u32)),
        }
    }

    /// Sends `data` to the target; returns when `data` may be reused (it is in the ring). Waits
    /// while the ring is full; fails if the target is gone.
    pub fn send(&self, data: &[u8]) -> Result<(), SendError> {
        let (r, p) = self.dest()?;
        self.send_to(r, p, data)
    }

    /// Sends `data` to (rank, port).
    pub fn send_to(&self, rank: usize, port: u32, data: &[u8]) -> Result<(), SendError> {
        self.send_env(rank, port, self.port, data)
    }

    /// Sends `data` to `rank` with the envelope (context, tag): the core of every blocking send.
    fn send_env(&self, rank: usize, context: u32, tag: u32, data: &[u8]) -> Result<(), SendError> {
        let w = &self.world;
        w.check_rank(rank)?;
        let rank = match w.route(rank) {
            Some(li) => li,
            None => return self.net_send(rank, context, tag, data, true),
        };
        // One borrow for every check (each borrow is an atomic swap on the hot path).
        let mut c = Cursor::default();
        let single = {
            let mut e = w.eng();
            if let Some(l) = e.send_dead_end(rank) {
                return Err(l.into());
            }
            let single = e.use_single_copy(rank, data.len());
            if !e.pending[rank].is_empty() {
                drop(e);
                w.flush_pending_to(rank)?;
            } else if !single {
                // The common case, in this same borrow: the message fits the ring now.
                let done = e.push(rank, tag, context, data, &mut c);
                if done || c.off != 0 {
                    e.ring_doorbell(rank);
                }
                if done {
                    return Ok(());
                }
            }
            single
        };
        if single {
            return self.send_single_copy(rank, context, tag, data);
        }
        let mut b = Backoff::new();
        loop {
            {
                let mut e = w.eng();
                let before = c.off;
                let done = e.push(rank, tag, context, data, &mut c);
                if done || c.off != before {
                    e.ring_doorbell(rank);
                    b.reset();
                }
                if done {
                    return Ok(());
                }
                if let Some(l) = e.send_dead_end(rank) {
                    return Err(l.into());
                }
            }
            // The ring is full: let handlers and queued sends run while we wait.
            let _ = w.progress();
            b.snooze();
        }
    }

    /// Sends to a rank on another host: the engine takes a copy (returns at once unless the
    /// queue to that rank is full: then waits, or with `wait` false says WouldBlock).
    fn net_send(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: &[u8],
        wait: bool,
    ) -> Result<(), SendError> {
        let w = &self.world;
        let how = if self.best_effort.load(Ordering::Relaxed) {
            volley_proto::Reliability::BestEffort
        } else {
            volley_proto::Reliability::Reliable
        };
        let mut b = Backoff::new();
        loop {
            let r = {
                // No pump first: a message that fits goes out at once, one system call.
                w.net().try_send(rank, tag, context, data, how)
            };
            match r {
                Ok(()) => {
                    let mut e = w.eng();
                    e.counters.add(Counter::MsgsSent, 1);
                    e.counters.add(Counter::BytesSent, data.len() as u64);
                    return Ok(());
                }
                Err(true) => {
                    // Lost or finished: the pump collects which from the engine's events.
                    let mut n = w.net();
                    n.pump();
                    let fate = n
                        .lost
                        .iter()
                        .find(|(x, _)| *x == rank)
                        .map_or(crate::Fate::Unreachable, |&(_, f)| f);
                    return Err(crate::PeerLost { rank, fate }.into());
                }
                Err(false) if !wait => return Err(SendError::WouldBlock { rank }),
                Err(false) => {
                    // progress() pumps the network: acknowledgements make room.
                    let _ = w.progress();
                    b.snooze();
                }
            }
        }
    }

    /// A message from another host for this endpoint, if one has arrived.
    fn net_take(&self) -> Option<Message> {
        let w = &self.world;
        let m = w.net_poll()?.borrow_mut().take(self.port)?;
        let mut e = w.eng();
        e.counters.add(Counter::MsgsRecvd, 1);
        e.counters.add(Counter::BytesRecvd, m.data.len() as u64);
        Some(Message {
            world: w.clone(),
            src: Source {
                rank: m.src,
                port: m.tag,
            },
            body: Body::Owned(m.data),
        })
    }

    /// Single copy: a descriptor into the ring, then wait until the receiver has copied `data`
    /// out of our memory (only then may the caller reuse it).
    fn send_single_copy(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<(), SendError> {
        let w = &self.world;
        let mut b = Backoff::new();
        let pos = loop {
            {
                let mut e = w.eng();
                if let Some(pos) = e.push_descriptor(rank, tag, context, data) {
                    e.ring_doorbell(rank);
                    break pos;
                }
                if let Some(l) = e.send_dead_end(rank) {
                    return Err(l.into());
                }
            }
            let _ = w.progress();
            b.snooze();
        };
        b.reset();
        loop {
            {
                let mut e = w.eng();
                match e.seg.rndv_state(e.me, rank, pos) {
                    volley_shm::RndvState::Done => return Ok(()),
                    volley_shm::RndvState::Failed => {
                        return Err(SendError::SingleCopyFailed {
                            rank: w.inner.l2g[rank],
                        })
                    }
                    volley_shm::RndvState::Pending => {}
                }
                if let Some(l) = e.send_dead_end(rank) {
                    return Err(l.into());
                }
            }
            let _ = w.progress();
            b.snooze();
        }
    }

    /// Sends a message of `len` bytes that `fill` writes straight into the receive pool (the ring
    /// in shared memory): no copy on the sending side. `len` is at most [`World::max_inline`].
    /// Waits while the ring is full; `fill` runs once, when there is room.
    pub fn send_with(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), SendError> {
        let (rank, port) = self.dest()?;
        self.send_with_to(rank, port, len, fill)
    }

    pub fn send_with_to(
        &self,
        rank: usize,
        port: u32,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), SendError> {
        let w = &self.world;
        w.check_rank(rank)?;
        let rank = match w.route(rank) {
            Some(li) => li,
            None => {
                let mut buf = w.net().buffer(len);
                fill(&mut buf);
                let r = self.net_send(rank, port, self.port, &buf, true);
                w.net().recycle(buf);
                return r;
            }
        };
        let max = w.max_inline();
        if len > max {
            return Err(SendError::TooLargeForSendWith { len, max });
        }
        if let Some(l) = w.eng().send_dead_end(rank) {
            return Err(l.into());
        }
        w.flush_pending_to(rank)?;
        let meta = volley_shm::Meta {
            kind: Kind::Whole,
            tag: self.port,
            context: port,
            total_len: len as u64,
        };
        let mut fill = Some(fill);
        let mut b = Backoff::new();
        loop {
            {
                let mut e = w.eng();
                let sent = match e.tx[rank].as_mut() {
                    Some(tx) => tx.try_push_with(meta, len, |buf| {
                        (fill.take().expect("fill runs once"))(buf)
                    }),
                    None => false,
                };
                if sent {
                    e.counters.add(Counter::MsgsSent, 1);
                    e.counters.add(Counter::InlineSends, 1);
                    e.counters.add(Counter::BytesSent, len as u64);
                    e.ring_doorbell(rank);
                    return Ok(());
                }
                e.counters.add(Counter::BackPressure, 1);
                if let Some(l) = e.send_dead_end(rank) {
                    return Err(l.into());
                }
            }
            let _ = w.progress();
            b.snooze();
        }
    }

    /// Sends `data` to the target only if it fits in the ring now; otherwise
    /// [`SendError::WouldBlock`] and nothing is sent.
    pub fn try_send(&self, data: &[u8]) -> Result<(), SendError> {
        let (r, p) = self.dest()?;
        self.try_send_to(r, p, data)
    }

    pub fn try_send_to(&self, rank: usize, port: u32, data: &[u8]) -> Result<(), SendError> {
        let w = &self.world;
        w.check_rank(rank)?;
        let rank = match w.route(rank) {
            Some(li) => li,
            None => return self.net_send(rank, port, self.port, data, false),
        };
        let mut e = w.eng();
        if data.len() > e.ring_payload_capacity {
            return Err(SendError::TooLargeForTrySend {
                len: data.len(),
                max: e.ring_payload_capacity,
            });
        }
        if let Some(l) = e.send_dead_end(rank) {
            return Err(l.into());
        }
        e.drive_pending();
        if !e.pending[rank].is_empty()
            || !e.tx[rank]
                .as_mut()
                .is_some_and(|tx| tx.can_fit_message(data.len()))
        {
            e.counters.add(Counter::BackPressure, 1);
            return Err(SendError::WouldBlock {
                rank: w.inner.l2g[rank],
            });
        }
        let mut c = Cursor::default();
        let done = e.push(rank, self.port, port, data, &mut c);
        assert!(done, "can_fit promised room for the whole message");
        e.ring_doorbell(rank);
        Ok(())
    }

    /// Starts sending `data` to the target without waiting; the returned request gives the buffer
    /// back once it may be reused. Messages queued this way keep their order with later sends.
    pub fn isend(&self, data: Vec<u8>) -> Result<SendRequest, SendError> {
        let (r, p) = self.dest()?;
        self.isend_to(r, p, data)
    }

    pub fn isend_to(
        &self,
        rank: usize,
        port: u32,
        data: Vec<u8>,
    ) -> Result<SendRequest, SendError> {
        self.isend_env(rank, port, self.port, data)
    }

    /// Starts sending `data` to `rank` with the envelope (context, tag): the core of every
    /// non-blocking send of an owned buffer.
    fn isend_env(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: Vec<u8>,
    ) -> Result<SendRequest, SendError> {
        let w = &self.world;
        w.check_rank(rank)?;
        let rank = match w.route(rank) {
            Some(li) => li,
            None => {
                // The engine copies the message and keeps it until acknowledged: the buffer
                // is free at once.
                self.net_send(rank, context, tag, &data, true)?;
                return Ok(SendRequest {
                    world: w.clone(),
                    rank,
                    state: ReqState::Done(Some(data)),
                });
            }
        };
        let mut e = w.eng();
        if let Some(l) = e.send_dead_end(rank) {
            return Err(l.into());
        }
        e.drive_pending();
        let rndv = e.use_single_copy(rank, data.len());
        let mut cursor = Cursor::default();
        let mut rndv_pos = None;
        if e.pending[rank].is_empty() && rndv {
            rndv_pos = e.push_descriptor(rank, tag, context, &data);
            if rndv_pos.is_some() {
                e.ring_doorbell(rank);
            }
        } else if e.pending[rank].is_empty() {
            let done = e.push(rank, tag, context, &data, &mut cursor);
            if done || cursor.off > 0 {
                e.ring_doorbell(rank);
            }
            if done {
                return Ok(SendRequest {
                    world: w.clone(),
                    rank,
                    state: ReqState::Done(Some(data)),
                });
            }
            // The rest can go on in the progress thread while the application computes.
            let data = match e.lend(rank, tag, context, data, cursor) {
                Ok(state) => {
                    return Ok(SendRequest {
                        world: w.clone(),
                        rank,
                        state: ReqState::Lent(state),
                    })
                }
                Err(data) => data,
            };
            return Ok(queue(&mut e, w, rank, tag, context, data, cursor));
        }
        let p = Arc::new(Exclusive::new(Pending {
            dst: rank,
            tag,
            context,
            data,
            cursor,
            rndv,
            rndv_pos,
            done: false,
            failed: false,
        }));
        if rndv_pos.is_some() {
            // The descriptor is out; the data waits here until the receiver has copied it.
            e.inflight.push(p.clone());
        } else {
            e.pending[rank].push_back(p.clone());
            e.npending += 1;
            e.counters.add(Counter::PendingSends, 1);
        }
        Ok(SendRequest {
            world: w.clone(),
            rank,
            state: ReqState::Queued(p),
        })
    }

    /// Waits for a message and lends it in place from the receive pool (no copy for messages up to
    /// [`World::max_inline`]; larger ones are gathered into one buffer). The ring slot returns to
    /// the pool when the message is dropped; while you hold it, later messages from the same
    /// sender still arrive.
    pub fn recv(&self) -> Result<Message, RecvError> {
        let mut w = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
        loop {
            if let Some(m) = self.recv_step()? {
                if !m.is_in_place() {
                    // (recv_step disarmed already when it lent a message in place.)
                    w.finish(&self.world);
                }
                return Ok(m);
            }
            w.idle(&self.world, self.port, None)?;
        }
    }

    /// Returns a message if one is waiting, without blocking. When it returns None the endpoint's
    /// descriptor ([`AsRawFd`]) is armed: it becomes readable when the next message arrives.
    pub fn try_recv(&self) -> Result<Option<Message>, RecvError> {
        if let Some(m) = self.recv_step()? {
            return Ok(Some(m));
        }
        self.world.eng().arm();
        let m = self.recv_step()?;
        if m.is_some() {
            self.world.eng().disarm();
        }
        Ok(m)
    }

    /// One non-blocking attempt: dispatches active messages met on the way, gathers fragments.
    fn recv_step(&self) -> Result<Option<Message>, RecvError> {
        let w = &self.world;
        let dispatch = w.inner.dispatch_depth.get() == 0;
        loop {
            // A whole message is taken in the same borrow that found it (each borrow is an
            // atomic swap on the hot path).
            let mut took = None;
            let poll = {
                let mut e = w.eng();
                e.refresh_fates();
                e.drive_pending();
                let p = e.poll_port(self.port, dispatch)?;
                if let Poll::Found(src, info) = p {
                    if info.kind == Kind::Whole {
                        took = Some(e.rx[src].take_shared(&info));
                        // What Waiter::finish would do, without another borrow.
                        e.disarm();
                        e.counters.add(Counter::MsgsRecvd, 1);
                        e.counters.add(Counter::ZeroCopyRecvs, 1);
                        e.counters.add(Counter::BytesRecvd, info.len as u64);
                    }
                }
                p
            };
            match poll {
                Poll::Nothing => return Ok(self.net_take()),
                Poll::Active(src, info) => {
                    w.dispatch(src, info)?;
                }
                Poll::Found(src, info) if info.kind == Kind::Whole => {
                    let held = took.expect("taken above");
                    return Ok(Some(Message {
                        world: w.clone(),
                        src: Source {
                            rank: w.inner.l2g[src],
                            port: info.tag,
                        },
                        body: Body::Ring {
                            ring: src,
                            held: Some(held),
                        },
                    }));
                }
                Poll::Found(src, info) if info.kind == Kind::Rndv => {
                    let mut e = w.eng();
                    let mut buf = e.spare.take().unwrap_or_default();
                    let n = copy_single(&mut e, src, &info, Dest::Vec(&mut buf))?;
                    e.counters.add(Counter::MsgsRecvd, 1);
                    e.counters.add(Counter::BytesRecvd, n as u64);
                    return Ok(Some(Message {
                        world: w.clone(),
                        src: Source {
                            rank: w.inner.l2g[src],
                            port: info.tag,
                        },
                        body: Body::Owned(buf),
                    }));
                }
                Poll::Found(src, info) => {
                    let mut e = w.eng();
                    if let Some((buf, tag)) = gather(&mut e, self.port, src, &info)? {
                        e.counters.add(Counter::MsgsRecvd, 1);
                        e.counters.add(Counter::BytesRecvd, buf.len() as u64);
                        return Ok(Some(Message {
                            world: w.clone(),
                            src: Source {
                                rank: w.inner.l2g[src],
                                port: tag,
                            },
                            body: Body::Owned(buf),
                        }));
                    }
                }
            }
        }
    }

    /// Waits for a message and copies it into `buf`. Returns its length and source. A message
    /// longer than `buf` is an error that names both sizes; the message stays queued.
    pub fn recv_into(&self, buf: &mut [u8]) -> Result<(usize, Source), RecvError> {
        let w = &self.world;
        let dispatch = w.inner.dispatch_depth.get() == 0;
        let mut waiter = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
        loop {
            let poll = {
                let mut e = w.eng();
                e.refresh_fates();
                e.drive_pending();
                let p = e.poll_port(self.port, dispatch)?;
                // The common case in this same borrow (each borrow is an atomic swap): a whole
                // message that fits.
                if let Poll::Found(src, info) = p {
                    if info.kind == Kind::Whole && info.len <= buf.len() {
                        e.copy_whole(src, &info, buf);
                        e.disarm();
                        let source = Source {
                            rank: w.inner.l2g[src],
                            port: info.tag,
                        };
                        return Ok((info.len, source));
                    }
                }
                p
            };
            let (src, info) = match poll {
                Poll::Nothing => {
                    if let Some(net) = w.net_poll() {
                        let len = net.borrow_mut().peek_len(self.port);
                        if let Some(len) = len {
                            if len > buf.len() {
                                waiter.finish(w);
                                return Err(RecvError::BufferTooSmall {
                                    message: len,
                                    buffer: buf.len(),
                                });
                            }
                            let m = net.borrow_mut().take(self.port).expect("peeked");
                            buf[..len].copy_from_slice(&m.data);
                            let src = Source {
                                rank: m.src,
                                port: m.tag,
                            };
                            net.borrow_mut().recycle(m.data);
                            let mut e = w.eng();
                            e.counters.add(Counter::MsgsRecvd, 1);
                            e.counters.add(Counter::BytesRecvd, len as u64);
                            drop(e);
                            waiter.finish(w);
                            return Ok((len, src));
                        }
                    }
                    waiter.idle(w, self.port, None)?;
                    continue;
                }
                Poll::Active(src, info) => {
                    w.dispatch(src, info)?;
                    continue;
                }
                Poll::Found(src, info) => (src, info),
            };
            let source = Source {
                rank: w.inner.l2g[src],
                port: info.tag,
            };
            let total = {
                let e = w.eng();
                match info.kind {
                    Kind::Middle | Kind::Last => e
                        .partials
                        .iter()
                        .find(|p| p.port == self.port && p.src == src)
                        .map(|p| p.total)
                        .unwrap_or(0),
                    _ => info.total_len as usize,
                }
            };
            if total > buf.len() {
                waiter.finish(w);
                return Err(RecvError::BufferTooSmall {
                    message: total,
                    buffer: buf.len(),
                });
            }
            let mut e = w.eng();
            match info.kind {
                Kind::Whole => {
                    unreachable!("a whole message that fits is taken in the poll's borrow")
                }
                Kind::Rndv => {
                    // Single copy: straight from the sender's memory into the caller's buffer.
                    let n = copy_single(&mut e, src, &info, Dest::Slice(&mut buf[..total]));
                    if let Ok(n) = n {
                        e.counters.add(Counter::MsgsRecvd, 1);
                        e.counters.add(Counter::BytesRecvd, n as u64);
                    }
                    drop(e);
                    waiter.finish(w);
                    return n.map(|n| (n, source));
                }
                Kind::First => {
                    // Copy the fragments straight into the caller's buffer as they come.
                    drop(e);
                    self.copy_fragments(src, &info, &mut buf[..total], &mut waiter)?;
                    waiter.finish(w);
                    return Ok((total, source));
                }
                _ => {
                    // A message that try_recv() began gathering: finish it there, then copy.
                    if let Some((v, tag)) = gather(&mut e, self.port, src, &info)? {
                        buf[..v.len()].copy_from_slice(&v);
                        let n = v.len();
                        e.counters.add(Counter::MsgsRecvd, 1);
                        e.counters.add(Counter::BytesRecvd, n as u64);
                        e.spare = Some(v);
                        drop(e);
                        waiter.finish(w);
                        return Ok((
                            n,
                            Source {
                                rank: w.inner.l2g[src],
                                port: tag,
                            },
                        ));
                    }
                }
            }
        }
    }

    /// Sends `data` to `rank`'s endpoint on this endpoint's own port, with `tag` in the envelope
    /// (the face of matched messaging: the port is the context, e.g. an MPI communicator's).
    /// Returns when `data` may be reused; waits while the ring is full.
    pub fn send_tagged(&self, rank: usize, tag: u32, data: &[u8]) -> Result<(), SendError> {
        self.send_env(rank, self.port, tag, data)
    }

    /// Starts sending `data` to `rank` on this endpoint's port with `tag`, without waiting; as
    /// [`Endpoint::isend`].
    pub fn isend_tagged(
        &self,
        rank: usize,
        tag: u32,
        data: Vec<u8>,
    ) -> Result<SendRequest, SendError> {
        self.isend_env(rank, self.port, tag, data)
    }

    /// Waits for the first message on this endpoint's port from `source` (None: any) with `tag`
    /// (None: any) and copies it into `buf`. Among one sender's messages the first that matches
    /// is taken (MPI's order); a large one moves straight from the ring, or from the sender's
    /// memory by single copy, into `buf`. A message longer than `buf` is an error that names
    /// both sizes; the message stays queued.
    pub fn recv_matching(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
        buf: &mut [u8],
    ) -> Result<Status, RecvError> {
        let pat = self.pattern(source, tag)?;
        let mut waiter = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
        let mut buf = Some(buf);
        loop {
            if let Some(st) = self.match_step(&pat, &mut buf, &mut waiter)? {
                waiter.finish(&self.world);
                return Ok(st);
            }
            waiter.idle(&self.world, self.port, source)?;
        }
    }

    /// Like [`Endpoint::recv_matching`], without waiting for a message to arrive: None when no
    /// message matches now. (A message larger than one ring record whose first fragment has
    /// arrived is copied whole: the call then waits for the fragments its sender is writing.)
    pub fn try_recv_matching(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
        buf: &mut [u8],
    ) -> Result<Option<Status>, RecvError> {
        let pat = self.pattern(source, tag)?;
        let mut waiter = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
        let mut buf = Some(buf);
        let r = self.match_step(&pat, &mut buf, &mut waiter);
        waiter.finish(&self.world);
        r
    }

    /// The envelope of the first message that a receive from `source` with `tag` would take,
    /// if one has arrived; the message stays queued (MPI_Iprobe).
    pub fn iprobe(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
    ) -> Result<Option<Status>, RecvError> {
        let pat = self.pattern(source, tag)?;
        let mut waiter = Waiter::new(WaitMode::BusyPoll);
        self.match_step(&pat, &mut None, &mut waiter)
    }

    /// Waits until a message from `source` with `tag` has arrived and returns its envelope; the
    /// message stays queued for the receive that follows (MPI_Probe).
    pub fn probe(&self, source: Option<usize>, tag: Option<u32>) -> Result<Status, RecvError> {
        let pat = self.pattern(source, tag)?;
        let mut waiter = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
        loop {
            if let Some(st) = self.match_step(&pat, &mut None, &mut waiter)? {
                waiter.finish(&self.world);
                return Ok(st);
            }
            waiter.idle(&self.world, self.port, source)?;
        }
    }

    fn pattern(&self, source: Option<usize>, tag: Option<u32>) -> Result<Pattern, RecvError> {
        if let Some(r) = source {
            if r >= self.world.size() {
                return Err(RecvError::NoSuchRank {
                    rank: r,
                    size: self.world.size(),
                });
            }
        }
        Ok(Pattern::new(self.port, source, tag))
    }

    /// One non-blocking attempt at a matched receive (`buf` Some) or a probe (`buf` None):
    /// the rings first, then the network. Runs due active-port handlers on the way.
    fn match_step(
        &self,
        pat: &Pattern,
        buf: &mut Option<&mut [u8]>,
        waiter: &mut Waiter,
    ) -> Result<Option<Status>, RecvError> {
        let w = &self.world;
        // The ring to look at: the source's, or every ring for any source; none when the
        // source is on another host.
        let ring = pat.source.map(|r| w.route(r));
        let found = {
            let mut e = w.eng();
            e.refresh_fates();
            e.drive_pending();
            match ring {
                Some(None) => None,
                Some(Some(li)) => e.poll_match(pat, Some(li))?,
                None => e.poll_match(pat, None)?,
            }
        };
        if let Some((src, info)) = found {
            let st = Status {
                source: w.inner.l2g[src],
                tag: info.tag,
                len: info.total_len as usize,
            };
            let Some(out) = buf.as_deref_mut() else {
                return Ok(Some(st));
            };
            if st.len > out.len() {
                return Err(RecvError::BufferTooSmall {
                    message: st.len,
                    buffer: out.len(),
                });
            }
            let out = &mut out[..st.len];
            let mut e = w.eng();
            match info.kind {
                Kind::Whole => e.copy_whole(src, &info, out),
                Kind::Rndv => {
                    // Single copy: from the sender's memory straight into the caller's buffer.
                    copy_single(&mut e, src, &info, Dest::Slice(out))?;
                    e.counters.add(Counter::MsgsRecvd, 1);
                    e.counters.add(Counter::BytesRecvd, st.len as u64);
                }
                _ => {
                    // A first fragment: the rest follow in this ring, into the caller's buffer.
                    drop(e);
                    self.copy_fragments(src, &info, out, waiter)?;
                }
            }
            return Ok(Some(st));
        }
        if matches!(ring, Some(Some(_))) {
            // A sender on this host: nothing can come from the network.
            return Ok(None);
        }
        let Some(net) = w.net_poll() else {
            return Ok(None);
        };
        let Some((source, tag, len)) = net.borrow_mut().peek_matching(pat) else {
            return Ok(None);
        };
        let st = Status { source, tag, len };
        let Some(out) = buf.as_deref_mut() else {
            return Ok(Some(st));
        };
        if len > out.len() {
            return Err(RecvError::BufferTooSmall {
                message: len,
                buffer: out.len(),
            });
        }
        let m = net.borrow_mut().take_matching(pat).expect("peeked");
        out[..len].copy_from_slice(&m.data);
        net.borrow_mut().recycle(m.data);
        let mut e = w.eng();
        e.counters.add(Counter::MsgsRecvd, 1);
        e.counters.add(Counter::BytesRecvd, len as u64);
        Ok(Some(st))
    }

    /// Copies a fragmented message from ring `src` into `out` (exactly its size).
    fn copy_fragments(
        &self,
        src: usize,
        first: &RecordInfo,
        out: &mut [u8],
        waiter: &mut Waiter,
    ) -> Result<(), RecvError> {
        let w = &self.world;
        let mut info = *first;
        let mut off = 0;
        loop {
            {
                let mut e = w.eng();
                let end = off + info.len;
                if end > out.len() {
                    return Err(RecvError::Corrupt {
                        rank: w.inner.l2g[src],
                        why: format!("fragments exceed the message length {}", out.len()),
                    });
                }
                let held = e.rx[src].take(&info);
                out[off..end].copy_from_slice(e.rx[src].payload(&held));
                e.rx[src].release(held);
                e.counters.add(Counter::Fragments, 1);
                off = end;
                if info.kind == Kind::Last || off == out.len() {
                    if info.kind != Kind::Last && !(info.kind == Kind::First && off == out.len()) {
                        return Err(RecvError::Corrupt {
                            rank: w.inner.l2g[src],
                            why: "message ended without a last fragment".into(),
                        });
                    }
                    e.counters.add(Counter::MsgsRecvd, 1);
                    e.counters.add(Counter::BytesRecvd, out.len() as u64);
                    return Ok(());
                }
            }
            // Wait for the next fragment on this ring only.
            loop {
                let next = {
                    let mut e = w.eng();
                    e.refresh_fates();
                    // Our own queued sends move on while we wait: the sender may be waiting for
                    // them before it writes the rest of this message.
                    e.drive_pending();
                    e.next_from(src, self.port, info.pos)?
                };
                match next {
                    Some(n)
                        if n.context == self.port
                            && matches!(n.kind, Kind::Middle | Kind::Last) =>
                    {
                        info = n;
                        break;
                    }
                    Some(n) => {
                        return Err(RecvError::Corrupt {
                            rank: w.inner.l2g[src],
                            why: format!(
                                "{:?} record for port {} inside a fragmented message",
                                n.kind, n.context
                            ),
                        })
                    }
                    None => waiter.idle(w, self.port, Some(w.inner.l2g[src]))?,
                }
            }
        }
    }
}

impl AsRawFd for Endpoint {
    /// The process's doorbell: readable when a message has arrived since the last
    /// [`Endpoint::try_recv`] that returned None. Shared by all endpoints of the process, so a
    /// wake-up may be for another endpoint; call try_recv to find out.
    /// In a job over several hosts it is an epoll descriptor over the doorbell and the network
    /// socket, readable when either is (packets may also be acknowledgements).
    fn as_raw_fd(&self) -> RawFd {
        if let Some(ep) = self.world.inner.poll_fd.as_ref() {
            return ep.as_raw_fd();
        }
        self.world.eng().doorbell().raw()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        let mut e = self.world.eng();
        e.ports.retain(|(p, _)| *p != self.port);
        e.ports_gen += 1;
    }
}

const NO_TARGET: u64 = 0;

fn wait_to_bits(m: WaitMode) -> u64 {
    match m {
        WaitMode::Block => u64::MAX,
        WaitMode::BusyPoll => u64::MAX - 1,
        WaitMode::SpinThenBlock(d) => (d.as_nanos() as u64).min(u64::MAX - 2),
    }
}

fn wait_from_bits(b: u64) -> WaitMode {
    match b {
        u64::MAX => WaitMode::Block,
        x if x == u64::MAX - 1 => WaitMode::BusyPoll,
        ns => WaitMode::SpinThenBlock(std::time::Duration::from_nanos(ns)),
    }
}

/// A GAMMA active port. Unbound on drop.
pub struct ActivePort {
    world: World,
    port: u32,
}

impl ActivePort {
    pub fn port(&self) -> u32 {
        self.port
    }
}

impl Drop for ActivePort {
    fn drop(&mut self) {
        let mut e = self.world.eng();
        e.ports.retain(|(p, _)| *p != self.port);
        e.ports_gen += 1;
        drop(e);
        self.world
            .inner
            .handlers
            .borrow_mut()
            .retain(|(p, _)| *p != self.port);
    }
}

enum Body {
    Ring {
        ring: usize,
        held: Option<SharedHeld>,
    },
    Owned(Vec<u8>),
}

/// A received message. Dereferences to its bytes; for messages up to [`World::max_inline`] those
/// bytes are the ring slot itself, returned to the pool when the message is dropped.
pub struct Message {
    world: World,
    src: Source,
    body: Body,
}

impl Message {
    pub fn source(&self) -> Source {
        self.src
    }

    /// Whether the bytes are lent in place from the ring (no copy was made).
    pub fn is_in_place(&self) -> bool {
        matches!(self.body, Body::Ring { .. })
    }

    /// The bytes as an owned vector (a copy for in-place messages).
    pub fn into_vec(mut self) -> Vec<u8> {
        match &mut self.body {
            Body::Owned(v) => std::mem::take(v),
            Body::Ring { .. } => self.deref().to_vec(),
        }
    }
}

impl Deref for Message {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.body {
            Body::Ring { held: Some(h), .. } => h.as_slice(),
            Body::Ring { held: None, .. } => &[],
            Body::Owned(v) => v,
        }
    }
}

impl AsRef<[u8]> for Message {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("source", &self.src)
            .field("len", &self.len())
            .field("in_place", &self.is_in_place())
            .finish()
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        match &mut self.body {
            Body::Ring { ring, held } => {
                if let Some(h) = held.take() {
                    self.world.eng().rx[*ring].release(h);
                }
            }
            Body::Owned(v) => {
                let v = std::mem::take(v);
                let mut e = self.world.eng();
                if e.spare.as_ref().is_none_or(|s| s.capacity() < v.capacity()) {
                    e.spare = Some(v);
                }
            }
        }
    }
}

enum ReqState {
    Done(Option<Vec<u8>>),
    Queued(Arc<Exclusive<Pending>>),
    /// With the progress thread.
    Lent(std::sync::Arc<crate::progress::LentState>),
}

/// Queues the rest of a non-blocking send behind the earlier ones to `rank`.
fn queue(
    e: &mut Engine,
    w: &World,
    rank: usize,
    tag: u32,
    context: u32,
    data: Vec<u8>,
    cursor: Cursor,
) -> SendRequest {
    let p = Arc::new(Exclusive::new(Pending {
        dst: rank,
        tag,
        context,
        data,
        cursor,
        rndv: false,
        rndv_pos: None,
        done: false,
        failed: false,
    }));
    e.pending[rank].push_back(p.clone());
    e.npending += 1;
    e.counters.add(Counter::PendingSends, 1);
    SendRequest {
        world: w.clone(),
        rank,
        state: ReqState::Queued(p),
    }
}

/// A non-blocking send in flight. Dropping it does not cancel the send: the message still goes
/// out, in order.
pub struct SendRequest {
    world: World,
    rank: usize,
    state: ReqState,
}

impl SendRequest {
    /// Makes progress and says whether the buffer may be reused.
    pub fn test(&mut self) -> Result<bool, SendError> {
        if let ReqState::Lent(l) = &self.state {
            // SYNC: Acquire; pairs with the Release in the progress thread.
            if !l.done.load(std::sync::atomic::Ordering::Acquire) {
                self.world.progress().ok();
                return Ok(false);
            }
            if l.failed.load(std::sync::atomic::Ordering::Relaxed) {
                // The thread gave up because the destination left the job.
                let mut e = self.world.eng();
                let lost = e.send_dead_end(self.rank).unwrap_or(crate::PeerLost {
                    rank: e.l2g[self.rank],
                    fate: crate::Fate::Finished,
                });
                return Err(SendError::PeerLost(lost));
            }
            let data = l.data.lock().unwrap_or_else(|p| p.into_inner()).take();
            self.state = ReqState::Done(data);
            return Ok(true);
        }
        if let ReqState::Queued(p) = &self.state {
            self.world.progress().ok();
            if !p.borrow_mut().done {
                if let Some(l) = self.world.eng().send_dead_end(self.rank) {
                    return Err(l.into());
                }
                return Ok(false);
            }
            if p.borrow_mut().failed {
                return Err(SendError::SingleCopyFailed {
                    rank: self.world.inner.l2g[self.rank],
                });
            }
            let data = std::mem::take(&mut p.borrow_mut().data);
            self.state = ReqState::Done(Some(data));
        }
        Ok(true)
    }

    /// Whether the send had completed when last tested (does not make progress).
    pub fn is_complete(&self) -> bool {
        match &self.state {
            ReqState::Done(_) => true,
            ReqState::Queued(p) => p.borrow_mut().done,
            // SYNC: Acquire; pairs with the Release in the progress thread.
            ReqState::Lent(l) => l.done.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// Waits until the message is in the ring and gives the buffer back.
    pub fn wait(mut self) -> Result<Vec<u8>, SendError> {
        let mut b = Backoff::new();
        while !self.test()? {
            b.snooze();
        }
        match &mut self.state {
            ReqState::Done(d) => Ok(d.take().unwrap_or_default()),
            ReqState::Queued(_) | ReqState::Lent(_) => unreachable!("test() returned true"),
        }
    }
}

/// How a receive waits after a pass over the rings found nothing.
struct Waiter {
    mode: WaitMode,
    spins: u32,
    since: Option<Instant>,
    blocking: bool,
}

impl Waiter {
    fn new(mode: WaitMode) -> Waiter {
        Waiter {
            mode,
            spins: 0,
            since: None,
            blocking: matches!(mode, WaitMode::Block),
        }
    }

    /// Called after a pass (that began with refresh_fates) found nothing for `port`.
    fn idle(&mut self, w: &World, port: u32, from: Option<usize>) -> Result<(), RecvError> {
        {
            let e = w.eng();
            // `from` is a job rank; the rings and fates are indexed by local rank.
            let local = from.map(|r| w.inner.g2l[r]);
            let dead = w
                .net_dead_end(from)
                .or_else(|| match local {
                    Some(None) => None, // on another host: the network says when it is lost
                    Some(Some(li)) => e.recv_dead_end(port, Some(li)),
                    None => e.recv_dead_end(port, None),
                })
                .or_else(|| {
                    // A message half gathered from a rank that is gone will never be completed.
                    e.partials
                        .iter()
                        .filter(|p| p.port == port)
                        .find_map(|p| {
                            e.fates[p.src].map(|fate| crate::PeerLost {
                                rank: e.l2g[p.src],
                                fate,
                            })
                        })
                        .map(RecvError::PeerLost)
                });
            if let Some(err) = dead {
                drop(e);
                self.finish(w);
                return Err(err);
            }
        }
        self.spins = self.spins.wrapping_add(1);
        if self.blocking {
            return self.block(w);
        }
        match self.mode {
            WaitMode::BusyPoll => {
                if self.spins.is_multiple_of(1024) {
                    volley_sys::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            WaitMode::SpinThenBlock(limit) => {
                std::hint::spin_loop();
                if self.spins.is_multiple_of(128) {
                    let now = Instant::now();
                    let since = *self.since.get_or_insert(now);
                    if now - since >= limit {
                        w.eng().counters.add(Counter::SpinsEndedInSleep, 1);
                        self.blocking = true;
                    }
                }
            }
            WaitMode::Block => unreachable!("blocking is set for Block"),
        }
        Ok(())
    }

    fn block(&mut self, w: &World) -> Result<(), RecvError> {
        let mut e = w.eng();
        if !e.is_armed() {
            // Arm, then let the caller poll once more before we sleep.
            e.arm();
            return Ok(());
        }
        e.counters.add(Counter::Sleeps, 1);
        let fd = e.doorbell().raw();
        let timeout = w.inner.cfg.liveness_poll;
        drop(e);
        match w.inner.net.as_ref() {
            None => {
                volley_sys::poll_readable(fd, timeout);
            }
            Some(net) => {
                // Packets, a doorbell, or the protocol's next timer, whichever comes first.
                let (nfd, due) = {
                    let n = net.borrow_mut();
                    (n.fd(), n.next_deadline_in())
                };
                let t = (timeout.as_nanos() as u64).min(due.unwrap_or(u64::MAX));
                volley_sys::net::poll_any(&[fd, nfd], Some(t));
            }
        }
        let mut e = w.eng();
        e.doorbell().drain();
        // A sender that woke us cleared the flag; set it again before the next poll.
        e.arm();
        Ok(())
    }

    fn finish(&mut self, w: &World) {
        w.eng().disarm();
    }
}

// The threading contract, checked at compile time: the faces keep a World in a global (C) or
// release the GIL around a wait (Python).
const _: () = {
    const fn send_sync<T: Send + Sync>() {}
    send_sync::<World>();
    send_sync::<Endpoint>();
    send_sync::<Message>();
    send_sync::<SendRequest>();
    send_sync::<ActivePort>();
};
