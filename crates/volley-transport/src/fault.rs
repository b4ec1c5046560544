//! A device that wraps a device and injects faults into what it receives, from a seed:
//! loss, duplication, reordering, delay, corruption, and foreign, truncated or garbage frames
//! (smoltcp's FaultInjector). Configured by a string such as
//! `loss=0.01,dup=0.01,reorder=0.05,delay_us=200,corrupt=0.01,junk=0.01,seed=7`
//! (VOLLEY_FAULTS), so the real multi-process runs can use it.

use crate::{Addr, Device, Fill};
use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::io;
use std::os::fd::RawFd;

/// What to inject; probabilities per received packet.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Faults {
    pub loss: f64,
    pub dup: f64,
    /// Held back for a random time up to `delay_ns` (so later packets overtake it).
    pub reorder: f64,
    /// Every packet is delayed by this much (and reordered ones by up to as much again).
    pub delay_ns: u64,
    pub corrupt: f64,
    /// A foreign, wrong-token, truncated or garbage frame injected beside this packet.
    pub junk: f64,
    pub seed: u64,
}

impl std::str::FromStr for Faults {
    type Err = String;
    fn from_str(s: &str) -> Result<Faults, String> {
        let mut f = Faults {
            seed: 1,
            ..Faults::default()
        };
        for item in s.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            let (k, v) = item
                .split_once('=')
                .ok_or_else(|| format!("fault {item:?}: expected name=value"))?;
            let prob = |v: &str| -> Result<f64, String> {
                let p: f64 = v.parse().map_err(|e| format!("fault {k}={v}: {e}"))?;
                if !(0.0..=1.0).contains(&p) {
                    return Err(format!("fault {k}={v}: a probability is between 0 and 1"));
                }
                Ok(p)
            };
            match k {
                "loss" => f.loss = prob(v)?,
                "dup" => f.dup = prob(v)?,
                "reorder" => f.reorder = prob(v)?,
                "corrupt" => f.corrupt = prob(v)?,
                "junk" => f.junk = prob(v)?,
                "delay_us" => f.delay_ns = v.parse::<u64>().map_err(|e| format!("fault {k}={v}: {e}"))? * 1000,
                "seed" => f.seed = v.parse().map_err(|e| format!("fault {k}={v}: {e}"))?,
                _ => {
                    return Err(format!(
                        "unknown fault {k:?}: the faults are loss, dup, reorder, delay_us, corrupt, junk, seed"
                    ))
                }
            }
        }
        Ok(f)
    }
}

pub struct FaultDevice<D: Device> {
    inner: D,
    faults: Faults,
    rng: u64,
    held: BinaryHeap<Reverse<(u64, u64, Vec<u8>)>>,
    serial: u64,
    pub dropped: u64,
    pub duplicated: u64,
    pub reordered: u64,
    pub corrupted: u64,
    pub injected: u64,
}

impl<D: Device> FaultDevice<D> {
    pub fn new(inner: D, faults: Faults) -> FaultDevice<D> {
        let rng = faults.seed ^ 0x6a09_e667_f3bc_c909;
        FaultDevice {
            inner,
            faults,
            rng,
            held: BinaryHeap::new(),
            serial: 0,
            dropped: 0,
            duplicated: 0,
            reordered: 0,
            corrupted: 0,
            injected: 0,
        }
    }

    fn next(&mut self) -> u64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn chance(&mut self, p: f64) -> bool {
        p > 0.0 && ((self.next() >> 11) as f64 / (1u64 << 53) as f64) < p
    }

    fn hold(&mut self, due: u64, pkt: Vec<u8>) {
        self.serial += 1;
        self.held.push(Reverse((due, self.serial, pkt)));
    }

