//! The report's data: what each lane holds, accumulated event by event (the builder never
//! needs the whole timeline at once), serialised as the JSON the page draws from.

use super::adapter::{adapt, host, EpCond, Ev, Outcome};
use super::ctline::CtLine;
use crate::cluster::sim::TimelineEvent;
use crate::scenario::model::{Placement, PodDef};
use crate::scenario::Scenario;
use serde::Serialize;
use std::collections::BTreeMap;

/// More clients than this: client lanes are aggregated per node and per Service.
pub const MAX_CLIENT_LANES: usize = 32;
/// More conntrack entries than this: entry bars give way to per-node counts.
pub const MAX_ENTRY_BARS: usize = 5_000;
/// More pods than this: only pods whose lifecycle changes during the run get a lane.
pub const MAX_POD_LANES: usize = 48;
/// More nodes than this: one kube-proxy lane for all nodes.
pub const MAX_KP_LANES: usize = 16;
/// Aggregated lanes count in at most about this many buckets over the run.
const TARGET_BUCKETS: u64 = 720;

/// The whole page's data (schema version 1).
#[derive(Debug, Serialize)]
pub(crate) struct Data {
    pub version: u32,
    pub meta: Meta,
    pub endpoints: Vec<EndpointInfo>,
    pub lines: Vec<String>,
    pub clients: Vec<ClientLane>,
    pub conntrack: Vec<CtLane>,
    pub pods: Vec<PodLane>,
    pub pods_hidden: usize,
    pub services: Vec<EpsLane>,
    pub kube_proxy: Vec<KpLane>,
    pub expect_marks: Vec<Mark>,
    pub changes: Vec<Mark>,
    pub guides: Vec<Guide>,
    pub agg: Option<Agg>,
    pub expectations: Vec<ExpRow>,
    pub skipped: Vec<String>,
    pub summary: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct Meta {
    pub name: String,
    pub file: String,
    pub description: String,
    pub seed: u64,
    pub command: String,
    pub end_ns: u64,
    pub passed: bool,
    /// The run's headline (`report::headline`).
    pub headline: String,
    pub aggregated_clients: bool,
    pub aggregated_conntrack: bool,
    pub events: usize,
}

#[derive(Debug, Serialize)]
pub(crate) struct EndpointInfo {
    pub ip: String,
    pub label: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct ClientLane {
    pub name: String,
    pub node: String,
    pub target: String,
    /// Endpoint indices, one row each, in the order the client first reached them; `null`
    /// is the row of queries that reached no endpoint.
    pub rows: Vec<Option<usize>>,
    pub queries: Vec<Query>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Query {
    pub id: u32,
    pub t0: u64,
    pub t1: Option<u64>,
    pub ep: Option<usize>,
    pub outcome: &'static str,
    pub tries: u8,
    pub lines: Vec<u32>,
}

#[derive(Debug, Serialize)]
pub(crate) struct CtLane {
    pub node: String,
    pub rows: u32,
    pub entries: Vec<Entry>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Entry {
    pub row: u32,
    pub t0: u64,
    pub t1: Option<u64>,
    /// `destroy`, `cleanup` (deleted by kube-proxy) or `open` (alive at the end).
    pub end: &'static str,
    pub ep: Option<usize>,
    pub label: String,
    pub phases: Vec<Phase>,
    pub refresh: Vec<u64>,
    pub lines: Vec<u32>,
    /// The original tuple's source and destination sockets.
    #[serde(skip)]
    pub orig: (String, String),
}

#[derive(Debug, Serialize, PartialEq)]
pub(crate) struct Phase {
    pub t: u64,
    /// `u` unreplied, `r` replied, `a` assured.
    pub p: &'static str,
    pub state: Option<&'static str>,
    pub timeout: Option<u64>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Seg {
    pub t0: u64,
    pub t1: u64,
    pub state: &'static str,
}

#[derive(Debug, Serialize)]
pub(crate) struct Mark {
    pub t: u64,
    pub kind: &'static str,
    pub line: u32,
    /// How many identical marks this one stands for (merged lanes).
    pub count: u32,
}

#[derive(Debug, Serialize)]
pub(crate) struct PodLane {
    pub pod: String,
    pub node: String,
    pub segs: Vec<Seg>,
    pub marks: Vec<Mark>,
}

#[derive(Debug, Serialize)]
pub(crate) struct EpsRow {
    pub ip: String,
    pub ep: usize,
    pub segs: Vec<Seg>,
}

#[derive(Debug, Serialize)]
pub(crate) struct EpsLane {
    pub service: String,
    pub rows: Vec<EpsRow>,
    pub marks: Vec<Mark>,
}

#[derive(Debug, Serialize)]
pub(crate) struct KpLane {
    pub node: String,
    pub marks: Vec<Mark>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Guide {
    pub t: u64,
    pub label: String,
}

#[derive(Debug, Serialize)]
pub(crate) struct Agg {
    pub bucket_ns: u64,
    /// Per node of the client: `[bucket, answered, timed out, refused, failed, sample line + 1]`.
    pub nodes: Vec<AggLane>,
    /// Per Service (client target), the same.
    pub services: Vec<AggLane>,
    /// Per node: `[bucket, new, destroyed, live at the bucket's end, most live in it]`.
    pub conntrack: Vec<AggLane>,
}

#[derive(Debug, Serialize)]
pub(crate) struct AggLane {
    pub name: String,
    pub total: [u64; 4],
    pub buckets: Vec<[u64; 6]>,
}

#[derive(Debug, Serialize)]
pub(crate) struct ExpRow {
    pub name: String,
    pub line: u64,
    pub at: String,
    pub passed: bool,
    pub detail: String,
}

/// Per-query bookkeeping while it is open.
struct OpenQuery {
    lane: usize,
    idx: usize,
}

/// One send, to mark the refreshes of the entry it went through.
struct Send {
    t: u64,
    client: usize,
    id: u32,
    src: String,
    dst: String,
    /// The node that DNAT'd it, once known.
    dnat_node: Option<usize>,
}

struct OpenEntry {
    node: usize,
    idx: usize,
}

#[derive(Default)]
struct PodState {
    ready: bool,
    killed: bool,
    terminating: bool,
    gone: bool,
}

impl PodState {
    fn code(&self) -> &'static str {
        match self {
            PodState { gone: true, .. } => "gone",
            PodState {
                terminating: true, ..
            } => "terminating",
            PodState {
                killed: true,
                ready: true,
                ..
            } => "killed-ready",
            PodState { killed: true, .. } => "killed",
            PodState { ready: true, .. } => "ready",
            _ => "notready",
        }
    }
}

#[derive(Default)]
struct AggBuckets {
    /// bucket → [answered, timed out, refused, failed, sample line + 1]
    b: BTreeMap<u64, [u64; 5]>,
    total: [u64; 4],
}

#[derive(Default)]
struct CtAgg {
    /// bucket → [new, destroyed, live at end, max live]
    b: BTreeMap<u64, [u64; 4]>,
    live: u64,
    total_new: u64,
}

/// Accumulates a run's events into the report's data.
pub(crate) struct Builder {
    end_ns: u64,
    lines: Vec<String>,
    endpoints: Vec<EndpointInfo>,
    ep_index: BTreeMap<String, usize>,
    /// Known addresses → names (pods, hosts, nodes).
    names: BTreeMap<String, String>,
    cluster_ips: BTreeMap<String, String>,
    nodes: Vec<String>,
    node_index: BTreeMap<String, usize>,
    client_index: BTreeMap<String, usize>,
    client_node: Vec<usize>,
    client_target: Vec<String>,
    clients: Vec<ClientLane>,
    detail_clients: bool,
    open_queries: BTreeMap<(usize, u32), OpenQuery>,
    sends: Vec<Send>,
    ct: Vec<Vec<Entry>>,
    ct_keys: Vec<BTreeMap<String, usize>>,
    open_entries: BTreeMap<(usize, String), OpenEntry>,
    detail_ct: bool,
    entry_count: usize,
    pods: Vec<PodLane>,
    pod_index: BTreeMap<String, usize>,
    pod_state: Vec<PodState>,
    pod_changed: Vec<bool>,
    services: Vec<EpsLane>,
    svc_index: BTreeMap<String, usize>,
    kp: Vec<KpLane>,
    kp_merged: bool,
    expect_marks: Vec<Mark>,
    changes: Vec<Mark>,
    guides: Vec<Guide>,
    bucket_ns: u64,
    agg_nodes: Vec<AggBuckets>,
    agg_services: BTreeMap<String, AggBuckets>,
    agg_ct: Vec<CtAgg>,
    events: usize,
}

/// A round bucket width giving at most about [`TARGET_BUCKETS`] buckets over `end_ns`.
fn bucket_width(end_ns: u64) -> u64 {
    let want = end_ns.div_ceil(TARGET_BUCKETS).max(1);
    let mut unit = 1_000_000u64; // 1 ms
    loop {
        for m in [1, 2, 5] {
            if unit * m >= want {
                return unit * m;
            }
        }
        unit *= 10;
    }
}

fn matches_selector(svc: &crate::k8s::Service, pod: &PodDef) -> bool {
    !svc.spec.selector.is_empty()
        && svc.metadata.namespace == pod.namespace
        && svc
            .spec
            .selector
            .iter()
            .all(|(k, v)| pod.labels.get(k) == Some(v))
}

impl Builder {
    /// A builder for a run of `sc`.
    pub fn new(sc: &Scenario) -> Builder {
        let end_ns = sc.duration.as_nanos();
        let nodes: Vec<String> = sc.nodes.iter().map(|n| n.name.clone()).collect();
        let node_index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.clone(), i))
            .collect();
        let mut names = BTreeMap::new();
        for n in &sc.nodes {
            names.insert(n.address.to_string(), n.name.clone());
        }
        for h in &sc.hosts {
            names.insert(h.address.to_string(), h.name.clone());
        }
        for p in &sc.pods {
            names.insert(p.ip.to_string(), p.key());
        }
        let mut cluster_ips = BTreeMap::new();
        for s in &sc.services {
            for ip in &s.spec.cluster_ips {
                if let Some(a) = ip.ip() {
                    cluster_ips.insert(a.to_string(), s.key());
                }
            }
            for f in [crate::k8s::IpFamily::IPv4, crate::k8s::IpFamily::IPv6] {
                if let Some(a) = s.cluster_ip_of(f) {
                    cluster_ips.insert(a.to_string(), s.key());
                }
            }
        }
        let detail_clients = sc.clients.len() <= MAX_CLIENT_LANES;
        let mut b = Builder {
            end_ns,
            lines: Vec::new(),
            endpoints: Vec::new(),
            ep_index: BTreeMap::new(),
            names,
            cluster_ips,
            node_index,
            client_index: BTreeMap::new(),
            client_node: Vec::new(),
            client_target: Vec::new(),
            clients: Vec::new(),
            detail_clients,
            open_queries: BTreeMap::new(),
            sends: Vec::new(),
            ct: (0..nodes.len()).map(|_| Vec::new()).collect(),
            ct_keys: vec![BTreeMap::new(); nodes.len()],
            open_entries: BTreeMap::new(),
            detail_ct: true,
            entry_count: 0,
            pods: Vec::new(),
            pod_index: BTreeMap::new(),
            pod_state: Vec::new(),
            pod_changed: Vec::new(),
            services: Vec::new(),
            svc_index: BTreeMap::new(),
            kp: Vec::new(),
            kp_merged: nodes.len() > MAX_KP_LANES,
            expect_marks: Vec::new(),
            changes: Vec::new(),
            guides: Vec::new(),
            bucket_ns: bucket_width(end_ns),
            agg_nodes: (0..nodes.len()).map(|_| AggBuckets::default()).collect(),
            agg_services: BTreeMap::new(),
            agg_ct: (0..nodes.len()).map(|_| CtAgg::default()).collect(),
            events: 0,
            nodes,
        };
        for (i, c) in sc.clients.iter().enumerate() {
            b.client_index.insert(c.name.clone(), i);
            let node = match &c.placement {
                Placement::Pod(key) => sc
                    .pods
                    .iter()
                    .find(|p| &p.key() == key)
                    .map(|p| p.node)
                    .unwrap_or(usize::MAX),
                Placement::Node(n) => *n,
                Placement::Host(_) => usize::MAX,
            };
            b.client_node.push(node);
            b.client_target.push(c.target_text.clone());
            let node_name = match &c.placement {
                Placement::Host(h) => sc.hosts.get(*h).map(|h| h.name.clone()),
                _ => b.nodes.get(node).cloned(),
            }
            .unwrap_or_default();
            b.clients.push(ClientLane {
                name: c.name.clone(),
                node: node_name,
                target: c.target_text.clone(),
                rows: Vec::new(),
                queries: Vec::new(),
            });
        }
        for (i, p) in sc.pods.iter().enumerate() {
            b.pod_index.insert(p.key(), i);
            b.pods.push(PodLane {
                pod: p.key(),
                node: b.nodes.get(p.node).cloned().unwrap_or_default(),
                segs: Vec::new(),
                marks: Vec::new(),
            });
            b.pod_state.push(PodState {
                ready: p.ready,
                ..PodState::default()
            });
            b.pod_changed.push(false);
            b.pods[i].segs.push(Seg {
                t0: 0,
                t1: end_ns,
                state: b.pod_state[i].code(),
            });
        }
        // The slices at the start: explicit ones, or what the controller derives from the
        // selectors (control.rs derive_slices: ready pods ready, the others not).
        let mut initial: BTreeMap<String, Vec<(String, EpCond)>> = BTreeMap::new();
        if let Some(slices) = &sc.endpoint_slices {
            for s in slices {
                let svc = format!(
                    "{}/{}",
                    s.metadata.namespace,
                    s.service_name().unwrap_or_default()
                );
                let e = initial.entry(svc).or_default();
                for ep in &s.endpoints {
                    let c = ep.conditions;
                    let cond = if c.is_terminating() {
                        EpCond::Terminating
                    } else if c.is_ready() {
                        EpCond::Ready
                    } else if c.is_serving() {
                        EpCond::Serving
                    } else {
                        EpCond::NotServing
                    };
                    for a in &ep.addresses {
                        e.push((a.to_string(), cond));
                    }
                }
            }
        } else {
            for s in &sc.services {
                let e = initial.entry(s.key()).or_default();
                for p in sc.pods.iter().filter(|p| matches_selector(s, p)) {
                    let cond = if p.ready {
                        EpCond::Ready
                    } else {
                        EpCond::NotServing
                    };
                    e.push((p.ip.to_string(), cond));
                }
            }
        }
        for (svc, eps) in initial {
            let i = b.service(&svc);
            b.set_endpoints(i, 0, &eps);
        }
        if b.kp_merged {
            b.kp.push(KpLane {
                node: format!("all {} nodes", b.nodes.len()),
                marks: Vec::new(),
            });
        } else {
            for n in b.nodes.clone() {
                b.kp.push(KpLane {
                    node: n,
                    marks: Vec::new(),
                });
            }
        }
        b
    }

    fn line(&mut self, e: &TimelineEvent) -> u32 {
        self.lines.push(e.line());
        (self.lines.len() - 1) as u32
    }

    fn endpoint(&mut self, ip: &str) -> usize {
        if let Some(&i) = self.ep_index.get(ip) {
            return i;
        }
        let label = self
            .names
            .get(ip)
            .cloned()
            .unwrap_or_else(|| ip.to_string());
        self.endpoints.push(EndpointInfo {
            ip: ip.to_string(),
            label,
        });
        self.ep_index
            .insert(ip.to_string(), self.endpoints.len() - 1);
        self.endpoints.len() - 1
    }

    fn service(&mut self, svc: &str) -> usize {
        if let Some(&i) = self.svc_index.get(svc) {
            return i;
        }
        self.services.push(EpsLane {
            service: svc.to_string(),
            rows: Vec::new(),
            marks: Vec::new(),
        });
        self.svc_index
            .insert(svc.to_string(), self.services.len() - 1);
        self.services.len() - 1
    }

    fn set_endpoints<S: AsRef<str>>(&mut self, svc: usize, t: u64, eps: &[(S, EpCond)]) {
        let end = self.end_ns;
        for (ip, cond) in eps {
            let ip = ip.as_ref();
            let ep = self.endpoint(ip);
            let lane = &mut self.services[svc];
            if !lane.rows.iter().any(|r| r.ip == ip) {
                lane.rows.push(EpsRow {
                    ip: ip.to_string(),
                    ep,
                    segs: Vec::new(),
                });
            }
            let _ = cond;
        }
        let lane = &mut self.services[svc];
        for row in &mut lane.rows {
            let state = eps
                .iter()
                .find(|(ip, _)| ip.as_ref() == row.ip)
                .map(|(_, c)| c.code())
                .unwrap_or("absent");
            set_state(&mut row.segs, t, end, state);
        }
    }

    fn bucket(&self, t: u64) -> u64 {
        t / self.bucket_ns
    }

    /// Takes one event of the run.
    pub fn push(&mut self, e: &TimelineEvent) {
        self.events += 1;
        let t = e.t_ns;
        match adapt(e) {
            Ev::Send {
                client,
                id,
                attempt,
                src,
                dst,
            } => {
                let Some(&c) = self.client_index.get(client) else {
                    return;
                };
                if self.detail_clients {
                    self.sends.push(Send {
                        t,
                        client: c,
                        id,
                        src: src.to_string(),
                        dst: dst.to_string(),
                        dnat_node: None,
                    });
                    let line = self.line(e);
                    if attempt == 0 {
                        let ep = if self.cluster_ips.contains_key(host(dst)) {
                            None
                        } else {
                            Some(self.endpoint(host(dst)))
                        };
                        let lane = &mut self.clients[c];
                        lane.queries.push(Query {
                            id,
                            t0: t,
                            t1: None,
                            ep,
                            outcome: "p",
                            tries: 1,
                            lines: vec![line],
                        });
                        self.open_queries.insert(
                            (c, id),
                            OpenQuery {
                                lane: c,
                                idx: lane.queries.len() - 1,
                            },
                        );
                    } else if let Some(q) = self.open_queries.get(&(c, id)) {
                        let q = &mut self.clients[q.lane].queries[q.idx];
                        q.tries = q.tries.max(attempt + 1);
                        q.lines.push(line);
                    }
                }
            }
            Ev::Dnat {
                client,
                id,
                node,
                to,
            } => {
                let Some(&c) = self.client_index.get(client) else {
                    return;
                };
                if self.detail_clients {
                    if let Some(&n) = self.node_index.get(node) {
                        // The send this DNAT belongs to is one of the last few.
                        if let Some(s) = self
                            .sends
                            .iter_mut()
                            .rev()
                            .take(64)
                            .find(|s| s.client == c && s.id == id)
                        {
                            s.dnat_node = Some(n);
                        }
                    }
                    let ep = self.endpoint(host(to));
                    let line = self.line(e);
                    if let Some(q) = self.open_queries.get(&(c, id)) {
                        let q = &mut self.clients[q.lane].queries[q.idx];
                        q.ep = Some(ep);
                        q.lines.push(line);
                    }
                }
            }
            Ev::Done {
                client,
                id,
                outcome,
            } => {
                let Some(&c) = self.client_index.get(client) else {
                    return;
                };
                if self.detail_clients {
                    let line = self.line(e);
                    if let Some(q) = self.open_queries.remove(&(c, id)) {
                        let q = &mut self.clients[q.lane].queries[q.idx];
                        q.t1 = Some(t);
                        q.outcome = outcome.code();
                        q.lines.push(line);
                    }
                }
                // Aggregates count every client, detailed or not.
                let k = match outcome {
                    Outcome::Answered => 0,
                    Outcome::TimedOut => 1,
                    Outcome::Refused => 2,
                    Outcome::Failed => 3,
                };
                let bucket = self.bucket(t);
                let sample = if outcome != Outcome::Answered && !self.detail_clients {
                    Some(self.line(e) as u64 + 1)
                } else {
                    None
                };
                let node = self.client_node[c];
                let target = self.client_target[c].clone();
                for ab in [
                    self.agg_nodes.get_mut(node),
                    Some(self.agg_services.entry(target).or_default()),
                ]
                .into_iter()
                .flatten()
                {
                    let cell = ab.b.entry(bucket).or_insert([0; 5]);
                    cell[k] += 1;
                    ab.total[k] += 1;
                    if let Some(s) = sample {
                        if cell[4] == 0 {
                            cell[4] = s;
                        }
                    }
                }
                if sample.is_some() {
                    // A line nobody points at (both aggregates took an earlier sample).
                    let used = self
                        .agg_nodes
                        .get(node)
                        .and_then(|a| a.b.get(&bucket))
                        .is_some_and(|c| c[4] == sample.unwrap_or(0))
                        || self
                            .agg_services
                            .get(&self.client_target[c])
                            .and_then(|a| a.b.get(&bucket))
                            .is_some_and(|c| c[4] == sample.unwrap_or(0));
                    if !used {
                        self.lines.pop();
                    }
                }
            }
            Ev::Note { client, id } => {
                if !self.detail_clients {
                    return;
                }
                let Some(&c) = self.client_index.get(client) else {
                    return;
                };
                if let Some(q) = self.open_queries.get(&(c, id)) {
                    let (lane, idx) = (q.lane, q.idx);
                    let line = self.line(e);
                    self.clients[lane].queries[idx].lines.push(line);
                }
            }
            Ev::Conntrack { node, ct } => {
                let Some(&n) = self.node_index.get(node) else {
                    return;
                };
                self.conntrack(e, t, n, ct);
            }
            Ev::Pod { pod, change } => self.pod(e, t, pod, change),
            Ev::Endpoints { service, endpoints } => {
                let i = self.service(service);
                self.set_endpoints(i, t, &endpoints);
                let line = self.line(e);
                self.services[i].marks.push(Mark {
                    t,
                    kind: "change",
                    line,
                    count: 1,
                });
            }
            Ev::Sync { node, full, failed } => {
                let kind = if failed {
                    "failed"
                } else if full {
                    "full"
                } else {
                    "partial"
                };
                self.kp_mark(e, t, node, kind);
            }
            Ev::Cleanup { node, ct } => {
                self.kp_mark(e, t, node, "cleanup");
                if let Some(&n) = self.node_index.get(node) {
                    if self.detail_ct {
                        let line = self.line(e);
                        if let Some(&i) = self.ct_keys[n].get(&ct.key()) {
                            let entry = &mut self.ct[n][i];
                            entry.end = "cleanup";
                            entry.lines.push(line);
                        }
                    }
                }
            }
            Ev::Expectation { passed } => {
                let line = self.line(e);
                self.expect_marks.push(Mark {
                    t,
                    kind: if passed { "pass" } else { "fail" },
                    line,
                    count: 1,
                });
            }
            Ev::Change => {
                let line = self.line(e);
                self.changes.push(Mark {
                    t,
                    kind: "change",
                    line,
                    count: 1,
                });
            }
        }
    }

    fn kp_mark(&mut self, e: &TimelineEvent, t: u64, node: &str, kind: &'static str) {
        let lane = if self.kp_merged {
            0
        } else {
            match self.node_index.get(node) {
                Some(&n) => n,
                None => return,
            }
        };
        if self.kp_merged {
            if let Some(m) = self.kp[lane]
                .marks
                .iter_mut()
                .rev()
                .take_while(|m| m.t == t)
                .find(|m| m.kind == kind)
            {
                m.count += 1;
                return;
            }
        }
        let line = self.line(e);
        self.kp[lane].marks.push(Mark {
            t,
            kind,
            line,
            count: 1,
        });
    }

    fn conntrack(&mut self, e: &TimelineEvent, t: u64, n: usize, ct: CtLine) {
        let key = ct.key();
        // Aggregate counts, always.
        let bucket = self.bucket(t);
        let agg = &mut self.agg_ct[n];
        match ct.event.as_str() {
            "NEW" => {
                agg.live += 1;
                agg.total_new += 1;
                let live = agg.live;
                let cell = agg.b.entry(bucket).or_insert([0, 0, 0, 0]);
                cell[0] += 1;
                cell[2] = live;
                cell[3] = cell[3].max(live);
            }
            "DESTROY" => {
                agg.live = agg.live.saturating_sub(1);
                let live = agg.live;
                let cell = agg.b.entry(bucket).or_insert([0, 0, 0, live + 1]);
                cell[1] += 1;
                cell[2] = live;
            }
            _ => {}
        }
        if !self.detail_ct {
            return;
        }
        if ct.event == "NEW" {
            self.entry_count += 1;
            if self.entry_count > MAX_ENTRY_BARS {
                // Too many bars to look at: the per-node counts stand in for them.
                self.detail_ct = false;
                for v in &mut self.ct {
                    v.clear();
                }
                for k in &mut self.ct_keys {
                    k.clear();
                }
                self.open_entries.clear();
                return;
            }
        }
        let phase = Phase {
            t,
            p: if ct.unreplied {
                "u"
            } else if ct.assured {
                "a"
            } else {
                "r"
            },
            state: ct.state,
            timeout: ct.timeout,
        };
        let line = self.line(e);
        match self.open_entries.get(&(n, key.clone())) {
            Some(o) if ct.event != "NEW" => {
                let entry = &mut self.ct[o.node][o.idx];
                entry.lines.push(line);
                if ct.event == "DESTROY" {
                    entry.t1 = Some(t);
                    if entry.end == "open" {
                        // Deleted from userspace (conntrack -D, kube-proxy) or timed out.
                        entry.end = match ct.cause {
                            Some("userspace") => "deleted",
                            Some("early_drop") => "dropped",
                            _ => "destroy",
                        };
                    }
                    self.open_entries.remove(&(n, key));
                } else {
                    let last = entry.phases.last();
                    if last.map(|l| (l.p, &l.state, l.timeout))
                        != Some((phase.p, &phase.state, phase.timeout))
                    {
                        entry.phases.push(phase);
                    }
                }
            }
            _ => {
                // NEW (or an event for an entry we never saw created: start it there).
                let ep = {
                    let ip = ct.reply_src_ip();
                    (!ip.is_empty()).then(|| self.endpoint(&ip))
                };
                let via = if ct.orig_dst() != ct.reply_src() {
                    format!(" ⇒ {}", ct.reply_src())
                } else {
                    String::new()
                };
                let label = format!("{} {} → {}{via}", ct.proto, ct.orig_src(), ct.orig_dst());
                let destroyed = ct.event == "DESTROY";
                self.ct[n].push(Entry {
                    row: 0,
                    t0: t,
                    t1: destroyed.then_some(t),
                    end: if destroyed { "destroy" } else { "open" },
                    ep,
                    label,
                    phases: vec![phase],
                    refresh: Vec::new(),
                    lines: vec![line],
                    orig: (ct.orig_src(), ct.orig_dst()),
                });
                let idx = self.ct[n].len() - 1;
                self.ct_keys[n].insert(key.clone(), idx);
                if !destroyed {
                    self.open_entries
                        .insert((n, key), OpenEntry { node: n, idx });
                }
            }
        }
    }

    fn pod(&mut self, e: &TimelineEvent, t: u64, pod: &str, change: &str) {
        let i = match self.pod_index.get(pod) {
            Some(&i) => i,
            None => {
                let node = change
                    .strip_prefix("created on ")
                    .and_then(|r| r.split_whitespace().next())
                    .unwrap_or_default()
                    .to_string();
                self.pods.push(PodLane {
                    pod: pod.to_string(),
                    node,
                    segs: vec![Seg {
                        t0: 0,
                        t1: t,
                        state: "absent",
                    }],
                    marks: Vec::new(),
                });
                self.pod_state.push(PodState::default());
                self.pod_changed.push(true);
                self.pod_index.insert(pod.to_string(), self.pods.len() - 1);
                self.pods.len() - 1
            }
        };
        if let Some(ip) = change.split("with IP ").nth(1) {
            let ip = ip.split([',', ' ']).next().unwrap_or_default();
            self.names.insert(ip.to_string(), pod.to_string());
            if let Some(&k) = self.ep_index.get(ip) {
                self.endpoints[k].label = pod.to_string();
            }
        }
        let st = &mut self.pod_state[i];
        let mut guide = None;
        if change.starts_with("created on") {
            *st = PodState {
                ready: !change.contains("not ready"),
                ..PodState::default()
            };
        } else if change == "Ready" {
            st.ready = true;
        } else if change == "not Ready" {
            st.ready = false;
        } else if change.starts_with("OOMKilled") {
            st.killed = true;
            guide = Some("OOMKilled");
        } else if change.starts_with("container restarted") {
            st.killed = false;
            guide = Some("restarted");
        } else if change.starts_with("deleted") {
            st.terminating = true;
            guide = Some("deleted");
        } else if change.starts_with("gone") {
            st.gone = true;
            st.ready = false;
            guide = Some("gone");
        }
        let state = st.code();
        let end = self.end_ns;
        set_state(&mut self.pods[i].segs, t, end, state);
        self.pod_changed[i] = true;
        let line = self.line(e);
        self.pods[i].marks.push(Mark {
            t,
            kind: if guide.is_some() { "major" } else { "minor" },
            line,
            count: 1,
        });
        if let Some(g) = guide {
            let name = pod.rsplit('/').next().unwrap_or(pod);
            self.guides.push(Guide {
                t,
                label: format!("{name} {g}"),
            });
        }
    }

    /// Finishes the data: packs entry bars into rows, marks refreshes, and drops what would
    /// not fit on a page.
    pub fn finish(
        mut self,
        meta: Meta,
        expectations: Vec<ExpRow>,
        skipped: Vec<String>,
        summary: String,
    ) -> Data {
        // Refreshes: each packet the client sent through an entry, on the node where the
        // entry is (the client's own node, or the node that DNAT'd it), restarts its timer
        // (nf_ct_refresh_acct in nf_conntrack_udp_packet / nf_conntrack_tcp_packet).
        if self.detail_ct && self.detail_clients {
            let mut by_orig: BTreeMap<(usize, String, String), Vec<u64>> = BTreeMap::new();
            for s in &self.sends {
                let mut nodes = vec![self.client_node[s.client]];
                if let Some(dn) = s.dnat_node {
                    nodes.push(dn);
                }
                nodes.dedup();
                for n in nodes {
                    by_orig
                        .entry((n, s.src.clone(), s.dst.clone()))
                        .or_default()
                        .push(s.t);
                }
            }
            for (n, entries) in self.ct.iter_mut().enumerate() {
                for entry in entries.iter_mut() {
                    let key = (n, entry.orig.0.clone(), entry.orig.1.clone());
                    if let Some(ts) = by_orig.get(&key) {
                        let end = entry.t1.unwrap_or(u64::MAX);
                        entry.refresh = ts
                            .iter()
                            .copied()
                            .filter(|&x| x > entry.t0 && x <= end)
                            .collect();
                    }
                }
            }
        }
        // Pack each node's bars into rows: first row whose last bar ended before this starts.
        let mut conntrack = Vec::new();
        if self.detail_ct {
            for (n, mut entries) in std::mem::take(&mut self.ct).into_iter().enumerate() {
                if entries.is_empty() {
                    continue;
                }
                let mut row_end: Vec<u64> = Vec::new();
                for en in &mut entries {
                    let end = en.t1.unwrap_or(u64::MAX);
                    match row_end.iter().position(|&r| r < en.t0) {
                        Some(r) => {
                            en.row = r as u32;
                            row_end[r] = end;
                        }
                        None => {
                            en.row = row_end.len() as u32;
                            row_end.push(end);
                        }
                    }
                }
                conntrack.push(CtLane {
                    node: self.nodes[n].clone(),
                    rows: row_end.len() as u32,
                    entries,
                });
            }
        }
        // Client rows: the endpoints in the order first reached.
        for lane in &mut self.clients {
            let mut rows: Vec<Option<usize>> = Vec::new();
            for q in &lane.queries {
                if !rows.contains(&q.ep) {
                    rows.push(q.ep);
                }
            }
            lane.rows = rows;
        }
        let clients = if self.detail_clients {
            self.clients
        } else {
            Vec::new()
        };
        // Pods: all of them when few; else those that changed.
        let mut pods = Vec::new();
        let mut pods_hidden = 0;
        let many = self.pods.len() > MAX_POD_LANES;
        for (p, changed) in self.pods.into_iter().zip(self.pod_changed) {
            if many && !changed {
                pods_hidden += 1;
            } else {
                pods.push(p);
            }
        }
        let services: Vec<EpsLane> = if self.services.len() > MAX_POD_LANES {
            self.services
                .into_iter()
                .filter(|s| !s.marks.is_empty())
                .collect()
        } else {
            self.services
        };
        let agg = (!self.detail_clients || !self.detail_ct).then(|| {
            let lane = |name: String, a: &AggBuckets| AggLane {
                name,
                total: a.total,
                buckets: a
                    .b
                    .iter()
                    .map(|(&k, v)| [k, v[0], v[1], v[2], v[3], v[4]])
                    .collect(),
            };
            Agg {
                bucket_ns: self.bucket_ns,
                nodes: self
                    .agg_nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| !a.b.is_empty())
                    .map(|(i, a)| lane(self.nodes[i].clone(), a))
                    .collect(),
                services: self
                    .agg_services
                    .iter()
                    .map(|(k, a)| lane(k.clone(), a))
                    .collect(),
                conntrack: self
                    .agg_ct
                    .iter()
                    .enumerate()
                    .filter(|(_, a)| a.total_new > 0)
                    .map(|(i, a)| AggLane {
                        name: self.nodes[i].clone(),
                        total: [a.total_new, 0, 0, 0],
                        buckets: a
                            .b
                            .iter()
                            .map(|(&k, v)| [k, v[0], v[1], v[2], v[3], 0])
                            .collect(),
                    })
                    .collect(),
            }
        });
        let meta = Meta {
            aggregated_clients: !self.detail_clients,
            aggregated_conntrack: !self.detail_ct,
            events: self.events,
            ..meta
        };
        Data {
            version: 1,
            meta,
            endpoints: self.endpoints,
            lines: self.lines,
            clients,
            conntrack,
            pods,
            pods_hidden,
            services,
            kube_proxy: self.kp,
            expect_marks: self.expect_marks,
            changes: self.changes,
            guides: self.guides,
            agg,
            expectations,
            skipped,
            summary,
        }
    }
}

/// Ends the open segment at `t` and opens one in `state` to `end` (no-op if unchanged).
fn set_state(segs: &mut Vec<Seg>, t: u64, end: u64, state: &'static str) {
    if let Some(last) = segs.last_mut() {
        if last.state == state {
            return;
        }
        if last.t0 == t {
            last.state = state;
            // Merge with the one before when it is now the same.
            if segs.len() >= 2 && segs[segs.len() - 2].state == state {
                segs.pop();
                if let Some(l) = segs.last_mut() {
                    l.t1 = end;
                }
            }
            return;
        }
        last.t1 = t;
    }
    segs.push(Seg {
        t0: t,
        t1: end,
        state,
    });
}
