//! Collectives through the job segment: the ranks of a group that shares one host meet in their
//! collective slots (`volley_shm::coll`) instead of sending messages. A barrier is one flag per
//! rank; a broadcast is one copy in and one copy out per reader; a reduction is each
//! contribution written once and read by the ranks that fold it, in rank order, so that every
//! rank folds the same values in the same order and gets the same bits (also for floating point
//! and for operations that do not commute).
//!
//! A group gets a slot at each member when it first meets: each member claims one of its own
//! ([`World::shm_claim`]), the members trade what they claimed by messages (the caller's
//! business: the MPI face does it with an allgather), and [`World::shm_group`] makes the group
//! when every member has one. When the group is dropped, the slot retires: it is claimed again
//! only once every other member has finished the group's last operation (or left its slot), so
//! no reader is left behind, without any wait at the drop.
//!
//! Waiting follows the world's waiting mode (spin, then sleep on the doorbell, which the rank
//! whose flag it waits for rings), keeps the rest of the world moving ([`World::progress`]) and
//! fails with [`PeerLost`] when a member the wait needs has ended.

use crate::counters::Counter;
use crate::error::{PeerLost, RecvError};
use crate::wait::Waiter;
use crate::world::World;
use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use volley_shm::{coll_distance, Segment, COLL_DATA, COLL_INLINE, COLL_SLOTS};

/// The most bytes one contribution to a shared-memory collective can have.
pub const SHM_COLL_BYTES: usize = COLL_DATA;

/// The most bytes a contribution carries in its flag line (a short one: readers find it with
/// the flag, one cache line).
pub const SHM_COLL_INLINE: usize = COLL_INLINE;

/// A member's slot, as members trade it when their group first meets (16 bytes on the wire).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SlotId {
    /// The member's local rank (its place in the host's segment).
    pub local: u32,
    /// Which of its slots.
    pub slot: u32,
    /// The slot's generation (how many times it was claimed).
    pub gen: u64,
}

impl SlotId {
    /// What a member that has no slot (or shares no segment) says.
    pub const NONE: SlotId = SlotId {
        local: u32::MAX,
        slot: u32::MAX,
        gen: 0,
    };

    pub fn to_bytes(self) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(&self.local.to_le_bytes());
        b[4..8].copy_from_slice(&self.slot.to_le_bytes());
        b[8..].copy_from_slice(&self.gen.to_le_bytes());
        b
    }

    /// The 16 bytes of [`SlotId::to_bytes`]; a slice of another length reads as NONE.
    pub fn from_bytes(b: &[u8]) -> SlotId {
        let Ok(b) = <&[u8; 16]>::try_from(b) else {
            return SlotId::NONE;
        };
        let [l0, l1, l2, l3, s0, s1, s2, s3, g @ ..] = *b;
        SlotId {
            local: u32::from_le_bytes([l0, l1, l2, l3]),
            slot: u32::from_le_bytes([s0, s1, s2, s3]),
            gen: u64::from_le_bytes(g),
        }
    }
}

/// What this rank knows of its own slots.
#[derive(Clone, Debug, Default)]
pub(crate) enum SlotState {
    #[default]
    Free,
    InUse,
    /// Its group is gone; readers may still be at its last operation `last`.
    Retired {
        members: Vec<SlotId>,
        last: u64,
    },
}

pub(crate) type SlotTable = [SlotState; COLL_SLOTS];

/// A group of ranks of one host meeting in their collective slots.
pub struct ShmGroup {
    world: World,
    seg: std::sync::Arc<Segment>,
    /// Every member's slot, in group order.
    members: Box<[SlotId]>,
    /// This rank's place in the group.
    me: usize,
    /// The local ranks of the other members (whom a flag of ours may wake).
    others: Box<[usize]>,
    /// Operations done so far (the next one is `seq + 1`). One thread at a time runs a group's
    /// operations (a communicator's collectives are not concurrent), so load and store suffice.
    seq: AtomicU64,
    /// The last operation every member was seen to have published (so, for an operation two
    /// later, no reader is left in the buffer it writes).
    all_arrived: AtomicU64,
    /// An operation every other member was seen to have finished (its `done`, or an arrival
    /// after it): a writer that stays within a place's reuse distance of it looks no further.
    all_done: AtomicU64,
}

thread_local! {
    /// Where a contribution is copied out of its slot to be folded.
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0u8; COLL_DATA]);
}

