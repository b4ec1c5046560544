//! volley's network devices (layer 1: depends on volley-sys and volley-wire; no unsafe).
//!
//! GAMMA's BIND idea: a handful of device operations under a device-independent protocol. A
//! [`Device`] moves whole volley packets; it knows nothing of sequence numbers or messages. Five
//! implementations: [`udp::UdpDevice`] (batched with sendmmsg/recvmmsg), [`eth::EthDevice`] (raw
//! Ethernet frames of EtherType 0x88B5 through AF_PACKET rings mapped into the process),
//! [`xdp::XdpDevice`] (the same frames through an AF_XDP socket's rings and UMEM),
//! [`loopback::LoopbackDevice`] (in-memory queues in one process, for tests that need no root),
//! and [`fault::FaultDevice`], which wraps any device and loses, duplicates, reorders, delays and
//! corrupts what it receives, and injects foreign frames (smoltcp's FaultInjector). One
//! conformance suite (tests/conformance.rs) runs against each.
//! The ring-based devices (eth, xdp) fill transmit slots in place and lend receive slots: no
//! copy between volley and the ring.

#![forbid(unsafe_code)]

pub mod auth;
pub mod eth;
pub mod fault;
pub mod loopback;
pub mod udp;
pub mod xdp;

use std::fmt;
use std::io;
use std::net::SocketAddrV4;
use std::os::fd::RawFd;
use std::str::FromStr;

/// One packet written into a device's transmit buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Out {
    /// The rank it goes to.
    pub peer: u32,
    /// Its length in bytes.
    pub len: usize,
    /// The most packets to this peer the device should join into one kernel crossing (the
    /// engine's `Transmit::burst`: half of what may be in flight); devices that send frame by
    /// frame ignore it.
    pub burst: u32,
}

/// Writes one packet into a transmit buffer: returns where it goes and its length, or None.
pub type Fill<'a> = dyn FnMut(&mut [u8]) -> Option<Out> + 'a;

/// Where a rank's device can be reached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Addr {
    Udp(SocketAddrV4),
    Eth([u8; 6]),
    /// An endpoint of an in-memory [`loopback::Hub`].
    Mem(u32),
}

impl fmt::Display for Addr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Addr::Udp(a) => write!(f, "udp:{a}"),
            Addr::Eth(m) => write!(
                f,
                "eth:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
                m[0], m[1], m[2], m[3], m[4], m[5]
            ),
            Addr::Mem(e) => write!(f, "mem:{e}"),
        }
    }
}

impl FromStr for Addr {
    type Err = String;
    fn from_str(s: &str) -> Result<Addr, String> {
        if let Some(a) = s.strip_prefix("udp:") {
            return a
                .parse()
                .map(Addr::Udp)
                .map_err(|e| format!("bad UDP address {a:?}: {e}"));
        }
        if let Some(m) = s.strip_prefix("eth:") {
            let parts: Vec<&str> = m.split(':').collect();
            let mut mac = [0u8; 6];
            if parts.len() != 6 {
                return Err(format!("bad MAC address {m:?}: needs six hex bytes"));
            }
            for (d, p) in mac.iter_mut().zip(parts) {
                *d =
                    u8::from_str_radix(p, 16).map_err(|e| format!("bad MAC address {m:?}: {e}"))?;
            }
            return Ok(Addr::Eth(mac));
        }
        if let Some(e) = s.strip_prefix("mem:") {
            return e
                .parse()
                .map(Addr::Mem)
                .map_err(|e| format!("bad in-memory endpoint {s:?}: {e}"));
        }
        Err(format!(
            "bad address {s:?}: expected udp:IP:PORT, eth:MAC or mem:N"
        ))
    }
}

