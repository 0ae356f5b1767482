//! kube-proxy on the nodes: the kubeproxy module's [`KubeProxy`] (rendering, sync timing,
//! cleanup), its output applied to each node's [`Netns`] as kube-proxy applies it, and its
//! conntrack cleanup run against the nodes' real tables.
//!
//! A sync is applied as kube-proxy does it (`syncProxyRules`): on a full sync the jump rules
//! first, each as `EnsureChain` (`iptables -N` unless the chain exists) and
//! `EnsureRule(Prepend)` (`iptables -C`, then `iptables -I` when missing), then the payload
//! with `iptables-restore --noflush`. The outcome goes back to kube-proxy
//! ([`KubeProxy::complete_sync`]), which then runs its cleanup strategy through
//! [`ConntrackOps`] on the node's table.
//!
//! # Shared instances
//!
//! Every kube-proxy of a cluster receives the same objects at the same instants and has the
//! same timing, so nodes whose configuration renders identical rules sync at the same
//! instants and write the same text. [`ProxyGroup`] runs one [`KubeProxy`] for such a set of
//! nodes and applies its output to each of them; the cleanup runs once against all their
//! tables together ([`NodesConntrack`]: a list spans every table, a delete is applied to
//! every table), which deletes on each node exactly what that node's own kube-proxy would
//! (the filters a strategy derives from an entry select only entries that are stale for the
//! same reason on any node). Rules are identical when the configurations differ only in node
//! name and address and no Service reads either: no `internalTrafficPolicy: Local`, no
//! `externalTrafficPolicy: Local`, no `loadBalancerSourceRanges` ([`rules_are_node_independent`]).
//! A user-supplied cleanup ([`CleanupFactory`]) always gets one kube-proxy per node.

use crate::k8s::{IpFamily, Service};
use crate::kubeproxy::ct_adapter::{from_entry, to_filter};
use crate::kubeproxy::model::service_ports;
use crate::kubeproxy::sync_cost::{DeleteCost, PayloadShape, SyncCostModel};
use crate::kubeproxy::{
    CleanupReport, ConntrackCleanup, ConntrackOps, CtEntry, CtFilter, JumpRule, KubeProxy, Latest,
    NoCleanup, ProxierConfig, ReconcileTrigger, SyncOutput, Table as KpTable, V128, V131, V132,
    V133,
};
use crate::scenario::model::{Cleanup, Release};
use sim_conntrack::Conntrack;
use sim_core::{SimDuration, SimTime};
use sim_netfilter::netns::Netns;
use sim_netfilter::{rule_spec, RestoreMemo, Table};
use std::sync::Arc;

/// Makes the cleanup strategy of one node's kube-proxy; called once per node with the node's
/// name, in scenario order. See [`crate::cluster::sim::SimulationBuilder::cleanup`].
pub type CleanupFactory = Box<dyn FnMut(&str) -> Box<dyn ConntrackCleanup>>;

/// The cleanup strategy a scenario's `kubeProxy.release` selects (docs/kube-proxy-model.md §6).
pub fn release_cleanup(release: Release) -> Box<dyn ConntrackCleanup> {
    release_cleanup_on(release, ReconcileTrigger::default())
}

/// [`release_cleanup`] with the reconcilers run on `trigger` (the event-based cleanups have
/// none: they act on what changed at each sync). `nfsim doctor` runs each release's cleanup
/// with [`ReconcileTrigger::EverySync`] on a copy of a table: what its next reconcile does.
pub fn release_cleanup_on(
    release: Release,
    trigger: ReconcileTrigger,
) -> Box<dyn ConntrackCleanup> {
    match release.cleanup() {
        Cleanup::None => Box::new(NoCleanup),
        Cleanup::EventReady => Box::new(V128),
        Cleanup::EventPresence => Box::new(V131 { serving_fix: false }),
        Cleanup::EventServing => Box::new(V131 { serving_fix: true }),
        Cleanup::Reconciler127318 => Box::new(V132 { trigger }),
        Cleanup::Reconciler130484 => Box::new(V133 {
            trigger,
            reply_port: false,
        }),
        Cleanup::Reconciler130542 => Box::new(V133 {
            trigger,
            reply_port: true,
        }),
        Cleanup::Reconciler139629 => Box::new(Latest {
            trigger,
            deleted_services: false,
        }),
        Cleanup::Latest => Box::new(Latest {
            trigger,
            deleted_services: true,
        }),
    }
}

