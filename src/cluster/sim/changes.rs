//! Events that change the cluster beyond pods: Services and EndpointSlices, scaling,
//! kube-proxy's process, `conntrack` commands typed on a node, node reboots and extra
//! iptables rules. The scenario loader checked each against the objects existing at its
//! instant (`scenario::events`); here they happen.

use super::*;

impl Simulation {
    /// Hands a batch of object changes to every running kube-proxy after the watch delay.
    fn push_watch(&mut self, batch: WatchBatch) {
        self.watches.push(Some(batch));
        self.queue.push(
            self.now + self.sc.control_plane.watch_delay,
            Ev::Watch(self.watches.len() - 1),
        );
    }

    /// The kube-proxy instances writing node `n`'s rules: one per family of the node (a
    /// dual-stack node's kube-proxy process runs two proxiers, started and stopped together).
    fn groups_of(&self, n: usize) -> Vec<usize> {
        (0..self.groups.len())
            .filter(|&g| self.groups[g].nodes.contains(&n))
            .collect()
    }

    /// Replaces kube-proxy instance `g` with a fresh process whose first (full) sync is due
    /// at `at`: it lists every Service and EndpointSlice, finds the chains in the node's nat
    /// table, and runs the cleanup of its release from scratch.
    pub(super) fn start_proxy(&mut self, g: usize, at: SimTime) {
        let first = self.groups[g].nodes[0];
        let kp = self.kp_settings[first].clone();
        let family = self.groups[g].proxy.config().family;
        let mut cfg = proxier_config(&self.sc, &kp, first, family);
        cfg.node_name.clone_from(&self.sc.nodes[first].name);
        let timing = kp.timing();
        let strategy = match self.cleanup_factory.as_mut() {
            Some(make) => make(&self.sc.nodes[first].name),
            None => super::super::proxy::settings_cleanup(&kp, &self.sc.nodes[first].name),
        };
        let mut proxy = KubeProxy::new(cfg, timing, strategy, at);
        let members = self.groups[g].nodes.clone();
        for &n in &members {
            self.kp_settings[n] = kp.clone();
        }
        for n in members {
            self.ensure_nfacct(n);
        }
        let now = self.now;
        for s in &self.sc.services {
            proxy.upsert_service(now, s.clone());
        }
        for s in &self.slices {
            proxy.upsert_endpoint_slice(now, s.clone());
        }
        proxy.set_existing_nat_chains(self.nat_chain_names(first));
        let grp = &mut self.groups[g];
        grp.proxy = proxy;
        // A new process has a new GracefulTerminationManager (its list starts empty).
        grp.ipvs_gt.clear();
        grp.wake = None;
        grp.memo = RestoreMemo::new();
        // A restarted kube-proxy starts with nothing in flight (a restore the old process
        // had running is lost with it) and reads the table its predecessor loaded.
        grp.cost = crate::cluster::proxy::SyncCost::of(&kp);
        grp.in_flight = None;
        grp.busy_until = SimTime::ZERO;
        self.proxy_running[g] = true;
        self.arm_proxy(g);
    }

    /// The names of node `n`'s nat chains, as kube-proxy reads them at start-up
    /// (`GetChainsFromTable` over `iptables-save -t nat`).
    pub(super) fn nat_chain_names(&self, n: usize) -> std::collections::BTreeSet<String> {
        self.nodes[n]
            .netns
            .ruleset()
            .chains(sim_netfilter::Table::Nat)
            .iter()
            .map(|c| c.name().to_string())
            .collect()
    }

    /// Creates kube-proxy's nfacct counters on node `n` if its settings turn them on (what
    /// kube-proxy's start-up does with `nfacct add`; existing ones are kept).
    pub(super) fn ensure_nfacct(&mut self, n: usize) {
        if !self.kp_settings[n].nfacct {
            return;
        }
        let ns = &mut self.nodes[n].netns;
        for name in [
            crate::kubeproxy::render::NFACCT_CT_STATE_INVALID,
            crate::kubeproxy::render::NFACCT_LOCALHOST_NODEPORTS,
        ] {
            if !ns.ruleset().nfacct_names().contains(&name) {
                let _ = ns.nfacct_add(name);
            }
        }
    }

