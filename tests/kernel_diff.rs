//! Differential tests: the same rules and the same packets through the real Linux kernel (the
//! kernel lab, tests/support/kernel.rs: a private `unshare -n` namespace, loopback addresses
//! only) and through nfsim's pipeline ([`Netns`]), comparing what someone debugging a node
//! would look at: which endpoint each flow reached, the NAT'd tuples, the `conntrack -L`
//! entries (states, flags, timeouts to the second), the `conntrack -E` lines, the rule
//! counters of `iptables-save -c`, and what the client got back.
//!
//! ## How nfsim mirrors the kernel run
//!
//! The nfsim side is a [`Netns`] with only `lo` (127.0.0.1/8), loaded with the same
//! iptables-restore text. Every packet is sent as a process would send it
//! ([`Ingress::Local`]): it takes OUTPUT → POSTROUTING → `lo` → PREROUTING → INPUT, as on the
//! kernel, and comes out as [`Egress::LocalDeliver`], which a small socket model here hands to
//! the server bound at that address (or to the client):
//!
//! - UDP: the client's datagram is delivered where nfsim sends it; the server there answers
//!   `"<its address>|<datagram>"` to the peer nfsim showed it, exactly as the lab's servers
//!   do, so the answer has the same length as the kernel's.
//! - TCP: the kernel run captures the frames on `lo`; nfsim replays each segment (flags,
//!   sequence numbers, length) from the side that sent it, the client to the address it
//!   connected to, the server from the address nfsim delivered the SYN to, back to the peer
//!   nfsim showed it. The segment sequence is the kernel's own (delayed ACKs, piggybacked
//!   FINs), the addresses are nfsim's.
//!
//! Packet times are the kernel run's own (ms since the lab driver started: when the socket
//! sent, or the kernel's own stamp of a captured frame), so `conntrack -L` in nfsim is taken at
//! the instant the real one ran and timeouts compare to within a second (the kernel counts in
//! jiffies and prints whole seconds left; nfsim floors exact time). Packet lengths are the
//! kernel's, so byte counters compare exactly.
//!
//! Every test skips (prints `skipped: …` and passes) where the lab cannot run: not root, no
//! `unshare -n`, tools missing. `NFSIM_REQUIRE_KERNEL_LAB=1` makes that a failure.
//!
//! ## Where nfsim differs
//!
//! A test that shows a difference is `#[ignore = "nfsim differs: …"]` with the reason, so that
//! `cargo test` stays green and `cargo test --test kernel_diff -- --include-ignored` shows
//! the evidence. Once the difference is fixed, the `ignore` goes.

#[path = "support/kernel.rs"]
mod kernel;

use kernel::{parse_ct_line, CtEntry, LabRun, Scenario};
use sim_conntrack::Filter;
use sim_core::{Packet, SimTime, L4};
use sim_netfilter::netns::{Egress, Fate, Ingress, Netns, NetnsConfig};
use sim_netfilter::{Hook, Table};
use std::collections::BTreeMap;
use std::net::SocketAddr;

// ---------------------------------------------------------------------------------------------
// Rules
// ---------------------------------------------------------------------------------------------

/// kube-proxy's nat chains (docs/kube-proxy-model.md §2) for three services with one endpoint each,
/// on loopback addresses: `dns` 127.96.0.10:53/udp → 127.0.0.2:5353, `web` 127.96.0.20:80/tcp →
/// 127.0.0.2:8080, `down` 127.96.0.21:80/tcp → 127.0.0.3:8080 (where nothing listens).
/// Hairpin marking (`-s <endpoint> -j KUBE-MARK-MASQ`) is kept but never matches here: the
/// clients are 127.0.0.1.
const KUBE_NAT: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
:KUBE-MARK-MASQ - [0:0]
:KUBE-POSTROUTING - [0:0]
:KUBE-SEP-IT2ZTR26TO4XFPTO - [0:0]
:KUBE-SEP-WEBAAAAAAAAAAAAA - [0:0]
:KUBE-SEP-DOWNAAAAAAAAAAAA - [0:0]
:KUBE-SERVICES - [0:0]
:KUBE-SVC-TCOU7JCQXEZGVUNU - [0:0]
:KUBE-SVC-WEBAAAAAAAAAAAAA - [0:0]
:KUBE-SVC-DOWNAAAAAAAAAAAA - [0:0]
-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING
-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000
-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN
-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000
-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully
-A KUBE-SEP-IT2ZTR26TO4XFPTO -s 127.0.0.2/32 -m comment --comment \"kube-system/kube-dns:dns\" -j KUBE-MARK-MASQ
-A KUBE-SEP-IT2ZTR26TO4XFPTO -p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination 127.0.0.2:5353
-A KUBE-SEP-WEBAAAAAAAAAAAAA -s 127.0.0.2/32 -m comment --comment \"default/web:http\" -j KUBE-MARK-MASQ
-A KUBE-SEP-WEBAAAAAAAAAAAAA -p tcp -m comment --comment \"default/web:http\" -m tcp -j DNAT --to-destination 127.0.0.2:8080
-A KUBE-SEP-DOWNAAAAAAAAAAAA -s 127.0.0.3/32 -m comment --comment \"default/down:http\" -j KUBE-MARK-MASQ
-A KUBE-SEP-DOWNAAAAAAAAAAAA -p tcp -m comment --comment \"default/down:http\" -m tcp -j DNAT --to-destination 127.0.0.3:8080
-A KUBE-SERVICES -d 127.96.0.10/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU
-A KUBE-SERVICES -d 127.96.0.20/32 -p tcp -m comment --comment \"default/web:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-WEBAAAAAAAAAAAAA
-A KUBE-SERVICES -d 127.96.0.21/32 -p tcp -m comment --comment \"default/down:http cluster IP\" -m tcp --dport 80 -j KUBE-SVC-DOWNAAAAAAAAAAAA
-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 127.0.0.2:5353\" -j KUBE-SEP-IT2ZTR26TO4XFPTO
-A KUBE-SVC-WEBAAAAAAAAAAAAA -m comment --comment \"default/web:http -> 127.0.0.2:8080\" -j KUBE-SEP-WEBAAAAAAAAAAAAA
-A KUBE-SVC-DOWNAAAAAAAAAAAA -m comment --comment \"default/down:http -> 127.0.0.3:8080\" -j KUBE-SEP-DOWNAAAAAAAAAAAA
COMMIT
";

/// kube-proxy's filter rules for a service without endpoints (`nodns` 127.96.0.30:53/udp):
/// a REJECT with ICMP port unreachable for new connections, from OUTPUT.
const KUBE_FILTER_REJECT: &str = "\
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:KUBE-SERVICES - [0:0]
-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES
-A KUBE-SERVICES -d 127.96.0.30/32 -p udp -m comment --comment \"default/nodns:dns has no endpoints\" -m udp --dport 53 -j REJECT --reject-with icmp-port-unreachable
COMMIT
";

