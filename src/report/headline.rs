//! The run's headline: one line that reads as the scenario's outcome, derived from the
//! run's results, for `nfsim run`'s text (`outcome: …`), its last JSON line (`headline`) and
//! the HTML report's header.
//!
//! It is `LEAD: FACTS`:
//!
//! - LEAD: when every expectation passed, the scenario's `outcome:` (what it shows, such as
//!   `the incident reproduced`), else `all N expectations passed`; when some failed,
//!   `NOT as expected: F of N expectations failed` (followed by `(expected: OUTCOME)` when
//!   the scenario gives one); `no expectations` without any.
//! - FACTS, per client (at most [`MAX_CLIENTS`], then `and K more clients`), from its
//!   figures: with events, `sidecar lost 110 of 110 queries sent after 00:05:00.000 (oomKill
//!   kube-system/coredns-a), 0 of 10 before`; without, `sidecar lost 3 of 120 queries`; then
//!   `, blackholed 55m` when its target went unanswered for a while.
//!
//! Nothing in it is written per scenario: a scenario only names its outcome, and the numbers
//! are the run's.

use crate::cluster::sim::{ClientFigures, RunResult};
use crate::scenario::model::{Action, ClientKind, Scenario};
use sim_core::{SimDuration, SimTime};

/// How many clients the headline names; the rest are counted.
pub const MAX_CLIENTS: usize = 4;

/// What the headline needs from the scenario, taken before the run.
#[derive(Debug, Clone)]
pub struct Headline {
    outcome: Option<String>,
    first_event: Option<(SimTime, String)>,
    nouns: Vec<&'static str>,
}

/// The YAML word of an event, with the pod it names where it names one.
fn event_word(a: &Action) -> String {
    match a {
        Action::OomKill { pod, .. } => format!("oomKill {pod}"),
        Action::DeletePod { pod, .. } => format!("deletePod {pod}"),
        Action::CreatePod(p) => format!("createPod {}/{}", p.namespace, p.name),
        Action::EndpointOf(b) => format!("{} endpointOf {}", b.then.word(), b.client_name),
        Action::Readiness { pod, ready } => format!("readiness {pod} {ready}"),
        Action::UpsertService { .. } => "service".into(),
        Action::DeleteService { .. } => "deleteService".into(),
        Action::UpsertEndpointSlice(_) => "endpointSlice".into(),
        Action::DeleteEndpointSlice { .. } => "deleteEndpointSlice".into(),
        Action::Scale { .. } => "scale".into(),
        Action::KubeProxy { .. } => "kubeProxy".into(),
        Action::Conntrack { .. } => "conntrack".into(),
        Action::RebootNode { .. } => "rebootNode".into(),
        Action::IptablesRestore { .. } => "iptablesRestore".into(),
    }
}

impl Headline {
    /// The scenario's part of the headline.
    pub fn of(sc: &Scenario) -> Headline {
        Headline {
            outcome: sc.outcome.clone(),
            first_event: sc.first_change().map(|e| (e.at, event_word(&e.action))),
            nouns: sc
                .clients
                .iter()
                .map(|c| match &c.kind {
                    ClientKind::Udp { one_way: true, .. } => "datagrams",
                    ClientKind::Udp { .. } => "queries",
                    ClientKind::Tcp { .. } => "connections",
                    ClientKind::Ping { .. } => "echo requests",
                    ClientKind::Resolver(_) => "lookups",
                })
                .chain(std::iter::repeat("queries"))
                .take(sc.clients.len() + sc.pcap_clients.len())
                .collect(),
        }
    }

    /// The headline of `r`.
    pub fn text(&self, r: &RunResult) -> String {
        let n = r.results.len();
        let failed = r.results.iter().filter(|x| !x.passed).count();
        let lead = if n == 0 {
            "no expectations".to_string()
        } else if failed == 0 {
            self.outcome
                .clone()
                .unwrap_or_else(|| format!("all {n} expectations passed"))
        } else {
            let mut s = format!("NOT as expected: {failed} of {n} expectations failed");
            if let Some(o) = &self.outcome {
                s.push_str(&format!(" (expected: {o})"));
            }
            s
        };
        let facts: Vec<String> = r
            .clients
            .iter()
            .zip(&self.nouns)
            .filter(|(c, _)| c.sent > 0)
            .map(|(c, noun)| self.client_fact(c, noun))
            .collect();
        let mut shown: Vec<String> = facts.iter().take(MAX_CLIENTS).cloned().collect();
        if facts.len() > MAX_CLIENTS {
            shown.push(format!("and {} more clients", facts.len() - MAX_CLIENTS));
        }
        if shown.is_empty() {
            lead
        } else {
            format!("{lead}: {}", shown.join("; "))
        }
    }

