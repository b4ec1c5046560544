//! AF_XDP: a socket whose packets live in one memory area shared with the kernel (the UMEM),
//! passed back and forth by offset through four single-producer rings (fill, rx, tx,
//! completion), and the small XDP program that steers one kind of frame to it.
//!
//! The loader is written by hand (four `bpf(2)` commands: create the socket map, load the
//! program, put the socket in the map, link the program to the interface) rather than taken from
//! `aya` or `libbpf-rs`: the program is two dozen instructions assembled here at run time with the
//! job's values as immediates, so it needs no ELF object, no BTF, no build-time clang or
//! bpf-linker and no relocation engine, which is what those crates exist to provide; `libbpf-rs`
//! would also bring a C library into the build. What this file needs of them is a few hundred
//! lines.
//!
//! The program is attached through a BPF link (BPF_LINK_CREATE, Linux 5.9+), not the older
//! netlink attachment: a link belongs to its file descriptor, so the program leaves the interface
//! when the process ends however it ends, `kill -9` included, and nothing is pinned anywhere.

use crate::{cvt, Mapping};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

/// Bytes of one UMEM frame (aligned chunk mode: a page).
pub const FRAME: usize = 4096;
/// Where the kernel puts a received frame inside its chunk in copy mode (XDP_PACKET_HEADROOM).
const RX_HEADROOM: usize = 256;
/// The largest frame (Ethernet header included) a chunk receives whole.
pub const MAX_FRAME: usize = FRAME - RX_HEADROOM;

/// Whether this kernel's AF_XDP sockets carry frames larger than a UMEM frame in copy mode, in
/// several chunks (multi-buffer, `XDP_USE_SG`: Linux 6.6). Decided by the kernel's release, not
/// by a probe, so that every rank of a host (the one holding the interface and those that fall
/// back to eth) agrees on the packet size without opening anything.
pub fn multi_buffer() -> bool {
    let rel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let mut v = rel
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .map(|s| s.parse::<u32>().unwrap_or(0));
    let (major, minor) = (v.next().unwrap_or(0), v.next().unwrap_or(0));
    (major, minor) >= (6, 6)
}

const BPF_MAP_CREATE: libc::c_long = 0;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_PROG_LOAD: libc::c_long = 5;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
const BPF_PROG_TYPE_XDP: u32 = 6;
const BPF_XDP: u32 = 37;
/// The program reads only the first buffer of a frame, so it may run on interfaces whose MTU
/// makes the kernel split frames (a veth at MTU 9000 refuses native XDP to other programs).
const BPF_F_XDP_HAS_FRAGS: u32 = 1 << 5;
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
const XDP_PASS: i32 = 2;
const BPF_FUNC_REDIRECT_MAP: i32 = 51;
const SO_PREFER_BUSY_POLL: libc::c_int = 69;
const SO_BUSY_POLL_BUDGET: libc::c_int = 70;

/// A `bpf(2)` attribute block: zeroed, fields written at their offsets in `union bpf_attr`
/// (the kernel checks that what it does not know is zero, so a larger block is fine).
struct Attr([u8; 128]);

impl Attr {
    fn new() -> Attr {
        Attr([0; 128])
    }
    fn u32(mut self, at: usize, v: u32) -> Attr {
        self.0[at..at + 4].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn u64(mut self, at: usize, v: u64) -> Attr {
        self.0[at..at + 8].copy_from_slice(&v.to_ne_bytes());
        self
    }
    fn bytes(mut self, at: usize, v: &[u8]) -> Attr {
        self.0[at..at + v.len()].copy_from_slice(v);
        self
    }
    /// Runs command `cmd`; returns the descriptor it made (or 0).
    fn call(&mut self, cmd: libc::c_long) -> io::Result<libc::c_int> {
        // SAFETY: the block is a valid, zero-padded bpf_attr of the size given; pointers written
        // into it (instructions, licence, log, key, value) outlive the call, which the callers
        // guarantee by keeping them on their stacks.
        let r = unsafe { libc::syscall(libc::SYS_bpf, cmd, self.0.as_mut_ptr(), self.0.len()) };
        cvt(r as libc::c_int)
    }
    fn fd(&mut self, cmd: libc::c_long) -> io::Result<OwnedFd> {
        let fd = self.call(cmd)?;
        // SAFETY: the commands that return a descriptor return a new one, ours (O_CLOEXEC).
        Ok(unsafe { OwnedFd::from_raw_fd(fd) })
    }
}

/// One eBPF instruction (struct bpf_insn).
#[derive(Clone, Copy)]
#[repr(C)]
struct Insn {
    code: u8,
    regs: u8,
    off: i16,
    imm: i32,
}

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn {
        code,
        regs: dst | (src << 4),
        off,
        imm,
    }
}

