//! A single-copy rendezvous copied by both sides at once.
//!
//! When a receiver copies a large message straight out of its sender's memory (single copy), the
//! sender is usually waiting for it (a blocking send, a wait on the request) with a core of its
//! own doing nothing. Two cores copying halves of a message move it faster than one: about twice
//! as fast on the development VM for 1-8 MiB, from the cache or from memory. So the receiver
//! opens the copy in the ring's copy slot (the last line of its control block): the destination
//! address, the length, which rendezvous it is, and a claim word. Both sides then claim chunks of
//! [`coop_chunk`] bytes from the claim word until none is left: the receiver reads its chunks
//! with process_vm_readv, the sender writes its chunks into the receiver's buffer with
//! process_vm_writev. Each finished chunk is counted; the receiver completes the receive (and
//! frees the sender's buffer) only once every claimed chunk is counted.
//!
//! Helping is never needed: a sender that is computing, or that never looks, leaves every chunk
//! to the receiver, which then copies alone as before. The claim word carries the copy's epoch,
//! so a sender that comes late (the receiver has finished, or opened the next copy) claims
//! nothing. The receiver rewrites the slot only after every chunk of the previous copy is
//! claimed and counted, so a claim that succeeds proves the fields it read belong to its epoch.

use crate::Segment;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Smallest chunk: a claim and a system call per chunk cost a few percent of its copy, and
/// the single-copy threshold is 32 KiB anyway (64 KiB in halves: 2.5 against 3.0 us alone
/// hot, 9.5 against 15.3 cold; MPI NetPIPE 75 against 46 Gbit/s).
const MIN_CHUNK: u64 = 32 << 10;

/// A copy is cut in two (fewer chunks for a small message, more for one over 8 MiB): on the
/// development VM two sides that each take one large piece copy faster than two that alternate
/// small ones (1 MiB ping-pong: 25 us in halves, 32 in quarters, 41 in 128 KiB chunks, 45
/// alone), and a sender that joins late leaves the receiver no worse off than copying alone.
const PARTS: u64 = 2;

/// Largest chunk: a message of many of them still balances between two sides of unequal speed.
const MAX_CHUNK: u64 = 4 << 20;

/// Messages longer than this are copied by both sides (at least two chunks).
pub const COOP_FROM: usize = MIN_CHUNK as usize;

/// Epochs run from 1 to this and wrap (a grant carries one in 31 bits).
const EPOCHS: u32 = 0x7fff_fffe;

/// Bytes per chunk of a copy of `len` bytes (both sides compute it alike).
pub fn coop_chunk(len: u64) -> u64 {
    len.div_ceil(PARTS)
        .next_multiple_of(4096)
        .clamp(MIN_CHUNK, MAX_CHUNK)
}

/// Chunks of a copy of `len` bytes.
pub fn coop_chunks(len: u64) -> u32 {
    len.div_ceil(coop_chunk(len)).min(u32::MAX as u64) as u32
}

/// The last 128 bytes of a ring's control block. Written by the consumer when it opens a copy;
/// `claim` and `finished` by both sides while it runs.
#[repr(C, align(128))]
pub(crate) struct CopySlot {
    /// Epoch (high half) and the next unclaimed chunk (low half).
    claim: AtomicU64,
    /// Chunks copied (or given up) by either side.
    finished: AtomicU32,
    /// Nonzero when a side could not copy a chunk it claimed.
    failed: AtomicU32,
    /// The receiver's buffer.
    dst: AtomicU64,
    len: AtomicU64,
    /// Which rendezvous (chosen by the layer above: the sender recognises its own).
    ident: AtomicU64,
    _pad: [u8; 88],
}

const _: () = assert!(std::mem::size_of::<CopySlot>() == 128);

/// A chunk claimed: `len` bytes at offset `off` of the message, which go to the receiver's
/// address `dst`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    pub chunk: u32,
    pub off: usize,
    pub len: usize,
    pub dst: u64,
}

impl Segment {
    fn copy_slot(&self, src: usize, dst: usize) -> &CopySlot {
        &self.ring_ctrl(src, dst).copy
    }

    /// Rank `dst` opens the copy of the rendezvous `ident` (`len` bytes, into its address `to`)
    /// that came through the ring from `src`, and returns its epoch. Only the ring's consumer
    /// calls it, and only after the previous copy is closed and finished.
    pub fn coop_open(&self, src: usize, dst: usize, ident: u64, to: u64, len: u64) -> u32 {
        let s = self.copy_slot(src, dst);
        // Relaxed: only this consumer writes the epoch.
        let prev = (s.claim.load(Ordering::Relaxed) >> 32) as u32;
        let epoch = prev % EPOCHS + 1;
        // Relaxed: published by the Release store of the claim word below.
        s.dst.store(to, Ordering::Relaxed);
        s.len.store(len, Ordering::Relaxed);
        s.ident.store(ident, Ordering::Relaxed);
        s.finished.store(0, Ordering::Relaxed);
        s.failed.store(0, Ordering::Relaxed);
        // SYNC: Release; pairs with the Acquire in coop_claim: the fields before the epoch.
        s.claim.store((epoch as u64) << 32, Ordering::Release);
        epoch
    }

