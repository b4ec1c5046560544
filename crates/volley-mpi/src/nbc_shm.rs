//! Non-blocking collectives in the segment: MPI_Ibarrier, MPI_Ibcast, MPI_Ireduce and
//! MPI_Iallreduce of a communicator whose ranks share this host meet in collective slots, as
//! the blocking ones do (`coll::place_for`), instead of sending messages.
//!
//! A communicator's non-blocking collectives get a group of their own (a second slot at each
//! member), used by polls (`volley::ShmGroup`'s polled forms): a program's test or wait polls
//! the collective's future, which publishes and reads flags and never waits or sleeps.
//!
//! Order. The group's operations must be taken in the same order at every member, and each
//! member must finish an operation's reads before it publishes the next one (a member that
//! published operation `s` has finished `s - 2`: that is how a writer knows its buffer is free).
//! Polls come in any order (`p2p::advance` polls every collective in flight), so each collective
//! takes a number when it starts (in MPI's start order, the same at every member) and waits its
//! turn: it begins once the one before it on this communicator has ended here.
//!
//! Setup. The first one on a communicator claims this rank's slot and trades it with the
//! other members by messages (without blocking: a rank's non-blocking collective must not wait
//! for the other ranks to start theirs); the ones after it wait their turn, so they find the
//! group there. If one member had no slot free, every member finds no group and the
//! communicator's non-blocking collectives send messages, alike everywhere.

use crate::abi::H;
use crate::coll::{apply, barrier_a, bcast_a, exchange_a, reduce_a, unpacked, Op, P};
use crate::dtype::TypeRef;
use crate::err::{from_recv, R};
use crate::nbc::Seq;
use crate::state::CommCore;
use std::future::poll_fn;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::task::Poll;
use volley::collectives::{self, Algo, Coll, Shape};
use volley::{ShmGroup, SlotId};

/// The kind of the messages that trade the members' slots (its sequence number in the tag, as
/// every collective's).
const TAG_SETUP: u32 = (1 << 30) | 22;

/// A communicator's non-blocking collectives in the segment.
#[derive(Default)]
pub struct NbcShm {
    /// How many have started (the next one takes this plus one).
    started: AtomicU64,
    /// The last one that ended here (all of them up to it did).
    ended: AtomicU64,
    /// The group, once the first one set it up (None inside: messages).
    group: OnceLock<Option<ShmGroup>>,
}

/// A non-blocking collective that meets in the segment: its number on the communicator.
#[derive(Clone, Copy)]
pub struct Ticket(u64);

/// The ticket of a non-blocking collective `coll` of `bytes` (per rank, as
/// `collectives::Shape` counts them) that is starting now, if it meets in the segment; None
/// for a blocking call or one that goes by messages. Every member decides alike: the choice
/// depends only on what MPI makes the same everywhere.
pub fn ticket(
    c: &CommCore,
    coll: Coll,
    bytes: usize,
    count: usize,
    op: Option<Op>,
) -> Option<Ticket> {
    if !crate::nbc::is_starting() || !c.shared || crate::nbc::is_persistent_start() {
        return None;
    }
    let sh = Shape {
        bytes,
        ranks: c.size(),
        count,
        commutative: op.is_none_or(Op::commutative),
        shared: true,
        spread: false,
        // Non-blocking reductions read no other rank's memory.
        cross: false,
        copy_from: usize::MAX,
    };
    (collectives::select(coll, sh) == Algo::Shm)
        .then(|| Ticket(c.nbc_shm.started.fetch_add(1, Ordering::Relaxed) + 1))
}

/// Ends ticket `k` here when dropped (also on an error, so the ones after it are not stuck).
struct Turn<'a>(&'a NbcShm, u64);

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        // SYNC: Release; pairs with the Acquire in `turn`: this collective's reads are over
        // before the next one publishes (both run on this thread, but the order is the point).
        self.0.ended.fetch_max(self.1, Ordering::Release);
    }
}

/// Ready once `f` says true; an error ends it.
async fn until(mut f: impl FnMut() -> R<bool>) -> R {
    poll_fn(|_| match f() {
        Ok(true) => Poll::Ready(Ok(())),
        Ok(false) => Poll::Pending,
        Err(e) => Poll::Ready(Err(e)),
    })
    .await
}

/// Whether member `i`, still awaited, has ended (asked every 64th poll: the rank table is
/// shared by the host, and a poll that finds nothing comes round again at once).
fn check_lost(g: &ShmGroup, i: usize, polls: &mut u32) -> R<bool> {
    *polls = polls.wrapping_add(1);
    if !polls.is_multiple_of(64) {
        return Ok(false);
    }
    g.lost(i).map_or(Ok(false), |e| Err(from_recv(&e)))
}

/// Waits until every member has published operation `s` (or one of them ended).
async fn everyone(g: &ShmGroup, s: u64) -> R {
    let mut polls = 0;
    until(|| match g.first_missing(s) {
        None => Ok(true),
        Some(i) => check_lost(g, i, &mut polls),
    })
    .await
}

/// Waits until member `i` has published operation `s`.
async fn arrived(g: &ShmGroup, i: usize, s: u64) -> R {
    let mut polls = 0;
    until(|| {
        if g.has_arrived(i, s) {
            return Ok(true);
        }
        check_lost(g, i, &mut polls)
    })
    .await
}

/// Waits until this member may write operation `s`'s buffer: no member still reads operation
/// `s - 2`'s (one that has ended never will finish).
async fn writable(g: &ShmGroup, s: u64) -> R {
    let mut polls = 0;
    until(|| match g.reader_left(s) {
        None => Ok(true),
        Some(i) => check_lost(g, i, &mut polls),
    })
    .await
}

