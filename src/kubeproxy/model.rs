//! What kube-proxy keeps in memory: the service port map and the endpoints map
//! (`proxy.ServicePortMap`, `proxy.EndpointsMap`), built from Service and EndpointSlice
//! objects, and the categorisation of endpoints (`proxy.CategorizeEndpoints`).
//!
//! kube-proxy runs one proxier per IP family (`NewDualStackProxier`), and each builds these
//! maps from the objects of its family only (`ServiceChangeTracker` and
//! `EndpointsChangeTracker` take the family): the cluster IP of that family, the external
//! IPs, ingress IPs and source ranges of that family, the EndpointSlices of that
//! `addressType`. [`ProxyState::build_for`] takes the family; [`ProxyState::build`] is the
//! IPv4 proxier's.

use super::names::ServicePortName;
use super::topology::{
    available_for_topology, topology_mode, NodeTopology, TopologyHints, TopologyMode,
};
use crate::k8s::{
    Cidr, EndpointSlice, IpFamily, LoadBalancerIpMode, Protocol, Service, ServiceType,
};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

/// One service port as kube-proxy sees it (`BaseServicePortInfo` + the iptables proxier's
/// `servicePortInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServicePortInfo {
    /// The service port name.
    pub name: ServicePortName,
    /// The cluster IP of the proxier's family.
    pub cluster_ip: IpAddr,
    /// The service port.
    pub port: u16,
    /// The protocol.
    pub protocol: Protocol,
    /// The node port, if any.
    pub node_port: Option<u16>,
    /// `status.loadBalancer.ingress` IPs of the family whose ipMode is VIP (`LoadBalancerVIPs`).
    pub load_balancer_vips: Vec<IpAddr>,
    /// ClientIP affinity timeout, when affinity is ClientIP (`StickyMaxAgeSeconds`).
    pub sticky_max_age_seconds: Option<u32>,
    /// `externalIPs` of the family.
    pub external_ips: Vec<IpAddr>,
    /// `loadBalancerSourceRanges` of the family.
    pub load_balancer_source_ranges: Vec<Cidr>,
    /// `healthCheckNodePort`, only when the Service needs one (LoadBalancer, external Local).
    pub health_check_node_port: Option<u16>,
    /// `ExternalPolicyLocal`.
    pub external_policy_local: bool,
    /// `InternalPolicyLocal`.
    pub internal_policy_local: bool,
    /// `HintsAnnotation()`: the `service.kubernetes.io/topology-aware-hints` annotation, else
    /// `service.kubernetes.io/topology-mode` (read by kube-proxy up to v1.30).
    pub hints_annotation: Option<String>,
}

impl ServicePortInfo {
    /// Reachable by something other than the cluster IP (`ExternallyAccessible`).
    pub fn externally_accessible(&self) -> bool {
        self.node_port.is_some()
            || !self.load_balancer_vips.is_empty()
            || !self.external_ips.is_empty()
    }
    /// Ever sends traffic to Cluster-policy endpoints (`UsesClusterEndpoints`): internal
    /// policy Cluster, or any external access (short-circuiting needs them).
    pub fn uses_cluster_endpoints(&self) -> bool {
        !self.internal_policy_local || self.externally_accessible()
    }
    /// Ever sends traffic to Local-policy endpoints (`UsesLocalEndpoints`).
    pub fn uses_local_endpoints(&self) -> bool {
        self.internal_policy_local || (self.external_policy_local && self.externally_accessible())
    }
    /// Every frontend IP: cluster IP, external IPs, load-balancer IPs.
    pub fn frontend_ips(&self) -> Vec<IpAddr> {
        let mut v = vec![self.cluster_ip];
        v.extend(self.external_ips.iter().copied());
        v.extend(self.load_balancer_vips.iter().copied());
        v
    }
}

