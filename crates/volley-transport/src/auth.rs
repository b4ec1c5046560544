//! A device that seals every packet under the job's key with AEGIS (128L for short bodies,
//! 128X4 from [`BULK_FROM`] bytes, each under a key of its own): the 28-byte common
//! header stays readable and is authenticated (the AEAD's associated data), the rest of the
//! packet is encrypted in place, and after its last byte come the 16-byte tag and the 8-byte
//! counter that, with the header's source rank, makes the nonce. A received packet that does not
//! open (forged, altered, from another job, or another job's key) is dropped and counted before
//! the protocol sees it. The wire format is unchanged (a layer over it: the header's length
//! field says where the packet ends and the trailer starts; Ethernet may pad a short frame
//! after it), except that the protocol leaves the CRC32C field zero and unchecked under sealing
//! (`volley_proto::Config::checksums`): the tag already covers every byte. So that the fault
//! injector's damage meets this check, as the network's would, the injector sits under this
//! layer (volley's `net::finish_device`).
//!
//! Why AEGIS-128X2, through the `aegis` crate: the first version tagged packets with keyed
//! BLAKE3 (1.6 us per 1.5 KB packet on the development VM); AES-128-GCM through `ring`
//! (BoringSSL's assembly, VAES and VPCLMULQDQ where the CPU has them) brought that to about
//! 0.2 us, and was still a third of the sending core's time in a bulk stream between two
//! namespaces (the sender's core also runs the receiving stack there). AEGIS is built from the
//! AES round function alone (no GHASH), so on the same AES units it seals a 1,420-byte packet
//! in 99 ns against AES-GCM's 193, a 8,948-byte one in 327 against 773, and an 8-byte one in
//! 57 against 80 (development VM, Intel Xeon, in-place seal with 28 bytes of associated data,
//! median of two passes of 140k-2M packets). It is the CFRG's AEAD for high-speed networking
//! (draft-irtf-cfrg-aegis-aead), key-committing, with a 128-bit tag and nonce; the crate wraps
//! libaegis (the libsodium author's, which picks AES-NI, VAES or AVX-512 at run time and has a
//! portable fallback). The variant goes by the body's length (which the header, authenticated,
//! carries, so both sides agree): seal and open together cost, on the development VM (AVX-512),
//! for 64 bytes 84 ns with one lane (128L), 110 with X2, 113 with X4; for 200 bytes 114, 136,
//! 116; for 1,400 bytes 253, 206, 148; for 8,900 bytes 1,128, 658, 384. So short bodies take
//! 128L and bodies from 256 bytes X4 (which libaegis runs as two 256-bit halves where the CPU
//! has no AVX-512, at about X2's cost per byte): an 8-byte message's hop 24 ns less than with X2
//! (338 -> 314 ns, `examples/engine_hop.rs`), a stream between two namespaces 6% more (64 KiB
//! 2.92-3.04 -> 3.13-3.24 GB/s, interleaved).
//!
//! Nonces never repeat under a key: the nonce is the sender's rank (from the authenticated
//! header) and a 64-bit counter per device that starts at a random point below 2^63, so two
//! devices of one rank (a second world in one process) would need 2^62 packets to meet.
//! Replayed genuine packets open, and are the protocol's duplicates.

use crate::{Addr, Device, Fill, Out};
use aegis::aegis128l::Aegis128L;
use aegis::aegis128x4::Aegis128X4;
use std::io;
use std::os::fd::RawFd;
use volley_wire::HEADER_LEN;

/// Bytes after each packet: the tag, then the counter.
pub const TRAILER_LEN: usize = TAG_LEN + 8;
const TAG_LEN: usize = 16;

/// Sealed bodies (the bytes after the header) of this many bytes or more go through
/// AEGIS-128X4, shorter ones through AEGIS-128L (see the module's notes).
pub const BULK_FROM: usize = 256;

/// The job's 32-byte key made into a 128-bit AEGIS key of this layer for one variant (a key of
/// its own for each, so that the job's key can serve other purposes without ever meeting the
/// cipher, and no key ever meets two ciphers).
fn packet_key(job_key: &[u8; 32], variant: &str) -> [u8; 16] {
    let k = blake3::derive_key(
        &format!("volley 2026-11 packet sealing, {variant}"),
        job_key,
    );
    k[..16].try_into().expect("16 of 32 bytes")
}

