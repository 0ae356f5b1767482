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
//!   (nothing answers; its entry is what a reconciler keyed by IP alone deletes).
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
//! answering) and *unrelated* ones (to the Service IP on a port it does not have).

use super::strategies::{Churn, ChurnOp};
use super::{Cluster, Reconciler, Release, SimTime, TestkitError};
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
}

/// What a harness run measured.
#[derive(Clone, Debug, PartialEq)]
pub struct HarnessReport {
    /// Each client's name and blackholed seconds.
    pub clients: Vec<(String, f64)>,
    /// The blackholed seconds of the clients of the Service's port (`fixed` and
    /// `per-query`; `other-port` is never answered by design and is left out).
    pub blackholed_client_secs: f64,
    /// What the cleanup did.
    pub cleanup: CleanupTally,
    /// The timeline's hash (same inputs, same hash).
    pub timeline_hash: String,
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
        }
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
        for (gap, op) in &self.churn.steps {
            t += gap;
            if scaled_down {
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
        if !events.is_empty() {
            y.push_str("events:\n");
            y.push_str(&events);
        }
        Ok(y)
    }

    /// Runs the harness with a release's cleanup.
    pub fn run(&self, release: Release) -> Result<HarnessReport, TestkitError> {
        let yaml = self.scenario_yaml(release)?;
        let sc = crate::scenario::load_str("reconciler-harness.yaml", &yaml)?;
        Harness::measure(Cluster::from_scenario(sc)?)
    }

    /// Runs the harness with a reconciler of your own in every node's kube-proxy
    /// (`make(node_name)` builds each node's).
    pub fn run_with(
        &self,
        make: impl FnMut(&str) -> Box<dyn Reconciler> + 'static,
    ) -> Result<HarnessReport, TestkitError> {
        let yaml = self.scenario_yaml(Release::None)?;
        let sc = crate::scenario::load_str("reconciler-harness.yaml", &yaml)?;
        Harness::measure(Cluster::with_cleanup(sc, make)?)
    }

    fn measure(mut c: Cluster) -> Result<HarnessReport, TestkitError> {
        c.run_until(SimTime::MAX)?;
        let tally = c.simulation().cleanup_tally();
        let hash = c.timeline_hash();
        let result = c.finish()?;
        let clients: Vec<(String, f64)> = result
            .clients
            .iter()
            .map(|f| (f.name.clone(), f.blackholed_ns as f64 / 1e9))
            .collect();
        Ok(HarnessReport {
            blackholed_client_secs: clients
                .iter()
                .filter(|(n, _)| n != "other-port")
                .map(|(_, s)| s)
                .sum(),
            clients,
            cleanup: tally,
            timeline_hash: hash,
        })
    }
}
