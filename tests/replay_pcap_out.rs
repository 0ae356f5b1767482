//! `nfsim replay --pcap-out` writes what left the node as the node would have sent it: every
//! shipped capture (`tests/fixtures/**/*.pcap*`) is replayed through the kube-proxy fixture,
//! and in the output every byte of a packet that came in is the captured byte, except the
//! fields the kernel changes (addresses, ports, ICMP ids, TTL, the checksums over them, the
//! header quoted in an ICMP error). tshark, where installed, reads the output with checksum
//! validation on and finds nothing wrong.

#[path = "support/tools.rs"]
mod tools;

use sim_core::pcap::{self, Capture, ReadOptions, Record};
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const RULES: &str = "tests/fixtures/cli/kube-proxy.rules";

fn captures(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            captures(&p, out);
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains(".pcap"))
        {
            out.push(p);
        }
    }
}

fn shipped() -> Vec<PathBuf> {
    let mut v = Vec::new();
    captures(&Path::new(ROOT).join("tests/fixtures"), &mut v);
    assert!(v.len() >= 2, "the fixtures are gone: {v:?}");
    v
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nfsim-pcap-out-{}-{name}", std::process::id()))
}

fn replay(input: &Path, out: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args(["replay", "--rules", RULES, "--pod-cidr", "10.244.0.0/16"])
        .arg("--pcap-out")
        .arg(out)
        .arg(input)
        .current_dir(ROOT)
        .output()
        .unwrap();
    let stdout = String::from_utf8(o.stdout).unwrap();
    assert!(
        o.status.success(),
        "{}: {}\n{stdout}",
        input.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// Marks the bytes of the IPv4 packet at `ip[at..]` that NAT and forwarding may change.
fn mark_v4(ip: &[u8], at: usize, quoted: bool, may: &mut [bool]) {
    if ip.len() < at + 20 {
        return;
    }
    let ihl = usize::from(ip[at] & 0xf) * 4;
    let mut set = |from: usize, to: usize| {
        for m in may.iter_mut().take(to.min(ip.len())).skip(from) {
            *m = true;
        }
    };
    set(at + 8, at + 9); // TTL
    set(at + 10, at + 20); // header checksum, addresses
    let l4 = at + ihl;
    match ip[at + 9] {
        6 => {
            set(l4, l4 + 4);
            set(l4 + 16, l4 + 18);
        }
        17 => {
            set(l4, l4 + 4);
            set(l4 + 6, l4 + 8);
        }
        1 => {
            set(l4 + 2, l4 + 6); // checksum, echo id
            if !quoted && ip.len() > l4 && matches!(ip[l4], 3 | 4 | 5 | 11 | 12) {
                mark_v4(ip, l4 + 8, true, may);
            }
        }
        _ => {}
    }
}

/// The input record that `out` (an output record) is the forwarded copy of: same time, same
/// protocol and length, same IPv4 identification. `None` for a packet the kernel generated.
fn source_of<'a>(
    input: &'a Capture,
    out_cap: &Capture,
    out: &Record,
    first_in: u64,
    first_out: u64,
) -> Option<&'a Record> {
    let ob = out_cap.ip_bytes(out);
    let t_out = first_out + out.time.as_nanos();
    input.records.iter().find(|r| {
        let ib = input.ip_bytes(r);
        first_in + r.time.as_nanos() == t_out
            && ib.len() == ob.len()
            && ib.len() >= 20
            && ib[0] == ob[0]
            && ib[4..6] == ob[4..6]
            && ib[9] == ob[9]
    })
}

