//! volley's network wire format (layer 0: no I/O, no unsafe, no allocation).
//!
//! Every packet is a common header followed by a body that depends on its kind; docs/protocol.md
//! draws each one. As in smoltcp, a [`Packet`] is a zero-copy view over any byte buffer:
//! [`Packet::new_checked`] verifies the length, magic, version and kind once, after which no
//! accessor can panic; [`Repr`] is the parsed, owned-or-borrowed meaning of a packet, with
//! [`Repr::parse`] (which also checks the CRC32C and the job token) and [`Repr::emit`].
//!
//! All integers are big-endian (network order). The CRC32C covers the whole packet with its own
//! field taken as zero.

#![forbid(unsafe_code)]

use std::fmt;

/// "VL": the first two bytes of every volley packet.
pub const MAGIC: u16 = 0x564C;
/// Version of this format. A packet of any other version is dropped (and counted).
/// 2: DATA and RTS carry an envelope (context, tag) where version 1 had (source port,
/// destination port), context first.
pub const VERSION: u8 = 2;
/// volley's EtherType on raw Ethernet (IEEE 802 local experimental 2).
pub const ETHERTYPE: u16 = 0x88B5;

/// Bytes of the common header.
pub const HEADER_LEN: usize = 28;
/// Bytes of the header every sequenced packet (DATA, RTS, CTS) adds after the common one.
pub const SEQ_LEN: usize = 24;
/// Bytes before the payload of a DATA packet.
pub const DATA_HEADER_LEN: usize = HEADER_LEN + SEQ_LEN + 24;
pub const RTS_LEN: usize = HEADER_LEN + SEQ_LEN + 16;
pub const CTS_LEN: usize = HEADER_LEN + SEQ_LEN;
/// Bytes of an ACK without selective-acknowledgement ranges.
pub const ACK_LEN: usize = HEADER_LEN + 16;
/// Bytes of one selective-acknowledgement range.
pub const RANGE_LEN: usize = 8;
/// Most ranges one ACK carries.
pub const MAX_RANGES: usize = 32;

mod field {
    pub type Field = core::ops::Range<usize>;
    // Common header.
    pub const MAGIC: Field = 0..2;
    pub const VERSION: usize = 2;
    pub const KIND: usize = 3;
    /// Length of the whole packet: a device may deliver more (Ethernet pads short frames).
    pub const LEN: Field = 4..6;
    pub const HDR_RESERVED: Field = 6..8;
    pub const TOKEN: Field = 8..16;
    pub const SRC: Field = 16..20;
    pub const DST: Field = 20..24;
    pub const CRC: Field = 24..28;
    // Sequenced header (DATA, RTS, CTS).
    pub const SEQ: Field = 28..32;
    pub const ACK: Field = 32..36;
    pub const CREDIT: Field = 36..44;
    pub const FLAGS: Field = 44..46;
    pub const RESERVED: Field = 46..48;
    pub const MSG: Field = 48..52;
    // DATA and RTS.
    /// The envelope: the context (a Directed-Point port, or a face's communicator) and the tag
    /// (the sending port, or the face's message tag) that receives match on.
    pub const CONTEXT: Field = 52..56;
    pub const TAG: Field = 56..60;
    pub const MSG_LEN: Field = 60..68;
    // DATA.
    pub const OFFSET: Field = 68..76;
    // ACK.
    pub const ACK_CUM: Field = 28..32;
    pub const ACK_CREDIT: Field = 32..40;
    pub const ACK_FLAGS: Field = 40..42;
    pub const ACK_NRANGES: Field = 42..44;
}

/// The rank a packet says it comes from, read without any other check (a device compares it
/// with the address the packet came from before the packet is parsed); None when the buffer
/// is too short to hold a common header's source field.
pub fn claimed_source(buf: &[u8]) -> Option<u32> {
    buf.get(field::SRC)
        .map(|b| u32::from_be_bytes(b.try_into().expect("4 bytes")))
}

/// The bytes, at their offsets in the packet, that every packet of job `token` for rank `dst`
/// carries whatever its kind: the magic number, the token, the destination. For a filter that
/// must pick a rank's packets out of an interface's frames without parsing them (the XDP
/// program of the AF_XDP device).
pub fn identity(token: u64, dst: u32) -> [(usize, Vec<u8>); 3] {
    [
        (field::MAGIC.start, MAGIC.to_be_bytes().to_vec()),
        (field::TOKEN.start, token.to_be_bytes().to_vec()),
        (field::DST.start, dst.to_be_bytes().to_vec()),
    ]
}

