//! volley-shm: the job's shared-memory segment and the lock-free rings inside it.
//!
//! Layer 1, above `volley-sys` (which maps the memory) and below `volley` (which gives the rings
//! meaning: ports, messages, endpoints). The control protocol that runs over the layout lives
//! here too (`control`): rank states, the doorbell handshake, how a message is laid over records,
//! the single-copy descriptor; what they mean to an application is `volley`'s business.
//!
//! The segment is a file format: `#[repr(C)]` structures at fixed offsets, a magic number, a
//! version and the job's random token, checked by [`Segment::attach`]. `docs/shm-layout.md`
//! draws it. Every atomic says what it pairs with.

mod coll;
mod control;
mod coop;
mod layout;
mod ring;

pub use coll::{
    coll_distance, CollCtrl, CollFlag, COLL_DATA, COLL_DEPTH, COLL_INLINE, COLL_SLOTS,
    COLL_SLOT_BYTES,
};
pub use control::{Cursor, Grant, Pushed, RankState};
pub use coop::{coop_chunk, coop_chunks, Claim, COOP_FROM};
pub use layout::{
    JobHeader, Layout, RankBlock, SegmentParams, CAP_HEAVY_ARM, CAP_SINGLE_COPY, CAP_SUMMARY,
    MAGIC, RANK_COUNTERS, RANK_EXITED, RANK_FINALIZED, RANK_KILLED, RANK_RUNNING, RANK_UNBORN,
    VERSION,
};
pub use ring::{
    Consumer, Corrupt, Head, Held, Kind, Meta, Producer, RecordInfo, RndvState, Rts, SharedHeld,
    GRANTS, RECORD_HEADER, RNDV_DESC, RTS_DESC, RTS_SINGLE_COPY, SLOT,
};

use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::Arc;
use volley_sys::Mapping;

/// Why a segment could not be created or attached. Each message says what to do.
#[derive(Debug, thiserror::Error)]
pub enum SegmentError {
    #[error(
        "shared memory unavailable: {where_} has {free} bytes free, the job needs {needed}; \
         free some space, set VOLLEY_SHM_DIR to a larger tmpfs, or lower VOLLEY_SHM_RING_BYTES"
    )]
    NoSpace {
        where_: String,
        free: u64,
        needed: u64,
    },
    #[error(
        "the job's shared memory would be {} ({nranks} ranks on this host: \
         {nranks} x {nranks} rings of {ring} bytes), more than {what} allows ({}); \
         run fewer ranks per host, or set VOLLEY_SHM_RING_BYTES lower (at least 4096)",
        human(*needed),
        human(*limit)
    )]
    TooBig {
        needed: u64,
        nranks: usize,
        ring: usize,
        limit: u64,
        what: String,
    },
    #[error("could not create the job's shared memory in {where_}: {source}")]
    Create {
        where_: String,
        #[source]
        source: std::io::Error,
    },
    #[error("could not map the job's shared memory ({len} bytes): {source}")]
    Map {
        len: usize,
        #[source]
        source: std::io::Error,
    },
    #[error(
        "descriptor {fd} is not a volley job segment ({why}); it was not created by `volley run` \
         for this job, or VOLLEY_SHM_FD is stale: start the program through `volley run`"
    )]
    Foreign { fd: i32, why: String },
    #[error(
        "the job segment on descriptor {fd} is corrupt ({why}); restart the job, and report a bug \
         if it happens again"
    )]
    Corrupt { fd: i32, why: String },
    #[error(
        "the job segment has layout version {found}, this program understands version {expected}: \
         launch it with the `volley` built from the same release"
    )]
    Version { found: u32, expected: u32 },
    #[error(
        "the job segment belongs to another job (token {found:016x}, expected {expected:016x}); \
         do not mix environments of two jobs"
    )]
    WrongJob { found: u64, expected: u64 },
}

/// What [`Segment::create_placed`] did about NUMA placement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// Ranges given a preferred node.
    pub ranges: usize,
    /// Bytes in them.
    pub bytes: usize,
    /// Why the kernel refused a policy (the remaining ranges were left to its default).
    pub refused: Option<String>,
}

