//! Stale UDP conntrack cleanup, release by release (pkg/proxy/conntrack/cleanup.go).
//!
//! After a successful sync kube-proxy may delete UDP conntrack entries that would keep sending
//! a flow to an endpoint that is gone (a flow keeps its DNAT until its entry expires, and a
//! client that keeps its source port keeps its entry alive). How it decides changed over time:
//!
//! | strategy | what it deletes |
//! |---|---|
//! | [`NoCleanup`] | nothing |
//! | [`V131`] (≤ v1.31, event-based) | for each UDP endpoint that was serving at the last sync and is now gone (or, with `serving_fix`, no longer serving): entries with orig-dst = each service IP and reply-src = the endpoint, and orig-port-dst = the nodePort and reply-src = the endpoint; for each UDP port whose serving endpoints went 0 → some, and each deleted UDP service port: every entry to its IPs (and nodePort) |
//! | [`V132`] (#127318, reconciler) | lists UDP entries; an entry to a UDP service IP whose reply-src is not a serving endpoint IP of that IP's service is deleted by (orig-dst, reply-src), whatever its port; likewise for nodePorts by (orig-port-dst, reply-src) |
//! | [`V133`] (#130484, #130542) | as V132 keyed by service IP *and* port, endpoints by IP *and* port (`reply_port`), services without serving endpoints skipped |
//! | [`Latest`] (#139629, #141371) | as V133, but services without serving endpoints and deleted UDP services are processed with an empty endpoint set; exactly the stale entries are deleted |
//!
//! The reconcilers run only when the sync saw endpoint changes of a Service with a UDP port
//! (`UpdateEndpointsMapResult.ConntrackCleanupRequired`); [`ReconcileTrigger::EverySync`]
//! runs them after every sync instead (whether v1.32.0 itself did is not confirmed).
//!
//! Where kube-proxy iterates Go maps (which service port's endpoint set wins for an IP shared
//! by two UDP ports in V132), nfsim iterates in [`ServicePortName`] order, last one wins.
//!
//! The table is reached through [`ConntrackOps`], a two-call interface (list, delete by
//! filter) that sim-conntrack's table implements through an adapter; [`MemConntrack`] is an
//! in-memory implementation for tests.

use super::model::{EndpointInfo, ProxyState, ServicePortInfo};
use super::names::ServicePortName;
use crate::k8s::Protocol;
use sim_core::SimTime;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// One direction of a conntrack entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CtTuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination port.
    pub dport: u16,
}

/// A conntrack entry as the cleanup sees it: protocol, original and reply tuples.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CtEntry {
    /// IP protocol number.
    pub proto: u8,
    /// The original direction (client → service IP).
    pub orig: CtTuple,
    /// The reply direction (endpoint → client, after DNAT).
    pub reply: CtTuple,
}

/// A conntrack filter, as `conntrack -L/-D` options or a netlink filter: every field that is
/// set must match.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CtFilter {
    /// `-p`.
    pub proto: Option<u8>,
    /// `--orig-src`.
    pub orig_src: Option<IpAddr>,
    /// `--orig-dst`.
    pub orig_dst: Option<IpAddr>,
    /// `--orig-port-src`.
    pub orig_sport: Option<u16>,
    /// `--orig-port-dst`.
    pub orig_dport: Option<u16>,
    /// `--reply-src`.
    pub reply_src: Option<IpAddr>,
    /// `--reply-dst`.
    pub reply_dst: Option<IpAddr>,
    /// `--reply-port-src`.
    pub reply_sport: Option<u16>,
    /// `--reply-port-dst`.
    pub reply_dport: Option<u16>,
}

