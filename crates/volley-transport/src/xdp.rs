//! AF_XDP: the same frames as [`crate::eth`] (volley packets as the payload of EtherType
//! 0x88B5 frames, so the two interoperate), moved through an AF_XDP socket's rings and UMEM
//! instead of AF_PACKET's, with an XDP program that takes this rank's frames off the driver's
//! receive path before the kernel builds anything for them. Everything else on the interface
//! (IP, other jobs' frames, this host's other ranks' frames) goes on to the kernel.
//!
//! One AF_XDP socket per interface queue, one XDP program per interface: on a host running
//! several ranks of a job, the first to open takes the interface and the others fall back to
//! [`crate::eth::EthDevice`] (their frames pass the program), which [`XdpDevice::open_or_eth`]
//! does and says. The program steers the frames of receive queue 0; a NIC spreads a
//! non-IP EtherType over its queues by nothing (no addresses to hash), so they arrive there.

use crate::eth::{EthDevice, Framing, ETH_HEADER};
use crate::{Addr, Device, Fill, Out};
use std::io;
use std::os::fd::RawFd;
use volley_sys::net::Interface;
use volley_sys::xdp::{Steer, XdpMode, Xsk, MAX_FRAME};
use volley_wire::ETHERTYPE;

/// UMEM frames per direction: a window of full-size packets in flight (16 MiB in all).
const FRAMES: u32 = 2048;

pub struct XdpDevice {
    xsk: Xsk,
    ifname: String,
    framing: Framing,
    max_packet: usize,
    tx_ring_full: u64,
    tx_kicks: u64,
}

/// The largest volley packet the XDP transport carries on `ifc`: its MTU where frames may span
/// several UMEM frames (multi-buffer, Linux 6.6), else what one UMEM frame receives whole. A
/// host's ranks that fall back to raw Ethernet are held to it too, so that no packet is too
/// large for a peer's UMEM.
pub fn max_packet(ifc: &Interface) -> usize {
    let mtu = (ifc.mtu as usize).min(MAX_PACKET);
    if volley_sys::xdp::multi_buffer() {
        mtu
    } else {
        mtu.min(MAX_FRAME - ETH_HEADER)
    }
}

/// Jumbo frames and then some; as eth's.
const MAX_PACKET: usize = 65_000;

/// Which frames the device's program takes from the interface.
#[derive(Clone, Copy, Debug)]
pub enum Frames {
    /// Those of job `token` for rank `rank` (EtherType, magic number, token, destination):
    /// other jobs and this host's other ranks keep theirs.
    Rank { token: u64, rank: u32 },
    /// Every frame of volley's EtherType (an interface given over to one process).
    All,
}

/// Where the XDP program runs: `None` is volley's choice (native, except on a veth: see
/// [`XdpDevice::open`]).
pub type ModeChoice = Option<XdpMode>;

impl XdpDevice {
    /// Opens an AF_XDP socket on queue 0 of `ifc` and attaches the program that steers `frames`
    /// to it.
    ///
    /// Native mode by default, but generic on a veth: a native program on a veth sends every
    /// frame the veth receives, the kernel's TCP segments too, through the veth's XDP path one
    /// MTU at a time (measured on the development machine: kernel TCP across the pair fell from
    /// 2.8 GB/s to 0.73 while volley's program was attached natively, 2.4 generically), which
    /// costs the rest of the host more than volley gains (8 B latency is the same; 64 KiB
    /// streams 0.38 against 0.38 GB/s).
    pub fn open(ifc: &Interface, frames: Frames, mode: ModeChoice) -> io::Result<XdpDevice> {
        // Offsets in the frame: the packet starts after the Ethernet header.
        let mut steer = vec![(12, ETHERTYPE.to_be_bytes().to_vec())];
        if let Frames::Rank { token, rank } = frames {
            for (at, bytes) in volley_wire::identity(token, rank) {
                steer.push(((ETH_HEADER + at) as u16, bytes));
            }
        }
        let mode = mode.or(if ifc.driver == "veth" {
            Some(XdpMode::Generic)
        } else {
            None
        });
        let max_packet = max_packet(ifc);
        let xsk = Xsk::open(
            ifc.index,
            0,
            FRAMES,
            &Steer { fields: steer },
            mode,
            ETH_HEADER + max_packet,
        )?;
        Ok(XdpDevice {
            xsk,
            ifname: ifc.name.clone(),
            framing: Framing::new(ifc.mac),
            max_packet,
            tx_ring_full: 0,
            tx_kicks: 0,
        })
    }

