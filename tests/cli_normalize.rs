//! `nfsim rules normalize` against golden files made with the real iptables 1.8.9 (nf_tables)
//! in a private network namespace:
//!
//! ```sh
//! cd tests/fixtures/cli
//! unshare -n bash -c 'iptables-restore --noflush < kube-proxy.rules && iptables-save' \
//!   | grep -v '^# \(Generated\|Completed\)' > kube-proxy.save
//! unshare -n bash -c 'iptables-restore --noflush < counters.rules && iptables-save' | … > counters.save
//! unshare -n bash -c 'iptables-restore -c --noflush < counters.rules && iptables-save -c' | … > counters.save-c
//! unshare -n bash -c 'nfacct add ct_state_invalid_dropped_pkts && iptables-restore --noflush < nfacct.rules && iptables-save' | … > nfacct.save
//! ```
//!
//! Where the real tools can run (root, `unshare`, `iptables-restore`), the last test also
//! compares against them live; elsewhere it says `skipped` and passes.

use std::io::Write;
use std::process::{Command, Stdio};

#[path = "support/tools.rs"]
mod tools;

#[path = "support/cli.rs"]
mod cli;
use cli::{nfsim, ROOT};

const DIR: &str = "tests/fixtures/cli";

fn golden(name: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/{DIR}/{name}")).unwrap()
}

/// (rules file, extra flags, golden file).
const CASES: &[(&str, &[&str], &str)] = &[
    ("kube-proxy.rules", &[], "kube-proxy.save"),
    ("counters.rules", &[], "counters.save"),
    ("counters.rules", &["-c"], "counters.save-c"),
    (
        "nfacct.rules",
        &["--nfacct", "ct_state_invalid_dropped_pkts"],
        "nfacct.save",
    ),
];

#[test]
fn normalize_prints_what_the_real_iptables_save_printed() {
    for (rules, flags, want) in CASES {
        let file = format!("{DIR}/{rules}");
        let mut args = vec!["rules", "normalize"];
        args.extend_from_slice(flags);
        args.push(&file);
        let (code, out, err) = nfsim(&args);
        assert_eq!(code, 0, "{rules} {flags:?}: {err}");
        assert!(
            out == golden(want),
            "{rules} {flags:?} differs from {want}:\n{out}"
        );
    }
}

#[test]
fn kube_proxy_payload_gets_built_in_chains_and_save_order_and_spelling() {
    let (_, out, _) = nfsim(&["rules", "normalize", &format!("{DIR}/kube-proxy.rules")]);
    // Built-in chains the payload never named, for the tables it loaded, and no others.
    assert!(out.starts_with(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
    ));
    assert!(out.contains("*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n"));
    assert!(!out.contains("*mangle") && !out.contains("*raw"));
    // kube-proxy's spellings, as iptables-save prints them.
    assert!(out.contains("--probability 0.33333333349 "));
    assert!(out.contains("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n"));
    assert!(out.contains("-A KUBE-SERVICES -d 10.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU\n"));
    assert!(!out.contains("# "), "no dated comment lines");
}

#[test]
fn normalizing_twice_changes_nothing() {
    for (_, flags, want) in CASES {
        let file = format!("{DIR}/{want}");
        let mut args = vec!["rules", "normalize"];
        args.extend_from_slice(flags);
        args.push(&file);
        let (code, out, err) = nfsim(&args);
        assert_eq!(code, 0, "{want}: {err}");
        assert!(out == golden(want), "{want} is not a fixed point:\n{out}");
    }
}

