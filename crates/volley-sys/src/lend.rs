//! Memory lent to volley for the length of a request: the one place where a non-blocking
//! operation on the caller's buffer becomes sound.
//!
//! A non-blocking send or receive on the caller's memory (MPI_Isend, MPI_Irecv, a C
//! `volley_isend`) hands the engine a pointer that it reads or writes later, after the call that
//! gave it has returned. Two ways to make that safe:
//!
//! - [`RawBuf::new`] / [`RawBufMut::new`] are `unsafe`: the caller (the C and MPI faces) promises
//!   the memory stays valid and untouched until the request completes, which is exactly the
//!   contract MPI states for its requests.
//! - [`scope`] lends Rust borrows. Forgetting a request (`mem::forget`) would end a borrow while
//!   the engine still holds the pointer, so the scope counts what it lent: every [`RawBuf`] made
//!   by a [`Lender`] gives its count back when the engine drops it, and `scope` does not return
//!   (nor unwind) until the count is zero, calling the caller's `settle` to make progress
//!   meanwhile. Nothing the caller does can end a borrow early; the worst a leak can do is make
//!   `scope` wait for ever, never read freed memory. This is `std::thread::scope`'s argument.

use std::marker::PhantomData;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Where a lent buffer reports that the engine is done with it.
struct Ticket(Option<NonNull<AtomicUsize>>);

impl Ticket {
    fn settle(&mut self) {
        if let Some(count) = self.0.take() {
            // SAFETY: the counter lives in `scope`'s frame, which does not return until every
            // ticket has settled (the count is zero), so it outlives this ticket.
            // SYNC: Release; pairs with the Acquire in `scope`'s wait: the engine's last access to
            // the buffer happens before the scope lets the borrow end.
            unsafe { count.as_ref() }.fetch_sub(1, Ordering::Release);
        }
    }
}

/// Read-only memory lent to the engine (the data of a non-blocking send). Dropping it ends the
/// loan.
pub struct RawBuf {
    ptr: NonNull<u8>,
    len: usize,
    ticket: Ticket,
}

// SAFETY: the bytes are only read, and the constructors' contracts make the memory valid and
// unchanged wherever the buffer goes until it is dropped.
unsafe impl Send for RawBuf {}
// SAFETY: as above; shared access only reads.
unsafe impl Sync for RawBuf {}