    /// [`XdpDevice::open`], or, when another rank of this host (or another job) already holds the
    /// interface, raw Ethernet at the same packet size, whose `offload()` says why.
    pub fn open_or_eth(
        ifc: &Interface,
        frames: Frames,
        mode: ModeChoice,
    ) -> io::Result<Box<dyn Device>> {
        match XdpDevice::open(ifc, frames, mode) {
            Ok(d) => Ok(Box::new(d)),
            Err(e) if e.kind() == io::ErrorKind::AddrInUse => {
                let mut eth = EthDevice::open_with_max(ifc, max_packet(ifc))?;
                eth.note = Some(format!(
                    "xdp on {}: {e}; this rank uses eth (the same frames, through AF_PACKET)",
                    ifc.name
                ));
                Ok(Box::new(eth))
            }
            Err(e) => Err(e),
        }
    }

    /// The socket's mode, in words.
    pub fn describe(&self) -> String {
        let i = &self.xsk.info;
        format!(
            "{} XDP on {}, {}, need-wakeup {}, busy-poll {}, multi-buffer {}",
            match i.mode {
                XdpMode::Native => "native",
                XdpMode::Generic => "generic",
            },
            self.ifname,
            if i.zero_copy {
                "zero-copy"
            } else {
                "copy mode"
            },
            if i.need_wakeup { "on" } else { "off" },
            if i.busy_poll { "on" } else { "off" },
            if i.multi_buffer { "on" } else { "off" },
        )
    }
}

impl Device for XdpDevice {
    fn kind(&self) -> String {
        "xdp".into()
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
        self.xsk.fd()
    }

    fn receive(&mut self, _now: u64, f: &mut dyn FnMut(&mut [u8])) -> io::Result<usize> {
        // The program matched the frame's EtherType and header words; the source is checked
        // here, as eth does.
        let framing = &mut self.framing;
        Ok(self
            .xsk
            .receive(256, &mut |frame: &mut [u8]| framing.deliver(frame, f)))
    }

    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize> {
        let mut sent = 0;
        let max = self.max_packet;
        loop {
            let Some(slot) = self.xsk.tx_slot() else {
                // Every frame in flight or the ring full: let the kernel send, then once more.
                self.tx_kicks += self.xsk.tx_kick()? as u64;
                if self.xsk.tx_slot().is_none() {
                    self.tx_ring_full += 1;
                    break;
                }
                continue;
            };
            let Some(Out { peer, len, .. }) = fill(&mut slot[ETH_HEADER..ETH_HEADER + max]) else {
                break;
            };
            self.framing.write_header(slot, peer)?;
            self.xsk.tx_commit(ETH_HEADER + len);
            sent += 1;
        }
        // Also when nothing new came: frames an earlier kick left in the ring go now.
        self.tx_kicks += self.xsk.tx_kick()? as u64;
        Ok(sent)
    }

    fn offload(&self) -> Option<String> {
        Some(self.describe())
    }

    fn next_due(&self) -> Option<u64> {
        // Frames the kernel has not taken yet want another kick soon, whatever arrives.
        self.xsk.tx_waiting().then_some(0)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let s = self.xsk.stats();
        let mut c = self.framing.counters().to_vec();
        c.extend([
            ("xdp_tx_ring_full", self.tx_ring_full),
            ("xdp_tx_kicks", self.tx_kicks),
            ("xdp_rx_dropped", s.rx_dropped + s.rx_ring_full),
            ("xdp_fill_ring_empty", s.fill_ring_empty),
            ("xdp_rx_multi_buffer", self.xsk.rx_multi),
            ("xdp_invalid_descs", s.rx_invalid + s.tx_invalid),
        ]);
        c
    }
}