impl World {
    /// Claims one of this rank's collective slots for a group about to meet, or says why not
    /// (all in use, or readers still at a retired group's last operation).
    pub fn shm_claim(&self) -> SlotId {
        let seg = self.eng().segment();
        let me = self.local_rank();
        let mut table = self.inner.coll_slots.borrow_mut();
        let mut eng = self.eng();
        let pick = table.iter().position(|s| match s {
            SlotState::Free => true,
            SlotState::InUse => false,
            SlotState::Retired { members, last } => members.iter().all(|m| {
                m.local as usize == me
                    || seg.coll_gen(m.local as usize, m.slot as usize) != m.gen
                    || seg.coll_done(m.local as usize, m.slot as usize) >= *last
                    || eng.local_fate(m.local as usize).is_some()
            }),
        });
        drop(eng);
        let Some(slot) = pick else {
            return SlotId::NONE;
        };
        table[slot] = SlotState::InUse;
        SlotId {
            local: me as u32,
            slot: slot as u32,
            gen: seg.coll_claim(me, slot),
        }
    }

    /// Gives back a slot [`World::shm_claim`] returned, unused (its group never met).
    pub fn shm_unclaim(&self, id: SlotId) {
        if id.local as usize == self.local_rank() && (id.slot as usize) < COLL_SLOTS {
            self.inner.coll_slots.borrow_mut()[id.slot as usize] = SlotState::Free;
        }
    }

    /// The group whose members claimed `members` (in group order; this rank is `me`), or None
    /// when one of them has no slot; this rank's claim is then given back.
    pub fn shm_group(&self, members: &[SlotId], me: usize) -> Option<ShmGroup> {
        let mine = members[me];
        let n = self.inner.l2g.len() as u32;
        if members
            .iter()
            .any(|m| m.local >= n || m.slot as usize >= COLL_SLOTS)
        {
            self.shm_unclaim(mine);
            self.eng().count(Counter::CollSlotsMissing, 1);
            return None;
        }
        self.eng().count(Counter::CollSlotsClaimed, 1);
        Some(ShmGroup {
            world: self.clone(),
            seg: self.eng().segment(),
            others: members
                .iter()
                .enumerate()
                .filter(|&(i, _)| i != me)
                .map(|(_, m)| m.local as usize)
                .collect(),
            members: members.into(),
            me,
            seq: AtomicU64::new(0),
            all_arrived: AtomicU64::new(0),
            all_done: AtomicU64::new(0),
        })
    }
}

impl Drop for ShmGroup {
    fn drop(&mut self) {
        let last = self.seq.load(Ordering::Relaxed);
        let mine = self.members[self.me];
        // Operations whose end nobody waits for do not say it; the group's last one is over now.
        self.seg
            .coll_finish(mine.local as usize, mine.slot as usize, last);
        self.world.inner.coll_slots.borrow_mut()[mine.slot as usize] = SlotState::Retired {
            members: self.members.to_vec(),
            last,
        };
    }
}

impl ShmGroup {
    pub fn size(&self) -> usize {
        self.members.len()
    }

    #[inline]
    fn at(&self, i: usize) -> (usize, usize) {
        let m = self.members[i];
        (m.local as usize, m.slot as usize)
    }

    #[inline]
    fn next(&self) -> u64 {
        let s = self.seq.load(Ordering::Relaxed) + 1;
        self.seq.store(s, Ordering::Relaxed);
        s
    }

    /// Publishes operation `s` with `len` bytes of data and wakes the members asleep on it.
    #[inline]
    fn arrive(&self, s: u64, len: usize) {
        self.arrive_quietly(s, len);
        self.wake_others();
    }

    /// Publishes operation `s`; the caller owes the members the wake-up (`wait_arrived` with
    /// `owed`), which costs less once the store has left this core: a fence right behind it
    /// waits for every reader's copy of the line to go.
    #[inline]
    fn arrive_quietly(&self, s: u64, len: usize) {
        let (l, slot) = self.at(self.me);
        self.seg.coll_arrive(l, slot, s, len);
    }

