//! The face's state: the world, and the tables behind the handles a program holds.
//!
//! One [`Rt`] per process, in an [`Exclusive`] cell biased to the thread that called MPI last
//! (plain loads and stores per call, no locked instruction, no lock), since calls come from one
//! thread at a time (the thread levels volley provides). The
//! borrow is never held while the program's own code runs (error handlers, attribute callbacks,
//! user reduction functions): those may call MPI.
//!
//! Handles: predefined ones are mpi.h's small constants; a handle the face creates is
//! `kind << 24 | index` (requests add a generation above bit 32, so a freed request's handle is
//! never taken for a later one).

use crate::abi::{self, class, H};
use crate::dtype::Dtype;
use crate::err::{fail, R};
use crate::p2p::{More, Msg, Req};
use std::os::raw::c_int;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use volley::{Endpoint, World};
use volley_sys::{Exclusive, ExclusiveGuard};

pub const PHASE_RUNNING: u8 = 1;
pub const PHASE_FINALIZED: u8 = 2;
/// The runtime (the face's state): 0 before MPI_Init or the first MPI_Session_init, then
/// PHASE_RUNNING, then PHASE_FINALIZED once MPI_Finalize or the last MPI_Session_finalize,
/// whichever is later, took it down.
pub static PHASE: AtomicU8 = AtomicU8::new(0);
/// The world model (MPI-4.0 11.4): 0 before MPI_Init, PHASE_RUNNING after it, PHASE_FINALIZED
/// after MPI_Finalize (what MPI_Initialized and MPI_Finalized say; sessions do not count).
pub static WORLD_MODEL: AtomicU8 = AtomicU8::new(0);

static RT: Exclusive<Option<Rt>> = Exclusive::biased(None);

pub const KIND_COMM: usize = 1;
pub const KIND_TYPE: usize = 2;
pub const KIND_GROUP: usize = 3;
pub const KIND_REQ: usize = 4;
pub const KIND_OP: usize = 5;
pub const KIND_ERRH: usize = 6;
pub const KIND_MSG: usize = 7;
pub const KIND_INFO: usize = 8;
pub const KIND_SESSION: usize = 9;
pub const KIND_WIN: usize = 10;
pub const KIND_FILE: usize = 11;

/// Objects of one kind a process can hold at once.
pub const MAX_OBJECTS: usize = 1 << 20;
const INDEX_MASK: usize = MAX_OBJECTS - 1;
/// Bits of generation in request and message handles.
pub const GEN_MASK: u32 = 0x7f;

pub fn handle(kind: usize, idx: usize) -> H {
    debug_assert!(idx < MAX_OBJECTS);
    (kind << 27) | idx
}

/// The index of a handle of `kind`, if it is one.
pub fn index(kind: usize, h: H) -> Option<usize> {
    (h >> 27 == kind).then_some(h & INDEX_MASK)
}

/// A handle with a generation (requests, matched-probe messages).
pub fn gen_handle(kind: usize, idx: usize, gen: u32) -> H {
    handle(kind, idx) | (((gen & GEN_MASK) as usize) << 20)
}

/// The index and generation of a handle made by `gen_handle`.
pub fn gen_index(kind: usize, h: H) -> Option<(usize, u32)> {
    index(kind, h).map(|i| (i, ((h >> 20) as u32) & GEN_MASK))
}

/// Context ids: 1024 per process (MPICH's scheme): a new communicator takes the lowest id that
/// is free at every member, agreed by an AND-reduction of the free masks over the parent.
pub const CTX_WORDS: usize = 16;
/// Words of contexts reserved for creations that finish in one call (see `Contexts::offer_to`).
pub const RESERVED_WORDS: usize = 1;
/// The core port of context `cid`'s point-to-point traffic (collectives use the next one).
pub fn port_of(cid: u32) -> u32 {
    0x4000_0000 + 2 * cid
}

