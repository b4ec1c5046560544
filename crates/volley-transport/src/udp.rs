//! UDP, batched: one sendmmsg per batch of packets, one recvmmsg per batch received.

use crate::{Addr, Device, Fill};
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use volley_sys::net::{self, MmsgBatch};

const BATCH: usize = 64;
/// IPv4 and UDP headers.
pub const OVERHEAD: usize = 28;

pub struct UdpDevice {
    fd: OwnedFd,
    addr: SocketAddrV4,
    max_packet: usize,
    peers: Vec<Option<SocketAddrV4>>,
    tx: MmsgBatch,
    rx: MmsgBatch,
    /// Packets at the front of `tx` that the kernel had no room for (socket buffer full): sent
    /// first on the next call, before the protocol is asked for more. A packet the device took
    /// is never dropped; back-pressure reaches the protocol as "no room", not as loss.
    held: usize,
    /// Times the socket buffer stayed full and packets were held for the next call.
    tx_full: u64,
    /// Packets dropped: not from the address of the rank they name.
    rx_foreign: u64,
}

impl UdpDevice {
    /// A socket on `ip` (any port), carrying packets of up to `mtu - 28` bytes.
    pub fn open(ip: std::net::Ipv4Addr, mtu: usize) -> io::Result<UdpDevice> {
        let fd = net::udp_socket(SocketAddrV4::new(ip, 0), 16 << 20)?;
        let addr = net::local_addr(fd.as_raw_fd())?;
        let max_packet = mtu.saturating_sub(OVERHEAD).min(65_000);
        Ok(UdpDevice {
            fd,
            addr,
            max_packet,
            peers: Vec::new(),
            tx: MmsgBatch::new(BATCH, max_packet),
            rx: MmsgBatch::new(BATCH, max_packet.max(2048)),
            held: 0,
            tx_full: 0,
            rx_foreign: 0,
        })
    }
}

impl Device for UdpDevice {
    fn kind(&self) -> String {
        "udp".into()
    }
    fn max_packet(&self) -> usize {
        self.max_packet
    }
    fn local_addr(&self) -> Addr {
        Addr::Udp(self.addr)
    }
    fn set_peer(&mut self, rank: u32, addr: Addr) -> io::Result<()> {
        let Addr::Udp(a) = addr else {
            return Err(crate::wrong_address(rank, "UDP", addr));
        };
        crate::set_peer_slot(&mut self.peers, rank, a);
        Ok(())
    }
    fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn receive(&mut self, _now: u64, f: &mut dyn FnMut(&[u8])) -> io::Result<usize> {
        let mut total = 0;
        // A few batches at most, so that one flood cannot starve the caller's other work.
        for _ in 0..4 {
            let n = self.rx.recv(self.fd.as_raw_fd())?;
            for i in 0..n {
                let p = self.rx.packet(i);
                if crate::from_its_rank(&self.peers, p, &self.rx.source(i)) {
                    f(p);
                } else {
                    self.rx_foreign += 1;
                }
            }
            total += n;
            if n < self.rx.capacity() {
                break;
            }
        }
        Ok(total)
    }

    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize> {
        let mut sent = 0;
        loop {
            // Packets held from an earlier call go first, in order.
            let mut n = self.held;
            while n < BATCH {
                let buf = self.tx.buf_mut(n);
                let Some((peer, len)) = fill(buf) else {
                    break;
                };
                let Some(Some(to)) = self.peers.get(peer as usize) else {
                    // The engine only sends to peers it was given; a rank without an address
                    // is a bootstrap bug, not a network event.
                    return Err(io::Error::new(
                        io::ErrorKind::NotFound,
                        format!("no address for rank {peer}"),
                    ));
                };
                self.tx.set(n, *to, len);
                n += 1;
            }
            if n == 0 {
                return Ok(sent);
            }
            let mut off = 0;
            let mut spins = 0;
            while off < n {
                let k = self.tx.send(self.fd.as_raw_fd(), n - off)?;
                if k == 0 {
                    spins += 1;
                    if spins > 64 {
                        // The socket buffer stays full: keep the rest (now at the front of the
                        // batch) for the next call, and take nothing more from the protocol.
                        self.held = n - off;
                        self.tx_full += 1;
                        return Ok(sent);
                    }
                    std::thread::yield_now();
                    continue;
                }
                off += k;
                sent += k;
                if off < n {
                    self.tx.shift(k, n - off);
                }
            }
            self.held = 0;
            if n < BATCH {
                return Ok(sent);
            }
        }
    }

    fn next_due(&self) -> Option<u64> {
        // Held packets want another try soon, whether or not anything arrives.
        (self.held > 0).then_some(0)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("udp_tx_full", self.tx_full),
            ("udp_rx_foreign", self.rx_foreign),
        ]
    }
}
