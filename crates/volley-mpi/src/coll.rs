//! Collectives and reduction operations.
//!
//! Algorithms over the communicator's second context: the simple ones here (dissemination
//! barrier, binomial broadcast, reductions folded in rank order at the root, linear gather and
//! scatter, all-to-all with every block in flight), and for broadcast, reduce, allreduce,
//! allgather and alltoall the ones `volley::collectives` chooses by size and rank count
//! (`algos`: binomial reduce, recursive doubling, Rabenseifner, scatter-ring broadcast, ring
//! allgather, pairwise exchange). Blocking barrier, bcast, reduce and allreduce of a
//! communicator on one host, up to 4 KiB, meet in the job segment instead (`place_for`,
//! `volley::ShmGroup`). Each is written once, as a future (`nbc`): MPI_Bcast runs it to its end, MPI_Ibcast
//! keeps it in its request and every test and wait moves it on. Every step posts its receives
//! before its sends and completes when all have, so no two ranks can wait on each other's sends.

use crate::abi::{self, class, H};
use crate::algos;
use crate::dtype::{committed, Basic, Dtype, TypeRef};
use crate::err::{fail, from_recv, get, put, R};
use crate::nbc::{block_on, Nbc, Seq};
use crate::state::{handle, index, rt, CommCore, UserFn, UserOp, KIND_OP};
use std::ffi::c_void;
use std::os::raw::c_int;
use volley::collectives::{self, Algo, Coll, Shape};

/// Kinds of the face's own messages on a communicator's second context (program tags, and so
/// synchronous-send acknowledgements, stay below 2^30); a collective's sequence number goes in
/// bits 16-26 (`nbc::Seq`).
pub const TAG_BARRIER: u32 = (1 << 30) | 1;
pub const TAG_BCAST: u32 = (1 << 30) | 2;
pub const TAG_REDUCE: u32 = (1 << 30) | 3;
pub const TAG_GATHER: u32 = (1 << 30) | 4;
pub const TAG_SCATTER: u32 = (1 << 30) | 5;
pub const TAG_ALLGATHER: u32 = (1 << 30) | 6;
pub const TAG_ALLTOALL: u32 = (1 << 30) | 7;
pub const TAG_CID: u32 = (1 << 30) | 8;
pub const TAG_GATHERV: u32 = (1 << 30) | 9;
pub const TAG_SCATTERV: u32 = (1 << 30) | 10;
pub const TAG_ALLGATHERV: u32 = (1 << 30) | 11;
pub const TAG_ALLTOALLV: u32 = (1 << 30) | 12;
pub const TAG_SCAN: u32 = (1 << 30) | 13;
pub const TAG_EXSCAN: u32 = (1 << 30) | 14;
pub const TAG_ALLREDUCE: u32 = (1 << 30) | 17;
pub const TAG_BCAST_RING: u32 = (1 << 30) | 18;
pub const TAG_ALLGATHER_RING: u32 = (1 << 30) | 19;
pub const TAG_REDUCE_SCATTER: u32 = (1 << 30) | 20;
/// Neighbourhood collectives (`topo`): a block sent towards a Cartesian neighbour below, or
/// along a graph edge; and one sent towards the neighbour above.
pub const TAG_NEIGHBOR: u32 = (1 << 30) | 16;
pub const TAG_NEIGHBOR_UP: u32 = (1 << 30) | 48;
/// MPI_Intercomm_create (on the peer communicator, with 20 bits of the program's tag),
/// MPI_Intercomm_merge and the duplication of an intercommunicator.
pub const TAG_ICREATE: u32 = (1 << 30) | (1 << 28);
pub const TAG_INTER: u32 = (1 << 30) | 15;
/// MPI_Comm_create_group: this bit and 20 bits of the program's tag.
pub const TAG_CREATE_GROUP: u32 = (1 << 30) | (1 << 29);
/// MPI_Comm_create_from_group (on MPI_COMM_WORLD's context): these bits and 20 bits of a hash of
/// the program's string tag.
pub const TAG_CREATE_FROM_GROUP: u32 = (1 << 30) | (1 << 29) | (1 << 28);

/// The program's memory, lent to a collective until it completes (MPI's rule for
/// non-blocking operations), as a future may hold it.
#[derive(Clone, Copy)]
pub struct P(*mut c_void);
// SAFETY: the program lends the memory to MPI until the operation completes, and the face uses
// it from one thread at a time.
unsafe impl Send for P {}
// SAFETY: as above: one thread at a time.
unsafe impl Sync for P {}

impl P {
    pub fn new<T>(p: *const T) -> P {
        P(p as *mut c_void)
    }
    /// The pointer (a method, so that a future captures the whole `P`, not the raw field).
    pub fn get(self) -> *mut c_void {
        self.0
    }
}

/// One step of a collective among the communicator's ranks (see `nbc::exchange_world`).
pub async fn exchange_a(
    c: &CommCore,
    sends: &[(usize, u32, &[u8])],
    recvs: &mut [(usize, u32, &mut [u8])],
) -> R {
    exchange_a_then(c, sends, recvs, || {}).await
}

/// [`exchange_a`], doing `local` once the messages are posted (see
/// `nbc::exchange_world_then`).
pub async fn exchange_a_then(
    c: &CommCore,
    sends: &[(usize, u32, &[u8])],
    recvs: &mut [(usize, u32, &mut [u8])],
    local: impl FnOnce(),
) -> R {
    crate::nbc::exchange_world_then(&c.coll, Some(&c.group), sends, recvs, local).await
}

/// `exchange_a`, waited for: a step that is not part of a numbered collective (between the
/// leaders of two groups, or among some members only).
pub fn exchange(
    c: &CommCore,
    sends: &[(usize, u32, &[u8])],
    recvs: &mut [(usize, u32, &mut [u8])],
) -> R {
    block_on(exchange_a(c, sends, recvs))
}

/// Like `exchange`, on endpoint `ep` with job ranks.
pub fn exchange_world(
    ep: &volley::Endpoint,
    sends: &[(usize, u32, &[u8])],
    recvs: &mut [(usize, u32, &mut [u8])],
) -> R {
    block_on(crate::nbc::exchange_world(ep, sends, recvs))
}

pub async fn barrier_a(c: &CommCore, s: Seq) -> R {
    let n = c.size();
    let me = c.rank;
    let tag = s.tag(TAG_BARRIER);
    let mut k = 1;
    while k < n {
        let to = (me + k) % n;
        let from = (me + n - k) % n;
        exchange_a(c, &[(to, tag, &[])], &mut [(from, tag, &mut [])]).await?;
        k *= 2;
    }
    Ok(())
}

/// The shape of a call, for the choice of its algorithm.
fn shape(bytes: usize, ranks: usize, count: usize, op: Option<Op>) -> Shape {
    Shape {
        bytes,
        ranks,
        count,
        commutative: op.is_none_or(Op::commutative),
        // The message-passing algorithms; `place_for` asks about the segment and the hosts.
        shared: false,
        spread: false,
        cross: false,
        copy_from: 0,
    }
}

