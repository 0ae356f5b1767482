//! `nfsim conntrack FILE --node N --at T [conntrack's own options]`: conntrack-tools 1.4.7's
//! filters, its refusals (exit 2, its words), -S, -C, -D shown but not applied, and -E.

#[path = "support/cli.rs"]
mod cli;
use cli::nfsim;

const S: &str = "scenarios/stale-dns-udp-latest.yaml";

#[test]
fn filters_refusals_and_commands() {
    let at = |extra: &[&str]| {
        let mut a = vec!["conntrack", S, "--node", "node-2", "--at", "4m"];
        a.extend_from_slice(extra);
        nfsim(&a)
    };
    let (code, out, err) = at(&["-L", "-p", "udp", "--dst-nat", "--orig-dst", "10.96.0.10"]);
    assert_eq!(code, 0, "{err}");
    assert_eq!(out.lines().count(), 1, "{out}");
    assert!(out.contains("src=10.244.1.5"), "{out}");
    assert!(err.contains("1 flow entries have been shown."), "{err}");
    let (_, out, _) = at(&["-p", "tcp"]);
    assert_eq!(out, "");
    for (args, msg) in [
        (
            &["-D", "--any-nat"][..],
            "Illegal option `--any-nat' with this command",
        ),
        (&["--sport", "3"][..], "unknown option `--sport'"),
        (&["-p", "bogus"][..], "`bogus' unsupported protocol"),
        (
            &["-p", "tcp", "--state", "FOO"][..],
            "unknown TCP state `FOO'",
        ),
        (
            &["-S", "-p", "udp"][..],
            "Illegal option `--protonum' with this command",
        ),
        (
            &["-C", "-s", "1.2.3.4"][..],
            "Illegal option `--src' with this command",
        ),
    ] {
        let (code, out, err) = at(args);
        assert_eq!(code, 2, "{args:?}");
        assert_eq!(out, "");
        assert_eq!(
            err,
            format!("conntrack v1.4.7 (conntrack-tools): {msg}\nTry `conntrack -h' or 'conntrack --help' for more information.\n"),
            "{args:?}"
        );
    }
    // -D shows what it would delete and changes nothing; nothing matched is exit 1.
    let (code, out, err) = at(&["-D", "-p", "udp"]);
    assert_eq!(code, 0);
    assert_eq!(out.lines().count(), 1);
    assert!(err.contains("1 flow entries have been deleted."), "{err}");
    let (code, _, _) = at(&["-D", "-p", "tcp"]);
    assert_eq!(code, 1);
    let (_, out, _) = at(&["-C"]);
    assert_eq!(out, "1\n");
    let (_, out, _) = at(&["-S"]);
    assert!(out.starts_with("cpu=0   \tfound=0 invalid="), "{out}");
    // -E between two instants, with the -o timestamp prefix in simulated seconds.
    let (code, out, err) = nfsim(&[
        "conntrack",
        S,
        "--node",
        "node-2",
        "-E",
        "--from",
        "5m",
        "--to",
        "6m",
    ]);
    assert_eq!(code, 0, "{err}");
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with("[00000302.100000]\t[DESTROY] udp      17 117 src=10.244.2.9"),
        "{out}"
    );
    assert!(first.ends_with("[USERSPACE] portid=0"), "{first}");
    assert!(err.contains("flow events have been shown."), "{err}");
}

/// `-E` takes the `-L` filters (conntrack.c: event_cb applies nfct_filter to each event's
/// entry, as dump_cb does for -L) and `-e/--event-mask`; it refuses what its row of
/// commands_v_options refuses, first in option-bit order (checked against conntrack 1.4.7).
#[test]
fn events_take_the_list_filters_and_the_event_mask() {
    let ev = |extra: &[&str]| {
        let mut a = vec![
            "conntrack",
            S,
            "--node",
            "node-2",
            "-E",
            "--from",
            "0s",
            "--to",
            "6m",
        ];
        a.extend_from_slice(extra);
        nfsim(&a)
    };
    let (code, all, err) = ev(&[]);
    assert_eq!(code, 0, "{err}");
    let n_all = all.lines().count();
    assert!(n_all > 3, "{all}");
    // Only the sidecar's flow (source port 40000).
    let (code, out, err) = ev(&["-p", "udp", "--sport", "40000"]);
    assert_eq!(code, 0, "{err}");
    assert!(!out.is_empty());
    assert!(
        out.lines().all(|l| l.contains("sport=40000 dport=53")),
        "{out}"
    );
    // On this node every event is the sidecar's: another source port selects none.
    assert_eq!(out.lines().count(), n_all);
    let (_, none, err0) = ev(&["-p", "udp", "--sport", "40001"]);
    assert_eq!(none, "");
    assert!(err0.contains("0 flow events have been shown."), "{err0}");
    assert!(
        err.contains(&format!(
            "{} flow events have been shown.",
            out.lines().count()
        )),
        "{err}"
    );
    // The reply source of the dead pod only, and only its DESTROY.
    let (_, out, _) = ev(&["--reply-src", "10.244.1.5", "-e", "DESTROY"]);
    assert!(!out.is_empty());
    assert!(
        out.lines()
            .all(|l| l.contains("[DESTROY]") && l.contains("src=10.244.1.5")),
        "{out}"
    );
    // -e takes a comma-separated, case-insensitive list; ALL is every type.
    let (_, out, _) = ev(&["--event-mask", "new,updates"]);
    assert!(out.lines().all(|l| !l.contains("[DESTROY]")), "{out}");
    let (_, out, _) = ev(&["-e", "ALL"]);
    assert_eq!(out.lines().count(), n_all);
    // Refusals, in the real tool's words, exit 2.
    for (args, msg) in [
        (
            &["-u", "ASSURED"][..],
            "Illegal option `--status' with this command",
        ),
        (
            &["-u", "ASSURED", "-t", "3"][..],
            "Illegal option `--timeout' with this command",
        ),
        (&["-e", "FOO"][..], "Bad parameter `FOO'"),
    ] {
        let (code, out, err) = ev(args);
        assert_eq!(code, 2, "{args:?}");
        assert_eq!(out, "");
        assert!(
            err.starts_with(&format!("conntrack v1.4.7 (conntrack-tools): {msg}\n")),
            "{args:?}: {err}"
        );
    }
    let (code, _, err) = nfsim(&[
        "conntrack",
        S,
        "--node",
        "node-2",
        "--at",
        "4m",
        "-L",
        "-e",
        "NEW",
    ]);
    assert_eq!(code, 2);
    assert!(
        err.contains("Illegal option `--event-mask' with this command"),
        "{err}"
    );
}
