//! The YAML scenario file as written: serde structures, one per mapping, with spans kept on
//! every value a later check may need to point at.
//!
//! Every structure refuses unknown fields (a misspelt key is an error with its line and
//! column, never silently ignored), except the embedded Kubernetes objects, which accept and
//! ignore the fields kube-proxy does not read so that `kubectl get -o yaml` output loads as it
//! is. "One of" choices (an app is a `udpServer` or a `tcpServer`; an event is an `oomKill`, a
//! `deletePod`, …) are structures with optional keys, checked for exactly one in
//! [`super::load`]; serde's tagged enums would lose the spans.
//!
//! docs/scenario-reference.md documents every field.

use crate::k8s;
use serde::Deserialize;
use serde_saphyr::Spanned;
use sim_core::SimDuration;
use std::collections::BTreeMap;
use std::net::IpAddr;

/// A value with the place it came from in the file.
pub type S<T> = Spanned<T>;

/// A duration as a scenario writes it (`30s`, `250ms`, `1h30m`, or a bare number of
/// seconds), at most [`MAX_DURATION`]: no span of a run can be longer than the run, and
/// bounding every duration field when it is read keeps the sums and products the simulation
/// makes of them (`start + k × interval + jitter`, `at + gracePeriod + after`) far from
/// `u64` nanoseconds' limit. A longer value is refused with its line and column.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Duration(SimDuration);

/// The longest `duration` a scenario may have, and the bound of every duration field: 7
/// days, beyond the longest default conntrack timeout (TCP ESTABLISHED, 5 days). What a run
/// keeps grows with its queries (one record per query for the summary and the expectations),
/// so the cap bounds memory as well as time.
pub const MAX_DURATION: SimDuration = SimDuration::from_secs(7 * 24 * 3600);

/// The start of the message [`Duration`]'s reader gives for a value beyond [`MAX_DURATION`]
/// (`super::yaml` puts the field's name in front of it).
pub(crate) const TOO_LONG: &str = "is longer than the longest run nfsim simulates";

impl Duration {
    /// The span.
    pub const fn get(self) -> SimDuration {
        self.0
    }
}

impl std::ops::Deref for Duration {
    type Target = SimDuration;
    fn deref(&self) -> &SimDuration {
        &self.0
    }
}

impl From<Duration> for SimDuration {
    fn from(d: Duration) -> SimDuration {
        d.0
    }
}

impl std::fmt::Display for Duration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Display::fmt(&self.0, f)
    }
}

impl<'de> Deserialize<'de> for Duration {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let v = SimDuration::deserialize(d)?;
        if v > MAX_DURATION {
            return Err(serde::de::Error::custom(format!(
                "{v} {TOO_LONG} ({MAX_DURATION}, MAX_DURATION): expected at most {MAX_DURATION}"
            )));
        }
        Ok(Duration(v))
    }
}

/// The whole file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScenarioDoc {
    /// Short name, printed in the summary.
    pub name: S<String>,
    /// Free text.
    #[serde(default)]
    pub description: Option<String>,
    /// What the run shows when every expectation passes (`the incident reproduced`): the
    /// lead of the run's headline.
    #[serde(default)]
    pub outcome: Option<S<String>>,
    /// The seed of every random stream (overridable with `--seed`).
    #[serde(default)]
    pub seed: Option<u64>,
    /// Simulated time to run.
    pub duration: S<Duration>,
    /// Conntrack sysctls for every node (`net.netfilter.nf_conntrack_udp_timeout: 30`).
    #[serde(default)]
    pub sysctls: BTreeMap<String, S<u64>>,
    /// The network between nodes and hosts.
    #[serde(default)]
    pub network: Option<NetworkDoc>,
    /// The Linux release every node runs unless it names its own (default: the release the
    /// model follows, 6.18).
    #[serde(default)]
    pub kernel: Option<S<KernelDoc>>,
    /// The nodes.
    pub nodes: Vec<S<NodeDoc>>,
    /// Hosts outside the cluster.
    #[serde(default)]
    pub hosts: Vec<S<HostDoc>>,
    /// The pods at the start.
    #[serde(default)]
    pub pods: Vec<S<PodDoc>>,
    /// Services, as Kubernetes YAML.
    #[serde(default)]
    pub services: Vec<S<k8s::Service>>,
    /// The range cluster IPs left out are allocated from (default `10.96.0.0/12`,
    /// kube-apiserver's `--service-cluster-ip-range`).
    #[serde(default, rename = "serviceCIDR")]
    pub service_cidr: Option<S<k8s::Cidr>>,
    /// A dual-stack cluster's ranges, one per family, primary first
    /// (`--service-cluster-ip-range=10.96.0.0/12,fd00:10:96::/112`); instead of
    /// `serviceCIDR`.
    #[serde(default, rename = "serviceCIDRs")]
    pub service_cidrs: Option<S<Vec<S<k8s::Cidr>>>>,
    /// EndpointSlices, as Kubernetes YAML. When absent, they are derived from the pods and the
    /// Services' selectors, and follow the pods' lifecycle.
    #[serde(default)]
    pub endpoint_slices: Option<S<Vec<S<k8s::EndpointSlice>>>>,
    /// kube-proxy settings (the same on every node).
    #[serde(default)]
    pub kube_proxy: Option<S<KubeProxyDoc>>,
    /// Control-plane delays.
    #[serde(default)]
    pub control_plane: Option<ControlPlaneDoc>,
    /// The cloud load balancer in front of `type: LoadBalancer` Services.
    #[serde(default)]
    pub cloud_load_balancer: Option<S<super::load_balancer::CloudLoadBalancerDoc>>,
    /// Clients.
    #[serde(default)]
    pub clients: Vec<S<ClientDoc>>,
    /// Timed events.
    #[serde(default)]
    pub events: Vec<S<EventDoc>>,
    /// What must hold.
    #[serde(default)]
    pub expectations: Vec<S<ExpectationDoc>>,
    /// The nodes' own rules (CNI, operators), restored before kube-proxy's first sync.
    #[serde(default)]
    pub iptables_restore: Vec<S<super::events::IptablesRestoreDoc>>,
}

