//! One node's kube-proxy: the objects it has seen, what it last wrote, when it syncs next, and
//! its cleanup strategy. Sans-IO: it returns the text to apply and takes the conntrack table
//! as an argument.
//!
//! Call order, per node:
//!
//! 1. [`KubeProxy::new`] at the instant kube-proxy starts; give it the objects that exist
//!    (`upsert_*`) before the first [`KubeProxy::on_timeout`], which is due at that instant.
//! 2. On every object change, `upsert_*` / `delete_*` (they request a sync when the change
//!    matters to kube-proxy).
//! 3. At [`KubeProxy::poll_timeout`], call [`KubeProxy::on_timeout`]. When it returns a
//!    [`SyncOutput`], apply it to the node (jump rules first on a full sync, then
//!    `iptables-restore --noflush` of `restore`), then report the outcome with
//!    [`KubeProxy::complete_sync`], which runs the conntrack cleanup after a success.

use super::cleanup::{
    CleanupInput, CleanupReport, ConntrackCleanup, ConntrackOps, CtEntry, CtFilter,
};
use super::model::{service_ports_for, ProxyState};
use super::render::{
    jump_rules_for, render_sync, JumpRule, ProxierConfig, SyncScope,
    LARGE_CLUSTER_ENDPOINTS_THRESHOLD,
};
use super::runner::{SyncKind, SyncRunner, SyncTiming};
use crate::k8s::IpFamily;
use crate::k8s::{EndpointSlice, K8sObject, Service};
use sim_core::SimTime;
use std::collections::{BTreeMap, BTreeSet};

/// What one sync writes to the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SyncOutput {
    /// When the sync ran.
    pub at: SimTime,
    /// Full or partial.
    pub kind: SyncKind,
    /// The jump rules to ensure before the restore (full syncs only; empty otherwise).
    pub jump_rules: Vec<JumpRule>,
    /// The `iptables-restore --noflush` payload.
    pub restore: String,
    /// Services (namespace, name) whose Service or endpoints changed since the last sync.
    pub changed_services: BTreeSet<(String, String)>,
    /// Stale per-service chains this payload deletes.
    pub deleted_chains: Vec<String>,
    /// iptables or nftables: `restore` is then an `nft -f` transaction.
    pub mode: super::render::ProxyMode,
    /// nftables mode: the separate transaction deleting long-stale chains, run first and
    /// allowed to fail (`staleChains`).
    pub nft_cleanup: Option<String>,
    /// The proxier's family: the payload is for `iptables-restore` or `ip6tables-restore`.
    pub family: IpFamily,
    /// IPVS mode: the ipset commands, `kube-ipvs0` addresses and virtual servers of the
    /// sync (`restore` and `jump_rules` then hold its iptables half).
    pub ipvs: Option<Box<IpvsSyncOutput>>,
}

/// The IPVS half of an IPVS-mode sync ([`super::ipvs::render_ipvs_sync`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpvsSyncOutput {
    /// `ipset restore` input: every set created (`-exist`), stale entries deleted, new
    /// ones added, against what the last successful sync left.
    pub ipset_restore: String,
    /// What was rendered: entries per set, bound addresses, virtual servers.
    pub rendered: super::ipvs::IpvsRendered,
    /// Whether this is the proxier's first sync (`initialSync`: weights of kept real
    /// servers reset to 1).
    pub initial_sync: bool,
}

#[derive(Clone, Debug)]
struct Pending {
    state: ProxyState,
    active_nat_chains: BTreeSet<String>,
    cleaned_chains: bool,
    nft_next: Option<super::nftables::NftProxierState>,
    nft_failed: Option<super::nftables::NftProxierState>,
    ipvs_sets: Option<super::ipvs::IpsetEntries>,
}

/// One node's kube-proxy. See the module documentation for the call order.
pub struct KubeProxy {
    config: ProxierConfig,
    runner: SyncRunner,
    cleanup: Box<dyn ConntrackCleanup>,
    services: BTreeMap<(String, String), Service>,
    slices: BTreeMap<(String, String), EndpointSlice>,
    applied: ProxyState,
    nat_chains: BTreeSet<String>,
    last_chain_cleanup: Option<SimTime>,
    pending: Option<Pending>,
    nft: super::nftables::NftProxierState,
    /// IPVS mode: the ipset entries the last successful sync left.
    ipvs_sets: Option<super::ipvs::IpsetEntries>,
    ipvs_started: bool,
}

