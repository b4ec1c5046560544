//! Point-to-point: MPI's send modes, receives, probes, matched probes and requests, on the
//! core's matcher and requests.
//!
//! A contiguous buffer is lent to the core as it is (no copy on the face's side: the core moves
//! the bytes once, through the ring, by single copy or through the network); a non-contiguous
//! one is packed into (or unpacked from) a buffer of the request's own.
//!
//! Send modes: standard and ready sends are the core's send; a synchronous send carries the
//! core's `SYNC_TAG` flag in its tag, and completes when the receiver's acknowledgement (sent by
//! the core the moment a receive matches it) arrives on the communicator's second context; a
//! buffered send copies into the attached buffer's budget and completes at once.
//!
//! Truncation: a message longer than the receive buffer fails the core's receive, which leaves it
//! queued and names its envelope; the face then takes it whole into a buffer of its size, copies
//! what fits and reports MPI_ERR_TRUNCATE (nothing is lost silently).

use crate::abi::{self, class, Status, H};
use crate::dtype::{committed, TypeRef};
use crate::err::{fail, from_recv, from_request, from_send, get, put, Fail, R};
use crate::state::{
    gen_handle, gen_index, rt, rt_keep, CommCore, Rt, KIND_MSG, KIND_REQ, MAX_OBJECTS,
};
use std::ffi::c_void;
use std::os::raw::c_int;
use std::sync::Arc;
use volley::{RawBuf, RawBufMut, RecvError, RequestError, RequestId, APART_TAG};

/// The synchronous-send flag in the core's tag.
pub const SYNC: u32 = volley::SYNC_TAG;

/// A pointer into the program's memory, held by a request until it completes (MPI's buffer
/// rule makes that sound; see the crate's safety contract).
#[derive(Clone, Copy)]
pub struct Ptr(pub *mut u8);
// SAFETY: the memory belongs to the program, which lends it to MPI until the operation
// completes; the face uses it from one thread at a time.
unsafe impl Send for Ptr {}
// SAFETY: as above: one thread at a time.
unsafe impl Sync for Ptr {}

/// `count` elements of a non-contiguous datatype at `buf`, packed or unpacked piece by piece as
/// the core moves them (no buffer of the whole message; see `volley::Packer`).
struct Pieces {
    buf: Ptr,
    count: usize,
    dtype: TypeRef,
    walk: crate::dtype::Walk,
}

impl Pieces {
    fn new(buf: *const c_void, count: usize, dtype: TypeRef) -> Box<Pieces> {
        Box::new(Pieces {
            buf: Ptr(buf as *mut u8),
            count,
            dtype,
            walk: Default::default(),
        })
    }
}

impl volley::Packer for Pieces {
    fn len(&self) -> usize {
        self.count * self.dtype.size
    }
    fn pack(&mut self, off: usize, out: &mut [u8]) {
        // SAFETY: MPI's buffer rule: the buffer holds count elements and stays valid until the
        // request completes, after which the core no longer asks.
        unsafe {
            self.dtype
                .pack_piece(self.buf.0, self.count, &mut self.walk, off, out)
        }
    }
}

