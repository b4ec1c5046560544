//! volley-sys: the operating-system layer.
//!
//! Layer 0. Every system call volley makes goes through this crate, so that the unsafe code that
//! talks to the kernel lives in one place and the layers above can stay safe. It depends on `libc`
//! only and on no other volley crate.
//!
//! Nothing here is on a per-message path except [`EventFd::notify`] and [`EventFd::drain`], which
//! the waiting protocol calls only when a receiver has said it is asleep.

mod exclusive;
pub mod lend;
pub mod net;
pub mod numa;
pub mod unix;
pub mod xdp;

pub use exclusive::{bias_state, Exclusive, ExclusiveGuard};

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::time::Duration;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Creates an anonymous memory file (memfd). It has no name in any filesystem, so it can never be
/// left behind: the memory is freed when the last descriptor and mapping are gone, whatever way
/// the processes holding it end.
pub fn memfd_create(name: &str) -> io::Result<OwnedFd> {
    let cname = CString::new(name).map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: cname is a valid NUL-terminated string; flags are valid memfd flags.
    let fd = cvt(unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) })?;
    // SAFETY: fd was just returned by the kernel and is owned by nobody else.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    // A memfd is born mode 0777; the job's memory is its owner's alone (another user could
    // otherwise open it through /proc/PID/fd while it lives).
    // SAFETY: fd is a valid descriptor owned by `fd`.
    cvt(unsafe { libc::fchmod(fd.as_raw_fd(), 0o600) })?;
    Ok(fd)
}

/// Creates a regular file in `dir` readable and writable only by the current user, and unlinks it
/// at once, so that only the returned descriptor keeps it alive.
pub fn create_unlinked_file(dir: &std::path::Path, stem: &str) -> io::Result<OwnedFd> {
    let path = dir.join(format!(
        "{stem}-{}-{:016x}",
        std::process::id(),
        random_u64()
    ));
    let cpath = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: cpath is a valid C string; O_EXCL makes sure we never open someone else's file.
    let fd = cvt(unsafe {
        libc::open(
            cpath.as_ptr(),
            libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC,
            0o600,
        )
    })?;
    // SAFETY: fd is fresh and ours.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    // SAFETY: cpath is valid. The name disappears now; the descriptor keeps the memory.
    cvt(unsafe { libc::unlink(cpath.as_ptr()) })?;
    Ok(owned)
}

/// Reserves `len` bytes of backing store for `fd`, so that a full /dev/shm or an exhausted memory
/// limit shows up now, as an error, instead of later as SIGBUS on first touch.
pub fn fallocate(fd: &OwnedFd, len: u64) -> io::Result<()> {
    // SAFETY: valid fd; posix_fallocate returns the error number instead of setting errno.
    let rc = unsafe { libc::posix_fallocate(fd.as_raw_fd(), 0, len as libc::off_t) };
    if rc != 0 {
        return Err(io::Error::from_raw_os_error(rc));
    }
    Ok(())
}

/// Size in bytes of the file behind `fd`.
pub fn file_size(fd: RawFd) -> io::Result<u64> {
    // SAFETY: stat is plain data; fstat fills it or fails.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: st is a valid out-pointer.
    cvt(unsafe { libc::fstat(fd, &mut st) })?;
    Ok(st.st_size as u64)
}

/// Free and total bytes of the filesystem holding `path`.
pub fn fs_space(path: &std::path::Path) -> io::Result<(u64, u64)> {
    let cpath = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: plain data.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: valid path and out-pointer.
    cvt(unsafe { libc::statvfs(cpath.as_ptr(), &mut st) })?;
    Ok((
        st.f_bavail as u64 * st.f_frsize as u64,
        st.f_blocks as u64 * st.f_frsize as u64,
    ))
}

