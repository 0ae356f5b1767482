//! The reconciler harness on each release's cleanup: the known behaviours of
//! docs/kube-proxy-model.md §6, with the numbers the harness reports (2 endpoints, queries
//! every 10 s, one change 30 s after the 30 s mark, 300 s of settling, seed 1).

use nfsim::testkit::harness::{Harness, HarnessReport};
use nfsim::testkit::strategies::{self, proptest, Churn, ChurnOp};
use nfsim::testkit::{Latest, Release};
use proptest::test_runner::{Config, TestRunner};

fn run(op: ChurnOp, release: Release) -> HarnessReport {
    let churn = Churn {
        steps: vec![(30, op)],
    };
    Harness::new(1, 2, churn).run(release).unwrap()
}

#[test]
fn a_container_crash_looping_in_place_blackholes_the_fixed_port_client_until_v1_32() {
    // coredns-like dns-0 is OOM-killed and restarts in place 120 s later (same IP): the
    // endpoint only stops serving. none and v1.31 (before #127780) never delete the entry.
    for r in [Release::NONE, Release::parse("v1.31.0").unwrap()] {
        let rep = run(ChurnOp::RestartInPlace(0), r);
        assert_eq!(rep.blackholed("fixed"), 120.0, "{r}: {rep:?}");
        assert_eq!(
            rep.blackholed("per-query"),
            0.0,
            "{r}: a new port per query recovers"
        );
        assert_eq!(rep.cleanup.deleted, 0, "{r}");
    }
    // The serving fix and every reconciler delete it at the next sync: one query lost.
    for r in [
        Release::parse("v1.31").unwrap(),
        Release::parse("v1.32.0").unwrap(),
        Release::parse("v1.34").unwrap(),
        Release::LATEST,
    ] {
        let rep = run(ChurnOp::RestartInPlace(0), r);
        assert_eq!(rep.blackholed("fixed"), 10.0, "{r}: {rep:?}");
        assert_eq!(rep.cleanup.valid_deleted, 0, "{r}");
    }
}

#[test]
fn v1_32_also_deletes_flows_to_the_service_ip_on_other_ports_and_v1_33_does_not() {
    let v132 = run(
        ChurnOp::RestartInPlace(0),
        Release::parse("v1.32.0").unwrap(),
    );
    assert_eq!(v132.cleanup.unrelated_deleted, 2, "{v132:?}");
    assert_eq!(v132.cleanup.list_calls, 6);
    assert_eq!(v132.cleanup.delete_calls, 3);
    for r in [Release::parse("v1.34").unwrap(), Release::LATEST] {
        let rep = run(ChurnOp::RestartInPlace(0), r);
        assert_eq!(rep.cleanup.unrelated_deleted, 0, "{r}: {rep:?}");
    }
    // The event-based cleanup never lists: it only acts on what changed.
    let v131 = run(ChurnOp::RestartInPlace(0), Release::parse("v1.31").unwrap());
    assert_eq!(v131.cleanup.list_calls, 0);
}

#[test]
fn a_killed_endpoint_is_cleaned_by_every_release_but_none() {
    let none = run(ChurnOp::Kill(0), Release::NONE);
    assert_eq!(none.blackholed("fixed"), 290.0, "{none:?}");
    for r in [
        Release::parse("v1.31.0").unwrap(),
        Release::parse("v1.32.0").unwrap(),
        Release::parse("v1.34").unwrap(),
        Release::LATEST,
    ] {
        let rep = run(ChurnOp::Kill(0), r);
        assert_eq!(rep.blackholed("fixed"), 0.0, "{r}: {rep:?}");
    }
}

#[test]
fn a_target_port_change_cuts_working_flows_except_in_v1_32() {
    // The old entries still reach an answering server on the old port; the releases that
    // key endpoints by IP and port (and the event-based one) delete them anyway.
    assert_eq!(
        run(
            ChurnOp::ChangeTargetPort,
            Release::parse("v1.32.0").unwrap()
        )
        .cleanup
        .valid_deleted,
        0
    );
    for r in [
        Release::parse("v1.31.0").unwrap(),
        Release::parse("v1.34").unwrap(),
        Release::LATEST,
    ] {
        let rep = run(ChurnOp::ChangeTargetPort, r);
        assert_eq!(rep.cleanup.valid_deleted, 4, "{r}: {rep:?}");
        assert_eq!(rep.blackholed_client_secs, 0.0, "{r}");
    }
}