/// `network:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NetworkDoc {
    /// One-way latency of every link between two machines (default 100us).
    #[serde(default)]
    pub latency: Option<Duration>,
    /// The nodes' pod datapath: `ptp` (kindnet's, the default) or `bridge`.
    #[serde(default)]
    pub cni: Option<S<String>>,
    /// The CNI network's `name` (default `cbr0`): the bridge plugin hashes it into its
    /// `ipMasq` chain names.
    #[serde(default)]
    pub name: Option<S<String>>,
    /// The bridge plugin's `bridge`: the bridge device's name (default `cni0`).
    #[serde(default)]
    pub bridge: Option<S<String>>,
    /// The bridge plugin's `isGateway`: the bridge holds the pod CIDR's gateway address.
    #[serde(default)]
    pub is_gateway: Option<S<bool>>,
    /// The bridge plugin's `ipMasq`.
    #[serde(default)]
    pub ip_masq: Option<S<bool>>,
    /// The bridge plugin's `hairpinMode`: every pod's port in hairpin mode.
    #[serde(default)]
    pub hairpin_mode: Option<S<bool>>,
    /// The bridge plugin's `promiscMode`.
    #[serde(default)]
    pub promisc_mode: Option<S<bool>>,
    /// Calico's IP pool `ipipMode`: `Always` (the default), `CrossSubnet` or `Never`.
    #[serde(default)]
    pub ipip_mode: Option<S<String>>,
    /// Calico's IP pool `vxlanMode` (only `Never` is modelled).
    #[serde(default)]
    pub vxlan_mode: Option<S<String>>,
    /// Calico's IP pool `natOutgoing` (default true).
    #[serde(default)]
    pub nat_outgoing: Option<S<bool>>,
    /// Calico's IP pool `blockSize` (refused: nfsim's block is the node's pod CIDR).
    #[serde(default)]
    pub block_size: Option<S<u8>>,
    /// Calico's IP pool CIDR (default `kubeProxy.clusterCIDR`, else 192.168.0.0/16).
    #[serde(default)]
    pub ip_pool: Option<S<k8s::Cidr>>,
}

/// One entry of `nodes:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeDoc {
    /// Node name (`nodeName` of its endpoints).
    pub name: S<String>,
    /// The address of its `eth0` (its InternalIP); a dual-stack node gives `addresses`
    /// instead. After loading's first pass it holds the primary address either way.
    #[serde(default)]
    pub address: Option<S<IpAddr>>,
    /// A dual-stack node's InternalIPs, one per family, primary first (kubelet's
    /// `--node-ip=IPV4,IPV6`), both on `eth0`; instead of `address`.
    #[serde(default)]
    pub addresses: Option<S<Vec<S<IpAddr>>>>,
    /// Its pod CIDR (`spec.podCIDR`). After loading's first pass it holds the primary
    /// pod CIDR (`podCIDRs[0]`) either way.
    #[serde(default, rename = "podCIDR")]
    pub pod_cidr: Option<S<k8s::Cidr>>,
    /// A dual-stack node's pod CIDRs, one per family, in the order of its `addresses`
    /// (`spec.podCIDRs`; `podCIDR` is `podCIDRs[0]`); instead of `podCIDR`.
    #[serde(default, rename = "podCIDRs")]
    pub pod_cidrs: Option<S<Vec<S<k8s::Cidr>>>>,
    /// Conntrack sysctls for this node, over the scenario's.
    #[serde(default)]
    pub sysctls: BTreeMap<String, S<u64>>,
    /// Processes on the node itself (host network): their traffic takes OUTPUT.
    #[serde(default)]
    pub apps: Vec<S<AppDoc>>,
    /// More addresses: `IP[/LEN]` on `eth0` (a secondary IP), or `{address, interface}` on
    /// an interface of its own.
    #[serde(default)]
    pub extra_addresses: Vec<S<super::events::ExtraAddressDoc>>,
    /// A real node's saved state to start from: `iptables-save` and `conntrack -L` output.
    #[serde(default)]
    pub state: Option<S<NodeStateDoc>>,
    /// The Node object's labels (`topology.kubernetes.io/zone` is the one kube-proxy and the
    /// EndpointSlice controller read).
    #[serde(default)]
    pub labels: Option<S<BTreeMap<String, String>>>,
    /// Shorthand for the `topology.kubernetes.io/zone` label.
    #[serde(default)]
    pub zone: Option<S<String>>,
    /// `status.allocatable.cpu`: cores (`4`, `2.5`) or a quantity (`"3500m"`); 1 by default.
    /// The `topology-mode: Auto` heuristic shares endpoints out by it.
    #[serde(default, rename = "allocatableCPU")]
    pub allocatable_cpu: Option<S<super::topology::CpuQuantity>>,
    /// The Linux release this node runs (`kernel: {version: "5.4"}`), over the scenario's.
    #[serde(default)]
    pub kernel: Option<S<KernelDoc>>,
    /// CPUs that process packets (default 1): with more, two packets of one new flow can be
    /// tracked at once and clash at confirmation (docs/kernel-model.md §22).
    #[serde(default)]
    pub cpus: Option<S<u32>>,
}

/// `kernel:` a node's Linux release.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KernelDoc {
    /// `MAJOR.MINOR[.PATCH]`, `"4.14"` to `"6.18"` (as text: a plain `5.10` would read as a
    /// number, 5.1).
    pub version: S<KernelVersionText>,
}

/// A kernel version as the file spells it, kept as text whether quoted or not, so that an
/// unquoted `4.10` stays `4.10`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KernelVersionText(pub String);

impl<'de> Deserialize<'de> for KernelVersionText {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        String::deserialize(d).map(KernelVersionText)
    }
}

/// `nodes[].state:` files saved on a real node, relative to the scenario file.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct NodeStateDoc {
    /// `iptables-save` output: the node's tables before kube-proxy's first sync.
    #[serde(default)]
    pub rules: Option<S<String>>,
    /// `ip6tables-save` output: the node's ip6tables tables, which IPv6 packets meet.
    #[serde(default)]
    pub rules6: Option<S<String>>,
    /// `conntrack -L` output (with or without `-o extended`): the node's table at time 0.
    #[serde(default)]
    pub conntrack: Option<S<String>>,
    /// `sysctl -a` output (or `sysctl.conf` lines): the node's sysctls, taken whole.
    #[serde(default)]
    pub sysctls: Option<S<String>>,
}

