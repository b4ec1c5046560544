//! The state of one peer: both directions of the link to one remote rank.
//!
//! Sending: every sequenced packet (a DATA fragment, an RTS or a CTS) gets the next sequence
//! number and a [`Sent`] record saying how to write it again; retransmissions reuse the sequence
//! number, so the receiver suppresses duplicates by sequence alone. Receiving: a bitmap from the
//! cumulative point `rcv_next` marks what has arrived; fragments are copied into their message's
//! buffer as they come, in any order; messages are handed out in the order they were sent.

use crate::cc::Cc;
use crate::counters::PeerCounters;
use crate::{unwrap32, Config, Credit, Event, Instant, Placement, Reliability};
use std::collections::VecDeque;
use volley_wire::{self as wire, AckRanges, Body, Malformed, Piggyback, Repr, Seq};

/// Credit charged for an eager message beyond its bytes, so that empty messages are not free.
pub(crate) const CHARGE: u64 = 64;

/// Messages a sender may have started beyond its oldest unacknowledged one. Every message
/// before a receiver's oldest undelivered one is acknowledged, so the receiver never needs to
/// track more than this many.
pub(crate) fn msg_window(cfg: &Config) -> u64 {
    2 * cfg.window as u64
}

/// Message buffers for reuse, so that a stream of messages allocates nothing once warm. Counts
/// the allocations it could not avoid.
///
/// Two lists: buffers of at most 1 MiB (up to 16 MiB and 8192 of them: a window of small
/// messages in flight is thousands of buffers, all given back at once when an acknowledgement
/// covers them), and larger ones, up to [`LARGE_KEEP`] bytes in all. The large list is what
/// keeps a stream of multi-megabyte copies from paying page faults on every message: freed to
/// the allocator, a few 2 MiB buffers at the top of the heap were trimmed and faulted in again
/// by the next window (a 2 MiB udp stream on the VM spent 9% of the sending core in page faults
/// and ran at 1.55 GB/s, against 2.85 for 6 MiB messages, one to a window, whose single buffer
/// stayed below the trim threshold).
///
/// The small list is kept by size class (capacities from 2^k to 2^(k+1) - 1 in class k; new
/// small buffers are allocated at a power of two), so that taking one costs the same however
/// many are kept: a scan of one list for a buffer big enough took a 64 KiB message past the
/// thousands of 1 KiB buffers an earlier stream had left, twice per message (the sender's copy
/// and the receiver's reassembly), and halved a 64 KiB stream that followed a 1 KiB one.
#[derive(Default)]
pub(crate) struct BufPool {
    /// Small buffers by size class, most recently given back last.
    bufs: Vec<Vec<Vec<u8>>>,
    /// How many small buffers are kept.
    nbufs: usize,
    /// Capacity of the small buffers kept, in bytes.
    bytes: usize,
    large: Vec<Vec<u8>>,
    /// Capacity of the large buffers kept, in bytes.
    pub(crate) large_bytes: usize,
    /// Buffers allocated because none in the pool was big enough.
    pub allocs: u64,
}

/// The largest buffer the small list keeps.
const SMALL_MAX: usize = 1 << 20;
/// Size classes of the small list: 2^0 to 2^20 bytes.
const CLASSES: usize = 21;
/// Classes above the one asked for where a kept buffer is still taken (up to 8x the room
/// needed) before a new one is allocated.
const CLASS_SLACK: usize = 3;

/// The class a new buffer of `cap` bytes is allocated in (its capacity: 2^class).
fn class_up(cap: usize) -> usize {
    cap.max(1).next_power_of_two().trailing_zeros() as usize
}

/// The class a buffer of capacity `cap` (> 0) is kept in: every buffer of class k holds 2^k.
fn class_down(cap: usize) -> usize {
    (usize::BITS - 1 - cap.leading_zeros()) as usize
}
/// Bytes of large (over 1 MiB) buffers a pool keeps for reuse: the engine's idle memory may
/// stay this much above what its messages need.
pub(crate) const LARGE_KEEP: usize = 32 << 20;

impl BufPool {
    /// A buffer of `len` bytes (contents unspecified).
    pub(crate) fn take(&mut self, len: usize) -> Vec<u8> {
        // A kept buffer keeps the length it had: only bytes beyond that are zeroed (none in a
        // stream of equal messages, where zeroing was a third of the receiver's copying). The
        // old bytes are this process's own and every one is overwritten before the message is
        // handed over (it is delivered only once each of its fragments has arrived).
        let mut v = self.take_kept(len);
        if v.len() >= len {
            v.truncate(len);
        } else if v.capacity() == 0 {
            // Nothing kept: zeroed pages come lazily from the kernel, cheaper than zeroing.
            v = vec![0u8; len];
        } else {
            v.resize(len, 0);
        }
        v
    }

    /// An empty buffer with room for `cap` bytes, from the pool when one is big enough.
    fn take_empty(&mut self, cap: usize) -> Vec<u8> {
        let mut v = self.take_kept(cap);
        v.clear();
        v.reserve_exact(cap);
        v
    }

    /// A buffer with room for `cap` bytes as it was given back (any length), or an empty one
    /// with no room at all when none was kept (counted: the caller allocates).
    fn take_kept(&mut self, cap: usize) -> Vec<u8> {
        if cap <= SMALL_MAX {
            let k = class_up(cap);
            // Most recently given back first: a stream of equal messages finds one at once.
            for j in k..(k + CLASS_SLACK + 1).min(CLASSES) {
                if let Some(v) = self.bufs.get_mut(j).and_then(|l| l.pop()) {
                    self.nbufs -= 1;
                    self.bytes -= v.capacity();
                    return v;
                }
            }
            self.allocs += 1;
            return Vec::with_capacity(1 << k);
        }
        // A few at most (LARGE_KEEP / 1 MiB): a scan is cheap.
        match self.large.iter().rposition(|b| b.capacity() >= cap) {
            Some(i) => {
                let v = self.large.swap_remove(i);
                self.large_bytes -= v.capacity();
                v
            }
            None => {
                self.allocs += 1;
                Vec::new()
            }
        }
    }

    /// A buffer holding a copy of `data`: the bytes are written once (a new buffer is not
    /// zeroed first, as `take` must do: the allocator's zeroing of an 8 MiB message cost as much
    /// as a third of copying it).
    pub(crate) fn take_copy(&mut self, data: &[u8]) -> Vec<u8> {
        let mut v = self.take_empty(data.len());
        v.extend_from_slice(data);
        v
    }

    /// Keeps `v` for reuse, within the bounds above; a large buffer that does not fit pushes
    /// out the smallest kept one if it is larger.
    pub(crate) fn give(&mut self, v: Vec<u8>) {
        let cap = v.capacity();
        if cap == 0 {
            return;
        }
        if cap <= SMALL_MAX {
            if self.bufs.is_empty() {
                self.bufs.resize_with(CLASSES, Vec::new);
            }
            let k = class_down(cap);
            // Full: a buffer of the most crowded other class makes room (what an earlier
            // stream of another size left behind gives way to the current one).
            while self.nbufs >= 8192 || self.bytes + cap > 16 << 20 {
                let crowded = (0..CLASSES)
                    .filter(|&j| j != k)
                    .max_by_key(|&j| self.bufs[j].len())
                    .filter(|&j| !self.bufs[j].is_empty());
                let Some(old) = crowded.and_then(|j| self.bufs[j].pop()) else {
                    return;
                };
                self.nbufs -= 1;
                self.bytes -= old.capacity();
            }
            self.nbufs += 1;
            self.bytes += cap;
            self.bufs[k].push(v);
            return;
        }
        if cap > LARGE_KEEP {
            return;
        }
        while self.large_bytes + cap > LARGE_KEEP {
            let Some((i, _)) = self
                .large
                .iter()
                .enumerate()
                .min_by_key(|(_, b)| b.capacity())
                .filter(|(_, b)| b.capacity() < cap)
            else {
                return;
            };
            self.large_bytes -= self.large.swap_remove(i).capacity();
        }
        self.large_bytes += cap;
        self.large.push(v);
    }
}

