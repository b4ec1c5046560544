//! Directed-Point endpoints: opening a port, targets, per-endpoint modes, the pollable descriptor.

use crate::config::WaitMode;
use crate::error::SendError;
use crate::world::World;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// A Directed-Point endpoint: a port of this process from which messages are sent to targets and
/// at which messages from any rank are received. Closed on drop.
pub struct Endpoint {
    pub(crate) world: World,
    pub(crate) port: u32,
    /// (rank + 1) << 32 | port, or NO_TARGET. Atomics (relaxed: one owner at a time) rather
    /// than Cells, so that an endpoint is Sync like its world.
    pub(crate) target: AtomicU64,
    /// The wait mode, see wait_to_bits.
    pub(crate) wait: AtomicU64,
    /// How long this endpoint's recent waits lasted (the spin-then-block mode learns from it).
    pub(crate) waits: crate::wait::WaitHistory,
    /// GAMMA's best-effort mode for messages to other hosts (a property of the sending endpoint,
    /// whatever tag a message carries).
    pub(crate) best_effort: AtomicBool,
    /// Whether this port has been received from through the matcher (its messages may then be
    /// drained out of full rings, see `unexpected`).
    pub(crate) matched: AtomicBool,
    /// Tag bits this endpoint's matched receives ignore (see [`crate::Pattern::ignore`]).
    pub(crate) tag_ignore: std::sync::atomic::AtomicU32,
    /// Whether this endpoint's any-tag receives and probes leave out [`crate::APART_TAG`].
    pub(crate) tag_apart: AtomicBool,
}

impl AsRawFd for Endpoint {
    /// The process's doorbell: readable when a message has arrived since the last
    /// [`Endpoint::try_recv`] that returned None. Shared by all endpoints of the process, so a
    /// wake-up may be for another endpoint; call try_recv to find out.
    /// In a job over several hosts it is an epoll descriptor over the doorbell and the network
    /// socket, readable when either is (packets may also be acknowledgements). The socket joins
    /// it at the first call: from then on each packet also runs epoll's wake-up callback (about
    /// 0.2 us a hop), which jobs that never ask for the descriptor do not pay.
    fn as_raw_fd(&self) -> RawFd {
        if let Some(ep) = self.world.watch_net() {
            return ep;
        }
        self.world.eng().doorbell().raw()
    }
}

impl Drop for Endpoint {
    fn drop(&mut self) {
        self.world.eng().release_port(self.port);
    }
}

pub(crate) const NO_TARGET: u64 = 0;

pub(crate) fn wait_to_bits(m: WaitMode) -> u64 {
    match m {
        WaitMode::Block => u64::MAX,
        WaitMode::BusyPoll => u64::MAX - 1,
        WaitMode::SpinThenBlock(d) => (d.as_nanos() as u64).min(u64::MAX - 2),
    }
}

pub(crate) fn wait_from_bits(b: u64) -> WaitMode {
    match b {
        u64::MAX => WaitMode::Block,
        x if x == u64::MAX - 1 => WaitMode::BusyPoll,
        ns => WaitMode::SpinThenBlock(std::time::Duration::from_nanos(ns)),
    }
}

impl Endpoint {
    pub fn port(&self) -> u32 {
        self.port
    }

    pub fn world(&self) -> &World {
        &self.world
    }

    /// Sets the default destination of [`Endpoint::send`] and friends.
    pub fn target(&self, rank: usize, port: u32) -> Result<(), SendError> {
        self.world.check_rank(rank)?;
        self.target
            .store(((rank as u64 + 1) << 32) | port as u64, Ordering::Relaxed);
        Ok(())
    }

    /// GAMMA's best-effort mode for this endpoint's messages to other hosts: sent once, never
    /// acknowledged or retransmitted, lost whole if a fragment is lost, not ordered with the
    /// reliable messages. Messages within a host are always reliable.
    pub fn set_best_effort(&self, on: bool) {
        self.best_effort.store(on, Ordering::Relaxed);
    }

    /// How this endpoint's receives wait (default: the process's VOLLEY_WAIT).
    pub fn set_wait_mode(&self, mode: WaitMode) {
        self.wait.store(wait_to_bits(mode), Ordering::Relaxed);
    }

    /// Makes this endpoint's matched receives and probes ignore the tag bits in `mask`: a face
    /// keeps flags of its own there (MPI's synchronous sends), and a receive for tag `t` then
    /// takes a message whose tag is `t` with any of those bits set. The status reports the tag
    /// as sent, flags included.
    pub fn set_tag_ignore(&self, mask: u32) {
        self.tag_ignore.store(mask, Ordering::Relaxed);
    }

    /// Makes this endpoint's any-tag receives and probes leave out messages tagged with
    /// [`crate::APART_TAG`]: those are taken only by a receive that names their tag (a matching
    /// space of their own, as MPI's partitioned messages need).
    pub fn set_tag_apart(&self, apart: bool) {
        self.tag_apart.store(apart, Ordering::Relaxed);
    }

    /// The default destination set by [`Endpoint::target`], if any: (rank, port).
    pub fn target_of(&self) -> Option<(usize, u32)> {
        self.dest().ok()
    }

    pub(crate) fn dest(&self) -> Result<(usize, u32), SendError> {
        match self.target.load(Ordering::Relaxed) {
            NO_TARGET => Err(SendError::NoTarget { port: self.port }),
            t => Ok(((t >> 32) as usize - 1, t as u32)),
        }
    }
}
