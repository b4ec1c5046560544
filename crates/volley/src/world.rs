//! [`World`]: joining the job, the engine cells, progress, and what finalisation owes the peers.
//!
//! Threading contract: a [`World`] (and its endpoints, messages and requests) is `Send` and
//! `Sync`, and is used by one thread at a time (MPI_THREAD_SERIALIZED, or a Python call with the
//! GIL released): progress has a single owner. The state sits behind [`Exclusive`] cells biased
//! to the thread that used them last (a step takes them with plain loads and stores; another
//! thread takes them over with one membarrier, see `volley_sys::Exclusive`; no lock, no locked
//! instruction per step), so two threads inside volley at once is reported as a panic that says
//! so, never a data race. Waiting operations are loops over
//! the engine's non-blocking steps; the engine is borrowed only for the length of a step and never
//! while user code (an active-port handler) runs, so a handler may send.
//!
//! The modules beside this one hold the rest of the public face: `endpoint` (Directed-Point
//! endpoints), `send`, `recv` (receives in arrival order), `matched` (receives and probes by
//! envelope), `active` (GAMMA active ports), `message`, `request` and `wait`.
//!

use crate::active::ActivePort;
use crate::bootstrap::{self, JobInfo};
use crate::config::Config;
use crate::counters::CounterInfo;
use crate::endpoint::{wait_to_bits, Endpoint, NO_TARGET};
use crate::engine::{Engine, Poll, PortKind};
use crate::error::{InitError, OpenError, RecvError, SendError};
use crate::message::{Message, Source};
use crate::request::SendRequest;
use crate::wait::Waiter;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use volley_sys::{Exclusive, ExclusiveGuard};

/// How deep this world is inside active-port handlers. Only the thread that owns progress
/// touches it (see the threading contract above), so relaxed loads and stores suffice.
#[derive(Default)]
pub(crate) struct Depth(AtomicU32);

impl Depth {
    pub(crate) fn get(&self) -> u32 {
        self.0.load(Ordering::Relaxed)
    }
    pub(crate) fn set(&self, v: u32) {
        self.0.store(v, Ordering::Relaxed)
    }
}

pub(crate) static INITIALISED: AtomicBool = AtomicBool::new(false);

/// The world to close if the process exits without dropping it (`std::process::exit`, C's
/// `exit`, a World kept in a static), and the process that opened it: set at init, taken when
/// it closes.
static OPEN: std::sync::Mutex<Option<(std::sync::Weak<Inner>, u32)>> = std::sync::Mutex::new(None);

/// Set by [`crate::abort_job`]: an abort ends the job at once and flushes nothing.
pub(crate) static ABORTING: AtomicBool = AtomicBool::new(false);

/// At exit: closes the world as dropping it would (queued sends go out, the network is
/// flushed, the launcher is told this rank finished), so a rank that leaves through
/// `process::exit` loses nothing it sent.
extern "C" fn close_at_exit() {
    if ABORTING.load(Ordering::Relaxed) {
        return;
    }
    let open = match OPEN.try_lock() {
        Ok(mut g) => g.take(),
        Err(_) => None,
    };
    let Some((weak, pid)) = open else { return };
    // A child forked after init exits without speaking for its parent's rank.
    if pid != std::process::id() {
        return;
    }
    if let Some(inner) = weak.upgrade() {
        inner.close();
    }
}

/// No port: polls on behalf of active ports only.
pub(crate) const NO_PORT: u32 = u32::MAX;

pub(crate) type Handler = Arc<Exclusive<Box<dyn FnMut(&[u8], Source) + Send>>>;

