//! `nfsim run scenarios/resolver-ndots.yaml --pcap DIR`: a resolver's queries and its DNS
//! server's answers are the real DNS messages in the capture (names, QTYPE, NXDOMAIN, TC),
//! and the retry over TCP is TCP segments with the two-octet length. Read back with our
//! own parser always, and with tshark where installed (else skipped with a message).

#[path = "support/cli.rs"]
mod cli;
#[path = "support/tools.rs"]
mod tools;

use etherparse::{SlicedPacket, TransportSlice};
use nfsim::cluster::dns::wire::parse;
use std::path::{Path, PathBuf};

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nfsim-resolver-pcap-{}-{name}", std::process::id()))
}

/// The frames of a little-endian pcap file of Ethernet frames.
fn frames(path: &Path) -> Vec<Vec<u8>> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Vec::new();
    let mut at = 24;
    while at + 16 <= b.len() {
        let incl = u32::from_le_bytes(b[at + 8..at + 12].try_into().unwrap()) as usize;
        out.push(b[at + 16..at + 16 + incl].to_vec());
        at += 16 + incl;
    }
    out
}

/// (transport, DNS payload) of each frame carrying one: UDP port 53 datagrams, and TCP
/// segments to or from port 53 with data (their two-octet length checked and removed).
fn dns_messages(path: &Path) -> Vec<(&'static str, Vec<u8>)> {
    let mut out = Vec::new();
    for f in frames(path) {
        let p = SlicedPacket::from_ethernet(&f).unwrap();
        match p.transport {
            Some(TransportSlice::Udp(u)) if u.source_port() == 53 || u.destination_port() == 53 => {
                out.push(("udp", u.payload().to_vec()));
            }
            Some(TransportSlice::Tcp(t))
                if (t.source_port() == 53 || t.destination_port() == 53)
                    && !t.payload().is_empty() =>
            {
                let d = t.payload();
                let len = usize::from(u16::from_be_bytes([d[0], d[1]]));
                assert_eq!(
                    len + 2,
                    d.len(),
                    "one message per segment, after its length"
                );
                out.push(("tcp", d[2..].to_vec()));
            }
            _ => {}
        }
    }
    out
}