/// A DNAT (service 127.96.0.40:53 → 127.0.0.2:5353) followed by an SNAT of the DNAT'd
/// traffic from 127.0.0.1 to 127.0.0.3, in POSTROUTING: a locally generated flow whose both
/// ends are rewritten.
const SNAT_RULES: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A OUTPUT -d 127.96.0.40/32 -p udp -m udp --dport 53 -j DNAT --to-destination 127.0.0.2:5353
-A POSTROUTING -s 127.0.0.1/32 -d 127.0.0.2/32 -p udp -m udp --dport 5353 -j SNAT --to-source 127.0.0.3
COMMIT
";

/// MASQUERADE of locally generated traffic leaving by `lo`.
const MASQ_RULES: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A POSTROUTING -d 127.0.0.2/32 -p udp -m udp --dport 5353 -j MASQUERADE
COMMIT
";

// ---------------------------------------------------------------------------------------------
// The nfsim side
// ---------------------------------------------------------------------------------------------

fn sa(s: &str) -> SocketAddr {
    s.parse()
        .unwrap_or_else(|e| panic!("{s:?} is not ip:port: {e}"))
}

/// A kernel-lab time (ms since the driver started) as a [`SimTime`].
fn at(ms: f64) -> SimTime {
    SimTime::from_nanos((ms * 1e6).round().max(0.0) as u64)
}

/// The IP total length of a UDP datagram carrying `payload` bytes.
fn udp_len(payload: usize) -> u16 {
    u16::try_from(20 + 8 + payload).expect("a small datagram")
}

fn endpoint(p: &Packet) -> Option<SocketAddr> {
    Some(SocketAddr::new(p.dst, p.dport()?))
}

fn source(p: &Packet) -> Option<SocketAddr> {
    Some(SocketAddr::new(p.src, p.sport()?))
}

/// What one UDP datagram (and its answer) did in nfsim.
#[derive(Clone, Debug)]
struct SimUdp {
    /// How the query's journey ended.
    fate: Fate,
    /// The server socket it was delivered to.
    server: Option<SocketAddr>,
    /// The client as that server saw it.
    peer: Option<SocketAddr>,
    /// Where the answer came from, as the client saw it.
    reply_from: Option<SocketAddr>,
    /// Packets delivered to the client's address other than the answer (ICMP errors).
    to_client: Vec<Packet>,
    /// Every packet delivered, in order, as the sockets saw them.
    delivered: Vec<Packet>,
}

/// One TCP connection being replayed.
#[derive(Clone, Debug)]
struct SimTcp {
    /// The client's address.
    client: SocketAddr,
    /// Where it connected (the service).
    to: SocketAddr,
    /// Where nfsim delivered the SYN: the server socket's address.
    server: Option<SocketAddr>,
    /// The client as the server saw it.
    peer: Option<SocketAddr>,
}

/// A namespace with only `lo`, the same rules as the kernel run, and the UDP servers.
struct Sim {
    ns: Netns,
    /// UDP servers: bound address → whether they answer.
    udp_servers: BTreeMap<SocketAddr, bool>,
    /// `conntrack -E` lines, in order.
    events: Vec<String>,
}

impl Sim {
    fn new(rules: &[&str]) -> Sim {
        let mut ns = Netns::new(NetnsConfig::new("lab", 1));
        for r in rules {
            ns.restore(r, true).expect("the rules load in nfsim");
        }
        Sim {
            ns,
            udp_servers: BTreeMap::new(),
            events: Vec::new(),
        }
    }

    fn udp_listen(&mut self, addr: &str, answer: bool) {
        self.udp_servers.insert(sa(addr), answer);
    }

    fn take_events(&mut self) {
        let ev = self.ns.drain_conntrack_events();
        self.events.extend(ev.iter().map(|e| e.to_string()));
    }

    /// One datagram `payload` from `from` to `to` at `sent`; the server it reaches answers at
    /// `answered` as the lab's servers do.
    fn udp_send(
        &mut self,
        sent: SimTime,
        answered: SimTime,
        from: SocketAddr,
        to: SocketAddr,
        payload: &str,
    ) -> SimUdp {
        let mut q = Packet::udp(from, to);
        q.len = udp_len(payload.len());
        let r = self.ns.process(sent, q, Ingress::Local);
        self.take_events();
        let mut out = SimUdp {
            fate: r.fate.clone(),
            server: None,
            peer: None,
            reply_from: None,
            to_client: Vec::new(),
            delivered: Vec::new(),
        };
        for e in &r.out {
            match e {
                Egress::LocalDeliver { packet } => {
                    out.delivered.push(*packet);
                    let dst = endpoint(packet);
                    if matches!(packet.l4, L4::Udp { .. })
                        && dst.is_some_and(|d| self.udp_servers.contains_key(&d))
                    {
                        out.server = dst;
                        out.peer = source(packet);
                    } else if packet.dst == from.ip() {
                        out.to_client.push(*packet);
                    } else {
                        panic!("nfsim delivered {packet} where no socket listens");
                    }
                }
                Egress::Transmit { dev, packet, .. } => {
                    panic!("nfsim sent {packet} out of {dev}: the lab has nothing but lo")
                }
            }
        }
        let (Some(server), Some(peer)) = (out.server, out.peer) else {
            return out;
        };
        if !self.udp_servers[&server] {
            return out;
        }
        let text = format!("{server}|{payload}");
        let mut a = Packet::udp(server, peer);
        a.len = udp_len(text.len());
        let r = self.ns.process(answered, a, Ingress::Local);
        self.take_events();
        for e in &r.out {
            match e {
                Egress::LocalDeliver { packet } => {
                    out.delivered.push(*packet);
                    if endpoint(packet) == Some(from) {
                        out.reply_from = source(packet);
                    } else {
                        panic!("nfsim delivered the answer {packet}, not to the client {from}");
                    }
                }
                Egress::Transmit { dev, packet, .. } => {
                    panic!("nfsim sent {packet} out of {dev}: the lab has nothing but lo")
                }
            }
        }
        out
    }