/// The parts of a segment with a home node, merged where neighbours share one: `(offset,
/// length, node)`, page-aligned. The ring `src -> dst` belongs to its receiver `dst` (the
/// receiver polls it; the sender's writes cross once), rank `r`'s collective slots to `r` (it
/// writes them, and reads its own flags most). The header, the rank blocks and the summaries
/// are small and shared by everyone: they stay where the kernel puts them.
pub fn home_ranges(layout: &Layout, homes: &[Option<usize>]) -> Vec<(usize, usize, usize)> {
    let n = layout.nranks;
    let mut out: Vec<(usize, usize, usize)> = Vec::new();
    if homes.len() != n || homes.iter().all(Option::is_none) {
        return out;
    }
    let mut add = |off: usize, len: usize, node: Option<usize>| {
        let Some(node) = node else { return };
        match out.last_mut() {
            Some((o, l, m)) if *m == node && *o + *l == off => *l += len,
            _ => out.push((off, len, node)),
        }
    };
    let slots = COLL_SLOTS * COLL_SLOT_BYTES;
    // Each rank's slots start on a page of their own (coll_offset is page-aligned).
    const _: () = assert!((COLL_SLOTS * COLL_SLOT_BYTES).is_multiple_of(4096));
    for (r, &home) in homes.iter().enumerate() {
        add(layout.coll_offset + r * slots, slots, home);
    }
    for src in 0..n {
        for (dst, &home) in homes.iter().enumerate() {
            add(layout.ring_offset(src, dst), layout.ring_stride, home);
        }
    }
    out
}

/// A mapped job segment. Cheap to share (`Arc`); unmapped when the last holder is gone.
pub struct Segment {
    map: Mapping,
    layout: Layout,
    fd: OwnedFd,
    /// This process arms with a process-wide barrier (see `Segment::use_heavy_arm`): it is
    /// registered for membarrier, so its peers' heavy side reaches it too.
    heavy: std::sync::atomic::AtomicBool,
}

impl Segment {
    /// Creates and initialises a segment on `fd` (a fresh memfd or unlinked file).
    /// `where_` names the backing store for error messages.
    pub fn create(
        fd: OwnedFd,
        params: SegmentParams,
        where_: &str,
    ) -> Result<Arc<Segment>, SegmentError> {
        Ok(Segment::create_placed(fd, params, where_, &[])?.0)
    }

    /// As [`Segment::create`], with each rank's memory on its NUMA node: `homes[r]` is rank
    /// `r`'s node (None: not known, or its CPUs span nodes). The rings into rank `r` and its
    /// collective slots get a preferred-node policy before the segment's memory is reserved, so
    /// their pages are allocated there (see [`home_ranges`]). A policy the kernel refuses is no
    /// reason to fail the job: the segment is made without it, and the [`Placement`] says why.
    pub fn create_placed(
        fd: OwnedFd,
        params: SegmentParams,
        where_: &str,
        homes: &[Option<usize>],
    ) -> Result<(Arc<Segment>, Placement), SegmentError> {
        let layout = Layout::new(&params);
        let total = layout.total_bytes as u64;
        // Refused before a byte is taken: a segment larger than the memory the host or the
        // memory cgroup allows would get the job (or its neighbours) killed by the kernel.
        if let Some((limit, what)) = memory_limit() {
            if total > limit {
                return Err(SegmentError::TooBig {
                    needed: total,
                    nranks: params.nranks,
                    ring: params.ring_slots * SLOT,
                    limit,
                    what,
                });
            }
        }
        // Mapped before the memory is reserved: the policies must be in place when fallocate
        // allocates the pages. Nothing touches the mapping until then.
        let map = Mapping::map_shared(fd.as_raw_fd(), layout.total_bytes).map_err(|e| {
            SegmentError::Map {
                len: layout.total_bytes,
                source: e,
            }
        })?;
        let mut placement = Placement::default();
        for (off, len, node) in home_ranges(&layout, homes) {
            match volley_sys::numa::prefer_node(&map, off, len, node) {
                Ok(()) => {
                    placement.ranges += 1;
                    placement.bytes += len;
                }
                Err(e) => {
                    placement.refused = Some(format!("mbind of {len} bytes to node {node}: {e}"));
                    break;
                }
            }
        }
        if let Err(e) = volley_sys::fallocate(&fd, total) {
            if e.raw_os_error() == Some(libc_enospc()) || e.raw_os_error() == Some(libc_enomem()) {
                let free = space_of(where_).unwrap_or(0);
                return Err(SegmentError::NoSpace {
                    where_: where_.to_string(),
                    free,
                    needed: total,
                });
            }
            return Err(SegmentError::Create {
                where_: where_.to_string(),
                source: e,
            });
        }
        let seg = Segment {
            map,
            layout,
            fd,
            heavy: false.into(),
        };
        // SAFETY: the mapping is fresh, zero-filled, at least header-sized and page-aligned; no
        // other process has it yet, so this plain write cannot race.
        unsafe { layout::init_header(seg.map.as_ptr(), &params, &seg.layout) };
        Ok((Arc::new(seg), placement))
    }