    /// Applies `rules` with `iptables-restore` on node `n`, logging a refusal.
    pub(super) fn node_restore(&mut self, n: usize, rules: &str, noflush: bool) {
        let node = self.nodes[n].def.name.clone();
        let cmd = if noflush {
            "iptables-restore --noflush"
        } else {
            "iptables-restore"
        };
        let change = match self.nodes[n].netns.restore(rules, noflush) {
            Ok(_) => format!(
                "{cmd}: {} rule(s) loaded",
                rules
                    .lines()
                    .filter(|l| l.starts_with("-A ") || l.starts_with("-I "))
                    .count()
            ),
            Err(e) => format!("{cmd} FAILED: {e}"),
        };
        self.log(What::Change {
            subject: format!("node {node}"),
            change,
        });
    }

    /// Loads node `n`'s saved state (`nodes[].state`) at time 0: its `iptables-save` as
    /// `iptables-restore` (the tables it names replaced), its `conntrack -L` entries with the
    /// seconds left they print (their `[NEW]` events are the starting state, not traffic). A
    /// listed entry's age saturates at the run's start (docs/scenario-reference.md).
    pub(super) fn load_node_state(&mut self, n: usize) -> Result<(), SimError> {
        let state = self.nodes[n].def.state.clone();
        let node = self.nodes[n].def.name.clone();
        if let Some((file, text)) = &state.rules {
            self.nodes[n]
                .netns
                .restore_with_counters(text, false)
                .map_err(|e| SimError::Netns {
                    node: node.clone(),
                    message: format!("state.rules {file}: {e}"),
                })?;
            let rules = rule_lines(text);
            self.log(What::Change {
                subject: format!("node {node}"),
                change: format!("saved state: iptables-restore of {file}: {rules} rule(s) loaded"),
            });
        }
        if let Some((file, text)) = &state.rules6 {
            self.nodes[n]
                .netns
                .restore_family(sim_netfilter::Family::Ipv6, text, false, true)
                .map_err(|e| SimError::Netns {
                    node: node.clone(),
                    message: format!("state.rules6 {file}: {e}"),
                })?;
            let rules = rule_lines(text);
            self.log(What::Change {
                subject: format!("node {node}"),
                change: format!("saved state: ip6tables-restore of {file}: {rules} rule(s) loaded"),
            });
        }
        if let Some((file, entries)) = &state.conntrack {
            let now = self.now;
            let ns = &mut self.nodes[n].netns;
            let report = sim_conntrack::load_listing(
                ns.conntrack_mut(),
                now,
                entries,
                sim_conntrack::DEFAULT_ASSUMED_AGE,
            )
            .map_err(|e| SimError::Netns {
                node: node.clone(),
                message: format!("state.conntrack {file}: {e}"),
            })?;
            ns.drain_conntrack_events();
            self.log(What::Change {
                subject: format!("node {node}"),
                change: format!("saved state: conntrack from {file}: {report}"),
            });
        }
        Ok(())
    }

