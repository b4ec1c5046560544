//! Requests: non-blocking operations in flight, and waiting for one, any, some or all of them.
//!
//! Two shapes:
//! - [`SendRequest`] owns the buffer of an [`Endpoint::isend`] and gives it back when the send is
//!   done (the Directed-Point face).
//! - The **request table** serves operations on the caller's own memory, the shape the MPI, C
//!   and Python faces need: [`Endpoint::isend_lent`] and [`Endpoint::irecv_lent`] take memory
//!   lent through [`volley_sys::lend`] (raw for the faces, or Rust borrows in a
//!   [`World::scope`]) and return a [`RequestId`], a plain pair of integers the face keeps in an
//!   `MPI_Request`. [`World::test`], [`World::wait`] and their `_any`, `_some` and `_all` forms
//!   complete them.
//!
//! The table is a slab: a freed slot is reused, so a program that keeps a bounded number of
//! requests in flight allocates nothing per request once warm. Posted receives match in the order
//! they were posted (MPI's rule): every pass offers arriving messages to the oldest posted
//! receive first, and a blocking receive on the same context runs behind them.

use crate::backoff::Backoff;
use crate::config::WaitMode;
use crate::counters::Counter;
use crate::endpoint::Endpoint;
use crate::engine::{Payload, Pending};
use crate::error::{RecvError, SendError};
use crate::matched::{Gathering, Held, Matched, Step};
use crate::matching::{Pattern, Status};
use crate::net::Settled;
use crate::progress::LentState;
use crate::wait::Waiter;
use crate::world::World;
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use volley_sys::lend::{Lender, RawBuf, RawBufMut};
use volley_sys::Exclusive;

/// Where a non-blocking send stands.
pub(crate) enum SendState {
    /// In the ring (or handed to the network engine, which keeps its own copy).
    Done(Payload),
    /// Queued behind earlier sends to local rank `.0`, or a single copy the receiver has not
    /// finished reading.
    Queued(usize, Arc<Exclusive<Pending>>),
    /// Being written by the progress thread into the ring to local rank `.0`.
    Lent(usize, Arc<LentState>),
    /// Handed to the network engine for job rank `.0` as message `.1`, without a copy: done
    /// when the engine gives the buffer back, once the peer acknowledged it.
    Net(usize, u64),
    /// Waiting for room in the network engine's queue to job rank `.0`, in order behind
    /// earlier sends to it, as ticket `.1` (`Net::queue_send`).
    NetWaiting(usize, u64),
}

impl SendState {
    /// Whether the send is done, without making progress (the caller just did). A send whose
    /// destination left the job fails.
    fn check(&mut self, w: &World) -> Result<bool, SendError> {
        match self {
            SendState::Done(_) => Ok(true),
            SendState::Net(rank, id) => {
                let mut n = w.net();
                if let Some(data) = n.take_returned(*rank, *id) {
                    drop(n);
                    *self = SendState::Done(Payload::Owned(data));
                    return Ok(true);
                }
                match n.fate_of(*rank) {
                    Some(fate) => Err(SendError::PeerLost(crate::PeerLost { rank: *rank, fate })),
                    None => Ok(false),
                }
            }
            SendState::NetWaiting(rank, ticket) => {
                let rank = *rank;
                let mut n = w.net();
                let Some(settled) = n.take_settled(*ticket) else {
                    return Ok(false);
                };
                match settled {
                    Settled::Copied(data) => {
                        *self = SendState::Done(data);
                        Ok(true)
                    }
                    Settled::Handed(id) => {
                        drop(n);
                        *self = SendState::Net(rank, id);
                        self.check(w)
                    }
                    Settled::Failed(why) => {
                        Err(why.error(rank, n.fate_of(rank).unwrap_or(crate::Fate::Unreachable)))
                    }
                }
            }
            SendState::Lent(rank, l) => {
                // SYNC: Acquire; pairs with the Release in the progress thread.
                if !l.done.load(Ordering::Acquire) {
                    return Ok(false);
                }
                if l.failed.load(Ordering::Relaxed) {
                    // The thread gave up because the destination left the job.
                    let mut e = w.eng();
                    let lost = e.send_dead_end(*rank).unwrap_or(crate::PeerLost {
                        rank: e.job_rank(*rank),
                        fate: crate::Fate::Finished,
                    });
                    return Err(SendError::PeerLost(lost));
                }
                let data = l.data.lock().unwrap_or_else(|p| p.into_inner()).take();
                *self = SendState::Done(data.unwrap_or_default());
                Ok(true)
            }
            SendState::Queued(rank, p) => {
                let done = p.borrow_mut().done;
                if !done {
                    let mut e = w.eng();
                    let Some(l) = e.send_dead_end(*rank) else {
                        return Ok(false);
                    };
                    // The receiver may have finished right after completing this send (a
                    // single copy it read, then left): look once more, now that its fate is
                    // known, before calling the send failed.
                    e.check_inflight();
                    e.drive_rendezvous();
                    if !p.borrow_mut().done {
                        // The engine lets go of the message (and so of a lent buffer's loan).
                        e.forget_send(*rank, p);
                        return Err(l.into());
                    }
                }
                if p.borrow_mut().failed {
                    return Err(SendError::SingleCopyFailed {
                        rank: w.inner.l2g[*rank],
                    });
                }
                let data = std::mem::take(&mut p.borrow_mut().data);
                *self = SendState::Done(data);
                Ok(true)
            }
        }
    }

    /// Makes progress unless the send is complete, then says whether it is.
    pub(crate) fn poll(&mut self, w: &World) -> Result<bool, SendError> {
        if !self.is_complete(w) {
            w.progress().ok();
        }
        self.check(w)
    }

    fn is_complete(&self, w: &World) -> bool {
        match self {
            SendState::Done(_) => true,
            SendState::Net(rank, id) => w.net().is_returned(*rank, *id),
            // Settled or not, `check` moves it on.
            SendState::NetWaiting(..) => false,
            SendState::Queued(_, p) => p.borrow_mut().done,
            // SYNC: Acquire; pairs with the Release in the progress thread.
            SendState::Lent(_, l) => l.done.load(Ordering::Acquire),
        }
    }
}

