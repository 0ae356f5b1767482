//! nfsim's IPVS proxier against upstream's own expectations: the Service and EndpointSlice
//! objects of cases of `TestNodePortIPv4`, `TestLoadBalancerSourceRanges`,
//! `TestAcceptIPVSTraffic` and `TestOnlyLocalLoadBalancing` (kubernetes/kubernetes
//! `pkg/proxy/ipvs/proxier_test.go`, transcribed in `tests/fixtures/kubeproxy-upstream/ipvs/`,
//! whose README gives the format), synced by nfsim's proxier configured as the test's fake
//! proxier (`NewFakeProxier`: node `test-node`, no local-traffic detector, scheduler `rr`),
//! must leave the virtual servers, ipset entries and iptables rules upstream expects,
//! compared as upstream's `checkIPVS`, `checkIPSet` and `checkIptables` compare them.

use nfsim::k8s::parse_objects;
use nfsim::kubeproxy::ipvs::{IpvsRendered, IPSET_INFO};
use nfsim::kubeproxy::{
    KubeProxy, LocalDetector, MemConntrack, ProxierConfig, ProxyMode, SyncTiming, V133,
};
use sim_core::SimTime;
use std::collections::BTreeSet;
use std::net::IpAddr;

const DIR: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/kubeproxy-upstream/ipvs"
);

fn read(name: &str) -> String {
    std::fs::read_to_string(format!("{DIR}/{name}")).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// `NewFakeProxier(ctx, ipt, ipvs, ipset, nodeIPs, nil, v1.IPv4Protocol)`.
fn fake_proxier(objects: &str, node_ips: Option<Vec<IpAddr>>) -> KubeProxy {
    let mut cfg = ProxierConfig::new(
        "test-node",
        // The fake proxier has no nodeIP: an address no source range of the cases holds.
        "192.168.0.2".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
    );
    cfg.mode = ProxyMode::Ipvs;
    cfg.local_detector = LocalDetector::None;
    cfg.ipvs.node_addresses = Some(node_ips.unwrap_or_default());
    let mut kp = KubeProxy::new(
        cfg,
        SyncTiming::default(),
        Box::new(V133::default()),
        SimTime::ZERO,
    );
    for o in parse_objects(objects).unwrap_or_else(|e| panic!("{e}")) {
        kp.upsert(SimTime::ZERO, o);
    }
    kp
}

fn sync(kp: &mut KubeProxy) -> IpvsRendered {
    let t = kp.poll_timeout().unwrap();
    let out = kp.on_timeout(t).expect("a sync is due");
    kp.complete_sync(t, Ok(()), &mut MemConntrack::default());
    out.ipvs.expect("an IPVS sync").rendered
}

/// `TARGET`, `TARGET@SET` or `TARGET<SRC` for each `-A chain` line, in order.
fn chain_rules(restore: &str, chain: &str) -> Vec<String> {
    let prefix = format!("-A {chain} ");
    restore
        .lines()
        .filter(|l| l.starts_with(&prefix))
        .map(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            let after = |flag: &str| {
                w.iter()
                    .position(|x| *x == flag)
                    .filter(|&i| i == 0 || w[i - 1] != "!")
                    .map(|i| w[i + 1])
            };
            let target = after("-j").unwrap_or("");
            match (after("--match-set"), after("-s")) {
                (Some(set), _) => format!("{target}@{set}"),
                (None, Some(src)) => format!("{target}<{src}"),
                (None, None) => target.to_string(),
            }
        })
        .collect()
}

fn vs_line(v: &nfsim::kubeproxy::ipvs::VirtualServer) -> String {
    let rs: Vec<String> = v
        .real_servers
        .iter()
        .map(|r| format!("{}:{}", r.address, r.port))
        .collect();
    format!("{} = {}", v.key(), rs.join(" "))
        .trim_end()
        .to_string()
}

fn check(case: &str) {
    let expect = read(&format!("{case}.expect"));
    let node_ips = expect.lines().find_map(|l| {
        l.strip_prefix("node-ips ")
            .map(|r| r.split_whitespace().map(|a| a.parse().unwrap()).collect())
    });
    let mut kp = fake_proxier(&read(&format!("{case}.yaml")), node_ips);
    let r = sync(&mut kp);
    assert!(r.virtual_servers.iter().all(|v| v.scheduler == "rr"));
    let ours: BTreeSet<String> = r.virtual_servers.iter().map(vs_line).collect();
    let wanted: BTreeSet<String> = expect
        .lines()
        .filter_map(|l| l.strip_prefix("vs "))
        .map(|l| l.trim_end().to_string())
        .collect();
    let mut failures = Vec::new();
    if expect.lines().any(|l| l == "vs-exact") {
        if ours != wanted {
            failures.push(format!("virtual servers: want {wanted:#?}\ngot {ours:#?}"));
        }
    } else {
        for w in &wanted {
            if !ours.contains(w) {
                failures.push(format!("virtual server {w} missing from {ours:#?}"));
            }
        }
    }
    if let Some(n) = expect.lines().find_map(|l| l.strip_prefix("vs-num ")) {
        let n: usize = n.parse().unwrap();
        if r.virtual_servers.len() != n {
            failures.push(format!(
                "{} virtual servers, want {n}",
                r.virtual_servers.len()
            ));
        }
    }
    for l in expect.lines().filter_map(|l| l.strip_prefix("set ")) {
        let (name, entries) = l.split_once(" = ").unwrap();
        let info = IPSET_INFO.iter().find(|i| i.name == name).unwrap();
        let got: Vec<&str> = r.ipsets.get(info).collect();
        let mut want: Vec<&str> = entries.split_whitespace().collect();
        want.sort();
        if got != want {
            failures.push(format!("set {name}: want {want:?}, got {got:?}"));
        }
    }
    for l in expect.lines().filter_map(|l| l.strip_prefix("chain ")) {
        let (name, rules) = l.split_once(" = ").unwrap();
        let want: Vec<&str> = rules.split_whitespace().collect();
        let got = chain_rules(&r.restore, name);
        if got != want {
            failures.push(format!("chain {name}: want {want:?}\n  got {got:?}"));
        }
    }
    assert!(
        failures.is_empty(),
        "{case}:\n{}\n\npayload:\n{}",
        failures.join("\n"),
        r.restore
    );
}

#[test]
fn node_port_udp() {
    check("nodeport-udp");
}

#[test]
fn node_port_sctp_external_local() {
    check("nodeport-sctp-local");
}

#[test]
fn node_port_sctp_on_several_node_addresses() {
    check("nodeport-sctp-multi");
}

#[test]
fn node_port_without_endpoints() {
    check("nodeport-no-endpoints");
}

#[test]
fn load_balancer_source_ranges() {
    check("lb-source-ranges");
}

#[test]
fn accept_ipvs_traffic() {
    check("accept-ipvs-traffic");
}

#[test]
fn only_local_load_balancing() {
    check("only-local-lb");
}
