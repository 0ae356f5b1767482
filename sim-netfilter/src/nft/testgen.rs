//! Random nftables rulesets of the shapes kube-proxy's nftables proxier writes (its base
//! chains, Services with endpoints, session affinity, external and firewall chains,
//! no-endpoint verdicts), with the other statements nfsim knows mixed in (counters, masks,
//! flags, intervals, timeouts, `numgen` offsets, deep jumps), and random packets and
//! conntrack views for them: what the compiled walk is checked against the interpreter
//! with (`compiled_tests.rs`, `netns/nft_compiled_tests.rs`).

use crate::eval::{CtInfoKind, CtState};
use crate::rule::CtDirection;
use sim_core::{IfName, Packet, SimRng, TcpFlags};
use std::fmt::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Picks from `v`.
pub(crate) fn pick<'a, T>(g: &mut SimRng, v: &'a [T]) -> &'a T {
    &v[g.below(v.len() as u64) as usize]
}

pub(crate) fn svc_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(172, 30, 0, 10 + i as u8)
}

pub(crate) fn ep_ip(i: usize, j: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 180, i as u8, 1 + j as u8)
}

const BASE: &str = include_str!("testgen_base.nft");

/// A random ruleset of kube-proxy's shape, and more.
pub(crate) fn ruleset_text(g: &mut SimRng, services: usize) -> String {
    let mut t = String::from(BASE);
    let counter = |g: &mut SimRng| if g.below(3) == 0 { " counter" } else { "" };
    for i in 0..services {
        let proto = *pick(g, &["tcp", "udp"]);
        let port = *pick(g, &[80u16, 53, 8080]);
        let eps = g.below(4) as usize;
        let svc = format!("service-{i}");
        let ext = format!("external-{i}");
        let ip = svc_ip(i);
        let _ = writeln!(t, "add element ip kube-proxy cluster-ips {{ {ip} }}");
        if eps == 0 {
            let v = *pick(g, &["drop", "goto reject-chain"]);
            let _ = writeln!(
                t,
                "add element ip kube-proxy no-endpoint-services {{ {ip} . {proto} . {port} comment \"ns/s{i}\" : {v} }}"
            );
            continue;
        }
        let affinity = g.below(3) == 0;
        let _ = writeln!(t, "add chain ip kube-proxy {svc}");
        let _ = writeln!(
            t,
            "add rule ip kube-proxy {svc} ip daddr {ip} ip saddr != 10.0.0.0/8{} jump mark-for-masquerade",
            counter(g)
        );
        for j in 0..eps {
            let ep = format!("endpoint-{i}-{j}");
            let _ = writeln!(t, "add chain ip kube-proxy {ep}");
            let _ = writeln!(
                t,
                "add rule ip kube-proxy {ep} ip saddr {} jump mark-for-masquerade",
                ep_ip(i, j)
            );
            if affinity {
                let timeout = *pick(g, &["10s", "10800s", "60s"]);
                let _ = writeln!(
                    t,
                    "add set ip kube-proxy affinity-{i}-{j} {{ type ipv4_addr ; flags dynamic,timeout ; timeout {timeout} ; }}"
                );
                let _ = writeln!(
                    t,
                    "add rule ip kube-proxy {svc} ip saddr @affinity-{i}-{j} goto {ep}"
                );
                let _ = writeln!(
                    t,
                    "add rule ip kube-proxy {ep} update @affinity-{i}-{j} {{ ip saddr }}"
                );
            }
            let _ = writeln!(
                t,
                "add rule ip kube-proxy {ep} meta l4proto {proto}{} dnat to {}:{}",
                counter(g),
                ep_ip(i, j),
                port + 1
            );
        }
        let offset = if g.below(4) == 0 { " offset 1" } else { "" };
        let base = usize::from(!offset.is_empty());
        let arms: Vec<String> = (0..eps)
            .map(|j| format!("{} : goto endpoint-{i}-{j}", j + base))
            .collect();
        let _ = writeln!(
            t,
            "add rule ip kube-proxy {svc} numgen random mod {eps}{offset} vmap {{ {} }}",
            arms.join(" , ")
        );
        let _ = writeln!(
            t,
            "add element ip kube-proxy service-ips {{ {ip} . {proto} . {port} : goto {svc} }}"
        );
        if g.below(2) == 0 {
            let _ = writeln!(t, "add chain ip kube-proxy {ext}");
            let _ = writeln!(
                t,
                "add rule ip kube-proxy {ext} ip saddr 10.0.0.0/8 goto {svc} comment \"short-circuit pod traffic\""
            );
            let _ = writeln!(
                t,
                "add rule ip kube-proxy {ext} fib saddr type local jump mark-for-masquerade"
            );
            let _ = writeln!(
                t,
                "add rule ip kube-proxy {ext} fib saddr type local goto {svc}"
            );
            let lb = Ipv4Addr::new(192, 168, 99, i as u8);
            let _ = writeln!(
                t,
                "add element ip kube-proxy service-ips {{ {lb} . {proto} . {port} : goto {ext} }}"
            );
            let _ = writeln!(
                t,
                "add element ip kube-proxy service-nodeports {{ {proto} . {} : goto {ext} }}",
                3000 + i
            );
            if g.below(2) == 0 {
                let fw = format!("firewall-{i}");
                let _ = writeln!(t, "add chain ip kube-proxy {fw}");
                let _ = writeln!(
                    t,
                    "add rule ip kube-proxy {fw} ip saddr != {{ 203.0.113.0/25, 10.1.0.0/16 }} drop"
                );
                let _ = writeln!(
                    t,
                    "add element ip kube-proxy firewall-ips {{ {lb} . {proto} . {port} : goto {fw} }}"
                );
            }
        }
    }
    extra_rules(g, &mut t);
    ipv6_rules(g, &mut t, services);
    t
}

