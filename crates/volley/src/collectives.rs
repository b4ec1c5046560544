//! Which algorithm a collective runs, by message size and rank count: the MPI face asks, and
//! `volley info` lists the choices. `VOLLEY_COLL_<NAME>=<algorithm>` forces one (for tests and
//! comparisons); a forced algorithm that cannot run a call (Rabenseifner with a non-commutative
//! operation, recursive doubling of an allgather over a rank count that is not a power of two)
//! leaves that call to the default choice.
//!
//! The defaults are the classic ones (Thakur, Rabenseifner and Gropp, "Optimization of
//! collective communication operations in MPICH", 2005), with the switch points MPICH uses:
//! latency-bound algorithms (binomial trees, recursive doubling) for small messages, and for
//! large ones algorithms that move each byte as few times as possible (scatter then ring
//! allgather for a broadcast, reduce-scatter by recursive halving then allgather by recursive
//! doubling for an allreduce, pairwise exchange for an alltoall).

use std::sync::OnceLock;

/// The collectives whose algorithm is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Coll {
    Barrier,
    Bcast,
    Reduce,
    Allreduce,
    Allgather,
    Alltoall,
    ReduceScatter,
    Gather,
    Scatter,
}

impl Coll {
    pub const ALL: [Coll; 9] = [
        Coll::Barrier,
        Coll::Bcast,
        Coll::Reduce,
        Coll::Allreduce,
        Coll::Allgather,
        Coll::Alltoall,
        Coll::ReduceScatter,
        Coll::Gather,
        Coll::Scatter,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Coll::Barrier => "barrier",
            Coll::Bcast => "bcast",
            Coll::Reduce => "reduce",
            Coll::Allreduce => "allreduce",
            Coll::Allgather => "allgather",
            Coll::Alltoall => "alltoall",
            Coll::ReduceScatter => "reduce_scatter",
            Coll::Gather => "gather",
            Coll::Scatter => "scatter",
        }
    }

    /// The variable that forces this collective's algorithm.
    pub fn env_var(self) -> String {
        format!("VOLLEY_COLL_{}", self.name().to_uppercase())
    }

    /// What the size of a call means for this collective.
    pub fn size_means(self) -> &'static str {
        match self {
            Coll::Barrier => "nothing (a barrier carries no data)",
            Coll::Bcast => "the message",
            Coll::Reduce | Coll::Allreduce => "the vector reduced",
            Coll::Allgather => "each rank's block",
            Coll::Alltoall => "each block (one per pair)",
            Coll::ReduceScatter => "the vector reduced (every rank's block)",
            Coll::Gather | Coll::Scatter => "each rank's block",
        }
    }

    /// The algorithms this collective can run.
    pub fn algos(self) -> &'static [Algo] {
        match self {
            Coll::Barrier => &[Algo::Dissemination, Algo::Shm, Algo::Hierarchical],
            Coll::Bcast => &[
                Algo::Binomial,
                Algo::ScatterRing,
                Algo::Shm,
                Algo::Hierarchical,
            ],
            Coll::Reduce => &[Algo::Binomial, Algo::Linear, Algo::Shm, Algo::Hierarchical],
            Coll::Allreduce => &[
                Algo::Shm,
                Algo::Direct,
                Algo::Hierarchical,
                Algo::RecursiveDoubling,
                Algo::Rabenseifner,
                Algo::ReduceBcast,
            ],
            Coll::Allgather => &[
                Algo::Shm,
                Algo::Direct,
                Algo::Hierarchical,
                Algo::RecursiveDoubling,
                Algo::Ring,
                Algo::GatherBcast,
            ],
            Coll::Alltoall => &[Algo::Shm, Algo::Linear, Algo::Pairwise, Algo::Bruck],
            Coll::ReduceScatter => &[Algo::Pairwise, Algo::ReduceScatterv],
            Coll::Gather | Coll::Scatter => &[Algo::Shm, Algo::Linear],
        }
    }
}