const LDX_W: u8 = 0x61; // BPF_LDX | BPF_MEM | BPF_W
const LDX_H: u8 = 0x69; // BPF_LDX | BPF_MEM | BPF_H
const MOV64_X: u8 = 0xbf;
const MOV64_K: u8 = 0xb7;
const ADD64_K: u8 = 0x07;
const JGT_X: u8 = 0x2d;
const JNE32_K: u8 = 0x56; // BPF_JMP32 | BPF_JNE | BPF_K: compares the low 32 bits
const LD_DW: u8 = 0x18; // BPF_LD | BPF_IMM | BPF_DW, two slots
const CALL: u8 = 0x85;
const EXIT: u8 = 0x95;
const PSEUDO_MAP_FD: u8 = 1;

/// Which frames the program takes: those holding the given bytes at the given offsets of the
/// frame (Ethernet header included; each field an even number of bytes). Everything else goes
/// on to the kernel (XDP_PASS), so the interface's other traffic is untouched.
#[derive(Clone, Debug, Default)]
pub struct Steer {
    pub fields: Vec<(u16, Vec<u8>)>,
}

impl Steer {
    /// The comparisons the program makes: (offset, width 2 or 4, the bytes as a native-order
    /// immediate).
    fn compares(&self) -> Vec<(i16, u8, i32)> {
        let mut out = Vec::new();
        for (at, bytes) in &self.fields {
            assert!(
                bytes.len() % 2 == 0,
                "steering fields are whole 16-bit words"
            );
            for (k, c) in bytes.chunks(4).enumerate() {
                let mut w = [0u8; 4];
                w[..c.len()].copy_from_slice(c);
                let imm = match c.len() {
                    4 => i32::from_ne_bytes(w),
                    _ => u16::from_ne_bytes([w[0], w[1]]) as i32,
                };
                out.push((*at as i16 + 4 * k as i16, c.len() as u8, imm));
            }
        }
        out
    }
}

/// The program: bounds check, compare each field (any mismatch: pass), redirect to the socket
/// of the frame's receive queue in `map` (no socket there: pass).
fn program(steer: &Steer, map: RawFd) -> Vec<Insn> {
    let cmp = steer.compares();
    let span = cmp
        .iter()
        .map(|&(o, w, _)| o as i32 + w as i32)
        .max()
        .unwrap_or(0);
    let n = cmp.len() as i16;
    // Jumps go to `pass`, after the compares left and the redirect (ldx, ld_dw x2, mov, call,
    // exit: 6 instructions).
    let mut p = vec![
        insn(MOV64_X, 6, 1, 0, 0),       // r6 = ctx
        insn(LDX_W, 2, 6, 0, 0),         // r2 = ctx->data
        insn(LDX_W, 3, 6, 4, 0),         // r3 = ctx->data_end
        insn(MOV64_X, 4, 2, 0, 0),       // r4 = data
        insn(ADD64_K, 4, 0, 0, span),    // r4 = data + span
        insn(JGT_X, 4, 3, n * 2 + 6, 0), // short frame: pass
    ];
    for (i, &(off, width, imm)) in cmp.iter().enumerate() {
        let left = n - 1 - i as i16;
        p.push(insn(if width == 4 { LDX_W } else { LDX_H }, 4, 2, off, 0));
        p.push(insn(JNE32_K, 4, 0, left * 2 + 6, imm));
    }
    p.extend([
        insn(LDX_W, 2, 6, 16, 0), // r2 = ctx->rx_queue_index
        insn(LD_DW, 1, PSEUDO_MAP_FD, 0, map),
        insn(0, 0, 0, 0, 0),
        insn(MOV64_K, 3, 0, 0, XDP_PASS), // no socket for the queue: pass
        insn(CALL, 0, 0, 0, BPF_FUNC_REDIRECT_MAP),
        insn(EXIT, 0, 0, 0, 0),
        insn(MOV64_K, 0, 0, 0, XDP_PASS), // pass:
        insn(EXIT, 0, 0, 0, 0),
    ]);
    p
}