    /// Replays one segment the kernel sent on `lo` (`frame`, after NAT) at `t`, from the side
    /// of `conn` that sent it; returns what nfsim delivered, or `None` if the frame is not
    /// this connection's. The client is recognised by its own address in the frame (so this
    /// is for flows whose source is not rewritten).
    fn tcp_segment(&mut self, t: SimTime, frame: &Packet, conn: &mut SimTcp) -> Option<Packet> {
        let L4::Tcp {
            flags,
            seq,
            ack,
            win,
            opts,
            ..
        } = frame.l4
        else {
            return None;
        };
        let from_client = source(frame) == Some(conn.client);
        let to_client = endpoint(frame) == Some(conn.client);
        let (src, dst) = if from_client {
            (conn.client, conn.to)
        } else if to_client {
            let (Some(s), Some(p)) = (conn.server, conn.peer) else {
                panic!(
                    "the kernel answered {frame} but nfsim delivered nothing of {} → {}",
                    conn.client, conn.to
                )
            };
            (s, p)
        } else {
            return None;
        };
        let mut p = Packet::tcp(src, dst, flags);
        if let L4::Tcp {
            seq: s,
            ack: a,
            win: w,
            opts: o,
            ..
        } = &mut p.l4
        {
            *s = seq;
            *a = ack;
            *w = win;
            *o = opts;
        }
        p.len = frame.len;
        let r = self.ns.process(t, p, Ingress::Local);
        self.take_events();
        let delivered = match r.out.as_slice() {
            [Egress::LocalDeliver { packet }] => *packet,
            other => panic!(
                "nfsim did not deliver {p} (the kernel's {frame}): {:?}, out {other:?}",
                r.fate
            ),
        };
        if from_client && conn.server.is_none() {
            conn.server = endpoint(&delivered);
            conn.peer = source(&delivered);
        }
        Some(delivered)
    }

    /// `conntrack -L` at `now`, parsed.
    fn list(&self, now: SimTime) -> Vec<CtEntry> {
        self.ns
            .conntrack()
            .dump(now, &Filter::all())
            .lines()
            .filter_map(parse_ct_line)
            .collect()
    }

    /// One table of `iptables-save -c`.
    fn save_table(&self, table: &str) -> Vec<String> {
        save_table(&self.ns.save(true), table)
    }
}

// ---------------------------------------------------------------------------------------------
// Comparing
// ---------------------------------------------------------------------------------------------

/// The lines of one table (`*nat` … `COMMIT`) of `iptables-save` output, comments left out.
fn save_table(text: &str, table: &str) -> Vec<String> {
    let head = format!("*{table}");
    let mut lines = Vec::new();
    let mut inside = false;
    for l in text.lines() {
        if l.starts_with('#') {
            continue;
        }
        if l == head {
            inside = true;
        }
        if inside {
            lines.push(l.to_string());
            if l == "COMMIT" {
                break;
            }
        }
    }
    lines
}

/// The `[packets:bytes]` of a save line (a rule's prefix or a chain's policy), and the line
/// without them.
fn split_counters(line: &str) -> (Option<(u64, u64)>, String) {
    let parse = |c: &str| -> Option<(u64, u64)> {
        let (p, b) = c
            .trim_matches(|ch| ch == '[' || ch == ']')
            .split_once(':')?;
        Some((p.parse().ok()?, b.parse().ok()?))
    };
    if line.starts_with('[') {
        if let Some((c, rest)) = line.split_once("] ") {
            return (parse(c), rest.to_string());
        }
    }
    if line.starts_with(':') {
        if let Some(i) = line.rfind(" [") {
            return (parse(&line[i + 1..]), line[..i].to_string());
        }
    }
    (None, line.to_string())
}

/// Compares two saves of one table: the same lines in the same order, the same packet
/// counts, and (with `bytes`) the same byte counts. Returns the differences.
fn diff_counters(kernel: &[String], sim: &[String], bytes: bool) -> Vec<String> {
    let mut diffs = Vec::new();
    let k: Vec<_> = kernel.iter().map(|l| split_counters(l)).collect();
    let s: Vec<_> = sim.iter().map(|l| split_counters(l)).collect();
    let k_text: Vec<&String> = k.iter().map(|(_, t)| t).collect();
    let s_text: Vec<&String> = s.iter().map(|(_, t)| t).collect();
    if k_text != s_text {
        diffs.push(format!(
            "the rule text differs:\nkernel:\n{}\nnfsim:\n{}",
            kernel.join("\n"),
            sim.join("\n")
        ));
        return diffs;
    }
    for ((kc, line), (sc, _)) in k.iter().zip(&s) {
        match (kc, sc) {
            (Some((kp, kb)), Some((sp, sb))) => {
                if kp != sp || (bytes && kb != sb) {
                    diffs.push(format!(
                        "[{kp}:{kb}] on the kernel, [{sp}:{sb}] in nfsim: {line}"
                    ));
                }
            }
            (None, None) => {}
            _ => diffs.push(format!("counters on one side only: {line}")),
        }
    }
    diffs
}

/// Asserts that the kernel's `iptables-save -c` nat table (the run's `counters` step) and
/// nfsim's are the same, packet and byte counts included; returns the kernel's lines.
fn assert_same_nat_counters(run: &LabRun, sim: &Sim) -> Vec<String> {
    let k = save_table(&run.output("counters").stdout, "nat");
    let d = diff_counters(&k, &sim.save_table("nat"), true);
    assert!(d.is_empty(), "nat counters differ:\n{}", d.join("\n"));
    k
}

