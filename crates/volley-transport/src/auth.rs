//! A device that authenticates every packet with the job's key: each packet carries a 16-byte
//! tag, a keyed BLAKE3 hash of the packet, after its last byte; a received packet whose tag does
//! not match (forged, altered, from another job) is dropped and counted before the protocol sees
//! it. The CRC32C inside the packet stays (it catches damage in the rare case the tag is off),
//! so this is a MAC layered on the unchanged wire format: the header's length field says where
//! the packet ends and the tag starts (Ethernet may pad a short frame after it).
//!
//! BLAKE3 in keyed mode is a MAC (a PRF keyed by 32 bytes); truncated to 128 bits it leaves a
//! forger one chance in 2^128 per try. Replayed genuine packets are the protocol's duplicates.

use crate::{Addr, Device, Fill};
use std::io;
use std::os::fd::RawFd;

/// Bytes of the tag after each packet.
pub const TAG_LEN: usize = 16;

/// The tag of `packet` under `key`: the first 16 bytes of its keyed BLAKE3 hash (hashed in
/// one call, which lets BLAKE3 work on a packet's 1 KiB chunks in parallel lanes).
pub fn tag(key: &[u8; 32], packet: &[u8]) -> [u8; TAG_LEN] {
    let h = blake3::keyed_hash(key, packet);
    let mut t = [0u8; TAG_LEN];
    t.copy_from_slice(&h.as_bytes()[..TAG_LEN]);
    t
}

/// Where a received buffer's packet ends (its header's length field), if the buffer holds the
/// packet and a whole tag after it.
fn packet_len(buf: &[u8]) -> Option<usize> {
    let len = u16::from_be_bytes(buf.get(4..6)?.try_into().ok()?) as usize;
    (len >= volley_wire::HEADER_LEN && buf.len() >= len + TAG_LEN).then_some(len)
}

/// Whether `buf` holds a packet followed by its right tag; the packet.
pub fn open<'a>(key: &[u8; 32], buf: &'a [u8]) -> Option<&'a [u8]> {
    let len = packet_len(buf)?;
    let (p, t) = (&buf[..len], &buf[len..len + TAG_LEN]);
    // Compared in constant time: the comparison's duration says nothing about the right tag.
    let want = tag(key, p);
    let diff = want.iter().zip(t).fold(0u8, |d, (a, b)| d | (a ^ b));
    (diff == 0).then_some(p)
}

pub struct AuthDevice {
    inner: Box<dyn Device>,
    key: [u8; 32],
    /// Packets dropped: no tag, or a wrong one.
    rejected: u64,
}

impl AuthDevice {
    /// Wraps `inner`: every packet sent gets its tag under `key`, every packet received must
    /// carry the right one.
    pub fn new(inner: Box<dyn Device>, key: [u8; 32]) -> AuthDevice {
        AuthDevice {
            inner,
            key,
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
        self.inner.max_packet() - TAG_LEN
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

    fn receive(&mut self, now: u64, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let (key, rejected) = (&self.key, &mut self.rejected);
        self.inner.receive(now, &mut |buf| match open(key, buf) {
            Some(p) => f(p),
            None => *rejected += 1,
        })
    }

    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize> {
        let key = &self.key;
        self.inner.transmit(&mut |buf: &mut [u8]| {
            let room = buf.len().checked_sub(TAG_LEN)?;
            let (peer, len) = fill(&mut buf[..room])?;
            let t = tag(key, &buf[..len]);
            buf[len..len + TAG_LEN].copy_from_slice(&t);
            Some((peer, len + TAG_LEN))
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

    fn sealed(key: &[u8; 32], p: &[u8]) -> Vec<u8> {
        let mut b = p.to_vec();
        b.extend_from_slice(&tag(key, p));
        b
    }

    #[test]
    fn a_sealed_packet_opens_with_its_key_only() {
        let k = [7; 32];
        let other = [8; 32];
        for len in [28, 100, 1472, 8972] {
            let p = packet(len);
            let b = sealed(&k, &p);
            assert_eq!(open(&k, &b), Some(&p[..]), "{len}");
            assert_eq!(open(&other, &b), None, "{len}: another job's key");
            // Ethernet padding after the tag does not matter.
            let mut padded = b.clone();
            padded.extend_from_slice(&[0; 20]);
            assert_eq!(open(&k, &padded), Some(&p[..]), "{len}: padded");
        }
    }

    #[test]
    fn any_flipped_bit_or_missing_tag_is_rejected() {
        let k = [3; 32];
        let b = sealed(&k, &packet(64));
        for i in 0..b.len() * 8 {
            let mut x = b.clone();
            x[i / 8] ^= 1 << (i % 8);
            assert_eq!(open(&k, &x), None, "bit {i}");
        }
        for cut in [0, 5, 27, 64, 64 + TAG_LEN - 1] {
            assert_eq!(open(&k, &b[..cut]), None, "cut at {cut}");
        }
    }
}
