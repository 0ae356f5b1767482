//! The kernel lab against the real kernel: reproduces the measurements docs/kernel-model.md states,
//! so they stay true on the kernel the tests run on, and checks `sim_core::wire` / `pcap` on
//! frames the kernel itself sent. Tests print `skipped: …` and pass where the lab cannot run
//! (see tests/support/kernel.rs).

#[path = "support/kernel.rs"]
mod kernel;

use kernel::{parse_ct_line, CtEntry, LabRun, Scenario};
use sim_core::packet::{IcmpBody, L4};
use sim_core::TcpFlags;

/// The DNAT of docs/kernel-model.md §2's measurement: a "service" 127.96.0.10:53 whose endpoint is
/// 127.0.0.2:5353, and a second one, 127.96.0.11:53, whose endpoint never answers.
const UDP_RULES: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A OUTPUT -d 127.96.0.10/32 -p udp -m udp --dport 53 -j DNAT --to-destination 127.0.0.2:5353
-A OUTPUT -d 127.96.0.11/32 -p udp -m udp --dport 53 -j DNAT --to-destination 127.0.0.3:5353
COMMIT
";

/// The entry of `run`'s `conntrack -L` step `label` whose original source port is `sport`.
fn entry(run: &LabRun, label: &str, sport: u16) -> CtEntry {
    let all = run.conntrack_entries(label);
    all.iter()
        .find(|e| e.orig.sport == Some(sport))
        .cloned()
        .unwrap_or_else(|| {
            panic!(
                "{label}: no entry with sport {sport} in:\n{}",
                run.output(label).stdout
            )
        })
}

fn secs_in(e: &CtEntry, allowed: &[u64]) -> bool {
    e.timeout_secs.is_some_and(|s| allowed.contains(&s))
}

#[test]
fn udp_timeline_matches_kernel_md_section_2() {
    let Some(lab) = kernel::lab_or_skip("udp_timeline_matches_kernel_md_section_2") else {
        return;
    };
    let run = lab
        .run(
            &Scenario::new()
                .rules(UDP_RULES)
                .udp_listen("127.0.0.2:5353", true)
                .udp_listen("127.0.0.3:5353", false)
                .udp_send_wait("lonely", Some("127.0.0.1:40001"), "127.96.0.11:53", 50)
                .conntrack("query-only", &["-L"])
                .udp_send("q1", "127.0.0.1:40004", "127.96.0.10:53")
                .conntrack("answered", &["-L"])
                .udp_send("q2", "127.0.0.1:40004", "127.96.0.10:53")
                .conntrack("within-2s", &["-L"])
                .sleep_ms(2500)
                .udp_send("q3", "127.0.0.1:40004", "127.96.0.10:53")
                .conntrack("after-pause", &["-L"])
                .iptables_save("counters")
                .conntrack("delete", &["-D", "-p", "udp", "--sport", "40004"]),
        )
        .expect("lab run");

    // Query only: 30 s (29 once a jiffy has passed), [UNREPLIED], already DNAT'd.
    let lonely = entry(&run, "query-only", 40001);
    assert!(secs_in(&lonely, &[29, 30]), "{lonely:?}");
    assert!(lonely.unreplied() && !lonely.assured(), "{lonely:?}");
    assert_eq!(lonely.orig.dst, "127.96.0.11");
    assert_eq!(
        (lonely.reply.src.as_str(), lonely.reply.sport),
        ("127.0.0.3", Some(5353))
    );
    assert!(run.udp("lonely").reply.is_none());

    // The answer comes back from the service address, sent by the endpoint.
    let reply = run.udp("q1").reply.as_ref().expect("q1 answered");
    assert_eq!(reply.from.as_deref(), Some("127.96.0.10:53"));
    assert_eq!(reply.server, "127.0.0.2:5353");
    let saw = run.received_by("127.0.0.2:5353");
    assert_eq!(saw.len(), 3);
    assert!(saw.iter().all(|s| s.peer == "127.0.0.1:40004"));

    // Query + answer: no flags. Another query within 2 s: still 30 s, not assured.
    for label in ["answered", "within-2s"] {
        let e = entry(&run, label, 40004);
        assert!(secs_in(&e, &[29, 30]), "{label}: {e:?}");
        assert!(!e.unreplied() && !e.assured(), "{label}: {e:?}");
    }
    // A query more than 2 s after creation, a reply having been seen: 120 s, [ASSURED].
    let e = entry(&run, "after-pause", 40004);
    assert!(secs_in(&e, &[119, 120]), "{e:?}");
    assert!(e.assured() && !e.unreplied(), "{e:?}");

    // The nat table saw the flow's first packet only: three queries, one DNAT rule hit.
    let save = run.output("counters").stdout.clone();
    let dnat = save
        .lines()
        .find(|l| l.contains("-d 127.96.0.10/32"))
        .expect("the DNAT rule");
    assert!(dnat.starts_with("[1:"), "{dnat}");

    assert_eq!(run.output("delete").rc, 0);
    // The events, exactly as docs/kernel-model.md lists them (the DESTROY's seconds and portid
    // vary).
    let ours: Vec<&str> = run
        .event_lines()
        .into_iter()
        .filter(|l| l.contains("sport=40004"))
        .collect();
    assert_eq!(ours.len(), 4, "{ours:#?}");
    assert_eq!(
        ours[..3],
        [
            "    [NEW] udp      17 30 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004",
            " [UPDATE] udp      17 30 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004",
            " [UPDATE] udp      17 120 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004 [ASSURED]",
        ]
    );
    let destroy = parse_ct_line(ours[3]).expect("a DESTROY line");
    assert_eq!(destroy.event.as_deref(), Some("DESTROY"));
    assert!(secs_in(&destroy, &[119, 120]), "{destroy:?}");
    assert_eq!(destroy.flags, ["ASSURED", "USERSPACE"]);
    assert!(destroy.extra("portid").is_some(), "{destroy:?}");
    assert!(
        ours[3].starts_with("[DESTROY] udp      17 1"),
        "{}",
        ours[3]
    );
}

