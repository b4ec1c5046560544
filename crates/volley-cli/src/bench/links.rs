//! The systems a benchmark compares, behind one interface: volley's own endpoints and the kernel
//! baselines (TCP with TCP_NODELAY, UDP, Unix domain stream sockets, pipes), all between the same
//! two ranks, set up through a volley control endpoint.

use std::fs::File;
use std::io::{self, IoSlice, Read, Write};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use volley::{Endpoint, SendError, World};

/// A transport to compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Volley,
    Tcp,
    Udp,
    /// Kernel UDP polled without blocking (sockperf's `--nonblocked`): the yardstick for
    /// volley's own busy-polled small-message latency across hosts.
    UdpBusy,
    Uds,
    Pipe,
}

/// What volley's own link is called in the results: "volley-shm" on one host, "volley-udp" or
/// "volley-eth" (with "+faults") across hosts.
static VOLLEY_LABEL: std::sync::OnceLock<&'static str> = std::sync::OnceLock::new();

/// Names volley's link after the transport the world uses (call once, before any result).
pub fn set_volley_label(world: &World) {
    let l = match world.transport() {
        Some(t) => format!("volley-{t}"),
        None => "volley-shm".into(),
    };
    let _ = VOLLEY_LABEL.set(Box::leak(l.into_boxed_str()));
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Volley => VOLLEY_LABEL.get().copied().unwrap_or("volley-shm"),
            Kind::Tcp => "tcp",
            Kind::Udp => "udp",
            Kind::UdpBusy => "udp-busy",
            Kind::Uds => "uds",
            Kind::Pipe => "pipe",
        }
    }

    pub fn parse(s: &str) -> Result<Kind, String> {
        Ok(match s {
            "volley" | "shm" | "volley-shm" | "volley-udp" | "volley-eth" | "volley-xdp" => {
                Kind::Volley
            }
            "tcp" => Kind::Tcp,
            "udp" => Kind::Udp,
            "udp-busy" => Kind::UdpBusy,
            "uds" | "unix" => Kind::Uds,
            "pipe" | "pipes" => Kind::Pipe,
            other => {
                return Err(format!(
                    "unknown transport {other:?}; choose from tcp, udp, udp-busy, uds, pipe, or (pingpong) the MPIs mpi, openmpi, mpich"
                ))
            }
        })
    }
}

/// One connected transport between rank 0 and rank 1.
pub enum Link {
    Volley(Endpoint),
    /// Byte streams (TCP, UDS, pipes): each message is an 8-byte length and the payload.
    Stream {
        kind: Kind,
        r: File,
        w: File,
    },
    /// Datagrams: a message is cut into datagrams of at most UDP_CHUNK bytes, the first of which
    /// starts with the 8-byte message length. No flow control: ping-pong and idle tests only.
    /// The flag: the socket is polled without blocking (`udp-busy`).
    Udp(UdpSocket, Vec<u8>, bool),
}

const UDP_CHUNK: usize = 65000;

fn udp_lost(e: io::Error) -> io::Error {
    if e.kind() == io::ErrorKind::WouldBlock || e.kind() == io::ErrorKind::TimedOut {
        io_err("udp: a datagram was lost (no flow control: the message overflowed a socket buffer); use smaller sizes with --vs udp, or run as root so the bench can enlarge the buffers")
    } else {
        e
    }
}

/// One datagram: waiting in the kernel (the socket's 10 s timeout says it was lost), or, if
/// `busy`, asking again until it comes, for as long.
fn udp_recv(s: &UdpSocket, buf: &mut [u8], busy: bool) -> io::Result<usize> {
    if !busy {
        return s.recv(buf).map_err(udp_lost);
    }
    let mut since: Option<std::time::Instant> = None;
    let mut spins = 0u32;
    loop {
        match s.recv(buf) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                spins = spins.wrapping_add(1);
                // The clock only now and then: a message that comes within a few thousand
                // polls (every one in a ping-pong) never reads it.
                if spins.is_multiple_of(4096) {
                    let t = *since.get_or_insert_with(std::time::Instant::now);
                    if t.elapsed() > UDP_WAIT {
                        return Err(udp_lost(e));
                    }
                }
            }
            r => return r.map_err(udp_lost),
        }
    }
}

/// How long a kernel UDP link waits for a datagram before it calls it lost.
const UDP_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

fn io_err(e: impl std::fmt::Display) -> io::Error {
    io::Error::other(e.to_string())
}

impl Link {
    pub fn kind(&self) -> Kind {
        match self {
            Link::Volley(_) => Kind::Volley,
            Link::Stream { kind, .. } => *kind,
            Link::Udp(_, _, false) => Kind::Udp,
            Link::Udp(_, _, true) => Kind::UdpBusy,
        }
    }