/// Runs `scenario` to 8 s with `--pcap` into a fresh `DIR` and returns the debian pod's
/// veth capture.
fn debian_capture(scenario: &str, dir: &Path) -> PathBuf {
    let _ = std::fs::remove_dir_all(dir);
    let (code, out, err) = cli::nfsim(&[
        "run",
        scenario,
        "--until",
        "8s",
        "--pcap",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.to_string_lossy().contains("veth-debian"))
        .unwrap_or_else(|| panic!("no debian veth capture in {}", dir.display()))
}

#[test]
fn captures_hold_the_real_dns_messages_and_the_tcp_retry() {
    let dir = tmp("run");
    let veth = debian_capture("scenarios/resolver-ndots.yaml", &dir);
    let msgs = dns_messages(&veth);
    let parsed: Vec<_> = msgs
        .iter()
        .map(|(t, m)| {
            (
                *t,
                parse(m).unwrap_or_else(|| panic!("not a DNS message: {m:?}")),
            )
        })
        .collect();
    // Lookup 0: each search name's A and AAAA, their NXDOMAIN answers, then payment.shop.
    let queries: Vec<String> = parsed
        .iter()
        .filter(|(_, p)| !p.response)
        .map(|(t, p)| format!("{t} {} {}", p.question.1, p.question.0))
        .collect();
    assert_eq!(
        &queries[..8],
        [
            "udp 1 payment.shop.default.svc.cluster.local",
            "udp 28 payment.shop.default.svc.cluster.local",
            "udp 1 payment.shop.svc.cluster.local",
            "udp 28 payment.shop.svc.cluster.local",
            "udp 1 payment.shop.cluster.local",
            "udp 28 payment.shop.cluster.local",
            "udp 1 payment.shop",
            "udp 28 payment.shop",
        ]
    );
    let nx = parsed
        .iter()
        .filter(|(_, p)| p.response && p.rcode == 3)
        .count();
    assert_eq!(nx, 12, "three NXDOMAIN pairs per lookup of lookup 0 and 1");
    // Every answer shares its query's ID.
    for (_, a) in parsed.iter().filter(|(_, p)| p.response) {
        assert!(
            parsed
                .iter()
                .any(|(_, q)| !q.response && q.id == a.id && q.question == a.question),
            "{a:?}"
        );
    }
    // big.example: truncated over UDP (30 of 40 records, TC), whole over TCP.
    let big: Vec<(&str, bool, u16)> = parsed
        .iter()
        .filter(|(_, p)| p.response && p.question == ("big.example".into(), 1))
        .map(|(t, p)| (*t, p.truncated, p.answers))
        .collect();
    assert_eq!(big, [("udp", true, 30), ("tcp", false, 40)]);
    let tcp_queries = queries.iter().filter(|q| q.starts_with("tcp ")).count();
    assert_eq!(
        tcp_queries, 2,
        "glibc asks A and AAAA again over TCP: {queries:?}"
    );

    if tools::have_programs_or_skip("resolver_pcap::tshark", &["tshark"]) {
        let lines = tools::tshark_matching(&veth, "dns");
        assert!(
            !lines.contains("Malformed") && !lines.to_lowercase().contains("bad checksum"),
            "{lines}"
        );
        assert!(
            lines.contains("No such name A payment.shop.default.svc.cluster.local"),
            "{lines}"
        );
        assert!(lines.contains("big.example"), "{lines}");
        let tcp = tools::tshark_matching(&veth, "tcp && dns && dns.flags.response == 1");
        assert_eq!(tcp.lines().count(), 2, "the two answers over TCP: {tcp}");
        let tc = tools::tshark_matching(&veth, "dns.flags.truncated == 1");
        assert_eq!(tc.lines().count(), 1, "{tc}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn glibc_edns0_queries_carry_the_opt_record_and_big_answers_fit() {
    // The shipped scenario with `options edns0` on glibc's resolv.conf: each query carries
    // an OPT record of 1200 octets (glibc's RESOLV_EDNS_BUFFER_SIZE), each answer CoreDNS's
    // OPT, and big.example's 40 records fit one datagram (no TC, no TCP).
    // Without its expectations: big.example no longer goes over TCP.
    let mut text = std::fs::read_to_string("scenarios/resolver-ndots.yaml").unwrap();
    text.truncate(text.find("expectations:").unwrap());
    // The musl client's resolv.conf file, found from the temporary directory.
    let conf = std::env::current_dir()
        .unwrap()
        .join("scenarios/resolver-ndots/resolv.conf");
    let text = text.replace(
        "resolvConfFile: resolver-ndots/resolv.conf",
        &format!("resolvConfFile: {}", conf.display()),
    );
    let at = text.find("options ndots:5\n").unwrap();
    let text = format!(
        "{}options ndots:5 edns0\n{}",
        &text[..at],
        &text[at + "options ndots:5\n".len()..]
    );
    let dir = tmp("edns0");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("edns0.yaml");
    std::fs::write(&file, text).unwrap();
    let veth = debian_capture(file.to_str().unwrap(), &dir.join("pcap"));
    let parsed: Vec<_> = dns_messages(&veth)
        .into_iter()
        .map(|(t, m)| (t, parse(&m).unwrap()))
        .collect();
    assert!(!parsed.is_empty());
    for (t, p) in &parsed {
        assert_eq!(*t, "udp", "{p:?}");
        if p.response {
            assert!(p.edns_udp_size.is_some(), "{p:?}");
        } else {
            assert_eq!(p.edns_udp_size, Some(1200), "{p:?}");
        }
    }
    let big: Vec<(bool, u16)> = parsed
        .iter()
        .filter(|(_, p)| p.response && p.question == ("big.example".into(), 1))
        .map(|(_, p)| (p.truncated, p.answers))
        .collect();
    assert_eq!(big, [(false, 40)]);
    if tools::have_programs_or_skip("resolver_pcap::tshark", &["tshark"]) {
        let opt = tools::tshark_matching(
            &veth,
            "dns.flags.response == 0 && dns.rr.udp_payload_size == 1200",
        );
        let queries = tools::tshark_matching(&veth, "dns.flags.response == 0");
        assert_eq!(opt.lines().count(), queries.lines().count(), "{queries}");
        assert!(!opt.is_empty());
        assert!(!opt.contains("Malformed"), "{opt}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}
