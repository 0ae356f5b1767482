//! kube-proxy's IPv6 and dual-stack proxiers against upstream: the IPv6 cases of
//! kubernetes' `pkg/proxy/iptables/proxier_test.go` and `pkg/proxy/nftables/proxier_test.go`
//! (`TestNodePorts`, `Test_servicePortEndpointChainNameBase`,
//! `TestProxier_OnServiceCIDRsChanged`), rendered by nfsim configured as each test's fake
//! proxier (`NewFakeProxier(ipt)` / `NewFakeProxier(v1.IPv6Protocol)`), compared with the
//! text upstream expects, and loaded into the real `ip6tables-restore` and `nft` of this
//! machine in a private network namespace.
//!
//! Upstream checks most IPv6 behaviour by packet flows (`runPacketFlowTests`); where it does,
//! this file checks the rules those flows go through (the NodePort jump, the family's
//! addresses), and runs IPv6 packets through the nftables proxier's `ip6 kube-proxy` table
//! in a node's namespace.

use nfsim::k8s::{parse_objects, Cidr, IpFamily};
use nfsim::kubeproxy::{
    iptables_command, KubeProxy, MemConntrack, NodePortAddresses, ProxierConfig, ProxyMode,
    SyncOutput, SyncTiming, V133,
};
use sim_core::SimTime;
use std::net::IpAddr;

#[path = "support/kernel.rs"]
mod kernel;
#[path = "support/knftables_fake.rs"]
mod knftables_fake;

use kernel::tools;

use knftables_fake::{sort_transaction, FakeTable};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/tests/fixtures/kubeproxy-upstream/{name}")).unwrap()
}

/// The fake network of both `NewFakeProxier`s: `lo` with 127.0.0.1 and ::1, `eth0` with
/// testNodeIP, testNodeIPAlt, testExternalIP, testNodeIPv6, testNodeIPv6Alt.
fn fake_interface_addrs() -> Vec<IpAddr> {
    [
        "127.0.0.1",
        "::1",
        "192.168.0.2",
        "192.168.1.2",
        "192.168.99.11",
        "2001:db8::1",
        "2001:db8:1::2",
    ]
    .iter()
    .map(|a| a.parse().unwrap())
    .collect()
}

fn cidrs(v: &[&str]) -> Vec<Cidr> {
    v.iter().map(|c| c.parse().unwrap()).collect()
}

/// iptables `NewFakeProxier(ipt)`: pod CIDR 10.0.0.0/8 or fd00:10::/64 by the fake's family,
/// nodeIP testNodeIP (the IPv4 one, for both families), localhost NodePorts, nfacct counters
/// present, no `--random-fully`; `nodePortAddresses` as the test case sets it.
fn iptables_fake(family: IpFamily, localhost: bool, npa: Option<&[&str]>) -> ProxierConfig {
    let pod = if family == IpFamily::IPv4 {
        "10.0.0.0/8"
    } else {
        "fd00:10::/64"
    };
    let mut cfg = ProxierConfig::new(
        "test-node",
        "192.168.0.2".parse().unwrap(),
        pod.parse().unwrap(),
    );
    cfg.family = family;
    cfg.nfacct = true;
    cfg.random_fully = false;
    cfg.localhost_node_ports = localhost;
    cfg.node_port_addresses =
        NodePortAddresses::new(family, &cidrs(npa.unwrap_or(&[]))).resolve(&fake_interface_addrs());
    cfg
}

/// nftables `NewFakeProxier(family)`: node IP, pod CIDR and service CIDR of the family,
/// `nodePortAddresses` [192.168.0.2/32, 2001:db8::1/128] read for the family.
fn nftables_fake(family: IpFamily) -> ProxierConfig {
    let (node, pod, svc) = match family {
        IpFamily::IPv4 => ("192.168.0.2", "10.0.0.0/8", "172.30.0.0/16"),
        IpFamily::IPv6 => ("2001:db8::1", "fd00:10::/64", "fd00:10:96::/112"),
    };
    let mut cfg = ProxierConfig::new("test-node", node.parse().unwrap(), pod.parse().unwrap());
    cfg.mode = ProxyMode::Nftables;
    cfg.service_cidrs = vec![svc.parse().unwrap()];
    cfg.node_port_addresses =
        NodePortAddresses::new(family, &cidrs(&["192.168.0.2/32", "2001:db8::1/128"]))
            .resolve(&fake_interface_addrs());
    cfg
}

/// `TestNodePorts`' objects for a family: NodePort service ns1/svc1 (port 80, NodePort
/// 3001) with endpoints epIP1 (no node) and epIP2 (on test-node).
fn node_port_objects(family: IpFamily) -> String {
    let (svc, ep1, ep2) = match family {
        IpFamily::IPv4 => ("172.30.0.41", "10.180.0.1", "10.180.2.1"),
        IpFamily::IPv6 => ("fd00:172:30::41", "fd00:10:180::1", "fd00:10:180::2:1"),
    };
    format!(
        r#"
kind: Service
metadata: {{name: svc1, namespace: ns1}}
spec: {{type: NodePort, clusterIP: "{svc}", ports: [{{name: p80, port: 80, protocol: TCP, nodePort: 3001}}]}}
---
kind: EndpointSlice
metadata: {{name: svc1-1, namespace: ns1, labels: {{kubernetes.io/service-name: svc1}}}}
addressType: {family}
endpoints: [{{addresses: ["{ep1}"]}}, {{addresses: ["{ep2}"], nodeName: test-node}}]
ports: [{{name: p80, port: 80, protocol: TCP}}]
"#
    )
}

/// The first (full) sync of a proxier with `cfg` that has seen `objects`.
fn first_sync(cfg: ProxierConfig, objects: &str) -> SyncOutput {
    let mut kp = KubeProxy::new(
        cfg,
        SyncTiming::default(),
        Box::new(V133::default()),
        SimTime::ZERO,
    );
    for o in parse_objects(objects).unwrap_or_else(|e| panic!("{e}")) {
        kp.upsert(SimTime::ZERO, o);
    }
    let t = kp.poll_timeout().unwrap();
    let out = kp.on_timeout(t).expect("a sync is due");
    kp.complete_sync(t, Ok(()), &mut MemConntrack::default());
    out
}

