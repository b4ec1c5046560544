//! An in-memory device: the endpoints of one [`Hub`] exchange packets through bounded queues in
//! this process, with no socket, namespace or root. The conformance suite runs against it beside
//! the kernel's devices, and the protocol engine can be driven over it in real time, so both need
//! nothing but `cargo test`.
//!
//! Not a fast path: a lock guards the hub (a test device may take one; volley's own paths never
//! do). Like every device it reports "full" before it takes a packet, never after: a packet for a
//! full queue is held and sent first on the next call.

use crate::{Addr, Device, Fill, Out};
use std::collections::VecDeque;
use std::io;
use std::os::fd::RawFd;
use std::sync::{Arc, Mutex};
use volley_sys::EventFd;

/// Packets one endpoint's queue holds before senders to it see "full".
pub const QUEUE_PACKETS: usize = 256;

struct Endpoint {
    queue: VecDeque<Vec<u8>>,
    /// Readable while packets wait (the device's fd).
    bell: Arc<EventFd>,
}

/// The medium a set of [`LoopbackDevice`]s share. Cheap to clone.
#[derive(Clone, Default)]
pub struct Hub {
    endpoints: Arc<Mutex<Vec<Endpoint>>>,
}

impl Hub {
    pub fn new() -> Hub {
        Hub::default()
    }

    /// A new endpoint on this hub, carrying packets of up to `max_packet` bytes.
    pub fn device(&self, max_packet: usize) -> io::Result<LoopbackDevice> {
        let bell = Arc::new(EventFd::new()?);
        let mut eps = self.lock();
        eps.push(Endpoint {
            queue: VecDeque::new(),
            bell: bell.clone(),
        });
        Ok(LoopbackDevice {
            hub: self.clone(),
            me: (eps.len() - 1) as u32,
            bell,
            max_packet,
            peers: Vec::new(),
            held: None,
            scratch: vec![0; max_packet],
            tx_full: 0,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Endpoint>> {
        // A test that panicked while holding the lock leaves consistent queues behind.
        self.endpoints.lock().unwrap_or_else(|p| p.into_inner())
    }
}

pub struct LoopbackDevice {
    hub: Hub,
    me: u32,
    bell: Arc<EventFd>,
    max_packet: usize,
    /// Hub endpoint of each rank.
    peers: Vec<Option<u32>>,
    /// A packet whose destination queue was full: (endpoint, bytes), sent first next time.
    held: Option<(u32, Vec<u8>)>,
    scratch: Vec<u8>,
    tx_full: u64,
}

impl LoopbackDevice {
    /// Queues `pkt` for endpoint `to`; gives it back if that queue is full.
    fn offer(&mut self, to: u32, pkt: Vec<u8>) -> Result<(), Vec<u8>> {
        let mut eps = self.hub.lock();
        let ep = &mut eps[to as usize];
        if ep.queue.len() >= QUEUE_PACKETS {
            return Err(pkt);
        }
        ep.queue.push_back(pkt);
        ep.bell.notify();
        Ok(())
    }
}

impl Device for LoopbackDevice {
    fn kind(&self) -> String {
        "loopback".into()
    }
    fn max_packet(&self) -> usize {
        self.max_packet
    }
    fn local_addr(&self) -> Addr {
        Addr::Mem(self.me)
    }
    fn set_peer(&mut self, rank: u32, addr: Addr) -> io::Result<()> {
        let Addr::Mem(ep) = addr else {
            return Err(crate::wrong_address(rank, "in-memory", addr));
        };
        if ep as usize >= self.hub.lock().len() {
            return Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("rank {rank}: no endpoint {ep} on this hub"),
            ));
        }
        crate::set_peer_slot(&mut self.peers, rank, ep);
        Ok(())
    }
    fn fd(&self) -> RawFd {
        self.bell.raw()
    }

    fn receive(&mut self, _now: u64, f: &mut dyn FnMut(&mut [u8])) -> io::Result<usize> {
        // Take the waiting packets out under the lock, hand them over without it: the callback
        // may transmit.
        let mut got: Vec<Vec<u8>> = {
            let mut eps = self.hub.lock();
            let ep = &mut eps[self.me as usize];
            self.bell.drain();
            ep.queue.drain(..).collect()
        };
        for p in &mut got {
            f(p);
        }
        Ok(got.len())
    }

    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize> {
        let mut sent = 0;
        if let Some((to, pkt)) = self.held.take() {
            if let Err(pkt) = self.offer(to, pkt) {
                self.held = Some((to, pkt));
                self.tx_full += 1;
                return Ok(0);
            }
            sent += 1;
        }
        loop {
            let Some(Out { peer, len, .. }) = fill(&mut self.scratch) else {
                return Ok(sent);
            };
            let Some(Some(to)) = self.peers.get(peer as usize).copied() else {
                return Err(io::Error::new(
                    io::ErrorKind::NotFound,
                    format!("no address for rank {peer}"),
                ));
            };
            let pkt = self.scratch[..len].to_vec();
            if let Err(pkt) = self.offer(to, pkt) {
                // Taken, so never dropped: held for the next call, and nothing more taken now.
                self.held = Some((to, pkt));
                self.tx_full += 1;
                return Ok(sent);
            }
            sent += 1;
        }
    }

    fn next_due(&self) -> Option<u64> {
        self.held.is_some().then_some(0)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        vec![("loopback_tx_full", self.tx_full)]
    }
}
