//! Ping-pong between rank 0 and rank 1: one-way latency (round trip / 2) and end-to-end
//! throughput (size / one-way time) for sizes from 0 B to 8 MiB, as in the seed papers.
//!
//!     volley run -n 2 --cpus 0,1 target/release/examples/pingpong [--max BYTES] [--iters N]
//!
//! With more ranks (an even number), ranks 2k and 2k+1 ping-pong side by side and rank 0 prints
//! its pair's figures: a check that a launcher put the job together, more than a measurement.
//!
//! Each size runs a warm-up, then `--iters` round trips (fewer for large messages, at least 10).
//! Small messages are timed in batches of round trips so that reading the clock does not weigh on
//! the figure; the table gives the median sample and the Directed-Point trimmed mean (the middle
//! 80% of sorted samples), both one-way.

use std::time::Instant;
use volley::World;

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} needs a number, got {v}"))
        })
        .unwrap_or(default)
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let world = World::init()?;
    if world.size() < 2 || world.size() % 2 != 0 {
        eprintln!(
            "pingpong needs an even number of ranks (pairs 0-1, 2-3, ...), it has {}: volley run -n 2 {}",
            world.size(),
            std::env::args().next().unwrap_or_default()
        );
        std::process::exit(2);
    }
    let max = arg("--max", 8 << 20);
    let iters = arg("--iters", 2000);
    let me = world.rank();
    let peer = me ^ 1;
    let ep = world.open(1)?;
    ep.target(peer, 1)?;

    let mut sizes = vec![0usize];
    let mut s = 1;
    while s <= max {
        sizes.push(s);
        s *= 2;
    }
    let mut buf = vec![0u8; max.max(1)];
    for (i, b) in buf.iter_mut().enumerate() {
        *b = (i % 251) as u8;
    }
    if me == 0 {
        println!(
            "# volley pingpong, {} ranks, one-way latency and end-to-end throughput",
            world.size()
        );
        println!(
            "{:>10} {:>8} {:>12} {:>12} {:>12} {:>12}",
            "bytes", "iters", "median_us", "trim80_us", "min_us", "MB/s"
        );
    }
    for &size in &sizes {
        // Fewer repetitions for large messages, so the sweep stays short.
        let n = (iters as u64 * 4096 / (size as u64 + 4096)).clamp(10, iters as u64) as usize;
        let batch = if size <= 4096 { 20 } else { 1 };
        let warm = (n / 10).max(2);
        let mut samples = Vec::with_capacity(n / batch + 1);
        for i in 0..(warm + n) / batch {
            let t = Instant::now();
            for _ in 0..batch {
                if me % 2 == 0 {
                    ep.send(&buf[..size])?;
                    let (len, _) = ep.recv_into(&mut buf)?;
                    assert_eq!(len, size);
                } else {
                    let (len, _) = ep.recv_into(&mut buf)?;
                    assert_eq!(len, size);
                    ep.send(&buf[..size])?;
                }
            }
            if me == 0 && i * batch >= warm {
                samples.push(t.elapsed().as_nanos() as f64 / (2 * batch) as f64);
            }
        }
        if me == 0 {
            samples.sort_by(|a, b| a.partial_cmp(b).unwrap());
            let cut = samples.len() / 10;
            let mid = &samples[cut..samples.len() - cut];
            let trim = mid.iter().sum::<f64>() / mid.len() as f64;
            let med = samples[samples.len() / 2];
            let mbs = if med > 0.0 {
                size as f64 / med * 1e3
            } else {
                0.0
            };
            println!(
                "{:>10} {:>8} {:>12.3} {:>12.3} {:>12.3} {:>12.1}",
                size,
                n,
                med / 1e3,
                trim / 1e3,
                samples[0] / 1e3,
                mbs
            );
        }
    }
    Ok(())
}
