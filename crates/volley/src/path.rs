//! The two paths a message can take, behind one interface: the ring to a rank of this host, or
//! the network engine to a rank on another. Every send (`send.rs`) is written once above it, as
//! UCX's protocol layer sits above its transports' table of operations: a step answers Done,
//! Partial or Busy (back-pressure is a value: make progress and step again), or an error that
//! says why the message cannot go.

use crate::counters::Counter;
use crate::engine::{Cursor, Payload};
use crate::error::SendError;
use crate::net::Refused;
use crate::request::SendState;
use crate::world::World;
use volley_proto::Reliability;
use volley_shm::{Kind, RndvState};

/// What one step of a send did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Step {
    /// The caller's bytes may be reused.
    Done,
    /// Some of the message went; step again.
    Partial,
    /// Nothing could go now (full ring or queue, a receiver still copying): make progress and
    /// step again.
    Busy,
    /// Nothing went: the message goes by rendezvous (`engine::rendezvous`), which a blocking
    /// send runs as a non-blocking one on lent memory (`Endpoint::send_rendezvous`).
    Rendezvous,
}

/// A message on its way through a path: its envelope, its bytes and how far it got.
pub(crate) struct Out<'a> {
    pub context: u32,
    pub tag: u32,
    pub data: &'a [u8],
    /// Best effort (GAMMA): for the network; a ring is always reliable.
    pub how: Reliability,
    /// May go by single copy (the receiver reads the sender's memory) where both sides can.
    pub single_copy: bool,
    /// May go by rendezvous where the message is large and its context matched (see
    /// [`Step::Rendezvous`]); else it is pipelined through the ring.
    pub rendezvous: bool,
    cursor: Cursor,
    /// Where the single-copy descriptor sits, once written.
    rndv: Option<u64>,
}

impl<'a> Out<'a> {
    pub fn new(context: u32, tag: u32, data: &'a [u8], how: Reliability) -> Out<'a> {
        Out {
            context,
            tag,
            data,
            how,
            single_copy: true,
            rendezvous: true,
            cursor: Cursor::default(),
            rndv: None,
        }
    }
}

/// The path to one rank.
#[derive(Clone, Copy)]
pub(crate) enum Path<'w> {
    /// Through the ring to local rank `dst`.
    Ring { w: &'w World, dst: usize },
    /// Through the network engine to job rank `dst`.
    Net { w: &'w World, dst: usize },
}

impl World {
    /// The path to job rank `rank`.
    #[inline]
    pub(crate) fn path(&self, rank: usize) -> Result<Path<'_>, SendError> {
        self.check_rank(rank)?;
        Ok(match self.route(rank) {
            Some(dst) => Path::Ring { w: self, dst },
            None => Path::Net { w: self, dst: rank },
        })
    }
}

impl Path<'_> {
    /// One non-blocking step of a send that is done when the caller's bytes may be reused:
    /// in the ring (or read by the receiver, for single copy), or copied by the network engine.
    #[inline]
    pub fn step(&self, out: &mut Out<'_>) -> Result<Step, SendError> {
        match *self {
            Path::Ring { w, dst } => {
                // One borrow for every check (each borrow marks and checks the owner's flag).
                let mut e = w.eng();
                if let Some(pos) = out.rndv {
                    // The receiver copies from our memory; the bytes are free once it has.
                    // Asked before its fate: it may read, then leave.
                    match e.rndv_state(dst, pos) {
                        RndvState::Done => return Ok(Step::Done),
                        RndvState::Failed => {
                            return Err(SendError::SingleCopyFailed {
                                rank: w.inner.l2g[dst],
                            })
                        }
                        RndvState::Pending => e.help_descriptor(dst, pos, out.data),
                    }
                }
                if let Some(l) = e.send_dead_end(dst) {
                    // The receiver may have read our bytes and left between the question above
                    // and this one (it finishes after it reads): ask again, now that its fate
                    // is known, before calling the send failed.
                    if let Some(pos) = out.rndv {
                        if matches!(e.rndv_state(dst, pos), RndvState::Done) {
                            return Ok(Step::Done);
                        }
                    }
                    return Err(l.into());
                }
                if !out.cursor.started && out.rndv.is_none() {
                    if out.rendezvous && e.wants_rendezvous(dst, out.context, out.data.len()) {
                        return Ok(Step::Rendezvous);
                    }
                    if dst == e.me() && out.data.len() > e.ring_payload_capacity() {
                        // Only this thread could make room: it would wait for ever.
                        return Err(SendError::ToSelfTooLarge {
                            len: out.data.len(),
                            max: e.ring_payload_capacity(),
                        });
                    }
                    // Behind the queued sends to the same rank, in order.
                    if e.has_pending(dst) {
                        e.drive_pending();
                        if e.has_pending(dst) {
                            return Ok(Step::Busy);
                        }
                    }
                    if out.single_copy && e.use_single_copy(dst, out.data.len()) {
                        match e.push_descriptor(dst, out.tag, out.context, out.data) {
                            Some(pos) => {
                                e.ring_doorbell(dst);
                                out.rndv = Some(pos);
                            }
                            None => return Ok(Step::Busy),
                        }
                    }
                }
                if out.rndv.is_some() {
                    // Written now or before: done when the receiver has read it (above).
                    return Ok(Step::Busy);
                }
                let before = out.cursor.off;
                let done = e.push(dst, out.tag, out.context, out.data, &mut out.cursor);
                let moved = out.cursor.off != before;
                if done || moved {
                    e.ring_doorbell(dst);
                }
                Ok(match (done, moved) {
                    (true, _) => Step::Done,
                    (false, true) => Step::Partial,
                    (false, false) => Step::Busy,
                })
            }
            Path::Net { w, dst } => {
                // No pump first: a message that fits goes out at once, one system call; behind
                // non-blocking sends still waiting for the engine, it waits its turn.
                let r = {
                    let mut n = w.net();
                    // A large reliable message is lent to the engine instead of copied into it
                    // (`Endpoint::send_rendezvous`): the engine reads it as it sends, and the
                    // call returns once at most a window is to go, the rest copied then.
                    if out.rendezvous
                        && out.how == Reliability::Reliable
                        && out.data.len() > n.rndv_threshold()
                    {
                        return Ok(Step::Rendezvous);
                    }
                    if n.has_waiting(dst) {
                        Err(Refused::Full)
                    } else {
                        n.try_send(dst, out.tag, out.context, out.data, out.how)
                    }
                };
                match r {
                    Ok(()) => {
                        let mut e = w.eng();
                        e.count(Counter::MsgsSent, 1);
                        e.count(Counter::BytesSent, out.data.len() as u64);
                        Ok(Step::Done)
                    }
                    Err(why) => self.net_refused(why),
                }
            }
        }
    }

