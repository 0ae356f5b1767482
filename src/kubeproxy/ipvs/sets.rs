//! The ipsets of the IPVS proxier (pkg/proxy/ipvs/ipset.go, the `ipsetInfo` table of
//! proxier.go): their names, types and comments, the entry text `utilipset.Entry.String`
//! writes, and the `ipset` commands one sync runs to bring the kernel's sets to the
//! entries it wants (`ensureIPSet`, `syncIPSetEntries`).

use crate::k8s::IpFamily;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

/// A set type kube-proxy's IPVS mode creates (`utilipset.Type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum IpvsSetType {
    /// `hash:ip`.
    HashIp,
    /// `hash:ip,port`.
    HashIpPort,
    /// `hash:ip,port,ip`.
    HashIpPortIp,
    /// `hash:ip,port,net`.
    HashIpPortNet,
    /// `bitmap:port`.
    BitmapPort,
}

impl IpvsSetType {
    /// The type's name as `ipset` takes it.
    pub fn name(self) -> &'static str {
        match self {
            IpvsSetType::HashIp => "hash:ip",
            IpvsSetType::HashIpPort => "hash:ip,port",
            IpvsSetType::HashIpPortIp => "hash:ip,port,ip",
            IpvsSetType::HashIpPortNet => "hash:ip,port,net",
            IpvsSetType::BitmapPort => "bitmap:port",
        }
    }
}

/// One of the sets kube-proxy declares.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct IpvsSetInfo {
    /// The IPv4 proxier's name (`KUBE-CLUSTER-IP`); the IPv6 proxier's is
    /// [`IpvsSetInfo::name_for`].
    pub name: &'static str,
    /// The set type.
    pub set_type: IpvsSetType,
    /// The comment kube-proxy puts on the iptables rules matching the set (not on the set:
    /// `createSet` passes no `comment` option).
    pub comment: &'static str,
}

impl IpvsSetInfo {
    /// The set's name for a family: IPv6 sets are `KUBE-6-…`, cut to 31 bytes (`NewIPSet`).
    pub fn name_for(&self, family: IpFamily) -> String {
        match family {
            IpFamily::IPv4 => self.name.to_string(),
            IpFamily::IPv6 => {
                let mut n = self.name.replacen("KUBE-", "KUBE-6-", 1);
                n.truncate(31);
                n
            }
        }
    }
}

const fn info(name: &'static str, set_type: IpvsSetType, comment: &'static str) -> IpvsSetInfo {
    IpvsSetInfo {
        name,
        set_type,
        comment,
    }
}

