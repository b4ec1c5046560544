//! Receiving the two kinds of message that are more than one ring record: a single-copy
//! descriptor (the message is copied straight out of the sender's memory) and fragments gathered
//! into one buffer.

use super::{Engine, Partial};
use crate::counters::Counter;
use crate::error::RecvError;
use volley_shm::{Kind, RecordInfo};

/// Where a single-copy message goes.
pub(crate) enum Dest<'a> {
    Slice(&'a mut [u8]),
    Vec(&'a mut Vec<u8>),
}

impl Engine {
    /// Takes the descriptor `info` from the ring from `src` and copies the message it describes
    /// straight out of the sender's memory, then tells the sender it may reuse its buffer.
    pub fn copy_single(
        &mut self,
        src: usize,
        info: &RecordInfo,
        dest: Dest<'_>,
    ) -> Result<usize, RecvError> {
        let held = self.rx[src].take(info);
        let (addr, len) = match self.rx[src].rndv_desc(&held) {
            Ok(d) => d,
            Err(c) => {
                return Err(RecvError::Corrupt {
                    rank: self.l2g[src],
                    why: c.0,
                })
            }
        };
        let len = len as usize;
        let pid = self.seg.pid(src);
        let r = match dest {
            Dest::Slice(buf) if self.wants_help(len) => {
                let ident = super::rendezvous::descriptor_ident(info.pos);
                self.copy_helped(src, ident, addr, &mut buf[..len], None)
            }
            Dest::Slice(buf) => volley_sys::process_vm_read(pid, &mut buf[..len], addr),
            Dest::Vec(v) => volley_sys::process_vm_read_to_vec(pid, addr, len, v),
        };
        match r {
            Ok(()) => {
                self.rx[src].rndv_finish(held, true);
                self.count(Counter::SingleCopyRecvs, 1);
                self.count(Counter::SingleCopyBytes, len as u64);
                Ok(len)
            }
            Err(err) => {
                self.rx[src].rndv_finish(held, false);
                self.refresh_fates();
                if err.raw_os_error() == Some(3) {
                    // ESRCH: the sender is gone.
                    if let Some(fate) = self.fates[src] {
                        return Err(RecvError::PeerLost(crate::PeerLost {
                            rank: self.l2g[src],
                            fate,
                        }));
                    }
                }
                Err(RecvError::SingleCopy {
                    rank: self.l2g[src],
                    len,
                    why: err.to_string(),
                })
            }
        }
    }

    /// Adds the record `info` (from `src`, for `port`) to the message being gathered, taking and
    /// releasing it. Returns the whole message once its last fragment is in.
    pub fn gather(
        &mut self,
        port: u32,
        src: usize,
        info: &RecordInfo,
    ) -> Result<Option<(Vec<u8>, u32)>, RecvError> {
        let idx = self
            .partials
            .iter()
            .position(|p| p.port == port && p.src == src);
        let held = self.rx[src].take(info);
        let result = match (info.kind, idx) {
            (Kind::First, None) => {
                let total = info.total_len as usize;
                let mut buf = self.spare.take().unwrap_or_default();
                buf.clear();
                buf.reserve_exact(total);
                buf.extend_from_slice(self.rx[src].payload(&held));
                self.partials.push(Partial {
                    port,
                    src,
                    tag: info.tag,
                    total,
                    buf,
                });
                Ok(None)
            }
            (Kind::Middle | Kind::Last, Some(i)) => {
                let p = &mut self.partials[i];
                p.buf.extend_from_slice(self.rx[src].payload(&held));
                if p.buf.len() > p.total || (info.kind == Kind::Last) != (p.buf.len() == p.total) {
                    Err(RecvError::Corrupt {
                        rank: self.l2g[src],
                        why: format!(
                            "fragments add up to {} bytes, message is {}",
                            p.buf.len(),
                            p.total
                        ),
                    })
                } else if info.kind == Kind::Last {
                    let p = self.partials.swap_remove(i);
                    Ok(Some((p.buf, p.tag)))
                } else {
                    Ok(None)
                }
            }
            (Kind::Rts | Kind::Stream, _) => Err(RecvError::Corrupt {
                rank: self.l2g[src],
                why: format!(
                    "a rendezvous (a large message of a matched endpoint) arrived at port {port}, \
                     which reads in arrival order: receive it with recv_matching, or call \
                     use_matching on the receiving endpoint"
                ),
            }),
            (kind, _) => Err(RecvError::Corrupt {
                rank: self.l2g[src],
                why: format!("unexpected {kind:?} record for port {port}"),
            }),
        };
        self.rx[src].release(held);
        self.count(Counter::Fragments, 1);
        result
    }
}
