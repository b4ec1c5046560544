//! Receiving and probing by envelope: the first message whose (source, tag) a pattern accepts, in
//! each sender's order, moved straight into the caller's buffer.

use crate::config::WaitMode;
use crate::counters::Counter;
use crate::endpoint::{wait_from_bits, Endpoint};
use crate::engine::Dest;
use crate::engine::Hit;
use crate::engine::Payload;
use crate::error::{RecvError, SendError};
use crate::matching::{Pattern, Status, SYNC_TAG};
use crate::wait::Waiter;
use crate::world::World;
use std::sync::atomic::Ordering;
use volley_proto::Reliability;
use volley_shm::{Head, Kind, RecordInfo};

/// What [`Endpoint::fast_pass`] did.
enum Fast {
    Done(Status),
    Nothing,
    /// A match that the full pass must take.
    Other,
}

impl Endpoint {
    /// Waits for the first message on this endpoint's port from `source` (None: any) with `tag`
    /// (None: any) and copies it into `buf`. Among one sender's messages the first that matches
    /// is taken (MPI's order); a large one moves straight from the ring, or from the sender's
    /// memory by single copy, into `buf`. A message longer than `buf` is an error that names
    /// both sizes; the message stays queued.
    pub fn recv_matching(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
        buf: &mut [u8],
    ) -> Result<Status, RecvError> {
        let pat = self.pattern(source, tag)?;
        // Made at the first pass that finds nothing: a message already here costs no waiter.
        let mut waiter = None;
        let new_waiter = || {
            Waiter::new(
                wait_from_bits(self.wait.load(Ordering::Relaxed)),
                &self.waits,
            )
        };
        // Where only the rings can hold a match, and no posted receive or handler comes first,
        // a pass is one borrow of the engine (see `fast_pass`).
        let w = &self.world;
        let rings_only = self.rings_only(source);
        let mut buf = Some(buf);
        loop {
            if let Some(ring) = rings_only {
                if self.nothing_ahead() {
                    let out = buf.as_deref_mut().expect("a receive has a buffer");
                    match self.fast_pass(&pat, ring, out)? {
                        Fast::Done(st) => return Ok(st),
                        Fast::Nothing => {
                            waiter
                                .get_or_insert_with(new_waiter)
                                .idle(w, self.port, source)?;
                            continue;
                        }
                        Fast::Other => {}
                    }
                }
            }
            let waiter = waiter.get_or_insert_with(new_waiter);
            if let Some(st) = self.step(&pat, &mut buf, waiter)? {
                waiter.finish(&self.world);
                return Ok(st);
            }
            waiter.idle(&self.world, self.port, source)?;
        }
    }

    /// Takes the first message from `source` (None: any) with `tag` (None: any) into `buf` if
    /// one has arrived whole in a ring, fits, wants no acknowledgement and no receive posted
    /// earlier may take it: Some(status). None takes nothing (no match yet, or a match that the
    /// full receive must take: fragments, rendezvous, single copy, a synchronous send, one too
    /// long, one drained aside or from the network): post the receive instead. MPI_Irecv's fast
    /// path, which then needs no request; MPI's order holds because it runs only while no
    /// receive is posted.
    pub fn try_recv_now(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
        buf: &mut [u8],
    ) -> Result<Option<Status>, RecvError> {
        let Some(ring) = self.rings_only(source).filter(|_| self.nothing_ahead()) else {
            return Ok(None);
        };
        let pat = self.pattern(source, tag)?;
        match self.fast_pass(&pat, ring, buf)? {
            Fast::Done(st) => Ok(Some(st)),
            Fast::Nothing | Fast::Other => Ok(None),
        }
    }

    /// Whether no message from `source` can be waiting on this host yet, by one look at its
    /// ring (no scan): false when unsure (any source, a source on another host, a record
    /// unread in the ring or one drained aside). MPI_Irecv holds its receive back without
    /// looking further when this holds.
    #[inline]
    pub fn surely_nothing_from(&self, source: Option<usize>) -> bool {
        self.world.surely_nothing_from(source)
    }

    /// Where only this host's rings can hold a message from `source` (None: any): Some(the
    /// ring, or None for all of them); None when the network may hold one.
    #[inline]
    fn rings_only(&self, source: Option<usize>) -> Option<Option<usize>> {
        let w = &self.world;
        match source {
            Some(r) => w.route(r).map(Some),
            None if w.inner.net.is_none() => Some(None),
            None => None,
        }
    }

    /// Whether no posted receive and no running handler comes before a receive now (the
    /// condition of `fast_pass`).
    #[inline]
    fn nothing_ahead(&self) -> bool {
        let w = &self.world;
        w.inner.nposted.load(Ordering::Relaxed) == 0 && w.inner.nactive.load(Ordering::Relaxed) == 0
    }

