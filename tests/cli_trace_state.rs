//! `nfsim trace` on a scenario's node at an instant, and on a production node's saved rules and
//! `conntrack -L` output: an existing entry is shown as found (its NAT applies, the nat rules
//! are not consulted), no-op lines are left out, and a bad listing is a located error.

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;

const PKT: &str = "udp 10.244.2.9:40000 -> 10.96.0.10:53";
/// The production node example's saved conntrack listing.
const PROD_CT: &str = "examples/production-node/conntrack.txt";

/// `nfsim trace --rules RULES` on a node at 192.168.0.12 with pod CIDR 10.244.2.0/24 (the
/// production example's node), with `extra` flags after.
fn trace_on(rules: &str, extra: &[&str]) -> (i32, String, String) {
    let mut args = vec![
        "trace",
        "--rules",
        rules,
        "--node-addr",
        "192.168.0.12",
        "--pod-cidr",
        "10.244.2.0/24",
    ];
    args.extend_from_slice(extra);
    nfsim(&args)
}

/// A file `nfsim-NAME-PID` in the temporary directory holding `text`.
fn temp_file(name: &str, text: &str) -> std::path::PathBuf {
    let f = std::env::temp_dir().join(format!("nfsim-{name}-{}", std::process::id()));
    std::fs::write(&f, text).unwrap();
    f
}

/// Asserts that a run was refused with exit code 2 and `words` in its error.
fn assert_refused((code, _, err): (i32, String, String), words: &str) {
    assert_eq!(code, 2, "{err}");
    assert!(err.contains(words), "{err}");
}

/// `nfsim trace` on node-2 of the shipped incident scenario, with `extra` flags.
fn trace_incident(extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["trace", "scenarios/stale-dns-udp.yaml", "--node", "node-2"];
    args.extend_from_slice(extra);
    nfsim(&args)
}

/// `nfsim trace` with the production example's rules (see [`trace_on`]).
fn trace_prod(extra: &[&str]) -> (i32, String, String) {
    trace_on("examples/production-node/rules.txt", extra)
}

#[test]
fn inside_a_scenario_the_stale_entry_is_found_and_the_run_is_unchanged() {
    // At 6m coredns-a (10.244.1.5) is dead, yet node-2's entry still sends the sidecar there.
    let (code, out, err) = trace_incident(&["--at", "6m", "--packet", PKT]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("enters:  sent by pod default/app through its veth"),
        "{out}"
    );
    assert!(
        out.contains("conntrack: entry found: udp      17 "),
        "{out}"
    );
    assert!(
        out.contains("ESTABLISHED, DNAT from the entry (10.96.0.10:53 -> 10.244.1.5:53), nat rules not consulted"),
        "{out}"
    );
    assert!(!out.contains("-> nat PREROUTING"), "{out}");
    // No-op lines are left out.
    assert!(!out.contains("table does not exist"), "{out}");
    for l in out.lines().filter(|l| l.contains("rewrite at")) {
        let (a, b) = l.split_once("  =>  ").unwrap();
        assert_ne!(a.split_once(": ").unwrap().1, b, "{l}");
    }
    // A new flow at the same instant is NEW and meets the rules.
    let (_, out, _) = trace_incident(&[
        "--at",
        "6m",
        "--packet",
        "udp 10.244.2.9:40001 -> 10.96.0.10:53",
        "--json",
    ]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ct = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "conntrack")
        .unwrap();
    assert_eq!(ct["found"], false);
    assert!(v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["kind"] == "enter" && s["table"] == "nat"));
    // Unknown names are errors.
    let (code, _, err) = nfsim(&[
        "trace",
        "scenarios/stale-dns-udp.yaml",
        "--node",
        "node-9",
        "--packet",
        PKT,
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("node-9"), "{err}");
    let (code, _, err) = trace_incident(&["--from", "nobody", "--packet", PKT]);
    assert_eq!(code, 2);
    assert!(err.contains("--from nobody"), "{err}");
}

