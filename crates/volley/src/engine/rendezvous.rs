//! The rendezvous of large matched messages inside a host.
//!
//! A message on a matched context that does not fit one ring record is not written into the ring
//! at once: its sender writes a request to send (an RTS record: length, a token naming the send,
//! and its buffer's address where single copy may be used), and the data waits in the sender's
//! memory. The RTS is matched like any message. A receive that takes it either copies the data
//! straight out of the sender's memory (single copy) and answers `Done`, or answers `Clear` with a
//! grant id; the sender then streams the data through the ring as stream records tagged with that
//! id, which the receive copies into its buffer as they come. Answers go back through the grant
//! queue of the ring the RTS came by (`volley_shm::Grant`), never through the reverse ring, so a
//! full ring the other way can never hold them up.
//!
//! Why: an unexpected large message used to be pipelined into the ring whole, and a receiver that
//! wanted a later message of the same sender first had to drain it into its own memory, within a
//! budget (`unexpected`); beyond the budget the sender waited, and a program that received its
//! large messages in another order than sent deadlocked. Now an unexpected large message costs its
//! receiver one small record, whatever its size: memory stays bounded and no order of receives
//! can deadlock. The price is one round trip before the data moves, small beside the time a
//! message of more than one record takes to copy.

use super::{Engine, Pending};
use crate::counters::Counter;
use crate::error::{PeerLost, RecvError};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use volley_shm::{Grant, RecordInfo, Rts, Segment, RTS_SINGLE_COPY};
use volley_sys::Exclusive;

/// The sender of the single-copy descriptor at `pos` in the ring to `dst` (whose bytes are
/// `data`) helps copy it if its receiver is copying it now. Returns how many chunks it wrote.
pub(crate) fn help_descriptor(seg: &Segment, me: usize, dst: usize, pos: u64, data: &[u8]) -> u64 {
    let ident = descriptor_ident(pos);
    match seg.coop_current(me, dst) {
        Some((epoch, id)) if id == ident => help_copy_ident(seg, me, dst, ident, epoch, data),
        _ => 0,
    }
}

/// VOLLEY_SIMULATE_HELP_REFUSAL: a helping sender acts as if its writes were refused.
pub(crate) static SIMULATE_HELP_REFUSAL: AtomicBool = AtomicBool::new(false);

/// How a matched rendezvous is named in its ring's copy slot: by its sender's token.
fn coop_ident(token: u32) -> u64 {
    1 << 32 | token as u64
}

/// How a single-copy descriptor is named in its ring's copy slot: by its position in the ring.
pub(crate) fn descriptor_ident(pos: u64) -> u64 {
    1 << 63 | pos
}

/// The sender of rendezvous `token` to `dst` (whose bytes are `data`) helps copy `epoch` of it:
/// it claims chunks in the ring's copy slot and writes them into the receiver's buffer, until
/// none is left. Returns how many it wrote. A chunk it could not write is marked failed, and
/// the receiver copies the message again itself.
pub(crate) fn help_copy(
    seg: &Segment,
    me: usize,
    dst: usize,
    token: u32,
    epoch: u32,
    data: &[u8],
) -> u64 {
    help_copy_ident(seg, me, dst, coop_ident(token), epoch, data)
}

/// [`help_copy`] for the copy named `ident`.
fn help_copy_ident(
    seg: &Segment,
    me: usize,
    dst: usize,
    ident: u64,
    epoch: u32,
    data: &[u8],
) -> u64 {
    let (len, pid) = (data.len() as u64, seg.pid(dst));
    let mut n = 0;
    while let Some(c) = seg.coop_claim(me, dst, epoch, ident, len) {
        // Relaxed: set once at init.
        let ok = !SIMULATE_HELP_REFUSAL.load(Ordering::Relaxed)
            && volley_sys::process_vm_write(pid, &data[c.off..c.off + c.len], c.dst).is_ok();
        seg.coop_done(me, dst, ok);
        if !ok {
            break;
        }
        n += 1;
    }
    n
}

