//! How each node's kernel and kube-proxy are set up: the node network's prefix and its
//! router ([`node_network_len`], [`router_address`]), a node's namespace (sysctls, interfaces,
//! routes) and kube-proxy's configuration from the scenario's settings.

use super::*;

pub(super) fn eth0() -> IfName {
    IfName::new("eth0").unwrap_or_else(|_| unreachable!("constant name"))
}

pub(super) fn cidr_prefix(c: &crate::k8s::Cidr) -> Prefix {
    Prefix::new(c.addr(), c.prefix_len())
        .unwrap_or_else(|_| unreachable!("a parsed CIDR has a valid length"))
}

/// The prefix length of the node network: the longest prefix, at most /24 (/64 for IPv6),
/// that holds every node address of the same family as `addr`.
pub fn node_network_len(addr: IpAddr, nodes: &[NodeDef]) -> u8 {
    let (cap, width) = if addr.is_ipv4() { (24, 32) } else { (64, 128) };
    let bits = |a: IpAddr| -> u128 {
        match a {
            IpAddr::V4(v) => u128::from(u32::from(v)) << 96,
            IpAddr::V6(v) => u128::from(v),
        }
    };
    let mut len = cap;
    let all = nodes
        .iter()
        .flat_map(|n| std::iter::once(n.address).chain(n.secondary.map(|s| s.address)));
    for a in all {
        if a.is_ipv4() == addr.is_ipv4() {
            let common = (bits(a) ^ bits(addr)).leading_zeros().min(width) as u8;
            len = len.min(common);
        }
    }
    len
}

/// The router's address on the node network of `addr`: the network's first address that no
/// node or host has (`None` when every address is taken).
pub fn router_address(addr: IpAddr, sc: &Scenario) -> Option<IpAddr> {
    let len = node_network_len(addr, &sc.nodes);
    let net = Prefix::new(addr, len).ok()?;
    let taken: BTreeSet<IpAddr> = sc
        .nodes
        .iter()
        .flat_map(|n| std::iter::once(n.address).chain(n.secondary.map(|s| s.address)))
        .chain(sc.hosts.iter().map(|h| h.address))
        .collect();
    let width = if addr.is_ipv4() { 32 } else { 128 };
    let size: u128 = if width - u32::from(len) >= 127 {
        u128::MAX
    } else {
        1u128 << (width - u32::from(len))
    };
    // Skip the network address; stop before the broadcast address (IPv4).
    (1..size.saturating_sub(1).min(1 << 16))
        .map(|k| match net.addr() {
            IpAddr::V4(a) => IpAddr::V4((u32::from(a).wrapping_add(k as u32)).into()),
            IpAddr::V6(a) => IpAddr::V6((u128::from(a).wrapping_add(k)).into()),
        })
        .find(|a| !taken.contains(a))
}

/// The route to each node's pod CIDR via the node (nodes whose address and pod CIDR are of
/// one family), which every other node holds: one list for all of them when it can be
/// shared (see [`sim_netfilter::netns::SharedRoutes`]; 6 GB of copies at 10,000 nodes).
pub(super) struct PodRoutes {
    /// (pod CIDR, the node's address, eth0), in node order.
    routes: Vec<(Prefix, Option<IpAddr>, IfName)>,
    /// For each node, the index of its own pod CIDR's route in `routes`.
    own: Vec<Option<usize>>,
    /// `routes` shared, unless they cannot be.
    shared: Option<std::sync::Arc<sim_netfilter::netns::SharedRoutes>>,
}

impl PodRoutes {
    /// The pod routes of `sc`'s nodes.
    pub(super) fn of(sc: &Scenario) -> PodRoutes {
        let mut routes = Vec::new();
        let mut own = Vec::with_capacity(sc.nodes.len());
        // Calico under IPIP: `<block> via <node> dev tunl0 proto bird onlink`.
        let dev = match &sc.cni {
            crate::scenario::Cni::Calico(c) if c.encapsulates() => super::calico::tunl0(),
            _ => eth0(),
        };
        let mut dual = false;
        for m in &sc.nodes {
            if m.address.is_ipv4() == m.pod_cidr.addr().is_ipv4() {
                own.push(Some(routes.len()));
                routes.push((cidr_prefix(&m.pod_cidr), Some(m.address), dev));
            } else {
                own.push(None);
            }
        }
        // A dual-stack node's second pod CIDR via its address of that family (after every
        // first one, so that `own` still indexes the first ones).
        for m in &sc.nodes {
            if let Some(s) = m.secondary {
                dual = true;
                routes.push((cidr_prefix(&s.pod_cidr), Some(s.address), eth0()));
            }
        }
        // A shared list skips one own route per node: a dual-stack node has two.
        let shared = if dual {
            None
        } else {
            sim_netfilter::netns::SharedRoutes::new(&routes)
        };
        PodRoutes {
            routes,
            own,
            shared,
        }
    }
}

