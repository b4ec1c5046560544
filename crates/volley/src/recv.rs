//! Receiving in arrival order (Directed Point's recv): lent in place, gathered from fragments,
//! or copied by single copy from the sender's memory.

use crate::counters::Counter;
use crate::endpoint::{wait_from_bits, Endpoint};
use crate::engine::{Dest, Poll};
use crate::error::RecvError;
use crate::matched::Gathering;
use crate::matching::{Pattern, Status};
use crate::message::{Body, Message, Source};
use crate::wait::Waiter;
use std::sync::atomic::Ordering;
use volley_shm::Kind;

impl Endpoint {
    /// A message from another host for this endpoint, if one has arrived.
    pub(crate) fn net_take(&self) -> Option<Message> {
        let w = &self.world;
        let m = w.net_poll()?.borrow_mut().take(self.port)?;
        let mut e = w.eng();
        e.count(Counter::MsgsRecvd, 1);
        e.count(Counter::BytesRecvd, m.data.len() as u64);
        Some(Message {
            world: w.clone(),
            src: Source {
                rank: m.src,
                port: m.tag,
            },
            body: Body::Net(m.data),
        })
    }

    /// Waits for a message and lends it in place from the receive pool (no copy for messages up to
    /// [`World::max_inline`]; larger ones are gathered into one buffer). The ring slot returns to
    /// the pool when the message is dropped; while you hold it, later messages from the same
    /// sender still arrive.
    pub fn recv(&self) -> Result<Message, RecvError> {
        let mut w = Waiter::new(
            wait_from_bits(self.wait.load(Ordering::Relaxed)),
            &self.waits,
        );
        loop {
            if let Some(m) = self.recv_step()? {
                if !m.is_in_place() {
                    // (recv_step disarmed already when it lent a message in place.)
                    w.finish(&self.world);
                }
                return Ok(m);
            }
            w.idle(&self.world, self.port, None)?;
        }
    }

    /// Returns a message if one is waiting, without blocking. When it returns None the endpoint's
    /// descriptor ([`AsRawFd`]) is armed: it becomes readable when the next message arrives.
    pub fn try_recv(&self) -> Result<Option<Message>, RecvError> {
        if let Some(m) = self.recv_step()? {
            return Ok(Some(m));
        }
        self.world.eng().arm();
        let m = self.recv_step()?;
        if m.is_some() {
            self.world.eng().disarm();
        }
        Ok(m)
    }

    /// One non-blocking attempt: dispatches active messages met on the way, gathers fragments.
    pub(crate) fn recv_step(&self) -> Result<Option<Message>, RecvError> {
        let w = &self.world;
        let dispatch = w.inner.dispatch_depth.get() == 0;
        loop {
            // A whole message is taken in the same borrow that found it (each borrow marks and
            // checks the owner's flag).
            let mut took = None;
            let poll = {
                let mut e = w.eng();
                e.refresh_fates();
                e.drive_pending();
                let p = e.poll_port(self.port, dispatch)?;
                if let Poll::Found(src, info) = p {
                    if info.kind == Kind::Whole && e.rx(src).has_lent() {
                        // The application still holds the last message this ring lent it: one
                        // lent record per ring can be parked out of the producer's way (see
                        // Consumer::take_shared), so copy this one.
                        let rx = e.rx(src);
                        let held = rx.take(&info);
                        let copy = rx.payload(&held).to_vec();
                        rx.release(held);
                        e.disarm();
                        e.count(Counter::MsgsRecvd, 1);
                        e.count(Counter::StagingCopies, 1);
                        e.count(Counter::BytesRecvd, info.len as u64);
                        return Ok(Some(Message {
                            world: w.clone(),
                            src: Source {
                                rank: w.inner.l2g[src],
                                port: info.tag,
                            },
                            body: Body::Owned(copy),
                        }));
                    }
                    if info.kind == Kind::Whole {
                        took = Some(e.rx(src).take_shared(&info));
                        // What Waiter::finish would do, without another borrow.
                        e.disarm();
                        e.count(Counter::MsgsRecvd, 1);
                        e.count(Counter::ZeroCopyRecvs, 1);
                        e.count(Counter::BytesRecvd, info.len as u64);
                    }
                }
                p
            };
            match poll {
                Poll::Nothing => return Ok(self.net_take()),
                Poll::Active(src, info) => {
                    w.dispatch(src, info)?;
                }
                Poll::Found(src, info) if info.kind == Kind::Whole => {
                    let held = took.expect("taken above");
                    return Ok(Some(Message {
                        world: w.clone(),
                        src: Source {
                            rank: w.inner.l2g[src],
                            port: info.tag,
                        },
                        body: Body::Ring {
                            ring: src,
                            held: Some(held),
                        },
                    }));
                }
                Poll::Found(src, info) if info.kind == Kind::Rndv => {
                    let mut e = w.eng();
                    let mut buf = e.take_spare();
                    let n = e.copy_single(src, &info, Dest::Vec(&mut buf))?;
                    e.count(Counter::MsgsRecvd, 1);
                    e.count(Counter::BytesRecvd, n as u64);
                    return Ok(Some(Message {
                        world: w.clone(),
                        src: Source {
                            rank: w.inner.l2g[src],
                            port: info.tag,
                        },
                        body: Body::Owned(buf),
                    }));
                }
                Poll::Found(src, info) => {
                    let mut e = w.eng();
                    if let Some((buf, tag)) = e.gather(self.port, src, &info)? {
                        e.count(Counter::MsgsRecvd, 1);
                        e.count(Counter::BytesRecvd, buf.len() as u64);
                        return Ok(Some(Message {
                            world: w.clone(),
                            src: Source {
                                rank: w.inner.l2g[src],
                                port: tag,
                            },
                            body: Body::Owned(buf),
                        }));
                    }
                }
            }
        }
    }

