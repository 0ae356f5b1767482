//! `nfsim replay` with its JSON lines (`--json`), several captures (`--ingress IFACE=FILE`)
//! and Linux cooked captures of `tcpdump -i any` (outgoing copies, a packet seen on two
//! interfaces). The captures are written here, small, through the kube-proxy fixture's rules
//! on a node with pod CIDR 10.244.0.0/16.

use serde_json::Value;
use sim_core::pcap::{PcapWriter, WriteLink};
use sim_core::{Packet, SimDuration, SimTime};
use std::path::PathBuf;

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;

const RULES: &str = "tests/fixtures/cli/kube-proxy.rules";
const EPOCH_NS: u64 = 1_700_000_000_000_000_000;

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nfsim-replay-inputs-{}-{name}", std::process::id()))
}

fn us(n: u64) -> SimTime {
    SimTime::ZERO + SimDuration::from_micros(n)
}

fn p(s: &str) -> Packet {
    s.parse().unwrap()
}

/// A pcap of Ethernet frames: `(time, packet)` in file order.
fn write(path: &PathBuf, packets: &[(SimTime, &str)]) {
    let eth = WriteLink::Ethernet {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
    };
    let mut w = PcapWriter::with_start(Vec::new(), eth, EPOCH_NS).unwrap();
    for (t, s) in packets {
        w.write_packet(*t, &p(s)).unwrap();
    }
    std::fs::write(path, w.into_inner()).unwrap();
}

fn replay(extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["replay", "--rules", RULES, "--pod-cidr", "10.244.0.0/16"];
    args.extend_from_slice(extra);
    nfsim(&args)
}

fn packet_lines(out: &str) -> Vec<&str> {
    out.lines().filter(|l| l.contains("=>")).collect()
}