impl volley::Unpacker for Pieces {
    fn len(&self) -> usize {
        self.count * self.dtype.size
    }
    fn unpack(&mut self, off: usize, data: &[u8]) {
        // SAFETY: as for pack.
        unsafe {
            self.dtype
                .unpack_piece(data, self.buf.0, self.count, &mut self.walk, off)
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Mode {
    Standard,
    Sync,
    Ready,
    Buffered,
}

/// What a persistent request starts each time. It holds its communicator and datatype: the
/// program may free their handles while the request lives (MPI-3.1 sections 4.1.9 and 6.4.3).
#[derive(Clone)]
pub struct Spec {
    pub send: Option<Mode>,
    pub buf: Ptr,
    pub count: c_int,
    pub dtype: H,
    pub peer: c_int,
    pub tag: c_int,
    pub comm: H,
    pub held: Option<(Arc<CommCore>, TypeRef)>,
}

/// A receive MPI_Irecv held back (`Rt::deferred`, see `irecv_quick`): its request's slot, its
/// source and tag in the core's terms, and where its data goes. Kept in the state, not in the
/// request's `More`, so that an Irecv + Wait pair takes nothing from the pool.
pub struct Deferred {
    pub slot: (usize, u32),
    pub src: Option<usize>,
    pub tag: Option<u32>,
    pub target: Target,
}

/// Where a receive's data goes.
pub struct Target {
    pub buf: Ptr,
    pub count: usize,
    pub dtype: TypeRef,
}

/// A request of the face. What a request that completes as it starts (the eager fast paths that
/// a message rate rests on) needs is here, in one cache line: storing, testing and collecting it
/// moves 64 bytes, not the 320 of every field below; the rest lives in `more`, from a pool.
pub struct Req {
    pub comm: H,
    /// The core's request for the data, until it completes.
    pub core: Option<RequestId>,
    /// Completed: `status` (and `more.err`) hold the result.
    pub done: bool,
    /// When it completed, on `Rt::done_clock` (MPI_Waitany and MPI_Testany take the request
    /// that completed first).
    pub done_at: u64,
    /// False for a persistent request not started, or completed and collected.
    pub active: bool,
    pub status: Status,
    /// None while the request needs nothing of `More`.
    pub more: Option<Box<More>>,
}

/// The parts of a request that the fast paths do not need.
#[derive(Default)]
pub struct More {
    pub core_comm: Option<Arc<CommCore>>,
    /// A second core request the request also waits for, until it completes: a synchronous
    /// send's acknowledgement receive, or the send of an MPI_Isendrecv (whose `core` is the
    /// receive).
    pub second: Option<RequestId>,
    pub err: Option<Fail>,
    /// A receive: where its data goes (a non-contiguous type is unpacked piece by piece).
    pub target: Option<Target>,
    /// A buffered send's copy of its data, lent to the core.
    pub stage: Vec<u8>,
    /// A persistent request's operation; it is inactive while `core`, `second` are None and not
    /// `done`.
    pub persistent: Option<Spec>,
    /// Bytes a buffered send holds of the attached buffer.
    pub bsend: usize,
    /// A non-blocking collective (or MPI_Comm_idup) in flight: polled by every test and wait.
    pub nbc: Option<crate::nbc::Nbc>,
    /// A generalized request's callbacks (MPI_Grequest_start): done when the program calls
    /// MPI_Grequest_complete.
    pub greq: Option<Greq>,
    /// A persistent collective's operation (MPI_Bcast_init and the like): inactive while `nbc`
    /// is None and not `done`.
    pub pcoll: Option<CollStart>,
    /// A partitioned request's partitions (MPI_Psend_init, MPI_Precv_init).
    pub part: Option<Part>,
}

/// A partitioned request (MPI-4.0 chapter 4): its persistent operation (in `More::persistent`)
/// moves the whole buffer as one message, in the matching space of partitioned messages
/// (`APART_TAG`); a send starts it once MPI_Pready has marked every partition of the round.
#[derive(Clone)]
pub struct Part {
    pub partitions: usize,
    /// The program's tag (the message's tag also carries the init's number, see `part_tag`).
    pub tag: c_int,
    /// A send's partitions marked ready in this round.
    pub ready: Vec<bool>,
    pub nready: usize,
    /// A send's round has begun (MPI_Start) and its message is not yet started.
    pub armed: bool,
}

/// What MPI_Start runs for a persistent collective (MPI-4.0 section 6.13): a new non-blocking
/// collective with the arguments of the init call, under the number the init reserved (see
/// `nbc::Seq::persistent`).
#[derive(Clone)]
pub struct CollStart {
    pub seq: crate::nbc::Seq,
    pub op: Arc<dyn Fn() -> R<crate::nbc::Nbc> + Send + Sync>,
}

pub type GreqQueryFn = unsafe extern "C" fn(*mut c_void, *mut Status) -> c_int;
pub type GreqFreeFn = unsafe extern "C" fn(*mut c_void) -> c_int;
pub type GreqCancelFn = unsafe extern "C" fn(*mut c_void, c_int) -> c_int;

/// The program's callbacks of a generalized request (MPI-3.1 section 12.2), and its state.
#[derive(Clone, Copy)]
pub struct Greq {
    pub query: Option<GreqQueryFn>,
    pub free: Option<GreqFreeFn>,
    pub cancel: Option<GreqCancelFn>,
    pub extra: usize,
}

impl Greq {
    /// The status the program's query function gives (the request completed).
    fn query(&self) -> (Status, Option<Fail>) {
        let mut st = Status::empty();
        let Some(f) = self.query else {
            return (st, None);
        };
        // SAFETY: the program's query function, called as MPI defines, with its extra state
        // and a status to fill.
        let rc = unsafe { f(self.extra as *mut c_void, &mut st) };
        (st, callback_error(rc, "query"))
    }

    /// Runs the program's free function (the request is freed).
    fn free(&self) -> Option<Fail> {
        let f = self.free?;
        // SAFETY: the program's free function, called once, with its extra state.
        let rc = unsafe { f(self.extra as *mut c_void) };
        callback_error(rc, "free")
    }
}

/// The error a generalized request's callback returned (its code is the call's).
fn callback_error(rc: c_int, which: &str) -> Option<Fail> {
    (rc != 0).then(|| {
        fail(
            rc,
            format!("the generalized request's {which} function returned error {rc}"),
        )
    })
}

impl More {
    /// Whether the request is one core request and nothing beside it: no synchronous send's
    /// second part, collective, generalized or partitioned request (what the fast paths of
    /// tests and waits look at).
    fn is_plain(&self) -> bool {
        self.second.is_none() && self.nbc.is_none() && self.greq.is_none() && self.part.is_none()
    }
}

impl Req {
    fn finished(comm: H, status: Status) -> Req {
        Req {
            comm,
            core: None,
            done: true,
            done_at: 0,
            active: true,
            status,
            more: None,
        }
    }

    /// The rest of the request, made on first use (the paths that use it are not the eager fast
    /// paths; those that start often take theirs from the pool, see `spare_more`).
    fn m(&mut self) -> &mut More {
        self.more.get_or_insert_with(Box::default)
    }

    fn second(&self) -> Option<RequestId> {
        self.more.as_ref().and_then(|m| m.second)
    }

    fn bsend(&self) -> usize {
        self.more.as_ref().map_or(0, |m| m.bsend)
    }

    fn greq(&self) -> Option<Greq> {
        self.more.as_ref().and_then(|m| m.greq)
    }

    fn persistent(&self) -> Option<&Spec> {
        self.more.as_ref().and_then(|m| m.persistent.as_ref())
    }

    fn pcoll(&self) -> Option<&CollStart> {
        self.more.as_ref().and_then(|m| m.pcoll.as_ref())
    }

    /// A persistent request of either kind: it goes inactive when collected, not away.
    fn is_persistent(&self) -> bool {
        self.persistent().is_some() || self.pcoll().is_some()
    }

    fn has_nbc(&self) -> bool {
        self.more.as_ref().is_some_and(|m| m.nbc.is_some())
    }
}

/// Most `More`s the pool keeps (beyond them a collected request's is freed).
const SPARE_MORE: usize = 1024;

/// A cleared `More` from the pool, so that a window of requests that take the full path
/// allocates nothing once warm.
fn spare_more(rt: &mut Rt) -> Box<More> {
    rt.spare_more.pop().unwrap_or_default()
}

/// Gives a collected request's `More` back to the pool, cleared (its communicator, datatype and
/// staged data let go now).
fn recycle(rt: &mut Rt, r: Req) {
    if let Some(mut m) = r.more {
        if rt.spare_more.len() < SPARE_MORE {
            *m = More::default();
            rt.spare_more.push(m);
        }
    }
}

/// A message taken by MPI_Mprobe / MPI_Improbe, waiting for its MPI_Mrecv.
pub struct Msg {
    /// Out of the core's matching; a large one's data still with its sender.
    pub matched: volley::Matched,
    /// The communicator it came on (MPI_Mrecv names none).
    pub comm: H,
    pub core: Arc<CommCore>,
}

#[inline(always)]
fn check_tag(tag: c_int, any_ok: bool) -> R<Option<u32>> {
    if (0..=abi::MAX_TAG).contains(&tag) {
        return Ok(Some(tag as u32));
    }
    if any_ok && tag == abi::ANY_TAG {
        return Ok(None);
    }
    Err(bad_tag(tag, any_ok))
}

#[cold]
#[inline(never)]
fn bad_tag(tag: c_int, any_ok: bool) -> Fail {
    fail(
        class::TAG,
        format!(
            "tag {tag} is invalid: tags are 0 to MPI_TAG_UB ({}){}",
            abi::MAX_TAG,
            if any_ok { ", or MPI_ANY_TAG" } else { "" }
        ),
    )
}

#[inline(always)]
fn check_count(count: c_int) -> R<usize> {
    usize::try_from(count).map_err(|_| bad_count(count))
}

#[cold]
#[inline(never)]
fn bad_count(count: c_int) -> Fail {
    fail(class::COUNT, format!("count {count} is negative"))
}

/// The source of a receive: None for any.
#[inline(always)]
fn source_of(c: &CommCore, source: c_int) -> R<Option<usize>> {
    if source == abi::ANY_SOURCE {
        return Ok(None);
    }
    c.peer_world_rank(source).map(Some)
}

/// A status for a message the core matched.
fn status_of(c: &CommCore, st: &volley::Status, bytes: usize) -> Status {
    Status::of(
        c.peer_rank(st.source),
        (st.tag & !(SYNC | APART_TAG)) as c_int,
        bytes as u64,
    )
}

/// Starts a send, by the eager fast path where it takes the message (a request completed at
/// once), else as `start_send` does.
#[allow(clippy::too_many_arguments)]
fn start_send_eager(
    rt: &mut Rt,
    mode: Mode,
    buf: *const c_void,
    count: c_int,
    dtype: H,
    dest: c_int,
    tag: c_int,
    comm: H,
) -> R<Req> {
    if matches!(mode, Mode::Standard | Mode::Ready) {
        if let Some(bytes) = eager_send(rt, buf, count, dtype, dest, tag, comm)? {
            return Ok(Req::finished(
                comm,
                Status::of(abi::ANY_SOURCE, abi::ANY_TAG, bytes),
            ));
        }
    }
    start_send(rt, mode, buf, count, dtype, dest, tag, comm, None, false)
}

/// Starts a send by the full path (MPI_Isend and its modes once the eager path declined; the
/// blocking sends wait on it).
#[allow(clippy::too_many_arguments)]
fn start_send(
    rt: &mut Rt,
    mode: Mode,
    buf: *const c_void,
    count: c_int,
    dtype: H,
    dest: c_int,
    tag: c_int,
    comm: H,
    held: Option<&(Arc<CommCore>, TypeRef)>,
    apart: bool,
) -> R<Req> {
    let (c, t) = match held {
        Some((c, t)) => (c.clone(), t.clone()),
        None => (rt.comm(comm)?, committed(rt, dtype)?),
    };
    let n = check_count(count)?;
    // A partitioned send's message is in the matching space of partitioned receives only.
    let tag = check_tag(tag, false)?.expect("not any") | if apart { APART_TAG } else { 0 };
    if dest == abi::PROC_NULL {
        return Ok(Req::finished(comm, Status::proc_null()));
    }
    let w = c.peer_world_rank(dest)?;
    let bytes = n * t.size;
    let mut stage = Vec::new();
    let mut bsend = 0;
    if mode == Mode::Buffered {
        stage = vec![0u8; bytes];
        // SAFETY: MPI: buf holds count elements of the datatype.
        unsafe { t.pack(buf as *const u8, n, &mut stage) };
    }
    if mode == Mode::Buffered {
        let (_, cap) = rt.bsend_buf.ok_or_else(|| {
            fail(
                class::BUFFER,
                "MPI_Bsend needs a buffer: attach one with MPI_Buffer_attach first",
            )
        })?;
        bsend = bytes + abi::BSEND_OVERHEAD;
        if rt.bsend_used + bsend > cap {
            reap_orphans(rt);
        }
        if rt.bsend_used + bsend > cap {
            return Err(fail(
                class::BUFFER,
                format!(
                    "the attached buffer ({cap} bytes) cannot hold this {bytes}-byte message beside the {} bytes buffered sends hold now (each takes MPI_BSEND_OVERHEAD = {} bytes more): attach a larger buffer",
                    rt.bsend_used,
                    abi::BSEND_OVERHEAD
                ),
            ));
        }
        rt.bsend_used += bsend;
    }
    let data = if stage.is_empty() && t.contig {
        buf as *const u8
    } else {
        stage.as_ptr()
    };
    let ctag = if mode == Mode::Sync { tag | SYNC } else { tag };
    let core = if stage.is_empty() && !t.contig {
        // Packed on the fly, piece by piece.
        c.ep.isend_packed(w, ctag, Pieces::new(buf, n, t.clone()))
    } else {
        // SAFETY: MPI's buffer rule: the program leaves buf untouched until the request
        // completes; a staged copy lives in the request, which outlives the core's request.
        let lent = unsafe { RawBuf::new(data, bytes) };
        c.ep.isend_lent(w, ctag, lent)
    }
    .map_err(|e| {
        rt.bsend_used -= bsend;
        from_send(&e)
    })?;
    let ack = if mode == Mode::Sync {
        // SAFETY: an empty buffer: nothing is written.
        let none = unsafe { RawBufMut::new(std::ptr::NonNull::<u8>::dangling().as_ptr(), 0) };
        Some(
            c.coll
                .irecv_lent(Some(w), Some(tag), none)
                .map_err(|e| from_recv(&e))?,
        )
    } else {
        None
    };
    let mut status = Status::empty();
    status.set_bytes(bytes as u64);
    let mut more = spare_more(rt);
    more.core_comm = Some(c);
    more.second = ack;
    more.stage = stage;
    more.bsend = bsend;
    Ok(Req {
        comm,
        core: Some(core),
        done: false,
        done_at: 0,
        active: true,
        status,
        more: Some(more),
    })
}

/// The `bytes` bytes of a contiguous buffer the program passed (empty for 0, whatever the
/// pointer).
///
/// # Safety
/// MPI's buffer rule: `buf` holds `bytes` bytes (count elements of a contiguous type), valid for
/// as long as the slice is used.
unsafe fn contig<'a>(buf: *const c_void, bytes: usize) -> &'a [u8] {
    if bytes == 0 {
        &[]
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts(buf as *const u8, bytes) }
    }
}

/// Like `contig`, writable (a receive's buffer).
///
/// # Safety
/// As for `contig`, and nothing else reads or writes the buffer meanwhile.
unsafe fn contig_mut<'a>(buf: *mut c_void, bytes: usize) -> &'a mut [u8] {
    if bytes == 0 {
        &mut []
    } else {
        // SAFETY: per the contract.
        unsafe { std::slice::from_raw_parts_mut(buf as *mut u8, bytes) }
    }
}

/// The fast path of MPI_Isend and MPI_Irsend: a contiguous message that goes whole at once
/// (through the ring, or into the network engine's window below the rendezvous threshold)
/// completes now, with no request of the core's and the communicator borrowed (no
/// reference count touched: on a server each locked instruction waits for the last message's
/// stores to reach the receiver); the bytes sent. None: take the full path, which checks the
/// arguments again.
#[allow(clippy::too_many_arguments)]
fn eager_send(
    rt: &Rt,
    buf: *const c_void,
    count: c_int,
    dtype: H,
    dest: c_int,
    tag: c_int,
    comm: H,
) -> R<Option<u64>> {
    if dest == abi::PROC_NULL {
        return Ok(None);
    }
    let Some(size) = contig_size(rt, dtype)? else {
        return Ok(None);
    };
    let (c, w, tag, data) = send_args(rt, buf, count, size, dest, tag, comm)?;
    let sent =
        c.ep.try_send_eager(w, tag, data)
            .map_err(|e| from_send(&e))?;
    Ok(sent.then_some(data.len() as u64))
}

/// The send fast paths' arguments, checked, for `count` elements of a contiguous type of
/// `size` bytes: the communicator (borrowed from the table: no reference count touched), the
/// destination's job rank, the tag and the bytes to send.
#[inline(always)]
fn send_args(
    rt: &Rt,
    buf: *const c_void,
    count: c_int,
    size: usize,
    dest: c_int,
    tag: c_int,
    comm: H,
) -> R<(&CommCore, usize, u32, &[u8])> {
    let c = &rt.comm_slot(comm)?.core;
    let n = check_count(count)?;
    let tag = check_tag(tag, false)?.expect("not any");
    let w = c.peer_world_rank(dest)?;
    // SAFETY: MPI: buf holds count elements of a contiguous type, n * size bytes, unchanged
    // for the length of the call.
    let data = unsafe { contig(buf, n * size) };
    Ok((c, w, tag, data))
}

/// The fast path of MPI_Irecv: a message that has already arrived whole and fits completes the
/// receive now, with no request of the core's (the message rate of a window of receives rests on
/// it); its status's source, tag and length (as fields: see `store_finished`). None: take the
/// full path.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn eager_recv(
    rt: &Rt,
    buf: *mut c_void,
    count: c_int,
    dtype: H,
    source: c_int,
    tag: c_int,
    comm: H,
) -> R<Option<(c_int, c_int, u64)>> {
    let t = committed(rt, dtype)?;
    if !t.contig || source == abi::PROC_NULL {
        return Ok(None);
    }
    let c = &rt.comm_slot(comm)?.core;
    let n = check_count(count)?;
    let tag = check_tag(tag, true)?;
    let src = source_of(c, source)?;
    let bytes = n * t.size;
    // SAFETY: MPI: buf holds count elements of a contiguous type, bytes bytes.
    let out = unsafe { contig_mut(buf, bytes) };
    Ok(c.ep
        .try_recv_now(src, tag, out)
        .map_err(|e| from_recv(&e))?
        .map(|st| {
            (
                c.peer_rank(st.source),
                (st.tag & !(SYNC | APART_TAG)) as c_int,
                st.len as u64,
            )
        }))
}

/// Starts a receive, by the eager fast path where the message is here already (a request
/// completed at once), else as `start_recv` does.
#[allow(clippy::too_many_arguments)]
fn start_recv_eager(
    rt: &mut Rt,
    buf: *mut c_void,
    count: c_int,
    dtype: H,
    source: c_int,
    tag: c_int,
    comm: H,
) -> R<Req> {
    if let Some((from, got, bytes)) = eager_recv(rt, buf, count, dtype, source, tag, comm)? {
        return Ok(Req::finished(comm, Status::of(from, got, bytes)));
    }
    start_recv(rt, buf, count, dtype, source, tag, comm, None, false)
}

/// Posts a receive by the full path (MPI_Irecv once the eager path declined; MPI_Recv of a
/// non-contiguous type waits on it).
#[allow(clippy::too_many_arguments)]
fn start_recv(
    rt: &mut Rt,
    buf: *mut c_void,
    count: c_int,
    dtype: H,
    source: c_int,
    tag: c_int,
    comm: H,
    held: Option<&(Arc<CommCore>, TypeRef)>,
    apart: bool,
) -> R<Req> {
    let (c, t) = match held {
        Some((c, t)) => (c.clone(), t.clone()),
        None => (rt.comm(comm)?, committed(rt, dtype)?),
    };
    let n = check_count(count)?;
    let tag = check_tag(tag, true)?.map(|t| t | if apart { APART_TAG } else { 0 });
    if source == abi::PROC_NULL {
        return Ok(Req::finished(comm, Status::proc_null()));
    }
    let src = source_of(&c, source)?;
    let bytes = n * t.size;
    let core = if t.contig {
        // SAFETY: MPI's buffer rule (the program leaves buf alone until the request completes).
        let lent = unsafe { RawBufMut::new(buf as *mut u8, bytes) };
        c.ep.irecv_lent(src, tag, lent)
    } else {
        // Unpacked on the fly, piece by piece.
        c.ep.irecv_unpacked(src, tag, Pieces::new(buf, n, t.clone()))
    }
    .map_err(|e| from_recv(&e))?;
    let mut more = spare_more(rt);
    more.core_comm = Some(c);
    more.target = Some(Target {
        buf: Ptr(buf as *mut u8),
        count: n,
        dtype: t,
    });
    Ok(Req {
        comm,
        core: Some(core),
        done: false,
        done_at: 0,
        active: true,
        status: Status::empty(),
        more: Some(more),
    })
}

/// Takes a message the core refused for being too long for the buffer: received whole, what
/// fits copied, MPI_ERR_TRUNCATE reported.
fn truncated(c: &CommCore, env: &volley::Status, target: &Target) -> (Status, Fail) {
    let mut tmp = vec![0u8; env.len];
    let got =
        c.ep.recv_matching(Some(env.source), Some(env.tag & !SYNC), &mut tmp);
    let cap = target.count * target.dtype.size;
    let mut st = status_of(c, env, cap.min(env.len));
    let msg = format!(
        "message truncated: {} bytes arrived from rank {} with tag {}, the receive buffer holds {} ({} x {}); the first {} bytes were stored",
        env.len, st.source, st.tag, cap, target.count, target.dtype.size, cap
    );
    if let Err(e) = got {
        return (st, from_recv(&e));
    }
    if target.dtype.contig {
        // SAFETY: MPI: the receive buffer holds count elements, cap bytes.
        unsafe { std::ptr::copy_nonoverlapping(tmp.as_ptr(), target.buf.0, cap) };
    } else {
        // SAFETY: MPI: the receive buffer holds count elements of the type.
        unsafe { target.dtype.unpack(&tmp[..cap], target.buf.0, target.count) };
    }
    st.error = class::TRUNCATE;
    (st, fail(class::TRUNCATE, msg))
}

/// Records the result of one of `req`'s core requests.
fn settle(req: &mut Req, id: RequestId, r: Result<volley::Status, RequestError>) {
    let Some(more) = req.more.as_deref_mut() else {
        // Only requests with a core part are settled, and those all have the rest.
        req.core = None;
        req.done = true;
        return;
    };
    if more.second == Some(id) {
        more.second = None;
        if let Err(e) = r {
            more.err.get_or_insert(from_request(&e));
        }
    } else {
        req.core = None;
        // Borrowed, not cloned: no reference count touched per completion.
        let c = more
            .core_comm
            .as_deref()
            .expect("a request with a core part has a communicator");
        match (r, more.target.as_ref()) {
            (Ok(st), Some(_)) => {
                // A non-contiguous type was unpacked as the data came (`Pieces`).
                req.status = status_of(c, &st, st.len);
            }
            (Ok(_), None) => {}
            (
                Err(RequestError::Recv(
                    e @ RecvError::Truncated {
                        envelope, buffer, ..
                    },
                )),
                _,
            ) => {
                // The core took the message when this receive matched it and stored what fits.
                req.status = status_of(c, &envelope, buffer);
                more.err = Some(from_recv(&e));
            }
            (Err(RequestError::Cancelled), _) => {
                req.status = Status::empty();
                req.status.internal[2] = 1;
            }
            (Err(e), _) => {
                more.err = Some(from_request(&e));
            }
        }
        if let (Some(p), true) = (&more.part, req.status.source >= 0) {
            // A partitioned message's tag carries its init's number: the program's is kept.
            req.status.tag = p.tag;
        }
    }
    if req.core.is_none() && more.second.is_none() {
        req.done = true;
        if let Some(e) = &more.err {
            req.status.error = e.class;
        }
    }
}

/// Makes progress on orphaned requests (freed by the program, or buffered sends) and forgets the
/// completed ones.
pub fn reap_orphans(rt: &mut Rt) {
    if rt.orphans.is_empty() {
        return;
    }
    let mut orphans = std::mem::take(&mut rt.orphans);
    advance(rt, &mut orphans.iter().copied(), false);
    orphans.retain(|&(i, g)| match rt.reqs.get_mut(i, g).map(|r| r.done) {
        Some(false) => true,
        _ => {
            if let Some(r) = rt.reqs.remove(i, g) {
                rt.bsend_used -= r.bsend();
                // A freed generalized request's free function runs once it completes; nobody
                // is left to hear its error.
                if let Some(q) = r.greq() {
                    let _ = q.free();
                }
                recycle(rt, r);
            }
            false
        }
    });
    rt.orphans = orphans;
}

/// The vectors of `advance`, kept in the state so that a wait allocates nothing once warm.
#[derive(Default)]
pub struct Scratch {
    slots: Vec<(usize, u32)>,
    ids: Vec<Option<RequestId>>,
    owners: Vec<(usize, u32, RequestId)>,
    results: Vec<(usize, Result<volley::Status, RequestError>)>,
    /// Passes a wait has made over non-blocking collectives in flight (see `advance`).
    nbc_passes: u32,
    /// The non-blocking collectives in flight, copied out of `Rt::nbcs` for one pass.
    nbcs: Vec<(usize, u32)>,
    /// What `collect_all` collected: (index, status, failed).
    collected: Vec<(usize, Status, bool)>,
    /// Requests the last `advance` saw complete.
    completed: usize,
}

/// One pass over the core requests of the face's requests at `slots` (index, generation):
/// waits until at least one completes (`block`, as the world's wait mode says) or only tests,
/// and settles those that did. False when none of them was pending.
fn advance(rt: &mut Rt, slots: &mut dyn Iterator<Item = (usize, u32)>, block: bool) -> bool {
    // A pass inside a pass (none expected) gets a scratch of its own.
    let mut sc = rt.scratch.take().unwrap_or_default();
    sc.ids.clear();
    sc.owners.clear();
    sc.slots.clear();
    sc.slots.extend(slots);
    // Non-blocking collectives first: each poll moves them on as far as their messages allow.
    // (A request with a collective in flight is in `rt.nbcs`, from its launch to its end: with
    // none there, no request of the list has one to poll.)
    let mut nbc_pending = false;
    if !rt.nbcs.is_empty() {
        for &(i, g) in &sc.slots {
            nbc_pending |= poll_nbc(rt, i, g);
        }
    }
    // The others in flight move on too, whatever this waits for (MPI's progress rule): what
    // it waits for may need them, e.g. a message another rank sends only once a collective
    // has finished there, which needs this rank's later steps; or a communicator creation
    // that waits for the contexts an earlier one holds.
    let mut moving = nbc_pending;
    if !rt.nbcs.is_empty() {
        prune_nbcs(rt);
        sc.nbcs.clear();
        sc.nbcs.extend_from_slice(&rt.nbcs);
        for &(i, g) in &sc.nbcs {
            if !sc.slots.contains(&(i, g)) {
                moving |= poll_nbc(rt, i, g);
            }
        }
    }
    for &(i, g) in &sc.slots {
        let Some(r) = rt.reqs.get_mut(i, g) else {
            continue;
        };
        if !r.active || r.done {
            continue;
        }
        // A generalized request completes when the program says so: nothing to wait on here.
        nbc_pending |= r.greq().is_some();
        for id in [r.core, r.second()].into_iter().flatten() {
            sc.ids.push(Some(id));
            sc.owners.push((i, g, id));
        }
    }
    let pending = !sc.ids.is_empty() || nbc_pending;
    if moving && block {
        // The collectives' own requests are inside their futures: test and come back. The
        // CPU is given away as a spinning wait of the world's gives it (every 1024 passes, or
        // more often where the host runs more ranks than it has CPUs): a yield at every pass
        // made each poll a system call, and on a busy machine a context switch.
        let _ = rt.world.progress();
        sc.nbc_passes = sc.nbc_passes.wrapping_add(1);
        if sc
            .nbc_passes
            .is_multiple_of(rt.world.config().yield_every.max(1))
        {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
    if !sc.ids.is_empty() {
        let results = &mut sc.results;
        if block && !moving {
            rt.world.wait_some(&mut sc.ids, |k, r| results.push((k, r)));
        } else {
            rt.world.test_some(&mut sc.ids, |k, r| results.push((k, r)));
        }
        sc.completed = 0;
        for (k, r) in sc.results.drain(..) {
            let (i, g, id) = sc.owners[k];
            if let Some(req) = rt.reqs.get_mut(i, g) {
                let was = req.done;
                settle(req, id, r);
                if req.done && !was {
                    req.done_at = stamp(&mut rt.done_clock);
                    sc.completed += 1;
                }
            }
        }
    } else {
        sc.completed = 0;
    }
    rt.scratch = Some(sc);
    pending
}

/// Polls the non-blocking collective of request (i, g) once, if it is one still in flight;
/// whether it is (still pending after the poll).
fn poll_nbc(rt: &mut Rt, i: usize, g: u32) -> bool {
    let Some(r) = rt.reqs.get_mut(i, g) else {
        return false;
    };
    if !r.active || r.done {
        return false;
    }
    let Some(mut f) = r.more.as_mut().and_then(|m| m.nbc.take()) else {
        return false;
    };
    // A reduction's user-defined operation may call MPI (not to communicate): the state this
    // wait holds is lent to it.
    match crate::state::lend_to_callbacks(rt, || crate::nbc::poll_once(&mut f)) {
        std::task::Poll::Pending => {
            let spare = &mut rt.spare_more;
            if let Some(r) = rt.reqs.get_mut(i, g) {
                // The request's rest from the pool, as every other request's (not a new box).
                r.more
                    .get_or_insert_with(|| spare.pop().unwrap_or_default())
                    .nbc = Some(f);
                // Listed still: a call of the program's operation inside the poll may have
                // pruned the list while the collective was out of its request, and `advance`
                // polls only what the list holds.
                if !rt.nbcs.contains(&(i, g)) {
                    rt.nbcs.push((i, g));
                }
            }
            true
        }
        std::task::Poll::Ready(res) => {
            finish_nbc(rt, i, g, res);
            false
        }
    }
}

/// Records the end of non-blocking collective (i, g): its error, or what it finishes.
fn finish_nbc(rt: &mut Rt, i: usize, g: u32, res: R<Option<crate::nbc::Finish>>) {
    rt.nbcs.retain(|&x| x != (i, g));
    let err = match res {
        Ok(None) => None,
        Ok(Some(finish)) => finish(rt).err(),
        Err(e) => Some(e),
    };
    if let Some(r) = rt.reqs.get_mut(i, g) {
        r.done = true;
        r.done_at = stamp(&mut rt.done_clock);
        r.status = Status::empty();
        if let Some(e) = &err {
            r.status.error = e.class;
        }
        if err.is_some() || r.more.is_some() {
            r.m().err = err;
        }
    }
}

/// Drops from `Rt::nbcs` the collectives whose requests are gone or no longer in flight.
fn prune_nbcs(rt: &mut Rt) {
    let reqs = &mut rt.reqs;
    rt.nbcs
        .retain(|&(i, g)| reqs.get_mut(i, g).is_some_and(|r| r.has_nbc()));
}

/// The core's idle hook (`volley::set_idle_hook`), set while non-blocking collectives are in
/// flight: every wait in the core (a blocking receive, probe, send, or a blocking collective's
/// step or shared-memory wait) moves them on between its passes, as MPI's progress rule asks:
/// a rank that started MPI_Iscan and then waits in MPI_Allreduce on another communicator for a
/// rank that enters it only once its scan is done would otherwise wait for ever. Does nothing
/// when the state is held (a wait inside the face's own calls, which move them themselves);
/// clears itself once none is left.
fn idle_hook() {
    let Some(mut rt) = crate::state::rt_if_free() else {
        return;
    };
    prune_nbcs(&mut rt);
    if rt.nbcs.is_empty() {
        volley::set_idle_hook(None);
        return;
    }
    advance(&mut rt, &mut std::iter::empty(), false);
}

/// Moves every non-blocking collective in flight on (a blocking call that waits for one of them
/// to let go of something, e.g. the contexts a communicator creation holds).
pub fn progress_nbcs() {
    let Ok(mut rt) = rt() else { return };
    prune_nbcs(&mut rt);
    if rt.nbcs.is_empty() {
        let _ = rt.world.progress();
    } else {
        // One pass: advance polls every collective in flight whatever it is given.
        advance(&mut rt, &mut std::iter::empty(), false);
    }
}

/// Starts a non-blocking collective (or MPI_Comm_idup) as a request: it goes as far as it can
/// now, then every test and wait moves it on.
pub fn start_nbc(f: crate::nbc::Nbc, comm: H, request: *mut H) -> R {
    if request.is_null() {
        return Err(fail(
            class::REQUEST,
            "the request argument is a null pointer",
        ));
    }
    let mut rt = rt()?;
    let mut req = Req::finished(comm, Status::empty());
    req.done = false;
    let h = store(&mut rt, req)?;
    let (i, g) = req_at(h).expect("a stored request");
    launch_nbc(&mut rt, i, g, f);
    drop(rt);
    // SAFETY: the caller's output argument (checked not null above).
    unsafe { put(request, h) }
}

/// Moves the collective of request (i, g), just started, as far as it goes now; a pending one
/// is parked in the request for every test and wait to move on.
fn launch_nbc(rt: &mut Rt, i: usize, g: u32, f: crate::nbc::Nbc) {
    let mut f = crate::nbc::checked(f);
    match crate::state::lend_to_callbacks(rt, || crate::nbc::poll_once(&mut f)) {
        std::task::Poll::Pending => {
            let spare = &mut rt.spare_more;
            if let Some(r) = rt.reqs.get_mut(i, g) {
                // The request's rest from the pool, as every other request's (not a new box).
                r.more
                    .get_or_insert_with(|| spare.pop().unwrap_or_default())
                    .nbc = Some(f);
                rt.nbcs.push((i, g));
                volley::set_idle_hook(Some(idle_hook));
            }
        }
        std::task::Poll::Ready(res) => finish_nbc(rt, i, g, res),
    }
}

/// MPI_Bcast_init and the other persistent collectives: an inactive request that each
/// MPI_Start runs `op` for.
pub fn persistent_coll(op: CollStart, comm: H, request: *mut H) -> R {
    let mut rt = rt()?;
    store_inactive(&mut rt, comm, |m| m.pcoll = Some(op), request)
}

/// Stores a persistent request not yet started (`set` says what it starts) at `request`.
fn store_inactive(rt: &mut Rt, comm: H, set: impl FnOnce(&mut More), request: *mut H) -> R {
    let mut r = Req::finished(comm, Status::empty());
    r.done = false;
    r.active = false;
    set(r.m());
    let h = store(rt, r)?;
    // SAFETY: the caller's output argument.
    unsafe { put(request, h) }
}

/// MPI_Start of request `h`: a point-to-point one starts its operation; a collective one
/// (which must not hold the face's state while it starts, as its operation takes it) a new
/// non-blocking collective in its slot.
fn start_any(h: H) -> R {
    let op = {
        let mut rt = rt()?;
        let (i, g) =
            req_at(h).ok_or_else(|| fail(class::REQUEST, "MPI_Start on MPI_REQUEST_NULL"))?;
        let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(h))?;
        match r.pcoll().cloned() {
            None => return start(&mut rt, h),
            Some(_) if r.active => {
                return Err(fail(class::REQUEST, "MPI_Start on a persistent collective request that is still active: complete it with a wait or test first"));
            }
            Some(op) => op,
        }
    };
    let f = crate::nbc::starting_persistent(op.seq, || (op.op)())?;
    let mut rt = rt()?;
    let (i, g) = req_at(h).expect("looked up");
    let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(h))?;
    r.active = true;
    r.done = false;
    r.status = Status::empty();
    r.m().err = None;
    launch_nbc(&mut rt, i, g, f);
    Ok(())
}

/// A request handle's slot.
fn req_at(h: H) -> Option<(usize, u32)> {
    if h == abi::REQUEST_NULL {
        return None;
    }
    gen_index(KIND_REQ, h)
}

fn req_handle(i: usize, g: u32) -> H {
    gen_handle(KIND_REQ, i, g)
}

fn bad_req(h: H) -> Fail {
    fail(
        class::REQUEST,
        format!(
            "{h:#x} is not an active request handle (already completed and freed, or never made)"
        ),
    )
}

/// Stores a request that completed as it started; its handle. The request is written where it
/// lives, not built aside and copied there: right after a message went into a ring, a copy's
/// wide loads of the narrow stores that built it cannot be forwarded from the store buffer and
/// wait for every earlier store to reach the cache, the ring's among them, which the receiver's
/// core holds (perf put a third of MPI_Isend's time there).
/// The status goes as its fields, in registers, for the same reason.
fn store_finished(rt: &mut Rt, comm: H, (source, tag, bytes): (c_int, c_int, u64)) -> R<H> {
    let at = stamp(&mut rt.done_clock);
    let (i, g) = rt.reqs.insert_with(|| Req {
        done_at: at,
        ..Req::finished(comm, Status::of(source, tag, bytes))
    });
    check_stored(rt, i, g)
}

/// A request already complete (an operation done at its call, MPI_Rput and the like), stored
/// at `request`.
pub(crate) fn completed_request(comm: H, request: *mut H) -> R {
    completed_request_with(comm, Status::empty(), request)
}

/// A request already complete with status `st` (a file access done at its call), stored at
/// `request`.
pub(crate) fn completed_request_with(comm: H, st: Status, request: *mut H) -> R {
    if request.is_null() {
        return Err(fail(
            class::REQUEST,
            "the request argument is a null pointer",
        ));
    }
    let mut rt = rt()?;
    let h = store(&mut rt, Req::finished(comm, st))?;
    drop(rt);
    // SAFETY: the caller's output argument (checked not null above).
    unsafe { put(request, h) }
}

/// Stores a request; its handle.
fn store(rt: &mut Rt, mut r: Req) -> R<H> {
    if r.done {
        r.done_at = stamp(&mut rt.done_clock);
    }
    let (i, g) = rt.reqs.insert(r);
    check_stored(rt, i, g)
}

/// The handle of the request stored at (i, g), unless too many are alive.
#[inline(always)]
fn check_stored(rt: &mut Rt, i: usize, g: u32) -> R<H> {
    if i >= MAX_OBJECTS {
        return Err(too_many_requests(rt, i, g));
    }
    Ok(req_handle(i, g))
}

#[cold]
#[inline(never)]
fn too_many_requests(rt: &mut Rt, i: usize, g: u32) -> Fail {
    rt.reqs.remove(i, g);
    fail(
        class::NO_MEM,
        format!("more than {MAX_OBJECTS} requests are active or not yet completed by a wait or test: complete some first"),
    )
}

/// What a wait or test waits for: every active request of its list, or one.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Enough {
    All,
    One,
}

