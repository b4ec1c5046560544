//! The collective algorithms beyond the simple ones in `coll`: which one a call runs is
//! `volley::collectives::select`'s choice (by size, rank count and operation), listed by
//! `volley info` and forced by `VOLLEY_COLL_*`.
//!
//! Every algorithm works on packed bytes (whole elements of the call's datatype) with
//! communicator ranks, through `coll::exchange_a` steps: one step posts its receives and sends
//! and completes when they have, so consecutive steps between the same two ranks with the same
//! tag match in order (MPI's non-overtaking rule).
//!
//! Reductions keep rank order wherever the operation may not commute: recursive doubling
//! combines the two contiguous rank ranges its partners hold, lower one on the left; the
//! binomial reduce combines a node's range with its child's, which follows it, and reduces to
//! rank 0 (then sends to the root) when the operation does not commute.

use crate::abi::H;
use crate::coll::{
    apply, exchange_a, exchange_a_then, Op, TAG_ALLGATHER_RING, TAG_ALLREDUCE, TAG_BCAST_RING,
    TAG_REDUCE_SCATTER,
};
use crate::dtype::Dtype;
use crate::err::R;
use crate::nbc::Seq;
use crate::state::CommCore;
use std::ops::Range;

/// The largest power of two not above `n` (n > 0).
pub(crate) fn pow2_below(n: usize) -> usize {
    1 << (usize::BITS - 1 - n.leading_zeros())
}

/// A shared view of `a` and a mutable one of `b`, two disjoint ranges of `buf` (either may be
/// empty).
fn split(buf: &mut [u8], a: Range<usize>, b: Range<usize>) -> (&[u8], &mut [u8]) {
    let (a, b) = split_mut(buf, a, b);
    (a, b)
}

/// Two disjoint ranges of `buf`, both writable.
fn split_mut(buf: &mut [u8], a: Range<usize>, b: Range<usize>) -> (&mut [u8], &mut [u8]) {
    if a.end <= b.start {
        let (lo, hi) = buf.split_at_mut(b.start);
        (&mut lo[a], &mut hi[..b.end - b.start])
    } else {
        debug_assert!(b.end <= a.start, "overlapping ranges {a:?} {b:?}");
        let (lo, hi) = buf.split_at_mut(a.start);
        (&mut hi[..a.end - a.start], &mut lo[b])
    }
}

/// The first step of an allgather whose own block comes from `mine` (the program's buffer):
/// sends `mine` to `to`, receives block `from_block` from `from`, and copies `mine` into its
/// place in `all`, while the messages move where that is faster (`overlap_own_copy`: the copy
/// is this core's work either way; done before posting, it delays the peer's).
async fn allgather_first(
    c: &CommCore,
    tag: u32,
    all: &mut [u8],
    b: usize,
    mine: &[u8],
    (to, from, from_block): (usize, usize, usize),
) -> R {
    let me = c.rank;
    let (own, into) = split_mut(
        all,
        me * b..(me + 1) * b,
        from_block * b..(from_block + 1) * b,
    );
    if !crate::coll::overlap_own_copy(c, b) {
        own.copy_from_slice(mine);
        return exchange_a(c, &[(to, tag, mine)], &mut [(from, tag, into)]).await;
    }
    exchange_a_then(c, &[(to, tag, mine)], &mut [(from, tag, into)], || {
        own.copy_from_slice(mine)
    })
    .await
}

/// How a reduction's operands are described: operation, element type (and its handle), bytes
/// per element.
#[derive(Clone, Copy)]
pub struct Red<'a> {
    pub op: Op,
    pub t: &'a Dtype,
    pub th: H,
}

impl Red<'_> {
    /// `inout = input op inout` over the elements of `inout`.
    fn apply(&self, input: &[u8], inout: &mut [u8]) -> R {
        if inout.is_empty() {
            return Ok(());
        }
        apply(
            self.op,
            self.t,
            self.th,
            inout.len() / self.t.size,
            input,
            inout,
        )
    }

    /// `right = left op right` where `left` comes from lower ranks, or `mine = theirs op mine`
    /// when `theirs` does: the result in `mine`, rank order kept.
    fn combine(&self, mine: &mut [u8], theirs: &mut [u8], theirs_is_lower: bool) -> R {
        // An operation that commutes may take the operands in either order: the result goes
        // straight into `mine`, without a copy back.
        if theirs_is_lower || self.op.commutative() {
            self.apply(theirs, mine)
        } else {
            self.apply(mine, theirs)?;
            mine.copy_from_slice(theirs);
            Ok(())
        }
    }
}

