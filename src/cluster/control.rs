//! The control plane below kube-proxy: pods' lifecycle as the kubelet reports it, and the
//! EndpointSlice controller that turns pods and Service selectors into EndpointSlices.
//!
//! Readiness follows the kubelet: a container that exits (OOM kill) is reported not ready
//! after [`CONTAINER_EXIT_DETECTION`] (PLEG relist); a readiness probe that starts failing
//! marks the pod not ready after `periodSeconds × failureThreshold`, one that starts
//! succeeding marks it ready after `periodSeconds × successThreshold`. A deleted pod is
//! terminating at once (`ready: false`, `serving` as its probe says, `terminating: true`)
//! until its grace period ends, then gone. Endpoint conditions are the EndpointSlice
//! controller's: `ready = Ready && !terminating`, `serving = Ready`, `terminating`.

use super::topology::ControllerTopology;
use crate::k8s::{
    Endpoint, EndpointConditions, EndpointPort, EndpointSlice, IntOrString, IpFamily, ObjectMeta,
    Service, LABEL_SERVICE_NAME,
};
use crate::scenario::model::PodDef;
use sim_core::{SimDuration, SimTime};
use std::collections::BTreeMap;

/// Time for the kubelet to notice an exited container (PLEG relist period, 1 s).
pub const CONTAINER_EXIT_DETECTION: SimDuration = SimDuration::from_secs(1);

/// Where a pod is in its life.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Running (its process may still be dead after an OOM kill).
    Running,
    /// Deleted, terminating until the given instant.
    Terminating(SimTime),
    /// Gone: no process, no network.
    Gone,
}

/// One pod's state.
#[derive(Clone, Debug)]
pub struct PodState {
    /// Its definition (the IP and node of its current incarnation).
    pub def: PodDef,
    /// Lifecycle phase.
    pub phase: Phase,
    /// Whether its process runs (false after an OOM kill until the restart).
    pub process_alive: bool,
    /// The pod's Ready condition as the API server has it.
    pub ready: bool,
    /// The readiness probe's verdict the scenario forces (`readiness` events); `true` unless
    /// told otherwise.
    pub probe_ok: bool,
    /// Incarnation counter: bumped by every restart or recreation, so stale timers are
    /// ignored.
    pub generation: u64,
    /// The name of its node (the endpoint's `nodeName`).
    pub node_name: String,
}

impl PodState {
    /// A new pod on the node named `node_name`; `def.ready` is the state it starts in.
    pub fn new(def: PodDef, node_name: &str) -> PodState {
        let ready = def.ready;
        PodState {
            def,
            phase: Phase::Running,
            process_alive: true,
            ready,
            probe_ok: true,
            generation: 0,
            node_name: node_name.to_string(),
        }
    }
    /// Whether its IP is routed (it exists and is not gone).
    pub fn has_network(&self) -> bool {
        self.phase != Phase::Gone
    }
    /// Whether its servers answer.
    pub fn serving_traffic(&self) -> bool {
        self.has_network() && self.process_alive
    }
    /// The endpoint conditions the EndpointSlice controller publishes.
    pub fn conditions(&self) -> EndpointConditions {
        let terminating = matches!(self.phase, Phase::Terminating(_));
        EndpointConditions {
            ready: Some(self.ready && !terminating),
            serving: Some(self.ready),
            terminating: Some(terminating),
        }
    }
}

fn selects(svc: &Service, pod: &PodDef) -> bool {
    !svc.spec.selector.is_empty()
        && svc.metadata.namespace == pod.namespace
        && svc
            .spec
            .selector
            .iter()
            .all(|(k, v)| pod.labels.get(k) == Some(v))
}

/// The EndpointSlices the controller derives for `services` from `pods` (pods that are gone
/// are left out), one slice per Service with a selector and family (`<service>-nfsim` for IPv4,
/// `<service>-nfsim-ipv6` for IPv6), without
/// zones or hints (nodes without topology).
pub fn derive_slices<'a>(
    services: &[Service],
    pods: impl Iterator<Item = &'a PodState>,
) -> Vec<EndpointSlice> {
    derive_slices_in(services, pods, &ControllerTopology::default())
}

/// [`derive_slices`] in a cluster whose nodes have zones: each endpoint gets its node's zone
/// and the hints this release's controller sets ([`super::topology`]).
pub fn derive_slices_in<'a>(
    services: &[Service],
    pods: impl Iterator<Item = &'a PodState>,
    topo: &ControllerTopology,
) -> Vec<EndpointSlice> {
    // Pods by (namespace, label, value), so that each Service looks only at the pods
    // carrying the rarest of its selector's pairs.
    let pods: Vec<&PodState> = pods.filter(|p| p.has_network()).collect();
    let mut by_label: BTreeMap<(&str, &str, &str), Vec<usize>> = BTreeMap::new();
    for (i, p) in pods.iter().enumerate() {
        for (k, v) in &p.def.labels {
            by_label
                .entry((p.def.namespace.as_str(), k.as_str(), v.as_str()))
                .or_default()
                .push(i);
        }
    }
    let mut out = Vec::new();
    for svc in services {
        if svc.spec.selector.is_empty() {
            continue;
        }
        // `getAddressTypesForService`: one slice per family the Service has a cluster IP of
        // (IPv4 first, as nfsim lists them); each holds the pods' addresses of its family.
        for family in [IpFamily::IPv4, IpFamily::IPv6] {
            if svc.cluster_ip_of(family).is_none() {
                continue;
            }
            out.push(family_slice(svc, family, &pods, &by_label, topo));
        }
    }
    out
}

