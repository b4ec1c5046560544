//! The network side of a world: the ranks on other hosts, reached through the protocol engine
//! (volley-proto) over a device (volley-transport). Ranks on this host keep using shared memory.
//!
//! The engine does no I/O; [`Net::pump`] is the I/O around it: receive a batch from the device
//! into the engine, run its timers, let it fill the device's transmit buffers, collect what it
//! delivered. Every waiting operation of the world calls it.

use crate::bootstrap::JobInfo;
use crate::engine::Payload;
use crate::error::InitError;
use crate::matching::Pattern;
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use volley_proto::{Config as ProtoConfig, Credit, Engine as Proto, Event, Placement, Reliability};
use volley_sys::lend::RawBufMut;
use volley_sys::Exclusive;
use volley_transport::eth::EthDevice;
use volley_transport::fault::{FaultDevice, Faults};
use volley_transport::udp::UdpDevice;
use volley_transport::xdp::{Frames, XdpDevice};
use volley_transport::{Addr, Device};

const MS: u64 = 1_000_000;

/// Which device carries the job between hosts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TransportChoice {
    /// UDP: works between any hosts that can route IP to each other.
    Auto,
    Udp,
    /// Raw Ethernet: every host on one Ethernet segment, CAP_NET_RAW.
    Eth,
    /// Raw Ethernet frames through an AF_XDP socket and an XDP program (root).
    Xdp,
}

/// The network settings (all from the environment, so that `volley run` can pass them on).
#[derive(Clone, Debug)]
pub struct NetConfig {
    pub transport: TransportChoice,
    pub interface: Option<String>,
    pub faults: Option<Faults>,
    pub proto: ProtoConfig,
    /// Run the liveness thread (see `Keeper`). VOLLEY_LIVENESS_THREAD, default on.
    pub keeper: bool,
    /// Authenticate every packet with the job's key (`volley_transport::auth`).
    /// VOLLEY_NET_AUTH, default on; 0 on a trusted, dedicated network.
    pub auth: bool,
    /// UDP segmentation offload on send and receive (VOLLEY_UDP_GSO, VOLLEY_UDP_GRO; default
    /// on where the kernel offers them).
    pub offload: volley_transport::udp::UdpOptions,
    /// Where the xdp transport's program runs (VOLLEY_XDP_MODE: auto, native or generic).
    pub xdp_mode: volley_transport::xdp::ModeChoice,
}

fn env(name: &'static str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn env_u64(name: &'static str) -> Result<Option<u64>, InitError> {
    env(name)
        .map(|v| {
            v.trim().parse::<u64>().map_err(|e| InitError::Env {
                var: name,
                value: v.clone(),
                why: format!("not a number ({e})"),
            })
        })
        .transpose()
}

/// A switch from the environment: 1 (or unset) on, 0 off; anything else an error whose `why`
/// says what the two values mean.
fn env_switch(name: &'static str, why: &str) -> Result<bool, InitError> {
    match env(name).as_deref() {
        None | Some("1") => Ok(true),
        Some("0") => Ok(false),
        Some(o) => Err(InitError::Env {
            var: name,
            value: o.into(),
            why: why.into(),
        }),
    }
}

impl NetConfig {
    pub fn from_env() -> Result<NetConfig, InitError> {
        let transport = match env("VOLLEY_TRANSPORT").as_deref() {
            None | Some("auto") => TransportChoice::Auto,
            Some("udp") => TransportChoice::Udp,
            Some("eth") => TransportChoice::Eth,
            Some("xdp") => TransportChoice::Xdp,
            Some(o) => {
                return Err(InitError::Env {
                    var: "VOLLEY_TRANSPORT",
                    value: o.into(),
                    why: "must be auto, udp, eth or xdp".into(),
                })
            }
        };
        let faults = env("VOLLEY_FAULTS")
            .map(|f| {
                f.parse::<Faults>().map_err(|why| InitError::Env {
                    var: "VOLLEY_FAULTS",
                    value: f.clone(),
                    why,
                })
            })
            .transpose()?;
        let mut proto = ProtoConfig::default();
        if let Some(ms) = env_u64("VOLLEY_PEER_TIMEOUT_MS")? {
            if !(100..=86_400_000).contains(&ms) {
                return Err(InitError::Env {
                    var: "VOLLEY_PEER_TIMEOUT_MS",
                    value: ms.to_string(),
                    why: "must be 100 to 86400000 milliseconds: a peer silent this long is taken for dead, so less than 100 ms loses healthy peers (the default is 10000)".into(),
                });
            }
            proto.peer_timeout = ms * MS;
            proto.heartbeat = proto.heartbeat.min(proto.peer_timeout / 4);
        }
        if let Some(t) = env_u64("VOLLEY_NET_RNDV_THRESHOLD")? {
            proto.rndv_threshold = t as usize;
        }
        if let Some(w) = env_u64("VOLLEY_NET_WINDOW")? {
            if !(2..=1 << 20).contains(&w) {
                return Err(InitError::Env {
                    var: "VOLLEY_NET_WINDOW",
                    value: w.to_string(),
                    why: "must be 2 to 1048576 packets in flight per peer (the default is 4096)"
                        .into(),
                });
            }
            proto.window = w as u32;
        }
        let keeper = env_switch("VOLLEY_LIVENESS_THREAD", "must be 1 (the default) or 0")?;
        let auth = env_switch(
            "VOLLEY_NET_AUTH",
            "must be 1 (the default: every packet is sealed under the job's key) or 0 (bare packets, for a trusted dedicated network)",
        )?;
        let offload = "must be 1 (the default: used where the kernel offers it) or 0 (one datagram per packet)";
        let send_buffer = match env_u64("VOLLEY_UDP_SNDBUF")? {
            None => volley_transport::udp::SEND_BUFFER,
            Some(b) if (4096..=1 << 30).contains(&b) => b as usize,
            Some(b) => {
                return Err(InitError::Env {
                    var: "VOLLEY_UDP_SNDBUF",
                    value: b.to_string(),
                    why: "must be 4096 to 1073741824 bytes (the default, 131072, keeps volley from filling a rate-limiting queue on its own host; more only for NICs faster than 10 Gbit/s)".into(),
                })
            }
        };
        let offload = volley_transport::udp::UdpOptions {
            gso: env_switch("VOLLEY_UDP_GSO", offload)?,
            gro: env_switch("VOLLEY_UDP_GRO", offload)?,
            send_buffer,
        };
        proto.congestion_control = env_switch(
            "VOLLEY_NET_CC",
            "must be 1 (the default: a window that follows losses, to share the network) or 0 (a fixed window, for a network the job has to itself)",
        )?;
        let xdp_mode = match env("VOLLEY_XDP_MODE").as_deref() {
            None | Some("auto") => None,
            Some("native") => Some(volley_sys::xdp::XdpMode::Native),
            Some("generic") => Some(volley_sys::xdp::XdpMode::Generic),
            Some(o) => {
                return Err(InitError::Env {
                    var: "VOLLEY_XDP_MODE",
                    value: o.into(),
                    why: "must be auto (the default: native, generic on a veth), native (in the driver's receive path; fails where the driver has none) or generic".into(),
                })
            }
        };
        Ok(NetConfig {
            xdp_mode,
            transport,
            interface: env("VOLLEY_NET_IF"),
            faults,
            proto,
            keeper,
            auth,
            offload,
        })
    }
}

