//! Expectations: what a run must show, each checked against the names it uses.

use super::*;

/// Checks `expectations` against the nodes, clients and pods they name (a stats check may
/// add a warning).
pub(super) fn check_expectations(
    ctx: &Ctx,
    doc: &ScenarioDoc,
    duration: SimDuration,
    node_index: &BTreeMap<String, usize>,
    client_index: &BTreeMap<String, usize>,
    all_pod_keys: &PodKeys,
    warnings: &mut Vec<ScenarioWarning>,
) -> Result<Vec<Expectation>, ScenarioError> {
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
                Err(_) => Ok(EndpointRef::Pod(resolve_pod(ctx, all_pod_keys, s)?)),
            }
        };
        let (check, default_name) = if let Some(c) = &d.conntrack_stats {
            clash_resolve_warning(ctx, doc, node_index, c, warnings)?;
            super::expect_words::stats_check(ctx, node_index, c, warnings)?
        } else if let Some(c) = &d.conntrack_event {
            super::expect_words::event_check(ctx, node_index, c, at, duration)?
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
            if let Some(l) = &c.lookups {
                let resolver = doc
                    .clients
                    .iter()
                    .any(|k| k.value.name.value == c.name.value && k.value.resolver.is_some());
                if !resolver {
                    return Err(ctx.err(l, format!("lookups: client {} is not a resolver (`resolver:`); its queries are counted by sent, answered, failed, timedOut, refused", c.name.value)));
                }
                if [c.sent, c.answered, c.failed, c.timed_out, c.refused]
                    .iter()
                    .any(Option::is_some)
                {
                    return Err(ctx.err(l, "a client check has `lookups` or the query counts (sent, answered, failed, timedOut, refused), not both"));
                }
                let v = &l.value;
                let counts: Vec<(&'static str, Count)> = [
                    ("answered", v.answered),
                    ("nxdomain", v.nxdomain),
                    ("nodata", v.nodata),
                    ("timedOut", v.timed_out),
                    ("refused", v.refused),
                    ("tcp", v.tcp),
                    ("namesTried", v.names_tried),
                    ("stalled", v.stalled),
                ]
                .into_iter()
                .filter_map(|(w, c)| Some((w, c?)))
                .collect();
                if counts.is_empty() && v.max_latency.is_none() {
                    return Err(ctx.err(l, "lookups: expected at least one of answered, nxdomain, nodata, timedOut, refused, tcp, namesTried, stalled, maxLatency"));
                }
                (
                    Check::Lookups {
                        client,
                        from: t(c.from).unwrap_or(SimTime::ZERO),
                        to: t(c.to),
                        counts,
                        max_latency: v.max_latency.map(|d| d.get()),
                    },
                    format!("client {} lookups", c.name.value),
                )
            } else {
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
            }
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
    Ok(expectations)
}

/// A `conntrackStats.clash_resolve` check on a node where it cannot move: one CPU (no two
/// packets race), or a kernel before 5.10, which counts a resolved clash in
/// `insert_failed` (bc92470413f3 added `clash_resolve`).
fn clash_resolve_warning(
    ctx: &Ctx,
    doc: &ScenarioDoc,
    node_index: &BTreeMap<String, usize>,
    c: &Spanned<ConntrackStatsExpectDoc>,
    warnings: &mut Vec<ScenarioWarning>,
) -> Result<(), ScenarioError> {
    let Some(want) = &c.value.clash_resolve else {
        return Ok(());
    };
    let Some(&i) = node_index.get(&c.value.node.value) else {
        return Ok(()); // stats_check refuses the name
    };
    let nd = &doc.nodes[i].value;
    let kernel = super::nodes::node_kernel(ctx, doc, nd)?;
    let why = if nd.cpus.as_ref().is_none_or(|c| c.value <= 1) {
        format!(
            "node {} has one CPU (`cpus`), so no two packets race and nothing clashes",
            nd.name.value
        )
    } else if !kernel.counts_clash_resolve() {
        format!(
            "node {} runs kernel {kernel}, which counts a resolved clash in insert_failed (clash_resolve came with 5.10)",
            nd.name.value
        )
    } else {
        return Ok(());
    };
    let _ = want;
    warnings.push(ScenarioWarning {
        file: ctx.file().to_string(),
        line: c.referenced.line(),
        column: c.referenced.column(),
        message: format!("conntrackStats.clash_resolve: {why}, so it is always 0 here"),
    });
    Ok(())
}
