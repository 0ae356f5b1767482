//! iptables-restore semantics (checked against the real iptables 1.8.9 in a private netns):
//! per-table transactions, --noflush, chain creation and deletion, counters, and errors that
//! name the line, show it and point at the word.

use sim_core::{Packet, SimRng, SimTime};
use sim_netfilter::*;

const BASE: &str = "*filter
:INPUT DROP [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:A - [0:0]
:B - [0:0]
-A INPUT -j A
-A A -j B
-A B -j ACCEPT
-A FORWARD -j ACCEPT
COMMIT
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:C - [0:0]
-A C -j ACCEPT
COMMIT
";

fn base() -> Ruleset {
    let mut rs = Ruleset::new();
    rs.restore(BASE, &RestoreOptions::default()).unwrap();
    rs
}

fn save(rs: &Ruleset) -> String {
    rs.save(&RulesetState::new(), &SaveOptions::default())
}

const NOFLUSH: RestoreOptions = RestoreOptions {
    noflush: true,
    counters: false,
};

#[test]
fn a_dangling_jump_fails_its_table_and_keeps_earlier_tables() {
    let mut rs = base();
    let before = save(&rs);
    let input = "*filter\n:FOO - [0:0]\n-A FOO -j ACCEPT\nCOMMIT\n*nat\n:BAR - [0:0]\n-A BAR -j NOPE\nCOMMIT\n";
    let e = rs.restore(input, &NOFLUSH).unwrap_err();
    assert_eq!(e.line, 7, "{e}");
    assert_eq!(
        e.kind,
        RestoreErrorKind::DanglingJump {
            target: "NOPE".into(),
            from: "BAR".into()
        }
    );
    assert_eq!(e.committed, vec![Table::Filter]);
    let after = save(&rs);
    assert!(after.contains(":FOO - [0:0]"), "filter was committed");
    assert!(!after.contains("BAR"), "nat block changed nothing");
    // The nat table is exactly as before.
    let nat = |s: &str| s.split("*nat").nth(1).unwrap().to_string();
    assert_eq!(nat(&after), nat(&before));
}

#[test]
fn a_dangling_jump_in_a_kube_proxy_payload_changes_nothing() {
    let mut rs = base();
    let before = save(&rs);
    let e = rs
        .restore(
            "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m udp --dport 53 -j KUBE-SVC-MISSING\nCOMMIT\n",
            &NOFLUSH,
        )
        .unwrap_err();
    assert!(e.to_string().contains("KUBE-SVC-MISSING"), "{e}");
    assert_eq!(save(&rs), before);
}

#[test]
fn noflush_chain_lines_flush_user_chains_but_only_set_builtin_policies() {
    let mut rs = base();
    rs.restore(
        "*filter\n:INPUT ACCEPT [0:0]\n:B - [0:0]\n-A B -j DROP\n-A INPUT -j DROP\nCOMMIT\n",
        &NOFLUSH,
    )
    .unwrap();
    let s = save(&rs);
    assert!(s.contains(":INPUT ACCEPT [0:0]"));
    assert!(s.contains("-A INPUT -j A\n-A INPUT -j DROP\n"), "{s}");
    assert!(s.contains("-A B -j DROP\n") && !s.contains("-A B -j ACCEPT"));
    assert!(s.contains("*nat"), "tables not named are left alone");
}

#[test]
fn a_full_restore_replaces_the_named_tables_and_an_empty_block_deletes_one() {
    let mut rs = base();
    rs.restore("*filter\nCOMMIT\n", &RestoreOptions::default())
        .unwrap();
    assert!(!rs.has_table(Table::Filter));
    assert!(rs.has_table(Table::Nat));
    rs.restore(
        "*filter\n:FORWARD DROP [0:0]\nCOMMIT\n",
        &RestoreOptions::default(),
    )
    .unwrap();
    assert_eq!(
        save(&rs).split("*nat").next().unwrap(),
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\nCOMMIT\n"
    );
}

#[test]
fn delete_chain_needs_an_empty_unreferenced_chain() {
    let mut rs = base();
    let busy = |rs: &mut Ruleset, text: &str| rs.restore(text, &NOFLUSH).unwrap_err().kind;
    assert_eq!(
        busy(&mut rs, "*filter\n:B - [0:0]\n-X B\nCOMMIT\n"),
        RestoreErrorKind::ChainBusy("B".into()),
        "B is still referenced by A"
    );
    assert_eq!(
        busy(&mut rs, "*filter\n-F A\n-X B\nCOMMIT\n"),
        RestoreErrorKind::ChainBusy("B".into()),
        "B still has a rule"
    );
    assert_eq!(
        busy(&mut rs, "*filter\n-X INPUT\nCOMMIT\n"),
        RestoreErrorKind::DeleteBuiltin("INPUT".into())
    );
    assert_eq!(
        busy(&mut rs, "*filter\n-X ZZZ\nCOMMIT\n"),
        RestoreErrorKind::NoSuchChain("ZZZ".into())
    );
    // kube-proxy's way: flush the referrer and the chain, then delete.
    rs.restore("*filter\n:A - [0:0]\n:B - [0:0]\n-X B\nCOMMIT\n", &NOFLUSH)
        .unwrap();
    assert!(rs.chain(Table::Filter, "B").is_none());
    assert_eq!(rs.references(Table::Filter, "A"), 1);
}

#[test]
fn insert_delete_and_new_chain() {
    let mut rs = base();
    for cmd in [
        "-I B 1 -j DROP",
        "-I B 3 -j RETURN",
        "-I B 2 -s 10.0.0.0/8 -j LOG --log-prefix mid",
        "-D B -j ACCEPT",
        "-N D",
        "-A D -j ACCEPT",
    ] {
        rs.command(Table::Filter, cmd)
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    }
    let specs: Vec<String> = rs
        .rules(Table::Filter, "B")
        .unwrap()
        .iter()
        .map(rule_spec)
        .collect();
    assert_eq!(
        specs,
        [
            "-j DROP",
            "-s 10.0.0.0/8 -j LOG --log-prefix mid",
            "-j RETURN"
        ]
    );
    assert_eq!(
        rs.command(Table::Filter, "-I B 5 -j DROP")
            .unwrap_err()
            .kind,
        RestoreErrorKind::IndexTooBig {
            chain: "B".into(),
            num: 5,
            len: 3
        }
    );
    assert_eq!(
        rs.command(Table::Filter, "-D B -j ACCEPT")
            .unwrap_err()
            .kind,
        RestoreErrorKind::NoMatchingRule("B".into())
    );
    assert_eq!(
        rs.command(Table::Filter, "-N D").unwrap_err().kind,
        RestoreErrorKind::ChainExists("D".into())
    );
    rs.command(Table::Filter, "-D B 2").unwrap();
    assert_eq!(rs.rules(Table::Filter, "B").unwrap().len(), 2);
    rs.command(Table::Filter, "-P FORWARD DROP").unwrap();
    assert_eq!(
        rs.builtin_chain(Table::Filter, Hook::Forward)
            .unwrap()
            .policy(),
        Policy::Drop
    );
    assert_eq!(
        rs.command(Table::Filter, "-P D DROP").unwrap_err().kind,
        RestoreErrorKind::NotBuiltin("D".into())
    );
}

#[test]
fn nat_targets_are_refused_in_hooks_they_do_not_support() {
    let mut rs = Ruleset::new();
    let e = rs
        .restore(
            "*nat\n:POSTROUTING ACCEPT [0:0]\n-A POSTROUTING -p tcp -j DNAT --to-destination 1.1.1.1\nCOMMIT\n",
            &RestoreOptions::default(),
        )
        .unwrap_err();
    assert!(
        matches!(e.kind, RestoreErrorKind::WrongHook { what: "DNAT", .. }),
        "{e}"
    );
    // Also through a user chain.
    let e = rs
        .restore(
            "*nat\n:PREROUTING ACCEPT [0:0]\n:U - [0:0]\n-A PREROUTING -j U\n-A U -j MASQUERADE\nCOMMIT\n",
            &RestoreOptions::default(),
        )
        .unwrap_err();
    assert!(
        matches!(
            e.kind,
            RestoreErrorKind::WrongHook {
                what: "MASQUERADE",
                hook: "PREROUTING",
                ..
            }
        ),
        "{e}"
    );
    // SNAT in INPUT is fine; DROP in nat is not; REJECT only in filter.
    rs.restore(
        "*nat\n:INPUT ACCEPT [0:0]\n-A INPUT -j SNAT --to-source 1.1.1.1\nCOMMIT\n",
        &RestoreOptions::default(),
    )
    .unwrap();
    assert!(rs.command(Table::Nat, "-A INPUT -j DROP").is_err());
    assert!(rs.command(Table::Nat, "-A INPUT -j REJECT").is_err());
    assert!(rs
        .restore("*mangle\n-A INPUT -j REJECT\nCOMMIT\n", &NOFLUSH)
        .is_err());
}

#[test]
fn jump_loops_are_refused() {
    let mut rs = Ruleset::new();
    let e = rs
        .restore(
            "*filter\n:INPUT ACCEPT [0:0]\n:X - [0:0]\n:Y - [0:0]\n-A INPUT -j X\n-A X -j Y\n-A Y -g X\nCOMMIT\n",
            &RestoreOptions::default(),
        )
        .unwrap_err();
    assert!(matches!(e.kind, RestoreErrorKind::Loop(_)), "{e}");
}

#[test]
fn counters_are_taken_with_c_and_otherwise_ignored_except_in_rules() {
    let text = "*filter\n:INPUT DROP [5:100]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n[3:4] -A INPUT -j ACCEPT\n-A OUTPUT -j ACCEPT -c 10 20\nCOMMIT\n";
    let state = RulesetState::new();
    let mut plain = Ruleset::new();
    plain.restore(text, &RestoreOptions::default()).unwrap();
    let with_c = SaveOptions {
        counters: true,
        ..SaveOptions::default()
    };
    let s = plain.save(&state, &with_c);
    assert!(s.contains(":INPUT DROP [0:0]") && s.contains("[0:0] -A INPUT -j ACCEPT"));
    assert!(
        s.contains("[10:20] -A OUTPUT -j ACCEPT"),
        "-c in a rule always counts"
    );
    let mut counted = Ruleset::new();
    counted
        .restore(
            text,
            &RestoreOptions {
                noflush: false,
                counters: true,
            },
        )
        .unwrap();
    let s = counted.save(&state, &with_c);
    assert!(
        s.contains(":INPUT DROP [5:100]") && s.contains("[3:4] -A INPUT -j ACCEPT"),
        "{s}"
    );
}

#[test]
fn counters_survive_restores_of_other_chains_and_reset_with_their_own() {
    let mut rs = Ruleset::new();
    rs.restore(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:A - [0:0]\n:B - [0:0]\n-A INPUT -j A\n-A INPUT -j B\n-A A -m statistic --mode nth --every 2 --packet 1\n-A B -j ACCEPT\nCOMMIT\n",
        &RestoreOptions::default(),
    )
    .unwrap();
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "x");
    let addrs = LocalAddrs::new();
    let mut send = |rs: &Ruleset, state: &mut RulesetState| {
        let p = Packet::udp("1.1.1.1:1".parse().unwrap(), "2.2.2.2:2".parse().unwrap());
        let mut ctx = EvalCtx::new(p, &addrs, SimTime::ZERO, &mut rng);
        rs.run_hook(Table::Filter, Hook::Input, &mut ctx, state, None);
    };
    send(&rs, &mut state);
    send(&rs, &mut state);
    send(&rs, &mut state);
    let count = |rs: &Ruleset, state: &RulesetState, chain: &str| {
        state
            .rule_counters(rs, Table::Filter, chain, 1)
            .unwrap()
            .packets
    };
    assert_eq!(count(&rs, &state, "B"), 3);
    assert_eq!(count(&rs, &state, "A"), 1, "nth: the 2nd packet");
    // Rewriting A (kube-proxy style) resets A's counters and nth counter, not B's.
    rs.restore(
        "*filter\n:A - [0:0]\n-A A -m statistic --mode nth --every 2 --packet 1\nCOMMIT\n",
        &NOFLUSH,
    )
    .unwrap();
    assert_eq!(count(&rs, &state, "B"), 3);
    assert_eq!(count(&rs, &state, "A"), 0);
    send(&rs, &mut state);
    assert_eq!(
        count(&rs, &state, "A"),
        0,
        "a fresh nth counter: first packet is index 0"
    );
    send(&rs, &mut state);
    assert_eq!(count(&rs, &state, "A"), 1);
    assert_eq!(count(&rs, &state, "B"), 5);
    // -Z zeroes counters.
    state.zero_counters(&rs, None);
    assert_eq!(count(&rs, &state, "B"), 0);
}

