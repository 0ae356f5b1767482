//! The simulated cluster: nodes, pods, hosts outside the cluster, the applications on them,
//! the control plane, and the driver that runs them all on one event queue.
//!
//! - [`apps`]: servers and clients as sans-IO state machines.
//! - [`kernel`]: the adapter to a node's network namespace (currently a test double).

pub mod apps;
pub mod control;
pub mod kernel;
pub mod proxy;
pub mod sim;
