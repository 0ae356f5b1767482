//! The scenario after loading and checking: every reference resolved, every default applied.
//! This is what the simulation driver runs.

use crate::k8s;
use sim_core::{SimDuration, SimTime};
use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// A checked scenario.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// The file it came from (for messages and the replay command).
    pub file: String,
    /// Its name.
    pub name: String,
    /// Its description.
    pub description: String,
    /// What it shows when every expectation passes (`outcome:`), the lead of the headline.
    pub outcome: Option<String>,
    /// The seed of every random stream.
    pub seed: u64,
    /// Simulated time to run.
    pub duration: SimDuration,
    /// One-way latency of a link between two machines.
    pub latency: SimDuration,
    /// The nodes' pod datapath (`network.cni`).
    pub cni: Cni,
    /// Nodes.
    pub nodes: Vec<NodeDef>,
    /// Hosts outside the cluster.
    pub hosts: Vec<HostDef>,
    /// Pods at the start.
    pub pods: Vec<PodDef>,
    /// Services.
    pub services: Vec<k8s::Service>,
    /// EndpointSlices given in the file; `None` when derived from pods.
    pub endpoint_slices: Option<Vec<k8s::EndpointSlice>>,
    /// kube-proxy settings.
    pub kube_proxy: KubeProxySettings,
    /// Control-plane delays.
    pub control_plane: ControlPlaneSettings,
    /// The cloud load balancer (`cloudLoadBalancer:`; GCE's health check by default).
    pub cloud_load_balancer: super::load_balancer::CloudLoadBalancer,
    /// Clients.
    pub clients: Vec<ClientDef>,
    /// Captures replayed as traffic (`clients[].pcap`).
    pub pcap_clients: Vec<PcapClientDef>,
    /// Timed events, in file order (stable-sorted by time when run).
    pub events: Vec<TimedEvent>,
    /// Expectations, in file order.
    pub expectations: Vec<Expectation>,
    /// The range cluster IPs left out were allocated from (`serviceCIDR`, or the first of
    /// `serviceCIDRs`).
    pub service_cidr: k8s::Cidr,
    /// Every service CIDR, one per family, primary first (`serviceCIDRs`).
    pub service_cidrs: Vec<k8s::Cidr>,
    /// The addresses allocated because the file left them out: (`pod NS/NAME` or
    /// `service NS/NAME`, address) → where from (`node-1's pod CIDR 10.244.1.0/24`). The
    /// timeline shows each when the pod or Service appears.
    pub allocated: BTreeMap<(String, IpAddr), String>,
    /// What loads but is probably a mistake, for the command line to print once (never part
    /// of the run's output).
    pub warnings: Vec<super::warnings::ScenarioWarning>,
    /// The DNS names its resolvers ask and its servers' zones (`udpServer.zone`).
    pub dns: std::sync::Arc<crate::dns::DnsData>,
}

/// How the nodes connect their pods (`network.cni`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cni {
    /// kindnet's `ptp`: a veth per pod holding the pod CIDR's gateway /32, a /32 route per
    /// pod.
    Ptp,
    /// The CNI `bridge` plugin: every pod's veth a port of one bridge that holds the pod
    /// CIDR's gateway address.
    Bridge(BridgeCni),
    /// flannel's `vxlan` backend: pods on a bridge as its CNI config delegates them (the
    /// bridge plugin with `hairpinMode` and `isDefaultGateway`), `flannel.1` VXLAN between
    /// the nodes, flannel's masquerade and forward rules.
    FlannelVxlan(BridgeCni),
    /// Calico: a `cali*` veth per pod with no address on the host side, answered by proxy
    /// ARP for the pod's gateway `169.254.1.1`, a /32 route per pod, and between nodes
    /// routes to each node's block (its pod CIDR), through `tunl0` under IPIP.
    Calico(CalicoCni),
}

impl Cni {
    /// The bridge the pods' veths are ports of (`bridge` and `flannel-vxlan`).
    pub fn bridge(&self) -> Option<&BridgeCni> {
        match self {
            Cni::Ptp | Cni::Calico(_) => None,
            Cni::Bridge(b) | Cni::FlannelVxlan(b) => Some(b),
        }
    }
}

/// Calico's IP pool encapsulation (`ipipMode` of the pool, `CALICO_IPV4POOL_IPIP`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IpipMode {
    /// Every packet to another node's block is encapsulated (`tunl0`).
    Always,
    /// Only packets to a node on another subnet are encapsulated.
    CrossSubnet,
    /// No encapsulation: BGP-learned routes via the other nodes on `eth0`.
    Never,
}

/// Calico's settings (its IP pool's field names: `ipipMode`, `natOutgoing`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CalicoCni {
    /// The pool's `ipipMode`.
    pub ipip_mode: IpipMode,
    /// The pool's `natOutgoing`: Felix's `cali-nat-outgoing` MASQUERADE of pool traffic
    /// leaving the pool.
    pub nat_outgoing: bool,
    /// The pool's CIDR (`network.ipPool`), which holds every node's block.
    pub pool: k8s::Cidr,
}

impl CalicoCni {
    /// Whether traffic from a node on `from` to the node on `to` is encapsulated.
    /// nfsim's nodes share one subnet, so `CrossSubnet` never encapsulates.
    pub fn encapsulates(&self) -> bool {
        self.ipip_mode == IpipMode::Always
    }
}