/// What a packet is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum Kind {
    /// A fragment of a message (eager, best-effort, or the data of a rendezvous).
    Data = 1,
    /// Request to send: announces a large message; its data waits for a CTS.
    Rts = 2,
    /// Clear to send: the receiver has a place for the announced message.
    Cts = 3,
    /// Cumulative and selective acknowledgement, credit update, heartbeat.
    Ack = 4,
}

impl Kind {
    fn from_u8(v: u8) -> Option<Kind> {
        Some(match v {
            1 => Kind::Data,
            2 => Kind::Rts,
            3 => Kind::Cts,
            4 => Kind::Ack,
            _ => return None,
        })
    }

    /// Bytes a packet of this kind has at least.
    pub fn min_len(self) -> usize {
        match self {
            Kind::Data => DATA_HEADER_LEN,
            Kind::Rts => RTS_LEN,
            Kind::Cts => CTS_LEN,
            Kind::Ack => ACK_LEN,
        }
    }
}

/// Flags of a sequenced packet.
pub mod flags {
    /// Not sequenced, never acknowledged or retransmitted: GAMMA's best-effort mode. `seq` is 0
    /// and `msg` numbers the best-effort messages.
    pub const BEST_EFFORT: u16 = 1;
    /// `ack` and `credit` are valid (piggybacked acknowledgement).
    pub const ACK_VALID: u16 = 2;
    pub const ALL: u16 = BEST_EFFORT | ACK_VALID;
}

/// Flags of an ACK.
pub mod ack_flags {
    /// The sender wants an ACK back at once (credit probe, heartbeat that wants an answer).
    pub const WANT_ACK: u16 = 1;
    /// The sender closed its world: nothing more will come from it (not a failure).
    pub const BYE: u16 = 2;
    pub const ALL: u16 = WANT_ACK | BYE;
}

/// Why bytes are not a packet of this job. Each is counted separately by the protocol engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Malformed {
    /// Shorter than its kind requires (or than any header).
    Truncated,
    /// Not volley's magic: another protocol.
    Magic,
    /// volley, but another version of the format.
    Version,
    /// An unknown packet kind.
    Kind,
    /// The CRC32C does not match: corrupted on the way.
    Checksum,
    /// Another job's token.
    Token,
    /// Well formed and intact, but a field is impossible (reserved bits set, ranges past the
    /// end, a fragment outside its message).
    Field,
}

impl fmt::Display for Malformed {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Malformed::Truncated => "truncated packet",
            Malformed::Magic => "not a volley packet (wrong magic)",
            Malformed::Version => "volley packet of another version",
            Malformed::Kind => "unknown packet kind",
            Malformed::Checksum => "CRC32C mismatch",
            Malformed::Token => "packet of another job (wrong token)",
            Malformed::Field => "impossible field value",
        })
    }
}

fn be16(b: &[u8], f: field::Field) -> u16 {
    u16::from_be_bytes([b[f.start], b[f.start + 1]])
}
fn be32(b: &[u8], f: field::Field) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[f]);
    u32::from_be_bytes(a)
}
fn be64(b: &[u8], f: field::Field) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[f]);
    u64::from_be_bytes(a)
}
fn put16(b: &mut [u8], f: field::Field, v: u16) {
    b[f].copy_from_slice(&v.to_be_bytes());
}
fn put32(b: &mut [u8], f: field::Field, v: u32) {
    b[f].copy_from_slice(&v.to_be_bytes());
}
fn put64(b: &mut [u8], f: field::Field, v: u64) {
    b[f].copy_from_slice(&v.to_be_bytes());
}

/// The CRC32C of a whole packet, its CRC field taken as zero.
pub fn checksum(packet: &[u8]) -> u32 {
    let c = crc32c::crc32c(&packet[..field::CRC.start]);
    let c = crc32c::crc32c_append(c, &[0u8; 4]);
    crc32c::crc32c_append(c, &packet[field::CRC.end..])
}

