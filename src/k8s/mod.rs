//! Kubernetes objects as kube-proxy reads them: `Service` (core/v1) and `EndpointSlice`
//! (discovery.k8s.io/v1).
//!
//! The types mirror the YAML `kubectl get -o yaml` prints, restricted to the fields kube-proxy
//! looks at; every other field (uid, managedFields, ...) is accepted and ignored, so
//! a dump from a real cluster loads as it is. Field names are the API's camelCase names.
//!
//! Field-level checks (an address that is not an IP, a port outside 1-65535, an unknown
//! protocol, a negative affinity timeout) run while the YAML is read, so the error names the
//! line and column. Checks that need several fields (an EndpointSlice without its
//! `kubernetes.io/service-name` label, an address of the wrong family) run afterwards in
//! [`Service::validate`] / [`EndpointSlice::validate`] and name the object and the field path.
//!
//! [`parse_objects`] reads a stream: one object, several `---`-separated documents, or a `List`
//! (`kubectl get svc,endpointslices -A -o yaml`), and returns them in input order.

mod cidr;
pub mod labels;
mod parse;
mod sloppy;

pub use cidr::{Cidr, CidrParseError};
pub use parse::{parse_objects, K8sError, K8sObject};
pub use sloppy::{parse_cidr_sloppy, parse_ip_sloppy};

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

/// The label that ties an EndpointSlice to its Service (`discovery.LabelServiceName`).
pub const LABEL_SERVICE_NAME: &str = "kubernetes.io/service-name";

/// The node label naming a node's zone (`v1.LabelTopologyZone`).
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

/// The Service annotation turning on topology aware routing (`v1.AnnotationTopologyMode`,
/// since v1.27): `Auto` makes the EndpointSlice controller allocate zone hints.
pub const ANNOTATION_TOPOLOGY_MODE: &str = "service.kubernetes.io/topology-mode";

/// Its older name (`v1.DeprecatedAnnotationTopologyAwareHints`); when both are set this one
/// wins, in kube-proxy and in the controller.
pub const ANNOTATION_TOPOLOGY_AWARE_HINTS: &str = "service.kubernetes.io/topology-aware-hints";

/// Default `sessionAffinityConfig.clientIP.timeoutSeconds` the API server fills in (3 hours).
pub const DEFAULT_CLIENT_IP_TIMEOUT_SECS: u32 = 10800;

/// Largest `sessionAffinityConfig.clientIP.timeoutSeconds` the API accepts (one day).
pub const MAX_CLIENT_IP_TIMEOUT_SECS: u32 = 86400;

/// `metadata` of an object: the parts kube-proxy uses.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ObjectMeta {
    /// `metadata.name`.
    #[serde(default)]
    pub name: String,
    /// `metadata.namespace` (`default` when absent, as kubectl applies it).
    #[serde(default = "default_namespace")]
    pub namespace: String,
    /// `metadata.labels`.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub labels: BTreeMap<String, String>,
    /// `metadata.annotations` (kube-proxy and the EndpointSlice controller read the topology
    /// ones: [`ANNOTATION_TOPOLOGY_MODE`], [`ANNOTATION_TOPOLOGY_AWARE_HINTS`]).
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub annotations: BTreeMap<String, String>,
}

fn default_namespace() -> String {
    "default".to_string()
}

/// Reads `null` (as kubectl prints empty lists and maps, e.g. `endpoints: null`) as empty.
fn null_default<'de, D, T>(d: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

impl ObjectMeta {
    /// Metadata with a namespace and a name and no labels.
    pub fn new(namespace: &str, name: &str) -> ObjectMeta {
        ObjectMeta {
            name: name.to_string(),
            namespace: namespace.to_string(),
            labels: BTreeMap::new(),
            annotations: BTreeMap::new(),
        }
    }
}

/// A layer-4 protocol of a Service or endpoint port (`v1.Protocol`).
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum Protocol {
    /// `TCP` (the default when `protocol` is omitted).
    #[default]
    TCP,
    /// `UDP`.
    UDP,
    /// `SCTP`.
    SCTP,
}

impl Protocol {
    /// The lower-case name iptables and the chain hashes use (`tcp`, `udp`, `sctp`).
    pub fn lower(self) -> &'static str {
        match self {
            Protocol::TCP => "tcp",
            Protocol::UDP => "udp",
            Protocol::SCTP => "sctp",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Protocol::TCP => "TCP",
            Protocol::UDP => "UDP",
            Protocol::SCTP => "SCTP",
        })
    }
}