/// One entry of `hosts:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct HostDoc {
    /// Host name.
    pub name: S<String>,
    /// Its address (outside every pod CIDR).
    pub address: S<IpAddr>,
    /// More addresses it answers on.
    #[serde(default)]
    pub extra_addresses: Vec<S<IpAddr>>,
    /// Servers on it.
    #[serde(default)]
    pub apps: Vec<S<AppDoc>>,
}

/// `readinessProbe:` of a pod.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ProbeDoc {
    /// `periodSeconds` (default 10).
    #[serde(default)]
    pub period_seconds: Option<u32>,
    /// `failureThreshold` (default 3).
    #[serde(default)]
    pub failure_threshold: Option<u32>,
    /// `successThreshold` (default 1).
    #[serde(default)]
    pub success_threshold: Option<u32>,
}

/// One entry of `pods:` (and the body of a `createPod` event).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PodDoc {
    /// Pod name (unique within its namespace).
    pub name: S<String>,
    /// Namespace (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// Labels, matched by Service selectors.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// The node it runs on.
    pub node: S<String>,
    /// Its IP, inside the node's pod CIDR (default: allocated from it, as the CNI's
    /// host-local IPAM does; `scenario::ipam`).
    #[serde(default)]
    pub ip: Option<S<IpAddr>>,
    /// On a dual-stack node, its address of the node's second family (`status.podIPs[1]`),
    /// allocated from the node's second pod CIDR (`scenario::ipam`); never in the file.
    #[serde(skip)]
    pub secondary_ip: Option<S<IpAddr>>,
    /// Named container ports, for Services whose `targetPort` is a name.
    #[serde(default)]
    pub ports: BTreeMap<String, u16>,
    /// Whether it is ready at the start (default true).
    #[serde(default)]
    pub ready: Option<bool>,
    /// The readiness probe's timing.
    #[serde(default)]
    pub readiness_probe: Option<ProbeDoc>,
    /// `terminationGracePeriodSeconds` as a duration (default 30s).
    #[serde(default)]
    pub termination_grace_period: Option<Duration>,
    /// A named set of shipped settings (`coredns`) for the keys this pod leaves out
    /// (`scenario::presets`).
    #[serde(default)]
    pub preset: Option<S<String>>,
    /// What the container does when the pod is deleted.
    #[serde(default)]
    pub termination: Option<S<TerminationDoc>>,
    /// Servers in the pod.
    #[serde(default)]
    pub apps: Vec<S<AppDoc>>,
}

/// `termination:` of a pod.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TerminationDoc {
    /// An exec `preStop` hook that sleeps this long before SIGTERM.
    #[serde(default)]
    pub pre_stop_sleep: Option<Duration>,
    /// `exit`, `ignore` or `lameduck` (then `lameduck` is required).
    #[serde(default)]
    pub on_sigterm: Option<S<String>>,
    /// How long the process keeps serving after SIGTERM (`onSigterm: lameduck`).
    #[serde(default)]
    pub lameduck: Option<Duration>,
    /// Whether the readiness probe fails from SIGTERM on.
    #[serde(default)]
    pub unready_on_sigterm: Option<bool>,
}

/// One entry of `apps:`: exactly one of the keys.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct AppDoc {
    /// A DNS-like UDP server.
    #[serde(default)]
    pub udp_server: Option<ServerDoc>,
    /// A TCP server.
    #[serde(default)]
    pub tcp_server: Option<ServerDoc>,
}

/// `udpServer:` / `tcpServer:`.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ServerDoc {
    /// Listening port.
    pub port: S<u16>,
    /// Time to answer one request (default 1ms).
    #[serde(default)]
    pub service_time: Option<Duration>,
    /// UDP: whether it answers at all (default true).
    #[serde(default)]
    pub answer: Option<bool>,
    /// UDP: answer from this port instead of the one the datagram was sent to.
    #[serde(default)]
    pub reply_from_port: Option<S<u16>>,
    /// TCP: half-close each connection (`shutdown(SHUT_WR)`, the server's FIN first) after
    /// its first response, or after `maxRequests`.
    #[serde(default)]
    pub half_close: Option<S<bool>>,
    /// TCP: half-close a connection after this many responses on it (nginx's
    /// `keepalive_requests`).
    #[serde(default)]
    pub max_requests: Option<S<u32>>,
    /// UDP: answer resolvers' queries by name from this zone, and listen on the same TCP port
    /// for their retries over TCP (see `super::dns_apps`).
    #[serde(default)]
    pub zone: Option<S<ZoneDoc>>,
}

/// `udpServer.zone:` which names a DNS server knows and how many records each holds.
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ZoneDoc {
    /// CoreDNS's `kubernetes` plugin: an `A` record with the cluster IP for each Service of
    /// the scenario, `NAME.NAMESPACE.svc.cluster.local` (default true).
    #[serde(default)]
    pub services: Option<bool>,
    /// More names, each with its record counts.
    #[serde(default)]
    pub names: BTreeMap<String, S<ZoneNameDoc>>,
}

/// One name of a zone: how many `A` and `AAAA` records it has (addresses counted up from
/// 198.18.0.1 and 2001:db8::1).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ZoneNameDoc {
    /// `A` records (default 0).
    #[serde(default)]
    pub a: Option<S<u16>>,
    /// `AAAA` records (default 0).
    #[serde(default)]
    pub aaaa: Option<S<u16>>,
}