/// A communicator's fixed part, shared by the calls that use it.
pub struct CommCore {
    pub cid: u32,
    /// Point-to-point messages.
    pub ep: Endpoint,
    /// Collectives and synchronous-send acknowledgements.
    pub coll: Endpoint,
    /// Job rank of each rank of the communicator.
    pub group: Arc<[usize]>,
    /// This process's rank in the communicator.
    pub rank: usize,
    /// Rank in the communicator of each job rank (None when the communicator is the world's
    /// identity, or the job rank is not a member).
    pub w2c: Option<Vec<i32>>,
    /// An intercommunicator's other group: its job ranks, and each job rank's rank in it.
    pub remote: Option<(Arc<[usize]>, Vec<i32>)>,
    /// Blocking and non-blocking collectives started on this communicator (see `nbc::Seq`).
    pub coll_seq: std::sync::atomic::AtomicU32,
    pub nb_seq: std::sync::atomic::AtomicU32,
    /// Persistent collectives made on this communicator (MPI_Bcast_init and the like).
    pub p_seq: std::sync::atomic::AtomicU32,
    /// Its process topology (MPI_Cart_create and the others), kept by MPI_Comm_dup.
    pub topo: Option<Arc<crate::topo::Topo>>,
    /// Whether it is an intracommunicator of two or more ranks that all share this host's
    /// segment, where short collectives can meet in the ranks' collective slots.
    pub shared: bool,
    /// Its collective slots, once its first such collective has claimed them (None inside: a
    /// member had no slot free, and its collectives send messages). See `coll::shm_group`.
    pub shm: std::sync::OnceLock<Option<volley::ShmGroup>>,
    /// Its hosts, when its ranks span several (see `hier`), once its first collective that goes
    /// through them has drawn the picture (None inside: nothing to gain, or a host's ranks had no
    /// slot free).
    pub hier: std::sync::OnceLock<Option<crate::hier::Hier>>,
    /// Its non-blocking collectives that meet in the segment (see `nbc_shm`).
    pub nbc_shm: crate::nbc_shm::NbcShm,
    /// The choices of the collectives' short paths for their last calls (allreduce, reduce,
    /// bcast; see `coll::short_in_slots`): 0 before any.
    pub short_memo: [std::sync::atomic::AtomicU64; 3],
}

impl CommCore {
    pub fn size(&self) -> usize {
        self.group.len()
    }

    pub fn is_inter(&self) -> bool {
        self.remote.is_some()
    }

    /// The sequence number of the collective this member starts now (every member starts the
    /// communicator's collectives in the same order): from the non-blocking count while one is
    /// being set up (`nbc::starting`), else from the blocking count.
    pub fn next_seq(&self) -> crate::nbc::Seq {
        // A start of a persistent collective takes the number its init reserved.
        if let Some(s) = crate::nbc::take_reserved() {
            return s;
        }
        let nb = crate::nbc::is_starting();
        let counter = if nb { &self.nb_seq } else { &self.coll_seq };
        crate::nbc::Seq::new(
            counter.fetch_add(1, std::sync::atomic::Ordering::Relaxed),
            nb,
        )
    }