pub(crate) struct Inner {
    pub(crate) eng: Exclusive<Engine>,
    pub(crate) handlers: Exclusive<Vec<(u32, Handler)>>,
    pub(crate) dispatch_depth: Depth,
    pub(crate) info: JobInfo,
    pub(crate) cfg: Config,
    /// How long the world's own waits (requests, collectives, flushes) lasted recently.
    pub(crate) waits: crate::wait::WaitHistory,
    /// Why single copy is off in this process, if it is.
    pub(crate) single_copy_off: Option<String>,
    /// Job rank of each local rank, and local rank (None: on another host) of each job rank.
    pub(crate) l2g: Vec<usize>,
    pub(crate) g2l: Vec<Option<usize>>,
    /// The ranks on other hosts, when there are any.
    pub(crate) net: Option<Arc<Exclusive<crate::net::Net>>>,
    /// The liveness thread, with a network (see `net::Keeper`); taken (stopped) at close.
    pub(crate) keeper: std::sync::Mutex<Option<crate::net::Keeper>>,
    /// Closed already (dropped, or at exit).
    pub(crate) closed: AtomicBool,
    /// With a network: one descriptor over the doorbell and the socket, for Endpoint::as_raw_fd.
    /// The socket joins it only when an application first asks for the descriptor
    /// (`watch_net`): while it is in an epoll set, every packet that arrives and every send
    /// that completes runs epoll's wake-up callback under the socket's wait-queue lock, about
    /// 0.2 us of each one-way hop between hosts that nobody asked for.
    pub(crate) poll_fd: Option<std::os::fd::OwnedFd>,
    pub(crate) poll_net: std::sync::Once,
    /// Non-blocking operations on the caller's memory (see `request`).
    pub(crate) reqs: Exclusive<crate::request::Requests>,
    /// How many active ports are bound: a wait that finds none pays a relaxed load, not a scan
    /// of the rings for their messages.
    pub(crate) nactive: std::sync::atomic::AtomicUsize,
    /// How many receives are posted: read on every matched receive, so that one with nothing
    /// posted pays a relaxed load, not a borrow of the table.
    pub(crate) nposted: std::sync::atomic::AtomicUsize,
    /// Receives posted so far, and that count and the segment's state epoch as they were when
    /// the last pass over the posted receives (`drive_posted`) began (epoch u64::MAX before
    /// the first): see `World::quiet_since_pass`.
    pub(crate) posts: std::sync::atomic::AtomicUsize,
    pub(crate) quiet_posts: std::sync::atomic::AtomicUsize,
    pub(crate) quiet_epoch: std::sync::atomic::AtomicU64,
    /// Watches the other ranks of this host when no volley launcher does (held for its drop,
    /// which stops it).
    pub(crate) _watcher: Option<crate::boot_pmi::Watcher>,
    pub(crate) _launcher_watch: Option<crate::bootstrap::LauncherWatch>,
    /// This rank's collective slots in the segment (see `shmcoll`).
    pub(crate) coll_slots: Exclusive<crate::shmcoll::SlotTable>,
}

/// This process's membership of its job. Cheap to clone (all clones are the same world).
#[derive(Clone)]
pub struct World {
    pub(crate) inner: Arc<Inner>,
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

