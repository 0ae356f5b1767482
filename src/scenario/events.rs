//! Events that change the cluster over time beyond pods: Services and EndpointSlices, scaling,
//! kube-proxy's process, `conntrack` commands, node reboots and extra iptables rules.
//!
//! Each event is checked against the objects that exist at its instant: the events are walked
//! in the order the simulation runs them (by time, then file order), keeping the Services,
//! EndpointSlices and kube-proxy processes they create, change and remove. Deleting a Service
//! that an earlier event already deleted, starting a kube-proxy that runs, or updating a
//! slice of a Service that is gone are errors with the event's line and column.
//!
//! docs/scenario-reference.md documents every field.

use super::load::{Ctx, ScenarioError};
use super::model::*;
use super::schema::{EventDoc, KubeProxyDoc, S};
use crate::k8s;
use serde::Deserialize;
use serde_saphyr::Spanned;
use sim_core::{SimDuration, SimTime};
use std::collections::BTreeMap;
use std::net::IpAddr;

/// `scale:` of an event.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ScaleDoc {
    /// The pods' namespace (default `default`).
    #[serde(default)]
    pub namespace: Option<String>,
    /// The label selector (a Deployment's `matchLabels`).
    pub selector: S<BTreeMap<String, String>>,
    /// Replicas wanted.
    pub replicas: S<u32>,
    /// Grace period of the pods removed (default: each pod's `terminationGracePeriod`).
    #[serde(default)]
    pub grace_period: Option<super::schema::Duration>,
}

/// `kubeProxy:` of an event.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct KubeProxyEventDoc {
    /// The node (default: every node).
    #[serde(default)]
    pub node: Option<S<String>>,
    /// `restart`, `stop` or `start`.
    pub action: S<String>,
    /// Settings of the new process, over those in force (restart, start).
    #[serde(default)]
    pub settings: Option<S<KubeProxyDoc>>,
}

/// `conntrack:` of an event.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ConntrackCommandDoc {
    /// The node (default: every node).
    #[serde(default)]
    pub node: Option<S<String>>,
    /// The command line: `-D -p udp --orig-dst 10.96.0.10`, `-F`, `-L FILTER`, `-C`, `-S`
    /// (a leading `conntrack` is allowed).
    pub command: S<String>,
}

/// `rebootNode:` of an event.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct RebootDoc {
    /// The node.
    pub node: S<String>,
    /// Time from the reboot to kube-proxy's first sync (default 10s).
    #[serde(default)]
    pub kube_proxy_after: Option<super::schema::Duration>,
}

/// `iptablesRestore:` of an event (and of `nodes[].iptablesRestore`).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct IptablesRestoreDoc {
    /// The node (default: every node).
    #[serde(default)]
    pub node: Option<S<String>>,
    /// iptables-restore text.
    pub rules: S<String>,
    /// `--noflush` (default true: the tables' other rules stay).
    #[serde(default)]
    pub noflush: Option<bool>,
}

/// The default delay from a reboot to kube-proxy's first sync.
pub const REBOOT_KUBE_PROXY_AFTER: SimDuration = SimDuration::from_secs(10);

/// The names of the event kinds this module checks, in the order of the error message.
pub const KINDS: [&str; 10] = [
    "createService",
    "updateService",
    "deleteService",
    "updateEndpointSlice",
    "deleteEndpointSlice",
    "scale",
    "kubeProxy",
    "conntrack",
    "rebootNode",
    "iptablesRestore",
];

/// How many of this module's kinds an event holds.
pub(super) fn kinds_in(d: &EventDoc) -> usize {
    [
        d.create_service.is_some(),
        d.update_service.is_some(),
        d.delete_service.is_some(),
        d.update_endpoint_slice.is_some(),
        d.delete_endpoint_slice.is_some(),
        d.scale.is_some(),
        d.kube_proxy.is_some(),
        d.conntrack.is_some(),
        d.reboot_node.is_some(),
        d.iptables_restore.is_some(),
    ]
    .iter()
    .filter(|x| **x)
    .count()
}

