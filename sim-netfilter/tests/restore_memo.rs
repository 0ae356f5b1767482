//! `RestoreMemo`: one payload applied to many rulesets gives exactly what applying it to each
//! would, and does the work once per distinct starting content.
use sim_netfilter::{RestoreMemo, RestoreOptions, Ruleset, RulesetState, SaveOptions};

const NOFLUSH: RestoreOptions = RestoreOptions {
    noflush: true,
    counters: false,
};

const PAYLOAD: &str = "*nat
:KUBE-SERVICES - [0:0]
:KUBE-SVC-A - [0:0]
:KUBE-SEP-1 - [0:0]
:KUBE-SEP-2 - [0:0]
-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVC-A
-A KUBE-SVC-A -m statistic --mode random --probability 0.5 -j KUBE-SEP-1
-A KUBE-SVC-A -j KUBE-SEP-2
-A KUBE-SEP-1 -p udp -j DNAT --to-destination 10.244.1.5:53
-A KUBE-SEP-2 -p udp -j DNAT --to-destination 10.244.2.5:53
COMMIT
";

fn save(rs: &Ruleset) -> String {
    rs.save(&RulesetState::new(), &SaveOptions::default())
}

fn node() -> Ruleset {
    let mut rs = Ruleset::new();
    rs.nfacct_add("packets-total").unwrap();
    rs.command(sim_netfilter::Table::Nat, "-N KUBE-POSTROUTING")
        .unwrap();
    rs
}

#[test]
fn a_fleet_of_identical_rulesets_is_restored_once_with_the_plain_result() {
    let mut plain = node();
    plain.restore(PAYLOAD, &NOFLUSH).unwrap();
    let mut memo = RestoreMemo::new();
    for _ in 0..5 {
        let mut rs = node();
        assert_eq!(rs.lineage(), node().lineage());
        let report = memo.restore(&mut rs, PAYLOAD, &NOFLUSH).unwrap();
        assert_eq!(report.committed, vec![sim_netfilter::Table::Nat]);
        assert_eq!(save(&rs), save(&plain));
        assert_eq!(rs.lineage(), plain.lineage());
    }
    assert_eq!((memo.misses(), memo.hits()), (1, 4));
}

#[test]
fn different_starting_content_or_options_are_not_taken_from_the_memo() {
    let mut memo = RestoreMemo::new();
    let mut a = node();
    memo.restore(&mut a, PAYLOAD, &NOFLUSH).unwrap();

    // Same rules reached another way: a different lineage, so the work is done again, and
    // the result is still the plain one.
    let mut b = Ruleset::new();
    b.nfacct_add("packets-total").unwrap();
    b.command(sim_netfilter::Table::Nat, "-N KUBE-POSTROUTING")
        .unwrap();
    b.command(sim_netfilter::Table::Nat, "-N X").unwrap();
    b.command(sim_netfilter::Table::Nat, "-X X").unwrap();
    assert_ne!(b.lineage(), a.lineage());
    let mut b_plain = b.clone();
    memo.restore(&mut b, PAYLOAD, &NOFLUSH).unwrap();
    b_plain.restore(PAYLOAD, &NOFLUSH).unwrap();
    assert_eq!(save(&b), save(&b_plain));
    assert_eq!((memo.misses(), memo.hits()), (2, 0));

    // Without --noflush the nat table starts empty: KUBE-POSTROUTING is gone.
    let mut c = node();
    let flush = RestoreOptions {
        noflush: false,
        counters: false,
    };
    memo.restore(&mut c, PAYLOAD, &flush).unwrap();
    assert!(!save(&c).contains("KUBE-POSTROUTING"), "{}", save(&c));
    assert!(save(&a).contains(":KUBE-POSTROUTING - [0:0]"));
    assert_eq!(memo.misses(), 3);

    // Every kind of change is part of the lineage: the index switch (commits build indexes
    // only when it is on) and nfacct objects (rules can only use live ones).
    let mut unindexed = node();
    unindexed.set_indexing(false);
    assert_ne!(unindexed.lineage(), node().lineage());
    let mut deleted = node();
    deleted.nfacct_del("packets-total").unwrap();
    assert_ne!(deleted.lineage(), node().lineage());
    let mut added = node();
    added.nfacct_add("other").unwrap();
    assert_ne!(added.lineage(), node().lineage());
    memo.restore(&mut unindexed, PAYLOAD, &NOFLUSH).unwrap();
    assert!(!unindexed
        .chain(sim_netfilter::Table::Nat, "KUBE-SERVICES")
        .unwrap()
        .is_indexed());
    assert_eq!(memo.misses(), 4);

    // A later change on one node makes its lineage its own.
    a.command(sim_netfilter::Table::Nat, "-A KUBE-POSTROUTING -j RETURN")
        .unwrap();
    let mut fresh = node();
    memo.restore(&mut fresh, PAYLOAD, &NOFLUSH).unwrap();
    assert_ne!(fresh.lineage(), a.lineage());
    assert_ne!(save(&fresh), save(&a));
}

#[test]
fn a_failing_restore_fails_the_same_way_from_the_memo() {
    // The filter block commits; the nat block jumps to a chain that does not exist.
    let bad = "*filter\n:KUBE-FORWARD - [0:0]\nCOMMIT\n*nat\n-A PREROUTING -j KUBE-NOPE\nCOMMIT\n";
    let mut plain = node();
    let want = plain.restore(bad, &NOFLUSH).unwrap_err();
    let mut memo = RestoreMemo::new();
    for _ in 0..2 {
        let mut rs = node();
        let got = memo.restore(&mut rs, bad, &NOFLUSH).unwrap_err();
        assert_eq!(got, want);
        assert_eq!(got.committed, vec![sim_netfilter::Table::Filter]);
        assert_eq!(save(&rs), save(&plain));
    }
    assert_eq!((memo.misses(), memo.hits()), (1, 1));
}