/// The cleanup a node's kube-proxy runs under `settings`: the external reconciler process of
/// `kubeProxy.cleanup` if there is one, else the release's.
pub fn settings_cleanup(
    settings: &crate::scenario::model::KubeProxySettings,
    node: &str,
) -> Box<dyn ConntrackCleanup> {
    match &settings.cleanup {
        Some(c) => Box::new(crate::kubeproxy::ExternalReconciler::new(
            c.command.clone(),
            node,
            c.timeout,
        )),
        None => release_cleanup(settings.release),
    }
}

/// Whether no Service makes kube-proxy's rules depend on which node renders them (see the
/// module documentation).
pub fn rules_are_node_independent(services: &[Service]) -> bool {
    services.iter().flat_map(service_ports).all(|p| {
        !p.internal_policy_local
            && !p.external_policy_local
            && p.load_balancer_source_ranges.is_empty()
            && p.health_check_node_port.is_none()
    })
}

/// Whether two configurations render the same rules for node-independent Services: equal
/// but for the node's name and address.
pub fn same_rendering(a: &ProxierConfig, b: &ProxierConfig) -> bool {
    let mut b = b.clone();
    b.node_name.clone_from(&a.node_name);
    b.node_ip = a.node_ip;
    *a == b
}

fn table(t: KpTable) -> Table {
    match t {
        KpTable::Filter => Table::Filter,
        KpTable::Nat => Table::Nat,
    }
}

/// Installs one jump rule as kube-proxy's `EnsureChain` + `EnsureRule(Prepend)` do: creates
/// the target chain if it is missing (`iptables -N`), then inserts the rule at the top of the
/// built-in chain unless an identical rule is already there (`iptables -C`, which compares
/// the rule's specification; here its iptables-save form).
pub fn ensure_jump_rule(ns: &mut Netns, j: &JumpRule) -> Result<(), String> {
    let t = table(j.table);
    let fam = netns_family(j.family);
    let run = |ns: &mut Netns, args: &str| match j.family {
        IpFamily::IPv4 => ns.iptables(t, args),
        IpFamily::IPv6 => ns.ip6tables(t, args),
    };
    if ns.ruleset_of(fam).chain(t, j.target).is_none() {
        run(ns, &format!("-N {}", j.target)).map_err(|e| {
            format!(
                "{} -t {} -N {}: {e}",
                crate::kubeproxy::iptables_command(j.family),
                j.table.name(),
                j.target
            )
        })?;
    }
    let spec = j.rule_text();
    let present = ns
        .ruleset_of(fam)
        .rules(t, j.chain)
        .is_some_and(|rules| rules.iter().any(|r| rule_spec(r) == spec));
    if !present {
        run(ns, &format!("-I {} {spec}", j.chain)).map_err(|e| format!("{}: {e}", j.command()))?;
    }
    Ok(())
}

/// The namespace's rule family of an IP family.
fn netns_family(f: IpFamily) -> sim_netfilter::Family {
    match f {
        IpFamily::IPv4 => sim_netfilter::Family::Ipv4,
        IpFamily::IPv6 => sim_netfilter::Family::Ipv6,
    }
}

