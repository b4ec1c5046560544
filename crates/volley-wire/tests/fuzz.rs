//! Fuzzing the wire parsers on stable Rust (issue 16, defect 11): cargo-fuzz needs a nightly
//! toolchain, so these are proptest properties with a fixed budget of cases, run by
//! `cargo test --release -p volley-wire --test fuzz` like any other test.
//!
//! Inputs start from real encodings (every packet kind built with `Repr::emit`, as the golden
//! vectors in src/tests.rs are) and are then mutated: bit flips, bursts, truncation, padding,
//! random bytes spliced in, fields rewritten behind a recomputed CRC; plus purely random bytes.
//!
//! The seed is fixed so that CI is repeatable; `VOLLEY_FUZZ_SEED=<n>` explores other inputs and
//! `VOLLEY_FUZZ_CASES=<n>` runs more (or fewer) cases per property.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngSeed;
use volley_wire::{
    ack_flags, claimed_source, emit_data_header, flags, AckRanges, Body, Kind, Malformed, Packet,
    Piggyback, Repr, Seq, ACK_LEN, DATA_HEADER_LEN, HEADER_LEN, MAGIC, MAX_RANGES, RANGE_LEN,
    VERSION,
};

const TOKEN: u64 = 0x0123_4567_89ab_cdef;

/// Bytes of the length field and of the CRC field: a change there alters what the CRC covers
/// (or the CRC itself), so CRC32C's guarantees about error patterns apply only outside them.
const LEN_FIELD: std::ops::Range<usize> = 4..6;
const CRC_FIELD: std::ops::Range<usize> = 24..28;

