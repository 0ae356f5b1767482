//! The testkit's front door: what a user crate sees, errors included.

use nfsim::testkit::examples::{service_with_endpoints, svc_chain, KUBE_DNS_TWO_ENDPOINTS};
use nfsim::testkit::{Action, Cluster, Fate, Node, Origin, SimDuration, SimTime, TestkitError};

const RULES: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:SEP-A - [0:0]
:SEP-B - [0:0]
:SVC - [0:0]
-A PREROUTING -d 10.96.0.10/32 -p udp -m udp --dport 53 -j SVC
-A SEP-A -p udp -j DNAT --to-destination 10.244.1.5:53
-A SEP-B -p udp -j DNAT --to-destination 10.244.2.5:53
-A SVC -m statistic --mode random --probability 0.25000000000 -j SEP-A
-A SVC -j SEP-B
COMMIT
";

#[test]
fn a_node_from_rules_dnats_and_saves_its_rules_back() {
    let mut node = Node::from_rules(RULES).unwrap();
    node.set_trace(true);
    let f = node
        .flow(SimTime::ZERO, "udp 10.244.0.9:40000 -> 10.96.0.10:53")
        .unwrap();
    assert_eq!(f.ingress, "cni0");
    assert!(f.transmitted());
    assert!(
        f.trace.as_deref().unwrap_or("").contains("SVC"),
        "{:?}",
        f.trace
    );
    assert!(f.entry.is_some());
    assert!(node
        .rules()
        .contains("-A SVC -m statistic --mode random --probability 0.25000000000 -j SEP-A"));
    let sel = node.selection("SVC").unwrap();
    assert_eq!(sel.probabilities(), vec![0.25, 0.75]);
    assert_eq!(sel.of("10.244.1.5:53").fraction(), "1/4");
    // The deleted entry is gone, and the tool's line is what was deleted.
    let gone = node
        .conntrack_delete(SimTime::from_secs(1), "-p udp --orig-src 10.244.0.9")
        .unwrap();
    assert_eq!(gone.len(), 1);
    assert!(node.conntrack("").unwrap().is_empty());
}

#[test]
fn bad_input_is_a_located_error_not_a_panic() {
    let bad = "*nat\n:SVC - [0:0]\n-A SVC -j NOPE\nCOMMIT\n";
    let e = Node::from_rules(bad).err().unwrap().to_string();
    assert!(e.starts_with("rules #1:3:"), "{e}");
    let mut node = Node::from_rules(RULES).unwrap();
    node.flow(SimTime::from_secs(5), "udp 10.244.0.9:1 -> 10.96.0.10:53")
        .unwrap();
    let back = node.flow(SimTime::from_secs(4), "udp 10.244.0.9:1 -> 10.96.0.10:53");
    assert!(
        matches!(back, Err(TestkitError::Time { .. })),
        "time cannot go back"
    );
    let e = node
        .flow(SimTime::from_secs(6), "udp nonsense")
        .err()
        .unwrap();
    assert!(e.to_string().contains("bad packet"), "{e}");
    let e = node.conntrack("--bogus").err().unwrap();
    assert!(e.to_string().contains("conntrack filter"), "{e}");
    let e = node.selection("NOPE").err().unwrap();
    assert!(e.to_string().contains("no chain \"NOPE\""), "{e}");
    let e = Node::from_objects("kind: Service\nmetadata: 3\n")
        .err()
        .unwrap();
    assert!(e.to_string().starts_with("objects #1:"), "{e}");
}

