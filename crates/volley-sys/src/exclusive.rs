//! [`Exclusive`]: a cell that one thread at a time borrows, for state with a single owner that
//! may move between threads.
//!
//! A `Mutex` waits when the value is taken; `Exclusive` never waits: a second borrow while the
//! first is alive fails at once. That fits progress with one owner at a time (MPI's
//! MPI_THREAD_SERIALIZED): a failed borrow is a caller that broke the contract, not contention
//! to wait out. The cost of a borrow is one atomic swap and the release one plain store, where a
//! mutex pays two read-modify-write instructions; no system call either way.

use std::cell::UnsafeCell;
use std::ops::{Deref, DerefMut};
use std::sync::atomic::{AtomicBool, Ordering};

pub struct Exclusive<T> {
    busy: AtomicBool,
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard exists at a time
// (the swap in try_borrow_mut), so sharing the cell shares no `&T` between threads: `T: Send` is
// enough, as for Mutex.
unsafe impl<T: Send> Sync for Exclusive<T> {}
// SAFETY: moving the cell moves the value; T: Send allows that.
unsafe impl<T: Send> Send for Exclusive<T> {}

impl<T> Exclusive<T> {
    pub const fn new(value: T) -> Exclusive<T> {
        Exclusive {
            busy: AtomicBool::new(false),
            value: UnsafeCell::new(value),
        }
    }

    /// The value, or None if a borrow is alive (on this thread or another).
    #[inline]
    pub fn try_borrow_mut(&self) -> Option<ExclusiveGuard<'_, T>> {
        // SYNC: Acquire; pairs with the Release store in ExclusiveGuard::drop, so what the last
        // owner wrote is visible to the next one, whichever thread it runs on.
        if self.busy.swap(true, Ordering::Acquire) {
            return None;
        }
        Some(ExclusiveGuard { cell: self })
    }

    /// The value. Panics with `why` if a borrow is alive.
    #[inline]
    #[track_caller]
    pub fn borrow_mut(&self) -> ExclusiveGuard<'_, T> {
        match self.try_borrow_mut() {
            Some(g) => g,
            None => already_borrowed(),
        }
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
        // SYNC: Release; pairs with the Acquire swap in try_borrow_mut.
        self.cell.busy.store(false, Ordering::Release);
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
}
