//! Scratch buffers for the collectives, reused instead of allocated and zeroed per call.
//!
//! A reduction's temporary vector was `vec![0u8; len]` on every call: at 1 MiB that is a
//! megabyte zeroed (and often faulted in) for bytes that a receive overwrites at once. A
//! [`Scratch`] comes from a small per-thread list of kept buffers and goes back when dropped;
//! its bytes are whatever the last user left (the algorithms receive or copy into every byte
//! they read). A collective that runs while another holds a buffer (a non-blocking one in
//! flight) simply gets another. The list keeps at most [`KEEP`] buffers of [`KEEP_BYTES`] in
//! all per thread: the memory a rank keeps between collectives is bounded by that.

use std::cell::RefCell;
use std::ops::{Deref, DerefMut};

/// Buffers kept per thread.
const KEEP: usize = 4;
/// Bytes kept per thread, in all.
const KEEP_BYTES: usize = 64 << 20;

thread_local! {
    static KEPT: RefCell<Vec<Vec<u8>>> = const { RefCell::new(Vec::new()) };
}

/// `len` bytes of scratch (contents unspecified), given back to the thread's list on drop.
pub struct Scratch {
    v: Vec<u8>,
    len: usize,
}

impl Scratch {
    pub fn new(len: usize) -> Scratch {
        let mut v = KEPT
            .try_with(|k| {
                let mut k = k.borrow_mut();
                // The smallest kept buffer that is big enough, else the largest (grown).
                let i = k
                    .iter()
                    .enumerate()
                    .filter(|(_, b)| b.len() >= len)
                    .min_by_key(|(_, b)| b.len())
                    .or_else(|| k.iter().enumerate().max_by_key(|(_, b)| b.len()))
                    .map(|(i, _)| i);
                i.map(|i| k.swap_remove(i))
            })
            .ok()
            .flatten()
            .unwrap_or_default();
        if v.len() < len {
            v.resize(len, 0);
        }
        Scratch { v, len }
    }
}

impl Deref for Scratch {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.v[..self.len]
    }
}

impl DerefMut for Scratch {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.v[..self.len]
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let v = std::mem::take(&mut self.v);
        if v.is_empty() || v.len() > KEEP_BYTES {
            return;
        }
        let _ = KEPT.try_with(|k| {
            let mut k = k.borrow_mut();
            let kept: usize = k.iter().map(Vec::len).sum();
            if k.len() < KEEP && kept + v.len() <= KEEP_BYTES {
                k.push(v);
            } else if let Some((i, _)) = k
                .iter()
                .enumerate()
                .min_by_key(|(_, b)| b.len())
                .filter(|(_, b)| b.len() < v.len() && kept - b.len() + v.len() <= KEEP_BYTES)
            {
                // A larger buffer replaces the smallest kept one.
                k[i] = v;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scratch_has_its_length_is_reused_and_stays_within_the_bound() {
        let a = Scratch::new(1000);
        assert_eq!(a.len(), 1000);
        let p = a.as_ptr();
        drop(a);
        // The same buffer again, for the same size or less.
        let b = Scratch::new(500);
        assert_eq!((b.len(), b.as_ptr()), (500, p));
        // Held at once: distinct buffers.
        let c = Scratch::new(500);
        assert_ne!(c.as_ptr(), b.as_ptr());
        drop((b, c));
        let many: Vec<Scratch> = (0..10).map(|i| Scratch::new(1 << (10 + i))).collect();
        drop(many);
        KEPT.with(|k| {
            let k = k.borrow();
            assert!(k.len() <= KEEP);
            assert!(k.iter().map(Vec::len).sum::<usize>() <= KEEP_BYTES);
        });
        // Larger than the bound: not kept.
        drop(Scratch::new(KEEP_BYTES + 1));
        KEPT.with(|k| assert!(k.borrow().iter().all(|b| b.len() <= KEEP_BYTES)));
    }
}
