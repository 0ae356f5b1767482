//! `nfsim trace` on the kube-proxy fixture (tests/fixtures/cli/kube-proxy.rules): kube-dns
//! 10.96.0.10:53/udp with three endpoints, kubernetes 10.96.0.1:443 with one, a service
//! without endpoints; the node is 172.18.0.2/24 with pod CIDR 10.244.0.0/16 behind cni0.

use serde_json::Value;

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;

const RULES: &str = "tests/fixtures/cli/kube-proxy.rules";
const ENDPOINTS: [&str; 3] = ["10.244.1.7:53", "10.244.1.8:53", "10.244.2.5:53"];

/// `nfsim trace --json` of `packet` with `extra` flags, parsed.
fn trace_json(packet: &str, extra: &[&str]) -> Value {
    let mut args = vec![
        "trace",
        "--rules",
        RULES,
        "--node-addr",
        "172.18.0.2",
        "--pod-cidr",
        "10.244.0.0/16",
        "--packet",
        packet,
        "--json",
    ];
    args.extend_from_slice(extra);
    let (code, out, err) = nfsim(&args);
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// `nfsim trace --all-branches` of a UDP packet 192.0.2.1:1000 -> 198.51.100.1:53 through
/// `rules` (written to a temporary file named after `tag`), with `extra` flags.
fn all_branches(tag: &str, rules: &str, extra: &[&str]) -> (i32, String, String) {
    let file = std::env::temp_dir().join(format!("nfsim-cli-{tag}-{}.rules", std::process::id()));
    std::fs::write(&file, rules).unwrap();
    let mut args = vec![
        "trace",
        "--rules",
        file.to_str().unwrap(),
        "--packet",
        "udp 192.0.2.1:1000 -> 198.51.100.1:53",
        "--all-branches",
    ];
    args.extend_from_slice(extra);
    let r = nfsim(&args);
    let _ = std::fs::remove_file(&file);
    r
}

fn steps_of<'a>(v: &'a Value, kind: &str) -> Vec<&'a Value> {
    v["steps"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["kind"] == kind)
        .collect()
}

#[test]
fn a_pod_query_to_the_cluster_ip_is_dnatted_to_one_endpoint_and_not_masqueraded() {
    let v = trace_json("udp 10.244.2.9:40000 -> 10.96.0.10:53", &[]);
    assert_eq!(v["ingress"], "cni0");
    let o = &v["outcome"];
    assert_eq!(o["verdict"], "transmitted");
    assert_eq!(o["interface"], "cni0");
    let dnat = o["dnat"].as_str().unwrap();
    let ep = dnat.strip_prefix("10.96.0.10:53 -> ").unwrap();
    assert!(ENDPOINTS.contains(&ep), "{dnat}");
    assert_eq!(
        o["final_packet"].as_str().unwrap(),
        format!("udp 10.244.2.9:40000 -> {ep}")
    );
    assert_eq!(o["masqueraded"], false);
    assert!(o["snat"].is_null());

    // Every hook on the way, in the kernel's order, and the rules with their numbers.
    let hooks: Vec<&str> = steps_of(&v, "hook")
        .iter()
        .map(|s| s["hook"].as_str().unwrap())
        .collect();
    assert_eq!(hooks, ["PREROUTING", "FORWARD", "POSTROUTING"]);
    let rules = steps_of(&v, "rule");
    let svc: Vec<&&Value> = rules
        .iter()
        .filter(|r| r["table"] == "nat" && r["chain"] == "KUBE-SVC-TCOU7JCQXEZGVUNU")
        .collect();
    assert_eq!(svc[0]["num"], 1);
    assert_eq!(
        svc[0]["matched"], false,
        "pod traffic is not marked for masquerade"
    );
    let draw = &svc[1]["draws"][0];
    assert_eq!(draw["mode"], "random");
    assert_eq!(draw["threshold"], 715_827_883);
    assert_eq!(
        svc[1]["matched"],
        draw["draw"].as_u64().unwrap() < 715_827_883,
        "the rule matched exactly when the draw was below the threshold"
    );
    let setup = steps_of(&v, "nat_setup");
    assert_eq!(setup[0]["manip"], "DNAT");
    assert_eq!(setup[0]["hook"], "PREROUTING");
    let route = steps_of(&v, "route");
    assert!(route[0]["decision"]
        .as_str()
        .unwrap()
        .contains("dev cni0: FORWARD"));
    assert!(v["conntrack"]
        .as_str()
        .unwrap()
        .contains("src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 [UNREPLIED]"));
}