impl CtFilter {
    /// A filter on UDP only.
    pub fn udp() -> CtFilter {
        CtFilter {
            proto: Some(IPPROTO_UDP),
            ..CtFilter::default()
        }
    }
    /// A filter matching exactly one entry's tuples.
    pub fn exact(e: &CtEntry) -> CtFilter {
        CtFilter {
            proto: Some(e.proto),
            orig_src: Some(e.orig.src),
            orig_dst: Some(e.orig.dst),
            orig_sport: Some(e.orig.sport),
            orig_dport: Some(e.orig.dport),
            reply_src: Some(e.reply.src),
            reply_dst: Some(e.reply.dst),
            reply_sport: Some(e.reply.sport),
            reply_dport: Some(e.reply.dport),
        }
    }
    /// Whether the entry matches every field that is set.
    pub fn matches(&self, e: &CtEntry) -> bool {
        fn m<T: PartialEq>(f: Option<T>, v: T) -> bool {
            f.is_none_or(|f| f == v)
        }
        m(self.proto, e.proto)
            && m(self.orig_src, e.orig.src)
            && m(self.orig_dst, e.orig.dst)
            && m(self.orig_sport, e.orig.sport)
            && m(self.orig_dport, e.orig.dport)
            && m(self.reply_src, e.reply.src)
            && m(self.reply_dst, e.reply.dst)
            && m(self.reply_sport, e.reply.sport)
            && m(self.reply_dport, e.reply.dport)
    }
}

impl fmt::Display for CtFilter {
    /// The equivalent `conntrack` options, as in `-p udp --orig-dst 10.96.0.10 --reply-src 10.244.1.7`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts: Vec<String> = Vec::new();
        if let Some(p) = self.proto {
            parts.push(match p {
                6 => "-p tcp".into(),
                17 => "-p udp".into(),
                132 => "-p sctp".into(),
                n => format!("-p {n}"),
            });
        }
        let ips = [
            ("--orig-src", self.orig_src),
            ("--orig-dst", self.orig_dst),
            ("--reply-src", self.reply_src),
            ("--reply-dst", self.reply_dst),
        ];
        let ports = [
            ("--orig-port-src", self.orig_sport),
            ("--orig-port-dst", self.orig_dport),
            ("--reply-port-src", self.reply_sport),
            ("--reply-port-dst", self.reply_dport),
        ];
        for (k, v) in ips {
            if let Some(v) = v {
                parts.push(format!("{k} {v}"));
            }
        }
        for (k, v) in ports {
            if let Some(v) = v {
                parts.push(format!("{k} {v}"));
            }
        }
        f.write_str(&parts.join(" "))
    }
}

/// What kube-proxy needs from the conntrack table: list entries and delete entries matching a
/// filter. sim-conntrack's table implements it through an adapter; [`MemConntrack`] is a plain
/// in-memory one.
pub trait ConntrackOps {
    /// The live entries matching `filter`, in the table's dump order.
    fn list(&mut self, filter: &CtFilter) -> Vec<CtEntry>;
    /// Deletes the live entries matching `filter`; returns how many were deleted.
    fn delete(&mut self, filter: &CtFilter) -> usize;
}

/// An in-memory conntrack table for tests: a list of entries.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemConntrack {
    /// The entries, in insertion order.
    pub entries: Vec<CtEntry>,
}

impl ConntrackOps for MemConntrack {
    fn list(&mut self, filter: &CtFilter) -> Vec<CtEntry> {
        self.entries
            .iter()
            .filter(|e| filter.matches(e))
            .copied()
            .collect()
    }
    fn delete(&mut self, filter: &CtFilter) -> usize {
        let before = self.entries.len();
        self.entries.retain(|e| !filter.matches(e));
        before - self.entries.len()
    }
}

/// The state around one sync: the maps at the previous successful sync and now.
#[derive(Clone, Copy, Debug)]
pub struct CleanupInput<'a> {
    /// The service and endpoints maps as of the previous sync.
    pub before: &'a ProxyState,
    /// The service and endpoints maps this sync wrote.
    pub after: &'a ProxyState,
}

impl CleanupInput<'_> {
    /// `UpdateEndpointsMapResult.ConntrackCleanupRequired`: some Service whose endpoints
    /// changed has a UDP port (before or after).
    pub fn udp_endpoints_changed(&self) -> bool {
        let mut changed: BTreeSet<(String, String)> = BTreeSet::new();
        let (a, b) = (&self.before.endpoints, &self.after.endpoints);
        for (k, v) in a {
            if b.get(k) != Some(v) {
                changed.insert(k.service());
            }
        }
        for k in b.keys() {
            if !a.contains_key(k) {
                changed.insert(k.service());
            }
        }
        a.keys()
            .chain(b.keys())
            .any(|k| k.protocol == Protocol::UDP && changed.contains(&k.service()))
    }

    /// UDP service ports present before and gone now.
    pub fn deleted_udp_service_ports(&self) -> Vec<&ServicePortInfo> {
        self.before
            .services
            .iter()
            .filter(|(k, v)| v.protocol == Protocol::UDP && !self.after.services.contains_key(*k))
            .map(|(_, v)| v)
            .collect()
    }
}