/// The `bridge` plugin's settings (its own option names: `bridge`, `hairpinMode`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeCni {
    /// The bridge device (`bridge`, default `cni0`).
    pub name: String,
    /// `hairpinMode`: each pod's port in hairpin mode.
    pub hairpin: bool,
    /// `ipMasq`: a nat chain per pod masquerading what it sends off the pod CIDR.
    pub ip_masq: bool,
    /// The CNI network's `name` (`network.name`), hashed into the `ipMasq` chain names.
    pub network_name: String,
}

/// A node.
#[derive(Debug, Clone)]
pub struct NodeDef {
    /// Name.
    pub name: String,
    /// `eth0` address.
    pub address: IpAddr,
    /// Pod CIDR.
    pub pod_cidr: k8s::Cidr,
    /// Conntrack sysctls (scenario-wide ones merged with the node's).
    pub sysctls: BTreeMap<String, u64>,
    /// Host-network servers.
    pub apps: Vec<AppDef>,
    /// More addresses: (interface, address, prefix length); `eth0` ones are secondary IPs
    /// on the node network, others are on an interface of their own (a second NIC, a dummy
    /// interface such as NodeLocal DNSCache's).
    pub extra_addresses: Vec<(String, IpAddr, u8)>,
    /// The node's own rules (CNI, operator): iptables-restore text and `--noflush`, applied
    /// before kube-proxy's first sync and again after a reboot.
    pub extra_rules: Vec<(String, bool)>,
    /// A real node's saved state it starts from (`nodes[].state`).
    pub state: NodeState,
    /// The Node object's labels (the `zone:` shorthand merged in).
    pub labels: BTreeMap<String, String>,
    /// `status.allocatable.cpu` in millicores.
    pub allocatable_cpu_milli: u64,
    /// The Linux release the node runs (`kernel.version`).
    pub kernel: sim_conntrack::KernelVersion,
    /// CPUs that process packets (`cpus`, default 1).
    pub cpus: u32,
    /// A dual-stack node's second family: its InternalIP and pod CIDR of the other family
    /// (`addresses[1]`, `podCIDRs[1]`); `None` for a single-stack node.
    pub secondary: Option<SecondaryFamily>,
}

/// A dual-stack node's addresses of its second family (the first is [`NodeDef::address`] and
/// [`NodeDef::pod_cidr`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SecondaryFamily {
    /// The InternalIP of the family, on `eth0`.
    pub address: IpAddr,
    /// The pod CIDR of the family.
    pub pod_cidr: k8s::Cidr,
}

impl NodeDef {
    /// The node's IP families, primary first: one for a single-stack node, two for a
    /// dual-stack one.
    pub fn families(&self) -> Vec<k8s::IpFamily> {
        let mut v = vec![k8s::IpFamily::of(self.address)];
        v.extend(self.secondary.map(|s| k8s::IpFamily::of(s.address)));
        v
    }
    /// The node's InternalIP of `family`, if it has one.
    pub fn address_of(&self, family: k8s::IpFamily) -> Option<IpAddr> {
        std::iter::once(self.address)
            .chain(self.secondary.map(|s| s.address))
            .find(|a| family.contains(*a))
    }
    /// The node's pod CIDR of `family`, if it has one.
    pub fn pod_cidr_of(&self, family: k8s::IpFamily) -> Option<k8s::Cidr> {
        std::iter::once(self.pod_cidr)
            .chain(self.secondary.map(|s| s.pod_cidr))
            .find(|c| family.contains(c.addr()))
    }
    /// Whether `ip` is in one of the node's pod CIDRs.
    pub fn pod_cidrs_contain(&self, ip: IpAddr) -> bool {
        self.pod_cidr.contains(ip) || self.secondary.is_some_and(|s| s.pod_cidr.contains(ip))
    }
}

/// `nodes[].state`: a real node's saved rules and conntrack table, read and checked when the
/// scenario is loaded.
#[derive(Debug, Clone, Default)]
pub struct NodeState {
    /// The `iptables-save` file (as the scenario names it, resolved against the scenario's
    /// directory) and its text.
    pub rules: Option<(String, String)>,
    /// The `ip6tables-save` file and its text (`state.rules6`).
    pub rules6: Option<(String, String)>,
    /// The `conntrack -L` file and its entries.
    pub conntrack: Option<(String, Vec<sim_conntrack::ListedEntry>)>,
    /// The modelled sysctls of its `sysctl -a` file (`state.sysctls`), by full name: merged
    /// into the node's `sysctls` under the node's own.
    pub sysctls: BTreeMap<String, u64>,
}

/// A host outside the cluster.
#[derive(Debug, Clone)]
pub struct HostDef {
    /// Name.
    pub name: String,
    /// Address.
    pub address: IpAddr,
    /// More addresses it answers on.
    pub extra_addresses: Vec<IpAddr>,
    /// Servers.
    pub apps: Vec<AppDef>,
}

/// Readiness probe timing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// `periodSeconds`.
    pub period_seconds: u32,
    /// `failureThreshold`.
    pub failure_threshold: u32,
    /// `successThreshold`.
    pub success_threshold: u32,
}

impl Probe {
    /// Kubernetes' defaults: every 10 s, 3 failures, 1 success.
    pub const DEFAULT: Probe = Probe {
        period_seconds: 10,
        failure_threshold: 3,
        success_threshold: 1,
    };
    /// Time from the probe starting to fail to the pod being marked not ready.
    pub fn failure_delay(&self) -> SimDuration {
        SimDuration::from_secs(self.period_seconds as u64 * self.failure_threshold as u64)
    }
    /// Time from the probe starting to succeed to the pod being marked ready.
    pub fn success_delay(&self) -> SimDuration {
        SimDuration::from_secs(self.period_seconds as u64 * self.success_threshold as u64)
    }
}

