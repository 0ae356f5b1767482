//! Synthetic kube-proxy rulesets of any size, shaped like what kube-proxy (iptables mode)
//! writes on a node: the fixed filter and nat chains of docs/kube-proxy-model.md §2, one
//! `KUBE-SERVICES` rule per service port, a `KUBE-SVC-…` chain with the masquerade rule and
//! one `statistic` rule per endpoint, and a `KUBE-SEP-…` chain per endpoint. The text is in
//! iptables-save form, so it round-trips. Used by the benchmarks (10,000 services) and tests.

use std::fmt::Write;
use std::net::{Ipv4Addr, SocketAddrV4};

use crate::netns::{Netns, NetnsConfig, Prefix};
use crate::types::{format_probability, quantize_probability};

/// A kube-proxy-style ruleset: `services` service ports with `endpoints` endpoints each.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KubeServices {
    /// Number of service ports.
    pub services: usize,
    /// Endpoints per service.
    pub endpoints: usize,
}

/// A deterministic 16-character base32 name for a chain, like kube-proxy's hashes.
fn chain_hash(kind: u8, a: u64, b: u64) -> String {
    const ALPHABET: &[u8; 32] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567";
    let mut x = a
        .wrapping_mul(0x9e37_79b9_7f4a_7c15)
        .wrapping_add(b.wrapping_mul(0xc2b2_ae3d_27d4_eb4f))
        .wrapping_add(u64::from(kind).wrapping_mul(0x1656_67b1_9e37_79f9));
    let mut s = String::with_capacity(16);
    for _ in 0..16 {
        x ^= x >> 29;
        x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
        x ^= x >> 32;
        s.push(ALPHABET[(x & 31) as usize] as char);
    }
    s
}

/// The node the benchmarks and profiling examples push packets through, before any rules:
/// `eth0` 172.18.0.2/16 with the default route via 172.18.0.1, and `cni0` 10.244.0.1/16
/// toward the pods (the endpoints' 10.244.0.0/16).
pub fn bench_node() -> Netns {
    let mut n = Netns::new(NetnsConfig::new("bench", 1));
    let ifn = |s: &str| sim_core::IfName::new(s).expect("valid interface name");
    n.add_interface(ifn("eth0"), &[(Ipv4Addr::new(172, 18, 0, 2).into(), 16)])
        .expect("eth0 on a fresh node");
    n.add_interface(ifn("cni0"), &[(Ipv4Addr::new(10, 244, 0, 1).into(), 16)])
        .expect("cni0 on a fresh node");
    n.add_route(
        Prefix::default_for(true),
        Some(Ipv4Addr::new(172, 18, 0, 1).into()),
        ifn("eth0"),
    )
    .expect("a default route via eth0's subnet");
    n
}

impl KubeServices {
    /// [`bench_node`] holding this ruleset.
    pub fn node(&self) -> Netns {
        let mut n = bench_node();
        n.restore(&self.save_text(), false)
            .expect("a synthetic ruleset loads");
        n
    }

    /// A shape.
    pub fn new(services: usize, endpoints: usize) -> KubeServices {
        KubeServices {
            services,
            endpoints: endpoints.max(1),
        }
    }

