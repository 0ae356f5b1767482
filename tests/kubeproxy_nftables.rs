//! kube-proxy's nftables proxier: its transactions load (into nfsim and into the real
//! `nft`, which then list the same table byte for byte), partial syncs touch only what
//! changed, stale chains are flushed then deleted a second later, and the rules it writes
//! carry a packet to an endpoint.

use nfsim::k8s::parse_objects;
use nfsim::kubeproxy::{KubeProxy, MemConntrack, ProxierConfig, ProxyMode, SyncTiming, V133};
use sim_core::{Packet, SimDuration, SimTime};
use sim_netfilter::netns::{Egress, Ingress, Netns, NetnsConfig};
use sim_netfilter::nft::{Family, NftRuleset};

#[path = "support/tools.rs"]
mod tools;

const OBJECTS: &str = r#"
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec: {clusterIP: 10.96.0.10, ports: [{name: dns, port: 53, protocol: UDP}]}
---
kind: EndpointSlice
metadata: {name: kube-dns-1, namespace: kube-system, labels: {kubernetes.io/service-name: kube-dns}}
addressType: IPv4
endpoints: [{addresses: [10.244.1.7]}, {addresses: [10.244.2.5]}]
ports: [{name: dns, port: 53, protocol: UDP}]
---
kind: Service
metadata: {name: web, namespace: shop}
spec:
  type: LoadBalancer
  clusterIP: 10.96.0.20
  ports: [{name: http, port: 80, protocol: TCP, nodePort: 30080}]
  loadBalancerSourceRanges: [203.0.113.0/25]
  sessionAffinity: ClientIP
status: {loadBalancer: {ingress: [{ip: 5.6.7.8}]}}
---
kind: EndpointSlice
metadata: {name: web-1, namespace: shop, labels: {kubernetes.io/service-name: web}}
addressType: IPv4
endpoints: [{addresses: [10.244.1.9], nodeName: node-a}]
ports: [{name: http, port: 8080, protocol: TCP}]
---
kind: Service
metadata: {name: empty, namespace: shop}
spec: {clusterIP: 10.96.0.30, ports: [{name: http, port: 80, protocol: TCP}]}
"#;

const DNS_ONE_ENDPOINT: &str = r#"
kind: EndpointSlice
metadata: {name: kube-dns-1, namespace: kube-system, labels: {kubernetes.io/service-name: kube-dns}}
addressType: IPv4
endpoints: [{addresses: [10.244.1.7]}]
ports: [{name: dns, port: 53, protocol: UDP}]
"#;

fn proxy() -> KubeProxy {
    proxy_with(|_| {})
}

/// The proxier of [`proxy`] with `tweak` applied to its configuration.
fn proxy_with(tweak: impl FnOnce(&mut ProxierConfig)) -> KubeProxy {
    let mut cfg = ProxierConfig::new(
        "node-a",
        "172.18.0.2".parse().unwrap(),
        "10.244.0.0/16".parse().unwrap(),
    );
    cfg.mode = ProxyMode::Nftables;
    cfg.service_cidrs = vec!["10.96.0.0/16".parse().unwrap()];
    tweak(&mut cfg);
    let mut kp = KubeProxy::new(
        cfg,
        SyncTiming::default(),
        Box::new(V133::default()),
        SimTime::ZERO,
    );
    for o in parse_objects(OBJECTS).unwrap() {
        kp.upsert(SimTime::ZERO, o);
    }
    kp
}

/// Runs the sync due at or after `at`; returns its transactions (cleanup first).
fn sync(kp: &mut KubeProxy, at: SimTime) -> (SimTime, Vec<String>) {
    let t = kp.poll_timeout().unwrap().max(at);
    let out = kp.on_timeout(t).expect("a sync is due");
    assert_eq!(out.mode, ProxyMode::Nftables);
    assert!(out.jump_rules.is_empty());
    kp.complete_sync(t, Ok(()), &mut MemConntrack::default());
    let mut v: Vec<String> = out.nft_cleanup.into_iter().collect();
    v.push(out.restore);
    (t, v)
}

fn real_nft_list(txs: &[String]) -> Option<String> {
    if !tools::have_or_skip("kube-proxy nftables against the real nft", &["nft"]) {
        return None;
    }
    Some(
        tools::real_nft_listing(txs)
            .unwrap_or_else(|e| panic!("real nft refused a transaction: {e}")),
    )
}