/// A message from another host, waiting for its port's receive.
pub(crate) struct NetMsg {
    pub src: usize,
    pub tag: u32,
    pub data: Vec<u8>,
    credit: Credit,
    /// A large message announced, its data still with the sender until a receive takes it.
    pub announced: Option<Announced>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Announced {
    /// The protocol's number for it, to accept it by.
    pub msg: u64,
    pub len: usize,
    /// Being placed into a buffer of the network's own (a receive that takes messages whole,
    /// not by envelope, reached it first).
    filling: bool,
}

impl NetMsg {
    pub fn len(&self) -> usize {
        self.announced.map_or(self.data.len(), |a| a.len)
    }
}

/// Where the fragments of an accepted rendezvous message go.
enum Into {
    /// The receive buffer that matched it: the data's one copy.
    Lent(RawBufMut),
    /// A buffer of our own, for a receive that lends messages in place.
    Own(Vec<u8>),
    /// The unpacker of the receive that matched it (a non-contiguous datatype): each fragment
    /// is unpacked where it belongs as it comes, in whatever order, and the message is never
    /// whole in a buffer.
    Unpack(Box<dyn crate::Unpacker>),
}

struct Placing {
    peer: u32,
    msg: u64,
    into: Into,
    done: bool,
}

/// What `volley info` says about the network: what was found, chosen, and why not the others.
pub fn describe_transports() -> Vec<String> {
    let cfg = match NetConfig::from_env() {
        Ok(c) => c,
        Err(e) => return vec![format!("network settings: {e}")],
    };
    let mut out = Vec::new();
    let ifc = volley_transport::pick_interface(cfg.interface.as_deref());
    match &ifc {
        Ok(i) => out.push(format!(
            "interface: {} (index {}, MTU {}, {}{})",
            i.name,
            i.index,
            i.mtu,
            i.ipv4
                .map(|a| a.to_string())
                .unwrap_or_else(|| "no IPv4".into()),
            if i.loopback { ", loopback" } else { "" }
        )),
        Err(e) => out.push(format!("interface: none ({e})")),
    }
    let udp = match &ifc {
        Ok(i) => match i.ipv4 {
            Some(ip) => format!(
                "udp available; segmentation offload: {}",
                udp_offload(ip, cfg.offload)
            ),
            None => "udp unavailable: the interface has no IPv4 address".into(),
        },
        Err(_) => "udp unavailable: no interface".into(),
    };
    let eth = match &ifc {
        Ok(i) if i.loopback => "eth unavailable: loopback has no Ethernet".to_string(),
        Ok(i) => match EthDevice::open(i) {
            Ok(_) => "eth available (EtherType 0x88b5, AF_PACKET rings)".into(),
            Err(e) => format!("eth unavailable: {}", eth_error(i, &e)),
        },
        Err(_) => "eth unavailable: no interface".into(),
    };
    let xdp = match &ifc {
        Ok(i) if i.loopback => "xdp unavailable: loopback has no Ethernet".to_string(),
        // A probe with a token no job has: it steers nothing while it is attached.
        Ok(i) => match XdpDevice::open(
            i,
            Frames::Rank {
                token: volley_sys::random_u64(),
                rank: u32::MAX,
            },
            cfg.xdp_mode,
        ) {
            Ok(d) => format!(
                "xdp available (AF_XDP, {}; packets up to {} bytes)",
                d.describe(),
                d.max_packet()
            ),
            Err(e) => format!("xdp unavailable: {}", xdp_error(i, &e)),
        },
        Err(_) => "xdp unavailable: no interface".into(),
    };
    out.push(udp);
    out.push(eth);
    out.push(xdp);
    out.push(match cfg.transport {
        TransportChoice::Auto => "chosen: udp (automatic: it works between any hosts; eth needs every host on one Ethernet segment, set VOLLEY_TRANSPORT=eth to use it)".into(),
        TransportChoice::Udp => "chosen: udp (VOLLEY_TRANSPORT)".into(),
        TransportChoice::Eth => "chosen: eth (VOLLEY_TRANSPORT)".into(),
        TransportChoice::Xdp => "chosen: xdp (VOLLEY_TRANSPORT; one rank per host takes the interface, the others use eth)".into(),
    });
    if let Some(f) = &cfg.faults {
        out.push(format!("fault injection on receive: {f:?} (VOLLEY_FAULTS)"));
    }
    out
}

/// What a UDP device on `ip` would do about segmentation offload with the settings `off`: a real
/// device opened (GRO is a socket option the kernel accepts or not) and a GSO send probed.
fn udp_offload(ip: std::net::Ipv4Addr, off: volley_transport::udp::UdpOptions) -> String {
    let gso = if !off.gso {
        "GSO off (VOLLEY_UDP_GSO=0)".to_string()
    } else {
        match volley_transport::udp::probe_gso(ip) {
            None => "GSO on".to_string(),
            Some(why) => format!("GSO off ({why})"),
        }
    };
    let gro = match UdpDevice::open_with(ip, 1500, off) {
        _ if !off.gro => "GRO off (VOLLEY_UDP_GRO=0)".to_string(),
        Ok(d) if d.offload_status().ends_with("GRO on") => "GRO on".to_string(),
        Ok(_) => "GRO off (the kernel refused UDP_GRO)".to_string(),
        Err(e) => format!("GRO unknown (no socket: {e})"),
    };
    format!("{gso}, {gro}")
}

/// What went wrong opening the AF_XDP socket or attaching its program, and what to do about it.
fn xdp_error(ifc: &volley_sys::net::Interface, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        format!(
            "xdp on {}: needs CAP_NET_ADMIN, CAP_NET_RAW and CAP_BPF (run as root, or use VOLLEY_TRANSPORT=eth or udp)",
            ifc.name
        )
    } else {
        format!("xdp on {}: {e}", ifc.name)
    }
}

/// The IPv4 address of the interface a multi-host job uses here (VOLLEY_NET_IF, or the only
/// non-loopback one), for tools such as `volley bench` that open their own sockets beside volley.
pub fn host_ipv4() -> Option<std::net::Ipv4Addr> {
    volley_transport::pick_interface(env("VOLLEY_NET_IF").as_deref())
        .ok()
        .and_then(|i| i.ipv4)
}