#[test]
fn errors_name_the_line_show_it_and_point_at_the_word() {
    let mut rs = Ruleset::new();
    let e = rs
        .restore(
            "*filter\n:INPUT ACCEPT [0:0]\n\n-A INPUT -p tcp --dport 22 --bogus 1 -j ACCEPT\nCOMMIT\n",
            &RestoreOptions::default(),
        )
        .unwrap_err();
    assert_eq!(e.line, 4);
    assert_eq!(
        e.kind,
        RestoreErrorKind::Rule(RuleErrorKind::UnknownOption("--bogus".into()))
    );
    assert_eq!(
        e.to_string(),
        "line 4: unknown option \"--bogus\" (not a core option, and no loaded match or target takes it)\n  -A INPUT -p tcp --dport 22 --bogus 1 -j ACCEPT\n                             ^^^^^^^"
    );
    assert!(!rs.has_table(Table::Filter), "nothing was applied");
    let cases: &[(&str, usize, &str)] = &[
        (
            "*filter\n-A INPUT -m statistic --mode random --probability 1.5\nCOMMIT\n",
            2,
            "--probability",
        ),
        (
            "*filter\n-A INPUT -j LOG --log-level loud\nCOMMIT\n",
            2,
            "--log-level",
        ),
        ("*bogus\nCOMMIT\n", 1, "bogus"),
        ("*filter\n-A INPUT -j ACCEPT\n", 3, "COMMIT expected"),
        ("-A INPUT -j ACCEPT\n", 1, "outside of a table"),
        ("*filter\n-A NOPE -j ACCEPT\nCOMMIT\n", 2, "NOPE"),
        ("*filter\n:INPUT BLAH [0:0]\nCOMMIT\n", 2, "BLAH"),
        ("*filter\n  \nCOMMIT\n", 2, "no command"),
        ("*filter\n*nat\nCOMMIT\n", 2, "*nat"),
        (
            "*filter\n-A INPUT -m limit --limit 1/s\nCOMMIT\n",
            2,
            "limit",
        ),
        ("*filter\n-A INPUT -j NFQUEUE\nCOMMIT\n", 2, "NFQUEUE"),
        (
            "*filter\n-A INPUT -p tcp --tcp-flags SYN\nCOMMIT\n",
            2,
            "--tcp-flags",
        ),
        (
            "*filter\n:A - [0:0]\n-A A -m comment --comment x -m comment\nCOMMIT\n",
            3,
            "--comment",
        ),
        (
            "*filter\n-A INPUT -s 10.0.0.300 -j DROP\nCOMMIT\n",
            2,
            "10.0.0.300",
        ),
        (
            "*filter\n-A INPUT -i eth0 -o eth1 -j DROP\nCOMMIT\n",
            2,
            "-o with INPUT",
        ),
    ];
    for (text, line, needle) in cases {
        let e = Ruleset::new()
            .restore(text, &RestoreOptions::default())
            .unwrap_err();
        assert_eq!(e.line, *line, "{text:?}: {e}");
        assert!(e.to_string().contains(needle), "{text:?}: {e}");
    }
}

