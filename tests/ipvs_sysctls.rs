//! The IPVS sysctls (`net.ipv4.vs.*`) reach a scenario node's kernel, and a value the kernel
//! would refuse is refused at its line.

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::load_str;

const SCENARIO: &str = r#"
name: ipvs-sysctls
seed: 1
duration: 1s
nodes:
  - name: node-1
    address: 192.168.0.11
    podCIDR: 10.244.1.0/24
    sysctls:
      net.ipv4.vs.conntrack: 1
      net.ipv4.vs.expire_nodest_conn: 1
      net.ipv4.vs.conn_reuse_mode: 0
kubeProxy:
  release: v1.32.0
"#;

#[test]
fn a_nodes_ipvs_sysctls_are_set_in_its_kernel() {
    let sc = load_str("ipvs-sysctls.yaml", SCENARIO).expect("scenario loads");
    let opts = RunOptions {
        record_timeline: false,
        conntrack_events: false,
        progress: None,
    };
    let sim = Simulation::new(sc, opts).expect("builds");
    let s = sim.netns(0).ipvs().sysctls();
    assert!(s.conntrack && s.expire_nodest_conn && !s.expire_quiescent_template);
    assert_eq!(s.conn_reuse_mode, 0);
}

#[test]
fn an_unknown_ipvs_sysctl_or_bad_value_is_refused_with_its_line() {
    let bad = SCENARIO.replace("conn_reuse_mode: 0", "conn_reuse_mode: 9999999999");
    let e = load_str("bad.yaml", &bad).unwrap_err().to_string();
    assert!(
        e.contains("bad.yaml:12") && e.contains("out of range"),
        "{e}"
    );
    let bad = SCENARIO.replace("net.ipv4.vs.conntrack", "net.ipv4.vs.contrack");
    let e = load_str("bad.yaml", &bad).unwrap_err().to_string();
    assert!(
        e.contains("bad.yaml") && e.contains("unknown sysctl"),
        "{e}"
    );
}