impl KubeProxy {
    /// A kube-proxy starting at `start` with no objects yet.
    pub fn new(
        config: ProxierConfig,
        timing: SyncTiming,
        cleanup: Box<dyn ConntrackCleanup>,
        start: SimTime,
    ) -> KubeProxy {
        let config_family = config.family;
        KubeProxy {
            config,
            runner: SyncRunner::new(timing, start),
            cleanup,
            services: BTreeMap::new(),
            slices: BTreeMap::new(),
            applied: ProxyState::default(),
            nat_chains: BTreeSet::new(),
            last_chain_cleanup: None,
            pending: None,
            nft: super::nftables::NftProxierState::new(config_family),
            ipvs_sets: None,
            ipvs_started: false,
        }
    }

    /// The chains a fresh process finds in the node's nat table (kube-proxy reads them from
    /// `iptables-save -t nat` on a full sync, `GetChainsFromTable`): its first sync deletes
    /// the service chains among them that it does not write (`-X`).
    pub fn set_existing_nat_chains(&mut self, chains: BTreeSet<String>) {
        self.nat_chains = chains;
    }

    /// The configuration.
    pub fn config(&self) -> &ProxierConfig {
        &self.config
    }

    /// IPVS mode: the node's local addresses NodePort virtual servers listen on
    /// (`GetAllLocalAddressesExcept(kube-ipvs0)`), read by the next sync.
    pub fn set_ipvs_node_addresses(&mut self, addrs: Vec<std::net::IpAddr>) {
        self.config.ipvs.node_addresses = Some(addrs);
    }

    /// The cleanup strategy's name.
    pub fn cleanup_name(&self) -> String {
        self.cleanup.name()
    }

    /// Adds or replaces a Service. Returns whether kube-proxy sees a change (and so requested
    /// a sync): a change of the fields it reads (`ServiceChangeTracker.Update`).
    pub fn upsert_service(&mut self, now: SimTime, svc: Service) -> bool {
        let key = (svc.metadata.namespace.clone(), svc.metadata.name.clone());
        let changed = match self.services.get(&key) {
            Some(old) => {
                service_ports_for(old, self.config.family)
                    != service_ports_for(&svc, self.config.family)
            }
            None => !service_ports_for(&svc, self.config.family).is_empty(),
        };
        self.services.insert(key, svc);
        self.request_if(now, changed)
    }

    /// Removes a Service. Returns whether a sync was requested.
    pub fn delete_service(&mut self, now: SimTime, namespace: &str, name: &str) -> bool {
        let changed = self
            .services
            .remove(&(namespace.to_string(), name.to_string()))
            .is_some_and(|old| !service_ports_for(&old, self.config.family).is_empty());
        self.request_if(now, changed)
    }

    /// Adds or replaces an EndpointSlice. Returns whether a sync was requested (any change
    /// of a slice of the proxier's family, as `esDataChanged` compares them; the tracker
    /// ignores slices of the other `addressType`).
    pub fn upsert_endpoint_slice(&mut self, now: SimTime, slice: EndpointSlice) -> bool {
        let key = (
            slice.metadata.namespace.clone(),
            slice.metadata.name.clone(),
        );
        let mine = self.config.family.address_type();
        let old = self.slices.get(&key);
        let changed = (slice.address_type == mine || old.is_some_and(|o| o.address_type == mine))
            && old != Some(&slice);
        self.slices.insert(key, slice);
        self.request_if(now, changed)
    }

    /// Removes an EndpointSlice. Returns whether a sync was requested.
    pub fn delete_endpoint_slice(&mut self, now: SimTime, namespace: &str, name: &str) -> bool {
        let changed = self
            .slices
            .remove(&(namespace.to_string(), name.to_string()))
            .is_some_and(|old| old.address_type == self.config.family.address_type());
        self.request_if(now, changed)
    }

