//! nfsim's glibc resolver against the real one: `getent ahosts NAME` (glibc's `getaddrinfo`
//! with AF_UNSPEC) in a private network and mount namespace, with our own `resolv.conf` and a
//! tiny DNS server (`support/dns_responder.py`) on 127.0.0.53, captured with `tshark`; the
//! queries it sends (transport, name, type, which socket, EDNS0 size, when) are compared with
//! those of `nfsim::cluster::dns::Resolver` for the same `resolv.conf` and zone.
//!
//! Skips with a message without root, `unshare`, `python3`, `tshark`, `getent`, `mount`,
//! `ip`, or where the C library is not glibc.
//!
//! musl the same way where `musl-gcc` is installed (Debian's `musl-tools`): a small program
//! linked statically against it calls `getaddrinfo(NAME, AF_UNSPEC)`, and its queries are
//! compared with nfsim's musl resolver of the release installed (`ld-musl`'s version: from
//! 1.2.4 a truncated answer is asked again over TCP).

#[path = "support/tools.rs"]
mod tools;

use nfsim::cluster::dns::drive::ZoneDriver;
use nfsim::cluster::dns::zone::{counted_a, counted_aaaa};
use nfsim::cluster::dns::{DnsNames, Libc, QType, ResolvConf, Zone, ZoneEntry};
use std::collections::BTreeMap;
use std::process::Command;

const RESPONDER: &str = include_str!("support/dns_responder.py");
/// The zone both servers answer from: name, A records, AAAA records.
const ZONE: &[(&str, u32, u32)] = &[
    ("payment.shop", 1, 1),
    // 17 AAAA records: 12 + 31 + 4 + 17 × 28 = 523 octets, truncated over UDP.
    ("big.default.svc.cluster.local", 1, 17),
    ("v4only.default.svc.cluster.local", 0, 0),
];
const SEARCH: &str = "search default.svc.cluster.local svc.cluster.local cluster.local\n";

/// One query as the comparison sees it: transport, name, type, the socket's number in order
/// of first use, the EDNS0 size, and the second it left in (from the lookup's first query).
type Seen = (bool, String, u16, usize, Option<u16>, u64);

fn is_glibc() -> bool {
    Command::new("ldd")
        .arg("--version")
        .output()
        .map(|o| {
            let t = String::from_utf8_lossy(&o.stdout).to_lowercase();
            t.contains("glibc") || t.contains("gnu libc")
        })
        .unwrap_or(false)
}

/// Socket keys numbered in order of first appearance.
fn numbered<K: Ord + Clone>(keys: &[K]) -> Vec<usize> {
    let mut seen = BTreeMap::new();
    keys.iter()
        .map(|k| {
            let n = seen.len();
            *seen.entry(k.clone()).or_insert(n)
        })
        .collect()
}

