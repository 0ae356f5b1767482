//! `nfsim doctor`: a node's conntrack table audited against its rules, all at once.
//!
//! [`examine`] reads one node's state at one instant (its rules and its conntrack table, as
//! a [`Netns`]; optionally the Services and EndpointSlices kube-proxy sees) and returns a
//! [`Report`]: findings as data, in a stable order, most urgent first, the same bytes for
//! the same input.
//!
//! How it knows what the rules do: for every Service frontend that an entry was DNAT'd
//! from (protocol, address, port), it traces a new packet of that flow through a copy of the
//! node with an empty conntrack table, following every `statistic` / `numgen` branch
//! ([`crate::explain::trace_in`] with `all_branches`): the endpoints the rules DNAT the
//! frontend to, each with its exact probability, in either proxy mode. An entry whose reply
//! source is none of them is **stale** (with EndpointSlices: one that is not serving).
//!
//! For each stale entry the report says when it will expire if nothing refreshes it, what
//! says a client keeps it alive, and what each kube-proxy release's cleanup would do to it:
//! each release's own code (`crate::cluster::proxy::release_cleanup_on`) run on a copy of
//! the table, as it runs after the next sync that reconciles (see [`CleanupOutcome`]). The
//! fix is `conntrack -D` lines, each parsed by sim-conntrack's filter code (conntrack-tools'
//! own flags) and run on a copy: the report carries only lines that delete exactly the
//! stale entries. Other findings: frontends with no endpoint left (blackholes in waiting),
//! unreplied UDP entries that keep being refreshed, table pressure against
//! `nf_conntrack_max`, skew of the live entries over the endpoints against the rules'
//! probabilities (Pearson's chi-square, [`stats`]), and rules that will surprise.
//!
//! IPv6 entries are not audited (nfsim does not model IPv6 rules yet): they are counted in
//! a warning naming the first one's line.

pub mod lines;
mod render;
pub mod stats;

use crate::cluster::proxy::release_cleanup_on;
use crate::explain::{trace_in, ExplainError, TraceOptions};
use crate::k8s::Protocol;
use crate::kubeproxy::ct_adapter::SimConntrackOps;
use crate::kubeproxy::model::{EndpointInfo, ProxyState, ServicePortInfo};
use crate::kubeproxy::names::ServicePortName;
use crate::kubeproxy::{CleanupInput, ReconcileTrigger};
use crate::scenario::model::{Cleanup, Release};
use serde::Serialize;
use sim_conntrack::{CtEntry, Filter, ListedEntry, Status, TcpState};
use sim_core::{Packet, SimTime};
use sim_netfilter::netns::{Ingress, Netns, Prefix};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

pub use lines::RuleLines;

/// The version of the `--json` document (docs/json-schema.md, "nfsim doctor --json").
pub const SCHEMA_VERSION: u32 = 1;

/// Linux's default `ip_local_port_range` (32768–60999): a source port outside it was chosen
/// by the application, not by the kernel's ephemeral allocator.
pub const EPHEMERAL_PORTS: (u16, u16) = (32768, 60999);

/// What the doctor reads.
pub struct Input<'a> {
    /// The node: rules and conntrack table at [`Input::now`].
    pub ns: &'a Netns,
    /// The instant of the state.
    pub now: SimTime,
    /// The seed of the probes' random streams.
    pub seed: u64,
    /// What was audited, for the report's first line (`node-2 of X at 00:06:00`, or the
    /// files).
    pub subject: String,
    /// The rules file's name (or how to print the rules) and its text, for line numbers.
    pub rules_file: &'a str,
    /// The rules' text.
    pub rules_text: &'a str,
    /// The listing the table was loaded from (`--conntrack`), with its file name, to cite
    /// each entry's line.
    pub listing: Option<(&'a str, &'a [ListedEntry])>,
    /// The Services and EndpointSlices as kube-proxy sees them (`--services`,
    /// `--endpointslices`, or a scenario's API), with where they came from.
    pub cluster: Option<(&'a ProxyState, String)>,
    /// The cluster's pod addresses (`--cluster-cidr`; a scenario's nodes' `podCIDR`s): DNAT
    /// targets outside all of them are pointed out. Empty: not checked.
    pub pod_cidrs: Vec<Prefix>,
    /// Warnings about the rules found while loading them (interfaces the node lacks), each
    /// `FILE:LINE: …`.
    pub rule_warnings: Vec<String>,
}

/// Where a probe packet enters the node: `(packet, from a local process)` → ingress.
pub type IngressFn<'a> = dyn FnMut(&Packet, bool) -> Result<(Ingress, String), String> + 'a;

/// Why the doctor could not finish.
#[derive(Debug, thiserror::Error)]
pub enum DoctorError {
    /// A probe trace failed.
    #[error(transparent)]
    Trace(#[from] ExplainError),
    /// Something else, said whole.
    #[error("{0}")]
    Other(String),
}

/// How urgent a finding is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    /// Traffic goes wrong now (stale entries).
    Urgent,
    /// Traffic will go wrong, or something is off (blackholes, a full table, skew).
    Warning,
    /// Worth knowing.
    Info,
}

impl Severity {
    /// The word in the text report.
    pub fn word(self) -> &'static str {
        match self {
            Severity::Urgent => "URGENT",
            Severity::Warning => "WARNING",
            Severity::Info => "info",
        }
    }
}

/// One conntrack entry, as a finding cites it.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EntryView {
    /// The line of `--conntrack` it was read from (1-based), when it came from a file.
    pub line: Option<usize>,
    /// Its `conntrack -L` line at the instant.
    pub text: String,
    /// `tcp`, `udp`, `sctp`.
    pub proto: String,
    /// The client socket (original source).
    pub client: String,
    /// The frontend it was sent to (original destination).
    pub frontend: String,
    /// Where its DNAT sends it (reply source).
    pub endpoint: String,
    /// Seconds left.
    pub timeout_s: u64,
    /// Its timeout when refreshed in its state now (`nf_conntrack_udp_timeout_stream` for an
    /// ASSURED UDP entry, …), seconds.
    pub full_timeout_s: u64,
    /// Seconds since it was made, when the table knows (`delta-time=`).
    pub age_s: Option<u64>,
    /// `[ASSURED]`.
    pub assured: bool,
    /// `[UNREPLIED]`.
    pub unreplied: bool,
    /// Whether its pattern says a client keeps refreshing it.
    pub kept_alive: bool,
    /// What says so (or not).
    pub pattern: Vec<String>,
    /// The releases whose cleanup would delete it (names, release order).
    pub deleted_by: Vec<String>,
}