/// kube-proxy's IPv6 table (upstream's baseRules for the IPv6 proxier, as in
/// `tests/fixtures/kubeproxy-upstream/base6.nft`).
const BASE6: &str = include_str!("../../../tests/fixtures/kubeproxy-upstream/base6.nft");

pub(crate) fn svc_ip6(i: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x10, 0x96, 0, 0, 0, 0, 0x10 + i as u16)
}

pub(crate) fn ep_ip6(i: usize, j: usize) -> Ipv6Addr {
    Ipv6Addr::new(0xfd00, 0x10, 0x180, 0, 0, 0, i as u16, 1 + j as u16)
}

/// The IPv6 shapes: kube-proxy's `ip6` table with Services like the IPv4 ones, and an
/// `inet` table whose statements act per family (`meta nfproto`, `dnat ip|ip6 to`, an
/// `ip6` match meeting IPv4 packets, `oifname`, `reject` meeting IPv6 packets).
fn ipv6_rules(g: &mut SimRng, t: &mut String, services: usize) {
    t.push_str(BASE6);
    for i in 0..services {
        let proto = *pick(g, &["tcp", "udp"]);
        let port = *pick(g, &[80u16, 53, 8080]);
        let eps = g.below(3) as usize;
        let ip = svc_ip6(i);
        let _ = writeln!(t, "add element ip6 kube-proxy cluster-ips {{ {ip} }}");
        if eps == 0 {
            let _ = writeln!(
                t,
                "add element ip6 kube-proxy no-endpoint-services {{ {ip} . {proto} . {port} : goto reject-chain }}"
            );
            continue;
        }
        let svc = format!("service6-{i}");
        let _ = writeln!(t, "add chain ip6 kube-proxy {svc}");
        let _ = writeln!(
            t,
            "add rule ip6 kube-proxy {svc} ip6 daddr {ip} ip6 saddr != fd00:10:180::/48 jump mark-for-masquerade"
        );
        let mut arms = Vec::new();
        for j in 0..eps {
            let ep = format!("endpoint6-{i}-{j}");
            let _ = writeln!(t, "add chain ip6 kube-proxy {ep}");
            let _ = writeln!(
                t,
                "add rule ip6 kube-proxy {ep} ip6 saddr {} jump mark-for-masquerade",
                ep_ip6(i, j)
            );
            let _ = writeln!(
                t,
                "add rule ip6 kube-proxy {ep} meta l4proto {proto} dnat to [{}]:{}",
                ep_ip6(i, j),
                port + 1
            );
            arms.push(format!("{j} : goto {ep}"));
        }
        let _ = writeln!(
            t,
            "add rule ip6 kube-proxy {svc} numgen random mod {eps} vmap {{ {} }}",
            arms.join(" , ")
        );
        let _ = writeln!(
            t,
            "add element ip6 kube-proxy service-ips {{ {ip} . {proto} . {port} : goto {svc} }}"
        );
    }
    t.push_str(
        "add table inet mix
add chain inet mix pre { type nat hook prerouting priority -90 ; }
add chain inet mix fwd { type filter hook forward priority 10 ; policy accept ; }
",
    );
    let choices: &[&str] = &[
        "add rule inet mix pre meta nfproto ipv4 meta l4proto tcp th dport 3000 dnat ip to 10.180.0.1:80",
        "add rule inet mix pre meta nfproto ipv6 meta l4proto tcp th dport 3000 dnat ip6 to [fd00:10:180::1]:80",
        "add rule inet mix pre meta l4proto udp th dport 3001 dnat ip6 to [fd00:10:180::2]:81",
        "add rule inet mix pre meta l4proto udp th dport 3001 dnat ip to 10.180.0.2:81",
        "add rule inet mix pre ip6 daddr fd00:10:96::/64 counter",
        "add rule inet mix pre ip daddr 172.30.0.0/16 counter",
        "add rule inet mix fwd oifname \"eth*\" counter",
        "add rule inet mix fwd oifname != \"cni0\" ip6 daddr fd00:10:96::/64 counter",
        "add rule inet mix fwd ip6 nexthdr udp th dport 53 reject",
        "add rule inet mix fwd meta nfproto ipv6 meta l4proto tcp th dport 22 reject",
        "add rule inet mix fwd ip6 saddr . th dport { fd00:10:180::1 . 53, fd00:10:180::2 . 80 } counter",
    ];
    for _ in 0..g.below(8) {
        let _ = writeln!(t, "{}", pick(g, choices));
    }
}

