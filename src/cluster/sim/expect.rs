//! Expectations checked at their instants, and the summary table printed at the end.

use super::*;
use record::{ClientSummary, EndpointSummary, FromClient};
use tally::{ClientTally, EndpointTally, Outcomes, Pending};

/// The significance of the `endpoints: {uniform: true}` check: the flows are called not
/// uniform when a uniform spread would give a chi-square statistic at least as large with
/// probability under 0.1 % (a fair run fails it once in a thousand seeds).
pub const UNIFORMITY_SIGNIFICANCE: f64 = 0.001;

/// A lookup this slow or slower is `stalled` (`client.lookups.stalled`): 1 s, the shortest
/// resolver timeout (`options timeout:1`), so it waited for a resend at least once.
pub const STALLED: SimDuration = SimDuration::from_secs(1);

/// Pearson's chi-square statistic of `counts` against equal expected counts, and its p-value
/// (`k - 1` degrees of freedom). Fewer than two categories: (0, 1).
pub fn chi_square_uniform(counts: &[u64]) -> (f64, f64) {
    let k = counts.len();
    let n: u64 = counts.iter().sum();
    if k < 2 || n == 0 {
        return (0.0, 1.0);
    }
    let e = n as f64 / k as f64;
    let chi2: f64 = counts.iter().map(|&o| (o as f64 - e).powi(2) / e).sum();
    (chi2, gamma_q((k - 1) as f64 / 2.0, chi2 / 2.0))
}

/// The probability that a chi-square variable with `df` degrees of freedom is at least `x`:
/// `Q(df/2, x/2)`, the regularized upper incomplete gamma function (below). `nfsim doctor`'s
/// skew test uses it too (`src/doctor/stats.rs`, which tests it against known values).
pub fn chi_square_sf(x: f64, df: u32) -> f64 {
    if df == 0 {
        return 1.0;
    }
    gamma_q(f64::from(df) / 2.0, x / 2.0)
}

/// ln Γ(x) for x > 0 (Lanczos, g = 7, nine coefficients).
fn ln_gamma(x: f64) -> f64 {
    const G: [f64; 9] = [
        0.999_999_999_999_809_9,
        676.520_368_121_885_1,
        -1_259.139_216_722_402_8,
        771.323_428_777_653_1,
        -176.615_029_162_140_6,
        12.507_343_278_686_905,
        -0.138_571_095_265_720_12,
        9.984_369_578_019_572e-6,
        1.505_632_735_149_311_6e-7,
    ];
    let x = x - 1.0;
    let mut a = G[0];
    let t = x + 7.5;
    for (i, g) in G.iter().enumerate().skip(1) {
        a += g / (x + i as f64);
    }
    0.5 * (2.0 * std::f64::consts::PI).ln() + (x + 0.5) * t.ln() - t + a.ln()
}

