//! Impossible command-line values are errors before anything runs: an instant after the end
//! of the run, an unknown node (the error lists the nodes), a rule the kernel refuses.

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;

const SC: &str = "scenarios/stale-dns-udp.yaml";

#[test]
fn instants_after_the_end_of_the_run_are_errors() {
    for args in [
        vec!["run", SC, "--until", "2h"],
        vec!["run", SC, "--dump-conntrack", "2h"],
        vec!["rules", SC, "--node", "node-1", "--at", "2h"],
        vec!["conntrack", SC, "--node", "node-1", "--at", "2h"],
    ] {
        let (code, out, err) = nfsim(&args);
        assert_eq!(code, 2, "{args:?}: {err}");
        assert!(out.is_empty(), "{args:?}: nothing runs");
        assert!(
            err.contains("2h is after the end of the run (1h") && err.lines().count() == 1,
            "{args:?}: {err}"
        );
    }
    // The end itself is fine.
    let (code, _, err) = nfsim(&["conntrack", SC, "--node", "node-1", "--at", "1h"]);
    assert_eq!(code, 0, "{err}");
}

#[test]
fn an_unknown_node_lists_the_nodes() {
    for args in [
        vec!["rules", SC, "--node", "node-9"],
        vec!["conntrack", SC, "--node", "node-9", "--at", "1m"],
    ] {
        let (code, _, err) = nfsim(&args);
        assert_eq!(code, 2);
        assert!(
            err.contains("--node \"node-9\"") && err.contains("expected one of node-1, node-2"),
            "{err}"
        );
    }
}

#[test]
fn a_recent_hitcount_the_kernel_refuses_is_an_error() {
    let dir = std::env::temp_dir();
    let rules = |n: u32| {
        let p = dir.join(format!("nfsim-recent-{n}-{}.rules", std::process::id()));
        std::fs::write(
            &p,
            format!("*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -m recent --rcheck --hitcount {n} --name x -j DROP\nCOMMIT\n"),
        )
        .unwrap();
        p
    };
    let ok = rules(65535);
    let (code, out, err) = nfsim(&["rules", "normalize", ok.to_str().unwrap()]);
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("--hitcount 65535"), "{out}");
    let bad = rules(65536);
    let (code, _, err) = nfsim(&["rules", "normalize", bad.to_str().unwrap()]);
    assert_eq!(code, 2);
    assert!(
        err.contains("hitcount (65536) is larger than allowed maximum (65535)"),
        "{err}"
    );
    let _ = std::fs::remove_file(ok);
    let _ = std::fs::remove_file(bad);
}

/// A Service selecting no pod: one warning on stderr, before the run, whatever the command;
/// the run goes on and its output (text and JSON lines) is what it is without the warning.
#[test]
fn a_service_selecting_no_pod_is_warned_about_once_on_stderr() {
    let text = std::fs::read_to_string(format!("{}/{SC}", cli::ROOT))
        .unwrap()
        .replace(
            "selector: {k8s-app: kube-dns}",
            "selector: {k8s-app: kube-dnz}",
        );
    assert!(
        text.contains("kube-dnz"),
        "the scenario still selects by k8s-app"
    );
    let path = std::env::temp_dir().join(format!("nfsim-nopod-{}.yaml", std::process::id()));
    std::fs::write(&path, &text).unwrap();
    let p = path.to_str().unwrap();
    let warning = "warning: Service kube-system/kube-dns selects no pod";
    let (_, out, err) = nfsim(&["run", p, "--until", "1m"]);
    assert_eq!(err.matches(warning).count(), 1, "{err}");
    assert!(!out.contains("warning"), "{out}");
    let (_, out, err) = nfsim(&["run", p, "--until", "1m", "--json", "-"]);
    assert_eq!(err.matches(warning).count(), 1, "{err}");
    for line in out.lines() {
        serde_json::from_str::<serde_json::Value>(line).unwrap_or_else(|e| panic!("{e}: {line}"));
    }
    let (code, _, err) = nfsim(&["rules", p, "--node", "node-1"]);
    assert_eq!((code, err.matches(warning).count()), (0, 1), "{err}");
    let (_, _, err) = nfsim(&["run", SC, "--until", "1m"]);
    assert!(!err.contains("warning"), "{err}");
    let _ = std::fs::remove_file(path);
}

/// An error whose message already holds its cause says the cause once (it was printed twice:
/// once in the message, once more as the cause).
#[test]
fn an_error_says_its_cause_once() {
    let (code, _, err) = nfsim(&["rules", "normalize", "/nonexistent/x.rules"]);
    assert_eq!(code, 2);
    assert_eq!(err.matches("No such file or directory").count(), 1, "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    let (code, _, err) = nfsim(&[
        "trace",
        "--rules",
        "tests/fixtures/cli/kube-proxy.rules",
        "--packet",
        "udp 10.244.1.900:40000 -> 10.96.0.10:53",
    ]);
    assert_eq!(code, 2);
    assert_eq!(err.matches("bad packet").count(), 1, "{err}");
    assert!(
        err.starts_with("error: --packet: bad packet \"udp 10.244.1.900:40000")
            && err.contains("is not an address:port"),
        "{err}"
    );
}

/// `nfsim sweep` reads its scenario, and `sweep merge` its results files, with the same size
/// limits as the other commands: an endless file is refused, not read until memory runs out.
#[test]
fn sweep_refuses_endless_inputs() {
    if !std::path::Path::new("/dev/zero").exists() {
        println!("skipped: sweep_refuses_endless_inputs: no /dev/zero");
        return;
    }
    let (code, _, err) = nfsim(&["sweep", "/dev/zero", "--seeds", "1..2"]);
    assert_eq!(code, 2);
    assert!(
        err.contains("larger than 64 MiB") && err.contains("MAX_SCENARIO_BYTES"),
        "{err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
}