fn load_program(steer: &Steer, map: RawFd, flags: u32) -> io::Result<OwnedFd> {
    let prog = program(steer, map);
    let license = b"GPL\0";
    let mut log = vec![0u8; 4096];
    let r = Attr::new()
        .u32(0, BPF_PROG_TYPE_XDP)
        .u32(4, prog.len() as u32)
        .u64(8, prog.as_ptr() as u64)
        .u64(16, license.as_ptr() as u64)
        .u32(24, 1)
        .u32(28, log.len() as u32)
        .u64(32, log.as_mut_ptr() as u64)
        .u32(44, flags)
        .bytes(48, b"volley_steer")
        .u32(68, BPF_XDP)
        .fd(BPF_PROG_LOAD);
    r.map_err(|e| {
        let end = log.iter().position(|&b| b == 0).unwrap_or(0);
        let text = String::from_utf8_lossy(&log[..end]);
        if text.trim().is_empty() {
            e
        } else {
            io::Error::new(
                e.kind(),
                format!("{e}; verifier: {}", text.trim().replace('\n', " | ")),
            )
        }
    })
}

/// How the program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum XdpMode {
    /// In the driver's receive path (veth has it; so do most NIC drivers).
    Native,
    /// After the kernel has built its socket buffer (any interface; slower).
    Generic,
}

/// A single-producer, single-consumer ring shared with the kernel (struct xdp_ring): producer
/// and consumer indexes that run freely, a flags word, and a power-of-two array of descriptors.
struct Ring {
    _map: Mapping,
    producer: *const AtomicU32,
    consumer: *const AtomicU32,
    flags: *const AtomicU32,
    desc: *mut u8,
    mask: u32,
    /// Our own index (the producer's for a ring we fill, the consumer's for one we drain).
    head: u32,
    /// The other side's index as last read: re-read only when the ring looks full or empty.
    other: u32,
}

impl Ring {
    fn map(
        fd: RawFd,
        off: &libc::xdp_ring_offset,
        pgoff: u64,
        n: u32,
        desc_size: usize,
    ) -> io::Result<Ring> {
        let map = Mapping::map_shared_at(fd, off.desc as usize + n as usize * desc_size, pgoff)?;
        let base = map.as_ptr();
        // SAFETY: the offsets come from XDP_MMAP_OFFSETS for this mapping.
        unsafe {
            Ok(Ring {
                producer: base.add(off.producer as usize) as *const AtomicU32,
                consumer: base.add(off.consumer as usize) as *const AtomicU32,
                flags: base.add(off.flags as usize) as *const AtomicU32,
                desc: base.add(off.desc as usize),
                _map: map,
                mask: n - 1,
                head: 0,
                other: 0,
            })
        }
    }
    fn producer(&self) -> &AtomicU32 {
        // SAFETY: inside the mapping, 4-byte aligned, shared with the kernel: atomics only.
        unsafe { &*self.producer }
    }
    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: as for producer.
        unsafe { &*self.consumer }
    }
    fn needs_wakeup(&self) -> bool {
        // SAFETY: as for producer.
        unsafe { &*self.flags }.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }
    /// Free slots in a ring we produce into.
    fn free(&mut self) -> u32 {
        let size = self.mask + 1;
        if self.head.wrapping_sub(self.other) >= size {
            // SYNC: Acquire; pairs with the kernel's release of the consumer index
            // (smp_store_release in xskq_cons_release): the slots it passed are free to reuse.
            self.other = self.consumer().load(Ordering::Acquire);
        }
        size - self.head.wrapping_sub(self.other)
    }
    /// Filled slots in a ring we consume from.
    fn ready(&mut self) -> u32 {
        if self.head == self.other {
            // SYNC: Acquire; pairs with the kernel's release of the producer index
            // (smp_store_release in xskq_prod_submit): the descriptors before it are written.
            self.other = self.producer().load(Ordering::Acquire);
        }
        self.other.wrapping_sub(self.head)
    }
    fn addr_slot(&self, i: u32) -> *mut u64 {
        // SAFETY: masked index into the descriptor array of 8-byte addresses.
        unsafe { (self.desc as *mut u64).add((i & self.mask) as usize) }
    }
    fn xdp_slot(&self, i: u32) -> *mut libc::xdp_desc {
        // SAFETY: masked index into the descriptor array of xdp_desc.
        unsafe { (self.desc as *mut libc::xdp_desc).add((i & self.mask) as usize) }
    }
    /// Publishes our index (producer of a ring we fill, consumer of one we drain).
    fn publish_producer(&self) {
        // SYNC: Release; the descriptors written before it are visible to the kernel, which
        // reads the producer with acquire (smp_load_acquire in xskq_cons_peek).
        self.producer().store(self.head, Ordering::Release);
    }
    fn publish_consumer(&self) {
        // SYNC: Release; our reads of the descriptors (and of their frames) are done before the
        // kernel may reuse the slots.
        self.consumer().store(self.head, Ordering::Release);
    }
}

