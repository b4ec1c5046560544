//! UDP, batched: one sendmmsg per batch of packets, one recvmmsg per batch received; with
//! segmentation offload where the kernel offers it (GSO: a run of full-size packets to one peer
//! goes down the stack as one send; GRO: the kernel hands such a run over as one datagram),
//! so a window of packets crosses the kernel once, as TCP's 64 KiB segments do.

use crate::{Addr, Device, Fill, Out};
use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use volley_sys::net::{self, UdpRx, UdpTx, UDP_MAX_PAYLOAD};

/// Packets per transmit batch (several GSO sends at MTU 1500: up to 44 packets each).
const TX_PACKETS: usize = 256;
/// Datagrams per receive batch.
const RX_BATCH: usize = 64;
/// IPv4 and UDP headers.
pub const OVERHEAD: usize = 28;
/// Receive calls in a row that brought one packet each after which the device stops asking for
/// GRO (see [`UdpDevice::adapt_gro`]).
pub const GRO_OFF_AFTER: u32 = 256;
/// Packets in one receive call that turn GRO on again (see `UdpDevice::adapt_gro`).
pub const GRO_ON_AT: usize = 4;

/// The socket's send buffer by default: what the device may have queued in the kernel (qdisc
/// and NIC ring) at once; the kernel counts twice this. As TCP's small queues (TSQ) keep a
/// flow's share of a local queue to about a millisecond, this keeps volley from filling a
/// rate-limiting qdisc on its own host (where kernel TCP, held back by TSQ, would then get
/// little of the link), at no cost to throughput on a veth or a NIC up to 10 Gbit/s. Faster
/// NICs may want more (VOLLEY_UDP_SNDBUF).
pub const SEND_BUFFER: usize = 128 << 10;
/// The socket's receive buffer: room for the bursts a window of packets makes.
pub const RECEIVE_BUFFER: usize = 16 << 20;

/// How a UDP device uses its socket: the offloads it may use (each falls back by itself where
/// the kernel refuses it) and its send buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UdpOptions {
    /// Send runs of packets to one peer as one UDP_SEGMENT send.
    pub gso: bool,
    /// Ask the kernel to coalesce received runs (UDP_GRO).
    pub gro: bool,
    /// SO_SNDBUF, in bytes.
    pub send_buffer: usize,
}

impl Default for UdpOptions {
    fn default() -> UdpOptions {
        UdpOptions {
            gso: true,
            gro: true,
            send_buffer: SEND_BUFFER,
        }
    }
}

pub struct UdpDevice {
    fd: OwnedFd,
    addr: SocketAddrV4,
    max_packet: usize,
    peers: Vec<Option<SocketAddrV4>>,
    tx: UdpTx,
    rx: UdpRx,
    /// Whether the socket may coalesce received runs (UDP_GRO asked for and accepted).
    gro: bool,
    /// Whether it does now: on while packets come in runs, off while they come one at a time
    /// (see [`UdpDevice::adapt_gro`]).
    gro_on: bool,
    /// Receive calls in a row that brought a single packet, while GRO is on.
    lone_receives: u32,
    /// Times GRO was turned off or on again.
    gro_switches: u64,
    /// Whether the first send or receive has decided about connecting (see `settle`).
    settled: bool,
    /// Whether the last receive call found nothing: the next asks for one datagram.
    idle: bool,
    /// Whether that one datagram may be asked for through recvfrom, which takes no control
    /// messages: GRO is surely off and a receive that could say a segment size found the queue
    /// empty since (nothing coalesced before GRO went off is still queued).
    plain: bool,
    /// Why GSO is off, if it was asked for and the kernel refused it.
    gso_refused: Option<String>,
    /// Times the socket buffer stayed full and packets were held for the next call.
    tx_full: u64,
    /// Packets dropped: not from the address of the rank they name.
    rx_foreign: u64,
    /// ICMP port-unreachable reports on the connected socket (see [`UdpDevice::refused`]).
    icmp_refused: u64,
    /// Received datagrams that held several packets.
    gro_datagrams: u64,
    /// Datagrams longer than their buffer (cannot happen with buffers of the largest
    /// datagram; counted, never parsed, if a kernel ever does it).
    rx_truncated: u64,
}

