//! Sending: blocking, non-blocking on an owned buffer, into the ring by a closure, single copy,
//! and to ranks on other hosts through the network.

use crate::backoff::Backoff;
use crate::counters::Counter;
use crate::endpoint::Endpoint;
use crate::engine::{Cursor, Payload, Pending};
use crate::error::SendError;
use crate::net::Refused;
use crate::request::{queue, SendRequest, SendState};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use volley_shm::Kind;
use volley_sys::Exclusive;

impl Endpoint {
    /// Sends `data` to the target; returns when `data` may be reused (it is in the ring). Waits
    /// while the ring is full; fails if the target is gone.
    pub fn send(&self, data: &[u8]) -> Result<(), SendError> {
        let (r, p) = self.dest()?;
        self.send_to(r, p, data)
    }

    /// Sends `data` to (rank, port).
    pub fn send_to(&self, rank: usize, port: u32, data: &[u8]) -> Result<(), SendError> {
        self.send_env(rank, port, self.port, data)
    }

    /// Sends `data` to `rank` with the envelope (context, tag): the core of every blocking send.
    pub(crate) fn send_env(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<(), SendError> {
        let w = &self.world;
        w.check_rank(rank)?;
        let rank = match w.route(rank) {
            Some(li) => li,
            None => return self.net_send(rank, context, tag, data, true),
        };
        // One borrow for every check (each borrow is an atomic swap on the hot path).
        let mut c = Cursor::default();
        let single = {
            let mut e = w.eng();
            if let Some(l) = e.send_dead_end(rank) {
                return Err(l.into());
            }
            let single = e.use_single_copy(rank, data.len());
            if !e.pending[rank].is_empty() {
                drop(e);
                w.flush_pending_to(rank)?;
            } else if !single {
                // The common case, in this same borrow: the message fits the ring now.
                let done = e.push(rank, tag, context, data, &mut c);
                if done || c.off != 0 {
                    e.ring_doorbell(rank);
                }
                if done {
                    return Ok(());
                }
            }
            single
        };
        if single {
            return self.send_single_copy(rank, context, tag, data);
        }
        let mut b = Backoff::new();
        loop {
            {
                let mut e = w.eng();
                let before = c.off;
                let done = e.push(rank, tag, context, data, &mut c);
                if done || c.off != before {
                    e.ring_doorbell(rank);
                    b.reset();
                }
                if done {
                    return Ok(());
                }
                if let Some(l) = e.send_dead_end(rank) {
                    return Err(l.into());
                }
            }
            // The ring is full: let handlers and queued sends run while we wait.
            let _ = w.progress();
            b.snooze();
        }
    }

    /// Sends to a rank on another host: the engine takes a copy (returns at once unless the
    /// queue to that rank is full: then waits, or with `wait` false says WouldBlock).
    pub(crate) fn net_send(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: &[u8],
        wait: bool,
    ) -> Result<(), SendError> {
        let w = &self.world;
        let how = if self.best_effort.load(Ordering::Relaxed) {
            volley_proto::Reliability::BestEffort
        } else {
            volley_proto::Reliability::Reliable
        };
        let mut b = Backoff::new();
        loop {
            let r = {
                // No pump first: a message that fits goes out at once, one system call.
                w.net().try_send(rank, tag, context, data, how)
            };
            match r {
                Ok(()) => {
                    let mut e = w.eng();
                    e.counters.add(Counter::MsgsSent, 1);
                    e.counters.add(Counter::BytesSent, data.len() as u64);
                    return Ok(());
                }
                Err(Refused::Lost) => {
                    // Lost or finished: the pump collects which from the engine's events.
                    let mut n = w.net();
                    n.pump();
                    let fate = n
                        .lost
                        .iter()
                        .find(|(x, _)| *x == rank)
                        .map_or(crate::Fate::Unreachable, |&(_, f)| f);
                    return Err(crate::PeerLost { rank, fate }.into());
                }
                Err(Refused::TooLarge { len, max }) => {
                    return Err(SendError::TooLargeForNetwork { rank, len, max })
                }
                Err(Refused::UnknownPeer) => return Err(SendError::UnknownPeer { rank }),
                Err(Refused::Full) if !wait => return Err(SendError::WouldBlock { rank }),
                Err(Refused::Full) => {
                    // progress() pumps the network: acknowledgements make room.
                    let _ = w.progress();
                    b.snooze();
                }
            }
        }
    }

    /// Single copy: a descriptor into the ring, then wait until the receiver has copied `data`
    /// out of our memory (only then may the caller reuse it).
    pub(crate) fn send_single_copy(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<(), SendError> {
        let w = &self.world;
        let mut b = Backoff::new();
        let pos = loop {
            {
                let mut e = w.eng();
                if let Some(pos) = e.push_descriptor(rank, tag, context, data) {
                    e.ring_doorbell(rank);
                    break pos;
                }
                if let Some(l) = e.send_dead_end(rank) {
                    return Err(l.into());
                }
            }
            let _ = w.progress();
            b.snooze();
        };
        b.reset();
        loop {
            {
                let mut e = w.eng();
                match e.seg.rndv_state(e.me, rank, pos) {
                    volley_shm::RndvState::Done => return Ok(()),
                    volley_shm::RndvState::Failed => {
                        return Err(SendError::SingleCopyFailed {
                            rank: w.inner.l2g[rank],
                        })
                    }
                    volley_shm::RndvState::Pending => {}
                }
                if let Some(l) = e.send_dead_end(rank) {
                    return Err(l.into());
                }
            }
            let _ = w.progress();
            b.snooze();
        }
    }

    /// Sends a message of `len` bytes that `fill` writes straight into the receive pool (the ring
    /// in shared memory): no copy on the sending side. `len` is at most [`World::max_inline`].
    /// Waits while the ring is full; `fill` runs once, when there is room.
    pub fn send_with(&self, len: usize, fill: impl FnOnce(&mut [u8])) -> Result<(), SendError> {
        let (rank, port) = self.dest()?;
        self.send_with_to(rank, port, len, fill)
    }

    pub fn send_with_to(
        &self,
        rank: usize,
        port: u32,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> Result<(), SendError> {
        let w = &self.world;
        w.check_rank(rank)?;
        let rank = match w.route(rank) {
            Some(li) => li,
            None => {
                let mut buf = w.net().buffer(len);
                fill(&mut buf);
                let r = self.net_send(rank, port, self.port, &buf, true);
                w.net().recycle(buf);
                return r;
            }
        };
        let max = w.max_inline();
        if len > max {
            return Err(SendError::TooLargeForSendWith { len, max });
        }
        if let Some(l) = w.eng().send_dead_end(rank) {
            return Err(l.into());
        }
        w.flush_pending_to(rank)?;
        let meta = volley_shm::Meta {
            kind: Kind::Whole,
            tag: self.port,
            context: port,
            total_len: len as u64,
        };
        let mut fill = Some(fill);
        let mut b = Backoff::new();
        loop {
            {
                let mut e = w.eng();
                let sent = match e.tx[rank].as_mut() {
                    Some(tx) => tx.try_push_with(meta, len, |buf| {
                        (fill.take().expect("fill runs once"))(buf)
                    }),
                    None => false,
                };
                if sent {
                    e.counters.add(Counter::MsgsSent, 1);
                    e.counters.add(Counter::InlineSends, 1);
                    e.counters.add(Counter::BytesSent, len as u64);
                    e.ring_doorbell(rank);
                    return Ok(());
                }
                e.counters.add(Counter::BackPressure, 1);
                if let Some(l) = e.send_dead_end(rank) {
                    return Err(l.into());
                }
            }
            let _ = w.progress();
            b.snooze();
        }
    }

    /// Sends `data` to the target only if it fits in the ring now; otherwise
    /// [`SendError::WouldBlock`] and nothing is sent.
    pub fn try_send(&self, data: &[u8]) -> Result<(), SendError> {
        let (r, p) = self.dest()?;
        self.try_send_to(r, p, data)
    }

    pub fn try_send_to(&self, rank: usize, port: u32, data: &[u8]) -> Result<(), SendError> {
        let w = &self.world;
        w.check_rank(rank)?;
        let rank = match w.route(rank) {
            Some(li) => li,
            None => return self.net_send(rank, port, self.port, data, false),
        };
        let mut e = w.eng();
        if data.len() > e.ring_payload_capacity {
            return Err(SendError::TooLargeForTrySend {
                len: data.len(),
                max: e.ring_payload_capacity,
            });
        }
        if let Some(l) = e.send_dead_end(rank) {
            return Err(l.into());
        }
        e.drive_pending();
        if !e.pending[rank].is_empty()
            || !e.tx[rank]
                .as_mut()
                .is_some_and(|tx| tx.can_fit_message(data.len()))
        {
            e.counters.add(Counter::BackPressure, 1);
            return Err(SendError::WouldBlock {
                rank: w.inner.l2g[rank],
            });
        }
        let mut c = Cursor::default();
        let done = e.push(rank, self.port, port, data, &mut c);
        assert!(done, "can_fit promised room for the whole message");
        e.ring_doorbell(rank);
        Ok(())
    }

    /// Starts sending `data` to the target without waiting; the returned request gives the buffer
    /// back once it may be reused. Messages queued this way keep their order with later sends.
    pub fn isend(&self, data: Vec<u8>) -> Result<SendRequest, SendError> {
        let (r, p) = self.dest()?;
        self.isend_to(r, p, data)
    }

    pub fn isend_to(
        &self,
        rank: usize,
        port: u32,
        data: Vec<u8>,
    ) -> Result<SendRequest, SendError> {
        let state = self.isend_env(rank, port, self.port, Payload::Owned(data))?;
        Ok(SendRequest::new(&self.world, state))
    }

    /// Starts sending `data` to `rank` with the envelope (context, tag): the core of every
    /// non-blocking send, of an owned buffer or of lent memory.
    pub(crate) fn isend_env(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: Payload,
    ) -> Result<SendState, SendError> {
        let w = &self.world;
        w.check_rank(rank)?;
        let rank = match w.route(rank) {
            Some(li) => li,
            None => {
                // The engine copies the message and keeps it until acknowledged: the buffer
                // is free at once.
                self.net_send(rank, context, tag, &data, true)?;
                return Ok(SendState::Done(data));
            }
        };
        let mut e = w.eng();
        if let Some(l) = e.send_dead_end(rank) {
            return Err(l.into());
        }
        e.drive_pending();
        let rndv = e.use_single_copy(rank, data.len());
        let mut cursor = Cursor::default();
        let mut rndv_pos = None;
        if e.pending[rank].is_empty() && rndv {
            rndv_pos = e.push_descriptor(rank, tag, context, &data);
            if rndv_pos.is_some() {
                e.ring_doorbell(rank);
            }
        } else if e.pending[rank].is_empty() {
            let done = e.push(rank, tag, context, &data, &mut cursor);
            if done || cursor.off > 0 {
                e.ring_doorbell(rank);
            }
            if done {
                return Ok(SendState::Done(data));
            }
            // The rest can go on in the progress thread while the application computes.
            let data = match e.lend(rank, tag, context, data, cursor) {
                Ok(state) => return Ok(SendState::Lent(rank, state)),
                Err(data) => data,
            };
            return Ok(queue(&mut e, rank, tag, context, data, cursor));
        }
        let p = Arc::new(Exclusive::new(Pending {
            dst: rank,
            tag,
            context,
            data,
            cursor,
            rndv,
            rndv_pos,
            done: false,
            failed: false,
        }));
        if rndv_pos.is_some() {
            // The descriptor is out; the data waits here until the receiver has copied it.
            e.inflight.push(p.clone());
        } else {
            e.pending[rank].push_back(p.clone());
            e.npending += 1;
            e.counters.add(Counter::PendingSends, 1);
        }
        Ok(SendState::Queued(rank, p))
    }

    /// Sends `data` to `rank`'s endpoint on this endpoint's own port, with `tag` in the envelope
    /// (the face of matched messaging: the port is the context, e.g. an MPI communicator's).
    /// Returns when `data` may be reused; waits while the ring is full.
    pub fn send_tagged(&self, rank: usize, tag: u32, data: &[u8]) -> Result<(), SendError> {
        self.send_env(rank, self.port, tag, data)
    }

    /// Starts sending `data` to `rank` on this endpoint's port with `tag`, without waiting; as
    /// [`Endpoint::isend`].
    pub fn isend_tagged(
        &self,
        rank: usize,
        tag: u32,
        data: Vec<u8>,
    ) -> Result<SendRequest, SendError> {
        let state = self.isend_env(rank, self.port, tag, Payload::Owned(data))?;
        Ok(SendRequest::new(&self.world, state))
    }
}