/// Statements beyond kube-proxy's, in a filter chain of their own at prerouting.
fn extra_rules(g: &mut SimRng, t: &mut String) {
    t.push_str(
        "add table ip extra
add set ip extra nets { type ipv4_addr ; flags interval ; }
add element ip extra nets { 10.0.0.0/8, 192.168.99.0-192.168.99.3, 172.30.0.12 }
add set ip extra ports { type inet_service ; }
add element ip extra ports { 53, 80, 3001, 8080 }
add set ip extra seen { type ipv4_addr . inet_service ; flags timeout ; timeout 30s ; }
add map ip extra bymark { type mark : verdict ; }
add element ip extra bymark { 0x10 : drop, 0x20 : accept, 0x30 : continue, 0x40 : return }
add chain ip extra pre { type filter hook prerouting priority -150 ; policy accept ; }
add chain ip extra fwd { type filter hook forward priority 5 ; policy drop ; }
add chain ip extra post { type nat hook postrouting priority 50 ; }
",
    );
    // Deep enough, at times, for nf_tables' jump stack of 16 to overflow.
    let depth = 1 + g.below(24) as usize;
    let gotos = g.below(2) == 0;
    for d in 0..depth {
        let _ = writeln!(t, "add chain ip extra deep{d}");
    }
    for d in 0..depth {
        if d + 1 < depth {
            let verb = if gotos && g.below(4) == 0 {
                "goto"
            } else {
                "jump"
            };
            let _ = writeln!(t, "add rule ip extra deep{d} counter {verb} deep{}", d + 1);
        } else {
            let _ = writeln!(t, "add rule ip extra deep{d} meta mark set meta mark ^ 0x1");
        }
    }
    let choices: &[&str] = &[
        "ct state established,related accept",
        "ct state { established, related } counter accept",
        "ct state invalid drop",
        "ct state new counter",
        "ct status dnat accept",
        "ct status != dnat counter",
        "meta mark & 0x0000ff00 == 0x00000100 drop",
        "meta mark 0x10 counter",
        "mark != 0x20 counter continue",
        "meta mark vmap @bymark",
        "meta mark set meta mark | 0x00000200",
        "meta mark set meta mark & 0xfffffdff",
        "meta mark set 0x30",
        "iifname \"veth*\" counter",
        "iifname != \"eth0\" meta mark set meta mark | 0x00000400",
        "iifname \"eth0\" th dport @ports counter",
        "ip saddr @nets counter",
        "ip daddr != @nets counter return",
        "ip daddr { 172.30.0.0/24, 192.168.99.1 } counter",
        "ip daddr 172.30.0.10-172.30.0.12 counter",
        "ip saddr . th dport @seen accept",
        "update @seen { ip saddr . th dport }",
        "th dport { 53, 8080 } counter",
        "tcp dport 80 counter",
        "udp sport 1024-2000 counter",
        "meta l4proto . th dport { tcp . 80, udp . 53 } counter",
        "ip protocol icmp counter",
        "numgen random mod 3 offset 7 vmap { 7 : continue, 8 : accept, 9 : jump deep0 }",
        "numgen random mod 4 vmap { 0 : jump deep0, 2 : return }",
        "jump deep0",
        "fib daddr type local counter",
        "fib saddr type != local counter",
        "th dport vmap { 53 : accept, 80 : continue, 1-100 : drop }",
        "counter",
        "return",
        "reject with icmp port-unreachable",
    ];
    for chain in ["pre", "fwd"] {
        for _ in 0..g.below(10) {
            let _ = writeln!(t, "add rule ip extra {chain} {}", pick(g, choices));
        }
    }
    for _ in 0..g.below(4) {
        let r = *pick(
            g,
            &[
                "ip saddr 10.0.0.0/8 snat to 172.18.0.2",
                "meta mark 0x10 masquerade",
                "ip daddr @nets counter",
                "ct state new counter",
            ],
        );
        let _ = writeln!(t, "add rule ip extra post {r}");
    }
}

