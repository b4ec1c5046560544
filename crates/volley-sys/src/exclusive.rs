//! [`Exclusive`]: a cell that one thread at a time borrows, for state with a single owner that
//! may move between threads.
//!
//! A `Mutex` waits when the value is taken; `Exclusive` never waits: a second borrow while the
//! first is alive fails at once. That fits progress with one owner at a time (MPI's
//! MPI_THREAD_SERIALIZED): a failed borrow is a caller that broke the contract, not contention
//! to wait out.
//!
//! One exception is waited out: a *keeper* ([`Exclusive::keep`]) may take the cell for a short
//! moment while its owner is away (volley's liveness thread answering the network while the
//! application computes). An owner that finds the cell kept spins until it is given back; an
//! owner that finds it borrowed by an owner panics as before.
//!
//! # What a borrow costs: biased ownership
//!
//! A plain cell ([`Exclusive::new`]) takes a borrow with one compare-and-swap and gives it back
//! with one store. A locked instruction is cheap on its own but waits until every earlier store
//! of the thread has reached its cache line: right after a message was written into a ring the
//! receiver is reading, that is a trip to the other core per message (on a 16-core server the
//! largest single cost of sending an 8-byte message, and what held the message rate down).
//!
//! A biased cell ([`Exclusive::biased`], the engine's and the MPI face's state) is owned, between
//! borrows, by the last thread that used it, which then borrows with plain loads and stores: it
//! marks itself inside in a flag of its own (one of [`SLOTS`] per cell, each given to one thread
//! for good, so that no other thread ever writes it; a thread is known by its thread pointer,
//! which a thread started after another ended may inherit, with its slots), and checks that nobody is taking the cell
//! away. Another thread takes the cell away (*revokes* the bias) by announcing it (`revoking`),
//! making every running thread of the process execute a full barrier (membarrier(2), private
//! expedited) and then reading the owner's flag: the asymmetric form of the store-buffering
//! handshake. Either the owner's mark came before its barrier, and the revoker sees it, or the
//! owner's check comes after, and the owner sees the announcement and backs off. The revoker
//! then holds the cell as a plain borrow, and the cell is biased to it when it gives it back.
//!
//! A revocation costs a system call (microseconds), so a cell whose ownership keeps moving
//! (more than [`MAX_MOVES`] revocations) stays plain for good, as does every cell where the
//! kernel offers no private expedited membarrier, and every cell when
//! `VOLLEY_EXCLUSIVE_BIAS=off` (for comparisons).