/// `KUBE-LOOP-BACK`: local endpoints `ip,proto:port,ip`, masqueraded when a pod reaches
/// itself through a Service (hairpin).
pub const KUBE_LOOP_BACK: IpvsSetInfo = info(
    "KUBE-LOOP-BACK",
    IpvsSetType::HashIpPortIp,
    "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose",
);
/// `KUBE-CLUSTER-IP`: every cluster IP and port.
pub const KUBE_CLUSTER_IP: IpvsSetInfo = info(
    "KUBE-CLUSTER-IP",
    IpvsSetType::HashIpPort,
    "Kubernetes service cluster ip + port for masquerade purpose",
);
/// `KUBE-EXTERNAL-IP`: external IPs of Services with externalTrafficPolicy Cluster.
pub const KUBE_EXTERNAL_IP: IpvsSetInfo = info(
    "KUBE-EXTERNAL-IP",
    IpvsSetType::HashIpPort,
    "Kubernetes service external ip + port for masquerade and filter purpose",
);
/// `KUBE-EXTERNAL-IP-LOCAL`: external IPs of Services with externalTrafficPolicy Local.
pub const KUBE_EXTERNAL_IP_LOCAL: IpvsSetInfo = info(
    "KUBE-EXTERNAL-IP-LOCAL",
    IpvsSetType::HashIpPort,
    "Kubernetes service external ip + port with externalTrafficPolicy=local",
);
/// `KUBE-LOAD-BALANCER`: every load-balancer ingress IP and port.
pub const KUBE_LOAD_BALANCER: IpvsSetInfo = info(
    "KUBE-LOAD-BALANCER",
    IpvsSetType::HashIpPort,
    "Kubernetes service lb portal",
);
/// `KUBE-LOAD-BALANCER-FW`: ingress IPs of Services with `loadBalancerSourceRanges`.
pub const KUBE_LOAD_BALANCER_FW: IpvsSetInfo = info(
    "KUBE-LOAD-BALANCER-FW",
    IpvsSetType::HashIpPort,
    "Kubernetes service load balancer ip + port for load balancer with sourceRange",
);
/// `KUBE-LOAD-BALANCER-LOCAL`: ingress IPs of Services with externalTrafficPolicy Local.
pub const KUBE_LOAD_BALANCER_LOCAL: IpvsSetInfo = info(
    "KUBE-LOAD-BALANCER-LOCAL",
    IpvsSetType::HashIpPort,
    "Kubernetes service load balancer ip + port with externalTrafficPolicy=local",
);
/// `KUBE-LOAD-BALANCER-SOURCE-IP`: `ingress,proto:port,ingress` when a source range holds the
/// node's own address.
pub const KUBE_LOAD_BALANCER_SOURCE_IP: IpvsSetInfo = info(
    "KUBE-LOAD-BALANCER-SOURCE-IP",
    IpvsSetType::HashIpPortIp,
    "Kubernetes service load balancer ip + port + source IP for packet filter purpose",
);
/// `KUBE-LOAD-BALANCER-SOURCE-CIDR`: `ingress,proto:port,range` per source range.
pub const KUBE_LOAD_BALANCER_SOURCE_CIDR: IpvsSetInfo = info(
    "KUBE-LOAD-BALANCER-SOURCE-CIDR",
    IpvsSetType::HashIpPortNet,
    "Kubernetes service load balancer ip + port + source cidr for packet filter purpose",
);
/// `KUBE-NODE-PORT-TCP`.
pub const KUBE_NODE_PORT_TCP: IpvsSetInfo = info(
    "KUBE-NODE-PORT-TCP",
    IpvsSetType::BitmapPort,
    "Kubernetes nodeport TCP port for masquerade purpose",
);
/// `KUBE-NODE-PORT-LOCAL-TCP`.
pub const KUBE_NODE_PORT_LOCAL_TCP: IpvsSetInfo = info(
    "KUBE-NODE-PORT-LOCAL-TCP",
    IpvsSetType::BitmapPort,
    "Kubernetes nodeport TCP port with externalTrafficPolicy=local",
);
/// `KUBE-NODE-PORT-UDP`.
pub const KUBE_NODE_PORT_UDP: IpvsSetInfo = info(
    "KUBE-NODE-PORT-UDP",
    IpvsSetType::BitmapPort,
    "Kubernetes nodeport UDP port for masquerade purpose",
);
/// `KUBE-NODE-PORT-LOCAL-UDP`.
pub const KUBE_NODE_PORT_LOCAL_UDP: IpvsSetInfo = info(
    "KUBE-NODE-PORT-LOCAL-UDP",
    IpvsSetType::BitmapPort,
    "Kubernetes nodeport UDP port with externalTrafficPolicy=local",
);
/// `KUBE-NODE-PORT-SCTP-HASH`: `nodeIP,sctp:port` per node address.
pub const KUBE_NODE_PORT_SCTP: IpvsSetInfo = info(
    "KUBE-NODE-PORT-SCTP-HASH",
    IpvsSetType::HashIpPort,
    "Kubernetes nodeport SCTP port for masquerade purpose with type 'hash ip:port'",
);
/// `KUBE-NODE-PORT-LOCAL-SCTP-HASH`.
pub const KUBE_NODE_PORT_LOCAL_SCTP: IpvsSetInfo = info(
    "KUBE-NODE-PORT-LOCAL-SCTP-HASH",
    IpvsSetType::HashIpPort,
    "Kubernetes nodeport SCTP port with externalTrafficPolicy=local with type 'hash ip:port'",
);
/// `KUBE-HEALTH-CHECK-NODE-PORT`: `healthCheckNodePort`s (TCP).
pub const KUBE_HEALTH_CHECK_NODE_PORT: IpvsSetInfo = info(
    "KUBE-HEALTH-CHECK-NODE-PORT",
    IpvsSetType::BitmapPort,
    "Kubernetes health check node port",
);
/// `KUBE-IPVS-IPS`: the addresses on `kube-ipvs0`.
pub const KUBE_IPVS_IPS: IpvsSetInfo = info(
    "KUBE-IPVS-IPS",
    IpvsSetType::HashIp,
    "Addresses on the ipvs interface",
);

