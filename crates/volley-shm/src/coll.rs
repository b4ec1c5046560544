//! Collective slots: where the ranks of a host meet for a short collective without a message.
//!
//! Every rank owns [`COLL_SLOTS`] slots in the segment. A communicator whose ranks all share this
//! segment claims one slot at each member (the `volley` crate chooses which and tells the
//! members); a member then publishes in its own slot and reads the others' slots. A slot is
//! [`COLL_DEPTH`] flag lines (each an `arrive` word and a 56-byte inline buffer, so that a short
//! contribution travels on the line its flag is on), a line with `done` and `gen`, and two data
//! buffers of [`COLL_DATA`] bytes. Operations on a slot are numbered from 1; operation `s` raises
//! flag `s % COLL_DEPTH` and writes its data inline there or in buffer `s & 1`.
//!
//! The protocol (each rank writes only its own slot):
//! - `arrive = s` (Release) on flag `s % COLL_DEPTH` after the rank wrote its data for operation
//!   `s` (or, in a barrier, reached it). Readers wait for it (Acquire) before they read the data.
//!   The word's top [`COLL_LEN_BITS`] bits carry the data's length (so that a reader whose own
//!   length differs, a count or type mismatch in the program, says so instead of reading bytes
//!   that were never written), the rest the operation's number.
//! - `done = s` (Release) once the rank has finished operation `s`, its reads of the other slots
//!   included. A writer overwrites the places of operation `s` only once every member has
//!   finished operation `s - coll_distance(len)` (`done` at least that, or an arrival at a later
//!   operation), so no reader of the operation that last used them is still at it. Short data
//!   may so run [`COLL_DEPTH`] - 1 operations ahead of its readers (a root broadcasting in a
//!   loop does not wait for each reader), data in the buffers one.
//! - `gen` counts the slot's claims; a claim zeroes `arrive` and `done` first. A member that finds
//!   another's `gen` changed knows that rank has left the communicator (it claims a slot again only
//!   after it freed the communicator, which is after its last operation on it).

use crate::Segment;
use std::sync::atomic::{fence, AtomicU64, Ordering};

/// Collective slots per rank.
pub const COLL_SLOTS: usize = 16;
/// Bytes of each of a slot's two data buffers: the largest contribution a slot carries.
pub const COLL_DATA: usize = 4096;
/// Contributions of at most this many bytes travel on the line of their flag.
pub const COLL_INLINE: usize = 56;
/// Flag lines per slot: how many operations with short data a writer may be ahead of a reader,
/// plus one.
pub const COLL_DEPTH: usize = 8;

/// Bits at the top of an `arrive` word that carry the length of the data published with it.
pub const COLL_LEN_BITS: u32 = 16;
/// The largest operation number a slot carries (its claim starts it again from 1): at ten
/// million operations a second, nine centuries.
pub const COLL_SEQ_MAX: u64 = (1 << (64 - COLL_LEN_BITS)) - 1;

const _: () = assert!(COLL_DATA < 1 << COLL_LEN_BITS);

/// How many operations apart two operations with `len` bytes of data are that write the same
/// place: a writer of operation `s` waits until every member has finished operation `s` minus
/// this.
#[inline]
pub const fn coll_distance(len: usize) -> u64 {
    if len <= COLL_INLINE {
        COLL_DEPTH as u64
    } else {
        2
    }
}

/// One cache line: the last operation published on this flag, and its short contribution.
#[repr(C, align(64))]
pub struct CollFlag {
    pub arrive: AtomicU64,
    inline: [u8; COLL_INLINE],
}

/// A slot's control block: [`COLL_DEPTH`] flag lines (so a reader that sees a flag has the short
/// data that came with it on the same line), then `done` and `gen` on their own line (padded so
/// that a slot is a whole number of pages in sixteen).
#[repr(C, align(128))]
pub struct CollCtrl {
    pub flags: [CollFlag; COLL_DEPTH],
    pub done: AtomicU64,
    pub gen: AtomicU64,
    _reserved: [u8; 496],
}

const _: () = assert!(std::mem::size_of::<CollFlag>() == 64);
const _: () = assert!(std::mem::size_of::<CollCtrl>() == 1024);
const _: () = assert!(std::mem::offset_of!(CollCtrl, done) == 64 * COLL_DEPTH);

/// Bytes of one slot: the control block and two data buffers.
pub const COLL_SLOT_BYTES: usize = std::mem::size_of::<CollCtrl>() + 2 * COLL_DATA;