    /// Adds or replaces either kind of object.
    pub fn upsert(&mut self, now: SimTime, obj: K8sObject) -> bool {
        match obj {
            K8sObject::Service(s) => self.upsert_service(now, s),
            K8sObject::EndpointSlice(e) => self.upsert_endpoint_slice(now, e),
        }
    }

    fn request_if(&mut self, now: SimTime, changed: bool) -> bool {
        if changed {
            self.runner.on_change(now);
        }
        changed
    }

    /// The maps derived from the objects seen so far (what the next sync will write).
    pub fn current_state(&self) -> ProxyState {
        ProxyState::build_for(
            self.config.family,
            &self.config.node_name,
            self.services.values(),
            self.slices.values(),
        )
    }

    /// The maps the last sync wrote.
    pub fn applied_state(&self) -> &ProxyState {
        &self.applied
    }

    /// The per-service nat chains kube-proxy believes exist.
    pub fn nat_chains(&self) -> &BTreeSet<String> {
        &self.nat_chains
    }

    /// When [`KubeProxy::on_timeout`] is next due.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        self.runner.poll_timeout()
    }

    /// Runs the sync due at `now`, if any, and returns what to apply. A sync already returned
    /// and not yet completed is completed as successful first.
    pub fn on_timeout(&mut self, now: SimTime) -> Option<SyncOutput> {
        let kind = self.runner.on_timeout(now)?;
        let state = self.current_state();
        let changed = self.applied.changed_services(&state);
        if self.config.mode == super::render::ProxyMode::Ipvs {
            // Every IPVS sync rewrites everything (there is no partial sync).
            let rendered = super::ipvs::render_ipvs_sync(&self.config, &self.config.ipvs, &state);
            let ipset_restore = rendered
                .ipsets
                .restore_text(self.config.family, self.ipvs_sets.as_ref());
            // `initialSync` is cleared after the first sync whatever its outcome.
            let initial_sync = !self.ipvs_started;
            self.ipvs_started = true;
            self.pending = Some(Pending {
                state,
                active_nat_chains: BTreeSet::new(),
                cleaned_chains: false,
                nft_next: None,
                nft_failed: None,
                ipvs_sets: Some(rendered.ipsets.clone()),
            });
            return Some(SyncOutput {
                at: now,
                kind: SyncKind::Full,
                jump_rules: rendered.jump_rules.clone(),
                restore: rendered.restore.clone(),
                changed_services: changed,
                deleted_chains: Vec::new(),
                mode: super::render::ProxyMode::Ipvs,
                nft_cleanup: None,
                family: self.config.family,
                ipvs: Some(Box::new(IpvsSyncOutput {
                    ipset_restore,
                    rendered,
                    initial_sync,
                })),
            });
        }
        if self.config.mode == super::render::ProxyMode::Nftables {
            let sync = super::nftables::render_nft_sync(
                &self.config,
                &state,
                &self.nft,
                kind == SyncKind::Full,
                &changed,
                now,
            );
            self.pending = Some(Pending {
                state,
                active_nat_chains: BTreeSet::new(),
                cleaned_chains: false,
                nft_next: Some(sync.next),
                nft_failed: Some(sync.failed),
                ipvs_sets: None,
            });
            return Some(SyncOutput {
                at: now,
                kind,
                jump_rules: Vec::new(),
                restore: sync.tx,
                changed_services: changed,
                deleted_chains: Vec::new(),
                mode: super::render::ProxyMode::Nftables,
                nft_cleanup: sync.cleanup,
                family: self.config.family,
                ipvs: None,
            });
        }
        let total: usize = state
            .services
            .keys()
            .map(|k| state.endpoints_of(k).len())
            .sum();
        let large = total > LARGE_CLUSTER_ENDPOINTS_THRESHOLD;
        // In large clusters stale chains are looked for at most once per syncPeriod.
        let clean_chains = !large
            || self
                .last_chain_cleanup
                .is_none_or(|t| now.saturating_since(t) > self.runner.timing().sync_period);
        let rendered = render_sync(
            &self.config,
            &state,
            &SyncScope {
                full: kind == SyncKind::Full,
                changed: Some(&changed),
                existing_nat_chains: clean_chains.then_some(&self.nat_chains),
            },
        );
        self.pending = Some(Pending {
            state,
            active_nat_chains: rendered.active_nat_chains.clone(),
            cleaned_chains: clean_chains,
            nft_next: None,
            nft_failed: None,
            ipvs_sets: None,
        });
        Some(SyncOutput {
            at: now,
            kind,
            jump_rules: if kind == SyncKind::Full {
                jump_rules_for(self.config.family)
            } else {
                Vec::new()
            },
            restore: rendered.restore,
            changed_services: changed,
            deleted_chains: rendered.deleted_chains,
            mode: super::render::ProxyMode::Iptables,
            nft_cleanup: None,
            family: self.config.family,
            ipvs: None,
        })
    }

    /// The last sync ended at `end` (it took simulated time; see
    /// [`SyncRunner::on_sync_done`]).
    pub fn sync_ended(&mut self, end: SimTime) {
        self.runner.on_sync_done(end);
    }

    /// Reports how applying the last [`SyncOutput`] went. On success the cleanup strategy
    /// runs against `ct`; on failure the next sync is a full one, `syncPeriod` later at the
    /// latest, and nothing is cleaned (the changes were consumed: kube-proxy loses them too).
    pub fn complete_sync(
        &mut self,
        now: SimTime,
        applied: Result<(), String>,
        ct: &mut dyn ConntrackOps,
    ) -> CleanupReport {
        let Some(p) = self.pending.take() else {
            return CleanupReport::default();
        };
        let before = std::mem::replace(&mut self.applied, p.state);
        match applied {
            Ok(()) => {
                if let Some(next) = p.nft_next {
                    self.nft = next;
                }
                if p.ipvs_sets.is_some() {
                    self.ipvs_sets = p.ipvs_sets;
                }
                if p.cleaned_chains {
                    self.last_chain_cleanup = Some(now);
                    self.nat_chains = p.active_nat_chains;
                } else {
                    self.nat_chains.extend(p.active_nat_chains);
                }
                let input = CleanupInput {
                    before: &before,
                    after: &self.applied,
                };
                let mut scoped = FamilyScoped {
                    inner: ct,
                    family: self.config.family,
                };
                self.cleanup.after_sync(now, &input, &mut scoped)
            }
            Err(_) => {
                if let Some(f) = p.nft_failed {
                    self.nft = f;
                }
                self.runner.on_sync_failed(now);
                CleanupReport::default()
            }
        }
    }
}