#[test]
fn nfacct_objects_must_exist_before_rules_use_them() {
    let mut rs = Ruleset::new();
    let text = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m nfacct --nfacct-name n1\nCOMMIT\n";
    let e = rs.restore(text, &RestoreOptions::default()).unwrap_err();
    assert_eq!(e.kind, RestoreErrorKind::NoSuchNfacct("n1".into()));
    rs.nfacct_add("n1").unwrap();
    rs.restore(text, &RestoreOptions::default()).unwrap();
    assert_eq!(rs.nfacct_names(), ["n1"]);
    rs.restore("*filter\nCOMMIT\n", &RestoreOptions::default())
        .unwrap();
    rs.nfacct_del("n1").unwrap();
}

#[test]
fn listing_prints_kilo_mega_giga_and_references() {
    let mut rs = Ruleset::new();
    rs.restore(
        "*filter\n:INPUT DROP [123456:7890123456]\n:FORWARD ACCEPT [99999:100000]\n:OUTPUT ACCEPT [5:6]\n:U - [0:0]\n[99999:99999] -A INPUT -j U\n[100000:9999499] -A INPUT -j ACCEPT\n[9999500:9999500000] -A FORWARD -j ACCEPT\n[12345678901234:123456789012345678] -A U -j RETURN\nCOMMIT\n",
        &RestoreOptions {
            noflush: false,
            counters: true,
        },
    )
    .unwrap();
    let state = RulesetState::new();
    let got = rs
        .list(&state, Table::Filter, None, &ListOptions::default())
        .unwrap();
    // Captured from the real `iptables -L -n -v`.
    let want = "Chain INPUT (policy DROP 123K packets, 7890M bytes)
 pkts bytes target     prot opt in     out     source               destination         
99999 99999 U          0    --  *      *       0.0.0.0/0            0.0.0.0/0           
 100K 9999K ACCEPT     0    --  *      *       0.0.0.0/0            0.0.0.0/0           

Chain FORWARD (policy ACCEPT 99999 packets, 100K bytes)
 pkts bytes target     prot opt in     out     source               destination         
  10M   10G ACCEPT     0    --  *      *       0.0.0.0/0            0.0.0.0/0           

Chain OUTPUT (policy ACCEPT 5 packets, 6 bytes)
 pkts bytes target     prot opt in     out     source               destination         

Chain U (1 references)
 pkts bytes target     prot opt in     out     source               destination         
  12T 123457T RETURN     0    --  *      *       0.0.0.0/0            0.0.0.0/0           
";
    assert_eq!(got, want);
    let one = rs
        .list(
            &state,
            Table::Filter,
            Some("INPUT"),
            &ListOptions {
                exact: false,
                line_numbers: true,
            },
        )
        .unwrap();
    assert!(one.starts_with(
        "Chain INPUT (policy DROP 123K packets, 7890M bytes)\nnum   pkts bytes target"
    ));
    assert!(one.contains("\n2     100K 9999K ACCEPT"), "{one}");
}

#[test]
fn chains_nested_more_than_fifteen_deep_are_refused() {
    // iptables-restore 1.8.9 takes INPUT -> C1 -> ... -> C15 and refuses C16
    // ("RULE_APPEND failed (Too many links)").
    let nested = |n: usize| {
        let mut t = String::from("*filter\n:INPUT ACCEPT [0:0]\n");
        for i in 1..=n {
            t.push_str(&format!(":C{i} - [0:0]\n"));
        }
        t.push_str("-A INPUT -j C1\n");
        for i in 1..n {
            t.push_str(&format!("-A C{i} -j C{}\n", i + 1));
        }
        t.push_str("COMMIT\n");
        t
    };
    Ruleset::new()
        .restore(&nested(15), &RestoreOptions::default())
        .unwrap();
    let e = Ruleset::new()
        .restore(&nested(16), &RestoreOptions::default())
        .unwrap_err();
    assert_eq!(e.kind, RestoreErrorKind::TooDeep("INPUT".into()));
}
