//! Expectations checked at their instants, and the summary table printed at the end.

use super::*;
use record::{ClientSummary, EndpointSummary, FromClient};

impl Simulation {
    pub(super) fn pod_ips(&self, key: &str) -> BTreeSet<IpAddr> {
        self.pod_ids
            .get(key)
            .map(|&id| self.pods[id].ips.clone())
            .unwrap_or_default()
    }

    pub(super) fn ep_ips(&self, r: &EndpointRef) -> BTreeSet<IpAddr> {
        match r {
            EndpointRef::Ip(ip) => [*ip].into(),
            EndpointRef::Pod(k) => self.pod_ips(k),
        }
    }

    pub(super) fn check(&mut self, i: usize) {
        let x = self.sc.expectations[i].clone();
        let now = self.now;
        let mut problems = Vec::new();
        let mut seen = Vec::new();
        let mut cmp = |what: &str, want: Option<Count>, got: u64| {
            seen.push(format!("{what}={got}"));
            if let Some(w) = want {
                if !w.accepts(got) {
                    problems.push(format!("{what} {got}, expected {w}"));
                }
            }
        };
        match &x.check {
            Check::Client {
                client,
                from,
                to,
                sent,
                answered,
                failed,
                timed_out,
                refused,
            } => {
                let to = to.unwrap_or(now).min(now + SimDuration::from_nanos(1));
                let recs: Vec<&QueryRecord> = self.clients[*client]
                    .app
                    .records()
                    .iter()
                    .filter(|r| r.sent_at >= *from && r.sent_at < to)
                    .collect();
                let done = |f: &dyn Fn(&QueryOutcome) -> bool| {
                    recs.iter()
                        .filter(|r| r.outcome.done_at().is_some_and(|t| t <= now) && f(&r.outcome))
                        .count() as u64
                };
                cmp("sent", *sent, recs.len() as u64);
                cmp(
                    "answered",
                    *answered,
                    done(&|o| matches!(o, QueryOutcome::Answered(_))),
                );
                cmp("failed", *failed, done(&|o| o.failed()));
                cmp(
                    "timedOut",
                    *timed_out,
                    done(&|o| matches!(o, QueryOutcome::TimedOut(_))),
                );
                cmp(
                    "refused",
                    *refused,
                    done(&|o| {
                        matches!(
                            o,
                            QueryOutcome::IcmpError(..)
                                | QueryOutcome::Reset(_)
                                | QueryOutcome::NoPort(_)
                        )
                    }),
                );
            }
            Check::Conntrack {
                node,
                filter,
                count,
                endpoint,
                assured,
                timeout,
                state,
            } => {
                // The filter was checked when the scenario was loaded.
                let (entries, bad) = match Filter::parse(filter) {
                    Ok(f) => (self.nodes[*node].netns.conntrack().list(now, &f), None),
                    Err(e) => (Vec::new(), Some(format!("bad conntrack filter: {e}"))),
                };
                cmp("entries", Some(*count), entries.len() as u64);
                problems.extend(bad);
                let ips = endpoint.as_ref().map(|e| self.ep_ips(e));
                for e in &entries {
                    let line = e.list_line(now).to_string();
                    if let Some(ips) = &ips {
                        if !ips.contains(&e.reply.src) {
                            problems.push(format!(
                                "entry goes to {}, expected {}: {line}",
                                e.reply.src,
                                endpoint.as_ref().map(|e| e.to_string()).unwrap_or_default(),
                            ));
                        }
                    }
                    if let Some(a) = assured {
                        let is = e.status.contains(Status::ASSURED);
                        if is != *a {
                            problems.push(format!(
                                "entry {} [ASSURED], expected {}: {line}",
                                if is { "is" } else { "is not" },
                                if *a { "assured" } else { "not assured" },
                            ));
                        }
                    }
                    if let Some(t) = timeout {
                        let left = e.expiry.secs_left(now);
                        if !t.accepts(left) {
                            problems.push(format!("entry has {left} s left, expected {t}: {line}"));
                        }
                    }
                    if let Some(s) = state {
                        let st = e.tcp_state.map(|t| t.name());
                        if st != Some(s.as_str()) {
                            problems.push(format!(
                                "entry state {}, expected {s}: {line}",
                                st.unwrap_or("-"),
                            ));
                        }
                    }
                }
                if let Some(e) = entries.first() {
                    seen.push(format!("first: {}", e.list_line(now)));
                }
            }
            Check::Endpoint {
                endpoint,
                client,
                from,
                to,
                packets,
                flows,
            } => {
                let to = to.unwrap_or(now).min(now + SimDuration::from_nanos(1));
                let ips = self.ep_ips(endpoint);
                // A pod (by index, if it exists), or an address.
                let pod = match endpoint {
                    EndpointRef::Pod(k) => Some(self.pod_ids.get(k).copied()),
                    EndpointRef::Ip(_) => None,
                };
                let hits: Vec<&Hit> = self
                    .hits
                    .iter()
                    .filter(|h| h.at >= *from && h.at < to)
                    .filter(|h| pod.map_or(ips.contains(&h.ip), |id| id == Some(h.pod)))
                    .filter(|h| client.is_none_or(|c| h.client == c))
                    .collect();
                let nflows = hits
                    .iter()
                    .map(|h| (h.src, h.proto))
                    .collect::<BTreeSet<_>>()
                    .len();
                cmp("packets", *packets, hits.len() as u64);
                cmp("flows", *flows, nflows as u64);
            }
        }
        let passed = problems.is_empty();
        let detail = if passed {
            seen.join(", ")
        } else {
            problems.join("; ")
        };
        self.log(What::Expectation {
            name: x.name.clone(),
            line: x.line,
            passed,
            detail: detail.clone(),
        });
        self.results.push(ExpectResult {
            name: x.name.clone(),
            line: x.line,
            at: now.hms().to_string(),
            passed,
            detail,
        });
    }

