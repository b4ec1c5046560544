//! How a waiting operation waits once a pass found nothing: busy-polling, spinning then
//! sleeping on the doorbell, or sleeping at once, and noticing a peer that died.

use crate::config::WaitMode;
use crate::counters::Counter;
use crate::error::RecvError;
use crate::world::World;
use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The shortest spin of a wait expected to be short: so that a wait a few times longer than
/// usual does not pay a sleep. In a ring every rank's delay lengthens every later wait, and a
/// sleep's wake-up (several microseconds, far more on a halted virtual CPU) is such a delay, so
/// sleeps breed sleeps: on the 16-core server a ring of 16 ranks, a core each, slept in 1-2% of
/// its waits with 20 us (0.95-1.57 us per hop), 0.05-0.24% with 100 us (0.62-0.73, busy-polling
/// 0.56-0.81). A rank whose waits last milliseconds still spins this long only once: the average
/// passes the spin limit after one such wait (10 ms idle waits: 0.40% of a core).
const MIN_SPIN: Duration = Duration::from_micros(100);
// Where the host runs more ranks than it has CPUs a wait spins at most
// `Config::spin_oversubscribed` (200 us up to 4 ranks a CPU, none beyond: only its first 64
// passes, see config.rs for the figures): with many ranks a CPU a spinning rank holds a CPU the
// rank it waits for may need (even yielding at every pass), and a sleeping one leaves it to the
// runnable ones. 2-core VM, MPI ring of 64 ranks, 3 runs each: 13.5-14.2 us per hop spinning up
// to 500 us, 11.1-11.4 up to 20; of 16 ranks 8.8 and 8.7. With few ranks a CPU the one waited
// for runs soon, and a sleep's wake-up costs more: 16-core server, ring of 64 ranks, 12.1 us per
// hop with 20 us, 3.7 with 200.
/// The spin of a wait expected to be longer than the spin limit: long enough for a message
/// already on its way, then sleep.
const SHORT_SPIN: Duration = Duration::from_micros(2);

/// How long the recent waits of one endpoint (or of the world's own operations) lasted: an
/// exponentially weighted average, in nanoseconds (0: none yet). The spin-then-block mode reads
/// it to decide how long to spin before sleeping, as adaptive mutexes and Go's scheduler learn
/// from recent waits: waits that have been short are spun through (a sleep and its wake-up cost
/// more than they do), waits that have been long are slept through almost at once (spinning
/// would only burn the core). Relaxed: two threads waiting on one endpoint may each lose the
/// other's update, which only makes the average a little staler.
#[derive(Default, Debug)]
pub(crate) struct WaitHistory(AtomicU64);

impl WaitHistory {
    /// How long the next wait spins before it sleeps, with `cap` the most it may.
    pub(crate) fn spin_for(&self, cap: Duration) -> Duration {
        let avg = Duration::from_nanos(self.0.load(Ordering::Relaxed));
        if avg.is_zero() {
            cap
        } else if avg * 4 <= cap {
            (avg * 4).max(MIN_SPIN).min(cap)
        } else if avg <= cap {
            cap
        } else {
            SHORT_SPIN.min(cap)
        }
    }

    /// Adds a wait of `waited` (counted as at most four times `cap`: one long wait must not make
    /// the next many short ones sleep).
    pub(crate) fn record(&self, waited: Duration, cap: Duration) {
        let d = waited.min(cap * 4).as_nanos() as i64;
        let avg = self.0.load(Ordering::Relaxed) as i64;
        let next = if avg == 0 { d } else { avg + (d - avg) / 4 };
        self.0.store(next.max(1) as u64, Ordering::Relaxed);
    }

    #[cfg(test)]
    pub(crate) fn average(&self) -> Duration {
        Duration::from_nanos(self.0.load(Ordering::Relaxed))
    }
}

thread_local! {
    /// This thread's idle hook (see [`set_idle_hook`]), and whether it is running.
    static IDLE_HOOK: Cell<Option<fn()>> = const { Cell::new(None) };
    static IN_HOOK: Cell<bool> = const { Cell::new(false) };
}