    /// One pass of a matched receive in a single borrow of the engine, as `recv_into` does: the
    /// first match in the rings, copied into `out` if it is a whole record that fits and wants
    /// no acknowledgement. Anything else (a drained message, fragments, a rendezvous, a
    /// synchronous send, a message too long) is left for the full pass (`step`).
    #[inline(always)]
    fn fast_pass(
        &self,
        pat: &Pattern,
        ring: Option<usize>,
        out: &mut [u8],
    ) -> Result<Fast, RecvError> {
        let w = &self.world;
        let mut e = w.eng();
        e.refresh_fates();
        e.drive_pending();
        if let Some(src) = ring {
            // The common case, the message next in its ring: popped as a plain ring pops.
            match e.pop_match(pat, src, |r| r.tag & SYNC_TAG == 0, out)? {
                Head::Taken(info) => {
                    e.disarm();
                    return Ok(Fast::Done(Status {
                        source: w.inner.l2g[src],
                        tag: info.tag,
                        len: info.len,
                    }));
                }
                Head::Empty => return Ok(Fast::Nothing),
                Head::Other => {}
            }
        }
        match e.poll_match(pat, ring)? {
            None => Ok(Fast::Nothing),
            Some((src, Hit::Ring(info)))
                if info.kind == Kind::Whole
                    && info.len <= out.len()
                    && info.tag & SYNC_TAG == 0 =>
            {
                e.copy_whole(src, &info, out);
                e.disarm();
                Ok(Fast::Done(Status {
                    source: w.inner.l2g[src],
                    tag: info.tag,
                    len: info.len,
                }))
            }
            Some(_) => Ok(Fast::Other),
        }
    }

    /// Like [`Endpoint::recv_matching`], without waiting for a message to arrive: None when no
    /// message matches now. (A message larger than one ring record whose first fragment has
    /// arrived is copied whole: the call then waits for the fragments its sender is writing.)
    pub fn try_recv_matching(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
        buf: &mut [u8],
    ) -> Result<Option<Status>, RecvError> {
        let pat = self.pattern(source, tag)?;
        let mut waiter = Waiter::new(
            wait_from_bits(self.wait.load(Ordering::Relaxed)),
            &self.waits,
        );
        let mut buf = Some(buf);
        let r = self.step(&pat, &mut buf, &mut waiter);
        waiter.finish(&self.world);
        r
    }

    /// The envelope of the first message that a receive from `source` with `tag` would take,
    /// if one has arrived; the message stays queued (MPI_Iprobe).
    pub fn iprobe(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
    ) -> Result<Option<Status>, RecvError> {
        let pat = self.pattern(source, tag)?;
        // Nothing has arrived and no pass would move anything (a program polling for work
        // with MPI_Iprobe): one look at each ring.
        if self.world.quiet_since_pass() {
            return Ok(None);
        }
        let mut waiter = Waiter::new(WaitMode::BusyPoll, &self.waits);
        self.step(&pat, &mut None, &mut waiter)
    }

    /// Waits until a message from `source` with `tag` has arrived and returns its envelope; the
    /// message stays queued for the receive that follows (MPI_Probe).
    pub fn probe(&self, source: Option<usize>, tag: Option<u32>) -> Result<Status, RecvError> {
        let pat = self.pattern(source, tag)?;
        let mut waiter = Waiter::new(
            wait_from_bits(self.wait.load(Ordering::Relaxed)),
            &self.waits,
        );
        loop {
            if let Some(st) = self.step(&pat, &mut None, &mut waiter)? {
                waiter.finish(&self.world);
                return Ok(st);
            }
            waiter.idle(&self.world, self.port, source)?;
        }
    }

    /// Waits for the first message from `source` (None: any) with `tag` (None: any) and takes
    /// it out of matching (MPI_Mprobe): no receive can take it any more, and
    /// [`Endpoint::mrecv`], [`Endpoint::imrecv_lent`] or [`Endpoint::imrecv_unpacked`] moves it
    /// into a buffer. A large message's data stays where it is until then (with its sender on
    /// this host, or announced from another) and lands straight in that buffer; a small one
    /// (at most VOLLEY_EAGER_BYTES) is copied out now. A synchronous send is acknowledged here:
    /// it has matched.
    pub fn mprobe(&self, source: Option<usize>, tag: Option<u32>) -> Result<Matched, RecvError> {
        let pat = self.pattern(source, tag)?;
        let mut waiter = Waiter::new(
            wait_from_bits(self.wait.load(Ordering::Relaxed)),
            &self.waits,
        );
        loop {
            if let Some(m) = self.claim_step(&pat, &mut waiter)? {
                waiter.finish(&self.world);
                return Ok(m);
            }
            waiter.idle(&self.world, self.port, source)?;
        }
    }

    /// [`Endpoint::mprobe`] if a matching message has arrived (MPI_Improbe); None takes
    /// nothing.
    pub fn improbe(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
    ) -> Result<Option<Matched>, RecvError> {
        let pat = self.pattern(source, tag)?;
        let mut waiter = Waiter::new(WaitMode::BusyPoll, &self.waits);
        self.claim_step(&pat, &mut waiter)
    }