    /// The NUMA policy in force for the ring `src -> dst` (its first byte): mode and nodes (see
    /// `volley_sys::numa::policy_at`).
    pub fn ring_policy(&self, src: usize, dst: usize) -> std::io::Result<(i32, Vec<usize>)> {
        volley_sys::numa::policy_at(&self.map, self.layout.ring_offset(src, dst))
    }

    /// The node that holds the first page of the ring `src -> dst` (read here first, so that
    /// this process maps it).
    pub fn ring_page_node(&self, src: usize, dst: usize) -> std::io::Result<usize> {
        let off = self.layout.ring_offset(src, dst);
        // SAFETY: inside the mapping; a volatile read of a byte of the ring's control block
        // only faults the page in.
        let _ = unsafe { std::ptr::read_volatile(self.map.as_ptr().add(off)) };
        volley_sys::numa::page_node(&self.map, off)
    }

    /// Maps an inherited segment and checks that it is a volley segment of this version, of this
    /// job (`token`), and whole.
    pub fn attach(fd: OwnedFd, token: u64) -> Result<Arc<Segment>, SegmentError> {
        let raw = fd.as_raw_fd();
        let size = volley_sys::file_size(raw).map_err(|e| SegmentError::Foreign {
            fd: raw,
            why: format!("cannot stat it: {e}"),
        })?;
        if size < std::mem::size_of::<JobHeader>() as u64 {
            return Err(SegmentError::Foreign {
                fd: raw,
                why: format!("it is {size} bytes, smaller than a segment header"),
            });
        }
        let map = Mapping::map_shared(raw, size as usize).map_err(|e| SegmentError::Foreign {
            fd: raw,
            why: format!("it cannot be mapped shared: {e}"),
        })?;
        // SAFETY: the mapping is at least header-sized and page-aligned (mmap), JobHeader is
        // repr(C) plain data plus atomics, and every bit pattern is a valid JobHeader.
        let hdr = unsafe { &*(map.as_ptr() as *const JobHeader) };
        let layout = layout::validate(hdr, size, raw)?;
        if hdr.token != token {
            return Err(SegmentError::WrongJob {
                found: hdr.token,
                expected: token,
            });
        }
        Ok(Arc::new(Segment {
            map,
            layout,
            fd,
            heavy: false.into(),
        }))
    }

    #[inline]
    pub fn header(&self) -> &JobHeader {
        // SAFETY: validated or initialised on construction; lives as long as the mapping.
        unsafe { &*(self.map.as_ptr() as *const JobHeader) }
    }

    pub fn nranks(&self) -> usize {
        self.layout.nranks
    }

    pub fn layout(&self) -> &Layout {
        &self.layout
    }

    /// The control block of `rank`. Panics if `rank` is out of range.
    #[inline]
    pub fn rank(&self, rank: usize) -> &RankBlock {
        assert!(rank < self.layout.nranks, "rank {rank} out of range");
        // SAFETY: the offset lies inside the mapping (checked by Layout), aligned to 128.
        unsafe { &*(self.map.as_ptr().add(self.layout.rank_offset(rank)) as *const RankBlock) }
    }

    /// Word `k` of the ready summary of receiver `rank` (see `control`).
    #[inline]
    pub(crate) fn summary_word(&self, rank: usize, k: usize) -> &std::sync::atomic::AtomicU64 {
        let off = self.layout.summary_word_offset(rank, k);
        // SAFETY: the offset lies inside the mapping (Layout), 8-aligned (128-byte rows of u64
        // words after 1024-byte rank blocks); AtomicU64 has no invalid bit patterns.
        unsafe { &*(self.map.as_ptr().add(off) as *const std::sync::atomic::AtomicU64) }
    }