#[test]
fn two_ingress_captures_are_merged_by_time_and_enter_where_they_were_taken() {
    let a = tmp("eth0.pcap");
    let b = tmp("cni0.pcap");
    // eth0: a host's queries at 0 and 2 ms. cni0: a pod's at 1 ms and 2 ms (a tie with
    // eth0's second), and one from 172.18.0.7 (outside the pod CIDR: the tap says cni0).
    write(
        &a,
        &[
            (us(0), "udp 172.18.0.5:41000 -> 10.96.0.10:53"),
            (us(2000), "udp 172.18.0.5:41001 -> 10.96.0.10:53"),
        ],
    );
    write(
        &b,
        &[
            (us(1000), "udp 10.244.2.9:40000 -> 10.96.0.10:53"),
            (us(2000), "udp 10.244.2.9:40001 -> 10.96.0.10:53"),
            (us(3000), "udp 172.18.0.7:40002 -> 10.96.0.10:53"),
        ],
    );
    let (ea, eb) = (
        format!("eth0={}", a.display()),
        format!("cni0={}", b.display()),
    );
    let (code, out, err) = replay(&["--ingress", &ea, "--ingress", &eb]);
    assert_eq!(code, 0, "{err}\n{out}");
    assert!(
        out.contains("replaying 2 captures merged by time:"),
        "{out}"
    );
    let lines = packet_lines(&out);
    assert_eq!(lines.len(), 5, "{out}");
    let order: Vec<&str> = lines
        .iter()
        .map(|l| l.split_whitespace().next().unwrap())
        .collect();
    assert_eq!(order, ["1:1", "2:1", "1:2", "2:2", "2:3"], "{out}");
    assert!(lines[0].contains(" eth0 "), "{}", lines[0]);
    assert!(lines[1].contains(" cni0 "), "{}", lines[1]);
    assert!(
        lines[4].contains(" cni0  udp 172.18.0.7:40002"),
        "the capture's interface decides, not the source address: {}",
        lines[4]
    );
    assert!(out.contains("  packets        5\n"), "{out}");

    // The tie goes the other way when the flags do.
    let (code, out, err) = replay(&["--ingress", &eb, "--ingress", &ea]);
    assert_eq!(code, 0, "{err}");
    let order: Vec<String> = packet_lines(&out)
        .iter()
        .map(|l| l.split_whitespace().next().unwrap().to_string())
        .collect();
    assert_eq!(order, ["2:1", "1:1", "1:2", "2:2", "1:3"], "{out}");

    // The single-capture form is unchanged: by source address, plain frame numbers.
    let (code, out, err) = replay(&[b.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    let lines = packet_lines(&out);
    assert!(lines[0].starts_with("    1 "), "{}", lines[0]);
    assert!(
        lines[2].contains(" eth0  udp 172.18.0.7:40002"),
        "{}",
        lines[2]
    );
    let _ = std::fs::remove_file(a);
    let _ = std::fs::remove_file(b);
}

#[test]
fn a_bad_ingress_flag_names_what_was_expected() {
    let a = tmp("bad.pcap");
    write(&a, &[(us(0), "udp 172.18.0.5:41000 -> 10.96.0.10:53")]);
    let (code, _, err) = replay(&["--ingress", &format!("wlan0={}", a.display())]);
    assert_eq!(code, 2);
    assert!(err.contains("--ingress \"wlan0\""), "{err}");
    assert!(err.contains("eth0 (the wire)"), "{err}");
    let (code, _, err) = replay(&["--ingress", a.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("expected IFACE=FILE"), "{err}");
    let (code, _, err) = nfsim(&[
        "replay",
        "--rules",
        RULES,
        "--ingress",
        &format!("cni0={}", a.display()),
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("needs --pod-cidr"), "{err}");
    let (code, _, err) = replay(&[]);
    assert_eq!(code, 2, "no capture at all is a usage error: {err}");
    let _ = std::fs::remove_file(a);
}

#[test]
fn json_lines_give_each_packet_its_verdict_nat_and_entry() {
    let a = tmp("json.pcap");
    write(
        &a,
        &[
            (us(0), "udp 10.244.2.9:40000 -> 10.96.0.10:53"),
            (us(500), "tcp 10.244.2.9:42000 -> 10.96.200.1:80 SYN"),
        ],
    );
    let (code, out, err) = replay(&["--json", "-", "--conntrack-at", "1ms", a.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}\n{out}");
    let lines: Vec<Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect();
    let kinds: Vec<&str> = lines.iter().map(|l| l["kind"].as_str().unwrap()).collect();
    assert_eq!(kinds.first(), Some(&"start"), "{out}");
    assert_eq!(kinds.last(), Some(&"replay"), "{out}");
    assert_eq!(lines[0]["command"], "replay");
    assert_eq!(lines[0]["version"], 1);
    assert_eq!(lines[0]["captures"][0]["packets"], 2);

    let packets: Vec<&Value> = lines.iter().filter(|l| l["kind"] == "packet").collect();
    assert_eq!(packets.len(), 2, "{out}");
    let q = packets[0];
    assert_eq!(q["frame"], 1);
    assert_eq!(q["ingress"], "cni0");
    assert_eq!(q["verdict"], "transmitted");
    assert_eq!(q["out_dev"], "cni0");
    assert_eq!(q["nat"], true);
    assert_eq!(q["entry"]["dnat"]["from_addr"], "10.96.0.10");
    assert_eq!(q["entry"]["flags"][0], "UNREPLIED");
    let r = packets[1];
    assert_eq!(r["t_ns"], 500_000);
    assert_eq!(r["verdict"], "rejected");
    assert_eq!(r["reason"], "filter FORWARD");
    assert_eq!(r["nat"], false);
    assert!(
        r["answers"][0]["packet"]
            .as_str()
            .unwrap()
            .starts_with("icmp 10.244.0.1 -> 10.244.2.9 unreachable"),
        "{r}"
    );
    // The conntrack events, as `nfsim run --json` writes them, and the table at 1 ms.
    let new = lines
        .iter()
        .find(|l| l["kind"] == "conntrack" && l["event"] == "NEW")
        .expect("a NEW event");
    assert!(
        new["line"].as_str().unwrap().starts_with("    [NEW] udp"),
        "{new}"
    );
    let dump = lines
        .iter()
        .find(|l| l["kind"] == "conntrack_dump")
        .unwrap();
    assert_eq!(dump["t_ns"], 1_000_000);
    assert_eq!(dump["entries"].as_array().unwrap().len(), 1);
    let end = lines.last().unwrap();
    assert_eq!(end["summary"]["packets"], 2);
    assert_eq!(end["summary"]["rejected"]["filter FORWARD"], 1);
    assert_eq!(end["conntrack"].as_array().unwrap().len(), 1);

    // Same capture, same bytes; --json FILE keeps the text on stdout.
    assert_eq!(
        replay(&["--json", "-", "--conntrack-at", "1ms", a.to_str().unwrap()]).1,
        out
    );
    let j = tmp("out.jsonl");
    let (code, text, err) = replay(&[
        "--json",
        j.to_str().unwrap(),
        "--conntrack-at",
        "1ms",
        a.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("summary"), "{text}");
    assert_eq!(std::fs::read_to_string(&j).unwrap(), out);
    let _ = std::fs::remove_file(a);
    let _ = std::fs::remove_file(j);
}

/// A `tcpdump -i any` capture (LINKTYPE_LINUX_SLL2): `(time, pkttype, if_index, packet)`.
fn write_cooked(path: &PathBuf, records: &[(SimTime, u8, u32, &str)]) {
    let mut f = Vec::new();
    f.extend(0xa1b2_3c4d_u32.to_le_bytes()); // nanosecond pcap
    f.extend(2u16.to_le_bytes());
    f.extend(4u16.to_le_bytes());
    f.extend([0; 8]);
    f.extend(262_144u32.to_le_bytes());
    f.extend(276u32.to_le_bytes()); // LINKTYPE_LINUX_SLL2
    for (t, pkttype, ifindex, s) in records {
        let ip = sim_core::wire::emit_ip(&p(s)).unwrap();
        let mut frame = Vec::new();
        frame.extend(0x0800u16.to_be_bytes()); // protocol
        frame.extend([0, 0]); // reserved
        frame.extend(ifindex.to_be_bytes());
        frame.extend(1u16.to_be_bytes()); // ARPHRD_ETHER
        frame.push(*pkttype);
        frame.push(6);
        frame.extend([2, 0, 0, 0, 0, 9, 0, 0]);
        frame.extend(&ip);
        let ns = EPOCH_NS + t.as_nanos();
        f.extend(((ns / 1_000_000_000) as u32).to_le_bytes());
        f.extend(((ns % 1_000_000_000) as u32).to_le_bytes());
        f.extend((frame.len() as u32).to_le_bytes());
        f.extend((frame.len() as u32).to_le_bytes());
        f.extend(frame);
    }
    std::fs::write(path, f).unwrap();
}

#[test]
fn a_tcpdump_any_capture_replays_each_arrival_once() {
    let a = tmp("any.pcap");
    let q = "udp 10.244.2.9:40000 -> 10.96.0.10:53";
    write_cooked(
        &a,
        &[
            // The pod's query on its veth (a bridge port: OTHERHOST), on cni0 (HOST), then
            // out of eth0 after DNAT (OUTGOING).
            (us(0), 3, 7, q),
            (us(10), 0, 3, q),
            (us(20), 4, 2, "udp 10.244.2.9:40000 -> 10.244.1.7:53"),
            // The same query again a second later (a retry with the same bytes): a new
            // arrival, not a duplicate.
            (us(1_000_000), 3, 7, q),
            (us(1_000_010), 0, 3, q),
        ],
    );
    let (code, out, err) = replay(&[a.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}\n{out}");
    let lines = packet_lines(&out);
    assert_eq!(lines.len(), 2, "{out}");
    assert!(lines[0].starts_with("    1 "), "{}", lines[0]);
    assert!(lines[1].starts_with("    4 "), "{}", lines[1]);
    assert!(out.contains("  packets        2\n"), "{out}");
    assert!(
        out.contains("  outgoing       1 (sent by the node, skipped)\n"),
        "{out}"
    );
    assert!(
        out.contains("  duplicates     2 (seen on a second interface, skipped)\n"),
        "{out}"
    );
    assert_eq!(
        out.matches(
            "warning: 1 packets of a Linux cooked capture (tcpdump -i any) were sent by the node"
        )
        .count(),
        1,
        "{out}"
    );
    assert!(
        out.contains("warning: 2 packets of a Linux cooked capture repeat"),
        "{out}"
    );
    let _ = std::fs::remove_file(a);
}