    /// Receives the message `m` a matched probe took into `buf` (MPI_Mrecv), waiting for a
    /// large one's data, which lands straight in `buf`. A message longer than `buf` is
    /// received whole, its first `buf.len()` bytes stored, and the receive fails with
    /// [`RecvError::Truncated`].
    pub fn mrecv(&self, m: Matched, buf: &mut [u8]) -> Result<Status, RecvError> {
        let st = m.st;
        let mut waiter = Waiter::new(
            wait_from_bits(self.wait.load(Ordering::Relaxed)),
            &self.waits,
        );
        let r = if buf.len() < st.len {
            let mut whole = vec![0u8; st.len];
            self.world.land(m, &mut whole, &mut waiter).and_then(|_| {
                let room = buf.len();
                buf.copy_from_slice(&whole[..room]);
                Err(RecvError::Truncated {
                    message: st.len,
                    buffer: room,
                    envelope: st,
                })
            })
        } else {
            self.world.land(m, &mut buf[..st.len], &mut waiter)
        };
        waiter.finish(&self.world);
        r
    }

    /// One attempt of a matched probe that takes the message: receives posted earlier are
    /// offered it first, as in [`Endpoint::step`].
    fn claim_step(&self, pat: &Pattern, waiter: &mut Waiter) -> Result<Option<Matched>, RecvError> {
        let w = &self.world;
        loop {
            w.run_due_handlers()?;
            w.drive_posted();
            let veto = |st: &Status| w.posted_accepts(pat.context, st, usize::MAX);
            // Room for any length: the message is taken whatever its size, and a synchronous
            // send is acknowledged.
            match w.claim(pat, &veto, Some(usize::MAX))? {
                Ok((st, found)) => return w.hold(pat, st, found, waiter).map(Some),
                Err(Step::Nothing) => return Ok(None),
                Err(Step::Vetoed) => continue,
                Err(_) => unreachable!("a claim with room ends found, with nothing or vetoed"),
            }
        }
    }

    /// One attempt of a blocking or non-blocking matched receive: receives posted earlier
    /// (see `request`) are offered the messages first, as MPI orders them.
    fn step(
        &self,
        pat: &Pattern,
        buf: &mut Option<&mut [u8]>,
        waiter: &mut Waiter,
    ) -> Result<Option<Status>, RecvError> {
        let w = &self.world;
        loop {
            // Like every volley call that waits: due active-port handlers run.
            w.run_due_handlers()?;
            w.drive_posted();
            let veto = |st: &Status| w.posted_accepts(pat.context, st, usize::MAX);
            match w.match_step(pat, buf, waiter, &veto, false)? {
                Step::Nothing => return Ok(None),
                Step::Done(st) => return Ok(Some(st)),
                // A receive posted earlier takes it: offer it there, then look again.
                Step::Vetoed => continue,
                Step::Started(..) | Step::Placing(..) => unreachable!("not incremental"),
            }
        }
    }

    /// Declares that this endpoint's messages are received by envelope (matched receives and
    /// probes), never in arrival order: from now on, messages for it that block a full ring may
    /// be drained into the process's unexpected-message buffers (see docs/matching.md). The first
    /// matched receive does this by itself; a face calls it when it opens the endpoint, so that
    /// messages arriving before its first receive cannot block the ring for other contexts (an
    /// MPI program may send a large message and then enter a barrier).
    #[inline]
    pub fn use_matching(&self) {
        if !self.matched.load(Ordering::Relaxed) {
            self.note_matching();
        }
    }

    #[cold]
    #[inline(never)]
    fn note_matching(&self) {
        self.matched.store(true, Ordering::Relaxed);
        self.world.eng().note_matched_context(self.port);
    }

    pub(crate) fn pattern(
        &self,
        source: Option<usize>,
        tag: Option<u32>,
    ) -> Result<Pattern, RecvError> {
        if let Some(r) = source {
            if r >= self.world.size() {
                return Err(RecvError::NoSuchRank {
                    rank: r,
                    size: self.world.size(),
                });
            }
        }
        self.use_matching();
        Ok(Pattern::new(self.port, source, tag)
            .ignoring(self.tag_ignore.load(Ordering::Relaxed))
            .keeping_apart(self.tag_apart.load(Ordering::Relaxed)))
    }
}

/// Where the bytes of a message go as they arrive: the caller's buffer, or an unpacker (a
/// non-contiguous datatype unpacked piece by piece).
pub(crate) trait Sink {
    fn size(&self) -> usize;
    fn put(&mut self, off: usize, data: &[u8]);
}

impl Sink for [u8] {
    #[inline]
    fn size(&self) -> usize {
        self.len()
    }
    #[inline]
    fn put(&mut self, off: usize, data: &[u8]) {
        self[off..off + data.len()].copy_from_slice(data);
    }
}

/// An unpacker taking exactly one message's `len` bytes.
pub(crate) struct Unpacking<'a> {
    pub u: &'a mut dyn crate::Unpacker,
    pub len: usize,
}

impl Sink for Unpacking<'_> {
    fn size(&self) -> usize {
        self.len
    }
    fn put(&mut self, off: usize, data: &[u8]) {
        self.u.unpack(off, data);
    }
}

/// A fragmented message being copied into a caller's buffer: the ring it comes from, where its
/// latest fragment sat and how many bytes have arrived.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Gathering {
    pub src: usize,
    pub pos: u64,
    pub off: usize,
    /// A granted rendezvous: its data comes as stream records with this grant id.
    pub stream: Option<u32>,
}

impl Gathering {
    /// A message whose first fragment `first` is in the ring from `src`, nothing copied yet.
    pub fn at(src: usize, first: &RecordInfo) -> Gathering {
        Gathering {
            src,
            pos: first.pos,
            off: 0,
            stream: None,
        }
    }
}