/// `spec.type` of a Service.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServiceType {
    /// `ClusterIP` (the default).
    #[default]
    ClusterIP,
    /// `NodePort`.
    NodePort,
    /// `LoadBalancer`.
    LoadBalancer,
    /// `ExternalName`: a DNS alias, no rules at all.
    ExternalName,
}

/// `spec.internalTrafficPolicy` / `spec.externalTrafficPolicy`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum TrafficPolicy {
    /// `Cluster`: any ready endpoint in the cluster (the default).
    #[default]
    Cluster,
    /// `Local`: only endpoints on this node.
    Local,
}

/// `spec.trafficDistribution` (`v1.ServiceTrafficDistribution*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum TrafficDistribution {
    /// `PreferClose`: prefer endpoints in the client's zone (the older name of
    /// `PreferSameZone`).
    PreferClose,
    /// `PreferSameZone`: as `PreferClose` (v1.34+).
    PreferSameZone,
    /// `PreferSameNode`: prefer endpoints on the client's node, then its zone (v1.34+).
    PreferSameNode,
}

impl fmt::Display for TrafficDistribution {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            TrafficDistribution::PreferClose => "PreferClose",
            TrafficDistribution::PreferSameZone => "PreferSameZone",
            TrafficDistribution::PreferSameNode => "PreferSameNode",
        })
    }
}

/// `spec.sessionAffinity`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum SessionAffinity {
    /// `None` (the default).
    #[default]
    None,
    /// `ClientIP`: `-m recent` pins a client address to an endpoint.
    ClientIP,
}

/// `spec.clusterIP`: an address, or `None` for a headless Service.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterIp {
    /// `"None"`: headless, kube-proxy writes no rules.
    None,
    /// A virtual IP.
    Ip(IpAddr),
}

impl ClusterIp {
    /// The address, unless headless.
    pub fn ip(self) -> Option<IpAddr> {
        match self {
            ClusterIp::None => None,
            ClusterIp::Ip(ip) => Some(ip),
        }
    }
}

impl fmt::Display for ClusterIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ClusterIp::None => f.write_str("None"),
            ClusterIp::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

impl Serialize for ClusterIp {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for ClusterIp {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        if s == "None" {
            return Ok(ClusterIp::None);
        }
        // kube-proxy reads it with ParseIPSloppy (leading zeros allowed: `10.96.0.010`).
        parse_ip_sloppy(&s).map(ClusterIp::Ip).ok_or_else(|| {
            serde::de::Error::custom(format!(
                "invalid clusterIP {s:?}: expected an IPv4 or IPv6 address, or \"None\" for a headless Service"
            ))
        })
    }
}

/// `targetPort`: a number or the name of a container port.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IntOrString {
    /// A port number.
    Int(u16),
    /// A named container port.
    String(String),
}

impl Serialize for IntOrString {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            IntOrString::Int(n) => s.serialize_u16(*n),
            IntOrString::String(v) => s.serialize_str(v),
        }
    }
}

impl<'de> Deserialize<'de> for IntOrString {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = IntOrString;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a port number (1-65535) or a port name")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<IntOrString, E> {
                check_port(v as i64)
                    .map(IntOrString::Int)
                    .map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<IntOrString, E> {
                check_port(v).map(IntOrString::Int).map_err(E::custom)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<IntOrString, E> {
                if let Ok(n) = v.parse::<i64>() {
                    return check_port(n).map(IntOrString::Int).map_err(E::custom);
                }
                if v.is_empty() {
                    return Err(E::custom(
                        "empty targetPort: expected a port number or a port name",
                    ));
                }
                Ok(IntOrString::String(v.to_string()))
            }
        }
        d.deserialize_any(V)
    }
}

fn check_port(v: i64) -> Result<u16, String> {
    if (1..=65535).contains(&v) {
        Ok(v as u16)
    } else {
        Err(format!("port {v} is out of range: expected 1-65535"))
    }
}

/// Deserializes a port number, rejecting 0 and anything above 65535 with a clear message.
fn de_port<'de, D: Deserializer<'de>>(d: D) -> Result<u16, D::Error> {
    let v = i64::deserialize(d)?;
    check_port(v).map_err(serde::de::Error::custom)
}

fn de_opt_port<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u16>, D::Error> {
    match Option::<i64>::deserialize(d)? {
        None => Ok(None),
        Some(v) => check_port(v).map(Some).map_err(serde::de::Error::custom),
    }
}

