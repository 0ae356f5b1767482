//! The IPv6 datapath against the real kernel (issue #23's packet proof, rules-free part): a
//! router namespace with two TUN links on ULA prefixes, raw IPv6 packets written into them,
//! and what the kernel forwards or answers read back, with `conntrack -L -f ipv6` (plain and
//! `-o extended`) and `conntrack -E`. nfsim's [`Netns`] gets the same links and addresses and
//! the same packets at the kernel's instants, and must agree on every packet that leaves
//! (link, addresses, ports, hop limit, length, the header an ICMPv6 error quotes), on the
//! listings line for line (seconds left within 1 s) and on the events.
//!
//! Covered: packets `ipv6_rcv_core` refuses (the loopback source on a real link: no entry,
//! nothing forwarded; an IPv4-mapped source is forwarded), forwarding with the hop limit decremented (`ip6_forward`), a hop limit of 1 dying
//! with an ICMPv6 time exceeded from the address `ipv6_dev_get_saddr` picks, the ICMPv6 error
//! rate limit (`net.ipv6.icmp.ratelimit`, a burst of 6), ICMPv6 echo tracked both ways
//! (`icmpv6   58 30 … type=128 code=0 id=…`), UDP tracked both ways, and the ICMPv6 error a
//! destination sends back for a tracked flow (RELATED, forwarded).
//!
//! Addresses are ULA ones on the namespace's own TUN links, whose other end is the test's
//! file descriptor: nothing leaves the namespace.

#[path = "support/kernel.rs"]
mod kernel;

use kernel::{parse_ct_line, CtEntry, LabRun, RawPacket, Scenario};
use sim_conntrack::Filter;
use sim_core::{IfName, Packet, SimTime};
use sim_netfilter::netns::{Egress, Ingress, Netns, NetnsConfig};
use sim_netfilter::Family;
use std::net::IpAddr;

/// How long each injection waits for what the kernel sends.
const WAIT_MS: u64 = 30;

fn ifn(s: &str) -> IfName {
    IfName::new(s).unwrap()
}

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn at(ms: f64) -> SimTime {
    SimTime::from_nanos((ms * 1e6) as u64)
}

fn udp(src: &str, sport: u16, dst: &str, dport: u16, ttl: u8) -> RawPacket {
    RawPacket {
        proto: "udp".into(),
        src: src.into(),
        dst: dst.into(),
        sport,
        dport,
        len: 4,
        ttl: Some(ttl),
        ..RawPacket::default()
    }
}

fn echo(src: &str, dst: &str, icmp_type: u8, id: u16) -> RawPacket {
    RawPacket {
        proto: "icmp".into(),
        src: src.into(),
        dst: dst.into(),
        icmp_type: Some(icmp_type),
        icmp_id: id,
        icmp_seq: 1,
        len: 8,
        ..RawPacket::default()
    }
}

/// An ICMPv6 error of `icmp_type`/`code` from `src` to `dst` quoting what inject step
/// `quote` made the kernel send.
fn quoting(src: &str, dst: &str, icmp_type: u8, code: u8, quote: &str) -> RawPacket {
    RawPacket {
        proto: "icmp".into(),
        src: src.into(),
        dst: dst.into(),
        icmp_type: Some(icmp_type),
        code: Some(code),
        quote: Some(quote.into()),
        ttl: Some(64),
        ..RawPacket::default()
    }
}

/// The router: `eth0` fd00::1/64 (the network, clients fd00::2…), `cni0` fd01::1/64 (pods).
fn nfsim_router() -> Netns {
    let mut ns = Netns::new(NetnsConfig::new("router", 1));
    ns.add_interface(ifn("eth0"), &[(ip("fd00::1"), 64)])
        .unwrap();
    ns.add_interface(ifn("cni0"), &[(ip("fd01::1"), 64)])
        .unwrap();
    ns
}

/// One packet as the comparison shows it.
fn show(dev: &str, p: &Packet) -> String {
    format!("{dev} {p} hlim={} len={}", p.ttl, p.len)
}

