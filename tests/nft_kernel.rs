//! nfsim's nftables model against the real `nft` (1.0.x) in a private network namespace:
//! the same `nft -f` text through both, and `nft list ruleset` / `nft list table` compared
//! byte for byte. Skips (passing) where `nft` or `unshare -n` is not available.

#[path = "support/kernel.rs"]
mod kernel;

use kernel::tools;

use sim_core::SimTime;
use sim_netfilter::nft::{Family, NftRuleset};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/tests/fixtures/nft/{name}")).unwrap()
}

/// `nft -f` each text in turn in one fresh namespace, then `nft <list>`.
fn real_nft(texts: &[&str], list: &str) -> Result<String, String> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("nfsim-nft-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut script = String::from("set -e\n");
    for (i, t) in texts.iter().enumerate() {
        let f = dir.join(format!("{i}.nft"));
        std::fs::write(&f, t).unwrap();
        script.push_str(&format!("nft -f {}\n", f.display()));
    }
    script.push_str(&format!("nft {list}\n"));
    let out = Command::new(tools::find("unshare").unwrap())
        .args(["-n", "sh", "-c", &script])
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8(out.stdout).unwrap())
}

fn sim(texts: &[&str]) -> NftRuleset {
    let mut rs = NftRuleset::new();
    for (i, t) in texts.iter().enumerate() {
        rs.apply(&format!("{i}.nft"), t, SimTime::ZERO)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    rs
}

fn diff(real: &str, ours: &str) {
    if real != ours {
        let rl: Vec<&str> = real.lines().collect();
        let ol: Vec<&str> = ours.lines().collect();
        for (i, (a, b)) in rl.iter().zip(&ol).enumerate() {
            if a != b {
                panic!(
                    "line {}:\n real: {a:?}\n ours: {b:?}\n\nreal:\n{real}\nours:\n{ours}",
                    i + 1
                );
            }
        }
        panic!(
            "lengths differ ({} vs {} lines)\nreal:\n{real}\nours:\n{ours}",
            rl.len(),
            ol.len()
        );
    }
}

#[test]
fn kube_proxy_base_ruleset_lists_as_nft_does() {
    if !tools::have_or_skip("kube_proxy_base_ruleset_lists_as_nft_does", &["nft"]) {
        return;
    }
    let text = fixture("kube-proxy-base.nft");
    let real = real_nft(&[&text], "list ruleset").unwrap();
    diff(&real, &sim(&[&text]).list_ruleset(SimTime::ZERO));
    let real = real_nft(&[&text], "list table ip kube-proxy").unwrap();
    let ours = sim(&[&text])
        .list_table(Family::Ip, "kube-proxy", SimTime::ZERO)
        .unwrap();
    diff(&real, &ours);
}

#[test]
fn normalized_expressions_list_as_nft_does() {
    if !tools::have_or_skip("normalized_expressions_list_as_nft_does", &["nft"]) {
        return;
    }
    let text = fixture("formats.nft");
    let real = real_nft(&[&text], "list ruleset").unwrap();
    diff(&real, &sim(&[&text]).list_ruleset(SimTime::ZERO));
}

/// IPv6 in `ip6` and `inet` tables: addresses, prefixes, intervals, concatenated elements,
/// `icmpv6 type`, `meta nfproto`, NAT targets in brackets, `reject` per family.
#[test]
fn ipv6_expressions_list_as_nft_does() {
    if !tools::have_or_skip("ipv6_expressions_list_as_nft_does", &["nft", "unshare"]) {
        return;
    }
    let text = fixture("formats6.nft");
    let real = real_nft(&[&text], "list ruleset").unwrap();
    diff(&real, &sim(&[&text]).list_ruleset(SimTime::ZERO));
}

// ---------------------------------------------------------------------------------------------
// Packets: the same `nft -f` ruleset and the same datagrams through the kernel lab and nfsim
// ---------------------------------------------------------------------------------------------

use kernel::{parse_ct_line, CtEntry, Scenario};
use sim_conntrack::Filter;
use sim_core::{Packet, L4};
use sim_netfilter::netns::{Egress, Fate, Ingress, Netns, NetnsConfig};
use std::net::SocketAddr;

/// kube-proxy's nftables ruleset (the parts a node's own traffic takes) on loopback
/// addresses: service 127.96.0.10:53/udp with one endpoint 127.0.0.2:5353; 127.96.0.21:80/udp
/// without endpoints (rejected); 127.96.0.0/16 the service CIDR (unallocated addresses
/// dropped). The "cluster CIDR" is 127.0.0.0/8, so nothing is masqueraded.
const KP_LAB: &str = "\
add table ip kube-proxy { comment \"rules for kube-proxy\" ; }
add set ip kube-proxy cluster-ips { type ipv4_addr ; comment \"Active ClusterIPs\" ; }
add map ip kube-proxy service-ips { type ipv4_addr . inet_proto . inet_service : verdict ; comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }
add map ip kube-proxy no-endpoint-services { type ipv4_addr . inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to services with no endpoints\" ; }
add chain ip kube-proxy cluster-ips-check
add chain ip kube-proxy filter-output { type filter hook output priority 0 ; }
add chain ip kube-proxy mark-for-masquerade
add chain ip kube-proxy masquerading
add chain ip kube-proxy nat-output { type nat hook output priority -100 ; }
add chain ip kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip kube-proxy reject-chain { comment \"helper for @no-endpoint-services / @no-endpoint-nodeports\" ; }
add chain ip kube-proxy services
add chain ip kube-proxy service-endpoints-check
add rule ip kube-proxy cluster-ips-check ip daddr @cluster-ips counter reject comment \"Reject traffic to invalid ports of ClusterIPs\"
add rule ip kube-proxy cluster-ips-check ip daddr { 127.96.0.0/16 } counter drop comment \"Drop traffic to unallocated ClusterIPs\"
add rule ip kube-proxy filter-output ct state new jump service-endpoints-check
add rule ip kube-proxy filter-output ct state new jump cluster-ips-check
add rule ip kube-proxy mark-for-masquerade mark set mark or 0x4000
add rule ip kube-proxy masquerading mark and 0x4000 == 0 return
add rule ip kube-proxy masquerading mark set mark xor 0x4000
add rule ip kube-proxy masquerading masquerade fully-random
add rule ip kube-proxy nat-output jump services
add rule ip kube-proxy nat-postrouting jump masquerading
add rule ip kube-proxy reject-chain counter reject
add rule ip kube-proxy services ip daddr . meta l4proto . th dport vmap @service-ips
add rule ip kube-proxy service-endpoints-check ip daddr . meta l4proto . th dport vmap @no-endpoint-services
add chain ip kube-proxy service-AAAAAAAA-ns/dns/udp/dns
add chain ip kube-proxy endpoint-BBBBBBBB-ns/dns/udp/dns__127.0.0.2/5353
add rule ip kube-proxy service-AAAAAAAA-ns/dns/udp/dns ip daddr 127.96.0.10 ip saddr != 127.0.0.0/8 jump mark-for-masquerade
add rule ip kube-proxy service-AAAAAAAA-ns/dns/udp/dns counter numgen random mod 1 vmap { 0 : goto endpoint-BBBBBBBB-ns/dns/udp/dns__127.0.0.2/5353 }
add rule ip kube-proxy endpoint-BBBBBBBB-ns/dns/udp/dns__127.0.0.2/5353 ip saddr 127.0.0.2 jump mark-for-masquerade
add rule ip kube-proxy endpoint-BBBBBBBB-ns/dns/udp/dns__127.0.0.2/5353 meta l4proto udp counter dnat to 127.0.0.2:5353
add element ip kube-proxy cluster-ips { 127.96.0.10 }
add element ip kube-proxy cluster-ips { 127.96.0.21 }
add element ip kube-proxy service-ips { 127.96.0.10 . udp . 53 : goto service-AAAAAAAA-ns/dns/udp/dns }
add element ip kube-proxy no-endpoint-services { 127.96.0.21 . udp . 80 comment \"ns/down:http\" : goto reject-chain }
";

fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

fn at(ms: f64) -> SimTime {
    SimTime::from_nanos((ms * 1e6).round().max(0.0) as u64)
}

fn udp_len(payload: usize) -> u16 {
    u16::try_from(28 + payload).unwrap()
}

/// What one datagram did in nfsim: the server it reached, the answer's source as the client
/// saw it, ICMP errors delivered to the client.
#[derive(Debug, Default)]
struct SimUdp {
    server: Option<SocketAddr>,
    reply_from: Option<SocketAddr>,
    icmp_to_client: usize,
}

fn sim_udp(
    ns: &mut Netns,
    sent: SimTime,
    answered: SimTime,
    from: SocketAddr,
    to: SocketAddr,
    payload: &str,
) -> SimUdp {
    let servers = [sa("127.0.0.2:5353")];
    let mut q = Packet::udp(from, to);
    q.len = udp_len(payload.len());
    let r = ns.process(sent, q, Ingress::Local);
    let mut out = SimUdp::default();
    let mut peer = None;
    for e in &r.out {
        let Egress::LocalDeliver { packet } = e else {
            panic!("nfsim sent {e:?} out: the lab has only lo")
        };
        let dst = packet.dport().map(|p| SocketAddr::new(packet.dst, p));
        if matches!(packet.l4, L4::Udp { .. }) && dst.is_some_and(|d| servers.contains(&d)) {
            out.server = dst;
            peer = packet.sport().map(|p| SocketAddr::new(packet.src, p));
        } else if packet.dst == from.ip() && matches!(packet.l4, L4::Icmp { .. }) {
            out.icmp_to_client += 1;
        } else {
            panic!(
                "nfsim delivered {packet} where nothing listens ({:?})",
                r.fate
            );
        }
    }
    if let (Some(server), Some(peer)) = (out.server, peer) {
        let text = format!("{server}|{payload}");
        let mut a = Packet::udp(server, peer);
        a.len = udp_len(text.len());
        let r = ns.process(answered, a, Ingress::Local);
        assert_eq!(r.fate, Fate::Delivered, "the answer");
        if let Some(Egress::LocalDeliver { packet }) = r.out.first() {
            out.reply_from = packet.sport().map(|p| SocketAddr::new(packet.src, p));
        }
    }
    out
}

fn sim_list(ns: &Netns, now: SimTime) -> Vec<CtEntry> {
    ns.conntrack()
        .dump(now, &Filter::all())
        .lines()
        .filter_map(parse_ct_line)
        .collect()
}

fn same_entries(what: &str, kernel: &[CtEntry], sim: &[CtEntry]) {
    let key = |e: &CtEntry| {
        let mut e = e.clone();
        e.timeout_secs = None;
        format!("{e:?}")
    };
    let mut k: Vec<_> = kernel.iter().map(|e| (key(e), e.timeout_secs)).collect();
    let mut s: Vec<_> = sim.iter().map(|e| (key(e), e.timeout_secs)).collect();
    k.sort();
    s.sort();
    let ks: Vec<_> = k.iter().map(|(x, _)| x).collect();
    let ss: Vec<_> = s.iter().map(|(x, _)| x).collect();
    assert_eq!(ks, ss, "{what}: conntrack -L differs");
    for ((line, kt), (_, st)) in k.iter().zip(&s) {
        if let (Some(kt), Some(st)) = (kt, st) {
            assert!(kt.abs_diff(*st) <= 1, "{what}: {kt} s vs {st} s: {line}");
        }
    }
}

/// A service through nftables DNAT, a service without endpoints (rejected), an unallocated
/// service address (dropped) and a cluster IP's unserved port (rejected): which endpoint was
/// reached, what the client got back, `conntrack -L`, and `nft list table ip kube-proxy` with
/// its counters, the kernel's against nfsim's.
#[test]
fn nftables_service_traffic_matches_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("nftables_service_traffic_matches_the_kernel") else {
        return;
    };
    let sends = [
        ("q1", "127.0.0.1:40004", "127.96.0.10:53"),
        ("q2", "127.0.0.1:40004", "127.96.0.10:53"),
        ("down", "127.0.0.1:40005", "127.96.0.21:80"),
        ("unallocated", "127.0.0.1:40006", "127.96.5.5:53"),
        ("wrong-port", "127.0.0.1:40007", "127.96.0.10:54"),
    ];
    let mut sc = Scenario::new()
        .command("load", &["nft", "-f", "-"], Some(KP_LAB))
        .udp_listen("127.0.0.2:5353", true);
    for (label, from, to) in sends {
        sc = sc
            .udp_send(label, from, to)
            .conntrack(&format!("ct-{label}"), &["-L"]);
    }
    sc = sc.command("list", &["nft", "list", "table", "ip", "kube-proxy"], None);
    let run = lab.run(&sc).expect("lab run");
    assert_eq!(run.output("load").rc, 0, "{}", run.output("load").stderr);

    let mut ns = Netns::new(NetnsConfig::new("lab", 1));
    ns.nft_apply("kp.nft", KP_LAB, SimTime::ZERO).unwrap();
    for (label, from, to) in sends {
        let k = run.udp(label);
        let answered = k.reply.as_ref().map_or(k.sent_at_ms, |r| r.at_ms);
        let s = sim_udp(
            &mut ns,
            at(k.sent_at_ms),
            at(answered),
            sa(from),
            sa(to),
            &k.payload,
        );
        assert_eq!(
            s.server.map(|a| a.to_string()),
            k.reply.as_ref().map(|r| r.server.clone()),
            "{label}: the endpoint reached"
        );
        assert_eq!(
            s.reply_from.map(|a| a.to_string()),
            k.reply.as_ref().and_then(|r| r.from.clone()),
            "{label}: the answer's source"
        );
        let ct = format!("ct-{label}");
        same_entries(
            &ct,
            &run.conntrack_entries(&ct),
            &sim_list(&ns, at(run.step(&ct).at_ms)),
        );
        match label {
            "down" | "wrong-port" => assert_eq!(s.icmp_to_client, 1, "{label}: rejected"),
            _ => assert_eq!(s.icmp_to_client, 0, "{label}"),
        }
    }
    assert_eq!(
        run.received_by("127.0.0.2:5353").len(),
        2,
        "the server saw both queries"
    );
    let listed = &run.output("list").stdout;
    let ours = ns
        .nft()
        .list_table(Family::Ip, "kube-proxy", at(run.step("list").at_ms))
        .unwrap();
    diff(listed, &ours);
    // Every counter saw its packets (and the kernel's agree, byte for byte, above).
    assert_eq!(ours.matches("counter packets ").count(), 5);
    // One packet each: q2 belongs to q1's flow and no longer meets the nat chains.
    assert_eq!(ours.matches("counter packets 1 ").count(), 5, "{ours}");
}
