//! volley's network protocol as a sans-I/O state machine (layer 1: depends on volley-wire only;
//! no sockets, no clock, no threads, no unsafe).
//!
//! One [`Engine`] per process speaks to every remote peer (a rank on another host). It is driven
//! the way quinn-proto is, and every call takes the caller's current time in nanoseconds:
//!
//! 1. [`Engine::send`] queues a message; [`Engine::handle`] takes one received packet;
//!    [`Engine::handle_timeout`] is called when the time [`Engine::poll_timeout`] gave has come.
//! 2. [`Engine::poll_transmit`] is called until it returns None, each time writing one packet into
//!    a buffer the caller provides (a slot of the device's transmit ring).
//! 3. [`Engine::poll_event`] hands out delivered messages and lost peers; once the application has
//!    consumed a message, [`Engine::release`] returns its credit to the sender.
//!
//! What it does, per peer (docs/protocol.md has the details and the packet formats):
//! - sequenced packets with cumulative and selective acknowledgements (ACK ranges), piggybacked
//!   on reverse traffic or delayed a little; retransmission when later packets are acknowledged
//!   (RACK-style, one smoothed round trip later) or on a timeout from the measured round-trip time
//!   with exponential back-off; duplicates suppressed by sequence number;
//! - messages fragmented to the device's packet size, reassembled in place, delivered whole and
//!   in order of sending;
//! - GAMMA's end-to-end credit: a sender may have at most the receiver's eager pool of eager
//!   bytes not yet consumed by the receiving application; beyond the rendezvous threshold a
//!   message is announced (RTS) and its data sent only once the receiver has made room (CTS);
//! - a best-effort mode (no sequence, no acknowledgement, no retransmission) per message;
//! - heartbeats when a peer hears nothing else from us, and a peer declared lost after
//!   `peer_timeout` of silence.

#![forbid(unsafe_code)]

pub mod cc;
mod counters;
mod peer;
mod sched;

pub use counters::{PeerCounters, DROP_REASONS, ENGINE_COUNTERS, PEER_COUNTERS};
pub use peer::Fill;
use peer::{Data, Peer};
use sched::{Sched, NEVER};
use std::collections::VecDeque;
use volley_wire::{Malformed, Repr};

/// Nanoseconds on the caller's clock (any origin, never going backwards).
pub type Instant = u64;

const MS: u64 = 1_000_000;
const US: u64 = 1_000;

/// Protocol parameters. Both ends of a link should use the same ones.
#[derive(Clone, Debug)]
pub struct Config {
    /// Largest volley packet the device carries (its MTU minus the IP and UDP headers, or the
    /// Ethernet payload).
    pub max_packet: usize,
    /// Sequenced packets in flight per peer (also the receiver's reordering window).
    pub window: u32,
    /// The receiver's eager buffer pool per peer: credit, in bytes.
    pub pool_bytes: u64,
    /// Messages larger than this go by rendezvous (128 KiB, MPICH's eager limit over TCP: a 64 KiB
    /// message then streams without waiting a round trip for its CTS).
    pub rndv_threshold: usize,
    /// Who makes room for a rendezvous message. False: the engine, in message order within
    /// `rndv_budget`, reassembling it in a buffer of its own and delivering it whole
    /// ([`Event::Message`]). True: the application, so that the data lands where it wants it
    /// (the receive buffer that matched, with no copy in between): the engine announces the
    /// message ([`Event::Announced`]) once every earlier message from its sender is delivered,
    /// sends the CTS when the application calls [`Engine::accept`], hands each fragment to the
    /// placement sink given to [`Engine::handle_placing`], and says [`Event::Placed`] when every
    /// byte is there. A rendezvous waiting for its CTS then holds nothing of the sender's send
    /// budget (it costs no network resource), so a receiver that matches messages in another
    /// order than they were sent never starves the sender of the one it waits for.
    pub receiver_places: bool,
    /// Bytes of rendezvous messages a receiver accepts (CTS sent) before the application has
    /// consumed them. One message is always accepted when none is outstanding.
    pub rndv_budget: u64,
    /// Largest message accepted.
    pub max_message: u64,
    /// Every packet carries a CRC32C, checked on receipt. False where the device vouches for
    /// every byte (sealed packets: a packet altered on the way does not open, and
    /// the CRC costs the bulk path about a tenth of its CPU for nothing); every rank of the job
    /// must agree.
    pub checksums: bool,
    pub initial_rto: u64,
    pub min_rto: u64,
    pub max_rto: u64,
    /// How long a receiver may hold back an acknowledgement hoping to piggyback it.
    pub ack_delay: u64,
    /// Acknowledge at once after this many packets.
    pub ack_every: u32,
    /// Send a heartbeat to a peer after this long without sending it anything.
    pub heartbeat: u64,
    /// Declare a peer lost after this long without hearing from it.
    pub peer_timeout: u64,
    /// Bytes queued to one peer (sent or not, not yet acknowledged) beyond which
    /// [`Engine::send`] says [`SendError::Busy`]. A message is always accepted into an empty
    /// queue, whatever its size.
    pub send_budget: u64,
    /// Bytes queued to one peer beyond which a message of at most `rndv_threshold` bytes that
    /// the engine copies waits too (the smaller of this and `send_budget` applies to it). Its
    /// copy is made at the send and read again when its packets are made: with tens of MiB
    /// queued, those reads miss the cache. A stream of 64 KiB messages between two namespaces
    /// of the development VM spent 26% of the sending core in those two copies with 64 MiB
    /// queued and 7% with 1 MiB (perf), and the 16 KiB stream moved 5-15% more. 1 MiB is still
    /// several times a LAN's bandwidth-delay product (3.5 GB/s x 30 us on a veth, 100 Gbit/s x
    /// 10 us on a switch).
    pub eager_budget: u64,
    /// Bytes of rendezvous messages the engine holds as its own copies while they wait for
    /// their receiver ([`Config::receiver_places`]), beyond which a copying send waits (says
    /// [`SendError::Busy`]). One is always accepted when none waits. Buffers handed over with
    /// [`Engine::send_returning`] are the sender's and do not count.
    pub park_budget: u64,
    /// Congestion control (see [`cc`]): a window that follows losses, so flows share a
    /// bottleneck. Off: only `window` and the receiver's credit limit a sender.
    pub congestion_control: bool,
}