/// A non-blocking send of an owned buffer in flight. Dropping it does not cancel the send: the
/// message still goes out, in order.
pub struct SendRequest {
    world: World,
    state: SendState,
}

impl SendRequest {
    pub(crate) fn new(world: &World, state: SendState) -> SendRequest {
        SendRequest {
            world: world.clone(),
            state,
        }
    }

    /// Makes progress and says whether the buffer may be reused.
    pub fn test(&mut self) -> Result<bool, SendError> {
        self.state.poll(&self.world)
    }

    /// Whether the send had completed when last tested (does not make progress).
    pub fn is_complete(&self) -> bool {
        self.state.is_complete(&self.world)
    }

    /// Waits until the message is in the ring and gives the buffer back.
    pub fn wait(mut self) -> Result<Vec<u8>, SendError> {
        let mut b = Backoff::new();
        let mut seen = self.world.moved();
        while !self.test()? {
            b.snooze_in(&self.world, &mut seen);
        }
        match std::mem::replace(&mut self.state, SendState::Done(Payload::default())) {
            SendState::Done(d) => Ok(d.into_vec()),
            SendState::Queued(..)
            | SendState::Lent(..)
            | SendState::Net(..)
            | SendState::NetWaiting(..) => {
                unreachable!("test() returned true")
            }
        }
    }
}

impl Drop for SendRequest {
    fn drop(&mut self) {
        // A dropped request does not cancel its send; the buffer it would have given back goes
        // to the network engine's pool instead.
        match self.state {
            SendState::Net(rank, id) => self.world.net().abandon(rank, id),
            SendState::NetWaiting(_, ticket) => self.world.net().abandon_waiting(ticket),
            _ => {}
        }
    }
}

/// A handle on a non-blocking operation in the world's request table. Plain data: a face keeps
/// it in an `MPI_Request` or a C integer ([`RequestId::to_bits`]). A handle whose operation has
/// been completed by test or wait is stale, and using it again is an error, never another
/// request's result.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct RequestId {
    idx: u32,
    gen: u32,
}

impl RequestId {
    /// The handle as one integer (never 0, so 0 can stand for "no request").
    pub fn to_bits(self) -> u64 {
        ((self.gen as u64) << 32) | self.idx as u64
    }

    /// A handle from [`RequestId::to_bits`]; None for 0.
    pub fn from_bits(bits: u64) -> Option<RequestId> {
        (bits != 0).then_some(RequestId {
            idx: bits as u32,
            gen: (bits >> 32) as u32,
        })
    }
}