/// Builds node `i`'s namespace: sysctls, `eth0`, the routes to the other nodes' pod CIDRs
/// (of `pod_routes`) and the default route (see the module documentation).
/// Node `i`'s namespace, with room in its routing table for `pods` pod routes.
pub(super) fn node_netns(
    sc: &Scenario,
    i: usize,
    pods: usize,
    pod_routes: &PodRoutes,
) -> Result<Netns, SimError> {
    let n = &sc.nodes[i];
    let err = |message: String| SimError::Netns {
        node: n.name.clone(),
        message,
    };
    let mut sysctls = Sysctls::default();
    // The namespace's own sysctls (the ICMP rate limits, br_netfilter's); the rest are
    // conntrack's.
    let icmp = |k: &String| {
        sim_netfilter::netns::ICMP_SYSCTLS.contains(&k.as_str())
            || k == sim_netfilter::netns::BRIDGE_NF_CALL_IPTABLES
            || sim_netfilter::ipvs::IPVS_SYSCTLS.contains(&k.as_str())
    };
    for (k, v) in n.sysctls.iter().filter(|(k, _)| !icmp(k)) {
        sysctls
            .set(k, &v.to_string())
            .map_err(|e| err(e.to_string()))?;
    }
    let mut ns = Netns::new(NetnsConfig {
        name: n.name.clone(),
        seed: sc.seed,
        sysctls,
    });
    ns.conntrack_mut().set_kernel(n.kernel);
    // IPVS's `ip_vs_in` changed in 5.9 (docs/kernel-model.md §20: `conn_reuse_mode`,
    // `expire_nodest_conn`): the node's release decides which one it runs.
    ns.ipvs_mut()
        .set_kernel_version(n.kernel.major.into(), n.kernel.minor.into());
    for (k, v) in n.sysctls.iter().filter(|(k, _)| icmp(k)) {
        ns.set_sysctl(k, &v.to_string())
            .map_err(|e| err(e.to_string()))?;
    }
    let len = node_network_len(n.address, &sc.nodes);
    // eth0 with its secondary addresses (a dual-stack node's address of its second family
    // first, with its own network's length); other interfaces with theirs.
    let mut by_dev: BTreeMap<String, Vec<(IpAddr, u8)>> = BTreeMap::new();
    let mut eth0_addrs = vec![(n.address, len)];
    if let Some(s) = n.secondary {
        eth0_addrs.push((s.address, node_network_len(s.address, &sc.nodes)));
    }
    by_dev.insert("eth0".into(), eth0_addrs);
    for (dev, a, l) in &n.extra_addresses {
        let l = if dev == "eth0" && *l == 0 { len } else { *l };
        by_dev.entry(dev.clone()).or_default().push((*a, l));
    }
    for (dev, addrs) in &by_dev {
        let name = IfName::new(dev).map_err(|e| err(format!("interface {dev}: {e}")))?;
        ns.add_interface(name, addrs)
            .map_err(|e| err(e.to_string()))?;
    }
    // The bridge plugin's bridge, holding the gateway address with the pod CIDR's length
    // (its connected route is the pods' route).
    if let Some(b) = sc.cni.bridge() {
        let gw = pod_gateway(&n.pod_cidr);
        let IpAddr::V4(gw4) = gw else {
            return Err(err(format!(
                "network.cni bridge: pod CIDR {} is IPv6; the bridge datapath is IPv4 only",
                n.pod_cidr
            )));
        };
        let name = IfName::new(&b.name).map_err(|e| err(format!("bridge {}: {e}", b.name)))?;
        ns.add_bridge(
            name,
            sim_netfilter::netns::Mac::from_ipv4(gw4),
            &[(gw, n.pod_cidr.prefix_len())],
        )
        .map_err(|e| err(e.to_string()))?;
    }
    // Calico's tunl0 (the IPIP fallback device) with the block's first address as a /32.
    if let crate::scenario::Cni::Calico(c) = &sc.cni {
        if c.encapsulates() {
            ns.add_interface(
                super::calico::tunl0(),
                &[(super::calico::tunnel_address(&n.pod_cidr), 32)],
            )
            .map_err(|e| err(e.to_string()))?;
        }
        ns.ipset_restore(&super::calico::ipsets(c))
            .map_err(|e| err(format!("Calico's ipsets: {e}")))?;
        ns.restore(&super::calico::nat_rules(c), true)
            .map_err(|e| err(format!("Felix's nat chains: {e}")))?;
    }
    // flannel: every other node's pod CIDR via its flannel.1, with the neighbour and FDB
    // entries (src/cluster/flannel.rs).
    if let crate::scenario::Cni::FlannelVxlan(_) = &sc.cni {
        let peer = |m: &NodeDef| -> Option<crate::cluster::flannel::FlannelPeer> {
            match m.address {
                IpAddr::V4(address) => Some(crate::cluster::flannel::FlannelPeer {
                    address,
                    pod_cidr: cidr_prefix(&m.pod_cidr),
                    mac: crate::cluster::flannel::vtep_mac(sc.seed, &m.name),
                }),
                IpAddr::V6(_) => None,
            }
        };
        let me = peer(n).ok_or_else(|| {
            err(
                "network.cni flannel-vxlan: the node address is IPv6; the datapath is IPv4 only"
                    .into(),
            )
        })?;
        let peers: Vec<_> = (sc.nodes.iter().enumerate())
            .filter(|&(j, _)| j != i)
            .filter_map(|(_, m)| peer(m))
            .collect();
        ns.reserve_routes(peers.len() + 1 + pods);
        crate::cluster::flannel::set_up_node(&mut ns, me, &peers, 1500)
            .map_err(|e| err(e.to_string()))?;
    } else {
        let own_secondary = n
            .secondary
            .map(|s| (cidr_prefix(&s.pod_cidr), Some(s.address), eth0()));
        node_pod_routes(&mut ns, i, pods, pod_routes, own_secondary)
            .map_err(|e| err(e.to_string()))?;
    }
    // Without a free address for the router, the default route is on-link: the next hop is
    // the destination itself. A dual-stack node has one per family.
    for a in std::iter::once(n.address).chain(n.secondary.map(|s| s.address)) {
        ns.add_route(
            Prefix::default_for(a.is_ipv4()),
            router_address(a, sc),
            eth0(),
        )
        .map_err(|e| err(e.to_string()))?;
    }
    Ok(ns)
}

