//! A single-producer single-consumer ring of cache-line slots in shared memory.
//!
//! A *record* is a 32-byte header followed by its payload, laid over one or more consecutive
//! 64-byte slots; a record never wraps (the producer pads to the end of the ring instead, as Aeron
//! does), so its payload is contiguous and can be lent to the application in place.
//!
//! Synchronisation (docs/shm-layout.md, "Ring protocol"):
//! - The first word of a record's header is its *stamp*: the record's absolute position plus one.
//!   The producer writes payload and header fields, then stores the stamp with Release. The consumer
//!   polls the stamp of the slot at its read position with Acquire; the record is there when the stamp
//!   equals that position plus one. A waiting consumer therefore watches the very cache line the
//!   data arrives in: one line transfer per small message, no separate head index to read.
//! - A stale stamp can never match: a header left from an earlier lap carries an older position,
//!   and when the consumer frees a record it zeroes the first word of every slot the record covered
//!   beyond the first, so payload bytes cannot later be mistaken for a stamp.
//! - The consumer publishes its tail (everything before it is free) with Release; the producer
//!   re-reads it, with Acquire, only when its cached copy says the ring is full.
//!
//! No lock, no allocation and no system call on either side.

use crate::layout::Layout;
use crate::Segment;
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

/// Bytes per slot: one cache line.
pub const SLOT: usize = 64;
/// Bytes of a record header; a record's payload starts this far into its first slot.
pub const RECORD_HEADER: usize = 32;

/// Entries of a ring's grant queue (see [`RingCtrl`]).
pub const GRANTS: usize = 48;

/// Head and tail on separate 128-byte lines (two lines: the adjacent-line prefetcher pairs them),
/// then the ring's grant queue: the way back from the ring's consumer to its producer, for the
/// rendezvous of large matched messages (`control::Grant`). The consumer writes entries and
/// `grant_head`, the producer reads them and writes `grant_tail`: a second single-producer
/// single-consumer queue, in the other direction, of fixed 8-byte entries.
#[repr(C, align(128))]
pub(crate) struct RingCtrl {
    /// Producer's position (slots written). Informational for tools; the consumer polls stamps.
    head: AtomicU64,
    _pad0: [u8; 120],
    /// Consumer's position: every slot before it may be overwritten, except a parked record.
    tail: AtomicU64,
    /// The record the application still holds that the consumer moved `tail` past (a *parked*
    /// record, see [`Consumer::release`]): 0 for none, else `(slot offset + 1) << 32 | slots`.
    /// Set (Relaxed) before the tail store that passes the record, which publishes it; cleared
    /// (Release) once the application has given the record back. The producer reads it with
    /// `tail` (same line) and writes padding over the record until it is cleared.
    parked: AtomicU64,
    /// Nonzero while the consumer asks for requests to send instead of eager data (its budget
    /// for unreceived messages is spent: `Consumer::ask_descriptors`). A hint, read by the
    /// producer with `tail` (same line) when it looks for room, and on every send while set.
    descriptors: AtomicU64,
    _pad1: [u8; 104],
    /// Grants written by the consumer.
    pub(crate) grant_head: AtomicU64,
    _pad2: [u8; 120],
    /// Grants read by the producer.
    pub(crate) grant_tail: AtomicU64,
    _pad3: [u8; 120],
    pub(crate) grants: [AtomicU64; GRANTS],
    /// The shared copy of the single-copy rendezvous this ring's consumer is copying now
    /// (`crate::coop`): the producer may help.
    pub(crate) copy: crate::coop::CopySlot,
}

const _: () = assert!(std::mem::size_of::<RingCtrl>() == 1024);
const _: () = assert!(std::mem::offset_of!(RingCtrl, tail) == 128);
const _: () = assert!(std::mem::offset_of!(RingCtrl, parked) == 136);
const _: () = assert!(std::mem::offset_of!(RingCtrl, descriptors) == 144);
const _: () = assert!(std::mem::offset_of!(RingCtrl, grant_head) == 256);
const _: () = assert!(std::mem::offset_of!(RingCtrl, grant_tail) == 384);
const _: () = assert!(std::mem::offset_of!(RingCtrl, grants) == 512);
const _: () = assert!(std::mem::offset_of!(RingCtrl, copy) == 896);

#[repr(C)]
struct RecordHeader {
    stamp: AtomicU64,
    len: u32,
    kind: u16,
    _flags: u16,
    /// The envelope (see [`Meta`]); the source is the ring's producer.
    context: u32,
    tag: u32,
    total_len: u64,
}

const _: () = assert!(std::mem::size_of::<RecordHeader>() == RECORD_HEADER);

/// What a record carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u16)]
pub enum Kind {
    /// A whole message in one record.
    Whole = 1,
    /// First fragment of a message larger than one record; `total_len` is the message length.
    First = 2,
    /// A middle fragment.
    Middle = 3,
    /// The last fragment.
    Last = 4,
    /// Filler up to the end of the ring; never shown to the consumer's caller.
    Pad = 5,
    /// A rendezvous descriptor: the message (`total_len` bytes) stays in the sender's memory at
    /// the address in the payload; the receiver copies it with process_vm_readv and sets the
    /// descriptor's done flag (see [`RNDV_DESC`]).
    Rndv = 6,
    /// A request to send (rendezvous of a large matched message): the message (`total_len`
    /// bytes) waits in the sender's memory until a receive matches this record; the receiver
    /// then copies it by single copy or grants it, and the sender streams it as [`Kind::Stream`]
    /// records (see [`RTS_DESC`] and `control::Grant`).
    Rts = 7,
    /// Data of a granted rendezvous: `tag` is the receiver's grant id, `total_len` the message
    /// length; a message's stream records follow each other in the ring.
    Stream = 8,
}

/// Payload of a [`Kind::Rts`] record: the sender's buffer address (u64; meaningful when the
/// flags say single copy), the length (u64), the sender's token (u32) and flags (u32).
pub const RTS_DESC: usize = 24;
/// [`RTS_DESC`] flag: the receiver may copy the message straight from the sender's memory.
pub const RTS_SINGLE_COPY: u32 = 1;

/// A request to send, as the receiver reads it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rts {
    pub addr: u64,
    pub len: u64,
    pub token: u32,
    pub flags: u32,
}

/// Payload of a [`Kind::Rndv`] record: sender address (u64), length (u64), done flag (atomic
/// u32: 0 pending, 1 copied, 2 failed; written by the consumer), 4 bytes of padding.
pub const RNDV_DESC: usize = 24;

/// Where a rendezvous stands, as the sender sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RndvState {
    /// The receiver has not copied the data yet: the buffer must stay untouched.
    Pending,
    /// Copied: the sender may reuse the buffer.
    Done,
    /// The receiver could not copy it (the kernel refused at run time).
    Failed,
}

impl Kind {
    fn from_u16(v: u16) -> Option<Kind> {
        Some(match v {
            1 => Kind::Whole,
            2 => Kind::First,
            3 => Kind::Middle,
            4 => Kind::Last,
            5 => Kind::Pad,
            6 => Kind::Rndv,
            7 => Kind::Rts,
            8 => Kind::Stream,
            _ => return None,
        })
    }
}

/// Header fields a producer chooses. `context`, `tag` and `total_len` are the message's envelope
/// (its source is the ring's producer): the receiver matches on them before any payload moves.
/// A Directed-Point message's context is the receiving port and its tag the sending port.
#[derive(Clone, Copy, Debug)]
pub struct Meta {
    pub kind: Kind,
    pub context: u32,
    pub tag: u32,
    pub total_len: u64,
}

/// What [`Consumer::pop_head`] did.
#[derive(Clone, Copy, Debug)]
pub enum Head {
    /// The record at the read position, copied out and freed.
    Taken(RecordInfo),
    /// Nothing published at the read position.
    Empty,
    /// Nothing done: scan instead.
    Other,
}

/// A record seen at the consumer's read position.
#[derive(Clone, Copy, Debug)]
pub struct RecordInfo {
    pub pos: u64,
    pub kind: Kind,
    pub len: usize,
    pub context: u32,
    pub tag: u32,
    pub total_len: u64,
}

#[inline]
fn slots_for(len: usize) -> u64 {
    (RECORD_HEADER + len).div_ceil(SLOT) as u64
}

/// Header flag of a padding record written over a parked record: freeing it must not zero the
/// words of its slots (the application may still be reading the parked record's payload there).
const PAD_OVER_PARKED: u16 = 1;

/// The parked record a ring's control word names, as (slot offset, slots); None for none or a
/// word that names no place inside the ring.
fn decode_parked(v: u64, cap: u64) -> Option<(u64, u64)> {
    let (hi, slots) = (v >> 32, v & 0xffff_ffff);
    let off = hi.checked_sub(1)?;
    (slots > 0 && off + slots <= cap).then_some((off, slots))
}

/// Where the next record goes: padding records first (slot offset, slots, over a parked
/// record), then the record at `off`; `need` counts every slot from the producer's head.
struct Plan {
    pads: [(u64, u64, bool); 2],
    npads: usize,
    off: u64,
    need: u64,
}