fn de_timeout<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    match Option::<i64>::deserialize(d)? {
        None => Ok(None),
        Some(v) if (1..=MAX_CLIENT_IP_TIMEOUT_SECS as i64).contains(&v) => Ok(Some(v as u32)),
        Some(v) => Err(serde::de::Error::custom(format!(
            "timeoutSeconds {v} is out of range: expected 1-{MAX_CLIENT_IP_TIMEOUT_SECS}"
        ))),
    }
}

fn de_cidrs<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<Cidr>, D::Error> {
    let raw = Option::<Vec<String>>::deserialize(d)?.unwrap_or_default();
    raw.iter()
        // kube-proxy trims whitespace, then parses with ParseCIDRSloppy
        // (proxyutil.MapCIDRsByIPFamily).
        .map(|s| {
            parse_cidr_sloppy(s.trim()).ok_or_else(|| {
                serde::de::Error::custom(format!(
                    "invalid CIDR {s:?}: expected ADDRESS/PREFIX such as 203.0.113.0/24"
                ))
            })
        })
        .collect()
}

fn sloppy_ip<E: serde::de::Error>(s: &str, what: &str) -> Result<IpAddr, E> {
    parse_ip_sloppy(s).ok_or_else(|| {
        E::custom(format!(
            "invalid {what} {s:?}: expected an IPv4 or IPv6 address"
        ))
    })
}

/// A list of addresses read as kube-proxy reads them (`ParseIPSloppy`); `null` is empty.
fn de_ips_sloppy<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<IpAddr>, D::Error> {
    let raw = Option::<Vec<String>>::deserialize(d)?.unwrap_or_default();
    raw.iter().map(|s| sloppy_ip(s, "address")).collect()
}

/// An optional address read with `ParseIPSloppy`.
fn de_opt_ip_sloppy<'de, D: Deserializer<'de>>(d: D) -> Result<Option<IpAddr>, D::Error> {
    Option::<String>::deserialize(d)?
        .map(|s| sloppy_ip(&s, "address"))
        .transpose()
}

/// One entry of `spec.ports`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServicePort {
    /// `name` (empty when the Service has a single unnamed port).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub name: String,
    /// `protocol` (TCP when omitted).
    #[serde(default)]
    pub protocol: Protocol,
    /// `port`: the port on the cluster IP.
    #[serde(deserialize_with = "de_port")]
    pub port: u16,
    /// `targetPort` (defaults to `port` in the API; kube-proxy never reads it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_port: Option<IntOrString>,
    /// `nodePort`, for NodePort and LoadBalancer Services.
    #[serde(
        default,
        deserialize_with = "de_opt_port",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_port: Option<u16>,
}

/// `spec.sessionAffinityConfig.clientIP`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClientIpConfig {
    /// `timeoutSeconds` (1-86400; 10800 when omitted).
    #[serde(
        default,
        deserialize_with = "de_timeout",
        skip_serializing_if = "Option::is_none"
    )]
    pub timeout_seconds: Option<u32>,
}

/// `spec.sessionAffinityConfig`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionAffinityConfig {
    /// `clientIP`.
    #[serde(default, rename = "clientIP", skip_serializing_if = "Option::is_none")]
    pub client_ip: Option<ClientIpConfig>,
}

/// Whether `s` is a DNS-1123 label (`IsDNS1123Label`): 1–63 lowercase letters, digits and
/// `-`, starting and ending with a letter or digit.
fn is_dns1123_label(s: &str) -> bool {
    let b = s.as_bytes();
    (1..=63).contains(&b.len())
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// An IP family (`v1.IPFamily`): `IPv4` or `IPv6`. kube-proxy runs one proxier per family
/// (`NewDualStackProxier`); each sees only the addresses and EndpointSlices of its family.
#[derive(
    Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
pub enum IpFamily {
    /// `IPv4`.
    #[default]
    IPv4,
    /// `IPv6`.
    IPv6,
}

impl IpFamily {
    /// The family of an address.
    pub fn of(ip: IpAddr) -> IpFamily {
        if ip.is_ipv4() {
            IpFamily::IPv4
        } else {
            IpFamily::IPv6
        }
    }
    /// Whether `ip` is of this family.
    pub fn contains(self, ip: IpAddr) -> bool {
        IpFamily::of(ip) == self
    }
    /// The other family.
    pub fn other(self) -> IpFamily {
        match self {
            IpFamily::IPv4 => IpFamily::IPv6,
            IpFamily::IPv6 => IpFamily::IPv4,
        }
    }
    /// `IPv4` / `IPv6`, as the API writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            IpFamily::IPv4 => "IPv4",
            IpFamily::IPv6 => "IPv6",
        }
    }
    /// The EndpointSlice `addressType` of this family.
    pub fn address_type(self) -> AddressType {
        match self {
            IpFamily::IPv4 => AddressType::IPv4,
            IpFamily::IPv6 => AddressType::IPv6,
        }
    }
}