/// Ranks beyond the largest power of two fold into a neighbour first (MPICH's scheme): of ranks
/// 0 .. 2 * rem, each even one hands its vector to the odd one above it and sits out; the
/// others take part as `new` ranks 0 .. p2. The new rank of this rank, if it takes part.
async fn fold_in(
    c: &CommCore,
    tag: u32,
    red: &Red<'_>,
    buf: &mut [u8],
    tmp: &mut [u8],
) -> R<Option<usize>> {
    let (n, me) = (c.size(), c.rank);
    let rem = n - pow2_below(n);
    if me >= 2 * rem {
        return Ok(Some(me - rem));
    }
    if me % 2 == 0 {
        exchange_a(c, &[(me + 1, tag, buf)], &mut []).await?;
        return Ok(None);
    }
    exchange_a(c, &[], &mut [(me - 1, tag, tmp)]).await?;
    red.apply(tmp, buf)?;
    Ok(Some(me / 2))
}

/// The rank of new rank `new` (see [`fold_in`]).
fn real(new: usize, rem: usize) -> usize {
    if new < rem {
        new * 2 + 1
    } else {
        new + rem
    }
}

/// The ranks that sat out get the result.
async fn fold_out(c: &CommCore, tag: u32, buf: &mut [u8]) -> R {
    let (n, me) = (c.size(), c.rank);
    let rem = n - pow2_below(n);
    if me >= 2 * rem {
        return Ok(());
    }
    if me % 2 == 1 {
        exchange_a(c, &[(me - 1, tag, buf)], &mut []).await
    } else {
        exchange_a(c, &[], &mut [(me + 1, tag, buf)]).await
    }
}

/// Allreduce by recursive doubling: log2(n) rounds, each exchanging the whole vector with the
/// partner at distance 1, 2, 4 ... and combining in rank order. `buf` holds this rank's vector
/// and gets the result.
pub async fn allreduce_recursive_doubling(c: &CommCore, s: Seq, red: Red<'_>, buf: &mut [u8]) -> R {
    if c.size() == 1 || buf.is_empty() {
        return Ok(());
    }
    let tag = s.tag(TAG_ALLREDUCE);
    let rem = c.size() - pow2_below(c.size());
    let p2 = pow2_below(c.size());
    let mut tmp = crate::scratch::Scratch::new(buf.len());
    if let Some(new) = fold_in(c, tag, &red, buf, &mut tmp).await? {
        let mut mask = 1;
        while mask < p2 {
            let partner = real(new ^ mask, rem);
            exchange_a(c, &[(partner, tag, buf)], &mut [(partner, tag, &mut tmp)]).await?;
            red.combine(buf, &mut tmp, partner < c.rank)?;
            mask <<= 1;
        }
    }
    fold_out(c, tag, buf).await
}