/// Writes the fragment `[off, off + len)` of `m` as a DATA packet: the payload is copied once,
/// straight from the message into the device's buffer.
#[allow(clippy::too_many_arguments)]
fn emit_fragment(
    buf: &mut [u8],
    token: u64,
    me: u32,
    dst: u32,
    seq: &Seq,
    m: &mut OutMsg,
    off: u64,
    len: usize,
    crc: bool,
) -> usize {
    let o = off as usize;
    let out = &mut buf[wire::DATA_HEADER_LEN..wire::DATA_HEADER_LEN + len];
    match &mut m.data {
        // Packed straight into the packet, as often as the fragment goes.
        Data::Packed { src, .. } => src.fill(o, out),
        d => out.copy_from_slice(d.range(o, len)),
    }
    wire::emit_data_header(
        buf,
        token,
        me,
        dst,
        seq,
        m.tag,
        m.context,
        m.len(),
        off,
        len,
        crc,
    )
}

#[derive(Clone, Copy, Debug)]
enum What {
    Frag {
        msg: u64,
        off: u64,
        len: u32,
    },
    /// Carries the envelope itself: a retransmission must not need the message, which may be
    /// complete already (a forged packet can get its data cleared and acknowledged while this
    /// very packet never was).
    Rts {
        msg: u64,
        tag: u32,
        context: u32,
        len: u64,
    },
    /// Clears the peer's message `msg`.
    Cts {
        msg: u64,
    },
}

#[derive(Debug)]
struct Sent {
    what: What,
    sent_at: Instant,
    /// Sent more than once: its acknowledgement says nothing about the round trip (Karn).
    retx: bool,
    acked: bool,
    /// In the retransmission queue.
    queued: bool,
    /// Queued by the timer (not by later acknowledgements), for the counters.
    by_timer: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OutState {
    Eager,
    /// Rendezvous: the RTS is still to be sent.
    NeedRts,
    WaitCts,
    Cleared,
}

/// The bytes of a message being sent.
pub(crate) enum Data {
    /// A buffer the engine holds (a copy it made, or one handed over to give back).
    Owned(Vec<u8>),
    /// Memory the sender lent: read as each fragment goes (the one pass over the message on
    /// this side is the one into the packet), the loan ending when this is dropped, once the
    /// peer acknowledged every fragment or was lost.
    Lent(volley_sys::lend::RawBuf),
    /// The bytes from `from` on of a message of `len` bytes, copied when its loan ended early
    /// (`Peer::release_lent`): every fragment before `from` was acknowledged, and only
    /// fragments from there are read again.
    Tail { from: usize, len: usize, v: Vec<u8> },
    /// A message of `len` bytes that `src` makes piece by piece (a non-contiguous datatype):
    /// each fragment is packed straight into its packet, again if it goes again, and the message
    /// is never whole in memory on this side.
    Packed { len: usize, src: Box<dyn Fill> },
}

/// Makes a message's bytes on demand (see [`crate::Engine::send_packed`]).
pub trait Fill: Send {
    /// Writes bytes `off .. off + out.len()` of the message into `out`. Pieces are asked for
    /// mostly in order, but a piece may be asked for again (a retransmission), after later ones.
    fn fill(&mut self, off: usize, out: &mut [u8]);
}

impl Data {
    #[inline]
    pub(crate) fn len(&self) -> usize {
        match self {
            Data::Owned(v) => v.len(),
            Data::Lent(b) => b.len(),
            Data::Tail { len, .. } | Data::Packed { len, .. } => *len,
        }
    }

    /// Bytes `[o, o + n)` of the message.
    #[inline]
    fn range(&self, o: usize, n: usize) -> &[u8] {
        match self {
            Data::Owned(v) => &v[o..o + n],
            Data::Lent(b) => &b.as_slice()[o..o + n],
            Data::Tail { from, v, .. } => &v[o - from..o - from + n],
            Data::Packed { .. } => unreachable!("packed bytes are filled, never read in place"),
        }
    }