/// A read-write memory mapping (of a file, a socket's rings, or anonymous memory). Unmapped on
/// drop.
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// SAFETY: the mapping is plain memory; synchronisation of its contents is the business of the
// layers above (atomics in the shared layout). Moving or sharing the handle itself is harmless.
unsafe impl Send for Mapping {}
// SAFETY: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` shared and read-write.
    pub fn map_shared(fd: RawFd, len: usize) -> io::Result<Mapping> {
        Mapping::map(fd, len, 0, libc::MAP_SHARED)
    }

    /// Maps `len` bytes of `fd` from `offset`, shared, read-write and populated at once (the
    /// rings of a socket that the kernel shares at offsets its ABI names).
    pub fn map_shared_at(fd: RawFd, len: usize, offset: u64) -> io::Result<Mapping> {
        Mapping::map(fd, len, offset, libc::MAP_SHARED | libc::MAP_POPULATE)
    }

    /// `len` bytes of fresh, private, read-write memory, populated at once.
    pub fn anonymous(len: usize) -> io::Result<Mapping> {
        Mapping::map(
            -1,
            len,
            0,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
        )
    }

    fn map(fd: RawFd, len: usize, offset: u64, flags: libc::c_int) -> io::Result<Mapping> {
        if len == 0 {
            return Err(io::Error::from(io::ErrorKind::InvalidInput));
        }
        // SAFETY: we ask the kernel for a fresh mapping; it does not alias any Rust object.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset as libc::off_t,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Mapping {
            ptr: NonNull::new(p.cast()).expect("mmap returned null"),
            len,
        })
    }

    pub fn as_ptr(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: ptr/len came from a successful mmap and are unmapped once.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A non-blocking eventfd: the doorbell a sleeping process waits on, and the descriptor an
/// endpoint exposes to poll/epoll.
#[derive(Debug)]
pub struct EventFd(OwnedFd);

impl EventFd {
    pub fn new() -> io::Result<EventFd> {
        // SAFETY: plain syscall.
        let fd = cvt(unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) })?;
        // SAFETY: fresh fd.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Adopts an inherited descriptor after checking that it is an eventfd.
    pub fn adopt(fd: RawFd) -> io::Result<EventFd> {
        let link = std::fs::read_link(format!("/proc/self/fd/{fd}"))?;
        if link.as_os_str() != "anon_inode:[eventfd]" {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("descriptor {fd} is {}, not an eventfd", link.display()),
            ));
        }
        // SAFETY: the launcher handed this descriptor to us to own; we checked what it is.
        Ok(EventFd(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Takes over `fd`, which must be an eventfd (see [`fd_of_process`]).
    pub fn from_owned(fd: OwnedFd) -> io::Result<EventFd> {
        let raw = fd.as_raw_fd();
        let e = EventFd::adopt(raw)?;
        std::mem::forget(fd); // now owned by `e`
        Ok(e)
    }

    /// Adds `v` to the counter (a timestamp, for a wake-up measurement).
    pub fn add(&self, v: u64) -> io::Result<()> {
        // SAFETY: writing 8 bytes from a valid u64.
        let r = unsafe { libc::write(self.0.as_raw_fd(), (&v as *const u64).cast(), 8) };
        if r == 8 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Reads and resets the counter; None if it was zero.
    pub fn take(&self) -> Option<u64> {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64.
        let r = unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
        (r == 8).then_some(v)
    }

    /// Adds one to the counter, making the descriptor readable.
    pub fn notify(&self) {
        let one: u64 = 1;
        // SAFETY: writing 8 bytes from a valid u64. EAGAIN (counter saturated) still leaves the
        // descriptor readable, which is all a doorbell needs, so the result is ignored.
        unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Resets the counter to zero without blocking.
    pub fn drain(&self) {
        let mut v: u64 = 0;
        // SAFETY: reading 8 bytes into a valid u64; EAGAIN means it was already zero.
        unsafe { libc::read(self.0.as_raw_fd(), (&mut v as *mut u64).cast(), 8) };
    }

    /// Sleeps until the descriptor is readable or `timeout` passes. Returns true if readable.
    pub fn wait(&self, timeout: Duration) -> bool {
        poll_readable(self.0.as_raw_fd(), timeout)
    }

    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// The descriptor itself.
    pub fn into_owned(self) -> OwnedFd {
        self.0
    }
}

impl AsRawFd for EventFd {
    fn as_raw_fd(&self) -> RawFd {
        self.0.as_raw_fd()
    }
}

/// Waits until `fd` is readable or `timeout` passes.
pub fn poll_readable(fd: RawFd, timeout: Duration) -> bool {
    let mut pfd = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    let ms = timeout.as_millis().min(i32::MAX as u128) as libc::c_int;
    // SAFETY: one valid pollfd.
    let rc = unsafe { libc::poll(&mut pfd, 1, ms) };
    rc > 0 && (pfd.revents & libc::POLLIN) != 0
}

/// Clears close-on-exec so that `fd` is inherited by a program we are about to exec.
/// Async-signal-safe: may be called between fork and exec.
pub fn clear_cloexec(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on an fd number; failure is reported.
    let flags = cvt(unsafe { libc::fcntl(fd, libc::F_GETFD) })?;
    // SAFETY: as above.
    cvt(unsafe { libc::fcntl(fd, libc::F_SETFD, flags & !libc::FD_CLOEXEC) })?;
    Ok(())
}

/// Pins the calling thread (between fork and exec: the child process) to `cpus`.
/// Async-signal-safe.
pub fn set_affinity(cpus: &[usize]) -> io::Result<()> {
    // SAFETY: cpu_set_t is plain data, zero is the empty set.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    for &c in cpus {
        // SAFETY: CPU_SET bounds-checks against the set size.
        unsafe { libc::CPU_SET(c, &mut set) };
    }
    // SAFETY: valid set pointer and size.
    cvt(unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) })?;
    Ok(())
}