/// (numerator, denominator) of a probability object, exactly.
fn frac(p: &Value) -> (u128, u128) {
    (
        p["numerator"].as_str().unwrap().parse().unwrap(),
        p["denominator"].as_str().unwrap().parse().unwrap(),
    )
}

#[test]
fn all_branches_lists_each_endpoint_with_its_exact_probability_summing_to_one() {
    let v = trace_json("udp 10.244.2.9:40000 -> 10.96.0.10:53", &["--all-branches"]);
    let b = &v["branches"];
    let outs = b["outcomes"].as_array().unwrap();
    assert_eq!(outs.len(), 3, "{b:#}");
    let mut eps: Vec<&str> = outs
        .iter()
        .map(|o| {
            o["outcome"]["dnat"]
                .as_str()
                .unwrap()
                .strip_prefix("10.96.0.10:53 -> ")
                .unwrap()
        })
        .collect();
    eps.sort();
    assert_eq!(eps, ENDPOINTS);
    // The kernel's quantized probabilities: round(0.3333333333 × 2^31) / 2^31 for the first
    // endpoint, half of the rest for each of the others.
    let fracs: Vec<&str> = outs
        .iter()
        .map(|o| o["probability"]["fraction"].as_str().unwrap())
        .collect();
    assert_eq!(
        fracs,
        [
            "715827883/2147483648",
            "1431655765/4294967296",
            "1431655765/4294967296"
        ]
    );
    // Exactly 1 in total, each within the quantization error of 1/3.
    let (mut num, den) = (0u128, 1u128 << 32);
    for o in outs {
        let (n, d) = frac(&o["probability"]);
        num += n * (den / d);
        let x: f64 = o["probability"]["decimal"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!((x - 1.0 / 3.0).abs() < 1e-9, "{x}");
    }
    assert_eq!(num, den);
    assert_eq!(b["sums_to_one"], true);
    assert_eq!(b["total"]["fraction"], "1");
    assert_eq!(b["statistic_rules"], 2);
    // The paths: the first endpoint on rule 2 matching; the last on rules 2 and 3 failing.
    let first_path = &outs[0]["paths"][0];
    assert_eq!(first_path.as_array().unwrap().len(), 1);
    assert_eq!(first_path[0]["rule"], 2);
    assert_eq!(first_path[0]["matched"], true);

    // The text form says the same.
    let (code, text, _) = nfsim(&[
        "trace",
        "--rules",
        RULES,
        "--pod-cidr",
        "10.244.0.0/16",
        "--packet",
        "udp 10.244.2.9:40000 -> 10.96.0.10:53",
        "--all-branches",
    ]);
    assert_eq!(code, 0);
    assert!(text.contains("all branches: 3 outcomes"), "{text}");
    assert!(
        text.contains("[1] p = 715827883/2147483648 ≈ 0.333333333489"),
        "{text}"
    );
    assert!(text.contains("total: 1 (exactly 1)"), "{text}");
}

#[test]
fn a_packet_from_outside_the_pod_cidr_is_marked_and_masqueraded() {
    let v = trace_json("udp 172.18.0.5:40000 -> 10.96.0.10:53", &["--all-branches"]);
    assert_eq!(v["ingress"], "eth0");
    let o = &v["outcome"];
    assert_eq!(o["masqueraded"], true);
    let fin = o["final_packet"].as_str().unwrap();
    assert!(
        fin.starts_with("udp 10.244.0.1:"),
        "source is cni0's address: {fin}"
    );
    assert!(o["snat"]
        .as_str()
        .unwrap()
        .starts_with("172.18.0.5:40000 -> 10.244.0.1:"));
    let marks = steps_of(&v, "mark");
    assert_eq!(marks[0]["to"], 0x4000, "KUBE-MARK-MASQ set the bit");
    let masq = steps_of(&v, "nat_setup")
        .into_iter()
        .find(|s| s["hook"] == "POSTROUTING")
        .unwrap();
    assert!(masq["what"].as_str().unwrap().starts_with("MASQUERADE"));
    // Masqueraded whichever endpoint it goes to.
    let outs = v["branches"]["outcomes"].as_array().unwrap();
    assert_eq!(outs.len(), 3);
    assert!(outs.iter().all(|o| o["outcome"]["masqueraded"] == true));

    let (_, text, _) = nfsim(&[
        "trace",
        "--rules",
        RULES,
        "--pod-cidr",
        "10.244.0.0/16",
        "--packet",
        "udp 172.18.0.5:40000 -> 10.96.0.10:53",
    ]);
    assert!(
        text.contains("masqueraded:  yes, 172.18.0.5:40000 -> 10.244.0.1:"),
        "{text}"
    );
    assert!(text.contains("MASQUERADE --random-fully"), "{text}");
}

#[test]
fn a_service_with_one_endpoint_has_one_outcome_of_probability_one() {
    let v = trace_json("tcp 10.244.2.9:40000 -> 10.96.0.1:443", &["--all-branches"]);
    let outs = v["branches"]["outcomes"].as_array().unwrap();
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0]["probability"]["fraction"], "1");
    assert_eq!(outs[0]["outcome"]["interface"], "eth0");
    assert_eq!(
        outs[0]["outcome"]["final_packet"],
        "tcp 10.244.2.9:40000 -> 172.18.0.3:6443 SYN"
    );
    assert_eq!(v["branches"]["runs"], 1);
}