/// What went wrong opening the raw socket, and what to do about it.
fn eth_error(ifc: &volley_sys::net::Interface, e: &std::io::Error) -> String {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        format!(
            "eth on {}: needs CAP_NET_RAW (run as root, or use VOLLEY_TRANSPORT=udp)",
            ifc.name
        )
    } else {
        format!("eth on {}: {e}", ifc.name)
    }
}

pub(crate) struct Net {
    proto: Proto,
    dev: Box<dyn Device>,
    t0: std::time::Instant,
    /// When the application last pumped (ns since t0), for the liveness thread.
    owner_seen: Arc<AtomicU64>,
    /// Start the liveness thread (VOLLEY_LIVENESS_THREAD).
    pub keeper: bool,
    inbox: Vec<(u32, VecDeque<NetMsg>)>,
    /// Rendezvous messages accepted and arriving, until their receive takes them.
    placing: Vec<Placing>,
    /// Ranks that left: lost (Unreachable) or said goodbye (Finished).
    pub lost: Vec<(usize, crate::Fate)>,
    /// Reliable or best effort, per local port.
    /// The remote ranks.
    pub remote: Vec<usize>,
    /// Deaths the launcher forwarded (`AgentLink::watch`).
    pub notices: Arc<Notices>,
    /// Non-blocking sends the engine could not take yet (its queue to the peer was full), in
    /// the order they were started; each pump hands what it can to the engine, keeping the
    /// order per peer. A non-blocking send never waits for the receiver (MPI-3.1 3.7), and two
    /// ranks that start more sends to each other than the engine queues before either
    /// receives would otherwise wait for each other for ever.
    waiting: VecDeque<Waiting>,
    /// What became of waiting sends, by ticket, until their requests look.
    settled: Vec<(u64, usize, Settled)>,
    next_ticket: u64,
    /// The last transmit stopped at its budget ([`TX_BUDGET`]) with more perhaps to send: the
    /// next pump is due at once.
    tx_more: bool,
    /// See [`Net::moved`].
    moved: u64,
}

/// A send waiting in [`Net::waiting`].
struct Waiting {
    ticket: u64,
    dst: usize,
    tag: u32,
    context: u32,
    /// A buffer of the request's, or memory lent to it (never packed: the network engine takes
    /// whole messages).
    data: Payload,
    how: Reliability,
    /// Its request is gone: what it settles to is dropped (the message still goes).
    abandoned: bool,
}

/// What a waiting send became.
pub(crate) enum Settled {
    /// The engine copied it: the bytes are free (the request gives a buffer back).
    Copied(Payload),
    /// The engine took the buffer over as message `.0`; done once the peer acknowledged it.
    Handed(u64),
    Failed(Refused),
}

/// The job's network key, hex, that rank 0 adds to its card after this separator (the other
/// ranks read it from the table; it travels only through the launcher's pipes or key-value
/// space, never on a command line).
const KEY_SEP: &str = "|k=";

/// A fresh 32-byte key from the kernel's random source.
fn new_key() -> [u8; 32] {
    let mut k = [0u8; 32];
    for c in k.chunks_mut(8) {
        c.copy_from_slice(&volley_sys::random_u64().to_ne_bytes());
    }
    k
}

fn key_hex(k: &[u8; 32]) -> String {
    k.iter().map(|b| format!("{b:02x}")).collect()
}

fn key_from_hex(s: &str) -> Option<[u8; 32]> {
    if s.len() != 64 || !s.is_ascii() {
        return None;
    }
    let mut k = [0u8; 32];
    for (i, b) in k.iter_mut().enumerate() {
        *b = u8::from_str_radix(&s[2 * i..2 * i + 2], 16).ok()?;
    }
    Some(k)
}

/// Splits a card of the table into the address and, on rank 0's, the job's key.
fn split_card(card: &str) -> (&str, Option<&str>) {
    match card.split_once(KEY_SEP) {
        Some((a, k)) => (a, Some(k)),
        None => (card, None),
    }
}

/// Opens the device `cfg` asks for, for rank `rank` of the job `token`.
fn open_device(cfg: &NetConfig, token: u64, rank: u32) -> Result<Box<dyn Device>, String> {
    let ifc = volley_transport::pick_interface(cfg.interface.as_deref())?;
    let ethernet = |name: &str| {
        if ifc.loopback {
            Err(format!(
                "VOLLEY_TRANSPORT={name} but the interface is {} (loopback has no Ethernet); set VOLLEY_NET_IF",
                ifc.name
            ))
        } else {
            Ok(())
        }
    };
    let dev: Box<dyn Device> = match cfg.transport {
        TransportChoice::Eth => {
            ethernet("eth")?;
            Box::new(EthDevice::open(&ifc).map_err(|e| eth_error(&ifc, &e))?)
        }
        TransportChoice::Xdp => {
            ethernet("xdp")?;
            XdpDevice::open_or_eth(&ifc, Frames::Rank { token, rank }, cfg.xdp_mode)
                .map_err(|e| xdp_error(&ifc, &e))?
        }
        TransportChoice::Udp | TransportChoice::Auto => {
            let ip = ifc.ipv4.ok_or_else(|| {
                format!(
                    "interface {} has no IPv4 address; set VOLLEY_NET_IF",
                    ifc.name
                )
            })?;
            Box::new(
                UdpDevice::open_with(ip, ifc.mtu as usize, cfg.offload)
                    .map_err(|e| format!("udp on {ip}: {e}"))?,
            )
        }
    };
    Ok(dev)
}

/// The device as the engine uses it: the fault injector (VOLLEY_FAULTS) next to the wire, as
/// the network's own damage would be, then the sealing under `key` (when the job has one). The
/// injector's junk and damage meet the checks that guard the protocol: a sealed packet that
/// does not open, or, without sealing, the CRC32C and the parser.
fn finish_device(dev: Box<dyn Device>, key: Option<[u8; 32]>, cfg: &NetConfig) -> Box<dyn Device> {
    let dev: Box<dyn Device> = match &cfg.faults {
        Some(f) => Box::new(FaultDevice::new(dev, f.clone())),
        None => dev,
    };
    match key {
        Some(k) => Box::new(volley_transport::auth::AuthDevice::new(dev, k)),
        None => dev,
    }
}

/// Packets one pump sends at most (about 370 KB at MTU 1500, 150 us on the development VM)
/// before it goes back to receiving: a window of a large message sent in one go (megabytes,
/// milliseconds) left the peer's packets unread and unacknowledged meanwhile, so the peer's
/// retransmission timer (500 us at least) fired for packets that had arrived. The next pump is
/// due at once ([`Net::next_deadline_in`]).
const TX_BUDGET: usize = 256;

