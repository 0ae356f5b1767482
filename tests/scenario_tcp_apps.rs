//! TCP applications that keep their connections (docs/scenario-reference.md, `tcp:` with
//! `connection:`, `tcpServer` with `halfClose`; docs/kernel-model.md §15): keep-alive
//! connections pinned to their endpoint across rule changes, parallel connections spread over
//! endpoints, a half-closing server's CLOSE_WAIT, a pause on an open socket, errors located in
//! the file, and the same half-close on the real kernel (the kernel lab, loopback only).

#[path = "support/kernel.rs"]
mod kernel;

#[path = "support/scenario.rs"]
mod scenario_run;

use kernel::{parse_ct_line, CtEntry, Scenario};
use nfsim::cluster::apps::{ClientSchedule, Outbox, TcpClientConfig, TcpServer};
use nfsim::cluster::ports::ConnectPorts;
use nfsim::cluster::sim::RunResult;
use nfsim::cluster::tcp_session::{ConnectionPolicy, TcpSessionClient, TcpSessionConfig};
use nfsim::scenario::load_str;
use scenario_run::run_text;
use sim_conntrack::Filter;
use sim_core::{Packet, SimDuration, SimRng, SimTime, TcpFlags};
use sim_netfilter::netns::{Egress, Ingress, Netns, NetnsConfig};
use std::collections::{BTreeSet, VecDeque};

const ROLLOUT: &str = include_str!("../scenarios/tcp-keepalive-rollout.yaml");
const IDLE_PAUSE: &str = include_str!("../scenarios/tcp-idle-pause.yaml");

fn run(text: &str) -> RunResult {
    run_text("t.yaml", text, true)
}

fn lines(r: &RunResult) -> Vec<String> {
    r.timeline.iter().map(|e| e.line()).collect()
}

