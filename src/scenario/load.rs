//! Loading a scenario file: YAML → [`ScenarioDoc`] → checked [`Scenario`].
//!
//! Every error names the file, the line and the column, says what was wrong and what was
//! expected, and shows the line with a caret under the place.

use super::model::*;
use super::names;
use super::schema::*;
use super::warnings::ScenarioWarning;
use crate::k8s;
use serde_saphyr::{Location, Spanned};
use sim_core::{SimDuration, SimTime};
use sim_netfilter::netns::ICMP_SYSCTLS;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// A problem with a scenario file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct ScenarioError {
    /// The file.
    pub file: String,
    /// 1-based line (0 when the problem is not at one place, as for an unreadable file).
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// What was wrong and what was expected.
    pub message: String,
    /// The text of the line, for the caret display.
    pub source_line: Option<String>,
}

impl fmt::Display for ScenarioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.line == 0 {
            return write!(f, "{}: {}", self.file, self.message);
        }
        write!(
            f,
            "{}:{}:{}: {}",
            self.file, self.line, self.column, self.message
        )?;
        if let Some(src) = &self.source_line {
            // A bounded window around the column, escaped (sim_core::text::Snippet): a 20 MB
            // line shows as about 120 characters.
            let col = self.column.saturating_sub(1) as usize;
            let snip = sim_core::text::Snippet::new(src, col, col + 1);
            let n = self.line.to_string();
            let pad = " ".repeat(n.len());
            write!(
                f,
                "\n{pad} |\n{n} | {}\n{pad} | {}",
                snip.text,
                snip.caret()
            )?;
        }
        Ok(())
    }
}

/// The prefix of the conntrack sysctls' full names.
const SYSCTL_PREFIX: &str = "net.netfilter.";

/// The file being checked, for errors with its line and column.
pub(super) struct Ctx<'a> {
    file: &'a str,
    lines: Vec<&'a str>,
}

impl Ctx<'_> {
    pub(super) fn at(&self, loc: Location, message: impl Into<String>) -> ScenarioError {
        self.at_line(loc.line(), loc.column(), message)
    }
    pub(super) fn at_line(
        &self,
        line: u64,
        column: u64,
        message: impl Into<String>,
    ) -> ScenarioError {
        ScenarioError {
            file: self.file.to_string(),
            line,
            column,
            message: message.into(),
            source_line: line
                .checked_sub(1)
                .and_then(|i| self.lines.get(i as usize))
                .map(|s| s.to_string()),
        }
    }
    pub(super) fn err<T>(&self, s: &Spanned<T>, message: impl Into<String>) -> ScenarioError {
        self.at(s.referenced, message)
    }
    /// The scenario file's name.
    pub(super) fn file(&self) -> &str {
        self.file
    }
}

/// Reads and checks the scenario in `file`.
pub fn load_file(file: &str) -> Result<Scenario, ScenarioError> {
    let text = sim_core::input::read_text_limited(
        std::path::Path::new(file),
        sim_core::input::MAX_SCENARIO_BYTES,
        "MAX_SCENARIO_BYTES",
    )
    .map_err(|e| ScenarioError {
        file: file.to_string(),
        line: 0,
        column: 0,
        message: format!("cannot read the scenario file: {e}"),
        source_line: None,
    })?;
    load_str(file, &text)
}

/// Checks the scenario `text`, naming it `file` in errors.
pub fn load_str(file: &str, text: &str) -> Result<Scenario, ScenarioError> {
    let ctx = Ctx {
        file,
        lines: text.lines().collect(),
    };
    // The YAML budget guards against YAML bombs; a generated cluster of 1,000 nodes and 50,000
    // pods is bigger than the fixed limits, and honest. The limits grow with the text (a node or
    // event takes at least one byte of it), so aliases still cannot blow a small file up.
    let mut options = super::yaml::options();
    if let Some(b) = &mut options.budget {
        b.max_nodes = b.max_nodes.max(text.len());
        b.max_events = b.max_events.max(2 * text.len());
    }
    let doc: ScenarioDoc = serde_saphyr::from_str_with_options(text, options).map_err(|e| {
        let (line, column, msg) = super::yaml::describe(&e, &ctx.lines);
        ctx.at_line(line, column, msg)
    })?;
    check(&ctx, doc)
}

/// `nodes[].state`: reads the files (relative to the scenario file's directory) and checks
/// them as the node would take them: the rules restore into an empty namespace, the listing
/// parses. Errors name the scenario's line and the file's.
fn node_state(
    ctx: &Ctx,
    st: &Spanned<super::schema::NodeStateDoc>,
    warnings: &mut Vec<ScenarioWarning>,
) -> Result<NodeState, ScenarioError> {
    let d = &st.value;
    if d.rules.is_none() && d.conntrack.is_none() && d.sysctls.is_none() {
        return Err(ctx.err(
            st,
            "state: expected `rules` (an iptables-save file), `conntrack` (a conntrack -L file), `sysctls` (a sysctl -a file), or several",
        ));
    }
    let base = std::path::Path::new(ctx.file)
        .parent()
        .unwrap_or(std::path::Path::new(""));
    let read = |f: &Spanned<String>| -> Result<(String, String), ScenarioError> {
        let path = base.join(&f.value);
        let shown = path.display().to_string();
        let text = sim_core::input::read_text_limited(
            &path,
            sim_core::input::MAX_RULES_BYTES,
            "MAX_RULES_BYTES",
        )
        .map_err(|e| ctx.err(f, format!("cannot read {shown}: {e}")))?;
        Ok((shown, text))
    };
    let mut out = NodeState::default();
    if let Some(f) = &d.rules {
        let (path, text) = read(f)?;
        let mut ns =
            sim_netfilter::netns::Netns::new(sim_netfilter::netns::NetnsConfig::new("check", 1));
        if let Err(e) = ns.restore_with_counters(&text, false) {
            let why = match e {
                sim_netfilter::netns::NetnsError::Restore(error) => {
                    crate::rules_error::text(&path, &error, true)
                }
                other => format!("{path}: {other}"),
            };
            return Err(ctx.err(f, format!("state.rules: {why}")));
        }
        out.rules = Some((path, text));
    }
    if let Some(f) = &d.conntrack {
        let (path, text) = read(f)?;
        let entries = sim_conntrack::parse_listing(&text)
            .map_err(|e| ctx.err(f, format!("state.conntrack: {path}: {e}")))?;
        out.conntrack = Some((path, entries));
    }
    if let Some(f) = &d.sysctls {
        let (path, text) = read(f)?;
        let file = sim_netfilter::sysctl_file::read_sysctl_file(&text)
            .map_err(|e| ctx.err(f, format!("state.sysctls: {path}: {e}")))?;
        for w in file.warning_lines() {
            warnings.push(ScenarioWarning {
                file: ctx.file().to_string(),
                line: f.referenced.line(),
                column: f.referenced.column(),
                message: format!("state.sysctls: {path}: {w}"),
            });
        }
        for (name, value) in file.apply {
            // Every modelled sysctl takes an integer, checked by read_sysctl_file.
            let v = value.parse::<u64>().map_err(|_| {
                ctx.err(
                    f,
                    format!("state.sysctls: {path}: {name} = {value}: expected an integer"),
                )
            })?;
            out.sysctls.insert(name, v);
        }
    }
    Ok(out)
}

/// "expected one of a, b", or `none` when there is nothing to choose from.
fn one_of(names: impl IntoIterator<Item = String>, none: &str) -> String {
    let v: Vec<String> = names.into_iter().collect();
    if v.is_empty() {
        none.to_string()
    } else {
        format!("expected one of {}", v.join(", "))
    }
}

