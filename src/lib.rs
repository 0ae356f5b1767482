//! # nfsim
//!
//! The simulated cluster, the kube-proxy model, scenario files and the command line, on top of
//! `sim-core`, `sim-conntrack` and `sim-netfilter`.
//!
//! - [`k8s`]: the Kubernetes objects kube-proxy reads (Services, EndpointSlices).
//! - [`kubeproxy`]: kube-proxy's iptables rendering, sync timing and conntrack cleanup.
//! - [`cluster`]: nodes, pods, hosts, applications, and the simulation driver.
//! - [`scenario`]: scenario files, expectations, and the outputs of a run.
//! - [`explain`]: one packet through a node's hooks, rule by rule, with every `statistic` branch.
//! - [`sweep`]: one scenario across many seeds and `--set` combinations: pass rates with
//!   confidence intervals, distributions of the clients' figures, shards and their merge.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cluster;
pub mod explain;
pub mod k8s;
pub mod kubeproxy;
pub mod scenario;
pub mod sweep;