const TCP_RULES: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A OUTPUT -d 127.96.0.20/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 127.0.0.2:8080
-A OUTPUT -d 127.96.0.21/32 -p tcp -m tcp --dport 80 -j DNAT --to-destination 127.0.0.2:8081
COMMIT
";

#[test]
fn tcp_states_through_dnat_match_kernel_md_section_3() {
    let Some(lab) = kernel::lab_or_skip("tcp_states_through_dnat_match_kernel_md_section_3") else {
        return;
    };
    let run = lab
        .run(
            &Scenario::new()
                .rules(TCP_RULES)
                .tcp_listen("127.0.0.2:8080", false)
                .tcp_connect(
                    "c",
                    "c",
                    Some("127.0.0.1:41000"),
                    "127.96.0.20:80",
                    Some("hello"),
                )
                .conntrack("established", &["-L", "-p", "tcp"])
                .tcp_close("c")
                .conntrack("client-closed", &["-L", "-p", "tcp"])
                .tcp_close_server("127.0.0.2:8080")
                .conntrack("both-closed", &["-L", "-p", "tcp"])
                .tcp_connect(
                    "refused",
                    "r",
                    Some("127.0.0.1:41001"),
                    "127.96.0.21:80",
                    None,
                )
                .conntrack("after-rst", &["-L", "-p", "tcp"]),
        )
        .expect("lab run");

    let c = run.tcp("c");
    assert!(c.connected, "{c:?}");
    assert_eq!(
        c.reply.as_ref().map(|r| r.server.as_str()),
        Some("127.0.0.2:8080")
    );

    let e = entry(&run, "established", 41000);
    assert_eq!(e.state.as_deref(), Some("ESTABLISHED"));
    assert!(secs_in(&e, &[431_999, 432_000]) && e.assured(), "{e:?}");
    assert_eq!(
        (e.reply.src.as_str(), e.reply.sport),
        ("127.0.0.2", Some(8080))
    );
    let e = entry(&run, "client-closed", 41000);
    assert_eq!(e.state.as_deref(), Some("CLOSE_WAIT"));
    assert!(secs_in(&e, &[59, 60]), "{e:?}");
    let e = entry(&run, "both-closed", 41000);
    assert_eq!(e.state.as_deref(), Some("TIME_WAIT"));
    assert!(secs_in(&e, &[119, 120]), "{e:?}");

    // A SYN answered by RST leaves no entry (it is confirmed, then killed by the RST).
    let r = run.tcp("refused");
    assert_eq!(r.error.as_deref(), Some("ECONNREFUSED"), "{r:?}");
    assert!(
        run.conntrack_entries("after-rst")
            .iter()
            .all(|e| e.orig.sport != Some(41001)),
        "{}",
        run.output("after-rst").stdout
    );
    let states: Vec<(String, Option<String>)> = run
        .event_entries()
        .into_iter()
        .filter(|e| e.orig.sport == Some(41000))
        .map(|e| (e.event.unwrap_or_default(), e.state))
        .collect();
    let want = [
        ("NEW", "SYN_SENT"),
        ("UPDATE", "SYN_RECV"),
        ("UPDATE", "ESTABLISHED"),
        ("UPDATE", "FIN_WAIT"),
        ("UPDATE", "CLOSE_WAIT"),
        ("UPDATE", "LAST_ACK"),
        ("UPDATE", "TIME_WAIT"),
    ];
    let want: Vec<(String, Option<String>)> = want
        .iter()
        .map(|(e, s)| (e.to_string(), Some(s.to_string())))
        .collect();
    assert_eq!(states, want);
}