/// A zero-copy view of a volley packet.
#[derive(Debug, Clone)]
pub struct Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Packet<T> {
    /// Wraps a buffer without any check: accessors may panic on a short buffer.
    pub fn new_unchecked(buffer: T) -> Packet<T> {
        Packet { buffer }
    }

    /// Wraps a buffer after [`Packet::check_len`].
    pub fn new_checked(buffer: T) -> Result<Packet<T>, Malformed> {
        let p = Packet::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks magic, version, kind and that the buffer is long enough for that kind (and, for an
    /// ACK, for its ranges). Afterwards no accessor panics.
    pub fn check_len(&self) -> Result<(), Malformed> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN {
            // Too short even to tell what it is; a foreign frame would still be counted as
            // foreign if its first two bytes say so.
            if b.len() >= 2 && be16(b, field::MAGIC) != MAGIC {
                return Err(Malformed::Magic);
            }
            return Err(Malformed::Truncated);
        }
        if be16(b, field::MAGIC) != MAGIC {
            return Err(Malformed::Magic);
        }
        if b[field::VERSION] != VERSION {
            return Err(Malformed::Version);
        }
        let kind = Kind::from_u8(b[field::KIND]).ok_or(Malformed::Kind)?;
        let len = be16(b, field::LEN) as usize;
        if b.len() < len {
            return Err(Malformed::Truncated);
        }
        if len < kind.min_len() {
            return Err(Malformed::Truncated);
        }
        if kind == Kind::Ack {
            let n = be16(b, field::ACK_NRANGES) as usize;
            if n > MAX_RANGES {
                return Err(Malformed::Field);
            }
            if len < ACK_LEN + n * RANGE_LEN {
                return Err(Malformed::Truncated);
            }
        }
        Ok(())
    }

    /// Bytes of the packet proper (the buffer may be longer: padding).
    pub fn packet_len(&self) -> usize {
        be16(self.buffer.as_ref(), field::LEN) as usize
    }
    /// The packet without any padding after it.
    pub fn bytes(&self) -> &[u8] {
        &self.buffer.as_ref()[..self.packet_len()]
    }

    pub fn into_inner(self) -> T {
        self.buffer
    }

    pub fn kind(&self) -> Kind {
        // check_len guaranteed the kind is known.
        Kind::from_u8(self.buffer.as_ref()[field::KIND]).unwrap_or(Kind::Ack)
    }
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[field::VERSION]
    }
    pub fn token(&self) -> u64 {
        be64(self.buffer.as_ref(), field::TOKEN)
    }
    pub fn src(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SRC)
    }
    pub fn dst(&self) -> u32 {
        be32(self.buffer.as_ref(), field::DST)
    }
    pub fn crc(&self) -> u32 {
        be32(self.buffer.as_ref(), field::CRC)
    }
    /// Whether the CRC field matches the packet.
    pub fn verify_checksum(&self) -> bool {
        checksum(self.bytes()) == self.crc()
    }

    // Sequenced packets.
    pub fn seq(&self) -> u32 {
        be32(self.buffer.as_ref(), field::SEQ)
    }
    pub fn ack(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK)
    }
    pub fn credit(&self) -> u64 {
        be64(self.buffer.as_ref(), field::CREDIT)
    }
    pub fn flags(&self) -> u16 {
        be16(self.buffer.as_ref(), field::FLAGS)
    }
    pub fn reserved(&self) -> u16 {
        be16(self.buffer.as_ref(), field::RESERVED)
    }
    pub fn msg(&self) -> u32 {
        be32(self.buffer.as_ref(), field::MSG)
    }
    pub fn tag(&self) -> u32 {
        be32(self.buffer.as_ref(), field::TAG)
    }
    pub fn context(&self) -> u32 {
        be32(self.buffer.as_ref(), field::CONTEXT)
    }
    pub fn msg_len(&self) -> u64 {
        be64(self.buffer.as_ref(), field::MSG_LEN)
    }
    pub fn offset(&self) -> u64 {
        be64(self.buffer.as_ref(), field::OFFSET)
    }
    pub fn payload(&self) -> &[u8] {
        &self.bytes()[DATA_HEADER_LEN..]
    }

    // ACK.
    pub fn ack_cum(&self) -> u32 {
        be32(self.buffer.as_ref(), field::ACK_CUM)
    }
    pub fn ack_credit(&self) -> u64 {
        be64(self.buffer.as_ref(), field::ACK_CREDIT)
    }
    pub fn ack_flags(&self) -> u16 {
        be16(self.buffer.as_ref(), field::ACK_FLAGS)
    }
    pub fn ack_nranges(&self) -> usize {
        be16(self.buffer.as_ref(), field::ACK_NRANGES) as usize
    }
    /// The i-th selective-acknowledgement range `[start, end)`.
    pub fn ack_range(&self, i: usize) -> (u32, u32) {
        let o = ACK_LEN + i * RANGE_LEN;
        let b = self.buffer.as_ref();
        (be32(b, o..o + 4), be32(b, o + 4..o + 8))
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Packet<T> {
    fn b(&mut self) -> &mut [u8] {
        self.buffer.as_mut()
    }
    /// Writes the common header (CRC field zero until [`Packet::fill_checksum`]).
    pub fn set_header(&mut self, kind: Kind, token: u64, src: u32, dst: u32) {
        let b = self.b();
        put16(b, field::MAGIC, MAGIC);
        b[field::VERSION] = VERSION;
        b[field::KIND] = kind as u8;
        let len = b.len() as u16;
        put16(b, field::LEN, len);
        put16(b, field::HDR_RESERVED, 0);
        put64(b, field::TOKEN, token);
        put32(b, field::SRC, src);
        put32(b, field::DST, dst);
        put32(b, field::CRC, 0);
    }
    pub fn fill_checksum(&mut self) {
        let c = checksum(self.bytes());
        put32(self.b(), field::CRC, c);
    }
    pub fn payload_mut(&mut self) -> &mut [u8] {
        &mut self.b()[DATA_HEADER_LEN..]
    }
}

/// The acknowledgement and credit a sequenced packet may carry for the reverse direction.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Piggyback {
    /// Next sequence number expected from the packet's receiver (everything before has arrived).
    pub ack: u32,
    /// Bytes of eager messages the packet's receiver may have sent in all, from the start.
    pub credit: u64,
}