/// One endpoint of a service port (`BaseEndpointInfo`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointInfo {
    /// The endpoint's address.
    pub ip: IpAddr,
    /// The endpoint's port.
    pub port: u16,
    /// On this node (`nodeName` equals the node's name).
    pub is_local: bool,
    /// `ready` (unknown counts as ready).
    pub ready: bool,
    /// `serving` (unknown counts as serving).
    pub serving: bool,
    /// `terminating` (unknown counts as not terminating).
    pub terminating: bool,
    /// `hints.forZones` / `hints.forNodes` (empty without hints).
    pub hints: TopologyHints,
}

impl EndpointInfo {
    /// `ip:port`, or `[ip]:port` for IPv6 (`net.JoinHostPort`): the string kube-proxy sorts
    /// by, hashes into the KUBE-SEP name, and DNATs to.
    pub fn endpoint_string(&self) -> String {
        match self.ip {
            IpAddr::V4(a) => format!("{a}:{}", self.port),
            IpAddr::V6(a) => format!("[{a}]:{}", self.port),
        }
    }
}

impl fmt::Display for EndpointInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.endpoint_string())
    }
}

/// `proxy.ServicePortMap`, ordered.
pub type ServicePortMap = BTreeMap<ServicePortName, ServicePortInfo>;
/// `proxy.EndpointsMap`, ordered; each list sorted by endpoint string (`byEndpoint`).
pub type EndpointsMap = BTreeMap<ServicePortName, Vec<EndpointInfo>>;

/// The service port map and the endpoints map at one instant, as one kube-proxy sees them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ProxyState {
    /// Service ports (Services kube-proxy skips, such as headless ones, are absent).
    pub services: ServicePortMap,
    /// Endpoints per service port name, including names no Service has.
    pub endpoints: EndpointsMap,
}

impl ProxyState {
    /// Builds the state one node's IPv4 proxier derives from the given objects.
    /// `node_name` decides which endpoints are local.
    pub fn build<'a>(
        node_name: &str,
        services: impl IntoIterator<Item = &'a Service>,
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ) -> ProxyState {
        ProxyState::build_for(IpFamily::IPv4, node_name, services, slices)
    }

    /// Builds the state the proxier of `family` on node `node_name` derives from the given
    /// objects.
    pub fn build_for<'a>(
        family: IpFamily,
        node_name: &str,
        services: impl IntoIterator<Item = &'a Service>,
        slices: impl IntoIterator<Item = &'a EndpointSlice>,
    ) -> ProxyState {
        let mut st = ProxyState::default();
        for svc in services {
            st.services.extend(
                service_ports_for(svc, family)
                    .into_iter()
                    .map(|p| (p.name.clone(), p)),
            );
        }
        let mut slices: Vec<&EndpointSlice> = slices.into_iter().collect();
        // kube-proxy iterates a map of slices; a name order makes the (rare) duplicate-endpoint
        // tie-break deterministic.
        slices.sort_by(|a, b| {
            (&a.metadata.namespace, &a.metadata.name)
                .cmp(&(&b.metadata.namespace, &b.metadata.name))
        });
        let mut sets: BTreeMap<ServicePortName, BTreeMap<String, EndpointInfo>> = BTreeMap::new();
        for slice in slices
            .into_iter()
            .filter(|s| s.address_type == family.address_type())
        {
            add_slice(node_name, slice, &mut sets);
        }
        for (spn, set) in sets {
            if !set.is_empty() {
                // BTreeMap keyed by the endpoint string: sorted exactly as byEndpoint sorts.
                st.endpoints.insert(spn, set.into_values().collect());
            }
        }
        st
    }

    /// The endpoints of a service port (empty when none).
    pub fn endpoints_of(&self, spn: &ServicePortName) -> &[EndpointInfo] {
        self.endpoints.get(spn).map(Vec::as_slice).unwrap_or(&[])
    }

    /// The Services (namespace, name) whose ports or endpoints differ between `self` and
    /// `other`: the union of kube-proxy's `UpdatedServices` from the service and endpoints
    /// change trackers.
    pub fn changed_services(&self, other: &ProxyState) -> BTreeSet<(String, String)> {
        let mut out = BTreeSet::new();
        diff_keys(&self.services, &other.services, &mut out);
        diff_keys(&self.endpoints, &other.endpoints, &mut out);
        out
    }
}

