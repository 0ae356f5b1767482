//! `nfsim replay` applies what the kernel does before any hook (docs/kernel-model.md §14): a
//! received IPv4 packet with a bad header checksum is dropped (ip_rcv_core), fragments wait for
//! their datagram (nf_defrag_ipv4), and a capture whose timestamps go backwards is warned
//! about. Each case with one capture and with several (`--ingress`), in the text and in the
//! JSON lines (`--json -`). The captures are written here, raw IP, through the kube-proxy
//! fixture's rules on a node with pod CIDR 10.244.0.0/16.

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
    std::env::temp_dir().join(format!(
        "nfsim-capture-checks-{}-{name}",
        std::process::id()
    ))
}

fn ms(n: u64) -> SimTime {
    SimTime::ZERO + SimDuration::from_millis(n)
}

fn ip(s: &str) -> Vec<u8> {
    let p: Packet = s.parse().unwrap();
    sim_core::wire::emit_ip(&p).unwrap()
}

/// Sets the IPv4 header checksum of `h` (its first 20 bytes).
fn ipv4_checksum(h: &mut [u8]) {
    h[10] = 0;
    h[11] = 0;
    let mut sum: u32 = h[..20]
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    h[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
}

/// The payload bytes `from..to` of the 20-byte-header IPv4 packet `whole` as a fragment with
/// identification `id`.
fn fragment(whole: &[u8], id: u16, from: usize, to: usize, more: bool) -> Vec<u8> {
    let mut f = whole[..20].to_vec();
    f.extend_from_slice(&whole[20 + from..20 + to]);
    let total = f.len() as u16;
    f[2..4].copy_from_slice(&total.to_be_bytes());
    f[4..6].copy_from_slice(&id.to_be_bytes());
    let frag = (from / 8) as u16 | if more { 0x2000 } else { 0 };
    f[6..8].copy_from_slice(&frag.to_be_bytes());
    ipv4_checksum(&mut f);
    f
}

/// A DNS query of 68 bytes (48 of UDP), to be cut into fragments.
fn big_query() -> Vec<u8> {
    let mut q: Packet = "udp 10.244.2.9:40000 -> 10.96.0.10:53".parse().unwrap();
    q.len = 68;
    sim_core::wire::emit_ip(&q).unwrap()
}

/// Writes raw IPv4 packets at the given milliseconds, in file order, as a capture.
fn write_raw(name: &str, frames: &[(u64, Vec<u8>)]) -> PathBuf {
    let path = tmp(name);
    let mut w = PcapWriter::with_start(Vec::new(), WriteLink::RawIp, EPOCH_NS).unwrap();
    for (at, b) in frames {
        w.write_frame(ms(*at), b).unwrap();
    }
    std::fs::write(&path, w.into_inner()).unwrap();
    path
}

/// `nfsim replay` of the captures, as text, and again as JSON lines.
fn replay(inputs: &[String]) -> (String, Vec<Value>) {
    let run = |json: bool| {
        let mut args = vec!["replay", "--rules", RULES, "--pod-cidr", "10.244.0.0/16"];
        if json {
            args.extend(["--json", "-"]);
        }
        for i in inputs {
            if i.contains('=') {
                args.push("--ingress");
            }
            args.push(i);
        }
        let (code, out, err) = nfsim(&args);
        assert_eq!(code, 0, "{err}\n{out}");
        out
    };
    let text = run(false);
    let json = run(true)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    (text, json)
}

fn packets(json: &[Value]) -> Vec<&Value> {
    json.iter().filter(|v| v["kind"] == "packet").collect()
}

fn end(json: &[Value]) -> &Value {
    json.last().filter(|v| v["kind"] == "replay").unwrap()
}

fn warnings(json: &[Value]) -> Vec<&str> {
    end(json)["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .map(|w| w.as_str().unwrap())
        .collect()
}

#[test]
fn a_received_packet_with_a_bad_ipv4_header_checksum_is_dropped_before_the_rules() {
    let mut bad = ip("udp 10.244.2.9:40001 -> 10.96.0.10:53");
    bad[11] ^= 0x40;
    let path = write_raw(
        "csum.pcap",
        &[(0, ip("udp 10.244.2.9:40000 -> 10.96.0.10:53")), (10, bad)],
    );
    let (out, json) = replay(&[path.display().to_string()]);
    let _ = std::fs::remove_file(&path);
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("=>")).collect();
    assert!(lines[0].contains("[NAT]"), "{out}");
    assert!(
        lines[1].ends_with("=>  dropped: bad IPv4 header checksum (ip_rcv_core)"),
        "{out}"
    );
    assert!(
        out.contains("        1  bad IPv4 header checksum (ip_rcv_core)"),
        "{out}"
    );
    let warning = "1 received IPv4 packets have a header checksum that does not verify, and were dropped as the kernel drops them before any hook (ip_rcv_core: InCsumErrors); first: frame 2";
    assert!(out.contains(&format!("warning: {warning}")), "{out}");
    // Only the good query is tracked: the bad one never reached conntrack.
    assert!(out.contains("sport=40000"), "{out}");
    assert!(!out.contains("sport=40001"), "{out}");

    let p = packets(&json);
    assert_eq!(p.len(), 2);
    assert_eq!(p[1]["verdict"], "dropped");
    assert_eq!(p[1]["reason"], "bad IPv4 header checksum (ip_rcv_core)");
    assert!(p[1].get("entry").is_none());
    assert_eq!(end(&json)["summary"]["bad_checksum"], 1);
    assert_eq!(
        end(&json)["summary"]["dropped"]["bad IPv4 header checksum (ip_rcv_core)"],
        1
    );
    assert!(warnings(&json).contains(&warning), "{json:?}");
}

#[test]
fn fragments_reach_the_rules_once_as_their_datagram_and_a_lone_later_fragment_never() {
    let whole = big_query();
    let path = write_raw(
        "frag.pcap",
        &[
            (0, fragment(&whole, 7, 0, 24, true)),
            (5, fragment(&whole, 7, 24, 48, false)),
            // The later half of another datagram, whose first half never comes.
            (10, fragment(&whole, 8, 24, 48, false)),
        ],
    );
    let (out, json) = replay(&[path.display().to_string()]);
    let _ = std::fs::remove_file(&path);
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("=>")).collect();
    assert!(
        lines[0].ends_with("=>  held: for reassembly (its datagram completes at frame 2)"),
        "{out}"
    );
    assert!(
        lines[1].contains("udp 10.244.2.9:40000 -> 10.96.0.10:53  =>  transmitted"),
        "{out}"
    );
    assert!(
        lines[1].ends_with("[NAT]  [reassembled from frames 1, 2]"),
        "{out}"
    );
    assert!(
        lines[2].ends_with(
            "=>  dropped: fragment never reassembled (ipfrag_time expired): no first fragment"
        ),
        "{out}"
    );
    assert!(
        out.contains("  reassembled    1 datagrams (1 fragments held for them)"),
        "{out}"
    );
    assert!(
        out.contains("        1  fragment never reassembled (ipfrag_time expired)"),
        "{out}"
    );
    let warning = "1 IPv4 fragments never completed a datagram (1 of them in a queue without the first fragment, so without ports): the kernel holds fragments for reassembly before conntrack (nf_defrag_ipv4) and drops them when ipfrag_time (30 s) expires, so none of them reached the rules; first: frame 3";
    assert!(out.contains(&format!("warning: {warning}")), "{out}");
    // One conntrack entry, the datagram's, with its ports: none for a portless fragment.
    assert!(out.contains("1 flow entries have been shown"), "{out}");

    let p = packets(&json);
    assert_eq!(p.len(), 3);
    assert_eq!(p[0]["verdict"], "held");
    assert_eq!(p[1]["verdict"], "transmitted");
    assert_eq!(p[1]["frame"], 2);
    assert_eq!(p[1]["fragments"][0]["frame"], 1);
    assert_eq!(p[1]["fragments"][1]["frame"], 2);
    assert!(p[1]["entry"].is_object());
    assert_eq!(p[2]["verdict"], "dropped");
    let s = &end(&json)["summary"];
    assert_eq!(
        (
            &s["reassembled"],
            &s["fragments_held"],
            &s["fragments_expired"],
            &s["fragments_without_first"]
        ),
        (
            &Value::from(1),
            &Value::from(1),
            &Value::from(1),
            &Value::from(1)
        )
    );
    assert!(warnings(&json).contains(&warning), "{json:?}");
    assert_eq!(end(&json)["conntrack"].as_array().unwrap().len(), 1);
}