/// `--at` after the scenario's end is refused, as `run --until`, `rules --at` and
/// `conntrack --at` refuse it (before, `--at 2h` on a 1 h scenario traced at 01:00:00).
#[test]
fn trace_at_after_the_run_is_refused() {
    let (code, out, err) = trace_incident(&["--at", "2h", "--packet", PKT]);
    assert_eq!(code, 2, "{out}");
    assert_eq!(
        err.trim_end(),
        "error: --at 2h is after the end of the run (1h, the scenario's duration in scenarios/stale-dns-udp.yaml): expected at most 1h"
    );
    // The end itself is within the run.
    let (code, _, err) = trace_incident(&["--at", "1h", "--packet", PKT]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn from_production_the_saved_table_decides() {
    let args = |ct: &str| trace_prod(&["--conntrack", ct, "--packet", PKT, "--json"]);
    let (code, out, err) = args(PROD_CT);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"]["dnat"], "10.96.0.10:53 -> 10.244.1.5:53");
    let notes = v["notes"][0].as_str().unwrap();
    assert!(
        notes.contains("4 entries loaded") && notes.contains("assumed 1m old"),
        "{notes}"
    );
    assert!(v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .any(|s| s["kind"] == "conntrack" && s["found"] == true));
    // Without the table the rules pick an endpoint themselves.
    let (_, out, _) = trace_prod(&["--packet", PKT, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"]["dnat"], "10.96.0.10:53 -> 10.244.2.5:53");

    let dir = std::env::temp_dir().join(format!("nfsim-trace-state-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let bad = dir.join("bad.txt");
    std::fs::write(
        &bad,
        "udp      17 29 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.5 dst=10.244.2.9 sport=53 dport=x mark=0 use=1\n",
    )
    .unwrap();
    let (code, _, err) = args(bad.to_str().unwrap());
    assert_eq!(code, 2);
    assert!(
        err.contains("bad.txt: line 1, column 106: dport=x"),
        "{err}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `trace --all-branches --json`: per outcome its exact probability, verdict, whether it was
/// masqueraded, and per path every rule that matched on the way.
#[test]
fn all_branches_json_lists_the_rules_each_branch_passed() {
    let dir = std::env::temp_dir().join(format!("nfsim-branches-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (_, rules, _) = nfsim(&[
        "rules",
        "scenarios/stale-dns-udp.yaml",
        "--node",
        "node-2",
        "--at",
        "4m",
    ]);
    let f = dir.join("rules.txt");
    std::fs::write(&f, rules).unwrap();
    let (code, out, err) = nfsim(&[
        "trace",
        "--rules",
        f.to_str().unwrap(),
        "--node-addr",
        "192.168.0.12",
        "--pod-cidr",
        "10.244.2.0/24",
        "--packet",
        PKT,
        "--all-branches",
        "--json",
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let outs = v["branches"]["outcomes"].as_array().unwrap();
    assert_eq!(outs.len(), 2, "{out}");
    let dnat: Vec<&str> = outs
        .iter()
        .map(|o| o["outcome"]["dnat"].as_str().unwrap())
        .collect();
    assert_eq!(
        dnat,
        [
            "10.96.0.10:53 -> 10.244.1.5:53",
            "10.96.0.10:53 -> 10.244.2.5:53"
        ]
    );
    assert_eq!(outs[0]["probability"]["fraction"], "1/2");
    for o in outs {
        assert_eq!(o["outcome"]["verdict"], "transmitted");
        assert_eq!(o["outcome"]["masqueraded"], false);
        let rules = o["rules_matched"][0].as_array().unwrap();
        let to = o["outcome"]["dnat"]
            .as_str()
            .unwrap()
            .rsplit(' ')
            .next()
            .unwrap();
        assert!(
            rules.iter().any(|r| r
                .as_str()
                .unwrap()
                .contains(&format!("-j DNAT --to-destination {to}"))),
            "{rules:?}"
        );
    }
    // The first endpoint's branch passed the statistic rule; the second's did not.
    let stat = |o: &serde_json::Value| {
        o["rules_matched"][0]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r.as_str().unwrap().contains("-m statistic"))
    };
    assert!(stat(&outs[0]) && !stat(&outs[1]));
    let _ = std::fs::remove_dir_all(&dir);
}

/// kube-proxy's ClientIP affinity for kube-dns on node-2 (3 endpoints, rules as nfsim's v1.31
/// model renders them) and a copy of the node's `/proc/net/xt_recent/KUBE-SEP-5SZA7C4MJLLQPPFI`
/// (the list of endpoint 10.244.1.6:53) in which 10.244.2.9 was last seen at jiffies
/// 4299390000.
const AFFINITY_RULES: &str = "tests/fixtures/cli/affinity.save";
const RECENT_LIST: &str =
    "KUBE-SEP-5SZA7C4MJLLQPPFI=tests/fixtures/cli/xt_recent.KUBE-SEP-5SZA7C4MJLLQPPFI";

fn trace_affinity(extra: &[&str]) -> (i32, String, String) {
    let mut args = vec!["--packet", PKT];
    args.extend_from_slice(extra);
    trace_on(AFFINITY_RULES, &args)
}

#[test]
fn a_saved_xt_recent_list_sends_the_client_to_its_recorded_endpoint() {
    // Without the list, the statistic rules (seed 1) pick 10.244.2.5.
    let (code, out, err) = trace_affinity(&[]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("DNAT:         10.96.0.10:53 -> 10.244.2.5:53"),
        "{out}"
    );
    // With it, read 60 s after the newest stamp of the file (15000 jiffies at HZ=250): the
    // client was seen 64.7 s before, within --seconds 10800, so --rcheck pins it to 10.244.1.6.
    let (code, out, err) =
        trace_affinity(&["--recent", RECENT_LIST, "--recent-jiffies", "4299406173"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("KUBE-SVC-TCOU7JCQXEZGVUNU #3 MATCH     -m comment --comment \"kube-system/kube-dns:dns -> 10.244.1.6:53\" -m recent --rcheck"),
        "{out}"
    );
    assert!(
        out.contains("DNAT:         10.96.0.10:53 -> 10.244.1.6:53"),
        "{out}"
    );
    assert!(
        out.contains("recent list KUBE-SEP-5SZA7C4MJLLQPPFI from tests/fixtures/cli/xt_recent.KUBE-SEP-5SZA7C4MJLLQPPFI: 2 addresses, stamps in jiffies read at 4299406173 with HZ=250"),
        "{out}"
    );
    // Without --recent-jiffies the file is taken as read at its newest stamp: still pinned.
    let (_, out, _) = trace_affinity(&["--recent", RECENT_LIST]);
    assert!(
        out.contains("DNAT:         10.96.0.10:53 -> 10.244.1.6:53"),
        "{out}"
    );
    assert!(
        out.contains("(the newest stamp: --recent-jiffies not given)"),
        "{out}"
    );
}

#[test]
fn a_recent_stamp_older_than_the_affinity_timeout_no_longer_pins() {
    // Read 10801 s after the client's newest stamp (at HZ=250): --rcheck --seconds 10800 fails,
    // the statistic rules decide again.
    let late = (4_299_390_000u64 + 10_801 * 250).to_string();
    let (code, out, err) = trace_affinity(&["--recent", RECENT_LIST, "--recent-jiffies", &late]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("DNAT:         10.96.0.10:53 -> 10.244.2.5:53"),
        "{out}"
    );
    // At HZ=1000 the same jiffies are only 2700 s: pinned.
    let (_, out, _) = trace_affinity(&[
        "--recent",
        RECENT_LIST,
        "--recent-jiffies",
        &late,
        "--recent-hz",
        "1000",
    ]);
    assert!(
        out.contains("DNAT:         10.96.0.10:53 -> 10.244.1.6:53"),
        "{out}"
    );
}

#[test]
fn a_bad_xt_recent_file_is_a_located_error() {
    let bad = temp_file(
        "xt-recent",
        "src=10.244.2.7 ttl: 63 last_seen: 4299391173 oldest_pkt: 1 4299391173\n\
         src=10.244.2.9 ttl: 64 last_seen: 4299390000 oldest_pkt: 3 4299380000 4299385000\n",
    );
    let arg = format!("KUBE-SEP-5SZA7C4MJLLQPPFI={}", bad.display());
    assert_refused(
        trace_affinity(&["--recent", &arg]),
        &format!(
            "{}: line 2, column 70: expected \",\" (stamps are separated by \", \")",
            bad.display()
        ),
    );
    // A list no rule uses: the kernel would have no such file.
    assert_refused(
        trace_affinity(&[
            "--recent",
            "KUBE-SEP-NOPE=tests/fixtures/cli/xt_recent.KUBE-SEP-5SZA7C4MJLLQPPFI",
        ]),
        "no rule uses recent list \"KUBE-SEP-NOPE\"",
    );
    // A stamp after the jiffies the file was read at.
    assert_refused(
        trace_affinity(&["--recent", RECENT_LIST, "--recent-jiffies", "4299390000"]),
        "line 1, column 1: stamp 4299391173 is after",
    );
}

/// The "entry found" line shows the entry as `conntrack -L` showed it just before the packet
/// (117 s left in the saved listing), then what the packet did to it: the kernel refreshes the
/// entry in the same `nf_conntrack_in` call that finds it.
#[test]
fn a_found_entry_is_shown_as_found_then_refreshed() {
    let (code, out, err) = trace_prod(&["--conntrack", PROD_CT, "--packet", PKT]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("conntrack: entry found: udp      17 117 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.5"),
        "{out}"
    );
    assert!(
        out.contains("this packet refreshes it: 117 s left -> 120 s"),
        "{out}"
    );
    let (_, out, _) = trace_prod(&["--conntrack", PROD_CT, "--packet", PKT, "--json"]);
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    let ct = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "conntrack" && s["found"] == true)
        .unwrap();
    assert!(
        ct["entry"]
            .as_str()
            .unwrap()
            .starts_with("udp      17 117 "),
        "{ct}"
    );
    assert!(
        ct["after"]
            .as_str()
            .unwrap()
            .starts_with("udp      17 120 "),
        "{ct}"
    );
}

/// TCP in `--packet` text takes `seq=`, `ack=`, `len=` (payload bytes): data on the saved
/// ESTABLISHED entry counts as unacknowledged, so the entry's timeout drops to
/// `nf_conntrack_tcp_timeout_unacknowledged` (300 s) as on the node; a SYN on a saved CLOSE
/// entry reopens it (a new entry through the rules), and the load note says which side's
/// RST was assumed.
#[test]
fn tcp_data_on_a_saved_entry_and_a_syn_on_a_saved_close_entry() {
    let trace = |ct: &str, pkt: &str| {
        let (code, out, err) = trace_prod(&["--conntrack", ct, "--packet", pkt, "--json"]);
        assert_eq!(code, 0, "{err}");
        serde_json::from_str::<serde_json::Value>(&out).unwrap()
    };
    let v = trace(
        "examples/production-node/conntrack.txt",
        "tcp 10.244.2.9:38412 -> 10.96.0.1:443 PSH,ACK seq=100 ack=200 len=300",
    );
    let ct = v["conntrack"].as_str().unwrap();
    assert!(ct.starts_with("tcp      6 300 ESTABLISHED"), "{ct}");
    assert!(
        v["packet"]
            .as_str()
            .unwrap()
            .ends_with("PSH,ACK seq=100 ack=200 len=300"),
        "{v}"
    );
    let v = trace(
        "examples/production-node/conntrack.txt",
        "tcp 10.244.2.9:38412 -> 10.96.0.1:443 ACK seq=100 ack=200 len=0",
    );
    assert!(v["conntrack"]
        .as_str()
        .unwrap()
        .starts_with("tcp      6 432000 ESTABLISHED"));

    let dir = std::env::temp_dir().join(format!("nfsim-trace-close-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let close = dir.join("close.txt");
    let text = std::fs::read_to_string("examples/production-node/conntrack.txt").unwrap();
    std::fs::write(&close, text.replace("86395 ESTABLISHED", "8 CLOSE")).unwrap();
    let v = trace(
        close.to_str().unwrap(),
        "tcp 10.244.2.9:38412 -> 10.96.0.1:443 SYN seq=100 len=0",
    );
    let ct = v["conntrack"].as_str().unwrap();
    assert!(
        ct.starts_with("tcp      6 120 SYN_SENT"),
        "a new entry: {ct}"
    );
    // The JSON says which entry was destroyed for the reopen (failed before: text only).
    let reopened: Vec<&serde_json::Value> = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == "conntrack" && s.get("reopened").is_some())
        .collect();
    assert_eq!(reopened.len(), 1, "{v}");
    assert!(
        reopened[0]["reopened"]
            .as_str()
            .unwrap()
            .starts_with("tcp      6 8 CLOSE src=10.244.2.9"),
        "{v}"
    );
    let notes = v["notes"][0].as_str().unwrap();
    assert!(
        notes.contains("1 TCP CLOSE") && notes.contains("assumed the original direction's"),
        "{notes}"
    );
    let (code, out, err) = trace_prod(&[
        "--conntrack",
        close.to_str().unwrap(),
        "--packet",
        "tcp 10.244.2.9:38412 -> 10.96.0.1:443 SYN seq=100 len=0",
    ]);
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains(
            "    reopened: the entry found for this tuple, tcp      6 8 CLOSE src=10.244.2.9"
        ),
        "{out}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

/// `trace --after`: the packet comes that long after the listing was taken: the entry it
/// meets has that many fewer seconds left, and one that expired in between is gone (failed
/// before: no such flag; trace ran at the listing's instant only).
#[test]
fn trace_after_the_listing_reads_the_seconds_left_then() {
    let ct = temp_file("trace-after.txt", "udp      17 25 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.8 dst=10.244.2.9 sport=53 dport=40000 mark=0 use=1\n");
    let run = |after: &str| {
        trace_prod(&[
            "--conntrack",
            ct.to_str().unwrap(),
            "--packet",
            PKT,
            "--after",
            after,
            "--json",
        ])
    };
    let (code, out, err) = run("10s");
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(v["outcome"]["dnat"], "10.96.0.10:53 -> 10.244.1.8:53");
    let found = v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["kind"] == "conntrack" && s["found"] == true)
        .unwrap_or_else(|| panic!("{out}"));
    assert!(
        found.to_string().contains("udp      17 15 src=10.244.2.9"),
        "{found}"
    );
    let (code, out, err) = run("26s");
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_ne!(
        v["outcome"]["dnat"], "10.96.0.10:53 -> 10.244.1.8:53",
        "{out}"
    );
    let _ = std::fs::remove_file(&ct);
    assert_refused(
        trace_prod(&["--packet", PKT, "--after", "1s"]),
        "--after needs --conntrack or --recent",
    );
}

/// `trace SCENARIO --seed N` runs the scenario with that seed (as `run --seed`), and the node
/// flags that a scenario's node has of its own are refused (failed before: both accepted and
/// ignored).
#[test]
fn trace_on_a_scenario_honours_seed_and_refuses_node_flags() {
    let trace = |extra: &[&str]| {
        let mut args = vec![
            "trace",
            "scenarios/stale-dns-udp.yaml",
            "--node",
            "node-2",
            "--packet",
            "udp 10.244.2.9:40999 -> 10.96.0.10:53",
            "--json",
        ];
        args.extend_from_slice(extra);
        nfsim(&args)
    };
    let picks: std::collections::BTreeSet<String> = (1..=8)
        .map(|s| {
            let (code, out, err) = trace(&["--seed", &s.to_string()]);
            assert_eq!(code, 0, "{err}");
            let v: serde_json::Value = serde_json::from_str(&out).unwrap();
            v["outcome"]["dnat"].to_string()
        })
        .collect();
    assert!(picks.len() > 1, "the seed changed nothing: {picks:?}");
    let (code, _, err) = trace(&["--node-addr", "10.0.0.1"]);
    assert_eq!(code, 2);
    assert!(err.contains("--node-addr goes with --rules"), "{err}");
}

/// A rule naming an interface the simulated node lacks never matches on it, where on the
/// real node it may: trace and replay warn, naming the file, the line and the rule, once per
/// rule (failed before: silence). Interfaces the node has, and `+` prefixes one of them
/// matches, draw no warning.
#[test]
fn a_rule_naming_an_interface_the_node_lacks_is_warned_about() {
    let rules = temp_file("iface.rules", "*mangle\n:PREROUTING ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n-A PREROUTING -i tcli -j MARK --set-xmark 0x1/0x1\n-A PREROUTING -i eth0 -j ACCEPT\n-A FORWARD ! -o cni+ -j ACCEPT\n-A PREROUTING -i cali+ -j ACCEPT\nCOMMIT\n");
    let r = rules.to_str().unwrap();
    let (code, _, err) = nfsim(&[
        "trace",
        "--rules",
        r,
        "--pod-cidr",
        "10.244.0.0/16",
        "--packet",
        PKT,
    ]);
    assert_eq!(code, 0, "{err}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warnings.len(), 2, "{err}");
    assert!(
        warnings[0].starts_with(&format!("warning: {r}:4: the rule names interface tcli, which this node lacks (it has lo, eth0, cni0)")),
        "{err}"
    );
    assert!(
        warnings[0].ends_with(": -A PREROUTING -i tcli -j MARK --set-xmark 0x1/0x1"),
        "{err}"
    );
    assert!(
        warnings[1].starts_with(&format!("warning: {r}:7: the rule names interface cali+")),
        "{err}"
    );
    let _ = std::fs::remove_file(&rules);
}

/// A real node's interfaces and routes (`ip -j addr`, `ip -j route` of a node whose uplink is
/// `ens5` and whose pods' bridge is `cbr0`): the node has exactly those, a packet enters on
/// the interface its source routes to, rules naming them match, and a rule naming one it
/// lacks is warned about (failed before: no such flags; `-i cbr0` never matched).
#[test]
fn a_real_nodes_interfaces_and_routes_are_the_node() {
    let rules = temp_file("real-iface.rules", "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n-A FORWARD -i cbr0 -o ens5 -p udp -m udp --dport 9 -j DROP\n-A FORWARD -i cni0 -j DROP\nCOMMIT\n");
    let r = rules.to_str().unwrap();
    let real = [
        "--interfaces",
        "tests/fixtures/cli/ip-addr.json",
        "--routes",
        "tests/fixtures/cli/ip-route.json",
    ];
    let trace = |pkt: &str| {
        let mut a = vec!["trace", "--rules", r, "--packet", pkt];
        a.extend_from_slice(&real);
        nfsim(&a)
    };
    let (code, out, err) = trace("udp 10.244.2.9:4000 -> 10.244.1.5:9");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("node:    lo 127.0.0.1/8 ::1/128, ens5 192.168.0.12/24, cbr0 10.244.2.1/24\n"),
        "{out}"
    );
    assert!(
        out.contains("10.244.1.0/24 via 192.168.0.11 dev ens5"),
        "{out}"
    );
    assert!(
        out.contains("enters:  received on cbr0: the node routes the source 10.244.2.9 there\n"),
        "{out}"
    );
    assert!(out.contains("verdict:      dropped"), "{out}");
    let warnings: Vec<&str> = err.lines().filter(|l| l.starts_with("warning: ")).collect();
    assert_eq!(warnings, [format!("warning: {r}:6: the rule names interface cni0, which this node lacks (it has lo, ens5, cbr0), so it never matches here (negated: always): -A FORWARD -i cni0 -j DROP")], "{err}");
    // From another node's pod: in on ens5 (via the route to 10.244.1.0/24), out on cbr0.
    let (code, out, err) = trace("udp 10.244.1.5:4000 -> 10.244.2.9:9");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("enters:  received on ens5"), "{out}");
    assert!(out.contains("leaves by:    cbr0 to 10.244.2.9"), "{out}");
    // Renaming the default node's interfaces by role has the same effect on the rules.
    let (code, out, _) = trace_on(
        r,
        &[
            "--interface",
            "ens5=uplink",
            "--interface",
            "cbr0=pods",
            "--packet",
            "udp 10.244.2.9:4000 -> 10.244.1.5:9",
        ],
    );
    assert_eq!(code, 0);
    assert!(out.contains("verdict:      dropped"), "{out}");
    assert_refused(
        trace_on(r, &["--interface", "ens5=wan", "--packet", PKT]),
        "--interface \"ens5=wan\": NAME=uplink",
    );
    // replay: a capture on a real interface enters there; one the node lacks is refused.
    let mut a = vec![
        "replay",
        "--rules",
        r,
        "--ingress",
        "cbr0=tests/fixtures/pcap/node-cni0.pcap",
        "-q",
    ];
    a.extend_from_slice(&real);
    let (code, _, err) = nfsim(&a);
    assert_eq!(code, 0, "{err}");
    assert!(!err.contains("back out"), "{err}");
    // What nfsim cannot say: a packet forwarded back out of the link it came in by (on a
    // routed link the kernel's redirect bookkeeping holds back ICMP errors) is a warning.
    let mut a = vec![
        "replay",
        "--rules",
        "tests/fixtures/cli/kube-proxy.rules",
        "--ingress",
        "cbr0=tests/fixtures/pcap/node-cni0.pcap",
        "-q",
    ];
    a.extend_from_slice(&real);
    let (code, out, err) = nfsim(&a);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("warning: 4 packets were forwarded back out of the interface they came in by (first: frame 1: udp 10.244.2.9:40000 -> 10.96.0.10:53 on cbr0): if that interface is a routed link rather than a bridge, the kernel also sends an ICMP redirect (ip_rt_send_redirect)"), "{out}");
    let (code, _, err) = trace("udp 10.244.2.9:4000 -> 10.244.2.7:9");
    assert_eq!(code, 0, "{err}");
    assert!(err.contains("warning: forwarded back out of cbr0, the interface it came in by: if cbr0 is a routed link rather than a bridge"), "{err}");
    let mut a = vec![
        "replay",
        "--rules",
        r,
        "--ingress",
        "cni0=tests/fixtures/pcap/node-cni0.pcap",
    ];
    a.extend_from_slice(&real);
    assert_refused(
        nfsim(&a),
        "an interface of the node (ens5, cbr0 in tests/fixtures/cli/ip-addr.json",
    );
    // Bad files are located errors; --interfaces replaces the addressing flags.
    let bad = temp_file(
        "bad-addr.json",
        "[{\"ifname\": \"eth0\", \"addr_info\": [{\"family\": \"inet\", \"prefixlen\": 24}]}]",
    );
    let b = bad.to_str().unwrap();
    assert_refused(
        nfsim(&["trace", "--rules", r, "--interfaces", b, "--packet", PKT]),
        &format!("{b}: eth0: address #1 of addr_info: no \"local\" address"),
    );
    assert_refused(
        nfsim(&[
            "trace",
            "--rules",
            r,
            "--interfaces",
            b,
            "--pod-cidr",
            "10.244.0.0/16",
            "--packet",
            PKT,
        ]),
        "cannot be used with",
    );
    let _ = std::fs::remove_file(&rules);
    let _ = std::fs::remove_file(&bad);
}

/// IPVS mode's filter (tests/fixtures/cli/ipvs-mode.save): a packet to a Service IP in
/// `KUBE-IPVS-IPS` on a port no Service serves is rejected, one on a served port
/// (`KUBE-CLUSTER-IP`) returns; the sets come from `--ipsets` (real `ipset save` text).
#[test]
fn ipsets_decide_the_ipvs_mode_filter_for_a_service_ip() {
    let sets = "tests/fixtures/cli/ipvs-mode.ipset";
    let run = |pkt: &str| {
        trace_on(
            "tests/fixtures/cli/ipvs-mode.save",
            &["--ipsets", sets, "--local", "--packet", pkt],
        )
    };
    let (code, out, err) = run("udp 192.168.0.12:40000 -> 10.96.0.10:53");
    assert_eq!(code, 0, "{err}");
    assert!(
        out.contains("MATCH     -m set --match-set KUBE-CLUSTER-IP dst,dst -j RETURN"),
        "{out}"
    );
    assert!(out.contains("verdict:      transmitted"), "{out}");
    let (code, out, err) = run("tcp 192.168.0.12:40000 -> 10.96.0.10:80");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("=> rejected by filter OUTPUT"), "{out}");
    // Without the sets the rules do not load: the kernel refuses a rule naming a set that
    // does not exist.
    assert_refused(
        trace_on(
            "tests/fixtures/cli/ipvs-mode.save",
            &[
                "--local",
                "--packet",
                "udp 192.168.0.12:40000 -> 10.96.0.10:53",
            ],
        ),
        "Set KUBE-LOAD-BALANCER doesn't exist.",
    );
    // A bad line of the sets file names the file and the line.
    let bad = temp_file("bad.ipset", "create A hash:ip\nadd A 10.0.0.300\n");
    assert_refused(
        trace_on(
            "tests/fixtures/cli/ipvs-mode.save",
            &[
                "--ipsets",
                bad.to_str().unwrap(),
                "--local",
                "--packet",
                "udp 192.168.0.12:1 -> 10.96.0.10:53",
            ],
        ),
        "bad.ipset",
    );
    assert_refused(
        trace_on(
            "tests/fixtures/cli/ipvs-mode.save",
            &[
                "--ipsets",
                bad.to_str().unwrap(),
                "--local",
                "--packet",
                "udp 192.168.0.12:1 -> 10.96.0.10:53",
            ],
        ),
        ":2: expected an IPv4 address, got \"10.0.0.300\"",
    );
}