#[test]
fn the_harness_is_deterministic_and_takes_a_reconciler_of_your_own() {
    let churn = Churn {
        steps: vec![(30, ChurnOp::RestartInPlace(1)), (40, ChurnOp::Recreate(0))],
    };
    let h = Harness::new(3, 3, churn);
    let a = h.run(Release::LATEST).unwrap();
    assert_eq!(h.run(Release::LATEST).unwrap(), a);
    let mine = h.run_with(|_| Box::new(Latest::default())).unwrap();
    assert_eq!(
        mine.cleanup, a.cleanup,
        "the same reconciler plugged in from code"
    );
    assert_eq!(mine.clients, a.clients);
}

#[test]
fn under_random_churn_the_latest_cleanup_never_touches_other_ports_and_runs_repeat_exactly() {
    let mut runner = TestRunner::new(Config {
        cases: 6,
        ..Config::default()
    });
    runner
        .run(&(strategies::churn(1..=4), 1usize..=3), |(churn, k)| {
            let h = Harness::new(1, k, churn);
            let rep = h.run(Release::LATEST).unwrap();
            assert_eq!(rep.cleanup.unrelated_deleted, 0, "{rep:?}");
            assert_eq!(
                h.run(Release::LATEST).unwrap().timeline_hash,
                rep.timeline_hash
            );
            Ok(())
        })
        .unwrap();
}

/// #139628 / #139629: a one-way fixed-port sender (statsd-like: it never reads an answer,
/// so its entry stays `[UNREPLIED]` and every send refreshes it) through a scale to zero at
/// 60 s and back at 90 s (new pod IPs). Sends every 10 s; the run ends at 390 s.
#[test]
fn a_one_way_sender_through_scale_to_zero_and_back_is_blackholed_by_none_and_v1_33_only() {
    let churn = Churn {
        steps: vec![(30, ChurnOp::ScaleToZeroAndBack)],
    };
    let h = Harness::new(1, 2, churn).with_one_way();
    let one_way = |r: Release| {
        let rep = h.run(r).unwrap();
        (rep.one_way.clone().expect("the one-way sender ran"), rep)
    };
    // No cleanup: the entry to the deleted pod's IP lives as long as the sender sends. Every
    // send from 70 s on vanishes, after the scale back as well (the new pods never receive).
    let (none, rep) = one_way(Release::NONE);
    assert_eq!(
        (none.sent, none.delivered, none.lost),
        (39, 7, 32),
        "{rep:?}"
    );
    assert_eq!(none.blackholed_secs, 320.0);
    assert_eq!(none.after_back_secs, 300.0);
    // v1.33 skips a Service without serving endpoints: while it has none, the entry still
    // carries every send to the old pod IP (lost, the sender is told nothing); the sync that
    // brings endpoints back processes the Service and deletes it.
    let (v133, rep) = one_way(Release::parse("v1.34").unwrap());
    assert_eq!((v133.lost, v133.refused), (3, 0), "{rep:?}");
    assert_eq!(v133.blackholed_secs, 30.0);
    assert_eq!(v133.after_back_secs, 10.0);
    // The event-based cleanup (≤ v1.31: endpoints that disappeared), the v1.32 reconciler
    // (no skip yet: a Service without endpoints is processed with an empty set) and the
    // newest code (#139629) delete the entry at the scale-down: the next sends hit the
    // REJECT rule and are refused (ICMP port unreachable), nothing vanishes.
    for r in [
        Release::parse("v1.31.0").unwrap(),
        Release::parse("v1.31").unwrap(),
        Release::parse("v1.32.0").unwrap(),
        Release::LATEST,
    ] {
        let (w, rep) = one_way(r);
        assert_eq!((w.lost, w.refused, w.delivered), (0, 3, 36), "{r}: {rep:?}");
        assert_eq!(w.blackholed_secs, 0.0, "{r}");
        assert_eq!(
            w.after_back_secs, 10.0,
            "{r}: the first send after the new pods are ready"
        );
    }
    // The newest code is the only reconciler-era release with nothing lost.
    let latest = one_way(Release::LATEST).0;
    assert!(latest.blackholed_secs < v133.blackholed_secs);
    // Without the one-way sender the report has no figures for it.
    assert_eq!(
        Harness::new(1, 2, Churn { steps: vec![] })
            .run(Release::LATEST)
            .unwrap()
            .one_way,
        None
    );
}