/// kube-proxy settings `doc` gives over `base` (the top-level `kubeProxy:`, or a `kubeProxy`
/// event's `settings:` over the settings then in force).
pub(super) fn kube_proxy_settings(
    ctx: &Ctx,
    base: &KubeProxySettings,
    doc: &Spanned<KubeProxyDoc>,
) -> Result<KubeProxySettings, ScenarioError> {
    let d = &doc.value;
    let mut s = base.clone();
    if let Some(r) = &d.release {
        s.release = Release::parse(&r.value).ok_or_else(|| {
            ctx.err(
                r,
                format!(
                    "unknown release {:?}: expected a Kubernetes version from v1.28 to v1.37 (its latest patch), or one of {}",
                    r.value,
                    Release::expected()
                ),
            )
        })?;
    }
    if let Some(v) = d.min_sync_period {
        s.min_sync_period = v.get();
    }
    if let Some(v) = d.sync_period {
        if v.is_zero() {
            return Err(ctx.err(
                doc,
                "syncPeriod 0s: expected a positive duration (default 30s)",
            ));
        }
        s.sync_period = v.get();
    }
    if let Some(v) = d.masquerade_all {
        s.masquerade_all = v;
    }
    if let Some(c) = &d.cluster_cidr {
        s.cluster_cidr = Some(c.value);
    }
    if let Some(m) = &d.detect_local_mode {
        let need = |v: &Option<S<String>>, key: &str| -> Result<String, ScenarioError> {
            match v {
                Some(x) if !x.value.is_empty() => Ok(x.value.clone()),
                _ => Err(ctx.err(m, format!("detectLocalMode {} needs `{key}`", m.value))),
            }
        };
        s.detect_local = Some(match m.value.as_str() {
            "ClusterCIDR" => DetectLocal::ClusterCidr,
            "NodeCIDR" => DetectLocal::NodeCidr,
            "BridgeInterface" => {
                DetectLocal::BridgeInterface(need(&d.bridge_interface, "bridgeInterface")?)
            }
            "InterfaceNamePrefix" => DetectLocal::InterfaceNamePrefix(need(
                &d.interface_name_prefix,
                "interfaceNamePrefix",
            )?),
            "None" | "none" => DetectLocal::None,
            other => {
                return Err(ctx.err(
                    m,
                    format!("unknown detectLocalMode {other:?}: expected ClusterCIDR, NodeCIDR, BridgeInterface, InterfaceNamePrefix or None"),
                ))
            }
        });
    }
    if let Some(list) = &d.node_port_addresses {
        let mut v = Vec::new();
        for a in &list.value {
            if a == "primary" {
                if list.value.len() != 1 {
                    return Err(ctx.err(
                        list,
                        "`primary` must be the only entry of nodePortAddresses",
                    ));
                }
                v.push(NodePortAddress::Primary);
                continue;
            }
            let c: k8s::Cidr = a.parse().map_err(|_| {
                ctx.err(
                    list,
                    format!("bad nodePortAddresses entry {a:?}: expected a CIDR (192.168.0.0/24) or `primary`"),
                )
            })?;
            v.push(NodePortAddress::Cidr(c));
        }
        s.node_port_addresses = v;
    }
    if let Some(v) = d.localhost_node_ports {
        s.localhost_node_ports = v;
    }
    if let Some(b) = &d.masquerade_bit {
        if b.value > 31 {
            return Err(ctx.err(b, format!("masqueradeBit {}: expected 0-31", b.value)));
        }
        s.masquerade_bit = b.value;
    }
    if let Some(v) = d.random_fully {
        s.random_fully = v;
    }
    if let Some(v) = d.nfacct {
        s.nfacct = v;
    }
    if let Some(m) = &d.mode {
        let mode = match m.value.as_str() {
            "iptables" => crate::kubeproxy::ProxyMode::Iptables,
            "nftables" => crate::kubeproxy::ProxyMode::Nftables,
            "ipvs" => crate::kubeproxy::ProxyMode::Ipvs,
            other => {
                return Err(ctx.err(
                    m,
                    format!(
                        "unknown kube-proxy mode {other:?}: expected iptables, nftables or ipvs"
                    ),
                ))
            }
        };
        // IPVS mode's own minSyncPeriod default is 0 (KubeProxyIPVSConfiguration), the
        // others' 1 s: a mode change without a minSyncPeriod takes the new mode's default.
        let ipvs = crate::kubeproxy::ProxyMode::Ipvs;
        if d.min_sync_period.is_none() && (mode == ipvs) != (s.mode == ipvs) {
            s.min_sync_period = if mode == ipvs {
                SimDuration::ZERO
            } else {
                SimDuration::from_secs(1)
            };
        }
        s.mode = mode;
    }
    if let Some(i) = &d.ipvs {
        if s.mode != crate::kubeproxy::ProxyMode::Ipvs {
            return Err(ctx.err(
                i,
                "kubeProxy.ipvs is read in mode: ipvs only; set mode: ipvs",
            ));
        }
        if let Some(sch) = &i.value.scheduler {
            if !crate::kubeproxy::ipvs::SCHEDULERS.contains(&sch.value.as_str()) {
                return Err(ctx.err(
                    sch,
                    format!(
                        "unknown IPVS scheduler {:?}: expected one of {}",
                        sch.value,
                        crate::kubeproxy::ipvs::SCHEDULERS.join(", ")
                    ),
                ));
            }
            s.ipvs.scheduler.clone_from(&sch.value);
        }
        if let Some(v) = i.value.strict_arp {
            if v {
                // arp_ignore=1 / arp_announce=2 change which ARP requests a node answers
                // for the kube-ipvs0 addresses; nfsim's links do not model ARP.
                return Err(ctx.err(
                    i,
                    "kubeProxy.ipvs.strictARP: true is not modelled (nfsim's links have no ARP, which arp_ignore and arp_announce act on); expected false or no strictARP",
                ));
            }
            s.ipvs.strict_arp = v;
        }
        let secs = |d: &Option<crate::scenario::schema::Duration>, cur: u32| {
            d.map_or(cur, |d| d.as_secs().min(u64::from(u32::MAX)) as u32)
        };
        s.ipvs.tcp_timeout_secs = secs(&i.value.tcp_timeout, s.ipvs.tcp_timeout_secs);
        s.ipvs.tcp_fin_timeout_secs = secs(&i.value.tcp_fin_timeout, s.ipvs.tcp_fin_timeout_secs);
        s.ipvs.udp_timeout_secs = secs(&i.value.udp_timeout, s.ipvs.udp_timeout_secs);
    }
    if let Some(m) = &d.sync_cost {
        s.sync_cost = match m.value.as_str() {
            "modelled" => crate::scenario::model::SyncCostMode::Modelled,
            "instant" => crate::scenario::model::SyncCostMode::Instant,
            other => {
                return Err(ctx.err(
                    m,
                    format!("unknown syncCost {other:?}: expected modelled or instant"),
                ))
            }
        };
    }
    if let Some(c) = &d.cleanup {
        if c.value.command.is_empty() || c.value.command[0].is_empty() {
            return Err(ctx.err(
                c,
                "cleanup.command is empty: expected the program and its arguments, e.g. [python3, examples/reconciler/python/reconciler.py]",
            ));
        }
        let timeout = c
            .value
            .timeout
            .map_or(SimDuration::from_secs(10), |t| t.get());
        if timeout.is_zero() {
            return Err(ctx.err(
                c,
                "cleanup.timeout 0s: expected a positive duration (default 10s)",
            ));
        }
        s.cleanup = Some(crate::scenario::model::ExternalCleanup {
            command: c.value.command.clone(),
            timeout: std::time::Duration::from_nanos(timeout.as_nanos()),
        });
    }
    if s.mode == crate::kubeproxy::ProxyMode::Ipvs {
        if s.sync_cost == crate::scenario::model::SyncCostMode::Modelled {
            let e = "kubeProxy.syncCost: modelled is calibrated for iptables and nftables mode's restores, not for IPVS mode's netlink calls; expected instant with mode: ipvs";
            let at = d.sync_cost.as_ref().map(|r| ctx.err(r, e));
            return Err(at.unwrap_or_else(|| ctx.err(doc, e)));
        }
        if let Err(e) = crate::kubeproxy::ipvs::release_supported(s.release.name()) {
            let at = d.release.as_ref().map(|r| ctx.err(r, e.clone()));
            return Err(at.unwrap_or_else(|| ctx.err(doc, e)));
        }
    }
    Ok(s)
}

