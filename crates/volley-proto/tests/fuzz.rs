//! Fuzzing the protocol engine on stable Rust (issue 16, defect 11): cargo-fuzz needs a nightly
//! toolchain, so these are proptest properties with a fixed budget of cases, run by
//! `cargo test --release -p volley-proto --test fuzz` like any other test.
//!
//! Two engines exchange real messages (eager, rendezvous, best effort, with the receiver placing
//! rendezvous data or not) in virtual time. Between them, a stream of actions chosen by the
//! fuzzer drops, duplicates, delays and corrupts packets and injects garbage: bit flips,
//! truncations, random bytes spliced in, padding, another job's token, another rank's address,
//! an unknown sender, foreign frames. The receiving engine must never panic, must deliver every
//! reliable message exactly as sent (reassembly stays correct) and every best-effort one that
//! arrives exactly as sent, and must count every bad packet once, under its reason.
//!
//! Two more properties forge packets that pass every wire check (the right token, a good CRC)
//! with a field rewritten; the engine cannot tell those from its peer's, so only robustness is
//! asserted: no panic, and every refusal counted once. `forged_messages_never_panic` rewrites
//! the fields that describe a message (number, envelope, length, offset) and runs in CI;
//! `forged_packets_never_panic` rewrites any field, sequencing and acknowledgement included,
//! and is ignored while the bug it finds is open. Each bug found is pinned below by an
//! ignored test holding its shrunk input; the running properties steer clear of exactly those
//! inputs (see `Forgery::apply` and the configuration strategy).
//!
//! The seed is fixed so that CI is repeatable; `VOLLEY_FUZZ_SEED=<n>` explores other inputs and
//! `VOLLEY_FUZZ_CASES=<n>` runs more (or fewer) cases per property.

use proptest::prelude::*;
use proptest::sample::Index;
use proptest::test_runner::RngSeed;
use std::collections::VecDeque;
use volley_proto::{Config, Engine, Event, Reliability, SendError, DROP_REASONS, PEER_COUNTERS};
use volley_wire::{Malformed, Packet, Repr};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const TOKEN: u64 = 0x6675_7a7a_0000_0001;
/// Link latency one way.
const LATENCY: u64 = 5 * US;

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

// ------------------------------------------------------------------ the fuzzer's choices

#[derive(Clone, Debug)]
struct Setup {
    max_packet: usize,
    window: u32,
    rndv_threshold: usize,
    receiver_places: bool,
}

impl Setup {
    fn config(&self) -> Config {
        Config {
            max_packet: self.max_packet,
            window: self.window,
            pool_bytes: 256 << 10,
            rndv_threshold: self.rndv_threshold,
            receiver_places: self.receiver_places,
            rndv_budget: 512 << 10,
            // A forged RTS may announce up to this much, and the receiver makes room for it.
            max_message: 1 << 20,
            heartbeat: 50 * MS,
            // Long enough that no amount of dropping in a case loses the peer.
            peer_timeout: 600_000 * MS,
            send_budget: 1 << 20,
            ..Config::default()
        }
    }
}

fn setup() -> impl Strategy<Value = Setup> {
    (
        prop::sample::select(vec![200usize, 1472, 8972]),
        prop::sample::select(vec![16u32, 64, 4096]),
        prop::sample::select(vec![1024usize, 16 << 10]),
        any::<bool>(),
    )
        .prop_map(
            |(max_packet, window, rndv_threshold, receiver_places)| Setup {
                max_packet,
                window,
                rndv_threshold,
                receiver_places,
            },
        )
}

/// One message to send: from which engine, how long, how.
#[derive(Clone, Debug)]
struct Plan {
    from: usize,
    len: usize,
    best_effort: bool,
}

fn plans() -> impl Strategy<Value = Vec<Plan>> {
    let len = prop_oneof![
        3 => 0usize..64,
        4 => 64usize..4000,
        2 => 4000usize..70_000,
    ];
    proptest::collection::vec(
        (0usize..2, len, prop::bool::weighted(0.2)).prop_map(|(from, len, be)| Plan {
            from,
            len,
            // Best-effort messages must fit the receiver's pool whole.
            best_effort: be && len <= 4000,
        }),
        1..14,
    )
}

