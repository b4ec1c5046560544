//! Golden vectors pin the format byte for byte; the malformed-input tests show that no byte
//! string makes the parser panic or accept what it should not.

use super::*;

const TOKEN: u64 = 0x0123_4567_89ab_cdef;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn data_repr(payload: &[u8]) -> Repr<'_> {
    Repr {
        token: TOKEN,
        src: 1,
        dst: 2,
        body: Body::Data {
            seq: Seq {
                seq: 7,
                piggyback: Some(Piggyback {
                    ack: 3,
                    credit: 1 << 20,
                }),
                best_effort: false,
                msg: 5,
            },
            tag: 10,
            context: 11,
            msg_len: 100,
            offset: 96,
            payload,
        },
    }
}

fn samples() -> Vec<(Vec<u8>, &'static str)> {
    let ranges = [(9u32, 12u32), (20, 21)];
    let reprs = vec![
        (data_repr(b"abcd"), "data"),
        (
            Repr {
                token: TOKEN,
                src: 3,
                dst: 0,
                body: Body::Rts {
                    seq: Seq {
                        seq: 0xffff_fffe,
                        piggyback: None,
                        best_effort: false,
                        msg: 9,
                    },
                    tag: 1,
                    context: 2,
                    msg_len: 1 << 30,
                },
            },
            "rts",
        ),
        (
            Repr {
                token: TOKEN,
                src: 0,
                dst: 3,
                body: Body::Cts {
                    seq: Seq {
                        seq: 1,
                        piggyback: Some(Piggyback { ack: 0, credit: 42 }),
                        best_effort: false,
                        msg: 9,
                    },
                },
            },
            "cts",
        ),
        (
            Repr {
                token: TOKEN,
                src: 2,
                dst: 1,
                body: Body::Ack {
                    cum: 8,
                    credit: 4096,
                    want_ack: true,
                    bye: false,
                    ranges: AckRanges::Slice(&ranges),
                },
            },
            "ack",
        ),
    ];
    reprs
        .into_iter()
        .map(|(r, n)| {
            let mut b = vec![0u8; r.buffer_len()];
            assert_eq!(r.emit(&mut b), b.len());
            (b, n)
        })
        .collect()
}

/// The bytes of one packet of each kind. If this test fails the wire format changed: bump
/// VERSION and update docs/protocol.md, do not just paste the new bytes.
#[test]
fn golden_vectors() {
    let want = [
        // magic version kind | length reserved | token | src | dst | crc | seq | ack | credit | flags reserved |
        // msg | context | tag | msg_len | offset | payload
        "564c0201 0050 0000\
         0123456789abcdef\
         00000001\
         00000002\
         4b314eb4\
         00000007\
         00000003\
         0000000000100000\
         00020000\
         00000005\
         0000000b\
         0000000a\
         0000000000000064\
         0000000000000060\
         61626364",
        // ... | seq | ack | credit | flags reserved | msg | context | tag | msg_len
        "564c0202 0044 0000\
         0123456789abcdef\
         00000003\
         00000000\
         65d68242\
         fffffffe\
         00000000\
         0000000000000000\
         00000000\
         00000009\
         00000002\
         00000001\
         0000000040000000",
        // ... | seq | ack | credit | flags reserved | msg
        "564c0203 0034 0000\
         0123456789abcdef\
         00000000\
         00000003\
         8a1453ae\
         00000001\
         00000000\
         000000000000002a\
         00020000\
         00000009",
        // ... | cum | credit | flags nranges | (start end) x2
        "564c0204 003c 0000\
         0123456789abcdef\
         00000002\
         00000001\
         905fa88c\
         00000008\
         0000000000001000\
         00010002\
         00000009 0000000c\
         00000014 00000015",
    ];
    for ((bytes, name), want) in samples().iter().zip(want) {
        let want: String = want.split_whitespace().collect();
        assert_eq!(hex(bytes), want, "{name}");
    }
}

#[test]
fn emitted_packets_parse_back() {
    let payload = b"abcd";
    let r = data_repr(payload);
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b);
    assert_eq!(Repr::parse(&b, TOKEN).unwrap(), r);
    for (bytes, name) in samples() {
        let p = Repr::parse(&bytes, TOKEN).unwrap_or_else(|e| panic!("{name}: {e}"));
        let mut again = vec![0u8; p.buffer_len()];
        p.emit(&mut again);
        assert_eq!(again, bytes, "{name} re-emits identically");
    }
}

#[test]
fn data_header_emitted_in_place_equals_full_emit() {
    let payload = vec![0x5au8; 300];
    let r = data_repr(&payload);
    let mut full = vec![0u8; r.buffer_len()];
    r.emit(&mut full);
    let mut inplace = vec![0u8; DATA_HEADER_LEN + payload.len()];
    inplace[DATA_HEADER_LEN..].copy_from_slice(&payload);
    let Body::Data { seq, .. } = r.body else {
        unreachable!()
    };
    let n = emit_data_header(
        &mut inplace,
        TOKEN,
        1,
        2,
        &seq,
        10,
        11,
        400,
        96,
        payload.len(),
        true,
    );
    assert_eq!(n, full.len());
    // Different msg_len (400 here, so that the 300-byte fragment fits): only that field and
    // the CRC differ.
    let r2 = Repr::parse(&inplace, TOKEN).unwrap();
    assert!(
        matches!(r2.body, Body::Data { msg_len: 400, offset: 96, payload: p, .. } if p == &payload[..])
    );
}