/// Where a blocking collective of an intracommunicator meets without messages between every
/// pair: its ranks' slots in this host's segment, or its hosts' segments and their leaders.
enum Place<'a> {
    Shm(&'a volley::ShmGroup),
    Hier(&'a crate::hier::Hier),
    /// An allreduce or allgather that reads the other ranks' buffers (`Algo::Direct`).
    Cross(&'a volley::ShmGroup),
}

/// Where call `coll` of `bytes` (per rank) meets: in the segment when the communicator's ranks
/// share this host, through the hosts' leaders when they span hosts, if `collectives::select`
/// (which `VOLLEY_COLL_<NAME>` can steer) chooses so; None: it runs as messages.
fn place_for(
    c: &CommCore,
    coll: Coll,
    bytes: usize,
    count: usize,
    op: Option<Op>,
) -> R<Option<Place<'_>>> {
    let mut sh = Shape {
        shared: c.shared,
        spread: !c.shared,
        ..shape(bytes, c.size(), count, op)
    };
    // Whether the ranks can read each other's memory matters only where the choice would read
    // it (never with an operation of the program's); every rank asks the same question of the
    // same segment, so all agree.
    if c.shared
        && !matches!(op, Some(Op::User(_)))
        && collectives::select(coll, Shape { cross: true, ..sh }) == Algo::Direct
    {
        if let Some(g) = shm_group(c)? {
            sh.cross = g.cross_memory();
            sh.copy_from = g.cross_from();
        }
    }
    Ok(match collectives::select(coll, sh) {
        Algo::Shm => shm_group(c)?.map(Place::Shm),
        Algo::Direct => shm_group(c)?.map(Place::Cross),
        Algo::Hierarchical => hier(c)?.map(Place::Hier),
        _ => None,
    })
}

/// The communicator's collective slots, claimed at its first collective that meets in the
/// segment: every member claims one of its own and the members trade them (an allgather; every
/// member comes here at the same collective, since the choice depends only on what MPI makes
/// the same at every member). If one had none free, none use them: the communicator's
/// collectives send messages, at every member alike.
fn shm_group(c: &CommCore) -> R<Option<&volley::ShmGroup>> {
    if let Some(g) = c.shm.get() {
        return Ok(g.as_ref());
    }
    let world = c.coll.world();
    let mine = world.shm_claim();
    let mut all = vec![0u8; 16 * c.size()];
    if let Err(e) = allgather_bytes(c, &mine.to_bytes(), &mut all) {
        // Nobody will use it: the communicator is broken anyway.
        world.shm_unclaim(mine);
        return Err(e);
    }
    let ids: Vec<volley::SlotId> = all
        .chunks_exact(16)
        .map(volley::SlotId::from_bytes)
        .collect();
    let _ = c.shm.set(world.shm_group(&ids, c.rank));
    Ok(c.shm.get().and_then(Option::as_ref))
}

/// The communicator and datatype of a call that may meet in the segment (its ranks on one
/// host, or spread over several); None for an intercommunicator or a single rank (their own
/// paths check their arguments).
fn shm_args(comm: H, dtype: Option<H>) -> R<Option<(std::sync::Arc<CommCore>, Option<TypeRef>)>> {
    let rt = rt()?;
    let c = rt.comm(comm)?;
    if c.is_inter() || c.size() < 2 {
        return Ok(None);
    }
    let t = dtype.map(|d| committed(&rt, d)).transpose()?;
    Ok(Some((c, t)))
}

/// The communicator's hosts, drawn at its first collective that goes through them (every
/// member comes to it at the same collective).
fn hier(c: &CommCore) -> R<Option<&crate::hier::Hier>> {
    if let Some(h) = c.hier.get() {
        return Ok(h.as_ref());
    }
    let h = crate::hier::Hier::setup(c)?;
    let _ = c.hier.set(h);
    Ok(c.hier.get().and_then(Option::as_ref))
}

/// MPI_Barrier in the segment or through the hosts' leaders; false when it runs as messages.
fn barrier_shm(comm: H) -> R<bool> {
    let Some((c, _)) = shm_args(comm, None)? else {
        return Ok(false);
    };
    match place_for(&c, Coll::Barrier, 0, 0, None)? {
        Some(Place::Shm(g)) => g.barrier().map_err(|e| from_recv(&e))?,
        Some(Place::Hier(h)) => h.barrier(&c, c.next_seq())?,
        Some(Place::Cross(_)) | None => return Ok(false),
    }
    Ok(true)
}

/// The bytes of a call in the segment: the program's buffer itself for a contiguous datatype,
/// else a packed copy (the choice of algorithm depends on the type signature only, which MPI
/// makes the same at every rank; the layout may differ).
enum Bytes {
    User(P),
    Packed(Vec<u8>),
}

impl Bytes {
    fn of(t: &Dtype, p: *const c_void, n: usize, fill: bool) -> Bytes {
        if t.contig {
            Bytes::User(P::new(p))
        } else if fill {
            Bytes::Packed(packed(t, p, n))
        } else {
            Bytes::Packed(vec![0u8; n * t.size])
        }
    }

    fn ptr(&mut self) -> P {
        match self {
            Bytes::User(p) => *p,
            Bytes::Packed(v) => P::new(v.as_mut_ptr()),
        }
    }

    /// Back into the program's buffer at `p` (nothing for a contiguous type: it was there).
    fn unpack(self, t: &Dtype, p: *mut c_void, n: usize) {
        if let Bytes::Packed(v) = self {
            unpacked(t, &v, p, n);
        }
    }
}

/// MPI_Bcast in the segment or through the hosts' leaders; false when it runs as messages.
fn bcast_shm(buffer: *mut c_void, count_: c_int, datatype: H, root: c_int, comm: H) -> R<bool> {
    let Some((c, Some(t))) = shm_args(comm, Some(datatype))? else {
        return Ok(false);
    };
    let n = count(count_)?;
    let root = root_of(&c, root)?;
    let len = n * t.size;
    let Some(place) = place_for(&c, Coll::Bcast, len, len, None)? else {
        return Ok(false);
    };
    let mut data = Bytes::of(&t, buffer, n, c.rank == root);
    // SAFETY: MPI's rule for the buffer (see user_bytes), or our packed copy.
    let buf = unsafe { user_bytes(data.ptr(), len) };
    match place {
        Place::Shm(g) => g.bcast(root, buf).map_err(|e| from_recv(&e))?,
        // (A broadcast never reads across: see `ShmGroup::allgather_cross`.)
        Place::Cross(_) => return Ok(false),
        Place::Hier(h) => h.bcast(&c, c.next_seq(), root, buf)?,
    }
    if c.rank != root {
        data.unpack(&t, buffer, n);
    }
    Ok(true)
}

/// MPI_Reduce (`root`) and MPI_Allreduce (None) in the segment (every rank's contribution
/// written once, folded in rank order) or, for an allreduce over several hosts, through the
/// hosts' leaders; false when it runs as messages.
#[allow(clippy::too_many_arguments)]
fn reduce_shm(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count_: c_int,
    datatype: H,
    op_h: H,
    root: Option<c_int>,
    comm: H,
) -> R<bool> {
    let Some((c, Some(t))) = shm_args(comm, Some(datatype))? else {
        return Ok(false);
    };
    let n = count(count_)?;
    let root = root.map(|r| root_of(&c, r)).transpose()?;
    let op = op_for(op_h, &t, datatype, n)?;
    let len = n * t.size;
    let coll = if root.is_some() {
        Coll::Reduce
    } else {
        Coll::Allreduce
    };
    let Some(place) = place_for(&c, coll, len, n, Some(op))? else {
        return Ok(false);
    };
    let folds = root.is_none_or(|r| r == c.rank);
    let src = if in_place(sendbuf) && folds {
        recvbuf as *const c_void
    } else {
        sendbuf
    };
    let mut mine = Bytes::of(&t, src, n, true);
    let mut out = Bytes::of(&t, recvbuf, n, false);
    let red = algos::Red {
        op,
        t: &t,
        th: datatype,
    };
    match place {
        Place::Shm(g) => reduce_in_slots(g, root, red, n, mine.ptr(), out.ptr())?,
        // An allreduce's only (`Algo::Direct` is not a reduce's).
        Place::Cross(g) => {
            let (mp, op_) = (mine.ptr(), out.ptr());
            // SAFETY: MPI's rule for the program's buffers (see user_bytes), or packed copies;
            // distinct unless the reduction is in place, when only `out` is made.
            let (send, o) = unsafe {
                (
                    (mp.get() != op_.get()).then(|| user_bytes_ref(mp, len)),
                    user_bytes(op_, len),
                )
            };
            g.allreduce_cross(send, o, t.size, |x, acc| {
                apply(op, &t, datatype, x.len() / t.size, x, acc).map_err(FoldFail::Op)
            })
            .map_err(FoldFail::into_fail)?
        }
        Place::Hier(h) => match root {
            Some(r) => h.reduce(&c, c.next_seq(), red, n, r, mine.ptr(), out.ptr())?,
            None => h.allreduce(&c, c.next_seq(), red, n, mine.ptr(), out.ptr())?,
        },
    }
    if folds {
        out.unpack(&t, recvbuf, n);
    }
    Ok(true)
}

/// `CommCore::short_memo`: a choice was made (for the call's operation, datatype, count and
/// bytes in the low bits: see `short_key`)...
const SHORT_SEEN: u64 = 1 << 63;
/// ... and it was the segment's slots.
const SHORT_SHM: u64 = 1 << 62;

/// `CommCore::short_memo`'s entries.
const SHORT_ALLREDUCE: usize = 0;
const SHORT_REDUCE: usize = 1;
const SHORT_BCAST: usize = 2;

/// The most bytes of a short path's call (`reduce_short`, `bcast_short`): one flag line's.
const SHORT_BYTES: usize = volley::SHM_COLL_INLINE;

/// A short call's memo key: its operation (OP_NULL for none), datatype (both the ABI's small
/// constants), count and bytes (each at most SHORT_BYTES), each in its own byte.
fn short_key(op: H, datatype: H, n: usize, len: usize) -> u64 {
    SHORT_SEEN
        | ((op - abi::OP_NULL) as u64) << 24
        | ((datatype - abi::DATATYPE_NULL) as u64) << 16
        | (n as u64) << 8
        | len as u64
}

/// The short paths' choice: whether call `coll` (entry `which` of the memo, its key `key`)
/// meets in the segment's slots. From the communicator's memo of its last such call when the
/// key is the same (every other input of the choice is the communicator's, and the arguments
/// `check` checked then are the same), else `check`ed, chosen as `place_for` would choose for
/// a communicator of one host (a choice that would read across the ranks' memory is left to
/// it) and remembered.
#[allow(clippy::too_many_arguments)]
fn short_in_slots(
    c: &CommCore,
    which: usize,
    coll: Coll,
    key: u64,
    len: usize,
    n: usize,
    op: Option<Op>,
    check: impl FnOnce() -> R,
) -> R<bool> {
    use std::sync::atomic::Ordering::Relaxed;
    let memo = &c.short_memo[which];
    let was = memo.load(Relaxed);
    if was & !SHORT_SHM == key {
        return Ok(was & SHORT_SHM != 0);
    }
    check()?;
    let sh = Shape {
        shared: true,
        spread: false,
        ..shape(len, c.size(), n, op)
    };
    let shm = collectives::select(coll, Shape { cross: true, ..sh }) != Algo::Direct
        && collectives::select(coll, sh) == Algo::Shm;
    memo.store(key | if shm { SHORT_SHM } else { 0 }, Relaxed);
    Ok(shm)
}

/// A short path's count and bytes: some elements of a predefined type, at most SHORT_BYTES in
/// all; None for the general path.
fn short_count(count_: c_int, datatype: H) -> Option<(usize, usize)> {
    let size = crate::dtype::predefined_contig_size(datatype)?;
    let n = usize::try_from(count_).ok().filter(|&n| n > 0)?;
    Some((n, n * size)).filter(|&(_, len)| len <= SHORT_BYTES)
}

/// The communicator's slots for a short path's call, borrowed from the state `rt`: None where
/// the general path must decide (a non-blocking collective in flight, which moves on only
/// where the state is free, and the short paths hold it while they wait; ranks on several
/// hosts; slots not claimed yet, which takes the general path's first call).
fn short_group(rt: &crate::state::Rt, comm: H) -> R<Option<(&CommCore, &volley::ShmGroup)>> {
    if !rt.nbcs.is_empty() {
        return Ok(None);
    }
    let c = &rt.comm_slot(comm)?.core;
    Ok(match c.shm.get() {
        Some(Some(g)) if c.shared => Some((c, g)),
        _ => None,
    })
}

/// MPI_Allreduce's (`root` None) and MPI_Reduce's path for a short vector (at most one flag
/// line's bytes) of a predefined type with a predefined operation, on a communicator whose
/// ranks share this host and have met in the segment before: the reduction `reduce_shm` makes
/// (the same slots, the same association, so the same bits), with the communicator borrowed
/// from the state instead of counted, the choice of algorithm and the operation's check
/// remembered from the last call of the same operation, type and count (`short_in_slots`),
/// and no buffer from the scratch list. That bookkeeping was most of an 8-byte allreduce's
/// instructions. false: the general path decides.
#[allow(clippy::too_many_arguments)]
fn reduce_short(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count_: c_int,
    datatype: H,
    op_h: H,
    root: Option<c_int>,
    comm: H,
) -> R<bool> {
    let Some((n, len)) = short_count(count_, datatype).filter(|_| is_predefined_reduction(op_h))
    else {
        return Ok(false);
    };
    let rt = rt()?;
    let Some((c, g)) = short_group(&rt, comm)? else {
        return Ok(false);
    };
    let root = root.map(|r| root_of(c, r)).transpose()?;
    let t = committed(&rt, datatype)?;
    let op = Op::Predefined(op_h);
    let (which, coll) = match root {
        Some(_) => (SHORT_REDUCE, Coll::Reduce),
        None => (SHORT_ALLREDUCE, Coll::Allreduce),
    };
    let key = short_key(op_h, datatype, n, len);
    let check = || op_for(op_h, &t, datatype, n).map(drop);
    if !short_in_slots(c, which, coll, key, len, n, Some(op), check)? {
        return Ok(false);
    }
    let folds = root.is_none_or(|r| r == c.rank);
    let src = if in_place(sendbuf) && folds {
        recvbuf as *const c_void
    } else {
        sendbuf
    };
    let red = algos::Red {
        op,
        t: &t,
        th: datatype,
    };
    reduce_in_slots(g, root, red, n, P::new(src), P::new(recvbuf))?;
    Ok(true)
}

/// MPI_Bcast's path for a short message (at most one flag line's bytes) of a predefined type,
/// as `reduce_short` for a reduction: `bcast_shm`'s broadcast without its bookkeeping.
fn bcast_short(buffer: *mut c_void, count_: c_int, datatype: H, root: c_int, comm: H) -> R<bool> {
    let Some((n, len)) = short_count(count_, datatype) else {
        return Ok(false);
    };
    let rt = rt()?;
    let Some((c, g)) = short_group(&rt, comm)? else {
        return Ok(false);
    };
    let root = root_of(c, root)?;
    let key = short_key(abi::OP_NULL, datatype, n, len);
    if !short_in_slots(c, SHORT_BCAST, Coll::Bcast, key, len, len, None, || Ok(()))? {
        return Ok(false);
    }
    // SAFETY: MPI's rule for the buffer (see user_bytes): count elements of a contiguous type.
    let buf = unsafe { user_bytes(P::new(buffer), len) };
    g.bcast(root, buf).map_err(|e| from_recv(&e))?;
    Ok(true)
}

/// A reduction in the group's slots: `n` elements at `mine` contributed, folded in rank order
/// into `out` at `root` (every member when None). `mine` may be `out` (MPI_IN_PLACE): the
/// contribution is copied into the slot before `out` is written.
pub(crate) fn reduce_in_slots(
    g: &volley::ShmGroup,
    root: Option<usize>,
    red: algos::Red,
    n: usize,
    mine: P,
    out: P,
) -> R {
    let len = n * red.t.size;
    // SAFETY: MPI's rule for the program's buffers (see user_bytes), or the caller's packed
    // copies; this slice ends before `out`'s are made.
    let contribution = g
        .contribute(root, unsafe { user_bytes(mine, len) })
        .map_err(|e| from_recv(&e))?;
    // Of two members, recursive doubling's association is the rank order's (c0 op c1): the
    // plain fold below, with no tree to keep.
    if root.is_none() && g.size() > 2 {
        return fold_as_recursive_doubling(g, contribution, red, n, out);
    }
    let last = g.size() - 1;
    g.fold(contribution, |i, data| {
        // SAFETY: as above; only where this rank folds, whose receive buffer MPI gives.
        let o = unsafe { user_bytes(out, len) };
        if i == last {
            o.copy_from_slice(data);
            Ok(())
        } else {
            apply(red.op, red.t, red.th, n, data, o).map_err(FoldFail::Op)
        }
    })
    .map_err(FoldFail::into_fail)
}

/// An allreduce's fold through the segment, in recursive doubling's association (see
/// [`TreeFold`]).
fn fold_as_recursive_doubling(
    g: &volley::ShmGroup,
    contribution: volley::Contribution,
    red: algos::Red,
    n: usize,
    out: P,
) -> R {
    let len = n * red.t.size;
    let mut tree = TreeFold::new(g.size(), len);
    g.fold(contribution, |i, data| {
        // SAFETY: as in reduce_in_slots; every member folds an allreduce.
        let o = unsafe { user_bytes(out, len) };
        tree.push(i, data, o, |x, acc| {
            apply(red.op, red.t, red.th, n, x, acc).map_err(FoldFail::Op)
        })
    })
    .map_err(FoldFail::into_fail)
}

/// Folds the contributions of an allreduce's `p` members as recursive doubling associates them
/// (volley's own algorithm between hosts, MPICH's and Open MPI's for short vectors, MPICH's
/// recursive halving for long ones): with p2 the largest power of two at most `p` and rem =
/// p - p2, the pairs (0, 1), (2, 3), ... (2 rem - 2, 2 rem - 1) first, then the p2 results and
/// the remaining contributions, in rank order, as a balanced binary tree; always the lower
/// ranks' on the left. Floating-point sums then come out to the last bit as those libraries
/// give them, which programs compare against saved outputs (SUNDIALS's cvAdvDiff_diag_p took
/// 422 steps where MPICH's answer file says 497 when volley folded left to right; hypre's
/// residual norms differed from its saved ones in the 2nd to 7th digit).
///
/// The contributions come from the last member down ([`TreeFold::push`]): a stack of partial
/// results, each covering an aligned run of 2^k of the p2 terms, two of a size merged at once;
/// member 0's push leaves the whole result at the bottom, and it is copied out. Memory: a
/// scratch buffer of log2(p) + 3 vectors, kept between calls.
pub(crate) struct TreeFold {
    len: usize,
    rem: usize,
    /// The odd member of a pair waiting for its even partner, then the stack's slots.
    scratch: Room,
    /// The level (log2 of the terms covered) of each stacked partial result.
    levels: [u8; usize::BITS as usize + 1],
    depth: usize,
}

impl TreeFold {
    pub(crate) fn new(p: usize, len: usize) -> TreeFold {
        let slots = (usize::BITS - p.leading_zeros()) as usize + 1;
        TreeFold {
            len,
            rem: p - algos::pow2_below(p),
            scratch: Room::new((slots + 1) * len),
            levels: [0; usize::BITS as usize + 1],
            depth: 0,
        }
    }

    /// Member `i`'s contribution `data`, members coming from the last down to 0; member 0's
    /// push writes the result into `out`. `apply(x, acc)` makes `acc = x op acc`.
    pub(crate) fn push<E>(
        &mut self,
        i: usize,
        data: &[u8],
        out: &mut [u8],
        mut apply: impl FnMut(&[u8], &mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let len = self.len;
        let (pending, slots) = self.scratch.bytes().split_at_mut(len);
        // The term this contribution makes: a pair's odd member waits for its even one.
        let term: &[u8] = if i < 2 * self.rem {
            if i % 2 == 1 {
                pending.copy_from_slice(data);
                return Ok(());
            }
            apply(data, pending)?;
            pending
        } else {
            data
        };
        let (levels, depth) = (&mut self.levels, &mut self.depth);
        // A partial result of the term's size on top takes it (on the left); then two of a
        // size on top merge, the newer (lower ranks) on the left.
        if *depth > 0 && levels[*depth - 1] == 0 {
            apply(term, &mut slots[(*depth - 1) * len..*depth * len])?;
            levels[*depth - 1] = 1;
            while *depth >= 2 && levels[*depth - 2] == levels[*depth - 1] {
                let (below, top) = slots.split_at_mut((*depth - 1) * len);
                apply(&top[..len], &mut below[(*depth - 2) * len..])?;
                *depth -= 1;
                levels[*depth - 1] += 1;
            }
        } else {
            slots[*depth * len..(*depth + 1) * len].copy_from_slice(term);
            levels[*depth] = 0;
            *depth += 1;
        }
        if i == 0 {
            out.copy_from_slice(&slots[..len]);
        }
        Ok(())
    }
}

/// Bytes of `TreeFold`'s room kept on the stack: an 8-byte vector's for any communicator (32
/// partial results), a 32-byte one's below 64 ranks.
const ROOM_ON_STACK: usize = 256;

/// `TreeFold`'s room: on the stack when short (an 8-byte allreduce's), else a buffer from the
/// scratch list (taking and giving one back was an eighth of an 8-byte allreduce).
// The large variant is the point: the short case's room lives on the stack.
#[allow(clippy::large_enum_variant)]
enum Room {
    Stack([u8; ROOM_ON_STACK], usize),
    Kept(crate::scratch::Scratch),
}

impl Room {
    fn new(len: usize) -> Room {
        if len <= ROOM_ON_STACK {
            Room::Stack([0; ROOM_ON_STACK], len)
        } else {
            Room::Kept(crate::scratch::Scratch::new(len))
        }
    }

    fn bytes(&mut self) -> &mut [u8] {
        match self {
            Room::Stack(b, len) => &mut b[..*len],
            Room::Kept(s) => s,
        }
    }
}

/// MPI_Allgather in the segment: every rank's block written once into its slot, read by every
/// rank into its place; false when it runs as messages.
#[allow(clippy::too_many_arguments)]
fn allgather_shm(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    comm: H,
) -> R<bool> {
    let Some((c, Some(t))) = shm_args(comm, Some(recvtype))? else {
        return Ok(false);
    };
    let rn = count(recvcount)?;
    let len = rn * t.size;
    let Some(place) = place_for(&c, Coll::Allgather, len, len, None)? else {
        return Ok(false);
    };
    let mut mine = if in_place(sendbuf) {
        Bytes::of(&t, at(recvbuf, (c.rank * rn) as isize, &t), rn, true)
    } else {
        let st = committed(&*rt()?, sendtype)?;
        let sn = count(sendcount)?;
        if sn * st.size != len {
            return Err(fail(
                class::TRUNCATE,
                format!(
                    "MPI_Allgather: each rank receives {len} bytes per rank, this rank sends {}",
                    sn * st.size
                ),
            ));
        }
        Bytes::of(&st, sendbuf, sn, true)
    };
    let k = c.size();
    let mut out = Bytes::of(&t, recvbuf, rn * k, false);
    match place {
        Place::Shm(g) => gather_in_slots(g, None, mine.ptr(), len, out.ptr())?,
        Place::Cross(g) => {
            let (mp, op) = (mine.ptr(), out.ptr());
            // SAFETY: MPI's rule for the program's buffers (see user_bytes), or packed copies;
            // in place, this rank's block is already inside `out` and only `out` is made.
            let (own, o) = unsafe {
                let in_out = mp.get() as usize == op.get() as usize + c.rank * len;
                (
                    (!in_out).then(|| user_bytes_ref(mp, len)),
                    user_bytes(op, len * k),
                )
            };
            g.allgather_cross(own, o).map_err(|e| from_recv(&e))?
        }
        Place::Hier(h) => h.allgather(&c, c.next_seq(), mine.ptr(), len, out.ptr())?,
    }
    out.unpack(&t, recvbuf, rn * k);
    Ok(true)
}

/// Every member's block of `len` bytes at `mine` written once into its slot, and read into its
/// place in `out` (a block per member) by `root`, or by every member when None. `out` is
/// touched only where blocks are read. `mine` may lie inside `out` (MPI_IN_PLACE): it is
/// copied into the slot before `out` is written.
pub(crate) fn gather_in_slots(
    g: &volley::ShmGroup,
    root: Option<usize>,
    mine: P,
    len: usize,
    out: P,
) -> R {
    let k = g.size();
    // SAFETY: MPI's rule for the program's buffers (see user_bytes), or the caller's packed
    // copies; this slice ends before `out`'s are made.
    let contribution = g
        .contribute(root, unsafe { user_bytes(mine, len) })
        .map_err(|e| from_recv(&e))?;
    g.fold(contribution, |i, data| {
        // SAFETY: as above; only where this rank reads the blocks, whose receive buffer holds
        // every member's.
        let o = unsafe { user_bytes(out, len * k) };
        o[i * len..(i + 1) * len].copy_from_slice(data);
        Ok::<(), FoldFail>(())
    })
    .map_err(FoldFail::into_fail)
}

/// MPI_Gather in the segment: every rank's block written once into its slot, read by the root
/// into its place; false when it runs as messages.
#[allow(clippy::too_many_arguments)]
fn gather_shm(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    root: c_int,
    comm: H,
) -> R<bool> {
    let Some((c, _)) = shm_args(comm, None)? else {
        return Ok(false);
    };
    let root = root_of(&c, root)?;
    let is_root = c.rank == root;
    let place = is_root && in_place(sendbuf);
    let (st_, rt_) = two_types(sendtype, recvtype, !place, is_root)?;
    let rn = if is_root { count(recvcount)? } else { 0 };
    let (len, mut mine) = match &st_ {
        Some(st) => {
            let sn = count(sendcount)?;
            (sn * st.size, Bytes::of(st, sendbuf, sn, true))
        }
        None => {
            // MPI_IN_PLACE: the root's block is already in place in recvbuf.
            let t = rt_.as_ref().expect("the root's receive type");
            let p = at(recvbuf, (root * rn) as isize, t);
            (rn * t.size, Bytes::Packed(packed(t, p, rn)))
        }
    };
    if let Some(t) = &rt_ {
        if rn * t.size != len {
            return Err(fail(
                class::TRUNCATE,
                format!(
                    "MPI_Gather: the root receives {} bytes per rank, this rank sends {len}",
                    rn * t.size
                ),
            ));
        }
    }
    let Some(Place::Shm(g)) = place_for(&c, Coll::Gather, len, len, None)? else {
        return Ok(false);
    };
    let k = c.size();
    let Some(t) = rt_ else {
        // Away from the root no block is read: nothing is written to `out`.
        gather_in_slots(
            g,
            Some(root),
            mine.ptr(),
            len,
            P::new(std::ptr::null::<u8>()),
        )?;
        return Ok(true);
    };
    let mut out = Bytes::of(&t, recvbuf, rn * k, false);
    gather_in_slots(g, Some(root), mine.ptr(), len, out.ptr())?;
    out.unpack(&t, recvbuf, rn * k);
    Ok(true)
}

/// MPI_Scatter in the segment: the root writes every block once into its slot, each rank
/// reads its own; false when it runs as messages.
#[allow(clippy::too_many_arguments)]
fn scatter_shm(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    root: c_int,
    comm: H,
) -> R<bool> {
    let Some((c, _)) = shm_args(comm, None)? else {
        return Ok(false);
    };
    let root = root_of(&c, root)?;
    let is_root = c.rank == root;
    let place = is_root && in_place(recvbuf);
    let (st_, rt_) = two_types(sendtype, recvtype, is_root, !place)?;
    let rn = if place { 0 } else { count(recvcount)? };
    let sn = if is_root { count(sendcount)? } else { 0 };
    let b = match (&st_, &rt_) {
        (Some(st), _) => sn * st.size,
        (None, Some(rt)) => rn * rt.size,
        (None, None) => unreachable!("a rank sends or receives"),
    };
    if let (Some(_), Some(rt)) = (&st_, &rt_) {
        if rn * rt.size != b {
            return Err(fail(
                class::TRUNCATE,
                "MPI_Scatter: send and receive block sizes differ at the root",
            ));
        }
    }
    let Some(Place::Shm(g)) = place_for(&c, Coll::Scatter, b, b, None)? else {
        return Ok(false);
    };
    let k = c.size();
    let mut all = match &st_ {
        Some(st) => Bytes::of(st, sendbuf, sn * k, true),
        None => Bytes::Packed(Vec::new()),
    };
    let all_len = if is_root { b * k } else { 0 };
    // SAFETY: MPI's rule for the root's send buffer, or our packed copy; nothing elsewhere.
    let all_s: &[u8] = unsafe { user_bytes(all.ptr(), all_len) };
    match &rt_ {
        Some(rt) => {
            let mut out = Bytes::of(rt, recvbuf, rn, false);
            // SAFETY: MPI's rule for the receive buffer, or our copy; it is not the send buffer.
            let o = unsafe { user_bytes(out.ptr(), b) };
            g.scatter(root, all_s, o).map_err(|e| from_recv(&e))?;
            out.unpack(rt, recvbuf, rn);
        }
        // MPI_IN_PLACE at the root: its own block stays where it is.
        None => g
            .scatter(root, all_s, &mut vec![0u8; b])
            .map_err(|e| from_recv(&e))?,
    }
    Ok(true)
}

/// MPI_Alltoall in the segment: each rank writes its blocks once into its slot and reads its
/// own block out of every other's; false when it runs as messages.
#[allow(clippy::too_many_arguments)]
fn alltoall_shm(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    comm: H,
) -> R<bool> {
    let Some((c, _)) = shm_args(comm, None)? else {
        return Ok(false);
    };
    let place = in_place(sendbuf);
    let (st_, rt_) = two_types(sendtype, recvtype, !place, true)?;
    let t = rt_.expect("a receive type");
    let rn = count(recvcount)?;
    let b = rn * t.size;
    let sn = match &st_ {
        Some(st) => {
            let sn = count(sendcount)?;
            if sn * st.size != b {
                return Err(fail(
                    class::TRUNCATE,
                    "MPI_Alltoall: send and receive block sizes differ",
                ));
            }
            sn
        }
        None => 0,
    };
    let Some(Place::Shm(g)) = place_for(&c, Coll::Alltoall, b, b, None)? else {
        return Ok(false);
    };
    let k = c.size();
    let mut mine = match &st_ {
        Some(st) => Bytes::of(st, sendbuf, sn * k, true),
        // MPI_IN_PLACE: the blocks to send are in recvbuf, which the result replaces: a copy.
        None => Bytes::Packed(packed(&t, recvbuf, rn * k)),
    };
    let mut out = Bytes::of(&t, recvbuf, rn * k, false);
    // SAFETY: MPI's rule for both buffers (see user_bytes), which do not overlap (MPI_IN_PLACE
    // sends from our copy), or our packed copies.
    let (m, o) = unsafe {
        (
            &*user_bytes(mine.ptr(), b * k),
            user_bytes(out.ptr(), b * k),
        )
    };
    g.alltoall(m, o).map_err(|e| from_recv(&e))?;
    out.unpack(&t, recvbuf, rn * k);
    Ok(true)
}

/// Why a fold in the segment failed: the operation, or a member lost.
pub(crate) enum FoldFail {
    Op(crate::Fail),
    Lost(volley::RecvError),
}

impl FoldFail {
    pub(crate) fn into_fail(self) -> crate::Fail {
        match self {
            FoldFail::Op(f) => f,
            FoldFail::Lost(e) => from_recv(&e),
        }
    }
}

impl From<volley::RecvError> for FoldFail {
    fn from(e: volley::RecvError) -> FoldFail {
        FoldFail::Lost(e)
    }
}

/// Broadcast of `buf` from `root`, by the algorithm chosen for its size.
pub async fn bcast_a(c: &CommCore, s: Seq, root: usize, buf: &mut [u8]) -> R {
    let sh = shape(buf.len(), c.size(), buf.len(), None);
    match collectives::select(Coll::Bcast, sh) {
        Algo::ScatterRing => algos::bcast_scatter_ring(c, s, root, buf).await,
        _ => bcast_binomial(c, s, root, buf).await,
    }
}

/// Binomial-tree broadcast of `buf` from `root`.
async fn bcast_binomial(c: &CommCore, s: Seq, root: usize, buf: &mut [u8]) -> R {
    let n = c.size();
    let tag = s.tag(TAG_BCAST);
    let rel = (c.rank + n - root) % n;
    let mut mask = 1;
    while mask < n {
        if rel & mask != 0 {
            let src = (rel - mask + root) % n;
            exchange_a(c, &[], &mut [(src, tag, buf)]).await?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < n {
            let dst = (rel + mask + root) % n;
            exchange_a(c, &[(dst, tag, buf)], &mut []).await?;
        }
        mask >>= 1;
    }
    Ok(())
}

/// Gathers equal blocks at `root` (`all` holds size blocks there; elsewhere unused).
pub async fn gather_a(
    c: &CommCore,
    s: Seq,
    root: usize,
    mine: &[u8],
    all: &mut [u8],
    kind: u32,
) -> R {
    let tag = s.tag(kind);
    if c.rank != root {
        return exchange_a(c, &[(root, tag, mine)], &mut []).await;
    }
    let b = mine.len();
    let mut blocks: Vec<&mut [u8]> = if b == 0 {
        // Empty blocks: still hear from everyone.
        (0..c.size()).map(|_| &mut [][..]).collect()
    } else {
        all.chunks_mut(b).take(c.size()).collect()
    };
    blocks[root].copy_from_slice(mine);
    let mut recvs: Vec<(usize, u32, &mut [u8])> = blocks
        .into_iter()
        .enumerate()
        .filter(|(r, _)| *r != root)
        .map(|(r, blk)| (r, tag, blk))
        .collect();
    exchange_a(c, &[], &mut recvs).await
}

/// Every rank's block (`mine`, the same size everywhere) to every rank, in rank order in `all`.
/// Allgather of `b`-byte blocks into `all`; `mine` is this rank's block, or None where it is in
/// `all` already (MPI_IN_PLACE).
pub async fn allgather_a(c: &CommCore, s: Seq, mine: Option<&[u8]>, all: &mut [u8]) -> R {
    let b = all.len() / c.size().max(1);
    let me = c.rank * b..(c.rank + 1) * b;
    match collectives::select(Coll::Allgather, shape(b, c.size(), b, None)) {
        a @ (Algo::RecursiveDoubling | Algo::Ring) => {
            // The first exchange sends this rank's block from where the program wrote it, not
            // from a copy (whose lines would be dirty in this core's cache, slower for the peer
            // to read: 2 ranks, 64 KiB blocks, 20.9 -> 5-6 us), and copies it into `all` while
            // the messages move.
            if a == Algo::Ring {
                algos::allgather_ring(c, s, all, b, mine).await
            } else {
                algos::allgather_recursive_doubling(c, s, all, b, mine).await
            }
        }
        _ => {
            let own;
            let mine = match mine {
                Some(m) => m,
                None => {
                    own = all[me].to_vec();
                    &own
                }
            };
            gather_a(c, s, 0, mine, all, TAG_GATHER).await?;
            bcast_a(c, s, 0, all).await
        }
    }
}

/// The blocking forms the communicator functions use (each one collective of `c`'s).
pub fn bcast_bytes(c: &CommCore, root: usize, buf: &mut [u8]) -> R {
    block_on(bcast_a(c, c.next_seq(), root, buf))
}

pub fn gather_bytes(c: &CommCore, root: usize, mine: &[u8], all: &mut [u8], kind: u32) -> R {
    block_on(gather_a(c, c.next_seq(), root, mine, all, kind))
}

pub fn allgather_bytes(c: &CommCore, mine: &[u8], all: &mut [u8]) -> R {
    block_on(allgather_a(c, c.next_seq(), Some(mine), all))
}

/// A reduction operation: predefined, or the program's.
#[derive(Clone, Copy)]
pub enum Op {
    Predefined(H),
    User(UserOp),
}

impl Op {
    /// Whether the operation commutes (every predefined one does).
    pub fn commutative(self) -> bool {
        match self {
            Op::Predefined(_) => true,
            Op::User(u) => u.commute,
        }
    }
}

/// The operation `h` names, checked against the datatype it will combine (`t`, handle `th`)
/// on every rank at the call, before anything moves: a predefined operation the type does not
/// take (MPI-3.1 5.9.2: MPI_MAX on MPI_BYTE, say) is MPI_ERR_OP on every rank, not only on
/// those that happen to fold (MPICH's errors/coll/rerr). Only where there are elements to
/// combine (`n`): a call of none, or a rank that only passes MPI_PROC_NULL, passes whatever
/// type it likes (mpi4py's intercommunicator tests pass MPI_BYTE with no buffer).
pub fn op_for(h: H, t: &Dtype, th: H, n: usize) -> R<Op> {
    let op = op_of(h)?;
    if let (Op::Predefined(_), true) = (op, n > 0) {
        // No elements: the table is consulted, nothing is touched.
        apply(op, t, th, 0, &[], &mut [])?;
    }
    Ok(op)
}

/// Whether `h` is one of MPI's predefined reduction operations (not MPI_REPLACE or MPI_NO_OP,
/// which only the one-sided accumulates take).
fn is_predefined_reduction(h: H) -> bool {
    matches!(
        h,
        abi::SUM
            | abi::MIN
            | abi::MAX
            | abi::PROD
            | abi::BAND
            | abi::BOR
            | abi::BXOR
            | abi::LAND
            | abi::LOR
            | abi::LXOR
            | abi::MINLOC
            | abi::MAXLOC
    )
}

pub fn op_of(h: H) -> R<Op> {
    match h {
        h if is_predefined_reduction(h) => Ok(Op::Predefined(h)),
        abi::REPLACE | abi::NO_OP => Ok(Op::Predefined(h)),
        h => {
            let rt = rt()?;
            index(KIND_OP, h)
                .and_then(|i| rt.ops.get(i).copied().flatten())
                .map(Op::User)
                .ok_or_else(|| fail(class::OP, format!("{h:#x} is not an operation handle")))
        }
    }
}

fn op_name(h: H) -> &'static str {
    match h {
        abi::SUM => "MPI_SUM",
        abi::MIN => "MPI_MIN",
        abi::MAX => "MPI_MAX",
        abi::PROD => "MPI_PROD",
        abi::BAND => "MPI_BAND",
        abi::BOR => "MPI_BOR",
        abi::BXOR => "MPI_BXOR",
        abi::LAND => "MPI_LAND",
        abi::LOR => "MPI_LOR",
        abi::LXOR => "MPI_LXOR",
        abi::MINLOC => "MPI_MINLOC",
        abi::MAXLOC => "MPI_MAXLOC",
        abi::REPLACE => "MPI_REPLACE",
        _ => "MPI_NO_OP",
    }
}

/// `inout[i] = input[i] op inout[i]` over the elements of two byte buffers. Where both are
/// aligned for the type (the common case: the program's arrays and volley's scratch), a plain
/// loop over typed slices, which the compiler vectorises (MPI_SUM of 64 Ki doubles on the VM:
/// 61 us byte-wise, Open MPI 10.6); else element by element through byte copies.
macro_rules! each {
    ($t:ty, $a:expr, $b:expr, |$x:ident, $y:ident| $e:expr) => {{
        const S: usize = std::mem::size_of::<$t>();
        let (a, b): (&mut [u8], &[u8]) = ($a, $b);
        let n = a.len().min(b.len()) / S;
        if a.as_ptr().cast::<$t>().is_aligned() && b.as_ptr().cast::<$t>().is_aligned() {
            // SAFETY: both pointers are aligned for the type and hold n whole elements; every
            // bit pattern is a valid integer or float; the two buffers do not overlap (one is
            // borrowed mutably, the other shared).
            let (ta, tb) = unsafe {
                (
                    std::slice::from_raw_parts_mut(a.as_mut_ptr() as *mut $t, n),
                    std::slice::from_raw_parts(b.as_ptr() as *const $t, n),
                )
            };
            for (o, &i) in ta.iter_mut().zip(tb) {
                let $x = i;
                let $y = *o;
                *o = $e;
            }
        } else {
            for (o, i) in a.chunks_exact_mut(S).zip(b.chunks_exact(S)) {
                let $x = <$t>::from_ne_bytes(i.try_into().expect("chunk"));
                let $y = <$t>::from_ne_bytes((&*o).try_into().expect("chunk"));
                let r: $t = $e;
                o.copy_from_slice(&r.to_ne_bytes());
            }
        }
    }};
}

macro_rules! arith {
    ($t:ty, $op:expr, $a:expr, $b:expr, $int:expr) => {{
        match $op {
            abi::SUM => each!($t, $a, $b, |x, y| x + y),
            abi::PROD => each!($t, $a, $b, |x, y| x * y),
            abi::MIN => each!($t, $a, $b, |x, y| if x < y { x } else { y }),
            abi::MAX => each!($t, $a, $b, |x, y| if x > y { x } else { y }),
            abi::LAND => each!(
                $t,
                $a,
                $b,
                |x, y| ((x != (0 as $t)) && (y != (0 as $t))) as u8 as $t
            ),
            abi::LOR => each!(
                $t,
                $a,
                $b,
                |x, y| ((x != (0 as $t)) || (y != (0 as $t))) as u8 as $t
            ),
            abi::LXOR => each!(
                $t,
                $a,
                $b,
                |x, y| ((x != (0 as $t)) != (y != (0 as $t))) as u8 as $t
            ),
            _ => return Err($int),
        }
    }};
}

macro_rules! bits {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        match $op {
            abi::BAND => each!($t, $a, $b, |x, y| x & y),
            abi::BOR => each!($t, $a, $b, |x, y| x | y),
            abi::BXOR => each!($t, $a, $b, |x, y| x ^ y),
            _ => {}
        }
    }};
}