/// What the kernel sent during inject step `label`.
fn kernel_out(run: &LabRun, label: &str) -> Vec<String> {
    run.injected(label)
        .emitted
        .iter()
        .map(|e| {
            let p = sim_core::wire::parse_ip(&e.bytes()).expect("the kernel's packet parses");
            show(&e.dev, &p)
        })
        .collect()
}

/// The seconds-left field of a listing line, replaced by `T`, with the number.
fn split_secs(line: &str) -> (String, Option<u64>) {
    let e = parse_ct_line(line.trim_start_matches("ipv6     10 "));
    let secs = e.as_ref().and_then(|e: &CtEntry| e.timeout_secs);
    let mut words: Vec<String> = line.split(' ').map(String::from).collect();
    if let Some(s) = secs {
        let sn = s.to_string();
        let skip = usize::from(line.starts_with("ipv6 ")) * 7;
        if let Some(w) = words.iter_mut().skip(skip).find(|w| **w == sn) {
            *w = "T".into();
        }
    }
    (words.join(" "), secs)
}

/// The listings agree line for line, seconds left within 1 s (the kernel's a jiffy later).
fn same_listing(what: &str, kernel: &str, sim: &str) {
    let k: Vec<&str> = kernel.lines().filter(|l| !l.is_empty()).collect();
    let s: Vec<&str> = sim.lines().filter(|l| !l.is_empty()).collect();
    let mut ks: Vec<(String, Option<u64>)> = k.iter().map(|l| split_secs(l)).collect();
    let mut ss: Vec<(String, Option<u64>)> = s.iter().map(|l| split_secs(l)).collect();
    ks.sort();
    ss.sort();
    let shown = || format!("kernel:\n{}\nnfsim:\n{}", k.join("\n"), s.join("\n"));
    assert_eq!(ks.len(), ss.len(), "{what}: {}", shown());
    for ((kl, kt), (sl, st)) in ks.iter().zip(&ss) {
        assert_eq!(kl, sl, "{what}: {}", shown());
        match (kt, st) {
            (Some(a), Some(b)) => assert!(a.abs_diff(*b) <= 1, "{what}: {}", shown()),
            (a, b) => assert_eq!(a, b, "{what}: {}", shown()),
        }
    }
}

