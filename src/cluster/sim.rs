//! The simulation driver: one event queue for the whole cluster.
//!
//! Topology: every node has `eth0` with its address on a flat network (one-way `latency` per
//! link), a veth per local pod with a /32 route, the other nodes' pod CIDRs routed via their
//! node address, and a default route out of `eth0`. A pod's packets enter its node's
//! PREROUTING from its veth; a node process's packets take OUTPUT; hosts outside the cluster
//! send straight onto the network, which delivers to the owner of the destination (a node's
//! address or pod CIDR, or a host). A packet towards an address nobody owns (a deleted pod's
//! IP) is dropped silently.
//!
//! Use: [`Simulation::new`], then [`Simulation::run_until`] (repeatedly, if you want to look
//! at the state at several instants), then [`Simulation::finish`] for the results.

use super::apps::{
    closed_port_response, AppEvent, ClientSchedule, Outbox, QueryOutcome, QueryRecord, Tag,
    TcpClient, TcpClientConfig, TcpServer, UdpClient, UdpClientConfig, UdpServer,
};
use super::control::{derive_slices, Phase, PodState};
use super::kernel::{parse_ct_filter, CtEventKind, Egress, Ingress, Kernel, KernelError};
use super::proxy::NodeProxy;
use crate::k8s::EndpointSlice;
use crate::scenario::model::*;
use serde::Serialize;
use sim_core::{EventQueue, IfName, Packet, SimDuration, SimRng, SimTime, L4};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

/// Most events one run may process before it stops with an error (a runaway guard).
pub const MAX_EVENTS_PER_RUN: u64 = 500_000_000;

/// Where a packet is handed next.
#[derive(Debug, Clone)]
enum Dest {
    /// Into a node's namespace, received on an interface.
    NodeIn(usize, IfName),
    /// Into a node's namespace from a local process (OUTPUT).
    NodeOut(usize),
    /// To a node's own sockets (after INPUT).
    NodeStack(usize),
    /// To a pod (by key), through its veth.
    Pod(String),
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
        pod: String,
        generation: u64,
        what: PodTimer,
    },
    SliceSync,
    ProxyWatch(usize),
    ProxySync(usize),
    ProxyPeriodic(usize),
    Recreate(usize),
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
    Pod(String),
}

#[derive(Debug, Clone)]
enum Server {
    Udp(UdpServer),
    Tcp(Box<TcpServer>),
}

#[derive(Debug, Clone, Default)]
struct Stack {
    servers: BTreeMap<(u8, u16), Server>,
    wake: Option<SimTime>,
}