/// Applies one sync to a node: the jump rules (full syncs), then `iptables-restore
/// --noflush` of the payload. On error, what the restore would have changed is left
/// unchanged (the restore is atomic), as with the real tool. With a `memo` shared by the
/// nodes a sync is applied to, nodes whose rules are identical get the outcome of the first
/// one's restore instead of parsing the payload again (same result: see [`RestoreMemo`]);
/// the memo comes with `out.restore` as one `Arc` given to every node, so that the memo
/// recognises the payload without comparing its text node after node.
pub fn apply_sync(
    ns: &mut Netns,
    out: &SyncOutput,
    memo: Option<(&mut RestoreMemo, &Arc<str>)>,
) -> Result<(), String> {
    if out.mode == crate::kubeproxy::ProxyMode::Nftables {
        // The stale-chain deletion is a transaction of its own; its failure is logged by
        // kube-proxy and retried, never fatal.
        if let Some(c) = &out.nft_cleanup {
            let _ = ns.nft_apply("kube-proxy-stale-chains", c, out.at);
        }
        return ns
            .nft_apply("kube-proxy", &out.restore, out.at)
            .map(|_| ())
            .map_err(|e| format!("nft -f: {e}"));
    }
    if let Some(ipvs) = &out.ipvs {
        // IPVS mode: the sets first (`ensureIPSet`, `syncIPSetEntries`), since the rules the
        // restore loads name them (`-m set --match-set`).
        ns.ipset_restore(&ipvs.ipset_restore)
            .map_err(|e| format!("ipset restore: {e}"))?;
    }
    for j in &out.jump_rules {
        ensure_jump_rule(ns, j)?;
    }
    if out.family == IpFamily::IPv6 {
        // `ip6tables-restore --noflush`: the IPv6 proxier's payload, into the node's
        // ip6tables (no memo: the memo holds IPv4 restores).
        return ns
            .restore_family(sim_netfilter::Family::Ipv6, &out.restore, true, false)
            .map(|_| ())
            .map_err(|e| format!("ip6tables-restore --noflush: {e}"));
    }
    match memo {
        Some((m, payload)) => {
            debug_assert_eq!(**payload, *out.restore);
            ns.restore_shared(payload, true, m)
        }
        None => ns.restore(&out.restore, true),
    }
    .map(|_| ())
    .map_err(|e| format!("iptables-restore --noflush: {e}"))
}

/// The number of rules (`-A` lines) a payload writes into the nat table.
pub fn nat_rules_written(restore: &str) -> usize {
    let mut in_nat = false;
    let mut n = 0;
    for line in restore.lines() {
        if let Some(t) = line.strip_prefix('*') {
            in_nat = t.trim() == "nat";
        } else if in_nat && line.starts_with("-A ") {
            n += 1;
        }
    }
    n
}

/// An entry a cleanup deleted on one node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Deleted {
    /// Which deletion request of the [`CleanupReport`] deleted it (its index).
    pub request: usize,
    /// The node (index).
    pub node: usize,
    /// The entry's `conntrack -L` line as it was.
    pub line: String,
    /// The entry as it was.
    pub entry: sim_conntrack::CtEntry,
    /// When it was deleted.
    pub at: SimTime,
}

/// [`ConntrackOps`] over the tables of one or more nodes at one instant: `list` returns every
/// table's live entries (node by node, each in its dump order), `delete` deletes what matches
/// in every table (with the `[DESTROY] … [USERSPACE]` events `conntrack -D` causes) and
/// records each deleted entry.
pub struct NodesConntrack<'a> {
    tables: Vec<(usize, &'a mut Conntrack)>,
    now: SimTime,
    requests: usize,
    /// `list` calls made so far (each one `conntrack -L` / a netlink dump).
    pub lists: usize,
    /// Entries the `list` calls returned, counted on the largest table each time (every
    /// node's kube-proxy dumps its own table, in parallel with the others).
    pub listed: usize,
    /// The entries deleted so far.
    pub deleted: Vec<Deleted>,
}