/// What exists at an instant, as the events change it.
pub(super) struct World<'a> {
    /// Node names → index.
    pub node_index: &'a BTreeMap<String, usize>,
    /// Services.
    pub services: Vec<k8s::Service>,
    /// EndpointSlices given in the file (`None`: derived from pods).
    pub slices: Option<Vec<k8s::EndpointSlice>>,
    /// Every pod the scenario defines (at the start and by `createPod`).
    pub pods: Vec<PodDef>,
    /// kube-proxy's settings per node, and whether it runs.
    pub kube_proxy: Vec<(KubeProxySettings, bool)>,
}

fn nodes_of(ctx: &Ctx, w: &World, node: &Option<S<String>>) -> Result<Vec<usize>, ScenarioError> {
    match node {
        None => Ok((0..w.node_index.len()).collect()),
        Some(n) => w.node_index.get(&n.value).map(|&i| vec![i]).ok_or_else(|| {
            ctx.err(
                n,
                format!(
                    "unknown node {:?}: expected one of {}",
                    n.value,
                    w.node_index.keys().cloned().collect::<Vec<_>>().join(", ")
                ),
            )
        }),
    }
}

fn split_key(
    ctx: &Ctx,
    s: &Spanned<String>,
    what: &str,
) -> Result<(String, String), ScenarioError> {
    match s.value.split_once('/') {
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok((ns.to_string(), name.to_string()))
        }
        _ => Err(ctx.err(
            s,
            format!("bad {what} {:?}: expected NAMESPACE/NAME", s.value),
        )),
    }
}