/// Sets (or, with None, clears) a face's hook that every wait of this thread calls between its
/// passes. The MPI face sets it while non-blocking collectives are in flight: their steps are
/// the face's own state machines, which only it can move, and MPI's progress rule says a rank
/// blocked in a receive, a probe, a send or a blocking collective must not stop them (another
/// rank may wait for their next step before it sends what this one waits for). While a hook
/// is set, waits poll, giving the CPU away at every pass, instead of sleeping. A wait inside
/// the hook does not call it again.
pub fn set_idle_hook(hook: Option<fn()>) {
    IDLE_HOOK.set(hook);
}

/// Whether this thread has an idle hook set.
#[inline(always)]
pub(crate) fn idle_hook_set() -> bool {
    IDLE_HOOK.get().is_some()
}

/// Runs this thread's idle hook, unless it is running already.
#[cold]
#[inline(never)]
pub(crate) fn run_idle_hook() {
    if let Some(hook) = IDLE_HOOK.get() {
        if !IN_HOOK.replace(true) {
            hook();
            IN_HOOK.set(false);
        }
    }
}

/// How a receive waits after a pass over the rings found nothing.
pub(crate) struct Waiter<'h> {
    pub(crate) mode: WaitMode,
    pub(crate) spins: u32,
    /// When the wait had lasted 64 passes (spin-then-block only: the wait being learned).
    pub(crate) since: Option<Instant>,
    /// How long this wait spins, from `history` (spin-then-block only).
    limit: Duration,
    pub(crate) blocking: bool,
    history: &'h WaitHistory,
}

