//! The simulation driver: one event queue for the whole cluster.
//!
//! Every node is a [`Netns`] (sim-netfilter's hook pipeline with its conntrack table):
//!
//! - `eth0` holds the node's address on the node network, a flat network with a one-way
//!   `latency` per link; its prefix is the longest one (at most /24) holding every node
//!   address, so the nodes are directly connected to each other ([`node_network_len`]);
//! - one veth per local pod, holding the pod CIDR's first address as a /32 (as the `ptp` CNI
//!   plugin of kindnet sets the host side up), with a /32 route to the pod's IP;
//! - a route to each other node's pod CIDR via that node's address;
//! - a default route via the network's router, the first free address of the node network
//!   ([`router_address`]), like a kind node's route via the docker bridge. Hosts outside the
//!   cluster are reached through it, and so are Service IPs: a node process's socket needs a
//!   route to the cluster IP before OUTPUT's DNAT rewrites it.
//!
//! A pod's packets enter its node with [`Ingress::Interface`] on its veth (PREROUTING); a
//! node process's packets take OUTPUT ([`Ingress::Local`]); what a node transmits on `eth0`
//! reaches the machine owning the next hop after the link latency, what it transmits on a
//! veth reaches that pod. The router delivers to node and host addresses and routes each pod
//! CIDR to its node, except back to the node the packet came from: a packet for a gone pod's
//! IP finds no /32 on its node, goes out by the default route and is dropped by the router,
//! as a kind node's packet is lost upstream. Hosts send everything to the router. Forwarded
//! packets lose one TTL per node (the namespace's `ip_forward`).
//!
//! kube-proxy is the kubeproxy module's [`crate::kubeproxy::KubeProxy`], one per node or one
//! per set of nodes with identical rules ([`ProxyGroup`]); its syncs are applied to the
//! nodes' namespaces and its cleanup runs against their conntrack tables.
//!
//! Use: [`Simulation::new`], then [`Simulation::run_until`] (repeatedly, if you want to look
//! at the state at several instants), then [`Simulation::finish`] for the results.

use super::apps::{
    closed_port_response, AppEvent, ClientSchedule, Outbox, QueryRecord, Tag, TcpClient,
    TcpClientConfig, TcpServer, UdpClient, UdpClientConfig, UdpServer,
};
use super::control::{derive_slices, Phase, PodState};
use super::ping::{PingClient, PingClientConfig, PingIdents};
use super::ports::ConnectPorts;
use super::proxy::{
    nat_rules_written, rules_are_node_independent, same_rendering, CleanupFactory, ProxyGroup,
    SyncResult,
};
use super::tcp_session::{TcpSessionClient, TcpSessionConfig};
use crate::k8s::EndpointSlice;
use crate::kubeproxy::{KubeProxy, LocalDetector, ProxierConfig, ProxyMode, SyncKind, SyncTiming};
use crate::scenario::model::*;
use serde::Serialize;
use sim_conntrack::{EventKind, Filter, Status, Sysctls};
use sim_core::{EventQueue, IfName, Packet, SimDuration, SimRng, SimTime, L4};
use sim_netfilter::netns::{Egress, Fate, IcmpRateLimit, Ingress, Netns, NetnsConfig, Prefix};
use sim_netfilter::RestoreMemo;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

pub mod capture;
mod changes;
mod expect;
mod inject;
mod network;
mod pcap_client;
pub mod record;
pub mod sink;
mod tally;
mod timeline;

pub use capture::{CapturePoint, CaptureSink, PcapDir};
pub use expect::{chi_square_uniform, ClientFigures, UNIFORMITY_SIGNIFICANCE};
pub use inject::{CleanupTally, Origin, Sighting, INJECTED_TAG};
pub use pcap_client::{pcap_tag, PCAP_TAG};
pub use record::{CtRecord, DumpRecord, EndRecord, StartRecord, Summary, JSON_SCHEMA_VERSION};
pub use sink::{Collect, EventSink, JsonLinesSink, TextSink};
pub use timeline::{TimelineEvent, What};

/// Most events one run may process before it stops with an error (a runaway guard).
pub const MAX_EVENTS_PER_RUN: u64 = 500_000_000;

/// Where a packet is handed next.
#[derive(Debug, Clone)]
enum Dest {
    /// Into a node's namespace, received on an interface from a sender (for captures).
    NodeIn(usize, IfName, capture::Hop),
    /// Into a node's namespace from a local process (OUTPUT).
    NodeOut(usize),
    /// To a node's own sockets (after INPUT).
    NodeStack(usize),
    /// To a pod (by index), through its veth.
    Pod(usize),
    /// To a host.
    Host(usize),
}

#[derive(Debug, Clone)]
enum Ev {
    Deliver(Dest, Packet),
    ServerWake(Machine),
    ClientWake(usize),
    CtWake(usize),
    Action(usize),
    PodTimer {
        pod: usize,
        generation: u64,
        what: PodTimer,
    },
    SliceSync,
    /// kube-proxy instances see a batch of EndpointSlice changes.
    Watch(usize),
    /// A kube-proxy instance's timer.
    ProxyTimer(usize),
    Recreate(usize),
    /// A pcap client's packet (client, index).
    PcapSend(usize, usize),
}

/// EndpointSlice changes delivered to every kube-proxy at once.
#[derive(Debug, Clone, Default)]
struct WatchBatch {
    upserts: Vec<EndpointSlice>,
    deletes: Vec<(String, String)>,
    /// Services created or changed.
    services: Vec<crate::k8s::Service>,
    /// Services deleted (namespace, name).
    service_deletes: Vec<(String, String)>,
}

/// Who has an address on the node network.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Owner {
    Node(usize),
    Host(usize),
    /// The network's router (every node's default gateway).
    Router,
}

#[derive(Debug, Clone, Copy)]
enum PodTimer {
    SetReady(bool),
    Restart,
    Gone,
}

/// A machine that runs applications.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Machine {
    Node(usize),
    Host(usize),
    /// A pod, by index.
    Pod(usize),
}

#[derive(Debug, Clone)]
enum Server {
    Udp(UdpServer),
    Tcp(Box<TcpServer>),
}

/// A stack's servers by (protocol, port), in that order: a sorted list, as a stack has one
/// or two (a tree would give each of a big cluster's pods a node of eleven).
#[derive(Debug, Clone, Default)]
struct Servers(Vec<((u8, u16), Server)>);

impl Servers {
    fn insert(&mut self, key: (u8, u16), srv: Server) {
        match self.0.binary_search_by_key(&key, |(k, _)| *k) {
            Ok(i) => self.0[i].1 = srv,
            Err(i) => self.0.insert(i, (key, srv)),
        }
    }
    fn get_mut(&mut self, key: &(u8, u16)) -> Option<&mut Server> {
        let i = self.0.binary_search_by_key(key, |(k, _)| *k).ok()?;
        Some(&mut self.0[i].1)
    }
    fn contains_key(&self, key: &(u8, u16)) -> bool {
        self.0.binary_search_by_key(key, |(k, _)| *k).is_ok()
    }
    fn values(&self) -> impl Iterator<Item = &Server> {
        self.0.iter().map(|(_, s)| s)
    }
    fn values_mut(&mut self) -> impl Iterator<Item = &mut Server> {
        self.0.iter_mut().map(|(_, s)| s)
    }
    fn len(&self) -> usize {
        self.0.len()
    }
}

impl IntoIterator for Servers {
    type Item = ((u8, u16), Server);
    type IntoIter = std::vec::IntoIter<((u8, u16), Server)>;
    fn into_iter(self) -> Self::IntoIter {
        self.0.into_iter()
    }
}

#[derive(Debug, Clone, Default)]
struct Stack {
    servers: Servers,
    wake: Option<SimTime>,
    /// The ICMP error rate limit of a pod's or host's own kernel namespace (a node's
    /// stack uses its `Netns`'s, shared with what its rules send).
    icmp: IcmpRateLimit,
    /// How this kernel picks the source ports of TCP `connect()` (`table_perturb`).
    connect: ConnectPorts,
    /// The identifiers of its ping sockets (`ping_port_rover`).
    ping_idents: Option<PingIdents>,
}

impl Stack {
    fn build(apps: &[AppDef], seed: u64, label: &str) -> Stack {
        let mut s = Stack {
            connect: ConnectPorts::new(seed, label),
            ping_idents: Some(PingIdents::new(seed, label)),
            ..Stack::default()
        };
        for a in apps {
            match *a {
                AppDef::UdpServer {
                    port,
                    service_time,
                    reply,
                } => {
                    s.servers.insert(
                        (17, port),
                        Server::Udp(UdpServer::with_reply(port, service_time, reply)),
                    );
                }
                AppDef::TcpServer {
                    port,
                    service_time,
                    close_after,
                } => {
                    let mut srv = TcpServer::new(
                        port,
                        service_time,
                        SimRng::derive(seed, &format!("{label}/tcp{port}/isn")),
                    );
                    srv.close_after = close_after;
                    s.servers.insert((6, port), Server::Tcp(Box::new(srv)));
                }
            }
        }
        s
    }
    fn poll_timeout(&self) -> Option<SimTime> {
        self.servers
            .values()
            .filter_map(|s| match s {
                Server::Udp(u) => u.poll_timeout(),
                Server::Tcp(t) => t.poll_timeout(),
            })
            .min()
    }
}

