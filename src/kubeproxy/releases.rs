//! Which stale-UDP conntrack cleanup each kube-proxy release ships (docs/kube-proxy-model.md
//! §6, "Releases"): the table behind a scenario's `kubeProxy.release`.
//!
//! A Kubernetes minor version (`v1.28` … `v1.37`) stands for the cleanup its *latest patch
//! release* ships, backports included; a few patch-precise names (`v1.31.0`, `v1.32.0`) keep
//! the cleanup as first released, before a fix was backported. `latest` is the newest code
//! nfsim models (master after #141371, first released in v1.38.0-alpha.1). Each row names
//! the upstream pull requests that make it differ from the row before.
//!
//! | name | [`Cleanup`] | what it ships |
//! |---|---|---|
//! | `none` | [`Cleanup::None`] | no cleanup |
//! | `v1.28` | [`Cleanup::EventReady`] | event-based; an endpoint that was ready and is gone or no longer ready is stale (#106163's `IsReady` comparison, before #119394) |
//! | `v1.29`, `v1.30`, `v1.31`, `v1.31-fixed`, `v1.31+127780` | [`Cleanup::EventServing`] | event-based; serving → gone or not serving (#119394 keyed it on serving but dropped the `IsServing` comparison; #127780, backported as #127808 / #127807 / #127806, restores it) |
//! | `v1.31.0` | [`Cleanup::EventPresence`] | event-based, before #127806 (in v1.31.2): only endpoints that disappear |
//! | `v1.32.0` | [`Cleanup::Reconciler127318`] | the reconciler of #127318 as released: frontends by service IP only, services without endpoints processed with an empty set |
//! | `v1.32`, `v1.33` | [`Cleanup::Reconciler130484`] | frontends by IP *and* port, services without serving endpoints skipped (#130484, in v1.33.0 and backported to v1.32 as #130505); endpoints by IP |
//! | `v1.34`, `v1.35`, `v1.36` | [`Cleanup::Reconciler130542`] | endpoints by IP *and* port (#130542, in v1.34.0-alpha.2) |
//! | `v1.37` | [`Cleanup::Reconciler139629`] | services without serving endpoints processed with an empty set again (#139629, in v1.37.0-alpha.2) |
//! | `latest` | [`Cleanup::Latest`] | deleted UDP services cleaned as well (#141371, in v1.38.0-alpha.1) |

use std::fmt;

/// A cleanup behaviour nfsim models, named after the pull request that introduced it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Cleanup {
    /// No cleanup at all.
    None,
    /// Event-based, comparing `IsReady()` (v1.28; #106163).
    EventReady,
    /// Event-based, only endpoints that disappear (v1.29.0 until the #127780 backports).
    EventPresence,
    /// Event-based, comparing `IsServing()` (#119394 with #127780).
    EventServing,
    /// The reconciler of #127318, keyed by service IP.
    Reconciler127318,
    /// #127318 with #130484: keyed by service IP and port, services without serving endpoints
    /// skipped, endpoints by IP.
    Reconciler130484,
    /// With #130542: endpoints by IP and port.
    Reconciler130542,
    /// With #139629: services without serving endpoints processed with an empty set.
    Reconciler139629,
    /// With #141371: deleted UDP services processed with an empty set.
    Latest,
}

/// A `kubeProxy.release` name and the cleanup it selects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Release {
    name: &'static str,
    cleanup: Cleanup,
}

/// One row of the table: name, cleanup, and what the name stands for.
struct Row {
    name: &'static str,
    cleanup: Cleanup,
    stands_for: &'static str,
}

const fn row(name: &'static str, cleanup: Cleanup, stands_for: &'static str) -> Row {
    Row {
        name,
        cleanup,
        stands_for,
    }
}