/// What happens to one packet on the link, or what is injected beside it.
#[derive(Clone, Debug)]
enum Mutation {
    Flip(Index),
    Truncate(Index),
    Splice(Index, Vec<u8>),
    Overwrite(Index, Vec<u8>),
    Random(Vec<u8>),
    /// Another job's packet (good CRC).
    Token,
    /// Addressed to another rank (good CRC).
    Dst(u32),
    /// From a rank that is no peer (good CRC).
    Src(u32),
    /// Padding after the packet: the same packet again.
    Pad(Vec<u8>),
    /// A frame of another protocol.
    Foreign(Vec<u8>),
}

#[derive(Clone, Debug)]
enum Act {
    Deliver,
    Drop,
    Dup,
    Delay(u64),
    /// A damaged copy arrives; the packet itself too or not.
    Mutate(Mutation, bool),
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(any::<u8>(), 0..max)
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        4 => any::<Index>().prop_map(Mutation::Flip),
        2 => any::<Index>().prop_map(Mutation::Truncate),
        2 => (any::<Index>(), bytes(32)).prop_map(|(i, b)| Mutation::Splice(i, b)),
        2 => (any::<Index>(), bytes(32)).prop_map(|(i, b)| Mutation::Overwrite(i, b)),
        1 => bytes(1600).prop_map(Mutation::Random),
        1 => Just(Mutation::Token),
        1 => (2u32..1000).prop_map(Mutation::Dst),
        1 => (2u32..1000).prop_map(Mutation::Src),
        1 => (1usize..64).prop_flat_map(|n| proptest::collection::vec(any::<u8>(), n)).prop_map(Mutation::Pad),
        1 => bytes(200).prop_map(|mut b| {
            // IPv4, ARP, anything but volley's magic.
            if b.len() >= 2 && b[..2] == [0x56, 0x4c] {
                b[0] = 0x45;
            }
            Mutation::Foreign(b)
        }),
    ]
}

fn act() -> impl Strategy<Value = Act> {
    prop_oneof![
        10 => Just(Act::Deliver),
        2 => Just(Act::Drop),
        1 => Just(Act::Dup),
        1 => (0u64..500).prop_map(|us| Act::Delay(us * US)),
        6 => (mutation(), prop::bool::weighted(0.7)).prop_map(|(m, keep)| Act::Mutate(m, keep)),
    ]
}

/// Fields of the sequenced header and of an ACK, by byte range (docs/protocol.md).
const FIELDS: &[(usize, usize)] = &[
    (28, 4), // seq | ACK cum
    (32, 4), // ack | ACK credit (high half)
    (36, 8), // credit | ACK credit (low half), flags, nranges
    (44, 2), // flags
    (48, 4), // msg
    (52, 4), // context
    (56, 4), // tag
    (60, 8), // msg_len
    (68, 8), // offset
    (40, 2), // ACK flags
    (44, 8), // ACK first range
    (52, 8), // ACK second range
];

/// A field rewritten behind a good CRC: near its value, at an edge, or anything.
#[derive(Clone, Debug)]
struct Forgery {
    /// Which of [`FIELDS`].
    field: usize,
    how: u8,
    delta: i64,
    value: u64,
}

/// Indices in [`FIELDS`] of the fields that describe a message (number, envelope, length,
/// offset), as opposed to those that sequence and acknowledge packets.
const MESSAGE_FIELDS: std::ops::Range<usize> = 4..9;

fn forgery(fields: std::ops::Range<usize>) -> impl Strategy<Value = Forgery> {
    (fields, 0u8..4, -4i64..=4, any::<u64>()).prop_map(|(field, how, delta, value)| Forgery {
        field,
        how,
        delta,
        value,
    })
}

