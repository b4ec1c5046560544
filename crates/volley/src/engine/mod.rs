//! The progress engine: the state of one process's side of the job and the non-blocking steps
//! that move messages. It never waits and never calls user code; the modules above it (`path`,
//! `send`, `recv`, `matched`, `request`, `active`, `wait`) build the waiting operations and the
//! handler calls on top, outside any borrow of the engine. The shared-memory protocol it follows
//! (rank states, doorbells, records of a message) is `volley_shm::control`.

use crate::counters::{Counter, Counters};
use crate::error::{Fate, PeerLost, RecvError};
use crate::matching::Pattern;
use std::collections::VecDeque;
use std::sync::Arc;
use volley_shm::{Consumer, Head, Kind, Producer, RankState, RecordInfo, Segment};
use volley_sys::EventFd;

/// What a local port is bound to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum PortKind {
    Endpoint,
    Active,
}

pub(crate) use volley_shm::Cursor;

mod gather;
mod rendezvous;
pub(crate) use rendezvous::{help_copy, SIMULATE_HELP_REFUSAL};
mod send;
mod unexpected;

pub(crate) use gather::Dest;

/// The bytes of a non-blocking send: a buffer the request owns and gives back, or the caller's
/// memory lent for the length of the request (the loan ends when this is dropped).
pub(crate) enum Payload {
    Owned(Vec<u8>),
    Lent(volley_sys::lend::RawBuf),
    /// Bytes a packer makes piece by piece (a non-contiguous datatype): only ever streamed by
    /// rendezvous, straight into the ring's records or (to another host) into the packets.
    Packed(Box<dyn crate::Packer>),
}

impl Payload {
    /// The owned buffer back (empty for lent memory, whose loan this ends).
    pub fn into_vec(self) -> Vec<u8> {
        match self {
            Payload::Owned(v) => v,
            Payload::Lent(_) | Payload::Packed(_) => Vec::new(),
        }
    }

    /// The message's length.
    #[inline]
    pub fn len(&self) -> usize {
        match self {
            Payload::Owned(v) => v.len(),
            Payload::Lent(b) => b.len(),
            Payload::Packed(p) => p.len(),
        }
    }

    /// Whether the bytes are made piece by piece (no address to hand out for single copy).
    pub fn is_packed(&self) -> bool {
        matches!(self, Payload::Packed(_))
    }
}

impl Default for Payload {
    fn default() -> Payload {
        Payload::Owned(Vec::new())
    }
}

impl std::ops::Deref for Payload {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Payload::Owned(v) => v,
            Payload::Lent(b) => b.as_slice(),
            Payload::Packed(_) => {
                unreachable!("packed bytes are only streamed, piece by piece (rendezvous.rs, or the network engine)")
            }
        }
    }
}

/// A non-blocking send that found its ring full, queued in order behind earlier ones.
pub(crate) struct Pending {
    pub dst: usize,
    pub tag: u32,
    pub context: u32,
    pub data: Payload,
    pub cursor: Cursor,
    /// Goes by single copy: only a descriptor enters the ring.
    pub rndv: bool,
    /// Position of the descriptor once written; the data must stay put until the receiver
    /// has copied it.
    pub rndv_pos: Option<u64>,
    pub done: bool,
    pub failed: bool,
    /// Goes by rendezvous (see `rendezvous`): the token its request to send carries.
    pub rts: Option<u32>,
    /// The request to send is in the ring.
    pub rts_sent: bool,
    /// The receiver's grant: the data is being streamed with this id.
    pub gid: Option<u32>,
    /// A rendezvous the progress thread gave back: the application's request watches this.
    pub lent: Option<Arc<crate::progress::LentState>>,
}

impl Pending {
    pub fn new(
        dst: usize,
        tag: u32,
        context: u32,
        data: Payload,
        cursor: Cursor,
        rndv: bool,
        rndv_pos: Option<u64>,
    ) -> Pending {
        Pending {
            dst,
            tag,
            context,
            data,
            cursor,
            rndv,
            rndv_pos,
            done: false,
            failed: false,
            rts: None,
            rts_sent: false,
            gid: None,
            lent: None,
        }
    }
}

/// A message larger than one record, being gathered for recv() or an active port.
pub(crate) struct Partial {
    pub port: u32,
    pub src: usize,
    pub tag: u32,
    pub total: usize,
    pub buf: Vec<u8>,
}

/// Where a matched message is: in its ring, or drained out of it (index into the source's
/// drained queue).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Hit {
    Ring(RecordInfo),
    Drained(usize),
}

/// The outcome of one pass over the incoming rings on behalf of a port.
pub(crate) enum Poll {
    /// A record for the port at the head of the ring from `src`.
    Found(usize, RecordInfo),
    /// A record for an active port at the head of the ring from `src`.
    Active(usize, RecordInfo),
    Nothing,
}