/// Allreduce by Rabenseifner's algorithm (a commutative operation, at least one element per
/// rank of the power of two): a reduce-scatter by recursive halving leaves each rank the reduced
/// 1/p2 of the vector, an allgather by recursive doubling hands the pieces round. Each rank
/// moves and reduces about twice the vector in all, whatever the rank count.
///
/// `mine`: this rank's vector when it is not in `buf` yet (the program's send buffer). With a
/// power-of-two rank count the first round sends its half from there and receives the partner's
/// half straight into `buf`, where it is combined with `mine`: no copy of the vector into `buf`
/// first.
pub async fn allreduce_rabenseifner(
    c: &CommCore,
    s: Seq,
    red: Red<'_>,
    buf: &mut [u8],
    mut mine: Option<&[u8]>,
) -> R {
    let p2 = pow2_below(c.size());
    let rem = c.size() - p2;
    if rem > 0 || c.size() == 1 || buf.is_empty() {
        if let Some(m) = mine.take() {
            buf.copy_from_slice(m);
        }
    }
    if c.size() == 1 || buf.is_empty() {
        return Ok(());
    }
    let tag = s.tag(TAG_ALLREDUCE);
    let es = red.t.size;
    let count = buf.len() / es;
    // Block b of the p2 blocks: its elements, as a byte range.
    let (q, r) = (count / p2, count % p2);
    let at = |b: usize| (b * q + b.min(r)) * es;
    let bytes = |lo: usize, hi: usize| at(lo)..at(hi);
    let mut tmp = crate::scratch::Scratch::new(buf.len());
    if let Some(new) = fold_in(c, tag, &red, buf, &mut tmp).await? {
        // Reduce-scatter: halve the range held, lowest bit first (the partner at distance 1,
        // then 2, 4 ...: MPICH's recursive halving, so that each element is summed as a
        // balanced tree over the ranks in order, the same bits as recursive doubling and as
        // MPICH gives); keep the half this rank's bit names, send the other.
        let (mut lo, mut hi) = (0, p2);
        let mut mask = 1;
        while mask < p2 {
            let partner = real(new ^ mask, rem);
            let mid = lo + (hi - lo) / 2;
            let (keep, give) = if new & mask == 0 {
                ((lo, mid), (mid, hi))
            } else {
                ((mid, hi), (lo, mid))
            };
            let k = bytes(keep.0, keep.1);
            if let Some(m) = mine.take() {
                let g = bytes(give.0, give.1);
                exchange_a(
                    c,
                    &[(partner, tag, &m[g])],
                    &mut [(partner, tag, &mut buf[k.clone()])],
                )
                .await?;
                // The operation commutes: theirs op mine, into buf.
                red.apply(&m[k], &mut buf[bytes(keep.0, keep.1)])?;
            } else {
                let got = &mut tmp[..k.len()];
                exchange_a(
                    c,
                    &[(partner, tag, &buf[bytes(give.0, give.1)])],
                    &mut [(partner, tag, &mut *got)],
                )
                .await?;
                red.apply(got, &mut buf[k])?;
            }
            (lo, hi) = keep;
            mask <<= 1;
        }
        debug_assert_eq!(hi - lo, 1);
        // Allgather: the steps again, last first; each hands the partner the range this rank
        // holds and takes the other half of the range held before that step (the aligned one
        // of twice the size: halving aligned ranges keeps them aligned).
        while mask > 1 {
            mask >>= 1;
            let partner = real(new ^ mask, rem);
            let size = hi - lo;
            let parent = lo & !(2 * size - 1);
            let theirs = if lo == parent {
                (hi, parent + 2 * size)
            } else {
                (parent, lo)
            };
            let (send, recv) = split(buf, bytes(lo, hi), bytes(theirs.0, theirs.1));
            exchange_a(c, &[(partner, tag, send)], &mut [(partner, tag, recv)]).await?;
            (lo, hi) = (parent, parent + 2 * size);
        }
    }
    fold_out(c, tag, buf).await
}

/// Reduce down a binomial tree: at step `mask` a rank holding the range [rel, rel + mask)
/// receives the range after it from `rel + mask`, or sends its own to `rel - mask` and is done.
/// For an operation that may not commute the tree is rooted at rank 0 (relative order is rank
/// order) and rank 0 sends the result to the root. `buf` holds this rank's vector; at the root
/// it gets the result (elsewhere it is scratch).
pub async fn reduce_binomial(
    c: &CommCore,
    s: Seq,
    root: usize,
    red: Red<'_>,
    tag_kind: u32,
    buf: &mut [u8],
    mut mine: Option<&[u8]>,
) -> R {
    let (n, me) = (c.size(), c.rank);
    // `mine`: this rank's vector, when it is not in `buf` yet (the program's send buffer): the
    // first child's vector is received straight into `buf` and combined with it there, which
    // saves copying it into `buf` first (and, for an operation that may not commute, copying
    // the result back).
    let tag = s.tag(tag_kind);
    let (top, rel) = binomial_place(c, root, red.op.commutative());
    let mut tmp = crate::scratch::Scratch::new(if n > 1 { buf.len() } else { 0 });
    let mut mask = 1;
    while mask < n {
        if rel & mask != 0 {
            let out: &[u8] = mine.unwrap_or(buf);
            exchange_a(c, &[((rel - mask + top) % n, tag, out)], &mut []).await?;
            mine = None;
            break;
        }
        if rel + mask < n {
            let child = (rel + mask + top) % n;
            if let Some(m) = mine.take() {
                exchange_a(c, &[], &mut [(child, tag, &mut *buf)]).await?;
                // The child's range follows this rank's: mine op theirs, into buf.
                red.apply(m, buf)?;
            } else {
                exchange_a(c, &[], &mut [(child, tag, &mut tmp)]).await?;
                // The child's range follows this rank's: mine op theirs.
                red.combine(buf, &mut tmp, false)?;
            }
        }
        mask <<= 1;
    }
    if let Some(m) = mine {
        // Nothing came in (a world of one): the result is this rank's own vector.
        buf.copy_from_slice(m);
    }
    if n == 1 {
        return Ok(());
    }
    if top != root {
        if me == top {
            exchange_a(c, &[(root, tag, buf)], &mut []).await?;
        } else if me == root {
            exchange_a(c, &[], &mut [(top, tag, buf)]).await?;
        }
    }
    Ok(())
}