    pub fn send(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            Link::Volley(ep) => ep.send(buf).map_err(io_err),
            Link::Stream { w, .. } => write_msg(w, buf),
            Link::Udp(s, scratch, _) => {
                let first = buf.len().min(UDP_CHUNK - 8);
                scratch.clear();
                scratch.extend_from_slice(&(buf.len() as u64).to_le_bytes());
                scratch.extend_from_slice(&buf[..first]);
                s.send(scratch)?;
                for chunk in buf[first..].chunks(UDP_CHUNK) {
                    s.send(chunk)?;
                }
                Ok(())
            }
        }
    }

    /// Receives one whole message into `buf`; returns its length.
    pub fn recv(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Link::Volley(ep) => ep.recv_into(buf).map(|(n, _)| n).map_err(io_err),
            Link::Stream { r, .. } => read_msg(r, buf),
            Link::Udp(s, scratch, busy) => {
                scratch.resize(UDP_CHUNK + 8, 0);
                let k = udp_recv(s, scratch, *busy)?;
                if k < 8 {
                    return Err(io_err("short datagram"));
                }
                let n = u64::from_le_bytes(scratch[..8].try_into().unwrap()) as usize;
                if n > buf.len() {
                    return Err(io_err(format!(
                        "message of {n} bytes, buffer of {}",
                        buf.len()
                    )));
                }
                let first = k - 8;
                buf[..first].copy_from_slice(&scratch[8..k]);
                let mut got = first;
                while got < n {
                    got += udp_recv(s, &mut buf[got..n], *busy)?;
                }
                Ok(n)
            }
        }
    }

    /// Whether `test` can run over this link (UDP has no flow control).
    pub fn supports(&self, test: &str) -> bool {
        match self {
            Link::Volley(_) => true,
            Link::Stream { .. } => test != "overlap",
            Link::Udp(..) => matches!(test, "pingpong" | "idle"),
        }
    }
}

/// Writes one framed message (8-byte length, then the bytes) to a byte stream.
pub fn write_msg(w: &mut File, buf: &[u8]) -> io::Result<()> {
    write_all_vectored(w, &(buf.len() as u64).to_le_bytes(), buf)
}

/// Reads one framed message into `buf`; returns its length.
pub fn read_msg(r: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut hdr = [0u8; 8];
    r.read_exact(&mut hdr)?;
    let n = u64::from_le_bytes(hdr) as usize;
    if n > buf.len() {
        return Err(io_err(format!(
            "message of {n} bytes, buffer of {}",
            buf.len()
        )));
    }
    r.read_exact(&mut buf[..n])?;
    Ok(n)
}

fn write_all_vectored(w: &mut File, a: &[u8], b: &[u8]) -> io::Result<()> {
    let (mut a, mut b) = (a, b);
    while !a.is_empty() || !b.is_empty() {
        let n = w.write_vectored(&[IoSlice::new(a), IoSlice::new(b)])?;
        if n == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
        let from_a = n.min(a.len());
        a = &a[from_a..];
        b = &b[n - from_a..];
    }
    Ok(())
}

/// Control messages between the two ranks (addresses, commands, results).
pub struct Ctl {
    pub ep: Endpoint,
    pub peer: usize,
}

impl Ctl {
    pub fn send_u64s(&self, v: &[u64]) -> io::Result<()> {
        let mut b = Vec::with_capacity(v.len() * 8);
        for x in v {
            b.extend_from_slice(&x.to_le_bytes());
        }
        self.ep
            .send_to(self.peer, self.ep.port(), &b)
            .map_err(io_err)
    }

    pub fn recv_u64s(&self) -> io::Result<Vec<u64>> {
        let m = self.ep.recv().map_err(io_err)?;
        Ok(m.chunks_exact(8)
            .map(|c| u64::from_le_bytes(c.try_into().unwrap()))
            .collect())
    }

    pub fn send_bytes(&self, b: &[u8]) -> io::Result<()> {
        self.ep
            .send_to(self.peer, self.ep.port(), b)
            .map_err(|e: SendError| io_err(e))
    }

    pub fn recv_bytes(&self) -> io::Result<Vec<u8>> {
        Ok(self.ep.recv().map_err(io_err)?.into_vec())
    }
}

fn stream_link(kind: Kind, fd: OwnedFd) -> io::Result<Link> {
    let w = File::from(fd);
    let r = w.try_clone()?;
    Ok(Link::Stream { kind, r, w })
}

