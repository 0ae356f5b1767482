//! The reconciler harness: a stale-conntrack cleanup ([`super::Reconciler`]) driven through
//! churn while UDP clients keep sending, and what the clients lost.
//!
//! The harness writes a scenario ([`Harness::scenario_yaml`]) and runs it on the ordinary
//! driver: two nodes; a UDP Service `default/dns` at `10.96.0.10:53` whose `endpoints` pods
//! (`dns-0`, `dns-1`, … on node-1, each serving ports 53 and 5353) come from its selector;
//! on node-2 a pod `client` with three clients querying every `interval`:
//!
//! - `fixed`: always from source port 40000 (a sidecar DNS proxy; the incident's client);
//! - `per-query`: a new ephemeral port per query;
//! - `other-port`: from port 40001 to `10.96.0.10:5000`, a port the Service does not have
//!   (nothing answers; its entry is what a reconciler keyed by IP alone deletes);
//! - with [`Harness::one_way`], `one-way`: from port 40002 to `10.96.0.10:53`, a one-way
//!   sender (a statsd or syslog agent, `oneWay: true`): it never reads an answer, so its entry
//!   never depends on one, and every send refreshes it. nfsim sees whether each send reached
//!   a listening process ([`OneWayReport`]).
//!
//! The [`Churn`] becomes timed events: `Kill` → `deletePod` (1 s grace), `RestartInPlace` →
//! `oomKill` with a restart 120 s later (a crash loop), `Recreate` → `deletePod` with `recreate` on a new IP,
//! `ScaleToZeroAndBack` → `scale` to 0 then back after the next gap, `ChangeTargetPort` →
//! `updateService` switching `targetPort` between 53 and 5353, `DeleteAndRecreate` →
//! `deleteService` then `createService` 5 s later.
//!
//! The [`HarnessReport`] says, from the run itself: each client's blackholed seconds (runs of
//! unanswered queries, [`crate::cluster::sim::ClientFigures`]), and what the cleanup did:
//! list and delete calls, entries deleted, *valid* entries deleted (their endpoint was still
//! answering) and *unrelated* ones (to the Service IP on a port it does not have); for the
//! one-way sender, the seconds its sends vanished without a trace (carried by a stale entry
//! to an address where nothing listens) and the seconds after each scale-back until a send
//! was delivered again.

use super::strategies::{Churn, ChurnOp};
use super::{Cluster, Reconciler, Release, SimTime, TestkitError};
use crate::cluster::apps::{QueryOutcome, QueryRecord};
use crate::cluster::sim::CleanupTally;
use std::fmt::Write as _;

/// What to run.
#[derive(Clone, Debug)]
pub struct Harness {
    /// The seed.
    pub seed: u64,
    /// Endpoint pods at the start (1..=50).
    pub endpoints: usize,
    /// Seconds between a client's queries.
    pub interval_secs: u64,
    /// The churn, starting 30 s into the run.
    pub churn: Churn,
    /// Seconds to run on after the last change.
    pub settle_secs: u64,
    /// Also run the one-way sender `one-way` (see the module documentation).
    pub one_way: bool,
}

/// What the one-way sender's sends became. nfsim sees each datagram's fate; the sender
/// itself learns only of refusals (an ICMP error on its connected socket).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OneWayReport {
    /// Sends made.
    pub sent: u64,
    /// Sends that reached a process listening on the Service's target port.
    pub delivered: u64,
    /// Sends refused: kube-proxy's REJECT rule for a Service without endpoints (or a closed
    /// port) answered with ICMP port unreachable, which the connected socket reports.
    pub refused: u64,
    /// Sends that vanished: neither delivered nor refused within the client's timeout (a
    /// stale entry DNAT'd them to a pod IP no longer routed).
    pub lost: u64,
    /// Client-seconds blackholed: each run of lost sends counts from the first one's send to
    /// the next send that was not lost (or the end of the run).
    pub blackholed_secs: f64,
    /// For each scale back from zero: the seconds from the scale-back event to the first
    /// send delivered at or after it (to the end of the run if none was); summed.
    pub after_back_secs: f64,
}

impl OneWayReport {
    /// The figures of a one-way sender's `records` for a run ending at `end_secs`, with the
    /// scale-back instants `backs` (seconds).
    fn of(records: &[QueryRecord], end_secs: f64, backs: &[u64]) -> OneWayReport {
        let secs = |t: SimTime| t.as_nanos() as f64 / 1e9;
        let lost = |o: &QueryOutcome| matches!(o, QueryOutcome::TimedOut(_));
        let mut r = OneWayReport {
            sent: records.len() as u64,
            ..OneWayReport::default()
        };
        let mut streak: Option<f64> = None;
        for q in records {
            match q.outcome {
                QueryOutcome::Answered(_) => r.delivered += 1,
                QueryOutcome::IcmpError(..) => r.refused += 1,
                QueryOutcome::TimedOut(_) => r.lost += 1,
                _ => {}
            }
            if lost(&q.outcome) {
                streak.get_or_insert(secs(q.sent_at));
            } else if let Some(from) = streak.take() {
                r.blackholed_secs += secs(q.sent_at) - from;
            }
        }
        if let Some(from) = streak {
            r.blackholed_secs += end_secs - from;
        }
        for &b in backs {
            let b = b as f64;
            let first = records
                .iter()
                .filter(|q| secs(q.sent_at) >= b)
                .find(|q| matches!(q.outcome, QueryOutcome::Answered(_)))
                .map_or(end_secs, |q| secs(q.sent_at));
            r.after_back_secs += first - b;
        }
        r
    }
}