#[test]
fn ipv6_forwarding_hop_limit_icmpv6_and_conntrack_match_the_kernel() {
    const TEST: &str = "ipv6_forwarding_hop_limit_icmpv6_and_conntrack_match_the_kernel";
    let Some(lab) = kernel::lab_with_or_skip(TEST, &["sysctl"], &["/dev/net/tun"]) else {
        return;
    };
    // The injections, in order: (label, link, packet, reply_to).
    let mut steps: Vec<(String, &str, RawPacket, Option<&str>)> = vec![
        (
            "fwd".into(),
            "eth0",
            udp("fd00::2", 40000, "fd01::5", 53, 64),
            None,
        ),
        (
            "fwd-answer".into(),
            "cni0",
            udp("fd01::5", 53, "fd00::2", 40000, 64),
            None,
        ),
        (
            "ping".into(),
            "eth0",
            echo("fd00::2", "fd01::5", 128, 7),
            None,
        ),
        (
            "pong".into(),
            "cni0",
            echo("fd01::5", "fd00::2", 129, 7),
            None,
        ),
    ];
    // Refused by ipv6_rcv_core before PREROUTING (no entry, nothing forwarded): the
    // loopback address as source on a real link. An IPv4-mapped source is not refused.
    steps.push((
        "from-lo".into(),
        "eth0",
        udp("::1", 40100, "fd00::1", 53, 64),
        None,
    ));
    steps.push((
        "mapped".into(),
        "eth0",
        udp("::ffff:10.0.0.1", 40101, "fd01::5", 53, 64),
        None,
    ));
    // Extension headers (hop-by-hop, destination options) before UDP: skipped as
    // ipv6_skip_exthdr does, the entry has the datagram's ports; forwarded with them.
    let mut ext = udp("fd00::4", 40200, "fd01::5", 53, 64);
    ext.ext = vec![0, 60];
    steps.push(("ext".into(), "eth0", ext, None));
    // The pod answers the tracked flow's next datagram with a port unreachable quoting it:
    // RELATED to the flow's entry, forwarded back.
    steps.push((
        "fwd-2".into(),
        "eth0",
        udp("fd00::2", 40000, "fd01::5", 53, 64),
        None,
    ));
    steps.push((
        "unreach".into(),
        "cni0",
        RawPacket {
            proto: "icmp".into(),
            src: "fd01::5".into(),
            dst: "fd00::2".into(),
            icmp_type: Some(1),
            code: Some(4),
            quote: Some("fwd-2".into()),
            ttl: Some(64),
            ..RawPacket::default()
        },
        None,
    ));
    let mut sc = Scenario::new()
        .sysctl("net.ipv6.conf.all.forwarding", "1")
        .tun("eth0", &["fd00::1/64"])
        .tun("cni0", &["fd01::1/64"]);
    for (label, dev, p, reply_to) in &steps {
        sc = sc.inject(label, dev, p.clone(), *reply_to, WAIT_MS);
    }
    // Hop limit 1: ten in a row 5 ms apart, a time exceeded for the first six (the burst of
    // net.ipv6.icmp.ratelimit, 100 ms each), then none (45 ms refill only).
    for i in 0..10u16 {
        let label = format!("hlim1-{i}");
        let p = udp("fd00::3", 41000 + i, "fd01::5", 53, 1);
        sc = sc.inject(&label, "eth0", p, None, 5);
        steps.push((label, "eth0", RawPacket::default(), None));
    }
    let sc = sc
        .conntrack("list", &["-L", "-f", "ipv6"])
        .conntrack("list-ext", &["-L", "-f", "ipv6", "-o", "extended"]);
    let run = match lab.run(&sc) {
        Ok(r) => r,
        Err(e) => panic!("{TEST}: the lab run failed: {e}"),
    };

    let mut ns = nfsim_router();
    let silent = ["from-lo", "hlim1-6", "hlim1-7", "hlim1-8", "hlim1-9"];
    compare(&run, &mut ns, &steps, &silent);
}

/// Feeds the kernel's injected packets to `ns` at the kernel's instants and compares what
/// leaves, then the listings (`list`, `list-ext`) and the events.
/// Every step but those in `silent` must have made the kernel send something (so that an
/// agreement on nothing cannot pass for one on a packet).
fn compare(
    run: &LabRun,
    ns: &mut Netns,
    steps: &[(String, &str, RawPacket, Option<&str>)],
    silent: &[&str],
) {
    let mut last = SimTime::ZERO;
    for (label, _, _, _) in steps {
        assert_eq!(
            kernel_out(run, label).is_empty(),
            silent.contains(&label.as_str()),
            "{label}: the kernel {} send something",
            if silent.contains(&label.as_str()) {
                "was not expected to"
            } else {
                "did not"
            }
        );
        let inj = run.injected(label);
        let pkt = sim_core::wire::parse_ip(&inj.bytes()).expect("the injected packet parses");
        last = at(inj.at_ms);
        let r = ns.process(last, pkt, Ingress::Interface(ifn(&inj.dev)));
        let sim: Vec<String> = r
            .out
            .iter()
            .filter_map(|e| match e {
                Egress::Transmit { dev, packet, .. } => Some(show(dev.as_str(), packet)),
                Egress::LocalDeliver { .. } => None,
            })
            .collect();
        assert_eq!(
            kernel_out(run, label),
            sim,
            "{label}: what left the router differs (kernel left, nfsim right)"
        );
    }
    let list_at = at(run.step("list").at_ms).max(last);
    compare_lists(run, ns, list_at);
}

