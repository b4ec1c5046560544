//! The protocol engine driven in virtual time over a simulated link that loses, duplicates,
//! reorders, delays and corrupts packets, from a seed. This is the one simulated link in volley:
//! it exists because the engine does no I/O. A failing seed is printed; replay it with
//! `VOLLEY_SIM_SEED=<seed> cargo test --release -p volley-proto --test sim`.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};
use volley_proto::{Config, Credit, Engine, Event, Reliability, SendError};

const US: u64 = 1_000;
const MS: u64 = 1_000_000;

/// splitmix64: small, seedable, good enough to pick faults.
#[derive(Clone)]
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
    fn chance(&mut self, p: f64) -> bool {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64 <= p && p > 0.0
    }
}

#[derive(Clone, Debug, Default)]
struct Faults {
    loss: f64,
    dup: f64,
    reorder: f64,
    corrupt: f64,
    /// Foreign and garbage packets injected per real packet.
    junk: f64,
    delay: u64,
    jitter: u64,
}

/// A switch port in front of each destination that drains at `bytes_per_us` and queues at
/// most `queue` packets, dropping what arrives when it is full (tail drop): the bottleneck that
/// congestion control must share and keep from overflowing.
#[derive(Clone, Copy, Debug)]
struct Bottleneck {
    bytes_per_us: u64,
    queue: usize,
}