fn diff_keys<V: PartialEq>(
    a: &BTreeMap<ServicePortName, V>,
    b: &BTreeMap<ServicePortName, V>,
    out: &mut BTreeSet<(String, String)>,
) {
    for (k, v) in a {
        if b.get(k) != Some(v) {
            out.insert(k.service());
        }
    }
    for k in b.keys() {
        if !a.contains_key(k) {
            out.insert(k.service());
        }
    }
}

/// The service ports of one Service as the IPv4 proxier sees them.
pub fn service_ports(svc: &Service) -> Vec<ServicePortInfo> {
    service_ports_for(svc, IpFamily::IPv4)
}

/// The service ports of one Service as the proxier of `family` sees them
/// (`newBaseServiceInfo` for each port), or none when it skips the Service (headless,
/// ExternalName, no cluster IP of the family).
pub fn service_ports_for(svc: &Service, family: IpFamily) -> Vec<ServicePortInfo> {
    let Some(cluster_ip) = svc.cluster_ip_of(family) else {
        return Vec::new();
    };
    let of_family = |ip: &IpAddr| family.contains(*ip);
    let external_policy_local = svc.external_policy_local();
    let internal_policy_local = svc.internal_policy_local();
    let external_ips: Vec<IpAddr> = svc
        .spec
        .external_ips
        .iter()
        .copied()
        .filter(of_family)
        .collect();
    let source_ranges: Vec<Cidr> = svc
        .spec
        .load_balancer_source_ranges
        .iter()
        .copied()
        .filter(|c| family.contains(c.addr()))
        .collect();
    let vips: Vec<IpAddr> = svc
        .status
        .load_balancer
        .ingress
        .iter()
        .filter(|i| i.ip_mode != Some(LoadBalancerIpMode::Proxy))
        .filter_map(|i| i.ip)
        .filter(of_family)
        .collect();
    // apiservice.NeedsHealthCheck: LoadBalancer with external policy Local.
    let needs_hc = svc.spec.type_ == ServiceType::LoadBalancer && external_policy_local;
    // The deprecated annotation has precedence (newBaseServiceInfo).
    let annotations = &svc.metadata.annotations;
    let hints_annotation = annotations
        .get(crate::k8s::ANNOTATION_TOPOLOGY_AWARE_HINTS)
        .or_else(|| annotations.get(crate::k8s::ANNOTATION_TOPOLOGY_MODE))
        .cloned();
    svc.spec
        .ports
        .iter()
        .map(|p| ServicePortInfo {
            name: ServicePortName::new(
                &svc.metadata.namespace,
                &svc.metadata.name,
                &p.name,
                p.protocol,
            ),
            cluster_ip,
            port: p.port,
            protocol: p.protocol,
            node_port: p.node_port,
            load_balancer_vips: vips.clone(),
            sticky_max_age_seconds: svc.sticky_max_age_seconds(),
            external_ips: external_ips.clone(),
            load_balancer_source_ranges: source_ranges.clone(),
            health_check_node_port: if needs_hc {
                svc.spec.health_check_node_port
            } else {
                None
            },
            external_policy_local,
            internal_policy_local,
            hints_annotation: hints_annotation.clone(),
        })
        .collect()
}