/// One deletion request made by a cleanup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CleanupDeletion {
    /// The filter passed to the table.
    pub filter: CtFilter,
    /// How many entries it deleted.
    pub deleted: usize,
    /// Why, in kube-proxy's terms (`stale endpoint ns/svc:dns 10.244.1.7:53`).
    pub reason: String,
}

/// What a cleanup did after one sync.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CleanupReport {
    /// Whether the cleanup ran at all (reconcilers skip syncs without UDP endpoint changes).
    pub ran: bool,
    /// Entries listed (reconcilers only).
    pub listed: usize,
    /// Deletion requests, in the order made.
    pub deletions: Vec<CleanupDeletion>,
    /// Each request an external reconciler made and its answer, for the timeline
    /// (`list -p udp … → 2 entries`).
    pub requests: Vec<String>,
    /// Set when the reconciler failed (an external process that crashed, wrote garbage or
    /// did not answer): where and why. The simulation stops with it.
    pub error: Option<String>,
}

impl CleanupReport {
    /// Total entries deleted.
    pub fn deleted(&self) -> usize {
        self.deletions.iter().map(|d| d.deleted).sum()
    }
    fn delete(&mut self, ct: &mut dyn ConntrackOps, filter: CtFilter, reason: String) {
        let deleted = ct.delete(&filter);
        self.deletions.push(CleanupDeletion {
            filter,
            deleted,
            reason,
        });
    }

    /// A reconciler's start (v1.32 on): the node's UDP entries, and a report saying it ran
    /// and how many it listed.
    fn list_udp(ct: &mut dyn ConntrackOps) -> (Vec<CtEntry>, CleanupReport) {
        let entries = ct.list(&CtFilter::udp());
        let report = CleanupReport {
            ran: true,
            listed: entries.len(),
            ..CleanupReport::default()
        };
        (entries, report)
    }
}

/// The filters a filter-based reconciler (v1.32 to v1.34) collects from the listed entries,
/// each once, in the order first found, with the reason of its first finding; deleted after
/// the walk ([`Filters::delete`]).
#[derive(Default)]
struct Filters {
    filters: Vec<(CtFilter, String)>,
    seen: BTreeSet<CtFilter>,
}

impl Filters {
    /// Adds `f` unless it is already there (`reason` is only made for a new one).
    fn add(&mut self, f: CtFilter, reason: impl FnOnce() -> String) {
        if self.seen.insert(f) {
            self.filters.push((f, reason()));
        }
    }

    /// Deletes by each filter in order, into `report`.
    fn delete(self, ct: &mut dyn ConntrackOps, report: &mut CleanupReport) {
        for (f, reason) in self.filters {
            report.delete(ct, f, reason);
        }
    }
}

/// A stale-conntrack reconciler: kube-proxy runs it after each successful sync, with the
/// service and endpoint maps before and after, against the node's table through
/// [`ConntrackOps`]. Every release's cleanup implements it ([`NoCleanup`], [`V131`], [`V132`],
/// [`V133`], [`Latest`]), and so can yours: plug it into a cluster with
/// `SimulationBuilder::cleanup` / `testkit::Cluster::with_cleanup`, or measure it under churn
/// with `testkit::harness`. (Its earlier name, [`ConntrackCleanup`], stays as an alias.)
pub trait Reconciler {
    /// A short name for timelines (`v1.31`, `v1.32`, …).
    fn name(&self) -> String;
    /// Runs after the sync at `now` wrote `input.after`.
    fn after_sync(
        &mut self,
        now: SimTime,
        input: &CleanupInput<'_>,
        ct: &mut dyn ConntrackOps,
    ) -> CleanupReport;
}

/// The name this trait had before it was called [`Reconciler`].
pub use Reconciler as ConntrackCleanup;