impl fmt::Display for IpFamily {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `spec.ipFamilyPolicy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IpFamilyPolicy {
    /// `SingleStack`: one family (the default).
    SingleStack,
    /// `PreferDualStack`: both families where the cluster has both, else one.
    PreferDualStack,
    /// `RequireDualStack`: both families, an error on a single-stack cluster.
    RequireDualStack,
}

/// `spec` of a Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceSpec {
    /// `type`.
    #[serde(default, rename = "type")]
    pub type_: ServiceType,
    /// `clusterIP`.
    #[serde(default, rename = "clusterIP", skip_serializing_if = "Option::is_none")]
    pub cluster_ip: Option<ClusterIp>,
    /// `clusterIPs` (dual-stack; the first one equals `clusterIP`).
    #[serde(
        default,
        deserialize_with = "null_default",
        rename = "clusterIPs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub cluster_ips: Vec<ClusterIp>,
    /// `ipFamilies`: the families of `clusterIPs`, in their order.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ip_families: Vec<IpFamily>,
    /// `ipFamilyPolicy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_family_policy: Option<IpFamilyPolicy>,
    /// `ports`.
    #[serde(default, deserialize_with = "null_default")]
    pub ports: Vec<ServicePort>,
    /// `selector` (kube-proxy does not read it; the EndpointSlice controller does).
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "BTreeMap::is_empty"
    )]
    pub selector: BTreeMap<String, String>,
    /// `externalIPs` (read with `ParseIPSloppy`, as kube-proxy does).
    #[serde(
        default,
        deserialize_with = "de_ips_sloppy",
        rename = "externalIPs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub external_ips: Vec<IpAddr>,
    /// `loadBalancerSourceRanges`, as CIDRs (surrounding spaces are trimmed, as kube-proxy does).
    #[serde(
        default,
        deserialize_with = "de_cidrs",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub load_balancer_source_ranges: Vec<Cidr>,
    /// `internalTrafficPolicy` (Cluster when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub internal_traffic_policy: Option<TrafficPolicy>,
    /// `externalTrafficPolicy` (Cluster when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_traffic_policy: Option<TrafficPolicy>,
    /// `sessionAffinity`.
    #[serde(default)]
    pub session_affinity: SessionAffinity,
    /// `sessionAffinityConfig`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub session_affinity_config: Option<SessionAffinityConfig>,
    /// `healthCheckNodePort` (LoadBalancer with externalTrafficPolicy Local).
    #[serde(
        default,
        deserialize_with = "de_opt_port",
        skip_serializing_if = "Option::is_none"
    )]
    pub health_check_node_port: Option<u16>,
    /// `trafficDistribution` (v1.31+: `PreferClose`; v1.34+: also `PreferSameZone`,
    /// `PreferSameNode`): the EndpointSlice controller's hints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traffic_distribution: Option<TrafficDistribution>,
    /// `externalName` (ExternalName Services).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub external_name: Option<String>,
}

/// `status.loadBalancer.ingress[]`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerIngress {
    /// `ip` (read with `ParseIPSloppy`).
    #[serde(
        default,
        deserialize_with = "de_opt_ip_sloppy",
        skip_serializing_if = "Option::is_none"
    )]
    pub ip: Option<IpAddr>,
    /// `hostname` (kube-proxy ignores hostname-only ingress).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hostname: Option<String>,
    /// `ipMode`: `VIP` (default) or `Proxy`; kube-proxy skips `Proxy` ingress IPs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ip_mode: Option<LoadBalancerIpMode>,
}

/// `status.loadBalancer.ingress[].ipMode`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum LoadBalancerIpMode {
    /// `VIP`: traffic arrives with the ingress IP as destination; kube-proxy captures it.
    VIP,
    /// `Proxy`: the load balancer rewrites the destination; kube-proxy ignores the IP.
    Proxy,
}