fn show(entries: &[CtEntry]) -> String {
    entries
        .iter()
        .map(|e| format!("{e:?}"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Compares `conntrack -L` entries: the same entries (tuples, state, flags, mark, use), with
/// timeouts at most `slack` seconds apart. Order is not compared (the kernel lists in hash
/// order).
fn same_entries(what: &str, kernel: &[CtEntry], sim: &[CtEntry], slack: u64) {
    let key = |e: &CtEntry| {
        let mut e = e.clone();
        e.timeout_secs = None;
        format!("{e:?}")
    };
    let mut k: Vec<_> = kernel.iter().map(|e| (key(e), e.timeout_secs)).collect();
    let mut s: Vec<_> = sim.iter().map(|e| (key(e), e.timeout_secs)).collect();
    k.sort();
    s.sort();
    let ks: Vec<_> = k.iter().map(|(x, _)| x).collect();
    let ss: Vec<_> = s.iter().map(|(x, _)| x).collect();
    assert_eq!(
        ks,
        ss,
        "{what}: conntrack -L differs\nkernel:\n{}\nnfsim:\n{}",
        show(kernel),
        show(sim)
    );
    for ((line, kt), (_, st)) in k.iter().zip(&s) {
        let (Some(kt), Some(st)) = (kt, st) else {
            assert_eq!(kt, st, "{what}: {line}");
            continue;
        };
        assert!(
            kt.abs_diff(*st) <= slack,
            "{what}: {kt} s left on the kernel, {st} s in nfsim: {line}"
        );
    }
}

/// Compares `conntrack -E` lines in order: identical, except for the seconds left, which
/// agree as [`kernel::event_secs_agree`] says (seen under load: TIME_WAIT 119 on the
/// kernel where nfsim says 120).
fn same_events(kernel: &[&str], sim: &[String]) {
    let all = || format!("kernel:\n{}\nnfsim:\n{}", kernel.join("\n"), sim.join("\n"));
    assert_eq!(kernel.len(), sim.len(), "conntrack -E differs\n{}", all());
    for (k, s) in kernel.iter().zip(sim) {
        if *k == s.as_str() {
            continue;
        }
        let (Some(mut ke), Some(mut se)) = (parse_ct_line(k), parse_ct_line(s)) else {
            panic!("conntrack -E differs at\n{k}\n{s}\n{}", all());
        };
        let destroy = ke.event.as_deref() == Some("DESTROY");
        let close = ke
            .timeout_secs
            .zip(se.timeout_secs)
            .is_some_and(|(k, s)| kernel::event_secs_agree(k, s, destroy));
        ke.timeout_secs = None;
        se.timeout_secs = None;
        assert!(
            close && ke == se,
            "conntrack -E differs at\n{k}\n{s}\n{}",
            all()
        );
    }
}

/// The frames the kernel captured on `lo`, parsed, with their times.
fn frames(run: &LabRun) -> Vec<(SimTime, Packet)> {
    run.frames
        .iter()
        .map(|f| {
            let p = sim_core::wire::parse_ethernet(&f.bytes)
                .unwrap_or_else(|e| panic!("a frame the kernel sent does not parse: {e}"));
            (at(f.at_ms), p)
        })
        .collect()
}

fn texts(ps: &[Packet]) -> Vec<String> {
    ps.iter().map(|p| format!("{p} len={}", p.len)).collect()
}

// ---------------------------------------------------------------------------------------------
// The cases
// ---------------------------------------------------------------------------------------------

/// Case 1: UDP through kube-proxy's OUTPUT DNAT to a single endpoint, query / answer / query
/// after 2.5 s. The flow reaches the same endpoint, the answer comes back from the service
/// address, `conntrack -L` agrees after each step (state, `[UNREPLIED]`, `[ASSURED]`, the
/// NAT'd reply tuple, the timeout to a second), the `-E` lines are identical in order, the
/// nat counters show one packet (the flow's first) with the same bytes, and the frames on
/// `lo` are the same packets.
#[test]
fn udp_through_output_dnat_matches_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("udp_through_output_dnat_matches_the_kernel") else {
        return;
    };
    let client = "127.0.0.1:40004";
    let svc = "127.96.0.10:53";
    let run = lab
        .run(
            &Scenario::new()
                .rules(KUBE_NAT)
                .capture(true)
                .udp_listen("127.0.0.2:5353", true)
                .udp_send("q1", client, svc)
                .conntrack("answered", &["-L"])
                .udp_send("q2", client, svc)
                .conntrack("within-2s", &["-L"])
                .sleep_ms(2500)
                .udp_send("q3", client, svc)
                .conntrack("after-pause", &["-L"])
                .iptables_save("counters"),
        )
        .expect("lab run");

    let mut sim = Sim::new(&[KUBE_NAT]);
    sim.udp_listen("127.0.0.2:5353", true);
    let mut delivered = Vec::new();
    for (q, list) in [
        ("q1", "answered"),
        ("q2", "within-2s"),
        ("q3", "after-pause"),
    ] {
        let k = run.udp(q);
        let kr = k
            .reply
            .as_ref()
            .unwrap_or_else(|| panic!("{q} answered: {k:?}"));
        let s = sim.udp_send(
            at(k.sent_at_ms),
            at(kr.at_ms),
            sa(client),
            sa(svc),
            &k.payload,
        );
        assert_eq!(s.fate, Fate::Delivered, "{q}");
        // The endpoint the flow reached, and the answer's source as the client saw it.
        assert_eq!(
            s.server.map(|a| a.to_string()),
            Some(kr.server.clone()),
            "{q}"
        );
        assert_eq!(s.reply_from.map(|a| a.to_string()), kr.from, "{q}");
        delivered.extend(s.delivered);
        let t = at(run.step(list).at_ms);
        same_entries(list, &run.conntrack_entries(list), &sim.list(t), 1);
    }
    // The server saw the client's own address each time.
    let saw: Vec<_> = run
        .received_by("127.0.0.2:5353")
        .iter()
        .map(|s| s.peer.clone())
        .collect();
    assert_eq!(saw, vec![client.to_string(); 3]);

    // The same packets on lo (the kernel captures after POSTROUTING; with DNAT only, that is
    // what the sockets receive).
    let k_frames: Vec<Packet> = frames(&run).into_iter().map(|(_, p)| p).collect();
    assert_eq!(texts(&k_frames), texts(&delivered));

    same_events(&run.event_lines(), &sim.events);
    assert_eq!(sim.events.len(), 3, "NEW, UPDATE (reply), UPDATE [ASSURED]");

    assert_same_nat_counters(&run, &sim);
}

/// Case 2: a TCP connection through the DNAT, and one to a service whose endpoint does not
/// listen: the kernel's segments replayed through nfsim reach the same endpoint and come back
/// the same; `conntrack -L` agrees when established, half closed and closed; the `-E` lines
/// (SYN_SENT, SYN_RECV, ESTABLISHED [ASSURED], FIN_WAIT, CLOSE_WAIT, LAST_ACK, TIME_WAIT; the
/// refused SYN's NEW) are identical; the nat counters match.
#[test]
fn tcp_through_dnat_matches_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("tcp_through_dnat_matches_the_kernel") else {
        return;
    };
    let run = lab
        .run(
            &Scenario::new()
                .rules(KUBE_NAT)
                .capture(true)
                .tcp_listen("127.0.0.2:8080", false)
                .tcp_connect(
                    "c",
                    "c",
                    Some("127.0.0.1:41000"),
                    "127.96.0.20:80",
                    Some("hello"),
                )
                .conntrack("established", &["-L"])
                .tcp_close("c")
                .conntrack("client-closed", &["-L"])
                .tcp_close_server("127.0.0.2:8080")
                .conntrack("both-closed", &["-L"])
                .tcp_connect(
                    "refused",
                    "r",
                    Some("127.0.0.1:41001"),
                    "127.96.0.21:80",
                    None,
                )
                .conntrack("after-rst", &["-L"])
                .iptables_save("counters"),
        )
        .expect("lab run");
    let c = run.tcp("c");
    assert!(c.connected, "{c:?}");
    assert_eq!(
        run.tcp("refused").error.as_deref(),
        Some("ECONNREFUSED"),
        "{:?}",
        run.tcp("refused")
    );

    let mut sim = Sim::new(&[KUBE_NAT]);
    let mut conns = [
        SimTcp {
            client: sa("127.0.0.1:41000"),
            to: sa("127.96.0.20:80"),
            server: None,
            peer: None,
        },
        SimTcp {
            client: sa("127.0.0.1:41001"),
            to: sa("127.96.0.21:80"),
            server: None,
            peer: None,
        },
    ];
    let mut pending = frames(&run).into_iter().peekable();
    let mut k_seen = Vec::new();
    let mut s_seen = Vec::new();
    for list in ["established", "client-closed", "both-closed", "after-rst"] {
        let t = at(run.step(list).at_ms);
        while let Some((ft, f)) = pending.next_if(|(ft, _)| *ft <= t) {
            let got = conns
                .iter_mut()
                .find_map(|c| sim.tcp_segment(ft, &f, c))
                .unwrap_or_else(|| panic!("a frame of no connection: {f}"));
            k_seen.push(f);
            s_seen.push(got);
        }
        same_entries(list, &run.conntrack_entries(list), &sim.list(t), 1);
    }
    assert!(pending.next().is_none(), "frames after the last listing");
    // Each segment arrived as the kernel delivered it (DNAT only: the lo capture is what the
    // sockets receive).
    assert_eq!(texts(&k_seen), texts(&s_seen));
    assert_eq!(
        conns[0].server,
        Some(sa("127.0.0.2:8080")),
        "the endpoint the kernel's server answered from"
    );
    assert_eq!(conns[1].server, Some(sa("127.0.0.3:8080")));

    same_events(&run.event_lines(), &sim.events);

    assert_same_nat_counters(&run, &sim);
}

/// `e` with the reply tuple's destination port hidden, after checking it is a remapped one
/// (not `was`, and at least 1024: `nf_nat_l4proto_unique_tuple` picks a random port in
/// 1024–65535 for a source port ≥ 1024 when the null binding's tuple is taken). The port
/// itself is random on the kernel and seeded in nfsim.
fn hide_remapped_port(e: &mut CtEntry, was: u16, side: &str) {
    let p = e.reply.dport.unwrap_or(0);
    assert!(p != was && p >= 1024, "{side}: not a remapped port: {e:?}");
    e.reply.dport = None;
}

/// Case 3: SNAT of a locally generated, DNAT'd flow (POSTROUTING `-j SNAT --to-source
/// 127.0.0.3`): the server sees 127.0.0.3, the reply tuple says so, and the answer is
/// un-SNAT'd and un-DNAT'd on its way back. Then a second client bound at 127.0.0.3 with the
/// same port sends to the endpoint directly: its reply tuple would be the first flow's, so
/// the kernel remaps its source port although no rule asks for NAT (the null binding of
/// `nf_nat_alloc_null_binding` must be unique too); nfsim must too, to some other port ≥ 1024
/// (the port itself is random on the kernel, so it is not compared).
#[test]
fn snat_and_implicit_port_remap_match_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("snat_and_implicit_port_remap_match_the_kernel") else {
        return;
    };
    let a = "127.0.0.1:40041";
    let b = "127.0.0.3:40041";
    let svc = "127.96.0.40:53";
    let ep = "127.0.0.2:5353";
    let run = lab
        .run(
            &Scenario::new()
                .rules(SNAT_RULES)
                .udp_listen(ep, true)
                .udp_send("a", a, svc)
                .udp_send("b", b, ep)
                .conntrack("entries", &["-L"])
                .iptables_save("counters"),
        )
        .expect("lab run");

    let mut sim = Sim::new(&[SNAT_RULES]);
    sim.udp_listen(ep, true);
    let mut peers = Vec::new();
    for (label, from, to) in [("a", a, svc), ("b", b, ep)] {
        let k = run.udp(label);
        let kr = k
            .reply
            .as_ref()
            .unwrap_or_else(|| panic!("{label} answered: {k:?}"));
        let s = sim.udp_send(at(k.sent_at_ms), at(kr.at_ms), sa(from), sa(to), &k.payload);
        assert_eq!(s.fate, Fate::Delivered, "{label}");
        assert_eq!(
            s.server.map(|x| x.to_string()),
            Some(kr.server.clone()),
            "{label}"
        );
        assert_eq!(s.reply_from.map(|x| x.to_string()), kr.from, "{label}");
        peers.push(s.peer.expect("delivered"));
    }
    // The peers the server saw: 127.0.0.3:40041 (SNAT'd, port kept) and 127.0.0.3:<remapped>.
    let saw: Vec<SocketAddr> = run.received_by(ep).iter().map(|r| sa(&r.peer)).collect();
    assert_eq!(saw.len(), 2);
    assert_eq!(
        saw[0],
        sa(b),
        "the kernel SNATs a to 127.0.0.3, keeping the port"
    );
    assert_eq!(peers[0], saw[0], "the SNAT'd source the server saw");
    for (side, p) in [("kernel", saw[1]), ("nfsim", peers[1])] {
        assert_eq!(p.ip(), sa(b).ip(), "{side}: b keeps its address");
        assert!(
            p.port() != 40041 && p.port() >= 1024,
            "{side}: b's source port is remapped: {p}"
        );
    }

    let t = at(run.step("entries").at_ms);
    let hide = |mut es: Vec<CtEntry>, side: &str| {
        for e in es.iter_mut().filter(|e| e.orig.src == "127.0.0.3") {
            hide_remapped_port(e, 40041, side);
        }
        es
    };
    let k = hide(run.conntrack_entries("entries"), "kernel");
    let s = hide(sim.list(t), "nfsim");
    same_entries("entries", &k, &s, 1);
    let a_entry = k
        .iter()
        .find(|e| e.orig.src == "127.0.0.1")
        .expect("a's entry");
    assert_eq!(
        (a_entry.reply.src.as_str(), a_entry.reply.dst.as_str()),
        ("127.0.0.2", "127.0.0.3"),
        "the reply tuple is both DNAT'd and SNAT'd: {a_entry:?}"
    );

    // The events, b's remapped port hidden on both sides.
    let hide_ev = |lines: Vec<String>, side: &str| -> Vec<String> {
        lines
            .into_iter()
            .map(|l| match parse_ct_line(&l) {
                Some(e) if e.orig.src == "127.0.0.3" => {
                    let port = e.reply.dport.unwrap_or(0);
                    let mut m = e.clone();
                    hide_remapped_port(&mut m, 40041, side);
                    l.replace(&format!("dport={port}"), "dport=*")
                }
                _ => l,
            })
            .collect()
    };
    let k_ev = hide_ev(
        run.event_lines().into_iter().map(str::to_string).collect(),
        "kernel",
    );
    let s_ev = hide_ev(sim.events.clone(), "nfsim");
    let k_ev: Vec<&str> = k_ev.iter().map(String::as_str).collect();
    same_events(&k_ev, &s_ev);

    assert_same_nat_counters(&run, &sim);
}