/// MINLOC / MAXLOC on packed (value, int) pairs: the int at `$ioff`, `$ext` bytes a pair.
macro_rules! loc {
    ($t:ty, $op:expr, $a:expr, $b:expr, $ioff:expr, $ext:expr) => {{
        const S: usize = std::mem::size_of::<$t>();
        for (o, i) in $a.chunks_exact_mut($ext).zip($b.chunks_exact($ext)) {
            let xv = <$t>::from_ne_bytes(i[..S].try_into().expect("chunk"));
            let xi = i32::from_ne_bytes(i[$ioff..$ioff + 4].try_into().expect("chunk"));
            let yv = <$t>::from_ne_bytes(o[..S].try_into().expect("chunk"));
            let yi = i32::from_ne_bytes(o[$ioff..$ioff + 4].try_into().expect("chunk"));
            let better = if $op == abi::MINLOC { xv < yv } else { xv > yv };
            let (v, k) = if better {
                (xv, xi)
            } else if xv == yv {
                (xv, xi.min(yi))
            } else {
                (yv, yi)
            };
            o[..S].copy_from_slice(&v.to_ne_bytes());
            o[$ioff..$ioff + 4].copy_from_slice(&k.to_ne_bytes());
        }
    }};
}

/// MINLOC / MAXLOC on pairs whose index has the value's type (Fortran's MPI_2REAL and
/// MPI_2DOUBLE_PRECISION): ties take the smaller index.
macro_rules! loc_same {
    ($t:ty, $op:expr, $a:expr, $b:expr) => {{
        const S: usize = std::mem::size_of::<$t>();
        for (o, i) in $a.chunks_exact_mut(2 * S).zip($b.chunks_exact(2 * S)) {
            let xv = <$t>::from_ne_bytes(i[..S].try_into().expect("chunk"));
            let xi = <$t>::from_ne_bytes(i[S..].try_into().expect("chunk"));
            let yv = <$t>::from_ne_bytes(o[..S].try_into().expect("chunk"));
            let yi = <$t>::from_ne_bytes(o[S..].try_into().expect("chunk"));
            let better = if $op == abi::MINLOC { xv < yv } else { xv > yv };
            let (v, k) = if better {
                (xv, xi)
            } else if xv == yv {
                (xv, if xi < yi { xi } else { yi })
            } else {
                (yv, yi)
            };
            o[..S].copy_from_slice(&v.to_ne_bytes());
            o[S..].copy_from_slice(&k.to_ne_bytes());
        }
    }};
}