    /// The number of a persistent collective made now (see `nbc::Seq::persistent`).
    pub fn persistent_seq(&self) -> crate::nbc::Seq {
        crate::nbc::Seq::persistent(
            self.p_seq
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// The job rank of the peer rank `r` of point-to-point operations: in the remote group of
    /// an intercommunicator, in the group otherwise.
    #[inline]
    pub fn peer_world_rank(&self, r: c_int) -> R<usize> {
        match &self.remote {
            None => self.world_rank(r),
            Some((g, _)) => match usize::try_from(r).ok().and_then(|i| g.get(i)) {
                Some(&w) => Ok(w),
                None => Err(not_remote(r, g.len())),
            },
        }
    }

    /// The peer rank of job rank `w` (see `peer_world_rank`).
    pub fn peer_rank(&self, w: usize) -> c_int {
        match &self.remote {
            None => self.comm_rank(w),
            Some((_, m)) => m.get(w).copied().unwrap_or(abi::UNDEFINED),
        }
    }

    /// The job rank of communicator rank `r`.
    #[inline]
    pub fn world_rank(&self, r: c_int) -> R<usize> {
        match usize::try_from(r).ok().and_then(|i| self.group.get(i)) {
            Some(&w) => Ok(w),
            None => Err(not_in_comm(r, self.group.len())),
        }
    }

    /// The communicator rank of job rank `w`.
    pub fn comm_rank(&self, w: usize) -> c_int {
        match &self.w2c {
            None => w as c_int,
            Some(m) => m.get(w).copied().unwrap_or(abi::UNDEFINED),
        }
    }
}

/// What a communicator handle names: the shared part, and what the program may change.
pub struct CommSlot {
    pub core: Arc<CommCore>,
    pub name: String,
    pub errhandler: H,
    /// (keyval, value) of the attributes set on it.
    pub attrs: Vec<(c_int, usize)>,
    /// Partitioned inits on it so far, by (peer, tag, send): the number of the next (see
    /// `p2p::part_tag`). Kept with the handle, so a communicator that reuses a freed one's
    /// handle starts counting afresh, as its peers do.
    pub part_inits: std::collections::HashMap<(c_int, c_int, bool), usize>,
}

pub type ErrFn = unsafe extern "C" fn(*mut H, *mut c_int, ...);
pub type CopyFn = unsafe extern "C" fn(
    H,
    c_int,
    *mut std::ffi::c_void,
    *mut std::ffi::c_void,
    *mut std::ffi::c_void,
    *mut c_int,
) -> c_int;
pub type DeleteFn =
    unsafe extern "C" fn(H, c_int, *mut std::ffi::c_void, *mut std::ffi::c_void) -> c_int;
pub type UserFn =
    unsafe extern "C" fn(*mut std::ffi::c_void, *mut std::ffi::c_void, *mut c_int, *mut H);

/// An attribute key made by MPI_Comm_create_keyval: the copy callback (0: null copy, 1: dup),
/// the delete callback (0: none), the extra state.
#[derive(Clone, Copy)]
pub struct Keyval {
    pub copy: usize,
    pub delete: usize,
    pub extra: usize,
    /// The kind of object it was made for (MPI_Comm_, MPI_Type_ or MPI_Win_create_keyval): a
    /// keyval used with another kind is an error (MPI-3.1 6.7.2).
    pub kind: KeyvalKind,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum KeyvalKind {
    Comm,
    Type,
    Win,
}

impl KeyvalKind {
    fn noun(self) -> &'static str {
        match self {
            KeyvalKind::Comm => "communicators (MPI_Comm_create_keyval)",
            KeyvalKind::Type => "datatypes (MPI_Type_create_keyval)",
            KeyvalKind::Win => "windows (MPI_Win_create_keyval)",
        }
    }
}

impl Rt {
    /// Keyval `k`, made for objects of `kind` (freed ones too: attributes set with a keyval
    /// outlive its MPI_*_free_keyval). `live`: refuse a freed one.
    pub fn keyval(&self, k: c_int, kind: KeyvalKind, live: bool) -> R<Keyval> {
        let slot = if k > 0 {
            self.keyvals.get((k - 1) as usize)
        } else {
            None
        };
        let kv = match slot {
            Some(Some(kv)) => *kv,
            Some(None) if !live => {
                return Err(fail(class::KEYVAL, format!("keyval {k} was freed")));
            }
            _ => return Err(fail(class::KEYVAL, format!("{k} is not a keyval"))),
        };
        if kv.kind != kind {
            return Err(fail(
                class::KEYVAL,
                format!(
                    "keyval {k} was made for {}, not {}",
                    kv.kind.noun(),
                    kind.noun()
                ),
            ));
        }
        Ok(kv)
    }
}

#[derive(Clone, Copy)]
pub struct UserOp {
    pub f: UserFn,
    pub commute: bool,
}

/// A slab: slots reused, so a program with a bounded number of live objects allocates nothing
/// once warm.
pub struct Slab<T> {
    pub slots: Vec<(u32, Option<T>)>,
    free: Vec<u32>,
}

impl<T> Default for Slab<T> {
    fn default() -> Self {
        Slab {
            slots: Vec::new(),
            free: Vec::new(),
        }
    }
}

impl<T> Slab<T> {
    /// Stores `v`; its index and generation.
    pub fn insert(&mut self, v: T) -> (usize, u32) {
        self.insert_with(|| v)
    }
    /// Stores the value `make` gives, made in its slot; its index and generation.
    #[inline(always)]
    pub fn insert_with(&mut self, make: impl FnOnce() -> T) -> (usize, u32) {
        if let Some(i) = self.free.pop() {
            let s = &mut self.slots[i as usize];
            s.0 = s.0.wrapping_add(1);
            s.1 = Some(make());
            (i as usize, s.0)
        } else {
            self.slots.push((0, Some(make())));
            (self.slots.len() - 1, 0)
        }
    }
    pub fn get(&self, i: usize, gen: u32) -> Option<&T> {
        match self.slots.get(i) {
            Some((g, Some(v))) if *g & GEN_MASK == gen & GEN_MASK => Some(v),
            _ => None,
        }
    }
    pub fn get_mut(&mut self, i: usize, gen: u32) -> Option<&mut T> {
        match self.slots.get_mut(i) {
            Some((g, Some(v))) if *g & GEN_MASK == gen & GEN_MASK => Some(v),
            _ => None,
        }
    }
    pub fn remove(&mut self, i: usize, gen: u32) -> Option<T> {
        match self.slots.get_mut(i) {
            Some((g, v @ Some(_))) if *g & GEN_MASK == gen & GEN_MASK => {
                self.free.push(i as u32);
                v.take()
            }
            _ => None,
        }
    }
}

/// The process's MPI state.
pub struct Rt {
    pub world: World,
    pub thread_level: c_int,
    pub main_thread: std::thread::ThreadId,
    pub comms: Vec<Option<CommSlot>>,
    pub types: Vec<Option<Arc<Dtype>>>,
    pub groups: Vec<Option<Arc<[usize]>>>,
    pub reqs: Slab<Req>,
    /// Cleared request parts for the requests that need them (see `p2p::More`): boxes, since a
    /// request takes one as it is.
    #[allow(clippy::vec_box)]
    pub spare_more: Vec<Box<More>>,
    pub msgs: Slab<Msg>,
    pub ops: Vec<Option<UserOp>>,
    pub errhandlers: Vec<Option<ErrFn>>,
    /// Live sessions (MPI_Session_init): each one's error handler.
    pub sessions: Vec<Option<H>>,
    pub keyvals: Vec<Option<Keyval>>,
    /// Names the program gave predefined datatypes.
    pub type_names: Vec<(H, String)>,
    /// Datatype attributes (MPI_Type_set_attr): (datatype, keyval, value).
    pub type_attrs: Vec<(H, c_int, usize)>,
    /// The datatypes MPI_Type_create_f90_integer/real/complex returned, one per (combiner, p,
    /// r): predefined, so each is made once and never freed (MPI-3.1 17.2.5).
    pub f90_types: Vec<(c_int, c_int, c_int, H)>,
    /// MPI_Buffer_attach's buffer (address, size) and the bytes buffered sends hold now.
    pub bsend_buf: Option<(usize, usize)>,
    pub bsend_used: usize,
    /// Requests the program freed before they completed, and buffered sends: completed in the
    /// background (as MPI_Request_free says), by every wait and test.
    pub orphans: Vec<(usize, u32)>,
    /// Reused by every wait and test (see `p2p::advance`), boxed so that taking it out for a
    /// pass moves a pointer, not the vectors' headers (a memcpy call and a drop of the empty
    /// one left behind, a tenth of an MPI_Test that finds nothing). None only while a pass
    /// has it.
    pub scratch: Option<Box<crate::p2p::Scratch>>,
    /// The requests (slot, generation) of the non-blocking collectives started and maybe still
    /// in flight: every wait and test moves them on, whatever it waits for.
    pub nbcs: Vec<(usize, u32)>,
    /// A receive MPI_Irecv has not posted in the core yet (see `p2p::irecv_quick`): every MPI
    /// call posts it first (`rt`), except a send that completes at once and a wait, which
    /// receives it by MPI_Recv's loop when it is all the wait waits for.
    pub deferred: Option<crate::p2p::Deferred>,
    /// Counts the completions of requests (see `p2p::Req::done_at`).
    pub done_clock: u64,
    /// Windows (one-sided communication, see `win`).
    pub wins: Vec<Option<Box<crate::win::Win>>>,
    /// Open files and the rest of MPI-IO's state (see `io`).
    pub io: crate::io::IoState,
}

/// The face's state, borrowed for one MPI call.
pub struct RtGuard(Held);

enum Held {
    /// The state itself, borrowed from its cell.
    Own(ExclusiveGuard<'static, Option<Rt>>),
    /// The state a caller up the stack holds, lent to a function of the program's that MPI runs
    /// (see `lend_to_callbacks`).
    Lent(*mut Rt),
}

impl std::ops::Deref for RtGuard {
    type Target = Rt;
    fn deref(&self) -> &Rt {
        match &self.0 {
            Held::Own(g) => g.as_ref().expect("checked when the guard was made"),
            // SAFETY: see `lend_to_callbacks`: the lender does not touch the state while this
            // guard, the only way to it meanwhile, lives.
            Held::Lent(p) => unsafe { &**p },
        }
    }
}
impl std::ops::DerefMut for RtGuard {
    fn deref_mut(&mut self) -> &mut Rt {
        match &mut self.0 {
            Held::Own(g) => g.as_mut().expect("checked when the guard was made"),
            // SAFETY: as in deref.
            Held::Lent(p) => unsafe { &mut **p },
        }
    }
}

impl Drop for RtGuard {
    fn drop(&mut self) {
        if let Held::Lent(p) = self.0 {
            // Back to the lender, for the program's next call from the same function.
            LENT.set(p);
        }
    }
}

thread_local! {
    /// The state while a caller that holds it runs functions of the program's (null: none).
    static LENT: std::cell::Cell<*mut Rt> = const { std::cell::Cell::new(std::ptr::null_mut()) };
}

/// Runs `f`, which may run functions of the program's (a user-defined operation inside a
/// non-blocking reduction, polled by a wait that holds the state), with the state `rt` lent to
/// the MPI calls those functions make: MPI-3.1 5.9.5 lets a user function call MPI (e.g.
/// MPI_Type_get_extent on its datatype), only not communicate. One such call at a time gets it
/// (`rt()` takes it out of `LENT` and its guard puts it back), and `rt` is not touched until
/// `f` returns.
pub fn lend_to_callbacks<T>(rt: &mut Rt, f: impl FnOnce() -> T) -> T {
    let p: *mut Rt = rt;
    let before = LENT.replace(p);
    let r = f();
    LENT.set(before);
    r
}

/// The state, if MPI is running. Inlined into every MPI call: returned through memory, the
/// guard's narrow stores and the caller's wide load of them made a failed store-to-load
/// forward, which waits for every earlier store of the thread (the previous message's ring
/// line, still on its way to the receiver's core) to reach the cache.
#[inline(always)]
pub fn rt() -> R<RtGuard> {
    let mut g = rt_keep()?;
    if g.deferred.is_some() {
        crate::p2p::post_deferred(&mut g);
    }
    Ok(g)
}

/// `rt` without posting a receive MPI_Irecv held back (`Rt::deferred`): only for the calls that
/// keep it held back correctly (a send that completes at once, and the waits, which post it or
/// receive it themselves).
#[inline(always)]
pub fn rt_keep() -> R<RtGuard> {
    if PHASE.load(std::sync::atomic::Ordering::Acquire) != PHASE_RUNNING {
        return Err(not_running());
    }
    match RT.try_borrow_mut() {
        Some(g) if g.is_some() => Ok(RtGuard(Held::Own(g))),
        g => rt_slow(g.is_some()),
    }
}

#[cold]
fn not_running() -> crate::err::Fail {
    match crate::err::running() {
        Err(e) => e,
        Ok(()) => fail(class::OTHER, "MPI is not initialised"),
    }
}

/// The state when the cell is taken (`free`: false) or holds none.
#[cold]
fn rt_slow(free: bool) -> R<RtGuard> {
    if !free {
        let lent = LENT.replace(std::ptr::null_mut());
        if !lent.is_null() {
            return Ok(RtGuard(Held::Lent(lent)));
        }
        return Err(fail(
            class::OTHER,
            "two threads are inside MPI at once, or MPI was called from a callback that MPI itself runs: volley's MPI provides MPI_THREAD_SERIALIZED at most",
        ));
    }
    Err(fail(class::OTHER, "MPI is not initialised"))
}

/// The state if MPI is running and no call of this thread holds it (nor lends it to a
/// callback): for the core's idle hook, which runs inside waits, some of them inside the
/// face's own calls.
pub fn rt_if_free() -> Option<RtGuard> {
    if PHASE.load(std::sync::atomic::Ordering::Acquire) != PHASE_RUNNING {
        return None;
    }
    match RT.try_borrow_mut() {
        Some(g) if g.is_some() => Some(RtGuard(Held::Own(g))),
        _ => None,
    }
}

/// Installs the state (MPI_Init).
pub fn install(rt: Rt) {
    *RT.borrow_mut() = Some(rt);
    PHASE.store(PHASE_RUNNING, Ordering::Release);
}

/// Takes the state out (MPI_Finalize).
pub fn uninstall() -> Option<Rt> {
    volley::set_idle_hook(None);
    PHASE.store(PHASE_FINALIZED, Ordering::Release);
    RT.borrow_mut().take()
}

pub enum Handler {
    Fatal,
    Return,
    User(ErrFn),
}

/// The error handler in force on `comm` (errors outside any communicator, and before MPI_Init,
/// use MPI_COMM_WORLD's, which is fatal by default).
pub fn errhandler_of(comm: H) -> Handler {
    // (MPI_Session_init passes its error handler, and may run before the state exists.)
    match comm {
        abi::ERRORS_RETURN => return Handler::Return,
        abi::ERRORS_ARE_FATAL | abi::ERRORS_ABORT => return Handler::Fatal,
        _ => {}
    }
    let Some(g) = RT.try_borrow_mut() else {
        return Handler::Fatal;
    };
    let Some(rt) = g.as_ref() else {
        return Handler::Fatal;
    };
    // A session's error handler for the session functions, an error handler itself for
    // MPI_Session_init (which has no session yet), else the communicator's.
    let h = if let Some(i) = index(KIND_SESSION, comm) {
        rt.sessions
            .get(i)
            .copied()
            .flatten()
            .unwrap_or(abi::ERRORS_ARE_FATAL)
    } else if index(KIND_ERRH, comm).is_some() {
        comm
    } else if index(KIND_WIN, comm).is_some() {
        crate::win::errhandler(rt, comm)
    } else if crate::io::is_file(comm) {
        crate::io::errhandler(rt, comm)
    } else {
        rt.comm_slot(comm)
            .or_else(|_| rt.comm_slot(abi::COMM_WORLD))
            .map(|s| s.errhandler)
            .unwrap_or(abi::ERRORS_ARE_FATAL)
    };
    match h {
        abi::ERRORS_RETURN => Handler::Return,
        abi::ERRORS_ARE_FATAL | abi::ERRORS_ABORT => Handler::Fatal,
        h => match index(KIND_ERRH, h).and_then(|i| rt.errhandlers.get(i).copied().flatten()) {
            Some(f) => Handler::User(f),
            None => Handler::Fatal,
        },
    }
}

/// Fails unless `h` is an error handler: a predefined one (known before MPI_Init, for
/// MPI_Session_init) or one the program made.
pub fn check_errhandler(h: H) -> R {
    match h {
        abi::ERRORS_ARE_FATAL | abi::ERRORS_RETURN | abi::ERRORS_ABORT => Ok(()),
        h => {
            let rt = rt()?;
            index(KIND_ERRH, h)
                .and_then(|i| rt.errhandlers.get(i).copied().flatten())
                .map(|_| ())
                .ok_or_else(|| fail(class::ERRHANDLER, format!("{h:#x} is not an error handler")))
        }
    }
}

/// This process's job rank, when MPI is running (for messages).
pub fn world_rank() -> Option<usize> {
    let g = RT.try_borrow_mut()?;
    g.as_ref().map(|rt| rt.world.rank())
}

impl Rt {
    #[inline]
    pub fn comm_slot(&self, h: H) -> R<&CommSlot> {
        self.comms
            .get(comm_index(h)?)
            .and_then(|s| s.as_ref())
            .ok_or_else(|| bad_comm(h))
    }

    pub fn comm_slot_mut(&mut self, h: H) -> R<&mut CommSlot> {
        self.comms
            .get_mut(comm_index(h)?)
            .and_then(|s| s.as_mut())
            .ok_or_else(|| bad_comm(h))
    }

    /// The communicator `h` names.
    pub fn comm(&self, h: H) -> R<Arc<CommCore>> {
        Ok(self.comm_slot(h)?.core.clone())
    }

    /// Stores a new communicator; its handle.
    pub fn add_comm(&mut self, core: CommCore, errhandler: H) -> H {
        let slot = CommSlot {
            core: Arc::new(core),
            name: String::new(),
            errhandler,
            attrs: Vec::new(),
            part_inits: Default::default(),
        };
        handle(KIND_COMM, vacant(&mut self.comms, slot))
    }

    pub fn group(&self, h: H) -> R<Arc<[usize]>> {
        if h == abi::GROUP_EMPTY {
            return Ok(Arc::from(Vec::new()));
        }
        index(KIND_GROUP, h)
            .and_then(|i| self.groups.get(i).cloned().flatten())
            .ok_or_else(|| {
                fail(
                    class::GROUP,
                    format!("{h:#x} is not a group handle (freed, or never made)"),
                )
            })
    }

    pub fn add_group(&mut self, g: Arc<[usize]>) -> H {
        if g.is_empty() {
            return abi::GROUP_EMPTY;
        }
        handle(KIND_GROUP, vacant(&mut self.groups, g))
    }

    /// Opens the two endpoints of context `cid` and makes the communicator.
    pub fn make_comm(&self, cid: u32, group: Arc<[usize]>) -> R<CommCore> {
        self.make_comm_with(cid, group, None)
    }

    /// Like `make_comm`; with `remote`, an intercommunicator with that remote group.
    pub fn make_comm_with(
        &self,
        cid: u32,
        group: Arc<[usize]>,
        remote: Option<Arc<[usize]>>,
    ) -> R<CommCore> {
        let me = self.world.rank();
        let rank = group
            .iter()
            .position(|&w| w == me)
            .ok_or_else(|| fail(class::INTERN, "this process is not in the new group"))?;
        let open = |port| {
            self.world.open(port).map_err(|e| {
                fail(
                    class::INTERN,
                    format!("cannot open the communicator's context: {e}"),
                )
            })
        };
        let ep = open(port_of(cid))?;
        let coll = open(port_of(cid) + 1)?;
        ep.set_tag_ignore(crate::p2p::SYNC);
        // Partitioned messages are for partitioned receives only: no wildcard takes them.
        ep.set_tag_apart(true);
        // Both contexts are received by envelope only: their unexpected messages may be drained
        // out of a full ring from the start (a large send followed by a barrier must not stop the
        // barrier's message behind it).
        ep.use_matching();
        coll.use_matching();
        let identity =
            group.len() == self.world.size() && group.iter().enumerate().all(|(i, &w)| i == w);
        let w2c = (!identity).then(|| {
            let mut m = vec![abi::UNDEFINED; self.world.size()];
            for (i, &w) in group.iter().enumerate() {
                m[w] = i as c_int;
            }
            m
        });
        let remote = remote.map(|g| {
            let mut m = vec![abi::UNDEFINED; self.world.size()];
            for (i, &w) in g.iter().enumerate() {
                m[w] = i as c_int;
            }
            (g, m)
        });
        let shared = remote.is_none()
            && group.len() >= 2
            && group.iter().all(|&w| self.world.on_this_host(w));
        Ok(CommCore {
            shared,
            shm: std::sync::OnceLock::new(),
            hier: std::sync::OnceLock::new(),
            nbc_shm: Default::default(),
            short_memo: Default::default(),
            cid,
            ep,
            coll,
            group,
            rank,
            w2c: if remote.is_some() {
                Some(w2c.unwrap_or_else(|| (0..self.world.size() as c_int).collect()))
            } else {
                w2c
            },
            remote,
            coll_seq: std::sync::atomic::AtomicU32::new(0),
            nb_seq: std::sync::atomic::AtomicU32::new(0),
            p_seq: std::sync::atomic::AtomicU32::new(0),
            topo: None,
        })
    }
}

/// A communicator's context is free again once nothing holds the communicator: MPI_Comm_free
/// marks it for deallocation, and a pending request or matched message keeps it (and its
/// endpoints) until it completes.
impl Drop for CommCore {
    fn drop(&mut self) {
        ctx_take(self.cid, false);
    }
}

/// This process's communicator contexts: those free, and those offered to a context-id
/// agreement in flight, which no other agreement is offered until it ends (two agreements in
/// flight at once, e.g. MPI_Comm_idup on two communicators, can then never pick the same id).
/// Outside the face's state: an agreement's future runs while the state is held.
pub struct Contexts {
    free: [u64; CTX_WORDS],
    pledged: [u64; CTX_WORDS],
    /// Agreements in flight, by (parent context, collective number): only the least of them is
    /// offered contexts, the others retry (so two that cross, started in different orders on
    /// different processes, cannot starve each other: the least one in flight anywhere is the
    /// least at every one of its members, and goes through).
    inflight: Vec<(u32, u32)>,
}

static CONTEXTS: std::sync::Mutex<Contexts> = std::sync::Mutex::new(Contexts {
    free: [u64::MAX; CTX_WORDS],
    pledged: [0; CTX_WORDS],
    inflight: Vec::new(),
});

/// The contexts (one thread at a time uses MPI; the lock is never contended).
pub fn contexts() -> std::sync::MutexGuard<'static, Contexts> {
    CONTEXTS.lock().unwrap_or_else(|p| p.into_inner())
}

impl Contexts {
    /// Every context free again (MPI_Init).
    pub fn reset(&mut self) {
        self.free = [u64::MAX; CTX_WORDS];
        self.pledged = [0; CTX_WORDS];
        self.inflight.clear();
    }

    /// An agreement starts (`key`: its parent's context and collective number).
    pub fn begin(&mut self, key: (u32, u32)) {
        self.inflight.push(key);
    }

    /// An agreement ended.
    pub fn end(&mut self, key: (u32, u32)) {
        self.inflight.retain(|&k| k != key);
    }

    /// What agreement `key` is offered now (pledged to it until it withdraws): the contexts
    /// free and not offered elsewhere if it is the least in flight here, else none; but never
    /// the reserved ones to a non-blocking agreement, and always the free reserved ones to a
    /// blocking one.
    ///
    /// The reserve (the first RESERVED_WORDS words) is for the agreements that run to their end
    /// in one call: MPI_Comm_dup, MPI_Comm_create_group and the others. A non-blocking one
    /// (MPI_Comm_idup) pledges what it is offered until all its members have joined it, which
    /// can be after this process's next blocking creation, on another communicator, needs its
    /// members: without the reserve that creation found nothing it could offer (MPICH's
    /// comm/comm_create_group_idup). At most one blocking agreement runs at a time here, and no
    /// non-blocking one touches the reserve, so whatever of it is free is its own.
    pub fn offer_to(&mut self, key: (u32, u32), blocking: bool) -> [u64; CTX_WORDS] {
        let mut m = if self.inflight.iter().any(|&k| k < key) {
            [0; CTX_WORDS]
        } else {
            self.offer()
        };
        let words = m
            .iter_mut()
            .zip(self.free.iter().zip(self.pledged.iter_mut()));
        for (o, (f, p)) in words.take(RESERVED_WORDS) {
            if blocking {
                let reserve = f & !*p;
                *o |= reserve;
                *p |= reserve;
            } else {
                *p &= !*o;
                *o = 0;
            }
        }
        m
    }

    /// The free contexts a non-blocking agreement may ever be offered (the reserve left out).
    pub fn free_beyond_reserve(&self) -> [u64; CTX_WORDS] {
        let mut m = self.free;
        m[..RESERVED_WORDS].fill(0);
        m
    }

    /// The free contexts.
    pub fn free_mask(&self) -> [u64; CTX_WORDS] {
        self.free
    }

    /// The free contexts not offered to an agreement in flight (for an agreement that runs to
    /// its end before any other can start: among some members only, or across two groups).
    pub fn unpledged(&self) -> [u64; CTX_WORDS] {
        let mut m = self.free;
        for (w, p) in m.iter_mut().zip(self.pledged) {
            *w &= !p;
        }
        m
    }

    /// Marks context `cid` taken (or free again).
    pub fn take(&mut self, cid: u32, taken: bool) {
        let (w, b) = (cid as usize / 64, cid % 64);
        if taken {
            self.free[w] &= !(1u64 << b);
        } else {
            self.free[w] |= 1u64 << b;
        }
    }

    /// The contexts free and not offered elsewhere, now offered to one agreement.
    pub fn offer(&mut self) -> [u64; CTX_WORDS] {
        let mut m = [0; CTX_WORDS];
        for ((o, f), p) in m.iter_mut().zip(self.free).zip(self.pledged.iter_mut()) {
            *o = f & !*p;
            *p |= *o;
        }
        m
    }

    /// An agreement ended: what it was offered goes back.
    pub fn withdraw(&mut self, offer: &[u64; CTX_WORDS]) {
        for (p, o) in self.pledged.iter_mut().zip(offer) {
            *p &= !o;
        }
    }
}

/// Marks context `cid` taken (or free again).
pub fn ctx_take(cid: u32, taken: bool) {
    contexts().take(cid, taken);
}

/// The table index of communicator handle `h` (MPI_COMM_WORLD and MPI_COMM_SELF are 0 and 1).
#[inline]
fn comm_index(h: H) -> R<usize> {
    match h {
        abi::COMM_WORLD => Ok(0),
        abi::COMM_SELF => Ok(1),
        h => index(KIND_COMM, h).ok_or_else(|| bad_comm(h)),
    }
}

/// Stores `v` in the first free entry of a handle table (or a new one); its index.
pub fn vacant<T>(table: &mut Vec<Option<T>>, v: T) -> usize {
    match table.iter().position(|s| s.is_none()) {
        Some(i) => {
            table[i] = Some(v);
            i
        }
        None => {
            table.push(Some(v));
            table.len() - 1
        }
    }
}

#[cold]
#[inline(never)]
fn not_remote(r: c_int, n: usize) -> crate::err::Fail {
    fail(
        class::RANK,
        format!("rank {r} is not in the intercommunicator's remote group (it has {n} ranks)"),
    )
}

#[cold]
#[inline(never)]
fn not_in_comm(r: c_int, n: usize) -> crate::err::Fail {
    fail(
        class::RANK,
        format!(
            "rank {r} is not in the communicator (it has {n} ranks: 0 to {})",
            n as i64 - 1
        ),
    )
}

#[cold]
#[inline(never)]
fn bad_comm(h: H) -> crate::err::Fail {
    if h == abi::COMM_NULL {
        return fail(class::COMM, "the communicator is MPI_COMM_NULL");
    }
    fail(
        class::COMM,
        format!("{h:#x} is not a communicator handle (freed, or never made)"),
    )
}