    pub(crate) fn init_inner() -> Result<World, InitError> {
        let mut attached = match bootstrap::attach_from_env()? {
            Some(a) => a,
            None => match crate::pmi::Pmi::connect()? {
                Some(p) => crate::boot_pmi::attach(p)?,
                None => bootstrap::singleton(&Config::from_env(1)?)?,
            },
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
        eng.set_single_copy_range(cfg.single_copy_threshold, cfg.single_copy_max);
        eng.set_single_copy_help(cfg.single_copy_help, cfg.single_copy_help_from);
        if cfg.simulate_help_refusal {
            crate::engine::SIMULATE_HELP_REFUSAL.store(true, std::sync::atomic::Ordering::Relaxed);
        }
        crate::backoff::OVERSUBSCRIBED
            .store(cfg.oversubscribed, std::sync::atomic::Ordering::Relaxed);
        if let Some(on) = cfg.summary {
            eng.set_summary(on);
        }
        // A rank alone on its host has no other process to spare a fence: its sleeps keep
        // the plain handshake (its own progress thread fences), and network-only jobs pay no
        // membarrier per sleep. Nor does a host whose ranks read the ready summary: its senders
        // fence for the summary anyway, so a membarrier would spare none of them and would only
        // interrupt every other rank's CPU at each sleep (16-core server, ring of 16, default
        // waiting: 1.28-1.69 us per hop with it, 0.91-1.08 without).
        if cfg
            .membarrier
            .unwrap_or(!cfg.oversubscribed && l2g.len() > 1 && !eng.summary())
        {
            eng.use_heavy_arm();
        }
        if let (Some(w), 0) = (&cfg.profile.warning, attached.info.local_rank) {
            // Once per host, not once per rank.
            eprintln!("{w}");
        }
        eng.set_job(
            l2g.clone(),
            attached.info.is_multi_node(),
            cfg.unexpected_bytes,
            cfg.eager_bytes,
        );
        let net = if !attached.info.is_multi_node() {
            None
        } else if let Some(boot) = attached.boot.take() {
            let mut link = crate::net::AgentLink::new(boot, attached.info.rank)?;
            let n = crate::net::Net::open(&attached.info, &mut |c| link.exchange(c))?;
            let bell = eng.doorbell().try_clone().map_err(InitError::Agent)?;
            link.watch(n.notices.clone(), bell)
                .map_err(InitError::ProgressThread)?;
            Some(n)
        } else if let Some(pmi) = attached.pmi.as_mut() {
            let mut ex = crate::net::pmi_exchange(pmi, &attached.info);
            Some(crate::net::Net::open(&attached.info, &mut ex)?)
        } else {
            None
        }
        .map(|n| Arc::new(Exclusive::new(n)));
        let poll_fd = match &net {
            Some(_) => Some(
                volley_sys::net::epoll_of(&[eng.doorbell().raw()]).map_err(InitError::PollSet)?,
            ),
            None => None,
        };
        let keeper = match &net {
            Some(n) if n.borrow_mut().keeper => {
                Some(crate::net::Keeper::start(n.clone()).map_err(InitError::ProgressThread)?)
            }
            _ => None,
        };
        // The launcher's PMI connection, when Hydra or Slurm started the job: told at the end
        // that this rank finalized, or asked to abort the job.
        *crate::pmi::CONN.lock().unwrap_or_else(|e| e.into_inner()) = attached.pmi.take();
        let world = World {
            inner: Arc::new(Inner {
                eng: Exclusive::biased(eng),
                handlers: Exclusive::biased(Vec::new()),
                dispatch_depth: Depth::default(),
                info: attached.info,
                cfg,
                waits: Default::default(),
                single_copy_off,
                l2g,
                g2l,
                net,
                keeper: std::sync::Mutex::new(keeper),
                closed: AtomicBool::new(false),
                poll_fd,
                poll_net: std::sync::Once::new(),
                reqs: Exclusive::biased(Default::default()),
                nposted: Default::default(),
                posts: Default::default(),
                quiet_posts: Default::default(),
                quiet_epoch: std::sync::atomic::AtomicU64::new(u64::MAX),
                nactive: Default::default(),
                _watcher: attached.watcher,
                _launcher_watch: attached.launcher_watch,
                coll_slots: Exclusive::biased(Default::default()),
            }),
        };
        if world.inner.cfg.progress_thread {
            world
                .start_progress_thread()
                .map_err(InitError::ProgressThread)?;
        }
        static AT_EXIT: std::sync::Once = std::sync::Once::new();
        AT_EXIT.call_once(|| {
            if let Err(e) = volley_sys::at_exit(close_at_exit) {
                eprintln!("volley: {e}: a rank that leaves through exit() without dropping its World may lose queued sends");
            }
        });
        *OPEN.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Arc::downgrade(&world.inner), std::process::id()));
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