/// The real lookup's queries: `lookup NAME` (`getent ahosts`, or the musl program) in the lab.
fn real(dir: &std::path::Path, conf: &str, name: &str, lookup: &str) -> Vec<Seen> {
    std::fs::write(dir.join("resolv.conf"), conf).unwrap();
    std::fs::write(dir.join("hosts"), "127.0.0.1 localhost\n").unwrap();
    std::fs::write(dir.join("nsswitch.conf"), "hosts: files dns\n").unwrap();
    std::fs::write(dir.join("responder.py"), RESPONDER).unwrap();
    let zone: Vec<String> = ZONE
        .iter()
        .map(|(n, a, b)| format!("{n}={a},{b}"))
        .collect();
    let d = dir.display();
    let script = format!(
        r#"set -e
ip link set lo up
iptables -A INPUT -d 127.0.0.55 -j DROP
mount --bind {d}/resolv.conf /etc/resolv.conf
mount --bind {d}/hosts /etc/hosts
mount --bind {d}/nsswitch.conf /etc/nsswitch.conf
python3 {d}/responder.py 127.0.0.53 {d}/ready {zone} > /dev/null 2>&1 &
P=$!
tshark -n -i lo -w {d}/cap.pcap -f "port 53" > /dev/null 2> {d}/tshark.err &
T=$!
for i in $(seq 100); do
  [ -f {d}/ready ] && grep -q Capturing {d}/tshark.err && break
  sleep 0.05
done
sleep 0.2
{lookup} {name} > {d}/getent.out || true
sleep 0.3
kill $T
wait $T || true
kill $P || true
wait $P || true
"#,
        zone = zone.join(" ")
    );
    let out = Command::new("unshare")
        .args(["-n", "-m", "sh", "-c", &script])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "the lab script failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fields = Command::new("tshark")
        .args(["-n", "-r"])
        .arg(dir.join("cap.pcap"))
        .args(["-Y", "dns.flags.response == 0", "-T", "fields"])
        .args(["-e", "frame.time_relative", "-e", "ip.proto"])
        .args(["-e", "udp.srcport", "-e", "tcp.srcport"])
        .args(["-e", "dns.qry.name", "-e", "dns.qry.type"])
        .args(["-e", "dns.rr.udp_payload_size"])
        .output()
        .unwrap();
    let text = String::from_utf8(fields.stdout).unwrap();
    let mut rows = Vec::new();
    let mut t0 = None;
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        let at: f64 = f[0].parse().unwrap();
        let t0 = *t0.get_or_insert(at);
        let tcp = f[1] == "6";
        let port = if tcp { f[3] } else { f[2] };
        let edns = f.get(6).and_then(|s| s.split(',').next()?.parse().ok());
        // A TCP segment may carry both queries.
        for (n, t) in f[4].split(',').zip(f[5].split(',')) {
            rows.push((
                tcp,
                port.to_string(),
                n.to_string(),
                t.parse::<u16>().unwrap(),
                edns,
                ((at - t0) + 0.25) as u64,
            ));
        }
    }
    let keys: Vec<(bool, String)> = rows.iter().map(|r| (r.0, r.1.clone())).collect();
    rows.into_iter()
        .zip(numbered(&keys))
        .map(|(r, sock)| (r.0, r.2, r.3, sock, r.4, r.5))
        .collect()
}

/// nfsim's resolver's queries for the same `resolv.conf` and zone.
fn modelled(libc: Libc, conf: &str, name: &str) -> Vec<Seen> {
    let conf = ResolvConf::parse(conf, libc).unwrap();
    let mut names = DnsNames::new();
    let mut zone = Zone::new();
    for (n, a, b) in ZONE {
        let id = names.intern(n).unwrap();
        zone.insert(
            id,
            ZoneEntry {
                a: (0..*a).map(counted_a).collect(),
                aaaa: (0..*b).map(counted_aaaa).collect(),
            },
        );
    }
    let up = conf
        .nameservers
        .iter()
        .map(|ns| ns.to_string() == "127.0.0.53")
        .collect();
    // 127.0.0.54 has nothing listening (the host refuses); 127.0.0.55 is dropped.
    let refuses = conf
        .nameservers
        .iter()
        .map(|ns| ns.to_string() == "127.0.0.54")
        .collect();
    let mut d = ZoneDriver::new(libc, conf, names, zone);
    d.up = up;
    d.refuses = refuses;
    d.lookup(name).unwrap();
    let keys: Vec<(bool, u32)> = d.sent.iter().map(|s| (s.tcp, s.socket)).collect();
    d.sent
        .iter()
        .zip(numbered(&keys))
        .map(|(s, sock)| {
            let t = if s.qtype == QType::A { 1 } else { 28 };
            (
                s.tcp,
                s.name.clone(),
                t,
                sock,
                s.edns_udp_size,
                (s.at_ms + 250) / 1000,
            )
        })
        .collect()
}