fn opt_dur(d: Option<Duration>, default: SimDuration) -> SimDuration {
    d.map_or(default, Duration::get)
}

/// Checks conntrack sysctls (full `net.netfilter.nf_conntrack_*` names) and the ICMP rate
/// limit's ([`ICMP_SYSCTLS`]) as the kernel would take them: known names, values in range.
fn check_sysctls(
    ctx: &Ctx,
    src: &BTreeMap<String, Spanned<u64>>,
    into: &mut BTreeMap<String, u64>,
    at: Location,
    warnings: &mut Vec<ScenarioWarning>,
) -> Result<(), ScenarioError> {
    for (k, v) in src {
        // The key has no span of its own; point at its value, or at the mapping.
        let loc = if v.referenced.line() > 0 {
            v.referenced
        } else {
            at
        };
        if ICMP_SYSCTLS.contains(&k.as_str()) {
            // The node kernel's ICMP error rate limit (Netns::set_sysctl).
            if v.value > i32::MAX as u64 {
                return Err(ctx.at(
                    loc,
                    format!(
                        "sysctl {k}: {} is out of range: expected an integer from 0 to 2147483647",
                        v.value
                    ),
                ));
            }
            into.insert(k.clone(), v.value);
            continue;
        }
        let warn = |warnings: &mut Vec<ScenarioWarning>, message: String| {
            warnings.push(ScenarioWarning {
                file: ctx.file().to_string(),
                line: loc.line(),
                column: loc.column(),
                message: format!("sysctl {k}: {message}"),
            })
        };
        let Some(short) = k
            .strip_prefix(SYSCTL_PREFIX)
            .filter(|s| sim_conntrack::Sysctls::names().any(|n| n == *s))
        else {
            // A netfilter sysctl of the kernel that nfsim does not model: a warning with why
            // (a real node's values are taken whole); an impossible value is still refused.
            if sim_netfilter::sysctl_file::is_kernel_sysctl(k) {
                match sim_netfilter::sysctl_file::unmodelled(k, &v.value.to_string()) {
                    Err(m) => return Err(ctx.at(loc, m)),
                    Ok(Some(m)) => warn(warnings, m),
                    Ok(None) => {}
                }
                continue;
            }
            let last = k.rsplit('.').next().unwrap_or(k);
            // Suggest the known name sharing the longest prefix of its last segment.
            let common = |n: &str| {
                n.bytes()
                    .zip(last.bytes())
                    .take_while(|(a, b)| a == b)
                    .count()
            };
            let hint = sim_conntrack::Sysctls::names()
                .max_by_key(|n| (common(n), std::cmp::Reverse(n.len())))
                .filter(|n| common(n) >= 12)
                .map(|n| format!(" (did you mean {SYSCTL_PREFIX}{n}?)"))
                .unwrap_or_default();
            return Err(ctx.at(
                loc,
                format!(
                    "unknown sysctl {k:?}{hint}: expected a conntrack sysctl such as net.netfilter.nf_conntrack_udp_timeout, or net.ipv4.icmp_ratelimit / icmp_ratemask"
                ),
            ));
        };
        sim_conntrack::Sysctls::default()
            .set(short, &v.value.to_string())
            .map_err(|e| ctx.at(loc, e.to_string()))?;
        if let Ok(Some(m)) = sim_netfilter::sysctl_file::unmodelled(k, &v.value.to_string()) {
            warn(warnings, m);
        }
        into.insert(k.clone(), v.value);
    }
    Ok(())
}

/// A pod IP must lie in its node's pod CIDR and be neither the CIDR's network address nor
/// its first address, which the node holds on its pod veths (the pods' gateway).
/// A node's or host's address must be one a machine can hold on the node network:
/// not unspecified, broadcast, loopback, multicast or link-local-free nonsense.
fn check_node_address(ctx: &Ctx, a: &Spanned<IpAddr>, what: &str) -> Result<(), ScenarioError> {
    let ip = a.value;
    let bad = match ip {
        IpAddr::V4(v) if v.is_unspecified() => Some("the unspecified address"),
        IpAddr::V4(v) if v.is_broadcast() => Some("the limited broadcast address"),
        IpAddr::V4(v) if v.is_loopback() => {
            Some("a loopback address (127.0.0.0/8 stays inside each machine)")
        }
        IpAddr::V4(v) if v.is_multicast() => Some("a multicast address"),
        IpAddr::V6(v) if v.is_unspecified() => Some("the unspecified address"),
        IpAddr::V6(v) if v.is_loopback() => Some("the loopback address"),
        IpAddr::V6(v) if v.is_multicast() => Some("a multicast address"),
        _ => None,
    };
    match bad {
        Some(why) => Err(ctx.err(
            a,
            format!("{what} address {ip} is {why}: expected a unicast address on the node network"),
        )),
        None => Ok(()),
    }
}

/// The CIDR as written must have no host bits set: the kernel refuses a route to it
/// (`fib_table_insert`: "Invalid prefix for given prefix length").
fn check_cidr_text(ctx: &Ctx, c: &Spanned<k8s::Cidr>) -> Result<(), ScenarioError> {
    let loc = c.referenced;
    let Some(line) = (loc.line() as usize)
        .checked_sub(1)
        .and_then(|i| ctx.lines.get(i))
    else {
        return Ok(());
    };
    let rest: String = line
        .chars()
        .skip((loc.column() as usize).saturating_sub(1))
        .collect();
    let rest = rest.trim_start().trim_start_matches(['"', '\'']);
    let raw: String = rest
        .chars()
        .take_while(|ch| ch.is_ascii_hexdigit() || matches!(ch, '.' | ':' | '/'))
        .collect();
    let Some((a, _)) = raw.split_once('/') else {
        return Ok(());
    };
    if let Ok(addr) = a.parse::<IpAddr>() {
        if addr != c.value.addr() {
            return Err(ctx.err(
                c,
                format!(
                    "pod CIDR {raw} has host bits set: expected {} (the network address of the prefix)",
                    c.value
                ),
            ));
        }
    }
    Ok(())
}

fn check_pod_ip(ctx: &Ctx, ip: &Spanned<IpAddr>, node: &NodeDef) -> Result<(), ScenarioError> {
    let cidr = node.pod_cidr;
    if !cidr.contains(ip.value) {
        return Err(ctx.err(
            ip,
            format!(
                "pod IP {} is outside node {}'s pod CIDR {cidr}: expected an address in {cidr}",
                ip.value, node.name
            ),
        ));
    }
    if let (IpAddr::V4(a), IpAddr::V4(net)) = (ip.value, cidr.addr()) {
        let host_bits = 32 - u32::from(cidr.prefix_len());
        let bcast = u32::from(net) | u32::MAX.checked_shr(32 - host_bits).unwrap_or(0);
        if host_bits >= 2 && u32::from(a) == bcast {
            return Err(ctx.err(
                ip,
                format!(
                    "pod IP {} is the broadcast address of node {}'s pod CIDR {cidr}: expected another address in {cidr}",
                    ip.value, node.name
                ),
            ));
        }
    }
    let gw = pod_gateway(&cidr);
    if ip.value == cidr.addr() || ip.value == gw {
        return Err(ctx.err(
            ip,
            format!(
                "pod IP {} is {} of node {}'s pod CIDR {cidr}: expected another address in {cidr} ({gw} is the node's own address on its pod veths)",
                ip.value,
                if ip.value == gw { "the first address" } else { "the network address" },
                node.name
            ),
        ));
    }
    Ok(())
}