fn compare_lists(run: &LabRun, ns: &mut Netns, list_at: SimTime) {
    let f = Filter::parse_args(["-f", "ipv6"]).unwrap();
    let sim_list = ns.conntrack().dump(list_at, &f);
    same_listing(
        "conntrack -L -f ipv6",
        &run.output("list").stdout,
        &sim_list,
    );
    let sim_ext: String = ns
        .conntrack()
        .list(list_at, &f)
        .iter()
        .map(|e| format!("{}\n", e.list_line_extended(list_at)))
        .collect();
    same_listing(
        "conntrack -L -f ipv6 -o extended",
        &run.output("list-ext").stdout,
        &sim_ext,
    );
    let kernel_events: Vec<&str> = run.event_lines();
    let sim_events: Vec<String> = ns
        .drain_conntrack_events()
        .iter()
        .map(|e| e.to_string())
        .collect();
    let sim_events: Vec<&str> = sim_events.iter().map(String::as_str).collect();
    same_listing(
        "conntrack -E",
        &kernel_events.join("\n"),
        &sim_events.join("\n"),
    );
}

/// nft's `inet` nat table of the MASQUERADE case: every new flow is masqueraded
/// (`nf_nat_masquerade_ipv6`: the source `ipv6_dev_get_saddr` picks
/// on the outgoing link for the destination).
const MASQ_NFT: &str = "add table inet nat
add chain inet nat post { type nat hook postrouting priority 100; policy accept; }
add rule inet nat post masquerade
";

#[test]
fn ipv6_masquerade_matches_the_kernel() {
    masquerade_case("ipv6_masquerade_matches_the_kernel", false);
}

/// The network link holds only a link-local address (fe80::1/64, with a route to fd00::/64
/// on it): a global destination takes the pods' link's global fd01::1 (rule 2, scope, before
/// rule 5, the outgoing link), not the outgoing link's own link-local address.
#[test]
fn ipv6_masquerade_source_selection_prefers_scope_like_the_kernel() {
    masquerade_case(
        "ipv6_masquerade_source_selection_prefers_scope_like_the_kernel",
        true,
    );
}

fn masquerade_case(test: &'static str, link_local_only: bool) {
    let Some(lab) = kernel::lab_with_or_skip(test, &["sysctl", "nft"], &["/dev/net/tun"]) else {
        return;
    };
    let masq_src = if link_local_only {
        "fd01::1"
    } else {
        "fd00::1"
    };
    let steps: Vec<(String, &str, RawPacket, Option<&str>)> = vec![
        // A pod's datagram out to the network: source fd01::5 becomes eth0's fd00::1.
        (
            "out".into(),
            "cni0",
            udp("fd01::5", 40000, "fd00::2", 53, 64),
            None,
        ),
        // The answer, to the masqueraded source: un-SNAT'd back to the pod.
        (
            "answer".into(),
            "eth0",
            udp("fd00::2", 53, masq_src, 40000, 64),
            Some("out"),
        ),
        // A ping from the pod, masqueraded (the echo id kept), and its reply.
        (
            "ping".into(),
            "cni0",
            echo("fd01::5", "fd00::2", 128, 9),
            None,
        ),
        (
            "pong".into(),
            "eth0",
            echo("fd00::2", masq_src, 129, 9),
            Some("ping"),
        ),
        // The network's port unreachable for the masqueraded flow: RELATED, and the header
        // it quotes translated back (nf_nat_icmpv6_reply_translation) on the way to the pod.
        (
            "out-2".into(),
            "cni0",
            udp("fd01::5", 40000, "fd00::2", 53, 64),
            None,
        ),
        (
            "unreach".into(),
            "eth0",
            RawPacket {
                proto: "icmp".into(),
                src: "fd00::2".into(),
                dst: masq_src.into(),
                icmp_type: Some(1),
                code: Some(4),
                quote: Some("out-2".into()),
                ttl: Some(64),
                ..RawPacket::default()
            },
            None,
        ),
        // Packet too big and time exceeded are RELATED the same way (every type below 128
        // is an error to nf_conntrack_icmpv6_error).
        (
            "out-3".into(),
            "cni0",
            udp("fd01::5", 40000, "fd00::2", 53, 64),
            None,
        ),
        (
            "too-big".into(),
            "eth0",
            quoting("fd00::2", masq_src, 2, 0, "out-3"),
            None,
        ),
        (
            "out-4".into(),
            "cni0",
            udp("fd01::5", 40000, "fd00::2", 53, 64),
            None,
        ),
        (
            "exceeded".into(),
            "eth0",
            quoting("fd00::2", masq_src, 3, 0, "out-4"),
            None,
        ),
    ];
    let eth0 = if link_local_only {
        "fe80::1/64"
    } else {
        "fd00::1/64"
    };
    let mut sc = Scenario::new()
        .sysctl("net.ipv6.conf.all.forwarding", "1")
        .tun("eth0", &[eth0])
        .tun("cni0", &["fd01::1/64"]);
    if link_local_only {
        sc = sc.route("fd00::/64 dev eth0");
    }
    let mut sc = sc.command("nat", &["nft", "-f", "-"], Some(MASQ_NFT));
    for (label, dev, p, reply_to) in &steps {
        sc = sc.inject(label, dev, p.clone(), *reply_to, WAIT_MS);
    }
    let sc = sc
        .conntrack("list", &["-L", "-f", "ipv6"])
        .conntrack("list-ext", &["-L", "-f", "ipv6", "-o", "extended"]);
    let run = match lab.run(&sc) {
        Ok(r) => r,
        Err(e) => panic!("{test}: the lab run failed: {e}"),
    };
    let nat = run.output("nat");
    assert!(nat.rc == 0, "{test}: nft -f failed: {}", nat.stderr);
    let mut ns = if link_local_only {
        let mut ns = Netns::new(NetnsConfig::new("router", 1));
        ns.add_interface(ifn("eth0"), &[(ip("fe80::1"), 64)])
            .unwrap();
        ns.add_interface(ifn("cni0"), &[(ip("fd01::1"), 64)])
            .unwrap();
        ns.add_route("fd00::/64".parse().unwrap(), None, ifn("eth0"))
            .unwrap();
        ns
    } else {
        nfsim_router()
    };
    ns.nft_apply("nat.nft", MASQ_NFT, SimTime::ZERO)
        .expect("nfsim takes the nat table");
    compare(&run, &mut ns, &steps, &[]);
}