/// Parses an operator's `conntrack` command line.
pub fn parse_conntrack_command(text: &str) -> Result<ConntrackCommand, String> {
    let t = text.trim();
    let t = t.strip_prefix("conntrack ").unwrap_or(t).trim();
    let (op, rest) = match t.split_once(char::is_whitespace) {
        Some((a, b)) => (a, b.trim()),
        None => (t, ""),
    };
    let filter = |rest: &str| -> Result<String, String> {
        sim_conntrack::Filter::parse(rest).map_err(|e| format!("bad conntrack filter: {e}"))?;
        Ok(rest.to_string())
    };
    let bare = |c: ConntrackCommand| {
        if rest.is_empty() {
            Ok(c)
        } else {
            Err(format!(
                "`conntrack {op}` takes no filter here, got {rest:?}"
            ))
        }
    };
    match op {
        "-D" | "--delete" => {
            if rest.is_empty() {
                return Err("`conntrack -D` needs a filter (`-D -p udp --orig-dst 10.96.0.10`); `-F` empties the table".into());
            }
            let f = filter(rest)?;
            // What the real tool refuses with -D (exit 2), refused here too: the command
            // would delete nothing on the node.
            if let Some(m) = sim_conntrack::Filter::parse(&f)
                .ok()
                .and_then(|x| x.delete_refusal())
            {
                return Err(format!(
                    "conntrack -D {rest}: conntrack-tools 1.4.7 refuses it (\"{m}\", exit 2), so it deletes nothing on a real node"
                ));
            }
            Ok(ConntrackCommand::Delete(f))
        }
        "-L" | "--dump" => Ok(ConntrackCommand::List(filter(rest)?)),
        "-F" | "--flush" => bare(ConntrackCommand::Flush),
        "-C" | "--count" => bare(ConntrackCommand::Count),
        "-S" | "--stats" => bare(ConntrackCommand::Stats),
        _ => Err(format!(
            "unknown conntrack command {op:?}: expected -D FILTER, -F, -L [FILTER], -C or -S"
        )),
    }
}