fn config(cases: u32) -> ProptestConfig {
    let env = |k: &str| std::env::var(k).ok().and_then(|v| v.parse::<u64>().ok());
    ProptestConfig {
        cases: env("VOLLEY_FUZZ_CASES").map_or(cases, |c| c as u32),
        rng_seed: RngSeed::Fixed(env("VOLLEY_FUZZ_SEED").unwrap_or(0x766f_6c6c_6579)),
        // A failure prints its (shrunk) input; nothing is written into the source tree.
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

// ------------------------------------------------------------------ owned packets

/// A packet's meaning, owning its payload and ranges (a [`Repr`] borrows them).
#[derive(Clone, Debug, PartialEq, Eq)]
struct Spec {
    token: u64,
    src: u32,
    dst: u32,
    body: SpecBody,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum SpecBody {
    Data {
        seq: Seq,
        tag: u32,
        context: u32,
        msg_len: u64,
        offset: u64,
        payload: Vec<u8>,
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
        ranges: Vec<(u32, u32)>,
    },
}

impl Spec {
    fn repr(&self) -> Repr<'_> {
        let body = match &self.body {
            SpecBody::Data {
                seq,
                tag,
                context,
                msg_len,
                offset,
                payload,
            } => Body::Data {
                seq: *seq,
                tag: *tag,
                context: *context,
                msg_len: *msg_len,
                offset: *offset,
                payload,
            },
            SpecBody::Rts {
                seq,
                tag,
                context,
                msg_len,
            } => Body::Rts {
                seq: *seq,
                tag: *tag,
                context: *context,
                msg_len: *msg_len,
            },
            SpecBody::Cts { seq } => Body::Cts { seq: *seq },
            SpecBody::Ack {
                cum,
                credit,
                want_ack,
                bye,
                ranges,
            } => Body::Ack {
                cum: *cum,
                credit: *credit,
                want_ack: *want_ack,
                bye: *bye,
                ranges: AckRanges::Slice(ranges),
            },
        };
        Repr {
            token: self.token,
            src: self.src,
            dst: self.dst,
            body,
        }
    }

    fn kind(&self) -> Kind {
        match self.body {
            SpecBody::Data { .. } => Kind::Data,
            SpecBody::Rts { .. } => Kind::Rts,
            SpecBody::Cts { .. } => Kind::Cts,
            SpecBody::Ack { .. } => Kind::Ack,
        }
    }

    fn emit(&self) -> Vec<u8> {
        let r = self.repr();
        let mut b = vec![0u8; r.buffer_len()];
        assert_eq!(r.emit(&mut b), b.len(), "emit writes buffer_len bytes");
        b
    }
}

/// The owned meaning of a parsed packet: ranges read from the wire compare equal to the same
/// ranges given as a slice.
fn own(r: &Repr<'_>) -> Spec {
    let body = match r.body {
        Body::Data {
            seq,
            tag,
            context,
            msg_len,
            offset,
            payload,
        } => SpecBody::Data {
            seq,
            tag,
            context,
            msg_len,
            offset,
            payload: payload.to_vec(),
        },
        Body::Rts {
            seq,
            tag,
            context,
            msg_len,
        } => SpecBody::Rts {
            seq,
            tag,
            context,
            msg_len,
        },
        Body::Cts { seq } => SpecBody::Cts { seq },
        Body::Ack {
            cum,
            credit,
            want_ack,
            bye,
            ranges,
        } => SpecBody::Ack {
            cum,
            credit,
            want_ack,
            bye,
            ranges: (0..ranges.len()).map(|i| ranges.get(i)).collect(),
        },
    };
    Spec {
        token: r.token,
        src: r.src,
        dst: r.dst,
        body,
    }
}

// ------------------------------------------------------------------ strategies

/// A u64 that is often small, sometimes at the edges, sometimes anything.
fn num64() -> impl Strategy<Value = u64> {
    prop_oneof![
        4 => 0u64..4096,
        1 => Just(0u64),
        1 => Just(u64::MAX),
        1 => (0u64..64).prop_map(|d| u64::MAX - d),
        1 => (0u32..64).prop_map(|s| 1u64 << s),
        4 => any::<u64>(),
    ]
}

fn num32() -> impl Strategy<Value = u32> {
    prop_oneof![
        4 => 0u32..4096,
        1 => Just(u32::MAX),
        1 => (0u32..64).prop_map(|d| u32::MAX - d),
        4 => any::<u32>(),
    ]
}

fn seq() -> impl Strategy<Value = Seq> {
    (
        num32(),
        proptest::option::of((num32(), num64())),
        any::<bool>(),
        num32(),
    )
        .prop_map(|(seq, pb, best_effort, msg)| Seq {
            seq,
            piggyback: pb.map(|(ack, credit)| Piggyback { ack, credit }),
            best_effort,
            msg,
        })
}

/// Payloads: mostly small, up to a jumbo frame's.
fn payload() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        6 => proptest::collection::vec(any::<u8>(), 0..128),
        3 => proptest::collection::vec(any::<u8>(), 128..1500),
        1 => proptest::collection::vec(any::<u8>(), 1500..9000),
    ]
}

fn data_body() -> impl Strategy<Value = SpecBody> {
    (seq(), num32(), num32(), num64(), num64(), payload()).prop_map(
        |(seq, tag, context, off, extra, payload)| {
            // A valid fragment lies inside its message: offset + len <= msg_len, no overflow.
            let len = payload.len() as u64;
            let offset = off.min(u64::MAX - len);
            let msg_len = offset + len + extra.min(u64::MAX - offset - len);
            SpecBody::Data {
                seq,
                tag,
                context,
                msg_len,
                offset,
                payload,
            }
        },
    )
}

fn ack_body() -> impl Strategy<Value = SpecBody> {
    let range = (num32(), 1u32..=1 << 30).prop_map(|(s, w)| (s, s.wrapping_add(w)));
    (
        num32(),
        num64(),
        any::<bool>(),
        any::<bool>(),
        proptest::collection::vec(range, 0..=MAX_RANGES),
    )
        .prop_map(|(cum, credit, want_ack, bye, ranges)| SpecBody::Ack {
            cum,
            credit,
            want_ack,
            bye,
            ranges,
        })
}

fn body() -> impl Strategy<Value = SpecBody> {
    prop_oneof![
        data_body(),
        (seq(), num32(), num32(), num64()).prop_map(|(seq, tag, context, msg_len)| {
            SpecBody::Rts {
                seq,
                tag,
                context,
                msg_len,
            }
        }),
        seq().prop_map(|seq| SpecBody::Cts { seq }),
        ack_body(),
    ]
}