/// Why a request failed.
#[derive(Debug, thiserror::Error)]
pub enum RequestError {
    #[error(transparent)]
    Send(#[from] SendError),
    #[error(transparent)]
    Recv(#[from] RecvError),
    #[error("request {id:#x} is not in flight: it was already completed by a test or wait (a handle is used once), or it never existed")]
    Stale { id: u64 },
    #[error("the receive was cancelled before a message matched it; the message, if any, is still queued")]
    Cancelled,
}

/// One operation in the table.
enum Op {
    Send(SendState, Status),
    Recv(Pattern, RawBufMut),
    /// A receive whose fragmented message is arriving.
    Gathering(Pattern, RawBufMut, Status, Gathering),
    /// A receive into an unpacker, and one whose message is arriving.
    RecvUnpack(Pattern, Box<dyn crate::Unpacker>),
    GatherUnpack(Pattern, Box<dyn crate::Unpacker>, Status, Gathering),
    /// A receive whose large message from another host (rank `.2`, message `.3`) is arriving
    /// straight into its buffer, which the network holds meanwhile.
    Placing(Pattern, Status, usize, u64),
    /// A receive taken out of its slot while a pass tries to match it.
    Matching,
    Done(Result<Status, RequestError>),
}

struct Slot {
    gen: u32,
    /// Boxed once, when the slot is made (slots are reused, and their boxes with them), so that
    /// a pass that matches a receive takes it out of its slot and puts it back by swapping two
    /// pointers (see `drive_posted`).
    op: Box<Option<Op>>,
    /// When the request completed, on the table's clock (see `Requests::clock`).
    done_at: u64,
}

/// The world's request table.
#[derive(Default)]
pub(crate) struct Requests {
    slots: Vec<Slot>,
    free: Vec<u32>,
    /// Posted receives, oldest first.
    posted: VecDeque<u32>,
    /// Counts completions: a sweep hands completed requests over in the order they completed
    /// (receives in the order they matched), whatever their order in the caller's list, so
    /// that a wait for any of several receives from any source takes their messages in the
    /// order they came, and no request is passed over for ever because another one earlier in
    /// the list keeps completing (MPI leaves the choice open; MPICH takes the first in the list).
    clock: u64,
    /// The completed requests a sweep found, with their completion times (kept for the next).
    found: Vec<(u64, usize)>,
    /// The box a receive's slot holds (with `Op::Matching`) while the receive is out being
    /// matched; None while it is in use (or before the first pass).
    spare: Option<Box<Option<Op>>>,
}

impl Requests {
    fn insert(&mut self, op: Op) -> RequestId {
        let idx = match self.free.pop() {
            Some(i) => i,
            None => {
                self.slots.push(Slot {
                    gen: 1,
                    op: Box::new(None),
                    done_at: 0,
                });
                (self.slots.len() - 1) as u32
            }
        };
        let done = matches!(op, Op::Done(_));
        let s = &mut self.slots[idx as usize];
        *s.op = Some(op);
        let id = RequestId { idx, gen: s.gen };
        if done {
            self.stamp(idx);
        }
        id
    }

    /// Notes that the request in slot `idx` has just completed.
    #[inline]
    fn stamp(&mut self, idx: u32) {
        self.clock += 1;
        self.slots[idx as usize].done_at = self.clock;
    }

    fn get(&mut self, id: RequestId) -> Option<&mut Op> {
        let s = self.slots.get_mut(id.idx as usize)?;
        if s.gen != id.gen {
            return None;
        }
        (*s.op).as_mut()
    }

    /// Frees the slot of a completed request; its handle becomes stale.
    fn remove(&mut self, id: RequestId) -> Option<Op> {
        let s = self.slots.get_mut(id.idx as usize)?;
        if s.gen != id.gen {
            return None;
        }
        let op = s.op.take()?;
        // Generation 0 never names a live slot, so a handle's bits are never 0.
        s.gen = s.gen.checked_add(1).unwrap_or(1);
        self.free.push(id.idx);
        Some(op)
    }
}

/// What a sweep over a list of requests saw.
#[derive(Default)]
struct Sweep {
    /// Some entry named a request.
    active: bool,
    /// Some request completed (and was handed over).
    found: bool,
    /// Some send still waits (for room in a ring, or a receiver's copy).
    sends: bool,
}

/// How one request stands after a pass.
enum Seen {
    Done,
    Pending { send: bool },
    Stale,
}

impl Endpoint {
    /// Starts sending the lent `data` to `rank` on this endpoint's port with `tag` (MPI_Isend on
    /// the caller's memory): no copy is made on the way to a rank of this host beyond the ring
    /// (or none at all by single copy). The loan ends when the request completes.
    pub fn isend_lent(&self, rank: usize, tag: u32, data: RawBuf) -> Result<RequestId, SendError> {
        self.send_request(rank, self.port, tag, Payload::Lent(data))
    }

    /// Starts sending the lent `data` to `rank`'s endpoint on `port`, as [`Endpoint::send_to`]
    /// sends (a Directed-Point message: the source port in its envelope), without waiting and
    /// without a copy on the caller's side (a C face's `volley_isend`). The loan ends when the
    /// request completes.
    pub fn isend_lent_to(
        &self,
        rank: usize,
        port: u32,
        data: RawBuf,
    ) -> Result<RequestId, SendError> {
        self.send_request(rank, port, self.port, Payload::Lent(data))
    }

    /// Starts sending `data` and files the send in the request table.
    fn send_request(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: Payload,
    ) -> Result<RequestId, SendError> {
        let len = data.len();
        let state = self.isend_env(rank, context, tag, data)?;
        let status = Status {
            source: rank,
            tag,
            len,
        };
        let op = match state {
            // Done at once: a loan ends here.
            SendState::Done(_) => Op::Done(Ok(status)),
            s => Op::Send(s, status),
        };
        Ok(self.world.inner.reqs.borrow_mut().insert(op))
    }

    /// Starts sending the message `p` makes to `rank` on this endpoint's port with `tag`
    /// (MPI_Isend of a non-contiguous datatype). A message that goes by rendezvous is packed as
    /// it goes, never whole: to a rank of this host straight into the ring's records, to
    /// another host straight into each packet (again into a packet that goes again). An eager
    /// one (at most VOLLEY_EAGER_BYTES in a ring, the network's rendezvous threshold between
    /// hosts) is packed into a buffer of its size first.
    pub fn isend_packed(
        &self,
        rank: usize,
        tag: u32,
        mut p: Box<dyn crate::Packer>,
    ) -> Result<RequestId, SendError> {
        let len = p.len();
        let piecewise = match self.world.path(rank)? {
            crate::path::Path::Ring { w, dst } => w.eng().wants_rendezvous(dst, self.port, len),
            // The network engine takes a packer over as it takes lent memory.
            crate::path::Path::Net { w, .. } => w.net().takes_over(len, self.how()),
        };
        let data = if piecewise {
            Payload::Packed(p)
        } else {
            let mut v = vec![0u8; len];
            p.pack(0, &mut v);
            Payload::Owned(v)
        };
        self.send_request(rank, self.port, tag, data)
    }

    /// Posts a receive of the first message from `source` with `tag` (as
    /// [`Endpoint::irecv_lent`]) into `u`, which stores it piece by piece (MPI_Irecv of a
    /// non-contiguous datatype): a message that comes by rendezvous is unpacked straight from
    /// the ring's records, or from another host's packets, as they come; an eager one from
    /// the network engine's reassembly buffer, or (from a ring) from a buffer of its size.
    pub fn irecv_unpacked(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
        u: Box<dyn crate::Unpacker>,
    ) -> Result<RequestId, RecvError> {
        let pat = self.pattern(source, tag)?;
        Ok(self.world.post(Op::RecvUnpack(pat, u)))
    }

    /// Posts a receive into the lent `buf` of the first message on this endpoint's port from
    /// `source` (None: any) with `tag` (None: any) (MPI_Irecv). Posted receives match in the order
    /// posted; the message lands straight in `buf`. A message longer than `buf` is still this
    /// receive's (MPI's rule): it is taken, its first `buf.len()` bytes stored, and the request
    /// fails with [`RecvError::Truncated`].
    pub fn irecv_lent(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
        buf: RawBufMut,
    ) -> Result<RequestId, RecvError> {
        let pat = self.pattern(source, tag)?;
        Ok(self.world.post(Op::Recv(pat, buf)))
    }
}

impl Endpoint {
    /// Starts the receive of the message `m` a matched probe took ([`Endpoint::mprobe`]) into
    /// the lent `buf` (MPI_Imrecv). A large message lands straight in `buf` as its data comes
    /// (by single copy, the granted stream, or from another host's packets); an eager one is
    /// copied at once. A message longer than `buf` is received whole first, its first
    /// `buf.len()` bytes stored, and the request fails with [`RecvError::Truncated`].
    pub fn imrecv_lent(&self, m: Matched, mut buf: RawBufMut) -> RequestId {
        let w = &self.world;
        let Matched { pat, st, held } = m;
        let fits = buf.len() >= st.len;
        let op = match held {
            Held::Rts { src, rts, pos } if fits => {
                let out = &mut buf.as_mut_slice()[..st.len];
                let accepted = w.eng().accept_rts(src, &rts, out);
                match accepted {
                    Ok(None) => {
                        let mut e = w.eng();
                        e.count(Counter::MsgsRecvd, 1);
                        e.count(Counter::BytesRecvd, st.len as u64);
                        Op::Done(Ok(st))
                    }
                    Ok(Some(gid)) => {
                        let g = Gathering {
                            src,
                            pos,
                            off: 0,
                            stream: Some(gid),
                        };
                        return w.post(Op::Gathering(pat, buf, st, g));
                    }
                    Err(e) => Op::Done(Err(e.into())),
                }
            }
            Held::Announced { src, msg } if fits => {
                w.net().place(src, msg, buf);
                return w.post(Op::Placing(pat, st, src, msg));
            }
            held => Op::Done(
                self.mrecv(Matched { pat, st, held }, buf.as_mut_slice())
                    .map_err(Into::into),
            ),
        };
        w.inner.reqs.borrow_mut().insert(op)
    }

    /// [`Endpoint::imrecv_lent`] into the unpacker `u` (a non-contiguous datatype): a large
    /// message is unpacked piece by piece as it comes, never whole in a buffer.
    pub fn imrecv_unpacked(&self, m: Matched, mut u: Box<dyn crate::Unpacker>) -> RequestId {
        let w = &self.world;
        let Matched { pat, st, held } = m;
        let room = u.len();
        let op = match held {
            Held::Rts { src, rts, pos } if room >= st.len => {
                let gid = w.eng().grant_rts(src, &rts);
                let g = Gathering {
                    src,
                    pos,
                    off: 0,
                    stream: Some(gid),
                };
                return w.post(Op::GatherUnpack(pat, u, st, g));
            }
            Held::Announced { src, msg } if room >= st.len => {
                w.net().place_unpacked(src, msg, u);
                return w.post(Op::Placing(pat, st, src, msg));
            }
            Held::Data(d) if room >= st.len => {
                u.unpack(0, &d);
                Op::Done(Ok(st))
            }
            Held::Net(d) if room >= st.len => {
                u.unpack(0, &d);
                w.took_eager(d);
                Op::Done(Ok(st))
            }
            held => {
                // Too long for the unpacker: whole into a buffer, what fits unpacked.
                let mut whole = vec![0u8; st.len];
                let r = self
                    .mrecv(Matched { pat, st, held }, &mut whole)
                    .and_then(|st| {
                        u.unpack(0, &whole[..room]);
                        Err(RecvError::Truncated {
                            message: st.len,
                            buffer: room,
                            envelope: st,
                        })
                    });
                Op::Done(r.map_err(Into::into))
            }
        };
        w.inner.reqs.borrow_mut().insert(op)
    }
}

/// Lends Rust borrows to requests inside [`World::scope`].
pub struct Scope<'scope, 'env: 'scope> {
    lender: &'scope Lender<'scope, 'env>,
    /// Every request started in the scope, settled when it ends.
    /// (Shared with the settling side, which must see them also when the scope unwinds.)
    ids: std::rc::Rc<std::cell::RefCell<Vec<RequestId>>>,
}

impl<'scope, 'env> Scope<'scope, 'env> {
    /// [`Endpoint::isend_lent`] on a borrow that lasts at least as long as the scope.
    pub fn isend(
        &self,
        ep: &Endpoint,
        rank: usize,
        tag: u32,
        data: &'env [u8],
    ) -> Result<RequestId, SendError> {
        let id = ep.isend_lent(rank, tag, self.lender.lend(data))?;
        self.ids.borrow_mut().push(id);
        Ok(id)
    }