/// A message a matched probe took out of matching ([`Endpoint::mprobe`]), waiting for the
/// receive that moves it into a buffer. No receive or probe can match it any more.
pub struct Matched {
    pub(crate) pat: Pattern,
    pub(crate) st: Status,
    pub(crate) held: Held,
}

impl Matched {
    /// Its envelope: source, tag (with volley's flag bits, as a probe reports them) and length.
    pub fn status(&self) -> Status {
        self.st
    }
}

impl std::fmt::Debug for Matched {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let how = match &self.held {
            Held::Data(_) => "copied out",
            Held::Net(_) => "in the network engine's buffer",
            Held::Rts { .. } => "with its sender (rendezvous)",
            Held::Announced { .. } => "announced from another host",
        };
        write!(f, "Matched({:?}, {how})", self.st)
    }
}

/// Where a matched-probed message's data is.
pub(crate) enum Held {
    /// Copied out of its ring (or drained buffer): an eager message.
    Data(Vec<u8>),
    /// An eager message from another host, in the network engine's reassembly buffer.
    Net(Vec<u8>),
    /// A request to send from local rank `src` (its ring position `pos`): the data is still
    /// in the sender's memory.
    Rts {
        src: usize,
        rts: volley_shm::Rts,
        pos: u64,
    },
    /// A large message from another host (rank `src`, message `msg`), announced, not accepted
    /// yet: its data is still with the sender.
    Announced { src: usize, msg: u64 },
}

/// Where a message `World::find` found is.
enum Found {
    /// A record in the ring from local rank `.0`.
    Ring(usize, RecordInfo),
    /// Message `.1` drained out of the ring from local rank `.0`.
    Drained(usize, usize),
    /// The first one the pattern accepts in the network inbox.
    Net,
}

/// The outcome of one matching attempt.
pub(crate) enum Step {
    /// No message matches yet.
    Nothing,
    /// A message matches, but a receive posted earlier accepts it too and must get it first.
    Vetoed,
    /// The message is in the buffer (or, for a probe, its envelope is known).
    Done(Status),
    /// The first fragments are in the buffer; the rest follow (see [`World::more_fragments`]).
    Started(Status, Gathering),
    /// (Incremental only.) A large message from another host, matched and taken out of the
    /// inbox, its data still with its sender (rank `.1`, message `.2`): the caller lends the
    /// buffer to the network ([`crate::net::Net::place`]) and the data lands there.
    Placing(Status, usize, u64),
}

impl World {
    /// Where the first message `pat` accepts is, and its envelope: the rings first (the
    /// source's, or all of them, drained messages before ring records), then the network. Runs
    /// due active-port handlers of the network on the way. Moves nothing.
    #[inline(always)]
    fn find(&self, pat: &Pattern) -> Result<Option<(Status, Found)>, RecvError> {
        // The ring to look at: the source's, or every ring for any source; none when the
        // source is on another host.
        let ring = pat.source.map(|r| self.route(r));
        let hit = {
            let mut e = self.eng();
            e.refresh_fates();
            e.drive_pending();
            match ring {
                Some(None) => None,
                Some(Some(li)) => e.poll_match(pat, Some(li))?,
                None => e.poll_match(pat, None)?,
            }
        };
        match hit {
            Some((src, Hit::Ring(info))) => {
                let st = Status {
                    source: self.inner.l2g[src],
                    tag: info.tag,
                    len: info.total_len as usize,
                };
                return Ok(Some((st, Found::Ring(src, info))));
            }
            Some((src, Hit::Drained(k))) => {
                let (tag, len) = self.eng().drained_envelope(src, k);
                let st = Status {
                    source: self.inner.l2g[src],
                    tag,
                    len,
                };
                return Ok(Some((st, Found::Drained(src, k))));
            }
            None => {}
        }
        if matches!(ring, Some(Some(_))) {
            // A sender on this host: nothing can come from the network.
            return Ok(None);
        }
        let Some(net) = self.net_poll() else {
            return Ok(None);
        };
        let found = net.borrow_mut().peek_matching(pat);
        Ok(found.map(|(source, tag, len)| (Status { source, tag, len }, Found::Net)))
    }

