//! One-sided communication (MPI-3.1 chapter 11): windows, MPI_Put, MPI_Get, the accumulate
//! functions and every synchronisation (fence, post-start-complete-wait, passive-target locks).
//!
//! A window's ranks share one machine: every operation is done by the origin alone, at the call,
//! so nothing waits for the target to enter MPI (the progress MPICH and Open MPI need an
//! agent or the target's calls for). Each window has a control block in shared memory (a
//! memfd that window rank 0 makes and the others take with pidfd_getfd): per rank a
//! reader-writer lock word (MPI_Win_lock) and an accumulate lock (accumulate operations on one
//! target are atomic with respect to each other, MPI-3.1 11.7.1). The memory of MPI_Win_allocate
//! and MPI_Win_allocate_shared lives in the same memfd, so puts and gets on it are plain copies
//! (and MPI_Win_shared_query hands out the addresses); the memory of MPI_Win_create and
//! MPI_Win_create_dynamic is the program's, reached by cross-memory attach (process_vm_writev
//! and readv, the same right volley's single-copy mode uses). A window whose ranks are on
//! several machines is refused with a clear error at creation: the network path is not built.
//!
//! Since every operation has completed when its call returns, MPI_Win_flush and its kin order
//! memory and nothing more; MPI_Win_fence is a barrier; post and complete send a message that
//! start and wait receive (on the window's own communicator, a duplicate of the program's).

use crate::abi::{self, class, Aint, H};
use crate::dtype::{committed, Dtype, TypeRef};
use crate::err::{c_str, fail, get, put, put_str, rc_ok as ok, R};
use crate::state::{handle, index, rt, KeyvalKind, KIND_WIN};
use std::ffi::c_void;
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::raw::{c_char, c_int};
use std::sync::atomic::{fence, AtomicU32, Ordering};
use volley_sys::Mapping;

/// The predefined handles used here (mpi.h's values).
const BYTE: H = 0x247;
const INT: H = 0x209;
const WIN_NULL: H = 0x110;

const ERR_ASSERT: c_int = 22;
const ERR_DISP: c_int = 26;
const ERR_LOCKTYPE: c_int = 37;
const ERR_RMA_RANGE: c_int = 49;
const ERR_RMA_SYNC: c_int = 51;
const ERR_RMA_FLAVOR: c_int = 52;
const ERR_SIZE: c_int = 55;
const ERR_WIN: c_int = 60;

pub const LOCK_SHARED: c_int = 21;
pub const LOCK_EXCLUSIVE: c_int = 22;
const MODEL_UNIFIED: c_int = 31;
const FLAVOR_ALLOCATE: c_int = 41;
const FLAVOR_CREATE: c_int = 42;
const FLAVOR_DYNAMIC: c_int = 43;
const FLAVOR_SHARED: c_int = 44;
const MODE_NOCHECK: c_int = 1024;
const MODE_NOSUCCEED: c_int = 16384;
const MODES: c_int = 1024 | 2048 | 4096 | 8192 | 16384;

pub const ATTR_BASE: c_int = 20001;
pub const ATTR_DISP_UNIT: c_int = 20002;
pub const ATTR_SIZE: c_int = 20003;
pub const ATTR_FLAVOR: c_int = 20004;
pub const ATTR_MODEL: c_int = 20005;

/// Tags of the post-start-complete-wait messages on the window's communicator.
const TAG_POST: c_int = 1;
const TAG_COMPLETE: c_int = 2;

/// Bytes of the control block per rank: its lock word and its accumulate lock, each on a line
/// of its own.
const CTL_PER_RANK: usize = 128;
/// The writer bit of a lock word (the rest counts readers).
const WRITER: u32 = 1 << 31;

/// What each rank tells the others when a window is made.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Rec {
    pid: u64,
    base: u64,
    size: u64,
    disp_unit: i64,
    /// The machine: boot id and PID namespace (ranks that agree reach each other's memory).
    machine: u64,
}

/// Another rank of the window, as this one reaches it.
struct Peer {
    pid: u32,
    /// Its memory in its own address space (MPI_Win_create), 0 for a dynamic window.
    base: u64,
    size: u64,
    disp_unit: i64,
    /// Where its memory is in the shared mapping (MPI_Win_allocate and _shared).
    shared_off: Option<usize>,
}

/// A window.
pub struct Win {
    /// The window's own communicator (a duplicate of the program's; errors return).
    comm: H,
    rank: usize,
    peers: Vec<Peer>,
    flavor: c_int,
    /// The control block, then the memory of the allocating flavors.
    ctl: Mapping,
    /// The predefined attributes' values (the attribute is a pointer to them).
    base: usize,
    size: Aint,
    disp_unit: c_int,
    model: c_int,
    name: String,
    errhandler: H,
    attrs: Vec<(c_int, usize)>,
    info: Vec<(String, String)>,
    /// A dynamic window's attached memory here (address, length).
    attached: Vec<(usize, usize)>,
    /// Per target: the lock this rank holds (0, LOCK_SHARED or LOCK_EXCLUSIVE); and whether
    /// by MPI_Win_lock_all.
    locks: Vec<c_int>,
    lock_all: bool,
    /// The fence epoch: none, a fence called (an epoch may begin), or RMA calls made since.
    fence: Fence,
    /// Targets of the access epoch MPI_Win_start opened; origins of the exposure epoch
    /// MPI_Win_post opened and whether each has completed.
    access: Option<Vec<usize>>,
    exposure: Option<Vec<(usize, bool)>>,
    /// Packed data, reused by every operation.
    a: Vec<u8>,
    b: Vec<u8>,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Fence {
    None,
    Issued,
    Active,
}

/// The window `h` names.
fn with<T>(h: H, f: impl FnOnce(&mut Win) -> R<T>) -> R<T> {
    let mut rt = rt()?;
    let w = index(KIND_WIN, h)
        .and_then(|i| rt.wins.get_mut(i))
        .and_then(|w| w.as_mut())
        .ok_or_else(|| {
            fail(
                ERR_WIN,
                format!("{h:#x} is not a window (freed, or never made)"),
            )
        })?;
    f(w)
}

/// The error handler of window `h` (MPI_ERRORS_ARE_FATAL when it is not one). A window whose
/// handler the program never set defers to MPI_COMM_WORLD's at the time of the error, as MPICH
/// does (a program that sets MPI_ERRORS_RETURN on the world gets its window errors back too).
pub fn errhandler(rt: &crate::state::Rt, h: H) -> H {
    match index(KIND_WIN, h)
        .and_then(|i| rt.wins.get(i))
        .and_then(|w| w.as_ref())
        .map(|w| w.errhandler)
    {
        Some(abi::ERRHANDLER_NULL) => rt
            .comm_slot(abi::COMM_WORLD)
            .map(|s| s.errhandler)
            .unwrap_or(abi::ERRORS_ARE_FATAL),
        Some(e) => e,
        None => abi::ERRORS_ARE_FATAL,
    }
}

/// A key naming this machine's kernel and PID namespace: ranks with equal keys can open each
/// other's descriptors and memory.
pub(crate) fn machine_key() -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    std::fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .unwrap_or_default()
        .hash(&mut h);
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_default()
        .hash(&mut h);
    h.finish()
}

fn round_up(x: usize, to: usize) -> usize {
    x.div_ceil(to) * to
}