/// A random packet of the addresses and ports the rulesets use.
pub(crate) fn packet(g: &mut SimRng, services: usize) -> Packet {
    let n = services.max(1);
    let dst: Ipv4Addr = match g.below(6) {
        0 | 1 => svc_ip(g.below(n as u64 + 1) as usize),
        2 => Ipv4Addr::new(192, 168, 99, g.below(n as u64 + 1) as u8),
        3 => Ipv4Addr::new(192, 168, 0, 2),
        4 => Ipv4Addr::new(127, 0, 0, 1),
        _ => Ipv4Addr::new(8, 8, g.below(2) as u8, 8),
    };
    let src: Ipv4Addr = match g.below(5) {
        0 => ep_ip(g.below(n as u64) as usize, g.below(3) as usize),
        1 => Ipv4Addr::new(10, 0, 0, 1 + g.below(3) as u8),
        2 => Ipv4Addr::new(203, 0, 113, g.below(256) as u8),
        3 => Ipv4Addr::new(127, 0, 0, 1),
        _ => Ipv4Addr::new(172, 18, 1, g.below(4) as u8),
    };
    let dport = *pick(g, &[80u16, 53, 8080, 3000, 3001, 3002, 22]);
    let sport = *pick(g, &[1024u16, 1500, 40000, 53]);
    let (src, dst) = if g.below(3) == 0 {
        // IPv6, for the ip6 and inet tables.
        let dst = match g.below(4) {
            0 | 1 => svc_ip6(g.below(n as u64 + 1) as usize),
            2 => "2001:db8::1".parse().expect("an address"),
            _ => "fd00:10:96::ffff".parse().expect("an address"),
        };
        let src = match g.below(3) {
            0 => ep_ip6(g.below(n as u64) as usize, g.below(3) as usize),
            1 => "2001:db8::5".parse().expect("an address"),
            _ => "fd00:1::9".parse().expect("an address"),
        };
        (IpAddr::V6(src), IpAddr::V6(dst))
    } else {
        (IpAddr::V4(src), IpAddr::V4(dst))
    };
    let s = SocketAddr::new(src, sport);
    let d = SocketAddr::new(dst, dport);
    let mut p = match g.below(5) {
        0 | 1 => Packet::udp(s, d),
        2 | 3 => Packet::tcp(s, d, TcpFlags::SYN),
        _ => Packet::icmp_echo_request(src, dst, 7, 1),
    };
    p.mark = *pick(g, &[0, 0x4000, 0x10, 0x20, 0x30, 0x40, 0x100, 0x4100]);
    p.len = 40 + g.below(1400) as u16;
    p.iif = match g.below(4) {
        0 => None,
        1 => Some(IfName::new("eth0").expect("name")),
        2 => Some(IfName::new("veth12").expect("name")),
        _ => Some(IfName::new("cni0").expect("name")),
    };
    p
}

pub(crate) fn ct_view(g: &mut SimRng, p: &Packet) -> CtState {
    match g.below(6) {
        0 => CtState::Invalid,
        1 => CtState::Untracked,
        k => {
            let info = match k {
                2 | 3 => CtInfoKind::New,
                4 => CtInfoKind::Established,
                _ => CtInfoKind::Related,
            };
            let mut v = CtState::for_packet(p, info, 30);
            if let CtState::Tracked(i) = &mut v {
                i.status = *pick(g, &[0u32, 0x20, 0x08 | 0x20, 0x0e]);
                if g.below(4) == 0 {
                    i.dir = CtDirection::Reply;
                }
            }
            v
        }
    }
}