/// A collective algorithm.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Algo {
    /// Inside one host, through the job segment: each rank's contribution written once into its
    /// collective slot, flags instead of messages, folded in rank order by the readers.
    Shm,
    /// Barrier: log2(n) rounds, in round i rank r signals r + 2^i and waits for r - 2^i.
    Dissemination,
    /// Ranks on several hosts, several on one: inside each host through the segment (to and from
    /// the host's leader, its lowest rank), between the leaders by messages, one per host.
    Hierarchical,
    /// A binomial tree: log2(n) rounds, the whole message on every edge.
    Binomial,
    /// Broadcast: the root scatters n pieces down a binomial tree, then a ring allgathers them.
    ScatterRing,
    /// Reduce: every contribution to the root, folded there in rank order. Alltoall: every
    /// block posted at once.
    Linear,
    /// log2(n) rounds of pairwise exchange with partners at doubling distances (ranks beyond a
    /// power of two fold into a neighbour first).
    RecursiveDoubling,
    /// Allreduce: reduce-scatter by recursive halving, then allgather by recursive doubling.
    Rabenseifner,
    /// Allreduce: reduce to rank 0, then broadcast.
    ReduceBcast,
    /// Allgather: n - 1 rounds around a ring, each passing one block on.
    Ring,
    /// Allgather: gather to rank 0, then broadcast.
    GatherBcast,
    /// Alltoall: n - 1 rounds, in round i rank r sends to r + i and receives from r - i.
    /// Reduce_scatter: each rank's contribution to block r goes straight to rank r, which folds
    /// them in rank order.
    Pairwise,
    /// Reduce_scatter: reduce to rank 0, then scatter the blocks.
    ReduceScatterv,
    /// Alltoall: ceil(log2 n) rounds, in round k every rank passes the blocks whose distance to
    /// their destination has bit k set to the rank k ahead (Bruck et al. 1997).
    Bruck,
    /// Inside one host, by reading the other ranks' buffers (process_vm_readv). Allreduce: each
    /// rank folds its 1/n slice of the vector, then reads the other slices from their owners;
    /// each byte copied twice, no rounds (`ShmGroup::allreduce_cross`). Allgather: every rank
    /// reads every other's block.
    Direct,
}

impl Algo {
    pub fn name(self) -> &'static str {
        match self {
            Algo::Shm => "shm",
            Algo::Dissemination => "dissemination",
            Algo::Hierarchical => "hierarchical",
            Algo::Binomial => "binomial",
            Algo::ScatterRing => "scatter_ring",
            Algo::Linear => "linear",
            Algo::RecursiveDoubling => "recursive_doubling",
            Algo::Rabenseifner => "rabenseifner",
            Algo::ReduceBcast => "reduce_bcast",
            Algo::Ring => "ring",
            Algo::GatherBcast => "gather_bcast",
            Algo::Pairwise => "pairwise",
            Algo::ReduceScatterv => "reduce_scatterv",
            Algo::Bruck => "bruck",
            Algo::Direct => "direct",
        }
    }
}

/// What the choice depends on.
#[derive(Clone, Copy, Debug)]
pub struct Shape {
    /// Bytes, as [`Coll::size_means`] says.
    pub bytes: usize,
    /// Ranks of the communicator.
    pub ranks: usize,
    /// Elements of the vector (reductions).
    pub count: usize,
    /// Whether the operation commutes (reductions).
    pub commutative: bool,
    /// Whether every rank of the communicator shares this host's segment (and its collective
    /// slots).
    pub shared: bool,
    /// Whether the ranks span several hosts (each host's ranks can meet in its segment).
    pub spread: bool,
    /// Whether every rank (of a shared communicator) can read the others' memory with
    /// process_vm_readv.
    pub cross: bool,
    /// From which size this machine's point-to-point messages go by single copy, for the
    /// ranks of a shared communicator (`ShmGroup::cross_from`; usize::MAX: never). The default
    /// choice reads across only where each read is at least [`DIRECT_SHARE`]th of it; a forced
    /// `Algo::Direct` ignores it.
    pub copy_from: usize,
}