/// inout = in op inout, element by element, for `count` elements of `t` (packed).
pub fn apply(op: Op, t: &Dtype, dtype_h: H, count: usize, input: &[u8], inout: &mut [u8]) -> R {
    match op {
        Op::User(u) => {
            let mut n = count as c_int;
            let mut h = dtype_h;
            // The program's function sees the elements as the datatype lays them out; packed
            // data of a contiguous type is exactly that. Non-contiguous types are unpacked
            // around the call.
            if t.contig {
                // SAFETY: a function the program registered with MPI_Op_create, called as MPI
                // defines, on count elements of the datatype in each buffer.
                unsafe {
                    (u.f)(
                        input.as_ptr() as *mut c_void,
                        inout.as_mut_ptr() as *mut c_void,
                        &mut n,
                        &mut h,
                    )
                };
            } else {
                let span = (t.extent() as usize) * count;
                let mut a = vec![0u8; span + t.true_ub.max(0) as usize];
                let mut b = a.clone();
                let base = (-t.lb).max(0) as usize;
                // SAFETY: a and b hold count elements of the type from base.
                unsafe {
                    t.unpack(input, a.as_mut_ptr().add(base), count);
                    t.unpack(inout, b.as_mut_ptr().add(base), count);
                    (u.f)(
                        a.as_mut_ptr().add(base) as *mut c_void,
                        b.as_mut_ptr().add(base) as *mut c_void,
                        &mut n,
                        &mut h,
                    );
                    t.pack(b.as_ptr().add(base), count, inout);
                }
            }
            Ok(())
        }
        Op::Predefined(abi::REPLACE) => {
            inout.copy_from_slice(input);
            Ok(())
        }
        Op::Predefined(abi::NO_OP) => Ok(()),
        Op::Predefined(o) => {
            let b = t.basic.ok_or_else(|| {
                fail(
                    class::OP,
                    format!(
                        "{} needs a datatype made of one predefined type",
                        op_name(o)
                    ),
                )
            })?;
            let unsupported = || {
                fail(
                    class::OP,
                    format!("{} is not defined on datatype {:?}", op_name(o), b),
                )
            };
            use Basic::*;
            let bitwise = matches!(o, abi::BAND | abi::BOR | abi::BXOR);
            let loc = matches!(o, abi::MINLOC | abi::MAXLOC);
            match b {
                LongDouble | LongDoubleComplex | LongDoubleInt => {
                    let code = match (b, o) {
                        (LongDoubleInt, abi::MINLOC) => LdOp::MinLoc,
                        (LongDoubleInt, abi::MAXLOC) => LdOp::MaxLoc,
                        (LongDoubleComplex, abi::SUM) => LdOp::CSum,
                        (LongDoubleComplex, abi::PROD) => LdOp::CProd,
                        (LongDouble, abi::SUM) => LdOp::Sum,
                        (LongDouble, abi::PROD) => LdOp::Prod,
                        (LongDouble, abi::MIN) => LdOp::Min,
                        (LongDouble, abi::MAX) => LdOp::Max,
                        (LongDouble, abi::LAND) => LdOp::Land,
                        (LongDouble, abi::LOR) => LdOp::Lor,
                        (LongDouble, abi::LXOR) => LdOp::Lxor,
                        _ => return Err(unsupported()),
                    };
                    // The basic elements in the buffers (a derived type holds several per
                    // element: counted from the length, as the other kinds' loops do).
                    let per = match b {
                        LongDouble => 16,
                        LongDoubleComplex => 32,
                        _ => 16 + 4,
                    };
                    let n = inout.len().min(input.len()) / per;
                    // SAFETY: both buffers hold `n` packed basic elements, which is what the C
                    // function reads and writes (by memcpy: no alignment needed).
                    let r = unsafe {
                        volley_long_double_op(code as c_int, input.as_ptr(), inout.as_mut_ptr(), n)
                    };
                    if r != 0 {
                        return Err(unsupported());
                    }
                }
                I8 | U8 | I16 | U16 | I32 | U32 | I64 | U64 | Byte | Bool if bitwise => match b {
                    I8 | U8 | Byte | Bool => bits!(u8, o, inout, input),
                    I16 | U16 => bits!(u16, o, inout, input),
                    I32 | U32 => bits!(u32, o, inout, input),
                    _ => bits!(u64, o, inout, input),
                },
                _ if bitwise => return Err(unsupported()),
                FloatInt | DoubleInt | LongInt | TwoInt | ShortInt if loc => match b {
                    // Packed: the int right after the value.
                    FloatInt => loc!(f32, o, inout, input, 4, 8),
                    DoubleInt => loc!(f64, o, inout, input, 8, 12),
                    LongInt => loc!(i64, o, inout, input, 8, 12),
                    TwoInt => loc!(i32, o, inout, input, 4, 8),
                    _ => loc!(i16, o, inout, input, 2, 6),
                },
                TwoF32 if loc => loc_same!(f32, o, inout, input),
                TwoF64 if loc => loc_same!(f64, o, inout, input),
                _ if loc => return Err(unsupported()),
                I8 => arith!(i8, o, inout, input, unsupported()),
                U8 => arith!(u8, o, inout, input, unsupported()),
                I16 => arith!(i16, o, inout, input, unsupported()),
                U16 => arith!(u16, o, inout, input, unsupported()),
                I32 => arith!(i32, o, inout, input, unsupported()),
                U32 => arith!(u32, o, inout, input, unsupported()),
                I64 => arith!(i64, o, inout, input, unsupported()),
                U64 => arith!(u64, o, inout, input, unsupported()),
                F32 => arith!(f32, o, inout, input, unsupported()),
                F64 => arith!(f64, o, inout, input, unsupported()),
                Bool if matches!(o, abi::LAND | abi::LOR | abi::LXOR) => {
                    arith!(u8, o, inout, input, unsupported())
                }
                C32 | C64 if matches!(o, abi::SUM | abi::PROD) => {
                    if o == abi::SUM {
                        if b == C32 {
                            each!(f32, inout, input, |x, y| x + y)
                        } else {
                            each!(f64, inout, input, |x, y| x + y)
                        }
                    } else {
                        complex_prod(b == C32, inout, input);
                    }
                }
                _ => return Err(unsupported()),
            }
            Ok(())
        }
    }
}

/// The operations of src/long_double.c (its enum, in order).
#[derive(Clone, Copy)]
enum LdOp {
    Sum,
    Prod,
    Min,
    Max,
    Land,
    Lor,
    Lxor,
    MinLoc,
    MaxLoc,
    CSum,
    CProd,
}

extern "C" {
    /// inout[i] = in[i] op inout[i] on `n` packed long double elements (build.rs compiles it).
    fn volley_long_double_op(op: c_int, input: *const u8, inout: *mut u8, n: usize) -> c_int;
}

fn complex_prod(single: bool, inout: &mut [u8], input: &[u8]) {
    if single {
        for (o, i) in inout.chunks_exact_mut(8).zip(input.chunks_exact(8)) {
            let f =
                |s: &[u8], k: usize| f32::from_ne_bytes(s[k * 4..k * 4 + 4].try_into().expect("4"));
            let (a, b, c, d) = (f(i, 0), f(i, 1), f(o, 0), f(o, 1));
            o[..4].copy_from_slice(&(a * c - b * d).to_ne_bytes());
            o[4..].copy_from_slice(&(a * d + b * c).to_ne_bytes());
        }
    } else {
        for (o, i) in inout.chunks_exact_mut(16).zip(input.chunks_exact(16)) {
            let f =
                |s: &[u8], k: usize| f64::from_ne_bytes(s[k * 8..k * 8 + 8].try_into().expect("8"));
            let (a, b, c, d) = (f(i, 0), f(i, 1), f(o, 0), f(o, 1));
            o[..8].copy_from_slice(&(a * c - b * d).to_ne_bytes());
            o[8..].copy_from_slice(&(a * d + b * c).to_ne_bytes());
        }
    }
}

/// Reduces every rank's `mine` (count packed elements) into `out` at `root`, in rank order.
#[allow(clippy::too_many_arguments)]
pub async fn reduce_a(
    c: &CommCore,
    s: Seq,
    root: usize,
    op: Op,
    t: &Dtype,
    th: H,
    count: usize,
    mine: &[u8],
    out: &mut [u8],
) -> R {
    let (n, b) = (c.size(), mine.len());
    if collectives::select(Coll::Reduce, shape(b, n, count, Some(op))) == Algo::Binomial {
        let red = algos::Red { op, t, th };
        let mut buf = mine.to_vec();
        algos::reduce_binomial(c, s, root, red, TAG_REDUCE, &mut buf, None).await?;
        if c.rank == root {
            out.copy_from_slice(&buf);
        }
        return Ok(());
    }
    let mut all = if c.rank == root {
        vec![0u8; b * n]
    } else {
        Vec::new()
    };
    gather_a(c, s, root, mine, &mut all, TAG_REDUCE).await?;
    if c.rank != root || b == 0 {
        return Ok(());
    }
    // acc = x0 op x1 op ... : fold left, x_r <- acc op x_r.
    let mut acc = all[..b].to_vec();
    for r in 1..n {
        let x = &mut all[r * b..(r + 1) * b];
        apply(op, t, th, count, &acc, x)?;
        acc.copy_from_slice(x);
    }
    out.copy_from_slice(&acc);
    Ok(())
}

/// The communicator and datatype of a collective call.
fn args(comm: H, dtype: H) -> R<(std::sync::Arc<CommCore>, TypeRef)> {
    let rt = rt()?;
    let c = rt.comm(comm)?;
    if c.is_inter() {
        return Err(not_inter());
    }
    Ok((c, committed(&rt, dtype)?))
}

/// The intracommunicator `comm` names: collectives on intercommunicators are not implemented.
pub fn intra(comm: H) -> R<std::sync::Arc<CommCore>> {
    let c = rt()?.comm(comm)?;
    if c.is_inter() {
        return Err(not_inter());
    }
    Ok(c)
}

#[cold]
fn not_inter() -> crate::Fail {
    fail(
        class::COMM,
        "collective operations on intercommunicators are not implemented in volley's MPI yet; merge it with MPI_Intercomm_merge first",
    )
}

fn root_of(c: &CommCore, root: c_int) -> R<usize> {
    if root < 0 || root as usize >= c.size() {
        return Err(fail(
            class::ROOT,
            format!(
                "root {root} is not a rank of the communicator (0 to {})",
                c.size() as i64 - 1
            ),
        ));
    }
    Ok(root as usize)
}

pub(crate) fn count(n: c_int) -> R<usize> {
    if n < 0 {
        return Err(fail(class::COUNT, format!("count {n} is negative")));
    }
    Ok(n as usize)
}

/// Packs count elements at p (or copies, when contiguous).
pub(crate) fn packed(t: &Dtype, p: *const c_void, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n * t.size];
    // SAFETY: MPI: p holds n elements of the datatype.
    unsafe { t.pack(p as *const u8, n, &mut v) };
    v
}

pub(crate) fn unpacked(t: &Dtype, data: &[u8], p: *mut c_void, n: usize) {
    // SAFETY: MPI: p holds n elements of the datatype.
    unsafe { t.unpack(data, p as *mut u8, n) };
}

/// The program's send buffer of `len` bytes at `p`, read in place (see [`user_bytes`]).
///
/// # Safety
/// As for [`user_bytes`]; the bytes are only read.
pub(crate) unsafe fn user_bytes_ref<'a>(p: P, len: usize) -> &'a [u8] {
    if len == 0 {
        return &[];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts(p.get() as *const u8, len) }
}

/// The program's buffer of `len` bytes at `p`, for a collective on a contiguous datatype to
/// work in it directly (no packed copy on the way in or out).
///
/// # Safety
/// MPI's rule: `p` holds `len` bytes that the program leaves alone until the call completes
/// (the future that uses them is that call).
pub(crate) unsafe fn user_bytes<'a>(p: P, len: usize) -> &'a mut [u8] {
    if len == 0 {
        return &mut [];
    }
    // SAFETY: per the contract.
    unsafe { std::slice::from_raw_parts_mut(p.get() as *mut u8, len) }
}

/// Copies `len` bytes of the program's `from` into its `to` (distinct buffers, MPI's rule).
///
/// # Safety
/// As for [`user_bytes`], for both.
unsafe fn user_copy(from: P, to: P, len: usize) {
    if len > 0 && from.get() != to.get() {
        // SAFETY: per the contract; MPI forbids the two to overlap.
        unsafe { std::ptr::copy_nonoverlapping(from.get() as *const u8, to.get() as *mut u8, len) };
    }
}

fn in_place(p: *const c_void) -> bool {
    p as usize == abi::IN_PLACE
}

/// Reduces every rank's `mine` (the sum of `counts` elements, packed) at rank 0 and scatters the
/// result: rank r gets `counts[r]` elements. Returns this rank's block (MPI_Reduce_scatter and
/// MPI_Reduce_scatter_block).
#[allow(clippy::too_many_arguments)]
async fn reduce_scatter_a(
    c: &CommCore,
    s: Seq,
    op: Op,
    t: &Dtype,
    th: H,
    counts: &[usize],
    mine: &[u8],
) -> R<Vec<u8>> {
    let total: usize = counts.iter().sum();
    let sh = shape(mine.len(), c.size(), total, Some(op));
    if collectives::select(Coll::ReduceScatter, sh) == Algo::Pairwise {
        let red = algos::Red { op, t, th };
        return algos::reduce_scatter_pairwise(c, s, red, counts, mine).await;
    }
    let mut all = vec![0u8; mine.len()];
    reduce_a(c, s, 0, op, t, th, total, mine, &mut all).await?;
    let mut block = vec![0u8; counts[c.rank] * t.size];
    let tag = s.tag(TAG_SCATTERV);
    if c.rank == 0 {
        let mut sends: Vec<(usize, u32, &[u8])> = Vec::with_capacity(counts.len());
        let mut off = counts[0] * t.size;
        for (r, &k) in counts.iter().enumerate().skip(1) {
            sends.push((r, tag, &all[off..off + k * t.size]));
            off += k * t.size;
        }
        exchange_a(c, &sends, &mut []).await?;
        let b = block.len();
        block.copy_from_slice(&all[..b]);
    } else {
        exchange_a(c, &[], &mut [(0, tag, &mut block)]).await?;
    }
    Ok(block)
}

/// The address of element `i` of type `t` from `base`.
pub(crate) fn at(base: *const c_void, i: isize, t: &Dtype) -> *const c_void {
    (base as *const u8).wrapping_offset(i * t.extent()) as *const c_void
}

/// An array of `n` ints from the caller.
fn ints<'a>(p: *const c_int, n: usize) -> R<&'a [c_int]> {
    // SAFETY: MPI: the array holds one entry per rank of the communicator.
    unsafe { crate::err::array(p, n as c_int) }
}

fn nonneg(v: &[c_int], what: &str) -> R {
    if let Some(x) = v.iter().find(|&&x| x < 0) {
        return Err(fail(class::COUNT, format!("a {what} is negative ({x})")));
    }
    Ok(())
}

/// Every rank sends `blocks[r]` to rank r and receives `sizes[r]` bytes from it; what came
/// from r is handed to `put(r, bytes)`. The rank's own block is handed over without a message.
async fn all_to_all_a(
    c: &CommCore,
    tag: u32,
    blocks: &[Vec<u8>],
    sizes: &[usize],
    mut put: impl FnMut(usize, &[u8]),
) -> R {
    let n = c.size();
    let mut got: Vec<Vec<u8>> = sizes.iter().map(|&b| vec![0u8; b]).collect();
    {
        let sends: Vec<(usize, u32, &[u8])> = (0..n)
            .filter(|&r| r != c.rank)
            .map(|r| (r, tag, &blocks[r][..]))
            .collect();
        let mut recvs: Vec<(usize, u32, &mut [u8])> = got
            .iter_mut()
            .enumerate()
            .filter(|(r, _)| *r != c.rank)
            .map(|(r, b)| (r, tag, &mut b[..]))
            .collect();
        exchange_a(c, &sends, &mut recvs).await?;
    }
    for (r, b) in got.iter().enumerate() {
        if r == c.rank {
            put(r, &blocks[r]);
        } else {
            put(r, b);
        }
    }
    Ok(())
}

