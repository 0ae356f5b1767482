//! Calico's datapath on a node (`network.cni: calico`), as its CNI plugin and Felix build it
//! (docs/kernel-model.md §23):
//!
//! - each pod's host-side veth is `cali` + the first 11 hex digits of
//!   sha1("NAMESPACE.POD") (libcalico-go `VethNameForWorkload`), with no address, its
//!   `proxy_arp`, `forwarding` on and `proxy_delay` 0 (cni-plugin `dataplane_linux.go`), and a
//!   route `POD-IP dev caliX scope link`;
//! - inside the pod, `default via 169.254.1.1 dev eth0` with `169.254.1.1 dev eth0 scope
//!   link`: nobody holds 169.254.1.1, the host answers the pod's ARP for it by proxy ARP;
//! - between nodes, a route to each other node's block (nfsim: its pod CIDR) via that node,
//!   out of `tunl0` (`onlink`) under `ipipMode: Always`, else out of `eth0`;
//! - `tunl0` holding the block's first address as a /32, MTU 1480;
//! - Felix's `cali-POSTROUTING` and `cali-nat-outgoing` nat chains with their rule hashes,
//!   and the `cali40all-ipam-pools` / `cali40masq-ipam-pools` sets they read.

use super::*;
use std::net::Ipv4Addr;

/// The pods' default gateway, which no machine holds (cni-plugin `dataplane_linux.go`:
/// `gw := net.IPv4(169, 254, 1, 1)`).
pub(super) const GATEWAY: Ipv4Addr = sim_netfilter::netns::LINK_LOCAL_GATEWAY;

/// `tunl0`'s MTU as calico-node sets it under IPIP (1500 less the 20-byte outer header).
pub(super) const TUNL0_MTU: u16 = 1480;

/// The IPIP fallback device (`ipip_fb_tunnel_init`: any local, any remote).
pub(super) fn tunl0() -> IfName {
    IfName::new("tunl0").unwrap_or_else(|_| unreachable!("constant name"))
}