impl Default for Config {
    fn default() -> Config {
        Config {
            max_packet: 1472,
            window: 4096,
            pool_bytes: 4 << 20,
            rndv_threshold: 128 << 10,
            receiver_places: false,
            rndv_budget: 256 << 20,
            max_message: 1 << 40,
            checksums: true,
            initial_rto: 10 * MS,
            min_rto: 500 * US,
            max_rto: 1000 * MS,
            ack_delay: 50 * US,
            ack_every: 8,
            heartbeat: 1000 * MS,
            peer_timeout: 10_000 * MS,
            send_budget: 64 << 20,
            eager_budget: 1 << 20,
            park_budget: 256 << 20,
            congestion_control: true,
        }
    }
}

impl Config {
    /// Payload bytes of one DATA packet.
    pub fn fragment(&self) -> usize {
        self.max_packet - volley_wire::DATA_HEADER_LEN
    }

    /// Checks the parameters hang together; the error says which one to change.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_packet < volley_wire::DATA_HEADER_LEN + 64 {
            return Err(format!(
                "packet size {} too small: needs at least {} bytes",
                self.max_packet,
                volley_wire::DATA_HEADER_LEN + 64
            ));
        }
        if self.max_packet > 65_000 {
            return Err(format!(
                "packet size {} too large: at most 65000",
                self.max_packet
            ));
        }
        if self.window < 4 || self.window > 1 << 20 {
            return Err(format!("window {} must be 4..=1048576", self.window));
        }
        if (self.rndv_threshold as u64).saturating_add(peer::CHARGE) > self.pool_bytes {
            return Err(format!(
                "rendezvous threshold {} must be below the eager pool {} (a message sent eagerly must fit the pool)",
                self.rndv_threshold, self.pool_bytes
            ));
        }
        if self.min_rto == 0 || self.min_rto > self.max_rto {
            return Err("retransmission timeouts must satisfy 0 < min <= max".into());
        }
        if self.heartbeat >= self.peer_timeout {
            return Err(format!(
                "heartbeat ({} ms) must be shorter than the peer timeout ({} ms)",
                self.heartbeat / MS,
                self.peer_timeout / MS
            ));
        }
        Ok(())
    }
}

/// How a message is delivered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reliability {
    /// Exactly once, in order, retransmitted until acknowledged.
    Reliable,
    /// GAMMA's best effort: sent once; lost if any fragment is lost; not ordered with the
    /// reliable messages.
    BestEffort,
}

/// Why [`Engine::send`] did not take a message.
#[derive(Debug, PartialEq, Eq)]
pub enum SendError {
    /// Too many bytes queued to this peer: make progress (poll_transmit, handle) and retry.
    Busy(Vec<u8>),
    /// The peer is lost; nothing more can be sent to it.
    PeerLost,
    /// Larger than `max_message`.
    TooLarge { len: u64, max: u64 },
    /// No peer with this number was added.
    NoSuchPeer,
}

/// Why the engine's queue did not take a message, with the message when it was only busy.
enum Refusal {
    Busy(Data),
    Other(SendError),
}

impl From<Refusal> for SendError {
    fn from(r: Refusal) -> SendError {
        match r {
            Refusal::Busy(d) => SendError::Busy(d.into_vec()),
            Refusal::Other(e) => e,
        }
    }
}

/// Credit an application hands back with [`Engine::release`] once it consumed a message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Credit {
    pub peer: u32,
    eager: u64,
    rndv: u64,
}

/// What the engine has for the application.
#[derive(Debug, PartialEq, Eq)]
pub enum Event {
    Message {
        peer: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        /// How it was sent.
        how: Reliability,
        /// Give back with [`Engine::release`] once consumed.
        credit: Credit,
    },
    /// A rendezvous message (only with [`Config::receiver_places`]), in its place among the
    /// sender's messages: every earlier one has been delivered or announced. Its data stays with
    /// the sender until [`Engine::accept`].
    Announced {
        peer: u32,
        /// The message's number, for [`Engine::accept`] and the placement sink.
        msg: u64,
        tag: u32,
        context: u32,
        len: u64,
    },
    /// Every byte of accepted message `msg` from `peer` has gone through the placement sink.
    Placed { peer: u32, msg: u64 },
    /// Nothing heard from the peer for `peer_timeout`: messages to and from it are lost.
    PeerLost { peer: u32 },
    /// The peer closed its world after everything it sent was acknowledged.
    PeerFinished { peer: u32 },
}

/// A fragment of an accepted rendezvous message, for the application to copy where the message
/// goes: `bytes` are the message's bytes `[offset, offset + bytes.len())`.
#[derive(Debug)]
pub struct Placement<'a> {
    pub peer: u32,
    pub msg: u64,
    pub offset: u64,
    pub bytes: &'a [u8],
}

/// One packet [`Engine::poll_transmit`] wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// Rank the packet goes to.
    pub peer: u32,
    pub len: usize,
    /// The most packets to this peer a device should hand the kernel as one burst (one
    /// segmentation-offload send): half of what the peer may have in flight now (see
    /// [`peer::Peer::burst`]), at least 1.
    pub burst: u32,
}

/// The protocol engine of one process.
pub struct Engine {
    cfg: Config,
    me: u32,
    token: u64,
    peers: Vec<Option<Peer>>,
    events: VecDeque<Event>,
    /// Buffers given back by the application, reused for new messages.
    pool: peer::BufPool,
    /// Received packets dropped before a peer could be told, by reason (see [`DROP_REASONS`]).
    pub drops: [u64; DROP_REASONS.len()],
    /// The peers that may have a packet to send, and every peer's next timer (see [`sched`]).
    sched: Sched,
}

impl Engine {
    /// An engine for rank `me` of the job `token`.
    ///
    /// # Panics
    /// If `cfg` does not pass [`Config::validate`].
    pub fn new(cfg: Config, me: u32, token: u64) -> Engine {
        if let Err(e) = cfg.validate() {
            panic!("invalid protocol configuration: {e}");
        }
        Engine {
            cfg,
            me,
            token,
            peers: Vec::new(),
            events: VecDeque::new(),
            pool: Default::default(),
            drops: [0; DROP_REASONS.len()],
            sched: Sched::default(),
        }
    }

    pub fn config(&self) -> &Config {
        &self.cfg
    }

    pub fn me(&self) -> u32 {
        self.me
    }

    /// Makes `rank` a peer (idempotent).
    pub fn add_peer(&mut self, rank: u32, now: Instant) {
        let i = rank as usize;
        if self.peers.len() <= i {
            self.peers.resize_with(i + 1, || None);
        }
        if self.peers[i].is_none() {
            let p = Peer::new(rank, &self.cfg, now);
            self.sched.touch(i, p.next_timeout(&self.cfg));
            self.peers[i] = Some(p);
        }
    }

    fn peer(&self, rank: u32) -> Option<&Peer> {
        self.peers.get(rank as usize).and_then(|p| p.as_ref())
    }