#[derive(Debug, Clone)]
enum ClientApp {
    Udp(Box<UdpClient>),
    Tcp(Box<TcpClient>),
    TcpSession(Box<TcpSessionClient>),
    Ping(Box<PingClient>),
}

impl ClientApp {
    fn poll_timeout(&self) -> Option<SimTime> {
        match self {
            ClientApp::Udp(c) => c.poll_timeout(),
            ClientApp::Tcp(c) => c.poll_timeout(),
            ClientApp::TcpSession(c) => c.poll_timeout(),
            ClientApp::Ping(c) => c.poll_timeout(),
        }
    }
    fn records(&self) -> &[QueryRecord] {
        match self {
            ClientApp::Udp(c) => c.records(),
            ClientApp::Tcp(c) => c.records(),
            ClientApp::TcpSession(c) => c.records(),
            ClientApp::Ping(c) => c.records(),
        }
    }
    fn take_finished(&mut self) -> Vec<QueryRecord> {
        match self {
            ClientApp::Udp(c) => c.take_finished(),
            ClientApp::Tcp(c) => c.take_finished(),
            ClientApp::TcpSession(c) => c.take_finished(),
            ClientApp::Ping(c) => c.take_finished(),
        }
    }
    fn owns(&self, proto: u8, port: u16) -> bool {
        match self {
            ClientApp::Udp(c) => proto == 17 && c.binds(port),
            ClientApp::Tcp(c) => proto == 6 && c.binds(port),
            ClientApp::TcpSession(c) => proto == 6 && c.binds(port),
            ClientApp::Ping(c) => proto == 1 && c.ident() == port,
        }
    }
    fn bound_ports(&self) -> BTreeSet<u16> {
        match self {
            ClientApp::Udp(c) => c.bound_ports(),
            ClientApp::Tcp(c) => c.bound_ports(),
            ClientApp::TcpSession(c) => c.bound_ports(),
            ClientApp::Ping(c) => [c.ident()].into(),
        }
    }
    fn proto(&self) -> u8 {
        match self {
            ClientApp::Udp(_) => 17,
            ClientApp::Tcp(_) | ClientApp::TcpSession(_) => 6,
            ClientApp::Ping(_) => 1,
        }
    }
}

struct ClientRt {
    def: ClientDef,
    machine: Machine,
    ip: IpAddr,
    app: ClientApp,
    wake: Option<SimTime>,
    /// `app.poll_timeout()` as of the app's last change: every call into the app that can
    /// change it ends in [`Simulation::arm_client`], which sets this. A wake-up that finds
    /// nothing due (a deadline whose query was answered meanwhile) reads it instead of the
    /// app, whose state is elsewhere in memory.
    due: Option<SimTime>,
}

/// A route as [`Netns::add_routes`] takes it: destination, gateway, device.
type RouteSpec = (Prefix, Option<IpAddr>, IfName);

/// A hash map with fixed keys (SipHash keyed with zeros), for maps that are only looked up,
/// never iterated: nothing depends on the OS's randomness, and no order reaches any output.
type LookupMap<K, V> =
    std::collections::HashMap<K, V, std::hash::BuildHasherDefault<std::hash::DefaultHasher>>;

type VethMap = LookupMap<IfName, usize>;

struct NodeRt {
    def: NodeDef,
    netns: Netns,
    stack: Stack,
    /// Pod veths → pod index: looked up for every packet a node hands to a pod, never
    /// iterated (a hash of fixed keys: the same in every run).
    veths: VethMap,
    ct_wake: Option<SimTime>,
}

struct PodRt {
    /// `namespace/name`.
    key: String,
    state: PodState,
    stack: Stack,
    veth: IfName,
    ips: BTreeSet<IpAddr>,
}

/// The verdict of one expectation.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ExpectResult {
    /// Name.
    pub name: String,
    /// Line in the scenario file.
    pub line: u64,
    /// When checked.
    pub at: String,
    /// Passed.
    pub passed: bool,
    /// What was seen (and what was expected, when it failed).
    pub detail: String,
}

/// A packet that reached an endpoint pod from a client.
#[derive(Debug, Clone)]
struct Hit {
    at: SimTime,
    pod: usize,
    ip: IpAddr,
    client: usize,
    src: SocketAddr,
    proto: u8,
}

/// Options of a run.
#[derive(Default)]
pub struct RunOptions {
    /// Keep the whole timeline in [`RunResult::timeline`] (memory grows with the run: for
    /// tests and short runs; `nfsim run` streams it to sinks instead, see
    /// [`SimulationBuilder::sink`]). With no sink and this off (benchmarks), no event is
    /// even formatted.
    pub record_timeline: bool,
    /// Include conntrack events in the timeline.
    pub conntrack_events: bool,
    /// Called now and then with (now, end) to show progress.
    pub progress: Option<Box<dyn FnMut(SimTime, SimTime)>>,
}

/// Builds a [`Simulation`] with options beyond [`RunOptions`]:
///
/// ```no_run
/// use nfsim::cluster::sim::{RunOptions, Simulation};
/// use nfsim::kubeproxy::V132;
/// # let scenario = nfsim::scenario::load_file("scenarios/stale-dns-udp.yaml").unwrap();
/// let sim = Simulation::builder(scenario)
///     .options(RunOptions::default())
///     .cleanup(|_node| Box::new(V132::default()))
///     .build()
///     .unwrap();
/// let result = sim.finish().unwrap();
/// ```
pub struct SimulationBuilder {
    sc: Scenario,
    opts: RunOptions,
    cleanup: Option<CleanupFactory>,
    one_kube_proxy_per_node: bool,
    sinks: Vec<Box<dyn EventSink>>,
    capture: Option<Box<dyn CaptureSink>>,
    keep_queries: bool,
}

impl SimulationBuilder {
    /// Timeline, conntrack events and progress options.
    pub fn options(mut self, opts: RunOptions) -> SimulationBuilder {
        self.opts = opts;
        self
    }

    /// Plugs a stale-conntrack cleanup strategy of your own into every node's kube-proxy,
    /// instead of the one the scenario's `kubeProxy.release` selects: `make(node_name)` is
    /// called once per node, in scenario order, and the strategy it returns runs after each
    /// successful sync of that node's kube-proxy, with the service and endpoint maps before
    /// and after the sync and the node's conntrack table behind
    /// [`crate::kubeproxy::ConntrackOps`] (list, delete by filter).
    pub fn cleanup(
        mut self,
        make: impl FnMut(&str) -> Box<dyn crate::kubeproxy::ConntrackCleanup> + 'static,
    ) -> SimulationBuilder {
        self.cleanup = Some(Box::new(make));
        self
    }

    /// Runs one kube-proxy per node even where several nodes' rules are identical (by
    /// default such nodes share one instance, with the same results; see [`super::proxy`]).
    pub fn one_kube_proxy_per_node(mut self, on: bool) -> SimulationBuilder {
        self.one_kube_proxy_per_node = on;
        self
    }

    /// Adds a sink: every timeline event is handed to it the moment it happens (see
    /// [`sink`]), whether or not [`RunOptions::record_timeline`] also keeps it. Sinks are
    /// called in the order they were added.
    pub fn sink(mut self, sink: Box<dyn EventSink>) -> SimulationBuilder {
        self.sinks.push(sink);
        self
    }

    /// Captures every packet on every node's `eth0` and pod veth, as `tcpdump -i` there
    /// would (see [`capture`]): each capture point is opened on `sink` as it appears, and
    /// each frame handed to it as it passes. A sink error stops the run, as an event sink's
    /// does.
    pub fn capture(mut self, sink: Box<dyn CaptureSink>) -> SimulationBuilder {
        self.capture = Some(sink);
        self
    }

    /// Keeps every query record for the whole run, for [`Simulation::client_records`]
    /// (memory then grows with the run). By default a client's finished queries become
    /// running totals as the run goes, and only those still in flight (and after) are kept.
    pub fn keep_queries(mut self, keep: bool) -> SimulationBuilder {
        self.keep_queries = keep;
        self
    }

    /// Builds the cluster at time 0.
    pub fn build(self) -> Result<Simulation, SimError> {
        Simulation::build(self)
    }
}