    /// Whether every member in `who` (each has published operation `s`) published `len` bytes
    /// with it, as this one expects: a member that passed a different count or datatype is the
    /// program's error, said instead of reading bytes that member never wrote.
    #[inline]
    pub fn same_len(
        &self,
        s: u64,
        len: usize,
        mut who: impl Iterator<Item = usize>,
    ) -> Result<(), RecvError> {
        match who.find_map(|i| {
            let (l, slot) = self.at(i);
            let theirs = self.seg.coll_len(l, slot, s);
            (theirs != len).then_some((l, theirs))
        }) {
            None => Ok(()),
            Some((l, theirs)) => Err(RecvError::CollectiveMismatch {
                rank: self.world.inner.l2g[l],
                theirs,
                mine: len,
            }),
        }
    }

    fn finish(&self, s: u64) {
        let (l, slot) = self.at(self.me);
        self.seg.coll_finish(l, slot, s);
        self.wake_others();
    }

    fn wake_others(&self) {
        self.seg
            .wake_sleepers(&self.others, |r| self.world.eng().notify(r));
    }

    /// Waits until every member in `who` has published operation `s`; with `owed`, wakes the
    /// members asleep on this rank's own arrival before it could sleep itself, and at the end.
    /// (A member asleep on it has arrived, so this wait never needs it; and one that has not
    /// arrived is not asleep on it.)
    fn wait_arrived(
        &self,
        s: u64,
        who: impl Iterator<Item = usize> + Clone,
        owed: bool,
    ) -> Result<(), RecvError> {
        let every = who.clone().count() == self.size();
        let r = self.wait(
            |seg| {
                who.clone().find(|&i| {
                    let (l, slot) = self.at(i);
                    seg.coll_arrived(l, slot, s) < s
                })
            },
            owed,
        );
        if every && r.is_ok() {
            self.all_arrived.store(s, Ordering::Relaxed);
        }
        if owed {
            self.wake_others();
        }
        r
    }

    /// Before writing operation `s`'s data, `k` operations from the last that used its places
    /// (`coll_distance`): waits until no member still reads operation `s - k`'s.
    #[inline(always)]
    fn wait_readers(&self, s: u64, k: u64) -> Result<(), RecvError> {
        if self.readers_known_done(s, k) {
            return Ok(());
        }
        self.wait_readers_slow(s, k)
    }

    #[inline(never)]
    fn wait_readers_slow(&self, s: u64, k: u64) -> Result<(), RecvError> {
        self.wait(|seg| self.reader_in(seg, s, k), false)
    }

    /// Whether no member can still read operation `s - k`'s places, without looking: there is
    /// none, every member was seen to have published `s - k + 1`, or to have finished `s - k`.
    #[inline(always)]
    fn readers_known_done(&self, s: u64, k: u64) -> bool {
        s <= k
            || self.all_arrived.load(Ordering::Relaxed) + k > s
            || self.all_done.load(Ordering::Relaxed) + k >= s
    }

    /// A member that may still read operation `s - k`'s places (the ones operation `s` writes);
    /// None when there is none, after noting how far every member has got (so that the next
    /// operations need not look).
    fn reader_in(&self, seg: &Segment, s: u64, k: u64) -> Option<usize> {
        let mut lowest = u64::MAX;
        for i in (0..self.size()).filter(|&i| i != self.me) {
            let (l, slot) = self.at(i);
            // A member that published a later operation has finished the earlier ones (it ran
            // them in order).
            let done = seg.coll_done(l, slot);
            let got = if done >= s - k {
                done
            } else if seg.coll_arrived(l, slot, s - k + 1) > s - k {
                s - k
            } else {
                return Some(i);
            };
            lowest = lowest.min(got);
        }
        if lowest != u64::MAX {
            self.all_done.fetch_max(lowest, Ordering::Relaxed);
        }
        None
    }

    /// Waits until `pending` finds no member left to wait for; with `owed`, wakes the others
    /// before it sleeps.
    #[inline]
    fn wait(
        &self,
        mut pending: impl FnMut(&Segment) -> Option<usize>,
        owed: bool,
    ) -> Result<(), RecvError> {
        if pending(&self.seg).is_none() {
            return Ok(());
        }
        self.wait_slow(&mut pending, owed)
    }

