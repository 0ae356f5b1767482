//! The scenarios run on the real stack: nodes are sim-netfilter namespaces holding the rules
//! kube-proxy wrote, and kube-proxy's cleanup is pluggable from the library API.

use nfsim::cluster::sim::{RunOptions, RunResult, Simulation};
use nfsim::kubeproxy::{
    CleanupInput, CleanupReport, ConntrackCleanup, ConntrackOps, CtFilter, ServicePortName,
};
use nfsim::scenario::model::Release;
use nfsim::scenario::{load_file, Scenario};
use sim_conntrack::Filter;
use sim_core::SimTime;
use sim_netfilter::netns::{Netns, NetnsConfig, RouteDecision};
use std::cell::RefCell;
use std::net::IpAddr;
use std::rc::Rc;

fn scenario(name: &str) -> Scenario {
    load_file(&format!("{}/scenarios/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

fn timeline() -> RunOptions {
    RunOptions {
        record_timeline: true,
        conntrack_events: true,
        progress: None,
    }
}

fn lines(r: &RunResult) -> Vec<String> {
    r.timeline.iter().map(|e| e.line()).collect()
}

fn failed(r: &RunResult) -> Vec<String> {
    r.results
        .iter()
        .filter(|x| !x.passed)
        .map(|x| x.name.clone())
        .collect()
}

/// A cleanup of our own: after every sync that changed a UDP service's endpoints, delete each
/// UDP entry to a service IP whose reply source is not one of that service's serving
/// endpoints. Records what it was called with.
struct DeleteUnserved {
    node: String,
    log: Rc<RefCell<Vec<String>>>,
}

impl ConntrackCleanup for DeleteUnserved {
    fn name(&self) -> String {
        "delete-unserved".into()
    }
    fn after_sync(
        &mut self,
        now: SimTime,
        input: &CleanupInput<'_>,
        ct: &mut dyn ConntrackOps,
    ) -> CleanupReport {
        let mut report = CleanupReport {
            ran: true,
            ..CleanupReport::default()
        };
        let entries = ct.list(&CtFilter::udp());
        report.listed = entries.len();
        self.log.borrow_mut().push(format!(
            "{} {} listed {} udp={}",
            self.node,
            now.hms(),
            entries.len(),
            input.udp_endpoints_changed()
        ));
        for e in entries {
            let serving = input.after.services.iter().find_map(|(spn, svc)| {
                (svc.cluster_ip == e.orig.dst && svc.port == e.orig.dport).then(|| {
                    let spn: &ServicePortName = spn;
                    input
                        .after
                        .endpoints_of(spn)
                        .iter()
                        .any(|ep| ep.serving && ep.ip == e.reply.src)
                })
            });
            if serving == Some(false) {
                let n = ct.delete(&CtFilter::exact(&e));
                self.log
                    .borrow_mut()
                    .push(format!("{} deleted {n} to {}", self.node, e.reply.src));
            }
        }
        report
    }
}

#[test]
fn a_cleanup_of_our_own_is_called_per_node_with_the_state_and_the_real_table() {
    // The incident under v1.31 (which misses the event) with our cleanup instead.
    let log = Rc::new(RefCell::new(Vec::new()));
    let made = Rc::new(RefCell::new(Vec::new()));
    let (l, m) = (log.clone(), made.clone());
    let sim = Simulation::builder(scenario("stale-dns-udp.yaml"))
        .options(timeline())
        .cleanup(move |node| {
            m.borrow_mut().push(node.to_string());
            Box::new(DeleteUnserved {
                node: node.to_string(),
                log: l.clone(),
            })
        })
        .build()
        .unwrap();
    assert_eq!(sim.kube_proxy_instances(), 2, "one kube-proxy per node");
    let r = sim.finish().unwrap();
    assert_eq!(*made.borrow(), ["node-1", "node-2"]);
    let log = log.borrow().clone();
    // Each node's kube-proxy ran it after its first sync and after the endpoint change.
    for node in ["node-1", "node-2"] {
        assert!(
            log.iter()
                .any(|l| l.starts_with(&format!("{node} 00:00:00"))),
            "{log:?}"
        );
        assert!(
            log.iter()
                .any(|l| l.starts_with(&format!("{node} 00:05:02.100")) && l.ends_with("udp=true")),
            "{log:?}"
        );
    }
    // Only node-2 holds the sidecar's DNAT'd entry; our cleanup deleted it there.
    assert_eq!(
        log.iter()
            .filter(|l| l.contains("deleted"))
            .collect::<Vec<_>>(),
        ["node-2 deleted 1 to 10.244.1.5"]
    );
    let tl = lines(&r);
    assert!(
        tl.iter()
            .any(|l| l.contains("kube-proxy node-2: cleanup deleted udp")
                && l.contains("src=10.244.1.5")),
        "the deletion is on the timeline"
    );
    // So the incident's expectations fail: the sidecar recovers on the healthy pod.
    let f = failed(&r);
    assert!(
        f.iter()
            .any(|n| n.contains("every query after the kill times out")),
        "{f:?}"
    );
    assert!(
        f.iter().any(|n| n.contains("healthy pod receives nothing")),
        "{f:?}"
    );
}

#[test]
fn nodes_with_identical_rules_share_one_kube_proxy_with_the_same_results() {
    for release in [
        Release::parse("v1.31.0").unwrap(),
        Release::parse("v1.32.0").unwrap(),
        Release::LATEST,
    ] {
        let mut sc = scenario("stale-dns-udp.yaml");
        sc.kube_proxy.release = release;
        // One cluster CIDR for every node: their rules no longer differ.
        sc.kube_proxy.cluster_cidr = Some("10.244.0.0/16".parse().unwrap());
        let mut shared = Simulation::builder(sc.clone())
            .options(timeline())
            .build()
            .unwrap();
        assert_eq!(shared.kube_proxy_instances(), 1);
        let mut own = Simulation::builder(sc)
            .options(timeline())
            .one_kube_proxy_per_node(true)
            .build()
            .unwrap();
        assert_eq!(own.kube_proxy_instances(), 2);
        // The shared instance restores its payload once for both nodes (the second node
        // takes the first one's outcome): each node still holds exactly the rules, and the
        // counters, that its own restore gives.
        for t in [10, 200, 1000] {
            shared.run_until(SimTime::from_secs(t)).unwrap();
            own.run_until(SimTime::from_secs(t)).unwrap();
            for node in ["node-1", "node-2"] {
                let (i, j) = (
                    shared.node_index(node).unwrap(),
                    own.node_index(node).unwrap(),
                );
                assert_eq!(shared.rules(i), own.rules(j), "{release} {node} at {t}s");
            }
        }
        let (a, b) = (shared.finish().unwrap(), own.finish().unwrap());
        assert_eq!(lines(&a), lines(&b), "{release}");
        assert_eq!(a.results, b.results, "{release}");
    }
}

#[test]
fn rules_that_depend_on_the_node_are_never_shared() {
    let mut sc = scenario("stale-dns-udp.yaml");
    sc.kube_proxy.cluster_cidr = Some("10.244.0.0/16".parse().unwrap());
    sc.services[0].spec.internal_traffic_policy = Some(nfsim::k8s::TrafficPolicy::Local);
    let sim = Simulation::new(sc, RunOptions::default()).unwrap();
    assert_eq!(sim.kube_proxy_instances(), 2);
}

#[test]
fn nodes_hold_the_rules_kube_proxy_wrote_and_they_follow_the_endpoints() {
    let mut sim = Simulation::new(scenario("stale-dns-udp.yaml"), RunOptions::default()).unwrap();
    let n2 = sim.node_index("node-2").unwrap();
    sim.run_until(SimTime::from_secs(60)).unwrap();
    let before = sim.rules(n2);
    assert!(
        before.contains("-j DNAT --to-destination 10.244.1.5:53"),
        "{before}"
    );
    assert!(
        before.contains(
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        ),
        "{before}"
    );
    // Built-in chains' policy counters count real packets: node-2 forwarded the sidecar's
    // first query (NEW; later ones are accepted by KUBE-FORWARD's RELATED,ESTABLISHED rule).
    assert!(before.contains(":FORWARD ACCEPT [1:60]"), "{before}");
    // The saved text is what iptables-save prints: it loads back to the same text (but for
    // the counters, which a restore without --counters zeroes).
    let zeroed = |t: &str| -> String {
        t.lines()
            .map(|l| match (l.starts_with(':'), l.rfind(" [")) {
                (true, Some(i)) => format!("{} [0:0]\n", &l[..i]),
                _ => format!("{l}\n"),
            })
            .collect()
    };
    let mut copy = Netns::new(NetnsConfig::new("copy", 1));
    copy.restore(&before, false).unwrap();
    assert_eq!(copy.save(false), zeroed(&before));
    // After the kill (5m), the endpoint change (5m02s) and the sync, coredns-a's SEP chain
    // is gone and only coredns-b is left; the conntrack entry is not (v1.31).
    sim.run_until(SimTime::from_secs(6 * 60)).unwrap();
    let after = sim.rules(n2);
    assert!(!after.contains("10.244.1.5:53"), "{after}");
    assert!(
        after.contains("-j DNAT --to-destination 10.244.2.5:53"),
        "{after}"
    );
    assert!(
        sim.conntrack_dump(n2)
            .contains("sport=40000 dport=53 src=10.244.1.5"),
        "the stale entry survives the rule change"
    );
}

#[test]
fn pod_traffic_is_not_masqueraded_but_host_network_traffic_is() {
    let snat = Filter::parse("-p udp --src-nat").unwrap();
    let at = SimTime::from_secs(4 * 60);
    let mut pod = Simulation::new(scenario("stale-dns-udp.yaml"), RunOptions::default()).unwrap();
    pod.run_until(at).unwrap();
    let n2 = pod.node_index("node-2").unwrap();
    assert!(pod.netns(n2).conntrack().list(at, &snat).is_empty());
    let mut host = Simulation::new(
        scenario("stale-dns-udp-host-network.yaml"),
        RunOptions::default(),
    )
    .unwrap();
    host.run_until(at).unwrap();
    let e = host.netns(n2).conntrack().list(at, &snat);
    assert_eq!(e.len(), 1, "{}", host.conntrack_dump(n2));
    let node_ip: IpAddr = "192.168.0.12".parse().unwrap();
    assert_eq!(e[0].reply.dst, node_ip);
    assert_ne!(e[0].reply.dport, 40000, "--random-fully draws the port");
}

#[test]
fn a_gone_pod_is_unrouted_on_its_node_and_its_packets_are_lost() {
    let mut sim =
        Simulation::new(scenario("stale-dns-udp-recreated-new-ip.yaml"), timeline()).unwrap();
    let n1 = sim.node_index("node-1").unwrap();
    let old: IpAddr = "10.244.1.5".parse().unwrap();
    let via_veth = |sim: &Simulation| match sim.netns(n1).routing().lookup(old) {
        RouteDecision::Forward { dev, .. } => dev.as_str().starts_with("veth"),
        _ => false,
    };
    sim.run_until(SimTime::from_secs(60)).unwrap();
    assert!(via_veth(&sim), "the pod's /32 route");
    sim.run_until(SimTime::from_secs(10 * 60)).unwrap();
    assert!(
        !via_veth(&sim),
        "removed with the pod: only the default route is left"
    );
    let r = sim.finish().unwrap();
    let tl = lines(&r);
    assert!(
        tl.iter()
            .any(|l| l.contains("dropped: no route to 10.244.1.5")),
        "{tl:#?}"
    );
}

/// A host outside the cluster querying a UDP NodePort on node-1 whose only endpoint runs on
/// node-2, then node-2's own address on the same port.
const NODEPORT: &str = "\
name: nodeport
duration: 2m
nodes:
  - {name: node-1, address: 172.18.0.2, podCIDR: 10.244.1.0/24}
  - {name: node-2, address: 172.18.0.3, podCIDR: 10.244.2.0/24}
hosts:
  - {name: outside, address: 203.0.113.7}
pods:
  - name: dns
    labels: {app: dns}
    node: node-2
    ip: 10.244.2.5
    apps: [{udpServer: {port: 53}}]
services:
  - metadata: {name: dns}
    spec:
      type: NodePort
      clusterIP: 10.96.0.53
      selector: {app: dns}
      ports: [{protocol: UDP, port: 53, nodePort: 30053}]
clients:
  - name: via-node-1
    host: outside
    udp: {target: 172.18.0.2:30053, interval: 10s, sourcePort: 5000, count: 3}
  - name: via-node-2
    host: outside
    udp: {target: 172.18.0.3:30053, interval: 10s, sourcePort: 5001, start: 5s, count: 3}
expectations:
  - client: {name: via-node-1, sent: 3, answered: 3}
  - client: {name: via-node-2, sent: 3, answered: 3}
  - name: node-1 DNATs the NodePort to the pod and masquerades the source to its own address
    at: 1m
    conntrack:
      node: node-1
      filter: -p udp --orig-src 203.0.113.7 --orig-port-dst 30053 --dst-nat --src-nat --reply-dst 172.18.0.2
      count: 1
      endpoint: 10.244.2.5
  - name: node-2 only forwards what node-1 sent (no NAT of its own)
    at: 1m
    conntrack:
      node: node-2
      filter: -p udp --orig-src 172.18.0.2 --orig-dst 10.244.2.5 --any-nat
      exists: false
  - name: traffic to node-2's own NodePort is masqueraded too (the endpoint is local, the source is not)
    at: 1m
    conntrack:
      node: node-2
      filter: -p udp --orig-src 203.0.113.7 --orig-port-dst 30053 --src-nat --reply-dst 10.244.2.1
      count: 1
";

#[test]
fn a_host_outside_reaches_a_node_port_through_dnat_and_masquerade() {
    let sc = nfsim::scenario::load_str("nodeport.yaml", NODEPORT).unwrap();
    let r = Simulation::new(sc, timeline()).unwrap().finish().unwrap();
    assert!(r.passed(), "{:#?}\n{}", r.results, lines(&r).join("\n"));
}

/// A deleted pod keeps serving through its grace period (its endpoint is terminating but
/// serving, so the v1.32 reconciler leaves the fixed-port flow on it); once it is gone and
/// unrouted, the flow's entry is deleted and the sidecar moves to the other CoreDNS pod.
#[test]
fn a_terminating_pod_serves_until_its_grace_period_ends() {
    let base = std::fs::read_to_string(format!(
        "{}/scenarios/stale-dns-udp-v1.32.yaml",
        env!("CARGO_MANIFEST_DIR")
    ))
    .unwrap();
    let head = &base[..base.find("events:").unwrap()];
    let text = format!(
        "{head}events:
  - at: 5m
    deletePod: {{pod: coredns-a, gracePeriod: 60s}}
expectations:
  - name: during the grace period every query is answered
    client: {{name: sidecar, from: 5m, to: 6m, sent: 2, answered: 2, failed: 0}}
  - name: coredns-a answered them
    endpoint: {{pod: coredns-a, client: sidecar, from: 5m, to: 6m, packets: 2}}
  - name: after the grace period the sidecar is answered by coredns-b
    client: {{name: sidecar, from: 7m, failed: 0}}
  - name: nothing reaches coredns-a once it is gone
    endpoint: {{pod: coredns-a, client: sidecar, from: 7m, packets: 0}}
"
    );
    let sc = nfsim::scenario::load_str("grace.yaml", &text).unwrap();
    let r = Simulation::new(sc, timeline()).unwrap().finish().unwrap();
    assert!(
        failed(&r).is_empty(),
        "{:?}\n{}",
        failed(&r),
        lines(&r).join("\n")
    );
    assert!(
        lines(&r).iter().any(|l| l.contains("grace period 1m")),
        "the deletion is in the timeline"
    );
}
