//! GAMMA active ports: every rank but 0 sends numbers to rank 0's port 42; a handler on rank 0 adds
//! them up as they arrive, while rank 0's main loop only makes progress.
//!
//!     volley run -n 4 target/release/examples/active_port [COUNT]

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use volley::{Source, World};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let world = World::init()?;
    let count: u64 = std::env::args()
        .nth(1)
        .map(|v| v.parse().expect("COUNT is a number"))
        .unwrap_or(10_000);
    if world.rank() == 0 {
        // A handler may run on whichever thread drives the world, so what it shares is Send.
        let sum = Arc::new(AtomicU64::new(0));
        let seen = Arc::new(AtomicU64::new(0));
        let (s, k) = (sum.clone(), seen.clone());
        let _port = world.bind(42, move |msg: &[u8], _from: Source| {
            s.fetch_add(
                u64::from_le_bytes(msg[..8].try_into().expect("8-byte message")),
                Relaxed,
            );
            k.fetch_add(1, Relaxed);
        })?;
        let total = count * (world.size() as u64 - 1);
        while seen.load(Relaxed) < total {
            world.progress_wait()?;
        }
        let want = (world.size() as u64 - 1) * count * (count - 1) / 2;
        println!(
            "active port handled {total} messages, sum {} (expected {want})",
            sum.load(Relaxed)
        );
        if sum.load(Relaxed) != want {
            std::process::exit(1);
        }
    } else {
        let ep = world.open(1)?;
        ep.target(0, 42)?;
        for i in 0..count {
            ep.send(&i.to_le_bytes())?;
        }
    }
    Ok(())
}