/// The host side of a pod's veth: `cali` + 11 hex digits of sha1("NAMESPACE.POD").
pub(super) fn veth_name(namespace: &str, pod: &str) -> IfName {
    let digest = sha1(format!("{namespace}.{pod}").as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    IfName::new(&format!("cali{}", &hex[..11])).unwrap_or_else(|_| unreachable!("15 bytes"))
}

/// The address calico-node gives `tunl0`: the first address of the node's block.
pub(super) fn tunnel_address(pod_cidr: &crate::k8s::Cidr) -> IpAddr {
    pod_cidr.addr()
}

/// Proxy ARP's decision for a pod's ARP request for [`GATEWAY`] on `veth`
/// ([`Netns::arp_answer`]): `Err` says why nobody answers, and then the pod sends nothing.
pub(super) fn proxy_arp(ns: &Netns, veth: IfName) -> Result<(), String> {
    let a = ns.arp_answer(veth, GATEWAY);
    if a.answered() {
        Ok(())
    } else {
        Err(format!(
            "ARP: who-has {GATEWAY} on {veth} {a}; nothing sent"
        ))
    }
}

impl Simulation {
    /// `tunl0` transmits `inner` towards node address `remote` (`ipip_tunnel_xmit` →
    /// `ip_tunnel_xmit`): an outer IPv4 header, protocol 4, from the address the route to
    /// `remote` selects, TTL and don't-fragment inherited from the inner packet (the
    /// fallback device's `ttl 0`), the skb's mark kept (same namespace). `iptunnel_xmit`
    /// scrubs the skb (`nf_reset_ct`) and sends it with `ip_local_out`: the outer packet
    /// takes the node's OUTPUT and POSTROUTING and its conntrack as a new packet.
    pub(super) fn ipip_xmit(&mut self, n: usize, remote: IpAddr, inner: Packet) {
        if inner.len > TUNL0_MTU {
            return self.network_drop(
                &inner,
                format!(
                    "{} bytes exceed tunl0's MTU {TUNL0_MTU} (fragmentation and path MTU discovery are not modelled)",
                    inner.len
                ),
            );
        }
        let ns = &self.nodes[n].netns;
        let Some(src) = ns.routing().source_for(remote) else {
            return self.network_drop(&inner, format!("tunl0: no route to {remote}"));
        };
        self.tap_tunnel(n, &inner);
        let outer = Packet {
            src,
            dst: remote,
            l4: L4::Other { proto: 4 },
            len: inner.len + 20,
            ttl: inner.ttl,
            mark: inner.mark,
            iif: None,
            oif: None,
            tag: inner.tag,
        };
        let mut out = Vec::new();
        let r = self.nodes[n]
            .netns
            .process_into(self.now, outer, Ingress::Local, &mut out);
        self.after_kernel(n);
        if let Some(reason) = network::fate_reason(&r.fate) {
            return self.network_drop(&inner, format!("{reason} (the IPIP packet)"));
        }
        for e in out {
            match e {
                Egress::Transmit {
                    dev,
                    next_hop,
                    mut packet,
                } if dev == eth0() && packet.protocol() == 4 => {
                    packet.iif = None;
                    packet.oif = None;
                    self.tap_ipip(n, Ok(next_hop), &packet, &inner);
                    match self.owners.get(&next_hop) {
                        Some(Owner::Node(m)) => {
                            let to = *m;
                            self.queue.push(
                                self.now + self.sc.latency,
                                Ev::Ipip {
                                    to,
                                    from: n,
                                    packets: Box::new((packet, inner)),
                                },
                            );
                        }
                        _ => self.network_drop(&inner, format!("IPIP: no node has {next_hop}")),
                    }
                }
                other => self.node_egress(n, &mut vec![other], None),
            }
        }
    }

    /// Node `m` receives an IPIP packet from node `from` on `eth0`: the outer packet takes
    /// PREROUTING and INPUT (its conntrack entry on this node too); delivered locally, the
    /// IPIP handler (`ipip_rcv` → `ip_tunnel_rcv`, which scrubs the skb) hands the inner
    /// packet, TTL unchanged, to `tunl0`, where it enters PREROUTING as received there.
    pub(super) fn ipip_rcv(&mut self, m: usize, from: usize, outer: Packet, inner: Packet) {
        self.tap_ipip(m, Err(capture::Hop::Node(from)), &outer, &inner);
        let mut out = Vec::new();
        let r =
            self.nodes[m]
                .netns
                .process_into(self.now, outer, Ingress::Interface(eth0()), &mut out);
        self.after_kernel(m);
        if let Some(reason) = network::fate_reason(&r.fate) {
            let node = &self.nodes[m].def.name;
            return self.network_drop(&inner, format!("{reason} on {node} (the IPIP packet)"));
        }
        let has_tunnel = (self.nodes[m].netns.routing().interfaces())
            .iter()
            .any(|i| i.name == tunl0());
        for e in out {
            match e {
                Egress::LocalDeliver { packet } if packet.protocol() == 4 && has_tunnel => {
                    self.tap_tunnel(m, &inner);
                    self.node_kernel(m, inner, Ingress::Interface(tunl0()));
                }
                other => self.node_egress(m, &mut vec![other], None),
            }
        }
    }
}

/// Felix's rule hashes (felix/generictables `RuleHashes`): sha224 of the chain name, then
/// for each rule sha224 of the previous hash and the rule as `-A <chain> HASH <rule>`, each
/// shown as the first 16 characters of its URL-safe unpadded base64.
fn felix_hashes(chain: &str, rules: &[&str]) -> Vec<String> {
    use sha2::{Digest, Sha224};
    let mut hash = Sha224::digest(chain.as_bytes()).to_vec();
    rules
        .iter()
        .map(|r| {
            let mut s = Sha224::new();
            s.update(&hash);
            s.update(format!("-A {chain} HASH {r}").as_bytes());
            hash = s.finalize().to_vec();
            base64_url(&hash)[..16].to_string()
        })
        .collect()
}

/// Unpadded URL-safe base64 (RFC 4648 §5).
fn base64_url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, &b)| n | (u32::from(b) << (16 - 8 * i)));
        for i in 0..=chunk.len() {
            out.push(char::from(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize]));
        }
    }
    out
}

/// `iptables-restore --noflush` text of Felix's nat chains that decide Service and pod
/// traffic outcomes on a default install (felix/rules `StaticNATPostroutingChains`,
/// `NATOutgoingChain`; `MASQUERADE --random-fully` as Felix renders it where the kernel has
/// it): the POSTROUTING jump, `cali-fip-snat` (empty without floating IPs),
/// `cali-nat-outgoing` (one MASQUERADE for `natOutgoing` pools) and, with IPIP, the
/// MASQUERADE of the host's own traffic leaving by `tunl0` from another of its addresses.
pub(super) fn nat_rules(c: &CalicoCni) -> String {
    let masq = "--jump MASQUERADE --random-fully";
    let mut post = vec![
        "--jump cali-fip-snat".to_string(),
        "--jump cali-nat-outgoing".to_string(),
    ];
    if c.encapsulates() {
        post.push(format!("--out-interface tunl0 -m addrtype ! --src-type LOCAL --limit-iface-out -m addrtype --src-type LOCAL {masq}"));
    }
    let outgoing: Vec<String> = if c.nat_outgoing {
        vec![format!("-m set --match-set cali40masq-ipam-pools src -m set ! --match-set cali40all-ipam-pools dst {masq}")]
    } else {
        Vec::new()
    };
    let mut text = String::from(
        "*nat\n:cali-POSTROUTING - [0:0]\n:cali-fip-snat - [0:0]\n:cali-nat-outgoing - [0:0]\n",
    );
    let mut chain = |name: &str, rules: &[String]| {
        let refs: Vec<&str> = rules.iter().map(String::as_str).collect();
        for (r, h) in rules.iter().zip(felix_hashes(name, &refs)) {
            text.push_str(&format!(
                "-A {name} -m comment --comment \"cali:{h}\" {r}\n"
            ));
        }
    };
    // Felix keeps its jump first in the kernel's chain (`ChainInsertMode: insert`).
    let h = &felix_hashes("POSTROUTING", &["--jump cali-POSTROUTING"])[0];
    chain("cali-POSTROUTING", &post);
    chain("cali-nat-outgoing", &outgoing);
    text.push_str(&format!(
        "-I POSTROUTING 1 -m comment --comment \"cali:{h}\" --jump cali-POSTROUTING\nCOMMIT\n"
    ));
    text
}

