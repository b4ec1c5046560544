//! Non-blocking sends in flight.

use crate::backoff::Backoff;
use crate::counters::Counter;
use crate::engine::{Cursor, Engine, Pending};
use crate::error::SendError;
use crate::world::World;
use std::sync::Arc;
use volley_sys::Exclusive;

pub(crate) enum ReqState {
    Done(Option<Vec<u8>>),
    Queued(Arc<Exclusive<Pending>>),
    /// With the progress thread.
    Lent(std::sync::Arc<crate::progress::LentState>),
}

/// Queues the rest of a non-blocking send behind the earlier ones to `rank`.
pub(crate) fn queue(
    e: &mut Engine,
    w: &World,
    rank: usize,
    tag: u32,
    context: u32,
    data: Vec<u8>,
    cursor: Cursor,
) -> SendRequest {
    let p = Arc::new(Exclusive::new(Pending {
        dst: rank,
        tag,
        context,
        data,
        cursor,
        rndv: false,
        rndv_pos: None,
        done: false,
        failed: false,
    }));
    e.pending[rank].push_back(p.clone());
    e.npending += 1;
    e.counters.add(Counter::PendingSends, 1);
    SendRequest {
        world: w.clone(),
        rank,
        state: ReqState::Queued(p),
    }
}

/// A non-blocking send in flight. Dropping it does not cancel the send: the message still goes
/// out, in order.
pub struct SendRequest {
    pub(crate) world: World,
    pub(crate) rank: usize,
    pub(crate) state: ReqState,
}

impl SendRequest {
    /// Makes progress and says whether the buffer may be reused.
    pub fn test(&mut self) -> Result<bool, SendError> {
        if let ReqState::Lent(l) = &self.state {
            // SYNC: Acquire; pairs with the Release in the progress thread.
            if !l.done.load(std::sync::atomic::Ordering::Acquire) {
                self.world.progress().ok();
                return Ok(false);
            }
            if l.failed.load(std::sync::atomic::Ordering::Relaxed) {
                // The thread gave up because the destination left the job.
                let mut e = self.world.eng();
                let lost = e.send_dead_end(self.rank).unwrap_or(crate::PeerLost {
                    rank: e.l2g[self.rank],
                    fate: crate::Fate::Finished,
                });
                return Err(SendError::PeerLost(lost));
            }
            let data = l.data.lock().unwrap_or_else(|p| p.into_inner()).take();
            self.state = ReqState::Done(data);
            return Ok(true);
        }
        if let ReqState::Queued(p) = &self.state {
            self.world.progress().ok();
            if !p.borrow_mut().done {
                if let Some(l) = self.world.eng().send_dead_end(self.rank) {
                    return Err(l.into());
                }
                return Ok(false);
            }
            if p.borrow_mut().failed {
                return Err(SendError::SingleCopyFailed {
                    rank: self.world.inner.l2g[self.rank],
                });
            }
            let data = std::mem::take(&mut p.borrow_mut().data);
            self.state = ReqState::Done(Some(data));
        }
        Ok(true)
    }

    /// Whether the send had completed when last tested (does not make progress).
    pub fn is_complete(&self) -> bool {
        match &self.state {
            ReqState::Done(_) => true,
            ReqState::Queued(p) => p.borrow_mut().done,
            // SYNC: Acquire; pairs with the Release in the progress thread.
            ReqState::Lent(l) => l.done.load(std::sync::atomic::Ordering::Acquire),
        }
    }

    /// Waits until the message is in the ring and gives the buffer back.
    pub fn wait(mut self) -> Result<Vec<u8>, SendError> {
        let mut b = Backoff::new();
        while !self.test()? {
            b.snooze();
        }
        match &mut self.state {
            ReqState::Done(d) => Ok(d.take().unwrap_or_default()),
            ReqState::Queued(_) | ReqState::Lent(_) => unreachable!("test() returned true"),
        }
    }
}
