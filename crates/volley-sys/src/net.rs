//! The network system calls: batched UDP (sendmmsg/recvmmsg), AF_PACKET sockets with mmap'd
//! packet rings, interface lookup, and poll over several descriptors.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

// The per-packet system calls go to the kernel directly (`syscall(2)`), not through glibc's
// wrappers: recvmmsg, sendmmsg, send and sendto are cancellation points, and in a process with
// more than one thread (volley's liveness thread) glibc brackets each with
// `__pthread_enable_asynccancel`/`__pthread_disable_asynccancel`: 7% of a rank's time while
// it busy-polls a UDP socket (perf, 2-core VM), for a cancellation volley never uses. They
// return -1 with errno set on failure, as the wrappers do.

/// A zero-length, non-blocking send on `fd`: asks the kernel to send what a mapped transmit
/// ring (AF_PACKET's, AF_XDP's) holds.
pub(crate) fn kick_tx(fd: RawFd) -> libc::c_int {
    // SAFETY: no buffer and no address: the kernel reads nothing from this process's memory.
    unsafe {
        libc::syscall(
            libc::SYS_sendto,
            fd,
            std::ptr::null::<libc::c_void>(),
            0usize,
            libc::MSG_DONTWAIT,
            std::ptr::null::<libc::sockaddr>(),
            0 as libc::socklen_t,
        ) as libc::c_int
    }
}

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

pub(crate) fn setsockopt<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &T,
) -> io::Result<()> {
    // SAFETY: v points to a live T of the size given.
    cvt(unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    })
    .map(|_| ())
}

fn sockaddr_in(a: SocketAddrV4) -> libc::sockaddr_in {
    libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: a.port().to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(a.ip().octets()),
        },
        sin_zero: [0; 8],
    }
}

fn from_sockaddr_in(a: &libc::sockaddr_in) -> SocketAddrV4 {
    SocketAddrV4::new(
        Ipv4Addr::from(a.sin_addr.s_addr.to_ne_bytes()),
        u16::from_be(a.sin_port),
    )
}

/// A non-blocking UDP socket bound to `addr` (port 0: any), with `bufsize` bytes of socket
/// buffers if the kernel allows (as root, beyond the sysctl limits).
pub fn udp_socket(addr: SocketAddrV4, bufsize: usize) -> io::Result<OwnedFd> {
    udp_socket_with(addr, bufsize, bufsize)
}

/// Like [`udp_socket`], with a receive buffer of `rcvbuf` bytes and a send buffer of `sndbuf`.
pub fn udp_socket_with(addr: SocketAddrV4, rcvbuf: usize, sndbuf: usize) -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let fd = cvt(unsafe {
        libc::socket(
            libc::AF_INET,
            libc::SOCK_DGRAM | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
            0,
        )
    })?;
    // SAFETY: fd was just returned by socket(2) and is ours.
    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
    for (force, plain, sz) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF, rcvbuf as libc::c_int),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF, sndbuf as libc::c_int),
    ] {
        if setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, force, &sz).is_err() {
            let _ = setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, plain, &sz);
        }
    }
    let sa = sockaddr_in(addr);
    let (p, len) = sockaddr_ptr(&sa);
    // SAFETY: p points at sa, a valid sockaddr_in of len bytes.
    cvt(unsafe { libc::bind(fd.as_raw_fd(), p, len) })?;
    Ok(fd)
}

/// `sa` as the generic address pointer and length the socket calls take.
fn sockaddr_ptr(sa: &libc::sockaddr_in) -> (*const libc::sockaddr, libc::socklen_t) {
    (
        sa as *const libc::sockaddr_in as *const libc::sockaddr,
        std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
    )
}

/// Connects UDP socket `fd` to `to`: its datagrams then come only from there, and sends to it
/// use the route found now. (Not undone here: dissolving it unbinds a port the kernel chose.)
pub fn connect_udp(fd: RawFd, to: SocketAddrV4) -> io::Result<()> {
    let sa = sockaddr_in(to);
    let (p, len) = sockaddr_ptr(&sa);
    // SAFETY: p points at sa, a valid sockaddr_in of len bytes.
    cvt(unsafe { libc::connect(fd, p, len) })?;
    Ok(())
}

/// The address a socket is bound to.
pub fn local_addr(fd: RawFd) -> io::Result<SocketAddrV4> {
    // SAFETY: an all-zero sockaddr_in is valid; getsockname writes at most len bytes.
    let mut sa: libc::sockaddr_in = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    cvt(unsafe {
        libc::getsockname(
            fd,
            &mut sa as *mut libc::sockaddr_in as *mut libc::sockaddr,
            &mut len,
        )
    })?;
    Ok(from_sockaddr_in(&sa))
}

/// Most packets the kernel takes in one UDP segmentation-offload send (UDP_MAX_SEGMENTS of
/// the kernels that introduced it; newer ones take more).
pub const GSO_MAX_SEGMENTS: usize = 64;
/// Most payload bytes of one UDP datagram over IPv4: the limit for a whole GSO send, and the
/// largest datagram GRO hands over.
pub const UDP_MAX_PAYLOAD: usize = 65_507;