/// The `-A` lines of `chain` in `table` of a restore payload, in order.
fn chain_rules(restore: &str, table: &str, chain: &str) -> Vec<String> {
    let mut in_table = false;
    let prefix = format!("-A {chain} ");
    let mut v = Vec::new();
    for l in restore.lines() {
        if let Some(t) = l.strip_prefix('*') {
            in_table = t == table;
        } else if in_table && l.starts_with(&prefix) {
            v.push(l.to_string());
        }
    }
    v
}

const NODEPORTS_COMMENT: &str = "-m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";

/// One case of upstream's iptables `TestNodePorts` (proxier_test.go, kubernetes master of
/// 2025: name, family, localhostNodePorts, nodePortAddresses, expectFirewall), and the
/// NodePort jumps its flows go through: proxier.go `syncProxyRules` writes one
/// `-m addrtype --dst-type LOCAL` jump when the addresses match everything (`! -d ::1/128`
/// for IPv6, `! -d 127.0.0.0/8` for IPv4 without localhost NodePorts), else one `-d IP`
/// jump per node address (`GetNodeIPs`) of the family.
struct NodePortCase {
    name: &'static str,
    family: IpFamily,
    localhost: bool,
    npa: Option<&'static [&'static str]>,
    expect_firewall: bool,
    jumps: &'static [&'static str],
}

const IPTABLES_NODE_PORT_CASES: &[NodePortCase] = &[
    NodePortCase {
        name: "ipv4, localhost-nodeports enabled",
        family: IpFamily::IPv4,
        localhost: true,
        npa: None,
        expect_firewall: true,
        jumps: &["-m addrtype --dst-type LOCAL"],
    },
    NodePortCase {
        name: "ipv4, localhost-nodeports disabled",
        family: IpFamily::IPv4,
        localhost: false,
        npa: None,
        expect_firewall: false,
        jumps: &["-m addrtype --dst-type LOCAL ! -d 127.0.0.0/8"],
    },
    NodePortCase {
        name: "ipv4, localhost-nodeports disabled, localhost in nodeport-addresses",
        family: IpFamily::IPv4,
        localhost: false,
        npa: Some(&["192.168.0.0/24", "127.0.0.1/32"]),
        expect_firewall: false,
        jumps: &["-d 192.168.0.2"],
    },
    NodePortCase {
        name: "ipv4, localhost-nodeports enabled, multiple nodeport-addresses",
        family: IpFamily::IPv4,
        localhost: false,
        npa: Some(&["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"]),
        expect_firewall: false,
        jumps: &["-d 192.168.0.2", "-d 192.168.1.2"],
    },
    NodePortCase {
        name: "ipv6, localhost-nodeports enabled",
        family: IpFamily::IPv6,
        localhost: true,
        npa: None,
        expect_firewall: false,
        jumps: &["-m addrtype --dst-type LOCAL ! -d ::1/128"],
    },
    NodePortCase {
        name: "ipv6, localhost-nodeports disabled",
        family: IpFamily::IPv6,
        localhost: false,
        npa: None,
        expect_firewall: false,
        jumps: &["-m addrtype --dst-type LOCAL ! -d ::1/128"],
    },
    NodePortCase {
        name: "ipv6, localhost-nodeports disabled, multiple nodeport-addresses",
        family: IpFamily::IPv6,
        localhost: false,
        npa: Some(&["192.168.0.0/24", "192.168.1.0/24", "2001:db8::/64"]),
        expect_firewall: false,
        jumps: &["-d 2001:db8::1"],
    },
];

/// The anti-martian rule upstream expects in KUBE-FIREWALL when `expectFirewall`
/// (`assertIPTablesChainEqual(..., kubeletFirewallChain, expected, ...)`), with the mark
/// formatting of the real proxier.
const FIREWALL_RULE: &str = "-A KUBE-FIREWALL -m comment --comment \"block incoming localnet connections\" -d 127.0.0.0/8 ! -s 127.0.0.0/8 -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP";

#[test]
fn iptables_node_ports_are_upstreams_for_both_families() {
    for c in IPTABLES_NODE_PORT_CASES {
        let out = first_sync(
            iptables_fake(c.family, c.localhost, c.npa),
            &node_port_objects(c.family),
        );
        let fw = chain_rules(&out.restore, "filter", "KUBE-FIREWALL");
        let want_fw: Vec<String> = if c.expect_firewall {
            vec![FIREWALL_RULE.to_string()]
        } else {
            Vec::new()
        };
        assert_eq!(fw, want_fw, "{}: KUBE-FIREWALL", c.name);
        let np: Vec<String> = chain_rules(&out.restore, "nat", "KUBE-SERVICES")
            .into_iter()
            .filter(|l| l.ends_with("-j KUBE-NODEPORTS"))
            .collect();
        let want_np: Vec<String> = c
            .jumps
            .iter()
            .map(|m| format!("-A KUBE-SERVICES {NODEPORTS_COMMENT} {m} -j KUBE-NODEPORTS"))
            .collect();
        assert_eq!(np, want_np, "{}: NodePort jumps\n{}", c.name, out.restore);
        // The NodePort jump is the last rule of KUBE-SERVICES.
        let services = chain_rules(&out.restore, "nat", "KUBE-SERVICES");
        assert!(services.last().unwrap().ends_with("-j KUBE-NODEPORTS"));
        // The localhost nfacct rule (`-d 127.0.0.0/8 ... localhost_nps_accepted_pkts`)
        // only on IPv4 with localhost NodePorts.
        assert_eq!(
            out.restore.contains("localhost_nps_accepted_pkts"),
            c.family == IpFamily::IPv4 && c.localhost,
            "{}",
            c.name
        );
        for j in &out.jump_rules {
            assert_eq!(j.family, c.family);
            assert!(j.command().starts_with(iptables_command(c.family)));
        }
    }
}