impl Forgery {
    /// The forged packet, or None where the packet has no such field.
    fn apply(&self, pkt: &[u8], avoid_known_bugs: bool) -> Option<Vec<u8>> {
        let (at, n) = FIELDS[self.field];
        if at + n > pkt.len() || (MESSAGE_FIELDS.contains(&self.field) && pkt[3] == 4) {
            // Not a field of this packet (an ACK has ranges where the others have those).
            return None;
        }
        let mut b = pkt.to_vec();
        let mut cur = 0u64;
        for &x in &b[at..at + n] {
            cur = cur << 8 | x as u64;
        }
        let bits = 8 * n as u32;
        let mask = if bits == 64 {
            u64::MAX
        } else {
            (1 << bits) - 1
        };
        let v = match self.how {
            0 => cur.wrapping_add(self.delta as u64),
            1 => mask.wrapping_sub(self.delta.unsigned_abs() * 16),
            2 => 1u64 << (self.value % bits as u64),
            _ => self.value,
        } & mask;
        for (k, x) in b[at..at + n].iter_mut().enumerate() {
            *x = (v >> (8 * (n - 1 - k))) as u8;
        }
        // Known bug, pinned by `a_forged_message_length_near_2_64_is_refused` below: a DATA
        // packet whose msg_len is within 64 of 2^64 makes the receiver panic. Left out here so
        // that the property keeps exploring the rest.
        if avoid_known_bugs
            && b[3] == 1
            && u64::from_be_bytes(b[60..68].try_into().unwrap()) > u64::MAX - 64
        {
            return None;
        }
        Packet::new_checked(&mut b[..]).ok()?.fill_checksum();
        Some(b)
    }
}

// ------------------------------------------------------------------ the harness

/// The byte at position `i` of message `k`.
fn pattern(k: usize, i: usize) -> u8 {
    ((k as u64 + 1).wrapping_mul(0x9e37_79b9_7f4a_7c15)
        ^ (i as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9))
    .wrapping_mul(0x94d0_49bb_1331_11eb)
    .to_be_bytes()[0]
}

fn data(k: usize, len: usize) -> Vec<u8> {
    (0..len).map(|i| pattern(k, i)).collect()
}

/// What the receiving engine must say of a packet.
#[derive(Clone, Debug, PartialEq)]
enum Want {
    /// A packet of the peer's (perhaps padded): taken.
    Ok,
    /// Refused and counted under this reason of DROP_REASONS.
    Dropped(Malformed, &'static str),
    /// A forgery: anything but a panic, and a refusal counted.
    Anything,
}

fn reason(e: Malformed) -> &'static str {
    match e {
        Malformed::Truncated => "drop_truncated",
        Malformed::Magic => "drop_foreign",
        Malformed::Version => "drop_version",
        Malformed::Kind => "drop_kind",
        Malformed::Checksum => "drop_checksum",
        Malformed::Token => "drop_token",
        Malformed::Field => "drop_field",
    }
}

fn drop_index(name: &str) -> usize {
    DROP_REASONS
        .iter()
        .position(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("{name} is not among DROP_REASONS"))
}

/// What the oracle (the wire crate, fuzzed on its own) says of an injected packet at `dst`.
/// None: the damage went unnoticed by the CRC (a collision, about one in 2^32), so the packet is
/// not injected.
fn want(pkt: &[u8], orig: &[u8], dst: u32, peer: u32) -> Option<Want> {
    match Repr::parse(pkt, TOKEN) {
        Err(e) => Some(Want::Dropped(e, reason(e))),
        Ok(r) if r.dst != dst => Some(Want::Dropped(Malformed::Field, "drop_not_mine")),
        Ok(r) if r.src != peer => Some(Want::Dropped(Malformed::Field, "drop_field")),
        Ok(_) => {
            let len = Packet::new_unchecked(pkt).packet_len();
            (pkt[..len] == *orig).then_some(Want::Ok)
        }
    }
}

fn with_good_crc(mut b: Vec<u8>) -> Vec<u8> {
    if let Ok(mut p) = Packet::new_checked(&mut b[..]) {
        p.fill_checksum();
    }
    b
}

fn mutate(m: &Mutation, pkt: &[u8]) -> Vec<u8> {
    let mut b = pkt.to_vec();
    match m {
        Mutation::Flip(i) => {
            let bit = i.index(b.len() * 8);
            b[bit / 8] ^= 1 << (bit % 8);
            b
        }
        Mutation::Truncate(i) => {
            b.truncate(i.index(b.len()));
            b
        }
        Mutation::Splice(i, junk) => {
            let at = i.index(b.len() + 1);
            b.splice(at..at, junk.iter().copied());
            b
        }
        Mutation::Overwrite(i, junk) => {
            let at = i.index(b.len() + 1);
            let end = (at + junk.len()).min(b.len());
            b[at..end].copy_from_slice(&junk[..end - at]);
            b
        }
        Mutation::Random(r) | Mutation::Foreign(r) => r.clone(),
        Mutation::Token => {
            b[8] ^= 0x80;
            with_good_crc(b)
        }
        Mutation::Dst(d) => {
            b[20..24].copy_from_slice(&d.to_be_bytes());
            with_good_crc(b)
        }
        Mutation::Src(s) => {
            b[16..20].copy_from_slice(&s.to_be_bytes());
            with_good_crc(b)
        }
        Mutation::Pad(p) => {
            b.extend_from_slice(p);
            b
        }
    }
}