impl Enough {
    fn holds(self, done: usize, active: usize) -> bool {
        match self {
            Enough::All => done >= active,
            Enough::One => done >= 1,
        }
    }
}

/// The fewest open requests a blocking wait for all of them hands the core at a time.
const ALL_WINDOW: usize = 32;

/// Drives the requests named by `hs` (null and inactive ones skipped) until `enough` holds,
/// waiting between passes as the world's wait mode says when `block`, else making one pass.
///
/// A blocking wait for all of them looks at the open ones a window at a time, from the first:
/// the engine moves every message on whatever request a wait names (what the others need keeps
/// moving), so the others need no look before the first ones have completed. Looking at all of
/// them in every pass made MPI_Waitall of n requests that complete one at a time (sends waiting
/// for their receiver one by one) cost n passes over n requests: 40,000 small sends to a
/// receiver taking them as requests to send took 28 s. The window starts as the whole list,
/// halves (to 32) while an eighth of it or less completes in a pass, and doubles again while
/// half or more does: requests that complete in bursts (2,000 receives whose messages come in
/// order) are still collected many a pass, as a pass of the core over all posted receives is
/// not cheap (a fixed window of 32 made that wait 4.5x slower). For the same reason the entries
/// that are settled (null, inactive or completed: they stay so during the call) at the front of
/// the list are counted once, not again in every pass.
fn drive(rt: &mut Rt, hs: &[H], block: bool, enough: Enough) -> R {
    let windowed = block && enough == Enough::All;
    // hs[..settled] are settled; `base` counts them as the loop below does (done, active,
    // unready).
    let mut settled = 0;
    let mut base = (0, 0, 0);
    // Once a blocking wait for all has counted the whole list, a pass only needs the open
    // requests from the front: whether there are none, one (which one) or more. Requests only
    // complete during the call (none starts, none is collected, no partition is marked ready),
    // so the first count's `active` and `unready` hold throughout.
    let mut counted: Option<(usize, usize)> = None;
    let mut window = hs.len().max(ALL_WINDOW);
    loop {
        reap_orphans(rt);
        let (mut done, mut active, mut unready) = base;
        let mut open = None;
        let mut front = true;
        if let (true, Some((all_active, all_unready))) = (windowed, counted) {
            let mut opens = 0;
            for (k, &h) in hs.iter().enumerate().skip(settled) {
                let Some((i, g)) = req_at(h) else {
                    if front {
                        settled = k + 1;
                    }
                    continue;
                };
                let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(h))?;
                if r.active && !r.done {
                    front = false;
                    opens += 1;
                    open = Some((i, g));
                    if opens == 2 {
                        break;
                    }
                } else if front {
                    settled = k + 1;
                }
            }
            // As the full count would give them: done + 1 == active exactly when one is open.
            active = all_active;
            unready = all_unready;
            done = active - opens.min(active);
        } else {
            for (k, &h) in hs.iter().enumerate().skip(settled) {
                let Some((i, g)) = req_at(h) else {
                    if front {
                        settled = k + 1;
                    }
                    continue;
                };
                let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(h))?;
                if r.active {
                    active += 1;
                    done += r.done as usize;
                    if !r.done {
                        open = Some((i, g));
                    }
                    unready += r
                        .more
                        .as_ref()
                        .and_then(|m| m.part.as_ref())
                        .is_some_and(|p| p.armed) as usize;
                }
                if front && (!r.active || r.done) {
                    settled = k + 1;
                    base = (done, active, unready);
                } else {
                    front = false;
                }
            }
            counted = Some((active, unready));
        }
        if enough.holds(done, active) {
            return Ok(());
        }
        if block && unready > 0 && !enough.holds(active - unready, active) {
            // Only MPI_Pready moves such a send, and the program is waiting instead.
            return Err(fail(class::REQUEST, "a wait on a partitioned send whose partitions are not all marked ready (MPI_Pready): it cannot complete"));
        }
        if let Some(d) = rt.deferred.as_ref().map(|d| d.slot) {
            // A held-back receive (only MPI_Wait and MPI_Waitall come here with one): received
            // by MPI_Recv's loop when it is all this wait waits for, else posted now.
            if block && done + 1 == active && open == Some(d) {
                wait_deferred(rt);
                continue;
            }
            post_deferred(rt);
        }
        if let (true, true, Some((i, g))) = (block, done + 1 == active, open) {
            if wait_lone_recv(rt, i, g) {
                continue;
            }
        }
        let mut rest = hs[settled..].iter().filter_map(|&h| req_at(h));
        let pending = if windowed {
            let pending = advance(rt, &mut rest.take(window), block);
            let completed = rt.scratch.as_ref().map_or(0, |s| s.completed);
            if completed * 2 >= window {
                window = (window * 2).min(hs.len().max(ALL_WINDOW));
            } else if completed * 8 <= window {
                window = (window / 2).max(ALL_WINDOW);
            }
            pending
        } else {
            advance(rt, &mut rest, block)
        };
        if !block || !pending {
            return Ok(());
        }
    }
}