/// What an AF_XDP socket was able to set up.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XskInfo {
    pub mode: XdpMode,
    /// The driver moves frames in and out of the UMEM itself (no copy in the kernel).
    pub zero_copy: bool,
    pub need_wakeup: bool,
    /// SO_PREFER_BUSY_POLL and SO_BUSY_POLL were accepted.
    pub busy_poll: bool,
    /// Frames larger than a UMEM frame travel in several (XDP_USE_SG).
    pub multi_buffer: bool,
}

/// The kernel's own counts for the socket (XDP_STATISTICS).
#[derive(Clone, Copy, Debug, Default)]
pub struct XskStats {
    pub rx_dropped: u64,
    pub rx_invalid: u64,
    pub tx_invalid: u64,
    pub rx_ring_full: u64,
    pub fill_ring_empty: u64,
}

/// An AF_XDP socket bound to one queue of one interface, its UMEM (half for receiving, half for
/// transmitting) and the XDP program that steers matching frames to it. Dropping it detaches
/// the program.
pub struct Xsk {
    // Field order is drop order: the link first, so the interface stops steering frames to a
    // socket about to close.
    link: Option<OwnedFd>,
    prog: OwnedFd,
    map: OwnedFd,
    rx: Ring,
    tx: Ring,
    fill: Ring,
    comp: Ring,
    fd: OwnedFd,
    umem: Mapping,
    /// Where the transmit half of the UMEM starts.
    tx_base: u64,
    /// UMEM frames per transmit slot: a frame larger than one goes out as a run of
    /// descriptors over consecutive frames (multi-buffer).
    tx_chunks: u32,
    /// Transmit slots (their first frame's address) not in the kernel's hands.
    tx_free: Vec<u64>,
    /// Transmit descriptors queued since the last kick.
    tx_unkicked: u32,
    /// Where a frame received in several chunks is put together (capacity kept).
    rx_joined: Vec<u8>,
    /// Frames received in several chunks.
    pub rx_multi: u64,
    pub info: XskInfo,
}

// SAFETY: the mappings belong to the socket, which any thread may use; the rings are used
// through &mut self, one thread at a time.
unsafe impl Send for Xsk {}

fn getsockopt_into<T>(
    fd: RawFd,
    level: libc::c_int,
    name: libc::c_int,
    v: &mut T,
) -> io::Result<()> {
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: v is a live, writable T of the size given.
    cvt(unsafe { libc::getsockopt(fd, level, name, v as *mut T as *mut libc::c_void, &mut len) })
        .map(|_| ())
}