    /// What goes back to the sender once acknowledged: its buffer, or (lent memory, whose loan
    /// this ends) an empty one.
    pub(crate) fn into_vec(self) -> Vec<u8> {
        match self {
            Data::Owned(v) | Data::Tail { v, .. } => v,
            Data::Lent(_) | Data::Packed { .. } => Vec::new(),
        }
    }
}

struct OutMsg {
    id: u64,
    tag: u32,
    context: u32,
    data: Data,
    state: OutState,
    /// Next byte to send for the first time.
    next_off: u64,
    started: bool,
    charged: bool,
    frags_total: u64,
    frags_acked: u64,
    /// Once acknowledged, the buffer goes back to the sender (see `Peer::returned`), not to
    /// the pool.
    give_back: bool,
    /// Counted in `Peer::parked_copies` while it waits for its CTS.
    parked_copy: bool,
}

impl OutMsg {
    fn len(&self) -> u64 {
        self.data.len() as u64
    }
    fn fully_sent(&self) -> bool {
        self.started && self.next_off == self.len()
    }
    fn done(&self) -> bool {
        self.frags_acked == self.frags_total
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum InState {
    /// Nothing of this message has arrived yet.
    Unseen,
    Eager,
    /// Rendezvous announced, no room yet.
    Announced,
    /// Room made, CTS queued or sent.
    Accepted,
    /// Accepted for nothing (see `Engine::discard`): its bytes are dropped as they come.
    Discarded,
}

struct InMsg {
    state: InState,
    tag: u32,
    context: u32,
    len: u64,
    buf: Vec<u8>,
    got: u64,
    any: bool,
    counted_wait: bool,
}

impl InMsg {
    fn unseen() -> InMsg {
        InMsg {
            state: InState::Unseen,
            tag: 0,
            context: 0,
            len: 0,
            buf: Vec::new(),
            got: 0,
            any: false,
            counted_wait: false,
        }
    }
    fn complete(&self) -> bool {
        matches!(self.state, InState::Eager | InState::Accepted) && self.any && self.got == self.len
    }
}

/// A best-effort message being gathered: fragments must come in order.
struct BeIn {
    id: u64,
    msg: InMsg,
}

pub(crate) struct Peer {
    pub rank: u32,
    pub lost: bool,
    /// Goodbyes still to send (see Engine::close).
    pub bye_left: u32,
    pub counters: PeerCounters,
    /// Bytes of reliable messages queued and not yet acknowledged.
    pub queued_bytes: u64,
    /// Of those, bytes of rendezvous messages waiting for a CTS the receiving application gives
    /// (`Config::receiver_places`): not held against the send budget.
    parked_bytes: u64,
    /// Of those, bytes of the messages the engine owns (copies made by the sender's send, not
    /// buffers to hand back): `Config::park_budget` bounds them.
    parked_copies: u64,

    // Sending.
    snd_una: u64,
    snd_nxt: u64,
    sent: VecDeque<Sent>,
    /// Entries of `sent` acknowledged (out of order) but not yet popped.
    sacked: u64,
    retx: VecDeque<u64>,
    /// Congestion control: how many of the packets `sent` holds may be in flight.
    cc: Cc,
    out: VecDeque<OutMsg>,
    out_base: u64,
    next_msg: u64,
    /// Buffers of acknowledged messages sent with `give_back`, by message id, until the sender
    /// takes them.
    returned: VecDeque<(u64, Vec<u8>)>,
    /// Index in `out` before which every message has been sent once (or waits for its CTS).
    cursor: usize,
    be_out: VecDeque<OutMsg>,
    be_next: u64,
    /// CTS to send, by the peer's message number.
    ctl: VecDeque<u64>,
    peer_credit: u64,
    eager_charged: u64,
    credit_stalled: bool,
    srtt: Option<u64>,
    rttvar: u64,
    rto: u64,
    rto_at: Option<Instant>,
    /// The window and timeout before the retransmission timer last fired, until the first
    /// acknowledgement of a packet it took for lost says whether that packet had been lost
    /// (see [`Peer::undo_timeout`]).
    rto_undo: Option<(Cc, u64)>,
    /// Send time and sequence of the latest-sent acknowledged packet (RACK).
    rack: (Instant, u64),
    /// When to run loss detection again for packets not yet late enough.
    rack_at: Option<Instant>,
    /// When to send a tail loss probe (RACK-TLP, RFC 8985 section 7): the last packet again,
    /// if no acknowledgement came for two round trips, so that a flight lost whole (a
    /// segmentation-offload run dropped as one) is found by RACK instead of by the timer.
    tlp_at: Option<Instant>,
    /// The probe sent and not yet answered (its sequence number): one at a time.
    tlp_seq: Option<u64>,
    /// The RACK packet was a retransmission.
    rack_retx: bool,
    /// Smallest round trip measured.
    min_rtt: u64,
    probe_at: Option<Instant>,
    last_sent: Instant,
    last_heard: Instant,

    // Receiving.
    rcv_next: u64,
    /// Whether `rcv_next + i` has arrived (index 0 is always false).
    rcv_map: VecDeque<bool>,
    rcv_gaps: bool,
    in_msgs: VecDeque<InMsg>,
    in_base: u64,
    rx_since_ack: u32,
    ack_at: Option<Instant>,
    ack_now: bool,
    eager_released: u64,
    credit_advertised: u64,
    rndv_outstanding: u64,
    /// Announced messages not yet accepted.
    announced: usize,
    /// Rendezvous messages announced to the application (`Config::receiver_places`), by
    /// number, until every byte is placed: behind `in_base`, out of the in-order window.
    placing: VecDeque<(u64, InMsg)>,
    be_in: Option<BeIn>,
    be_delivered: Option<u64>,
}

impl Peer {
    /// Whether the send queue takes another reliable message of `len` bytes: within the byte
    /// budget, and fewer messages than can be in flight at once (more would only wait here,
    /// each holding a buffer: a stream of small messages would allocate one per message).
    /// Rendezvous messages waiting for their receiver (parked) are outside the send budget, so
    /// that one the receiver takes late holds up none behind it; those that are copies the
    /// engine made (`copy`: not buffers it hands back) have a budget of their own, or a sender
    /// copying large messages faster than its receiver takes them would hold all of them.
    /// Short copies have a smaller budget ([`Config::eager_budget`]), so that what is copied is
    /// sent while it is still in the cache.
    pub(crate) fn has_room(&self, cfg: &Config, len: usize, copy: bool) -> bool {
        let len = len as u64;
        if copy
            && cfg.receiver_places
            && len > cfg.rndv_threshold as u64
            && self.parked_copies > 0
            && self.parked_copies + len > cfg.park_budget
        {
            return false;
        }
        let queued = self.queued_bytes - self.parked_bytes;
        let budget = if copy && len <= cfg.rndv_threshold as u64 {
            cfg.send_budget.min(cfg.eager_budget)
        } else {
            cfg.send_budget
        };
        queued == 0 || (queued + len <= budget && (self.out.len() as u64) < msg_window(cfg))
    }

    pub fn new(rank: u32, cfg: &Config, now: Instant) -> Peer {
        Peer {
            rank,
            lost: false,
            bye_left: 0,
            counters: PeerCounters::default(),
            queued_bytes: 0,
            parked_bytes: 0,
            parked_copies: 0,
            snd_una: 0,
            snd_nxt: 0,
            sent: VecDeque::new(),
            sacked: 0,
            retx: VecDeque::new(),
            cc: Cc::new(cfg.congestion_control),
            out: VecDeque::new(),
            out_base: 0,
            next_msg: 0,
            returned: VecDeque::new(),
            cursor: 0,
            be_out: VecDeque::new(),
            be_next: 0,
            ctl: VecDeque::new(),
            peer_credit: cfg.pool_bytes,
            eager_charged: 0,
            credit_stalled: false,
            srtt: None,
            rttvar: 0,
            rto: cfg.initial_rto,
            rto_at: None,
            rto_undo: None,
            rack: (0, 0),
            rack_at: None,
            tlp_at: None,
            tlp_seq: None,
            min_rtt: u64::MAX,
            rack_retx: false,
            probe_at: None,
            last_sent: now,
            last_heard: now,
            rcv_next: 0,
            rcv_map: VecDeque::new(),
            rcv_gaps: false,
            in_msgs: VecDeque::new(),
            in_base: 0,
            rx_since_ack: 0,
            ack_at: None,
            ack_now: false,
            eager_released: 0,
            credit_advertised: cfg.pool_bytes,
            rndv_outstanding: 0,
            announced: 0,
            placing: VecDeque::new(),
            be_in: None,
            be_delivered: None,
        }
    }

    /// One line of state, for a failing test to print.
    pub fn describe(&self) -> String {
        let out: Vec<String> = self
            .out
            .iter()
            .map(|m| {
                format!(
                    "{}:{:?}:{}/{}:{}/{}",
                    m.id,
                    m.state,
                    m.next_off,
                    m.len(),
                    m.frags_acked,
                    m.frags_total
                )
            })
            .collect();
        let inm: Vec<String> = self
            .in_msgs
            .iter()
            .map(|m| format!("{:?}:{}/{}", m.state, m.got, m.len))
            .collect();
        let sent: Vec<String> = self
            .sent
            .iter()
            .map(|p| {
                format!(
                    "{:?}{}{}",
                    p.what,
                    if p.acked { "+" } else { "" },
                    if p.queued { "q" } else { "" }
                )
            })
            .collect();
        format!(
            "peer {} lost={} sent=[{}] snd {}..{} cwnd {:.1} retx={:?} cursor={} out=[{}] ctl={:?} credit {}/{} stalled={} rto={} rto_at={:?} | rcv_next={} gaps={} in_base={} in=[{}] released={} rndv_out={} ack_now={} ack_at={:?}",
            self.rank, self.lost, sent.join(" "), self.snd_una, self.snd_nxt, self.cc.window(), self.retx, self.cursor, out.join(" "), self.ctl,
            self.eager_charged, self.peer_credit, self.credit_stalled, self.rto, self.rto_at,
            self.rcv_next, self.rcv_gaps, self.in_base, inm.join(" "), self.eager_released, self.rndv_outstanding, self.ack_now, self.ack_at
        )
    }

    pub fn idle(&self) -> bool {
        self.sent.is_empty() && self.out.is_empty() && self.be_out.is_empty() && self.ctl.is_empty()
    }

    fn credit_limit(&self, cfg: &Config) -> u64 {
        self.eager_released + cfg.pool_bytes
    }

    // The envelope, the bytes and how they go are one message's fields, not a bundle to invent.
    #[allow(clippy::too_many_arguments)]
    pub fn queue(
        &mut self,
        cfg: &Config,
        _now: Instant,
        tag: u32,
        context: u32,
        data: Data,
        how: Reliability,
        give_back: bool,
    ) -> u64 {
        let frag = cfg.fragment() as u64;
        let len = data.len() as u64;
        let frags_total = len.div_ceil(frag).max(1);
        let mut m = OutMsg {
            id: 0,
            tag,
            context,
            data,
            state: OutState::Eager,
            next_off: 0,
            started: false,
            charged: false,
            frags_total,
            frags_acked: 0,
            give_back,
            parked_copy: false,
        };
        self.counters.messages_sent += 1;
        let id;
        match how {
            Reliability::BestEffort => {
                m.id = self.be_next;
                id = m.id;
                self.be_next += 1;
                self.be_out.push_back(m);
            }
            Reliability::Reliable => {
                m.id = self.next_msg;
                id = m.id;
                if self.out.is_empty() {
                    self.out_base = self.next_msg;
                }
                self.next_msg += 1;
                if len > cfg.rndv_threshold as u64 {
                    m.state = OutState::NeedRts;
                    self.counters.rendezvous_sent += 1;
                    if cfg.receiver_places {
                        self.parked_bytes += len;
                        if !give_back {
                            self.parked_copies += len;
                            m.parked_copy = true;
                        }
                    }
                }
                self.queued_bytes += len;
                self.out.push_back(m);
            }
        }
        id
    }

    /// The buffer of reliable message `id`, sent with `give_back`, once the peer acknowledged
    /// it.
    pub fn take_returned(&mut self, id: u64) -> Option<Vec<u8>> {
        let i = self.returned.iter().position(|(x, _)| *x == id)?;
        self.returned.swap_remove_back(i).map(|(_, d)| d)
    }

    /// Whether message `id`'s buffer is back (see `take_returned`).
    pub fn is_returned(&self, id: u64) -> bool {
        self.returned.iter().any(|(x, _)| *x == id)
    }

    /// Ends the loan of lent message `id` early, once its CTS came and at most a window of it is
    /// still to go for the first time: the bytes from its lowest unacknowledged fragment on
    /// (what is in flight and the last window, about two windows) are copied into a buffer of
    /// the engine's, which every later fragment and retransmission is read from, and nobody
    /// takes the message back (its buffer goes to the pool once acknowledged). A blocking send
    /// thus returns with its tail still to go, and the next message's RTS and CTS cross while
    /// it goes: waiting for the whole acknowledgement left the pipe empty after every message,
    /// and a lost last packet nothing behind it to reveal it (under 1% loss an 8 MiB stream ran
    /// at 0.4 of the copying send's rate). Returns whether the loan ended.
    pub fn release_lent(&mut self, cfg: &Config, id: u64, pool: &mut BufPool) -> bool {
        let Some(i) = self.out.iter().position(|m| m.id == id) else {
            return false;
        };
        let m = &self.out[i];
        // Released while a window is still to go, so that the next message's RTS and CTS cross
        // while this one's last window is sent: the copy is about two windows.
        let ahead = (self.cc.window().max(2.0) as u64) * cfg.fragment() as u64;
        if !matches!(m.data, Data::Lent(_))
            || m.state != OutState::Cleared
            || !m.started
            || m.len() - m.next_off > ahead
        {
            return false;
        }
        let msg = self.out_base + i as u64;
        let len = m.data.len();
        let from = self
            .sent
            .iter()
            .filter(|p| !p.acked)
            .filter_map(|p| match p.what {
                What::Frag { msg: k, off, .. } if k == msg => Some(off as usize),
                _ => None,
            })
            .min()
            .unwrap_or(len);
        let mut v = pool.take(len - from);
        v.copy_from_slice(m.data.range(from, len - from));
        let m = &mut self.out[i];
        m.data = Data::Tail { from, len, v };
        m.give_back = false;
        true
    }

    /// Nobody will take message `id`'s buffer back: it goes to the pool when acknowledged.
    pub fn abandon(&mut self, id: u64, pool: &mut BufPool) {
        if let Some(m) = self.out.iter_mut().find(|m| m.id == id) {
            m.give_back = false;
        } else if let Some(d) = self.take_returned(id) {
            pool.give(d);
        }
    }

    // ---------------------------------------------------------------- receiving

    pub fn handle(
        &mut self,
        cfg: &Config,
        now: Instant,
        body: &Body<'_>,
        events: &mut VecDeque<Event>,
        pool: &mut BufPool,
        place: &mut dyn FnMut(Placement<'_>),
    ) -> Result<(), Malformed> {
        self.last_heard = now;
        self.counters.packets_received += 1;
        let seq = match body {
            Body::Ack {
                cum,
                credit,
                want_ack,
                bye,
                ranges,
            } => {
                if *bye {
                    // The goodbye says what the peer received last: what its lost
                    // acknowledgements did not say completes now (the last message to a peer
                    // that received it and left is sent, not lost), then the peer is gone.
                    // Malformed or not, the goodbye stands.
                    let _ = self.on_ack(cfg, now, *cum, *credit, Some(ranges), pool);
                    self.lost = true;
                    self.clear();
                    events.push_back(Event::PeerFinished { peer: self.rank });
                    return Ok(());
                }
                if *want_ack {
                    self.ack_now = true;
                }
                return self.on_ack(cfg, now, *cum, *credit, Some(ranges), pool);
            }
            Body::Data { seq, .. } | Body::Rts { seq, .. } | Body::Cts { seq } => *seq,
        };
        if let Some(pb) = seq.piggyback {
            self.on_ack(cfg, now, pb.ack, pb.credit, None, pool)?;
        }
        if seq.best_effort {
            return self.on_best_effort(cfg, body, events, pool);
        }
        let s = unwrap32(self.rcv_next, seq.seq);
        if s < self.rcv_next {
            self.counters.duplicates += 1;
            // Our acknowledgement may have been lost: say again what we have.
            self.ack_now = true;
            return Ok(());
        }
        let i = (s - self.rcv_next) as usize;
        if i >= cfg.window as usize {
            self.counters.out_of_window += 1;
            return Ok(());
        }
        if self.rcv_map.get(i).copied().unwrap_or(false) {
            self.counters.duplicates += 1;
            self.ack_now = true;
            return Ok(());
        }
        match *body {
            Body::Data {
                seq,
                tag,
                context,
                msg_len,
                offset,
                payload,
            } => {
                let m = unwrap32(self.in_base, seq.msg);
                if m < self.in_base {
                    self.on_placed_data(m, tag, context, msg_len, offset, payload, events, place)?
                } else {
                    self.on_data(cfg, seq.msg, tag, context, msg_len, offset, payload, pool)?
                }
            }
            Body::Rts {
                seq,
                tag,
                context,
                msg_len,
            } => self.on_rts(cfg, seq.msg, tag, context, msg_len, pool)?,
            Body::Cts { seq } => self.on_cts(cfg, seq.msg)?,
            Body::Ack { .. } => unreachable!(),
        }
        if self.rcv_map.len() <= i {
            self.rcv_map.resize(i + 1, false);
        }
        self.rcv_map[i] = true;
        while self.rcv_map.front() == Some(&true) {
            self.rcv_map.pop_front();
            self.rcv_next += 1;
        }
        self.rcv_gaps = !self.rcv_map.is_empty();
        if i != 0 || self.rcv_gaps {
            // Out of order: tell the sender at once what is missing.
            self.ack_now = true;
        }
        self.rx_since_ack += 1;
        if self.rx_since_ack >= cfg.ack_every {
            self.ack_now = true;
        } else if self.ack_at.is_none() {
            self.ack_at = Some(now + cfg.ack_delay);
        }
        self.deliver(cfg, events);
        Ok(())
    }

    fn in_slot(&mut self, cfg: &Config, msg: u32) -> Result<usize, Malformed> {
        let m = unwrap32(self.in_base, msg);
        if m < self.in_base || m - self.in_base >= msg_window(cfg) {
            return Err(Malformed::Field);
        }
        let idx = (m - self.in_base) as usize;
        if self.in_msgs.len() <= idx {
            self.in_msgs.resize_with(idx + 1, InMsg::unseen);
        }
        Ok(idx)
    }

    #[allow(clippy::too_many_arguments)]
    fn on_data(
        &mut self,
        cfg: &Config,
        msg: u32,
        tag: u32,
        context: u32,
        msg_len: u64,
        offset: u64,
        payload: &[u8],
        pool: &mut BufPool,
    ) -> Result<(), Malformed> {
        let idx = self.in_slot(cfg, msg)?;
        let m = &mut self.in_msgs[idx];
        match m.state {
            InState::Unseen => {
                if msg_len.saturating_add(CHARGE) > cfg.pool_bytes {
                    return Err(Malformed::Field);
                }
                m.state = InState::Eager;
                m.len = msg_len;
                m.tag = tag;
                m.context = context;
                m.buf = pool.take(msg_len as usize);
                let off = offset as usize;
                m.buf[off..off + payload.len()].copy_from_slice(payload);
                m.got += payload.len() as u64;
                m.any = true;
                // An earlier unknown is now known: later announcements may be accepted.
                self.accept_rendezvous(cfg, pool);
                return Ok(());
            }
            InState::Eager | InState::Accepted => {
                if m.len != msg_len || m.tag != tag || m.context != context {
                    return Err(Malformed::Field);
                }
            }
            InState::Announced | InState::Discarded => return Err(Malformed::Field),
        }
        // The wire layer checked offset + len <= msg_len.
        let off = offset as usize;
        m.buf[off..off + payload.len()].copy_from_slice(payload);
        m.got += payload.len() as u64;
        m.any = true;
        Ok(())
    }

    fn on_rts(
        &mut self,
        cfg: &Config,
        msg: u32,
        tag: u32,
        context: u32,
        msg_len: u64,
        pool: &mut BufPool,
    ) -> Result<(), Malformed> {
        if msg_len > cfg.max_message {
            return Err(Malformed::Field);
        }
        if unwrap32(self.in_base, msg) < self.in_base {
            // A request to send for a message delivered already, under a sequence number not
            // seen before: only a forged packet (taken in this one's place) makes a sender
            // send it. Take the number, so the stream goes on; the content is stale.
            self.counters.stale_requests += 1;
            return Ok(());
        }
        let idx = self.in_slot(cfg, msg)?;
        let m = &mut self.in_msgs[idx];
        if m.state != InState::Unseen {
            if m.state != InState::Eager && (m.len, m.tag, m.context) == (msg_len, tag, context) {
                // The same announcement again under a new number (as above).
                self.counters.stale_requests += 1;
                return Ok(());
            }
            return Err(Malformed::Field);
        }
        m.state = InState::Announced;
        self.announced += 1;
        m.len = msg_len;
        m.tag = tag;
        m.context = context;
        self.accept_rendezvous(cfg, pool);
        Ok(())
    }

    /// Makes room for announced messages while the budget allows, strictly in message order:
    /// a later message accepted first would hold budget that it cannot give back before the
    /// earlier one is delivered, and the two would wait for each other.
    fn accept_rendezvous(&mut self, cfg: &Config, pool: &mut BufPool) {
        if self.announced == 0 || cfg.receiver_places {
            return;
        }
        for idx in 0..self.in_msgs.len() {
            let m = &mut self.in_msgs[idx];
            match m.state {
                // Not known yet: it may be a rendezvous too.
                InState::Unseen => return,
                InState::Eager | InState::Accepted | InState::Discarded => continue,
                InState::Announced => {}
            }
            if self.rndv_outstanding > 0 && self.rndv_outstanding + m.len > cfg.rndv_budget {
                if !m.counted_wait {
                    m.counted_wait = true;
                    self.counters.rendezvous_waits += 1;
                }
                return;
            }
            m.buf = pool.take(m.len as usize);
            m.state = InState::Accepted;
            self.announced -= 1;
            self.rndv_outstanding += m.len;
            self.ctl.push_back(self.in_base + idx as u64);
        }
    }

    fn on_cts(&mut self, cfg: &Config, msg: u32) -> Result<(), Malformed> {
        let m = unwrap32(self.out_base, msg);
        if m < self.out_base {
            return Err(Malformed::Field);
        }
        let Some(o) = self.out.get_mut((m - self.out_base) as usize) else {
            return Err(Malformed::Field);
        };
        if o.state != OutState::WaitCts {
            return Err(Malformed::Field);
        }
        o.state = OutState::Cleared;
        if cfg.receiver_places {
            self.parked_bytes -= o.len();
            if o.parked_copy {
                self.parked_copies -= o.len();
                o.parked_copy = false;
            }
        }
        Ok(())
    }

    fn on_best_effort(
        &mut self,
        cfg: &Config,
        body: &Body<'_>,
        events: &mut VecDeque<Event>,
        pool: &mut BufPool,
    ) -> Result<(), Malformed> {
        let Body::Data {
            seq,
            tag,
            context,
            msg_len,
            offset,
            payload,
        } = *body
        else {
            return Err(Malformed::Field);
        };
        if msg_len.saturating_add(CHARGE) > cfg.pool_bytes {
            return Err(Malformed::Field);
        }
        let near = self.be_delivered.map_or(0, |d| d + 1);
        let id = unwrap32(near, seq.msg);
        if self.be_delivered.is_some_and(|d| id <= d) {
            self.counters.duplicates += 1;
            return Ok(());
        }
        if let Some(b) = &self.be_in {
            if b.id != id {
                if b.id > id {
                    // A straggler of a message already given up.
                    self.counters.duplicates += 1;
                    return Ok(());
                }
                let old = self.be_in.take().map(|b| b.msg.buf);
                pool.give(old.unwrap_or_default());
                self.counters.best_effort_lost += 1;
            }
        }
        if self.be_in.is_none() {
            if offset != 0 {
                // Its first fragment was lost.
                self.counters.best_effort_lost += 1;
                self.be_delivered = Some(id);
                return Ok(());
            }
            let mut m = InMsg::unseen();
            m.state = InState::Eager;
            m.len = msg_len;
            m.tag = tag;
            m.context = context;
            m.buf = pool.take(msg_len as usize);
            self.be_in = Some(BeIn { id, msg: m });
        }
        let b = self.be_in.as_mut().expect("just set");
        if b.msg.len != msg_len {
            return Err(Malformed::Field);
        }
        if offset < b.msg.got {
            self.counters.duplicates += 1;
            return Ok(());
        }
        if offset > b.msg.got {
            // A fragment in between was lost (or overtaken): the message is gone.
            let old = self.be_in.take().map(|b| b.msg.buf);
            pool.give(old.unwrap_or_default());
            self.counters.best_effort_lost += 1;
            self.be_delivered = Some(id);
            return Ok(());
        }
        let off = offset as usize;
        b.msg.buf[off..off + payload.len()].copy_from_slice(payload);
        b.msg.got += payload.len() as u64;
        b.msg.any = true;
        if b.msg.complete() {
            let b = self.be_in.take().expect("present");
            self.be_delivered = Some(b.id);
            self.counters.messages_delivered += 1;
            events.push_back(Event::Message {
                peer: self.rank,
                tag: b.msg.tag,
                context: b.msg.context,
                data: b.msg.buf,
                how: Reliability::BestEffort,
                credit: Credit {
                    peer: self.rank,
                    eager: 0,
                    rndv: 0,
                },
            });
        }
        Ok(())
    }

    fn deliver(&mut self, cfg: &Config, events: &mut VecDeque<Event>) {
        while let Some(front) = self.in_msgs.front() {
            if cfg.receiver_places && front.state == InState::Announced {
                // Its turn among the sender's messages: the application decides where it goes.
                let m = self.in_msgs.pop_front().expect("front");
                let msg = self.in_base;
                self.in_base += 1;
                self.announced -= 1;
                events.push_back(Event::Announced {
                    peer: self.rank,
                    msg,
                    tag: m.tag,
                    context: m.context,
                    len: m.len,
                });
                self.placing.push_back((msg, m));
                continue;
            }
            if !front.complete() {
                break;
            }
            let m = self.in_msgs.pop_front().expect("front");
            self.in_base += 1;
            self.counters.messages_delivered += 1;
            let rndv = m.state == InState::Accepted;
            events.push_back(Event::Message {
                peer: self.rank,
                tag: m.tag,
                context: m.context,
                credit: Credit {
                    peer: self.rank,
                    eager: if rndv { 0 } else { m.len + CHARGE },
                    rndv: if rndv { m.len } else { 0 },
                },
                data: m.buf,
                how: Reliability::Reliable,
            });
        }
    }

    /// The application made room for announced message `msg`: send the CTS.
    pub fn accept(&mut self, msg: u64) -> bool {
        let Some((_, m)) = self.placing.iter_mut().find(|(id, _)| *id == msg) else {
            return false;
        };
        if m.state != InState::Announced {
            return false;
        }
        m.state = InState::Accepted;
        self.ctl.push_back(msg);
        true
    }

    /// The application gave up message `msg`: accept it if it was only announced (the sender
    /// must be able to complete), and drop its bytes.
    pub fn discard(&mut self, msg: u64) {
        let Some(i) = self.placing.iter().position(|(id, _)| *id == msg) else {
            return;
        };
        if self.placing[i].1.state == InState::Announced {
            self.ctl.push_back(msg);
        }
        self.placing[i].1.state = InState::Discarded;
    }

    /// A fragment of a message announced to the application: through the sink, unless it was
    /// discarded. The last byte placed ends the message.
    #[allow(clippy::too_many_arguments)]
    fn on_placed_data(
        &mut self,
        msg: u64,
        tag: u32,
        context: u32,
        msg_len: u64,
        offset: u64,
        payload: &[u8],
        events: &mut VecDeque<Event>,
        place: &mut dyn FnMut(Placement<'_>),
    ) -> Result<(), Malformed> {
        let Some(i) = self.placing.iter().position(|(id, _)| *id == msg) else {
            // Behind the window and not announced: no such message is being received.
            return Err(Malformed::Field);
        };
        let m = &mut self.placing[i].1;
        if m.len != msg_len || m.tag != tag || m.context != context {
            return Err(Malformed::Field);
        }
        match m.state {
            InState::Accepted => place(Placement {
                peer: self.rank,
                msg,
                offset,
                bytes: payload,
            }),
            InState::Discarded => {}
            // Data before its CTS: the sender is broken or forged.
            _ => return Err(Malformed::Field),
        }
        m.got += payload.len() as u64;
        if m.got == m.len {
            let (_, m) = self.placing.remove(i).expect("found");
            if m.state == InState::Accepted {
                self.counters.messages_delivered += 1;
                events.push_back(Event::Placed {
                    peer: self.rank,
                    msg,
                });
            }
        }
        Ok(())
    }

    pub fn release(&mut self, cfg: &Config, c: Credit, pool: &mut BufPool) {
        self.eager_released += c.eager;
        self.rndv_outstanding = self.rndv_outstanding.saturating_sub(c.rndv);
        if c.rndv > 0 {
            self.accept_rendezvous(cfg, pool);
        }
        if self.credit_limit(cfg) - self.credit_advertised >= cfg.pool_bytes / 4 {
            self.ack_now = true;
        }
    }

    // ---------------------------------------------------------------- acknowledgements

    fn on_ack(
        &mut self,
        cfg: &Config,
        now: Instant,
        cum32: u32,
        credit: u64,
        ranges: Option<&AckRanges<'_>>,
        pool: &mut BufPool,
    ) -> Result<(), Malformed> {
        if credit > self.peer_credit {
            self.peer_credit = credit;
            if self.credit_stalled {
                self.credit_stalled = false;
                self.probe_at = None;
            }
        }
        let cum = unwrap32(self.snd_una, cum32);
        if cum > self.snd_nxt {
            return Err(Malformed::Field);
        }
        let pipe = self.pipe();
        let acked_before = self.sacked;
        let mut progress = false;
        let mut sample: Option<(Instant, u64)> = None;
        let mut spurious: Option<bool> = None;
        for s in self.snd_una..cum {
            progress |= self.mark(now, s, &mut sample, &mut spurious);
        }
        if let Some(r) = ranges {
            for k in 0..r.len() {
                let (s32, e32) = r.get(k);
                let s = unwrap32(self.snd_una, s32).max(self.snd_una);
                let e = unwrap32(self.snd_una, e32).min(self.snd_nxt);
                for q in s..e {
                    progress |= self.mark(now, q, &mut sample, &mut spurious);
                }
            }
        }
        match spurious {
            Some(true) => self.undo_timeout(),
            Some(false) => self.rto_undo = None,
            None => {}
        }
        self.cc.on_acked(self.sacked - acked_before, pipe);
        while self.sent.front().is_some_and(|p| p.acked) {
            self.sent.pop_front();
            self.snd_una += 1;
            self.sacked -= 1;
        }
        if let Some((_, r)) = sample {
            self.rtt_sample(cfg, r);
        }
        if progress {
            self.detect_losses(now);
            self.complete_messages(pool);
            self.rto_at = (!self.sent.is_empty()).then(|| now + self.rto);
            self.tlp_seq = None;
            self.arm_tlp(cfg, now);
        }
        Ok(())
    }

    /// Marks `seq` acknowledged; returns whether it was news. A packet the retransmission
    /// timer took for lost, acknowledged while an undo is possible, adds its evidence to
    /// `spurious`: true if this acknowledgement is for its first copy.
    fn mark(
        &mut self,
        now: Instant,
        seq: u64,
        sample: &mut Option<(Instant, u64)>,
        spurious: &mut Option<bool>,
    ) -> bool {
        let Some(p) = self.sent.get_mut((seq - self.snd_una) as usize) else {
            return false;
        };
        if p.acked {
            return false;
        }
        p.acked = true;
        self.sacked += 1;
        if p.by_timer && self.rto_undo.is_some() {
            // Its copy has not gone again yet, or went less than the least round trip ago:
            // what the peer acknowledges is the first copy, so it was never lost (Eifel
            // detection, RFC 3522, with RACK's round-trip test in place of timestamps).
            let first = p.queued
                || (p.retx && self.srtt.is_some() && now.saturating_sub(p.sent_at) < self.min_rtt);
            *spurious = Some(spurious.unwrap_or(false) || first);
        }
        if !p.retx && sample.is_none_or(|(at, _)| p.sent_at > at) {
            *sample = Some((p.sent_at, now.saturating_sub(p.sent_at)));
        }
        // The acknowledgement of a retransmitted packet may be for its first copy: its new send
        // time counts only when the acknowledgement came at least one minimum round trip
        // after it (RACK, RFC 8985 section 6.2). Packets of one burst leave at the same
        // instant: the sequence breaks the tie.
        if (!p.retx || now.saturating_sub(p.sent_at) >= self.min_rtt)
            && (p.sent_at, seq) > self.rack
        {
            self.rack = (p.sent_at, seq);
            self.rack_retx = p.retx;
        }
        if let What::Frag { msg, .. } = p.what {
            if let Some(m) = msg
                .checked_sub(self.out_base)
                .and_then(|i| self.out.get_mut(i as usize))
            {
                m.frags_acked += 1;
            }
        }
        true
    }

    /// Arms the tail loss probe two smoothed round trips from `now` (plus the peer's
    /// acknowledgement delay when one packet is in flight), if congestion control is on,
    /// something is in flight and no probe is out.
    fn arm_tlp(&mut self, cfg: &Config, now: Instant) {
        self.tlp_at = None;
        if !cfg.congestion_control || self.tlp_seq.is_some() || self.pipe() == 0 {
            return;
        }
        let Some(srtt) = self.srtt else {
            return;
        };
        let extra = if self.pipe() == 1 { cfg.ack_delay } else { 0 };
        self.tlp_at = Some(now + 2 * srtt + extra);
    }

    fn rtt_sample(&mut self, cfg: &Config, r: u64) {
        self.min_rtt = self.min_rtt.min(r);
        match self.srtt {
            None => {
                self.srtt = Some(r);
                self.rttvar = r / 2;
            }
            Some(s) => {
                self.rttvar = (3 * self.rttvar + s.abs_diff(r)) / 4;
                self.srtt = Some((7 * s + r) / 8);
            }
        }
        let s = self.srtt.unwrap_or(r);
        self.rto = (s + 4 * self.rttvar).clamp(cfg.min_rto, cfg.max_rto);
    }

    /// RACK: a packet sent before one that has been acknowledged, and unacknowledged a quarter
    /// round trip after that one would have been, is lost.
    fn detect_losses(&mut self, now: Instant) {
        let srtt = self.srtt.unwrap_or(self.rto);
        let reo = srtt / 4;
        self.rack_at = None;
        // Only packets numbered below the RACK packet can have left before it (a packet
        // numbered above it first left after it), so the scan ends there: without loss it
        // ends at once, however many packets are in flight.
        // (A retransmitted RACK packet left after packets numbered above it: scan them all.)
        let end = if self.rack_retx {
            self.sent.len()
        } else {
            self.rack.1.saturating_sub(self.snd_una) as usize
        };
        for (k, p) in self.sent.iter_mut().enumerate().take(end) {
            if (p.sent_at, self.snd_una + k as u64) >= self.rack {
                continue;
            }
            if p.acked || p.queued {
                continue;
            }
            let due = p.sent_at + srtt + reo;
            if now >= due {
                p.queued = true;
                p.by_timer = false;
                let seq = self.snd_una + k as u64;
                self.retx.push_back(seq);
                if self.cc.on_loss(seq, self.snd_nxt) {
                    self.counters.cwnd_reductions += 1;
                }
            } else {
                // Not yet: look again when it would be late (RACK's reordering timer).
                self.rack_at = Some(self.rack_at.map_or(due, |t| t.min(due)));
            }
        }
    }

    fn complete_messages(&mut self, pool: &mut BufPool) {
        while self.out.front().is_some_and(|m| m.done()) {
            let m = self.out.pop_front().expect("front");
            self.out_base += 1;
            self.cursor = self.cursor.saturating_sub(1);
            self.queued_bytes -= m.len();
            if m.give_back {
                self.returned.push_back((m.id, m.data.into_vec()));
            } else {
                pool.give(m.data.into_vec());
            }
        }
    }

    // ---------------------------------------------------------------- timers

    pub fn next_timeout(&self, cfg: &Config) -> Option<Instant> {
        if self.lost {
            return None;
        }
        let mut t = (self.last_heard + cfg.peer_timeout).min(self.last_sent + cfg.heartbeat);
        for x in [
            self.rto_at,
            self.ack_at,
            self.probe_at,
            self.rack_at,
            self.tlp_at,
        ]
        .into_iter()
        .flatten()
        {
            t = t.min(x);
        }
        Some(t)
    }

    pub fn on_timeout(&mut self, cfg: &Config, now: Instant, events: &mut VecDeque<Event>) {
        if self.lost {
            return;
        }
        if now >= self.last_heard + cfg.peer_timeout {
            self.lose(events);
            return;
        }
        if self.rack_at.is_some_and(|t| now >= t) {
            self.detect_losses(now);
        }
        if self.tlp_at.is_some_and(|t| now >= t) {
            self.tlp_at = None;
            // The last packet sent and not acknowledged goes again: its acknowledgement (or
            // the ranges it carries) lets RACK find what else was lost. Not a loss signal by
            // itself: the window stays.
            if let Some(k) = self.sent.iter().rposition(|p| !p.acked && !p.queued) {
                let seq = self.snd_una + k as u64;
                self.sent[k].queued = true;
                self.sent[k].by_timer = false;
                self.retx.push_front(seq);
                self.tlp_seq = Some(seq);
                self.counters.tail_probes += 1;
            }
        }
        if self.rto_at.is_some_and(|t| now >= t) {
            // The oldest packet goes again first: its acknowledgement, when it comes, carries
            // the ranges that let RACK find the others. Without congestion control only it
            // goes (sending everything outstanding again would flood a receiver that is merely
            // slow). With it, as TCP does after a timeout (RFC 6675, 5.1), every packet as old
            // is taken for lost too and goes again as the window, restarting from two packets,
            // allows: otherwise they would count as in flight and hold the window shut, and
            // each would wait for a timer of its own, each twice as long as the last.
            let rto = self.rto;
            // The first expiry of a series keeps what an undo would put back.
            if self.rto_undo.is_none() && self.cc.is_on() {
                self.rto_undo = Some((self.cc, rto));
            }
            let all = self.cc.on_timeout(self.snd_nxt);
            if all {
                self.counters.cwnd_reductions += 1;
            }
            for (k, p) in self.sent.iter_mut().enumerate() {
                if p.acked || p.queued || now < p.sent_at + rto {
                    continue;
                }
                p.queued = true;
                p.by_timer = true;
                self.retx.push_back(self.snd_una + k as u64);
                if !all {
                    break;
                }
            }
            self.counters.rto_backoffs += 1;
            self.rto = (self.rto * 2).min(cfg.max_rto);
            self.rto_at = (!self.sent.is_empty()).then(|| now + self.rto);
        }
        if self.ack_at.is_some_and(|t| now >= t) {
            self.ack_now = true;
            self.ack_at = None;
        }
    }

    /// The retransmission timer fired for packets that had arrived (their acknowledgements
    /// came late: a peer descheduled for longer than the timeout, on a machine with more
    /// busy ranks than cores, is the common case). The window and timeout go back to what
    /// they were, and the packets the timer queued that have not gone again yet are in
    /// flight again rather than lost.
    fn undo_timeout(&mut self) {
        let Some((cc, rto)) = self.rto_undo.take() else {
            return;
        };
        self.cc.undo(cc);
        self.rto = rto;
        self.counters.spurious_timeouts += 1;
        let (una, sent) = (self.snd_una, &mut self.sent);
        self.retx.retain(|&seq| {
            match seq.checked_sub(una).and_then(|k| sent.get_mut(k as usize)) {
                Some(p) if p.queued && p.by_timer => {
                    p.queued = false;
                    false
                }
                _ => true,
            }
        });
    }

    /// Congestion control's window, in packets.
    #[cfg(test)]
    pub(crate) fn cwnd(&self) -> f64 {
        self.cc.window()
    }

    pub fn lose(&mut self, events: &mut VecDeque<Event>) {
        self.lost = true;
        self.clear();
        events.push_back(Event::PeerLost { peer: self.rank });
    }

    fn clear(&mut self) {
        self.out.clear();
        self.be_out.clear();
        self.sent.clear();
        self.sacked = 0;
        self.tlp_at = None;
        self.tlp_seq = None;
        self.retx.clear();
        self.ctl.clear();
        self.in_msgs.clear();
        self.placing.clear();
        self.queued_bytes = 0;
        self.parked_bytes = 0;
        self.parked_copies = 0;
    }

    // ---------------------------------------------------------------- transmitting

    fn piggyback(&mut self, cfg: &Config) -> Piggyback {
        let credit = self.credit_limit(cfg);
        self.credit_advertised = credit;
        self.rx_since_ack = 0;
        self.ack_at = None;
        if !self.rcv_gaps {
            self.ack_now = false;
        }
        Piggyback {
            ack: self.rcv_next as u32,
            credit,
        }
    }

    fn emit_ack(
        &mut self,
        cfg: &Config,
        me: u32,
        token: u64,
        want_ack: bool,
        buf: &mut [u8],
    ) -> usize {
        self.emit_ack_bye(cfg, me, token, want_ack, false, buf)
    }

    fn emit_ack_bye(
        &mut self,
        cfg: &Config,
        me: u32,
        token: u64,
        want_ack: bool,
        bye: bool,
        buf: &mut [u8],
    ) -> usize {
        let mut ranges = [(0u32, 0u32); wire::MAX_RANGES];
        let mut n = 0;
        let mut i = 0;
        // As many ranges as the device's packet holds, nearest first.
        let max = wire::MAX_RANGES.min((cfg.max_packet - wire::ACK_LEN) / wire::RANGE_LEN);
        while i < self.rcv_map.len() && n < max {
            if self.rcv_map[i] {
                let start = i;
                while i < self.rcv_map.len() && self.rcv_map[i] {
                    i += 1;
                }
                ranges[n] = (
                    (self.rcv_next + start as u64) as u32,
                    (self.rcv_next + i as u64) as u32,
                );
                n += 1;
            } else {
                i += 1;
            }
        }
        let pb = self.piggyback(cfg);
        self.ack_now = false;
        Repr {
            token,
            src: me,
            dst: self.rank,
            body: Body::Ack {
                cum: pb.ack,
                credit: pb.credit,
                want_ack,
                bye,
                ranges: AckRanges::Slice(&ranges[..n]),
            },
        }
        .emit_with(buf, cfg.checksums)
    }

    /// Whether a new sequenced packet may leave: within the fixed window (the receiver's
    /// reordering window) and congestion control's.
    fn window_open(&self, cfg: &Config) -> bool {
        self.snd_nxt - self.snd_una < cfg.window as u64 && self.cc.allows(self.pipe())
    }

    /// Packets in flight: sent, not acknowledged, not found lost and waiting to go again.
    /// The most packets to this peer that should leave as one burst: half the window in force
    /// (congestion control's, or the fixed one), at least 1. A device that joins packets into
    /// one kernel crossing (UDP segmentation offload) cuts its runs there, so that at least two
    /// bursts are in flight: the receiver reads and acknowledges the first while the second
    /// crosses, and acknowledgements come back before the sender runs out of window. With the
    /// whole window in one burst, sender and receiver take turns: on the 2-core VM, a fixed window
    /// of 32 packets streamed 0.72-0.73 GB/s in runs of up to 44 and 0.99-1.27 in runs of 16
    /// (48: 0.79-0.80 and 1.28; 64: 1.17-1.18 and 1.49-1.62 in runs of 32); AIMD's window under
    /// 1% random loss sits in that range.
    pub(crate) fn burst(&self, cfg: &Config) -> u32 {
        let mut w = cfg.window as f64;
        if self.cc.is_on() {
            w = w.min(self.cc.window());
        }
        ((w / 2.0) as u32).max(1)
    }

    fn pipe(&self) -> u64 {
        (self.sent.len() as u64).saturating_sub(self.sacked + self.retx.len() as u64)
    }

    /// Writes one packet of `what` with sequence number `seq`.
    #[allow(clippy::too_many_arguments)]
    fn emit_seq(
        &mut self,
        cfg: &Config,
        me: u32,
        token: u64,
        seq: u64,
        what: What,
        buf: &mut [u8],
    ) -> usize {
        let pb = Some(self.piggyback(cfg));
        match what {
            What::Frag { msg, off, len } => {
                let rank = self.rank;
                let Some(m) = msg
                    .checked_sub(self.out_base)
                    .and_then(|i| self.out.get_mut(i as usize))
                else {
                    // Complete already: every fragment was acknowledged, this one included
                    // (only a forged acknowledgement gets here). Say what we have instead.
                    self.counters.stale_retransmits += 1;
                    return self.emit_ack(cfg, me, token, false, buf);
                };
                let s = Seq {
                    seq: seq as u32,
                    piggyback: pb,
                    best_effort: false,
                    msg: msg as u32,
                };
                emit_fragment(
                    buf,
                    token,
                    me,
                    rank,
                    &s,
                    m,
                    off,
                    len as usize,
                    cfg.checksums,
                )
            }
            What::Rts {
                msg,
                tag,
                context,
                len,
            } => Repr {
                token,
                src: me,
                dst: self.rank,
                body: Body::Rts {
                    seq: Seq {
                        seq: seq as u32,
                        piggyback: pb,
                        best_effort: false,
                        msg: msg as u32,
                    },
                    tag,
                    context,
                    msg_len: len,
                },
            }
            .emit_with(buf, cfg.checksums),
            What::Cts { msg } => Repr {
                token,
                src: me,
                dst: self.rank,
                body: Body::Cts {
                    seq: Seq {
                        seq: seq as u32,
                        piggyback: pb,
                        best_effort: false,
                        msg: msg as u32,
                    },
                },
            }
            .emit_with(buf, cfg.checksums),
        }
    }

    fn push_new(
        &mut self,
        cfg: &Config,
        me: u32,
        token: u64,
        now: Instant,
        what: What,
        buf: &mut [u8],
    ) -> usize {
        let seq = self.snd_nxt;
        self.snd_nxt += 1;
        self.sent.push_back(Sent {
            what,
            sent_at: now,
            retx: false,
            acked: false,
            queued: false,
            by_timer: false,
        });
        if self.rto_at.is_none() {
            self.rto_at = Some(now + self.rto);
        }
        if self.tlp_at.is_none() {
            self.arm_tlp(cfg, now);
        }
        self.emit_seq(cfg, me, token, seq, what, buf)
    }

    /// The next message fragment, RTS, or nothing (window closed, credit exhausted, all sent).
    fn next_new(
        &mut self,
        cfg: &Config,
        me: u32,
        token: u64,
        now: Instant,
        buf: &mut [u8],
    ) -> Option<usize> {
        if !self.window_open(cfg) {
            return None;
        }
        let frag = cfg.fragment() as u64;
        let mut idx = self.cursor;
        while idx < self.out.len() {
            let m = &mut self.out[idx];
            let id = m.id;
            match m.state {
                OutState::WaitCts => {
                    idx += 1;
                    continue;
                }
                OutState::NeedRts => {
                    if id - self.out_base >= msg_window(cfg) {
                        return None;
                    }
                    m.state = OutState::WaitCts;
                    let rts = What::Rts {
                        msg: id,
                        tag: m.tag,
                        context: m.context,
                        len: m.len(),
                    };
                    return Some(self.push_new(cfg, me, token, now, rts, buf));
                }
                OutState::Eager | OutState::Cleared => {
                    if m.fully_sent() {
                        if idx == self.cursor {
                            self.cursor += 1;
                        }
                        idx += 1;
                        continue;
                    }
                    if !m.started && id - self.out_base >= msg_window(cfg) {
                        return None;
                    }
                    if m.state == OutState::Eager && !m.charged {
                        let charge = m.len() + crate::peer::CHARGE;
                        if self.eager_charged + charge > self.peer_credit {
                            if !self.credit_stalled {
                                self.credit_stalled = true;
                                self.counters.credit_stalls += 1;
                                self.probe_at = Some(now + self.rto);
                            }
                            return None;
                        }
                        m.charged = true;
                        self.eager_charged += charge;
                    }
                    let off = m.next_off;
                    let len = frag.min(m.len() - off) as u32;
                    m.next_off += len as u64;
                    m.started = true;
                    return Some(self.push_new(
                        cfg,
                        me,
                        token,
                        now,
                        What::Frag { msg: id, off, len },
                        buf,
                    ));
                }
            }
        }
        None
    }

    fn next_best_effort(
        &mut self,
        cfg: &Config,
        me: u32,
        token: u64,
        buf: &mut [u8],
        pool: &mut BufPool,
    ) -> Option<usize> {
        let frag = cfg.fragment() as u64;
        let credit = self.credit_limit(cfg);
        let rank = self.rank;
        let m = self.be_out.front_mut()?;
        let off = m.next_off;
        let l = frag.min(m.len() - off) as usize;
        let s = Seq {
            seq: 0,
            piggyback: Some(Piggyback {
                ack: self.rcv_next as u32,
                credit,
            }),
            best_effort: true,
            msg: m.id as u32,
        };
        let n = emit_fragment(buf, token, me, rank, &s, m, off, l, cfg.checksums);
        m.next_off += l as u64;
        m.started = true;
        if m.fully_sent() {
            let m = self.be_out.pop_front().expect("front");
            pool.give(m.data.into_vec());
        }
        Some(n)
    }

    /// Writes the most urgent packet for this peer into `buf`, if any.
    pub fn transmit(
        &mut self,
        cfg: &Config,
        me: u32,
        token: u64,
        now: Instant,
        buf: &mut [u8],
        pool: &mut BufPool,
    ) -> Option<usize> {
        if self.lost {
            return None;
        }
        let n = self.transmit_inner(cfg, me, token, now, buf, pool)?;
        self.last_sent = now;
        self.counters.packets_sent += 1;
        Some(n)
    }

    fn transmit_inner(
        &mut self,
        cfg: &Config,
        me: u32,
        token: u64,
        now: Instant,
        buf: &mut [u8],
        pool: &mut BufPool,
    ) -> Option<usize> {
        // 1. An acknowledgement that must carry ranges (packets arrived out of order).
        //    With no gap, a sequenced packet below carries it just as well.
        if self.ack_now && self.rcv_gaps {
            self.counters.acks_sent += 1;
            return Some(self.emit_ack(cfg, me, token, false, buf));
        }
        // 2. Retransmissions, within congestion control's window (as TCP's recovery sends no
        //    more than its window allows; with nothing in flight, one always goes).
        while let Some(&seq) = self.retx.front() {
            // A tail loss probe goes whatever the window: it is sent because nothing came back.
            if Some(seq) != self.tlp_seq && !self.cc.allows(self.pipe()) {
                break;
            }
            self.retx.pop_front();
            if seq < self.snd_una {
                continue;
            }
            let k = (seq - self.snd_una) as usize;
            let Some(p) = self.sent.get_mut(k) else {
                continue;
            };
            p.queued = false;
            if p.acked {
                continue;
            }
            p.retx = true;
            p.sent_at = now;
            if p.by_timer {
                self.counters.retransmits_timeout += 1;
            } else {
                self.counters.retransmits_fast += 1;
            }
            let what = p.what;
            if self.rto_at.is_none() {
                self.rto_at = Some(now + self.rto);
            }
            return Some(self.emit_seq(cfg, me, token, seq, what, buf));
        }
        // 3. Clear-to-send for the peer's announced messages: within the fixed window but not
        //    congestion control's (a CTS is a control packet, as an acknowledgement is: the
        //    data it lets come is the other side's, under that side's window).
        if !self.ctl.is_empty() && self.snd_nxt - self.snd_una < cfg.window as u64 {
            let msg = self.ctl.pop_front().expect("not empty");
            return Some(self.push_new(cfg, me, token, now, What::Cts { msg }, buf));
        }
        // 4. New data.
        if let Some(n) = self.next_new(cfg, me, token, now, buf) {
            return Some(n);
        }
        if let Some(n) = self.next_best_effort(cfg, me, token, buf, pool) {
            return Some(n);
        }
        // 5. An acknowledgement that was waiting for reverse traffic that did not come.
        if self.ack_now || self.ack_at.is_some_and(|t| now >= t) {
            self.counters.acks_sent += 1;
            return Some(self.emit_ack(cfg, me, token, false, buf));
        }
        // 6. A credit probe while stalled.
        if self.credit_stalled && self.probe_at.is_some_and(|t| now >= t) {
            self.probe_at = Some(now + self.rto);
            self.counters.credit_probes += 1;
            return Some(self.emit_ack(cfg, me, token, true, buf));
        }
        // 7. Goodbye, once everything is acknowledged.
        if self.bye_left > 0 && self.idle() {
            self.bye_left -= 1;
            return Some(self.emit_ack_bye(cfg, me, token, false, true, buf));
        }
        // 8. A heartbeat.
        if now >= self.last_sent + cfg.heartbeat {
            self.counters.heartbeats_sent += 1;
            return Some(self.emit_ack(cfg, me, token, false, buf));
        }
        None
    }
}

#[cfg(test)]
mod pool_class_tests {
    use super::*;

    /// Whatever was kept before, a buffer taken has room for what was asked, the same
    /// allocation comes back for the same size, and the small list stays within its bounds.
    #[test]
    fn taken_buffers_fit_and_the_small_list_keeps_its_bounds() {
        let mut p = BufPool::default();
        // Thousands of small buffers left by a stream of 1 KiB messages.
        let small: Vec<Vec<u8>> = (0..9000).map(|_| p.take(1024)).collect();
        for v in small {
            p.give(v);
        }
        assert!(p.nbufs <= 8192 && p.bytes <= 16 << 20);
        for len in [0, 1, 1000, 1024, 1025, 4096, 65_536, 100_000, 1 << 20] {
            let v = p.take(len);
            assert_eq!(v.len(), len);
            let c = p.take_copy(&vec![7u8; len]);
            assert_eq!(c.len(), len);
            assert!(c.iter().all(|&b| b == 7));
            let kept = [v.as_ptr(), c.as_ptr()];
            p.give(v);
            p.give(c);
            let again = p.take(len);
            assert_eq!(again.len(), len);
            assert!(
                kept.contains(&again.as_ptr()),
                "{len}: one of the two buffers just given back, not a new one"
            );
            p.give(again);
        }
        // A 64 KiB stream after the small one reuses one buffer: one allocation, then none.
        let before = p.allocs;
        for _ in 0..1000 {
            let v = p.take_copy(&[1u8; 65_536]);
            p.give(v);
        }
        assert!(p.allocs - before <= 1, "{} allocations", p.allocs - before);
        assert!(p.nbufs <= 8192 && p.bytes <= 16 << 20);
    }
}