/// MPI_Test's, MPI_Testany's, MPI_Testsome's, MPI_Testall's and MPI_Request_get_status's look
/// at plain point-to-point requests that have not completed, the inner loop of programs that
/// poll receives between steps of their work (HPCC's RandomAccess tests its receives once per
/// table update): one progress pass of the core, or none where nothing can have changed
/// (`World::still_pending`), and a look at each request, without `drive`'s and `advance`'s
/// lists. true: every active request of `hs` (at least one) is still pending, nothing more to
/// do; false: the general path decides (one completed, or is of a kind this does not look at:
/// a synchronous send's second part, a collective, a generalized or partitioned request; or a
/// rank with non-blocking collectives, freed requests or a held-back receive to move on, which
/// only `drive` does).
fn all_pending(rt: &mut Rt, hs: &[H]) -> bool {
    if !rt.nbcs.is_empty() || !rt.orphans.is_empty() || rt.deferred.is_some() {
        return false;
    }
    let mut passed = false;
    for &h in hs {
        let Some((i, g)) = req_at(h) else {
            continue;
        };
        let Some(r) = rt.reqs.get_mut(i, g) else {
            return false;
        };
        if !r.active {
            continue;
        }
        let (false, Some(id)) = (r.done, r.core) else {
            return false;
        };
        if r.more.as_deref().is_some_and(|m| !m.is_plain()) {
            return false;
        }
        // One pass for all: the first request's.
        let pending = if passed {
            rt.world.is_pending(id)
        } else {
            rt.world.still_pending(id)
        };
        passed = true;
        if !pending {
            return false;
        }
    }
    passed
}

/// MPI_Irecv's paths that need no post in the core, its arguments checked once: the receive
/// held back from the core (`Rt::deferred`), or completed at once if its message is here.
///
/// Held back when nothing can tell it from one posted now: a contiguous buffer, no receive
/// posted before it (so it would come first in matching whenever it is posted), no
/// non-blocking collective in flight and no progress thread (which would move it on while the
/// program computes). Every later MPI call posts it first (`rt`), before it could match, probe,
/// wait or block, except a send that completes at once; a wait for it alone receives it by
/// MPI_Recv's loop (`wait_deferred`). An Irecv + Send + Wait step then costs no post in the
/// core, no pass over the rings at the post, and no taking it back.
///
/// Where one look at the source's ring shows nothing there (a receive posted before its
/// message, the common case), it is held back without a scan; otherwise a message already here
/// whole completes it at once (a request done as it starts), and only then is it held back.
/// Its handle, or None to post it.
#[allow(clippy::too_many_arguments)]
fn irecv_quick(
    rt: &mut Rt,
    buf: *mut c_void,
    count: c_int,
    dtype: H,
    source: c_int,
    tag: c_int,
    comm: H,
) -> R<Option<H>> {
    if source == abi::PROC_NULL {
        return Ok(None);
    }
    let t = committed(rt, dtype)?;
    if !t.contig {
        return Ok(None);
    }
    let c = &rt.comm_slot(comm)?.core;
    let n = check_count(count)?;
    let ctag = check_tag(tag, true)?;
    let src = source_of(c, source)?;
    let can_defer = rt.nbcs.is_empty()
        && rt.deferred.is_none()
        && !rt.world.config().progress_thread
        && rt.world.nothing_posted();
    if !can_defer || !c.ep.surely_nothing_from(src) {
        // SAFETY: MPI: buf holds count elements of a contiguous type.
        let out = unsafe { contig_mut(buf, n * t.size) };
        if let Some(st) =
            c.ep.try_recv_now(src, ctag, out)
                .map_err(|e| from_recv(&e))?
        {
            let fields = (
                c.peer_rank(st.source),
                (st.tag & !(SYNC | APART_TAG)) as c_int,
                st.len as u64,
            );
            return store_finished(rt, comm, fields).map(Some);
        }
        if !can_defer {
            return Ok(None);
        }
    }
    // Written where it lives (as `store_finished` does).
    let (i, g) = rt.reqs.insert_with(|| Req {
        comm,
        core: None,
        done: false,
        done_at: 0,
        active: true,
        status: Status::empty(),
        more: None,
    });
    let h = check_stored(rt, i, g)?;
    rt.deferred = req_at(h).map(|slot| Deferred {
        slot,
        src,
        tag: ctag,
        target: Target {
            buf: Ptr(buf as *mut u8),
            count: n,
            dtype: t,
        },
    });
    Ok(Some(h))
}

/// Posts the receive MPI_Irecv held back (`irecv_quick`) in the core, as MPI_Irecv would have.
#[cold]
pub(crate) fn post_deferred(rt: &mut Rt) {
    let Some(Deferred {
        slot: (i, g),
        src,
        tag,
        target,
    }) = rt.deferred.take()
    else {
        return;
    };
    let Some(comm) = rt.reqs.get(i, g).map(|r| r.comm) else {
        return;
    };
    // A message already here completes it as MPI_Irecv's fast path would have (MPI_Irecv
    // held back without looking): a receive posted after its message, then a second
    // MPI_Irecv or a test, costs no post in the core.
    if let Some(c) = rt
        .comm_slot(comm)
        .ok()
        .map(|slot| &slot.core)
        .filter(|c| !c.ep.surely_nothing_from(src))
    {
        // SAFETY: MPI's buffer rule: the receive buffer holds count elements of a contiguous
        // type until the request completes.
        let out = unsafe {
            contig_mut(
                target.buf.0 as *mut c_void,
                target.count * target.dtype.size,
            )
        };
        if let Ok(Some(st)) = c.ep.try_recv_now(src, tag, out) {
            let got = (status_of(c, &st, st.len), None);
            if let Some(r) = rt.reqs.get_mut(i, g) {
                finish_received(r, got, &mut rt.done_clock);
            }
            return;
        }
    }
    let posted = rt.comm(comm).and_then(|c| {
        // SAFETY: MPI's buffer rule (the program leaves buf alone until the request completes).
        let lent = unsafe { RawBufMut::new(target.buf.0, target.count * target.dtype.size) };
        let id = c.ep.irecv_lent(src, tag, lent).map_err(|e| from_recv(&e))?;
        Ok((c, id))
    });
    let mut more = spare_more(rt);
    more.target = Some(target);
    let Some(r) = rt.reqs.get_mut(i, g) else {
        return;
    };
    match posted {
        Ok((c, id)) => {
            more.core_comm = Some(c);
            r.core = Some(id);
        }
        Err(e) => {
            r.status.error = e.class;
            more.err = Some(e);
            r.done = true;
            r.done_at = stamp(&mut rt.done_clock);
        }
    }
    r.more = Some(more);
}

/// Receives the receive MPI_Irecv held back (`irecv_quick`) by MPI_Recv's loop: a wait for it
/// alone.
fn wait_deferred(rt: &mut Rt) {
    let Some(Deferred {
        slot: (i, g),
        src,
        tag,
        target,
    }) = rt.deferred.take()
    else {
        return;
    };
    let Some(comm) = rt.reqs.get(i, g).map(|r| r.comm) else {
        return;
    };
    let got = match rt.comm_slot(comm) {
        Ok(slot) => receive_into(&slot.core, src, tag, &target),
        Err(e) => (Status::empty(), Some(e)),
    };
    if let Some(r) = rt.reqs.get_mut(i, g) {
        finish_received(r, got, &mut rt.done_clock);
    }
}

/// MPI_Wait's path for the receive MPI_Irecv held back (`irecv_quick`): received by MPI_Recv's
/// loop and collected at once, without the general pass (`drive`, `collect`) whose bookkeeping
/// an Irecv + Send + Wait step does not need. Its status and error; None: `h` is another
/// request, or freed requests are to be moved on first (`reap_orphans`).
#[inline(always)]
fn wait_held(rt: &mut Rt, h: H) -> Option<(Status, Option<Fail>)> {
    let (i, g) = rt.deferred.as_ref()?.slot;
    if req_at(h) != Some((i, g)) || !rt.orphans.is_empty() {
        return None;
    }
    let comm = rt.reqs.get(i, g)?.comm;
    let d = rt.deferred.take()?;
    let (mut st, err) = match rt.comm_slot(comm) {
        Ok(slot) => receive_into(&slot.core, d.src, d.tag, &d.target),
        Err(e) => (Status::empty(), Some(e)),
    };
    if let Some(r) = rt.reqs.remove(i, g) {
        recycle(rt, r);
    }
    let err = err.map(|mut e| {
        st.error = e.class;
        e.comm = Some(comm);
        e
    });
    Some((st, err))
}

/// A wait's path for the one request it still waits for when that is a receive into a
/// contiguous buffer posted alone (MPI_Irecv then MPI_Wait, or MPI_Waitall of it and sends
/// already done, as in a halo exchange): the core takes it back unmatched
/// (`World::unpost_lone`) and the receive runs MPI_Recv's loop instead, which finds the same
/// message at less cost per pass (8-byte MPI_Irecv and MPI_Wait ping-pong on the development
/// VM, one-way: 0.49-0.74 us by the posted receive, 0.17-0.4 by MPI_Recv). Not while a
/// non-blocking collective is in flight (MPI_Recv's loop does not move it on). Whether it
/// completed the request.
fn wait_lone_recv(rt: &mut Rt, i: usize, g: u32) -> bool {
    if !rt.nbcs.is_empty() {
        return false;
    }
    let Some(r) = rt.reqs.get_mut(i, g) else {
        return false;
    };
    let Some(id) = r.core else { return false };
    let Some(m) = r.more.as_deref() else {
        return false;
    };
    if !m.is_plain() {
        return false;
    }
    let (Some(c), Some(t)) = (m.core_comm.as_deref(), m.target.as_ref()) else {
        return false;
    };
    if !t.dtype.contig {
        return false;
    }
    let Some((src, tag)) = rt.world.unpost_lone(id) else {
        return false;
    };
    let got = receive_into(c, src, tag, t);
    finish_received(r, got, &mut rt.done_clock);
    true
}

