//! Scenario files: the YAML schema, loading with file/line/column errors, and the checked
//! model the simulation runs.
//!
//! - [`schema`]: the file as written (serde structures with spans).
//! - [`load`]: parsing and checking, [`ScenarioError`].
//! - [`model`]: the checked [`Scenario`].
//! - [`yaml`]: the YAML reader's limits and its errors in the scenario's words.
//! - [`warnings`]: what loads but is probably a mistake (a Service selecting no pod).
//! - [`names`]: Kubernetes' rules for the names of pods, nodes, namespaces and Services.
//! - [`tcp_apps`]: the TCP application fields (`halfClose`, `connection:`), checked.
//! - [`udp_apps`]: how a UDP client holds its socket (`dig:`, `pause`, `reopen`), checked.
//! - [`ipam`]: the pod and cluster IPs a scenario leaves out, allocated as host-local IPAM
//!   and kube-apiserver do.
//! - `endpoint_of`: events that name a pod by the endpoint a client's entry points to.
//! - `expect_words`: the `conntrackStats` and `conntrackEvent` expectation kinds.
//! - [`topology`]: nodes' zones and CPU, and the topology words of Services checked against
//!   the release.
//! - [`load_balancer`]: the cloud load balancer's health checks (`cloudLoadBalancer:`).
//! - [`events`]: the events that change objects, kube-proxy, conntrack tables and nodes over
//!   time, each checked against what exists at its instant.

mod dns_apps;
mod endpoint_of;
pub mod events;
mod expect_words;
mod families;
pub mod ipam;
pub mod load;
pub mod load_balancer;
pub mod model;
pub mod names;
mod pcap_client;
pub mod presets;
pub mod schema;
pub mod tcp_apps;
pub mod topology;
pub mod udp_apps;
pub mod warnings;
pub mod yaml;

pub use load::{load_file, load_str, ScenarioError};
pub use model::{BridgeCni, CalicoCni, Cni, IpipMode, Scenario};
pub use warnings::ScenarioWarning;