/// The fields every sequenced packet has.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct Seq {
    /// Sequence number (0 and meaningless for best-effort packets).
    pub seq: u32,
    pub piggyback: Option<Piggyback>,
    pub best_effort: bool,
    /// Message number: the sender's own, except in a CTS, where it is the number of the
    /// message being cleared (a message of the CTS's receiver).
    pub msg: u32,
}

/// The selective acknowledgement ranges of an ACK, read in place.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Ranges<'a> {
    bytes: &'a [u8],
}

impl<'a> Ranges<'a> {
    pub fn len(&self) -> usize {
        self.bytes.len() / RANGE_LEN
    }
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }
    pub fn get(&self, i: usize) -> (u32, u32) {
        let o = i * RANGE_LEN;
        (be32(self.bytes, o..o + 4), be32(self.bytes, o + 4..o + 8))
    }
    pub fn iter(&self) -> impl Iterator<Item = (u32, u32)> + 'a {
        let r = *self;
        (0..r.len()).map(move |i| r.get(i))
    }
}

/// What a packet says, past its common header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    Data {
        seq: Seq,
        tag: u32,
        context: u32,
        msg_len: u64,
        offset: u64,
        payload: &'a [u8],
    },
    Rts {
        seq: Seq,
        tag: u32,
        context: u32,
        msg_len: u64,
    },
    Cts {
        seq: Seq,
    },
    Ack {
        cum: u32,
        credit: u64,
        want_ack: bool,
        bye: bool,
        /// `[start, end)` ranges received beyond `cum`.
        ranges: AckRanges<'a>,
    },
}