/// The end of Allgatherv and Alltoallv: `blocks[r]` to each rank r, and what comes from r
/// (`counts[r]` elements of `t`) unpacked at element `displs[r]` of `recvbuf`.
async fn exchange_v(
    c: &CommCore,
    tag: u32,
    blocks: &[Vec<u8>],
    t: &Dtype,
    recvbuf: P,
    counts: &[c_int],
    displs: &[c_int],
) -> R {
    let sizes: Vec<usize> = counts.iter().map(|&k| k as usize * t.size).collect();
    all_to_all_a(c, tag, blocks, &sizes, |r, b| {
        let to = at(recvbuf.get(), displs[r] as isize, t) as *mut c_void;
        unpacked(t, b, to, counts[r] as usize);
    })
    .await
}

/// A collective that finishes nothing beyond its data.
pub(crate) fn done(f: impl std::future::Future<Output = R> + Send + 'static) -> Nbc {
    Nbc::new(async move { f.await.map(|()| None) })
}

/// Runs a collective to its end (the blocking call).
fn run(op: R<Nbc>) -> R {
    block_on(op?).map(|_| ())
}

/// A persistent collective's array argument (counts, displacements, datatypes), copied at its
/// init: the program may free it after the init returns (mpi4py does, as MPICH and Open MPI
/// let it). A null pointer, or an argument not significant at this rank (length 0), stays
/// null.
pub(crate) struct Kept<T>(Option<Vec<T>>);

impl<T: Copy> Kept<T> {
    pub(crate) fn of(p: *const T, n: usize) -> Kept<T> {
        if p.is_null() || n == 0 {
            return Kept(None);
        }
        // SAFETY: MPI: an array argument significant at this rank holds n elements.
        Kept(Some(unsafe { std::slice::from_raw_parts(p, n) }.to_vec()))
    }

    pub(crate) fn ptr(&self) -> *const T {
        self.0.as_ref().map_or(std::ptr::null(), |v| v.as_ptr())
    }
}

/// How many entries a v or w collective's per-rank arrays have on `comm` (the remote group's
/// size on an intercommunicator), and whether this rank is `root` (MPI_ROOT on an
/// intercommunicator; None: every rank's arrays count).
fn span(comm: H, root: Option<c_int>) -> R<(usize, bool)> {
    let c = rt()?.comm(comm)?;
    Ok(match &c.remote {
        Some((r, _)) => (r.len(), root.is_none_or(|r| r == abi::ROOT)),
        None => (c.size(), root.is_none_or(|r| r as usize == c.rank)),
    })
}

/// The size of this rank's own group on `comm` (a reduce-scatter's counts are per member of
/// the group the result is scattered over).
fn local_size(comm: H) -> R<usize> {
    Ok(rt()?.comm(comm)?.size())
}

/// The body of MPI_Bcast_init and the other persistent collectives: `$call` (the non-blocking
/// form's operation) made at each start, with the buffer pointers `$buf` and the copied arrays
/// `$kept` taken in (raw pointers are not `Send`, so they travel as `P` and `Kept`).
macro_rules! persistent {
    ($comm:ident, $request:ident, [$($buf:ident),*], [$($kept:ident),*], $call:expr) => {{
        $( let $buf = $crate::coll::P::new($buf); )*
        $crate::coll::persist($comm, $request, move || {
            $( let $buf = $buf.get(); )*
            $( let $kept = $kept.ptr(); )*
            $call
        })
    }};
}
pub(crate) use persistent;

/// MPI_Bcast_init and the other persistent collectives (MPI-4.0 section 6.13): a number
/// reserved on the communicator now (the order of the inits is the order they match in), `op`
/// run under it by each MPI_Start.
pub(crate) fn persist(
    comm: H,
    request: *mut H,
    op: impl Fn() -> R<Nbc> + Send + Sync + 'static,
) -> R {
    let seq = rt()?.comm(comm)?.persistent_seq();
    let op = crate::p2p::CollStart {
        seq,
        op: std::sync::Arc::new(op),
    };
    crate::p2p::persistent_coll(op, comm, request)
}

/// Starts a non-blocking collective: its request (MPI_Ibarrier and the other I-calls).
fn start(op: impl FnOnce() -> R<Nbc>, comm: H, request: *mut H) -> R {
    let f = crate::nbc::starting(op)?;
    crate::p2p::start_nbc(f, comm, request)
}

fn two_types(
    st: H,
    rt_: H,
    send_needed: bool,
    recv_needed: bool,
) -> R<(Option<TypeRef>, Option<TypeRef>)> {
    let rt = rt()?;
    let s = if send_needed {
        Some(committed(&rt, st)?)
    } else {
        None
    };
    let r = if recv_needed {
        Some(committed(&rt, rt_)?)
    } else {
        None
    };
    Ok((s, r))
}

// Each collective once, as a future (see `nbc`): the arguments are checked and the data packed
// when it starts; the future owns what it needs.

fn barrier_op(comm: H) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return crate::inter::barrier(c);
    }
    let c = intra(comm)?;
    let s = c.next_seq();
    if let Some(k) = crate::nbc_shm::ticket(&c, Coll::Barrier, 0, 0, None) {
        return Ok(done(async move { crate::nbc_shm::barrier(&c, k, s).await }));
    }
    Ok(done(async move { barrier_a(&c, s).await }))
}

fn bcast_op(buffer: *mut c_void, count_: c_int, datatype: H, root: c_int, comm: H) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return crate::inter::bcast(c, buffer, count_, datatype, root);
    }
    let (c, t) = args(comm, datatype)?;
    let n = count(count_)?;
    let root = root_of(&c, root)?;
    let s = c.next_seq();
    let len = n * t.size;
    if let Some(k) = crate::nbc_shm::ticket(&c, Coll::Bcast, len, len, None) {
        let data = if c.rank == root {
            packed(&t, buffer, n)
        } else {
            vec![0u8; len]
        };
        let buffer = P::new(buffer);
        return Ok(done(async move {
            crate::nbc_shm::bcast(&c, k, s, root, data, t, buffer, n).await
        }));
    }
    if t.contig {
        let buffer = P::new(buffer);
        return Ok(done(async move {
            // SAFETY: MPI's rule for the buffer (see user_bytes).
            bcast_a(&c, s, root, unsafe { user_bytes(buffer, len) }).await
        }));
    }
    let mut data = if c.rank == root {
        packed(&t, buffer, n)
    } else {
        vec![0u8; n * t.size]
    };
    let buffer = P::new(buffer);
    Ok(done(async move {
        bcast_a(&c, s, root, &mut data).await?;
        if c.rank != root {
            unpacked(&t, &data, buffer.get(), n);
        }
        Ok(())
    }))
}

#[allow(clippy::too_many_arguments)]
fn reduce_op(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count_: c_int,
    datatype: H,
    op: H,
    root: c_int,
    comm: H,
    all: bool,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return crate::inter::reduce(
            c,
            sendbuf,
            recvbuf,
            count_,
            datatype,
            op,
            (!all).then_some(root),
        );
    }
    let (c, t) = args(comm, datatype)?;
    let n = count(count_)?;
    let root = if all { 0 } else { root_of(&c, root)? };
    let op = op_for(op, &t, datatype, n)?;
    let s = c.next_seq();
    let src = if in_place(sendbuf) && (all || c.rank == root) {
        recvbuf as *const c_void
    } else {
        sendbuf
    };
    let len = n * t.size;
    let coll = if all { Coll::Allreduce } else { Coll::Reduce };
    if let Some(k) = crate::nbc_shm::ticket(&c, coll, len, n, Some(op)) {
        let mine = packed(&t, src, n);
        let out = P::new(recvbuf);
        return Ok(done(async move {
            crate::nbc_shm::reduce(
                &c,
                k,
                s,
                (!all).then_some(root),
                op,
                t,
                datatype,
                n,
                mine,
                out,
            )
            .await
        }));
    }
    let sh = shape(len, c.size(), n, Some(op));
    let direct = t.contig
        && if all {
            matches!(
                collectives::select(Coll::Allreduce, sh),
                Algo::RecursiveDoubling | Algo::Rabenseifner
            )
        } else {
            collectives::select(Coll::Reduce, sh) == Algo::Binomial
        };
    if direct {
        // Reduced in the receive buffer (a copy of the send buffer away from the root).
        let (src, recv) = (P::new(src), P::new(recvbuf));
        let algo = collectives::select(Coll::Allreduce, sh);
        return Ok(done(async move {
            let red = algos::Red {
                op,
                t: &t,
                th: datatype,
            };
            if !all {
                if let Some(parent) = algos::reduce_binomial_leaf(&c, root, op.commutative()) {
                    // SAFETY: MPI's rule for the send buffer (see user_bytes_ref).
                    let mine = unsafe { user_bytes_ref(src, len) };
                    let tag = s.tag(TAG_REDUCE);
                    return exchange_a(&c, &[(parent, tag, mine)], &mut []).await;
                }
            }
            if !all {
                // The tree combines into the receive buffer at the root, into a scratch
                // elsewhere; this rank's own vector is read where the program has it.
                let mut scratch: crate::scratch::Scratch;
                let buf = if c.rank == root {
                    // SAFETY: MPI's rule for the receive buffer (see user_bytes).
                    unsafe { user_bytes(recv, len) }
                } else {
                    scratch = crate::scratch::Scratch::new(len);
                    &mut scratch[..]
                };
                // In place at the root, its vector is in the receive buffer already.
                let in_place = c.rank == root && src.get() == recv.get();
                // SAFETY: MPI's rule for the send buffer (see user_bytes_ref).
                let mine = (!in_place).then(|| unsafe { user_bytes_ref(src, len) });
                return algos::reduce_binomial(&c, s, root, red, TAG_REDUCE, buf, mine).await;
            }
            if algo == Algo::Rabenseifner {
                // In place, the vector is in the receive buffer already.
                let in_place = src.get() == recv.get();
                // SAFETY: MPI's rule for both buffers (see user_bytes).
                let (buf, mine) = unsafe {
                    (
                        user_bytes(recv, len),
                        (!in_place).then(|| user_bytes_ref(src, len)),
                    )
                };
                return algos::allreduce_rabenseifner(&c, s, red, buf, mine).await;
            }
            // SAFETY: MPI's rule for both buffers (see user_bytes).
            let buf = unsafe {
                user_copy(src, recv, len);
                user_bytes(recv, len)
            };
            algos::allreduce_recursive_doubling(&c, s, red, buf).await
        }));
    }
    let mine = packed(&t, src, n);
    let recvbuf = P::new(recvbuf);
    let algo = collectives::select(Coll::Allreduce, shape(mine.len(), c.size(), n, Some(op)));
    Ok(done(async move {
        let mut out = vec![0u8; mine.len()];
        let red = algos::Red {
            op,
            t: &t,
            th: datatype,
        };
        match algo {
            Algo::RecursiveDoubling | Algo::Rabenseifner if all => {
                out.copy_from_slice(&mine);
                if algo == Algo::Rabenseifner {
                    algos::allreduce_rabenseifner(&c, s, red, &mut out, None).await?;
                } else {
                    algos::allreduce_recursive_doubling(&c, s, red, &mut out).await?;
                }
            }
            _ => {
                reduce_a(&c, s, root, op, &t, datatype, n, &mine, &mut out).await?;
                if all {
                    bcast_a(&c, s, 0, &mut out).await?;
                }
            }
        }
        if all || c.rank == root {
            unpacked(&t, &out, recvbuf.get(), n);
        }
        Ok(())
    }))
}

#[allow(clippy::too_many_arguments)]
fn gather_op(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    root: c_int,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return crate::inter::gather(
            c,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcount,
            std::ptr::null(),
            std::ptr::null(),
            recvtype,
            root,
            false,
        );
    }
    let c = intra(comm)?;
    let root = root_of(&c, root)?;
    let is_root = c.rank == root;
    let (rt_, st_) = {
        let rt = rt()?;
        let r = if is_root {
            Some(committed(&rt, recvtype)?)
        } else {
            None
        };
        let s = if is_root && in_place(sendbuf) {
            None
        } else {
            Some(committed(&rt, sendtype)?)
        };
        (r, s)
    };
    let rn = if is_root { count(recvcount)? } else { 0 };
    let b = match (&st_, &rt_) {
        (Some(st), _) => count(sendcount)? * st.size,
        (None, Some(t)) => rn * t.size,
        (None, None) => unreachable!("only the root may send in place"),
    };
    if let Some(t) = &rt_ {
        if rn * t.size != b {
            return Err(fail(
                class::TRUNCATE,
                format!(
                    "MPI_Gather: the root receives {} bytes per rank, this rank sends {b}",
                    rn * t.size,
                ),
            ));
        }
    }
    if st_.as_ref().is_some_and(|st| st.contig) && rt_.as_ref().is_none_or(|t| t.contig) {
        // Contiguous both ways: sent from the program's buffer and gathered into the receive
        // buffer as they are (no packed copy of the block, no gathered copy at the root to
        // unpack from).
        let s = c.next_seq();
        let (send, recv) = (P::new(sendbuf), P::new(recvbuf));
        return Ok(done(async move {
            // SAFETY: MPI's rule for both buffers (see user_bytes): the send buffer holds `b`
            // bytes, the root's receive buffer one block per rank; they do not overlap
            // (MPI_IN_PLACE takes the other path).
            let mine = unsafe { user_bytes_ref(send, b) };
            let all = if is_root {
                unsafe { user_bytes(recv, b * c.size()) }
            } else {
                &mut []
            };
            gather_a(&c, s, root, mine, all, TAG_GATHER).await
        }));
    }
    let mine = match &st_ {
        Some(t) => packed(t, sendbuf, count(sendcount)?),
        None => {
            let t = rt_.as_ref().expect("root");
            // MPI_IN_PLACE: the root's block is already in place in recvbuf.
            packed(t, at(recvbuf, (root * rn) as isize, t), rn)
        }
    };
    let s = c.next_seq();
    let recvbuf = P::new(recvbuf);
    Ok(done(async move {
        let mut all = vec![0u8; if is_root { mine.len() * c.size() } else { 0 }];
        gather_a(&c, s, root, &mine, &mut all, TAG_GATHER).await?;
        if let Some(t) = rt_ {
            let b = mine.len();
            for r in 0..c.size() {
                unpacked(
                    &t,
                    &all[r * b..(r + 1) * b],
                    at(recvbuf.get(), (r * rn) as isize, &t) as *mut c_void,
                    rn,
                );
            }
        }
        Ok(())
    }))
}

#[allow(clippy::too_many_arguments)]
fn scatter_op(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    root: c_int,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return crate::inter::scatter(
            c,
            sendbuf,
            sendcount,
            std::ptr::null(),
            std::ptr::null(),
            sendtype,
            recvbuf,
            recvcount,
            recvtype,
            root,
            false,
        );
    }
    let c = intra(comm)?;
    let root = root_of(&c, root)?;
    let is_root = c.rank == root;
    let place = is_root && in_place(recvbuf);
    let (st_, rt_) = two_types(sendtype, recvtype, is_root, !place)?;
    let n = c.size();
    let rn = if place { 0 } else { count(recvcount)? };
    let s = c.next_seq();
    let tag = s.tag(TAG_SCATTER);
    let recvbuf = P::new(recvbuf);
    if is_root {
        let t = st_.expect("root");
        let sn = count(sendcount)?;
        let b = sn * t.size;
        if rt_.as_ref().is_some_and(|t2| rn * t2.size != b) {
            return Err(fail(
                class::TRUNCATE,
                "MPI_Scatter: send and receive block sizes differ at the root",
            ));
        }
        if t.contig && rt_.as_ref().is_none_or(|t2| t2.contig) {
            // Contiguous: each block sent from the program's buffer as it is, the root's own
            // copied straight into its receive buffer (none with MPI_IN_PLACE).
            let send = P::new(sendbuf);
            let own = rt_.is_some();
            return Ok(done(async move {
                // SAFETY: MPI's rule for both buffers (see user_bytes): the send buffer holds
                // one block per rank, the receive buffer one block, apart.
                let all = unsafe { user_bytes_ref(send, b * n) };
                let sends: Vec<(usize, u32, &[u8])> = (0..n)
                    .filter(|&r| r != root)
                    .map(|r| (r, tag, &all[r * b..(r + 1) * b]))
                    .collect();
                exchange_a(&c, &sends, &mut []).await?;
                if own {
                    // SAFETY: as above.
                    unsafe { user_bytes(recvbuf, b) }
                        .copy_from_slice(&all[root * b..(root + 1) * b]);
                }
                Ok(())
            }));
        }
        let blocks: Vec<Vec<u8>> = (0..n)
            .map(|r| packed(&t, at(sendbuf, (r * sn) as isize, &t), sn))
            .collect();
        return Ok(done(async move {
            let sends: Vec<(usize, u32, &[u8])> = (0..n)
                .filter(|&r| r != root)
                .map(|r| (r, tag, &blocks[r][..]))
                .collect();
            exchange_a(&c, &sends, &mut []).await?;
            if let Some(t2) = rt_ {
                unpacked(&t2, &blocks[root], recvbuf.get(), rn);
            }
            Ok(())
        }));
    }
    let t = rt_.expect("not root");
    if t.contig {
        // Received straight into the program's buffer.
        let len = rn * t.size;
        return Ok(done(async move {
            // SAFETY: MPI's rule for the receive buffer (see user_bytes).
            let into = unsafe { user_bytes(recvbuf, len) };
            exchange_a(&c, &[], &mut [(root, tag, into)]).await
        }));
    }
    Ok(done(async move {
        let mut v = vec![0u8; rn * t.size];
        exchange_a(&c, &[], &mut [(root, tag, &mut v)]).await?;
        unpacked(&t, &v, recvbuf.get(), rn);
        Ok(())
    }))
}