/// Room for one control message of up to 8 bytes of data (CMSG_SPACE(8) is 24 on 64-bit
/// Linux), aligned as a cmsghdr must be.
type Ctrl = [u64; 4];
const CTRL_LEN: usize = std::mem::size_of::<Ctrl>();

/// Enables UDP generic receive offload on a socket: the kernel may hand over several packets
/// of one sender, of equal size, as one datagram, and says their size in a control message.
pub fn enable_udp_gro(fd: RawFd) -> io::Result<()> {
    setsockopt(fd, libc::SOL_UDP, libc::UDP_GRO, &(1 as libc::c_int))
}

/// Turns UDP_GRO off again on `fd` (see [`enable_udp_gro`]).
pub fn disable_udp_gro(fd: RawFd) -> io::Result<()> {
    setsockopt(fd, libc::SOL_UDP, libc::UDP_GRO, &(0 as libc::c_int))
}

/// Points each message header at its own iovec and address, once (the vectors are never
/// resized again, so the pointers stay valid for the life of the batch that owns them).
fn link_headers(
    hdrs: &mut [libc::mmsghdr],
    iovs: &mut [libc::iovec],
    addrs: &mut [libc::sockaddr_in],
) {
    for ((h, iov), a) in hdrs.iter_mut().zip(iovs.iter_mut()).zip(addrs.iter_mut()) {
        h.msg_hdr.msg_iov = iov;
        h.msg_hdr.msg_iovlen = 1;
        h.msg_hdr.msg_name = a as *mut libc::sockaddr_in as *mut libc::c_void;
        h.msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
    }
}

/// One send of a [`UdpTx`] batch: packets to one address laid end to end, all `seg` bytes but
/// the last (which may be shorter); several packets go as one segmentation-offload send.
#[derive(Clone, Copy)]
struct Entry {
    to: SocketAddrV4,
    start: usize,
    seg: usize,
    count: usize,
    total: usize,
    /// Its last packet was shorter than `seg`: nothing more may join.
    closed: bool,
}

/// A batch of outgoing UDP packets written end to end into one preallocated arena, sent with
/// one sendmmsg. With segmentation offload (GSO) on, consecutive packets to one address that
/// share a size (the last may be shorter) go as one send carrying a UDP_SEGMENT control
/// message: the kernel (or the NIC) cuts it into datagrams, so a window of full-size packets
/// crosses the stack once instead of once per packet. A lone packet goes as a plain datagram.
/// Nothing is allocated per batch.
pub struct UdpTx {
    arena: Vec<u8>,
    max_packet: usize,
    gso: bool,
    ents: Vec<Entry>,
    addrs: Vec<libc::sockaddr_in>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    ctrl: Vec<Ctrl>,
    /// Entries in use, the first not yet sent, bytes of the arena in use, packets in the batch.
    n: usize,
    first: usize,
    end: usize,
    packets: usize,
    /// Sends of several packets the kernel took, since the batch was made.
    gso_sent: u64,
    /// The address the socket is connected to, if any: a lone packet to it goes without one.
    connected: Option<SocketAddrV4>,
}

// SAFETY: the raw pointers in the headers point into the batch's own vectors (heap memory that
// moves with it, not with the thread); nothing refers to thread-local state.
unsafe impl Send for UdpTx {}

impl UdpTx {
    /// Room for `packets` packets of up to `max_packet` bytes; `gso`: join packets into
    /// segmentation-offload sends.
    pub fn new(packets: usize, max_packet: usize, gso: bool) -> UdpTx {
        let packets = packets.max(1);
        let mut b = UdpTx {
            arena: vec![0u8; packets * max_packet],
            max_packet,
            gso,
            ents: vec![
                Entry {
                    to: SocketAddrV4::new(Ipv4Addr::UNSPECIFIED, 0),
                    start: 0,
                    seg: 0,
                    count: 0,
                    total: 0,
                    closed: false,
                };
                packets
            ],
            // SAFETY: all-zero sockaddr_in, iovec and mmsghdr are valid values.
            addrs: vec![unsafe { std::mem::zeroed() }; packets],
            iovs: vec![unsafe { std::mem::zeroed() }; packets],
            hdrs: vec![unsafe { std::mem::zeroed() }; packets],
            ctrl: vec![[0; 4]; packets],
            n: 0,
            first: 0,
            end: 0,
            packets: 0,
            gso_sent: 0,
            connected: None,
        };
        link_headers(&mut b.hdrs, &mut b.iovs, &mut b.addrs);
        b
    }

    /// Whether packets are joined into segmentation-offload sends.
    pub fn gso(&self) -> bool {
        self.gso
    }

    /// Turns joining off (the kernel refused a GSO send) or on, for packets added from now on.
    pub fn set_gso(&mut self, on: bool) {
        self.gso = on;
    }

    /// Whether packets wait in the batch (none added since the last complete send, or some the
    /// kernel had no room for).
    pub fn is_empty(&self) -> bool {
        self.first == self.n
    }

    /// Whether no packet has been added since the batch was last emptied: only then may more
    /// be added (packets the kernel had no room for go first, alone).
    pub fn filling(&self) -> bool {
        self.first == 0
    }