/// Why the network engine did not take a message.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Refused {
    /// The queue to the peer is full: pump (acknowledgements make room) and retry.
    Full,
    /// The peer is lost or said goodbye.
    Lost,
    /// Larger than the protocol's largest message (`ProtoConfig::max_message`).
    TooLarge { len: u64, max: u64 },
    /// The rank is not a peer of this process's network engine.
    UnknownPeer,
}

impl Refused {
    /// The error a send to job rank `rank` fails with; `fate` is how the rank left, for
    /// [`Refused::Lost`]. [`Refused::Full`] is no error (the send goes later): not asked here.
    pub(crate) fn error(self, rank: usize, fate: crate::Fate) -> crate::error::SendError {
        use crate::error::SendError;
        match self {
            Refused::Lost | Refused::Full => crate::PeerLost { rank, fate }.into(),
            Refused::TooLarge { len, max } => SendError::TooLargeForNetwork { rank, len, max },
            Refused::UnknownPeer => SendError::UnknownPeer { rank },
        }
    }
}

/// The link to this node's agent (jobs `volley run` started on several hosts): the address
/// exchange (one line out, the table of every rank's card back), then, for the rest of the job,
/// the deaths the launcher forwards ("lost <rank> <fate>"), read by a watcher thread.
pub(crate) struct AgentLink {
    w: UnixStream,
    r: BufReader<UnixStream>,
    rank: usize,
}

impl AgentLink {
    pub fn new(boot: OwnedFd, rank: usize) -> Result<AgentLink, InitError> {
        let w = UnixStream::from(boot);
        let r = BufReader::new(w.try_clone().map_err(InitError::Agent)?);
        Ok(AgentLink { w, r, rank })
    }

    pub fn exchange(&mut self, card: &str) -> Result<Vec<String>, InitError> {
        self.w
            .write_all(format!("card {} {card}\n", self.rank).as_bytes())
            .map_err(InitError::Agent)?;
        let mut line = String::new();
        self.r.read_line(&mut line).map_err(InitError::Agent)?;
        Ok(line
            .trim()
            .strip_prefix("table ")
            .unwrap_or("")
            .split(' ')
            .map(String::from)
            .collect())
    }

    /// Watches the link for the rest of the job: each death the launcher forwards goes into
    /// `notices`, and `bell` (this rank's doorbell) wakes the rank if it sleeps, so that a
    /// rank waiting on a peer on another host hears of its end at once instead of after the
    /// peer timeout (issue 16, defect 5). The thread ends when the agent closes the link.
    pub fn watch(self, notices: Arc<Notices>, bell: volley_sys::EventFd) -> std::io::Result<()> {
        let mut r = self.r;
        std::thread::Builder::new()
            .name("volley-agent-link".into())
            .spawn(move || {
                let _keep = self.w;
                let mut line = String::new();
                loop {
                    line.clear();
                    match r.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let mut w = line.split_whitespace();
                    if let (Some("lost"), Some(rank), Some(fate)) = (w.next(), w.next(), w.next()) {
                        if let (Ok(rank), Some(fate)) = (rank.parse(), crate::Fate::from_code(fate))
                        {
                            notices.post(rank, fate);
                            bell.notify();
                        }
                    }
                }
            })?;
        Ok(())
    }
}

/// Deaths of ranks on other hosts that the launcher forwarded, waiting for the next pump. The
/// flag is all a pump reads when there are none (one load, no lock).
#[derive(Default)]
pub(crate) struct Notices {
    any: AtomicBool,
    list: std::sync::Mutex<Vec<(usize, crate::Fate)>>,
}

impl Notices {
    fn post(&self, rank: usize, fate: crate::Fate) {
        self.list
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push((rank, fate));
        // SYNC: Release; pairs with the Acquire in `take`: the list's entry is seen with it.
        self.any.store(true, Ordering::Release);
    }

    fn take(&self) -> Vec<(usize, crate::Fate)> {
        // A plain load on every pump (no write, so the cache line stays shared); the swap only
        // when something came. SYNC: Acquire; pairs with the Release in `post`.
        if !self.any.load(Ordering::Acquire) || !self.any.swap(false, Ordering::Acquire) {
            return Vec::new();
        }
        std::mem::take(&mut *self.list.lock().unwrap_or_else(|e| e.into_inner()))
    }
}

/// The address exchange through the launcher's key-value space (jobs Hydra or Slurm started):
/// put, fence, get the card of every rank on another host.
pub(crate) fn pmi_exchange<'a>(
    pmi: &'a mut crate::pmi::Pmi,
    info: &'a JobInfo,
) -> impl FnMut(&str) -> Result<Vec<String>, InitError> + 'a {
    move |card: &str| {
        pmi.put(&format!("volley-card-{}", info.rank), card.as_bytes())?;
        pmi.fence()?;
        (0..info.size)
            .map(|r| {
                // Rank 0's card is read on every host: it carries the job's network key.
                if info.nodes[r] == info.node_id && r != 0 {
                    return Ok("-".to_string());
                }
                let v = pmi.get(&format!("volley-card-{r}"))?;
                String::from_utf8(v).map_err(|_| InitError::Pmi {
                    flavor: pmi.flavor().name(),
                    why: format!("rank {r}'s network address is not text"),
                })
            })
            .collect()
    }
}

