//! What loads but is most likely a mistake: the loader returns these with the scenario, and
//! the command line prints each once to stderr before the run. They never reach the timeline
//! or the JSON lines, which depend only on the scenario and the seed.

use super::load::Ctx;
use super::model::PodDef;
use super::schema::EventDoc;
use crate::k8s;
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

/// Something in a scenario file that loads but is probably not what was meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScenarioWarning {
    /// The file.
    pub file: String,
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// What looks wrong, and what follows from it.
    pub message: String,
}

impl fmt::Display for ScenarioWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}:{}:{}: warning: {}",
            self.file, self.line, self.column, self.message
        )
    }
}

fn selects(selector: &BTreeMap<String, String>, namespace: &str, pod: &PodDef) -> bool {
    pod.namespace == namespace && selector.iter().all(|(k, v)| pod.labels.get(k) == Some(v))
}

fn selector_text(selector: &BTreeMap<String, String>) -> String {
    selector
        .iter()
        .map(|(k, v)| format!("{}={}", k.escape_debug(), v.escape_debug()))
        .collect::<Vec<_>>()
        .join(",")
}

/// A warning for every Service whose selector matches none of `pods` (every pod the scenario
/// defines: at the start and by `createPod` events; recreated and scaled pods keep their
/// labels). The EndpointSlice controller then gives it no endpoint, and kube-proxy rejects
/// its traffic. Services defined at the start and by `createService` / `updateService` events
/// are checked; the same Service with the same selector is reported once, at its first
/// definition. Only when slices are derived from pods: slices written in the file are the
/// endpoints whatever the selector says.
pub(super) fn unmatched_selectors(
    ctx: &Ctx,
    services: &[Spanned<k8s::Service>],
    events: &[Spanned<EventDoc>],
    pods: &[PodDef],
    slices_given: bool,
) -> Vec<ScenarioWarning> {
    if slices_given {
        return Vec::new();
    }
    let mut defs: Vec<&Spanned<k8s::Service>> = services.iter().collect();
    for e in events {
        defs.extend(e.value.create_service.iter());
        defs.extend(e.value.update_service.iter());
    }
    // The pods holding each (namespace, label, value): a selector's candidates are the pods
    // with its first label, not every pod (5,000 Services over 60,000 pods).
    let mut by_label: BTreeMap<(&str, &str, &str), Vec<&PodDef>> = BTreeMap::new();
    for p in pods {
        for (k, v) in &p.labels {
            by_label
                .entry((p.namespace.as_str(), k.as_str(), v.as_str()))
                .or_default()
                .push(p);
        }
    }
    let mut seen = BTreeSet::new();
    let mut out = Vec::new();
    for s in defs {
        let svc = &s.value;
        let sel = &svc.spec.selector;
        if sel.is_empty() || svc.spec.type_ == k8s::ServiceType::ExternalName {
            continue;
        }
        let ns = &svc.metadata.namespace;
        let candidates = sel
            .iter()
            .next()
            .and_then(|(k, v)| by_label.get(&(ns.as_str(), k.as_str(), v.as_str())))
            .map_or(&[][..], Vec::as_slice);
        if candidates.iter().any(|p| selects(sel, ns, p)) || !seen.insert((svc.key(), sel.clone()))
        {
            continue;
        }
        let elsewhere: Vec<String> = pods
            .iter()
            .filter(|p| p.namespace != *ns && sel.iter().all(|(k, v)| p.labels.get(k) == Some(v)))
            .map(|p| p.key())
            .take(3)
            .collect();
        let hint = if elsewhere.is_empty() {
            String::new()
        } else {
            format!(
                " ({} in another namespace has them: a selector matches only its Service's namespace)",
                elsewhere.join(", ")
            )
        };
        out.push(ScenarioWarning {
            file: ctx.file().to_string(),
            line: s.referenced.line(),
            column: s.referenced.column(),
            message: format!(
                "Service {} selects no pod: no pod in namespace {ns}, at the start or created by an event, has the labels {}{hint}; the Service has no endpoints and kube-proxy rejects its traffic",
                svc.key(),
                selector_text(sel)
            ),
        });
    }
    out
}