impl Segment {
    #[inline]
    fn coll_base(&self, rank: usize, slot: usize) -> *mut u8 {
        assert!(rank < self.layout.nranks && slot < COLL_SLOTS);
        // SAFETY: the offset lies inside the mapping (Layout reserves nranks x COLL_SLOTS slots).
        unsafe { self.map.as_ptr().add(self.layout.coll_offset(rank, slot)) }
    }

    #[inline]
    fn coll_ctrl(&self, rank: usize, slot: usize) -> &CollCtrl {
        // SAFETY: inside the mapping, aligned to 128 (coll_offset is), lives as long as it.
        unsafe { &*(self.coll_base(rank, slot) as *const CollCtrl) }
    }

    /// The last operation on `s`'s flag that `rank` published in `slot` (0: none since its
    /// claim); `>= s` once it published `s`.
    #[inline]
    pub fn coll_arrived(&self, rank: usize, slot: usize, s: u64) -> u64 {
        // SYNC: Acquire; pairs with the Release in coll_arrive: the data written before is
        // visible.
        self.coll_ctrl(rank, slot).flags[s as usize % COLL_DEPTH]
            .arrive
            .load(Ordering::Acquire)
            & COLL_SEQ_MAX
    }

    /// The length of the data `rank` published with operation `s` in `slot`; for a caller that
    /// has seen it arrive (`coll_arrived` at least `s`) and not yet finished it.
    #[inline]
    pub fn coll_len(&self, rank: usize, slot: usize, s: u64) -> usize {
        // Relaxed: the same word the caller loaded with Acquire, unchanged until this rank
        // finishes operation `s`.
        (self.coll_ctrl(rank, slot).flags[s as usize % COLL_DEPTH]
            .arrive
            .load(Ordering::Relaxed)
            >> (64 - COLL_LEN_BITS)) as usize
    }

    /// The last operation `rank` finished in `slot`.
    #[inline]
    pub fn coll_done(&self, rank: usize, slot: usize) -> u64 {
        // SYNC: Acquire; pairs with the Release in coll_finish: the reads made before are over.
        self.coll_ctrl(rank, slot).done.load(Ordering::Acquire)
    }

    /// How many times `rank` claimed `slot`.
    #[inline]
    pub fn coll_gen(&self, rank: usize, slot: usize) -> u64 {
        // SYNC: Acquire; pairs with the Release in coll_claim.
        self.coll_ctrl(rank, slot).gen.load(Ordering::Acquire)
    }

    /// Claims `slot` of rank `me` for a new communicator: zeroes its counters and returns its new
    /// generation. Only rank `me` may call it, and only for a slot no reader still uses.
    pub fn coll_claim(&self, me: usize, slot: usize) -> u64 {
        let c = self.coll_ctrl(me, slot);
        for f in &c.flags {
            f.arrive.store(0, Ordering::Relaxed);
        }
        c.done.store(0, Ordering::Relaxed);
        // SYNC: Release; the zeroed counters are visible to whoever sees the generation (the
        // members learn it by a message, which orders it anyway).
        c.gen.fetch_add(1, Ordering::Release) + 1
    }

    /// Says rank `me` has published operation `s` in `slot`, with `len` bytes of data (written
    /// before; 0 for none, at most [`COLL_DATA`] for one member's, or the sum a root's scatter
    /// writes, below 64 KiB).
    #[inline]
    pub fn coll_arrive(&self, me: usize, slot: usize, s: u64, len: usize) {
        assert!(
            s <= COLL_SEQ_MAX && len < 1 << COLL_LEN_BITS,
            "operation {s} or length {len} out of a collective slot's range"
        );
        // SYNC: Release; pairs with the Acquire in coll_arrived.
        self.coll_ctrl(me, slot).flags[s as usize % COLL_DEPTH]
            .arrive
            .store(s | (len as u64) << (64 - COLL_LEN_BITS), Ordering::Release);
    }

    /// Says rank `me` has finished operation `s` in `slot`, reads included.
    #[inline]
    pub fn coll_finish(&self, me: usize, slot: usize, s: u64) {
        // SYNC: Release; pairs with the Acquire in coll_done.
        self.coll_ctrl(me, slot).done.store(s, Ordering::Release);
    }

