//! The segment's fixed layout. See docs/shm-layout.md for the drawing.

use crate::coll::{COLL_SLOTS, COLL_SLOT_BYTES};
use crate::ring::{RingCtrl, RECORD_HEADER, SLOT};
use crate::SegmentError;
use std::mem::{offset_of, size_of};
use std::sync::atomic::{AtomicI32, AtomicU32, AtomicU64};

/// "VOLLEYJB" in little-endian byte order.
pub const MAGIC: u64 = u64::from_le_bytes(*b"VOLLEYJB");
/// Layout version; bump on any change to the structures in this file or in ring.rs.
/// 2: RankBlock::caps and rendezvous records (single copy).
/// 3: RankBlock::counters, published by each rank when it closes its world.
/// 4: the record header carries an envelope (context, tag) instead of (source port, destination
///    port); the ring's position word is called the stamp.
/// 5: 95 published counters.
/// 6: a grant queue in each ring's control block (1024 bytes), request-to-send and stream
///    records (the rendezvous of large matched messages).
/// 7: RANK_VANISHED (a rank whose process ended unseen by any volley launcher).
/// 8: parked records.
/// 9: collective slots (`coll`) between the rank blocks and the rings.
/// 10: a ready summary per rank (`summary_offset`): a bit per source rank, set by a sender after
///     it publishes into the ring from that source, so that a receiver with many local peers
///     looks only at rings that may hold something.
/// 11: the grant queue has 48 entries and the ring's control block ends with a copy slot (a
///     rendezvous copied by both sides, `coop`); grants may say Help.
/// 12: each collective slot has 8 flag lines instead of 2.
/// 13: the ring's control block carries `descriptors` beside `parked`: the consumer asks for
///     requests to send instead of eager data while its budget for unreceived messages is spent.
pub const VERSION: u32 = 13;

/// Counters a rank can publish in its block.
pub const RANK_COUNTERS: usize = 95;

/// Bit of [`RankBlock::caps`]: the rank can read its peers' memory with process_vm_readv, so
/// senders may hand it large messages by address (single copy) instead of through the ring.
pub const CAP_SINGLE_COPY: u32 = 1;
/// Bit of [`RankBlock::caps`]: the rank arms its doorbell with a process-wide barrier
/// (membarrier), so a sender that is registered too needs no fence of its own between publishing
/// a record and reading the rank's `armed` flag (see `Segment::arm`).
pub const CAP_HEAVY_ARM: u32 = 2;
/// Bit of [`RankBlock::caps`]: the rank may clear bits of its ready summary, so its senders
/// fence before they read theirs (see `Segment::published`). Set from the start; cleared once
/// the rank knows it never will.
pub const CAP_SUMMARY: u32 = 4;

/// Rank lifecycle values of [`RankBlock::state`].
pub const RANK_UNBORN: u32 = 0;
pub const RANK_RUNNING: u32 = 1;
/// The rank closed its world normally; it will send nothing more.
pub const RANK_FINALIZED: u32 = 2;
/// The launcher reaped the rank; `detail` holds its exit code.
pub const RANK_EXITED: u32 = 3;
/// The launcher reaped the rank; `detail` holds the signal that killed it.
pub const RANK_KILLED: u32 = 4;
/// The rank's process ended without closing its world, noticed by a peer on its host (a job a
/// foreign launcher started: no volley process reaped it, so no exit status is known).
pub const RANK_VANISHED: u32 = 5;

/// Offset 0 of the segment. Written once by the creator before any rank starts; read-only
/// afterwards except `state_epoch`.
#[repr(C, align(128))]
pub struct JobHeader {
    pub magic: u64,
    pub version: u32,
    /// size_of::<JobHeader>() as the creator saw it.
    pub header_bytes: u32,
    pub nranks: u32,
    /// Slots (of SLOT bytes) per ring; a power of two.
    pub ring_slots: u32,
    pub token: u64,
    pub total_bytes: u64,
    /// Largest record, in slots, that a producer may write (header included).
    pub max_record_slots: u32,
    pub _reserved: u32,
    /// Incremented whenever a rank's state changes (see Segment::bump_epoch).
    pub state_epoch: AtomicU64,
}

const _: () = assert!(size_of::<JobHeader>() == 128);
const _: () = assert!(offset_of!(JobHeader, token) == 24);
const _: () = assert!(offset_of!(JobHeader, state_epoch) == 48);

