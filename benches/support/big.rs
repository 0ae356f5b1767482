//! The generated big cluster of `benches/cluster.rs` and `examples/big_cluster.rs`.

/// A scenario text with `nodes` nodes, `services` UDP Services, `endpoints` pods spread over
/// them and `clients` per-query-port clients querying a Service every 30 s.
pub fn big_scenario(nodes: usize, services: usize, endpoints: usize, clients: usize) -> String {
    // One cluster CIDR holding every pod CIDR, as kind and kubeadm configure kube-proxy:
    // 250 nodes' /24s per /16. Up to 1,000 nodes 10.100.0.0/14, as the figures in
    // docs/performance.md were measured; beyond, 10.128.0.0/9 (up to 32,000 nodes), which
    // the /14 did not cover (the pods of node 1,000 on were outside the cluster CIDR).
    let (first, cidr) = if nodes <= 1000 {
        (100, "10.100.0.0/14")
    } else {
        (128, "10.128.0.0/9")
    };
    assert!(nodes <= 32_000, "more nodes than 10.128.0.0/9 has /24s");
    let mut s = format!("name: big\nduration: 1h\nkubeProxy: {{clusterCIDR: {cidr}}}\nnodes:\n");
    for n in 0..nodes {
        s.push_str(&format!(
            "  - {{name: n{n}, address: 192.168.{}.{}, podCIDR: 10.{}.{}.0/24}}\n",
            n / 250,
            n % 250 + 1,
            first + n / 250,
            n % 250
        ));
    }
    s.push_str("pods:\n");
    let per_node = endpoints.div_ceil(nodes).max(1) + clients.div_ceil(nodes);
    assert!(per_node < 253, "too many pods per node for a /24");
    let mut slot = vec![0usize; nodes];
    let mut place = |i: usize| {
        let n = i % nodes;
        // .1 is the node's own address on its pod veths.
        slot[n] += 1;
        (
            n,
            format!("10.{}.{}.{}", first + n / 250, n % 250, slot[n] + 1),
        )
    };
    for e in 0..endpoints {
        let (n, ip) = place(e);
        s.push_str(&format!(
            "  - {{name: ep{e}, labels: {{svc: s{}}}, node: n{n}, ip: {ip}, apps: [{{udpServer: {{port: 53}}}}]}}\n",
            e % services
        ));
    }
    for c in 0..clients {
        let (n, ip) = place(endpoints + c);
        s.push_str(&format!("  - {{name: cl{c}, node: n{n}, ip: {ip}}}\n"));
    }
    s.push_str("services:\n");
    for v in 0..services {
        s.push_str(&format!(
            "  - {{metadata: {{name: s{v}}}, spec: {{clusterIP: 10.96.{}.{}, selector: {{svc: s{v}}}, ports: [{{protocol: UDP, port: 53}}]}}}}\n",
            v / 250,
            v % 250 + 1
        ));
    }
    s.push_str("clients:\n");
    for c in 0..clients {
        s.push_str(&format!(
            "  - {{name: c{c}, pod: cl{c}, udp: {{target: default/s{}, interval: 30s, jitter: 1s, start: {}ms}}}}\n",
            c % services,
            c % 30_000
        ));
    }
    s
}
