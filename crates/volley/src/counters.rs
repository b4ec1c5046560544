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
        "full rings left to wait because unexpected messages already filled VOLLEY_UNEXPECTED_BYTES",
    ),
];

const _: () = assert!(COUNTERS.len() == Counter::DrainBudgetFull as usize + 1);
// Every counter fits the block a rank publishes them in.
const _: () = assert!(COUNTERS.len() <= volley_shm::RANK_COUNTERS);

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

    pub fn snapshot(&self) -> Vec<(&'static str, u64)> {
        COUNTERS
            .iter()
            .zip(self.0.iter())
            .map(|((name, _, _), v)| (*name, *v))
            .collect()
    }
}