/// An IPv6 proxier's payload: ClusterIP, NodePort and endpoints of the family, with
/// `[addr]:port` DNAT targets and the `KUBE-SEP` hash of `[addr]:port`.
#[test]
fn iptables_ipv6_service_rules() {
    let out = first_sync(
        iptables_fake(IpFamily::IPv6, true, None),
        &node_port_objects(IpFamily::IPv6),
    );
    // KUBE-SVC-/KUBE-EXT- hash the port name and protocol only: the IPv4 proxier's names.
    // KUBE-SEP- hashes "ns1/svc1:p80" + "tcp" + "[fd00:10:180::1]:80" (net.JoinHostPort):
    // printf 'ns1/svc1:p80tcp[fd00:10:180::1]:80' | sha256sum | xxd -r -p | base32 | cut -c1-16
    let want = [
        "-A KUBE-SERVICES -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d fd00:172:30::41 --dport 80 -j KUBE-SVC-XPGD46QRK7WJZT7O",
        "-A KUBE-NODEPORTS -m comment --comment ns1/svc1:p80 -m tcp -p tcp --dport 3001 -j KUBE-EXT-XPGD46QRK7WJZT7O",
        "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d fd00:172:30::41 --dport 80 ! -s fd00:10::/64 -j KUBE-MARK-MASQ",
        "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> [fd00:10:180::1]:80\" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-OGYCNMB4EMRUSJ6N",
        "-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> [fd00:10:180::2:1]:80\" -j KUBE-SEP-APSFVWOCYOGIDJM2",
        "-A KUBE-SEP-OGYCNMB4EMRUSJ6N -m comment --comment ns1/svc1:p80 -s fd00:10:180::1 -j KUBE-MARK-MASQ",
        "-A KUBE-SEP-OGYCNMB4EMRUSJ6N -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination [fd00:10:180::1]:80",
        "-A KUBE-SEP-APSFVWOCYOGIDJM2 -m comment --comment ns1/svc1:p80 -m tcp -p tcp -j DNAT --to-destination [fd00:10:180::2:1]:80",
    ];
    for w in want {
        assert!(
            out.restore.lines().any(|l| l == w),
            "missing {w}\n{}",
            out.restore
        );
    }
    // Nothing of the other family.
    assert!(!out.restore.contains("10.180."), "{}", out.restore);
}

/// The same Service and slices seen by both proxiers of a dual-stack node (the
/// metaproxier hands every object to both): each writes exactly what it writes for a
/// single-stack Service of its family, and nothing of the other family.
#[test]
fn dual_stack_service_splits_into_two_single_stack_proxiers() {
    let dual = r#"
kind: Service
metadata: {name: svc1, namespace: ns1}
spec:
  type: NodePort
  clusterIP: 172.30.0.41
  clusterIPs: [172.30.0.41, "fd00:172:30::41"]
  ipFamilies: [IPv4, IPv6]
  ipFamilyPolicy: RequireDualStack
  externalIPs: [192.168.99.11, "2001:db8:99::11"]
  ports: [{name: p80, port: 80, protocol: TCP, nodePort: 3001}]
---
kind: EndpointSlice
metadata: {name: svc1-v4, namespace: ns1, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv4
endpoints: [{addresses: ["10.180.0.1"]}, {addresses: ["10.180.2.1"], nodeName: test-node}]
ports: [{name: p80, port: 80, protocol: TCP}]
---
kind: EndpointSlice
metadata: {name: svc1-v6, namespace: ns1, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv6
endpoints: [{addresses: ["fd00:10:180::1"]}, {addresses: ["fd00:10:180::2:1"], nodeName: test-node}]
ports: [{name: p80, port: 80, protocol: TCP}]
"#;
    let single = |family: IpFamily| {
        let (ip, ext) = match family {
            IpFamily::IPv4 => ("172.30.0.41", "192.168.99.11"),
            IpFamily::IPv6 => ("fd00:172:30::41", "2001:db8:99::11"),
        };
        let objs = node_port_objects(family).replacen(
            "ports: [{name: p80, port: 80, protocol: TCP, nodePort: 3001}]}",
            &format!("externalIPs: [\"{ext}\"], ports: [{{name: p80, port: 80, protocol: TCP, nodePort: 3001}}]}}"),
            1,
        );
        assert!(objs.contains(ip) && objs.contains(ext));
        objs
    };
    for mode in [ProxyMode::Iptables, ProxyMode::Nftables] {
        for family in [IpFamily::IPv4, IpFamily::IPv6] {
            let cfg = || {
                let mut c = nftables_fake(family);
                c.mode = mode;
                c
            };
            let a = first_sync(cfg(), dual);
            let b = first_sync(cfg(), &single(family));
            assert_eq!(a.restore, b.restore, "{mode:?} {family}");
            let other = match family {
                IpFamily::IPv4 => ["fd00:", "2001:db8:99"],
                IpFamily::IPv6 => ["172.30.0.41", "10.180.0.1"],
            };
            for o in other {
                assert!(
                    !a.restore.contains(o),
                    "{mode:?} {family}: {o}\n{}",
                    a.restore
                );
            }
        }
    }
}

/// `NewFakeProxier(v1.IPv6Protocol)` and `TestNodePorts`' "ipv6" case in nftables mode:
/// the whole `ip6 kube-proxy` table, compared as upstream compares
/// (`assertNFTablesTransactionEqual`, both sides sorted).
#[test]
fn nftables_ipv6_node_port_table_is_upstreams() {
    let out = first_sync(
        nftables_fake(IpFamily::IPv6),
        &node_port_objects(IpFamily::IPv6),
    );
    let mut fake = FakeTable::default();
    for t in out.nft_cleanup.iter().chain([&out.restore]) {
        fake.run(t);
    }
    let ours = sort_transaction(&fake.dump().replace("0x00004000", "0x4000"));
    let want = sort_transaction(&format!(
        "{}\n{}",
        fixture("base6.nft"),
        fixture("nodeports6.nft")
    ));
    if ours != want {
        let (o, w): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), want.lines().collect());
        let missing: Vec<&&str> = w.iter().filter(|l| !o.contains(l)).collect();
        let extra: Vec<&&str> = o.iter().filter(|l| !w.contains(l)).collect();
        panic!("tables differ\nmissing: {missing:#?}\nextra: {extra:#?}\n\nfull:\n{ours}");
    }
}

/// The transactions through nfsim's nftables: `nft list table ip6 kube-proxy`.
fn nfsim_ip6_listing(txs: &[String]) -> String {
    let mut rs = sim_netfilter::nft::NftRuleset::new();
    for (i, t) in txs.iter().enumerate() {
        rs.apply(&format!("{i}.nft"), t, SimTime::ZERO)
            .unwrap_or_else(|e| panic!("nfsim refused the IPv6 transaction: {e}\n{t}"));
    }
    rs.list_table(sim_netfilter::nft::Family::Ip6, "kube-proxy", SimTime::ZERO)
        .expect("the table exists")
}