impl Net {
    /// Opens the device, trades addresses with every rank (through the node's agent or the
    /// launcher's key-value space), and makes each remote rank a peer.
    pub fn open(
        info: &JobInfo,
        exchange: &mut dyn FnMut(&str) -> Result<Vec<String>, InitError>,
    ) -> Result<Net, InitError> {
        let net_err = |why: String| InitError::Env {
            var: "VOLLEY_TRANSPORT",
            value: env("VOLLEY_TRANSPORT").unwrap_or_else(|| "auto".into()),
            why,
        };
        let cfg = NetConfig::from_env()?;
        let raw = open_device(&cfg, info.token, info.rank as u32).map_err(net_err)?;
        let mut proto_cfg = cfg.proto.clone();
        proto_cfg.max_packet = raw.max_packet()
            - if cfg.auth {
                volley_transport::auth::TRAILER_LEN
            } else {
                0
            };
        // A matched receive takes a large message straight into its buffer.
        proto_cfg.receiver_places = true;
        // Sealed packets carry no CRC: one altered on the way does not open (the fault
        // injector sits under the sealing, so its damage meets that check; `finish_device`).
        proto_cfg.checksums = !cfg.auth;
        proto_cfg.validate().map_err(net_err)?;

        // The address exchange: our card out, everyone's back. Rank 0's card carries the job's
        // key when packets are authenticated.
        let mut card = raw.local_addr().to_string();
        if cfg.auth && info.rank == 0 {
            card.push_str(KEY_SEP);
            card.push_str(&key_hex(&new_key()));
        }
        let table = exchange(&card)?;
        if table.len() != info.size {
            return Err(net_err(format!(
                "the address exchange gave {} addresses for {} ranks (did the job start?)",
                table.len(),
                info.size
            )));
        }
        let key = match (cfg.auth, split_card(&table[0]).1) {
            (true, Some(k)) => Some(key_from_hex(k).ok_or_else(|| {
                net_err("rank 0's network key is malformed".into())
            })?),
            (false, None) => None,
            (true, None) => {
                return Err(InitError::Env {
                    var: "VOLLEY_NET_AUTH",
                    value: "1".into(),
                    why: "rank 0 authenticates no packets (it has VOLLEY_NET_AUTH=0): every rank of a job must have the same VOLLEY_NET_AUTH".into(),
                })
            }
            (false, Some(_)) => {
                return Err(InitError::Env {
                    var: "VOLLEY_NET_AUTH",
                    value: "0".into(),
                    why: "rank 0 authenticates its packets: every rank of a job must have the same VOLLEY_NET_AUTH".into(),
                })
            }
        };
        let mut dev = finish_device(raw, key, &cfg);
        let t0 = std::time::Instant::now();
        let mut proto = Proto::new(proto_cfg, info.rank as u32, info.token);
        let mut remote = Vec::new();
        for (r, a) in table.iter().enumerate() {
            if info.nodes[r] == info.node_id {
                continue;
            }
            let addr: Addr = split_card(a).0.parse().map_err(net_err)?;
            dev.set_peer(r as u32, addr).map_err(|e| {
                net_err(format!(
                    "rank {r}: {e} (do all ranks use the same VOLLEY_TRANSPORT?)"
                ))
            })?;
            proto.add_peer(r as u32, 0);
            remote.push(r);
        }
        Ok(Net {
            proto,
            dev,
            t0,
            owner_seen: Arc::new(AtomicU64::new(0)),
            keeper: cfg.keeper,
            inbox: Vec::new(),
            placing: Vec::new(),
            lost: Vec::new(),
            remote,
            notices: Arc::default(),
            waiting: VecDeque::new(),
            settled: Vec::new(),
            next_ticket: 0,
            tx_more: false,
            moved: 0,
        })
    }

    pub fn now(&self) -> u64 {
        self.t0.elapsed().as_nanos() as u64
    }

    pub fn kind(&self) -> String {
        self.dev.kind()
    }

    pub fn fd(&self) -> RawFd {
        self.dev.fd()
    }

    /// Nanoseconds until the engine or the device next needs a call, from now.
    pub fn next_deadline_in(&self) -> Option<u64> {
        if self.tx_more {
            return Some(0);
        }
        let now = self.now();
        let t = match (self.proto.poll_timeout(), self.dev.next_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        t.map(|t| t.saturating_sub(now))
    }

    /// One round of I/O. Returns how many messages or losses it delivered.
    /// Receives, handles timers and sends what is due, on behalf of the application.
    pub fn pump(&mut self) -> usize {
        let now = self.now();
        // Relaxed: a hint for the liveness thread, which only decides whether to help.
        self.owner_seen.store(now, Ordering::Relaxed);
        self.pump_at(now)
    }

    fn pump_at(&mut self, now: u64) -> usize {
        // Deaths the launcher forwarded: each such peer is lost now, with its real fate.
        for (r, fate) in self.notices.take() {
            if self.remote.contains(&r) && !self.lost.iter().any(|&(l, _)| l == r) {
                self.lost.push((r, fate));
                self.placing.retain(|p| p.peer != r as u32);
                self.proto.declare_lost(r as u32);
            }
        }
        let proto = &mut self.proto;
        let placing = &mut self.placing;
        let mut place = |pl: Placement<'_>| {
            // The engine hands over fragments of accepted messages only, and we accept a message
            // only once its placement is here.
            if let Some(p) = placing
                .iter_mut()
                .find(|p| p.peer == pl.peer && p.msg == pl.msg)
            {
                let off = pl.offset as usize;
                let to = match &mut p.into {
                    Into::Lent(b) => b.as_mut_slice(),
                    Into::Own(v) => &mut v[..],
                    Into::Unpack(u) => return u.unpack(off, pl.bytes),
                };
                to[off..off + pl.bytes.len()].copy_from_slice(pl.bytes);
            }
        };
        // A device error here is a broken socket; the engine will declare the peers lost.
        if let Ok(k) = self.dev.receive(now, &mut |p| {
            let _ = proto.handle_placing(now, p, &mut place);
        }) {
            self.moved += k as u64;
        }
        if self.proto.poll_timeout().is_some_and(|t| t <= now) {
            self.proto.handle_timeout(now);
        }
        if !self.waiting.is_empty() {
            self.drain_waiting();
        }
        self.transmit(now);
        let mut n = 0;
        while let Some(ev) = self.proto.poll_event() {
            n += 1;
            match ev {
                Event::Message {
                    peer,
                    tag,
                    context,
                    data,
                    credit,
                    ..
                } => {
                    // The credit goes back when the application takes the message: until then
                    // the sender's eager traffic is bounded by this receiver's pool.
                    let m = NetMsg {
                        src: peer as usize,
                        tag,
                        data,
                        credit,
                        announced: None,
                    };
                    self.queue_msg(context, m);
                }
                Event::Announced {
                    peer,
                    msg,
                    tag,
                    context,
                    len,
                } => {
                    let m = NetMsg {
                        src: peer as usize,
                        tag,
                        data: Vec::new(),
                        credit: Credit::default(),
                        announced: Some(Announced {
                            msg,
                            len: len as usize,
                            filling: false,
                        }),
                    };
                    self.queue_msg(context, m);
                }
                Event::Placed { peer, msg } => {
                    let Some(i) = self
                        .placing
                        .iter()
                        .position(|p| p.peer == peer && p.msg == msg)
                    else {
                        continue;
                    };
                    if matches!(self.placing[i].into, Into::Lent(_) | Into::Unpack(_)) {
                        // Its receive takes it (take_placed).
                        self.placing[i].done = true;
                        continue;
                    }
                    let Into::Own(data) = self.placing.swap_remove(i).into else {
                        unreachable!("checked")
                    };
                    // Whole now: the message waits in the inbox like any other.
                    if let Some(m) =
                        self.inbox
                            .iter_mut()
                            .flat_map(|(_, q)| q.iter_mut())
                            .find(|m| {
                                m.src == peer as usize && m.announced.is_some_and(|a| a.msg == msg)
                            })
                    {
                        m.data = data;
                        m.announced = None;
                    }
                }
                Event::PeerLost { peer } => {
                    // What was arriving from it never will: the loans end now.
                    self.placing.retain(|p| p.peer != peer);
                    self.lost.push((peer as usize, crate::Fate::Unreachable))
                }
                Event::PeerFinished { peer } => {
                    self.lost.push((peer as usize, crate::Fate::Finished))
                }
            }
        }
        n
    }