    /// Words in each receiver's ready summary.
    pub fn summary_words(&self) -> usize {
        self.layout.nranks.div_ceil(64)
    }

    /// The producer end of the ring carrying messages from `src` to `dst`. Only the process of
    /// rank `src` may hold it, and only one at a time (single producer).
    pub fn producer(self: &Arc<Self>, src: usize, dst: usize) -> Producer {
        let off = self.layout.ring_offset(src, dst);
        // SAFETY: the ring lies inside the mapping; the caller is the single producer.
        unsafe { Producer::new(self.clone(), self.map.as_ptr().add(off), &self.layout) }
    }

    /// The consumer end of the ring carrying messages from `src` to `dst`. Only the process of
    /// rank `dst` may hold it, and only one at a time (single consumer).
    pub fn consumer(self: &Arc<Self>, src: usize, dst: usize) -> Consumer {
        let off = self.layout.ring_offset(src, dst);
        // SAFETY: as for producer.
        unsafe { Consumer::new(self.clone(), self.map.as_ptr().add(off), &self.layout) }
    }

    /// Where the single-copy descriptor written at `pos` in the ring from `src` to `dst` stands
    /// (see [`Producer::rndv_state`]); usable while the producer itself is elsewhere.
    pub fn rndv_state(&self, src: usize, dst: usize, pos: u64) -> RndvState {
        let off = self.layout.ring_offset(src, dst);
        // SAFETY: the ring lies inside the mapping; rndv_state only reads the tail and, while
        // the record is unreleased, its done flag.
        unsafe { ring::rndv_state_at(self.map.as_ptr().add(off), &self.layout, pos) }
    }

    /// The control block of the ring from `src` to `dst`.
    pub(crate) fn ring_ctrl(&self, src: usize, dst: usize) -> &ring::RingCtrl {
        let off = self.layout.ring_offset(src, dst);
        // SAFETY: the ring lies inside the mapping (checked by Layout), its control block first,
        // aligned to 4096; it lives as long as the mapping.
        unsafe { &*(self.map.as_ptr().add(off) as *const ring::RingCtrl) }
    }

    /// The descriptor behind the segment (inherited by the ranks a launcher starts).
    pub fn fd(&self) -> i32 {
        self.fd.as_raw_fd()
    }

    /// Bumps the state epoch after a rank's state changed, so waiters rescan the rank table.
    pub fn bump_epoch(&self) {
        // SYNC: Release; pairs with the Acquire in `state_epoch()` so the rank state written
        // before is visible to whoever sees the new epoch.
        self.header()
            .state_epoch
            .fetch_add(1, std::sync::atomic::Ordering::Release);
    }

    #[inline]
    pub fn state_epoch(&self) -> u64 {
        // SYNC: Acquire; pairs with the Release in `bump_epoch`.
        self.header()
            .state_epoch
            .load(std::sync::atomic::Ordering::Acquire)
    }
}

fn libc_enospc() -> i32 {
    28
}
fn libc_enomem() -> i32 {
    12
}

/// Bytes as a person reads them: "3.2 GiB".
fn human(b: u64) -> String {
    let units = ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"];
    let (mut v, mut u) = (b as f64, 0);
    while v >= 1024.0 && u + 1 < units.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} bytes")
    } else {
        format!("{v:.1} {}", units[u])
    }
}