/// endpointslicecache.go `endpointInfoByServicePort` + `addEndpoints`, for one slice.
fn add_slice(
    node_name: &str,
    slice: &EndpointSlice,
    sets: &mut BTreeMap<ServicePortName, BTreeMap<String, EndpointInfo>>,
) {
    let Some(svc_name) = slice.service_name() else {
        return;
    };
    for port in &slice.ports {
        let (Some(name), Some(portnum)) = (&port.name, port.port) else {
            continue; // "Ignoring port with nil name" / "Ignoring invalid endpoint port"
        };
        let spn = ServicePortName::new(
            &slice.metadata.namespace,
            svc_name,
            name,
            port.protocol.unwrap_or_default(),
        );
        let set = sets.entry(spn).or_default();
        for ep in &slice.endpoints {
            let Some(ip) = ep.addresses.first() else {
                continue;
            };
            let info = EndpointInfo {
                ip: *ip,
                port: portnum,
                is_local: !node_name.is_empty() && ep.node_name.as_deref() == Some(node_name),
                ready: ep.conditions.is_ready(),
                serving: ep.conditions.is_serving(),
                terminating: ep.conditions.is_terminating(),
                hints: ep
                    .hints
                    .as_ref()
                    .map(|h| TopologyHints {
                        zones: h.for_zones.iter().map(|z| z.name.clone()).collect(),
                        nodes: h.for_nodes.iter().map(|n| n.name.clone()).collect(),
                    })
                    .unwrap_or_default(),
            };
            let key = info.endpoint_string();
            // Prefer a non-terminating endpoint over a terminating one with the same IP.
            if !set.contains_key(&key) || !info.terminating {
                set.insert(key, info);
            }
        }
    }
}

/// The result of [`categorize_endpoints`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Categorized {
    /// Endpoints for Cluster traffic policy (empty when the port never uses it).
    pub cluster: Vec<EndpointInfo>,
    /// Endpoints for Local traffic policy (empty when the port never uses it).
    pub local: Vec<EndpointInfo>,
    /// Every endpoint this node may send to: the union of the two, sorted by endpoint string.
    pub all_reachable: Vec<EndpointInfo>,
    /// Whether the port has usable endpoints anywhere in the cluster.
    pub has_any: bool,
}