struct InFlight {
    at: u64,
    serial: u64,
    dst: usize,
    bytes: Vec<u8>,
    want: Want,
}

/// A rendezvous message announced to the receiving application, placed into its own buffer.
struct Placing {
    peer: u32,
    msg: u64,
    k: usize,
    buf: Vec<u8>,
}

struct Link {
    e: [Engine; 2],
    now: u64,
    plans: Vec<Plan>,
    /// Per sender, the messages still to queue.
    to_send: [VecDeque<usize>; 2],
    /// Per receiver, the reliable messages it must deliver, in order; the best-effort ones it
    /// may.
    expect: [VecDeque<usize>; 2],
    best_effort: [Vec<usize>; 2],
    placing: [Vec<Placing>; 2],
    flight: Vec<InFlight>,
    serial: u64,
    acts: VecDeque<Act>,
    forgeries: VecDeque<(Forgery, bool)>,
    /// A forgery reached an engine: its state may no longer match its peer's, so even real
    /// packets may be refused from then on.
    forged: bool,
    /// Forge nothing that reaches a bug already pinned by an ignored test below.
    avoid_known_bugs: bool,
    /// Packets injected that the receiver must refuse, and those it refused.
    bad: usize,
    refused: usize,
    /// Damage the CRC missed (not injected).
    collisions: usize,
    delivered: usize,
    best_effort_delivered: usize,
}

impl Link {
    fn new(setup: &Setup, plans: Vec<Plan>, acts: Vec<Act>) -> Link {
        let cfg = setup.config();
        let mut e = [
            Engine::new(cfg.clone(), 0, TOKEN),
            Engine::new(cfg, 1, TOKEN),
        ];
        e[0].add_peer(1, 0);
        e[1].add_peer(0, 0);
        let mut to_send = [VecDeque::new(), VecDeque::new()];
        let mut expect = [VecDeque::new(), VecDeque::new()];
        let mut best_effort = [Vec::new(), Vec::new()];
        for (k, p) in plans.iter().enumerate() {
            to_send[p.from].push_back(k);
            if p.best_effort {
                best_effort[1 - p.from].push(k);
            } else {
                expect[1 - p.from].push_back(k);
            }
        }
        Link {
            e,
            now: 0,
            plans,
            to_send,
            expect,
            best_effort,
            placing: [Vec::new(), Vec::new()],
            flight: Vec::new(),
            serial: 0,
            acts: acts.into(),
            forgeries: VecDeque::new(),
            forged: false,
            avoid_known_bugs: true,
            bad: 0,
            refused: 0,
            collisions: 0,
            delivered: 0,
            best_effort_delivered: 0,
        }
    }

    fn push(&mut self, at: u64, dst: usize, bytes: Vec<u8>, want: Want) {
        self.serial += 1;
        self.flight.push(InFlight {
            at,
            serial: self.serial,
            dst,
            bytes,
            want,
        });
    }

    fn queue_sends(&mut self) {
        for from in 0..2 {
            while let Some(&k) = self.to_send[from].front() {
                let p = &self.plans[k];
                let how = if p.best_effort {
                    Reliability::BestEffort
                } else {
                    Reliability::Reliable
                };
                let (tag, context) = (k as u32, 0x1000 + k as u32);
                let to = 1 - from as u32;
                match self.e[from].send(self.now, to, tag, context, data(k, p.len), how) {
                    Ok(()) => {
                        self.to_send[from].pop_front();
                    }
                    Err(SendError::Busy(_)) => break,
                    Err(e) => panic!("send {k}: {e:?}"),
                }
            }
        }
    }