/// CPUs online on this machine (whatever this process is bound to).
pub fn online_cpus() -> usize {
    // SAFETY: plain libc call.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    n.max(1) as usize
}

/// Number of CPUs this process may run on.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: plain data.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    let rc =
        unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if rc != 0 {
        return vec![0];
    }
    (0..libc::CPU_SETSIZE as usize)
        // SAFETY: index within the set size.
        .filter(|&c| unsafe { libc::CPU_ISSET(c, &set) })
        .collect()
}

/// Asks the kernel to send `sig` to this process when its parent dies, so that ranks never outlive
/// a launcher that was killed with SIGKILL. Async-signal-safe.
pub fn die_with_parent(sig: libc::c_int, expected_parent: libc::pid_t) -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    cvt(unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, sig as libc::c_ulong, 0, 0, 0) })?;
    // The parent may have died before prctl took effect; then we were re-parented already.
    // SAFETY: getppid cannot fail.
    if unsafe { libc::getppid() } != expected_parent {
        // SAFETY: raising a signal on ourselves.
        unsafe { libc::raise(sig) };
    }
    Ok(())
}

/// Puts the calling process into a process group of its own. Async-signal-safe.
pub fn new_process_group() -> io::Result<()> {
    // SAFETY: plain syscall.
    cvt(unsafe { libc::setpgid(0, 0) })?;
    Ok(())
}

/// Sends `sig` to every process in the process group led by `pgid`.
pub fn kill_group(pgid: u32, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall; a negative pid addresses the group.
    cvt(unsafe { libc::kill(-(pgid as libc::pid_t), sig) })?;
    Ok(())
}

/// A child of this process that has ended and is waiting to be reaped, without reaping it
/// (waitid with WNOWAIT): its pid, or None when no child has ended. Lets a launcher of many
/// ranks reap only the one that ended instead of asking each child in turn.
pub fn ended_child() -> Option<u32> {
    // SAFETY: siginfo_t is plain data; all-zero is a valid value for the kernel to fill.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: plain syscall writing into `info`, which lives across the call.
    let r = unsafe {
        libc::waitid(
            libc::P_ALL,
            0,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    // SAFETY: after a successful waitid, si_pid is the union member the kernel filled (0 when
    // no child was waitable).
    let pid = unsafe { info.si_pid() };
    (r == 0 && pid > 0).then_some(pid as u32)
}

/// Sends `sig` to process `pid`.
pub fn kill(pid: u32, sig: libc::c_int) -> io::Result<()> {
    // SAFETY: plain syscall.
    cvt(unsafe { libc::kill(pid as libc::pid_t, sig) })?;
    Ok(())
}

/// This process's limit on open file descriptors (the soft RLIMIT_NOFILE), if known.
pub fn fd_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit into the struct we own.
    let ok = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) } == 0;
    ok.then_some(r.rlim_cur)
}

