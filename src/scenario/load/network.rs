//! `network.cni` and the bridge plugin's options (`name`, `bridge`, `isGateway`, `ipMasq`,
//! `hairpinMode`, `promiscMode`), Calico's IP pool options (`ipipMode`, `vxlanMode`,
//! `natOutgoing`, `blockSize`, `ipPool`).

use super::*;

/// The nodes' datapath from `network:`: `ptp` unless `cni: bridge`. Bridge options are
/// refused on a `ptp` cluster, and options nfsim does not model yet are refused at their
/// place.
pub(super) fn network_cni(
    ctx: &Ctx,
    net: Option<&NetworkDoc>,
    nodes: &[NodeDef],
    cluster_cidr: Option<crate::k8s::Cidr>,
) -> Result<Cni, ScenarioError> {
    let Some(net) = net else { return Ok(Cni::Ptp) };
    let kind = net.cni.as_ref().map(|c| c.value.as_str()).unwrap_or("ptp");
    if let Some((name, loc)) = calico_opts(net)
        .into_iter()
        .find_map(|(n, l)| Some((n, l?)))
    {
        if kind != "calico" {
            return Err(ctx.at(
                loc,
                format!("network.{name}: a Calico IP pool option, but network.cni is {kind}: expected `cni: calico` with it"),
            ));
        }
    }
    let bridge_opts: [(&str, Option<Location>); 6] = [
        ("name", net.name.as_ref().map(|s| s.referenced)),
        ("bridge", net.bridge.as_ref().map(|s| s.referenced)),
        ("isGateway", net.is_gateway.as_ref().map(|s| s.referenced)),
        ("ipMasq", net.ip_masq.as_ref().map(|s| s.referenced)),
        (
            "hairpinMode",
            net.hairpin_mode.as_ref().map(|s| s.referenced),
        ),
        (
            "promiscMode",
            net.promisc_mode.as_ref().map(|s| s.referenced),
        ),
    ];
    if kind == "calico" {
        if let Some((name, Some(loc))) = bridge_opts.iter().find(|(_, l)| l.is_some()) {
            return Err(ctx.at(
                *loc,
                format!("network.{name}: a bridge plugin option, but network.cni is calico: expected `cni: bridge` with it"),
            ));
        }
        return calico(ctx, net, nodes, cluster_cidr);
    }
    match kind {
        "ptp" => {
            if let Some((name, Some(loc))) = bridge_opts.iter().find(|(_, l)| l.is_some()) {
                return Err(ctx.at(
                    *loc,
                    format!("network.{name}: a bridge plugin option, but network.cni is ptp: expected `cni: bridge` with it"),
                ));
            }
            Ok(Cni::Ptp)
        }
        "bridge" => {
            let name = match &net.bridge {
                None => "cni0".to_string(),
                Some(b) => {
                    sim_core::IfName::new(&b.value)
                        .map_err(|e| ctx.err(b, format!("network.bridge: {:?}: {e}", b.value)))?;
                    b.value.clone()
                }
            };
            if let Some(g) = net.is_gateway.as_ref().filter(|g| !g.value) {
                return Err(ctx.err(
                    g,
                    "network.isGateway: false is not modelled (the bridge would hold no address and the pods no default route): expected true",
                ));
            }
            let network_name = match &net.name {
                None => "cbr0".to_string(),
                Some(n) if n.value.is_empty() || n.value.chars().any(|c| c.is_control()) => {
                    return Err(ctx.err(
                        n,
                        "network.name: expected a CNI network name (non-empty, printable)",
                    ));
                }
                Some(n) => n.value.clone(),
            };
            if let Some(p) = net.promisc_mode.as_ref().filter(|p| p.value) {
                return Err(ctx.err(
                    p,
                    "network.promiscMode: true is not modelled yet (the bridge passing up frames for other stations): expected false",
                ));
            }
            Ok(Cni::Bridge(BridgeCni {
                name,
                hairpin: net.hairpin_mode.as_ref().is_some_and(|h| h.value),
                ip_masq: net.ip_masq.as_ref().is_some_and(|m| m.value),
                network_name,
            }))
        }
        "flannel-vxlan" => {
            if let Some((name, Some(loc))) = bridge_opts.iter().find(|(_, l)| l.is_some()) {
                return Err(ctx.at(
                    *loc,
                    format!("network.{name}: a bridge plugin option, but network.cni is flannel-vxlan, whose CNI config sets the bridge itself (cni0, hairpinMode true, isDefaultGateway true, ipMasq false): expected it left out"),
                ));
            }
            // kube-flannel's cni-conf.json: the flannel plugin delegates to the bridge plugin
            // with hairpinMode and isDefaultGateway; flanneld masquerades, so ipMasq is off.
            Ok(Cni::FlannelVxlan(BridgeCni {
                name: "cni0".to_string(),
                hairpin: true,
                ip_masq: false,
                network_name: "cbr0".to_string(),
            }))
        }
        other => {
            let c = net
                .cni
                .as_ref()
                .unwrap_or_else(|| unreachable!("a value was given"));
            let later = ["aws-vpc"];
            let why = if later.contains(&other) {
                format!("network.cni: {other} is not modelled yet: expected ptp, bridge, flannel-vxlan or calico")
            } else {
                format!("network.cni: unknown datapath {other:?}: expected ptp, bridge, flannel-vxlan or calico")
            };
            Err(ctx.err(c, why))
        }
    }
}