pub(crate) struct Engine {
    seg: Arc<Segment>,
    me: usize,
    n: usize,
    /// Producer ends of the rings to each rank; None while lent to the progress thread.
    tx: Vec<Option<Producer>>,
    rx: Vec<Consumer>,
    doorbells: Vec<EventFd>,
    ports: Vec<(u32, PortKind)>,
    /// Bumped whenever `ports` changes (invalidates the rings' scan memos).
    ports_gen: u64,
    pending: Vec<VecDeque<std::sync::Arc<volley_sys::Exclusive<Pending>>>>,
    npending: usize,
    /// Single-copy sends whose descriptor is in a ring and whose data the receiver has not
    /// copied yet. They keep their buffers alive.
    inflight: Vec<std::sync::Arc<volley_sys::Exclusive<Pending>>>,
    partials: Vec<Partial>,
    counters: Counters,
    max_payload: usize,
    ring_payload_capacity: usize,
    /// Fates of the other ranks as last read from the segment.
    fates: Vec<Option<Fate>>,
    /// Other ranks with a fate, and those whose fate is a failure (counted by `refresh_fates`,
    /// so that a receive from any source that finds nothing asks in O(1) whether anything can
    /// still come, not once per rank of the host on every empty pass).
    gone: usize,
    failed: usize,
    seen_epoch: u64,
    /// Whether our doorbell is armed (we are about to sleep or an fd user waits).
    armed: bool,
    /// A sender rang the doorbell while we were armed: its count is still in the eventfd, which
    /// stays readable until drained (a spent wake-up for a caller that polls the descriptor).
    rung: bool,
    rr: usize,
    /// Assembly buffers returned by dropped messages, reused by the next large recv().
    spare: Option<Vec<u8>>,
    /// This process can use single copy (as sender and receiver).
    single_copy: bool,
    /// A receive copying a single-copy rendezvous lets its sender help (`volley_shm::coop`)...
    single_copy_help: bool,
    /// ...when the message has at least this many bytes.
    help_from: usize,
    /// Receives look only at the rings the ready summary marks (see `ready_sources`), not at
    /// every local peer's.
    summary: bool,
    /// Messages in [single_copy_threshold, single_copy_max) go by single copy.
    single_copy_threshold: usize,
    single_copy_max: usize,
    /// The progress thread, when this process started one.
    progress: Option<crate::progress::ProgressThread>,
    /// The job rank of each local rank (the rings are indexed by local rank).
    l2g: Vec<usize>,
    /// Other ranks of the job are on other hosts: "every local peer finished" does not mean
    /// nothing more can arrive.
    multi_node: bool,
    /// Unexpected messages drained out of each ring (by local source), oldest first; see
    /// `unexpected`.
    drained: Vec<VecDeque<unexpected::Drained>>,
    drained_bytes: usize,
    /// Messages in `drained`, all sources together.
    ndrained: usize,
    drain_budget: usize,
    /// Whether this process said once that its drain budget held a sender back.
    told_budget_full: bool,
    /// Whether this process asks its senders for requests to send instead of eager data (its
    /// drain budget is spent; see `unexpected`).
    asked_descriptors: bool,
    /// Contexts received through the matcher: only their messages are drained (a
    /// Directed-Point port reads its ring in arrival order).
    matched_contexts: Vec<u32>,
    /// Buffers of drained messages, for reuse.
    drain_pool: Vec<Vec<u8>>,
    /// Rendezvous sends by token (see `rendezvous`), until answered and streamed; free tokens.
    rts: Vec<Option<Arc<volley_sys::Exclusive<Pending>>>>,
    rts_free: Vec<u32>,
    nrts: usize,
    /// Per destination: rendezvous sends in the table.
    rts_out: Vec<u32>,
    /// Per destination: granted rendezvous whose data goes through the ring, oldest grant first.
    streams: Vec<VecDeque<Arc<volley_sys::Exclusive<Pending>>>>,
    nstreams: usize,
    /// Per source: answers to its requests to send that found its grant queue full.
    grant_backlog: Vec<VecDeque<volley_shm::Grant>>,
    nbacklog: usize,
    /// The grant id the next granted rendezvous gets.
    next_gid: u32,
    /// Largest matched message sent eagerly; larger ones go by rendezvous.
    eager: usize,
    /// Per destination: the hand-back flag of a rendezvous lent to the progress thread.
    lent_rdv: Vec<Option<Arc<std::sync::atomic::AtomicBool>>>,
}

impl Engine {
    /// Adds `n` to counter `c` (a plain add: the engine has one owner at a time).
    #[inline]
    pub fn count(&mut self, c: Counter, n: u64) {
        self.counters.add(c, n);
    }

    /// A number that grows whenever a message or a fragment moves in or out of this process's
    /// rings: a waiting loop that sees it change backs off from the start again.
    #[inline]
    pub fn activity(&self) -> u64 {
        let v = self.counters.values();
        v[Counter::Fragments as usize]
            + v[Counter::MsgsSent as usize]
            + v[Counter::MsgsRecvd as usize]
    }

    /// The counters' values, in the order of `counters::COUNTERS`.
    pub fn counter_values(&self) -> &[u64] {
        self.counters.values()
    }

    /// This process's local rank.
    #[inline]
    pub fn me(&self) -> usize {
        self.me
    }

    /// The job rank of local rank `li`.
    #[inline]
    pub fn job_rank(&self, li: usize) -> usize {
        self.l2g[li]
    }

    /// The consumer end of the ring from local rank `src`.
    #[inline]
    pub fn rx(&mut self, src: usize) -> &mut Consumer {
        &mut self.rx[src]
    }

    /// Whether sends to `dst` wait in the queue (they go first, in order), or a granted
    /// message is being streamed to it (a message spanning records may not start meanwhile).
    #[inline]
    pub fn has_pending(&self, dst: usize) -> bool {
        !self.pending[dst].is_empty() || self.streaming(dst)
    }

    /// Whether the ring to `dst` takes a whole message of `len` bytes now (none queued before
    /// it, and room).
    pub fn can_fit(&mut self, dst: usize, len: usize) -> bool {
        !self.has_pending(dst)
            && self.tx[dst]
                .as_mut()
                .is_some_and(|tx| tx.can_fit_message(len))
    }

    /// Writes one record of `len` bytes that `fill` writes in place into the ring to `dst`, or
    /// returns false (without calling `fill`) if there is no room now.
    pub fn try_push_with(
        &mut self,
        dst: usize,
        meta: volley_shm::Meta,
        len: usize,
        fill: impl FnOnce(&mut [u8]),
    ) -> bool {
        match self.tx[dst].as_mut() {
            Some(tx) => tx.try_push_with(meta, len, fill),
            None => {
                self.want_producer(dst);
                false
            }
        }
    }

    /// Where the single-copy send whose descriptor sits at `pos` in the ring to `dst` stands.
    pub fn rndv_state(&self, dst: usize, pos: u64) -> volley_shm::RndvState {
        self.seg.rndv_state(self.me, dst, pos)
    }

    /// Largest message of one record; largest message try_send takes.
    pub fn max_payload(&self) -> usize {
        self.max_payload
    }
    pub fn ring_payload_capacity(&self) -> usize {
        self.ring_payload_capacity
    }

    /// A spare assembly buffer, if one was given back.
    pub fn take_spare(&mut self) -> Vec<u8> {
        self.spare.take().unwrap_or_default()
    }