#[test]
fn nfsim_glibc_resolver_sends_what_real_glibc_sends() {
    if !tools::have_or_skip(
        "nfsim_glibc_resolver_sends_what_real_glibc_sends",
        &[
            "python3", "tshark", "getent", "mount", "ip", "ldd", "iptables",
        ],
    ) {
        return;
    }
    if !is_glibc() {
        tools::skips::report(
            "nfsim_glibc_resolver_sends_what_real_glibc_sends",
            "the C library is not glibc",
        );
        return;
    }
    let kube = format!("{SEARCH}nameserver 127.0.0.53\noptions ndots:5\n");
    let cases = [
        // The search list walked: NXDOMAIN three times, then the name; A and AAAA back to
        // back from one socket, a new socket per name.
        (kube.clone(), "payment.shop"),
        // NODATA for the first name does not end glibc's search.
        (kube.clone(), "v4only"),
        // A truncated AAAA answer: both queries again over one TCP connection.
        (kube.clone(), "big"),
        // EDNS0 (an OPT record of 1200 octets) and a new socket for AAAA.
        (
            format!("{SEARCH}nameserver 127.0.0.53\noptions ndots:5 edns0 single-request-reopen\n"),
            "payment.shop",
        ),
        // A silent first nameserver: its wait, then the second one.
        (
            "nameserver 127.0.0.54\nnameserver 127.0.0.53\noptions timeout:1 attempts:1\n"
                .to_string(),
            "payment.shop.",
        ),
    ];
    for (i, (conf, name)) in cases.iter().enumerate() {
        let dir =
            std::env::temp_dir().join(format!("nfsim-resolver-lab-{}-{i}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let got = real(&dir, conf, name, "getent ahosts");
        let want = modelled(Libc::Glibc, conf, name);
        assert_eq!(
            got, want,
            "case {i} ({name} with {conf:?}): real glibc (left) and nfsim (right) differ"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }
}

/// `getaddrinfo(argv[1], AF_UNSPEC)` and nothing else, for linking against musl.
const GAI_C: &str = r#"#include <netdb.h>
#include <string.h>
int main(int argc, char **argv) {
    struct addrinfo hints, *res = 0;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    return argc > 1 && getaddrinfo(argv[1], 0, &hints, &res) == 0 ? 0 : 1;
}
"#;

/// The installed musl's release, from its dynamic loader's banner (`Version 1.2.3`).
fn musl_version() -> Option<(u32, u32, u32)> {
    let out = Command::new("/lib/ld-musl-x86_64.so.1").output().ok()?;
    let text =
        String::from_utf8_lossy(&out.stderr).to_string() + &String::from_utf8_lossy(&out.stdout);
    let v = text.lines().find_map(|l| l.strip_prefix("Version "))?;
    let p: Vec<u32> = v.trim().split('.').filter_map(|x| x.parse().ok()).collect();
    Some((*p.first()?, *p.get(1)?, p.get(2).copied().unwrap_or(0)))
}

#[test]
fn nfsim_musl_resolver_sends_what_real_musl_sends() {
    const TEST: &str = "nfsim_musl_resolver_sends_what_real_musl_sends";
    if !tools::have_or_skip(
        TEST,
        &["python3", "tshark", "mount", "ip", "iptables", "musl-gcc"],
    ) {
        return;
    }
    let Some(version) = musl_version() else {
        tools::skips::report(TEST, "no /lib/ld-musl-x86_64.so.1 to tell musl's version");
        return;
    };
    let dir = std::env::temp_dir().join(format!("nfsim-resolver-lab-musl-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("gai.c"), GAI_C).unwrap();
    let cc = Command::new("musl-gcc")
        .args(["-static", "-O1", "-o"])
        .arg(dir.join("gai"))
        .arg(dir.join("gai.c"))
        .output()
        .unwrap();
    assert!(
        cc.status.success(),
        "musl-gcc: {}",
        String::from_utf8_lossy(&cc.stderr)
    );
    let libc = Libc::Musl {
        tcp_fallback: version >= (1, 2, 4),
    };
    let kube = format!("{SEARCH}nameserver 127.0.0.53\noptions ndots:5\n");
    let cases = [
        // The search list walked: one socket per name, A and AAAA at once.
        (kube.clone(), "payment.shop"),
        // NODATA for the first name ends musl's search (EAI_NODATA), unlike glibc's.
        (kube.clone(), "v4only"),
        // A truncated AAAA answer: kept as it came before 1.2.4, asked again over TCP after.
        (kube.clone(), "big"),
        // Two nameservers: each query to both at once.
        (
            "nameserver 127.0.0.54\nnameserver 127.0.0.53\noptions timeout:1 attempts:1\n"
                .to_string(),
            "payment.shop.",
        ),
    ];
    let program = dir.join("gai").display().to_string();
    for (i, (conf, name)) in cases.iter().enumerate() {
        let case = dir.join(i.to_string());
        std::fs::create_dir_all(&case).unwrap();
        let got = real(&case, conf, name, &program);
        let want = modelled(libc, conf, name);
        assert!(!got.is_empty(), "case {i}: no query captured");
        assert_eq!(
            got, want,
            "case {i} ({name} with {conf:?}, musl {version:?}): real musl (left) and nfsim (right) differ"
        );
    }
    let _ = std::fs::remove_dir_all(&dir);
}