#[allow(clippy::too_many_arguments)]
fn allgather_op(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return crate::inter::allgather(
            c,
            sendbuf,
            sendcount,
            sendtype,
            recvbuf,
            recvcount,
            std::ptr::null(),
            std::ptr::null(),
            recvtype,
            false,
        );
    }
    let c = intra(comm)?;
    let (st_, rt_) = two_types(sendtype, recvtype, !in_place(sendbuf), true)?;
    let t = rt_.expect("receiver");
    let rn = count(recvcount)?;
    let sent = match &st_ {
        Some(s) => count(sendcount)? * s.size,
        None => rn * t.size,
    };
    if sent != rn * t.size {
        return Err(fail(
            class::TRUNCATE,
            format!(
                "MPI_Allgather: each rank receives {} bytes per rank, this rank sends {sent}",
                rn * t.size,
            ),
        ));
    }
    let s = c.next_seq();
    let recvbuf = P::new(recvbuf);
    if t.contig {
        // Gathered straight into the receive buffer; this rank's block comes straight from the
        // program's send buffer where its type is contiguous, and is there already in place.
        let len = sent * c.size();
        let (packed_mine, send) = match &st_ {
            Some(st) if st.contig => (None, Some(P::new(sendbuf))),
            Some(st) => (Some(packed(st, sendbuf, count(sendcount)?)), None),
            None => (None, None),
        };
        return Ok(done(async move {
            // SAFETY: MPI's rule for the buffers (see user_bytes): the send buffer holds `sent`
            // bytes the program leaves alone until the call completes.
            let user_mine = send.map(|p| unsafe { user_bytes_ref(p, sent) });
            let mine = packed_mine.as_deref().or(user_mine);
            // SAFETY: as above, for the receive buffer.
            allgather_a(&c, s, mine, unsafe { user_bytes(recvbuf, len) }).await
        }));
    }
    let mine = match &st_ {
        Some(st) => packed(st, sendbuf, count(sendcount)?),
        None => packed(&t, at(recvbuf.get(), (c.rank * rn) as isize, &t), rn),
    };
    Ok(done(async move {
        let mut all = vec![0u8; mine.len() * c.size()];
        allgather_a(&c, s, Some(&mine), &mut all).await?;
        let b = mine.len();
        for r in 0..c.size() {
            unpacked(
                &t,
                &all[r * b..(r + 1) * b],
                at(recvbuf.get(), (r * rn) as isize, &t) as *mut c_void,
                rn,
            );
        }
        Ok(())
    }))
}

#[allow(clippy::too_many_arguments)]
fn alltoall_op(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        crate::inter::no_in_place(sendbuf, "MPI_Alltoall")?;
        return crate::inter::alltoall(
            c,
            |m| crate::topo::regular(sendbuf, sendcount, sendtype, m, "send count"),
            |m| crate::topo::regular(recvbuf, recvcount, recvtype, m, "receive count"),
        );
    }
    let c = intra(comm)?;
    let (st_, rt_) = two_types(sendtype, recvtype, !in_place(sendbuf), true)?;
    let t = rt_.expect("receiver");
    let n = c.size();
    let rn = count(recvcount)?;
    if let (Some(st), true) = (&st_, t.contig) {
        let b = rn * t.size;
        if st.contig && count(sendcount)? * st.size == b {
            // Sent from the send buffer and received into the receive buffer, as they are.
            let s = c.next_seq();
            let algo = collectives::select(Coll::Alltoall, shape(b, n, rn, None));
            let pairwise = algo == Algo::Pairwise;
            let (send, recv) = (P::new(sendbuf), P::new(recvbuf));
            return Ok(done(async move {
                // SAFETY: MPI's rule for both buffers (see user_bytes); they do not overlap.
                let (send, recv) = unsafe { (&*user_bytes(send, n * b), user_bytes(recv, n * b)) };
                let me = c.rank;
                if b == 0 {
                    return Ok(());
                }
                let tag = s.tag(TAG_ALLTOALL);
                if algo == Algo::Bruck {
                    recv[me * b..(me + 1) * b].copy_from_slice(&send[me * b..(me + 1) * b]);
                    return algos::alltoall_bruck(&c, tag, send, recv, b).await;
                }
                let ovl = overlap_own_copy(&c, b);
                if !ovl {
                    recv[me * b..(me + 1) * b].copy_from_slice(&send[me * b..(me + 1) * b]);
                }
                // The rank's own block is copied while the first messages move.
                let (below, rest) = recv.split_at_mut(me * b);
                let (own, above) = rest.split_at_mut(b);
                let own_src = &send[me * b..(me + 1) * b];
                let copy_own = move || {
                    if ovl {
                        own.copy_from_slice(own_src)
                    }
                };
                if pairwise {
                    let mut copy_own = Some(copy_own);
                    for i in 1..n {
                        let (to, from) = ((me + i) % n, (me + n - i) % n);
                        let out = &send[to * b..(to + 1) * b];
                        let into = if from < me {
                            &mut below[from * b..(from + 1) * b]
                        } else {
                            &mut above[(from - me - 1) * b..(from - me) * b]
                        };
                        let local = copy_own.take();
                        exchange_a_then(&c, &[(to, tag, out)], &mut [(from, tag, into)], || {
                            if let Some(mut f) = local {
                                f()
                            }
                        })
                        .await?;
                    }
                    // A world of one exchanges nothing.
                    if let Some(mut f) = copy_own {
                        f();
                    }
                    return Ok(());
                }
                let sends: Vec<(usize, u32, &[u8])> = (0..n)
                    .filter(|&r| r != me)
                    .map(|r| (r, tag, &send[r * b..(r + 1) * b]))
                    .collect();
                let mut recvs: Vec<(usize, u32, &mut [u8])> = below
                    .chunks_mut(b)
                    .enumerate()
                    .chain(
                        above
                            .chunks_mut(b)
                            .enumerate()
                            .map(|(i, blk)| (me + 1 + i, blk)),
                    )
                    .map(|(r, blk)| (r, tag, blk))
                    .collect();
                exchange_a_then(&c, &sends, &mut recvs, copy_own).await
            }));
        }
    }
    let blocks: Vec<Vec<u8>> = match &st_ {
        Some(s) => {
            let sn = count(sendcount)?;
            (0..n)
                .map(|r| packed(s, at(sendbuf, (r * sn) as isize, s), sn))
                .collect()
        }
        None => (0..n)
            .map(|r| packed(&t, at(recvbuf, (r * rn) as isize, &t), rn))
            .collect(),
    };
    let b = rn * t.size;
    if blocks.iter().any(|x| x.len() != b) {
        return Err(fail(
            class::TRUNCATE,
            "MPI_Alltoall: send and receive block sizes differ",
        ));
    }
    let s = c.next_seq();
    let recvbuf = P::new(recvbuf);
    let algo = collectives::select(Coll::Alltoall, shape(b, n, rn, None));
    let pairwise = algo == Algo::Pairwise;
    Ok(done(async move {
        let put = |r: usize, data: &[u8]| {
            unpacked(
                &t,
                data,
                at(recvbuf.get(), (r * rn) as isize, &t) as *mut c_void,
                rn,
            );
        };
        if algo == Algo::Bruck && b > 0 {
            let send: Vec<u8> = blocks.concat();
            let mut got = vec![0u8; n * b];
            algos::alltoall_bruck(&c, s.tag(TAG_ALLTOALL), &send, &mut got, b).await?;
            got.chunks(b).enumerate().for_each(|(r, d)| put(r, d));
            return Ok(());
        }
        if pairwise {
            let mut got = vec![vec![0u8; b]; n];
            algos::alltoall_pairwise(&c, s.tag(TAG_ALLTOALL), &blocks, &mut got).await?;
            got[c.rank] = blocks[c.rank].clone();
            got.iter().enumerate().for_each(|(r, d)| put(r, d));
            return Ok(());
        }
        all_to_all_a(&c, s.tag(TAG_ALLTOALL), &blocks, &vec![b; n], put).await
    }))
}

#[allow(clippy::too_many_arguments)]
fn gatherv_op(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: H,
    root: c_int,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return crate::inter::gather(
            c, sendbuf, sendcount, sendtype, recvbuf, 0, recvcounts, displs, recvtype, root, true,
        );
    }
    let c = intra(comm)?;
    let root = root_of(&c, root)?;
    let is_root = c.rank == root;
    let place = is_root && in_place(sendbuf);
    let (st_, rt_) = two_types(sendtype, recvtype, !place, is_root)?;
    let s = c.next_seq();
    let tag = s.tag(TAG_GATHERV);
    if !is_root {
        let t = st_.expect("sender");
        if t.contig {
            // Sent from the program's buffer as it is.
            let (send, len) = (P::new(sendbuf), count(sendcount)? * t.size);
            return Ok(done(async move {
                // SAFETY: MPI's rule for the send buffer (see user_bytes_ref).
                let mine = unsafe { user_bytes_ref(send, len) };
                exchange_a(&c, &[(root, tag, mine)], &mut []).await
            }));
        }
        let mine = packed(&t, sendbuf, count(sendcount)?);
        return Ok(done(async move {
            exchange_a(&c, &[(root, tag, &mine)], &mut []).await
        }));
    }
    let t = rt_.expect("root");
    let n = c.size();
    let (rc, ds) = (ints(recvcounts, n)?.to_vec(), ints(displs, n)?.to_vec());
    nonneg(&rc, "receive count")?;
    let mut got: Vec<Vec<u8>> = rc.iter().map(|&k| vec![0u8; k as usize * t.size]).collect();
    if let Some(s) = &st_ {
        let mine = packed(s, sendbuf, count(sendcount)?);
        if mine.len() != got[root].len() {
            return Err(fail(
                class::TRUNCATE,
                format!(
                    "MPI_Gatherv: the root sends itself {} bytes but expects {}",
                    mine.len(),
                    got[root].len()
                ),
            ));
        }
        got[root] = mine;
    }
    let recvbuf = P::new(recvbuf);
    Ok(done(async move {
        {
            let mut recvs: Vec<(usize, u32, &mut [u8])> = got
                .iter_mut()
                .enumerate()
                .filter(|(r, _)| *r != root)
                .map(|(r, b)| (r, tag, &mut b[..]))
                .collect();
            exchange_a(&c, &[], &mut recvs).await?;
        }
        for r in 0..n {
            if r == root && place {
                continue;
            }
            unpacked(
                &t,
                &got[r],
                at(recvbuf.get(), ds[r] as isize, &t) as *mut c_void,
                rc[r] as usize,
            );
        }
        Ok(())
    }))
}

#[allow(clippy::too_many_arguments)]
fn scatterv_op(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    displs: *const c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcount: c_int,
    recvtype: H,
    root: c_int,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return crate::inter::scatter(
            c, sendbuf, 0, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, true,
        );
    }
    let c = intra(comm)?;
    let root = root_of(&c, root)?;
    let is_root = c.rank == root;
    let place = is_root && in_place(recvbuf);
    let (st_, rt_) = two_types(sendtype, recvtype, is_root, !place)?;
    let s = c.next_seq();
    let tag = s.tag(TAG_SCATTERV);
    let rn = if place { 0 } else { count(recvcount)? };
    let recvbuf = P::new(recvbuf);
    if !is_root {
        let t = rt_.expect("receiver");
        if t.contig {
            // Received straight into the program's buffer.
            return Ok(done(async move {
                // SAFETY: MPI's rule for the receive buffer (see user_bytes).
                let into = unsafe { user_bytes(recvbuf, rn * t.size) };
                exchange_a(&c, &[], &mut [(root, tag, into)]).await
            }));
        }
        return Ok(done(async move {
            let mut v = vec![0u8; rn * t.size];
            exchange_a(&c, &[], &mut [(root, tag, &mut v)]).await?;
            unpacked(&t, &v, recvbuf.get(), rn);
            Ok(())
        }));
    }
    let t = st_.expect("root");
    let n = c.size();
    let (sc, ds) = (ints(sendcounts, n)?, ints(displs, n)?);
    nonneg(sc, "send count")?;
    if rt_
        .as_ref()
        .is_some_and(|r| rn * r.size != sc[root] as usize * t.size)
    {
        return Err(fail(
            class::TRUNCATE,
            "MPI_Scatterv: the root's own block and its receive size differ",
        ));
    }
    if t.contig {
        // Each block sent from where it lies in the program's buffer (blocks may overlap: they
        // are only read).
        let blocks: Vec<(P, usize)> = (0..n)
            .map(|r| {
                let p = at(sendbuf, ds[r] as isize, &t);
                (P::new(p), sc[r] as usize * t.size)
            })
            .collect();
        return Ok(done(async move {
            // SAFETY: MPI's rule for the send buffer: each block lies in it, read only.
            let block = |r: usize| unsafe { user_bytes_ref(blocks[r].0, blocks[r].1) };
            let sends: Vec<(usize, u32, &[u8])> = (0..n)
                .filter(|&r| r != root)
                .map(|r| (r, tag, block(r)))
                .collect();
            exchange_a(&c, &sends, &mut []).await?;
            if let Some(r) = rt_ {
                unpacked(&r, block(root), recvbuf.get(), rn);
            }
            Ok(())
        }));
    }
    let blocks: Vec<Vec<u8>> = (0..n)
        .map(|r| packed(&t, at(sendbuf, ds[r] as isize, &t), sc[r] as usize))
        .collect();
    Ok(done(async move {
        let sends: Vec<(usize, u32, &[u8])> = (0..n)
            .filter(|&r| r != root)
            .map(|r| (r, tag, &blocks[r][..]))
            .collect();
        exchange_a(&c, &sends, &mut []).await?;
        if let Some(r) = rt_ {
            unpacked(&r, &blocks[root], recvbuf.get(), rn);
        }
        Ok(())
    }))
}

#[allow(clippy::too_many_arguments)]
fn allgatherv_op(
    sendbuf: *const c_void,
    sendcount: c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    displs: *const c_int,
    recvtype: H,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return crate::inter::allgather(
            c, sendbuf, sendcount, sendtype, recvbuf, 0, recvcounts, displs, recvtype, true,
        );
    }
    let c = intra(comm)?;
    let place = in_place(sendbuf);
    let (st_, rt_) = two_types(sendtype, recvtype, !place, true)?;
    let t = rt_.expect("receiver");
    let n = c.size();
    let (rc, ds) = (ints(recvcounts, n)?.to_vec(), ints(displs, n)?.to_vec());
    nonneg(&rc, "receive count")?;
    let mine = match &st_ {
        Some(s) => packed(s, sendbuf, count(sendcount)?),
        None => packed(
            &t,
            at(recvbuf, ds[c.rank] as isize, &t),
            rc[c.rank] as usize,
        ),
    };
    if mine.len() != rc[c.rank] as usize * t.size {
        return Err(fail(
            class::TRUNCATE,
            "MPI_Allgatherv: this rank's block and its receive count differ",
        ));
    }
    let s = c.next_seq();
    let recvbuf = P::new(recvbuf);
    Ok(done(async move {
        let blocks: Vec<Vec<u8>> = vec![mine; n];
        exchange_v(&c, s.tag(TAG_ALLGATHERV), &blocks, &t, recvbuf, &rc, &ds).await
    }))
}

#[allow(clippy::too_many_arguments)]
fn alltoallv_op(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtype: H,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtype: H,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        crate::inter::no_in_place(sendbuf, "MPI_Alltoallv")?;
        return crate::inter::alltoall(
            c,
            |m| crate::topo::varied(sendbuf, sendcounts, sdispls, sendtype, m),
            |m| crate::topo::varied(recvbuf, recvcounts, rdispls, recvtype, m),
        );
    }
    let c = intra(comm)?;
    let place = in_place(sendbuf);
    let (st_, rt_) = two_types(sendtype, recvtype, !place, true)?;
    let t = rt_.expect("receiver");
    let n = c.size();
    let (rc, rd) = (ints(recvcounts, n)?.to_vec(), ints(rdispls, n)?.to_vec());
    nonneg(&rc, "receive count")?;
    let blocks: Vec<Vec<u8>> = match &st_ {
        Some(s) => {
            let (sc, sd) = (ints(sendcounts, n)?, ints(sdispls, n)?);
            nonneg(sc, "send count")?;
            (0..n)
                .map(|r| packed(s, at(sendbuf, sd[r] as isize, s), sc[r] as usize))
                .collect()
        }
        // MPI_IN_PLACE: what goes to r is where r's data will land.
        None => (0..n)
            .map(|r| packed(&t, at(recvbuf, rd[r] as isize, &t), rc[r] as usize))
            .collect(),
    };
    let s = c.next_seq();
    let recvbuf = P::new(recvbuf);
    Ok(done(async move {
        exchange_v(&c, s.tag(TAG_ALLTOALLV), &blocks, &t, recvbuf, &rc, &rd).await
    }))
}