/// Case 3b: MASQUERADE of locally generated traffic leaving by `lo`. The kernel drops it:
/// `nf_nat_masquerade_ipv4` asks `inet_select_addr(lo, nh, RT_SCOPE_UNIVERSE)` for a source,
/// and lo's only address, 127.0.0.1, has scope host (iproute2 gives every 127.x address scope
/// host), so there is none ("lo ate my IP address" in the kernel log) and the packet is
/// dropped: `sendto` fails with EPERM and no entry is left. (On a node, where other devices
/// have global addresses, `inet_select_addr` falls back to the first of those instead.)
#[test]
fn masquerade_out_of_lo_matches_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("masquerade_out_of_lo_matches_the_kernel") else {
        return;
    };
    let client = "127.0.0.1:40045";
    let ep = "127.0.0.2:5353";
    let run = lab
        .run(
            &Scenario::new()
                .rules(MASQ_RULES)
                .udp_listen(ep, true)
                .udp_send_wait("m", Some(client), ep, 100)
                .conntrack("entries", &["-L"])
                .iptables_save("counters"),
        )
        .expect("lab run");
    let k = run.udp("m");
    assert_eq!(k.error.as_deref(), Some("EPERM"), "{k:?}");
    assert!(run.received_by(ep).is_empty());
    assert!(run.conntrack_entries("entries").is_empty());
    assert!(run.event_lines().is_empty(), "{:?}", run.event_lines());

    let mut sim = Sim::new(&[MASQ_RULES]);
    sim.udp_listen(ep, true);
    let s = sim.udp_send(
        at(k.sent_at_ms),
        at(k.sent_at_ms),
        sa(client),
        sa(ep),
        &k.payload,
    );
    assert!(
        matches!(s.fate, Fate::Dropped(_)),
        "the kernel drops it; nfsim: {:?}, the server saw {:?}",
        s.fate,
        s.peer
    );
    assert!(sim.list(at(run.step("entries").at_ms)).is_empty());
    assert!(sim.events.is_empty(), "{:?}", sim.events);
    assert_same_nat_counters(&run, &sim);
}