/// Makes a window of `flavor` over `comm`: `base`/`size` are this rank's memory for
/// MPI_Win_create; the allocating flavors get theirs (its address is returned).
fn make(
    flavor: c_int,
    base: usize,
    size: Aint,
    disp_unit: c_int,
    info: H,
    comm: H,
) -> R<(H, usize)> {
    if size < 0 {
        return Err(fail(ERR_SIZE, format!("window size {size} is negative")));
    }
    if disp_unit <= 0 {
        return Err(fail(
            ERR_DISP,
            format!("displacement unit {disp_unit}: it must be positive"),
        ));
    }
    {
        let rt = rt()?;
        if rt.comm(comm)?.is_inter() {
            return Err(fail(
                class::COMM,
                "a window is made over an intracommunicator",
            ));
        }
    }
    if flavor == FLAVOR_CREATE && size > 0 && base == 0 {
        return Err(fail(
            class::ARG,
            "MPI_Win_create with a null base and a positive size",
        ));
    }
    let mut wc: H = 0;
    // SAFETY: internal calls with valid arguments (wc is written).
    ok(
        unsafe { crate::comm::PMPI_Comm_dup(comm, &mut wc) },
        "duplicating the communicator",
    )?;
    rt()?.comm_slot_mut(wc)?.errhandler = abi::ERRORS_RETURN;
    let made = make_on(flavor, base, size, disp_unit, info, wc);
    if made.is_err() {
        // SAFETY: the duplicate made above.
        unsafe { crate::comm::PMPI_Comm_free(&mut wc) };
    }
    made
}

fn make_on(
    flavor: c_int,
    base: usize,
    size: Aint,
    disp_unit: c_int,
    info: H,
    wc: H,
) -> R<(H, usize)> {
    let (me, n) = {
        let rt = rt()?;
        let c = rt.comm(wc)?;
        (c.rank, c.size())
    };
    let mine = Rec {
        pid: std::process::id() as u64,
        base: base as u64,
        size: size as u64,
        disp_unit: disp_unit as i64,
        machine: machine_key(),
    };
    let mut all = vec![Rec::default(); n];
    let rec = std::mem::size_of::<Rec>() as c_int;
    // SAFETY: mine is one record, all holds n of them (bytes).
    ok(
        unsafe {
            crate::coll::PMPI_Allgather(
                &mine as *const Rec as *const c_void,
                rec,
                BYTE,
                all.as_mut_ptr() as *mut c_void,
                rec,
                BYTE,
                wc,
            )
        },
        "exchanging the window's records",
    )?;
    if all.iter().any(|r| r.machine != mine.machine) {
        return Err(fail(
            class::UNSUPPORTED_OPERATION,
            "one-sided communication in volley's MPI needs the window's ranks on one machine (the network path is not built): make the window over the ranks of one host, e.g. a communicator from MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)",
        ));
    }
    // The control block, then the allocating flavors' memory: aligned to 64 bytes each, but
    // contiguous for MPI_Win_allocate_shared (MPI-3.1 11.2.3's default).
    let ctl_len = round_up(CTL_PER_RANK * n, 4096);
    let mut offs = Vec::with_capacity(n);
    let mut at = ctl_len;
    for r in &all {
        let allocating = flavor == FLAVOR_ALLOCATE || flavor == FLAVOR_SHARED;
        offs.push(allocating.then_some(at));
        if allocating {
            at += if flavor == FLAVOR_SHARED {
                r.size as usize
            } else {
                round_up(r.size as usize, 64)
            };
        }
    }
    let total = round_up(at.max(ctl_len), 4096);
    // Window rank 0 makes the memory; the others take its descriptor.
    let mut made: Option<OwnedFd> = None;
    let mut first = [0u64; 2];
    let mut failure = String::new();
    if me == 0 {
        match volley_sys::memfd_create("volley-win").and_then(|fd| {
            let f = std::fs::File::from(fd);
            f.set_len(total as u64)?;
            Ok(OwnedFd::from(f))
        }) {
            Ok(fd) => {
                first = [std::process::id() as u64, fd.as_raw_fd() as u64];
                made = Some(fd);
            }
            Err(e) => failure = format!("making the window's shared memory ({total} bytes): {e}"),
        }
    }
    // SAFETY: 16 bytes from rank 0.
    ok(
        unsafe { crate::coll::PMPI_Bcast(first.as_mut_ptr() as *mut c_void, 16, BYTE, 0, wc) },
        "sharing the window's memory",
    )?;
    let _ = volley_sys::allow_any_ptracer();
    // Rank 0 keeps its descriptor open until every rank has taken its own (the agreement
    // below).
    let fd: Result<OwnedFd, String> = if first[0] == 0 {
        Err(if failure.is_empty() {
            "window rank 0 could not make the shared memory".to_string()
        } else {
            failure
        })
    } else {
        match made.take() {
            Some(fd) => Ok(fd),
            None => volley_sys::fd_of_process(first[0] as u32, first[1] as i32).map_err(|e| {
                format!("taking window rank 0's shared memory (pidfd_getfd, the right process_vm_readv needs: see `volley info`): {e}")
            }),
        }
    };
    let mapped = fd.as_ref().map_err(|e| e.clone()).and_then(|fd| {
        Mapping::map_shared(fd.as_raw_fd(), total)
            .map_err(|e| format!("mapping the window's memory ({total} bytes): {e}"))
    });
    // Everyone has the memory, or everyone fails.
    let good: c_int = mapped.is_ok() as c_int;
    let mut all_good: c_int = 0;
    // SAFETY: one int each way.
    ok(
        unsafe {
            crate::coll::PMPI_Allreduce(
                &good as *const c_int as *const c_void,
                &mut all_good as *mut c_int as *mut c_void,
                1,
                INT,
                abi::MIN,
                wc,
            )
        },
        "agreeing on the window's memory",
    )?;
    drop(fd);
    let ctl = match (mapped, all_good) {
        (Ok(m), 1) => m,
        (Err(e), _) => return Err(fail(class::NO_MEM, e)),
        (Ok(_), _) => {
            return Err(fail(
                class::NO_MEM,
                "another rank of the window could not map its shared memory",
            ))
        }
    };
    let peers: Vec<Peer> = all
        .iter()
        .zip(&offs)
        .map(|(r, &o)| Peer {
            pid: r.pid as u32,
            base: r.base,
            size: r.size,
            disp_unit: r.disp_unit,
            shared_off: o,
        })
        .collect();
    let my_base = match offs[me] {
        // SAFETY: the offset lies within the mapping (the layout above).
        Some(o) => unsafe { ctl.as_ptr().add(o) as usize },
        None => base,
    };
    let mut w = Win {
        comm: wc,
        rank: me,
        peers,
        flavor,
        ctl,
        base: my_base,
        size,
        disp_unit,
        model: MODEL_UNIFIED,
        name: String::new(),
        errhandler: abi::ERRHANDLER_NULL,
        attrs: Vec::new(),
        info: Vec::new(),
        attached: Vec::new(),
        locks: vec![0; n],
        lock_all: false,
        fence: Fence::None,
        access: None,
        exposure: None,
        a: Vec::new(),
        b: Vec::new(),
    };
    w.info = HINTS
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    set_hints(&mut w.info, info_pairs(info)?);
    let mut rt = rt()?;
    let i = crate::state::vacant(&mut rt.wins, Box::new(w));
    Ok((handle(KIND_WIN, i), my_base))
}

