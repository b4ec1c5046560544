//! Unexpected messages drained out of the rings.
//!
//! A message nobody has asked for yet stays in its ring, and matched receives look past it in
//! place (see `matching`). But a ring is a FIFO: its producer gets room back only when the
//! oldest records are released, so an unreceived message at the head eventually stops its
//! sender, and with it every later message of that sender, also one a receive waits for. MPI
//! lets a program receive one sender's messages in another order than sent (tags decide), so that
//! would be a deadlock volley made. When a matched scan of a ring finds nothing and the ring is
//! full (a record of the largest size might not fit), the records at its head that belong to matched contexts are drained: copied
//! into buffers of this process (a single-copy descriptor by doing its copy) and their ring space
//! given back. Within a budget: at most VOLLEY_UNEXPECTED_BYTES (16 MiB) per process is held this
//! way; beyond it the sender waits as before, so memory stays bounded.
//!
//! Order is kept: a source's drained messages are older than anything still in its ring, so the
//! matcher looks at them first. A message whose first fragments were drained goes on being
//! drained fragment by fragment as the rest arrives, unless a receive takes it first and copies
//! the rest straight from the ring. Directed-Point ports are never drained: they read their rings
//! in arrival order.

use crate::counters::Counter;
use crate::engine::Dest;
use crate::engine::Engine;
use crate::error::RecvError;
use volley_shm::Kind;

/// A message (or the first part of one) copied out of its ring.
pub(crate) struct Drained {
    pub context: u32,
    pub tag: u32,
    /// Length of the whole message.
    pub total: usize,
    /// The bytes drained so far.
    pub data: Vec<u8>,
    /// While fragments are still to come: the ring position of the last one drained.
    pub open: Option<u64>,
    /// A request to send (its data still in the sender's memory) and where it sat in the ring.
    pub rts: Option<(volley_shm::Rts, u64)>,
    /// What it counts against the budget.
    pub cost: usize,
}

/// How many drained buffers are kept for reuse, and the largest kept.
const POOL: usize = 8;
const POOL_MAX_BYTES: usize = 1 << 20;

impl Engine {
    /// Drains the head of ring `src` (see the module's comment). Called when a matched scan of
    /// the ring found nothing.
    pub fn drain(&mut self, src: usize) -> Result<(), RecvError> {
        let corrupt = |e: &Engine, why: String| RecvError::Corrupt {
            rank: e.l2g[src],
            why,
        };
        loop {
            let Some(info) = self.rx[src].peek().map_err(|c| corrupt(self, c.0))? else {
                return Ok(());
            };
            // The rest of a message already being drained follows it in the ring.
            if let Some(d) = self.drained[src].back().filter(|d| d.open.is_some()) {
                if !(matches!(info.kind, Kind::Middle | Kind::Last) && info.context == d.context) {
                    return Err(corrupt(
                        self,
                        format!(
                            "{:?} record for context {} inside a fragmented message",
                            info.kind, info.context
                        ),
                    ));
                }
                let held = self.rx[src].take(&info);
                let d = self.drained[src].back_mut().expect("checked");
                d.data.extend_from_slice(self.rx[src].payload(&held));
                self.rx[src].release(held);
                self.counters.add(Counter::Fragments, 1);
                let (got, total) = (d.data.len(), d.total);
                if got > total || (info.kind == Kind::Last) != (got == total) {
                    return Err(corrupt(
                        self,
                        format!("fragments add up to {got} bytes, message is {total}"),
                    ));
                }
                d.open = (info.kind != Kind::Last).then_some(info.pos);
                continue;
            }
            if !self.matched_contexts.contains(&info.context)
                || !self.rx[src].looks_full()
                || !matches!(
                    info.kind,
                    Kind::Whole | Kind::First | Kind::Rndv | Kind::Rts
                )
            {
                // A Directed-Point port's message, room left, or the middle of a message a
                // receive is copying: leave the ring as it is.
                return Ok(());
            }
            let total = match info.kind {
                Kind::Whole => info.len,
                _ => info.total_len as usize,
            };
            if info.kind == Kind::Rts {
                // One small record, whatever the message's size: its data stays with the sender,
                // whose request it is. Always drained, outside the budget: a receiver holds one
                // small entry per send its senders have started and it has not received (as
                // MPICH and Open MPI hold one per unexpected request to send), and a request
                // left in a full ring could keep a wanted message behind it for ever.
                let rts = self.take_rts(src, &info)?;
                self.counters.add(Counter::Drained, 1);
                self.ndrained += 1;
                self.drained[src].push_back(Drained {
                    context: info.context,
                    tag: info.tag,
                    total,
                    data: Vec::new(),
                    open: None,
                    rts: Some((rts, info.pos)),
                    cost: 0,
                });
                continue;
            }
            if !self.may_drain(src, total) {
                return Ok(());
            }
            let mut data = self.drain_pool.pop().unwrap_or_default();
            data.clear();
            let open = match info.kind {
                Kind::Rndv => {
                    self.copy_single(src, &info, Dest::Vec(&mut data))?;
                    None
                }
                _ => {
                    data.reserve_exact(total);
                    let held = self.rx[src].take(&info);
                    data.extend_from_slice(self.rx[src].payload(&held));
                    self.rx[src].release(held);
                    if info.kind == Kind::First {
                        self.counters.add(Counter::Fragments, 1);
                    }
                    (info.kind == Kind::First && data.len() < total).then_some(info.pos)
                }
            };
            self.drained_bytes += total;
            self.counters.add(Counter::Drained, 1);
            self.ndrained += 1;
            self.drained[src].push_back(Drained {
                context: info.context,
                tag: info.tag,
                total,
                data,
                open,
                rts: None,
                cost: total,
            });
        }
    }