    /// [`Endpoint::irecv_lent`] into a borrow that lasts at least as long as the scope.
    pub fn irecv(
        &self,
        ep: &Endpoint,
        source: Option<usize>,
        tag: Option<u32>,
        buf: &'env mut [u8],
    ) -> Result<RequestId, RecvError> {
        let id = ep.irecv_lent(source, tag, self.lender.lend_mut(buf))?;
        self.ids.borrow_mut().push(id);
        Ok(id)
    }
}

impl World {
    /// Runs `f` with a [`Scope`] whose requests may use borrowed buffers. When `f` returns (or
    /// panics), receives it started that no message has matched yet are cancelled (their
    /// messages, if any come, stay queued), and the scope waits until every send it started is
    /// done, so no borrow ends while volley still uses it. Results not collected by test or wait
    /// inside the scope are discarded.
    pub fn scope<'env, T, F>(&self, f: F) -> T
    where
        F: for<'scope> FnOnce(&Scope<'scope, 'env>) -> T,
    {
        let ids: std::rc::Rc<std::cell::RefCell<Vec<RequestId>>> = Default::default();
        let mut b = Backoff::new();
        let mut seen = self.moved();
        volley_sys::lend::scope(
            || {
                self.drive_requests();
                ids.borrow_mut().retain(|&id| {
                    // A receive nothing matched yet is cancelled: its message stays queued.
                    self.cancel(id);
                    match self.seen(id) {
                        Seen::Pending { .. } => true,
                        Seen::Done => {
                            let _ = self.collect(id);
                            false
                        }
                        Seen::Stale => false,
                    }
                });
                if !ids.borrow().is_empty() {
                    // Sends waiting for their receivers (a send to a peer that left fails in
                    // `seen`, which ends its loan).
                    b.snooze_in(self, &mut seen);
                }
            },
            |lender| {
                f(&Scope {
                    lender,
                    ids: ids.clone(),
                })
            },
        )
    }

    /// Files receive `op` behind the receives posted before it, and matches it at once if its
    /// message is already here. Only the new receive is offered the messages here: the older
    /// ones had their offers when they were posted and get the next ones at the next progress
    /// (every wait and test drives them). A message the new one finds that an older one
    /// accepts is vetoed, and the pass starts over from the oldest, which takes it.
    fn post(&self, op: Op) -> RequestId {
        // Nothing to offer where one look at the source's ring finds nothing (a receive posted
        // before its message): no pass at all.
        let quiet = match &op {
            Op::Recv(p, _) | Op::RecvUnpack(p, _) => self.surely_nothing_from(p.source),
            _ => false,
        };
        let (id, at) = {
            let mut r = self.inner.reqs.borrow_mut();
            let id = r.insert(op);
            r.posted.push_back(id.idx);
            count_posted(&self.inner.nposted, 1);
            count_posted(&self.inner.posts, 1);
            (id, r.posted.len() - 1)
        };
        if !quiet {
            self.drive_posted_from(at);
        }
        id
    }

    /// Whether no message from `source` can be waiting on this host yet, by one look at its
    /// ring (see `Endpoint::surely_nothing_from`).
    #[inline]
    pub(crate) fn surely_nothing_from(&self, source: Option<usize>) -> bool {
        match source.and_then(|r| self.route(r)) {
            Some(ring) => self.eng().surely_nothing_from(ring),
            None => false,
        }
    }

