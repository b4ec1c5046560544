//! The optional progress thread (the event-driven design of seed 001): it moves large
//! non-blocking sends through their rings while the application computes.
//!
//! The rings stay single-producer without a lock: when a non-blocking send cannot finish at
//! once, the engine *lends* the producer end of that destination's ring to this thread together
//! with the message, and takes it back when the thread has written the whole message. While it is
//! lent, later sends to that rank queue behind it (order is kept). The channel back is only
//! polled while something is lent, so the hot path pays nothing when the thread is idle. The
//! thread sleeps on its channel when it has nothing to do.
//!
//! A rendezvous (`engine::rendezvous`) is lent whole: the thread writes the request to send,
//! reads the receiver's answer in the ring's grant queue (which it alone reads while it holds the
//! producer) and streams the data, so a large matched send completes while the application
//! computes. The thread serves every lent send in turn, so one whose receiver has not answered
//! yet holds up no other; and when the engine has more for the same rank, an unanswered
//! rendezvous goes back to it with the producer (the receiver may want what is queued behind it
//! first: a flood received last first).

use crate::backoff::Backoff;
use crate::counters::{Counter, Counters};
use crate::engine::{push_records, ring_doorbell_of, Cursor, Payload};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, TryRecvError};
use std::sync::{Arc, Mutex};
use volley_shm::{Grant, Producer, Rts, Segment, RTS_SINGLE_COPY};
use volley_sys::EventFd;

/// What a send handed to the thread looks like from the application's side.
pub(crate) struct LentState {
    /// Set (Release) once the whole message is in the ring.
    pub done: AtomicBool,
    /// The destination went away before the message was written.
    pub failed: AtomicBool,
    /// The buffer, given back to the application when done.
    pub data: Mutex<Option<Payload>>,
}

pub(crate) struct Lend {
    pub dst: usize,
    pub producer: Producer,
    pub tag: u32,
    pub context: u32,
    pub data: Payload,
    pub cursor: Cursor,
    pub state: Arc<LentState>,
    /// Goes by rendezvous (see [`RdvLend`]).
    pub rendezvous: Option<RdvLend>,
}

/// A rendezvous lent to the thread.
pub(crate) struct RdvLend {
    /// The token its request to send carries (reserved by the engine).
    pub token: u32,
    /// The receiver may copy it by single copy.
    pub single: bool,
    /// Set by the engine when it has something else for this destination: a rendezvous still
    /// waiting for its answer then goes back to the engine with the producer, so that what is
    /// queued behind it can go (the receiver may want that first).
    pub hand_back: Arc<AtomicBool>,
}

/// A rendezvous the thread gives back before its answer came (see [`RdvLend::hand_back`]): its
/// request to send is in the ring.
pub(crate) struct Handback {
    pub tag: u32,
    pub context: u32,
    pub data: Payload,
    pub token: u32,
    pub state: Arc<LentState>,
}

pub(crate) enum ToThread {
    Lend(Box<Lend>),
    Stop,
}

/// A producer coming back, with what the thread counted while it had it.
pub(crate) struct Returned {
    pub dst: usize,
    pub producer: Producer,
    pub counters: Counters,
    /// A rendezvous the thread finished: its token is free again.
    pub token_done: Option<u32>,
    /// A rendezvous given back unanswered.
    pub handback: Option<Handback>,
}

pub(crate) struct ProgressThread {
    pub to: Sender<ToThread>,
    pub from: Receiver<Returned>,
    pub handle: Option<std::thread::JoinHandle<()>>,
    /// Producers currently with the thread.
    pub lent: usize,
}

impl ProgressThread {
    pub fn start(
        seg: Arc<Segment>,
        me: usize,
        doorbells: &[EventFd],
    ) -> std::io::Result<ProgressThread> {
        let bells = doorbells
            .iter()
            .map(EventFd::try_clone)
            .collect::<Result<Vec<_>, _>>()?;
        let (to, rx) = std::sync::mpsc::channel();
        let (tx, from) = std::sync::mpsc::channel();
        let handle = std::thread::Builder::new()
            .name("volley-progress".into())
            .spawn(move || run(rx, tx, seg, me, bells))?;
        Ok(ProgressThread {
            to,
            from,
            handle: Some(handle),
            lent: 0,
        })
    }
}

fn peer_gone(seg: &Segment, dst: usize) -> bool {
    // Acquire: pairs with the Release in bump_epoch after the launcher or the rank wrote it.
    seg.state_epoch();
    seg.rank(dst).state.load(Ordering::Relaxed) >= volley_shm::RANK_FINALIZED
}

/// Where a lent rendezvous stands.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Rdv {
    /// The request to send is not in the ring yet.
    Ask,
    /// Waiting for the receiver's answer.
    Wait,
    /// Streaming with this grant id.
    Stream(u32),
}

/// A lent send being served.
struct Job {
    l: Lend,
    rdv: Option<Rdv>,
    counters: Counters,
}