/// When a reconciler runs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ReconcileTrigger {
    /// Only after syncs that saw endpoint changes of a Service with a UDP port (current code).
    #[default]
    UdpEndpointChanges,
    /// After every sync.
    EverySync,
}

impl ReconcileTrigger {
    /// Whether a reconciler with this trigger skips the sync `input` describes: it runs only
    /// after UDP endpoint changes, and there were none.
    fn skips(self, input: &CleanupInput<'_>) -> bool {
        self == ReconcileTrigger::UdpEndpointChanges && !input.udp_endpoints_changed()
    }
}

/// No cleanup at all.
#[derive(Clone, Copy, Debug, Default)]
pub struct NoCleanup;

impl Reconciler for NoCleanup {
    fn name(&self) -> String {
        "none".into()
    }
    fn after_sync(
        &mut self,
        _: SimTime,
        _: &CleanupInput<'_>,
        _: &mut dyn ConntrackOps,
    ) -> CleanupReport {
        CleanupReport::default()
    }
}

/// The event-based cleanup of kube-proxy up to v1.31 (`detectStaleConntrackEntries`,
/// `deleteStaleServiceConntrackEntries`, `deleteStaleEndpointConntrackEntries`). Failures and
/// missed events are never retried: it only looks at what changed since the last sync.
#[derive(Clone, Copy, Debug, Default)]
pub struct V131 {
    /// Also treat an endpoint that stays but stops serving as deleted (the comparison of
    /// `IsServing()` between the old and the new endpoint; docs/kube-proxy-model.md attributes it
    /// to #127780). Without it, an OOM-killed CoreDNS container restarting in place (same IP,
    /// not serving) leaves its entries.
    pub serving_fix: bool,
}

/// The event-based cleanup of kube-proxy v1.28 (#106163's `detectStaleConnections`, before
/// #119394 moved it to `IsServing()`): an endpoint that was *ready* at the last sync and is
/// now gone or no longer ready is stale, and a UDP service port whose ready endpoints went
/// from none to some is newly active. A terminating pod that still serves (ready false,
/// serving true) loses its entries at once, where v1.29+ waits until it stops serving.
#[derive(Clone, Copy, Debug, Default)]
pub struct V128;

impl Reconciler for V128 {
    fn name(&self) -> String {
        "v1.28".into()
    }

    fn after_sync(
        &mut self,
        _now: SimTime,
        input: &CleanupInput<'_>,
        ct: &mut dyn ConntrackOps,
    ) -> CleanupReport {
        event_based(input, ct, |e| e.ready, true)
    }
}

impl Reconciler for V131 {
    fn name(&self) -> String {
        if self.serving_fix {
            "v1.31".into()
        } else {
            "v1.31-nofix".into()
        }
    }

    fn after_sync(
        &mut self,
        _now: SimTime,
        input: &CleanupInput<'_>,
        ct: &mut dyn ConntrackOps,
    ) -> CleanupReport {
        event_based(input, ct, |e| e.serving, self.serving_fix)
    }
}