    /// Keeps `v` as the spare assembly buffer if it is larger than the one kept.
    pub fn give_spare(&mut self, v: Vec<u8>) {
        if self
            .spare
            .as_ref()
            .is_none_or(|s| s.capacity() < v.capacity())
        {
            self.spare = Some(v);
        }
    }

    /// Claims `port` for an endpoint or an active port; false if it is taken.
    pub fn claim_port(&mut self, port: u32, kind: PortKind) -> bool {
        if self.port_kind(port).is_some() {
            return false;
        }
        self.ports.push((port, kind));
        self.ports_gen += 1;
        true
    }

    /// Gives `port` back (its messages wait in their rings for the next owner).
    pub fn release_port(&mut self, port: u32) {
        self.ports.retain(|(p, _)| *p != port);
        self.ports_gen += 1;
        self.matched_contexts.retain(|&c| c != port);
    }

    /// Says that `context` is received through the matcher (its messages may be drained).
    pub fn note_matched_context(&mut self, context: u32) {
        if !self.matched_contexts.contains(&context) {
            self.matched_contexts.push(context);
        }
    }

    /// Why nothing more can come for a message half gathered for `port` from a rank that is
    /// gone, if so.
    pub fn partial_dead_end(&mut self, port: u32) -> Option<PeerLost> {
        if self.gone == 0 || self.partials.is_empty() {
            return None;
        }
        let gone: Vec<(usize, crate::Fate)> = self
            .partials
            .iter()
            .filter(|p| p.port == port)
            .filter_map(|p| self.fates[p.src].map(|f| (p.src, f)))
            .collect();
        for (src, fate) in gone {
            // Its sender is gone, but the rest of the message may still sit in the ring (a pass
            // that consumed fragments without completing the message delivers nothing): only a
            // ring with nothing more for the port means it can never be completed.
            let key = (port as u128) | (3 << 125);
            let more = self.rx[src].scan(key, |r| r.context == port);
            if matches!(more, Ok(None)) {
                return Some(PeerLost {
                    rank: self.l2g[src],
                    fate,
                });
            }
        }
        None
    }

    /// Length of the message being gathered for `port` from `src`, if one is.
    pub fn partial_total(&self, port: u32, src: usize) -> Option<usize> {
        self.partials
            .iter()
            .find(|p| p.port == port && p.src == src)
            .map(|p| p.total)
    }

    /// Whether drained message `k` of `src` is a request to send.
    pub fn drained_is_rts(&self, src: usize, k: usize) -> bool {
        self.drained[src][k].rts.is_some()
    }

    /// The envelope of drained message `k` of `src`: (tag, length).
    pub fn drained_envelope(&self, src: usize, k: usize) -> (u32, usize) {
        let d = &self.drained[src][k];
        (d.tag, d.total)
    }

    /// Before the world closes: every queued send goes out, single copies in flight are read
    /// (or their receivers gone), the progress thread gives its rings back and stops. Sends to
    /// a rank that left are reported on stderr (rank `my_rank` says so), never silently lost.
    pub fn finish_sends(&mut self, my_rank: usize) {
        // Nothing is lost: queued sends go out before we say we are finished.
        let mut b = crate::backoff::Backoff::new();
        while self.npending > 0
            || !self.inflight.is_empty()
            || self.nrts > 0
            || self.nbacklog > 0
            || self.progress.as_ref().is_some_and(|p| p.lent > 0)
        {
            self.refresh_fates();
            self.collect_returns();
            self.drive_pending();
            // Buffers of single copies in flight must outlive the receivers' reads.
            let fates = &self.fates;
            self.inflight.retain(|p| {
                let d = p.borrow_mut().dst;
                fates[d].is_none()
            });
            // Answers to requests to send of ranks that left wait for nobody.
            for s in 0..self.n {
                if !self.grant_backlog[s].is_empty() && self.fates[s].is_some() {
                    self.forget_grants_to(s);
                }
            }
            let stuck: Vec<usize> = (0..self.n)
                .filter(|&d| {
                    (!self.pending[d].is_empty() || self.rts_out[d] > 0)
                        && self.send_dead_end(d).is_some()
                })
                .collect();
            for d in stuck {
                let in_queue: Vec<_> = self.pending[d].iter().cloned().collect();
                for p in &in_queue {
                    self.forget_rendezvous(d, p);
                }
                let queued = self.pending[d].len();
                let lost = queued + self.forget_rendezvous_to(d);
                eprintln!(
                    "volley: rank {}: {lost} queued message(s) to rank {d} not delivered: {}",
                    my_rank,
                    self.send_dead_end(d).expect("checked")
                );
                self.npending -= queued;
                self.pending[d].clear();
            }
            b.snooze();
        }
        if let Some(mut p) = self.progress.take() {
            let _ = p.to.send(crate::progress::ToThread::Stop);
            if let Some(h) = p.handle.take() {
                let _ = h.join();
            }
            while let Ok(r) = p.from.try_recv() {
                self.counters.merge(&r.counters);
            }
        }
    }

    /// The job as the world sees it: job rank of each local rank, whether ranks live on other
    /// hosts, the budget for drained unexpected messages and the eager limit of matched ones.
    pub fn set_job(
        &mut self,
        l2g: Vec<usize>,
        multi_node: bool,
        drain_budget: usize,
        eager: usize,
    ) {
        self.l2g = l2g;
        self.multi_node = multi_node;
        self.drain_budget = drain_budget;
        self.eager = eager;
    }

    /// Whether the progress thread runs.
    pub fn has_progress_thread(&self) -> bool {
        self.progress.is_some()
    }

    /// Starts the progress thread if it is not running.
    pub fn start_progress_thread(&mut self) -> std::io::Result<()> {
        if self.progress.is_none() {
            let t =
                crate::progress::ProgressThread::start(self.seg.clone(), self.me, &self.doorbells)?;
            self.progress = Some(t);
        }
        Ok(())
    }