    /// Claims the next chunk of copy `epoch` on the ring from `src` to `dst`, if that copy is of
    /// the rendezvous `ident` of `len` bytes and has a chunk left. Either side calls it.
    pub fn coop_claim(
        &self,
        src: usize,
        dst: usize,
        epoch: u32,
        ident: u64,
        len: u64,
    ) -> Option<Claim> {
        let s = self.copy_slot(src, dst);
        let n = coop_chunks(len);
        loop {
            // SYNC: Acquire; pairs with the Release in coop_open (the fields it wrote).
            let v = s.claim.load(Ordering::Acquire);
            if (v >> 32) as u32 != epoch || (v as u32) >= n {
                return None;
            }
            // Relaxed: if the exchange below succeeds, the copy was still `epoch` with chunks
            // left, and the consumer rewrites these only after such a copy is over.
            let to = s.dst.load(Ordering::Relaxed);
            if s.len.load(Ordering::Relaxed) != len || s.ident.load(Ordering::Relaxed) != ident {
                return None;
            }
            // SYNC: AcqRel; the claims of both sides are ordered on this word.
            if s.claim
                .compare_exchange_weak(v, v + 1, Ordering::AcqRel, Ordering::Relaxed)
                .is_ok()
            {
                let (chunk, size) = (v as u32, coop_chunk(len) as usize);
                let off = chunk as usize * size;
                return Some(Claim {
                    chunk,
                    off,
                    len: (len as usize - off).min(size),
                    dst: to + off as u64,
                });
            }
        }
    }

    /// The epoch and rendezvous of the copy open on the ring from `src` to `dst`, if it has
    /// chunks left to claim (for a sender that looks for a copy to help instead of being told).
    pub fn coop_current(&self, src: usize, dst: usize) -> Option<(u32, u64)> {
        let s = self.copy_slot(src, dst);
        // SYNC: Acquire; pairs with the Release in coop_open (the fields it wrote).
        let v = s.claim.load(Ordering::Acquire);
        let (epoch, next) = ((v >> 32) as u32, v as u32);
        // Relaxed: a claim rechecks both against the claim word.
        let len = s.len.load(Ordering::Relaxed);
        (epoch != 0 && next < coop_chunks(len)).then(|| (epoch, s.ident.load(Ordering::Relaxed)))
    }

    /// The side that claimed a chunk on the ring from `src` to `dst` has copied it (`ok`) or
    /// could not.
    pub fn coop_done(&self, src: usize, dst: usize, ok: bool) {
        let s = self.copy_slot(src, dst);
        if !ok {
            // Relaxed: published by the Release below.
            s.failed.store(1, Ordering::Relaxed);
        }
        // SYNC: Release; pairs with the Acquire in coop_finished: the chunk's bytes (and the
        // failure) before the count.
        s.finished.fetch_add(1, Ordering::Release);
    }

    /// The consumer closes copy `epoch` of `len` bytes on the ring from `src` to `dst`: nothing
    /// more can be claimed. Returns how many chunks were claimed.
    pub fn coop_close(&self, src: usize, dst: usize, epoch: u32, len: u64) -> u32 {
        let n = coop_chunks(len);
        // SYNC: AcqRel; ordered with the claims on this word.
        let v = self
            .copy_slot(src, dst)
            .claim
            .swap((epoch as u64) << 32 | n as u64, Ordering::AcqRel);
        (v as u32).min(n)
    }