/// The regularised upper incomplete gamma function Q(a, x): the series for P below a + 1,
/// the continued fraction (modified Lentz) above.
fn gamma_q(a: f64, x: f64) -> f64 {
    if x <= 0.0 {
        return 1.0;
    }
    let lead = (-x + a * x.ln() - ln_gamma(a)).exp();
    if x < a + 1.0 {
        let (mut sum, mut term, mut ap) = (1.0 / a, 1.0 / a, a);
        for _ in 0..1000 {
            ap += 1.0;
            term *= x / ap;
            sum += term;
            if term.abs() < sum.abs() * 1e-15 {
                break;
            }
        }
        (1.0 - sum * lead).clamp(0.0, 1.0)
    } else {
        let tiny = 1e-300;
        let mut b = x + 1.0 - a;
        let mut c = 1.0 / tiny;
        let mut d = 1.0 / b;
        let mut h = d;
        for i in 1..1000 {
            let an = -(i as f64) * (i as f64 - a);
            b += 2.0;
            d = an * d + b;
            if d.abs() < tiny {
                d = tiny;
            }
            c = b + an / c;
            if c.abs() < tiny {
                c = tiny;
            }
            d = 1.0 / d;
            let del = d * c;
            h *= del;
            if (del - 1.0).abs() < 1e-15 {
                break;
            }
        }
        (lead * h).clamp(0.0, 1.0)
    }
}

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
                // The queries taken from the client's log so far, and those still kept.
                let mut o = match self.tally.checked(i) {
                    Pending::Client { outcomes, .. } => outcomes,
                    _ => Outcomes::default(),
                };
                for r in self.clients[*client]
                    .app
                    .records()
                    .iter()
                    .filter(|r| r.sent_at >= *from && r.sent_at < to)
                {
                    o.add(r, now);
                }
                cmp("sent", *sent, o.sent);
                cmp("answered", *answered, o.answered);
                cmp("failed", *failed, o.failed);
                cmp("timedOut", *timed_out, o.timed_out);
                cmp("refused", *refused, o.refused);
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
            Check::Endpoints { share, uniform, .. } => {
                // Distinct flows (source socket, protocol) per endpoint pod and address, as
                // they arrived (tally.rs).
                let flows = match self.tally.checked(i) {
                    Pending::Endpoints { flows, .. } => flows,
                    _ => BTreeMap::new(),
                };
                let total: usize = flows.values().map(|f| f.len()).sum();
                seen.push(format!("flows={total}"));
                if total == 0 {
                    problems.push("no flow of the client reached an endpoint".to_string());
                }
                for (ep, range, text) in share {
                    let pod = match ep {
                        EndpointRef::Pod(k) => Some(self.pod_ids.get(k).copied()),
                        EndpointRef::Ip(_) => None,
                    };
                    let ips = self.ep_ips(ep);
                    let n: usize = flows
                        .iter()
                        .filter(|((p, ip), _)| pod.map_or(ips.contains(ip), |id| id == Some(*p)))
                        .map(|(_, f)| f.len())
                        .sum();
                    let got = if total == 0 {
                        0.0
                    } else {
                        n as f64 / total as f64
                    };
                    seen.push(format!("{ep}={got:.3} ({n})"));
                    if total > 0 && !range.accepts(got) {
                        problems.push(format!(
                            "{ep} share {got:.3} ({n} of {total}), expected {text}"
                        ));
                    }
                }
                if *uniform && total > 0 {
                    let counts: Vec<u64> = flows.values().map(|f| f.len() as u64).collect();
                    let (chi2, p) = chi_square_uniform(&counts);
                    let verdict = format!(
                        "chi-square {chi2:.2} over {} endpoints, p={p:.4} (uniform unless p < {UNIFORMITY_SIGNIFICANCE})",
                        counts.len()
                    );
                    if p < UNIFORMITY_SIGNIFICANCE {
                        problems.push(format!("not uniform: {verdict}"));
                    } else {
                        seen.push(verdict);
                    }
                }
            }
            Check::Lookups {
                client,
                from,
                to,
                counts,
                max_latency,
            } => {
                let to = to.unwrap_or(now).min(now + SimDuration::from_nanos(1));
                let lookups: &[crate::dns::LookupRecord] = match &self.clients[*client].app {
                    ClientApp::Resolver(c) => c.lookups(),
                    _ => &[],
                };
                // The lookups that ended in the window (and by the check's instant).
                let ended: Vec<_> = lookups
                    .iter()
                    .filter(|r| r.ended >= *from && r.ended < to && r.ended <= now)
                    .collect();
                for (word, want) in counts {
                    let got = match *word {
                        "tcp" => ended.iter().filter(|r| r.tcp).count() as u64,
                        "stalled" => ended
                            .iter()
                            .filter(|r| r.ended.saturating_since(r.started) >= STALLED)
                            .count() as u64,
                        "namesTried" => {
                            // Every lookup's count must be in bounds: report the one that is
                            // not, or the first.
                            let bad = ended.iter().find(|r| !want.accepts(r.tried.len() as u64));
                            bad.or(ended.first()).map_or(0, |r| r.tried.len() as u64)
                        }
                        w => ended.iter().filter(|r| r.result.word() == w).count() as u64,
                    };
                    cmp(word, Some(*want), got);
                }
                let slowest = ended
                    .iter()
                    .map(|r| r.ended.saturating_since(r.started))
                    .max()
                    .unwrap_or(SimDuration::ZERO);
                seen.push(format!("maxLatency={slowest}"));
                if let Some(m) = max_latency {
                    if slowest > *m {
                        problems.push(format!("maxLatency {slowest}, expected at most {m}"));
                    }
                }
            }
            Check::ConntrackStats { node, counters } => {
                let st = *self.nodes[*node].netns.conntrack().stats();
                for (c, want) in counters {
                    cmp(c.name(), Some(*want), c.of(&st));
                }
            }
            Check::ConntrackEvent { count, .. } => {
                let w = match self.tally.checked(i) {
                    Pending::CtEvents(w) => Some(w),
                    _ => None,
                };
                let (matched, of_kind, first) =
                    w.map_or((0, 0, Vec::new()), |w| (w.matched, w.of_kind, w.seen));
                cmp("events", Some(*count), matched);
                if !count.accepts(matched) {
                    // What was seen instead: the events of that kind on the entries the filter
                    // matches, wherever they fell.
                    problems.push(if of_kind == 0 {
                        "no event of that kind on a matching entry in the whole run".to_string()
                    } else {
                        format!(
                            "{of_kind} of that kind on matching entries in the run, at {}{}",
                            first.join(", "),
                            if of_kind as usize > first.len() {
                                ", …"
                            } else {
                                ""
                            }
                        )
                    });
                }
            }
            Check::Endpoint { packets, flows, .. } => {
                let (n, distinct) = match self.tally.checked(i) {
                    Pending::Endpoint { packets, flows, .. } => (packets, flows.len()),
                    _ => (0, 0),
                };
                cmp("packets", *packets, n);
                cmp("flows", *flows, distinct as u64);
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
        let first_event = self.sc.first_change().map(|e| e.at);
        self.clients
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let mut f = ClientFigures::after(
                    &c.def.name,
                    self.tally.client(i),
                    c.app.records(),
                    self.end,
                );
                if let Some(t) = first_event {
                    let mut o = self.tally.client(i).after_first_event;
                    for q in c.app.records().iter().filter(|q| q.sent_at >= t) {
                        o.add(q, SimTime::MAX);
                    }
                    f.after_first_event = Some(super::record::AfterEvent {
                        sent: o.sent,
                        failed: o.failed,
                    });
                }
                f
            })
            .collect()
    }

    pub(super) fn summary(&self) -> Summary {
        let mut out = Summary::default();
        for (i, c) in self.clients.iter().enumerate() {
            // The queries taken from the client's log, and those still kept.
            let mut o = self.tally.client(i).outcomes;
            for q in c.app.records() {
                o.add(q, SimTime::MAX);
            }
            out.clients.push(ClientSummary {
                client: c.def.name.clone(),
                target: c.def.target_text.clone(),
                sent: o.sent,
                answered: o.answered,
                failed: o.failed,
                timed_out: o.timed_out,
                refused: o.refused,
                in_flight: o.in_flight,
            });
        }
        // Per endpoint: packets and flows received, by client (counted as they arrived).
        for (key, &id) in &self.pod_ids {
            let pod = &self.pods[id];
            let mut any = false;
            for ip in &pod.ips {
                let Some(EndpointTally {
                    packets: pk,
                    flows: fl,
                    by_client: by,
                }) = self.tally.endpoint(id, *ip)
                else {
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
    /// Of the queries sent at or after the scenario's first event, how many and how many
    /// failed (`None` without events); for the run's headline, not part of the JSON.
    #[serde(skip)]
    pub after_first_event: Option<super::record::AfterEvent>,
}

impl ClientFigures {
    /// The figures of one client's `records` for a run ending at `end`.
    pub fn of(name: &str, records: &[QueryRecord], end: SimTime) -> ClientFigures {
        ClientFigures::after(name, ClientTally::default(), records, end)
    }

    /// The figures of the queries `before` sums up followed by `records`.
    fn after(
        name: &str,
        before: ClientTally,
        records: &[QueryRecord],
        end: SimTime,
    ) -> ClientFigures {
        let (mut o, mut blackhole) = (before.outcomes, before.blackhole);
        for q in records {
            o.add(q, SimTime::MAX);
            blackhole.feed(q);
        }
        ClientFigures {
            name: name.to_string(),
            sent: o.sent,
            answered: o.answered,
            failed: o.failed,
            timed_out: o.timed_out,
            refused: o.refused,
            blackholed_ns: blackhole.total_ns(end),
            after_first_event: None,
        }
    }
}