/// The slice of `family` the controller derives for `svc` from `pods` (indexed by label in
/// `by_label`).
fn family_slice(
    svc: &Service,
    family: IpFamily,
    pods: &[&PodState],
    by_label: &BTreeMap<(&str, &str, &str), Vec<usize>>,
    topo: &ControllerTopology,
) -> EndpointSlice {
    {
        let ns = svc.metadata.namespace.as_str();
        let candidates: &[usize] = svc
            .spec
            .selector
            .iter()
            .map(|(k, v)| {
                by_label
                    .get(&(ns, k.as_str(), v.as_str()))
                    .map_or(&[][..], Vec::as_slice)
            })
            .min_by_key(|c| c.len())
            .unwrap_or(&[]);
        let mut endpoints = Vec::new();
        let mut ports: Option<Vec<EndpointPort>> = None;
        let mut sorted: Vec<&PodState> = candidates
            .iter()
            .map(|&i| pods[i])
            .filter(|p| selects(svc, &p.def) && p.def.ip_of(family).is_some())
            .collect();
        sorted.sort_by_key(|p| p.def.key());
        for p in sorted {
            // The controller resolves each targetPort against the pod's container ports;
            // a pod missing a named port gets no endpoint for it.
            let mut eps = Vec::new();
            let mut ok = true;
            for sp in &svc.spec.ports {
                let port = match &sp.target_port {
                    None => Some(sp.port),
                    Some(IntOrString::Int(n)) => Some(*n),
                    Some(IntOrString::String(name)) => p.def.ports.get(name).copied(),
                };
                match port {
                    Some(port) => eps.push(EndpointPort {
                        name: Some(sp.name.clone()),
                        port: Some(port),
                        protocol: Some(sp.protocol),
                    }),
                    None => ok = false,
                }
            }
            if !ok {
                continue;
            }
            if ports.is_none() {
                ports = Some(eps);
            }
            endpoints.push(Endpoint {
                // The pod's address of the slice's family (`status.podIPs`).
                addresses: p.def.ip_of(family).into_iter().collect(),
                conditions: p.conditions(),
                node_name: Some(p.node_name.clone()),
                zone: topo.zone_of(&p.node_name).map(str::to_string),
                hints: None,
            });
        }
        let mut meta = ObjectMeta::new(
            &svc.metadata.namespace,
            &match family {
                IpFamily::IPv4 => format!("{}-nfsim", svc.metadata.name),
                IpFamily::IPv6 => format!("{}-nfsim-ipv6", svc.metadata.name),
            },
        );
        meta.labels
            .insert(LABEL_SERVICE_NAME.to_string(), svc.metadata.name.clone());
        let mut slice = EndpointSlice {
            api_version: None,
            kind: None,
            metadata: meta,
            address_type: family.address_type(),
            endpoints,
            ports: ports.unwrap_or_default(),
        };
        topo.set_hints(svc, &mut slice);
        slice
    }
}

/// All pods, by `namespace/name`.
pub type Pods = BTreeMap<String, PodState>;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::{parse_objects, K8sObject};
    use crate::scenario::model::Probe;

    fn pod(ns: &str, name: &str, labels: &[(&str, &str)], ip: &str) -> PodState {
        PodState::new(
            PodDef {
                name: name.into(),
                namespace: ns.into(),
                labels: labels
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
                node: 0,
                ip: ip.parse().unwrap(),
                secondary_ip: None,
                ports: BTreeMap::new(),
                ready: true,
                probe: Probe::DEFAULT,
                grace_period: SimDuration::from_secs(30),
                termination: crate::scenario::model::Termination::IGNORE,
                apps: Vec::new(),
            },
            "node-1",
        )
    }

    #[test]
    fn slices_hold_the_pods_matching_every_selector_pair_in_the_namespace() {
        let svc = match parse_objects(
            "kind: Service\nmetadata: {name: web, namespace: prod}\nspec: {clusterIP: 10.96.0.5, selector: {app: web, tier: front}, ports: [{port: 80}]}\n",
        )
        .unwrap()
        .remove(0)
        {
            K8sObject::Service(s) => s,
            other => panic!("{other:?}"),
        };
        let mut gone = pod(
            "prod",
            "gone",
            &[("app", "web"), ("tier", "front")],
            "10.0.0.9",
        );
        gone.phase = Phase::Gone;
        let pods = [
            pod(
                "prod",
                "b",
                &[("app", "web"), ("tier", "front")],
                "10.0.0.3",
            ),
            pod(
                "prod",
                "a",
                &[("tier", "front"), ("app", "web"), ("x", "y")],
                "10.0.0.2",
            ),
            pod(
                "prod",
                "back",
                &[("app", "web"), ("tier", "back")],
                "10.0.0.4",
            ),
            pod(
                "dev",
                "other-ns",
                &[("app", "web"), ("tier", "front")],
                "10.0.0.5",
            ),
            gone,
        ];
        let slices = derive_slices(&[svc], pods.iter());
        assert_eq!(slices.len(), 1);
        let ips: Vec<String> = slices[0]
            .endpoints
            .iter()
            .map(|e| e.addresses[0].to_string())
            .collect();
        // Sorted by pod key; wrong tier, other namespace and gone pods left out.
        assert_eq!(ips, ["10.0.0.2", "10.0.0.3"]);
        assert_eq!(slices[0].metadata.name, "web-nfsim");
    }
}
