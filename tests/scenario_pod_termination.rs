//! Pods terminate as the kubelet and their process do it: `kind-delete-coredns.yaml` and its
//! v1.31 twin, timeline to the second, and the termination words (`preset`, `termination`)
//! read and refused as documented.

#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::cluster::sim::RunResult;
use nfsim::scenario::{load_file, load_str};
use scenario_run::run_scenario;

fn run(file: &str) -> RunResult {
    let path = format!("{}/scenarios/{file}", env!("CARGO_MANIFEST_DIR"));
    run_scenario(load_file(&path).unwrap(), true)
}

/// The timeline's pod, endpoint and cleanup lines and the dig outcomes from the deletion on
/// (0:59) to 1:21, shortened to their time and first words.
fn termination_timeline(r: &RunResult) -> Vec<String> {
    r.timeline
        .iter()
        .filter(|e| (59_000_000_000..=81_000_000_000).contains(&e.t_ns))
        .map(|e| e.line())
        .filter(|l| {
            l.contains(" pod ")
                || l.contains(" endpoints ")
                || l.contains("cleanup deleted")
                || l.contains("[NEW]")
                || l.contains("answered by")
                || l.contains("TIMED OUT")
        })
        .map(|l| short(&l))
        .collect()
}

/// A line's first 100 characters (a conntrack tuple is checked by the expectations).
fn short(l: &str) -> String {
    l.chars()
        .take(100)
        .collect::<String>()
        .trim_end()
        .to_string()
}

fn shorts(want: &[&str]) -> Vec<String> {
    want.iter().map(|l| short(l)).collect()
}

// The client is the `dig:` loop the measurement ran (`while :; do dig …; sleep 10; done`): a run
// starts 10 s after the previous one ended, so the start drifts by each run's ~1.1 ms (7 ms
// by run #6), and after a run that times out (3 tries of 5 s) the next starts 25 s after it.

#[test]
fn deleting_coredns_on_v1_37_replaces_the_entry_after_the_lameduck_and_no_query_fails() {
    let r = run("kind-delete-coredns.yaml");
    let got = termination_timeline(&r);
    let want = [
        "00:00:59.000  pod kube-system/coredns-b: deleted; terminating with grace period 30s",
        "00:00:59.000  pod kube-system/coredns-b: SIGTERM: the process keeps serving for 5s (lameduck), then exits",
        "00:01:00.000  endpoints kube-system/kube-dns: 10.244.0.2, 10.244.0.3 (not ready, serving, terminating)",
        "00:01:00.007  dig: query #6 answered by 10.96.0.10:53 in 1ms",
        "00:01:04.000  pod kube-system/coredns-b: container exited",
        // controlPlane.podStopDelay: 4s (fitted to the measurement, not sourced).
        "00:01:08.000  pod kube-system/coredns-b: not Ready",
        "00:01:09.000  endpoints kube-system/kube-dns: 10.244.0.2, 10.244.0.3 (not ready, not serving, terminating",
        "00:01:09.000  pod kube-system/coredns-b: gone; IP 10.244.0.3 no longer routed",
        "00:01:09.100  kube-proxy kind-control-plane: cleanup deleted udp      17 110 src=10.244.0.5 dst=10.96.0",
        "00:01:10.000  endpoints kube-system/kube-dns: 10.244.0.2",
        "00:01:10.007  ct kind-control-plane:     [NEW] udp      17 30 src=10.244.0.5 dst=10.96.0.10 sport=40000 d",
        "00:01:10.008  dig: query #7 answered by 10.96.0.10:53 in 1ms",
        "00:01:20.009  dig: query #8 answered by 10.96.0.10:53 in 1ms",
    ];
    assert_eq!(got, shorts(&want), "{got:#?}");
    let failed: Vec<_> = r.results.iter().filter(|x| !x.passed).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(r.results.len(), 6);
}

#[test]
fn deleting_coredns_on_v1_31_0_leaves_the_entry_to_the_gone_pod_and_dig_times_out() {
    let r = run("kind-delete-coredns-v1.31.0.yaml");
    let got = termination_timeline(&r);
    let want = [
        "00:00:59.000  pod kube-system/coredns-b: deleted; terminating with grace period 30s",
        "00:00:59.000  pod kube-system/coredns-b: SIGTERM: the process keeps serving for 5s (lameduck), then exits",
        "00:01:00.000  endpoints kube-system/kube-dns: 10.244.0.2, 10.244.0.3 (not ready, serving, terminating)",
        "00:01:00.007  dig: query #6 answered by 10.96.0.10:53 in 1ms",
        "00:01:04.000  pod kube-system/coredns-b: container exited",
        // controlPlane.podStopDelay: 4s (fitted to the measurement, not sourced).
        "00:01:08.000  pod kube-system/coredns-b: not Ready",
        "00:01:09.000  endpoints kube-system/kube-dns: 10.244.0.2, 10.244.0.3 (not ready, not serving, terminating",
        "00:01:09.000  pod kube-system/coredns-b: gone; IP 10.244.0.3 no longer routed",
        "00:01:10.000  endpoints kube-system/kube-dns: 10.244.0.2",
    ];
    assert_eq!(got, shorts(&want), "{got:#?}");
    let timed_out: Vec<String> = r
        .timeline
        .iter()
        .map(|e| e.line())
        .filter(|l| l.contains("TIMED OUT"))
        .collect();
    assert_eq!(
        timed_out,
        [
            "00:01:25.007  dig: query #7 TIMED OUT (3 tries)",
            "00:01:50.007  dig: query #8 TIMED OUT (3 tries)",
        ]
    );
    let failed: Vec<_> = r.results.iter().filter(|x| !x.passed).collect();
    assert!(failed.is_empty(), "{failed:#?}");
}

