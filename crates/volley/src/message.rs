//! A received message, lent in place from the ring or owned, and where it came from.

use crate::world::World;
use std::ops::Deref;
use volley_shm::SharedHeld;

/// Where a message came from: the sending rank and the port of the sending endpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Source {
    pub rank: usize,
    pub port: u32,
}

pub(crate) enum Body {
    Ring {
        ring: usize,
        held: Option<SharedHeld>,
    },
    Owned(Vec<u8>),
    /// A message from another host, in the network engine's buffer (given back to its pool).
    Net(Vec<u8>),
}

/// A received message. Dereferences to its bytes; for messages up to [`World::max_inline`] those
/// bytes are the ring slot itself, returned to the pool when the message is dropped.
pub struct Message {
    pub(crate) world: World,
    pub(crate) src: Source,
    pub(crate) body: Body,
}

impl Message {
    pub fn source(&self) -> Source {
        self.src
    }

    /// Whether the bytes are lent in place from the ring (no copy was made).
    pub fn is_in_place(&self) -> bool {
        matches!(self.body, Body::Ring { .. })
    }

    /// The bytes as an owned vector (a copy for in-place messages).
    pub fn into_vec(mut self) -> Vec<u8> {
        match &mut self.body {
            Body::Owned(v) | Body::Net(v) => std::mem::take(v),
            Body::Ring { .. } => self.deref().to_vec(),
        }
    }
}

impl Deref for Message {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.body {
            Body::Ring { held: Some(h), .. } => h.as_slice(),
            Body::Ring { held: None, .. } => &[],
            Body::Owned(v) | Body::Net(v) => v,
        }
    }
}

impl AsRef<[u8]> for Message {
    fn as_ref(&self) -> &[u8] {
        self
    }
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("source", &self.src)
            .field("len", &self.len())
            .field("in_place", &self.is_in_place())
            .finish()
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        match &mut self.body {
            Body::Ring { ring, held } => {
                if let Some(h) = held.take() {
                    self.world.eng().rx(*ring).release(h);
                }
            }
            Body::Owned(v) => {
                let v = std::mem::take(v);
                let mut e = self.world.eng();
                e.give_spare(v);
            }
            Body::Net(v) => {
                // Back to the network engine's pool: a receiver streaming from another host
                // allocates nothing per message.
                let v = std::mem::take(v);
                if let Some(net) = self.world.inner.net.as_ref() {
                    net.borrow_mut().recycle(v);
                }
            }
        }
    }
}