    /// Each client's figures at the end of the run, in scenario order.
    pub(super) fn client_figures(&self) -> Vec<ClientFigures> {
        self.clients
            .iter()
            .map(|c| ClientFigures::of(&c.def.name, c.app.records(), self.end))
            .collect()
    }

    pub(super) fn summary(&self) -> Summary {
        let mut out = Summary::default();
        for c in &self.clients {
            let r = c.app.records();
            let count = |f: &dyn Fn(&QueryOutcome) -> bool| {
                r.iter().filter(|q| f(&q.outcome)).count() as u64
            };
            out.clients.push(ClientSummary {
                client: c.def.name.clone(),
                target: c.def.target_text.clone(),
                sent: r.len() as u64,
                answered: count(&|o| matches!(o, QueryOutcome::Answered(_))),
                failed: count(&|o| o.failed()),
                timed_out: count(&|o| matches!(o, QueryOutcome::TimedOut(_))),
                refused: count(&|o| {
                    matches!(
                        o,
                        QueryOutcome::IcmpError(..)
                            | QueryOutcome::Reset(_)
                            | QueryOutcome::NoPort(_)
                    )
                }),
            });
        }
        // Per endpoint: packets and flows received, by client.
        let mut per: BTreeMap<(usize, IpAddr), EndpointTally> = BTreeMap::new();
        for h in &self.hits {
            let e = per.entry((h.pod, h.ip)).or_default();
            e.0 += 1;
            e.1.insert((h.src, h.proto));
            *e.2.entry(h.client).or_default() += 1;
        }
        for (key, &id) in &self.pod_ids {
            let pod = &self.pods[id];
            let mut any = false;
            for ip in &pod.ips {
                let Some((pk, fl, by)) = per.get(&(id, *ip)) else {
                    continue;
                };
                any = true;
                out.endpoints.push(EndpointSummary {
                    endpoint: key.clone(),
                    ip: *ip,
                    packets: *pk,
                    flows: fl.len() as u64,
                    from: by
                        .iter()
                        .map(|(c, n)| FromClient {
                            client: self.clients[*c].def.name.clone(),
                            packets: *n,
                        })
                        .collect(),
                });
            }
            if !any && pod.stack.servers.len() + pod.state.def.apps.len() > 0 {
                out.endpoints.push(EndpointSummary {
                    endpoint: key.clone(),
                    ip: pod.state.def.ip,
                    packets: 0,
                    flows: 0,
                    from: Vec::new(),
                });
            }
        }
        out
    }

    /// The summary table's text.
    pub(super) fn summary_text(&self, s: &Summary) -> String {
        let pod_width = (!self.pods.is_empty())
            .then(|| self.pod_ids.keys().map(|k| k.len()).max().unwrap_or(8));
        s.text(pod_width)
    }
}

/// One client's figures over a whole run: what the summary table shows, plus the time its
/// target was blackholed. `nfsim sweep` gathers their distributions across seeds.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ClientFigures {
    /// The client's name.
    pub name: String,
    /// Queries (or TCP exchanges) started.
    pub sent: u64,
    /// Answered.
    pub answered: u64,
    /// Failed: timed out or refused.
    pub failed: u64,
    /// Timed out.
    pub timed_out: u64,
    /// Refused: an ICMP error, a reset, or no free local port.
    pub refused: u64,
    /// Simulated time during which the client got no answers, in nanoseconds: each run of
    /// consecutive failed queries counts from the first one's send to the send of the next
    /// answered query (or the end of the run if none was answered after it).
    pub blackholed_ns: u64,
}

impl ClientFigures {
    /// The figures of one client's `records` for a run ending at `end`.
    pub fn of(name: &str, records: &[QueryRecord], end: SimTime) -> ClientFigures {
        let count =
            |f: &dyn Fn(&QueryOutcome) -> bool| records.iter().filter(|q| f(&q.outcome)).count();
        let mut blackholed_ns = 0u64;
        let mut streak_from: Option<SimTime> = None;
        for q in records {
            match q.outcome {
                QueryOutcome::Answered(_) => {
                    if let Some(from) = streak_from.take() {
                        blackholed_ns += q.sent_at.as_nanos().saturating_sub(from.as_nanos());
                    }
                }
                o if o.failed() => {
                    streak_from.get_or_insert(q.sent_at);
                }
                _ => {}
            }
        }
        if let Some(from) = streak_from {
            blackholed_ns += end.as_nanos().saturating_sub(from.as_nanos());
        }
        ClientFigures {
            name: name.to_string(),
            sent: records.len() as u64,
            answered: count(&|o| matches!(o, QueryOutcome::Answered(_))) as u64,
            failed: count(&|o| o.failed()) as u64,
            timed_out: count(&|o| matches!(o, QueryOutcome::TimedOut(_))) as u64,
            refused: count(&|o| {
                matches!(
                    o,
                    QueryOutcome::IcmpError(..) | QueryOutcome::Reset(_) | QueryOutcome::NoPort(_)
                )
            }) as u64,
            blackholed_ns,
        }
    }
}

/// Packets, distinct flows and packets per client that reached one endpoint address.
type EndpointTally = (u64, BTreeSet<(SocketAddr, u8)>, BTreeMap<usize, u64>);
