//! Topology words of a scenario: a node's `labels`, its `zone:` shorthand for the
//! `topology.kubernetes.io/zone` label and its `allocatableCPU`; and the Services'
//! `trafficDistribution` / topology annotations checked against the release, since a release
//! that does not know them leaves them without effect (docs/kube-proxy-model.md, "Topology
//! aware routing").

use super::load::Ctx;
use super::model::Release;
use super::schema::NodeDoc;
use super::warnings::ScenarioWarning;
use super::ScenarioError;
use crate::k8s::{self, labels, TrafficDistribution, LABEL_TOPOLOGY_ZONE};
use crate::kubeproxy::TopologyRelease;
use serde::{Deserialize, Deserializer};
use serde_saphyr::Spanned;
use std::collections::BTreeMap;

/// A node's allocatable CPU when the scenario gives none: one core.
pub const DEFAULT_ALLOCATABLE_CPU_MILLI: u64 = 1000;

/// The largest allocatable CPU accepted: a million cores.
pub const MAX_ALLOCATABLE_CPU_MILLI: u64 = 1_000_000_000;

/// `allocatableCPU`: cores as a number (`4`, `2.5`) or a Kubernetes quantity string (`"4"`,
/// `"3500m"`), kept in millicores (`Quantity.MilliValue`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CpuQuantity(pub u64);

fn cpu_from_cores(v: f64) -> Result<CpuQuantity, String> {
    let milli = (v * 1000.0).round();
    if !v.is_finite() || milli < 1.0 || milli > MAX_ALLOCATABLE_CPU_MILLI as f64 {
        return Err(format!(
            "allocatableCPU {v} is out of range: expected from 0.001 (\"1m\") to 1000000 cores"
        ));
    }
    Ok(CpuQuantity(milli as u64))
}

impl<'de> Deserialize<'de> for CpuQuantity {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = CpuQuantity;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(
                    "a CPU quantity: cores such as 4 or 2.5, or millicores such as \"3500m\"",
                )
            }
            fn visit_u64<E: serde::de::Error>(self, v: u64) -> Result<CpuQuantity, E> {
                cpu_from_cores(v as f64).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, v: i64) -> Result<CpuQuantity, E> {
                cpu_from_cores(v as f64).map_err(E::custom)
            }
            fn visit_f64<E: serde::de::Error>(self, v: f64) -> Result<CpuQuantity, E> {
                cpu_from_cores(v).map_err(E::custom)
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<CpuQuantity, E> {
                let bad = || {
                    E::custom(format!(
                        "allocatableCPU {v:?}: expected cores such as \"4\" or \"2.5\", or millicores such as \"3500m\""
                    ))
                };
                let t = v.trim();
                if let Some(m) = t.strip_suffix('m') {
                    let n: u64 = m.parse().map_err(|_| bad())?;
                    return cpu_from_cores(n as f64 / 1000.0).map_err(E::custom);
                }
                let n: f64 = t.parse().map_err(|_| bad())?;
                cpu_from_cores(n).map_err(E::custom)
            }
        }
        d.deserialize_any(V)
    }
}

/// The node's labels, the `zone:` shorthand merged in; checked as the API server checks
/// labels. Both setting the zone to different values is an error.
pub(super) fn node_labels(
    ctx: &Ctx,
    d: &NodeDoc,
) -> Result<BTreeMap<String, String>, ScenarioError> {
    let mut out = d
        .labels
        .as_ref()
        .map(|l| l.value.clone())
        .unwrap_or_default();
    if let Some(l) = &d.labels {
        if let Some(m) = labels::labels_problem(&l.value) {
            return Err(ctx.err(l, format!("node {}: labels: {m}", d.name.value)));
        }
    }
    if let Some(z) = &d.zone {
        if let Some(m) = labels::label_value_problem(&z.value) {
            return Err(ctx.err(z, format!("node {}: zone: {m}", d.name.value)));
        }
        if z.value.is_empty() {
            return Err(ctx.err(
                z,
                format!(
                    "node {}: zone is empty: expected a zone name such as zone-a (leave `zone` out for a node without one)",
                    d.name.value
                ),
            ));
        }
        if let Some(prev) = out.get(LABEL_TOPOLOGY_ZONE).filter(|p| **p != z.value) {
            return Err(ctx.err(
                z,
                format!(
                    "node {}: zone {:?} differs from its label {LABEL_TOPOLOGY_ZONE}: {prev:?}: give the zone once",
                    d.name.value, z.value
                ),
            ));
        }
        out.insert(LABEL_TOPOLOGY_ZONE.to_string(), z.value.clone());
    }
    Ok(out)
}

