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

/// kube-proxy's nat rules (iptables-restore text) for one UDP Service 10.96.0.10:53 with `n`
/// endpoints `10.244.{1 + i/250}.{1 + i%250}`: `KUBE-SERVICES` jumps to `KUBE-SVC-X`, whose
/// statistic cascade gives endpoint `i` `--probability 1/(n−i)` printed as kube-proxy prints
/// it (`%0.10f`) and the last endpoint the rest; each `KUBE-SEP-i` marks hairpin traffic and
/// DNATs; `KUBE-POSTROUTING` masquerades marked packets. For `nfsim trace --all-branches` at
/// scale (`tests/trace_branches.rs`, `benches/branches.rs`).
pub fn kube_proxy_cascade_rules(n: usize) -> String {
    let ep = |i: usize| format!("10.244.{}.{}", 1 + i / 250, 1 + i % 250);
    let mut s = String::from(
        "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-MARK-MASQ - [0:0]\n:KUBE-POSTROUTING - [0:0]\n:KUBE-SVC-X - [0:0]\n",
    );
    for i in 0..n {
        s += &format!(":KUBE-SEP-{i} - [0:0]\n");
    }
    s += "-A PREROUTING -j KUBE-SERVICES\n-A POSTROUTING -j KUBE-POSTROUTING\n";
    s += "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n";
    s += "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000\n";
    s += "-A KUBE-POSTROUTING -j MASQUERADE --random-fully\n";
    s += "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000\n";
    s += "-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVC-X\n";
    s += "-A KUBE-SVC-X -d 10.96.0.10/32 ! -s 10.244.0.0/16 -p udp -m udp --dport 53 -j KUBE-MARK-MASQ\n";
    for i in 0..n {
        if i + 1 < n {
            s += &format!(
                "-A KUBE-SVC-X -m statistic --mode random --probability {:.10} -j KUBE-SEP-{i}\n",
                1.0 / (n - i) as f64
            );
        } else {
            s += &format!("-A KUBE-SVC-X -j KUBE-SEP-{i}\n");
        }
    }
    for i in 0..n {
        s += &format!("-A KUBE-SEP-{i} -s {}/32 -j KUBE-MARK-MASQ\n", ep(i));
        s += &format!(
            "-A KUBE-SEP-{i} -p udp -m udp -j DNAT --to-destination {}:53\n",
            ep(i)
        );
    }
    s + "COMMIT\n"
}

/// A filter table whose FORWARD chain jumps to `X`, holding `n` rules
/// `-m statistic --mode random --probability 1` without a target: each always matches.
pub fn always_met_statistic_rules(n: usize) -> String {
    let mut s = String::from("*filter\n:X - [0:0]\n-A FORWARD -j X\n");
    for _ in 0..n {
        s += "-A X -m statistic --mode random --probability 1\n";
    }
    s + "COMMIT\n"
}

/// A mangle PREROUTING chain of `n` coin flips that do not decide the packet's fate:
/// `-m statistic --mode random --probability 0.5 -j MARK --set-xmark B/B`, each setting its
/// own mark bit `B` (bit `i mod 32` for rule `i`), so each rule's two branches go on, and
/// differ, to the end: 2^n paths.
pub fn coin_flip_mark_rules(n: usize) -> String {
    let mut s = String::from("*mangle\n:PREROUTING ACCEPT [0:0]\n");
    for i in 0..n {
        let bit = 1u32 << (i % 32);
        s += &format!(
            "-A PREROUTING -m statistic --mode random --probability 0.5 -j MARK --set-xmark {bit:#x}/{bit:#x}\n"
        );
    }
    s + "COMMIT\n"
}