/// IPv6 on `lo`: sockets on `::1`, the frames the kernel sends captured (Ethernet, ether
/// type 0x86dd) parse with `sim_core::wire`, survive a pcap written and read back, and the
/// kernel's ICMPv6 port unreachable for a closed port is the one nfsim builds
/// (`Packet::icmp_error`: type 1 code 4, the whole datagram quoted, hop limit 64);
/// `conntrack -L -f ipv6` reads back with the flows.
#[test]
fn ipv6_on_lo_captures_parse_and_round_trip_through_pcap() {
    const TEST: &str = "ipv6_on_lo_captures_parse_and_round_trip_through_pcap";
    let Some(lab) = kernel::lab_or_skip(TEST) else {
        return;
    };
    let run = lab
        .run(
            &Scenario::new()
                .capture(true)
                .udp_listen("[::1]:5353", true)
                .udp_send("dns", "[::1]:40010", "[::1]:5353")
                .udp_send_wait("closed", Some("[::1]:40011"), "[::1]:9", 100)
                .conntrack("list", &["-L", "-f", "ipv6"]),
        )
        .unwrap_or_else(|e| panic!("{TEST}: the lab run failed: {e}"));
    let packets: Vec<Packet> = run
        .frames
        .iter()
        .map(|f| sim_core::wire::parse_ethernet(&f.bytes))
        .collect::<Result<_, _>>()
        .expect("every frame the kernel sent parses");
    let text: Vec<String> = packets.iter().map(|p| p.to_string()).collect();
    let has = |s: &str| text.iter().any(|t| t == s);
    assert!(has("udp [::1]:40010 -> [::1]:5353"), "{text:#?}");
    assert!(has("udp [::1]:5353 -> [::1]:40010"), "{text:#?}");
    let query = packets
        .iter()
        .find(|p| p.dport() == Some(9))
        .expect("the datagram to the closed port");
    let error = packets
        .iter()
        .find(|p| matches!(p.l4, sim_core::L4::Icmp { .. }))
        .expect("the kernel's ICMPv6 error");
    let ours = Packet::icmp_error(
        ip("::1"),
        query,
        sim_core::packet::icmp::V6_DEST_UNREACH,
        sim_core::packet::icmp::V6_CODE_PORT_UNREACH,
    );
    assert_eq!(
        (error.to_string(), error.len, error.ttl),
        (ours.to_string(), ours.len, ours.ttl),
        "the kernel's port unreachable against nfsim's"
    );
    // A pcap of the frames reads back to the same packets.
    let cap = sim_core::pcap::read(&run.frames_pcap(), &Default::default()).expect("pcap reads");
    let back: Vec<String> = cap.records.iter().map(|r| r.packet.to_string()).collect();
    assert_eq!(back, text);
    // The listing: the answered flow, and the closed port's UNREPLIED one.
    let list = &run.output("list").stdout;
    assert!(
        list.lines().any(|l| l.starts_with("udp      17 ")
            && l.contains("src=::1 dst=::1 sport=40011 dport=9 [UNREPLIED]")),
        "{list}"
    );
    assert!(
        list.lines()
            .any(|l| l.contains("sport=40010 dport=5353 src=::1")),
        "{list}"
    );
}