/// A device that moves volley packets between this process and its peers.
///
/// Contract (NNG's habit: who owns what after each call):
/// - [`Device::transmit`] lends the caller free transmit buffers one at a time; the caller writes
///   a packet into the front of the buffer and says which rank it is for and how long it is; the
///   device owns the bytes from then on and sends them (one system call per batch). A full
///   device says so by taking fewer packets (it stops calling `fill`); a packet it took is
///   never dropped: one the medium refused is held and sent first on the next call, and
///   [`Device::next_due`] asks for that call. The caller may call again at any time.
/// - [`Device::receive`] lends each received packet to the callback for the length of the call
///   only; the callback must copy what it keeps. It never blocks.
/// - [`Device::fd`] becomes readable when packets wait, for poll/epoll-based waiting.
pub trait Device: Send {
    /// "udp", "eth", or a wrapper's name around its device's.
    fn kind(&self) -> String;
    /// Largest volley packet this device carries.
    fn max_packet(&self) -> usize;
    /// This device's address, for the peers.
    fn local_addr(&self) -> Addr;
    /// Tells the device where rank `rank` is. Give every peer before the first send or
    /// receive: a UDP device with one peer connects its socket to it then, and refuses a
    /// second peer address after that.
    fn set_peer(&mut self, rank: u32, addr: Addr) -> io::Result<()>;
    fn fd(&self) -> RawFd;
    /// Hands each waiting packet to `f`; returns how many. `now` is the caller's clock in ns.
    /// The packet is lent writable for the call (the device's own buffer: a layer above may
    /// open it in place instead of copying it out).
    fn receive(&mut self, now: u64, f: &mut dyn FnMut(&mut [u8])) -> io::Result<usize>;
    /// Fills and sends packets: `fill` writes one packet into the buffer and returns the
    /// destination rank and length, or None when it has nothing more. Returns how many were
    /// sent.
    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize>;
    /// When the device wants `receive` called again although its fd is quiet (a wrapper holding
    /// delayed packets).
    fn next_due(&self) -> Option<u64> {
        None
    }
    /// Which offloads the device uses and why not the others, in words (UDP's segmentation
    /// offload); None for a device that has none.
    fn offload(&self) -> Option<String> {
        None
    }
    /// Anomalies the device counted: (name, value), each name one of [`DEVICE_COUNTERS`].
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

/// Whether a received packet came from the address recorded for the rank it names: a packet
/// from anywhere else (another process on the host, another host) is not the job's, whatever
/// its token says. Packets too short to name a rank go on to the parser, which drops them.
pub(crate) fn from_its_rank<T: PartialEq>(peers: &[Option<T>], packet: &[u8], from: &T) -> bool {
    match volley_wire::claimed_source(packet) {
        None => true,
        Some(r) => matches!(peers.get(r as usize), Some(Some(a)) if a == from),
    }
}

/// Records `v` as rank `rank`'s address in a device's table of peers (indexed by rank).
pub(crate) fn set_peer_slot<T: Clone>(peers: &mut Vec<Option<T>>, rank: u32, v: T) {
    let r = rank as usize;
    if peers.len() <= r {
        peers.resize(r + 1, None);
    }
    peers[r] = Some(v);
}

/// The error for an address of another kind than the device carries.
pub(crate) fn wrong_address(rank: u32, kind: &str, addr: Addr) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("rank {rank} has no {kind} address ({addr})"),
    )
}

/// (name, unit, description) of every counter a device may report, for volley's one table of
/// counters. A device reports the ones that apply to it.
pub const DEVICE_COUNTERS: &[(&str, &str, &str)] = &[
    (
        "auth_rx_rejected",
        "packets",
        "packets dropped because their tag under the job's key was missing or wrong (forged, altered, or from another job)",
    ),
    (
        "udp_rx_foreign",
        "packets",
        "UDP packets dropped because they did not come from the address of the rank they name (forged, or from outside the job)",
    ),
    (
        "eth_rx_foreign",
        "frames",
        "frames dropped because they did not come from the hardware address of the rank they name (forged, or from outside the job)",
    ),
    (
        "udp_icmp_refused",
        "events",
        "times the kernel reported an ICMP port-unreachable from the one peer the UDP socket is connected to (its process had closed the socket, e.g. finished): nothing is lost by it, the protocol decides about the peer",
    ),
    (
        "udp_tx_full",
        "events",
        "times the UDP socket buffer stayed full: packets were held for the next send, none lost",
    ),
    (
        "udp_gso_sends",
        "sends",
        "UDP sends that carried a run of packets to one peer in one segmentation-offload (GSO) send",
    ),
    (
        "udp_gro_datagrams",
        "datagrams",
        "received UDP datagrams the kernel had coalesced from a run of packets (GRO)",
    ),
    (
        "udp_gro_switches",
        "switches",
        "times the UDP device turned GRO off (packets came one at a time) or on again (they came in runs)",
    ),
    (
        "udp_rx_truncated",
        "datagrams",
        "received UDP datagrams longer than their buffer, dropped unread (none expected)",
    ),
    (
        "loopback_tx_full",
        "events",
        "times an in-memory queue was full: the packet was held for the next send, none lost",
    ),
    (
        "eth_rx_runts",
        "frames",
        "received frames too short to hold a volley packet",
    ),
    (
        "eth_tx_ring_full",
        "events",
        "sends that found the AF_PACKET transmit ring full",
    ),
    (
        "xdp_tx_ring_full",
        "events",
        "sends that found every AF_XDP transmit frame in the kernel's hands or its ring full",
    ),
    (
        "xdp_tx_kicks",
        "system calls",
        "sendto calls that asked the kernel to send the AF_XDP transmit ring (copy mode sends 32 frames a call)",
    ),
    (
        "xdp_rx_dropped",
        "frames",
        "frames the kernel dropped on their way to the AF_XDP socket (its receive ring full, or a frame too large for a UMEM frame)",
    ),
    (
        "xdp_fill_ring_empty",
        "events",
        "times the kernel found no free UMEM frame to receive into (the fill ring empty)",
    ),
    (
        "xdp_rx_multi_buffer",
        "frames",
        "frames larger than a UMEM frame, received in several chunks and put together (jumbo frames)",
    ),
    (
        "xdp_invalid_descs",
        "descriptors",
        "AF_XDP ring descriptors the kernel rejected as invalid (none expected)",
    ),
    (
        "eth_tx_wrong_format",
        "frames",
        "transmit ring slots the kernel reported as malformed",
    ),
    (
        "fault_dropped",
        "packets",
        "packets the fault injector dropped",
    ),
    (
        "fault_duplicated",
        "packets",
        "packets the fault injector sent twice",
    ),
    (
        "fault_reordered",
        "packets",
        "packets the fault injector held back to reorder",
    ),
    (
        "fault_corrupted",
        "packets",
        "packets the fault injector corrupted",
    ),
    (
        "fault_injected",
        "packets",
        "junk packets the fault injector made up",
    ),
];

