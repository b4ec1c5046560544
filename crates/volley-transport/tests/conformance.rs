//! One conformance suite for every device (../shared/STYLE.md: "one conformance suite, generic
//! over the transport, runs against every implementation"). Each check takes a pair of connected
//! devices (rank 0 and rank 1) from every kind below and holds it to the contract written on
//! `Device`, then drives the protocol engine over it. The in-memory device needs nothing; UDP
//! runs on 127.0.0.1; raw Ethernet needs root and a veth pair, so it runs where the test may make
//! one (as root; the pair is removed afterwards, also when a check fails).

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};
use volley_sys::xdp::XdpMode;
use volley_transport::fault::FaultDevice;
use volley_transport::loopback::{Hub, QUEUE_PACKETS};
use volley_transport::udp::{UdpDevice, UdpOptions};
use volley_transport::xdp::{Frames, XdpDevice};
use volley_transport::{Addr, Device, Out, DEVICE_COUNTERS};

type Dev = Box<dyn Device>;

/// A kind of device under test, and what it promises beyond the contract.
struct Kind {
    name: &'static str,
    make: fn() -> (Dev, Dev),
    /// Every packet it took arrives, however slowly the other side receives (true of an
    /// in-memory queue; not of UDP, whose receiving socket drops when full).
    lossless: bool,
    /// Packets from one sender arrive in the order sent.
    ordered: bool,
}

fn connect(mut a: Dev, mut b: Dev) -> (Dev, Dev) {
    a.set_peer(1, b.local_addr()).unwrap();
    b.set_peer(0, a.local_addr()).unwrap();
    (a, b)
}

fn loopback() -> (Dev, Dev) {
    let hub = Hub::new();
    connect(
        Box::new(hub.device(1400).unwrap()),
        Box::new(hub.device(1400).unwrap()),
    )
}

fn udp() -> (Dev, Dev) {
    let ip = std::net::Ipv4Addr::LOCALHOST;
    connect(
        Box::new(UdpDevice::open(ip, 1500).unwrap()),
        Box::new(UdpDevice::open(ip, 1500).unwrap()),
    )
}

/// UDP without segmentation offload: one datagram per packet both ways.
fn udp_plain() -> (Dev, Dev) {
    let ip = std::net::Ipv4Addr::LOCALHOST;
    let off = UdpOptions {
        gso: false,
        gro: false,
        ..UdpOptions::default()
    };
    connect(
        Box::new(UdpDevice::open_with(ip, 1500, off).unwrap()),
        Box::new(UdpDevice::open_with(ip, 1500, off).unwrap()),
    )
}

/// A veth pair in this namespace for the Ethernet device, removed on drop.
struct Veth(String);

impl Veth {
    fn new() -> Option<Veth> {
        // Checks run in parallel threads: one pair each.
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let name = format!("vc{}x{n}", std::process::id() % 100_000);
        let ok = |args: &[&str]| {
            Command::new("ip")
                .args(args)
                .output()
                .is_ok_and(|o| o.status.success())
        };
        if !ok(&[
            "link",
            "add",
            &name,
            "type",
            "veth",
            "peer",
            "name",
            &format!("{name}p"),
        ]) {
            return None;
        }
        let v = Veth(name);
        for n in [v.0.clone(), format!("{}p", v.0)] {
            if !ok(&["link", "set", &n, "up"]) {
                return None;
            }
        }
        Some(v)
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["link", "del", &self.0]).output();
    }
}

fn find(name: &str) -> volley_sys::net::Interface {
    volley_sys::net::interfaces()
        .unwrap()
        .into_iter()
        .find(|i| i.name == name)
        .unwrap()
}

fn eth_on(v: &Veth) -> (Dev, Dev) {
    let a = volley_transport::eth::EthDevice::open(&find(&v.0)).unwrap();
    let b = volley_transport::eth::EthDevice::open(&find(&format!("{}p", v.0))).unwrap();
    connect(Box::new(a), Box::new(b))
}