/// docs/kernel-model.md §2's incident, with the timeouts shortened to 1 s / 2 s: a fixed-port
/// client keeps
/// its [ASSURED] entry to endpoint A after the rule moved to B and A's socket closed, for as
/// long as it keeps querying; after a pause longer than the stream timeout, the next query
/// goes to B.
#[test]
fn stale_udp_entry_pins_the_flow_until_it_expires() {
    let Some(lab) = kernel::lab_or_skip("stale_udp_entry_pins_the_flow_until_it_expires") else {
        return;
    };
    let to_b = UDP_RULES.replace(
        "--to-destination 127.0.0.2:5353",
        "--to-destination 127.0.0.4:5353",
    );
    let client = "127.0.0.1:40100";
    let svc = "127.96.0.10:53";
    let mut s = Scenario::new()
        .sysctl("net.netfilter.nf_conntrack_udp_timeout", "1")
        .sysctl("net.netfilter.nf_conntrack_udp_timeout_stream", "2")
        .rules(UDP_RULES)
        .udp_listen("127.0.0.2:5353", true)
        .udp_listen("127.0.0.4:5353", true);
    // Every gap between two packets of the flow stays well under the 1 s timeout; the fifth
    // query (or the first stale one) comes more than 2 s after creation and sets ASSURED.
    for i in 0..5 {
        s = s.udp_send(&format!("a{i}"), client, svc).sleep_ms(450);
    }
    s = s
        .iptables_restore("to-b", &to_b, false)
        .udp_close("127.0.0.2:5353")
        .udp_send_wait("stale0", Some(client), svc, 100)
        .sleep_ms(500)
        .udp_send_wait("stale1", Some(client), svc, 100)
        .conntrack("stale", &["-L", "-p", "udp"])
        .sleep_ms(2300)
        .udp_send("fresh", client, svc)
        .conntrack("fresh-entry", &["-L", "-p", "udp"]);
    let run = lab.run(&s).expect("lab run");

    for i in 0..5 {
        let r = run.udp(&format!("a{i}")).reply.as_ref().expect("answered");
        assert_eq!(r.server, "127.0.0.2:5353");
    }
    assert_eq!(run.output("to-b").rc, 0, "{:?}", run.output("to-b"));
    assert!(run.udp("stale0").reply.is_none());
    assert!(run.udp("stale1").reply.is_none());
    let e = entry(&run, "stale", 40100);
    assert!(e.assured(), "{e:?}");
    assert_eq!(e.reply.src, "127.0.0.2", "still pinned to A: {e:?}");
    let fresh = run.udp("fresh").reply.as_ref().expect("answered by B");
    assert_eq!(fresh.server, "127.0.0.4:5353");
    let e = entry(&run, "fresh-entry", 40100);
    assert_eq!(e.reply.src, "127.0.0.4");
    assert!(!e.assured(), "a new entry: {e:?}");
}

