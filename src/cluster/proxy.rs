//! One kube-proxy per node: what it has seen of Services and EndpointSlices, when it syncs,
//! what it writes (the kubeproxy module's renderer), and the stale-UDP conntrack cleanup it
//! runs after a sync.
//!
//! The rendering is `kubeproxy::render_sync`. Two parts are **stand-ins** until the kubeproxy
//! module publishes them, clearly so and replaced then: the sync rate limiter
//! ([`SyncTimer`], a token bucket of `minSyncPeriod` with burst 2, as kube-proxy's
//! `BoundedFrequencyRunner`), and the per-release cleanup ([`stand_in_cleanup`],
//! KUBE_PROXY.md §6).

use super::kernel::{CtFilter, Kernel, ServiceBackend, ServiceMap};
use crate::k8s::{Cidr, EndpointSlice, Protocol, Service};
use crate::kubeproxy::{
    categorize_endpoints, render_sync, LocalDetector, ProxierConfig, ProxyState, SyncScope,
};
use crate::scenario::model::Release;
use sim_core::packet::{IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};
use sim_core::{SimDuration, SimTime};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// A full resync happens at most this often (kube-proxy's `fullSyncPeriod`, 1 h).
pub const FULL_SYNC_PERIOD: SimDuration = SimDuration::from_secs(3600);

/// Rate limiting of syncs: at most `burst` syncs at once, refilled one per `min_sync_period`
/// (STAND-IN for the kubeproxy module's SyncRunner).
#[derive(Debug, Clone)]
pub struct SyncTimer {
    min_sync_period: SimDuration,
    burst: u32,
    tokens: u32,
    last_refill: SimTime,
}

impl SyncTimer {
    /// A full bucket.
    pub fn new(min_sync_period: SimDuration) -> SyncTimer {
        SyncTimer {
            min_sync_period,
            burst: 2,
            tokens: 2,
            last_refill: SimTime::ZERO,
        }
    }
    fn refill(&mut self, now: SimTime) {
        if self.min_sync_period.is_zero() {
            self.tokens = self.burst;
            return;
        }
        let elapsed = now.saturating_since(self.last_refill).as_nanos();
        let n = elapsed / self.min_sync_period.as_nanos();
        if n > 0 {
            self.tokens = (self.tokens as u64 + n).min(self.burst as u64) as u32;
            self.last_refill += self.min_sync_period.saturating_mul(n);
        }
        if self.tokens == self.burst {
            self.last_refill = now;
        }
    }
    /// The earliest instant at or after `now` a sync may run.
    pub fn next_allowed(&mut self, now: SimTime) -> SimTime {
        self.refill(now);
        if self.tokens > 0 {
            now
        } else {
            self.last_refill + self.min_sync_period
        }
    }
    /// Takes a token for a sync at `now` (which must be allowed).
    pub fn take(&mut self, now: SimTime) {
        self.refill(now);
        self.tokens = self.tokens.saturating_sub(1);
    }
}

/// What one sync did, for the timeline.
#[derive(Debug, Clone)]
pub struct SyncReport {
    /// Whether it was a full sync.
    pub full: bool,
    /// Services whose rules changed.
    pub changed: BTreeSet<(String, String)>,
    /// nat rules written.
    pub nat_rules: usize,
    /// filter rules written.
    pub filter_rules: usize,
    /// Conntrack entries deleted by the cleanup (their `-L` lines).
    pub deleted: Vec<String>,
    /// An error applying the rules, if any.
    pub error: Option<String>,
}

/// One node's kube-proxy.
#[derive(Debug, Clone)]
pub struct NodeProxy {
    cfg: ProxierConfig,
    release: Release,
    services: Vec<Service>,
    slices: Vec<EndpointSlice>,
    applied: Option<ProxyState>,
    existing_nat_chains: BTreeSet<String>,
    last_full: Option<SimTime>,
    /// Rate limiter.
    pub timer: SyncTimer,
    /// A sync is scheduled at this instant.
    pub pending: Option<SimTime>,
}

fn proto_num(p: Protocol) -> u8 {
    match p {
        Protocol::TCP => IPPROTO_TCP,
        Protocol::UDP => IPPROTO_UDP,
        Protocol::SCTP => IPPROTO_SCTP,
    }
}