/// AF_XDP on both ends of the pair, every frame of volley's EtherType steered to the socket
/// (the suite's packets are raw bytes, not a job's), the program where `mode` says.
fn xdp_on(v: &Veth, mode: Option<XdpMode>) -> (Dev, Dev) {
    let open = |n: &str| XdpDevice::open(&find(n), Frames::All, mode).unwrap();
    connect(Box::new(open(&v.0)), Box::new(open(&format!("{}p", v.0))))
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "loopback",
            make: loopback,
            lossless: true,
            ordered: true,
        },
        Kind {
            name: "udp",
            make: udp,
            lossless: false,
            ordered: true,
        },
        Kind {
            name: "udp without offload",
            make: udp_plain,
            lossless: false,
            ordered: true,
        },
    ]
}

/// Runs `check` on every kind, and on raw Ethernet over a fresh veth pair where one can be made.
fn for_each_kind(check: impl Fn(&str, &mut dyn FnMut() -> (Dev, Dev), bool, bool)) {
    for k in kinds() {
        check(k.name, &mut || (k.make)(), k.lossless, k.ordered);
    }
    if let Some(v) = Veth::new() {
        // AF_PACKET on a veth pair: a frame the receiving ring has no room for is dropped.
        check("eth", &mut || eth_on(&v), false, true);
        // AF_XDP in copy mode: a frame the receive ring has no room for is dropped. Generic
        // is what volley picks on a veth; native is what it picks on a NIC.
        check("xdp", &mut || xdp_on(&v, None), false, true);
        check(
            "xdp native",
            &mut || xdp_on(&v, Some(XdpMode::Native)),
            false,
            true,
        );
    } else {
        eprintln!("conformance: no veth pair (not root?): raw Ethernet not checked here");
    }
}

/// Sends `pkts` from `from` to rank `to`; returns how many the device took.
fn send(from: &mut Dev, to: u32, pkts: &[Vec<u8>]) -> usize {
    send_in_bursts(from, to, pkts, 64)
}

/// Like [`send`], saying that at most `burst` packets should leave as one burst.
fn send_in_bursts(from: &mut Dev, to: u32, pkts: &[Vec<u8>], burst: u32) -> usize {
    let mut i = 0;
    from.transmit(&mut |buf: &mut [u8]| {
        let p = pkts.get(i)?;
        buf[..p.len()].copy_from_slice(p);
        i += 1;
        Some(Out {
            peer: to,
            len: p.len(),
            burst,
        })
    })
    .unwrap();
    i
}

/// Receives on `dev` until `want` packets have come or 5 s passed (a watchdog, not a timing
/// assertion), waiting on the device's descriptor; sends held packets of `other` meanwhile.
fn receive(dev: &mut Dev, other: &mut Dev, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let t = Instant::now();
    while got.len() < want && t.elapsed() < Duration::from_secs(5) {
        send(other, 1, &[]);
        volley_sys::poll_readable(dev.fd(), Duration::from_millis(20));
        dev.receive(0, &mut |p| got.push(p.to_vec())).unwrap();
    }
    got
}

fn packet(i: usize, len: usize) -> Vec<u8> {
    (0..len).map(|j| (i * 31 + j * 7) as u8).collect()
}

/// A raw packet from rank `from`: its header's source field (bytes 16..20) names the sender, as
/// every volley packet's does; a device drops a packet that names another rank than the one at
/// the address it came from.
fn raw(from: u32, i: usize, len: usize) -> Vec<u8> {
    let mut p = packet(i, len);
    if len >= 20 {
        p[16..20].copy_from_slice(&from.to_be_bytes());
    }
    p
}

#[test]
fn addresses_round_trip_through_text() {
    for_each_kind(|name, make, _, _| {
        let (a, b) = make();
        for d in [&a, &b] {
            let addr = d.local_addr();
            assert_eq!(addr.to_string().parse(), Ok(addr), "{name}");
        }
        assert_ne!(a.local_addr(), b.local_addr(), "{name}");
    });
}