/// Every other node's pod CIDR via that node, added at once (one index rebuild, not one per
/// node), shared between the nodes where they can be.
fn node_pod_routes(
    ns: &mut Netns,
    i: usize,
    pods: usize,
    pod_routes: &PodRoutes,
    own_secondary: Option<(Prefix, Option<IpAddr>, IfName)>,
) -> Result<(), sim_netfilter::netns::NetnsError> {
    let own = pod_routes.own.get(i).copied().flatten();
    let added = match &pod_routes.shared {
        Some(shared) => {
            ns.reserve_routes(1 + pods);
            ns.add_shared_routes(shared, own)
        }
        None => {
            let others: Vec<_> = (pod_routes.routes.iter().enumerate())
                .filter(|&(j, r)| Some(j) != own && Some(*r) != own_secondary)
                .map(|(_, r)| *r)
                .collect();
            // These, the default route and a route per pod: sized once (a node of a
            // 1,000-node cluster would otherwise double its table to 2,048 routes).
            ns.reserve_routes(others.len() + 1 + pods);
            ns.add_routes(&others)
        }
    };
    added
}

/// The node's addresses `--nodeport-addresses` selects for `family`'s proxier (`GetNodeIPs`
/// over the node's interface addresses of the family: `lo`'s 127.0.0.1 or ::1, `eth0`'s,
/// the others', and the pod CIDR's first address that its pod veths hold); `None` when it
/// matches every address (empty list or a zero CIDR of the family). `primary` is the node's
/// address of the family /32 (/128 for IPv6; kube-proxy's `server.go`: `NodeIPs[family]`).
/// Each family's proxier keeps the CIDRs of its family (`NewNodePortAddresses(family, ...)`).
fn node_port_ips(
    n: &NodeDef,
    cni: &Cni,
    family: crate::k8s::IpFamily,
    list: &[NodePortAddress],
) -> Option<Vec<IpAddr>> {
    if list.is_empty() {
        return None;
    }
    let v4 = family == crate::k8s::IpFamily::IPv4;
    let mut cidrs = Vec::new();
    for a in list {
        match a {
            NodePortAddress::Primary => {
                let len = if v4 { 32 } else { 128 };
                if let Some(address) = n.address_of(family) {
                    cidrs.push(
                        crate::k8s::Cidr::new(address, len)
                            .unwrap_or_else(|| unreachable!("a host prefix is valid")),
                    );
                }
            }
            NodePortAddress::Cidr(c) if c.prefix_len() == 0 && c.addr().is_ipv4() == v4 => {
                return None
            }
            NodePortAddress::Cidr(c) => cidrs.push(*c),
        }
    }
    let lo = if v4 {
        IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)
    } else {
        IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)
    };
    let mut addrs = vec![lo];
    addrs.extend(n.address_of(family));
    addrs.extend(n.extra_addresses.iter().map(|(_, a, _)| *a));
    // The node's address on its pod side: the ptp veths' and bridge's gateway, Calico's
    // tunl0 (its veths hold none).
    if let Some(pod_cidr) = n.pod_cidr_of(family) {
        match cni {
            Cni::Calico(c) if c.encapsulates() => {
                addrs.push(super::calico::tunnel_address(&pod_cidr))
            }
            Cni::Calico(_) => {}
            _ => addrs.push(pod_gateway(&pod_cidr)),
        }
    }
    Some(
        addrs
            .into_iter()
            .filter(|a| a.is_ipv4() == v4 && cidrs.iter().any(|c| c.contains(*a)))
            .collect(),
    )
}