    /// Moves the message `find` found for `pat` into `out` (exactly its length): straight from
    /// the ring or the sender's memory, from its drained buffer, or from the network engine's.
    #[inline]
    fn take(
        &self,
        pat: &Pattern,
        st: Status,
        found: Found,
        out: &mut [u8],
        waiter: &mut Waiter,
        incremental: bool,
    ) -> Result<Step, RecvError> {
        match found {
            Found::Ring(src, info) => {
                let mut e = self.eng();
                match info.kind {
                    Kind::Whole => e.copy_whole(src, &info, out),
                    Kind::Rndv => {
                        // Single copy: from the sender's memory straight into the caller's buffer.
                        e.copy_single(src, &info, Dest::Slice(out))?;
                        e.count(Counter::MsgsRecvd, 1);
                        e.count(Counter::BytesRecvd, st.len as u64);
                    }
                    Kind::Rts => {
                        let rts = e.take_rts(src, &info)?;
                        drop(e);
                        return self.rendezvous(
                            pat,
                            st,
                            src,
                            (rts, info.pos),
                            out,
                            waiter,
                            incremental,
                        );
                    }
                    _ => {
                        // A first fragment: the rest follow in this ring, into the caller's buffer.
                        drop(e);
                        let mut g = Gathering::at(src, &info);
                        let done = self.copy_fragments(
                            pat.context,
                            &mut g,
                            Some(&info),
                            out,
                            waiter,
                            incremental,
                        )?;
                        return Ok(if done {
                            Step::Done(st)
                        } else {
                            Step::Started(st, g)
                        });
                    }
                }
                Ok(Step::Done(st))
            }
            Found::Drained(src, k) => {
                // A message drained out of its full ring: copied once more, from our buffer.
                let mut e = self.eng();
                let d = e.take_drained(src, k);
                if let Some(rts) = d.rts {
                    // A request to send: its data is still with the sender.
                    drop(e);
                    return self.rendezvous(pat, st, src, rts, out, waiter, incremental);
                }
                let got = d.data.len();
                out[..got].copy_from_slice(&d.data);
                e.recycle_drained(d.data);
                e.count(Counter::StagingCopies, 1);
                let Some(pos) = d.open else {
                    e.count(Counter::MsgsRecvd, 1);
                    e.count(Counter::BytesRecvd, st.len as u64);
                    return Ok(Step::Done(st));
                };
                drop(e);
                // The rest is still arriving in the ring: straight into the caller's buffer.
                let mut g = Gathering {
                    src,
                    pos,
                    off: got,
                    stream: None,
                };
                let done =
                    self.copy_fragments(pat.context, &mut g, None, out, waiter, incremental)?;
                Ok(if done {
                    Step::Done(st)
                } else {
                    Step::Started(st, g)
                })
            }
            Found::Net => self.take_from_net(pat, st, out, waiter, incremental),
        }
    }

    /// Takes the message `claim` found for `pat` out of matching, its data left with its sender
    /// where it is large (see [`Endpoint::mprobe`]).
    fn hold(
        &self,
        pat: &Pattern,
        st: Status,
        found: Found,
        waiter: &mut Waiter,
    ) -> Result<Matched, RecvError> {
        let held = match found {
            Found::Ring(src, info) if info.kind == Kind::Rts => {
                let rts = self.eng().take_rts(src, &info)?;
                Held::Rts {
                    src,
                    rts,
                    pos: info.pos,
                }
            }
            Found::Drained(src, k) if self.eng().drained_is_rts(src, k) => {
                let d = self.eng().take_drained(src, k);
                let (rts, pos) = d.rts.expect("checked");
                Held::Rts { src, rts, pos }
            }
            Found::Net => {
                let m = self.net().take_matching(pat).expect("found");
                match m.announced {
                    Some(a) => Held::Announced {
                        src: m.src,
                        msg: a.msg,
                    },
                    None => Held::Net(m.data),
                }
            }
            found => {
                // Eager (at most VOLLEY_EAGER_BYTES): out of the ring now, so that the ring
                // moves on.
                let mut data = vec![0u8; st.len];
                match self.take(pat, st, found, &mut data, waiter, false)? {
                    Step::Done(_) => Held::Data(data),
                    _ => unreachable!("a whole (not incremental) take ends done"),
                }
            }
        };
        Ok(Matched {
            pat: *pat,
            st,
            held,
        })
    }

    /// Moves the matched-probed message `m` into `out` (exactly its length), waiting for a
    /// large one's data, which lands there straight.
    pub(crate) fn land(
        &self,
        m: Matched,
        out: &mut [u8],
        waiter: &mut Waiter,
    ) -> Result<Status, RecvError> {
        let Matched { pat, st, held } = m;
        match held {
            Held::Data(d) => out.copy_from_slice(&d),
            Held::Net(d) => {
                out.copy_from_slice(&d);
                self.took_eager(d);
            }
            Held::Rts { src, rts, pos } => {
                match self.rendezvous(&pat, st, src, (rts, pos), out, waiter, false)? {
                    Step::Done(_) => {}
                    _ => unreachable!("a whole (not incremental) rendezvous ends done"),
                }
            }
            Held::Announced { src, msg } => {
                self.place_blocking(pat.context, src, msg, out, waiter)?
            }
        }
        Ok(st)
    }

    /// Moves the first network message `pat` accepts (its envelope `st`, just found) into `out`
    /// (exactly its length). A large one, announced, its data still with the sender, is accepted
    /// now and comes straight into `out` (`incremental`: [`Step::Placing`], for the caller to lend
    /// its buffer); an eager one is copied out of the protocol's reassembly buffer.
    pub(crate) fn take_from_net(
        &self,
        pat: &Pattern,
        st: Status,
        out: &mut [u8],
        waiter: &mut Waiter,
        incremental: bool,
    ) -> Result<Step, RecvError> {
        let net = self.inner.net.as_ref().expect("found on the network");
        let m = net.borrow_mut().take_matching(pat).expect("found");
        if let Some(a) = m.announced {
            if incremental {
                return Ok(Step::Placing(st, m.src, a.msg));
            }
            self.place_blocking(pat.context, m.src, a.msg, out, waiter)?;
            return Ok(Step::Done(st));
        }
        out.copy_from_slice(&m.data);
        self.took_eager(m.data);
        Ok(Step::Done(st))
    }

