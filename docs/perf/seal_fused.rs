//! Copy-then-seal against sealing while copying (docs/threat-model.md, "Sealing still costs").
//! Run: `cargo new fuse`, `aegis = "0.9.20"` under [dependencies], this file as src/main.rs,
//! `cargo build --release && taskset -c 0 target/release/fuse`.
use aegis::aegis128x4::Aegis128X4;
use std::time::Instant;
fn main() {
    let key = [7u8; 16];
    let seg = 1408usize; // payload bytes per packet at MTU 1500 (after headers)
    let hdr = 28usize;
    let msg: Vec<u8> = (0..(64usize << 10)).map(|i| i as u8).collect();
    let npk = msg.len() / seg;
    let mut arena = vec![0u8; npk * 1472];
    for round in 0..3 {
        // A: copy into packet, then encrypt in place (what volley does)
        let t = Instant::now();
        let mut ctr = 0u64;
        for _ in 0..20000 {
            for p in 0..npk {
                let b = &mut arena[p * 1472..p * 1472 + hdr + seg + 16];
                b[hdr..hdr + seg].copy_from_slice(&msg[p * seg..(p + 1) * seg]);
                let mut n = [0u8; 16]; n[8..].copy_from_slice(&ctr.to_be_bytes()); ctr += 1;
                let (h, rest) = b.split_at_mut(hdr);
                let tag = Aegis128X4::<16>::new(&key, &n).encrypt_in_place(&mut rest[..seg], h);
                rest[seg..seg + 16].copy_from_slice(&tag);
            }
        }
        let a = t.elapsed().as_secs_f64();
        // B: encrypt from the message into the packet (fused)
        let t = Instant::now();
        for _ in 0..20000 {
            for p in 0..npk {
                let b = &mut arena[p * 1472..p * 1472 + hdr + seg + 16];
                let mut n = [0u8; 16]; n[8..].copy_from_slice(&ctr.to_be_bytes()); ctr += 1;
                let (h, rest) = b.split_at_mut(hdr);
                let mut e = Aegis128X4::<16>::new(&key, &n).encryptor(h);
                e.update(&msg[p * seg..(p + 1) * seg], &mut rest[..seg]);
                let tag = e.finalize();
                rest[seg..seg + 16].copy_from_slice(&tag);
            }
        }
        let bb = t.elapsed().as_secs_f64();
        let bytes = 20000.0 * (npk * seg) as f64;
        println!("round {round}: copy+seal {:.2} GB/s ({:.0} ns/pkt), fused {:.2} GB/s ({:.0} ns/pkt)",
            bytes / a / 1e9, a / (20000.0 * npk as f64) * 1e9, bytes / bb / 1e9, bb / (20000.0 * npk as f64) * 1e9);
    }
}
