//! flannel's `vxlan` backend as it sets a node up (flannel v0.2x, pkg/backend/vxlan and
//! pkg/trafficmngr/iptables): the `flannel.1` device, per remote node its route, neighbour
//! and FDB entries, and the iptables rules it keeps (`FLANNEL-POSTRTG`, `FLANNEL-FWD`).

use sim_core::{IfName, SimRng};
use sim_netfilter::netns::{Mac, Netns, NetnsError, Prefix, VxlanConfig};
use std::net::Ipv4Addr;

/// The VXLAN device flannel creates for VNI 1 (`flannel.%d`).
pub fn flannel_dev() -> IfName {
    IfName::new("flannel.1").unwrap_or_else(|_| unreachable!("constant name"))
}

/// The MAC of node `node`'s `flannel.1`. flannel gives the device a random locally
/// administered address (`mac.NewHardwareAddr`) and publishes it in the node's
/// `flannel.alpha.coreos.com/backend-data` annotation; nfsim derives it from the seed.
pub fn vtep_mac(seed: u64, node: &str) -> Mac {
    let v = SimRng::derive(seed, &format!("{node}/flannel.1/mac")).next_u64();
    let b = v.to_le_bytes();
    // Locally administered, unicast.
    Mac([(b[0] & 0xfe) | 0x02, b[1], b[2], b[3], b[4], b[5]])
}

/// One node of the overlay, as another node's flannel sees it in its lease.
#[derive(Clone, Copy, Debug)]
pub struct FlannelPeer {
    /// The node's address (the lease's `PublicIP`).
    pub address: Ipv4Addr,
    /// Its pod CIDR (the lease's subnet).
    pub pod_cidr: Prefix,
    /// Its `flannel.1` MAC (the lease's `VtepMAC`).
    pub mac: Mac,
}

/// Sets up `flannel.1` on a node: `type vxlan id 1 local ADDRESS dev eth0 nolearning`, MTU
/// the external interface's less 50, address `<pod CIDR>.0/32`; then per peer the route
/// `<pod CIDR> via <pod CIDR>.0 dev flannel.1 onlink`, the neighbour entry of that gateway
/// (`AddARP`) and the FDB entry of its MAC to the peer's address (`AddFDB`), as
/// `handleSubnetEvents` writes them (vxlan_network.go).
pub fn set_up_node(
    ns: &mut Netns,
    me: FlannelPeer,
    peers: &[FlannelPeer],
    eth0_mtu: u16,
) -> Result<(), NetnsError> {
    let dev = flannel_dev();
    ns.add_vxlan(
        VxlanConfig {
            dev,
            vni: 1,
            local: me.address,
            dst_port: sim_netfilter::netns::VXLAN_DEFAULT_DST_PORT,
            mtu: eth0_mtu - sim_netfilter::netns::VXLAN_HEADROOM,
            mac: me.mac,
        },
        &[(me.pod_cidr.addr(), 32)],
    )?;
    let routes: Vec<_> = peers
        .iter()
        .map(|p| (p.pod_cidr, Some(p.pod_cidr.addr()), dev))
        .collect();
    ns.add_routes(&routes)?;
    for p in peers {
        ns.vxlan_neigh_set(dev, p.pod_cidr.addr(), p.mac);
        ns.vxlan_fdb_set(dev, p.mac, p.address);
    }
    Ok(())
}

/// flannel's iptables rules for a node with pod CIDR `pod_cidr` in cluster network
/// `cluster_cidr`, as iptables-restore input (`--noflush`): `masqRules` (nat) and
/// `forwardRules` (filter) of pkg/trafficmngr/iptables/iptables.go, in their order, with
/// `--random-fully` (iptables has it; `ipMasqRandomFullyDisable` false).
pub fn iptables_rules(cluster_cidr: Prefix, pod_cidr: Prefix) -> String {
    let (c, p) = (cidr(cluster_cidr), cidr(pod_cidr));
    let m = "-m comment --comment \"flanneld masq\"";
    let f = "-m comment --comment \"flanneld forward\"";
    format!(
        "*nat
:FLANNEL-POSTRTG - [0:0]
-A POSTROUTING {m} -j FLANNEL-POSTRTG
-A FLANNEL-POSTRTG -m mark --mark 0x4000/0x4000 {m} -j RETURN
-A FLANNEL-POSTRTG -s {p} -d {c} {m} -j RETURN
-A FLANNEL-POSTRTG -s {c} -d {p} {m} -j RETURN
-A FLANNEL-POSTRTG ! -s {c} -d {p} {m} -j RETURN
-A FLANNEL-POSTRTG -s {c} ! -d 224.0.0.0/4 {m} -j MASQUERADE --random-fully
-A FLANNEL-POSTRTG ! -s {c} -d {c} {m} -j MASQUERADE --random-fully
COMMIT
*filter
:FLANNEL-FWD - [0:0]
-A FORWARD {f} -j FLANNEL-FWD
-A FLANNEL-FWD -s {c} {f} -j ACCEPT
-A FLANNEL-FWD -d {c} {f} -j ACCEPT
COMMIT
"
    )
}

fn cidr(p: Prefix) -> String {
    format!("{}/{}", p.addr(), p.prefix_len())
}

/// flannel's `Network` (net-conf.json) for a scenario: kube-proxy's `clusterCIDR` when the
/// scenario gives one, else the longest prefix (at most /16, kube-flannel's 10.244.0.0/16)
/// that holds every node's pod CIDR.
pub fn network(cluster_cidr: Option<Prefix>, pod_cidrs: &[Prefix]) -> Option<Prefix> {
    if let Some(c) = cluster_cidr {
        return Some(c);
    }
    let first = pod_cidrs.first()?;
    let bits = |p: &Prefix| match p.addr() {
        std::net::IpAddr::V4(a) => u32::from(a),
        std::net::IpAddr::V6(_) => 0,
    };
    let mut len = 16u8;
    for p in pod_cidrs {
        let common = (bits(p) ^ bits(first)).leading_zeros().min(32) as u8;
        len = len.min(common).min(p.prefix_len());
    }
    Prefix::new(first.addr(), len).ok()
}