/// kube-proxy-shaped ip6tables rules for the router: a Service `[fd00:96::10]:53/udp`
/// DNAT'd to the pod `[fd01::5]:5353`, ICMPv6 to it DNAT'd to `fd01::6`, the pods' traffic
/// out of `eth0` masqueraded, and a REJECT with `icmp6-port-unreachable` for `fd01::7`.
const IP6_RULES: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d fd00:96::10/128 -p udp -m udp --dport 53 -j DNAT --to-destination [fd01::5]:5353
-A PREROUTING -d fd00:96::10/128 -p ipv6-icmp -j DNAT --to-destination fd01::6
-A POSTROUTING -s fd01::/64 -o eth0 -j MASQUERADE
COMMIT
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A FORWARD -d fd01::7/128 -p udp -j REJECT --reject-with icmp6-port-unreachable
COMMIT
";

fn ip6tables_steps() -> Vec<(String, &'static str, RawPacket, Option<&'static str>)> {
    vec![
        // A client's query to the Service: DNAT'd to the pod, the answer un-DNAT'd.
        (
            "svc".into(),
            "eth0",
            udp("fd00::2", 40000, "fd00:96::10", 53, 64),
            None,
        ),
        (
            "svc-answer".into(),
            "cni0",
            udp("fd01::5", 5353, "fd00::2", 40000, 64),
            Some("svc"),
        ),
        // A ping to the Service: DNAT'd to fd01::6 (the echo id kept), the reply un-DNAT'd.
        (
            "svc-ping".into(),
            "eth0",
            echo("fd00::2", "fd00:96::10", 128, 11),
            None,
        ),
        (
            "svc-pong".into(),
            "cni0",
            echo("fd01::6", "fd00::2", 129, 11),
            Some("svc-ping"),
        ),
        // The pod's port unreachable for the DNAT'd flow: RELATED, the quoted header's
        // destination translated back to the Service (nf_nat_icmpv6_reply_translation).
        (
            "svc-2".into(),
            "eth0",
            udp("fd00::2", 40000, "fd00:96::10", 53, 64),
            None,
        ),
        (
            "svc-unreach".into(),
            "cni0",
            quoting("fd01::5", "fd00::2", 1, 4, "svc-2"),
            None,
        ),
        // A pod's query out: MASQUERADE to eth0's fd00::1, the answer un-SNAT'd.
        (
            "masq".into(),
            "cni0",
            udp("fd01::5", 41000, "fd00::2", 53, 64),
            None,
        ),
        (
            "masq-answer".into(),
            "eth0",
            udp("fd00::2", 53, "fd00::1", 41000, 64),
            Some("masq"),
        ),
        // REJECT: the router's own ICMPv6 port unreachable, from fd00::1.
        (
            "rejected".into(),
            "eth0",
            udp("fd00::2", 42000, "fd01::7", 53, 64),
            None,
        ),
    ]
}