    /// Makes progress on every request: queued sends, then posted receives oldest first.
    pub(crate) fn drive_requests(&self) {
        // progress() ends with a pass over the posted receives, except inside a handler and
        // after a handler's error: only then is one made here. (Both, always, made every
        // MPI_Test of a receive that has not arrived pass over the rings twice.)
        let passed = self.progress().is_ok() && self.inner.dispatch_depth.get() == 0;
        if !passed {
            self.drive_posted();
        }
    }

    /// Whether a receive posted in `context` before position `before` of the posted list
    /// (usize::MAX: any) that no message has matched yet accepts a message with envelope `st`.
    pub(crate) fn posted_accepts(&self, context: u32, st: &Status, before: usize) -> bool {
        if before == 0 || self.inner.nposted.load(Ordering::Relaxed) == 0 {
            return false;
        }
        let r = self.inner.reqs.borrow_mut();
        r.posted.iter().take(before).any(|&idx| {
            matches!(&*r.slots[idx as usize].op,
                Some(Op::Recv(p, _)) | Some(Op::RecvUnpack(p, _))
                if p.context == context && p.accepts_from(st.source, st.tag))
        })
    }

    /// Offers arrived messages to the posted receives, oldest first, and moves on the
    /// fragmented ones already matched; a receive from a peer that is gone fails. Never waits.
    pub(crate) fn drive_posted(&self) {
        // What this pass knows: the receives posted and the ranks' states as they are before
        // it (see `quiet_since_pass`). Fates refreshed first, so that a receive whose source
        // is gone finds its dead end in this pass.
        let posts = self.inner.posts.load(Ordering::Relaxed);
        let epoch = {
            let mut e = self.eng();
            e.refresh_fates();
            e.state_epoch()
        };
        self.drive_posted_from(0);
        self.inner.quiet_posts.store(posts, Ordering::Relaxed);
        self.inner.quiet_epoch.store(epoch, Ordering::Relaxed);
    }