use std::cell::UnsafeCell;
use std::marker::PhantomData;
use std::num::NonZeroUsize;
use std::ops::{Deref, DerefMut};
use std::ptr::NonNull;
use std::sync::atomic::{compiler_fence, AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::OnceLock;

const FREE: u8 = 0;
const OWNED: u8 = 1;
const KEPT: u8 = 2;
/// The thread in `owner` has the cell, inside a borrow or not (see [`Slot::inside`]).
const BIASED: u8 = 3;

/// Threads a cell can be biased to over its life (one slot each, never given to another).
pub const SLOTS: usize = 8;
/// Revocations after which a cell stays plain.
pub const MAX_MOVES: u32 = 64;

/// One thread's place in a biased cell.
struct Slot {
    /// The thread's id (see `my_tid`), 0 while the slot is free. Set once.
    tid: AtomicU64,
    /// The thread is inside a borrow. Written only by that thread (or by whichever thread drops
    /// a guard it sent away).
    inside: AtomicBool,
}

impl Slot {
    const fn new() -> Slot {
        Slot {
            tid: AtomicU64::new(0),
            inside: AtomicBool::new(false),
        }
    }
}

// Aligned so that a guard is one word: the cell's address with how it was borrowed in the low
// bits (see `ExclusiveGuard`). A guard of several words was copied through the stack with
// narrow stores and a wide load, and a load that cannot be forwarded from the stores waits
// for every earlier store of the thread: the locked instruction's cost again.
#[repr(align(64))]
pub struct Exclusive<T> {
    /// FREE, OWNED (a plain borrow_mut guard lives), KEPT (a keep guard lives) or BIASED.
    state: AtomicU8,
    /// The cell may be biased.
    biasable: bool,
    /// 1 + the slot of the thread the cell is biased to; 0 when it is not biased.
    owner: AtomicU32,
    /// A thread is taking the bias away (see [`Exclusive::revoke`]).
    revoking: AtomicBool,
    /// Revocations so far.
    moves: AtomicU32,
    slots: [Slot; SLOTS],
    value: UnsafeCell<T>,
}

// SAFETY: the value is only reached through a guard, and at most one guard exists at a time
// (the compare-and-swap in `take`, or the biased handshake, see the module's comment), so
// sharing the cell shares no `&T` between threads: `T: Send` is enough, as for Mutex.
unsafe impl<T: Send> Sync for Exclusive<T> {}
// SAFETY: moving the cell moves the value; T: Send allows that.
unsafe impl<T: Send> Send for Exclusive<T> {}

/// This thread's id for biased cells: its thread pointer, where the platform's TLS ABI gives it
/// in a register (never 0, fixed for the thread's life, distinct among living threads).
///
/// Why not a `thread_local!` counter: in a shared library (volley's libmpi.so is a cdylib) every
/// access to a thread-local goes through `__tls_get_addr` (the general-dynamic model), a call
/// and a lookup on each of the three or four borrows an MPI call makes: 2% of an MPI ping-pong's
/// samples on the development VM, in the function alone. The thread pointer is one load.
///
/// A thread that starts after another ended may get its thread pointer (glibc reuses thread
/// stacks, and the control block with them), and with it the old thread's slots: that is as if
/// the old thread went on, which the cells allow (a slot's flag is written by the thread that
/// owns the slot, or by whichever thread drops a guard sent to it, never by two at once: a
/// borrow needs the flag clear first).
#[inline(always)]
fn my_tid() -> u64 {
    #[cfg(all(target_arch = "x86_64", target_os = "linux"))]
    {
        let tp: u64;
        // SAFETY: the x86-64 ELF TLS ABI keeps the thread control block's address in its first
        // word, at %fs:0, in every thread of the process; reading it writes nothing, and its
        // value never changes while the thread runs (so `pure` lets the compiler reuse it).
        unsafe {
            std::arch::asm!(
                "mov {}, qword ptr fs:[0]",
                out(reg) tp,
                options(nostack, readonly, preserves_flags, pure)
            );
        }
        tp
    }
    #[cfg(all(target_arch = "aarch64", target_os = "linux"))]
    {
        let tp: u64;
        // SAFETY: TPIDR_EL0 holds the thread pointer on Linux; reading it writes nothing, and its
        // value never changes while the thread runs.
        unsafe {
            std::arch::asm!(
                "mrs {}, tpidr_el0",
                out(reg) tp,
                options(nostack, nomem, preserves_flags, pure)
            );
        }
        tp
    }
    #[cfg(not(all(
        any(target_arch = "x86_64", target_arch = "aarch64"),
        target_os = "linux"
    )))]
    {
        thread_local! {
            static TID: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
        }
        static NEXT_TID: AtomicU64 = AtomicU64::new(1);
        TID.with(|t| match t.get() {
            0 => {
                let id = NEXT_TID.fetch_add(1, Ordering::Relaxed);
                t.set(id);
                id
            }
            id => id,
        })
    }
}

/// Whether cells may be biased in this process: the private expedited membarrier is there (and
/// registered) and `VOLLEY_EXCLUSIVE_BIAS` does not say off.
fn bias_allowed() -> bool {
    bias_state().is_ok()
}

/// Whether biased cells take their fast path in this process, or why not.
pub fn bias_state() -> Result<(), &'static str> {
    static STATE: OnceLock<Result<(), &'static str>> = OnceLock::new();
    *STATE.get_or_init(|| {
        if std::env::var("VOLLEY_EXCLUSIVE_BIAS")
            .is_ok_and(|v| matches!(v.as_str(), "off" | "0" | "no" | "false"))
        {
            Err("VOLLEY_EXCLUSIVE_BIAS=off")
        } else if !crate::unix::membarrier_register_private() {
            Err("the kernel offers no private expedited membarrier")
        } else {
            Ok(())
        }
    })
}