/// `kubeProxy:` (and `settings:` of a `kubeProxy` event, over the settings then in force).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeProxyDoc {
    /// Which release's stale-UDP conntrack cleanup runs: a Kubernetes version `v1.28` …
    /// `v1.37` (its latest patch), `v1.31.0`, `v1.32.0`, `v1.31-fixed`, `none` or `latest`
    /// (the default); see [`crate::kubeproxy::releases`].
    #[serde(default)]
    pub release: Option<S<String>>,
    /// `minSyncPeriod` (default 1s).
    #[serde(default)]
    pub min_sync_period: Option<Duration>,
    /// `syncPeriod` (default 30s).
    #[serde(default)]
    pub sync_period: Option<Duration>,
    /// `masqueradeAll` (default false).
    #[serde(default)]
    pub masquerade_all: Option<bool>,
    /// `clusterCIDR`: when set, the local-traffic detector uses it; otherwise each node's pod
    /// CIDR.
    #[serde(default, rename = "clusterCIDR")]
    pub cluster_cidr: Option<S<k8s::Cidr>>,
    /// `detectLocalMode`: `ClusterCIDR`, `NodeCIDR`, `BridgeInterface`,
    /// `InterfaceNamePrefix`, `None`.
    #[serde(default, rename = "detectLocalMode")]
    pub detect_local_mode: Option<S<String>>,
    /// `detectLocal.bridgeInterface`.
    #[serde(default)]
    pub bridge_interface: Option<S<String>>,
    /// `detectLocal.interfaceNamePrefix`.
    #[serde(default)]
    pub interface_name_prefix: Option<S<String>>,
    /// `nodePortAddresses`: CIDRs, or `[primary]`.
    #[serde(default)]
    pub node_port_addresses: Option<S<Vec<String>>>,
    /// `iptables.localhostNodePorts` (default true).
    #[serde(default)]
    pub localhost_node_ports: Option<bool>,
    /// `iptables.masqueradeBit` (default 14).
    #[serde(default)]
    pub masquerade_bit: Option<S<u8>>,
    /// `MASQUERADE --random-fully` (default true).
    #[serde(default)]
    pub random_fully: Option<bool>,
    /// The `-m nfacct` packet counters (default false).
    #[serde(default)]
    pub nfacct: Option<bool>,
    /// `mode` (`--proxy-mode`): `iptables` (default), `nftables` or `ipvs`.
    #[serde(default)]
    pub mode: Option<S<String>>,
    /// `ipvs:` (`KubeProxyIPVSConfiguration`), read in `mode: ipvs`.
    #[serde(default)]
    pub ipvs: Option<S<IpvsDoc>>,
    /// An external reconciler process in place of the release's cleanup.
    #[serde(default)]
    pub cleanup: Option<S<CleanupDoc>>,
    /// `syncCost`: `modelled` (each sync takes the calibrated time of its restore and its
    /// conntrack cleanup) or `instant` (the default: syncs take no simulated time).
    #[serde(default)]
    pub sync_cost: Option<S<String>>,
}

/// `kubeProxy.ipvs:` (`KubeProxyIPVSConfiguration`; docs/kube-proxy-model.md §14).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IpvsDoc {
    /// `scheduler` (`--ipvs-scheduler`, default `rr`).
    #[serde(default)]
    pub scheduler: Option<S<String>>,
    /// `strictARP` (`--ipvs-strict-arp`, default false).
    #[serde(default, rename = "strictARP")]
    pub strict_arp: Option<bool>,
    /// `tcpTimeout` (`--ipvs-tcp-timeout`; 0s or unset: the kernel's 900 s).
    #[serde(default)]
    pub tcp_timeout: Option<Duration>,
    /// `tcpFinTimeout` (`--ipvs-tcpfin-timeout`; 0s or unset: the kernel's 120 s).
    #[serde(default)]
    pub tcp_fin_timeout: Option<Duration>,
    /// `udpTimeout` (`--ipvs-udp-timeout`; 0s or unset: the kernel's 300 s).
    #[serde(default)]
    pub udp_timeout: Option<Duration>,
}

/// `kubeProxy.cleanup:` (`docs/reconciler-protocol.md`).
#[derive(Debug, Deserialize, Clone)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct CleanupDoc {
    /// The program and its arguments: `[python3, reconciler.py]`.
    pub command: Vec<String>,
    /// Wall-clock wait for each line the process owes (default 10s).
    #[serde(default)]
    pub timeout: Option<Duration>,
}

/// `controlPlane:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ControlPlaneDoc {
    /// Time from a pod change to the EndpointSlice update (default 1s).
    #[serde(default)]
    pub endpoint_slice_delay: Option<Duration>,
    /// Time from an EndpointSlice update to kube-proxy seeing it (default 100ms).
    #[serde(default)]
    pub watch_delay: Option<Duration>,
    /// Time from a terminating pod's container exit to the kubelet's `killPod` returning
    /// (default 0s; docs/kube-proxy-model.md §10 on why it is a parameter).
    #[serde(default)]
    pub pod_stop_delay: Option<Duration>,
}

/// The source port choice of a UDP client: a number, `fixed` or `perQuery`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePortDoc {
    /// A given port.
    Port(u16),
    /// One ephemeral port kept for the client's life.
    Fixed,
    /// A new ephemeral port per query.
    PerQuery,
}

impl<'de> Deserialize<'de> for SourcePortDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = SourcePortDoc;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a port number 1-65535, `fixed` or `perQuery`")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<SourcePortDoc, E> {
                if (1..=65535).contains(&v) {
                    Ok(SourcePortDoc::Port(v as u16))
                } else {
                    Err(E::custom(format!(
                        "port {v} is out of range: expected 1-65535, `fixed` or `perQuery`"
                    )))
                }
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<SourcePortDoc, E> {
                if v < 0 {
                    return Err(E::custom(format!(
                        "port {v} is out of range: expected 1-65535, `fixed` or `perQuery`"
                    )));
                }
                self.visit_u64(v as u64)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<SourcePortDoc, E> {
                match v {
                    "fixed" => Ok(SourcePortDoc::Fixed),
                    "perQuery" => Ok(SourcePortDoc::PerQuery),
                    _ => match v.parse::<u64>() {
                        Ok(n) => self.visit_u64(n),
                        Err(_) => Err(E::custom(format!(
                            "unknown source port {v:?}: expected a port number, `fixed` or `perQuery`"
                        ))),
                    },
                }
            }
        }
        d.deserialize_any(V)
    }
}