#[test]
fn packets_of_every_size_arrive_intact() {
    for_each_kind(|name, make, _, ordered| {
        let (mut a, mut b) = make();
        let max = a.max_packet();
        let pkts: Vec<Vec<u8>> = [1, 7, 100, 1000, max - 1, max]
            .iter()
            .enumerate()
            .map(|(i, &n)| raw(0, i, n))
            .collect();
        assert_eq!(send(&mut a, 1, &pkts), pkts.len(), "{name}: a few packets");
        let mut got = receive(&mut b, &mut a, pkts.len());
        if !ordered {
            got.sort();
        }
        let mut want = pkts.clone();
        if !ordered {
            want.sort();
        }
        assert_eq!(got, want, "{name}: 0 -> 1");
        // And back.
        let back: Vec<Vec<u8>> = (0..2).map(|i| raw(1, i, [1, 7][i])).collect();
        assert_eq!(send(&mut b, 0, &back), 2, "{name}");
        assert_eq!(receive(&mut a, &mut b, 2), back, "{name}: 1 -> 0");
    });
}

/// Issue 15: a run of packets to one peer goes down the stack as one segmentation-offload send
/// and comes up as one coalesced datagram, which the device cuts back into the packets, each
/// intact and in order. A run ends at a shorter packet (it may close a run, never sit inside
/// one) and at another peer; a lone packet is a plain datagram. Without offload the same
/// packets arrive the same way, one datagram each.
#[test]
fn a_run_of_packets_crosses_as_one_offloaded_send_and_arrives_whole() {
    for (kind, offload) in [("udp", true), ("udp without offload", false)] {
        let (mut a, mut b) = if offload { udp() } else { udp_plain() };
        let max = a.max_packet();
        // Runs: 30 full packets; 10 full then a short one closing the run; a short one alone
        // then 3 of 500 bytes (a run of their own); 5 full again.
        let mut sizes = vec![max; 30];
        sizes.extend([max; 10]);
        sizes.push(100);
        sizes.push(64);
        sizes.extend([500; 3]);
        sizes.extend([max; 5]);
        let pkts: Vec<Vec<u8>> = sizes
            .iter()
            .enumerate()
            .map(|(i, &n)| raw(0, i, n))
            .collect();
        assert_eq!(send(&mut a, 1, &pkts), pkts.len(), "{kind}");
        let got = receive(&mut b, &mut a, pkts.len());
        assert_eq!(got.len(), pkts.len(), "{kind}: packets lost on loopback");
        assert!(got == pkts, "{kind}: packets changed or reordered");
        let (gso, gro) = (
            counter(&a, "udp_gso_sends"),
            counter(&b, "udp_gro_datagrams"),
        );
        if offload {
            // The runs: 30+10+1 (closed by the short one), [64], 3 x 500, 5.
            assert_eq!(gso, 3, "{kind}: GSO sends");
            assert_eq!(gro, 3, "{kind}: coalesced datagrams received");
        } else {
            assert_eq!((gso, gro), (0, 0), "{kind}: offload used although off");
        }
    }
}

/// Issue 15: the engine's burst limit (half the window in flight) cuts a run: 30 full packets
/// with bursts of 8 go as 4 offloaded sends (8, 8, 8, 6) and arrive as 4 datagrams, each packet
/// intact and in order.
#[test]
fn the_burst_limit_cuts_an_offloaded_run() {
    let (mut a, mut b) = udp();
    let max = a.max_packet();
    let pkts: Vec<Vec<u8>> = (0..30).map(|i| raw(0, i, max)).collect();
    assert_eq!(send_in_bursts(&mut a, 1, &pkts, 8), pkts.len());
    let got = receive(&mut b, &mut a, pkts.len());
    assert!(got == pkts, "packets lost, changed or reordered");
    assert_eq!(counter(&a, "udp_gso_sends"), 4, "GSO sends");
    assert_eq!(counter(&b, "udp_gro_datagrams"), 4, "coalesced datagrams");
}