/// MPI_Recv's loop for a wait's receive into the contiguous `t` on communicator `c` (the
/// held-back one, or the lone posted one taken back): its status and error. A message too long
/// is taken and truncated, as a posted receive takes it.
fn receive_into(
    c: &CommCore,
    src: Option<usize>,
    tag: Option<u32>,
    t: &Target,
) -> (Status, Option<Fail>) {
    // SAFETY: MPI's buffer rule: the receive buffer holds count elements of a contiguous type
    // until the request completes, and no loan of it to the core is left.
    let out = unsafe { contig_mut(t.buf.0 as *mut c_void, t.count * t.dtype.size) };
    match c.ep.recv_matching(src, tag, out) {
        Ok(st) => (status_of(c, &st, st.len), None),
        Err(RecvError::BufferTooSmall {
            envelope: Some(env),
            ..
        }) => {
            let (st, e) = truncated(c, &env, t);
            (st, Some(e))
        }
        Err(e) => (Status::empty(), Some(from_recv(&e))),
    }
}

/// Completes request `r` with what `receive_into` got.
fn finish_received(r: &mut Req, (mut st, err): (Status, Option<Fail>), clock: &mut u64) {
    if let Some(e) = &err {
        st.error = e.class;
    }
    r.core = None;
    r.status = st;
    if err.is_some() || r.more.is_some() {
        r.m().err = err;
    }
    r.done = true;
    r.done_at = stamp(clock);
}

/// Collects a completed request: its status and error, and its handle made MPI_REQUEST_NULL
/// (a persistent request goes inactive instead).
#[inline(always)]
fn collect(rt: &mut Rt, h: &mut H) -> (Status, Option<Fail>) {
    let Some((i, g)) = req_at(*h) else {
        return (Status::empty(), None);
    };
    let Some(r) = rt.reqs.get_mut(i, g) else {
        return (Status::empty(), Some(bad_req(*h)));
    };
    if !r.active {
        return (Status::empty(), None);
    }
    let mut st = r.status;
    let comm = r.comm;
    let mut err = r.more.as_mut().and_then(|m| m.err.take());
    if let Some(q) = r.greq() {
        // A generalized request: its status from the query function, then it is freed.
        let (qs, qe) = q.query();
        let fe = q.free();
        st = qs;
        err = err.or(qe).or(fe);
        if let Some(e) = &err {
            st.error = e.class;
        }
    }
    let e = err.map(|mut e| {
        e.comm = Some(comm);
        e
    });
    if let Some(m) = r
        .more
        .as_deref_mut()
        .filter(|m| m.persistent.is_some() || m.pcoll.is_some())
    {
        rt.bsend_used -= m.bsend;
        m.bsend = 0;
        m.core_comm = None;
        m.target = None;
        m.stage = Vec::new();
        r.active = false;
        r.done = false;
        return (st, e);
    }
    if let Some(r) = rt.reqs.remove(i, g) {
        rt.bsend_used -= r.bsend();
        recycle(rt, r);
    }
    *h = abi::REQUEST_NULL;
    (st, e)
}

/// The next completion time on `clock` (`Rt::done_clock`, see `Req::done_at`).
fn stamp(clock: &mut u64) -> u64 {
    *clock += 1;
    *clock
}

fn is_done(rt: &mut Rt, h: H) -> R<Option<bool>> {
    Ok(done_when(rt, h)?.map(|at| at.is_some()))
}

/// For an active request `h`: Some(when it completed) if it has (see `Req::done_at`), else
/// None; None for a null or inactive one.
fn done_when(rt: &mut Rt, h: H) -> R<Option<Option<u64>>> {
    let Some((i, g)) = req_at(h) else {
        return Ok(None);
    };
    let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(h))?;
    Ok(r.active.then_some(r.done.then_some(r.done_at)))
}

/// Writes a status unless the program passed MPI_STATUS_IGNORE.
///
/// # Safety
/// `p` is null or points to a status.
///
/// A single-completion call leaves the status's MPI_ERROR field as the program left it (MPI-3.1
/// section 3.2.5: only calls that return MPI_ERR_IN_STATUS set it).
pub(crate) unsafe fn put_status(p: *mut Status, mut st: Status) {
    if !p.is_null() {
        // SAFETY: the caller's status.
        unsafe {
            st.error = p.read_unaligned().error;
            p.write_unaligned(st)
        };
    }
}

/// Collects every request of `hs` (all completed) into the statuses (MPI_Waitall, MPI_Testall).
///
/// # Safety
/// `statuses` is null or holds an entry per request.
unsafe fn collect_all(rt: &mut Rt, hs: &mut [H], statuses: *mut Status) -> R {
    if statuses.is_null() {
        // MPI_STATUSES_IGNORE: only whether one failed.
        let mut failed = false;
        for h in hs.iter_mut() {
            failed |= collect(rt, h).1.is_some();
        }
        return if failed { Err(in_status()) } else { Ok(()) };
    }
    // The scratch vector: a wait allocates nothing once warm.
    let sc = rt.scratch.get_or_insert_with(Default::default);
    let mut done = std::mem::take(&mut sc.collected);
    done.clear();
    for (k, h) in hs.iter_mut().enumerate() {
        let (st, e) = collect(rt, h);
        done.push((k, st, e.is_some()));
    }
    // SAFETY: per the contract.
    let r = unsafe { put_statuses(statuses, &done) };
    rt.scratch.get_or_insert_with(Default::default).collected = done;
    r
}

/// Writes the statuses of a multiple-completion call at `p[k]` for each (k, status, failed): the
/// MPI_ERROR fields only when some request failed (the call then returns MPI_ERR_IN_STATUS, and
/// the field says MPI_SUCCESS or the failure's class).
///
/// # Safety
/// `p` is null or holds an entry for every k.
unsafe fn put_statuses(p: *mut Status, done: &[(usize, Status, bool)]) -> R {
    let any_err = done.iter().any(|d| d.2);
    if !p.is_null() {
        for &(k, mut st, failed) in done {
            // SAFETY: per the contract.
            unsafe {
                if any_err {
                    if !failed {
                        st.error = 0;
                    }
                } else {
                    st.error = p.add(k).read_unaligned().error;
                }
                p.add(k).write_unaligned(st);
            }
        }
    }
    if any_err {
        return Err(in_status());
    }
    Ok(())
}

/// A multiple-completion call's failure: one or more of its requests failed.
#[cold]
fn in_status() -> Fail {
    fail(
        class::IN_STATUS,
        "one or more of the requests failed: see the MPI_ERROR field of their statuses",
    )
}

/// A blocking operation: start it, wait for it, collect it.
fn blocking(rt: &mut Rt, r: Req, status: *mut Status) -> R {
    let mut h = store(rt, r)?;
    drive(rt, &[h], true, Enough::All)?;
    let (st, e) = collect(rt, &mut h);
    // SAFETY: the caller's status argument.
    unsafe { put_status(status, st) };
    e.map_or(Ok(()), Err)
}

/// The size of one element of `dtype` where its elements lie in one block (the fast paths'
/// case): a predefined type's by one table look, another's from the state. None: not one
/// block (or not committed: the full path says so).
#[inline(always)]
fn contig_size(rt: &Rt, dtype: H) -> R<Option<usize>> {
    match crate::dtype::predefined_contig_size(dtype) {
        Some(s) => Ok(Some(s)),
        None => made_contig_size(rt, dtype),
    }
}

#[inline(never)]
fn made_contig_size(rt: &Rt, dtype: H) -> R<Option<usize>> {
    let t = committed(rt, dtype)?;
    Ok(t.contig.then_some(t.size))
}

/// MPI_Send and MPI_Rsend: straight through the core for a contiguous buffer.
fn send(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H) -> R {
    let mut rt = rt_keep()?;
    if rt.deferred.is_some() {
        // A send that goes at once keeps a held-back receive held back; one that may wait
        // (for room, or for its receiver) posts it first, so that the peer's messages match it
        // meanwhile.
        if eager_send(&rt, buf, count, datatype, dest, tag, comm)?.is_some() {
            return Ok(());
        }
        post_deferred(&mut rt);
    }
    send_in(&mut rt, buf, count, datatype, dest, tag, comm)
}

/// `send` with the state already borrowed.
fn send_in(
    rt: &mut Rt,
    buf: *const c_void,
    count: c_int,
    datatype: H,
    dest: c_int,
    tag: c_int,
    comm: H,
) -> R {
    // The fast path waits in the core, which moves no non-blocking collective on: while one is
    // in flight, the send waits as MPI_Wait does.
    if dest != abi::PROC_NULL && rt.nbcs.is_empty() {
        if let Some(size) = contig_size(rt, datatype)? {
            let (c, w, tag, data) = send_args(rt, buf, count, size, dest, tag, comm)?;
            return c.ep.send_tagged(w, tag, data).map_err(|e| from_send(&e));
        }
    }
    let r = start_send_eager(rt, Mode::Standard, buf, count, datatype, dest, tag, comm)?;
    blocking(rt, r, std::ptr::null_mut())
}

/// MPI_Recv: straight into the caller's buffer for a contiguous type.
fn recv(
    buf: *mut c_void,
    count: c_int,
    datatype: H,
    source: c_int,
    tag: c_int,
    comm: H,
    status: *mut Status,
) -> R {
    recv_in(&mut *rt()?, buf, count, datatype, source, tag, comm, status)
}

/// `recv` with the state already borrowed.
#[allow(clippy::too_many_arguments)]
fn recv_in(
    rt: &mut Rt,
    buf: *mut c_void,
    count: c_int,
    datatype: H,
    source: c_int,
    tag: c_int,
    comm: H,
    status: *mut Status,
) -> R {
    // As in `send`: while a non-blocking collective is in flight, the receive waits as MPI_Wait
    // does, moving it on.
    if source == abi::PROC_NULL || !rt.nbcs.is_empty() {
        let r = start_recv_eager(rt, buf, count, datatype, source, tag, comm)?;
        return blocking(rt, r, status);
    }
    if let Some(size) = contig_size(rt, datatype)? {
        // The state stays borrowed while the receive waits: nothing the program wrote runs
        // meanwhile (MPI programs bind no active ports), and the borrow costs no reference count.
        let c = &rt.comm_slot(comm)?.core;
        let n = check_count(count)?;
        let ctag = check_tag(tag, true)?;
        let src = source_of(c, source)?;
        let bytes = n * size;
        // SAFETY: MPI: buf holds count elements of a contiguous type, bytes bytes.
        let out = unsafe { contig_mut(buf, bytes) };
        return match c.ep.recv_matching(src, ctag, out) {
            Ok(st) => {
                // SAFETY: the caller's status argument.
                unsafe { put_status(status, status_of(c, &st, st.len)) };
                Ok(())
            }
            Err(RecvError::BufferTooSmall {
                envelope: Some(env),
                ..
            }) => {
                let target = Target {
                    buf: Ptr(buf as *mut u8),
                    count: n,
                    dtype: committed(rt, datatype)?,
                };
                let (st, e) = truncated(c, &env, &target);
                // SAFETY: the caller's status argument.
                unsafe { put_status(status, st) };
                Err(e)
            }
            Err(e) => Err(from_recv(&e)),
        };
    }
    let r = start_recv_eager(rt, buf, count, datatype, source, tag, comm)?;
    blocking(rt, r, status)
}

fn mode_send(
    mode: Mode,
    buf: *const c_void,
    count: c_int,
    datatype: H,
    dest: c_int,
    tag: c_int,
    comm: H,
) -> R {
    let mut rt = rt()?;
    let r = start_send(
        &mut rt, mode, buf, count, datatype, dest, tag, comm, None, false,
    )?;
    if mode == Mode::Buffered {
        // The data is copied: the send completes in the background.
        let h = store(&mut rt, r)?;
        let (i, g) = req_at(h).expect("stored");
        rt.orphans.push((i, g));
        return Ok(());
    }
    blocking(&mut rt, r, std::ptr::null_mut())
}

#[allow(clippy::too_many_arguments)]
fn isend_mode(
    mode: Mode,
    buf: *const c_void,
    count: c_int,
    datatype: H,
    dest: c_int,
    tag: c_int,
    comm: H,
    request: *mut H,
) -> R {
    // As MPI_Send: a send that completes at once keeps a held-back receive held back.
    let mut rt = rt_keep()?;
    if matches!(mode, Mode::Standard | Mode::Ready) {
        if let Some(bytes) = eager_send(&rt, buf, count, datatype, dest, tag, comm)? {
            let h = store_finished(&mut rt, comm, (abi::ANY_SOURCE, abi::ANY_TAG, bytes))?;
            // SAFETY: the caller's output argument.
            return unsafe { put(request, h) };
        }
    }
    if rt.deferred.is_some() {
        post_deferred(&mut rt);
    }
    let r = start_send(
        &mut rt, mode, buf, count, datatype, dest, tag, comm, None, false,
    )?;
    let h = if mode == Mode::Buffered {
        // Complete for the program at once; the data goes on from the buffered copy.
        let st = r.status;
        let hb = store(&mut rt, r)?;
        let (i, g) = req_at(hb).expect("stored");
        rt.orphans.push((i, g));
        store(&mut rt, Req::finished(comm, st))?
    } else {
        store(&mut rt, r)?
    };
    // SAFETY: the caller's output argument.
    unsafe { put(request, h) }
}

/// MPI_Psend_init (`send`) and MPI_Precv_init: a persistent request for `partitions` x `count`
/// elements, partitioned (see `Part`).
#[allow(clippy::too_many_arguments)]
fn partitioned(
    send: Option<Mode>,
    buf: *mut c_void,
    partitions: c_int,
    count: i64,
    dtype: H,
    peer: c_int,
    tag: c_int,
    comm: H,
    request: *mut H,
) -> R {
    if partitions < 1 {
        return Err(fail(
            class::ARG,
            format!("{partitions} partitions: a partitioned operation has at least one"),
        ));
    }
    if count < 0 {
        return Err(fail(class::COUNT, format!("count {count} is negative")));
    }
    let total = (partitions as i64)
        .checked_mul(count)
        .and_then(|t| c_int::try_from(t).ok())
        .ok_or_else(|| {
            fail(
                class::COUNT,
                format!("{partitions} partitions of {count} elements: volley's MPI counts a message's elements in an int (at most 2^31 - 1)"),
            )
        })?;
    if peer == abi::ANY_SOURCE || tag == abi::ANY_TAG {
        return Err(fail(
            if peer == abi::ANY_SOURCE { class::RANK } else { class::TAG },
            "a partitioned receive names its source and tag: MPI_ANY_SOURCE and MPI_ANY_TAG are not allowed (MPI-4.0 4.2.2)",
        ));
    }
    let mut rt = rt()?;
    let c = rt.comm(comm)?;
    let t = committed(&rt, dtype)?;
    check_tag(tag, false)?;
    if peer != abi::PROC_NULL {
        c.peer_world_rank(peer)?;
    }
    // Partitioned operations match in the order of their inits (MPI-4.0 4.2.1), whatever order
    // they start in: the k-th init towards one peer with one tag on one communicator matches
    // the k-th at the other end, its number carried in the message's tag.
    let k = {
        let n = rt
            .comm_slot_mut(comm)?
            .part_inits
            .entry((peer, tag, send.is_some()))
            .or_insert(0);
        *n += 1;
        *n - 1
    };
    let spec = Spec {
        send,
        buf: Ptr(buf as *mut u8),
        count: total,
        dtype,
        peer,
        tag: part_tag(tag, k),
        comm,
        held: Some((c, t)),
    };
    let part = Part {
        tag,
        partitions: partitions as usize,
        ready: vec![
            false;
            if send.is_some() {
                partitions as usize
            } else {
                0
            }
        ],
        nready: 0,
        armed: false,
    };
    store_inactive(
        &mut rt,
        comm,
        |m| {
            m.persistent = Some(spec);
            m.part = Some(part);
        },
        request,
    )
}