#[test]
fn syncs_load_in_nfsim_and_the_real_nft_alike() {
    let mut kp = proxy();
    let mut rs = NftRuleset::new();
    let mut all = Vec::new();
    let (t0, txs) = sync(&mut kp, SimTime::ZERO);
    for t in &txs {
        rs.apply("sync-1", t, t0)
            .unwrap_or_else(|e| panic!("{e}\n{t}"));
    }
    all.extend(txs);
    let first = rs.list_table(Family::Ip, "kube-proxy", t0).unwrap();
    assert!(!first.contains("nodeport-ips"), "{first}");
    for want in [
        "\tchain service-FY5PMXPG-kube-system/kube-dns/udp/dns {\n",
        "numgen random mod 2 vmap { 0 : goto endpoint-",
        "meta l4proto udp dnat to 10.244.1.7:53",
        // No `udp dport` (upstream 81810de6: the ClusterIP alone).
        "ip daddr 10.96.0.10 ip saddr != 10.244.0.0/16 jump mark-for-masquerade",
        "10.96.0.30 . tcp . 80 comment \"shop/empty:http\" : goto reject-chain",
        "ip saddr != 203.0.113.0/25 drop",
        "flags dynamic,timeout",
        "update @affinity-",
        "\tchain filter-prerouting-pre-dnat {\n\t\ttype filter hook prerouting priority dstnat - 10; policy accept;",
        "\tchain filter-output {\n\t\ttype filter hook output priority filter; policy accept;\n\t\tct state new jump service-endpoints-check\n\t\tct state new jump cluster-ips-check\n",
        // nodePortAddresses unset (every address): no nodeport-ips set, `fib daddr type local`.
        "fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports",
        "ip daddr 10.96.0.0/16 drop comment \"Drop traffic to unallocated ClusterIPs\"",
    ] {
        assert!(first.contains(want), "missing {want:?} in\n{first}");
    }

    // kube-dns loses an endpoint: a partial sync rewrites kube-dns's chains only and
    // flushes the endpoint chain that went away.
    let obj = parse_objects(DNS_ONE_ENDPOINT).unwrap().remove(0);
    kp.upsert(t0 + SimDuration::from_secs(5), obj);
    let (t1, txs) = sync(&mut kp, t0 + SimDuration::from_secs(5));
    let partial = txs.last().unwrap().clone();
    assert!(!partial.contains("add table"), "a partial sync: {partial}");
    assert!(
        !partial.contains("shop/web"),
        "web did not change: {partial}"
    );
    assert!(
        partial.contains("flush chain ip kube-proxy endpoint-"),
        "{partial}"
    );
    for t in &txs {
        rs.apply("sync-2", t, t1)
            .unwrap_or_else(|e| panic!("{e}\n{t}"));
    }
    all.extend(txs);
    let stale = rs
        .table(Family::Ip, "kube-proxy")
        .unwrap()
        .chains
        .keys()
        .filter(|c| c.contains("10.244.2.5"))
        .count();
    assert_eq!(
        stale, 1,
        "the stale chain is kept (flushed) until a later sync"
    );

    // A full resync an hour later deletes it first, in a transaction of its own.
    let (t2, txs) = sync(&mut kp, t1 + SimDuration::from_secs(3600));
    assert!(
        txs.len() == 2 && txs[0].starts_with("delete chain ip kube-proxy endpoint-"),
        "{txs:?}"
    );
    for t in &txs {
        rs.apply("sync-3", t, t2)
            .unwrap_or_else(|e| panic!("{e}\n{t}"));
    }
    all.extend(txs);
    let ours = rs.list_table(Family::Ip, "kube-proxy", t2).unwrap();
    assert!(!ours.contains("10.244.2.5"), "{ours}");

    if let Some(real) = real_nft_list(&all) {
        assert_eq!(
            real, ours,
            "nft list table ip kube-proxy: real nft vs nfsim"
        );
    }
}

#[test]
fn a_cluster_ip_reaches_an_endpoint_through_the_proxiers_rules() {
    let mut kp = proxy();
    let (t0, txs) = sync(&mut kp, SimTime::ZERO);
    let mut ns = Netns::new(NetnsConfig::new("node-a", 5));
    ns.add_interface(
        sim_core::IfName::new("eth0").unwrap(),
        &[("172.18.0.2".parse().unwrap(), 16)],
    )
    .unwrap();
    ns.add_route(
        sim_netfilter::netns::Prefix::default_for(true),
        Some("172.18.0.1".parse().unwrap()),
        sim_core::IfName::new("eth0").unwrap(),
    )
    .unwrap();
    for t in &txs {
        ns.nft_apply("kp", t, t0).unwrap();
    }
    let q = Packet::udp(
        "172.18.0.2:40000".parse().unwrap(),
        "10.96.0.10:53".parse().unwrap(),
    );
    let r = ns.process(t0, q, Ingress::Local);
    let Some(Egress::Transmit { packet, .. }) = r.out.first() else {
        panic!("{:?}", r.fate)
    };
    assert!(
        ["10.244.1.7", "10.244.2.5"].contains(&packet.dst.to_string().as_str()),
        "{packet}"
    );
    // From the node (not a pod): masqueraded to the node's address.
    assert_eq!(packet.src.to_string(), "172.18.0.2");
    // cluster-ips-check, in filter-output at priority 0 (after nat-output's DNAT): a port no
    // service has on a ClusterIP is rejected, an address of the service CIDR no service has
    // is dropped, and (above) a service's own port passes, already DNAT'd.
    let q = Packet::tcp(
        "172.18.0.2:40002".parse().unwrap(),
        "10.96.0.10:80".parse().unwrap(),
        sim_core::TcpFlags::SYN,
    );
    let r = ns.process(t0, q, Ingress::Local);
    assert_eq!(
        r.fate,
        sim_netfilter::netns::Fate::RejectedNft {
            chain: "ip kube-proxy filter-output".into(),
            hook: sim_netfilter::Hook::Output,
        },
        "a port of a ClusterIP no service has"
    );
    let q = Packet::tcp(
        "172.18.0.2:40003".parse().unwrap(),
        "10.96.0.99:80".parse().unwrap(),
        sim_core::TcpFlags::SYN,
    );
    let r = ns.process(t0, q, Ingress::Local);
    assert_eq!(
        r.fate,
        sim_netfilter::netns::Fate::Dropped(sim_netfilter::netns::DropCause::NftRule {
            chain: "ip kube-proxy filter-output".into(),
            hook: sim_netfilter::Hook::Output,
        }),
        "an unallocated address of the service CIDR"
    );
    // A service without endpoints is rejected.
    let q = Packet::tcp(
        "172.18.0.2:40001".parse().unwrap(),
        "10.96.0.30:80".parse().unwrap(),
        sim_core::TcpFlags::SYN,
    );
    let r = ns.process(t0, q, Ingress::Local);
    assert!(
        matches!(r.fate, sim_netfilter::netns::Fate::RejectedNft { .. }),
        "{:?}",
        r.fate
    );
}

