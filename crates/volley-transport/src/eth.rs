//! Raw Ethernet: volley packets as the payload of frames of EtherType 0x88B5 (IEEE local
//! experimental), sent and received through AF_PACKET rings mapped into the process. IP traffic
//! on the same interface is untouched: the socket sees only volley's EtherType.

use crate::{Addr, Device, Fill, Out};
use std::io;
use std::os::fd::RawFd;
use volley_sys::net::{Interface, PacketRing};
use volley_wire::ETHERTYPE;

pub(crate) const ETH_HEADER: usize = 14;

/// What the devices carrying volley packets in Ethernet frames (eth, xdp) share: the peers'
/// hardware addresses, the header written in front of a packet sent, the checks of a frame
/// received.
pub(crate) struct Framing {
    mac: [u8; 6],
    peers: Vec<Option<[u8; 6]>>,
    /// Frames of our EtherType too short to hold a volley header, or not for us.
    rx_runts: u64,
    /// Frames dropped: not from the hardware address of the rank they name.
    rx_foreign: u64,
}

impl Framing {
    pub(crate) fn new(mac: [u8; 6]) -> Framing {
        Framing {
            mac,
            peers: Vec::new(),
            rx_runts: 0,
            rx_foreign: 0,
        }
    }

    pub(crate) fn mac(&self) -> [u8; 6] {
        self.mac
    }

    pub(crate) fn set_peer(&mut self, rank: u32, addr: Addr) -> io::Result<()> {
        let Addr::Eth(m) = addr else {
            return Err(crate::wrong_address(rank, "Ethernet", addr));
        };
        crate::set_peer_slot(&mut self.peers, rank, m);
        Ok(())
    }

    /// Hands the packet a received frame carries to `f`, or counts why not.
    pub(crate) fn deliver(&mut self, frame: &mut [u8], f: &mut dyn FnMut(&mut [u8])) {
        if frame.len() <= ETH_HEADER || frame[12..14] != ETHERTYPE.to_be_bytes() {
            self.rx_runts += 1;
            return;
        }
        let from: [u8; 6] = frame[6..12].try_into().expect("6 bytes");
        if crate::from_its_rank(&self.peers, &frame[ETH_HEADER..], &from) {
            f(&mut frame[ETH_HEADER..]);
        } else {
            self.rx_foreign += 1;
        }
    }

    /// Writes the Ethernet header for rank `peer` in front of the packet in `frame`.
    pub(crate) fn write_header(&self, frame: &mut [u8], peer: u32) -> io::Result<()> {
        let Some(Some(dst)) = self.peers.get(peer as usize) else {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("no address for rank {peer}"),
            ));
        };
        frame[0..6].copy_from_slice(dst);
        frame[6..12].copy_from_slice(&self.mac);
        frame[12..14].copy_from_slice(&ETHERTYPE.to_be_bytes());
        Ok(())
    }

    pub(crate) fn counters(&self) -> [(&'static str, u64); 2] {
        [
            ("eth_rx_runts", self.rx_runts),
            ("eth_rx_foreign", self.rx_foreign),
        ]
    }
}

pub struct EthDevice {
    ring: PacketRing,
    framing: Framing,
    max_packet: usize,
    /// Frames dropped because the transmit ring was full (the protocol sends them again).
    tx_ring_full: u64,
    /// Why this device stands in for another (the XDP device, its interface taken).
    pub note: Option<String>,
}

impl EthDevice {
    /// Opens a raw socket on `ifc` (needs CAP_NET_RAW).
    pub fn open(ifc: &Interface) -> io::Result<EthDevice> {
        EthDevice::open_with_max(ifc, 65_000)
    }

    /// [`EthDevice::open`] with packets of at most `max` bytes (a job some of whose ranks use
    /// the XDP device, whose UMEM frames are smaller than a jumbo MTU).
    pub fn open_with_max(ifc: &Interface, max: usize) -> io::Result<EthDevice> {
        let mtu = ifc.mtu as usize;
        // Room for a whole window of packets in flight, within 32 MiB a ring.
        let frames = ((32usize << 20) / (mtu + 128)).clamp(512, 4096);
        let ring = PacketRing::open(ifc.index, ETHERTYPE, mtu, frames)?;
        let max_packet = mtu.min(ring.max_frame() - ETH_HEADER).min(max);
        Ok(EthDevice {
            ring,
            framing: Framing::new(ifc.mac),
            max_packet,
            tx_ring_full: 0,
            note: None,
        })
    }
}

impl Device for EthDevice {
    fn kind(&self) -> String {
        "eth".into()
    }
    fn max_packet(&self) -> usize {
        self.max_packet
    }
    fn local_addr(&self) -> Addr {
        Addr::Eth(self.framing.mac())
    }
    fn set_peer(&mut self, rank: u32, addr: Addr) -> io::Result<()> {
        self.framing.set_peer(rank, addr)
    }
    fn fd(&self) -> RawFd {
        self.ring.fd()
    }

    fn receive(&mut self, _now: u64, f: &mut dyn FnMut(&mut [u8])) -> io::Result<usize> {
        let mut n = 0;
        while n < 256 {
            let Some(frame) = self.ring.rx_peek() else {
                break;
            };
            self.framing.deliver(frame, f);
            self.ring.rx_release();
            n += 1;
        }
        Ok(n)
    }

    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize> {
        let mut sent = 0;
        let max = self.max_packet;
        loop {
            let Some(slot) = self.ring.tx_slot() else {
                // Ring full: let the kernel drain it, then try once more.
                self.ring.tx_kick()?;
                if self.ring.tx_slot().is_none() {
                    self.tx_ring_full += 1;
                    break;
                }
                continue;
            };
            let Some(Out { peer, len, .. }) = fill(&mut slot[ETH_HEADER..ETH_HEADER + max]) else {
                break;
            };
            self.framing.write_header(slot, peer)?;
            self.ring.tx_commit(ETH_HEADER + len);
            sent += 1;
            if sent % 64 == 0 {
                self.ring.tx_kick()?;
            }
        }
        self.ring.tx_kick()?;
        Ok(sent)
    }

    fn offload(&self) -> Option<String> {
        self.note.clone()
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = self.framing.counters().to_vec();
        c.extend([
            ("eth_tx_ring_full", self.tx_ring_full),
            ("eth_tx_wrong_format", self.ring.tx_wrong_format),
        ]);
        c
    }
}