/// One finding.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Finding {
    /// How urgent.
    pub severity: Severity,
    /// `stale`, `blackhole`, `unreplied_refreshed`, `table_pressure`, `skew`,
    /// `collateral_cleanup`, `orphan`, `rules`.
    pub kind: String,
    /// The Service port (`ns/name:port`), when one is concerned.
    pub service: Option<String>,
    /// The frontend (`udp 10.96.0.10:53`), when one is concerned.
    pub frontend: Option<String>,
    /// One sentence.
    pub summary: String,
    /// The evidence: entry lines, rule lines, figures.
    pub evidence: Vec<String>,
    /// What will happen.
    pub forecast: Vec<String>,
    /// The narrowest fix, when there is one.
    pub fix: Vec<String>,
    /// The entries concerned.
    pub entries: Vec<EntryView>,
}

/// An endpoint of a frontend, as the rules send new flows.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct EndpointView {
    /// `ip:port`.
    pub endpoint: String,
    /// The exact probability of a new flow going there, as a fraction of 2^k.
    pub probability: String,
    /// The same as a float.
    pub p: f64,
    /// Live entries to it.
    pub live_entries: u64,
    /// Its state in the EndpointSlices, when given: `serving`, `serving, terminating`,
    /// `not serving`, `absent`.
    pub slices: Option<String>,
    /// The lines of the rules that send flows there.
    pub rule_lines: Vec<usize>,
    /// The line of the rule that DNATs to it.
    pub dnat_line: Option<usize>,
}

/// A frontend the entries were sent to, and what the rules do with it now.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FrontendView {
    /// `udp 10.96.0.10:53`.
    pub frontend: String,
    /// The Service port, from the rules' comments or chain names.
    pub service: Option<String>,
    /// The probe traced.
    pub probe: String,
    /// The endpoints new flows go to.
    pub endpoints: Vec<EndpointView>,
    /// The probability that a new flow is rejected or dropped (no endpoints).
    pub no_endpoint_p: f64,
    /// How a new flow ends when no rule DNATs it.
    pub without_dnat: Option<String>,
    /// Entries to it: all, stale.
    pub entries: u64,
    /// Of which stale.
    pub stale: u64,
    /// ClientIP affinity (`recent`) decides for known clients: the probabilities are those
    /// of a new client.
    pub affinity: bool,
    /// The skew test of live entries against the probabilities, when there were entries to
    /// test.
    pub skew: Option<SkewView>,
}

/// A chi-square test of one frontend's live entries.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SkewView {
    /// Pearson's statistic.
    pub chi_square: f64,
    /// Degrees of freedom.
    pub df: u32,
    /// The p-value.
    pub p_value: f64,
    /// The live entries tested.
    pub entries: u64,
    /// The smallest expected count (below 5 the test is rough).
    pub min_expected: f64,
}

/// What one kube-proxy cleanup (several releases can ship the same) would do.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CleanupOutcome {
    /// The releases that ship it (`v1.34, v1.35, v1.36`).
    pub releases: Vec<String>,
    /// When it acts on this state.
    pub when: String,
    /// Stale entries it deletes.
    pub stale_deleted: u64,
    /// Stale entries it leaves.
    pub stale_kept: u64,
    /// Live entries it deletes too.
    pub live_deleted: u64,
}

/// A `conntrack -D` line and what running it on a copy of the table did.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct FixLine {
    /// The command.
    pub command: String,
    /// Entries it deleted on the copy (all stale).
    pub deletes: u64,
}

/// The table's fill.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Pressure {
    /// Entries.
    pub entries: u64,
    /// `nf_conntrack_max` (0: unlimited).
    pub max: u64,
    /// TCP entries in TIME_WAIT.
    pub time_wait: u64,
    /// UDP entries never replied to.
    pub unreplied_udp: u64,
    /// Entries without `[ASSURED]`: what early drop takes first.
    pub not_assured: u64,
}

/// Figures of the whole report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Summary {
    /// Entries in the table.
    pub entries: u64,
    /// Entries DNAT'd to a Service frontend.
    pub service_entries: u64,
    /// Stale entries.
    pub stale: u64,
    /// Stale entries whose pattern says a client keeps them alive.
    pub kept_alive: u64,
    /// Frontends with no endpoint left and entries still to them.
    pub blackholes: u64,
    /// IPv6 entries not audited.
    pub ipv6_skipped: u64,
}

/// The doctor's report.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Report {
    /// [`SCHEMA_VERSION`].
    pub version: u32,
    /// What was audited.
    pub subject: String,
    /// Where the Service → endpoint truth came from: `rules`, or the slices' source.
    pub truth: String,
    /// Figures.
    pub summary: Summary,
    /// Findings, most urgent first.
    pub findings: Vec<Finding>,
    /// Each frontend entries went to.
    pub frontends: Vec<FrontendView>,
    /// Each cleanup, release order.
    pub cleanup: Vec<CleanupOutcome>,
    /// The checked `conntrack -D` lines deleting exactly the stale entries.
    pub fix: Vec<FixLine>,
    /// The table's fill.
    pub pressure: Pressure,
    /// Caveats.
    pub warnings: Vec<String>,
}

impl Report {
    /// Whether anything is stale (the command exits 1).
    pub fn has_stale(&self) -> bool {
        self.summary.stale > 0
    }
    /// The text report: a colleague's summary, most urgent first.
    pub fn text(&self) -> String {
        render::text(self)
    }
    /// The `--json` document (one line).
    pub fn json(&self) -> String {
        serde_json::to_string(self).unwrap_or_else(|e| format!("{{\"error\":\"{e}\"}}"))
    }
}

/// `(proto, address, port, from a local process)`.
type FrontKey = (u8, IpAddr, u16, bool);

/// What the probe of one frontend found.
#[derive(Clone, Debug, Default)]
struct Probe {
    service: Option<String>,
    packet: String,
    /// endpoint → (probability, rule lines).
    endpoints: BTreeMap<SocketAddr, (crate::explain::Dyadic, Vec<usize>)>,
    /// endpoint → the line of the rule that DNATs to it.
    dnat_lines: BTreeMap<SocketAddr, usize>,
    no_endpoint_p: f64,
    without_dnat: Option<String>,
    affinity: bool,
}

fn proto_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        1 => "icmp".into(),
        n => n.to_string(),
    }
}

fn sock(a: IpAddr, p: u16) -> SocketAddr {
    SocketAddr::new(a, p)
}

/// The Service port a traced path names: an iptables comment (`"ns/name:port cluster IP"`,
/// `"ns/name:port -> 10.244.1.5:53"`) or an nftables chain (`service-HASH-ns/name/udp/port`).
fn service_of(rules: &[String]) -> Option<String> {
    for r in rules {
        if let Some(i) = r.find("--comment \"") {
            let rest = &r[i + 11..];
            if let Some(end) = rest.find('"') {
                let c = &rest[..end];
                let c = c.split(" -> ").next().unwrap_or(c);
                for suffix in [
                    " cluster IP",
                    " nodePort",
                    " external IP",
                    " loadbalancer IP",
                    " has no endpoints",
                    " has no local endpoints",
                ] {
                    if let Some(name) = c.strip_suffix(suffix) {
                        if name.contains('/') && !name.contains(' ') {
                            return Some(name.to_string());
                        }
                    }
                }
            }
        }
    }
    for r in rules {
        for w in r.split_whitespace() {
            if let Some(rest) = w.strip_prefix("service-") {
                // HASH-ns/name/proto/port
                if let Some((_, spn)) = rest.split_once('-') {
                    let parts: Vec<&str> = spn.split('/').collect();
                    if parts.len() == 4 {
                        return Some(if parts[3].is_empty() {
                            format!("{}/{}", parts[0], parts[1])
                        } else {
                            format!("{}/{}:{}", parts[0], parts[1], parts[3])
                        });
                    }
                }
            }
        }
    }
    None
}

