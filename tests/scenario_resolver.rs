//! The stub resolver client (`resolver:`) against a DNS server's `zone:`: the search-list
//! walk, A and AAAA as each C library sends them, TC then TCP, timeouts, the per-lookup
//! outcomes and their expectations (docs/resolver.md, docs/scenario-reference.md).

#[path = "support/scenario.rs"]
mod scenario_run;

use nfsim::cluster::sim::{RunResult, What};
use nfsim::scenario::load_str;
use scenario_run::{run_scenario, run_text};

const SHIPPED: &str = include_str!("../scenarios/resolver-ndots.yaml");

fn shipped() -> RunResult {
    let sc = load_str("scenarios/resolver-ndots.yaml", SHIPPED).unwrap_or_else(|e| panic!("{e}"));
    run_scenario(sc, false)
}

/// `(ms, line)` of `client`'s resolver events (queries, answers, lookups).
fn dns_lines(r: &RunResult, client: &str) -> Vec<(u64, String)> {
    r.timeline
        .iter()
        .filter(|e| match &e.what {
            What::DnsQuery { client: c, .. }
            | What::DnsAnswer { client: c, .. }
            | What::Lookup { client: c, .. } => c == client,
            _ => false,
        })
        .map(|e| {
            (
                e.t_ns / 1_000_000,
                e.line().split_once("  ").unwrap().1.to_string(),
            )
        })
        .collect()
}

/// The names and transports `client` asked, in order: `(ms, "A name udp")`.
fn asked(r: &RunResult, client: &str) -> Vec<(u64, String)> {
    r.timeline
        .iter()
        .filter_map(|e| match &e.what {
            What::DnsQuery {
                client: c,
                name,
                qtype,
                transport,
                ..
            } if c == client => Some((e.t_ns / 1_000_000, format!("{qtype} {name} {transport}"))),
            _ => None,
        })
        .collect()
}