impl<'a> NodesConntrack<'a> {
    /// The tables of the nodes given as (node index, table), at `now`.
    pub fn new(tables: Vec<(usize, &'a mut Conntrack)>, now: SimTime) -> NodesConntrack<'a> {
        NodesConntrack {
            tables,
            now,
            requests: 0,
            lists: 0,
            listed: 0,
            deleted: Vec::new(),
        }
    }
}

impl ConntrackOps for NodesConntrack<'_> {
    fn list(&mut self, filter: &CtFilter) -> Vec<CtEntry> {
        let f = to_filter(filter);
        self.lists += 1;
        let mut out = Vec::new();
        let mut most = 0;
        for (_, t) in &self.tables {
            let before = out.len();
            out.extend(t.list(self.now, &f).iter().map(from_entry));
            most = most.max(out.len() - before);
        }
        self.listed += most;
        out
    }

    fn delete(&mut self, filter: &CtFilter) -> usize {
        let f = to_filter(filter);
        let request = self.requests;
        self.requests += 1;
        let mut n = 0;
        for (node, t) in &mut self.tables {
            for e in t.delete(self.now, &f) {
                n += 1;
                self.deleted.push(Deleted {
                    request,
                    node: *node,
                    line: e.list_line(self.now).to_string(),
                    entry: e,
                    at: self.now,
                });
            }
        }
        n
    }
}

/// One kube-proxy instance and the nodes it writes to (one node, or several whose rules are
/// identical; see the module documentation).
pub struct ProxyGroup {
    /// The kube-proxy.
    pub proxy: KubeProxy,
    /// The nodes (indices, ascending).
    pub nodes: Vec<usize>,
    /// The instant a wake-up is queued for, if any.
    pub wake: Option<SimTime>,
    /// Restores done for the group's nodes, reused by the other nodes (groups of more than
    /// one node).
    pub memo: RestoreMemo,
    /// What a sync costs in simulated time (`None`: `kubeProxy.syncCost: instant`).
    pub cost: Option<SyncCost>,
    /// A sync started and not yet applied (its restore still running).
    pub in_flight: Option<InFlight>,
    /// When the last sync ends: the runner starts none before (kube-proxy's sync loop runs
    /// one `syncProxyRules` at a time).
    pub busy_until: SimTime,
    /// Rules the last full sync loaded (the table iptables-nft / nft read back).
    pub loaded_rules: usize,
    /// IPVS mode: each node's `GracefulTerminationManager` (a new process starts a new
    /// one: clear it when the kube-proxy is replaced).
    pub ipvs_gt: std::collections::BTreeMap<usize, crate::kubeproxy::ipvs::GracefulTermination>,
}

/// `kubeProxy.syncCost: modelled`: the calibrated model and how the release's reconciler
/// deletes.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyncCost {
    /// The model.
    pub model: SyncCostModel,
    /// How deletes are charged.
    pub deletes: DeleteCost,
}

impl SyncCost {
    /// The cost of a kube-proxy run with `settings`, if they model it.
    pub fn of(settings: &crate::scenario::model::KubeProxySettings) -> Option<SyncCost> {
        if settings.sync_cost != crate::scenario::model::SyncCostMode::Modelled {
            return None;
        }
        Some(SyncCost {
            model: SyncCostModel::CALIBRATED,
            deletes: if settings.cleanup.is_some() {
                DeleteCost::NotCharged
            } else {
                release_delete_cost(settings.release)
            },
        })
    }
}

/// How `release`'s conntrack cleanup sends its deletes: the reconcilers of v1.32 to v1.35 one
/// netlink request per flow, v1.36 and later batched (kubernetes #135511); the event-based
/// cleanups of v1.31 and earlier are not charged (docs/kube-proxy-model.md §5a).
pub fn release_delete_cost(release: Release) -> DeleteCost {
    match release.cleanup() {
        Cleanup::None | Cleanup::EventReady | Cleanup::EventPresence | Cleanup::EventServing => {
            DeleteCost::NotCharged
        }
        _ if matches!(release.name(), "v1.36" | "v1.37" | "latest") => DeleteCost::Batched,
        _ => DeleteCost::PerEntry,
    }
}

/// A sync whose restore is still running: what it writes, when it started, and its modelled
/// restore time.
#[derive(Clone, Debug)]
pub struct InFlight {
    /// kube-proxy's output, rendered when the sync started.
    pub output: SyncOutput,
    /// When the sync started.
    pub started: SimTime,
    /// The restore's modelled time.
    pub restore: SimDuration,
}

/// What one sync did on one node, for the timeline.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSync {
    /// The node (index).
    pub node: usize,
    /// Whether applying the sync failed there, and why.
    pub error: Option<String>,
}

/// What one sync of a [`ProxyGroup`] did.
#[derive(Clone, Debug)]
pub struct SyncResult {
    /// kube-proxy's output.
    pub output: SyncOutput,
    /// Per node, in group order.
    pub nodes: Vec<NodeSync>,
    /// The cleanup's report (empty after a failed sync).
    pub cleanup: CleanupReport,
    /// The entries the cleanup deleted.
    pub deleted: Vec<Deleted>,
    /// The cleanup's `list` calls.
    pub list_calls: usize,
    /// Entries those calls returned (on the largest table).
    pub listed: usize,
    /// `kubeProxy.syncCost: modelled`: the restore's and the cleanup's modelled times.
    pub took: Option<(SimDuration, SimDuration)>,
}