    /// What the link does to one packet the engines wrote.
    fn carry(&mut self, from: usize, pkt: Vec<u8>) {
        let dst = 1 - from;
        let at = self.now + LATENCY;
        if let Some((f, keep)) = self.forgeries.pop_front() {
            if let Some(forged) = f.apply(&pkt, self.avoid_known_bugs) {
                self.push(at, dst, forged, Want::Anything);
                if keep {
                    self.push(at + 1, dst, pkt, Want::Ok);
                }
                return;
            }
        }
        match self.acts.pop_front().unwrap_or(Act::Deliver) {
            Act::Deliver => self.push(at, dst, pkt, Want::Ok),
            Act::Drop => {}
            Act::Dup => {
                self.push(at, dst, pkt.clone(), Want::Ok);
                self.push(at + US, dst, pkt, Want::Ok);
            }
            Act::Delay(d) => self.push(at + d, dst, pkt, Want::Ok),
            Act::Mutate(m, keep) => {
                let bad = mutate(&m, &pkt);
                match want(&bad, &pkt, dst as u32, from as u32) {
                    Some(w) => self.push(at, dst, bad, w),
                    None => self.collisions += 1,
                }
                if keep {
                    self.push(at + 1, dst, pkt, Want::Ok);
                }
            }
        }
    }

    fn transmit(&mut self) {
        let mut buf = vec![0u8; 65536];
        for from in 0..2 {
            while let Some(t) = self.e[from].poll_transmit(self.now, &mut buf) {
                assert_eq!(t.peer, 1 - from as u32);
                assert!(t.len <= self.e[from].config().max_packet);
                self.carry(from, buf[..t.len].to_vec());
            }
        }
    }

    /// Hands one packet to its engine and checks what it said, and what it counted.
    fn deliver(&mut self, f: InFlight) {
        let r = f.dst;
        let peer = 1 - r as u32;
        let drops = self.e[r].drops;
        let bad_field = self.e[r].peer_counters(peer).expect("peer").bad_field;
        let placing = &mut self.placing[r];
        let res = self.e[r].handle_placing(self.now, &f.bytes, &mut |pl| {
            let p = placing
                .iter_mut()
                .find(|p| p.peer == pl.peer && p.msg == pl.msg)
                .expect("a fragment placed for a message the application did not accept");
            let off = pl.offset as usize;
            p.buf[off..off + pl.bytes.len()].copy_from_slice(pl.bytes);
        });
        let d: Vec<u64> = (0..DROP_REASONS.len())
            .map(|i| self.e[r].drops[i] - drops[i])
            .collect();
        let bf = self.e[r].peer_counters(peer).expect("peer").bad_field - bad_field;
        let counted = d.iter().sum::<u64>() + bf;
        if f.want == Want::Anything {
            self.forged = true;
        }
        let want = match f.want {
            Want::Ok if self.forged => Want::Anything,
            w => w,
        };
        match &want {
            Want::Ok => {
                assert_eq!(res, Ok(()), "a packet of the peer's was refused");
                assert_eq!(counted, 0, "a packet of the peer's was counted bad: {d:?}");
            }
            Want::Dropped(e, name) => {
                self.bad += 1;
                assert_eq!(res, Err(*e), "{} bytes: {:02x?}", f.bytes.len(), f.bytes);
                let mut want = vec![0; DROP_REASONS.len()];
                want[drop_index(name)] = 1;
                assert_eq!(d, want, "counted under {name}");
                assert_eq!(bf, 0);
                self.refused += 1;
            }
            Want::Anything => {
                // Refused: counted once, as a drop or as the peer's bad field; taken: neither.
                assert_eq!(counted, res.is_err() as u64, "{res:?} counted {d:?} {bf}");
                if let Err(e) = res {
                    assert!(
                        matches!(e, Malformed::Field | Malformed::Truncated),
                        "a forgery with a good CRC refused as {e:?}"
                    );
                }
            }
        }
    }