/// The hints a window knows (MPI-3.1 11.2.1, MPI-4.0 12.2.7) and their defaults: MPI_Win_get_info
/// reports these, with the values the program set; other keys are ignored, as MPI allows. volley
/// works the same whatever they say (every operation completes at its call, the shared flavor's
/// memory is contiguous either way).
const HINTS: [(&str, &str); 6] = [
    ("no_locks", "false"),
    ("accumulate_ordering", "rar,raw,war,waw"),
    ("accumulate_ops", "same_op_no_op"),
    ("same_size", "false"),
    ("same_disp_unit", "false"),
    ("alloc_shared_noncontig", "false"),
];

/// The key-value pairs of info object `h` that are window hints.
fn info_pairs(h: H) -> R<Vec<(String, String)>> {
    if h == abi::INFO_NULL {
        return Ok(Vec::new());
    }
    Ok(crate::info::pairs(h)?
        .into_iter()
        .filter(|(k, _)| HINTS.iter().any(|d| d.0 == k))
        .collect())
}

/// Sets the hints `pairs` among `info`.
fn set_hints(info: &mut [(String, String)], pairs: Vec<(String, String)>) {
    for (k, v) in pairs {
        if let Some(e) = info.iter_mut().find(|e| e.0 == k) {
            e.1 = v;
        }
    }
}

impl Win {
    fn word(&self, r: usize, which: usize) -> &AtomicU32 {
        // SAFETY: the control block holds CTL_PER_RANK bytes per rank, 64-byte aligned words
        // inside the mapping, which lives as long as the window; other processes touch them
        // only atomically.
        unsafe { &*(self.ctl.as_ptr().add(CTL_PER_RANK * r + 64 * which) as *const AtomicU32) }
    }

    fn target(&self, r: c_int) -> R<Option<usize>> {
        if r == abi::PROC_NULL {
            return Ok(None);
        }
        if r < 0 || r as usize >= self.peers.len() {
            return Err(fail(
                class::RANK,
                format!("target rank {r} of a window of {} ranks", self.peers.len()),
            ));
        }
        Ok(Some(r as usize))
    }

    /// Target `r` of an RMA operation: a rank of the window in an access epoch of this rank
    /// (MPI-3.1 11.5: a fence epoch, MPI_Win_start's group, or a lock), else MPI_ERR_RMA_SYNC.
    fn access(&mut self, r: c_int) -> R<Option<usize>> {
        let Some(t) = self.target(r)? else {
            return Ok(None);
        };
        if self.fence != Fence::None {
            self.fence = Fence::Active;
            return Ok(Some(t));
        }
        if self.locks[t] != 0 || self.access.as_ref().is_some_and(|a| a.contains(&t)) {
            return Ok(Some(t));
        }
        Err(fail(
            ERR_RMA_SYNC,
            format!("an RMA operation on target {t} outside an access epoch to it (open one with MPI_Win_fence, MPI_Win_start or MPI_Win_lock)"),
        ))
    }

    /// The byte offset in target `r`'s memory of displacement `disp`, checked for `count`
    /// elements of `t` there.
    fn offset(&self, r: usize, disp: Aint, t: &Dtype, count: usize) -> R<isize> {
        let p = &self.peers[r];
        if self.flavor == FLAVOR_DYNAMIC {
            // An address in the target's memory: the kernel checks it (EFAULT).
            return Ok(disp);
        }
        let off = disp
            .checked_mul(p.disp_unit as isize)
            .ok_or_else(|| fail(ERR_DISP, "the displacement overflows"))?;
        if count == 0 || t.size == 0 {
            return Ok(off);
        }
        let lo = off + t.true_lb;
        let hi = off + (count as isize - 1) * t.extent() + t.true_ub;
        if disp < 0 || lo < 0 || hi as u64 > p.size {
            return Err(fail(
                ERR_RMA_RANGE,
                format!(
                    "bytes {lo} to {hi} of target {r}'s window memory of {} bytes",
                    p.size
                ),
            ));
        }
        Ok(off)
    }

    /// Where target `r`'s byte `off` is mapped here, if it is.
    fn local(&self, r: usize, off: isize) -> Option<*mut u8> {
        if let Some(o) = self.peers[r].shared_off {
            return Some(self.ctl.as_ptr().wrapping_add(o).wrapping_offset(off));
        }
        if r == self.rank {
            return Some((self.peers[r].base as usize).wrapping_add_signed(off) as *mut u8);
        }
        None
    }

    /// A dynamic window's own memory: `off` (an address) must lie in attached memory.
    fn check_attached(&self, r: usize, off: isize, t: &Dtype, count: usize) -> R {
        if self.flavor != FLAVOR_DYNAMIC || r != self.rank || count == 0 {
            return Ok(());
        }
        let lo = off + t.true_lb;
        let hi = off + (count as isize - 1) * t.extent() + t.true_ub;
        if self
            .attached
            .iter()
            .any(|&(a, l)| lo >= a as isize && hi <= (a + l) as isize)
        {
            Ok(())
        } else {
            Err(fail(ERR_RMA_RANGE, format!("address {lo:#x} to {hi:#x} is not in memory attached to the dynamic window (MPI_Win_attach)")))
        }
    }

    /// Writes packed `data` (count elements of `t`) into target `r` at byte `off`.
    fn write(&self, r: usize, off: isize, t: &Dtype, count: usize, data: &[u8]) -> R {
        self.check_attached(r, off, t, count)?;
        if let Some(p) = self.local(r, off) {
            // SAFETY: the target range was checked against the target's memory (offset) or
            // its attached memory; it is mapped here.
            unsafe { t.unpack(data, p, count) };
            return Ok(());
        }
        let p = &self.peers[r];
        let base = (p.base as i64 + off as i64) as u64;
        self.remote(p.pid, base, t, count, |pid, at, k, len| {
            volley_sys::process_vm_write(pid, &data[k..k + len], at)
        })
    }

    /// Reads count elements of `t` at byte `off` of target `r` into `out`, packed.
    fn read(&self, r: usize, off: isize, t: &Dtype, count: usize, out: &mut Vec<u8>) -> R {
        out.clear();
        out.resize(count * t.size, 0);
        self.read_into(r, off, t, count, out)
    }

    /// `read` into `out`, which holds count * t.size bytes.
    fn read_into(&self, r: usize, off: isize, t: &Dtype, count: usize, out: &mut [u8]) -> R {
        self.check_attached(r, off, t, count)?;
        if let Some(p) = self.local(r, off) {
            // SAFETY: as in `write`.
            unsafe { t.pack(p, count, out) };
            return Ok(());
        }
        let p = &self.peers[r];
        let base = (p.base as i64 + off as i64) as u64;
        let cell = std::cell::RefCell::new(out);
        self.remote(p.pid, base, t, count, |pid, at, k, len| {
            volley_sys::process_vm_read(pid, &mut cell.borrow_mut()[k..k + len], at)
        })
    }

    /// Calls `f(pid, remote address, packed offset, length)` for each run of bytes of count
    /// elements of `t` at `base` in process `pid`.
    fn remote(
        &self,
        pid: u32,
        base: u64,
        t: &Dtype,
        count: usize,
        mut f: impl FnMut(u32, u64, usize, usize) -> std::io::Result<()>,
    ) -> R {
        let mut k = 0;
        let mut run = |at: u64, len: usize| -> R {
            if len > 0 {
                f(pid, at, k, len).map_err(|e| {
                    fail(ERR_RMA_RANGE, format!("reaching {len} bytes at {at:#x} in the target's memory (process {pid}): {e}"))
                })?;
            }
            k += len;
            Ok(())
        };
        if t.contig {
            return run(base, count * t.size);
        }
        for e in 0..count {
            for &(o, l) in &t.blocks {
                run(
                    (base as i64 + e as i64 * t.extent() as i64 + o as i64) as u64,
                    l,
                )?;
            }
        }
        Ok(())
    }