/// Checks `rules` as `iptables-restore` would take them on a node of its own (every chain
/// the text uses must be declared in it or built in).
pub(super) fn check_restore_text(
    ctx: &Ctx,
    rules: &Spanned<String>,
    noflush: bool,
) -> Result<(), ScenarioError> {
    let mut ns =
        sim_netfilter::netns::Netns::new(sim_netfilter::netns::NetnsConfig::new("check", 1));
    ns.restore(&rules.value, noflush).map(|_| ()).map_err(|e| {
        ctx.err(
            rules,
            format!("iptables-restore refuses these rules (line numbers within the text): {e}"),
        )
    })
}

fn dup_ip(w: &World, svc: &k8s::Service) -> Option<String> {
    [k8s::IpFamily::IPv4, k8s::IpFamily::IPv6]
        .into_iter()
        .find_map(|f| {
            let ip = svc.cluster_ip_of(f)?;
            w.services
                .iter()
                .find(|o| o.key() != svc.key() && o.cluster_ip_of(f) == Some(ip))
                .map(|o| format!("cluster IP {ip} is already Service {}'s", o.key()))
        })
}

/// Checks the events of this module in run order against `w`, and returns their actions by
/// event index.
pub(super) fn check_events(
    ctx: &Ctx,
    events: &[Spanned<EventDoc>],
    w: &mut World,
) -> Result<BTreeMap<usize, Action>, ScenarioError> {
    let mut order: Vec<usize> = (0..events.len()).collect();
    order.sort_by_key(|&i| events[i].value.at.value);
    let mut out = BTreeMap::new();
    for i in order {
        let e = &events[i];
        let d = &e.value;
        let at = SimTime::ZERO + d.at.value.get();
        let action = if let Some(s) = d.create_service.as_ref().or(d.update_service.as_ref()) {
            let created = d.create_service.is_some();
            s.value.validate().map_err(|x| ctx.err(s, x.to_string()))?;
            let key = s.value.key();
            let exists = w.services.iter().position(|o| o.key() == key);
            match (created, exists) {
                (true, Some(_)) => {
                    return Err(ctx.err(
                        s,
                        format!("Service {key} already exists at {}: use updateService", at.hms()),
                    ))
                }
                (false, None) => {
                    return Err(ctx.err(
                        s,
                        format!(
                            "Service {key} does not exist at {}: expected one of {} (or use createService)",
                            at.hms(),
                            names(w.services.iter().map(|s| s.key()))
                        ),
                    ))
                }
                _ => {}
            }
            if let Some(m) = dup_ip(w, &s.value) {
                return Err(ctx.err(s, m));
            }
            match exists {
                Some(k) => w.services[k] = s.value.clone(),
                None => w.services.push(s.value.clone()),
            }
            Action::UpsertService {
                service: Box::new(s.value.clone()),
                created,
            }
        } else if let Some(k) = &d.delete_service {
            let (namespace, name) = split_key(ctx, k, "Service")?;
            let Some(pos) = w.services.iter().position(|o| o.key() == k.value) else {
                return Err(ctx.err(
                    k,
                    format!(
                        "Service {} does not exist at {}: expected one of {}",
                        k.value,
                        at.hms(),
                        names(w.services.iter().map(|s| s.key()))
                    ),
                ));
            };
            w.services.remove(pos);
            if let Some(sl) = &mut w.slices {
                sl.retain(|x| {
                    !(x.metadata.namespace == namespace && x.service_name() == Some(&name))
                });
            }
            Action::DeleteService { namespace, name }
        } else if let Some(s) = &d.update_endpoint_slice {
            let Some(slices) = w.slices.as_mut() else {
                return Err(ctx.err(s, "EndpointSlices are derived from the pods in this scenario: give `endpointSlices:` at the top level to change them by events (or change the pods)"));
            };
            s.value.validate().map_err(|x| ctx.err(s, x.to_string()))?;
            let svc = s.value.service_name().unwrap_or_default();
            if !w.services.iter().any(|x| {
                x.metadata.namespace == s.value.metadata.namespace && x.metadata.name == svc
            }) {
                return Err(ctx.err(
                    s,
                    format!(
                        "EndpointSlice {} belongs to Service {}/{svc}, which does not exist at {}",
                        s.value.key(),
                        s.value.metadata.namespace,
                        at.hms()
                    ),
                ));
            }
            match slices.iter().position(|o| o.key() == s.value.key()) {
                Some(k) => slices[k] = s.value.clone(),
                None => slices.push(s.value.clone()),
            }
            Action::UpsertEndpointSlice(Box::new(s.value.clone()))
        } else if let Some(k) = &d.delete_endpoint_slice {
            let Some(slices) = w.slices.as_mut() else {
                return Err(ctx.err(k, "EndpointSlices are derived from the pods in this scenario: give `endpointSlices:` at the top level to change them by events"));
            };
            let (namespace, name) = split_key(ctx, k, "EndpointSlice")?;
            let Some(pos) = slices.iter().position(|o| o.key() == k.value) else {
                return Err(ctx.err(
                    k,
                    format!(
                        "EndpointSlice {} does not exist at {}: expected one of {}",
                        k.value,
                        at.hms(),
                        names(slices.iter().map(|s| s.key()))
                    ),
                ));
            };
            slices.remove(pos);
            Action::DeleteEndpointSlice { namespace, name }
        } else if let Some(s) = &d.scale {
            let sd = &s.value;
            let namespace = sd.namespace.clone().unwrap_or_else(|| "default".into());
            if let Some(m) = crate::k8s::labels::labels_problem(&sd.selector.value) {
                return Err(ctx.err(&sd.selector, format!("scale.selector: {m}")));
            }
            if sd.selector.value.is_empty() {
                return Err(ctx.err(
                    &sd.selector,
                    "empty selector: expected labels such as {app: web}",
                ));
            }
            let matching = w
                .pods
                .iter()
                .filter(|p| {
                    p.namespace == namespace
                        && sd
                            .selector
                            .value
                            .iter()
                            .all(|(k, v)| p.labels.get(k) == Some(v))
                })
                .count();
            if matching == 0 {
                return Err(ctx.err(
                    &sd.selector,
                    format!("no pod in namespace {namespace} has these labels: a scale event acts on pods the scenario defines"),
                ));
            }
            if sd.replicas.value as usize > matching {
                return Err(ctx.err(
                    &sd.replicas,
                    format!("{} replicas, but the scenario defines {matching} pod(s) with these labels: expected at most {matching} (scaling up brings back pods scaled down, with their names and IPs)", sd.replicas.value),
                ));
            }
            Action::Scale {
                namespace,
                selector: sd.selector.value.clone(),
                replicas: sd.replicas.value,
                grace_period: sd.grace_period.map(|g| g.get()),
            }
        } else if let Some(k) = &d.kube_proxy {
            let kd = &k.value;
            let op = match kd.action.value.as_str() {
                "restart" => ProxyOp::Restart,
                "stop" => ProxyOp::Stop,
                "start" => ProxyOp::Start,
                other => {
                    return Err(ctx.err(
                        &kd.action,
                        format!(
                            "unknown kube-proxy action {other:?}: expected restart, stop or start"
                        ),
                    ))
                }
            };
            let nodes = nodes_of(ctx, w, &kd.node)?;
            if op == ProxyOp::Stop && kd.settings.is_some() {
                return Err(ctx.err(
                    k,
                    "a stopped kube-proxy takes no settings: give them to the `start`",
                ));
            }
            let mut settings = None;
            for &n in &nodes {
                let (cur, running) = &w.kube_proxy[n];
                let name = w
                    .node_index
                    .iter()
                    .find(|(_, &i)| i == n)
                    .map(|(k, _)| k.clone())
                    .unwrap_or_default();
                match (op, running) {
                    (ProxyOp::Stop | ProxyOp::Restart, false) => {
                        return Err(ctx.err(
                            &kd.action,
                            format!(
                                "kube-proxy on {name} is stopped at {}: expected `start`",
                                at.hms()
                            ),
                        ))
                    }
                    (ProxyOp::Start, true) => {
                        return Err(ctx.err(
                            &kd.action,
                            format!(
                            "kube-proxy on {name} already runs at {}: expected `restart` or `stop`",
                            at.hms()
                        ),
                        ))
                    }
                    _ => {}
                }
                let new = match &kd.settings {
                    Some(sd) => kube_proxy_settings(ctx, cur, sd)?,
                    None => cur.clone(),
                };
                let ipvs = crate::kubeproxy::ProxyMode::Ipvs;
                if cur.mode == ipvs && new.mode != ipvs {
                    // platformCleanup: nftables mode runs ipvs.CleanupLeftovers at start
                    // (flush, kube-ipvs0 deleted, sets destroyed), iptables mode leaves
                    // IPVS's servers in place; neither is modelled yet.
                    return Err(ctx.err(
                        kd.settings
                            .as_ref()
                            .and_then(|s| s.value.mode.as_ref())
                            .unwrap_or(&kd.action),
                        "a kubeProxy event leaving mode ipvs: what the new mode does with IPVS's leftovers (ipvs.CleanupLeftovers from nftables mode, nothing from iptables mode) is not modelled; expected the mode to stay ipvs",
                    ));
                }
                if cur.mode == crate::kubeproxy::ProxyMode::Nftables && new.mode == ipvs {
                    // platformCleanup: an iptables-based mode deletes nftables mode's
                    // tables at start (nftables.CleanupLeftovers), not modelled yet.
                    return Err(ctx.err(
                        kd.settings
                            .as_ref()
                            .and_then(|s| s.value.mode.as_ref())
                            .unwrap_or(&kd.action),
                        "a kubeProxy event from mode nftables to ipvs: the new process's nftables.CleanupLeftovers (platformCleanup) is not modelled; expected a switch from iptables to ipvs",
                    ));
                }
                if kd.settings.is_some() {
                    settings = Some(Box::new(new.clone()));
                }
                w.kube_proxy[n] = (new, op != ProxyOp::Stop);
            }
            Action::KubeProxy {
                nodes,
                op,
                settings,
            }
        } else if let Some(c) = &d.conntrack {
            let nodes = nodes_of(ctx, w, &c.value.node)?;
            let command = parse_conntrack_command(&c.value.command.value)
                .map_err(|m| ctx.err(&c.value.command, m))?;
            Action::Conntrack { nodes, command }
        } else if let Some(r) = &d.reboot_node {
            let node = nodes_of(ctx, w, &Some(r.value.node.clone()))?[0];
            if !w.kube_proxy[node].1 {
                // A reboot starts kube-proxy again.
                w.kube_proxy[node].1 = true;
            }
            Action::RebootNode {
                node,
                kube_proxy_after: r
                    .value
                    .kube_proxy_after
                    .map_or(REBOOT_KUBE_PROXY_AFTER, |d| d.get()),
            }
        } else if let Some(r) = &d.iptables_restore {
            let nodes = nodes_of(ctx, w, &r.value.node)?;
            let noflush = r.value.noflush.unwrap_or(true);
            check_restore_text(ctx, &r.value.rules, noflush)?;
            Action::IptablesRestore {
                nodes,
                rules: r.value.rules.value.clone(),
                noflush,
            }
        } else {
            continue;
        };
        out.insert(i, action);
    }
    Ok(out)
}