    /// Protocol (6 or 17) and cluster IP:port of service `i`: every tenth is UDP port 53,
    /// the others TCP on ports 80-86; cluster IPs from 10.96.0.1 up.
    pub fn service(&self, i: usize) -> (u8, SocketAddrV4) {
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 96, 0, 1)) + i as u32);
        if i % 10 == 3 {
            (17, SocketAddrV4::new(ip, 53))
        } else {
            (6, SocketAddrV4::new(ip, 80 + (i % 7) as u16))
        }
    }

    /// Endpoint `j` of service `i` (pod IPs from 10.244.0.0/16, port 8080 or 53).
    pub fn endpoint(&self, i: usize, j: usize) -> SocketAddrV4 {
        let n = (i * self.endpoints + j) as u32 + 2;
        let ip = Ipv4Addr::from(u32::from(Ipv4Addr::new(10, 244, 0, 0)) + n);
        let port = if self.service(i).0 == 17 { 53 } else { 8080 };
        SocketAddrV4::new(ip, port)
    }

    /// The `KUBE-SVC-…` chain of service `i`.
    pub fn svc_chain(&self, i: usize) -> String {
        format!("KUBE-SVC-{}", chain_hash(1, i as u64, 0))
    }

    /// The `KUBE-SEP-…` chain of endpoint `j` of service `i`.
    pub fn sep_chain(&self, i: usize, j: usize) -> String {
        format!("KUBE-SEP-{}", chain_hash(2, i as u64, j as u64))
    }

    fn name(&self, i: usize) -> String {
        format!("ns{}/svc{}:p", i % 50, i)
    }

    /// The whole ruleset as iptables-save prints it (filter and nat tables).
    pub fn save_text(&self) -> String {
        let mut out = String::with_capacity(self.services * (300 + self.endpoints * 450));
        out.push_str(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
             :KUBE-EXTERNAL-SERVICES - [0:0]\n:KUBE-FIREWALL - [0:0]\n:KUBE-FORWARD - [0:0]\n\
             :KUBE-NODEPORTS - [0:0]\n:KUBE-PROXY-FIREWALL - [0:0]\n:KUBE-SERVICES - [0:0]\n\
             -A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
             -A INPUT -m comment --comment \"kubernetes health check service ports\" -j KUBE-NODEPORTS\n\
             -A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
             -A INPUT -j KUBE-FIREWALL\n\
             -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
             -A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n\
             -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
             -A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n\
             -A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes load balancer firewall\" -j KUBE-PROXY-FIREWALL\n\
             -A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
             -A OUTPUT -j KUBE-FIREWALL\n\
             -A KUBE-FIREWALL ! -s 127.0.0.0/8 -d 127.0.0.0/8 -m comment --comment \"block incoming localnet connections\" -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT -j DROP\n\
             -A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n\
             -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT\n\
             -A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n\
             COMMIT\n",
        );
        out.push_str(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n",
        );
        let mut chains: Vec<String> = vec![
            "KUBE-MARK-MASQ".into(),
            "KUBE-NODEPORTS".into(),
            "KUBE-POSTROUTING".into(),
            "KUBE-SERVICES".into(),
        ];
        for i in 0..self.services {
            chains.push(self.svc_chain(i));
            for j in 0..self.endpoints {
                chains.push(self.sep_chain(i, j));
            }
        }
        chains.sort();
        for c in &chains {
            let _ = writeln!(out, ":{c} - [0:0]");
        }
        out.push_str(
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
             -A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n\
             -A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n\
             -A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n\
             -A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n\
             -A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n\
             -A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n",
        );
        // Rules are grouped by chain in sorted chain order, as iptables-save prints them.
        let mut per_chain: Vec<(String, String)> = Vec::with_capacity(chains.len());
        let mut services = String::new();
        for i in 0..self.services {
            let (proto, addr) = self.service(i);
            let p = if proto == 17 { "udp" } else { "tcp" };
            let svc = self.svc_chain(i);
            let name = self.name(i);
            let _ = writeln!(
                services,
                "-A KUBE-SERVICES -d {}/32 -p {p} -m comment --comment \"{name} cluster IP\" -m {p} --dport {} -j {svc}",
                addr.ip(),
                addr.port()
            );
            let mut body = String::new();
            let _ = writeln!(
                body,
                "-A {svc} ! -s 10.244.0.0/16 -d {}/32 -p {p} -m comment --comment \"{name} cluster IP\" -m {p} --dport {} -j KUBE-MARK-MASQ",
                addr.ip(),
                addr.port()
            );
            for j in 0..self.endpoints {
                let ep = self.endpoint(i, j);
                let sep = self.sep_chain(i, j);
                let _ = write!(body, "-A {svc} -m comment --comment \"{name} -> {ep}\"");
                if j + 1 < self.endpoints {
                    let prob = 1.0 / (self.endpoints - j) as f64;
                    let _ = write!(
                        body,
                        " -m statistic --mode random --probability {}",
                        format_probability(quantize_probability(prob))
                    );
                }
                let _ = writeln!(body, " -j {sep}");
                per_chain.push((
                    sep.clone(),
                    format!(
                        "-A {sep} -s {}/32 -m comment --comment \"{name}\" -j KUBE-MARK-MASQ\n\
                         -A {sep} -p {p} -m comment --comment \"{name}\" -m {p} -j DNAT --to-destination {ep}\n",
                        ep.ip()
                    ),
                ));
            }
            per_chain.push((svc, body));
        }
        services.push_str(
            "-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS\n",
        );
        per_chain.push(("KUBE-SERVICES".into(), services));
        per_chain.sort_by(|a, b| a.0.cmp(&b.0));
        for (_, body) in per_chain {
            out.push_str(&body);
        }
        out.push_str("COMMIT\n");
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{RestoreOptions, Ruleset, RulesetState, SaveOptions};

    #[test]
    fn synthetic_rulesets_round_trip() {
        let k = KubeServices::new(40, 3);
        let text = k.save_text();
        let rs = Ruleset::from_save(&text).unwrap();
        let saved = rs.save(&RulesetState::new(), &SaveOptions::default());
        assert_eq!(saved, text);
        let mut again = Ruleset::new();
        again.restore(&saved, &RestoreOptions::default()).unwrap();
        assert!(again
            .chain(crate::Table::Nat, "KUBE-SERVICES")
            .unwrap()
            .is_indexed());
    }
}