    /// Holds target `r`'s accumulate lock while `f` runs.
    fn atomically<T>(&mut self, r: usize, f: impl FnOnce(&mut Win) -> R<T>) -> R<T> {
        spin(|| {
            self.word(r, 1)
                .compare_exchange(0, 1, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        });
        let out = f(self);
        self.word(r, 1).store(0, Ordering::Release);
        out
    }
}

/// Spins until `f` says yes (a short wait: an accumulate lock), giving the CPU away every 64
/// tries.
fn spin(mut f: impl FnMut() -> bool) {
    let mut n = 0u32;
    while !f() {
        n = n.wrapping_add(1);
        if n.is_multiple_of(64) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// The datatype `h` (committed) and `count` as a size.
fn typed(h: H, count: c_int) -> R<(TypeRef, usize)> {
    if count < 0 {
        return Err(fail(class::COUNT, format!("count {count} is negative")));
    }
    let rt = rt()?;
    Ok((committed(&rt, h)?, count as usize))
}

/// The origin's data, packed into the window's first scratch vector.
fn pack_origin(w: &mut Win, addr: *const c_void, t: &Dtype, count: usize) {
    w.a.clear();
    w.a.resize(count * t.size, 0);
    // SAFETY: MPI: the origin buffer holds count elements of its datatype.
    unsafe { t.pack(addr as *const u8, count, &mut w.a) };
}

fn same_size(o: usize, t: usize, what: &str) -> R {
    if o != t {
        return Err(fail(
            class::TYPE,
            format!("{what}: the origin's data is {o} bytes and the target's {t}: the type signatures must match"),
        ));
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn put_op(
    addr: *const c_void,
    ocount: c_int,
    otype: H,
    target: c_int,
    disp: Aint,
    tcount: c_int,
    ttype: H,
    win: H,
) -> R {
    let (ot, on) = typed(otype, ocount)?;
    let (tt, tn) = typed(ttype, tcount)?;
    with(win, |w| {
        let Some(r) = w.access(target)? else {
            return Ok(());
        };
        same_size(on * ot.size, tn * tt.size, "MPI_Put")?;
        let off = w.offset(r, disp, &tt, tn)?;
        if ot.contig {
            // The origin's bytes in a row are its packed form: no copy before the target's.
            let len = on * ot.size;
            // SAFETY: MPI: the origin buffer holds on elements, len bytes in a row.
            let src = unsafe { std::slice::from_raw_parts(addr as *const u8, len) };
            return w.write(r, off, &tt, tn, src);
        }
        pack_origin(w, addr, &ot, on);
        let a = std::mem::take(&mut w.a);
        let res = w.write(r, off, &tt, tn, &a);
        w.a = a;
        res
    })
}

#[allow(clippy::too_many_arguments)]
fn get_op(
    addr: *mut c_void,
    ocount: c_int,
    otype: H,
    target: c_int,
    disp: Aint,
    tcount: c_int,
    ttype: H,
    win: H,
) -> R {
    let (ot, on) = typed(otype, ocount)?;
    let (tt, tn) = typed(ttype, tcount)?;
    with(win, |w| {
        let Some(r) = w.access(target)? else {
            return Ok(());
        };
        same_size(on * ot.size, tn * tt.size, "MPI_Get")?;
        let off = w.offset(r, disp, &tt, tn)?;
        if ot.contig {
            let len = on * ot.size;
            // SAFETY: MPI: the origin buffer holds on elements, len bytes in a row, and is the
            // program's to write until the operation completes (at this call).
            let dst = unsafe { std::slice::from_raw_parts_mut(addr as *mut u8, len) };
            return w.read_into(r, off, &tt, tn, dst);
        }
        let mut b = std::mem::take(&mut w.b);
        let res = w.read(r, off, &tt, tn, &mut b);
        if res.is_ok() {
            // SAFETY: MPI: the origin buffer holds ocount elements of its datatype.
            unsafe { ot.unpack(&b, addr as *mut u8, on) };
        }
        w.b = b;
        res
    })
}

/// MPI_Accumulate and MPI_Get_accumulate (`result`: where the target's data before goes).
#[allow(clippy::too_many_arguments)]
fn accumulate(
    addr: *const c_void,
    ocount: c_int,
    otype: H,
    result: Option<(*mut c_void, c_int, H)>,
    target: c_int,
    disp: Aint,
    tcount: c_int,
    ttype: H,
    op: H,
    win: H,
) -> R {
    let (tt, tn) = typed(ttype, tcount)?;
    let (ot, on) = if op == abi::NO_OP && result.is_some() {
        // MPI_Get_accumulate with MPI_NO_OP ignores the origin.
        (tt.clone(), 0)
    } else {
        typed(otype, ocount)?
    };
    let res = match result {
        Some((p, c, h)) => {
            let (rt_, rn) = typed(h, c)?;
            Some((p, rt_, rn))
        }
        None => None,
    };
    if tn == 0 || tt.size == 0 {
        // No element to combine (the operation's table is not consulted, as for a reduction
        // of none): only the target must be a rank of the window.
        return with(win, |w| w.access(target).map(|_| ()));
    }
    // A predefined operation, MPI_REPLACE or MPI_NO_OP (MPI-3.1 11.3.4), defined on the
    // target's basic type.
    let aop = match crate::coll::op_for(op, &tt, ttype, tn)? {
        o @ crate::coll::Op::Predefined(_) => o,
        crate::coll::Op::User(_) => {
            return Err(fail(
                class::OP,
                "an accumulate takes a predefined operation, MPI_REPLACE or MPI_NO_OP, not one made by MPI_Op_create (MPI-3.1 11.3.4)",
            ))
        }
    };
    with(win, |w| {
        let Some(r) = w.access(target)? else {
            return Ok(());
        };
        if op != abi::NO_OP {
            same_size(on * ot.size, tn * tt.size, "an accumulate")?;
        }
        if let Some((_, rt_, rn)) = &res {
            same_size(rn * rt_.size, tn * tt.size, "MPI_Get_accumulate's result")?;
        }
        let off = w.offset(r, disp, &tt, tn)?;
        pack_origin(w, addr, &ot, on);
        w.atomically(r, |w| {
            let a = std::mem::take(&mut w.a);
            let mut b = std::mem::take(&mut w.b);
            let out = (|| {
                let need_old = res.is_some() || (op != abi::REPLACE && op != abi::NO_OP);
                if need_old {
                    w.read(r, off, &tt, tn, &mut b)?;
                }
                if let Some((p, rt_, rn)) = &res {
                    // SAFETY: MPI: the result buffer holds rn elements of its datatype.
                    unsafe { rt_.unpack(&b, *p as *mut u8, *rn) };
                }
                match op {
                    abi::NO_OP => Ok(()),
                    abi::REPLACE if !need_old => w.write(r, off, &tt, tn, &a),
                    _ => {
                        crate::coll::apply(aop, &tt, ttype, tn, &a, &mut b)?;
                        w.write(r, off, &tt, tn, &b)
                    }
                }
            })();
            w.a = a;
            w.b = b;
            out
        })
    })
}

fn compare_and_swap(
    origin: *const c_void,
    compare: *const c_void,
    result: *mut c_void,
    dtype: H,
    target: c_int,
    disp: Aint,
    win: H,
) -> R {
    let (t, _) = typed(dtype, 1)?;
    use crate::dtype::Basic::*;
    if dtype >= abi::DATATYPE_END
        || !matches!(
            t.basic,
            Some(I8 | I16 | I32 | I64 | U8 | U16 | U32 | U64 | Byte | Bool)
        )
    {
        return Err(fail(
            class::TYPE,
            "MPI_Compare_and_swap takes a predefined integer, logical or byte datatype (MPI-3.1 11.3.4)",
        ));
    }
    with(win, |w| {
        let Some(r) = w.access(target)? else {
            return Ok(());
        };
        let off = w.offset(r, disp, &t, 1)?;
        let n = t.size;
        w.atomically(r, |w| {
            let mut b = std::mem::take(&mut w.b);
            let out = (|| {
                w.read(r, off, &t, 1, &mut b)?;
                // SAFETY: MPI: origin, compare and result each hold one element of n bytes.
                let (o, c) = unsafe {
                    std::ptr::copy_nonoverlapping(b.as_ptr(), result as *mut u8, n);
                    (
                        std::slice::from_raw_parts(origin as *const u8, n),
                        std::slice::from_raw_parts(compare as *const u8, n),
                    )
                };
                if b[..] == *c {
                    let o = o.to_vec();
                    w.write(r, off, &t, 1, &o)?;
                }
                Ok(())
            })();
            w.b = b;
            out
        })
    })
}

/// Job ranks of group `g` as ranks of window `w`.
fn window_ranks(g: H, w: H) -> R<Vec<usize>> {
    let rt = rt()?;
    let members = rt.group(g)?;
    let wcomm = index(KIND_WIN, w)
        .and_then(|i| rt.wins.get(i))
        .and_then(|x| x.as_ref())
        .map(|x| x.comm)
        .ok_or_else(|| fail(ERR_WIN, format!("{w:#x} is not a window")))?;
    let c = rt.comm(wcomm)?;
    members
        .iter()
        .map(|j| {
            c.group.iter().position(|x| x == j).ok_or_else(|| {
                fail(
                    class::GROUP,
                    format!("job rank {j} of the group is not a rank of the window"),
                )
            })
        })
        .collect()
}

fn check_assert(assert: c_int) -> R {
    if assert & !MODES != 0 {
        return Err(fail(ERR_ASSERT, format!("assertion {assert:#x} is not a combination of MPI_MODE_NOCHECK, _NOSTORE, _NOPUT, _NOPRECEDE and _NOSUCCEED")));
    }
    Ok(())
}

/// A zero-byte message of the window's synchronisation.
fn signal(comm: H, to: usize, tag: c_int) -> R {
    // SAFETY: no data.
    ok(
        unsafe { crate::p2p::PMPI_Send(std::ptr::null(), 0, BYTE, to as c_int, tag, comm) },
        "a synchronisation message",
    )
}

fn await_signal(comm: H, from: usize, tag: c_int) -> R {
    // SAFETY: no data; the status is ignored.
    ok(
        unsafe {
            crate::p2p::PMPI_Recv(
                std::ptr::null_mut(),
                0,
                BYTE,
                from as c_int,
                tag,
                comm,
                std::ptr::null_mut(),
            )
        },
        "a synchronisation message",
    )
}

fn comm_of(win: H) -> R<H> {
    with(win, |w| Ok(w.comm))
}

fn lock(kind: c_int, rank: c_int, assert: c_int, win: H) -> R {
    check_assert(assert)?;
    if kind != LOCK_SHARED && kind != LOCK_EXCLUSIVE {
        return Err(fail(
            ERR_LOCKTYPE,
            format!("lock type {kind}: MPI_LOCK_SHARED or MPI_LOCK_EXCLUSIVE"),
        ));
    }
    let word = with(win, |w| {
        let Some(r) = w.target(rank)? else {
            return Ok(None);
        };
        if w.locks[r] != 0 {
            return Err(fail(
                ERR_RMA_SYNC,
                format!("target {r} is locked by this rank already"),
            ));
        }
        if w.fence == Fence::Active || w.access.is_some() {
            return Err(fail(ERR_RMA_SYNC, "MPI_Win_lock inside an active-target epoch (MPI_Win_fence with RMA calls since, or MPI_Win_start): end it first"));
        }
        // A fence with no RMA call after it opened no epoch: the lock's begins.
        w.fence = Fence::None;
        if assert & MODE_NOCHECK == 0 {
            w.locks[r] = kind;
            Ok(Some(w.word(r, 0) as *const AtomicU32 as usize))
        } else {
            // No conflicting lock can exist (the program asserts it): nothing to take.
            w.locks[r] = -kind;
            Ok(None)
        }
    })?;
    let Some(word) = word else {
        return Ok(());
    };
    // SAFETY: the lock word lies in the window's control block, mapped for as long as the
    // window lives; only this thread could free it (MPI is used by one thread at a time), and
    // it is here. The face's state is not held while waiting, so MPI's other work moves on.
    let word = unsafe { &*(word as *const AtomicU32) };
    if kind == LOCK_EXCLUSIVE {
        wait_for(|| {
            word.compare_exchange(0, WRITER, Ordering::Acquire, Ordering::Relaxed)
                .is_ok()
        });
    } else {
        wait_for(|| {
            let v = word.load(Ordering::Relaxed);
            v & WRITER == 0
                && word
                    .compare_exchange(v, v + 1, Ordering::Acquire, Ordering::Relaxed)
                    .is_ok()
        });
    }
    Ok(())
}

/// Spins until `f` says yes, as `spin` does, and moves MPI's other work on (non-blocking
/// collectives in flight, the engine's progress) every 64 tries: the holder of a lock this rank
/// waits for may be waiting for this rank's messages.
fn wait_for(mut f: impl FnMut() -> bool) {
    let mut n = 0u32;
    while !f() {
        n = n.wrapping_add(1);
        if n.is_multiple_of(64) {
            crate::p2p::progress_nbcs();
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

fn unlock(rank: c_int, win: H) -> R {
    with(win, |w| {
        let Some(r) = w.target(rank)? else {
            return Ok(());
        };
        unlock_in(w, r)
    })
}

fn unlock_in(w: &mut Win, r: usize) -> R {
    let k = w.locks[r];
    if k == 0 {
        return Err(fail(
            ERR_RMA_SYNC,
            format!("target {r} is not locked by this rank (MPI_Win_lock)"),
        ));
    }
    fence(Ordering::SeqCst);
    match k {
        LOCK_EXCLUSIVE => w.word(r, 0).store(0, Ordering::Release),
        LOCK_SHARED => {
            w.word(r, 0).fetch_sub(1, Ordering::Release);
        }
        _ => {}
    }
    w.locks[r] = 0;
    Ok(())
}

crate::mpi! {
    fn MPI_Win_create / PMPI_Win_create(base: *mut c_void, size: Aint, disp_unit: c_int, info: H, comm: H, win: *mut H) [comm] {
        if win.is_null() {
            return Err(fail(class::ARG, "the window argument is a null pointer"));
        }
        let (h, _) = make(FLAVOR_CREATE, base as usize, size, disp_unit, info, comm)?;
        // SAFETY: the caller's output argument.
        unsafe { put(win, h) }
    }

    fn MPI_Win_allocate / PMPI_Win_allocate(size: Aint, disp_unit: c_int, info: H, comm: H, baseptr: *mut c_void, win: *mut H) [comm] {
        if win.is_null() || baseptr.is_null() {
            return Err(fail(class::ARG, "the base pointer or window argument is a null pointer"));
        }
        let (h, base) = make(FLAVOR_ALLOCATE, 0, size, disp_unit, info, comm)?;
        // SAFETY: the caller's output arguments (baseptr points to a void*).
        unsafe {
            put(baseptr as *mut usize, base)?;
            put(win, h)
        }
    }

    fn MPI_Win_allocate_shared / PMPI_Win_allocate_shared(size: Aint, disp_unit: c_int, info: H, comm: H, baseptr: *mut c_void, win: *mut H) [comm] {
        if win.is_null() || baseptr.is_null() {
            return Err(fail(class::ARG, "the base pointer or window argument is a null pointer"));
        }
        let (h, base) = make(FLAVOR_SHARED, 0, size, disp_unit, info, comm)?;
        // SAFETY: the caller's output arguments (baseptr points to a void*).
        unsafe {
            put(baseptr as *mut usize, base)?;
            put(win, h)
        }
    }

    fn MPI_Win_create_dynamic / PMPI_Win_create_dynamic(info: H, comm: H, win: *mut H) [comm] {
        if win.is_null() {
            return Err(fail(class::ARG, "the window argument is a null pointer"));
        }
        let (h, _) = make(FLAVOR_DYNAMIC, 0, 0, 1, info, comm)?;
        // SAFETY: the caller's output argument.
        unsafe { put(win, h) }
    }

    fn MPI_Win_shared_query / PMPI_Win_shared_query(win: H, rank: c_int, size: *mut Aint, disp_unit: *mut c_int, baseptr: *mut c_void) [win] {
        let (sz, du, base) = with(win, |w| {
            if w.flavor != FLAVOR_SHARED && w.flavor != FLAVOR_ALLOCATE {
                return Err(fail(ERR_RMA_FLAVOR, "MPI_Win_shared_query needs a window made by MPI_Win_allocate_shared (or MPI_Win_allocate)"));
            }
            let r = if rank == abi::PROC_NULL {
                // The lowest rank with memory (MPI-3.1 11.2.3).
                w.peers.iter().position(|p| p.size > 0).unwrap_or(0)
            } else {
                w.target(rank)?.expect("not MPI_PROC_NULL")
            };
            let p = &w.peers[r];
            let base = w.ctl.as_ptr().wrapping_add(p.shared_off.expect("an allocating flavor")) as usize;
            Ok((p.size as Aint, p.disp_unit as c_int, if p.size > 0 { base } else { 0 }))
        })?;
        // SAFETY: the caller's output arguments (baseptr points to a void*).
        unsafe {
            put(size, sz)?;
            put(disp_unit, du)?;
            put(baseptr as *mut usize, base)
        }
    }

    fn MPI_Win_attach / PMPI_Win_attach(win: H, base: *mut c_void, size: Aint) [win] {
        with(win, |w| {
            if w.flavor != FLAVOR_DYNAMIC {
                return Err(fail(ERR_RMA_FLAVOR, "MPI_Win_attach needs a window made by MPI_Win_create_dynamic"));
            }
            if size < 0 {
                return Err(fail(ERR_SIZE, format!("size {size} is negative")));
            }
            w.attached.push((base as usize, size as usize));
            Ok(())
        })
    }

    fn MPI_Win_detach / PMPI_Win_detach(win: H, base: *const c_void) [win] {
        with(win, |w| {
            if w.flavor != FLAVOR_DYNAMIC {
                return Err(fail(ERR_RMA_FLAVOR, "MPI_Win_detach needs a window made by MPI_Win_create_dynamic"));
            }
            let i = w.attached.iter().position(|a| a.0 == base as usize).ok_or_else(|| {
                fail(47, format!("{base:?} is not the base of memory attached to the window"))
            })?;
            w.attached.remove(i);
            Ok(())
        })
    }

    fn MPI_Win_free / PMPI_Win_free(win: *mut H) {
        // SAFETY: the caller's in-out argument.
        let h = unsafe { get(win)? };
        let (mut comm, attrs) = with(h, |w| {
            if w.locks.iter().any(|&k| k != 0) || w.access.is_some() || w.exposure.is_some() {
                return Err(fail(ERR_RMA_SYNC, "MPI_Win_free with an epoch still open (a lock, or MPI_Win_start or MPI_Win_post not yet ended)"));
            }
            Ok((w.comm, w.attrs.clone()))
        })
        .map_err(|mut f| {
            // The window's error handler decides.
            f.comm = Some(h);
            f
        })?;
        // Every rank's operations on this rank's memory have completed (they complete at the
        // call): after the barrier nobody touches the memory again.
        // SAFETY: an internal call on the window's communicator.
        ok(unsafe { crate::coll::PMPI_Barrier(comm) }, "the window's closing barrier")?;
        for (k, v) in attrs {
            crate::comm::delete_attr(h, k, v)?;
        }
        {
            let mut rt = rt()?;
            let i = index(KIND_WIN, h).expect("checked");
            rt.wins[i] = None;
        }
        // SAFETY: the window's own communicator, freed once.
        unsafe { crate::comm::PMPI_Comm_free(&mut comm) };
        // SAFETY: the caller's in-out argument.
        unsafe { put(win, WIN_NULL) }
    }

    fn MPI_Win_get_group / PMPI_Win_get_group(win: H, group: *mut H) [win] {
        let c = comm_of(win)?;
        let g = rt()?.comm(c)?.group.clone();
        let h = rt()?.add_group(g);
        // SAFETY: the caller's output argument.
        unsafe { put(group, h) }
    }

    fn MPI_Win_set_info / PMPI_Win_set_info(win: H, info: H) [win] {
        let pairs = info_pairs(info)?;
        with(win, |w| {
            set_hints(&mut w.info, pairs);
            Ok(())
        })
    }

    fn MPI_Win_get_info / PMPI_Win_get_info(win: H, info_used: *mut H) [win] {
        let pairs = with(win, |w| Ok(w.info.clone()))?;
        crate::info::create(info_used)?;
        // SAFETY: just written.
        let h = unsafe { get(info_used)? };
        for (k, v) in pairs {
            crate::info::set(h, &k, &v)?;
        }
        Ok(())
    }

    fn MPI_Win_set_name / PMPI_Win_set_name(win: H, win_name: *const c_char) [win] {
        // SAFETY: MPI: a C string.
        let name = unsafe { c_str(win_name)? };
        with(win, |w| {
            w.name = name.chars().take(abi::MAX_OBJECT_NAME - 1).collect();
            Ok(())
        })
    }

    fn MPI_Win_get_name / PMPI_Win_get_name(win: H, win_name: *mut c_char, resultlen: *mut c_int) [win] {
        let name = with(win, |w| Ok(w.name.clone()))?;
        // SAFETY: MPI: win_name holds MPI_MAX_OBJECT_NAME bytes.
        unsafe { put_str(win_name, abi::MAX_OBJECT_NAME, resultlen, &name) }
    }

    fn MPI_Win_create_keyval / PMPI_Win_create_keyval(copy_fn: usize, delete_fn: usize, keyval: *mut c_int, extra_state: *mut c_void) {
        crate::comm::create_keyval(copy_fn, delete_fn, keyval, extra_state, KeyvalKind::Win)
    }

    fn MPI_Win_free_keyval / PMPI_Win_free_keyval(keyval: *mut c_int) {
        crate::comm::free_keyval(keyval, KeyvalKind::Win)
    }

    fn MPI_Win_set_attr / PMPI_Win_set_attr(win: H, keyval: c_int, attribute_val: *mut c_void) [win] {
        if (ATTR_BASE..=ATTR_MODEL).contains(&keyval) {
            return Err(fail(class::KEYVAL, format!("keyval {keyval} is a window's predefined attribute, read-only")));
        }
        let old = {
            let rt = rt()?;
            rt.keyval(keyval, KeyvalKind::Win, true)?;
            drop(rt);
            with(win, |w| Ok(w.attrs.iter().find(|a| a.0 == keyval).copied()))?
        };
        if let Some((k, v)) = old {
            crate::comm::delete_attr(win, k, v)?;
        }
        with(win, |w| {
            w.attrs.retain(|a| a.0 != keyval);
            w.attrs.push((keyval, attribute_val as usize));
            Ok(())
        })
    }

    fn MPI_Win_get_attr / PMPI_Win_get_attr(win: H, keyval: c_int, attribute_val: *mut c_void, flag: *mut c_int) [win] {
        let v: Option<usize> = with(win, |w| {
            Ok(match keyval {
                ATTR_BASE => Some(w.base),
                ATTR_SIZE => Some(&w.size as *const Aint as usize),
                ATTR_DISP_UNIT => Some(&w.disp_unit as *const c_int as usize),
                ATTR_FLAVOR => Some(&w.flavor as *const c_int as usize),
                ATTR_MODEL => Some(&w.model as *const c_int as usize),
                k => w.attrs.iter().find(|a| a.0 == k).map(|a| a.1),
            })
        })?;
        if v.is_none() && !(ATTR_BASE..=ATTR_MODEL).contains(&keyval) {
            let rt = rt()?;
            rt.keyval(keyval, KeyvalKind::Win, false)?;
        }
        // SAFETY: MPI: attribute_val points to a void*, flag to an int.
        unsafe {
            put(flag, v.is_some() as c_int)?;
            if let Some(v) = v {
                put(attribute_val as *mut usize, v)?;
            }
        }
        Ok(())
    }

    fn MPI_Win_delete_attr / PMPI_Win_delete_attr(win: H, keyval: c_int) [win] {
        rt()?.keyval(keyval, KeyvalKind::Win, false)?;
        let old = with(win, |w| Ok(w.attrs.iter().find(|a| a.0 == keyval).copied()))?;
        let Some((k, v)) = old else {
            return Err(fail(class::KEYVAL, format!("no attribute with keyval {keyval} is set on the window")));
        };
        crate::comm::delete_attr(win, k, v)?;
        with(win, |w| {
            w.attrs.retain(|a| a.0 != keyval);
            Ok(())
        })
    }

    fn MPI_Win_create_errhandler / PMPI_Win_create_errhandler(function: Option<crate::state::ErrFn>, errhandler: *mut H) {
        // SAFETY: the same arguments (a window's handler has a communicator's signature, both
        // handles being pointer-sized).
        let rc = unsafe { crate::env::PMPI_Comm_create_errhandler(function, errhandler) };
        ok(rc, "MPI_Win_create_errhandler")
    }

    fn MPI_Win_set_errhandler / PMPI_Win_set_errhandler(win: H, errhandler: H) [win] {
        crate::state::check_errhandler(errhandler)?;
        with(win, |w| {
            w.errhandler = errhandler;
            Ok(())
        })
    }

    fn MPI_Win_get_errhandler / PMPI_Win_get_errhandler(win: H, errhandler: *mut H) [win] {
        let h = with(win, |w| Ok(w.errhandler))?;
        let h = if h == abi::ERRHANDLER_NULL { abi::ERRORS_ARE_FATAL } else { h };
        // SAFETY: the caller's output argument.
        unsafe { put(errhandler, h) }
    }

    fn MPI_Win_call_errhandler / PMPI_Win_call_errhandler(win: H, errorcode: c_int) {
        with(win, |_| Ok(()))?;
        crate::err::call_errhandler("MPI_Win_call_errhandler", win, errorcode)
    }

    fn MPI_Put / PMPI_Put(origin_addr: *const c_void, origin_count: c_int, origin_datatype: H, target_rank: c_int, target_disp: Aint, target_count: c_int, target_datatype: H, win: H) [win] {
        put_op(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
    }

    fn MPI_Get / PMPI_Get(origin_addr: *mut c_void, origin_count: c_int, origin_datatype: H, target_rank: c_int, target_disp: Aint, target_count: c_int, target_datatype: H, win: H) [win] {
        get_op(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)
    }

    fn MPI_Accumulate / PMPI_Accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: H, target_rank: c_int, target_disp: Aint, target_count: c_int, target_datatype: H, op: H, win: H) [win] {
        accumulate(origin_addr, origin_count, origin_datatype, None, target_rank, target_disp, target_count, target_datatype, op, win)
    }

    fn MPI_Get_accumulate / PMPI_Get_accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: H, result_addr: *mut c_void, result_count: c_int, result_datatype: H, target_rank: c_int, target_disp: Aint, target_count: c_int, target_datatype: H, op: H, win: H) [win] {
        accumulate(origin_addr, origin_count, origin_datatype, Some((result_addr, result_count, result_datatype)), target_rank, target_disp, target_count, target_datatype, op, win)
    }

    fn MPI_Fetch_and_op / PMPI_Fetch_and_op(origin_addr: *const c_void, result_addr: *mut c_void, datatype: H, target_rank: c_int, target_disp: Aint, op: H, win: H) [win] {
        accumulate(origin_addr, 1, datatype, Some((result_addr, 1, datatype)), target_rank, target_disp, 1, datatype, op, win)
    }

    fn MPI_Compare_and_swap / PMPI_Compare_and_swap(origin_addr: *const c_void, compare_addr: *const c_void, result_addr: *mut c_void, datatype: H, target_rank: c_int, target_disp: Aint, win: H) [win] {
        compare_and_swap(origin_addr, compare_addr, result_addr, datatype, target_rank, target_disp, win)
    }

    fn MPI_Rput / PMPI_Rput(origin_addr: *const c_void, origin_count: c_int, origin_datatype: H, target_rank: c_int, target_disp: Aint, target_count: c_int, target_datatype: H, win: H, request: *mut H) [win] {
        put_op(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)?;
        crate::p2p::completed_request(comm_of(win)?, request)
    }

    fn MPI_Rget / PMPI_Rget(origin_addr: *mut c_void, origin_count: c_int, origin_datatype: H, target_rank: c_int, target_disp: Aint, target_count: c_int, target_datatype: H, win: H, request: *mut H) [win] {
        get_op(origin_addr, origin_count, origin_datatype, target_rank, target_disp, target_count, target_datatype, win)?;
        crate::p2p::completed_request(comm_of(win)?, request)
    }

    fn MPI_Raccumulate / PMPI_Raccumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: H, target_rank: c_int, target_disp: Aint, target_count: c_int, target_datatype: H, op: H, win: H, request: *mut H) [win] {
        accumulate(origin_addr, origin_count, origin_datatype, None, target_rank, target_disp, target_count, target_datatype, op, win)?;
        crate::p2p::completed_request(comm_of(win)?, request)
    }

    fn MPI_Rget_accumulate / PMPI_Rget_accumulate(origin_addr: *const c_void, origin_count: c_int, origin_datatype: H, result_addr: *mut c_void, result_count: c_int, result_datatype: H, target_rank: c_int, target_disp: Aint, target_count: c_int, target_datatype: H, op: H, win: H, request: *mut H) [win] {
        accumulate(origin_addr, origin_count, origin_datatype, Some((result_addr, result_count, result_datatype)), target_rank, target_disp, target_count, target_datatype, op, win)?;
        crate::p2p::completed_request(comm_of(win)?, request)
    }

    fn MPI_Win_fence / PMPI_Win_fence(assert: c_int, win: H) [win] {
        check_assert(assert)?;
        let c = with(win, |w| {
            if w.locks.iter().any(|&k| k != 0) || w.access.is_some() || w.exposure.is_some() {
                return Err(fail(ERR_RMA_SYNC, "MPI_Win_fence while a lock or a post-start-complete-wait epoch is open on the window"));
            }
            w.fence = if assert & MODE_NOSUCCEED != 0 { Fence::None } else { Fence::Issued };
            Ok(w.comm)
        })?;
        fence(Ordering::SeqCst);
        // SAFETY: an internal call on the window's communicator.
        ok(unsafe { crate::coll::PMPI_Barrier(c) }, "the fence's barrier")?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn MPI_Win_post / PMPI_Win_post(group: H, assert: c_int, win: H) [win] {
        check_assert(assert)?;
        let origins = window_ranks(group, win)?;
        let c = with(win, |w| {
            if w.exposure.is_some() {
                return Err(fail(ERR_RMA_SYNC, "MPI_Win_post while an exposure epoch is open (MPI_Win_wait ends it)"));
            }
            w.exposure = Some(origins.iter().map(|&o| (o, false)).collect());
            Ok(w.comm)
        })?;
        fence(Ordering::SeqCst);
        if assert & MODE_NOCHECK == 0 {
            for &o in &origins {
                signal(c, o, TAG_POST)?;
            }
        }
        Ok(())
    }

    fn MPI_Win_start / PMPI_Win_start(group: H, assert: c_int, win: H) [win] {
        check_assert(assert)?;
        let targets = window_ranks(group, win)?;
        let c = with(win, |w| {
            if w.access.is_some() || w.fence == Fence::Active || w.locks.iter().any(|&k| k != 0) {
                return Err(fail(ERR_RMA_SYNC, "MPI_Win_start while an access epoch is open (MPI_Win_complete, a fence or an unlock ends it)"));
            }
            w.fence = Fence::None;
            w.access = Some(targets.clone());
            Ok(w.comm)
        })?;
        if assert & MODE_NOCHECK == 0 {
            for &t in &targets {
                await_signal(c, t, TAG_POST)?;
            }
        }
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn MPI_Win_complete / PMPI_Win_complete(win: H) [win] {
        let (c, targets) = with(win, |w| {
            let t = w.access.take().ok_or_else(|| fail(ERR_RMA_SYNC, "MPI_Win_complete without MPI_Win_start"))?;
            Ok((w.comm, t))
        })?;
        fence(Ordering::SeqCst);
        for &t in &targets {
            signal(c, t, TAG_COMPLETE)?;
        }
        Ok(())
    }

    fn MPI_Win_wait / PMPI_Win_wait(win: H) [win] {
        let (c, origins) = with(win, |w| {
            let e = w.exposure.take().ok_or_else(|| fail(ERR_RMA_SYNC, "MPI_Win_wait without MPI_Win_post"))?;
            Ok((w.comm, e))
        })?;
        for &(o, done) in &origins {
            if !done {
                await_signal(c, o, TAG_COMPLETE)?;
            }
        }
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn MPI_Win_test / PMPI_Win_test(win: H, flag: *mut c_int) [win] {
        let (c, origins) = with(win, |w| {
            let e = w.exposure.clone().ok_or_else(|| fail(ERR_RMA_SYNC, "MPI_Win_test without MPI_Win_post"))?;
            Ok((w.comm, e))
        })?;
        let mut all = true;
        let mut now = origins.clone();
        for (o, done) in now.iter_mut() {
            if *done {
                continue;
            }
            let mut there: c_int = 0;
            // SAFETY: internal probe; the status is ignored.
            ok(unsafe { crate::p2p::PMPI_Iprobe(*o as c_int, TAG_COMPLETE, c, &mut there, std::ptr::null_mut()) }, "probing for MPI_Win_complete")?;
            if there != 0 {
                await_signal(c, *o, TAG_COMPLETE)?;
                *done = true;
            } else {
                all = false;
            }
        }
        with(win, |w| {
            w.exposure = if all { None } else { Some(now) };
            Ok(())
        })?;
        if all {
            fence(Ordering::SeqCst);
        }
        // SAFETY: the caller's output argument.
        unsafe { put(flag, all as c_int) }
    }

    fn MPI_Win_lock / PMPI_Win_lock(lock_type: c_int, rank: c_int, assert: c_int, win: H) [win] {
        lock(lock_type, rank, assert, win)
    }

    fn MPI_Win_unlock / PMPI_Win_unlock(rank: c_int, win: H) [win] {
        unlock(rank, win)
    }

    fn MPI_Win_lock_all / PMPI_Win_lock_all(assert: c_int, win: H) [win] {
        let n = with(win, |w| {
            if w.lock_all || w.locks.iter().any(|&k| k != 0) {
                return Err(fail(ERR_RMA_SYNC, "MPI_Win_lock_all while this rank holds a lock on the window"));
            }
            Ok(w.peers.len())
        })?;
        for r in 0..n {
            lock(LOCK_SHARED, r as c_int, assert, win)?;
        }
        with(win, |w| {
            w.lock_all = true;
            Ok(())
        })
    }

    fn MPI_Win_unlock_all / PMPI_Win_unlock_all(win: H) [win] {
        with(win, |w| {
            if !w.lock_all {
                return Err(fail(ERR_RMA_SYNC, "MPI_Win_unlock_all without MPI_Win_lock_all"));
            }
            for r in 0..w.peers.len() {
                unlock_in(w, r)?;
            }
            w.lock_all = false;
            Ok(())
        })
    }

    fn MPI_Win_flush / PMPI_Win_flush(rank: c_int, win: H) [win] {
        // Operations complete at their call: a flush orders memory.
        with(win, |w| w.target(rank).map(|_| ()))?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn MPI_Win_flush_all / PMPI_Win_flush_all(win: H) [win] {
        with(win, |_| Ok(()))?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn MPI_Win_flush_local / PMPI_Win_flush_local(rank: c_int, win: H) [win] {
        with(win, |w| w.target(rank).map(|_| ()))?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn MPI_Win_flush_local_all / PMPI_Win_flush_local_all(win: H) [win] {
        with(win, |_| Ok(()))?;
        fence(Ordering::SeqCst);
        Ok(())
    }

    fn MPI_Win_sync / PMPI_Win_sync(win: H) [win] {
        with(win, |_| Ok(()))?;
        fence(Ordering::SeqCst);
        Ok(())
    }
}
