//! Driving a running simulation from code: packets injected from a pod, host or node, and
//! scenario events added while it runs. What [`crate::testkit::Cluster`] is built on.
//!
//! An injected packet carries a tag with [`INJECTED_TAG`] set (client tags never have it), so
//! it and everything the cluster sends because of it (a server's answer copies the tag, an
//! ICMP error quotes it) can be followed: every arrival at a machine's stack and every drop
//! by a node is recorded as a [`Sighting`], in order.

use super::*;

/// The bit that marks a packet tag as injected; the low 32 bits are the injection's number.
pub const INJECTED_TAG: u64 = 1 << 63;

/// Where an injected packet starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Origin {
    /// A pod (`namespace/name`): it enters the pod's node on the pod's veth (PREROUTING).
    Pod(String),
    /// A host outside the cluster, by name: it goes to the network's router.
    Host(String),
    /// A node's own process, by node name: it takes the node's OUTPUT path.
    Node(String),
}

/// Something that happened to an injected packet (or to a packet sent because of it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sighting {
    /// The injection's number ([`Simulation::inject`]'s return value).
    pub id: u32,
    /// When.
    pub at: SimTime,
    /// `pod default/app`, `host dns`, `node node-1`, where it arrived or was dropped.
    pub machine: String,
    /// The packet as it was there.
    pub packet: Packet,
    /// `None` when it reached the machine's stack; the reason when a node dropped or
    /// rejected it.
    pub dropped: Option<String>,
}

/// What the kube-proxy cleanups (reconcilers) of a run did, summed over every sync and node:
/// the figures the reconciler harness reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanupTally {
    /// Syncs after which the cleanup ran.
    pub runs: u64,
    /// `list` calls (conntrack dumps).
    pub list_calls: u64,
    /// Delete requests (one per filter).
    pub delete_calls: u64,
    /// Entries deleted.
    pub deleted: u64,
    /// Of those, entries whose endpoint was still answering on the entry's port when the
    /// entry was deleted (a live pod with a server there): a working flow cut.
    pub valid_deleted: u64,
    /// Of those, entries to a Service IP on a port none of its UDP ports has (a flow the
    /// cleanup had no business with).
    pub unrelated_deleted: u64,
}

impl Simulation {
    /// Sends `packet` from `origin` now (it is queued at the current instant and goes
    /// through the network like any packet). Returns its number, under which
    /// [`Simulation::sightings`] reports where it went. The source address is the caller's
    /// choice; a pod without network (gone) sends nothing.
    pub fn inject(&mut self, origin: &Origin, mut packet: Packet) -> Result<u32, SimError> {
        let machine = match origin {
            Origin::Pod(key) => Machine::Pod(
                *self
                    .pod_ids
                    .get(key)
                    .ok_or_else(|| SimError::UnknownNode(format!("pod {key}")))?,
            ),
            Origin::Host(name) => Machine::Host(
                self.hosts
                    .iter()
                    .position(|(h, _)| &h.name == name)
                    .ok_or_else(|| SimError::UnknownNode(format!("host {name}")))?,
            ),
            Origin::Node(name) => Machine::Node(self.node_index(name)?),
        };
        let id = self.injected;
        self.injected += 1;
        packet.tag = INJECTED_TAG | u64::from(id);
        self.send_from(&machine, vec![packet]);
        Ok(id)
    }

    /// Adds a scenario event (the same [`TimedEvent`] a scenario file's `events:` entry
    /// loads to) to the running simulation; it happens at `event.at`, or now if that is
    /// earlier.
    pub fn apply(&mut self, mut event: TimedEvent) {
        event.at = event.at.max(self.now);
        let at = event.at;
        self.sc.events.push(event);
        self.queue.push(at, Ev::Action(self.sc.events.len() - 1));
    }

    /// Everything seen of injected packets so far, in order.
    pub fn sightings(&self) -> &[Sighting] {
        &self.sightings
    }

    /// The timeline recorded so far ([`RunOptions::record_timeline`]).
    pub fn timeline(&self) -> &[TimelineEvent] {
        &self.timeline
    }

    /// What the cleanups did so far.
    pub fn cleanup_tally(&self) -> CleanupTally {
        self.cleanup_tally
    }

    /// Whether a pod with `ip` is alive and has a server for (`proto`, `port`).
    fn endpoint_answers(&self, ip: IpAddr, proto: u8, port: u16) -> bool {
        self.pods.iter().any(|p| {
            p.state.def.has_ip(ip)
                && p.state.has_network()
                && p.state.process_alive
                && p.stack.servers.contains_key(&(proto, port))
        })
    }

    pub(super) fn tally_cleanup(&mut self, r: &crate::cluster::proxy::SyncResult) {
        if let Some(e) = &r.cleanup.error {
            self.cleanup_tally_error.get_or_insert_with(|| e.clone());
        }
        let t = &mut self.cleanup_tally;
        t.runs += u64::from(r.cleanup.ran);
        t.list_calls += r.list_calls as u64;
        t.delete_calls += r.cleanup.deletions.len() as u64;
        t.deleted += r.deleted.len() as u64;
        let mut valid = 0;
        let mut unrelated = 0;
        for d in &r.deleted {
            let orig = d.entry.tuple(sim_conntrack::Dir::Original);
            let reply = d.entry.tuple(sim_conntrack::Dir::Reply);
            let proto = d.entry.proto();
            if self.endpoint_answers(reply.src, proto, reply.sport) {
                valid += 1;
            }
            let service_port = self.sc.services.iter().any(|s| {
                s.cluster_ip_of(crate::k8s::IpFamily::of(orig.dst)) == Some(orig.dst)
                    && s.spec
                        .ports
                        .iter()
                        .any(|p| p.port == orig.dport && p.protocol.lower() == "udp")
            });
            let service_ip = self
                .sc
                .services
                .iter()
                .any(|s| s.cluster_ip_of(crate::k8s::IpFamily::of(orig.dst)) == Some(orig.dst));
            if service_ip && !service_port {
                unrelated += 1;
            }
        }
        self.cleanup_tally.valid_deleted += valid;
        self.cleanup_tally.unrelated_deleted += unrelated;
    }

    pub(super) fn machine_name(&self, m: &Machine) -> String {
        match m {
            Machine::Pod(k) => format!("pod {}", self.pods[*k].key),
            Machine::Host(h) => format!("host {}", self.hosts[*h].0.name),
            Machine::Node(n) => format!("node {}", self.nodes[*n].def.name),
        }
    }

    /// Notes an injected packet reaching a machine's stack or dropped by node `n`.
    pub(super) fn sighted(&mut self, m: &Machine, p: &Packet, dropped: Option<String>) {
        if p.tag & INJECTED_TAG == 0 {
            return;
        }
        let s = Sighting {
            id: p.tag as u32,
            at: self.now,
            machine: self.machine_name(m),
            packet: *p,
            dropped,
        };
        self.sightings.push(s);
    }
}
