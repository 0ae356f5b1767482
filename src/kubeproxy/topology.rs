//! Topology aware routing as kube-proxy applies it: which endpoints one node's rules choose
//! from the hints the EndpointSlice controller wrote (`pkg/proxy/topology.go`), and how that
//! changed from release to release.
//!
//! kube-proxy never reads an endpoint's `zone`: it reads `hints.forZones` / `hints.forNodes`
//! and its own node's `topology.kubernetes.io/zone` label (the node informer feeds it,
//! `NodeTopologyConfig`). For Cluster traffic policy it then picks a *topology mode*
//! (`topologyModeFromHints`, earlier `canUseTopology`):
//!
//! - `PreferSameNode` when every ready endpoint has a node hint and one is hinted for this
//!   node (v1.34+, the `PreferSameTrafficDistribution` gate on by default);
//! - else `PreferSameZone` when every ready endpoint has a zone hint and one is hinted for this
//!   node's zone;
//! - else none: every ready endpoint, as without topology.
//!
//! Up to v1.30 hints counted only when the Service's hints annotation
//! (`service.kubernetes.io/topology-aware-hints`, else `service.kubernetes.io/topology-mode`)
//! was set to anything but empty, `disabled` or `Disabled`; from v1.31 (the
//! `ServiceTrafficDistribution` gate beta, on) the annotation is ignored and hints alone
//! decide. There is no fallback once a mode is chosen (`availableForTopology`): the fallback is
//! in the choice, so a node whose zone has no ready hinted endpoint uses them all.
//! Serving-and-terminating endpoints, used when no endpoint is ready, ignore topology.
//!
//! Local traffic policy never looks at hints.

use super::model::{EndpointInfo, ServicePortInfo};
use std::collections::BTreeSet;

/// An endpoint's hints as kube-proxy keeps them (`ZoneHints()`, `NodeHints()`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TopologyHints {
    /// `hints.forZones[].name`.
    pub zones: BTreeSet<String>,
    /// `hints.forNodes[].name`.
    pub nodes: BTreeSet<String>,
}

/// How a kube-proxy release uses hints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub enum HintsUse {
    /// v1.28–v1.30: zone hints, only for Services whose hints annotation is set and not
    /// `disabled`/`Disabled` (`canUseTopology` with `ServiceTrafficDistribution` off).
    AnnotationGated,
    /// v1.31–v1.33: zone hints whatever the annotation says (`ServiceTrafficDistribution`
    /// on; `PreferSameTrafficDistribution` alpha, off, in v1.33).
    Zone,
    /// v1.34+: node hints first, then zone hints (`topologyModeFromHints` with
    /// `PreferSameTrafficDistribution` on).
    #[default]
    ZoneAndNode,
}

/// The topology features of one Kubernetes minor release (`v1.N`), for kube-proxy and the
/// EndpointSlice controller of that release. The feature gates they follow
/// (`pkg/features/kube_features.go`): `TopologyAwareHints` beta on from v1.24, GA v1.33;
/// `ServiceTrafficDistribution` alpha v1.30, beta on v1.31, GA v1.33;
/// `PreferSameTrafficDistribution` alpha v1.33, beta on v1.34, GA v1.35.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TopologyRelease {
    /// The minor version (28 for v1.28).
    pub minor: u32,
}

impl TopologyRelease {
    /// The newest release nfsim models (`latest`).
    pub const LATEST: TopologyRelease = TopologyRelease { minor: 37 };

    /// How this release's kube-proxy uses hints.
    pub fn hints_use(self) -> HintsUse {
        match self.minor {
            0..=30 => HintsUse::AnnotationGated,
            31..=33 => HintsUse::Zone,
            _ => HintsUse::ZoneAndNode,
        }
    }

    /// Whether this release's API server keeps and its EndpointSlice controller acts on
    /// `spec.trafficDistribution: PreferClose` (`ServiceTrafficDistribution` on, v1.31+).
    pub fn traffic_distribution(self) -> bool {
        self.minor >= 31
    }

    /// Whether `PreferSameZone` and `PreferSameNode` are accepted and acted on
    /// (`PreferSameTrafficDistribution` on, v1.34+; v1.33's API server rejects them with the
    /// alpha gate off).
    pub fn prefer_same(self) -> bool {
        self.minor >= 34
    }
}

impl Default for TopologyRelease {
    fn default() -> TopologyRelease {
        TopologyRelease::LATEST
    }
}

/// What one node's kube-proxy knows of topology: its name, its zone label, and how its
/// release uses hints.
#[derive(Clone, Copy, Debug)]
pub struct NodeTopology<'a> {
    /// The node's name (matched against `forNodes`).
    pub node_name: &'a str,
    /// Its `topology.kubernetes.io/zone` label, if any (matched against `forZones`).
    pub zone: Option<&'a str>,
    /// How hints are used.
    pub hints_use: HintsUse,
}

