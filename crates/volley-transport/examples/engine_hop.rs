//! What one one-way hop costs volley's user space, without a kernel: two protocol engines in
//! one thread, each packet sealed and opened as the auth device does, an 8-byte message sent,
//! delivered, consumed and answered. `cargo run --release --example engine_hop [iters] [seal]`.
use std::time::Instant;
use volley_proto::{Config, Engine, Event, Reliability};
use volley_transport::auth::{Sealer, TRAILER_LEN};

fn main() {
    let mut args = std::env::args().skip(1);
    let n: usize = args
        .next()
        .and_then(|a| a.parse().ok())
        .unwrap_or(2_000_000);
    let seal = args.next().is_none_or(|a| a != "0");
    let cfg = Config {
        checksums: !seal,
        ..Config::default()
    };
    let t0 = Instant::now();
    let now = || t0.elapsed().as_nanos() as u64;
    let mut e = [Engine::new(cfg.clone(), 0, 7), Engine::new(cfg, 1, 7)];
    e[0].add_peer(1, now());
    e[1].add_peer(0, now());
    let mut s = [Sealer::new(&[3; 32]), Sealer::new(&[3; 32])];
    let mut wire = vec![0u8; 2048];
    let msg = [1u8; 8];
    let mut hop = |from: usize, e: &mut [Engine; 2], s: &mut [Sealer; 2]| {
        let to = 1 - from;
        let t = now();
        let data = e[from].buffer_from(&msg);
        e[from]
            .send(t, to as u32, 5, 0, data, Reliability::Reliable)
            .unwrap();
        let room = wire.len() - TRAILER_LEN;
        let mut sent = 0;
        while let Some(tx) = e[from].poll_transmit(t, &mut wire[..room]) {
            let len = if seal {
                s[from].seal(&mut wire, tx.len).unwrap()
            } else {
                tx.len
            };
            let t = now();
            let p: &[u8] = if seal {
                s[to].open(&mut wire[..len]).unwrap()
            } else {
                &wire[..len]
            };
            e[to].handle(t, p).unwrap();
            sent += 1;
        }
        assert!(sent >= 1);
        let mut got = 0;
        while let Some(ev) = e[to].poll_event() {
            if let Event::Message { data, credit, .. } = ev {
                assert_eq!(data, msg);
                e[to].release(credit);
                e[to].recycle(data);
                got += 1;
            }
        }
        assert_eq!(got, 1);
    };
    for _ in 0..10_000 {
        hop(0, &mut e, &mut s);
        hop(1, &mut e, &mut s);
    }
    let t = Instant::now();
    for _ in 0..n / 2 {
        hop(0, &mut e, &mut s);
        hop(1, &mut e, &mut s);
    }
    let ns = t.elapsed().as_nanos() as f64 / n as f64;
    println!("engine hop (sealed: {seal}): {ns:.1} ns per one-way message");
}