impl UdpDevice {
    /// A socket on `ip` (any port), carrying packets of up to `mtu - 28` bytes, with both
    /// offloads where the kernel offers them.
    pub fn open(ip: Ipv4Addr, mtu: usize) -> io::Result<UdpDevice> {
        UdpDevice::open_with(ip, mtu, UdpOptions::default())
    }

    /// Like [`UdpDevice::open`], with the options `off`.
    pub fn open_with(ip: Ipv4Addr, mtu: usize, off: UdpOptions) -> io::Result<UdpDevice> {
        let fd = net::udp_socket_with(SocketAddrV4::new(ip, 0), RECEIVE_BUFFER, off.send_buffer)?;
        let addr = net::local_addr(fd.as_raw_fd())?;
        let max_packet = mtu.saturating_sub(OVERHEAD).min(65_000);
        let gro = off.gro && net::enable_udp_gro(fd.as_raw_fd()).is_ok();
        // With GRO a datagram may hold a whole run: each buffer takes the largest datagram.
        let slot = if gro {
            UDP_MAX_PAYLOAD
        } else {
            max_packet.max(2048)
        };
        Ok(UdpDevice {
            fd,
            addr,
            max_packet,
            peers: Vec::new(),
            tx: UdpTx::new(TX_PACKETS, max_packet, off.gso),
            rx: UdpRx::new(RX_BATCH, slot),
            gro,
            gro_on: gro,
            lone_receives: 0,
            gro_switches: 0,
            settled: false,
            idle: false,
            plain: false,
            gso_refused: None,
            tx_full: 0,
            rx_foreign: 0,
            icmp_refused: 0,
            gro_datagrams: 0,
            rx_truncated: 0,
        })
    }

    /// What the device does about offloads, in words (`volley info`, bench headers).
    pub fn offload_status(&self) -> String {
        let gso = match (&self.gso_refused, self.tx.gso()) {
            (Some(why), _) => format!("GSO off ({why})"),
            (None, true) => "GSO on".to_string(),
            (None, false) => "GSO off (not asked for)".to_string(),
        };
        let gro = if self.gro { "GRO on" } else { "GRO off" };
        format!("{gso}, {gro}")
    }

    /// GRO while packets come in runs, none while they come one by one. A socket with UDP_GRO
    /// makes the kernel hold each arriving packet in its GRO layer (on a veth, and on a NIC that
    /// runs GRO) to see whether more of its flow follow: for a lone packet that is about 0.13 us
    /// of every one-way hop (8 B ping-pong across two namespaces on the development VM, a bare C
    /// ping-pong shows the same). So after [`GRO_OFF_AFTER`] receive calls in a row with one
    /// packet each (a latency-bound exchange) the device turns it off, and the first call that
    /// brings [`GRO_ON_AT`] or more packets (a run that the kernel had to cut up, or several
    /// messages) turns it on again. Two are not a run: a ping-pong sees a message and a heartbeat
    /// or acknowledgement together now and then, and turned GRO on about once per 2,000
    /// messages (each time for the next 256 receives). At most two setsockopt calls per
    /// `GRO_OFF_AFTER` receives, none while the traffic keeps its shape. A refused switch stops
    /// the switching for good; `gro_on` keeps what the socket still has.
    fn adapt_gro(&mut self, packets: usize) {
        if !self.gro {
            return;
        }
        if packets >= GRO_ON_AT {
            self.lone_receives = 0;
            if !self.gro_on {
                self.switch_gro(true);
            }
        } else if packets == 1 && self.gro_on {
            self.lone_receives += 1;
            if self.lone_receives >= GRO_OFF_AFTER {
                self.lone_receives = 0;
                self.switch_gro(false);
            }
        }
    }