/// proxier.go's `ipsetInfo`, in its order (the order nfsim creates and syncs them in;
/// kube-proxy keeps them in a Go map and visits them in a random order).
pub const IPSET_INFO: [IpvsSetInfo; 17] = [
    KUBE_LOOP_BACK,
    KUBE_CLUSTER_IP,
    KUBE_EXTERNAL_IP,
    KUBE_EXTERNAL_IP_LOCAL,
    KUBE_LOAD_BALANCER,
    KUBE_LOAD_BALANCER_FW,
    KUBE_LOAD_BALANCER_LOCAL,
    KUBE_LOAD_BALANCER_SOURCE_IP,
    KUBE_LOAD_BALANCER_SOURCE_CIDR,
    KUBE_NODE_PORT_TCP,
    KUBE_NODE_PORT_LOCAL_TCP,
    KUBE_NODE_PORT_UDP,
    KUBE_NODE_PORT_LOCAL_UDP,
    KUBE_NODE_PORT_SCTP,
    KUBE_NODE_PORT_LOCAL_SCTP,
    KUBE_HEALTH_CHECK_NODE_PORT,
    KUBE_IPVS_IPS,
];

/// The entries one sync wants in each set (`activeEntries`), by IPv4 set name, as
/// `Entry.String()` writes them (`10.96.0.10,udp:53`, `30080`, …), sorted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpsetEntries {
    sets: BTreeMap<&'static str, BTreeSet<String>>,
}

impl IpsetEntries {
    /// Every set empty.
    pub fn new() -> IpsetEntries {
        IpsetEntries {
            sets: IPSET_INFO
                .iter()
                .map(|i| (i.name, BTreeSet::new()))
                .collect(),
        }
    }

    /// Adds an entry to a set.
    pub fn insert(&mut self, set: &IpvsSetInfo, entry: String) {
        self.sets.entry(set.name).or_default().insert(entry);
    }

    /// The entries of a set (empty when none).
    pub fn get(&self, set: &IpvsSetInfo) -> impl Iterator<Item = &str> {
        self.sets
            .get(set.name)
            .into_iter()
            .flatten()
            .map(String::as_str)
    }

    /// Whether a set has no entry (`isEmpty`).
    pub fn is_empty(&self, set: &IpvsSetInfo) -> bool {
        self.sets.get(set.name).is_none_or(BTreeSet::is_empty)
    }

    /// The `ipset` commands of one sync as `ipset restore` input: `create NAME TYPE …
    /// -exist` for every set (`ensureIPSet`: `family inet hashsize 1024 maxelem 65536` for
    /// hash types, `range 0-65535` for `bitmap:port`, no `comment`), then per set the
    /// entries `before` has and `self` has not (`del`), then those `self` has and `before`
    /// has not (`add … -exist`), each sorted as `sets.String.List()` sorts them.
    pub fn restore_text(&self, family: IpFamily, before: Option<&IpsetEntries>) -> String {
        let inet = match family {
            IpFamily::IPv4 => "inet",
            IpFamily::IPv6 => "inet6",
        };
        let mut out = String::new();
        for i in &IPSET_INFO {
            let name = i.name_for(family);
            match i.set_type {
                IpvsSetType::BitmapPort => {
                    let _ = writeln!(out, "create {name} bitmap:port range 0-65535 -exist");
                }
                t => {
                    let _ = writeln!(
                        out,
                        "create {name} {} family {inet} hashsize 1024 maxelem 65536 -exist",
                        t.name()
                    );
                }
            }
        }
        let empty = BTreeSet::new();
        for i in &IPSET_INFO {
            let name = i.name_for(family);
            let want = self.sets.get(i.name).unwrap_or(&empty);
            let had = before.and_then(|b| b.sets.get(i.name)).unwrap_or(&empty);
            for e in had.difference(want) {
                let _ = writeln!(out, "del {name} {e}");
            }
            for e in want.difference(had) {
                let _ = writeln!(out, "add {name} {e} -exist");
            }
        }
        out
    }
}

/// `CleanupLeftovers`' ipset half: `ipset destroy` of every set, after the iptables rules
/// that use them are gone.
pub fn destroy_text(family: IpFamily) -> String {
    IPSET_INFO
        .iter()
        .map(|i| format!("destroy {}\n", i.name_for(family)))
        .collect()
}
