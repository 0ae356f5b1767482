//! # nfsim
//!
//! A deterministic userspace simulator of Linux netfilter and conntrack for Kubernetes Service
//! traffic: kube-proxy's rules, the kernel's NAT and connection tracking, and a simulated cluster
//! around them, on simulated time.
//!
//! Use it from the command line (`nfsim run`, `nfsim trace`, `nfsim replay`: see the README), or
//! from code through **[`testkit`]**, which this page walks through in five minutes. A crate that
//! depends on `nfsim` alone has all of it: the testkit re-exports the types it takes and returns,
//! and proptest for its strategies.
//!
//! ## One node
//!
//! A [`Node`](testkit::Node) is built from iptables-save text
//! ([`Node::from_rules`](testkit::Node::from_rules)) or from Service and EndpointSlice YAML that
//! kube-proxy renders for it ([`Node::from_objects`](testkit::Node::from_objects)); the builder
//! sets its address, pod CIDR, sysctls and seed. [`Node::flow`](testkit::Node::flow) sends one
//! packet and says where it went:
//!
//! ```
//! use nfsim::testkit::{Node, SimTime};
//!
//! let mut node = Node::from_objects(nfsim::testkit::examples::KUBE_DNS_TWO_ENDPOINTS).unwrap();
//! let q = node.flow(SimTime::ZERO, "udp 10.244.0.9:40000 -> 10.96.0.10:53").unwrap();
//! let (service, endpoint) = q.dnat().unwrap();
//! assert_eq!(service.to_string(), "10.96.0.10:53");
//! // Every later packet of the flow follows the entry, not the rules.
//! let again = node.flow(SimTime::from_secs(1), "udp 10.244.0.9:40000 -> 10.96.0.10:53").unwrap();
//! assert_eq!(again.endpoint(), Some(endpoint));
//! // conntrack -L, with the tool's filters and its exact text.
//! let text = node.conntrack_text("-p udp --orig-port-src 40000").unwrap();
//! // Refreshed to 30 s by the second packet; still no reply seen.
//! assert!(text.starts_with("udp      17 30 src=10.244.0.9 dst=10.96.0.10 sport=40000 dport=53 [UNREPLIED]"));
//! // iptables-save, as the real tool prints it.
//! assert!(node.rules().contains("-A KUBE-SERVICES -d 10.96.0.10/32 -p udp"));
//! ```
//!
//! ## Exact selection
//!
//! kube-proxy spreads new flows with `-m statistic --mode random --probability 1/(n−i)` rules; the
//! kernel keeps each as an integer over 2^31. [`Node::selection`](testkit::Node::selection) gives
//! the exact result, the same figures `nfsim trace --all-branches` prints:
//!
//! ```
//! use nfsim::testkit::{Node, examples};
//!
//! let node = Node::from_objects(&examples::service_with_endpoints("web", "10.96.0.20", 80, "TCP", 3)).unwrap();
//! let svc = examples::svc_chain("default/web:p80", "tcp");
//! let sel = node.selection(&svc).unwrap();
//! assert_eq!(sel.choices.len(), 3);
//! assert_eq!(sel.choices[0].probability.fraction(), "715827883/2147483648");
//! for p in sel.probabilities() {
//!     assert!((p - 1.0 / 3.0).abs() < 1e-9);
//! }
//! assert!(sel.sums_to_one());
//! ```
//!
//! ## A cluster
//!
//! A [`Cluster`](testkit::Cluster) is a scenario (a file from `scenarios/`, a string, or a
//! [`Scenario`](testkit::Scenario) built in code) that you run as far as you like, look into, and
//! change:
//!
//! ```
//! use nfsim::testkit::{Action, Cluster, SimTime};
//!
//! let mut c = Cluster::from_file("scenarios/stale-dns-udp-v1.33.yaml").unwrap();
//! c.run_until(SimTime::from_secs(299)).unwrap();
//! let before = c.conntrack("node-2", "-p udp --orig-port-src 40000").unwrap();
//! // The scenario kills coredns-a at 5m; add a readiness failure of coredns-b at 20m.
//! c.apply(SimTime::from_secs(1200), Action::Readiness { pod: "kube-system/coredns-b".into(), ready: false }).unwrap();
//! let result = c.finish().unwrap();
//! assert_eq!(before.len(), 1);
//! assert!(!result.timeline.is_empty());
//! ```
//!
//! ## Laws
//!
//! With [`strategies`](testkit::strategies), a law is a few lines of proptest (see `tests/laws.rs`
//! for the ones nfsim proves about itself: uniform selection, pinning, reply symmetry, unique reply
//! tuples, determinism):
//!
//! ```
//! use nfsim::testkit::strategies::{self, proptest};
//! use nfsim::testkit::Node;
//! use proptest::test_runner::{Config, TestRunner};
//!
//! let mut runner = TestRunner::new(Config { cases: 8, ..Config::default() });
//! runner.run(&strategies::service(1..=5), |svc| {
//!     let node = Node::from_objects(&svc.yaml()).unwrap();
//!     let sel = node.selection(&svc.chain()).unwrap();
//!     assert_eq!(sel.choices.len(), svc.endpoints.len());
//!     assert!(sel.sums_to_one());
//!     Ok(())
//! }).unwrap();
//! ```
//!
//! ## Where things are
//!
//! - [`testkit`]: the front door for code (above).
//! - [`k8s`]: the Kubernetes objects kube-proxy reads (Services, EndpointSlices).
//! - [`kubeproxy`]: kube-proxy's iptables rendering, sync timing and conntrack cleanup.
//! - [`dns`]: DNS messages, zones, `resolv.conf`, and the glibc and musl stub resolvers.
//! - [`cluster`]: nodes, pods, hosts, applications, and the simulation driver.
//! - [`scenario`]: scenario files, expectations, and the outputs of a run.
//! - [`explain`]: one packet through a node's hooks, rule by rule, with every `statistic` branch.
//! - [`sweep`]: one scenario across many seeds and `--set` combinations: pass rates with
//!   confidence intervals, distributions of the clients' figures, shards and their merge.
//! - [`report`]: a run as one self-contained HTML page (`nfsim run --report`).
//! - [`serve`]: the testkit as a line-delimited JSON session (`nfsim serve`), for Go, Python
//!   and any other language's tests (`docs/serve-protocol.md`).
//!
//! The modules stand on each other in one order, lowest first: `k8s`, `kubeproxy` and `dns` (DNS
//! messages, zones, `resolv.conf`, the glibc and musl stub resolvers), `scenario`
//! (what to run: the model owns its types), `cluster` (how it runs), then `explain`, `sweep`,
//! `report`, `testkit`, and `serve` (the testkit over JSON) on top. A module uses only those below it; `tests/layering.rs`
//! reads every `crate::` and `super::` path and fails on one that points up.
//!
//! Below them, the workspace's libraries: `sim-core` (packets, simulated time, seeded randomness),
//! `sim-conntrack` (the connection tracking table) and `sim-netfilter` (rules, hooks, NAT, a
//! network namespace). The facts they implement are in the repository's `docs/kernel-model.md` and
//! `docs/kube-proxy-model.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod cluster;
pub mod dns;
pub mod doctor;
pub mod explain;
pub mod k8s;
pub mod kubeproxy;
pub mod report;
mod rules_error;
pub mod scenario;
pub mod serve;
pub mod sweep;
pub mod testkit;
