//! `network.cni` and the bridge plugin's options (`name`, `bridge`, `isGateway`, `ipMasq`,
//! `hairpinMode`, `promiscMode`).

use super::*;

/// The nodes' datapath from `network:`: `ptp` unless `cni: bridge`. Bridge options are
/// refused on a `ptp` cluster, and options nfsim does not model yet are refused at their
/// place.
pub(super) fn network_cni(ctx: &Ctx, net: Option<&NetworkDoc>) -> Result<Cni, ScenarioError> {
    let Some(net) = net else { return Ok(Cni::Ptp) };
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
    let kind = net.cni.as_ref().map(|c| c.value.as_str()).unwrap_or("ptp");
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
            let later = ["calico", "aws-vpc"];
            let why = if later.contains(&other) {
                format!("network.cni: {other} is not modelled yet: expected ptp, bridge or flannel-vxlan")
            } else {
                format!("network.cni: unknown datapath {other:?}: expected ptp, bridge or flannel-vxlan")
            };
            Err(ctx.err(c, why))
        }
    }
}