    /// An eager network message, `data`, copied out by its receive: its buffer goes back to
    /// the network engine, and it is counted.
    pub(crate) fn took_eager(&self, data: Vec<u8>) {
        let len = data.len() as u64;
        self.net().recycle(data);
        let mut e = self.eng();
        e.count(Counter::MsgsRecvd, 1);
        e.count(Counter::BytesRecvd, len);
        // The protocol reassembled the message in a buffer of its own.
        e.count(Counter::StagingCopies, 1);
    }

    /// Whether announced message `msg` from `src` is whole in the buffer lent for it (`len`
    /// bytes); if so the loan ends and the message is counted as received.
    pub(crate) fn take_placed(&self, src: usize, msg: u64, len: usize) -> bool {
        if !self.net().take_placed(src, msg) {
            return false;
        }
        let mut e = self.eng();
        e.count(Counter::MsgsRecvd, 1);
        e.count(Counter::BytesRecvd, len as u64);
        true
    }

    /// Receives the announced message `msg` from `src` (another host) into `out`, waiting until
    /// every byte is there: `out` is lent to the network for that long.
    #[cold]
    #[inline(never)]
    fn place_blocking(
        &self,
        context: u32,
        src: usize,
        msg: u64,
        out: &mut [u8],
        waiter: &mut Waiter,
    ) -> Result<(), RecvError> {
        let net = self.inner.net.as_ref().expect("a message from the network");
        // The loan ends when the message is whole, or (on any error) when the scope's settle
        // gives it up.
        let len = out.len();
        volley_sys::lend::scope(
            || net.borrow_mut().abandon_placing(src, msg),
            |l| {
                net.borrow_mut().place(src, msg, l.lend_mut(out));
                loop {
                    if self.net_poll().is_some() && self.take_placed(src, msg, len) {
                        return Ok(());
                    }
                    waiter.idle(self, context, Some(src))?;
                }
            },
        )
    }

    /// One non-blocking attempt at a matched receive (`buf` Some) or a probe (`buf` None),
    /// over both paths: find the message, ask `veto` (MPI's order among receives posted
    /// earlier), then move it. A fragmented message is copied whole, waiting for its fragments,
    /// unless `incremental`, when the copy stops at the fragments that have arrived.
    pub(crate) fn match_step(
        &self,
        pat: &Pattern,
        buf: &mut Option<&mut [u8]>,
        waiter: &mut Waiter,
        veto: &dyn Fn(&Status) -> bool,
        incremental: bool,
    ) -> Result<Step, RecvError> {
        // The common case, a receive from a rank of this host whose message is next in its
        // ring, whole, fits and wants no acknowledgement: popped in one step (as `fast_pass`),
        // the veto asked before anything is taken. Anything else takes the full path below.
        if let (Some(out), Some(Some(src))) =
            (buf.as_deref_mut(), pat.source.map(|r| self.route(r)))
        {
            let source = self.inner.l2g[src];
            let head = {
                let mut e = self.eng();
                e.refresh_fates();
                e.drive_pending();
                e.pop_match(
                    pat,
                    src,
                    |r| {
                        r.tag & SYNC_TAG == 0
                            && !veto(&Status {
                                source,
                                tag: r.tag,
                                len: r.len,
                            })
                    },
                    out,
                )?
            };
            match head {
                Head::Taken(info) => {
                    return Ok(Step::Done(Status {
                        source,
                        tag: info.tag,
                        len: info.len,
                    }))
                }
                Head::Empty => return Ok(Step::Nothing),
                Head::Other => {}
            }
        }
        let room = buf.as_deref().map(<[u8]>::len);
        let (st, found) = match self.claim(pat, veto, room)? {
            Ok(claimed) => claimed,
            Err(step) => return Ok(step),
        };
        let out = buf
            .as_deref_mut()
            .expect("claim returns a probe's envelope as a step");
        self.take(pat, st, found, &mut out[..st.len], waiter, incremental)
    }

    /// A posted receive (`pat`) matched message `st` but is too small for it: MPI's rule is that
    /// the message is still this receive's, so it is taken now (whole, into a buffer of its
    /// size) and its first `room` bytes handed to `store`; left queued, a receive posted later
    /// could take it instead (MPICH's errors/pt2pt/errinstat* found this). Returns the error
    /// that ends the receive: [`RecvError::Truncated`], or whatever stopped the taking.
    #[cold]
    #[inline(never)]
    pub(crate) fn take_truncated(
        &self,
        pat: &Pattern,
        st: Status,
        room: usize,
        waiter: &mut Waiter,
        store: &mut dyn FnMut(&[u8]),
    ) -> RecvError {
        // Messages from one source with one tag do not overtake each other: the first that
        // this exact pattern finds is the one matched.
        let exact = Pattern {
            source: Some(st.source),
            tag: Some(st.tag),
            ..*pat
        };
        let mut whole = vec![0u8; st.len];
        loop {
            let mut out = Some(&mut whole[..]);
            match self.match_step(&exact, &mut out, waiter, &|_| false, false) {
                Ok(Step::Done(_)) => break,
                Ok(Step::Nothing | Step::Vetoed) => {
                    if let Err(e) = waiter.idle(self, exact.context, Some(st.source)) {
                        return e;
                    }
                }
                Ok(Step::Started(..) | Step::Placing(..)) => {
                    unreachable!("a whole (not incremental) receive ends done")
                }
                Err(e) => return e,
            }
        }
        waiter.finish(self);
        store(&whole[..room]);
        RecvError::Truncated {
            message: st.len,
            buffer: room,
            envelope: st,
        }
    }