/// Each of kube-proxy's `--detect-local-mode`s as the nftables proxier writes it
/// (`IfLocalNFT` / `IfNotLocalNFT`: `ip saddr`, or `iifname` with a `*` for a prefix) loads
/// into nfsim's nft (and the real nft where it is installed), and the pod's interface decides
/// the masquerade jump.
#[test]
fn every_local_detector_renders_rules_the_nft_parser_accepts() {
    use nfsim::kubeproxy::LocalDetector;
    let modes: [(LocalDetector, &str); 4] = [
        (LocalDetector::None, ""),
        (
            LocalDetector::ClusterCidr("10.244.0.0/16".parse().unwrap()),
            "ip saddr != 10.244.0.0/16 jump mark-for-masquerade",
        ),
        (
            LocalDetector::BridgeInterface("cni0".into()),
            "iifname != \"cni0\" jump mark-for-masquerade",
        ),
        (
            LocalDetector::InterfaceNamePrefix("veth".into()),
            "iifname != \"veth*\" jump mark-for-masquerade",
        ),
    ];
    for (detector, want) in modes {
        let mut kp = proxy_with(|c| {
            c.service_cidrs.clear();
            c.local_detector = detector.clone();
        });
        let (t0, txs) = sync(&mut kp, SimTime::ZERO);
        let mut rs = NftRuleset::new();
        for t in &txs {
            rs.apply("sync-1", t, t0)
                .unwrap_or_else(|e| panic!("{detector:?}: {e}\n{t}"));
        }
        let listed = rs.list_table(Family::Ip, "kube-proxy", t0).unwrap();
        if want.is_empty() {
            assert!(!listed.contains("iifname") && !listed.contains("ip saddr != 10.244"));
        } else {
            assert!(listed.contains(want), "{detector:?}:\n{listed}");
        }
        if let Some(real) = real_nft_list(&txs) {
            assert!(
                real.contains(want),
                "{detector:?}: the real nft lists\n{real}"
            );
        }
    }
}

/// `nodePortAddresses` selecting two of the node's addresses: `nodeport-ips` holds both, and
/// the real nft lists the table as nfsim does.
#[test]
fn node_port_addresses_fill_nodeport_ips_as_the_real_nft_lists_them() {
    let mut kp = proxy_with(|c| {
        c.node_port_addresses = Some(vec![
            "172.18.0.3".parse().unwrap(),
            "172.18.0.2".parse().unwrap(),
            "127.0.0.1".parse().unwrap(),
        ])
    });
    let (t0, txs) = sync(&mut kp, SimTime::ZERO);
    let mut rs = NftRuleset::new();
    for t in &txs {
        rs.apply("sync-1", t, t0)
            .unwrap_or_else(|e| panic!("{e}\n{t}"));
    }
    let ours = rs.list_table(Family::Ip, "kube-proxy", t0).unwrap();
    // Sorted; loopback left out ("localhost NodePorts are not supported").
    assert!(
        ours.contains("elements = { 172.18.0.2, 172.18.0.3 }"),
        "{ours}"
    );
    assert!(
        ours.contains("ip daddr @nodeport-ips meta l4proto . th dport vmap @service-nodeports"),
        "{ours}"
    );
    if let Some(real) = real_nft_list(&txs) {
        assert_eq!(
            real, ours,
            "nft list table ip kube-proxy: real nft vs nfsim"
        );
    }
}