impl ProxyGroup {
    /// `proxy` writing to `nodes`, its syncs costing `cost` (`None`: instant).
    pub fn new(proxy: KubeProxy, nodes: Vec<usize>, cost: Option<SyncCost>) -> ProxyGroup {
        ProxyGroup {
            proxy,
            nodes,
            wake: None,
            memo: RestoreMemo::new(),
            cost,
            in_flight: None,
            busy_until: SimTime::ZERO,
            loaded_rules: 0,
            ipvs_gt: std::collections::BTreeMap::new(),
        }
    }

    /// When the group next has work: its kube-proxy's next sync, or in IPVS mode a node's
    /// graceful-termination check.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        let gt = self.ipvs_gt.values().map(|g| g.poll_timeout()).min();
        match (self.proxy.poll_timeout(), gt) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// IPVS mode: runs each node's graceful-termination check due at `now` (`tryDeleteRs`),
    /// and gives kube-proxy the node's addresses for its NodePort virtual servers.
    fn ipvs_housekeeping(&mut self, now: SimTime, nodes: &mut [(usize, &mut Netns)]) {
        if self.proxy.config().mode != crate::kubeproxy::ProxyMode::Ipvs {
            return;
        }
        for (i, ns) in nodes.iter_mut() {
            if let Some(gt) = self.ipvs_gt.get_mut(i) {
                if gt.poll_timeout() <= now {
                    ns.ipvs_expire(now);
                    gt.on_timeout(
                        now,
                        &mut crate::kubeproxy::ipvs::kernel::KernelIpvs(ns.ipvs_mut()),
                    );
                }
            }
        }
        if let Some((_, ns)) = nodes.first() {
            let family = self.proxy.config().family;
            self.proxy
                .set_ipvs_node_addresses(crate::kubeproxy::ipvs::kernel::node_addresses(
                    ns, family,
                ));
        }
    }

    /// Runs the sync due at `now`, if any: applies it to every node of the group (`nodes`:
    /// each node's index and namespace), reports the outcome to kube-proxy, and runs the
    /// cleanup against the nodes' tables. `tick` is called after each node (a big ruleset
    /// takes a while to load into many nodes: it lets a caller show progress).
    pub fn on_timeout(
        &mut self,
        now: SimTime,
        nodes: Vec<(usize, &mut Netns)>,
        tick: &mut dyn FnMut(),
    ) -> Option<SyncResult> {
        let mut nodes = nodes;
        self.ipvs_housekeeping(now, &mut nodes);
        let output = self.proxy.on_timeout(now)?;
        Some(self.apply(now, output, nodes, tick))
    }

    /// Starts the sync due at `now`, if any, under `kubeProxy.syncCost: modelled`: renders
    /// it (kube-proxy reads its maps when the sync starts), charges the restore's modelled
    /// time and keeps it [`InFlight`]. Returns when the restore ends: then call
    /// [`ProxyGroup::finish`]. Nothing starts while a sync is in flight or before the last
    /// one ended.
    pub fn start(&mut self, now: SimTime, cost: &SyncCost) -> Option<SimTime> {
        if self.in_flight.is_some() || self.busy_until > now {
            return None;
        }
        let output = self.proxy.on_timeout(now)?;
        let nft = output.mode == crate::kubeproxy::ProxyMode::Nftables;
        let shape = if nft {
            PayloadShape::of_nft(&output.restore)
        } else {
            PayloadShape::of_iptables(&output.restore)
        };
        let full = output.kind == crate::kubeproxy::SyncKind::Full;
        let restore =
            SimDuration::from_nanos(cost.model.restore_ns(nft, full, &shape, self.loaded_rules));
        if full {
            self.loaded_rules = shape.rules;
        }
        let end = now + restore;
        self.busy_until = end;
        self.in_flight = Some(InFlight {
            output,
            started: now,
            restore,
        });
        Some(end)
    }