    /// The buffer for the next packet (`max_packet` bytes), if the batch has room for one.
    pub fn room(&mut self) -> Option<&mut [u8]> {
        if self.first != 0
            || self.packets == self.ents.len()
            || self.arena.len() - self.end < self.max_packet
        {
            return None;
        }
        Some(&mut self.arena[self.end..self.end + self.max_packet])
    }

    /// Adds the packet of `len` bytes just written into [`UdpTx::room`]'s buffer, for `to`.
    pub fn push(&mut self, to: SocketAddrV4, len: usize) {
        self.push_run(to, len, GSO_MAX_SEGMENTS)
    }

    /// Like [`UdpTx::push`], joining the packet to the send before it only while that send
    /// holds fewer than `run` packets (the sender's burst limit: see `volley_proto`'s
    /// `Transmit::burst`).
    pub fn push_run(&mut self, to: SocketAddrV4, len: usize, run: usize) {
        assert!(
            len <= self.max_packet && self.room().is_some(),
            "push without room"
        );
        self.packets += 1;
        let start = self.end;
        self.end += len;
        if self.gso && self.n > 0 {
            let e = &mut self.ents[self.n - 1];
            if e.to == to
                && !e.closed
                && len <= e.seg
                && e.count < GSO_MAX_SEGMENTS.min(run)
                && e.total + len <= UDP_MAX_PAYLOAD
            {
                e.count += 1;
                e.total += len;
                e.closed = len < e.seg;
                return;
            }
        }
        self.ents[self.n] = Entry {
            to,
            start,
            seg: len,
            count: 1,
            total: len,
            closed: false,
        };
        self.n += 1;
    }

    /// Sends what waits; returns how many packets the kernel took (it may take fewer, 0 when
    /// its buffer is full: the rest waits for the next call). Never blocks. An error leaves
    /// the batch as it was: [`UdpTx::front_is_gso`] says whether the refused send was a GSO
    /// one, which [`UdpTx::split`] can turn into plain datagrams.
    pub fn send(&mut self, fd: RawFd) -> io::Result<usize> {
        let (first, n) = (self.first, self.n);
        if first == n {
            return Ok(0);
        }
        if n - first == 1 && self.ents[first].count == 1 {
            return self.send_lone(fd);
        }
        for i in first..n {
            let e = self.ents[i];
            self.addrs[i] = sockaddr_in(e.to);
            self.iovs[i].iov_base = self.arena[e.start..].as_mut_ptr() as *mut libc::c_void;
            self.iovs[i].iov_len = e.total;
            let h = &mut self.hdrs[i].msg_hdr;
            if e.count > 1 {
                let c = &mut self.ctrl[i];
                *c = [0; 4];
                h.msg_control = c.as_mut_ptr() as *mut libc::c_void;
                // SAFETY: CMSG_SPACE is arithmetic.
                h.msg_controllen = unsafe { libc::CMSG_SPACE(2) } as usize;
                // SAFETY: msg_control points at CTRL_LEN bytes, aligned for a cmsghdr, which
                // hold CMSG_SPACE(2) (checked by the assertion); the header and its 2 data bytes
                // are written inside them.
                unsafe {
                    debug_assert!(libc::CMSG_SPACE(2) as usize <= CTRL_LEN);
                    let cm = libc::CMSG_FIRSTHDR(h);
                    (*cm).cmsg_level = libc::SOL_UDP;
                    (*cm).cmsg_type = libc::UDP_SEGMENT;
                    (*cm).cmsg_len = libc::CMSG_LEN(2) as usize;
                    (libc::CMSG_DATA(cm) as *mut u16).write_unaligned(e.seg as u16);
                }
            } else {
                h.msg_control = std::ptr::null_mut();
                h.msg_controllen = 0;
            }
        }
        // SAFETY: hdrs[first..n] point into this batch's live arena, addresses, iovecs and
        // control buffers.
        let r = unsafe {
            libc::syscall(
                libc::SYS_sendmmsg,
                fd,
                self.hdrs[first..].as_mut_ptr(),
                (n - first) as libc::c_uint,
                libc::MSG_DONTWAIT,
            ) as libc::c_int
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(e);
        }
        let done = first + r as usize;
        let sent = self.ents[first..done].iter().map(|e| e.count).sum();
        self.gso_sent += self.ents[first..done]
            .iter()
            .filter(|e| e.count > 1)
            .count() as u64;
        self.first = done;
        if done == n {
            self.emptied();
        }
        Ok(sent)
    }

