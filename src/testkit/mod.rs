//! # The testkit: nfsim from code
//!
//! Everything a test (yours or ours) needs to use nfsim as a library, under one path, with
//! one dependency: `nfsim`. No `sim_*` crate has to be named.
//!
//! | you want to… | use |
//! |---|---|
//! | push packets through one node's rules and conntrack | [`Node`] |
//! | run a scenario step by step, inject packets and events, read its state | [`Cluster`] |
//! | know the exact probability of each endpoint of a chain | [`Node::selection`], [`Selection`] |
//! | write a property test over Services, endpoints, packets, churn | [`strategies`] (feature `proptest`, on by default) |
//! | plug a stale-conntrack cleanup of your own into a cluster's kube-proxy | [`Reconciler`], [`Cluster::with_cleanup`] |
//! | measure a reconciler under churn while UDP clients keep sending (fixed-port, per-query-port, and a one-way sender: [`harness::Harness::with_one_way`]) | [`harness`] |
//!
//! Times are simulated: [`SimTime`] is an instant since the start, [`SimDuration`] a span.
//! Nothing reads a clock or the OS's randomness: a seed fixes every draw, so a test that
//! passes once passes always.
//!
//! The crate documentation ([`crate`]) walks through all of it in five minutes.
//!
//! ## A reconciler of your own
//!
//! A [`Reconciler`] is what a node's kube-proxy runs after each sync. It takes the instant,
//! the service and endpoint maps before and after the sync ([`CleanupInput`]: two
//! [`ProxyState`]s of [`ServicePortInfo`] and [`EndpointInfo`] keyed by [`ServicePortName`],
//! whose [`Protocol`] says UDP or not), and the node's conntrack table through
//! [`ConntrackOps`] (list and delete by [`CtFilter`]; entries as [`CleanupEntry`] of two
//! [`CtTuple`]s). It returns a [`CleanupReport`]: whether it ran, what it listed, and its
//! [`CleanupDeletion`]s. Everything is here, under `nfsim::testkit`; a [`MemConntrack`] (a
//! plain list of entries) tests one without a cluster.
//!
//! This one deletes, for each UDP service port, the entries to it whose endpoint (the
//! reply's source) is not serving any more, and nothing else; [`harness`] runs it in every
//! node's kube-proxy while a container restarts in place, next to kube-proxy's own:
//!
//! ```
//! use nfsim::testkit::harness::Harness;
//! use nfsim::testkit::strategies::{Churn, ChurnOp};
//! use nfsim::testkit::{
//!     CleanupDeletion, CleanupInput, CleanupReport, ConntrackOps, CtFilter, Protocol,
//!     Reconciler, Release, SimTime,
//! };
//!
//! struct DeleteUnserved;
//!
//! impl Reconciler for DeleteUnserved {
//!     fn name(&self) -> String {
//!         "delete-unserved".into()
//!     }
//!
//!     fn after_sync(
//!         &mut self,
//!         _now: SimTime,
//!         input: &CleanupInput<'_>,
//!         ct: &mut dyn ConntrackOps,
//!     ) -> CleanupReport {
//!         let mut report = CleanupReport { ran: true, ..CleanupReport::default() };
//!         for (name, svc) in &input.after.services {
//!             if svc.protocol != Protocol::UDP {
//!                 continue;
//!             }
//!             let to_service = CtFilter {
//!                 orig_dst: Some(svc.cluster_ip),
//!                 orig_dport: Some(svc.port),
//!                 ..CtFilter::udp()
//!             };
//!             let entries = ct.list(&to_service);
//!             report.listed += entries.len();
//!             let endpoints = input.after.endpoints_of(name);
//!             for e in entries {
//!                 let (ip, port) = (e.reply.src, e.reply.sport);
//!                 if endpoints.iter().any(|ep| ep.serving && ep.ip == ip && ep.port == port) {
//!                     continue;
//!                 }
//!                 let filter = CtFilter::exact(&e);
//!                 let deleted = ct.delete(&filter);
//!                 let reason = format!("endpoint {ip}:{port} of {name} not serving");
//!                 report.deletions.push(CleanupDeletion { filter, deleted, reason });
//!             }
//!         }
//!         report
//!     }
//! }
//!
//! // Two endpoints, a query every 10 s; 30 s in, dns-0's container restarts in place (same
//! // IP, not serving until it is back).
//! let harness = Harness::new(1, 2, Churn { steps: vec![(30, ChurnOp::RestartInPlace(0))] });
//! let ours = harness.run_with(|_node| Box::new(DeleteUnserved)).unwrap();
//! let theirs = harness.run(Release::LATEST).unwrap();
//! // The fixed-port client loses one query, as with kube-proxy's own reconciler...
//! assert_eq!(ours.blackholed("fixed"), 10.0);
//! assert_eq!(ours.blackholed("fixed"), theirs.blackholed("fixed"));
//! // ...and the cleanup cut no working flow and touched no other port.
//! assert!(ours.cleanup.deleted > 0);
//! assert_eq!(ours.cleanup.valid_deleted, 0);
//! assert_eq!(ours.cleanup.unrelated_deleted, 0);
//! ```