/// What a harness run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct HarnessReport {
    /// Each client's name and blackholed seconds.
    pub clients: Vec<(String, f64)>,
    /// The blackholed seconds of the clients of the Service's port (`fixed` and
    /// `per-query`; `other-port` is never answered by design and is left out, and the
    /// one-way sender has its own figures in [`HarnessReport::one_way`]).
    pub blackholed_client_secs: f64,
    /// What the cleanup did.
    pub cleanup: CleanupTally,
    /// The timeline's hash (same inputs, same hash).
    pub timeline_hash: String,
    /// The one-way sender's figures ([`Harness::one_way`]).
    pub one_way: Option<OneWayReport>,
}

impl HarnessReport {
    /// One client's blackholed seconds (0 for an unknown name).
    pub fn blackholed(&self, client: &str) -> f64 {
        self.clients
            .iter()
            .find(|(n, _)| n == client)
            .map_or(0.0, |(_, s)| *s)
    }
}

impl Harness {
    /// A harness with `endpoints` endpoints, queries every 10 s, 300 s of settling.
    pub fn new(seed: u64, endpoints: usize, churn: Churn) -> Harness {
        Harness {
            seed,
            endpoints,
            interval_secs: 10,
            churn,
            settle_secs: 300,
            one_way: false,
        }
    }

    /// The same harness with the one-way sender `one-way` added.
    pub fn with_one_way(mut self) -> Harness {
        self.one_way = true;
        self
    }

    fn pod_yaml(i: usize, ip: &str) -> String {
        format!(
            "  - name: dns-{i}\n    labels: {{app: dns}}\n    node: node-1\n    ip: {ip}\n    readinessProbe: {{periodSeconds: 2, failureThreshold: 1}}\n    apps:\n      - udpServer: {{port: 53, serviceTime: 1ms}}\n      - udpServer: {{port: 5353, serviceTime: 1ms}}\n"
        )
    }

    fn service_yaml(indent: &str, target_port: u16) -> String {
        format!(
            "{indent}apiVersion: v1\n{indent}kind: Service\n{indent}metadata: {{name: dns, namespace: default}}\n{indent}spec:\n{indent}  clusterIP: 10.96.0.10\n{indent}  selector: {{app: dns}}\n{indent}  ports: [{{name: dns, protocol: UDP, port: 53, targetPort: {target_port}}}]\n"
        )
    }

    /// The scenario the harness runs with `release` (see the module documentation).
    pub fn scenario_yaml(&self, release: Release) -> Result<String, TestkitError> {
        Ok(self.build(release)?.0)
    }