    /// `drive_posted` from position `start` of the posted list on (a veto restarts the pass at
    /// the oldest).
    fn drive_posted_from(&self, start: usize) {
        if self.inner.nposted.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut i = start;
        // A message that arrives during a pass may be found by a later receive although an
        // earlier one accepts it too: the later one then yields it (veto) and the pass starts
        // over, so the earlier one takes it. Bounded, in case messages keep arriving.
        let mut restarts = 0;
        let mut waiter = Waiter::new(WaitMode::BusyPoll, &self.inner.waits);
        // The pattern of a receive that found nothing in this pass: a later receive it covers
        // would find nothing too, and is skipped (a window of like receives costs one look per
        // pass, not one each).
        let mut empty: Option<Pattern> = None;
        loop {
            // Take the receive out of its slot while matching: the match may run active-port
            // handlers, which may post or test requests themselves. Its box is swapped with the
            // spare one (holding `Op::Matching`), and the receive is matched where it is, in
            // its box: a receive that finds nothing is neither copied out nor rebuilt. (Moved
            // out by value and rebuilt from its parts, it was written with narrow stores and
            // read back with wide loads: a failed store-to-load forward on every pass, a quarter
            // of this function's time in a loop of MPI_Test.)
            let (idx, mut held) = {
                let mut r = self.inner.reqs.borrow_mut();
                // Past the receives the empty pattern covers, in this one borrow.
                if let Some(e) = &empty {
                    while let Some(&idx) = r.posted.get(i) {
                        match &*r.slots[idx as usize].op {
                            Some(Op::Recv(p, _) | Op::RecvUnpack(p, _)) if e.covers(p) => i += 1,
                            _ => break,
                        }
                    }
                }
                let Some(&idx) = r.posted.get(i) else { return };
                if !matches!(
                    &*r.slots[idx as usize].op,
                    Some(
                        Op::Recv(..)
                            | Op::Gathering(..)
                            | Op::RecvUnpack(..)
                            | Op::GatherUnpack(..)
                            | Op::Placing(..)
                    )
                ) {
                    // Being matched further up the stack (a handler's test): leave it.
                    i += 1;
                    continue;
                }
                // A new box only when a handler's pass runs inside this one (rare).
                let mut b = r.spare.take().unwrap_or_else(|| Box::new(None));
                *b = Some(Op::Matching);
                std::mem::swap(&mut r.slots[idx as usize].op, &mut b);
                (idx, b)
            };
            let op: &mut Op = held.as_mut().as_mut().expect("a receive was swapped out");
            let change = match op {
                Op::Recv(pat, buf) => {
                    let pat = *pat;
                    let veto = |st: &Status| self.posted_accepts(pat.context, st, i);
                    let mut out = Some(buf.as_mut_slice());
                    match self.match_step(&pat, &mut out, &mut waiter, &veto, true) {
                        Ok(Step::Nothing) => match self.dead_end(pat.context, pat.source) {
                            None => {
                                note_empty(&mut empty, &pat);
                                Change::Keep
                            }
                            Some(e) => Change::Finish(Op::Done(Err(e.into()))),
                        },
                        Ok(Step::Vetoed) => Change::Vetoed,
                        Ok(Step::Done(st)) => Change::Finish(Op::Done(Ok(st))),
                        Ok(Step::Started(st, g)) => {
                            let Op::Recv(_, buf) = std::mem::replace(op, Op::Matching) else {
                                unreachable!("matched above")
                            };
                            Change::Continue(Op::Gathering(pat, buf, st, g))
                        }
                        Ok(Step::Placing(st, src, msg)) => {
                            let Op::Recv(_, buf) = std::mem::replace(op, Op::Matching) else {
                                unreachable!("matched above")
                            };
                            self.net().place(src, msg, buf);
                            Change::Continue(Op::Placing(pat, st, src, msg))
                        }
                        Err(RecvError::BufferTooSmall {
                            envelope: Some(st), ..
                        }) => {
                            let out = buf.as_mut_slice();
                            let room = out.len();
                            let r = self.take_truncated(&pat, st, room, &mut waiter, &mut |d| {
                                out.copy_from_slice(d)
                            });
                            Change::Finish(Op::Done(Err(r.into())))
                        }
                        Err(e) => Change::Finish(Op::Done(Err(e.into()))),
                    }
                }
                Op::RecvUnpack(pat, u) => {
                    let pat = *pat;
                    let veto = |st: &Status| self.posted_accepts(pat.context, st, i);
                    match self.match_step_unpack(&pat, &mut **u, &mut waiter, &veto) {
                        Ok(Step::Nothing) => match self.dead_end(pat.context, pat.source) {
                            None => {
                                note_empty(&mut empty, &pat);
                                Change::Keep
                            }
                            Some(e) => Change::Finish(Op::Done(Err(e.into()))),
                        },
                        Ok(Step::Vetoed) => Change::Vetoed,
                        Ok(Step::Done(st)) => Change::Finish(Op::Done(Ok(st))),
                        Ok(Step::Started(st, g)) => {
                            let Op::RecvUnpack(_, u) = std::mem::replace(op, Op::Matching) else {
                                unreachable!("matched above")
                            };
                            Change::Continue(Op::GatherUnpack(pat, u, st, g))
                        }
                        Ok(Step::Placing(st, src, msg)) => {
                            // From another host: the network unpacks it as it comes.
                            let Op::RecvUnpack(_, u) = std::mem::replace(op, Op::Matching) else {
                                unreachable!("matched above")
                            };
                            self.net().place_unpacked(src, msg, u);
                            Change::Continue(Op::Placing(pat, st, src, msg))
                        }
                        Err(RecvError::BufferTooSmall {
                            envelope: Some(st), ..
                        }) => {
                            let room = u.len();
                            let r = self.take_truncated(&pat, st, room, &mut waiter, &mut |d| {
                                u.unpack(0, d)
                            });
                            Change::Finish(Op::Done(Err(r.into())))
                        }
                        Err(e) => Change::Finish(Op::Done(Err(e.into()))),
                    }
                }
                _ => Change::Other,
            };
            let finished = match change {
                Change::Keep => false,
                Change::Continue(next) => {
                    *op = next;
                    false
                }
                // The finished receive's buffer is dropped with its old value here: the loan
                // ends.
                Change::Finish(next) => {
                    *op = next;
                    true
                }
                Change::Vetoed => {
                    let mut r = self.inner.reqs.borrow_mut();
                    std::mem::swap(&mut r.slots[idx as usize].op, &mut held);
                    r.spare = Some(held);
                    drop(r);
                    restarts += 1;
                    i = if restarts > 64 { i + 1 } else { 0 };
                    empty = None;
                    continue;
                }
                Change::Other => {
                    let (next, finished) = match std::mem::replace(op, Op::Matching) {
                        Op::Placing(pat, st, src, msg) => {
                            // The loan ends in take_placed (whole) or abandon_placing (failed).
                            if self.take_placed(src, msg, st.len) {
                                (Op::Done(Ok(st)), true)
                            } else {
                                match self.dead_end(pat.context, Some(src)) {
                                    None => (Op::Placing(pat, st, src, msg), false),
                                    Some(e) => {
                                        self.net().abandon_placing(src, msg);
                                        (Op::Done(Err(e.into())), true)
                                    }
                                }
                            }
                        }
                        Op::Gathering(pat, mut buf, st, mut g) => {
                            let out = &mut buf.as_mut_slice()[..st.len];
                            match self.more_fragments(pat.context, &mut g, out) {
                                Ok(true) => (Op::Done(Ok(st)), true),
                                Ok(false) => match self.dead_end(pat.context, Some(st.source)) {
                                    None => (Op::Gathering(pat, buf, st, g), false),
                                    Some(e) => (Op::Done(Err(e.into())), true),
                                },
                                Err(e) => (Op::Done(Err(e.into())), true),
                            }
                        }
                        Op::GatherUnpack(pat, mut u, st, mut g) => {
                            let mut sink = crate::matched::Unpacking {
                                u: &mut *u,
                                len: st.len,
                            };
                            match self.more_fragments(pat.context, &mut g, &mut sink) {
                                Ok(true) => (Op::Done(Ok(st)), true),
                                Ok(false) => match self.dead_end(pat.context, Some(st.source)) {
                                    None => (Op::GatherUnpack(pat, u, st, g), false),
                                    Some(e) => (Op::Done(Err(e.into())), true),
                                },
                                Err(e) => (Op::Done(Err(e.into())), true),
                            }
                        }
                        _ => unreachable!("only receives are taken out"),
                    };
                    // A finished receive's buffer was dropped with its Op: the loan ends here.
                    *op = next;
                    finished
                }
            };
            let mut r = self.inner.reqs.borrow_mut();
            std::mem::swap(&mut r.slots[idx as usize].op, &mut held);
            r.spare = Some(held);
            if finished {
                r.stamp(idx);
                r.posted.remove(i);
                count_posted(&self.inner.nposted, -1);
            } else {
                i += 1;
            }
        }
    }

    /// Where request `id` stands now (no progress made); a failed send completes with its
    /// error.
    fn seen(&self, id: RequestId) -> Seen {
        self.seen_in(&mut self.inner.reqs.borrow_mut(), id)
    }

    /// `seen` with the request table already borrowed (a sweep borrows it once for all).
    fn seen_in(&self, r: &mut Requests, id: RequestId) -> Seen {
        let Some(op) = r.get(id) else {
            return Seen::Stale;
        };
        match op {
            Op::Done(_) => Seen::Done,
            Op::Recv(..)
            | Op::Gathering(..)
            | Op::RecvUnpack(..)
            | Op::GatherUnpack(..)
            | Op::Placing(..)
            | Op::Matching => Seen::Pending { send: false },
            Op::Send(s, st) => match s.check(self) {
                Ok(true) => {
                    *op = Op::Done(Ok(*st));
                    r.stamp(id.idx);
                    Seen::Done
                }
                Ok(false) => Seen::Pending { send: true },
                Err(e) => {
                    *op = Op::Done(Err(e.into()));
                    r.stamp(id.idx);
                    Seen::Done
                }
            },
        }
    }

    /// Takes the result of a completed request and frees its slot.
    fn collect(&self, id: RequestId) -> Result<Status, RequestError> {
        match self.inner.reqs.borrow_mut().remove(id) {
            Some(Op::Done(r)) => r,
            _ => unreachable!("collect is called on completed requests"),
        }
    }