    /// Runs one of the actions of `scenario::events`.
    pub(super) fn change(&mut self, action: Action) -> Result<(), SimError> {
        match action {
            Action::UpsertService { service, created } => {
                let key = service.key();
                if created {
                    self.log_service_allocation(&service);
                }
                let ports: Vec<String> = service
                    .spec
                    .ports
                    .iter()
                    .map(|p| format!("{}/{}", p.port, p.protocol))
                    .collect();
                self.log(What::Change {
                    subject: format!("service {key}"),
                    change: format!(
                        "{} ({} {})",
                        if created { "created" } else { "updated" },
                        service
                            .cluster_ip_of(self.sc.family())
                            .map(|ip| ip.to_string())
                            .unwrap_or_else(|| "None".into()),
                        ports.join(",")
                    ),
                });
                match self.sc.services.iter().position(|s| s.key() == key) {
                    Some(i) => self.sc.services[i] = (*service).clone(),
                    None => self.sc.services.push((*service).clone()),
                }
                self.push_watch(WatchBatch {
                    services: vec![*service],
                    ..WatchBatch::default()
                });
                // The EndpointSlice controller follows the new selector and ports.
                self.pod_changed();
            }
            Action::DeleteService { namespace, name } => {
                self.log(What::Change {
                    subject: format!("service {namespace}/{name}"),
                    change: "deleted".into(),
                });
                self.sc
                    .services
                    .retain(|s| !(s.metadata.namespace == namespace && s.metadata.name == name));
                let mut batch = WatchBatch {
                    service_deletes: vec![(namespace.clone(), name.clone())],
                    ..WatchBatch::default()
                };
                if self.sc.endpoint_slices.is_some() {
                    // Given slices go with their Service (garbage collection by owner).
                    let gone: Vec<(String, String)> = self
                        .slices
                        .iter()
                        .filter(|s| {
                            s.metadata.namespace == namespace
                                && s.service_name() == Some(name.as_str())
                        })
                        .map(|s| (s.metadata.namespace.clone(), s.metadata.name.clone()))
                        .collect();
                    self.slices.retain(|s| {
                        !(s.metadata.namespace == namespace
                            && s.service_name() == Some(name.as_str()))
                    });
                    batch.deletes = gone;
                }
                self.push_watch(batch);
                self.pod_changed();
            }
            Action::UpsertEndpointSlice(slice) => {
                let key = slice.key();
                let eps: Vec<String> = slice
                    .endpoints
                    .iter()
                    .map(|e| {
                        let a = e
                            .addresses
                            .first()
                            .map(|a| a.to_string())
                            .unwrap_or_default();
                        if e.conditions.is_ready() {
                            a
                        } else {
                            format!("{a} (not ready)")
                        }
                    })
                    .collect();
                self.log(What::Change {
                    subject: format!("endpointslice {key}"),
                    change: format!(
                        "updated: {}",
                        if eps.is_empty() {
                            "(none)".to_string()
                        } else {
                            eps.join(", ")
                        }
                    ),
                });
                match self.slices.iter().position(|s| s.key() == key) {
                    Some(i) => self.slices[i] = (*slice).clone(),
                    None => self.slices.push((*slice).clone()),
                }
                self.push_watch(WatchBatch {
                    upserts: vec![*slice],
                    ..WatchBatch::default()
                });
            }
            Action::DeleteEndpointSlice { namespace, name } => {
                self.log(What::Change {
                    subject: format!("endpointslice {namespace}/{name}"),
                    change: "deleted".into(),
                });
                self.slices
                    .retain(|s| !(s.metadata.namespace == namespace && s.metadata.name == name));
                self.push_watch(WatchBatch {
                    deletes: vec![(namespace, name)],
                    ..WatchBatch::default()
                });
            }
            Action::Scale {
                namespace,
                selector,
                replicas,
                grace_period,
            } => self.scale(&namespace, &selector, replicas, grace_period)?,
            Action::KubeProxy {
                nodes,
                op,
                settings,
            } => {
                let mut done = BTreeSet::new();
                let mut logged = BTreeSet::new();
                for n in nodes {
                    if let Some(s) = &settings {
                        self.kp_settings[n] = (**s).clone();
                    }
                    for g in self.groups_of(n) {
                        if !done.insert(g) {
                            continue;
                        }
                        // A dual-stack node's two proxiers are one process: one line per node.
                        let names: Vec<String> = self.groups[g]
                            .nodes
                            .iter()
                            .filter(|&&i| logged.insert(i))
                            .map(|&i| self.nodes[i].def.name.clone())
                            .collect();
                        let change = match op {
                            ProxyOp::Stop => {
                                self.proxy_running[g] = false;
                                "stopped (its rules stay; no syncs, no cleanup)".to_string()
                            }
                            ProxyOp::Restart | ProxyOp::Start => {
                                let now = self.now;
                                self.start_proxy(g, now);
                                let kp = &self.kp_settings[n];
                                format!(
                                    "{} (release {}{}): full sync from scratch",
                                    if op == ProxyOp::Restart {
                                        "restarted"
                                    } else {
                                        "started"
                                    },
                                    kp.release,
                                    if settings.is_some() {
                                        ", new settings"
                                    } else {
                                        ""
                                    }
                                )
                            }
                        };
                        for name in names {
                            self.log(What::Change {
                                subject: format!("kube-proxy {name}"),
                                change: change.clone(),
                            });
                        }
                    }
                }
            }
            Action::Conntrack { nodes, command } => {
                for n in nodes {
                    self.conntrack_command(n, &command);
                }
            }
            Action::RebootNode {
                node,
                kube_proxy_after,
            } => {
                let now = self.now;
                let name = self.nodes[node].def.name.clone();
                self.nodes[node].netns.reboot(now);
                self.nodes[node].ct_wake = None;
                self.log(What::Change {
                    subject: format!("node {name}"),
                    change: format!(
                        "rebooted: conntrack table and iptables rules empty; kube-proxy's first sync in {kube_proxy_after}"
                    ),
                });
                for (rules, noflush) in self.nodes[node].def.extra_rules.clone() {
                    self.node_restore(node, &rules, noflush);
                }
                for g in self.groups_of(node) {
                    self.start_proxy(g, now + kube_proxy_after);
                }
                self.after_kernel(node);
            }
            Action::IptablesRestore {
                nodes,
                rules,
                noflush,
            } => {
                for n in nodes {
                    self.node_restore(n, &rules, noflush);
                    self.after_kernel(n);
                }
            }
            Action::OomKill { .. }
            | Action::DeletePod { .. }
            | Action::EndpointOf(_)
            | Action::CreatePod(_)
            | Action::Readiness { .. } => {
                unreachable!("pod events are run by Simulation::action")
            }
        }
        Ok(())
    }