    /// The one datagram waiting, through sendto: the kernel copies in no message header or
    /// scatter list (sendmmsg's), a shorter path for the lone packet of a ping-pong.
    fn send_lone(&mut self, fd: RawFd) -> io::Result<usize> {
        let e = self.ents[self.first];
        let to = sockaddr_in(e.to);
        let (addr, alen) = if self.connected == Some(e.to) {
            // The connected socket's route, found once at connect(2): none looked up per send.
            (std::ptr::null(), 0)
        } else {
            sockaddr_ptr(&to)
        };
        // SAFETY: the packet is `e.total` bytes of this batch's live arena from `e.start`; the
        // address is a sockaddr_in of the length given.
        let r = unsafe {
            libc::sendto(
                fd,
                self.arena[e.start..].as_ptr() as *const libc::c_void,
                e.total,
                libc::MSG_DONTWAIT,
                addr,
                alen,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(e);
        }
        self.emptied();
        Ok(1)
    }

    /// Everything in the batch went: it starts over empty.
    fn emptied(&mut self) {
        self.first = 0;
        self.n = 0;
        self.end = 0;
        self.packets = 0;
    }

    /// Tells the batch the socket is now connected to `to` (or to nothing).
    pub fn set_connected(&mut self, to: Option<SocketAddrV4>) {
        self.connected = to;
    }

    /// The address the socket is connected to, if any (see [`UdpTx::set_connected`]).
    pub fn connected(&self) -> Option<SocketAddrV4> {
        self.connected
    }

    /// Whether the next send waiting carries several packets (a GSO send).
    pub fn front_is_gso(&self) -> bool {
        self.first < self.n && self.ents[self.first].count > 1
    }

    /// Sends of several packets (GSO sends) the kernel took, since the batch was made.
    pub fn gso_sends(&self) -> u64 {
        self.gso_sent
    }

    /// Turns every send waiting into plain datagrams, one per packet, in order, and stops
    /// joining: for a kernel or path that refuses segmentation offload.
    pub fn split(&mut self) {
        self.gso = false;
        let waiting: Vec<Entry> = self.ents[self.first..self.n].to_vec();
        let mut k = 0;
        for e in waiting {
            for j in 0..e.count {
                let start = e.start + j * e.seg;
                let len = if j + 1 == e.count {
                    e.total - j * e.seg
                } else {
                    e.seg
                };
                self.ents[k] = Entry {
                    to: e.to,
                    start,
                    seg: len,
                    count: 1,
                    total: len,
                    closed: false,
                };
                k += 1;
            }
        }
        // Entries before `first` were sent; the split ones start at 0 (filling stays off until
        // the batch is empty, as `first` is set to the start of the waiting ones).
        self.first = 0;
        self.n = k;
        // Not filling until these are sent (the arena's tail may sit after earlier, sent
        // packets): no room until then.
        self.end = if k > 0 { self.arena.len() } else { 0 };
        if k == 0 {
            self.packets = 0;
        }
    }
}

/// Preallocated buffers, addresses and control space for recvmmsg: one batch of `n` datagrams
/// of up to `slot` bytes each, set up once so that receiving allocates nothing. With GRO on
/// the socket ([`enable_udp_gro`]) a datagram may hold several packets of one sender;
/// [`UdpRx::seg_size`] says their size.
pub struct UdpRx {
    bufs: Vec<u8>,
    slot: usize,
    /// Headers the last receive filled (the kernel writes back into those only): the next
    /// receive resets these, not the whole batch (a busy-polled receive finds nothing most
    /// times, and resetting 64 headers each time was a tenth of its pass).
    used: usize,
    addrs: Vec<libc::sockaddr_in>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
    ctrl: Vec<Ctrl>,
}

// SAFETY: as for UdpTx.
unsafe impl Send for UdpRx {}

impl UdpRx {
    pub fn new(n: usize, slot: usize) -> UdpRx {
        let mut b = UdpRx {
            bufs: vec![0u8; n * slot],
            slot,
            used: n,
            // SAFETY: all-zero sockaddr_in, iovec and mmsghdr are valid values.
            addrs: vec![unsafe { std::mem::zeroed() }; n],
            iovs: vec![unsafe { std::mem::zeroed() }; n],
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
            ctrl: vec![[0; 4]; n],
        };
        link_headers(&mut b.hdrs, &mut b.iovs, &mut b.addrs);
        for i in 0..n {
            b.iovs[i].iov_base = b.bufs[i * slot..].as_mut_ptr() as *mut libc::c_void;
            b.hdrs[i].msg_hdr.msg_control = b.ctrl[i].as_mut_ptr() as *mut libc::c_void;
        }
        b
    }

    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    /// The `i`-th datagram received by the last [`UdpRx::recv`].
    pub fn packet(&self, i: usize) -> &[u8] {
        let len = (self.hdrs[i].msg_len as usize).min(self.slot);
        &self.bufs[i * self.slot..i * self.slot + len]
    }

    /// [`UdpRx::packet`], writable until the next [`UdpRx::recv`] (so that a layer above can
    /// open it in place instead of copying it out first).
    pub fn packet_mut(&mut self, i: usize) -> &mut [u8] {
        let len = (self.hdrs[i].msg_len as usize).min(self.slot);
        &mut self.bufs[i * self.slot..i * self.slot + len]
    }

    /// Whether the `i`-th datagram was longer than its buffer (the rest is lost).
    pub fn truncated(&self, i: usize) -> bool {
        self.hdrs[i].msg_hdr.msg_flags & libc::MSG_TRUNC != 0
            || self.hdrs[i].msg_len as usize > self.slot
    }