/// What the fast path found.
enum Fast {
    /// This thread owns the cell and is now inside, in this slot.
    Got(usize),
    /// This thread owns the cell and is already inside.
    Reentered,
    /// Not this thread's: take the slow path.
    No,
}

/// Why a revocation did not hand the cell over.
enum Refused {
    /// Its owner is inside a borrow, or another thread is revoking.
    Busy,
    /// The cell is no longer biased: look again.
    Moved,
}

impl<T> Exclusive<T> {
    /// A plain cell: every borrow takes a compare-and-swap (a cell with a keeper).
    pub const fn new(value: T) -> Exclusive<T> {
        Self::make(value, false)
    }

    /// A cell biased to the thread that used it last (see the module's comment): for state
    /// used by one thread at a time, with no keeper.
    pub const fn biased(value: T) -> Exclusive<T> {
        Self::make(value, true)
    }

    const fn make(value: T, biasable: bool) -> Exclusive<T> {
        Exclusive {
            state: AtomicU8::new(FREE),
            biasable,
            owner: AtomicU32::new(0),
            revoking: AtomicBool::new(false),
            moves: AtomicU32::new(0),
            slots: [const { Slot::new() }; SLOTS],
            value: UnsafeCell::new(value),
        }
    }

    /// Takes the cell from `FREE` to `to`; the state found otherwise.
    #[inline]
    fn take(&self, to: u8) -> Result<ExclusiveGuard<'_, T>, u8> {
        // SYNC: Acquire (also on failure, where BIASED leads to a revocation); pairs with the
        // Release stores that give the cell back (`give_back`).
        self.state
            .compare_exchange(FREE, to, Ordering::Acquire, Ordering::Acquire)
            .map(|_| self.guard(if to == KEPT { HOW_KEPT } else { HOW_OWNED }))
    }

    #[inline]
    fn guard(&self, how: usize) -> ExclusiveGuard<'_, T> {
        let p = NonNull::from(self).cast::<u8>();
        ExclusiveGuard {
            tagged: p.map_addr(|a| a | how),
            cell: PhantomData,
        }
    }

    /// The owner's borrow of a biased cell: plain loads and stores, no locked instruction.
    #[inline]
    fn try_fast(&self) -> Fast {
        let o = self.owner.load(Ordering::Relaxed);
        let Some(s) = (o as usize).checked_sub(1).and_then(|i| self.slots.get(i)) else {
            return Fast::No;
        };
        if s.tid.load(Ordering::Relaxed) != my_tid() {
            return Fast::No;
        }
        // SYNC: Acquire; pairs with the Release store of a guard's drop, which may have run on
        // another thread (a guard is Send), so that its writes to the value are visible here.
        if s.inside.load(Ordering::Acquire) {
            return Fast::Reentered;
        }
        s.inside.store(true, Ordering::Relaxed);
        // SYNC: compiler fence; the light side of the handshake whose heavy side is the
        // membarrier in `revoke`: the mark above is before the reads below in program order,
        // and the membarrier puts a full barrier on one side or the other of them.
        compiler_fence(Ordering::SeqCst);
        // SYNC: Acquire; pairs with the Release in `revoke`, which clears `owner` before it
        // clears `revoking`: a revocation that is over shows as a changed owner.
        if self.revoking.load(Ordering::Acquire) || self.owner.load(Ordering::Relaxed) != o {
            // SYNC: Release; pairs with the Acquire read of the flag in `revoke`.
            s.inside.store(false, Ordering::Release);
            return Fast::No;
        }
        Fast::Got(o as usize - 1)
    }

    /// The value, or None if a borrow is alive (on this thread or another).
    #[inline]
    pub fn try_borrow_mut(&self) -> Option<ExclusiveGuard<'_, T>> {
        match self.try_fast() {
            Fast::Got(i) => Some(self.fast_guard(i)),
            Fast::Reentered => None,
            Fast::No => self.slow(false),
        }
    }

    /// The value. Waits while a keeper has it (a short moment); panics if another borrow is
    /// alive.
    #[inline]
    #[track_caller]
    pub fn borrow_mut(&self) -> ExclusiveGuard<'_, T> {
        match self.try_fast() {
            Fast::Got(i) => self.fast_guard(i),
            Fast::Reentered => already_borrowed(),
            Fast::No => match self.slow(true) {
                Some(g) => g,
                None => already_borrowed(),
            },
        }
    }

    #[inline]
    fn fast_guard(&self, i: usize) -> ExclusiveGuard<'_, T> {
        self.guard(i)
    }

    /// A plain borrow, taking the bias away from its owner if need be; waits for a keeper if
    /// `wait_keeper`. None if another borrow is alive.
    #[cold]
    fn slow(&self, wait_keeper: bool) -> Option<ExclusiveGuard<'_, T>> {
        let mut spins = 0u32;
        loop {
            match self.take(OWNED) {
                Ok(g) => return Some(g),
                Err(KEPT) if wait_keeper => {
                    spins += 1;
                    if spins.is_multiple_of(64) {
                        std::thread::yield_now();
                    } else {
                        std::hint::spin_loop();
                    }
                }
                Err(BIASED) => match self.revoke() {
                    Ok(()) => return Some(self.guard(HOW_OWNED)),
                    Err(Refused::Moved) => {}
                    Err(Refused::Busy) => return None,
                },
                Err(_) => return None,
            }
        }
    }

    /// Takes the bias away from its owner (see the module's comment); on success this thread
    /// holds the cell as a plain borrow (OWNED).
    #[cold]
    fn revoke(&self) -> Result<(), Refused> {
        // SYNC: SeqCst; announces the revocation before the membarrier below (the heavy side
        // of the handshake with `try_fast`), and makes revokers take turns.
        if self
            .revoking
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::Relaxed)
            .is_err()
        {
            return Err(Refused::Busy);
        }
        let r = self.revoke_announced();
        // SYNC: Release; pairs with the Acquire in `try_fast` (the owner cleared before this).
        self.revoking.store(false, Ordering::Release);
        r
    }

    fn revoke_announced(&self) -> Result<(), Refused> {
        // Only a revoker (one at a time, this one now) moves the cell out of BIASED.
        // SYNC: Acquire; pairs with the Release in `give_back`.
        if self.state.load(Ordering::Acquire) != BIASED {
            return Err(Refused::Moved);
        }
        if !crate::unix::membarrier_private() {
            // Registered when the cell was first biased, so the kernel has it: refusing now
            // leaves no sound way to take the cell.
            panic!("volley: membarrier(MEMBARRIER_CMD_PRIVATE_EXPEDITED) failed after it was registered: set VOLLEY_EXCLUSIVE_BIAS=off");
        }
        let o = self.owner.load(Ordering::Relaxed) as usize;
        let s = &self.slots[o - 1];
        // SYNC: Acquire; pairs with the Release stores of the flag (guard drop, backing off),
        // so what the owner wrote in its borrows is visible here.
        if s.inside.load(Ordering::Acquire) {
            return Err(Refused::Busy);
        }
        self.owner.store(0, Ordering::Relaxed);
        self.moves.fetch_add(1, Ordering::Relaxed);
        self.state.store(OWNED, Ordering::Relaxed);
        Ok(())
    }

    /// A plain borrow ends: the cell is biased to this thread if it may be, else free.
    #[cold]
    fn give_back(&self) {
        if self.biasable && self.moves.load(Ordering::Relaxed) < MAX_MOVES && bias_allowed() {
            if let Some(i) = self.slot_of_this_thread() {
                self.owner.store(i as u32 + 1, Ordering::Relaxed);
                // SYNC: Release; pairs with the Acquire in `take`/`revoke_announced`.
                self.state.store(BIASED, Ordering::Release);
                return;
            }
        }
        // SYNC: Release; pairs with the Acquire compare-and-swap in `take`.
        self.state.store(FREE, Ordering::Release);
    }

    /// This thread's slot in the cell, given to it now if it had none; None when all are taken.
    fn slot_of_this_thread(&self) -> Option<usize> {
        let me = my_tid();
        if let Some(i) = self
            .slots
            .iter()
            .position(|s| s.tid.load(Ordering::Relaxed) == me)
        {
            return Some(i);
        }
        self.slots.iter().position(|s| {
            s.tid
                .compare_exchange(0, me, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        })
    }

    /// The value for a keeper, only if nobody has it now: a keeper never waits and never makes
    /// an owner fail, only wait (see the module's comment). A biased cell is never kept.
    #[inline]
    pub fn keep(&self) -> Option<ExclusiveGuard<'_, T>> {
        self.take(KEPT).ok()
    }

    /// The value, through the unique reference that proves no borrow is alive.
    pub fn get_mut(&mut self) -> &mut T {
        self.value.get_mut()
    }

    /// Whether the cell is biased to a thread now (for tests and diagnostics).
    pub fn is_biased(&self) -> bool {
        self.state.load(Ordering::Relaxed) == BIASED
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

/// How a guard holds its cell, in the low bits of its address: below [`SLOTS`], the biased
/// owner's borrow marked in that slot; else a plain borrow (state OWNED) or a keeper's (KEPT).
const HOW_OWNED: usize = 62;
const HOW_KEPT: usize = 63;
const HOW_MASK: usize = 63;
const _: () = assert!(SLOTS < HOW_OWNED && std::mem::align_of::<Exclusive<()>>() > HOW_MASK);

/// A live borrow of an [`Exclusive`]; gives the value back on drop. One word: the cell's
/// address with how it is held in the low bits.
pub struct ExclusiveGuard<'a, T> {
    tagged: NonNull<u8>,
    cell: PhantomData<&'a Exclusive<T>>,
}