#[test]
fn timestamps_that_go_backwards_are_warned_about_with_the_frame_and_both_times() {
    let a = ip("udp 10.244.2.9:40000 -> 10.96.0.10:53");
    let b = ip("udp 10.244.2.9:40001 -> 10.96.0.10:53");
    let path = write_raw(
        "order.pcap",
        &[(0, a.clone()), (2000, b.clone()), (1500, a), (1000, b)],
    );
    let (out, json) = replay(&[path.display().to_string()]);
    let _ = std::fs::remove_file(&path);
    assert!(
        out.contains("  out of order   2 (processed at the previous record's time)"),
        "{out}"
    );
    let warning = "2 records have a timestamp earlier than a record before them in the same capture and were processed at that record's time, since the node's clock cannot go back; first: frame 3 at 1.500000 s, after frame 2 at 2.000000 s. `reordercap` sorts a capture by time";
    assert!(out.contains(&format!("warning: {warning}")), "{out}");
    assert_eq!(json[0]["captures"][0]["out_of_order"], 2);
    assert_eq!(end(&json)["summary"]["out_of_order"], 2);
    assert!(warnings(&json).contains(&warning), "{json:?}");
    // Processed at the clock's time, 2 s, not at their own.
    let p = packets(&json);
    assert_eq!(p[2]["t_ns"], 2_000_000_000u64);
    assert_eq!(p[3]["t_ns"], 2_000_000_000u64);
}