/// The top of [`reduce_binomial`]'s tree (the root, or rank 0 for an operation that may not
/// commute) and this rank's place relative to it.
fn binomial_place(c: &CommCore, root: usize, commutative: bool) -> (usize, usize) {
    let top = if commutative { root } else { 0 };
    (top, (c.rank + c.size() - top) % c.size())
}

/// Where a leaf of [`reduce_binomial`]'s tree sends its vector, if this rank is one: a leaf
/// combines nothing (its whole part is that one send, on the same tag), so it can send straight
/// from the program's buffer (no copy first).
pub fn reduce_binomial_leaf(c: &CommCore, root: usize, commutative: bool) -> Option<usize> {
    let (top, rel) = binomial_place(c, root, commutative);
    (c.size() > 1 && c.rank != root && rel & 1 == 1).then(|| (rel - 1 + top) % c.size())
}

/// Broadcast of a long message (van de Geijn's): the root's buffer, cut into n chunks, is
/// scattered down a binomial tree (rank `rel` ends with chunks [rel, rel + its subtree)), then
/// n - 1 rounds around a ring hand every chunk to every rank. Each byte crosses about two links
/// instead of log2(n).
pub async fn bcast_scatter_ring(c: &CommCore, s: Seq, root: usize, buf: &mut [u8]) -> R {
    let (n, me) = (c.size(), c.rank);
    let len = buf.len();
    if n == 1 || len == 0 {
        return Ok(());
    }
    let tag = s.tag(crate::coll::TAG_BCAST);
    let ring = s.tag(TAG_BCAST_RING);
    let cs = len.div_ceil(n);
    let chunks = |a: usize, b: usize| (a * cs).min(len)..(b * cs).min(len);
    let real = |rel: usize| (rel + root) % n;
    let rel = (me + n - root) % n;
    // Scatter.
    let mut mask = 1;
    while mask < n {
        if rel & mask != 0 {
            let r = chunks(rel, (rel + mask).min(n));
            exchange_a(c, &[], &mut [(real(rel - mask), tag, &mut buf[r])]).await?;
            break;
        }
        mask <<= 1;
    }
    mask >>= 1;
    while mask > 0 {
        if rel + mask < n {
            let r = chunks(rel + mask, (rel + 2 * mask).min(n));
            exchange_a(c, &[(real(rel + mask), tag, &buf[r])], &mut []).await?;
        }
        mask >>= 1;
    }
    // Ring allgather of the chunks.
    let (left, right) = (real((rel + n - 1) % n), real((rel + 1) % n));
    for i in 0..n - 1 {
        let send = (rel + n - i) % n;
        let recv = (rel + 2 * n - i - 1) % n;
        let (out, into) = split(buf, chunks(send, send + 1), chunks(recv, recv + 1));
        exchange_a(c, &[(right, ring, out)], &mut [(left, ring, into)]).await?;
    }
    Ok(())
}