impl NodeProxy {
    /// kube-proxy on node `node_name` (address `node_ip`, pod CIDR `pod_cidr`).
    pub fn new(
        node_name: &str,
        node_ip: IpAddr,
        pod_cidr: Cidr,
        cluster_cidr: Option<Cidr>,
        masquerade_all: bool,
        release: Release,
        min_sync_period: SimDuration,
    ) -> NodeProxy {
        let mut cfg = ProxierConfig::new(node_name, node_ip, pod_cidr);
        cfg.local_detector = LocalDetector::ClusterCidr(cluster_cidr.unwrap_or(pod_cidr));
        cfg.masquerade_all = masquerade_all;
        NodeProxy {
            cfg,
            release,
            services: Vec::new(),
            slices: Vec::new(),
            applied: None,
            existing_nat_chains: BTreeSet::new(),
            last_full: None,
            timer: SyncTimer::new(min_sync_period),
            pending: None,
        }
    }

    /// The watch delivered new objects.
    pub fn observe(&mut self, services: &[Service], slices: &[EndpointSlice]) {
        self.services = services.to_vec();
        self.slices = slices.to_vec();
    }

    /// The state it would render now.
    pub fn desired_state(&self) -> ProxyState {
        ProxyState::build(&self.cfg.node_name, &self.services, &self.slices)
    }

    /// Whether what it has seen differs from what it applied.
    pub fn has_changes(&self) -> bool {
        self.applied.as_ref() != Some(&self.desired_state())
    }

    /// The test double kernel's service map for `state` (see `kernel`).
    fn service_map(&self, state: &ProxyState) -> ServiceMap {
        let mut m = ServiceMap::new();
        for (spn, info) in &state.services {
            let cat = categorize_endpoints(state.endpoints_of(spn), info);
            let eps = if info.internal_policy_local {
                &cat.local
            } else {
                &cat.cluster
            };
            let backends: Vec<ServiceBackend> = eps
                .iter()
                .map(|e| ServiceBackend {
                    ip: e.ip,
                    port: e.port,
                })
                .collect();
            let p = proto_num(info.protocol);
            for ip in info.frontend_ips() {
                m.insert((p, ip, info.port), backends.clone());
            }
            if let Some(np) = info.node_port {
                m.insert((p, self.cfg.node_ip, np), backends.clone());
            }
        }
        m
    }

    /// Runs one sync at `now`: renders, restores, then runs the cleanup.
    pub fn sync(&mut self, now: SimTime, kernel: &mut Kernel) -> SyncReport {
        self.timer.take(now);
        self.pending = None;
        let state = self.desired_state();
        let full = self.applied.is_none()
            || self
                .last_full
                .is_none_or(|t| now.saturating_since(t) >= FULL_SYNC_PERIOD);
        let empty = ProxyState::default();
        let old = self.applied.clone().unwrap_or(empty);
        let changed = state.changed_services(&old);
        let rendered = render_sync(
            &self.cfg,
            &state,
            &SyncScope {
                full,
                changed: Some(&changed),
                existing_nat_chains: Some(&self.existing_nat_chains),
            },
        );
        let mut report = SyncReport {
            full,
            changed: changed.clone(),
            nat_rules: rendered.nat_rules,
            filter_rules: rendered.filter_rules,
            deleted: Vec::new(),
            error: None,
        };
        let map = self.service_map(&state);
        if let Err(e) = kernel.restore(&rendered.restore, true, &map) {
            // kube-proxy retries a failed restore at the next sync with a full resync.
            report.error = Some(e);
            self.last_full = None;
            return report;
        }
        if full {
            self.last_full = Some(now);
        }
        self.existing_nat_chains = rendered.active_nat_chains.clone();
        report.deleted = stand_in_cleanup(self.release, now, &old, &state, &changed, kernel);
        self.applied = Some(state);
        report
    }
}

/// Serving endpoint (ip, port) pairs per service port, and the service ports.
fn serving(
    state: &ProxyState,
) -> BTreeMap<crate::kubeproxy::ServicePortName, BTreeSet<(IpAddr, u16)>> {
    state
        .endpoints
        .iter()
        .map(|(k, v)| {
            (
                k.clone(),
                v.iter()
                    .filter(|e| e.serving)
                    .map(|e| (e.ip, e.port))
                    .collect(),
            )
        })
        .collect()
}

