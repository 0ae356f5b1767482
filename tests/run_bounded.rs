//! A long run keeps what the summary and the expectations need, not every query and packet:
//! a client's finished queries and the packets that reach endpoints become running totals as
//! the run goes, and the verdicts and the summary are what they would be with everything kept.

use nfsim::cluster::sim::{RunOptions, RunResult, Simulation};
use sim_core::{SimDuration, SimTime};

const GOOD: &str = include_str!("fixtures/scenario/minimal.yaml");

/// The minimal scenario with a client sending every 10 ms for 2 minutes (12,000 queries),
/// and checks over windows that end before the run does, at instants inside it and at the
/// end.
fn busy() -> nfsim::scenario::Scenario {
    let text = GOOD
        .replace("duration: 1m", "duration: 2m")
        .replace("interval: 10s", "interval: 10ms")
        .replace(
            "  - client: {name: c, sent: 6}\n",
            "  - {name: window, at: 90s, client: {name: c, from: 30s, to: 60s, sent: 3000, answered: 3000, failed: 0}}\n  \
             - {name: so far, at: 45s, client: {name: c, sent: 4500, answered: \">= 4499\"}}\n  \
             - {name: packets in the window, at: 90s, endpoint: {pod: default/dns, client: c, from: 30s, to: 60s, packets: 3000, flows: \">= 2800\"}}\n  \
             - {name: spread, endpoints: {client: c, from: 10s, share: {default/dns: \"1\"}}}\n  \
             - {name: all, client: {name: c, sent: 12000, answered: 12000, timedOut: 0}}\n",
        );
    nfsim::scenario::load_str("busy.yaml", &text).unwrap()
}

/// Runs `scenario()` in 10 s steps, asserting at most 256 query records are ever kept, then
/// again keeping every query: the two runs' verdicts, summaries and client figures must be
/// equal, and the second must have kept all 12,000 records. Returns the folding run's result.
fn folds_yet_counts_everything(scenario: fn() -> nfsim::scenario::Scenario) -> RunResult {
    let mut sim = Simulation::builder(scenario())
        .options(RunOptions::default())
        .build()
        .unwrap();
    let mut most = 0;
    for s in (10..=120).step_by(10) {
        sim.run_until(SimTime::ZERO + SimDuration::from_secs(s))
            .unwrap();
        most = most.max(sim.queries_kept());
    }
    // 12,000 queries sent, answered within a millisecond: a handful in flight at a time, and
    // the log's front is taken once it holds twice what it kept after the last take.
    assert!(most <= 256, "kept {most} query records");
    let r = sim.finish().unwrap();
    for x in &r.results {
        assert!(x.passed, "{}: {}", x.name, x.detail);
    }
    assert_eq!(r.results.len(), 5);
    let c = &r.summary_data.clients[0];
    assert_eq!((c.sent, c.answered, c.in_flight), (12_000, 12_000, 0));
    assert_eq!(r.clients[0].sent, 12_000);
    assert_eq!(r.clients[0].blackholed_ns, 0);

    // Keeping every query gives the same verdicts, summary and figures.
    let mut all = Simulation::builder(scenario())
        .options(RunOptions::default())
        .keep_queries(true)
        .build()
        .unwrap();
    all.run_until(SimTime::ZERO + SimDuration::from_secs(120))
        .unwrap();
    assert_eq!(all.queries_kept(), 12_000);
    assert_eq!(all.client_records("c").map(|r| r.len()), Some(12_000));
    let k = all.finish().unwrap();
    assert_eq!(k.results, r.results);
    assert_eq!(k.summary, r.summary);
    assert_eq!(k.clients, r.clients);
    r
}

#[test]
fn a_busy_client_keeps_few_records_and_every_verdict_counts_them_all() {
    let r = folds_yet_counts_everything(busy);
    assert_eq!(r.summary_data.endpoints[0].packets, 12_000);
}

/// A web pod and a keep-alive TCP client on two connections sending every 10 ms for 2 minutes
/// (12,000 requests on two connections that stay open the whole run), with the same kinds of
/// checks.
fn keepalive() -> nfsim::scenario::Scenario {
    let text = "name: t\nduration: 2m\nnodes:\n  - name: n1\n    address: 192.168.0.1\n    podCIDR: 10.244.1.0/24\n\
pods:\n  - name: web\n    node: n1\n    ip: 10.244.1.5\n    labels: {app: web}\n    apps: [{tcpServer: {port: 8080}}]\n\
services:\n  - metadata: {name: web, namespace: default}\n    spec:\n      clusterIP: 10.96.0.80\n      selector: {app: web}\n      ports: [{protocol: TCP, port: 80, targetPort: 8080}]\n\
clients:\n  - name: c\n    node: n1\n    tcp: {target: default/web, interval: 10ms, connection: {keepAlive: true, parallel: 2}}\n\
expectations:\n  \
- {name: window, at: 90s, client: {name: c, from: 30s, to: 60s, sent: 3000, answered: 3000, failed: 0}}\n  \
- {name: so far, at: 45s, client: {name: c, sent: 4500, answered: \">= 4499\"}}\n  \
- {name: requests in the window, at: 90s, endpoint: {pod: default/web, client: c, from: 30s, to: 60s, packets: \">= 3000\", flows: 2}}\n  \
- {name: spread, endpoints: {client: c, from: 10s, share: {default/web: \"1\"}}}\n  \
- {name: all, client: {name: c, sent: 12000, answered: 12000, timedOut: 0}}\n";
    nfsim::scenario::load_str("keepalive.yaml", text).unwrap()
}

#[test]
fn a_keepalive_client_keeps_few_request_records_while_its_connections_stay_open() {
    // Its two connections stay open until the end, yet an answered request is final: the
    // front of the log is taken all the same.
    folds_yet_counts_everything(keepalive);
}
