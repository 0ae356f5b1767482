//! Many CPUs and many kernels (#27): `nodes[].cpus`, `kernel.version`, the confirm race of
//! glibc's parallel A/AAAA queries and what each release does with it
//! (docs/kernel-model.md §22, scenarios/dns-race-5s.yaml).

#[path = "support/cli.rs"]
mod cli;
#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::scenario::load_str;
use scenario_run::{run_scenario, run_text};

const FILE: &str = "scenarios/dns-race-5s.yaml";
const SHIPPED: &str = include_str!("../scenarios/dns-race-5s.yaml");

#[test]
fn the_shipped_race_passes_by_release_and_is_the_same_run_twice() {
    let a = run_text(FILE, SHIPPED, false);
    let failed: Vec<_> = a.results.iter().filter(|r| !r.passed).collect();
    assert!(failed.is_empty(), "{failed:#?}");
    let b = run_text(FILE, SHIPPED, false);
    assert_eq!(a.summary, b.summary);
    let details = |r: &nfsim::cluster::sim::RunResult| {
        r.results
            .iter()
            .map(|x| x.detail.clone())
            .collect::<Vec<_>>()
    };
    assert_eq!(details(&a), details(&b), "deterministic under the seed");
    // Another seed: other CPUs, other draws, other counts; the same story.
    let c = run_text(FILE, &SHIPPED.replace("seed: 1\n", "seed: 9\n"), false);
    assert!(c.passed(), "{:#?}", c.results);
    assert_ne!(details(&a), details(&c));
}

#[test]
fn with_one_cpu_nothing_races_on_any_release() {
    let text = SHIPPED.replace("cpus: 2", "cpus: 1");
    let r = run_text(FILE, &text, false);
    let by_name = |n: &str| r.results.iter().find(|x| x.name.starts_with(n)).unwrap();
    // A failed count reads `stalled 0, expected …`, a passed one `clash_resolve=0`.
    let zero = |d: &str, w: &str| d.contains(&format!("{w} 0,")) || d.contains(&format!("{w}=0"));
    let stall = by_name("on 4.14 a share of the lookups stall");
    assert!(!stall.passed && zero(&stall.detail, "stalled"), "{stall:?}");
    let stats = by_name("on 4.14 every clash is an insert_failed");
    assert!(
        zero(&stats.detail, "insert_failed") && zero(&stats.detail, "drop"),
        "{}",
        stats.detail
    );
    let stats = by_name("on 6.6 every clash is resolved");
    assert!(zero(&stats.detail, "clash_resolve"), "{}", stats.detail);
}

fn load_err(text: &str) -> String {
    match load_str("t.yaml", text) {
        Ok(_) => panic!("loaded"),
        Err(e) => e.to_string(),
    }
}

const BASE: &str = "name: t\nduration: 1s\nnodes:\n  - name: n1\n    address: 192.168.0.11\n    podCIDR: 10.244.1.0/24\n";

#[test]
fn kernel_versions_and_cpus_are_checked_at_their_place() {
    let e = load_err(&format!("{BASE}    kernel: {{version: \"4.9\"}}\n"));
    assert!(
        e.starts_with("t.yaml:7:")
            && e.contains("older than the oldest release nfsim models (4.14)"),
        "{e}"
    );
    let e = load_err(&format!("{BASE}    kernel: {{version: banana}}\n"));
    assert!(
        e.starts_with("t.yaml:7:") && e.contains("not a kernel version"),
        "{e}"
    );
    let e = load_err(&format!("{BASE}    kernel: {{version: \"7.2\"}}\n"));
    assert!(
        e.contains("newer than the release nfsim's model follows (6.18)"),
        "{e}"
    );
    let e = load_err(&format!("{BASE}    kernel: {{release: \"5.4\"}}\n"));
    assert!(e.starts_with("t.yaml:7:"), "{e}");
    let e = load_err(&format!("{BASE}    cpus: 0\n"));
    assert!(
        e.starts_with("t.yaml:7:") && e.contains("expected 1 to 256"),
        "{e}"
    );
    // The scenario's default, and an unquoted version read as text (4.10 is not 4.1).
    let e = load_err(&format!("kernel: {{version: 4.10}}\n{BASE}"));
    assert!(
        e.starts_with("t.yaml:1:") && e.contains("kernel 4.10 is older"),
        "{e}"
    );
    let sc = load_str("t.yaml", &format!("kernel: {{version: 5.10}}\n{BASE}")).unwrap();
    assert_eq!(sc.nodes[0].kernel.to_string(), "5.10");
    let sc = load_str("t.yaml", BASE).unwrap();
    assert_eq!(sc.nodes[0].kernel, sim_conntrack::KernelVersion::MODEL);
    assert_eq!(sc.nodes[0].cpus, 1);
}

#[test]
fn nftables_mode_on_a_kernel_before_5_13_is_refused_at_the_version() {
    let text = format!("{BASE}    kernel: {{version: \"5.10\"}}\nkubeProxy: {{mode: nftables}}\n");
    let e = load_err(&text);
    assert!(
        e.starts_with("t.yaml:7:") && e.contains("kube-proxy's nftables mode needs kernel 5.13"),
        "{e}"
    );
    let ok = format!("{BASE}    kernel: {{version: \"5.13\"}}\nkubeProxy: {{mode: nftables}}\n");
    load_str("t.yaml", &ok).unwrap();
}

#[test]
fn the_udp_stream_timeout_default_is_the_releases() {
    let stream = |v: &str, extra: &str| {
        let sc = load_str(
            "t.yaml",
            &format!("{BASE}    kernel: {{version: \"{v}\"}}\n{extra}"),
        )
        .unwrap();
        sc.nodes[0]
            .sysctls
            .get("net.netfilter.nf_conntrack_udp_timeout_stream")
            .copied()
    };
    assert_eq!(stream("5.13", ""), Some(180));
    assert_eq!(stream("5.14", ""), None, "the model's own 120 s");
    assert_eq!(
        stream(
            "4.19",
            "sysctls:\n  net.netfilter.nf_conntrack_udp_timeout_stream: 60\n"
        ),
        Some(60),
        "a sysctl the file sets wins"
    );
    // And it reaches the node's table.
    let sc = load_str(
        "t.yaml",
        &format!("{BASE}    kernel: {{version: \"4.19\"}}\n"),
    )
    .unwrap();
    let r = run_scenario(sc, false);
    assert!(r.passed());
}

#[test]
fn a_sweep_over_kernel_versions_measures_the_race() {
    let (code, out, err) = cli::nfsim(&[
        "sweep",
        FILE,
        "--seeds",
        "1..2",
        "--set",
        "nodes.0.kernel.version=4.14,4.19,5.4,5.10,6.6",
        "-q",
    ]);
    assert_eq!(code, 0, "{err}");
    let a: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let combos = a["combos"].as_array().unwrap();
    assert_eq!(combos.len(), 5);
    // node-414's first expectation: a share of its lookups stall. Every seed on 4.14; on
    // 6.6 none stall, so it fails.
    let stall = |c: usize| combos[c]["expectations"][0]["passed"].as_u64().unwrap();
    assert_eq!(stall(0), 2, "{}", combos[0]);
    assert_eq!(stall(4), 0, "{}", combos[4]);
}