impl<'a, T> ExclusiveGuard<'a, T> {
    #[inline]
    fn cell(&self) -> &'a Exclusive<T> {
        // SAFETY: the address is that of the cell the guard borrows (`Exclusive::guard`), with
        // only the bits below its alignment changed, and the cell outlives 'a.
        unsafe {
            self.tagged
                .map_addr(|a| NonZeroUsize::new_unchecked(a.get() & !HOW_MASK))
                .cast::<Exclusive<T>>()
                .as_ref()
        }
    }

    #[inline]
    fn how(&self) -> usize {
        self.tagged.addr().get() & HOW_MASK
    }
}

// SAFETY: a guard is a `&mut T` in effect; sending it sends that.
unsafe impl<T: Send> Send for ExclusiveGuard<'_, T> {}
// SAFETY: sharing a guard shares `&T` only.
unsafe impl<T: Sync> Sync for ExclusiveGuard<'_, T> {}

impl<T> Deref for ExclusiveGuard<'_, T> {
    type Target = T;
    #[inline]
    fn deref(&self) -> &T {
        // SAFETY: this guard is the only one alive (see try_borrow_mut).
        unsafe { &*self.cell().value.get() }
    }
}

impl<T> DerefMut for ExclusiveGuard<'_, T> {
    #[inline]
    fn deref_mut(&mut self) -> &mut T {
        // SAFETY: this guard is the only one alive, and we hold it mutably.
        unsafe { &mut *self.cell().value.get() }
    }
}