#[allow(clippy::too_many_arguments)]
fn alltoallw_op(
    sendbuf: *const c_void,
    sendcounts: *const c_int,
    sdispls: *const c_int,
    sendtypes: *const H,
    recvbuf: *mut c_void,
    recvcounts: *const c_int,
    rdispls: *const c_int,
    recvtypes: *const H,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        crate::inter::no_in_place(sendbuf, "MPI_Alltoallw")?;
        return crate::inter::alltoall(
            c,
            |m| crate::inter::typed(sendbuf, sendcounts, sdispls, sendtypes, m),
            |m| crate::inter::typed(recvbuf, recvcounts, rdispls, recvtypes, m),
        );
    }
    let c = intra(comm)?;
    let n = c.size();
    let place = in_place(sendbuf);
    let (rc, rd) = (ints(recvcounts, n)?.to_vec(), ints(rdispls, n)?.to_vec());
    nonneg(&rc, "receive count")?;
    // SAFETY: MPI: one datatype per rank.
    let rts = unsafe { crate::err::array(recvtypes, n as c_int)? };
    let rtypes: Vec<TypeRef> = {
        let rt = rt()?;
        rts.iter().map(|&h| committed(&rt, h)).collect::<R<_>>()?
    };
    // Displacements of alltoallw are in bytes.
    let byte_at = |base: *const c_void, d: c_int| {
        (base as *const u8).wrapping_offset(d as isize) as *const c_void
    };
    let blocks: Vec<Vec<u8>> = if place {
        (0..n)
            .map(|r| packed(&rtypes[r], byte_at(recvbuf, rd[r]), rc[r] as usize))
            .collect()
    } else {
        let (sc, sd) = (ints(sendcounts, n)?, ints(sdispls, n)?);
        nonneg(sc, "send count")?;
        // SAFETY: MPI: one datatype per rank.
        let sts = unsafe { crate::err::array(sendtypes, n as c_int)? };
        let stypes: Vec<TypeRef> = {
            let rt = rt()?;
            sts.iter().map(|&h| committed(&rt, h)).collect::<R<_>>()?
        };
        (0..n)
            .map(|r| packed(&stypes[r], byte_at(sendbuf, sd[r]), sc[r] as usize))
            .collect()
    };
    let s = c.next_seq();
    let recvbuf = P::new(recvbuf);
    Ok(done(async move {
        let sizes: Vec<usize> = (0..n).map(|r| rc[r] as usize * rtypes[r].size).collect();
        all_to_all_a(&c, s.tag(TAG_ALLTOALLV), &blocks, &sizes, |r, b| {
            let to = (recvbuf.get() as *mut u8).wrapping_offset(rd[r] as isize) as *mut c_void;
            unpacked(&rtypes[r], b, to, rc[r] as usize);
        })
        .await
    }))
}

/// MPI_Reduce_scatter (`counts` per rank) and MPI_Reduce_scatter_block (`block` each).
fn reduce_scatter_op(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    counts: Result<*const c_int, c_int>,
    datatype: H,
    op: H,
    comm: H,
) -> R<Nbc> {
    if let Some(c) = crate::inter::of(comm)? {
        return match counts {
            Err(block) => {
                crate::inter::reduce_scatter_block(c, sendbuf, recvbuf, block, datatype, op)
            }
            Ok(counts) => crate::inter::reduce_scatter(c, sendbuf, recvbuf, counts, datatype, op),
        };
    }
    let (c, t) = args(comm, datatype)?;
    let n = c.size();
    let counts: Vec<usize> = match counts {
        Ok(p) => {
            let rc = ints(p, n)?;
            nonneg(rc, "receive count")?;
            rc.iter().map(|&k| k as usize).collect()
        }
        Err(k) => vec![count(k)?; n],
    };
    let total: usize = counts.iter().sum();
    let op = op_for(op, &t, datatype, total)?;
    let src = if in_place(sendbuf) {
        recvbuf as *const c_void
    } else {
        sendbuf
    };
    let mine = packed(&t, src, total);
    let s = c.next_seq();
    let recvbuf = P::new(recvbuf);
    Ok(done(async move {
        let block = reduce_scatter_a(&c, s, op, &t, datatype, &counts, &mine).await?;
        unpacked(&t, &block, recvbuf.get(), counts[c.rank]);
        Ok(())
    }))
}

/// MPI_Scan (`exclusive` false) and MPI_Exscan: a chain in rank order.
fn scan_op(
    sendbuf: *const c_void,
    recvbuf: *mut c_void,
    count_: c_int,
    datatype: H,
    op: H,
    comm: H,
    exclusive: bool,
) -> R<Nbc> {
    let (c, t) = args(comm, datatype)?;
    let k = count(count_)?;
    let op = op_for(op, &t, datatype, k)?;
    let src = if in_place(sendbuf) {
        recvbuf as *const c_void
    } else {
        sendbuf
    };
    // Packed into a scratch buffer kept per thread (`packed` would allocate one per call).
    let mut mine = crate::scratch::Scratch::new(k * t.size);
    // SAFETY: MPI: src holds k elements of the datatype.
    unsafe { t.pack(src as *const u8, k, &mut mine) };
    let s = c.next_seq();
    let tag = s.tag(if exclusive { TAG_EXSCAN } else { TAG_SCAN });
    let recvbuf = P::new(recvbuf);
    let red_t = t.clone();
    Ok(done(async move {
        let red = algos::Red {
            op,
            t: &red_t,
            th: datatype,
        };
        // Exscan's rank 0 gets nothing: its receive buffer is left as it is.
        if let Some(prefix) = algos::scan_recursive_doubling(&c, tag, red, &mine, exclusive).await?
        {
            unpacked(&t, &prefix, recvbuf.get(), k);
        }
        Ok(())
    }))
}

/// MPI's rule that a call's buffer arguments do not alias (MPI-3.1 2.6.2; in place is said
/// with MPI_IN_PLACE): a collective whose send buffer is its receive buffer, or this rank's own
/// block of it, fails on the ranks that see it with MPI_ERR_BUFFER before any message moves, as
/// MPICH's checks do (errors/coll/noalias*), instead of computing on overwritten data. Checked
/// on intracommunicators, where the rule names the buffers by rank.
mod alias {
    use super::*;

    /// This rank in `comm`, for an intracommunicator.
    fn me(comm: H) -> R<Option<usize>> {
        let c = rt()?.comm(comm)?;
        Ok((!c.is_inter()).then_some(c.rank))
    }

    fn element(base: *const c_void, i: isize, t: H) -> R<*const c_void> {
        let t = {
            let rt = rt()?;
            committed(&rt, t)?
        };
        Ok(at(base, i, &t))
    }

    fn same(what: &str, send: *const c_void, recv: *const c_void, whole: bool) -> R {
        if in_place(send) || send.is_null() || send != recv {
            return Ok(());
        }
        let which = if whole {
            "the receive buffer"
        } else {
            "this rank's block of the receive buffer"
        };
        Err(fail(
            class::BUFFER,
            format!("{what}: the send buffer is {which}; pass MPI_IN_PLACE as the send buffer to work in place"),
        ))
    }

    /// Reductions and the all-to-alls: the two buffers, on every rank (`root`: only there).
    pub(super) fn pair(
        what: &str,
        send: *const c_void,
        recv: *const c_void,
        nonempty: bool,
        comm: H,
        root: Option<c_int>,
    ) -> R {
        // The pointers first: the communicator is looked up only for buffers that are one.
        if !nonempty || in_place(send) || send.is_null() || send != recv {
            return Ok(());
        }
        let Some(r) = me(comm)? else { return Ok(()) };
        if root.is_some_and(|root| root as usize != r) {
            return Ok(());
        }
        same(what, send, recv, true)
    }

    /// Gathers: `mine` against the gathered buffer `all` and against this rank's block in it
    /// (`block`: its displacement in elements of `t`, given the rank), at `root` (None: every
    /// rank). Scatters pass their receive buffer as `mine`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn gathered(
        what: &str,
        mine: *const c_void,
        nonempty: bool,
        all: *const c_void,
        t: H,
        block: impl Fn(usize) -> R<isize>,
        comm: H,
        root: Option<c_int>,
    ) -> R {
        if !nonempty || in_place(mine) || mine.is_null() {
            return Ok(());
        }
        let Some(r) = me(comm)? else { return Ok(()) };
        if root.is_some_and(|root| root as usize != r) {
            return Ok(());
        }
        same(what, mine, all, true)?;
        same(what, mine, element(all, block(r)?, t)?, false)
    }

    /// Whether a per-rank array of counts (one entry per rank of `comm`) asks for anything: an
    /// exchange of nothing has no buffers to alias (empty buffers may share an address). Called
    /// only when the two buffers are one (MPI_IN_PLACE is not: its send counts are not read).
    pub(super) fn any(counts: *const c_int, comm: H) -> R<bool> {
        let c = rt()?.comm(comm)?;
        if counts.is_null() || c.is_inter() {
            return Ok(false);
        }
        Ok(ints(counts, c.size())?.iter().any(|&k| k > 0))
    }

    /// Element `r` of a per-rank array (displacements), for `gathered`.
    pub(super) fn nth(a: *const c_int, r: usize) -> R<isize> {
        if a.is_null() {
            return Err(fail(class::ARG, "the displacements array is NULL"));
        }
        // SAFETY: MPI: the array holds one entry per rank of the communicator, and r is one.
        Ok(unsafe { *a.add(r) } as isize)
    }
}

