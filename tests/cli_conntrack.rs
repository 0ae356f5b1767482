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