fn app_defs(ctx: &Ctx, apps: &[Spanned<AppDoc>]) -> Result<Vec<AppDef>, ScenarioError> {
    let mut out = Vec::new();
    let mut ports = BTreeSet::new();
    for a in apps {
        if let Some(loc) = a
            .value
            .udp_server
            .as_ref()
            .and_then(super::tcp_apps::tcp_only_field)
        {
            return Err(ctx.at(loc, "`halfClose` and `maxRequests` are for a tcpServer"));
        }
        let def = match (&a.value.udp_server, &a.value.tcp_server) {
            (Some(s), None) => AppDef::UdpServer {
                port: check_port(ctx, &s.port)?,
                service_time: opt_dur(s.service_time, SimDuration::from_millis(1)),
                reply: match (s.answer, &s.reply_from_port) {
                    (Some(false), Some(p)) => {
                        return Err(ctx.err(p, "a server that never answers has no reply port: give `answer: false` or `replyFromPort`"))
                    }
                    (Some(false), None) => UdpReply::Never,
                    (_, Some(p)) => UdpReply::FromPort(check_port(ctx, p)?),
                    (_, None) => UdpReply::SamePort,
                },
            },
            (None, Some(s)) if s.answer.is_some() || s.reply_from_port.is_some() => {
                return Err(ctx.err(&s.port, "`answer` and `replyFromPort` are for a udpServer"));
            }
            (None, Some(s)) => AppDef::TcpServer {
                port: check_port(ctx, &s.port)?,
                service_time: opt_dur(s.service_time, SimDuration::from_millis(1)),
                close_after: super::tcp_apps::server_close_after(ctx, s)?,
            },
            _ => {
                return Err(ctx.err(a, "an app needs exactly one of `udpServer` or `tcpServer`"));
            }
        };
        let key = match def {
            AppDef::UdpServer { port, .. } => ("udp", port),
            AppDef::TcpServer { port, .. } => ("tcp", port),
        };
        if !ports.insert(key) {
            return Err(ctx.err(
                a,
                format!(
                    "a second {} server on port {}: each port has one server",
                    key.0, key.1
                ),
            ));
        }
        out.push(def);
    }
    Ok(out)
}

fn check_port(ctx: &Ctx, p: &Spanned<u16>) -> Result<u16, ScenarioError> {
    if p.value == 0 {
        return Err(ctx.err(p, "port 0: expected 1-65535"));
    }
    Ok(p.value)
}

struct PodCheck<'a> {
    node_index: &'a BTreeMap<String, usize>,
    nodes: &'a [NodeDef],
}