#[test]
fn pcap_out_keeps_every_byte_the_kernel_does_not_change() {
    for input in shipped() {
        let name = input.file_name().unwrap().to_string_lossy().to_string();
        let out = tmp(&format!("{name}.out.pcap"));
        let text = replay(&input, &out);
        let inp = pcap::read_file(&input, &ReadOptions::default()).unwrap();
        let outp = pcap::read_file(&out, &ReadOptions::default()).unwrap();
        assert!(
            text.contains(&format!("left the node  {}", outp.records.len())),
            "{text}"
        );
        let mut forwarded = 0;
        for o in &outp.records {
            let Some(i) = source_of(&inp, &outp, o, inp.first_epoch_ns, outp.first_epoch_ns) else {
                continue;
            };
            forwarded += 1;
            let (ib, ob) = (inp.ip_bytes(i), outp.ip_bytes(o));
            assert_eq!(o.orig_len as usize, usize::from(i.packet.len), "{name}");
            let mut may = vec![false; ib.len()];
            if ib[0] >> 4 == 4 {
                mark_v4(ib, 0, false, &mut may);
            }
            for (k, (a, b)) in ib.iter().zip(ob).enumerate() {
                assert!(
                    a == b || may[k],
                    "{name}: frame {}: byte {k} changed from {a:#04x} to {b:#04x}, outside any NAT'd field",
                    i.frame
                );
            }
            // A packet's payload beyond its headers is the captured payload, all of it.
            assert!(ib.len() > 20, "{name}");
        }
        assert!(forwarded > 0, "{name}: nothing was forwarded\n{text}");
        let _ = std::fs::remove_file(&out);
    }
}

#[test]
fn the_node_in_fixture_comes_out_translated() {
    let input = Path::new(ROOT).join("tests/fixtures/pcap/node-in.pcap");
    let out = tmp("node-in-translated.pcap");
    replay(&input, &out);
    let outp = pcap::read_file(&out, &ReadOptions::default()).unwrap();
    let got: Vec<String> = outp.records.iter().map(|r| r.packet.to_string()).collect();
    // The answer, un-DNAT'd to the ClusterIP; the API server's SYN-ACK likewise; the
    // endpoint's port unreachable with its quote translated back to what the pod sent; the
    // REJECT's answer from cni0's address quoting the SYN.
    for want in [
        "udp 10.96.0.10:53 -> 10.244.2.9:40000",
        "tcp 10.96.0.1:443 -> 10.244.2.9:52100 SYN,ACK",
        "icmp 10.96.0.10 -> 10.244.2.9 unreachable code=3 (udp 10.244.2.9:40001 -> 10.96.0.10:53)",
        "icmp 10.244.0.1 -> 10.244.2.9 unreachable code=3 (tcp 10.244.2.9:42000 -> 10.96.200.1:80)",
    ] {
        // A TCP segment's text goes on with its seq=, ack=, win=, len= and options.
        assert!(
            got.iter()
                .any(|g| g == want || g.starts_with(&format!("{want} seq="))),
            "{want} not in {got:#?}"
        );
    }
    // The TLS segment keeps its 1,448 bytes of payload and its TCP options.
    let data = outp
        .records
        .iter()
        .find(|r| r.packet.len == 1500)
        .expect("the 1500-byte segment");
    let b = outp.ip_bytes(data);
    assert_eq!(b.len(), 1500);
    assert_eq!(
        b[32] >> 4,
        8,
        "TCP header of 32 bytes: the timestamps option is kept"
    );
    assert_eq!(&b[52..55], &[0x17, 0x03, 0x03]);
    let _ = std::fs::remove_file(&out);
}

#[test]
fn tshark_validates_every_checksum_of_the_output() {
    let test = "tshark_validates_every_checksum_of_the_output";
    if !tools::have_or_skip(test, &["tshark"]) {
        return;
    }
    for input in shipped() {
        let name = input.file_name().unwrap().to_string_lossy().to_string();
        let out = tmp(&format!("{name}.tshark.pcap"));
        replay(&input, &out);
        let run = |filter: &str| tools::tshark_matching(&out, filter);
        let bad = run("ip.checksum.status == \"Bad\" || tcp.checksum.status == \"Bad\" || udp.checksum.status == \"Bad\" || icmp.checksum.status == \"Bad\" || _ws.malformed || _ws.expert.severity == \"Error\"");
        assert_eq!(bad, "", "{name}: tshark finds errors in the output");
        let all = run("frame");
        let n = pcap::read_file(&out, &ReadOptions::default())
            .unwrap()
            .records
            .len();
        assert_eq!(all.lines().count(), n, "{name}: tshark read\n{all}");
        // Checksums were really checked: the complete TCP/UDP records say "Good".
        let good = run("ip.checksum.status == \"Good\"");
        assert!(good.lines().count() > 0, "{name}");
        let _ = std::fs::remove_file(&out);
    }
}

fn nfsim(args: &[&str]) -> (bool, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args(args)
        .current_dir(ROOT)
        .output()
        .unwrap();
    (
        o.status.success(),
        String::from_utf8(o.stdout).unwrap(),
        String::from_utf8(o.stderr).unwrap(),
    )
}