    #[cold]
    fn wait_slow(
        &self,
        pending: &mut dyn FnMut(&Segment) -> Option<usize>,
        mut owed: bool,
    ) -> Result<(), RecvError> {
        let w = &self.world;
        let mut waiter = Waiter::new(w.inner.cfg.wait, &w.inner.waits);
        let mut turns = 0u32;
        loop {
            turns = turns.wrapping_add(1);
            if waiter.blocking || turns.is_multiple_of(64) {
                if owed && waiter.blocking {
                    // About to sleep: whoever sleeps on this rank must be awake first.
                    self.wake_others();
                    owed = false;
                }
                // The rest of the world moves on while this rank waits here (MPI's progress
                // rule), and a member that ended is noticed.
                if let Err(e) = w.progress() {
                    waiter.finish(w);
                    return Err(e);
                }
                if let Some(i) = pending(&self.seg) {
                    let local = self.members[i].local as usize;
                    let fate = w.eng().local_fate(local);
                    // A member seen ended after it was seen missing may have arrived between
                    // the two looks and then finalised (a non-root's part of a reduction is
                    // all it owes): what it did before it ended is visible once its end is
                    // (the fates are read with Acquire), so look once more.
                    if let Some(fate) = fate.filter(|_| pending(&self.seg) == Some(i)) {
                        waiter.finish(w);
                        return Err(RecvError::PeerLost(PeerLost {
                            rank: w.inner.l2g[local],
                            fate,
                        }));
                    }
                }
            }
            if pending(&self.seg).is_none() {
                waiter.finish(w);
                return Ok(());
            }
            waiter.pause(w)?;
        }
    }

    /// Returns once every member has called it.
    #[inline]
    pub fn barrier(&self) -> Result<(), RecvError> {
        let s = self.next();
        // Its arrival overwrites the flag line of operation s - COLL_DEPTH (a data-less
        // distance: the shortest), whose length and short data a member may still be reading:
        // a broadcast's root can be that far ahead of a reader when a barrier follows, and
        // the reader then saw the barrier's length 0 as the root's count.
        self.wait_readers(s, coll_distance(0))?;
        self.arrive_quietly(s, 0);
        // No `done`: a barrier reads no buffer.
        self.wait_arrived(s, 0..self.size(), true)
    }

    /// Copies `buf` of member `root` into every other member's `buf` (all the same length, at
    /// most [`SHM_COLL_BYTES`]).
    #[inline]
    pub fn bcast(&self, root: usize, buf: &mut [u8]) -> Result<(), RecvError> {
        let s = self.next();
        let (l, slot) = self.at(root);
        if self.me == root {
            self.wait_readers(s, coll_distance(buf.len()))?;
            self.seg.coll_write(l, slot, s, buf);
            self.arrive(s, buf.len());
        } else {
            self.wait_arrived(s, std::iter::once(root), false)?;
            let same = self.same_len(s, buf.len(), std::iter::once(root));
            if same.is_ok() {
                self.seg.coll_read(l, slot, s, buf);
            }
            // The root may be at s + 2 already, waiting to write this buffer again.
            self.finish(s);
            same?;
        }
        Ok(())
    }

    /// The first half of a reduction: publishes this rank's contribution `mine` (every member's
    /// the same length, at most [`SHM_COLL_BYTES`]) to the ranks that fold: `root`, or every
    /// member when None. [`ShmGroup::fold`] is the second half (at every member: away from the
    /// root it only says this rank is done).
    #[inline(always)]
    pub fn contribute(&self, root: Option<usize>, mine: &[u8]) -> Result<Contribution, RecvError> {
        let s = self.next();
        if root == Some(self.me) && mine.len() <= COLL_INLINE {
            // Nobody else reads a root's contribution: a short one stays here (a copy, since
            // the result may overwrite it), and the slot is neither written nor raised.
            let mut kept = [0u8; COLL_INLINE];
            kept[..mine.len()].copy_from_slice(mine);
            return Ok(Contribution {
                s,
                len: mine.len(),
                folds: true,
                root: true,
                kept: Some(kept),
            });
        }
        let (l, slot) = self.at(self.me);
        self.wait_readers(s, coll_distance(mine.len()))?;
        self.seg.coll_write(l, slot, s, mine);
        // Where every member folds, every member waits for every arrival next, and wakes the
        // others there; a contribution to one root must wake it now.
        let folds = root.is_none_or(|r| r == self.me);
        if root.is_some() {
            self.arrive(s, mine.len());
        } else {
            self.arrive_quietly(s, mine.len());
        }
        Ok(Contribution {
            s,
            len: mine.len(),
            folds,
            root: root.is_some(),
            kept: None,
        })
    }