impl RawBuf {
    /// Lends `len` bytes at `ptr` (null is allowed when `len` is 0).
    ///
    /// # Safety
    /// The `len` bytes at `ptr` must be readable and must not be written by anyone until the
    /// returned value is dropped (the request that took it has completed, failed or been
    /// cancelled). For an MPI or C face this is the standard's rule for a send buffer.
    pub unsafe fn new(ptr: *const u8, len: usize) -> RawBuf {
        RawBuf {
            ptr: NonNull::new(ptr as *mut u8).unwrap_or(NonNull::dangling()),
            len: if ptr.is_null() { 0 } else { len },
            ticket: Ticket(None),
        }
    }

    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: by the constructors' contracts the memory is valid and unchanged until drop.
        unsafe { std::slice::from_raw_parts(self.ptr.as_ptr(), self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for RawBuf {
    fn drop(&mut self) {
        self.ticket.settle();
    }
}

/// Writable memory lent to the engine (the buffer of a non-blocking receive). Dropping it ends the
/// loan.
pub struct RawBufMut {
    ptr: NonNull<u8>,
    len: usize,
    ticket: Ticket,
}

// SAFETY: the constructors' contracts give the holder exclusive access until drop.
unsafe impl Send for RawBufMut {}
// SAFETY: shared access (`&RawBufMut`) only reads the length.
unsafe impl Sync for RawBufMut {}

impl RawBufMut {
    /// Lends `len` writable bytes at `ptr` (null is allowed when `len` is 0).
    ///
    /// # Safety
    /// The `len` bytes at `ptr` must be writable, and nobody else may read or write them until the
    /// returned value is dropped (the request that took it has completed, failed or been
    /// cancelled). For an MPI or C face this is the standard's rule for a receive buffer.
    pub unsafe fn new(ptr: *mut u8, len: usize) -> RawBufMut {
        RawBufMut {
            ptr: NonNull::new(ptr).unwrap_or(NonNull::dangling()),
            len: if ptr.is_null() { 0 } else { len },
            ticket: Ticket(None),
        }
    }

    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: by the constructors' contracts the holder has exclusive access until drop.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.as_ptr(), self.len) }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for RawBufMut {
    fn drop(&mut self) {
        self.ticket.settle();
    }
}

/// Lends borrows that live at least as long as the [`scope`] that made it.
pub struct Lender<'scope, 'env: 'scope> {
    count: &'scope AtomicUsize,
    // Invariant in both lifetimes, as std::thread::Scope: 'env cannot be shrunk to let a shorter
    // borrow in.
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

impl<'scope, 'env> Lender<'scope, 'env> {
    fn ticket(&self) -> Ticket {
        // SYNC: Relaxed; only the count matters, and the Release in Ticket::settle orders the
        // engine's accesses before the scope's Acquire.
        self.count.fetch_add(1, Ordering::Relaxed);
        Ticket(Some(NonNull::from(self.count)))
    }

    /// Lends `data` for reading until the returned buffer is dropped.
    pub fn lend(&self, data: &'env [u8]) -> RawBuf {
        RawBuf {
            ptr: NonNull::from(data).cast(),
            len: data.len(),
            ticket: self.ticket(),
        }
    }

    /// Lends `data` for writing until the returned buffer is dropped.
    pub fn lend_mut(&self, data: &'env mut [u8]) -> RawBufMut {
        RawBufMut {
            ptr: NonNull::from(&mut *data).cast(),
            len: data.len(),
            ticket: self.ticket(),
        }
    }
}

/// Runs `f` with a [`Lender`]; before returning (or unwinding), calls `settle` until every
/// buffer the lender made has been dropped. `settle` makes progress (completes or fails the
/// requests holding lent buffers); it is called at least once if anything is still lent.
pub fn scope<'env, F, T>(settle: impl FnMut(), f: F) -> T
where
    F: for<'scope> FnOnce(&'scope Lender<'scope, 'env>) -> T,
{
    struct Wait<'a, S: FnMut()> {
        count: &'a AtomicUsize,
        settle: S,
    }
    impl<S: FnMut()> Drop for Wait<'_, S> {
        fn drop(&mut self) {
            // SYNC: Acquire; pairs with the Release in Ticket::settle.
            while self.count.load(Ordering::Acquire) > 0 {
                (self.settle)();
            }
        }
    }
    let count = AtomicUsize::new(0);
    let wait = Wait {
        count: &count,
        settle,
    };
    let lender = Lender {
        count: wait.count,
        _scope: PhantomData,
        _env: PhantomData,
    };
    f(&lender)
    // `wait` drops here, after `f`, on return and on unwind alike.
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::RefCell;

    #[test]
    fn scope_waits_until_every_lent_buffer_is_dropped() {
        let data = vec![7u8; 16];
        let mut out = vec![0u8; 16];
        let held: RefCell<Vec<RawBuf>> = RefCell::new(Vec::new());
        let held_mut: RefCell<Vec<RawBufMut>> = RefCell::new(Vec::new());
        let mut settles = 0;
        scope(
            || {
                // The "engine" finishes one loan per call: copy, then drop.
                settles += 1;
                if let Some(mut m) = held_mut.borrow_mut().pop() {
                    let src = held.borrow_mut().pop().expect("lent together");
                    m.as_mut_slice().copy_from_slice(src.as_slice());
                }
            },
            |l| {
                held.borrow_mut().push(l.lend(&data));
                held_mut.borrow_mut().push(l.lend_mut(&mut out));
            },
        );
        assert_eq!(settles, 1, "one settle call finished the one pair of loans");
        assert_eq!(out, data, "the copy happened before the borrow ended");
    }

    #[test]
    fn scope_settles_on_unwind_too() {
        let data = [1u8; 4];
        let held: RefCell<Option<RawBuf>> = RefCell::new(None);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            scope(
                || {
                    held.borrow_mut().take();
                },
                |l| {
                    *held.borrow_mut() = Some(l.lend(&data));
                    panic!("user code failed with a loan outstanding");
                },
            )
        }));
        assert!(r.is_err());
        assert!(
            held.borrow().is_none(),
            "the loan was settled before unwinding"
        );
    }

    #[test]
    fn raw_buffers_from_pointers() {
        let mut v = [1u8, 2, 3];
        // SAFETY: v outlives both buffers and is not touched while they live.
        let b = unsafe { RawBuf::new(v.as_ptr(), 3) };
        assert_eq!(b.as_slice(), &[1, 2, 3]);
        drop(b);
        // SAFETY: as above.
        let mut m = unsafe { RawBufMut::new(v.as_mut_ptr(), 3) };
        m.as_mut_slice()[0] = 9;
        drop(m);
        assert_eq!(v[0], 9);
        // SAFETY: a null pointer with any length is an empty buffer.
        let e = unsafe { RawBuf::new(std::ptr::null(), 10) };
        assert!(e.is_empty());
    }
}