impl<'h> Waiter<'h> {
    /// A waiter in `mode` that learns from and adds to `history`. Costs nothing until a pass
    /// finds nothing (a receive whose message is there never reads the clock).
    pub(crate) fn new(mode: WaitMode, history: &'h WaitHistory) -> Waiter<'h> {
        Waiter {
            mode,
            spins: 0,
            since: None,
            limit: Duration::ZERO,
            blocking: matches!(mode, WaitMode::Block),
            history,
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
        // The first empty pass, every 16th, and every one before a sleep ask whether anything
        // can still come: a dead peer is noticed within a few passes, and the passes between
        // cost one borrow of the engine instead of two (each a locked instruction).
        if self.blocking || self.spins.is_multiple_of(16) {
            if let Some(err) = w.dead_end(port, from) {
                self.finish(w);
                return Err(err);
            }
        }
        self.pause(w)
    }

    /// Waits a little (or sleeps, depending on the mode) before the next pass.
    pub(crate) fn pause(&mut self, w: &World) -> Result<(), RecvError> {
        self.spins = self.spins.wrapping_add(1);
        if idle_hook_set() {
            // A face's operations to move on (see `set_idle_hook`): now and then, and at every
            // pass where this wait would sleep, which it does not while they are in flight.
            if self.blocking || self.spins.is_multiple_of(16) {
                run_idle_hook();
            }
            if self.blocking {
                volley_sys::yield_now();
                return Ok(());
            }
        }
        if self.blocking {
            return self.block(w);
        }
        // More ranks than CPUs: the rank we wait for may be waiting for this CPU, so give it
        // away often (`Config::yield_every`); otherwise now and then (a CPU shared with other
        // work).
        let yield_every = w.inner.cfg.yield_every;
        match self.mode {
            WaitMode::BusyPoll => {
                if self.spins.is_multiple_of(yield_every) {
                    volley_sys::yield_now();
                } else {
                    std::hint::spin_loop();
                }
            }
            WaitMode::SpinThenBlock(cap) => {
                if self.spins.is_multiple_of(yield_every) {
                    volley_sys::yield_now();
                } else {
                    std::hint::spin_loop();
                }
                // The clock is read every 64 passes only: a wait that ends sooner (most, in a
                // ping-pong) never reads it.
                if self.spins.is_multiple_of(64) {
                    let now = Instant::now();
                    let since = match self.since {
                        Some(t) => t,
                        None => {
                            let cap = if w.inner.cfg.oversubscribed {
                                cap.min(w.inner.cfg.spin_oversubscribed)
                            } else {
                                cap
                            };
                            self.limit = self.history.spin_for(cap);
                            *self.since.insert(now)
                        }
                    };
                    if now - since >= self.limit {
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
        let woke = match w.inner.net.as_ref() {
            None => volley_sys::poll_readable(fd, timeout),
            Some(net) => {
                // Packets, a doorbell, or the protocol's next timer, whichever comes first.
                let (nfd, due) = {
                    let n = net.borrow_mut();
                    (n.fd(), n.next_deadline_in())
                };
                let t = (timeout.as_nanos() as u64).min(due.unwrap_or(u64::MAX));
                let ready = volley_sys::net::poll_any(&[fd, nfd], Some(t));
                // Woken by packets, or slept until the protocol's timer: the network is pumped
                // here, whatever the caller's pass looks at. A receive from a rank of this host
                // looks at the rings only, so packets left unread kept the socket readable and
                // every sleep returned at once: with 62 ranks waiting so on 2 cores, a
                // ping-pong between the other two took 0.5-9 ms a hop instead of 6 us.
                let socket_ready = ready & (1 << 1) != 0; // bit k: the k-th descriptor
                if socket_ready || due.is_some_and(|d| d <= t) {
                    net.borrow_mut().pump();
                }
                ready != 0
            }
        };
        // Awake: stop asking senders for wake-ups and let the caller look. Most wake-ups bring
        // what it waits for; if not, the next call arms again (draining the doorbell first,
        // where a sender rang it) before it sleeps. Arming at once, as before, cost every wake-up
        // a second arm (with its membarrier) after the wait was over.
        let mut e = w.eng();
        if woke {
            e.note_woken();
        }
        e.disarm();
        Ok(())
    }

    pub(crate) fn finish(&mut self, w: &World) {
        w.eng().disarm();
    }
}

/// What a wait that ended within its first 64 passes counts as (it read no clock).
const BRIEF_WAIT: Duration = Duration::from_nanos(500);

impl Drop for Waiter<'_> {
    /// The wait is over (whatever ended it): the history learns how long it took.
    fn drop(&mut self) {
        if let WaitMode::SpinThenBlock(cap) = self.mode {
            match self.since {
                Some(t) => self.history.record(t.elapsed(), cap),
                None if self.spins > 0 => self.history.record(BRIEF_WAIT, cap),
                None => {}
            }
        }
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

#[cfg(test)]
mod tests {
    use super::*;

    const CAP: Duration = Duration::from_micros(500);

    #[test]
    fn the_first_wait_spins_the_limit() {
        assert_eq!(WaitHistory::default().spin_for(CAP), CAP);
    }

    #[test]
    fn short_waits_spin_about_four_times_their_length_and_never_less_than_a_wake_up() {
        let h = WaitHistory::default();
        for _ in 0..20 {
            h.record(Duration::from_micros(40), CAP);
        }
        assert_eq!(h.spin_for(CAP), Duration::from_micros(160));
        for _ in 0..40 {
            h.record(Duration::from_micros(1), CAP);
        }
        assert_eq!(h.spin_for(CAP), MIN_SPIN);
    }

    #[test]
    fn long_waits_sleep_almost_at_once_and_one_long_wait_is_soon_forgotten() {
        let h = WaitHistory::default();
        for _ in 0..20 {
            h.record(Duration::from_secs(1), CAP);
        }
        assert_eq!(h.spin_for(CAP), SHORT_SPIN);
        // Counted as at most 4x the limit: a few short waits bring spinning back.
        assert!(h.average() <= CAP * 4);
        for _ in 0..8 {
            h.record(Duration::from_micros(20), CAP);
        }
        assert!(h.spin_for(CAP) > SHORT_SPIN, "{:?}", h.average());
        // Waits between a quarter of the limit and the limit spin the whole limit.
        let h = WaitHistory::default();
        h.record(Duration::from_micros(400), CAP);
        assert_eq!(h.spin_for(CAP), CAP);
    }
}