    /// How many claimed chunks of the current copy on the ring from `src` to `dst` are done, and
    /// whether all of those were copied.
    pub fn coop_finished(&self, src: usize, dst: usize) -> (u32, bool) {
        let s = self.copy_slot(src, dst);
        // SYNC: Acquire; pairs with the Release in coop_done.
        let f = s.finished.load(Ordering::Acquire);
        (f, s.failed.load(Ordering::Relaxed) == 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentParams;
    use std::sync::atomic::AtomicBool;
    use std::sync::Arc;

    fn seg() -> Arc<Segment> {
        let fd = volley_sys::memfd_create("volley-coop-test").expect("memfd");
        Segment::create(fd, SegmentParams::new(2, 8192, 512, 7), "memfd").expect("segment")
    }

    #[test]
    fn chunks_cover_the_message_once_and_a_late_helper_claims_nothing() {
        let s = seg();
        assert_eq!(s.coop_current(0, 1), None, "never opened");
        let len = (13 << 20) + 17;
        let size = coop_chunk(len) as usize;
        assert_eq!(size, MAX_CHUNK as usize);
        assert_eq!(coop_chunks(len), 4);
        let e = s.coop_open(0, 1, 42, 0x1000, len);
        let a = s.coop_claim(0, 1, e, 42, len).expect("first chunk");
        assert_eq!((a.chunk, a.off, a.len, a.dst), (0, 0, size, 0x1000));
        // The wrong rendezvous or length claims nothing.
        assert_eq!(s.coop_claim(0, 1, e, 43, len), None);
        assert_eq!(s.coop_claim(0, 1, e, 42, len + 1), None);
        let mut offs = vec![a.off];
        while let Some(c) = s.coop_claim(0, 1, e, 42, len) {
            offs.push(c.off);
            assert_eq!(c.off, c.chunk as usize * size);
            assert_eq!(c.dst, 0x1000 + c.off as u64);
            if c.chunk == 3 {
                assert_eq!(c.len, len as usize - 3 * size);
            }
        }
        assert_eq!(offs.len(), 4);
        assert_eq!(s.coop_close(0, 1, e, len), 4);
        for _ in 0..3 {
            s.coop_done(0, 1, true);
        }
        assert_eq!(s.coop_finished(0, 1), (3, true));
        s.coop_done(0, 1, false);
        assert_eq!(s.coop_finished(0, 1), (4, false));
        // The next copy: a helper still holding the old epoch claims nothing from it.
        assert_eq!(s.coop_current(0, 1), None, "every chunk claimed");
        let e2 = s.coop_open(0, 1, 42, 0x2000, len);
        assert_ne!(e2, e);
        assert_eq!(s.coop_current(0, 1), Some((e2, 42)));
        assert_eq!(s.coop_claim(0, 1, e, 42, len), None);
        assert_eq!(s.coop_finished(0, 1), (0, true));
        // Closing early stops claims and says how many were taken.
        assert!(s.coop_claim(0, 1, e2, 42, len).is_some());
        assert_eq!(s.coop_close(0, 1, e2, len), 1);
        assert_eq!(s.coop_claim(0, 1, e2, 42, len), None);
        assert_eq!(s.coop_current(0, 1), None, "closed");
        // Other rings have slots of their own.
        assert_eq!(s.coop_claim(1, 0, e2, 42, len), None);
    }

    #[test]
    fn a_message_over_one_chunk_is_cut_into_a_few_chunks() {
        assert_eq!(coop_chunks(COOP_FROM as u64), 1);
        assert_eq!(coop_chunks(COOP_FROM as u64 + 1), 2);
        assert_eq!(coop_chunks(1 << 20), 2);
        assert_eq!(coop_chunk(1 << 20), 512 << 10);
        assert_eq!(coop_chunks(8 << 20), 2);
        assert_eq!(coop_chunks(64 << 20), 16);
        for len in [1u64, 4095, 65537, 300_001, 1 << 30] {
            let (size, n) = (coop_chunk(len), coop_chunks(len) as u64);
            assert!(size * n >= len && size * (n - 1) < len, "{len}");
        }
    }

    #[test]
    fn two_racing_claimers_take_every_chunk_exactly_once() {
        let s = seg();
        for round in 0..200u64 {
            let len = (round % 40 + 1) * (COOP_FROM as u64 / 3) + round * 4099;
            let n = coop_chunks(len) as usize;
            let e = s.coop_open(1, 0, round, 0, len);
            let go = Arc::new(AtomicBool::new(false));
            let helper = {
                let (s, go) = (s.clone(), go.clone());
                std::thread::spawn(move || {
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    let mut mine = Vec::new();
                    while let Some(c) = s.coop_claim(1, 0, e, round, len) {
                        mine.push(c.chunk);
                        s.coop_done(1, 0, true);
                    }
                    mine
                })
            };
            go.store(true, Ordering::Release);
            let mut all = Vec::new();
            while let Some(c) = s.coop_claim(1, 0, e, round, len) {
                all.push(c.chunk);
                s.coop_done(1, 0, true);
            }
            all.extend(helper.join().expect("helper"));
            all.sort_unstable();
            assert_eq!(all, (0..n as u32).collect::<Vec<_>>(), "round {round}");
            assert_eq!(s.coop_close(1, 0, e, len), n as u32);
            assert_eq!(s.coop_finished(1, 0), (n as u32, true));
        }
    }
}