impl Engine {
    /// Whether a message of `len` bytes to local rank `dst` on `context` goes by rendezvous:
    /// larger than the eager limit (VOLLEY_EAGER_BYTES), or not empty while `dst` asks for
    /// requests to send instead of eager data (its budget for unreceived messages is
    /// spent: see `unexpected`), on a context received through the matcher (whose receivers
    /// take requests to send; a Directed-Point port reads records in arrival order and gets the
    /// pipeline).
    #[inline]
    pub fn wants_rendezvous(&self, dst: usize, context: u32, len: usize) -> bool {
        (len > self.eager || (len > 0 && self.descriptors_asked(dst)))
            && self.matched_contexts.contains(&context)
    }

    /// Whether local rank `dst` asks for requests to send instead of eager data (false while
    /// its ring is lent to the progress thread, which sends what it has as it was decided; and
    /// for this rank itself: a blocking send to itself, which MPI programs expect to return for
    /// a small message before they post its receive, would wait for ever).
    #[inline]
    pub fn descriptors_asked(&self, dst: usize) -> bool {
        dst != self.me
            && self.tx[dst]
                .as_ref()
                .is_some_and(|tx| tx.descriptors_asked())
    }

    /// Gives the rendezvous send `p` (to `dst`) a token: it stays in the table until its
    /// receiver has answered and its data has gone.
    pub fn new_rendezvous(&mut self, dst: usize, p: &Arc<Exclusive<Pending>>) -> u32 {
        let token = self.reserve_token();
        self.rts[token as usize] = Some(p.clone());
        self.nrts += 1;
        self.rts_out[dst] += 1;
        self.count(Counter::RendezvousSends, 1);
        token
    }

    /// A token no rendezvous of ours uses (the progress thread's take one too).
    pub fn reserve_token(&mut self) -> u32 {
        match self.rts_free.pop() {
            Some(t) => t,
            None => {
                self.rts.push(None);
                (self.rts.len() - 1) as u32
            }
        }
    }

    /// Frees a token reserved for the progress thread.
    pub fn release_token(&mut self, token: u32) {
        if self.rts[token as usize].is_none() {
            self.rts_free.push(token);
        }
    }

    /// Takes over a rendezvous the progress thread gave back unanswered (its request to send is
    /// in the ring): from now on this engine reads its answer and streams it.
    pub(crate) fn adopt_rendezvous(&mut self, dst: usize, h: crate::progress::Handback) {
        let mut pm = Pending::new(
            dst,
            h.tag,
            h.context,
            h.data,
            Default::default(),
            false,
            None,
        );
        pm.rts = Some(h.token);
        pm.rts_sent = true;
        pm.lent = Some(h.state);
        self.rts[h.token as usize] = Some(Arc::new(Exclusive::new(pm)));
        self.nrts += 1;
        self.rts_out[dst] += 1;
    }

    /// A rendezvous is over: its buffer is free (and a request that watches a lent state sees
    /// it done).
    fn complete(pm: &mut Pending) {
        pm.done = true;
        if let Some(state) = pm.lent.take() {
            *state.data.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(std::mem::take(&mut pm.data));
            // SYNC: Release; pairs with the Acquire in SendState::check (as the progress
            // thread's own completion).
            state.done.store(true, std::sync::atomic::Ordering::Release);
        }
    }

    /// Writes the request to send of `pm` (which has a token) into the ring to `dst`; false if
    /// the ring has no room now.
    pub fn push_rts(&mut self, dst: usize, pm: &mut Pending) -> bool {
        let token = pm.rts.expect("a rendezvous send has a token");
        let len = pm.data.len();
        let single = !pm.data.is_packed() && self.use_single_copy(dst, len);
        let rts = Rts {
            addr: if single { pm.data.as_ptr() as u64 } else { 0 },
            len: len as u64,
            token,
            flags: if single { RTS_SINGLE_COPY } else { 0 },
        };
        let sent = self.tx[dst]
            .as_mut()
            .is_some_and(|tx| tx.push_rts(pm.tag, pm.context, &rts));
        if sent {
            pm.rts_sent = true;
            self.count(Counter::MsgsSent, 1);
            self.count(Counter::BytesSent, len as u64);
        } else {
            self.count(Counter::BackPressure, 1);
        }
        sent
    }

    /// The rendezvous send `token` to `dst`, if it names one.
    fn rendezvous_of(&self, dst: usize, token: u32) -> Option<Arc<Exclusive<Pending>>> {
        let p = self.rts.get(token as usize)?.as_ref()?;
        (p.borrow_mut().dst == dst).then(|| p.clone())
    }

