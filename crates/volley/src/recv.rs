//! Receiving in arrival order (Directed Point's recv): lent in place, gathered from fragments,
//! or copied by single copy from the sender's memory.

use crate::counters::Counter;
use crate::endpoint::{wait_from_bits, Endpoint};
use crate::engine::{Engine, Partial, Poll};
use crate::error::RecvError;
use crate::message::{Body, Message, Source};
use crate::wait::Waiter;
use std::sync::atomic::Ordering;
use volley_shm::{Kind, RecordInfo};

/// Where a single-copy message goes.
pub(crate) enum Dest<'a> {
    Slice(&'a mut [u8]),
    Vec(&'a mut Vec<u8>),
}

/// Takes the descriptor `info` from the ring from `src` and copies the message it describes
/// straight out of the sender's memory, then tells the sender it may reuse its buffer.
pub(crate) fn copy_single(
    e: &mut Engine,
    src: usize,
    info: &RecordInfo,
    dest: Dest<'_>,
) -> Result<usize, RecvError> {
    let held = e.rx[src].take(info);
    let (addr, len) = match e.rx[src].rndv_desc(&held) {
        Ok(d) => d,
        Err(c) => {
            return Err(RecvError::Corrupt {
                rank: e.l2g[src],
                why: c.0,
            })
        }
    };
    let len = len as usize;
    let pid = e.seg.pid(src);
    let r = match dest {
        Dest::Slice(buf) => volley_sys::process_vm_read(pid, &mut buf[..len], addr),
        Dest::Vec(v) => volley_sys::process_vm_read_to_vec(pid, addr, len, v),
    };
    match r {
        Ok(()) => {
            e.rx[src].rndv_finish(held, true);
            e.counters.add(Counter::SingleCopyRecvs, 1);
            e.counters.add(Counter::SingleCopyBytes, len as u64);
            Ok(len)
        }
        Err(err) => {
            e.rx[src].rndv_finish(held, false);
            e.refresh_fates();
            if err.raw_os_error() == Some(3) {
                // ESRCH: the sender is gone.
                if let Some(fate) = e.fates[src] {
                    return Err(RecvError::PeerLost(crate::PeerLost {
                        rank: e.l2g[src],
                        fate,
                    }));
                }
            }
            Err(RecvError::SingleCopy {
                rank: e.l2g[src],
                len,
                why: err.to_string(),
            })
        }
    }
}

/// Adds the record `info` (from `src`, for `port`) to the message being gathered, taking and
/// releasing it. Returns the whole message once its last fragment is in.
pub(crate) fn gather(
    e: &mut Engine,
    port: u32,
    src: usize,
    info: &RecordInfo,
) -> Result<Option<(Vec<u8>, u32)>, RecvError> {
    let idx = e
        .partials
        .iter()
        .position(|p| p.port == port && p.src == src);
    let held = e.rx[src].take(info);
    let result = match (info.kind, idx) {
        (Kind::First, None) => {
            let total = info.total_len as usize;
            let mut buf = e.spare.take().unwrap_or_default();
            buf.clear();
            buf.reserve_exact(total);
            buf.extend_from_slice(e.rx[src].payload(&held));
            e.partials.push(Partial {
                port,
                src,
                tag: info.tag,
                total,
                buf,
            });
            Ok(None)
        }
        (Kind::Middle | Kind::Last, Some(i)) => {
            let p = &mut e.partials[i];
            p.buf.extend_from_slice(e.rx[src].payload(&held));
            if p.buf.len() > p.total || (info.kind == Kind::Last) != (p.buf.len() == p.total) {
                Err(RecvError::Corrupt {
                    rank: e.l2g[src],
                    why: format!(
                        "fragments add up to {} bytes, message is {}",
                        p.buf.len(),
                        p.total
                    ),
                })
            } else if info.kind == Kind::Last {
                let p = e.partials.swap_remove(i);
                Ok(Some((p.buf, p.tag)))
            } else {
                Ok(None)
            }
        }
        (kind, _) => Err(RecvError::Corrupt {
            rank: e.l2g[src],
            why: format!("unexpected {kind:?} record for port {port}"),
        }),
    };
    e.rx[src].release(held);
    e.counters.add(Counter::Fragments, 1);
    result
}

impl Endpoint {
    /// A message from another host for this endpoint, if one has arrived.
    pub(crate) fn net_take(&self) -> Option<Message> {
        let w = &self.world;
        let m = w.net_poll()?.borrow_mut().take(self.port)?;
        let mut e = w.eng();
        e.counters.add(Counter::MsgsRecvd, 1);
        e.counters.add(Counter::BytesRecvd, m.data.len() as u64);
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
        let mut w = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
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
            // A whole message is taken in the same borrow that found it (each borrow is an
            // atomic swap on the hot path).
            let mut took = None;
            let poll = {
                let mut e = w.eng();
                e.refresh_fates();
                e.drive_pending();
                let p = e.poll_port(self.port, dispatch)?;
                if let Poll::Found(src, info) = p {
                    if info.kind == Kind::Whole {
                        took = Some(e.rx[src].take_shared(&info));
                        // What Waiter::finish would do, without another borrow.
                        e.disarm();
                        e.counters.add(Counter::MsgsRecvd, 1);
                        e.counters.add(Counter::ZeroCopyRecvs, 1);
                        e.counters.add(Counter::BytesRecvd, info.len as u64);
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
                    let mut buf = e.spare.take().unwrap_or_default();
                    let n = copy_single(&mut e, src, &info, Dest::Vec(&mut buf))?;
                    e.counters.add(Counter::MsgsRecvd, 1);
                    e.counters.add(Counter::BytesRecvd, n as u64);
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
                    if let Some((buf, tag)) = gather(&mut e, self.port, src, &info)? {
                        e.counters.add(Counter::MsgsRecvd, 1);
                        e.counters.add(Counter::BytesRecvd, buf.len() as u64);
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
        let mut waiter = Waiter::new(wait_from_bits(self.wait.load(Ordering::Relaxed)));
        loop {
            let poll = {
                let mut e = w.eng();
                e.refresh_fates();
                e.drive_pending();
                let p = e.poll_port(self.port, dispatch)?;
                // The common case in this same borrow (each borrow is an atomic swap): a whole
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
                        let len = net.borrow_mut().peek_len(self.port);
                        if let Some(len) = len {
                            if len > buf.len() {
                                waiter.finish(w);
                                return Err(RecvError::BufferTooSmall {
                                    message: len,
                                    buffer: buf.len(),
                                });
                            }
                            let m = net.borrow_mut().take(self.port).expect("peeked");
                            buf[..len].copy_from_slice(&m.data);
                            let src = Source {
                                rank: m.src,
                                port: m.tag,
                            };
                            net.borrow_mut().recycle(m.data);
                            let mut e = w.eng();
                            e.counters.add(Counter::MsgsRecvd, 1);
                            e.counters.add(Counter::BytesRecvd, len as u64);
                            e.counters.add(Counter::StagingCopies, 1);
                            drop(e);
                            waiter.finish(w);
                            return Ok((len, src));
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
                    Kind::Middle | Kind::Last => e
                        .partials
                        .iter()
                        .find(|p| p.port == self.port && p.src == src)
                        .map(|p| p.total)
                        .unwrap_or(0),
                    _ => info.total_len as usize,
                }
            };
            if total > buf.len() {
                waiter.finish(w);
                return Err(RecvError::BufferTooSmall {
                    message: total,
                    buffer: buf.len(),
                });
            }
            let mut e = w.eng();
            match info.kind {
                Kind::Whole => {
                    unreachable!("a whole message that fits is taken in the poll's borrow")
                }
                Kind::Rndv => {
                    // Single copy: straight from the sender's memory into the caller's buffer.
                    let n = copy_single(&mut e, src, &info, Dest::Slice(&mut buf[..total]));
                    if let Ok(n) = n {
                        e.counters.add(Counter::MsgsRecvd, 1);
                        e.counters.add(Counter::BytesRecvd, n as u64);
                    }
                    drop(e);
                    waiter.finish(w);
                    return n.map(|n| (n, source));
                }
                Kind::First => {
                    // Copy the fragments straight into the caller's buffer as they come.
                    drop(e);
                    self.world.copy_fragments(
                        self.port,
                        src,
                        &info,
                        &mut buf[..total],
                        &mut waiter,
                    )?;
                    waiter.finish(w);
                    return Ok((total, source));
                }
                _ => {
                    // A message that try_recv() began gathering: finish it there, then copy.
                    if let Some((v, tag)) = gather(&mut e, self.port, src, &info)? {
                        buf[..v.len()].copy_from_slice(&v);
                        let n = v.len();
                        e.counters.add(Counter::StagingCopies, 1);
                        e.counters.add(Counter::MsgsRecvd, 1);
                        e.counters.add(Counter::BytesRecvd, n as u64);
                        e.spare = Some(v);
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
