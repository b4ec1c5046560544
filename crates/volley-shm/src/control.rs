//! The control protocol over the segment, beside the layout it runs on (`docs/shm-layout.md`):
//! how a rank says it runs, finished or ended and how the others learn it; how a receiver about
//! to sleep and a sender that just published a record agree on a wake-up; how a message is laid
//! over records (whole, or fragments) and how a single-copy descriptor is written. The `volley`
//! crate gives these meaning (fates, counters, endpoints); the bytes and the orderings are here.

use crate::layout::{
    CAP_HEAVY_ARM, CAP_SINGLE_COPY, CAP_SUMMARY, RANK_EXITED, RANK_FINALIZED, RANK_KILLED,
    RANK_RUNNING, RANK_VANISHED,
};
use crate::ring::{Kind, Meta, Producer, GRANTS, RNDV_DESC};
use crate::Segment;
use std::sync::atomic::{compiler_fence, fence, Ordering};

/// What the rank table says about a rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankState {
    /// Not started yet, or running.
    Alive,
    /// It closed its world normally.
    Finalized,
    /// Its process exited with this code (written by the launcher).
    Exited(i32),
    /// Its process was killed by this signal (written by the launcher).
    Killed(i32),
    /// Its process ended before it closed its world; a peer on its host noticed (no launcher of
    /// volley's saw how).
    Vanished,
}

impl Segment {
    /// Says rank `me` runs, with its process id, whether peers may hand it messages by
    /// address (single copy), and from which size its own sends go so (`copy_from`, u64::MAX:
    /// never).
    pub fn announce(&self, me: usize, pid: u32, single_copy: bool, copy_from: u64) {
        let b = self.rank(me);
        b.pid.store(pid, Ordering::Relaxed);
        b.copy_from.store(copy_from, Ordering::Relaxed);
        // CAP_SUMMARY from the start, CAP_HEAVY_ARM not: what a sender reads before
        // `use_heavy_arm` changes them makes it fence, which is always right.
        let caps = CAP_SUMMARY | if single_copy { CAP_SINGLE_COPY } else { 0 };
        b.caps.store(caps, Ordering::Relaxed);
        b.state.store(RANK_RUNNING, Ordering::Relaxed);
        // The Release in bump_epoch publishes pid and caps with the state.
        self.bump_epoch();
    }

    /// Whether rank `r` said it can be handed messages by address.
    #[inline]
    pub fn can_single_copy(&self, r: usize) -> bool {
        // Relaxed: written before the rank's RUNNING, which the caller saw through the epoch.
        self.rank(r).caps.load(Ordering::Relaxed) & CAP_SINGLE_COPY != 0
    }

    /// The size from which rank `r` said its sends go by single copy (u64::MAX: never).
    pub fn single_copy_from(&self, r: usize) -> u64 {
        // Relaxed: as caps, published with the rank's RUNNING through the epoch.
        self.rank(r).copy_from.load(Ordering::Relaxed)
    }

    /// The process id rank `r` announced.
    pub fn pid(&self, r: usize) -> u32 {
        // Relaxed: as caps, published with the rank's RUNNING through the epoch.
        self.rank(r).pid.load(Ordering::Relaxed)
    }

    /// Rank `r`'s state as last written. Read it after [`Segment::state_epoch`] changed: the
    /// Acquire there makes the state written before the matching bump visible.
    pub fn rank_state(&self, r: usize) -> RankState {
        let b = self.rank(r);
        let detail = b.detail.load(Ordering::Relaxed);
        match b.state.load(Ordering::Relaxed) {
            RANK_FINALIZED => RankState::Finalized,
            RANK_EXITED => RankState::Exited(detail),
            RANK_KILLED => RankState::Killed(detail),
            RANK_VANISHED => RankState::Vanished,
            _ => RankState::Alive,
        }
    }

    /// Records how rank `r` ended (the launcher, once it reaped the process; or the rank itself
    /// through [`Segment::finalize`]).
    pub fn set_rank_state(&self, r: usize, state: RankState) {
        let (s, detail) = match state {
            RankState::Alive => (RANK_RUNNING, 0),
            RankState::Finalized => (RANK_FINALIZED, 0),
            RankState::Exited(c) => (RANK_EXITED, c),
            RankState::Killed(s) => (RANK_KILLED, s),
            RankState::Vanished => (RANK_VANISHED, 0),
        };
        let b = self.rank(r);
        b.detail.store(detail, Ordering::Relaxed);
        b.state.store(s, Ordering::Relaxed);
        // SYNC: the Release in bump_epoch publishes detail and state; pairs with the Acquire in
        // state_epoch, after which rank_state reads them.
        self.bump_epoch();
    }