#[test]
fn a_malformed_file_gives_file_line_and_what_was_wrong() {
    let (code, out, err) = nfsim(&["rules", "normalize", &format!("{DIR}/malformed.rules")]);
    assert_ne!(code, 0);
    assert!(out.is_empty(), "{out}");
    assert!(
        err.starts_with(
            "error: tests/fixtures/cli/malformed.rules:4: bad value \"fifty-three\" for --dport"
        ),
        "{err}"
    );
    assert!(
        err.contains("\n  -A KUBE-SERVICES -d 10.96.0.11/32"),
        "shows the line: {err}"
    );
    assert!(err.contains('^'), "points at the word: {err}");

    // An nfacct object that does not exist fails as in iptables-restore, with the way out.
    let (code, _, err) = nfsim(&["rules", "normalize", &format!("{DIR}/nfacct.rules")]);
    assert_ne!(code, 0);
    assert!(err.contains("nfacct.rules:"), "{err}");
    assert!(
        err.contains("--nfacct ct_state_invalid_dropped_pkts"),
        "{err}"
    );

    let (code, _, err) = nfsim(&["rules", "normalize", &format!("{DIR}/missing.rules")]);
    assert_ne!(code, 0);
    assert!(
        err.contains("cannot read tests/fixtures/cli/missing.rules"),
        "{err}"
    );
}

/// Runs `script` as root in a private network namespace with `stdin` (the caller has checked
/// that the tools it calls are here).
fn real(script: &str, stdin: &str) -> Option<String> {
    let mut child = Command::new("unshare")
        .args(["-n", "sh", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .ok()?;
    child.stdin.take()?.write_all(stdin.as_bytes()).ok()?;
    let out = child.wait_with_output().ok()?;
    assert!(
        out.status.success(),
        "real iptables failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Some(
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("# Generated by") && !l.starts_with("# Completed on"))
            .map(|l| format!("{l}\n"))
            .collect(),
    )
}

#[test]
fn normalize_equals_the_real_iptables_save_when_it_can_run_here() {
    for (rules, flags, _) in CASES {
        let text = golden(rules);
        let counters = flags.contains(&"-c");
        let nfacct: Vec<&str> = flags
            .windows(2)
            .filter(|w| w[0] == "--nfacct")
            .map(|w| w[1])
            .collect();
        let mut script = String::new();
        for n in &nfacct {
            script.push_str(&format!("nfacct add {n} && "));
        }
        let c = if counters { " -c" } else { "" };
        script.push_str(&format!(
            "iptables-restore{c} --noflush && iptables-save{c}"
        ));
        let mut needed = vec!["iptables-restore", "iptables-save"];
        if !nfacct.is_empty() {
            needed.push("nfacct");
        }
        if !tools::have_or_skip(
            &format!("normalize_equals_the_real_iptables_save ({rules} {flags:?})"),
            &needed,
        ) {
            continue;
        }
        let Some(want) = real(&script, &text) else {
            panic!("{rules}: could not start unshare");
        };
        let file = format!("{DIR}/{rules}");
        let mut args = vec!["rules", "normalize"];
        args.extend_from_slice(flags);
        args.push(&file);
        let (_, out, err) = nfsim(&args);
        assert!(
            out == want,
            "{rules} {flags:?}: nfsim\n{out}{err}\nreal\n{want}"
        );
    }
}

/// `nfsim rules ipset` against the real `ipset save` and `ipset list` of the same input
/// (tests/fixtures/ipset/kube-proxy.{save,list}, made with
/// `unshare -n sh -c 'ipset restore < kube-proxy.ipset && ipset save'` and `… ipset list`).
#[test]
fn rules_ipset_prints_what_the_real_ipset_printed() {
    let read =
        |f: &str| std::fs::read_to_string(format!("{ROOT}/tests/fixtures/ipset/{f}")).unwrap();
    let input = "tests/fixtures/ipset/kube-proxy.ipset";
    for (flags, golden) in [
        (&[][..], "kube-proxy.save"),
        (&["--list"][..], "kube-proxy.list"),
    ] {
        let mut args = vec!["rules", "ipset", input];
        args.extend_from_slice(flags);
        let (code, out, err) = nfsim(&args);
        assert_eq!(code, 0, "{err}");
        assert_eq!(out, read(golden), "nfsim rules ipset {flags:?}");
    }
    let bad = std::env::temp_dir().join(format!("nfsim-bad-{}.ipset", std::process::id()));
    std::fs::write(&bad, "create A bitmap:port range 0-100\nadd A 200\n").unwrap();
    let (code, _, err) = nfsim(&["rules", "ipset", bad.to_str().unwrap()]);
    assert_eq!(code, 2, "{err}");
    assert!(
        err.contains(":2: Element is out of the range of the set"),
        "{err}"
    );
}
