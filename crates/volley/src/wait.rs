//! How a waiting operation waits once a pass found nothing: busy-polling, spinning then
//! sleeping on the doorbell, or sleeping at once, and noticing a peer that died.

use crate::config::WaitMode;
use crate::counters::Counter;
use crate::error::RecvError;
use crate::world::World;
use std::time::Instant;

/// How a receive waits after a pass over the rings found nothing.
pub(crate) struct Waiter {
    pub(crate) mode: WaitMode,
    pub(crate) spins: u32,
    pub(crate) since: Option<Instant>,
    pub(crate) blocking: bool,
}

impl Waiter {
    pub(crate) fn new(mode: WaitMode) -> Waiter {
        Waiter {
            mode,
            spins: 0,
            since: None,
            blocking: matches!(mode, WaitMode::Block),
        }
    }

    /// Called after a pass (that began with refresh_fates) found nothing for `port`: fails if
    /// nothing more can come, otherwise waits a little (or sleeps) before the next pass.
    pub(crate) fn idle(
        &mut self,
        w: &World,
        port: u32,
        from: Option<usize>,
    ) -> Result<(), RecvError> {
        if let Some(err) = w.dead_end(port, from) {
            self.finish(w);
            return Err(err);
        }
        self.pause(w)
    }

    /// Waits a little (or sleeps, depending on the mode) before the next pass.
    pub(crate) fn pause(&mut self, w: &World) -> Result<(), RecvError> {
        self.spins = self.spins.wrapping_add(1);
        if self.blocking {
            return self.block(w);
        }
        match self.mode {
            WaitMode::BusyPoll => {
                if self.spins.is_multiple_of(1024) {
                    volley_sys::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            WaitMode::SpinThenBlock(limit) => {
                std::hint::spin_loop();
                if self.spins.is_multiple_of(128) {
                    let now = Instant::now();
                    let since = *self.since.get_or_insert(now);
                    if now - since >= limit {
                        w.eng().count(Counter::SpinsEndedInSleep, 1);
                        self.blocking = true;
                    }
                }
            }
            WaitMode::Block => unreachable!("blocking is set for Block"),
        }
        Ok(())
    }

    pub(crate) fn block(&mut self, w: &World) -> Result<(), RecvError> {
        let mut e = w.eng();
        if !e.is_armed() {
            // Arm, then let the caller poll once more before we sleep.
            e.arm();
            return Ok(());
        }
        e.count(Counter::Sleeps, 1);
        let fd = e.doorbell().raw();
        let timeout = w.inner.cfg.liveness_poll;
        drop(e);
        match w.inner.net.as_ref() {
            None => {
                volley_sys::poll_readable(fd, timeout);
            }
            Some(net) => {
                // Packets, a doorbell, or the protocol's next timer, whichever comes first.
                let (nfd, due) = {
                    let n = net.borrow_mut();
                    (n.fd(), n.next_deadline_in())
                };
                let t = (timeout.as_nanos() as u64).min(due.unwrap_or(u64::MAX));
                volley_sys::net::poll_any(&[fd, nfd], Some(t));
            }
        }
        let mut e = w.eng();
        e.drain_doorbell();
        // A sender that woke us cleared the flag; set it again before the next poll.
        e.arm();
        Ok(())
    }

    pub(crate) fn finish(&mut self, w: &World) {
        w.eng().disarm();
    }
}

impl World {
    /// Why nothing more can arrive on `port` from `from` (a job rank; None: any source), if so.
    /// Call it after a pass that began with refresh_fates found nothing: the fates it reads are
    /// then older than the pass, so a peer's last message cannot be missed.
    pub(crate) fn dead_end(&self, port: u32, from: Option<usize>) -> Option<RecvError> {
        let mut e = self.eng();
        // `from` is a job rank; the rings and fates are indexed by local rank.
        let local = from.map(|r| self.inner.g2l[r]);
        self.net_dead_end(from)
            .or_else(|| match local {
                Some(None) => None, // on another host: the network says when it is lost
                Some(Some(li)) => e.recv_dead_end(port, Some(li)),
                None => e.recv_dead_end(port, None),
            })
            .or_else(|| {
                // A message half gathered from a rank that is gone will never be completed.
                e.partial_dead_end(port).map(RecvError::PeerLost)
            })
    }
}
