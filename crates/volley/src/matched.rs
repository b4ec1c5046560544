//! Receiving and probing by envelope: the first message whose (source, tag) a pattern accepts, in
//! each sender's order, moved straight into the caller's buffer.

use crate::config::WaitMode;
use crate::counters::Counter;
use crate::endpoint::{wait_from_bits, Endpoint};
use crate::error::RecvError;
use crate::matching::{Pattern, Status};
use crate::recv::{copy_single, Dest};
use crate::wait::Waiter;
use std::sync::atomic::Ordering;
use volley_shm::{Kind, RecordInfo};

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
        let mut waiter = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
        let mut buf = Some(buf);
        loop {
            if let Some(st) = self.match_step(&pat, &mut buf, &mut waiter)? {
                waiter.finish(&self.world);
                return Ok(st);
            }
            waiter.idle(&self.world, self.port, source)?;
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
        let mut waiter = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
        let mut buf = Some(buf);
        let r = self.match_step(&pat, &mut buf, &mut waiter);
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
        let mut waiter = Waiter::new(WaitMode::BusyPoll);
        self.match_step(&pat, &mut None, &mut waiter)
    }

    /// Waits until a message from `source` with `tag` has arrived and returns its envelope; the
    /// message stays queued for the receive that follows (MPI_Probe).
    pub fn probe(&self, source: Option<usize>, tag: Option<u32>) -> Result<Status, RecvError> {
        let pat = self.pattern(source, tag)?;
        let mut waiter = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
        loop {
            if let Some(st) = self.match_step(&pat, &mut None, &mut waiter)? {
                waiter.finish(&self.world);
                return Ok(st);
            }
            waiter.idle(&self.world, self.port, source)?;
        }
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
        Ok(Pattern::new(self.port, source, tag))
    }

    /// One non-blocking attempt at a matched receive (`buf` Some) or a probe (`buf` None):
    /// the rings first, then the network. Runs due active-port handlers on the way.
    pub(crate) fn match_step(
        &self,
        pat: &Pattern,
        buf: &mut Option<&mut [u8]>,
        waiter: &mut Waiter,
    ) -> Result<Option<Status>, RecvError> {
        let w = &self.world;
        // The ring to look at: the source's, or every ring for any source; none when the
        // source is on another host.
        let ring = pat.source.map(|r| w.route(r));
        let found = {
            let mut e = w.eng();
            e.refresh_fates();
            e.drive_pending();
            match ring {
                Some(None) => None,
                Some(Some(li)) => e.poll_match(pat, Some(li))?,
                None => e.poll_match(pat, None)?,
            }
        };
        if let Some((src, info)) = found {
            let st = Status {
                source: w.inner.l2g[src],
                tag: info.tag,
                len: info.total_len as usize,
            };
            let Some(out) = buf.as_deref_mut() else {
                return Ok(Some(st));
            };
            if st.len > out.len() {
                return Err(RecvError::BufferTooSmall {
                    message: st.len,
                    buffer: out.len(),
                });
            }
            let out = &mut out[..st.len];
            let mut e = w.eng();
            match info.kind {
                Kind::Whole => e.copy_whole(src, &info, out),
                Kind::Rndv => {
                    // Single copy: from the sender's memory straight into the caller's buffer.
                    copy_single(&mut e, src, &info, Dest::Slice(out))?;
                    e.counters.add(Counter::MsgsRecvd, 1);
                    e.counters.add(Counter::BytesRecvd, st.len as u64);
                }
                _ => {
                    // A first fragment: the rest follow in this ring, into the caller's buffer.
                    drop(e);
                    self.copy_fragments(src, &info, out, waiter)?;
                }
            }
            return Ok(Some(st));
        }
        if matches!(ring, Some(Some(_))) {
            // A sender on this host: nothing can come from the network.
            return Ok(None);
        }
        let Some(net) = w.net_poll() else {
            return Ok(None);
        };
        let Some((source, tag, len)) = net.borrow_mut().peek_matching(pat) else {
            return Ok(None);
        };
        let st = Status { source, tag, len };
        let Some(out) = buf.as_deref_mut() else {
            return Ok(Some(st));
        };
        if len > out.len() {
            return Err(RecvError::BufferTooSmall {
                message: len,
                buffer: out.len(),
            });
        }
        let m = net.borrow_mut().take_matching(pat).expect("peeked");
        out[..len].copy_from_slice(&m.data);
        net.borrow_mut().recycle(m.data);
        let mut e = w.eng();
        e.counters.add(Counter::MsgsRecvd, 1);
        e.counters.add(Counter::BytesRecvd, len as u64);
        Ok(Some(st))
    }

    /// Copies a fragmented message from ring `src` into `out` (exactly its size).
    pub(crate) fn copy_fragments(
        &self,
        src: usize,
        first: &RecordInfo,
        out: &mut [u8],
        waiter: &mut Waiter,
    ) -> Result<(), RecvError> {
        let w = &self.world;
        let mut info = *first;
        let mut off = 0;
        loop {
            {
                let mut e = w.eng();
                let end = off + info.len;
                if end > out.len() {
                    return Err(RecvError::Corrupt {
                        rank: w.inner.l2g[src],
                        why: format!("fragments exceed the message length {}", out.len()),
                    });
                }
                let held = e.rx[src].take(&info);
                out[off..end].copy_from_slice(e.rx[src].payload(&held));
                e.rx[src].release(held);
                e.counters.add(Counter::Fragments, 1);
                off = end;
                if info.kind == Kind::Last || off == out.len() {
                    if info.kind != Kind::Last && !(info.kind == Kind::First && off == out.len()) {
                        return Err(RecvError::Corrupt {
                            rank: w.inner.l2g[src],
                            why: "message ended without a last fragment".into(),
                        });
                    }
                    e.counters.add(Counter::MsgsRecvd, 1);
                    e.counters.add(Counter::BytesRecvd, out.len() as u64);
                    return Ok(());
                }
            }
            // Wait for the next fragment on this ring only.
            loop {
                let next = {
                    let mut e = w.eng();
                    e.refresh_fates();
                    // Our own queued sends move on while we wait: the sender may be waiting for
                    // them before it writes the rest of this message.
                    e.drive_pending();
                    e.next_from(src, self.port, info.pos)?
                };
                match next {
                    Some(n)
                        if n.context == self.port
                            && matches!(n.kind, Kind::Middle | Kind::Last) =>
                    {
                        info = n;
                        break;
                    }
                    Some(n) => {
                        return Err(RecvError::Corrupt {
                            rank: w.inner.l2g[src],
                            why: format!(
                                "{:?} record for port {} inside a fragmented message",
                                n.kind, n.context
                            ),
                        })
                    }
                    None => waiter.idle(w, self.port, Some(w.inner.l2g[src]))?,
                }
            }
        }
    }
}