/// `ipset restore` text of the sets Felix's nat rules read: every pool
/// (`cali40all-ipam-pools`) and the pools with `natOutgoing` (`cali40masq-ipam-pools`),
/// `hash:net` as Felix creates them (felix/ipsets `create … family inet maxelem 1048576`).
pub(super) fn ipsets(c: &CalicoCni) -> String {
    let pool = format!("{}/{}", c.pool.addr(), c.pool.prefix_len());
    let mut text = String::new();
    for (name, member) in [
        ("cali40all-ipam-pools", true),
        ("cali40masq-ipam-pools", c.nat_outgoing),
    ] {
        text.push_str(&format!(
            "create {name} hash:net family inet hashsize 1024 maxelem 1048576\n"
        ));
        if member {
            text.push_str(&format!("add {name} {pool}\n"));
        }
    }
    text
}

/// SHA-1 (FIPS 180-4 §6.1), for Calico's veth names.
fn sha1(msg: &[u8]) -> [u8; 20] {
    let mut h: [u32; 5] = [
        0x6745_2301,
        0xefcd_ab89,
        0x98ba_dcfe,
        0x1032_5476,
        0xc3d2_e1f0,
    ];
    let mut data = msg.to_vec();
    data.push(0x80);
    while data.len() % 64 != 56 {
        data.push(0);
    }
    data.extend_from_slice(&((msg.len() as u64) * 8).to_be_bytes());
    for block in data.chunks(64) {
        let mut w = [0u32; 80];
        for (i, word) in block.chunks(4).enumerate() {
            w[i] = u32::from_be_bytes([word[0], word[1], word[2], word[3]]);
        }
        for i in 16..80 {
            w[i] = (w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16]).rotate_left(1);
        }
        let [mut a, mut b, mut c, mut d, mut e] = h;
        for (i, &wi) in w.iter().enumerate() {
            let (f, k) = match i {
                0..=19 => ((b & c) | (!b & d), 0x5a82_7999),
                20..=39 => (b ^ c ^ d, 0x6ed9_eba1),
                40..=59 => ((b & c) | (b & d) | (c & d), 0x8f1b_bcdc),
                _ => (b ^ c ^ d, 0xca62_c1d6),
            };
            let t = a
                .rotate_left(5)
                .wrapping_add(f)
                .wrapping_add(e)
                .wrapping_add(k)
                .wrapping_add(wi);
            e = d;
            d = c;
            c = b.rotate_left(30);
            b = a;
            a = t;
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e]) {
            *x = x.wrapping_add(y);
        }
    }
    let mut out = [0u8; 20];
    for (i, x) in h.iter().enumerate() {
        out[4 * i..4 * i + 4].copy_from_slice(&x.to_be_bytes());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_of_known_strings() {
        let hex = |d: [u8; 20]| d.iter().map(|b| format!("{b:02x}")).collect::<String>();
        assert_eq!(hex(sha1(b"")), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(
            hex(sha1(b"abc")),
            "a9993e364706816aba3e25717850c26c9cd0d89d"
        );
    }

    #[test]
    fn veth_names_are_calicos() {
        // echo -n default.web | sha1sum | cut -c1-11
        assert_eq!(veth_name("default", "web").as_str(), "cali68caf03a5f4");
    }

    /// The hashes a default Calico install shows in `iptables-save -t nat`.
    #[test]
    fn felix_hashes_match_a_real_install() {
        let post = felix_hashes(
            "cali-POSTROUTING",
            &[
                "--jump cali-fip-snat",
                "--jump cali-nat-outgoing",
                "--out-interface tunl0 -m addrtype ! --src-type LOCAL --limit-iface-out -m addrtype --src-type LOCAL --jump MASQUERADE --random-fully",
            ],
        );
        assert_eq!(
            post,
            ["Z-c7XtVd2Bq7s_hA", "nYKhEzDlr11Jccal", "SXWvdsbh4Mw7wOln"]
        );
        assert_eq!(
            felix_hashes("cali-nat-outgoing", &["-m set --match-set cali40masq-ipam-pools src -m set ! --match-set cali40all-ipam-pools dst --jump MASQUERADE --random-fully"]),
            ["flqWnvo8yq4ULQLa"]
        );
        assert_eq!(
            felix_hashes("POSTROUTING", &["--jump cali-POSTROUTING"]),
            ["O3lYWMrLQYEMJtB5"]
        );
    }
}