/// `proxy.CategorizeEndpoints` on one node: cluster endpoints are the ready ones the node's
/// topology mode allows ([`super::topology`]: hints for its node or zone, else all), else
/// the serving-and-terminating ones whatever their hints; local endpoints the local ready
/// ones, else the local serving-and-terminating ones.
///
/// Where kube-proxy merges the two lists through a Go map (random order), nfsim sorts by the
/// endpoint string.
pub fn categorize_endpoints(
    endpoints: &[EndpointInfo],
    svc: &ServicePortInfo,
    node: &NodeTopology<'_>,
) -> Categorized {
    let mut c = Categorized::default();
    let mut use_serving_terminating = false;
    let mut mode = TopologyMode::None;
    if svc.uses_cluster_endpoints() {
        mode = topology_mode(endpoints, svc, node);
        c.cluster = endpoints
            .iter()
            .filter(|e| e.ready && available_for_topology(e, mode, node))
            .cloned()
            .collect();
        if c.cluster.is_empty() {
            c.cluster = endpoints
                .iter()
                .filter(|e| e.serving && e.terminating)
                .cloned()
                .collect();
        }
        c.has_any = !c.cluster.is_empty();
    }
    if !svc.uses_local_endpoints() {
        c.all_reachable = c.cluster.clone();
        return c;
    }
    let (mut local_ready, mut local_st) = (false, false);
    for e in endpoints {
        if e.ready {
            c.has_any = true;
            local_ready |= e.is_local;
        } else if e.serving && e.terminating {
            c.has_any = true;
            local_st |= e.is_local;
        }
    }
    if local_ready {
        c.local = endpoints
            .iter()
            .filter(|e| e.is_local && e.ready)
            .cloned()
            .collect();
    } else if local_st {
        use_serving_terminating = true;
        c.local = endpoints
            .iter()
            .filter(|e| e.is_local && e.serving && e.terminating)
            .cloned()
            .collect();
    }
    if !svc.uses_cluster_endpoints() {
        c.all_reachable = c.local.clone();
        return c;
    }
    if mode == TopologyMode::None && !use_serving_terminating {
        // Local ready endpoints are a subset of the cluster ones.
        c.all_reachable = c.cluster.clone();
        return c;
    }
    let mut merged: BTreeMap<String, EndpointInfo> = BTreeMap::new();
    for e in c.cluster.iter().chain(c.local.iter()) {
        merged.insert(e.endpoint_string(), e.clone());
    }
    c.all_reachable = merged.into_values().collect();
    c
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::{
        AddressType, Endpoint, EndpointConditions, EndpointPort, ObjectMeta, LABEL_SERVICE_NAME,
    };

    fn ep(ip: &str, node: &str, ready: bool, serving: bool, terminating: bool) -> Endpoint {
        Endpoint {
            addresses: vec![ip.parse().unwrap()],
            conditions: EndpointConditions {
                ready: Some(ready),
                serving: Some(serving),
                terminating: Some(terminating),
            },
            node_name: Some(node.to_string()),
            ..Endpoint::default()
        }
    }

    fn slice(name: &str, eps: Vec<Endpoint>, port: u16) -> EndpointSlice {
        let mut meta = ObjectMeta::new("ns", name);
        meta.labels.insert(LABEL_SERVICE_NAME.into(), "svc".into());
        EndpointSlice {
            api_version: None,
            kind: None,
            metadata: meta,
            address_type: AddressType::IPv4,
            endpoints: eps,
            ports: vec![EndpointPort {
                name: Some("p".into()),
                port: Some(port),
                protocol: Some(Protocol::UDP),
            }],
        }
    }

    fn unz() -> NodeTopology<'static> {
        NodeTopology::unzoned("n")
    }

    fn svc(internal_local: bool, external_local: bool, node_port: Option<u16>) -> ServicePortInfo {
        ServicePortInfo {
            name: ServicePortName::new("ns", "svc", "p", Protocol::UDP),
            cluster_ip: "10.96.0.1".parse().unwrap(),
            port: 53,
            protocol: Protocol::UDP,
            node_port,
            load_balancer_vips: vec![],
            sticky_max_age_seconds: None,
            external_ips: vec![],
            load_balancer_source_ranges: vec![],
            health_check_node_port: None,
            external_policy_local: external_local && node_port.is_some(),
            internal_policy_local: internal_local,
            hints_annotation: None,
        }
    }

    #[test]
    fn endpoints_sort_as_strings() {
        let s = slice(
            "a",
            vec![
                ep("10.1.1.1", "n", true, true, false),
                ep("10.1.1.11", "n", true, true, false),
                ep("10.1.1.2", "n", true, true, false),
            ],
            11,
        );
        let st = ProxyState::build("n", [], [&s]);
        let spn = ServicePortName::new("ns", "svc", "p", Protocol::UDP);
        let order: Vec<String> = st
            .endpoints_of(&spn)
            .iter()
            .map(|e| e.endpoint_string())
            .collect();
        // "10.1.1.11:11" < "10.1.1.1:11" because '1' < ':'.
        assert_eq!(order, ["10.1.1.11:11", "10.1.1.1:11", "10.1.1.2:11"]);
    }

    #[test]
    fn terminating_duplicate_loses_to_running_one() {
        let a = slice("a", vec![ep("10.0.0.1", "n", true, true, false)], 53);
        let b = slice("b", vec![ep("10.0.0.1", "n", false, true, true)], 53);
        for order in [[&a, &b], [&b, &a]] {
            let st = ProxyState::build("n", [], order);
            let spn = ServicePortName::new("ns", "svc", "p", Protocol::UDP);
            assert!(!st.endpoints_of(&spn)[0].terminating);
        }
    }

    #[test]
    fn cluster_falls_back_to_serving_terminating() {
        let eps = vec![
            EndpointInfo {
                ip: "10.0.0.1".parse().unwrap(),
                port: 53,
                is_local: false,
                ready: false,
                serving: true,
                terminating: true,
                hints: TopologyHints::default(),
            },
            EndpointInfo {
                ip: "10.0.0.2".parse().unwrap(),
                port: 53,
                is_local: false,
                ready: false,
                serving: false,
                terminating: true,
                hints: TopologyHints::default(),
            },
            EndpointInfo {
                ip: "10.0.0.3".parse().unwrap(),
                port: 53,
                is_local: false,
                ready: false,
                serving: false,
                terminating: false,
                hints: TopologyHints::default(),
            },
        ];
        let c = categorize_endpoints(&eps, &svc(false, false, None), &unz());
        assert_eq!(c.cluster.len(), 1);
        assert_eq!(c.cluster[0].endpoint_string(), "10.0.0.1:53");
        assert!(c.has_any);
        assert_eq!(c.all_reachable, c.cluster);

        // One ready endpoint: the terminating one is not used.
        let mut eps2 = eps.clone();
        eps2[2].ready = true;
        let c = categorize_endpoints(&eps2, &svc(false, false, None), &unz());
        assert_eq!(c.cluster.len(), 1);
        assert_eq!(c.cluster[0].endpoint_string(), "10.0.0.3:53");

        // Nothing usable.
        eps2[2].ready = false;
        eps2[0].serving = false;
        let c = categorize_endpoints(&eps2, &svc(false, false, None), &unz());
        assert!(c.cluster.is_empty() && !c.has_any);
    }

    #[test]
    fn local_policy_uses_local_then_local_terminating() {
        let mk = |ip: &str, local: bool, ready: bool, term: bool| EndpointInfo {
            ip: ip.parse().unwrap(),
            port: 53,
            is_local: local,
            ready,
            serving: true,
            terminating: term,
            hints: TopologyHints::default(),
        };
        // internalTrafficPolicy Local, no external access: only local endpoints.
        let eps = vec![
            mk("10.0.0.1", false, true, false),
            mk("10.0.0.2", true, false, true),
        ];
        let c = categorize_endpoints(&eps, &svc(true, false, None), &unz());
        assert!(
            c.cluster.is_empty(),
            "internal-Local without external access uses no cluster endpoints"
        );
        assert_eq!(c.local.len(), 1);
        assert_eq!(c.local[0].endpoint_string(), "10.0.0.2:53");
        assert_eq!(c.all_reachable, c.local);
        assert!(c.has_any);

        // externalTrafficPolicy Local with a NodePort: cluster (ready remote) + local
        // (terminating local) are merged.
        let c = categorize_endpoints(&eps, &svc(false, true, Some(30053)), &unz());
        assert_eq!(c.cluster.len(), 1);
        assert_eq!(c.local.len(), 1);
        let all: Vec<String> = c
            .all_reachable
            .iter()
            .map(|e| e.endpoint_string())
            .collect();
        assert_eq!(all, ["10.0.0.1:53", "10.0.0.2:53"]);

        // No local endpoint at all.
        let eps = vec![mk("10.0.0.1", false, true, false)];
        let c = categorize_endpoints(&eps, &svc(true, false, None), &unz());
        assert!(c.local.is_empty());
        assert!(
            c.has_any,
            "a ready remote endpoint still counts as 'has endpoints'"
        );
    }

    #[test]
    fn skipped_services_and_families() {
        let s = crate::k8s::Service::from_yaml(
            "kind: Service\nmetadata: {name: h, namespace: ns}\nspec:\n  clusterIP: None\n  ports: [{port: 80}]\n",
        )
        .unwrap();
        assert!(service_ports(&s).is_empty());
        let s = crate::k8s::Service::from_yaml(
            "kind: Service\nmetadata: {name: d, namespace: ns}\nspec:\n  type: LoadBalancer\n  clusterIP: 10.96.0.5\n  externalIPs: [\"fd00::1\", 192.0.2.1]\n  externalTrafficPolicy: Local\n  healthCheckNodePort: 31000\n  ports: [{port: 80, nodePort: 30080}]\nstatus:\n  loadBalancer:\n    ingress: [{ip: 198.51.100.1}, {ip: 198.51.100.2, ipMode: Proxy}, {hostname: lb.example}]\n",
        )
        .unwrap();
        let p = &service_ports(&s)[0];
        assert_eq!(p.external_ips, vec!["192.0.2.1".parse::<IpAddr>().unwrap()]);
        assert_eq!(
            p.load_balancer_vips,
            vec!["198.51.100.1".parse::<IpAddr>().unwrap()]
        );
        assert_eq!(p.health_check_node_port, Some(31000));
        assert!(p.external_policy_local && p.uses_cluster_endpoints() && p.uses_local_endpoints());
    }
}