/// The common header's fields; the job token is mostly [`TOKEN`].
fn header() -> impl Strategy<Value = (u64, u32, u32)> {
    (
        prop_oneof![4 => Just(TOKEN), 1 => any::<u64>()],
        num32(),
        num32(),
    )
}

/// A valid packet of any kind.
fn spec() -> impl Strategy<Value = Spec> {
    (header(), body()).prop_map(|((token, src, dst), body)| Spec {
        token,
        src,
        dst,
        body,
    })
}

/// A valid DATA packet.
fn data_spec() -> impl Strategy<Value = Spec> {
    (header(), data_body()).prop_map(|((token, src, dst), body)| Spec {
        token,
        src,
        dst,
        body,
    })
}

/// Bytes that look enough like a packet to get past the first checks: magic, version, a kind
/// (sometimes unknown), a length field that is right, wrong or beyond the buffer, and for an
/// ACK a range count; everything else random.
fn plausible() -> impl Strategy<Value = Vec<u8>> {
    (
        proptest::collection::vec(any::<u8>(), HEADER_LEN..2100),
        0u8..6,
        prop_oneof![Just(None), any::<u16>().prop_map(Some)],
        prop_oneof![Just(None), (0u16..40).prop_map(Some)],
        any::<bool>(),
    )
        .prop_map(|(mut b, kind, len, nranges, fix_crc)| {
            b[..2].copy_from_slice(&MAGIC.to_be_bytes());
            b[2] = VERSION;
            b[3] = kind;
            let len = len.unwrap_or(b.len() as u16);
            b[4..6].copy_from_slice(&len.to_be_bytes());
            if let Some(n) = nranges {
                if b.len() >= ACK_LEN {
                    b[42..44].copy_from_slice(&n.to_be_bytes());
                }
            }
            if fix_crc {
                if let Ok(mut p) = Packet::new_checked(&mut b[..]) {
                    p.fill_checksum();
                }
            }
            b
        })
}

// ------------------------------------------------------------------ checks

/// Every accessor a packet of its kind has, as a receiver would call them after new_checked.
fn touch_all<T: AsRef<[u8]>>(p: &Packet<T>) {
    let _ = (p.version(), p.token(), p.src(), p.dst(), p.crc());
    let _ = p.verify_checksum();
    assert!(p.packet_len() >= p.kind().min_len());
    assert_eq!(p.bytes().len(), p.packet_len());
    match p.kind() {
        Kind::Data => {
            let _ = (
                p.seq(),
                p.ack(),
                p.credit(),
                p.flags(),
                p.reserved(),
                p.msg(),
            );
            let _ = (p.tag(), p.context(), p.msg_len(), p.offset());
            assert_eq!(p.payload().len(), p.packet_len() - DATA_HEADER_LEN);
        }
        Kind::Rts => {
            let _ = (
                p.seq(),
                p.ack(),
                p.credit(),
                p.flags(),
                p.reserved(),
                p.msg(),
            );
            let _ = (p.tag(), p.context(), p.msg_len());
        }
        Kind::Cts => {
            let _ = (
                p.seq(),
                p.ack(),
                p.credit(),
                p.flags(),
                p.reserved(),
                p.msg(),
            );
        }
        Kind::Ack => {
            let _ = (p.ack_cum(), p.ack_credit(), p.ack_flags());
            assert!(p.ack_nranges() <= MAX_RANGES);
            for i in 0..p.ack_nranges() {
                let _ = p.ack_range(i);
            }
        }
    }
}

