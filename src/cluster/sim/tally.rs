//! What the summary and the expectations keep of a run, as running totals: memory stays flat
//! however long the run.
//!
//! A packet that reaches an endpoint (a [`Hit`]) is counted at once into the summary's
//! per-endpoint figures and into each endpoint expectation still to be checked whose window
//! holds it; nothing keeps the packet. A client's finished queries are taken from the front
//! of its log ([`crate::cluster::querylog::QueryLog`]) into its totals and into each client
//! expectation still to be checked, in query order. The checks and the summary then add the
//! queries still kept. Every figure is what it would be with every packet and query kept:
//! a query is taken only once its outcome can no longer change, and an expectation's totals
//! only take what happens before its instant (checks at an instant run after every event
//! at it).

use super::Hit;
use crate::cluster::apps::{QueryOutcome, QueryRecord};
use crate::scenario::model::{Check, EndpointRef, Expectation};
use sim_conntrack::{CtEvent, EventKind, Filter};
use sim_core::SimTime;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};

/// A flow as the endpoint figures count it: the source socket and the protocol.
pub(super) type Flow = (SocketAddr, u8);

/// Queries by how they ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Outcomes {
    /// Started.
    pub sent: u64,
    /// Answered.
    pub answered: u64,
    /// Timed out or refused.
    pub failed: u64,
    /// Timed out.
    pub timed_out: u64,
    /// Refused: an ICMP error, a reset, no free port.
    pub refused: u64,
    /// Not ended.
    pub in_flight: u64,
}

impl Outcomes {
    /// Counts `r`, ended only if it ended by `now`.
    pub fn add(&mut self, r: &QueryRecord, now: SimTime) {
        self.sent += 1;
        let o = r.outcome;
        if o == QueryOutcome::Pending {
            self.in_flight += 1;
        }
        if o.done_at().is_none_or(|t| t > now) {
            return;
        }
        match o {
            QueryOutcome::Answered(_) => self.answered += 1,
            QueryOutcome::TimedOut(_) => self.timed_out += 1,
            QueryOutcome::IcmpError(..) | QueryOutcome::Reset(_) | QueryOutcome::NoPort(_) => {
                self.refused += 1
            }
            QueryOutcome::Pending => {}
        }
        if o.failed() {
            self.failed += 1;
        }
    }
}

/// The time a client got no answers, followed query by query in order: each run of
/// consecutive failed queries counts from the first one's send to the send of the next
/// answered query (or the end of the run).
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct Blackhole {
    from: Option<SimTime>,
    total_ns: u64,
}

impl Blackhole {
    /// Takes the next query.
    pub fn feed(&mut self, q: &QueryRecord) {
        match q.outcome {
            QueryOutcome::Answered(_) => {
                if let Some(from) = self.from.take() {
                    self.total_ns += q.sent_at.as_nanos().saturating_sub(from.as_nanos());
                }
            }
            o if o.failed() => {
                self.from.get_or_insert(q.sent_at);
            }
            _ => {}
        }
    }
    /// The total for a run ending at `end`.
    pub fn total_ns(mut self, end: SimTime) -> u64 {
        if let Some(from) = self.from.take() {
            self.total_ns += end.as_nanos().saturating_sub(from.as_nanos());
        }
        self.total_ns
    }
}

/// What is kept of one client's taken (finished) queries.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct ClientTally {
    /// Their outcomes.
    pub outcomes: Outcomes,
    /// The outcomes of those sent at or after the scenario's first event (the headline's
    /// "after the kill").
    pub after_first_event: Outcomes,
    /// The blackholed time up to the last of them.
    pub blackhole: Blackhole,
}

/// Packets, distinct flows and packets per client that reached one endpoint address.
#[derive(Debug, Clone, Default)]
pub(super) struct EndpointTally {
    /// Packets.
    pub packets: u64,
    /// Distinct flows.
    pub flows: BTreeSet<Flow>,
    /// Packets by client index.
    pub by_client: BTreeMap<usize, u64>,
}