#[test]
fn a_local_connection_to_a_service_without_endpoints_is_rejected_at_output() {
    let v = trace_json("tcp 172.18.0.2:40000 -> 10.96.200.1:80", &["--local"]);
    assert_eq!(v["ingress"], "local");
    assert_eq!(v["outcome"]["verdict"], "rejected");
    assert_eq!(v["outcome"]["detail"], "rejected by filter OUTPUT");
    assert!(v["outcome"]["final_packet"].is_null());
    let hooks: Vec<&str> = steps_of(&v, "hook")
        .iter()
        .map(|s| s["hook"].as_str().unwrap())
        .collect();
    assert_eq!(hooks[0], "OUTPUT");
}

#[test]
fn same_seed_same_output_and_seeds_choose_endpoints() {
    let run = |seed: &str| {
        nfsim(&[
            "trace",
            "--rules",
            RULES,
            "--pod-cidr",
            "10.244.0.0/16",
            "--seed",
            seed,
            "--packet",
            "udp 10.244.2.9:40000 -> 10.96.0.10:53",
        ])
        .1
    };
    assert_eq!(run("7"), run("7"));
    let chosen: std::collections::BTreeSet<String> = (1..=12)
        .map(|s| {
            let out = run(&s.to_string());
            out.lines()
                .find(|l| l.starts_with("DNAT:"))
                .unwrap()
                .to_string()
        })
        .collect();
    assert!(chosen.len() >= 2, "twelve seeds all chose {chosen:?}");
}