/// A pod.
#[derive(Debug, Clone)]
pub struct PodDef {
    /// Name.
    pub name: String,
    /// Namespace.
    pub namespace: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Node index.
    pub node: usize,
    /// IP (`status.podIP`, of the node's primary family).
    pub ip: IpAddr,
    /// On a dual-stack node, its IP of the second family (`status.podIPs[1]`).
    pub secondary_ip: Option<IpAddr>,
    /// Named container ports.
    pub ports: BTreeMap<String, u16>,
    /// Ready at creation.
    pub ready: bool,
    /// Readiness probe.
    pub probe: Probe,
    /// Default grace period.
    pub grace_period: SimDuration,
    /// What its container does when the pod is deleted (`termination:`, or a preset's).
    pub termination: Termination,
    /// Servers.
    pub apps: Vec<AppDef>,
}

/// How a pod's container ends when the pod is deleted: the kubelet runs the `preStop` hook,
/// then sends SIGTERM; the process acts on it (`on_sigterm`); whatever still runs at the end
/// of `terminationGracePeriodSeconds` (counted from the deletion, hook included) is
/// SIGKILLed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Termination {
    /// An exec `preStop` hook that sleeps this long (`command: [sleep, N]`); SIGTERM reaches
    /// the process only after it.
    pub pre_stop_sleep: Option<SimDuration>,
    /// What the process does on SIGTERM.
    pub on_sigterm: OnSigterm,
    /// Whether its readiness probe fails from SIGTERM on (CoreDNS's `ready` plugin answers
    /// 503 during `lameduck`).
    pub unready_on_sigterm: bool,
}

impl Termination {
    /// A PID 1 with no SIGTERM handler: the kernel does not deliver a signal whose action is
    /// the default to a PID namespace's init, so it runs until SIGKILL.
    pub const IGNORE: Termination = Termination {
        pre_stop_sleep: None,
        on_sigterm: OnSigterm::Ignore,
        unready_on_sigterm: false,
    };
}

/// A process's answer to SIGTERM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnSigterm {
    /// Exits at once.
    Exit,
    /// Keeps serving this long, then exits (CoreDNS's `health { lameduck 5s }`).
    Lameduck(SimDuration),
    /// Ignores it; SIGKILL at the end of the grace period.
    Ignore,
}

impl PodDef {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
    /// Its IPs, primary first (`status.podIPs`).
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> {
        std::iter::once(self.ip).chain(self.secondary_ip)
    }
    /// Its IP of `family`, if it has one.
    pub fn ip_of(&self, family: k8s::IpFamily) -> Option<IpAddr> {
        self.ips().find(|a| family.contains(*a))
    }
    /// Whether `ip` is one of its IPs.
    pub fn has_ip(&self, ip: IpAddr) -> bool {
        self.ip == ip || self.secondary_ip == Some(ip)
    }
}

/// A server application.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AppDef {
    /// DNS-like UDP server.
    UdpServer {
        /// Port.
        port: u16,
        /// Service time.
        service_time: SimDuration,
        /// How it answers.
        reply: UdpReply,
        /// Its zone (`zone:`), an index into [`Scenario::dns`]'s zones: it answers resolvers
        /// by name and listens on the same TCP port too.
        zone: Option<usize>,
    },
    /// TCP server.
    TcpServer {
        /// Port.
        port: u16,
        /// Service time.
        service_time: SimDuration,
        /// Half-close a connection after this many responses on it (`halfClose`).
        close_after: Option<u32>,
    },
}

/// Which release's conntrack cleanup kube-proxy runs: the table of
/// [`crate::kubeproxy::releases`] (docs/kube-proxy-model.md §6).
pub use crate::kubeproxy::releases::{Cleanup, Release};

/// kube-proxy settings.
#[derive(Debug, Clone)]
pub struct KubeProxySettings {
    /// Cleanup release.
    pub release: Release,
    /// `minSyncPeriod`.
    pub min_sync_period: SimDuration,
    /// `syncPeriod`.
    pub sync_period: SimDuration,
    /// `masqueradeAll`.
    pub masquerade_all: bool,
    /// `clusterCIDR`, if set.
    pub cluster_cidr: Option<k8s::Cidr>,
    /// `detectLocalMode` (`None`: ClusterCIDR of `clusterCIDR`, else of each node's pod
    /// CIDR, nfsim's default).
    pub detect_local: Option<DetectLocal>,
    /// `nodePortAddresses` (empty: every address).
    pub node_port_addresses: Vec<NodePortAddress>,
    /// `iptables.localhostNodePorts` (default true).
    pub localhost_node_ports: bool,
    /// `iptables.masqueradeBit` (default 14).
    pub masquerade_bit: u8,
    /// Whether iptables supports `MASQUERADE --random-fully` (default true).
    pub random_fully: bool,
    /// Whether the `-m nfacct` counters are on (default false).
    pub nfacct: bool,
    /// `mode`: iptables, nftables or ipvs.
    pub mode: crate::kubeproxy::ProxyMode,
    /// `ipvs:`, read in IPVS mode.
    pub ipvs: IpvsScenarioSettings,
    /// `cleanup.command`: an external reconciler process in place of the release's cleanup
    /// (`docs/reconciler-protocol.md`).
    pub cleanup: Option<ExternalCleanup>,
    /// `syncCost`: whether a sync takes simulated time (docs/kube-proxy-model.md §5a).
    pub sync_cost: SyncCostMode,
}