#[test]
fn ip6tables_dnat_masquerade_and_reject_match_the_kernel() {
    const TEST: &str = "ip6tables_dnat_masquerade_and_reject_match_the_kernel";
    let Some(lab) =
        kernel::lab_with_or_skip(TEST, &["sysctl", "ip6tables-restore"], &["/dev/net/tun"])
    else {
        return;
    };
    let steps = ip6tables_steps();
    let mut sc = Scenario::new()
        .sysctl("net.ipv6.conf.all.forwarding", "1")
        .tun("eth0", &["fd00::1/64"])
        .tun("cni0", &["fd01::1/64"])
        .rules6(IP6_RULES);
    for (label, dev, p, reply_to) in &steps {
        sc = sc.inject(label, dev, p.clone(), *reply_to, WAIT_MS);
    }
    let sc = sc
        .conntrack("list", &["-L", "-f", "ipv6"])
        .conntrack("list-ext", &["-L", "-f", "ipv6", "-o", "extended"]);
    let run = match lab.run(&sc) {
        Ok(r) => r,
        Err(e) => panic!("{TEST}: the lab run failed: {e}"),
    };
    let mut ns = nfsim_router();
    ns.restore_family(Family::Ipv6, IP6_RULES, false, false)
        .expect("nfsim takes the ip6tables rules");
    compare(&run, &mut ns, &steps, &[]);
}