    /// Whether job rank `rank` runs on this host (shares this process's segment).
    pub fn on_this_host(&self, rank: usize) -> bool {
        self.inner.g2l.get(rank).is_some_and(Option::is_some)
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

    /// Ends the whole job with exit code `code` (MPI_Abort); see [`crate::abort_job`].
    pub fn abort(&self, code: i32, why: &str) -> ! {
        crate::abort_job(code, why)
    }

    pub fn config(&self) -> &Config {
        &self.inner.cfg
    }

    /// Starts the progress thread (also VOLLEY_PROGRESS_THREAD=1): from now on a non-blocking
    /// send that cannot finish at once is finished by that thread while the application
    /// computes. Idempotent.
    pub fn start_progress_thread(&self) -> std::io::Result<()> {
        self.eng().start_progress_thread()?;
        Ok(())
    }

    /// The network device carrying messages to ranks on other hosts ("udp", "eth", with
    /// "+faults" when VOLLEY_FAULTS is set), or None in a job on one host.
    pub fn transport(&self) -> Option<String> {
        self.inner.net.as_ref().map(|n| n.borrow_mut().kind())
    }

    /// Whether the progress thread runs.
    pub fn progress_thread(&self) -> bool {
        self.eng().has_progress_thread()
    }

    /// Why this process cannot use single copy, or None if it can.
    pub fn single_copy_unavailable(&self) -> Option<&str> {
        self.inner.single_copy_off.as_deref()
    }

    /// Changes which messages this process sends to ranks on its host by single copy: those of
    /// `min` bytes or more and fewer than `max` (`usize::MAX`, `usize::MAX`: none). For
    /// measurements that compare the modes in one job (`volley tune`); a program otherwise gets
    /// its range from the environment or the machine's profile. Changes nothing where single copy
    /// is unavailable.
    pub fn set_single_copy_range(&self, min: usize, max: usize) {
        self.eng().set_single_copy_range(min.max(64), max);
    }

    /// Where the ring from local rank `src` to this rank lives: the NUMA policy it was given
    /// (mode: 0 the kernel's default, 1 preferred node; and the nodes named) and the node of
    /// its first page. `volley run` places each ring on its receiver's node where it binds the
    /// receiver to one (VOLLEY_NUMA); this says whether that happened.
    pub fn ring_numa(&self, src: usize) -> std::io::Result<(i32, Vec<usize>, usize)> {
        let seg = self.eng().segment();
        let me = self.local_rank();
        if src >= seg.nranks() {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                format!("local rank {src}: this host has {}", seg.nranks()),
            ));
        }
        let (mode, nodes) = seg.ring_policy(src, me)?;
        Ok((mode, nodes, seg.ring_page_node(src, me)?))
    }

    /// Largest message that travels as one record (lent in place by recv()).
    pub fn max_inline(&self) -> usize {
        self.eng().max_payload()
    }

    /// The process's counters, by printed name, in the order of [`crate::counter_table`] (the
    /// network's are 0 in a job on one host).
    pub fn counters(&self) -> Vec<(String, u64)> {
        crate::counter_table()
            .iter()
            .map(CounterInfo::display_name)
            .zip(self.counter_values())
            .collect()
    }

    /// The process's counters in the order of [`crate::counter_table`].
    pub fn counter_values(&self) -> Vec<u64> {
        all_counters(&self.eng(), self.inner.net.as_deref())
    }

    pub(crate) fn eng(&self) -> ExclusiveGuard<'_, Engine> {
        self.inner.eng.borrow_mut()
    }

    pub(crate) fn claim_port(&self, port: u32, kind: PortKind) -> Result<(), OpenError> {
        if port == NO_PORT {
            return Err(OpenError::Reserved { port });
        }
        if !self.eng().claim_port(port, kind) {
            return Err(OpenError::PortInUse { port });
        }
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
            waits: Default::default(),
            best_effort: AtomicBool::new(false),
            matched: AtomicBool::new(false),
            tag_ignore: std::sync::atomic::AtomicU32::new(0),
            tag_apart: AtomicBool::new(false),
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
        n += self.run_due_handlers()?;
        // Receives posted earlier take what arrives while a send waits (a large send to this
        // rank itself needs its posted receive to answer).
        self.drive_posted();
        Ok(n)
    }

    /// Runs the handlers of the active-port messages waiting in the rings (at most 64 at a
    /// time, so a flood cannot keep the caller). Never inside a handler.
    pub(crate) fn run_due_handlers(&self) -> Result<usize, RecvError> {
        if self.inner.nactive.load(Ordering::Relaxed) == 0 || self.inner.dispatch_depth.get() > 0 {
            return Ok(0);
        }
        let mut n = 0;
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
        let mut w = Waiter::new(self.inner.cfg.wait, &self.inner.waits);
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

    /// The local rank of job rank `rank`, or None when it is on another host.
    pub(crate) fn route(&self, rank: usize) -> Option<usize> {
        self.inner.g2l[rank]
    }

    pub(crate) fn net(&self) -> ExclusiveGuard<'_, crate::net::Net> {
        self.inner
            .net
            .as_ref()
            .expect("a rank on another host implies the network is open")
            .borrow_mut()
    }

    /// The descriptor an application polls (`Endpoint::as_raw_fd`), with a network: the epoll
    /// set over the doorbell, which the socket joins now, on first use.
    pub(crate) fn watch_net(&self) -> Option<std::os::fd::RawFd> {
        use std::os::fd::AsRawFd;
        let ep = self.inner.poll_fd.as_ref()?;
        self.inner.poll_net.call_once(|| {
            let Some(net) = self.inner.net.as_ref() else {
                return;
            };
            let fd = net.borrow_mut().fd();
            if let Err(e) = volley_sys::net::epoll_add(ep.as_raw_fd(), fd) {
                // The descriptor then rings for local messages only; say so where it is seen.
                eprintln!(
                    "volley: cannot add the network socket to the endpoint's poll descriptor ({e}): \
                     it becomes readable for messages from this host only; raise \
                     /proc/sys/fs/epoll/max_user_watches or poll the endpoint with try_recv"
                );
            }
        });
        Some(ep.as_raw_fd())
    }

    /// One round of network I/O and the active-port handlers it made due; the network, if any.
    pub(crate) fn net_poll(&self) -> Option<&Exclusive<crate::net::Net>> {
        let net = self.inner.net.as_ref()?;
        net.borrow_mut().pump();
        self.net_dispatch();
        Some(net)
    }

    /// What moved so far, in the rings and on the network: a wait that sees it move is not
    /// stuck (see `Backoff::snooze_in`).
    pub(crate) fn moved(&self) -> u64 {
        // Packets: see `Net::moved`.
        let net = self
            .inner
            .net
            .as_ref()
            .map_or(0, |n| n.borrow_mut().moved());
        self.eng().activity() + net
    }

    /// Why nothing more can come from the network, if so.
    pub(crate) fn net_dead_end(&self, from: Option<usize>) -> Option<RecvError> {
        let net = self.inner.net.as_ref()?.borrow_mut();
        let (rank, fate) = match from {
            Some(r) if self.inner.g2l[r].is_none() => (r, net.fate_of(r)?),
            Some(_) => return None,
            None => *net.lost.iter().find(|(_, f)| f.is_failure())?,
        };
        Some(RecvError::PeerLost(crate::PeerLost { rank, fate }))
    }

    pub(crate) fn check_rank(&self, rank: usize) -> Result<(), SendError> {
        if rank >= self.size() {
            return Err(SendError::NoSuchRank {
                rank,
                size: self.size(),
            });
        }
        Ok(())
    }
}