/// Without CRC (sealed packets: the device vouches for every byte) the field stays zero and is
/// not checked; everything else reads the same, and a checking parser refuses such a packet.
#[test]
fn packets_without_crc_read_the_same_where_the_device_vouches_for_them() {
    for (bytes, name) in samples() {
        let r = Repr::parse(&bytes, TOKEN).unwrap();
        let mut bare = vec![0u8; r.buffer_len()];
        assert_eq!(r.emit_with(&mut bare, false), bytes.len(), "{name}");
        assert_eq!(&bare[24..28], &[0u8; 4], "{name}: the CRC field");
        assert_eq!(Repr::parse_with(&bare, TOKEN, false).unwrap(), r, "{name}");
        assert_eq!(
            Repr::parse(&bare, TOKEN),
            Err(Malformed::Checksum),
            "{name}"
        );
        // The token and the fields are still checked.
        assert_eq!(
            Repr::parse_with(&bare, TOKEN ^ 1, false),
            Err(Malformed::Token),
            "{name}"
        );
    }
    let mut payload = vec![7u8; 64];
    payload.resize(DATA_HEADER_LEN + 64, 0);
    payload.rotate_right(DATA_HEADER_LEN);
    let seq = Seq {
        seq: 5,
        piggyback: None,
        best_effort: false,
        msg: 1,
    };
    let n = emit_data_header(&mut payload, TOKEN, 1, 2, &seq, 3, 4, 64, 0, 64, false);
    assert_eq!(&payload[24..28], &[0u8; 4]);
    let r = Repr::parse_with(&payload[..n], TOKEN, false).unwrap();
    assert!(matches!(r.body, Body::Data { payload: p, .. } if p == &[7u8; 64][..]));
}

#[test]
fn every_truncation_is_rejected() {
    for (bytes, name) in samples() {
        for cut in 0..bytes.len() {
            let e = Repr::parse(&bytes[..cut], TOKEN).unwrap_err();
            assert!(
                matches!(e, Malformed::Truncated | Malformed::Checksum),
                "{name} cut to {cut}: {e:?}"
            );
        }
    }
}

#[test]
fn every_single_bit_flip_is_rejected() {
    for (bytes, name) in samples() {
        for i in 0..bytes.len() * 8 {
            let mut b = bytes.clone();
            b[i / 8] ^= 1 << (i % 8);
            let e = Repr::parse(&b, TOKEN);
            assert!(e.is_err(), "{name}: flipping bit {i} went unnoticed");
        }
    }
}

#[test]
fn wrong_token_version_magic_and_kind_are_told_apart() {
    let (mut b, _) = samples().remove(0);
    assert_eq!(Repr::parse(&b, TOKEN ^ 1), Err(Malformed::Token));
    b[2] = VERSION - 1;
    Packet::new_unchecked(&mut b[..]).fill_checksum();
    assert_eq!(Repr::parse(&b, TOKEN), Err(Malformed::Version));
    b[2] = VERSION;
    b[3] = 99;
    assert_eq!(Repr::parse(&b, TOKEN), Err(Malformed::Kind));
    b[0] = 0x45; // an IPv4 header, say
    assert_eq!(Repr::parse(&b, TOKEN), Err(Malformed::Magic));
}

#[test]
fn impossible_fields_are_rejected_even_with_a_good_checksum() {
    // A fragment that ends past its message.
    let payload = [1u8; 8];
    let mut r = data_repr(&payload);
    if let Body::Data { offset, .. } = &mut r.body {
        *offset = 96; // 96 + 8 > 100
    }
    let mut b = vec![0u8; r.buffer_len()];
    r.emit(&mut b);
    assert_eq!(Repr::parse(&b, TOKEN), Err(Malformed::Field));
    // Reserved bits.
    let (mut b, _) = samples().remove(2);
    b[46] = 1;
    Packet::new_unchecked(&mut b[..]).fill_checksum();
    assert_eq!(Repr::parse(&b, TOKEN), Err(Malformed::Field));
    // More ranges than allowed.
    let (mut b, _) = samples().remove(3);
    b[42..44].copy_from_slice(&((MAX_RANGES as u16) + 1).to_be_bytes());
    Packet::new_unchecked(&mut b[..]).fill_checksum();
    assert_eq!(Repr::parse(&b, TOKEN), Err(Malformed::Field));
}

#[test]
fn padding_after_a_packet_is_ignored() {
    for (mut bytes, name) in samples() {
        let want = Repr::parse(&bytes.clone(), TOKEN).unwrap().buffer_len();
        bytes.extend_from_slice(&[0u8; 46]);
        let r = Repr::parse(&bytes, TOKEN).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(r.buffer_len(), want, "{name}");
    }
}

#[test]
fn random_bytes_never_panic_and_never_parse() {
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    let mut buf = vec![0u8; 2000];
    for round in 0..20_000 {
        let len = (next() % 2000) as usize;
        for b in buf[..len].iter_mut() {
            *b = next() as u8;
        }
        if round % 2 == 0 && len >= HEADER_LEN {
            // Half the time, a plausible header so the parser goes deeper.
            buf[..2].copy_from_slice(&MAGIC.to_be_bytes());
            buf[2] = VERSION;
            buf[3] = 1 + (next() % 4) as u8;
        }
        assert!(Repr::parse(&buf[..len], TOKEN).is_err());
    }
}