    /// Where the `i`-th datagram came from.
    pub fn source(&self, i: usize) -> SocketAddrV4 {
        from_sockaddr_in(&self.addrs[i])
    }

    /// The size of the packets the kernel coalesced into the `i`-th datagram (all but the last,
    /// which may be shorter), if it coalesced several.
    pub fn seg_size(&self, i: usize) -> Option<usize> {
        let h = &self.hdrs[i].msg_hdr;
        if h.msg_controllen == 0 {
            return None;
        }
        // SAFETY: the kernel wrote msg_controllen bytes of well-formed control messages into
        // this entry's control buffer; CMSG_FIRSTHDR/NXTHDR stay inside it.
        unsafe {
            let mut cm = libc::CMSG_FIRSTHDR(h);
            while !cm.is_null() {
                if (*cm).cmsg_level == libc::SOL_UDP && (*cm).cmsg_type == libc::UDP_GRO {
                    let v = (libc::CMSG_DATA(cm) as *const libc::c_int).read_unaligned();
                    return (v > 0).then_some(v as usize);
                }
                cm = libc::CMSG_NXTHDR(h, cm);
            }
        }
        None
    }

    /// Makes ready the headers the last receive may have written to (the first always: a
    /// failed receive may have written to it).
    fn reset(&mut self) {
        for i in 0..self.used.clamp(1, self.hdrs.len()) {
            self.iovs[i].iov_len = self.slot;
            let h = &mut self.hdrs[i].msg_hdr;
            h.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
            h.msg_controllen = CTRL_LEN;
            h.msg_flags = 0;
        }
    }

    /// What a receive that returned -1 means: 0 datagrams when none was waiting, else the
    /// error (read from errno first). Either way the next receive resets the first header only.
    fn failed(&mut self) -> io::Result<usize> {
        let e = io::Error::last_os_error();
        self.used = 1;
        if e.kind() == io::ErrorKind::WouldBlock {
            return Ok(0);
        }
        Err(e)
    }

    /// Receives up to a batch of datagrams without blocking; 0 when none is waiting.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        self.reset();
        // SAFETY: hdrs point into this batch's live buffers, addresses and control space; the
        // kernel writes at most iov_len bytes per buffer, msg_namelen bytes per address and
        // msg_controllen bytes of control messages.
        let r = unsafe {
            libc::syscall(
                libc::SYS_recvmmsg,
                fd,
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut::<libc::timespec>(),
            ) as libc::c_int
        };
        if r < 0 {
            return self.failed();
        }
        self.used = r as usize;
        Ok(r as usize)
    }

    /// Receives at most one datagram (into the batch's first place) without blocking; 0 when
    /// none is waiting. For a socket polled while nothing comes: the kernel finds an empty
    /// queue sooner through recvmsg than through recvmmsg (0.5 against 0.9 us on the
    /// development VM, under syscall tracing), and that shortens every pass of a busy wait,
    /// so the pass that finds a message starts sooner after it arrives.
    pub fn recv_one(&mut self, fd: RawFd) -> io::Result<usize> {
        self.reset();
        // SAFETY: the first header points into this batch's live buffer, address and control
        // space, with the lengths `reset` set.
        let r = unsafe {
            libc::syscall(
                libc::SYS_recvmsg,
                fd,
                &mut self.hdrs[0].msg_hdr as *mut libc::msghdr,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            return self.failed();
        }
        self.hdrs[0].msg_len = r as libc::c_uint;
        self.used = 1;
        Ok(1)
    }

    /// [`UdpRx::recv_one`] through recvfrom, which takes no message header, scatter list or
    /// control messages (the kernel copies none of them in): a shorter pass for a busy wait.
    /// Only for a socket that coalesces nothing (UDP GRO off, and no datagram coalesced before
    /// it was turned off still queued): no control message says a segment size.
    pub fn recv_one_plain(&mut self, fd: RawFd) -> io::Result<usize> {
        let mut alen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // SAFETY: the first slot of the live buffer is `slot` bytes long and the first address
        // is a sockaddr_in of `alen` bytes; with MSG_TRUNC the kernel writes at most `slot`
        // bytes and returns the datagram's real length.
        let r = unsafe {
            libc::recvfrom(
                fd,
                self.bufs.as_mut_ptr() as *mut libc::c_void,
                self.slot,
                libc::MSG_DONTWAIT | libc::MSG_TRUNC,
                &mut self.addrs[0] as *mut libc::sockaddr_in as *mut libc::sockaddr,
                &mut alen,
            )
        };
        if r < 0 {
            return self.failed();
        }
        let h = &mut self.hdrs[0];
        // `truncated` reads a length beyond the slot; `seg_size` finds no control message.
        h.msg_len = r as libc::c_uint;
        h.msg_hdr.msg_controllen = 0;
        h.msg_hdr.msg_flags = 0;
        self.used = 1;
        Ok(1)
    }
}

/// An interface: name, index, hardware address, MTU, first IPv4 address.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Interface {
    pub name: String,
    pub index: u32,
    pub mac: [u8; 6],
    pub mtu: u32,
    pub ipv4: Option<Ipv4Addr>,
    pub up: bool,
    pub loopback: bool,
    /// The driver's name as ethtool gives it ("veth", "mlx5_core", ...), empty if unknown.
    pub driver: String,
}