impl NodeTopology<'_> {
    /// A node without a zone: hints never narrow its endpoints, except node hints naming it.
    pub fn unzoned(node_name: &str) -> NodeTopology<'_> {
        NodeTopology {
            node_name,
            zone: None,
            hints_use: HintsUse::default(),
        }
    }
}

/// The topology mode kube-proxy picked for one service port on one node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TopologyMode {
    /// Every ready endpoint (no hints, or hints that do not cover this node).
    None,
    /// Endpoints hinted for this node's zone.
    SameZone,
    /// Endpoints hinted for this node.
    SameNode,
}

/// `topologyModeFromHints` (v1.33+) / `canUseTopology` (up to v1.32) for one service port.
pub fn topology_mode(
    endpoints: &[EndpointInfo],
    svc: &ServicePortInfo,
    node: &NodeTopology<'_>,
) -> TopologyMode {
    if node.hints_use == HintsUse::AnnotationGated {
        // canUseTopology: "Any non-empty and non-disabled values for the hints annotation are
        // acceptable."
        match svc.hints_annotation.as_deref() {
            None | Some("") | Some("disabled") | Some("Disabled") => return TopologyMode::None,
            Some(_) => {}
        }
    }
    let zone = node.zone.unwrap_or("");
    let (mut any_ready, mut all_node, mut for_node, mut all_zone, mut for_zone) =
        (false, true, false, true, false);
    for e in endpoints.iter().filter(|e| e.ready) {
        any_ready = true;
        if e.hints.nodes.is_empty() {
            all_node = false;
        } else if e.hints.nodes.contains(node.node_name) {
            for_node = true;
        }
        if e.hints.zones.is_empty() {
            all_zone = false;
        } else if e.hints.zones.contains(zone) {
            for_zone = true;
        }
    }
    if !any_ready {
        return TopologyMode::None;
    }
    if node.hints_use == HintsUse::ZoneAndNode && all_node && for_node {
        return TopologyMode::SameNode;
    }
    // An empty zone matches no hint: a node without the label never narrows by zone.
    if all_zone && for_zone && !zone.is_empty() {
        return TopologyMode::SameZone;
    }
    TopologyMode::None
}

