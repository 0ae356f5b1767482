//! `kubeProxy.syncCost: modelled`: a sync takes the calibrated time of its restore
//! (docs/kube-proxy-model.md §5a), so an endpoint change reaches the rules late; `instant`
//! keeps today's syncs, which take no time.

#[path = "../benches/support/rollout.rs"]
mod rollout;
#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::cluster::sim::{RunResult, What};
use nfsim::scenario::load_str;
use scenario_run::run_scenario;

const UPDATE_NS: u64 = 10_000_000_000;
/// `controlPlane.watchDelay`'s default: kube-proxy sees the change 100 ms after it.
const SEEN_NS: u64 = UPDATE_NS + 100_000_000;

fn run(services: usize, mode: &str, cost: &str) -> RunResult {
    let text = rollout::rollout_scenario(services, mode, cost);
    let sc = load_str("rollout.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    run_scenario(sc, false)
}

/// When the first query was DNAT'd to web-new.
fn first_to_new(r: &RunResult) -> u64 {
    r.timeline
        .iter()
        .find_map(|e| match &e.what {
            What::Dnat { to, .. } if to == "10.244.1.11:8080" => Some(e.t_ns),
            _ => None,
        })
        .expect("a query reached web-new")
}

/// The sync after the change: (instant logged, restore ns, cleanup ns).
fn sync_after_change(r: &RunResult) -> (u64, u64, u64) {
    r.timeline
        .iter()
        .find_map(|e| match &e.what {
            What::Sync { took, .. } if e.t_ns >= SEEN_NS => {
                let t = took.expect("a modelled sync says how long it took");
                Some((e.t_ns, t.restore_ns, t.cleanup_ns))
            }
            _ => None,
        })
        .expect("a sync after the change")
}

#[test]
fn an_endpoint_change_reaches_the_rules_when_the_modelled_restore_ends() {
    for mode in ["iptables", "nftables"] {
        let r = run(300, mode, "modelled");
        let (at, restore, _) = sync_after_change(&r);
        // The sync started when kube-proxy saw the change and the rules went in when the
        // restore ended: the timeline's sync line is that instant.
        assert_eq!(at, SEEN_NS + restore, "{mode}");
        let first = first_to_new(&r);
        assert!(
            (at..at + 10_000_000).contains(&first),
            "{mode}: first query to web-new at {first} ns, rules in at {at} ns"
        );
        // A partial sync of 300 Services costs tens of milliseconds on the calibration
        // machine (iptables-restore's start-up alone is over 10 ms).
        assert!(restore > 10_000_000, "{mode}: restore took {restore} ns");
        let line = r
            .timeline
            .iter()
            .find(|e| e.t_ns == at && matches!(e.what, What::Sync { .. }))
            .map(|e| e.line())
            .unwrap();
        assert!(
            line.contains(", sync took ") && line.contains("(modelled"),
            "{line}"
        );
        assert!(r.passed(), "{mode}: {:?}", r.results);
    }
}

#[test]
fn instant_syncs_put_the_new_endpoint_in_when_kube_proxy_sees_it() {
    let r = run(300, "iptables", "instant");
    let first = first_to_new(&r);
    assert!((SEEN_NS..SEEN_NS + 10_000_000).contains(&first), "{first}");
    assert!(r.timeline.iter().all(|e| match &e.what {
        What::Sync { took, .. } => took.is_none(),
        _ => true,
    }));
}

#[test]
fn a_bigger_ruleset_makes_the_lag_longer() {
    let small = sync_after_change(&run(100, "iptables", "modelled")).1;
    let big = sync_after_change(&run(1000, "iptables", "modelled")).1;
    assert!(big > small, "{big} <= {small}");
}

const STORM: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/scenarios/sync-cost-dns-storm.yaml"
);

/// Runs the DNS storm scenario with `from` replaced by `to` in its text: when the sidecar's
/// entry to coredns-b was deleted, and the run.
fn storm(from: &str, to: &str) -> (u64, RunResult) {
    let text = std::fs::read_to_string(STORM).unwrap().replace(from, to);
    let sc = load_str(STORM, &text).unwrap_or_else(|e| panic!("{e}"));
    let r = run_scenario(sc, true);
    let deleted = r
        .timeline
        .iter()
        .find_map(|e| match &e.what {
            What::CleanupDelete { line, .. }
                if line.contains("src=10.244.1.3 ") && line.contains("src=10.244.1.11 ") =>
            {
                Some(e.t_ns)
            }
            _ => None,
        })
        .expect("the sidecar's entry to coredns-b was deleted");
    (deleted, r)
}

#[test]
fn per_entry_deletes_keep_a_stale_entry_longer_than_batched_ones() {
    let (before_fix, r) = storm("release: v1.35", "release: v1.35");
    assert!(r.passed(), "{:?}", r.results);
    let (after_fix, r136) = storm("release: v1.35", "release: v1.36");
    // The second change waits for the first sync, whose reconciler deletes coredns-a's
    // thousands of entries one request each before #135511 and batched after.
    assert!(
        before_fix > after_fix + 10_000_000,
        "v1.35 deleted it at {before_fix} ns, v1.36 at {after_fix} ns"
    );
    assert!(
        !r136.passed(),
        "the scenario's expectations are sharp enough to tell"
    );
    // Instant syncs: the second change's sync runs as soon as kube-proxy sees it (20.15 s).
    let (instant, _) = storm("syncCost: modelled", "syncCost: instant");
    assert_eq!(instant, 20_150_000_000);
    assert!(after_fix > instant);
}

/// Prints the generated scenario (for the shipped twins): `cargo test --test sync_cost
/// print_rollout -- --ignored --nocapture`.
#[test]
#[ignore]
fn print_rollout() {
    for mode in ["iptables", "nftables"] {
        println!("{}", rollout::rollout_scenario(3, mode, "modelled"));
    }
}

/// `syncCost: modelled` with a cleanup whose deletes the model does not charge (v1.31's
/// event-based cleanup, an external program) is warned about at its `syncCost` line; a reconciler
/// release it charges is not.
#[test]
fn modelled_syncs_warn_where_the_cleanups_deletes_are_not_charged() {
    let text = std::fs::read_to_string(STORM).unwrap();
    let warned = |release: &str| {
        let t = text.replace("release: v1.35", release);
        let sc = load_str(STORM, &t).unwrap_or_else(|e| panic!("{e}"));
        sc.warnings
            .iter()
            .filter(|w| w.message.contains("syncCost: modelled"))
            .map(|w| (w.line, w.message.clone()))
            .collect::<Vec<_>>()
    };
    assert!(warned("release: v1.35").is_empty());
    let w = warned("release: v1.31");
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(w[0].1.contains("v1.31's event-based"), "{w:?}");
    let kp_line = text
        .lines()
        .position(|l| l.trim_start().starts_with("syncCost:"))
        .unwrap() as u64
        + 1;
    assert_eq!(w[0].0, kp_line, "{w:?}");
}
