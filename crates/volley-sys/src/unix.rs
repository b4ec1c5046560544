//! What ranks started by a foreign launcher (Hydra, Slurm) need to share a host without a volley
//! process above them: descriptors passed over a Unix socket, the identity of the process at the
//! other end, and process descriptors (pidfds) that become readable when a peer's process ends.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::time::Duration;

/// The most descriptors one [`send_fds`] carries (the kernel's SCM_MAX_FD is 253).
pub const MAX_FDS: usize = 250;

fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Sends `data` (at least one byte) with `fds` attached (at most [`MAX_FDS`]) on a connected
/// Unix stream socket.
pub fn send_fds(sock: RawFd, data: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if data.is_empty() || fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "send_fds: needs 1+ bytes and at most MAX_FDS descriptors",
        ));
    }
    let fd_bytes = std::mem::size_of_val(fds);
    // SAFETY: CMSG_SPACE is arithmetic on its argument.
    let space = unsafe { libc::CMSG_SPACE(fd_bytes as u32) } as usize;
    // u64 words keep the control buffer aligned for cmsghdr.
    let mut control = vec![0u64; space.div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    // SAFETY: an all-zero msghdr is valid; the fields that matter are set below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space as _;
        // SAFETY: msg_control points to `space` writable bytes, enough for one header with
        // `fd_bytes` of data (CMSG_SPACE); CMSG_FIRSTHDR is therefore non-null.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            (*c).cmsg_level = libc::SOL_SOCKET;
            (*c).cmsg_type = libc::SCM_RIGHTS;
            (*c).cmsg_len = libc::CMSG_LEN(fd_bytes as u32) as _;
            std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), fd_bytes);
        }
    }
    let mut sent = 0;
    while sent == 0 {
        // SAFETY: msg points to live buffers set up above.
        let n = unsafe { libc::sendmsg(sock, &msg, libc::MSG_NOSIGNAL) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        sent = n as usize;
    }
    if sent < data.len() {
        // The descriptors went with the first byte; the rest of the data is plain.
        let mut rest = &data[sent..];
        while !rest.is_empty() {
            // SAFETY: writing from a live slice.
            let n =
                unsafe { libc::send(sock, rest.as_ptr().cast(), rest.len(), libc::MSG_NOSIGNAL) };
            if n < 0 {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            rest = &rest[n as usize..];
        }
    }
    Ok(())
}

/// Receives up to `buf.len()` bytes and any descriptors attached to them (close-on-exec set).
/// Returns the byte count (0: the peer closed) and the descriptors. Descriptors beyond what the
/// buffer holds would be lost: the call fails then (MSG_CTRUNC) after closing those received.
pub fn recv_fds(sock: RawFd, buf: &mut [u8], max_fds: usize) -> io::Result<(usize, Vec<OwnedFd>)> {
    let max_fds = max_fds.min(MAX_FDS);
    // SAFETY: arithmetic.
    let space = unsafe { libc::CMSG_SPACE((max_fds * 4) as u32) } as usize;
    let mut control = vec![0u64; space.div_ceil(8).max(1)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: zeroed msghdr is valid.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space as _;
    let n = loop {
        // SAFETY: msg points to live buffers.
        let n = unsafe { libc::recvmsg(sock, &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        break n as usize;
    };
    let mut fds = Vec::new();
    // SAFETY: the kernel filled msg_control up to msg_controllen with well-formed headers; the
    // CMSG_* macros walk them within that length.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(&msg);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let data = libc::CMSG_DATA(c);
                let len = (*c).cmsg_len as usize - (data as usize - c as usize);
                for i in 0..len / 4 {
                    let fd = std::ptr::read_unaligned(data.add(i * 4).cast::<RawFd>());
                    // The kernel installed this descriptor in our table for us to own.
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            c = libc::CMSG_NXTHDR(&msg, c);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("more descriptors arrived than the {max_fds} expected"),
        ));
    }
    Ok((n, fds))
}

/// The process id and user id of the process at the other end of a connected Unix socket, as
/// the kernel recorded them when it connected (SO_PEERCRED): not something the peer can forge.
pub fn peer_cred(sock: RawFd) -> io::Result<(u32, u32)> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes into `cred`.
    cvt(unsafe {
        libc::getsockopt(
            sock,
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    })?;
    Ok((cred.pid as u32, cred.uid))
}

/// This process's real user id.
pub fn uid() -> u32 {
    // SAFETY: getuid cannot fail.
    unsafe { libc::getuid() }
}

/// A descriptor for process `pid` (Linux 5.3+) that becomes readable when the process ends. Open
/// it while the process is known to run: it then names that process and no later one that
/// reuses the id.
pub fn pidfd_open(pid: u32) -> io::Result<OwnedFd> {
    // SAFETY: plain syscall with integer arguments.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a fresh descriptor we own (pidfd_open sets close-on-exec).
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Waits until one of `fds` is readable (or hung up) or `timeout` passes (None: forever).
/// Returns the indices of those that are.
pub fn poll_any(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<usize>> {
    let mut p: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms = timeout.map_or(-1, |t| t.as_millis().min(i32::MAX as u128) as libc::c_int);
    loop {
        // SAFETY: a live array of pollfds of the length given.
        let rc = unsafe { libc::poll(p.as_mut_ptr(), p.len() as libc::nfds_t, ms) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        return Ok(p
            .iter()
            .enumerate()
            .filter(|(_, q)| q.revents != 0)
            .map(|(i, _)| i)
            .collect());
    }
}

/// Whether the process behind a pidfd has ended (without waiting).
pub fn pidfd_ended(fd: &OwnedFd) -> bool {
    crate::poll_readable(fd.as_raw_fd(), Duration::ZERO)
}

/// Sets signal `sig` to be ignored (e.g. the SIGUSR1 Hydra's `-disable-auto-cleanup` sends the
/// survivors of a failed rank, which would otherwise end them before they could report).
pub fn ignore_signal(sig: libc::c_int) -> io::Result<()> {
    // SAFETY: installing SIG_IGN has no handler code to be unsafe in.
    if unsafe { libc::signal(sig, libc::SIG_IGN) } == libc::SIG_ERR {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

// membarrier(2) commands (linux/membarrier.h).
const MEMBARRIER_CMD_QUERY: libc::c_long = 0;
const MEMBARRIER_CMD_GLOBAL_EXPEDITED: libc::c_long = 1 << 1;
const MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED: libc::c_long = 1 << 2;
const MEMBARRIER_CMD_PRIVATE_EXPEDITED: libc::c_long = 1 << 3;
const MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED: libc::c_long = 1 << 4;

/// Registers this process for [`membarrier_private`]. False where the kernel (or a seccomp
/// filter) offers no expedited private membarrier.
pub fn membarrier_register_private() -> bool {
    membarrier_register(
        MEMBARRIER_CMD_PRIVATE_EXPEDITED,
        MEMBARRIER_CMD_REGISTER_PRIVATE_EXPEDITED,
    )
}

/// Asks the kernel whether it offers membarrier command `cmd` and its registration `register`,
/// and registers this process for it if so.
fn membarrier_register(cmd: libc::c_long, register: libc::c_long) -> bool {
    // SAFETY: plain syscalls with integer arguments.
    let cmds = unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0) };
    if cmds < 0 || cmds & (cmd | register) != cmd | register {
        return false;
    }
    // SAFETY: as above.
    unsafe { libc::syscall(libc::SYS_membarrier, register, 0, 0) == 0 }
}

/// A full memory barrier on every running thread of this process before this returns (a
/// thread that is not running passes one when it is switched back in): the heavy side of an
/// asymmetric handshake within the process. Needs [`membarrier_register_private`] first; false
/// if the kernel refused.
pub fn membarrier_private() -> bool {
    // SAFETY: plain syscall with integer arguments.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_PRIVATE_EXPEDITED, 0, 0) == 0 }
}

/// Registers this process for [`membarrier_global`]: from now on another registered process's
/// call makes every thread of this one that runs execute a full memory barrier. False where the
/// kernel (or a seccomp filter) offers no expedited global membarrier.
pub fn membarrier_register_global() -> bool {
    membarrier_register(
        MEMBARRIER_CMD_GLOBAL_EXPEDITED,
        MEMBARRIER_CMD_REGISTER_GLOBAL_EXPEDITED,
    )
}

/// A full memory barrier on every running thread of every process registered with
/// [`membarrier_register_global`] (this one's included), before this returns: the heavy side
/// of an asymmetric handshake whose light side is a compiler barrier. False if the kernel
/// refused (the caller must then not rely on it).
pub fn membarrier_global() -> bool {
    // SAFETY: plain syscall with integer arguments.
    unsafe { libc::syscall(libc::SYS_membarrier, MEMBARRIER_CMD_GLOBAL_EXPEDITED, 0, 0) == 0 }
}