impl Shape {
    /// A call of `bytes` over `ranks` ranks (count: bytes; commutative; not shared).
    pub fn new(bytes: usize, ranks: usize) -> Shape {
        Shape {
            bytes,
            ranks,
            count: bytes,
            commutative: true,
            shared: false,
            spread: false,
            cross: false,
            copy_from: 0,
        }
    }

    /// Whether reading across (`Algo::Direct`) pays for reads of `read` bytes each on this
    /// machine: single copy is in use there at all, and from a size at most [`DIRECT_SHARE`]
    /// times the read.
    fn reading_pays(&self, read: usize) -> bool {
        self.copy_from != usize::MAX && read >= self.copy_from / DIRECT_SHARE
    }
}

/// Reading across serves a collective from reads of a quarter of the size from which
/// point-to-point messages go by single copy: it saves the rounds of messages and their
/// handshakes that a point-to-point single copy pays each time. On the 16-core server, whose
/// single copy starts at 32 KiB, direct beat Rabenseifner from slices of 8 KiB
/// ([`ALLREDUCE_DIRECT_BYTES_PER_RANK`], [`ALLGATHER_DIRECT_BYTES`]: those stay the floor).
/// Where the profile says single copy never wins, nor does reading across: on an AMD EPYC VM
/// whose `volley tune` found the pipelined copy 1.4-3x faster at every size (2026-12-03),
/// an allreduce of 2 ranks took 9.6 us at 64 KiB and 116 us at 1 MiB reading across, 4.8 and
/// 64 us by Rabenseifner through the rings.
pub const DIRECT_SHARE: usize = 4;

/// Up to this many ranks on one host, the collectives that can meet in the segment do.
pub const SHM_MAX_RANKS: usize = 16;
/// Up to this many bytes (each rank's contribution), they do.
pub const SHM_BYTES: usize = crate::shmcoll::SHM_COLL_BYTES;

/// Up to this many bytes gathered in all, an allgather over several hosts goes through their
/// leaders (each leader then broadcasts the whole result to its host a slot at a time; beyond
/// this the ring's bandwidth wins).
pub const HIER_ALLGATHER_BYTES: usize = 64 << 10;

/// Below this many bytes a broadcast goes down a binomial tree.
pub const BCAST_TREE_BYTES: usize = 12 << 10;
/// Up to this many bytes an allreduce runs recursive doubling.
pub const ALLREDUCE_RD_BYTES: usize = 2 << 10;
/// From this many bytes per rank an allreduce inside one host whose ranks can read each other's
/// memory reads it (`Algo::Direct`): below it the synchronisations and the two system calls per
/// peer cost more than the rounds of messages save, and the calls grow with the ranks. 16-core
/// server, direct / Rabenseifner: 8 ranks 32 KiB 37.9 / 33.5 us, 64 KiB 51.8 / 58.1, 1 MiB 433 /
/// 630; 16 ranks 64 KiB 70 / 55, 1 MiB 525 / 660; 2 ranks on the VM even at 16 KiB.
pub const ALLREDUCE_DIRECT_BYTES_PER_RANK: usize = 8 << 10;
/// From this many bytes per block an allgather inside one host whose ranks can read each
/// other's memory reads the blocks (`Algo::Direct`). 16-core server, direct / recursive doubling
/// / ring / Open MPI, per call in us: 8 ranks 4 KiB 15.3 / 13.6 / 18.0 / 17.5, 8 KiB 18.8 / 26.2
/// / 27.3 / 27.3, 64 KiB 69 / 146 / 156 / 122; 16 ranks 4 KiB 36.5 / 31.8 / 40.3 / 34.9, 8 KiB
/// 44.7 / 56.7 / 62.3 / 53.5, 64 KiB 251 / 319 / 400 / 319, 256 KiB 911 / 897 / 1557 / 1503.
pub const ALLGATHER_DIRECT_BYTES: usize = 8 << 10;
/// Up to this many bytes gathered in all an allgather over a power of two runs recursive
/// doubling.
pub const ALLGATHER_RD_BYTES: usize = 512 << 10;
/// Up to this many bytes per block, with at least ALLTOALL_BRUCK_RANKS ranks, an alltoall runs
/// Bruck's algorithm (MPICH's switch points: 256 bytes, 8 ranks).
pub const ALLTOALL_BRUCK_BYTES: usize = 256;
pub const ALLTOALL_BRUCK_RANKS: usize = 8;
/// Up to this many bytes per block an alltoall posts every block at once.
pub const ALLTOALL_LINEAR_BYTES: usize = 32 << 10;
/// Up to this many bytes in all a reduce-scatter reduces to one rank and scatters.
pub const REDUCE_SCATTER_TREE_BYTES: usize = 2 << 10;