/// The tag of the `k`-th partitioned operation (counted from 0) with program tag `tag` between
/// two ranks on a communicator, in the partitioned matching space (`APART_TAG` is added at the
/// send and the receive): a tag below 2^20 with k modulo 512 in bits 20-28, so that up to 512
/// such operations alive at once match in their inits' order; a larger tag as it is less its
/// bit 29, with bit 29 set (those match in the order they start, and two tags 2^29 apart meet).
fn part_tag(tag: c_int, k: usize) -> c_int {
    if tag < 1 << 20 {
        ((k % 512) << 20) as c_int | tag
    } else {
        (1 << 29) | (tag & ((1 << 29) - 1))
    }
}

/// MPI_Pready and its range and list forms: marks `parts` of partitioned send `request` ready;
/// the message leaves when the last partition of the round is.
fn pready(request: H, parts: &[c_int]) -> R {
    let mut rt = rt()?;
    let (i, g) =
        req_at(request).ok_or_else(|| fail(class::REQUEST, "MPI_Pready on MPI_REQUEST_NULL"))?;
    let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(request))?;
    let spec = r.persistent().cloned();
    let p = match (r.more.as_mut().and_then(|m| m.part.as_mut()), &spec) {
        (Some(p), Some(s)) if s.send.is_some() => p,
        _ => return Err(fail(class::REQUEST, "MPI_Pready needs a partitioned send request (MPI_Psend_init); a receive learns of its partitions with MPI_Parrived")),
    };
    if !p.armed {
        return Err(fail(class::REQUEST, "MPI_Pready on a partitioned send that is not started (MPI_Start) or whose partitions are all ready already"));
    }
    for &k in parts {
        if !(0..p.partitions as c_int).contains(&k) {
            return Err(fail(
                class::ARG,
                format!(
                    "partition {k} of a send of {} (0 to {})",
                    p.partitions,
                    p.partitions - 1
                ),
            ));
        }
        if p.ready[k as usize] {
            return Err(fail(
                class::ARG,
                format!("partition {k} is marked ready twice in one round (MPI_Pready)"),
            ));
        }
    }
    for &k in parts {
        if !std::mem::replace(&mut p.ready[k as usize], true) {
            p.nready += 1;
        }
    }
    if p.nready < p.partitions {
        return Ok(());
    }
    let part = p.clone();
    begin(&mut rt, i, g, spec.expect("checked"), Some(part))
}

fn persistent(spec: Spec, request: *mut H) -> R {
    let mut rt = rt()?;
    // Check the arguments now, as MPI_Send_init's errors are the init call's.
    let c = rt.comm(spec.comm)?;
    let t = committed(&rt, spec.dtype)?;
    let mut spec = spec;
    spec.held = Some((c.clone(), t));
    check_count(spec.count)?;
    check_tag(spec.tag, spec.send.is_none())?;
    if spec.peer != abi::PROC_NULL && !(spec.send.is_none() && spec.peer == abi::ANY_SOURCE) {
        c.peer_world_rank(spec.peer)?;
    }
    store_inactive(&mut rt, spec.comm, |m| m.persistent = Some(spec), request)
}

fn start(rt: &mut Rt, h: H) -> R {
    let (i, g) = req_at(h).ok_or_else(|| fail(class::REQUEST, "MPI_Start on MPI_REQUEST_NULL"))?;
    let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(h))?;
    let spec = r.persistent().cloned().ok_or_else(|| fail(class::REQUEST, "MPI_Start needs a persistent request (made by MPI_Send_init, MPI_Recv_init and the like)"))?;
    if r.active {
        return Err(fail(class::REQUEST, "MPI_Start on a persistent request that is still active: complete it with a wait or test first"));
    }
    let part = r.more.as_ref().and_then(|m| m.part.clone());
    if let (Some(mut p), Some(_)) = (part.clone(), spec.send) {
        // A partitioned send's round begins; its message leaves once every partition is ready.
        p.ready.iter_mut().for_each(|x| *x = false);
        p.nready = 0;
        p.armed = true;
        r.active = true;
        r.done = false;
        r.status = Status::empty();
        r.m().part = Some(p);
        return Ok(());
    }
    begin(rt, i, g, spec, part)
}

/// Starts persistent request (i, g)'s operation now: `spec`'s send or receive, partitioned when
/// `part` says so.
fn begin(rt: &mut Rt, i: usize, g: u32, spec: Spec, part: Option<Part>) -> R {
    let apart = part.is_some();
    let mut new = match spec.send {
        Some(mode) => start_send(
            rt,
            mode,
            spec.buf.0 as *const c_void,
            spec.count,
            spec.dtype,
            spec.peer,
            spec.tag,
            spec.comm,
            spec.held.as_ref(),
            apart,
        )?,
        None => start_recv(
            rt,
            spec.buf.0 as *mut c_void,
            spec.count,
            spec.dtype,
            spec.peer,
            spec.tag,
            spec.comm,
            spec.held.as_ref(),
            apart,
        )?,
    };
    new.m().persistent = Some(spec);
    new.m().part = part.map(|mut p| {
        p.armed = false;
        p
    });
    let old = std::mem::replace(rt.reqs.get_mut(i, g).expect("looked up"), new);
    recycle(rt, old);
    Ok(())
}

