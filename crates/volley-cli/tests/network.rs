//! Jobs across hosts: real network namespaces joined by veth pairs (a bridge for more than two),
//! addresses in 198.18.0.0/15 only, ranks started by `volley run --hosts ... --launch 'ip netns
//! exec {host}'`, real UDP sockets and raw Ethernet frames, faults injected by the kernel
//! (nftables on the veths) and by volley's fault-injecting device. Every namespace is removed
//! when its test ends, also when it fails. Needs root (CI runs as root).

mod common;

use common::hosts::Hosts;
use common::{check_idle_2s, numa_report, ok, text, values, CHECK, VOLLEY};
use std::process::Command;

const SIZES: &[&str] = &[
    "0", "1", "1400", "1500", "9000", "65536", "1048576", "67108864",
];

/// The environment for a transport: "udp" (segmentation offload where the kernel offers it,
/// the default), "udp-plain" (UDP with GSO and GRO off: one datagram per packet), "eth", "xdp"
/// (AF_XDP, its program where volley chooses: generic on a veth), "xdp-native" (the program in
/// the veth's own receive path).
fn transport_env(transport: &str) -> Vec<(&'static str, &'static str)> {
    match transport {
        "udp-plain" => vec![
            ("VOLLEY_TRANSPORT", "udp"),
            ("VOLLEY_UDP_GSO", "0"),
            ("VOLLEY_UDP_GRO", "0"),
        ],
        "udp" => vec![("VOLLEY_TRANSPORT", "udp")],
        "eth" => vec![("VOLLEY_TRANSPORT", "eth")],
        // Bare packets (no sealing): the CRC32C and the parser meet the damage.
        "eth-bare" => vec![("VOLLEY_TRANSPORT", "eth"), ("VOLLEY_NET_AUTH", "0")],
        "xdp" => vec![("VOLLEY_TRANSPORT", "xdp")],
        "xdp-native" => vec![("VOLLEY_TRANSPORT", "xdp"), ("VOLLEY_XDP_MODE", "native")],
        other => panic!("no transport {other}"),
    }
}

/// A counter summed over the ranks, from `volley run --counters`' table on standard error.
fn counted(err: &str, name: &str) -> u64 {
    err.lines()
        .filter(|l| l.contains(name))
        .filter_map(|l| {
            // "[rank]   name   value   unit": the value follows the name.
            let mut w = l.split_whitespace().skip_while(|w| *w != name);
            w.nth(1)?.parse::<u64>().ok()
        })
        .sum()
}

fn pingpong_sizes(transport: &str, mtu: u32) {
    let h = Hosts::new(2, mtu);
    let mut args = vec![CHECK, "pingpong", "0", "1"];
    args.extend_from_slice(SIZES);
    let mut env = transport_env(transport);
    env.push(("VOLLEY_COUNTERS", "1"));
    let o = h.run(2, &env, &args);
    let (out, err) = text(&o);
    assert!(
        o.status.success(),
        "{transport} MTU {mtu}: {:?}\n{out}\n{err}",
        o.status
    );
    for s in SIZES {
        assert!(
            out.contains(&format!("pingpong size={s} ok")),
            "size {s} over {transport} MTU {mtu}:\n{out}"
        );
    }
    // Issue 15: over UDP, runs of packets go as segmentation-offload sends and arrive coalesced
    // (a veth carries a GSO send unsplit to a GRO socket); with both off, never.
    let (gso, gro) = (
        counted(&err, "net_udp_gso_sends"),
        counted(&err, "net_udp_gro_datagrams"),
    );
    match transport {
        "udp" => assert!(gso > 0 && gro > 0, "MTU {mtu}: gso {gso} gro {gro}\n{err}"),
        "udp-plain" => assert_eq!((gso, gro), (0, 0), "MTU {mtu}\n{err}"),
        // Over xdp, the frames went through the AF_XDP rings (copy mode kicks the kernel to
        // send them) and none was lost on the way to the socket.
        t if t.starts_with("xdp") => {
            assert!(counted(&err, "net_xdp_tx_kicks") > 0, "MTU {mtu}\n{err}");
            assert_eq!(counted(&err, "net_xdp_invalid_descs"), 0, "{err}");
            // Jumbo frames span UMEM frames (multi-buffer) where the kernel has it.
            if mtu > 4000 && volley_sys::xdp::multi_buffer() {
                assert!(counted(&err, "net_xdp_rx_multi_buffer") > 0, "{err}");
            }
        }
        _ => {}
    }
}

#[test]
fn udp_carries_0_bytes_to_64_mib_intact_at_mtu_1500() {
    pingpong_sizes("udp", 1500);
}

#[test]
fn udp_carries_0_bytes_to_64_mib_intact_at_mtu_9000() {
    pingpong_sizes("udp", 9000);
}

#[test]
fn udp_without_segmentation_offload_carries_0_bytes_to_64_mib_intact_at_both_mtus() {
    pingpong_sizes("udp-plain", 1500);
    pingpong_sizes("udp-plain", 9000);
}

#[test]
fn eth_carries_0_bytes_to_64_mib_intact_at_mtu_1500() {
    pingpong_sizes("eth", 1500);
}

#[test]
fn eth_carries_0_bytes_to_64_mib_intact_at_mtu_9000() {
    pingpong_sizes("eth", 9000);
}

#[test]
fn xdp_carries_0_bytes_to_64_mib_intact_at_both_mtus_in_both_modes() {
    for t in ["xdp", "xdp-native"] {
        pingpong_sizes(t, 1500);
        pingpong_sizes(t, 9000);
    }
}

/// Four ranks on three hosts joined by a bridge (two ranks share a host: shared memory between
/// them, the network to the others), every rank sending to every rank, in order, every byte
/// checked.
#[test]
fn all_to_all_over_a_bridge_mixes_shared_memory_and_network() {
    let h = Hosts::new(3, 1500);
    // Over xdp, one of the two ranks sharing a host takes the interface and the other falls
    // back to eth (the same frames): the mix is part of what is checked.
    for t in ["udp", "eth", "xdp"] {
        let out = ok(h.run(4, &[("VOLLEY_TRANSPORT", t)], &[CHECK, "alltoall", "60"]));
        assert_eq!(
            out.matches("result: alltoall").filter(|_| true).count(),
            4,
            "{t}: {out}"
        );
        assert_eq!(values(&out, "received"), vec!["240"; 4], "{t}: {out}");
    }
}

/// Matched receives (probe, exact source and tag, any source, any tag, too small a buffer) take
/// the same messages in the same order whether the sender shares the host or not: the
/// conformance scenario of the matcher over both network devices, beside shared memory.
#[test]
fn matched_receives_keep_order_across_hosts_and_shared_memory() {
    let h = Hosts::new(3, 1500);
    for t in ["udp", "eth", "xdp"] {
        let out = ok(h.run(4, &[("VOLLEY_TRANSPORT", t)], &[CHECK, "match", "30"]));
        assert_eq!(values(&out, "received"), vec!["90"], "{t}: {out}");
    }
}