impl<T> Drop for ExclusiveGuard<'_, T> {
    #[inline]
    fn drop(&mut self) {
        let cell = self.cell();
        match self.how() {
            // SYNC: Release; pairs with the Acquire compare-and-swap in `take`.
            HOW_KEPT => cell.state.store(FREE, Ordering::Release),
            HOW_OWNED => cell.give_back(),
            // SYNC: Release; pairs with the Acquire read of the flag in `revoke_announced`.
            i => cell.slots[i].inside.store(false, Ordering::Release),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    /// A thread's id is never 0 (a free slot), stays the same, and differs from every other
    /// living thread's.
    #[test]
    fn thread_ids_are_nonzero_stable_and_distinct_among_living_threads() {
        let me = my_tid();
        assert_ne!(me, 0);
        assert_eq!(my_tid(), me);
        let barrier = Arc::new(std::sync::Barrier::new(8));
        let ids: Vec<u64> = (0..8)
            .map(|_| {
                let b = barrier.clone();
                std::thread::spawn(move || {
                    let id = my_tid();
                    // All eight alive at once.
                    b.wait();
                    assert_eq!(my_tid(), id);
                    id
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|h| h.join().unwrap())
            .collect();
        let mut all = ids.clone();
        all.push(me);
        all.sort_unstable();
        all.dedup();
        assert_eq!(all.len(), 9, "{ids:?} and {me}");
        assert!(!ids.contains(&0));
    }

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
    fn a_biased_cell_moves_between_threads_and_each_sees_what_the_last_wrote() {
        let c = Arc::new(Exclusive::biased(0u64));
        *c.borrow_mut() += 1;
        if bias_allowed() {
            assert!(
                c.is_biased(),
                "given back by its only user, the cell is biased to it"
            );
        }
        // The owner borrows again, then other threads take it over in turn.
        *c.borrow_mut() += 1;
        for _ in 0..8 {
            let c2 = c.clone();
            std::thread::spawn(move || {
                *c2.borrow_mut() += 1;
                *c2.borrow_mut() += 1;
            })
            .join()
            .unwrap();
            *c.borrow_mut() += 1;
        }
        assert_eq!(*c.borrow_mut(), 2 + 8 * 3);
    }

    #[test]
    fn a_biased_cell_refuses_a_second_borrow_on_its_owners_thread() {
        let c = Exclusive::biased(5u32);
        drop(c.borrow_mut());
        let g = c.borrow_mut();
        assert!(c.try_borrow_mut().is_none(), "a second borrow must fail");
        drop(g);
        assert_eq!(*c.try_borrow_mut().expect("free again"), 5);
    }

    #[test]
    #[should_panic(expected = "one thread at a time")]
    fn a_second_borrow_of_a_biased_cell_panics() {
        let c = Exclusive::biased(1);
        drop(c.borrow_mut());
        let _g = c.borrow_mut();
        let _h = c.borrow_mut();
    }

    #[test]
    fn a_biased_cell_that_keeps_moving_stays_plain() {
        let c = Arc::new(Exclusive::biased(0u32));
        for _ in 0..(MAX_MOVES + 8) {
            let c2 = c.clone();
            std::thread::spawn(move || *c2.borrow_mut() += 1)
                .join()
                .unwrap();
            *c.borrow_mut() += 1;
        }
        assert_eq!(*c.borrow_mut(), 2 * (MAX_MOVES + 8));
        assert!(
            !c.is_biased(),
            "past MAX_MOVES the cell is given back plain"
        );
        assert!(c.moves.load(Ordering::Relaxed) <= MAX_MOVES + 1);
    }

    /// Threads race for fresh biased cells with try_borrow_mut; inside, each checks that nobody
    /// else is: two borrows at once would show as a holder overwritten.
    #[test]
    fn racing_threads_never_share_a_biased_cell() {
        const THREADS: usize = 4;
        for round in 0..40 {
            let c = Arc::new(Exclusive::biased((0usize, 0u64)));
            let bar = Arc::new(std::sync::Barrier::new(THREADS));
            let hs: Vec<_> = (1..=THREADS)
                .map(|me| {
                    let (c, bar) = (c.clone(), bar.clone());
                    std::thread::spawn(move || {
                        bar.wait();
                        let mut got = 0u64;
                        for i in 0..2000 {
                            if let Some(mut g) = c.try_borrow_mut() {
                                assert_eq!(g.0, 0, "round {round}: another thread is inside");
                                g.0 = me;
                                for _ in 0..(i % 7) {
                                    std::hint::spin_loop();
                                }
                                assert_eq!(g.0, me, "round {round}: another thread came in");
                                g.0 = 0;
                                g.1 += 1;
                                got += 1;
                            }
                        }
                        got
                    })
                })
                .collect();
            let got: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
            assert_eq!(c.borrow_mut().1, got, "every borrow's increment is there");
            assert!(got > 0, "some borrow succeeds");
        }
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
