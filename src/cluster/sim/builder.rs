//! Building the cluster at time 0: the options of a run ([`RunOptions`]), the builder for
//! what they do not cover ([`SimulationBuilder`]), and [`Simulation::new`], which puts the
//! nodes, hosts, pods, clients, the first EndpointSlices and kube-proxy in place.

use super::*;

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
    /// default such nodes share one instance, with the same results; see
    /// [`crate::cluster::proxy`]).
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
        let pod_routes = node_setup::PodRoutes::of(&sc);
        for (i, n) in sc.nodes.iter().enumerate() {
            owners.insert(n.address, Owner::Node(i));
            if let Some(s) = n.secondary {
                owners.insert(s.address, Owner::Node(i));
            }
            for (dev, a, _) in &n.extra_addresses {
                if dev == "eth0" {
                    owners.insert(*a, Owner::Node(i));
                }
            }
            nodes.push(NodeRt {
                stack: Stack::build(&n.apps, &sc.dns, seed, &format!("node/{}", n.name)),
                def: n.clone(),
                netns: node_netns(&sc, i, pods_on[i], &pod_routes)?,
                veths: VethMap::default(),
                ct_wake: None,
                cpus: (n.cpus > 1).then(|| Box::new(super::cpus::Cpus::new(seed, &n.name, n.cpus))),
            });
        }
        for (i, h) in sc.hosts.iter().enumerate() {
            owners.insert(h.address, Owner::Host(i));
            for a in &h.extra_addresses {
                owners.insert(*a, Owner::Host(i));
            }
        }
        for n in &sc.nodes {
            for a in std::iter::once(n.address).chain(n.secondary.map(|s| s.address)) {
                if let Some(r) = router_address(a, &sc) {
                    owners.entry(r).or_insert(Owner::Router);
                }
            }
        }
        let hosts = sc
            .hosts
            .iter()
            .map(|h| {
                (
                    h.clone(),
                    Stack::build(&h.apps, &sc.dns, seed, &format!("host/{}", h.name)),
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
        let timing = sc.kube_proxy.timing();
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
            // IPVS mode keeps per-node state (addresses, graceful termination).
            && sc.kube_proxy.mode != crate::kubeproxy::ProxyMode::Ipvs
            && sc
                .nodes
                .iter()
                .all(|n| n.state.rules.is_none() && n.state.rules6.is_none())
            && rules_are_node_independent(&all_services)
            && !crate::cluster::topology::node_hints_possible(&sc, &all_services);
        let mut groups: Vec<ProxyGroup> = Vec::new();
        // One proxier per family of each node (`NewDualStackProxier`: a dual-stack node's
        // kube-proxy runs an IPv4 and an IPv6 proxier behind the metaproxier, each its own
        // maps, rules, sync timing and cleanup, one process).
        let node_families: Vec<(usize, crate::k8s::IpFamily)> = (sc.nodes.iter().enumerate())
            .flat_map(|(i, n)| n.families().into_iter().map(move |f| (i, f)))
            .collect();
        for (i, family) in node_families {
            let cfg = proxier_config(&sc, &sc.kube_proxy, i, family);
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
                None => crate::cluster::proxy::settings_cleanup(&sc.kube_proxy, &sc.nodes[i].name),
            };
            groups.push(ProxyGroup::new(
                KubeProxy::new(cfg, timing, strategy, SimTime::ZERO),
                vec![i],
                crate::cluster::proxy::SyncCost::of(&sc.kube_proxy),
            ));
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
            reserved_ips: BTreeSet::new(),
            kp_settings: vec![sc.kube_proxy.clone(); sc.nodes.len()],
            proxy_running: Vec::new(),
            cleanup_factory: cleanup,
            scaled_down: Vec::new(),
            egress: Vec::new(),
            vxlan_rx: None,
            injected: 0,
            sightings: Vec::new(),
            cleanup_tally: CleanupTally::default(),
            cleanup_tally_error: None,
            tap: capture.map(|sink| capture::Tap::new(sink, &sc)),
            pcap: pcap_client::PcapRt::default(),
            lb: load_balancer::LbRt::new(sc.cloud_load_balancer.clone()),
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
            // flanneld's rules (iptables-restore --noflush), there before kube-proxy's.
            if let Some(rules) = node_setup::flannel_rules(&sim.sc, n) {
                sim.node_restore(n, &rules, true);
            }
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
        // One allocation for every pod (a pod's runtime state is about 900 bytes: doubling
        // the vector as pods come would hold up to twice that, and both copies at a move).
        sim.pods.reserve_exact(sim.sc.pods.len());
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
        sim.lb_start(&all_services);
        // Initial objects, seen by every kube-proxy before its first sync at time 0.
        sim.slices = match &sim.sc.endpoint_slices {
            Some(s) => s.clone(),
            None => derive_slices_in(
                &sim.sc.services,
                sim.pods.iter().map(|p| &p.state),
                &ControllerTopology::of_scenario(&sim.sc),
            ),
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
}
