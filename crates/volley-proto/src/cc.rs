//! Congestion control: how many packets a sender keeps in flight to one peer, so that volley
//! flows share a bottleneck with each other and with kernel TCP, and a flow alone fills it.
//!
//! The controller is AIMD with slow start, driven by the loss signals the engine already has
//! (RACK's fast loss detection and the retransmission timeout), in packets:
//!
//! - **Start**: 10 packets (RFC 6928's initial window), doubling every round trip (slow start:
//!   one more per packet acknowledged) until the first loss.
//! - **Loss** (a congestion event: the first loss among packets sent after the last reduction,
//!   so one burst of drops reduces once): the window becomes 0.7 of itself (CUBIC's beta, RFC
//!   9438) and slow start ends there.
//! - **Congestion avoidance**: one packet more per window acknowledged (one per round trip).
//! - **Timeout** (the retransmission timer fired: the path may have changed a lot): the window
//!   falls to 2 packets and slow start climbs back to half the old window.
//! - The window grows only while the flow uses at least half of it (RFC 7661's idea): a flow
//!   limited by its application does not build a window it has never tested.
//!
//! Why this and not CUBIC's cubic growth or BBR: on a cluster's LAN the round trip is tens of
//! microseconds and the bandwidth-delay product tens of packets, where CUBIC itself runs in its
//! "TCP-friendly" region (AIMD) and BBR's bandwidth probing cycles last more than the transfers;
//! AIMD with beta 0.7 and one packet per round trip is a little more aggressive than Reno and
//! about as aggressive as CUBIC there, so volley neither starves nor is starved by kernel TCP.
//! No ECN (UDP sockets would need IP_RECVTOS on every receive) and no pacing: a window's packets
//! leave as fast as the device takes them, in bursts of at most half the window (`Peer::burst`:
//! a device that joins packets into one kernel crossing cuts its runs there).
//!
//! Tried and not kept: telling random loss from congestion by the queue (TCP Veno: a loss with
//! fewer than 3 of the flow's packets queued, `cwnd * (rtt - min_rtt) / rtt`, keeps the window).
//! Under 1% random loss AIMD holds udp at 0.71x its loss-free stream (0.85x with congestion
//! control off). But on the 2-core VM's bridge 156 of 158 losses came with a queue even with the
//! least of the last 8 round trips for `rtt` (the receiver is the bottleneck there, and its
//! socket buffer a real standing queue), and in the simulator a window's unpaced burst (an ACK
//! every 8 packets, GSO runs of up to 64) reads as a queue of several packets by itself. A test
//! that works needs pacing first, or a loss-rate threshold alone (BBR's 2%), which would hold a
//! shared bottleneck at 2% loss and take TCP's share. `Config::congestion_control` off (VOLLEY_NET_CC=0)
//! keeps only the fixed window and the receiver's credit, for a dedicated network.

/// The window at the start, and after a long idle period is not reset (a cluster's flows are
/// bursty; the receiver's credit still bounds what a burst holds).
pub const INITIAL_WINDOW: f64 = 10.0;
/// The least window: two packets keep RACK's loss detection working.
pub const MIN_WINDOW: f64 = 2.0;
/// What a congestion event leaves of the window.
pub const BETA: f64 = 0.7;
/// Packets added per window acknowledged in congestion avoidance: 3(1 - beta)/(1 + beta), the
/// increase that makes AIMD with this beta as aggressive as Reno, and as CUBIC in its
/// TCP-friendly region (RFC 9438, section 4.3).
pub const ALPHA: f64 = 3.0 * (1.0 - BETA) / (1.0 + BETA);

#[derive(Clone, Copy, Debug)]
pub(crate) struct Cc {
    on: bool,
    /// Packets in flight allowed.
    cwnd: f64,
    /// Slow start below this.
    ssthresh: f64,
    /// Losses of packets numbered below this belong to the event already answered.
    recovery: u64,
}