/// 64 random bits from the kernel (getrandom); used for job tokens and unique names.
pub fn random_u64() -> u64 {
    let mut v: u64 = 0;
    // SAFETY: writes at most 8 bytes into v.
    let n = unsafe { libc::getrandom((&mut v as *mut u64).cast(), 8, 0) };
    if n != 8 {
        // getrandom only fails before the pool is initialised on very early boot; fall back to
        // something that still differs between jobs.
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        v = t ^ ((std::process::id() as u64) << 32);
    }
    v
}

/// Yields the processor to another runnable thread.
pub fn yield_now() {
    // SAFETY: plain syscall.
    unsafe { libc::sched_yield() };
}

/// Runs `f` when the process exits through `exit` (`std::process::exit`, the end of `main` in C,
/// Python's interpreter exit), as C's `atexit`; not on `_exit`, a signal or an abort.
pub fn at_exit(f: extern "C" fn()) -> std::io::Result<()> {
    // SAFETY: registers a plain function pointer; libc calls it once at exit.
    if unsafe { libc::atexit(f) } != 0 {
        return Err(std::io::Error::other("atexit refused the handler"));
    }
    Ok(())
}

/// Ends this process at once with exit code `code`, running no atexit handler and no
/// destructor (C's `_exit`): as a program that crashes out of its own code would.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit takes a plain integer and does not return.
    unsafe { libc::_exit(code) }
}

/// Ends this process at once with SIGKILL (as the parent-death signal would): no destructor,
/// no atexit handler, nothing of the process outlives the call.
pub fn kill_self_now() {
    // SAFETY: plain syscall on our own pid.
    unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
}

/// The name of a signal ("SIGKILL"), or "signal N".
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

/// Peak resident set size of this process in KiB (VmHWM), for the memory-bound tests.
pub fn peak_rss_kib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    s.lines()
        .find(|l| l.starts_with("VmHWM:"))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Takes ownership of an inherited descriptor number.
///
/// The caller must be the only owner of `fd` from now on (it came from the launcher through the
/// environment and nothing else in the process uses it). Checked: the descriptor must be open.
/// Close-on-exec is set again, so the job's descriptors do not leak into programs the rank runs.
pub fn adopt_fd(fd: RawFd) -> OwnedFd {
    // SAFETY: fcntl on a descriptor number; failure (not open) is caught by the caller's checks.
    unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) };
    // SAFETY: the launcher gave this process the descriptor to own; the caller checked it is open
    // and adopts it once.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// How a launcher prepares each rank's process between fork and exec.
pub struct ChildSetup {
    /// Descriptors the program must inherit.
    pub inherit: Vec<RawFd>,
    /// Bind to these CPUs.
    pub cpus: Option<Vec<usize>>,
    /// The launcher's pid: the child dies with SIGKILL when the launcher dies.
    pub parent: u32,
}

/// Installs `setup` on `cmd`: inherited descriptors, CPU pinning, a process group of its own (so
/// that the launcher alone decides which signals reach it) and death with the launcher.
pub fn prepare_child(cmd: &mut std::process::Command, setup: ChildSetup) {
    use std::os::unix::process::CommandExt;
    let ChildSetup {
        inherit,
        cpus,
        parent,
    } = setup;
    // SAFETY: the closure runs between fork and exec and makes only async-signal-safe calls
    // (fcntl, sched_setaffinity, setpgid, prctl, getppid, raise); it allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for &fd in &inherit {
                clear_cloexec(fd)?;
            }
            if let Some(c) = &cpus {
                set_affinity(c)?;
            }
            new_process_group()?;
            die_with_parent(libc::SIGKILL, parent as libc::pid_t)?;
            Ok(())
        });
    }
}