    /// Hands `data` to the network engine for job rank `dst`, waiting while its queue is full.
    fn hand_over(
        &self,
        dst: usize,
        context: u32,
        tag: u32,
        data: Payload,
    ) -> Result<SendState, SendError> {
        let Path::Net { w, .. } = *self else {
            unreachable!("only the network takes buffers over")
        };
        let len = data.len() as u64;
        let mut n = w.net();
        let r = if n.has_waiting(dst) {
            Err((data, Refused::Full))
        } else {
            n.hand_over(dst, tag, context, data)
        };
        let state = match r {
            Ok(id) => SendState::Net(dst, id),
            // The engine's queue to the peer is full: the send waits in order and goes when
            // there is room (a non-blocking send does not wait for the receiver).
            Err((d, Refused::Full)) => SendState::NetWaiting(
                dst,
                n.queue_send(dst, tag, context, d, Reliability::Reliable),
            ),
            Err((_, why)) => {
                drop(n);
                self.net_refused(why)?;
                unreachable!("only Full is not an error")
            }
        };
        drop(n);
        let mut e = w.eng();
        e.count(Counter::MsgsSent, 1);
        e.count(Counter::BytesSent, len);
        e.count(Counter::NetHandovers, 1);
        Ok(state)
    }

    /// What a refusal of the network engine means to a send.
    fn net_refused(&self, why: Refused) -> Result<Step, SendError> {
        let Path::Net { w, dst } = *self else {
            unreachable!("network refusals come from the network path")
        };
        match why {
            // progress() pumps the network: acknowledgements make room.
            Refused::Full => Ok(Step::Busy),
            Refused::Lost => {
                // Lost or finished: the pump collects which from the engine's events.
                let mut n = w.net();
                n.pump();
                let fate = n.fate_of(dst).unwrap_or(crate::Fate::Unreachable);
                Err(why.error(dst, fate))
            }
            Refused::TooLarge { .. } | Refused::UnknownPeer => {
                Err(why.error(dst, crate::Fate::Unreachable))
            }
        }
    }