impl Job {
    /// Moves the send on. Returns whether it is over (written, or its destination gone).
    fn step(&mut self, seg: &Segment, me: usize, bells: &[EventFd]) -> (bool, bool) {
        let Job { l, rdv, counters } = self;
        let mut moved = false;
        let complete = match rdv {
            None => {
                let before = l.cursor.off;
                let c = push_records(
                    &mut l.producer,
                    counters,
                    l.tag,
                    l.context,
                    &l.data,
                    &mut l.cursor,
                );
                moved = c || l.cursor.off != before;
                c
            }
            Some(Rdv::Ask) => {
                let r = l.rendezvous.as_ref().expect("a rendezvous");
                let single = r.single;
                let rts = Rts {
                    addr: if single { l.data.as_ptr() as u64 } else { 0 },
                    len: l.data.len() as u64,
                    token: r.token,
                    flags: if single { RTS_SINGLE_COPY } else { 0 },
                };
                if l.producer.push_rts(l.tag, l.context, &rts) {
                    counters.add(Counter::MsgsSent, 1);
                    counters.add(Counter::BytesSent, l.data.len() as u64);
                    *rdv = Some(Rdv::Wait);
                    moved = true;
                }
                false
            }
            Some(Rdv::Wait) => {
                let token = l.rendezvous.as_ref().expect("a rendezvous").token;
                match seg.take_grant(me, l.dst) {
                    Some(Grant::Done { token: t }) if t == token => {
                        counters.add(Counter::SingleCopySends, 1);
                        true
                    }
                    Some(Grant::Clear { token: t, gid }) if t == token => {
                        *rdv = Some(Rdv::Stream(gid));
                        false
                    }
                    Some(Grant::Help { token: t, epoch }) if t == token && !l.data.is_packed() => {
                        let n = crate::engine::help_copy(seg, me, l.dst, token, epoch, &l.data);
                        counters.add(Counter::ChunksHelped, n);
                        false
                    }
                    Some(_) => {
                        counters.add(Counter::BadGrants, 1);
                        false
                    }
                    None => false,
                }
            }
            Some(Rdv::Stream(gid)) => {
                let gid = *gid;
                let before = l.cursor.off;
                let p = match &mut l.data {
                    Payload::Packed(p) => {
                        let total = p.len();
                        l.producer.push_stream_with(
                            gid,
                            l.context,
                            total,
                            &mut l.cursor,
                            |off, piece| p.pack(off, piece),
                        )
                    }
                    d => l.producer.push_stream(gid, l.context, d, &mut l.cursor),
                };
                counters.add(Counter::Fragments, p.fragments as u64);
                moved = l.cursor.off != before;
                if p.done {
                    counters.add(Counter::RendezvousStreams, 1);
                }
                p.done
            }
        };
        if moved || complete {
            ring_doorbell_of(seg, bells, me, l.dst, counters);
        }
        if complete {
            return (true, false);
        }
        if peer_gone(seg, l.dst) {
            l.state.failed.store(true, Ordering::Relaxed);
            return (true, moved);
        }
        (false, moved)
    }
}

fn run(
    rx: Receiver<ToThread>,
    tx: Sender<Returned>,
    seg: Arc<Segment>,
    me: usize,
    bells: Vec<EventFd>,
) {
    let mut jobs: Vec<Job> = Vec::new();
    let mut backoff = Backoff::new();
    loop {
        // New work: wait for it when idle, else only look.
        let msg = if jobs.is_empty() {
            rx.recv().map_err(|_| TryRecvError::Disconnected)
        } else {
            rx.try_recv()
        };
        match msg {
            Ok(ToThread::Lend(l)) => {
                let rdv = l.rendezvous.as_ref().map(|_| Rdv::Ask);
                if rdv.is_some() {
                    let mut counters = Counters::default();
                    counters.add(Counter::RendezvousSends, 1);
                    jobs.push(Job {
                        l: *l,
                        rdv,
                        counters,
                    });
                } else {
                    jobs.push(Job {
                        l: *l,
                        rdv,
                        counters: Counters::default(),
                    });
                }
                continue;
            }
            Ok(ToThread::Stop) | Err(TryRecvError::Disconnected) => {
                if jobs.is_empty() {
                    return;
                }
            }
            Err(TryRecvError::Empty) => {}
        }
        let mut any_moved = false;
        let mut i = 0;
        while i < jobs.len() {
            // A rendezvous still unanswered goes back when the engine has more for its rank.
            let back = jobs[i].rdv == Some(Rdv::Wait)
                && jobs[i]
                    .l
                    .rendezvous
                    .as_ref()
                    .is_some_and(|r| r.hand_back.load(Ordering::Relaxed));
            if back {
                let Job { l, counters, .. } = jobs.swap_remove(i);
                let token = l.rendezvous.as_ref().expect("a rendezvous").token;
                let r = Returned {
                    dst: l.dst,
                    producer: l.producer,
                    counters,
                    token_done: None,
                    handback: Some(Handback {
                        tag: l.tag,
                        context: l.context,
                        data: l.data,
                        token,
                        state: l.state,
                    }),
                };
                if tx.send(r).is_err() {
                    return;
                }
                continue;
            }
            let (over, moved) = jobs[i].step(&seg, me, &bells);
            any_moved |= moved;
            if !over {
                i += 1;
                continue;
            }
            let Job {
                l, mut counters, ..
            } = jobs.swap_remove(i);
            counters.add(Counter::ProgressThreadSends, 1);
            let token_done = l.rendezvous.as_ref().map(|r| r.token);
            *l.state.data.lock().unwrap_or_else(|p| p.into_inner()) = Some(l.data);
            // SYNC: Release; pairs with the Acquire in SendRequest::is_complete/test: the buffer
            // is in `data` and the message in the ring before the application sees done.
            l.state.done.store(true, Ordering::Release);
            if tx
                .send(Returned {
                    dst: l.dst,
                    producer: l.producer,
                    counters,
                    token_done,
                    handback: None,
                })
                .is_err()
            {
                return;
            }
        }
        if any_moved {
            backoff.reset();
        } else if !jobs.is_empty() {
            // Receivers are behind, or have not answered yet.
            backoff.snooze();
        }
    }
}