/// Why a run stopped with an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A node's network namespace refused its configuration (a sysctl, an interface, a
    /// route).
    #[error("node {node}: {message}")]
    Netns {
        /// Node.
        node: String,
        /// What was refused.
        message: String,
    },
    /// [`MAX_EVENTS_PER_RUN`] was reached.
    #[error("more than {MAX_EVENTS_PER_RUN} events: the scenario runs away (MAX_EVENTS_PER_RUN)")]
    TooManyEvents,
    /// An unknown node name.
    #[error("unknown node {0:?}")]
    UnknownNode(String),
    /// `nfsim trace` inside a scenario: what it was asked cannot be set up.
    #[error("{0}")]
    Trace(String),
    /// A node's external reconciler process misbehaved (`kubeProxy.cleanup`): the message
    /// names the command, the node, the time and what was wrong.
    #[error("{0}")]
    Reconciler(String),
    /// A sink added with [`SimulationBuilder::sink`] could not write (a closed pipe, a full disk): the run
    /// stopped there.
    #[error("{message}")]
    Output {
        /// The kind of the I/O error ([`std::io::ErrorKind::BrokenPipe`] for a closed pipe).
        kind: std::io::ErrorKind,
        /// The I/O error's text.
        message: String,
    },
}

/// The running cluster.
pub struct Simulation {
    sc: Scenario,
    now: SimTime,
    end: SimTime,
    queue: EventQueue<Ev>,
    nodes: Vec<NodeRt>,
    owners: BTreeMap<IpAddr, Owner>,
    groups: Vec<ProxyGroup>,
    watches: Vec<Option<WatchBatch>>,
    hosts: Vec<(HostDef, Stack)>,
    /// Pods by index (a recreated pod keeps its index); `pod_ids` maps keys to indices.
    pods: Vec<PodRt>,
    pod_ids: BTreeMap<String, usize>,
    clients: Vec<ClientRt>,
    clients_by_ip: BTreeMap<IpAddr, Vec<usize>>,
    /// The ports clients have bound, by (address, protocol, port), with the clients holding
    /// each (ascending; almost always one): kept up to date from [`Outbox::ports`], so a
    /// send's port draw and a packet's delivery cost one hash lookup. Never iterated.
    client_ports: LookupMap<(IpAddr, u8, u16), Vec<usize>>,
    /// While the scenario's initial pods are added: each node's pod routes, added in one
    /// batch per node once they all are ([`Netns::add_routes`]; one at a time, each /32 went
    /// in front of the node's thousand routes to other nodes).
    pending_pod_routes: Option<Vec<Vec<RouteSpec>>>,
    slices: Vec<EndpointSlice>,
    slice_sync_pending: bool,
    timeline: Vec<TimelineEvent>,
    /// Where events go as they happen.
    sinks: Vec<Box<dyn EventSink>>,
    /// Whether events are wanted at all (a sink, or `record_timeline`).
    recording: bool,
    /// The first error a sink returned; the run stops at the next event.
    output_error: Option<std::io::Error>,
    /// What the summary and the expectations keep of the packets and queries so far.
    tally: tally::Tally,
    /// Whether every query record is kept ([`SimulationBuilder::keep_queries`]).
    keep_queries: bool,
    results: Vec<ExpectResult>,
    checks: Vec<(SimTime, usize)>,
    next_check: usize,
    opts: RunOptions,
    events_processed: u64,
    veth_counter: u64,
    recreates: Vec<PodDef>,
    /// kube-proxy's settings on each node (`kubeProxy` events change them).
    kp_settings: Vec<KubeProxySettings>,
    /// Whether each kube-proxy instance runs (`kubeProxy: {action: stop}` stops one).
    proxy_running: Vec<bool>,
    /// The user's cleanup factory, for the processes `kubeProxy` events start.
    cleanup_factory: Option<CleanupFactory>,
    /// Pods a `scale` event removed, in order, to bring back when it scales up again.
    scaled_down: Vec<PodDef>,
    /// The egress buffer `node_kernel` lends to `Netns::process_into`, reused from packet to
    /// packet (a packet that makes a node send another one through a node on the way takes
    /// a fresh buffer).
    egress: Vec<Egress>,
    /// Packets injected so far ([`Simulation::inject`]).
    injected: u32,
    /// What was seen of them.
    sightings: Vec<Sighting>,
    /// What the cleanups did, summed over the run.
    cleanup_tally: CleanupTally,
    /// The first error a reconciler reported; the run stops at once.
    cleanup_tally_error: Option<String>,
    /// Packet captures, when asked for ([`SimulationBuilder::capture`]).
    tap: Option<capture::Tap>,
    /// The pcap clients' senders, ports and counts.
    pcap: pcap_client::PcapRt,
}

fn eth0() -> IfName {
    IfName::new("eth0").unwrap_or_else(|_| unreachable!("constant name"))
}

