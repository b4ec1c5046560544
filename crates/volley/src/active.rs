//! GAMMA active ports: binding a handler to a port and running it for each message that arrives,
//! from the rings and from the network, whenever the process makes progress.

use crate::counters::Counter;
use crate::engine::Dest;
use crate::engine::PortKind;
use crate::error::{OpenError, RecvError};
use crate::message::Source;
use crate::world::{Handler, World};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use volley_shm::{Kind, RecordInfo};
use volley_sys::Exclusive;

/// A GAMMA active port. Unbound on drop.
pub struct ActivePort {
    pub(crate) world: World,
    pub(crate) port: u32,
}

impl ActivePort {
    pub fn port(&self) -> u32 {
        self.port
    }
}

impl Drop for ActivePort {
    fn drop(&mut self) {
        self.world.eng().release_port(self.port);
        self.world.inner.nactive.fetch_sub(1, Ordering::Relaxed);
        self.world
            .inner
            .handlers
            .borrow_mut()
            .retain(|(p, _)| *p != self.port);
    }
}

impl World {
    /// Binds a GAMMA active port: `handler` runs with each message that arrives on `port` and its
    /// source, whenever this process makes progress (any volley call that waits, or
    /// [`World::progress`]). The handler may send; it should not wait for messages itself.
    pub fn bind<F>(&self, port: u32, handler: F) -> Result<ActivePort, OpenError>
    where
        F: FnMut(&[u8], Source) + Send + 'static,
    {
        self.claim_port(port, PortKind::Active)?;
        let h: Handler = Arc::new(Exclusive::new(Box::new(handler)));
        self.inner.handlers.borrow_mut().push((port, h));
        self.inner.nactive.fetch_add(1, Ordering::Relaxed);
        Ok(ActivePort {
            world: self.clone(),
            port,
        })
    }

    /// Runs the handler for one active-port record (or gathers a fragment of one).
    pub(crate) fn dispatch(&self, src: usize, info: RecordInfo) -> Result<usize, RecvError> {
        let handler = self
            .inner
            .handlers
            .borrow_mut()
            .iter()
            .find(|(p, _)| *p == info.context)
            .map(|(_, h)| h.clone());
        let Some(handler) = handler else { return Ok(0) };
        let source = Source {
            rank: self.inner.l2g[src],
            port: info.tag,
        };
        let depth = &self.inner.dispatch_depth;
        if info.kind == Kind::Whole {
            let held = self.eng().rx(src).take_shared(&info);
            depth.set(depth.get() + 1);
            (handler.borrow_mut())(held.as_slice(), source);
            depth.set(depth.get() - 1);
            let mut e = self.eng();
            e.rx(src).release(held);
            e.count(Counter::ActiveDispatches, 1);
            e.count(Counter::MsgsRecvd, 1);
            e.count(Counter::BytesRecvd, info.len as u64);
            return Ok(1);
        }
        let done = if info.kind == Kind::Rndv {
            let mut e = self.eng();
            let mut buf = e.take_spare();
            e.copy_single(src, &info, Dest::Vec(&mut buf))?;
            Some((buf, info.tag))
        } else {
            self.eng().gather(info.context, src, &info)?
        };
        if let Some((buf, tag)) = done {
            depth.set(depth.get() + 1);
            (handler.borrow_mut())(
                &buf,
                Source {
                    rank: self.inner.l2g[src],
                    port: tag,
                },
            );
            depth.set(depth.get() - 1);
            let mut e = self.eng();
            e.count(Counter::ActiveDispatches, 1);
            e.count(Counter::MsgsRecvd, 1);
            e.count(Counter::BytesRecvd, buf.len() as u64);
            e.give_spare(buf);
            return Ok(1);
        }
        Ok(0)
    }

    /// Runs the handlers of active-port messages that came over the network.
    pub(crate) fn net_dispatch(&self) -> usize {
        let Some(net) = self.inner.net.as_ref() else {
            return 0;
        };
        if self.inner.dispatch_depth.get() > 0 {
            return 0;
        }
        let mut n = 0;
        for _ in 0..64 {
            // No list of ports is built: the handlers are looked up in place.
            let got = {
                let handlers = self.inner.handlers.borrow_mut();
                if handlers.is_empty() {
                    break;
                }
                net.borrow_mut()
                    .take_any(|p| handlers.iter().any(|(q, _)| *q == p))
                    .map(|(port, m)| {
                        let h = handlers
                            .iter()
                            .find(|(q, _)| *q == port)
                            .map(|(_, h)| h.clone());
                        (h, m)
                    })
            };
            let Some((handler, m)) = got else { break };
            if let Some(h) = handler {
                let depth = &self.inner.dispatch_depth;
                depth.set(depth.get() + 1);
                (h.borrow_mut())(
                    &m.data,
                    Source {
                        rank: m.src,
                        port: m.tag,
                    },
                );
                depth.set(depth.get() - 1);
                n += 1;
            }
            net.borrow_mut().recycle(m.data);
        }
        n
    }
}
