//! `deletePod` / `oomKill` with `endpointOf: CLIENT`: the pod the client's conntrack entry
//! points to at the event's instant, so every seed hits the pod the client uses.

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::{load_file, load_str};

fn opts() -> RunOptions {
    RunOptions {
        record_timeline: true,
        conntrack_events: false,
        progress: None,
    }
}

const FILE: &str = "scenarios/stale-dns-udp-endpoint-of.yaml";

fn text() -> String {
    std::fs::read_to_string(format!("{}/{FILE}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// For every seed the killed pod is the one the sidecar's first query was DNAT'd to, and the
/// incident reproduces; killing coredns-a by name does so only for some seeds.
#[test]
fn a_seed_sweep_kills_the_pod_the_client_uses_every_time() {
    let mut killed = std::collections::BTreeSet::new();
    for seed in 1..=6 {
        let mut sc = load_file(&format!("{}/{FILE}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        sc.seed = seed;
        let r = Simulation::new(sc, opts()).unwrap().finish().unwrap();
        let lines: Vec<String> = r.timeline.iter().map(|e| e.line()).collect();
        let first = lines
            .iter()
            .find(|l| l.contains("sidecar: #0 DNAT'd on node-2"))
            .unwrap();
        let ip = first.rsplit("-> ").next().unwrap().trim_end_matches(":53");
        let pod = if ip == "10.244.1.5" {
            "coredns-a"
        } else {
            "coredns-b"
        };
        let kill = lines.iter().find(|l| l.contains("OOMKilled")).unwrap();
        assert!(
            kill.contains(&format!("kube-system/{pod}:")),
            "seed {seed}: {first} / {kill}"
        );
        killed.insert(pod);
        assert!(r.passed(), "seed {seed}: {:?}", r.results);
    }
    assert_eq!(
        killed.len(),
        2,
        "the seeds pick both pods first: {killed:?}"
    );
}

/// Before the client's first query there is no entry to follow: the run stops with the
/// event's place and why.
#[test]
fn no_entry_at_the_event_is_an_error_at_its_place() {
    let t = text().replace("  - at: 5m\n    oomKill", "  - at: 0s\n    oomKill");
    let sc = load_str("x.yaml", &t).unwrap();
    let line = t
        .lines()
        .position(|l| l == "    oomKill: {endpointOf: sidecar}")
        .unwrap()
        + 1;
    let e = Simulation::new(sc, opts())
        .unwrap()
        .finish()
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        format!("x.yaml:{line}:27: oomKill endpointOf sidecar at 00:00:00.000: the client has no conntrack entry on node-2 then (from 10.244.2.9:40000 to 10.96.0.10:53): expected the event at an instant when the client's flow has an entry, such as after its first query")
    );
}

#[test]
fn bad_endpoint_of_events_are_located_load_errors() {
    let err = |from: &str, to: &str| {
        let t = text().replace(from, to);
        assert_ne!(t, text(), "{from}");
        load_str("x.yaml", &t).map(|_| ()).unwrap_err().to_string()
    };
    let e = err("{endpointOf: sidecar}", "{endpointOf: nobody}");
    assert!(
        e.contains("unknown client \"nobody\": expected one of sidecar"),
        "{e}"
    );
    let e = err(
        "{endpointOf: sidecar}",
        "{endpointOf: sidecar, pod: coredns-a}",
    );
    assert!(
        e.contains("give `pod` or `endpointOf`, not both, in `oomKill`"),
        "{e}"
    );
    let e = err("oomKill: {endpointOf: sidecar}", "oomKill: {}");
    assert!(
        e.contains("the event needs `pod` (a pod's name) or `endpointOf`"),
        "{e}"
    );
    let e = err(
        "oomKill: {endpointOf: sidecar}",
        "deletePod: {endpointOf: sidecar, recreate: {after: 1s}}",
    );
    assert!(
        e.contains("`recreate` needs the pod named with `pod`"),
        "{e}"
    );
    assert!(e.starts_with("x.yaml:"), "{e}");
}

/// deletePod works the same way (its grace period kept).
#[test]
fn delete_pod_endpoint_of_deletes_the_pod_behind_the_entry() {
    let t = text().replace(
        "oomKill: {endpointOf: sidecar}",
        "deletePod: {endpointOf: sidecar, gracePeriod: 0s}",
    );
    let mut sc = load_str("x.yaml", &t).unwrap();
    sc.seed = 3;
    let r = Simulation::new(sc, opts()).unwrap().finish().unwrap();
    let lines: Vec<String> = r.timeline.iter().map(|e| e.line()).collect();
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with("00:05:00.000  pod kube-system/coredns-b:")),
        "{:?}",
        lines
            .iter()
            .filter(|l| l.contains(" pod "))
            .collect::<Vec<_>>()
    );
}