/// The process's counters in the order of [`crate::counter_table`]: the engine's, then the
/// network's (zeros without a network).
fn all_counters(e: &Engine, net: Option<&Exclusive<crate::net::Net>>) -> Vec<u64> {
    let mut v = e.counter_values().to_vec();
    match net {
        Some(n) => v.extend(n.borrow_mut().table_values()),
        None => v.resize(crate::TABLE_LEN, 0),
    }
    v
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.close();
    }
}

impl Inner {
    /// What finalisation owes the peers and the launcher, once: when the world is dropped, or
    /// at exit for a world that never was.
    fn close(&self) {
        if self.closed.swap(true, Ordering::AcqRel) {
            return;
        }
        if let Ok(mut g) = OPEN.lock() {
            if g.as_ref()
                .is_some_and(|(w, _)| std::ptr::eq(w.as_ptr(), self))
            {
                *g = None;
            }
        }
        // The liveness thread stops first: from here on this thread alone speaks for the rank.
        self.keeper.lock().unwrap_or_else(|e| e.into_inner()).take();
        // Dropped: nobody else holds the cell. At exit, another thread may be inside volley
        // (the progress thread for a moment; an application thread for good, and then its
        // sends are its own business).
        let mut e = None;
        for _ in 0..1000 {
            e = self.eng.try_borrow_mut();
            if e.is_some() {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let Some(mut e) = e else {
            eprintln!(
                "volley: rank {}: exiting while another thread is inside volley: its queued sends are not flushed",
                self.info.rank
            );
            return;
        };
        e.finish_sends(self.info.rank);
        // Everything sent over the network is acknowledged before we leave, then the peers are
        // told we finished (so our silence is not taken for a failure).
        if let Some(net) = self.net.as_ref() {
            let mut n = net.borrow_mut();
            n.flush(std::time::Duration::from_secs(30));
            n.close();
        }
        let values = all_counters(&e, self.net.as_deref());
        e.mark_finalized(&values);
        if self.cfg.print_counters {
            let mut s = format!("volley counters, rank {}:\n", self.info.rank);
            for (c, v) in crate::counter_table().iter().zip(&values) {
                // The network's rows only where there is a network.
                if c.layer == crate::Layer::Core || self.net.is_some() {
                    s.push_str(&format!("  {:<22} {v:>14} {}\n", c.display_name(), c.unit));
                }
            }
            let per_peer = self.net.as_ref().map(|n| n.borrow_mut().per_peer());
            for (peer, v) in per_peer.unwrap_or_default() {
                let nonzero: Vec<String> = volley_proto::PEER_COUNTERS
                    .iter()
                    .zip(v)
                    .filter(|(_, v)| *v > 0)
                    .map(|((name, _, _), v)| format!("{name}={v}"))
                    .collect();
                s.push_str(&format!("  peer rank {peer}: {}\n", nonzero.join(" ")));
            }
            eprint!("{s}");
        }
        // Last: the launcher learns this rank finished normally.
        let pmi = crate::pmi::CONN
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .take();
        if let Some(mut p) = pmi {
            if let Err(e) = p.finalize() {
                eprintln!("volley: rank {}: {e}", self.info.rank);
            }
        }
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