/// Parses `b` every way a receiver does; none may panic. Whatever parses is a well-formed
/// packet: it satisfies the invariants the engine relies on, and emitting it again gives bytes
/// that parse to the same meaning.
fn parse_everything(b: &[u8], token: u64) -> Result<Spec, Malformed> {
    let src = claimed_source(b);
    assert_eq!(src.is_some(), b.len() >= 20);
    if let Ok(p) = Packet::new_checked(b) {
        touch_all(&p);
    }
    let r = Repr::parse(b, token)?;
    assert_eq!(
        src,
        Some(r.src),
        "claimed_source agrees with the parsed source"
    );
    assert_eq!(r.token, token);
    match r.body {
        Body::Data {
            msg_len,
            offset,
            payload,
            ..
        } => {
            let end = offset.checked_add(payload.len() as u64);
            assert!(
                matches!(end, Some(e) if e <= msg_len),
                "fragment inside its message"
            );
        }
        Body::Ack { ranges, .. } => {
            assert!(ranges.len() <= MAX_RANGES);
            for i in 0..ranges.len() {
                let (s, e) = ranges.get(i);
                let w = e.wrapping_sub(s);
                assert!(w > 0 && w <= 1 << 30, "range width {w}");
            }
        }
        Body::Rts { .. } | Body::Cts { .. } => {}
    }
    let spec = own(&r);
    let again = spec.emit();
    assert_eq!(
        own(&Repr::parse(&again, token).expect("a re-emitted packet parses")),
        spec,
        "what parsed re-emits to the same meaning"
    );
    Ok(spec)
}

fn flip(b: &mut [u8], bit: usize) {
    b[bit / 8] ^= 1 << (bit % 8);
}

fn outside_len_and_crc(byte: usize) -> bool {
    !LEN_FIELD.contains(&byte) && !CRC_FIELD.contains(&byte)
}

// ------------------------------------------------------------------ properties