crate::mpi! {
    fn MPI_Barrier / PMPI_Barrier(comm: H) [comm] {
        if barrier_shm(comm)? {
            return Ok(());
        }
        run(barrier_op(comm))
    }

    fn MPI_Ibarrier / PMPI_Ibarrier(comm: H, request: *mut H) [comm] {
        start(|| barrier_op(comm), comm, request)
    }

    fn MPI_Bcast / PMPI_Bcast(buffer: *mut c_void, count_: c_int, datatype: H, root: c_int, comm: H) [comm] {
        if bcast_short(buffer, count_, datatype, root, comm)? {
            return Ok(());
        }
        if bcast_shm(buffer, count_, datatype, root, comm)? {
            return Ok(());
        }
        run(bcast_op(buffer, count_, datatype, root, comm))
    }

    fn MPI_Ibcast / PMPI_Ibcast(buffer: *mut c_void, count_: c_int, datatype: H, root: c_int, comm: H, request: *mut H) [comm] {
        start(|| bcast_op(buffer, count_, datatype, root, comm), comm, request)
    }

    fn MPI_Reduce / PMPI_Reduce(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, root: c_int, comm: H) [comm] {
        alias::pair("MPI_Reduce", sendbuf, recvbuf, count_ > 0, comm, Some(root))?;
        if reduce_short(sendbuf, recvbuf, count_, datatype, op, Some(root), comm)? {
            return Ok(());
        }
        if reduce_shm(sendbuf, recvbuf, count_, datatype, op, Some(root), comm)? {
            return Ok(());
        }
        run(reduce_op(sendbuf, recvbuf, count_, datatype, op, root, comm, false))
    }

    fn MPI_Ireduce / PMPI_Ireduce(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, root: c_int, comm: H, request: *mut H) [comm] {
        alias::pair("MPI_Ireduce", sendbuf, recvbuf, count_ > 0, comm, Some(root))?;
        start(|| reduce_op(sendbuf, recvbuf, count_, datatype, op, root, comm, false), comm, request)
    }

    fn MPI_Allreduce / PMPI_Allreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H) [comm] {
        alias::pair("MPI_Allreduce", sendbuf, recvbuf, count_ > 0, comm, None)?;
        if reduce_short(sendbuf, recvbuf, count_, datatype, op, None, comm)? {
            return Ok(());
        }
        if reduce_shm(sendbuf, recvbuf, count_, datatype, op, None, comm)? {
            return Ok(());
        }
        run(reduce_op(sendbuf, recvbuf, count_, datatype, op, 0, comm, true))
    }

    fn MPI_Iallreduce / PMPI_Iallreduce(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H, request: *mut H) [comm] {
        alias::pair("MPI_Iallreduce", sendbuf, recvbuf, count_ > 0, comm, None)?;
        start(|| reduce_op(sendbuf, recvbuf, count_, datatype, op, 0, comm, true), comm, request)
    }

    fn MPI_Gather / PMPI_Gather(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H) [comm] {
        alias::gathered("MPI_Gather", sendbuf, sendcount > 0, recvbuf, recvtype, |r| Ok(r as isize * recvcount as isize), comm, Some(root))?;
        if gather_shm(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)? {
            return Ok(());
        }
        run(gather_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm))
    }

    fn MPI_Igather / PMPI_Igather(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H, request: *mut H) [comm] {
        alias::gathered("MPI_Igather", sendbuf, sendcount > 0, recvbuf, recvtype, |r| Ok(r as isize * recvcount as isize), comm, Some(root))?;
        start(|| gather_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm), comm, request)
    }

    fn MPI_Scatter / PMPI_Scatter(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H) [comm] {
        alias::gathered("MPI_Scatter", recvbuf, recvcount > 0, sendbuf, sendtype, |r| Ok(r as isize * sendcount as isize), comm, Some(root))?;
        if scatter_shm(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm)? {
            return Ok(());
        }
        run(scatter_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm))
    }

    fn MPI_Iscatter / PMPI_Iscatter(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H, request: *mut H) [comm] {
        alias::gathered("MPI_Iscatter", recvbuf, recvcount > 0, sendbuf, sendtype, |r| Ok(r as isize * sendcount as isize), comm, Some(root))?;
        start(|| scatter_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm), comm, request)
    }

    fn MPI_Allgather / PMPI_Allgather(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H) [comm] {
        alias::gathered("MPI_Allgather", sendbuf, sendcount > 0, recvbuf, recvtype, |r| Ok(r as isize * recvcount as isize), comm, None)?;
        if allgather_shm(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)? {
            return Ok(());
        }
        run(allgather_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
    }

    fn MPI_Iallgather / PMPI_Iallgather(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H, request: *mut H) [comm] {
        alias::gathered("MPI_Iallgather", sendbuf, sendcount > 0, recvbuf, recvtype, |r| Ok(r as isize * recvcount as isize), comm, None)?;
        start(|| allgather_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), comm, request)
    }

    fn MPI_Alltoall / PMPI_Alltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H) [comm] {
        alias::pair("MPI_Alltoall", sendbuf, recvbuf, sendcount > 0, comm, None)?;
        if alltoall_shm(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm)? {
            return Ok(());
        }
        run(alltoall_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
    }

    fn MPI_Ialltoall / PMPI_Ialltoall(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H, request: *mut H) [comm] {
        alias::pair("MPI_Ialltoall", sendbuf, recvbuf, sendcount > 0, comm, None)?;
        start(|| alltoall_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm), comm, request)
    }

    fn MPI_Gatherv / PMPI_Gatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, root: c_int, comm: H) [comm] {
        alias::gathered("MPI_Gatherv", sendbuf, sendcount > 0, recvbuf, recvtype, |r| alias::nth(displs, r), comm, Some(root))?;
        run(gatherv_op(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm))
    }

    fn MPI_Igatherv / PMPI_Igatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, root: c_int, comm: H, request: *mut H) [comm] {
        alias::gathered("MPI_Igatherv", sendbuf, sendcount > 0, recvbuf, recvtype, |r| alias::nth(displs, r), comm, Some(root))?;
        start(|| gatherv_op(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm), comm, request)
    }

    fn MPI_Scatterv / PMPI_Scatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H) [comm] {
        alias::gathered("MPI_Scatterv", recvbuf, recvcount > 0, sendbuf, sendtype, |r| alias::nth(displs, r), comm, Some(root))?;
        run(scatterv_op(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm))
    }

    fn MPI_Iscatterv / PMPI_Iscatterv(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H, request: *mut H) [comm] {
        alias::gathered("MPI_Iscatterv", recvbuf, recvcount > 0, sendbuf, sendtype, |r| alias::nth(displs, r), comm, Some(root))?;
        start(|| scatterv_op(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm), comm, request)
    }

    fn MPI_Allgatherv / PMPI_Allgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, comm: H) [comm] {
        alias::gathered("MPI_Allgatherv", sendbuf, sendcount > 0, recvbuf, recvtype, |r| alias::nth(displs, r), comm, None)?;
        run(allgatherv_op(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm))
    }

    fn MPI_Iallgatherv / PMPI_Iallgatherv(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, comm: H, request: *mut H) [comm] {
        alias::gathered("MPI_Iallgatherv", sendbuf, sendcount > 0, recvbuf, recvtype, |r| alias::nth(displs, r), comm, None)?;
        start(|| allgatherv_op(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm), comm, request)
    }

    fn MPI_Alltoallv / PMPI_Alltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: H, comm: H) [comm] {
        alias::pair("MPI_Alltoallv", sendbuf, recvbuf, std::ptr::eq(sendbuf, recvbuf) && alias::any(sendcounts, comm)?, comm, None)?;
        run(alltoallv_op(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm))
    }

    fn MPI_Ialltoallv / PMPI_Ialltoallv(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: H, comm: H, request: *mut H) [comm] {
        alias::pair("MPI_Ialltoallv", sendbuf, recvbuf, std::ptr::eq(sendbuf, recvbuf) && alias::any(sendcounts, comm)?, comm, None)?;
        start(|| alltoallv_op(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm), comm, request)
    }

    fn MPI_Alltoallw / PMPI_Alltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const H, comm: H) [comm] {
        alias::pair("MPI_Alltoallw", sendbuf, recvbuf, std::ptr::eq(sendbuf, recvbuf) && alias::any(sendcounts, comm)?, comm, None)?;
        run(alltoallw_op(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm))
    }

    fn MPI_Ialltoallw / PMPI_Ialltoallw(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const H, comm: H, request: *mut H) [comm] {
        alias::pair("MPI_Ialltoallw", sendbuf, recvbuf, std::ptr::eq(sendbuf, recvbuf) && alias::any(sendcounts, comm)?, comm, None)?;
        start(|| alltoallw_op(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm), comm, request)
    }

    fn MPI_Reduce_scatter_block / PMPI_Reduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: H, op: H, comm: H) [comm] {
        alias::pair("MPI_Reduce_scatter_block", sendbuf, recvbuf, recvcount > 0, comm, None)?;
        run(reduce_scatter_op(sendbuf, recvbuf, Err(recvcount), datatype, op, comm))
    }

    fn MPI_Ireduce_scatter_block / PMPI_Ireduce_scatter_block(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: H, op: H, comm: H, request: *mut H) [comm] {
        alias::pair("MPI_Ireduce_scatter_block", sendbuf, recvbuf, recvcount > 0, comm, None)?;
        start(|| reduce_scatter_op(sendbuf, recvbuf, Err(recvcount), datatype, op, comm), comm, request)
    }

    fn MPI_Reduce_scatter / PMPI_Reduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: H, op: H, comm: H) [comm] {
        alias::pair("MPI_Reduce_scatter", sendbuf, recvbuf, std::ptr::eq(sendbuf, recvbuf) && alias::any(recvcounts, comm)?, comm, None)?;
        run(reduce_scatter_op(sendbuf, recvbuf, Ok(recvcounts), datatype, op, comm))
    }

    fn MPI_Ireduce_scatter / PMPI_Ireduce_scatter(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: H, op: H, comm: H, request: *mut H) [comm] {
        alias::pair("MPI_Ireduce_scatter", sendbuf, recvbuf, std::ptr::eq(sendbuf, recvbuf) && alias::any(recvcounts, comm)?, comm, None)?;
        start(|| reduce_scatter_op(sendbuf, recvbuf, Ok(recvcounts), datatype, op, comm), comm, request)
    }

    fn MPI_Scan / PMPI_Scan(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H) [comm] {
        alias::pair("MPI_Scan", sendbuf, recvbuf, count_ > 0, comm, None)?;
        run(scan_op(sendbuf, recvbuf, count_, datatype, op, comm, false))
    }

    fn MPI_Iscan / PMPI_Iscan(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H, request: *mut H) [comm] {
        alias::pair("MPI_Iscan", sendbuf, recvbuf, count_ > 0, comm, None)?;
        start(|| scan_op(sendbuf, recvbuf, count_, datatype, op, comm, false), comm, request)
    }

    fn MPI_Exscan / PMPI_Exscan(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H) [comm] {
        alias::pair("MPI_Exscan", sendbuf, recvbuf, count_ > 0, comm, None)?;
        run(scan_op(sendbuf, recvbuf, count_, datatype, op, comm, true))
    }

    fn MPI_Iexscan / PMPI_Iexscan(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H, request: *mut H) [comm] {
        alias::pair("MPI_Iexscan", sendbuf, recvbuf, count_ > 0, comm, None)?;
        start(|| scan_op(sendbuf, recvbuf, count_, datatype, op, comm, true), comm, request)
    }

    // MPI-4.0's persistent collectives (section 6.13): each MPI_Start runs the non-blocking
    // form with the arguments given here.
    fn MPI_Barrier_init / PMPI_Barrier_init(comm: H, _info: H, request: *mut H) [comm] {
        persistent!(comm, request, [], [], barrier_op(comm))
    }

    fn MPI_Bcast_init / PMPI_Bcast_init(buffer: *mut c_void, count_: c_int, datatype: H, root: c_int, comm: H, _info: H, request: *mut H) [comm] {
        persistent!(comm, request, [buffer], [], bcast_op(buffer, count_, datatype, root, comm))
    }

    fn MPI_Reduce_init / PMPI_Reduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, root: c_int, comm: H, _info: H, request: *mut H) [comm] {
        alias::pair("MPI_Reduce_init", sendbuf, recvbuf, count_ > 0, comm, Some(root))?;
        persistent!(comm, request, [sendbuf, recvbuf], [], reduce_op(sendbuf, recvbuf, count_, datatype, op, root, comm, false))
    }

    fn MPI_Allreduce_init / PMPI_Allreduce_init(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H, _info: H, request: *mut H) [comm] {
        alias::pair("MPI_Allreduce_init", sendbuf, recvbuf, count_ > 0, comm, None)?;
        persistent!(comm, request, [sendbuf, recvbuf], [], reduce_op(sendbuf, recvbuf, count_, datatype, op, 0, comm, true))
    }

    fn MPI_Gather_init / PMPI_Gather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H, _info: H, request: *mut H) [comm] {
        alias::gathered("MPI_Gather_init", sendbuf, sendcount > 0, recvbuf, recvtype, |r| Ok(r as isize * recvcount as isize), comm, Some(root))?;
        persistent!(comm, request, [sendbuf, recvbuf], [], gather_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm))
    }

    fn MPI_Scatter_init / PMPI_Scatter_init(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H, _info: H, request: *mut H) [comm] {
        alias::gathered("MPI_Scatter_init", recvbuf, recvcount > 0, sendbuf, sendtype, |r| Ok(r as isize * sendcount as isize), comm, Some(root))?;
        persistent!(comm, request, [sendbuf, recvbuf], [], scatter_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, root, comm))
    }

    fn MPI_Allgather_init / PMPI_Allgather_init(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H, _info: H, request: *mut H) [comm] {
        alias::gathered("MPI_Allgather_init", sendbuf, sendcount > 0, recvbuf, recvtype, |r| Ok(r as isize * recvcount as isize), comm, None)?;
        persistent!(comm, request, [sendbuf, recvbuf], [], allgather_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
    }

    fn MPI_Alltoall_init / PMPI_Alltoall_init(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, comm: H, _info: H, request: *mut H) [comm] {
        alias::pair("MPI_Alltoall_init", sendbuf, recvbuf, sendcount > 0, comm, None)?;
        persistent!(comm, request, [sendbuf, recvbuf], [], alltoall_op(sendbuf, sendcount, sendtype, recvbuf, recvcount, recvtype, comm))
    }

    fn MPI_Gatherv_init / PMPI_Gatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, root: c_int, comm: H, _info: H, request: *mut H) [comm] {
        let (n, is_root) = span(comm, Some(root))?;
        alias::gathered("MPI_Gatherv_init", sendbuf, sendcount > 0, recvbuf, recvtype, |r| alias::nth(displs, r), comm, Some(root))?;
        let recvcounts = Kept::of(recvcounts, if is_root { n } else { 0 });
        let displs = Kept::of(displs, if is_root { n } else { 0 });
        persistent!(comm, request, [sendbuf, recvbuf], [recvcounts, displs], gatherv_op(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, root, comm))
    }

    fn MPI_Scatterv_init / PMPI_Scatterv_init(sendbuf: *const c_void, sendcounts: *const c_int, displs: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcount: c_int, recvtype: H, root: c_int, comm: H, _info: H, request: *mut H) [comm] {
        let (n, is_root) = span(comm, Some(root))?;
        alias::gathered("MPI_Scatterv_init", recvbuf, recvcount > 0, sendbuf, sendtype, |r| alias::nth(displs, r), comm, Some(root))?;
        let sendcounts = Kept::of(sendcounts, if is_root { n } else { 0 });
        let displs = Kept::of(displs, if is_root { n } else { 0 });
        persistent!(comm, request, [sendbuf, recvbuf], [sendcounts, displs], scatterv_op(sendbuf, sendcounts, displs, sendtype, recvbuf, recvcount, recvtype, root, comm))
    }

    fn MPI_Allgatherv_init / PMPI_Allgatherv_init(sendbuf: *const c_void, sendcount: c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, displs: *const c_int, recvtype: H, comm: H, _info: H, request: *mut H) [comm] {
        let (n, _) = span(comm, None)?;
        alias::gathered("MPI_Allgatherv_init", sendbuf, sendcount > 0, recvbuf, recvtype, |r| alias::nth(displs, r), comm, None)?;
        let recvcounts = Kept::of(recvcounts, n);
        let displs = Kept::of(displs, n);
        persistent!(comm, request, [sendbuf, recvbuf], [recvcounts, displs], allgatherv_op(sendbuf, sendcount, sendtype, recvbuf, recvcounts, displs, recvtype, comm))
    }

    fn MPI_Alltoallv_init / PMPI_Alltoallv_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtype: H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtype: H, comm: H, _info: H, request: *mut H) [comm] {
        let (n, _) = span(comm, None)?;
        alias::pair("MPI_Alltoallv_init", sendbuf, recvbuf, std::ptr::eq(sendbuf, recvbuf) && alias::any(sendcounts, comm)?, comm, None)?;
        // An in-place call's send arrays are not read.
        let ns = if in_place(sendbuf) { 0 } else { n };
        let sendcounts = Kept::of(sendcounts, ns);
        let sdispls = Kept::of(sdispls, ns);
        let recvcounts = Kept::of(recvcounts, n);
        let rdispls = Kept::of(rdispls, n);
        persistent!(comm, request, [sendbuf, recvbuf], [sendcounts, sdispls, recvcounts, rdispls], alltoallv_op(sendbuf, sendcounts, sdispls, sendtype, recvbuf, recvcounts, rdispls, recvtype, comm))
    }

    fn MPI_Alltoallw_init / PMPI_Alltoallw_init(sendbuf: *const c_void, sendcounts: *const c_int, sdispls: *const c_int, sendtypes: *const H, recvbuf: *mut c_void, recvcounts: *const c_int, rdispls: *const c_int, recvtypes: *const H, comm: H, _info: H, request: *mut H) [comm] {
        let (n, _) = span(comm, None)?;
        alias::pair("MPI_Alltoallw_init", sendbuf, recvbuf, std::ptr::eq(sendbuf, recvbuf) && alias::any(sendcounts, comm)?, comm, None)?;
        // An in-place call's send arrays are not read.
        let ns = if in_place(sendbuf) { 0 } else { n };
        let sendcounts = Kept::of(sendcounts, ns);
        let sdispls = Kept::of(sdispls, ns);
        let sendtypes = Kept::of(sendtypes, ns);
        let recvcounts = Kept::of(recvcounts, n);
        let rdispls = Kept::of(rdispls, n);
        let recvtypes = Kept::of(recvtypes, n);
        persistent!(comm, request, [sendbuf, recvbuf], [sendcounts, sdispls, sendtypes, recvcounts, rdispls, recvtypes], alltoallw_op(sendbuf, sendcounts, sdispls, sendtypes, recvbuf, recvcounts, rdispls, recvtypes, comm))
    }

    fn MPI_Reduce_scatter_block_init / PMPI_Reduce_scatter_block_init(sendbuf: *const c_void, recvbuf: *mut c_void, recvcount: c_int, datatype: H, op: H, comm: H, _info: H, request: *mut H) [comm] {
        alias::pair("MPI_Reduce_scatter_block_init", sendbuf, recvbuf, recvcount > 0, comm, None)?;
        persistent!(comm, request, [sendbuf, recvbuf], [], reduce_scatter_op(sendbuf, recvbuf, Err(recvcount), datatype, op, comm))
    }

    fn MPI_Reduce_scatter_init / PMPI_Reduce_scatter_init(sendbuf: *const c_void, recvbuf: *mut c_void, recvcounts: *const c_int, datatype: H, op: H, comm: H, _info: H, request: *mut H) [comm] {
        alias::pair("MPI_Reduce_scatter_init", sendbuf, recvbuf, std::ptr::eq(sendbuf, recvbuf) && alias::any(recvcounts, comm)?, comm, None)?;
        let recvcounts = Kept::of(recvcounts, local_size(comm)?);
        persistent!(comm, request, [sendbuf, recvbuf], [recvcounts], reduce_scatter_op(sendbuf, recvbuf, Ok(recvcounts), datatype, op, comm))
    }

    fn MPI_Scan_init / PMPI_Scan_init(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H, _info: H, request: *mut H) [comm] {
        alias::pair("MPI_Scan_init", sendbuf, recvbuf, count_ > 0, comm, None)?;
        persistent!(comm, request, [sendbuf, recvbuf], [], scan_op(sendbuf, recvbuf, count_, datatype, op, comm, false))
    }

    fn MPI_Exscan_init / PMPI_Exscan_init(sendbuf: *const c_void, recvbuf: *mut c_void, count_: c_int, datatype: H, op: H, comm: H, _info: H, request: *mut H) [comm] {
        alias::pair("MPI_Exscan_init", sendbuf, recvbuf, count_ > 0, comm, None)?;
        persistent!(comm, request, [sendbuf, recvbuf], [], scan_op(sendbuf, recvbuf, count_, datatype, op, comm, true))
    }


    fn MPI_Op_create / PMPI_Op_create(user_fn: Option<UserFn>, commute: c_int, op: *mut H) {
        let f = user_fn.ok_or_else(|| fail(class::ARG, "the operation's function is a null pointer"))?;
        let mut rt = rt()?;
        // A freed operation's entry is reused.
        let h = handle(KIND_OP, crate::state::vacant(&mut rt.ops, UserOp { f, commute: commute != 0 }));
        // SAFETY: the caller's output argument.
        unsafe { put(op, h) }
    }

    fn MPI_Op_free / PMPI_Op_free(op: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(op)? };
        let mut rt = rt()?;
        let i = index(KIND_OP, h).ok_or_else(|| fail(class::OP, "only operations made by MPI_Op_create can be freed"))?;
        rt.ops.get_mut(i).and_then(|s| s.take()).ok_or_else(|| fail(class::OP, format!("{h:#x} is not an operation handle")))?;
        drop(rt);
        // SAFETY: the caller's in-out argument.
        unsafe { put(op, abi::OP_NULL) }
    }

    fn MPI_Op_commutative / PMPI_Op_commutative(op: H, commute: *mut c_int) {
        let c = match op_of(op)? {
            Op::Predefined(_) => true,
            Op::User(u) => u.commute,
        };
        // SAFETY: the caller's output argument.
        unsafe { put(commute, c as c_int) }
    }

    fn MPI_Reduce_local / PMPI_Reduce_local(inbuf: *const c_void, inoutbuf: *mut c_void, count_: c_int, datatype: H, op: H) {
        if in_place(inbuf) || in_place(inoutbuf as *const c_void) {
            return Err(fail(class::BUFFER, "MPI_IN_PLACE is not a buffer MPI_Reduce_local takes: pass the input and the input-output buffers themselves"));
        }
        if count_ > 0 && std::ptr::eq(inbuf, inoutbuf) {
            return Err(fail(class::BUFFER, "the input buffer is the input-output buffer: they must not overlap (MPI-3.1 5.9.7)"));
        }
        let t = { let rt = rt()?; committed(&rt, datatype)? };
        let k = count(count_)?;
        let op = op_of(op)?;
        let len = k * t.size;
        let (i, io) = (inbuf as usize, inoutbuf as usize);
        if t.contig && (len == 0 || i + len <= io || io + len <= i) {
            // SAFETY: MPI: each buffer holds k elements of the contiguous type (len bytes from
            // its address), and they do not overlap (checked).
            let (a, b) = unsafe {
                (user_bytes_ref(P::new(inbuf), len), user_bytes(P::new(inoutbuf as *const c_void), len))
            };
            return apply(op, &t, datatype, k, a, b);
        }
        let a = packed(&t, inbuf, k);
        let mut b = packed(&t, inoutbuf, k);
        apply(op, &t, datatype, k, &a, &mut b)?;
        unpacked(&t, &b, inoutbuf, k);
        Ok(())
    }
}

/// Whether a rank's own block of `b` bytes (alltoall, allgather) is best copied while its first
/// messages move rather than before: yes, unless those messages are large enough for the sender
/// to help the receiver's single copy (`Config::single_copy_help_from`), which a sender busy
/// with its own copy cannot. 2 ranks on the VM, alltoall overlapped/before: 64 KiB 5.7-5.9 /
/// 6.2-6.4 us, 256 KiB 18.0-18.3 / 21.6-22.5, 512 KiB 52.8-54.6 / 47.4-48.3, 4 MiB 863-917 /
/// 788-814.
pub(crate) fn overlap_own_copy(c: &CommCore, b: usize) -> bool {
    let cfg = c.ep.world().config();
    !cfg.single_copy_help || b < cfg.single_copy_help_from
}
