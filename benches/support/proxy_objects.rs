//! The Services of `benches/proxy_modes.rs` and `examples/kernel_first_packet.rs`:
//! `services` UDP Services on port 80, two endpoints each, as `kubectl get -o yaml` prints
//! them.

#![allow(dead_code)]

use std::fmt::Write;
use std::net::Ipv4Addr;

/// Cluster IP of Service `i`: 10.96.0.0/16 from 10.96.0.1 up (port 80, UDP).
pub fn cluster_ip(i: usize) -> Ipv4Addr {
    nth(Ipv4Addr::new(10, 96, 0, 1), i)
}

/// `base` + `i`.
fn nth(base: Ipv4Addr, i: usize) -> Ipv4Addr {
    Ipv4Addr::from(u32::from(base) + i as u32)
}

/// `services` Services (UDP port 80) with one EndpointSlice of two endpoints each
/// (10.244.0.0/16, port 8080), as `kubectl get -o yaml` prints them: texts of at most 400
/// Services each (`parse_objects` takes at most 1,024 documents at once).
pub fn objects(services: usize) -> Vec<String> {
    objects_at(
        services,
        Ipv4Addr::new(10, 96, 0, 1),
        Ipv4Addr::new(10, 244, 0, 2),
    )
}

/// The same Services with Service `i`'s cluster IP at `cluster_base` + `i` and its two
/// endpoints at `endpoint_base` + 2`i` and + 2`i` + 1.
pub fn objects_at(services: usize, cluster_base: Ipv4Addr, endpoint_base: Ipv4Addr) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..services {
        if i % 400 == 0 {
            out.push(String::new());
        }
        let s = out.last_mut().expect("a text was started");
        let ep = |j: usize| nth(endpoint_base, 2 * i + j);
        let _ = write!(
            s,
            "kind: Service\nmetadata: {{name: svc{i}, namespace: ns{}}}\n\
             spec: {{clusterIP: {}, ports: [{{name: http, port: 80, protocol: UDP}}]}}\n---\n\
             kind: EndpointSlice\n\
             metadata: {{name: svc{i}-1, namespace: ns{}, labels: {{kubernetes.io/service-name: svc{i}}}}}\n\
             addressType: IPv4\n\
             endpoints: [{{addresses: [{}]}}, {{addresses: [{}]}}]\n\
             ports: [{{name: http, port: 8080, protocol: UDP}}]\n---\n",
            i % 50,
            nth(cluster_base, i),
            i % 50,
            ep(0),
            ep(1),
        );
    }
    out
}