/// The frontend's probe: a new packet of `e`'s flow through `clean` (the node, no entries).
fn probe(
    clean: &Netns,
    e: &CtEntry,
    local: bool,
    input: &Input<'_>,
    lines: &RuleLines,
    ingress: &mut IngressFn<'_>,
) -> Result<Probe, DoctorError> {
    let o = &e.orig;
    let src = sock(o.src, o.sport);
    let dst = sock(o.dst, o.dport);
    let pkt: Packet = format!("{} {src} -> {dst}", proto_name(o.proto))
        .parse()
        .map_err(|e| DoctorError::Other(format!("probe of {src} -> {dst}: {e}")))?;
    let (ing, why) = ingress(&pkt, local).map_err(DoctorError::Other)?;
    let opts = TraceOptions {
        local,
        all_branches: true,
        at: input.now,
    };
    let r = trace_in(clean, pkt, ing, why, input.seed, &opts)?;
    let mut p = Probe {
        packet: pkt.to_string(),
        ..Probe::default()
    };
    let Some(b) = r.branches else {
        return Ok(p);
    };
    let mut no_ep = crate::explain::Dyadic::zero();
    for out in &b.outcomes {
        let rules: Vec<String> = out.rules_matched.iter().flatten().cloned().collect();
        if p.service.is_none() {
            p.service = service_of(&rules);
        }
        if rules
            .iter()
            .any(|r| r.contains(" recent: ") || r.contains("-m recent"))
        {
            p.affinity = true;
        }
        let target = out
            .outcome
            .dnat
            .as_deref()
            .and_then(|d| d.split(" -> ").nth(1))
            .and_then(|t| t.parse::<SocketAddr>().ok());
        match target {
            Some(t) => {
                let mut ls: Vec<usize> = rules
                    .iter()
                    .filter(|r| {
                        r.contains("KUBE-SVC-")
                            || r.contains("KUBE-SVL-")
                            || r.contains("KUBE-SEP-")
                            || r.contains(" service-")
                            || r.contains(" endpoint-")
                    })
                    .filter_map(|r| lines.line_of(r))
                    .collect();
                ls.sort_unstable();
                ls.dedup();
                if let Some(l) = rules
                    .iter()
                    .filter(|r| r.contains("-j DNAT") || r.contains(" dnat to "))
                    .find_map(|r| lines.line_of(r))
                {
                    p.dnat_lines.insert(t, l);
                }
                let entry = p
                    .endpoints
                    .entry(t)
                    .or_insert((crate::explain::Dyadic::zero(), Vec::new()));
                entry.0 = entry.0.add(out.exact());
                entry.1.extend(ls);
                entry.1.sort_unstable();
                entry.1.dedup();
            }
            None if matches!(out.outcome.verdict.as_str(), "rejected" | "dropped") => {
                no_ep = no_ep.add(out.exact());
                if p.without_dnat.is_none() {
                    p.without_dnat = Some(out.outcome.detail.clone());
                }
            }
            None => {
                if p.without_dnat.is_none() {
                    p.without_dnat = Some(out.outcome.detail.clone());
                }
            }
        }
    }
    p.no_endpoint_p = dyadic_f64(&no_ep);
    Ok(p)
}

fn dyadic_f64(d: &crate::explain::Dyadic) -> f64 {
    crate::explain::Probability::from(d)
        .decimal()
        .parse()
        .unwrap_or(0.0)
}

/// The timeout an entry gets when refreshed in its present state, seconds.
fn full_timeout(ns: &Netns, e: &CtEntry) -> u64 {
    let ct = ns.conntrack();
    let s = ct.sysctls();
    match e.proto() {
        17 if e.status.contains(Status::ASSURED) => s.udp_timeout_stream.as_secs(),
        17 => s.udp_timeout.as_secs(),
        6 => {
            let name = match e.tcp_state {
                Some(TcpState::Established) => "nf_conntrack_tcp_timeout_established",
                Some(TcpState::TimeWait) => "nf_conntrack_tcp_timeout_time_wait",
                Some(TcpState::SynSent) => "nf_conntrack_tcp_timeout_syn_sent",
                Some(TcpState::SynRecv) => "nf_conntrack_tcp_timeout_syn_recv",
                Some(TcpState::FinWait) => "nf_conntrack_tcp_timeout_fin_wait",
                Some(TcpState::CloseWait) => "nf_conntrack_tcp_timeout_close_wait",
                Some(TcpState::LastAck) => "nf_conntrack_tcp_timeout_last_ack",
                Some(TcpState::Close) => "nf_conntrack_tcp_timeout_close",
                _ => "nf_conntrack_tcp_timeout_established",
            };
            ct.sysctl(name)
                .ok()
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0)
        }
        1 => s.icmp_timeout.as_secs(),
        _ => s.generic_timeout.as_secs(),
    }
}

fn age_of(now: SimTime, e: &CtEntry) -> Option<u64> {
    let start = e.start_ns?;
    let now_ns = i64::try_from(now.as_nanos()).ok()?;
    u64::try_from(now_ns.saturating_sub(start) / 1_000_000_000).ok()
}

fn entry_key(e: &CtEntry) -> (u8, SocketAddr, SocketAddr) {
    (
        e.proto(),
        sock(e.orig.src, e.orig.sport),
        sock(e.orig.dst, e.orig.dport),
    )
}