/// The producer end. Not Clone: there is exactly one per ring.
pub struct Producer {
    _seg: Arc<Segment>,
    ctrl: *const RingCtrl,
    slots: *mut u8,
    cap: u64,
    mask: u64,
    head: u64,
    cached_tail: u64,
    /// The consumer's parked record as of the last read of `tail` (slot offset, slots).
    hole: Option<(u64, u64)>,
    max_payload: usize,
    max_record_slots: u64,
    /// Slots ahead of `head` whose line a push asks for ownership of (0: none; see
    /// [`write_ahead`]).
    ahead: u64,
    /// Whether the consumer asked for requests to send, as of the last read of `tail`.
    descriptors: bool,
}

/// How far ahead of its write position a producer asks for its ring's lines
/// (`VOLLEY_SHM_WRITE_AHEAD`, slots, 0 to turn it off; default 4). The line a record goes to was
/// last read by the receiver's core, so the record's stores wait in the store buffer until the
/// line comes back, and every later store of the sender waits behind them. Asking a few slots
/// ahead lets the line travel while earlier messages are sent. Only slots the consumer has
/// already given back are asked for, never the one it is polling.
fn write_ahead() -> u64 {
    static AHEAD: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *AHEAD.get_or_init(|| {
        let want = std::env::var("VOLLEY_SHM_WRITE_AHEAD")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(4)
            .min(64);
        #[cfg(target_arch = "x86_64")]
        // CPUID 8000_0001h, ECX bit 8: PREFETCHW (std's feature detection does not name it).
        let has = std::arch::x86_64::__cpuid(0x8000_0000).eax >= 0x8000_0001
            && std::arch::x86_64::__cpuid(0x8000_0001).ecx & (1 << 8) != 0;
        #[cfg(not(target_arch = "x86_64"))]
        let has = false;
        if has {
            want
        } else {
            0
        }
    })
}

// SAFETY: the producer owns its end of the ring; moving it to another thread is fine as long as
// only one thread uses it at a time, which &mut self enforces.
unsafe impl Send for Producer {}

impl Producer {
    /// # Safety
    /// `base` must point at a ring (RingCtrl followed by `layout.ring_slots` slots) inside the
    /// mapping held by `seg`, and the caller must be the ring's only producer.
    pub(crate) unsafe fn new(seg: Arc<Segment>, base: *mut u8, layout: &Layout) -> Producer {
        let ctrl = base as *const RingCtrl;
        // SAFETY: per the contract the ring control block is valid; head is only written by us.
        let head = unsafe { (*ctrl).head.load(Ordering::Relaxed) };
        // SAFETY: as above.
        let tail = unsafe { (*ctrl).tail.load(Ordering::Acquire) };
        // SAFETY: as above.
        let parked = unsafe { (*ctrl).parked.load(Ordering::Acquire) };
        // SYNC: Relaxed; a hint (see RingCtrl::descriptors), nothing is read on its word.
        // SAFETY: as above.
        let descriptors = unsafe { (*ctrl).descriptors.load(Ordering::Relaxed) } != 0;
        Producer {
            _seg: seg,
            ctrl,
            // SAFETY: slots follow the control block inside the same ring.
            slots: unsafe { base.add(std::mem::size_of::<RingCtrl>()) },
            cap: layout.ring_slots as u64,
            mask: layout.ring_slots as u64 - 1,
            head,
            cached_tail: tail,
            hole: decode_parked(parked, layout.ring_slots as u64),
            max_payload: layout.max_record_payload(),
            max_record_slots: layout.max_record_slots as u64,
            ahead: write_ahead(),
            descriptors,
        }
    }

    /// Whether the consumer asks for requests to send instead of eager data (its budget for
    /// unreceived messages is spent). Costs nothing while it has not asked as of the last look
    /// for room (a ring with room needs no answer: its records cost the consumer nothing until
    /// they fill it); while it has, the consumer's word is read again, so that eager sends
    /// resume as soon as it takes the request back.
    #[inline]
    pub fn descriptors_asked(&self) -> bool {
        // SYNC: Relaxed; a hint, nothing is read on its word.
        // SAFETY: ctrl is valid for the life of the segment we hold.
        self.descriptors && unsafe { (*self.ctrl).descriptors.load(Ordering::Relaxed) } != 0
    }

    /// Largest payload of one record.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }

    /// Ring capacity in slots.
    pub fn capacity_slots(&self) -> u64 {
        self.cap
    }

    #[inline]
    fn has_space(&mut self, k: u64) -> bool {
        if self.head + k - self.cached_tail <= self.cap {
            return true;
        }
        // SYNC: Acquire; pairs with the Release store of tail in Consumer::release, so the
        // consumer's reads of the freed slots (and its zeroing) happen before we overwrite them.
        // SAFETY: ctrl is valid for the life of the segment we hold.
        self.cached_tail = unsafe { (*self.ctrl).tail.load(Ordering::Acquire) };
        // The tail may have passed a record the application still holds: it comes with the tail
        // (same line). SYNC: Acquire; pairs with the Release clear in Consumer::unpark, so the
        // consumer's zeroing of the record's slots happens before we reuse them.
        // SAFETY: as above.
        let parked = unsafe { (*self.ctrl).parked.load(Ordering::Acquire) };
        self.hole = decode_parked(parked, self.cap);
        // SYNC: Relaxed; a hint (same line as tail), nothing is read on its word.
        // SAFETY: as above.
        self.descriptors = unsafe { (*self.ctrl).descriptors.load(Ordering::Relaxed) } != 0;
        self.head + k - self.cached_tail <= self.cap
    }

    /// Where a record of `k` slots would go from the head: padding to the end of the ring when
    /// it would wrap, padding over the parked record when it would overlap it.
    fn plan(&self, k: u64) -> Plan {
        let mut p = Plan {
            pads: [(0, 0, false); 2],
            npads: 0,
            off: self.head & self.mask,
            need: 0,
        };
        // At most two pads: over the parked record and to the end of the ring, in either order
        // (a record is at most a quarter of the ring, so it cannot meet the parked record twice).
        for _ in 0..3 {
            let pad = match self.hole {
                Some((h, m)) if p.off < h + m && h < p.off + k => Some((h + m - p.off, true)),
                _ if p.off + k > self.cap => Some((self.cap - p.off, false)),
                _ => None,
            };
            let Some((len, over)) = pad else {
                p.need += k;
                return p;
            };
            if p.npads == p.pads.len() {
                break;
            }
            p.pads[p.npads] = (p.off, len, over);
            p.npads += 1;
            p.need += len;
            p.off = (p.off + len) & self.mask;
        }
        // Unreachable with a valid hole; never fits, so nothing is written.
        p.need = u64::MAX / 2;
        p
    }

    /// Whether a message of `len` bytes, cut into records of at most [`Producer::max_payload`],
    /// could be written now without waiting. Exact for one record (padding included);
    /// conservative by one record's padding for several.
    pub fn can_fit_message(&mut self, len: usize) -> bool {
        if len <= self.max_payload {
            let need = self.plan(slots_for(len)).need;
            return self.has_space(need);
        }
        let hole = self.hole.map_or(0, |(_, m)| m);
        let need = self.slots_for_message(len) + self.max_record_slots + hole;
        self.has_space(need)
    }

    /// Slots that a message of `len` bytes occupies when cut into records of `max_payload`.
    pub fn slots_for_message(&self, len: usize) -> u64 {
        if len <= self.max_payload {
            return slots_for(len);
        }
        let full = (len / self.max_payload) as u64;
        let rest = len % self.max_payload;
        full * slots_for(self.max_payload) + if rest > 0 { slots_for(rest) } else { 0 }
    }

    /// Writes one record, or returns false (back-pressure) if the ring has no room for it now;
    /// then nothing is written.
    ///
    /// Panics if `payload` is longer than [`Producer::max_payload`].
    #[inline]
    pub fn try_push(&mut self, meta: Meta, payload: &[u8]) -> bool {
        self.try_push_pos(meta, payload).is_some()
    }

    /// Like [`Producer::try_push`], returning the position of the record written.
    #[inline]
    pub fn try_push_pos(&mut self, meta: Meta, payload: &[u8]) -> Option<u64> {
        assert!(payload.len() <= self.max_payload, "record payload too long");
        let k = slots_for(payload.len());
        let off = self.reserve(k)?;
        // SAFETY: reserve found `k` free slots from `off`, inside the ring (no wrap).
        unsafe { self.publish(off, meta, payload.len(), payload, 0) };
        let pos = self.head;
        self.head += k;
        self.own_ahead();
        Some(pos)
    }

    /// Asks for the line `ahead` slots past the write position, if the consumer has given that
    /// slot back (by the cached tail: a stale one only skips the hint).
    #[inline(always)]
    fn own_ahead(&self) {
        let at = self.head + self.ahead;
        if self.ahead != 0 && at - self.cached_tail < self.cap {
            // SAFETY: the offset is masked into the ring's slots.
            prefetch_write(unsafe { self.slots.add((at & self.mask) as usize * SLOT) });
        }
    }

