//! Waiting for something another process must do first (room in a full ring, a copy to finish).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// This process's host runs more ranks than it has CPUs (`Config::oversubscribed`, set when
/// the world starts): the process whose progress we wait for may be waiting for our CPU, so a
/// wait yields from the start instead of spinning first.
pub(crate) static OVERSUBSCRIBED: AtomicBool = AtomicBool::new(false);

/// Waiting for room in a full ring: spin briefly (the consumer is usually draining), then yield,
/// then sleep in short steps so that more ranks than cores still progress.
pub(crate) struct Backoff {
    since: Option<Instant>,
    n: u32,
}

impl Backoff {
    pub fn new() -> Backoff {
        Backoff { since: None, n: 0 }
    }

    pub fn reset(&mut self) {
        self.since = None;
        self.n = 0;
    }

    /// Snoozes, starting over first if anything moved in `w` since `seen`, in its rings or on
    /// its network (`World::moved`): a long transfer keeps polling instead of drifting into
    /// sleeps. A wait for a transfer to another host must count the network: counting the rings
    /// alone, it slept in 100 us steps after 2 ms while acknowledgements waited to be read.
    pub fn snooze_in(&mut self, w: &crate::world::World, seen: &mut u64) {
        let now = w.moved();
        if now != *seen {
            *seen = now;
            self.reset();
        }
        if crate::wait::idle_hook_set() && self.n.is_multiple_of(16) {
            crate::wait::run_idle_hook();
        }
        self.snooze();
    }

    pub fn snooze(&mut self) {
        self.n = self.n.wrapping_add(1);
        if self.n < 64 {
            std::hint::spin_loop();
            return;
        }
        let now = Instant::now();
        let waited = now - *self.since.get_or_insert(now);
        // Relaxed: set once before the world's first operation.
        let spin_for = if OVERSUBSCRIBED.load(Ordering::Relaxed) {
            Duration::ZERO
        } else {
            Duration::from_micros(50)
        };
        if waited < spin_for {
            std::hint::spin_loop();
        } else if waited < Duration::from_millis(2) {
            volley_sys::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}