/// One per rank, 1024 bytes: the lifecycle line, then the doorbell line, so that senders reading
/// the doorbell never share a cache line with state updates.
#[repr(C, align(128))]
pub struct RankBlock {
    /// RANK_* value. Written by the rank itself (RUNNING, FINALIZED) and by the launcher
    /// (EXITED, KILLED), always followed by Segment::bump_epoch.
    pub state: AtomicU32,
    /// Exit code or signal number, meaningful for EXITED and KILLED.
    pub detail: AtomicI32,
    pub pid: AtomicU32,
    /// CAP_* bits, written by the rank before it says RUNNING.
    pub caps: AtomicU32,
    /// The size from which the rank's point-to-point sends go by single copy (its configured
    /// window's start; u64::MAX: never), written with `caps`. The collectives that read the
    /// other ranks' buffers (`volley::collectives`, `Algo::Direct`) choose by the members'
    /// largest.
    pub copy_from: AtomicU64,
    _pad0: [u8; 104],
    /// 1 while the rank is (about to be) asleep on its eventfd and wants a wake-up; 0 while it
    /// is running or spinning. Senders swap it to 0 and ring the eventfd if it was 1.
    pub armed: AtomicU32,
    _pad1: [u8; 124],
    /// 1 once `counters` hold the rank's final counts (written when it closes its world, never
    /// per message).
    pub counters_valid: AtomicU64,
    /// The rank's counters, in the order of volley's counter table.
    pub counters: [AtomicU64; RANK_COUNTERS],
}

const _: () = assert!(size_of::<RankBlock>() == 1024);
const _: () = assert!(offset_of!(RankBlock, counters_valid) == 256);
const _: () = assert!(offset_of!(RankBlock, armed) == 128);
const _: () = assert!(offset_of!(RankBlock, caps) == 12);
const _: () = assert!(offset_of!(RankBlock, copy_from) == 16);

/// What a creator chooses; everything else follows.
#[derive(Clone, Copy, Debug)]
pub struct SegmentParams {
    pub nranks: usize,
    pub ring_slots: usize,
    pub max_record_slots: usize,
    pub token: u64,
}

impl SegmentParams {
    /// Ring of `ring_bytes` (rounded up to a power of two slots) and records of at most
    /// `record_bytes` (header included), clamped so that at least four records fit a ring.
    pub fn new(nranks: usize, ring_bytes: usize, record_bytes: usize, token: u64) -> SegmentParams {
        let ring_slots = ring_bytes.div_ceil(SLOT).next_power_of_two().max(64);
        let max_record_slots = record_bytes.div_ceil(SLOT).clamp(1, ring_slots / 4);
        SegmentParams {
            nranks,
            ring_slots,
            max_record_slots,
            token,
        }
    }
}

/// Offsets of everything in a segment, derived from the header.
#[derive(Clone, Copy, Debug)]
pub struct Layout {
    pub nranks: usize,
    pub ring_slots: usize,
    pub max_record_slots: usize,
    pub ranks_offset: usize,
    /// Ready summaries: per rank, `summary_stride` bytes holding ceil(nranks / 64) words.
    pub summary_offset: usize,
    pub summary_stride: usize,
    /// Collective slots: COLL_SLOTS per rank, COLL_SLOT_BYTES each.
    pub coll_offset: usize,
    pub rings_offset: usize,
    pub ring_stride: usize,
    pub total_bytes: usize,
}

impl Layout {
    pub fn new(p: &SegmentParams) -> Layout {
        let ranks_offset = size_of::<JobHeader>();
        let summary_offset = ranks_offset + p.nranks * size_of::<RankBlock>();
        // Each receiver's words on lines of their own: senders to one rank never write the line
        // another rank polls.
        let summary_stride = (p.nranks.div_ceil(64) * 8).next_multiple_of(128);
        let coll_offset = (summary_offset + p.nranks * summary_stride).next_multiple_of(4096);
        let rings_offset =
            (coll_offset + p.nranks * COLL_SLOTS * COLL_SLOT_BYTES).next_multiple_of(4096);
        let ring_stride = (size_of::<RingCtrl>() + p.ring_slots * SLOT).next_multiple_of(4096);
        let total_bytes = rings_offset + p.nranks * p.nranks * ring_stride;
        Layout {
            nranks: p.nranks,
            ring_slots: p.ring_slots,
            max_record_slots: p.max_record_slots,
            ranks_offset,
            summary_offset,
            summary_stride,
            coll_offset,
            rings_offset,
            ring_stride,
            total_bytes,
        }
    }