/// kube-proxy's configuration for node `i`'s proxier of `family` with settings `kp` (a
/// single-stack node runs the proxier of its address's family, a dual-stack node one per
/// family, each with the node's address and pod CIDR of that family).
pub(super) fn proxier_config(
    sc: &Scenario,
    kp: &KubeProxySettings,
    i: usize,
    family: crate::k8s::IpFamily,
) -> ProxierConfig {
    let n = &sc.nodes[i];
    let address = n.address_of(family).unwrap_or(n.address);
    let pod_cidr = n.pod_cidr_of(family).unwrap_or(n.pod_cidr);
    let mut cfg = ProxierConfig::new(&n.name, address, pod_cidr);
    cfg.family = family;
    crate::cluster::topology::configure_kube_proxy(&mut cfg, n, kp.release);
    // `--cluster-cidr` of this family (`getLocalDetectors`: one detector per family, the
    // no-op one where the family has no cluster CIDR); unset, nfsim's default is the node's
    // pod CIDR of the family.
    let cluster_cidr = kp.cluster_cidr.filter(|c| family.contains(c.addr()));
    cfg.local_detector = match &kp.detect_local {
        None => LocalDetector::ClusterCidr(cluster_cidr.unwrap_or(pod_cidr)),
        Some(DetectLocal::ClusterCidr) => match cluster_cidr {
            Some(c) => LocalDetector::ClusterCidr(c),
            // kube-proxy warns and uses the no-op detector.
            None => LocalDetector::None,
        },
        Some(DetectLocal::NodeCidr) => LocalDetector::ClusterCidr(pod_cidr),
        Some(DetectLocal::BridgeInterface(b)) => LocalDetector::BridgeInterface(b.clone()),
        Some(DetectLocal::InterfaceNamePrefix(p)) => LocalDetector::InterfaceNamePrefix(p.clone()),
        Some(DetectLocal::None) => LocalDetector::None,
    };
    cfg.masquerade_all = kp.masquerade_all;
    cfg.localhost_node_ports = kp.localhost_node_ports;
    cfg.masquerade_bit = kp.masquerade_bit;
    cfg.random_fully = kp.random_fully;
    cfg.nfacct = kp.nfacct;
    cfg.mode = kp.mode;
    cfg.ipvs = crate::kubeproxy::ipvs::IpvsSettings {
        scheduler: kp.ipvs.scheduler.clone(),
        strict_arp: kp.ipvs.strict_arp,
        tcp_timeout_secs: kp.ipvs.tcp_timeout_secs,
        tcp_fin_timeout_secs: kp.ipvs.tcp_fin_timeout_secs,
        udp_timeout_secs: kp.ipvs.udp_timeout_secs,
        // The node's own addresses (GetAllLocalAddressesExcept(kube-ipvs0)); the
        // simulation puts the others (a bridge's gateway) in when it builds the node.
        node_addresses: None,
    };
    // In nftables mode an unset `nodePortAddresses` means `primary` (kube-proxy's
    // `platformApplyDefaults`, cmd/kube-proxy/app/server_linux.go).
    cfg.node_port_addresses = if kp.mode == ProxyMode::Nftables && kp.node_port_addresses.is_empty()
    {
        node_port_ips(n, &sc.cni, family, &[NodePortAddress::Primary])
    } else {
        node_port_ips(n, &sc.cni, family, &kp.node_port_addresses)
    };
    // The ServiceCIDRs kube-proxy watches: the cluster's one range (`serviceCIDR`, or its
    // default), which nftables mode turns into `Drop traffic to unallocated ClusterIPs`.
    // (Each family's proxier keeps the ranges of its family, `OnServiceCIDRsChanged`.)
    cfg.service_cidrs = sc.service_cidrs.clone();
    // kube-proxy leaves out its INVALID drop rule when conntrack is liberal.
    cfg.conntrack_tcp_be_liberal =
        n.sysctls.get("net.netfilter.nf_conntrack_tcp_be_liberal") == Some(&1);
    cfg
}

