//! Typed errors, one enum per operation. Every message says what to do about it.

use volley_shm::SegmentError;

/// How a peer left the job.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fate {
    /// It closed its world normally and will send nothing more.
    Finished,
    /// It exited with this code (reported by the launcher).
    Exited(i32),
    /// It was killed by this signal (reported by the launcher).
    Killed(i32),
    /// A rank on another host stopped answering: nothing heard from it for the peer timeout
    /// (VOLLEY_PEER_TIMEOUT_MS). It died, or the network between us failed.
    Unreachable,
    /// Its process ended before it closed its world (seen by a rank on its host in a job started
    /// by Hydra or Slurm, which alone know its exit status).
    Vanished,
}

impl std::fmt::Display for Fate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match *self {
            Fate::Finished => write!(f, "finished and closed its endpoints"),
            Fate::Exited(c) => write!(f, "exited with code {c}"),
            Fate::Killed(s) => write!(
                f,
                "was killed by signal {s} ({})",
                volley_sys::signal_name(s)
            ),
            Fate::Unreachable => write!(
                f,
                "stopped answering over the network (nothing heard for VOLLEY_PEER_TIMEOUT_MS: it died, or the network failed)"
            ),
            Fate::Vanished => write!(
                f,
                "ended before it closed its world (killed, crashed or exited; the launcher reports how)"
            ),
        }
    }
}

impl Fate {
    /// Whether the peer ended abnormally (the job is broken, not merely done).
    pub fn is_failure(&self) -> bool {
        !matches!(self, Fate::Finished | Fate::Exited(0))
    }

    /// The fate as one word, for the launcher's and agents' line protocols: `finished`,
    /// `exit:N`, `signal:N`, `unreachable`, `vanished`.
    pub fn code(&self) -> String {
        match *self {
            Fate::Finished => "finished".into(),
            Fate::Exited(c) => format!("exit:{c}"),
            Fate::Killed(s) => format!("signal:{s}"),
            Fate::Unreachable => "unreachable".into(),
            Fate::Vanished => "vanished".into(),
        }
    }

    /// The fate a `code` names; None for anything else.
    pub fn from_code(s: &str) -> Option<Fate> {
        if let Some(c) = s.strip_prefix("exit:") {
            return c.parse().ok().map(Fate::Exited);
        }
        if let Some(c) = s.strip_prefix("signal:") {
            return c.parse().ok().map(Fate::Killed);
        }
        match s {
            "finished" => Some(Fate::Finished),
            "unreachable" => Some(Fate::Unreachable),
            "vanished" => Some(Fate::Vanished),
            _ => None,
        }
    }
}

/// A peer an operation depends on is gone.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("peer lost: rank {rank} {fate}; nothing more can arrive from it. Check that rank's output for the cause")]
pub struct PeerLost {
    pub rank: usize,
    pub fate: Fate,
}