    /// Takes rendezvous `token` out of the table: its buffer is no longer needed.
    fn end_rendezvous(&mut self, dst: usize, token: u32) {
        if let Some(p) = self.rts[token as usize].take() {
            let mut pm = p.borrow_mut();
            if let Some(state) = pm.lent.take() {
                // Never completed: a destination that left the job.
                state
                    .failed
                    .store(true, std::sync::atomic::Ordering::Relaxed);
                // SYNC: Release; pairs with the Acquire in SendState::check.
                state.done.store(true, std::sync::atomic::Ordering::Release);
            }
            drop(pm);
            self.rts_free.push(token);
            self.nrts -= 1;
            self.rts_out[dst] -= 1;
        }
    }

    /// Sends the answers that found a grant queue full, reads the answers to our requests to
    /// send and streams granted data. Returns how many sends completed.
    pub fn drive_rendezvous(&mut self) -> usize {
        if self.nbacklog > 0 {
            self.flush_grants();
        }
        if self.nrts == 0 {
            return 0;
        }
        let mut done = 0;
        for dst in 0..self.n {
            // While the producer is lent, the progress thread alone reads the ring's answers.
            if self.rts_out[dst] == 0 || self.tx[dst].is_none() {
                continue;
            }
            while let Some(g) = self.seg.take_grant(self.me, dst) {
                let token = match g {
                    Grant::Clear { token, .. }
                    | Grant::Done { token }
                    | Grant::Help { token, .. } => token,
                };
                let Some(p) = self.rendezvous_of(dst, token) else {
                    self.count(Counter::BadGrants, 1);
                    continue;
                };
                match g {
                    Grant::Help { epoch, .. } => {
                        let pm = p.borrow_mut();
                        if !pm.rts_sent || pm.data.is_packed() {
                            self.count(Counter::BadGrants, 1);
                            continue;
                        }
                        let chunks = help_copy(&self.seg, self.me, dst, token, epoch, &pm.data);
                        drop(pm);
                        self.count(Counter::ChunksHelped, chunks);
                    }
                    Grant::Done { .. } => {
                        Self::complete(&mut p.borrow_mut());
                        self.end_rendezvous(dst, token);
                        self.count(Counter::SingleCopySends, 1);
                        done += 1;
                    }
                    Grant::Clear { gid, .. } => {
                        let mut pm = p.borrow_mut();
                        if pm.gid.is_some() || !pm.rts_sent {
                            // Answered twice, or before it was asked.
                            self.count(Counter::BadGrants, 1);
                            continue;
                        }
                        pm.gid = Some(gid);
                        drop(pm);
                        self.streams[dst].push_back(p);
                        self.nstreams += 1;
                    }
                }
            }
            if !self.streams[dst].is_empty() {
                done += self.drive_streams(dst);
            }
        }
        done
    }

    /// Streams the granted messages to `dst`, oldest grant first, as far as the ring has room.
    fn drive_streams(&mut self, dst: usize) -> usize {
        // A fragmented message half written by the queue goes on first: a message's records
        // follow each other in the ring.
        if let Some(p) = self.pending[dst].front() {
            let pm = p.borrow_mut();
            if pm.cursor.started && !pm.done && pm.rts.is_none() {
                return 0;
            }
        }
        let mut done = 0;
        let mut moved = false;
        while let Some(p) = self.streams[dst].front().cloned() {
            let Some(tx) = self.tx[dst].as_mut() else {
                break;
            };
            let mut pm = p.borrow_mut();
            let gid = pm.gid.expect("granted");
            let Pending {
                context,
                ref mut data,
                ref mut cursor,
                ..
            } = *pm;
            let pushed = match data {
                // A datatype packed straight into the records: no buffer of the whole message.
                super::Payload::Packed(p) => {
                    let total = p.len();
                    tx.push_stream_with(gid, context, total, cursor, |off, piece| {
                        p.pack(off, piece)
                    })
                }
                d => tx.push_stream(gid, context, d, cursor),
            };
            moved |= pushed.bytes > 0;
            self.counters
                .add(Counter::Fragments, pushed.fragments as u64);
            if !pushed.done {
                self.counters.add(Counter::BackPressure, 1);
                break;
            }
            Self::complete(&mut pm);
            let token = pm.rts.expect("a rendezvous send has a token");
            drop(pm);
            self.streams[dst].pop_front();
            self.nstreams -= 1;
            self.end_rendezvous(dst, token);
            self.count(Counter::RendezvousStreams, 1);
            done += 1;
        }
        if moved {
            self.ring_doorbell(dst);
        }
        done
    }

