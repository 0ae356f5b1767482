//! The expectation kinds on a node's conntrack machinery as its tools show it:
//! `conntrackStats:` (the `conntrack -S` counters) and `conntrackEvent:` (`conntrack -E`
//! events in a window, such as "the entry is destroyed by the cleanup about 2 s after the
//! kill"). The loader calls [`stats_check`] and [`event_check`]; the simulation checks them
//! (`cluster::sim::expect`). Also the scenario's `outcome:`, the lead of the run's headline
//! (`report::headline`).

use super::load::{Ctx, ScenarioError};
use super::model::{Check, Count, CtEventKind, StatCounter};
use super::schema::{ConntrackEventExpectDoc, ConntrackStatsExpectDoc};
use super::warnings::ScenarioWarning;
use serde_saphyr::Spanned;
use sim_core::{SimDuration, SimTime};
use std::collections::BTreeMap;

/// The default `tolerance` of `conntrackEvent.about`.
pub const DEFAULT_EVENT_TOLERANCE: SimDuration = SimDuration::from_secs(1);

fn node_of(
    ctx: &Ctx,
    node_index: &BTreeMap<String, usize>,
    node: &Spanned<String>,
) -> Result<usize, ScenarioError> {
    node_index.get(&node.value).copied().ok_or_else(|| {
        ctx.err(
            node,
            format!(
                "unknown node {:?}: expected one of {}",
                node.value,
                node_index.keys().cloned().collect::<Vec<_>>().join(", ")
            ),
        )
    })
}

/// A `conntrackStats:` check, and a warning for each counter nfsim never increments.
pub(super) fn stats_check(
    ctx: &Ctx,
    node_index: &BTreeMap<String, usize>,
    doc: &Spanned<ConntrackStatsExpectDoc>,
    warnings: &mut Vec<ScenarioWarning>,
) -> Result<(Check, String), ScenarioError> {
    let d = &doc.value;
    let node = node_of(ctx, node_index, &d.node)?;
    let counters: Vec<(StatCounter, Count)> = [
        (StatCounter::Found, d.found),
        (StatCounter::Invalid, d.invalid),
        (StatCounter::Insert, d.insert),
        (StatCounter::InsertFailed, d.insert_failed),
        (StatCounter::Drop, d.drop),
        (StatCounter::EarlyDrop, d.early_drop),
        (StatCounter::Error, d.error),
        (StatCounter::SearchRestart, d.search_restart),
        (StatCounter::ClashResolve, d.clash_resolve),
        (StatCounter::ChainTooLong, d.chaintoolong),
    ]
    .into_iter()
    .filter_map(|(c, v)| v.map(|v| (c, v)))
    .collect();
    if counters.is_empty() {
        return Err(ctx.err(
            &d.node,
            "a conntrackStats check needs at least one counter: found, invalid, insert, insert_failed, drop, early_drop, error, search_restart, clash_resolve, chaintoolong",
        ));
    }
    for (c, _) in counters.iter().filter(|(c, _)| !c.modelled()) {
        warnings.push(ScenarioWarning {
            file: ctx.file().to_string(),
            line: doc.referenced.line(),
            column: doc.referenced.column(),
            message: format!(
                "conntrackStats.{}: nfsim never increments it (no lookup races a table resize, no hash chain grows too long), so it is always 0 here",
                c.name()
            ),
        });
    }
    let name = format!(
        "conntrack -S on {}: {}",
        d.node.value,
        counters
            .iter()
            .map(|(c, v)| format!("{} {v}", c.name()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    Ok((Check::ConntrackStats { node, counters }, name))
}

/// A `conntrackEvent:` check. `at` is the expectation's own check time (`None`: the end of
/// the run); the window must close by then.
pub(super) fn event_check(
    ctx: &Ctx,
    node_index: &BTreeMap<String, usize>,
    doc: &Spanned<ConntrackEventExpectDoc>,
    at: Option<SimTime>,
    duration: SimDuration,
) -> Result<(Check, String), ScenarioError> {
    let d = &doc.value;
    let node = node_of(ctx, node_index, &d.node)?;
    let kind = match d.event.value.as_str() {
        "NEW" => CtEventKind::New,
        "UPDATE" => CtEventKind::Update,
        "DESTROY" => CtEventKind::Destroy,
        other => {
            return Err(ctx.err(
                &d.event,
                format!("unknown conntrack event {other:?}: expected NEW, UPDATE or DESTROY"),
            ))
        }
    };
    let cause = match &d.cause {
        None => None,
        Some(c) if kind != CtEventKind::Destroy => {
            return Err(ctx.err(c, "`cause` is only for DESTROY events"))
        }
        Some(c) if ["timeout", "userspace", "early_drop", "killed"].contains(&c.value.as_str()) => {
            Some(c.value.clone())
        }
        Some(c) => {
            return Err(ctx.err(
                c,
                format!(
                    "unknown cause {:?}: expected timeout, userspace (a cleanup or conntrack -D), early_drop or killed",
                    c.value
                ),
            ))
        }
    };
    let filter = d
        .filter
        .as_ref()
        .map(|f| f.value.clone())
        .unwrap_or_default();
    if let Some(f) = &d.filter {
        sim_conntrack::Filter::parse(&f.value).map_err(|e| {
            ctx.err(
                f,
                format!("bad conntrack filter: {e}: expected conntrack -E filter options such as -p udp --orig-src 10.244.2.9"),
            )
        })?;
    }
    let t = |x: SimDuration| SimTime::ZERO + x;
    let (from, to) = match (&d.about, d.from, d.to) {
        (Some(a), None, None) => {
            let tol = d.tolerance.map_or(DEFAULT_EVENT_TOLERANCE, |x| x.get());
            let c = a.value.get();
            (t(c.saturating_sub(tol)), t(c + tol).min(t(duration)))
        }
        (None, from, to) if d.tolerance.is_none() => (
            t(from.map_or(SimDuration::ZERO, |x| x.get())),
            t(to.map_or(duration, |x| x.get()).min(duration)),
        ),
        _ => {
            return Err(ctx.err(
                &d.node,
                "give `about` (with an optional `tolerance`) or a `from`/`to` window, not both",
            ))
        }
    };
    if from > to {
        return Err(ctx.err(&d.node, "the window's `from` is after its `to`"));
    }
    if let Some(at) = at {
        if at < to {
            return Err(ctx.err(
                &d.node,
                format!(
                    "the expectation is checked at {} but its window ends at {}: expected `at` at or after the window, or no `at` (the end of the run)",
                    at.hms(),
                    to.hms()
                ),
            ));
        }
    }
    let count = d.count.unwrap_or(Count {
        min: 1,
        max: u64::MAX,
    });
    let what = match &cause {
        Some(c) => format!("{} ({c})", d.event.value),
        None => d.event.value.clone(),
    };
    let name = format!(
        "conntrack -E on {} [{filter}]: {what} between {} and {}",
        d.node.value,
        from.hms(),
        to.hms()
    );
    Ok((
        Check::ConntrackEvent {
            node,
            filter,
            kind,
            cause,
            from,
            to,
            count,
        },
        name,
    ))
}

/// The scenario's `outcome:`, checked as a display name (one line, printable).
pub(super) fn outcome(
    ctx: &Ctx,
    doc: Option<&Spanned<String>>,
) -> Result<Option<String>, ScenarioError> {
    let Some(o) = doc else { return Ok(None) };
    super::names::check_display_name("outcome", &o.value, super::names::DISPLAY_NAME_MAX, true)
        .map_err(|m| ctx.err(o, m))?;
    Ok(Some(o.value.trim().to_string()))
}
