//! Matching: which message a receive takes, decided on the envelope before any payload moves.
//!
//! Every message carries an envelope (context, source, tag, length): in the shared-memory record
//! header and in the network DATA/RTS packets. A receive names a [`Pattern`]: one context, a
//! source or any, a tag or any. The matcher is the same for both paths, in the shape of Open
//! MPI's ob1 and MPICH's ch4 (unexpected messages searched in order, the envelope read first):
//!
//! - **Shared memory**: each ring from a sender is that sender's queue of unexpected messages,
//!   in the order sent. A receive scans it in place for the first record whose envelope the
//!   pattern accepts, looking past the others (which stay where they are for their own
//!   receivers) without copying them; only the matched message's payload moves, straight into
//!   the receiver's buffer (or lent in place).
//! - **Network**: the protocol delivers each sender's messages in order into a per-context
//!   inbox; a receive takes the first one the pattern accepts.
//!
//! Order: among the messages one sender sent to one context, a pattern always takes the first
//! it accepts (MPI's non-overtaking rule). Between senders there is no order to keep; an
//! any-source receive looks at the senders round-robin so none is starved.
//!
//! A Directed-Point endpoint is a pattern too: its port is the context, any source, any tag (and
//! the tag of a Directed-Point message is its sending port). A context is used either through
//! Directed-Point receives or through tagged receives, not both at once: a tagged receive never
//! takes the middle of a message that a Directed-Point receive began gathering, and the reverse
//! is not checked.

/// The tag bit that asks for a synchronous send's acknowledgement (MPI_Ssend). A receive
/// whose pattern ignores this bit ([`Pattern::ignoring`], e.g. through
/// [`crate::Endpoint::set_tag_ignore`]) and matches a message carrying it sends the sender an
/// empty message on context + 1 with the tag less the bit, as soon as it matches; the sender's
/// receive of it completes the synchronous send. Directed-Point ports ignore no bits and never
/// acknowledge.
pub const SYNC_TAG: u32 = 1 << 31;

/// The tag bit that puts a message in a matching space of its own on its context: a receive
/// or probe for any tag, on an endpoint that keeps the space apart ([`Pattern::apart`], through
/// [`crate::Endpoint::set_tag_apart`]), does not take it; only a receive naming its tag, the
/// bit included, does (MPI's partitioned messages match partitioned receives only).
pub const APART_TAG: u32 = 1 << 30;

/// What a receive accepts: one context, a source or any, a tag or any.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Pattern {
    /// The context: a Directed-Point port, or a face's communicator.
    pub context: u32,
    /// Job rank of the sender, or None for any source.
    pub source: Option<usize>,
    /// The tag, or None for any tag.
    pub tag: Option<u32>,
    /// Bits of a message's tag that matching ignores: a face keeps flags of its own there (the
    /// MPI face marks synchronous sends with one). 0 for Directed-Point ports.
    pub ignore: u32,
    /// Whether an any-tag pattern leaves out messages whose tag carries [`APART_TAG`].
    pub apart: bool,
}

impl Pattern {
    /// A receive from `source` (None: any) with `tag` (None: any) in `context`.
    pub fn new(context: u32, source: Option<usize>, tag: Option<u32>) -> Pattern {
        Pattern {
            context,
            source,
            tag,
            ignore: 0,
            apart: false,
        }
    }

    /// Whether `other` names the same source (or both any) and every message it accepts, this
    /// pattern accepts too: when this one finds nothing, `other` finds nothing either, and a
    /// receive by either meets the same dead end (a lost peer) or none.
    #[inline]
    pub fn covers(&self, other: &Pattern) -> bool {
        self.context == other.context
            && self.ignore == other.ignore
            && self.apart == other.apart
            && self.source == other.source
            && (self.tag.is_none() || self.tag == other.tag)
    }

    /// This pattern, ignoring the tag bits in `mask` (see [`Pattern::ignore`]).
    pub fn ignoring(mut self, mask: u32) -> Pattern {
        self.ignore = mask;
        self
    }

    /// This pattern, leaving messages tagged with [`APART_TAG`] out of an any-tag match when
    /// `apart`.
    pub fn keeping_apart(mut self, apart: bool) -> Pattern {
        self.apart = apart;
        self
    }

    /// What a Directed-Point endpoint on `port` receives: everything sent to the port.
    pub fn port(port: u32) -> Pattern {
        Pattern::new(port, None, None)
    }