crate::mpi! {
    fn MPI_Send / PMPI_Send(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H) [comm] {
        send(buf, count, datatype, dest, tag, comm)
    }

    fn MPI_Rsend / PMPI_Rsend(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H) [comm] {
        // A ready send may be a standard send (MPI-3.1 section 3.4).
        send(buf, count, datatype, dest, tag, comm)
    }

    fn MPI_Ssend / PMPI_Ssend(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H) [comm] {
        mode_send(Mode::Sync, buf, count, datatype, dest, tag, comm)
    }

    fn MPI_Bsend / PMPI_Bsend(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H) [comm] {
        mode_send(Mode::Buffered, buf, count, datatype, dest, tag, comm)
    }

    fn MPI_Buffer_attach / PMPI_Buffer_attach(buffer: *mut c_void, size: c_int) {
        let mut rt = rt()?;
        if rt.bsend_buf.is_some() {
            return Err(fail(class::BUFFER, "a buffer is already attached: detach it with MPI_Buffer_detach first"));
        }
        if size < 0 {
            return Err(fail(class::ARG, format!("buffer size {size} is negative")));
        }
        rt.bsend_buf = Some((buffer as usize, size as usize));
        Ok(())
    }

    fn MPI_Buffer_detach / PMPI_Buffer_detach(buffer_addr: *mut c_void, size: *mut c_int) {
        let mut rt = rt()?;
        // Waits until every buffered send is done (MPI-3.1 section 3.6.1).
        while rt.bsend_used > 0 {
            reap_orphans(&mut rt);
            if rt.bsend_used > 0 {
                let _ = rt.world.progress();
                std::thread::yield_now();
            }
        }
        let (addr, n) = rt.bsend_buf.take().unwrap_or((0, 0));
        // SAFETY: MPI: buffer_addr points to a pointer, size to an int.
        unsafe {
            put(buffer_addr as *mut usize, addr)?;
            put(size, n as c_int)
        }
    }

    fn MPI_Recv / PMPI_Recv(buf: *mut c_void, count: c_int, datatype: H, source: c_int, tag: c_int, comm: H, status: *mut Status) [comm] {
        recv(buf, count, datatype, source, tag, comm, status)
    }

    fn MPI_Sendrecv / PMPI_Sendrecv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, dest: c_int, sendtag: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, source: c_int, recvtag: c_int, comm: H, status: *mut Status) [comm] {
        sendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, status)
    }

    fn MPI_Sendrecv_replace / PMPI_Sendrecv_replace(buf: *mut c_void, count: c_int, datatype: H, dest: c_int, sendtag: c_int, source: c_int, recvtag: c_int, comm: H, status: *mut Status) [comm] {
        let (packed, len) = packed_to_replace(buf, count, datatype, "MPI_Sendrecv_replace")?;
        sendrecv(packed.as_ptr() as *const c_void, len, BYTE, dest, sendtag, buf, count, datatype, source, recvtag, comm, status)
    }

    fn MPI_Isendrecv / PMPI_Isendrecv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, dest: c_int, sendtag: c_int, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, source: c_int, recvtag: c_int, comm: H, request: *mut H) [comm] {
        isendrecv(sendbuf, sendcount, sendtype, dest, sendtag, recvbuf, recvcount, recvtype, source, recvtag, comm, Vec::new(), request)
    }

    fn MPI_Isendrecv_replace / PMPI_Isendrecv_replace(buf: *mut c_void, count: c_int, datatype: H, dest: c_int, sendtag: c_int, source: c_int, recvtag: c_int, comm: H, request: *mut H) [comm] {
        let (packed, len) = packed_to_replace(buf, count, datatype, "MPI_Isendrecv_replace")?;
        isendrecv(packed.as_ptr() as *const c_void, len, BYTE, dest, sendtag, buf, count, datatype, source, recvtag, comm, packed, request)
    }

    fn MPI_Isend / PMPI_Isend(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        isend_mode(Mode::Standard, buf, count, datatype, dest, tag, comm, request)
    }

    fn MPI_Irsend / PMPI_Irsend(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        isend_mode(Mode::Ready, buf, count, datatype, dest, tag, comm, request)
    }

    fn MPI_Issend / PMPI_Issend(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        isend_mode(Mode::Sync, buf, count, datatype, dest, tag, comm, request)
    }

    fn MPI_Ibsend / PMPI_Ibsend(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        isend_mode(Mode::Buffered, buf, count, datatype, dest, tag, comm, request)
    }

    fn MPI_Irecv / PMPI_Irecv(buf: *mut c_void, count: c_int, datatype: H, source: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        let mut rt = rt()?;
        let h = match irecv_quick(&mut rt, buf, count, datatype, source, tag, comm)? {
            Some(h) => h,
            None => {
                let r = start_recv(&mut rt, buf, count, datatype, source, tag, comm, None, false)?;
                store(&mut rt, r)?
            }
        };
        // SAFETY: the caller's output argument.
        unsafe { put(request, h) }
    }

    fn MPI_Send_init / PMPI_Send_init(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        persistent(Spec { send: Some(Mode::Standard), buf: Ptr(buf as *mut u8), count, dtype: datatype, peer: dest, tag, comm, held: None }, request)
    }

    fn MPI_Ssend_init / PMPI_Ssend_init(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        persistent(Spec { send: Some(Mode::Sync), buf: Ptr(buf as *mut u8), count, dtype: datatype, peer: dest, tag, comm, held: None }, request)
    }

    fn MPI_Rsend_init / PMPI_Rsend_init(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        persistent(Spec { send: Some(Mode::Ready), buf: Ptr(buf as *mut u8), count, dtype: datatype, peer: dest, tag, comm, held: None }, request)
    }

    fn MPI_Bsend_init / PMPI_Bsend_init(buf: *const c_void, count: c_int, datatype: H, dest: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        persistent(Spec { send: Some(Mode::Buffered), buf: Ptr(buf as *mut u8), count, dtype: datatype, peer: dest, tag, comm, held: None }, request)
    }

    fn MPI_Recv_init / PMPI_Recv_init(buf: *mut c_void, count: c_int, datatype: H, source: c_int, tag: c_int, comm: H, request: *mut H) [comm] {
        persistent(Spec { send: None, buf: Ptr(buf as *mut u8), count, dtype: datatype, peer: source, tag, comm, held: None }, request)
    }

    fn MPI_Psend_init / PMPI_Psend_init(buf: *const c_void, partitions: c_int, count: i64, datatype: H, dest: c_int, tag: c_int, comm: H, _info: H, request: *mut H) [comm] {
        partitioned(Some(Mode::Standard), buf as *mut c_void, partitions, count, datatype, dest, tag, comm, request)
    }

    fn MPI_Precv_init / PMPI_Precv_init(buf: *mut c_void, partitions: c_int, count: i64, datatype: H, source: c_int, tag: c_int, comm: H, _info: H, request: *mut H) [comm] {
        partitioned(None, buf, partitions, count, datatype, source, tag, comm, request)
    }

    fn MPI_Pready / PMPI_Pready(partition: c_int, request: H) {
        pready(request, &[partition])
    }

    fn MPI_Pready_range / PMPI_Pready_range(partition_low: c_int, partition_high: c_int, request: H) {
        if partition_low > partition_high {
            return Err(fail(class::ARG, format!("MPI_Pready_range from partition {partition_low} to {partition_high}: the low end is above the high end")));
        }
        let all: Vec<c_int> = (partition_low..=partition_high).collect();
        pready(request, &all)
    }

    fn MPI_Pready_list / PMPI_Pready_list(length: c_int, array_of_partitions: *const c_int, request: H) {
        // SAFETY: MPI: the array holds length partitions.
        let list = unsafe { crate::err::array(array_of_partitions, length)? };
        pready(request, list)
    }

    fn MPI_Parrived / PMPI_Parrived(request: H, partition: c_int, flag: *mut c_int) {
        let mut rt = rt()?;
        let (i, g) = req_at(request).ok_or_else(|| fail(class::REQUEST, "MPI_Parrived on MPI_REQUEST_NULL"))?;
        let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(request))?;
        let parts = match (r.more.as_ref().and_then(|m| m.part.as_ref()), r.persistent().map(|s| s.send.is_none())) {
            (Some(p), Some(true)) => p.partitions,
            _ => return Err(fail(class::REQUEST, "MPI_Parrived needs a partitioned receive request (MPI_Precv_init)")),
        };
        if !(0..parts as c_int).contains(&partition) {
            return Err(fail(class::ARG, format!("partition {partition} of a receive of {parts} (0 to {})", parts - 1)));
        }
        // The message moves whole: every partition arrives when it has. An inactive request's
        // partitions arrived in its last round.
        let arrived = if r.active {
            drive(&mut rt, &[request], false, Enough::All)?;
            rt.reqs.get_mut(i, g).is_none_or(|r| r.done)
        } else {
            true
        };
        // SAFETY: the caller's output argument.
        unsafe { put(flag, arrived as c_int) }
    }

    fn MPI_Start / PMPI_Start(request: *mut H) {
        // SAFETY: the caller's request.
        let h = unsafe { get(request)? };
        start_any(h)
    }

    fn MPI_Startall / PMPI_Startall(count: c_int, array_of_requests: *mut H) {
        // SAFETY: MPI: the array holds count requests.
        let hs = unsafe { crate::err::array(array_of_requests, count)? };
        for &h in hs {
            start_any(h)?;
        }
        Ok(())
    }

    fn MPI_Wait / PMPI_Wait(request: *mut H, status: *mut Status) {
        // SAFETY: the caller's request.
        let mut h = unsafe { get(request)? };
        let mut rt = rt_keep()?;
        let (st, e) = match wait_held(&mut rt, h) {
            Some(got) => {
                h = abi::REQUEST_NULL;
                got
            }
            None => {
                drive(&mut rt, &[h], true, Enough::All)?;
                collect(&mut rt, &mut h)
            }
        };
        // SAFETY: the caller's arguments.
        unsafe {
            put(request, h)?;
            put_status(status, st);
        }
        e.map_or(Ok(()), Err)
    }

    fn MPI_Test / PMPI_Test(request: *mut H, flag: *mut c_int, status: *mut Status) {
        // SAFETY: the caller's request.
        let mut h = unsafe { get(request)? };
        let mut rt = rt()?;
        if all_pending(&mut rt, &[h]) {
            // SAFETY: the caller's flag.
            unsafe { put(flag, 0)? };
            return Ok(());
        }
        drive(&mut rt, &[h], false, Enough::All)?;
        let done = is_done(&mut rt, h)?.unwrap_or(true);
        // SAFETY: the caller's flag.
        unsafe { put(flag, done as c_int)? };
        if !done {
            return Ok(());
        }
        let (st, e) = collect(&mut rt, &mut h);
        // SAFETY: the caller's arguments.
        unsafe {
            put(request, h)?;
            put_status(status, st);
        }
        e.map_or(Ok(()), Err)
    }

    fn MPI_Waitall / PMPI_Waitall(count: c_int, array_of_requests: *mut H, array_of_statuses: *mut Status) {
        // SAFETY: MPI: the array holds count requests.
        let hs = unsafe { crate::err::array_mut(array_of_requests, count)? };
        let mut rt = rt_keep()?;
        drive(&mut rt, hs, true, Enough::All)?;
        // SAFETY: MPI: the status array holds count statuses.
        unsafe { collect_all(&mut rt, hs, array_of_statuses) }
    }

    fn MPI_Testall / PMPI_Testall(count: c_int, array_of_requests: *mut H, flag: *mut c_int, array_of_statuses: *mut Status) {
        // SAFETY: MPI: the array holds count requests.
        let hs = unsafe { crate::err::array_mut(array_of_requests, count)? };
        let mut rt = rt()?;
        if all_pending(&mut rt, hs) {
            // SAFETY: the caller's flag.
            return unsafe { put(flag, 0) };
        }
        drive(&mut rt, hs, false, Enough::All)?;
        let mut all = true;
        for &h in hs.iter() {
            all &= is_done(&mut rt, h)?.unwrap_or(true);
        }
        // SAFETY: the caller's flag.
        unsafe { put(flag, all as c_int)? };
        if !all {
            return Ok(());
        }
        // SAFETY: MPI: the status array holds count statuses.
        unsafe { collect_all(&mut rt, hs, array_of_statuses) }
    }

    fn MPI_Waitany / PMPI_Waitany(count: c_int, array_of_requests: *mut H, index: *mut c_int, status: *mut Status) {
        // SAFETY: MPI: the array holds count requests.
        let hs = unsafe { crate::err::array_mut(array_of_requests, count)? };
        let mut rt = rt()?;
        drive(&mut rt, hs, true, Enough::One)?;
        any_done(&mut rt, hs, index, status)
    }

    fn MPI_Testany / PMPI_Testany(count: c_int, array_of_requests: *mut H, index: *mut c_int, flag: *mut c_int, status: *mut Status) {
        // SAFETY: MPI: the array holds count requests.
        let hs = unsafe { crate::err::array_mut(array_of_requests, count)? };
        let mut rt = rt()?;
        if all_pending(&mut rt, hs) {
            // SAFETY: the caller's flag and index.
            unsafe {
                put(flag, 0)?;
                return put(index, abi::UNDEFINED);
            }
        }
        drive(&mut rt, hs, false, Enough::One)?;
        let mut active = false;
        let mut found = false;
        for &h in hs.iter() {
            match is_done(&mut rt, h)? {
                Some(true) => { found = true; active = true; }
                Some(false) => active = true,
                None => {}
            }
        }
        // With no active request the flag is true and the index MPI_UNDEFINED.
        // SAFETY: the caller's flag.
        unsafe { put(flag, (found || !active) as c_int)? };
        if found || !active {
            return any_done(&mut rt, hs, index, status);
        }
        // SAFETY: the caller's index.
        unsafe { put(index, abi::UNDEFINED) }
    }

    fn MPI_Waitsome / PMPI_Waitsome(incount: c_int, array_of_requests: *mut H, outcount: *mut c_int, array_of_indices: *mut c_int, array_of_statuses: *mut Status) {
        // SAFETY: MPI: the array holds incount requests.
        let hs = unsafe { crate::err::array_mut(array_of_requests, incount)? };
        let mut rt = rt()?;
        drive(&mut rt, hs, true, Enough::One)?;
        some_done(&mut rt, hs, outcount, array_of_indices, array_of_statuses)
    }

    fn MPI_Testsome / PMPI_Testsome(incount: c_int, array_of_requests: *mut H, outcount: *mut c_int, array_of_indices: *mut c_int, array_of_statuses: *mut Status) {
        // SAFETY: MPI: the array holds incount requests.
        let hs = unsafe { crate::err::array_mut(array_of_requests, incount)? };
        let mut rt = rt()?;
        if all_pending(&mut rt, hs) {
            // SAFETY: the caller's count.
            return unsafe { put(outcount, 0) };
        }
        drive(&mut rt, hs, false, Enough::One)?;
        some_done(&mut rt, hs, outcount, array_of_indices, array_of_statuses)
    }

    fn MPI_Request_free / PMPI_Request_free(request: *mut H) {
        // SAFETY: the caller's request.
        let h = unsafe { get(request)? };
        let mut rt = rt()?;
        let (i, g) = req_at(h).ok_or_else(|| fail(class::REQUEST, "MPI_Request_free on MPI_REQUEST_NULL"))?;
        let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(h))?;
        if r.done || (r.is_persistent() && !r.active) {
            let r = rt.reqs.remove(i, g).expect("looked up");
            rt.bsend_used -= r.bsend();
            let freed = r.greq().and_then(|q| q.free());
            recycle(&mut rt, r);
            if let Some(e) = freed {
                drop(rt);
                // SAFETY: the caller's request.
                unsafe { put(request, abi::REQUEST_NULL)? };
                return Err(e);
            }
        } else {
            // Completes in the background (MPI-3.1 section 3.7.3).
            if let Some(m) = r.more.as_deref_mut() {
                m.persistent = None;
                m.pcoll = None;
            }
            rt.orphans.push((i, g));
        }
        // SAFETY: the caller's request.
        unsafe { put(request, abi::REQUEST_NULL) }
    }

    fn MPI_Request_get_status / PMPI_Request_get_status(request: H, flag: *mut c_int, status: *mut Status) {
        let mut rt = rt()?;
        if all_pending(&mut rt, &[request]) {
            // SAFETY: the caller's flag.
            return unsafe { put(flag, 0) };
        }
        drive(&mut rt, &[request], false, Enough::All)?;
        let (done, st) = match req_at(request) {
            None => (true, Status::empty()),
            Some((i, g)) => {
                let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(request))?;
                if !r.active {
                    (true, Status::empty())
                } else if let (true, Some(q)) = (r.done, r.greq()) {
                    let (st, e) = q.query();
                    if let Some(e) = e {
                        return Err(e);
                    }
                    (true, st)
                } else {
                    (r.done, r.status)
                }
            }
        };
        // SAFETY: the caller's arguments.
        unsafe {
            put(flag, done as c_int)?;
            if done { put_status(status, st); }
        }
        Ok(())
    }

    fn MPI_Grequest_start / PMPI_Grequest_start(query_fn: Option<GreqQueryFn>, free_fn: Option<GreqFreeFn>, cancel_fn: Option<GreqCancelFn>, extra_state: *mut c_void, request: *mut H) {
        if request.is_null() {
            return Err(fail(class::REQUEST, "the request argument is a null pointer"));
        }
        let mut rt = rt()?;
        let mut req = Req::finished(abi::COMM_WORLD, Status::empty());
        req.done = false;
        req.m().greq = Some(Greq { query: query_fn, free: free_fn, cancel: cancel_fn, extra: extra_state as usize });
        let h = store(&mut rt, req)?;
        drop(rt);
        // SAFETY: the caller's output argument (checked not null above).
        unsafe { put(request, h) }
    }

    fn MPI_Grequest_complete / PMPI_Grequest_complete(request: H) {
        let mut guard = rt()?;
        let rt = &mut *guard;
        let (i, g) = req_at(request).ok_or_else(|| fail(class::REQUEST, "MPI_Grequest_complete on MPI_REQUEST_NULL"))?;
        let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(request))?;
        if r.greq().is_none() {
            return Err(fail(class::REQUEST, "MPI_Grequest_complete needs a request made by MPI_Grequest_start"));
        }
        r.done = true;
        r.done_at = stamp(&mut rt.done_clock);
        // A request the program already freed goes now.
        reap_orphans(rt);
        Ok(())
    }

    fn MPI_Cancel / PMPI_Cancel(request: *mut H) {
        // SAFETY: the caller's request.
        let h = unsafe { get(request)? };
        let mut rt = rt()?;
        let (i, g) = req_at(h).ok_or_else(|| fail(class::REQUEST, "MPI_Cancel on MPI_REQUEST_NULL"))?;
        let r = rt.reqs.get_mut(i, g).ok_or_else(|| bad_req(h))?;
        if let Some(q) = r.greq() {
            let Some(f) = q.cancel else { return Ok(()) };
            let done = r.done as c_int;
            // SAFETY: the program's cancel function, called as MPI defines: with its extra
            // state and whether MPI_Grequest_complete was called.
            let rc = unsafe { f(q.extra as *mut c_void, done) };
            return callback_error(rc, "cancel").map_or(Ok(()), Err);
        }
        // Only a receive no message has matched can be cancelled; a send completes normally
        // (MPI lets cancellation fail; MPI_Test_cancelled then says false).
        if r.more.as_ref().is_some_and(|m| m.target.is_some()) {
            if let Some(id) = r.core {
                let world = rt.world.clone();
                world.cancel(id);
            }
        }
        Ok(())
    }

    fn MPI_Test_cancelled / PMPI_Test_cancelled(status: *const Status, flag: *mut c_int) {
        // SAFETY: the caller's arguments.
        unsafe {
            let st = get(status)?;
            put(flag, st.cancelled() as c_int)
        }
    }

    fn MPI_Probe / PMPI_Probe(source: c_int, tag: c_int, comm: H, status: *mut Status) [comm] {
        let (c, src, tag) = probe_args(source, tag, comm)?;
        let Some(src) = src else {
            // SAFETY: the caller's status.
            unsafe { put_status(status, Status::proc_null()) };
            return Ok(());
        };
        // While a non-blocking collective is in flight, the core's wait moves it on (see
        // `idle_hook`).
        let st = c.ep.probe(src, tag).map_err(|e| from_recv(&e))?;
        // SAFETY: the caller's status.
        unsafe { put_status(status, status_of(&c, &st, st.len)) };
        Ok(())
    }

    fn MPI_Iprobe / PMPI_Iprobe(source: c_int, tag: c_int, comm: H, flag: *mut c_int, status: *mut Status) [comm] {
        let (c, src, tag) = probe_args(source, tag, comm)?;
        let Some(src) = src else {
            // SAFETY: the caller's arguments.
            unsafe { put(flag, 1)?; put_status(status, Status::proc_null()) };
            return Ok(());
        };
        let st = c.ep.iprobe(src, tag).map_err(|e| from_recv(&e))?;
        if st.is_none() {
            move_nbcs()?;
        }
        // SAFETY: the caller's arguments.
        unsafe {
            put(flag, st.is_some() as c_int)?;
            if let Some(st) = st { put_status(status, status_of(&c, &st, st.len)); }
        }
        Ok(())
    }

    fn MPI_Mprobe / PMPI_Mprobe(source: c_int, tag: c_int, comm: H, message: *mut H, status: *mut Status) [comm] {
        let (c, src, tag) = probe_args(source, tag, comm)?;
        let Some(src) = src else {
            // SAFETY: the caller's arguments.
            unsafe { put(message, abi::MESSAGE_NO_PROC)?; put_status(status, Status::proc_null()) };
            return Ok(());
        };
        let m = c.ep.mprobe(src, tag).map_err(|e| from_recv(&e))?;
        let st = m.status();
        let h = keep_message(&c, comm, m)?;
        // SAFETY: the caller's arguments.
        unsafe { put(message, h)?; put_status(status, status_of(&c, &st, st.len)) };
        Ok(())
    }

    fn MPI_Improbe / PMPI_Improbe(source: c_int, tag: c_int, comm: H, flag: *mut c_int, message: *mut H, status: *mut Status) [comm] {
        let (c, src, tag) = probe_args(source, tag, comm)?;
        let Some(src) = src else {
            // SAFETY: the caller's arguments.
            unsafe { put(flag, 1)?; put(message, abi::MESSAGE_NO_PROC)?; put_status(status, Status::proc_null()) };
            return Ok(());
        };
        let m = c.ep.improbe(src, tag).map_err(|e| from_recv(&e))?;
        if m.is_none() {
            move_nbcs()?;
        }
        // SAFETY: the caller's flag.
        unsafe { put(flag, m.is_some() as c_int)? };
        if let Some(m) = m {
            let st = m.status();
            let h = keep_message(&c, comm, m)?;
            // SAFETY: the caller's arguments.
            unsafe { put(message, h)?; put_status(status, status_of(&c, &st, st.len)) };
        }
        Ok(())
    }

    fn MPI_Mrecv / PMPI_Mrecv(buf: *mut c_void, count: c_int, datatype: H, message: *mut H, status: *mut Status) {
        // SAFETY: the caller's message.
        let m = unsafe { get(message)? };
        let mut rt = rt()?;
        let r = start_mrecv(&mut rt, buf, count, datatype, m)?;
        // SAFETY: the caller's message: received (or failing) from here on.
        unsafe { put(message, abi::MESSAGE_NULL)? };
        blocking(&mut rt, r, status)
    }

    fn MPI_Imrecv / PMPI_Imrecv(buf: *mut c_void, count: c_int, datatype: H, message: *mut H, request: *mut H) {
        // SAFETY: the caller's message.
        let m = unsafe { get(message)? };
        let mut rt = rt()?;
        let r = start_mrecv(&mut rt, buf, count, datatype, m)?;
        let h = store(&mut rt, r)?;
        // SAFETY: the caller's arguments.
        unsafe { put(message, abi::MESSAGE_NULL)?; put(request, h) }
    }

    fn MPI_Get_count / PMPI_Get_count(status: *const Status, datatype: H, count: *mut c_int) {
        // SAFETY: the caller's status.
        let st = unsafe { get(status)? };
        let rt = rt()?;
        let t = crate::dtype::lookup(&rt, datatype)?;
        let bytes = st.bytes() as usize;
        let n = if t.size == 0 {
            if bytes == 0 { 0 } else { abi::UNDEFINED }
        } else if !bytes.is_multiple_of(t.size) {
            abi::UNDEFINED
        } else {
            c_int::try_from(bytes / t.size).unwrap_or(abi::UNDEFINED)
        };
        // SAFETY: the caller's output argument.
        unsafe { put(count, n) }
    }

    fn MPI_Get_elements / PMPI_Get_elements(status: *const Status, datatype: H, count: *mut c_int) {
        // SAFETY: the caller's status.
        let st = unsafe { get(status)? };
        let rt = rt()?;
        let t = crate::dtype::lookup(&rt, datatype)?;
        let n = t.elements_in(st.bytes() as usize).and_then(|n| c_int::try_from(n).ok()).unwrap_or(abi::UNDEFINED);
        // SAFETY: the caller's output argument.
        unsafe { put(count, n) }
    }

    fn MPI_Get_elements_x / PMPI_Get_elements_x(status: *const Status, datatype: H, count: *mut abi::Count) {
        // SAFETY: the caller's status.
        let st = unsafe { get(status)? };
        let rt = rt()?;
        let t = crate::dtype::lookup(&rt, datatype)?;
        let n = t.elements_in(st.bytes() as usize).map(|n| n as abi::Count).unwrap_or(abi::UNDEFINED as abi::Count);
        // SAFETY: the caller's output argument.
        unsafe { put(count, n) }
    }
}