/// `status.loadBalancer`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LoadBalancerStatus {
    /// `ingress`.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub ingress: Vec<LoadBalancerIngress>,
}

/// `status` of a Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ServiceStatus {
    /// `loadBalancer`.
    #[serde(default)]
    pub load_balancer: LoadBalancerStatus,
}

/// A core/v1 Service.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Service {
    /// `apiVersion`: `v1` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind`: `Service` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `metadata`.
    pub metadata: ObjectMeta,
    /// `spec`.
    #[serde(default)]
    pub spec: ServiceSpec,
    /// `status`.
    #[serde(default)]
    pub status: ServiceStatus,
}

/// `addressType` of an EndpointSlice.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum AddressType {
    /// `IPv4`.
    IPv4,
    /// `IPv6`.
    IPv6,
    /// `FQDN` (deprecated; kube-proxy ignores such slices).
    FQDN,
}

/// `endpoints[].conditions`. `None` means the condition is unknown; kube-proxy treats unknown
/// `ready` and `serving` as true and unknown `terminating` as false.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointConditions {
    /// `ready`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ready: Option<bool>,
    /// `serving`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub serving: Option<bool>,
    /// `terminating`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminating: Option<bool>,
}

impl EndpointConditions {
    /// Ready unless `ready` is false (endpointslicecache.go addEndpoints).
    pub fn is_ready(&self) -> bool {
        self.ready != Some(false)
    }
    /// Serving unless `serving` is false.
    pub fn is_serving(&self) -> bool {
        self.serving != Some(false)
    }
    /// Terminating only if `terminating` is true.
    pub fn is_terminating(&self) -> bool {
        self.terminating == Some(true)
    }
}

/// One entry of an EndpointSlice's `endpoints`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Endpoint {
    /// `addresses`; kube-proxy uses only the first (read with `ParseIPSloppy`).
    #[serde(default, deserialize_with = "de_ips_sloppy")]
    pub addresses: Vec<IpAddr>,
    /// `conditions`.
    #[serde(default)]
    pub conditions: EndpointConditions,
    /// `nodeName`: decides whether the endpoint is local to a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    /// `zone`: the `topology.kubernetes.io/zone` label of its node, as the EndpointSlice
    /// controller copies it (kube-proxy does not read it; the controller's hints do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    /// `hints`: where the endpoint should be consumed (kube-proxy's topology filter).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hints: Option<EndpointHints>,
}

/// `endpoints[].hints` (`discovery.EndpointHints`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointHints {
    /// `forZones`: the zones whose nodes should use this endpoint.
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub for_zones: Vec<ForName>,
    /// `forNodes`: the nodes that should use this endpoint (PreferSameNode).
    #[serde(
        default,
        deserialize_with = "null_default",
        skip_serializing_if = "Vec::is_empty"
    )]
    pub for_nodes: Vec<ForName>,
}

/// One `forZones[]` / `forNodes[]` entry (`discovery.ForZone`, `discovery.ForNode`).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForName {
    /// `name`.
    pub name: String,
}

/// One entry of an EndpointSlice's `ports`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointPort {
    /// `name`: must equal the Service port's name (empty for an unnamed port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// `port`: the port on the endpoint.
    #[serde(
        default,
        deserialize_with = "de_opt_port",
        skip_serializing_if = "Option::is_none"
    )]
    pub port: Option<u16>,
    /// `protocol` (TCP when omitted).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub protocol: Option<Protocol>,
}

/// A discovery.k8s.io/v1 EndpointSlice.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct EndpointSlice {
    /// `apiVersion`: `discovery.k8s.io/v1` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub api_version: Option<String>,
    /// `kind`: `EndpointSlice` when given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// `metadata` (the Service it belongs to is the `kubernetes.io/service-name` label).
    pub metadata: ObjectMeta,
    /// `addressType`.
    pub address_type: AddressType,
    /// `endpoints`.
    #[serde(default, deserialize_with = "null_default")]
    pub endpoints: Vec<Endpoint>,
    /// `ports`.
    #[serde(default, deserialize_with = "null_default")]
    pub ports: Vec<EndpointPort>,
}