    /// Whether the ring to `dst` is in the middle of streaming a granted message (no other
    /// message spanning records may start before it ends).
    #[inline]
    pub fn streaming(&self, dst: usize) -> bool {
        // The count first: on the hot path of every send, no rendezvous is streaming.
        self.nstreams > 0 && !self.streams[dst].is_empty()
    }

    /// Forgets rendezvous `p` to `dst`, which left the job.
    pub(crate) fn forget_rendezvous(&mut self, dst: usize, p: &Arc<Exclusive<Pending>>) {
        let before = self.streams[dst].len();
        self.streams[dst].retain(|q| !Arc::ptr_eq(q, p));
        self.nstreams -= before - self.streams[dst].len();
        let token = p.borrow_mut().rts;
        if let Some(t) = token {
            if self.rts[t as usize]
                .as_ref()
                .is_some_and(|q| Arc::ptr_eq(q, p))
            {
                self.end_rendezvous(dst, t);
            }
        }
    }

    /// Forgets every rendezvous to `dst`, which left the job; returns how many there were.
    pub(crate) fn forget_rendezvous_to(&mut self, dst: usize) -> usize {
        let ps: Vec<_> = self
            .rts
            .iter()
            .flatten()
            .filter(|p| p.borrow_mut().dst == dst)
            .cloned()
            .collect();
        for p in &ps {
            self.forget_rendezvous(dst, p);
        }
        ps.len()
    }

    /// Takes the request to send `info` out of the ring from `src`.
    pub fn take_rts(&mut self, src: usize, info: &RecordInfo) -> Result<Rts, RecvError> {
        let held = self.rx[src].take(info);
        let rts = self.rx[src].rts(&held);
        self.rx[src].release(held);
        let rts = rts.map_err(|c| RecvError::Corrupt {
            rank: self.l2g[src],
            why: c.0,
        })?;
        if rts.len != info.total_len || rts.len == 0 {
            return Err(RecvError::Corrupt {
                rank: self.l2g[src],
                why: format!(
                    "request to send of {} bytes in a record that says {}",
                    rts.len, info.total_len
                ),
            });
        }
        Ok(rts)
    }

    /// A receive matched the request to send `rts` from `src` and will land it in `out`
    /// (exactly its length): copies it out of the sender's memory where the request allows,
    /// else grants it. Returns the grant id the stream will carry, or None when the message is
    /// already in `out`.
    pub fn accept_rts(
        &mut self,
        src: usize,
        rts: &Rts,
        out: &mut [u8],
    ) -> Result<Option<u32>, RecvError> {
        if rts.flags & RTS_SINGLE_COPY != 0 && self.single_copy {
            let copied = if self.wants_help(out.len()) {
                self.copy_helped(src, coop_ident(rts.token), rts.addr, out, Some(rts.token))
            } else {
                volley_sys::process_vm_read(self.seg.pid(src), out, rts.addr)
            };
            match copied {
                Ok(()) => {
                    self.answer(src, Grant::Done { token: rts.token });
                    self.count(Counter::SingleCopyRecvs, 1);
                    self.count(Counter::SingleCopyBytes, out.len() as u64);
                    return Ok(None);
                }
                Err(err) if err.raw_os_error() == Some(3) => {
                    // ESRCH: the sender is gone.
                    self.refresh_fates();
                    let fate = self.fates[src].unwrap_or(crate::Fate::Unreachable);
                    return Err(RecvError::PeerLost(PeerLost {
                        rank: self.l2g[src],
                        fate,
                    }));
                }
                // Refused at run time (a security module, a changed ptrace scope): the sender
                // streams it instead.
                Err(_) => {}
            }
        }
        Ok(Some(self.grant_rts(src, rts)))
    }