    pub fn peer_counters(&self, rank: u32) -> Option<&PeerCounters> {
        self.peer(rank).map(|p| &p.counters)
    }

    /// Ranks of the peers.
    pub fn peers(&self) -> impl Iterator<Item = u32> + '_ {
        self.peers.iter().flatten().map(|p| p.rank)
    }

    pub fn is_lost(&self, rank: u32) -> bool {
        self.peer(rank).is_some_and(|p| p.lost)
    }

    /// Takes peer `rank` for lost on someone else's word (the launcher saw its process end):
    /// as when its timer runs out, what was queued for it goes and `Event::PeerLost` follows.
    /// Nothing happens to a peer already lost or unknown.
    pub fn declare_lost(&mut self, rank: u32) {
        if let Some(Some(p)) = self.peers.get_mut(rank as usize) {
            if !p.lost {
                p.lose(&mut self.events);
                self.sched.touch(rank as usize, p.next_timeout(&self.cfg));
            }
        }
    }

    /// The engine's own counters, in the order of [`ENGINE_COUNTERS`].
    pub fn engine_counters(&self) -> [u64; ENGINE_COUNTERS.len()] {
        [self.pool.allocs]
    }

    /// A buffer of `len` bytes (contents unspecified), from the pool when one is big enough.
    pub fn buffer(&mut self, len: usize) -> Vec<u8> {
        self.pool.take(len)
    }

    /// A buffer holding a copy of `data`, to send (from the pool, like [`Engine::buffer`]).
    pub fn buffer_from(&mut self, data: &[u8]) -> Vec<u8> {
        self.pool.take_copy(data)
    }

    /// Gives a buffer back for reuse.
    pub fn recycle(&mut self, buf: Vec<u8>) {
        self.pool.give(buf)
    }

    /// Queues a message to `peer`. The engine owns `data` until the peer has acknowledged it.
    pub fn send(
        &mut self,
        now: Instant,
        peer: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        how: Reliability,
    ) -> Result<(), SendError> {
        self.queue(now, peer, tag, context, Data::Owned(data), how, false)
            .map(|_| ())
            .map_err(SendError::from)
    }

    /// Like [`Engine::send`] for a reliable message whose buffer the sender wants back: once
    /// the peer acknowledged the message, [`Engine::take_returned`] gives it back (no copy of it
    /// was made on the way). Returns the message's id.
    pub fn send_returning(
        &mut self,
        now: Instant,
        peer: u32,
        tag: u32,
        context: u32,
        data: Vec<u8>,
    ) -> Result<u64, SendError> {
        self.queue(
            now,
            peer,
            tag,
            context,
            Data::Owned(data),
            Reliability::Reliable,
            true,
        )
        .map_err(SendError::from)
    }

    /// Like [`Engine::send_returning`] for memory the sender lends rather than a buffer it
    /// hands over: the engine reads each fragment from it as the fragment goes (no copy of the
    /// message is made), and drops the loan once the peer acknowledged the whole message, or
    /// was lost, or the engine closed; [`Engine::take_returned`] then gives an empty buffer.
    /// Refused for now ([`SendError::Busy`], whose buffer is empty), the loan comes back with
    /// the error.
    pub fn send_lent(
        &mut self,
        now: Instant,
        peer: u32,
        tag: u32,
        context: u32,
        data: volley_sys::lend::RawBuf,
    ) -> Result<u64, (Option<volley_sys::lend::RawBuf>, SendError)> {
        self.queue(
            now,
            peer,
            tag,
            context,
            Data::Lent(data),
            Reliability::Reliable,
            true,
        )
        .map_err(|r| match r {
            Refusal::Busy(Data::Lent(b)) => (Some(b), SendError::Busy(Vec::new())),
            r => (None, SendError::from(r)),
        })
    }

    /// Sends a reliable message of `len` bytes that `src` makes piece by piece (a
    /// non-contiguous datatype): each fragment is packed straight into its packet as it goes,
    /// and packed again if it must go again, so the message is never whole in memory here.
    /// Otherwise as [`Engine::send_lent`]: `src` is dropped once the peer acknowledged the
    /// whole message (or was lost, or the engine closed), and [`Engine::take_returned`] then
    /// gives an empty buffer; refused, `src` comes back with the error.
    pub fn send_packed<F: Fill + 'static>(
        &mut self,
        now: Instant,
        peer: u32,
        tag: u32,
        context: u32,
        len: usize,
        src: F,
    ) -> Result<u64, (F, SendError)> {
        match self.admit(peer, len, Reliability::Reliable, true) {
            Ok(()) => {}
            Err(None) => return Err((src, SendError::Busy(Vec::new()))),
            Err(Some(e)) => return Err((src, e)),
        }
        let data = Data::Packed {
            len,
            src: Box::new(src),
        };
        Ok(self.enqueue(now, peer, tag, context, data, Reliability::Reliable, true))
    }

    /// Every send: the checks, then the peer's queue. Returns the message's id.
    #[allow(clippy::too_many_arguments)]
    fn queue(
        &mut self,
        now: Instant,
        peer: u32,
        tag: u32,
        context: u32,
        data: Data,
        how: Reliability,
        give_back: bool,
    ) -> Result<u64, Refusal> {
        match self.admit(peer, data.len(), how, give_back) {
            Ok(()) => Ok(self.enqueue(now, peer, tag, context, data, how, give_back)),
            Err(None) => Err(Refusal::Busy(data)),
            Err(Some(e)) => Err(Refusal::Other(e)),
        }
    }

    /// The checks a send of `len` bytes passes before its message is made: its size, its
    /// peer, room in the peer's queue (`Err(None)`: not now).
    fn admit(
        &mut self,
        peer: u32,
        len: usize,
        how: Reliability,
        give_back: bool,
    ) -> Result<(), Option<SendError>> {
        if len as u64 > self.cfg.max_message {
            return Err(Some(SendError::TooLarge {
                len: len as u64,
                max: self.cfg.max_message,
            }));
        }
        // Field borrows, so the configuration need not be copied per message.
        let cfg = &self.cfg;
        let Some(p) = self.peers.get_mut(peer as usize).and_then(|p| p.as_mut()) else {
            return Err(Some(SendError::NoSuchPeer));
        };
        if p.lost {
            return Err(Some(SendError::PeerLost));
        }
        if how == Reliability::Reliable && !p.has_room(cfg, len, !give_back) {
            p.counters.send_busy += 1;
            return Err(None);
        }
        Ok(())
    }

    /// Queues an admitted message (see [`Engine::admit`]) to its peer.
    #[allow(clippy::too_many_arguments)]
    fn enqueue(
        &mut self,
        now: Instant,
        peer: u32,
        tag: u32,
        context: u32,
        data: Data,
        how: Reliability,
        give_back: bool,
    ) -> u64 {
        let cfg = &self.cfg;
        let p = self.peers[peer as usize].as_mut().expect("admitted");
        let id = p.queue(cfg, now, tag, context, data, how, give_back);
        self.sched.touch(peer as usize, p.next_timeout(cfg));
        id
    }

    /// The buffer of message `id` to `peer` (from [`Engine::send_returning`]), once acknowledged.
    pub fn take_returned(&mut self, peer: u32, id: u64) -> Option<Vec<u8>> {
        self.peers
            .get_mut(peer as usize)
            .and_then(|p| p.as_mut())?
            .take_returned(id)
    }

    /// Whether message `id`'s buffer is back.
    pub fn is_returned(&self, peer: u32, id: u64) -> bool {
        self.peer(peer).is_some_and(|p| p.is_returned(id))
    }

    /// Ends the loan of lent message `id` to `peer` early, once at most a window of it is still
    /// to go, copying what is not acknowledged yet (see `Peer::release_lent`): the lender may
    /// reuse its memory, and nobody takes the message back. False: not now (no CTS yet, or more
    /// than a window to go, or it is no lent message in the queue), or never (it completed:
    /// see [`Engine::take_returned`]).
    pub fn release_lent(&mut self, peer: u32, id: u64) -> bool {
        let (cfg, pool) = (&self.cfg, &mut self.pool);
        self.peers
            .get_mut(peer as usize)
            .and_then(|p| p.as_mut())
            .is_some_and(|p| p.release_lent(cfg, id, pool))
    }

    /// The sender will not take message `id`'s buffer back: it returns to the pool.
    pub fn abandon(&mut self, peer: u32, id: u64) {
        if let Some(p) = self.peers.get_mut(peer as usize).and_then(|p| p.as_mut()) {
            p.abandon(id, &mut self.pool);
        }
    }

    /// The state of every peer, one line each, for a failing test to print.
    #[doc(hidden)]
    pub fn describe(&self) -> String {
        let mut s = format!("rank {} drops {:?}\n", self.me, self.drops);
        for p in self.peers.iter().flatten() {
            s += &p.describe();
            s += "\n";
        }
        s
    }

    /// Whether everything sent to every live peer has been acknowledged.
    pub fn all_acked(&self) -> bool {
        self.peers.iter().flatten().all(|p| p.lost || p.idle())
    }

    /// Whether `send` would take `len` more bytes to `peer` now.
    pub fn can_send(&self, peer: u32, len: usize) -> bool {
        self.peer(peer)
            .is_some_and(|p| p.has_room(&self.cfg, len, true))
    }

    /// Takes one received packet. An error says why it was dropped (it is also counted).
    /// For an engine that never accepts a placement (without [`Config::receiver_places`]).
    pub fn handle(&mut self, now: Instant, packet: &[u8]) -> Result<(), Malformed> {
        self.handle_placing(now, packet, &mut |_: Placement<'_>| {})
    }

    /// [`Engine::handle`], with the sink that places the fragments of accepted rendezvous
    /// messages: called once for each new fragment (duplicates never reach it), in any order.
    pub fn handle_placing(
        &mut self,
        now: Instant,
        packet: &[u8],
        place: &mut dyn FnMut(Placement<'_>),
    ) -> Result<(), Malformed> {
        let repr = match Repr::parse_with(packet, self.token, self.cfg.checksums) {
            Ok(r) => r,
            Err(e) => {
                self.drops[counters::drop_index(e)] += 1;
                return Err(e);
            }
        };
        if repr.dst != self.me {
            // Another rank's packet (a raw socket sees every frame of its EtherType).
            self.drops[counters::DROP_NOT_MINE] += 1;
            return Err(Malformed::Field);
        }
        let cfg = &self.cfg;
        let Some(p) = self
            .peers
            .get_mut(repr.src as usize)
            .and_then(|p| p.as_mut())
        else {
            self.drops[counters::drop_index(Malformed::Field)] += 1;
            return Err(Malformed::Field);
        };
        if p.lost {
            p.counters.after_lost += 1;
            return Ok(());
        }
        let r = p.handle(
            cfg,
            now,
            &repr.body,
            &mut self.events,
            &mut self.pool,
            place,
        );
        self.sched.touch(repr.src as usize, p.next_timeout(cfg));
        if let Err(e) = r {
            p.counters.bad_field += 1;
            return Err(e);
        }
        Ok(())
    }

    /// Writes the next packet to send into `buf` (at least `max_packet` bytes), or returns None
    /// when there is nothing to send now. Peers with something to send take turns, a packet
    /// each; a call that finds nothing looks at no peer but those that changed or came due.
    pub fn poll_transmit(&mut self, now: Instant, buf: &mut [u8]) -> Option<Transmit> {
        // What a peer sends because time passed is due at its next timer: a caller that did not
        // run the timers first still gets it.
        self.sched.wake_due(now);
        while let Some(i) = self.sched.next() {
            let Some(p) = self.peers.get_mut(i).and_then(|p| p.as_mut()) else {
                continue;
            };
            let sent = p.transmit(&self.cfg, self.me, self.token, now, buf, &mut self.pool);
            // Sending arms timers, and a refusal may too (a credit probe).
            self.sched
                .timers
                .set(i, p.next_timeout(&self.cfg).unwrap_or(NEVER));
            if let Some(len) = sent {
                self.sched.again(i);
                return Some(Transmit {
                    peer: i as u32,
                    len,
                    burst: p.burst(&self.cfg),
                });
            }
        }
        None
    }

    /// When [`Engine::handle_timeout`] should next be called.
    pub fn poll_timeout(&self) -> Option<Instant> {
        let t = self.sched.timers.earliest();
        (t != NEVER).then_some(t)
    }

    /// Runs the timers due at `now`: retransmissions, delayed acknowledgements, heartbeats,
    /// credit probes, peer loss.
    pub fn handle_timeout(&mut self, now: Instant) {
        let due = self.sched.take_due(now);
        for &i in &due {
            if let Some(p) = self.peers.get_mut(i as usize).and_then(|p| p.as_mut()) {
                p.on_timeout(&self.cfg, now, &mut self.events);
                self.sched.touch(i as usize, p.next_timeout(&self.cfg));
            }
        }
        self.sched.done_with(due);
    }

    pub fn poll_event(&mut self) -> Option<Event> {
        self.events.pop_front()
    }

    /// Makes room for announced message `msg` from `peer` (see [`Config::receiver_places`]): the
    /// CTS goes out and its fragments go through the placement sink as they arrive. False when
    /// no such message waits (already accepted, or the peer is lost).
    pub fn accept(&mut self, peer: u32, msg: u64) -> bool {
        let Some(p) = self.peers.get_mut(peer as usize).and_then(|p| p.as_mut()) else {
            return false;
        };
        let ok = !p.lost && p.accept(msg);
        self.sched.touch(peer as usize, p.next_timeout(&self.cfg));
        ok
    }

    /// The application no longer wants announced or accepted message `msg` from `peer` (its
    /// receive went away): it is still acknowledged, so the sender completes, but its bytes are
    /// dropped and no [`Event::Placed`] comes. An announced one is accepted for that.
    pub fn discard(&mut self, peer: u32, msg: u64) {
        if let Some(p) = self.peers.get_mut(peer as usize).and_then(|p| p.as_mut()) {
            p.discard(msg);
            self.sched.touch(peer as usize, p.next_timeout(&self.cfg));
        }
    }

    /// Gives back the credit of a consumed message: the sender may send more.
    pub fn release(&mut self, credit: Credit) {
        let cfg = &self.cfg;
        if let Some(p) = self
            .peers
            .get_mut(credit.peer as usize)
            .and_then(|p| p.as_mut())
        {
            p.release(cfg, credit, &mut self.pool);
            self.sched.touch(credit.peer as usize, p.next_timeout(cfg));
        }
    }

    /// Says goodbye to every peer (once everything sent to it is acknowledged): they will not
    /// take our silence for a failure. Keep calling poll_transmit for a moment after.
    pub fn close(&mut self) {
        for (i, p) in self.peers.iter_mut().enumerate() {
            if let Some(p) = p {
                p.bye_left = 3;
                self.sched.touch(i, p.next_timeout(&self.cfg));
            }
        }
    }
}

/// The 64-bit number nearest to `near` whose low 32 bits are `v`.
fn unwrap32(near: u64, v: u32) -> u64 {
    let cand = (near & !0xffff_ffff) | v as u64;
    let d = cand.wrapping_sub(near) as i64;
    if d > i32::MAX as i64 && cand >= 1 << 32 {
        cand - (1 << 32)
    } else if d < i32::MIN as i64 {
        cand + (1 << 32)
    } else {
        cand
    }
}

#[cfg(test)]
mod unit_tests {
    use super::*;

    #[test]
    fn unwrap_picks_the_nearest() {
        assert_eq!(unwrap32(0, 5), 5);
        assert_eq!(unwrap32(10, 5), 5);
        assert_eq!(unwrap32(0xffff_fff0, 3), 0x1_0000_0003);
        assert_eq!(unwrap32(0x1_0000_0003, 0xffff_fff0), 0xffff_fff0);
        assert_eq!(unwrap32(0, 0xffff_fff0), 0xffff_fff0);
    }

    #[test]
    fn refused_sends_say_why() {
        let cfg = Config {
            max_message: 100,
            ..Config::default()
        };
        let mut e = Engine::new(cfg, 0, 7);
        e.add_peer(1, 0);
        assert_eq!(
            e.send(0, 1, 0, 0, vec![0; 101], Reliability::Reliable),
            Err(SendError::TooLarge { len: 101, max: 100 })
        );
        assert_eq!(
            e.send(0, 2, 0, 0, vec![0; 10], Reliability::Reliable),
            Err(SendError::NoSuchPeer)
        );
        assert_eq!(
            e.send(0, 1, 0, 0, vec![0; 100], Reliability::Reliable),
            Ok(())
        );
    }

    #[test]
    fn short_copies_queue_a_megabyte_and_long_messages_the_send_budget() {
        let mut e = Engine::new(Config::default(), 0, 7);
        e.add_peer(1, 0);
        let mut n = 0;
        while e
            .send(0, 1, 0, 0, vec![0; 64 << 10], Reliability::Reliable)
            .is_ok()
        {
            n += 1;
            assert!(n <= 1000, "no limit");
        }
        // 1 MiB of 64 KiB copies queued (nothing acknowledged yet), the next one refused...
        assert_eq!(n, 16);
        assert!(!e.can_send(1, 64 << 10));
        assert!(matches!(
            e.send(0, 1, 0, 0, vec![0; 64 << 10], Reliability::Reliable),
            Err(SendError::Busy(_))
        ));
        // ...while a long message still fits the send budget.
        assert!(e.can_send(1, 4 << 20));
        assert_eq!(
            e.send(0, 1, 0, 0, vec![0; 4 << 20], Reliability::Reliable),
            Ok(())
        );
    }

    #[test]
    fn config_errors_say_what_to_change() {
        let c = Config {
            rndv_threshold: 8 << 20,
            ..Config::default()
        };
        assert!(c.validate().unwrap_err().contains("rendezvous threshold"));
        let c = Config {
            max_packet: 50,
            ..Config::default()
        };
        assert!(c.validate().unwrap_err().contains("too small"));
    }
}

#[cfg(test)]
mod pair_tests {
    use super::*;

    /// Two engines over a link of fixed one-way latency, where what either sends can be held
    /// back (a peer descheduled: it received, but its answers are late) or dropped (lost).
    struct Pair {
        e: [Engine; 2],
        now: Instant,
        wire: Vec<(Instant, usize, Vec<u8>)>,
        held: Vec<Vec<u8>>,
        buf: Vec<u8>,
        /// Messages rank 1 was given: (tag, bytes).
        delivered: Vec<(u32, Vec<u8>)>,
    }

    const LATENCY: u64 = 10 * US;

    impl Pair {
        fn new() -> Pair {
            let cfg = Config::default();
            let mut e = [Engine::new(cfg.clone(), 0, 9), Engine::new(cfg, 1, 9)];
            e[0].add_peer(1, 0);
            e[1].add_peer(0, 0);
            Pair {
                e,
                now: 0,
                wire: Vec::new(),
                held: Vec::new(),
                buf: vec![0; 2048],
                delivered: Vec::new(),
            }
        }

        /// Runs for `dt`, 1 us a step; `from_b` says what happens to what rank 1 sends.
        fn run(&mut self, dt: u64, from_b: Fate, from_a: Fate) {
            let end = self.now + dt;
            while self.now < end {
                self.now += US;
                let now = self.now;
                let mut i = 0;
                while i < self.wire.len() {
                    if self.wire[i].0 <= now {
                        let (_, dst, pkt) = self.wire.swap_remove(i);
                        let _ = self.e[dst].handle(now, &pkt);
                    } else {
                        i += 1;
                    }
                }
                for k in 0..2 {
                    self.e[k].handle_timeout(now);
                    while let Some(t) = self.e[k].poll_transmit(now, &mut self.buf) {
                        let pkt = self.buf[..t.len].to_vec();
                        match if k == 0 { from_a } else { from_b } {
                            Fate::Deliver => self.wire.push((now + LATENCY, 1 - k, pkt)),
                            Fate::Hold => self.held.push(pkt),
                            Fate::Drop => {}
                        }
                    }
                    while let Some(ev) = self.e[k].poll_event() {
                        if let Event::Message {
                            tag, data, credit, ..
                        } = ev
                        {
                            self.e[k].release(credit);
                            if k == 1 {
                                self.delivered.push((tag, data));
                            }
                        }
                    }
                }
            }
        }

        /// What rank 1 said while held back reaches rank 0 now.
        fn release(&mut self) {
            for pkt in std::mem::take(&mut self.held) {
                self.wire.push((self.now, 0, pkt));
            }
        }

        fn send(&mut self, len: usize) {
            let d = vec![7u8; len];
            self.e[0]
                .send(self.now, 1, 0, 0, d, Reliability::Reliable)
                .unwrap();
        }

        fn cwnd(&self) -> f64 {
            self.e[0].peers[1].as_ref().unwrap().cwnd()
        }

        fn counters(&self) -> PeerCounters {
            self.e[0].peer_counters(1).unwrap().clone()
        }
    }

    #[derive(Clone, Copy)]
    enum Fate {
        Deliver,
        Hold,
        Drop,
    }

    /// Warmed up: round trips measured and the window grown past its start.
    fn warm() -> Pair {
        let mut p = Pair::new();
        for _ in 0..20 {
            p.send(64 << 10);
            p.run(200 * US, Fate::Deliver, Fate::Deliver);
        }
        assert!(p.e[0].all_acked());
        assert!(p.cwnd() > 40.0, "window {}", p.cwnd());
        p
    }

    #[test]
    fn a_timeout_for_packets_that_arrived_is_undone_when_their_late_acks_come() {
        let mut p = warm();
        let before = p.cwnd();
        p.send(64 << 10);
        // The receiver gets everything but its answers are held for 3 ms: the timer fires.
        p.run(3 * MS, Fate::Hold, Fate::Deliver);
        let c = p.counters();
        assert!(c.rto_backoffs >= 1, "{c:?}");
        assert!(p.cwnd() <= 2.0, "the timeout cut the window: {}", p.cwnd());
        p.release();
        p.run(200 * US, Fate::Deliver, Fate::Deliver);
        let c = p.counters();
        assert_eq!(c.spurious_timeouts, 1, "{c:?}");
        assert!(p.cwnd() >= before, "window {} back to {before}", p.cwnd());
        assert!(p.e[0].all_acked());
    }

    #[test]
    fn lent_memory_goes_without_a_copy_and_its_loan_ends_once_acknowledged() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
        let p = std::cell::RefCell::new(Pair::new());
        let mut settles = 0;
        let id = volley_sys::lend::scope(
            || {
                settles += 1;
                p.borrow_mut().run(10 * US, Fate::Deliver, Fate::Deliver);
            },
            |lender| {
                let mut q = p.borrow_mut();
                let now = q.now;
                q.e[0]
                    .send_lent(now, 1, 5, 0, lender.lend(&data))
                    .map_err(|(_, e)| e)
                    .unwrap()
            },
        );
        // The scope returns once the engine let go of the memory: not before the peer
        // acknowledged every fragment (the acknowledgements take a round trip to come).
        let mut q = p.into_inner();
        assert!(settles > 1, "the loan outlived the call that made it");
        assert!(
            q.e[0].all_acked(),
            "the loan ended before the acknowledgements"
        );
        assert_eq!(q.e[0].take_returned(1, id), Some(Vec::new()));
        assert_eq!(q.delivered.len(), 1);
        assert_eq!(q.delivered[0].0, 5);
        assert!(q.delivered[0].1 == data, "the bytes arrived changed");
    }

    #[test]
    fn a_peer_that_received_everything_and_left_completes_the_send_its_goodbye_acknowledges() {
        let mut p = warm();
        let d = vec![3u8; 60_000];
        let now = p.now;
        let id = p.e[0].send_returning(now, 1, 8, 0, d).unwrap();
        // Everything arrives; every acknowledgement is lost.
        p.run(300 * US, Fate::Drop, Fate::Deliver);
        assert_eq!(p.delivered.last().map(|m| m.1.len()), Some(60_000));
        assert!(
            !p.e[0].is_returned(1, id),
            "acknowledged without an acknowledgement"
        );
        // The receiver closes, and its goodbyes get through.
        p.e[1].close();
        p.run(300 * US, Fate::Deliver, Fate::Drop);
        assert!(p.e[0].is_lost(1), "the goodbye did not arrive");
        assert_eq!(
            p.e[0].take_returned(1, id).map(|b| b.len()),
            Some(60_000),
            "the send the goodbye acknowledged did not complete"
        );
    }

    #[test]
    fn a_peer_that_left_before_receiving_does_not_complete_the_send() {
        let mut p = warm();
        let now = p.now;
        let id = p.e[0]
            .send_returning(now, 1, 8, 0, vec![3u8; 60_000])
            .unwrap();
        // Nothing arrives; the receiver closes (it has nothing of its own to send).
        p.run(50 * US, Fate::Deliver, Fate::Drop);
        p.e[1].close();
        p.run(300 * US, Fate::Deliver, Fate::Drop);
        assert!(p.e[0].is_lost(1), "the goodbye did not arrive");
        assert!(
            !p.e[0].is_returned(1, id),
            "a send nobody received completed"
        );
    }

    #[test]
    fn a_loan_released_with_a_window_to_go_leaves_the_unacknowledged_rest_in_a_copy() {
        let data: Vec<u8> = (0..300_000u32).map(|i| (i * 13 % 251) as u8).collect();
        let original = data.clone();
        let mut data = data;
        let p = std::cell::RefCell::new(Pair::new());
        let mut settles = 0;
        let mut released_before_acked = false;
        volley_sys::lend::scope(
            || settles += 1,
            |lender| {
                let now = p.borrow().now;
                let id = p.borrow_mut().e[0]
                    .send_lent(now, 1, 6, 0, lender.lend(&data))
                    .map_err(|(_, e)| e)
                    .unwrap();
                let mut q = p.borrow_mut();
                let mut steps = 0;
                while !q.e[0].release_lent(1, id) {
                    q.run(US, Fate::Deliver, Fate::Deliver);
                    steps += 1;
                    assert!(steps < 100_000, "never within a window of the end");
                }
                released_before_acked = !q.e[0].all_acked();
                // What was on its way to the peer is lost: it goes again, from the copy.
                q.wire.retain(|(_, dst, _)| *dst != 1);
            },
        );
        assert_eq!(settles, 0, "the loan outlived its release");
        assert!(
            released_before_acked,
            "released only once all was acknowledged"
        );
        // The lender's memory is its own again.
        data.fill(0xee);
        let mut q = p.into_inner();
        q.run(20 * MS, Fate::Deliver, Fate::Deliver);
        assert!(q.e[0].all_acked());
        let c = q.counters();
        assert!(
            c.retransmits_fast + c.retransmits_timeout + c.tail_probes > 0,
            "nothing went again: {c:?}"
        );
        assert_eq!(q.delivered.len(), 1);
        assert!(q.delivered[0].1 == original, "the bytes arrived changed");
    }

    /// Makes byte i of a message as `i * 13 % 251`, counting the bytes it made, and says when
    /// it is dropped.
    struct Maker {
        made: std::sync::Arc<std::sync::atomic::AtomicUsize>,
        dropped: std::sync::Arc<std::sync::atomic::AtomicBool>,
    }

    impl Fill for Maker {
        fn fill(&mut self, off: usize, out: &mut [u8]) {
            for (k, b) in out.iter_mut().enumerate() {
                *b = ((off + k) * 13 % 251) as u8;
            }
            self.made
                .fetch_add(out.len(), std::sync::atomic::Ordering::Relaxed);
        }
    }

    impl Drop for Maker {
        fn drop(&mut self) {
            self.dropped
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    #[test]
    fn a_packed_message_is_made_as_it_goes_and_made_again_where_lost() {
        use std::sync::atomic::Ordering::Relaxed;
        let len = 300_000;
        let original: Vec<u8> = (0..len).map(|i| (i * 13 % 251) as u8).collect();
        let made = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let dropped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let mut p = Pair::new();
        let src = Maker {
            made: made.clone(),
            dropped: dropped.clone(),
        };
        let id = p.e[0]
            .send_packed(p.now, 1, 6, 0, len, src)
            .map_err(|(_, e)| e)
            .unwrap();
        // Part of it goes, then what is on its way to the peer is lost.
        let mut steps = 0;
        while made.load(Relaxed) < len / 2 {
            p.run(US, Fate::Deliver, Fate::Deliver);
            steps += 1;
            assert!(steps < 100_000, "nothing was made");
        }
        assert!(
            made.load(Relaxed) < len,
            "made whole before it went: {}",
            made.load(Relaxed)
        );
        p.wire.retain(|(_, dst, _)| *dst != 1);
        p.run(50 * MS, Fate::Deliver, Fate::Deliver);
        assert!(p.e[0].all_acked());
        assert!(
            made.load(Relaxed) > len,
            "the lost fragments were not made again: {} bytes for {len}",
            made.load(Relaxed)
        );
        assert!(dropped.load(Relaxed), "the maker outlived its message");
        assert_eq!(p.e[0].take_returned(1, id), Some(Vec::new()));
        assert_eq!(p.delivered.len(), 1);
        assert!(p.delivered[0].1 == original, "the bytes arrived changed");
    }

    #[test]
    fn a_timeout_for_packets_really_lost_is_not_undone() {
        let mut p = warm();
        let before = p.cwnd();
        p.send(64 << 10);
        // The flight is lost on the way: the receiver never sees it.
        p.run(100 * US, Fate::Deliver, Fate::Drop);
        p.run(MS, Fate::Deliver, Fate::Deliver);
        let c = p.counters();
        assert!(c.rto_backoffs >= 1, "{c:?}");
        assert!(
            p.cwnd() < before,
            "window {} not restored to {before}",
            p.cwnd()
        );
        p.run(5 * MS, Fate::Deliver, Fate::Deliver);
        let c = p.counters();
        assert_eq!(c.spurious_timeouts, 0, "{c:?}");
        assert!(p.e[0].all_acked());
    }
}

#[cfg(test)]
mod pool_tests {
    use super::*;

    /// A stream of small messages allocates no buffer per message once warm.
    #[test]
    fn a_stream_of_small_messages_reuses_its_buffers() {
        let cfg = Config::default();
        let mut a = Engine::new(cfg.clone(), 0, 1);
        let mut b = Engine::new(cfg, 1, 1);
        a.add_peer(1, 0);
        b.add_peer(0, 0);
        let mut buf = vec![0u8; 2048];
        let mut now = 0;
        let mut sent = 0u64;
        let mut got = 0u64;
        let total = 200_000u64;
        let allocs = |a: &Engine, b: &Engine| a.engine_counters()[0] + b.engine_counters()[0];
        let mut warm = None;
        while got < total {
            if warm.is_none() && got >= total / 4 {
                warm = Some(allocs(&a, &b));
            }
            now += 1_000;
            while sent < total && a.can_send(1, 8) {
                let mut d = a.buffer(8);
                d.copy_from_slice(&sent.to_le_bytes());
                a.send(now, 1, 0, 0, d, Reliability::Reliable).unwrap();
                sent += 1;
            }
            for (from, to) in [(0, 1), (1, 0)] {
                let (src, dst) = if from == 0 {
                    (&mut a, &mut b)
                } else {
                    (&mut b, &mut a)
                };
                while let Some(t) = src.poll_transmit(now, &mut buf) {
                    assert_eq!(t.peer, to);
                    dst.handle(now, &buf[..t.len]).unwrap();
                }
                let _ = from;
            }
            a.handle_timeout(now);
            b.handle_timeout(now);
            while let Some(ev) = b.poll_event() {
                if let Event::Message { data, credit, .. } = ev {
                    got += 1;
                    b.recycle(data);
                    b.release(credit);
                }
            }
        }
        // Filling the window allocates (a few thousand buffers); after that, nothing.
        let (warm, end) = (warm.unwrap(), allocs(&a, &b));
        assert!(
            warm > 0 && warm <= 3 * 8192,
            "{warm} allocations to warm up"
        );
        assert_eq!(end, warm, "allocations after warm-up, for 150,000 messages");
    }

    /// Messages of several megabytes copied in (`buffer_from`, as a send from a borrowed
    /// buffer does), a few in flight at a time: once warm they reuse the same buffers instead
    /// of going back to the allocator (which trimmed and faulted them in again every window).
    /// What the pool keeps of them stays within its bound.
    #[test]
    fn a_stream_of_large_copies_reuses_its_buffers_within_the_bound() {
        let cfg = Config {
            rndv_threshold: 8 << 20,
            pool_bytes: 16 << 20,
            // Four messages of 2 MiB queued at once, all under the rendezvous threshold.
            eager_budget: 16 << 20,
            ..Config::default()
        };
        let (mut a, mut b) = (Engine::new(cfg.clone(), 0, 1), Engine::new(cfg, 1, 1));
        a.add_peer(1, 0);
        b.add_peer(0, 0);
        let len = 2 << 20;
        let src: Vec<u8> = (0..len).map(|i| (i / 7) as u8).collect();
        let (mut now, mut got) = (0, Vec::new());
        let mut warm = None;
        for window in 0..12 {
            if window == 4 {
                warm = Some(a.engine_counters()[0]);
            }
            for _ in 0..4 {
                let d = a.buffer_from(&src);
                a.send(now, 1, 0, 0, d, Reliability::Reliable).unwrap();
            }
            while got.len() < 4 * (window + 1) {
                now += 50_000;
                exchange(&mut a, &mut b, now, &mut got);
                assert!(now < 100_000_000_000, "window {window} never arrived");
            }
            for d in got.iter_mut().skip(4 * window) {
                assert!(*d == src, "a message arrived altered");
                b.recycle(std::mem::take(d));
            }
            // The sender's copies come back once acknowledged.
            for _ in 0..20 {
                now += 50_000;
                exchange(&mut a, &mut b, now, &mut got);
            }
        }
        let warm = warm.unwrap();
        assert_eq!(
            a.engine_counters()[0],
            warm,
            "the sender allocated after warm-up"
        );
        assert!(a.pool.large_bytes <= peer::LARGE_KEEP && b.pool.large_bytes <= peer::LARGE_KEEP);
        assert!(
            a.pool.large_bytes >= 4 * len,
            "the window's copies were not kept"
        );
    }

    /// One round of packets both ways and timers; the receiver consumes what arrived.
    fn exchange(a: &mut Engine, b: &mut Engine, now: Instant, got: &mut Vec<Vec<u8>>) {
        let mut buf = vec![0u8; 2048];
        for from in [0, 1] {
            let (src, dst) = if from == 0 {
                (&mut *a, &mut *b)
            } else {
                (&mut *b, &mut *a)
            };
            while let Some(t) = src.poll_transmit(now, &mut buf) {
                dst.handle(now, &buf[..t.len]).unwrap();
            }
        }
        a.handle_timeout(now);
        b.handle_timeout(now);
        while let Some(ev) = b.poll_event() {
            if let Event::Message { data, credit, .. } = ev {
                got.push(data);
                b.release(credit);
            }
        }
    }

    /// A buffer sent with send_returning comes back, the same allocation, once acknowledged;
    /// an abandoned one goes to the pool instead.
    #[test]
    fn a_buffer_sent_for_return_comes_back_after_the_acknowledgement() {
        let cfg = Config::default();
        let (mut a, mut b) = (Engine::new(cfg.clone(), 0, 1), Engine::new(cfg, 1, 1));
        a.add_peer(1, 0);
        b.add_peer(0, 0);
        let data: Vec<u8> = (0..100_000).map(|i| i as u8).collect();
        let sent = data.clone();
        let ptr = sent.as_ptr();
        let id = a.send_returning(0, 1, 3, 4, sent).unwrap();
        let id2 = a.send_returning(0, 1, 3, 4, vec![1; 50_000]).unwrap();
        a.abandon(1, id2);
        assert!(!a.is_returned(1, id));
        let mut got = Vec::new();
        let mut now = 0;
        while !a.is_returned(1, id) {
            now += 100_000;
            exchange(&mut a, &mut b, now, &mut got);
            assert!(now < 10_000_000_000, "never acknowledged");
        }
        let back = a.take_returned(1, id).unwrap();
        assert_eq!(back.as_ptr(), ptr, "the same buffer, not a copy");
        assert_eq!(back, data);
        assert_eq!(got[0], data);
        assert_eq!(a.take_returned(1, id), None, "given back once");
        for _ in 0..100 {
            now += 100_000;
            exchange(&mut a, &mut b, now, &mut got);
        }
        assert_eq!(got.len(), 2);
        assert!(!a.is_returned(1, id2), "an abandoned buffer is not kept");
    }
}

#[cfg(test)]
mod burst_tests {
    use super::*;

    /// The first packets of a bulk message: the burst a device may join them into.
    fn first_burst(cfg: Config) -> u32 {
        let mut a = Engine::new(cfg, 0, 1);
        a.add_peer(1, 0);
        let d = a.buffer(100_000);
        a.send(0, 1, 0, 0, d, Reliability::Reliable).unwrap();
        let mut buf = vec![0u8; 2048];
        a.poll_transmit(0, &mut buf).expect("a DATA packet").burst
    }

    /// Issue 15: a sender's burst is half the window in force, so that two bursts are in flight
    /// (congestion control's window at the start, else the fixed window).
    #[test]
    fn a_burst_is_half_the_window_in_force() {
        assert_eq!(
            first_burst(Config::default()),
            (cc::INITIAL_WINDOW / 2.0) as u32
        );
        let fixed = Config {
            congestion_control: false,
            window: 64,
            ..Config::default()
        };
        assert_eq!(first_burst(fixed), 32);
    }
}

#[cfg(test)]
mod sched_tests {
    use super::*;

    /// With many peers, a peer that changed is served, the others are not asked, and what is due
    /// because time passed (here every peer's heartbeat) comes out when its time comes, once per
    /// peer, whether or not the caller ran the timers first.
    #[test]
    fn many_peers_are_served_when_they_change_or_come_due() {
        let cfg = Config::default();
        let hb = cfg.heartbeat;
        let mut e = Engine::new(cfg, 0, 9);
        for r in 1..=1000 {
            e.add_peer(r, 0);
        }
        let mut buf = vec![0u8; 2048];
        // Nothing to send yet: the first call looks at every new peer once, then none.
        assert_eq!(e.poll_transmit(1, &mut buf), None);
        assert_eq!(e.poll_timeout(), Some(hb));
        let d = e.buffer(8);
        e.send(2, 500, 1, 0, d, Reliability::Reliable).unwrap();
        let t = e
            .poll_transmit(3, &mut buf)
            .expect("the message to peer 500");
        assert_eq!(t.peer, 500);
        assert_eq!(e.poll_transmit(3, &mut buf), None);
        // Peer 500's retransmission timer is now the earliest.
        assert!(e.poll_timeout().unwrap() < hb);
        // At the heartbeat every other peer sends one, without handle_timeout being called.
        let mut seen = vec![0u32; 1001];
        while let Some(t) = e.poll_transmit(hb, &mut buf) {
            seen[t.peer as usize] += 1;
        }
        for (r, &n) in seen.iter().enumerate().skip(1) {
            if r != 500 {
                assert_eq!(n, 1, "peer {r} sent {n} heartbeats");
            }
        }
        assert_eq!(seen[0], 0);
        assert_eq!(e.poll_transmit(hb, &mut buf), None);
    }
}
