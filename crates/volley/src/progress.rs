//! The optional progress thread (the event-driven design of seed 001): it moves large
//! non-blocking sends through their rings while the application computes.
//!
//! The rings stay single-producer without a lock: when a non-blocking send cannot finish at
//! once, the engine *lends* the producer end of that destination's ring to this thread together
//! with the message, and takes it back when the thread has written the whole message. While it is
//! lent, later sends to that rank queue behind it (order is kept). The channel back is only
//! polled while something is lent, so the hot path pays nothing when the thread is idle. The
//! thread sleeps on its channel when it has nothing to do.

use crate::backoff::Backoff;
use crate::counters::{Counter, Counters};
use crate::engine::{push_records, ring_doorbell_of, Cursor, Payload};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender};
use std::sync::{Arc, Mutex};
use volley_shm::{Producer, Segment};
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

fn run(
    rx: Receiver<ToThread>,
    tx: Sender<Returned>,
    seg: Arc<Segment>,
    me: usize,
    bells: Vec<EventFd>,
) {
    while let Ok(ToThread::Lend(l)) = rx.recv() {
        let Lend {
            dst,
            mut producer,
            tag,
            context,
            data,
            mut cursor,
            state,
        } = *l;
        let mut counters = Counters::default();
        let mut backoff = Backoff::new();
        loop {
            let before = cursor.off;
            let complete = push_records(
                &mut producer,
                &mut counters,
                tag,
                context,
                &data,
                &mut cursor,
            );
            if complete || cursor.off != before {
                ring_doorbell_of(&seg, &bells, me, dst, &mut counters);
                backoff.reset();
            }
            if complete {
                break;
            }
            if peer_gone(&seg, dst) {
                state.failed.store(true, Ordering::Relaxed);
                break;
            }
            // The receiver is behind.
            backoff.snooze();
        }
        counters.add(Counter::ProgressThreadSends, 1);
        *state.data.lock().unwrap_or_else(|p| p.into_inner()) = Some(data);
        // SYNC: Release; pairs with the Acquire in SendRequest::is_complete/test: the buffer is
        // in `data` and the message in the ring before the application sees done.
        state.done.store(true, Ordering::Release);
        if tx
            .send(Returned {
                dst,
                producer,
                counters,
            })
            .is_err()
        {
            return;
        }
    }
}