/// The 16-byte nonce: the source rank (bytes 16..20 of the common header), zeros, the counter.
fn nonce(header: &[u8], counter: u64) -> [u8; 16] {
    let mut n = [0u8; 16];
    n[..4].copy_from_slice(&header[16..20]);
    n[8..].copy_from_slice(&counter.to_be_bytes());
    n
}

/// Seals and opens packets under one job's key.
pub struct Sealer {
    /// AEGIS-128L's key, for bodies under [`BULK_FROM`] bytes.
    small: [u8; 16],
    /// AEGIS-128X4's, for the others.
    bulk: [u8; 16],
    next: u64,
}

impl Sealer {
    pub fn new(job_key: &[u8; 32]) -> Sealer {
        Sealer {
            small: packet_key(job_key, "AEGIS-128L"),
            bulk: packet_key(job_key, "AEGIS-128X4"),
            next: volley_sys::random_u64() >> 1,
        }
    }

    /// Seals the packet in `buf[..len]` in place and writes its trailer after it; returns the
    /// sealed length (`len + TRAILER_LEN`). None if `buf` has no room for the trailer or the
    /// packet is shorter than a header (nothing the protocol makes).
    pub fn seal(&mut self, buf: &mut [u8], len: usize) -> Option<usize> {
        if len < HEADER_LEN || buf.len() < len + TRAILER_LEN {
            return None;
        }
        let counter = self.next;
        self.next += 1;
        let (header, rest) = buf.split_at_mut(HEADER_LEN);
        let n = nonce(header, counter);
        let t = len - HEADER_LEN;
        let tag = if t < BULK_FROM {
            Aegis128L::<TAG_LEN>::new(&self.small, &n).encrypt_in_place(&mut rest[..t], header)
        } else {
            Aegis128X4::<TAG_LEN>::new(&self.bulk, &n).encrypt_in_place(&mut rest[..t], header)
        };
        rest[t..t + TAG_LEN].copy_from_slice(&tag);
        rest[t + TAG_LEN..t + TRAILER_LEN].copy_from_slice(&counter.to_be_bytes());
        Some(len + TRAILER_LEN)
    }

    /// Opens a sealed packet in place: the plaintext packet, if `buf` holds a packet and its
    /// trailer and they open under this key.
    pub fn open<'a>(&self, buf: &'a mut [u8]) -> Option<&'a mut [u8]> {
        let len = u16::from_be_bytes(buf.get(4..6)?.try_into().ok()?) as usize;
        if len < HEADER_LEN || buf.len() < len + TRAILER_LEN {
            return None;
        }
        let tag: [u8; TAG_LEN] = buf[len..len + TAG_LEN].try_into().ok()?;
        let counter = u64::from_be_bytes(buf[len + TAG_LEN..len + TRAILER_LEN].try_into().ok()?);
        let (header, rest) = buf.split_at_mut(HEADER_LEN);
        let n = nonce(header, counter);
        // The tag is compared in constant time, and a packet that does not open is dropped
        // whole (its bytes are never read).
        let body = &mut rest[..len - HEADER_LEN];
        if body.len() < BULK_FROM {
            Aegis128L::<TAG_LEN>::new(&self.small, &n).decrypt_in_place(body, &tag, header)
        } else {
            Aegis128X4::<TAG_LEN>::new(&self.bulk, &n).decrypt_in_place(body, &tag, header)
        }
        .ok()?;
        Some(&mut buf[..len])
    }
}

pub struct AuthDevice {
    inner: Box<dyn Device>,
    sealer: Sealer,
    /// Packets dropped: did not open under the job's key.
    rejected: u64,
}

impl AuthDevice {
    /// Wraps `inner`: every packet sent is sealed under `key`, every packet received must open
    /// under it.
    pub fn new(inner: Box<dyn Device>, key: [u8; 32]) -> AuthDevice {
        AuthDevice {
            inner,
            sealer: Sealer::new(&key),
            rejected: 0,
        }
    }
}

impl Device for AuthDevice {
    fn kind(&self) -> String {
        // The transport is the inner device's; authentication is a setting of the job
        // (VOLLEY_NET_AUTH), not another transport.
        self.inner.kind()
    }
    fn max_packet(&self) -> usize {
        self.inner.max_packet() - TRAILER_LEN
    }
    fn local_addr(&self) -> Addr {
        self.inner.local_addr()
    }
    fn set_peer(&mut self, rank: u32, addr: Addr) -> io::Result<()> {
        self.inner.set_peer(rank, addr)
    }
    fn fd(&self) -> RawFd {
        self.inner.fd()
    }