    /// Rank `me` closes its world: publishes its counters once (never per message), then says
    /// it finished. The caller then rings the other ranks' doorbells.
    pub fn finalize(&self, me: usize, counters: &[u64]) {
        let b = self.rank(me);
        for (slot, v) in b.counters.iter().zip(counters) {
            slot.store(*v, Ordering::Relaxed);
        }
        // SYNC: Release; pairs with the Acquire in published_counters.
        b.counters_valid.store(1, Ordering::Release);
        self.set_rank_state(me, RankState::Finalized);
    }

    /// The first `n` counters rank `r` published when it closed its world, if it did.
    pub fn published_counters(&self, r: usize, n: usize) -> Option<Vec<u64>> {
        let b = self.rank(r);
        // SYNC: Acquire; pairs with the Release in finalize.
        (b.counters_valid.load(Ordering::Acquire) == 1).then(|| {
            b.counters[..n.min(b.counters.len())]
                .iter()
                .map(|c| c.load(Ordering::Relaxed))
                .collect()
        })
    }

    /// Makes rank `me` (this process) the heavy side of the wake-up handshake, if the kernel
    /// allows it: it registers for membarrier and from then on arms with one, so that senders
    /// that did the same read its `armed` flag without a fence of their own (one fewer full
    /// barrier per message and per collective flag, the send path's largest cost). `summary`:
    /// whether `me` may clear bits of its ready summary (its senders fence for that, whatever
    /// this says). Call before the rank's first message; returns whether it took effect.
    ///
    /// The handshake is the asymmetric form of the store-buffering one: a sender stores its
    /// record, then reads `armed` (a compiler barrier between); the sleeper stores `armed`,
    /// then has every running registered thread execute a full barrier (membarrier), then
    /// re-reads the rings. Either the sender's read came after its barrier and sees `armed`,
    /// or its record was stored before the barrier and the re-read sees it.
    pub fn use_heavy_arm(&self, me: usize, summary: bool) -> bool {
        if !volley_sys::unix::membarrier_register_global() {
            if !summary {
                self.rank(me)
                    .caps
                    .fetch_and(!CAP_SUMMARY, Ordering::Relaxed);
            }
            return false;
        }
        // Heavy arms from now on, before any sender can read the capability.
        self.heavy.store(true, Ordering::Relaxed);
        let b = self.rank(me);
        // SYNC: Release; a sender's Relaxed read of the capability needs no more than the
        // membarrier that every arm from now on makes (the flag above is this process's own).
        b.caps.fetch_or(CAP_HEAVY_ARM, Ordering::Release);
        if !summary {
            b.caps.fetch_and(!CAP_SUMMARY, Ordering::Release);
        }
        true
    }

    /// Whether this process arms with a membarrier and may skip its fences before reading the
    /// `armed` flag of a rank that does the same.
    #[inline]
    fn heavy(&self) -> bool {
        self.heavy.load(Ordering::Relaxed)
    }

    /// Whether a sender in this process needs a full fence between publishing for `dst` and
    /// reading `dst`'s `armed` flag (and, with `summary`, its ready summary's bit).
    #[inline]
    fn needs_fence(&self, dst: usize, summary: bool) -> bool {
        if !self.heavy() {
            return true;
        }
        let caps = self.rank(dst).caps.load(Ordering::Relaxed);
        caps & CAP_HEAVY_ARM == 0 || (summary && caps & CAP_SUMMARY != 0)
    }