/// The event-based cleanup of v1.28–v1.31: `counts(e)` is the condition an endpoint must
/// have had to carry traffic (`IsReady()` in v1.28, `IsServing()` after #119394); with
/// `compare`, an endpoint that stays but loses it is stale too.
fn event_based(
    input: &CleanupInput<'_>,
    ct: &mut dyn ConntrackOps,
    counts: fn(&EndpointInfo) -> bool,
    compare: bool,
) -> CleanupReport {
    let (before, after) = (input.before, input.after);
    let mut report = CleanupReport {
        ran: true,
        ..CleanupReport::default()
    };
    // detectStaleConntrackEntries: endpoints that were serving and are gone (or, with
    // the fix, not serving any more).
    let mut deleted_eps: Vec<(&ServicePortName, &EndpointInfo)> = Vec::new();
    for (spn, old) in &before.endpoints {
        if spn.protocol != Protocol::UDP {
            continue;
        }
        let new = after.endpoints_of(spn);
        for ep in old.iter().filter(|e| counts(e)) {
            let still = new
                .iter()
                .any(|n| n.endpoint_string() == ep.endpoint_string() && (!compare || counts(n)));
            if !still {
                deleted_eps.push((spn, ep));
            }
        }
    }
    let count = |eps: &[EndpointInfo]| eps.iter().filter(|e| counts(e)).count();
    let mut newly_active: Vec<&ServicePortName> = Vec::new();
    for (spn, new) in &after.endpoints {
        if spn.protocol == Protocol::UDP && count(new) > 0 && count(before.endpoints_of(spn)) == 0 {
            newly_active.push(spn);
        }
    }

    // deleteStaleServiceConntrackEntries: deleted UDP service ports' cluster IPs, and
    // every IP and nodePort of newly active ones.
    let mut ips: BTreeSet<IpAddr> = BTreeSet::new();
    let mut node_ports: BTreeSet<u16> = BTreeSet::new();
    for svc in input.deleted_udp_service_ports() {
        ips.insert(svc.cluster_ip);
    }
    for spn in newly_active {
        if let Some(svc) = after.services.get(spn) {
            ips.extend(svc.frontend_ips());
            if let Some(np) = svc.node_port {
                node_ports.insert(np);
            }
        }
    }
    for ip in ips {
        let f = CtFilter {
            orig_dst: Some(ip),
            ..CtFilter::udp()
        };
        report.delete(ct, f, format!("service IP {ip} may have stale entries"));
    }
    for np in node_ports {
        let f = CtFilter {
            orig_dport: Some(np),
            ..CtFilter::udp()
        };
        report.delete(ct, f, format!("nodePort {np} may have stale entries"));
    }

    // deleteStaleEndpointConntrackEntries.
    for (spn, ep) in deleted_eps {
        let Some(svc) = after.services.get(spn) else {
            continue;
        };
        let reason = format!("stale endpoint {spn} {}", ep.endpoint_string());
        if let Some(np) = svc.node_port {
            let f = CtFilter {
                orig_dport: Some(np),
                reply_src: Some(ep.ip),
                ..CtFilter::udp()
            };
            report.delete(ct, f, reason.clone());
        }
        for ip in svc.frontend_ips() {
            let f = CtFilter {
                orig_dst: Some(ip),
                reply_src: Some(ep.ip),
                ..CtFilter::udp()
            };
            report.delete(ct, f, reason.clone());
        }
    }
    report
}

/// The v1.32 reconciler (#127318): keyed by service IP only.
#[derive(Clone, Copy, Debug, Default)]
pub struct V132 {
    /// When it runs.
    pub trigger: ReconcileTrigger,
}

impl Reconciler for V132 {
    fn name(&self) -> String {
        "v1.32".into()
    }

    fn after_sync(
        &mut self,
        _now: SimTime,
        input: &CleanupInput<'_>,
        ct: &mut dyn ConntrackOps,
    ) -> CleanupReport {
        if self.trigger.skips(input) {
            return CleanupReport::default();
        }
        let after = input.after;
        // Service IP → serving endpoint IPs; nodePort → serving endpoint IPs. Services with no
        // serving endpoint are included with an empty set.
        let mut by_ip: BTreeMap<IpAddr, BTreeSet<IpAddr>> = BTreeMap::new();
        let mut by_node_port: BTreeMap<u16, BTreeSet<IpAddr>> = BTreeMap::new();
        for (spn, svc) in &after.services {
            if svc.protocol != Protocol::UDP {
                continue;
            }
            let eps: BTreeSet<IpAddr> = after
                .endpoints_of(spn)
                .iter()
                .filter(|e| e.serving)
                .map(|e| e.ip)
                .collect();
            for ip in svc.frontend_ips() {
                by_ip.insert(ip, eps.clone());
            }
            if let Some(np) = svc.node_port {
                by_node_port.insert(np, eps.clone());
            }
        }
        let (entries, mut report) = CleanupReport::list_udp(ct);
        let mut filters = Filters::default();
        for e in &entries {
            if let Some(eps) = by_ip.get(&e.orig.dst) {
                if !eps.contains(&e.reply.src) {
                    let f = CtFilter {
                        orig_dst: Some(e.orig.dst),
                        reply_src: Some(e.reply.src),
                        ..CtFilter::udp()
                    };
                    filters.add(f, || {
                        format!(
                            "{} is not a serving endpoint of {}",
                            e.reply.src, e.orig.dst
                        )
                    });
                }
            }
            if let Some(eps) = by_node_port.get(&e.orig.dport) {
                if !eps.contains(&e.reply.src) {
                    let f = CtFilter {
                        orig_dport: Some(e.orig.dport),
                        reply_src: Some(e.reply.src),
                        ..CtFilter::udp()
                    };
                    filters.add(f, || {
                        format!(
                            "{} is not a serving endpoint of nodePort {}",
                            e.reply.src, e.orig.dport
                        )
                    });
                }
            }
        }
        filters.delete(ct, &mut report);
        report
    }
}

