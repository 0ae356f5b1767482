//! [`Cluster`]: a whole scenario, driven step by step from code.

use super::TestkitError;
use crate::cluster::sim::{
    Origin, RunOptions, RunResult, Sighting, Simulation, SimulationBuilder, TimelineEvent,
};
use crate::kubeproxy::ConntrackCleanup;
use crate::scenario::model::{Action, Scenario, TimedEvent};
use sim_conntrack::{CtEntry, Filter, Stats};
use sim_core::{Packet, SimTime};

/// A scenario's cluster, running on simulated time: nodes with kube-proxy, pods, hosts,
/// clients, the scenario's events and expectations, plus whatever the test adds while it
/// runs. It is the same driver `nfsim run` uses ([`Simulation`]), with the timeline and
/// conntrack events recorded.
///
/// ```
/// use nfsim::testkit::{Cluster, Origin, SimTime};
///
/// let mut c = Cluster::from_file("scenarios/stale-dns-udp.yaml").unwrap();
/// c.run_until(SimTime::from_secs(60)).unwrap();
/// // The sidecar's fixed-port entry exists on its node.
/// let e = c.conntrack("node-2", "-p udp --orig-port-src 40000").unwrap();
/// assert_eq!(e.len(), 1);
/// // Send one more query from the app pod, on another port, and see who answers.
/// let id = c
///     .send(&Origin::Pod("default/app".into()), "udp 10.244.2.9:41000 -> 10.96.0.10:53")
///     .unwrap();
/// c.run_until(SimTime::from_secs(61)).unwrap();
/// let seen = c.sightings(id);
/// assert!(seen.iter().any(|s| s.machine.starts_with("pod kube-system/coredns-")));
/// assert!(seen.iter().any(|s| s.machine == "pod default/app"));   // the answer came back
/// ```
pub struct Cluster {
    sim: Simulation,
}

impl Cluster {
    /// The scenario file at `path`, loaded and checked as `nfsim run` does.
    pub fn from_file(path: &str) -> Result<Cluster, TestkitError> {
        Cluster::from_scenario(crate::scenario::load_file(path)?)
    }

    /// A scenario given as text; `name` stands for the file in messages.
    pub fn from_yaml(name: &str, yaml: &str) -> Result<Cluster, TestkitError> {
        Cluster::from_scenario(crate::scenario::load_str(name, yaml)?)
    }

    /// A scenario built (or changed) in code.
    pub fn from_scenario(sc: Scenario) -> Result<Cluster, TestkitError> {
        Cluster::from_builder(Simulation::builder(sc))
    }

    /// A scenario with a cleanup strategy of your own in every node's kube-proxy (see
    /// [`SimulationBuilder::cleanup`]).
    pub fn with_cleanup(
        sc: Scenario,
        make: impl FnMut(&str) -> Box<dyn ConntrackCleanup> + 'static,
    ) -> Result<Cluster, TestkitError> {
        Cluster::from_builder(Simulation::builder(sc).cleanup(make))
    }

    /// From a builder you configured; the timeline, conntrack events and every query are
    /// recorded.
    pub fn from_builder(b: SimulationBuilder) -> Result<Cluster, TestkitError> {
        let sim = b
            .keep_queries(true)
            .options(RunOptions {
                record_timeline: true,
                conntrack_events: true,
                ..RunOptions::default()
            })
            .build()?;
        Ok(Cluster { sim })
    }

    /// The simulated time now.
    pub fn now(&self) -> SimTime {
        self.sim.now()
    }

    /// Runs every event up to and including `t` (at most to the scenario's `duration`).
    pub fn run_until(&mut self, t: SimTime) -> Result<(), TestkitError> {
        Ok(self.sim.run_until(t)?)
    }

    /// Adds an event, as a scenario's `events:` entry would: `at` must not be in the past.
    /// It takes effect when the run reaches `at`.
    pub fn apply(&mut self, at: SimTime, action: Action) -> Result<(), TestkitError> {
        if at < self.now() {
            return Err(TestkitError::Time {
                at,
                now: self.now(),
            });
        }
        self.sim.apply(TimedEvent { at, action });
        Ok(())
    }

    /// Sends a packet (written as `nfsim trace --packet` takes it) from `origin` now; returns
    /// its number for [`Cluster::sightings`]. Run the cluster on to let it travel.
    pub fn send(&mut self, origin: &Origin, packet: &str) -> Result<u32, TestkitError> {
        let p: Packet = packet.parse()?;
        self.send_packet(origin, p)
    }

    /// [`Cluster::send`] of a [`Packet`].
    pub fn send_packet(&mut self, origin: &Origin, packet: Packet) -> Result<u32, TestkitError> {
        Ok(self.sim.inject(origin, packet)?)
    }

    /// Where injected packet `id`, and what was sent because of it (answers, ICMP errors),
    /// arrived or was dropped, in order.
    pub fn sightings(&self, id: u32) -> Vec<Sighting> {
        self.sim
            .sightings()
            .iter()
            .filter(|s| s.id == id)
            .cloned()
            .collect()
    }

    /// The timeline so far (the events `nfsim run` prints).
    pub fn timeline(&self) -> &[TimelineEvent] {
        self.sim.timeline()
    }

    /// The timeline so far as `nfsim run` prints it, one line per event.
    pub fn timeline_text(&self) -> String {
        self.sim
            .timeline()
            .iter()
            .map(|e| format!("{}\n", e.line()))
            .collect()
    }

    /// The SHA-256 of [`Cluster::timeline_text`], in hex: two runs of one scenario with one
    /// seed have the same hash (the determinism check of TigerBeetle's VOPR and madsim).
    pub fn timeline_hash(&self) -> String {
        use sha2::{Digest, Sha256};
        let digest = Sha256::digest(self.timeline_text().as_bytes());
        digest.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn node(&self, name: &str) -> Result<usize, TestkitError> {
        Ok(self.sim.node_index(name)?)
    }

    /// A node's live conntrack entries matching `conntrack -L` options, now.
    pub fn conntrack(&self, node: &str, filter: &str) -> Result<Vec<CtEntry>, TestkitError> {
        let n = self.node(node)?;
        let f = Filter::parse(filter).map_err(|e| TestkitError::Input {
            what: format!("conntrack filter {filter:?}"),
            message: e.to_string(),
        })?;
        Ok(self.sim.netns(n).conntrack().list(self.now(), &f))
    }

    /// `conntrack -L` of a node now, as the tool prints it.
    pub fn conntrack_text(&self, node: &str, filter: &str) -> Result<String, TestkitError> {
        let n = self.node(node)?;
        let f = Filter::parse(filter).map_err(|e| TestkitError::Input {
            what: format!("conntrack filter {filter:?}"),
            message: e.to_string(),
        })?;
        Ok(self.sim.netns(n).conntrack().dump(self.now(), &f))
    }

    /// A node's `conntrack -S` counters.
    pub fn counters(&self, node: &str) -> Result<Stats, TestkitError> {
        let n = self.node(node)?;
        Ok(*self.sim.netns(n).conntrack().stats())
    }

    /// A node's rules, as `iptables-save` prints them.
    pub fn rules(&self, node: &str) -> Result<String, TestkitError> {
        Ok(self.sim.rules(self.node(node)?))
    }

    /// The driver itself, for what the testkit does not wrap.
    pub fn simulation(&self) -> &Simulation {
        &self.sim
    }

    /// Runs to the end: the timeline, the expectations' verdicts and the summary.
    pub fn finish(self) -> Result<RunResult, TestkitError> {
        Ok(self.sim.finish()?)
    }
}