    /// Whether a whole message of `len` bytes would go at once now (try_send's question). A
    /// message that can never go at once is an error.
    pub fn can_take(&self, len: usize) -> Result<bool, SendError> {
        match *self {
            Path::Ring { w, dst } => {
                let mut e = w.eng();
                let max = e.ring_payload_capacity();
                if len > max {
                    return Err(SendError::TooLargeForTrySend { len, max });
                }
                if let Some(l) = e.send_dead_end(dst) {
                    return Err(l.into());
                }
                e.drive_pending();
                let room = e.can_fit(dst, len);
                if !room {
                    e.count(Counter::BackPressure, 1);
                }
                Ok(room)
            }
            // The network engine takes a message whole or not at all: step says.
            Path::Net { .. } => Ok(true),
        }
    }

    /// Sends a whole message if it goes at once, by neither single copy nor rendezvous (what a
    /// send of its size would do anyway): through the ring to a shared-memory peer, in one
    /// borrow of the engine, or into the network engine for a peer on another host: true when
    /// sent. False sends nothing: a full ring or network window, sends queued before it, or a
    /// message for single copy or rendezvous. A dead peer is an error. The fast path of a
    /// non-blocking send, which then needs no request.
    #[inline]
    pub fn try_eager(
        &self,
        context: u32,
        tag: u32,
        data: &[u8],
        how: Reliability,
    ) -> Result<bool, SendError> {
        match *self {
            Path::Ring { w, dst } => {
                let mut e = w.eng();
                let len = data.len();
                if len > e.ring_payload_capacity()
                    || e.use_single_copy(dst, len)
                    || e.wants_rendezvous(dst, context, len)
                {
                    return Ok(false);
                }
                if let Some(l) = e.send_dead_end(dst) {
                    return Err(l.into());
                }
                if e.has_pending(dst) {
                    e.drive_pending();
                    if e.has_pending(dst) {
                        return Ok(false);
                    }
                }
                // A message of one record goes whole or not at all: only one in fragments
                // asks for room first, so that it never goes in part.
                if len > e.max_payload() && !e.can_fit(dst, len) {
                    return Ok(false);
                }
                let mut cursor = Cursor::default();
                let done = e.push(dst, tag, context, data, &mut cursor);
                debug_assert!(
                    done || cursor.off == 0,
                    "a message goes whole or not at all"
                );
                if done {
                    e.ring_doorbell(dst);
                }
                Ok(done)
            }
            Path::Net { w, dst } => {
                // What `step` does with a message below the rendezvous threshold: the engine
                // copies it and owns it from here (it resends from its copy), so the data may
                // be reused at once. Not behind sends still waiting for the engine (order).
                let r = {
                    let mut n = w.net();
                    if (how == Reliability::Reliable && data.len() > n.rndv_threshold())
                        || n.has_waiting(dst)
                    {
                        return Ok(false);
                    }
                    n.try_send(dst, tag, context, data, how)
                };
                match r {
                    Ok(()) => {
                        let mut e = w.eng();
                        e.count(Counter::MsgsSent, 1);
                        e.count(Counter::BytesSent, data.len() as u64);
                        Ok(true)
                    }
                    Err(Refused::Full) => Ok(false),
                    Err(why) => self.net_refused(why).map(|_| false),
                }
            }
        }
    }