/// `kubeProxy.ipvs:` as a run uses it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IpvsScenarioSettings {
    /// `scheduler` (one of [`crate::kubeproxy::ipvs::SCHEDULERS`]).
    pub scheduler: String,
    /// `strictARP`.
    pub strict_arp: bool,
    /// `tcpTimeout` in seconds (0: the kernel's).
    pub tcp_timeout_secs: u32,
    /// `tcpFinTimeout` in seconds (0: the kernel's).
    pub tcp_fin_timeout_secs: u32,
    /// `udpTimeout` in seconds (0: the kernel's).
    pub udp_timeout_secs: u32,
}

impl Default for IpvsScenarioSettings {
    fn default() -> IpvsScenarioSettings {
        IpvsScenarioSettings {
            scheduler: crate::kubeproxy::ipvs::DEFAULT_SCHEDULER.to_string(),
            strict_arp: false,
            tcp_timeout_secs: 0,
            tcp_fin_timeout_secs: 0,
            udp_timeout_secs: 0,
        }
    }
}

/// `kubeProxy.syncCost`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum SyncCostMode {
    /// Syncs take no simulated time: the rules are in place the instant the sync starts.
    #[default]
    Instant,
    /// Each sync takes the time [`crate::kubeproxy::sync_cost::SyncCostModel::CALIBRATED`]
    /// gives its payload and its conntrack cleanup; the rules take effect when the restore
    /// ends, and the next sync starts no earlier than the end of this one.
    Modelled,
}

impl KubeProxySettings {
    /// The runner's timing: iptables and nftables mode's (`maxInterval` one hour, partial
    /// syncs), or IPVS mode's (`maxInterval` = `syncPeriod`, every sync full;
    /// docs/kube-proxy-model.md §14).
    pub fn timing(&self) -> crate::kubeproxy::SyncTiming {
        let base = if self.mode == crate::kubeproxy::ProxyMode::Ipvs {
            crate::kubeproxy::SyncTiming {
                full_sync_period: self.sync_period,
                ..crate::kubeproxy::ipvs::IpvsSettings::timing()
            }
        } else {
            crate::kubeproxy::SyncTiming::default()
        };
        crate::kubeproxy::SyncTiming {
            min_sync_period: self.min_sync_period,
            sync_period: self.sync_period,
            ..base
        }
    }

    /// kube-proxy's defaults with nfsim's release (`latest`) and sync periods.
    pub fn defaults() -> KubeProxySettings {
        KubeProxySettings {
            release: Release::LATEST,
            min_sync_period: SimDuration::from_secs(1),
            sync_period: SimDuration::from_secs(30),
            masquerade_all: false,
            cluster_cidr: None,
            detect_local: None,
            node_port_addresses: Vec::new(),
            localhost_node_ports: true,
            masquerade_bit: 14,
            random_fully: true,
            nfacct: false,
            mode: crate::kubeproxy::ProxyMode::Iptables,
            ipvs: IpvsScenarioSettings::default(),
            cleanup: None,
            sync_cost: SyncCostMode::Instant,
        }
    }
}

/// `detectLocalMode` and its parameter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DetectLocal {
    /// `ClusterCIDR`: `-s clusterCIDR` (without a `clusterCIDR`, no detector).
    ClusterCidr,
    /// `NodeCIDR`: `-s` the node's pod CIDR.
    NodeCidr,
    /// `BridgeInterface`: `-i BRIDGE`.
    BridgeInterface(String),
    /// `InterfaceNamePrefix`: `-i PREFIX+`.
    InterfaceNamePrefix(String),
    /// No detector.
    None,
}

/// One entry of `nodePortAddresses`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodePortAddress {
    /// A CIDR: the node's addresses inside it.
    Cidr(k8s::Cidr),
    /// `primary`: the node's primary address.
    Primary,
}

/// `kubeProxy.cleanup`: the reconciler process each node's kube-proxy runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalCleanup {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// Wall-clock wait for each line the process owes.
    pub timeout: std::time::Duration,
}

/// Control-plane delays.
#[derive(Debug, Clone, Copy)]
pub struct ControlPlaneSettings {
    /// Pod change → EndpointSlice change.
    pub endpoint_slice_delay: SimDuration,
    /// EndpointSlice change → kube-proxy sees it.
    pub watch_delay: SimDuration,
    /// A terminating pod's container exit → the kubelet's `killPod` returns and it reports the
    /// pod not Ready (`controlPlane.podStopDelay`): no source read explains a delay here; kind
    /// measurements fit about 4 s (docs/kube-proxy-model.md §10).
    pub pod_stop_delay: SimDuration,
}

/// Where a client runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    /// In a pod (`namespace/name`).
    Pod(String),
    /// On a host (index).
    Host(usize),
    /// On a node, host network (index).
    Node(usize),
}