fn any_done(rt: &mut Rt, hs: &mut [H], index: *mut c_int, status: *mut Status) -> R {
    // The one that completed first: a program that waits for any of several receives from any
    // source takes their messages in the order they matched, and no request is passed over
    // for ever because one earlier in the array keeps completing (MPI leaves the choice open;
    // MPICH takes the first in the array). HPC Challenge's MPIRandomAccess, which ends when
    // every rank's "finished" message has been taken and cancels its other receives, lost
    // updates that had arrived in a receive later in its array.
    let mut first: Option<(u64, usize)> = None;
    for (k, h) in hs.iter().enumerate() {
        if let Some(Some(at)) = done_when(rt, *h)? {
            if first.is_none_or(|(t, _)| at < t) {
                first = Some((at, k));
            }
        }
    }
    if let Some((_, k)) = first {
        let (st, e) = collect(rt, &mut hs[k]);
        // SAFETY: the caller's arguments.
        unsafe {
            put(index, k as c_int)?;
            put_status(status, st);
        }
        return e.map_or(Ok(()), Err);
    }
    // No active request: index MPI_UNDEFINED, empty status.
    // SAFETY: the caller's arguments.
    unsafe {
        put(index, abi::UNDEFINED)?;
        put_status(status, Status::empty());
    }
    Ok(())
}

fn some_done(
    rt: &mut Rt,
    hs: &mut [H],
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut Status,
) -> R {
    let mut active = false;
    let mut done = Vec::new();
    for (k, h) in hs.iter_mut().enumerate() {
        match is_done(rt, *h)? {
            Some(true) => {
                active = true;
                let (st, e) = collect(rt, h);
                // SAFETY: MPI: indices holds incount entries.
                unsafe { put(indices.add(done.len()), k as c_int)? };
                done.push((done.len(), st, e.is_some()));
            }
            Some(false) => active = true,
            None => {}
        }
    }
    let out = if active {
        done.len() as c_int
    } else {
        abi::UNDEFINED
    };
    // SAFETY: the caller's output argument.
    unsafe { put(outcount, out)? };
    // SAFETY: MPI: statuses holds incount entries.
    unsafe { put_statuses(statuses, &done) }
}

/// One pass over the non-blocking collectives in flight, if any (a probe that found nothing:
/// a program may loop on MPI_Iprobe for a message that needs them to move).
fn move_nbcs() -> R {
    let mut rt = rt()?;
    if !rt.nbcs.is_empty() {
        prune_nbcs(&mut rt);
        advance(&mut rt, &mut std::iter::empty(), false);
    }
    Ok(())
}

/// (communicator, source (None for MPI_PROC_NULL; inner None for any), tag) of a probe.
#[allow(clippy::type_complexity)]
fn probe_args(
    source: c_int,
    tag: c_int,
    comm: H,
) -> R<(Arc<CommCore>, Option<Option<usize>>, Option<u32>)> {
    let c = { rt()?.comm(comm)? };
    let tag = check_tag(tag, true)?;
    if source == abi::PROC_NULL {
        return Ok((c, None, tag));
    }
    let src = source_of(&c, source)?;
    Ok((c, Some(src), tag))
}

/// Keeps a message a matched probe took out of the core's matching under a message handle.
fn keep_message(c: &Arc<CommCore>, comm: H, matched: volley::Matched) -> R<H> {
    let mut rt = rt()?;
    let (i, g) = rt.msgs.insert(Msg {
        matched,
        comm,
        core: c.clone(),
    });
    if i >= MAX_OBJECTS {
        rt.msgs.remove(i, g);
        return Err(fail(
            class::NO_MEM,
            format!(
                "more than {MAX_OBJECTS} matched-probe messages are waiting for their MPI_Mrecv"
            ),
        ));
    }
    Ok(gen_handle(KIND_MSG, i, g))
}

/// Starts the receive of message `m` (from MPI_Mprobe or MPI_Improbe) into `buf`: a request
/// that completes once the data is there. A large message lands straight in `buf` (or is
/// unpacked into it piece by piece) as it comes; a small one was copied out at the probe.
fn start_mrecv(rt: &mut Rt, buf: *mut c_void, count: c_int, datatype: H, m: H) -> R<Req> {
    if m == abi::MESSAGE_NO_PROC {
        return Ok(Req::finished(abi::COMM_WORLD, Status::proc_null()));
    }
    let t = committed(rt, datatype)?;
    let n = check_count(count)?;
    let (i, mg) = gen_index(KIND_MSG, m).ok_or_else(|| {
        fail(
            class::REQUEST,
            format!("{m:#x} is not a message handle from MPI_Mprobe or MPI_Improbe"),
        )
    })?;
    let msg = rt.msgs.remove(i, mg).ok_or_else(|| fail(class::REQUEST, format!("{m:#x} is not a message handle from MPI_Mprobe or MPI_Improbe (each is received once)")))?;
    let c = msg.core;
    let core = if t.contig {
        // SAFETY: MPI's buffer rule (the program leaves buf alone until the request completes).
        let lent = unsafe { RawBufMut::new(buf as *mut u8, n * t.size) };
        c.ep.imrecv_lent(msg.matched, lent)
    } else {
        c.ep.imrecv_unpacked(msg.matched, Pieces::new(buf, n, t.clone()))
    };
    let mut more = spare_more(rt);
    more.core_comm = Some(c);
    more.target = Some(Target {
        buf: Ptr(buf as *mut u8),
        count: n,
        dtype: t,
    });
    Ok(Req {
        comm: msg.comm,
        core: Some(core),
        done: false,
        done_at: 0,
        active: true,
        status: Status::empty(),
        more: Some(more),
    })
}

/// Completes every request still in flight (MPI_Finalize: buffered sends and freed requests
/// finish before the process leaves).
pub fn finish_all(rt: &mut Rt) {
    while !rt.orphans.is_empty() {
        reap_orphans(rt);
        if !rt.orphans.is_empty() {
            let _ = rt.world.progress();
            std::thread::yield_now();
        }
    }
}

/// MPI_Sendrecv (and MPI_Sendrecv_replace, with the packed copy as the send buffer).
#[allow(clippy::too_many_arguments)]
fn sendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    source: c_int,
    recvtag: c_int,
    comm: H,
    status: *mut Status,
) -> R {
    let mut rt = rt()?;
    // The fast paths, as MPI_Send's and MPI_Recv's (none while a non-blocking collective is in
    // flight: the waits below move it on). The two halves may run one after the other, with no
    // request, whenever neither can wait on the other: a message here already is received
    // first, then the send may block as MPI_Send does; a send the core takes whole at once
    // (eager, room in the ring or window) goes first, then the receive blocks as MPI_Recv does.
    // Otherwise (a large message each way) both are posted and waited for together, so that two
    // ranks exchanging with each other cannot deadlock.
    if rt.nbcs.is_empty() {
        if dest == abi::PROC_NULL {
            return recv_in(
                &mut rt, recvbuf, recvcount, recvtype, source, recvtag, comm, status,
            );
        }
        if source == abi::PROC_NULL {
            send_in(&mut rt, sendbuf, sendcount, sendtype, dest, sendtag, comm)?;
            // SAFETY: the caller's status argument.
            unsafe { put_status(status, Status::proc_null()) };
            return Ok(());
        }
        if let Some((from, got, bytes)) =
            eager_recv(&rt, recvbuf, recvcount, recvtype, source, recvtag, comm)?
        {
            send_in(&mut rt, sendbuf, sendcount, sendtype, dest, sendtag, comm)?;
            // SAFETY: the caller's status argument.
            unsafe { put_status(status, Status::of(from, got, bytes)) };
            return Ok(());
        }
        if eager_send(&rt, sendbuf, sendcount, sendtype, dest, sendtag, comm)?.is_some() {
            return recv_in(
                &mut rt, recvbuf, recvcount, recvtype, source, recvtag, comm, status,
            );
        }
    }
    let r = start_recv_eager(&mut rt, recvbuf, recvcount, recvtype, source, recvtag, comm)?;
    let rh = store(&mut rt, r)?;
    let s = start_send_eager(
        &mut rt,
        Mode::Standard,
        sendbuf,
        sendcount,
        sendtype,
        dest,
        sendtag,
        comm,
    );
    let s = match s {
        Ok(s) => s,
        Err(e) => {
            if let Some((i, g)) = req_at(rh) {
                if let Some(r) = rt.reqs.get_mut(i, g) {
                    if let Some(id) = r.core {
                        rt.world.cancel(id);
                    }
                }
            }
            let mut rh = rh;
            drive(&mut rt, &[rh], true, Enough::All)?;
            collect(&mut rt, &mut rh);
            return Err(e);
        }
    };
    let sh = store(&mut rt, s)?;
    let mut hs = [rh, sh];
    drive(&mut rt, &hs, true, Enough::All)?;
    let (st, re) = collect(&mut rt, &mut hs[0]);
    let (_, se) = collect(&mut rt, &mut hs[1]);
    // SAFETY: the caller's status argument.
    unsafe { put_status(status, st) };
    match re.or(se) {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// MPI_BYTE: the type a packed copy is sent as.
const BYTE: H = 0x247;

/// The outgoing data of a send-receive that replaces its buffer, packed first (so the receive
/// may land in the same buffer), and its length as a count of bytes.
fn packed_to_replace(
    buf: *mut c_void,
    count: c_int,
    datatype: H,
    call: &str,
) -> R<(Vec<u8>, c_int)> {
    let rt = rt()?;
    let t = committed(&rt, datatype)?;
    let n = check_count(count)?;
    let mut v = vec![0u8; n * t.size];
    // SAFETY: MPI: buf holds count elements of the datatype.
    unsafe { t.pack(buf as *const u8, n, &mut v) };
    let len = c_int::try_from(v.len())
        .map_err(|_| fail(class::COUNT, format!("message too large for {call}")))?;
    Ok((v, len))
}

/// MPI_Isendrecv (MPI-4.0 section 3.10): one request for a receive and a send, complete when
/// both are, with the receive's status. The receive is the request's core part, the send its
/// second; `stage` is the packed copy an MPI_Isendrecv_replace sends from, kept in the request
/// until the send completes.
#[allow(clippy::too_many_arguments)]
fn isendrecv(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    dest: c_int,
    sendtag: c_int,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    source: c_int,
    recvtag: c_int,
    comm: H,
    stage: Vec<u8>,
    request: *mut H,
) -> R {
    if request.is_null() {
        return Err(fail(
            class::REQUEST,
            "the request argument is a null pointer",
        ));
    }
    let mut rt = rt()?;
    let mut r = start_recv_eager(&mut rt, recvbuf, recvcount, recvtype, source, recvtag, comm)?;
    let s = start_send_eager(
        &mut rt,
        Mode::Standard,
        sendbuf,
        sendcount,
        sendtype,
        dest,
        sendtag,
        comm,
    );
    let s = match s {
        Ok(s) => s,
        Err(e) => {
            // The receive is withdrawn, and forgotten once the core lets it go.
            if let Some(id) = r.core {
                rt.world.cancel(id);
                let h = store(&mut rt, r)?;
                let (i, g) = req_at(h).expect("stored");
                rt.orphans.push((i, g));
            }
            return Err(e);
        }
    };
    if let Some(id) = s.core {
        let m = r.m();
        m.second = Some(id);
        m.stage = stage;
        r.done = false;
    }
    recycle(&mut rt, s);
    let h = store(&mut rt, r)?;
    // SAFETY: the caller's output argument (checked not null above).
    unsafe { put(request, h) }
}
