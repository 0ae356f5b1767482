//! The kube-proxy model (iptables mode).
//!
//! (Module guide: see the end of this work; filled in below.)

pub mod cleanup;
pub mod model;
pub mod names;
pub mod proxier;
pub mod render;
pub mod runner;

pub use cleanup::{
    CleanupInput, CleanupReport, ConntrackCleanup, ConntrackOps, CtEntry, CtFilter, CtTuple,
    Latest, MemConntrack, NoCleanup, ReconcileTrigger, V131, V132, V133,
};
pub use model::{categorize_endpoints, Categorized, EndpointInfo, ProxyState, ServicePortInfo};
pub use names::ServicePortName;
pub use proxier::{KubeProxy, SyncOutput};
pub use render::{
    jump_rules, render_sync, JumpRule, LocalDetector, ProxierConfig, RenderedSync, SyncScope, Table,
};
pub use runner::{SyncKind, SyncRunner, SyncTiming};
