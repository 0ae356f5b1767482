//! The EndpointSlice controller's topology hints for the slices nfsim derives from pods: the
//! endpoint's `zone` (its node's `topology.kubernetes.io/zone` label, `podToEndpoint`) and its
//! `hints`, as the controller of the scenario's release writes them.
//!
//! Which rule applies to a Service (`Reconciler.reconcileByAddressType`):
//!
//! 1. The hints annotation set to `Auto`/`auto` (`hintsEnabled`: `topology-aware-hints`, else
//!    `topology-mode`) → the proportional CPU heuristic ([`add_auto_hints`],
//!    `TopologyCache.AddHints`, in `staging/src/k8s.io/endpointslice/topologycache`).
//! 2. Else a valid `trafficDistribution` (`validTrafficDistribution`: `PreferClose` from v1.31,
//!    `PreferSameZone`/`PreferSameNode` from v1.34) → `trafficdist.ReconcileHints`
//!    (`preferCloseHeuristic`): each ready endpoint hinted for its own zone, and for
//!    `PreferSameNode` also for its own node.
//! 3. Else no hints.
//!
//! Only ready endpoints get hints in every rule; the controller builds a changed slice's
//! endpoints afresh from the pods, so a not-ready endpoint carries none.
//!
//! Where the controller iterates Go maps (zones giving and receiving endpoints, ties of
//! `getMost`), nfsim iterates zones in name order, so a tie goes to the first name.

use crate::k8s::{
    EndpointHints, EndpointSlice, ForName, Service, TrafficDistribution, LABEL_TOPOLOGY_ZONE,
};
use crate::kubeproxy::{ProxierConfig, TopologyRelease};
use crate::scenario::model::{NodeDef, Release, Scenario};
use crate::scenario::topology::topology_release;
use std::collections::BTreeMap;

/// `overloadThreshold`: the most any endpoint may be overloaded by the allocation (20 %).
pub const OVERLOAD_THRESHOLD: f64 = 0.2;

/// One node as the controller's `TopologyCache.SetNodes` sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneNode {
    /// The node's name.
    pub name: String,
    /// Its labels (the zone label, and the control-plane labels that exclude it).
    pub labels: BTreeMap<String, String>,
    /// `status.allocatable.cpu` in millicores.
    pub allocatable_cpu_milli: u64,
}

impl ZoneNode {
    /// Its `topology.kubernetes.io/zone` label, if set and not empty.
    pub fn zone(&self) -> Option<&str> {
        self.labels
            .get(LABEL_TOPOLOGY_ZONE)
            .map(String::as_str)
            .filter(|z| !z.is_empty())
    }
}

/// The nodes and the release the controller runs with.
#[derive(Clone, Debug, Default)]
pub struct ControllerTopology {
    /// Every node.
    pub nodes: Vec<ZoneNode>,
    /// The control plane's release (the scenario's `kubeProxy.release`).
    pub release: TopologyRelease,
}

/// Why the proportional heuristic wrote no hints (the `TopologyAwareHintsDisabled` event
/// messages of `topologycache/event.go`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NoHints {
    /// `InsufficientNodeInfo`, or fewer than two zones among the nodes.
    InsufficientNodeInfo,
    /// `NodesReadyInOneZoneOnly`.
    NodesReadyInOneZoneOnly,
    /// `InsufficientNumberOfEndpoints (N endpoints, Z zones)`.
    InsufficientNumberOfEndpoints(usize, usize),
    /// `MinAllocationExceedsOverloadThreshold (N endpoints, Z zones)`.
    MinAllocationExceedsOverloadThreshold(usize, usize),
    /// `NoZoneSpecified`.
    NoZoneSpecified,
}

impl std::fmt::Display for NoHints {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NoHints::InsufficientNodeInfo => f.write_str(
                "Insufficient Node information: allocatable CPU or zone not specified on one or more nodes",
            ),
            NoHints::NodesReadyInOneZoneOnly => f.write_str("Nodes only ready in one zone"),
            NoHints::InsufficientNumberOfEndpoints(n, z) => write!(
                f,
                "Insufficient number of endpoints ({n} endpoints, {z} zones)"
            ),
            NoHints::MinAllocationExceedsOverloadThreshold(n, z) => write!(
                f,
                "Unable to allocate minimum required endpoints to each zone without exceeding overload threshold ({n} endpoints, {z} zones)"
            ),
            NoHints::NoZoneSpecified => {
                f.write_str("One or more endpoints do not have a zone specified")
            }
        }
    }
}