/// Allgather by recursive doubling (n a power of two): at step `mask` a rank and its partner
/// `rank ^ mask` swap the `mask` blocks each holds. `all` holds n blocks of `b` bytes; this
/// rank's is in place, or, if `mine` is given, is where the program wrote it: the first step
/// sends it from there and copies it into `all` meanwhile.
pub async fn allgather_recursive_doubling(
    c: &CommCore,
    s: Seq,
    all: &mut [u8],
    b: usize,
    mine: Option<&[u8]>,
) -> R {
    let (n, me) = (c.size(), c.rank);
    debug_assert!(n.is_power_of_two());
    let tag = s.tag(TAG_ALLGATHER_RING);
    let mut mask = 1;
    if let Some(m) = mine {
        if n == 1 {
            all[..b].copy_from_slice(m);
            return Ok(());
        }
        allgather_first(c, tag, all, b, m, (me ^ 1, me ^ 1, me ^ 1)).await?;
        mask = 2;
    }
    while mask < n {
        let partner = me ^ mask;
        let held = me & !(mask - 1);
        let theirs = held ^ mask;
        let (send, recv) = split(
            all,
            held * b..(held + mask) * b,
            theirs * b..(theirs + mask) * b,
        );
        exchange_a(c, &[(partner, tag, send)], &mut [(partner, tag, recv)]).await?;
        mask <<= 1;
    }
    Ok(())
}

/// Allgather around a ring: n - 1 rounds, in round i each rank passes block `rank - i` to the
/// right and takes block `rank - i - 1` from the left. `all` and `mine` as for recursive
/// doubling.
pub async fn allgather_ring(
    c: &CommCore,
    s: Seq,
    all: &mut [u8],
    b: usize,
    mine: Option<&[u8]>,
) -> R {
    let (n, me) = (c.size(), c.rank);
    let tag = s.tag(TAG_ALLGATHER_RING);
    let (left, right) = ((me + n - 1) % n, (me + 1) % n);
    let mut first = 0;
    if let Some(m) = mine {
        if n == 1 {
            all[..b].copy_from_slice(m);
            return Ok(());
        }
        allgather_first(c, tag, all, b, m, (right, left, left)).await?;
        first = 1;
    }
    for i in first..n.saturating_sub(1) {
        let send = (me + n - i) % n;
        let recv = (me + 2 * n - i - 1) % n;
        let (out, into) = split(all, send * b..(send + 1) * b, recv * b..(recv + 1) * b);
        exchange_a(c, &[(right, tag, out)], &mut [(left, tag, into)]).await?;
    }
    Ok(())
}

/// Alltoall by pairwise exchange: n - 1 rounds, in round i rank r sends its block for r + i and
/// receives the block from r - i; one partner at a time, so no rank is sent to by all at once.
/// `got[r]` receives rank r's block (this rank's own is left to the caller).
pub async fn alltoall_pairwise(
    c: &CommCore,
    tag: u32,
    blocks: &[Vec<u8>],
    got: &mut [Vec<u8>],
) -> R {
    let (n, me) = (c.size(), c.rank);
    for i in 1..n {
        let (to, from) = ((me + i) % n, (me + n - i) % n);
        exchange_a(
            c,
            &[(to, tag, &blocks[to])],
            &mut [(from, tag, &mut got[from])],
        )
        .await?;
    }
    Ok(())
}

/// Alltoall by Bruck's algorithm (Bruck, Ho, Kipnis, Upfal and Weathersby, 1997): ceil(log2 n)
/// rounds instead of n - 1 messages, each block moving up to log2(n) times, so for short blocks
/// among many ranks. `send` and `recv` hold n blocks of `b` bytes, block r for (from) rank r.
/// Every rank first rotates its blocks so that slot i holds the one for rank me + i; in round k
/// (k = 1, 2, 4, ...) it sends the slots whose index has bit k set to rank me + k and takes the
/// same slots from rank me - k; after the rounds, slot i holds the block from rank me - i.
pub async fn alltoall_bruck(c: &CommCore, tag: u32, send: &[u8], recv: &mut [u8], b: usize) -> R {
    let (n, me) = (c.size(), c.rank);
    let blk = |i: usize| i * b..(i + 1) * b;
    let mut slots = vec![0u8; n * b];
    for i in 0..n {
        slots[blk(i)].copy_from_slice(&send[blk((me + i) % n)]);
    }
    let mut k = 1;
    while k < n {
        let moving: Vec<usize> = (0..n).filter(|i| i & k != 0).collect();
        let mut out = Vec::with_capacity(moving.len() * b);
        for &i in &moving {
            out.extend_from_slice(&slots[blk(i)]);
        }
        let mut got = vec![0u8; moving.len() * b];
        exchange_a(
            c,
            &[((me + k) % n, tag, &out)],
            &mut [((me + n - k) % n, tag, &mut got)],
        )
        .await?;
        for (j, &i) in moving.iter().enumerate() {
            slots[blk(i)].copy_from_slice(&got[blk(j)]);
        }
        k <<= 1;
    }
    for i in 0..n {
        recv[blk((me + n - i) % n)].copy_from_slice(&slots[blk(i)]);
    }
    Ok(())
}