mod cluster;
pub mod examples;
#[cfg(feature = "proptest")]
pub mod harness;
mod node;
mod selection;
#[cfg(feature = "proptest")]
pub mod strategies;

pub use cluster::Cluster;
pub use node::{Flow, Node, NodeBuilder};
pub use selection::{Choice, Selection};

pub use crate::cluster::sim::{
    CleanupTally, ClientFigures, Origin, RunResult, Sighting, Simulation, TimelineEvent, What,
};
pub use crate::explain::{BranchOutcome, BranchReport, Dyadic};
pub use crate::kubeproxy::{
    CleanupInput, CleanupReport, ConntrackCleanup, ConntrackOps, CtEntry as CleanupEntry, CtFilter,
    Latest, NoCleanup, ProxyMode, V131, V132, V133,
};
// What a Reconciler takes and returns beyond those: the maps of a sync, their keys and
// protocol, one deletion of a report, an entry's tuples, and a table to unit-test one with.
pub use crate::k8s::Protocol;
pub use crate::kubeproxy::{
    CleanupDeletion, CtTuple, EndpointInfo, MemConntrack, ProxyState, ServicePortInfo,
    ServicePortName,
};
pub use crate::scenario::model::{Action, Release, Scenario, TimedEvent};
pub use crate::scenario::{load_file as load_scenario, load_str as load_scenario_str};
pub use sim_conntrack::{CtEntry, CtEvent, Dir, Filter, Stats};
pub use sim_core::{Packet, SimDuration, SimTime, TcpFlags};
pub use sim_netfilter::netns::{Egress, Fate};
pub use sim_netfilter::Table;

pub use crate::kubeproxy::Reconciler;

/// Why a testkit call failed. Errors caused by input say which input and what was expected.
#[derive(Debug, thiserror::Error)]
pub enum TestkitError {
    /// Rules, addresses or flags of a node (the message names the rules text and line).
    #[error(transparent)]
    Explain(#[from] crate::explain::ExplainError),
    /// A scenario did not load (file, line, column, what was expected).
    #[error(transparent)]
    Scenario(Box<crate::scenario::ScenarioError>),
    /// The simulation stopped.
    #[error(transparent)]
    Sim(#[from] crate::cluster::sim::SimError),
    /// A packet's text form did not parse.
    #[error(transparent)]
    Packet(#[from] sim_core::packet::PacketParseError),
    /// Time went backwards.
    #[error("time {at} is before the current time {now}: simulated time only moves forward")]
    Time {
        /// The instant asked for.
        at: SimTime,
        /// The current instant.
        now: SimTime,
    },
    /// Some other input was wrong.
    #[error("{what}: {message}")]
    Input {
        /// Which input.
        what: String,
        /// What was wrong, and what was expected.
        message: String,
    },
}

impl From<crate::scenario::ScenarioError> for TestkitError {
    fn from(e: crate::scenario::ScenarioError) -> Self {
        TestkitError::Scenario(Box::new(e))
    }
}