fn pow2_below(n: usize) -> usize {
    if n == 0 {
        0
    } else {
        1 << (usize::BITS - 1 - n.leading_zeros())
    }
}

/// Whether `a` can run this call of `c`.
pub fn applies(c: Coll, a: Algo, s: Shape) -> bool {
    if !c.algos().contains(&a) {
        return false;
    }
    match a {
        Algo::Shm => {
            // What one rank writes into its slot: its block, or (a scatter's root, each rank
            // of an alltoall) one block for every rank.
            let written = match c {
                Coll::Barrier => 0,
                Coll::Alltoall | Coll::Scatter => s.bytes.saturating_mul(s.ranks),
                _ => s.bytes,
            };
            s.shared && (2..=SHM_MAX_RANKS).contains(&s.ranks) && written <= SHM_BYTES
        }
        // Hosts fold their ranks' contributions out of rank order: commutative operations only.
        Algo::Hierarchical => {
            s.spread
                && s.ranks >= 3
                && s.commutative
                && (s.bytes <= SHM_BYTES || c == Coll::Barrier)
                && (c != Coll::Allgather || s.bytes.saturating_mul(s.ranks) <= HIER_ALLGATHER_BYTES)
        }
        Algo::Rabenseifner => s.commutative && s.count >= pow2_below(s.ranks),
        Algo::Direct => {
            s.shared
                && s.cross
                && (2..=SHM_MAX_RANKS).contains(&s.ranks)
                // (An allreduce of elements of no bytes has nothing to slice.)
                && (c != Coll::Allreduce || (s.commutative && s.count >= s.ranks && s.bytes > 0))
        }
        Algo::RecursiveDoubling if c == Coll::Allgather => s.ranks.is_power_of_two(),
        _ => true,
    }
}

