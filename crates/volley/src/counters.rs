//! Every anomaly and every mode choice has a counter, declared once in [`COUNTERS`] with a unit and
//! a description. Counting is a plain add on a process-local integer: no atomics, no locks.

/// Index of each counter in the table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub enum Counter {
    MsgsSent,
    MsgsRecvd,
    BytesSent,
    BytesRecvd,
    Fragments,
    ZeroCopyRecvs,
    BackPressure,
    PendingSends,
    DoorbellsRung,
    Sleeps,
    SpinsEndedInSleep,
    ActiveDispatches,
    InlineSends,
    PipelinedSends,
    SingleCopySends,
    SingleCopyRecvs,
    SingleCopyBytes,
    ProgressThreadSends,
    StagingCopies,
    Drained,
    DrainBudgetFull,
    NetHandovers,
    RendezvousSends,
    RendezvousStreams,
    BadGrants,
    CollSlotsClaimed,
    CollSlotsMissing,
    CopiesHelped,
    ChunksHelped,
    CollCrossBytes,
}

/// (name, unit, description), in the order of [`Counter`].
pub const COUNTERS: &[(&str, &str, &str)] = &[
    (
        "msgs_sent",
        "messages",
        "messages handed to a ring (whole or first fragment)",
    ),
    (
        "msgs_recvd",
        "messages",
        "messages delivered to an endpoint or handler",
    ),
    ("bytes_sent", "bytes", "payload bytes sent"),
    ("bytes_recvd", "bytes", "payload bytes delivered"),
    (
        "fragments",
        "records",
        "records of messages larger than one record",
    ),
    (
        "zero_copy_recvs",
        "messages",
        "messages lent in place from the ring by recv()",
    ),
    (
        "back_pressure",
        "events",
        "sends that found the destination ring full",
    ),
    (
        "pending_sends",
        "messages",
        "non-blocking sends queued because the ring was full",
    ),
    (
        "doorbells_rung",
        "wake-ups",
        "eventfd writes to wake a sleeping receiver",
    ),
    (
        "sleeps",
        "sleeps",
        "times this process slept on its doorbell",
    ),
    (
        "spins_ended_in_sleep",
        "waits",
        "spin-then-block waits whose spin ran out",
    ),
    ("active_dispatches", "messages", "active-port handler calls"),
    (
        "inline_sends",
        "messages",
        "messages copied whole into one ring record",
    ),
    (
        "pipelined_sends",
        "messages",
        "messages cut into fragments through the ring",
    ),
    (
        "single_copy_sends",
        "messages",
        "messages handed over by address (process_vm_readv)",
    ),
    (
        "single_copy_recvs",
        "messages",
        "messages copied straight from the sender's memory",
    ),
    (
        "single_copy_bytes",
        "bytes",
        "bytes received by single copy",
    ),
    (
        "progress_thread_sends",
        "messages",
        "non-blocking sends finished by the progress thread",
    ),
    (
        "staging_copies",
        "messages",
        "messages copied through an intermediate buffer on their way into the caller's buffer",
    ),
    (
        "drained",
        "messages",
        "unexpected messages copied out of a full ring so that their sender could go on",
    ),
    (
        "drain_budget_full",
        "events",
        "drains past VOLLEY_UNEXPECTED_BYTES of unexpected eager data (the senders are then asked for requests to send)",
    ),
    (
        "net_handovers",
        "messages",
        "owned buffers handed to the network engine without a copy (given back once acknowledged)",
    ),
    (
        "rendezvous_sends",
        "messages",
        "large matched messages sent as a request to send, their data waiting in the sender's memory until a receive matched",
    ),
    (
        "rendezvous_streams",
        "messages",
        "matched rendezvous whose data the sender streamed through the ring once granted (the others went by single copy)",
    ),
    (
        "bad_grants",
        "grants",
        "answers to a request to send that named no request of ours (ignored)",
    ),
    (
        "coll_slots_claimed",
        "communicators",
        "communicators whose short collectives meet in the segment (a collective slot at each member)",
    ),
    (
        "coll_slots_missing",
        "communicators",
        "communicators on one host whose collectives send messages: a member had no collective slot free",
    ),
    (
        "copies_helped",
        "messages",
        "single-copy receives whose sender copied part of the message (process_vm_writev)",
    ),
    (
        "chunks_helped",
        "chunks",
        "chunks of a receiver's single copy that this sender wrote into the receiver's buffer",
    ),
    (
        "coll_cross_bytes",
        "bytes",
        "bytes collectives read from other ranks' buffers (allreduce and allgather reading across, process_vm_readv)",
    ),
];