/// `nfsim replay --rules RULES` with `extra` flags after.
fn replay_rules(extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["replay", "--rules", RULES];
    args.extend_from_slice(extra);
    nfsim(&args)
}

/// [`replay_rules`] on a node whose pods are 10.244.0.0/16.
fn replay_pods(extra: &[&str]) -> (bool, String, String) {
    let mut args = vec!["--pod-cidr", "10.244.0.0/16"];
    args.extend_from_slice(extra);
    replay_rules(&args)
}

fn write_raw(path: &Path, packets: &[(u64, &str)]) {
    let mut w = pcap::PcapWriter::new(Vec::new(), pcap::WriteLink::RawIp).unwrap();
    for (ms, p) in packets {
        let p: sim_core::Packet = p.parse().unwrap();
        w.write_packet(sim_core::SimTime::from_millis(*ms), &p)
            .unwrap();
    }
    std::fs::write(path, w.into_inner()).unwrap();
}

#[test]
fn replay_warns_when_the_capture_does_not_fit_the_node() {
    let cap = tmp("misfit.pcap");
    // A pod's query, then its answer as the pod's veth shows it (after un-DNAT: from the
    // ClusterIP), then loopback traffic.
    write_raw(
        &cap,
        &[
            (0, "udp 10.244.2.9:40000 -> 10.96.0.10:53"),
            (1, "udp 10.96.0.10:53 -> 10.244.2.9:40000"),
            (2, "udp 127.0.0.1:5000 -> 127.0.0.53:53"),
            (3, "udp 127.0.0.1:5000 -> 127.0.0.53:53"),
        ],
    );
    let (ok, out, err) = replay_pods(&[cap.to_str().unwrap()]);
    assert!(ok, "{err}");
    assert!(
        out.contains("warning: 2 packets on loopback addresses"),
        "{out}"
    );
    assert!(
        out.contains("warning: 1 packets answer a flow this node tracks but come from another address or port than its replies do")
            && out.contains("First: frame 2: udp 10.96.0.10:53 -> 10.244.2.9:40000"),
        "{out}"
    );
    // The table at the end, as conntrack -L prints it.
    assert!(
        out.contains("conntrack -L at 0.003000\nudp      17 29 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 [UNREPLIED] src=10.244.")
            && out.contains("flow entries have been shown.\n"),
        "{out}"
    );
    let _ = std::fs::remove_file(&cap);
}