    /// Whether `cost` more bytes of eager data from ring `src` may be drained. Within the budget,
    /// yes. Past it, this process asks its senders for requests to send instead of eager data
    /// (one slot each, the data waiting in the sender's memory: `Producer::descriptors_asked`),
    /// and still drains what the rings hold, up to the budget and one ring's worth per sender
    /// more: the eager records sent before the senders saw the request. Without that, a receive
    /// waiting for a message behind a full ring would wait for ever (MPI's progress rule wants
    /// it received), and holding every unreceived message as MPICH and Open MPI do would leave
    /// the memory unbounded. Beyond that bound (a progress thread's sends, decided before the
    /// request) the ring stays full.
    #[inline]
    fn may_drain(&mut self, src: usize, cost: usize) -> bool {
        if self.drained_bytes + cost <= self.drain_budget {
            return true;
        }
        self.budget_spent();
        let bound = self.drain_budget + self.n * self.rx[src].capacity_bytes();
        if self.drained_bytes + cost <= bound {
            return true;
        }
        self.bound_reached(src);
        false
    }

    /// Past the budget: counted each time; the senders are asked for requests to send.
    #[cold]
    fn budget_spent(&mut self) {
        self.counters.add(Counter::DrainBudgetFull, 1);
        if !self.asked_descriptors {
            self.asked_descriptors = true;
            for rx in &self.rx {
                rx.ask_descriptors(true);
            }
        }
    }

    /// The bound keeps ring `src` full: said once per process on stderr, since a receive
    /// waiting for a message behind the ring then waits for ever, and a hang with no word is the
    /// worst way to learn of a limit.
    #[cold]
    fn bound_reached(&mut self, src: usize) {
        if !self.told_budget_full {
            self.told_budget_full = true;
            eprintln!(
                "volley: rank {}: holds {} bytes of messages no receive has taken yet, and the \
                 next would pass its limit ({} bytes of VOLLEY_UNEXPECTED_BYTES, and a ring's \
                 worth per sender sent before it asked for requests to send); rank {}'s later \
                 messages wait in its ring until some are received. If a receive waits for one \
                 of them, raise VOLLEY_UNEXPECTED_BYTES or receive the earlier messages first",
                self.l2g[self.me], self.drained_bytes, self.drain_budget, self.l2g[src]
            );
        }
    }

    /// Takes drained message `k` of source `src` out of the queue.
    pub fn take_drained(&mut self, src: usize, k: usize) -> Drained {
        let d = self.drained[src].remove(k).expect("index from poll_match");
        self.drained_bytes -= d.cost;
        self.ndrained -= 1;
        if self.asked_descriptors && self.drained_bytes <= self.drain_budget / 2 {
            // Room again: eager data is welcome (half the budget, so that a receiver near its
            // limit does not switch its senders back and forth at every message).
            self.asked_descriptors = false;
            for rx in &self.rx {
                rx.ask_descriptors(false);
            }
        }
        d
    }

    /// Gives a drained message's buffer back for reuse.
    pub fn recycle_drained(&mut self, data: Vec<u8>) {
        if self.drain_pool.len() < POOL && data.capacity() <= POOL_MAX_BYTES {
            self.drain_pool.push(data);
        }
    }
}