/// The rules of [`UDP_RULES`] and [`TCP_RULES`] in one nat table.
fn both_rules() -> String {
    let tcp: String = TCP_RULES
        .lines()
        .filter(|l| l.starts_with("-A"))
        .map(|l| format!("{l}\n"))
        .collect();
    UDP_RULES.replace("COMMIT\n", &format!("{tcp}COMMIT\n"))
}

/// `sim_core::wire` and `sim_core::pcap` on frames the kernel sent: a DNAT'd UDP exchange, a
/// TCP handshake with options, and the ICMP port unreachable the kernel sends for a closed
/// port.
#[test]
fn wire_parses_what_the_kernel_sends() {
    let Some(lab) = kernel::lab_or_skip("wire_parses_what_the_kernel_sends") else {
        return;
    };
    let run = lab
        .run(
            &Scenario::new()
                .rules(&both_rules())
                .capture(true)
                .udp_listen("127.0.0.2:5353", true)
                .tcp_listen("127.0.0.2:8080", true)
                .udp_send("dns", "127.0.0.1:40010", "127.96.0.10:53")
                .udp_send_wait("closed", Some("127.0.0.1:40011"), "127.0.0.5:9", 100)
                .tcp_connect(
                    "web",
                    "w",
                    Some("127.0.0.1:41010"),
                    "127.96.0.20:80",
                    Some("x"),
                )
                .tcp_close("w"),
        )
        .expect("lab run");
    assert!(!run.frames.is_empty());
    let packets: Vec<_> = run
        .frames
        .iter()
        .map(|f| sim_core::wire::parse_ethernet(&f.bytes))
        .collect::<Result<_, _>>()
        .expect("every frame the kernel sent parses");
    let text: Vec<String> = packets.iter().map(|p| p.to_string()).collect();
    // A TCP segment's text goes on with its seq=, ack=, win=, len= and options.
    let has = |s: &str| {
        text.iter()
            .any(|t| t == s || (s.starts_with("tcp ") && t.starts_with(&format!("{s} "))))
    };
    // On lo the capture point is after OUTPUT/POSTROUTING: the query is already DNAT'd, the
    // answer already un-DNAT'd.
    assert!(has("udp 127.0.0.1:40010 -> 127.0.0.2:5353"), "{text:#?}");
    assert!(has("udp 127.96.0.10:53 -> 127.0.0.1:40010"), "{text:#?}");
    assert!(
        has("tcp 127.0.0.1:41010 -> 127.0.0.2:8080 SYN"),
        "{text:#?}"
    );
    assert!(
        has("tcp 127.96.0.20:80 -> 127.0.0.1:41010 SYN,ACK"),
        "{text:#?}"
    );
    assert!(
        has("icmp 127.0.0.5 -> 127.0.0.1 unreachable code=3 (udp 127.0.0.1:40011 -> 127.0.0.5:9)"),
        "{text:#?}"
    );
    // The SYN carries options (MSS, SACK, timestamps, window scale): a 40-byte TCP header.
    let syn = packets
        .iter()
        .find(|p| p.tcp_flags() == Some(TcpFlags::SYN))
        .expect("a SYN");
    assert_eq!(syn.len, 60);
    // The kernel's ICMP error quotes the whole offending datagram, not just 8 bytes.
    let icmp = packets
        .iter()
        .find(|p| {
            matches!(
                p.l4,
                L4::Icmp {
                    body: IcmpBody::Error(_),
                    ..
                }
            )
        })
        .expect("an ICMP error");
    assert!(icmp.len > 20 + 8 + 28, "{icmp:?}");

    // The same frames through a pcap file and back.
    let cap = sim_core::pcap::read(&run.frames_pcap(), &Default::default()).expect("pcap reads");
    assert_eq!(cap.records.len(), run.frames.len());
    let again: Vec<_> = cap.records.iter().map(|r| r.packet).collect();
    assert_eq!(again, packets);
}

