//! The kube-proxy model (iptables mode): what one node's kube-proxy writes, when, and which
//! conntrack entries it deletes afterwards. Everything here follows kubernetes'
//! `pkg/proxy` (the function names in the docs are kube-proxy's), on simulated time.
//!
//! Reading order:
//!
//! 1. [`names`]: `ServicePortName` (`ns/name:port`) and the chain names derived from it,
//!    `KUBE-SVC-`/`KUBE-SVL-`/`KUBE-EXT-`/`KUBE-FW-`/`KUBE-SEP-` + `base32(sha256(…))[:16]`.
//! 2. [`model`]: the service port map and endpoints map kube-proxy keeps
//!    ([`ProxyState::build`] from [`crate::k8s`] objects), and [`categorize_endpoints`]: ready
//!    endpoints, else serving-and-terminating ones, for Cluster and Local traffic policy.
//!    Endpoints are sorted by their `ip:port` string, which decides who gets which probability.
//!    [`topology`]: which endpoints one node chooses from the EndpointSlice hints
//!    (`forZones`/`forNodes`), release by release, so nodes render different sets.
//! 3. [`render`]: [`render_sync`] produces the `iptables-restore --noflush` payload of a full
//!    or partial sync exactly as kube-proxy writes it (filter then nat, `:CHAIN - [0:0]`
//!    lines, rules in its order, `-X` of stale chains, `COMMIT`), and [`jump_rules`] the rules
//!    it installs in built-in chains with `iptables -I` on full syncs. kube-proxy iterates
//!    services in Go map order; nfsim sorts them by `ServicePortName`.
//! 4. [`runner`]: [`SyncRunner`], when syncs happen (`BoundedFrequencyRunner`: minSyncPeriod
//!    1 s with a burst of 2, hourly full resync, retry after syncPeriod), sans-IO:
//!    `on_change(now)`, `poll_timeout()`, `on_timeout(now) -> Option<SyncKind>`.
//! 5. [`cleanup`]: the stale-UDP-conntrack cleanup of each release behind
//!    [`ConntrackCleanup`] ([`NoCleanup`], [`V131`], [`V132`], [`V133`], [`Latest`]), acting on
//!    a table through the two-call [`ConntrackOps`] ([`MemConntrack`] in memory,
//!    [`SimConntrackOps`] on sim-conntrack's table, in [`ct_adapter`]).
//!    [`releases`] says which of them each `kubeProxy.release` name (`v1.28` … `v1.37`,
//!    `latest`) ships.
//! 6. [`proxier`]: [`KubeProxy`], one node's kube-proxy putting it together: feed it objects,
//!    poll it, apply the [`SyncOutput`] it returns to the node, report back with
//!    [`KubeProxy::complete_sync`] to run the cleanup.
//!
//! IPv6 and dual-stack: kube-proxy runs one proxier per family (`NewDualStackProxier`, the
//! metaproxier handing every object to both). Here a [`KubeProxy`] is one family's proxier
//! ([`ProxierConfig::family`]); a dual-stack node runs two, each building its maps from
//! the objects of its family ([`ProxyState::build_for`]), writing `iptables` or `ip6tables`
//! ([`render`]) and `ip` or `ip6 kube-proxy` ([`nftables`]). [`nodeport`] is
//! `--nodeport-addresses` per family.
//!
//! A minimal run:
//!
//! ```
//! use nfsim::k8s::{parse_objects};
//! use nfsim::kubeproxy::{KubeProxy, MemConntrack, ProxierConfig, SyncTiming, V132};
//! use sim_core::SimTime;
//!
//! let cfg = ProxierConfig::new("node-a", "172.18.0.2".parse().unwrap(), "10.244.0.0/16".parse().unwrap());
//! let mut kp = KubeProxy::new(cfg, SyncTiming::default(), Box::new(V132::default()), SimTime::ZERO);
//! for obj in parse_objects(r#"
//! kind: Service
//! metadata: {name: kube-dns, namespace: kube-system}
//! spec: {clusterIP: 10.96.0.10, ports: [{name: dns, port: 53, protocol: UDP}]}
//! ---
//! kind: EndpointSlice
//! metadata: {name: kube-dns-1, namespace: kube-system, labels: {kubernetes.io/service-name: kube-dns}}
//! addressType: IPv4
//! endpoints: [{addresses: [10.244.1.7]}]
//! ports: [{name: dns, port: 53, protocol: UDP}]
//! "#).unwrap() {
//!     kp.upsert(SimTime::ZERO, obj);
//! }
//! let now = kp.poll_timeout().unwrap();
//! let sync = kp.on_timeout(now).unwrap();
//! assert!(sync.restore.contains("-j KUBE-SVC-TCOU7JCQXEZGVUNU"));
//! // ... apply sync.jump_rules and sync.restore to the node, then:
//! let report = kp.complete_sync(now, Ok(()), &mut MemConntrack::default());
//! assert_eq!(report.deleted(), 0);
//! ```

pub mod cleanup;
pub mod ct_adapter;
pub mod external;
pub mod ipvs;
pub mod model;
pub mod names;
pub mod nftables;
pub mod nodeport;
pub mod proxier;
pub mod releases;
pub mod render;
pub mod runner;
pub mod sync_cost;
pub mod topology;

pub use cleanup::{
    CleanupDeletion, CleanupInput, CleanupReport, ConntrackCleanup, ConntrackOps, CtEntry,
    CtFilter, CtTuple, Latest, MemConntrack, NoCleanup, ReconcileTrigger, Reconciler, V128, V131,
    V132, V133,
};
pub use ct_adapter::SimConntrackOps;
pub use external::ExternalReconciler;
pub use model::{categorize_endpoints, Categorized, EndpointInfo, ProxyState, ServicePortInfo};
pub use names::ServicePortName;
pub use nodeport::NodePortAddresses;
pub use proxier::{IpvsSyncOutput, KubeProxy, SyncOutput};
pub use render::{
    iptables_command, jump_rules, jump_rules_for, render_sync, JumpRule, LocalDetector,
    ProxierConfig, ProxyMode, RenderedSync, SyncScope, Table,
};
pub use runner::{SyncKind, SyncRunner, SyncTiming};
pub use topology::{HintsUse, NodeTopology, TopologyHints, TopologyMode, TopologyRelease};