/// Case 4: after a mix of flows (two UDP flows through the service, one of them with three
/// queries; a datagram straight to the endpoint; a TCP connection through the service with
/// data and a close), `iptables-save -c`'s nat table is the same in both, counters included,
/// packets and bytes: every rule and policy saw only the first packet of each flow, and the
/// loopback pass (PREROUTING, INPUT) none. nfsim's packets have the kernel's lengths (UDP:
/// the lab's payloads; TCP: the captured segments), so the byte counts compare exactly.
#[test]
fn nat_counters_match_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("nat_counters_match_the_kernel") else {
        return;
    };
    let dns = "127.96.0.10:53";
    let web = "127.96.0.20:80";
    let ep = "127.0.0.2:5353";
    let run = lab
        .run(
            &Scenario::new()
                .rules(KUBE_NAT)
                .capture(true)
                .udp_listen(ep, true)
                .tcp_listen("127.0.0.2:8080", true)
                .udp_send("u1", "127.0.0.1:40060", dns)
                .udp_send("u2", "127.0.0.1:40060", dns)
                .udp_send("u3", "127.0.0.1:40060", dns)
                .udp_send("v1", "127.0.0.1:40061", dns)
                .udp_send("direct", "127.0.0.1:40062", ep)
                .tcp_connect("w", "w", Some("127.0.0.1:41060"), web, Some("ping"))
                .tcp_close("w")
                .iptables_save("counters"),
        )
        .expect("lab run");

    let mut sim = Sim::new(&[KUBE_NAT]);
    sim.udp_listen(ep, true);
    let mut conn = SimTcp {
        client: sa("127.0.0.1:41060"),
        to: sa(web),
        server: None,
        peer: None,
    };
    let tcp_frames: Vec<_> = frames(&run)
        .into_iter()
        .filter(|(_, f)| f.protocol() == sim_core::packet::IPPROTO_TCP)
        .collect();
    for label in ["u1", "u2", "u3", "v1", "direct"] {
        let k = run.udp(label);
        let kr = k.reply.as_ref().expect("answered");
        let s = sim.udp_send(
            at(k.sent_at_ms),
            at(kr.at_ms),
            sa(k.from.as_deref().expect("bound")),
            sa(&k.to),
            &k.payload,
        );
        assert_eq!(s.server.map(|x| x.to_string()), Some(kr.server.clone()));
    }
    for (t, f) in &tcp_frames {
        sim.tcp_segment(*t, f, &mut conn)
            .unwrap_or_else(|| panic!("a frame of another connection: {f}"));
    }
    assert_eq!(conn.server, Some(sa("127.0.0.2:8080")));

    let k = assert_same_nat_counters(&run, &sim);
    // Not vacuous: the kernel's DNAT rules counted one packet per flow.
    let hits = |needle: &str| {
        k.iter()
            .find(|l| l.contains(needle))
            .map(|l| split_counters(l).0)
            .unwrap_or_else(|| panic!("no line with {needle}"))
    };
    assert_eq!(
        hits("--to-destination 127.0.0.2:5353").map(|c| c.0),
        Some(2)
    );
    assert_eq!(
        hits("--to-destination 127.0.0.2:8080").map(|c| c.0),
        Some(1)
    );
    assert_eq!(hits(":PREROUTING ACCEPT"), Some((0, 0)));
}

