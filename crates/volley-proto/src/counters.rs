//! The protocol's counters, declared once with a name, a unit and a description (Aeron's habit):
//! an anomaly is counted, never logged from the hot path.

use volley_wire::Malformed;

macro_rules! peer_counters {
    ($( $field:ident, $unit:literal, $desc:literal; )*) => {
        /// Counters of one peer.
        #[derive(Clone, Debug, Default, PartialEq, Eq)]
        pub struct PeerCounters {
            $( pub $field: u64, )*
        }

        /// (name, unit, description) of each [`PeerCounters`] field, in order.
        pub const PEER_COUNTERS: &[(&str, &str, &str)] = &[
            $( (stringify!($field), $unit, $desc), )*
        ];

        impl PeerCounters {
            /// The values, in the order of [`PEER_COUNTERS`].
            pub fn values(&self) -> Vec<u64> {
                vec![$( self.$field, )*]
            }
        }
    };
}

peer_counters! {
    packets_sent, "packets", "packets sent to the peer (all kinds, retransmissions included)";
    packets_received, "packets", "valid packets received from the peer";
    messages_sent, "messages", "messages queued to the peer";
    messages_delivered, "messages", "messages from the peer delivered to the application";
    rendezvous_sent, "messages", "messages sent by rendezvous (RTS, wait for CTS, data)";
    retransmits_timeout, "packets", "packets sent again because the retransmission timer expired";
    retransmits_fast, "packets", "packets sent again because later packets were acknowledged first";
    duplicates, "packets", "packets received twice (the copy was dropped)";
    out_of_window, "packets", "packets beyond the receive window (dropped)";
    acks_sent, "packets", "ACK packets sent (piggybacked acknowledgements are not counted)";
    heartbeats_sent, "packets", "ACKs sent only to show this process is alive";
    credit_stalls, "events", "times a message waited for the peer to return credit";
    credit_probes, "packets", "ACKs sent to ask a credit-stalled peer for a credit update";
    rendezvous_waits, "events", "times an announced message waited for room at this receiver";
    send_busy, "events", "sends refused because too much was queued to the peer";
    best_effort_lost, "messages", "best-effort messages dropped incomplete (a fragment was lost)";
    bad_field, "packets", "intact packets with an impossible field (dropped)";
    after_lost, "packets", "packets received after the peer was declared lost (dropped)";
    rto_backoffs, "events", "retransmission timer expirations (each doubles the timeout)";
    spurious_timeouts, "events", "retransmission timeouts undone: the packets taken for lost had arrived, their acknowledgements were late (window and timeout restored)";
    tail_probes, "packets", "tail loss probes: the last packet sent again because nothing was acknowledged for two round trips (RACK-TLP)";
    cwnd_reductions, "events", "times congestion control cut the window to the peer (a loss among packets sent after the last cut, or a retransmission timeout)";
    stale_retransmits, "packets", "retransmissions due of a message already complete (an ACK sent instead; only after a forged packet)";
    stale_requests, "packets", "requests to send for a message delivered already (taken, not acted on; only after a forged packet)";
}

/// (name, unit, description) of the engine's counters that belong to no peer, in the order of
/// [`crate::Engine::engine_counters`].
pub const ENGINE_COUNTERS: &[(&str, &str, &str)] = &[(
    "buffer_allocs",
    "buffers",
    "message buffers allocated because the pool had none to reuse (none per message once warm, up to 1 MiB)",
)];

/// Why a received packet was dropped before it reached a peer's state, in the order of
/// [`crate::Engine::drops`].
pub const DROP_REASONS: &[(&str, &str)] = &[
    ("drop_truncated", "packets shorter than their headers say"),
    ("drop_foreign", "frames of another protocol (wrong magic)"),
    ("drop_version", "volley packets of another format version"),
    ("drop_kind", "volley packets of an unknown kind"),
    (
        "drop_checksum",
        "packets whose CRC32C does not match (corrupted)",
    ),
    ("drop_token", "packets of another job (wrong token)"),
    (
        "drop_field",
        "intact packets with an impossible field or from no known peer",
    ),
    ("drop_not_mine", "packets addressed to another rank"),
];

pub(crate) const DROP_NOT_MINE: usize = 7;

pub(crate) fn drop_index(m: Malformed) -> usize {
    match m {
        Malformed::Truncated => 0,
        Malformed::Magic => 1,
        Malformed::Version => 2,
        Malformed::Kind => 3,
        Malformed::Checksum => 4,
        Malformed::Token => 5,
        Malformed::Field => 6,
    }
}