impl<D: Device + ?Sized> Device for Box<D> {
    fn kind(&self) -> String {
        (**self).kind()
    }
    fn max_packet(&self) -> usize {
        (**self).max_packet()
    }
    fn local_addr(&self) -> Addr {
        (**self).local_addr()
    }
    fn set_peer(&mut self, rank: u32, addr: Addr) -> io::Result<()> {
        (**self).set_peer(rank, addr)
    }
    fn fd(&self) -> RawFd {
        (**self).fd()
    }
    fn receive(&mut self, now: u64, f: &mut dyn FnMut(&mut [u8])) -> io::Result<usize> {
        (**self).receive(now, f)
    }
    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize> {
        (**self).transmit(fill)
    }
    fn next_due(&self) -> Option<u64> {
        (**self).next_due()
    }
    fn offload(&self) -> Option<String> {
        (**self).offload()
    }
    fn counters(&self) -> Vec<(&'static str, u64)> {
        (**self).counters()
    }
}

/// The interface to use: `name` if given, else the only up, non-loopback interface with an
/// IPv4 address. The error says what was found and what to set.
pub fn pick_interface(name: Option<&str>) -> Result<volley_sys::net::Interface, String> {
    let all = volley_sys::net::interfaces().map_err(|e| format!("cannot list interfaces: {e}"))?;
    if let Some(n) = name {
        return all
            .into_iter()
            .find(|i| i.name == n)
            .ok_or_else(|| format!("no interface named {n:?} here (VOLLEY_NET_IF)"));
    }
    let cands: Vec<_> = all
        .iter()
        .filter(|i| i.up && !i.loopback && i.ipv4.is_some())
        .cloned()
        .collect();
    match cands.len() {
        1 => Ok(cands[0].clone()),
        0 => {
            // Only loopback: a job on one machine driven through the network on purpose.
            all.into_iter()
                .find(|i| i.loopback && i.ipv4.is_some())
                .ok_or_else(|| "no interface with an IPv4 address: set VOLLEY_NET_IF".to_string())
        }
        _ => Err(format!(
            "several interfaces could carry the job ({}): choose one with VOLLEY_NET_IF",
            cands
                .iter()
                .map(|i| i.name.as_str())
                .collect::<Vec<_>>()
                .join(", ")
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn addresses_round_trip_through_text() {
        for s in ["udp:198.18.0.1:4000", "eth:02:00:c6:12:00:01", "mem:3"] {
            assert_eq!(s.parse::<Addr>().unwrap().to_string(), s);
        }
        assert!("tcp:1.2.3.4:5"
            .parse::<Addr>()
            .unwrap_err()
            .contains("expected"));
        assert!("eth:02:00".parse::<Addr>().unwrap_err().contains("six"));
    }
}