/// Checks an embedded object's `kind` and `apiVersion`, when given, against what its place
/// holds: a Service written with `kind: Pod` is no Service.
fn type_meta(
    kind: &Option<String>,
    api_version: &Option<String>,
    want_kind: &str,
    want_version: &str,
) -> Result<(), (String, String)> {
    if let Some(k) = kind.as_deref().filter(|k| *k != want_kind) {
        return Err((
            "kind".into(),
            format!(
                "{:?}: expected {want_kind} here (or leave `kind` out)",
                sim_core::text::escape(k)
            ),
        ));
    }
    if let Some(v) = api_version.as_deref().filter(|v| *v != want_version) {
        return Err((
            "apiVersion".into(),
            format!(
                "{:?}: expected {want_version} for a {want_kind} (or leave `apiVersion` out)",
                sim_core::text::escape(v)
            ),
        ));
    }
    Ok(())
}

/// A problem found by [`Service::validate`] or [`EndpointSlice::validate`].
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{object}: {field}: {message}")]
pub struct ValidationError {
    /// The object, as `Service ns/name` or `EndpointSlice ns/name`.
    pub object: String,
    /// The field path, as `spec.ports[1].name`.
    pub field: String,
    /// What was wrong and what was expected.
    pub message: String,
}

impl Service {
    /// `ns/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }

    /// The IPv4 cluster IP kube-proxy uses, or `None` when the Service gets no rules: headless,
    /// ExternalName, or no IPv4 address (`proxyutil.ShouldSkipService`,
    /// `GetClusterIPByFamily`; nfsim models the IPv4 proxier only).
    pub fn ipv4_cluster_ip(&self) -> Option<IpAddr> {
        self.cluster_ip_of(IpFamily::IPv4)
    }

    /// The cluster IP of `family` that family's proxier uses, or `None` when it writes no
    /// rules for the Service: headless, ExternalName, or no address of that family
    /// (`proxyutil.ShouldSkipService`, then `GetClusterIPByFamily`: `clusterIPs` when set,
    /// else `clusterIP`).
    pub fn cluster_ip_of(&self, family: IpFamily) -> Option<IpAddr> {
        if self.spec.type_ == ServiceType::ExternalName {
            return None;
        }
        let first = self.spec.cluster_ip?;
        if first == ClusterIp::None {
            return None;
        }
        std::iter::once(first)
            .chain(self.spec.cluster_ips.iter().copied())
            .filter_map(ClusterIp::ip)
            .find(|ip| family.contains(*ip))
    }

    /// Whether every cluster IP of the Service is IPv6 (an IPv6-only Service: only kube-proxy's
    /// IPv6 proxier writes rules for it, and nfsim models the IPv4 one).
    pub fn ipv6_only(&self) -> bool {
        self.spec.cluster_ip.is_some_and(|c| c.ip().is_some()) && self.ipv4_cluster_ip().is_none()
    }

    /// Whether the Service accepts traffic other than to its cluster IP
    /// (`apiservice.ExternallyAccessible`).
    pub fn externally_accessible(&self) -> bool {
        matches!(
            self.spec.type_,
            ServiceType::NodePort | ServiceType::LoadBalancer
        ) || (self.spec.type_ == ServiceType::ClusterIP && !self.spec.external_ips.is_empty())
    }

    /// `apiservice.ExternalPolicyLocal`: externally accessible and externalTrafficPolicy Local.
    pub fn external_policy_local(&self) -> bool {
        self.externally_accessible()
            && self.spec.external_traffic_policy == Some(TrafficPolicy::Local)
    }

    /// `apiservice.InternalPolicyLocal`.
    pub fn internal_policy_local(&self) -> bool {
        self.spec.internal_traffic_policy == Some(TrafficPolicy::Local)
    }

    /// Whether the EndpointSlice controller allocates hints by the proportional CPU heuristic
    /// (`hintsEnabled`): the [`ANNOTATION_TOPOLOGY_AWARE_HINTS`] annotation, else
    /// [`ANNOTATION_TOPOLOGY_MODE`], is `Auto` or `auto`.
    pub fn topology_auto(&self) -> bool {
        let a = &self.metadata.annotations;
        let v = a
            .get(ANNOTATION_TOPOLOGY_AWARE_HINTS)
            .or_else(|| a.get(ANNOTATION_TOPOLOGY_MODE));
        matches!(v.map(String::as_str), Some("Auto" | "auto"))
    }

    /// The ClientIP affinity timeout, when affinity is ClientIP (10800 s unless configured).
    pub fn sticky_max_age_seconds(&self) -> Option<u32> {
        if self.spec.session_affinity != SessionAffinity::ClientIP {
            return None;
        }
        Some(
            self.spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .and_then(|c| c.timeout_seconds)
                .unwrap_or(DEFAULT_CLIENT_IP_TIMEOUT_SECS),
        )
    }

