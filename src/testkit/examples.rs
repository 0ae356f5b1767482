//! Ready-made Kubernetes objects for tests and examples, and the chain names kube-proxy gives
//! them.

use crate::kubeproxy::names::hash16;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

/// kube-dns `10.96.0.10:53/UDP` (port name `dns`) with two ready CoreDNS endpoints,
/// `10.244.1.5` on node-1 and `10.244.2.5` on node-2.
pub const KUBE_DNS_TWO_ENDPOINTS: &str = r#"
apiVersion: v1
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec:
  clusterIP: 10.96.0.10
  ports: [{name: dns, port: 53, protocol: UDP, targetPort: 53}]
---
apiVersion: discovery.k8s.io/v1
kind: EndpointSlice
metadata:
  name: kube-dns-abcde
  namespace: kube-system
  labels: {kubernetes.io/service-name: kube-dns}
addressType: IPv4
endpoints:
  - {addresses: [10.244.1.5], conditions: {ready: true}, nodeName: node-1}
  - {addresses: [10.244.2.5], conditions: {ready: true}, nodeName: node-2}
ports: [{name: dns, port: 53, protocol: UDP}]
"#;

/// The address of endpoint `i` (0-based) in [`service_with_endpoints`]:
/// `10.244.(1 + i / 200).(10 + i % 200)`.
pub fn endpoint_ip(i: usize) -> Ipv4Addr {
    Ipv4Addr::new(10, 244, 1 + (i / 200) as u8, 10 + (i % 200) as u8)
}

/// A Service `default/<name>` at `cluster_ip:port` (`protocol` `TCP`, `UDP` or `SCTP`,
/// port name `p<port>`, targetPort = port) and one EndpointSlice with `n` ready endpoints
/// ([`endpoint_ip`]), as YAML. At most 1000 endpoints (one slice).
pub fn service_with_endpoints(
    name: &str,
    cluster_ip: &str,
    port: u16,
    protocol: &str,
    n: usize,
) -> String {
    let mut s = format!(
        "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  clusterIP: {cluster_ip}\n  ports: [{{name: p{port}, port: {port}, protocol: {protocol}, targetPort: {port}}}]\n"
    );
    if n > 0 {
        let _ = write!(
            s,
            "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: {name}}}\naddressType: IPv4\nendpoints:\n"
        );
        for i in 0..n.min(1000) {
            let _ = writeln!(
                s,
                "  - {{addresses: [{}], conditions: {{ready: true}}}}",
                endpoint_ip(i)
            );
        }
        let _ = writeln!(
            s,
            "ports: [{{name: p{port}, port: {port}, protocol: {protocol}}}]"
        );
    }
    s
}

/// The `KUBE-SVC-…` chain of service port `ns/name:port` (as kube-proxy writes the name:
/// `":port"` only when the port is named) and protocol (`tcp`, `udp`, `sctp`).
pub fn svc_chain(service_port_name: &str, protocol: &str) -> String {
    format!(
        "KUBE-SVC-{}",
        hash16(&format!(
            "{service_port_name}{}",
            protocol.to_ascii_lowercase()
        ))
    )
}