    fn queue_msg(&mut self, context: u32, m: NetMsg) {
        match self.inbox.iter_mut().find(|(p, _)| *p == context) {
            Some((_, q)) => q.push_back(m),
            None => self.inbox.push((context, VecDeque::from([m]))),
        }
    }

    /// Accepts announced message `msg` from `peer`, taken out of the inbox by a matched receive:
    /// its fragments go straight into `into` as they arrive; [`Net::take_placed`] says when it
    /// is whole. A peer already lost: the buffer is given back at once and the receive learns
    /// of the loss from the peer's fate.
    pub fn place(&mut self, peer: usize, msg: u64, into: RawBufMut) {
        self.accept_into(peer, msg, Into::Lent(into));
    }

    /// Accepts announced message `msg` from `peer` into the unpacker `u` of the receive that
    /// matched it: its fragments are unpacked as they come (see [`Net::take_placed`]).
    pub fn place_unpacked(&mut self, peer: usize, msg: u64, u: Box<dyn crate::Unpacker>) {
        self.accept_into(peer, msg, Into::Unpack(u));
    }

    /// Accepts announced message `msg` from `peer`, its fragments to go `into` as they come
    /// (dropped at once if the peer is lost already).
    fn accept_into(&mut self, peer: usize, msg: u64, into: Into) {
        let peer = peer as u32;
        if self.proto.accept(peer, msg) {
            self.placing.push(Placing {
                peer,
                msg,
                into,
                done: false,
            });
        }
    }

    /// Whether message `msg` from `peer` is whole in its receive buffer; if so the loan ends.
    pub fn take_placed(&mut self, peer: usize, msg: u64) -> bool {
        let i = self
            .placing
            .iter()
            .position(|p| p.peer == peer as u32 && p.msg == msg);
        match i {
            Some(i) if self.placing[i].done => {
                self.placing.swap_remove(i);
                true
            }
            _ => false,
        }
    }

    /// The receive placing message `msg` from `peer` gives up (it failed): its loan ends now,
    /// and the rest of the message is dropped as it comes.
    pub fn abandon_placing(&mut self, peer: usize, msg: u64) {
        let peer = peer as u32;
        self.placing.retain(|p| !(p.peer == peer && p.msg == msg));
        self.proto.discard(peer, msg);
    }

    /// Whether sends to `dst` wait for the engine: a new one goes behind them.
    pub(crate) fn has_waiting(&self, dst: usize) -> bool {
        self.waiting.iter().any(|w| w.dst == dst)
    }

    /// Whether a send of `data` hands its bytes over to the engine instead of being copied: a
    /// large, reliable one in a buffer of the request's own (given back once acknowledged) or
    /// in memory its request lent (read by the engine as it sends, the loan ending once
    /// acknowledged), or made by a packer (packed into each packet as it goes, never whole).
    /// Either way the request completes when the peer has acknowledged it.
    pub(crate) fn hands_over(&self, data: &Payload, how: Reliability) -> bool {
        matches!(
            data,
            Payload::Owned(_) | Payload::Lent(_) | Payload::Packed(_)
        ) && self.takes_over(data.len(), how)
    }

    /// Whether a message of `len` bytes sent `how` is one the engine takes over rather than
    /// copies (see [`Net::hands_over`]): a reliable one above the rendezvous threshold.
    pub(crate) fn takes_over(&self, len: usize, how: Reliability) -> bool {
        how == Reliability::Reliable && len > self.rndv_threshold()
    }