/// `hintsEnabled`: the deprecated annotation wins when both are set.
pub fn auto_hints_enabled(svc: &Service) -> bool {
    svc.topology_auto()
}

impl ControllerTopology {
    /// The scenario's nodes, with the release its kube-proxy runs (the control plane is
    /// taken to run the same one).
    pub fn of_scenario(sc: &Scenario) -> ControllerTopology {
        ControllerTopology {
            nodes: sc
                .nodes
                .iter()
                .map(|n| ZoneNode {
                    name: n.name.clone(),
                    labels: n.labels.clone(),
                    allocatable_cpu_milli: n.allocatable_cpu_milli,
                })
                .collect(),
            release: topology_release(sc.kube_proxy.release),
        }
    }

    /// The zone of the node named `node`.
    pub fn zone_of(&self, node: &str) -> Option<&str> {
        self.nodes
            .iter()
            .find(|n| n.name == node)
            .and_then(ZoneNode::zone)
    }

    /// `validTrafficDistribution` for this release.
    pub fn valid_traffic_distribution(&self, td: Option<TrafficDistribution>) -> bool {
        match td {
            None => false,
            Some(TrafficDistribution::PreferClose) => self.release.traffic_distribution(),
            Some(_) => self.release.prefer_same(),
        }
    }

    /// `SetNodes`: each zone's share of the allocatable CPU of the nodes that count, or why
    /// there is none. Control-plane nodes are left out (`hasExcludedLabels`); nfsim's nodes
    /// are always Ready.
    pub fn cpu_ratios(&self) -> Result<BTreeMap<String, f64>, NoHints> {
        let mut by_zone: BTreeMap<String, u64> = BTreeMap::new();
        let mut total = 0u64;
        for n in &self.nodes {
            if n.labels
                .contains_key("node-role.kubernetes.io/control-plane")
                || n.labels.contains_key("node-role.kubernetes.io/master")
            {
                continue;
            }
            let (Some(zone), true) = (n.zone(), n.allocatable_cpu_milli > 0) else {
                return Err(NoHints::InsufficientNodeInfo);
            };
            total += n.allocatable_cpu_milli;
            *by_zone.entry(zone.to_string()).or_default() += n.allocatable_cpu_milli;
        }
        if total == 0 || by_zone.len() < 2 {
            return Err(NoHints::InsufficientNodeInfo);
        }
        Ok(by_zone
            .into_iter()
            .map(|(z, c)| (z, c as f64 / total as f64))
            .collect())
    }

    /// Sets the hints of `slice`'s endpoints as this release's controller would for `svc`.
    /// Returns why the proportional heuristic wrote none, when it was the rule and did.
    pub fn set_hints(&self, svc: &Service, slice: &mut EndpointSlice) -> Option<NoHints> {
        for e in &mut slice.endpoints {
            e.hints = None;
        }
        if auto_hints_enabled(svc) {
            return add_auto_hints(self, slice).err();
        }
        let td = svc.spec.traffic_distribution;
        if self.valid_traffic_distribution(td) {
            // preferCloseHeuristic.update
            let same_node = td == Some(TrafficDistribution::PreferSameNode);
            for e in slice.endpoints.iter_mut().filter(|e| ready(e)) {
                let for_zones: Vec<ForName> =
                    e.zone.iter().map(|z| ForName { name: z.clone() }).collect();
                let for_nodes: Vec<ForName> = if same_node {
                    e.node_name
                        .iter()
                        .map(|n| ForName { name: n.clone() })
                        .collect()
                } else {
                    Vec::new()
                };
                if !for_zones.is_empty() || !for_nodes.is_empty() {
                    e.hints = Some(EndpointHints {
                        for_zones,
                        for_nodes,
                    });
                }
            }
        }
        None
    }
}

