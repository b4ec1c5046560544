//! A token goes around all ranks several times; each rank adds its rank number. Prints the time
//! per hop.
//!
//!     volley run -n 4 target/release/examples/ring [LAPS]

use std::time::Instant;
use volley::World;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let world = World::init()?;
    let laps: u64 = std::env::args()
        .nth(1)
        .map(|v| v.parse().expect("LAPS is a number"))
        .unwrap_or(1000);
    let (me, n) = (world.rank(), world.size());
    let ep = world.open(2)?;
    ep.target((me + 1) % n, 2)?;
    let t = Instant::now();
    let mut token = 0u64;
    for _ in 0..laps {
        if me == 0 {
            ep.send(&token.to_le_bytes())?;
            let m = ep.recv()?;
            token = u64::from_le_bytes(m[..8].try_into()?);
        } else {
            let m = ep.recv()?;
            token = u64::from_le_bytes(m[..8].try_into()?) + me as u64;
            drop(m);
            ep.send(&token.to_le_bytes())?;
        }
    }
    if me == 0 {
        let want = laps * (n as u64 * (n as u64 - 1) / 2);
        let hops = laps * n as u64;
        println!(
            "ring of {n} ranks, {laps} laps: token {token} (expected {want}), {:.3} us per hop",
            t.elapsed().as_secs_f64() * 1e6 / hops as f64
        );
        if token != want {
            std::process::exit(1);
        }
    }
    Ok(())
}