impl Stack {
    fn build(apps: &[AppDef], seed: u64, label: &str) -> Stack {
        let mut s = Stack::default();
        for a in apps {
            match *a {
                AppDef::UdpServer { port, service_time } => {
                    s.servers
                        .insert((17, port), Server::Udp(UdpServer::new(port, service_time)));
                }
                AppDef::TcpServer { port, service_time } => {
                    s.servers.insert(
                        (6, port),
                        Server::Tcp(Box::new(TcpServer::new(
                            port,
                            service_time,
                            SimRng::derive(seed, &format!("{label}/tcp{port}/isn")),
                        ))),
                    );
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
}

impl ClientApp {
    fn poll_timeout(&self) -> Option<SimTime> {
        match self {
            ClientApp::Udp(c) => c.poll_timeout(),
            ClientApp::Tcp(c) => c.poll_timeout(),
        }
    }
    fn records(&self) -> &[QueryRecord] {
        match self {
            ClientApp::Udp(c) => c.records(),
            ClientApp::Tcp(c) => c.records(),
        }
    }
    fn owns(&self, proto: u8, port: u16) -> bool {
        match self {
            ClientApp::Udp(c) => proto == 17 && c.bound_ports().contains(&port),
            ClientApp::Tcp(c) => proto == 6 && c.bound_ports().contains(&port),
        }
    }
    fn proto(&self) -> u8 {
        match self {
            ClientApp::Udp(_) => 17,
            ClientApp::Tcp(_) => 6,
        }
    }
}

struct ClientRt {
    def: ClientDef,
    machine: Machine,
    ip: IpAddr,
    app: ClientApp,
    wake: Option<SimTime>,
}

struct NodeRt {
    def: NodeDef,
    kernel: Kernel,
    proxy: NodeProxy,
    stack: Stack,
    veths: BTreeMap<IfName, String>,
    ct_wake: Option<SimTime>,
}

struct PodRt {
    state: PodState,
    stack: Stack,
    veth: IfName,
    ips: BTreeSet<IpAddr>,
}

/// One thing that happened, for the timeline and the JSON lines.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelineEvent {
    /// Nanoseconds since the start.
    pub t_ns: u64,
    /// `HH:MM:SS.mmm`.
    pub time: String,
    /// What happened.
    #[serde(flatten)]
    pub what: What,
}

/// The kinds of timeline events (JSON: `"kind": "query_sent"`, …).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    /// A client sent a query (or a retry).
    QuerySent {
        /// Client.
        client: String,
        /// Query number.
        query: u32,
        /// Try.
        attempt: u8,
        /// Source socket.
        src: String,
        /// Destination.
        dst: String,
    },
    /// A client's packet was DNAT'd on a node.
    Dnat {
        /// Client.
        client: String,
        /// Query or connection number.
        query: u32,
        /// Node.
        node: String,
        /// Original destination.
        from: String,
        /// New destination.
        to: String,
    },
    /// A query was answered.
    QueryAnswered {
        /// Client.
        client: String,
        /// Query number.
        query: u32,
        /// Round trip from the first send.
        rtt: String,
        /// Source of the answer.
        from: String,
    },
    /// A query timed out on its last try.
    QueryTimedOut {
        /// Client.
        client: String,
        /// Query number.
        query: u32,
        /// Tries.
        attempts: u8,
    },
    /// A query was refused by an ICMP error.
    QueryRefused {
        /// Client.
        client: String,
        /// Query number.
        query: u32,
        /// ICMP code.
        code: u8,
    },
    /// A TCP client started a connection.
    TcpConnect {
        /// Client.
        client: String,
        /// Connection number.
        conn: u32,
        /// Source socket.
        src: String,
        /// Destination.
        dst: String,
    },
    /// A TCP exchange completed.
    TcpDone {
        /// Client.
        client: String,
        /// Connection number.
        conn: u32,
        /// Time to the response.
        rtt: String,
    },
    /// A TCP exchange failed.
    TcpFailed {
        /// Client.
        client: String,
        /// Connection number.
        conn: u32,
        /// Why.
        reason: String,
    },
    /// A conntrack event on a node.
    Conntrack {
        /// Node.
        node: String,
        /// NEW, UPDATE or DESTROY.
        event: String,
        /// The `conntrack -E` line.
        line: String,
    },
    /// A pod lifecycle change.
    Pod {
        /// `namespace/name`.
        pod: String,
        /// What happened.
        change: String,
    },
    /// An EndpointSlice changed.
    Endpoints {
        /// `namespace/service`.
        service: String,
        /// Endpoints with their conditions.
        endpoints: String,
    },
    /// A kube-proxy sync.
    Sync {
        /// Node.
        node: String,
        /// Full or partial.
        full: bool,
        /// Services whose rules changed.
        changed: Vec<String>,
        /// nat rules written.
        nat_rules: usize,
    },
    /// A conntrack entry deleted by kube-proxy's cleanup.
    CleanupDelete {
        /// Node.
        node: String,
        /// The deleted entry.
        line: String,
    },
    /// An expectation was checked.
    Expectation {
        /// Name.
        name: String,
        /// Passed.
        passed: bool,
        /// What was seen.
        detail: String,
    },
}

impl TimelineEvent {
    /// The human timeline line.
    pub fn line(&self) -> String {
        let body = match &self.what {
            What::QuerySent {
                client,
                query,
                attempt,
                src,
                dst,
            } => {
                if *attempt == 0 {
                    format!("{client}: query #{query} sent {src} -> {dst}")
                } else {
                    format!("{client}: query #{query} retry {attempt} sent {src} -> {dst}")
                }
            }
            What::Dnat {
                client,
                query,
                node,
                from,
                to,
            } => format!("{client}: #{query} DNAT'd on {node}: {from} -> {to}"),
            What::QueryAnswered {
                client,
                query,
                rtt,
                from,
            } => format!("{client}: query #{query} answered by {from} in {rtt}"),
            What::QueryTimedOut {
                client,
                query,
                attempts,
            } => {
                format!(
                    "{client}: query #{query} TIMED OUT ({attempts} tr{})",
                    if *attempts == 1 { "y" } else { "ies" }
                )
            }
            What::QueryRefused {
                client,
                query,
                code,
            } => format!("{client}: query #{query} REFUSED (ICMP unreachable code {code})"),
            What::TcpConnect {
                client,
                conn,
                src,
                dst,
            } => format!("{client}: connection #{conn} {src} -> {dst} SYN"),
            What::TcpDone { client, conn, rtt } => {
                format!("{client}: connection #{conn} answered in {rtt}, closing")
            }
            What::TcpFailed {
                client,
                conn,
                reason,
            } => format!("{client}: connection #{conn} FAILED: {reason}"),
            What::Conntrack { node, line, .. } => format!("ct {node}: {line}"),
            What::Pod { pod, change } => format!("pod {pod}: {change}"),
            What::Endpoints { service, endpoints } => format!("endpoints {service}: {endpoints}"),
            What::Sync {
                node,
                full,
                changed,
                nat_rules,
            } => format!(
                "kube-proxy {node}: {} sync, {nat_rules} nat rules{}",
                if *full { "full" } else { "partial" },
                if changed.is_empty() {
                    String::new()
                } else {
                    format!(", changed: {}", changed.join(" "))
                }
            ),
            What::CleanupDelete { node, line } => {
                format!("kube-proxy {node}: cleanup deleted {line}")
            }
            What::Expectation {
                name,
                passed,
                detail,
            } => {
                format!(
                    "expect {}: {name} ({detail})",
                    if *passed { "PASS" } else { "FAIL" }
                )
            }
        };
        format!("{}  {body}", self.time)
    }
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
    pod: String,
    ip: IpAddr,
    client: usize,
    src: SocketAddr,
    proto: u8,
}

/// Options of a run.
#[derive(Default)]
pub struct RunOptions {
    /// Keep the timeline (off for benchmarks).
    pub record_timeline: bool,
    /// Include conntrack events in the timeline.
    pub conntrack_events: bool,
    /// Called now and then with (now, end) to show progress.
    pub progress: Option<Box<dyn FnMut(SimTime, SimTime)>>,
}

/// Why a run stopped with an error.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SimError {
    /// A node's kernel refused its configuration.
    #[error("node {node}: {source}")]
    Kernel {
        /// Node.
        node: String,
        /// Error.
        source: KernelError,
    },
    /// [`MAX_EVENTS_PER_RUN`] was reached.
    #[error("more than {MAX_EVENTS_PER_RUN} events: the scenario runs away (MAX_EVENTS_PER_RUN)")]
    TooManyEvents,
    /// An unknown node name.
    #[error("unknown node {0:?}")]
    UnknownNode(String),
}

/// The running cluster.
pub struct Simulation {
    sc: Scenario,
    now: SimTime,
    end: SimTime,
    queue: EventQueue<Ev>,
    nodes: Vec<NodeRt>,
    hosts: Vec<(HostDef, Stack)>,
    pods: BTreeMap<String, PodRt>,
    clients: Vec<ClientRt>,
    clients_by_ip: BTreeMap<IpAddr, Vec<usize>>,
    slices: Vec<EndpointSlice>,
    slice_sync_pending: bool,
    timeline: Vec<TimelineEvent>,
    hits: Vec<Hit>,
    results: Vec<ExpectResult>,
    checks: Vec<(SimTime, usize)>,
    next_check: usize,
    opts: RunOptions,
    events_processed: u64,
    veth_counter: u64,
    recreates: Vec<PodDef>,
}

fn eth0() -> IfName {
    IfName::new("eth0").unwrap_or_else(|_| unreachable!("constant name"))
}

fn prefix_of(c: &crate::k8s::Cidr) -> (IpAddr, u8) {
    (c.addr(), c.prefix_len())
}

fn host_prefix(ip: IpAddr) -> (IpAddr, u8) {
    (ip, if ip.is_ipv4() { 32 } else { 128 })
}

fn default_route(ip: IpAddr) -> (IpAddr, u8) {
    if ip.is_ipv4() {
        (IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 0)
    } else {
        (IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED), 0)
    }
}