/// User plus system CPU time this process has used so far.
pub fn cpu_time() -> Duration {
    // SAFETY: rusage is plain data; getrusage fills it.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

/// Two cache lines shared by two processes, for the placement probe: a bare ping-pong of one
/// word between the cores the two processes run on, the floor under any shared-memory transfer.
pub struct SharedLines {
    map: Mapping,
    _fd: OwnedFd,
}

impl SharedLines {
    /// Creates the lines; the returned path lets a process of the same user open them too.
    pub fn create() -> io::Result<(SharedLines, String)> {
        let fd = memfd_create("volley-probe")?;
        // SAFETY: plain syscall on our fd.
        cvt(unsafe { libc::ftruncate(fd.as_raw_fd(), 4096) })?;
        let map = Mapping::map_shared(fd.as_raw_fd(), 4096)?;
        let path = format!("/proc/{}/fd/{}", std::process::id(), fd.as_raw_fd());
        Ok((SharedLines { map, _fd: fd }, path))
    }

    /// Opens the lines another process created.
    pub fn open(path: &str) -> io::Result<SharedLines> {
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open(path)?;
        let fd: OwnedFd = f.into();
        let map = Mapping::map_shared(fd.as_raw_fd(), 4096)?;
        Ok(SharedLines { map, _fd: fd })
    }

    fn word(&self, i: usize) -> &std::sync::atomic::AtomicU64 {
        // SAFETY: offsets 0 and 128 lie inside the 4096-byte mapping and are 8-byte aligned; the
        // mapping lives as long as self.
        unsafe { &*(self.map.as_ptr().add(i * 128) as *const std::sync::atomic::AtomicU64) }
    }

    /// Bounces a counter up to `iters` times or for `budget`, whichever ends first; both
    /// processes call it with the same `round` (a new one each time) and opposite `initiator`.
    /// The initiator decides when to stop and tells the other with an end marker. Returns the
    /// one-way time in nanoseconds measured by the initiator, or None if the peer did not answer
    /// within 5 seconds.
    pub fn pingpong(
        &self,
        initiator: bool,
        round: u64,
        iters: u64,
        budget: Duration,
    ) -> Option<f64> {
        use std::sync::atomic::Ordering::{Acquire, Release};
        let (mine, theirs) = if initiator {
            (self.word(0), self.word(1))
        } else {
            (self.word(1), self.word(0))
        };
        let base = round << 32;
        // The end marker belongs to its round, so a marker left from the last round is ignored.
        let end = base | 0xffff_ffff;
        let iters = iters.min(0xffff_fffe);
        let t = std::time::Instant::now();
        let deadline = t + Duration::from_secs(5);
        // Waits until `w` holds a value of this round it has not seen (`v > last`); the end
        // marker is the largest of them.
        let wait_next = |w: &std::sync::atomic::AtomicU64, last: u64| -> Option<u64> {
            let mut n = 0u32;
            loop {
                let v = w.load(Acquire);
                if v >> 32 == round && v > last {
                    return Some(v);
                }
                std::hint::spin_loop();
                n = n.wrapping_add(1);
                if n.is_multiple_of(65536) && std::time::Instant::now() > deadline {
                    return None;
                }
            }
        };
        if initiator {
            let mut done = 0;
            for i in 1..=iters {
                mine.store(base + i, Release);
                if wait_next(theirs, base + i - 1)? != base + i {
                    return None;
                }
                done = i;
                if i.is_multiple_of(64) && t.elapsed() > budget {
                    break;
                }
            }
            let elapsed = t.elapsed();
            mine.store(end, Release);
            Some(elapsed.as_nanos() as f64 / (2 * done.max(1)) as f64)
        } else {
            let mut last = base;
            loop {
                let v = wait_next(theirs, last)?;
                if v == end {
                    return Some(0.0);
                }
                mine.store(v, Release);
                last = v;
            }
        }
    }
}

/// CLOCK_MONOTONIC in nanoseconds: comparable between processes on one machine (unlike
/// std::time::Instant, which cannot be sent to another process).
pub fn monotonic_ns() -> u64 {
    // SAFETY: plain data, filled by clock_gettime.
    let mut ts: libc::timespec = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Makes a named pipe (FIFO) readable and writable only by the current user.
pub fn mkfifo(path: &std::path::Path) -> io::Result<()> {
    let c = CString::new(path.as_os_str().as_encoded_bytes())
        .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
    // SAFETY: valid C string.
    cvt(unsafe { libc::mkfifo(c.as_ptr(), 0o600) })?;
    Ok(())
}

/// Sets a socket's send and receive buffers to `bytes`, beyond the system maximum when the
/// process may (SO_*BUFFORCE needs CAP_NET_ADMIN). Returns the receive buffer size obtained.
pub fn set_socket_buffers(fd: RawFd, bytes: usize) -> io::Result<usize> {
    let v = bytes as libc::c_int;
    let set = |opt: libc::c_int| {
        // SAFETY: setsockopt with a valid int option value.
        unsafe {
            libc::setsockopt(
                fd,
                libc::SOL_SOCKET,
                opt,
                (&v as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        }
    };
    if set(libc::SO_RCVBUFFORCE) != 0 {
        cvt(set(libc::SO_RCVBUF))?;
    }
    if set(libc::SO_SNDBUFFORCE) != 0 {
        cvt(set(libc::SO_SNDBUF))?;
    }
    let mut got: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: valid out-pointers.
    cvt(unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&mut got as *mut libc::c_int).cast(),
            &mut len,
        )
    })?;
    Ok(got as usize)
}

/// Copies `local.len()` bytes from address `remote` in process `pid` into `local`, with
/// process_vm_readv (cross-memory attach: one copy, no shared buffer). Loops over partial reads.
pub fn process_vm_read(pid: u32, local: &mut [u8], remote: u64) -> io::Result<()> {
    cross_memory(pid, local.as_mut_ptr(), local.len(), remote, false)
}

/// Copies `local` to address `remote` in process `pid` with process_vm_writev (the other
/// direction of [`process_vm_read`], with the same right). Loops over partial writes.
pub fn process_vm_write(pid: u32, local: &[u8], remote: u64) -> io::Result<()> {
    // The kernel only reads through the pointer when writing to the other process.
    cross_memory(pid, local.as_ptr().cast_mut(), local.len(), remote, true)
}

/// `len` bytes between `local` (ours) and `remote` (in `pid`): written there when `write`, else
/// read from there. The caller holds `local` for `len` bytes, mutably unless `write`.
fn cross_memory(pid: u32, local: *mut u8, len: usize, remote: u64, write: bool) -> io::Result<()> {
    let mut done = 0usize;
    while done < len {
        let liov = libc::iovec {
            iov_base: local.wrapping_add(done).cast(),
            iov_len: len - done,
        };
        let riov = libc::iovec {
            iov_base: (remote + done as u64) as *mut libc::c_void,
            iov_len: len - done,
        };
        // SAFETY: the local iovec lies inside the caller's buffer (borrowed mutably for a read,
        // only read by the kernel for a write); the kernel checks the remote one against the
        // other process's address space and fails with EFAULT.
        let n = unsafe {
            if write {
                libc::process_vm_writev(pid as libc::pid_t, &liov, 1, &riov, 1, 0)
            } else {
                libc::process_vm_readv(pid as libc::pid_t, &liov, 1, &riov, 1, 0)
            }
        };
        if n < 0 {
            return Err(io::Error::last_os_error());
        }
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "cross-memory copy moved nothing",
            ));
        }
        done += n as usize;
    }
    Ok(())
}

