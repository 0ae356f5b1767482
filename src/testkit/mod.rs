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