/// The conntrack table as one family's proxier reaches it: entries of that family only.
/// kube-proxy's cleanup of each release is per proxier (`CleanStaleEntries` in each
/// family's `syncProxyRules`): the exec-based releases run `conntrack -D … -f ipv6` for IPv6
/// (`conntrack.Exec` appends it when the address is IPv6), the netlink ones list and delete
/// with the family (`ConntrackTableList(netlink.ConntrackTable, family)`), so neither ever
/// touches an entry of the other family. A filter naming no address is applied entry by
/// entry to the family's entries.
struct FamilyScoped<'a> {
    inner: &'a mut dyn ConntrackOps,
    family: IpFamily,
}

impl FamilyScoped<'_> {
    fn mine(&self, e: &CtEntry) -> bool {
        self.family.contains(e.orig.src)
    }
}

impl ConntrackOps for FamilyScoped<'_> {
    fn list(&mut self, filter: &CtFilter) -> Vec<CtEntry> {
        let family = self.family;
        self.inner
            .list(filter)
            .into_iter()
            .filter(|e| family.contains(e.orig.src))
            .collect()
    }
    fn delete(&mut self, filter: &CtFilter) -> usize {
        let addrs = [
            filter.orig_src,
            filter.orig_dst,
            filter.reply_src,
            filter.reply_dst,
        ];
        if addrs.iter().flatten().any(|a| !self.family.contains(*a)) {
            // `conntrack -f ipv4 --orig-dst fd00::1` matches nothing.
            return 0;
        }
        if addrs.iter().any(Option::is_some) {
            return self.inner.delete(filter);
        }
        let mine: Vec<CtEntry> = self
            .inner
            .list(filter)
            .into_iter()
            .filter(|e| self.mine(e))
            .collect();
        mine.iter()
            .map(|e| self.inner.delete(&CtFilter::exact(e)))
            .sum()
    }
}