impl Cc {
    pub(crate) fn new(on: bool) -> Cc {
        Cc {
            on,
            cwnd: INITIAL_WINDOW,
            ssthresh: f64::INFINITY,
            recovery: 0,
        }
    }

    /// Whether one more packet may leave with `pipe` packets in flight.
    #[inline]
    pub(crate) fn allows(&self, pipe: u64) -> bool {
        !self.on || (pipe as f64) < self.cwnd
    }

    /// `n` packets newly acknowledged, with `pipe` packets in flight before they were.
    pub(crate) fn on_acked(&mut self, n: u64, pipe: u64) {
        if !self.on || n == 0 || (pipe as f64) * 2.0 < self.cwnd {
            return;
        }
        for _ in 0..n {
            if self.cwnd < self.ssthresh {
                self.cwnd += 1.0;
            } else {
                self.cwnd += ALPHA / self.cwnd;
            }
        }
    }

    /// Packet `seq` was found lost (not by the timer); `snd_nxt` is the next sequence number.
    /// Returns whether this was a new congestion event (the window was reduced).
    pub(crate) fn on_loss(&mut self, seq: u64, snd_nxt: u64) -> bool {
        if !self.on || seq < self.recovery {
            return false;
        }
        self.cwnd = (self.cwnd * BETA).max(MIN_WINDOW);
        self.ssthresh = self.cwnd;
        self.recovery = snd_nxt;
        true
    }

    /// The retransmission timer fired; returns whether the window was cut (congestion
    /// control is on).
    pub(crate) fn on_timeout(&mut self, snd_nxt: u64) -> bool {
        if !self.on {
            return false;
        }
        self.ssthresh = (self.cwnd / 2.0).max(MIN_WINDOW);
        self.cwnd = MIN_WINDOW;
        self.recovery = snd_nxt;
        true
    }

    /// Puts back the state `before` a retransmission timeout that turned out spurious (the
    /// packets it took for lost had arrived: their acknowledgements were late, not missing),
    /// as TCP's undo does (RFC 4015's response to Eifel detection): a peer descheduled for a
    /// few milliseconds is not a congested network, and a window of two packets after every
    /// such pause would cost far more than the pause.
    pub(crate) fn undo(&mut self, before: Cc) {
        *self = before;
    }

    /// Whether the controller limits the sender (else only the fixed window does).
    pub(crate) fn is_on(&self) -> bool {
        self.on
    }

    /// The window, in packets (for `describe` and tests).
    pub(crate) fn window(&self) -> f64 {
        self.cwnd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slow_start_doubles_then_a_loss_cuts_once_per_event_and_growth_turns_linear() {
        let mut c = Cc::new(true);
        // One round trip: a full window acknowledged doubles it.
        c.on_acked(10, 10);
        assert_eq!(c.window(), 20.0);
        // Two losses of one burst: one reduction.
        assert!(c.on_loss(100, 200));
        assert!(!c.on_loss(150, 200));
        assert!((c.window() - 14.0).abs() < 1e-9);
        // A window's worth acknowledged grows it by ALPHA packets.
        c.on_acked(14, 14);
        assert!((c.window() - (14.0 + ALPHA)).abs() < 0.05, "{}", c.window());
        // A loss after the recovery point is a new event.
        assert!(c.on_loss(200, 300));
        assert!((c.window() - (14.0 + ALPHA) * BETA).abs() < 0.05);
        assert!(c.on_timeout(400));
        assert_eq!(c.window(), MIN_WINDOW);
        assert!(!c.on_loss(399, 500), "a loss from before the timeout");
    }

    #[test]
    fn an_application_limited_flow_does_not_grow_and_off_means_off() {
        let mut c = Cc::new(true);
        c.on_acked(100, 2);
        assert_eq!(c.window(), INITIAL_WINDOW);
        assert!(c.allows(9) && !c.allows(10));
        let mut off = Cc::new(false);
        off.on_loss(0, 1);
        assert!(!off.on_timeout(1));
        assert!(off.allows(1 << 40));
    }
}
