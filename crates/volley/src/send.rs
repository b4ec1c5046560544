//! Sending: blocking, without waiting, into the ring by a closure, and non-blocking on an owned
//! buffer or lent memory. Each entry point is written once, above the two paths a message can
//! take (`path`: the ring to a rank of this host, the network engine to one on another).

use crate::endpoint::Endpoint;
use crate::engine::Payload;
use crate::error::SendError;
use crate::path::{Out, Step};
use crate::request::{SendRequest, SendState};
use std::sync::atomic::Ordering;
use volley_proto::Reliability;

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

    /// GAMMA's best effort, a property of the sending endpoint.
    #[inline]
    pub(crate) fn how(&self) -> Reliability {
        if self.best_effort.load(Ordering::Relaxed) {
            Reliability::BestEffort
        } else {
            Reliability::Reliable
        }
    }

    /// Sends `data` to `rank` with the envelope (context, tag): the core of every blocking send.
    /// The first step is usually the last (the message fits the ring now); otherwise it waits,
    /// making progress, while the ring or queue is full or a single-copy receiver reads.
    #[inline]
    pub(crate) fn send_env(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<(), SendError> {
        let path = self.world.path(rank)?;
        let mut out = Out::new(context, tag, data, self.how());
        match path.step(&mut out)? {
            Step::Done => Ok(()),
            Step::Rendezvous => self.send_rendezvous(rank, context, tag, data),
            Step::Partial | Step::Busy => self.world.wait_steps(&path, &mut out),
        }
    }

    /// A blocking send by rendezvous: the non-blocking send on `data` lent for the length of
    /// the call, waited for (making progress: the receiver's answer may come at any time). To a
    /// rank on another host the wait ends once at most a window is still to go: the network
    /// engine then copies what is not acknowledged yet (about two windows) and ends the loan,
    /// so that the next message's handshake crosses while this one's tail goes (waiting for
    /// the last acknowledgement left the pipe empty after each message, and a lost last packet
    /// nothing behind it to reveal it).
    #[cold]
    #[inline(never)]
    fn send_rendezvous(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<(), SendError> {
        let w = &self.world;
        volley_sys::lend::scope(
            || {
                let _ = w.progress();
            },
            |lender| {
                let mut state =
                    self.isend_env(rank, context, tag, Payload::Lent(lender.lend(data)))?;
                let mut b = crate::backoff::Backoff::new();
                let mut seen = w.moved();
                while !state.poll(w)? {
                    if let SendState::Net(dst, id) = state {
                        if w.net().release_lent(dst, id) {
                            break;
                        }
                    }
                    // Streaming the data: each piece that goes starts the backoff again.
                    b.snooze_in(w, &mut seen);
                }
                Ok(())
            },
        )
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
        let path = w.path(rank)?;
        let (mut fill, mut staged) = (Some(fill), None);
        let mut b = crate::backoff::Backoff::new();
        let mut seen = w.moved();
        loop {
            match path.step_with(port, self.port, len, self.how(), &mut fill, &mut staged)? {
                Step::Done => return Ok(()),
                Step::Partial => b.reset(),
                // A record written in place is whole: never a rendezvous.
                Step::Busy | Step::Rendezvous => {}
            }
            let _ = w.progress();
            b.snooze_in(w, &mut seen);
        }
    }

    /// Sends `data` to the target only if it fits in the ring now; otherwise
    /// [`SendError::WouldBlock`] and nothing is sent.
    pub fn try_send(&self, data: &[u8]) -> Result<(), SendError> {
        let (r, p) = self.dest()?;
        self.try_send_to(r, p, data)
    }

    pub fn try_send_to(&self, rank: usize, port: u32, data: &[u8]) -> Result<(), SendError> {
        self.try_send_env(rank, port, self.port, data)
    }

    /// Sends `data` to `rank`'s endpoint on this endpoint's port with `tag` in the envelope, only
    /// if it can go at once (it fits in the ring, and nothing sent to `rank` earlier is still
    /// queued, so order is kept); otherwise [`SendError::WouldBlock`] and nothing is sent.
    pub fn try_send_tagged(&self, rank: usize, tag: u32, data: &[u8]) -> Result<(), SendError> {
        self.try_send_env(rank, self.port, tag, data)
    }

    /// Sends `data` to `rank`'s endpoint on this endpoint's port with `tag` if it goes whole at
    /// once, through the ring or into the network engine (which copies it and resends from its
    /// copy), and would take neither single copy nor rendezvous (what a send of its size would
    /// do anyway): Ok(true), and `data` may be reused. Ok(false) sends nothing (a full ring or
    /// network window, sends queued before it, or a message for single copy or rendezvous):
    /// start a request instead. MPI_Isend's fast path, which then needs no request.
    pub fn try_send_eager(&self, rank: usize, tag: u32, data: &[u8]) -> Result<bool, SendError> {
        self.world
            .path(rank)?
            .try_eager(self.port, tag, data, self.how())
    }

    fn try_send_env(
        &self,
        rank: usize,
        context: u32,
        tag: u32,
        data: &[u8],
    ) -> Result<(), SendError> {
        let path = self.world.path(rank)?;
        let would_block = || SendError::WouldBlock { rank };
        if !path.can_take(data.len())? {
            return Err(would_block());
        }
        let mut out = Out::new(context, tag, data, self.how());
        // Through the ring, never by single copy or rendezvous: those wait for the receiver.
        out.single_copy = false;
        out.rendezvous = false;
        match path.step(&mut out)? {
            Step::Done => Ok(()),
            // can_take promised room for the whole message in a ring; the network engine takes
            // a message whole or not at all.
            Step::Partial => unreachable!("a message that fits goes whole"),
            Step::Busy => Err(would_block()),
            Step::Rendezvous => unreachable!("try_send never goes by rendezvous"),
        }
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
        self.world.path(rank)?.start(context, tag, data, self.how())
    }

    /// Sends `data` to `rank`'s endpoint on this endpoint's own port, with `tag` in the envelope
    /// (the face of matched messaging: the port is the context, e.g. an MPI communicator's).
    /// Returns when `data` may be reused; waits while the ring is full.
    #[inline]
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
