//! `nfsim run --pcap DIR`: the shipped incident, captured on every node's eth0 and pod veth.
//!
//! The sidecar's veth shows its DNS queries to kube-dns's ClusterIP; node-2's eth0 shows the
//! same queries (same DNS IDs) DNAT'd to the dead coredns-a and its kernel's ICMP port
//! unreachable coming back, quoting the query as it reached the pod; on the veth the error
//! comes from the ClusterIP and quotes the query as the sidecar sent it. Frames are read
//! with etherparse; tshark (where installed, else skipped with a message) reads every file
//! with checksum validation on and reports no error. The same seed gives the same bytes.

#[path = "support/cli.rs"]
mod cli;
#[path = "support/tools.rs"]
mod tools;

use etherparse::{NetSlice, SlicedPacket, TransportSlice};
use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::path::{Path, PathBuf};

const KILL_S: u64 = 300;

fn run_into(dir: &Path, seed: &str) {
    let _ = std::fs::remove_dir_all(dir);
    let (code, out, err) = cli::nfsim(&[
        "run",
        "scenarios/stale-dns-udp.yaml",
        "--until",
        "7m",
        "--seed",
        seed,
        "--pcap",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nfsim-capture-{}-{name}", std::process::id()))
}

/// The records of a nanosecond pcap file of Ethernet frames: (time in ns, frame).
fn records(path: &Path) -> Vec<(u64, Vec<u8>)> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let nanos = b[0..4] == 0xa1b2_3c4du32.to_le_bytes();
    assert!(
        nanos || b[0..4] == 0xa1b2_c3d4u32.to_le_bytes(),
        "a little-endian pcap"
    );
    assert_eq!(
        u32::from_le_bytes(b[20..24].try_into().unwrap()),
        1,
        "Ethernet"
    );
    let mut out = Vec::new();
    let mut at = 24;
    while at < b.len() {
        let u = |o: usize| u32::from_le_bytes(b[at + o..at + o + 4].try_into().unwrap());
        let frac = if nanos { 1 } else { 1000 };
        let t = u64::from(u(0)) * 1_000_000_000 + u64::from(u(4)) * frac;
        let (incl, orig) = (u(8) as usize, u(12) as usize);
        assert_eq!(incl, orig);
        out.push((t, b[at + 16..at + 16 + incl].to_vec()));
        at += 16 + incl;
    }
    assert_eq!(at, b.len(), "{}: no trailing bytes", path.display());
    out
}

/// What the test looks at in one frame.
#[derive(Debug)]
enum Seen {
    /// A DNS query or answer: source, destination (address, port), DNS ID, is an answer.
    Dns {
        src: (Ipv4Addr, u16),
        dst: (Ipv4Addr, u16),
        id: u16,
        answer: bool,
        name: String,
    },
    /// ICMP port unreachable from `src`, quoting a UDP datagram to `quoted_dst` with DNS ID
    /// `quoted_id`.
    PortUnreachable {
        src: Ipv4Addr,
        dst: Ipv4Addr,
        quoted_dst: (Ipv4Addr, u16),
        quoted_id: u16,
    },
    Other,
}

fn qname(dns: &[u8]) -> String {
    let mut at = 12;
    let mut labels = Vec::new();
    while dns[at] != 0 {
        let n = dns[at] as usize;
        labels.push(String::from_utf8(dns[at + 1..at + 1 + n].to_vec()).unwrap());
        at += 1 + n;
    }
    labels.join(".")
}

fn look(frame: &[u8]) -> Seen {
    let p = SlicedPacket::from_ethernet(frame).expect("a valid Ethernet frame");
    let Some(NetSlice::Ipv4(ip)) = &p.net else {
        return Seen::Other;
    };
    let (src, dst) = (ip.header().source_addr(), ip.header().destination_addr());
    match &p.transport {
        Some(TransportSlice::Udp(u)) => {
            let dns = u.payload();
            assert!(dns.len() >= 12, "a DNS message");
            Seen::Dns {
                src: (src, u.source_port()),
                dst: (dst, u.destination_port()),
                id: u16::from_be_bytes([dns[0], dns[1]]),
                answer: dns[2] & 0x80 != 0,
                name: qname(dns),
            }
        }
        Some(TransportSlice::Icmpv4(i)) if i.type_u8() == 3 && i.code_u8() == 3 => {
            // The quote: the whole datagram, IP header first.
            let q = SlicedPacket::from_ip(i.payload()).expect("a quoted IPv4 packet");
            let Some(NetSlice::Ipv4(qip)) = &q.net else {
                panic!("an IPv4 quote");
            };
            let Some(TransportSlice::Udp(qu)) = &q.transport else {
                panic!("a quoted UDP datagram");
            };
            let dns = qu.payload();
            Seen::PortUnreachable {
                src,
                dst,
                quoted_dst: (qip.header().destination_addr(), qu.destination_port()),
                quoted_id: u16::from_be_bytes([dns[0], dns[1]]),
            }
        }
        _ => Seen::Other,
    }
}

fn ip(s: &str) -> Ipv4Addr {
    s.parse().unwrap()
}

#[test]
fn the_incident_on_the_sidecars_veth_and_node_2s_eth0() {
    let dir = tmp("incident");
    run_into(&dir, "1");
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    files.sort();
    assert_eq!(
        files,
        [
            "node-1-eth0.pcap",
            "node-1-veth-coredns-a.pcap",
            "node-2-eth0.pcap",
            "node-2-veth-app.pcap",
            "node-2-veth-coredns-b.pcap"
        ]
    );
    let sidecar = ip("10.244.2.9");
    let (cluster_ip, dead) = (ip("10.96.0.10"), ip("10.244.1.5"));

    // The sidecar's veth: queries to the ClusterIP; after the kill, port unreachable from
    // the ClusterIP quoting the query as sent.
    let veth = records(&dir.join("node-2-veth-app.pcap"));
    let mut veth_ids_after = BTreeSet::new();
    let mut veth_errors = 0;
    for (t, f) in &veth {
        match look(f) {
            Seen::Dns {
                src,
                dst,
                id,
                answer: false,
                name,
            } => {
                assert_eq!((src, dst), ((sidecar, 40000), (cluster_ip, 53)), "at {t}");
                assert_eq!(name, "kube-dns.kube-system.svc.cluster.local");
                if *t >= KILL_S * 1_000_000_000 {
                    veth_ids_after.insert(id);
                }
            }
            Seen::Dns {
                src, answer: true, ..
            } => {
                assert_eq!(src, (cluster_ip, 53));
                assert!(*t < KILL_S * 1_000_000_000, "no answer after the kill");
            }
            Seen::PortUnreachable {
                src,
                dst,
                quoted_dst,
                quoted_id,
            } => {
                assert_eq!(
                    (src, dst, quoted_dst),
                    (cluster_ip, sidecar, (cluster_ip, 53))
                );
                assert!(veth_ids_after.contains(&quoted_id));
                veth_errors += 1;
            }
            Seen::Other => panic!("unexpected frame at {t} on the sidecar's veth"),
        }
    }
    // 5:00, 5:30, 6:00, 6:30, 7:00; the last one's error is after --until... or not: count
    // what the run saw.
    assert!(veth_ids_after.len() >= 4, "{veth_ids_after:?}");
    assert!(veth_errors >= 4);

    // node-2's eth0: the same queries (same IDs) to the dead pod, port unreachable from it.
    let eth0 = records(&dir.join("node-2-eth0.pcap"));
    let mut eth0_ids_after = BTreeSet::new();
    let mut eth0_errors = BTreeSet::new();
    for (t, f) in &eth0 {
        match look(f) {
            Seen::Dns {
                src,
                dst,
                id,
                answer: false,
                ..
            } if *t >= KILL_S * 1_000_000_000 => {
                assert_eq!((src, dst), ((sidecar, 40000), (dead, 53)), "at {t}");
                eth0_ids_after.insert(id);
            }
            Seen::PortUnreachable {
                src,
                dst,
                quoted_dst,
                quoted_id,
            } => {
                assert_eq!((src, dst, quoted_dst), (dead, sidecar, (dead, 53)));
                eth0_errors.insert(quoted_id);
            }
            _ => {}
        }
    }
    assert_eq!(eth0_ids_after, veth_ids_after, "the same queries on both");
    assert_eq!(eth0_errors.len(), veth_errors);
    assert!(eth0_errors.is_subset(&eth0_ids_after));
    // The healthy pod's veth sees nothing of the sidecar.
    assert!(records(&dir.join("node-2-veth-coredns-b.pcap")).is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn the_same_seed_gives_the_same_bytes() {
    let (a, b, c) = (tmp("seed-a"), tmp("seed-b"), tmp("seed-c"));
    run_into(&a, "7");
    run_into(&b, "7");
    run_into(&c, "8");
    let mut differs = false;
    for e in std::fs::read_dir(&a).unwrap() {
        let name = e.unwrap().file_name();
        let x = std::fs::read(a.join(&name)).unwrap();
        assert_eq!(x, std::fs::read(b.join(&name)).unwrap(), "{name:?}");
        differs |= std::fs::read(c.join(&name)).ok() != Some(x);
    }
    assert!(differs, "another seed gives other bytes (DNS IDs at least)");
    for d in [a, b, c] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn tshark_reads_every_capture_with_checksums_validated() {
    let test = "tshark_reads_every_capture_with_checksums_validated";
    if !tools::have_programs_or_skip(test, &["tshark"]) {
        return;
    }
    let dir = tmp("tshark");
    run_into(&dir, "1");
    for e in std::fs::read_dir(&dir).unwrap() {
        let path = e.unwrap().path();
        let run = |filter: &str| tools::tshark_matching(&path, filter);
        let name = path.display();
        // Errors, bad checksums, and UDP the DNS dissector did not read.
        let bad = run("ip.checksum.status == \"Bad\" || udp.checksum.status == \"Bad\" || tcp.checksum.status == \"Bad\" || icmp.checksum.status == \"Bad\" || _ws.malformed || _ws.expert.severity == \"Error\" || (udp && !dns && !icmp)");
        assert_eq!(bad, "", "{name}: tshark finds errors");
        assert_eq!(run("frame").lines().count(), records(&path).len(), "{name}");
        if name.to_string().ends_with("node-2-eth0.pcap") {
            // Checksums were checked, and the quoted queries are dissected as DNS.
            let errors =
                run("icmp.type == 3 && icmp.code == 3 && ip.checksum.status == \"Good\" && udp.checksum.status == \"Good\" && dns.id");
            assert!(errors.lines().count() >= 4, "{errors}");
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_capture_replayed_as_a_pods_traffic_takes_the_nodes_path() {
    let dir = tmp("pcap-client");
    let _ = std::fs::remove_dir_all(&dir);
    let (code, out, err) = cli::nfsim(&[
        "run",
        "scenarios/pcap-client.yaml",
        "--pcap",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("pcap client captured-resolver: sending the 30 IPv4 packets of captures/app-dns-queries.pcap from pod default/app"), "{out}");
    let ids = |path: &Path, to: Ipv4Addr| -> Vec<(u64, u16)> {
        records(path)
            .iter()
            .filter_map(|(t, f)| match look(f) {
                Seen::Dns {
                    dst,
                    id,
                    answer: false,
                    ..
                } if dst.0 == to => Some((*t, id)),
                _ => None,
            })
            .collect()
    };
    let input = ids(
        Path::new("scenarios/captures/app-dns-queries.pcap"),
        ip("10.96.0.10"),
    );
    assert_eq!(input.len(), 30);
    // On the pod's veth as captured, 10 s later; on node-2's eth0 DNAT'd to coredns-a.
    let veth = ids(&dir.join("node-2-veth-app.pcap"), ip("10.96.0.10"));
    let eth0 = ids(&dir.join("node-2-eth0.pcap"), ip("10.244.1.5"));
    let first = input[0].0;
    let shifted: Vec<(u64, u16)> = input
        .iter()
        .map(|(t, id)| (t - first + 10_000_000_000, *id))
        .collect();
    assert_eq!(veth, shifted);
    assert_eq!(eth0, shifted);
    // coredns-a answers the captured question before the kill (20 s).
    let answers = records(&dir.join("node-2-veth-app.pcap"))
        .iter()
        .filter(|(_, f)| matches!(look(f), Seen::Dns { answer: true, .. }))
        .count();
    assert_eq!(answers, 10);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_bad_capture_is_an_error_at_its_line() {
    let dir = tmp("bad-capture");
    std::fs::create_dir_all(&dir).unwrap();
    let good = std::fs::read(format!(
        "{}/scenarios/captures/app-dns-queries.pcap",
        cli::ROOT
    ))
    .unwrap();
    std::fs::write(dir.join("cut.pcap"), &good[..good.len() - 10]).unwrap();
    let yaml =
        std::fs::read_to_string(format!("{}/scenarios/pcap-client.yaml", cli::ROOT)).unwrap();
    for (file, want) in [("cut.pcap", "frame 30"), ("missing.pcap", "missing.pcap")] {
        let sc = dir.join("x.yaml");
        std::fs::write(&sc, yaml.replace("captures/app-dns-queries.pcap", file)).unwrap();
        let (code, out, err) = cli::nfsim(&["run", sc.to_str().unwrap()]);
        assert_eq!(code, 2, "{out}\n{err}");
        let line = yaml
            .lines()
            .position(|l| l.contains("file: captures/app-dns-queries.pcap"))
            .unwrap()
            + 1;
        assert!(
            err.contains(&format!("x.yaml:{line}:13: cannot use the capture")),
            "{err}"
        );
        assert!(err.contains(want), "{err}");
    }
    let sc = dir.join("y.yaml");
    std::fs::write(&sc, yaml.replace("from: default/app", "from: nobody")).unwrap();
    let (code, _, err) = cli::nfsim(&["run", sc.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(err.contains("unknown pod or host \"nobody\""), "{err}");
    let _ = std::fs::remove_dir_all(&dir);
}