/// Forged packets from other processes (issue 16, defect 1's acceptance): while two ranks on two
/// hosts stay quiet, a process on each host sends rank 0 well-formed packets with the job's
/// token that claim to come from rank 1 (best-effort and reliable data with sprayed sequence
/// numbers, and BYE). None is delivered, the BYE ends nothing, the ranks then trade a genuine
/// message, and every forged packet is dropped: by rank 0's device, or, rank 0's socket being
/// connected to its one peer, by the kernel.
#[test]
fn forged_packets_from_other_processes_are_dropped_and_end_nothing() {
    use std::io::{BufRead, BufReader};
    use volley_wire::{AckRanges, Body, Repr, Seq};
    let h = Hosts::new(2, 1500);
    let hosts = h.list();
    let mut job = Command::new(VOLLEY)
        .args([
            "run",
            "--timeout",
            "120",
            "-n",
            "2",
            "--hosts",
            &hosts,
            "--launch",
            "ip netns exec {host}",
            "--tag-output",
            "--counters",
            CHECK,
            "quiet",
            "4000",
        ])
        .env("VOLLEY_TRANSPORT", "udp")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(job.stdout.take().unwrap()).lines();
    let mut out = String::new();
    let mut token = None;
    let mut ready = 0;
    while ready < 2 {
        let l = lines
            .next()
            .expect("the job ended before both ranks were ready")
            .unwrap();
        out.push_str(&l);
        out.push('\n');
        if let Some(t) = l.split("quiet ready token=").nth(1) {
            token = Some(u64::from_str_radix(t.trim(), 16).unwrap());
            ready += 1;
        }
    }
    let token = token.unwrap();
    // Rank 0's port, as any local user sees it (connected to its one peer, or not).
    let ss = Command::new("ip")
        .args(["netns", "exec", &h.names[0], "ss", "-Huan"])
        .output()
        .unwrap();
    let ss = String::from_utf8_lossy(&ss.stdout);
    let port: u16 = ss
        .split_whitespace()
        .find_map(|w| w.strip_prefix(&format!("{}:", h.addrs[0]))?.parse().ok())
        .unwrap_or_else(|| panic!("no UDP socket on {} in:\n{ss}", h.addrs[0]));
    let mut forged: Vec<Vec<u8>> = Vec::new();
    let mut emit = |body: Body<'_>| {
        let r = Repr {
            token,
            src: 1,
            dst: 0,
            body,
        };
        let mut b = vec![0u8; r.buffer_len()];
        r.emit(&mut b);
        forged.push(b);
    };
    for i in 0..40u32 {
        emit(Body::Data {
            seq: Seq {
                seq: i,
                piggyback: None,
                best_effort: i % 2 == 0,
                msg: i,
            },
            tag: 3,
            context: 3,
            msg_len: 6,
            offset: 0,
            payload: b"forged",
        });
    }
    for cum in [0, 1, 1000] {
        emit(Body::Ack {
            cum,
            credit: 1 << 20,
            want_ack: false,
            bye: true,
            ranges: AckRanges::Slice(&[]),
        });
    }
    let hex: Vec<String> = forged
        .iter()
        .map(|p| p.iter().map(|b| format!("{b:02x}")).collect())
        .collect();
    let script = "import socket, sys\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nfor h in sys.argv[3:]:\n    s.sendto(bytes.fromhex(h), (sys.argv[1], int(sys.argv[2])))\n";
    // Datagrams the kernel found no socket for, in rank 0's namespace.
    let no_ports = || -> u64 {
        let o = Command::new("ip")
            .args(["netns", "exec", &h.names[0], "cat", "/proc/net/snmp"])
            .output()
            .unwrap();
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        let mut udp = t.lines().filter(|l| l.starts_with("Udp: "));
        let (names, values) = (udp.next().unwrap(), udp.next().unwrap());
        let i = names
            .split_whitespace()
            .position(|n| n == "NoPorts")
            .unwrap();
        values.split_whitespace().nth(i).unwrap().parse().unwrap()
    };
    let no_ports_before = no_ports();
    // From a process on rank 1's host (the address rank 1 has, another port), and from one on
    // rank 0's own host.
    for ns in &h.names {
        let o = Command::new("ip")
            .args([
                "netns",
                "exec",
                ns,
                "python3",
                "-c",
                script,
                &h.addrs[0],
                &port.to_string(),
            ])
            .args(&hex)
            .output()
            .unwrap();
        assert!(o.status.success(), "python3: {o:?}");
    }
    let kernel_dropped = no_ports() - no_ports_before;
    for l in lines {
        out.push_str(&l.unwrap());
        out.push('\n');
    }
    let st = job.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(&mut job.stderr.take().unwrap(), &mut err).unwrap();
    assert!(st.success(), "{out}\n{err}");
    assert_eq!(out.matches("result: quiet ok").count(), 2, "{out}\n{err}");
    // Every forged packet dropped at the device, none as far as the protocol. Rank 0's socket,
    // with one peer, is connected to it: the kernel itself drops what comes from elsewhere
    // (counted as datagrams for no port); unconnected, the device would (udp_rx_foreign).
    // The table leaves out counters that stayed zero.
    assert!(err.contains("msgs_sent"), "no counters:\n{out}\n{err}");
    let total: u64 = out
        .lines()
        .chain(err.lines())
        .find(|l| l.contains("udp_rx_foreign"))
        .map_or(0, |row| {
            row.split_whitespace().nth(3).unwrap().parse().unwrap()
        });
    assert_eq!(
        total + kernel_dropped,
        2 * forged.len() as u64,
        "udp_rx_foreign {total}, dropped by the kernel {kernel_dropped}:\n{err}"
    );
}

/// Every packet between hosts is sealed under the job's key by default; VOLLEY_NET_AUTH=0
/// turns the tags off (a trusted dedicated network) and messages still arrive; a bad value is
/// refused by name (issue 16, defect 1).
#[test]
fn packets_are_authenticated_by_default_and_can_be_left_bare() {
    let h = Hosts::new(2, 1500);
    for t in ["udp", "eth"] {
        for auth in ["1", "0"] {
            let out = ok(h.run(
                2,
                &[("VOLLEY_TRANSPORT", t), ("VOLLEY_NET_AUTH", auth)],
                &[CHECK, "match", "20"],
            ));
            assert_eq!(
                values(&out, "received"),
                vec!["20"],
                "{t} auth={auth}: {out}"
            );
        }
    }
    let o = h.run(2, &[("VOLLEY_NET_AUTH", "yes")], &[CHECK, "whoami"]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}{err}");
    assert!(err.contains("VOLLEY_NET_AUTH"), "{err}");
}