/// Where the kernel baselines listen: loopback on one host, the job's interface across hosts.
fn bench_ip(world: &World) -> std::net::Ipv4Addr {
    if world.transport().is_some() {
        volley::host_ipv4().unwrap_or(std::net::Ipv4Addr::LOCALHOST)
    } else {
        std::net::Ipv4Addr::LOCALHOST
    }
}

/// Connects one link of `kind` between rank 0 (`leader`) and rank 1.
pub fn connect(world: &World, ctl: &Ctl, kind: Kind, index: usize) -> io::Result<Link> {
    let leader = world.rank() == 0;
    match kind {
        Kind::Volley => {
            let ep = world.open(1 + index as u32).map_err(io_err)?;
            ep.target(ctl.peer, 1 + index as u32).map_err(io_err)?;
            Ok(Link::Volley(ep))
        }
        Kind::Tcp => {
            if leader {
                let l = TcpListener::bind((bench_ip(world), 0))?;
                ctl.send_u64s(&[
                    l.local_addr()?.port() as u64,
                    u32::from(bench_ip(world)) as u64,
                ])?;
                let (s, _) = l.accept()?;
                s.set_nodelay(true)?;
                stream_link(kind, s.into())
            } else {
                let v = ctl.recv_u64s()?;
                let (port, ip) = (v[0] as u16, std::net::Ipv4Addr::from(v[1] as u32));
                let s = TcpStream::connect((ip, port))?;
                s.set_nodelay(true)?;
                stream_link(kind, s.into())
            }
        }
        Kind::Uds | Kind::Pipe if world.transport().is_some() => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "--vs uds and pipe need both ranks on one host; across hosts compare with tcp or udp",
        )),
        Kind::Uds => {
            use std::os::linux::net::SocketAddrExt;
            use std::os::unix::net::{SocketAddr, UnixListener, UnixStream};
            // An abstract name: nothing in the filesystem to clean up.
            let name = format!("volley-bench-{:016x}-{index}", world.token());
            let addr = SocketAddr::from_abstract_name(name.as_bytes())?;
            if leader {
                let l = UnixListener::bind_addr(&addr)?;
                ctl.send_u64s(&[1])?;
                let (s, _) = l.accept()?;
                stream_link(kind, s.into())
            } else {
                ctl.recv_u64s()?;
                stream_link(kind, UnixStream::connect_addr(&addr)?.into())
            }
        }
        Kind::Udp | Kind::UdpBusy => {
            let ip = bench_ip(world);
            let s = UdpSocket::bind((ip, 0))?;
            let mine = [s.local_addr()?.port() as u64, u32::from(ip) as u64];
            let theirs = if leader {
                ctl.send_u64s(&mine)?;
                ctl.recv_u64s()?
            } else {
                let t = ctl.recv_u64s()?;
                ctl.send_u64s(&mine)?;
                t
            };
            s.connect((std::net::Ipv4Addr::from(theirs[1] as u32), theirs[0] as u16))?;
            // No flow control: a message must fit the receiver's socket buffer whole.
            use std::os::fd::AsRawFd;
            volley_sys::set_socket_buffers(s.as_raw_fd(), 64 << 20)?;
            // A lost datagram must not hang the benchmark.
            s.set_read_timeout(Some(UDP_WAIT))?;
            let busy = kind == Kind::UdpBusy;
            s.set_nonblocking(busy)?;
            Ok(Link::Udp(s, Vec::with_capacity(UDP_CHUNK + 8), busy))
        }
        Kind::Pipe => {
            // Two FIFOs in a private directory, removed as soon as both ends are open.
            if leader {
                let dir = std::env::temp_dir()
                    .join(format!("volley-bench-{:016x}-{index}", world.token()));
                std::fs::create_dir(&dir)?;
                let (a, b) = (dir.join("a"), dir.join("b"));
                volley_sys::mkfifo(&a)?;
                volley_sys::mkfifo(&b)?;
                ctl.send_bytes(dir.as_os_str().as_encoded_bytes())?;
                let w = std::fs::OpenOptions::new().write(true).open(&a)?;
                let r = File::open(&b)?;
                std::fs::remove_dir_all(&dir)?;
                Ok(Link::Stream { kind, r, w })
            } else {
                let dir = std::path::PathBuf::from(
                    String::from_utf8_lossy(&ctl.recv_bytes()?).into_owned(),
                );
                let r = File::open(dir.join("a"))?;
                let w = std::fs::OpenOptions::new()
                    .write(true)
                    .open(dir.join("b"))?;
                Ok(Link::Stream { kind, r, w })
            }
        }
    }
}