/// One expectation's totals until it is checked.
#[derive(Debug, Clone)]
pub(super) enum Pending {
    /// Nothing to keep (a conntrack check), or already checked.
    Nothing,
    /// A client check: the taken queries of `client` sent in `[from, to)`.
    Client {
        client: usize,
        from: SimTime,
        to: Option<SimTime>,
        outcomes: Outcomes,
    },
    /// An endpoint check: packets and flows that reached `endpoint` in `[from, to)`.
    Endpoint {
        endpoint: EndpointRef,
        client: Option<usize>,
        from: SimTime,
        to: Option<SimTime>,
        packets: u64,
        flows: BTreeSet<Flow>,
    },
    /// An endpoints check: `client`'s flows in `[from, to)` by endpoint pod and address.
    Endpoints {
        client: usize,
        from: SimTime,
        to: Option<SimTime>,
        flows: BTreeMap<(usize, IpAddr), BTreeSet<Flow>>,
    },
    /// A conntrack event check: events of `kind` on `node`'s entries `filter` matches.
    CtEvents(Box<CtEventWatch>),
}

/// What a `conntrackEvent` check keeps until it is checked.
#[derive(Debug, Clone)]
pub(super) struct CtEventWatch {
    /// Node index.
    pub node: usize,
    /// The entries it looks at.
    pub filter: Filter,
    /// The kind.
    pub kind: EventKind,
    /// For DESTROY, the cause.
    pub cause: Option<String>,
    /// Window, both ends included.
    pub from: SimTime,
    /// Window end.
    pub to: SimTime,
    /// Events matching everything in the window.
    pub matched: u64,
    /// Events of the kind on matching entries, anywhere in the run.
    pub of_kind: u64,
    /// The first [`SEEN_MAX`] of those, as `time cause` for the failure message.
    pub seen: Vec<String>,
}

/// How many events of the kind a failing `conntrackEvent` check names.
pub(super) const SEEN_MAX: usize = 6;

fn within(t: SimTime, from: SimTime, to: Option<SimTime>) -> bool {
    t >= from && to.is_none_or(|to| t < to)
}

/// The running totals of a run.
#[derive(Debug, Clone, Default)]
pub(super) struct Tally {
    /// Per client, by index.
    pub clients: Vec<ClientTally>,
    /// Per endpoint: by pod index, then per address (a pod has one, or a few when it was
    /// recreated with another); indexed, not searched, as every packet to a pod counts here.
    endpoints: Vec<Vec<(IpAddr, EndpointTally)>>,
    /// Per expectation, by index.
    pub pending: Vec<Pending>,
}

impl Tally {
    /// Empty totals for `expectations`.
    pub fn new(expectations: &[Expectation]) -> Tally {
        let pending = expectations
            .iter()
            .map(|x| match &x.check {
                Check::Client {
                    client, from, to, ..
                } => Pending::Client {
                    client: *client,
                    from: *from,
                    to: *to,
                    outcomes: Outcomes::default(),
                },
                Check::Endpoint {
                    endpoint,
                    client,
                    from,
                    to,
                    ..
                } => Pending::Endpoint {
                    endpoint: endpoint.clone(),
                    client: *client,
                    from: *from,
                    to: *to,
                    packets: 0,
                    flows: BTreeSet::new(),
                },
                Check::Endpoints {
                    client, from, to, ..
                } => Pending::Endpoints {
                    client: *client,
                    from: *from,
                    to: *to,
                    flows: BTreeMap::new(),
                },
                Check::ConntrackEvent {
                    node,
                    filter,
                    kind,
                    cause,
                    from,
                    to,
                    ..
                } => Pending::CtEvents(Box::new(CtEventWatch {
                    node: *node,
                    // Checked when the scenario was loaded.
                    filter: Filter::parse(filter).unwrap_or_else(|_| Filter::all()),
                    kind: *kind,
                    cause: cause.clone(),
                    from: *from,
                    to: *to,
                    matched: 0,
                    of_kind: 0,
                    seen: Vec::new(),
                })),
                _ => Pending::Nothing,
            })
            .collect();
        Tally {
            clients: Vec::new(),
            endpoints: Vec::new(),
            pending,
        }
    }

    /// What reached pod `pod` at address `ip`, if anything did.
    pub fn endpoint(&self, pod: usize, ip: IpAddr) -> Option<&EndpointTally> {
        let per_ip = self.endpoints.get(pod)?;
        per_ip.iter().find(|(a, _)| *a == ip).map(|(_, e)| e)
    }