    /// One step of a send of `len` bytes that `fill` writes in place: into a ring record (no
    /// copy on the sending side), or into a network buffer that `staged` keeps until it goes.
    /// `fill` runs once.
    pub fn step_with(
        &self,
        context: u32,
        tag: u32,
        len: usize,
        how: Reliability,
        fill: &mut Option<impl FnOnce(&mut [u8])>,
        staged: &mut Option<Vec<u8>>,
    ) -> Result<Step, SendError> {
        match *self {
            Path::Ring { w, dst } => {
                let max = w.max_inline();
                if len > max {
                    return Err(SendError::TooLargeForSendWith { len, max });
                }
                let mut e = w.eng();
                if let Some(l) = e.send_dead_end(dst) {
                    return Err(l.into());
                }
                if e.has_pending(dst) {
                    e.drive_pending();
                    if e.has_pending(dst) {
                        return Ok(Step::Busy);
                    }
                }
                let meta = volley_shm::Meta {
                    kind: Kind::Whole,
                    tag,
                    context,
                    total_len: len as u64,
                };
                let sent = e.try_push_with(dst, meta, len, |buf| {
                    (fill.take().expect("fill runs once"))(buf)
                });
                if !sent {
                    e.count(Counter::BackPressure, 1);
                    return Ok(Step::Busy);
                }
                e.count(Counter::MsgsSent, 1);
                e.count(Counter::InlineSends, 1);
                e.count(Counter::BytesSent, len as u64);
                e.ring_doorbell(dst);
                Ok(Step::Done)
            }
            Path::Net { w, dst } => {
                // The same limit as into a ring, so a program does not change behaviour with
                // where its peer runs.
                let max = w.max_inline();
                if len > max {
                    return Err(SendError::TooLargeForSendWith { len, max });
                }
                // Filled once into a buffer of the network engine's, which then takes that
                // buffer over (no second copy); refused for now, it waits in `staged`.
                let buf = match staged.take() {
                    Some(b) => b,
                    None => {
                        let mut b = w.net().buffer(len);
                        (fill.take().expect("fill runs once"))(&mut b);
                        b
                    }
                };
                let r = {
                    let mut n = w.net();
                    if n.has_waiting(dst) {
                        // Behind non-blocking sends waiting for the engine: its turn comes.
                        Err((buf, Refused::Full))
                    } else {
                        n.send_owned(dst, tag, context, buf, how)
                    }
                };
                match r {
                    Ok(()) => {
                        let mut e = w.eng();
                        e.count(Counter::MsgsSent, 1);
                        e.count(Counter::BytesSent, len as u64);
                        Ok(Step::Done)
                    }
                    Err((b, Refused::Full)) => {
                        *staged = Some(b);
                        self.net_refused(Refused::Full)
                    }
                    Err((_, why)) => self.net_refused(why),
                }
            }
        }
    }

    /// Starts a non-blocking send of `data`: what can go now goes, the rest is handed over to
    /// go on while the caller does other things (queued in order behind earlier sends, or lent
    /// to the progress thread). The network engine takes large owned or lent bytes as they
    /// are and copies the rest (either waits in order while its queue to the rank is full).
    pub fn start(
        &self,
        context: u32,
        tag: u32,
        data: Payload,
        how: Reliability,
    ) -> Result<SendState, SendError> {
        match *self {
            Path::Ring { w, dst } => w.eng().start_send(dst, tag, context, data),
            Path::Net { w, dst } => {
                // A large owned buffer or lent memory is handed to the network engine, which
                // reads it as it sends and lets go once the peer acknowledged it: no copy (the
                // liveness thread keeps acknowledgements coming while the application
                // computes). Anything else is copied, and free at once.
                if w.net().hands_over(&data, how) {
                    return self.hand_over(dst, context, tag, data);
                }
                // One try (the network engine copies the message); refused for now, the send
                // waits in order for room, and the request completes once it is copied.
                let len = data.len();
                let mut out = Out::new(context, tag, &data, how);
                out.rendezvous = false;
                if self.step(&mut out)? == Step::Done {
                    return Ok(SendState::Done(data));
                }
                let ticket = w.net().queue_send(dst, tag, context, data, how);
                let mut e = w.eng();
                e.count(Counter::MsgsSent, 1);
                e.count(Counter::BytesSent, len as u64);
                Ok(SendState::NetWaiting(dst, ticket))
            }
        }
    }
}

impl World {
    /// Steps `out` along `path` until done, making progress while it is busy (a full ring or
    /// queue waits for the receiver; handlers and queued sends run meanwhile).
    pub(crate) fn wait_steps(&self, path: &Path<'_>, out: &mut Out<'_>) -> Result<(), SendError> {
        // A caller that waits here has chosen the pipeline.
        out.rendezvous = false;
        let mut b = crate::backoff::Backoff::new();
        let mut seen = self.moved();
        loop {
            match path.step(out)? {
                Step::Done => return Ok(()),
                Step::Partial => b.reset(),
                Step::Busy | Step::Rendezvous => {}
            }
            let _ = self.progress();
            // A full network queue empties as acknowledgements come: not a stuck wait.
            b.snooze_in(self, &mut seen);
        }
    }
}