#[test]
fn without_the_fitted_pod_stop_delay_the_reconciler_deletes_at_6_1_s_and_plus_10_s_fails() {
    // What the sources alone give (controlPlane.podStopDelay 0 s, its default): not Ready at
    // the exit (+5 s), the entry deleted at +6.1 s; the measurement's "+10 s: still there"
    // then fails. That is the gap the scenario's fitted 4 s stands for.
    let path = format!(
        "{}/scenarios/kind-delete-coredns.yaml",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(path).unwrap();
    assert!(text.contains("  podStopDelay: 4s\n"));
    let r = scenario_run::run_text("kind.yaml", &text.replace("  podStopDelay: 4s\n", ""), true);
    let deleted: Vec<String> = r
        .timeline
        .iter()
        .map(|e| short(&e.line()))
        .filter(|l| l.contains("cleanup deleted") || l.contains("coredns-b: not Ready"))
        .collect();
    assert_eq!(
        deleted,
        shorts(&[
            "00:01:04.000  pod kube-system/coredns-b: not Ready",
            "00:01:05.100  kube-proxy kind-control-plane: cleanup deleted udp      17 114 src=10.244.0.5 dst=10.96.0",
        ])
    );
    let failed: Vec<&str> = r
        .results
        .iter()
        .filter(|x| !x.passed)
        .map(|x| x.name.as_str())
        .collect();
    assert_eq!(
        failed,
        [
            "+10 s: still there, to coredns-b (exited at +5 s; not Ready at +9 s, not serving at +10 s)",
            "the reconciler deletes it at +10.1 s, before the next query (+11 s)",
        ]
    );
}

const WORLD: &str = "name: t\nduration: 1m\nnodes:\n  - {name: n1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}\npods:\n";

fn world(pod: &str) -> String {
    format!("{WORLD}{pod}")
}

#[test]
fn the_coredns_preset_fills_what_the_pod_leaves_out() {
    let sc = load_str(
        "t.yaml",
        &world(
            "  - {name: dns, node: n1, ip: 10.244.1.5, preset: coredns, ports: {metrics: 9999}}\n",
        ),
    )
    .unwrap();
    let p = &sc.pods[0];
    assert_eq!(
        p.labels.get("k8s-app").map(String::as_str),
        Some("kube-dns")
    );
    assert_eq!(p.ports.get("dns"), Some(&53));
    assert_eq!(
        p.ports.get("metrics"),
        Some(&9999),
        "the pod's own port wins"
    );
    assert_eq!(p.grace_period.as_secs(), 30);
    assert_eq!(
        p.termination.on_sigterm,
        nfsim::scenario::model::OnSigterm::Lameduck(sim_core::SimDuration::from_secs(5))
    );
    assert!(p.termination.unready_on_sigterm);
    assert_eq!(p.apps.len(), 1, "a UDP server on 53");
}

#[test]
fn termination_words_are_refused_at_their_line() {
    for (pod, want) in [
        (
            "  - {name: dns, node: n1, ip: 10.244.1.5, preset: kubedns}\n",
            "t.yaml:6:51:",
        ),
        (
            "  - {name: dns, node: n1, ip: 10.244.1.5, termination: {onSigterm: lameduck}}\n",
            "lameduck: DURATION",
        ),
        (
            "  - {name: dns, node: n1, ip: 10.244.1.5, termination: {onSigterm: stop}}\n",
            "expected one of exit, lameduck, ignore",
        ),
        (
            "  - {name: dns, node: n1, ip: 10.244.1.5, termination: {onSigterm: exit, lameduck: 5s}}\n",
            "`lameduck` is for onSigterm: lameduck",
        ),
    ] {
        let e = load_str("t.yaml", &world(pod)).unwrap_err().to_string();
        assert!(e.contains(want), "{pod}: {e}");
        assert!(e.contains("t.yaml:6:"), "{pod}: {e}");
    }
}