const _: () = assert!(COUNTERS.len() == Counter::CollCrossBytes as usize + 1);

/// Where a counter is counted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layer {
    /// This process's engine: shared memory, matching, waiting ([`COUNTERS`]).
    Core,
    /// The network protocol: summed over the peers on other hosts, then the engine's own.
    Net,
    /// Packets the network protocol dropped before they reached a peer, by reason.
    NetDrop,
    /// The network device (UDP socket, AF_PACKET rings, fault injector).
    Device,
}

/// One row of volley's table of counters.
#[derive(Clone, Copy, Debug)]
pub struct CounterInfo {
    pub layer: Layer,
    pub name: &'static str,
    pub unit: &'static str,
    pub description: &'static str,
}

impl CounterInfo {
    /// The name as printed: the network's counters carry `net_` in front.
    pub fn display_name(&self) -> String {
        match self.layer {
            Layer::Core => self.name.to_string(),
            _ => format!("net_{}", self.name),
        }
    }
}

/// How many counters the table has.
pub const TABLE_LEN: usize = COUNTERS.len()
    + volley_proto::PEER_COUNTERS.len()
    + volley_proto::ENGINE_COUNTERS.len()
    + volley_proto::DROP_REASONS.len()
    + volley_transport::DEVICE_COUNTERS.len();

// Every counter fits the block a rank publishes them in.
const _: () = assert!(TABLE_LEN <= volley_shm::RANK_COUNTERS);

/// Every counter volley keeps, with its unit and meaning, in the order a rank publishes them in
/// the job segment when it closes its world (and `volley run --counters` prints them): the
/// core's, the network protocol's (summed over peers, then its engine's), its drops, the
/// device's.
pub fn counter_table() -> Vec<CounterInfo> {
    let mut t = Vec::with_capacity(TABLE_LEN);
    let row = |layer, (name, unit, description): &(&'static str, &'static str, &'static str)| {
        CounterInfo {
            layer,
            name,
            unit,
            description,
        }
    };
    t.extend(COUNTERS.iter().map(|c| row(Layer::Core, c)));
    t.extend(
        volley_proto::PEER_COUNTERS
            .iter()
            .map(|c| row(Layer::Net, c)),
    );
    t.extend(
        volley_proto::ENGINE_COUNTERS
            .iter()
            .map(|c| row(Layer::Net, c)),
    );
    t.extend(
        volley_proto::DROP_REASONS
            .iter()
            .map(|&(name, description)| row(Layer::NetDrop, &(name, "packets", description))),
    );
    t.extend(
        volley_transport::DEVICE_COUNTERS
            .iter()
            .map(|c| row(Layer::Device, c)),
    );
    t
}

#[derive(Default, Clone)]
pub(crate) struct Counters([u64; COUNTERS.len()]);

impl Counters {
    #[inline]
    pub fn add(&mut self, c: Counter, n: u64) {
        self.0[c as usize] += n;
    }

    pub fn merge(&mut self, other: &Counters) {
        for (a, b) in self.0.iter_mut().zip(other.0.iter()) {
            *a += b;
        }
    }

    pub fn values(&self) -> &[u64] {
        &self.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_has_every_counter_once_in_publishing_order() {
        let t = counter_table();
        assert_eq!(t.len(), TABLE_LEN);
        let names: std::collections::HashSet<String> =
            t.iter().map(CounterInfo::display_name).collect();
        assert_eq!(names.len(), TABLE_LEN, "a name appears twice");
        assert_eq!(t[0].display_name(), "msgs_sent");
        assert_eq!(t[COUNTERS.len()].display_name(), "net_packets_sent");
        assert_eq!(t[TABLE_LEN - 1].display_name(), "net_fault_injected");
        assert!(t
            .iter()
            .all(|c| !c.unit.is_empty() && !c.description.is_empty()));
    }
}