    /// The apiserver's checks of `clusterIPs`, `ipFamilies` and `ipFamilyPolicy` against
    /// each other (`ValidateService`: `validateServiceClusterIPsRelatedFields`,
    /// `validateIPFamilies`): at most two of each, one per family, `ipFamilies[i]` the family
    /// of `clusterIPs[i]`, and a dual-stack list only with a dual-stack policy.
    fn validate_families(&self) -> Result<(), (String, String)> {
        let spec = &self.spec;
        let ips: Vec<IpAddr> = spec.cluster_ips.iter().filter_map(|c| c.ip()).collect();
        if spec.cluster_ips.len() > 2 {
            return Err((
                "spec.clusterIPs".into(),
                format!(
                    "{} addresses: expected at most two, one of each family",
                    spec.cluster_ips.len()
                ),
            ));
        }
        if spec.cluster_ips.len() == 2 && spec.cluster_ips.contains(&ClusterIp::None) {
            return Err((
                "spec.clusterIPs".into(),
                "\"None\" must be the only entry of a headless Service's clusterIPs".into(),
            ));
        }
        if let [a, b] = ips[..] {
            if a.is_ipv4() == b.is_ipv4() {
                return Err((
                    "spec.clusterIPs[1]".into(),
                    format!("{b} is of the same family as clusterIPs[0] {a}: expected one address per family"),
                ));
            }
        }
        if spec.ip_families.len() > 2 {
            return Err((
                "spec.ipFamilies".into(),
                format!(
                    "{} entries: expected at most two (IPv4, IPv6)",
                    spec.ip_families.len()
                ),
            ));
        }
        if let [a, b] = spec.ip_families[..] {
            if a == b {
                return Err((
                    "spec.ipFamilies[1]".into(),
                    format!("{b} repeats ipFamilies[0]: expected IPv4 and IPv6 once each"),
                ));
            }
        }
        for (i, (fam, ip)) in spec.ip_families.iter().zip(&ips).enumerate() {
            if !fam.contains(*ip) {
                return Err((
                    format!("spec.ipFamilies[{i}]"),
                    format!(
                        "{fam} does not match clusterIPs[{i}] {ip}: expected {}",
                        IpFamily::of(*ip)
                    ),
                ));
            }
        }
        // clusterIP alone (no clusterIPs) must match ipFamilies[0] too.
        if let (Some(ClusterIp::Ip(ip)), true, Some(fam)) = (
            spec.cluster_ip,
            spec.cluster_ips.is_empty(),
            spec.ip_families.first(),
        ) {
            if !fam.contains(ip) {
                return Err((
                    "spec.ipFamilies[0]".into(),
                    format!(
                        "{fam} does not match clusterIP {ip}: expected {}",
                        IpFamily::of(ip)
                    ),
                ));
            }
        }
        let dual = ips.len() == 2 || spec.ip_families.len() == 2;
        if dual && spec.ip_family_policy == Some(IpFamilyPolicy::SingleStack) {
            return Err((
                "spec.ipFamilyPolicy".into(),
                "SingleStack with two families: must be RequireDualStack or PreferDualStack when clusterIPs or ipFamilies list both (an omitted policy is defaulted to RequireDualStack then)".into(),
            ));
        }
        Ok(())
    }