    /// Files a send the engine could not take now, behind any waiting to `dst`, and offers the
    /// waiting sends to the engine at once. Returns its ticket ([`Net::take_settled`]).
    pub(crate) fn queue_send(
        &mut self,
        dst: usize,
        tag: u32,
        context: u32,
        data: Payload,
        how: Reliability,
    ) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.waiting.push_back(Waiting {
            ticket,
            dst,
            tag,
            context,
            data,
            how,
            abandoned: false,
        });
        self.drain_waiting();
        ticket
    }

    /// What became of the waiting send `ticket`, once the engine took it or refused it for
    /// good (given once).
    pub(crate) fn take_settled(&mut self, ticket: u64) -> Option<Settled> {
        let i = self.settled.iter().position(|(t, ..)| *t == ticket)?;
        Some(self.settled.swap_remove(i).2)
    }

    /// Ends the loan of lent message `id` to job rank `dst` once at most a window is to go
    /// (`Engine::release_lent`): what is not acknowledged yet is copied, and the message
    /// completes for nobody. Whether the loan ended.
    pub(crate) fn release_lent(&mut self, dst: usize, id: u64) -> bool {
        self.proto.release_lent(dst as u32, id)
    }

    /// Nobody will ask after the waiting send `ticket`: it still goes, its outcome is dropped.
    pub(crate) fn abandon_waiting(&mut self, ticket: u64) {
        if let Some(w) = self.waiting.iter_mut().find(|w| w.ticket == ticket) {
            w.abandoned = true;
        } else if let Some(i) = self.settled.iter().position(|(t, ..)| *t == ticket) {
            if let (_, dst, Settled::Handed(id)) = self.settled.swap_remove(i) {
                // The engine drops the buffer once the peer acknowledged it.
                self.proto.abandon(dst as u32, id);
            }
        }
    }

    /// Hands waiting sends to the engine in order, each peer's until the engine refuses one.
    fn drain_waiting(&mut self) {
        // Peers whose next waiting send was refused this pass (rarely more than a few).
        let mut blocked: Vec<usize> = Vec::new();
        let mut i = 0;
        while i < self.waiting.len() {
            if blocked.contains(&self.waiting[i].dst) {
                i += 1;
                continue;
            }
            let w = self.waiting.remove(i).expect("in range");
            match self.offer(w) {
                Ok((w, settled)) => {
                    if w.abandoned {
                        if let Settled::Handed(id) = settled {
                            self.proto.abandon(w.dst as u32, id);
                        }
                    } else {
                        self.settled.push((w.ticket, w.dst, settled));
                    }
                }
                Err(w) => {
                    blocked.push(w.dst);
                    self.waiting.insert(i, w);
                    i += 1;
                }
            }
        }
    }

    /// Offers one waiting send to the engine, as a send that did not wait would be offered
    /// (handed over or copied): taken or failed for good (with what it settled to), or
    /// refused for now (back to wait).
    fn offer(&mut self, mut w: Waiting) -> Result<(Waiting, Settled), Waiting> {
        if self.hands_over(&w.data, w.how) {
            return match self.hand_over(w.dst, w.tag, w.context, std::mem::take(&mut w.data)) {
                Ok(id) => Ok((w, Settled::Handed(id))),
                Err((d, Refused::Full)) => {
                    w.data = d;
                    Err(w)
                }
                Err((_, why)) => Ok((w, Settled::Failed(why))),
            };
        }
        match self.try_send(w.dst, w.tag, w.context, &w.data, w.how) {
            Ok(()) => {
                let data = std::mem::take(&mut w.data);
                Ok((w, Settled::Copied(data)))
            }
            Err(Refused::Full) => Err(w),
            Err(why) => Ok((w, Settled::Failed(why))),
        }
    }

    fn transmit(&mut self, now: u64) {
        let (proto, more) = (&mut self.proto, &mut self.tx_more);
        let mut budget = TX_BUDGET;
        *more = false;
        let _ = self.dev.transmit(&mut |buf| {
            if budget == 0 {
                *more = true;
                return None;
            }
            budget -= 1;
            proto
                .poll_transmit(now, buf)
                .map(|t| volley_transport::Out {
                    peer: t.peer,
                    len: t.len,
                    burst: t.burst,
                })
        });
        self.moved += (TX_BUDGET - budget) as u64;
    }

    /// Packets received and made so far: moves while a transfer goes on (a waiting loop that
    /// sees it move keeps polling instead of drifting into sleeps).
    pub(crate) fn moved(&self) -> u64 {
        self.moved
    }

    /// Queues a message (copied). Says why not if it cannot: [`Refused::Full`] means pump and
    /// retry.
    pub fn try_send(
        &mut self,
        dst: usize,
        tag: u32,
        context: u32,
        data: &[u8],
        how: Reliability,
    ) -> Result<(), Refused> {
        if !self.proto.can_send(dst as u32, data.len()) {
            if self.proto.is_lost(dst as u32) {
                return Err(Refused::Lost);
            }
            return Err(Refused::Full);
        }
        let buf = self.proto.buffer_from(data);
        self.send_owned(dst, tag, context, buf, how)
            .map_err(|(_, why)| why)
    }

    /// Queues a reliable message whose bytes the engine takes over, a buffer it gives back or
    /// memory whose loan it ends once the peer acknowledged it (see `take_returned`): no copy
    /// of it is made. Returns its id; refused, the bytes come back with why ([`Payload`]'s
    /// default when the refusal is for good).
    pub(crate) fn hand_over(
        &mut self,
        dst: usize,
        tag: u32,
        context: u32,
        data: Payload,
    ) -> Result<u64, (Payload, Refused)> {
        use volley_proto::SendError as E;
        let now = self.now();
        let (peer, r) = (dst as u32, &mut self.proto);
        let r = match data {
            Payload::Owned(v) => {
                r.send_returning(now, peer, tag, context, v)
                    .map_err(|e| match e {
                        E::Busy(v) => (Payload::Owned(v), E::Busy(Vec::new())),
                        e => (Payload::default(), e),
                    })
            }
            Payload::Lent(b) => r
                .send_lent(now, peer, tag, context, b)
                .map_err(|(b, e)| (b.map_or_else(Payload::default, Payload::Lent), e)),
            Payload::Packed(p) => {
                let len = p.len();
                r.send_packed(now, peer, tag, context, len, PackFill(p))
                    .map_err(|(PackFill(p), e)| match e {
                        E::Busy(_) => (Payload::Packed(p), E::Busy(Vec::new())),
                        e => (Payload::default(), e),
                    })
            }
        };
        match r {
            Ok(id) => {
                self.transmit(now);
                Ok(id)
            }
            Err((d, E::Busy(_))) => Err((d, Refused::Full)),
            Err((d, E::PeerLost)) => Err((d, Refused::Lost)),
            Err((d, E::TooLarge { len, max })) => Err((d, Refused::TooLarge { len, max })),
            Err((d, E::NoSuchPeer)) => Err((d, Refused::UnknownPeer)),
        }
    }

    /// The buffer of message `id` to `dst`, once acknowledged.
    pub fn take_returned(&mut self, dst: usize, id: u64) -> Option<Vec<u8>> {
        self.proto.take_returned(dst as u32, id)
    }

    pub fn is_returned(&self, dst: usize, id: u64) -> bool {
        self.proto.is_returned(dst as u32, id)
    }

    /// Nobody will take message `id`'s buffer back.
    pub fn abandon(&mut self, dst: usize, id: u64) {
        self.proto.abandon(dst as u32, id)
    }

    /// Messages above this many bytes go by rendezvous: handing the buffer over pays off.
    pub fn rndv_threshold(&self) -> usize {
        self.proto.config().rndv_threshold
    }

    /// How rank `rank` left, if it did.
    pub fn fate_of(&self, rank: usize) -> Option<crate::Fate> {
        self.lost.iter().find(|(r, _)| *r == rank).map(|&(_, f)| f)
    }

    /// Queues a message the engine takes over.
    pub fn send_owned(
        &mut self,
        dst: usize,
        tag: u32,
        context: u32,
        data: Vec<u8>,
        how: Reliability,
    ) -> Result<(), (Vec<u8>, Refused)> {
        let now = self.now();
        match self.proto.send(now, dst as u32, tag, context, data, how) {
            Ok(()) => {
                // Out at once: a small message should not wait for the next poll.
                self.transmit(now);
                Ok(())
            }
            Err(volley_proto::SendError::Busy(d)) => Err((d, Refused::Full)),
            Err(volley_proto::SendError::PeerLost) => Err((Vec::new(), Refused::Lost)),
            Err(volley_proto::SendError::TooLarge { len, max }) => {
                Err((Vec::new(), Refused::TooLarge { len, max }))
            }
            Err(volley_proto::SendError::NoSuchPeer) => Err((Vec::new(), Refused::UnknownPeer)),
        }
    }

    pub fn buffer(&mut self, len: usize) -> Vec<u8> {
        self.proto.buffer(len)
    }

    pub fn recycle(&mut self, v: Vec<u8>) {
        self.proto.recycle(v)
    }

    /// The next message for `port`, if one has arrived.
    pub fn take(&mut self, port: u32) -> Option<NetMsg> {
        self.take_whole(&Pattern::port(port))
    }

    /// Where the first message `pat` matches sits in the inbox of its context. Messages of one
    /// context wait in arrival order, which the protocol keeps per sender: the first match is
    /// the one MPI's ordering rule wants.
    /// A message that is being placed into our own buffer is not there yet, and neither is
    /// anything behind it that the same pattern accepts.
    fn find(&self, pat: &Pattern) -> Option<(usize, usize)> {
        let qi = self.inbox.iter().position(|(p, _)| *p == pat.context)?;
        let mi = self.inbox[qi]
            .1
            .iter()
            .position(|m| pat.accepts_from(m.src, m.tag))?;
        if self.inbox[qi].1[mi].announced.is_some_and(|a| a.filling) {
            return None;
        }
        Some((qi, mi))
    }

    /// The first message `pat` matches, taken out of the inbox (its credit goes back). An
    /// announced one comes without its data: the caller places it ([`Net::place`]).
    pub fn take_matching(&mut self, pat: &Pattern) -> Option<NetMsg> {
        let (qi, mi) = self.find(pat)?;
        let m = self.inbox[qi].1.remove(mi).expect("found");
        self.proto.release(m.credit);
        Some(m)
    }

    /// The first message `pat` matches, whole: one still announced is accepted into a buffer
    /// of our own first (for receives that lend messages in place rather than match).
    fn take_whole(&mut self, pat: &Pattern) -> Option<NetMsg> {
        let (qi, mi) = self.find(pat)?;
        let m = &mut self.inbox[qi].1[mi];
        let peer = m.src as u32;
        if let Some(a) = &mut m.announced {
            let msg = a.msg;
            if self.proto.accept(peer, msg) {
                a.filling = true;
                let buf = self.proto.buffer(a.len);
                self.placing.push(Placing {
                    peer,
                    msg,
                    into: Into::Own(buf),
                    done: false,
                });
            }
            return None;
        }
        self.take_matching(pat)
    }

    /// The envelope (source, tag, length) of the first message `pat` matches, left in place.
    pub fn peek_matching(&self, pat: &Pattern) -> Option<(usize, u32, usize)> {
        let (qi, mi) = self.find(pat)?;
        let m = &self.inbox[qi].1[mi];
        Some((m.src, m.tag, m.len()))
    }

    /// A message for any port `wanted` says yes to (the active ports), if one has arrived.
    pub fn take_any(&mut self, wanted: impl Fn(u32) -> bool) -> Option<(u32, NetMsg)> {
        for qi in 0..self.inbox.len() {
            let p = self.inbox[qi].0;
            if wanted(p) && !self.inbox[qi].1.is_empty() {
                if let Some(m) = self.take_whole(&Pattern::port(p)) {
                    return Some((p, m));
                }
            }
        }
        None
    }

    /// Waits (pumping) until the peers have acknowledged everything sent, or `limit` passes.
    pub fn flush(&mut self, limit: std::time::Duration) {
        let t = std::time::Instant::now();
        while !(self.waiting.is_empty() && self.proto.all_acked()) && t.elapsed() < limit {
            self.pump();
            let wait = self.next_deadline_in().unwrap_or(MS).min(MS);
            volley_sys::net::poll_any(&[self.fd()], Some(wait));
        }
    }

    /// Says goodbye to the peers and gives the goodbyes a moment to leave.
    pub fn close(&mut self) {
        self.proto.close();
        for _ in 0..3 {
            let now = self.now();
            self.transmit(now);
        }
    }

    /// The network's part of volley's counters table (after the core's, see
    /// `counters::counter_table`): the protocol's counters summed over peers, its engine's own,
    /// its drops by reason, the device's counters by name.
    pub fn table_values(&self) -> Vec<u64> {
        use volley_proto::{DROP_REASONS, ENGINE_COUNTERS, PEER_COUNTERS};
        let np = PEER_COUNTERS.len() + ENGINE_COUNTERS.len();
        let nd = DROP_REASONS.len();
        let mut out = vec![0; np + nd + volley_transport::DEVICE_COUNTERS.len()];
        for (_, values) in self.per_peer() {
            for (o, v) in out.iter_mut().zip(values) {
                *o += v;
            }
        }
        out[PEER_COUNTERS.len()..np].copy_from_slice(&self.proto.engine_counters());
        out[np..np + nd].copy_from_slice(&self.proto.drops);
        for (name, v) in self.dev.counters() {
            if let Some(i) = volley_transport::DEVICE_COUNTERS
                .iter()
                .position(|(n, _, _)| *n == name)
            {
                out[np + nd + i] += v;
            }
        }
        out
    }

    /// Each remote rank's protocol counters, in the order of `volley_proto::PEER_COUNTERS`.
    pub fn per_peer(&self) -> Vec<(usize, Vec<u64>)> {
        self.remote
            .iter()
            .filter_map(|&r| Some((r, self.proto.peer_counters(r as u32)?.values())))
            .collect()
    }
}