/// What to do about a bad variable: a launcher's own is fixed by starting the program with a
/// launcher; a setting of the user's, by correcting or unsetting it.
fn env_hint(var: &str) -> String {
    if crate::bootstrap::OWNED_VARS.contains(&var) {
        "Start the program with `volley run -n N PROGRAM`, or unset every VOLLEY_* variable to run it as a world of one".into()
    } else {
        format!("Correct {var}, or unset it for the default (README.md lists the settings)")
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InitError {
    #[error("bad environment: {var}={value:?}: {why}. {}", env_hint(.var))]
    Env {
        var: &'static str,
        value: String,
        why: String,
    },
    #[error("incomplete environment: {missing} is not set although {present} is. Start the program with `volley run -n N PROGRAM`, or unset every VOLLEY_* variable to run it as a world of one")]
    Incomplete {
        missing: &'static str,
        present: &'static str,
    },
    #[error(transparent)]
    Segment(#[from] SegmentError),
    #[error("cannot create the job's shared memory: {0}; check `ulimit -n` and memory limits")]
    Memfd(std::io::Error),
    #[error("doorbell descriptor {fd} from VOLLEY_WAKE_FDS is unusable: {source}. Start the program with `volley run`")]
    Doorbell {
        fd: i32,
        #[source]
        source: std::io::Error,
    },
    #[error("this process already has a volley world; use World::clone() to share it")]
    AlreadyInitialised,
    #[error("cannot start the progress or liveness thread: {0}; check the process's thread limit (`ulimit -u`), or unset VOLLEY_PROGRESS_THREAD (set VOLLEY_LIVENESS_THREAD=0 to go without the liveness thread)")]
    ProgressThread(std::io::Error),
    #[error("cannot create the descriptor that waits on the doorbell and the network socket together: {0}; check `ulimit -n`")]
    PollSet(std::io::Error),
    #[error("the node agent's socket failed while trading network addresses: {0}; the agent (volley run's helper on this host) probably died: check its output, then restart the job")]
    Agent(std::io::Error),
    #[error("the launcher's process-management interface ({flavor}) failed: {why}. Start the program with mpiexec.hydra, srun --mpi=pmi2 or volley run; unset PMI_FD/PMI_PORT to run it as a world of one")]
    Pmi { flavor: &'static str, why: String },
    #[error("the ranks on this host could not share the job's memory: {0}. Check that every rank of the job is a volley program started by the same user, then restart the job")]
    LocalSetup(String),
}

#[derive(Debug, thiserror::Error)]
pub enum OpenError {
    #[error("port {port} is already open in this process; close the other endpoint or active port first, or pick another port")]
    PortInUse { port: u32 },
    #[error(
        "port {port} is reserved by volley (it stands for \"any port\"); pick a port below {port}"
    )]
    Reserved { port: u32 },
}

#[derive(Debug, thiserror::Error)]
pub enum SendError {
    #[error("endpoint on port {port} has no target; call target(rank, port) first or use send_to")]
    NoTarget { port: u32 },
    #[error("rank {rank} does not exist: the job has {size} ranks (0..{size})")]
    NoSuchRank { rank: usize, size: usize },
    #[error(
        "the ring to rank {rank} is full: retry later, or use send() to wait or isend() to queue"
    )]
    WouldBlock { rank: usize },
    #[error("a message of {len} bytes cannot be sent without waiting (the ring to a rank holds at most {max} bytes); use send() or isend()")]
    TooLargeForTrySend { len: usize, max: usize },
    #[error("send_with writes one ring record, at most {max} bytes; this message is {len}: use send or isend")]
    TooLargeForSendWith { len: usize, max: usize },
    #[error(transparent)]
    PeerLost(#[from] PeerLost),
    #[error("a message of {len} bytes is larger than the network protocol carries to rank {rank} on another host (at most {max} bytes); send it in parts")]
    TooLargeForNetwork { rank: usize, len: u64, max: u64 },
    #[error("rank {rank} is on another host but is not a peer of this process's network engine; the job's address table is inconsistent, restart the job (and report it: this is a volley bug)")]
    UnknownPeer { rank: usize },
    #[error("rank {rank} could not copy the message from this process's memory (single copy refused by the kernel at run time); run the job with VOLLEY_SINGLE_COPY=off")]
    SingleCopyFailed { rank: usize },
    #[error("a blocking send of {len} bytes to this rank itself can never complete: the ring from a rank to itself holds at most {max} bytes and only this thread could receive them; send it with isend and receive it, or receive it on a matched endpoint with a receive posted first (irecv)")]
    ToSelfTooLarge { len: usize, max: usize },
}

#[derive(Debug, thiserror::Error)]
pub enum RecvError {
    #[error("receive buffer too small: the message is {message} bytes, the buffer {buffer}; the message is still queued, receive it with a buffer of at least {message} bytes or with recv()")]
    BufferTooSmall {
        message: usize,
        buffer: usize,
        /// The message's envelope, for a matched receive (a face that truncates, as MPI does,
        /// receives it with that source and tag into a buffer of its size).
        envelope: Option<crate::Status>,
    },
    /// A posted receive matched a message longer than its buffer: the message was taken (it
    /// was this receive's), its first `buffer` bytes stored and the rest dropped, as MPI's
    /// truncation does.
    #[error("message truncated: {message} bytes arrived from rank {} with tag {}, the receive buffer holds {buffer}; the first {buffer} bytes were stored, the rest dropped; post a receive of at least {message} bytes", envelope.source, envelope.tag)]
    Truncated {
        message: usize,
        buffer: usize,
        envelope: crate::Status,
    },
    #[error(transparent)]
    PeerLost(#[from] PeerLost),
    #[error("no rank {rank} to receive from: the job has {size} ranks (0 to {size} - 1); use None for any source")]
    NoSuchRank { rank: usize, size: usize },
    #[error("every other rank has finished and nothing is queued for port {port} (u32::MAX: any active port): no message can arrive; check the program's message pattern")]
    NoSenders { port: u32 },
    #[error("could not copy a {len}-byte message from rank {rank}'s memory: {why}; run the job with VOLLEY_SINGLE_COPY=off")]
    SingleCopy {
        rank: usize,
        len: usize,
        why: String,
    },
    #[error("the ring from rank {rank} is corrupt ({why}); the job's shared memory was overwritten, restart the job")]
    Corrupt { rank: usize, why: String },
    /// A collective's ranks passed different amounts of data: this rank expected `mine` bytes
    /// from rank `rank`, which passed `theirs`; nothing of it was read.
    #[error("rank {rank} passed {theirs} bytes to this collective operation, this rank expects {mine}: every rank must pass matching counts and datatypes; nothing was read")]
    CollectiveMismatch {
        rank: usize,
        theirs: usize,
        mine: usize,
    },
}
