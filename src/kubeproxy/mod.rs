//! The kube-proxy model (iptables mode).
//!
//! (Module guide: see the end of this work; filled in below.)

pub mod cleanup;
pub mod model;
pub mod names;
pub mod render;
pub mod runner;

pub use model::{categorize_endpoints, Categorized, EndpointInfo, ProxyState, ServicePortInfo};
pub use names::ServicePortName;
pub use render::{
    jump_rules, render_sync, JumpRule, LocalDetector, ProxierConfig, RenderedSync, SyncScope, Table,
};
pub use runner::{SyncKind, SyncRunner, SyncTiming};