#[test]
fn bad_input_gives_a_located_error_and_a_nonzero_exit() {
    let (code, out, err) = nfsim(&[
        "trace",
        "--rules",
        "tests/fixtures/cli/malformed.rules",
        "--packet",
        "udp 10.244.2.9:40000 -> 10.96.0.10:53",
    ]);
    assert_eq!(code, 2);
    assert!(out.is_empty());
    assert!(
        err.contains("tests/fixtures/cli/malformed.rules:4: bad value \"fifty-three\" for --dport"),
        "{err}"
    );

    let (code, _, err) = nfsim(&["trace", "--rules", RULES, "--packet", "udp 10.244.2.9 -> x"]);
    assert_eq!(code, 2);
    assert!(err.contains("--packet"), "{err}");

    let (code, _, err) = nfsim(&[
        "trace",
        "--rules",
        RULES,
        "--local",
        "--packet",
        "udp 10.244.2.9:40000 -> 10.96.0.10:53",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("a source address of the node"), "{err}");

    let (code, _, err) = nfsim(&[
        "trace",
        "--rules",
        RULES,
        "--pod-cidr",
        "172.18.0.0/16",
        "--packet",
        "udp 10.244.2.9:40000 -> 10.96.0.10:53",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("--pod-cidr"), "{err}");

    // kube-proxy's nfacct counter cannot be created in the node yet: a clear way out.
    let (code, _, err) = nfsim(&[
        "trace",
        "--rules",
        "tests/fixtures/cli/nfacct.rules",
        "--packet",
        "udp 10.244.2.9:40000 -> 10.96.0.10:53",
    ]);
    assert_eq!(code, 2);
    assert!(err.contains("nfacct.rules:"), "{err}");
    assert!(
        err.contains("deleting `-m nfacct --nfacct-name ct_state_invalid_dropped_pkts`"),
        "{err}"
    );

    let (code, _, err) = nfsim(&[
        "trace",
        "--rules",
        "tests/fixtures/cli/no-such-file",
        "--packet",
        "udp 10.244.2.9:40000 -> 10.96.0.10:53",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("cannot read tests/fixtures/cli/no-such-file"),
        "{err}"
    );
}

#[test]
fn all_branches_handles_inverted_random_and_leaves_nth_deterministic() {
    // nth: the first packet a fresh rule sees has index 0, so it always matches; the inverted
    // random match matches with 1 − 0.25. Both together drop the packet in FORWARD.
    let rules = "\
*mangle
:PREROUTING ACCEPT [0:0]
-A PREROUTING -m statistic --mode nth --every 2 --packet 0 -j MARK --set-xmark 0x1/0x1
-A PREROUTING -m statistic --mode random ! --probability 0.25 -j MARK --set-xmark 0x2/0x2
COMMIT
*filter
:FORWARD ACCEPT [0:0]
-A FORWARD -m mark --mark 0x3 -j DROP
COMMIT
";
    let (code, out, err) = all_branches("trace", rules, &["--json"]);
    assert_eq!(code, 0, "{err}");
    let v: Value = serde_json::from_str(&out).unwrap();
    let b = &v["branches"];
    assert_eq!(b["statistic_rules"], 1, "nth is not branched: {b:#}");
    let outs = b["outcomes"].as_array().unwrap();
    assert_eq!(outs.len(), 2);
    assert_eq!(outs[0]["outcome"]["verdict"], "dropped");
    assert_eq!(outs[0]["probability"]["fraction"], "3/4");
    assert_eq!(outs[0]["paths"][0][0]["matched"], true);
    assert_eq!(outs[1]["outcome"]["verdict"], "transmitted");
    assert_eq!(outs[1]["probability"]["fraction"], "1/4");
    assert_eq!(b["sums_to_one"], true);
}

/// Fourteen non-terminal coin flips are 2^14 paths: `--all-branches` stops at its run limit
/// and says so in the JSON (`stopped_at_limit`, a note) and in the text, exit 0 (before, it
/// aborted on allocation).
#[test]
fn all_branches_past_the_run_limit_says_it_stopped() {
    let rules = nfsim::testkit::examples::coin_flip_mark_rules(14);
    let (code, text, err) = all_branches("coins", &rules, &[]);
    let (jcode, json, jerr) = all_branches("coins-json", &rules, &["--json"]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("4096 runs: stopped at the run limit"),
        "{text}"
    );
    assert!(text.contains("NOT 1: stopped at the run limit"));
    assert_eq!(jcode, 0, "{jerr}");
    let v: Value = serde_json::from_str(&json).unwrap();
    let b = &v["branches"];
    assert_eq!(b["stopped_at_limit"], true);
    assert_eq!(b["run_limit"], 4096);
    assert_eq!(b["sums_to_one"], false);
    assert_eq!(b["total"]["fraction"], "1/4");
    assert!(b["notes"][0]
        .as_str()
        .unwrap()
        .starts_with("stopped at the limit of 4096 runs"));
}

/// `nfsim trace --rules` with kube-proxy's `ip6` table (tests/fixtures/cli/kube-proxy6.nft)
/// on a node whose `ip -j addr` has IPv6 addresses: the Service's datagram DNAT'd to the pod
/// through the `ipv6_addr . inet_proto . inet_service` map, and one to a Service without
/// endpoints rejected with ICMPv6 port unreachable from the node's address.
#[test]
fn an_ipv6_packet_meets_the_ip6_kube_proxy_table() {
    let trace = |packet: &str| {
        let (code, out, err) = nfsim(&[
            "trace",
            "--rules",
            "tests/fixtures/cli/kube-proxy6.nft",
            "--interfaces",
            "tests/fixtures/cli/ip-addr6.json",
            "--packet",
            packet,
        ]);
        assert_eq!(code, 0, "{err}");
        out
    };
    let out = trace("udp [fd00::2]:40000 -> [fd00:96::10]:53");
    for w in [
        "services #1 MATCH    ip6 daddr . meta l4proto . th dport vmap @service-ips [@service-ips: goto service-AAAAAAAA-ns/dns/udp/dns]",
        "DNAT:         [fd00:96::10]:53 -> [fd01::5]:5353",
        "fate:         transmitted on cni0 to fd01::5: udp [fd00::2]:40000 -> [fd01::5]:5353",
    ] {
        assert!(out.contains(w), "{w:?} not in\n{out}");
    }
    let out = trace("udp [fd00::2]:42000 -> [fd01::7]:53");
    for w in [
        "fate:         rejected by nft chain ip6 kube-proxy filter-forward (FORWARD)",
        "transmitted on eth0 to fd00::2: icmpv6 fd00::1 -> fd00::2 unreachable code=4",
    ] {
        assert!(out.contains(w), "{w:?} not in\n{out}");
    }
}

/// An IPv6-only node (EKS IPv6, a single-stack IPv6 kubeadm node) has no IPv4 address but
/// lo's: its `ip -j addr` is taken, and its IPv6 Service traffic is DNAT'd as on a dual-stack
/// one. A file with no address outside lo is still refused.
#[test]
fn an_ipv6_only_nodes_interfaces_are_taken() {
    let (code, out, err) = nfsim(&[
        "trace",
        "--rules",
        "tests/fixtures/cli/kube-proxy6.nft",
        "--interfaces",
        "tests/fixtures/cli/ip-addr6-only.json",
        "--packet",
        "udp [fd00::2]:40000 -> [fd00:96::10]:53",
    ]);
    assert_eq!(code, 0, "{err}");
    for w in [
        "node:    lo 127.0.0.1/8 ::1/128, eth0 fd00::1/64, cni0 fd01::1/64",
        "DNAT:         [fd00:96::10]:53 -> [fd01::5]:5353",
        "fate:         transmitted on cni0 to fd01::5: udp [fd00::2]:40000 -> [fd01::5]:5353",
    ] {
        assert!(out.contains(w), "{w:?} not in\n{out}");
    }
    let dir = std::env::temp_dir().join(format!("nfsim-v6only-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let lo_only = dir.join("ip-addr.json");
    std::fs::write(
        &lo_only,
        r#"[{"ifindex":1,"ifname":"lo","addr_info":[{"family":"inet6","local":"::1","prefixlen":128}]},
 {"ifindex":2,"ifname":"eth0","addr_info":[]}]"#,
    )
    .unwrap();
    let (code, _, err) = nfsim(&[
        "trace",
        "--rules",
        "tests/fixtures/cli/kube-proxy6.nft",
        "--interfaces",
        lo_only.to_str().unwrap(),
        "--packet",
        "udp [fd00::2]:40000 -> [fd00:96::10]:53",
    ]);
    std::fs::remove_dir_all(&dir).ok();
    assert_eq!(code, 2);
    assert!(
        err.contains("no interface but lo has an address: not a node's `ip -j addr`"),
        "{err}"
    );
}