    pub fn new(
        seg: Arc<Segment>,
        me: usize,
        doorbells: Vec<EventFd>,
        single_copy: bool,
        single_copy_threshold: usize,
    ) -> Engine {
        let n = seg.nranks();
        let tx: Vec<Producer> = (0..n).map(|d| seg.producer(me, d)).collect();
        let rx = (0..n).map(|s| seg.consumer(s, me)).collect();
        let max_payload = tx[0].max_payload();
        let ring_payload_capacity =
            (tx[0].capacity_slots() as usize / 2) * volley_shm::SLOT - volley_shm::RECORD_HEADER;
        let tx = tx.into_iter().map(Some).collect();
        // (usize::MAX, never, stays the largest value: `ShmGroup::cross_from` reads it back.)
        seg.announce(
            me,
            std::process::id(),
            single_copy,
            single_copy_threshold as u64,
        );
        Engine {
            seg,
            me,
            n,
            tx,
            rx,
            doorbells,
            ports: Vec::new(),
            ports_gen: 0,
            pending: (0..n).map(|_| VecDeque::new()).collect(),
            npending: 0,
            inflight: Vec::new(),
            partials: Vec::new(),
            counters: Counters::default(),
            max_payload,
            ring_payload_capacity,
            fates: vec![None; n],
            gone: 0,
            failed: 0,
            seen_epoch: u64::MAX,
            armed: false,
            rung: false,
            rr: 0,
            spare: None,
            single_copy,
            single_copy_help: true,
            help_from: crate::config::DEFAULT_HELP_FROM,
            single_copy_threshold,
            single_copy_max: usize::MAX,
            summary: n > SUMMARY_FROM,
            progress: None,
            l2g: (0..n).collect(),
            multi_node: false,
            drained: (0..n).map(|_| VecDeque::new()).collect(),
            drained_bytes: 0,
            ndrained: 0,
            drain_budget: 16 << 20,
            told_budget_full: false,
            asked_descriptors: false,
            matched_contexts: Vec::new(),
            drain_pool: Vec::new(),
            rts: Vec::new(),
            rts_free: Vec::new(),
            nrts: 0,
            rts_out: vec![0; n],
            streams: (0..n).map(|_| VecDeque::new()).collect(),
            nstreams: 0,
            grant_backlog: (0..n).map(|_| VecDeque::new()).collect(),
            nbacklog: 0,
            next_gid: 0,
            eager: crate::config::DEFAULT_EAGER,
            lent_rdv: vec![None; n],
        }
    }

    /// Whether receives look only at the rings the ready summary marks (the default above
    /// `SUMMARY_FROM` local ranks).
    /// Arms with a membarrier from now on, so that senders need no fence (see
    /// `Segment::use_heavy_arm`); after `set_summary`, before the first message.
    pub fn use_heavy_arm(&mut self) -> bool {
        self.seg.use_heavy_arm(self.me, self.summary)
    }

    pub fn set_summary(&mut self, on: bool) {
        self.summary = on;
    }

    /// Whether receives read the ready summary (see `set_summary`).
    pub fn summary(&self) -> bool {
        self.summary
    }

    /// Whether this process's receives let their senders help copy a single-copy rendezvous.
    pub fn set_single_copy_help(&mut self, on: bool, from: usize) {
        self.single_copy_help = on;
        self.help_from = from;
    }

    /// Whether a receive of a single-copy message of `len` bytes lets its sender help.
    #[inline]
    pub(crate) fn wants_help(&self, len: usize) -> bool {
        self.single_copy_help && len > volley_shm::COOP_FROM && len >= self.help_from
    }

    /// Which messages this process sends by single copy: `len` in `[min, max)`.
    pub fn set_single_copy_range(&mut self, min: usize, max: usize) {
        self.single_copy_threshold = min;
        self.single_copy_max = max;
    }

    /// Whether a message of `len` bytes to `dst` goes by single copy: in the range, both sides
    /// able, and not to ourselves (a blocking send to ourselves could never be read).
    #[inline]
    pub fn use_single_copy(&self, dst: usize, len: usize) -> bool {
        self.single_copy
            && len >= self.single_copy_threshold
            && len < self.single_copy_max
            && dst != self.me
            && self.seg.can_single_copy(dst)
    }

    /// Writes a single-copy descriptor for `data` into the ring to `dst`. Returns its position,
    /// or None if the ring is full. The caller must keep `data` untouched until
    /// `tx[dst].rndv_state(pos)` says Done.
    pub fn push_descriptor(
        &mut self,
        dst: usize,
        tag: u32,
        context: u32,
        data: &[u8],
    ) -> Option<u64> {
        let (addr, len) = (data.as_ptr() as u64, data.len() as u64);
        let pos = self.tx[dst]
            .as_mut()
            .and_then(|tx| tx.push_rndv(tag, context, addr, len));
        match pos {
            Some(_) => {
                self.counters.add(Counter::SingleCopySends, 1);
                self.counters.add(Counter::MsgsSent, 1);
                self.counters.add(Counter::BytesSent, data.len() as u64);
            }
            None => self.counters.add(Counter::BackPressure, 1),
        }
        pos
    }

    /// Copies the whole message `info` from the ring of `src` into the front of `out` (which
    /// must hold it) and frees its record.
    #[inline]
    pub fn copy_whole(&mut self, src: usize, info: &RecordInfo, out: &mut [u8]) {
        self.rx[src].copy_out(info, out);
        self.counters.add(Counter::MsgsRecvd, 1);
        self.counters.add(Counter::BytesRecvd, info.len as u64);
    }

    /// Marks the single-copy sends the receivers have finished. Returns how many completed.
    pub fn check_inflight(&mut self) -> usize {
        if self.inflight.is_empty() {
            return 0;
        }
        let before = self.inflight.len();
        let (seg, me, help) = (&self.seg, self.me, self.single_copy_help);
        let mut helped = 0;
        self.inflight.retain(|p| {
            let mut p = p.borrow_mut();
            let pos = p.rndv_pos.expect("in flight means written");
            match seg.rndv_state(me, p.dst, pos) {
                volley_shm::RndvState::Pending => {
                    if help && p.data.len() > volley_shm::COOP_FROM && !p.data.is_packed() {
                        helped += rendezvous::help_descriptor(seg, me, p.dst, pos, &p.data);
                    }
                    true
                }
                volley_shm::RndvState::Done => {
                    p.done = true;
                    false
                }
                volley_shm::RndvState::Failed => {
                    p.done = true;
                    p.failed = true;
                    false
                }
            }
        });
        if helped > 0 {
            self.count(Counter::ChunksHelped, helped);
        }
        before - self.inflight.len()
    }