    /// Checks what needs several fields at once. The checks that need only one field ran while
    /// the YAML was read.
    pub fn validate(&self) -> Result<(), ValidationError> {
        let err = |field: String, message: String| ValidationError {
            object: format!("Service {}", self.key()),
            field,
            message,
        };
        if self.metadata.name.is_empty() {
            return Err(err(
                "metadata.name".into(),
                "missing: every Service needs a name".into(),
            ));
        }
        type_meta(&self.kind, &self.api_version, "Service", "v1").map_err(|(f, m)| err(f, m))?;
        if let Some(m) = labels::labels_problem(&self.metadata.labels) {
            return Err(err("metadata.labels".into(), m));
        }
        if let Some(m) = labels::labels_problem(&self.spec.selector) {
            return Err(err("spec.selector".into(), m));
        }
        if self.spec.type_ != ServiceType::ExternalName && self.spec.cluster_ip.is_none() {
            return Err(err(
                "spec.clusterIP".into(),
                "missing: expected an IP address, or \"None\" for a headless Service".into(),
            ));
        }
        if let (Some(first), Some(listed)) = (self.spec.cluster_ip, self.spec.cluster_ips.first()) {
            if first != *listed {
                return Err(err(
                    "spec.clusterIPs[0]".into(),
                    format!("{listed} differs from spec.clusterIP {first}: they must be equal"),
                ));
            }
        }
        self.validate_families().map_err(|(f, m)| err(f, m))?;
        let mut seen = std::collections::BTreeSet::new();
        for (i, p) in self.spec.ports.iter().enumerate() {
            if self.spec.ports.len() > 1 && p.name.is_empty() {
                return Err(err(
                    format!("spec.ports[{i}].name"),
                    "missing: every port of a multi-port Service needs a name".into(),
                ));
            }
            // validateServicePort: a port's name is a DNS-1123 label (it reaches kube-proxy's
            // chain comments and the timeline).
            if !p.name.is_empty() && !is_dns1123_label(&p.name) {
                return Err(err(
                    format!("spec.ports[{i}].name"),
                    format!(
                        "{:?} is not a DNS-1123 label: expected at most 63 lowercase letters, digits and '-', starting and ending with a letter or digit (as Kubernetes requires)",
                        p.name
                    ),
                ));
            }
            if !seen.insert((p.name.clone(), p.protocol)) {
                return Err(err(
                    format!("spec.ports[{i}]"),
                    format!(
                        "duplicate port name {:?} with protocol {}: each name/protocol pair must be unique",
                        p.name, p.protocol
                    ),
                ));
            }
            if p.node_port.is_some()
                && !matches!(
                    self.spec.type_,
                    ServiceType::NodePort | ServiceType::LoadBalancer
                )
            {
                return Err(err(
                    format!("spec.ports[{i}].nodePort"),
                    "set on a Service that is neither NodePort nor LoadBalancer".into(),
                ));
            }
        }
        if self.spec.session_affinity == SessionAffinity::None
            && self
                .spec
                .session_affinity_config
                .as_ref()
                .and_then(|c| c.client_ip.as_ref())
                .is_some()
        {
            return Err(err(
                "spec.sessionAffinityConfig.clientIP".into(),
                "set while sessionAffinity is None: expected sessionAffinity: ClientIP".into(),
            ));
        }
        Ok(())
    }
}

impl EndpointSlice {
    /// `ns/name` of the slice itself.
    pub fn key(&self) -> String {
        format!("{}/{}", self.metadata.namespace, self.metadata.name)
    }

    /// The Service this slice belongs to (`kubernetes.io/service-name` label).
    pub fn service_name(&self) -> Option<&str> {
        self.metadata
            .labels
            .get(LABEL_SERVICE_NAME)
            .map(String::as_str)
            .filter(|s| !s.is_empty())
    }

    /// Checks what needs several fields at once (endpointSliceCacheKeys, address families).
    pub fn validate(&self) -> Result<(), ValidationError> {
        let err = |field: String, message: String| ValidationError {
            object: format!("EndpointSlice {}", self.key()),
            field,
            message,
        };
        if self.metadata.name.is_empty() {
            return Err(err(
                "metadata.name".into(),
                "missing: every EndpointSlice needs a name".into(),
            ));
        }
        type_meta(
            &self.kind,
            &self.api_version,
            "EndpointSlice",
            "discovery.k8s.io/v1",
        )
        .map_err(|(f, m)| err(f, m))?;
        if let Some(m) = labels::labels_problem(&self.metadata.labels) {
            return Err(err("metadata.labels".into(), m));
        }
        if self.service_name().is_none() {
            return Err(err(
                format!("metadata.labels[{LABEL_SERVICE_NAME}]"),
                "missing: kube-proxy cannot tie the slice to a Service without this label".into(),
            ));
        }
        for (i, ep) in self.endpoints.iter().enumerate() {
            for (j, a) in ep.addresses.iter().enumerate() {
                let ok = match self.address_type {
                    AddressType::IPv4 => a.is_ipv4(),
                    AddressType::IPv6 => a.is_ipv6(),
                    AddressType::FQDN => false,
                };
                if !ok {
                    return Err(err(
                        format!("endpoints[{i}].addresses[{j}]"),
                        format!(
                            "{a} does not match addressType {:?}: expected an address of that family",
                            self.address_type
                        ),
                    ));
                }
            }
        }
        for (i, p) in self.ports.iter().enumerate() {
            if p.name.is_none() {
                return Err(err(
                    format!("ports[{i}].name"),
                    "missing: use \"\" for the port of a single-port Service".into(),
                ));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