/// Requests on the caller's buffers behave the same with senders on other hosts: posting order,
/// wildcards, wait any/some/all, cancel, large receives posted before and after arrival.
#[test]
fn requests_complete_in_posting_order_across_hosts() {
    let h = Hosts::new(3, 1500);
    for t in ["udp", "eth"] {
        let out = ok(h.run(4, &[("VOLLEY_TRANSPORT", t)], &[CHECK, "requests", "20"]));
        assert_eq!(values(&out, "received"), vec!["64"], "{t}: {out}");
        // Rank 1 is on another host than rank 0: its two large messages, received posted before
        // and after they were announced, land in the receive buffers with no copy in between.
        assert_eq!(values(&out, "staging"), vec!["0"], "{t}: {out}");
    }
}

/// `volley run --counters` over two hosts: every rank's counters come back through the agents,
/// the network's among them (packets and messages each way, matching across the two ranks).
#[test]
fn counters_of_every_rank_and_the_network_come_back_from_each_host() {
    let h = Hosts::new(2, 1500);
    let o = h.run(
        2,
        &[("VOLLEY_TRANSPORT", "udp")],
        &["--counters", CHECK, "pingpong", "0", "1", "65536"],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    let row = |name: &str| -> Vec<u64> {
        err.lines()
            .find(|l| l.split_whitespace().next() == Some(name))
            .unwrap_or_else(|| panic!("no {name} row:\n{err}"))
            .split_whitespace()
            .skip(1)
            .take(3)
            .map(|v| v.parse().unwrap_or_else(|_| panic!("{name}: {v}:\n{err}")))
            .collect()
    };
    let sent = row("net_messages_sent");
    let delivered = row("net_messages_delivered");
    assert!(sent[0] > 0 && sent[1] > 0, "{err}");
    assert_eq!(sent[2], sent[0] + sent[1], "{err}");
    // Rank 0's messages are delivered at rank 1 and the reverse.
    assert_eq!((delivered[1], delivered[0]), (sent[0], sent[1]), "{err}");
    assert!(row("net_packets_sent")[2] >= sent[2], "{err}");
    // The core's rows are there too, and nothing reads n/a.
    assert!(row("msgs_sent")[2] > 0 && !err.contains("n/a"), "{err}");
}

/// Network settings that would make a job fail later, or silently misbehave, are refused at
/// start with the variable, its value and the allowed range (issue 16, defect 9): a peer timeout
/// of 0 (peers lost at once) and a window that does not fit the protocol's 32 bits (it became
/// 0).
#[test]
fn network_settings_out_of_range_are_refused_at_start() {
    let h = Hosts::new(2, 1500);
    for (var, value, says) in [
        (
            "VOLLEY_PEER_TIMEOUT_MS",
            "0",
            "must be 100 to 86400000 milliseconds",
        ),
        (
            "VOLLEY_NET_WINDOW",
            "4294967296",
            "must be 2 to 1048576 packets",
        ),
    ] {
        let o = h.run(2, &[(var, value)], &[CHECK, "whoami"]);
        let (_, err) = text(&o);
        assert!(!o.status.success(), "{var}={value} was accepted: {err}");
        assert!(
            err.contains(var) && err.contains(says),
            "{var}={value}: {err}"
        );
        // The setting at fault is named, not the transport it would have configured.
        assert!(!err.contains("VOLLEY_TRANSPORT"), "{var}={value}: {err}");
    }
}

/// A rank that computes (here: sleeps) for 3.5 peer timeouts without calling volley is not taken
/// for dead: the liveness thread answers the network for it, and its message then arrives.
/// Without the thread (VOLLEY_LIVENESS_THREAD=0) the peer gives up, which shows what the test
/// catches.
#[test]
fn a_long_computation_is_not_taken_for_a_death() {
    let h = Hosts::new(2, 1500);
    for t in ["udp", "eth"] {
        let env = [("VOLLEY_TRANSPORT", t), ("VOLLEY_PEER_TIMEOUT_MS", "1000")];
        let out = ok(h.run(2, &env, &[CHECK, "idle", "3500"]));
        let waited: u64 = values(&out, "waited_ms")[0].parse().unwrap();
        assert!(waited >= 3400, "{t}: {out}");
    }
    let o = h.run(
        2,
        &[
            ("VOLLEY_TRANSPORT", "udp"),
            ("VOLLEY_PEER_TIMEOUT_MS", "1000"),
            ("VOLLEY_LIVENESS_THREAD", "0"),
        ],
        &[CHECK, "idle", "3500"],
    );
    let (_, err) = text(&o);
    assert!(
        !o.status.success() && err.contains("stopped answering"),
        "{err}"
    );
}

/// A non-blocking send of a large owned buffer to another host hands the buffer to the network
/// engine without a copy and gets it back, intact, once acknowledged; the sender only computes
/// meanwhile (looking at is_complete), so the acknowledgements come in through the liveness
/// thread.
#[test]
fn a_large_owned_buffer_goes_to_another_host_without_a_copy() {
    let h = Hosts::new(2, 1500);
    for t in ["udp", "eth"] {
        let env = [("VOLLEY_TRANSPORT", t), ("VOLLEY_COUNTERS", "1")];
        let o = h.run(2, &env, &[CHECK, "overlap", "8388608", "20000"]);
        let (out, err) = text(&o);
        assert!(o.status.success(), "{t}: {out}\n{err}");
        assert!(
            out.contains("completed_during_compute=true"),
            "{t}: the send never completed while rank 0 computed:\n{out}"
        );
        let handed: u64 = err
            .lines()
            .filter(|l| l.starts_with("[0]"))
            .filter_map(|l| {
                let mut w = l.split_whitespace().skip_while(|w| *w != "net_handovers");
                w.nth(1)?.parse::<u64>().ok()
            })
            .sum();
        assert_eq!(
            handed, 1,
            "{t}: rank 0 handed over {handed} buffers:\n{err}"
        );
    }
}

/// A World moved to another thread keeps its network side working there.
#[test]
fn a_world_moved_to_another_thread_keeps_talking_across_hosts() {
    let h = Hosts::new(2, 1500);
    let out = ok(h.run(
        2,
        &[("VOLLEY_TRANSPORT", "udp")],
        &[CHECK, "threads", "100"],
    ));
    assert_eq!(
        out.matches("result: threads hops=3 rounds=100 ok").count(),
        2,
        "{out}"
    );
}

/// A ping-pong up to 4 MiB under faults: every message intact (volley-check checks every byte),
/// and for each group in `expect` some counter (summed over both ranks) shows the fault happened
/// and was dealt with.
fn faulty(transport: &str, env: &[(&str, &str)], kernel_loss: Option<u32>, expect: &[&[&str]]) {
    // An XDP program takes frames before the host's ingress hook: the kernel's loss goes in a
    // bridge between the hosts instead.
    let h = if transport.starts_with("xdp") {
        Hosts::bridged(2, 1500)
    } else {
        Hosts::new(2, 1500)
    };
    if let Some(p) = kernel_loss {
        h.kernel_loss(p);
    }
    let mut e = transport_env(transport);
    e.push(("VOLLEY_COUNTERS", "1"));
    e.extend_from_slice(env);
    let o = h.run(
        2,
        &e,
        &[
            CHECK, "pingpong", "0", "1", "1500", "65536", "1048576", "4194304",
        ],
    );
    let (out, err) = text(&o);
    assert!(
        o.status.success(),
        "{transport} {env:?} loss {kernel_loss:?}: {:?}\n{out}\n{err}",
        o.status
    );
    assert!(out.contains("pingpong size=4194304 ok"), "{out}");
    // The protocol worked for its living: something was retransmitted or dropped and counted.
    for any_of in expect {
        let n: u64 = any_of.iter().map(|c| counted(&err, c)).sum();
        assert!(
            n > 0,
            "{transport} {env:?} loss {kernel_loss:?}: none of {any_of:?} counted:\n{err}"
        );
    }
}

#[test]
fn kernel_loss_of_1_percent_over_udp_eth_and_xdp() {
    let retx: &[&[&str]] = &[&["net_retransmits_fast", "net_retransmits_timeout"]];
    faulty("udp", &[], Some(1), retx);
    faulty("udp-plain", &[], Some(1), retx);
    faulty("eth", &[], Some(1), retx);
    faulty("xdp", &[], Some(1), retx);
}

#[test]
fn kernel_loss_of_10_percent_over_udp_eth_and_xdp() {
    let retx: &[&[&str]] = &[&["net_retransmits_fast", "net_retransmits_timeout"]];
    faulty("udp", &[], Some(10), retx);
    faulty("udp-plain", &[], Some(10), retx);
    faulty("eth", &[], Some(10), retx);
    faulty("xdp", &[], Some(10), retx);
}

#[test]
fn injected_loss_reorder_duplication_corruption_and_delay_over_udp_eth_and_xdp() {
    let retx = &["net_retransmits_fast", "net_retransmits_timeout"][..];
    // Sealed packets that were damaged do not open; bare ones fail the CRC32C or the parser.
    let bad = &[
        "net_auth_rx_rejected",
        "net_drop_checksum",
        "net_drop_truncated",
        "net_drop_foreign",
        "net_drop_version",
        "net_drop_kind",
        "net_drop_field",
    ][..];
    let cases: [(&str, &[&[&str]]); 6] = [
        ("loss=0.05,seed=1", &[&["net_fault_dropped"], retx]),
        (
            "reorder=0.2,delay_us=100,seed=2",
            &[&["net_fault_reordered"]],
        ),
        (
            "dup=0.2,seed=3",
            &[&["net_fault_duplicated"], &["net_duplicates"]],
        ),
        (
            "corrupt=0.05,seed=4",
            &[&["net_fault_corrupted"], bad, retx],
        ),
        // Delay alone loses nothing: the test is that everything still arrives intact.
        ("delay_us=300,seed=5", &[]),
        ("junk=0.1,seed=6", &[&["net_fault_injected"]]),
    ];
    for (f, expect) in cases {
        faulty("udp", &[("VOLLEY_FAULTS", f)], None, expect);
        faulty("udp-plain", &[("VOLLEY_FAULTS", f)], None, expect);
        faulty("eth", &[("VOLLEY_FAULTS", f)], None, expect);
        faulty("eth-bare", &[("VOLLEY_FAULTS", f)], None, expect);
        faulty("xdp", &[("VOLLEY_FAULTS", f)], None, expect);
    }
}

/// Junk and damage injected next to the wire: with bare packets each is counted by the reason
/// the parser refused it; sealed, every one fails to open (and sealed packets carry no CRC32C,
/// so no checksum is computed or refused).
#[test]
fn injected_foreign_truncated_and_corrupt_frames_are_counted_by_reason() {
    let h = Hosts::new(2, 1500);
    let run = |auth: &str| {
        let o = h.run(
            2,
            &[
                ("VOLLEY_TRANSPORT", "eth"),
                ("VOLLEY_NET_AUTH", auth),
                ("VOLLEY_COUNTERS", "1"),
                ("VOLLEY_FAULTS", "junk=0.3,corrupt=0.1,seed=9"),
            ],
            &[CHECK, "pingpong", "0", "100", "100000"],
        );
        let (out, err) = text(&o);
        assert!(o.status.success(), "auth {auth}: {out}\n{err}");
        assert_eq!(out.matches(" ok").count(), 3, "auth {auth}: {out}");
        err
    };
    let err = run("0");
    for c in [
        "net_drop_checksum",
        "net_drop_truncated",
        "net_drop_foreign",
        "net_drop_token",
    ] {
        assert!(counted(&err, c) > 0, "{c} not counted:\n{err}");
    }
    assert_eq!(counted(&err, "net_auth_rx_rejected"), 0, "{err}");
    let err = run("1");
    assert!(counted(&err, "net_auth_rx_rejected") > 0, "{err}");
    for c in ["net_drop_checksum", "net_drop_token", "net_drop_foreign"] {
        assert_eq!(counted(&err, c), 0, "sealed, {c} counted:\n{err}");
    }
}

#[test]
fn a_rank_killed_mid_transfer_gives_its_remote_peer_peer_lost_in_bounded_time() {
    let h = Hosts::new(2, 1500);
    for t in ["udp", "eth", "xdp"] {
        let o = h.run(
            2,
            &[("VOLLEY_TRANSPORT", t), ("VOLLEY_PEER_TIMEOUT_MS", "1000")],
            &["--keep-going", CHECK, "killed-peer"],
        );
        let (out, err) = text(&o);
        let after: Vec<u64> = values(&out, "after_ms")
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(
            after.len(),
            1,
            "{t}: survivor did not report:\n{out}\n{err}"
        );
        // The timeout is 1 s; heartbeats and timers add at most a fraction of it. The launcher
        // forwards the death too: whichever comes first says it.
        assert!(
            after[0] <= 3000,
            "{t}: peer-lost came {} ms after the last exchange",
            after[0]
        );
        assert!(
            out.contains("fate=Unreachable") || out.contains("fate=Killed(9)"),
            "{out}"
        );
    }
}

/// A rank killed on one host: the launcher forwards its death to every host, so the survivor
/// on the other host gets peer-lost with the real fate (killed by signal 9) long before the
/// peer timeout (10 s by default) would have said "stopped answering" (issue 16, defect 5).
/// Either rank may die: rank 0 (whose host runs nothing special after start) as well as another.
#[test]
fn a_remote_death_reaches_the_survivors_through_the_launcher() {
    let h = Hosts::new(2, 1500);
    for (t, victim) in [
        ("udp", "1"),
        ("eth", "1"),
        ("udp", "0"),
        ("eth", "0"),
        ("xdp", "1"),
    ] {
        let v = format!("victim={victim}");
        let o = h.run(
            2,
            &[("VOLLEY_TRANSPORT", t)],
            &["--keep-going", CHECK, "killed-peer", &v],
        );
        let (out, err) = text(&o);
        let after: Vec<u64> = values(&out, "after_ms")
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(
            after.len(),
            1,
            "{t} {v}: survivor did not report:\n{out}\n{err}"
        );
        let want = format!("peer-lost rank={victim} fate=Killed(9)");
        assert!(out.contains(&want), "{t} {v}: {out}");
        // Within a second (issue 16's bound; 1-5 ms measured): heard from the launcher, not
        // from the silence (the peer timeout is 10 s).
        assert!(after[0] < 1000, "{t} {v}: peer-lost after {} ms", after[0]);
    }
}

/// A rank on another host that leaves through `process::exit(0)` with sends still queued or
/// unacknowledged: at exit its world is closed as a drop would (sent, flushed, goodbye), so
/// every message arrives (issue 16, point 9).
#[test]
fn a_remote_rank_that_exits_with_sends_queued_loses_none_of_them() {
    let h = Hosts::new(2, 1500);
    for t in ["udp", "eth", "xdp"] {
        let out = ok(h.run(
            2,
            &[("VOLLEY_TRANSPORT", t)],
            &[CHECK, "exit-queued", "100", "100000"],
        ));
        assert_eq!(values(&out, "received"), vec!["100"], "{t}: {out}");
    }
}

/// A receiver that keeps every message `recv()` lends it, from a sender on its own host (shared
/// memory, a small ring) and from senders on other hosts, still gets every later message
/// (issue 16, defect 4d).
#[test]
fn a_receiver_keeping_what_it_was_lent_gets_every_later_message_across_hosts() {
    let h = Hosts::new(3, 1500);
    for t in ["udp", "eth"] {
        let env = [("VOLLEY_TRANSPORT", t), ("VOLLEY_SHM_RING_BYTES", "16384")];
        let out = ok(h.run(4, &env, &[CHECK, "keep", "2000", "700"]));
        assert_eq!(values(&out, "kept"), vec!["6000"], "{t}: {out}");
    }
}

/// A large message arriving straight into a receive buffer (blocking, or a request's) when its
/// sender dies: the receive fails with peer-lost within the timeout's bound, nothing crashes, and
/// the request's scope (which waits for every loan to end) returns.
#[test]
fn a_sender_killed_while_its_message_is_placed_fails_the_receive_in_bounded_time() {
    let h = Hosts::new(2, 1500);
    for how in ["wait", "request"] {
        let o = h.run(
            2,
            &[
                ("VOLLEY_TRANSPORT", "udp"),
                ("VOLLEY_PEER_TIMEOUT_MS", "1000"),
            ],
            &["--keep-going", CHECK, "lost-placing", how],
        );
        let (out, err) = text(&o);
        let after: Vec<u64> = values(&out, "after_ms")
            .iter()
            .map(|v| v.parse().unwrap())
            .collect();
        assert_eq!(after.len(), 1, "{how}: no report:\n{out}\n{err}");
        // Killed 20 ms after it started; the timeout is 1 s.
        assert!(after[0] <= 4000, "{how}: peer-lost after {} ms", after[0]);
        assert_eq!(values(&out, "rank"), vec!["1"], "{how}: {out}");
    }
}

#[test]
fn a_bad_launch_template_or_placement_is_a_clear_error() {
    let o = Command::new(VOLLEY)
        .args([
            "run",
            "-n",
            "3",
            "--hosts",
            "a:1,b:1",
            "--launch",
            "ip netns exec {host}",
            CHECK,
            "whoami",
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("only 2 slots"),
        "{o:?}"
    );
    let o = Command::new(VOLLEY)
        .args([
            "run", "-n", "2", "--hosts", "a,b", "--launch", "ssh", CHECK, "whoami",
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("{host}"),
        "{o:?}"
    );
    // A host name that would be an option of ssh (issue 16, defect 6): refused before anything
    // runs.
    let mark = std::env::temp_dir().join(format!("volley-proxy-{}", std::process::id()));
    let evil = format!("-oProxyCommand=touch {},b", mark.display());
    let o = Command::new(VOLLEY)
        .args(["run", "-n", "2", "--hosts", &evil, CHECK, "whoami"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("bad host name"),
        "{o:?}"
    );
    assert!(!mark.exists(), "ssh ran the host name's command");
}

/// VOLLEY_NET_IF=lo across hosts: the launcher sees loopback addresses and stops the job at once
/// saying so, instead of the ranks waiting for the peer timeout and blaming the peer (issue 16,
/// defect 9).
#[test]
fn a_loopback_address_across_hosts_is_a_clear_error() {
    let h = Hosts::new(2, 1500);
    let o = h.run(2, &[("VOLLEY_NET_IF", "lo")], &[CHECK, "whoami"]);
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert!(
        err.contains("on the loopback interface") && err.contains("VOLLEY_NET_IF"),
        "{err}"
    );
    assert!(!err.contains("stopped answering"), "{err}");
}

/// One host's agent cannot start (a mistyped host): the job stops with an error naming that
/// host, instead of the other host's ranks waiting for the address table for ever (issue 16,
/// defect 4a).
#[test]
fn a_host_whose_agent_cannot_start_stops_the_job() {
    let h = Hosts::new(1, 1500);
    let bogus = format!("nosuchns{}", std::process::id());
    let hosts = format!("{bogus},{}", h.list());
    let o = common::volley(
        &[
            "-n",
            "2",
            "--hosts",
            &hosts,
            "--launch",
            "ip netns exec {host}",
            CHECK,
            "whoami",
        ],
        &[],
    );
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}\n{err}");
    assert_ne!(o.status.code(), Some(124), "timed out instead:\n{err}");
    assert!(
        err.contains(&format!(
            "the agent on host {bogus} ended before its 1 rank(s) did"
        )),
        "{err}"
    );
}

/// Through an ssh-like template (ssh joins its arguments into one command line for the remote
/// shell), a program's arguments arrive intact and none of them runs as shell syntax; the job's
/// token is on no command line (issue 16, defects 6 and 1); and a rank that prints what looks
/// like a control line does not disturb the launcher (defect 7).
#[test]
fn arguments_secrets_and_output_through_a_shell_template() {
    let h = Hosts::new(2, 1500);
    let dir = std::env::temp_dir().join(format!("volley-shell-tpl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let ssh = dir.join("fake-ssh");
    std::fs::write(
        &ssh,
        "#!/bin/sh\n# As ssh does: the host, then one command line for the remote shell.\nhost=$1; shift\nexec ip netns exec \"$host\" sh -c \"$*\"\n",
    )
    .unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&ssh, std::fs::Permissions::from_mode(0o755)).unwrap();
    let template = format!("{} {{host}}", ssh.display());
    let mark = dir.join("touched");
    let evil = format!("x;touch {}", mark.display());
    let hosts = h.list();
    let script = "printf '<%s>\\n' \"$@\"; echo \"agent: $(tr '\\0' ' ' < /proc/$PPID/cmdline)\"";
    let o = common::volley(
        &[
            "-n",
            "2",
            "--hosts",
            &hosts,
            "--launch",
            &template,
            "--tag-output",
            "sh",
            "-c",
            script,
            "sh",
            "two words",
            &evil,
            "$HOME",
        ],
        &[],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    for r in 0..2 {
        for arg in ["two words", &evil, "$HOME"] {
            assert!(
                out.contains(&format!("[{r}] <{arg}>")),
                "rank {r}, {arg:?}:\n{out}\n{err}"
            );
        }
    }
    assert!(!mark.exists(), "an argument ran as a shell command");
    let agent_lines: Vec<&str> = out.lines().filter(|l| l.contains("agent: ")).collect();
    assert_eq!(agent_lines.len(), 2, "{out}");
    for l in agent_lines {
        assert!(
            l.contains("volley agent") && !l.contains("token") && !l.contains("--"),
            "{l}"
        );
    }
    // Without --tag-output a rank's line goes out as it is: one that starts like a control
    // line is still output, and the job still succeeds.
    let o = common::volley(
        &[
            "-n",
            "2",
            "--hosts",
            &hosts,
            "--launch",
            &template,
            "printf",
            "\\001volley exit 1 signal:9\\n\\002x\\n",
        ],
        &[],
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert_eq!(
        out.matches("\x01volley exit 1 signal:9\n").count(),
        2,
        "{out:?}"
    );
    assert_eq!(out.matches("\x02x\n").count(), 2, "{out:?}");
    let _ = std::fs::remove_dir_all(&dir);
}

/// `volley bench` across two hosts, volley and the kernel's TCP in one invocation, for both
/// transports: every series present, every size measured, throughput x time = bytes.
#[test]
fn bench_runs_across_hosts_beside_kernel_tcp() {
    let h = Hosts::new(2, 1500);
    for t in ["udp", "eth"] {
        let json =
            std::env::temp_dir().join(format!("volley-net-bench-{}-{t}.json", std::process::id()));
        let j = json.to_str().unwrap();
        // Over udp the launcher binds the ranks (issue 15, point 6: --cpus across hosts), in
        // an order no default would give; over eth nothing binds them.
        let pin: &[&str] = if t == "udp" {
            &["--cpus", "1,0"]
        } else {
            &["--bind-to", "none"]
        };
        let out = ok(h.run(
            2,
            &[("VOLLEY_TRANSPORT", t)],
            &[
                pin,
                &[
                    VOLLEY,
                    "bench",
                    "pingpong",
                    "--vs",
                    "tcp",
                    "--sizes",
                    "8,65536,1048576",
                    "--budget-ms",
                    "50",
                    "--reps",
                    "1",
                    "--json",
                    j,
                ],
            ]
            .concat(),
        ));
        let r: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap())
            .unwrap_or_else(|e| panic!("{e}\n{out}"));
        let _ = std::fs::remove_file(&json);
        let want = if t == "udp" {
            serde_json::json!("1,0")
        } else {
            serde_json::Value::Null
        };
        assert_eq!(r["placement"]["cpus"], want, "{t}: {}", r["placement"]);
        let series = r["series"].as_array().unwrap();
        let names: Vec<&str> = series
            .iter()
            .map(|s| s["transport"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec![format!("volley-{t}").as_str(), "tcp"], "{out}");
        for s in series {
            let pts = s["points"].as_array().unwrap();
            let sizes: Vec<u64> = pts.iter().map(|p| p["bytes"].as_u64().unwrap()).collect();
            assert_eq!(sizes, vec![8, 65536, 1048576]);
            for p in pts {
                let med = p["time_us"]["median"].as_f64().unwrap();
                let tp = p["mbytes_per_s"].as_f64().unwrap();
                let bytes = p["bytes_per_sample"].as_f64().unwrap();
                assert!(
                    med > 0.0 && (tp * med - bytes).abs() <= 1e-6 * bytes.max(1.0),
                    "{p}"
                );
            }
        }
    }
}

/// Whether namespace `ns` has an XDP program attached to any interface (`ip link` shows its
/// "prog/xdp" line).
fn xdp_attached(ns: &str) -> bool {
    let o = Command::new("ip")
        .args(["-d", "-n", ns, "link", "show"])
        .output()
        .expect("ip");
    String::from_utf8_lossy(&o.stdout).contains("prog/xdp")
}

/// Waits (a watchdog of 20 s, not a timing assertion) until `cond` holds; returns whether it did.
fn eventually(cond: impl Fn() -> bool) -> bool {
    let t = std::time::Instant::now();
    while t.elapsed() < std::time::Duration::from_secs(20) {
        if cond() {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    false
}

/// `volley run` over xdp across `h` in the background.
fn spawn_xdp_job(h: &Hosts, args: &[&str]) -> std::process::Child {
    let mut full = vec!["--keep-going"];
    full.extend_from_slice(args);
    h.command(2, &[("VOLLEY_TRANSPORT", "xdp")], &full)
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start volley")
}

/// Issue 15's acceptance for the XDP program: while a volley job streams over xdp between two
/// hosts, the kernel's own traffic between the same interfaces (ping, an 8 MiB TCP transfer)
/// is untouched; when the job ends, no program remains attached, and none either when its ranks
/// are killed with SIGKILL (the program's BPF link dies with the process).
#[test]
fn the_xdp_program_takes_only_volleys_frames_and_leaves_with_its_ranks() {
    let h = Hosts::new(2, 1500);
    assert!(!h.names.iter().any(|n| xdp_attached(n)), "attached before");
    let job = spawn_xdp_job(&h, &[CHECK, "stream", "4000", "1048576"]);
    assert!(
        eventually(|| h.names.iter().all(|n| xdp_attached(n))),
        "the program never attached on both hosts"
    );
    let ping = Command::new("ip")
        .args([
            "netns",
            "exec",
            &h.names[0],
            "ping",
            "-c",
            "3",
            "-i",
            "0.2",
            "-W",
            "5",
            &h.addrs[1],
        ])
        .output()
        .expect("ping (package iputils-ping)");
    assert!(
        ping.status.success(),
        "ping while volley runs: {}",
        String::from_utf8_lossy(&ping.stdout)
    );
    let server = format!(
        "import socket\ns=socket.socket()\ns.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('{}',7345))\ns.listen()\nc,_=s.accept()\nn=0\nwhile True:\n b=c.recv(1<<16)\n if not b: break\n n+=len(b)\nprint(n)",
        h.addrs[1]
    );
    let client = format!(
        "import socket,time\nfor i in range(100):\n try:\n  s=socket.create_connection(('{}',7345),timeout=10); break\n except OSError: time.sleep(0.05)\ns.sendall(b'v'*(8<<20))\ns.close()",
        h.addrs[1]
    );
    let srv = Command::new("ip")
        .args(["netns", "exec", &h.names[1], "python3", "-c", &server])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let cl = Command::new("ip")
        .args(["netns", "exec", &h.names[0], "python3", "-c", &client])
        .status()
        .unwrap();
    let got = srv.wait_with_output().unwrap();
    assert!(cl.success());
    assert_eq!(
        String::from_utf8_lossy(&got.stdout).trim(),
        (8u64 << 20).to_string(),
        "TCP while volley runs"
    );
    let o = job.wait_with_output().unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}\n{err}");
    assert!(out.contains("result: stream"), "{out}");
    assert!(
        h.names.iter().all(|n| !xdp_attached(n)),
        "a program stayed attached after the job"
    );

    // Killed: the ranks (volley-check processes carrying this marker) get SIGKILL.
    let marker = format!("xdp-kill-{}", std::process::id());
    let job = spawn_xdp_job(&h, &[CHECK, "hold", &marker]);
    assert!(eventually(|| h.names.iter().all(|n| xdp_attached(n))));
    let mut killed = 0;
    for p in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(cmd) = std::fs::read(p.path().join("cmdline")) else {
            continue;
        };
        let argv: Vec<&[u8]> = cmd.split(|&b| b == 0).collect();
        if argv.first() == Some(&CHECK.as_bytes()) && argv.contains(&marker.as_bytes()) {
            let pid = p.file_name().to_string_lossy().into_owned();
            let _ = Command::new("kill").args(["-9", &pid]).status();
            killed += 1;
        }
    }
    assert_eq!(killed, 2, "found {killed} ranks to kill");
    let _ = job.wait_with_output();
    assert!(
        eventually(|| h.names.iter().all(|n| !xdp_attached(n))),
        "a program stayed attached after its rank was killed"
    );
}

/// `send_with` to a rank on another host: the message is written once into a buffer the network
/// engine takes over, every size up to the record limit, in order, intact, over each device.
#[test]
fn send_with_reaches_another_host_in_order() {
    let h = Hosts::new(2, 1500);
    for t in ["udp", "eth"] {
        let out = ok(h.run(2, &[("VOLLEY_TRANSPORT", t)], &[CHECK, "send-with"]));
        assert!(
            out.contains("result: send_with received=70 ok"),
            "{t}: {out}"
        );
    }
}

/// Issue 14, point 5, across hosts: by default each rank is bound to one CPU, and ranks on
/// different "hosts" of one machine get different ones (bound by job rank); `--bind-to none`
/// leaves them free; `--cpus` binds as listed.
#[test]
fn ranks_on_several_hosts_are_bound_as_asked() {
    let h = Hosts::new(2, 1500);
    let allowed = volley_sys::allowed_cpus();
    let bound = |extra: &[&str]| -> Vec<String> {
        let mut args = extra.to_vec();
        args.extend(["sh", "-c", "grep Cpus_allowed_list /proc/self/status"]);
        let out = ok(h.run(2, &[], &args));
        (0..2)
            .map(|r| {
                let tag = format!("[{r}] Cpus_allowed_list:");
                out.lines()
                    .find_map(|l| l.strip_prefix(&tag))
                    .unwrap_or_else(|| panic!("rank {r}:\n{out}"))
                    .trim()
                    .to_string()
            })
            .collect()
    };
    let d = bound(&[]);
    for c in &d {
        let c: usize = c.parse().unwrap_or_else(|_| panic!("not one CPU: {d:?}"));
        assert!(allowed.contains(&c), "{d:?}");
    }
    if allowed.len() > 1 {
        assert_ne!(d[0], d[1], "two hosts' ranks on one CPU of the machine");
    }
    let all = bound(&["--bind-to", "none"]);
    assert_eq!(all[0], all[1]);
    assert!(all[0].contains(['-', ',']) || allowed.len() == 1, "{all:?}");
    let (a, b) = (allowed[0], allowed[allowed.len() - 1]);
    let list = format!("{b},{a}");
    assert_eq!(
        bound(&["--cpus", &list]),
        vec![b.to_string(), a.to_string()]
    );
}

/// Issue 14, point 5, across hosts: each host's agent places the rings of its ranks on their
/// NUMA nodes (VOLLEY_NUMA=on: the development machine has one node).
#[test]
fn each_hosts_rings_live_on_their_receivers_numa_node() {
    let h = Hosts::new(2, 1500);
    let out = ok(h.run(4, &[("VOLLEY_NUMA", "on")], &[CHECK, "numa"]));
    let report = numa_report(&out);
    assert_eq!(report.len(), 4, "{out}");
    for (home, rings) in report {
        assert_eq!(rings.len(), 2, "two ranks a host: {out}");
        for (mode, nodes, page) in rings {
            if home != "-" {
                assert_eq!((mode.as_str(), &nodes, &page), ("1", &home, &home), "{out}");
            }
        }
    }
}

/// The endpoint's descriptor wakes a poll(2) for a message from another host, and active-port
/// handlers run for messages from other hosts (three ranks: one local sender, one remote).
#[test]
fn endpoint_descriptor_and_active_ports_work_across_hosts() {
    let h = Hosts::new(2, 1500);
    let out = ok(h.run(2, &[], &[CHECK, "fd"]));
    assert!(out.contains("result: fd wakeups="), "{out}");
    let out = ok(h.run(3, &[("VOLLEY_TRANSPORT", "eth")], &[CHECK, "active", "200"]));
    assert!(out.contains("result: active handled=400 ok"), "{out}");
}

/// Two hosts joined through a third that routes between them and limits what it forwards to
/// the second to `rate` with a token bucket (tbf, a queue of about 5 ms): a bottleneck in the
/// network, as a switch port is, not on the sending host (where TCP's small queues and volley's
/// send buffer would decide the sharing instead of congestion control). Removed on drop.
struct Routed {
    names: [String; 3],
}

impl Routed {
    fn new(rate: &str) -> Routed {
        let id = std::process::id() % 100_000;
        let names = [0, 1, 2].map(|i| format!("vr{id}n{i}"));
        let r = Routed { names };
        let [a, m, b] = &r.names;
        let run = |args: &[&str]| common::hosts::sh(args).unwrap_or_else(|e| panic!("{e}"));
        for n in &r.names {
            run(&["ip", "netns", "add", n]);
            run(&["ip", "-n", n, "link", "set", "lo", "up"]);
        }
        let (ea, ma, eb, mb) = (
            format!("vr{id}a"),
            format!("vr{id}x"),
            format!("vr{id}b"),
            format!("vr{id}y"),
        );
        for (end, ns, mid) in [(&ea, a, &ma), (&eb, b, &mb)] {
            run(&[
                "ip", "link", "add", end, "netns", ns, "type", "veth", "peer", "name", mid,
                "netns", m,
            ]);
        }
        for (ns, dev, addr) in [
            (a, &ea, "198.18.9.1/24"),
            (m, &ma, "198.18.9.254/24"),
            (b, &eb, "198.18.10.1/24"),
            (m, &mb, "198.18.10.254/24"),
        ] {
            run(&["ip", "-n", ns, "addr", "add", addr, "dev", dev]);
            run(&["ip", "-n", ns, "link", "set", dev, "up"]);
        }
        for (ns, gw) in [(a, "198.18.9.254"), (b, "198.18.10.254")] {
            run(&["ip", "-n", ns, "route", "add", "default", "via", gw]);
        }
        run(&[
            "ip",
            "netns",
            "exec",
            m,
            "sysctl",
            "-qw",
            "net.ipv4.ip_forward=1",
        ]);
        run(&[
            "ip", "netns", "exec", m, "tc", "qdisc", "add", "dev", &mb, "root", "tbf", "rate",
            rate, "burst", "256k", "latency", "5ms",
        ]);
        r
    }

    /// Megabytes per second of a volley stream of 64 KiB messages from the first host to the
    /// last for `ms` milliseconds, as its receiver measured it.
    fn stream(&self, ms: &str, cc: &str) -> f64 {
        let hosts = format!("{},{}", self.names[0], self.names[2]);
        let out = ok(common::volley(
            &[
                "-n",
                "2",
                "--hosts",
                &hosts,
                "--launch",
                "ip netns exec {host}",
                CHECK,
                "stream",
                ms,
                "65536",
            ],
            &[("VOLLEY_TRANSPORT", "udp"), ("VOLLEY_NET_CC", cc)],
        ));
        values(&out, "mbytes_per_s")
            .first()
            .unwrap_or_else(|| panic!("no rate:\n{out}"))
            .parse()
            .unwrap()
    }
}

impl Drop for Routed {
    fn drop(&mut self) {
        for n in &self.names {
            let _ = common::hosts::sh(&["ip", "netns", "del", n]);
        }
    }
}

/// Issue 15, point 5: through a router that forwards at most 1 Gbit/s (125 MB/s), a volley
/// stream alone fills at least 80% of the link, and two volley streams and a kernel TCP stream
/// (CUBIC, Linux's default, named explicitly) running together for 5 s each get at least a
/// third of their fair share (the generous bound the issue sets; each measured by its
/// receiver). With congestion control off (VOLLEY_NET_CC=0) a volley stream alone still moves
/// about as much but overflows the router's queue all the time (hundreds of thousands of
/// retransmissions in 3 s against about a thousand), and TCP beside it gets almost nothing.
#[test]
fn volley_streams_and_kernel_tcp_share_a_bottleneck_in_the_network() {
    let r = Routed::new("1gbit");
    let link = 125.0;
    // What one stream can do: CI runs two tests at a time on two cores, and a neighbour that
    // takes a core for a while takes the rate with it (99.7 MB/s once so, 113 alone), so the
    // best of up to three tries counts.
    let mut alone = 0.0f64;
    for _ in 0..3 {
        alone = alone.max(r.stream("2000", "1"));
        if alone >= 0.8 * link {
            break;
        }
    }
    assert!(
        alone >= 0.8 * link,
        "alone: {alone:.1} MB/s of {link} (best of 3)"
    );

    // A kernel TCP stream (python3's sockets, CUBIC) beside two volley streams, all for 5 s.
    let tcp_rx = "import socket,time\ns=socket.socket();s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1);s.bind(('0.0.0.0',5599));s.listen(1)\nc,_=s.accept();n=0;t0=None\nwhile True:\n b=c.recv(1<<20)\n if not b: break\n t0=t0 or time.time(); n+=len(b)\nprint(n/(time.time()-t0)/1e6)";
    let tcp_tx = "import socket,time\ns=socket.socket();s.setsockopt(socket.IPPROTO_TCP,socket.TCP_CONGESTION,b'cubic');s.connect(('198.18.10.1',5599))\nb=bytes(1<<20);t=time.time()+5\nwhile time.time()<t: s.sendall(b)\ns.close()";
    let spawn_py = |ns: &str, code: &str| {
        Command::new("ip")
            .args(["netns", "exec", ns, "python3", "-c", code])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("python3")
    };
    // Together, the same way: a neighbour test that takes a core starves whichever processes
    // the scheduler leaves waiting (once volley 12.8 and 11.2, TCP 95.3 MB/s under load; 27-60
    // each alone), which says nothing about the protocol's fairness; so the first of up to
    // three runs in which every stream gets its third passes, and all runs are reported.
    let third = link / 3.0 / 3.0;
    let mut runs = Vec::new();
    for _ in 0..3 {
        let rx = spawn_py(&r.names[2], tcp_rx);
        std::thread::sleep(std::time::Duration::from_millis(300));
        let (a, b, tx) = std::thread::scope(|s| {
            let a = s.spawn(|| r.stream("5000", "1"));
            let b = s.spawn(|| r.stream("5000", "1"));
            let tx = spawn_py(&r.names[0], tcp_tx);
            (a.join().unwrap(), b.join().unwrap(), tx)
        });
        let txo = tx.wait_with_output().unwrap();
        assert!(
            txo.status.success(),
            "{}",
            String::from_utf8_lossy(&txo.stderr)
        );
        let rxo = rx.wait_with_output().unwrap();
        let tcp: f64 = String::from_utf8_lossy(&rxo.stdout)
            .trim()
            .parse()
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&rxo.stderr)));
        eprintln!("alone {alone:.1} MB/s; together: volley {a:.1} and {b:.1}, tcp {tcp:.1}");
        runs.push(format!("volley {a:.1} and {b:.1}, tcp {tcp:.1}"));
        if [a, b, tcp].iter().all(|&got| got >= third) {
            return;
        }
    }
    panic!(
        "in no run of three did every stream get a third of its fair share ({third:.1} MB/s): {}",
        runs.join("; ")
    );
}

/// A rank blocked in a matched receive from a rank of its own host (a wait that looks at the
/// shared-memory rings only) while a message from another host arrives: the packets are taken
/// in as they come, so the wait sleeps and costs almost no CPU, and the message is there
/// afterwards. The packets were left in the socket, which stayed readable, so every sleep
/// returned at once until the liveness thread drained it: 62 ranks waiting so on 2 cores made a
/// ping-pong between the other two 100 to 1,000 times slower.
#[test]
fn a_rank_waiting_on_its_own_host_sleeps_while_packets_arrive_from_another() {
    let h = Hosts::new(2, 1500);
    for t in ["udp", "eth"] {
        let out = ok(h.run(
            4,
            &[("VOLLEY_TRANSPORT", t)],
            &[CHECK, "idle", "2000", "near"],
        ));
        check_idle_2s(&out, t);
    }
}
