//! `nfsim replay`: a capture written here with sim_core's pcap writer, pushed through the
//! kube-proxy fixture's rules on a node with pod CIDR 10.244.0.0/16.

use sim_core::pcap::{self, PcapWriter, ReadOptions, WriteLink};
use sim_core::{Packet, SimDuration, SimTime, TcpFlags};
use std::path::PathBuf;

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;

const RULES: &str = "tests/fixtures/cli/kube-proxy.rules";
const ENDPOINTS: [&str; 3] = ["10.244.1.7", "10.244.1.8", "10.244.2.5"];

/// A file name in the temporary directory, unique to this process and test.
fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nfsim-cli-replay-{}-{name}", std::process::id()))
}

fn ms(n: u64) -> SimTime {
    SimTime::ZERO + SimDuration::from_millis(n)
}

fn p(s: &str) -> Packet {
    s.parse().unwrap()
}

/// An ARP request frame (not IP: skipped by the reader).
fn arp_frame() -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend([2, 0, 0, 0, 0, 1, 0x08, 0x06]);
    f.extend([0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend([2, 0, 0, 0, 0, 1, 10, 244, 2, 9]);
    f.extend([0, 0, 0, 0, 0, 0, 10, 244, 0, 1]);
    f
}

/// The capture: a pod's DNS query to the ClusterIP (twice, same flow), an ARP frame, a query
/// from outside the pod CIDR, a SYN to a service without endpoints.
fn write_capture(path: &PathBuf) -> Vec<u8> {
    let eth = WriteLink::Ethernet {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
    };
    let mut w = PcapWriter::with_start(Vec::new(), eth, 1_700_000_000_000_000_000).unwrap();
    w.write_packet(ms(0), &p("udp 10.244.2.9:40000 -> 10.96.0.10:53"))
        .unwrap();
    w.write_frame(ms(100), &arp_frame()).unwrap();
    w.write_packet(ms(250), &p("udp 172.18.0.5:41000 -> 10.96.0.10:53"))
        .unwrap();
    w.write_packet(
        ms(500),
        &Packet::tcp(
            "10.244.2.9:42000".parse().unwrap(),
            "10.96.200.1:80".parse().unwrap(),
            TcpFlags::SYN,
        ),
    )
    .unwrap();
    w.write_packet(ms(1500), &p("udp 10.244.2.9:40000 -> 10.96.0.10:53"))
        .unwrap();
    let bytes = w.into_inner();
    std::fs::write(path, &bytes).unwrap();
    bytes
}

fn endpoint_in(line: &str) -> &'static str {
    ENDPOINTS
        .iter()
        .find(|e| line.contains(&format!("-> {e}:53")))
        .copied()
        .unwrap_or_else(|| panic!("no endpoint in {line:?}"))
}