    /// Rank `me` is about to sleep on its eventfd: from now on senders wake it. The caller must
    /// poll its rings once more after this and before sleeping.
    pub fn arm(&self, me: usize) {
        // SYNC: SeqCst swap + fence; pairs with the fence in `wants_wake`. Either the
        // receiver's re-check sees the sender's record, or the sender sees the armed flag.
        self.rank(me).armed.swap(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        // SYNC: the heavy side of the asymmetric handshake (see `use_heavy_arm`): every running
        // registered thread executes a full barrier before the caller re-reads its rings. The
        // kernel refuses it only to an unregistered process; were it to, a wake-up lost to a
        // sender that skipped its fence would cost the sleeper its poll's timeout, not a hang.
        if self.heavy() {
            volley_sys::unix::membarrier_global();
        }
    }

    /// Whether rank `me` is still armed: false once a sender took the flag to ring its doorbell.
    #[inline]
    pub fn is_armed(&self, me: usize) -> bool {
        // Relaxed: a stale 1 only postpones noticing a ring to the next look (a spare wake-up),
        // and a 0 is only ever written by a sender that rang, or by `me`.
        self.rank(me).armed.load(Ordering::Relaxed) != 0
    }

    /// Rank `me` spins or runs again: senders stop paying for wake-ups. Returns whether a
    /// sender had taken the flag (and so rings, or has rung, the doorbell).
    #[inline]
    pub fn disarm(&self, me: usize) -> bool {
        // SYNC: AcqRel swap; pairs with the sender's swap in `wants_wake_fenced`: exactly one
        // of the two takes the 1. Once per wait that armed, never per message.
        self.rank(me).armed.swap(0, Ordering::AcqRel) == 0
    }

    /// After rank `src` published records for `dst`: marks the ring `src -> dst` in `dst`'s
    /// ready summary, and says whether `dst` asked to be woken (clearing its flag, so that of
    /// several senders one rings its eventfd).
    #[inline]
    pub fn published(&self, src: usize, dst: usize) -> bool {
        // SYNC: SeqCst fence; pairs with the SeqCst fence in `arm` (the record's publication
        // before the read of the armed flag) and with the one in `clear_ready` (before the read
        // of the summary bit: either the receiver's re-check after clearing sees the record, or
        // this sees the cleared bit and sets it again). Between two heavy-arm ranks, where the
        // receiver never clears its summary, the membarrier in `arm` stands in for it.
        if self.needs_fence(dst, true) {
            fence(Ordering::SeqCst);
        } else {
            compiler_fence(Ordering::SeqCst);
        }
        let w = self.summary_word(dst, src / 64);
        let bit = 1u64 << (src % 64);
        // Relaxed load first: while the receiver has not cleared the bit (it keeps it while the
        // ring holds anything), the line stays shared and a sender pays no write for it.
        if w.load(Ordering::Relaxed) & bit == 0 {
            // SYNC: Release; pairs with the Acquire in `ready_word` (the record before the bit).
            w.fetch_or(bit, Ordering::Release);
        }
        self.wants_wake_fenced(dst)
    }

    /// After publishing records for `dst`: whether `dst` asked to be woken. Clears its flag, so
    /// that of several senders one rings its eventfd.
    #[inline]
    pub fn wants_wake(&self, dst: usize) -> bool {
        // SYNC: SeqCst fence; pairs with the SeqCst fence in `arm`: it orders the record's
        // publication before the read of the flag (or, between heavy-arm ranks, the membarrier
        // there does).
        if self.needs_fence(dst, false) {
            fence(Ordering::SeqCst);
        } else {
            compiler_fence(Ordering::SeqCst);
        }
        self.wants_wake_fenced(dst)
    }

    /// Whether the publication a rank of this process just made must be followed by a full
    /// fence before it reads the `armed` flags of `ranks` (false only between heavy-arm ranks).
    #[inline]
    pub(crate) fn needs_fence_for(&self, ranks: &[usize]) -> bool {
        ranks.iter().any(|&r| self.needs_fence(r, false))
    }

    /// Word `k` of receiver `me`'s ready summary: bit `s % 64` set means the ring from source
    /// `k * 64 + s % 64` may hold records `me` has not looked at.
    #[inline]
    pub fn ready_word(&self, me: usize, k: usize) -> u64 {
        // SYNC: Acquire; pairs with the Release fetch_or in `published`.
        self.summary_word(me, k).load(Ordering::Acquire)
    }

    /// Receiver `me` found the ring from `src` holding nothing unread: clears its bit. The
    /// caller must look at that ring once more afterwards (a record published meanwhile either
    /// shows there, or its sender saw the cleared bit and set it again).
    #[inline]
    pub fn clear_ready(&self, me: usize, src: usize) {
        self.summary_word(me, src / 64)
            .fetch_and(!(1u64 << (src % 64)), Ordering::Relaxed);
        // SYNC: SeqCst fence; pairs with the fence in `published`: the clearing before the
        // caller's re-check of the ring.
        fence(Ordering::SeqCst);
    }

    /// Marks the ring from `src` in receiver `me`'s summary again (it found a record there
    /// after clearing the mark).
    #[inline]
    pub fn mark_ready(&self, me: usize, src: usize) {
        self.summary_word(me, src / 64)
            .fetch_or(1u64 << (src % 64), Ordering::Relaxed);
    }

    #[inline]
    fn wants_wake_fenced(&self, dst: usize) -> bool {
        let b = self.rank(dst);
        // SYNC: AcqRel swap; pairs with the swap in `arm` (only one sender wins the 1).
        b.armed.load(Ordering::Relaxed) != 0 && b.armed.swap(0, Ordering::AcqRel) == 1
    }
}

/// What the receiver of a request to send ([`crate::Kind::Rts`]) tells its sender, through the
/// grant queue of the ring the request came by (the way back from consumer to producer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Grant {
    /// A receive matched the request: stream the message as [`crate::Kind::Stream`] records
    /// tagged `gid`.
    Clear { token: u32, gid: u32 },
    /// The receiver copied the message out of the sender's memory (single copy): the sender's
    /// buffer is free.
    Done { token: u32 },
    /// The receiver is copying the message out of the sender's memory and has opened copy
    /// `epoch` in the ring's copy slot (`crate::coop`): the sender may claim chunks of it and
    /// write them into the receiver's buffer. Done follows.
    Help { token: u32, epoch: u32 },
}