impl Simulation {
    /// Builds the cluster at time 0: nodes and their kernels, pods, hosts, clients, the first
    /// EndpointSlices, and kube-proxy's first sync on every node.
    pub fn new(sc: Scenario, opts: RunOptions) -> Result<Simulation, SimError> {
        let seed = sc.seed;
        let mut nodes = Vec::new();
        for (i, n) in sc.nodes.iter().enumerate() {
            let mut kernel =
                Kernel::new(&n.name, seed, &n.sysctls).map_err(|e| SimError::Kernel {
                    node: n.name.clone(),
                    source: e,
                })?;
            kernel.add_interface(
                eth0(),
                &[(n.address, if n.address.is_ipv4() { 24 } else { 64 })],
            );
            for (j, m) in sc.nodes.iter().enumerate() {
                if i != j {
                    kernel.add_route(prefix_of(&m.pod_cidr), Some(m.address), eth0());
                }
            }
            kernel.add_route(default_route(n.address), None, eth0());
            let proxy = NodeProxy::new(
                &n.name,
                n.address,
                n.pod_cidr,
                sc.kube_proxy.cluster_cidr,
                sc.kube_proxy.masquerade_all,
                sc.kube_proxy.release,
                sc.kube_proxy.min_sync_period,
            );
            nodes.push(NodeRt {
                stack: Stack::build(&n.apps, seed, &format!("node/{}", n.name)),
                def: n.clone(),
                kernel,
                proxy,
                veths: BTreeMap::new(),
                ct_wake: None,
            });
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
        let mut sim = Simulation {
            now: SimTime::ZERO,
            end,
            queue: EventQueue::new(),
            nodes,
            hosts,
            pods: BTreeMap::new(),
            clients: Vec::new(),
            clients_by_ip: BTreeMap::new(),
            slices: Vec::new(),
            slice_sync_pending: false,
            timeline: Vec::new(),
            hits: Vec::new(),
            results: Vec::new(),
            checks,
            next_check: 0,
            opts,
            events_processed: 0,
            veth_counter: 0,
            recreates: Vec::new(),
            sc,
        };
        for p in sim.sc.pods.clone() {
            sim.add_pod(p, false);
        }
        for (i, c) in sim.sc.clients.clone().into_iter().enumerate() {
            sim.add_client(i, c);
        }
        for (i, e) in sim.sc.events.iter().enumerate() {
            sim.queue.push(e.at, Ev::Action(i));
        }
        // Initial slices, seen by every kube-proxy at once; the first sync at time 0.
        sim.slices = match &sim.sc.endpoint_slices {
            Some(s) => s.clone(),
            None => derive_slices(&sim.sc.services, sim.pods.values().map(|p| &p.state)),
        };
        for i in 0..sim.nodes.len() {
            let (svcs, slices) = (sim.sc.services.clone(), sim.slices.clone());
            sim.nodes[i].proxy.observe(&svcs, &slices);
            sim.queue.push(SimTime::ZERO, Ev::ProxySync(i));
            sim.nodes[i].proxy.pending = Some(SimTime::ZERO);
            sim.queue.push(
                SimTime::ZERO + sim.sc.kube_proxy.sync_period,
                Ev::ProxyPeriodic(i),
            );
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
        if self.opts.record_timeline {
            self.timeline.push(TimelineEvent {
                t_ns: self.now.as_nanos(),
                time: self.now.hms().to_string(),
                what,
            });
        }
    }

    fn add_pod(&mut self, def: PodDef, announce: bool) {
        let key = def.key();
        let node = def.node;
        self.veth_counter += 1;
        let veth =
            IfName::new(&format!("veth{:08x}", self.veth_counter)).unwrap_or_else(|_| eth0());
        let n = &mut self.nodes[node];
        n.kernel.add_interface(veth, &[]);
        n.kernel.add_route(host_prefix(def.ip), None, veth);
        n.veths.insert(veth, key.clone());
        let stack = Stack::build(
            &def.apps,
            self.sc.seed,
            &format!("pod/{key}/{}", self.veth_counter),
        );
        let node_name = n.def.name.clone();
        let mut ips = self
            .pods
            .get(&key)
            .map(|p| p.ips.clone())
            .unwrap_or_default();
        ips.insert(def.ip);
        let generation = self
            .pods
            .get(&key)
            .map(|p| p.state.generation + 1)
            .unwrap_or(0);
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
                        pod: key.clone(),
                        generation,
                        what: PodTimer::SetReady(true),
                    },
                );
            }
        }
        self.pods.insert(
            key,
            PodRt {
                state,
                stack,
                veth,
                ips,
            },
        );
        if announce {
            self.pod_changed();
        }
    }

    fn add_client(&mut self, index: usize, def: ClientDef) {
        let (machine, ip) = match &def.placement {
            Placement::Pod(k) => (
                Machine::Pod(k.clone()),
                self.pods.get(k).map(|p| p.state.def.ip),
            ),
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
            } => ClientApp::Udp(Box::new(UdpClient::new(
                UdpClientConfig {
                    index: index as u32,
                    local_ip: ip,
                    dst: def.target,
                    schedule: def.schedule.clone(),
                    source_port,
                    timeout,
                    retries,
                },
                self.sc.seed,
                &label,
            ))),
            ClientKind::Tcp {
                connect_timeout,
                request_timeout,
            } => ClientApp::Tcp(Box::new(TcpClient::new(
                TcpClientConfig {
                    index: index as u32,
                    local_ip: ip,
                    dst: def.target,
                    schedule: def.schedule.clone(),
                    connect_timeout,
                    request_timeout,
                    request_bytes: 100,
                },
                self.sc.seed,
                &label,
            ))),
        };
        self.clients_by_ip.entry(ip).or_default().push(index);
        self.clients.push(ClientRt {
            def,
            machine,
            ip,
            app,
            wake: None,
        });
        self.arm_client(index);
    }

    fn arm_client(&mut self, i: usize) {
        let c = &mut self.clients[i];
        if let Some(t) = c.app.poll_timeout() {
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
            Machine::Pod(k) => self.pods.get_mut(k).map(|p| &mut p.stack),
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
        if let Some(t) = node.kernel.poll_timeout() {
            if node.ct_wake.is_none_or(|w| t < w || w < self.now) {
                node.ct_wake = Some(t);
                self.queue.push(t.max(self.now), Ev::CtWake(n));
            }
        }
    }

    /// Sends packets from a machine into the network as that machine would.
    fn send_from(&mut self, m: &Machine, packets: Vec<Packet>) {
        for p in packets {
            match m {
                Machine::Pod(k) => {
                    if let Some(pod) = self.pods.get(k) {
                        if pod.state.has_network() {
                            self.queue.push(
                                self.now,
                                Ev::Deliver(Dest::NodeIn(pod.state.def.node, pod.veth), p),
                            );
                        }
                    }
                }
                Machine::Node(n) => {
                    self.queue.push(self.now, Ev::Deliver(Dest::NodeOut(*n), p));
                }
                Machine::Host(_) => self.network(p.dst, p, None),
            }
        }
    }

    /// The flat network: delivers to the owner of `next_hop` after the link latency.
    fn network(&mut self, next_hop: IpAddr, p: Packet, from_node: Option<usize>) {
        let at = self.now + self.sc.latency;
        if let Some(n) = self.nodes.iter().position(|n| n.def.address == next_hop) {
            self.queue.push(at, Ev::Deliver(Dest::NodeIn(n, eth0()), p));
        } else if let Some(h) = self.hosts.iter().position(|h| h.0.address == next_hop) {
            self.queue.push(at, Ev::Deliver(Dest::Host(h), p));
        } else if let Some(n) = self
            .nodes
            .iter()
            .position(|n| n.def.pod_cidr.contains(next_hop))
        {
            // The network routes pod CIDRs to their nodes; a node that sends out a packet for
            // its own pod CIDR has no pod with that IP: it is dropped.
            if from_node != Some(n) {
                self.queue.push(at, Ev::Deliver(Dest::NodeIn(n, eth0()), p));
            }
        }
        // Nobody owns it: dropped.
    }

    fn node_egress(&mut self, n: usize, out: Vec<Egress>, sent: Option<(Packet, Tag)>) {
        for e in out {
            match e {
                Egress::LocalDeliver { packet } => {
                    self.dnat_note(n, sent, &packet);
                    self.queue
                        .push(self.now, Ev::Deliver(Dest::NodeStack(n), packet));
                }
                Egress::Transmit {
                    dev,
                    next_hop,
                    packet,
                } => {
                    self.dnat_note(n, sent, &packet);
                    if dev == eth0() {
                        // ip_forward: TTL decremented on every hop, dropped when it runs out.
                        let mut packet = packet;
                        if packet.iif.is_some() {
                            if packet.ttl <= 1 {
                                continue;
                            }
                            packet.ttl -= 1;
                        }
                        packet.iif = None;
                        self.network(next_hop, packet, Some(n));
                    } else if let Some(k) = self.nodes[n].veths.get(&dev).cloned() {
                        self.queue.push(self.now, Ev::Deliver(Dest::Pod(k), packet));
                    }
                }
            }
        }
    }

    fn dnat_note(&mut self, n: usize, sent: Option<(Packet, Tag)>, out: &Packet) {
        let Some((orig, tag)) = sent else { return };
        if !self.opts.record_timeline
            || out.tag != orig.tag
            || (orig.dst == out.dst && orig.dport() == out.dport())
        {
            return;
        }
        // Only the first packet of a query/connection try, to keep the timeline readable.
        if let L4::Tcp { flags, .. } = orig.l4 {
            if !flags.contains(sim_core::TcpFlags::SYN) {
                return;
            }
        }
        let fmt = |p: &Packet| match p.dport() {
            Some(port) => SocketAddr::new(p.dst, port).to_string(),
            None => p.dst.to_string(),
        };
        let what = What::Dnat {
            client: self.clients[tag.client as usize].def.name.clone(),
            query: tag.seq,
            node: self.nodes[n].def.name.clone(),
            from: fmt(&orig),
            to: fmt(out),
        };
        self.log(what);
    }

    fn deliver(&mut self, dest: Dest, p: Packet) {
        match dest {
            Dest::NodeIn(n, dev) => {
                let tag = self.client_tag(&p, true);
                let out = self.nodes[n]
                    .kernel
                    .process(self.now, p, Ingress::Interface(dev));
                self.after_kernel(n);
                self.node_egress(n, out, tag.map(|t| (p, t)));
            }
            Dest::NodeOut(n) => {
                let tag = self.client_tag(&p, true);
                let out = self.nodes[n].kernel.process(self.now, p, Ingress::Local);
                self.after_kernel(n);
                self.node_egress(n, out, tag.map(|t| (p, t)));
            }
            Dest::NodeStack(n) => self.deliver_to_stack(Machine::Node(n), p),
            Dest::Host(h) => self.deliver_to_stack(Machine::Host(h), p),
            Dest::Pod(k) => {
                let Some(pod) = self.pods.get(&k) else { return };
                if !pod.state.has_network() || pod.state.def.ip != p.dst {
                    return;
                }
                if let Some(t) = self.client_tag(&p, false) {
                    if self.clients[t.client as usize].machine != Machine::Pod(k.clone()) {
                        if let (Some(sport), L4::Udp { .. } | L4::Tcp { .. }) = (p.sport(), p.l4) {
                            self.hits.push(Hit {
                                at: self.now,
                                pod: k.clone(),
                                ip: p.dst,
                                client: t.client as usize,
                                src: SocketAddr::new(p.src, sport),
                                proto: p.protocol(),
                            });
                        }
                    }
                }
                self.deliver_to_stack(Machine::Pod(k), p);
            }
        }
    }

    /// The client tag of a packet sent by (`outbound`) or to a client's request socket.
    fn client_tag(&self, p: &Packet, outbound: bool) -> Option<Tag> {
        let t = Tag::unpack(p.tag)?;
        let c = self.clients.get(t.client as usize)?;
        (!outbound || c.ip == p.src).then_some(t)
    }

    fn after_kernel(&mut self, n: usize) {
        let evs = self.nodes[n].kernel.drain_conntrack_events();
        if self.opts.record_timeline && self.opts.conntrack_events {
            let node = self.nodes[n].def.name.clone();
            for e in evs {
                self.log(What::Conntrack {
                    node: node.clone(),
                    event: e.kind.to_string(),
                    line: e.line,
                });
            }
        }
        self.arm_ct(n);
    }

    fn deliver_to_stack(&mut self, m: Machine, p: Packet) {
        let (proto, dport) = match p.l4 {
            L4::Icmp {
                body: sim_core::IcmpBody::Error(inner),
                ..
            } => (inner.proto, inner.sport),
            _ => (p.protocol(), p.dport().unwrap_or(0)),
        };
        let is_error = matches!(
            p.l4,
            L4::Icmp {
                body: sim_core::IcmpBody::Error(_),
                ..
            }
        );
        let alive = match &m {
            Machine::Pod(k) => self.pods.get(k).is_some_and(|p| p.state.process_alive),
            _ => true,
        };
        let mut out = Outbox::new();
        let now = self.now;
        // Servers first (a server port), then clients' sockets.
        let mut handled = false;
        if alive && !is_error {
            if let Some(stack) = self.stack_mut(&m) {
                if let Some(s) = stack.servers.get_mut(&(proto, dport)) {
                    match s {
                        Server::Udp(u) => u.handle_packet(now, &p, &mut out),
                        Server::Tcp(t) => t.handle_packet(now, &p, &mut out),
                    }
                    handled = true;
                }
            }
        }
        if handled {
            self.send_from(&m, out.packets);
            self.arm_stack(&m);
            return;
        }
        let owner = self.clients_by_ip.get(&p.dst).and_then(|list| {
            list.iter().copied().find(|&i| {
                self.clients[i].machine == m
                    && self.clients[i].app.proto() == proto
                    && self.clients[i].app.owns(proto, dport)
            })
        });
        if let Some(i) = owner {
            match &mut self.clients[i].app {
                ClientApp::Udp(c) => c.handle_packet(now, &p, &mut out),
                ClientApp::Tcp(c) => c.handle_packet(now, &p, &mut out),
            }
            self.client_output(i, out);
            return;
        }
        if !is_error {
            if let Some(r) = closed_port_response(&p) {
                self.send_from(&m, vec![r]);
            }
        }
    }

    fn client_output(&mut self, i: usize, out: Outbox) {
        let m = self.clients[i].machine.clone();
        let name = self.clients[i].def.name.clone();
        for (_, e) in out.events {
            let what = match e {
                AppEvent::QuerySent {
                    query,
                    attempt,
                    src,
                    dst,
                } => What::QuerySent {
                    client: name.clone(),
                    query,
                    attempt,
                    src: src.to_string(),
                    dst: dst.to_string(),
                },
                AppEvent::QueryAnswered { query, rtt, from } => What::QueryAnswered {
                    client: name.clone(),
                    query,
                    rtt: rtt.to_string(),
                    from: from.to_string(),
                },
                AppEvent::QueryTimedOut { query, attempts } => What::QueryTimedOut {
                    client: name.clone(),
                    query,
                    attempts,
                },
                AppEvent::QueryRefused { query, code } => What::QueryRefused {
                    client: name.clone(),
                    query,
                    code,
                },
                AppEvent::TcpConnecting { conn, src, dst } => What::TcpConnect {
                    client: name.clone(),
                    conn,
                    src: src.to_string(),
                    dst: dst.to_string(),
                },
                AppEvent::TcpCompleted { conn, rtt } => What::TcpDone {
                    client: name.clone(),
                    conn,
                    rtt: rtt.to_string(),
                },
                AppEvent::TcpFailed { conn, reason } => What::TcpFailed {
                    client: name.clone(),
                    conn,
                    reason: reason.to_string(),
                },
                AppEvent::ServerAnswered { .. } => continue,
            };
            self.log(what);
        }
        // A client in a pod whose network is gone sends nothing.
        self.send_from(&m, out.packets);
        self.arm_client(i);
    }

    fn busy_ports(&self, i: usize) -> BTreeSet<u16> {
        let c = &self.clients[i];
        let mut s = BTreeSet::new();
        if let Some(list) = self.clients_by_ip.get(&c.ip) {
            for &j in list {
                if j != i && self.clients[j].app.proto() == c.app.proto() {
                    match &self.clients[j].app {
                        ClientApp::Udp(x) => s.extend(x.bound_ports()),
                        ClientApp::Tcp(x) => s.extend(x.bound_ports()),
                    }
                }
            }
        }
        s
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

    fn pod_timer(&mut self, key: &str, after: SimDuration, what: PodTimer) {
        if let Some(p) = self.pods.get(key) {
            let generation = p.state.generation;
            self.queue.push(
                self.now + after,
                Ev::PodTimer {
                    pod: key.to_string(),
                    generation,
                    what,
                },
            );
        }
    }

    fn set_ready(&mut self, key: &str, ready: bool) {
        let Some(p) = self.pods.get_mut(key) else {
            return;
        };
        if p.state.ready == ready || p.state.phase == Phase::Gone {
            return;
        }
        p.state.ready = ready;
        self.log(What::Pod {
            pod: key.to_string(),
            change: if ready {
                "Ready".into()
            } else {
                "not Ready".into()
            },
        });
        self.pod_changed();
    }

    fn pod_gone(&mut self, key: &str) -> Option<PodDef> {
        let p = self.pods.get_mut(key)?;
        if p.state.phase == Phase::Gone {
            return None;
        }
        p.state.phase = Phase::Gone;
        p.state.process_alive = false;
        p.stack = Stack::default();
        let def = p.state.def.clone();
        let veth = p.veth;
        let n = &mut self.nodes[def.node];
        n.kernel.del_route(host_prefix(def.ip));
        n.veths.remove(&veth);
        self.log(What::Pod {
            pod: key.to_string(),
            change: format!("gone; IP {} no longer routed", def.ip),
        });
        self.pod_changed();
        Some(def)
    }

    fn action(&mut self, i: usize) {
        let action = self.sc.events[i].action.clone();
        match action {
            Action::OomKill { pod, restart_after } => {
                let Some(p) = self.pods.get_mut(&pod) else {
                    return;
                };
                if !p.state.has_network() {
                    return;
                }
                p.state.process_alive = false;
                p.state.generation += 1;
                p.stack = Stack::default();
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
                    &pod,
                    super::control::CONTAINER_EXIT_DETECTION,
                    PodTimer::SetReady(false),
                );
                if let Some(d) = restart_after {
                    self.pod_timer(&pod, d, PodTimer::Restart);
                }
            }
            Action::DeletePod {
                pod,
                grace_period,
                recreate,
            } => {
                let Some(p) = self.pods.get_mut(&pod) else {
                    return;
                };
                if p.state.phase != Phase::Running {
                    return;
                }
                let grace = grace_period.unwrap_or(p.state.def.grace_period);
                let until = self.now + grace;
                p.state.phase = Phase::Terminating(until);
                p.state.generation += 1;
                self.log(What::Pod {
                    pod: pod.clone(),
                    change: format!("deleted; terminating with grace period {grace}"),
                });
                self.pod_changed();
                self.pod_timer(&pod, grace, PodTimer::Gone);
                if let Some(r) = recreate {
                    let mut def = self.pods[&pod].state.def.clone();
                    def.ip = r.ip;
                    def.node = r.node;
                    def.ready = false;
                    let at = until + r.after;
                    self.recreates.push(def);
                    self.queue.push(at, Ev::Recreate(self.recreates.len() - 1));
                }
            }
            Action::CreatePod(def) => self.add_pod(*def, true),
            Action::Readiness { pod, ready } => {
                let Some(p) = self.pods.get_mut(&pod) else {
                    return;
                };
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
                self.pod_timer(&pod, delay, PodTimer::SetReady(ready));
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
    /// Events processed.
    pub events: u64,
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
            self.handle(ev.event);
        }
        self.now = self.now.max(limit);
        Ok(())
    }

    fn handle(&mut self, ev: Ev) {
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
                if self.clients[i].wake.is_some_and(|w| w <= self.now) {
                    self.clients[i].wake = None;
                }
                if self.clients[i]
                    .app
                    .poll_timeout()
                    .is_some_and(|t| t <= self.now)
                {
                    let busy = self.busy_ports(i);
                    let mut out = Outbox::new();
                    match &mut self.clients[i].app {
                        ClientApp::Udp(c) => c.handle_timeout(self.now, &busy, &mut out),
                        ClientApp::Tcp(c) => c.handle_timeout(self.now, &busy, &mut out),
                    }
                    self.client_output(i, out);
                } else {
                    self.arm_client(i);
                }
            }
            Ev::CtWake(n) => {
                if self.nodes[n].ct_wake.is_some_and(|w| w <= self.now) {
                    self.nodes[n].ct_wake = None;
                }
                self.nodes[n].kernel.handle_timeout(self.now);
                self.after_kernel(n);
            }
            Ev::Action(i) => self.action(i),
            Ev::Recreate(i) => {
                let def = self.recreates[i].clone();
                self.add_pod(def, true);
            }
            Ev::PodTimer {
                pod,
                generation,
                what,
            } => {
                if self
                    .pods
                    .get(&pod)
                    .is_none_or(|p| p.state.generation != generation)
                {
                    return;
                }
                match what {
                    PodTimer::SetReady(r) => {
                        let ok = self
                            .pods
                            .get(&pod)
                            .is_some_and(|p| p.state.process_alive && p.state.probe_ok);
                        self.set_ready(&pod, r && ok);
                    }
                    PodTimer::Restart => {
                        let Some(p) = self.pods.get_mut(&pod) else {
                            return;
                        };
                        if p.state.phase == Phase::Gone {
                            return;
                        }
                        p.state.process_alive = true;
                        p.state.generation += 1;
                        let label = format!("pod/{pod}/restart{}", p.state.generation);
                        p.stack = Stack::build(&p.state.def.apps, self.sc.seed, &label);
                        let delay = p.state.def.probe.success_delay();
                        self.log(What::Pod {
                            pod: pod.clone(),
                            change: format!("container restarted in place (same IP); Ready after the probe passes in {delay}"),
                        });
                        self.pod_timer(&pod, delay, PodTimer::SetReady(true));
                    }
                    PodTimer::Gone => {
                        self.pod_gone(&pod);
                    }
                }
            }
            Ev::SliceSync => {
                self.slice_sync_pending = false;
                let new = derive_slices(&self.sc.services, self.pods.values().map(|p| &p.state));
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
                    self.slices = new;
                    for n in 0..self.nodes.len() {
                        self.queue.push(
                            self.now + self.sc.control_plane.watch_delay,
                            Ev::ProxyWatch(n),
                        );
                    }
                }
            }
            Ev::ProxyWatch(n) => {
                let (svcs, slices) = (&self.sc.services, &self.slices);
                self.nodes[n].proxy.observe(svcs, slices);
                self.request_sync(n);
            }
            Ev::ProxySync(n) => {
                if self.nodes[n].proxy.pending != Some(self.now) {
                    return;
                }
                self.do_sync(n);
            }
            Ev::ProxyPeriodic(n) => {
                // syncPeriod: a sync runs even without changes (it is where retries and the
                // reconciler's periodic pass happen).
                if self.nodes[n].proxy.pending.is_none() {
                    self.do_sync(n);
                }
                self.queue.push(
                    self.now + self.sc.kube_proxy.sync_period,
                    Ev::ProxyPeriodic(n),
                );
            }
        }
    }

    fn request_sync(&mut self, n: usize) {
        let p = &mut self.nodes[n].proxy;
        if p.pending.is_some() || !p.has_changes() {
            return;
        }
        let at = p.timer.next_allowed(self.now);
        p.pending = Some(at);
        self.queue.push(at, Ev::ProxySync(n));
    }

    fn do_sync(&mut self, n: usize) {
        let now = self.now;
        let node = &mut self.nodes[n];
        let report = node.proxy.sync(now, &mut node.kernel);
        let name = node.def.name.clone();
        if !report.changed.is_empty() || report.full {
            self.log(What::Sync {
                node: name.clone(),
                full: report.full,
                changed: report
                    .changed
                    .iter()
                    .map(|(a, b)| format!("{a}/{b}"))
                    .collect(),
                nat_rules: report.nat_rules,
            });
        }
        for line in report.deleted {
            self.log(What::CleanupDelete {
                node: name.clone(),
                line,
            });
        }
        self.after_kernel(n);
        // Changes that arrived while this sync was pending are in the state it rendered.
    }

    fn pod_ips(&self, key: &str) -> BTreeSet<IpAddr> {
        self.pods
            .get(key)
            .map(|p| p.ips.clone())
            .unwrap_or_default()
    }

    fn ep_ips(&self, r: &EndpointRef) -> BTreeSet<IpAddr> {
        match r {
            EndpointRef::Ip(ip) => [*ip].into(),
            EndpointRef::Pod(k) => self.pod_ips(k),
        }
    }

    fn check(&mut self, i: usize) {
        let x = self.sc.expectations[i].clone();
        let now = self.now;
        let mut problems = Vec::new();
        let mut seen = Vec::new();
        let mut cmp = |what: &str, want: Option<Count>, got: u64| {
            seen.push(format!("{what}={got}"));
            if let Some(w) = want {
                if !w.accepts(got) {
                    problems.push(format!("{what} {got}, expected {w}"));
                }
            }
        };
        match &x.check {
            Check::Client {
                client,
                from,
                to,
                sent,
                answered,
                failed,
                timed_out,
                refused,
            } => {
                let to = to.unwrap_or(now).min(now + SimDuration::from_nanos(1));
                let recs: Vec<&QueryRecord> = self.clients[*client]
                    .app
                    .records()
                    .iter()
                    .filter(|r| r.sent_at >= *from && r.sent_at < to)
                    .collect();
                let done = |f: &dyn Fn(&QueryOutcome) -> bool| {
                    recs.iter()
                        .filter(|r| r.outcome.done_at().is_some_and(|t| t <= now) && f(&r.outcome))
                        .count() as u64
                };
                cmp("sent", *sent, recs.len() as u64);
                cmp(
                    "answered",
                    *answered,
                    done(&|o| matches!(o, QueryOutcome::Answered(_))),
                );
                cmp("failed", *failed, done(&|o| o.failed()));
                cmp(
                    "timedOut",
                    *timed_out,
                    done(&|o| matches!(o, QueryOutcome::TimedOut(_))),
                );
                cmp(
                    "refused",
                    *refused,
                    done(&|o| {
                        matches!(
                            o,
                            QueryOutcome::IcmpError(..)
                                | QueryOutcome::Reset(_)
                                | QueryOutcome::NoPort(_)
                        )
                    }),
                );
            }
            Check::Conntrack {
                node,
                filter,
                count,
                endpoint,
                assured,
                timeout,
                state,
            } => {
                let f = parse_ct_filter(filter).unwrap_or_default();
                let entries = self.nodes[*node].kernel.ct_list(now, &f);
                cmp("entries", Some(*count), entries.len() as u64);
                let ips = endpoint.as_ref().map(|e| self.ep_ips(e));
                for e in &entries {
                    if let Some(ips) = &ips {
                        if !ips.contains(&e.reply.src) {
                            problems.push(format!(
                                "entry goes to {}, expected {}: {}",
                                e.reply.src,
                                endpoint.as_ref().map(|e| e.to_string()).unwrap_or_default(),
                                e.line
                            ));
                        }
                    }
                    if let Some(a) = assured {
                        if e.assured != *a {
                            problems.push(format!(
                                "entry {} [ASSURED], expected {}: {}",
                                if e.assured { "is" } else { "is not" },
                                if *a { "assured" } else { "not assured" },
                                e.line
                            ));
                        }
                    }
                    if let Some(t) = timeout {
                        if !t.accepts(e.timeout_secs) {
                            problems.push(format!(
                                "entry has {} s left, expected {t}: {}",
                                e.timeout_secs, e.line
                            ));
                        }
                    }
                    if let Some(s) = state {
                        if e.tcp_state != Some(s.as_str()) {
                            problems.push(format!(
                                "entry state {}, expected {s}: {}",
                                e.tcp_state.unwrap_or("-"),
                                e.line
                            ));
                        }
                    }
                }
                if let Some(e) = entries.first() {
                    seen.push(format!("first: {}", e.line));
                }
            }
            Check::Endpoint {
                endpoint,
                client,
                from,
                to,
                packets,
                flows,
            } => {
                let to = to.unwrap_or(now).min(now + SimDuration::from_nanos(1));
                let ips = self.ep_ips(endpoint);
                let key = match endpoint {
                    EndpointRef::Pod(k) => Some(k.clone()),
                    EndpointRef::Ip(_) => None,
                };
                let hits: Vec<&Hit> = self
                    .hits
                    .iter()
                    .filter(|h| h.at >= *from && h.at < to)
                    .filter(|h| key.as_ref().map_or(ips.contains(&h.ip), |k| &h.pod == k))
                    .filter(|h| client.is_none_or(|c| h.client == c))
                    .collect();
                let nflows = hits
                    .iter()
                    .map(|h| (h.src, h.proto))
                    .collect::<BTreeSet<_>>()
                    .len();
                cmp("packets", *packets, hits.len() as u64);
                cmp("flows", *flows, nflows as u64);
            }
        }
        let passed = problems.is_empty();
        let detail = if passed {
            seen.join(", ")
        } else {
            problems.join("; ")
        };
        self.log(What::Expectation {
            name: x.name.clone(),
            passed,
            detail: detail.clone(),
        });
        self.results.push(ExpectResult {
            name: x.name.clone(),
            line: x.line,
            at: now.hms().to_string(),
            passed,
            detail,
        });
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
        let now = self.now;
        self.nodes[node].kernel.ct_dump(now)
    }

    /// The number of entries [`Simulation::conntrack_dump`] would show.
    pub fn conntrack_count(&mut self, node: usize) -> usize {
        let now = self.now;
        self.nodes[node]
            .kernel
            .ct_list(now, &Default::default())
            .len()
    }

    /// `iptables-save` of a node now.
    pub fn rules(&self, node: usize) -> String {
        self.nodes[node].kernel.save()
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
        let summary = self.summary();
        Ok(RunResult {
            timeline: self.timeline,
            results: self.results,
            summary,
            events: self.events_processed,
        })
    }

    fn summary(&self) -> String {
        let mut s = String::new();
        let w = self
            .clients
            .iter()
            .map(|c| c.def.name.len())
            .max()
            .unwrap_or(6)
            .max(6);
        s.push_str(&format!(
            "{:<w$}  {:<24} {:>6} {:>8} {:>6} {:>9} {:>7}\n",
            "client", "target", "sent", "answered", "failed", "timed out", "refused"
        ));
        for c in &self.clients {
            let r = c.app.records();
            let count =
                |f: &dyn Fn(&QueryOutcome) -> bool| r.iter().filter(|q| f(&q.outcome)).count();
            s.push_str(&format!(
                "{:<w$}  {:<24} {:>6} {:>8} {:>6} {:>9} {:>7}\n",
                c.def.name,
                c.def.target_text,
                r.len(),
                count(&|o| matches!(o, QueryOutcome::Answered(_))),
                count(&|o| o.failed()),
                count(&|o| matches!(o, QueryOutcome::TimedOut(_))),
                count(&|o| matches!(
                    o,
                    QueryOutcome::IcmpError(..) | QueryOutcome::Reset(_) | QueryOutcome::NoPort(_)
                )),
            ));
        }
        // Per endpoint: packets and flows received, by client.
        let mut per: BTreeMap<(String, IpAddr), EndpointTally> = BTreeMap::new();
        for h in &self.hits {
            let e = per.entry((h.pod.clone(), h.ip)).or_default();
            e.0 += 1;
            e.1.insert((h.src, h.proto));
            *e.2.entry(h.client).or_default() += 1;
        }
        if !self.pods.is_empty() {
            let pw = self.pods.keys().map(|k| k.len()).max().unwrap_or(8).max(8);
            s.push('\n');
            s.push_str(&format!(
                "{:<pw$}  {:<15} {:>8} {:>6}  {}\n",
                "endpoint", "ip", "packets", "flows", "from"
            ));
            for (key, pod) in &self.pods {
                let mut any = false;
                for ip in &pod.ips {
                    let Some((pk, fl, by)) = per.get(&(key.clone(), *ip)) else {
                        continue;
                    };
                    any = true;
                    let from: Vec<String> = by
                        .iter()
                        .map(|(c, n)| format!("{} {n}", self.clients[*c].def.name))
                        .collect();
                    s.push_str(&format!(
                        "{:<pw$}  {:<15} {:>8} {:>6}  {}\n",
                        key,
                        ip.to_string(),
                        pk,
                        fl.len(),
                        from.join(", ")
                    ));
                }
                if !any && pod.stack.servers.len() + pod.state.def.apps.len() > 0 {
                    s.push_str(&format!(
                        "{:<pw$}  {:<15} {:>8} {:>6}\n",
                        key,
                        pod.state.def.ip.to_string(),
                        0,
                        0
                    ));
                }
            }
        }
        s
    }
}

/// Packets, distinct flows and packets per client that reached one endpoint address.
type EndpointTally = (u64, BTreeSet<(SocketAddr, u8)>, BTreeMap<usize, u64>);

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

#[allow(dead_code)]
fn _assert_kinds(k: CtEventKind) -> bool {
    k == CtEventKind::New
}