/// The byte at position `i` of message `k` from `src` to `dst`.
fn pattern(src: usize, dst: usize, k: usize, i: usize) -> u8 {
    let h =
        ((src as u64) << 48 | (dst as u64) << 32 | k as u64).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    ((h ^ i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 56) as u8
}

/// (arrival time, serial, destination, bytes)
type InFlight = (u64, u64, usize, Vec<u8>);

struct Expect {
    tag: u32,
    context: u32,
    len: usize,
    k: usize,
}

/// A rendezvous message announced to its receiving application (`Config::receiver_places`),
/// placed into the application's own buffer.
struct Placing {
    r: usize,
    peer: u32,
    msg: u64,
    e: Expect,
    buf: Vec<u8>,
    /// When the application accepts it (a receive is posted), or gives it up.
    accept_at: u64,
    accepted: bool,
    discard: bool,
}

struct Sim {
    placing: Vec<Placing>,
    placed: usize,
    /// Messages whose placements were given up (they still complete at the sender).
    discarded: usize,
    rng: Rng,
    now: u64,
    engines: Vec<Engine>,
    flight: BinaryHeap<Reverse<InFlight>>,
    serial: u64,
    faults: Faults,
    /// When each sender's link is free again (10 Gbit/s).
    link_free: Vec<u64>,
    /// Reliable messages still to be queued: (src, dst) -> list.
    to_send: Vec<VecDeque<(usize, Expect, Reliability)>>,
    /// Expected deliveries per (src, dst), in order.
    expect: Vec<Vec<VecDeque<Expect>>>,
    best_effort_expect: Vec<Vec<Vec<Expect>>>,
    /// Messages the applications hold before consuming them: (release time, credit, engine,
    /// bytes).
    held: Vec<(u64, Credit, usize, u64)>,
    /// The applications consume nothing until told otherwise.
    hold_forever: bool,
    /// Bytes of delivered messages the applications hold now, and the most they ever held.
    held_bytes: u64,
    held_bytes_max: u64,
    hold: f64,
    delivered: usize,
    best_effort_delivered: usize,
    lost: Vec<(usize, u32, u64)>,
    finished: Vec<(usize, u32)>,
    /// Packets the link carried, by direction (for the partition test).
    down: bool,
    bottleneck: Option<Bottleneck>,
    /// Per destination port: when it is free, departure times of the packets it queues.
    bn_free: Vec<u64>,
    bn_queue: Vec<VecDeque<u64>>,
    /// Packets that reached a bottleneck, and those it dropped.
    bn_in: u64,
    bn_dropped: u64,
    /// Bytes of reliable messages delivered, per (src, dst).
    delivered_bytes: Vec<Vec<u64>>,
}

impl Sim {
    fn new(seed: u64, n: usize, cfg: &Config, faults: Faults) -> Sim {
        let token = 0xfeed_0000 + seed;
        let mut engines: Vec<Engine> = (0..n)
            .map(|r| Engine::new(cfg.clone(), r as u32, token))
            .collect();
        for (r, e) in engines.iter_mut().enumerate() {
            for p in 0..n {
                if p != r {
                    e.add_peer(p as u32, 0);
                }
            }
        }
        Sim {
            placing: Vec::new(),
            placed: 0,
            discarded: 0,
            rng: Rng(seed),
            now: 0,
            engines,
            flight: BinaryHeap::new(),
            serial: 0,
            faults,
            link_free: vec![0; n],
            to_send: (0..n).map(|_| VecDeque::new()).collect(),
            expect: (0..n)
                .map(|_| (0..n).map(|_| VecDeque::new()).collect())
                .collect(),
            best_effort_expect: (0..n)
                .map(|_| (0..n).map(|_| Vec::new()).collect())
                .collect(),
            held: Vec::new(),
            hold_forever: false,
            held_bytes: 0,
            held_bytes_max: 0,
            hold: 0.0,
            delivered: 0,
            best_effort_delivered: 0,
            lost: Vec::new(),
            finished: Vec::new(),
            down: false,
            bottleneck: None,
            bn_free: vec![0; n],
            bn_queue: (0..n).map(|_| VecDeque::new()).collect(),
            bn_in: 0,
            bn_dropped: 0,
            delivered_bytes: vec![vec![0; n]; n],
        }
    }

    fn plan(&mut self, src: usize, dst: usize, len: usize, how: Reliability) {
        let k = self.expect[src][dst].len() + self.best_effort_expect[src][dst].len();
        let e = Expect {
            tag: self.rng.below(4) as u32,
            context: self.rng.below(4) as u32,
            len,
            k,
        };
        let e2 = Expect { ..e };
        match how {
            Reliability::Reliable => self.expect[src][dst].push_back(Expect { ..e2 }),
            Reliability::BestEffort => self.best_effort_expect[src][dst].push(Expect { ..e2 }),
        }
        self.to_send[src].push_back((dst, e, how));
    }

    fn transmit_all(&mut self) {
        let mut buf = vec![0u8; 65536];
        for i in 0..self.engines.len() {
            while let Some(t) = self.engines[i].poll_transmit(self.now, &mut buf) {
                assert!(
                    t.len <= self.engines[i].config().max_packet,
                    "packet larger than the device allows"
                );
                let pkt = buf[..t.len].to_vec();
                self.carry(i, t.peer as usize, pkt);
            }
        }
    }

    fn carry(&mut self, src: usize, dst: usize, mut pkt: Vec<u8>) {
        let f = self.faults.clone();
        // Serialisation at 10 Gbit/s: 0.8 ns a byte.
        let start = self.link_free[src].max(self.now);
        self.link_free[src] = start + (pkt.len() as u64 * 8) / 10;
        if self.down || self.rng.chance(f.loss) {
            return;
        }
        if self.rng.chance(f.corrupt) {
            let i = self.rng.below(pkt.len() as u64) as usize;
            pkt[i] ^= 1 << self.rng.below(8);
        }
        let mut base = self.link_free[src];
        if let Some(b) = self.bottleneck {
            let q = &mut self.bn_queue[dst];
            while q.front().is_some_and(|&d| d <= base) {
                q.pop_front();
            }
            self.bn_in += 1;
            if q.len() >= b.queue {
                self.bn_dropped += 1;
                return;
            }
            let depart = self.bn_free[dst].max(base) + pkt.len() as u64 * 1000 / b.bytes_per_us;
            self.bn_free[dst] = depart;
            q.push_back(depart);
            base = depart;
        }
        let mut at = base + f.delay + self.rng.below(f.jitter + 1);
        if self.rng.chance(f.reorder) {
            at += self.rng.below(200 * US);
        }
        if self.rng.chance(f.dup) {
            let later = at + self.rng.below(50 * US);
            self.push(later, dst, pkt.clone());
        }
        if self.rng.chance(f.junk) {
            let junk = self.junk(&pkt);
            self.push(at, dst, junk);
        }
        self.push(at, dst, pkt);
    }

    /// Garbage, a packet of another job, or a truncated copy.
    fn junk(&mut self, pkt: &[u8]) -> Vec<u8> {
        match self.rng.below(3) {
            0 => (0..self.rng.below(1500))
                .map(|_| self.rng.next() as u8)
                .collect(),
            1 => {
                let mut p = pkt.to_vec();
                p[8] ^= 0x80; // token
                if let Ok(mut v) = volley_wire::Packet::new_checked(&mut p[..]) {
                    v.fill_checksum();
                }
                p
            }
            _ => pkt[..self.rng.below(pkt.len() as u64) as usize].to_vec(),
        }
    }

    fn push(&mut self, at: u64, dst: usize, pkt: Vec<u8>) {
        self.serial += 1;
        self.flight.push(Reverse((at, self.serial, dst, pkt)));
    }

    fn queue_sends(&mut self) {
        for src in 0..self.engines.len() {
            while let Some((dst, e, how)) = self.to_send[src].pop_front() {
                let mut data = self.engines[src].buffer(e.len);
                for (i, b) in data.iter_mut().enumerate() {
                    *b = pattern(src, dst, e.k, i);
                }
                match self.engines[src].send(self.now, dst as u32, e.tag, e.context, data, how) {
                    Ok(()) => {}
                    Err(SendError::Busy(_)) => {
                        self.to_send[src].push_front((dst, e, how));
                        break;
                    }
                    Err(e) => panic!("send: {e:?}"),
                }
            }
        }
    }

    fn events(&mut self) {
        for r in 0..self.engines.len() {
            while let Some(ev) = self.engines[r].poll_event() {
                match ev {
                    Event::Message {
                        peer,
                        tag,
                        context,
                        data,
                        how,
                        credit,
                    } => {
                        let src = peer as usize;
                        let best_effort = how == Reliability::BestEffort;
                        let e = if best_effort {
                            let list = &mut self.best_effort_expect[src][r];
                            let at = list
                                .iter()
                                .position(|e| e.len == data.len() && e.tag == tag && e.context == context && data.iter().enumerate().all(|(i, b)| *b == pattern(src, r, e.k, i)))
                                .unwrap_or_else(|| panic!("best-effort message {src}->{r} of {} bytes was never sent (or arrived damaged)", data.len()));
                            self.best_effort_delivered += 1;
                            list.remove(at)
                        } else {
                            self.delivered += 1;
                            self.delivered_bytes[src][r] += data.len() as u64;
                            self.expect[src][r]
                                .pop_front()
                                .unwrap_or_else(|| panic!("{src}->{r}: a message delivered that was never sent (or twice)"))
                        };
                        assert_eq!(
                            (tag, context, data.len()),
                            (e.tag, e.context, e.len),
                            "{src}->{r}: message {} out of order or wrong",
                            e.k
                        );
                        for (i, b) in data.iter().enumerate() {
                            assert_eq!(
                                *b,
                                pattern(src, r, e.k, i),
                                "{src}->{r}: message {} ({how:?}, {} bytes) byte {i} wrong",
                                e.k,
                                e.len
                            );
                        }
                        if self.hold_forever || self.rng.chance(self.hold) {
                            let t = if self.hold_forever {
                                u64::MAX
                            } else {
                                self.now + self.rng.below(3 * MS)
                            };
                            self.held.push((t, credit, r, data.len() as u64));
                            self.held_bytes += data.len() as u64;
                            self.held_bytes_max = self.held_bytes_max.max(self.held_bytes);
                        } else {
                            self.engines[r].release(credit);
                        }
                        self.engines[r].recycle(data);
                    }
                    Event::Announced {
                        peer,
                        msg,
                        tag,
                        context,
                        len,
                    } => {
                        let src = peer as usize;
                        let e = self.expect[src][r].pop_front().unwrap_or_else(|| {
                            panic!("{src}->{r}: a message announced that was never sent (or twice)")
                        });
                        assert_eq!(
                            (tag, context, len as usize),
                            (e.tag, e.context, e.len),
                            "{src}->{r}: announced message {} out of order or wrong",
                            e.k
                        );
                        let later = self.rng.chance(self.hold);
                        self.placing.push(Placing {
                            r,
                            peer,
                            msg,
                            e,
                            buf: vec![0xEE; len as usize],
                            accept_at: if later {
                                self.now + self.rng.below(3 * MS)
                            } else {
                                self.now
                            },
                            accepted: false,
                            discard: self.rng.chance(0.1),
                        });
                    }
                    Event::Placed { peer, msg } => {
                        let at = self
                            .placing
                            .iter()
                            .position(|p| p.r == r && p.peer == peer && p.msg == msg)
                            .unwrap_or_else(|| panic!("{peer}->{r}: message {msg} placed but never announced (or placed twice)"));
                        let p = self.placing.swap_remove(at);
                        assert!(
                            p.accepted && !p.discard,
                            "{peer}->{r}: message {msg} placed but not accepted"
                        );
                        for (i, b) in p.buf.iter().enumerate() {
                            assert_eq!(
                                *b,
                                pattern(peer as usize, r, p.e.k, i),
                                "{peer}->{r}: placed message {} ({} bytes) byte {i} wrong",
                                p.e.k,
                                p.e.len
                            );
                        }
                        self.delivered += 1;
                        self.placed += 1;
                    }
                    Event::PeerLost { peer } => self.lost.push((r, peer, self.now)),
                    Event::PeerFinished { peer } => self.finished.push((r, peer)),
                }
            }
        }
        let now = self.now;
        let mut k = 0;
        while k < self.placing.len() {
            let p = &mut self.placing[k];
            if p.accepted || p.accept_at > now {
                k += 1;
                continue;
            }
            if p.discard {
                self.engines[p.r].discard(p.peer, p.msg);
                self.placing.swap_remove(k);
                self.discarded += 1;
                continue;
            }
            assert!(
                self.engines[p.r].accept(p.peer, p.msg),
                "an announced message could not be accepted"
            );
            p.accepted = true;
            k += 1;
        }
        let mut k = 0;
        while k < self.held.len() {
            if self.held[k].0 <= now {
                let (_, c, r, bytes) = self.held.swap_remove(k);
                self.held_bytes -= bytes;
                self.engines[r].release(c);
            } else {
                k += 1;
            }
        }
    }

    fn pending_reliable(&self) -> usize {
        self.expect.iter().flatten().map(|q| q.len()).sum()
    }

    /// One step of the world: send what can be sent, then move time to the next thing.
    fn step(&mut self) -> bool {
        self.queue_sends();
        self.transmit_all();
        self.events();
        let mut next = self
            .engines
            .iter()
            .filter_map(|e| e.poll_timeout())
            .min()
            .unwrap_or(u64::MAX);
        if let Some(Reverse((t, ..))) = self.flight.peek() {
            next = next.min(*t);
        }
        if let Some(t) = self.held.iter().map(|h| h.0).min() {
            next = next.min(t);
        }
        if let Some(t) = self
            .placing
            .iter()
            .filter(|p| !p.accepted)
            .map(|p| p.accept_at)
            .min()
        {
            next = next.min(t);
        }
        if next == u64::MAX {
            return false;
        }
        self.now = self.now.max(next);
        while self
            .flight
            .peek()
            .is_some_and(|Reverse((t, ..))| *t <= self.now)
        {
            let Reverse((_, _, dst, pkt)) = self.flight.pop().expect("peeked");
            let placing = &mut self.placing;
            let _ = self.engines[dst].handle_placing(self.now, &pkt, &mut |pl| {
                let p = placing
                    .iter_mut()
                    .find(|p| p.r == dst && p.peer == pl.peer && p.msg == pl.msg)
                    .expect("a fragment placed for a message the application did not accept");
                assert!(
                    p.accepted,
                    "a fragment placed before its message was accepted"
                );
                let off = pl.offset as usize;
                p.buf[off..off + pl.bytes.len()].copy_from_slice(pl.bytes);
            });
        }
        for e in &mut self.engines {
            if e.poll_timeout().is_some_and(|t| t <= self.now) {
                e.handle_timeout(self.now);
            }
        }
        true
    }

    /// Runs until every reliable message is delivered and acknowledged.
    fn run(&mut self, limit: u64) {
        while self.pending_reliable() > 0
            || self.to_send.iter().any(|q| !q.is_empty())
            || !self.engines.iter().all(|e| e.all_acked())
            || !self.held.is_empty()
            || !self.placing.is_empty()
        {
            if self.now >= limit {
                let states: Vec<String> = self.engines.iter().map(|e| e.describe()).collect();
                panic!(
                    "not done after {} ms of virtual time: {} messages undelivered\n{}",
                    limit / MS,
                    self.pending_reliable(),
                    states.join("")
                );
            }
            assert!(
                self.lost.is_empty(),
                "a peer was declared lost on a lossy but working link: {:?}",
                self.lost
            );
            assert!(self.step(), "nothing left to happen, but not done");
        }
    }
}

fn sim_config(rng: &mut Rng) -> Config {
    let max_packet = [200, 1472, 8972][rng.below(3) as usize];
    Config {
        max_packet,
        window: [16, 64, 512][rng.below(3) as usize],
        pool_bytes: 256 << 10,
        rndv_threshold: [1024, 16 << 10][rng.below(2) as usize],
        rndv_budget: 512 << 10,
        heartbeat: 50 * MS,
        peer_timeout: 5000 * MS,
        send_budget: 1 << 20,
        ..Config::default()
    }
}

/// Runs one seed; returns how many rendezvous messages the applications placed and gave up.
fn run_seed(seed: u64) -> (usize, usize) {
    let mut rng = Rng(seed ^ 0x5eed);
    let cfg = sim_config(&mut rng);
    let faults = Faults {
        loss: [0.0, 0.01, 0.1, 0.2][rng.below(4) as usize],
        dup: [0.0, 0.05][rng.below(2) as usize],
        reorder: [0.0, 0.1][rng.below(2) as usize],
        corrupt: [0.0, 0.02][rng.below(2) as usize],
        junk: [0.0, 0.02][rng.below(2) as usize],
        delay: 5 * US + rng.below(50 * US),
        jitter: rng.below(20 * US),
    };
    let n = 2 + rng.below(2) as usize;
    // Odd seeds: the receiving application places rendezvous messages itself, accepting them
    // at once or later, or giving some up.
    let cfg = Config {
        receiver_places: seed % 2 == 1,
        ..cfg
    };
    let mut sim = Sim::new(seed, n, &cfg, faults.clone());
    sim.hold = [0.0, 0.3][rng.below(2) as usize];
    // A third of the seeds send through a bottleneck (1, 2.5 or 10 Gbit/s; a queue of 16, 64 or
    // 256 packets), with a bulk message beside the others: congestion control must keep its
    // queue from overflowing most of the time, whatever else the link does.
    if seed % 3 == 2 {
        sim.bottleneck = Some(Bottleneck {
            bytes_per_us: [125, 312, 1250][rng.below(3) as usize],
            queue: [16, 64, 256][rng.below(3) as usize],
        });
        sim.plan(0, 1, 2 << 20, Reliability::Reliable);
    }
    let msgs = 10 + rng.below(30) as usize;
    for _ in 0..msgs {
        let src = rng.below(n as u64) as usize;
        let dst = (src + 1 + rng.below(n as u64 - 1) as usize) % n;
        let len = match rng.below(10) {
            0..=4 => rng.below(100) as usize,
            5..=7 => rng.below(5000) as usize,
            8 => rng.below(40 << 10) as usize,
            _ => rng.below(300 << 10) as usize,
        };
        let how = if rng.chance(0.1) {
            Reliability::BestEffort
        } else {
            Reliability::Reliable
        };
        sim.plan(src, dst, len, how);
    }
    sim.run(120_000 * MS);
    let c: u64 = sim
        .engines
        .iter()
        .map(|e| e.drops.iter().sum::<u64>())
        .sum();
    if faults.corrupt == 0.0 && faults.junk == 0.0 {
        assert_eq!(c, 0, "drops with no corruption and no junk");
    }
    if let Some(b) = sim.bottleneck {
        // Stable: slow start may overshoot, then losses cut the window; a sender that kept
        // blasting would lose most of what it sent.
        assert!(
            sim.bn_dropped as f64 <= 0.1 * sim.bn_in as f64 + 20.0,
            "{b:?}: the bottleneck dropped {} of {} packets",
            sim.bn_dropped,
            sim.bn_in
        );
    }
    (sim.placed, sim.discarded)
}

#[test]
fn simulation_seeds() {
    if let Ok(s) = std::env::var("VOLLEY_SIM_SEED") {
        let seed: u64 = s.parse().expect("VOLLEY_SIM_SEED must be a number");
        let (placed, discarded) = run_seed(seed);
        println!("seed {seed}: {placed} placed, {discarded} given up");
        return;
    }
    let n: u64 = std::env::var("VOLLEY_SIM_SEEDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1000);
    let (mut placed, mut discarded) = (0, 0);
    for seed in 0..n {
        match std::panic::catch_unwind(|| run_seed(seed)) {
            Ok((p, d)) => {
                placed += p;
                discarded += d;
            }
            Err(e) => {
                let msg = e
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("simulation seed {seed} failed: {msg}\nreplay: VOLLEY_SIM_SEED={seed} cargo test --release -p volley-proto --test sim simulation_seeds");
            }
        }
    }
    if n >= 100 {
        // The odd seeds must have exercised placement, and giving placements up.
        assert!(
            placed > 0 && discarded > 0,
            "{placed} placed, {discarded} given up"
        );
    }
    println!("{placed} rendezvous messages placed by the application, {discarded} given up");
}

fn quiet_config() -> Config {
    Config {
        heartbeat: 50 * MS,
        peer_timeout: 1000 * MS,
        ..Config::default()
    }
}

/// A 1 Gbit/s port with a queue of 64 packets in front of every destination, 20 µs away.
const GIGABIT: Bottleneck = Bottleneck {
    bytes_per_us: 125,
    queue: 64,
};

fn bottleneck_sim(seed: u64, n: usize, cc: bool) -> Sim {
    let cfg = Config {
        congestion_control: cc,
        ..quiet_config()
    };
    let faults = Faults {
        delay: 20 * US,
        jitter: 5 * US,
        ..Faults::default()
    };
    let mut sim = Sim::new(seed, n, &cfg, faults);
    sim.bottleneck = Some(GIGABIT);
    sim
}

/// Issue 15, point 5: alone, a flow fills the bottleneck (at least 80% of its rate) and its
/// queue rarely overflows; with congestion control off, the fixed window of 4096 packets
/// overflows it again and again.
#[test]
fn congestion_control_fills_a_bottleneck_without_overflowing_it() {
    const TOTAL: u64 = 16 << 20;
    for seed in 0..10 {
        let mut sim = bottleneck_sim(seed, 2, true);
        for _ in 0..64 {
            sim.plan(0, 1, (TOTAL / 64) as usize, Reliability::Reliable);
        }
        sim.run(60_000 * MS);
        let rate = TOTAL as f64 / (sim.now as f64 / 1000.0);
        let dropped = sim.bn_dropped as f64 / sim.bn_in as f64;
        assert!(
            rate >= 0.8 * GIGABIT.bytes_per_us as f64,
            "seed {seed}: {rate:.1} bytes/us through a 125 bytes/us bottleneck"
        );
        assert!(
            dropped <= 0.02,
            "seed {seed}: {:.2}% dropped",
            dropped * 100.0
        );
        let cut: u64 = sim.engines[0].peer_counters(1).unwrap().cwnd_reductions;
        assert!(cut > 0, "seed {seed}: the window never met the bottleneck");
        if seed == 0 {
            let mut blast = bottleneck_sim(seed, 2, false);
            for _ in 0..64 {
                blast.plan(0, 1, (TOTAL / 64) as usize, Reliability::Reliable);
            }
            blast.run(60_000 * MS);
            let blasted = blast.bn_dropped as f64 / blast.bn_in as f64;
            assert!(
                blasted > 5.0 * dropped.max(0.01),
                "without congestion control {:.2}% dropped, with it {:.2}%",
                blasted * 100.0,
                dropped * 100.0
            );
        }
    }
}

/// Two flows into one destination through its bottleneck, started together: when the first
/// is done, the other has had a fair part of the port (at least a third of what the first got;
/// AIMD flows converge to equal shares).
#[test]
fn two_flows_share_a_bottleneck() {
    const TOTAL: u64 = 16 << 20;
    for seed in 0..10 {
        let mut sim = bottleneck_sim(seed, 3, true);
        for _ in 0..64 {
            sim.plan(0, 2, (TOTAL / 64) as usize, Reliability::Reliable);
            sim.plan(1, 2, (TOTAL / 64) as usize, Reliability::Reliable);
        }
        while sim.delivered_bytes[0][2] < TOTAL && sim.delivered_bytes[1][2] < TOTAL {
            assert!(sim.now < 60_000 * MS && sim.step(), "seed {seed}: stuck");
        }
        let (a, b) = (sim.delivered_bytes[0][2], sim.delivered_bytes[1][2]);
        let (hi, lo) = (a.max(b), a.min(b));
        assert!(
            lo * 3 >= hi,
            "seed {seed}: one flow moved {hi} bytes while the other moved {lo}"
        );
        let rate = (a + b) as f64 / (sim.now as f64 / 1000.0);
        assert!(
            rate >= 0.8 * GIGABIT.bytes_per_us as f64,
            "seed {seed}: together {rate:.1} bytes/us"
        );
        sim.run(60_000 * MS);
    }
}

#[test]
fn a_one_gibibyte_message_crosses_a_lossy_jumbo_link() {
    let cfg = Config {
        max_packet: 8972,
        ..quiet_config()
    };
    let faults = Faults {
        loss: 0.001,
        delay: 20 * US,
        ..Faults::default()
    };
    let mut sim = Sim::new(7, 2, &cfg, faults);
    sim.plan(0, 1, 1 << 30, Reliability::Reliable);
    sim.plan(0, 1, 10, Reliability::Reliable);
    sim.run(600_000 * MS);
    let c = sim.engines[0].peer_counters(1).unwrap();
    assert_eq!(c.rendezvous_sent, 1);
    assert!(
        c.retransmits_fast + c.retransmits_timeout > 0,
        "0.1% loss of ~120k packets lost none?"
    );
}

#[test]
fn a_silent_peer_is_declared_lost_within_the_timeout() {
    let cfg = quiet_config();
    let mut sim = Sim::new(
        3,
        3,
        &cfg,
        Faults {
            delay: 10 * US,
            ..Faults::default()
        },
    );
    sim.plan(0, 1, 100, Reliability::Reliable);
    sim.plan(1, 2, 100_000, Reliability::Reliable);
    sim.run(10_000 * MS);
    // The network goes dark mid-transfer.
    sim.plan(0, 1, 5 << 20, Reliability::Reliable);
    for _ in 0..50 {
        sim.step();
    }
    sim.down = true;
    let cut = sim.now;
    while sim.lost.len() < 6 {
        assert!(
            sim.now < cut + 10 * cfg.peer_timeout,
            "peers not declared lost: {:?}",
            sim.lost
        );
        sim.step();
    }
    for &(who, peer, at) in &sim.lost {
        assert!(
            at <= cut + cfg.peer_timeout + cfg.heartbeat,
            "{who} lost {peer} only after {} ms",
            (at - cut) / MS
        );
    }
    // Sending to a lost peer says so.
    let e = sim.engines[0].send(sim.now, 1, 0, 0, vec![1], Reliability::Reliable);
    assert_eq!(e, Err(SendError::PeerLost));
}

#[test]
fn a_receiver_that_does_not_consume_is_not_flooded() {
    let cfg = Config {
        pool_bytes: 64 << 10,
        rndv_threshold: 8 << 10,
        rndv_budget: 256 << 10,
        // The eager messages queue behind the 2 MB of rendezvous ones, up to the credit.
        eager_budget: 64 << 20,
        ..quiet_config()
    };
    let mut sim = Sim::new(
        11,
        2,
        &cfg,
        Faults {
            delay: 10 * US,
            ..Faults::default()
        },
    );
    // 200 eager messages of 4 KiB (800 KiB) and 20 rendezvous messages of 100 KiB (2 MB): far
    // more than the pool and the budget.
    for k in 0..220 {
        let len = if k < 20 { 100 << 10 } else { 4 << 10 };
        sim.plan(0, 1, len, Reliability::Reliable);
    }
    // The receiving application is busy: it holds every message, consuming none.
    sim.hold_forever = true;
    while sim.now < 2000 * MS {
        assert!(sim.step(), "nothing left to happen");
    }
    // What the receiver was made to hold is bounded by its pool and its rendezvous budget.
    assert!(
        sim.held_bytes_max <= (64 << 10) + (256 << 10),
        "receiver holds {} bytes",
        sim.held_bytes_max
    );
    assert!(
        sim.delivered < 220,
        "everything arrived although nothing was consumed"
    );
    let c = sim.engines[0].peer_counters(1).unwrap().clone();
    assert!(c.credit_stalls > 0);
    assert!(sim.engines[1].peer_counters(0).unwrap().rendezvous_waits > 0);
    // Now the application catches up: everything arrives.
    sim.hold_forever = false;
    for h in sim.held.iter_mut() {
        h.0 = sim.now;
    }
    sim.run(sim.now + 60_000 * MS);
}

#[test]
fn best_effort_messages_are_never_retransmitted() {
    let cfg = quiet_config();
    let faults = Faults {
        loss: 0.1,
        delay: 10 * US,
        ..Faults::default()
    };
    let mut sim = Sim::new(5, 2, &cfg, faults);
    for k in 0..400 {
        sim.plan(
            0,
            1,
            if k % 2 == 0 { 100 } else { 5000 },
            Reliability::BestEffort,
        );
    }
    for _ in 0..2000 {
        sim.step();
    }
    let c = sim.engines[0].peer_counters(1).unwrap();
    assert_eq!(c.retransmits_fast + c.retransmits_timeout, 0);
    let lost = sim.engines[1].peer_counters(0).unwrap().best_effort_lost;
    // Every message is either delivered intact (checked on delivery) or counted lost.
    assert!(
        sim.best_effort_delivered > 200,
        "{}",
        sim.best_effort_delivered
    );
    assert!(lost > 0);
    assert!(sim.best_effort_delivered as u64 + lost <= 400);
}

#[test]
fn anomalies_are_counted_by_reason() {
    let cfg = quiet_config();
    let faults = Faults {
        loss: 0.05,
        dup: 0.05,
        corrupt: 0.05,
        junk: 0.05,
        delay: 10 * US,
        jitter: 5 * US,
        ..Faults::default()
    };
    let mut sim = Sim::new(9, 2, &cfg, faults);
    for k in 0..300 {
        sim.plan(k % 2, 1 - k % 2, 3000, Reliability::Reliable);
    }
    sim.run(60_000 * MS);
    let d: Vec<u64> = (0..8)
        .map(|i| sim.engines[0].drops[i] + sim.engines[1].drops[i])
        .collect();
    assert!(d[0] > 0, "truncated {d:?}");
    assert!(d[1] > 0 || d[4] > 0, "foreign garbage {d:?}");
    assert!(d[4] > 0, "bad checksum {d:?}");
    assert!(d[5] > 0, "wrong token {d:?}");
    let c = sim.engines[1].peer_counters(0).unwrap();
    assert!(c.duplicates > 0);
    let c = sim.engines[0].peer_counters(1).unwrap();
    assert!(c.retransmits_fast + c.retransmits_timeout > 0);
}

#[test]
fn a_peer_that_closes_is_finished_not_lost() {
    let cfg = quiet_config();
    let mut sim = Sim::new(
        21,
        2,
        &cfg,
        Faults {
            delay: 10 * US,
            ..Faults::default()
        },
    );
    sim.plan(0, 1, 5000, Reliability::Reliable);
    sim.run(10_000 * MS);
    sim.engines[0].close();
    let t = sim.now;
    while sim.finished.is_empty() {
        assert!(sim.now < t + 100 * MS, "no goodbye arrived");
        sim.step();
    }
    assert_eq!(sim.finished, vec![(1, 0)]);
    assert!(sim.lost.is_empty());
}

/// The shape of `volley bench stream` under 1% loss: a long train of rendezvous messages with
/// the default (large) window, then one small message back.
#[test]
fn a_stream_of_rendezvous_messages_survives_one_percent_loss() {
    for seed in 0..20 {
        let cfg = Config {
            max_packet: 1472,
            ..quiet_config()
        };
        let faults = Faults {
            loss: 0.01,
            delay: 20 * US,
            jitter: 2 * US,
            ..Faults::default()
        };
        let mut sim = Sim::new(100 + seed, 2, &cfg, faults);
        for _ in 0..160 {
            sim.plan(0, 1, 64 << 10, Reliability::Reliable);
        }
        for _ in 0..2 {
            sim.plan(0, 1, 8 << 20, Reliability::Reliable);
        }
        sim.plan(1, 0, 8, Reliability::Reliable);
        sim.run(60_000 * MS);
    }
}

/// Two engines over a perfect link, pumped until neither sends anything for a while; the events of
/// the receiving one, with every fragment placed into `bufs` (by message number).
fn pump_pair(
    a: &mut Engine,
    b: &mut Engine,
    now: &mut u64,
    bufs: &mut [(u64, Vec<u8>)],
) -> Vec<Event> {
    let mut events = Vec::new();
    let mut pkt = vec![0u8; 70_000];
    let mut quiet = 0;
    for _ in 0..1_000_000 {
        let mut moved = false;
        while let Some(t) = a.poll_transmit(*now, &mut pkt) {
            let _ = b.handle_placing(*now, &pkt[..t.len], &mut |pl| {
                let (_, buf) = bufs
                    .iter_mut()
                    .find(|(m, _)| *m == pl.msg)
                    .expect("placed only once accepted");
                let off = pl.offset as usize;
                buf[off..off + pl.bytes.len()].copy_from_slice(pl.bytes);
            });
            moved = true;
        }
        while let Some(t) = b.poll_transmit(*now, &mut pkt) {
            let _ = a.handle(*now, &pkt[..t.len]);
            moved = true;
        }
        while let Some(ev) = b.poll_event() {
            events.push(ev);
        }
        *now += 10 * US;
        for e in [&mut *a, &mut *b] {
            if e.poll_timeout().is_some_and(|t| t <= *now) {
                e.handle_timeout(*now);
            }
        }
        // Quiet for 2 ms of virtual time (delayed acknowledgements come within 50 us).
        quiet = if moved { 0 } else { quiet + 1 };
        if quiet == 200 {
            return events;
        }
    }
    panic!("the pair never went quiet");
}

/// With `receiver_places`, rendezvous messages beyond the sender's budget are all announced
/// (waiting for their CTS they hold no budget), a small message sent after them is delivered
/// before any is accepted, and the receiver places them in the order it chooses: last first.
#[test]
fn the_receiver_places_announced_messages_in_the_order_it_accepts_them() {
    let cfg = Config {
        receiver_places: true,
        send_budget: 1 << 20,
        rndv_threshold: 1024,
        ..quiet_config()
    };
    let (mut a, mut b) = (
        Engine::new(cfg.clone(), 0, 77),
        Engine::new(cfg.clone(), 1, 77),
    );
    a.add_peer(1, 0);
    b.add_peer(0, 0);
    let len = 800 << 10;
    let mut now = 0;
    for k in 0..3u8 {
        a.send(
            now,
            1,
            u32::from(k),
            5,
            vec![k + 1; len],
            Reliability::Reliable,
        )
        .expect("a rendezvous waiting for its CTS holds no send budget");
    }
    a.send(now, 1, 9, 5, b"after".to_vec(), Reliability::Reliable)
        .unwrap();
    let evs = pump_pair(&mut a, &mut b, &mut now, &mut []);
    let mut msgs = Vec::new();
    for ev in &evs {
        match ev {
            Event::Announced {
                msg, tag, len: l, ..
            } => {
                assert_eq!(*l, len as u64);
                msgs.push((*msg, *tag));
            }
            Event::Message { tag, data, .. } => {
                assert_eq!((*tag, &data[..]), (9, &b"after"[..]));
                assert_eq!(msgs.len(), 3, "the small message overtook an announcement");
            }
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(msgs.iter().map(|m| m.1).collect::<Vec<_>>(), vec![0, 1, 2]);
    assert_eq!(evs.len(), 4);
    for &(msg, tag) in msgs.iter().rev() {
        let mut bufs = [(msg, vec![0u8; len])];
        assert!(b.accept(0, msg));
        assert!(!b.accept(0, msg), "accepted twice");
        let evs = pump_pair(&mut a, &mut b, &mut now, &mut bufs);
        assert_eq!(evs, vec![Event::Placed { peer: 0, msg }]);
        assert!(bufs[0].1.iter().all(|&x| x == tag as u8 + 1));
    }
    assert!(a.all_acked());
}

/// Copies of rendezvous messages waiting for their receiver are bounded (`park_budget`): a sender
/// copying large messages faster than its receiver takes them is told to wait once they reach
/// the budget (a buffer handed over is the sender's and still goes), and gets room again when the
/// receiver accepts one; nothing is lost on the way.
#[test]
fn copies_waiting_for_their_receiver_stay_within_the_park_budget() {
    let cfg = Config {
        receiver_places: true,
        rndv_threshold: 1024,
        park_budget: 2 << 20,
        ..quiet_config()
    };
    let (mut a, mut b) = (
        Engine::new(cfg.clone(), 0, 77),
        Engine::new(cfg.clone(), 1, 77),
    );
    a.add_peer(1, 0);
    b.add_peer(0, 0);
    let len = 800 << 10;
    let mut now = 0;
    for k in 0..2u8 {
        assert!(a.can_send(1, len));
        a.send(now, 1, k.into(), 5, vec![k + 1; len], Reliability::Reliable)
            .expect("within the park budget");
    }
    // 1.6 MiB parked: one more copy would pass 2 MiB.
    assert!(!a.can_send(1, len));
    match a.send(now, 1, 2, 5, vec![3; len], Reliability::Reliable) {
        Err(SendError::Busy(d)) => assert_eq!(d.len(), len),
        other => panic!("a third copy was taken: {other:?}"),
    }
    let handed = a
        .send_returning(now, 1, 3, 5, vec![4; len])
        .expect("a handed-over buffer is not a copy");
    // Small messages still go: parked messages hold no send budget.
    assert!(a.can_send(1, 100));
    let evs = pump_pair(&mut a, &mut b, &mut now, &mut []);
    let msgs: Vec<(u64, u32)> = evs
        .iter()
        .filter_map(|e| match e {
            Event::Announced { msg, tag, .. } => Some((*msg, *tag)),
            _ => None,
        })
        .collect();
    assert_eq!(msgs.iter().map(|m| m.1).collect::<Vec<_>>(), vec![0, 1, 3]);
    // The receiver takes the first: its copy leaves the park, and a copy fits again.
    let mut bufs = [(msgs[0].0, vec![0u8; len])];
    assert!(b.accept(0, msgs[0].0));
    let evs = pump_pair(&mut a, &mut b, &mut now, &mut bufs);
    assert_eq!(
        evs,
        vec![Event::Placed {
            peer: 0,
            msg: msgs[0].0
        }]
    );
    assert!(bufs[0].1.iter().all(|&x| x == 1));
    assert!(a.can_send(1, len));
    a.send(now, 1, 2, 5, vec![3; len], Reliability::Reliable)
        .expect("room once the receiver took one");
    let evs = pump_pair(&mut a, &mut b, &mut now, &mut []);
    let third: Vec<(u64, u32)> = evs
        .iter()
        .filter_map(|e| match e {
            Event::Announced { msg, tag, .. } => Some((*msg, *tag)),
            _ => None,
        })
        .collect();
    assert_eq!(third.iter().map(|m| m.1).collect::<Vec<_>>(), vec![2]);
    for &(msg, tag) in msgs[1..].iter().chain(&third) {
        let mut bufs = [(msg, vec![0u8; len])];
        assert!(b.accept(0, msg));
        pump_pair(&mut a, &mut b, &mut now, &mut bufs);
        assert!(bufs[0].1.iter().all(|&x| x == tag as u8 + 1));
    }
    assert!(a.all_acked());
    assert_eq!(a.take_returned(1, handed), Some(vec![4; len]));
}