/// What runs everywhere: the line parser on docs/kernel-model.md §9's lines, and the loopback
/// guard.
#[test]
fn conntrack_lines_parse_and_scenarios_stay_on_loopback() {
    let e = parse_ct_line("udp      17 29 src=10.244.2.9 dst=10.96.0.10 sport=40123 dport=53 [UNREPLIED] src=10.244.1.7 dst=10.244.2.9 sport=53 dport=40123 mark=0 use=1").unwrap();
    assert_eq!(
        (e.proto.as_str(), e.proto_num, e.timeout_secs),
        ("udp", 17, Some(29))
    );
    assert!(e.unreplied() && !e.assured());
    assert_eq!(e.orig.dst, "10.96.0.10");
    assert_eq!(e.reply.src, "10.244.1.7");
    assert_eq!(e.reply.dport, Some(40123));
    assert_eq!(e.extra("mark"), Some("0"));
    assert_eq!(e.extra("use"), Some("1"));
    let t = parse_ct_line("tcp      6 431982 ESTABLISHED src=10.0.0.1 dst=10.0.0.2 sport=1 dport=80 src=10.0.0.2 dst=10.0.0.1 sport=80 dport=1 [ASSURED] mark=0 use=1").unwrap();
    assert_eq!(t.state.as_deref(), Some("ESTABLISHED"));
    assert!(t.assured());
    let i = parse_ct_line("icmp     1 29 src=10.0.0.1 dst=10.0.0.2 type=8 code=0 id=7 src=10.0.0.2 dst=10.0.0.1 type=0 code=0 id=7 mark=0 use=1").unwrap();
    assert_eq!(
        i.orig.other,
        [
            ("type".into(), "8".into()),
            ("code".into(), "0".into()),
            ("id".into(), "7".into())
        ]
    );
    assert_eq!(i.reply.other.len(), 3);
    assert_eq!(i.extra("use"), Some("1"));
    let d = parse_ct_line("[DESTROY] udp      17 src=10.0.0.1 dst=10.0.0.2 sport=1 dport=53 src=10.0.0.2 dst=10.0.0.1 sport=53 dport=1").unwrap();
    assert_eq!(
        (d.event.as_deref(), d.timeout_secs),
        (Some("DESTROY"), None)
    );
    assert!(
        parse_ct_line("conntrack v1.4.7 (conntrack-tools): 1 flow entries have been shown.")
            .is_none()
    );
    assert!(parse_ct_line("").is_none());

    assert!(Scenario::new()
        .udp_send("x", "127.0.0.1:1", "127.9.9.9:53")
        .check_loopback()
        .is_ok());
    assert!(Scenario::new()
        .udp_send("x", "[::1]:1", "[::1]:53")
        .check_loopback()
        .is_ok());
    for bad in [
        Scenario::new().udp_send("x", "127.0.0.1:1", "10.96.0.10:53"),
        Scenario::new().tcp_listen("0.0.0.0:80", true),
        Scenario::new().address("192.168.1.1"),
        Scenario::new().udp_listen("localhost:53", true),
    ] {
        let e = bad.check_loopback().unwrap_err();
        assert!(
            e.to_string().contains("only uses loopback addresses"),
            "{e}"
        );
    }
}

/// A setup step the kernel refuses fails the run with the tool's own message.
#[test]
fn lab_reports_what_failed_in_the_namespace() {
    let Some(lab) = kernel::lab_or_skip("lab_reports_what_failed_in_the_namespace") else {
        return;
    };
    let err = lab
        .run(&Scenario::new().sysctl("net.netfilter.nf_conntrack_no_such_knob", "1"))
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("setting a sysctl"), "{msg}");
    assert!(msg.contains("nf_conntrack_no_such_knob"), "{msg}");
    let err = lab
        .run(&Scenario::new().rules("*nat\n-A NO_SUCH_CHAIN -j ACCEPT\nCOMMIT\n"))
        .unwrap_err();
    assert!(err.to_string().contains("loading the rules"), "{err}");
    // A failing restore as a step is a result, not an error.
    let run = lab
        .run(&Scenario::new().iptables_restore("bad", "*nat\n-A NOPE -j ACCEPT\nCOMMIT\n", true))
        .expect("lab run");
    assert_ne!(run.output("bad").rc, 0);
    assert!(!run.output("bad").stderr.is_empty());
}