/// Waits for ticket `k`'s turn; the group it meets in (None: messages). The first ticket sets
/// the group up, with messages of kind TAG_SETUP numbered by its collective's `s`.
async fn turn(c: &CommCore, k: Ticket, s: Seq) -> R<Option<&ShmGroup>> {
    let st = &c.nbc_shm;
    // SYNC: Acquire; pairs with the Release in Turn::drop.
    until(|| Ok(st.ended.load(Ordering::Acquire) + 1 >= k.0)).await?;
    if k.0 == 1 {
        let world = c.coll.world();
        let mine = world.shm_claim();
        let (n, me) = (c.size(), c.rank);
        let mut all = vec![0u8; 16 * n];
        let tag = s.tag(TAG_SETUP);
        let ours = mine.to_bytes();
        all[16 * me..16 * (me + 1)].copy_from_slice(&ours);
        let sends: Vec<(usize, u32, &[u8])> = (0..n)
            .filter(|&r| r != me)
            .map(|r| (r, tag, &ours[..]))
            .collect();
        let mut recvs: Vec<(usize, u32, &mut [u8])> = all
            .chunks_mut(16)
            .enumerate()
            .filter(|&(r, _)| r != me)
            .map(|(r, b)| (r, tag, b))
            .collect();
        if let Err(e) = exchange_a(c, &sends, &mut recvs).await {
            world.shm_unclaim(mine);
            return Err(e);
        }
        let ids: Vec<SlotId> = all.chunks_exact(16).map(SlotId::from_bytes).collect();
        let _ = st.group.set(world.shm_group(&ids, me));
    }
    Ok(st.group.get().and_then(Option::as_ref))
}

/// MPI_Ibarrier in the segment.
pub async fn barrier(c: &CommCore, k: Ticket, s: Seq) -> R {
    let _turn = Turn(&c.nbc_shm, k.0);
    let Some(g) = turn(c, k, s).await? else {
        return barrier_a(c, s).await;
    };
    let o = g.begin();
    // A barrier writes and reads no buffer.
    g.publish(o, &[]);
    everyone(g, o).await
}

/// MPI_Ibcast in the segment: `data` (the root's, packed; at most a slot's worth) into every
/// member's `buffer` of `n` elements of `t`.
#[allow(clippy::too_many_arguments)]
pub async fn bcast(
    c: &CommCore,
    k: Ticket,
    s: Seq,
    root: usize,
    mut data: Vec<u8>,
    t: TypeRef,
    buffer: P,
    n: usize,
) -> R {
    let _turn = Turn(&c.nbc_shm, k.0);
    match turn(c, k, s).await? {
        None => bcast_a(c, s, root, &mut data).await?,
        Some(g) => {
            let o = g.begin();
            if c.rank == root {
                writable(g, o).await?;
                g.publish(o, &data);
            } else {
                arrived(g, root, o).await?;
                let same = g.same_len(o, data.len(), std::iter::once(root));
                if same.is_ok() {
                    g.read(root, o, &mut data);
                }
                // The root may want this buffer again at o + 2.
                g.done_reading(o);
                same.map_err(|e| from_recv(&e))?;
            }
        }
    }
    if c.rank != root {
        unpacked(&t, &data, buffer.get(), n);
    }
    Ok(())
}

/// MPI_Ireduce (`root`) and MPI_Iallreduce (None) in the segment: `mine` (packed, at most a
/// slot's worth) folded in rank order into `out` (`n` elements of `t`) where the result goes.
#[allow(clippy::too_many_arguments)]
pub async fn reduce(
    c: &CommCore,
    k: Ticket,
    s: Seq,
    root: Option<usize>,
    op: Op,
    t: TypeRef,
    th: H,
    n: usize,
    mine: Vec<u8>,
    out: P,
) -> R {
    let _turn = Turn(&c.nbc_shm, k.0);
    let len = mine.len();
    let folds = root.is_none_or(|r| r == c.rank);
    let mut res = vec![0u8; len];
    match turn(c, k, s).await? {
        None => {
            reduce_a(c, s, root.unwrap_or(0), op, &t, th, n, &mine, &mut res).await?;
            if root.is_none() {
                bcast_a(c, s, 0, &mut res).await?;
            }
        }
        Some(g) => {
            let o = g.begin();
            writable(g, o).await?;
            g.publish(o, &mine);
            if folds {
                everyone(g, o).await?;
                if let Err(e) = g.same_len(o, len, (0..g.size()).filter(|&i| i != c.rank)) {
                    if root.is_some() {
                        g.done_reading(o);
                    }
                    return Err(from_recv(&e));
                }
                // c0 op (c1 op (... op c(n-1))) to a root, as the blocking reduce; an
                // allreduce in recursive doubling's association, as the blocking one (see
                // coll::TreeFold). Every member that folds gets the same bits.
                let mut each = vec![0u8; len];
                let last = g.size() - 1;
                if root.is_none() {
                    let mut tree = crate::coll::TreeFold::new(g.size(), len);
                    for i in (0..=last).rev() {
                        g.read(i, o, &mut each);
                        tree.push(i, &each, &mut res, |x, acc| apply(op, &t, th, n, x, acc))?;
                    }
                } else {
                    g.read(last, o, &mut res);
                    for i in (0..last).rev() {
                        g.read(i, o, &mut each);
                        apply(op, &t, th, n, &each, &mut res)?;
                    }
                }
                if root.is_some() {
                    // The other members may want their buffers again at o + 2; an allreduce's
                    // members say it by their next arrival.
                    g.done_reading(o);
                }
            }
        }
    }
    if folds {
        unpacked(&t, &res, out.get(), n);
    }
    Ok(())
}