/// One entry of `clients:`: where it runs (one of `pod`, `host`, `node`) and what it does
/// (one of `udp`, `tcp`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientDoc {
    /// Client name.
    pub name: S<String>,
    /// Runs in this pod (`NAME` or `NAMESPACE/NAME`).
    #[serde(default)]
    pub pod: Option<S<String>>,
    /// Runs on this host outside the cluster.
    #[serde(default)]
    pub host: Option<S<String>>,
    /// Runs as a process on this node (its traffic takes OUTPUT).
    #[serde(default)]
    pub node: Option<S<String>>,
    /// A UDP query client.
    #[serde(default)]
    pub udp: Option<S<UdpClientDoc>>,
    /// A TCP client.
    #[serde(default)]
    pub tcp: Option<S<TcpClientDoc>>,
    /// A capture replayed as traffic (instead of `pod`/`host`/`node` and `udp`/`tcp`).
    #[serde(default)]
    pub pcap: Option<S<PcapClientDoc>>,
    /// A ping client.
    #[serde(default)]
    pub ping: Option<S<PingClientDoc>>,
    /// A shell loop around `dig`: one query at a time, a sleep between (see
    /// `super::udp_apps`).
    #[serde(default)]
    pub dig: Option<S<DigClientDoc>>,
    /// A stub resolver (glibc's or musl's `getaddrinfo`) in a loop (see `super::dns_apps`).
    #[serde(default)]
    pub resolver: Option<S<ResolverClientDoc>>,
    /// `IPv4` or `IPv6`: which of a dual-stack Service's cluster IPs a `NAMESPACE/NAME[:PORT]`
    /// target reaches (default: the cluster's primary family); the client sends from its
    /// machine's address of that family.
    #[serde(default)]
    pub family: Option<S<String>>,
}

/// `resolver:` of a client: `while :; do getent ahosts NAME; sleep S; done`, each run the
/// next name of `names`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ResolverClientDoc {
    /// `glibc` or `musl`.
    pub libc: S<String>,
    /// musl's version (`1.2.4` and later retry a truncated answer over TCP); default 1.2.5.
    #[serde(default)]
    pub version: Option<S<String>>,
    /// The `resolv.conf` text.
    #[serde(default)]
    pub resolv_conf: Option<S<String>>,
    /// A `resolv.conf` file, relative to the scenario file's directory.
    #[serde(default)]
    pub resolv_conf_file: Option<S<String>>,
    /// The names looked up, one per run, in turn.
    pub names: S<Vec<S<String>>>,
    /// The `sleep` between the end of one lookup and the start of the next.
    pub sleep: S<Duration>,
    /// First run (default 0s).
    #[serde(default)]
    pub start: Option<Duration>,
    /// No new run from this instant (default: the end of the run).
    #[serde(default)]
    pub stop: Option<Duration>,
    /// At most this many runs.
    #[serde(default)]
    pub count: Option<u32>,
}

/// `dig:` of a client: `while :; do dig @TARGET -b ADDR#PORT +tries=N +timeout=T; sleep S;
/// done`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DigClientDoc {
    /// `IP:PORT`, or a Service port `NAMESPACE/NAME[:PORTNAME]`.
    pub target: S<String>,
    /// The `sleep` between the end of one `dig` and the start of the next.
    pub sleep: S<Duration>,
    /// `-b ADDR#PORT`: the port each run binds (default: a new ephemeral port per run).
    #[serde(default)]
    pub source_port: Option<S<SourcePortDoc>>,
    /// `+tries=N`: tries per run, the first included (default 3, as dig's).
    #[serde(default)]
    pub tries: Option<S<u8>>,
    /// `+timeout=T`: how long a try waits for its answer (default 5s, as dig's).
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// Whether the socket is connected (default true: dig's UDP socket is).
    #[serde(default)]
    pub connected: Option<bool>,
    /// First run (default 0s).
    #[serde(default)]
    pub start: Option<Duration>,
    /// No new run from this instant (default: the end of the run).
    #[serde(default)]
    pub stop: Option<Duration>,
    /// At most this many runs.
    #[serde(default)]
    pub count: Option<u32>,
}

/// `pcap:` of a client: the IPv4 packets of a capture, sent from a pod or host at their
/// captured times.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PcapClientDoc {
    /// The capture (pcap, pcapng, Ethernet, raw IP or Linux cooked), relative to the
    /// scenario file's directory.
    pub file: S<String>,
    /// The pod (`NAME` or `NAMESPACE/NAME`) or host that sends the packets.
    pub from: S<String>,
    /// When the first frame is sent (default 0s).
    #[serde(default)]
    pub offset: Option<S<Duration>>,
}

/// `ping:` of a client.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PingClientDoc {
    /// An IP address (a pod's, a node's, a host's).
    pub target: S<String>,
    /// Time between echo requests.
    pub interval: S<Duration>,
    /// Uniform random delay added to each request's nominal time (default 0s).
    #[serde(default)]
    pub jitter: Option<Duration>,
    /// How long a request waits for its reply (default 1s).
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// First request (default 0s).
    #[serde(default)]
    pub start: Option<Duration>,
    /// No new request from this instant.
    #[serde(default)]
    pub stop: Option<Duration>,
    /// At most this many requests.
    #[serde(default)]
    pub count: Option<u32>,
}