/// Whether some node's rules may depend on its name through node hints (`forNodes`): a
/// Service with `trafficDistribution: PreferSameNode` (in the Services given or created by
/// events), or an EndpointSlice given with a node hint. Nodes whose rules may differ so must
/// each run their own kube-proxy.
pub fn node_hints_possible(sc: &Scenario, services: &[Service]) -> bool {
    let slice_has = |s: &EndpointSlice| {
        s.endpoints
            .iter()
            .any(|e| e.hints.as_ref().is_some_and(|h| !h.for_nodes.is_empty()))
    };
    services
        .iter()
        .any(|s| s.spec.traffic_distribution == Some(TrafficDistribution::PreferSameNode))
        || sc.endpoint_slices.iter().flatten().any(slice_has)
        || sc.events.iter().any(|e| match &e.action {
            crate::scenario::model::Action::UpsertEndpointSlice(s) => slice_has(s),
            _ => false,
        })
}

/// Gives one node's kube-proxy what the node informer gives it: the node's zone label, and
/// the hints rules of its release.
pub fn configure_kube_proxy(cfg: &mut ProxierConfig, node: &NodeDef, release: Release) {
    cfg.zone = node
        .labels
        .get(LABEL_TOPOLOGY_ZONE)
        .filter(|z| !z.is_empty())
        .cloned();
    cfg.hints_use = topology_release(release).hints_use();
}

/// `EndpointReady`: `ready` explicitly true.
fn ready(e: &crate::k8s::Endpoint) -> bool {
    e.conditions.ready == Some(true)
}

/// One zone's allocation (`allocation`; its `minimum` and `maximum` matter only to the
/// controller's slices left unchanged, which nfsim's one rebuilt slice never is).
#[derive(Clone, Copy, Debug)]
struct Allocation {
    desired: f64,
}

/// `getAllocations`.
fn allocations(
    ratios: &BTreeMap<String, f64>,
    n: usize,
) -> Result<BTreeMap<String, Allocation>, NoHints> {
    if ratios.len() < 2 {
        return Err(NoHints::NodesReadyInOneZoneOnly);
    }
    if ratios.len() > n {
        return Err(NoHints::InsufficientNumberOfEndpoints(n, ratios.len()));
    }
    let mut remaining = n as i64;
    let mut out = BTreeMap::new();
    for (zone, ratio) in ratios {
        let desired = ratio * n as f64;
        let minimum = (desired * (1.0 / (1.0 + OVERLOAD_THRESHOLD))).ceil() as usize;
        out.insert(
            zone.clone(),
            Allocation {
                desired: desired.max(minimum as f64),
            },
        );
        remaining -= minimum as i64;
        if remaining < 0 {
            return Err(NoHints::MinAllocationExceedsOverloadThreshold(
                n,
                ratios.len(),
            ));
        }
    }
    Ok(out)
}

/// `getMost`: the zone with the largest value above 0 (ties: the first name).
fn most(m: &BTreeMap<String, f64>) -> (Option<String>, f64) {
    let mut best: (Option<String>, f64) = (None, 0.0);
    for (z, v) in m {
        if *v > best.1 {
            best = (Some(z.clone()), *v);
        }
    }
    best
}