/// A copy of descriptor `fd` of process `pid` (pidfd_open and pidfd_getfd, Linux 5.6), with the
/// same right process_vm_readv needs (to ptrace it: see [`allow_any_ptracer`]).
pub fn fd_of_process(pid: u32, fd: RawFd) -> io::Result<OwnedFd> {
    // SAFETY: plain syscalls; each returned descriptor is fresh and ours.
    unsafe {
        let p = libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0);
        if p < 0 {
            return Err(io::Error::last_os_error());
        }
        let pidfd = OwnedFd::from_raw_fd(p as RawFd);
        let r = libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), fd, 0);
        if r < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(OwnedFd::from_raw_fd(r as RawFd))
    }
}

/// Lets any process of the same user read this one's memory (PR_SET_PTRACER_ANY), which Yama's
/// ptrace_scope = 1 otherwise forbids between sibling processes. Without Yama it is a no-op.
pub fn allow_any_ptracer() -> io::Result<()> {
    // SAFETY: prctl with integer arguments.
    let rc = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
    if rc != 0 {
        let e = io::Error::last_os_error();
        // EINVAL: no Yama in this kernel, nothing to allow.
        if e.raw_os_error() != Some(libc::EINVAL) {
            return Err(e);
        }
    }
    Ok(())
}