/// What a client does.
#[derive(Debug, Clone)]
pub enum ClientKind {
    /// UDP queries.
    Udp {
        /// Source port choice.
        source_port: SourcePort,
        /// Per-try timeout.
        timeout: SimDuration,
        /// Retries.
        retries: u8,
        /// Whether the socket is connected (sees ICMP errors).
        connected: bool,
        /// A one-way sender: never reads answers; a send counts as answered when it reaches
        /// a listening process (`oneWay`).
        one_way: bool,
        /// How it holds its socket over time: a `dig` loop, a pause, a close and reopen.
        socket: UdpSocketUse,
    },
    /// TCP exchanges.
    Tcp {
        /// Handshake timeout.
        connect_timeout: SimDuration,
        /// Response timeout.
        request_timeout: SimDuration,
        /// How connections are reused (`connection:`); `None`: one request per connection.
        connection: Option<ConnectionPolicy>,
    },
    /// ICMP echo requests (`ping`); the target's port is 0.
    Ping {
        /// How long a request waits for its reply.
        timeout: SimDuration,
    },
    /// A stub resolver in a loop (`resolver:`): one `getaddrinfo` per run, one at a time; the
    /// target is its first nameserver's port 53.
    Resolver(Box<ResolverDef>),
}

/// A resolver client's settings (`clients[].resolver`).
#[derive(Debug, Clone)]
pub struct ResolverDef {
    /// Whose resolver.
    pub libc: crate::dns::Libc,
    /// Its `resolv.conf`.
    pub conf: crate::dns::ResolvConf,
    /// The names looked up, one per run, in turn (as written).
    pub names: Vec<String>,
}

/// A client.
#[derive(Debug, Clone)]
pub struct ClientDef {
    /// Name.
    pub name: String,
    /// Where it runs.
    pub placement: Placement,
    /// Where it sends.
    pub target: SocketAddr,
    /// How the target was written (`kube-system/kube-dns:dns` or the address).
    pub target_text: String,
    /// Schedule.
    pub schedule: ClientSchedule,
    /// Kind.
    pub kind: ClientKind,
}

/// A capture replayed as traffic (`clients[].pcap`): its IPv4 packets, sent from a pod or
/// host with the addresses and payloads they were captured with.
#[derive(Debug, Clone)]
pub struct PcapClientDef {
    /// Name.
    pub name: String,
    /// The file as the scenario names it.
    pub file: String,
    /// The sender: a pod or a host.
    pub placement: Placement,
    /// The packets, in file order, each at `offset + (its time − the first frame's)`.
    pub packets: std::sync::Arc<Vec<PcapPacket>>,
    /// Frames left out: not IPv4.
    pub skipped: usize,
}

/// One packet of a [`PcapClientDef`].
#[derive(Debug, Clone)]
pub struct PcapPacket {
    /// When it is sent.
    pub at: SimTime,
    /// Its 1-based frame number in the file.
    pub frame: usize,
    /// The packet.
    pub packet: sim_core::Packet,
    /// The bytes after its layer-4 header, as captured (for the `--pcap` output).
    pub payload: Vec<u8>,
}

/// A timed event.
#[derive(Debug, Clone)]
pub struct TimedEvent {
    /// When.
    pub at: SimTime,
    /// What.
    pub action: Action,
}

/// What an event does.
#[derive(Debug, Clone)]
pub enum Action {
    /// Kill the pod's process; restart in place after a delay (or never).
    OomKill {
        /// `namespace/name`.
        pod: String,
        /// Restart delay.
        restart_after: Option<SimDuration>,
    },
    /// Delete the pod with a grace period, optionally recreating it.
    DeletePod {
        /// `namespace/name`.
        pod: String,
        /// Grace period (`None`: the pod's own).
        grace_period: Option<SimDuration>,
        /// Recreation.
        recreate: Option<Recreate>,
    },
    /// Create a pod.
    CreatePod(Box<PodDef>),
    /// Delete or OOM-kill the pod a client's conntrack entry points to at the event's
    /// instant (`endpointOf:`); the run replaces it with the [`Action::DeletePod`] or
    /// [`Action::OomKill`] of that pod, or stops with an error naming the event's place when
    /// the client has no entry then.
    EndpointOf(Box<PodBehind>),
    /// The readiness probe starts failing (`false`) or succeeding (`true`).
    Readiness {
        /// `namespace/name`.
        pod: String,
        /// New probe result.
        ready: bool,
    },
    /// A Service created (`created`) or replaced.
    UpsertService {
        /// The new object.
        service: Box<k8s::Service>,
        /// Whether it did not exist before.
        created: bool,
    },
    /// A Service deleted.
    DeleteService {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// An EndpointSlice created or replaced (slices given in the file).
    UpsertEndpointSlice(Box<k8s::EndpointSlice>),
    /// An EndpointSlice deleted (slices given in the file).
    DeleteEndpointSlice {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// The pods `selector` matches in `namespace` scaled to `replicas`.
    Scale {
        /// Namespace.
        namespace: String,
        /// Label selector.
        selector: BTreeMap<String, String>,
        /// Replicas wanted.
        replicas: u32,
        /// Grace period of the pods removed (`None`: each pod's own).
        grace_period: Option<SimDuration>,
    },
    /// kube-proxy on some nodes restarted, stopped or started.
    KubeProxy {
        /// Node indices.
        nodes: Vec<usize>,
        /// What happens to the process.
        op: ProxyOp,
        /// The settings of the new process (restart, start), if they change.
        settings: Option<Box<KubeProxySettings>>,
    },
    /// A `conntrack` command typed on some nodes.
    Conntrack {
        /// Node indices.
        nodes: Vec<usize>,
        /// The command.
        command: ConntrackCommand,
    },
    /// A node reboots: its conntrack table and rules are empty, its own rules
    /// (`iptablesRestore` at the start) come back at once, kube-proxy after a delay.
    RebootNode {
        /// Node index.
        node: usize,
        /// kube-proxy's first sync after the reboot comes this long after it.
        kube_proxy_after: SimDuration,
    },
    /// `iptables-restore` of extra rules on some nodes.
    IptablesRestore {
        /// Node indices.
        nodes: Vec<usize>,
        /// The iptables-restore text.
        rules: String,
        /// `--noflush`.
        noflush: bool,
    },
}

/// What a `kubeProxy` event does to the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProxyOp {
    /// Stop, then start a fresh process at once.
    Restart,
    /// Stop: the rules stay as they are, nothing syncs, nothing is cleaned up.
    Stop,
    /// Start a fresh process (after a stop): a full sync at once.
    Start,
}

impl ProxyOp {
    /// The name scenario files use.
    pub fn name(self) -> &'static str {
        match self {
            ProxyOp::Restart => "restart",
            ProxyOp::Stop => "stop",
            ProxyOp::Start => "start",
        }
    }
}