/// Every accepted name, in release order (the module documentation's table).
const ROWS: [Row; 16] = [
    row("none", Cleanup::None, "no conntrack cleanup"),
    row(
        "v1.28",
        Cleanup::EventReady,
        "the latest v1.28 patch: event-based cleanup comparing readiness (#106163, before #119394)",
    ),
    row(
        "v1.29",
        Cleanup::EventServing,
        "the latest v1.29 patch: event-based cleanup with #127808 (#127780's backport)",
    ),
    row(
        "v1.30",
        Cleanup::EventServing,
        "the latest v1.30 patch: event-based cleanup with #127807 (#127780's backport)",
    ),
    row(
        "v1.31.0",
        Cleanup::EventPresence,
        "v1.31.0 and v1.31.1: event-based cleanup before #127806, only endpoints that disappear",
    ),
    row(
        "v1.31",
        Cleanup::EventServing,
        "the latest v1.31 patch: event-based cleanup with #127806 (in v1.31.2)",
    ),
    row(
        "v1.31-fixed",
        Cleanup::EventServing,
        "the latest v1.31 patch (event-based cleanup with #127780)",
    ),
    row(
        "v1.31+127780",
        Cleanup::EventServing,
        "the latest v1.31 patch (event-based cleanup with #127780)",
    ),
    row(
        "v1.32.0",
        Cleanup::Reconciler127318,
        "v1.32.0: the reconciler of #127318, keyed by service IP",
    ),
    row(
        "v1.32",
        Cleanup::Reconciler130484,
        "the latest v1.32 patch: the reconciler with #130505 (#130484's backport)",
    ),
    row(
        "v1.33",
        Cleanup::Reconciler130484,
        "the latest v1.33 patch: the reconciler with #130484",
    ),
    row(
        "v1.34",
        Cleanup::Reconciler130542,
        "the latest v1.34 patch: the reconciler with #130484 and #130542",
    ),
    row(
        "v1.35",
        Cleanup::Reconciler130542,
        "the latest v1.35 patch: the reconciler with #130484 and #130542",
    ),
    row(
        "v1.36",
        Cleanup::Reconciler130542,
        "the latest v1.36 patch: the reconciler with #130484 and #130542",
    ),
    row(
        "v1.37",
        Cleanup::Reconciler139629,
        "the latest v1.37 patch: the reconciler with #139629",
    ),
    row(
        "latest",
        Cleanup::Latest,
        "master after #141371, first released in v1.38.0-alpha.1",
    ),
];

impl Release {
    /// No cleanup.
    pub const NONE: Release = Release::of(0);
    /// The newest code nfsim models (the default).
    pub const LATEST: Release = Release::of(15);

    const fn of(i: usize) -> Release {
        Release {
            name: ROWS[i].name,
            cleanup: ROWS[i].cleanup,
        }
    }

    /// Every accepted name, in release order.
    pub fn all() -> impl Iterator<Item = Release> {
        (0..ROWS.len()).map(Release::of)
    }

    /// The release a scenario names, if nfsim knows it.
    pub fn parse(s: &str) -> Option<Release> {
        Release::all().find(|r| r.name == s)
    }

    /// The name as scenario files write it.
    pub fn name(self) -> &'static str {
        self.name
    }

    /// The cleanup it ships.
    pub fn cleanup(self) -> Cleanup {
        self.cleanup
    }

    /// What the name stands for, with the pull requests (docs/kube-proxy-model.md §6).
    pub fn stands_for(self) -> &'static str {
        ROWS.iter()
            .find(|r| r.name == self.name)
            .map_or("", |r| r.stands_for)
    }

    /// The accepted names, for error messages: `none, v1.28, …, latest`.
    pub fn expected() -> String {
        Release::all()
            .map(|r| r.name)
            .collect::<Vec<_>>()
            .join(", ")
    }
}

impl fmt::Display for Release {
    /// The name; `latest` says which code it stands for (`latest (master after #141371 …)`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.cleanup == Cleanup::Latest {
            write!(f, "{} ({})", self.name, self.stands_for())
        } else {
            f.write_str(self.name)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kubernetes_minor_from_1_28_to_1_37_is_a_release() {
        for minor in 28..=37 {
            let name = format!("v1.{minor}");
            let r = Release::parse(&name).unwrap_or_else(|| panic!("{name} unknown"));
            assert!(r.stands_for().contains(&format!("v1.{minor}")), "{name}");
        }
        assert_eq!(Release::parse("v1.38"), None);
        assert_eq!(Release::parse("v1.31.1"), None);
    }

    #[test]
    fn each_minor_maps_to_its_latest_patch() {
        let c = |s| Release::parse(s).unwrap().cleanup();
        assert_eq!(c("v1.28"), Cleanup::EventReady);
        assert_eq!(c("v1.31"), Cleanup::EventServing);
        assert_eq!(c("v1.31.0"), Cleanup::EventPresence);
        assert_eq!(c("v1.32"), Cleanup::Reconciler130484);
        assert_eq!(c("v1.32.0"), Cleanup::Reconciler127318);
        assert_eq!(c("v1.36"), Cleanup::Reconciler130542);
        assert_eq!(c("v1.37"), Cleanup::Reconciler139629);
        assert_eq!(Release::LATEST.cleanup(), Cleanup::Latest);
        assert_eq!(Release::NONE.name(), "none");
        assert_eq!(
            Release::LATEST.to_string(),
            "latest (master after #141371, first released in v1.38.0-alpha.1)"
        );
    }
}