fn names(it: impl Iterator<Item = String>) -> String {
    let v: Vec<String> = it.collect();
    if v.is_empty() {
        "(none)".into()
    } else {
        v.join(", ")
    }
}

/// One of `nodes[].extraAddresses`: `IP[/LEN]` (on `eth0`) or `{address, interface}`.
#[derive(Debug)]
pub struct ExtraAddressDoc {
    /// The interface (default `eth0`).
    pub interface: Option<String>,
    /// The address.
    pub address: IpAddr,
    /// Its prefix length (default: the node network's on `eth0`, /32 elsewhere).
    pub len: Option<u8>,
}

impl<'de> Deserialize<'de> for ExtraAddressDoc {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Text(String),
            Map {
                address: String,
                #[serde(default)]
                interface: Option<String>,
            },
        }
        let (text, interface) = match Raw::deserialize(d)? {
            Raw::Text(t) => (t, None),
            Raw::Map { address, interface } => (address, interface),
        };
        let bad = || {
            serde::de::Error::custom(format!(
                "bad address {text:?}: expected IP or IP/LEN (10.0.1.5, 169.254.20.10/32)"
            ))
        };
        let (ip, len) = match text.split_once('/') {
            Some((a, l)) => (a, Some(l.parse::<u8>().map_err(|_| bad())?)),
            None => (text.as_str(), None),
        };
        let address: IpAddr = ip.trim().parse().map_err(|_| bad())?;
        let max = if address.is_ipv4() { 32 } else { 128 };
        if len.is_some_and(|l| l > max) {
            return Err(bad());
        }
        if let Some(i) = &interface {
            if sim_core::IfName::new(i).is_err() || i == "lo" {
                return Err(serde::de::Error::custom(format!(
                    "bad interface name {i:?}: expected 1-15 characters, not `lo`"
                )));
            }
        }
        Ok(ExtraAddressDoc {
            interface,
            address,
            len,
        })
    }
}

