//! volley: lightweight message passing between processes.
//!
//! Layer 2, the public API, above `volley-shm` (rings in the job segment) and `volley-sys` (OS
//! calls). It forbids unsafe code: everything that touches raw memory lives below it.
//!
//! Two APIs over one engine, after the seed papers:
//! - **Directed-Point endpoints** ([`Endpoint`]): open a port, target a (rank, port), send,
//!   receive in place from the receive pool without a copy ([`Endpoint::recv`]) or into your own
//!   buffer ([`Endpoint::recv_into`]), and poll the endpoint's descriptor with poll/epoll.
//! - **GAMMA active ports** ([`World::bind`]): a handler runs for each message that arrives on a
//!   port, whenever the process makes progress.
//!
//! A process joins its job with [`World::init`], which reads the environment `volley run` sets.
//! Started without the launcher, a program is a world of one rank.
//!
//! Guarantees: messages from one sender endpoint to one receiver endpoint arrive once each, in
//! order, intact, from 0 bytes to any size that fits in memory; a receiver that does not read
//! makes the sender wait (or get [`SendError::WouldBlock`]), never lose data; an operation
//! waiting on a peer that died fails with [`PeerLost`] instead of hanging.
#![forbid(unsafe_code)]

mod active;
mod backoff;
mod boot_pmi;
mod bootstrap;
pub mod collectives;
mod config;
mod counters;
mod endpoint;
mod engine;
mod error;
mod matched;
mod matching;
mod message;
mod modes;
mod net;
mod path;
mod pmi;
pub mod profile;
mod progress;
mod recv;
mod request;
mod send;
mod shmcoll;
mod wait;
mod world;

pub use active::ActivePort;
pub use bootstrap::{segment_bytes, JobInfo, Launcher};
pub use pmi::{abort_job, launcher_details};

/// What a launcher needs (`volley run` and its agents): the job's shared state and the
/// environment it hands each rank. Applications need none of it.
pub mod launch {
    pub use crate::bootstrap::{JobLaunch, ENV_LOCAL_RANK, ENV_RANK, ENV_SIZE, OWNED_VARS};
    pub use crate::pmi::PMI_VARS;
}
pub use config::{Config, WaitMode, DEFAULT_SPIN};
pub use counters::{counter_table, Counter, CounterInfo, Layer, COUNTERS, TABLE_LEN};
pub use endpoint::Endpoint;
pub use error::{Fate, InitError, OpenError, PeerLost, RecvError, SendError};
pub use matched::Matched;
pub use matching::{Pattern, Status, APART_TAG, SYNC_TAG};
pub use message::{Message, Source};
pub use modes::single_copy_unavailable;
pub use net::{describe_transports, host_ipv4};
pub use request::{RequestError, RequestId, Scope, SendRequest};
pub use shmcoll::{Contribution, ShmGroup, SlotId, SHM_COLL_BYTES, SHM_COLL_INLINE};
pub use volley_sys::lend::{RawBuf, RawBufMut};
pub use wait::set_idle_hook;
pub use world::World;

/// A message made piece by piece, in order (a non-contiguous MPI datatype packed on the fly):
/// a large one is packed straight into the ring's records as they go, never whole into a
/// buffer. See [`Endpoint::isend_packed`].
pub trait Packer: Send + Sync {
    /// The message's length in bytes.
    fn len(&self) -> usize;
    /// Whether the message is empty.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Writes bytes `off .. off + out.len()` of the message into `out`. Pieces are asked for in
    /// order, each once, except by the network, which asks for a lost packet's piece again,
    /// after later ones.
    fn pack(&mut self, off: usize, out: &mut [u8]);
}

/// Where a message goes piece by piece, in order (a non-contiguous MPI datatype unpacked on
/// the fly). See [`Endpoint::irecv_unpacked`].
pub trait Unpacker: Send + Sync {
    /// How many bytes it takes at most.
    fn len(&self) -> usize;
    /// Whether it takes nothing.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Stores bytes `off .. off + data.len()` of the message. Pieces come each once, in order
    /// except from the network, whose packets may arrive in any order.
    fn unpack(&mut self, off: usize, data: &[u8]);
}