/// Frontend key `ip:port` and endpoint key (`ip:port`, or `ip` alone) of the reconcilers
/// from v1.33 on.
fn ep_key(ip: IpAddr, port: u16, with_port: bool) -> String {
    let host = match ip {
        IpAddr::V4(a) => a.to_string(),
        IpAddr::V6(a) => format!("[{a}]"),
    };
    if with_port {
        format!("{host}:{port}")
    } else {
        host
    }
}

/// How a reason names an endpoint: `IP` or `IP:PORT` as addresses print (`[IPv6]:PORT`),
/// not the bracketed comparison key of [`ep_key`].
fn ep_shown(ip: IpAddr, port: u16, with_port: bool) -> String {
    if with_port {
        SocketAddr::new(ip, port).to_string()
    } else {
        ip.to_string()
    }
}

type Frontends = (
    BTreeMap<(IpAddr, u16), BTreeSet<String>>,
    BTreeMap<u16, BTreeSet<String>>,
);

/// Builds the v1.33+ frontend maps. `include_empty`: keep service ports without serving
/// endpoints (#139629). `deleted`: service ports processed first with an empty set (#141371).
fn frontends(
    input: &CleanupInput<'_>,
    reply_port: bool,
    include_empty: bool,
    deleted: bool,
) -> Frontends {
    let mut by_ipport: BTreeMap<(IpAddr, u16), BTreeSet<String>> = BTreeMap::new();
    let mut by_node_port: BTreeMap<u16, BTreeSet<String>> = BTreeMap::new();
    let mut add = |svc: &ServicePortInfo, eps: BTreeSet<String>| {
        for ip in svc.frontend_ips() {
            by_ipport.insert((ip, svc.port), eps.clone());
        }
        if let Some(np) = svc.node_port {
            by_node_port.insert(np, eps);
        }
    };
    if deleted {
        for svc in input.deleted_udp_service_ports() {
            add(svc, BTreeSet::new());
        }
    }
    for (spn, svc) in &input.after.services {
        if svc.protocol != Protocol::UDP {
            continue;
        }
        let eps: BTreeSet<String> = input
            .after
            .endpoints_of(spn)
            .iter()
            .filter(|e| e.serving)
            .map(|e| ep_key(e.ip, e.port, reply_port))
            .collect();
        if eps.is_empty() && !include_empty {
            continue;
        }
        add(svc, eps);
    }
    (by_ipport, by_node_port)
}

/// The v1.33 reconciler (#130484: frontends keyed by service IP and port; #130542: endpoints
/// keyed by IP and port). Services without serving endpoints are skipped.
#[derive(Clone, Copy, Debug)]
pub struct V133 {
    /// When it runs.
    pub trigger: ReconcileTrigger,
    /// Match endpoints by IP *and* port (reply-port-src), #130542 (first in v1.34.0-alpha.2;
    /// v1.32's and v1.33's latest patches match by IP only).
    pub reply_port: bool,
}

impl Default for V133 {
    fn default() -> V133 {
        V133 {
            trigger: ReconcileTrigger::UdpEndpointChanges,
            reply_port: true,
        }
    }
}

impl Reconciler for V133 {
    fn name(&self) -> String {
        if self.reply_port {
            "v1.34".into()
        } else {
            "v1.33".into()
        }
    }