    /// Copies the message at `addr` in the memory of `src` into `out` (its length) chunk by
    /// chunk, with the sender's help if it is waiting (`volley_shm::coop`): the copy is opened
    /// in the ring's copy slot under `ident`, and `help` (a matched rendezvous's Help answer) is
    /// sent through the grant queue; a single-copy descriptor's sender looks at the slot itself.
    /// Returns once every claimed chunk is copied; an error of either side's copy is the
    /// caller's to handle as a refused single copy (ESRCH: the sender is gone).
    pub(crate) fn copy_helped(
        &mut self,
        src: usize,
        ident: u64,
        addr: u64,
        out: &mut [u8],
        help: Option<u32>,
    ) -> std::io::Result<()> {
        let (me, len, pid) = (self.me, out.len() as u64, self.seg.pid(src));
        let epoch = self
            .seg
            .coop_open(src, me, ident, out.as_mut_ptr() as u64, len);
        if let Some(token) = help {
            self.answer(src, Grant::Help { token, epoch });
        }
        let mut mine = 0;
        let mut err = None;
        while let Some(c) = self.seg.coop_claim(src, me, epoch, ident, len) {
            let r = volley_sys::process_vm_read(
                pid,
                &mut out[c.off..c.off + c.len],
                addr + c.off as u64,
            );
            self.seg.coop_done(src, me, r.is_ok());
            if let Err(e) = r {
                err = Some(e);
                break;
            }
            mine += 1;
        }
        let claimed = self.seg.coop_close(src, me, epoch, len);
        // The sender writes at most one chunk now: wait for it (it is a copy, not a message
        // that may never come), unless the sender is gone.
        let mut spins = 0u32;
        let helper_ok = loop {
            let (finished, ok) = self.seg.coop_finished(src, me);
            if finished >= claimed {
                break ok;
            }
            spins = spins.wrapping_add(1);
            if spins.is_multiple_of(64) {
                std::thread::yield_now();
            }
            if spins.is_multiple_of(4096) {
                // A one-byte read of the sender's buffer fails with ESRCH once it is gone.
                volley_sys::process_vm_read(pid, &mut [0u8], addr)?;
            }
            std::hint::spin_loop();
        };
        if claimed > mine {
            self.count(Counter::CopiesHelped, 1);
        }
        if let Some(e) = err {
            return Err(e);
        }
        if !helper_ok {
            // The sender could not write a chunk it claimed: copy the whole message here.
            volley_sys::process_vm_read(pid, out, addr)?;
        }
        Ok(())
    }

    /// Grants the request to send `rts` from `src`: its sender streams it with the grant id
    /// returned.
    pub fn grant_rts(&mut self, src: usize, rts: &Rts) -> u32 {
        let gid = self.next_gid;
        self.next_gid = if gid >= Grant::MAX_GID { 0 } else { gid + 1 };
        self.answer(
            src,
            Grant::Clear {
                token: rts.token,
                gid,
            },
        );
        gid
    }

    /// Sends `g` to `src` through the grant queue, or keeps it to send later if the queue is
    /// full; wakes `src` if it sleeps.
    fn answer(&mut self, src: usize, g: Grant) {
        if self.grant_backlog[src].is_empty() && self.seg.post_grant(src, self.me, g) {
            self.ring_doorbell(src);
            return;
        }
        self.grant_backlog[src].push_back(g);
        self.nbacklog += 1;
    }

    /// Sends the answers kept while grant queues were full.
    fn flush_grants(&mut self) {
        for src in 0..self.n {
            let mut sent = false;
            while let Some(&g) = self.grant_backlog[src].front() {
                if !self.seg.post_grant(src, self.me, g) {
                    break;
                }
                self.grant_backlog[src].pop_front();
                self.nbacklog -= 1;
                sent = true;
            }
            if sent {
                self.ring_doorbell(src);
            }
        }
    }

    /// Drops the answers kept for `src`, which left the job.
    pub(crate) fn forget_grants_to(&mut self, src: usize) {
        self.nbacklog -= self.grant_backlog[src].len();
        self.grant_backlog[src].clear();
    }

    /// The next stream record of grant `gid` in the ring from `src` after position `after`.
    pub fn next_stream(
        &mut self,
        src: usize,
        gid: u32,
        after: u64,
    ) -> Result<Option<RecordInfo>, RecvError> {
        let key = (gid as u128) | ((after as u128) << 32) | (1 << 125);
        self.rx[src]
            .scan(key, |r| {
                r.pos > after && r.kind == volley_shm::Kind::Stream && r.tag == gid
            })
            .map_err(|e| RecvError::Corrupt {
                rank: self.l2g[src],
                why: e.0,
            })
    }
}