/// `TopologyCache.AddHints` on the one slice nfsim derives per Service (every endpoint is
/// in `ToUpdate`): each ready endpoint hinted for its own zone, then endpoints of zones
/// above their CPU share handed to zones below it (`getGivingAndReceivingZones`,
/// `redistributeHints`). On an error every hint is removed (`RemoveHintsFromSlices`).
pub fn add_auto_hints(topo: &ControllerTopology, slice: &mut EndpointSlice) -> Result<(), NoHints> {
    let n = slice.endpoints.iter().filter(|e| ready(e)).count();
    let allocs = allocations(&topo.cpu_ratios()?, n)?;
    let mut allocated: BTreeMap<String, i64> = BTreeMap::new();
    for e in slice.endpoints.iter_mut().filter(|e| ready(e)) {
        let Some(zone) = e.zone.clone().filter(|z| !z.is_empty()) else {
            for e in &mut slice.endpoints {
                e.hints = None;
            }
            return Err(NoHints::NoZoneSpecified);
        };
        *allocated.entry(zone.clone()).or_default() += 1;
        e.hints = Some(EndpointHints {
            for_zones: vec![ForName { name: zone }],
            for_nodes: Vec::new(),
        });
    }
    // getGivingAndReceivingZones
    let (mut giving_desired, mut receiving_desired) = (BTreeMap::new(), BTreeMap::new());
    for (zone, a) in &allocs {
        let have = *allocated.get(zone).unwrap_or(&0) as f64;
        if have > a.desired {
            giving_desired.insert(zone.clone(), have - a.desired);
        } else if have < a.desired {
            receiving_desired.insert(zone.clone(), a.desired - have);
        }
    }
    let (mut giving, mut receiving): (BTreeMap<String, usize>, BTreeMap<String, usize>) =
        (BTreeMap::new(), BTreeMap::new());
    loop {
        let (gz, give) = most(&giving_desired);
        let (rz, recv) = most(&receiving_desired);
        let (Some(gz), Some(rz)) = (gz, rz) else {
            break;
        };
        if (give < 1.0 && recv < 1.0) || give < 0.5 || recv < 0.5 {
            break;
        }
        *giving.entry(gz.clone()).or_default() += 1;
        *giving_desired.entry(gz).or_default() -= 1.0;
        *receiving.entry(rz.clone()).or_default() += 1;
        *receiving_desired.entry(rz).or_default() -= 1.0;
    }
    // redistributeHints, in endpoint order.
    for e in slice.endpoints.iter_mut().filter(|e| ready(e)) {
        if giving.is_empty() || receiving.is_empty() {
            break;
        }
        let Some(zone) = e.zone.clone() else { continue };
        if giving.get(&zone).copied().unwrap_or(0) == 0 {
            continue;
        }
        let Some(to) = receiving
            .iter()
            .find(|(_, k)| **k > 0)
            .map(|(z, _)| z.clone())
        else {
            continue;
        };
        e.hints = Some(EndpointHints {
            for_zones: vec![ForName { name: to.clone() }],
            for_nodes: Vec::new(),
        });
        for (m, z) in [(&mut giving, &zone), (&mut receiving, &to)] {
            let k = m.get_mut(z).expect("present");
            *k -= 1;
            if *k == 0 {
                m.remove(z);
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::{AddressType, Endpoint, EndpointConditions, ObjectMeta, LABEL_SERVICE_NAME};

    fn node(name: &str, zone: &str, cpu: u64) -> ZoneNode {
        ZoneNode {
            name: name.into(),
            labels: [(LABEL_TOPOLOGY_ZONE.to_string(), zone.to_string())].into(),
            allocatable_cpu_milli: cpu,
        }
    }

    fn slice(zones: &[(&str, &str, bool)]) -> EndpointSlice {
        let mut meta = ObjectMeta::new("ns", "s");
        meta.labels.insert(LABEL_SERVICE_NAME.into(), "svc".into());
        EndpointSlice {
            api_version: None,
            kind: None,
            metadata: meta,
            address_type: AddressType::IPv4,
            endpoints: zones
                .iter()
                .enumerate()
                .map(|(i, (node, zone, ready))| Endpoint {
                    addresses: vec![format!("10.0.0.{}", i + 1).parse().unwrap()],
                    conditions: EndpointConditions {
                        ready: Some(*ready),
                        serving: Some(*ready),
                        terminating: Some(false),
                    },
                    node_name: Some(node.to_string()),
                    zone: Some(zone.to_string()),
                    hints: None,
                })
                .collect(),
            ports: vec![],
        }
    }

    fn svc(yaml_extra: &str) -> Service {
        Service::from_yaml(&format!(
            "kind: Service\nmetadata:\n  name: svc\n  namespace: ns\n{yaml_extra}spec:\n  clusterIP: 10.96.0.1\n  ports: [{{port: 53}}]\n"
        ))
        .unwrap()
    }

    fn hinted(s: &EndpointSlice) -> Vec<String> {
        s.endpoints
            .iter()
            .map(|e| match &e.hints {
                None => "-".to_string(),
                Some(h) => h
                    .for_zones
                    .iter()
                    .map(|z| z.name.as_str())
                    .chain(h.for_nodes.iter().map(|n| n.name.as_str()))
                    .collect::<Vec<_>>()
                    .join("+"),
            })
            .collect()
    }

    #[test]
    fn prefer_close_hints_each_ready_endpoint_with_its_zone_only_from_v1_31() {
        let mut topo = ControllerTopology {
            nodes: vec![node("a1", "za", 1000), node("b1", "zb", 1000)],
            release: TopologyRelease { minor: 31 },
        };
        let s = svc("");
        let mut s = Service {
            spec: crate::k8s::ServiceSpec {
                traffic_distribution: Some(TrafficDistribution::PreferClose),
                ..s.spec
            },
            ..s
        };
        let mut sl = slice(&[("a1", "za", true), ("b1", "zb", true), ("b1", "zb", false)]);
        assert_eq!(topo.set_hints(&s, &mut sl), None);
        assert_eq!(hinted(&sl), ["za", "zb", "-"]);
        // PreferSameNode in v1.31: not valid, no hints.
        s.spec.traffic_distribution = Some(TrafficDistribution::PreferSameNode);
        topo.set_hints(&s, &mut sl);
        assert_eq!(hinted(&sl), ["-", "-", "-"]);
        // v1.34: zone and node.
        topo.release = TopologyRelease { minor: 34 };
        topo.set_hints(&s, &mut sl);
        assert_eq!(hinted(&sl), ["za+a1", "zb+b1", "-"]);
        // v1.30: trafficDistribution off.
        topo.release = TopologyRelease { minor: 30 };
        s.spec.traffic_distribution = Some(TrafficDistribution::PreferClose);
        topo.set_hints(&s, &mut sl);
        assert_eq!(hinted(&sl), ["-", "-", "-"]);
    }

    #[test]
    fn auto_allocates_by_cpu_and_gives_endpoints_to_the_poorer_zone() {
        // Zone za has 3 of 4 CPUs' worth... of 2 nodes of equal CPU each zone: equal shares.
        let topo = ControllerTopology {
            nodes: vec![node("a1", "za", 1000), node("b1", "zb", 1000)],
            release: TopologyRelease::LATEST,
        };
        let s = svc("  annotations: {service.kubernetes.io/topology-mode: Auto}\n");
        // 3 endpoints in za, 1 in zb: za's desired is 2, so it gives one to zb.
        let mut sl = slice(&[
            ("a1", "za", true),
            ("a1", "za", true),
            ("a1", "za", true),
            ("b1", "zb", true),
        ]);
        assert_eq!(topo.set_hints(&s, &mut sl), None);
        assert_eq!(hinted(&sl), ["zb", "za", "za", "zb"]);
        // 1 endpoint, 2 zones: no hints.
        let mut sl = slice(&[("a1", "za", true)]);
        assert_eq!(
            topo.set_hints(&s, &mut sl),
            Some(NoHints::InsufficientNumberOfEndpoints(1, 2))
        );
        assert_eq!(hinted(&sl), ["-"]);
        // The deprecated annotation wins: Disabled there turns Auto off.
        let s = svc("  annotations: {service.kubernetes.io/topology-mode: Auto, service.kubernetes.io/topology-aware-hints: Disabled}\n");
        let mut sl = slice(&[("a1", "za", true), ("b1", "zb", true)]);
        assert_eq!(topo.set_hints(&s, &mut sl), None);
        assert_eq!(hinted(&sl), ["-", "-"]);
    }

    #[test]
    fn auto_refuses_when_minimum_allocation_overloads() {
        // zb holds 3/4 of the CPU: with 4 endpoints its minimum is ceil(3/1.2) = 3 and za's
        // ceil(1/1.2) = 1: fits. With 2 endpoints: zb min ceil(1.5/1.2)=2, za 1 → 3 > 2.
        let topo = ControllerTopology {
            nodes: vec![node("a1", "za", 1000), node("b1", "zb", 3000)],
            release: TopologyRelease::LATEST,
        };
        let s = svc("  annotations: {service.kubernetes.io/topology-aware-hints: auto}\n");
        let mut sl = slice(&[("a1", "za", true), ("b1", "zb", true)]);
        assert_eq!(
            topo.set_hints(&s, &mut sl),
            Some(NoHints::MinAllocationExceedsOverloadThreshold(2, 2))
        );
        let mut sl = slice(&[
            ("a1", "za", true),
            ("a1", "za", true),
            ("b1", "zb", true),
            ("b1", "zb", true),
        ]);
        assert_eq!(topo.set_hints(&s, &mut sl), None);
        // za has 2, desires 1: gives its first endpoint to zb (desired 3).
        assert_eq!(hinted(&sl), ["zb", "za", "zb", "zb"]);
        // A node without a zone: insufficient node info.
        let mut t2 = topo.clone();
        t2.nodes.push(ZoneNode {
            name: "c1".into(),
            labels: BTreeMap::new(),
            allocatable_cpu_milli: 1000,
        });
        assert_eq!(
            t2.set_hints(&s, &mut sl),
            Some(NoHints::InsufficientNodeInfo)
        );
        assert_eq!(hinted(&sl), ["-", "-", "-", "-"]);
    }
}
