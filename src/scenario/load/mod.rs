//! Loading a scenario file: YAML → [`ScenarioDoc`] → checked [`Scenario`].
//!
//! Every error names the file, the line and the column, says what was wrong and what was
//! expected, and shows the line with a caret under the place.
//!
//! `check` below runs the checks in the order a scenario is read; the sections live beside
//! it: `nodes.rs` (nodes, their sysctls and saved state, hosts), `pods.rs`, `services.rs`,
//! `clients.rs`, `expectations.rs`.

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

mod clients;
mod expectations;
mod network;
mod nodes;
mod pods;
mod services;

use super::{events, expect_words, pcap_client, presets, schema, tcp_apps, topology, udp_apps};
use clients::{check_clients, ClientScope, Clients};
use expectations::check_expectations;
use network::network_cni;
use nodes::{check_hosts, check_nodes, check_sysctls, Nodes};
use pods::{app_defs, check_pod_ip, pod_def, resolve_pod};
use services::check_services;

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
    /// The servers' zones in the order met (`AppDef::UdpServer::zone` numbers them).
    pub(super) zones: std::cell::RefCell<Vec<super::dns_apps::ZoneSpec>>,
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
        zones: Default::default(),
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

struct PodCheck<'a> {
    node_index: &'a BTreeMap<String, usize>,
    nodes: &'a [NodeDef],
}

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

    super::families::normalize_nodes(ctx, &mut doc)?;
    super::families::check_addresses(ctx, &doc)?;
    let family = super::families::doc_family(&doc);
    let Nodes {
        nodes,
        node_index,
        mut addrs,
    } = check_nodes(ctx, &doc, &sysctls, &mut sysctl_warnings)?;
    let (hosts, host_index) = check_hosts(ctx, &doc, &nodes, &mut addrs)?;

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

    let (services, endpoint_slices) = check_services(ctx, &doc)?;

    // kube-proxy and control plane.
    let defaults = KubeProxySettings::defaults();
    let kube_proxy = match &doc.kube_proxy {
        Some(k) => super::events::kube_proxy_settings(ctx, &defaults, k)?,
        None => defaults,
    };
    if kube_proxy.mode == crate::kubeproxy::ProxyMode::Nftables {
        // kube-proxy refuses nftables mode on a kernel before 5.13
        // (`utilkernel.NFTablesKubeProxyKernelVersion`, pkg/proxy/nftables/proxier.go).
        for (n, d) in nodes.iter().zip(&doc.nodes) {
            if n.kernel.has_kube_proxy_nftables() {
                continue;
            }
            let place = nodes::kernel_version_place(&doc, &d.value).unwrap_or(d.referenced);
            return Err(ctx.at(
                place,
                format!(
                    "node {}: kernel {} is too old for kubeProxy.mode: nftables: kube-proxy's nftables mode needs kernel 5.13 or later (expected a version of 5.13 or later, or kubeProxy.mode: iptables)",
                    n.name, n.kernel
                ),
            ));
        }
    }
    let cp = doc.control_plane.as_ref();
    let control_plane = ControlPlaneSettings {
        endpoint_slice_delay: cp
            .and_then(|c| c.endpoint_slice_delay)
            .map_or(SimDuration::from_secs(1), Duration::get),
        watch_delay: cp
            .and_then(|c| c.watch_delay)
            .map_or(SimDuration::from_millis(100), Duration::get),
        pod_stop_delay: cp
            .and_then(|c| c.pod_stop_delay)
            .map_or(SimDuration::ZERO, Duration::get),
    };
    let cloud_load_balancer = super::load_balancer::convert(ctx, doc.cloud_load_balancer.as_ref())?;

    let Clients {
        clients,
        pcap_clients,
        client_index,
    } = check_clients(
        ctx,
        &doc,
        ClientScope {
            services: &services,
            host_index: &host_index,
            node_index: &node_index,
            pod_keys: &pod_keys,
            all_pod_keys: &all_pod_keys,
        },
        duration,
    )?;

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
    warnings.extend(super::load_balancer::unused_warning(ctx, &doc));
    if let Some(k) = &doc.kube_proxy {
        warnings.extend(super::events::sync_cost_warning(ctx, &kube_proxy, k));
    }
    warnings.extend(super::families::check(
        ctx,
        family,
        super::families::dual_stack(&doc.nodes),
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

    let expectations = check_expectations(
        ctx,
        &doc,
        duration,
        &node_index,
        &client_index,
        &all_pod_keys,
        &mut warnings,
    )?;

    let cni = network_cni(ctx, doc.network.as_ref(), &nodes, kube_proxy.cluster_cidr)?;
    // IPVS mode's IPv6 sets are `KUBE-6-…` of family inet6, which nfsim's ipset model does
    // not hold.
    if kube_proxy.mode == crate::kubeproxy::ProxyMode::Ipvs && family == crate::k8s::IpFamily::IPv6
    {
        if let Some(m) = doc.kube_proxy.as_ref().and_then(|k| k.value.mode.as_ref()) {
            return Err(ctx.err(
                m,
                "kubeProxy.mode ipvs: the cluster is IPv6, and IPVS mode's IPv6 ipsets (family inet6) are not modelled; expected iptables or nftables for an IPv6 cluster",
            ));
        }
    }
    // The bridge datapath is IPv4 only (br_netfilter's IPv6 passes, `bridge-nf-call-ip6tables`,
    // are not modelled): an IPv6 cluster on it is refused at `cni`, not when the node is built.
    if !matches!(cni, crate::scenario::model::Cni::Ptp) && family == crate::k8s::IpFamily::IPv6 {
        if let Some(c) = doc.network.as_ref().and_then(|n| n.cni.as_ref()) {
            let why = match c.value.as_str() {
                "flannel-vxlan" => "network.cni flannel-vxlan: the scenario's cluster is IPv6 and the flannel-vxlan datapath is IPv4 only (flannel-v6.1 is not modelled); expected `cni: ptp` for an IPv6 cluster".to_string(),
                "bridge" => "network.cni bridge: the scenario's cluster is IPv6 and the bridge datapath is IPv4 only (br_netfilter's IPv6 passes are not modelled); expected `cni: ptp` for an IPv6 cluster".to_string(),
                other => format!("network.cni {other}: the scenario's cluster is IPv6 and the {other} datapath is IPv4 only; expected `cni: ptp` for an IPv6 cluster"),
            };
            return Err(ctx.err(c, why));
        }
    }
    // A dual-stack cluster's pods have an address of each family: only the ptp datapath
    // gives them both (the others' second-family gateways, tunnels and routes are not
    // modelled).
    if !matches!(cni, crate::scenario::model::Cni::Ptp) && super::families::dual_stack(&doc.nodes) {
        if let Some(c) = doc.network.as_ref().and_then(|n| n.cni.as_ref()) {
            let why = if matches!(cni, crate::scenario::model::Cni::Bridge(_)) {
                "the bridge datapath is IPv4 only (br_netfilter's IPv6 passes and the bridge's IPv6 gateway are not modelled)"
            } else {
                "nfsim models this CNI's datapath for one family (its second-family routes and gateways are not modelled)"
            };
            return Err(ctx.err(
                c,
                format!("network.cni {}: the scenario's cluster is dual-stack and {why}, so its pods' IPv6 addresses would not be reached; expected `cni: ptp` for a dual-stack cluster", c.value),
            ));
        }
    }
    warnings.extend(super::dns_apps::zone_warnings(
        ctx,
        &ctx.zones.borrow(),
        &doc.services,
        &doc.events,
        &clients,
    ));
    let dns = std::sync::Arc::new(super::dns_apps::build(
        ctx,
        &ctx.zones.borrow(),
        &services,
        &clients,
    )?);
    Ok(Scenario {
        dns,
        file: ctx.file.to_string(),
        name: doc.name.value,
        description: doc.description.unwrap_or_default(),
        outcome: super::expect_words::outcome(ctx, doc.outcome.as_ref())?,
        seed: doc.seed.unwrap_or(1),
        duration,
        cni,
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
        cloud_load_balancer,
        clients,
        pcap_clients,
        events,
        expectations,
        service_cidr: ipam.service_cidr,
        service_cidrs: ipam.service_cidrs,
        allocated: ipam.allocated,
        warnings,
    })
}