/// Reads the state and reports. `ingress` says where a probe packet enters the node.
pub fn examine(input: &Input<'_>, ingress: &mut IngressFn<'_>) -> Result<Report, DoctorError> {
    let now = input.now;
    let ns = input.ns;
    let lines = RuleLines::of(input.rules_text);
    let all = ns.conntrack().list(now, &Filter::all());
    let mut warnings: Vec<String> = Vec::new();

    // Listing lines by tuple.
    let mut line_of: BTreeMap<(u8, SocketAddr, SocketAddr), usize> = BTreeMap::new();
    if let Some((_, listed)) = input.listing {
        for l in listed {
            line_of
                .entry((
                    l.orig.proto,
                    sock(l.orig.src, l.orig.sport),
                    sock(l.orig.dst, l.orig.dport),
                ))
                .or_insert(l.line);
        }
    }

    // A copy of the node without entries, for the probes.
    let mut clean = ns.clone();
    clean.conntrack_mut().delete(now, &Filter::all());
    clean.drain_conntrack_events();

    let mut ipv6 = 0u64;
    let mut first_v6: Option<String> = None;
    let mut probes: BTreeMap<FrontKey, Probe> = BTreeMap::new();
    // Service entries: (entry, frontend key).
    let mut service_entries: Vec<(CtEntry, FrontKey)> = Vec::new();
    for e in &all {
        if !e.orig.src.is_ipv4() {
            ipv6 += 1;
            if first_v6.is_none() {
                first_v6 = Some(match line_of_entry(&line_of, e) {
                    Some(l) => format!("{}: line {l}", input.listing.map_or("", |x| x.0)),
                    None => e.list_line(now).to_string(),
                });
            }
            continue;
        }
        if !matches!(e.proto(), 6 | 17 | 132) || !e.is_dst_nat() {
            continue;
        }
        let local = ns.routing().is_local(e.orig.src) || e.orig.src.is_loopback();
        let key = (e.proto(), e.orig.dst, e.orig.dport, local);
        if let std::collections::btree_map::Entry::Vacant(slot) = probes.entry(key) {
            slot.insert(probe(&clean, e, local, input, &lines, ingress)?);
        }
        service_entries.push((*e, key));
    }
    if ipv6 > 0 {
        warnings.push(format!(
            "{}: {ipv6} IPv6 entries not audited: nfsim does not model IPv6 rules yet",
            first_v6.unwrap_or_default()
        ));
    }

    // The cluster's view, when given: frontend → (spn, service port).
    let cluster = input.cluster.as_ref().map(|(s, _)| *s);
    let slice_state = |key: &FrontKey, ep: SocketAddr| -> Option<(String, bool)> {
        let st = cluster?;
        let (proto, addr, port, _) = *key;
        let want = match proto {
            6 => Protocol::TCP,
            17 => Protocol::UDP,
            _ => Protocol::SCTP,
        };
        let by_frontend = st
            .services
            .iter()
            .find(|(_, s)| {
                s.protocol == want
                    && ((s.port == port && s.frontend_ips().contains(&addr))
                        || s.node_port == Some(port))
            })
            .map(|(spn, _)| spn);
        // Slices without their Services: the service port the rules name.
        let by_name = || {
            let name = probes.get(key)?.service.as_deref()?;
            st.endpoints
                .keys()
                .find(|spn| spn.protocol == want && spn.to_string() == name)
        };
        let spn = by_frontend.or_else(by_name)?;
        let eps = st.endpoints_of(spn);
        Some(
            match eps.iter().find(|x| x.ip == ep.ip() && x.port == ep.port()) {
                None => ("absent".into(), false),
                Some(x) if x.serving && x.terminating => ("serving, terminating".into(), true),
                Some(x) if x.serving => ("serving".into(), true),
                Some(_) => ("not serving".into(), false),
            },
        )
    };

    // Classify.
    struct Classified {
        e: CtEntry,
        key: FrontKey,
        stale: Option<String>,
        orphan: bool,
    }
    let mut classified: Vec<Classified> = Vec::new();
    for (e, key) in &service_entries {
        let p = &probes[key];
        let ep = sock(e.reply.src, e.reply.sport);
        let in_rules = p.endpoints.contains_key(&ep);
        let slices = slice_state(key, ep);
        let (stale, orphan) = if p.endpoints.is_empty() && p.no_endpoint_p == 0.0 {
            (
                Some(format!(
                    "no rule DNATs {} any more (a deleted Service, or a DNAT kube-proxy does not own)",
                    sock(e.orig.dst, e.orig.dport)
                )),
                true,
            )
        } else {
            match slices {
                Some((state, false)) => (
                    Some(if state == "absent" {
                        format!("{ep} is absent from the EndpointSlices")
                    } else {
                        format!("{ep} is {state} in the EndpointSlices")
                    }),
                    false,
                ),
                Some((_, true)) => (None, false),
                None if in_rules => (None, false),
                None if p.endpoints.is_empty() => (
                    Some(format!(
                        "{} has no endpoints in the rules; {ep} is gone",
                        sock(e.orig.dst, e.orig.dport)
                    )),
                    false,
                ),
                None => (
                    Some(format!(
                        "{ep} is not an endpoint of {} in the rules (they send new flows to {})",
                        sock(e.orig.dst, e.orig.dport),
                        p.endpoints
                            .keys()
                            .map(|s| s.to_string())
                            .collect::<Vec<_>>()
                            .join(", ")
                    )),
                    false,
                ),
            }
        };
        classified.push(Classified {
            e: *e,
            key: *key,
            stale,
            orphan,
        });
    }

    // The cleanups, each on a copy of the table.
    let state = match cluster {
        // Slices without their Services: the service ports as the rules show them, the
        // endpoints as the slices say.
        Some(s) if s.services.is_empty() => ProxyState {
            services: state_from_probes(&probes).services,
            endpoints: s.endpoints.clone(),
        },
        Some(s) => s.clone(),
        None => state_from_probes(&probes),
    };
    let cleanup_input = CleanupInput {
        before: &state,
        after: &state,
    };
    let mut groups: Vec<(Cleanup, Vec<Release>)> = Vec::new();
    for r in Release::all() {
        match groups.iter_mut().find(|(c, _)| *c == r.cleanup()) {
            Some((_, v)) => v.push(r),
            None => groups.push((r.cleanup(), vec![r])),
        }
    }
    let stale_keys: BTreeSet<(u8, SocketAddr, SocketAddr)> = classified
        .iter()
        .filter(|c| c.stale.is_some() && !c.orphan)
        .map(|c| entry_key(&c.e))
        .collect();
    let mut deleted_by: BTreeMap<(u8, SocketAddr, SocketAddr), Vec<String>> = BTreeMap::new();
    let mut cleanup = Vec::new();
    for (c, releases) in &groups {
        let mut table = ns.conntrack().clone();
        let before: BTreeSet<_> = table
            .list(now, &Filter::all())
            .iter()
            .map(entry_key)
            .collect();
        let mut r = release_cleanup_on(releases[0], ReconcileTrigger::EverySync);
        {
            let mut ops = SimConntrackOps::new(&mut table, now);
            let rep = r.after_sync(now, &cleanup_input, &mut ops);
            if let Some(err) = rep.error {
                return Err(DoctorError::Other(err));
            }
        }
        let after: BTreeSet<_> = table
            .list(now, &Filter::all())
            .iter()
            .map(entry_key)
            .collect();
        let gone: Vec<_> = before.difference(&after).copied().collect();
        let names: Vec<String> = releases.iter().map(|r| r.name().to_string()).collect();
        let mut stale_deleted = 0;
        let mut live_deleted = 0;
        for k in &gone {
            if stale_keys.contains(k) {
                stale_deleted += 1;
                deleted_by
                    .entry(*k)
                    .or_default()
                    .extend(names.iter().cloned());
            } else {
                live_deleted += 1;
            }
        }
        let when = match c {
            Cleanup::None => "never: no cleanup".to_string(),
            Cleanup::EventReady | Cleanup::EventPresence | Cleanup::EventServing => {
                "only at the sync that sees an endpoint go; for entries already stale that has passed".to_string()
            }
            _ => "at its next reconcile (after a sync that sees a UDP Service's endpoints change)"
                .to_string(),
        };
        cleanup.push(CleanupOutcome {
            releases: names,
            when,
            stale_deleted,
            stale_kept: stale_keys.len() as u64 - stale_deleted,
            live_deleted,
        });
    }

    // Entry views.
    let view = |e: &CtEntry| -> EntryView {
        let full = full_timeout(ns, e);
        let left = e.expiry.secs_left(now);
        let age = age_of(now, e);
        let assured = e.status.contains(Status::ASSURED);
        let unreplied = !e.status.contains(Status::SEEN_REPLY);
        let mut pattern = Vec::new();
        let mut kept = false;
        if let Some(a) = age {
            if a > full && full > 0 {
                pattern.push(format!(
                    "{a} s old, more than its {full} s timeout: refreshed since it was made"
                ));
                kept = true;
            }
        }
        let since = full.saturating_sub(left);
        let recent = full > 0 && since * 2 <= full;
        if recent {
            pattern.push(format!(
                "{left} of {full} s left: a packet in the last {since} s"
            ));
        }
        if assured {
            pattern.push("[ASSURED]: replies were seen; the flow is in use".into());
        }
        let fixed = e.orig.sport < EPHEMERAL_PORTS.0 || e.orig.sport > EPHEMERAL_PORTS.1;
        if fixed {
            pattern.push(format!(
                "source port {} outside the ephemeral range {}-{}: a fixed-port sender",
                e.orig.sport, EPHEMERAL_PORTS.0, EPHEMERAL_PORTS.1
            ));
        }
        if recent && (assured || fixed) {
            kept = true;
        }
        EntryView {
            line: line_of_entry(&line_of, e),
            text: e.list_line(now).to_string(),
            proto: proto_name(e.proto()),
            client: sock(e.orig.src, e.orig.sport).to_string(),
            frontend: sock(e.orig.dst, e.orig.dport).to_string(),
            endpoint: sock(e.reply.src, e.reply.sport).to_string(),
            timeout_s: left,
            full_timeout_s: full,
            age_s: age,
            assured,
            unreplied,
            kept_alive: kept,
            pattern,
            deleted_by: deleted_by.get(&entry_key(e)).cloned().unwrap_or_default(),
        }
    };

    // Fix lines, checked on a copy.
    let mut fix = Vec::new();
    let mut stale_groups: BTreeMap<(u8, IpAddr, u16, SocketAddr), Vec<CtEntry>> = BTreeMap::new();
    for c in classified.iter().filter(|c| c.stale.is_some() && !c.orphan) {
        let e = &c.e;
        stale_groups
            .entry((
                e.proto(),
                e.orig.dst,
                e.orig.dport,
                sock(e.reply.src, e.reply.sport),
            ))
            .or_default()
            .push(*e);
    }
    let mut fix_of: BTreeMap<(u8, IpAddr, u16, SocketAddr), Vec<String>> = BTreeMap::new();
    {
        let mut copy = ns.conntrack().clone();
        for (k, es) in &stale_groups {
            let (proto, dst, dport, ep) = *k;
            let args = format!(
                "-D -p {} --orig-dst {dst} --orig-port-dst {dport} --reply-src {} --reply-port-src {}",
                proto_name(proto),
                ep.ip(),
                ep.port()
            );
            let want: BTreeSet<_> = es.iter().map(entry_key).collect();
            let mut cmds = Vec::new();
            match try_delete(&mut copy, now, &args, &want) {
                Some(n) => cmds.push((format!("conntrack {args}"), n)),
                None => {
                    // Narrower: one line per entry.
                    for e in es {
                        let one = format!(
                            "-D -p {} --orig-src {} --orig-dst {} --orig-port-src {} --orig-port-dst {} --reply-src {} --reply-port-src {}",
                            proto_name(proto),
                            e.orig.src,
                            e.orig.dst,
                            e.orig.sport,
                            e.orig.dport,
                            e.reply.src,
                            e.reply.sport
                        );
                        let w: BTreeSet<_> = [entry_key(e)].into_iter().collect();
                        match try_delete(&mut copy, now, &one, &w) {
                            Some(n) => cmds.push((format!("conntrack {one}"), n)),
                            None => warnings.push(format!(
                                "no conntrack -D line deletes only {}: delete it by hand",
                                e.list_line(now)
                            )),
                        }
                    }
                }
            }
            for (c, n) in cmds {
                fix_of.entry(*k).or_default().push(c.clone());
                fix.push(FixLine {
                    command: c,
                    deletes: n,
                });
            }
        }
        let left: BTreeSet<_> = copy
            .list(now, &Filter::all())
            .iter()
            .map(entry_key)
            .collect();
        if let Some(k) = stale_keys.iter().find(|k| left.contains(k)) {
            return Err(DoctorError::Other(format!(
                "internal: the fix lines left the stale entry {k:?}"
            )));
        }
    }

    // Findings.
    let mut findings: Vec<Finding> = Vec::new();
    let mut frontends: Vec<FrontendView> = Vec::new();
    for (key, p) in &probes {
        let (proto, addr, port, _) = *key;
        let fe = format!("{} {}", proto_name(proto), sock(addr, port));
        let mine: Vec<&Classified> = classified.iter().filter(|c| c.key == *key).collect();
        let stale: Vec<&Classified> = mine.iter().copied().filter(|c| c.stale.is_some()).collect();
        let orphan = mine.iter().any(|c| c.orphan);
        // Endpoint views and skew.
        let mut eps = Vec::new();
        let mut observed = Vec::new();
        let mut probs = Vec::new();
        for (ep, (d, ls)) in &p.endpoints {
            let live = mine
                .iter()
                .filter(|c| c.stale.is_none() && sock(c.e.reply.src, c.e.reply.sport) == *ep)
                .count() as u64;
            let pf = dyadic_f64(d);
            observed.push(live);
            probs.push(pf);
            eps.push(EndpointView {
                endpoint: ep.to_string(),
                probability: crate::explain::Probability::from(d).fraction(),
                p: pf,
                live_entries: live,
                slices: slice_state(key, *ep).map(|s| s.0),
                rule_lines: ls.clone(),
                dnat_line: p.dnat_lines.get(ep).copied(),
            });
        }
        let skew = if p.affinity {
            None
        } else {
            stats::chi_square(&observed, &probs).map(|c| SkewView {
                chi_square: c.statistic,
                df: c.df,
                p_value: c.p_value,
                entries: observed.iter().sum(),
                min_expected: c.min_expected,
            })
        };
        let service = p.service.clone();
        if !stale.is_empty() && !orphan {
            let views: Vec<EntryView> = stale.iter().map(|c| view(&c.e)).collect();
            let kept = views.iter().filter(|v| v.kept_alive).count();
            let mut evidence: Vec<String> = Vec::new();
            let mut reasons: Vec<&str> = stale.iter().filter_map(|c| c.stale.as_deref()).collect();
            reasons.sort_unstable();
            reasons.dedup();
            evidence.extend(reasons.iter().map(|r| r.to_string()));
            let rl: BTreeSet<usize> = p
                .endpoints
                .values()
                .flat_map(|(_, l)| l.iter().copied())
                .collect();
            if !rl.is_empty() {
                evidence.push(format!(
                    "{} lines {}: the rules' endpoints",
                    input.rules_file,
                    rl.iter()
                        .map(|l| l.to_string())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            for v in &views {
                evidence.push(match v.line {
                    Some(l) => format!("{}:{l}: {}", input.listing.map_or("", |x| x.0), v.text),
                    None => v.text.clone(),
                });
            }
            let mut forecast = Vec::new();
            for v in &views {
                let who = format!("{} -> {}", v.client, v.endpoint);
                if v.kept_alive {
                    forecast.push(format!(
                        "{who}: a client keeps it alive ({}); it will not expire on its own (if the client stopped now, in {} s)",
                        v.pattern.join("; "),
                        v.timeout_s
                    ));
                } else {
                    forecast.push(format!(
                        "{who}: expires in {} s if nothing refreshes it ({})",
                        v.timeout_s,
                        if v.pattern.is_empty() {
                            "no sign of a client".to_string()
                        } else {
                            v.pattern.join("; ")
                        }
                    ));
                }
            }
            forecast.extend(cleanup_sentences(&cleanup, &views));
            let mut fixes = Vec::new();
            for c in &stale {
                let e = &c.e;
                let k = (
                    e.proto(),
                    e.orig.dst,
                    e.orig.dport,
                    sock(e.reply.src, e.reply.sport),
                );
                for f in fix_of.get(&k).into_iter().flatten() {
                    if !fixes.contains(f) {
                        fixes.push(f.clone());
                    }
                }
            }
            findings.push(Finding {
                severity: Severity::Urgent,
                kind: "stale".into(),
                service: service.clone(),
                frontend: Some(fe.clone()),
                summary: format!(
                    "{} stale {} entr{} to {}{}: traffic follows {} to endpoints that no longer serve{}",
                    views.len(),
                    proto_name(proto),
                    if views.len() == 1 { "y" } else { "ies" },
                    fe,
                    service.as_deref().map(|s| format!(" ({s})")).unwrap_or_default(),
                    if views.len() == 1 { "it" } else { "them" },
                    if kept > 0 {
                        format!(", {kept} kept alive by {}", if kept == 1 { "its client" } else { "their clients" })
                    } else {
                        String::new()
                    }
                ),
                evidence,
                forecast,
                fix: fixes,
                entries: views,
            });
        }
        if orphan {
            let views: Vec<EntryView> = mine.iter().map(|c| view(&c.e)).collect();
            findings.push(Finding {
                severity: Severity::Warning,
                kind: "orphan".into(),
                service: None,
                frontend: Some(fe.clone()),
                summary: format!(
                    "{} entr{} DNAT'd from {fe}, which no rule DNATs now: a deleted Service, or a DNAT outside kube-proxy's rules (or rules not given)",
                    views.len(),
                    if views.len() == 1 { "y" } else { "ies" }
                ),
                evidence: views.iter().map(|v| cite(input, v)).chain(p.without_dnat.iter().map(|d| format!("a new flow: {d}"))).collect(),
                forecast: vec!["only the latest release's cleanup (#141371) deletes entries of a deleted UDP Service, and only at the sync that deletes it".into()],
                fix: Vec::new(),
                entries: views,
            });
        }
        if p.endpoints.is_empty() && p.no_endpoint_p > 0.0 && !mine.is_empty() {
            findings.push(Finding {
                severity: Severity::Warning,
                kind: "blackhole".into(),
                service: service.clone(),
                frontend: Some(fe.clone()),
                summary: format!(
                    "{fe}{} has no endpoints: its {} entr{} are the last flows it carries; once they go, every new flow is rejected",
                    service.as_deref().map(|s| format!(" ({s})")).unwrap_or_default(),
                    mine.len(),
                    if mine.len() == 1 { "y" } else { "ies" }
                ),
                evidence: p.without_dnat.iter().map(|d| format!("a new flow: {d}")).collect(),
                forecast: vec!["clients get ICMP port unreachable (UDP) or RST (TCP) until an endpoint is ready".into()],
                fix: vec!["scale up or fix the Service's pods".into()],
                entries: Vec::new(),
            });
        }
        if let Some(s) = &skew {
            if s.p_value < 0.001 && s.entries >= 10 {
                findings.push(Finding {
                    severity: Severity::Warning,
                    kind: "skew".into(),
                    service: service.clone(),
                    frontend: Some(fe.clone()),
                    summary: format!(
                        "{fe}{}: live entries spread over the endpoints unlike the rules' probabilities (chi-square {:.1}, {} df, p = {:.2e})",
                        service.as_deref().map(|s| format!(" ({s})")).unwrap_or_default(),
                        s.chi_square, s.df, s.p_value
                    ),
                    evidence: eps.iter().map(|e| format!("{}: {} live entries, p = {}", e.endpoint, e.live_entries, e.probability)).collect(),
                    forecast: vec!["a stuck client, long-lived flows made before a scale-up, or a biased cascade: the busy endpoint takes more than its share".into()],
                    fix: Vec::new(),
                    entries: Vec::new(),
                });
            }
        }
        frontends.push(FrontendView {
            frontend: fe,
            service,
            probe: p.packet.clone(),
            endpoints: eps,
            no_endpoint_p: p.no_endpoint_p,
            without_dnat: p.without_dnat.clone(),
            entries: mine.len() as u64,
            stale: if orphan { 0 } else { stale.len() as u64 },
            affinity: p.affinity,
            skew,
        });
    }

    // Collateral deletions.
    for c in &cleanup {
        if c.live_deleted > 0 {
            findings.push(Finding {
                severity: Severity::Info,
                kind: "collateral_cleanup".into(),
                service: None,
                frontend: None,
                summary: format!(
                    "{}'s cleanup would also delete {} live entr{}",
                    c.releases.join(", "),
                    c.live_deleted,
                    if c.live_deleted == 1 { "y" } else { "ies" }
                ),
                evidence: vec![c.when.clone()],
                forecast: vec![
                    "their flows are re-balanced by the rules on their next packet".into(),
                ],
                fix: Vec::new(),
                entries: Vec::new(),
            });
        }
    }

    // Unreplied UDP entries kept refreshed.
    let udp_timeout = ns.conntrack().sysctls().udp_timeout.as_secs();
    let refreshed: Vec<EntryView> = all
        .iter()
        .filter(|e| {
            e.orig.src.is_ipv4() && e.proto() == 17 && !e.status.contains(Status::SEEN_REPLY)
        })
        .filter(|e| age_of(now, e).is_some_and(|a| a > udp_timeout))
        .map(view)
        .collect();
    if !refreshed.is_empty() {
        findings.push(Finding {
            severity: Severity::Warning,
            kind: "unreplied_refreshed".into(),
            service: None,
            frontend: None,
            summary: format!(
                "{} UDP entr{} never answered but kept refreshed: one-way senders (kubernetes #139628) that no cleanup keyed on replies will see",
                refreshed.len(),
                if refreshed.len() == 1 { "y" } else { "ies" }
            ),
            evidence: refreshed.iter().map(|v| cite(input, v)).collect(),
            forecast: vec![format!(
                "each lives as long as its sender sends within {udp_timeout} s (nf_conntrack_udp_timeout)"
            )],
            fix: Vec::new(),
            entries: refreshed,
        });
    }

    // Table pressure.
    let v4: Vec<&CtEntry> = all.iter().collect();
    let pressure = Pressure {
        entries: v4.len() as u64,
        max: u64::from(ns.conntrack().sysctls().max),
        time_wait: v4
            .iter()
            .filter(|e| e.tcp_state == Some(TcpState::TimeWait))
            .count() as u64,
        unreplied_udp: v4
            .iter()
            .filter(|e| e.proto() == 17 && !e.status.contains(Status::SEEN_REPLY))
            .count() as u64,
        not_assured: v4
            .iter()
            .filter(|e| !e.status.contains(Status::ASSURED))
            .count() as u64,
    };
    if pressure.max > 0 && pressure.entries * 5 >= pressure.max * 4 {
        let share = pressure.entries as f64 / pressure.max as f64;
        let sev = if share >= 0.95 {
            Severity::Urgent
        } else {
            Severity::Warning
        };
        let pct = |n: u64| {
            if pressure.entries == 0 {
                0.0
            } else {
                100.0 * n as f64 / pressure.entries as f64
            }
        };
        findings.push(Finding {
            severity: sev,
            kind: "table_pressure".into(),
            service: None,
            frontend: None,
            summary: format!(
                "the table holds {} of nf_conntrack_max {} entries ({:.1} %)",
                pressure.entries,
                pressure.max,
                share * 100.0
            ),
            evidence: vec![
                format!("TIME_WAIT: {} ({:.1} %)", pressure.time_wait, pct(pressure.time_wait)),
                format!("unreplied UDP: {} ({:.1} %)", pressure.unreplied_udp, pct(pressure.unreplied_udp)),
                format!("without [ASSURED]: {} ({:.1} %)", pressure.not_assured, pct(pressure.not_assured)),
            ],
            forecast: vec![if pressure.not_assured > 0 {
                format!("when full, early drop (nf_conntrack_core.c early_drop) evicts entries without [ASSURED] first: {} candidates, unreplied UDP and half-open TCP among them; once none is left in the new flow's buckets, new flows are dropped", pressure.not_assured)
            } else {
                "when full, early drop finds nothing to evict (every entry is [ASSURED]): new flows are dropped".to_string()
            }],
            fix: Vec::new(),
            entries: Vec::new(),
        });
    }

    // Rules that will surprise.
    for w in &input.rule_warnings {
        findings.push(rules_finding(w.clone(), Vec::new()));
    }
    for (chain, why) in chain_surprises(ns, now) {
        let line = lines_of_chain(input.rules_text, &chain);
        findings.push(rules_finding(
            format!(
                "{}{}chain {chain}: {why}",
                input.rules_file,
                line.map(|l| format!(":{l}: "))
                    .unwrap_or_else(|| ": ".into())
            ),
            Vec::new(),
        ));
    }
    if !input.pod_cidrs.is_empty() {
        let cidr = input
            .pod_cidrs
            .iter()
            .map(|c| c.to_string())
            .collect::<Vec<_>>()
            .join(", ");
        for f in &frontends {
            for e in &f.endpoints {
                let Ok(sa) = e.endpoint.parse::<SocketAddr>() else {
                    continue;
                };
                if !input.pod_cidrs.iter().any(|c| c.contains(sa.ip())) {
                    findings.push(rules_finding(
                        format!(
                            "{}{}: {} DNATs to {}, outside the pod CIDRs {cidr}: a host-network or external endpoint, or a rule written by something else",
                            input.rules_file,
                            e.dnat_line.map(|l| format!(":{l}")).unwrap_or_default(),
                            f.frontend,
                            e.endpoint
                        ),
                        Vec::new(),
                    ));
                }
            }
        }
    }

    // Most urgent first; within a severity, by kind then frontend (stable input order).
    let kind_rank = |k: &str| match k {
        "stale" => 0,
        "table_pressure" => 1,
        "blackhole" => 2,
        "orphan" => 3,
        "unreplied_refreshed" => 4,
        "skew" => 5,
        "collateral_cleanup" => 6,
        _ => 7,
    };
    findings.sort_by_key(|f| (f.severity, kind_rank(&f.kind)));

    let stale_n = stale_keys.len() as u64;
    let kept_alive = findings
        .iter()
        .filter(|f| f.kind == "stale")
        .flat_map(|f| f.entries.iter())
        .filter(|e| e.kept_alive)
        .count() as u64;
    let blackholes = findings.iter().filter(|f| f.kind == "blackhole").count() as u64;
    Ok(Report {
        version: SCHEMA_VERSION,
        subject: input.subject.clone(),
        truth: input
            .cluster
            .as_ref()
            .map(|(_, s)| s.clone())
            .unwrap_or_else(|| format!("the rules ({})", input.rules_file)),
        summary: Summary {
            entries: all.len() as u64,
            service_entries: service_entries.len() as u64,
            stale: stale_n,
            kept_alive,
            blackholes,
            ipv6_skipped: ipv6,
        },
        findings,
        frontends,
        cleanup,
        fix,
        pressure,
        warnings,
    })
}

fn cite(input: &Input<'_>, v: &EntryView) -> String {
    match v.line {
        Some(l) => format!("{}:{l}: {}", input.listing.map_or("", |x| x.0), v.text),
        None => v.text.clone(),
    }
}

fn rules_finding(summary: String, evidence: Vec<String>) -> Finding {
    Finding {
        severity: Severity::Info,
        kind: "rules".into(),
        service: None,
        frontend: None,
        summary,
        evidence,
        forecast: Vec::new(),
        fix: Vec::new(),
        entries: Vec::new(),
    }
}

fn line_of_entry(
    map: &BTreeMap<(u8, SocketAddr, SocketAddr), usize>,
    e: &CtEntry,
) -> Option<usize> {
    map.get(&entry_key(e)).copied()
}

/// What the cleanups do to these stale entries, one sentence per outcome.
fn cleanup_sentences(cleanup: &[CleanupOutcome], views: &[EntryView]) -> Vec<String> {
    let mut deletes: Vec<String> = Vec::new();
    let mut keeps: Vec<String> = Vec::new();
    let mut partial: Vec<String> = Vec::new();
    for c in cleanup {
        let n = views
            .iter()
            .filter(|v| c.releases.iter().any(|r| v.deleted_by.contains(r)))
            .count();
        let names = c.releases.join(", ");
        if n == views.len() {
            deletes.push(names);
        } else if n == 0 {
            keeps.push(names);
        } else {
            partial.push(format!("{names} ({n} of {})", views.len()));
        }
    }
    let mut out = Vec::new();
    if !keeps.is_empty() {
        out.push(format!("left by kube-proxy {}", keeps.join(", ")));
    }
    if !partial.is_empty() {
        out.push(format!(
            "partly deleted by kube-proxy {}",
            partial.join(", ")
        ));
    }
    if !deletes.is_empty() {
        out.push(format!(
            "deleted by kube-proxy {} at its next reconcile (a sync that sees a UDP Service's endpoints change)",
            deletes.join(", ")
        ));
    }
    out
}

/// The Service and endpoint maps the rules show, for the cleanups when no EndpointSlices
/// are given: each probed frontend with a DNAT is a service port (named after the rules'
/// comment or chain, else after the frontend) whose endpoints are the DNAT targets, all
/// ready and serving.
fn state_from_probes(probes: &BTreeMap<FrontKey, Probe>) -> ProxyState {
    let mut st = ProxyState::default();
    for ((proto, addr, port, _), p) in probes {
        if p.endpoints.is_empty() && p.no_endpoint_p == 0.0 {
            continue;
        }
        let protocol = match proto {
            6 => Protocol::TCP,
            17 => Protocol::UDP,
            _ => Protocol::SCTP,
        };
        let name = p
            .service
            .clone()
            .unwrap_or_else(|| format!("frontend/{addr}-{port}"));
        let (nsname, port_name) = match name.split_once(':') {
            Some((a, b)) => (a.to_string(), b.to_string()),
            None => (name.clone(), String::new()),
        };
        let (namespace, svc) = nsname.split_once('/').unwrap_or(("", nsname.as_str()));
        let spn = ServicePortName::new(namespace, svc, &port_name, protocol);
        let eps: Vec<EndpointInfo> = p
            .endpoints
            .keys()
            .map(|s| EndpointInfo {
                ip: s.ip(),
                port: s.port(),
                is_local: false,
                ready: true,
                serving: true,
                terminating: false,
                hints: Default::default(),
            })
            .collect();
        match st.services.get_mut(&spn) {
            Some(existing) => {
                // A second frontend of the same service port: its nodePort (or an external
                // address on the same port).
                if existing.port != *port {
                    existing.node_port = Some(*port);
                } else if existing.cluster_ip != *addr {
                    existing.external_ips.push(*addr);
                }
            }
            None => {
                st.services.insert(
                    spn.clone(),
                    ServicePortInfo {
                        name: spn.clone(),
                        cluster_ip: *addr,
                        port: *port,
                        protocol,
                        node_port: None,
                        load_balancer_vips: Vec::new(),
                        sticky_max_age_seconds: None,
                        external_ips: Vec::new(),
                        load_balancer_source_ranges: Vec::new(),
                        health_check_node_port: None,
                        external_policy_local: false,
                        internal_policy_local: false,
                        hints_annotation: None,
                    },
                );
            }
        }
        if !eps.is_empty() {
            st.endpoints.entry(spn).or_default().extend(eps);
        }
    }
    for v in st.endpoints.values_mut() {
        v.sort_by_key(|e| e.endpoint_string());
        v.dedup();
    }
    st
}

/// Runs `conntrack ARGS` (a `-D` line) on `table`: the number deleted when it deleted
/// exactly `want`, else `None` (and the table is as before).
fn try_delete(
    table: &mut sim_conntrack::Conntrack,
    now: SimTime,
    args: &str,
    want: &BTreeSet<(u8, SocketAddr, SocketAddr)>,
) -> Option<u64> {
    let filter_args = args.strip_prefix("-D ")?;
    let f = Filter::parse(filter_args).ok()?;
    if f.delete_refusal().is_some() {
        return None;
    }
    let hit: BTreeSet<_> = table.list(now, &f).iter().map(entry_key).collect();
    if &hit != want {
        return None;
    }
    let n = table.delete(now, &f).len() as u64;
    table.drain_events();
    Some(n)
}

/// Chains that will surprise, each with why: per-endpoint chains no rule jumps to
/// (`KUBE-SEP-*` in the iptables nat table, `endpoint-*` in kube-proxy's nftables table), and
/// per-Service or per-endpoint iptables chains that rules jump to but that are empty.
fn chain_surprises(ns: &Netns, now: SimTime) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let rs = ns.ruleset();
    for c in rs.chains(sim_netfilter::Table::Nat) {
        if c.name().starts_with("KUBE-SEP-")
            && rs.references(sim_netfilter::Table::Nat, c.name()) == 0
        {
            out.push((
                c.name().to_string(),
                "reached by no Service: no rule jumps to it (left over from an earlier sync, or written by hand)".into(),
            ));
        }
    }
    for c in rs.chains(sim_netfilter::Table::Nat) {
        let n = c.name();
        if ["KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-SEP-"]
            .iter()
            .any(|p| n.starts_with(p))
            && rs.references(sim_netfilter::Table::Nat, n) > 0
            && c.rules().is_empty()
        {
            out.push((
                n.to_string(),
                "it is empty: a jump to it returns at once and the packet goes on untranslated (kube-proxy writes every such chain with its rules)".into(),
            ));
        }
    }
    let text = ns.nft().list_ruleset(now);
    for line in text.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("chain endpoint-") {
            let name = format!("endpoint-{}", rest.trim_end_matches(" {").trim());
            let goto = format!("goto {name}");
            let jump = format!("jump {name}");
            if !text.contains(&goto) && !text.contains(&jump) {
                out.push((
                    name,
                    "reached by no Service: no verdict map or rule goes to it (kube-proxy deletes such chains a sync later)"
                        .into(),
                ));
            }
        }
    }
    out
}

/// The line declaring `chain` (`:CHAIN - [0:0]`, `chain CHAIN {`, `add chain … CHAIN`).
fn lines_of_chain(text: &str, chain: &str) -> Option<usize> {
    text.lines()
        .position(|l| {
            let t = l.trim();
            t.strip_prefix(':')
                .and_then(|r| r.split_whitespace().next())
                == Some(chain)
                || t == format!("chain {chain} {{")
                || (t.starts_with("add chain ") && t.split_whitespace().nth(4) == Some(chain))
        })
        .map(|i| i + 1)
}