    /// Ends the restore of the sync in flight at `now`: applies it to the nodes (the rules
    /// take effect now), runs the cleanup, and charges the cleanup's modelled time; the
    /// sync ends after it, and the runner's next run counts from then
    /// (`BoundedFrequencyRunner.tryRun` sets `lastRun` after the sync function returns).
    pub fn finish(
        &mut self,
        now: SimTime,
        cost: &SyncCost,
        nodes: Vec<(usize, &mut Netns)>,
        tick: &mut dyn FnMut(),
    ) -> Option<SyncResult> {
        let f = self.in_flight.take()?;
        let mut r = self.apply(now, f.output, nodes, tick);
        // A delete request is one flow on the wire whatever filter chose it (netlink's
        // ConntrackDeleteFilters dumps and deletes flow by flow); each node deletes its own.
        let mut per_node: std::collections::BTreeMap<usize, usize> = Default::default();
        for d in &r.deleted {
            *per_node.entry(d.node).or_default() += 1;
        }
        let flows = per_node.values().copied().max().unwrap_or(0);
        let cleanup = SimDuration::from_nanos(cost.model.cleanup_ns(
            r.list_calls,
            r.listed,
            flows,
            cost.deletes,
        ));
        self.busy_until = now + cleanup;
        self.proxy.sync_ended(self.busy_until);
        r.took = Some((f.restore, cleanup));
        r.output.at = f.started;
        Some(r)
    }

    /// Applies `output` at `now` (see [`ProxyGroup::on_timeout`]).
    fn apply(
        &mut self,
        now: SimTime,
        mut output: SyncOutput,
        mut nodes: Vec<(usize, &mut Netns)>,
        tick: &mut dyn FnMut(),
    ) -> SyncResult {
        // The rules go in now (nft's timeouts count from the transaction).
        output.at = now;
        let mut per_node = Vec::with_capacity(nodes.len());
        let mut failed = None;
        let payload: Option<Arc<str>> = (nodes.len() > 1).then(|| Arc::from(&*output.restore));
        for (i, ns) in nodes.iter_mut() {
            let shared = payload.as_ref().map(|p| (&mut self.memo, p));
            let mut r = apply_sync(ns, &output, shared);
            if let (Ok(()), Some(ipvs)) = (&r, &output.ipvs) {
                let cfg = self.proxy.config();
                r = (|| {
                    if ipvs.initial_sync {
                        crate::kubeproxy::ipvs::kernel::start_proxier(ns, cfg)?;
                    }
                    let gt = self
                        .ipvs_gt
                        .entry(*i)
                        .or_insert_with(|| crate::kubeproxy::ipvs::GracefulTermination::new(now));
                    crate::kubeproxy::ipvs::kernel::apply_to_node(ns, ipvs, cfg.family, gt)
                        .map(|_| ())
                })();
            }
            if let Err(e) = &r {
                failed.get_or_insert_with(|| e.clone());
            }
            per_node.push(NodeSync {
                node: *i,
                error: r.err(),
            });
            tick();
        }
        let mut ct = NodesConntrack::new(
            nodes
                .into_iter()
                .map(|(i, ns)| (i, ns.conntrack_mut()))
                .collect(),
            now,
        );
        let outcome = match failed {
            None => Ok(()),
            Some(e) => Err(e),
        };
        let cleanup = self.proxy.complete_sync(now, outcome, &mut ct);
        SyncResult {
            output,
            nodes: per_node,
            cleanup,
            list_calls: ct.lists,
            listed: ct.listed,
            deleted: ct.deleted,
            took: None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeproxy::jump_rules;
    use sim_netfilter::netns::NetnsConfig;

    #[test]
    fn jump_rules_are_ensured_once_and_kept_on_top() {
        let mut ns = Netns::new(NetnsConfig::new("n", 1));
        for j in jump_rules() {
            ensure_jump_rule(&mut ns, &j).unwrap();
        }
        let once = ns.save(false);
        // A second full sync finds every rule in place (`iptables -C`) and adds nothing.
        for j in jump_rules() {
            ensure_jump_rule(&mut ns, &j).unwrap();
        }
        assert_eq!(ns.save(false), once);
        assert!(
            once.contains(
                "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
            ),
            "{once}"
        );
        assert!(once.contains(":KUBE-FIREWALL - [0:0]"), "{once}");
        let filter_input: Vec<&str> = once.lines().filter(|l| l.starts_with("-A INPUT")).collect();
        // Prepended in list order: the last one ensured is first.
        assert_eq!(filter_input.first(), Some(&"-A INPUT -j KUBE-FIREWALL"));
    }

    #[test]
    fn nat_rules_are_counted_in_the_nat_table_only() {
        let text = "*filter\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j ACCEPT\nCOMMIT\n*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -j RETURN\n-A KUBE-SERVICES -j RETURN\nCOMMIT\n";
        assert_eq!(nat_rules_written(text), 2);
    }
}
