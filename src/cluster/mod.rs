//! The simulated cluster: nodes, pods, hosts outside the cluster, the applications on them,
//! the control plane, and the driver that runs them all on one event queue.
//!
//! - [`apps`]: servers and clients as sans-IO state machines.
//! - [`dns`] (the crate's `dns`, re-exported): DNS messages, zones, `resolv.conf` and the glibc
//!   and musl stub resolvers.
//! - [`control`]: pod lifecycle and the EndpointSlice controller.
//! - [`topology`]: the controller's zone and hints of each endpoint (`topology-mode: Auto`,
//!   `trafficDistribution`).
//! - [`ping`]: a ping client (ICMP echo on a ping socket).
//! - [`querylog`]: a client's query records, kept only while they can still change.
//! - [`ports`]: the source ports of TCP `connect()`, as Linux picks them.
//! - [`proxy`]: kube-proxy on the nodes, applied to their network namespaces.
//! - [`tcp_server`]: the TCP server (half-close, process exit, orphans).
//! - [`tcp_session`]: a TCP client keeping its connections (keep-alive, parallel, pauses).
//! - [`sim`]: the driver: each node a `sim_netfilter::netns::Netns`, the network between
//!   them, expectations and outputs.

pub mod apps;
pub mod control;
pub mod flannel;
pub use crate::dns;
pub mod ping;
pub mod ports;
pub mod proxy;
pub mod querylog;
pub mod sim;
pub mod tcp_server;
pub mod tcp_session;
pub mod topology;