    /// A layout that only describes one ring of `ring_slots` slots (for code that has a ring's
    /// base address and needs its geometry).
    pub(crate) fn ring_only(ring_slots: usize) -> Layout {
        Layout {
            nranks: 1,
            ring_slots,
            max_record_slots: 1,
            ranks_offset: 0,
            summary_offset: 0,
            summary_stride: 0,
            coll_offset: 0,
            rings_offset: 0,
            ring_stride: 0,
            total_bytes: 0,
        }
    }

    #[inline]
    pub fn rank_offset(&self, rank: usize) -> usize {
        self.ranks_offset + rank * size_of::<RankBlock>()
    }

    /// Word `k` of the ready summary of receiver `rank` (bit `s % 64` of word `s / 64` stands
    /// for the ring from source `s`).
    #[inline]
    pub fn summary_word_offset(&self, rank: usize, k: usize) -> usize {
        assert!(rank < self.nranks && k < self.nranks.div_ceil(64));
        self.summary_offset + rank * self.summary_stride + k * 8
    }

    /// Collective slot `slot` of `rank`.
    /// Inlined: every flag a collective reads or writes is found through it.
    #[inline]
    pub fn coll_offset(&self, rank: usize, slot: usize) -> usize {
        assert!(rank < self.nranks && slot < COLL_SLOTS);
        self.coll_offset + (rank * COLL_SLOTS + slot) * COLL_SLOT_BYTES
    }

    pub fn ring_offset(&self, src: usize, dst: usize) -> usize {
        assert!(src < self.nranks && dst < self.nranks);
        self.rings_offset + (src * self.nranks + dst) * self.ring_stride
    }

    /// Largest payload one record carries.
    pub fn max_record_payload(&self) -> usize {
        self.max_record_slots * SLOT - RECORD_HEADER
    }
}

/// # Safety
/// `base` must point to a zero-filled, writable mapping of at least `layout.total_bytes` bytes
/// that no other thread or process accesses yet.
pub(crate) unsafe fn init_header(base: *mut u8, p: &SegmentParams, layout: &Layout) {
    let h = base as *mut JobHeader;
    // SAFETY: per the contract, h is valid for writes and unshared.
    unsafe {
        (*h).version = VERSION;
        (*h).header_bytes = size_of::<JobHeader>() as u32;
        (*h).nranks = p.nranks as u32;
        (*h).ring_slots = p.ring_slots as u32;
        (*h).token = p.token;
        (*h).total_bytes = layout.total_bytes as u64;
        (*h).max_record_slots = p.max_record_slots as u32;
        // Magic last: a reader that sees it sees a complete header (the segment is handed to
        // other processes only after this returns, through fork/exec, which orders it anyway).
        (*h).magic = MAGIC;
    }
}

pub(crate) fn validate(h: &JobHeader, file_size: u64, fd: i32) -> Result<Layout, SegmentError> {
    if h.magic != MAGIC {
        return Err(SegmentError::Foreign {
            fd,
            why: format!("magic {:016x}, expected {:016x}", h.magic, MAGIC),
        });
    }
    if h.version != VERSION {
        return Err(SegmentError::Version {
            found: h.version,
            expected: VERSION,
        });
    }
    let corrupt = |why: String| SegmentError::Corrupt { fd, why };
    if h.header_bytes as usize != size_of::<JobHeader>() {
        return Err(corrupt(format!("header size {}", h.header_bytes)));
    }
    let slots = h.ring_slots as usize;
    if h.nranks == 0 || h.nranks > 65536 {
        return Err(corrupt(format!("{} ranks", h.nranks)));
    }
    if !slots.is_power_of_two() || !(64..=(1 << 26)).contains(&slots) {
        return Err(corrupt(format!("{slots} slots per ring")));
    }
    let mrs = h.max_record_slots as usize;
    if mrs == 0 || mrs > slots / 4 {
        return Err(corrupt(format!(
            "records of {mrs} slots in rings of {slots}"
        )));
    }
    let layout = Layout::new(&SegmentParams {
        nranks: h.nranks as usize,
        ring_slots: slots,
        max_record_slots: mrs,
        token: h.token,
    });
    if h.total_bytes != layout.total_bytes as u64 || file_size < layout.total_bytes as u64 {
        return Err(corrupt(format!(
            "header says {} bytes, layout needs {}, file has {}",
            h.total_bytes, layout.total_bytes, file_size
        )));
    }
    Ok(layout)
}