#[test]
fn with_several_captures_time_order_is_each_captures_own() {
    // eth0 and cni0 interleave (0, 2 s / 1, 3 s): merged, that is in order. cni0 then goes
    // back to 0.5 s: one record out of order, in cni0's capture.
    let a = write_raw(
        "order-eth0.pcap",
        &[
            (0, ip("udp 172.18.0.5:41000 -> 10.96.0.10:53")),
            (2000, ip("udp 172.18.0.5:41001 -> 10.96.0.10:53")),
        ],
    );
    let b = write_raw(
        "order-cni0.pcap",
        &[
            (1000, ip("udp 10.244.2.9:40000 -> 10.96.0.10:53")),
            (3000, ip("udp 10.244.2.9:40001 -> 10.96.0.10:53")),
            (500, ip("udp 10.244.2.9:40002 -> 10.96.0.10:53")),
        ],
    );
    let (ea, eb) = (
        format!("eth0={}", a.display()),
        format!("cni0={}", b.display()),
    );
    let (out, json) = replay(&[ea, eb]);
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    let warning = format!(
        "1 records have a timestamp earlier than a record before them in the same capture ({b}: 1) and were processed at that record's time, since the node's clock cannot go back; first: {b}: frame 3 at 0.500000 s, after frame 2 at 3.000000 s.",
        b = b.display()
    );
    assert!(out.contains(&format!("warning: {warning}")), "{out}");
    assert!(
        out.contains("  out of order   1 (processed at the previous record's time)"),
        "{out}"
    );
    let caps = json[0]["captures"].as_array().unwrap();
    assert_eq!(
        (&caps[0]["out_of_order"], &caps[1]["out_of_order"]),
        (&Value::from(0), &Value::from(1))
    );
    assert_eq!(end(&json)["summary"]["out_of_order"], 1);
    assert!(
        warnings(&json).iter().any(|w| w.starts_with(&warning)),
        "{json:?}"
    );
}

#[test]
fn with_several_captures_fragments_share_the_nodes_queues_and_bad_headers_name_their_capture() {
    // The two halves of one datagram received on two interfaces: ip_find() keys a queue by
    // addresses, protocol and identification (and VRF, none here), not by interface.
    let whole = big_query();
    let mut bad = ip("udp 10.244.2.9:40001 -> 10.96.0.10:53");
    bad[11] ^= 0x40;
    let a = write_raw(
        "frag-eth0.pcap",
        &[(0, fragment(&whole, 7, 0, 24, true)), (20, bad)],
    );
    let b = write_raw(
        "frag-any.pcap",
        &[
            (5, fragment(&whole, 7, 24, 48, false)),
            (10, fragment(&whole, 9, 24, 48, false)),
        ],
    );
    let (ea, eb) = (
        format!("eth0={}", a.display()),
        format!("any={}", b.display()),
    );
    let (out, json) = replay(&[ea, eb]);
    let _ = std::fs::remove_file(&a);
    let _ = std::fs::remove_file(&b);
    let lines: Vec<&str> = out.lines().filter(|l| l.contains("=>")).collect();
    assert!(
        lines[0].ends_with("=>  held: for reassembly (its datagram completes at frame 2:1)"),
        "{out}"
    );
    assert!(lines[1].starts_with("    2:1 "), "{out}");
    assert!(
        lines[1].ends_with("[reassembled from frames 1:1, 2:1]"),
        "{out}"
    );
    assert!(
        lines[2].ends_with(
            "=>  dropped: fragment never reassembled (ipfrag_time expired): no first fragment"
        ),
        "{out}"
    );
    assert!(
        lines[3].ends_with("=>  dropped: bad IPv4 header checksum (ip_rcv_core)"),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "does not verify, and were dropped as the kernel drops them before any hook (ip_rcv_core: InCsumErrors); first: {}: frame 2",
            a.display()
        )),
        "{out}"
    );
    assert!(
        out.contains(&format!(
            "so none of them reached the rules; first: {}: frame 2",
            b.display()
        )),
        "{out}"
    );
    let p = packets(&json);
    assert_eq!(p[1]["capture"], b.display().to_string());
    assert_eq!(p[1]["fragments"][0]["capture"], a.display().to_string());
    assert_eq!(p[1]["fragments"][1]["capture"], b.display().to_string());
    let s = &end(&json)["summary"];
    assert_eq!(
        (
            &s["reassembled"],
            &s["fragments_expired"],
            &s["bad_checksum"]
        ),
        (&Value::from(1), &Value::from(1), &Value::from(1))
    );
    assert_eq!(warnings(&json).len(), 2, "{json:?}");
}