    /// Waits for a message and copies it into `buf`. Returns its length and source. A message
    /// longer than `buf` is an error that names both sizes; the message stays queued.
    pub fn recv_into(&self, buf: &mut [u8]) -> Result<(usize, Source), RecvError> {
        let w = &self.world;
        let dispatch = w.inner.dispatch_depth.get() == 0;
        let mut waiter = Waiter::new(
            wait_from_bits(self.wait.load(Ordering::Relaxed)),
            &self.waits,
        );
        loop {
            let poll = {
                let mut e = w.eng();
                e.refresh_fates();
                e.drive_pending();
                let p = e.poll_port(self.port, dispatch)?;
                // The common case in this same borrow (one borrow, not two): a whole
                // message that fits.
                if let Poll::Found(src, info) = p {
                    if info.kind == Kind::Whole && info.len <= buf.len() {
                        e.copy_whole(src, &info, buf);
                        e.disarm();
                        let source = Source {
                            rank: w.inner.l2g[src],
                            port: info.tag,
                        };
                        return Ok((info.len, source));
                    }
                }
                p
            };
            let (src, info) = match poll {
                Poll::Nothing => {
                    if let Some(net) = w.net_poll() {
                        let pat = Pattern::port(self.port);
                        let found = net.borrow_mut().peek_matching(&pat);
                        if let Some((source, tag, len)) = found {
                            if len > buf.len() {
                                waiter.finish(w);
                                return Err(RecvError::BufferTooSmall {
                                    message: len,
                                    buffer: buf.len(),
                                    envelope: None,
                                });
                            }
                            let st = Status { source, tag, len };
                            w.take_from_net(&pat, st, &mut buf[..len], &mut waiter, false)?;
                            waiter.finish(w);
                            return Ok((
                                len,
                                Source {
                                    rank: source,
                                    port: tag,
                                },
                            ));
                        }
                    }
                    waiter.idle(w, self.port, None)?;
                    continue;
                }
                Poll::Active(src, info) => {
                    w.dispatch(src, info)?;
                    continue;
                }
                Poll::Found(src, info) => (src, info),
            };
            let source = Source {
                rank: w.inner.l2g[src],
                port: info.tag,
            };
            let total = {
                let e = w.eng();
                match info.kind {
                    Kind::Middle | Kind::Last => e.partial_total(self.port, src).unwrap_or(0),
                    _ => info.total_len as usize,
                }
            };
            if total > buf.len() {
                waiter.finish(w);
                return Err(RecvError::BufferTooSmall {
                    message: total,
                    buffer: buf.len(),
                    envelope: None,
                });
            }
            let mut e = w.eng();
            match info.kind {
                Kind::Whole => {
                    unreachable!("a whole message that fits is taken in the poll's borrow")
                }
                Kind::Rndv => {
                    // Single copy: straight from the sender's memory into the caller's buffer.
                    let n = e.copy_single(src, &info, Dest::Slice(&mut buf[..total]));
                    if let Ok(n) = n {
                        e.count(Counter::MsgsRecvd, 1);
                        e.count(Counter::BytesRecvd, n as u64);
                    }
                    drop(e);
                    waiter.finish(w);
                    return n.map(|n| (n, source));
                }
                Kind::First => {
                    // Copy the fragments straight into the caller's buffer as they come.
                    drop(e);
                    let mut g = Gathering::at(src, &info);
                    let out = &mut buf[..total];
                    w.copy_fragments(self.port, &mut g, Some(&info), out, &mut waiter, false)?;
                    waiter.finish(w);
                    return Ok((total, source));
                }
                _ => {
                    // A message that try_recv() began gathering: finish it there, then copy.
                    if let Some((v, tag)) = e.gather(self.port, src, &info)? {
                        buf[..v.len()].copy_from_slice(&v);
                        let n = v.len();
                        e.count(Counter::StagingCopies, 1);
                        e.count(Counter::MsgsRecvd, 1);
                        e.count(Counter::BytesRecvd, n as u64);
                        e.give_spare(v);
                        drop(e);
                        waiter.finish(w);
                        return Ok((
                            n,
                            Source {
                                rank: w.inner.l2g[src],
                                port: tag,
                            },
                        ));
                    }
                }
            }
        }
    }
}