    /// Where operation `s` keeps `len` bytes in a slot: inline on its flag line, or in data
    /// buffer `s & 1`.
    #[inline]
    fn coll_data(&self, rank: usize, slot: usize, s: u64, len: usize) -> *mut u8 {
        assert!(
            len <= COLL_DATA,
            "{len} bytes is more than a collective slot holds"
        );
        let base = self.coll_base(rank, slot);
        // SAFETY: both offsets lie inside the slot: the inline buffer in a flag line of the
        // control block, the data buffers after it, COLL_DATA bytes each.
        unsafe {
            if len <= COLL_INLINE {
                base.add(
                    (s as usize % COLL_DEPTH) * std::mem::size_of::<CollFlag>()
                        + std::mem::offset_of!(CollFlag, inline),
                )
            } else {
                base.add(std::mem::size_of::<CollCtrl>() + (s & 1) as usize * COLL_DATA)
            }
        }
    }

    /// Writes rank `me`'s contribution to operation `s` into its slot (before `coll_arrive`).
    /// The caller has seen every reader finish operation `s - coll_distance(data.len())`.
    #[inline]
    pub fn coll_write(&self, me: usize, slot: usize, s: u64, data: &[u8]) {
        let dst = self.coll_data(me, slot, s, data.len());
        // SAFETY: dst holds data.len() bytes (coll_data checked); only rank `me` writes its
        // slot, and no reader reads this buffer now (the done check above).
        unsafe { copy(data.as_ptr(), dst, data.len()) };
    }

    /// Reads `rank`'s contribution to operation `s` (after seeing its `arrive >= s`).
    #[inline]
    pub fn coll_read(&self, rank: usize, slot: usize, s: u64, out: &mut [u8]) {
        let src = self.coll_data(rank, slot, s, out.len());
        // SAFETY: src holds out.len() bytes; its writer finished writing them before its
        // arrive (Release, seen with Acquire) and will not write them again before our done.
        unsafe { copy(src, out.as_mut_ptr(), out.len()) };
    }

    /// Reads `out.len()` bytes at offset `off` of `rank`'s contribution of `len` bytes to
    /// operation `s` (a part of it: one block of a scatter or an alltoall).
    #[inline]
    pub fn coll_read_at(
        &self,
        rank: usize,
        slot: usize,
        s: u64,
        len: usize,
        off: usize,
        out: &mut [u8],
    ) {
        assert!(off + out.len() <= len, "a part beyond the contribution");
        let src = self.coll_data(rank, slot, s, len);
        // SAFETY: src holds len bytes (coll_data checked) and the part lies inside them; as in
        // coll_read, written before the arrive we saw and not rewritten before our done.
        unsafe { copy(src.add(off), out.as_mut_ptr(), out.len()) };
    }

    /// After publishing a flag others may sleep on: calls `wake` for each of `ranks` that asked
    /// to be woken (clearing its request, as [`Segment::wants_wake`] does), with one fence for
    /// all.
    #[inline]
    pub fn wake_sleepers(&self, ranks: &[usize], mut wake: impl FnMut(usize)) {
        // SYNC: SeqCst fence; pairs with the SeqCst fence in `arm`: the flag's store is ordered
        // before the reads of the doorbell requests (between heavy-arm ranks, the membarrier
        // in `arm` is that barrier: see `Segment::use_heavy_arm`).
        if self.needs_fence_for(ranks) {
            fence(Ordering::SeqCst);
        } else {
            std::sync::atomic::compiler_fence(Ordering::SeqCst);
        }
        for &r in ranks {
            let b = self.rank(r);
            // SYNC: AcqRel swap; pairs with the swap in `arm` (one waker wins the 1).
            if b.armed.load(Ordering::Relaxed) != 0 && b.armed.swap(0, Ordering::AcqRel) == 1 {
                wake(r);
            }
        }
    }
}