    fn events(&mut self, check: bool) {
        for r in 0..2 {
            while let Some(ev) = self.e[r].poll_event() {
                match ev {
                    Event::Message {
                        peer,
                        tag,
                        context,
                        data: got,
                        how,
                        credit,
                    } => {
                        assert_eq!(peer, 1 - r as u32);
                        if check {
                            let k = tag as usize;
                            if how == Reliability::BestEffort {
                                let at = self.best_effort[r].iter().position(|&x| x == k);
                                assert!(at.is_some(), "best-effort message {k} unknown or twice");
                                self.best_effort[r].swap_remove(at.unwrap());
                                self.best_effort_delivered += 1;
                            } else {
                                assert_eq!(
                                    self.expect[r].pop_front(),
                                    Some(k),
                                    "reliable messages out of order, twice, or unknown"
                                );
                                self.delivered += 1;
                            }
                            assert_eq!(context, 0x1000 + tag);
                            assert!(
                                got == data(k, self.plans[k].len),
                                "message {k} ({how:?}, {} bytes) delivered with other bytes ({} arrived)",
                                self.plans[k].len,
                                got.len()
                            );
                        }
                        self.e[r].release(credit);
                        self.e[r].recycle(got);
                    }
                    Event::Announced {
                        peer,
                        msg,
                        tag,
                        context,
                        len,
                    } => {
                        let k = tag as usize;
                        if check {
                            assert_eq!(
                                self.expect[r].pop_front(),
                                Some(k),
                                "announced out of order, twice, or unknown"
                            );
                            assert_eq!((context, len as usize), (0x1000 + tag, self.plans[k].len));
                        }
                        assert!(self.e[r].accept(peer, msg), "an announced message refused");
                        self.placing[r].push(Placing {
                            peer,
                            msg,
                            k,
                            buf: vec![0xEE; len as usize],
                        });
                    }
                    Event::Placed { peer, msg } => {
                        let at = self.placing[r]
                            .iter()
                            .position(|p| p.peer == peer && p.msg == msg)
                            .expect("placed but never announced, or twice");
                        let p = self.placing[r].swap_remove(at);
                        if check {
                            assert!(
                                p.buf == data(p.k, self.plans[p.k].len),
                                "rendezvous message {} placed with other bytes",
                                p.k
                            );
                            self.delivered += 1;
                        }
                    }
                    // A forged ACK may say goodbye, or wedge the link until the peer is lost.
                    Event::PeerLost { peer } => assert!(!check, "{r} lost peer {peer}"),
                    Event::PeerFinished { peer } => {
                        assert!(!check, "{r}: peer {peer} said goodbye")
                    }
                }
            }
        }
    }

    fn done(&self, check: bool) -> bool {
        self.to_send.iter().all(|q| q.is_empty())
            && (!check || self.expect.iter().all(|q| q.is_empty()))
            && self.placing.iter().all(|p| p.is_empty())
            && self.e.iter().all(|e| e.all_acked())
            && self.flight.is_empty()
    }

    /// Runs until every reliable message is delivered and acknowledged, or `limit` of virtual
    /// time; with `check`, every delivery is compared with what was sent.
    fn run(&mut self, limit: u64, check: bool) -> bool {
        while !self.done(check) {
            if self.now > limit {
                return false;
            }
            self.queue_sends();
            self.transmit();
            self.events(check);
            let mut next = self
                .e
                .iter()
                .filter_map(|e| e.poll_timeout())
                .min()
                .unwrap_or(u64::MAX);
            if let Some(t) = self.flight.iter().map(|f| f.at).min() {
                next = next.min(t);
            }
            if next == u64::MAX {
                // Nothing in flight, no timer: what is left waits for a send.
                next = self.now + US;
            }
            self.now = self.now.max(next);
            let mut due: Vec<InFlight> = Vec::new();
            let mut k = 0;
            while k < self.flight.len() {
                if self.flight[k].at <= self.now {
                    due.push(self.flight.swap_remove(k));
                } else {
                    k += 1;
                }
            }
            due.sort_by_key(|f| (f.at, f.serial));
            for f in due {
                self.deliver(f);
            }
            self.events(check);
            for e in &mut self.e {
                if e.poll_timeout().is_some_and(|t| t <= self.now) {
                    e.handle_timeout(self.now);
                }
            }
        }
        true
    }

    fn describe(&self) -> String {
        format!("{}{}", self.e[0].describe(), self.e[1].describe())
    }
}

// ------------------------------------------------------------------ properties

