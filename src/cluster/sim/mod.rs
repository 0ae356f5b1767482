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

//!
//! The driver's rooms: this file holds the running cluster's state and the event loop
//! ([`Simulation::run_until`]). Building the cluster at time 0 is `builder.rs`, with each
//! node's namespace and kube-proxy configuration in `node_setup.rs`; pods' lifecycle is
//! `pods.rs`, clients' placement and wake-ups `clients.rs`, kube-proxy's syncs
//! `kube_proxy.rs`, routing and delivery `network.rs`, other cluster changes `changes.rs`,
//! and what code outside can read of a running cluster `inspect.rs` and `inject.rs`.

use super::apps::{
    closed_port_response, AppEvent, ClientSchedule, LookupPlan, Outbox, QueryRecord,
    ResolverClient, ResolverClientConfig, Tag, TcpClient, TcpClientConfig, TcpServer, UdpClient,
    UdpClientConfig, UdpServer,
};
use super::control::{derive_slices_in, Phase, PodState};
use super::ping::{PingClient, PingClientConfig, PingIdents};
use super::ports::ConnectPorts;
use super::proxy::{
    nat_rules_written, rules_are_node_independent, same_rendering, CleanupFactory, ProxyGroup,
    SyncResult,
};
use super::tcp_session::{TcpSessionClient, TcpSessionConfig};
use super::topology::ControllerTopology;
use crate::k8s::EndpointSlice;
use crate::kubeproxy::{KubeProxy, LocalDetector, ProxierConfig, ProxyMode, SyncKind};
use crate::scenario::model::*;
use serde::Serialize;
use sim_conntrack::{EventKind, Filter, Status, Sysctls};
use sim_core::{EventQueue, IfName, Packet, SimDuration, SimRng, SimTime, L4};
use sim_netfilter::netns::{Egress, Fate, IcmpRateLimit, Ingress, Netns, NetnsConfig, Prefix};
use sim_netfilter::RestoreMemo;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

mod builder;
mod calico;
pub mod capture;
mod changes;
mod clients;
pub mod cpus;
mod expect;
mod inject;
mod inspect;
mod kube_proxy;
mod load_balancer;
mod network;
mod node_setup;
mod pcap_client;
mod pods;
pub mod record;
pub mod sink;
mod tally;
mod timeline;

pub use builder::{RunOptions, SimulationBuilder};

pub use capture::{CapturePoint, CaptureSink, PcapDir};
pub use expect::{chi_square_sf, chi_square_uniform, ClientFigures, UNIFORMITY_SIGNIFICANCE};
pub use inject::{CleanupTally, Origin, Sighting, INJECTED_TAG};
pub use pcap_client::{pcap_tag, PCAP_TAG};
pub use record::{CtRecord, DumpRecord, EndRecord, StartRecord, Summary, JSON_SCHEMA_VERSION};
pub use sink::{Collect, EventSink, JsonLinesSink, TextSink};
pub use timeline::{SyncTook, TimelineEvent, What};

use node_setup::{eth0, node_netns, proxier_config};
pub use node_setup::{node_network_len, router_address};
use pods::PodTimer;

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
    /// An encapsulated packet reaching node `.0`'s eth0 (`network.cni: flannel-vxlan`).
    DeliverVxlan(usize, sim_netfilter::netns::VxlanWire),
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
    /// The restore of a kube-proxy instance's sync in flight ends (`syncCost: modelled`).
    ProxyApply(usize),
    Recreate(usize),
    /// A pcap client's packet (client, index).
    PcapSend(usize, usize),
    /// A round of the cloud load balancer's health checks reaches the nodes.
    LbProbe,
    /// The oldest round's answers reach the load balancer.
    LbAnswers,
    /// An IPIP packet (outer, inner) from node `from` reaches node `to`'s `eth0`.
    Ipip {
        /// The receiving node.
        to: usize,
        /// The sending node.
        from: usize,
        /// The outer packet and the packet it carries.
        packets: Box<(Packet, Packet)>,
    },
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
    fn build(
        apps: &[AppDef],
        dns: &std::sync::Arc<crate::dns::DnsData>,
        seed: u64,
        label: &str,
    ) -> Stack {
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
                    zone,
                } => {
                    let mut u = UdpServer::with_reply(port, service_time, reply);
                    if let Some(z) = zone {
                        // A DNS server answers from its zone, and on its TCP port too
                        // (CoreDNS's `dns://` server listens on both).
                        u.zone = Some((dns.clone(), z));
                        let mut t = TcpServer::new(
                            port,
                            service_time,
                            SimRng::derive(seed, &format!("{label}/tcp{port}/isn")),
                        );
                        t.zone = Some((dns.clone(), z));
                        s.servers.insert((6, port), Server::Tcp(Box::new(t)));
                    }
                    s.servers.insert((17, port), Server::Udp(u));
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
    Resolver(Box<ResolverClient>),
}