/// A `conntrack` command as an operator types it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConntrackCommand {
    /// `conntrack -D FILTER`.
    Delete(String),
    /// `conntrack -F`.
    Flush,
    /// `conntrack -L FILTER`.
    List(String),
    /// `conntrack -C`.
    Count,
    /// `conntrack -S`.
    Stats,
}

impl fmt::Display for ConntrackCommand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let with = |f: &mut fmt::Formatter<'_>, op: &str, filter: &str| {
            if filter.is_empty() {
                write!(f, "conntrack {op}")
            } else {
                write!(f, "conntrack {op} {filter}")
            }
        };
        match self {
            ConntrackCommand::Delete(x) => with(f, "-D", x),
            ConntrackCommand::Flush => f.write_str("conntrack -F"),
            ConntrackCommand::List(x) => with(f, "-L", x),
            ConntrackCommand::Count => f.write_str("conntrack -C"),
            ConntrackCommand::Stats => f.write_str("conntrack -S"),
        }
    }
}

impl Scenario {
    /// The cluster's (primary) IP family: its nodes' first address's (IPv4 for a scenario
    /// without nodes). A single-stack cluster's kube-proxy runs that family's proxier only
    /// (`cmd/kube-proxy/app/server.go`: the primary family is the node IP's); a dual-stack
    /// cluster's runs both ([`Scenario::families`]).
    pub fn family(&self) -> k8s::IpFamily {
        self.nodes
            .first()
            .map_or(k8s::IpFamily::IPv4, |n| k8s::IpFamily::of(n.address))
    }

    /// The cluster's IP families, primary first: its nodes' (the loader keeps every node
    /// single-stack or every node dual-stack with one primary family). Each family's
    /// proxier runs on every node (`NewDualStackProxier` on a dual-stack node).
    pub fn families(&self) -> Vec<k8s::IpFamily> {
        self.nodes
            .first()
            .map_or(vec![k8s::IpFamily::IPv4], NodeDef::families)
    }

    /// The first event that changes something (a `conntrack -L`, `-C` or `-S` only looks):
    /// the instant the run's headline counts "after" from.
    pub fn first_change(&self) -> Option<&TimedEvent> {
        self.events.iter().find(|e| {
            !matches!(
                &e.action,
                Action::Conntrack {
                    command: ConntrackCommand::List(_)
                        | ConntrackCommand::Count
                        | ConntrackCommand::Stats,
                    ..
                }
            )
        })
    }
}

/// A pod named by what a client sees (`deletePod: {endpointOf: CLIENT}`).
#[derive(Debug, Clone)]
pub struct PodBehind {
    /// Client index.
    pub client: usize,
    /// Its name, for messages.
    pub client_name: String,
    /// The event's line in the file.
    pub line: u64,
    /// Its column.
    pub column: u64,
    /// What to do to the pod.
    pub then: PodAction,
}

/// What an [`Action::EndpointOf`] does to the pod it finds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PodAction {
    /// `deletePod` with this grace period (`None`: the pod's own).
    Delete {
        /// Grace period.
        grace_period: Option<SimDuration>,
    },
    /// `oomKill`, restarting in place after this long (`None`: never).
    OomKill {
        /// Restart delay.
        restart_after: Option<SimDuration>,
    },
}

impl PodAction {
    /// The action on `pod` (`namespace/name`).
    pub fn on(self, pod: String) -> Action {
        match self {
            PodAction::Delete { grace_period } => Action::DeletePod {
                pod,
                grace_period,
                recreate: None,
            },
            PodAction::OomKill { restart_after } => Action::OomKill { pod, restart_after },
        }
    }
    /// The event's YAML key.
    pub fn word(self) -> &'static str {
        match self {
            PodAction::Delete { .. } => "deletePod",
            PodAction::OomKill { .. } => "oomKill",
        }
    }
}

/// How a deleted pod comes back.
#[derive(Debug, Clone)]
pub struct Recreate {
    /// New IP.
    pub ip: IpAddr,
    /// New node index.
    pub node: usize,
    /// Delay after the old one is gone.
    pub after: SimDuration,
}

/// An expectation.
#[derive(Debug, Clone)]
pub struct Expectation {
    /// Name shown in reports.
    pub name: String,
    /// When checked (`None`: at the end).
    pub at: Option<SimTime>,
    /// Its line in the file.
    pub line: u64,
    /// The check.
    pub check: Check,
}

/// Count bounds, re-exported from the schema.
pub use super::schema::CountDoc as Count;

