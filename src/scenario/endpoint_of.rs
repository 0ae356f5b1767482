//! Events that name a pod by what a client sees: `deletePod: {endpointOf: CLIENT}` and
//! `oomKill: {endpointOf: CLIENT}` act on the pod the client's conntrack entry points to at
//! the event's instant (on the client's node), so a seed sweep hits the pod the client
//! actually uses every time. The loader checks the client here; the run resolves the pod
//! (`cluster::sim::pods`).

use super::load::{Ctx, ScenarioError};
use super::model::{PodAction, PodBehind};
use super::schema::{DeletePodDoc, EventDoc, S};
use std::collections::BTreeMap;

fn client_of(
    ctx: &Ctx,
    client_index: &BTreeMap<String, usize>,
    c: &S<String>,
) -> Result<usize, ScenarioError> {
    client_index.get(&c.value).copied().ok_or_else(|| {
        ctx.err(
            c,
            format!(
                "unknown client {:?}: expected one of {}",
                c.value,
                if client_index.is_empty() {
                    "the clients under `clients` (there are none)".to_string()
                } else {
                    client_index.keys().cloned().collect::<Vec<_>>().join(", ")
                }
            ),
        )
    })
}

/// The pod an event names with `pod`, when it does not give `endpointOf`.
pub(super) fn named<'a>(
    ctx: &Ctx,
    e: &S<EventDoc>,
    pod: &'a Option<S<String>>,
) -> Result<&'a S<String>, ScenarioError> {
    pod.as_ref().ok_or_else(|| {
        ctx.err(
            e,
            "the event needs `pod` (a pod's name) or `endpointOf` (a client's name)",
        )
    })
}

/// `pod` or `endpointOf` (exactly one): the pod's name, or what to resolve at run time.
pub(super) fn pod_or_client<'a>(
    ctx: &Ctx,
    e: &S<EventDoc>,
    pod: &'a Option<S<String>>,
    endpoint_of: &Option<S<String>>,
    client_index: &BTreeMap<String, usize>,
    then: PodAction,
) -> Result<Result<&'a S<String>, Box<PodBehind>>, ScenarioError> {
    match (pod, endpoint_of) {
        (Some(p), Some(_)) => Err(ctx.err(
            p,
            format!("give `pod` or `endpointOf`, not both, in `{}`", then.word()),
        )),
        (None, Some(c)) => Ok(Err(Box::new(PodBehind {
            client: client_of(ctx, client_index, c)?,
            client_name: c.value.clone(),
            line: c.referenced.line(),
            column: c.referenced.column(),
            then,
        }))),
        (p, None) => named(ctx, e, p).map(Ok),
    }
}

/// A `deletePod` with `endpointOf`, checked (`None` when it names its pod).
pub(super) fn behind(
    ctx: &Ctx,
    e: &S<EventDoc>,
    dp: &DeletePodDoc,
    client_index: &BTreeMap<String, usize>,
) -> Result<Option<Box<PodBehind>>, ScenarioError> {
    let then = PodAction::Delete {
        grace_period: dp.grace_period.map(|d| d.get()),
    };
    match pod_or_client(ctx, e, &dp.pod, &dp.endpoint_of, client_index, then)? {
        Ok(_) => Ok(None),
        Err(b) => {
            if dp.recreate.is_some() {
                return Err(ctx.err(
                    e,
                    "`recreate` needs the pod named with `pod`: with `endpointOf` which pod it recreates is only known at run time",
                ));
            }
            Ok(Some(b))
        }
    }
}