/// `udp:` of a client.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct UdpClientDoc {
    /// `IP:PORT`, or a Service port `NAMESPACE/NAME[:PORTNAME]` (its cluster IP and port).
    pub target: S<String>,
    /// Time between queries.
    pub interval: S<Duration>,
    /// Uniform random delay added to each query's nominal time (default 0s).
    #[serde(default)]
    pub jitter: Option<Duration>,
    /// A port number, `fixed` (one ephemeral port for the client's life) or `perQuery`
    /// (default `perQuery`).
    #[serde(default)]
    pub source_port: Option<S<SourcePortDoc>>,
    /// How long a try waits for its answer (default 5s).
    #[serde(default)]
    pub timeout: Option<Duration>,
    /// Re-sends after a timeout or ICMP error (default 0).
    #[serde(default)]
    pub retries: Option<u8>,
    /// Whether the query socket is connected (default true): only a connected socket is told
    /// of an ICMP error; an unconnected one (`sendto`) waits for its timeout.
    #[serde(default)]
    pub connected: Option<bool>,
    /// A one-way sender (default false): never reads answers, never retries; a send counts
    /// as answered when it reaches a listening process.
    #[serde(default)]
    pub one_way: Option<S<bool>>,
    /// No query for a while, the socket kept open with its port (`after`, `for`).
    #[serde(default)]
    pub pause: Option<S<PauseDoc>>,
    /// The socket closed for a while, releasing its port, then a new one bound (`after`,
    /// `for`).
    #[serde(default)]
    pub reopen: Option<S<PauseDoc>>,
    /// First query (default 0s).
    #[serde(default)]
    pub start: Option<Duration>,
    /// No new query from this instant (default: the end of the run).
    #[serde(default)]
    pub stop: Option<Duration>,
    /// At most this many queries.
    #[serde(default)]
    pub count: Option<u32>,
}

/// `tcp:` of a client.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct TcpClientDoc {
    /// `IP:PORT`, or a Service port `NAMESPACE/NAME[:PORTNAME]`.
    pub target: S<String>,
    /// Time between connections.
    pub interval: S<Duration>,
    /// Uniform random delay added to each connection's nominal time (default 0s).
    #[serde(default)]
    pub jitter: Option<Duration>,
    /// Handshake timeout (default 10s).
    #[serde(default)]
    pub connect_timeout: Option<Duration>,
    /// Response timeout (default 10s).
    #[serde(default)]
    pub request_timeout: Option<Duration>,
    /// First connection (default 0s).
    #[serde(default)]
    pub start: Option<Duration>,
    /// No new connection from this instant.
    #[serde(default)]
    pub stop: Option<Duration>,
    /// At most this many connections (requests, with `connection`).
    #[serde(default)]
    pub count: Option<u32>,
    /// Connection reuse: keep-alive, requests per connection, parallel connections, a pause.
    /// Absent: one request per connection.
    #[serde(default)]
    pub connection: Option<S<ConnectionDoc>>,
}

/// `connection:` of a `tcp:` client.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConnectionDoc {
    /// Requests per connection, then the client closes it.
    #[serde(default)]
    pub requests: Option<S<u32>>,
    /// One connection for as many requests as come (until it breaks).
    #[serde(default)]
    pub keep_alive: Option<S<bool>>,
    /// Connections open at once (default 1).
    #[serde(default)]
    pub parallel: Option<S<u32>>,
    /// No request for a while, the connections kept open.
    #[serde(default)]
    pub pause: Option<S<PauseDoc>>,
}

/// `pause:` of a `connection:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct PauseDoc {
    /// From the client's start to the pause.
    pub after: S<Duration>,
    /// How long it lasts.
    #[serde(rename = "for")]
    pub duration: S<Duration>,
}

/// One entry of `events:`: `at` and exactly one action.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EventDoc {
    /// When it happens.
    pub at: S<Duration>,
    /// The pod's process is killed at once (OOMKilled); its network stays.
    #[serde(default)]
    pub oom_kill: Option<OomKillDoc>,
    /// The pod is deleted: graceful termination, then gone.
    #[serde(default)]
    pub delete_pod: Option<DeletePodDoc>,
    /// A new pod (scale up).
    #[serde(default)]
    pub create_pod: Option<PodDoc>,
    /// The readiness probe starts failing or succeeding.
    #[serde(default)]
    pub readiness: Option<ReadinessDoc>,
    /// A new Service (`kubectl create`).
    #[serde(default)]
    pub create_service: Option<S<k8s::Service>>,
    /// A Service replaced by this one (`kubectl apply`): ports, selector, type, policies.
    #[serde(default)]
    pub update_service: Option<S<k8s::Service>>,
    /// A Service deleted: `NAMESPACE/NAME`.
    #[serde(default)]
    pub delete_service: Option<S<String>>,
    /// An EndpointSlice created or replaced (scenarios that give `endpointSlices`).
    #[serde(default)]
    pub update_endpoint_slice: Option<S<k8s::EndpointSlice>>,
    /// An EndpointSlice deleted: `NAMESPACE/NAME` (scenarios that give `endpointSlices`).
    #[serde(default)]
    pub delete_endpoint_slice: Option<S<String>>,
    /// The pods a selector matches scaled to a number of replicas.
    #[serde(default)]
    pub scale: Option<S<super::events::ScaleDoc>>,
    /// kube-proxy restarted, stopped or started, optionally with new settings.
    #[serde(default)]
    pub kube_proxy: Option<S<super::events::KubeProxyEventDoc>>,
    /// A `conntrack` command typed on a node (`-D FILTER`, `-F`, `-L FILTER`, `-S`, `-C`).
    #[serde(default)]
    pub conntrack: Option<S<super::events::ConntrackCommandDoc>>,
    /// A node reboots.
    #[serde(default)]
    pub reboot_node: Option<S<super::events::RebootDoc>>,
    /// `iptables-restore` on a node (a CNI or an operator installing rules).
    #[serde(default)]
    pub iptables_restore: Option<S<super::events::IptablesRestoreDoc>>,
}

/// `oomKill:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct OomKillDoc {
    /// The pod (or `endpointOf`).
    #[serde(default)]
    pub pod: Option<S<String>>,
    /// The pod a client's conntrack entry points to at the event's instant (a client name).
    #[serde(default)]
    pub endpoint_of: Option<S<String>>,
    /// The container restarts in place (same IP) after this long; absent: never.
    #[serde(default)]
    pub restart_after: Option<Duration>,
}

/// `deletePod:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct DeletePodDoc {
    /// The pod (or `endpointOf`).
    #[serde(default)]
    pub pod: Option<S<String>>,
    /// The pod a client's conntrack entry points to at the event's instant (a client name).
    #[serde(default)]
    pub endpoint_of: Option<S<String>>,
    /// Grace period (default: the pod's `terminationGracePeriod`); `0s` deletes at once.
    #[serde(default)]
    pub grace_period: Option<Duration>,
    /// Recreate it (same name, labels and apps) after it is gone.
    #[serde(default)]
    pub recreate: Option<RecreateDoc>,
}