/// STAND-IN for the kubeproxy module's `ConntrackCleanup` strategies (KUBE_PROXY.md §6): what
/// each release deletes after a sync that went from `old` to `new`. Returns the deleted
/// entries' `conntrack -L` lines.
pub fn stand_in_cleanup(
    release: Release,
    now: SimTime,
    old: &ProxyState,
    new: &ProxyState,
    changed: &BTreeSet<(String, String)>,
    kernel: &mut Kernel,
) -> Vec<String> {
    let mut deleted = Vec::new();
    let mut del = |kernel: &mut Kernel, f: CtFilter, port: Option<u16>| {
        let f = match port {
            Some(p) => f.with_orig_dport(p),
            None => f,
        };
        for e in kernel.ct_delete(now, &f) {
            deleted.push(e.line);
        }
    };
    match release {
        Release::None => {}
        Release::V131 | Release::V131Fixed => {
            let (old_s, new_s) = (serving(old), serving(new));
            for (spn, info) in &old.services {
                if info.protocol != Protocol::UDP {
                    continue;
                }
                let before = old.endpoints_of(spn);
                let after = new.endpoints_of(spn);
                for ep in before {
                    let gone = !after.iter().any(|e| e.ip == ep.ip && e.port == ep.port);
                    let stopped = release == Release::V131Fixed
                        && old_s
                            .get(spn)
                            .is_some_and(|s| s.contains(&(ep.ip, ep.port)))
                        && !new_s
                            .get(spn)
                            .is_some_and(|s| s.contains(&(ep.ip, ep.port)))
                        && !gone;
                    if gone || stopped {
                        for ip in info.frontend_ips() {
                            del(
                                kernel,
                                CtFilter::orig_dst_reply_src(IPPROTO_UDP, ip, ep.ip),
                                None,
                            );
                        }
                    }
                }
            }
            for (spn, info) in &new.services {
                if info.protocol == Protocol::UDP
                    && old.endpoints_of(spn).is_empty()
                    && !new.endpoints_of(spn).is_empty()
                {
                    for ip in info.frontend_ips() {
                        let mut f = CtFilter::proto(IPPROTO_UDP);
                        f = f.with_orig_dst(ip);
                        del(kernel, f, None);
                    }
                }
            }
        }
        Release::V132 | Release::V133 | Release::Latest => {
            if release == Release::Latest
                && !new
                    .services
                    .iter()
                    .any(|(spn, i)| i.protocol == Protocol::UDP && changed.contains(&spn.service()))
            {
                return deleted;
            }
            let srv = serving(new);
            // service IP (and port, from v1.33) → serving endpoint IPs (ip:port, latest).
            let entries = kernel.ct_list(now, &CtFilter::proto(IPPROTO_UDP));
            let mut doomed: BTreeSet<(IpAddr, IpAddr, Option<u16>)> = BTreeSet::new();
            for e in &entries {
                let (dst, dport, rsrc, rsport) =
                    (e.orig.dst, e.orig.dport, e.reply.src, e.reply.sport);
                let mut is_service_ip = false;
                let mut ok = false;
                let mut any_serving = false;
                for (spn, info) in &new.services {
                    if info.protocol != Protocol::UDP || !info.frontend_ips().contains(&dst) {
                        continue;
                    }
                    if release != Release::V132 && info.port != dport {
                        continue;
                    }
                    is_service_ip = true;
                    let set = srv.get(spn).cloned().unwrap_or_default();
                    any_serving |= !set.is_empty();
                    ok |= match release {
                        Release::Latest => set.contains(&(rsrc, rsport)),
                        _ => set.iter().any(|(ip, _)| *ip == rsrc),
                    };
                }
                if !is_service_ip || ok {
                    continue;
                }
                if release == Release::V133 && !any_serving {
                    continue;
                }
                let port = (release != Release::V132).then_some(dport);
                doomed.insert((dst, rsrc, port));
            }
            for (dst, rsrc, port) in doomed {
                del(
                    kernel,
                    CtFilter::orig_dst_reply_src(IPPROTO_UDP, dst, rsrc),
                    port,
                );
            }
        }
    }
    deleted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sync_timer_allows_a_burst_of_two_then_one_per_period() {
        let mut t = SyncTimer::new(SimDuration::from_secs(1));
        let t0 = SimTime::from_secs(10);
        assert_eq!(t.next_allowed(t0), t0);
        t.take(t0);
        assert_eq!(t.next_allowed(t0), t0);
        t.take(t0);
        assert_eq!(t.next_allowed(t0), t0 + SimDuration::from_secs(1));
        let t1 = t0 + SimDuration::from_secs(1);
        t.take(t1);
        assert_eq!(t.next_allowed(t1), t1 + SimDuration::from_secs(1));
    }
}