/// nfsim loads the IPv6 proxier's transaction (`ip6` family, `ipv6_addr` sets and maps,
/// `ip6 saddr|daddr`, bracketed DNAT targets) and lists what upstream's table holds.
#[test]
fn nftables_ipv6_transaction_loads_into_nfsim() {
    let out = first_sync(
        nftables_fake(IpFamily::IPv6),
        &node_port_objects(IpFamily::IPv6),
    );
    let txs: Vec<String> = out.nft_cleanup.into_iter().chain([out.restore]).collect();
    let ours = nfsim_ip6_listing(&txs);
    for w in [
        "table ip6 kube-proxy {",
        "\t\ttype ipv6_addr . inet_proto . inet_service : verdict",
        "fd00:172:30::41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80",
        "meta l4proto tcp dnat to [fd00:10:180::1]:80",
        "ip6 saddr != fd00:10::/64 jump mark-for-masquerade",
        "ip6 daddr fd00:10:96::/112 drop comment \"Drop traffic to unallocated ClusterIPs\"",
    ] {
        assert!(ours.contains(w), "nfsim's listing lacks {w:?}:\n{ours}");
    }
}

/// The same transaction through the real nft: accepted, and listed as table `ip6
/// kube-proxy` with the IPv6 ClusterIP element and the bracketed DNAT target.
#[test]
fn nftables_ipv6_transaction_loads_into_the_real_nft() {
    let out = first_sync(
        nftables_fake(IpFamily::IPv6),
        &node_port_objects(IpFamily::IPv6),
    );
    if !tools::have_or_skip(
        "nftables_ipv6_transaction_loads_into_the_real_nft",
        &["nft", "unshare"],
    ) {
        return;
    }
    let txs: Vec<String> = out.nft_cleanup.into_iter().chain([out.restore]).collect();
    let real = tools::real_nft_table_listing(&txs, "ip6 kube-proxy")
        .unwrap_or_else(|e| panic!("real nft refused the IPv6 transaction: {e}"));
    // nfsim's own listing of the same transactions, byte for byte.
    assert_eq!(nfsim_ip6_listing(&txs), real);
    for w in [
        "table ip6 kube-proxy {",
        "type ipv6_addr",
        "fd00:172:30::41 . tcp . 80 : goto service-ULMVA6XW-ns1/svc1/tcp/p80",
        "dnat to [fd00:10:180::1]:80",
        "ip6 saddr != fd00:10::/64 jump mark-for-masquerade",
        "ip6 daddr fd00:10:96::/112 drop comment \"Drop traffic to unallocated ClusterIPs\"",
    ] {
        assert!(real.contains(w), "real nft listing lacks {w:?}:\n{real}");
    }
}

/// `TestProxier_OnServiceCIDRsChanged`: each proxier keeps the ServiceCIDRs of its family,
/// joined with commas, in `Drop traffic to unallocated ClusterIPs`.
#[test]
fn each_nftables_proxier_keeps_the_service_cidrs_of_its_family() {
    let all = cidrs(&[
        "172.30.0.0/16",
        "172.50.0.0/16",
        "fd00:10:96::/112",
        "fd00:172:30::/112",
    ]);
    for (family, want) in [
        (
            IpFamily::IPv4,
            "add rule ip kube-proxy cluster-ips-check ip daddr { 172.30.0.0/16,172.50.0.0/16 } drop comment \"Drop traffic to unallocated ClusterIPs\"",
        ),
        (
            IpFamily::IPv6,
            "add rule ip6 kube-proxy cluster-ips-check ip6 daddr { fd00:10:96::/112,fd00:172:30::/112 } drop comment \"Drop traffic to unallocated ClusterIPs\"",
        ),
    ] {
        let mut cfg = nftables_fake(family);
        cfg.service_cidrs = all.clone();
        let out = first_sync(cfg, "");
        assert!(
            out.restore.lines().any(|l| l == want),
            "{family}: no {want}\n{}",
            out.restore
        );
    }
}

/// `Test_servicePortEndpointChainNameBase`'s "ipv6" case: upstream's expected name for its
/// literal endpoint string. That string writes one zero group as `::`; kube-proxy reads a
/// slice's address with `ParseIPSloppy` and prints it back as Go's netip does (RFC 5952
/// §4.2.2: `::` never stands for a single zero group), as Rust's `Ipv6Addr` does, so an
/// endpoint at that address gets the chain of `...12.0.a1b2...`.
#[test]
fn nftables_ipv6_endpoint_chain_names_are_upstreams() {
    use nfsim::kubeproxy::nftables::{endpoint_chain_base, hash_and_truncate};
    use nfsim::kubeproxy::{EndpointInfo, ServicePortName};
    assert_eq!(
        hash_and_truncate("testing/service/tcp/http__fd80.abcd.12..a1b2.c3d4.e5f6.9999/80"),
        "U7E2ET36-testing/service/tcp/http__fd80.abcd.12..a1b2.c3d4.e5f6.9999/80"
    );
    let spn = ServicePortName::new("testing", "service", "http", Default::default());
    let ep = EndpointInfo {
        ip: "fd80:abcd:12::a1b2:c3d4:e5f6:9999".parse().unwrap(),
        port: 80,
        is_local: false,
        ready: true,
        serving: true,
        terminating: false,
        hints: Default::default(),
    };
    let name = endpoint_chain_base(&spn, &ep);
    assert!(
        name.ends_with("-testing/service/tcp/http__fd80.abcd.12.0.a1b2.c3d4.e5f6.9999/80"),
        "{name}"
    );
    assert_eq!(
        name,
        hash_and_truncate("testing/service/tcp/http__fd80.abcd.12.0.a1b2.c3d4.e5f6.9999/80")
    );
}

/// Runs `script` in a private network namespace with `stdin`; `None` after a skip message
/// where a program is missing.
fn in_netns(test: &str, tools_needed: &[&str], script: &str, stdin: &str) -> Option<String> {
    let mut needed = vec!["bash", "unshare"];
    needed.extend_from_slice(tools_needed);
    if !tools::have_or_skip(test, &needed) {
        return None;
    }
    let (ok, text) = tools::in_private_netns(script, stdin);
    assert!(ok, "{script}\n{text}");
    Some(text)
}