impl ClientApp {
    fn poll_timeout(&self) -> Option<SimTime> {
        match self {
            ClientApp::Udp(c) => c.poll_timeout(),
            ClientApp::Tcp(c) => c.poll_timeout(),
            ClientApp::TcpSession(c) => c.poll_timeout(),
            ClientApp::Ping(c) => c.poll_timeout(),
            ClientApp::Resolver(c) => c.poll_timeout(),
        }
    }
    fn records(&self) -> &[QueryRecord] {
        match self {
            ClientApp::Udp(c) => c.records(),
            ClientApp::Tcp(c) => c.records(),
            ClientApp::TcpSession(c) => c.records(),
            ClientApp::Ping(c) => c.records(),
            ClientApp::Resolver(c) => c.records(),
        }
    }
    fn take_finished(&mut self) -> Vec<QueryRecord> {
        match self {
            ClientApp::Udp(c) => c.take_finished(),
            ClientApp::Tcp(c) => c.take_finished(),
            ClientApp::TcpSession(c) => c.take_finished(),
            ClientApp::Ping(c) => c.take_finished(),
            ClientApp::Resolver(c) => c.take_finished(),
        }
    }
    fn owns(&self, proto: u8, port: u16) -> bool {
        match self {
            ClientApp::Udp(c) => proto == 17 && c.binds(port),
            ClientApp::Tcp(c) => proto == 6 && c.binds(port),
            ClientApp::TcpSession(c) => proto == 6 && c.binds(port),
            ClientApp::Ping(c) => proto == 1 && c.ident() == port,
            ClientApp::Resolver(c) => c.binds(proto, port),
        }
    }
    fn bound_ports(&self) -> BTreeSet<u16> {
        match self {
            ClientApp::Udp(c) => c.bound_ports(),
            ClientApp::Tcp(c) => c.bound_ports(),
            ClientApp::TcpSession(c) => c.bound_ports(),
            ClientApp::Ping(c) => [c.ident()].into(),
            ClientApp::Resolver(c) => c.udp_ports(),
        }
    }
    fn proto(&self) -> u8 {
        match self {
            ClientApp::Udp(_) | ClientApp::Resolver(_) => 17,
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
    /// The node's CPUs when it has more than one (`cpus`): which CPU a packet is processed
    /// on and which packets race (`cpus.rs`). `None` with one CPU: the packet loop does not
    /// look further.
    cpus: Option<Box<cpus::Cpus>>,
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
    /// An event could not be carried out at its instant (`deletePod: {endpointOf: …}` while
    /// the client has no conntrack entry): the message names the file, line, column and why.
    #[error("{0}")]
    Event(String),
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
    /// Second-family pod addresses handed out at run time for pods not created yet (a
    /// recreated or scaled-up pod on a dual-stack node), kept out of later draws.
    reserved_ips: BTreeSet<IpAddr>,
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
    /// The encapsulated packet `node_kernel` is to receive (`deliver_vxlan`).
    vxlan_rx: Option<sim_netfilter::netns::VxlanWire>,
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
    /// The cloud load balancer in front of `type: LoadBalancer` Services.
    lb: load_balancer::LbRt,
}

impl Simulation {
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
        let Some(ip) = s.cluster_ip_of(self.sc.family()) else {
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
            Ev::DeliverVxlan(n, w) => self.deliver_vxlan(n, w),
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
                        ClientApp::Tcp(_) | ClientApp::TcpSession(_) | ClientApp::Resolver(_)
                    );
                    let mut lent = match self.stack_mut(&m) {
                        Some(s) if tcp => Some(std::mem::take(&mut s.connect)),
                        _ => None,
                    };
                    let c = &mut self.clients[i];
                    let (ip, proto) = (c.ip, c.app.proto());
                    let table = &self.client_ports;
                    let busy = |p: u16| table.contains_key(&(ip, proto, p));
                    let tcp_busy = |p: u16| table.contains_key(&(ip, 6, p));
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
                        ClientApp::Resolver(c) => {
                            let connect = lent.get_or_insert_with(ConnectPorts::default);
                            c.handle_timeout(self.now, &busy, &tcp_busy, connect, &mut out)
                        }
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
            Ev::LbProbe => self.lb_probe(),
            Ev::LbAnswers => self.lb_answers(),
            Ev::Ipip { to, from, packets } => {
                let (outer, inner) = *packets;
                self.ipip_rcv(to, from, outer, inner)
            }
            Ev::Recreate(i) => {
                let def = self.recreates[i].clone();
                self.add_pod(def, true)?;
            }
            Ev::PodTimer {
                pod,
                generation,
                what,
            } => self.pod_timer_fired(pod, generation, what),
            Ev::SliceSync => self.slice_sync(),
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
            Ev::ProxyApply(g) => {
                if !self.proxy_running[g] {
                    // Stopped mid-restore: the rules it was writing never go in.
                    self.groups[g].in_flight = None;
                    return Ok(());
                }
                self.proxy_apply(g);
                self.arm_proxy(g);
            }
        }
        Ok(())
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