/// `recreate:` of a deletion.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RecreateDoc {
    /// The new pod's IP (default: the old one).
    #[serde(default)]
    pub ip: Option<S<IpAddr>>,
    /// Allocate the new pod a new IP from its node's pod CIDR (default false).
    #[serde(default)]
    pub new_ip: Option<S<bool>>,
    /// The node (default: the old one).
    #[serde(default)]
    pub node: Option<S<String>>,
    /// Delay from the old pod being gone to the new one running (default 0s).
    #[serde(default)]
    pub after: Option<Duration>,
}

/// `readiness:`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ReadinessDoc {
    /// The pod.
    pub pod: S<String>,
    /// Whether the probe now succeeds.
    pub ready: bool,
}

/// A count check: a number (exactly), or `">= N"`, `"> N"`, `"<= N"`, `"< N"`, `"N..M"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CountDoc {
    /// Smallest accepted value.
    pub min: u64,
    /// Largest accepted value.
    pub max: u64,
}

impl CountDoc {
    /// Whether `v` is accepted.
    pub fn accepts(&self, v: u64) -> bool {
        self.min <= v && v <= self.max
    }
    /// Parses the string form.
    pub fn parse(s: &str) -> Result<CountDoc, String> {
        let t = s.trim();
        let num = |x: &str| {
            x.trim().parse::<u64>().map_err(|_| {
                format!(
                    "bad count {s:?}: expected N, \">= N\", \"> N\", \"<= N\", \"< N\" or \"N..M\""
                )
            })
        };
        let c = if let Some(r) = t.strip_prefix(">=") {
            CountDoc {
                min: num(r)?,
                max: u64::MAX,
            }
        } else if let Some(r) = t.strip_prefix("<=") {
            CountDoc {
                min: 0,
                max: num(r)?,
            }
        } else if let Some(r) = t.strip_prefix('>') {
            CountDoc {
                min: num(r)?.saturating_add(1),
                max: u64::MAX,
            }
        } else if let Some(r) = t.strip_prefix('<') {
            let n = num(r)?;
            if n == 0 {
                return Err(format!("bad count {s:?}: nothing is below 0"));
            }
            CountDoc { min: 0, max: n - 1 }
        } else if let Some((a, b)) = t.split_once("..") {
            let (a, b) = (num(a)?, num(b)?);
            if a > b {
                return Err(format!("bad count {s:?}: the range is empty"));
            }
            CountDoc { min: a, max: b }
        } else {
            let n = num(t)?;
            CountDoc { min: n, max: n }
        };
        Ok(c)
    }
}

impl std::fmt::Display for CountDoc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.min, self.max) {
            (a, b) if a == b => write!(f, "{a}"),
            (a, u64::MAX) => write!(f, ">= {a}"),
            (0, b) => write!(f, "<= {b}"),
            (a, b) => write!(f, "{a}..{b}"),
        }
    }
}

impl<'de> Deserialize<'de> for CountDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = CountDoc;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a count: N, \">= N\", \"> N\", \"<= N\", \"< N\" or \"N..M\"")
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<CountDoc, E> {
                Ok(CountDoc { min: v, max: v })
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<CountDoc, E> {
                if v < 0 {
                    return Err(E::custom(format!(
                        "count {v} is negative: expected 0 or more"
                    )));
                }
                self.visit_u64(v as u64)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<CountDoc, E> {
                CountDoc::parse(v).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// One entry of `expectations:`: an optional name and time, and exactly one check.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ExpectationDoc {
    /// A name for reports (default: a description of the check).
    #[serde(default)]
    pub name: Option<String>,
    /// When to check (default: at the end of the run).
    #[serde(default)]
    pub at: Option<S<Duration>>,
    /// Counts of one client's queries or connections.
    #[serde(default)]
    pub client: Option<ClientExpectDoc>,
    /// Conntrack entries on a node.
    #[serde(default)]
    pub conntrack: Option<ConntrackExpectDoc>,
    /// What reached an endpoint.
    #[serde(default)]
    pub endpoint: Option<EndpointExpectDoc>,
    /// How one client's flows spread over the endpoints.
    #[serde(default)]
    pub endpoints: Option<EndpointsExpectDoc>,
    /// A node's `conntrack -S` counters.
    #[serde(default)]
    pub conntrack_stats: Option<S<ConntrackStatsExpectDoc>>,
    /// Conntrack events (`conntrack -E`) on a node.
    #[serde(default)]
    pub conntrack_event: Option<S<ConntrackEventExpectDoc>>,
}

/// `conntrackStats:` check: a node's `conntrack -S` counters at the check's time, each
/// spelled as `conntrack -S` prints it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConntrackStatsExpectDoc {
    /// The node.
    pub node: S<String>,
    /// `found`: NAT tuples found taken.
    #[serde(default)]
    pub found: Option<CountDoc>,
    /// `invalid`: packets that got no entry.
    #[serde(default)]
    pub invalid: Option<CountDoc>,
    /// `insert`: entries inserted from userspace.
    #[serde(default)]
    pub insert: Option<CountDoc>,
    /// `insert_failed`: confirmations that found the tuple taken (clashes).
    #[serde(default)]
    pub insert_failed: Option<CountDoc>,
    /// `drop`: packets dropped for want of an entry (table full).
    #[serde(default)]
    pub drop: Option<CountDoc>,
    /// `early_drop`: entries evicted to make room.
    #[serde(default)]
    pub early_drop: Option<CountDoc>,
    /// `error`: ICMP errors matching no entry, malformed packets.
    #[serde(default)]
    pub error: Option<CountDoc>,
    /// `search_restart` (always 0 in nfsim).
    #[serde(default)]
    pub search_restart: Option<CountDoc>,
    /// `clash_resolve`: clashes at confirmation resolved (a node with `cpus` > 1, kernel
    /// 5.10 or later).
    #[serde(default)]
    pub clash_resolve: Option<CountDoc>,
    /// `chaintoolong` (always 0 in nfsim).
    #[serde(default)]
    pub chaintoolong: Option<CountDoc>,
}

/// `conntrackEvent:` check: how many `conntrack -E` events of one kind, on entries a filter
/// matches, happened in a window (about an instant, or between two).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConntrackEventExpectDoc {
    /// The node.
    pub node: S<String>,
    /// `NEW`, `UPDATE` or `DESTROY`.
    pub event: S<String>,
    /// For DESTROY, why: `timeout`, `userspace` (a cleanup, `conntrack -D`), `early_drop`,
    /// `killed`.
    #[serde(default)]
    pub cause: Option<S<String>>,
    /// A `conntrack -E` filter on the entry (`-p udp --orig-src 10.244.2.9`).
    #[serde(default)]
    pub filter: Option<S<String>>,
    /// About when (with `tolerance`).
    #[serde(default)]
    pub about: Option<S<Duration>>,
    /// How far from `about` an event may be (default 1s).
    #[serde(default)]
    pub tolerance: Option<Duration>,
    /// Window start (instead of `about`).
    #[serde(default)]
    pub from: Option<Duration>,
    /// Window end, inclusive (instead of `about`).
    #[serde(default)]
    pub to: Option<Duration>,
    /// How many events match in the window (default `>= 1`).
    #[serde(default)]
    pub count: Option<CountDoc>,
}

