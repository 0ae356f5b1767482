//! Addresses left out of a scenario: pod IPs from the node's pod CIDR (host-local IPAM's
//! order), cluster IPs drawn from the service CIDR's upper band with the scenario's seed;
//! shown in the timeline; exhausted ranges and conflicting fields are located errors.

#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::cluster::sim::RunResult;
use nfsim::scenario::{load_file, load_str, Scenario};
use scenario_run::run_scenario;
use std::net::IpAddr;

fn run(sc: Scenario) -> RunResult {
    run_scenario(sc, false)
}

fn lines(r: &RunResult) -> Vec<String> {
    r.timeline.iter().map(|e| e.line()).collect()
}

fn assigned(r: &RunResult) -> Vec<String> {
    lines(r)
        .into_iter()
        .filter(|l| l.contains(" assigned "))
        .collect()
}

fn load(yaml: &str) -> Scenario {
    load_str("t.yaml", yaml).unwrap_or_else(|e| panic!("{e}"))
}

const BASE: &str = "
name: t
seed: 1
duration: 1m
nodes:
  - {name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}
  - {name: node-2, address: 192.168.0.12, podCIDR: 10.244.2.0/30}
pods:
  - {name: a, labels: {app: web}, node: node-1}
  - {name: b, labels: {app: web}, node: node-1, ip: 10.244.1.2}
  - {name: c, labels: {app: web}, node: node-1}
  - {name: d, node: node-2}
services:
  - metadata: {name: web, namespace: default}
    spec:
      selector: {app: web}
      ports: [{protocol: TCP, port: 80}]
";

fn cluster_ip(sc: &Scenario, key: &str) -> IpAddr {
    sc.services
        .iter()
        .find(|s| s.key() == key)
        .and_then(|s| s.ipv4_cluster_ip())
        .unwrap()
}

#[test]
fn the_shipped_scenario_passes_and_shows_each_allocation() {
    let sc = load_file(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/scenarios/allocated-addresses.yaml"
    ))
    .unwrap();
    let r = run(sc);
    assert!(r.results.iter().all(|x| x.passed), "{:#?}", r.results);
    assert_eq!(
        assigned(&r),
        [
            "00:00:00.000  service default/web: assigned cluster IP 10.109.32.57 (from the service CIDR 10.96.0.0/12)",
            "00:00:00.000  pod default/web-0: assigned 10.244.1.2 (from node-1's pod CIDR 10.244.1.0/24)",
            "00:00:00.000  pod default/web-2: assigned 10.244.1.4 (from node-1's pod CIDR 10.244.1.0/24)",
            "00:00:00.000  pod default/client: assigned 10.244.2.2 (from node-2's pod CIDR 10.244.2.0/24)",
            "00:00:30.000  pod default/web-3: assigned 10.244.2.3 (from node-2's pod CIDR 10.244.2.0/24)",
            "00:01:03.000  pod default/web-0: assigned 10.244.1.5 (from node-1's pod CIDR 10.244.1.0/24)",
        ]
    );
}

#[test]
fn pods_take_the_lowest_unused_addresses_after_the_gateway_skipping_given_ones() {
    let sc = load(BASE);
    let ips: Vec<String> = sc.pods.iter().map(|p| p.ip.to_string()).collect();
    assert_eq!(
        ips,
        ["10.244.1.3", "10.244.1.2", "10.244.1.4", "10.244.2.2"]
    );
    // Explicit addresses are not announced; allocated ones are, once.
    let r = run(sc);
    let a = assigned(&r);
    assert_eq!(a.len(), 4, "{a:#?}");
    assert!(a.iter().all(|l| !l.contains("pod default/b:")));
}

#[test]
fn the_cluster_ip_is_drawn_from_the_upper_band_with_the_seed() {
    let ip = |seed: u64| {
        let sc = load(&BASE.replace("seed: 1", &format!("seed: {seed}")));
        cluster_ip(&sc, "default/web")
    };
    let cidr: nfsim::k8s::Cidr = "10.96.0.0/12".parse().unwrap();
    let mut seen = std::collections::BTreeSet::new();
    for seed in 1..=20 {
        let a = ip(seed);
        assert_eq!(a, ip(seed), "same seed, same address");
        assert!(cidr.contains(a), "{a}");
        // The /12's static band is its first 256 addresses (10.96.0.1 to 10.96.1.0).
        let IpAddr::V4(v4) = a else { panic!() };
        assert!(
            u32::from(v4) > u32::from(std::net::Ipv4Addr::new(10, 96, 1, 0)),
            "{a}"
        );
        seen.insert(a);
    }
    assert!(seen.len() > 15, "the seed moves the draw: {seen:?}");
}