    /// Makes progress and, if request `id` has completed, returns its result and frees it
    /// (MPI_Test). For a send the status names the destination, tag and length.
    pub fn test(&self, id: RequestId) -> Option<Result<Status, RequestError>> {
        self.test_any(&mut [Some(id)]).map(|(_, r)| r)
    }

    /// One progress pass, as [`World::test`] makes, then whether request `id` is still pending:
    /// true leaves it as it was; false (done, or no such request) leaves its result for
    /// [`World::test`] or a sweep to take. The cheaper look for a caller that polls a request
    /// and can do nothing with it until it completes. A receive not matched yet needs no pass
    /// where nothing can have changed since the last one (see [`World::quiet_since_pass`]): a
    /// program that polls its receive between steps of work (HPCC's RandomAccess, once per
    /// table update) then pays one look at each ring, not a pass.
    pub fn still_pending(&self, id: RequestId) -> bool {
        if self.quiet_since_pass()
            && matches!(
                self.inner.reqs.borrow_mut().get(id),
                Some(Op::Recv(..) | Op::RecvUnpack(..))
            )
        {
            return true;
        }
        self.drive_requests();
        self.is_pending(id)
    }

    /// Whether request `id` is still pending, without progress (after `still_pending` made a
    /// pass for a list of requests). A send found complete or failed is marked so.
    pub fn is_pending(&self, id: RequestId) -> bool {
        matches!(self.seen(id), Seen::Pending { .. })
    }

    /// Whether a progress pass now would find nothing to do and change nothing: the last pass
    /// over the posted receives (`drive_posted`) began after every receive posted since and
    /// after the last change of a rank's state (so it asked each receive whether its source
    /// was gone with what is known now), every posted receive is still unmatched (one being
    /// gathered or placed may move with no record in a ring: single copy), and nothing
    /// anywhere would move (nothing in the rings, nothing queued to send, no network, no
    /// active port, no progress thread: see `Engine::quiet`). That pass offered every posted
    /// receive what had arrived; with nothing new, another would find the same. False when
    /// unsure.
    #[inline]
    pub(crate) fn quiet_since_pass(&self) -> bool {
        let inner = &self.inner;
        if inner.net.is_some()
            || inner.cfg.progress_thread
            || inner.nactive.load(Ordering::Relaxed) != 0
            || inner.dispatch_depth.get() != 0
            || inner.posts.load(Ordering::Relaxed) != inner.quiet_posts.load(Ordering::Relaxed)
        {
            return false;
        }
        {
            let e = self.eng();
            if e.state_epoch() != inner.quiet_epoch.load(Ordering::Relaxed) || !e.quiet() {
                return false;
            }
        }
        if inner.nposted.load(Ordering::Relaxed) == 0 {
            return true;
        }
        let r = inner.reqs.borrow_mut();
        // A few at most: the look is per receive.
        r.posted.len() <= 8
            && r.posted.iter().all(|&idx| {
                matches!(
                    &*r.slots[idx as usize].op,
                    Some(Op::Recv(..) | Op::RecvUnpack(..))
                )
            })
    }

    /// Waits for request `id` to complete and returns its result (MPI_Wait).
    pub fn wait(&self, id: RequestId) -> Result<Status, RequestError> {
        let mut ids = [Some(id)];
        match self.wait_any(&mut ids) {
            Some((_, r)) => r,
            None => unreachable!("one request was active"),
        }
    }

    /// Waits until one of the requests completes, returns its index and result, and sets its
    /// entry to None (MPI_Waitany). None when every entry is None already.
    pub fn wait_any(
        &self,
        ids: &mut [Option<RequestId>],
    ) -> Option<(usize, Result<Status, RequestError>)> {
        let mut out = None;
        self.wait_until(ids, |i, r| {
            out = Some((i, r));
            false
        });
        out
    }

    /// Like [`World::wait_any`] without waiting: None when none of the requests has completed
    /// (or every entry is None).
    pub fn test_any(
        &self,
        ids: &mut [Option<RequestId>],
    ) -> Option<(usize, Result<Status, RequestError>)> {
        self.drive_requests();
        let mut out = None;
        self.sweep(ids, |i, r| {
            out = Some((i, r));
            false
        });
        out
    }

    /// Waits until at least one of the requests completes, then reports every one that has
    /// (index and result) to `done` and sets its entry to None (MPI_Waitsome). Returns how many
    /// were reported: 0 only when every entry is None.
    pub fn wait_some(
        &self,
        ids: &mut [Option<RequestId>],
        mut done: impl FnMut(usize, Result<Status, RequestError>),
    ) -> usize {
        let mut n = 0;
        self.wait_until(ids, |i, r| {
            done(i, r);
            n += 1;
            true
        });
        n
    }

    /// Reports every request that has completed to `done` and sets its entry to None, without
    /// waiting (MPI_Testsome). Returns how many were reported.
    pub fn test_some(
        &self,
        ids: &mut [Option<RequestId>],
        mut done: impl FnMut(usize, Result<Status, RequestError>),
    ) -> usize {
        self.drive_requests();
        let mut n = 0;
        self.sweep(ids, |i, r| {
            done(i, r);
            n += 1;
            true
        });
        n
    }

    /// Waits until every request has completed, reporting each (index and result) to `done` as
    /// it does, and sets every entry to None (MPI_Waitall).
    pub fn wait_all(
        &self,
        ids: &mut [Option<RequestId>],
        mut done: impl FnMut(usize, Result<Status, RequestError>),
    ) {
        while ids.iter().any(Option::is_some) {
            self.wait_some(ids, &mut done);
        }
    }

    /// If every request has completed, reports each to `done`, sets every entry to None and
    /// returns true; otherwise completes none of them and returns false (MPI_Testall).
    pub fn test_all(
        &self,
        ids: &mut [Option<RequestId>],
        done: impl FnMut(usize, Result<Status, RequestError>),
    ) -> bool {
        self.drive_requests();
        if ids
            .iter()
            .flatten()
            .any(|&id| matches!(self.seen(id), Seen::Pending { .. }))
        {
            return false;
        }
        self.test_some(ids, done);
        true
    }

    /// Whether no receive is posted and no handler runs: a receive started now would come first
    /// in matching (a face may then hold it back until it waits, see the MPI face's deferred
    /// receives).
    pub fn nothing_posted(&self) -> bool {
        self.inner.nposted.load(Ordering::Relaxed) == 0
            && self.inner.nactive.load(Ordering::Relaxed) == 0
    }

