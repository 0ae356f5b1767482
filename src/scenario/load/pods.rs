//! Pods: their definitions, apps, addresses and termination, and resolving a pod reference.

use super::*;

pub(super) fn check_pod_ip(
    ctx: &Ctx,
    ip: &Spanned<IpAddr>,
    node: &NodeDef,
) -> Result<(), ScenarioError> {
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

pub(super) fn app_defs(ctx: &Ctx, apps: &[Spanned<AppDoc>]) -> Result<Vec<AppDef>, ScenarioError> {
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
                zone: match &s.zone {
                    Some(z) => {
                        let spec = super::super::dns_apps::zone_spec(ctx, z)?;
                        let mut zones = ctx.zones.borrow_mut();
                        zones.push(spec);
                        Some(zones.len() - 1)
                    }
                    None => None,
                },
            },
            (None, Some(s)) if s.answer.is_some() || s.reply_from_port.is_some() => {
                return Err(ctx.err(&s.port, "`answer` and `replyFromPort` are for a udpServer"));
            }
            (None, Some(s)) if s.zone.is_some() => {
                return Err(ctx.err(&s.port, "`zone` is for a udpServer (which then listens on its TCP port too)"));
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
            AppDef::UdpServer {
                port,
                zone: Some(_),
                ..
            } if !ports.insert(("tcp", port)) => {
                return Err(ctx.err(a, format!("a DNS server with a zone listens on TCP port {port} too: a tcpServer has it already")));
            }
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

pub(super) fn pod_def(
    ctx: &Ctx,
    pc: &PodCheck,
    p: &Spanned<PodDoc>,
) -> Result<PodDef, ScenarioError> {
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
            // CoreDNS answers the Services' names (its `kubernetes` plugin).
            let mut zones = ctx.zones.borrow_mut();
            zones.push(super::super::dns_apps::ZoneSpec::services_only());
            apps.push(AppDef::UdpServer {
                port: p.udp_server_port,
                service_time: SimDuration::from_millis(1),
                reply: UdpReply::SamePort,
                zone: Some(zones.len() - 1),
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
        secondary_ip: d.secondary_ip.as_ref().map(|i| i.value),
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
pub(super) fn resolve_pod(
    ctx: &Ctx,
    known: &PodKeys,
    r: &Spanned<String>,
) -> Result<String, ScenarioError> {
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
