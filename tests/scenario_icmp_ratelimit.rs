//! ICMP errors are rate limited per destination by the kernel that sends them
//! (`icmp_ratelimit`: a burst of 6, then one a second): a client hammering a closed UDP port
//! of a pod hears "port unreachable" for six queries, then mostly silence.

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::load_str;

const SCENARIO: &str = r#"
name: icmp-ratelimit
seed: 1
duration: 3s
network:
  latency: 100us
nodes:
  - name: node-1
    address: 192.168.0.11
    podCIDR: 10.244.1.0/24
pods:
  - name: closed
    namespace: default
    labels: {app: closed}
    node: node-1
    ip: 10.244.1.5
  - name: client
    namespace: default
    labels: {app: client}
    node: node-1
    ip: 10.244.1.9
services:
  - apiVersion: v1
    kind: Service
    metadata: {name: closed, namespace: default}
    spec:
      clusterIP: 10.96.0.20
      selector: {app: closed}
      ports:
        - {name: dns, protocol: UDP, port: 53, targetPort: 53}
kubeProxy:
  release: v1.32
clients:
  - name: hammer
    pod: client
    udp:
      target: default/closed:dns
      interval: 100ms
      timeout: 50ms
      connected: true
expectations:
  - name: the first second, a burst of six errors
    client: {name: hammer, from: 0s, to: 1s, sent: 10, refused: 6, timedOut: 4}
  - name: then one error a second
    client: {name: hammer, from: 1s, to: 2s, sent: 10, refused: 1, timedOut: 9}
"#;

#[test]
fn a_closed_port_answers_a_burst_of_six_then_one_a_second() {
    let sc = load_str("icmp-ratelimit.yaml", SCENARIO).expect("scenario loads");
    let opts = RunOptions {
        record_timeline: true,
        conntrack_events: false,
        progress: None,
    };
    let r = Simulation::new(sc, opts)
        .expect("builds")
        .finish()
        .expect("runs");
    let report: Vec<String> = r.results.iter().map(|x| format!("{x:?}")).collect();
    assert!(r.passed(), "{}\n{report:#?}", r.summary);
}
