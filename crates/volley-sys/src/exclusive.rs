//! [`Exclusive`]: a cell that one thread at a time borrows, for state with a single owner that
//! may move between threads.
//!
//! A `Mutex` waits when the value is taken; `Exclusive` never waits: a second borrow while the
//! first is alive fails at once. That fits progress with one owner at a time (MPI's
//! MPI_THREAD_SERIALIZED): a failed borrow is a caller that broke the contract, not contention
//! to wait out. The cost of a borrow is one atomic compare-and-swap and the release one plain
//! store, where a mutex pays two read-modify-write instructions; no system call either way.
//!
//! One exception is waited out: a *keeper* ([`Exclusive::keep`]) may take the cell for a short
//! moment while its owner is away (volley's liveness thread answering the network while the
//! application computes). An owner that finds the cell kept spins until it is given back; an
//! owner that finds it borrowed by an owner panics as before.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicU8, Ordering};

const FREE: u8 = 0;
const OWNED: u8 = 1;
const KEPT: u8 = 2;

pub struct Exclusive<T> {
    /// FREE, OWNED (a borrow_mut guard lives) or KEPT (a keep guard lives).
    state: AtomicU8,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard exists at a time
// (the compare-and-swap in `take`), so sharing the cell shares no `&T` between threads: `T: Send` is
// enough, as for Mutex.
unsafe impl<T: Send> Sync for Exclusive<T> {}
// SAFETY: moving the cell moves the value; T: Send allows that.
unsafe impl<T: Send> Send for Exclusive<T> {}

impl<T> Exclusive<T> {
    pub const fn new(value: T) -> Exclusive<T> {
        Exclusive {
            state: AtomicU8::new(FREE),
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the cell from `FREE` to `to`; the state found otherwise.
    #[inline]
    fn take(&self, to: u8) -> Result<ExclusiveGuard<'_, T>, u8> {
        // SYNC: Acquire; pairs with the Release store in ExclusiveGuard::drop, so what the last
        // owner wrote is visible to the next one, whichever thread it runs on.
        self.state
            .compare_exchange(FREE, to, Ordering::Acquire, Ordering::Relaxed)
            .map(|_| ExclusiveGuard { cell: self })
    }

    /// The value, or None if a borrow is alive (on this thread or another).
    #[inline]
    pub fn try_borrow_mut(&self) -> Option<ExclusiveGuard<'_, T>> {
        self.take(OWNED).ok()
    }

    /// The value. Waits while a keeper has it (a short moment); panics if another borrow is
    /// alive.
    #[inline]
    #[track_caller]
    pub fn borrow_mut(&self) -> ExclusiveGuard<'_, T> {
        match self.take(OWNED) {
            Ok(g) => g,
            Err(KEPT) => self.wait_for_keeper(),
            Err(_) => already_borrowed(),
        }
    }

    #[cold]
    #[track_caller]
    fn wait_for_keeper(&self) -> ExclusiveGuard<'_, T> {
        let mut spins = 0u32;
        loop {
            match self.take(OWNED) {
                Ok(g) => return g,
                Err(KEPT) => {
                    spins += 1;
                    if spins.is_multiple_of(64) {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                Err(_) => already_borrowed(),
            }
        }
    }

    /// The value for a keeper, only if nobody has it now: a keeper never waits and never makes
    /// an owner fail, only wait (see the module's comment).
    #[inline]
    pub fn keep(&self) -> Option<ExclusiveGuard<'_, T>> {
        self.take(KEPT).ok()
    }

    /// The value, through the unique reference that proves no borrow is alive.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }
}

#[cold]
#[track_caller]
fn already_borrowed() -> ! {
    panic!(
        "volley: state borrowed twice at once: either two threads used one World at the same time \
         (a World is used by one thread at a time: serialise the calls, e.g. with a Mutex around \
         them) or volley re-entered itself (a bug: please report it)"
    )
}

/// A live borrow of an [`Exclusive`]; gives the value back on drop.
pub struct ExclusiveGuard<'a, T> {
    cell: &'a Exclusive<T>,
}

impl<T> Deref for ExclusiveGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one alive (see try_borrow_mut).
        unsafe { &*self.cell.value.get() }
    }
}

impl<T> DerefMut for ExclusiveGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one alive, and we hold it mutably.
        unsafe { &mut *self.cell.value.get() }
    }
}

impl<T> Drop for ExclusiveGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        // SYNC: Release; pairs with the Acquire compare-and-swap in `take`.
        self.cell.state.store(FREE, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn one_borrow_at_a_time_and_ownership_moves_between_threads() {
        let c = Arc::new(Exclusive::new(0u64));
        {
            let g = c.borrow_mut();
            assert!(c.try_borrow_mut().is_none(), "a second borrow must fail");
            drop(g);
        }
        // Hand the cell from thread to thread: each sees what the last one wrote.
        for _ in 0..8 {
            let c2 = c.clone();
            std::thread::spawn(move || *c2.borrow_mut() += 1)
                .join()
                .unwrap();
        }
        assert_eq!(*c.borrow_mut(), 8);
    }

    #[test]
    #[should_panic(expected = "one thread at a time")]
    fn a_second_borrow_panics_with_the_contract() {
        let c = Exclusive::new(1);
        let _g = c.borrow_mut();
        let _h = c.borrow_mut();
    }

    #[test]
    fn an_owner_waits_for_a_keeper_and_a_keeper_never_waits() {
        let c = Arc::new(Exclusive::new(0u64));
        let owned = c.borrow_mut();
        assert!(c.keep().is_none(), "a keeper does not take an owned cell");
        drop(owned);
        let kept = c.keep().expect("free");
        assert!(c.keep().is_none());
        let c2 = c.clone();
        let owner = std::thread::spawn(move || {
            // Finds the cell kept: waits, then sees what the keeper wrote.
            *c2.borrow_mut()
        });
        std::thread::sleep(std::time::Duration::from_millis(20));
        let mut kept = kept;
        *kept = 7;
        drop(kept);
        assert_eq!(owner.join().unwrap(), 7);
    }
}