#[test]
fn replay_pushes_each_packet_through_the_rules_and_writes_what_left() {
    let cap = tmp("in.pcap");
    let out_pcap = tmp("out.pcap");
    write_capture(&cap);
    let (code, out, err) = nfsim(&[
        "replay",
        "--rules",
        RULES,
        "--pod-cidr",
        "10.244.0.0/16",
        "--pcap-out",
        out_pcap.to_str().unwrap(),
        cap.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}\n{out}");
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("=>")).collect();
    assert_eq!(lines.len(), 4, "{out}");

    // 1: the pod's query enters on cni0 and is DNAT'd to an endpoint, leaving by cni0.
    assert!(lines[0].contains(" cni0 "), "{}", lines[0]);
    assert!(lines[0].contains("transmitted on cni0"), "{}", lines[0]);
    assert!(lines[0].contains("[NAT]"), "{}", lines[0]);
    let first = endpoint_in(lines[0]);
    assert!(
        lines[0].contains("udp 10.244.2.9:40000 -> "),
        "{}",
        lines[0]
    );

    // 2: from outside the pod CIDR: enters on eth0, DNAT'd and masqueraded to cni0's address.
    assert!(lines[1].contains(" eth0 "), "{}", lines[1]);
    assert!(lines[1].contains("udp 10.244.0.1:"), "{}", lines[1]);

    // 3: no endpoints: filter REJECTs it, with an ICMP error sent back to the pod.
    assert!(
        lines[2].contains("rejected by filter FORWARD"),
        "{}",
        lines[2]
    );
    assert!(
        lines[2].contains("(kernel answer on cni0: icmp 10.244.0.1 -> 10.244.2.9 unreachable"),
        "{}",
        lines[2]
    );

    // 4: the same flow 1.5 s later stays on its endpoint (conntrack, not the rules).
    assert_eq!(endpoint_in(lines[3]), first, "{out}");
    assert!(
        lines[3].starts_with("    5"),
        "frame numbers count the ARP frame: {}",
        lines[3]
    );
    assert!(lines[3].contains("1.500000"), "{}", lines[3]);

    assert!(out.contains("  packets        4\n"), "{out}");
    assert!(out.contains("  not IP         1 (skipped)\n"), "{out}");
    assert!(out.contains("  transmitted    3\n"), "{out}");
    assert!(out.contains("  rejected       1\n"), "{out}");
    assert!(out.contains("  left the node  4"), "{out}");
    assert!(
        out.contains("  conntrack      2 entries at 1.500000"),
        "{out}"
    );

    // What left: 3 transmitted packets and the ICMP error, at the input's times and epoch.
    let left = pcap::read_file(&out_pcap, &ReadOptions::default()).unwrap();
    assert_eq!(left.records.len(), 4);
    assert_eq!(left.first_epoch_ns, 1_700_000_000_000_000_000);
    assert_eq!(left.records[0].packet.dst.to_string(), first);
    assert_eq!(left.records[0].packet.src.to_string(), "10.244.2.9");
    // REJECT's default answer: ICMP port unreachable to the pod, from the node's address on
    // the way back (icmp_send takes the packet's destination only when it is local).
    assert_eq!(left.records[2].packet.protocol(), 1);
    assert_eq!(left.records[2].packet.src.to_string(), "10.244.0.1");
    assert_eq!(left.records[2].packet.dst.to_string(), "10.244.2.9");
    assert_eq!(
        left.records[3].time,
        SimTime::ZERO + SimDuration::from_millis(1500)
    );
    let _ = std::fs::remove_file(cap);
    let _ = std::fs::remove_file(out_pcap);
}

#[test]
fn replay_with_trace_prints_every_rule_and_is_deterministic() {
    let cap = tmp("trace.pcap");
    write_capture(&cap);
    let args = [
        "replay",
        "--rules",
        RULES,
        "--pod-cidr",
        "10.244.0.0/16",
        "--trace",
        cap.to_str().unwrap(),
    ];
    let (code, out, err) = nfsim(&args);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("nat KUBE-SVC-TCOU7JCQXEZGVUNU #2"), "{out}");
    assert!(out.contains("MASQUERADE to 10.244.0.1"), "{out}");
    // The second packet of the flow does not see the nat table.
    let last = out.rsplit("    5 ").next().unwrap();
    assert!(!last.contains("-> nat PREROUTING"), "{last}");
    assert_eq!(nfsim(&args).1, out, "same capture, same seed, same output");
    let _ = std::fs::remove_file(cap);
}

#[test]
fn a_truncated_capture_is_an_error_naming_the_file_and_frame() {
    let full = tmp("full.pcap");
    let bytes = write_capture(&full);
    let cut = tmp("cut.pcap");
    std::fs::write(&cut, &bytes[..bytes.len() - 10]).unwrap();
    let (code, out, err) = nfsim(&["replay", "--rules", RULES, cut.to_str().unwrap()]);
    assert_eq!(code, 2, "{out}");
    assert!(out.is_empty(), "nothing replayed from a broken file: {out}");
    assert!(err.contains("cut.pcap"), "{err}");
    assert!(err.contains("frame 5"), "{err}");

    let (code, _, err) = nfsim(&[
        "replay",
        "--rules",
        RULES,
        "tests/fixtures/cli/kube-proxy.rules",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("not a pcap or pcapng file"), "{err}");
    let _ = std::fs::remove_file(full);
    let _ = std::fs::remove_file(cut);
}