/// `endpoints:` check: how one client's flows spread over the endpoints they reached.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EndpointsExpectDoc {
    /// The client.
    pub client: S<String>,
    /// Window start (default 0s).
    #[serde(default)]
    pub from: Option<Duration>,
    /// Window end, exclusive (default: the check's time).
    #[serde(default)]
    pub to: Option<Duration>,
    /// Per endpoint (a pod or an IP), its share of the flows: `"0.30..0.37"`, `">= 0.2"`,
    /// `"<= 0.5"`, `"0.5"`.
    #[serde(default)]
    pub share: Option<BTreeMap<String, S<String>>>,
    /// A chi-square test that the flows spread evenly over the endpoints reached.
    #[serde(default)]
    pub uniform: Option<bool>,
}

/// `client:` check: counts over the queries first sent in `[from, to)`.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ClientExpectDoc {
    /// The client.
    pub name: S<String>,
    /// Window start (default 0s).
    #[serde(default)]
    pub from: Option<Duration>,
    /// Window end, exclusive (default: the check's time).
    #[serde(default)]
    pub to: Option<Duration>,
    /// Queries sent in the window.
    #[serde(default)]
    pub sent: Option<CountDoc>,
    /// Of those, answered.
    #[serde(default)]
    pub answered: Option<CountDoc>,
    /// Of those, failed (timed out, refused, reset).
    #[serde(default)]
    pub failed: Option<CountDoc>,
    /// Of those, timed out.
    #[serde(default)]
    pub timed_out: Option<CountDoc>,
    /// Of those, refused by an ICMP error or reset.
    #[serde(default)]
    pub refused: Option<CountDoc>,
    /// A resolver client's lookups that ended in the window, by result.
    #[serde(default)]
    pub lookups: Option<S<LookupsExpectDoc>>,
}

/// `client.lookups:` a resolver client's lookups by how they ended.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct LookupsExpectDoc {
    /// Answered with addresses.
    #[serde(default)]
    pub answered: Option<CountDoc>,
    /// No name of the search list exists.
    #[serde(default)]
    pub nxdomain: Option<CountDoc>,
    /// The name exists without addresses.
    #[serde(default)]
    pub nodata: Option<CountDoc>,
    /// No answer in the resolver's time.
    #[serde(default)]
    pub timed_out: Option<CountDoc>,
    /// Every nameserver refused (glibc).
    #[serde(default)]
    pub refused: Option<CountDoc>,
    /// Over TCP (a truncated answer, or `use-vc`).
    #[serde(default)]
    pub tcp: Option<CountDoc>,
    /// Names asked per lookup, every lookup.
    #[serde(default)]
    pub names_tried: Option<CountDoc>,
    /// The slowest lookup took at most this long.
    #[serde(default)]
    pub max_latency: Option<Duration>,
    /// Lookups that took 1 s or more (the shortest resolver timeout): each waited for a
    /// resend at least once, as a lookup whose query was dropped does.
    #[serde(default)]
    pub stalled: Option<CountDoc>,
}

/// `conntrack:` check on one node's table.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConntrackExpectDoc {
    /// The node.
    pub node: S<String>,
    /// A `conntrack -L` filter (`-p udp --orig-dst 10.96.0.10 --orig-port-dst 53`).
    #[serde(default)]
    pub filter: Option<S<String>>,
    /// How many entries match (default `>= 1`, or `0` with `exists: false`).
    #[serde(default)]
    pub count: Option<CountDoc>,
    /// Shorthand for `count: ">= 1"` / `count: 0`.
    #[serde(default)]
    pub exists: Option<bool>,
    /// Every matching entry's reply source is this endpoint (a pod name or an IP).
    #[serde(default)]
    pub endpoint: Option<S<String>>,
    /// Every matching entry is (or is not) `[ASSURED]`.
    #[serde(default)]
    pub assured: Option<bool>,
    /// Every matching entry's seconds left (as `conntrack -L` prints them).
    #[serde(default)]
    pub timeout: Option<CountDoc>,
    /// Every matching entry's TCP state (`ESTABLISHED`, `TIME_WAIT`, …).
    #[serde(default)]
    pub state: Option<String>,
}

/// `endpoint:` check: what reached one endpoint in a window.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct EndpointExpectDoc {
    /// The pod (`NAME` or `NAMESPACE/NAME`), or an IP.
    pub pod: S<String>,
    /// Count only traffic from this client.
    #[serde(default)]
    pub client: Option<S<String>>,
    /// Window start (default 0s).
    #[serde(default)]
    pub from: Option<Duration>,
    /// Window end, exclusive (default: the check's time).
    #[serde(default)]
    pub to: Option<Duration>,
    /// Client messages (queries, SYNs, retries) that reached it.
    #[serde(default)]
    pub packets: Option<CountDoc>,
    /// Distinct flows (source address and port) that reached it.
    #[serde(default)]
    pub flows: Option<CountDoc>,
}
