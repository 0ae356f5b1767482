//! kube-proxy's flags, set in a scenario, change the rules as kube-proxy writes them
//! (pkg/proxy/iptables/proxier.go `syncProxyRules`, pkg/proxy/util/localdetector.go).

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::load_str;
use sim_core::SimTime;

fn rules_with(kube_proxy: &str) -> String {
    node_port_world("", kube_proxy).rules(0)
}

/// One node (with `node_extra` fields after its podCIDR) running one NodePort Service
/// (web, UDP 53 -> 30053) under kube-proxy settings `kube_proxy`, a second into the run.
fn node_port_world(node_extra: &str, kube_proxy: &str) -> Simulation {
    let yaml = format!(
        "
name: t
duration: 1m
nodes:
  - {{name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24{node_extra}}}
pods:
  - {{name: web, labels: {{app: web}}, node: node-1, ip: 10.244.1.5, apps: [{{udpServer: {{port: 53}}}}]}}
services:
  - metadata: {{name: web, namespace: default}}
    spec:
      type: NodePort
      clusterIP: 10.96.0.20
      selector: {{app: web}}
      ports: [{{name: dns, protocol: UDP, port: 53, targetPort: 53, nodePort: 30053}}]
kubeProxy: {kube_proxy}
"
    );
    let sc = load_str("t.yaml", &yaml).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = Simulation::new(sc, RunOptions::default()).unwrap();
    sim.run_until(SimTime::from_secs(1)).unwrap();
    sim
}

fn lines_with<'a>(rules: &'a str, what: &str) -> Vec<&'a str> {
    rules.lines().filter(|l| l.contains(what)).collect()
}

/// The jumps from KUBE-SERVICES to KUBE-NODEPORTS.
fn nodeport_jumps(rules: &str) -> Vec<&str> {
    rules
        .lines()
        .filter(|l| l.starts_with("-A KUBE-SERVICES") && l.ends_with("-j KUBE-NODEPORTS"))
        .collect()
}

#[test]
fn the_defaults_are_kube_proxys() {
    let r = rules_with("{}");
    assert!(
        r.contains("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000"),
        "{r}"
    );
    assert!(r.contains("-j MASQUERADE --random-fully"), "{r}");
    assert!(r.contains("-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"), "{r}");
    assert!(r.contains("! -s 10.244.1.0/24 -d 10.96.0.20/32"), "{r}");
    assert!(!r.contains("nfacct"), "{r}");
}

#[test]
fn masquerade_bit_random_fully_and_nfacct() {
    let r = rules_with("{masqueradeBit: 10, randomFully: false, nfacct: true}");
    assert!(
        r.contains("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x400/0x400"),
        "{r}"
    );
    assert!(
        r.contains("-A KUBE-POSTROUTING -m mark ! --mark 0x400/0x400 -j RETURN"),
        "{r}"
    );
    let masq = lines_with(&r, "-j MASQUERADE");
    assert_eq!(masq.len(), 1);
    assert!(!masq[0].contains("--random-fully"), "{masq:?}");
    assert!(
        // iptables-save prints two spaces after --nfacct-name, as the real tool does.
        r.contains("-m nfacct --nfacct-name  ct_state_invalid_dropped_pkts -j DROP"),
        "{r}"
    );
    assert!(
        r.contains("--nfacct-name  localhost_nps_accepted_pkts"),
        "{r}"
    );
}

#[test]
fn localhost_node_ports_off_excludes_127_and_drops_the_firewall_rule() {
    let r = rules_with("{localhostNodePorts: false}");
    assert!(r.contains("-A KUBE-SERVICES ! -d 127.0.0.0/8 -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"), "{r}");
    assert!(!r.contains("block incoming localnet connections"), "{r}");
}

#[test]
fn node_port_addresses_write_one_jump_per_selected_address() {
    let r = rules_with("{nodePortAddresses: [primary]}");
    let jumps = nodeport_jumps(&r);
    assert_eq!(jumps, ["-A KUBE-SERVICES -d 192.168.0.11/32 -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -j KUBE-NODEPORTS"]);
    // A CIDR holding the node's address and the pod veths' address, plus loopback.
    let r = rules_with("{nodePortAddresses: [192.168.0.0/16, 10.244.0.0/16, 127.0.0.0/8]}");
    let jumps: Vec<&str> = nodeport_jumps(&r)
        .into_iter()
        .map(|l| l.split_whitespace().nth(3).unwrap())
        .collect();
    assert_eq!(jumps, ["10.244.1.1/32", "127.0.0.1/32", "192.168.0.11/32"]);
    // Without localhost NodePorts the loopback address is left out (kube-proxy logs an error).
    let r =
        rules_with("{nodePortAddresses: [127.0.0.0/8, 192.168.0.0/16], localhostNodePorts: false}");
    assert_eq!(nodeport_jumps(&r).len(), 1, "{r}");
    // 0.0.0.0/0 matches everything: the addrtype rule.
    let r = rules_with("{nodePortAddresses: [0.0.0.0/0]}");
    assert!(
        r.contains("-m addrtype --dst-type LOCAL -j KUBE-NODEPORTS"),
        "{r}"
    );
}