    /// Whether a message with this tag, in this pattern's context, is accepted (the source is
    /// checked by where the matcher looks).
    #[inline]
    pub fn accepts_tag(&self, tag: u32) -> bool {
        match self.tag {
            Some(t) => t == tag & !self.ignore,
            None => !self.apart || tag & APART_TAG == 0,
        }
    }

    /// Whether a message from job rank `src` with `tag`, in this pattern's context, is accepted.
    #[inline]
    pub fn accepts_from(&self, src: usize, tag: u32) -> bool {
        self.source.is_none_or(|s| s == src) && self.accepts_tag(tag)
    }

    /// A key that names this question exactly, for the rings' scan memo (see
    /// `volley_shm::Consumer::scan`): context, tag or any, and which kind of record is wanted.
    #[inline]
    pub(crate) fn scan_key(&self, starts_only: bool) -> u128 {
        let tag = match self.tag {
            Some(t) => t as u128,
            None => 1 << 32,
        };
        // Bits 0-31 context, 32-64 tag or any, 65 starts only, 66-97 the ignored tag bits, 98
        // whether the apart space is left out; bit 127 keeps these keys apart from the
        // Directed-Point keys the engine builds (which stay below 2^127).
        (self.context as u128)
            | (tag << 32)
            | ((starts_only as u128) << 65)
            | ((self.ignore as u128) << 66)
            | ((self.apart as u128) << 98)
            | (1 << 127)
    }
}

/// What a matched receive or a probe learns: the envelope of the message.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Status {
    /// Job rank of the sender.
    pub source: usize,
    pub tag: u32,
    /// Length of the whole message, in bytes.
    pub len: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_apart_tag_is_taken_by_its_exact_receive_only() {
        let any = Pattern::new(7, None, None).keeping_apart(true);
        assert!(any.accepts_from(0, 9) && !any.accepts_from(0, 9 | APART_TAG));
        let exact = Pattern::new(7, None, Some(9 | APART_TAG)).keeping_apart(true);
        assert!(exact.accepts_from(0, 9 | APART_TAG) && !exact.accepts_from(0, 9));
        assert!(!Pattern::new(7, None, Some(9))
            .keeping_apart(true)
            .accepts_from(0, 9 | APART_TAG));
        // An endpoint that keeps no space apart takes every tag with a wildcard, as before.
        assert!(Pattern::new(7, None, None).accepts_from(0, 9 | APART_TAG));
        assert_ne!(
            any.scan_key(false),
            Pattern::new(7, None, None).scan_key(false)
        );
    }

    #[test]
    fn wildcards_accept_what_they_should() {
        let exact = Pattern::new(7, Some(3), Some(9));
        assert!(exact.accepts_from(3, 9));
        assert!(!exact.accepts_from(2, 9));
        assert!(!exact.accepts_from(3, 8));
        let any_src = Pattern::new(7, None, Some(9));
        assert!(any_src.accepts_from(0, 9) && any_src.accepts_from(5, 9));
        assert!(!any_src.accepts_from(0, 1));
        let any_tag = Pattern::new(7, Some(1), None);
        assert!(any_tag.accepts_from(1, 0) && any_tag.accepts_from(1, u32::MAX));
        assert!(!any_tag.accepts_from(2, 0));
        assert_eq!(Pattern::port(4), Pattern::new(4, None, None));
        // Ignored bits: a flag in the top bit does not change which receive takes the message.
        let flagged = Pattern::new(7, None, Some(9)).ignoring(1 << 31);
        assert!(flagged.accepts_from(0, 9) && flagged.accepts_from(0, 9 | 1 << 31));
        assert!(!flagged.accepts_from(0, 8 | 1 << 31));
    }

    #[test]
    fn scan_keys_name_questions_exactly() {
        // Keys of different questions never collide (a collision would make a scan skip a
        // record another question wants).
        let mut seen = std::collections::HashSet::new();
        for context in [0, 1, 7, u32::MAX] {
            for tag in [None, Some(0), Some(1), Some(u32::MAX)] {
                for starts in [false, true] {
                    for ignore in [0, 1 << 31] {
                        let k = Pattern::new(context, None, tag)
                            .ignoring(ignore)
                            .scan_key(starts);
                        assert!(seen.insert(k), "{context} {tag:?} {starts} {ignore}");
                    }
                }
            }
        }
    }
}