/// The default algorithm for a call, and why.
pub fn default_choice(c: Coll, s: Shape) -> (Algo, &'static str) {
    if applies(c, Algo::Shm, s) {
        return (
            Algo::Shm,
            "one host, short: through the segment, a flag per rank instead of messages",
        );
    }
    if applies(c, Algo::Hierarchical, s) {
        return (
            Algo::Hierarchical,
            "several hosts, short: one message per host, not per rank, over the network",
        );
    }
    match c {
        Coll::Barrier => (Algo::Dissemination, "log2(n) rounds of one message"),
        Coll::Bcast if s.ranks <= 3 => (Algo::Binomial, "3 ranks or fewer: a tree is as short"),
        Coll::Bcast if s.bytes < BCAST_TREE_BYTES => (Algo::Binomial, "short: latency-bound"),
        Coll::Bcast => (
            Algo::ScatterRing,
            "long: each byte crosses each link about twice",
        ),
        Coll::Reduce => (
            Algo::Binomial,
            "log2(n) rounds; rank order kept for any operation",
        ),
        Coll::Allreduce
            if s.bytes >= ALLREDUCE_DIRECT_BYTES_PER_RANK * s.ranks
                && s.reading_pays(s.bytes / s.ranks.max(1))
                && applies(c, Algo::Direct, s) =>
        {
            (
                Algo::Direct,
                "one host, long: each rank folds its slice from the others' buffers, then reads the rest (process_vm_readv)",
            )
        }
        Coll::Allreduce if !s.commutative => (
            Algo::RecursiveDoubling,
            "non-commutative: recursive doubling keeps rank order",
        ),
        Coll::Allreduce if s.bytes <= ALLREDUCE_RD_BYTES => {
            (Algo::RecursiveDoubling, "short: log2(n) rounds")
        }
        Coll::Allreduce if !applies(c, Algo::Rabenseifner, s) => (
            Algo::RecursiveDoubling,
            "fewer elements than ranks: nothing to scatter",
        ),
        Coll::Allreduce => (
            Algo::Rabenseifner,
            "long: each rank reduces and moves 1/n of the vector per round",
        ),
        Coll::Allgather
            if s.bytes >= ALLGATHER_DIRECT_BYTES
                && s.reading_pays(s.bytes)
                && applies(c, Algo::Direct, s) =>
        {
            (
                Algo::Direct,
                "one host, long: every rank reads every other's block once (process_vm_readv)",
            )
        }
        Coll::Allgather
            if s.ranks.is_power_of_two()
                && s.bytes.saturating_mul(s.ranks) <= ALLGATHER_RD_BYTES =>
        {
            (
                Algo::RecursiveDoubling,
                "power of two, short: log2(n) rounds",
            )
        }
        Coll::Allgather => (
            Algo::Ring,
            "long or not a power of two: n - 1 rounds, one block each",
        ),
        Coll::Alltoall if s.bytes <= ALLTOALL_BRUCK_BYTES && s.ranks >= ALLTOALL_BRUCK_RANKS => (
            Algo::Bruck,
            "tiny blocks, many ranks: log2(n) messages instead of n - 1",
        ),
        Coll::Alltoall if s.bytes <= ALLTOALL_LINEAR_BYTES => {
            (Algo::Linear, "short blocks: everything in flight at once")
        }
        Coll::Alltoall => (
            Algo::Pairwise,
            "long blocks: one partner at a time, no incast",
        ),
        Coll::ReduceScatter if s.bytes <= REDUCE_SCATTER_TREE_BYTES => (
            Algo::ReduceScatterv,
            "short: log2(n) rounds to rank 0, then one",
        ),
        Coll::ReduceScatter => (
            Algo::Pairwise,
            "long: each contribution moves once, straight to its block's rank",
        ),
        Coll::Gather => (Algo::Linear, "each rank's block straight to the root"),
        Coll::Scatter => (Algo::Linear, "each rank's block straight from the root"),
    }
}

/// The algorithms `VOLLEY_COLL_*` force, read once.
fn forced_all() -> &'static Result<Vec<(Coll, Algo)>, String> {
    static FORCED: OnceLock<Result<Vec<(Coll, Algo)>, String>> = OnceLock::new();
    FORCED.get_or_init(|| {
        let mut v = Vec::new();
        for c in Coll::ALL {
            let var = c.env_var();
            let Ok(val) = std::env::var(&var) else {
                continue;
            };
            if val.is_empty() || val == "auto" {
                continue;
            }
            match c.algos().iter().find(|a| a.name() == val) {
                Some(&a) => v.push((c, a)),
                None => {
                    let names: Vec<&str> = c.algos().iter().map(|a| a.name()).collect();
                    return Err(format!(
                        "{var}={val:?} is not an algorithm of {}: use one of {} or auto",
                        c.name(),
                        names.join(", ")
                    ));
                }
            }
        }
        Ok(v)
    })
}

/// Checks the `VOLLEY_COLL_*` variables (at MPI_Init): an unknown algorithm is an error that
/// lists the known ones.
pub fn check_env() -> Result<(), String> {
    forced_all().as_ref().map(|_| ()).map_err(Clone::clone)
}

/// The algorithm `VOLLEY_COLL_*` forces for `c`, if any.
pub fn forced(c: Coll) -> Option<Algo> {
    forced_all()
        .as_ref()
        .ok()?
        .iter()
        .find(|(k, _)| *k == c)
        .map(|(_, a)| *a)
}