/// The IPv6 proxier's full sync (jump rules, then `ip6tables-restore --noflush`) in the real
/// ip6tables; `ip6tables-save` shows the bracketed DNAT target and REJECT as ip6tables
/// defaults it for IPv6 (`icmp6-port-unreachable`). The same sync loaded into nfsim's
/// namespace saves byte for byte as the real one.
#[test]
fn real_ip6tables_restore_accepts_the_ipv6_proxier() {
    // A Service without endpoints as well: its REJECT rule.
    let objs = format!(
        "{}---\nkind: Service\nmetadata: {{name: svc2, namespace: ns1}}\nspec: {{clusterIP: \"fd00:172:30::42\", ports: [{{name: p80, port: 80, protocol: TCP}}]}}\n",
        node_port_objects(IpFamily::IPv6)
    );
    let mut cfg = iptables_fake(IpFamily::IPv6, true, None);
    cfg.nfacct = false;
    let out = first_sync(cfg, &objs);
    let mut script = String::from("set -e\n");
    for j in &out.jump_rules {
        script.push_str(&format!(
            "ip6tables -t {t} -N {c} 2>/dev/null || true; ip6tables -t {t} -C {ch} {r} 2>/dev/null || {cmd}\n",
            t = j.table.name(),
            c = j.target,
            ch = j.chain,
            r = j.rule_text(),
            cmd = j.command()
        ));
    }
    script.push_str("ip6tables-restore --noflush\nip6tables-save\n");
    // The same sync into nfsim's namespace: EnsureChain, EnsureRule (prepend), then
    // `ip6tables-restore --noflush`.
    let mut ns =
        sim_netfilter::netns::Netns::new(sim_netfilter::netns::NetnsConfig::new("test-node", 1));
    for j in &out.jump_rules {
        let t = sim_netfilter::Table::from_name(j.table.name()).unwrap();
        let _ = ns.ip6tables(t, &format!("-N {}", j.target));
        ns.ip6tables(t, &format!("-I {} {}", j.chain, j.rule_text()))
            .unwrap_or_else(|e| panic!("{}: {e}", j.command()));
    }
    ns.restore_family(sim_netfilter::Family::Ipv6, &out.restore, true, false)
        .unwrap_or_else(|e| panic!("nfsim's ip6tables-restore refused the payload: {e}"));
    let ours = ns.save_family(sim_netfilter::Family::Ipv6, false);
    let Some(save) = in_netns(
        "real_ip6tables_restore_accepts_the_ipv6_proxier",
        &["ip6tables", "ip6tables-restore", "ip6tables-save"],
        &script,
        &out.restore,
    ) else {
        return;
    };
    for w in [
        "-A KUBE-SEP-OGYCNMB4EMRUSJ6N -p tcp -m comment --comment \"ns1/svc1:p80\" -m tcp -j DNAT --to-destination [fd00:10:180::1]:80",
        "-A KUBE-SERVICES -d fd00:172:30::42/128 -p tcp -m comment --comment \"ns1/svc2:p80 has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp6-port-unreachable",
        "-A KUBE-SERVICES ! -d ::1/128 -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS",
    ] {
        assert!(save.lines().any(|l| l == w), "ip6tables-save lacks {w}\n{save}");
    }
    // nfsim's ip6tables-save of the namespace, line for line the real one's (less its
    // dated comment lines).
    let real: Vec<&str> = save.lines().filter(|l| !l.starts_with('#')).collect();
    let mine: Vec<&str> = ours.lines().filter(|l| !l.starts_with('#')).collect();
    for (i, (a, b)) in real.iter().zip(&mine).enumerate() {
        assert_eq!(
            a,
            b,
            "line {} differs\nreal:\n{save}\nnfsim:\n{ours}",
            i + 1
        );
    }
    assert_eq!(real.len(), mine.len(), "real:\n{save}\nnfsim:\n{ours}");
}

/// The stale-UDP cleanup of every release runs per proxier (`CleanStaleEntries` in each
/// family's sync): on a dual-stack node whose DNS endpoints moved in both families, the
/// IPv4 proxier deletes the IPv4 entry and the IPv6 proxier the IPv6 one, each with
/// filters of its own family only.
#[test]
fn each_family_cleans_its_own_stale_udp_entries() {
    use nfsim::kubeproxy::{ConntrackCleanup, CtEntry, CtTuple, Latest, V131, V132};
    let objs = |v4: &str, v6: &str| {
        format!(
            r#"
kind: Service
metadata: {{name: kube-dns, namespace: kube-system}}
spec:
  clusterIP: 10.96.0.10
  clusterIPs: [10.96.0.10, "fd00:10:96::a"]
  ipFamilies: [IPv4, IPv6]
  ipFamilyPolicy: PreferDualStack
  ports: [{{name: dns, port: 53, protocol: UDP}}]
---
kind: EndpointSlice
metadata: {{name: kube-dns-v4, namespace: kube-system, labels: {{kubernetes.io/service-name: kube-dns}}}}
addressType: IPv4
endpoints: [{{addresses: ["{v4}"]}}]
ports: [{{name: dns, port: 53, protocol: UDP}}]
---
kind: EndpointSlice
metadata: {{name: kube-dns-v6, namespace: kube-system, labels: {{kubernetes.io/service-name: kube-dns}}}}
addressType: IPv6
endpoints: [{{addresses: ["{v6}"]}}]
ports: [{{name: dns, port: 53, protocol: UDP}}]
"#
        )
    };
    let entry = |client: &str, svc: &str, ep: &str| {
        let (c, s, e): (IpAddr, IpAddr, IpAddr) = (
            client.parse().unwrap(),
            svc.parse().unwrap(),
            ep.parse().unwrap(),
        );
        CtEntry {
            proto: 17,
            orig: CtTuple {
                src: c,
                dst: s,
                sport: 40000,
                dport: 53,
            },
            reply: CtTuple {
                src: e,
                dst: c,
                sport: 53,
                dport: 40000,
            },
        }
    };
    let v4 = entry("10.244.2.5", "10.96.0.10", "10.244.1.7");
    let v6 = entry("fd00:10:244:2::5", "fd00:10:96::a", "fd00:10:244:1::7");
    type Make = fn() -> Box<dyn ConntrackCleanup>;
    let releases: Vec<(&str, Make)> = vec![
        ("v1.31", || Box::new(V131::default())),
        ("v1.32", || Box::new(V132::default())),
        ("v1.33", || Box::new(V133::default())),
        ("latest", || Box::new(Latest::default())),
    ];
    for (release, make) in releases {
        let mut ct = nfsim::kubeproxy::MemConntrack::default();
        let mut proxiers: Vec<KubeProxy> = [
            ("192.168.0.2", "10.244.0.0/16"),
            ("2001:db8::1", "fd00:10:244::/56"),
        ]
        .iter()
        .map(|(ip, pods)| {
            KubeProxy::new(
                ProxierConfig::new("test-node", ip.parse().unwrap(), pods.parse().unwrap()),
                SyncTiming::default(),
                make(),
                SimTime::ZERO,
            )
        })
        .collect();
        let mut now = SimTime::ZERO;
        for (step, (a, b)) in [
            ("10.244.1.7", "fd00:10:244:1::7"),
            ("10.244.1.8", "fd00:10:244:1::8"),
        ]
        .iter()
        .enumerate()
        {
            if step == 1 {
                // Flows through the first endpoints, after the first sync (which deleted
                // every entry to the newly active service IPs, in v1.31).
                ct.entries = vec![v4, v6];
            }
            for kp in proxiers.iter_mut() {
                for o in parse_objects(&objs(a, b)).unwrap() {
                    kp.upsert(now, o);
                }
            }
            let mut deleted = Vec::new();
            for kp in proxiers.iter_mut() {
                let t = kp.poll_timeout().unwrap().max(now);
                let _ = kp.on_timeout(t).expect("a sync is due");
                let family = kp.config().family;
                let report = kp.complete_sync(t, Ok(()), &mut ct);
                for d in &report.deletions {
                    for a in [d.filter.orig_dst, d.filter.reply_src, d.filter.orig_src]
                        .into_iter()
                        .flatten()
                    {
                        assert!(
                            family.contains(a),
                            "{release}: {family} proxier: {}",
                            d.filter
                        );
                    }
                }
                deleted.push((family, report.deleted()));
                now = t;
            }
            if step == 1 {
                assert_eq!(
                    deleted,
                    vec![(IpFamily::IPv4, 1), (IpFamily::IPv6, 1)],
                    "{release}"
                );
                assert!(ct.entries.is_empty(), "{release}: {:?}", ct.entries);
            }
            now += sim_core::SimDuration::from_secs(5);
        }
    }
}