/// The bridge plugin's `ipMasq` rules for a pod (`ip.SetupIPMasq`, plugins/pkg/ip/
/// ipmasq_linux.go, chain and comment from plugins/pkg/utils): the chain `CNI-` + the first
/// 24 hex digits of sha512(network name + container ID), accepting the pod's own subnet and
/// masquerading the rest but multicast, and the POSTROUTING jump for the pod's address.
/// nfsim has no container runtime: the container ID is the hex sha256 of the run's seed, the
/// pod and its veth (64 digits, as a runtime's). Returns the iptables commands that set the
/// rules up (`add`) or tear them down (`ip.TeardownIPMasq`).
pub(super) fn ip_masq_commands(
    b: &crate::scenario::BridgeCni,
    seed: u64,
    pod: &str,
    veth: IfName,
    ip: IpAddr,
    pod_cidr: &crate::k8s::Cidr,
    add: bool,
) -> Vec<String> {
    use sha2::{Digest, Sha256, Sha512};
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let id = hex(&Sha256::digest(format!("{seed}/{pod}/{veth}").as_bytes()));
    let chain = format!(
        "CNI-{}",
        &hex(&Sha512::digest(
            format!("{}{id}", b.network_name).as_bytes()
        ))[..24]
    );
    // Go's %q of the two strings (plain ASCII here), escaped for the command line.
    let comment = format!("name: {:?} id: {:?}", b.network_name, id).replace('"', "\\\"");
    let multicast = if ip.is_ipv4() {
        "224.0.0.0/4"
    } else {
        "ff00::/8"
    };
    let jump = format!("POSTROUTING -s {ip} -m comment --comment \"{comment}\" -j {chain}");
    if add {
        vec![
            format!("-N {chain}"),
            format!(
                "-A {chain} -d {}/{} -m comment --comment \"{comment}\" -j ACCEPT",
                pod_cidr.addr(),
                pod_cidr.prefix_len()
            ),
            format!("-A {chain} ! -d {multicast} -m comment --comment \"{comment}\" -j MASQUERADE"),
            format!("-A {jump}"),
        ]
    } else {
        vec![
            format!("-D {jump}"),
            format!("-F {chain}"),
            format!("-X {chain}"),
        ]
    }
}

/// flannel's iptables rules for node `i` (`masqRules`, `forwardRules`), as
/// `iptables-restore --noflush` input; `None` on another datapath.
pub(super) fn flannel_rules(sc: &Scenario, i: usize) -> Option<String> {
    let crate::scenario::Cni::FlannelVxlan(_) = &sc.cni else {
        return None;
    };
    let pods: Vec<Prefix> = sc.nodes.iter().map(|m| cidr_prefix(&m.pod_cidr)).collect();
    let network = crate::cluster::flannel::network(
        sc.kube_proxy.cluster_cidr.as_ref().map(cidr_prefix),
        &pods,
    )?;
    Some(crate::cluster::flannel::iptables_rules(
        network,
        cidr_prefix(&sc.nodes[i].pod_cidr),
    ))
}