/// Ranges of an ACK: read from a packet, or given to [`Repr::emit`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckRanges<'a> {
    Wire(Ranges<'a>),
    Slice(&'a [(u32, u32)]),
}

impl AckRanges<'_> {
    pub fn len(&self) -> usize {
        match self {
            AckRanges::Wire(r) => r.len(),
            AckRanges::Slice(s) => s.len(),
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn get(&self, i: usize) -> (u32, u32) {
        match self {
            AckRanges::Wire(r) => r.get(i),
            AckRanges::Slice(s) => s[i],
        }
    }
}

/// A parsed packet: its common header and its body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Repr<'a> {
    pub token: u64,
    pub src: u32,
    pub dst: u32,
    pub body: Body<'a>,
}

impl<'a> Repr<'a> {
    /// Parses and validates a packet of the job `token`: length, magic, version, kind, CRC32C,
    /// token, reserved bits, and that a fragment lies inside its message.
    pub fn parse(bytes: &'a [u8], token: u64) -> Result<Repr<'a>, Malformed> {
        Repr::parse_with(bytes, token, true)
    }

    /// [`Repr::parse`]; without `crc`, the CRC32C is not checked (the device below vouches for
    /// every byte: packets sealed under the job's key that opened, see volley-transport's auth).
    pub fn parse_with(bytes: &'a [u8], token: u64, crc: bool) -> Result<Repr<'a>, Malformed> {
        let p = Packet::new_checked(bytes)?;
        if crc && !p.verify_checksum() {
            return Err(Malformed::Checksum);
        }
        // Anything after the packet is the device's padding.
        let bytes = &bytes[..p.packet_len()];
        let p = Packet::new_unchecked(bytes);
        if be16(bytes, field::HDR_RESERVED) != 0 {
            return Err(Malformed::Field);
        }
        if p.token() != token {
            return Err(Malformed::Token);
        }
        let seq = || -> Result<Seq, Malformed> {
            let f = p.flags();
            if f & !flags::ALL != 0 || p.reserved() != 0 {
                return Err(Malformed::Field);
            }
            Ok(Seq {
                seq: p.seq(),
                piggyback: (f & flags::ACK_VALID != 0).then(|| Piggyback {
                    ack: p.ack(),
                    credit: p.credit(),
                }),
                best_effort: f & flags::BEST_EFFORT != 0,
                msg: p.msg(),
            })
        };
        let body = match p.kind() {
            Kind::Data => {
                let payload = &bytes[DATA_HEADER_LEN..];
                let (len, off) = (p.msg_len(), p.offset());
                let end = off.checked_add(payload.len() as u64);
                if !matches!(end, Some(e) if e <= len) {
                    return Err(Malformed::Field);
                }
                Body::Data {
                    seq: seq()?,
                    tag: p.tag(),
                    context: p.context(),
                    msg_len: len,
                    offset: off,
                    payload,
                }
            }
            Kind::Rts => Body::Rts {
                seq: seq()?,
                tag: p.tag(),
                context: p.context(),
                msg_len: p.msg_len(),
            },
            Kind::Cts => Body::Cts { seq: seq()? },
            Kind::Ack => {
                let f = p.ack_flags();
                if f & !ack_flags::ALL != 0 {
                    return Err(Malformed::Field);
                }
                let n = p.ack_nranges();
                let ranges = Ranges {
                    bytes: &bytes[ACK_LEN..ACK_LEN + n * RANGE_LEN],
                };
                if ranges
                    .iter()
                    .any(|(s, e)| e.wrapping_sub(s) == 0 || e.wrapping_sub(s) > 1 << 30)
                {
                    return Err(Malformed::Field);
                }
                Body::Ack {
                    cum: p.ack_cum(),
                    credit: p.ack_credit(),
                    want_ack: f & ack_flags::WANT_ACK != 0,
                    bye: f & ack_flags::BYE != 0,
                    ranges: AckRanges::Wire(ranges),
                }
            }
        };
        Ok(Repr {
            token: p.token(),
            src: p.src(),
            dst: p.dst(),
            body,
        })
    }

    fn kind(&self) -> Kind {
        match self.body {
            Body::Data { .. } => Kind::Data,
            Body::Rts { .. } => Kind::Rts,
            Body::Cts { .. } => Kind::Cts,
            Body::Ack { .. } => Kind::Ack,
        }
    }

    /// Bytes [`Repr::emit`] writes.
    pub fn buffer_len(&self) -> usize {
        match self.body {
            Body::Data { payload, .. } => DATA_HEADER_LEN + payload.len(),
            Body::Rts { .. } => RTS_LEN,
            Body::Cts { .. } => CTS_LEN,
            Body::Ack { ranges, .. } => ACK_LEN + ranges.len() * RANGE_LEN,
        }
    }

    /// Writes the packet, CRC included, to the front of `buf` and returns its length.
    ///
    /// # Panics
    /// If `buf` is shorter than [`Repr::buffer_len`] or an ACK has more than [`MAX_RANGES`]
    /// ranges: both are the caller's bugs, not the network's.
    pub fn emit(&self, buf: &mut [u8]) -> usize {
        self.emit_with(buf, true)
    }

    /// [`Repr::emit`]; without `crc`, the CRC field stays zero (see [`Repr::parse_with`]).
    pub fn emit_with(&self, buf: &mut [u8], crc: bool) -> usize {
        let len = self.buffer_len();
        let mut p = Packet::new_unchecked(&mut buf[..len]);
        p.set_header(self.kind(), self.token, self.src, self.dst);
        let b = p.b();
        let put_seq = |b: &mut [u8], s: &Seq| {
            put32(b, field::SEQ, s.seq);
            let pb = s.piggyback.unwrap_or_default();
            put32(b, field::ACK, pb.ack);
            put64(b, field::CREDIT, pb.credit);
            let mut f = 0;
            if s.best_effort {
                f |= flags::BEST_EFFORT;
            }
            if s.piggyback.is_some() {
                f |= flags::ACK_VALID;
            }
            put16(b, field::FLAGS, f);
            put16(b, field::RESERVED, 0);
            put32(b, field::MSG, s.msg);
        };
        match self.body {
            Body::Data {
                seq,
                tag,
                context,
                msg_len,
                offset,
                payload,
            } => {
                put_seq(b, &seq);
                put32(b, field::TAG, tag);
                put32(b, field::CONTEXT, context);
                put64(b, field::MSG_LEN, msg_len);
                put64(b, field::OFFSET, offset);
                b[DATA_HEADER_LEN..].copy_from_slice(payload);
            }
            Body::Rts {
                seq,
                tag,
                context,
                msg_len,
            } => {
                put_seq(b, &seq);
                put32(b, field::TAG, tag);
                put32(b, field::CONTEXT, context);
                put64(b, field::MSG_LEN, msg_len);
            }
            Body::Cts { seq } => put_seq(b, &seq),
            Body::Ack {
                cum,
                credit,
                want_ack,
                bye,
                ranges,
            } => {
                assert!(ranges.len() <= MAX_RANGES, "too many ACK ranges");
                put32(b, field::ACK_CUM, cum);
                put64(b, field::ACK_CREDIT, credit);
                let mut f = 0;
                if want_ack {
                    f |= ack_flags::WANT_ACK;
                }
                if bye {
                    f |= ack_flags::BYE;
                }
                put16(b, field::ACK_FLAGS, f);
                put16(b, field::ACK_NRANGES, ranges.len() as u16);
                for i in 0..ranges.len() {
                    let (s, e) = ranges.get(i);
                    let o = ACK_LEN + i * RANGE_LEN;
                    put32(b, o..o + 4, s);
                    put32(b, o + 4..o + 8, e);
                }
            }
        }
        if crc {
            p.fill_checksum();
        }
        len
    }
}

/// Writes the header of a DATA packet whose payload the caller has already placed (or will
/// place) at `buf[DATA_HEADER_LEN..DATA_HEADER_LEN + payload_len]`, then its CRC (unless not
/// `crc`, see [`Repr::parse_with`]). This is the transmit path's way to copy a fragment once,
/// straight from the message into the device's buffer. Returns the packet length.
#[allow(clippy::too_many_arguments)]
pub fn emit_data_header(
    buf: &mut [u8],
    token: u64,
    src: u32,
    dst: u32,
    seq: &Seq,
    tag: u32,
    context: u32,
    msg_len: u64,
    offset: u64,
    payload_len: usize,
    crc: bool,
) -> usize {
    let len = DATA_HEADER_LEN + payload_len;
    let repr = Repr {
        token,
        src,
        dst,
        body: Body::Data {
            seq: *seq,
            tag,
            context,
            msg_len,
            offset,
            payload: &[],
        },
    };
    // Emit the header alone, then checksum the full packet.
    let mut hdr = [0u8; DATA_HEADER_LEN];
    repr.emit_with(&mut hdr, false);
    buf[..DATA_HEADER_LEN].copy_from_slice(&hdr);
    put16(buf, field::LEN, len as u16);
    if crc {
        let mut p = Packet::new_unchecked(&mut buf[..len]);
        p.fill_checksum();
    }
    len
}

#[cfg(test)]
mod tests;