/// Reduce-scatter, each contribution straight to its block's rank: every rank sends block r of
/// its vector (`counts[r]` elements) to rank r and receives every rank's contribution to its own
/// block, all in one step, then folds them in rank order (so any operation will do). Each rank
/// moves its vector once; a tree would move it log2(n) times. Returns this rank's block.
pub async fn reduce_scatter_pairwise(
    c: &CommCore,
    s: Seq,
    red: Red<'_>,
    counts: &[usize],
    mine: &[u8],
) -> R<Vec<u8>> {
    let (n, me, es) = (c.size(), c.rank, red.t.size);
    let tag = s.tag(TAG_REDUCE_SCATTER);
    let mut off = Vec::with_capacity(n + 1);
    off.push(0);
    for &k in counts {
        off.push(off.last().copied().unwrap_or(0) + k * es);
    }
    let blk = |r: usize| off[r]..off[r + 1];
    let mut got: Vec<Vec<u8>> = (0..n).map(|_| vec![0u8; counts[me] * es]).collect();
    got[me].copy_from_slice(&mine[blk(me)]);
    {
        let sends: Vec<(usize, u32, &[u8])> = (0..n)
            .filter(|&r| r != me)
            .map(|r| (r, tag, &mine[blk(r)]))
            .collect();
        let mut recvs: Vec<(usize, u32, &mut [u8])> = got
            .iter_mut()
            .enumerate()
            .filter(|(r, _)| *r != me)
            .map(|(r, b)| (r, tag, &mut b[..]))
            .collect();
        exchange_a(c, &sends, &mut recvs).await?;
    }
    // x_0 op x_1 op ... : fold left, x_r <- acc op x_r.
    let mut acc = std::mem::take(&mut got[0]);
    for x in got.iter_mut().skip(1) {
        red.apply(&acc, x)?;
        std::mem::swap(&mut acc, x);
    }
    Ok(acc)
}

/// Scan (and with `exclusive`, Exscan) by recursive doubling: log2(n) rounds; in the round at
/// distance `mask` a rank and `rank ^ mask` swap the reductions of the rank ranges they hold
/// (adjacent ranges, so combining lower-first keeps rank order for any operation), and a rank
/// whose partner is below it adds the partner's range to its own prefix. Returns the prefix
/// (for Exscan, of the ranks below; None on rank 0, which gets nothing).
pub async fn scan_recursive_doubling(
    c: &CommCore,
    tag: u32,
    red: Red<'_>,
    mine: &[u8],
    exclusive: bool,
) -> R<Option<crate::scratch::Scratch>> {
    use crate::scratch::Scratch;
    let (n, me) = (c.size(), c.rank);
    // The reduction of the range this rank holds, and its prefix so far (scratch buffers kept
    // per thread: no allocation per call).
    let copy = |v: &[u8]| {
        let mut s = Scratch::new(v.len());
        s.copy_from_slice(v);
        s
    };
    let mut partial = copy(mine);
    let mut prefix: Option<Scratch> = (!exclusive).then(|| copy(mine));
    let mut tmp = Scratch::new(mine.len());
    let mut mask = 1;
    while mask < n {
        let partner = me ^ mask;
        if partner < n {
            exchange_a(
                c,
                &[(partner, tag, &partial)],
                &mut [(partner, tag, &mut tmp)],
            )
            .await?;
            if partner < me {
                // tmp covers the ranks just below this range: tmp op partial, tmp op prefix.
                match prefix.as_mut() {
                    Some(p) => red.apply(&tmp, p)?,
                    None => prefix = Some(copy(&tmp)),
                }
                red.apply(&tmp, &mut partial)?;
            } else {
                red.combine(&mut partial, &mut tmp, false)?;
            }
        }
        mask <<= 1;
    }
    Ok(prefix)
}