proptest! {
    #![proptest_config(config(10_000))]

    /// (a) Any bytes at all: parsing never panics (and random bytes practically never parse:
    /// whatever does must be well formed).
    #[test]
    fn random_bytes_never_panic(
        b in proptest::collection::vec(any::<u8>(), 0..2100),
        token in prop_oneof![Just(TOKEN), any::<u64>()],
    ) {
        let _ = parse_everything(&b, token);
    }

    /// (a) Bytes with a plausible header reach the length, range and CRC checks; a recomputed
    /// CRC lets them reach the field checks. Never a panic; what parses is well formed.
    #[test]
    fn plausible_headers_never_panic(b in plausible()) {
        let _ = parse_everything(&b, TOKEN);
        let token = Packet::new_checked(&b[..]).map_or(TOKEN, |p| p.token());
        let _ = parse_everything(&b, token);
    }

    /// (b) A valid packet of every kind round-trips: emit then parse gives the same meaning,
    /// the view's fields agree, and parsing it again and emitting gives the same bytes.
    #[test]
    fn valid_packets_round_trip(s in spec()) {
        let b = s.emit();
        let p = Packet::new_checked(&b[..]).expect("an emitted packet passes check_len");
        prop_assert_eq!(p.kind(), s.kind());
        prop_assert_eq!(p.packet_len(), b.len());
        prop_assert!(p.verify_checksum());
        prop_assert_eq!((p.token(), p.src(), p.dst()), (s.token, s.src, s.dst));
        let r = parse_everything(&b, s.token).expect("an emitted packet parses");
        prop_assert_eq!(&r, &s);
        prop_assert_eq!(&r.emit(), &b, "parse then emit gives the same bytes");
        // Another job's token is told apart from corruption.
        prop_assert_eq!(Repr::parse(&b, s.token ^ 1), Err(Malformed::Token));
    }

    /// (b) The transmit path's in-place DATA header gives the same bytes as a full emit.
    #[test]
    fn data_header_in_place_equals_full_emit(
        s in data_spec()
    ) {
        let full = s.emit();
        let SpecBody::Data { seq, tag, context, msg_len, offset, payload } = &s.body else {
            unreachable!()
        };
        let mut inplace = vec![0u8; DATA_HEADER_LEN + payload.len()];
        inplace[DATA_HEADER_LEN..].copy_from_slice(payload);
        let n = emit_data_header(
            &mut inplace, s.token, s.src, s.dst, seq, *tag, *context, *msg_len, *offset,
            payload.len(), true,
        );
        prop_assert_eq!(n, full.len());
        prop_assert_eq!(inplace, full);
    }

    /// (c) Every single-bit flip of a valid packet is rejected (CRC32C, or the checks before
    /// it), and so is every truncation (the length field says more than arrived).
    #[test]
    fn bit_flips_and_truncations_are_rejected(
        s in spec(),
        bits in proptest::collection::vec(any::<Index>(), 1..24),
        cuts in proptest::collection::vec(any::<Index>(), 1..8),
    ) {
        let b = s.emit();
        for bit in bits {
            let bit = bit.index(b.len() * 8);
            let mut m = b.clone();
            flip(&mut m, bit);
            let e = parse_everything(&m, s.token);
            prop_assert!(e.is_err(), "flipping bit {} of {:?} went unnoticed", bit, s.kind());
        }
        for cut in cuts {
            let cut = cut.index(b.len());
            prop_assert_eq!(
                parse_everything(&b[..cut], s.token),
                Err(Malformed::Truncated),
                "cut to {} of {}", cut, b.len()
            );
        }
    }

    /// (c) Every one of the 8 * len single-bit flips of a short packet is rejected (an
    /// exhaustive sweep, as the golden-vector test does for its four samples).
    #[test]
    fn every_bit_flip_of_a_short_packet_is_rejected(
        s in spec().prop_filter("short", |s| s.repr().buffer_len() <= 200)
    ) {
        let b = s.emit();
        let mut m = b.clone();
        for bit in 0..b.len() * 8 {
            flip(&mut m, bit);
            prop_assert!(Repr::parse(&m, s.token).is_err(), "bit {} of {:?}", bit, s.kind());
            flip(&mut m, bit);
        }
    }

    /// (c) CRC32C detects every error of up to three bits and every burst up to 32 bits long
    /// (in packets under 2^31 bits): outside the length and CRC fields, which change what the
    /// CRC is compared with, such errors are always rejected.
    #[test]
    fn small_errors_and_short_bursts_are_rejected(
        s in spec(),
        bits in proptest::collection::vec(any::<Index>(), 2..=3),
        at in any::<Index>(),
        burst in proptest::collection::vec(any::<u8>(), 1..=4),
    ) {
        let b = s.emit();
        let mut m = b.clone();
        let mut flipped = std::collections::BTreeSet::new();
        for bit in bits {
            let bit = bit.index(b.len() * 8);
            if outside_len_and_crc(bit / 8) && flipped.insert(bit) {
                flip(&mut m, bit);
            }
        }
        if !flipped.is_empty() {
            prop_assert!(
                parse_everything(&m, s.token).is_err(),
                "bits {:?} of {:?} went unnoticed", flipped, s.kind()
            );
        }
        // A burst of up to 4 bytes, overwritten in place.
        let start = at.index(b.len() - burst.len() + 1);
        let span = start..start + burst.len();
        if span.clone().all(outside_len_and_crc) && b[span.clone()] != burst[..] {
            let mut m = b.clone();
            m[span.clone()].copy_from_slice(&burst);
            prop_assert!(
                parse_everything(&m, s.token).is_err(),
                "burst {:?} at {:?} of {:?} went unnoticed", burst, span, s.kind()
            );
        }
    }

    /// Padding after a packet (a device's minimum frame) is ignored; random bytes spliced into
    /// or over a packet never make the parser panic, and whatever still parses is well formed.
    #[test]
    fn padding_is_ignored_and_splices_never_panic(
        s in spec(),
        pad in proptest::collection::vec(any::<u8>(), 1..64),
        at in any::<Index>(),
        junk in proptest::collection::vec(any::<u8>(), 0..64),
        cut in any::<Index>(),
        overwrite in any::<bool>(),
    ) {
        let b = s.emit();
        let mut padded = b.clone();
        padded.extend_from_slice(&pad);
        prop_assert_eq!(parse_everything(&padded, s.token), Ok(s.clone()));
        let p = Packet::new_checked(&padded[..]).unwrap();
        prop_assert_eq!(p.bytes(), &b[..]);

        let mut m = b.clone();
        let i = at.index(m.len() + 1);
        if overwrite {
            let end = (i + junk.len()).min(m.len());
            m[i..end].copy_from_slice(&junk[..end - i]);
        } else {
            m.splice(i..i, junk.iter().copied());
        }
        let _ = parse_everything(&m, s.token);
        let _ = parse_everything(&m[..cut.index(m.len() + 1)], s.token);
    }

    /// Fields rewritten behind a recomputed CRC (a forger who knows the token, or a bug on the
    /// sending side): the parser's field checks decide alone. Never a panic; reserved bits,
    /// unknown flags, fragments outside their message, too many or empty ranges are refused;
    /// anything accepted is well formed.
    #[test]
    fn rewritten_fields_with_a_good_crc(
        s in spec(),
        edits in proptest::collection::vec((any::<Index>(), any::<u8>()), 1..6),
        widths in proptest::collection::vec((any::<Index>(), num64()), 0..3),
    ) {
        let orig = s.emit();
        let mut b = orig.clone();
        let n = b.len();
        for (at, v) in edits {
            let i = at.index(n);
            if !LEN_FIELD.contains(&i) {
                b[i] = v;
            }
        }
        // Whole 8-byte fields (msg_len, offset, credit) set to edge values.
        for (at, v) in widths {
            let i = HEADER_LEN + at.index((n - HEADER_LEN) / 8) * 8;
            if i + 8 <= n {
                b[i..i + 8].copy_from_slice(&v.to_be_bytes());
            }
        }
        let fixed = match Packet::new_checked(&mut b[..]) {
            Ok(mut p) => {
                p.fill_checksum();
                true
            }
            Err(_) => false,
        };
        let r = parse_everything(&b, s.token);
        if fixed && b[..4] == orig[..4] {
            // Same kind, good CRC: only the token and the field checks can refuse it.
            if let Err(e) = r {
                prop_assert!(
                    matches!(e, Malformed::Field | Malformed::Token | Malformed::Truncated),
                    "{:?}", e
                );
            }
            let p = Packet::new_unchecked(&b[..]);
            let reserved_hdr = u16::from_be_bytes([b[6], b[7]]) != 0;
            let bad_flags = match p.kind() {
                Kind::Ack => p.ack_flags() & !ack_flags::ALL != 0,
                _ => p.flags() & !flags::ALL != 0 || p.reserved() != 0,
            };
            if reserved_hdr || bad_flags {
                prop_assert!(r.is_err(), "reserved bits or unknown flags accepted");
            }
        }
    }

    /// (d) The source a device checks before parsing: read from any bytes without a panic,
    /// None only when too short to hold it, and the parsed source on every valid packet.
    #[test]
    fn claimed_source_agrees_with_parse(
        s in spec(),
        b in proptest::collection::vec(any::<u8>(), 0..64),
    ) {
        let v = s.emit();
        prop_assert_eq!(claimed_source(&v), Some(s.src));
        prop_assert_eq!(claimed_source(&v), Repr::parse(&v, s.token).ok().map(|r| r.src));
        for cut in 0..v.len().min(HEADER_LEN) {
            let want = (cut >= 20).then_some(s.src);
            prop_assert_eq!(claimed_source(&v[..cut]), want);
        }
        let want = (b.len() >= 20).then(|| u32::from_be_bytes([b[16], b[17], b[18], b[19]]));
        prop_assert_eq!(claimed_source(&b), want);
    }
}

/// An ACK range list of exactly MAX_RANGES emits and parses; one more is refused even with a
/// good CRC (the edge the strategies above reach only by chance).
#[test]
fn the_range_limit_is_exact() {
    let ranges: Vec<(u32, u32)> = (0..MAX_RANGES as u32).map(|i| (i * 4, i * 4 + 1)).collect();
    let s = Spec {
        token: TOKEN,
        src: 1,
        dst: 2,
        body: SpecBody::Ack {
            cum: 0,
            credit: 0,
            want_ack: false,
            bye: false,
            ranges,
        },
    };
    let mut b = s.emit();
    assert_eq!(b.len(), ACK_LEN + MAX_RANGES * RANGE_LEN);
    assert_eq!(parse_everything(&b, TOKEN), Ok(s));
    b.extend_from_slice(&[0, 0, 0, 200, 0, 0, 0, 201]);
    let n = b.len() as u16;
    b[4..6].copy_from_slice(&n.to_be_bytes());
    b[42..44].copy_from_slice(&(MAX_RANGES as u16 + 1).to_be_bytes());
    Packet::new_unchecked(&mut b[..]).fill_checksum();
    assert_eq!(parse_everything(&b, TOKEN), Err(Malformed::Field));
}
