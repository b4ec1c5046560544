//! Which peers the engine must look at: those that may have a packet to send, and the earliest
//! timer of all. Both were found by walking every peer on every call, so a rank with many remote
//! peers paid for all of them on each pass of its poll loop (two walks a pass: the next timeout
//! and the next packet), whether or not anything happened. Now a pass that finds nothing costs
//! the same with one peer or a thousand.
//!
//! The rule that keeps it exact: a peer's state changes only through the engine, and the engine
//! calls [`Sched::touch`] after every change (a packet handled, a message queued, credit given
//! back, a timer run, a packet written). A touched peer is put on the ready queue and its next
//! timer is read again. Whatever a peer would send because time passed (an acknowledgement held
//! back, a heartbeat, a credit probe) is due at a time [`crate::peer::Peer::next_timeout`]
//! includes, so the due peers are put on the queue when their time comes.

use std::collections::VecDeque;

/// No timer.
pub(crate) const NEVER: u64 = u64::MAX;

/// Each peer's next timer in a tournament tree: the earliest of all in O(1), one peer's changed
/// in O(log peers), the due ones found without looking at the others.
#[derive(Default)]
pub(crate) struct Timers {
    /// Leaves: a power of two, at least the number of peer slots (0 before the first).
    leaves: usize,
    /// `t[leaves + i]` is peer slot i's next timer; `t[k]` the earliest of `t[2k]` and
    /// `t[2k + 1]`; `t[0]` unused.
    t: Vec<u64>,
}

impl Timers {
    pub(crate) fn earliest(&self) -> u64 {
        self.t.get(1).copied().unwrap_or(NEVER)
    }

    pub(crate) fn set(&mut self, i: usize, at: u64) {
        if i >= self.leaves {
            self.grow(i + 1);
        }
        let mut k = self.leaves + i;
        if self.t[k] == at {
            return;
        }
        self.t[k] = at;
        while k > 1 {
            k /= 2;
            let m = self.t[2 * k].min(self.t[2 * k + 1]);
            if self.t[k] == m {
                // Every node above depends on this one only through its value.
                break;
            }
            self.t[k] = m;
        }
    }

    fn grow(&mut self, slots: usize) {
        let leaves = slots.next_power_of_two();
        let mut t = vec![NEVER; 2 * leaves];
        t[leaves..leaves + self.leaves].copy_from_slice(&self.t[self.leaves..]);
        for k in (1..leaves).rev() {
            t[k] = t[2 * k].min(t[2 * k + 1]);
        }
        self.leaves = leaves;
        self.t = t;
    }

    /// Appends to `out` the slots whose timer is at or before `now`.
    pub(crate) fn due(&self, now: u64, out: &mut Vec<u32>) {
        if !self.t.is_empty() {
            self.visit(1, now, out);
        }
    }

    fn visit(&self, k: usize, now: u64, out: &mut Vec<u32>) {
        if self.t[k] > now {
            return;
        }
        if k >= self.leaves {
            out.push((k - self.leaves) as u32);
            return;
        }
        self.visit(2 * k, now, out);
        self.visit(2 * k + 1, now, out);
    }
}

/// The ready queue and the timers.
#[derive(Default)]
pub(crate) struct Sched {
    pub(crate) timers: Timers,
    /// Peer slots that may have a packet to send, each once, served in turn.
    ready: VecDeque<u32>,
    queued: Vec<bool>,
    /// The due slots of one call (kept: no allocation per call).
    scratch: Vec<u32>,
}

impl Sched {
    /// Peer slot `i` changed: it may have something to send, and its next timer is `next`.
    pub(crate) fn touch(&mut self, i: usize, next: Option<u64>) {
        self.timers.set(i, next.unwrap_or(NEVER));
        self.wake(i);
    }

    pub(crate) fn wake(&mut self, i: usize) {
        if i >= self.queued.len() {
            self.queued.resize(i + 1, false);
        }
        if !self.queued[i] {
            self.queued[i] = true;
            self.ready.push_back(i as u32);
        }
    }

    /// The slots whose timer is due at `now` (empty when none, without looking at any); hand the
    /// list back with [`Sched::done_with`] so that its allocation is kept.
    pub(crate) fn take_due(&mut self, now: u64) -> Vec<u32> {
        let mut due = std::mem::take(&mut self.scratch);
        due.clear();
        if self.timers.earliest() <= now {
            self.timers.due(now, &mut due);
        }
        due
    }

    pub(crate) fn done_with(&mut self, due: Vec<u32>) {
        self.scratch = due;
    }

    /// Puts the slots whose timer is due on the ready queue.
    pub(crate) fn wake_due(&mut self, now: u64) {
        let due = self.take_due(now);
        for &i in &due {
            self.wake(i as usize);
        }
        self.done_with(due);
    }

    /// The next slot to try, taken off the queue: [`Sched::again`] puts it back at the end.
    pub(crate) fn next(&mut self) -> Option<usize> {
        let i = self.ready.pop_front()? as usize;
        self.queued[i] = false;
        Some(i)
    }

    /// Slot `i`, just taken by [`Sched::next`], sent a packet: it goes on, after the others.
    pub(crate) fn again(&mut self, i: usize) {
        self.wake(i);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Whatever the order of changes and growth, the tree's earliest timer and its due
        /// slots are those of a plain list.
        #[test]
        fn the_tree_agrees_with_a_plain_list(
            ops in proptest::collection::vec((0usize..70, 0u64..1000), 1..200),
            now in 0u64..1000,
        ) {
            let mut t = Timers::default();
            let mut plain: Vec<u64> = Vec::new();
            for (i, at) in ops {
                let at = if at > 900 { NEVER } else { at };
                t.set(i, at);
                if plain.len() <= i {
                    plain.resize(i + 1, NEVER);
                }
                plain[i] = at;
                prop_assert_eq!(t.earliest(), plain.iter().copied().min().unwrap_or(NEVER));
            }
            let mut due = Vec::new();
            t.due(now, &mut due);
            let want: Vec<u32> = (0..plain.len() as u32).filter(|&i| plain[i as usize] <= now).collect();
            prop_assert_eq!(due, want);
        }
    }

    #[test]
    fn a_slot_is_queued_once_and_served_in_turn() {
        let mut s = Sched::default();
        assert_eq!(s.timers.earliest(), NEVER);
        s.touch(3, Some(50));
        s.touch(1, None);
        s.touch(3, Some(40));
        assert_eq!(s.timers.earliest(), 40);
        assert_eq!(s.next(), Some(3));
        s.again(3);
        assert_eq!(s.next(), Some(1));
        assert_eq!(s.next(), Some(3));
        assert_eq!(s.next(), None);
        s.wake_due(39);
        assert_eq!(s.next(), None, "nothing due before 40");
        s.wake_due(40);
        assert_eq!(s.next(), Some(3));
        assert_eq!(s.next(), None);
    }
}