/// The algorithm a call runs: the forced one where it applies, else the default.
pub fn select(c: Coll, s: Shape) -> Algo {
    match forced(c) {
        Some(a) if applies(c, a, s) => a,
        _ => default_choice(c, s).0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(bytes: usize, ranks: usize) -> Shape {
        Shape {
            count: bytes / 4,
            ..Shape::new(bytes, ranks)
        }
    }

    #[test]
    fn defaults_switch_at_the_documented_sizes() {
        assert_eq!(select(Coll::Bcast, shape(8, 8)), Algo::Binomial);
        assert_eq!(select(Coll::Bcast, shape(1 << 20, 8)), Algo::ScatterRing);
        assert_eq!(select(Coll::Bcast, shape(1 << 20, 2)), Algo::Binomial);
        assert_eq!(
            select(Coll::Allreduce, shape(8, 8)),
            Algo::RecursiveDoubling
        );
        assert_eq!(
            select(Coll::Allreduce, shape(1 << 20, 8)),
            Algo::Rabenseifner
        );
        let noncomm = Shape {
            commutative: false,
            ..shape(1 << 20, 8)
        };
        assert_eq!(select(Coll::Allreduce, noncomm), Algo::RecursiveDoubling);
        // Fewer elements than the power of two: nothing to scatter.
        let few = Shape {
            count: 3,
            ..shape(1 << 20, 8)
        };
        assert_eq!(select(Coll::Allreduce, few), Algo::RecursiveDoubling);
        assert_eq!(
            select(Coll::Allgather, shape(8, 8)),
            Algo::RecursiveDoubling
        );
        assert_eq!(select(Coll::Allgather, shape(8, 6)), Algo::Ring);
        assert_eq!(select(Coll::Allgather, shape(1 << 20, 8)), Algo::Ring);
        assert_eq!(select(Coll::Alltoall, shape(8, 8)), Algo::Bruck);
        assert_eq!(select(Coll::Alltoall, shape(8, 4)), Algo::Linear);
        assert_eq!(select(Coll::Alltoall, shape(257, 8)), Algo::Linear);
        assert_eq!(select(Coll::Alltoall, shape(1 << 20, 8)), Algo::Pairwise);
        assert_eq!(
            select(Coll::ReduceScatter, shape(8, 8)),
            Algo::ReduceScatterv
        );
        assert_eq!(
            select(Coll::ReduceScatter, shape(1 << 20, 8)),
            Algo::Pairwise
        );
    }

    #[test]
    fn one_host_short_calls_meet_in_the_segment() {
        let shared = |bytes, ranks| Shape {
            shared: true,
            ..shape(bytes, ranks)
        };
        for c in [
            Coll::Barrier,
            Coll::Bcast,
            Coll::Reduce,
            Coll::Allreduce,
            Coll::Allgather,
            Coll::Gather,
        ] {
            assert_eq!(select(c, shared(8, 2)), Algo::Shm, "{c:?}");
            assert_eq!(
                select(c, shared(SHM_BYTES, SHM_MAX_RANKS)),
                Algo::Shm,
                "{c:?}"
            );
            assert_ne!(select(c, shared(8, SHM_MAX_RANKS + 1)), Algo::Shm, "{c:?}");
            assert_ne!(select(c, shape(8, 2)), Algo::Shm, "{c:?}: across hosts");
            assert_ne!(select(c, shared(8, 1)), Algo::Shm, "{c:?}: one rank");
        }
        // A barrier has no size; the others leave the segment above a slot's size.
        assert_eq!(select(Coll::Barrier, shared(1 << 20, 4)), Algo::Shm);
        assert_ne!(select(Coll::Allreduce, shared(SHM_BYTES + 1, 4)), Algo::Shm);
        // Where one rank writes a block for every rank, all of them must fit its slot.
        for c in [Coll::Alltoall, Coll::Scatter] {
            assert_eq!(select(c, shared(SHM_BYTES / 4, 4)), Algo::Shm, "{c:?}");
            assert_ne!(select(c, shared(SHM_BYTES / 4 + 1, 4)), Algo::Shm, "{c:?}");
            assert_eq!(select(c, shared(0, 16)), Algo::Shm, "{c:?}");
        }
        assert_eq!(select(Coll::Gather, shared(SHM_BYTES, 16)), Algo::Shm);
        assert_ne!(select(Coll::Gather, shared(SHM_BYTES + 1, 2)), Algo::Shm);
        // Not for collectives that have no shared-memory algorithm yet.
        assert_ne!(select(Coll::ReduceScatter, shared(8, 4)), Algo::Shm);
        // Rank order is kept, so an operation that does not commute meets there too.
        let noncomm = Shape {
            commutative: false,
            ..shared(8, 4)
        };
        assert_eq!(select(Coll::Allreduce, noncomm), Algo::Shm);
    }

    #[test]
    fn short_calls_over_several_hosts_go_through_host_leaders() {
        let spread = |bytes, ranks| Shape {
            spread: true,
            ..shape(bytes, ranks)
        };
        for c in [
            Coll::Barrier,
            Coll::Bcast,
            Coll::Reduce,
            Coll::Allreduce,
            Coll::Allgather,
        ] {
            assert_eq!(select(c, spread(8, 4)), Algo::Hierarchical, "{c:?}");
            assert_ne!(select(c, shape(8, 4)), Algo::Hierarchical, "{c:?}");
        }
        // An allgather's whole result crosses each host's segment: up to a bound in all.
        assert_eq!(
            select(Coll::Allgather, spread(HIER_ALLGATHER_BYTES / 16, 16)),
            Algo::Hierarchical
        );
        assert_ne!(
            select(Coll::Allgather, spread(HIER_ALLGATHER_BYTES / 16 + 1, 16)),
            Algo::Hierarchical
        );
        assert_ne!(
            select(Coll::Allreduce, spread(SHM_BYTES + 1, 4)),
            Algo::Hierarchical
        );
        let noncomm = Shape {
            commutative: false,
            ..spread(8, 4)
        };
        assert_ne!(select(Coll::Allreduce, noncomm), Algo::Hierarchical);
        assert_ne!(select(Coll::Reduce, noncomm), Algo::Hierarchical);
    }

    /// A call on one host, whose ranks can (`cross`) or cannot read each other's memory.
    fn one_host(bytes: usize, ranks: usize, cross: bool) -> Shape {
        Shape {
            shared: true,
            cross,
            ..shape(bytes, ranks)
        }
    }

    #[test]
    fn a_long_allreduce_on_one_host_reads_the_others_memory_only_where_all_can() {
        assert_eq!(
            select(Coll::Allreduce, one_host(64 << 10, 8, true)),
            Algo::Direct
        );
        // The switch grows with the ranks (a system call per peer and phase).
        assert_ne!(
            select(Coll::Allreduce, one_host(64 << 10, 16, true)),
            Algo::Direct
        );
        assert_eq!(
            select(Coll::Allreduce, one_host(1 << 20, 16, true)),
            Algo::Direct
        );
        // Short: through the slots; without cross-memory reads, or with too many ranks for the
        // slots' synchronisation, or a non-commutative operation: by messages.
        assert_eq!(select(Coll::Allreduce, one_host(8, 8, true)), Algo::Shm);
        assert_eq!(
            select(Coll::Allreduce, one_host(1 << 20, 8, false)),
            Algo::Rabenseifner
        );
        assert_eq!(
            select(Coll::Allreduce, one_host(1 << 20, SHM_MAX_RANKS + 1, true)),
            Algo::Rabenseifner
        );
        let noncomm = Shape {
            commutative: false,
            ..one_host(1 << 20, 8, true)
        };
        assert_eq!(select(Coll::Allreduce, noncomm), Algo::RecursiveDoubling);
        // Across hosts it never applies, and it is an allreduce's only.
        let spread = Shape {
            shared: false,
            spread: true,
            ..one_host(1 << 20, 8, true)
        };
        assert!(!applies(Coll::Allreduce, Algo::Direct, spread));
        assert!(!applies(
            Coll::Reduce,
            Algo::Direct,
            one_host(1 << 20, 8, true)
        ));
        // Elements of no bytes (a zero-size datatype): nothing to slice, even when forced.
        let empty = Shape {
            count: 16,
            ..one_host(0, 8, true)
        };
        assert!(!applies(Coll::Allreduce, Algo::Direct, empty));
    }

    #[test]
    fn a_long_allgather_on_one_host_reads_the_blocks_and_a_broadcast_never_does() {
        assert_eq!(
            select(Coll::Allgather, one_host(ALLGATHER_DIRECT_BYTES, 16, true)),
            Algo::Direct
        );
        assert_ne!(
            select(Coll::Allgather, one_host(ALLGATHER_DIRECT_BYTES, 16, false)),
            Algo::Direct
        );
        assert_ne!(
            select(
                Coll::Allgather,
                one_host(ALLGATHER_DIRECT_BYTES - 1, 16, true)
            ),
            Algo::Direct
        );
        assert!(!applies(
            Coll::Bcast,
            Algo::Direct,
            one_host(1 << 20, 16, true)
        ));
    }

    #[test]
    fn reading_across_follows_where_this_machine_copies_once() {
        let at = |bytes: usize, ranks: usize, copy_from: usize| Shape {
            copy_from,
            ..one_host(bytes, ranks, true)
        };
        // The default window (single copy from 32 KiB): the measured floors decide, as before.
        let default = 32 << 10;
        assert_eq!(
            select(
                Coll::Allreduce,
                at(8 * ALLREDUCE_DIRECT_BYTES_PER_RANK, 8, default)
            ),
            Algo::Direct
        );
        assert_eq!(
            select(Coll::Allgather, at(ALLGATHER_DIRECT_BYTES, 8, default)),
            Algo::Direct
        );
        // Single copy never wins here: nor does reading across, at any size.
        for bytes in [64 << 10, 1 << 20, 64 << 20] {
            assert_eq!(
                select(Coll::Allreduce, at(bytes, 2, usize::MAX)),
                Algo::Rabenseifner
            );
            assert_ne!(
                select(Coll::Allgather, at(bytes, 2, usize::MAX)),
                Algo::Direct
            );
        }
        // Single copy from 128 KiB: reading across from reads of 32 KiB (an allreduce's
        // slice, an allgather's block), not below.
        let late = 128 << 10;
        assert_eq!(
            select(Coll::Allreduce, at(8 * (32 << 10), 8, late)),
            Algo::Direct
        );
        assert_eq!(
            select(Coll::Allreduce, at(8 * (32 << 10) - 8, 8, late)),
            Algo::Rabenseifner
        );
        assert_eq!(select(Coll::Allgather, at(32 << 10, 8, late)), Algo::Direct);
        assert_ne!(
            select(Coll::Allgather, at((32 << 10) - 1, 8, late)),
            Algo::Direct
        );
        // Forcing it (VOLLEY_COLL_ALLREDUCE=direct) still may: `applies` asks only whether
        // the ranks can.
        assert!(applies(
            Coll::Allreduce,
            Algo::Direct,
            at(1 << 20, 2, usize::MAX)
        ));
    }

    #[test]
    fn every_algorithm_has_a_distinct_name_and_belongs_somewhere() {
        let mut names: Vec<&str> = Coll::ALL
            .iter()
            .flat_map(|c| c.algos().iter().map(|a| a.name()))
            .collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), 15);
        assert!(!applies(Coll::Bcast, Algo::Pairwise, shape(8, 4)));
        assert!(!applies(
            Coll::Allgather,
            Algo::RecursiveDoubling,
            shape(8, 6)
        ));
    }
}