    /// Client `i`'s totals (zero until some of its queries are taken).
    pub fn client(&self, i: usize) -> ClientTally {
        self.clients.get(i).copied().unwrap_or_default()
    }

    /// Counts client `i`'s finished queries `taken` (in query order), at `now`; those sent at
    /// or after `first_event` also count apart.
    pub fn take(
        &mut self,
        i: usize,
        taken: &[QueryRecord],
        now: SimTime,
        first_event: Option<SimTime>,
    ) {
        if taken.is_empty() {
            return;
        }
        if self.clients.len() <= i {
            self.clients.resize(i + 1, ClientTally::default());
        }
        let c = &mut self.clients[i];
        for q in taken {
            c.outcomes.add(q, now);
            if first_event.is_some_and(|t| q.sent_at >= t) {
                c.after_first_event.add(q, now);
            }
            c.blackhole.feed(q);
        }
        for p in &mut self.pending {
            if let Pending::Client {
                client,
                from,
                to,
                outcomes,
            } = p
            {
                if *client == i {
                    for q in taken.iter().filter(|q| within(q.sent_at, *from, *to)) {
                        outcomes.add(q, now);
                    }
                }
            }
        }
    }

    /// Counts a packet that reached an endpoint; `pod_is` tells whether a pod key names
    /// the pod (by index) the packet reached.
    pub fn hit(&mut self, h: &Hit, pod_is: impl Fn(&str, usize) -> bool) {
        let flow = (h.src, h.proto);
        if self.endpoints.len() <= h.pod {
            self.endpoints.resize_with(h.pod + 1, Vec::new);
        }
        let per_ip = &mut self.endpoints[h.pod];
        let i = match per_ip.iter().position(|(a, _)| *a == h.ip) {
            Some(i) => i,
            None => {
                per_ip.push((h.ip, EndpointTally::default()));
                per_ip.len() - 1
            }
        };
        let e = &mut per_ip[i].1;
        e.packets += 1;
        e.flows.insert(flow);
        *e.by_client.entry(h.client).or_default() += 1;
        for p in &mut self.pending {
            match p {
                Pending::Endpoint {
                    endpoint,
                    client,
                    from,
                    to,
                    packets,
                    flows,
                } => {
                    let ours = match endpoint {
                        EndpointRef::Ip(ip) => *ip == h.ip,
                        EndpointRef::Pod(k) => pod_is(k, h.pod),
                    };
                    if ours && client.is_none_or(|c| c == h.client) && within(h.at, *from, *to) {
                        *packets += 1;
                        flows.insert(flow);
                    }
                }
                Pending::Endpoints {
                    client,
                    from,
                    to,
                    flows,
                } => {
                    if *client == h.client && within(h.at, *from, *to) {
                        flows.entry((h.pod, h.ip)).or_default().insert(flow);
                    }
                }
                Pending::Client { .. } | Pending::CtEvents(_) | Pending::Nothing => {}
            }
        }
    }

    /// Whether some expectation still waits for conntrack events.
    pub fn watches_ct_events(&self) -> bool {
        self.pending
            .iter()
            .any(|p| matches!(p, Pending::CtEvents(_)))
    }

    /// Counts a conntrack event of node `node` into the event checks still to be checked.
    pub fn ct_event(&mut self, node: usize, e: &CtEvent) {
        for p in &mut self.pending {
            let Pending::CtEvents(w) = p else { continue };
            if w.node != node || w.kind != e.kind || !w.filter.matches(&e.entry) {
                continue;
            }
            let cause = super::record::destroy_cause(e.cause);
            w.of_kind += 1;
            if w.seen.len() < SEEN_MAX {
                w.seen.push(match cause {
                    Some(c) => format!("{} ({c})", e.at.hms()),
                    None => e.at.hms().to_string(),
                });
            }
            let cause_ok = w.cause.as_deref().is_none_or(|c| Some(c) == cause);
            if cause_ok && e.at >= w.from && e.at <= w.to {
                w.matched += 1;
            }
        }
    }

    /// Expectation `i`'s totals, once: it is being checked, and keeps nothing after.
    pub fn checked(&mut self, i: usize) -> Pending {
        self.pending
            .get_mut(i)
            .map(|p| std::mem::replace(p, Pending::Nothing))
            .unwrap_or(Pending::Nothing)
    }
}