/// A packer as the network engine asks for its bytes: each fragment packed straight into its
/// packet, again for a retransmission (see `volley_proto::Engine::send_packed`).
struct PackFill(Box<dyn crate::Packer>);

impl volley_proto::Fill for PackFill {
    fn fill(&mut self, off: usize, out: &mut [u8]) {
        self.0.pack(off, out)
    }
}

/// The liveness thread: while the application computes without calling volley, it answers the
/// network for it (acknowledgements, heartbeats, retransmissions; arriving messages wait in the
/// inbox), so that peers do not take a long computation for a death. It takes the network only
/// when the application has not pumped for a while, and only with `Exclusive::keep`, which never
/// makes the application fail: at worst the application waits for one pump. It runs no user
/// code: active-port handlers still run in the application's calls.
pub(crate) struct Keeper {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Keeper {
    pub fn start(net: Arc<Exclusive<Net>>) -> std::io::Result<Keeper> {
        let (seen, t0, heartbeat) = {
            let n = net.borrow_mut();
            (n.owner_seen.clone(), n.t0, n.proto.config().heartbeat)
        };
        // Well within a heartbeat, so the peers hear from us in time.
        let every = std::time::Duration::from_nanos((heartbeat / 4).max(5 * MS));
        let stop = Arc::new(AtomicBool::new(false));
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new()
            .name("volley-liveness".into())
            .spawn(move || {
                // SYNC: Acquire; pairs with the Release in Keeper::drop.
                while !stop2.load(Ordering::Acquire) {
                    std::thread::park_timeout(every);
                    let now = t0.elapsed().as_nanos() as u64;
                    let away = now.saturating_sub(seen.load(Ordering::Relaxed));
                    if away >= 2 * every.as_nanos() as u64 {
                        if let Some(mut n) = net.keep() {
                            let now = n.now();
                            n.pump_at(now);
                        }
                    }
                }
            })?;
        Ok(Keeper {
            stop,
            thread: Some(thread),
        })
    }
}

impl Drop for Keeper {
    fn drop(&mut self) {
        // SYNC: Release; pairs with the Acquire in the thread's loop.
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}
