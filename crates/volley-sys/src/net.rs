//! The network system calls: batched UDP (sendmmsg/recvmmsg), AF_PACKET sockets with mmap'd
//! packet rings, interface lookup, and poll over several descriptors.

use std::io;
use std::net::{Ipv4Addr, SocketAddrV4};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

fn cvt(r: libc::c_int) -> io::Result<libc::c_int> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> io::Result<()> {
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
    let sz = bufsize as libc::c_int;
    for (force, plain) in [
        (libc::SO_RCVBUFFORCE, libc::SO_RCVBUF),
        (libc::SO_SNDBUFFORCE, libc::SO_SNDBUF),
    ] {
        if setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, force, &sz).is_err() {
            let _ = setsockopt(fd.as_raw_fd(), libc::SOL_SOCKET, plain, &sz);
        }
    }
    let sa = sockaddr_in(addr);
    // SAFETY: sa is a valid sockaddr_in of the size given.
    cvt(unsafe {
        libc::bind(
            fd.as_raw_fd(),
            &sa as *const libc::sockaddr_in as *const libc::sockaddr,
            std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t,
        )
    })?;
    Ok(fd)
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

/// Preallocated message headers, buffers and addresses for sendmmsg/recvmmsg: one batch of
/// `n` packets of up to `slot` bytes, set up once so that sending or receiving a batch
/// allocates nothing.
pub struct MmsgBatch {
    bufs: Vec<u8>,
    slot: usize,
    addrs: Vec<libc::sockaddr_in>,
    iovs: Vec<libc::iovec>,
    hdrs: Vec<libc::mmsghdr>,
}

// SAFETY: the raw pointers in the headers point into the batch's own vectors (heap memory that
// moves with it, not with the thread); nothing refers to thread-local state.
unsafe impl Send for MmsgBatch {}

impl MmsgBatch {
    pub fn new(n: usize, slot: usize) -> MmsgBatch {
        let mut b = MmsgBatch {
            bufs: vec![0u8; n * slot],
            slot,
            // SAFETY: all-zero sockaddr_in, iovec and mmsghdr are valid values.
            addrs: vec![unsafe { std::mem::zeroed() }; n],
            iovs: vec![unsafe { std::mem::zeroed() }; n],
            hdrs: vec![unsafe { std::mem::zeroed() }; n],
        };
        // The vectors are never resized again, so these pointers stay valid for the life of
        // the batch.
        for i in 0..n {
            b.iovs[i].iov_base = b.bufs[i * slot..].as_mut_ptr() as *mut libc::c_void;
            b.iovs[i].iov_len = slot;
            b.hdrs[i].msg_hdr.msg_iov = &mut b.iovs[i];
            b.hdrs[i].msg_hdr.msg_iovlen = 1;
            b.hdrs[i].msg_hdr.msg_name =
                &mut b.addrs[i] as *mut libc::sockaddr_in as *mut libc::c_void;
        }
        b
    }

    pub fn capacity(&self) -> usize {
        self.hdrs.len()
    }

    pub fn slot(&self) -> usize {
        self.slot
    }

    /// The buffer of packet `i` (the whole slot).
    pub fn buf_mut(&mut self, i: usize) -> &mut [u8] {
        &mut self.bufs[i * self.slot..(i + 1) * self.slot]
    }

    /// The `i`-th packet received by the last [`MmsgBatch::recv`].
    pub fn packet(&self, i: usize) -> &[u8] {
        let len = (self.hdrs[i].msg_len as usize).min(self.slot);
        &self.bufs[i * self.slot..i * self.slot + len]
    }

    /// Where the `i`-th received packet came from.
    pub fn source(&self, i: usize) -> SocketAddrV4 {
        from_sockaddr_in(&self.addrs[i])
    }

    /// Sets packet `i` to go to `to` with `len` bytes.
    pub fn set(&mut self, i: usize, to: SocketAddrV4, len: usize) {
        self.addrs[i] = sockaddr_in(to);
        self.iovs[i].iov_len = len;
        self.hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
    }

    /// Sends packets `0..n` as set; returns how many the kernel took (it may take fewer: the
    /// rest is for the caller to retry). Never blocks.
    pub fn send(&mut self, fd: RawFd, n: usize) -> io::Result<usize> {
        let n = n.min(self.hdrs.len());
        if n == 0 {
            return Ok(0);
        }
        // SAFETY: hdrs[..n] point into this batch's live buffers, addresses and iovecs.
        let r = unsafe {
            libc::sendmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                n as libc::c_uint,
                libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(r as usize)
    }

    /// Moves the packets `from..from + n` to the front (after a partial send).
    pub fn shift(&mut self, from: usize, n: usize) {
        for k in 0..n {
            let (s, d) = ((from + k) * self.slot, k * self.slot);
            let len = self.iovs[from + k].iov_len;
            self.bufs.copy_within(s..s + len, d);
            self.addrs[k] = self.addrs[from + k];
            self.iovs[k].iov_len = len;
            self.hdrs[k].msg_hdr.msg_namelen = self.hdrs[from + k].msg_hdr.msg_namelen;
        }
    }

    /// Receives up to a batch of packets without blocking; 0 when none is waiting.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        for i in 0..self.hdrs.len() {
            self.iovs[i].iov_len = self.slot;
            self.hdrs[i].msg_hdr.msg_namelen = std::mem::size_of::<libc::sockaddr_in>() as u32;
        }
        // SAFETY: as in send; the kernel writes at most iov_len bytes per buffer and
        // msg_namelen bytes per address.
        let r = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                self.hdrs.len() as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            if e.kind() == io::ErrorKind::WouldBlock {
                return Ok(0);
            }
            return Err(e);
        }
        Ok(r as usize)
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
    }
    Ok(out)
}

/// Waits until one of `fds` is readable or `timeout_ns` passes (None: forever). Returns
/// whether any is readable. EINTR counts as a timeout.
pub fn poll_any(fds: &[RawFd], timeout_ns: Option<u64>) -> bool {
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
    r > 0
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

    /// The next received frame (Ethernet header included), if the kernel has handed one over.
    /// Call [`PacketRing::rx_release`] when done with it.
    pub fn rx_peek(&self) -> Option<&[u8]> {
        let f = self.rx_frame(self.rx_next);
        // SYNC: Acquire; pairs with the kernel's release of the frame (smp_wmb before the
        // status store in __packet_set_status), so the frame's bytes are visible.
        if self.status(f).load(Ordering::Acquire) & TP_STATUS_USER == 0 {
            return None;
        }
        // SAFETY: the kernel has handed the frame to us; tp_mac and tp_snaplen are within it.
        unsafe {
            let snaplen = (f.add(8) as *const u32).read() as usize;
            let mac = (f.add(12) as *const u16).read() as usize;
            let len = snaplen.min(self.frame.saturating_sub(mac));
            Some(std::slice::from_raw_parts(f.add(mac), len))
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
        // SAFETY: send with no buffer flushes the TX ring.
        let r = unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
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
        let mut ev = libc::epoll_event {
            events: libc::EPOLLIN as u32,
            u64: fd as u64,
        };
        // SAFETY: ev is a valid epoll_event; fd is a live descriptor of the caller's.
        cvt(unsafe { libc::epoll_ctl(ep.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) })?;
    }
    Ok(ep)
}