    /// What every matched receive and probe does before data moves: find the message, let a
    /// receive posted earlier have it (`veto`), then for a receive into `room` bytes (None: a
    /// probe, which ends here) check its size and acknowledge a synchronous send.
    /// `Err(step)` ends the attempt with that step.
    #[inline(always)]
    fn claim(
        &self,
        pat: &Pattern,
        veto: &dyn Fn(&Status) -> bool,
        room: Option<usize>,
    ) -> Result<Result<(Status, Found), Step>, RecvError> {
        let Some((st, found)) = self.find(pat)? else {
            return Ok(Err(Step::Nothing));
        };
        if veto(&st) {
            return Ok(Err(Step::Vetoed));
        }
        let Some(room) = room else {
            return Ok(Err(Step::Done(st)));
        };
        if st.len > room {
            return Err(RecvError::BufferTooSmall {
                message: st.len,
                buffer: room,
                envelope: Some(st),
            });
        }
        if st.tag & SYNC_TAG != 0 && pat.ignore & SYNC_TAG != 0 {
            self.acknowledge(pat.context, &st)?;
        }
        Ok(Ok((st, found)))
    }

    /// Receives the rendezvous message whose request to send (and its ring position) `rts` came
    /// from `src` into `out`: by single copy, or granted and streamed into `out` as it comes
    /// (see `engine::rendezvous`).
    #[allow(clippy::too_many_arguments)]
    #[cold]
    #[inline(never)]
    fn rendezvous(
        &self,
        pat: &Pattern,
        st: Status,
        src: usize,
        (rts, pos): (volley_shm::Rts, u64),
        out: &mut [u8],
        waiter: &mut Waiter,
        incremental: bool,
    ) -> Result<Step, RecvError> {
        let gid = {
            let mut e = self.eng();
            match e.accept_rts(src, &rts, out)? {
                None => {
                    e.count(Counter::MsgsRecvd, 1);
                    e.count(Counter::BytesRecvd, st.len as u64);
                    return Ok(Step::Done(st));
                }
                Some(gid) => gid,
            }
        };
        let mut g = Gathering {
            src,
            pos,
            off: 0,
            stream: Some(gid),
        };
        let done = self.copy_fragments(pat.context, &mut g, None, out, waiter, incremental)?;
        Ok(if done {
            Step::Done(st)
        } else {
            Step::Started(st, g)
        })
    }

    /// [`World::match_step`] for a receive into an unpacker: a rendezvous is granted and its
    /// stream unpacked piece by piece as it comes (never whole in a buffer), from the ring or,
    /// from another host, from each packet ([`Step::Placing`]: the caller lends the unpacker
    /// to the network); an eager message from the network is unpacked from the engine's buffer,
    /// one from a ring (at most VOLLEY_EAGER_BYTES) copied into a buffer of its size first.
    pub(crate) fn match_step_unpack(
        &self,
        pat: &Pattern,
        u: &mut dyn crate::Unpacker,
        waiter: &mut Waiter,
        veto: &dyn Fn(&Status) -> bool,
    ) -> Result<Step, RecvError> {
        let (st, found) = match self.claim(pat, veto, Some(u.len()))? {
            Ok(claimed) => claimed,
            Err(step) => return Ok(step),
        };
        let rts = match found {
            Found::Ring(src, info) if info.kind == Kind::Rts => {
                let rts = self.eng().take_rts(src, &info)?;
                Some((src, rts, info.pos))
            }
            Found::Drained(src, k) if self.eng().drained_is_rts(src, k) => {
                let d = self.eng().take_drained(src, k);
                let (rts, pos) = d.rts.expect("checked");
                Some((src, rts, pos))
            }
            _ => None,
        };
        if let Some((src, rts, pos)) = rts {
            let gid = self.eng().grant_rts(src, &rts);
            let mut g = Gathering {
                src,
                pos,
                off: 0,
                stream: Some(gid),
            };
            let mut sink = Unpacking { u, len: st.len };
            let done = self.more_fragments(pat.context, &mut g, &mut sink)?;
            return Ok(if done {
                Step::Done(st)
            } else {
                Step::Started(st, g)
            });
        }
        if let Found::Net = found {
            // From another host: an announced message is accepted into the unpacker
            // ([`Step::Placing`]: the caller hands it to the network, which unpacks each
            // fragment as it comes); an eager one is unpacked from the engine's buffer.
            let m = self.net().take_matching(pat).expect("found");
            if let Some(a) = m.announced {
                return Ok(Step::Placing(st, m.src, a.msg));
            }
            u.unpack(0, &m.data);
            self.took_eager(m.data);
            return Ok(Step::Done(st));
        }
        let mut stage = vec![0u8; st.len];
        match self.take(pat, st, found, &mut stage, waiter, false)? {
            Step::Done(st) => {
                u.unpack(0, &stage);
                self.eng().count(Counter::StagingCopies, 1);
                Ok(Step::Done(st))
            }
            other => Ok(other),
        }
    }