#[test]
fn an_allocated_cluster_ip_never_takes_a_given_one() {
    // A /28 has 14 addresses and no static band: 13 given, the 14th is the only one left.
    let mut y = BASE.replace("seed: 1\n", "seed: 1\nserviceCIDR: 10.96.0.0/28\n");
    for k in 1..=13 {
        if k == 7 {
            continue;
        }
        y.push_str(&format!(
            "  - {{metadata: {{name: s{k}, namespace: default}}, spec: {{clusterIP: 10.96.0.{k}, ports: [{{protocol: TCP, port: 80}}]}}}}\n"
        ));
    }
    y.push_str("  - {metadata: {name: s14, namespace: default}, spec: {clusterIP: 10.96.0.14, ports: [{protocol: TCP, port: 80}]}}\n");
    // 13 given (1..=14 but 7); `web` (first in the file) and one more left out.
    let with_one = y.clone();
    let sc = load(&with_one);
    assert_eq!(cluster_ip(&sc, "default/web").to_string(), "10.96.0.7");
    y.push_str("  - {metadata: {name: late, namespace: default}, spec: {ports: [{protocol: TCP, port: 80}]}}\n");
    let e = load_str("t.yaml", &y).unwrap_err();
    assert_eq!(e.line, y.lines().count() as u64, "{e}");
    assert!(
        e.message.contains(
            "default/late has no `clusterIP` and the serviceCIDR 10.96.0.0/28 is exhausted"
        ),
        "{e}"
    );
}

#[test]
fn an_exhausted_pod_cidr_is_a_located_error() {
    // node-2's /30 holds one pod (.2); a second one without ip has nowhere to go.
    let y = BASE.replace(
        "  - {name: d, node: node-2}\n",
        "  - {name: d, node: node-2}\n  - {name: e, node: node-2}\n",
    );
    let e = load_str("t.yaml", &y).unwrap_err();
    assert_eq!(e.line, 13, "{e}");
    assert!(
        e.message.contains("pod default/e has no `ip` and node node-2's pod CIDR 10.244.2.0/30 is exhausted: its 1 usable address 10.244.2.2 to 10.244.2.2 is used"),
        "{e}"
    );
}

#[test]
fn events_create_recreate_and_update_with_allocated_addresses() {
    let y = format!(
        "{BASE}events:
  - at: 10s
    createPod: {{name: f, labels: {{app: web}}, node: node-1}}
  - at: 20s
    deletePod: {{pod: a, gracePeriod: 0s, recreate: {{newIp: true}}}}
  - at: 30s
    createService:
      metadata: {{name: late, namespace: default}}
      spec: {{selector: {{app: web}}, ports: [{{protocol: TCP, port: 81}}]}}
  - at: 40s
    updateService:
      metadata: {{name: late, namespace: default}}
      spec: {{selector: {{app: web}}, ports: [{{protocol: TCP, port: 82}}]}}
"
    );
    let sc = load(&y);
    let late = sc
        .events
        .iter()
        .filter_map(|e| match &e.action {
            nfsim::scenario::model::Action::UpsertService { service, .. } => {
                service.ipv4_cluster_ip()
            }
            _ => None,
        })
        .collect::<Vec<_>>();
    assert_eq!(late.len(), 2);
    assert_eq!(late[0], late[1], "an update without clusterIP keeps it");
    assert_ne!(late[0], cluster_ip(&sc, "default/web"));
    let r = run(sc);
    let a = assigned(&r);
    assert!(a.contains(&"00:00:10.000  pod default/f: assigned 10.244.1.5 (from node-1's pod CIDR 10.244.1.0/24)".to_string()), "{a:#?}");
    assert!(a.contains(&"00:00:20.000  pod default/a: assigned 10.244.1.6 (from node-1's pod CIDR 10.244.1.0/24)".to_string()), "{a:#?}");
    assert!(a.contains(&format!("00:00:30.000  service default/late: assigned cluster IP {} (from the service CIDR 10.96.0.0/12)", late[0])), "{a:#?}");
    assert_eq!(
        a.iter().filter(|l| l.contains("default/late")).count(),
        1,
        "not again at the update"
    );
}

#[test]
fn conflicting_or_out_of_range_fields_are_located_errors() {
    let y = format!(
        "{BASE}events:\n  - at: 20s\n    deletePod: {{pod: a, recreate: {{newIp: true, ip: 10.244.1.9}}}}\n"
    );
    let e = load_str("t.yaml", &y).unwrap_err();
    assert!(e.message.contains("`newIp: true` and `ip` both"), "{e}");
    assert_eq!(e.line, 20, "{e}");
    // A given cluster IP outside a given serviceCIDR: kube-apiserver refuses it.
    let y = BASE.replace("seed: 1\n", "seed: 1\nserviceCIDR: 10.100.0.0/16\n")
        + "  - {metadata: {name: x, namespace: default}, spec: {clusterIP: 10.96.0.10, ports: [{protocol: UDP, port: 53}]}}\n";
    let e = load_str("t.yaml", &y).unwrap_err();
    assert!(
        e.message
            .contains("cluster IP 10.96.0.10 is not in the serviceCIDR 10.100.0.0/16"),
        "{e}"
    );
    // Without `serviceCIDR`, given addresses anywhere are accepted (older scenarios).
    let y = BASE.to_string()
        + "  - {metadata: {name: x, namespace: default}, spec: {clusterIP: 172.20.0.10, ports: [{protocol: UDP, port: 53}]}}\n";
    load(&y);
    let e = load_str(
        "t.yaml",
        &BASE.replace("seed: 1\n", "seed: 1\nserviceCIDR: 10.96.0.0/31\n"),
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("serviceCIDR 10.96.0.0/31: expected an IPv4 range"),
        "{e}"
    );
    assert_eq!(e.line, 4, "{e}");
}