fn cidr_prefix(c: &crate::k8s::Cidr) -> Prefix {
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
    for n in nodes {
        if n.address.is_ipv4() == addr.is_ipv4() {
            let common = (bits(n.address) ^ bits(addr)).leading_zeros().min(width) as u8;
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
        .map(|n| n.address)
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

/// Builds node `i`'s namespace: sysctls, `eth0`, the routes to the other nodes' pod CIDRs
/// and the default route (see the module documentation).
/// Node `i`'s namespace, with room in its routing table for `pods` pod routes.
fn node_netns(sc: &Scenario, i: usize, pods: usize) -> Result<Netns, SimError> {
    let n = &sc.nodes[i];
    let err = |message: String| SimError::Netns {
        node: n.name.clone(),
        message,
    };
    let mut sysctls = Sysctls::default();
    let icmp = |k: &String| sim_netfilter::netns::ICMP_SYSCTLS.contains(&k.as_str());
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
    for (k, v) in n.sysctls.iter().filter(|(k, _)| icmp(k)) {
        ns.set_sysctl(k, &v.to_string())
            .map_err(|e| err(e.to_string()))?;
    }
    let len = node_network_len(n.address, &sc.nodes);
    // eth0 with its secondary addresses; other interfaces with theirs.
    let mut by_dev: BTreeMap<String, Vec<(IpAddr, u8)>> = BTreeMap::new();
    by_dev.insert("eth0".into(), vec![(n.address, len)]);
    for (dev, a, l) in &n.extra_addresses {
        let l = if dev == "eth0" && *l == 0 { len } else { *l };
        by_dev.entry(dev.clone()).or_default().push((*a, l));
    }
    for (dev, addrs) in &by_dev {
        let name = IfName::new(dev).map_err(|e| err(format!("interface {dev}: {e}")))?;
        ns.add_interface(name, addrs)
            .map_err(|e| err(e.to_string()))?;
    }
    // Every other node's pod CIDR via that node, added at once (one index rebuild, not one
    // per node).
    let pod_routes: Vec<_> = sc
        .nodes
        .iter()
        .enumerate()
        .filter(|&(j, m)| i != j && m.address.is_ipv4() == m.pod_cidr.addr().is_ipv4())
        .map(|(_, m)| (cidr_prefix(&m.pod_cidr), Some(m.address), eth0()))
        .collect();
    // These, the default route and a route per pod: sized once (a node of a 1,000-node
    // cluster would otherwise double its table to 2,048 routes).
    ns.reserve_routes(pod_routes.len() + 1 + pods);
    ns.add_routes(&pod_routes).map_err(|e| err(e.to_string()))?;
    // Without a free address for the router, the default route is on-link: the next hop is
    // the destination itself.
    ns.add_route(
        Prefix::default_for(n.address.is_ipv4()),
        router_address(n.address, sc),
        eth0(),
    )
    .map_err(|e| err(e.to_string()))?;
    Ok(ns)
}

/// The node's addresses `--nodeport-addresses` selects (`GetNodeIPs` over the node's
/// interface addresses: `lo`'s 127.0.0.1, `eth0`'s, the others', and the pod CIDR's first
/// address that its pod veths hold); `None` when it matches every address (empty list or a
/// zero CIDR). `primary` is the node's `address`/32 (kube-proxy's `server.go`).
fn node_port_ips(n: &NodeDef, list: &[NodePortAddress]) -> Option<Vec<IpAddr>> {
    if list.is_empty() {
        return None;
    }
    let mut cidrs = Vec::new();
    for a in list {
        match a {
            NodePortAddress::Primary => {
                let len = if n.address.is_ipv4() { 32 } else { 128 };
                cidrs.push(
                    crate::k8s::Cidr::new(n.address, len)
                        .unwrap_or_else(|| unreachable!("a host prefix is valid")),
                );
            }
            NodePortAddress::Cidr(c) if c.prefix_len() == 0 && c.addr().is_ipv4() => return None,
            NodePortAddress::Cidr(c) => cidrs.push(*c),
        }
    }
    let mut addrs = vec![IpAddr::V4(std::net::Ipv4Addr::LOCALHOST), n.address];
    addrs.extend(n.extra_addresses.iter().map(|(_, a, _)| *a));
    addrs.push(pod_gateway(&n.pod_cidr));
    Some(
        addrs
            .into_iter()
            .filter(|a| a.is_ipv4() && cidrs.iter().any(|c| c.contains(*a)))
            .collect(),
    )
}

/// kube-proxy's configuration for node `i` with settings `kp`.
fn proxier_config(sc: &Scenario, kp: &KubeProxySettings, i: usize) -> ProxierConfig {
    let n = &sc.nodes[i];
    let mut cfg = ProxierConfig::new(&n.name, n.address, n.pod_cidr);
    cfg.local_detector = match &kp.detect_local {
        None => LocalDetector::ClusterCidr(kp.cluster_cidr.unwrap_or(n.pod_cidr)),
        Some(DetectLocal::ClusterCidr) => match kp.cluster_cidr {
            Some(c) => LocalDetector::ClusterCidr(c),
            // kube-proxy warns and uses the no-op detector.
            None => LocalDetector::None,
        },
        Some(DetectLocal::NodeCidr) => LocalDetector::ClusterCidr(n.pod_cidr),
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
    // In nftables mode an unset `nodePortAddresses` means `primary` (kube-proxy's
    // `platformApplyDefaults`, cmd/kube-proxy/app/server_linux.go).
    cfg.node_port_addresses = if kp.mode == ProxyMode::Nftables && kp.node_port_addresses.is_empty()
    {
        node_port_ips(n, &[NodePortAddress::Primary])
    } else {
        node_port_ips(n, &kp.node_port_addresses)
    };
    // The ServiceCIDRs kube-proxy watches: the cluster's one range (`serviceCIDR`, or its
    // default), which nftables mode turns into `Drop traffic to unallocated ClusterIPs`.
    cfg.service_cidrs = vec![sc.service_cidr];
    // kube-proxy leaves out its INVALID drop rule when conntrack is liberal.
    cfg.conntrack_tcp_be_liberal =
        n.sysctls.get("net.netfilter.nf_conntrack_tcp_be_liberal") == Some(&1);
    cfg
}

impl Simulation {
    /// Builds the cluster at time 0: nodes and their namespaces, pods, hosts, clients, the
    /// first EndpointSlices, and kube-proxy (whose first sync on every node is due at 0).
    pub fn new(sc: Scenario, opts: RunOptions) -> Result<Simulation, SimError> {
        Simulation::builder(sc).options(opts).build()
    }

    /// A builder, for the options [`Simulation::new`] does not take.
    pub fn builder(sc: Scenario) -> SimulationBuilder {
        SimulationBuilder {
            sc,
            opts: RunOptions::default(),
            cleanup: None,
            one_kube_proxy_per_node: false,
            sinks: Vec::new(),
            capture: None,
            keep_queries: false,
        }
    }

    fn build(b: SimulationBuilder) -> Result<Simulation, SimError> {
        let SimulationBuilder {
            sc,
            opts,
            mut cleanup,
            one_kube_proxy_per_node,
            sinks,
            capture,
            keep_queries,
        } = b;
        let seed = sc.seed;
        let mut nodes = Vec::new();
        let mut owners = BTreeMap::new();
        let mut pods_on = vec![0usize; sc.nodes.len()];
        for p in &sc.pods {
            if let Some(c) = pods_on.get_mut(p.node) {
                *c += 1;
            }
        }
        for (i, n) in sc.nodes.iter().enumerate() {
            owners.insert(n.address, Owner::Node(i));
            for (dev, a, _) in &n.extra_addresses {
                if dev == "eth0" {
                    owners.insert(*a, Owner::Node(i));
                }
            }
            nodes.push(NodeRt {
                stack: Stack::build(&n.apps, seed, &format!("node/{}", n.name)),
                def: n.clone(),
                netns: node_netns(&sc, i, pods_on[i])?,
                veths: VethMap::default(),
                ct_wake: None,
            });
        }
        for (i, h) in sc.hosts.iter().enumerate() {
            owners.insert(h.address, Owner::Host(i));
            for a in &h.extra_addresses {
                owners.insert(*a, Owner::Host(i));
            }
        }
        for n in &sc.nodes {
            if let Some(r) = router_address(n.address, &sc) {
                owners.entry(r).or_insert(Owner::Router);
            }
        }
        let hosts = sc
            .hosts
            .iter()
            .map(|h| {
                (
                    h.clone(),
                    Stack::build(&h.apps, seed, &format!("host/{}", h.name)),
                )
            })
            .collect();
        let end = SimTime::ZERO + sc.duration;
        let mut checks: Vec<(SimTime, usize)> = sc
            .expectations
            .iter()
            .enumerate()
            .map(|(i, e)| (e.at.unwrap_or(end), i))
            .collect();
        checks.sort();
        // kube-proxy: one instance per node, or per set of nodes with identical rules.
        let timing = SyncTiming {
            min_sync_period: sc.kube_proxy.min_sync_period,
            sync_period: sc.kube_proxy.sync_period,
            ..SyncTiming::default()
        };
        // Events that act on one node's kube-proxy need one instance per node; Services that
        // events create or change count as much as those at the start.
        let per_node_events = sc.events.iter().any(|e| {
            matches!(
                e.action,
                Action::KubeProxy { .. } | Action::RebootNode { .. }
            )
        });
        let mut all_services = sc.services.clone();
        for e in &sc.events {
            if let Action::UpsertService { service, .. } = &e.action {
                all_services.push((**service).clone());
            }
        }
        let share = cleanup.is_none()
            && sc.kube_proxy.cleanup.is_none()
            && !one_kube_proxy_per_node
            && !per_node_events
            && sc.nodes.iter().all(|n| n.state.rules.is_none())
            && rules_are_node_independent(&all_services);
        let mut groups: Vec<ProxyGroup> = Vec::new();
        for i in 0..sc.nodes.len() {
            let cfg = proxier_config(&sc, &sc.kube_proxy, i);
            if share {
                if let Some(g) = groups
                    .iter_mut()
                    .find(|g| same_rendering(g.proxy.config(), &cfg))
                {
                    g.nodes.push(i);
                    continue;
                }
            }
            let strategy = match cleanup.as_mut() {
                Some(make) => make(&sc.nodes[i].name),
                None => super::proxy::settings_cleanup(&sc.kube_proxy, &sc.nodes[i].name),
            };
            groups.push(ProxyGroup {
                proxy: KubeProxy::new(cfg, timing, strategy, SimTime::ZERO),
                nodes: vec![i],
                wake: None,
                memo: RestoreMemo::new(),
            });
        }
        let mut sim = Simulation {
            now: SimTime::ZERO,
            end,
            queue: EventQueue::new(),
            nodes,
            owners,
            groups,
            watches: Vec::new(),
            hosts,
            pods: Vec::new(),
            pod_ids: BTreeMap::new(),
            clients: Vec::new(),
            clients_by_ip: BTreeMap::new(),
            client_ports: LookupMap::default(),
            pending_pod_routes: None,
            slices: Vec::new(),
            slice_sync_pending: false,
            timeline: Vec::new(),
            recording: opts.record_timeline || !sinks.is_empty(),
            sinks,
            output_error: None,
            tally: tally::Tally::new(&sc.expectations),
            keep_queries,
            results: Vec::new(),
            checks,
            next_check: 0,
            opts,
            events_processed: 0,
            veth_counter: 0,
            recreates: Vec::new(),
            kp_settings: vec![sc.kube_proxy.clone(); sc.nodes.len()],
            proxy_running: Vec::new(),
            cleanup_factory: cleanup,
            scaled_down: Vec::new(),
            egress: Vec::new(),
            injected: 0,
            sightings: Vec::new(),
            cleanup_tally: CleanupTally::default(),
            cleanup_tally_error: None,
            tap: capture.map(|sink| capture::Tap::new(sink, &sc)),
            pcap: pcap_client::PcapRt::default(),
            sc,
        };
        sim.tap_nodes();
        sim.proxy_running = vec![true; sim.groups.len()];
        // kube-proxy creates its nfacct counters at start-up (`nfacct add`) when asked to.
        for n in 0..sim.nodes.len() {
            sim.ensure_nfacct(n);
        }
        // A saved node state (`nodes[].state`), then the nodes' own rules, there before
        // kube-proxy's first sync.
        for n in 0..sim.nodes.len() {
            sim.load_node_state(n)?;
            for (rules, noflush) in sim.nodes[n].def.extra_rules.clone() {
                sim.node_restore(n, &rules, noflush);
            }
        }
        // A kube-proxy starting on a node with rules finds the chains there
        // (`GetChainsFromTable` of `iptables-save -t nat`), as on a restart: its first sync
        // replaces its own chains and deletes stale service chains.
        for g in 0..sim.groups.len() {
            let first = sim.groups[g].nodes[0];
            if sim.nodes[first].def.state.rules.is_some() {
                let chains = sim.nat_chain_names(first);
                sim.groups[g].proxy.set_existing_nat_chains(chains);
            }
        }
        for s in sim.sc.services.clone() {
            sim.log_service_allocation(&s);
        }
        sim.pending_pod_routes = Some(vec![Vec::new(); sim.nodes.len()]);
        for p in sim.sc.pods.clone() {
            sim.add_pod(p, false)?;
        }
        // Nothing has routed a packet yet: the routes go in now, where adding them one by
        // one would have put them.
        for (n, routes) in sim
            .pending_pod_routes
            .take()
            .into_iter()
            .flatten()
            .enumerate()
        {
            let node = &mut sim.nodes[n];
            node.netns
                .add_routes(&routes)
                .map_err(|e| SimError::Netns {
                    node: node.def.name.clone(),
                    message: format!("pod routes: {e}"),
                })?;
        }
        for (i, c) in sim.sc.clients.clone().into_iter().enumerate() {
            sim.add_client(i, c);
        }
        sim.pcap_start();
        for (i, e) in sim.sc.events.iter().enumerate() {
            sim.queue.push(e.at, Ev::Action(i));
        }
        // Initial objects, seen by every kube-proxy before its first sync at time 0.
        sim.slices = match &sim.sc.endpoint_slices {
            Some(s) => s.clone(),
            None => derive_slices(&sim.sc.services, sim.pods.iter().map(|p| &p.state)),
        };
        for g in 0..sim.groups.len() {
            let kp = &mut sim.groups[g].proxy;
            for s in &sim.sc.services {
                kp.upsert_service(SimTime::ZERO, s.clone());
            }
            for s in &sim.slices {
                kp.upsert_endpoint_slice(SimTime::ZERO, s.clone());
            }
            sim.arm_proxy(g);
        }
        Ok(sim)
    }

    /// The scenario.
    pub fn scenario(&self) -> &Scenario {
        &self.sc
    }

    /// The current simulated time.
    pub fn now(&self) -> SimTime {
        self.now
    }

    fn log(&mut self, what: What) {
        if !self.recording {
            return;
        }
        let e = TimelineEvent {
            t_ns: self.now.as_nanos(),
            time: self.now.hms().to_string(),
            what,
        };
        if self.output_error.is_none() {
            for s in &mut self.sinks {
                if let Err(err) = s.event(&e) {
                    self.output_error = Some(err);
                    break;
                }
            }
        }
        if self.opts.record_timeline {
            self.timeline.push(e);
        }
    }

    /// The first sink error, as the run's error.
    fn output_status(&mut self) -> Result<(), SimError> {
        if let Some(e) = self.cleanup_tally_error.take() {
            return Err(SimError::Reconciler(e));
        }
        match self.output_error.take() {
            None => Ok(()),
            Some(e) => Err(SimError::Output {
                kind: e.kind(),
                message: e.to_string(),
            }),
        }
    }

    /// Shows the cluster IP allocated to Service `s`, if the file left it out.
    fn log_service_allocation(&mut self, s: &crate::k8s::Service) {
        let Some(ip) = s.ipv4_cluster_ip() else {
            return;
        };
        if let Some(from) = self.sc.allocated.get(&(format!("service {}", s.key()), ip)) {
            let change = format!("assigned cluster IP {ip} (from {from})");
            self.log(What::Change {
                subject: format!("service {}", s.key()),
                change,
            });
        }
    }

    /// Creates a pod: its veth on the node (holding the pod CIDR's first address) with a /32
    /// route to the pod's IP, and its servers.
    fn add_pod(&mut self, def: PodDef, announce: bool) -> Result<(), SimError> {
        let key = def.key();
        if let Some(from) = self.sc.allocated.get(&(format!("pod {key}"), def.ip)) {
            let change = format!("assigned {} (from {from})", def.ip);
            self.log(What::Pod {
                pod: key.clone(),
                change,
            });
        }
        let node = def.node;
        self.veth_counter += 1;
        // Linux names are at most 15 bytes: "veth" and 8 hex digits.
        let veth = IfName::new(&format!("veth{:08x}", self.veth_counter & 0xffff_ffff))
            .unwrap_or_else(|_| unreachable!("12 bytes"));
        let n = &mut self.nodes[node];
        let err = |e: sim_netfilter::netns::NetnsError| SimError::Netns {
            node: n.def.name.clone(),
            message: format!("pod {key}: {e}"),
        };
        let gw = pod_gateway(&n.def.pod_cidr);
        let host_len = if gw.is_ipv4() { 32 } else { 128 };
        n.netns
            .add_interface(veth, &[(gw, host_len)])
            .map_err(err)?;
        match &mut self.pending_pod_routes {
            Some(pending) => pending[node].push((Prefix::host(def.ip), None, veth)),
            None => n
                .netns
                .add_route(Prefix::host(def.ip), None, veth)
                .map_err(err)?,
        }
        let id = match self.pod_ids.get(&key) {
            Some(&id) => id,
            None => self.pods.len(),
        };
        n.veths.insert(veth, id);
        let number = self.veth_counter;
        let stack = Stack::build(
            &def.apps,
            self.sc.seed,
            &format!("pod/{key}/{}", self.veth_counter),
        );
        let node_name = n.def.name.clone();
        let old = self.pods.get(id);
        let mut ips = old.map(|p| p.ips.clone()).unwrap_or_default();
        ips.insert(def.ip);
        let generation = old.map(|p| p.state.generation + 1).unwrap_or(0);
        let ready = def.ready;
        let mut state = PodState::new(def.clone(), &node_name);
        state.generation = generation;
        if announce {
            self.log(What::Pod {
                pod: key.clone(),
                change: format!(
                    "created on {node_name} with IP {}{}",
                    def.ip,
                    if ready { "" } else { ", not ready yet" }
                ),
            });
            if !ready {
                let at = self.now + def.probe.success_delay();
                self.queue.push(
                    at,
                    Ev::PodTimer {
                        pod: id,
                        generation,
                        what: PodTimer::SetReady(true),
                    },
                );
            }
        }
        let rt = PodRt {
            key: key.clone(),
            state,
            stack,
            veth,
            ips,
        };
        if id == self.pods.len() {
            self.pods.push(rt);
            self.pod_ids.insert(key, id);
        } else {
            self.pods[id] = rt;
        }
        self.tap_veth(node, veth, number, id);
        if announce {
            self.pod_changed();
        }
        Ok(())
    }

    fn add_client(&mut self, index: usize, def: ClientDef) {
        let (machine, ip) = match &def.placement {
            Placement::Pod(k) => match self.pod_ids.get(k) {
                Some(&id) => (Machine::Pod(id), Some(self.pods[id].state.def.ip)),
                None => return,
            },
            Placement::Host(h) => (Machine::Host(*h), Some(self.hosts[*h].0.address)),
            Placement::Node(n) => (Machine::Node(*n), Some(self.nodes[*n].def.address)),
        };
        let Some(ip) = ip else { return };
        let label = format!("client/{}", def.name);
        let app = match def.kind {
            ClientKind::Udp {
                source_port,
                timeout,
                retries,
                connected,
                one_way,
            } => ClientApp::Udp(Box::new(UdpClient::new(
                UdpClientConfig {
                    index: index as u32,
                    local_ip: ip,
                    dst: def.target,
                    schedule: def.schedule.clone(),
                    source_port,
                    timeout,
                    retries,
                    connected,
                    one_way,
                },
                self.sc.seed,
                &label,
            ))),
            ClientKind::Ping { timeout } => {
                let ident = self
                    .stack_mut(&machine)
                    .and_then(|s| s.ping_idents.as_mut()?.assign())
                    .unwrap_or(1);
                ClientApp::Ping(Box::new(PingClient::new(
                    PingClientConfig {
                        index: index as u32,
                        local_ip: ip,
                        dst: def.target.ip(),
                        schedule: def.schedule.clone(),
                        timeout,
                        ident,
                    },
                    self.sc.seed,
                    &label,
                )))
            }
            ClientKind::Tcp {
                connect_timeout,
                request_timeout,
                connection,
            } => {
                let client = TcpClientConfig {
                    index: index as u32,
                    local_ip: ip,
                    dst: def.target,
                    schedule: def.schedule.clone(),
                    connect_timeout,
                    request_timeout,
                    request_bytes: 100,
                };
                match connection {
                    Some(policy) => ClientApp::TcpSession(Box::new(TcpSessionClient::new(
                        TcpSessionConfig { client, policy },
                        self.sc.seed,
                        &label,
                    ))),
                    None => ClientApp::Tcp(Box::new(TcpClient::new(client, self.sc.seed, &label))),
                }
            }
        };
        self.clients_by_ip.entry(ip).or_default().push(index);
        for p in app.bound_ports() {
            let holders = self.client_ports.entry((ip, app.proto(), p)).or_default();
            if let Err(k) = holders.binary_search(&index) {
                holders.insert(k, index);
            }
        }
        self.clients.push(ClientRt {
            def,
            machine,
            ip,
            app,
            wake: None,
            due: None,
        });
        self.arm_client(index);
    }

    fn arm_client(&mut self, i: usize) {
        let c = &mut self.clients[i];
        c.due = c.app.poll_timeout();
        self.wake_client_when_due(i);
    }

    /// Queues a wake-up of client `i` at its `due` instant unless an earlier one is queued.
    fn wake_client_when_due(&mut self, i: usize) {
        let c = &mut self.clients[i];
        if let Some(t) = c.due {
            if c.wake.is_none_or(|w| t < w) {
                c.wake = Some(t);
                self.queue.push(t.max(self.now), Ev::ClientWake(i));
            }
        }
    }

    fn stack_mut(&mut self, m: &Machine) -> Option<&mut Stack> {
        match m {
            Machine::Node(i) => Some(&mut self.nodes[*i].stack),
            Machine::Host(i) => Some(&mut self.hosts[*i].1),
            Machine::Pod(id) => self.pods.get_mut(*id).map(|p| &mut p.stack),
        }
    }

    fn arm_stack(&mut self, m: &Machine) {
        let now = self.now;
        let Some(s) = self.stack_mut(m) else { return };
        if let Some(t) = s.poll_timeout() {
            if s.wake.is_none_or(|w| t < w || w < now) {
                s.wake = Some(t);
                self.queue.push(t.max(now), Ev::ServerWake(m.clone()));
            }
        }
    }

    fn arm_ct(&mut self, n: usize) {
        let node = &mut self.nodes[n];
        if let Some(t) = node.netns.poll_timeout() {
            if node.ct_wake.is_none_or(|w| t < w || w < self.now) {
                node.ct_wake = Some(t);
                self.queue.push(t.max(self.now), Ev::CtWake(n));
            }
        }
    }

    fn arm_proxy(&mut self, g: usize) {
        let now = self.now;
        let grp = &mut self.groups[g];
        if let Some(t) = grp.proxy.poll_timeout() {
            if grp.wake.is_none_or(|w| t < w || w < now) {
                grp.wake = Some(t);
                self.queue.push(t.max(now), Ev::ProxyTimer(g));
            }
        }
    }

    fn pod_changed(&mut self) {
        if self.sc.endpoint_slices.is_some() || self.slice_sync_pending {
            return;
        }
        self.slice_sync_pending = true;
        self.queue.push(
            self.now + self.sc.control_plane.endpoint_slice_delay,
            Ev::SliceSync,
        );
    }

    fn pod_timer(&mut self, id: usize, after: SimDuration, what: PodTimer) {
        let generation = self.pods[id].state.generation;
        self.queue.push(
            self.now + after,
            Ev::PodTimer {
                pod: id,
                generation,
                what,
            },
        );
    }

    fn set_ready(&mut self, id: usize, ready: bool) {
        let p = &mut self.pods[id];
        if p.state.ready == ready || p.state.phase == Phase::Gone {
            return;
        }
        p.state.ready = ready;
        let key = p.key.clone();
        self.log(What::Pod {
            pod: key,
            change: if ready {
                "Ready".into()
            } else {
                "not Ready".into()
            },
        });
        self.pod_changed();
    }

    /// Pod `id`'s process dies: its UDP sockets and TCP listeners go; the kernel sends a FIN
    /// on each TCP connection and keeps it as an orphan ([`TcpServer::process_exit`]).
    fn kill_process(&mut self, id: usize) {
        let now = self.now;
        let mut out = Outbox::new();
        let old = std::mem::take(&mut self.pods[id].stack);
        for (key, srv) in old.servers {
            if let Server::Tcp(mut t) = srv {
                t.process_exit(now, &mut out);
                if t.has_connections() {
                    self.pods[id].stack.servers.insert(key, Server::Tcp(t));
                }
            }
        }
        let m = Machine::Pod(id);
        self.send_from(&m, out.packets);
        self.arm_stack(&m);
    }

    fn pod_gone(&mut self, id: usize) -> Option<PodDef> {
        if self.pods[id].state.phase == Phase::Gone {
            return None;
        }
        // SIGKILL at the end of the grace period: the FINs leave before the network goes.
        if self.pods[id].state.process_alive {
            self.kill_process(id);
        }
        let p = &mut self.pods[id];
        p.state.phase = Phase::Gone;
        p.state.process_alive = false;
        p.stack = Stack::default();
        let def = p.state.def.clone();
        let veth = p.veth;
        let key = p.key.clone();
        let n = &mut self.nodes[def.node];
        n.netns.remove_route(Prefix::host(def.ip));
        n.veths.remove(&veth);
        self.log(What::Pod {
            pod: key,
            change: format!("gone; IP {} no longer routed", def.ip),
        });
        self.pod_changed();
        Some(def)
    }

    /// Deletes pod `id` (graceful termination, then gone): returns when it will be gone, or
    /// `None` if it was not running.
    fn delete_pod(&mut self, id: usize, grace_period: Option<SimDuration>) -> Option<SimTime> {
        let p = &mut self.pods[id];
        if p.state.phase != Phase::Running {
            return None;
        }
        let grace = grace_period.unwrap_or(p.state.def.grace_period);
        let until = self.now + grace;
        p.state.phase = Phase::Terminating(until);
        p.state.generation += 1;
        let pod = p.key.clone();
        self.log(What::Pod {
            pod,
            change: format!("deleted; terminating with grace period {grace}"),
        });
        self.pod_changed();
        self.pod_timer(id, grace, PodTimer::Gone);
        Some(until)
    }

    fn action(&mut self, i: usize) -> Result<(), SimError> {
        let action = self.sc.events[i].action.clone();
        match action {
            Action::OomKill { pod, restart_after } => {
                let Some(&id) = self.pod_ids.get(&pod) else {
                    return Ok(());
                };
                let p = &mut self.pods[id];
                if !p.state.has_network() {
                    return Ok(());
                }
                // The kill leaves the pod's pending timers alone: a readiness failure due
                // before the kubelet notices the exit still marks it not Ready on time.
                p.state.process_alive = false;
                self.kill_process(id);
                self.log(What::Pod {
                    pod: pod.clone(),
                    change: match restart_after {
                        Some(d) => format!(
                            "OOMKilled; process gone, network stays; restarts in place in {d}"
                        ),
                        None => "OOMKilled; process gone, network stays; no restart".into(),
                    },
                });
                self.pod_timer(
                    id,
                    super::control::CONTAINER_EXIT_DETECTION,
                    PodTimer::SetReady(false),
                );
                if let Some(d) = restart_after {
                    self.pod_timer(id, d, PodTimer::Restart);
                }
            }
            Action::DeletePod {
                pod,
                grace_period,
                recreate,
            } => {
                let Some(&id) = self.pod_ids.get(&pod) else {
                    return Ok(());
                };
                let Some(until) = self.delete_pod(id, grace_period) else {
                    return Ok(());
                };
                if let Some(r) = recreate {
                    let mut def = self.pods[id].state.def.clone();
                    def.ip = r.ip;
                    def.node = r.node;
                    def.ready = false;
                    let at = until + r.after;
                    self.recreates.push(def);
                    self.queue.push(at, Ev::Recreate(self.recreates.len() - 1));
                }
            }
            Action::CreatePod(def) => self.add_pod(*def, true)?,
            other @ (Action::UpsertService { .. }
            | Action::DeleteService { .. }
            | Action::UpsertEndpointSlice(_)
            | Action::DeleteEndpointSlice { .. }
            | Action::Scale { .. }
            | Action::KubeProxy { .. }
            | Action::Conntrack { .. }
            | Action::RebootNode { .. }
            | Action::IptablesRestore { .. }) => self.change(other)?,
            Action::Readiness { pod, ready } => {
                let Some(&id) = self.pod_ids.get(&pod) else {
                    return Ok(());
                };
                let p = &mut self.pods[id];
                p.state.probe_ok = ready;
                let delay = if ready {
                    p.state.def.probe.success_delay()
                } else {
                    p.state.def.probe.failure_delay()
                };
                self.log(What::Pod {
                    pod: pod.clone(),
                    change: format!(
                        "readiness probe now {}",
                        if ready { "succeeds" } else { "fails" }
                    ),
                });
                self.pod_timer(id, delay, PodTimer::SetReady(ready));
            }
        }
        Ok(())
    }
}

/// The outcome of a run.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Timeline events, in order (empty when not recorded).
    pub timeline: Vec<TimelineEvent>,
    /// Expectation verdicts, in check order.
    pub results: Vec<ExpectResult>,
    /// The summary table.
    pub summary: String,
    /// The summary as data (for the JSON lines).
    pub summary_data: Summary,
    /// Events processed.
    pub events: u64,
    /// Each client's figures, in scenario order.
    pub clients: Vec<ClientFigures>,
}

impl RunResult {
    /// Whether every expectation passed.
    pub fn passed(&self) -> bool {
        self.results.iter().all(|r| r.passed)
    }
}

impl Simulation {
    /// Runs every event up to and including `limit` (capped at the scenario's end), checking
    /// the expectations that fall due on the way.
    pub fn run_until(&mut self, limit: SimTime) -> Result<(), SimError> {
        let limit = limit.min(self.end);
        let mut since_progress = 0u32;
        loop {
            let next = self.queue.peek_time().filter(|t| *t <= limit);
            // Checks at T run after every event at T.
            while let Some(&(t, i)) = self.checks.get(self.next_check) {
                if t > limit || next.is_some_and(|n| n <= t) {
                    break;
                }
                self.now = self.now.max(t);
                self.next_check += 1;
                self.check(i);
            }
            let Some(ev) = self.queue.pop_until(limit) else {
                break;
            };
            self.now = ev.at;
            self.events_processed += 1;
            if self.events_processed > MAX_EVENTS_PER_RUN {
                return Err(SimError::TooManyEvents);
            }
            since_progress += 1;
            if since_progress >= 65536 {
                since_progress = 0;
                if let Some(p) = self.opts.progress.as_mut() {
                    p(self.now, self.end);
                }
            }
            self.handle(ev.event)?;
            self.output_status()?;
        }
        self.now = self.now.max(limit);
        self.output_status()
    }

    fn handle(&mut self, ev: Ev) -> Result<(), SimError> {
        match ev {
            Ev::Deliver(d, p) => self.deliver(d, p),
            Ev::ServerWake(m) => {
                let now = self.now;
                let mut out = Outbox::new();
                if let Some(s) = self.stack_mut(&m) {
                    if s.wake.is_some_and(|w| w <= now) {
                        s.wake = None;
                    }
                    for srv in s.servers.values_mut() {
                        match srv {
                            Server::Udp(u) => u.handle_timeout(now, &mut out),
                            Server::Tcp(t) => t.handle_timeout(now, &mut out),
                        }
                    }
                }
                self.send_from(&m, out.packets);
                self.arm_stack(&m);
            }
            Ev::ClientWake(i) => {
                let c = &mut self.clients[i];
                if c.wake.is_some_and(|w| w <= self.now) {
                    c.wake = None;
                }
                debug_assert_eq!(c.due, c.app.poll_timeout(), "client {i}'s due instant");
                if c.due.is_some_and(|t| t <= self.now) {
                    let mut out = Outbox::new();
                    let m = self.clients[i].machine.clone();
                    // The host's connect() port state, lent to the client for this call (only
                    // TCP clients connect(): the others leave it in place, which spares a
                    // placeholder state per wake-up).
                    let tcp = matches!(
                        self.clients[i].app,
                        ClientApp::Tcp(_) | ClientApp::TcpSession(_)
                    );
                    let mut lent = match self.stack_mut(&m) {
                        Some(s) if tcp => Some(std::mem::take(&mut s.connect)),
                        _ => None,
                    };
                    let c = &mut self.clients[i];
                    let (ip, proto) = (c.ip, c.app.proto());
                    let table = &self.client_ports;
                    let busy = |p: u16| table.contains_key(&(ip, proto, p));
                    match &mut c.app {
                        ClientApp::Udp(c) => c.handle_timeout(self.now, &busy, &mut out),
                        ClientApp::Tcp(c) => {
                            let connect = lent.get_or_insert_with(ConnectPorts::default);
                            c.handle_timeout(self.now, &busy, connect, &mut out)
                        }
                        ClientApp::TcpSession(c) => {
                            let connect = lent.get_or_insert_with(ConnectPorts::default);
                            c.handle_timeout(self.now, &busy, connect, &mut out)
                        }
                        ClientApp::Ping(c) => c.handle_timeout(self.now, &mut out),
                    }
                    if let (Some(s), Some(connect)) = (self.stack_mut(&m), lent) {
                        s.connect = connect;
                    }
                    self.client_output(i, out);
                } else {
                    // Nothing due: the app is as it was when last armed.
                    self.wake_client_when_due(i);
                }
            }
            Ev::CtWake(n) => {
                if self.nodes[n].ct_wake.is_some_and(|w| w <= self.now) {
                    self.nodes[n].ct_wake = None;
                }
                self.nodes[n].netns.handle_timeout(self.now);
                self.after_kernel(n);
            }
            Ev::Action(i) => self.action(i)?,
            Ev::PcapSend(i, k) => self.pcap_send(i, k),
            Ev::Recreate(i) => {
                let def = self.recreates[i].clone();
                self.add_pod(def, true)?;
            }
            Ev::PodTimer {
                pod,
                generation,
                what,
            } => {
                if self
                    .pods
                    .get(pod)
                    .is_none_or(|p| p.state.generation != generation)
                {
                    return Ok(());
                }
                match what {
                    PodTimer::SetReady(r) => {
                        // A timer applies only if what it was set for still holds: the
                        // kubelet marks a pod Ready when its process runs and its probe
                        // passes, not Ready otherwise. Several may be pending at once (a
                        // probe failing and an OOM kill): each stands on its own.
                        let p = &self.pods[pod];
                        let ok = p.state.process_alive && p.state.probe_ok;
                        if r == ok {
                            self.set_ready(pod, r);
                        }
                    }
                    PodTimer::Restart => {
                        let p = &mut self.pods[pod];
                        if p.state.phase == Phase::Gone {
                            return Ok(());
                        }
                        p.state.process_alive = true;
                        p.state.generation += 1;
                        let label = format!("pod/{}/restart{}", p.key, p.state.generation);
                        p.stack = Stack::build(&p.state.def.apps, self.sc.seed, &label);
                        let probe_ok = p.state.probe_ok;
                        let delay = if probe_ok {
                            p.state.def.probe.success_delay()
                        } else {
                            p.state.def.probe.failure_delay()
                        };
                        let key = p.key.clone();
                        self.log(What::Pod {
                            pod: key,
                            change: if probe_ok {
                                format!("container restarted in place (same IP); Ready after the probe passes in {delay}")
                            } else {
                                "container restarted in place (same IP); its readiness probe still fails".into()
                            },
                        });
                        self.pod_timer(pod, delay, PodTimer::SetReady(probe_ok));
                    }
                    PodTimer::Gone => {
                        self.pod_gone(pod);
                    }
                }
            }
            Ev::SliceSync => {
                self.slice_sync_pending = false;
                let new = derive_slices(&self.sc.services, self.pods.iter().map(|p| &p.state));
                if new != self.slices {
                    for s in &new {
                        if self.slices.iter().any(|o| o == s) {
                            continue;
                        }
                        let eps: Vec<String> = s
                            .endpoints
                            .iter()
                            .map(|e| {
                                let c = e.conditions;
                                format!(
                                    "{}{}{}{}",
                                    e.addresses
                                        .first()
                                        .map(|a| a.to_string())
                                        .unwrap_or_default(),
                                    if c.is_ready() { "" } else { " (not ready" },
                                    if c.is_ready() {
                                        ""
                                    } else if c.is_serving() {
                                        ", serving"
                                    } else {
                                        ", not serving"
                                    },
                                    if c.is_terminating() {
                                        ", terminating)"
                                    } else if c.is_ready() {
                                        ""
                                    } else {
                                        ")"
                                    },
                                )
                            })
                            .collect();
                        let svc = format!(
                            "{}/{}",
                            s.metadata.namespace,
                            s.service_name().unwrap_or_default()
                        );
                        self.log(What::Endpoints {
                            service: svc,
                            endpoints: if eps.is_empty() {
                                "(none)".into()
                            } else {
                                eps.join(", ")
                            },
                        });
                    }
                    // What kube-proxy's informer will deliver: changed and removed slices.
                    let key =
                        |s: &EndpointSlice| (s.metadata.namespace.clone(), s.metadata.name.clone());
                    let old: BTreeMap<(String, String), &EndpointSlice> =
                        self.slices.iter().map(|s| (key(s), s)).collect();
                    let new_keys: BTreeSet<(String, String)> = new.iter().map(key).collect();
                    let batch = WatchBatch {
                        services: Vec::new(),
                        service_deletes: Vec::new(),
                        upserts: new
                            .iter()
                            .filter(|s| old.get(&key(s)) != Some(s))
                            .cloned()
                            .collect(),
                        deletes: old
                            .keys()
                            .filter(|k| !new_keys.contains(*k))
                            .cloned()
                            .collect(),
                    };
                    self.slices = new;
                    self.watches.push(Some(batch));
                    self.queue.push(
                        self.now + self.sc.control_plane.watch_delay,
                        Ev::Watch(self.watches.len() - 1),
                    );
                }
            }
            Ev::Watch(i) => {
                let Some(batch) = self.watches.get_mut(i).and_then(Option::take) else {
                    return Ok(());
                };
                let now = self.now;
                for g in 0..self.groups.len() {
                    if !self.proxy_running[g] {
                        // A stopped kube-proxy misses the change; a new process lists
                        // every object when it starts.
                        continue;
                    }
                    let kp = &mut self.groups[g].proxy;
                    for s in &batch.services {
                        kp.upsert_service(now, s.clone());
                    }
                    for (ns, name) in &batch.service_deletes {
                        kp.delete_service(now, ns, name);
                    }
                    for s in &batch.upserts {
                        kp.upsert_endpoint_slice(now, s.clone());
                    }
                    for (ns, name) in &batch.deletes {
                        kp.delete_endpoint_slice(now, ns, name);
                    }
                    self.arm_proxy(g);
                }
            }
            Ev::ProxyTimer(g) => {
                if self.groups[g].wake.is_some_and(|w| w <= self.now) {
                    self.groups[g].wake = None;
                }
                if !self.proxy_running[g] {
                    return Ok(());
                }
                self.proxy_timer(g);
                self.arm_proxy(g);
            }
        }
        Ok(())
    }

    /// Runs kube-proxy instance `g`'s sync if one is due, on every node it serves.
    fn proxy_timer(&mut self, g: usize) {
        let (now, end) = (self.now, self.end);
        let Simulation {
            groups,
            nodes,
            opts,
            ..
        } = self;
        let grp = &mut groups[g];
        let members: Vec<(usize, &mut Netns)> = nodes
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| grp.nodes.contains(i))
            .map(|(i, n)| (i, &mut n.netns))
            .collect();
        let mut tick = || {
            if let Some(p) = opts.progress.as_mut() {
                p(now, end);
            }
        };
        let Some(result) = grp.on_timeout(now, members, &mut tick) else {
            return;
        };
        let served = grp.nodes.clone();
        self.tally_cleanup(&result);
        if self.recording {
            self.log_sync(&result);
        }
        for n in served {
            self.after_kernel(n);
        }
    }

    fn log_sync(&mut self, r: &SyncResult) {
        let changed: Vec<String> = r
            .output
            .changed_services
            .iter()
            .map(|(a, b)| format!("{a}/{b}"))
            .collect();
        let nat_rules = nat_rules_written(&r.output.restore);
        for ns in &r.nodes {
            let node = self.nodes[ns.node].def.name.clone();
            self.log(What::Sync {
                node: node.clone(),
                full: r.output.kind == SyncKind::Full,
                changed: changed.clone(),
                nat_rules,
            });
            if let Some(e) = &ns.error {
                self.log(What::SyncFailed {
                    node,
                    error: e.clone(),
                });
            }
        }
        // An external reconciler's requests (a process serves one node).
        if let Some(ns) = r.nodes.first() {
            let node = self.nodes[ns.node].def.name.clone();
            for req in &r.cleanup.requests {
                self.log(What::Change {
                    subject: format!("reconciler {node}"),
                    change: req.clone(),
                });
            }
            if let Some(e) = &r.cleanup.error {
                self.log(What::Change {
                    subject: format!("reconciler {node}"),
                    change: format!("FAILED: {e}"),
                });
            }
        }
        for d in &r.deleted {
            let reason = r
                .cleanup
                .deletions
                .get(d.request)
                .map(|x| x.reason.clone())
                .unwrap_or_default();
            self.log(What::CleanupDelete {
                node: self.nodes[d.node].def.name.clone(),
                line: d.line.clone(),
                reason,
                entry: CtRecord::at(&d.entry, d.at),
            });
        }
    }

    /// The node index of `name`.
    pub fn node_index(&self, name: &str) -> Result<usize, SimError> {
        self.nodes
            .iter()
            .position(|n| n.def.name == name)
            .ok_or_else(|| SimError::UnknownNode(name.to_string()))
    }

    /// `conntrack -L` of a node now (stdout lines).
    pub fn conntrack_dump(&mut self, node: usize) -> String {
        self.nodes[node]
            .netns
            .conntrack()
            .dump(self.now, &Filter::all())
    }

    /// The entries [`Simulation::conntrack_dump`] shows, in its order.
    pub fn conntrack_entries(&self, node: usize) -> Vec<sim_conntrack::CtEntry> {
        self.nodes[node]
            .netns
            .conntrack()
            .list(self.now, &Filter::all())
    }

    /// The number of entries [`Simulation::conntrack_dump`] would show.
    pub fn conntrack_count(&mut self, node: usize) -> usize {
        self.nodes[node]
            .netns
            .conntrack()
            .list(self.now, &Filter::all())
            .len()
    }

    /// `iptables-save` of a node now (without the dated comment lines); for a node with
    /// nftables tables (kube-proxy in nftables mode), `nft list ruleset` first, then the
    /// iptables-save of any iptables tables it also has.
    pub fn rules(&self, node: usize) -> String {
        let ns = &self.nodes[node].netns;
        if ns.nft().is_empty() {
            return ns.save(false);
        }
        let mut s = ns.nft().list_ruleset(self.now);
        let ipt = ns.save(false);
        if ipt.lines().any(|l| l.starts_with('*')) {
            s.push_str(&ipt);
        }
        s
    }

    /// A node's network namespace: its interfaces and routes, rules and conntrack table.
    pub fn netns(&self, node: usize) -> &Netns {
        &self.nodes[node].netns
    }

    /// Where a packet with source `src` enters node `node` now, and why, for `nfsim trace`:
    /// OUTPUT with `local`; a pod of this node (named by `from`, or holding `src`) sends
    /// through its veth; another node's pod, a host or anything else arrives on `eth0`.
    pub fn ingress_for(
        &self,
        node: usize,
        src: IpAddr,
        from: Option<&str>,
        local: bool,
    ) -> Result<(Ingress, String), SimError> {
        let name = &self.nodes[node].def.name;
        if local {
            return Ok((
                Ingress::Local,
                format!("sent by a process of {name} (--local): OUTPUT"),
            ));
        }
        let pod_here = |k: usize| {
            let p = &self.pods[k];
            (
                Ingress::Interface(p.veth),
                format!(
                    "sent by pod {} through its veth {} on {name}",
                    p.key, p.veth
                ),
            )
        };
        let eth0 = |why: String| {
            (
                Ingress::Interface(IfName::new("eth0").unwrap_or_else(|_| unreachable!())),
                why,
            )
        };
        match from {
            Some(f) => {
                let key = if f.contains('/') {
                    f.to_string()
                } else {
                    format!("default/{f}")
                };
                if let Some(&k) = self.pod_ids.get(&key) {
                    let p = &self.pods[k];
                    if !p.state.has_network() {
                        return Err(SimError::Trace(format!(
                            "--from {f}: pod {key} has no network at this instant"
                        )));
                    }
                    if p.state.def.node == node {
                        return Ok(pod_here(k));
                    }
                    let other = &self.nodes[p.state.def.node].def.name;
                    return Ok(eth0(format!(
                        "from pod {key} on {other}: arrives on eth0 (as {other} forwards it)"
                    )));
                }
                if self.hosts.iter().any(|(h, _)| h.name == f) {
                    return Ok(eth0(format!("from host {f}: arrives on eth0")));
                }
                let mut known: Vec<String> = self.pod_ids.keys().cloned().collect();
                known.extend(self.hosts.iter().map(|(h, _)| h.name.clone()));
                Err(SimError::Trace(format!(
                    "--from {f}: no pod or host of that name (known: {})",
                    known.join(", ")
                )))
            }
            None => {
                for (key, &k) in &self.pod_ids {
                    let p = &self.pods[k];
                    if p.state.def.node == node && p.state.has_network() && p.ips.contains(&src) {
                        let _ = key;
                        return Ok(pod_here(k));
                    }
                }
                Ok(eth0(format!(
                    "source {src} is no pod of {name}: arrives on eth0"
                )))
            }
        }
    }

    /// How many kube-proxy instances run (one per node, or fewer where nodes share one).
    pub fn kube_proxy_instances(&self) -> usize {
        self.groups.len()
    }

    /// The queries (sends, TCP exchanges, echo requests) a client keeps, in order: every one
    /// so far when built with [`SimulationBuilder::keep_queries`], otherwise those from the
    /// oldest still in flight on (the finished ones before it are in the run's totals);
    /// `None` for an unknown client name.
    pub fn client_records(&self, name: &str) -> Option<&[QueryRecord]> {
        self.clients
            .iter()
            .find(|c| c.def.name == name)
            .map(|c| c.app.records())
    }

    /// How many query records the clients keep right now. The finished ones at the front of
    /// each client's log go into running totals as the run goes (`tally.rs`), so this stays
    /// near the number of queries in flight however long the run.
    pub fn queries_kept(&self) -> usize {
        self.clients.iter().map(|c| c.app.records().len()).sum()
    }

    /// Node names, in scenario order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes.iter().map(|n| n.def.name.clone()).collect()
    }

    /// Runs to the end and returns the timeline, the verdicts and the summary.
    pub fn finish(mut self) -> Result<RunResult, SimError> {
        self.run_until(self.end)?;
        // Checks still due (at the very end).
        while let Some(&(_, i)) = self.checks.get(self.next_check) {
            self.next_check += 1;
            self.check(i);
        }
        self.pcap_summary();
        self.output_status()?;
        for s in &mut self.sinks {
            s.finish().map_err(|e| SimError::Output {
                kind: e.kind(),
                message: e.to_string(),
            })?;
        }
        self.tap_finish().map_err(|e| SimError::Output {
            kind: e.kind(),
            message: e.to_string(),
        })?;
        let summary_data = self.summary();
        let summary = self.summary_text(&summary_data);
        let clients = self.client_figures();
        Ok(RunResult {
            clients,
            timeline: self.timeline,
            results: self.results,
            summary,
            summary_data,
            events: self.events_processed,
        })
    }
}

/// Loads nothing, runs nothing: the schedule helper clients use, re-exported for tests.
pub fn schedule(start: SimTime, stop: SimTime, interval: SimDuration) -> ClientSchedule {
    ClientSchedule {
        start,
        stop,
        interval,
        jitter: SimDuration::ZERO,
        count: None,
    }
}