/// `availableForTopology`: whether the mode lets this node use the endpoint.
pub fn available_for_topology(
    e: &EndpointInfo,
    mode: TopologyMode,
    node: &NodeTopology<'_>,
) -> bool {
    match mode {
        TopologyMode::None => true,
        TopologyMode::SameNode => e.hints.nodes.contains(node.node_name),
        TopologyMode::SameZone => node.zone.is_some_and(|z| e.hints.zones.contains(z)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::Protocol;
    use crate::kubeproxy::model::categorize_endpoints;
    use crate::kubeproxy::names::ServicePortName;

    fn ep(ip: &str, node: &str, zone: &str, ready: bool) -> EndpointInfo {
        EndpointInfo {
            ip: ip.parse().unwrap(),
            port: 53,
            is_local: node == "a1",
            ready,
            serving: true,
            terminating: !ready,
            hints: TopologyHints {
                zones: [zone.to_string()].into(),
                nodes: [node.to_string()].into(),
            },
        }
    }

    fn svc(annotation: Option<&str>) -> ServicePortInfo {
        ServicePortInfo {
            name: ServicePortName::new("ns", "svc", "dns", Protocol::UDP),
            cluster_ip: "10.96.0.10".parse().unwrap(),
            port: 53,
            protocol: Protocol::UDP,
            node_port: None,
            load_balancer_vips: vec![],
            sticky_max_age_seconds: None,
            external_ips: vec![],
            load_balancer_source_ranges: vec![],
            health_check_node_port: None,
            external_policy_local: false,
            internal_policy_local: false,
            hints_annotation: annotation.map(str::to_string),
        }
    }

    fn node(
        name: &'static str,
        zone: Option<&'static str>,
        hints_use: HintsUse,
    ) -> NodeTopology<'static> {
        NodeTopology {
            node_name: name,
            zone,
            hints_use,
        }
    }

    fn chosen(eps: &[EndpointInfo], s: &ServicePortInfo, n: &NodeTopology<'_>) -> Vec<String> {
        categorize_endpoints(eps, s, n)
            .all_reachable
            .iter()
            .map(|e| e.ip.to_string())
            .collect()
    }

    #[test]
    fn each_node_chooses_its_zones_endpoints_and_falls_back_to_all() {
        let eps = vec![
            ep("10.0.1.1", "a1", "za", true),
            ep("10.0.2.1", "b1", "zb", true),
            ep("10.0.2.2", "b2", "zb", true),
        ];
        let s = svc(None);
        let za = node("a1", Some("za"), HintsUse::Zone);
        let zb = node("b1", Some("zb"), HintsUse::Zone);
        assert_eq!(chosen(&eps, &s, &za), ["10.0.1.1"]);
        assert_eq!(chosen(&eps, &s, &zb), ["10.0.2.1", "10.0.2.2"]);
        // A node of a zone no endpoint is hinted for, and one without a zone: all.
        let zc = node("c1", Some("zc"), HintsUse::Zone);
        assert_eq!(chosen(&eps, &s, &zc).len(), 3);
        assert_eq!(chosen(&eps, &s, &node("c1", None, HintsUse::Zone)).len(), 3);
        // za's only endpoint not ready: za's node uses every ready one (zone b's).
        let mut down = eps.clone();
        down[0].ready = false;
        down[0].serving = false;
        assert_eq!(chosen(&down, &s, &za), ["10.0.2.1", "10.0.2.2"]);
        // One ready endpoint without hints: hints are ignored everywhere.
        let mut partial = eps.clone();
        partial[2].hints = TopologyHints::default();
        assert_eq!(chosen(&partial, &s, &za).len(), 3);
    }

    #[test]
    fn up_to_v1_30_hints_need_the_annotation_and_from_v1_34_node_hints_count() {
        let eps = vec![
            ep("10.0.1.1", "a1", "za", true),
            ep("10.0.1.2", "a2", "za", true),
            ep("10.0.2.1", "b1", "zb", true),
        ];
        let gated = node("a1", Some("za"), HintsUse::AnnotationGated);
        assert_eq!(chosen(&eps, &svc(None), &gated).len(), 3);
        assert_eq!(chosen(&eps, &svc(Some("Disabled")), &gated).len(), 3);
        assert_eq!(
            chosen(&eps, &svc(Some("Auto")), &gated),
            ["10.0.1.1", "10.0.1.2"]
        );
        // Any other non-empty value counts too.
        assert_eq!(chosen(&eps, &svc(Some("PreferZone")), &gated).len(), 2);
        // v1.31-v1.33: the annotation is ignored; node hints are not used.
        let zone = node("a1", Some("za"), HintsUse::Zone);
        assert_eq!(chosen(&eps, &svc(None), &zone), ["10.0.1.1", "10.0.1.2"]);
        // v1.34+: node a1's own endpoint only; a node no endpoint names falls to its zone.
        let both = node("a1", Some("za"), HintsUse::ZoneAndNode);
        assert_eq!(chosen(&eps, &svc(None), &both), ["10.0.1.1"]);
        let a3 = node("a3", Some("za"), HintsUse::ZoneAndNode);
        assert_eq!(chosen(&eps, &svc(None), &a3), ["10.0.1.1", "10.0.1.2"]);
    }

    #[test]
    fn hints_of_a_given_slice_are_read_as_kube_proxy_reads_them() {
        use crate::k8s::{parse_objects, K8sObject};
        use crate::kubeproxy::model::ProxyState;
        let objs = parse_objects(
            "kind: Service\nmetadata: {name: svc, namespace: ns}\nspec: {clusterIP: 10.96.0.10, ports: [{name: dns, port: 53, protocol: UDP}]}\n---\nkind: EndpointSlice\nmetadata: {name: s1, namespace: ns, labels: {kubernetes.io/service-name: svc}}\naddressType: IPv4\nendpoints:\n- addresses: [10.0.1.1]\n  nodeName: a1\n  zone: za\n  hints: {forZones: [{name: za}], forNodes: [{name: a1}]}\n- addresses: [10.0.2.1]\n  nodeName: b1\n  zone: zb\n  hints: {forZones: [{name: zb}, {name: zc}]}\nports: [{name: dns, port: 53, protocol: UDP}]\n",
        )
        .unwrap();
        let (mut svcs, mut slices) = (Vec::new(), Vec::new());
        for o in objs {
            match o {
                K8sObject::Service(s) => svcs.push(s),
                K8sObject::EndpointSlice(e) => slices.push(e),
            }
        }
        let st = ProxyState::build("c1", &svcs, &slices);
        let (spn, info) = st.services.iter().next().unwrap();
        let eps = st.endpoints_of(spn);
        assert_eq!(
            eps[1].hints.zones,
            ["zb".to_string(), "zc".to_string()].into()
        );
        assert_eq!(eps[0].hints.nodes, ["a1".to_string()].into());
        // A zone-c node takes the endpoint hinted for zone-c; node hints are incomplete.
        let zc = node("c1", Some("zc"), HintsUse::ZoneAndNode);
        assert_eq!(chosen(eps, info, &zc), ["10.0.2.1"]);
    }

    #[test]
    fn releases_map_to_their_gates() {
        let r = |minor| TopologyRelease { minor };
        assert_eq!(r(28).hints_use(), HintsUse::AnnotationGated);
        assert_eq!(r(30).hints_use(), HintsUse::AnnotationGated);
        assert_eq!(r(31).hints_use(), HintsUse::Zone);
        assert_eq!(r(33).hints_use(), HintsUse::Zone);
        assert_eq!(r(34).hints_use(), HintsUse::ZoneAndNode);
        assert!(!r(30).traffic_distribution() && r(31).traffic_distribution());
        assert!(!r(33).prefer_same() && r(34).prefer_same());
    }
}