/// The code of [`Grant::Done`]; grant ids are below [`HELP_BASE`], Help codes from it.
const GRANT_DONE: u32 = u32::MAX;
/// Code of [`Grant::Help`] of epoch 0 (epochs start at 1).
const HELP_BASE: u32 = 1 << 31;

impl Grant {
    /// Largest grant id.
    pub const MAX_GID: u32 = HELP_BASE - 1;

    fn encode(self) -> u64 {
        let (token, code) = match self {
            Grant::Clear { token, gid } => (token, gid.min(Self::MAX_GID)),
            Grant::Done { token } => (token, GRANT_DONE),
            Grant::Help { token, epoch } => (token, HELP_BASE | epoch.min(GRANT_DONE - 1)),
        };
        token as u64 | (code as u64) << 32
    }

    fn decode(v: u64) -> Grant {
        let (token, code) = (v as u32, (v >> 32) as u32);
        match code {
            GRANT_DONE => Grant::Done { token },
            c if c >= HELP_BASE => Grant::Help {
                token,
                epoch: c - HELP_BASE,
            },
            gid => Grant::Clear { token, gid },
        }
    }
}

impl Segment {
    /// Rank `dst` answers a request to send that came through the ring from `src`. False when
    /// the queue is full ([`GRANTS`] answers the sender has not read): try again later.
    pub fn post_grant(&self, src: usize, dst: usize, g: Grant) -> bool {
        let c = self.ring_ctrl(src, dst);
        // Relaxed: only this consumer writes grant_head.
        let head = c.grant_head.load(Ordering::Relaxed);
        // SYNC: Acquire; pairs with the Release in take_grant: the sender has read the entry
        // this one overwrites.
        if head - c.grant_tail.load(Ordering::Acquire) >= GRANTS as u64 {
            return false;
        }
        c.grants[(head % GRANTS as u64) as usize].store(g.encode(), Ordering::Relaxed);
        // SYNC: Release; pairs with the Acquire in take_grant: publishes the entry.
        c.grant_head.store(head + 1, Ordering::Release);
        true
    }

    /// Rank `src` reads the next answer to its requests to send through the ring to `dst`.
    pub fn take_grant(&self, src: usize, dst: usize) -> Option<Grant> {
        let c = self.ring_ctrl(src, dst);
        // Relaxed: only this producer writes grant_tail.
        let tail = c.grant_tail.load(Ordering::Relaxed);
        // SYNC: Acquire; pairs with the Release in post_grant.
        if c.grant_head.load(Ordering::Acquire) == tail {
            return None;
        }
        let g = c.grants[(tail % GRANTS as u64) as usize].load(Ordering::Relaxed);
        // SYNC: Release; pairs with the Acquire in post_grant: the entry is read before the
        // consumer may overwrite it.
        c.grant_tail.store(tail + 1, Ordering::Release);
        Some(Grant::decode(g))
    }
}