    fn receive(&mut self, now: u64, f: &mut dyn FnMut(&mut [u8])) -> io::Result<usize> {
        let (sealer, rejected) = (&self.sealer, &mut self.rejected);
        // Opened where the inner device received it: no copy before the protocol's own.
        self.inner.receive(now, &mut |buf| match sealer.open(buf) {
            Some(p) => f(p),
            None => *rejected += 1,
        })
    }

    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize> {
        let sealer = &mut self.sealer;
        self.inner.transmit(&mut |buf: &mut [u8]| {
            let room = buf.len().checked_sub(TRAILER_LEN)?;
            let out = fill(&mut buf[..room])?;
            let sealed = sealer
                .seal(buf, out.len)
                .expect("the protocol writes whole packets, with room left for the trailer");
            Some(Out { len: sealed, ..out })
        })
    }

    fn offload(&self) -> Option<String> {
        self.inner.offload()
    }
    fn next_due(&self) -> Option<u64> {
        self.inner.next_due()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.inner.counters();
        c.push(("auth_rx_rejected", self.rejected));
        c
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn packet(len: usize) -> Vec<u8> {
        let mut p: Vec<u8> = (0..len).map(|i| (i * 13) as u8).collect();
        p[4..6].copy_from_slice(&(len as u16).to_be_bytes());
        p
    }

    fn sealed(s: &mut Sealer, p: &[u8]) -> Vec<u8> {
        let mut b = p.to_vec();
        b.resize(p.len() + TRAILER_LEN, 0);
        assert_eq!(s.seal(&mut b, p.len()), Some(b.len()));
        b
    }

    #[test]
    fn a_sealed_packet_opens_with_its_key_only_and_hides_its_payload() {
        let k = [7; 32];
        let mut s = Sealer::new(&k);
        let other = Sealer::new(&[8; 32]);
        for len in [28, 29, 100, 1472, 8972] {
            let p = packet(len);
            let b = sealed(&mut s, &p);
            assert_eq!(
                b[..HEADER_LEN],
                p[..HEADER_LEN],
                "{len}: the header stays readable"
            );
            if len > HEADER_LEN + 8 {
                assert_ne!(
                    b[HEADER_LEN..len],
                    p[HEADER_LEN..],
                    "{len}: payload in the clear"
                );
            }
            assert_eq!(s.open(&mut b.clone()).as_deref(), Some(&p[..]), "{len}");
            assert_eq!(other.open(&mut b.clone()), None, "{len}: another job's key");
            // Ethernet padding after the trailer does not matter.
            let mut padded = b.clone();
            padded.extend_from_slice(&[0; 20]);
            assert_eq!(
                s.open(&mut padded).as_deref(),
                Some(&p[..]),
                "{len}: padded"
            );
        }
    }

    #[test]
    fn one_packet_sealed_twice_never_looks_the_same() {
        // A fresh nonce per seal: a retransmission is a new ciphertext and a new tag.
        let mut s = Sealer::new(&[1; 32]);
        let p = packet(200);
        let (a, b) = (sealed(&mut s, &p), sealed(&mut s, &p));
        assert_ne!(a, b);
        assert_eq!(s.open(&mut a.clone()).as_deref(), Some(&p[..]));
        assert_eq!(s.open(&mut b.clone()).as_deref(), Some(&p[..]));
    }

    #[test]
    fn any_flipped_bit_or_missing_trailer_is_rejected() {
        let mut s = Sealer::new(&[3; 32]);
        // Bodies on both sides of the switch from AEGIS-128L to AEGIS-128X4: a flipped length
        // bit that moves a packet across it changes the associated data as any flip does.
        for len in [64, HEADER_LEN + BULK_FROM - 1, HEADER_LEN + BULK_FROM, 600] {
            let b = sealed(&mut s, &packet(len));
            assert_eq!(
                s.open(&mut b.clone()).as_deref(),
                Some(&packet(len)[..]),
                "{len}"
            );
            for i in 0..b.len() * 8 {
                let mut x = b.clone();
                x[i / 8] ^= 1 << (i % 8);
                assert_eq!(s.open(&mut x), None, "{len}: bit {i}");
            }
            for cut in [0, 5, 27, len, len + TRAILER_LEN - 1] {
                assert_eq!(s.open(&mut b[..cut].to_vec()), None, "{len}: cut at {cut}");
            }
        }
    }
}