/// What an expectation checks.
#[derive(Debug, Clone)]
pub enum Check {
    /// Client counts over queries first sent in `[from, to)`.
    Client {
        /// Client index.
        client: usize,
        /// Window start.
        from: SimTime,
        /// Window end (`None`: the check time).
        to: Option<SimTime>,
        /// Sent.
        sent: Option<Count>,
        /// Answered.
        answered: Option<Count>,
        /// Failed.
        failed: Option<Count>,
        /// Timed out.
        timed_out: Option<Count>,
        /// Refused.
        refused: Option<Count>,
    },
    /// Conntrack entries on a node.
    Conntrack {
        /// Node index.
        node: usize,
        /// The filter text (`conntrack -L` options).
        filter: String,
        /// How many match.
        count: Count,
        /// Reply source of every match (an IP, or a pod resolved at check time).
        endpoint: Option<EndpointRef>,
        /// `[ASSURED]` of every match.
        assured: Option<bool>,
        /// Seconds left of every match.
        timeout: Option<Count>,
        /// TCP state of every match.
        state: Option<String>,
    },
    /// How one client's flows spread over the endpoints.
    Endpoints {
        /// Client index.
        client: usize,
        /// Window start.
        from: SimTime,
        /// Window end (`None`: the check time).
        to: Option<SimTime>,
        /// Per endpoint, the accepted share of the flows (and the text as written).
        share: Vec<(EndpointRef, ShareRange, String)>,
        /// Whether the flows must pass the chi-square uniformity test.
        uniform: bool,
    },
    /// What reached an endpoint.
    Endpoint {
        /// The endpoint.
        endpoint: EndpointRef,
        /// Only from this client.
        client: Option<usize>,
        /// Window start.
        from: SimTime,
        /// Window end (`None`: the check time).
        to: Option<SimTime>,
        /// Client packets received.
        packets: Option<Count>,
        /// Distinct flows received.
        flows: Option<Count>,
    },
    /// A node's `conntrack -S` counters.
    ConntrackStats {
        /// Node index.
        node: usize,
        /// Each counter checked, by its `conntrack -S` name, with its bounds.
        counters: Vec<(StatCounter, Count)>,
    },
    /// A resolver client's lookups that ended in `[from, to)`, by result
    /// (`client.lookups`).
    Lookups {
        /// Client index.
        client: usize,
        /// Window start.
        from: SimTime,
        /// Window end (`None`: the check time).
        to: Option<SimTime>,
        /// Per result word (`answered`, `nxdomain`, `nodata`, `timedOut`, `refused`, `tcp`,
        /// `namesTried`, `stalled`), its bounds.
        counts: Vec<(&'static str, Count)>,
        /// The slowest lookup's bound.
        max_latency: Option<SimDuration>,
    },
    /// `conntrack -E` events on a node in a window.
    ConntrackEvent {
        /// Node index.
        node: usize,
        /// The filter text (`conntrack -E` options), checked at load.
        filter: String,
        /// The kind of event.
        kind: CtEventKind,
        /// For DESTROY, the cause (`timeout`, `userspace`, `early_drop`, `killed`).
        cause: Option<String>,
        /// Window start, inclusive.
        from: SimTime,
        /// Window end, inclusive.
        to: SimTime,
        /// How many events match in the window.
        count: Count,
    },
}

/// A `conntrack -E` event kind, re-exported from sim-conntrack.
pub use sim_conntrack::EventKind as CtEventKind;

/// One `conntrack -S` counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum StatCounter {
    /// `found`.
    Found,
    /// `invalid`.
    Invalid,
    /// `insert`.
    Insert,
    /// `insert_failed`.
    InsertFailed,
    /// `drop`.
    Drop,
    /// `early_drop`.
    EarlyDrop,
    /// `error`.
    Error,
    /// `search_restart`.
    SearchRestart,
    /// `clash_resolve`.
    ClashResolve,
    /// `chaintoolong`.
    ChainTooLong,
}

impl StatCounter {
    /// The name `conntrack -S` prints.
    pub fn name(self) -> &'static str {
        match self {
            StatCounter::Found => "found",
            StatCounter::Invalid => "invalid",
            StatCounter::Insert => "insert",
            StatCounter::InsertFailed => "insert_failed",
            StatCounter::Drop => "drop",
            StatCounter::EarlyDrop => "early_drop",
            StatCounter::Error => "error",
            StatCounter::SearchRestart => "search_restart",
            StatCounter::ClashResolve => "clash_resolve",
            StatCounter::ChainTooLong => "chaintoolong",
        }
    }
    /// Its value in `s`.
    pub fn of(self, s: &sim_conntrack::Stats) -> u64 {
        match self {
            StatCounter::Found => s.found,
            StatCounter::Invalid => s.invalid,
            StatCounter::Insert => s.insert,
            StatCounter::InsertFailed => s.insert_failed,
            StatCounter::Drop => s.drop,
            StatCounter::EarlyDrop => s.early_drop,
            StatCounter::Error => s.error,
            StatCounter::SearchRestart => s.search_restart,
            StatCounter::ClashResolve => s.clash_resolve,
            StatCounter::ChainTooLong => s.chaintoolong,
        }
    }
    /// Whether nfsim ever increments it (`search_restart` and `chaintoolong` need lookups
    /// racing a table resize or long hash chains, which the simulation does not have;
    /// `clash_resolve` moves on a node with `cpus` > 1 and a 5.10 or later kernel).
    pub fn modelled(self) -> bool {
        !matches!(self, StatCounter::SearchRestart | StatCounter::ChainTooLong)
    }
}