proptest! {
    #![proptest_config(config(2000))]

    /// Real traffic with damaged and foreign packets mixed in: no panic, every reliable message
    /// delivered once, in order, byte for byte (placed byte for byte when the receiver places
    /// rendezvous data), best-effort ones intact if at all, and every bad packet refused with
    /// its reason and counted once under it.
    #[test]
    fn damaged_and_foreign_packets_are_refused_and_counted(
        setup in setup(),
        plans in plans(),
        acts in proptest::collection::vec(act(), 0..400),
    ) {
        let mut link = Link::new(&setup, plans, acts);
        let finished = link.run(120_000 * MS, true);
        prop_assert!(
            finished,
            "not done after 120 s of virtual time\n{}",
            link.describe()
        );
        prop_assert_eq!(link.refused, link.bad);
        prop_assert!(link.collisions == 0, "{} damaged packets passed the CRC", link.collisions);
        // What each engine counted is what was injected into it, reason by reason.
        let counted: u64 = link.e.iter().flat_map(|e| e.drops).sum();
        prop_assert_eq!(counted, link.bad as u64);
        for e in &link.e {
            let c = e.peer_counters(1 - e.me()).unwrap();
            prop_assert_eq!(c.bad_field, 0);
            prop_assert_eq!(c.values().len(), PEER_COUNTERS.len());
        }
    }

    /// Forged DATA, RTS and CTS packets (the job's token, a good CRC, one of the fields that
    /// describe a message rewritten: message number, context, tag, length, offset) amid real
    /// traffic: the engines never panic, whatever they make of them, and every refusal is
    /// counted once.
    #[test]
    fn forged_messages_never_panic(
        setup in setup(),
        plans in plans(),
        forgeries in proptest::collection::vec((forgery(MESSAGE_FIELDS), any::<bool>()), 1..40),
        acts in proptest::collection::vec(act(), 0..40),
    ) {
        forged_run(setup, plans, forgeries, acts);
    }

    /// Any protocol configuration: validate() never panics, and one it accepts makes an engine
    /// whose rendezvous threshold fits its pool (a message sent eagerly must fit it).
    #[test]
    fn configurations_are_validated_without_panics(
        max_packet in prop_oneof![0usize..200, 0usize..70_000, any::<usize>()],
        window in prop_oneof![0u32..8, any::<u32>()],
        pool_bytes in prop_oneof![0u64..1 << 20, any::<u64>()],
        rndv_threshold in prop_oneof![
            0usize..1 << 20,
            any::<usize>().prop_filter("issue: threshold + CHARGE overflows", |&t| {
                // Known bug, see `a_huge_rendezvous_threshold_overflows_validation` below.
                (t as u64) <= u64::MAX - 64
            }),
        ],
        min_rto in prop_oneof![0u64..10, any::<u64>()],
        max_rto in any::<u64>(),
        heartbeat in any::<u64>(),
        peer_timeout in any::<u64>(),
    ) {
        let cfg = Config {
            max_packet,
            window,
            pool_bytes,
            rndv_threshold,
            min_rto,
            max_rto,
            heartbeat,
            peer_timeout,
            ..Config::default()
        };
        if cfg.validate().is_ok() {
            prop_assert!((cfg.rndv_threshold as u128) + 64 <= cfg.pool_bytes as u128);
            prop_assert!(cfg.fragment() >= 64);
            let mut e = Engine::new(cfg, 0, TOKEN);
            e.add_peer(1, 0);
        }
    }
}

/// Forgeries replace (or precede) the first packets, where state is being set up. A forgery may
/// legitimately wedge the exchange (it acknowledged what never arrived): only a bounded time is
/// run, and nothing is asserted of what is delivered.
fn forged_run(setup: Setup, plans: Vec<Plan>, forgeries: Vec<(Forgery, bool)>, acts: Vec<Act>) {
    let mut link = Link::new(&setup, plans, acts);
    link.forgeries = forgeries.into();
    let _ = link.run(20_000 * MS, false);
}

proptest! {
    #![proptest_config(config(2000))]

    /// Forged packets with any field rewritten, sequence numbers, acknowledgements, credit,
    /// flags and ACK ranges included: neither end panics, whatever a forgery did to the
    /// exchange.
    #[test]
    fn forged_packets_never_panic(
        setup in setup(),
        plans in plans(),
        forgeries in proptest::collection::vec((forgery(0..FIELDS.len()), any::<bool>()), 1..40),
        acts in proptest::collection::vec(act(), 0..40),
    ) {
        forged_run(setup, plans, forgeries, acts);
    }
}