    fn junk_of(&mut self, pkt: &[u8]) -> Vec<u8> {
        match self.next() % 4 {
            // Garbage.
            0 => (0..(self.next() % 1400) as usize)
                .map(|_| self.next() as u8)
                .collect(),
            // Another job's packet, intact.
            1 => {
                let mut p = pkt.to_vec();
                if p.len() >= volley_wire::HEADER_LEN {
                    p[8] ^= 0x5a;
                    if let Ok(mut v) = volley_wire::Packet::new_checked(&mut p[..]) {
                        v.fill_checksum();
                    }
                }
                p
            }
            // Another protocol (an IPv4 header, say).
            2 => {
                let mut p = pkt.to_vec();
                if !p.is_empty() {
                    p[0] = 0x45;
                }
                p
            }
            // Truncated.
            _ => pkt[..(self.next() as usize % pkt.len().max(1))].to_vec(),
        }
    }
}

impl<D: Device> Device for FaultDevice<D> {
    fn kind(&self) -> String {
        format!("{}+faults", self.inner.kind())
    }
    fn max_packet(&self) -> usize {
        self.inner.max_packet()
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
        let mut arrived: Vec<Vec<u8>> = Vec::new();
        self.inner.receive(now, &mut |p| arrived.push(p.to_vec()))?;
        let mut n = 0;
        for mut pkt in arrived {
            if self.chance(self.faults.junk) {
                self.injected += 1;
                let mut j = self.junk_of(&pkt);
                f(&mut j);
            }
            if self.chance(self.faults.loss) {
                self.dropped += 1;
                continue;
            }
            if self.chance(self.faults.corrupt) && !pkt.is_empty() {
                self.corrupted += 1;
                let i = (self.next() as usize) % pkt.len();
                pkt[i] ^= 1 << (self.next() % 8);
            }
            if self.chance(self.faults.dup) {
                self.duplicated += 1;
                let d = self.faults.delay_ns + self.next() % (self.faults.delay_ns + 50_000);
                self.hold(now + d, pkt.clone());
            }
            let mut due = now + self.faults.delay_ns;
            if self.chance(self.faults.reorder) {
                self.reordered += 1;
                due += self.next() % (self.faults.delay_ns + 200_000);
            }
            if due <= now {
                f(&mut pkt);
                n += 1;
            } else {
                self.hold(due, pkt);
            }
        }
        while self.held.peek().is_some_and(|Reverse((t, ..))| *t <= now) {
            let Reverse((_, _, mut pkt)) = self.held.pop().expect("peeked");
            f(&mut pkt);
            n += 1;
        }
        Ok(n)
    }

    fn transmit(&mut self, fill: &mut Fill<'_>) -> io::Result<usize> {
        self.inner.transmit(fill)
    }

    fn offload(&self) -> Option<String> {
        self.inner.offload()
    }

    fn next_due(&self) -> Option<u64> {
        let mine = self.held.peek().map(|Reverse((t, ..))| *t);
        match (mine, self.inner.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut v = self.inner.counters();
        v.extend([
            ("fault_dropped", self.dropped),
            ("fault_duplicated", self.duplicated),
            ("fault_reordered", self.reordered),
            ("fault_corrupted", self.corrupted),
            ("fault_injected", self.injected),
        ]);
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_counter_a_device_reports_is_in_the_table() {
        let udp = crate::udp::UdpDevice::open(std::net::Ipv4Addr::LOCALHOST, 1500).unwrap();
        let dev = FaultDevice::new(udp, "loss=0.1".parse().unwrap());
        let names = dev.counters();
        assert!(names.len() >= 6, "{names:?}");
        for (name, _) in names {
            assert!(
                crate::DEVICE_COUNTERS.iter().any(|(n, _, _)| *n == name),
                "{name} is missing from DEVICE_COUNTERS"
            );
        }
    }

    #[test]
    fn faults_parse_and_errors_name_the_fix() {
        let f: Faults = "loss=0.01, dup=0.5,delay_us=200,seed=9".parse().unwrap();
        assert_eq!((f.loss, f.dup, f.delay_ns, f.seed), (0.01, 0.5, 200_000, 9));
        assert!("loss=2"
            .parse::<Faults>()
            .unwrap_err()
            .contains("between 0 and 1"));
        assert!("lose=0.1"
            .parse::<Faults>()
            .unwrap_err()
            .contains("the faults are"));
    }
}