#[test]
fn replay_starts_from_a_conntrack_listing_with_sysctls_and_prints_the_table_when_asked() {
    let cap = tmp("ct-start.pcap");
    write_raw(&cap, &[(0, "udp 10.244.2.9:40000 -> 10.96.0.10:53")]);
    let ct = tmp("ct-start.txt");
    std::fs::write(
        &ct,
        "udp      17 25 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.8 dst=10.244.2.9 sport=53 dport=40000 [ASSURED] mark=0 use=1\n",
    )
    .unwrap();
    let (ok, out, err) = replay_pods(&[
        "--conntrack",
        ct.to_str().unwrap(),
        "--sysctl",
        "nf_conntrack_udp_timeout_stream=150",
        "--conntrack-at",
        "0s",
        cap.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.starts_with("conntrack from "), "{out}");
    // The loaded entry decides the endpoint, not the rules.
    assert!(
        out.contains("transmitted on cni0: udp 10.244.2.9:40000 -> 10.244.1.8:53"),
        "{out}"
    );
    // Refreshed by the nf_conntrack_udp_timeout_stream set by --sysctl: the entry is
    // assumed 1 minute old (its line prints no delta-time=), past the 2 s after creation.
    assert!(
        out.contains(
            "udp      17 150 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.8"
        ),
        "{out}"
    );
    assert!(out.contains("conntrack -L at 0.000000\n"), "{out}");
    let (ok, _, err) = replay_rules(&[
        "--sysctl",
        "nf_conntrack_udp_timeout",
        cap.to_str().unwrap(),
    ]);
    assert!(!ok && err.contains("expected NAME=VALUE"), "{err}");
    let _ = std::fs::remove_file(&cap);
    let _ = std::fs::remove_file(&ct);
}

/// A replay that starts from a real node's table: `--conntrack NAME --rules … CAPTURE`, with
/// `extra` flags, the capture holding `packets`; returns (ok, stdout, stderr).
fn replay_from(listing: &str, packets: &[(u64, &str)], extra: &[&str]) -> (bool, String, String) {
    let tag = format!("{}-{}", listing.len(), extra.join("_").len());
    let cap = tmp(&format!("from-{tag}.pcap"));
    write_raw(&cap, packets);
    let ct = tmp(&format!("from-{tag}.txt"));
    std::fs::write(&ct, listing).unwrap();
    let mut args = vec!["--conntrack", ct.to_str().unwrap(), cap.to_str().unwrap()];
    args.extend_from_slice(extra);
    let r = replay_pods(&args);
    let _ = std::fs::remove_file(&cap);
    let _ = std::fs::remove_file(&ct);
    r
}

/// A replied UDP entry whose line says it was made 60 s ago: the replay's first packet comes
/// more than 2 s after its creation, so it makes the entry ASSURED and refreshes it to
/// `nf_conntrack_udp_timeout_stream` (failed before: every loaded entry was created at the
/// replay's start, so the packet found it 0 s old: 30 s, not ASSURED). Loading is not
/// traffic: no `[NEW]` event for any loaded entry in the JSON lines.
#[test]
fn replay_ages_loaded_entries_as_their_lines_say_and_emits_no_new_for_them() {
    const LISTING: &str = "\
udp      17 25 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.8 dst=10.244.2.9 sport=53 dport=40000 mark=0 delta-time=60 use=1
udp      17 20 src=10.244.2.7 dst=10.96.0.10 sport=41000 dport=53 src=10.244.1.8 dst=10.244.2.7 sport=53 dport=41000 mark=0 delta-time=1 use=1
";
    let packets = [
        (0, "udp 10.244.2.9:40000 -> 10.96.0.10:53"),
        (0, "udp 10.244.2.7:41000 -> 10.96.0.10:53"),
    ];
    let (ok, out, err) = replay_from(LISTING, &packets, &[]);
    assert!(ok, "{err}");
    assert!(
        out.contains("udp      17 120 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.8 dst=10.244.2.9 sport=53 dport=40000 [ASSURED] mark=0 delta-time=60 use=1"),
        "{out}"
    );
    // 1 s old: not yet past the 2 s, refreshed to nf_conntrack_udp_timeout.
    assert!(
        out.contains("udp      17 30 src=10.244.2.7 dst=10.96.0.10 sport=41000 dport=53 src=10.244.1.8 dst=10.244.2.7 sport=53 dport=41000 mark=0 delta-time=1 use=1"),
        "{out}"
    );
    let (ok, json, err) = replay_from(LISTING, &packets, &["--json", "-"]);
    assert!(ok, "{err}");
    let events: Vec<serde_json::Value> = json
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .filter(|v| v["kind"] == "conntrack")
        .collect();
    assert!(!events.is_empty(), "{json}");
    assert!(events.iter().all(|e| e["event"] != "NEW"), "{json}");
    assert!(
        events
            .iter()
            .any(|e| e["event"] == "UPDATE" && e["line"].as_str().unwrap().contains("[ASSURED]")),
        "{json}"
    );
}

/// `--after`: the capture's first packet comes that long after the listing was taken, so
/// an entry with fewer seconds left is gone and a new one is made through the rules; with
/// `--conntrack-age`, an entry whose line prints no age is that old.
#[test]
fn replay_after_the_listing_and_with_an_assumed_age() {
    const LISTING: &str = "udp      17 25 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.8 dst=10.244.2.9 sport=53 dport=40000 mark=0 use=1\n";
    let packets = [(0, "udp 10.244.2.9:40000 -> 10.96.0.10:53")];
    let (ok, out, err) = replay_from(
        LISTING,
        &packets,
        &["--after", "10s", "--conntrack-at", "0s"],
    );
    assert!(ok, "{err}");
    assert!(
        out.contains("packets arrive 10s after the saved state was read"),
        "{out}"
    );
    assert!(
        out.contains("transmitted on cni0: udp 10.244.2.9:40000 -> 10.244.1.8:53"),
        "{out}"
    );
    let (ok, out, err) = replay_from(LISTING, &packets, &["--after", "30s"]);
    assert!(ok, "{err}");
    assert!(
        !out.contains("-> 10.244.1.8:53"),
        "the expired entry was used:\n{out}"
    );
    // Assumed 1 s old: the packet comes within 2 s of its creation.
    let (ok, out, err) = replay_from(LISTING, &packets, &["--conntrack-age", "1s"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("udp      17 30 src=10.244.2.9 dst=10.96.0.10 sport=40000"),
        "{out}"
    );
    assert!(!out.contains("[ASSURED]"), "{out}");
    let (ok, _, err) = replay_rules(&["--after", "1s", "x.pcap"]);
    assert!(
        !ok && err.contains("--after needs --conntrack or --recent"),
        "{err}"
    );
}

/// `replay --recent NAME=FILE` as `trace` has it: a real node's ClientIP affinity list pins
/// the client to its recorded endpoint (failed before: no such flag).
#[test]
fn replay_takes_a_saved_xt_recent_list() {
    let cap = tmp("recent.pcap");
    write_raw(&cap, &[(0, "udp 10.244.2.9:40000 -> 10.96.0.10:53")]);
    let run = |extra: &[&str]| {
        let mut args = vec![
            "replay",
            "--rules",
            "tests/fixtures/cli/affinity.save",
            "--node-addr",
            "192.168.0.12",
            "--pod-cidr",
            "10.244.2.0/24",
            "--recent",
            "KUBE-SEP-5SZA7C4MJLLQPPFI=tests/fixtures/cli/xt_recent.KUBE-SEP-5SZA7C4MJLLQPPFI",
            "--recent-jiffies",
            "4299406173",
            cap.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        nfsim(&args)
    };
    let (ok, out, err) = run(&[]);
    assert!(ok, "{err}");
    assert!(
        out.contains("recent list KUBE-SEP-5SZA7C4MJLLQPPFI from"),
        "{out}"
    );
    assert!(
        out.contains("udp 10.244.2.9:40000 -> 10.244.1.6:53"),
        "{out}"
    );
    // Three hours after the list was read its stamp (65 s old then) is past the affinity's
    // 10800 s: the rules choose (seed 1: 10.244.2.5).
    let (ok, out, err) = run(&["--after", "3h"]);
    assert!(ok, "{err}");
    assert!(
        out.contains("udp 10.244.2.9:40000 -> 10.244.2.5:53"),
        "{out}"
    );
    let _ = std::fs::remove_file(&cap);
}

/// `--sysctls FILE` takes a real node's whole `sysctl -a`: the modelled ones applied, one
/// warning per netfilter sysctl not modelled; `--sysctl` of a kernel sysctl nfsim does not
/// model is a warning too, an unknown one an error (failed before: no --sysctls, and
/// `--sysctl nf_conntrack_acct=1` was refused as unknown).
#[test]
fn replay_takes_a_real_nodes_sysctl_file_whole() {
    let cap = tmp("sysctls.pcap");
    write_raw(&cap, &[(0, "udp 10.244.2.9:40000 -> 10.96.0.10:53")]);
    let file = tmp("sysctls.txt");
    let text =
        std::fs::read_to_string(Path::new(ROOT).join("tests/fixtures/sysctl/netfilter-6.18.txt"))
            .unwrap()
            .replace(
                "nf_conntrack_udp_timeout = 30",
                "nf_conntrack_udp_timeout = 47",
            );
    std::fs::write(&file, text).unwrap();
    let (ok, out, err) = replay_pods(&[
        "--sysctls",
        file.to_str().unwrap(),
        "--sysctl",
        "nf_conntrack_acct=1",
        cap.to_str().unwrap(),
    ]);
    assert!(ok, "{err}");
    assert!(out.contains("udp      17 47 src=10.244.2.9"), "{out}");
    assert_eq!(
        err.matches("nf_conntrack_checksum: not modelled").count(),
        1,
        "{err}"
    );
    assert!(
        err.contains("warning: --sysctl net.netfilter.nf_conntrack_acct: not modelled"),
        "{err}"
    );
    assert!(!err.contains("nf_log"), "{err}");
    let (ok, _, err) = replay_rules(&["--sysctl", "nf_conntrack_bogus=1", cap.to_str().unwrap()]);
    assert!(!ok && err.contains("unknown sysctl"), "{err}");
    let _ = std::fs::remove_file(&cap);
    let _ = std::fs::remove_file(&file);
}