    fn after_sync(
        &mut self,
        _now: SimTime,
        input: &CleanupInput<'_>,
        ct: &mut dyn ConntrackOps,
    ) -> CleanupReport {
        if self.trigger.skips(input) {
            return CleanupReport::default();
        }
        let (by_ipport, by_node_port) = frontends(input, self.reply_port, false, false);
        let (entries, mut report) = CleanupReport::list_udp(ct);
        let mut filters = Filters::default();
        let sport = |e: &CtEntry| {
            if self.reply_port {
                Some(e.reply.sport)
            } else {
                None
            }
        };
        for e in &entries {
            let key = ep_key(e.reply.src, e.reply.sport, self.reply_port);
            if let Some(eps) = by_ipport.get(&(e.orig.dst, e.orig.dport)) {
                if !eps.contains(&key) {
                    // filterForIPPortNAT
                    let f = CtFilter {
                        orig_dst: Some(e.orig.dst),
                        orig_dport: Some(e.orig.dport),
                        reply_src: Some(e.reply.src),
                        reply_sport: sport(e),
                        ..CtFilter::udp()
                    };
                    filters.add(f, || {
                        format!(
                            "{} is not a serving endpoint of {}",
                            ep_shown(e.reply.src, e.reply.sport, self.reply_port),
                            SocketAddr::new(e.orig.dst, e.orig.dport)
                        )
                    });
                }
            }
            if let Some(eps) = by_node_port.get(&e.orig.dport) {
                if !eps.contains(&key) {
                    // filterForPortNAT
                    let f = CtFilter {
                        orig_dport: Some(e.orig.dport),
                        reply_src: Some(e.reply.src),
                        reply_sport: sport(e),
                        ..CtFilter::udp()
                    };
                    filters.add(f, || {
                        format!(
                            "{} is not a serving endpoint of nodePort {}",
                            ep_shown(e.reply.src, e.reply.sport, self.reply_port),
                            e.orig.dport
                        )
                    });
                }
            }
        }
        filters.delete(ct, &mut report);
        report
    }
}

/// The current reconciler: V133 with endpoints keyed by IP and port, services with no serving
/// endpoints processed with an empty set (#139629), deleted UDP services cleaned (#141371),
/// and exactly the stale entries deleted (`DeleteEntries(flows)`).
#[derive(Clone, Copy, Debug)]
pub struct Latest {
    /// When it runs (deleted UDP services also trigger it).
    pub trigger: ReconcileTrigger,
    /// Clean deleted UDP services (#141371); without it, the v1.37 reconciler (#139629 only).
    pub deleted_services: bool,
}

impl Default for Latest {
    fn default() -> Latest {
        Latest {
            trigger: ReconcileTrigger::default(),
            deleted_services: true,
        }
    }
}

impl Reconciler for Latest {
    fn name(&self) -> String {
        if self.deleted_services {
            "latest".into()
        } else {
            "v1.37".into()
        }
    }

    fn after_sync(
        &mut self,
        _now: SimTime,
        input: &CleanupInput<'_>,
        ct: &mut dyn ConntrackOps,
    ) -> CleanupReport {
        if self.trigger.skips(input)
            && (!self.deleted_services || input.deleted_udp_service_ports().is_empty())
        {
            return CleanupReport::default();
        }
        let (by_ipport, by_node_port) = frontends(input, true, true, self.deleted_services);
        let (entries, mut report) = CleanupReport::list_udp(ct);
        let mut stale: Vec<(CtEntry, String)> = Vec::new();
        for e in &entries {
            let key = ep_key(e.reply.src, e.reply.sport, true);
            if let Some(eps) = by_ipport.get(&(e.orig.dst, e.orig.dport)) {
                if !eps.contains(&key) {
                    stale.push((
                        *e,
                        format!(
                            "{} is not a serving endpoint of {}",
                            ep_shown(e.reply.src, e.reply.sport, true),
                            SocketAddr::new(e.orig.dst, e.orig.dport)
                        ),
                    ));
                    continue;
                }
            }
            if let Some(eps) = by_node_port.get(&e.orig.dport) {
                if !eps.contains(&key) {
                    stale.push((
                        *e,
                        format!(
                            "{} is not a serving endpoint of nodePort {}",
                            ep_shown(e.reply.src, e.reply.sport, true),
                            e.orig.dport
                        ),
                    ));
                }
            }
        }
        for (e, reason) in stale {
            report.delete(ct, CtFilter::exact(&e), reason);
        }
        report
    }
}

#[cfg(test)]
mod tests;