fn ifreq(name: &str) -> io::Result<libc::ifreq> {
    // SAFETY: an all-zero ifreq is valid.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    if name.len() >= r.ifr_name.len() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "interface name too long",
        ));
    }
    for (d, s) in r.ifr_name.iter_mut().zip(name.bytes()) {
        *d = s as libc::c_char;
    }
    Ok(r)
}

const ETHTOOL_GDRVINFO: u32 = 3;

/// struct ethtool_drvinfo: the command, then the driver's name first of five 32-byte strings.
#[repr(C)]
struct DrvInfo {
    cmd: u32,
    driver: [u8; 32],
    rest: [u8; 4 * 32 + 12 + 5 * 4],
}

/// The driver of interface `name` (SIOCETHTOOL, ETHTOOL_GDRVINFO), through socket `s`.
fn driver(s: RawFd, name: &str) -> Option<String> {
    let mut info = DrvInfo {
        cmd: ETHTOOL_GDRVINFO,
        driver: [0; 32],
        rest: [0; 4 * 32 + 12 + 5 * 4],
    };
    let mut r = ifreq(name).ok()?;
    r.ifr_ifru.ifru_data = &mut info as *mut DrvInfo as *mut libc::c_char;
    // SAFETY: SIOCETHTOOL with ETHTOOL_GDRVINFO fills the ethtool_drvinfo r points to, which
    // lives across the call.
    if unsafe { libc::ioctl(s, libc::SIOCETHTOOL, &mut r) } != 0 {
        return None;
    }
    let end = info.driver.iter().position(|&b| b == 0).unwrap_or(32);
    Some(String::from_utf8_lossy(&info.driver[..end]).into_owned())
}

/// The interfaces of this network namespace.
pub fn interfaces() -> io::Result<Vec<Interface>> {
    let mut out: Vec<Interface> = Vec::new();
    let mut ifa: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs allocates a list we free below.
    cvt(unsafe { libc::getifaddrs(&mut ifa) })?;
    let mut p = ifa;
    while !p.is_null() {
        // SAFETY: p is a node of the list getifaddrs returned, alive until freeifaddrs.
        let a = unsafe { &*p };
        let name = unsafe { std::ffi::CStr::from_ptr(a.ifa_name) }
            .to_string_lossy()
            .into_owned();
        if !out.iter().any(|i| i.name == name) {
            out.push(Interface {
                name: name.clone(),
                index: 0,
                mac: [0; 6],
                mtu: 0,
                ipv4: None,
                up: a.ifa_flags & libc::IFF_UP as u32 != 0,
                loopback: a.ifa_flags & libc::IFF_LOOPBACK as u32 != 0,
                driver: String::new(),
            });
        }
        if !a.ifa_addr.is_null() && unsafe { (*a.ifa_addr).sa_family } as i32 == libc::AF_INET {
            // SAFETY: the family says it is a sockaddr_in.
            let sin = unsafe { &*(a.ifa_addr as *const libc::sockaddr_in) };
            let ip = from_sockaddr_in(sin).ip().to_owned();
            if let Some(i) = out.iter_mut().find(|i| i.name == name) {
                i.ipv4.get_or_insert(ip);
            }
        }
        p = a.ifa_next;
    }
    // SAFETY: ifa came from getifaddrs.
    unsafe { libc::freeifaddrs(ifa) };
    // SAFETY: a throwaway datagram socket for the ioctls.
    let s = cvt(unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) })?;
    let s = unsafe { OwnedFd::from_raw_fd(s) };
    for i in out.iter_mut() {
        let mut r = ifreq(&i.name)?;
        // SAFETY: SIOCGIFINDEX, SIOCGIFHWADDR and SIOCGIFMTU fill the union of r.
        unsafe {
            if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFINDEX, &mut r) == 0 {
                i.index = r.ifr_ifru.ifru_ifindex as u32;
            }
            if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFHWADDR, &mut r) == 0 {
                let d = r.ifr_ifru.ifru_hwaddr.sa_data;
                for (m, b) in i.mac.iter_mut().zip(d.iter()) {
                    *m = *b as u8;
                }
            }
            if libc::ioctl(s.as_raw_fd(), libc::SIOCGIFMTU, &mut r) == 0 {
                i.mtu = r.ifr_ifru.ifru_mtu as u32;
            }
        }
        i.driver = driver(s.as_raw_fd(), &i.name).unwrap_or_default();
    }
    Ok(out)
}