    /// Finds room for a record of `k` slots, padding to the end of the ring first when the
    /// record would wrap. All or nothing: returns the offset of the record's first slot (any
    /// padding already published), or None having written nothing. A record of at most a quarter
    /// of the ring always fits once the consumer has drained, padding included.
    #[inline]
    fn reserve(&mut self, k: u64) -> Option<u64> {
        let off = self.head & self.mask;
        if self.hole.is_none() && off + k <= self.cap {
            if !self.has_space(k) {
                return None;
            }
            // A fresh look at the tail may have found a parked record.
            if self.hole.is_none() {
                return Some(off);
            }
        }
        if !self.has_space(self.plan(k).need) {
            return None;
        }
        // (has_space may have read the parked record afresh.)
        let p = self.plan(k);
        if self.head + p.need - self.cached_tail > self.cap {
            return None;
        }
        let pad_meta = Meta {
            kind: Kind::Pad,
            tag: 0,
            context: 0,
            total_len: 0,
        };
        for &(at, len, over) in &p.pads[..p.npads] {
            let flags = if over { PAD_OVER_PARKED } else { 0 };
            // SAFETY: the plan's slots are inside the ring, free (has room above) and do not
            // wrap; a pad over the parked record writes only its header, in the record's first
            // slot's header or before the record, never its payload.
            unsafe {
                self.publish(
                    at,
                    pad_meta,
                    len as usize * SLOT - RECORD_HEADER,
                    &[],
                    flags,
                )
            };
            self.head += len;
        }
        Some(p.off)
    }

    /// Writes one record of `len` payload bytes that `fill` writes in place, straight into the
    /// ring (no copy on the sending side), or returns false without calling `fill` if the ring
    /// has no room now. If `fill` panics, nothing is published.
    ///
    /// Panics if `len` is larger than [`Producer::max_payload`].
    pub fn try_push_with(&mut self, meta: Meta, len: usize, fill: impl FnOnce(&mut [u8])) -> bool {
        assert!(len <= self.max_payload, "record payload too long");
        let k = slots_for(len);
        let Some(off) = self.reserve(k) else {
            return false;
        };
        // SAFETY: reserve found the record's slots free and inside the ring (no wrap); nobody
        // reads them before the stamp is published below.
        let payload = unsafe {
            std::slice::from_raw_parts_mut(self.slots.add(off as usize * SLOT + RECORD_HEADER), len)
        };
        fill(payload);
        // SAFETY: as above; publish writes the header and then the stamp.
        unsafe { self.publish(off, meta, len, &[], 0) };
        self.head += k;
        true
    }

    /// Writes a request to send (see [`Kind::Rts`]); false if the ring has no room now.
    pub fn push_rts(&mut self, tag: u32, context: u32, rts: &Rts) -> bool {
        let mut d = [0u8; RTS_DESC];
        d[0..8].copy_from_slice(&rts.addr.to_ne_bytes());
        d[8..16].copy_from_slice(&rts.len.to_ne_bytes());
        d[16..20].copy_from_slice(&rts.token.to_ne_bytes());
        d[20..24].copy_from_slice(&rts.flags.to_ne_bytes());
        let meta = Meta {
            kind: Kind::Rts,
            tag,
            context,
            total_len: rts.len,
        };
        self.try_push(meta, &d)
    }

    /// Where the rendezvous whose descriptor this producer wrote at `pos` stands.
    pub fn rndv_state(&self, pos: u64) -> RndvState {
        // SAFETY: ctrl starts the ring this producer owns.
        unsafe {
            rndv_state_at(
                self.ctrl as *mut u8,
                &Layout::ring_only(self.cap as usize),
                pos,
            )
        }
    }

    /// # Safety
    /// Slots `off .. off + slots_for(len)` must be inside the ring and free.
    #[inline]
    unsafe fn publish(&mut self, off: u64, meta: Meta, len: usize, payload: &[u8], flags: u16) {
        // SAFETY: per the contract, the slots are ours to write until the stamp is published.
        unsafe {
            let rec = self.slots.add(off as usize * SLOT);
            ptr::copy_nonoverlapping(payload.as_ptr(), rec.add(RECORD_HEADER), payload.len());
            let h = rec as *mut RecordHeader;
            ptr::addr_of_mut!((*h).len).write(len as u32);
            ptr::addr_of_mut!((*h).kind).write(meta.kind as u16);
            ptr::addr_of_mut!((*h)._flags).write(flags);
            ptr::addr_of_mut!((*h).tag).write(meta.tag);
            ptr::addr_of_mut!((*h).context).write(meta.context);
            ptr::addr_of_mut!((*h).total_len).write(meta.total_len);
            // SYNC: Release; pairs with the Acquire stamp load in Consumer::peek, which makes the
            // payload and header fields above visible to the consumer.
            (*h).stamp.store(self.head + 1, Ordering::Release);
            // Informational only (inspection tools); nothing synchronises on it.
            (*self.ctrl)
                .head
                .store(self.head + slots_for(len), Ordering::Relaxed);
        }
    }
}

/// Where the rendezvous whose descriptor was written at `pos` in the ring at `base` stands.
///
/// # Safety
/// `base` must point at a ring (control block and `layout.ring_slots` slots) in a live mapping.
pub(crate) unsafe fn rndv_state_at(base: *mut u8, layout: &Layout, pos: u64) -> RndvState {
    let ctrl = base as *const RingCtrl;
    // SYNC: Acquire; pairs with the Release tail store in Consumer::free_released. The consumer
    // releases a descriptor only after its copy succeeded, so a tail past it means done; before
    // that the record is intact and its flag tells.
    // SAFETY: per the contract.
    let tail = unsafe { (*ctrl).tail.load(Ordering::Acquire) };
    if tail > pos {
        return RndvState::Done;
    }
    let mask = layout.ring_slots as u64 - 1;
    // SAFETY: the record at pos is not released, so its slots still hold the descriptor; the
    // flag is 16 bytes into its payload.
    let flag = unsafe {
        &*(base.add(
            std::mem::size_of::<RingCtrl>() + (pos & mask) as usize * SLOT + RECORD_HEADER + 16,
        ) as *const AtomicU32)
    };
    // SYNC: Acquire; pairs with the Release store in Consumer::rndv_finish: the copy out of the
    // sender's buffer happened before.
    match flag.load(Ordering::Acquire) {
        0 => RndvState::Pending,
        1 => RndvState::Done,
        _ => RndvState::Failed,
    }
}

/// A record taken from the ring and not yet released: its slots stay untouched by the producer
/// until it is given back with [`Consumer::release`]. Read it through [`Consumer::payload`].
pub struct Held {
    pos: u64,
    ptr: *const u8,
    len: usize,
}

// SAFETY: a Held names slots of the shared mapping that the producer leaves alone until the
// record is released (ring protocol); any thread may read them. Nothing in it is tied to a thread.
unsafe impl Send for Held {}
// SAFETY: shared access only reads the payload, which nobody writes while the record is held.
unsafe impl Sync for Held {}

impl Held {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A taken record that keeps the segment mapped on its own, so that its payload can be read
/// without borrowing the consumer (the application's zero-copy message).
pub struct SharedHeld {
    held: Held,
    _seg: Arc<Segment>,
}

impl SharedHeld {
    /// The payload, in place in shared memory.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the record is taken and not released, so the producer does not write these
        // slots (ring protocol: it writes only below tail + capacity, and tail stops at the first
        // unreleased record, or passes it parked, and the producer then writes padding around
        // it until it is released); `_seg` keeps the mapping alive.
        unsafe { std::slice::from_raw_parts(self.held.ptr, self.held.len) }
    }
}

impl From<SharedHeld> for Held {
    fn from(s: SharedHeld) -> Held {
        s.held
    }
}

/// Per-record consumer state, indexed by the slot of the record's header.
const FREE: u8 = 0;
const TAKEN: u8 = 1;
const RELEASED: u8 = 2;
/// Taken and lent to the application ([`Consumer::take_shared`]): may be parked.
const LENT: u8 = 3;

/// The consumer end. Not Clone: there is exactly one per ring.
///
/// The consumer may take records out of order: [`Consumer::scan`] looks past records it is not
/// interested in (messages for another port) without copying them, so one reader never waits
/// behind another's messages as long as they fit in the ring. Three cursors, in order:
/// `tail <= read <= (published)`: everything before `tail` is free for the producer; everything
/// before `read` has been taken; records after `read` may be taken or not.
pub struct Consumer {
    seg: Arc<Segment>,
    ctrl: *const RingCtrl,
    slots: *mut u8,
    cap: u64,
    mask: u64,
    /// First record not yet taken.
    read: u64,
    /// Everything before this is released and published to the producer.
    tail: u64,
    /// FREE / TAKEN / RELEASED per record, indexed by the slot of its header.
    state: Vec<u8>,
    /// Scan memo: for `key`, no wanted record lies in [read, pos).
    memo: Option<(u128, u64)>,
    /// Records taken and not yet released.
    held: usize,
    /// Records lent to the application and not yet given back.
    lent: usize,
    /// The lent record `tail` was moved past (absolute position, slots), if any.
    parked: Option<(u64, u64)>,
    max_payload: usize,
}

// SAFETY: as for Producer.
unsafe impl Send for Consumer {}