/// A forged first DATA fragment of a new eager message whose length is within 64 of 2^64:
/// `msg_len + CHARGE` in the receiver's check against its pool (peer.rs, `on_data`, and
/// `on_best_effort` the same) overflows: a panic in a debug build, and in a release build the
/// check wraps and passes, and the receiver allocates a buffer of ~2^64 bytes (capacity
/// overflow: a panic, or an abort). Found by `forged_packets_never_panic`.
#[test]
fn a_forged_message_length_near_2_64_is_refused() {
    let setup = Setup {
        max_packet: 1472,
        window: 64,
        rndv_threshold: 16 << 10,
        receiver_places: false,
    };
    for best_effort in [false, true] {
        let mut link = Link::new(
            &setup,
            vec![Plan {
                from: 0,
                len: 100,
                best_effort,
            }],
            vec![],
        );
        link.queue_sends();
        let mut buf = vec![0u8; 2048];
        let t = link.e[0].poll_transmit(0, &mut buf).expect("a DATA packet");
        let mut b = buf[..t.len].to_vec();
        b[60..68].copy_from_slice(&(u64::MAX - 10).to_be_bytes());
        let b = with_good_crc(b);
        assert!(Repr::parse(&b, TOKEN).is_ok(), "the wire layer accepts it");
        assert_eq!(link.e[1].handle(LATENCY, &b), Err(Malformed::Field));
    }
}

/// `Config::validate` computes `rndv_threshold + CHARGE` in u64: a threshold within 64 of 2^64
/// (VOLLEY_NET_RNDV_THRESHOLD=18446744073709551615 reaches it) panics in a debug build and, in
/// a release build, wraps and is accepted: messages of any size then go eagerly and can never
/// fit the receiver's pool. Found by `configurations_are_validated_without_panics`.
#[test]
fn a_huge_rendezvous_threshold_overflows_validation() {
    let cfg = Config {
        rndv_threshold: usize::MAX,
        ..Config::default()
    };
    assert!(cfg.validate().is_err());
}

/// The shrunk input of `forged_packets_never_panic` for the sender's panic: rank 0 sends two
/// empty messages and one of 1025 bytes (a rendezvous: RTS, CTS, data); the RTS arrives with
/// its sequence number raised by one (the job's token, a good CRC), and the real one never. The
/// receiver takes it as packet 3 and clears the message; the data goes and is acknowledged, the
/// message completes and leaves the send queue, but sequence number 2 never is: when the sender
/// retransmits "RTS of message 2" it indexed its send queue with `msg - out_base` (peer.rs,
/// `emit_seq`, What::Rts), which was past its end: "Out of bounds access" in a release build,
/// "attempt to subtract with overflow" in a debug one, from `Engine::poll_transmit`. Now the
/// RTS carries its own envelope; the receiver takes the sequence number of a request for a
/// message it delivered already without acting on it, and counts it.
#[test]
fn a_forged_rts_sequence_number_does_not_panic_the_sender() {
    let setup = Setup {
        max_packet: 200,
        window: 64,
        rndv_threshold: 1024,
        receiver_places: false,
    };
    let plan = |len| Plan {
        from: 0,
        len,
        best_effort: false,
    };
    let mut link = Link::new(&setup, vec![plan(0), plan(0), plan(1025)], vec![]);
    let same = Forgery {
        field: 0,
        how: 0,
        delta: 0,
        value: 0,
    };
    let seq_plus_one = Forgery {
        delta: 1,
        ..same.clone()
    };
    link.forgeries = vec![(same.clone(), false), (same, false), (seq_plus_one, false)].into();
    link.avoid_known_bugs = false;
    // The exchange settles: every packet, the retransmitted RTS included, is acknowledged.
    assert!(link.run(20_000 * MS, false));
    let stale = |e: usize| {
        link.e[e]
            .peer_counters(1 - e as u32)
            .unwrap()
            .stale_requests
    };
    assert_eq!(
        stale(1),
        1,
        "the retransmitted RTS reached the receiver and was taken"
    );
    assert_eq!(stale(0), 0);
}