/// Issue 15: a device whose socket came up empty asks the kernel for one datagram at a time
/// (the cheaper call for a busy wait's passes) until something comes, then for batches again.
/// What waits is received whole either way: a coalesced run that arrives while it is idle, then
/// plain datagrams and another run behind it, each packet intact and in order.
#[test]
fn an_idle_device_receives_what_comes_next_whole() {
    let (mut a, mut b) = udp();
    let max = a.max_packet();
    assert_eq!(
        b.receive(0, &mut |_| panic!("nothing was sent")).unwrap(),
        0
    );
    let run: Vec<Vec<u8>> = (0..30).map(|i| raw(0, i, max)).collect();
    assert_eq!(send(&mut a, 1, &run), run.len());
    let got = receive(&mut b, &mut a, run.len());
    assert!(got == run, "{} of 30 arrived, in order or not", got.len());
    // Several things waiting at once, found by the next calls.
    let mut more: Vec<Vec<u8>> = (0..5).map(|i| raw(0, 100 + i, 64 + i)).collect();
    more.extend((0..20).map(|i| raw(0, 200 + i, max)));
    for p in &more {
        assert_eq!(send(&mut a, 1, std::slice::from_ref(p)), 1);
    }
    let got = receive(&mut b, &mut a, more.len());
    assert!(
        got == more,
        "{} of {} arrived, in order or not",
        got.len(),
        more.len()
    );
    assert_eq!(b.receive(0, &mut |_| panic!("all was taken")).unwrap(), 0);
}

fn counter(d: &Dev, name: &str) -> u64 {
    d.counters()
        .into_iter()
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
        .unwrap_or(0)
}

/// Whether the kernel coalesces received runs for this socket now (UDP_GRO, read back).
fn kernel_gro(d: &Dev) -> bool {
    let mut v: libc::c_int = -1;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: getsockopt on the device's live socket into a c_int of the length given.
    let r = unsafe {
        libc::getsockopt(
            d.fd(),
            libc::SOL_UDP,
            libc::UDP_GRO,
            &mut v as *mut libc::c_int as *mut libc::c_void,
            &mut len,
        )
    };
    assert_eq!(
        r,
        0,
        "getsockopt UDP_GRO: {}",
        std::io::Error::last_os_error()
    );
    v != 0
}

/// GRO only while packets come in runs: a socket asking for it makes the kernel hold every lone
/// packet in its GRO layer, so after a stretch of single-packet receives (a ping-pong) the
/// device turns it off, and the first run turns it on again. Nothing is lost or reordered
/// across the switches, and runs after them arrive coalesced again.
#[test]
fn gro_turns_off_for_lone_packets_and_on_again_for_a_run() {
    let (mut a, mut b) = udp();
    assert!(
        kernel_gro(&b),
        "GRO is on from the start, for the first stream"
    );
    for i in 0..volley_transport::udp::GRO_OFF_AFTER as usize {
        let p = vec![raw(0, i, 64)];
        assert_eq!(send(&mut a, 1, &p), 1);
        assert_eq!(receive(&mut b, &mut a, 1), p, "lone packet {i}");
    }
    assert!(!kernel_gro(&b), "still on after lone packets");
    assert_eq!(counter(&b, "udp_gro_switches"), 1);
    let max = a.max_packet();
    for round in 0..2 {
        let pkts: Vec<Vec<u8>> = (0..30).map(|i| raw(0, 1000 * round + i, max)).collect();
        assert_eq!(send(&mut a, 1, &pkts), pkts.len(), "round {round}");
        let got = receive(&mut b, &mut a, pkts.len());
        assert!(
            got == pkts,
            "round {round}: {} of 30 arrived, in order or not",
            got.len()
        );
        assert!(kernel_gro(&b), "round {round}: a run left GRO off");
    }
    // The first run came cut up (GRO was off), the second coalesced.
    assert_eq!(counter(&b, "udp_gro_switches"), 2);
    assert!(counter(&b, "udp_gro_datagrams") >= 1);
}