/// A hint to bring the cache line at `p` in (no fault, no effect on what any load returns).
#[inline(always)]
fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no program state, whatever the address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A hint to bring the cache line at `p` in for writing (owned, the others' copies invalidated):
/// no fault, no effect on what any load returns. PREFETCHW, used only where the processor has it
/// ([`write_ahead`]).
#[inline(always)]
fn prefetch_write(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch never faults and changes no program state, whatever the address.
    // (_mm_prefetch's ET0 hint gives PREFETCHT0 unless the whole crate is built for PRFCHW.)
    unsafe {
        std::arch::asm!("prefetchw [{}]", in(reg) p, options(nostack, preserves_flags, readonly))
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// A record header that breaks the ring's rules: the peer wrote garbage into shared memory.
#[derive(Debug, Clone)]
pub struct Corrupt(pub String);

impl Consumer {
    /// # Safety
    /// As for [`Producer::new`], for the ring's only consumer.
    pub(crate) unsafe fn new(seg: Arc<Segment>, base: *mut u8, layout: &Layout) -> Consumer {
        let ctrl = base as *const RingCtrl;
        // SAFETY: per the contract.
        let tail = unsafe { (*ctrl).tail.load(Ordering::Relaxed) };
        Consumer {
            seg,
            ctrl,
            // SAFETY: slots follow the control block.
            slots: unsafe { base.add(std::mem::size_of::<RingCtrl>()) },
            cap: layout.ring_slots as u64,
            mask: layout.ring_slots as u64 - 1,
            read: tail,
            tail,
            state: vec![FREE; layout.ring_slots],
            memo: None,
            held: 0,
            lent: 0,
            parked: None,
            max_payload: layout.max_record_payload(),
        }
    }

    #[inline]
    fn header(&self, pos: u64) -> *const RecordHeader {
        // SAFETY: the masked offset is inside the ring.
        unsafe { self.slots.add((pos & self.mask) as usize * SLOT) as *const RecordHeader }
    }

    #[inline]
    fn idx(&self, pos: u64) -> usize {
        (pos & self.mask) as usize
    }

    /// The record published at `pos` (a record boundary at or after `read`), if any.
    #[inline(always)]
    fn at(&self, pos: u64) -> Result<Option<RecordInfo>, Corrupt> {
        let h = self.header(pos);
        // SYNC: Acquire; pairs with the Release stamp store in Producer::publish.
        // SAFETY: h points at a slot inside the mapping.
        let stamp = unsafe { (*h).stamp.load(Ordering::Acquire) };
        if stamp != pos + 1 {
            return Ok(None);
        }
        // SAFETY: the stamp matched, so the producer finished writing these fields.
        let (len, kind, tag, context, total_len) = unsafe {
            (
                ptr::addr_of!((*h).len).read() as usize,
                ptr::addr_of!((*h).kind).read(),
                ptr::addr_of!((*h).tag).read(),
                ptr::addr_of!((*h).context).read(),
                ptr::addr_of!((*h).total_len).read(),
            )
        };
        let kind = Kind::from_u16(kind)
            .ok_or_else(|| Corrupt(format!("record kind {kind} at position {pos}")))?;
        let off = pos & self.mask;
        if off + slots_for(len) > self.cap || (kind != Kind::Pad && len > self.max_payload) {
            return Err(Corrupt(format!(
                "record of {len} bytes at position {pos} overruns the ring"
            )));
        }
        Ok(Some(RecordInfo {
            pos,
            kind,
            len,
            tag,
            context,
            total_len,
        }))
    }

    /// Moves `read` over records already taken and over padding.
    fn advance_read(&mut self) -> Result<(), Corrupt> {
        loop {
            let i = self.idx(self.read);
            match self.state[i] {
                TAKEN | RELEASED | LENT => {}
                _ => match self.at(self.read)? {
                    Some(info) if info.kind == Kind::Pad => {
                        self.state[i] = TAKEN;
                        let pos = self.read;
                        self.read += slots_for(info.len);
                        self.release_pos(pos);
                        continue;
                    }
                    _ => {
                        if self.tail < self.read && self.state[self.idx(self.tail)] == RELEASED {
                            self.free_released();
                        }
                        return Ok(());
                    }
                },
            }
            // SAFETY: the record at read was published and is not yet freed.
            let len = unsafe { ptr::addr_of!((*self.header(self.read)).len).read() } as usize;
            self.read += slots_for(len);
            assert!(
                self.read - self.tail <= self.cap,
                "ring invariant broken: read {} tail {} cap {} state at read {} len {len}",
                self.read,
                self.tail,
                self.cap,
                self.state[self.idx(self.read)]
            );
        }
    }

    /// How many slots the ring holds from its oldest unreleased record to the end of what the
    /// producer had published at the last scan that reached that end (a scan that found
    /// nothing): how close the producer is to waiting for room. 0 before any such scan.
    #[inline]
    pub fn backlog(&self) -> u64 {
        self.memo.map_or(0, |(_, p)| p.saturating_sub(self.tail))
    }

    /// Whether, as of the last scan that reached the end of what was published, a record of the
    /// largest size might not fit: the producer may be waiting for room. A record that would
    /// wrap needs the padding to the end of the ring too (see `Producer::reserve`): without
    /// counting it, a ring whose producer waits could look as if it had room, and a receiver
    /// waiting for a message behind a full ring would never drain it.
    #[inline]
    pub fn looks_full(&self) -> bool {
        let Some((_, end)) = self.memo else {
            return false;
        };
        let k = slots_for(self.max_payload);
        let off = end & self.mask;
        let need = if off + k > self.cap {
            self.cap - off + k
        } else {
            k
        };
        end.saturating_sub(self.tail) + need > self.cap
    }

    /// Asks the producer for requests to send instead of eager data (`on`), or takes the request
    /// back: this consumer's budget for messages no receive has taken is spent, so eager data
    /// beyond a full ring would have to be held without bound (or leave the ring full, and a
    /// message behind it unreachable), while a request to send costs one slot.
    pub fn ask_descriptors(&self, on: bool) {
        // SYNC: Relaxed; a hint, nothing is published with it.
        // SAFETY: ctrl is valid while we hold the segment.
        unsafe { (*self.ctrl).descriptors.store(on as u64, Ordering::Relaxed) };
    }

    /// Ring capacity in bytes (slots of `SLOT` bytes).
    pub fn capacity_bytes(&self) -> usize {
        self.cap as usize * SLOT
    }

    /// Whether the producer has surely published nothing this consumer has not taken: one look
    /// at the next record's stamp, no scan and no change (false when unsure: a record there,
    /// padding included).
    #[inline]
    pub fn surely_empty(&self) -> bool {
        let h = self.header(self.read);
        // SYNC: Acquire; pairs with the Release stamp store in Producer::publish (a record seen
        // here is then read whole by the scan that follows).
        // SAFETY: h points at a slot inside the mapping.
        let stamp = unsafe { (*h).stamp.load(Ordering::Acquire) };
        self.state[self.idx(self.read)] == FREE && stamp != self.read + 1
    }

    /// Whether the ring holds no record that nobody has taken yet (what a scan could still
    /// offer): a receiver's ready summary may then forget the ring.
    #[inline]
    pub fn nothing_unread(&mut self) -> Result<bool, Corrupt> {
        self.advance_read()?;
        Ok(self.at(self.read)?.is_none())
    }

    /// The first record not yet taken, if the producer has published one. Does not take it.
    #[inline]
    pub fn peek(&mut self) -> Result<Option<RecordInfo>, Corrupt> {
        self.scan(0, |_| true)
    }

    /// The first record not yet taken for which `want` holds, looking past the others (which stay
    /// in place for whoever wants them). `key` names the question for a memo that lets repeated
    /// scans skip records already found unwanted: the same key must always mean the same `want`.
    #[inline]
    pub fn scan(
        &mut self,
        key: u128,
        mut want: impl FnMut(&RecordInfo) -> bool,
    ) -> Result<Option<RecordInfo>, Corrupt> {
        self.advance_read()?;
        let mut pos = self.read;
        if let Some((k, p)) = self.memo {
            if k == key && p > pos {
                pos = p;
            }
        }
        loop {
            let Some(info) = self.at(pos)? else {
                self.memo = Some((key, pos));
                return Ok(None);
            };
            if info.kind != Kind::Pad && self.state[self.idx(pos)] == FREE && want(&info) {
                return Ok(Some(info));
            }
            pos += slots_for(info.len);
        }
    }

    /// The in-order case of scan, take, copy and release in one step, as a plain SPSC ring pops:
    /// where every record before `read` is freed and the record at `read` is a whole message
    /// that `want` accepts and `out` holds, copies its payload into the front of `out` and frees
    /// its slots at once (no state kept for it). [`Head::Empty`]: nothing published at `read`
    /// (so nothing in the ring that a scan could offer). [`Head::Other`]: nothing changed (a
    /// record taken out of order and not yet freed, padding, another kind, one unwanted or too
    /// long): look with [`Consumer::scan`].
    #[inline]
    pub fn pop_head(
        &mut self,
        want: impl FnOnce(&RecordInfo) -> bool,
        out: &mut [u8],
    ) -> Result<Head, Corrupt> {
        if !self.is_free_head(self.read) {
            return Ok(Head::Other);
        }
        let Some(info) = self.at(self.read)? else {
            return Ok(Head::Empty);
        };
        if info.kind != Kind::Whole || info.len > out.len() || !want(&info) {
            return Ok(Head::Other);
        }
        self.copy_free_head(&info, out);
        Ok(Head::Taken(info))
    }

    /// Take, copy into the front of `out` and release in one: a record that [`Consumer::scan`]
    /// or [`Consumer::peek`] returned (`out` holds its payload). Where it is the next record and
    /// nothing before it is held, its slots are freed at once as [`Consumer::pop_head`] frees
    /// them; otherwise by `take` and `release`.
    #[inline]
    pub fn copy_out(&mut self, info: &RecordInfo, out: &mut [u8]) {
        if self.is_free_head(info.pos) {
            self.copy_free_head(info, out);
            return;
        }
        let held = self.take(info);
        out[..info.len].copy_from_slice(self.payload(&held));
        self.release(held);
    }

    /// Whether `pos` is the read position, nothing before it is held and its record is not
    /// taken: a record there can be copied out and freed at once (`copy_free_head`).
    #[inline(always)]
    fn is_free_head(&self, pos: u64) -> bool {
        pos == self.read && self.tail == self.read && self.state[self.idx(pos)] == FREE
    }

    /// Copies the published record `info` at the read position (`is_free_head`) into the front
    /// of `out` and frees its slots: what take, release and `free_released` do for it, without
    /// the state byte.
    #[inline(always)]
    fn copy_free_head(&mut self, info: &RecordInfo, out: &mut [u8]) {
        let h = self.header(info.pos);
        // SAFETY: a published record (its stamp matched in `at`), which `at` checked does not
        // overrun the ring; the producer leaves it alone until the tail store below.
        let payload =
            unsafe { std::slice::from_raw_parts((h as *const u8).add(RECORD_HEADER), info.len) };
        out[..info.len].copy_from_slice(payload);
        let k = slots_for(info.len);
        // As `free_released` does: no payload word may later pass for a stamp.
        for s in 1..k {
            // SAFETY: inside the record, which does not wrap.
            unsafe {
                (*self.header(info.pos + s))
                    .stamp
                    .store(0, Ordering::Relaxed)
            };
        }
        self.read += k;
        self.tail = self.read;
        // SYNC: Release; pairs with the Acquire in Producer::has_space: the copy and the zeroing
        // above happen before the producer reuses the slots.
        // SAFETY: ctrl is valid while we hold the segment.
        unsafe { (*self.ctrl).tail.store(self.tail, Ordering::Release) };
        // As in `take`: the next record's line, while this one's caller goes on.
        prefetch(self.header(self.read) as *const u8);
    }

    /// Takes a record that [`Consumer::scan`] or [`Consumer::peek`] returned. It stays in place
    /// until released.
    #[inline]
    pub fn take(&mut self, info: &RecordInfo) -> Held {
        let i = self.idx(info.pos);
        assert!(
            info.pos >= self.read && self.state[i] == FREE,
            "take() of a record not offered"
        );
        self.state[i] = TAKEN;
        self.held += 1;
        if info.pos == self.read {
            self.read += slots_for(info.len);
            // Records after it may have been taken already; padding is skipped later.
            while self.state[self.idx(self.read)] != FREE && self.read < self.tail + self.cap {
                // SAFETY: a taken record's header stays intact until it is freed.
                let len = unsafe { ptr::addr_of!((*self.header(self.read)).len).read() } as usize;
                self.read += slots_for(len);
            }
            // Ask for the next record's line now: where the producer is ahead (a stream of
            // small messages) its transfer from the producer's cache overlaps this one's
            // copy and bookkeeping instead of stalling the next poll.
            prefetch(self.header(self.read) as *const u8);
        }
        Held {
            pos: info.pos,
            // SAFETY: the payload follows the header inside the record.
            ptr: unsafe { (self.header(info.pos) as *const u8).add(RECORD_HEADER) },
            len: info.len,
        }
    }

    /// Like take, for a record lent to the application: it keeps the segment mapped on its own
    /// and can be read without borrowing the consumer. The application may keep it as long as it
    /// likes: once it holds back a quarter of the ring, the record is *parked* (`tail` moves past
    /// it and the producer writes around it), so later records still find room. One lent record
    /// at a time can be parked: see [`Consumer::has_lent`].
    pub fn take_shared(&mut self, info: &RecordInfo) -> SharedHeld {
        let held = self.take(info);
        let i = self.idx(info.pos);
        self.state[i] = LENT;
        self.lent += 1;
        SharedHeld {
            held,
            _seg: self.seg.clone(),
        }
    }

    /// Whether a record lent with [`Consumer::take_shared`] is still out. A receiver lends one
    /// record per ring at a time and copies the others: only one can be parked, and a second
    /// held one would stop the producer again.
    #[inline]
    pub fn has_lent(&self) -> bool {
        self.lent > 0
    }

    /// The payload of a record this consumer handed out and has not yet taken back.
    pub fn payload<'a>(&'a self, held: &'a Held) -> &'a [u8] {
        debug_assert_eq!(self.state[self.idx(held.pos)], TAKEN);
        // SAFETY: `held` is a taken, unreleased record of this ring (it can only be made by take
        // and is consumed by release), so the producer does not touch it; `self` holds the
        // segment for the lifetime of the returned slice.
        unsafe { std::slice::from_raw_parts(held.ptr, held.len) }
    }

    /// The sender's address and the length of a rendezvous record this consumer took.
    pub fn rndv_desc(&self, held: &Held) -> Result<(u64, u64), Corrupt> {
        let p = self.payload(held);
        if p.len() < RNDV_DESC {
            return Err(Corrupt(format!(
                "rendezvous descriptor of {} bytes",
                p.len()
            )));
        }
        let addr = u64::from_ne_bytes(p[0..8].try_into().expect("8 bytes"));
        let len = u64::from_ne_bytes(p[8..16].try_into().expect("8 bytes"));
        Ok((addr, len))
    }

    /// The request to send in a [`Kind::Rts`] record this consumer took.
    pub fn rts(&self, held: &Held) -> Result<Rts, Corrupt> {
        let p = self.payload(held);
        if p.len() != RTS_DESC {
            return Err(Corrupt(format!("request to send of {} bytes", p.len())));
        }
        let u64_at = |i: usize| u64::from_ne_bytes(p[i..i + 8].try_into().expect("8 bytes"));
        let u32_at = |i: usize| u32::from_ne_bytes(p[i..i + 4].try_into().expect("4 bytes"));
        Ok(Rts {
            addr: u64_at(0),
            len: u64_at(8),
            token: u32_at(16),
            flags: u32_at(20),
        })
    }

    /// Tells the sender its rendezvous is over. On success the record is released; on failure
    /// it stays taken, so that the sender can read the failure (the pair's ring is then stuck,
    /// which is what a kernel that refuses mid-job deserves: the error says how to avoid it).
    pub fn rndv_finish(&mut self, held: Held, ok: bool) {
        // SAFETY: the descriptor is inside the taken record, 16 bytes into its payload.
        let flag = unsafe { &*(held.ptr.add(16) as *const AtomicU32) };
        // SYNC: Release; pairs with the Acquire in Producer::rndv_state.
        flag.store(if ok { 1 } else { 2 }, Ordering::Release);
        if ok {
            self.release(held);
        } else {
            // Kept taken (never released): dropping the handle leaves the record in place.
            self.held -= 1;
        }
    }

    /// Gives a record back. Records may be released in any order; the producer sees space only
    /// once every record before it has been released too.
    #[inline]
    pub fn release(&mut self, held: impl Into<Held>) {
        let pos = held.into().pos;
        self.held -= 1;
        if self.parked.is_some_and(|(p, _)| p == pos) {
            self.lent -= 1;
            self.unpark();
            return;
        }
        if self.state[self.idx(pos)] == LENT {
            self.lent -= 1;
        }
        self.release_pos(pos);
    }

    fn release_pos(&mut self, pos: u64) {
        let i = self.idx(pos);
        self.state[i] = RELEASED;
        if pos == self.tail || self.state[self.idx(self.tail)] == LENT {
            self.free_released();
        }
    }

    /// The application gave the parked record back: its slots are the producer's again.
    fn unpark(&mut self) {
        let Some((pos, k)) = self.parked.take() else {
            return;
        };
        // As when freeing: no payload word may later pass for a stamp.
        for s in 1..k {
            // SAFETY: inside the record, which does not wrap; the producer leaves it alone until
            // the clear below.
            unsafe { (*self.header(pos + s)).stamp.store(0, Ordering::Relaxed) };
        }
        // SYNC: Release; pairs with the Acquire in Producer::has_space: the zeroing above (and our
        // reads of the payload) happen before the producer reuses the slots.
        // SAFETY: ctrl is valid while we hold the segment.
        unsafe { (*self.ctrl).parked.store(0, Ordering::Release) };
    }

    /// Frees the released records at the tail, up to `read`, and tells the producer.
    ///
    /// Called on release and whenever `read` moves: a record taken by look-ahead and released
    /// while `read` still sat on an unconsumed pad before it can only be freed once `read` has
    /// moved past it.
    fn free_released(&mut self) {
        let mut tail = self.tail;
        while tail < self.read {
            let idx = self.idx(tail);
            let h = self.header(tail);
            // SAFETY: the record at tail was published and is not yet free.
            let (len, flags) = unsafe {
                (
                    ptr::addr_of!((*h).len).read() as usize,
                    ptr::addr_of!((*h)._flags).read(),
                )
            };
            let k = slots_for(len);
            match self.state[idx] {
                RELEASED => {
                    // Zero the first word of every slot after the first, so leftover payload can
                    // never look like a stamp to a later scan. The first slot keeps its (now
                    // stale) stamp. Not inside padding over a parked record: that payload is
                    // still the application's (it is zeroed when given back).
                    if flags & PAD_OVER_PARKED == 0 {
                        for s in 1..k {
                            // SAFETY: inside the record, which does not wrap.
                            unsafe { (*self.header(tail + s)).stamp.store(0, Ordering::Relaxed) };
                        }
                    }
                }
                // The application keeps a record it was lent and holds back a quarter of the
                // ring: park it, so the producer can go on around it.
                LENT if self.parked.is_none() && self.read - tail > self.cap / 4 => {
                    self.parked = Some((tail, k));
                    // Published by the tail store below (Release).
                    // SAFETY: ctrl is valid while we hold the segment.
                    unsafe {
                        (*self.ctrl)
                            .parked
                            .store(((idx as u64 + 1) << 32) | k, Ordering::Relaxed)
                    };
                }
                _ => break,
            }
            self.state[idx] = FREE;
            tail += k;
        }
        if tail != self.tail {
            self.tail = tail;
            // SYNC: Release; pairs with the Acquire in Producer::has_space: our reads of the
            // freed slots and the zeroing above happen before the producer reuses them.
            // SAFETY: ctrl is valid while we hold the segment.
            unsafe { (*self.ctrl).tail.store(tail, Ordering::Release) };
        }
    }

    /// True when every record taken has been released.
    pub fn all_released(&self) -> bool {
        self.held == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::SegmentParams;

    fn seg(ring_bytes: usize, record_bytes: usize) -> Arc<Segment> {
        let fd = volley_sys::memfd_create("volley-test").unwrap();
        Segment::create(
            fd,
            SegmentParams::new(1, ring_bytes, record_bytes, 7),
            "memfd",
        )
        .unwrap()
    }

    fn meta(kind: Kind, total: u64) -> Meta {
        Meta {
            kind,
            tag: 1,
            context: 2,
            total_len: total,
        }
    }

    /// A producer thread publishing records 0..n, numbered in their first four bytes, even
    /// numbers for port 1 and odd for port 2, in sizes that make padding frequent.
    fn two_port_producer(mut p: Producer, n: u32) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            for i in 0..n {
                let len = [4usize, 500, 1000, 2000, 33][(i % 5) as usize];
                let mut buf = [0u8; 2000];
                buf[..4].copy_from_slice(&i.to_le_bytes());
                let m = Meta {
                    kind: Kind::Whole,
                    tag: 0,
                    context: 1 + i % 2,
                    total_len: len as u64,
                };
                while !p.try_push(m, &buf[..len]) {
                    std::hint::spin_loop();
                }
            }
        })
    }

    #[test]
    fn push_peek_release_in_order_across_many_laps() {
        let s = seg(4096, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        let mut next_expected = 0u32;
        let mut next_sent = 0u32;
        // Sizes chosen to hit padding at the end of the ring repeatedly.
        let sizes = [0usize, 1, 31, 32, 33, 100, 500, 900];
        for round in 0..2000 {
            let len = sizes[round % sizes.len()];
            let mut buf = vec![0u8; len.max(4)];
            buf[..4].copy_from_slice(&next_sent.to_le_bytes());
            let payload = &buf[..len.max(4).min(buf.len())];
            while !p.try_push(meta(Kind::Whole, payload.len() as u64), payload) {
                let info = c.peek().unwrap().expect("ring full but nothing to read");
                let h = c.take(&info);
                let got = u32::from_le_bytes(c.payload(&h)[..4].try_into().unwrap());
                assert_eq!(got, next_expected);
                next_expected += 1;
                c.release(h);
            }
            next_sent += 1;
        }
        while let Some(info) = c.peek().unwrap() {
            let h = c.take(&info);
            let got = u32::from_le_bytes(c.payload(&h)[..4].try_into().unwrap());
            assert_eq!(got, next_expected);
            next_expected += 1;
            c.release(h);
        }
        assert_eq!(next_expected, next_sent);
        assert!(c.all_released());
    }

    /// `surely_empty` (MPI_Irecv's one look before it holds a receive back) says empty only
    /// when a scan would find nothing: never while a record is published and not taken, also
    /// one left unwanted by a scan, across laps and padding.
    #[test]
    fn surely_empty_only_when_a_scan_finds_nothing() {
        let s = seg(4096, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        assert!(c.surely_empty());
        for round in 0..500usize {
            let len = [0usize, 8, 100, 900][round % 4];
            let payload = vec![7u8; len];
            assert!(p.try_push(meta(Kind::Whole, len as u64), &payload));
            assert!(!c.surely_empty(), "round {round}: a published record");
            // Scanned for something else: it stays, and the ring is not empty.
            assert!(c.scan(1, |_| false).unwrap().is_none());
            assert!(
                !c.surely_empty(),
                "round {round}: a record a scan passed over"
            );
            let info = c.peek().unwrap().expect("the record");
            let h = c.take(&info);
            c.release(h);
            assert!(c.surely_empty(), "round {round}: all taken");
            assert_eq!(c.surely_empty(), c.nothing_unread().unwrap());
        }
    }

    /// A receiver that keeps a lent record for as long as it likes never stops the producer: the
    /// record is parked, the producer writes around it lap after lap, its payload stays intact
    /// until it is given back, and every other record arrives in order.
    #[test]
    fn a_lent_record_kept_for_many_laps_is_parked_and_left_intact() {
        for (ring, record) in [(4096, 1024), (4096, 256), (16384, 4096), (1024, 256)] {
            let s = seg(ring, record);
            let mut p = s.producer(0, 0);
            let mut c = s.consumer(0, 0);
            let max = p.max_payload();
            let mut rng = 0x5eed_u64 ^ ring as u64 ^ record as u64;
            let mut next = || {
                rng = rng.wrapping_add(0x9e3779b97f4a7c15);
                let mut z = rng;
                z = (z ^ (z >> 30)).wrapping_mul(0xbf58476d1ce4e5b9);
                z ^ (z >> 31)
            };
            let (mut sent, mut got) = (0u32, 0u32);
            // The lent record: its copy, the handle, and for how many more records it is kept.
            let mut kept: Option<(Vec<u8>, SharedHeld, u64)> = None;
            let mut laps_kept = 0u64;
            for _ in 0..20_000 {
                let len = 4 + (next() as usize % (max - 3));
                let mut buf = vec![(sent % 251) as u8; len];
                buf[..4].copy_from_slice(&sent.to_le_bytes());
                while !p.try_push(meta(Kind::Whole, len as u64), &buf) {
                    let info = c
                        .peek()
                        .unwrap()
                        .expect("producer stopped with nothing to read");
                    let lend = kept.is_none() && !c.has_lent() && next() % 4 == 0;
                    if lend {
                        let h = c.take_shared(&info);
                        let n = u32::from_le_bytes(h.as_slice()[..4].try_into().unwrap());
                        assert_eq!(n, got);
                        kept = Some((h.as_slice().to_vec(), h, next() % 400));
                    } else {
                        let h = c.take(&info);
                        let n = u32::from_le_bytes(c.payload(&h)[..4].try_into().unwrap());
                        assert_eq!(n, got);
                        assert!(c.payload(&h)[4..].iter().all(|&b| b == (n % 251) as u8));
                        c.release(h);
                    }
                    got += 1;
                    if let Some((copy, h, left)) = kept.take() {
                        assert_eq!(h.as_slice(), &copy[..], "a kept record was overwritten");
                        if left == 0 {
                            c.release(h);
                        } else {
                            laps_kept += 1;
                            kept = Some((copy, h, left - 1));
                        }
                    }
                }
                sent += 1;
            }
            if let Some((copy, h, _)) = kept.take() {
                assert_eq!(h.as_slice(), &copy[..]);
                c.release(h);
            }
            while let Some(info) = c.peek().unwrap() {
                let h = c.take(&info);
                assert_eq!(
                    u32::from_le_bytes(c.payload(&h)[..4].try_into().unwrap()),
                    got
                );
                got += 1;
                c.release(h);
            }
            assert_eq!(got, sent);
            assert!(c.all_released() && !c.has_lent());
            assert!(laps_kept > 1000, "records were kept while others passed");
        }
    }

    #[test]
    fn a_ring_that_does_not_look_full_has_room_for_the_largest_record() {
        // From every starting offset: fill the ring with the largest records until the producer
        // refuses one, let the consumer scan (finding nothing it wants), and check what it
        // concludes: if the ring does not look full, the largest record must fit. (Before the
        // padding of a record that wraps was counted, a ring whose producer waited for room
        // could look as if it had some, and a receiver waiting behind it never drained it.)
        let s = seg(4096, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        let max = vec![7u8; c.max_payload];
        let mut full_seen = 0;
        for start in 0..64 {
            // Move the ring's position with small records, consumed at once.
            for _ in 0..start {
                assert!(p.try_push(meta(Kind::Whole, 1), &[1]));
                let info = c.peek().unwrap().unwrap();
                let h = c.take(&info);
                c.release(h);
            }
            loop {
                while p.try_push(meta(Kind::Whole, max.len() as u64), &max) {}
                assert!(c.scan(99, |_| false).unwrap().is_none());
                if c.looks_full() {
                    full_seen += 1;
                    break;
                }
                // The scan freed some room (a pad it consumed): the producer must use it.
                assert!(
                    p.try_push(meta(Kind::Whole, max.len() as u64), &max),
                    "start {start}: the ring does not look full, but the largest record does not fit"
                );
            }
            while let Some(info) = c.peek().unwrap() {
                let h = c.take(&info);
                c.release(h);
            }
            assert!(c.scan(99, |_| false).unwrap().is_none());
            assert!(!c.looks_full(), "an empty ring looks full");
        }
        assert_eq!(full_seen, 64);
    }

    #[test]
    fn full_ring_is_back_pressure_not_loss() {
        let s = seg(4096, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        let mut pushed = 0;
        while p.try_push(meta(Kind::Whole, 100), &[7u8; 100]) {
            pushed += 1;
        }
        assert!(pushed > 0 && pushed < 64, "pushed {pushed}");
        // Still full: no record lost, all readable.
        assert!(!p.try_push(meta(Kind::Whole, 100), &[7u8; 100]));
        let mut n = 0;
        while let Some(info) = c.peek().unwrap() {
            let h = c.take(&info);
            assert_eq!(c.payload(&h), &[7u8; 100][..]);
            c.release(h);
            n += 1;
        }
        assert_eq!(n, pushed);
        assert!(p.try_push(meta(Kind::Whole, 100), &[7u8; 100]));
    }

    #[test]
    fn out_of_order_release_frees_only_the_released_prefix() {
        let s = seg(4096, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        for i in 0..3u8 {
            assert!(p.try_push(meta(Kind::Whole, 200), &[i; 200]));
        }
        let i = c.peek().unwrap().unwrap();
        let a = c.take(&i);
        let i = c.peek().unwrap().unwrap();
        let b = c.take(&i);
        let i = c.peek().unwrap().unwrap();
        let d = c.take(&i);
        assert_eq!(c.payload(&b)[0], 1);
        c.release(d);
        c.release(b);
        assert!(!c.all_released());
        assert_eq!(c.payload(&a)[0], 0, "held record must stay intact");
        c.release(a);
        assert!(c.all_released());
    }

    #[test]
    fn scan_takes_past_unwanted_records_and_keeps_their_order() {
        let s = seg(8192, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        // Interleave records for ports 1 and 2.
        for i in 0..20u8 {
            let m = Meta {
                kind: Kind::Whole,
                tag: 0,
                context: 1 + (i % 2) as u32,
                total_len: 1,
            };
            assert!(p.try_push(m, &[i]));
        }
        // Port 2 reads all of its records first, while port 1's stay in place.
        let mut got = Vec::new();
        while let Some(info) = c.scan(2, |r| r.context == 2).unwrap() {
            let h = c.take(&info);
            got.push(c.payload(&h)[0]);
            c.release(h);
        }
        assert_eq!(got, (0..20).filter(|i| i % 2 == 1).collect::<Vec<u8>>());
        assert!(c.all_released());
        assert_eq!(
            c.peek().unwrap().unwrap().context,
            1,
            "port 1's records are still there"
        );
        let mut got = Vec::new();
        while let Some(info) = c.scan(1, |r| r.context == 1).unwrap() {
            let h = c.take(&info);
            got.push(c.payload(&h)[0]);
            c.release(h);
        }
        assert_eq!(got, (0..20).filter(|i| i % 2 == 0).collect::<Vec<u8>>());
        assert!(c.all_released());
        // The ring is whole again: it can be filled and drained across the wrap.
        for round in 0..500u32 {
            let m = Meta {
                kind: Kind::Whole,
                tag: 0,
                context: 1 + round % 3,
                total_len: 300,
            };
            while !p.try_push(m, &[round as u8; 300]) {
                let info = c.peek().unwrap().unwrap();
                let h = c.take(&info);
                c.release(h);
            }
        }
    }

    #[test]
    fn fragmented_messages_in_lockstep_with_two_scan_keys() {
        // The engine's recv_into pattern: find the first fragment with one question (key 1),
        // the following fragments with another (key 2), take and release each at once.
        let s = seg(1 << 20, 64 << 10);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        let max = p.max_payload();
        let mut data = vec![0u8; 1 << 20];
        let mut lens = Vec::new();
        for sz in (0..=17).map(|b| if b == 0 { 0 } else { 1usize << (b - 1) }) {
            let n = (2000 * 4096 / (sz + 4096)).clamp(10, 2000) + 200;
            lens.extend(std::iter::repeat_n(sz, n));
        }
        lens.extend([0usize, 8, 4096, 65536, 131072, 1 << 20].repeat(50));
        for (round, &len) in lens.iter().enumerate() {
            data[..len].fill(round as u8);
            let mut off = 0;
            let mut first = true;
            let mut got = 0usize;
            while first || off < len {
                let end = (off + max).min(len);
                let kind = if first && end == len && len <= max {
                    Kind::Whole
                } else if first {
                    Kind::First
                } else if end == len {
                    Kind::Last
                } else {
                    Kind::Middle
                };
                let m = Meta {
                    kind,
                    tag: 0,
                    context: 1,
                    total_len: len as u64,
                };
                assert!(
                    p.try_push(m, &data[off..end]),
                    "ring full in lockstep at round {round}"
                );
                first = false;
                off = end;
                let key = if kind == Kind::Whole || kind == Kind::First {
                    1
                } else {
                    2
                };
                let info = c.scan(key, |r| r.context == 1).unwrap().expect("published");
                assert_eq!(info.kind, kind);
                let h = c.take(&info);
                got += c.payload(&h).len();
                c.release(h);
                assert!(c.all_released());
            }
            assert_eq!(got, len);
        }
    }

    #[test]
    fn concurrent_producer_and_look_ahead_consumer_never_lose_the_tail() {
        // A real race: the producer thread publishes (and pads) while the consumer scans past
        // records of another port and takes them out of order. Sizes make padding frequent.
        let s = seg(16 << 10, 2048);
        let p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        const N: u32 = 200_000;
        let t = two_port_producer(p, N);
        let mut next = [0u32, 1u32]; // even numbers go to port 1, odd to port 2
        let mut turn = 0;
        while next[0] < N || next[1] < N {
            let port = 1 + turn % 2;
            turn += 1;
            if next[(port - 1) as usize] >= N {
                continue;
            }
            if let Some(info) = c.scan(port as u128, |r| r.context == port).unwrap() {
                let h = c.take(&info);
                let got = u32::from_le_bytes(c.payload(&h)[..4].try_into().unwrap());
                assert_eq!(got, next[(port - 1) as usize], "port {port} out of order");
                next[(port - 1) as usize] += 2;
                c.release(h);
            }
        }
        t.join().unwrap();
        assert!(c.all_released());
    }

    #[test]
    fn concurrent_producer_writes_around_a_parked_record() {
        // A real race: the producer thread publishes while the consumer keeps one lent record at
        // a time for a while (so it is parked, the producer learns of it with the tail, pads
        // over it, and reuses its slots once it is given back).
        let s = seg(16 << 10, 2048);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        const N: u32 = 200_000;
        let t = std::thread::spawn(move || {
            for i in 0..N {
                let len = [4usize, 500, 1000, 2000, 33, 1500, 64][(i % 7) as usize];
                let mut buf = [(i % 251) as u8; 2000];
                buf[..4].copy_from_slice(&i.to_le_bytes());
                while !p.try_push(meta(Kind::Whole, len as u64), &buf[..len]) {
                    std::hint::spin_loop();
                }
            }
        });
        let mut want = 0u32;
        let mut kept: Option<(SharedHeld, u32, u32)> = None;
        while want < N {
            let Some(info) = c.peek().unwrap() else {
                continue;
            };
            if kept.is_none() && want.is_multiple_of(97) {
                let h = c.take_shared(&info);
                kept = Some((h, want, want + 37 + want % 300));
            } else {
                let h = c.take(&info);
                let b = c.payload(&h);
                assert_eq!(u32::from_le_bytes(b[..4].try_into().unwrap()), want);
                assert!(b[4..].iter().all(|&x| x == (want % 251) as u8));
                c.release(h);
            }
            want += 1;
            if let Some((h, n, until)) = kept.take() {
                let b = h.as_slice();
                assert_eq!(u32::from_le_bytes(b[..4].try_into().unwrap()), n);
                assert!(
                    b[4..].iter().all(|&x| x == (n % 251) as u8),
                    "kept record {n} changed"
                );
                if want >= until {
                    c.release(h);
                } else {
                    kept = Some((h, n, until));
                }
            }
        }
        if let Some((h, _, _)) = kept.take() {
            c.release(h);
        }
        t.join().unwrap();
        assert!(c.all_released());
    }

    #[test]
    fn push_with_fills_in_place_and_pads_at_the_wrap() {
        let s = seg(4096, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        for round in 0..300u32 {
            let len = [0usize, 1, 40, 500, 960][round as usize % 5];
            let m = Meta {
                kind: Kind::Whole,
                tag: 0,
                context: 1,
                total_len: len as u64,
            };
            while !p.try_push_with(m, len, |b| {
                b.iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x = (i as u32 + round) as u8)
            }) {
                let info = c.peek().unwrap().unwrap();
                let h = c.take(&info);
                c.release(h);
            }
            let info = c.peek().unwrap().unwrap();
            let h = c.take(&info);
            let want: Vec<u8> = (0..len).map(|i| (i as u32 + round) as u8).collect();
            assert_eq!(c.payload(&h), &want[..], "round {round}");
            c.release(h);
        }
        // A full ring: fill is not called.
        let m = Meta {
            kind: Kind::Whole,
            tag: 0,
            context: 1,
            total_len: 900,
        };
        while p.try_push_with(m, 900, |_| {}) {}
        assert!(!p.try_push_with(m, 900, |_| panic!("fill called without room")));
    }

    #[test]
    fn pop_head_takes_only_the_freed_in_order_head() {
        let s = seg(4096, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        let mut out = [0u8; 300];
        assert!(matches!(
            c.pop_head(|_| true, &mut out).unwrap(),
            Head::Empty
        ));
        for i in 0..3u8 {
            assert!(p.try_push(meta(Kind::Whole, 200), &[i; 200]));
        }
        // Unwanted, or too long for the buffer: nothing changes.
        assert!(matches!(
            c.pop_head(|_| false, &mut out).unwrap(),
            Head::Other
        ));
        assert!(matches!(
            c.pop_head(|_| true, &mut out[..199]).unwrap(),
            Head::Other
        ));
        match c.pop_head(|r| r.context == 2, &mut out).unwrap() {
            Head::Taken(info) => assert_eq!((info.len, out[0], out[199]), (200, 0, 0)),
            h => panic!("expected the first record, got {h:?}"),
        }
        // A record taken by scan and held: the next one is not the freed head any more.
        let i = c.peek().unwrap().unwrap();
        let held = c.take(&i);
        assert!(matches!(
            c.pop_head(|_| true, &mut out).unwrap(),
            Head::Other
        ));
        assert_eq!(c.payload(&held)[0], 1, "the held record stays intact");
        c.release(held);
        match c.pop_head(|_| true, &mut out).unwrap() {
            Head::Taken(info) => assert_eq!((info.len, out[0]), (200, 2)),
            h => panic!("expected the third record, got {h:?}"),
        }
        assert!(c.all_released());
        assert!(matches!(
            c.pop_head(|_| true, &mut out).unwrap(),
            Head::Empty
        ));
        assert!(c.peek().unwrap().is_none());
        // Padding at the wrap and other kinds are left to scan; around many laps every record
        // comes out once, in order, whichever way it was taken.
        let sizes = [4usize, 100, 500, 900, 33];
        let (mut sent, mut got) = (0u32, 0u32);
        let mut buf = [0u8; 1024];
        while got < 3000 {
            let len = sizes[sent as usize % sizes.len()];
            let kind = if sent % 7 == 3 {
                Kind::Stream
            } else {
                Kind::Whole
            };
            let mut payload = vec![0u8; len];
            payload[..4].copy_from_slice(&sent.to_le_bytes());
            if p.try_push(meta(kind, len as u64), &payload) {
                sent += 1;
                continue;
            }
            while let Some(info) = c.peek().unwrap() {
                let n = match c.pop_head(|_| true, &mut buf).unwrap() {
                    Head::Taken(i) => {
                        assert_eq!(i.len, info.len);
                        u32::from_le_bytes(buf[..4].try_into().unwrap())
                    }
                    Head::Other => {
                        assert!(info.kind == Kind::Stream || info.pos != c.read);
                        let h = c.take(&info);
                        let n = u32::from_le_bytes(c.payload(&h)[..4].try_into().unwrap());
                        c.release(h);
                        n
                    }
                    Head::Empty => panic!("peek found a record that pop_head did not"),
                };
                assert_eq!(n, got, "out of order");
                got += 1;
            }
        }
        assert!(c.all_released());
    }

    #[test]
    fn copy_out_frees_in_order_and_keeps_held_records() {
        let s = seg(4096, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        let mut out = [0u8; 1024];
        for lap in 0..500u32 {
            for i in 0..3u32 {
                let n = lap * 3 + i;
                let mut payload = vec![(n % 251) as u8; [8usize, 300, 900][i as usize]];
                payload[..4].copy_from_slice(&n.to_le_bytes());
                assert!(p.try_push(meta(Kind::Whole, payload.len() as u64), &payload));
            }
            // The second record taken first and held: the first is then copied out past it.
            let first = c.peek().unwrap().unwrap();
            let second = c.scan(9, |r| r.pos != first.pos).unwrap().unwrap();
            let held = c.take(&second);
            c.copy_out(&first, &mut out);
            assert_eq!(u32::from_le_bytes(out[..4].try_into().unwrap()), lap * 3);
            assert_eq!(
                c.payload(&held)[4],
                ((lap * 3 + 1) % 251) as u8,
                "held record intact"
            );
            c.release(held);
            let third = c.peek().unwrap().unwrap();
            c.copy_out(&third, &mut out);
            assert_eq!(
                u32::from_le_bytes(out[..4].try_into().unwrap()),
                lap * 3 + 2
            );
            assert_eq!(out[899], ((lap * 3 + 2) % 251) as u8);
            assert!(c.all_released());
            assert!(
                c.peek().unwrap().is_none(),
                "phantom record after lap {lap}"
            );
        }
    }

    #[test]
    fn pop_head_beside_a_concurrent_producer_and_look_ahead_takes() {
        // As the look-ahead race above, with port 1's records popped at the head where they can
        // be and port 2's taken out of order by scan.
        let s = seg(16 << 10, 2048);
        let p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        const N: u32 = 200_000;
        let t = two_port_producer(p, N);
        let mut next = [0u32, 1u32];
        let mut out = [0u8; 2000];
        let mut turn = 0;
        while next[0] < N || next[1] < N {
            let port = 1 + turn % 2;
            turn += 1;
            let k = (port - 1) as usize;
            if next[k] >= N {
                continue;
            }
            let got = if port == 1 {
                match c.pop_head(|r| r.context == 1, &mut out).unwrap() {
                    Head::Taken(_) => Some(u32::from_le_bytes(out[..4].try_into().unwrap())),
                    Head::Empty => None,
                    Head::Other => c.scan(1, |r| r.context == 1).unwrap().map(|info| {
                        let h = c.take(&info);
                        let n = u32::from_le_bytes(c.payload(&h)[..4].try_into().unwrap());
                        c.release(h);
                        n
                    }),
                }
            } else {
                c.scan(2, |r| r.context == 2).unwrap().map(|info| {
                    let h = c.take(&info);
                    let n = u32::from_le_bytes(c.payload(&h)[..4].try_into().unwrap());
                    c.release(h);
                    n
                })
            };
            if let Some(n) = got {
                assert_eq!(n, next[k], "port {port} out of order");
                next[k] += 2;
            }
        }
        t.join().unwrap();
        assert!(c.all_released());
    }

    #[test]
    fn payload_bytes_never_look_like_a_stamp() {
        // Fill records with bytes that equal every plausible future stamp, wrap many times, and
        // check that the consumer never sees a record that was not published.
        let s = seg(4096, 1024);
        let mut p = s.producer(0, 0);
        let mut c = s.consumer(0, 0);
        for lap in 0..200u64 {
            let mut payload = vec![0u8; 960];
            for (i, chunk) in payload.chunks_mut(8).enumerate() {
                chunk.copy_from_slice(&(lap * 64 + i as u64 + 1).to_le_bytes());
            }
            assert!(p.try_push(meta(Kind::Whole, 960), &payload));
            let info = c.peek().unwrap().unwrap();
            let h = c.take(&info);
            c.release(h);
            assert!(
                c.peek().unwrap().is_none(),
                "phantom record after lap {lap}"
            );
        }
    }

    #[test]
    fn corrupt_header_is_an_error_not_a_crash() {
        let s = seg(4096, 1024);
        let mut c = s.consumer(0, 0);
        let mut p = s.producer(0, 0);
        assert!(p.try_push(meta(Kind::Whole, 4), &[1, 2, 3, 4]));
        // Scribble an impossible length into the header, as a broken peer might.
        let base = s.layout().ring_offset(0, 0) + std::mem::size_of::<RingCtrl>();
        let hdr = unsafe { &*(s.map.as_ptr().add(base) as *const RecordHeader) };
        unsafe { (ptr::addr_of!(hdr.len) as *mut u32).write(1 << 30) };
        assert!(c.peek().is_err());
    }
}