/// Case 5: kube-proxy's REJECT for a service without endpoints (filter OUTPUT, `--reject-with
/// icmp-port-unreachable`). In both the datagram goes nowhere (on the kernel `sendto` fails
/// with EPERM: REJECT answers, then drops, in OUTPUT), the client is sent an ICMP port
/// unreachable from the service address quoting the datagram, no entry is left and no event
/// is sent (the rejected packet's entry was never confirmed; the ICMP error matches no entry),
/// and the filter counters count the same packets.
#[test]
fn reject_matches_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("reject_matches_the_kernel") else {
        return;
    };
    let client = "127.0.0.1:40050";
    let svc = "127.96.0.30:53";
    let run = lab
        .run(
            &Scenario::new()
                .rules(&format!("{KUBE_FILTER_REJECT}{KUBE_NAT}"))
                .capture(true)
                .udp_send_wait("rejected", Some(client), svc, 100)
                .conntrack("entries", &["-L"])
                .iptables_save("counters"),
        )
        .expect("lab run");
    let k = run.udp("rejected");
    assert_eq!(k.error.as_deref(), Some("EPERM"), "{k:?}");
    assert!(k.reply.is_none());

    let mut sim = Sim::new(&[KUBE_FILTER_REJECT, KUBE_NAT]);
    let s = sim.udp_send(
        at(k.sent_at_ms),
        at(k.sent_at_ms),
        sa(client),
        sa(svc),
        &k.payload,
    );
    assert_eq!(
        s.fate,
        Fate::Rejected {
            table: Table::Filter,
            hook: Hook::Output
        }
    );
    assert!(s.server.is_none());
    // The ICMP error on lo (the only frame) is what nfsim delivered to the client.
    let k_frames: Vec<Packet> = frames(&run).into_iter().map(|(_, p)| p).collect();
    let show = |ps: &[Packet]| ps.iter().map(|p| p.to_string()).collect::<Vec<_>>();
    assert_eq!(
        show(&k_frames),
        vec![format!(
            "icmp 127.96.0.30 -> 127.0.0.1 unreachable code=3 (udp {client} -> {svc})"
        )]
    );
    assert_eq!(show(&k_frames), show(&s.to_client));

    assert!(run.conntrack_entries("entries").is_empty());
    assert!(sim.list(at(run.step("entries").at_ms)).is_empty());
    same_events(&run.event_lines(), &sim.events);

    let save = &run.output("counters").stdout;
    for table in ["filter", "nat"] {
        let d = diff_counters(&save_table(save, table), &sim.save_table(table), false);
        assert!(d.is_empty(), "{table} counters differ:\n{}", d.join("\n"));
    }
}

/// Case 5, bytes: the filter counters of [`reject_matches_the_kernel`] with their byte counts.
/// The ICMP error the kernel sends quotes the whole offending datagram (`icmp_send` copies up
/// to 576 bytes of it), so its length is 20 + 8 + the datagram's.
#[test]
fn reject_byte_counters_match_the_kernel() {
    let Some(lab) = kernel::lab_or_skip("reject_byte_counters_match_the_kernel") else {
        return;
    };
    let client = "127.0.0.1:40051";
    let svc = "127.96.0.30:53";
    let run = lab
        .run(
            &Scenario::new()
                .rules(KUBE_FILTER_REJECT)
                .capture(true)
                .udp_send_wait("rejected", Some(client), svc, 100)
                .iptables_save("counters"),
        )
        .expect("lab run");
    let k = run.udp("rejected");
    let mut sim = Sim::new(&[KUBE_FILTER_REJECT]);
    let s = sim.udp_send(
        at(k.sent_at_ms),
        at(k.sent_at_ms),
        sa(client),
        sa(svc),
        &k.payload,
    );
    let k_frames: Vec<Packet> = frames(&run).into_iter().map(|(_, p)| p).collect();
    assert_eq!(
        texts(&k_frames),
        texts(&s.to_client),
        "the ICMP error, with its length"
    );
    let save = &run.output("counters").stdout;
    let d = diff_counters(&save_table(save, "filter"), &sim.save_table("filter"), true);
    assert!(d.is_empty(), "filter counters differ:\n{}", d.join("\n"));
}

/// KUBE_NAT after the `web` endpoint moved from 127.0.0.2 to 127.0.0.3 (the old pod removed).
fn kube_nat_moved() -> String {
    KUBE_NAT.replace(
        "-j DNAT --to-destination 127.0.0.2:8080",
        "-j DNAT --to-destination 127.0.0.3:8080",
    )
}

/// What nfsim does at a step of [`replay_steps`] (`None`: compare the listings there).
type StepAction<'a> = &'a dyn Fn(&mut Sim, SimTime);