    /// Tells the sender of a synchronous message that a receive matched it (MPI_Ssend completes
    /// then): an empty message on `context + 1` to the sender, with the message's tag less the
    /// flag. Started, not waited for: a full ring queues it behind earlier sends.
    fn acknowledge(&self, context: u32, st: &Status) -> Result<(), RecvError> {
        let lost = |e: SendError| match e {
            SendError::PeerLost(p) => RecvError::PeerLost(p),
            other => RecvError::Corrupt {
                rank: st.source,
                why: format!("cannot acknowledge a synchronous send: {other}"),
            },
        };
        let path = self.path(st.source).map_err(lost)?;
        path.start(
            context.wrapping_add(1),
            st.tag & !SYNC_TAG,
            Payload::Owned(Vec::new()),
            Reliability::Reliable,
        )
        .map_err(lost)?;
        Ok(())
    }

    /// Copies a fragmented message into `out` (exactly its length): `first` if given, then
    /// the fragments that have arrived after `g`'s position; then waits for the rest, unless
    /// `incremental`. Returns whether the message is complete.
    pub(crate) fn copy_fragments<S: Sink + ?Sized>(
        &self,
        port: u32,
        g: &mut Gathering,
        first: Option<&RecordInfo>,
        out: &mut S,
        waiter: &mut Waiter,
        incremental: bool,
    ) -> Result<bool, RecvError> {
        if let Some(info) = first {
            if self.take_fragment(port, g, info, out)? {
                return Ok(true);
            }
        }
        while !self.more_fragments(port, g, out)? {
            if incremental {
                return Ok(false);
            }
            waiter.idle(self, port, Some(self.inner.l2g[g.src]))?;
        }
        Ok(true)
    }

    /// Copies the fragment `info` of the message `g` gathers into `out` (exactly the message's
    /// size). Returns true when the message is complete.
    fn take_fragment<S: Sink + ?Sized>(
        &self,
        port: u32,
        g: &mut Gathering,
        info: &RecordInfo,
        out: &mut S,
    ) -> Result<bool, RecvError> {
        let src = g.src;
        let mut e = self.eng();
        let end = g.off + info.len;
        if end > out.size() {
            return Err(RecvError::Corrupt {
                rank: self.inner.l2g[src],
                why: format!("fragments exceed the message length {}", out.size()),
            });
        }
        let held = e.rx(src).take(info);
        out.put(g.off, e.rx(src).payload(&held));
        e.rx(src).release(held);
        e.count(Counter::Fragments, 1);
        g.off = end;
        g.pos = info.pos;
        let len = out.size();
        if info.kind == Kind::Stream {
            // A granted rendezvous ends with its length.
            if g.off < len {
                return Ok(false);
            }
            e.count(Counter::MsgsRecvd, 1);
            e.count(Counter::BytesRecvd, len as u64);
            return Ok(true);
        }
        if info.kind == Kind::Last || g.off == len {
            if info.kind != Kind::Last && !(info.kind == Kind::First && g.off == len) {
                return Err(RecvError::Corrupt {
                    rank: self.inner.l2g[src],
                    why: format!("message on port {port} ended without a last fragment"),
                });
            }
            e.count(Counter::MsgsRecvd, 1);
            e.count(Counter::BytesRecvd, len as u64);
            return Ok(true);
        }
        Ok(false)
    }

    /// Copies the fragments of `g`'s message that have arrived into `out`; true once it is
    /// complete. Never waits.
    pub(crate) fn more_fragments<S: Sink + ?Sized>(
        &self,
        port: u32,
        g: &mut Gathering,
        out: &mut S,
    ) -> Result<bool, RecvError> {
        loop {
            let next = {
                let mut e = self.eng();
                e.refresh_fates();
                // Our own queued sends move on while we wait: the sender may be waiting for
                // them before it writes the rest of this message.
                e.drive_pending();
                let n = match g.stream {
                    Some(gid) => e.next_stream(g.src, gid, g.pos)?,
                    None => e.next_from(g.src, port, g.pos)?,
                };
                if n.is_none() {
                    // The rest may be stuck behind a drained message's later fragments (taken
                    // with room to spare for this one's first): drain them so the sender can go
                    // on.
                    e.drain(g.src)?;
                }
                n
            };
            match next {
                Some(n)
                    if (g.stream.is_some() && n.kind == Kind::Stream)
                        || (n.context == port && matches!(n.kind, Kind::Middle | Kind::Last)) =>
                {
                    if self.take_fragment(port, g, &n, out)? {
                        return Ok(true);
                    }
                }
                Some(n) => {
                    return Err(RecvError::Corrupt {
                        rank: self.inner.l2g[g.src],
                        why: format!(
                            "{:?} record for port {} inside a fragmented message",
                            n.kind, n.context
                        ),
                    })
                }
                None => return Ok(false),
            }
        }
    }
}
