//! Clients: placement, target, schedule and kind (pcap clients apart).

use super::*;

/// `by_key`: each Service's index in `services` by (namespace, name), the first of each.
fn resolve_target(
    ctx: &Ctx,
    services: &[k8s::Service],
    by_key: &BTreeMap<(&str, &str), usize>,
    t: &Spanned<String>,
    family: k8s::IpFamily,
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
    // The client's pod or node has an address of the cluster's family only: it reaches the
    // Service's cluster IP of that family.
    let f = family.as_str();
    let Some(ip) = s.cluster_ip_of(family) else {
        if s.cluster_ip_of(family.other()).is_some() {
            return Err(ctx.err(t, format!("target Service {svc} is {}-only ({}): the client reaches the Service's {f} cluster IP (its `family`, else the cluster's primary family); expected a Service with an {f} cluster IP, or `family: {}` on a dual-stack cluster", family.other().as_str(), s.spec.cluster_ip.map(|c| c.to_string()).unwrap_or_default(), family.other().as_str())));
        }
        return Err(ctx.err(t, format!("target Service {svc} has no {f} cluster IP (headless or ExternalName): a client needs an address")));
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

/// What a client may name: the Services, hosts and nodes, the pods at the start
/// (`pod_keys`) and those events create as well (`all_pod_keys`).
pub(super) struct ClientScope<'a> {
    pub(super) services: &'a [k8s::Service],
    pub(super) host_index: &'a BTreeMap<String, usize>,
    pub(super) node_index: &'a BTreeMap<String, usize>,
    pub(super) pod_keys: &'a PodKeys,
    pub(super) all_pod_keys: &'a PodKeys,
}

/// The checked clients and pcap clients, and the clients' index by name.
pub(super) struct Clients {
    pub(super) clients: Vec<ClientDef>,
    pub(super) pcap_clients: Vec<PcapClientDef>,
    pub(super) client_index: BTreeMap<String, usize>,
}

/// Checks `clients`: placement, target, schedule and kind; pcap clients apart.
pub(super) fn check_clients(
    ctx: &Ctx,
    doc: &ScenarioDoc,
    scope: ClientScope,
    duration: SimDuration,
) -> Result<Clients, ScenarioError> {
    let ClientScope {
        services,
        host_index,
        node_index,
        pod_keys,
        all_pod_keys,
    } = scope;
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
                || d.resolver.is_some()
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
                    let key = resolve_pod(ctx, all_pod_keys, from).map_err(|_| {
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
                if !pod_keys.contains(&resolve_pod(ctx, all_pod_keys, p)?) {
                    return Err(ctx.err(p, "a client must run in a pod that exists at the start"));
                }
                Placement::Pod(resolve_pod(ctx, pod_keys, p)?)
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
        if let Some(r) = &d.resolver {
            if d.udp.is_some() || d.tcp.is_some() || d.dig.is_some() || d.ping.is_some() {
                return Err(ctx.err(
                    c,
                    "a client needs exactly one of `udp`, `tcp`, `dig`, `ping` or `resolver`",
                ));
            }
            let (kind, schedule, target) =
                super::super::dns_apps::resolver_kind(ctx, &r.value, end)?;
            clients.push(ClientDef {
                name: d.name.value.clone(),
                placement,
                target,
                target_text: target.to_string(),
                schedule,
                kind,
            });
            continue;
        }
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
        let target = resolve_target(
            ctx,
            &target_services,
            &target_index,
            target_s,
            client_family(ctx, doc, d)?,
        )?;
        if let (Some(f), Ok(sa)) = (&d.family, target_s.value.parse::<SocketAddr>()) {
            if k8s::IpFamily::of(sa.ip()).as_str() != f.value {
                return Err(ctx.err(f, format!("client {}: family {} but its target {} is {}: give a target of the family, or a Service NAMESPACE/NAME[:PORT] (whose {} cluster IP it then reaches)", d.name.value, f.value, target_s.value, k8s::IpFamily::of(sa.ip()).as_str(), f.value)));
            }
        }
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
    Ok(Clients {
        clients,
        pcap_clients,
        client_index,
    })
}

/// The family a client's Service target resolves in: its `family` (`IPv4` or `IPv6`, one
/// the cluster has), else the cluster's primary family.
fn client_family(
    ctx: &Ctx,
    doc: &ScenarioDoc,
    d: &ClientDoc,
) -> Result<k8s::IpFamily, ScenarioError> {
    let primary = crate::scenario::families::doc_family(doc);
    let Some(f) = &d.family else {
        return Ok(primary);
    };
    let family = match f.value.as_str() {
        "IPv4" => k8s::IpFamily::IPv4,
        "IPv6" => k8s::IpFamily::IPv6,
        other => {
            return Err(ctx.err(
                f,
                format!("client {}: family {other:?}: expected IPv4 or IPv6 (as a Service's ipFamilies spell them)", d.name.value),
            ))
        }
    };
    if family != primary && !crate::scenario::families::dual_stack(&doc.nodes) {
        return Err(ctx.err(f, format!("client {}: family {}: the scenario's cluster is {}-only, so its clients have {} addresses only; give the nodes `addresses` and `podCIDRs` of both families for a dual-stack cluster", d.name.value, f.value, primary.as_str(), primary.as_str())));
    }
    Ok(family)
}