/// Each expectation's outcome, a line each, for an assertion's message.
fn results(r: &RunResult) -> String {
    r.results
        .iter()
        .map(|x| format!("{} {}: {}", x.passed, x.name, x.detail))
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn the_shipped_scenarios_pass() {
    for text in [ROLLOUT, IDLE_PAUSE] {
        let r = run(text);
        assert!(r.passed(), "{}", results(&r));
        // Same seed, same run.
        assert_eq!(lines(&r), lines(&run(text)));
    }
}

/// A keep-alive connection to a pod keeps reaching it after the pod left the Service's rules:
/// the pool's connection #3 was DNAT'd to web-v1-a at 5 s, and its requests after the
/// deletion (25.5 s) still go there until the kill (55.5 s); the FIN of the kill reaches the
/// client, which reconnects at its next request and lands on a new pod.
#[test]
fn a_keep_alive_connection_stays_on_a_deleted_pod_until_its_process_dies() {
    let r = run(ROLLOUT);
    let l = lines(&r);
    let pos = |needle: &str| {
        l.iter()
            .position(|x| x.contains(needle))
            .unwrap_or_else(|| panic!("no {needle:?} in\n{}", l.join("\n")))
    };
    let pinned = pos("pool: #3 DNAT'd on node-1: 10.96.0.80:80 -> 10.244.1.5:8080");
    let deleted = pos("pod default/web-v1-a: deleted");
    let gone = pos("pod default/web-v1-a: gone");
    assert!(pinned < deleted && deleted < gone);
    // Requests on connection #3 between the deletion and the kill: answered, no new DNAT.
    let answered_between = l[deleted..gone]
        .iter()
        .filter(|x| x.contains("answered in") && x.contains("(connection #3)"))
        .count();
    assert!(answered_between >= 7, "{answered_between}");
    assert!(!l[deleted..gone]
        .iter()
        .any(|x| x.contains("pool: connection #4")));
    // The kill's FIN, then the client's reconnect to a new pod.
    let fin = pos("pool: connection #3 FIN from the server");
    assert!(fin > gone);
    let reconnect = pos("pool: connection #4 ");
    assert!(reconnect > fin);
    assert!(l[reconnect..]
        .iter()
        .find(|x| x.contains("pool: #") && x.contains("DNAT'd"))
        .is_some_and(|x| x.contains("10.244.1.6:8080") || x.contains("10.244.2.6:8080")));
    // Conntrack on node-1 saw the client's ACK of that FIN (CLOSE_WAIT), then its FIN
    // (LAST_ACK), both toward the dead pod's address.
    let ct_after: Vec<&String> = l[fin..]
        .iter()
        .filter(|x| x.starts_with_ct("node-1") && x.contains("dst=10.96.0.80 sport=59180"))
        .collect();
    assert!(
        ct_after.iter().any(|x| x.contains("CLOSE_WAIT"))
            && ct_after.iter().any(|x| x.contains("LAST_ACK")),
        "{ct_after:#?}"
    );
}

trait CtLine {
    fn starts_with_ct(&self, node: &str) -> bool;
}

impl CtLine for String {
    fn starts_with_ct(&self, node: &str) -> bool {
        self.contains(&format!("  ct {node}: "))
    }
}

/// The half-closing server's FIN comes first, right behind its response; the client's
/// quick ACK of the response passes node-1's conntrack after the FIN did, so the entry goes
/// FIN_WAIT → CLOSE_WAIT at once (conntrack's table moves FIN_WAIT to CLOSE_WAIT on any ACK
/// of the other direction) and stays there until the client's next request reads the EOF:
/// LAST_ACK, then TIME_WAIT when the server acknowledges.
#[test]
fn a_half_closing_server_shows_close_wait_until_the_client_closes() {
    let r = run(ROLLOUT);
    let l = lines(&r);
    let port = "sport=34074";
    let states: Vec<(String, String)> = l
        .iter()
        .filter(|x| x.starts_with_ct("node-1") && x.contains(port))
        .map(|x| {
            let t = x[..12].to_string();
            let st = [
                "SYN_SENT",
                "SYN_RECV",
                "ESTABLISHED",
                "FIN_WAIT",
                "CLOSE_WAIT",
                "LAST_ACK",
                "TIME_WAIT",
            ]
            .iter()
            .find(|s| x.contains(&format!(" {s} ")))
            .map_or("?", |s| s)
            .to_string();
            (t, st)
        })
        .collect();
    let want = [
        ("00:00:03.000", "SYN_SENT"),
        ("00:00:03.000", "SYN_RECV"),
        ("00:00:03.000", "ESTABLISHED"),
        ("00:00:03.001", "FIN_WAIT"),
        ("00:00:03.001", "CLOSE_WAIT"),
        ("00:00:23.000", "LAST_ACK"),
        ("00:00:23.000", "TIME_WAIT"),
    ];
    let got: Vec<(&str, &str)> = states
        .iter()
        .map(|(a, b)| (a.as_str(), b.as_str()))
        .collect();
    assert_eq!(got, want);
}

/// One node with the TCP server pod web-a (then `$more` pods), a client pod and the
/// Service default/web (10.96.0.80:80 -> 8080), and the client `c` asking it every 10 s, six
/// times (its connection settings follow): the world of the connection tests below.
macro_rules! web_service {
    ($more:literal) => {
        concat!(
            "nodes:\n  - {name: node-1, address: 192.168.0.11, podCIDR: 10.244.1.0/24}\npods:\n",
            "  - name: web-a\n    labels: {app: web}\n    node: node-1\n    ip: 10.244.1.5\n",
            "    apps: [{tcpServer: {port: 8080}}]\n",
            $more,
            "  - {name: client, node: node-1, ip: 10.244.1.9}\nservices:\n",
            "  - metadata: {name: web, namespace: default}\n    spec:\n      clusterIP: 10.96.0.80\n",
            "      selector: {app: web}\n      ports: [{protocol: TCP, port: 80, targetPort: 8080}]\n",
            "clients:\n  - name: c\n    pod: client\n    tcp:\n      target: default/web\n",
            "      interval: 10s\n      count: 6\n",
        )
    };
}

const PAUSED: &str = concat!("\
name: paused
seed: 3
duration: 30m
sysctls:
  net.netfilter.nf_conntrack_tcp_timeout_established: 600
", web_service!(
    "  - name: web-b\n    labels: {app: web}\n    node: node-1\n    ip: 10.244.1.6\n    apps: [{tcpServer: {port: 8080}}]\n"
),
"      connection: {keepAlive: true, pause: {after: 30s, for: PAUSE}}
expectations:
  - name: the paused connection's entry
    at: 2m
    conntrack: {node: node-1, filter: -p tcp --state ESTABLISHED, count: 1, timeout: \"480..510\"}
");

/// A pause shorter than the ESTABLISHED timeout resumes on the same socket, entry and
/// endpoint; one longer finds the entry expired: the next request is picked up mid-stream as
/// a new flow, DNAT'd again, and when that picks the other pod, its kernel has no such socket
/// and resets the connection.
#[test]
fn a_paused_socket_keeps_its_entry_until_the_established_timeout() {
    let short = run(&PAUSED.replace("PAUSE", "5m"));
    assert!(short.passed(), "{:#?}", short.results);
    let l = lines(&short);
    assert_eq!(
        l.iter()
            .filter(|x| x.contains("SYN"))
            .filter(|x| x.contains("c: connection"))
            .count(),
        1,
        "{}",
        l.join("\n")
    );
    assert!(short.clients[0].answered == 6, "{:?}", short.clients[0]);
    // 12 minutes of pause with a 10-minute ESTABLISHED timeout: the entry is destroyed, the
    // resumed request makes a new entry (picked up by its ACK, not a SYN). Over seeds, some
    // land on the other pod and are reset.
    let mut reset = 0;
    let mut same = 0;
    for seed in 1..=12 {
        let text = PAUSED
            .replace("PAUSE", "12m")
            .replace("seed: 3", &format!("seed: {seed}"));
        let r = run(&text);
        let l = lines(&r);
        assert!(
            l.iter()
                .any(|x| x.contains("[DESTROY]") && x.contains("ESTABLISHED")),
            "the paused entry expires"
        );
        let resumed: Vec<&String> = l
            .iter()
            .filter(|x| {
                x.as_str() > "00:12:3" && x.contains("[NEW] tcp") && !x.contains("SYN_SENT")
            })
            .collect();
        assert!(
            !resumed.is_empty(),
            "picked up mid-stream:\n{}",
            l.join("\n")
        );
        assert!(resumed[0].contains(" ESTABLISHED "), "{resumed:?}");
        if l.iter().any(|x| x.contains("reset (RST received)")) {
            reset += 1;
        } else {
            same += 1;
        }
    }
    assert!(reset > 0 && same > 0, "reset {reset}, same endpoint {same}");
}

const SILENT: &str = concat!("\
name: silent
seed: 3
duration: 12m
", web_service!(""),
"      requestTimeout: 11m
      connection: {keepAlive: true}
events:
  - at: 25s
    iptablesRestore:
      node: node-1
      rules: |
        *filter
        -I FORWARD 1 -d 10.244.1.5/32 -j DROP
        COMMIT
expectations:
  - name: answered, ESTABLISHED for days
    at: 15s
    conntrack: {node: node-1, filter: -p tcp --state ESTABLISHED, count: 1, timeout: \"431970..432000\"}
  - name: the unanswered request caps it at timeout_unacknowledged
    at: 2m
    conntrack: {node: node-1, filter: -p tcp --state ESTABLISHED, count: 1, timeout: \"205..215\"}
  - name: gone 300 s after the unanswered request
    at: 5m31s
    conntrack: {node: node-1, filter: -p tcp --state ESTABLISHED, count: 0}
");

/// A keep-alive connection whose server stops answering (its pod's traffic dropped from
/// 25 s: a dead pod, a broken path): the request at 30 s is never acknowledged, so the
/// entry's timeout drops from ESTABLISHED's 5 days to `nf_conntrack_tcp_timeout_unacknowledged`
/// (300 s, `nf_conntrack_tcp_packet`) and the entry is gone at 5 min 30 s, while the client
/// still waits for its answer. (It lingered 5 days before nfsim tracked TCP windows.)
#[test]
fn a_connection_whose_server_stops_answering_lingers_five_minutes_not_five_days() {
    let r = run(SILENT);
    assert!(r.passed(), "{}", results(&r));
    let l = lines(&r);
    assert!(
        l.iter().any(|x| x.contains("[DESTROY]")
            && x.contains("ESTABLISHED")
            && x.starts_with("00:05:30")),
        "{}",
        l.join("\n")
    );
}

fn with_tcp(fragment: &str) -> String {
    PAUSED.replace(
        "      connection: {keepAlive: true, pause: {after: 30s, for: PAUSE}}",
        fragment,
    )
}

#[test]
fn bad_tcp_application_fields_are_located_errors() {
    let e = load_str(
        "t.yaml",
        &with_tcp("      connection: {keepAlive: true, requests: 3}"),
    )
    .unwrap_err();
    assert_eq!((e.line, e.column), (33, 47), "{e}");
    assert!(e.message.contains("both given"), "{e}");
    let e = load_str("t.yaml", &with_tcp("      connection: {parallel: 0}")).unwrap_err();
    assert!(e.message.contains("parallel 0: expected 1 to 1024"), "{e}");
    let e = load_str("t.yaml", &with_tcp("      connection: {requests: 0}")).unwrap_err();
    assert!(e.message.contains("requests 0"), "{e}");
    let e = load_str(
        "t.yaml",
        &with_tcp("      connection: {pause: {after: 1s, for: 0s}}"),
    )
    .unwrap_err();
    assert!(e.message.contains("pause for 0s"), "{e}");
    let e = load_str("t.yaml", &with_tcp("      connection: {keepalive: true}")).unwrap_err();
    assert_eq!(e.line, 33, "{e}");
    let text = PAUSED.replace("PAUSE", "1m").replace(
        "apps: [{tcpServer: {port: 8080}}]\n  - name: web-b",
        "apps: [{udpServer: {port: 8080, halfClose: true}}]\n  - name: web-b",
    );
    let e = load_str("t.yaml", &text).unwrap_err();
    assert_eq!(e.line, 13, "{e}");
    assert!(e.message.contains("are for a tcpServer"), "{e}");
    let text = PAUSED.replace("PAUSE", "1m").replace(
        "apps: [{tcpServer: {port: 8080}}]\n  - name: web-b",
        "apps: [{tcpServer: {port: 8080, halfClose: false, maxRequests: 3}}]\n  - name: web-b",
    );
    let e = load_str("t.yaml", &text).unwrap_err();
    assert!(
        e.message.contains("`halfClose: false` with `maxRequests`"),
        "{e}"
    );
}

// ---------------------------------------------------------------------------------------------
// The same half-close on the real kernel
// ---------------------------------------------------------------------------------------------

/// nfsim's client and server on loopback, through a namespace with only `lo` (conntrack on, no
/// rules), as the kernel lab runs them: each packet takes OUTPUT → lo → INPUT at once.
struct Loopback {
    ns: Netns,
    client: TcpSessionClient,
    server: TcpServer,
    connect: ConnectPorts,
    /// (time, from the client, the packet as sent)
    wire: Vec<(SimTime, bool, Packet)>,
    events: Vec<String>,
}

impl Loopback {
    fn new(requests: u32, interval: SimDuration) -> Loopback {
        let server = TcpServer::new(8080, SimDuration::from_millis(1), SimRng::derive(1, "s"));
        let client = TcpSessionClient::new(
            TcpSessionConfig {
                client: TcpClientConfig {
                    index: 0,
                    local_ip: "127.0.0.1".parse().unwrap(),
                    dst: "127.0.0.2:8080".parse().unwrap(),
                    schedule: ClientSchedule {
                        start: SimTime::ZERO,
                        stop: SimTime::MAX,
                        interval,
                        jitter: SimDuration::ZERO,
                        count: Some(requests),
                    },
                    connect_timeout: SimDuration::from_secs(10),
                    request_timeout: SimDuration::from_secs(10),
                    request_bytes: 3,
                },
                policy: ConnectionPolicy {
                    requests: None,
                    parallel: 1,
                    pause: None,
                },
            },
            1,
            "c",
        );
        Loopback {
            ns: Netns::new(NetnsConfig::new("lab", 1)),
            client,
            server,
            connect: ConnectPorts::new(1, "lab"),
            wire: Vec::new(),
            events: Vec::new(),
        }
    }

    fn deliver(&mut self, now: SimTime, from_client: bool, out: Outbox) {
        let mut q: VecDeque<(bool, Packet)> =
            out.packets.into_iter().map(|p| (from_client, p)).collect();
        while let Some((fc, p)) = q.pop_front() {
            self.wire.push((now, fc, p));
            let r = self.ns.process(now, p, Ingress::Local);
            self.events.extend(
                self.ns
                    .drain_conntrack_events()
                    .iter()
                    .map(|e| e.to_string()),
            );
            for e in r.out {
                let Egress::LocalDeliver { packet } = e else {
                    panic!("only lo here");
                };
                let mut o = Outbox::new();
                let to_server = packet.dport() == Some(8080);
                if to_server {
                    self.server.handle_packet(now, &packet, &mut o);
                } else {
                    self.client.handle_packet(now, &packet, &mut o);
                }
                q.extend(o.packets.into_iter().map(|p| (!to_server, p)));
            }
        }
    }

    fn run_until(&mut self, end: SimTime) {
        while let Some(now) = [self.client.poll_timeout(), self.server.poll_timeout()]
            .into_iter()
            .flatten()
            .min()
            .filter(|t| *t <= end)
        {
            let mut o = Outbox::new();
            if self.client.poll_timeout().is_some_and(|t| t <= now) {
                self.client
                    .handle_timeout(now, &BTreeSet::new(), &mut self.connect, &mut o);
            }
            self.deliver(now, true, o);
            let mut o = Outbox::new();
            if self.server.poll_timeout().is_some_and(|t| t <= now) {
                self.server.handle_timeout(now, &mut o);
            }
            self.deliver(now, false, o);
        }
    }

    /// The server closes its connections (`close()`: a FIN each) at `now`.
    fn close_server(&mut self, now: SimTime) {
        let mut o = Outbox::new();
        self.server.process_exit(now, &mut o);
        self.deliver(now, false, o);
    }

    fn list(&self, now: SimTime) -> Vec<CtEntry> {
        self.ns
            .conntrack()
            .dump(now, &Filter::all())
            .lines()
            .filter_map(parse_ct_line)
            .collect()
    }
}

fn flags_of(seq: impl Iterator<Item = (bool, Packet)>) -> Vec<String> {
    seq.map(|(c, p)| {
        format!(
            "{}{}",
            if c { ">" } else { "<" },
            p.tcp_flags().map(|f| f.to_string()).unwrap_or_default()
        )
    })
    .collect()
}

/// A server that answers two requests on one connection, then closes its side: the kernel
/// and nfsim send the same segments in the same order (the server's quick ACK of the first
/// request only, the server's FIN first, the client's delayed ACK of it, the client's FIN
/// when it closes, the server's last ACK); conntrack shows the entry in CLOSE_WAIT with the
/// same seconds left 200 ms after the FIN and in TIME_WAIT after the client's close; the
/// `conntrack -E` lines have the same states, timeouts (SYN_SENT 120, SYN_RECV 60,
/// ESTABLISHED 432000, FIN_WAIT 120, CLOSE_WAIT 60, LAST_ACK 30, TIME_WAIT 120) and flags.
#[test]
fn a_half_closed_connection_matches_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("a_half_closed_connection_matches_the_kernel") else {
        return;
    };
    let krun = lab
        .run(
            &Scenario::new()
                .capture(true)
                .tcp_listen("127.0.0.2:8080", false)
                .tcp_connect(
                    "c",
                    "c",
                    Some("127.0.0.1:41000"),
                    "127.0.0.2:8080",
                    Some("one"),
                )
                .sleep_ms(100)
                .tcp_send("two", "c", "two")
                .sleep_ms(100)
                .tcp_close_server("127.0.0.2:8080")
                .sleep_ms(200)
                .conntrack("close-wait", &["-L", "-p", "tcp"])
                .tcp_close("c")
                .conntrack("closed", &["-L", "-p", "tcp"]),
        )
        .expect("lab run");
    let kframes: Vec<(bool, Packet)> = krun
        .frames
        .iter()
        .map(|f| {
            let p = sim_core::wire::parse_ethernet(&f.bytes).expect("a frame parses");
            (p.src.to_string() == "127.0.0.1", p)
        })
        .collect();

    // nfsim: requests at 0 s and 1 s; the server closes its side 200 ms after the second
    // (as the lab's does, after a pause); the client's third request (2 s) reads the EOF and
    // closes. Lists at the same distance from the FIN as the lab's.
    let mut sim = Loopback::new(3, SimDuration::from_secs(1));
    sim.run_until(SimTime::from_millis(1200));
    sim.close_server(SimTime::from_millis(1200));
    let k_fin_ms = krun.frames[kframes
        .iter()
        .position(|(c, p)| !c && p.tcp_flags() == Some(TcpFlags::FIN | TcpFlags::ACK))
        .expect("the kernel server's FIN")]
    .at_ms;
    let k_cw_ms = krun.step("close-wait").at_ms;
    let sim_cw =
        SimTime::from_millis(1200) + SimDuration::from_millis((k_cw_ms - k_fin_ms).max(0.0) as u64);
    sim.run_until(sim_cw);
    let s_cw = sim.list(sim_cw);
    sim.run_until(SimTime::from_millis(2100));
    let s_closed = sim.list(SimTime::from_millis(2100));

    let first_port = sim.wire[0].2.sport();
    let s_flags = flags_of(
        sim.wire
            .iter()
            .filter(|(_, c, p)| {
                if *c {
                    p.sport() == first_port
                } else {
                    p.dport() == first_port
                }
            })
            .map(|(_, c, p)| (*c, *p)),
    );
    let k_flags = flags_of(kframes.into_iter());
    assert_eq!(k_flags, s_flags, "segments differ");

    let ours = |e: &CtEntry| {
        e.orig.dport == Some(8080) && (e.orig.sport == Some(41000) || e.orig.sport == first_port)
    };
    let state = |v: &[CtEntry]| -> Vec<(Option<String>, Option<u64>, Vec<String>)> {
        v.iter()
            .filter(|e| ours(e))
            .map(|e| (e.state.clone(), e.timeout_secs, e.flags.clone()))
            .collect()
    };
    let (k_cw, k_closed) = (
        krun.conntrack_entries("close-wait"),
        krun.conntrack_entries("closed"),
    );
    for (what, k, s) in [
        ("close-wait", state(&k_cw), state(&s_cw)),
        ("closed", state(&k_closed), state(&s_closed)),
    ] {
        assert_eq!(k.len(), 1, "{what}: kernel {k_cw:?}");
        assert_eq!(s.len(), 1, "{what}: nfsim {s:?}");
        assert_eq!((&k[0].0, &k[0].2), (&s[0].0, &s[0].2), "{what}");
        let (kt, st) = (k[0].1.unwrap_or(0), s[0].1.unwrap_or(0));
        assert!(
            kt.abs_diff(st) <= 1,
            "{what}: {kt} s left on the kernel, {st} in nfsim"
        );
    }
    assert_eq!(state(&k_cw)[0].0.as_deref(), Some("CLOSE_WAIT"));
    assert_eq!(state(&k_closed)[0].0.as_deref(), Some("TIME_WAIT"));

    // Each event as "EVENT STATE TIMEOUT FLAGS": the seconds agree as
    // `kernel::event_secs_agree` says, everything else is equal.
    let ev_states = |lines: Vec<String>| -> Vec<(String, u64)> {
        lines
            .iter()
            .filter_map(|l| parse_ct_line(l))
            .filter(|e| ours(e))
            .filter_map(|e| {
                Some((
                    format!("{} {} {}", e.event?, e.state?, e.flags.join(",")),
                    e.timeout_secs?,
                ))
            })
            .collect()
    };
    let k_ev = ev_states(krun.event_lines().iter().map(|s| s.to_string()).collect());
    let s_ev = ev_states(sim.events.clone());
    let labels = |v: &[(String, u64)]| v.iter().map(|(l, _)| l.clone()).collect::<Vec<_>>();
    assert_eq!(
        labels(&k_ev),
        labels(&s_ev),
        "kernel {k_ev:?}, nfsim {s_ev:?}"
    );
    for ((what, kt), (_, st)) in k_ev.iter().zip(&s_ev) {
        assert!(
            kernel::event_secs_agree(*kt, *st, what.starts_with("DESTROY")),
            "{what}: the kernel's event says {kt} s, nfsim's {st} s (kernel {k_ev:?})"
        );
    }
    let shown: Vec<String> = s_ev
        .iter()
        .map(|(l, t)| {
            let (ev_state, flags) = l.rsplit_once(' ').unwrap();
            format!("{ev_state} {t} {flags}")
        })
        .collect();
    assert_eq!(
        shown,
        [
            "NEW SYN_SENT 120 UNREPLIED",
            "UPDATE SYN_RECV 60 ",
            "UPDATE ESTABLISHED 432000 ASSURED",
            "UPDATE FIN_WAIT 120 ASSURED",
            "UPDATE CLOSE_WAIT 60 ASSURED",
            "UPDATE LAST_ACK 30 ASSURED",
            "UPDATE TIME_WAIT 120 ASSURED"
        ]
    );
}

/// The server side alone: the kernel client's own segments replayed into nfsim's server.
/// Its process (here: its `close()` of the connection) goes after one request; the client,
/// not reading, then sends a second request on its half-closed socket. The kernel server
/// quick-acks the first request, answers, sends its FIN at the close, and answers the late
/// data with a RST (`tcp_rcv_state_process`: data for a socket whose receive side is shut);
/// nfsim's server sends the same segments with the same sequence and acknowledgement numbers
/// relative to each side's initial ones.
#[test]
fn a_closed_servers_orphan_resets_late_data_like_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("a_closed_servers_orphan_resets_late_data_like_the_kernel")
    else {
        return;
    };
    let krun = lab
        .run(
            &Scenario::new()
                .capture(true)
                .tcp_listen("127.0.0.2:8080", false)
                .tcp_connect(
                    "c",
                    "c",
                    Some("127.0.0.1:41002"),
                    "127.0.0.2:8080",
                    Some("one"),
                )
                .sleep_ms(100)
                .tcp_close_server("127.0.0.2:8080")
                .sleep_ms(100)
                .tcp_send("late", "c", "two")
                .sleep_ms(100),
        )
        .expect("lab run");
    let frames: Vec<(f64, Packet)> = krun
        .frames
        .iter()
        .map(|f| {
            (
                f.at_ms,
                sim_core::wire::parse_ethernet(&f.bytes).expect("a frame parses"),
            )
        })
        .collect();
    let from_client = |p: &Packet| p.src.to_string() == "127.0.0.1";
    let k_fin_ms = frames
        .iter()
        .find(|(_, p)| !from_client(p) && p.tcp_flags().is_some_and(|f| f.contains(TcpFlags::FIN)))
        .map(|(t, _)| *t)
        .expect("the kernel server's FIN");
    let t0 = frames[0].0;
    let at = |ms: f64| SimTime::from_nanos(((ms - t0) * 1e6) as u64);

    // The server's segments as (flags, seq − its ISN, ack − the client's ISN).
    let rel = |p: &Packet, isn_s: u32, isn_c: u32| -> (String, u32, u32) {
        let (seq, ack) = match p.l4 {
            sim_core::L4::Tcp { seq, ack, .. } => (seq, ack),
            _ => unreachable!(),
        };
        let f = p.tcp_flags().unwrap();
        (
            f.to_string(),
            seq.wrapping_sub(isn_s),
            if f.contains(TcpFlags::ACK) {
                ack.wrapping_sub(isn_c)
            } else {
                0
            },
        )
    };
    let isn_of = |p: &Packet| match p.l4 {
        sim_core::L4::Tcp { seq, .. } => seq,
        _ => unreachable!(),
    };
    let isn_c = isn_of(&frames[0].1);
    let k_isn_s = isn_of(&frames[1].1);
    let kernel: Vec<(String, u32, u32)> = frames
        .iter()
        .filter(|(_, p)| !from_client(p))
        .map(|(_, p)| rel(p, k_isn_s, isn_c))
        .collect();

    // nfsim's server, answering with the kernel's response length (the lab's servers answer
    // "<address>|<payload>"), fed the kernel client's segments at their times.
    let mut server = TcpServer::new(8080, SimDuration::ZERO, SimRng::derive(1, "s"));
    server.response_bytes = "127.0.0.2:8080|one".len() as u16;
    let mut sent: Vec<Packet> = Vec::new();
    let mut closed = false;
    for (ms, p) in &frames {
        if !closed && *ms >= k_fin_ms {
            closed = true;
            let mut o = Outbox::new();
            server.process_exit(at(k_fin_ms), &mut o);
            sent.extend(o.packets);
        }
        if !from_client(p) {
            continue;
        }
        // nfsim's segments carry no TCP options: the kernel's carry timestamps (12 bytes, 20
        // more on a SYN). Keep the payload, drop the options.
        let mut p = *p;
        let syn = p.tcp_flags().is_some_and(|f| f.contains(TcpFlags::SYN));
        p.len = 40 + p.len.saturating_sub(if syn { 60 } else { 52 });
        // The client acknowledges the kernel server's sequence numbers: move them to ours.
        if let (Some(first), sim_core::L4::Tcp { ack, .. }) = (sent.first(), &mut p.l4) {
            *ack = ack.wrapping_sub(k_isn_s).wrapping_add(isn_of(first));
        }
        let mut o = Outbox::new();
        server.handle_packet(at(*ms), &p, &mut o);
        server.handle_timeout(at(*ms), &mut o);
        sent.extend(o.packets);
    }
    let s_isn = isn_of(&sent[0]);
    let ours: Vec<(String, u32, u32)> = sent.iter().map(|p| rel(p, s_isn, isn_c)).collect();
    assert_eq!(kernel, ours);
    assert_eq!(
        kernel.iter().map(|k| k.0.as_str()).collect::<Vec<_>>(),
        ["SYN,ACK", "ACK", "PSH,ACK", "FIN,ACK", "RST"]
    );
}

/// `maxRequests: 3` on the server, keep-alive on the client: the server half-closes every
/// connection after its third response, so 8 requests take 3 connections; `requests: 2` on
/// the client instead: the client closes each connection after 2 requests (its FIN first:
/// conntrack goes FIN_WAIT, then LAST_ACK with the server's FIN, then TIME_WAIT), 4
/// connections.
#[test]
fn requests_per_connection_on_either_side() {
    let base = PAUSED
        .replace("PAUSE", "1m")
        .replace("      count: 6\n", "      count: 8\n")
        .replace("interval: 10s", "interval: 1s")
        .replace(
            "      connection: {keepAlive: true, pause: {after: 30s, for: 1m}}",
            "      connection: CONN",
        );
    let expect_conns = |text: &str, n: usize| {
        let r = run(text);
        let l = lines(&r);
        let syns = l
            .iter()
            .filter(|x| x.contains("c: connection #") && x.ends_with(" SYN"))
            .count();
        assert_eq!(syns, n, "{}", l.join("\n"));
        assert_eq!(r.clients[0].answered, 8, "{:?}", r.clients[0]);
        l
    };
    let server_side = base.replace("CONN", "{keepAlive: true}").replace(
        "apps: [{tcpServer: {port: 8080}}]",
        "apps: [{tcpServer: {port: 8080, maxRequests: 3}}]",
    );
    let l = expect_conns(&server_side, 3);
    assert_eq!(
        l.iter()
            .filter(|x| x.contains("FIN from the server: CLOSE_WAIT"))
            .count(),
        2,
        "the server closes the two full connections first; the third carries 2 requests and the client, its schedule over, closes it"
    );
    let client_side = base.replace("CONN", "{requests: 2}");
    let l = expect_conns(&client_side, 4);
    let first_port = l
        .iter()
        .find(|x| x.contains("c: connection #0 "))
        .and_then(|x| x.split(':').nth(4))
        .and_then(|x| x.split(' ').next())
        .expect("connection #0's port")
        .to_string();
    let states: Vec<&str> = l
        .iter()
        .filter(|x| x.contains("  ct node-1: ") && x.contains(&format!("sport={first_port} ")))
        .filter(|x| !x.contains("[DESTROY]"))
        .filter_map(|x| {
            ["FIN_WAIT", "CLOSE_WAIT", "LAST_ACK", "TIME_WAIT"]
                .into_iter()
                .find(|s| x.contains(&format!(" {s} ")))
        })
        .collect();
    assert_eq!(states, ["FIN_WAIT", "LAST_ACK", "TIME_WAIT"]);
}

/// The JSON lines of a keep-alive client: requests and answers by request `id`, with the
/// connection number in `conn`; connection changes with `conn` and the last request's `id`.
#[test]
fn keep_alive_events_in_the_json_lines() {
    let r = run(&PAUSED.replace("PAUSE", "1m"));
    let json: Vec<serde_json::Value> = r
        .timeline
        .iter()
        .map(|e| serde_json::to_value(e).unwrap())
        .collect();
    let kind = |k: &'static str| json.iter().filter(move |v| v["kind"] == k);
    let req = kind("tcp_request").nth(1).expect("a second request");
    assert_eq!(
        (req["id"].as_u64(), req["conn"].as_u64()),
        (Some(1), Some(0))
    );
    assert!(req["src"]
        .as_str()
        .is_some_and(|s| s.starts_with("10.244.1.9:")));
    let ans = kind("tcp_answered").next().expect("an answer");
    assert_eq!(ans["id"].as_u64(), Some(0));
    assert!(ans["rtt_ns"].as_u64().is_some_and(|n| n > 0));
    let open = kind("tcp_connection")
        .next()
        .expect("the connection opening");
    assert_eq!(
        (open["conn"].as_u64(), open["id"].as_u64()),
        (Some(0), Some(0))
    );
    assert!(open["change"].as_str().is_some_and(|s| s.ends_with("SYN")));
}