/// Replays the kernel's frames into `sim` up to the instant of each step of `steps`, in
/// order, running the step's action on `sim` there; a frame belongs to the connection of
/// `conns` whose phase (the index of the first step after which it is replayed) it is in.
/// Returns the kernel's and nfsim's `conntrack -L` at each listing step.
fn replay_steps(
    run: &LabRun,
    sim: &mut Sim,
    conns: &mut [(usize, SimTcp)],
    steps: &[(&str, Option<StepAction<'_>>)],
    from: SimTime,
) -> Vec<(String, Vec<CtEntry>, Vec<CtEntry>)> {
    let mut pending = frames(run)
        .into_iter()
        .filter(|(t, _)| *t > from)
        .peekable();
    let mut out = Vec::new();
    for (i, (label, action)) in steps.iter().enumerate() {
        let t = at(run.step(label).at_ms);
        while let Some((ft, f)) = pending.next_if(|(ft, _)| *ft <= t) {
            let c = conns
                .iter_mut()
                .rev()
                .find(|(phase, _)| *phase <= i)
                .map(|(_, c)| c)
                .expect("a connection for every phase");
            sim.tcp_segment(ft, &f, c)
                .unwrap_or_else(|| panic!("a frame of no connection: {f}"));
        }
        match action {
            Some(a) => a(sim, t),
            None => out.push((label.to_string(), run.conntrack_entries(label), sim.list(t))),
        }
    }
    out
}

fn tcp_conn(client: &str, to: &str) -> SimTcp {
    SimTcp {
        client: sa(client),
        to: sa(to),
        server: None,
        peer: None,
    }
}

/// Case 7: a SYN on a TIME_WAIT (server closed first) or a CLOSE entry (client reset) after
/// the Service's endpoint moved: the kernel kills the entry and makes a new one through the
/// new rules (`nf_conntrack_tcp_packet`'s reopen, -NF_REPEAT), so the second connection
/// from the same client port reaches the new endpoint. nfsim, given the same segments, must
/// agree at every listing and in the events; and nfsim given only the kernel's listing
/// taken before the SYN (the entry loaded, as `trace`/`replay --conntrack` load it) must
/// too.
#[test]
fn a_syn_on_a_time_wait_or_close_entry_reopens_to_the_new_endpoint_like_the_kernel() {
    let Some(lab) = kernel::lab_or_skip(
        "a_syn_on_a_time_wait_or_close_entry_reopens_to_the_new_endpoint_like_the_kernel",
    ) else {
        return;
    };
    let moved = kube_nat_moved();
    for (case, port) in [("time-wait", "41020"), ("close", "41021")] {
        let client = format!("127.0.0.1:{port}");
        let mut sc = Scenario::new()
            .rules(KUBE_NAT)
            .capture(true)
            .tcp_listen("127.0.0.2:8080", false)
            .tcp_listen("127.0.0.3:8080", true)
            .tcp_connect("first", "c", Some(&client), "127.96.0.20:80", Some("hello"))
            .conntrack("established", &["-L"]);
        sc = if case == "time-wait" {
            sc.tcp_close_server("127.0.0.2:8080").tcp_close("c")
        } else {
            sc.tcp_reset("c")
        };
        let run = lab
            .run(
                &sc.conntrack("closed", &["-L"])
                    .iptables_restore("moved", &moved, false)
                    .conntrack("before-syn", &["-L"])
                    .tcp_connect(
                        "second",
                        "c2",
                        Some(&client),
                        "127.96.0.20:80",
                        Some("again"),
                    )
                    .conntrack("reopened", &["-L"]),
            )
            .expect("lab run");
        let second = run.tcp("second");
        assert!(second.connected, "{case}: {second:?}");
        assert_eq!(
            second.reply.as_ref().map(|r| r.server.as_str()),
            Some("127.0.0.3:8080"),
            "{case}: the kernel's new endpoint"
        );
        let closed = &run.conntrack_entries("closed");
        let want = if case == "time-wait" {
            "TIME_WAIT"
        } else {
            "CLOSE"
        };
        assert_eq!(closed[0].state.as_deref(), Some(want), "{case}: {closed:?}");

        // nfsim, all segments.
        let mut sim = Sim::new(&[KUBE_NAT]);
        let restore = |s: &mut Sim, _t: SimTime| {
            s.ns.restore(&moved, false).expect("the moved rules load");
        };
        let mut conns = [
            (0, tcp_conn(&client, "127.96.0.20:80")),
            (4, tcp_conn(&client, "127.96.0.20:80")),
        ];
        let lists = replay_steps(
            &run,
            &mut sim,
            &mut conns,
            &[
                ("established", None),
                ("closed", None),
                ("moved", Some(&restore)),
                ("before-syn", None),
                ("reopened", None),
            ],
            SimTime::ZERO,
        );
        for (label, k, s) in &lists {
            same_entries(&format!("{case} {label}"), k, s, 1);
        }
        assert_eq!(conns[1].1.server, Some(sa("127.0.0.3:8080")), "{case}");
        same_events(&run.event_lines(), &sim.events);

        // nfsim from the kernel's listing before the SYN, with the moved rules.
        let mut sim = Sim::new(&[&moved]);
        let t0 = at(run.step("before-syn").at_ms);
        let listing = &run.output("before-syn").stdout;
        let entries = sim_conntrack::parse_listing(listing).expect("the kernel's listing parses");
        let report = sim_conntrack::load_listing(
            sim.ns.conntrack_mut(),
            t0,
            &entries,
            sim_core::SimDuration::from_secs(60),
        )
        .expect("the kernel's listing loads");
        assert_eq!(
            report.close_rst_assumed,
            usize::from(case == "close"),
            "{case}: {report}"
        );
        sim.ns.drain_conntrack_events();
        let mut conns = [(0, tcp_conn(&client, "127.96.0.20:80"))];
        let lists = replay_steps(&run, &mut sim, &mut conns, &[("reopened", None)], t0);
        for (label, k, s) in &lists {
            same_entries(&format!("{case} loaded {label}"), k, s, 1);
        }
        assert_eq!(
            conns[0].1.server,
            Some(sa("127.0.0.3:8080")),
            "{case} loaded"
        );
    }
}

/// Case 8: data the server never acknowledges (its segments dropped in raw OUTPUT, before
/// conntrack sees them): the kernel's entry drops from ESTABLISHED's 5 days to
/// `nf_conntrack_tcp_timeout_unacknowledged` (set to 200 here), and once the client has
/// retransmitted `nf_conntrack_tcp_max_retrans` (3) times, to
/// `nf_conntrack_tcp_timeout_max_retrans` (set to 100). nfsim, given the same segments and
/// sysctls, must agree at each listing.
#[test]
fn unacknowledged_data_and_retransmissions_cap_the_timeout_like_the_kernel() {
    let Some(lab) = kernel::lab_or_skip(
        "unacknowledged_data_and_retransmissions_cap_the_timeout_like_the_kernel",
    ) else {
        return;
    };
    const DROP_SERVER: &str = "\
*raw
:PREROUTING ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A OUTPUT -s 127.0.0.2/32 -p tcp -m tcp --sport 8080 -j DROP
COMMIT
";
    let sysctls = [
        (
            "net.netfilter.nf_conntrack_tcp_timeout_unacknowledged",
            "200",
        ),
        ("net.netfilter.nf_conntrack_tcp_timeout_max_retrans", "100"),
        ("net.netfilter.nf_conntrack_tcp_max_retrans", "3"),
    ];
    let mut sc = Scenario::new();
    for (k, v) in sysctls {
        sc = sc.sysctl(k, v);
    }
    let run = lab
        .run(
            &sc.rules(KUBE_NAT)
                .capture(true)
                .tcp_listen("127.0.0.2:8080", false)
                .tcp_connect(
                    "c",
                    "c",
                    Some("127.0.0.1:41030"),
                    "127.96.0.20:80",
                    Some("hello"),
                )
                .conntrack("established", &["-L"])
                .iptables_restore("server-dropped", DROP_SERVER, true)
                .tcp_send("unanswered", "c", "never acknowledged")
                .conntrack("unacked", &["-L"])
                .sleep_ms(3500)
                .conntrack("retransmitted", &["-L"]),
        )
        .expect("lab run");
    let secs = |label: &str| {
        run.conntrack_entries(label)[0]
            .timeout_secs
            .unwrap_or_else(|| panic!("{label}: no timeout"))
    };
    assert!(
        secs("established") > 400_000,
        "{:?}",
        run.conntrack_entries("established")
    );
    assert!(
        secs("unacked") <= 200,
        "{:?}",
        run.conntrack_entries("unacked")
    );
    assert!(
        secs("retransmitted") <= 100,
        "{:?}",
        run.conntrack_entries("retransmitted")
    );

    let mut sim = Sim::new(&[KUBE_NAT]);
    for (k, v) in sysctls {
        sim.ns
            .conntrack_mut()
            .sysctls_mut()
            .set(k, v)
            .expect("nfsim takes the sysctl");
    }
    let restore = |s: &mut Sim, _t: SimTime| {
        s.ns.restore(DROP_SERVER, true).expect("the raw rule loads");
    };
    let mut conns = [(0, tcp_conn("127.0.0.1:41030", "127.96.0.20:80"))];
    let lists = replay_steps(
        &run,
        &mut sim,
        &mut conns,
        &[
            ("established", None),
            ("server-dropped", Some(&restore)),
            ("unacked", None),
            ("retransmitted", None),
        ],
        SimTime::ZERO,
    );
    for (label, k, s) in &lists {
        same_entries(label, k, s, 1);
    }
}