/// How far a message has been written into its ring.
#[derive(Clone, Copy, Debug, Default)]
pub struct Cursor {
    /// Payload bytes written so far.
    pub off: usize,
    /// The first record (whole or first fragment) is in.
    pub started: bool,
}

/// What one call of [`Producer::push_message`] wrote, for the caller's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Pushed {
    /// The whole message is in the ring.
    pub done: bool,
    /// The message started in this call: as one whole record (`inline`) or a first fragment.
    pub started: bool,
    pub inline: bool,
    /// Fragment records written in this call.
    pub fragments: u32,
    /// Payload bytes written in this call.
    pub bytes: u64,
    /// The ring ran out of room before the message was all in.
    pub full: bool,
}

impl Pushed {
    /// Counts one fragment record, which took the message from `c` up to `end`.
    fn wrote(&mut self, c: &mut Cursor, end: usize) {
        self.started |= !c.started;
        self.fragments += 1;
        self.bytes += (end - c.off) as u64;
        c.started = true;
        c.off = end;
    }
}

impl Producer {
    /// Writes as much of the message (`tag`, `context`, `data`) as fits now, from `c` on: one
    /// whole record when it fits in one, else a first fragment, middle ones and a last one, each
    /// up to [`Producer::max_payload`]. Never waits; call again with the same cursor to go on.
    /// A message's records are consecutive in the ring, so no other message of this producer
    /// may start before this one is done. On every send: inlined into the caller.
    #[inline]
    pub fn push_message(&mut self, tag: u32, context: u32, data: &[u8], c: &mut Cursor) -> Pushed {
        let total = data.len();
        let max = self.max_payload();
        let mut out = Pushed::default();
        if !c.started && total <= max {
            let meta = Meta {
                kind: Kind::Whole,
                tag,
                context,
                total_len: total as u64,
            };
            if !self.try_push(meta, data) {
                out.full = true;
                return out;
            }
            *c = Cursor {
                off: total,
                started: true,
            };
            return Pushed {
                done: true,
                started: true,
                inline: true,
                bytes: total as u64,
                ..out
            };
        }
        while c.off < total || !c.started {
            let end = (c.off + max).min(total);
            let kind = if !c.started {
                Kind::First
            } else if end == total {
                Kind::Last
            } else {
                Kind::Middle
            };
            let meta = Meta {
                kind,
                tag,
                context,
                total_len: total as u64,
            };
            if !self.try_push(meta, &data[c.off..end]) {
                out.full = true;
                return out;
            }
            out.wrote(c, end);
        }
        out.done = true;
        out
    }

    /// Writes as much of a granted message as fits now, from `c` on, as [`Kind::Stream`]
    /// records tagged with the receiver's grant id `gid` (the receive that matched it knows the
    /// length). Never waits; call again with the same cursor to go on. Like a fragmented
    /// message, no other message that spans records may start before this one is done.
    pub fn push_stream(&mut self, gid: u32, context: u32, data: &[u8], c: &mut Cursor) -> Pushed {
        self.push_stream_with(gid, context, data.len(), c, |off, out| {
            out.copy_from_slice(&data[off..off + out.len()])
        })
    }

    /// Like [`Producer::push_stream`] for a message of `total` bytes that `fill(offset, piece)`
    /// writes straight into each record (a non-contiguous datatype packed into the ring, with
    /// no buffer of the whole message).
    pub fn push_stream_with(
        &mut self,
        gid: u32,
        context: u32,
        total: usize,
        c: &mut Cursor,
        mut fill: impl FnMut(usize, &mut [u8]),
    ) -> Pushed {
        let max = self.max_payload();
        let mut out = Pushed::default();
        while c.off < total {
            let end = (c.off + max).min(total);
            let meta = Meta {
                kind: Kind::Stream,
                tag: gid,
                context,
                total_len: total as u64,
            };
            let off = c.off;
            if !self.try_push_with(meta, end - off, |piece| fill(off, piece)) {
                out.full = true;
                return out;
            }
            out.wrote(c, end);
        }
        out.done = true;
        out
    }