/// Copies `len` bytes; a short contribution (one line) word by word, without a call.
///
/// # Safety
/// As `ptr::copy_nonoverlapping`.
#[inline(always)]
unsafe fn copy(src: *const u8, dst: *mut u8, len: usize) {
    if len > COLL_INLINE {
        // SAFETY: per the contract.
        unsafe { std::ptr::copy_nonoverlapping(src, dst, len) };
        return;
    }
    let mut i = 0;
    while i + 8 <= len {
        // SAFETY: per the contract, i + 8 <= len bytes are valid at both.
        unsafe {
            let w = std::ptr::read_unaligned(src.add(i) as *const u64);
            std::ptr::write_unaligned(dst.add(i) as *mut u64, w);
        }
        i += 8;
    }
    while i < len {
        // SAFETY: i < len.
        unsafe { *dst.add(i) = *src.add(i) };
        i += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentParams;

    fn segment(n: usize) -> std::sync::Arc<Segment> {
        let fd = volley_sys::memfd_create("volley-coll-test").expect("memfd");
        Segment::create(fd, SegmentParams::new(n, 4096, 1024, 7), "memfd").expect("segment")
    }

    #[test]
    fn slots_of_every_rank_are_apart_and_keep_what_was_written() {
        let seg = segment(3);
        for r in 0..3 {
            for s in 0..COLL_SLOTS {
                assert_eq!(seg.coll_claim(r, s), 1);
            }
        }
        for r in 0..3 {
            for s in 0..COLL_SLOTS {
                for (op, len) in [
                    (1u64, 8usize),
                    (2, COLL_INLINE),
                    (3, COLL_INLINE + 1),
                    (4, COLL_DATA),
                ] {
                    let v: Vec<u8> = (0..len)
                        .map(|i| (i + r * 31 + s * 7 + op as usize) as u8)
                        .collect();
                    seg.coll_write(r, s, op, &v);
                    seg.coll_arrive(r, s, op, len);
                }
            }
        }
        // Each rank's slot kept its last two operations, undisturbed by the others' writes.
        for r in 0..3 {
            for s in 0..COLL_SLOTS {
                assert_eq!(seg.coll_arrived(r, s, 4), 4);
                assert_eq!(seg.coll_arrived(r, s, 3), 3);
                // The lengths came with the arrivals, apart from the numbers.
                assert_eq!(seg.coll_len(r, s, 4), COLL_DATA);
                assert_eq!(seg.coll_len(r, s, 3), COLL_INLINE + 1);
                for (op, len) in [(3u64, COLL_INLINE + 1), (4, COLL_DATA)] {
                    let mut out = vec![0u8; len];
                    seg.coll_read(r, s, op, &mut out);
                    let want: Vec<u8> = (0..len)
                        .map(|i| (i + r * 31 + s * 7 + op as usize) as u8)
                        .collect();
                    assert_eq!(out, want, "rank {r} slot {s} op {op}");
                }
            }
        }
        // A claim zeroes the counters and moves the generation on.
        seg.coll_finish(1, 2, 4);
        assert_eq!(seg.coll_claim(1, 2), 2);
        assert_eq!(
            (
                seg.coll_arrived(1, 2, 3),
                seg.coll_arrived(1, 2, 4),
                seg.coll_done(1, 2)
            ),
            (0, 0, 0)
        );
        assert_eq!(seg.coll_gen(1, 2), 2);
    }

    #[test]
    fn short_data_of_the_last_depth_operations_stays_readable() {
        let seg = segment(2);
        seg.coll_claim(1, 3);
        let val = |op: u64| -> Vec<u8> {
            (0..COLL_INLINE)
                .map(|i| (op as usize * 7 + i) as u8)
                .collect()
        };
        for op in 1..=COLL_DEPTH as u64 {
            seg.coll_write(1, 3, op, &val(op));
            seg.coll_arrive(1, 3, op, COLL_INLINE);
        }
        for op in 1..=COLL_DEPTH as u64 {
            assert_eq!(seg.coll_arrived(1, 3, op), op);
            let mut out = vec![0u8; COLL_INLINE];
            seg.coll_read(1, 3, op, &mut out);
            assert_eq!(out, val(op), "op {op}");
        }
        // The next one takes the first one's line, and only that.
        let next = COLL_DEPTH as u64 + 1;
        seg.coll_write(1, 3, next, &val(next));
        seg.coll_arrive(1, 3, next, COLL_INLINE);
        assert_eq!(seg.coll_arrived(1, 3, 1), next);
        assert_eq!(seg.coll_arrived(1, 3, 2), 2);
        let mut out = vec![0u8; COLL_INLINE];
        seg.coll_read(1, 3, 2, &mut out);
        assert_eq!(out, val(2));
        assert_eq!(
            (coll_distance(COLL_INLINE), coll_distance(COLL_INLINE + 1)),
            (COLL_DEPTH as u64, 2)
        );
    }

    #[test]
    fn a_sleeper_is_woken_once() {
        let seg = segment(3);
        seg.arm(2);
        let mut woken = Vec::new();
        seg.wake_sleepers(&[0, 1, 2], |r| woken.push(r));
        seg.wake_sleepers(&[0, 1, 2], |r| woken.push(r));
        assert_eq!(woken, [2]);
    }
}