/// The first flows of upstream's iptables `TestNodePorts` "ipv6" cases
/// (`runPacketFlowTests`) through nfsim's namespace holding the IPv6 proxier's rules: "pod to
/// cluster IP" reaches one of the two endpoints unmasqueraded, "external to nodePort"
/// reaches one of them masqueraded (source rewritten to the node's address on the way out).
#[test]
fn ipv6_node_port_flows_are_upstreams_through_nfsim() {
    use sim_core::{IfName, Packet, TcpFlags};
    use sim_netfilter::netns::{Egress, Ingress, Netns, NetnsConfig};
    // (nfacct counters are a detail of the fake; a real node without them gets no -m nfacct.)
    let mut cfg = iptables_fake(IpFamily::IPv6, true, None);
    cfg.nfacct = false;
    let out = first_sync(cfg, &node_port_objects(IpFamily::IPv6));
    let ifn = |s: &str| IfName::new(s).unwrap();
    let ip = |s: &str| -> IpAddr { s.parse().unwrap() };
    let mut ns = Netns::new(NetnsConfig::new("test-node", 1));
    ns.add_interface(
        ifn("eth0"),
        &[(ip("2001:db8::1"), 64), (ip("2001:db8:1::2"), 64)],
    )
    .unwrap();
    ns.add_interface(
        ifn("cni0"),
        &[(ip("fd00:10::1"), 64), (ip("fd00:10:180::ff"), 64)],
    )
    .unwrap();
    for j in &out.jump_rules {
        let t = sim_netfilter::Table::from_name(j.table.name()).unwrap();
        let _ = ns.ip6tables(t, &format!("-N {}", j.target));
        ns.ip6tables(t, &format!("-I {} {}", j.chain, j.rule_text()))
            .unwrap();
    }
    ns.restore_family(sim_netfilter::Family::Ipv6, &out.restore, true, false)
        .unwrap();
    let eps = [ip("fd00:10:180::1"), ip("fd00:10:180::2:1")];
    let mut flow = |src: &str, dst: &str, from: &str| {
        let p = Packet::tcp(src.parse().unwrap(), dst.parse().unwrap(), TcpFlags::SYN);
        let r = ns.process(SimTime::ZERO, p, Ingress::Interface(ifn(from)));
        match r.out.first() {
            Some(Egress::Transmit { packet, .. }) => *packet,
            other => panic!("{src} -> {dst}: {other:?} ({:?})", r.fate),
        }
    };
    // pod to cluster IP: DNAT to an endpoint, source kept (masq: false).
    let p = flow("[fd00:10::2]:40000", "[fd00:172:30::41]:80", "cni0");
    assert!(eps.contains(&p.dst) && p.dport() == Some(80), "{p}");
    assert_eq!(p.src, ip("fd00:10::2"), "{p}");
    // external to nodePort: DNAT to an endpoint, masqueraded (masq: true).
    let p = flow("[2600:5200::1]:40001", "[2001:db8::1]:3001", "eth0");
    assert!(eps.contains(&p.dst) && p.dport() == Some(80), "{p}");
    assert_ne!(p.src, ip("2600:5200::1"), "{p}");
}