    /// The scenario, and the instants (seconds) at which the endpoints scale back from zero.
    fn build(&self, release: Release) -> Result<(String, Vec<u64>), TestkitError> {
        let k = self.endpoints;
        if !(1..=50).contains(&k) {
            return Err(TestkitError::Input {
                what: format!("harness endpoints {k}"),
                message: "expected 1 to 50 endpoint pods".into(),
            });
        }
        let mut events = String::new();
        let mut t = 30u64;
        let mut alive: Vec<usize> = (0..k).collect();
        let mut next_ip = 100usize;
        let mut target_port = 53u16;
        let mut service_exists = true;
        let mut scaled_down = false;
        let mut backs: Vec<u64> = Vec::new();
        for (gap, op) in &self.churn.steps {
            t += gap;
            if scaled_down {
                backs.push(t);
                let _ = writeln!(
                    events,
                    "  - at: {t}s\n    scale: {{selector: {{app: dns}}, replicas: {}}}",
                    alive.len()
                );
                scaled_down = false;
                continue;
            }
            match op {
                ChurnOp::Kill(i) if alive.len() > 1 => {
                    let p = alive.remove(i % alive.len());
                    let _ = writeln!(
                        events,
                        "  - at: {t}s\n    deletePod: {{pod: dns-{p}, gracePeriod: 1s}}"
                    );
                }
                ChurnOp::RestartInPlace(i) if !alive.is_empty() => {
                    let p = alive[i % alive.len()];
                    let _ = writeln!(
                        events,
                        "  - at: {t}s\n    oomKill: {{pod: dns-{p}, restartAfter: 120s}}"
                    );
                }
                ChurnOp::Recreate(i) if !alive.is_empty() => {
                    let p = alive[i % alive.len()];
                    let ip = format!("10.244.1.{}", next_ip);
                    next_ip += 1;
                    let _ = writeln!(
                        events,
                        "  - at: {t}s\n    deletePod: {{pod: dns-{p}, gracePeriod: 1s, recreate: {{ip: {ip}, node: node-1, after: 2s}}}}"
                    );
                }
                ChurnOp::ScaleToZeroAndBack if !alive.is_empty() => {
                    let _ = writeln!(
                        events,
                        "  - at: {t}s\n    scale: {{selector: {{app: dns}}, replicas: 0, gracePeriod: 1s}}"
                    );
                    scaled_down = true;
                }
                ChurnOp::ChangeTargetPort if service_exists => {
                    target_port = if target_port == 53 { 5353 } else { 53 };
                    let _ = write!(
                        events,
                        "  - at: {t}s\n    updateService:\n{}",
                        Harness::service_yaml("      ", target_port)
                    );
                }
                ChurnOp::DeleteAndRecreate if service_exists => {
                    let _ = writeln!(events, "  - at: {t}s\n    deleteService: default/dns");
                    let _ = write!(
                        events,
                        "  - at: {}s\n    createService:\n{}",
                        t + 5,
                        Harness::service_yaml("      ", target_port)
                    );
                    t += 5;
                    service_exists = true;
                }
                _ => {}
            }
        }
        if scaled_down {
            t += 30;
            backs.push(t);
            let _ = writeln!(
                events,
                "  - at: {t}s\n    scale: {{selector: {{app: dns}}, replicas: {}}}",
                alive.len()
            );
        }
        let duration = t + self.settle_secs;
        let pods: String = (0..k)
            .map(|i| Harness::pod_yaml(i, &format!("10.244.1.{}", 10 + i)))
            .collect();
        let iv = self.interval_secs;
        let client = |name: &str, target: &str, port: &str| {
            format!(
                "  - name: {name}\n    pod: client\n    udp: {{target: \"{target}\", interval: {iv}s, sourcePort: {port}, timeout: 2s, connected: false}}\n"
            )
        };
        let mut y = format!(
            "name: reconciler-harness\nseed: {seed}\nduration: {duration}s\nsysctls:\n  net.netfilter.nf_conntrack_udp_timeout: 30\n  net.netfilter.nf_conntrack_udp_timeout_stream: 120\nnodes:\n  - {{name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}}\n  - {{name: node-2, address: 192.168.0.12, podCIDR: 10.244.2.0/24}}\npods:\n{pods}  - {{name: client, labels: {{app: client}}, node: node-2, ip: 10.244.2.9}}\nservices:\n{svc}kubeProxy: {{release: {release}, minSyncPeriod: 1s, syncPeriod: 30s}}\ncontrolPlane: {{endpointSliceDelay: 1s, watchDelay: 100ms}}\nclients:\n",
            seed = self.seed,
            svc = Harness::service_yaml("    ", 53).replacen("    ", "  - ", 1),
            release = release.name(),
        );
        y.push_str(&client("fixed", "10.96.0.10:53", "40000"));
        y.push_str(&client("per-query", "10.96.0.10:53", "perQuery"));
        y.push_str(&client("other-port", "10.96.0.10:5000", "40001"));
        if self.one_way {
            y.push_str(
                &client("one-way", "10.96.0.10:53", "40002")
                    .replace("connected: false}", "connected: true, oneWay: true}"),
            );
        }
        if !events.is_empty() {
            y.push_str("events:\n");
            y.push_str(&events);
        }
        Ok((y, backs))
    }

    /// Runs the harness with a release's cleanup.
    pub fn run(&self, release: Release) -> Result<HarnessReport, TestkitError> {
        let (yaml, backs) = self.build(release)?;
        let sc = crate::scenario::load_str("reconciler-harness.yaml", &yaml)?;
        Harness::measure(Cluster::from_scenario(sc)?, &backs)
    }

    /// Runs the harness with a reconciler of your own in every node's kube-proxy
    /// (`make(node_name)` builds each node's).
    pub fn run_with(
        &self,
        make: impl FnMut(&str) -> Box<dyn Reconciler> + 'static,
    ) -> Result<HarnessReport, TestkitError> {
        let (yaml, backs) = self.build(Release::NONE)?;
        let sc = crate::scenario::load_str("reconciler-harness.yaml", &yaml)?;
        Harness::measure(Cluster::with_cleanup(sc, make)?, &backs)
    }

    fn measure(mut c: Cluster, backs: &[u64]) -> Result<HarnessReport, TestkitError> {
        c.run_until(SimTime::MAX)?;
        let tally = c.simulation().cleanup_tally();
        let hash = c.timeline_hash();
        let end_secs = c.simulation().scenario().duration.as_nanos() as f64 / 1e9;
        let one_way = c
            .simulation()
            .client_records("one-way")
            .map(|r| OneWayReport::of(r, end_secs, backs));
        let result = c.finish()?;
        let clients: Vec<(String, f64)> = result
            .clients
            .iter()
            .map(|f| (f.name.clone(), f.blackholed_ns as f64 / 1e9))
            .collect();
        Ok(HarnessReport {
            blackholed_client_secs: clients
                .iter()
                .filter(|(n, _)| n == "fixed" || n == "per-query")
                .map(|(_, s)| s)
                .sum(),
            clients,
            cleanup: tally,
            timeline_hash: hash,
            one_way,
        })
    }
}