fn pod_def(ctx: &Ctx, pc: &PodCheck, p: &Spanned<PodDoc>) -> Result<PodDef, ScenarioError> {
    let d = &p.value;
    names::check_dns1123_subdomain("pod name", &d.name.value).map_err(|m| ctx.err(&d.name, m))?;
    if let Some(ns) = &d.namespace {
        names::check_dns1123_label("namespace", ns).map_err(|m| ctx.err(p, m))?;
    }
    // The API server refuses labels that break IsQualifiedName / IsValidLabelValue.
    if let Some(m) = k8s::labels::labels_problem(&d.labels) {
        return Err(ctx.err(p, format!("pod {}: labels: {m}", d.name.value)));
    }
    let node = *pc.node_index.get(&d.node.value).ok_or_else(|| {
        ctx.err(
            &d.node,
            format!(
                "unknown node {:?}: expected one of {}",
                d.node.value,
                pc.node_index.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        )
    })?;
    // (A pod without `ip` got one from `ipam::assign`.)
    let ip =
        d.ip.as_ref()
            .ok_or_else(|| ctx.err(&d.name, "the pod has no `ip`"))?;
    check_pod_ip(ctx, ip, &pc.nodes[node])?;
    let preset = match &d.preset {
        Some(name) => Some(super::presets::pod_preset(&name.value).map_err(|m| ctx.err(name, m))?),
        None => None,
    };
    let probe = d.readiness_probe.clone().unwrap_or(ProbeDoc {
        period_seconds: None,
        failure_threshold: None,
        success_threshold: None,
    });
    // Kubernetes refuses 0 for each (ValidateProbe: "must be greater than or equal to 1").
    for (field, v) in [
        ("periodSeconds", probe.period_seconds),
        ("failureThreshold", probe.failure_threshold),
        ("successThreshold", probe.success_threshold),
    ] {
        if v == Some(0) {
            return Err(ctx.err(
                p,
                format!(
                    "pod {}: readinessProbe.{field} 0: expected at least 1 (Kubernetes refuses 0)",
                    d.name.value
                ),
            ));
        }
    }
    // The probe's period is a duration: no longer than a run (MAX_DURATION).
    if let Some(v) = probe
        .period_seconds
        .filter(|v| *v as u64 > MAX_DURATION.as_secs())
    {
        return Err(ctx.err(
            p,
            format!(
                "pod {}: readinessProbe.periodSeconds {v} is longer than the longest run nfsim simulates ({MAX_DURATION}, MAX_DURATION): expected at most {}",
                d.name.value,
                MAX_DURATION.as_secs()
            ),
        ));
    }
    let base = preset.map_or(Probe::DEFAULT, |p| p.probe);
    let probe = Probe {
        period_seconds: probe.period_seconds.unwrap_or(base.period_seconds),
        failure_threshold: probe.failure_threshold.unwrap_or(base.failure_threshold),
        success_threshold: probe.success_threshold.unwrap_or(base.success_threshold),
    };
    let mut labels = d.labels.clone();
    let mut ports = d.ports.clone();
    let mut apps = app_defs(ctx, &d.apps)?;
    if let Some(p) = preset {
        for (k, v) in p.labels {
            labels.entry(k.to_string()).or_insert_with(|| v.to_string());
        }
        for (k, v) in p.ports {
            ports.entry(k.to_string()).or_insert(*v);
        }
        if apps.is_empty() {
            apps.push(AppDef::UdpServer {
                port: p.udp_server_port,
                service_time: SimDuration::from_millis(1),
                reply: UdpReply::SamePort,
            });
        }
    }
    let termination = match &d.termination {
        Some(t) => termination(ctx, t)?,
        None => preset.map_or(Termination::IGNORE, |p| p.termination),
    };
    Ok(PodDef {
        name: d.name.value.clone(),
        namespace: d.namespace.clone().unwrap_or_else(|| "default".into()),
        labels,
        node,
        ip: ip.value,
        ports,
        ready: d.ready.unwrap_or(true),
        probe,
        grace_period: opt_dur(
            d.termination_grace_period,
            preset.map_or(SimDuration::from_secs(30), |p| p.grace_period),
        ),
        termination,
        apps,
    })
}

/// `termination:`: the hook, the process's answer to SIGTERM, and its readiness after it.
fn termination(ctx: &Ctx, t: &Spanned<TerminationDoc>) -> Result<Termination, ScenarioError> {
    let d = &t.value;
    let on_sigterm = match (d.on_sigterm.as_ref().map(|s| s.value.as_str()), d.lameduck) {
        (Some("lameduck") | None, Some(l)) => OnSigterm::Lameduck(l.get()),
        (Some("lameduck"), None) => {
            return Err(ctx.err(
                t,
                "onSigterm: lameduck needs `lameduck: DURATION` (how long it keeps serving)",
            ))
        }
        (Some(w @ ("exit" | "ignore")), Some(_)) => {
            return Err(ctx.err(t, format!("`lameduck` is for onSigterm: lameduck, not {w}")))
        }
        (Some("exit"), None) => OnSigterm::Exit,
        (Some("ignore") | None, None) => OnSigterm::Ignore,
        (Some(other), _) => {
            let at = d.on_sigterm.as_ref().map_or(t.referenced, |s| s.referenced);
            return Err(ctx.at(
                at,
                format!("onSigterm {other:?}: expected one of exit, lameduck, ignore"),
            ));
        }
    };
    Ok(Termination {
        pre_stop_sleep: d.pre_stop_sleep.map(Duration::get),
        on_sigterm,
        unready_on_sigterm: d.unready_on_sigterm.unwrap_or(false),
    })
}

/// Resolves a pod reference (`NAME` or `NAMESPACE/NAME`) against known pod keys.
/// Pod keys (`namespace/name`), and the keys of each bare name.
#[derive(Clone, Debug, Default)]
struct PodKeys {
    keys: BTreeSet<String>,
    by_name: BTreeMap<String, Vec<String>>,
}

impl PodKeys {
    /// Adds a key; false if it was there already.
    fn insert(&mut self, key: String) -> bool {
        if !self.keys.insert(key.clone()) {
            return false;
        }
        let name = key.rsplit('/').next().unwrap_or(&key).to_string();
        self.by_name.entry(name).or_default().push(key);
        true
    }
    fn contains(&self, key: &str) -> bool {
        self.keys.contains(key)
    }
}

fn resolve_pod(ctx: &Ctx, known: &PodKeys, r: &Spanned<String>) -> Result<String, ScenarioError> {
    let v = &r.value;
    if v.contains('/') {
        if known.contains(v) {
            return Ok(v.clone());
        }
    } else {
        let hits: &[String] = known.by_name.get(v).map_or(&[], Vec::as_slice);
        match hits {
            [one] => return Ok(one.clone()),
            [] => {}
            many => {
                return Err(ctx.err(
                    r,
                    format!(
                        "pod name {v:?} is ambiguous: write NAMESPACE/NAME, one of {}",
                        many.iter()
                            .map(|s| s.as_str())
                            .collect::<BTreeSet<_>>()
                            .into_iter()
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            }
        }
    }
    Err(ctx.err(
        r,
        format!(
            "unknown pod {v:?}: expected one of {}",
            if known.keys.is_empty() {
                "(no pods defined)".to_string()
            } else {
                known.keys.iter().cloned().collect::<Vec<_>>().join(", ")
            }
        ),
    ))
}

/// `by_key`: each Service's index in `services` by (namespace, name), the first of each.
fn resolve_target(
    ctx: &Ctx,
    services: &[k8s::Service],
    by_key: &BTreeMap<(&str, &str), usize>,
    t: &Spanned<String>,
) -> Result<SocketAddr, ScenarioError> {
    if let Ok(sa) = t.value.parse::<SocketAddr>() {
        if sa.port() == 0 {
            return Err(ctx.err(t, "target port 0: expected 1-65535"));
        }
        return Ok(sa);
    }
    let (svc, port_name) = match t.value.split_once(':') {
        Some((s, p)) => (s, Some(p)),
        None => (t.value.as_str(), None),
    };
    let Some((ns, name)) = svc.split_once('/') else {
        return Err(ctx.err(
            t,
            format!(
                "bad target {:?}: expected IP:PORT (10.96.0.10:53) or a Service port NAMESPACE/NAME[:PORTNAME] (kube-system/kube-dns:dns)",
                t.value
            ),
        ));
    };
    let Some(s) = by_key.get(&(ns, name)).map(|&i| &services[i]) else {
        return Err(ctx.err(
            t,
            format!(
                "target Service {svc:?} is not defined: {}",
                one_of(services.iter().map(|s| s.key()), "no Service is defined")
            ),
        ));
    };
    let Some(ip) = s.ipv4_cluster_ip() else {
        return Err(ctx.err(t, format!("target Service {svc} has no IPv4 cluster IP (headless or ExternalName): a client needs an address")));
    };
    let port = match port_name {
        None if s.spec.ports.len() == 1 => &s.spec.ports[0],
        None => {
            return Err(ctx.err(
                t,
                format!(
                    "Service {svc} has {} ports: name one as {svc}:PORTNAME",
                    s.spec.ports.len()
                ),
            ))
        }
        Some(pn) => match s
            .spec
            .ports
            .iter()
            .find(|p| p.name == pn || pn.parse::<u16>().ok() == Some(p.port))
        {
            Some(p) => p,
            None => {
                return Err(ctx.err(
                    t,
                    format!(
                        "Service {svc} has no port named {pn:?}: expected one of {}",
                        s.spec
                            .ports
                            .iter()
                            .map(|p| if p.name.is_empty() {
                                p.port.to_string()
                            } else {
                                p.name.clone()
                            })
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ))
            }
        },
    };
    Ok(SocketAddr::new(ip, port.port))
}

pub use super::schema::MAX_DURATION;

fn time_within(
    ctx: &Ctx,
    d: &Spanned<Duration>,
    duration: SimDuration,
    what: &str,
) -> Result<SimTime, ScenarioError> {
    if d.value.get() > duration {
        return Err(ctx.err(
            d,
            format!("{what} at {} is after the end of the run ({duration}): expected at most {duration}", d.value),
        ));
    }
    Ok(SimTime::ZERO + d.value.get())
}

fn check(ctx: &Ctx, mut doc: ScenarioDoc) -> Result<Scenario, ScenarioError> {
    names::check_display_name(
        "scenario name",
        &doc.name.value,
        names::DISPLAY_NAME_MAX,
        true,
    )
    .map_err(|m| ctx.err(&doc.name, m))?;
    let duration = doc.duration.value.get();
    if duration.is_zero() {
        return Err(ctx.err(
            &doc.duration,
            "duration 0s: expected a positive duration such as 1h",
        ));
    }
    let mut sysctls = BTreeMap::new();
    let mut sysctl_warnings = Vec::new();
    check_sysctls(
        ctx,
        &doc.sysctls,
        &mut sysctls,
        doc.name.referenced,
        &mut sysctl_warnings,
    )?;

    // Nodes.
    if doc.nodes.is_empty() {
        return Err(ctx.err(
            &doc.name,
            "no nodes: a scenario needs at least one entry under `nodes`",
        ));
    }
    let mut nodes = Vec::new();
    let mut node_index = BTreeMap::new();
    let mut addrs: BTreeMap<IpAddr, String> = BTreeMap::new();
    for n in &doc.nodes {
        let d = &n.value;
        names::check_dns1123_subdomain("node name", &d.name.value)
            .map_err(|m| ctx.err(&d.name, m))?;
        if node_index
            .insert(d.name.value.clone(), nodes.len())
            .is_some()
        {
            return Err(ctx.err(
                &d.name,
                format!(
                    "duplicate node name {:?}: node names must be unique",
                    d.name.value
                ),
            ));
        }
        check_node_address(ctx, &d.address, "node")?;
        check_cidr_text(ctx, &d.pod_cidr)?;
        if let Some(prev) = addrs.insert(d.address.value, format!("node {}", d.name.value)) {
            return Err(ctx.err(
                &d.address,
                format!("address {} is already used by {prev}", d.address.value),
            ));
        }
        let state = match &d.state {
            Some(st) => node_state(ctx, st, &mut sysctl_warnings)?,
            None => NodeState::default(),
        };
        // The scenario's sysctls, then the node's saved ones (`state.sysctls`), then the
        // node's own `sysctls`.
        let mut s = sysctls.clone();
        s.extend(state.sysctls.clone());
        check_sysctls(
            ctx,
            &d.sysctls,
            &mut s,
            d.name.referenced,
            &mut sysctl_warnings,
        )?;
        let mut extra_addresses = Vec::new();
        for a in &d.extra_addresses {
            let x = &a.value;
            let dev = x.interface.clone().unwrap_or_else(|| "eth0".into());
            // An address on an interface of its own is the node's alone (several nodes may
            // hold the same one); on eth0 it is on the node network and must be unique.
            let dup = if dev == "eth0" {
                addrs.insert(x.address, format!("node {}", d.name.value))
            } else {
                addrs.get(&x.address).cloned()
            };
            if let Some(prev) = dup {
                return Err(ctx.err(
                    a,
                    format!("address {} is already used by {prev}", x.address),
                ));
            }
            let len = match x.len {
                Some(l) => l,
                None if dev == "eth0" => 0, // the node network's length, set below
                None if x.address.is_ipv4() => 32,
                None => 128,
            };
            extra_addresses.push((dev, x.address, len));
        }
        // A saved ruleset naming an interface this node lacks (a bridge CNI's cni0 where the
        // pods here have veths of their own) never matches it: say so, rule by rule.
        if let (Some((path, text)), Some(f)) = (
            &state.rules,
            d.state.as_ref().and_then(|st| st.value.rules.as_ref()),
        ) {
            let mut have = vec!["lo".to_string(), "eth0".to_string()];
            for (dev, ..) in &extra_addresses {
                if !have.contains(dev) {
                    have.push(dev.clone());
                }
            }
            // The pods' interfaces: one `veth…` per pod (their names are nfsim's own).
            have.push("veth+".into());
            let node = format!("node {}", d.name.value);
            for w in sim_netfilter::rule_ifnames::rule_interface_warnings(text, path, &have, &node)
            {
                sysctl_warnings.push(ScenarioWarning {
                    file: ctx.file().to_string(),
                    line: f.referenced.line(),
                    column: f.referenced.column(),
                    message: format!("state.rules: {w}"),
                });
            }
        }
        nodes.push(NodeDef {
            name: d.name.value.clone(),
            address: d.address.value,
            pod_cidr: d.pod_cidr.value,
            sysctls: s,
            apps: app_defs(ctx, &d.apps)?,
            extra_addresses,
            extra_rules: Vec::new(),
            state,
            labels: super::topology::node_labels(ctx, d)?,
            allocatable_cpu_milli: super::topology::node_cpu_milli(d),
        });
    }
    for (i, n) in doc.nodes.iter().enumerate() {
        if let Some(m) = nodes
            .iter()
            .find(|m| m.pod_cidr.contains(n.value.address.value))
        {
            return Err(ctx.err(
                &n.value.address,
                format!(
                    "node address {} is inside node {}'s pod CIDR {}: node addresses are on the node network, outside every pod CIDR",
                    n.value.address.value, m.name, m.pod_cidr
                ),
            ));
        }
        for (j, m) in nodes.iter().enumerate() {
            if i != j
                && (m.pod_cidr.contains(n.value.pod_cidr.value.addr())
                    || n.value.pod_cidr.value.contains(m.pod_cidr.addr()))
            {
                return Err(ctx.err(
                    &n.value.pod_cidr,
                    format!(
                        "pod CIDR {} overlaps node {}'s {}: pod CIDRs must be disjoint",
                        n.value.pod_cidr.value, m.name, m.pod_cidr
                    ),
                ));
            }
        }
    }

    // The nodes' own rules.
    for r in &doc.iptables_restore {
        let noflush = r.value.noflush.unwrap_or(true);
        super::events::check_restore_text(ctx, &r.value.rules, noflush)?;
        let targets: Vec<usize> = match &r.value.node {
            None => (0..nodes.len()).collect(),
            Some(n) => vec![*node_index.get(&n.value).ok_or_else(|| {
                ctx.err(
                    n,
                    format!(
                        "unknown node {:?}: expected one of {}",
                        n.value,
                        node_index.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?],
        };
        for t in targets {
            nodes[t]
                .extra_rules
                .push((r.value.rules.value.clone(), noflush));
        }
    }

    // Hosts.
    let mut hosts = Vec::new();
    let mut host_index = BTreeMap::new();
    for h in &doc.hosts {
        let d = &h.value;
        names::check_display_name("host name", &d.name.value, names::DISPLAY_NAME_MAX, false)
            .map_err(|m| ctx.err(&d.name, m))?;
        if host_index
            .insert(d.name.value.clone(), hosts.len())
            .is_some()
        {
            return Err(ctx.err(&d.name, format!("duplicate host name {:?}", d.name.value)));
        }
        check_node_address(ctx, &d.address, "host")?;
        if let Some(n) = nodes.iter().find(|n| n.pod_cidr.contains(d.address.value)) {
            return Err(ctx.err(&d.address, format!("host address {} is inside node {}'s pod CIDR {}: a host sits outside the cluster", d.address.value, n.name, n.pod_cidr)));
        }
        if let Some(prev) = addrs.insert(d.address.value, format!("host {}", d.name.value)) {
            return Err(ctx.err(
                &d.address,
                format!("address {} is already used by {prev}", d.address.value),
            ));
        }
        for a in &d.extra_addresses {
            if let Some(prev) = addrs.insert(a.value, format!("host {}", d.name.value)) {
                return Err(ctx.err(a, format!("address {} is already used by {prev}", a.value)));
            }
        }
        hosts.push(HostDef {
            name: d.name.value.clone(),
            address: d.address.value,
            extra_addresses: d.extra_addresses.iter().map(|a| a.value).collect(),
            apps: app_defs(ctx, &d.apps)?,
        });
    }

    // Addresses left out: allocated from the pod and service CIDRs.
    let ipam = super::ipam::assign(ctx, &mut doc, &nodes)?;

    // Pods (initial, then those created by events, for name resolution).
    let pc = PodCheck {
        node_index: &node_index,
        nodes: &nodes,
    };
    let mut pods = Vec::new();
    let mut pod_keys = PodKeys::default();
    let mut pod_ips: BTreeMap<IpAddr, String> = BTreeMap::new();
    for p in &doc.pods {
        let def = pod_def(ctx, &pc, p)?;
        if !pod_keys.insert(def.key()) {
            return Err(ctx.err(
                &p.value.name,
                format!(
                    "duplicate pod {}: pod names must be unique in a namespace",
                    def.key()
                ),
            ));
        }
        if let Some(prev) = pod_ips.insert(def.ip, def.key()) {
            let at = match &p.value.ip {
                Some(ip) => ctx.err(ip, ""),
                None => ctx.err(&p.value.name, ""),
            };
            return Err(ScenarioError {
                message: format!("pod IP {} is already used by pod {prev}", def.ip),
                ..at
            });
        }
        pods.push(def);
    }
    let mut all_pod_keys = pod_keys.clone();
    for e in &doc.events {
        if let Some(p) = &e.value.create_pod {
            let def = pod_def(ctx, &pc, &Spanned::new(p.clone(), e.referenced, e.defined))?;
            all_pod_keys.insert(def.key());
        }
    }

    // Services and slices.
    let mut services: Vec<k8s::Service> = Vec::new();
    // The keys seen so far: a set, as a list searched per Service is quadratic in the
    // number of Services (a 5,000-Service cluster spent seconds here).
    let mut service_keys: BTreeSet<String> = BTreeSet::new();
    for s in &doc.services {
        s.value.validate().map_err(|e| ctx.err(s, e.to_string()))?;
        names::check_dns1035_label("Service name", &s.value.metadata.name)
            .and_then(|_| names::check_dns1123_label("namespace", &s.value.metadata.namespace))
            .map_err(|m| ctx.err(s, m))?;
        if !service_keys.insert(s.value.key()) {
            return Err(ctx.err(s, format!("duplicate Service {}", s.value.key())));
        }
        // ValidateService: "spec.ports[i]: Duplicate value" for a repeated (port, protocol).
        let mut seen = BTreeSet::new();
        for (i, sp) in s.value.spec.ports.iter().enumerate() {
            if !seen.insert((sp.port, format!("{:?}", sp.protocol))) {
                return Err(ctx.err(
                    s,
                    format!(
                        "Service {}: spec.ports[{i}] repeats port {} {:?}: each (port, protocol) may appear once (Kubernetes refuses the Service)",
                        s.value.key(),
                        sp.port,
                        sp.protocol
                    ),
                ));
            }
        }
        services.push(s.value.clone());
    }
    let endpoint_slices = match &doc.endpoint_slices {
        None => None,
        Some(list) => {
            let mut v: Vec<k8s::EndpointSlice> = Vec::new();
            let mut slice_keys: BTreeSet<String> = BTreeSet::new();
            for s in &list.value {
                s.value.validate().map_err(|e| ctx.err(s, e.to_string()))?;
                if !slice_keys.insert(s.value.key()) {
                    return Err(ctx.err(s, format!("duplicate EndpointSlice {}", s.value.key())));
                }
                let svc = s.value.service_name().unwrap_or_default();
                if !service_keys.contains(&format!("{}/{svc}", s.value.metadata.namespace)) {
                    return Err(ctx.err(
                        s,
                        format!(
                            "EndpointSlice {} belongs to Service {}/{svc}, which is not defined",
                            s.value.key(),
                            s.value.metadata.namespace
                        ),
                    ));
                }
                v.push(s.value.clone());
            }
            Some(v)
        }
    };

    // kube-proxy and control plane.
    let defaults = KubeProxySettings::defaults();
    let kube_proxy = match &doc.kube_proxy {
        Some(k) => super::events::kube_proxy_settings(ctx, &defaults, k)?,
        None => defaults,
    };
    let cp = doc.control_plane.as_ref();
    let control_plane = ControlPlaneSettings {
        endpoint_slice_delay: cp
            .and_then(|c| c.endpoint_slice_delay)
            .map_or(SimDuration::from_secs(1), Duration::get),
        watch_delay: cp
            .and_then(|c| c.watch_delay)
            .map_or(SimDuration::from_millis(100), Duration::get),
    };

    // Clients (their target may be a Service an event creates).
    let target_services: Vec<k8s::Service> = services
        .iter()
        .cloned()
        .chain(
            doc.events
                .iter()
                .filter_map(|e| e.value.create_service.as_ref().map(|s| s.value.clone())),
        )
        .collect();
    // Looked up per client: an index, not a search of every Service (10,000 clients of
    // 5,000 Services).
    let mut target_index: BTreeMap<(&str, &str), usize> = BTreeMap::new();
    for (i, s) in target_services.iter().enumerate() {
        target_index
            .entry((s.metadata.namespace.as_str(), s.metadata.name.as_str()))
            .or_insert(i);
    }
    let mut clients: Vec<ClientDef> = Vec::new();
    let mut pcap_clients: Vec<PcapClientDef> = Vec::new();
    let mut client_index = BTreeMap::new();
    let mut fixed_ports = super::udp_apps::FixedPorts::default();
    for c in &doc.clients {
        let d = &c.value;
        names::check_display_name("client name", &d.name.value, names::DISPLAY_NAME_MAX, false)
            .map_err(|m| ctx.err(&d.name, m))?;
        if let Some(pc) = &d.pcap {
            if d.pod.is_some()
                || d.host.is_some()
                || d.node.is_some()
                || d.udp.is_some()
                || d.tcp.is_some()
                || d.dig.is_some()
                || d.ping.is_some()
            {
                return Err(ctx.err(
                    c,
                    "a pcap client has only `name` and `pcap` (its sender is `pcap.from`)",
                ));
            }
            if client_index.contains_key(&d.name.value)
                || pcap_clients.iter().any(|p| p.name == d.name.value)
            {
                return Err(ctx.err(&d.name, format!("duplicate client name {:?}", d.name.value)));
            }
            let from = &pc.value.from;
            let placement = match host_index.get(&from.value) {
                Some(&h) => Placement::Host(h),
                None => {
                    let key = resolve_pod(ctx, &all_pod_keys, from).map_err(|_| {
                        ctx.err(
                            from,
                            format!(
                                "unknown pod or host {:?}: a pcap client sends from a pod at the start (NAME or NAMESPACE/NAME) or a host",
                                from.value
                            ),
                        )
                    })?;
                    if !pod_keys.contains(&key) {
                        return Err(ctx.err(
                            from,
                            "a pcap client must send from a pod that exists at the start",
                        ));
                    }
                    Placement::Pod(key)
                }
            };
            pcap_clients.push(super::pcap_client::load(
                ctx,
                &d.name.value,
                pc,
                placement,
                duration,
            )?);
            continue;
        }
        if pcap_clients.iter().any(|p| p.name == d.name.value) {
            return Err(ctx.err(&d.name, format!("duplicate client name {:?}", d.name.value)));
        }
        if client_index
            .insert(d.name.value.clone(), clients.len())
            .is_some()
        {
            return Err(ctx.err(&d.name, format!("duplicate client name {:?}", d.name.value)));
        }
        let placement = match (&d.pod, &d.host, &d.node) {
            (Some(p), None, None) => {
                if !pod_keys.contains(&resolve_pod(ctx, &all_pod_keys, p)?) {
                    return Err(ctx.err(p, "a client must run in a pod that exists at the start"));
                }
                Placement::Pod(resolve_pod(ctx, &pod_keys, p)?)
            }
            (None, Some(h), None) => {
                Placement::Host(*host_index.get(&h.value).ok_or_else(|| {
                    ctx.err(
                        h,
                        format!(
                            "unknown host {:?}: {}",
                            h.value,
                            one_of(
                                host_index.keys().cloned(),
                                "no host is defined (under `hosts`)"
                            )
                        ),
                    )
                })?)
            }
            (None, None, Some(n)) => {
                Placement::Node(*node_index.get(&n.value).ok_or_else(|| {
                    ctx.err(
                        n,
                        format!(
                            "unknown node {:?}: expected one of {}",
                            n.value,
                            node_index.keys().cloned().collect::<Vec<_>>().join(", ")
                        ),
                    )
                })?)
            }
            _ => return Err(ctx.err(c, "a client needs exactly one of `pod`, `host` or `node`")),
        };
        let end = SimTime::ZERO + duration;
        let sched = |interval: &Spanned<Duration>,
                     jitter: Option<Duration>,
                     start: Option<Duration>,
                     stop: Option<Duration>,
                     count: Option<u32>| {
            if interval.value.is_zero() {
                return Err(ctx.err(interval, "interval 0s: expected a positive duration"));
            }
            Ok(ClientSchedule {
                start: SimTime::ZERO + start.map_or(SimDuration::ZERO, Duration::get),
                stop: stop
                    .map(|s| SimTime::ZERO + s.get())
                    .unwrap_or(end)
                    .min(end),
                interval: interval.value.get(),
                jitter: jitter.map_or(SimDuration::ZERO, Duration::get),
                count,
            })
        };
        if let Some(p) = &d.ping {
            if d.udp.is_some() || d.tcp.is_some() || d.dig.is_some() {
                return Err(ctx.err(
                    c,
                    "a client needs exactly one of `udp`, `tcp`, `dig` or `ping`",
                ));
            }
            let p = &p.value;
            let ip: IpAddr = p.target.value.parse().map_err(|_| {
                ctx.err(
                    &p.target,
                    format!(
                        "ping target {:?}: expected an IP address (a pod's, a node's or a host's)",
                        p.target.value
                    ),
                )
            })?;
            clients.push(ClientDef {
                name: d.name.value.clone(),
                placement,
                target: SocketAddr::new(ip, 0),
                target_text: p.target.value.clone(),
                schedule: sched(&p.interval, p.jitter, p.start, p.stop, p.count)?,
                kind: ClientKind::Ping {
                    timeout: opt_dur(p.timeout, SimDuration::from_secs(1)),
                },
            });
            continue;
        }
        let (target_s, schedule, kind) = match (&d.udp, &d.tcp, &d.dig) {
            (None, None, Some(g)) => {
                let g = &g.value;
                (
                    &g.target,
                    sched(&g.sleep, None, g.start, g.stop, g.count)?,
                    super::udp_apps::dig_kind(ctx, g)?,
                )
            }
            (Some(u), None, None) => {
                let u = &u.value;
                let sp = match u.source_port.as_ref().map(|s| s.value) {
                    None | Some(SourcePortDoc::PerQuery) => SourcePort::PerQuery,
                    Some(SourcePortDoc::Fixed) => SourcePort::FixedEphemeral,
                    Some(SourcePortDoc::Port(p)) => SourcePort::Fixed(p),
                };
                let one_way = u.one_way.as_ref().is_some_and(|o| o.value);
                if let (Some(o), Some(r)) = (&u.one_way, u.retries) {
                    if o.value && r > 0 {
                        return Err(ctx.err(o, "a one-way sender never retries (it cannot tell a send was lost): leave out `retries` or `oneWay`"));
                    }
                }
                (
                    &u.target,
                    sched(&u.interval, u.jitter, u.start, u.stop, u.count)?,
                    ClientKind::Udp {
                        source_port: sp,
                        timeout: opt_dur(u.timeout, SimDuration::from_secs(5)),
                        retries: u.retries.unwrap_or(0),
                        connected: u.connected.unwrap_or(true),
                        one_way,
                        socket: super::udp_apps::udp_socket_use(ctx, u, sp)?,
                    },
                )
            }
            (None, Some(t), None) => {
                let t = &t.value;
                (
                    &t.target,
                    sched(&t.interval, t.jitter, t.start, t.stop, t.count)?,
                    ClientKind::Tcp {
                        connect_timeout: opt_dur(t.connect_timeout, SimDuration::from_secs(10)),
                        request_timeout: opt_dur(t.request_timeout, SimDuration::from_secs(10)),
                        connection: t
                            .connection
                            .as_ref()
                            .map(|c| super::tcp_apps::connection_policy(ctx, c))
                            .transpose()?,
                    },
                )
            }
            _ => {
                return Err(ctx.err(
                    c,
                    "a client needs exactly one of `udp`, `tcp`, `dig` or `ping`",
                ))
            }
        };
        let target = resolve_target(ctx, &target_services, &target_index, target_s)?;
        fixed_ports.claim(ctx, &d.name, format!("{placement:?}"), &schedule, &kind)?;
        clients.push(ClientDef {
            name: d.name.value.clone(),
            placement,
            target,
            target_text: target_s.value.clone(),
            schedule,
            kind,
        });
    }

    // Events.
    for e in &doc.events {
        time_within(ctx, &e.value.at, duration, "event")?;
    }
    let mut world = super::events::World {
        node_index: &node_index,
        services: services.clone(),
        slices: endpoint_slices.clone(),
        pods: pods
            .iter()
            .cloned()
            .chain(doc.events.iter().filter_map(|e| {
                let p = e.value.create_pod.as_ref()?;
                pod_def(ctx, &pc, &Spanned::new(p.clone(), e.referenced, e.defined)).ok()
            }))
            .collect(),
        kube_proxy: vec![(kube_proxy.clone(), true); nodes.len()],
    };
    let mut more_actions = super::events::check_events(ctx, &doc.events, &mut world)?;
    let mut warnings = sysctl_warnings;
    warnings.extend(super::warnings::unmatched_selectors(
        ctx,
        &doc.services,
        &doc.events,
        &world.pods,
        doc.endpoint_slices.is_some(),
    ));
    warnings.extend(super::topology::check(
        ctx,
        &doc.services,
        kube_proxy.release,
    ));
    warnings.extend(super::families::check(
        ctx,
        &doc.services,
        &doc.events,
        doc.endpoint_slices.as_ref().map(|l| l.value.as_slice()),
    )?);
    let mut events = Vec::new();
    for (i, e) in doc.events.iter().enumerate() {
        let d = &e.value;
        let at = time_within(ctx, &d.at, duration, "event")?;
        let n = [
            d.oom_kill.is_some(),
            d.delete_pod.is_some(),
            d.create_pod.is_some(),
            d.readiness.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count()
            + super::events::kinds_in(d);
        if n != 1 {
            return Err(ctx.err(
                e,
                format!(
                    "an event needs `at` and exactly one of `oomKill`, `deletePod`, `createPod`, `readiness`, `{}`",
                    super::events::KINDS.join("`, `")
                ),
            ));
        }
        let action = if let Some(a) = more_actions.remove(&i) {
            a
        } else if let Some(o) = &d.oom_kill {
            let then = PodAction::OomKill {
                restart_after: o.restart_after.map(Duration::get),
            };
            match super::endpoint_of::pod_or_client(
                ctx,
                e,
                &o.pod,
                &o.endpoint_of,
                &client_index,
                then,
            )? {
                Err(behind) => Action::EndpointOf(behind),
                Ok(pod) => Action::OomKill {
                    pod: resolve_pod(ctx, &all_pod_keys, pod)?,
                    restart_after: o.restart_after.map(Duration::get),
                },
            }
        } else if let Some(behind) = d
            .delete_pod
            .as_ref()
            .and_then(|dp| super::endpoint_of::behind(ctx, e, dp, &client_index).transpose())
        {
            Action::EndpointOf(behind?)
        } else if let Some(dp) = &d.delete_pod {
            let pod = resolve_pod(
                ctx,
                &all_pod_keys,
                super::endpoint_of::named(ctx, e, &dp.pod)?,
            )?;
            let recreate = match &dp.recreate {
                None => None,
                Some(r) => {
                    let old = pods.iter().find(|p| p.key() == pod);
                    let node = match &r.node {
                        Some(n) => *node_index
                            .get(&n.value)
                            .ok_or_else(|| ctx.err(n, format!("unknown node {:?}", n.value)))?,
                        None => old.map(|p| p.node).unwrap_or(0),
                    };
                    let ip = match (&r.ip, old) {
                        (Some(ip), _) => {
                            check_pod_ip(ctx, ip, &nodes[node])?;
                            ip.value
                        }
                        (None, Some(o)) => o.ip,
                        (None, None) => {
                            return Err(ctx.err(
                                e,
                                "recreating a pod created by an event needs `recreate.ip`",
                            ))
                        }
                    };
                    Some(Recreate {
                        ip,
                        node,
                        after: r.after.map_or(SimDuration::ZERO, Duration::get),
                    })
                }
            };
            Action::DeletePod {
                pod,
                grace_period: dp.grace_period.map(Duration::get),
                recreate,
            }
        } else if let Some(p) = &d.create_pod {
            Action::CreatePod(Box::new(pod_def(
                ctx,
                &pc,
                &Spanned::new(p.clone(), e.referenced, e.defined),
            )?))
        } else if let Some(r) = &d.readiness {
            Action::Readiness {
                pod: resolve_pod(ctx, &all_pod_keys, &r.pod)?,
                ready: r.ready,
            }
        } else {
            unreachable!("exactly one action was checked above")
        };
        events.push(TimedEvent { at, action });
    }

    // Expectations.
    let mut expectations = Vec::new();
    for x in &doc.expectations {
        if let Some(n) = &x.value.name {
            names::check_display_name("expectation name", n, names::EXPECTATION_NAME_MAX, true)
                .map_err(|m| ctx.err(x, m))?;
        }
        let d = &x.value;
        let at = match &d.at {
            Some(a) => Some(time_within(ctx, a, duration, "expectation")?),
            None => None,
        };
        let n = [
            d.client.is_some(),
            d.conntrack.is_some(),
            d.endpoint.is_some(),
            d.endpoints.is_some(),
            d.conntrack_stats.is_some(),
            d.conntrack_event.is_some(),
        ]
        .iter()
        .filter(|x| **x)
        .count();
        if n != 1 {
            return Err(ctx.err(
                x,
                "an expectation needs exactly one of `client`, `conntrack`, `endpoint`, `endpoints`, `conntrackStats`, `conntrackEvent`",
            ));
        }
        let t = |d: Option<Duration>| d.map(|d| SimTime::ZERO + d.get());
        let endpoint_ref = |s: &Spanned<String>| -> Result<EndpointRef, ScenarioError> {
            match s.value.parse::<IpAddr>() {
                Ok(ip) => Ok(EndpointRef::Ip(ip)),
                Err(_) => Ok(EndpointRef::Pod(resolve_pod(ctx, &all_pod_keys, s)?)),
            }
        };
        let (check, default_name) = if let Some(c) = &d.conntrack_stats {
            super::expect_words::stats_check(ctx, &node_index, c, &mut warnings)?
        } else if let Some(c) = &d.conntrack_event {
            super::expect_words::event_check(ctx, &node_index, c, at, duration)?
        } else if let Some(c) = &d.client {
            let client = *client_index.get(&c.name.value).ok_or_else(|| {
                ctx.err(
                    &c.name,
                    format!(
                        "unknown client {:?}: {}",
                        c.name.value,
                        one_of(
                            client_index.keys().cloned(),
                            "no client is defined (under `clients`)"
                        )
                    ),
                )
            })?;
            if [c.sent, c.answered, c.failed, c.timed_out, c.refused]
                .iter()
                .all(Option::is_none)
            {
                return Err(ctx.err(&c.name, "a client check needs at least one of sent, answered, failed, timedOut, refused"));
            }
            (
                Check::Client {
                    client,
                    from: t(c.from).unwrap_or(SimTime::ZERO),
                    to: t(c.to),
                    sent: c.sent,
                    answered: c.answered,
                    failed: c.failed,
                    timed_out: c.timed_out,
                    refused: c.refused,
                },
                format!("client {}", c.name.value),
            )
        } else if let Some(c) = &d.conntrack {
            let node = *node_index.get(&c.node.value).ok_or_else(|| {
                ctx.err(
                    &c.node,
                    format!(
                        "unknown node {:?}: expected one of {}",
                        c.node.value,
                        node_index.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?;
            let filter = c
                .filter
                .as_ref()
                .map(|f| f.value.clone())
                .unwrap_or_default();
            if let Some(f) = &c.filter {
                sim_conntrack::Filter::parse(&f.value).map_err(|e| {
                    let hint = match e {
                        sim_conntrack::FilterError::UnknownOption { .. } => {
                            ": expected conntrack -L filter options such as -p udp --orig-dst 10.96.0.10 --reply-src 10.244.1.7"
                        }
                        _ => "",
                    };
                    ctx.err(f, format!("bad conntrack filter: {e}{hint}"))
                })?;
            }
            let count = match (c.count, c.exists) {
                (Some(n), None) => n,
                (None, Some(false)) => Count { min: 0, max: 0 },
                (None, Some(true)) | (None, None) => Count {
                    min: 1,
                    max: u64::MAX,
                },
                (Some(_), Some(_)) => {
                    return Err(ctx.err(&c.node, "give `count` or `exists`, not both"))
                }
            };
            (
                Check::Conntrack {
                    node,
                    filter: filter.clone(),
                    count,
                    endpoint: c.endpoint.as_ref().map(endpoint_ref).transpose()?,
                    assured: c.assured,
                    timeout: c.timeout,
                    state: match &c.state {
                        None => None,
                        Some(st) if sim_conntrack::TcpState::from_name(st).is_some() => {
                            Some(st.clone())
                        }
                        Some(st) => {
                            return Err(ctx.err(
                                &c.node,
                                format!(
                                    "unknown TCP state {st:?}: expected one of NONE, SYN_SENT, SYN_RECV, ESTABLISHED, FIN_WAIT, CLOSE_WAIT, LAST_ACK, TIME_WAIT, CLOSE, SYN_SENT2"
                                ),
                            ))
                        }
                    },
                },
                format!("conntrack on {} [{}]", c.node.value, filter),
            )
        } else if let Some(e) = &d.endpoint {
            let client = match &e.client {
                None => None,
                Some(c) => Some(
                    *client_index
                        .get(&c.value)
                        .ok_or_else(|| ctx.err(c, format!("unknown client {:?}", c.value)))?,
                ),
            };
            if e.packets.is_none() && e.flows.is_none() {
                return Err(ctx.err(&e.pod, "an endpoint check needs `packets` or `flows`"));
            }
            (
                Check::Endpoint {
                    endpoint: endpoint_ref(&e.pod)?,
                    client,
                    from: t(e.from).unwrap_or(SimTime::ZERO),
                    to: t(e.to),
                    packets: e.packets,
                    flows: e.flows,
                },
                format!("endpoint {}", e.pod.value),
            )
        } else if let Some(e) = &d.endpoints {
            let client = *client_index.get(&e.client.value).ok_or_else(|| {
                ctx.err(&e.client, format!("unknown client {:?}", e.client.value))
            })?;
            let mut share = Vec::new();
            for (pod, range) in e.share.iter().flatten() {
                let r = ShareRange::parse(&range.value).ok_or_else(|| {
                    ctx.err(
                        range,
                        format!(
                            "share {:?}: expected a fraction of the flows between 0 and 1, as \"0.30..0.37\", \">= 0.2\", \"<= 0.5\" or \"0.5\"",
                            range.value
                        ),
                    )
                })?;
                let at = Spanned::new(pod.clone(), range.referenced, range.defined);
                share.push((endpoint_ref(&at)?, r, range.value.clone()));
            }
            let uniform = e.uniform.unwrap_or(false);
            if share.is_empty() && !uniform {
                return Err(ctx.err(
                    &e.client,
                    "an endpoints check needs `share` or `uniform: true`",
                ));
            }
            (
                Check::Endpoints {
                    client,
                    from: t(e.from).unwrap_or(SimTime::ZERO),
                    to: t(e.to),
                    share,
                    uniform,
                },
                format!("endpoints of client {}", e.client.value),
            )
        } else {
            unreachable!("exactly one check was verified above")
        };
        expectations.push(Expectation {
            name: d.name.clone().unwrap_or(default_name),
            at,
            line: x.referenced.line(),
            check,
        });
    }

    Ok(Scenario {
        file: ctx.file.to_string(),
        name: doc.name.value,
        description: doc.description.unwrap_or_default(),
        outcome: super::expect_words::outcome(ctx, doc.outcome.as_ref())?,
        seed: doc.seed.unwrap_or(1),
        duration,
        latency: doc
            .network
            .and_then(|n| n.latency)
            .map_or(SimDuration::from_micros(100), Duration::get),
        nodes,
        hosts,
        pods,
        services,
        endpoint_slices,
        kube_proxy,
        control_plane,
        clients,
        pcap_clients,
        events,
        expectations,
        service_cidr: ipam.service_cidr,
        allocated: ipam.allocated,
        warnings,
    })
}