/// Waits until one of `fds` (at most 4) is readable or `timeout_ns` passes (None: forever).
/// Returns which are readable: bit k for `fds[k]`, 0 when none (a timeout; EINTR counts as one).
pub fn poll_any(fds: &[RawFd], timeout_ns: Option<u64>) -> u32 {
    let mut p = [libc::pollfd {
        fd: -1,
        events: 0,
        revents: 0,
    }; 4];
    let n = fds.len().min(4);
    for (k, fd) in fds.iter().take(n).enumerate() {
        p[k] = libc::pollfd {
            fd: *fd,
            events: libc::POLLIN,
            revents: 0,
        };
    }
    let ts = timeout_ns.map(|t| libc::timespec {
        tv_sec: (t / 1_000_000_000) as libc::time_t,
        tv_nsec: (t % 1_000_000_000) as libc::c_long,
    });
    // SAFETY: p[..n] are valid pollfds; ts lives across the call.
    let r = unsafe {
        libc::ppoll(
            p.as_mut_ptr(),
            n as libc::nfds_t,
            ts.as_ref()
                .map_or(std::ptr::null(), |t| t as *const libc::timespec),
            std::ptr::null(),
        )
    };
    if r <= 0 {
        return 0;
    }
    (0..n)
        .filter(|&k| p[k].revents != 0)
        .fold(0, |m, k| m | 1 << k)
}

// The AF_PACKET ring ABI (linux/if_packet.h), stable since 2.6.
const SOL_PACKET: libc::c_int = 263;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_LOSS: libc::c_int = 14;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V2: libc::c_int = 1;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_WRONG_FORMAT: u32 = 4;
/// Bytes of struct tpacket2_hdr, aligned: where a transmitted frame's data starts.
const TPACKET2_HDR: usize = 32;

#[repr(C)]
struct TpacketReq {
    block_size: u32,
    block_nr: u32,
    frame_size: u32,
    frame_nr: u32,
}

/// A raw Ethernet socket for one EtherType on one interface, with a receive and a transmit
/// ring shared with the kernel (TPACKET_V2: the kernel hands over each frame as soon as it is
/// written; TPACKET_V3 hands over whole blocks, which holds a lone frame back until a block
/// timer of at least a millisecond fires — fatal to latency).
pub struct PacketRing {
    fd: OwnedFd,
    map: *mut u8,
    map_len: usize,
    frame: usize,
    rx_frames: usize,
    tx_frames: usize,
    rx_next: usize,
    tx_next: usize,
    /// Frames filled since the last kick.
    tx_unsent: usize,
    /// Frames the kernel refused as malformed (counted, then reused).
    pub tx_wrong_format: u64,
}

// SAFETY: the mapping belongs to the ring's socket, which any thread may use; the ring is used
// through &mut self, one thread at a time.
unsafe impl Send for PacketRing {}