/// An accepted range of a share (a fraction of flows), both ends included.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ShareRange {
    /// Smallest accepted share.
    pub min: f64,
    /// Largest accepted share.
    pub max: f64,
}

impl ShareRange {
    /// Reads `"A..B"`, `">= A"`, `"> A"`, `"<= A"`, `"< A"` or `"A"`, with A and B in [0, 1].
    pub fn parse(text: &str) -> Option<ShareRange> {
        let t = text.trim();
        let num = |s: &str| -> Option<f64> {
            let v: f64 = s.trim().parse().ok()?;
            (0.0..=1.0).contains(&v).then_some(v)
        };
        let r = if let Some((a, b)) = t.split_once("..") {
            ShareRange {
                min: num(a)?,
                max: num(b)?,
            }
        } else if let Some(a) = t.strip_prefix(">=") {
            ShareRange {
                min: num(a)?,
                max: 1.0,
            }
        } else if let Some(a) = t.strip_prefix("<=") {
            ShareRange {
                min: 0.0,
                max: num(a)?,
            }
        } else if let Some(a) = t.strip_prefix('>') {
            ShareRange {
                min: num(a)? + f64::EPSILON,
                max: 1.0,
            }
        } else if let Some(a) = t.strip_prefix('<') {
            ShareRange {
                min: 0.0,
                max: num(a)? - f64::EPSILON,
            }
        } else {
            let v = num(t)?;
            ShareRange { min: v, max: v }
        };
        (r.min <= r.max).then_some(r)
    }
    /// Whether `v` is accepted.
    pub fn accepts(&self, v: f64) -> bool {
        v >= self.min - 1e-12 && v <= self.max + 1e-12
    }
}

/// A pod (by `namespace/name`) or an address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndpointRef {
    /// A pod: whatever IPs it had.
    Pod(String),
    /// An address.
    Ip(IpAddr),
}

impl fmt::Display for EndpointRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndpointRef::Pod(p) => f.write_str(p),
            EndpointRef::Ip(ip) => write!(f, "{ip}"),
        }
    }
}

/// How a UDP server answers a datagram.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UdpReply {
    /// From the address and port the datagram was sent to (a DNS server).
    SamePort,
    /// Never (a sink: syslog, statsd, metrics over UDP).
    Never,
    /// From another port of the same address (a socket of its own: the reply is a new
    /// flow to conntrack, with an entry of its own).
    FromPort(u16),
}

/// Which source port a client's queries leave from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcePort {
    /// Always this port (a resolver bound to one socket for its whole life).
    Fixed(u16),
    /// One ephemeral port drawn once at start and kept (a long-lived sidecar socket).
    FixedEphemeral,
    /// A new ephemeral port for every query (`dig`, glibc's resolver).
    PerQuery,
}

/// How a UDP client holds its socket over time (`clients[].dig`, `udp.pause`, `udp.reopen`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpSocketUse {
    /// A shell loop around `dig` (`clients[].dig`): one query at a time, the next one
    /// `interval` after the previous one ended (answered, or given up after its tries); the
    /// socket, and with it the source port, is held only while a query runs.
    pub sequential: bool,
    /// A pause in sending, or a close of the socket and a reopen.
    pub gap: Option<SocketGap>,
}

/// A gap in a UDP client's sending: no query from `start + after` for `duration`; the rest of
/// the schedule moves by `duration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SocketGap {
    /// From the client's start to the gap.
    pub after: SimDuration,
    /// How long it lasts.
    pub duration: SimDuration,
    /// `reopen`: the socket closes once the queries in flight have ended, releasing its port,
    /// and a new socket binds at the gap's end (a `fixed` client draws a new ephemeral port).
    /// `pause` (false): the socket stays open and keeps its port.
    pub closed: bool,
}

/// The schedule and behaviour of a client.
#[derive(Clone, Debug)]
pub struct ClientSchedule {
    /// First query/connection.
    pub start: SimTime,
    /// No new query/connection at or after this instant.
    pub stop: SimTime,
    /// Time between queries.
    pub interval: SimDuration,
    /// Each send is delayed by a uniform draw in `[0, jitter]` from the client's seeded stream,
    /// from its nominal time `start + k × interval` (so jitter does not accumulate).
    pub jitter: SimDuration,
    /// At most this many queries/connections (`None`: no limit).
    pub count: Option<u32>,
}

/// A pause on open connections: no request from `start + after` for `duration`; the rest of
/// the schedule moves by `duration`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pause {
    /// From the client's start to the pause.
    pub after: SimDuration,
    /// How long it lasts.
    pub duration: SimDuration,
}

/// How a TCP client uses its connections (`tcp.connection` of a scenario client).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectionPolicy {
    /// Requests per connection, after which the client closes it; `None`: keep-alive (as many
    /// as come, until the connection breaks).
    pub requests: Option<u32>,
    /// Connections open at once (at least 1).
    pub parallel: u32,
    /// A pause on the open connections.
    pub pause: Option<Pause>,
}

/// The node-side address of pod veths: the pod CIDR's first address (`10.244.1.1`). The
/// loader keeps pods off it; the cluster gives it to the node's end of every veth.
pub fn pod_gateway(c: &k8s::Cidr) -> IpAddr {
    match c.addr() {
        IpAddr::V4(a) => IpAddr::V4((u32::from(a).wrapping_add(1)).into()),
        IpAddr::V6(a) => IpAddr::V6((u128::from(a).wrapping_add(1)).into()),
    }
}