/// The node's allocatable CPU in millicores.
pub(super) fn node_cpu_milli(d: &NodeDoc) -> u64 {
    d.allocatable_cpu
        .as_ref()
        .map_or(DEFAULT_ALLOCATABLE_CPU_MILLI, |c| c.value.0)
}

/// The Kubernetes minor release whose topology behaviour a `kubeProxy.release` name stands
/// for: the minor of a `v1.N…` name (`v1.31`, `v1.31-fixed`, `v1.32.0`), the newest one for
/// `latest` and `none` (no cleanup says nothing of the version).
pub fn topology_release(r: Release) -> TopologyRelease {
    minor_of_name(&r.to_string()).map_or(TopologyRelease::LATEST, |minor| TopologyRelease { minor })
}

/// `v1.N` at the start of a release name, and N.
fn minor_of_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("v1.")?;
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    digits.parse().ok()
}

/// Services whose `trafficDistribution` the release does not act on: loaded, and warned
/// about with the release that would (the API server of an older release drops or rejects
/// the value, and its controller writes no hints for it).
pub(super) fn check(
    ctx: &Ctx,
    services: &[Spanned<k8s::Service>],
    release: Release,
) -> Vec<ScenarioWarning> {
    let tr = topology_release(release);
    let mut out = Vec::new();
    for s in services {
        let Some(td) = s.value.spec.traffic_distribution else {
            continue;
        };
        if s.value.topology_auto() {
            out.push(ScenarioWarning {
                file: ctx.file().to_string(),
                line: s.referenced.line(),
                column: s.referenced.column(),
                message: format!(
                    "Service {}: trafficDistribution {td} is ignored: its topology annotation is Auto, which the EndpointSlice controller applies instead",
                    s.value.key()
                ),
            });
            continue;
        }
        let why = match td {
            TrafficDistribution::PreferClose if !tr.traffic_distribution() => {
                "needs v1.31 or later (ServiceTrafficDistribution)"
            }
            TrafficDistribution::PreferSameZone | TrafficDistribution::PreferSameNode
                if !tr.prefer_same() =>
            {
                "needs v1.34 or later (PreferSameTrafficDistribution)"
            }
            _ => continue,
        };
        out.push(ScenarioWarning {
            file: ctx.file().to_string(),
            line: s.referenced.line(),
            column: s.referenced.column(),
            message: format!(
                "Service {}: trafficDistribution {td} {why}, and kubeProxy.release is {release}: no hints are set for it",
                s.value.key()
            ),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn release_names_give_their_minor() {
        assert_eq!(minor_of_name("v1.31-fixed"), Some(31));
        assert_eq!(minor_of_name("v1.32.0"), Some(32));
        assert_eq!(minor_of_name("v1.28"), Some(28));
        assert_eq!(minor_of_name("latest"), None);
        assert_eq!(minor_of_name("none"), None);
        for name in ["none", "v1.31", "v1.31-fixed", "v1.32", "v1.33", "latest"] {
            let r = Release::parse(name).unwrap();
            let m = topology_release(r).minor;
            assert!(
                (28..=TopologyRelease::LATEST.minor).contains(&m),
                "{r}: {m}"
            );
        }
    }
}