/// The same router and packets as [`IP6_RULES`], through kube-proxy's nftables shape in an
/// `ip6` table instead: the Service in a `ipv6_addr . inet_proto . inet_service` verdict map,
/// `numgen` to the endpoint chain, `dnat to [fd01::5]:5353`, ICMPv6 echo to the Service
/// (`icmpv6 type echo-request`) DNAT'd to `fd01::6`, the pods' traffic out of `eth0`
/// masqueraded, `fd01::7` rejected through `@no-endpoint-services` (ICMPv6 port unreachable,
/// as nft_reject_ipv6 sends it), and an unallocated ClusterIP dropped by a prefix set.
const KP6_NFT: &str = "\
add table ip6 kube-proxy { comment \"rules for kube-proxy\" ; }
add set ip6 kube-proxy cluster-ips { type ipv6_addr ; comment \"Active ClusterIPs\" ; }
add map ip6 kube-proxy service-ips { type ipv6_addr . inet_proto . inet_service : verdict ; comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }
add map ip6 kube-proxy no-endpoint-services { type ipv6_addr . inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to services with no endpoints\" ; }
add chain ip6 kube-proxy cluster-ips-check
add chain ip6 kube-proxy filter-forward { type filter hook forward priority 0 ; }
add chain ip6 kube-proxy nat-prerouting { type nat hook prerouting priority -100 ; }
add chain ip6 kube-proxy nat-postrouting { type nat hook postrouting priority 100 ; }
add chain ip6 kube-proxy reject-chain { comment \"helper for @no-endpoint-services / @no-endpoint-nodeports\" ; }
add chain ip6 kube-proxy services
add chain ip6 kube-proxy service-endpoints-check
add chain ip6 kube-proxy service-AAAAAAAA-ns/dns/udp/dns
add chain ip6 kube-proxy endpoint-BBBBBBBB-ns/dns/udp/dns__fd01..5/5353
add rule ip6 kube-proxy cluster-ips-check ip6 daddr @cluster-ips counter reject comment \"Reject traffic to invalid ports of ClusterIPs\"
add rule ip6 kube-proxy cluster-ips-check ip6 daddr { fd00:96::/112 } counter drop comment \"Drop traffic to unallocated ClusterIPs\"
add rule ip6 kube-proxy filter-forward ct state new jump service-endpoints-check
add rule ip6 kube-proxy filter-forward ct state new jump cluster-ips-check
add rule ip6 kube-proxy nat-prerouting jump services
add rule ip6 kube-proxy nat-postrouting ip6 saddr fd01::/64 oifname \"eth0\" counter masquerade
add rule ip6 kube-proxy reject-chain counter reject
add rule ip6 kube-proxy services ip6 daddr . meta l4proto . th dport vmap @service-ips
add rule ip6 kube-proxy services ip6 daddr fd00:96::10 icmpv6 type echo-request counter dnat to fd01::6
add rule ip6 kube-proxy service-endpoints-check ip6 daddr . meta l4proto . th dport vmap @no-endpoint-services
add rule ip6 kube-proxy service-AAAAAAAA-ns/dns/udp/dns counter numgen random mod 1 vmap { 0 : goto endpoint-BBBBBBBB-ns/dns/udp/dns__fd01..5/5353 }
add rule ip6 kube-proxy endpoint-BBBBBBBB-ns/dns/udp/dns__fd01..5/5353 meta l4proto udp counter dnat to [fd01::5]:5353
add element ip6 kube-proxy cluster-ips { fd00:96::10 }
add element ip6 kube-proxy service-ips { fd00:96::10 . udp . 53 : goto service-AAAAAAAA-ns/dns/udp/dns }
add element ip6 kube-proxy no-endpoint-services { fd01::7 . udp . 53 comment \"ns/down:dns\" : goto reject-chain }
";

/// IPv6 through an `ip6` nftables table of kube-proxy's shape in the real kernel and in
/// nfsim: every packet that leaves, `conntrack -L -f ipv6` (plain, extended), `-E`, and
/// `nft list table ip6 kube-proxy` with its counters, byte for byte.
#[test]
fn nftables_ip6_dnat_masquerade_and_reject_match_the_kernel() {
    const TEST: &str = "nftables_ip6_dnat_masquerade_and_reject_match_the_kernel";
    let Some(lab) = kernel::lab_with_or_skip(TEST, &["sysctl", "nft"], &["/dev/net/tun"]) else {
        return;
    };
    let mut steps = ip6tables_steps();
    // A ClusterIP inside the service CIDR that no Service has: dropped, nothing sent.
    steps.push((
        "unallocated".into(),
        "eth0",
        udp("fd00::2", 43000, "fd00:96::99", 53, 64),
        None,
    ));
    // A ClusterIP's port no Service serves: rejected by `@cluster-ips`, the router's ICMPv6
    // port unreachable.
    steps.push((
        "wrong-port".into(),
        "eth0",
        udp("fd00::2", 44000, "fd00:96::10", 54, 64),
        None,
    ));
    let mut sc = Scenario::new()
        .sysctl("net.ipv6.conf.all.forwarding", "1")
        .tun("eth0", &["fd00::1/64"])
        .tun("cni0", &["fd01::1/64"])
        // The service CIDR routed (to the pods' link), so that an unallocated ClusterIP
        // reaches the forward hook instead of failing its route lookup.
        .route("fd00:96::/112 dev cni0")
        .command("load", &["nft", "-f", "-"], Some(KP6_NFT));
    for (label, dev, p, reply_to) in &steps {
        sc = sc.inject(label, dev, p.clone(), *reply_to, WAIT_MS);
    }
    let sc = sc
        .conntrack("list", &["-L", "-f", "ipv6"])
        .conntrack("list-ext", &["-L", "-f", "ipv6", "-o", "extended"])
        .command(
            "nft-list",
            &["nft", "list", "table", "ip6", "kube-proxy"],
            None,
        );
    let run = match lab.run(&sc) {
        Ok(r) => r,
        Err(e) => panic!("{TEST}: the lab run failed: {e}"),
    };
    let load = run.output("load");
    assert!(load.rc == 0, "{TEST}: nft -f failed: {}", load.stderr);
    let mut ns = nfsim_router();
    ns.add_route("fd00:96::/112".parse().unwrap(), None, ifn("cni0"))
        .unwrap();
    ns.nft_apply("kp6.nft", KP6_NFT, SimTime::ZERO)
        .expect("nfsim takes the ip6 table");
    compare(&run, &mut ns, &steps, &["unallocated"]);
    let listed_at = at(run.step("nft-list").at_ms);
    let ours = ns
        .nft()
        .list_table(sim_netfilter::nft::Family::Ip6, "kube-proxy", listed_at)
        .expect("the table");
    assert_eq!(
        run.output("nft-list").stdout,
        ours,
        "nft list table ip6 kube-proxy"
    );
    // Every counter met its packets: nothing agrees by being untouched.
    assert!(!ours.contains("counter packets 0 "), "{ours}");
}