    /// `conntrack CMD` typed on node `n`: the timeline shows what it printed, and its
    /// deletions' `[DESTROY]` events.
    fn conntrack_command(&mut self, n: usize, command: &ConntrackCommand) {
        let now = self.now;
        let node = self.nodes[n].def.name.clone();
        let text = command.to_string();
        let filter = |f: &str| Filter::parse(f).unwrap_or_else(|_| Filter::all());
        let mut out: Vec<String> = Vec::new();
        let ct = self.nodes[n].netns.conntrack_mut();
        match command {
            ConntrackCommand::Delete(f) => {
                let gone = ct.delete(now, &filter(f));
                out.extend(gone.iter().map(|e| e.list_line(now).to_string()));
                out.push(sim_conntrack::entry::deleted_summary(gone.len()));
            }
            ConntrackCommand::Flush => {
                ct.delete(now, &Filter::all());
                out.push(
                    "conntrack v1.4.7 (conntrack-tools): connection tracking table has been emptied."
                        .into(),
                );
            }
            ConntrackCommand::List(f) => {
                let list = ct.list(now, &filter(f));
                out.extend(list.iter().map(|e| e.list_line(now).to_string()));
                out.push(sim_conntrack::entry::shown_summary(list.len()));
            }
            ConntrackCommand::Count => out.push(ct.count().to_string()),
            ConntrackCommand::Stats => out.push(ct.stats().to_string().trim_end().to_string()),
        }
        for output in out {
            self.log(What::Command {
                node: node.clone(),
                command: text.clone(),
                output,
            });
        }
        self.after_kernel(n);
    }

    /// The lowest address of node `n`'s pod CIDR after the node's own that no pod of the
    /// run has had or will have (scenario pods and pods events create).
    fn free_pod_ip(&self, n: usize) -> Option<IpAddr> {
        self.free_ip_in(self.nodes[n].def.pod_cidr)
    }