/// Yama's /proc/sys/kernel/yama/ptrace_scope, if the kernel has Yama.
pub fn yama_ptrace_scope() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/yama/ptrace_scope")
        .ok()
        .and_then(|s| s.trim().parse().ok())
}

/// Whether this process holds CAP_SYS_PTRACE (effective), from /proc/self/status.
pub fn has_cap_sys_ptrace() -> bool {
    let s = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with("CapEff:"))
        .and_then(|l| u64::from_str_radix(l.split_whitespace().nth(1)?, 16).ok())
        .is_some_and(|caps| caps & (1 << 19) != 0)
}

/// Reads `len` bytes at `remote` in process `pid` into `v` (replacing its contents), without
/// first zero-filling the buffer.
pub fn process_vm_read_to_vec(
    pid: u32,
    remote: u64,
    len: usize,
    v: &mut Vec<u8>,
) -> io::Result<()> {
    v.clear();
    v.reserve_exact(len);
    let spare = &mut v.spare_capacity_mut()[..len];
    // SAFETY: MaybeUninit<u8> and u8 have the same layout; the kernel only writes into it, and
    // we expose the bytes (set_len) only after all of them were written.
    let dst = unsafe { std::slice::from_raw_parts_mut(spare.as_mut_ptr() as *mut u8, len) };
    process_vm_read(pid, dst, remote)?;
    // SAFETY: process_vm_read filled all `len` bytes or returned an error above.
    unsafe { v.set_len(len) };
    Ok(())
}

impl EventFd {
    /// Another descriptor for the same eventfd (dup), for a second thread to ring it.
    pub fn try_clone(&self) -> io::Result<EventFd> {
        Ok(EventFd(self.0.try_clone()?))
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn a_memfd_is_its_owners_alone() {
        let fd = super::memfd_create("volley-mode-test").unwrap();
        // The descriptor's target, as another process would see it through /proc.
        let path = format!("/proc/self/fd/{}", fd.as_raw_fd());
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o600, "{path}: {mode:o}");
    }

    #[test]
    fn cross_memory_writes_land_where_reads_find_them() {
        let pid = std::process::id();
        let src: Vec<u8> = (0..300_000u32).map(|i| (i * 7) as u8).collect();
        let mut dst = vec![0u8; src.len()];
        super::process_vm_write(pid, &src[1000..], dst.as_mut_ptr() as u64 + 1000).unwrap();
        assert_eq!(&dst[..1000], &[0u8; 1000][..], "nothing before the address");
        assert_eq!(&dst[1000..], &src[1000..]);
        let mut back = vec![0u8; 5000];
        super::process_vm_read(pid, &mut back, dst.as_ptr() as u64 + 2000).unwrap();
        assert_eq!(back, src[2000..7000]);
        // An address the process does not have is an error, not a crash.
        assert!(super::process_vm_write(pid, &src[..10], 8).is_err());
    }
}