/// Calico's pool options given, with their places.
fn calico_opts(net: &NetworkDoc) -> [(&'static str, Option<Location>); 5] {
    [
        ("ipipMode", net.ipip_mode.as_ref().map(|s| s.referenced)),
        ("vxlanMode", net.vxlan_mode.as_ref().map(|s| s.referenced)),
        (
            "natOutgoing",
            net.nat_outgoing.as_ref().map(|s| s.referenced),
        ),
        ("blockSize", net.block_size.as_ref().map(|s| s.referenced)),
        ("ipPool", net.ip_pool.as_ref().map(|s| s.referenced)),
    ]
}

/// Calico's default IP pool (`CALICO_IPV4POOL_CIDR` in calico.yaml).
const CALICO_DEFAULT_POOL: &str = "192.168.0.0/16";

/// `cni: calico`: the pool's `ipipMode` (default `Always`, calico.yaml's
/// `CALICO_IPV4POOL_IPIP`), `natOutgoing` (default true), the pool CIDR holding every
/// node's pod CIDR. nfsim's Calico block is the node's pod CIDR (one per node, as Calico's
/// `host-local` IPAM with `usePodCidr` has it), so `blockSize` is refused; VXLAN is refused.
fn calico(
    ctx: &Ctx,
    net: &NetworkDoc,
    nodes: &[NodeDef],
    cluster_cidr: Option<crate::k8s::Cidr>,
) -> Result<Cni, ScenarioError> {
    let ipip_mode = match net.ipip_mode.as_ref() {
        None => IpipMode::Always,
        Some(m) => match m.value.as_str() {
            "Always" => IpipMode::Always,
            "CrossSubnet" => IpipMode::CrossSubnet,
            "Never" => IpipMode::Never,
            other => {
                return Err(ctx.err(
                    m,
                    format!("network.ipipMode: {other:?}: expected Always, CrossSubnet or Never"),
                ))
            }
        },
    };
    if let Some(v) = net.vxlan_mode.as_ref() {
        match v.value.as_str() {
            "Never" => {}
            "Always" | "CrossSubnet" => {
                return Err(ctx.err(
                    v,
                    format!("network.vxlanMode: {} is not modelled (Calico's vxlan.calico device): expected Never, with ipipMode for encapsulation", v.value),
                ))
            }
            other => {
                return Err(ctx.err(
                    v,
                    format!("network.vxlanMode: {other:?}: expected Never (Always and CrossSubnet are not modelled)"),
                ))
            }
        }
    }
    if let Some(b) = net.block_size.as_ref() {
        return Err(ctx.err(
            b,
            "network.blockSize: not modelled: nfsim gives each node one Calico block, its podCIDR (as Calico's host-local IPAM with usePodCidr does); expected no blockSize, with each node's podCIDR the block it should own",
        ));
    }
    let pool = match (&net.ip_pool, cluster_cidr) {
        (Some(p), _) => p.value,
        (None, Some(c)) => c,
        (None, None) => CALICO_DEFAULT_POOL
            .parse()
            .unwrap_or_else(|_| unreachable!("a valid CIDR")),
    };
    let place = net
        .ip_pool
        .as_ref()
        .map(|p| p.referenced)
        .or_else(|| net.cni.as_ref().map(|c| c.referenced));
    if !pool.addr().is_ipv4() {
        if let Some(loc) = place {
            return Err(ctx.at(
                loc,
                format!("network.cni calico: the IP pool {pool} is IPv6; nfsim's Calico datapath is IPv4 only: expected an IPv4 pool"),
            ));
        }
    }
    for n in nodes {
        let inside = n.pod_cidr.addr().is_ipv4()
            && pool.contains(n.pod_cidr.addr())
            && n.pod_cidr.prefix_len() >= pool.prefix_len();
        if !inside {
            if let Some(loc) = place {
                return Err(ctx.at(
                    loc,
                    format!(
                        "network.cni calico: node {}'s podCIDR {} (its Calico block) is outside the IP pool {pool}: expected `ipPool` (or kubeProxy.clusterCIDR) to hold every node's podCIDR",
                        n.name, n.pod_cidr
                    ),
                ));
            }
        }
    }
    Ok(Cni::Calico(CalicoCni {
        ipip_mode,
        nat_outgoing: net.nat_outgoing.as_ref().is_none_or(|n| n.value),
        pool,
    }))
}