    fn switch_gro(&mut self, on: bool) {
        let fd = self.fd.as_raw_fd();
        let r = if on {
            net::enable_udp_gro(fd)
        } else {
            net::disable_udp_gro(fd)
        };
        match r {
            Ok(()) => {
                self.gro_on = on;
                self.gro_switches += 1;
                self.plain = false;
            }
            Err(_) => {
                // Not expected once the kernel accepted it at open; the socket keeps what it
                // had (`gro_on` still says which), and the device stops switching (the
                // receive buffers fit either way).
                self.gro = false;
            }
        }
    }

    /// With one peer address only, the socket is connected to it (as a point-to-point UDP
    /// application's is): each send skips the route lookup and each arrival finds the socket by
    /// early demultiplexing, skipping its route lookup too (8 B one-way across two namespaces
    /// on the development VM: about 0.5 us of 5). Done once, at the first send or receive, when
    /// the peers are known: dissolving the association would unbind the socket's port (it was
    /// chosen by the kernel), so a peer added later is refused instead ([`Device::set_peer`]).
    fn settle(&mut self) -> io::Result<()> {
        self.settled = true;
        let mut it = self.peers.iter().flatten();
        let first = it.next().copied();
        let alone = first.filter(|f| it.all(|a| a == f));
        if let Some(to) = alone {
            net::connect_udp(self.fd.as_raw_fd(), to)?;
            self.tx.set_connected(Some(to));
        }
        Ok(())
    }

    /// Whether `e` is the report of an ICMP port-unreachable that a connected socket gets
    /// (once per report) when the peer's socket is gone: counted, and the call is tried again.
    /// What it means for the peer (finished, or dead) is the protocol's to decide, by its
    /// goodbye or its silence.
    fn refused(&mut self, e: &io::Error) -> bool {
        if e.kind() == io::ErrorKind::ConnectionRefused {
            self.icmp_refused += 1;
            return true;
        }
        false
    }

    /// Sends what the batch holds; false when the socket stayed full (the rest is held).
    fn flush(&mut self, sent: &mut usize) -> io::Result<bool> {
        let mut spins = 0;
        while !self.tx.is_empty() {
            let k = match self.tx.send(self.fd.as_raw_fd()) {
                Ok(k) => k,
                Err(e) if self.tx.front_is_gso() => {
                    // The kernel or the path refuses segmentation offload (EIO: the device
                    // has no checksum offload; EINVAL: a kernel without UDP_SEGMENT): the
                    // packets go one by one, now and from now on.
                    self.gso_refused = Some(format!("the kernel refused a GSO send: {e}"));
                    self.tx.split();
                    continue;
                }
                Err(e) if self.refused(&e) => continue,
                Err(e) => return Err(e),
            };
            if k == 0 {
                spins += 1;
                if spins > 64 {
                    // The socket buffer stays full: keep the rest for the next call, and take
                    // nothing more from the protocol.
                    self.tx_full += 1;
                    return Ok(false);
                }
                std::thread::yield_now();
                continue;
            }
            *sent += k;
        }
        Ok(true)
    }
}