#[test]
fn detect_local_modes() {
    let svc_masq = |r: &str| -> String {
        lines_with(r, "KUBE-SVC-")
            .into_iter()
            .find(|l| l.starts_with("-A KUBE-SVC-") && l.ends_with("-j KUBE-MARK-MASQ"))
            .unwrap_or("")
            .to_string()
    };
    let r = rules_with("{detectLocalMode: NodeCIDR}");
    assert!(
        svc_masq(&r).contains("! -s 10.244.1.0/24 -d 10.96.0.20/32"),
        "{r}"
    );
    let r = rules_with("{detectLocalMode: ClusterCIDR, clusterCIDR: 10.244.0.0/16}");
    assert!(
        svc_masq(&r).contains("! -s 10.244.0.0/16 -d 10.96.0.20/32"),
        "{r}"
    );
    let r = rules_with("{detectLocalMode: BridgeInterface, bridgeInterface: cbr0}");
    assert!(
        svc_masq(&r).contains("-d 10.96.0.20/32 ! -i cbr0 -p udp"),
        "{r}"
    );
    let r = rules_with("{detectLocalMode: InterfaceNamePrefix, interfaceNamePrefix: veth}");
    assert!(
        svc_masq(&r).contains("-d 10.96.0.20/32 ! -i veth+ -p udp"),
        "{r}"
    );
    // No detector (ClusterCIDR without a clusterCIDR, or None): no masquerade rule there.
    for kp in ["{detectLocalMode: ClusterCIDR}", "{detectLocalMode: None}"] {
        let r = rules_with(kp);
        assert_eq!(svc_masq(&r), "", "{kp}: {r}");
    }
    let e = load_str(
        "t.yaml",
        "name: t\nduration: 1m\nnodes: [{name: n, address: 192.168.0.1, podCIDR: 10.244.1.0/24}]\nkubeProxy: {detectLocalMode: BridgeInterface}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("detectLocalMode BridgeInterface needs `bridgeInterface`"),
        "{e}"
    );
}

/// nftables mode: `nodePortAddresses` decides the `nodeport-ips` set, and so which of the
/// node's addresses a NodePort answers on (upstream `setupNFTables`; unset means `primary`,
/// kube-proxy's nftables default). A NodePort packet to the node's second address is
/// DNAT'd only when a CIDR selects that address, in both modes.
#[test]
fn nftables_node_port_addresses_select_the_addresses_nodeports_answer_on() {
    use sim_core::Packet;
    use sim_netfilter::netns::{Egress, Ingress};
    let run = |kube_proxy: &str| {
        let sim = node_port_world(", extraAddresses: [192.168.0.21]", kube_proxy);
        let mut ns = sim.netns(0).clone();
        let now = SimTime::from_secs(1);
        let dnat_to = |ns: &mut sim_netfilter::netns::Netns, dst: &str| {
            let q = Packet::udp("192.168.0.99:40000".parse().unwrap(), dst.parse().unwrap());
            let r = ns.process(
                now,
                q,
                Ingress::Interface(sim_core::IfName::new("eth0").unwrap()),
            );
            match r.out.first() {
                Some(Egress::Transmit { packet, .. }) => Some(packet.dst.to_string()),
                _ => None,
            }
        };
        let primary = dnat_to(&mut ns, "192.168.0.11:30053");
        let second = dnat_to(&mut ns, "192.168.0.21:30053");
        (sim.rules(0), primary, second)
    };
    // Unset: `primary`, the node's address alone.
    let (r, primary, second) = run("{mode: nftables}");
    assert!(r.contains("elements = { 192.168.0.11 }"), "{r}");
    assert_eq!(primary.as_deref(), Some("10.244.1.5"), "{r}");
    assert_eq!(second, None, "{r}");
    // A CIDR holding both addresses: both answer.
    let (r, primary, second) = run("{mode: nftables, nodePortAddresses: [192.168.0.0/16]}");
    assert!(
        r.contains("elements = { 192.168.0.11, 192.168.0.21 }"),
        "{r}"
    );
    assert_eq!(primary.as_deref(), Some("10.244.1.5"), "{r}");
    assert_eq!(second.as_deref(), Some("10.244.1.5"), "{r}");
    // 0.0.0.0/0: every local address (`fib daddr type local`), no set.
    let (r, primary, second) = run("{mode: nftables, nodePortAddresses: [0.0.0.0/0]}");
    assert!(!r.contains("nodeport-ips"), "{r}");
    assert!(
        r.contains("fib daddr type local ip daddr != 127.0.0.0/8 meta l4proto . th dport vmap @service-nodeports"),
        "{r}"
    );
    assert_eq!(primary.as_deref(), Some("10.244.1.5"), "{r}");
    assert_eq!(second.as_deref(), Some("10.244.1.5"), "{r}");
    // iptables mode honours it too (one `-d IP -j KUBE-NODEPORTS` per address; unset there
    // means every address).
    let (r, primary, second) = run("{nodePortAddresses: [primary]}");
    assert_eq!(primary.as_deref(), Some("10.244.1.5"), "{r}");
    assert_eq!(second, None, "{r}");
    let (r, primary, second) = run("{nodePortAddresses: [192.168.0.0/16]}");
    assert_eq!(primary.as_deref(), Some("10.244.1.5"), "{r}");
    assert_eq!(second.as_deref(), Some("10.244.1.5"), "{r}");
    let (r, _, second) = run("{}");
    assert_eq!(second.as_deref(), Some("10.244.1.5"), "{r}");
}