    /// Takes back receive `id` if it is the only receive posted, into a contiguous buffer, and
    /// no message has matched it yet (and no handler runs): the source and tag of its pattern;
    /// the request is gone and its buffer's loan has ended. A face whose wait has nothing else
    /// to wait for then receives by the blocking receive's loop (`Endpoint::recv_matching` on
    /// the endpoint it posted on, with that source and tag), which takes the message this
    /// receive would have taken: with no other receive posted, none competes for it, and the
    /// messages are where they were. That loop costs a pass a look at one ring, where a wait on
    /// a posted receive also sweeps the request table. None leaves the request as it was.
    pub fn unpost_lone(&self, id: RequestId) -> Option<(Option<usize>, Option<u32>)> {
        let inner = &self.inner;
        if inner.nposted.load(Ordering::Relaxed) != 1 || inner.nactive.load(Ordering::Relaxed) != 0
        {
            return None;
        }
        let mut r = inner.reqs.borrow_mut();
        let (source, tag) = match r.get(id) {
            Some(Op::Recv(p, _)) => (p.source, p.tag),
            _ => return None,
        };
        r.remove(id);
        r.posted.retain(|&i| i != id.idx);
        count_posted(&inner.nposted, -1);
        Some((source, tag))
    }

    /// Cancels a posted receive that no message has matched yet (MPI_Cancel): it then completes
    /// with [`RequestError::Cancelled`] and its buffer is untouched. Returns false for a send or
    /// a receive already matched, which complete normally.
    pub fn cancel(&self, id: RequestId) -> bool {
        let mut r = self.inner.reqs.borrow_mut();
        match r.get(id) {
            Some(op @ (Op::Recv(..) | Op::RecvUnpack(..))) => {
                *op = Op::Done(Err(RequestError::Cancelled));
                r.stamp(id.idx);
                r.posted.retain(|&i| i != id.idx);
                count_posted(&self.inner.nposted, -1);
                true
            }
            _ => false,
        }
    }

    /// One look at every request in `ids` (no progress made): each completed one (or stale
    /// handle) is handed to `take`, which says whether to go on, and its entry set to None.
    fn sweep(
        &self,
        ids: &mut [Option<RequestId>],
        mut take: impl FnMut(usize, Result<Status, RequestError>) -> bool,
    ) -> Sweep {
        let mut s = Sweep::default();
        // One borrow of the table for the requests still pending (a wait on many passes over
        // them all); it is let go while `take` runs.
        let mut reqs = self.inner.reqs.borrow_mut();
        // The completed ones, handed over in the order they completed (see `Requests::clock`);
        // a stale handle first.
        let mut found = std::mem::take(&mut reqs.found);
        found.clear();
        for (i, slot) in ids.iter().enumerate() {
            let Some(id) = *slot else { continue };
            s.active = true;
            match self.seen_in(&mut reqs, id) {
                Seen::Pending { send } => s.sends |= send,
                Seen::Done => found.push((reqs.slots[id.idx as usize].done_at, i)),
                Seen::Stale => found.push((0, i)),
            }
        }
        if found.len() > 1 {
            found.sort_unstable();
        }
        for &(_, i) in &found {
            let id = ids[i].take().expect("found above");
            let r = match reqs.remove(id) {
                Some(Op::Done(r)) => r,
                None => Err(RequestError::Stale { id: id.to_bits() }),
                Some(_) => unreachable!("a request seen done is done"),
            };
            s.found = true;
            drop(reqs);
            let go = take(i, r);
            reqs = self.inner.reqs.borrow_mut();
            if !go {
                break;
            }
        }
        reqs.found = found;
        s
    }

    /// The waiting loop of wait_any and wait_some: passes until at least one request has
    /// completed; hands each completed one to `take` (which returns whether to go on collecting
    /// in this pass). Sleeps between passes as the world's wait mode says, except while a send
    /// waits for room in a ring (a receiver does not ring the sender's doorbell when it frees
    /// room), when it backs off instead.
    fn wait_until(
        &self,
        ids: &mut [Option<RequestId>],
        mut take: impl FnMut(usize, Result<Status, RequestError>) -> bool,
    ) {
        let mut waiter = Waiter::new(self.inner.cfg.wait, &self.inner.waits);
        let mut backoff = Backoff::new();
        let mut seen = self.moved();
        loop {
            self.drive_requests();
            let Sweep {
                active,
                found,
                sends,
            } = self.sweep(ids, &mut take);
            if found || !active {
                waiter.finish(self);
                return;
            }
            // pause() cannot fail (dead ends are checked per request in drive_posted).
            if sends || waiter.pause(self).is_err() {
                // A send streaming its data (or waiting for room) backs off from the start
                // again whenever something moved.
                backoff.snooze_in(self, &mut seen);
            }
        }
    }
}

/// What a pass did to the receive it took out (see `drive_posted`).
enum Change {
    /// Nothing: it stays as it is.
    Keep,
    /// It goes on as this (its message started arriving).
    Continue(Op),
    /// It completed (or failed): this is its end.
    Finish(Op),
    /// A receive posted earlier wants the message it found: it goes back, and the pass restarts.
    Vetoed,
    /// Not a fresh receive: handled by value.
    Other,
}

/// Keeps in `empty` the pattern of a receive that found nothing this pass (the wider of it and
/// the one kept, where one covers the other; else the newest).
fn note_empty(empty: &mut Option<Pattern>, pat: &Pattern) {
    match empty {
        Some(e) if e.covers(pat) => {}
        _ => *empty = Some(*pat),
    }
}

/// Moves a count kept with the posted receives (how many are posted, read without a borrow as
/// a quick test that there are none; how many were ever posted, `Inner::posts`) by `by`. Only while the request table is borrowed, so that no other change races
/// this one: a load and a store, not a locked read-modify-write, which would wait for every
/// earlier store of the thread to leave its store buffer (a message's ring line among them).
#[inline]
fn count_posted(n: &std::sync::atomic::AtomicUsize, by: isize) {
    n.store(
        n.load(Ordering::Relaxed).wrapping_add_signed(by),
        Ordering::Relaxed,
    );
}