impl Xsk {
    /// Opens a socket on queue `queue` of interface `ifindex` with `frames` receive frames of
    /// [`FRAME`] bytes (`frames` a power of two) and transmit slots for as many bytes, each slot
    /// holding a frame of `max_frame` bytes (more than [`MAX_FRAME`] needs [`multi_buffer`]),
    /// loads a program steering the frames `steer` matches to it and attaches it. Needs CAP_NET_ADMIN,
    /// CAP_NET_RAW and CAP_BPF (root). Fails with `AddrInUse` when the interface already has
    /// an XDP program (another job's, or another rank's of this host).
    ///
    /// `mode` None attaches natively where the driver can and generically where it cannot.
    pub fn open(
        ifindex: u32,
        queue: u32,
        frames: u32,
        steer: &Steer,
        mode: Option<XdpMode>,
        max_frame: usize,
    ) -> io::Result<Xsk> {
        assert!(frames.is_power_of_two(), "frames must be a power of two");
        let sg = max_frame > MAX_FRAME;
        if sg && !multi_buffer() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("frames of {max_frame} bytes need multi-buffer AF_XDP (Linux 6.6); at most {MAX_FRAME} here"),
            ));
        }
        let tx_chunks = max_frame.div_ceil(FRAME).max(1) as u32;
        let tx_slots = frames / tx_chunks;
        let map = Attr::new()
            .u32(0, BPF_MAP_TYPE_XSKMAP)
            .u32(4, 4)
            .u32(8, 4)
            .u32(12, queue + 1)
            .bytes(28, b"volley_xsks")
            .fd(BPF_MAP_CREATE)?;
        let prog = load_program(steer, map.as_raw_fd(), BPF_F_XDP_HAS_FRAGS)
            .or_else(|_| load_program(steer, map.as_raw_fd(), 0))?;

        // SAFETY: plain socket(2).
        let fd = cvt(unsafe { libc::socket(libc::AF_XDP, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) })
            .map_err(|e| {
                if e.raw_os_error() == Some(libc::EAFNOSUPPORT) {
                    io::Error::new(
                        io::ErrorKind::Unsupported,
                        "this kernel has no AF_XDP sockets (CONFIG_XDP_SOCKETS); use VOLLEY_TRANSPORT=eth",
                    )
                } else {
                    e
                }
            })?;
        // SAFETY: fd was just returned by socket(2).
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let raw = fd.as_raw_fd();
        let tx_base = frames as u64 * FRAME as u64;
        // The kernel pins the UMEM's pages at registration and holds them until the socket
        // goes, so the order in which the socket and this view of them are dropped is free.
        let umem = Mapping::anonymous((frames + tx_slots * tx_chunks) as usize * FRAME)?;
        let reg = libc::xdp_umem_reg {
            addr: umem.as_ptr() as u64,
            len: umem.len() as u64,
            chunk_size: FRAME as u32,
            headroom: 0,
            flags: 0,
            tx_metadata_len: 0,
        };
        crate::net::setsockopt(raw, libc::SOL_XDP, libc::XDP_UMEM_REG, &reg)?;
        for opt in [
            libc::XDP_UMEM_FILL_RING,
            libc::XDP_UMEM_COMPLETION_RING,
            libc::XDP_RX_RING,
            libc::XDP_TX_RING,
        ] {
            crate::net::setsockopt(raw, libc::SOL_XDP, opt, &frames)?;
        }
        // SAFETY: all-zero is a valid xdp_mmap_offsets.
        let mut off: libc::xdp_mmap_offsets = unsafe { std::mem::zeroed() };
        getsockopt_into(raw, libc::SOL_XDP, libc::XDP_MMAP_OFFSETS, &mut off)?;
        let rx = Ring::map(raw, &off.rx, libc::XDP_PGOFF_RX_RING as u64, frames, 16)?;
        let tx = Ring::map(raw, &off.tx, libc::XDP_PGOFF_TX_RING as u64, frames, 16)?;
        let mut fill = Ring::map(raw, &off.fr, libc::XDP_UMEM_PGOFF_FILL_RING, frames, 8)?;
        let comp = Ring::map(
            raw,
            &off.cr,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            frames,
            8,
        )?;

        // The receive half of the UMEM goes to the kernel now, before any frame can arrive.
        for i in 0..frames {
            // SAFETY: a slot of the fill ring, which is ours to produce into.
            unsafe { fill.addr_slot(fill.head).write(i as u64 * FRAME as u64) };
            fill.head = fill.head.wrapping_add(1);
        }
        fill.publish_producer();

        let mut xsk = Xsk {
            link: None,
            prog,
            map,
            rx,
            tx,
            fill,
            comp,
            fd,
            umem,
            tx_base,
            tx_chunks,
            tx_free: (0..tx_slots)
                .map(|i| tx_base + (i * tx_chunks) as u64 * FRAME as u64)
                .collect(),
            tx_unkicked: 0,
            rx_joined: Vec::with_capacity(if sg { 1 << 16 } else { 0 }),
            rx_multi: 0,
            info: XskInfo {
                mode: XdpMode::Native,
                zero_copy: false,
                need_wakeup: true,
                busy_poll: false,
                multi_buffer: sg,
            },
        };
        // The program first: an interface another process holds fails here, at once.
        let attach = |flags: u32| {
            Attr::new()
                .u32(0, xsk.prog.as_raw_fd() as u32)
                .u32(4, ifindex)
                .u32(8, BPF_XDP)
                .u32(12, flags)
                .fd(BPF_LINK_CREATE)
        };
        // EBUSY: a program is attached in this mode; EEXIST: in the other mode.
        let taken = |e: &io::Error| matches!(e.raw_os_error(), Some(libc::EBUSY | libc::EEXIST));
        let native = match mode {
            Some(XdpMode::Generic) => None,
            _ => Some(attach(XDP_FLAGS_DRV_MODE)),
        };
        xsk.link = Some(match native {
            Some(Ok(l)) => l,
            Some(Err(e)) if taken(&e) || mode == Some(XdpMode::Native) => {
                return Err(if taken(&e) { busy(e) } else { e })
            }
            _ => {
                xsk.info.mode = XdpMode::Generic;
                attach(XDP_FLAGS_SKB_MODE).map_err(|e| if taken(&e) { busy(e) } else { e })?
            }
        });
        // The interface is ours now: a queue still busy is the socket of a process that just
        // ended, which the kernel releases a moment later (in a work queue).
        let mut tries = 0;
        loop {
            match xsk.bind(ifindex, queue) {
                Err(e) if e.kind() == io::ErrorKind::AddrInUse && tries < 200 => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_millis(10));
                }
                r => break r?,
            }
        }
        Attr::new()
            .u32(0, xsk.map.as_raw_fd() as u32)
            .u64(8, &queue as *const u32 as u64)
            .u64(16, &raw as *const RawFd as u64)
            .call(BPF_MAP_UPDATE_ELEM)?;
        // Busy polling where the kernel allows it: the socket's receive calls poll the
        // driver's queue directly instead of waiting for its interrupt.
        xsk.info.busy_poll =
            crate::net::setsockopt(raw, libc::SOL_SOCKET, SO_PREFER_BUSY_POLL, &1i32)
                .and_then(|_| {
                    crate::net::setsockopt(raw, libc::SOL_SOCKET, libc::SO_BUSY_POLL, &20i32)
                })
                .and_then(|_| {
                    crate::net::setsockopt(raw, libc::SOL_SOCKET, SO_BUSY_POLL_BUDGET, &64i32)
                })
                .is_ok();
        Ok(xsk)
    }

    /// Binds to the queue: zero-copy where the driver can, else copy mode; with need-wakeup
    /// (the kernel says when it must be kicked) where it can.
    fn bind(&mut self, ifindex: u32, queue: u32) -> io::Result<()> {
        let mut last = None;
        let sg = if self.info.multi_buffer {
            libc::XDP_USE_SG
        } else {
            0
        };
        for (flags, zc, nw) in [
            (libc::XDP_ZEROCOPY | libc::XDP_USE_NEED_WAKEUP, true, true),
            (libc::XDP_COPY | libc::XDP_USE_NEED_WAKEUP, false, true),
            (libc::XDP_COPY, false, false),
        ] {
            let sa = libc::sockaddr_xdp {
                sxdp_family: libc::AF_XDP as u16,
                sxdp_flags: flags | sg,
                sxdp_ifindex: ifindex,
                sxdp_queue_id: queue,
                sxdp_shared_umem_fd: 0,
            };
            // SAFETY: sa is a valid sockaddr_xdp of the size given.
            let r = cvt(unsafe {
                libc::bind(
                    self.fd.as_raw_fd(),
                    &sa as *const libc::sockaddr_xdp as *const libc::sockaddr,
                    std::mem::size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
                )
            });
            match r {
                Ok(_) => {
                    self.info.zero_copy = zc;
                    self.info.need_wakeup = nw;
                    return Ok(());
                }
                Err(e) if e.raw_os_error() == Some(libc::EBUSY) => return Err(busy(e)),
                Err(e) => last = Some(e),
            }
        }
        Err(last.expect("tried at least once"))
    }

    pub fn fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }

    /// Hands up to `max` received frames to `f` (each lent for the call), gives their UMEM
    /// frames back to the kernel, and returns how many there were. A frame that came in several
    /// chunks (multi-buffer) is put together first (one copy); one that fits a chunk is lent in
    /// place.
    pub fn receive(&mut self, max: u32, f: &mut dyn FnMut(&mut [u8])) -> usize {
        let ready = self.rx.ready();
        let (mut taken, mut frames) = (0, 0);
        while taken < ready && frames < max {
            // The descriptors of one frame: all but its last say "continued".
            let mut n = 0;
            loop {
                n += 1;
                if taken + n > ready {
                    // The rest of this frame is not in the ring yet: next call.
                    n = 0;
                    break;
                }
                // SAFETY: a descriptor the kernel produced (the Acquire in `ready`).
                let d = unsafe {
                    self.rx
                        .xdp_slot(self.rx.head.wrapping_add(taken + n - 1))
                        .read()
                };
                if d.options & libc::XDP_PKT_CONTD == 0 {
                    break;
                }
            }
            if n == 0 {
                break;
            }
            if n == 1 {
                let d = self.rx_desc(taken);
                f(self.umem_slice_mut(&d));
            } else {
                let mut joined = std::mem::take(&mut self.rx_joined);
                joined.clear();
                for k in 0..n {
                    let d = self.rx_desc(taken + k);
                    joined.extend_from_slice(self.umem_slice(&d));
                }
                f(&mut joined);
                self.rx_joined = joined;
                self.rx_multi += 1;
            }
            for k in 0..n {
                // Every chunk goes back through the fill ring: it has room for every receive
                // frame, and this one just left the kernel's hands.
                let chunk = self.rx_desc(taken + k).addr & !(FRAME as u64 - 1);
                // SAFETY: a slot of the fill ring we produce into, free (see above).
                unsafe { self.fill.addr_slot(self.fill.head).write(chunk) };
                self.fill.head = self.fill.head.wrapping_add(1);
            }
            taken += n;
            frames += 1;
        }
        if taken > 0 {
            self.rx.head = self.rx.head.wrapping_add(taken);
            self.rx.publish_consumer();
            self.fill.publish_producer();
            if self.info.need_wakeup && self.fill.needs_wakeup() {
                self.wake_rx();
            }
        }
        frames as usize
    }

    /// The `k`th received descriptor after the consumer index.
    fn rx_desc(&self, k: u32) -> libc::xdp_desc {
        // SAFETY: a descriptor the kernel produced (the callers stay below `ready`).
        unsafe { self.rx.xdp_slot(self.rx.head.wrapping_add(k)).read() }
    }

    /// The bytes a received descriptor names, clamped inside the UMEM whatever it says.
    fn umem_slice(&self, d: &libc::xdp_desc) -> &[u8] {
        let len = (d.len as usize).min(FRAME);
        let at = (d.addr as usize).min(self.umem.len() - len);
        // SAFETY: the frame is ours until it goes back through the fill ring, which happens
        // after the caller is done with the slice (it borrows self).
        unsafe { std::slice::from_raw_parts(self.umem.as_ptr().add(at), len) }
    }

    /// [`Xsk::umem_slice`], writable: the frame is ours until it goes back through the fill
    /// ring (a layer above opens a sealed packet in place).
    fn umem_slice_mut(&mut self, d: &libc::xdp_desc) -> &mut [u8] {
        let len = (d.len as usize).min(FRAME);
        let at = (d.addr as usize).min(self.umem.len() - len);
        // SAFETY: as in `umem_slice`; the mapping is writable (PROT_WRITE) and `&mut self`
        // keeps any other view of it from existing while the slice lives.
        unsafe { std::slice::from_raw_parts_mut(self.umem.as_ptr().add(at), len) }
    }

    fn wake_rx(&self) {
        // SAFETY: a zero-length, non-blocking receive (straight to the kernel, as in
        // `net::kick_tx`): asks the driver to refill from the fill ring.
        unsafe {
            libc::syscall(
                libc::SYS_recvfrom,
                self.fd.as_raw_fd(),
                std::ptr::null_mut::<libc::c_void>(),
                0usize,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut::<libc::sockaddr>(),
                std::ptr::null_mut::<libc::socklen_t>(),
            )
        };
    }

    /// Takes back the transmit frames the kernel has finished with.
    fn reclaim(&mut self) {
        let n = self.comp.ready();
        for _ in 0..n {
            // SAFETY: a completion the kernel produced.
            let a = unsafe { self.comp.addr_slot(self.comp.head).read() };
            self.comp.head = self.comp.head.wrapping_add(1);
            // A slot's frame comes back once per chunk it used: the first chunk frees it.
            let chunk = a.saturating_sub(self.tx_base) / FRAME as u64;
            if chunk.is_multiple_of(self.tx_chunks as u64) {
                self.tx_free.push(self.tx_base + chunk * FRAME as u64);
            }
        }
        if n > 0 {
            self.comp.publish_consumer();
        }
    }

    /// A free transmit frame (all [`FRAME`] bytes of it), or None when every frame is in the
    /// kernel's hands or the transmit ring is full. Commit it with [`Xsk::tx_commit`].
    pub fn tx_slot(&mut self) -> Option<&mut [u8]> {
        if self.tx_free.is_empty() {
            self.reclaim();
        }
        let &a = self.tx_free.last()?;
        // Room for the slot's every chunk, whatever the frame's length turns out to be.
        if self.tx.free() < self.tx_chunks {
            return None;
        }
        let len = self.tx_chunks as usize * FRAME;
        // SAFETY: a slot of the transmit part (consecutive frames) not in the kernel's hands:
        // ours alone.
        Some(unsafe { std::slice::from_raw_parts_mut(self.umem.as_ptr().add(a as usize), len) })
    }

    /// Queues the frame [`Xsk::tx_slot`] returned, `len` bytes long: one descriptor per UMEM
    /// frame it covers, all but the last marked as continued.
    pub fn tx_commit(&mut self, len: usize) {
        let a = self.tx_free.pop().expect("tx_slot returned a frame");
        let n = len.div_ceil(FRAME).max(1);
        debug_assert!(n <= self.tx_chunks as usize, "a frame longer than its slot");
        for k in 0..n {
            let d = libc::xdp_desc {
                addr: a + (k * FRAME) as u64,
                len: (len - k * FRAME).min(FRAME) as u32,
                options: if k + 1 < n { libc::XDP_PKT_CONTD } else { 0 },
            };
            // SAFETY: a free slot of the transmit ring (tx_slot checked room for all).
            unsafe { self.tx.xdp_slot(self.tx.head).write(d) };
            self.tx.head = self.tx.head.wrapping_add(1);
            self.tx_unkicked += 1;
        }
    }

    /// Transmit descriptors the kernel has not yet taken.
    pub fn tx_pending(&mut self) -> u32 {
        // SYNC: Acquire; pairs with the kernel's release of the consumer index.
        self.tx.other = self.tx.consumer().load(Ordering::Acquire);
        self.tx.head.wrapping_sub(self.tx.other)
    }

    /// Whether frames published to the transmit ring still wait for the kernel to take them (a
    /// kick it refused for now: the device's queue or the socket's budget was full).
    pub fn tx_waiting(&self) -> bool {
        // SYNC: Acquire; pairs with the kernel's release of the consumer index.
        let consumed = self.tx.consumer().load(Ordering::Acquire);
        self.tx.head.wrapping_sub(self.tx_unkicked) != consumed
    }

    /// Publishes the queued frames and asks the kernel to send them where it needs asking (copy
    /// mode always; zero-copy when the ring says so). Returns the system calls made.
    pub fn tx_kick(&mut self) -> io::Result<u32> {
        if self.tx_unkicked > 0 {
            self.tx.publish_producer();
            self.tx_unkicked = 0;
        }
        let mut calls = 0;
        // Copy mode sends at most 32 frames per call (TX_BATCH_SIZE) and says EAGAIN when more
        // wait; a bounded number of calls leaves the rest for the next kick.
        while self.tx_pending() > 0 && calls < 64 {
            if self.info.need_wakeup && !self.tx.needs_wakeup() {
                break;
            }
            calls += 1;
            let r = crate::net::kick_tx(self.fd.as_raw_fd());
            if r < 0 {
                let e = io::Error::last_os_error();
                match e.raw_os_error() {
                    Some(libc::EAGAIN) => continue,
                    // The device's queue is full or the socket buffer is: later.
                    Some(libc::EBUSY) | Some(libc::ENOBUFS) => break,
                    _ => return Err(e),
                }
            }
        }
        self.reclaim();
        Ok(calls)
    }

    pub fn stats(&self) -> XskStats {
        // SAFETY: all-zero is a valid xdp_statistics.
        let mut s: libc::xdp_statistics = unsafe { std::mem::zeroed() };
        if getsockopt_into(
            self.fd.as_raw_fd(),
            libc::SOL_XDP,
            libc::XDP_STATISTICS,
            &mut s,
        )
        .is_err()
        {
            return XskStats::default();
        }
        XskStats {
            rx_dropped: s.rx_dropped,
            rx_invalid: s.rx_invalid_descs,
            tx_invalid: s.tx_invalid_descs,
            rx_ring_full: s.rx_ring_full,
            fill_ring_empty: s.rx_fill_ring_empty_descs,
        }
    }
}

fn busy(e: io::Error) -> io::Error {
    io::Error::new(
        io::ErrorKind::AddrInUse,
        format!("{e}: the interface queue already has an XDP program or AF_XDP socket (another rank or job on this host)"),
    )
}