    /// Helps the receiver of the single-copy descriptor at `pos` in the ring to `dst` copy
    /// `data`, if it is copying it now (`volley_shm::coop`).
    #[inline]
    pub fn help_descriptor(&mut self, dst: usize, pos: u64, data: &[u8]) {
        if self.single_copy_help && data.len() > volley_shm::COOP_FROM {
            let n = rendezvous::help_descriptor(&self.seg, self.me, dst, pos, data);
            if n > 0 {
                self.count(Counter::ChunksHelped, n);
            }
        }
    }

    pub fn port_kind(&self, port: u32) -> Option<PortKind> {
        self.ports.iter().find(|(p, _)| *p == port).map(|(_, k)| *k)
    }

    /// Writes as much of `data` into the ring to `dst` as fits now. Returns true when the whole
    /// message is in the ring. Never waits.
    #[inline]
    pub fn push(
        &mut self,
        dst: usize,
        tag: u32,
        context: u32,
        data: &[u8],
        c: &mut Cursor,
    ) -> bool {
        match self.tx[dst].as_mut() {
            Some(tx) => push_records(tx, &mut self.counters, tag, context, data, c),
            // Lent to the progress thread: later messages wait for it to come back.
            None => {
                self.want_producer(dst);
                false
            }
        }
    }

    /// Rings `dst`'s doorbell, whose request to be woken the caller took (see
    /// `Segment::wake_sleepers`).
    pub fn notify(&mut self, dst: usize) {
        self.doorbells[dst].notify();
        self.counters.add(Counter::DoorbellsRung, 1);
    }

    /// The job segment.
    pub fn segment(&self) -> Arc<Segment> {
        self.seg.clone()
    }

    /// How local rank `r` ended, if it has (from the rank table, read again if it changed).
    pub fn local_fate(&mut self, r: usize) -> Option<Fate> {
        self.refresh_fates();
        self.fates[r]
    }

    /// Wakes `dst` if it said it is asleep (the handshake is `Segment::arm` / `wants_wake`).
    #[inline]
    pub fn ring_doorbell(&mut self, dst: usize) {
        ring_doorbell_of(&self.seg, &self.doorbells, self.me, dst, &mut self.counters);
    }

    /// Takes back the producers the progress thread has finished with. Costs nothing unless
    /// something is lent.
    pub fn collect_returns(&mut self) {
        let Some(p) = self.progress.as_mut() else {
            return;
        };
        if p.lent == 0 {
            return;
        }
        let mut returned = Vec::new();
        while let Ok(r) = p.from.try_recv() {
            p.lent -= 1;
            returned.push(r);
        }
        for r in returned {
            self.counters.merge(&r.counters);
            self.tx[r.dst] = Some(r.producer);
            self.lent_rdv[r.dst] = None;
            if let Some(t) = r.token_done {
                self.release_token(t);
            }
            if let Some(h) = r.handback {
                self.adopt_rendezvous(r.dst, h);
            }
        }
    }

