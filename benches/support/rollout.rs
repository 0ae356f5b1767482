//! The rolling update of `examples/sync_cost_rollout.rs` and `tests/sync_cost.rs`: one UDP
//! Service `web` among `services` Services in all, whose endpoint is replaced at `update`
//! (web-old out, web-new in, both pods running throughout), while a client on the same
//! node queries it every 10 ms from a new source port each time. Under `syncCost:
//! modelled` the first query to reach web-new comes as long after the change as the sync
//! that writes it takes.

#![allow(dead_code)]

use std::fmt::Write;

/// When the endpoint changes, for `services` Services: after the first full sync has ended
/// (about 95 s in iptables mode at 20,000 Services, 72 s in nftables mode).
pub fn update_at_secs(services: usize) -> u64 {
    if services > 5_000 {
        150
    } else {
        10
    }
}

/// The scenario text: `mode` is `iptables` or `nftables`, `cost` `modelled` or `instant`.
pub fn rollout_scenario(services: usize, mode: &str, cost: &str) -> String {
    let update = update_at_secs(services);
    let mut s = format!(
        "name: sync-cost-rollout-{mode}\n\
         description: web's endpoint replaced at {update}s among {services} Services\n\
         duration: {}s\n\
         nodes:\n  - {{name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}}\n\
         pods:\n\
         \x20 - {{name: client, node: node-1, ip: 10.244.1.2}}\n\
         \x20 - {{name: web-old, node: node-1, ip: 10.244.1.10, apps: [{{udpServer: {{port: 8080, serviceTime: 1ms}}}}]}}\n\
         \x20 - {{name: web-new, node: node-1, ip: 10.244.1.11, apps: [{{udpServer: {{port: 8080, serviceTime: 1ms}}}}]}}\n\
         kubeProxy: {{mode: {mode}, syncCost: {cost}}}\n\
         clients:\n\
         \x20 - name: c\n    pod: client\n    udp: {{target: default/web:http, interval: 10ms, sourcePort: perQuery, timeout: 1s}}\n\
         services:\n\
         \x20 - {{kind: Service, metadata: {{name: web, namespace: default}}, spec: {{clusterIP: 10.96.0.100, ports: [{{name: http, protocol: UDP, port: 80, targetPort: 8080}}]}}}}\n",
        update + 20
    );
    for i in 1..services {
        let ip = 0x0A61_0000u32 + i as u32; // 10.97.0.0 up
        let _ = writeln!(
            s,
            "  - {{kind: Service, metadata: {{name: svc{i}, namespace: ns{}}}, spec: {{clusterIP: {}, ports: [{{name: http, protocol: UDP, port: 80}}]}}}}",
            i % 50,
            std::net::Ipv4Addr::from(ip)
        );
    }
    s.push_str("endpointSlices:\n");
    s.push_str(&web_slice("10.244.1.10", 2));
    for i in 1..services {
        let ep = 0x0AC8_0000u32 + 2 * i as u32; // 10.200.0.0 up: no pod answers there
        let _ = writeln!(
            s,
            "  - {{kind: EndpointSlice, metadata: {{name: svc{i}-1, namespace: ns{}, labels: {{kubernetes.io/service-name: svc{i}}}}}, addressType: IPv4, endpoints: [{{addresses: [{}]}}, {{addresses: [{}]}}], ports: [{{name: http, port: 8080, protocol: UDP}}]}}",
            i % 50,
            std::net::Ipv4Addr::from(ep),
            std::net::Ipv4Addr::from(ep + 1)
        );
    }
    let _ = write!(
        s,
        "events:\n  - at: {update}s\n    updateEndpointSlice:\n{}",
        web_slice("10.244.1.11", 6)
    );
    s
}

/// web's slice with one endpoint, as a list item indented by `indent` spaces.
fn web_slice(ip: &str, indent: usize) -> String {
    let pad = " ".repeat(indent);
    let dash = if indent == 2 { "- " } else { "  " };
    format!(
        "{pad}{dash}{{kind: EndpointSlice, metadata: {{name: web-1, namespace: default, labels: {{kubernetes.io/service-name: web}}}}, addressType: IPv4, endpoints: [{{addresses: [{ip}]}}], ports: [{{name: http, port: 8080, protocol: UDP}}]}}\n"
    )
}
