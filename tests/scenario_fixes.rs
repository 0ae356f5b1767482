//! One test per bug found by comparing scenario runs with the kernel and the kubelet.

#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::cluster::sim::RunResult;
use scenario_run::run_text;

fn run(yaml: &str) -> RunResult {
    run_text("test.yaml", yaml, true)
}

fn lines(r: &RunResult) -> Vec<String> {
    r.timeline.iter().map(|e| e.line()).collect()
}

fn failed(r: &RunResult) -> Vec<String> {
    r.results
        .iter()
        .filter(|x| !x.passed)
        .map(|x| format!("{}: {}", x.name, x.detail))
        .collect()
}

const ONE_NODE: &str = "
name: t
duration: 1m
nodes:
  - {name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}
";

/// A pod reaching itself through its Service (hairpin: DNAT'd back to itself, masqueraded to
/// the node's veth address) is an endpoint's client like any other: its requests count.
#[test]
fn hairpin_requests_count_in_the_endpoint_summary_and_expectations() {
    let r = run(&format!(
        "{ONE_NODE}
pods:
  - name: web
    labels: {{app: web}}
    node: node-1
    ip: 10.244.1.5
    apps: [{{udpServer: {{port: 8053}}}}]
services:
  - metadata: {{name: web, namespace: default}}
    spec:
      clusterIP: 10.96.0.20
      selector: {{app: web}}
      ports: [{{name: dns, protocol: UDP, port: 53, targetPort: 8053}}]
clients:
  - name: self
    pod: web
    udp: {{target: default/web:dns, interval: 10s, sourcePort: 40000}}
expectations:
  - client: {{name: self, sent: 6, answered: 6}}
  - endpoint: {{pod: web, client: self, packets: 6, flows: 1}}
"
    ));
    assert!(failed(&r).is_empty(), "{:?}", failed(&r));
    let row = r
        .summary
        .lines()
        .find(|l| l.starts_with("default/web "))
        .unwrap_or_else(|| panic!("{}", r.summary));
    assert!(row.contains("self 6"), "{row}");
    // Masqueraded to the node's address on the pod veths (KUBE-SEP-… -s 10.244.1.5 marks it).
    assert!(
        lines(&r)
            .iter()
            .any(|l| l.contains("src=10.244.1.5 dst=10.96.0.20") && l.contains("dst=10.244.1.1")),
        "{:#?}",
        lines(&r)
    );
}

/// The readiness probe, failing since 0 s with `periodSeconds: 2, failureThreshold: 2`,
/// marks the pod not Ready at 4 s; an OOM kill at 3.5 s (noticed by the kubelet at 4.5 s)
/// must not postpone that.
#[test]
fn an_oom_kill_keeps_a_pending_readiness_failure_on_time() {
    let r = run(&format!(
        "{ONE_NODE}
pods:
  - name: web
    node: node-1
    ip: 10.244.1.5
    readinessProbe: {{periodSeconds: 2, failureThreshold: 2}}
events:
  - at: 0s
    readiness: {{pod: web, ready: false}}
  - at: 3500ms
    oomKill: {{pod: web}}
"
    ));
    let not_ready: Vec<String> = lines(&r)
        .into_iter()
        .filter(|l| l.contains("pod default/web") && l.ends_with("not Ready"))
        .collect();
    assert_eq!(not_ready.len(), 1, "{not_ready:?}");
    assert!(not_ready[0].starts_with("00:00:04.000"), "{not_ready:?}");
}

/// A readiness failure whose probe recovers before it is due does not fire, and a timer due
/// after a restart in place follows the probe's current verdict.
#[test]
fn a_readiness_timer_applies_only_while_its_cause_holds() {
    let r = run(&format!(
        "{ONE_NODE}
pods:
  - name: web
    node: node-1
    ip: 10.244.1.5
    readinessProbe: {{periodSeconds: 10, failureThreshold: 3}}
events:
  - at: 0s
    readiness: {{pod: web, ready: false}}
  - at: 10s
    readiness: {{pod: web, ready: true}}
"
    ));
    assert!(
        !lines(&r).iter().any(|l| l.ends_with("not Ready")),
        "{:#?}",
        lines(&r)
    );
}