/// The IPv6 proxier's `ip6 kube-proxy` table acting in a node's namespace: a client outside
/// the cluster reaches the ClusterIP `[fd00:172:30::41]:80`, DNAT'd by the service's
/// `numgen` to one of its two endpoints and masqueraded (`ip6 saddr != fd00:10::/64`) to the
/// pods' link's address; a Service without endpoints is rejected with ICMPv6 port
/// unreachable (`@no-endpoint-services` to `reject-chain`, nft_reject_ipv6).
#[test]
fn the_ipv6_proxiers_table_dnats_masquerades_and_rejects_ipv6_packets() {
    use sim_core::{IfName, Packet, TcpFlags, L4};
    use sim_netfilter::netns::{Egress, Ingress, Netns, NetnsConfig};
    let objects = format!(
        "{}\n---\nkind: Service\nmetadata: {{name: svc2, namespace: ns1}}\n\
         spec: {{clusterIP: \"fd00:172:30::42\", ports: [{{name: p80, port: 80, protocol: TCP}}]}}\n",
        node_port_objects(IpFamily::IPv6)
    );
    let out = first_sync(nftables_fake(IpFamily::IPv6), &objects);
    let ifn = |s: &str| IfName::new(s).unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let mut ns = Netns::new(NetnsConfig::new("test-node", 1));
    ns.add_interface(ifn("eth0"), &[(ip("2001:db8::1"), 64)])
        .unwrap();
    ns.add_interface(ifn("cni0"), &[(ip("fd00:10:180::fe"), 64)])
        .unwrap();
    ns.add_route(
        "::/0".parse().unwrap(),
        Some(ip("2001:db8::fe")),
        ifn("eth0"),
    )
    .unwrap();
    for (i, t) in out.nft_cleanup.iter().chain([&out.restore]).enumerate() {
        ns.nft_apply(&format!("sync-{i}.nft"), t, SimTime::ZERO)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let syn = |to: &str| {
        Packet::tcp(
            "[2001:db8::99]:40000".parse().unwrap(),
            to.parse().unwrap(),
            TcpFlags::SYN,
        )
    };
    let r = ns.process(
        SimTime::ZERO,
        syn("[fd00:172:30::41]:80"),
        Ingress::Interface(ifn("eth0")),
    );
    let Some(Egress::Transmit { dev, packet, .. }) = r.out.first() else {
        panic!("not forwarded: {:?}", r.fate)
    };
    assert_eq!(dev.as_str(), "cni0");
    assert!(
        [ip("fd00:10:180::1"), ip("fd00:10:180::2:1")].contains(&packet.dst),
        "{packet}"
    );
    assert_eq!(packet.dport(), Some(80));
    assert_eq!(packet.src, ip("fd00:10:180::fe"), "masqueraded: {packet}");
    let ct = ns
        .conntrack()
        .dump(SimTime::ZERO, &sim_conntrack::Filter::all());
    assert!(
        ct.contains("src=2001:db8::99 dst=fd00:172:30::41 sport=40000 dport=80")
            && ct.contains("dst=fd00:10:180::fe"),
        "{ct}"
    );
    let r = ns.process(
        SimTime::ZERO,
        syn("[fd00:172:30::42]:80"),
        Ingress::Interface(ifn("eth0")),
    );
    let Some(Egress::Transmit { dev, packet, .. }) = r.out.first() else {
        panic!("no answer: {:?}", r.fate)
    };
    assert_eq!(dev.as_str(), "eth0");
    assert_eq!(
        (packet.src, packet.dst),
        (ip("2001:db8::1"), ip("2001:db8::99"))
    );
    assert!(
        matches!(
            packet.l4,
            L4::Icmp {
                icmp_type: 1,
                code: 4,
                ..
            }
        ),
        "ICMPv6 port unreachable: {packet}"
    );
}

/// The IPv6 proxier's rendered `ip6 kube-proxy` table in the real kernel and in nfsim, with
/// the same IPv6 packets on a router namespace's own TUN links (`eth0` fd00:10::1/64 the
/// cluster's side, `cni0` fd01::1/64 the endpoints'): a client's SYN to the ClusterIP
/// `[fd00:172:30::41]:80` DNAT'd to its one endpoint `[fd01::5]:80` (not masqueraded: the
/// client is inside the cluster CIDR fd00:10::/64), the endpoint's SYN-ACK un-DNAT'd, and a
/// SYN to a Service without endpoints rejected with ICMPv6 port unreachable. Every packet
/// that leaves, `conntrack -L -f ipv6`, and the table as `nft list` prints it agree.
#[test]
fn the_ipv6_proxiers_table_matches_the_kernel_packet_for_packet() {
    use kernel::{parse_ct_line, RawPacket, Scenario};
    use sim_core::IfName;
    use sim_netfilter::netns::{Egress, Ingress, Netns, NetnsConfig};
    const TEST: &str = "the_ipv6_proxiers_table_matches_the_kernel_packet_for_packet";
    let objects = r#"
kind: Service
metadata: {name: svc1, namespace: ns1}
spec: {clusterIP: "fd00:172:30::41", ports: [{name: p80, port: 80, protocol: TCP}]}
---
kind: EndpointSlice
metadata: {name: svc1-1, namespace: ns1, labels: {kubernetes.io/service-name: svc1}}
addressType: IPv6
endpoints: [{addresses: ["fd01::5"]}]
ports: [{name: p80, port: 80, protocol: TCP}]
---
kind: Service
metadata: {name: svc2, namespace: ns1}
spec: {clusterIP: "fd00:172:30::42", ports: [{name: p80, port: 80, protocol: TCP}]}
"#;
    let out = first_sync(nftables_fake(IpFamily::IPv6), objects);
    let txs: Vec<String> = out.nft_cleanup.into_iter().chain([out.restore]).collect();
    let Some(lab) = kernel::lab_with_or_skip(TEST, &["sysctl", "nft"], &["/dev/net/tun"]) else {
        return;
    };
    let tcp = |src: &str, sport: u16, dst: &str, dport: u16, flags: &str| RawPacket {
        proto: "tcp".into(),
        src: src.into(),
        dst: dst.into(),
        sport,
        dport,
        flags: Some(flags.into()),
        seq: 1000,
        ttl: Some(64),
        ..RawPacket::default()
    };
    let steps = [
        (
            "syn",
            "eth0",
            tcp("fd00:10::7", 40000, "fd00:172:30::41", 80, "S"),
            None,
        ),
        (
            "syn-ack",
            "cni0",
            tcp("fd01::5", 80, "fd00:10::7", 40000, "SA"),
            Some("syn"),
        ),
        (
            "down",
            "eth0",
            tcp("fd00:10::7", 40001, "fd00:172:30::42", 80, "S"),
            None,
        ),
    ];
    let mut sc = Scenario::new()
        .sysctl("net.ipv6.conf.all.forwarding", "1")
        .tun("eth0", &["fd00:10::1/64"])
        .tun("cni0", &["fd01::1/64"])
        // The ClusterIPs routed, so that a Service without endpoints reaches the forward
        // hook's `@no-endpoint-services` instead of failing its route lookup.
        .route("fd00:172:30::/64 dev cni0");
    for (i, t) in txs.iter().enumerate() {
        sc = sc.command(&format!("load-{i}"), &["nft", "-f", "-"], Some(t));
    }
    for (label, dev, p, reply_to) in &steps {
        sc = sc.inject(label, dev, p.clone(), *reply_to, 30);
    }
    let sc = sc.conntrack("list", &["-L", "-f", "ipv6"]).command(
        "nft-list",
        &["nft", "list", "table", "ip6", "kube-proxy"],
        None,
    );
    let run = lab
        .run(&sc)
        .unwrap_or_else(|e| panic!("{TEST}: the lab run failed: {e}"));
    for i in 0..txs.len() {
        let o = run.output(&format!("load-{i}"));
        assert_eq!(o.rc, 0, "nft -f: {}", o.stderr);
    }
    let ifn = |s: &str| IfName::new(s).unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let mut ns = Netns::new(NetnsConfig::new("router", 1));
    ns.add_interface(ifn("eth0"), &[(ip("fd00:10::1"), 64)])
        .unwrap();
    ns.add_interface(ifn("cni0"), &[(ip("fd01::1"), 64)])
        .unwrap();
    ns.add_route("fd00:172:30::/64".parse().unwrap(), None, ifn("cni0"))
        .unwrap();
    for (i, t) in txs.iter().enumerate() {
        ns.nft_apply(&format!("sync-{i}.nft"), t, SimTime::ZERO)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let show = |dev: &str, p: &sim_core::Packet| format!("{dev} {p} hlim={} len={}", p.ttl, p.len);
    let at = |ms: f64| SimTime::from_nanos((ms * 1e6) as u64);
    for (label, ..) in &steps {
        let inj = run.injected(label);
        let kernel: Vec<String> = inj
            .emitted
            .iter()
            .map(|e| show(&e.dev, &sim_core::wire::parse_ip(&e.bytes()).unwrap()))
            .collect();
        assert!(!kernel.is_empty(), "{label}: the kernel sent nothing");
        let pkt = sim_core::wire::parse_ip(&inj.bytes()).unwrap();
        let r = ns.process(at(inj.at_ms), pkt, Ingress::Interface(ifn(&inj.dev)));
        let sim: Vec<String> = r
            .out
            .iter()
            .filter_map(|e| match e {
                Egress::Transmit { dev, packet, .. } => Some(show(dev.as_str(), packet)),
                Egress::LocalDeliver { .. } => None,
            })
            .collect();
        assert_eq!(kernel, sim, "{label}: kernel left, nfsim right");
    }
    let listed_at = at(run.step("list").at_ms);
    let f = sim_conntrack::Filter::parse_args(["-f", "ipv6"]).unwrap();
    let entries = |text: &str| {
        let mut v: Vec<String> = text
            .lines()
            .filter_map(parse_ct_line)
            .map(|mut e| {
                e.timeout_secs = None;
                format!("{e:?}")
            })
            .collect();
        v.sort();
        v
    };
    let kernel_entries = entries(&run.output("list").stdout);
    assert_eq!(kernel_entries.len(), 1, "the DNAT'd flow's entry");
    assert_eq!(
        kernel_entries,
        entries(&ns.conntrack().dump(listed_at, &f)),
        "conntrack -L -f ipv6"
    );
    let ours = ns
        .nft()
        .list_table(sim_netfilter::nft::Family::Ip6, "kube-proxy", listed_at)
        .unwrap();
    assert_eq!(
        run.output("nft-list").stdout,
        ours,
        "nft list table ip6 kube-proxy"
    );
}

/// `--nodeport-addresses` with no IPv6 CIDR on the IPv6 proxier: NodePorts on every local
/// address, `fib daddr type local ip6 daddr != ::1`. nfsim lists the table as the real nft
/// does, and the NodePort is DNAT'd for the node's own IPv6 address but not for `::1`
/// (localhost NodePorts never work on IPv6) nor for an address that is not the node's.
#[test]
fn ipv6_nodeports_on_every_local_address_list_as_nft_does_and_dnat_the_nodes_address_only() {
    use sim_core::{IfName, Packet, TcpFlags};
    use sim_netfilter::netns::{Egress, Ingress, Netns, NetnsConfig};
    let mut cfg = nftables_fake(IpFamily::IPv6);
    cfg.node_port_addresses = NodePortAddresses::new(IpFamily::IPv6, &cidrs(&["192.168.0.2/32"]))
        .resolve(&fake_interface_addrs());
    let out = first_sync(cfg, &node_port_objects(IpFamily::IPv6));
    let txs: Vec<String> = out.nft_cleanup.into_iter().chain([out.restore]).collect();
    let ours = nfsim_ip6_listing(&txs);
    assert!(
        ours.contains(
            "fib daddr type local ip6 daddr != ::1 meta l4proto . th dport vmap @service-nodeports"
        ),
        "{ours}"
    );
    if tools::have_or_skip(
        "ipv6_nodeports_on_every_local_address_list_as_nft_does_and_dnat_the_nodes_address_only",
        &["nft", "unshare"],
    ) {
        let real = tools::real_nft_table_listing(&txs, "ip6 kube-proxy")
            .unwrap_or_else(|e| panic!("real nft refused the IPv6 transaction: {e}"));
        assert_eq!(ours, real);
    }
    let ifn = |s: &str| IfName::new(s).unwrap();
    let ip = |s: &str| s.parse::<IpAddr>().unwrap();
    let mut ns = Netns::new(NetnsConfig::new("test-node", 1));
    ns.add_interface(ifn("eth0"), &[(ip("2001:db8::1"), 64)])
        .unwrap();
    ns.add_interface(ifn("cni0"), &[(ip("fd00:10:180::fe"), 64)])
        .unwrap();
    for (i, t) in txs.iter().enumerate() {
        ns.nft_apply(&format!("sync-{i}.nft"), t, SimTime::ZERO)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    let dnat_of = |ns: &mut Netns, from: &str, to: &str, ingress: Ingress| {
        let syn = Packet::tcp(from.parse().unwrap(), to.parse().unwrap(), TcpFlags::SYN);
        let r = ns.process(SimTime::ZERO, syn, ingress);
        r.out.iter().find_map(|e| match e {
            Egress::Transmit { packet, .. } | Egress::LocalDeliver { packet } => {
                (packet.dport() == Some(80)).then_some(packet.dst)
            }
        })
    };
    let eth0 = || Ingress::Interface(ifn("eth0"));
    let to_ep = dnat_of(
        &mut ns,
        "[2001:db8::99]:40000",
        "[2001:db8::1]:3001",
        eth0(),
    );
    assert!(
        [Some(ip("fd00:10:180::1")), Some(ip("fd00:10:180::2:1"))].contains(&to_ep),
        "{to_ep:?}"
    );
    assert_eq!(
        dnat_of(
            &mut ns,
            "[2001:db8::99]:40001",
            "[2001:db8::77]:3001",
            eth0()
        ),
        None
    );
    assert_eq!(
        dnat_of(&mut ns, "[::1]:40002", "[::1]:3001", Ingress::Local),
        None
    );
}