/// A warning at `syncCost` (or the `kubeProxy:` settings) when `syncCost: modelled` meets a cleanup whose deletes the model
/// does not charge (an external `cleanup:` program, or the event-based cleanup of v1.31 and
/// earlier): the restore takes its modelled time but those deletes take none, so the run is
/// not exact there (docs/kube-proxy-model.md §5a).
pub(super) fn sync_cost_warning(
    ctx: &Ctx,
    s: &KubeProxySettings,
    doc: &Spanned<KubeProxyDoc>,
) -> Option<super::warnings::ScenarioWarning> {
    if s.sync_cost != SyncCostMode::Modelled {
        return None;
    }
    let what = if s.cleanup.is_some() {
        "the external `cleanup:` program".to_string()
    } else if matches!(
        s.release.cleanup(),
        Cleanup::EventReady | Cleanup::EventPresence | Cleanup::EventServing
    ) {
        format!(
            "release {}'s event-based conntrack cleanup",
            s.release.name()
        )
    } else {
        return None;
    };
    // At the `syncCost` field where it is given here, else at the `kubeProxy:` settings.
    let at = match &doc.value.sync_cost {
        Some(f) => (f.referenced.line(), f.referenced.column()),
        None => (doc.referenced.line(), doc.referenced.column()),
    };
    Some(super::warnings::ScenarioWarning {
        file: ctx.file().to_string(),
        line: at.0,
        column: at.1,
        message: format!(
            "syncCost: modelled charges each sync's restore, but not the conntrack deletes of {what}: those take no simulated time in this run"
        ),
    })
}