    /// Writes a single-copy descriptor: the receiver will copy `len` bytes from address `addr`
    /// of this process, then say so in the record (see `Consumer::rndv_finish`). Returns the
    /// record's position for [`Producer::rndv_state`], or None if the ring has no room now. The
    /// sender must keep the bytes untouched until the state is no longer pending.
    pub fn push_rndv(&mut self, tag: u32, context: u32, addr: u64, len: u64) -> Option<u64> {
        // The descriptor: address, length, then the completion flag the receiver sets.
        let mut desc = [0u8; RNDV_DESC];
        desc[0..8].copy_from_slice(&addr.to_ne_bytes());
        desc[8..16].copy_from_slice(&len.to_ne_bytes());
        let meta = Meta {
            kind: Kind::Rndv,
            tag,
            context,
            total_len: len,
        };
        self.try_push_pos(meta, &desc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentParams;
    use std::sync::Arc;

    fn seg(nranks: usize) -> Arc<Segment> {
        let fd = volley_sys::memfd_create("volley-test").unwrap();
        Segment::create(fd, SegmentParams::new(nranks, 8192, 512, 7), "memfd").unwrap()
    }

    #[test]
    fn a_message_is_laid_over_records_and_resumes_where_the_ring_filled() {
        let s = seg(2);
        let (mut tx, mut rx) = (s.producer(0, 1), s.consumer(0, 1));
        let max = tx.max_payload();
        // One record when it fits.
        let mut c = Cursor::default();
        let p = tx.push_message(3, 4, &[7u8; 10], &mut c);
        assert!(p.done && p.started && p.inline && p.fragments == 0 && p.bytes == 10);
        let r = rx.peek().unwrap().unwrap();
        assert_eq!((r.kind, r.tag, r.context, r.len), (Kind::Whole, 3, 4, 10));
        let h = rx.take(&r);
        rx.release(h);
        // Larger than the ring: first, middle, last, across calls as the receiver drains.
        let data: Vec<u8> = (0..20_000).map(|i| i as u8).collect();
        let mut c = Cursor::default();
        let mut got = Vec::new();
        let mut kinds = Vec::new();
        loop {
            let p = tx.push_message(3, 4, &data, &mut c);
            while let Some(r) = rx.peek().unwrap() {
                let h = rx.take(&r);
                got.extend_from_slice(rx.payload(&h));
                kinds.push(r.kind);
                assert_eq!(r.total_len, data.len() as u64);
                rx.release(h);
            }
            if p.done {
                break;
            }
            assert!(p.full, "an unfinished push says the ring was full");
        }
        assert_eq!(got, data);
        assert_eq!(kinds[0], Kind::First);
        assert_eq!(*kinds.last().unwrap(), Kind::Last);
        assert!(kinds[1..kinds.len() - 1].iter().all(|k| *k == Kind::Middle));
        assert_eq!(kinds.len(), data.len().div_ceil(max));
    }

    #[test]
    fn a_single_copy_descriptor_carries_address_and_length() {
        let s = seg(2);
        let (mut tx, mut rx) = (s.producer(0, 1), s.consumer(0, 1));
        let pos = tx.push_rndv(5, 6, 0xdead_beef, 12345).unwrap();
        let r = rx.peek().unwrap().unwrap();
        assert_eq!((r.kind, r.pos, r.total_len), (Kind::Rndv, pos, 12345));
        let h = rx.take(&r);
        assert_eq!(rx.rndv_desc(&h).unwrap(), (0xdead_beef, 12345));
        assert_eq!(tx.rndv_state(pos), crate::RndvState::Pending);
        rx.rndv_finish(h, true);
        assert_eq!(tx.rndv_state(pos), crate::RndvState::Done);
    }

    #[test]
    fn a_request_to_send_is_granted_back_and_streamed() {
        let s = seg(2);
        let (mut tx, mut rx) = (s.producer(0, 1), s.consumer(0, 1));
        let rts = crate::Rts {
            addr: 0x1000,
            len: 20_000,
            token: 7,
            flags: crate::RTS_SINGLE_COPY,
        };
        assert!(tx.push_rts(3, 4, &rts));
        let r = rx.peek().unwrap().unwrap();
        assert_eq!(
            (r.kind, r.tag, r.context, r.total_len),
            (Kind::Rts, 3, 4, 20_000)
        );
        let h = rx.take(&r);
        assert_eq!(rx.rts(&h).unwrap(), rts);
        rx.release(h);
        // The way back: in order, until the queue is full; the sender's reads make room.
        assert_eq!(s.take_grant(0, 1), None);
        for i in 0..GRANTS as u32 {
            assert!(s.post_grant(
                0,
                1,
                Grant::Clear {
                    token: i,
                    gid: i + 100
                }
            ));
        }
        assert!(
            !s.post_grant(0, 1, Grant::Done { token: 99 }),
            "the queue is full"
        );
        assert_eq!(
            s.take_grant(0, 1),
            Some(Grant::Clear { token: 0, gid: 100 })
        );
        assert!(s.post_grant(0, 1, Grant::Done { token: 99 }));
        assert_eq!(
            s.take_grant(0, 1),
            Some(Grant::Clear { token: 1, gid: 101 })
        );
        let help = Grant::Help {
            token: 7,
            epoch: 0x7fff_fffe,
        };
        assert!(s.post_grant(0, 1, help));
        for i in 2..GRANTS as u32 {
            assert_eq!(
                s.take_grant(0, 1),
                Some(Grant::Clear {
                    token: i,
                    gid: i + 100
                })
            );
        }
        assert_eq!(s.take_grant(0, 1), Some(Grant::Done { token: 99 }));
        assert_eq!(s.take_grant(0, 1), Some(help));
        assert_eq!(s.take_grant(0, 1), None);
        assert_eq!(s.take_grant(1, 0), None, "each ring has its own queue");
        // The granted data, as stream records tagged with the grant id.
        let data: Vec<u8> = (0..20_000).map(|i| (i * 7) as u8).collect();
        let mut c = Cursor::default();
        let mut got = Vec::new();
        loop {
            let p = tx.push_stream(100, 4, &data, &mut c);
            while let Some(r) = rx.peek().unwrap() {
                assert_eq!((r.kind, r.tag, r.total_len), (Kind::Stream, 100, 20_000));
                let h = rx.take(&r);
                got.extend_from_slice(rx.payload(&h));
                rx.release(h);
            }
            if p.done {
                break;
            }
            assert!(p.full);
        }
        assert_eq!(got, data);
    }

    #[test]
    fn rank_states_counters_and_the_doorbell_handshake() {
        let s = seg(2);
        assert_eq!(s.rank_state(1), RankState::Alive);
        s.announce(1, 4242, true, 32 << 10);
        assert!(s.can_single_copy(1) && s.pid(1) == 4242);
        assert_eq!(s.single_copy_from(1), 32 << 10);
        let e = s.state_epoch();
        s.set_rank_state(1, RankState::Killed(9));
        assert!(s.state_epoch() > e, "a state change bumps the epoch");
        assert_eq!(s.rank_state(1), RankState::Killed(9));
        assert_eq!(s.published_counters(0, 3), None);
        s.finalize(0, &[1, 2, 3]);
        assert_eq!(s.rank_state(0), RankState::Finalized);
        assert_eq!(s.published_counters(0, 3), Some(vec![1, 2, 3]));
        // Nobody asleep: no wake-up. Armed: exactly one sender wins it.
        assert!(!s.wants_wake(1));
        s.arm(1);
        assert!(s.wants_wake(1));
        assert!(!s.wants_wake(1), "the flag is taken by the first sender");
        s.arm(1);
        s.disarm(1);
        assert!(!s.wants_wake(1));
    }

    #[test]
    fn senders_skip_the_fence_only_towards_heavy_arm_ranks_that_keep_their_summary() {
        let s = seg(3);
        for r in 0..3 {
            s.announce(r, 100 + r as u32, false, u64::MAX);
        }
        // Before: every rank may clear summary bits and arms with a fence.
        assert!((0..3).all(|r| s.needs_fence(r, false) && s.needs_fence(r, true)));
        if !s.use_heavy_arm(1, false) {
            // No membarrier here: nothing changes but the summary capability.
            assert!(s.needs_fence(1, false));
            return;
        }
        s.use_heavy_arm(2, true);
        // Rank 0 never said anything: always a fence towards it.
        assert!(s.needs_fence(0, false) && s.needs_fence(0, true));
        // Rank 1 arms heavily and never clears its summary: no fence at all.
        assert!(!s.needs_fence(1, false) && !s.needs_fence(1, true));
        // Rank 2 arms heavily but may clear summary bits: a fence before reading those.
        assert!(!s.needs_fence(2, false) && s.needs_fence(2, true));
        assert!(s.needs_fence_for(&[1, 0]) && !s.needs_fence_for(&[1, 2]));
        // The wake-up itself still takes the flag exactly once.
        s.arm(1);
        assert!(s.published(0, 1));
        assert!(!s.wants_wake(1));
    }
}