    /// The second half of a reduction: where this rank folds, waits for every contribution and
    /// calls `fold` with each, from the last member to the first, so that it can compute
    /// `c0 op (c1 op (... op c(n-1)))`; then says this rank is done.
    pub fn fold<E: From<RecvError>>(
        &self,
        c: Contribution,
        mut fold: impl FnMut(usize, &[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let (s, len) = (c.s, c.len);
        if c.folds {
            let me = self.me;
            // A root that kept its contribution did not publish it: only the others are waited
            // for.
            let kept = c.kept.is_some();
            let published = (0..self.size()).filter(move |&i| !kept || i != me);
            self.wait_arrived(s, published.clone(), !c.root)?;
            if let Err(e) = self.same_len(s, len, published) {
                if c.root {
                    self.finish(s);
                }
                return Err(e.into());
            }
            let mut each = |b: &mut [u8]| -> Result<(), E> {
                for i in (0..self.size()).rev() {
                    match &c.kept {
                        Some(k) if i == me => b.copy_from_slice(&k[..len]),
                        _ => {
                            let (l, slot) = self.at(i);
                            self.seg.coll_read(l, slot, s, b);
                        }
                    }
                    fold(i, b)?;
                }
                Ok(())
            };
            if len <= COLL_INLINE {
                each(&mut [0u8; COLL_INLINE][..len])?;
            } else {
                SCRATCH.with_borrow_mut(|b| each(&mut b[..len]))?;
            }
            // A reduction's other members may be at s + 2, waiting to write their buffers
            // again; an allreduce's members read each other's, and their next arrival says it.
            if c.root {
                self.finish(s);
            }
        }
        Ok(())
    }
}

impl ShmGroup {
    /// Scatters the root's `all` (every member's block of `out.len()` bytes, in member order;
    /// at most [`SHM_COLL_BYTES`] in all) into each member's `out`: the root writes them once
    /// into its slot, each member reads its own block. `all` is read at the root only.
    pub fn scatter(&self, root: usize, all: &[u8], out: &mut [u8]) -> Result<(), RecvError> {
        let s = self.next();
        let (l, slot) = self.at(root);
        let (b, len) = (out.len(), out.len() * self.size());
        if self.me == root {
            self.wait_readers(s, coll_distance(len))?;
            self.seg.coll_write(l, slot, s, &all[..len]);
            self.arrive(s, len);
            out.copy_from_slice(&all[root * b..(root + 1) * b]);
        } else {
            self.wait_arrived(s, std::iter::once(root), false)?;
            let same = self.same_len(s, len, std::iter::once(root));
            if same.is_ok() {
                self.seg.coll_read_at(l, slot, s, len, self.me * b, out);
            }
            // The root may be at s + 2 already, waiting to write this buffer again.
            self.finish(s);
            same?;
        }
        Ok(())
    }

    /// Every member's `mine` holds one block of `b` bytes for each member, in member order (at
    /// most [`SHM_COLL_BYTES`] in all); `out` gets block `me` of every member's, in member
    /// order. Each member writes its blocks once into its slot and reads its own block out of
    /// every other's.
    pub fn alltoall(&self, mine: &[u8], out: &mut [u8]) -> Result<(), RecvError> {
        let n = self.size();
        let len = mine.len();
        let b = len / n;
        let s = self.next();
        let (l, slot) = self.at(self.me);
        self.wait_readers(s, coll_distance(len))?;
        self.seg.coll_write(l, slot, s, mine);
        self.arrive_quietly(s, len);
        out[self.me * b..(self.me + 1) * b].copy_from_slice(&mine[self.me * b..(self.me + 1) * b]);
        self.wait_arrived(s, 0..n, true)?;
        // Every member reads every other's buffer: its next arrival says it is done with this
        // one, so a mismatch leaves nothing to undo.
        self.same_len(s, len, (0..n).filter(|&i| i != self.me))?;
        for i in (0..n).filter(|&i| i != self.me) {
            let (li, si) = self.at(i);
            self.seg
                .coll_read_at(li, si, s, len, self.me * b, &mut out[i * b..(i + 1) * b]);
        }
        // Every member reads every other's buffer: its next arrival says it is done with this
        // one (as an allreduce's).
        Ok(())
    }
}

/// Polled use: a group whose operations are driven by polls instead of waits (MPI's
/// non-blocking collectives, as futures the program's tests and waits move on). The caller
/// takes the group's operations one at a time and in the same order at every member, as the
/// waiting forms do; what differs is that nothing here waits or sleeps, so nothing here wakes
/// anyone either: a member polling a group never sleeps on it. A group is used one way or the
/// other, never both.
impl ShmGroup {
    /// Starts the group's next operation: its number.
    pub fn begin(&self) -> u64 {
        self.next()
    }

    /// A member that may still read operation `s - 2`'s places, which operation `s` may write
    /// (None: this member may write them now, whatever the length). The polled form of
    /// `wait_readers`.
    pub fn reader_left(&self, s: u64) -> Option<usize> {
        if self.readers_known_done(s, 2) {
            return None;
        }
        self.reader_in(&self.seg, s, 2)
    }

    /// Publishes this member's `data` (at most [`SHM_COLL_BYTES`]; empty for a barrier) for
    /// operation `s`, once [`ShmGroup::reader_left`] found no reader left.
    pub fn publish(&self, s: u64, data: &[u8]) {
        let (l, slot) = self.at(self.me);
        if !data.is_empty() {
            self.seg.coll_write(l, slot, s, data);
        }
        self.arrive_quietly(s, data.len());
    }

    /// Whether member `i` has published operation `s`.
    pub fn has_arrived(&self, i: usize, s: u64) -> bool {
        let (l, slot) = self.at(i);
        self.seg.coll_arrived(l, slot, s) >= s
    }

    /// The first member that has not published operation `s` yet; None once every member has
    /// (and then no member reads operation `s - 1`'s buffers any more).
    pub fn first_missing(&self, s: u64) -> Option<usize> {
        let missing = (0..self.size()).find(|&i| !self.has_arrived(i, s));
        if missing.is_none() {
            self.all_arrived.store(s, Ordering::Relaxed);
        }
        missing
    }

    /// Reads member `i`'s data for operation `s` (it has published it).
    pub fn read(&self, i: usize, s: u64, out: &mut [u8]) {
        let (l, slot) = self.at(i);
        self.seg.coll_read(l, slot, s, out);
    }

    /// Says this member has finished reading operation `s`'s buffers.
    pub fn done_reading(&self, s: u64) {
        let (l, slot) = self.at(self.me);
        self.seg.coll_finish(l, slot, s);
    }

    /// Whether member `i`, which a poll is still waiting for, has ended: then it never will
    /// publish, and the operation fails.
    pub fn lost(&self, i: usize) -> Option<RecvError> {
        let local = self.members[i].local as usize;
        let fate = self.world.eng().local_fate(local)?;
        Some(RecvError::PeerLost(PeerLost {
            rank: self.world.inner.l2g[local],
            fate,
        }))
    }
}

/// Bytes of a peer's slice read at a time into the scratch buffer before they are folded: small
/// enough to stay in the level-2 cache between the read and the fold.
const CROSS_CHUNK: usize = 64 << 10;

thread_local! {
    /// Where [`ShmGroup::allreduce_cross`] reads a peer's chunk to fold it.
    static CROSS_SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Long reductions by cross-memory reads: the members read each other's buffers with
/// process_vm_readv instead of passing the data through rings or slots.
impl ShmGroup {
    /// Whether every member can read the others' memory (process_vm_readv), as
    /// [`ShmGroup::allreduce_cross`] needs.
    pub fn cross_memory(&self) -> bool {
        self.members
            .iter()
            .all(|m| self.seg.can_single_copy(m.local as usize))
    }

    /// The size from which every member's point-to-point sends go by single copy (the largest
    /// start of the members' windows, as each announced it; usize::MAX where one never copies
    /// so): what this machine's profile or settings say about reading across, which
    /// `collectives::Shape::copy_from` carries to the choice. Every member reads the same
    /// announcements, so all agree.
    pub fn cross_from(&self) -> usize {
        self.members
            .iter()
            .map(|m| self.seg.single_copy_from(m.local as usize))
            .max()
            .map_or(usize::MAX, |f| usize::try_from(f).unwrap_or(usize::MAX))
    }

    /// The bytes of member `i`'s slice of a vector of `len` bytes in elements of `elem` bytes:
    /// the elements split as evenly as they go, in member order.
    fn slice(&self, i: usize, len: usize, elem: usize) -> std::ops::Range<usize> {
        let (n, p) = (len / elem, self.size());
        (n * i / p * elem)..(n * (i + 1) / p * elem)
    }

    /// Every member's `N` addresses (this member's `mine`; one or two), in member order,
    /// through the slots, with the length of the vector each member passed (`len` here): a
    /// member that passed another length fails the call at every member alike (each sees every
    /// length), before anyone reads a byte.
    fn trade<const N: usize>(
        &self,
        mine: [u64; N],
        len: usize,
    ) -> Result<Vec<[u64; N]>, RecvError> {
        const { assert!(N <= 2) };
        let mut bytes = [0u8; 24];
        for (k, a) in mine.iter().chain([&(len as u64)]).enumerate() {
            bytes[k * 8..k * 8 + 8].copy_from_slice(&a.to_le_bytes());
        }
        let word = |d: &[u8], k: usize| {
            u64::from_le_bytes(d[k * 8..k * 8 + 8].try_into().expect("8 bytes"))
        };
        let mut all = vec![[0u64; N]; self.size()];
        let mut other = None;
        let c = self.contribute(None, &bytes[..N * 8 + 8])?;
        self.fold(c, |i, d| -> Result<(), RecvError> {
            for (k, a) in all[i].iter_mut().enumerate() {
                *a = word(d, k);
            }
            if word(d, N) as usize != len && other.is_none() {
                other = Some((i, word(d, N) as usize));
            }
            Ok(())
        })?;
        match other {
            None => Ok(all),
            Some((i, theirs)) => Err(RecvError::CollectiveMismatch {
                rank: self.world.inner.l2g[self.members[i].local as usize],
                theirs,
                mine: len,
            }),
        }
    }

    /// Copies `buf.len()` bytes from address `at` in member `q`'s memory into `buf`.
    fn read_member(&self, q: usize, buf: &mut [u8], at: u64) -> Result<(), RecvError> {
        let local = self.members[q].local as usize;
        volley_sys::process_vm_read(self.seg.pid(local), buf, at).map_err(|e| {
            RecvError::SingleCopy {
                rank: self.world.inner.l2g[local],
                len: buf.len(),
                why: e.to_string(),
            }
        })?;
        // One count per read of up to CROSS_CHUNK bytes (a system call's worth), not per byte.
        self.world
            .eng()
            .count(Counter::CollCrossBytes, buf.len() as u64);
        Ok(())
    }

    /// Reads from every other member `q` (the next one first, so that no member is every
    /// reader's first) the bytes `part(q)` names: a range of `out` and the address in `q`'s
    /// memory it comes from. Then waits until every member has read (nobody leaves, and reuses
    /// its buffers, while another may still read them), and returns the first failed read.
    fn read_others(
        &self,
        out: &mut [u8],
        part: impl Fn(usize) -> (std::ops::Range<usize>, u64),
    ) -> Result<(), RecvError> {
        let (p, me) = (self.size(), self.me);
        let read = (1..p).try_for_each(|k| {
            let q = (me + k) % p;
            let (r, at) = part(q);
            self.read_member(q, &mut out[r], at)
        });
        self.barrier()?;
        read
    }

    /// The first half of [`ShmGroup::allreduce_cross`]: this member's slice of `out`, its own
    /// contribution folded with every other member's, read a chunk at a time from the `send`
    /// addresses in `addrs`.
    fn fold_own<E: From<RecvError>>(
        &self,
        send: Option<&[u8]>,
        out: &mut [u8],
        addrs: &[[u64; 2]],
        elem: usize,
        fold: &mut impl FnMut(&[u8], &mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let (p, me) = (self.size(), self.me);
        let own = self.slice(me, out.len(), elem);
        if let Some(b) = send {
            out[own.clone()].copy_from_slice(&b[own.clone()]);
        }
        CROSS_SCRATCH.with_borrow_mut(|scratch| {
            scratch.resize(CROSS_CHUNK.min(own.len()).max(elem), 0);
            let chunk = (scratch.len() / elem).max(1) * elem;
            for k in 1..p {
                // Each member starts with the next one: no member is every reader's first.
                let q = (me + k) % p;
                let mut at = own.start;
                while at < own.end {
                    let n = chunk.min(own.end - at);
                    let buf = &mut scratch[..n];
                    self.read_member(q, buf, addrs[q][0] + at as u64)?;
                    fold(buf, &mut out[at..at + n])?;
                    at += n;
                }
            }
            Ok(())
        })
    }

    /// An allreduce of a long vector with a commutative operation: member `i` folds slice `i`
    /// of every member's `send` into its `recv` (reading the others' with process_vm_readv, a
    /// chunk at a time), and once every slice is folded each member reads the others' slices
    /// from their owners' `recv` straight into its own. Each byte is copied twice and folded
    /// once, with two synchronisations and no rounds, where reduce-scatter and allgather by
    /// messages take 2 log2(n) rounds. Every member gets each slice as its one owner folded it,
    /// so all get the same bits. `fold(x, acc)` makes `acc = x op acc`. `send` None: this
    /// member's contribution is in `recv` already (in place). Every member calls it with the
    /// same length and `elem` (which divides it), after [`ShmGroup::cross_memory`] said true at
    /// every member; the buffers stay borrowed until every member is done reading them. Fails at
    /// every member if any failed to fold its slice, and with [`RecvError::PeerLost`] when a
    /// member ended.
    pub fn allreduce_cross<E: From<RecvError>>(
        &self,
        send: Option<&[u8]>,
        out: &mut [u8],
        elem: usize,
        mut fold: impl FnMut(&[u8], &mut [u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        let len = out.len();
        assert!(
            send.is_none_or(|b| b.len() == len) && elem > 0 && len.is_multiple_of(elem),
            "allreduce_cross: the contribution and the result are the same length, whole elements"
        );
        let recv = out.as_ptr() as u64;
        let addrs = self.trade([send.map_or(recv, |b| b.as_ptr() as u64), recv], out.len())?;
        let rank = |i: usize| self.world.inner.l2g[self.members[i].local as usize];
        // Fold this member's slice; a failure is said to the others before it is returned.
        let folded = self.fold_own(send, out, &addrs, elem, &mut fold);
        // Every slice folded (or who failed): a flag per member through the slots.
        let c = self.contribute(None, &[folded.is_ok() as u8])?;
        let mut failed = None;
        self.fold(c, |i, d| -> Result<(), RecvError> {
            if d[0] == 0 && failed.is_none() {
                failed = Some(i);
            }
            Ok(())
        })?;
        folded?;
        if let Some(i) = failed {
            return Err(RecvError::SingleCopy {
                rank: rank(i),
                len,
                why: format!("rank {} could not fold its slice of the allreduce", rank(i)),
            }
            .into());
        }
        // The other slices, from their owners.
        self.read_others(out, |q| {
            let r = self.slice(q, len, elem);
            let at = addrs[q][1] + r.start as u64;
            (r, at)
        })
        .map_err(E::from)
    }
}

/// Allgathers by cross-memory reads (see [`ShmGroup::allreduce_cross`]). (Not broadcasts: when
/// every member reads the root's one buffer at once the reads queue on the root's page tables;
/// 16-core server, 1 MiB to 16 ranks: 1,713 us against the scatter-ring's 516.)
impl ShmGroup {
    /// Every member's block into its place in every member's `out` (a block per member, in
    /// member order): each member says where its block is, then reads the others' with
    /// process_vm_readv. `mine` None: this member's block is in its place in `out` already (in
    /// place). Every member calls it with the same lengths, after [`ShmGroup::cross_memory`]
    /// said true at every member.
    pub fn allgather_cross(&self, mine: Option<&[u8]>, out: &mut [u8]) -> Result<(), RecvError> {
        let p = self.size();
        let me = self.me;
        let len = out.len() / p;
        assert!(
            out.len() == len * p && mine.is_none_or(|b| b.len() == len),
            "allgather_cross: a block per member, each the length of this member's"
        );
        let own = out[me * len..].as_ptr() as u64;
        let addrs = self.trade([mine.map_or(own, |b| b.as_ptr() as u64)], len)?;
        if let Some(b) = mine {
            out[me * len..(me + 1) * len].copy_from_slice(b);
        }
        self.read_others(out, |q| (q * len..(q + 1) * len, addrs[q][0]))
    }
}

/// A contribution published by [`ShmGroup::contribute`], to be finished by [`ShmGroup::fold`].
#[must_use = "a contribution must be finished with ShmGroup::fold"]
pub struct Contribution {
    s: u64,
    len: usize,
    folds: bool,
    /// A reduction to one member (not an allreduce).
    root: bool,
    /// The root's own short contribution, kept here instead of in its slot.
    kept: Option<[u8; COLL_INLINE]>,
}
