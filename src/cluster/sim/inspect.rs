//! What code outside can read of a running simulation: nodes by name, each node's conntrack
//! table, rules and namespace, where a traced packet enters a node (`nfsim trace`), the
//! kube-proxy instances, and the query records the clients keep.

use super::*;

impl Simulation {
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

    /// The Service and endpoint maps the kube-proxy of `node` derives from the objects it has
    /// seen so far (what its next sync writes): the cluster's truth as that node knows it
    /// (`nfsim doctor SCENARIO`). `None` for a node without kube-proxy.
    pub fn kube_proxy_view(&self, node: usize) -> Option<crate::kubeproxy::ProxyState> {
        self.groups
            .iter()
            .find(|g| g.nodes.contains(&node))
            .map(|g| g.proxy.current_state())
    }

    /// Whether `node` is dual-stack (an address and a pod CIDR of each family, a kube-proxy
    /// proxier per family).
    pub fn is_dual_stack(&self, node: usize) -> bool {
        self.nodes[node].def.secondary.is_some()
    }

    /// The pod CIDR of `node`.
    pub fn pod_cidr(&self, node: usize) -> crate::k8s::Cidr {
        self.nodes[node].def.pod_cidr
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
}