/// The memory a new segment may take: the least of what the host has available (MemAvailable)
/// and what this process's memory cgroups (v2 `memory.max`, v1 `memory.limit_in_bytes`, the
/// process's own and each ancestor's) leave unused; with what it is, for the error message.
fn memory_limit() -> Option<(u64, String)> {
    let mut best: Option<(u64, String)> = None;
    let mut consider = |bytes: u64, what: String| {
        if best.as_ref().is_none_or(|(b, _)| bytes < *b) {
            best = Some((bytes, what));
        }
    };
    if let Some(kib) = std::fs::read_to_string("/proc/meminfo").ok().and_then(|m| {
        m.lines()
            .find_map(|l| l.strip_prefix("MemAvailable:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
    }) {
        consider(
            kib * 1024,
            "the memory available on this host (MemAvailable)".into(),
        );
    }
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap_or_default();
    for line in cgroups.lines() {
        let mut f = line.splitn(3, ':');
        let (_, controllers, path) = (f.next(), f.next().unwrap_or(""), f.next().unwrap_or(""));
        let (root, max_file, used_file) = if controllers.is_empty() {
            ("/sys/fs/cgroup", "memory.max", "memory.current")
        } else if controllers.split(',').any(|c| c == "memory") {
            (
                "/sys/fs/cgroup/memory",
                "memory.limit_in_bytes",
                "memory.usage_in_bytes",
            )
        } else {
            continue;
        };
        // The process's cgroup and each ancestor: every level's limit applies.
        let mut dir = std::path::PathBuf::from(root).join(path.trim_start_matches('/'));
        loop {
            let read = |f: &str| std::fs::read_to_string(dir.join(f)).ok();
            if let Some(max) = read(max_file).and_then(|v| v.trim().parse::<u64>().ok()) {
                let used = read(used_file)
                    .and_then(|v| v.trim().parse::<u64>().ok())
                    .unwrap_or(0);
                consider(
                    max.saturating_sub(used),
                    format!(
                        "the memory cgroup {} ({max_file} {max}, {used} in use)",
                        dir.display()
                    ),
                );
            }
            if dir.as_os_str().len() <= root.len() || !dir.pop() {
                break;
            }
        }
    }
    best
}

fn space_of(where_: &str) -> Option<u64> {
    let p = std::path::Path::new(where_);
    if p.is_dir() {
        volley_sys::fs_space(p).ok().map(|(free, _)| free)
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn home_ranges_give_each_ring_its_receivers_node_and_each_rank_its_slots() {
        let layout = Layout::new(&SegmentParams::new(3, 8192, 1024, 1));
        let homes = [Some(0), Some(1), None];
        let ranges = home_ranges(&layout, &homes);
        // The node every byte of each ring and slot area was given.
        let node_at = |off: usize| {
            ranges
                .iter()
                .find(|(o, l, _)| (*o..o + l).contains(&off))
                .map(|r| r.2)
        };
        for src in 0..3 {
            for (dst, home) in homes.iter().enumerate() {
                let off = layout.ring_offset(src, dst);
                for at in [off, off + layout.ring_stride - 1] {
                    assert_eq!(node_at(at), *home, "ring {src}->{dst} at {at}");
                }
            }
        }
        let slots = COLL_SLOTS * COLL_SLOT_BYTES;
        for (r, home) in homes.iter().enumerate() {
            assert_eq!(
                node_at(layout.coll_offset + r * slots),
                *home,
                "slots of {r}"
            );
        }
        assert_eq!(node_at(0), None, "the header stays unplaced");
        assert_eq!(node_at(layout.summary_offset), None);
        // Neighbours with one node merge (slots 0 and 1 differ; rings src->0 and src->1 too),
        // and every range is page-aligned.
        assert_eq!(ranges.len(), 2 + 3 * 2);
        assert!(ranges
            .iter()
            .all(|(o, l, _)| o % 4096 == 0 && l % 4096 == 0));
        // Same node everywhere: the rings are one range after the slots.
        assert_eq!(home_ranges(&layout, &[Some(2); 3]).len(), 1);
        assert!(home_ranges(&layout, &[None; 3]).is_empty());
        assert!(
            home_ranges(&layout, &[Some(0)]).is_empty(),
            "wrong length: nothing"
        );
    }

    #[test]
    fn a_placed_segment_has_its_rings_on_their_receivers_node() {
        let node = volley_sys::numa::nodes_online()[0];
        let fd = volley_sys::memfd_create("volley-test").unwrap();
        let (seg, placement) = Segment::create_placed(
            fd,
            SegmentParams::new(2, 8192, 1024, 7),
            "memfd",
            &[Some(node), None],
        )
        .unwrap();
        assert_eq!(placement.refused, None);
        assert_eq!(
            placement.ranges,
            1 + 2,
            "rank 0's slots, then ring 0->0, then 1->0"
        );
        for src in 0..2 {
            assert_eq!(seg.ring_policy(src, 0).unwrap(), (1, vec![node]));
            assert_eq!(seg.ring_page_node(src, 0).unwrap(), node);
            assert_eq!(seg.ring_policy(src, 1).unwrap().0, 0, "rank 1 has no home");
        }
    }
}