/// Whether a GSO send of two packets to itself is accepted on `ip` (a socket of its own, so the
/// job's device never sees the probe): None if so, else why not.
pub fn probe_gso(ip: Ipv4Addr) -> Option<String> {
    let probe = || -> io::Result<()> {
        let fd = net::udp_socket(SocketAddrV4::new(ip, 0), 1 << 16)?;
        let me = net::local_addr(fd.as_raw_fd())?;
        let mut tx = UdpTx::new(2, 64, true);
        for _ in 0..2 {
            tx.room().expect("room for two")[..64].fill(0);
            tx.push(me, 64);
        }
        tx.send(fd.as_raw_fd()).map(|_| ())
    };
    probe()
        .err()
        .map(|e| format!("the kernel refused a GSO send: {e}"))
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
        if self.tx.connected().is_some_and(|c| c != a) {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!(
                    "rank {rank} at {a}: this UDP device already carries traffic and is connected to its one peer; give every peer before the first send or receive"
                ),
            ));
        }
        crate::set_peer_slot(&mut self.peers, rank, a);
        Ok(())
    }
    fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    fn receive(&mut self, _now: u64, f: &mut dyn FnMut(&mut [u8])) -> io::Result<usize> {
        if !self.settled {
            self.settle()?;
        }
        let mut total = 0;
        // A few batches at most, so that one flood cannot starve the caller's other work.
        for _ in 0..4 {
            // While the socket keeps coming up empty (a busy wait's passes), ask for one
            // datagram (the cheaper call); once something came, batches, as more may follow.
            let r = if self.idle && self.plain {
                self.rx.recv_one_plain(self.fd.as_raw_fd())
            } else if self.idle {
                let r = self.rx.recv_one(self.fd.as_raw_fd());
                self.plain = matches!(r, Ok(0)) && !self.gro_on;
                r
            } else {
                self.rx.recv(self.fd.as_raw_fd())
            };
            let n = match r {
                Ok(n) => n,
                Err(e) if self.refused(&e) => continue,
                Err(e) => return Err(e),
            };
            for i in 0..n {
                if self.rx.truncated(i) {
                    self.rx_truncated += 1;
                    continue;
                }
                let (from, seg) = (self.rx.source(i), self.rx.seg_size(i));
                let d = self.rx.packet_mut(i);
                let seg = seg.filter(|&s| s < d.len());
                if seg.is_some() {
                    self.gro_datagrams += 1;
                }
                // A coalesced datagram is a run of packets of `seg` bytes (the last may be
                // shorter), all from the one sender whose address the datagram carries.
                let whole = d.len().max(1);
                for p in d.chunks_mut(seg.unwrap_or(whole)) {
                    if crate::from_its_rank(&self.peers, p, &from) {
                        f(p);
                    } else {
                        self.rx_foreign += 1;
                    }
                    total += 1;
                }
            }
            if n < self.rx.capacity() {
                break;
            }
        }
        self.idle = total == 0;
        self.adapt_gro(total);
        Ok(total)
    }

    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize> {
        if !self.settled {
            self.settle()?;
        }
        let mut sent = 0;
        loop {
            // Packets held from an earlier call go first, in order.
            if !self.tx.filling() && !self.flush(&mut sent)? {
                return Ok(sent);
            }
            while let Some(buf) = self.tx.room() {
                let Some(Out { peer, len, burst }) = fill(buf) else {
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
                let to = *to;
                self.tx.push_run(to, len, burst as usize);
            }
            // Nothing new, and nothing held (held packets with no room left behind them, as
            // after a refused GSO send was split, still go out below).
            if self.tx.is_empty() {
                return Ok(sent);
            }
            let full = self.tx.room().is_none();
            if !self.flush(&mut sent)? || !full {
                return Ok(sent);
            }
        }
    }

    fn offload(&self) -> Option<String> {
        Some(self.offload_status())
    }

    fn next_due(&self) -> Option<u64> {
        // Held packets want another try soon, whether or not anything arrives.
        (!self.tx.is_empty()).then_some(0)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![
            ("udp_tx_full", self.tx_full),
            ("udp_rx_foreign", self.rx_foreign),
            ("udp_icmp_refused", self.icmp_refused),
            ("udp_gso_sends", self.tx.gso_sends()),
            ("udp_gro_datagrams", self.gro_datagrams),
            ("udp_gro_switches", self.gro_switches),
            ("udp_rx_truncated", self.rx_truncated),
        ]
    }
}