    fn client_fact(&self, c: &ClientFigures, noun: &str) -> String {
        let mut s = match (&self.first_event, c.after_first_event) {
            (Some((at, what)), Some(after)) if after.sent > 0 => {
                let (before_sent, before_failed) = (c.sent - after.sent, c.failed - after.failed);
                let mut s = format!(
                    "{} lost {} of {} {noun} sent after {} ({what})",
                    c.name,
                    after.failed,
                    after.sent,
                    at.hms()
                );
                if before_sent > 0 {
                    s.push_str(&format!(", {before_failed} of {before_sent} before"));
                }
                s
            }
            _ => format!("{} lost {} of {} {noun}", c.name, c.failed, c.sent),
        };
        if c.blackholed_ns > 0 {
            s.push_str(&format!(
                ", blackholed {}",
                SimDuration::from_nanos(c.blackholed_ns)
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::sim::record::AfterEvent;
    use crate::cluster::sim::ExpectResult;

    const SC: &str = "
name: t
outcome: the incident reproduced
duration: 1h
nodes:
  - {name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}
pods:
  - {name: dns, node: node-1, ip: 10.244.1.5, apps: [{udpServer: {port: 53}}]}
  - {name: app, node: node-1, ip: 10.244.1.9}
clients:
  - {name: sidecar, pod: app, udp: {target: 10.244.1.5:53, interval: 30s}}
events:
  - {at: 5m, oomKill: {pod: dns}}
";

    fn result(passed: &[bool], failed_after: u64) -> RunResult {
        RunResult {
            timeline: Vec::new(),
            results: passed
                .iter()
                .map(|p| ExpectResult {
                    name: "x".into(),
                    line: 1,
                    at: "00:00:00.000".into(),
                    passed: *p,
                    detail: String::new(),
                })
                .collect(),
            summary: String::new(),
            summary_data: Default::default(),
            events: 0,
            clients: vec![ClientFigures {
                name: "sidecar".into(),
                sent: 120,
                answered: 120 - failed_after,
                failed: failed_after,
                timed_out: failed_after,
                refused: 0,
                blackholed_ns: failed_after * 30_000_000_000,
                after_first_event: Some(AfterEvent {
                    sent: 110,
                    failed: failed_after,
                }),
            }],
        }
    }

    #[test]
    fn the_headline_reads_as_the_outcome_with_the_runs_figures() {
        let sc = crate::scenario::load_str("t.yaml", SC).unwrap();
        let h = Headline::of(&sc);
        assert_eq!(
            h.text(&result(&[true, true], 110)),
            "the incident reproduced: sidecar lost 110 of 110 queries sent after 00:05:00.000 (oomKill default/dns), 0 of 10 before, blackholed 55m"
        );
        assert_eq!(
            h.text(&result(&[true, false], 0)),
            "NOT as expected: 1 of 2 expectations failed (expected: the incident reproduced): sidecar lost 0 of 110 queries sent after 00:05:00.000 (oomKill default/dns), 0 of 10 before"
        );
        let plain = crate::scenario::load_str(
            "t.yaml",
            &SC.replace("outcome: the incident reproduced\n", "")
                .replace("events:\n  - {at: 5m, oomKill: {pod: dns}}\n", ""),
        )
        .unwrap();
        let mut r = result(&[true], 3);
        r.clients[0].after_first_event = None;
        assert_eq!(
            Headline::of(&plain).text(&r),
            "all 1 expectations passed: sidecar lost 3 of 120 queries, blackholed 1m30s"
        );
        assert_eq!(
            Headline::of(&plain).text(&result(&[], 0)),
            "no expectations: sidecar lost 0 of 120 queries"
        );
    }
}