#[test]
fn selection_refuses_a_chain_whose_outcome_depends_on_the_packet() {
    let rules = "*nat\n:SVC - [0:0]\n-A SVC -s 10.0.0.0/8 -p udp -j DNAT --to-destination 10.244.1.5:53\n-A SVC -p udp -j DNAT --to-destination 10.244.2.5:53\nCOMMIT\n";
    let node = Node::from_rules(rules).unwrap();
    let e = node.selection("SVC").err().unwrap().to_string();
    assert!(
        e.contains("nat SVC rule 1") && e.contains("depends on the packet"),
        "{e}"
    );
    // kube-proxy's KUBE-SVC chain starts with a masquerade jump that depends on the packet
    // but only marks: it does not count.
    let node =
        Node::from_objects(&service_with_endpoints("web", "10.96.0.20", 80, "TCP", 2)).unwrap();
    let chain = svc_chain("default/web:p80", "tcp");
    assert!(node
        .rules()
        .contains(&format!("-A {chain} ! -s 10.244.0.0/16")));
    let sel = node.selection(&chain).unwrap();
    assert_eq!(sel.probabilities(), vec![0.5, 0.5]);
}

#[test]
fn a_node_follows_object_changes_and_its_release_cleans_up() {
    let mut node = Node::from_objects(KUBE_DNS_TWO_ENDPOINTS).unwrap();
    let f = node
        .flow(SimTime::ZERO, "udp 10.244.0.9:40000 -> 10.96.0.10:53")
        .unwrap();
    let ep = f.endpoint().unwrap();
    // The endpoint the flow went to disappears from the slice.
    let keep = if ep.ip().to_string() == "10.244.1.5" {
        "10.244.2.5"
    } else {
        "10.244.1.5"
    };
    let slice = format!(
        "apiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata: {{name: kube-dns-abcde, namespace: kube-system, labels: {{kubernetes.io/service-name: kube-dns}}}}\naddressType: IPv4\nendpoints: [{{addresses: [{keep}]}}]\nports: [{{name: dns, port: 53, protocol: UDP}}]\n"
    );
    let at = SimTime::from_secs(10);
    let mut reports = node.apply_objects(at, &slice).unwrap();
    reports.extend(node.sync_due(at + SimDuration::from_secs(2)).unwrap());
    assert_eq!(
        reports.iter().map(|r| r.deleted()).sum::<usize>(),
        1,
        "latest deletes the stale entry: {reports:?}"
    );
    let again = node
        .flow(node.now(), "udp 10.244.0.9:40000 -> 10.96.0.10:53")
        .unwrap();
    assert_eq!(again.endpoint().unwrap().ip().to_string(), keep);
}

#[test]
fn a_cluster_takes_events_and_injected_packets() {
    let mut c = Cluster::from_file("scenarios/stale-dns-udp-latest.yaml").unwrap();
    c.run_until(SimTime::from_secs(10)).unwrap();
    // Delete both CoreDNS pods now, from code, as a scenario event would.
    for pod in ["kube-system/coredns-a", "kube-system/coredns-b"] {
        c.apply(
            SimTime::from_secs(11),
            Action::DeletePod {
                pod: pod.into(),
                grace_period: Some(SimDuration::from_secs(1)),
                recreate: None,
            },
        )
        .unwrap();
    }
    assert!(matches!(
        c.apply(
            SimTime::from_secs(1),
            Action::Readiness {
                pod: "x/y".into(),
                ready: true
            }
        ),
        Err(TestkitError::Time { .. })
    ));
    c.run_until(SimTime::from_secs(30)).unwrap();
    let text = c.timeline_text();
    assert!(
        text.contains("kube-system/coredns-a") && text.contains("deleted"),
        "{text}"
    );
    // A query from the app pod now finds no endpoint: kube-proxy REJECTs it on node-2.
    let id = c
        .send(
            &Origin::Pod("default/app".into()),
            "udp 10.244.2.9:41000 -> 10.96.0.10:53",
        )
        .unwrap();
    c.run_until(SimTime::from_secs(31)).unwrap();
    let seen = c.sightings(id);
    assert!(
        seen.iter().any(|s| s.machine == "node node-2"
            && s.dropped.as_deref().is_some_and(|r| r.contains("rejected"))),
        "{seen:?}"
    );
    assert!(c.counters("node-2").is_ok());
    assert!(c.rules("node-2").unwrap().contains("has no endpoints"));
    assert!(c
        .send(&Origin::Pod("no/such".into()), "udp 1.1.1.1:1 -> 2.2.2.2:2")
        .is_err());
    let _ = Fate::Transmitted;
}