    /// On a dual-stack node, a new address of its second family for pod `def` (as
    /// [`Simulation::free_pod_ip`] for the second pod CIDR); `None` on a single-stack node.
    pub(super) fn free_secondary_ip(&mut self, def: &PodDef) -> Option<IpAddr> {
        let node = &self.nodes[def.node].def;
        let cidr = node.secondary?.pod_cidr;
        let from = format!("{}'s pod CIDR {cidr}", node.name);
        let ip = self.free_ip_in(cidr)?;
        self.sc
            .allocated
            .insert((format!("pod {}", def.key()), ip), from);
        // Taken from now on (a pod's addresses are kept in `ips` once it exists).
        self.reserved_ips.insert(ip);
        Some(ip)
    }

    fn free_ip_in(&self, cidr: crate::k8s::Cidr) -> Option<IpAddr> {
        let mut used: BTreeSet<IpAddr> = self
            .pods
            .iter()
            .flat_map(|p| p.ips.iter().copied())
            .collect();
        used.extend(self.reserved_ips.iter().copied());
        used.extend(self.sc.pods.iter().flat_map(PodDef::ips));
        for e in &self.sc.events {
            match &e.action {
                Action::CreatePod(d) => {
                    used.extend(d.ips());
                }
                Action::DeletePod {
                    recreate: Some(r), ..
                } => {
                    used.insert(r.ip);
                }
                _ => {}
            }
        }
        crate::scenario::ipam::first_free_pod_ip(&cidr, &used)
    }

    /// Scales the pods `selector` matches in `namespace` to `replicas`: removes running ones
    /// (the last by name first) or brings back those an earlier scale removed (same name and
    /// node, a new IP; not Ready until their probe passes; after the old one is gone).
    fn scale(
        &mut self,
        namespace: &str,
        selector: &BTreeMap<String, String>,
        replicas: u32,
        grace_period: Option<SimDuration>,
    ) -> Result<(), SimError> {
        let matches = |d: &PodDef| {
            d.namespace == namespace && selector.iter().all(|(k, v)| d.labels.get(k) == Some(v))
        };
        let live: Vec<usize> = self
            .pod_ids
            .values()
            .copied()
            .filter(|&id| {
                let p = &self.pods[id];
                p.state.phase == Phase::Running && matches(&p.state.def)
            })
            .collect();
        let sel: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
        self.log(What::Change {
            subject: format!("scale {namespace}/{{{}}}", sel.join(",")),
            change: format!("{} -> {replicas} replicas", live.len()),
        });
        let want = replicas as usize;
        if live.len() > want {
            for &id in live[want..].iter().rev() {
                if self.delete_pod(id, grace_period).is_some() {
                    self.scaled_down.push(self.pods[id].state.def.clone());
                }
            }
            return Ok(());
        }
        let mut need = want - live.len();
        let mut i = 0;
        while need > 0 && i < self.scaled_down.len() {
            if !matches(&self.scaled_down[i]) {
                i += 1;
                continue;
            }
            let mut def = self.scaled_down.remove(i);
            def.ready = false;
            // A new pod gets a new IP: the lowest free one of its node's pod CIDR.
            if let Some(ip) = self.free_pod_ip(def.node) {
                def.ip = ip;
                let node = &self.nodes[def.node].def;
                let from = format!("{}'s pod CIDR {}", node.name, node.pod_cidr);
                self.sc
                    .allocated
                    .insert((format!("pod {}", def.key()), ip), from);
            }
            def.secondary_ip = self.free_secondary_ip(&def);
            need -= 1;
            match self
                .pod_ids
                .get(&def.key())
                .map(|&id| self.pods[id].state.phase)
            {
                Some(Phase::Terminating(until)) => {
                    self.recreates.push(def);
                    self.queue
                        .push(until, Ev::Recreate(self.recreates.len() - 1));
                }
                _ => self.add_pod(def, true)?,
            }
        }
        Ok(())
    }
}

/// The `-A` / `-I` lines of a saved ruleset, those with `[packets:bytes]` in front
/// (`iptables-save -c`) included.
fn rule_lines(text: &str) -> usize {
    text.lines()
        .map(
            |l| match l.strip_prefix('[').and_then(|r| r.split_once("] ")) {
                Some((_, rest)) => rest,
                None => l,
            },
        )
        .filter(|l| l.starts_with("-A ") || l.starts_with("-I "))
        .count()
}
