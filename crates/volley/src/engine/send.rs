//! Starting a non-blocking send through a ring: what fits goes now, the rest is queued in order
//! behind earlier sends to the same rank, lent to the progress thread, or (single copy) waits
//! for the receiver to read it.

use super::{Cursor, Engine, Payload, Pending};
use crate::counters::Counter;
use crate::error::SendError;
use crate::request::SendState;
use std::sync::Arc;
use volley_sys::Exclusive;

impl Engine {
    /// Starts sending `data` to local rank `rank` with the envelope (context, tag).
    pub fn start_send(
        &mut self,
        rank: usize,
        tag: u32,
        context: u32,
        data: Payload,
    ) -> Result<SendState, SendError> {
        if let Some(l) = self.send_dead_end(rank) {
            return Err(l.into());
        }
        self.drive_pending();
        if self.wants_rendezvous(rank, context, data.len()) {
            // With a progress thread, the whole rendezvous goes to it (it reads the answer and
            // streams the data while the application computes), unless this process already
            // waits for answers from `rank` (the ring's answers have one reader at a time).
            let data = if self.rts_out[rank] == 0 && self.has_progress_thread() {
                let single = !data.is_packed() && self.use_single_copy(rank, data.len());
                let token = self.reserve_token();
                match self.lend(
                    rank,
                    tag,
                    context,
                    data,
                    Cursor::default(),
                    Some((token, single)),
                ) {
                    Ok(state) => {
                        self.count(Counter::RendezvousSends, 1);
                        return Ok(SendState::Lent(rank, state));
                    }
                    Err(data) => {
                        self.release_token(token);
                        data
                    }
                }
            } else {
                data
            };
            // A request to send now (or queued in order); the data waits for the receiver.
            let p = Arc::new(Exclusive::new(Pending::new(
                rank,
                tag,
                context,
                data,
                Cursor::default(),
                false,
                None,
            )));
            let token = self.new_rendezvous(rank, &p);
            p.borrow_mut().rts = Some(token);
            if self.pending[rank].is_empty() && self.push_rts(rank, &mut p.borrow_mut()) {
                self.ring_doorbell(rank);
                return Ok(SendState::Queued(rank, p));
            }
            return Ok(self.enqueue(rank, p));
        }
        let rndv = self.use_single_copy(rank, data.len());
        let mut cursor = Cursor::default();
        let mut rndv_pos = None;
        if !self.has_pending(rank) && rndv {
            rndv_pos = self.push_descriptor(rank, tag, context, &data);
            if rndv_pos.is_some() {
                self.ring_doorbell(rank);
            }
        } else if !self.has_pending(rank) {
            let done = self.push(rank, tag, context, &data, &mut cursor);
            if done || cursor.off > 0 {
                self.ring_doorbell(rank);
            }
            if done {
                return Ok(SendState::Done(data));
            }
            // The rest can go on in the progress thread while the application computes.
            let data = match self.lend(rank, tag, context, data, cursor, None) {
                Ok(state) => return Ok(SendState::Lent(rank, state)),
                Err(data) => data,
            };
            return Ok(self.queue_send(rank, tag, context, data, cursor));
        }
        let p = Arc::new(Exclusive::new(Pending::new(
            rank, tag, context, data, cursor, rndv, rndv_pos,
        )));
        if rndv_pos.is_none() {
            return Ok(self.enqueue(rank, p));
        }
        // The descriptor is out; the data waits here until the receiver has copied it.
        self.inflight.push(p.clone());
        Ok(SendState::Queued(rank, p))
    }

    /// Queues the rest of a non-blocking send behind the earlier ones to `rank`.
    pub fn queue_send(
        &mut self,
        rank: usize,
        tag: u32,
        context: u32,
        data: Payload,
        cursor: Cursor,
    ) -> SendState {
        let p = Pending::new(rank, tag, context, data, cursor, false, None);
        self.enqueue(rank, Arc::new(Exclusive::new(p)))
    }

    fn enqueue(&mut self, rank: usize, p: Arc<Exclusive<Pending>>) -> SendState {
        if self.tx[rank].is_none() {
            self.want_producer(rank);
        }
        self.pending[rank].push_back(p.clone());
        self.npending += 1;
        self.count(Counter::PendingSends, 1);
        SendState::Queued(rank, p)
    }
}