/// A kernel that refuses a segmentation-offload send (here a real refusal: a socket whose UDP
/// checksums are off, SO_NO_CHECK, gets EINVAL for UDP_SEGMENT, as a path without checksum
/// offload gets EIO) loses nothing: the run goes as plain datagrams, GSO stays off from then on,
/// and the device says why.
#[test]
fn a_refused_offloaded_send_falls_back_to_plain_datagrams() {
    let ip = std::net::Ipv4Addr::LOCALHOST;
    let a = UdpDevice::open(ip, 1500).unwrap();
    let one: libc::c_int = 1;
    // SAFETY: setsockopt on the device's live socket with a c_int option value.
    let r = unsafe {
        libc::setsockopt(
            a.fd(),
            libc::SOL_SOCKET,
            libc::SO_NO_CHECK,
            &one as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(r, 0, "SO_NO_CHECK: {}", std::io::Error::last_os_error());
    assert_eq!(a.offload_status(), "GSO on, GRO on");
    let (mut a, mut b): (Dev, Dev) =
        connect(Box::new(a), Box::new(UdpDevice::open(ip, 1500).unwrap()));
    let max = a.max_packet();
    for round in 0..2 {
        let pkts: Vec<Vec<u8>> = (0..20).map(|i| raw(0, round * 100 + i, max)).collect();
        assert_eq!(send(&mut a, 1, &pkts), pkts.len(), "round {round}");
        let got = receive(&mut b, &mut a, pkts.len());
        assert!(
            got == pkts,
            "round {round}: {} of {} arrived",
            got.len(),
            pkts.len()
        );
    }
    let c: BTreeMap<_, _> = a.counters().into_iter().collect();
    assert_eq!(c.get("udp_gso_sends"), Some(&0), "{c:?}");
    let why = a.offload().unwrap();
    assert!(
        why.starts_with("GSO off (the kernel refused a GSO send") && why.ends_with("GRO on"),
        "{why}"
    );
}

#[test]
fn the_descriptor_is_readable_exactly_while_packets_wait() {
    for_each_kind(|name, make, _, _| {
        let (mut a, mut b) = make();
        b.receive(0, &mut |_| {}).unwrap();
        assert!(
            !volley_sys::poll_readable(b.fd(), Duration::ZERO),
            "{name}: readable with nothing sent"
        );
        send(&mut a, 1, &[raw(0, 0, 64)]);
        assert!(
            volley_sys::poll_readable(b.fd(), Duration::from_secs(2)),
            "{name}: not readable after a packet was sent"
        );
        assert_eq!(receive(&mut b, &mut a, 1).len(), 1, "{name}");
    });
}

#[test]
fn a_rank_without_an_address_is_an_error_not_a_panic() {
    for_each_kind(|name, make, _, _| {
        let (mut a, _b) = make();
        let r = a.transmit(&mut |_buf: &mut [u8]| {
            Some(Out {
                peer: 9,
                len: 10,
                burst: 1,
            })
        });
        assert_eq!(
            r.map_err(|e| e.kind()),
            Err(std::io::ErrorKind::NotFound),
            "{name}"
        );
    });
}

/// A packet that names a rank other than the one whose address it came from is not the job's
/// (forged by another process, or sent from outside): UDP and Ethernet drop it and count it,
/// and the genuine packets around it arrive (issue 16, defect 1).
#[test]
fn a_packet_not_from_the_rank_it_names_is_dropped_and_counted() {
    for_each_kind(|name, make, _, _| {
        if name == "loopback" {
            return;
        }
        let (mut a, mut b) = make();
        let pkts = vec![raw(0, 0, 64), raw(7, 1, 64), raw(1, 2, 64), raw(0, 3, 64)];
        assert_eq!(send(&mut a, 1, &pkts), 4, "{name}");
        let mut got = receive(&mut b, &mut a, 2);
        // Give a dropped packet the time to have arrived, had it not been dropped.
        std::thread::sleep(Duration::from_millis(50));
        b.receive(0, &mut |p| got.push(p.to_vec())).unwrap();
        got.sort();
        let mut want = vec![pkts[0].clone(), pkts[3].clone()];
        want.sort();
        assert_eq!(got, want, "{name}");
        let c: BTreeMap<_, _> = b.counters().into_iter().collect();
        let foreign = c
            .iter()
            .find(|(k, _)| k.ends_with("_rx_foreign"))
            .map(|(_, &v)| v);
        assert_eq!(foreign, Some(2), "{name}: {c:?}");
    });
    // A plain UDP socket of another process, sending a packet that names rank 0, to a device
    // with two peers (with one, its socket is connected and the kernel drops the stranger's
    // packet before the device sees it: `a_udp_device_with_one_peer_hears_only_it_...`).
    let (_a, mut b) = udp();
    let (c, _) = udp();
    b.set_peer(2, c.local_addr()).unwrap();
    let Addr::Udp(to) = b.local_addr() else {
        unreachable!("a UDP device")
    };
    let s = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    s.send_to(&raw(0, 9, 100), to).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let mut got = 0;
    b.receive(0, &mut |_| got += 1).unwrap();
    assert_eq!(got, 0, "a stranger's packet was delivered");
    let c: BTreeMap<_, _> = b.counters().into_iter().collect();
    assert_eq!(c.get("udp_rx_foreign"), Some(&1), "{c:?}");
}

#[test]
fn a_full_device_takes_fewer_packets_and_loses_none_it_took() {
    for_each_kind(|name, make, lossless, _| {
        if !lossless {
            return;
        }
        let (mut a, mut b) = make();
        let pkts: Vec<Vec<u8>> = (0..4 * QUEUE_PACKETS).map(|i| raw(0, i, 200)).collect();
        let took = send(&mut a, 1, &pkts);
        assert!(
            took < pkts.len(),
            "{name}: took all {took} packets with nobody receiving"
        );
        // What it took arrives, in order, the held packet included.
        let got = receive(&mut b, &mut a, took);
        assert_eq!(got, pkts[..took].to_vec(), "{name}");
        let c: BTreeMap<_, _> = a.counters().into_iter().collect();
        assert!(c.values().any(|&v| v > 0), "{name}: fullness not counted");
    });
}

#[test]
fn every_counter_a_device_reports_is_in_the_table() {
    for_each_kind(|name, make, _, _| {
        let (a, _b) = make();
        let wrapped = FaultDevice::new(a, "loss=0.1".parse().unwrap());
        for (c, _) in wrapped.counters() {
            assert!(
                DEVICE_COUNTERS.iter().any(|(n, _, _)| *n == c),
                "{name}: {c} is missing from DEVICE_COUNTERS"
            );
        }
    });
}

/// The protocol engine over each device, also with faults injected under it: messages of every
/// size class (one packet, fragments, rendezvous) both ways, each arriving once, intact, in order.
#[test]
fn the_protocol_delivers_every_message_over_each_device() {
    for_each_kind(|name, make, _, _| {
        for faults in [
            None,
            Some("loss=0.05,dup=0.05,reorder=0.1,corrupt=0.02,seed=3"),
        ] {
            let (a, b) = make();
            let (a, b): (Dev, Dev) = match faults {
                None => (a, b),
                Some(f) => (
                    Box::new(FaultDevice::new(a, f.parse().unwrap())),
                    Box::new(FaultDevice::new(b, f.parse().unwrap())),
                ),
            };
            protocol_over(&format!("{name} faults={faults:?}"), a, b);
        }
    });
}

/// Authenticated devices (the job's key, VOLLEY_NET_AUTH): the whole protocol runs over them,
/// with faults too (a corrupted packet now fails its tag before its CRC); a packet without the
/// right tag, from a device that has no key or another job's key, is dropped and counted, and
/// only the genuine ones arrive (issue 16, defect 1).
#[test]
fn authenticated_devices_carry_the_protocol_and_drop_what_is_not_the_jobs() {
    use volley_transport::auth::AuthDevice;
    let key = [0x5a; 32];
    let (a, b) = udp();
    let (a, b): (Dev, Dev) = (
        Box::new(AuthDevice::new(a, key)),
        Box::new(AuthDevice::new(b, key)),
    );
    protocol_over("udp+auth", a, b);
    let (a, b) = udp();
    let (a, b): (Dev, Dev) = (
        Box::new(FaultDevice::new(
            Box::new(AuthDevice::new(a, key)),
            "loss=0.05,dup=0.05,reorder=0.1,corrupt=0.02,seed=4"
                .parse()
                .unwrap(),
        )),
        Box::new(FaultDevice::new(
            Box::new(AuthDevice::new(b, key)),
            "loss=0.05,dup=0.05,reorder=0.1,corrupt=0.02,seed=5"
                .parse()
                .unwrap(),
        )),
    );
    protocol_over("udp+auth with faults", a, b);

    // Over an in-memory hub (no address check): rank 0 sends with no key, then with another
    // job's key, then with the job's key; rank 1 takes only the last.
    for (sender_key, delivered) in [(None, false), (Some([1u8; 32]), false), (Some(key), true)] {
        let hub = Hub::new();
        let raw0: Dev = Box::new(hub.device(1400).unwrap());
        let mut b: Dev = Box::new(AuthDevice::new(Box::new(hub.device(1400).unwrap()), key));
        let mut a: Dev = match sender_key {
            None => raw0,
            Some(k) => Box::new(AuthDevice::new(raw0, k)),
        };
        a.set_peer(1, b.local_addr()).unwrap();
        b.set_peer(0, a.local_addr()).unwrap();
        let mut p = raw(0, 0, 200);
        p[4..6].copy_from_slice(&200u16.to_be_bytes());
        let pkts = vec![p];
        assert_eq!(send(&mut a, 1, &pkts), 1);
        let mut got = Vec::new();
        b.receive(0, &mut |x| got.push(x.to_vec())).unwrap();
        let c: BTreeMap<_, _> = b.counters().into_iter().collect();
        if delivered {
            assert_eq!(got, pkts, "the job's key");
            assert_eq!(c.get("auth_rx_rejected"), Some(&0));
        } else {
            assert!(got.is_empty(), "{sender_key:?}: delivered");
            assert_eq!(c.get("auth_rx_rejected"), Some(&1), "{sender_key:?}");
        }
    }
}

fn protocol_over(name: &str, a: Dev, b: Dev) {
    use volley_proto::{Config, Engine, Event, Reliability};
    let cfg = Config {
        max_packet: a.max_packet(),
        initial_rto: 2_000_000,
        min_rto: 1_000_000,
        ..Config::default()
    };
    cfg.validate().unwrap();
    let t0 = Instant::now();
    let now = || t0.elapsed().as_nanos() as u64;
    let mut side: Vec<(Engine, Dev)> = vec![
        (Engine::new(cfg.clone(), 0, 77), a),
        (Engine::new(cfg.clone(), 1, 77), b),
    ];
    side[0].0.add_peer(1, now());
    side[1].0.add_peer(0, now());
    let sizes = [0usize, 1, 1400, 9000, 65536, 300_000, 1_500_000];
    for (me, (e, _)) in side.iter_mut().enumerate() {
        for (i, &n) in sizes.iter().enumerate() {
            let data = packet(i + 10 * me, n);
            e.send(
                now(),
                1 - me as u32,
                i as u32,
                5,
                data,
                Reliability::Reliable,
            )
            .unwrap();
        }
    }
    let mut got: Vec<Vec<(u32, Vec<u8>)>> = vec![Vec::new(), Vec::new()];
    while got.iter().any(|g| g.len() < sizes.len()) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{name}: watchdog: only {} and {} of {} messages after 60 s",
            got[0].len(),
            got[1].len(),
            sizes.len()
        );
        for (me, (e, d)) in side.iter_mut().enumerate() {
            let t = now();
            d.transmit(&mut |buf: &mut [u8]| {
                e.poll_transmit(t, buf).map(|x| Out {
                    peer: x.peer,
                    len: x.len,
                    burst: x.burst,
                })
            })
            .unwrap();
            d.receive(t, &mut |p| {
                let _ = e.handle(t, p);
            })
            .unwrap();
            if e.poll_timeout().is_some_and(|due| due <= t) {
                e.handle_timeout(t);
            }
            while let Some(ev) = e.poll_event() {
                match ev {
                    Event::Message {
                        tag, data, credit, ..
                    } => {
                        got[me].push((tag, data));
                        e.release(credit);
                    }
                    other => panic!("{name}: unexpected {other:?}"),
                }
            }
        }
    }
    for (me, g) in got.iter().enumerate() {
        for (i, (tag, data)) in g.iter().enumerate() {
            assert_eq!(
                *tag, i as u32,
                "{name}: rank {me}: message {i} out of order"
            );
            assert_eq!(
                *data,
                packet(i + 10 * (1 - me), sizes[i]),
                "{name}: rank {me}: message {i} damaged"
            );
        }
    }
}