fn sources(r: &RunResult, client: &str) -> Vec<String> {
    r.timeline
        .iter()
        .filter_map(|e| match &e.what {
            What::DnsQuery { client: c, src, .. } if c == client => Some(src.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn payment_shop_walks_the_search_list_then_big_answers_go_over_tcp() {
    let r = shipped();
    assert!(r.results.iter().all(|x| x.passed), "{:#?}", r.results);
    assert_eq!(r.results.len(), 6);
    let walk = [
        "payment.shop.default.svc.cluster.local",
        "payment.shop.svc.cluster.local",
        "payment.shop.cluster.local",
        "payment.shop",
    ];
    for client in ["glibc", "musl"] {
        let a = asked(&r, client);
        // Lookup 0: A and AAAA back to back for each name, one round trip (two 100 µs links
        // each way and the server's 1 ms) apart.
        let first: Vec<(u64, String)> = walk
            .iter()
            .enumerate()
            .flat_map(|(k, n)| {
                [
                    (k as u64, format!("A {n} udp")),
                    (k as u64, format!("AAAA {n} udp")),
                ]
            })
            .collect();
        assert_eq!(&a[..8], &first[..], "{client}");
        let lines = dns_lines(&r, client);
        let end = lines
            .iter()
            .find(|(_, l)| l.contains("lookup #0 of payment.shop"))
            .unwrap();
        assert_eq!(
            end.1,
            format!("{client}: lookup #0 of payment.shop answered (2 addresses) in 4ms, 4 names asked: {}", walk.join(", "))
        );
        // Each name from a new socket (glibc closes its socket when a name is done, musl
        // opens one per name): four ports, each for A and AAAA.
        let src = sources(&r, client);
        let mut ports: Vec<&String> = src[..8].iter().collect();
        ports.dedup();
        assert_eq!(ports.len(), 4, "{client}: {src:?}");
        // big.example: NXDOMAIN for the search list, then TC over UDP, then TCP.
        let tc = lines
            .iter()
            .find(|(_, l)| l.contains("A big.example, 30 records, TRUNCATED (TC)"))
            .unwrap_or_else(|| panic!("{client}: {lines:#?}"));
        assert_eq!(tc.0, 5008, "{client}");
        let tcp: Vec<&String> = a
            .iter()
            .filter(|(_, q)| q.ends_with(" tcp"))
            .map(|(_, q)| q)
            .collect();
        let want: &[&str] = if client == "glibc" {
            // send_vc: both queries again on one connection.
            &["A big.example tcp", "AAAA big.example tcp"]
        } else {
            // musl 1.2.4's start_tcp: the truncated query alone.
            &["A big.example tcp"]
        };
        assert_eq!(tcp, want, "{client}");
        assert!(lines.iter().any(|(_, l)| l
            == &format!(
                "{client}: lookup #1 NOERROR A big.example, 40 records from 10.96.0.10:53 (tcp)"
            )));
        assert!(lines.iter().any(|(_, l)| l.starts_with(&format!(
            "{client}: lookup #1 of big.example answered (40 addresses) in"
        )) && l.contains("over TCP")));
    }
    // The endpoint figures count the server only: glibc's AAAA answer that meets its
    // closed socket (frame of ICMP port unreachable) is no request to the debian pod.
    assert!(
        r.summary.contains("kube-system/coredns") && !r.summary.contains("default/debian"),
        "{}",
        r.summary
    );
    // payments.shop's NXDOMAIN was an answer: nothing lost, no time blackholed.
    for c in &r.clients {
        assert_eq!(
            (c.sent, c.answered, c.failed, c.blackholed_ns),
            (4, 4, 0, 0),
            "{c:?}"
        );
    }
    // Same seed, same run.
    let again = shipped();
    assert_eq!(dns_lines(&r, "glibc"), dns_lines(&again, "glibc"));
}

fn one_client(libc: &str, extra_conf: &str, server: &str, names: &str) -> String {
    let mut text = SHIPPED.to_string();
    let cut = text.find("clients:").unwrap();
    text.truncate(cut);
    let text = text.replace(
        "      - udpServer:\n          port: 53\n",
        &format!("      - udpServer:\n          port: 53\n{server}"),
    );
    format!(
        "{text}clients:\n  - name: r\n    pod: debian\n    resolver:\n      libc: {libc}\n      resolvConf: |\n        search default.svc.cluster.local svc.cluster.local cluster.local\n        nameserver 10.96.0.10\n        options ndots:5\n{extra_conf}      names: [{names}]\n      sleep: 5s\n      count: 1\n"
    )
}

#[test]
fn musl_before_1_2_4_keeps_the_truncated_answer() {
    let text = one_client("musl", "", "", "big.example").replace(
        "      libc: musl\n",
        "      libc: musl\n      version: 1.2.3\n",
    );
    let r = run_text("t.yaml", &text, false);
    let a = asked(&r, "r");
    assert!(a.iter().all(|(_, q)| q.ends_with(" udp")), "{a:?}");
    let lines = dns_lines(&r, "r");
    assert!(
        lines
            .iter()
            .any(|(_, l)| l.starts_with("r: lookup #0 of big.example answered (30 addresses)")),
        "{lines:#?}"
    );
}

#[test]
fn a_silent_server_times_out_glibc_then_the_name_as_is_but_musl_stops() {
    // `answer: false`: every query is lost. glibc: 5 s x 2 attempts on the first search
    // name, which ends the walk of the search list, then the name as it is (another 10 s);
    // musl: the whole name gets 5 s (resent at 2.5 s), and a timeout ends the lookup.
    let server = "          answer: false\n";
    let r = run_text(
        "t.yaml",
        &one_client("glibc", "", server, "payment.shop"),
        false,
    );
    let a = asked(&r, "r");
    let names: Vec<(u64, &str)> = a.iter().map(|(t, q)| (*t, q.as_str())).collect();
    assert_eq!(
        names,
        [
            (0, "A payment.shop.default.svc.cluster.local udp"),
            (0, "AAAA payment.shop.default.svc.cluster.local udp"),
            (5000, "A payment.shop.default.svc.cluster.local udp"),
            (5000, "AAAA payment.shop.default.svc.cluster.local udp"),
            (10000, "A payment.shop udp"),
            (10000, "AAAA payment.shop udp"),
            (15000, "A payment.shop udp"),
            (15000, "AAAA payment.shop udp"),
        ]
    );
    let last = dns_lines(&r, "r").pop().unwrap();
    assert_eq!(last.0, 20000);
    assert!(
        last.1
            .starts_with("r: lookup #0 of payment.shop TIMED OUT in 20s, 2 names asked"),
        "{}",
        last.1
    );
    let r = run_text(
        "t.yaml",
        &one_client("musl", "", server, "payment.shop"),
        false,
    );
    let times: Vec<u64> = asked(&r, "r").iter().map(|(t, _)| *t).collect();
    assert_eq!(times, [0, 0, 2500, 2500]);
    let last = dns_lines(&r, "r").pop().unwrap();
    assert_eq!(last.0, 5000);
    assert!(
        last.1
            .starts_with("r: lookup #0 of payment.shop TIMED OUT in 5s, 1 name asked"),
        "{}",
        last.1
    );
}

#[test]
fn lookups_expectations_count_each_result_and_fail_when_wrong() {
    let text = one_client("glibc", "", "", "nowhere.example")
        .replace("      count: 1\n", "      count: 2\n")
        + "expectations:\n  - name: n\n    client: {name: r, lookups: {nxdomain: 2, answered: 0, namesTried: 4, maxLatency: 10ms}}\n  - name: wrong\n    client: {name: r, lookups: {answered: 1}}\n";
    let r = run_text("t.yaml", &text, false);
    assert!(r.results[0].passed, "{:?}", r.results[0]);
    assert_eq!(
        r.results[0].detail,
        "answered=0, nxdomain=2, namesTried=4, maxLatency=4ms"
    );
    assert!(!r.results[1].passed);
    assert!(
        r.results[1].detail.contains("answered 0, expected 1"),
        "{}",
        r.results[1].detail
    );
    // The summary counts a lookup its nameserver answered NXDOMAIN as answered: the network
    // delivered (the headline does not call it lost, nor the time blackholed).
    let row: Vec<&str> = r
        .summary
        .lines()
        .find(|l| l.starts_with("r "))
        .unwrap_or_else(|| panic!("{}", r.summary))
        .split_whitespace()
        .collect();
    assert_eq!(
        row,
        ["r", "10.96.0.10:53", "2", "2", "0", "0", "0"],
        "{}",
        r.summary
    );
}

#[test]
fn resolver_words_refuse_what_they_cannot_run_at_their_place() {
    let bad = |text: String, want: &str| {
        let e = load_str("t.yaml", &text).unwrap_err().to_string();
        assert!(e.contains(want), "{e}\nwanted: {want}");
    };
    bad(
        one_client("uclibc", "", "", "a.example"),
        "libc \"uclibc\": expected glibc or musl",
    );
    bad(
        one_client("glibc", "        options no-aaaa\n", "", "a.example"),
        "resolvConf line 4, column",
    );
    bad(
        one_client("glibc", "", "", "a.example")
            + "expectations:\n  - client: {name: r, sent: 1, lookups: {answered: 1}}\n",
        "not both",
    );
    bad(
        one_client("glibc", "", "", "a.example").replace(
            "  - name: debian\n    node: node-1\n    ip: 10.244.1.9\n",
            "  - name: debian\n    node: node-1\n    ip: 10.244.1.9\n    apps:\n      - udpServer: {port: 53, zone: {names: {big.example: {a: 3}}}}\n",
        ),
        "zone name big.example: 3 A and 0 AAAA records here, 40 and 0 in an earlier zone",
    );
    bad(
        one_client("glibc", "", "", "a.example").replace(
            "      libc: glibc\n",
            "      libc: glibc\n      version: 1.2.4\n",
        ),
        "version is musl's",
    );
    // resolvConfFile: relative to the scenario's directory; a missing file and a bad line
    // in it are errors at the field, naming the file (and the line and column in it).
    let with_file = |file: &str| {
        let text = one_client("glibc", "", "", "a.example");
        let at = text.find("      resolvConf: |\n").unwrap();
        let end = text.find("\n      names: [").unwrap() + 1;
        format!(
            "{}      resolvConfFile: {file}\n{}",
            &text[..at],
            &text[end..]
        )
    };
    let e = nfsim::scenario::load_str(
        "scenarios/t.yaml",
        &with_file("resolver-ndots/nowhere.conf"),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("t.yaml") && e.contains("cannot read scenarios/resolver-ndots/nowhere.conf"),
        "{e}"
    );
    let dir = std::env::temp_dir().join(format!("nfsim-resolvconf-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("bad.conf"),
        "nameserver 10.96.0.10\noptions no-aaaa\n",
    )
    .unwrap();
    let scenario = dir.join("t.yaml");
    let e = nfsim::scenario::load_str(scenario.to_str().unwrap(), &with_file("bad.conf"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("bad.conf line 2, column"), "{e}");
    let _ = std::fs::remove_dir_all(&dir);
    // The shipped file reads as the inline text does.
    let r = run_text(
        "scenarios/t.yaml",
        &with_file("resolver-ndots/resolv.conf").replace("[a.example]", "[payment.shop]"),
        false,
    );
    let last = dns_lines(&r, "r").pop().unwrap().1;
    assert!(
        last.contains("answered (2 addresses) in 4ms, 4 names asked"),
        "{last}"
    );
}

#[test]
fn glibc_edns0_advertises_1200_octets_so_big_example_fits_over_udp() {
    // `options edns0`: glibc's OPT record says 1200 octets (RESOLV_EDNS_BUFFER_SIZE), so
    // the server keeps big.example's 40 records (29 + 11 + 40 x 16 + 11 = 691 octets) in one
    // datagram: no TC, no retry over TCP. Without edns0 the same answer is truncated.
    let r = run_text(
        "t.yaml",
        &one_client("glibc", "        options edns0\n", "", "big.example"),
        false,
    );
    let a = asked(&r, "r");
    assert!(a.iter().all(|(_, q)| q.ends_with(" udp")), "{a:?}");
    let lines = dns_lines(&r, "r");
    assert!(
        lines
            .iter()
            .any(|(_, l)| l
                == "r: lookup #0 NOERROR A big.example, 40 records from 10.96.0.10:53 (udp)"),
        "{lines:#?}"
    );
    let plain = run_text("t.yaml", &one_client("glibc", "", "", "big.example"), false);
    assert!(asked(&plain, "r").iter().any(|(_, q)| q.ends_with(" tcp")));
}

/// `(ms, "QTYPE name", source port)` of each query `client` sent.
fn queries_with_ports(r: &RunResult, client: &str) -> Vec<(u64, String, String)> {
    r.timeline
        .iter()
        .filter_map(|e| match &e.what {
            What::DnsQuery {
                client: c,
                name,
                qtype,
                src,
                dst,
                ..
            } if c == client => Some((
                e.t_ns / 1_000_000,
                format!("{qtype} {name} -> {dst}"),
                src.rsplit_once(':').unwrap().1.to_string(),
            )),
            _ => None,
        })
        .collect()
}

#[test]
fn single_request_reopen_sends_aaaa_after_the_a_answer_from_a_new_socket() {
    // glibc `single-request-reopen`: A first, AAAA once A is answered, from a socket opened
    // anew (res_send.c send_dg); `single-request` the same, on the same socket.
    for (opt, new_port) in [("single-request-reopen", true), ("single-request", false)] {
        let r = run_text(
            "t.yaml",
            &one_client(
                "glibc",
                &format!("        options {opt}\n"),
                "",
                "payment.shop",
            ),
            false,
        );
        let q = queries_with_ports(&r, "r");
        assert_eq!(q.len(), 8, "{opt}: {q:#?}");
        for pair in q.chunks(2) {
            let (a, aaaa) = (&pair[0], &pair[1]);
            assert!(
                a.1.starts_with("A ") && aaaa.1.starts_with("AAAA "),
                "{opt}: {pair:?}"
            );
            // One round trip later: the A answer came first.
            assert_eq!(aaaa.0, a.0 + 1, "{opt}: {pair:?}");
            assert_eq!(a.2 != aaaa.2, new_port, "{opt}: {pair:?}");
        }
        let last = dns_lines(&r, "r").pop().unwrap().1;
        assert!(
            last.starts_with("r: lookup #0 of payment.shop answered (2 addresses) in 8ms"),
            "{opt}: {last}"
        );
    }
}

#[test]
fn musl_asks_every_nameserver_at_once_and_glibc_the_first() {
    // Two nameservers: the Service and the CoreDNS pod itself. musl's res_msend sends each
    // query to both at once and takes the first answer; glibc asks the first only while it
    // answers.
    let second = "        nameserver 10.244.1.5\n";
    for (libc, want) in [("musl", 2), ("glibc", 1)] {
        let text = one_client(libc, "", "", "kube-dns.kube-system").replace(
            "        nameserver 10.96.0.10\n",
            &format!("        nameserver 10.96.0.10\n{second}"),
        );
        let r = run_text("t.yaml", &text, false);
        let q = queries_with_ports(&r, "r");
        let first: Vec<&str> = q
            .iter()
            .filter(|(t, _, _)| *t == 0)
            .map(|(_, n, _)| n.as_str())
            .collect();
        let servers: std::collections::BTreeSet<&str> = first
            .iter()
            .map(|n| n.rsplit_once("-> ").unwrap().1)
            .collect();
        assert_eq!(servers.len(), want, "{libc}: {q:#?}");
        let last = dns_lines(&r, "r").pop().unwrap().1;
        assert!(
            last.starts_with("r: lookup #0 of kube-dns.kube-system answered (1 address)"),
            "{libc}: {last}"
        );
    }
}

#[test]
fn services_the_zone_leaves_out_are_warned_about_at_their_place() {
    // A headless Service at the start and a Service created by an event have no name in a
    // `zone.services` zone: a resolver's lookup of them would get NXDOMAIN where CoreDNS
    // answers, so each is a warning at its place (none for the shipped scenario).
    // Named as the shipped file, so that its `resolvConfFile` reads relative to it.
    let f = concat!(env!("CARGO_MANIFEST_DIR"), "/scenarios/resolver-ndots.yaml");
    assert!(load_str(f, SHIPPED).unwrap().warnings.is_empty());
    let text = SHIPPED
        .replace(
            "clients:\n",
            "  - metadata: {name: db, namespace: default}\n    spec:\n      clusterIP: None\n      selector: {app: db}\n      ports: [{port: 5432}]\nclients:\n",
        )
        .replace(
            "expectations:\n",
            "events:\n  - at: 1s\n    createService:\n      metadata: {name: late, namespace: default}\n      spec:\n        selector: {app: late}\n        ports: [{port: 80}]\nexpectations:\n",
        );
    let sc = load_str(f, &text).unwrap_or_else(|e| panic!("{e}"));
    // (Both also select no pod, which has its own warning.)
    let w: Vec<String> = sc
        .warnings
        .iter()
        .map(|w| w.to_string())
        .filter(|w| w.contains("DNS servers' zones"))
        .collect();
    assert_eq!(w.len(), 2, "{w:?}");
    assert!(
        w[0].starts_with(&format!(
            "{f}:56:5: warning: Service default/db has no IPv4 cluster IP"
        )) && w[0].contains("db.default.svc.cluster.local gets NXDOMAIN"),
        "{w:?}"
    );
    assert!(
        w[1].contains("warning: Service default/late is created by an event")
            && w[1].contains("late.default.svc.cluster.local gets NXDOMAIN for the whole run"),
        "{w:?}"
    );
}