    /// Something waits for the ring to `dst` while its producer is lent: a rendezvous the
    /// thread holds unanswered is to come back (see `progress::RdvLend::hand_back`).
    #[cold]
    fn want_producer(&mut self, dst: usize) {
        if let Some(f) = &self.lent_rdv[dst] {
            f.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// Hands the producer of `dst` and the rest of a message to the progress thread, if there is
    /// one and nothing else waits for `dst`. Returns the message back if it cannot.
    pub fn lend(
        &mut self,
        dst: usize,
        tag: u32,
        context: u32,
        data: Payload,
        cursor: Cursor,
        rendezvous: Option<(u32, bool)>,
    ) -> Result<std::sync::Arc<crate::progress::LentState>, Payload> {
        if self.progress.is_none() || self.has_pending(dst) || self.tx[dst].is_none() {
            return Err(data);
        }
        let p = self.progress.as_mut().expect("checked");
        let producer = self.tx[dst].take().expect("checked");
        let state = std::sync::Arc::new(crate::progress::LentState {
            done: std::sync::atomic::AtomicBool::new(false),
            failed: std::sync::atomic::AtomicBool::new(false),
            data: std::sync::Mutex::new(None),
        });
        let l = crate::progress::Lend {
            dst,
            producer,
            tag,
            context,
            data,
            cursor,
            state: state.clone(),
            rendezvous: rendezvous.map(|(token, single)| {
                let f = Arc::new(std::sync::atomic::AtomicBool::new(false));
                self.lent_rdv[dst] = Some(f.clone());
                crate::progress::RdvLend {
                    token,
                    single,
                    hand_back: f,
                }
            }),
        };
        match p.to.send(crate::progress::ToThread::Lend(Box::new(l))) {
            Ok(()) => {
                p.lent += 1;
                Ok(state)
            }
            Err(e) => {
                // The thread is gone: take everything back.
                let crate::progress::ToThread::Lend(l) = e.0 else {
                    unreachable!()
                };
                self.tx[dst] = Some(l.producer);
                Err(l.data)
            }
        }
    }

    /// Drops a queued or in-flight send to `dst`, which has left the job, so that its buffer is
    /// released.
    pub fn forget_send(&mut self, dst: usize, p: &Arc<volley_sys::Exclusive<Pending>>) {
        let before = self.pending[dst].len();
        self.pending[dst].retain(|q| !Arc::ptr_eq(q, p));
        self.npending -= before - self.pending[dst].len();
        self.inflight.retain(|q| !Arc::ptr_eq(q, p));
        self.forget_rendezvous(dst, p);
    }

    /// Pushes queued non-blocking sends (and notes finished single copies). Returns how many
    /// messages completed.
    #[inline]
    pub fn drive_pending(&mut self) -> usize {
        // Nothing queued, lent or in flight (the common case, polled at every pass): one look.
        if self.nothing_to_send() {
            return 0;
        }
        self.drive_pending_slow()
    }

    /// Whether nothing is queued, lent or in flight to send: `drive_pending` has nothing to do.
    #[inline]
    fn nothing_to_send(&self) -> bool {
        self.npending == 0
            && self.nrts == 0
            && self.nbacklog == 0
            && self.inflight.is_empty()
            && self.progress.as_ref().is_none_or(|p| p.lent == 0)
    }

    #[inline(never)]
    fn drive_pending_slow(&mut self) -> usize {
        self.collect_returns();
        let mut done = self.check_inflight();
        if self.nrts > 0 || self.nbacklog > 0 {
            done += self.drive_rendezvous();
        }
        if self.npending == 0 {
            return done;
        }
        for dst in 0..self.n {
            let mut progressed = false;
            while let Some(p) = self.pending[dst].front().cloned() {
                let mut pm = p.borrow_mut();
                if pm.rts.is_some() {
                    // A request to send: one record; the data waits for the receiver's answer.
                    if !self.push_rts(dst, &mut pm) {
                        break;
                    }
                    drop(pm);
                    progressed = true;
                    self.pending[dst].pop_front();
                    self.npending -= 1;
                    continue;
                }
                if !pm.cursor.started && self.streaming(dst) {
                    // A granted message is being streamed: a message spanning records waits.
                    break;
                }
                if pm.rndv {
                    let Some(pos) = self.push_descriptor(dst, pm.tag, pm.context, &pm.data) else {
                        break;
                    };
                    pm.rndv_pos = Some(pos);
                    drop(pm);
                    progressed = true;
                    self.pending[dst].pop_front();
                    self.npending -= 1;
                    self.inflight.push(p);
                    continue;
                }
                if !pm.cursor.started
                    && pm.cursor.off == 0
                    && self.wants_rendezvous(dst, pm.context, pm.data.len())
                {
                    // Decided eager when it was queued; the receiver now asks for requests to
                    // send (its budget for unreceived messages is spent): it goes as one.
                    pm.rts = Some(self.new_rendezvous(dst, &p));
                    drop(pm);
                    continue;
                }
                let Pending {
                    tag,
                    context,
                    ref data,
                    ref mut cursor,
                    ..
                } = *pm;
                let before = cursor.off;
                let complete = self.push(dst, tag, context, data, cursor);
                progressed |= cursor.off != before || complete;
                if !complete {
                    break;
                }
                pm.done = true;
                drop(pm);
                self.pending[dst].pop_front();
                self.npending -= 1;
                done += 1;
            }
            if progressed {
                self.ring_doorbell(dst);
            }
        }
        done
    }

    /// One pass over the incoming rings for `port`, starting after the ring served last. In each
    /// ring it looks past records for other ports, which stay in place for their readers (so one
    /// port never waits behind another's unread messages while they fit in the ring).
    #[inline]
    pub fn poll_port(&mut self, port: u32, dispatch_active: bool) -> Result<Poll, RecvError> {
        // The memo key names the question asked of each record; it changes whenever the set of
        // ports (and so the answer) does.
        let key =
            (port as u128) | ((dispatch_active as u128) << 32) | ((self.ports_gen as u128) << 33);
        let found = self.ready_sources(|e, src| {
            let ports = &e.ports;
            let found = e.rx[src].scan(key, |r| {
                r.context == port
                    || (dispatch_active
                        && ports
                            .iter()
                            .any(|(p, k)| *p == r.context && *k == PortKind::Active))
            });
            match found {
                Ok(Some(info)) => Some(Ok((src, info))),
                Ok(None) => e.forget_if_empty(src).err().map(Err),
                Err(err) => Some(Err(e.corrupt(src, err))),
            }
        });
        match found {
            None => Ok(Poll::Nothing),
            Some(Err(e)) => Err(e),
            Some(Ok((src, info))) if info.context == port => {
                self.rr = if src + 1 == self.n { 0 } else { src + 1 };
                Ok(Poll::Found(src, info))
            }
            Some(Ok((src, info))) => Ok(Poll::Active(src, info)),
        }
    }

    /// Calls `f` with each source whose ring may hold records, round-robin from `self.rr`, until
    /// it returns something. With more than `SUMMARY_FROM` local ranks those are the sources
    /// marked in this rank's ready summary (senders mark after publishing; `forget_if_empty`
    /// unmarks), so a receive costs the same at 256 local ranks as at 2; otherwise, about to
    /// sleep (the re-check after arming must see every ring), or with unexpected messages drained
    /// out of their rings, every source.
    #[inline]
    fn ready_sources<R>(
        &mut self,
        mut f: impl FnMut(&mut Engine, usize) -> Option<R>,
    ) -> Option<R> {
        let n = self.n;
        if !self.summary || self.armed || self.ndrained > 0 {
            // Two plain loops instead of `(rr + i) % n`: a division per ring is dearer than
            // the look at an empty ring.
            let rr = self.rr.min(n - 1);
            for src in (rr..n).chain(0..rr) {
                if let Some(r) = f(self, src) {
                    return Some(r);
                }
            }
            return None;
        }
        let words = self.seg.summary_words();
        let (first, low) = (self.rr / 64, self.rr % 64);
        // Word `first` from bit `low` on, the other words, then word `first` below `low`.
        for j in 0..=words {
            let k = (first + j) % words;
            let mut w = self.seg.ready_word(self.me, k);
            if j == 0 {
                w &= !0u64 << low;
            } else if j == words {
                w &= (1u64 << low) - 1;
            }
            while w != 0 {
                let src = k * 64 + w.trailing_zeros() as usize;
                w &= w - 1;
                if let Some(r) = f(self, src) {
                    return Some(r);
                }
            }
        }
        None
    }

    /// After a scan of the ring from `src` found nothing wanted: if the ring holds nothing
    /// unread at all, unmark it in the ready summary and look once more (a record published
    /// meanwhile shows then, or its sender marks the ring again). A record found by that second
    /// look stays for the next poll, which the mark makes look here.
    #[inline]
    fn forget_if_empty(&mut self, src: usize) -> Result<(), RecvError> {
        if !self.summary {
            return Ok(());
        }
        let empty = self.rx[src]
            .nothing_unread()
            .map_err(|e| self.corrupt(src, e))?;
        if empty {
            self.seg.clear_ready(self.me, src);
            let still = self.rx[src]
                .nothing_unread()
                .map_err(|e| self.corrupt(src, e))?;
            if !still {
                self.seg.mark_ready(self.me, src);
            }
        }
        Ok(())
    }

    #[cold]
    fn corrupt(&self, src: usize, e: volley_shm::Corrupt) -> RecvError {
        RecvError::Corrupt {
            rank: self.l2g[src],
            why: e.0,
        }
    }

    /// The first message from ring `ring` (None: every ring, round-robin) whose envelope `pat`
    /// accepts: among one source's messages, the drained ones (older) first, then the ring.
    /// A ring in which nothing matches is drained if it is full (see `unexpected`).
    pub fn poll_match(
        &mut self,
        pat: &Pattern,
        ring: Option<usize>,
    ) -> Result<Option<(usize, Hit)>, RecvError> {
        let key = pat.scan_key(true);
        if let Some(src) = ring {
            return Ok(self.match_in(pat, key, src)?.map(|h| (src, h)));
        }
        let found = self.ready_sources(|e, src| match e.match_in(pat, key, src) {
            Ok(Some(hit)) => Some(Ok((src, hit))),
            Ok(None) => e.forget_if_empty(src).err().map(Err),
            Err(err) => Some(Err(err)),
        });
        match found {
            None => Ok(None),
            Some(Err(e)) => Err(e),
            Some(Ok((src, hit))) => {
                self.rr = if src + 1 == self.n { 0 } else { src + 1 };
                Ok(Some((src, hit)))
            }
        }
    }

    /// `poll_match` in ring `src` where the match is the ring's next record, a whole message
    /// that fits `out` and wants no acknowledgement (`accept` says which: the caller's tag
    /// rule): copied into `out` and its slots freed in one step (`Consumer::pop_head`).
    /// `Head::Empty`: nothing from `src` to match. `Head::Other`: nothing done (a message
    /// drained aside, out-of-order takes, padding, another kind or a record not accepted):
    /// ask `poll_match`.
    #[inline(always)]
    pub fn pop_match(
        &mut self,
        pat: &Pattern,
        src: usize,
        accept: impl FnOnce(&RecordInfo) -> bool,
        out: &mut [u8],
    ) -> Result<Head, RecvError> {
        if !self.drained[src].is_empty() {
            return Ok(Head::Other);
        }
        let head = self.rx[src]
            .pop_head(
                |r| r.context == pat.context && pat.accepts_tag(r.tag) && accept(r),
                out,
            )
            .map_err(|e| self.corrupt(src, e))?;
        if let Head::Taken(info) = head {
            self.counters.add(Counter::MsgsRecvd, 1);
            self.counters.add(Counter::BytesRecvd, info.len as u64);
        }
        Ok(head)
    }

    /// Whether nothing from ring `src` waits to be matched, by one look (false when unsure).
    #[inline]
    pub fn surely_nothing_from(&self, src: usize) -> bool {
        self.drained[src].is_empty() && self.rx[src].surely_empty()
    }

    /// `poll_match` in the messages of one source.
    #[inline(always)]
    fn match_in(&mut self, pat: &Pattern, key: u128, src: usize) -> Result<Option<Hit>, RecvError> {
        if !self.drained[src].is_empty() {
            if let Some(k) = self.drained[src]
                .iter()
                .position(|d| d.context == pat.context && pat.accepts_tag(d.tag))
            {
                return Ok(Some(Hit::Drained(k)));
            }
        }
        let found = self.rx[src].scan(key, |r| {
            r.context == pat.context
                && pat.accepts_tag(r.tag)
                && matches!(r.kind, Kind::Whole | Kind::First | Kind::Rndv | Kind::Rts)
        });
        match found {
            Ok(Some(info)) => Ok(Some(Hit::Ring(info))),
            Ok(None) => {
                if self.rx[src].looks_full()
                    || self.drained[src].back().is_some_and(|d| d.open.is_some())
                {
                    self.drain(src)?;
                }
                Ok(None)
            }
            Err(e) => Err(self.corrupt(src, e)),
        }
    }

    /// The next record for `port` in the ring from `src` after position `after` (the next
    /// fragment of the message whose previous fragment sat at `after`: a message's fragments
    /// follow each other in its ring, but earlier messages for the port may still wait, unmatched,
    /// before them).
    pub fn next_from(
        &mut self,
        src: usize,
        port: u32,
        after: u64,
    ) -> Result<Option<RecordInfo>, RecvError> {
        let key = (port as u128) | ((after as u128) << 32) | (1 << 126);
        self.rx[src]
            .scan(key, |r| {
                r.pos > after && r.context == port && r.kind != Kind::Stream
            })
            .map_err(|e| RecvError::Corrupt {
                rank: self.l2g[src],
                why: e.0,
            })
    }

    /// Whether a progress pass here now would find nothing to do, by one look at each ring:
    /// nothing queued, lent or in flight to send (`nothing_to_send`), no message
    /// partly gathered or drained aside, and nothing unread in any ring. False when unsure,
    /// and always with more than 64 local ranks (the look would cost what the pass does).
    #[inline]
    pub fn quiet(&self) -> bool {
        self.nothing_to_send()
            && self.ndrained == 0
            && self.partials.is_empty()
            && self.n <= 64
            && self.rx.iter().all(|r| r.surely_empty())
    }

    /// The segment's count of rank state changes (see `refresh_fates`).
    #[inline]
    pub fn state_epoch(&self) -> u64 {
        self.seg.state_epoch()
    }

    /// Re-reads the other ranks' states if any changed since last time.
    #[inline]
    pub fn refresh_fates(&mut self) {
        let epoch = self.seg.state_epoch();
        if epoch != self.seen_epoch {
            self.refresh_fates_at(epoch);
        }
    }

    #[cold]
    #[inline(never)]
    fn refresh_fates_at(&mut self, epoch: u64) {
        self.seen_epoch = epoch;
        let (mut gone, mut failed) = (0, 0);
        for r in 0..self.n {
            if r == self.me {
                continue;
            }
            let fate = match self.seg.rank_state(r) {
                RankState::Alive => None,
                RankState::Finalized => Some(Fate::Finished),
                RankState::Exited(c) => Some(Fate::Exited(c)),
                RankState::Killed(sig) => Some(Fate::Killed(sig)),
                RankState::Vanished => Some(Fate::Vanished),
            };
            gone += fate.is_some() as usize;
            failed += fate.is_some_and(|f| f.is_failure()) as usize;
            self.fates[r] = fate;
        }
        (self.gone, self.failed) = (gone, failed);
    }

    /// Error for a receive that found nothing, if nothing can ever arrive: a peer failed, or
    /// every other rank is done. Call `refresh_fates` before the poll pass that found nothing.
    pub fn recv_dead_end(&self, port: u32, from: Option<usize>) -> Option<RecvError> {
        if let Some(src) = from {
            return self.fates[src].map(|fate| {
                RecvError::PeerLost(PeerLost {
                    rank: self.l2g[src],
                    fate,
                })
            });
        }
        if self.failed > 0 {
            // The first rank that failed (rare: the job is ending; our own fate is never set).
            let (r, fate) = self
                .fates
                .iter()
                .enumerate()
                .find_map(|(r, f)| f.filter(|f| f.is_failure()).map(|f| (r, f)))?;
            return Some(RecvError::PeerLost(PeerLost {
                rank: self.l2g[r],
                fate,
            }));
        }
        let all_done = self.gone + 1 == self.n;
        (all_done && self.n > 1 && !self.multi_node).then_some(RecvError::NoSenders { port })
    }

    /// Error for a send to `dst` if `dst` can no longer receive.
    #[inline]
    pub fn send_dead_end(&mut self, dst: usize) -> Option<PeerLost> {
        self.refresh_fates();
        self.fates[dst].map(|fate| PeerLost {
            rank: self.l2g[dst],
            fate,
        })
    }

    /// Says we are about to sleep: senders will ring our doorbell. The caller must poll the rings
    /// once more after this before sleeping.
    pub fn arm(&mut self) {
        self.note_ring();
        if self.rung {
            // Before arming: a ring that comes after this must stay visible.
            self.drain_doorbell();
        }
        self.seg.arm(self.me);
        self.armed = true;
    }

    /// Consumes the wake-ups the doorbell holds.
    pub fn drain_doorbell(&mut self) {
        self.doorbells[self.me].drain();
        self.rung = false;
    }

    /// Back to spinning or running: senders stop paying for wake-ups.
    #[inline]
    pub fn disarm(&mut self) {
        if self.armed {
            self.armed = false;
            if self.seg.disarm(self.me) {
                // A sender took the flag: its write to the doorbell is due, or done.
                self.rung = true;
            }
        }
    }

    /// The doorbell was seen readable (or may have been): drain it before the next sleep. A
    /// sender takes the flag before it writes, so a drain between the two finds nothing and the
    /// write would make every later sleep return at once.
    pub fn note_woken(&mut self) {
        self.rung = true;
    }

    /// Notes whether a sender rang the doorbell since we armed: it took our flag to do so.
    fn note_ring(&mut self) {
        if self.armed && !self.seg.is_armed(self.me) {
            self.rung = true;
        }
    }

    pub fn is_armed(&self) -> bool {
        self.armed
    }

    /// The descriptor that becomes readable when a sender rings our doorbell.
    pub fn doorbell(&self) -> &EventFd {
        &self.doorbells[self.me]
    }

    /// Says this rank is done, publishing its counters (`values`, in the order of
    /// `counters::counter_table`) once, for `volley run --counters` to read after the job.
    pub fn mark_finalized(&mut self, values: &[u64]) {
        self.seg.finalize(self.me, values);
        for r in 0..self.n {
            if r != self.me {
                self.doorbells[r].notify();
            }
        }
    }
}

/// Writes as much of `data` into `tx` as fits now (see `Producer::push_message`) and counts
/// what it wrote. Returns true when the whole message is in the ring. Never waits. A free
/// function: the progress thread writes with it too.
#[inline]
pub(crate) fn push_records(
    tx: &mut Producer,
    counters: &mut Counters,
    tag: u32,
    context: u32,
    data: &[u8],
    c: &mut Cursor,
) -> bool {
    let p = tx.push_message(tag, context, data, c);
    if p.started {
        counters.add(Counter::MsgsSent, 1);
        counters.add(
            if p.inline {
                Counter::InlineSends
            } else {
                Counter::PipelinedSends
            },
            1,
        );
    }
    counters.add(Counter::Fragments, p.fragments as u64);
    counters.add(Counter::BytesSent, p.bytes);
    if p.full {
        counters.add(Counter::BackPressure, 1);
    }
    p.done
}

/// With more local ranks than this, receives find their messages through the ready summary
/// instead of looking at every peer's ring (`Engine::ready_sources`). At 8 or fewer the scan of
/// every ring costs less than the summary's extra cache line per message.
pub const SUMMARY_FROM: usize = 8;

/// After publishing records for `dst`: marks the ring in `dst`'s ready summary and wakes `dst`
/// if it said it is asleep (the handshake is `Segment::arm` / `published`).
#[inline]
pub(crate) fn ring_doorbell_of(
    seg: &Segment,
    doorbells: &[EventFd],
    me: usize,
    dst: usize,
    counters: &mut Counters,
) {
    // The handshake with the receiver's arm-then-recheck, and the mark in its ready summary:
    // Segment::published. Also for ourselves (a ring to ourselves is read through the summary
    // too); only a progress thread's publication can find us armed then, and wakes us.
    if seg.published(me, dst) {
        doorbells[dst].notify();
        counters.add(Counter::DoorbellsRung, 1);
    }
}