/// With one peer the UDP socket is connected to it at its first send or receive (as a
/// point-to-point UDP program's is, so that no route is looked up per datagram either way): a
/// datagram from any other socket never reaches the device, the kernel drops it. Once the
/// peer's socket is gone the kernel reports the ICMP port-unreachable its datagrams draw to the
/// next call on the socket: counted, and neither a send nor a receive fails for it (whether the
/// peer finished or died is the protocol's to say). A second peer given after that is refused
/// with an error that says so; given before, the socket stays unconnected and the device checks
/// each packet's claim itself (`a_packet_not_from_the_rank_it_names_is_dropped_and_counted`).
#[test]
fn a_udp_device_with_one_peer_hears_only_it_and_outlives_its_leaving() {
    let (mut a, mut b) = udp();
    let Addr::Udp(at) = a.local_addr() else {
        panic!("a UDP device has a UDP address")
    };
    let stranger = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    // The first call connects.
    send(&mut a, 1, &[]);
    stranger.send_to(&raw(1, 0, 64), at).unwrap();
    let p = vec![raw(1, 1, 64)];
    assert_eq!(send(&mut b, 0, &p), 1);
    assert_eq!(
        receive(&mut a, &mut b, 1),
        p,
        "the stranger's datagram came first"
    );
    assert_eq!(
        counter(&a, "udp_rx_foreign"),
        0,
        "the device dropped it: the kernel let it through"
    );

    drop(b);
    assert_eq!(send(&mut a, 1, &[raw(0, 2, 64)]), 1);
    let mut got = 0;
    for _ in 0..3 {
        a.receive(0, &mut |_| got += 1)
            .expect("a refused port fails no receive");
        send(&mut a, 1, &[raw(0, 3, 64)]);
    }
    assert_eq!(got, 0);
    assert!(
        counter(&a, "udp_icmp_refused") >= 1,
        "the peer's leaving not reported"
    );

    let Ok(std::net::SocketAddr::V4(s)) = stranger.local_addr() else {
        panic!("an IPv4 socket")
    };
    let e = a.set_peer(2, Addr::Udp(s)).unwrap_err();
    assert!(e.to_string().contains("give every peer before"), "{e}");
}