/// docs/kernel-model.md §10: `/proc/net/xt_recent/NAME` as the kernel prints it parses, loads
/// into nfsim's list with its stamps in time order, and a ring that wrapped unrolls.
#[test]
fn xt_recent_proc_files_parse_and_load() {
    let Some(lab) = kernel::lab_or_skip("xt_recent_proc_files_parse_and_load") else {
        return;
    };
    const RULES: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -i lo -p udp -m udp --dport 9999 -m recent --set --name AFF --mask 255.255.255.255 --rsource
-A INPUT -p udp -m udp --dport 9998 -m recent --rcheck --hitcount 5 --name HC --mask 255.255.255.255 --rsource
COMMIT
";
    let mut sc = Scenario::new()
        .rules(RULES)
        .udp_listen("127.0.0.1:9999", false);
    for i in 0..3 {
        sc = sc.udp_send_wait(
            &format!("a{i}"),
            Some("127.0.0.2:40000"),
            "127.0.0.1:9999",
            20,
        );
    }
    sc = sc.udp_send_wait("b", Some("127.0.0.3:40000"), "127.0.0.1:9999", 20);
    let mut sc = sc.command("aff", &["cat", "/proc/net/xt_recent/AFF"], None);
    for i in 0..12 {
        sc = sc.command(
            &format!("w{i}"),
            &["sh", "-c", "echo +127.0.0.4 > /proc/net/xt_recent/HC"],
            None,
        );
    }
    let sc = sc
        .command("hc", &["cat", "/proc/net/xt_recent/HC"], None)
        .command(
            "jiffies",
            &["grep", "-m1", "^jiffies", "/proc/timer_list"],
            None,
        );
    let run = lab.run(&sc).expect("lab run");
    let aff = &run.output("aff").stdout;
    let parsed = sim_netfilter::parse_proc_recent(aff).unwrap_or_else(|e| panic!("{e}\n{aff}"));
    assert_eq!(parsed.len(), 2, "{aff}");
    let two = parsed
        .iter()
        .find(|e| e.addr.to_string() == "127.0.0.2")
        .expect(aff);
    assert_eq!((two.ttl, two.index, two.stamps.len()), (64, 3, 3), "{aff}");
    let hc = &run.output("hc").stdout;
    let parsed_hc = sim_netfilter::parse_proc_recent(hc).unwrap_or_else(|e| panic!("{e}\n{hc}"));
    // 12 stamps written into the 8 slots a `--hitcount 5` list keeps: the next goes to slot 4.
    assert_eq!(parsed_hc[0].stamps.len(), 8, "{hc}");
    assert_eq!(parsed_hc[0].index, 4, "{hc}");
    // Loaded into nfsim's own lists, the rules keep as many stamps as the kernel's.
    let mut rs = sim_netfilter::Ruleset::new();
    rs.restore(RULES, &sim_netfilter::RestoreOptions::default())
        .unwrap();
    let mut st = sim_netfilter::RulesetState::new();
    let jiffies = run
        .output("jiffies")
        .stdout
        .trim()
        .trim_start_matches("jiffies:")
        .trim()
        .parse::<u64>()
        .ok();
    let clock = sim_netfilter::Jiffies {
        now: jiffies.unwrap_or(parsed.iter().map(|e| e.last_seen).max().unwrap()),
        hz: 1000,
    };
    let at = sim_core::SimTime::from_secs(3600);
    for (name, entries) in [("AFF", &parsed), ("HC", &parsed_hc)] {
        let views: Vec<_> = entries
            .iter()
            .map(|e| e.to_view(clock, at).unwrap())
            .collect();
        st.load_recent(&rs, name, &views)
            .unwrap_or_else(|e| panic!("{name}: {e}"));
        for v in st.recent_list(&rs, name).unwrap() {
            assert!(v.stamps.windows(2).all(|w| w[0] <= w[1]), "{name}: {v:?}");
        }
    }
    // LRU order: 127.0.0.3 was stamped last.
    let list = st.recent_list(&rs, "AFF").unwrap();
    assert_eq!(list.last().unwrap().addr.to_string(), "127.0.0.3");
}