impl PacketRing {
    /// Opens the socket on interface `ifindex` for `ethertype`, with rings of `frames` frames
    /// big enough for `mtu`-byte payloads. Needs CAP_NET_RAW.
    pub fn open(ifindex: u32, ethertype: u16, mtu: usize, frames: usize) -> io::Result<PacketRing> {
        // SAFETY: plain socket(2).
        let fd = cvt(unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                ethertype.to_be() as libc::c_int,
            )
        })?;
        // SAFETY: fd was just returned by socket(2).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        setsockopt(raw, SOL_PACKET, PACKET_VERSION, &TPACKET_V2)?;
        // Frames hold the header, the Ethernet header (and room for the kernel's alignment of
        // the network header), the payload; a multiple of 16.
        let frame = (TPACKET2_HDR + 64 + mtu)
            .next_multiple_of(16)
            .next_power_of_two();
        let block = frame.max(1 << 16);
        let per_block = block / frame;
        let blocks = frames.div_ceil(per_block).max(1);
        let nframes = blocks * per_block;
        let req = TpacketReq {
            block_size: block as u32,
            block_nr: blocks as u32,
            frame_size: frame as u32,
            frame_nr: nframes as u32,
        };
        setsockopt(raw, SOL_PACKET, PACKET_RX_RING, &req)?;
        setsockopt(raw, SOL_PACKET, PACKET_TX_RING, &req)?;
        // Skip frames the kernel cannot send instead of stopping the ring at them.
        let _ = setsockopt(raw, SOL_PACKET, PACKET_LOSS, &1i32);
        // Our own frames need not come back to us, nor wait in a queueing discipline.
        let _ = setsockopt(raw, SOL_PACKET, PACKET_IGNORE_OUTGOING, &1i32);
        let _ = setsockopt(raw, SOL_PACKET, PACKET_QDISC_BYPASS, &1i32);
        let map_len = 2 * blocks * block;
        // SAFETY: maps the two rings the kernel just allocated for this socket.
        let map = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED | libc::MAP_POPULATE,
                raw,
                0,
            )
        };
        if map == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ring = PacketRing {
            fd,
            map: map as *mut u8,
            map_len,
            frame,
            rx_frames: nframes,
            tx_frames: nframes,
            rx_next: 0,
            tx_next: 0,
            tx_unsent: 0,
            tx_wrong_format: 0,
        };
        // SAFETY: an all-zero sockaddr_ll is valid.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ethertype.to_be();
        sll.sll_ifindex = ifindex as i32;
        // SAFETY: sll is a valid sockaddr_ll of the size given.
        cvt(unsafe {
            libc::bind(
                raw,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        })?;
        Ok(ring)
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Largest frame (Ethernet header included) a transmit slot holds.
    pub fn max_frame(&self) -> usize {
        self.frame - TPACKET2_HDR
    }

    fn status(&self, frame: *mut u8) -> &AtomicU32 {
        // SAFETY: every frame starts with its 4-byte aligned tp_status, inside the mapping,
        // shared with the kernel: accessed atomically only.
        unsafe { &*(frame as *const AtomicU32) }
    }

    fn rx_frame(&self, i: usize) -> *mut u8 {
        // SAFETY: i < rx_frames; the RX ring is the first half of the mapping.
        unsafe { self.map.add(i * self.frame) }
    }

    fn tx_frame(&self, i: usize) -> *mut u8 {
        // SAFETY: i < tx_frames; the TX ring follows the RX ring.
        unsafe { self.map.add(self.map_len / 2 + i * self.frame) }
    }

    /// The next received frame (Ethernet header included), if the kernel has handed one over:
    /// writable, ours until [`PacketRing::rx_release`] gives it back.
    pub fn rx_peek(&mut self) -> Option<&mut [u8]> {
        let f = self.rx_frame(self.rx_next);
        // SYNC: Acquire; pairs with the kernel's release of the frame (smp_wmb before the
        // status store in __packet_set_status), so the frame's bytes are visible.
        if self.status(f).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the kernel has handed the frame to us (it writes it again only after
        // rx_release, which needs `&mut self`, so this slice is gone by then); tp_mac and
        // tp_snaplen are within it; the mapping is PROT_READ | PROT_WRITE.
        unsafe {
            let snaplen = (f.add(8) as *const u32).read() as usize;
            let mac = (f.add(12) as *const u16).read() as usize;
            let len = snaplen.min(self.frame.saturating_sub(mac));
            Some(std::slice::from_raw_parts_mut(f.add(mac), len))
        }
    }

    /// Gives the frame [`PacketRing::rx_peek`] returned back to the kernel.
    pub fn rx_release(&mut self) {
        let f = self.rx_frame(self.rx_next);
        // SYNC: Release: our reads of the frame happen before the kernel may reuse it.
        self.status(f).store(TP_STATUS_KERNEL, Ordering::Release);
        self.rx_next = (self.rx_next + 1) % self.rx_frames;
    }

    /// The next free transmit frame's data area, if the kernel has finished with it.
    pub fn tx_slot(&mut self) -> Option<&mut [u8]> {
        let f = self.tx_frame(self.tx_next);
        let st = self.status(f).load(Ordering::Acquire);
        if st == TP_STATUS_WRONG_FORMAT {
            self.tx_wrong_format += 1;
        } else if st != TP_STATUS_AVAILABLE {
            return None;
        }
        let max = self.max_frame();
        // SAFETY: the frame is ours until we set SEND_REQUEST; data starts after the header.
        Some(unsafe { std::slice::from_raw_parts_mut(f.add(TPACKET2_HDR), max) })
    }

    /// Hands the frame [`PacketRing::tx_slot`] returned to the kernel with `len` bytes.
    pub fn tx_commit(&mut self, len: usize) {
        let f = self.tx_frame(self.tx_next);
        // SAFETY: tp_len is at offset 4 of the frame we own.
        unsafe { (f.add(4) as *mut u32).write(len as u32) };
        // SYNC: Release: the frame's bytes and length are written before the kernel sees the
        // request.
        self.status(f)
            .store(TP_STATUS_SEND_REQUEST, Ordering::Release);
        self.tx_next = (self.tx_next + 1) % self.tx_frames;
        self.tx_unsent += 1;
    }

    /// Asks the kernel to send the committed frames (one system call for the batch).
    pub fn tx_kick(&mut self) -> io::Result<()> {
        if self.tx_unsent == 0 {
            return Ok(());
        }
        let r = kick_tx(self.fd.as_raw_fd());
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() != io::ErrorKind::WouldBlock {
                return Err(e);
            }
        }
        self.tx_unsent = 0;
        Ok(())
    }
}

impl Drop for PacketRing {
    fn drop(&mut self) {
        // SAFETY: map/map_len are the mapping made in open.
        unsafe { libc::munmap(self.map as *mut libc::c_void, self.map_len) };
    }
}

/// An epoll descriptor that becomes readable when any of `fds` is: one descriptor to poll for
/// several sources (a doorbell and a socket).
pub fn epoll_of(fds: &[RawFd]) -> io::Result<OwnedFd> {
    // SAFETY: plain epoll_create1.
    let ep = cvt(unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) })?;
    // SAFETY: ep was just returned and is ours.
    let ep = unsafe { OwnedFd::from_raw_fd(ep) };
    for &fd in fds {
        epoll_add(ep.as_raw_fd(), fd)?;
    }
    Ok(ep)
}

/// Adds `fd` to epoll set `ep`, watched for readability.
pub fn epoll_add(ep: RawFd, fd: RawFd) -> io::Result<()> {
    let mut ev = libc::epoll_event {
        events: libc::EPOLLIN as u32,
        u64: fd as u64,
    };
    // SAFETY: ev is a valid epoll_event; ep and fd are live descriptors of the caller's.
    cvt(unsafe { libc::epoll_ctl(ep, libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
    Ok(())
}
