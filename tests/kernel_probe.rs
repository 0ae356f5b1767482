//! # A real node's state, probe for probe (issue #22's proof)
//!
//! A kube-proxy-shaped node is built on the real kernel, in a private `unshare -n` namespace
//! (the kernel lab, tests/support/kernel.rs) with two TUN links the test drives by hand:
//! `eth0` (192.168.0.12/24, default route via 192.168.0.1: the network, other nodes' pods
//! 10.244.1.0/24 behind it) and `cni0` (10.244.2.1/24: this node's pods). Every packet is
//! written raw into a link, so the kernel receives it as a node receives a pod's or the
//! network's packet, and what the kernel forwards or answers is read back from the links.
//!
//! ## The node's history
//!
//! 1. Rules of epoch A (iptables-restore, kube-proxy iptables mode: `web` 10.96.0.20:80/tcp
//!    with NodePort 30080 → 10.244.1.7:8080; `kube-dns` 10.96.0.10:53/udp → 10.244.1.8:53;
//!    `sticky` 10.96.0.30:80/tcp, ClientIP affinity → 10.244.1.9:80; `nodns`
//!    10.96.0.40:53/udp without endpoints (filter REJECT); a mangle `CONNMARK` on statsd
//!    traffic from `cni0`). Traffic so the table holds every state: TCP ESTABLISHED,
//!    TIME_WAIT, CLOSE (client RST), CLOSE_WAIT, SYN_SENT; UDP unreplied, replied, assured
//!    (a packet more than 2 s after creation); ICMP echo replied and unreplied; a marked UDP
//!    flow; masqueraded NodePort connections; a client pinned by `-m recent`.
//! 2. Epoch B (`iptables-restore --noflush`, as kube-proxy writes): `web` scales to
//!    10.244.2.5, 10.244.1.7, 10.244.2.6; `kube-dns` to 10.244.2.7, 10.244.1.8; `sticky` to
//!    10.244.2.8, 10.244.1.9. More traffic (random picks, a second pinned client).
//! 3. Epoch C, the endpoint removal (`--noflush`, `-X` of the removed chains): 10.244.1.7
//!    leaves `web`, 10.244.1.8 leaves `kube-dns`.
//! 4. The node's state is taken: `iptables-save -c`, `conntrack -L -o extended` (with
//!    `nf_conntrack_timestamp=1`, so each line carries its age), `/proc/net/xt_recent/*`
//!    and `jiffies`, the `net.netfilter` sysctls (`sysctl net.netfilter`: `sysctl -a`'s
//!    lines), `ip -j addr`, `ip -j route`.
//! 5. The probes ([`probes`]), each followed by `conntrack -L -o extended`; `conntrack -E`
//!    records every event.
//!
//! The lab's `cni0` is a routed link where a node's is a bridge: a pod's packet DNAT'd to a pod
//! on the same node is routed back out of the link it came in by, where a bridge hairpins it
//! without routing. The kernel then runs its ICMP redirect bookkeeping (`ip_forward` →
//! `ip_rt_send_redirect`), which stamps the client's `inet_peer` (`rate_last`) and so holds
//! back the next ICMP error to that client for `icmp_ratelimit` (`inet_peer_xrlim_allow`):
//! seen here as a REJECT without its port unreachable 40 ms after such a packet. nfsim
//! models the bridge, so the lab turns `send_redirects` off.
//!
//! ## What is compared
//!
//! nfsim gets only the files of step 4 — through the library calls `nfsim trace --rules …
//! --conntrack … --recent … --sysctls … --interfaces … --routes … --after …` makes ([`NodeSpec`], [`load_saved_state`]),
//! a fresh copy per probe at the probe's own time after the snapshot — and must agree with the
//! kernel on every probe: the packets emitted (link, addresses, ports, flags, sequence
//! numbers, TTL, length), the entry the probe used or made (state, flags, both tuples, mark,
//! seconds left within 1 s) and the `conntrack -E` events it caused. Where the kernel chose
//! at random (a `statistic` cascade), the kernel's endpoint must be one of nfsim's
//! `--all-branches` outcomes, each with the exact probability, and the comparison follows
//! that branch. `MASQUERADE --random-fully` picks a random port: that port is compared as
//! "from the range nfsim would draw from" (1024–65535), everything else exactly.
//!
//! Then the same probes, in one sequence, through `nfsim replay` (a pcap written from the
//! packets injected, with `--conntrack --recent --sysctls --interfaces --routes --after` from
//! the same files and
//! `--conntrack-at` at each of the kernel's listings): each listing equals the kernel's.
//!
//! ## Which probe covers which case
//!
//! | probe | case |
//! |---|---|
//! | `est-data` | entry kept: client data on ESTABLISHED to a removed endpoint still goes there |
//! | `est-late-data` | late answer: the removed endpoint's data on its ESTABLISHED entry, un-DNAT'd |
//! | `est-rst` | kept: client RST on ESTABLISHED → CLOSE |
//! | `est-syn` | kept: a SYN on ESTABLISHED is ignored (state unchanged) |
//! | `tw-syn` | reopened: SYN on TIME_WAIT → old entry destroyed, new one through today's rules |
//! | `tw-ack` | kept: a stray ACK on TIME_WAIT |
//! | `close-syn` | reopened: SYN on CLOSE (the client's RST) |
//! | `close-late-data` | late answer: the server's data after the RST (CLOSE) |
//! | `cw-fin` | kept: the server's FIN on CLOSE_WAIT → LAST_ACK |
//! | `ss-syn` | kept: SYN retransmission on SYN_SENT, to the removed endpoint |
//! | `ss-synack` | late answer: the removed endpoint's SYN-ACK on SYN_SENT |
//! | `pickup-ack` | picked up mid-stream: an ACK without entry, through the rules |
//! | `pickup-answer` | picked up mid-stream / late answer: a server's segment without entry |
//! | `np-data` | kept: masqueraded NodePort ESTABLISHED, client data |
//! | `np-late-data` | late answer: on the masqueraded NodePort entry, un-SNAT'd and un-DNAT'd |
//! | `np-new` | masqueraded NodePort, new connection (random endpoint, random port) |
//! | `web-new` | new connection, random endpoint among the two left |
//! | `no-port` | no service port: ClusterIP on a port no Service has, forwarded untranslated |
//! | `nodns` | no endpoints: REJECT, the kernel's ICMP port unreachable |
//! | `udp-unreplied` | kept: UDP unreplied to the removed endpoint |
//! | `udp-late-answer` | late answer: the removed endpoint answers an unreplied UDP entry |
//! | `udp-young` | UDP replied less than 2 s ago: not ASSURED by the next packet |
//! | `udp-old` | UDP replied more than 2 s ago: ASSURED by the next packet |
//! | `udp-assured` | kept: UDP ASSURED to the removed endpoint |
//! | `udp-new` | new UDP flow, to the one endpoint left |
//! | `icmp-echo` | ICMP: another echo on a replied entry |
//! | `icmp-late-reply` | ICMP late answer: the echo reply on an unreplied entry |
//! | `mark-kept` | marked: a packet on a `CONNMARK`ed entry keeps mark=256 |
//! | `mark-new` | marked: a new flow gets mark=256 from the rule |
//! | `sticky-a` | affinity: a client pinned (epoch A) goes to its endpoint |
//! | `sticky-b` | affinity: a client pinned in epoch B goes to its endpoint |
//! | `sticky-new` | affinity: a new client, random endpoint |
//!
//! The test skips (prints `skipped: …` and passes) where the lab cannot run: not root, no
//! `unshare -n`, no `/dev/net/tun`, or a program it calls missing (`unshare`, `python3`, `ip`,
//! `sysctl`, `iptables`, `iptables-restore`, `iptables-save`, `conntrack`, `nft`).

#[path = "support/kernel.rs"]
mod kernel;

use kernel::{parse_ct_line, CtEntry, LabRun, RawPacket, Scenario};
use nfsim::explain::{load_saved_state, NodeSpec, RecentClock, SavedState};
use sim_conntrack::Filter;
use sim_core::{Packet, SimDuration, SimTime};
use sim_netfilter::netns::{Egress, Netns};
use std::path::{Path, PathBuf};

// ---------------------------------------------------------------------------------------------
// The node
// ---------------------------------------------------------------------------------------------

const NODE_ADDR: &str = "192.168.0.12";
const CLUSTER_CIDR: &str = "10.244.0.0/16";
const HZ_FALLBACK: u32 = 250;

/// One Service of the rules: its chains, address, port and endpoints.
struct Svc {
    /// `ns/name:port`.
    name: &'static str,
    svc: &'static str,
    /// The `KUBE-EXT-…` chain and NodePort, for a NodePort Service.
    ext: Option<(&'static str, u16)>,
    ip: &'static str,
    port: u16,
    proto: &'static str,
    affinity: bool,
    /// `(KUBE-SEP chain, ip, port)`.
    eps: Vec<(&'static str, &'static str, u16)>,
}

const WEB_A: (&str, &str, u16) = ("KUBE-SEP-UW2SSHHNZUNCPCGO", "10.244.2.5", 8080);
const WEB_B: (&str, &str, u16) = ("KUBE-SEP-RHMJJ7Y5EB6XHT2O", "10.244.1.7", 8080);
const WEB_C: (&str, &str, u16) = ("KUBE-SEP-6BGWBHYFVCKEDQCU", "10.244.2.6", 8080);
const DNS_A: (&str, &str, u16) = ("KUBE-SEP-PBFVJUGNX7I4VSY2", "10.244.2.7", 53);
const DNS_B: (&str, &str, u16) = ("KUBE-SEP-CEYPGFB7VCORONY3", "10.244.1.8", 53);
const STK_A: (&str, &str, u16) = ("KUBE-SEP-XT4AUMBMMSSVOVWX", "10.244.2.8", 80);
const STK_B: (&str, &str, u16) = ("KUBE-SEP-Q3LNKVKD2OTVWGNW", "10.244.1.9", 80);

/// The Services of an epoch (`a`, `b`, `c`: see the module documentation).
fn services(epoch: char) -> Vec<Svc> {
    let (web, dns, sticky) = match epoch {
        'a' => (vec![WEB_B], vec![DNS_B], vec![STK_B]),
        'b' => (
            vec![WEB_A, WEB_B, WEB_C],
            vec![DNS_A, DNS_B],
            vec![STK_A, STK_B],
        ),
        _ => (vec![WEB_A, WEB_C], vec![DNS_A], vec![STK_A, STK_B]),
    };
    vec![
        Svc {
            name: "default/web:http",
            svc: "KUBE-SVC-LOLE4ISW44XBNF3G",
            ext: Some(("KUBE-EXT-LOLE4ISW44XBNF3G", 30080)),
            ip: "10.96.0.20",
            port: 80,
            proto: "tcp",
            affinity: false,
            eps: web,
        },
        Svc {
            name: "kube-system/kube-dns:dns",
            svc: "KUBE-SVC-TCOU7JCQXEZGVUNU",
            ext: None,
            ip: "10.96.0.10",
            port: 53,
            proto: "udp",
            affinity: false,
            eps: dns,
        },
        Svc {
            name: "default/sticky:http",
            svc: "KUBE-SVC-7SQDGKPGTZIUWTVX",
            ext: None,
            ip: "10.96.0.30",
            port: 80,
            proto: "tcp",
            affinity: true,
            eps: sticky,
        },
    ]
}

/// kube-proxy's probability for the `i`-th of `n` endpoints (`computeProbability`: `%0.10f`).
fn probability(i: usize, n: usize) -> String {
    format!("{:.10}", 1.0 / (n - i) as f64)
}

/// The nat and filter tables of an epoch as kube-proxy restores them: only its own chains
/// (declared, so flushed), with `-X` for the chains gone since `before`. `full` adds the
/// built-in chains and their jumps and the mangle table (the first load, without --noflush).
fn rules(epoch: char, before: Option<char>, full: bool) -> String {
    let svcs = services(epoch);
    let mut chains = vec![
        "KUBE-MARK-MASQ".to_string(),
        "KUBE-NODEPORTS".into(),
        "KUBE-POSTROUTING".into(),
        "KUBE-SERVICES".into(),
    ];
    let mut body = vec![
        "-A KUBE-MARK-MASQ -j MARK --or-mark 0x4000".to_string(),
        "-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN".into(),
        "-A KUBE-POSTROUTING -j MARK --xor-mark 0x4000".into(),
        "-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully".into(),
    ];
    let mut services_rules = Vec::new();
    for s in &svcs {
        let c = format!("\"{} cluster IP\"", s.name);
        services_rules.push(format!(
            "-A KUBE-SERVICES -d {}/32 -p {p} -m comment --comment {c} -m {p} --dport {} -j {}",
            s.ip,
            s.port,
            s.svc,
            p = s.proto
        ));
        chains.push(s.svc.into());
        body.push(format!(
            "-A {} ! -s {CLUSTER_CIDR} -d {}/32 -p {p} -m comment --comment {c} -m {p} --dport {} -j KUBE-MARK-MASQ",
            s.svc, s.ip, s.port, p = s.proto
        ));
        if let Some((ext, np)) = s.ext {
            chains.push(ext.into());
            body.push(format!(
                "-A KUBE-NODEPORTS -p {p} -m comment --comment \"{}\" -m {p} --dport {np} -j {ext}",
                s.name,
                p = s.proto
            ));
            body.push(format!(
                "-A {ext} -m comment --comment \"masquerade traffic for {} external destinations\" -j KUBE-MARK-MASQ",
                s.name
            ));
            body.push(format!("-A {ext} -j {}", s.svc));
        }
        let n = s.eps.len();
        if s.affinity {
            for (sep, ip, port) in &s.eps {
                body.push(format!(
                    "-A {} -m comment --comment \"{} -> {ip}:{port}\" -m recent --rcheck --seconds 10800 --reap --name {sep} --mask 255.255.255.255 --rsource -j {sep}",
                    s.svc, s.name
                ));
            }
        }
        for (i, (sep, ip, port)) in s.eps.iter().enumerate() {
            let stat = if i + 1 < n {
                format!(
                    " -m statistic --mode random --probability {}",
                    probability(i, n)
                )
            } else {
                String::new()
            };
            body.push(format!(
                "-A {} -m comment --comment \"{} -> {ip}:{port}\"{stat} -j {sep}",
                s.svc, s.name
            ));
            chains.push(sep.to_string());
            body.push(format!(
                "-A {sep} -s {ip}/32 -m comment --comment \"{}\" -j KUBE-MARK-MASQ",
                s.name
            ));
            let recent = if s.affinity {
                format!(" -m recent --set --name {sep} --mask 255.255.255.255 --rsource")
            } else {
                String::new()
            };
            body.push(format!(
                "-A {sep} -p {p} -m comment --comment \"{}\"{recent} -m {p} -j DNAT --to-destination {ip}:{port}",
                s.name,
                p = s.proto
            ));
        }
    }
    services_rules.push("-A KUBE-SERVICES -m comment --comment \"kubernetes service nodeports; NOTE: this must be the last rule in this chain\" -m addrtype --dst-type LOCAL -j KUBE-NODEPORTS".into());
    let mut gone = Vec::new();
    if let Some(b) = before {
        for s in services(b) {
            for (sep, ..) in s.eps {
                if !chains.iter().any(|c| c == sep) {
                    gone.push(format!("-X {sep}"));
                }
            }
        }
    }
    let mut nat = String::from("*nat\n");
    if full {
        for c in ["PREROUTING", "INPUT", "OUTPUT", "POSTROUTING"] {
            nat.push_str(&format!(":{c} ACCEPT [0:0]\n"));
        }
    }
    // The chains to delete are declared too, so flushed first: as kube-proxy writes them
    // (nft refuses to delete a chain that still has rules: EBUSY).
    for c in chains
        .iter()
        .map(String::as_str)
        .chain(gone.iter().map(|g| g.trim_start_matches("-X ")))
    {
        nat.push_str(&format!(":{c} - [0:0]\n"));
    }
    if full {
        nat.push_str(
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n",
        );
        nat.push_str(
            "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n",
        );
        nat.push_str("-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n");
    }
    for l in body.iter().chain(&services_rules).chain(&gone) {
        nat.push_str(l);
        nat.push('\n');
    }
    nat.push_str("COMMIT\n");
    let mut filter = String::from("*filter\n");
    if full {
        for c in ["INPUT", "FORWARD", "OUTPUT"] {
            filter.push_str(&format!(":{c} ACCEPT [0:0]\n"));
        }
    }
    for c in [
        "KUBE-EXTERNAL-SERVICES",
        "KUBE-FORWARD",
        "KUBE-NODEPORTS",
        "KUBE-SERVICES",
    ] {
        filter.push_str(&format!(":{c} - [0:0]\n"));
    }
    if full {
        filter.push_str(concat!(
            "-A INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n",
            "-A FORWARD -m comment --comment \"kubernetes forwarding rules\" -j KUBE-FORWARD\n",
            "-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n",
            "-A FORWARD -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES\n",
            "-A OUTPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n",
        ));
    }
    filter.push_str(concat!(
        "-A KUBE-FORWARD -m conntrack --ctstate INVALID -j DROP\n",
        "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding rules\" -m mark --mark 0x4000/0x4000 -j ACCEPT\n",
        "-A KUBE-FORWARD -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\n",
        "-A KUBE-SERVICES -d 10.96.0.40/32 -p udp -m comment --comment \"default/nodns:dns has no endpoints\" -m udp --dport 53 -j REJECT --reject-with icmp-port-unreachable\n",
        "COMMIT\n",
    ));
    let mut out = nat + &filter;
    if full {
        out.push_str(concat!(
            "*mangle\n",
            ":PREROUTING ACCEPT [0:0]\n",
            "-A PREROUTING -i cni0 -p udp -m udp --dport 8125 -m comment --comment \"statsd egress\" -j CONNMARK --set-xmark 0x100/0x100\n",
            "COMMIT\n",
        ));
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Packets
// ---------------------------------------------------------------------------------------------

const POD: &str = "10.244.2.9";
const WEB: &str = "10.96.0.20";
const DNS: &str = "10.96.0.10";
const STICKY: &str = "10.96.0.30";
const CLIENT_ISN: u32 = 1000;
const SERVER_ISN: u32 = 5000;
/// How long each injected packet waits for what the kernel sends.
const WAIT_MS: u64 = 15;

fn link_of(src: &str) -> &'static str {
    if src.starts_with("10.244.2.") {
        "cni0"
    } else {
        "eth0"
    }
}

fn tcp(src: &str, sport: u16, dst: &str, dport: u16, flags: &str, seq: u32, ack: u32) -> RawPacket {
    RawPacket {
        proto: "tcp".into(),
        src: src.into(),
        dst: dst.into(),
        sport,
        dport,
        flags: Some(flags.into()),
        seq,
        ack,
        ..RawPacket::default()
    }
}

/// An answer to what an earlier step emitted (addresses filled in by the driver).
fn tcp_reply(flags: &str, seq: u32, ack: u32, len: u16) -> RawPacket {
    RawPacket {
        len,
        ..tcp("0.0.0.0", 0, "0.0.0.0", 0, flags, seq, ack)
    }
}

fn udp(src: &str, sport: u16, dst: &str, dport: u16, len: u16) -> RawPacket {
    RawPacket {
        proto: "udp".into(),
        src: src.into(),
        dst: dst.into(),
        sport,
        dport,
        len,
        ..RawPacket::default()
    }
}

fn icmp(src: &str, dst: &str, icmp_type: u8, id: u16, seq: u16) -> RawPacket {
    RawPacket {
        proto: "icmp".into(),
        src: src.into(),
        dst: dst.into(),
        icmp_type: Some(icmp_type),
        icmp_id: id,
        icmp_seq: seq,
        len: 8,
        ..RawPacket::default()
    }
}

/// A scenario under construction, with helpers for whole exchanges.
struct Build(Scenario);

impl Build {
    fn send(self, label: &str, p: RawPacket) -> Build {
        let dev = link_of(&p.src);
        Build(self.0.inject(label, dev, p, None, WAIT_MS))
    }
    fn answer(self, label: &str, to: &str, p: RawPacket) -> Build {
        Build(self.0.inject(label, "eth0", p, Some(to), WAIT_MS))
    }
    /// A TCP handshake `src:sport → dst:dport` (labels `{id}-syn`, `-synack`, `-ack`).
    fn handshake(self, id: &str, src: &str, sport: u16, dst: &str, dport: u16) -> Build {
        let c = |f: &str, s, a| tcp(src, sport, dst, dport, f, s, a);
        self.send(&format!("{id}-syn"), c("S", CLIENT_ISN, 0))
            .answer(
                &format!("{id}-synack"),
                &format!("{id}-syn"),
                tcp_reply("SA", SERVER_ISN, CLIENT_ISN + 1, 0),
            )
            .send(&format!("{id}-ack"), c("A", CLIENT_ISN + 1, SERVER_ISN + 1))
    }
    /// A handshake, then 10 bytes from the client, 20 back, and the client's ACK.
    fn established(self, id: &str, src: &str, sport: u16, dst: &str, dport: u16) -> Build {
        let c = |f: &str, s, a, len| RawPacket {
            len,
            ..tcp(src, sport, dst, dport, f, s, a)
        };
        self.handshake(id, src, sport, dst, dport)
            .send(
                &format!("{id}-req"),
                c("PA", CLIENT_ISN + 1, SERVER_ISN + 1, 10),
            )
            .answer(
                &format!("{id}-resp"),
                &format!("{id}-syn"),
                tcp_reply("PA", SERVER_ISN + 1, CLIENT_ISN + 11, 20),
            )
            .send(
                &format!("{id}-ack2"),
                c("A", CLIENT_ISN + 11, SERVER_ISN + 21, 0),
            )
    }
    fn udp_query(self, label: &str, src: &str, sport: u16, dst: &str, dport: u16) -> Build {
        self.send(label, udp(src, sport, dst, dport, 30))
    }
    fn udp_answer(self, label: &str, to: &str) -> Build {
        let p = udp("0.0.0.0", 0, "0.0.0.0", 0, 60);
        self.answer(label, to, p)
    }
}

/// The TCP sequence state of the setup connections, for the probes: (client seq, server seq)
/// after `established`.
const EST_CLIENT: u32 = CLIENT_ISN + 11;
const EST_SERVER: u32 = SERVER_ISN + 21;

/// One probe: an injected packet (or an answer to a setup step's emitted packet).
struct Probe {
    label: &'static str,
    packet: RawPacket,
    /// Answer the first packet this setup step made the kernel send.
    reply_to: Option<&'static str>,
    /// The kernel chooses at random for it (a statistic cascade).
    random: bool,
}

fn probe(label: &'static str, packet: RawPacket) -> Probe {
    Probe {
        label,
        packet,
        reply_to: None,
        random: false,
    }
}

fn answer(label: &'static str, to: &'static str, packet: RawPacket) -> Probe {
    Probe {
        label,
        packet,
        reply_to: Some(to),
        random: false,
    }
}

fn random(label: &'static str, packet: RawPacket) -> Probe {
    Probe {
        label,
        packet,
        reply_to: None,
        random: true,
    }
}

/// The probes, in the order they are sent (see the module documentation's table).
fn probes() -> Vec<Probe> {
    let data = |sport, flags: &str, len| RawPacket {
        len,
        ..tcp(POD, sport, WEB, 80, flags, EST_CLIENT, EST_SERVER)
    };
    vec![
        // First, while the young UDP entry is still less than 2 s old.
        probe("udp-young", udp(POD, 50005, DNS, 53, 30)),
        probe("udp-old", udp(POD, 50004, DNS, 53, 30)),
        probe("udp-assured", udp(POD, 50003, DNS, 53, 30)),
        probe("udp-unreplied", udp(POD, 50001, DNS, 53, 30)),
        answer(
            "udp-late-answer",
            "u-unr2",
            udp("0.0.0.0", 0, "0.0.0.0", 0, 60),
        ),
        probe("udp-new", udp(POD, 50021, DNS, 53, 30)),
        probe("nodns", udp(POD, 50020, "10.96.0.40", 53, 30)),
        probe("est-data", data(40001, "PA", 10)),
        answer(
            "est-late-data",
            "t-est2-syn",
            tcp_reply("PA", EST_SERVER, EST_CLIENT, 20),
        ),
        probe("est-rst", data(40003, "R", 0)),
        probe("est-syn", tcp(POD, 40004, WEB, 80, "S", CLIENT_ISN, 0)),
        random(
            "tw-syn",
            tcp(POD, 40011, WEB, 80, "S", CLIENT_ISN + 100_000, 0),
        ),
        probe(
            "tw-ack",
            tcp(POD, 40012, WEB, 80, "A", CLIENT_ISN + 2, SERVER_ISN + 2),
        ),
        random(
            "close-syn",
            tcp(POD, 40021, WEB, 80, "S", CLIENT_ISN + 100_000, 0),
        ),
        answer(
            "close-late-data",
            "t-close2-syn",
            tcp_reply("PA", SERVER_ISN + 1, CLIENT_ISN + 1, 20),
        ),
        answer(
            "cw-fin",
            "t-cw1-syn",
            tcp_reply("FA", SERVER_ISN + 1, CLIENT_ISN + 2, 0),
        ),
        probe("ss-syn", tcp(POD, 40041, WEB, 80, "S", CLIENT_ISN, 0)),
        answer(
            "ss-synack",
            "t-ss2-syn",
            tcp_reply("SA", SERVER_ISN, CLIENT_ISN + 1, 0),
        ),
        random("pickup-ack", tcp(POD, 40101, WEB, 80, "A", 70_000, 90_000)),
        probe(
            "pickup-answer",
            RawPacket {
                len: 20,
                ..tcp("10.244.1.7", 8080, POD, 40102, "PA", 90_000, 70_000)
            },
        ),
        random("web-new", tcp(POD, 40100, WEB, 80, "S", CLIENT_ISN, 0)),
        probe("no-port", tcp(POD, 40103, WEB, 81, "S", CLIENT_ISN, 0)),
        probe(
            "np-data",
            RawPacket {
                len: 10,
                ..tcp(
                    "192.168.0.50",
                    50001,
                    NODE_ADDR,
                    30080,
                    "PA",
                    EST_CLIENT,
                    EST_SERVER,
                )
            },
        ),
        answer(
            "np-late-data",
            "np2-syn",
            tcp_reply("PA", EST_SERVER, EST_CLIENT, 20),
        ),
        random(
            "np-new",
            tcp("192.168.0.51", 50003, NODE_ADDR, 30080, "S", CLIENT_ISN, 0),
        ),
        probe("icmp-echo", icmp(POD, "10.244.1.50", 8, 7, 2)),
        answer("icmp-late-reply", "i2", icmp("0.0.0.0", "0.0.0.0", 0, 8, 1)),
        probe("mark-kept", udp(POD, 50010, "10.244.1.60", 8125, 30)),
        probe("mark-new", udp(POD, 50011, "10.244.1.60", 8125, 30)),
        probe(
            "sticky-a",
            tcp("10.244.2.20", 41001, STICKY, 80, "S", CLIENT_ISN, 0),
        ),
        probe(
            "sticky-b",
            tcp("10.244.2.21", 41001, STICKY, 80, "S", CLIENT_ISN, 0),
        ),
        random(
            "sticky-new",
            tcp("10.244.2.22", 41001, STICKY, 80, "S", CLIENT_ISN, 0),
        ),
    ]
}

/// The labels of the steps that take the node's state.
const SNAP_CT: &str = "snap-conntrack";
const SNAP_SAVE: &str = "snap-save";
const SNAP_RECENT: &str = "snap-recent";
const SNAP_SYSCTL: &str = "snap-sysctl";
const SNAP_ADDR: &str = "snap-addr";
const SNAP_ROUTE: &str = "snap-route";
/// `jiffies` again after the probes: with the first reading, the kernel's HZ.
const JIFFIES_LATER: &str = "jiffies-later";

/// How kube-proxy loads its rules.
const RESTORE: [&str; 3] = ["iptables-restore", "--noflush", "--counters"];

fn listing_label(probe: &str) -> String {
    format!("ct-{probe}")
}

fn scenario() -> Scenario {
    let c = |sport, f: &str, s, a| tcp(POD, sport, WEB, 80, f, s, a);
    let b = Build(
        Scenario::new()
            .enable_conntrack(false)
            .sysctl("net.ipv6.conf.all.disable_ipv6", "1")
            .sysctl("net.ipv6.conf.default.disable_ipv6", "1")
            .sysctl("net.ipv4.ip_forward", "1")
            .sysctl("net.ipv4.conf.all.rp_filter", "0")
            .sysctl("net.ipv4.conf.default.rp_filter", "0")
            // The lab's cni0 is a routed TUN link, a node's a bridge (see the module doc).
            .sysctl("net.ipv4.conf.all.send_redirects", "0")
            .sysctl("net.ipv4.conf.default.send_redirects", "0")
            .sysctl("net.netfilter.nf_conntrack_timestamp", "1")
            .tun("eth0", &["192.168.0.12/24"])
            .tun("cni0", &["10.244.2.1/24"])
            .route("default via 192.168.0.1 dev eth0")
            .rules(&rules('a', None, true)),
    );
    // Epoch A: the endpoints that will be removed get the long-lived entries.
    let b = b
        .udp_query("u-asr1", POD, 50003, DNS, 53)
        .udp_answer("u-asr1-ans", "u-asr1")
        .udp_query("u-old1", POD, 50004, DNS, 53)
        .udp_answer("u-old1-ans", "u-old1")
        .udp_query("u-unr1", POD, 50001, DNS, 53)
        .udp_query("u-unr2", POD, 50002, DNS, 53)
        .established("t-est1", POD, 40001, WEB, 80)
        .established("t-est2", POD, 40002, WEB, 80)
        .established("t-est3", POD, 40003, WEB, 80)
        .established("t-est4", POD, 40004, WEB, 80);
    let mut b = b;
    for (id, port) in [("t-tw1", 40011), ("t-tw2", 40012)] {
        b = b
            .handshake(id, POD, port, WEB, 80)
            .send(
                &format!("{id}-fin"),
                c(port, "FA", CLIENT_ISN + 1, SERVER_ISN + 1),
            )
            .answer(
                &format!("{id}-finack"),
                &format!("{id}-syn"),
                tcp_reply("FA", SERVER_ISN + 1, CLIENT_ISN + 2, 0),
            )
            .send(
                &format!("{id}-last"),
                c(port, "A", CLIENT_ISN + 2, SERVER_ISN + 2),
            );
    }
    for (id, port) in [("t-close1", 40021), ("t-close2", 40022)] {
        b = b
            .handshake(id, POD, port, WEB, 80)
            .send(&format!("{id}-rst"), c(port, "R", CLIENT_ISN + 1, 0));
    }
    let b = b
        .handshake("t-cw1", POD, 40031, WEB, 80)
        .send("t-cw1-fin", c(40031, "FA", CLIENT_ISN + 1, SERVER_ISN + 1))
        .answer(
            "t-cw1-finack",
            "t-cw1-syn",
            tcp_reply("A", SERVER_ISN + 1, CLIENT_ISN + 2, 0),
        )
        .send("t-ss1-syn", c(40041, "S", CLIENT_ISN, 0))
        .send("t-ss2-syn", c(40042, "S", CLIENT_ISN, 0))
        .established("np1", "192.168.0.50", 50001, NODE_ADDR, 30080)
        .established("np2", "192.168.0.50", 50002, NODE_ADDR, 30080)
        .send("i1", icmp(POD, "10.244.1.50", 8, 7, 1))
        .answer("i1-reply", "i1", icmp("0.0.0.0", "0.0.0.0", 0, 7, 1))
        .send("i2", icmp(POD, "10.244.1.51", 8, 8, 1))
        .udp_query("m1", POD, 50010, "10.244.1.60", 8125)
        .udp_answer("m1-ans", "m1")
        .handshake("s-a", "10.244.2.20", 41000, STICKY, 80);
    // Epoch B: scaled up; random picks.
    let b = Build(b.0.command("epoch-b", &RESTORE, Some(&rules('b', Some('a'), false))))
        .established("t-estb", POD, 40051, WEB, 80)
        .established("np3", "192.168.0.50", 50003, NODE_ADDR, 30080)
        .handshake("s-b", "10.244.2.21", 41000, STICKY, 80);
    // More than 2 s after u-asr1 was made: its next packet makes it ASSURED.
    let b = Build(b.0.sleep_ms(2100))
        .udp_query("u-asr1-again", POD, 50003, DNS, 53)
        .udp_query("u-young1", POD, 50005, DNS, 53)
        .udp_answer("u-young1-ans", "u-young1");
    // Epoch C: the endpoint removal, then the node's state.
    let mut s = b
        .0
        .command("epoch-c", &RESTORE, Some(&rules('c', Some('b'), false)))
        .command(SNAP_SAVE, &["iptables-save", "-c"], None)
        .conntrack(SNAP_CT, &["-L", "-o", "extended"])
        .command(
            SNAP_RECENT,
            &[
                "sh",
                "-c",
                "for f in /proc/net/xt_recent/*; do echo \"== $f\"; cat \"$f\"; done; grep -m1 ^jiffies /proc/timer_list",
            ],
            None,
        )
        .command(SNAP_SYSCTL, &["sysctl", "net.netfilter"], None)
        .command(SNAP_ADDR, &["ip", "-j", "addr"], None)
        .command(SNAP_ROUTE, &["ip", "-j", "route"], None);
    for p in probes() {
        let dev = link_of(&p.packet.src);
        s = s
            .inject(p.label, dev, p.packet, p.reply_to, WAIT_MS)
            .conntrack(&listing_label(p.label), &["-L", "-o", "extended"]);
    }
    s.command(
        JIFFIES_LATER,
        &["grep", "-m1", "^jiffies", "/proc/timer_list"],
        None,
    )
}

// ---------------------------------------------------------------------------------------------
// The node's saved state, as files
// ---------------------------------------------------------------------------------------------

/// The files nfsim is given, and when the table was read.
struct Saved {
    dir: PathBuf,
    rules: String,
    conntrack: String,
    sysctls: String,
    addr: String,
    route: String,
    /// `(list name, file)`.
    recent: Vec<(String, String)>,
    jiffies: u64,
    hz: u32,
    /// When `conntrack -L` read the table (ms of the lab's clock).
    listed_ms: f64,
}

fn path_str(p: &Path) -> String {
    p.to_str().expect("a UTF-8 temporary path").to_string()
}

/// When a command step read the kernel's state: halfway through it.
fn read_at(run: &LabRun, label: &str) -> f64 {
    let s = run.step(label);
    (s.at_ms + s.end_ms) / 2.0
}

fn jiffies_of(text: &str) -> u64 {
    text.lines()
        .find_map(|l| l.strip_prefix("jiffies: "))
        .and_then(|j| j.trim().parse().ok())
        .unwrap_or_else(|| panic!("no jiffies line in {text:?}"))
}

/// Writes the snapshot's outputs to files, as someone copying them off a node would.
fn save_state(run: &LabRun) -> Saved {
    for l in [
        SNAP_SAVE,
        SNAP_CT,
        SNAP_RECENT,
        SNAP_SYSCTL,
        SNAP_ADDR,
        SNAP_ROUTE,
        JIFFIES_LATER,
        "epoch-b",
        "epoch-c",
    ] {
        let c = run.output(l);
        assert_eq!(c.rc, 0, "{l}: {:?} failed: {}", c.argv, c.stderr);
    }
    let dir = std::env::temp_dir().join(format!("nfsim-kernel-probe-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let write = |name: &str, text: &str| {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("writing a state file");
        path_str(&p)
    };
    let recent_text = &run.output(SNAP_RECENT).stdout;
    let mut recent = Vec::new();
    for section in recent_text.split("== ").skip(1) {
        let (head, body) = section.split_once('\n').unwrap_or((section, ""));
        let name = head.rsplit('/').next().unwrap_or(head).to_string();
        let body: String = body
            .lines()
            .filter(|l| !l.starts_with("jiffies"))
            .map(|l| format!("{l}\n"))
            .collect();
        let file = write(&format!("xt_recent.{name}"), &body);
        recent.push((name, file));
    }
    let jiffies = jiffies_of(recent_text);
    // CONFIG_HZ from two readings of jiffies (the nearest of the kernel's choices).
    let later = jiffies_of(&run.output(JIFFIES_LATER).stdout);
    let secs = (read_at(run, JIFFIES_LATER) - read_at(run, SNAP_RECENT)) / 1000.0;
    let rate = (later - jiffies) as f64 / secs;
    let hz = [100u32, 250, 300, 1000]
        .into_iter()
        .min_by(|a, b| {
            (f64::from(*a) - rate)
                .abs()
                .total_cmp(&(f64::from(*b) - rate).abs())
        })
        .unwrap_or(HZ_FALLBACK);
    Saved {
        rules: write("iptables-save-c.txt", &run.output(SNAP_SAVE).stdout),
        conntrack: write("conntrack-L-o-extended.txt", &run.output(SNAP_CT).stdout),
        sysctls: write("sysctl.txt", &run.output(SNAP_SYSCTL).stdout),
        addr: write("ip-addr.json", &run.output(SNAP_ADDR).stdout),
        route: write("ip-route.json", &run.output(SNAP_ROUTE).stdout),
        recent,
        jiffies,
        hz,
        listed_ms: read_at(run, SNAP_CT),
        dir,
    }
}

// ---------------------------------------------------------------------------------------------
// nfsim on the saved state
// ---------------------------------------------------------------------------------------------

/// The node nfsim builds from the saved files, `after_ms` after the table was read, with the
/// random streams of `seed`: what `nfsim trace --rules … --conntrack … --recent …
/// --recent-jiffies … --recent-hz … --sysctls … --interfaces … --routes … --after …` builds.
fn nfsim_node(saved: &Saved, after_ms: f64, seed: u64) -> (NodeSpec, Netns, SimTime) {
    // The node's own interfaces and routes (`--interfaces ip-addr.json --routes
    // ip-route.json`), nothing assumed.
    let real = nfsim::explain::interfaces::RealInterfaces::read(&saved.addr, Some(&saved.route))
        .unwrap_or_else(|e| panic!("nfsim refuses the node's ip -j addr / route: {e}"));
    let node = NodeSpec::parse(NODE_ADDR, 24, None, seed)
        .expect("the node's flags")
        .with_real(real);
    let rules = std::fs::read_to_string(&saved.rules).expect("the saved rules");
    let mut ns = node
        .build(&rules, &saved.rules)
        .unwrap_or_else(|e| panic!("nfsim refuses the node's iptables-save -c: {e}"));
    let loaded = load_saved_state(
        &mut ns,
        &SavedState {
            sysctl_file: Some(&saved.sysctls),
            sysctls: &[],
            conntrack: Some(&saved.conntrack),
            assumed_age: SimDuration::from_secs(60),
            recent: &saved.recent,
            recent_clock: RecentClock {
                now: Some(saved.jiffies),
                hz: saved.hz,
            },
            after: ms(after_ms),
        },
    )
    .unwrap_or_else(|e| panic!("nfsim refuses the node's saved state: {e}"));
    ns.drain_conntrack_events();
    (node, ns, loaded.at)
}

fn ms(v: f64) -> SimDuration {
    SimDuration::from_nanos((v.max(0.0) * 1e6).round() as u64)
}

/// What one packet did, on either side.
#[derive(Debug, Default)]
struct Seen {
    /// `LINK PACKET ttl=N len=N` per packet emitted, in order.
    emitted: Vec<String>,
    /// The entries of the table matching the probe's packet afterwards.
    entries: Vec<CtEntry>,
    /// `conntrack -E` lines.
    events: Vec<CtEntry>,
}

fn show_packet(dev: &str, p: &Packet) -> String {
    format!("{dev} {p} ttl={} len={}", p.ttl, p.len)
}

/// Whether conntrack entry `e` is the flow of `p` (either direction).
fn flow_of(e: &CtEntry, p: &Packet) -> bool {
    let icmp_id = match p.l4 {
        sim_core::L4::Icmp {
            body: sim_core::IcmpBody::Query { id, .. },
            ..
        } => Some(id.to_string()),
        _ => None,
    };
    let same = |t: &kernel::CtTuple| {
        t.src == p.src.to_string()
            && t.dst == p.dst.to_string()
            && match &icmp_id {
                Some(id) => t.other.iter().any(|(k, v)| k == "id" && v == id),
                None => t.sport == p.sport() && t.dport == p.dport(),
            }
    };
    same(&e.orig) || same(&e.reply)
}

fn extended(line: &str) -> &str {
    line.strip_prefix("ipv4     2 ").unwrap_or(line)
}

fn entries_of(listing: &str, p: &Packet) -> Vec<CtEntry> {
    listing
        .lines()
        .filter_map(|l| parse_ct_line(extended(l)))
        .filter(|e| flow_of(e, p))
        .collect()
}

fn all_entries(listing: &str) -> Vec<CtEntry> {
    listing
        .lines()
        .filter_map(|l| parse_ct_line(extended(l)))
        .collect()
}

/// The kernel's side of probe `label`.
fn kernel_seen(run: &LabRun, label: &str, until_ms: f64) -> (Packet, Seen) {
    let inj = run.injected(label);
    let pkt = sim_core::wire::parse_ip(&inj.bytes()).expect("the driver's packet parses");
    let emitted = inj
        .emitted
        .iter()
        .map(|e| {
            let p = sim_core::wire::parse_ip(&e.bytes())
                .unwrap_or_else(|err| panic!("{label}: the kernel sent {}: {err}", e.hex));
            show_packet(&e.dev, &p)
        })
        .collect();
    let listing = &run.output(&listing_label(label)).stdout;
    let events = run
        .events
        .iter()
        .filter(|e| {
            e.at_ms
                .is_some_and(|t| t >= inj.at_ms - 1.0 && t < until_ms)
        })
        .filter_map(|e| parse_ct_line(&e.line))
        .collect();
    (
        pkt,
        Seen {
            emitted,
            entries: entries_of(listing, &pkt),
            events,
        },
    )
}

/// nfsim's side: `pkt` through a fresh node at the probe's time; the table dumped when the
/// kernel's was listed.
fn nfsim_seen(saved: &Saved, run: &LabRun, label: &str, pkt: Packet, seed: u64) -> Seen {
    let inj = run.injected(label);
    let (node, mut ns, at) = nfsim_node(saved, inj.at_ms - saved.listed_ms, seed);
    let (ingress, why) = node.ingress_for(&pkt, false);
    assert_eq!(
        ingress,
        sim_netfilter::netns::Ingress::Interface(sim_core::IfName::new(&inj.dev).unwrap()),
        "{label}: nfsim takes the packet in elsewhere ({why})"
    );
    let r = ns.process(at, pkt, ingress);
    let emitted = r
        .out
        .iter()
        .map(|e| match e {
            Egress::Transmit { dev, packet, .. } => show_packet(dev.as_str(), packet),
            Egress::LocalDeliver { packet } => show_packet("local", packet),
        })
        .collect();
    let events = ns
        .drain_conntrack_events()
        .iter()
        .filter_map(|e| parse_ct_line(&e.to_string()))
        .collect();
    let listed = at + ms(read_at(run, &listing_label(label)) - inj.at_ms);
    Seen {
        emitted,
        entries: entries_of(&ns.conntrack().dump(listed, &Filter::all()), &pkt),
        events,
    }
}

/// The port `MASQUERADE --random-fully` chose, made `*` (checked to be one nfsim could
/// draw: 1024–65535 for a source port of 1024 or more, `nf_nat_l4proto_unique_tuple`).
fn hide_masquerade_port(s: &mut Seen, masq_src: &[&str]) {
    for e in s.entries.iter_mut().chain(s.events.iter_mut()) {
        if masq_src.contains(&e.reply.dst.as_str()) && e.reply.dst != e.orig.src {
            let p = e.reply.dport.expect("a masqueraded TCP entry has ports");
            assert!(p >= 1024, "masquerade port {p} outside 1024-65535");
            e.reply.dport = Some(0);
        }
    }
    for line in &mut s.emitted {
        for src in masq_src {
            let pre = format!(" {src}:");
            if let Some(i) = line.find(&pre) {
                let from = i + pre.len();
                let end = from + line[from..].find(' ').unwrap_or(0);
                let port: u16 = line[from..end].parse().expect("a port");
                assert!(port >= 1024, "masquerade port {port} outside 1024-65535");
                line.replace_range(from..end, "*");
            }
        }
    }
}

/// Compares entries or events: everything exact but the seconds left, which agree within 1 s.
fn same_entries(
    what: &str,
    kernel: &[CtEntry],
    sim: &[CtEntry],
    events: bool,
) -> Result<(), String> {
    let show = |v: &[CtEntry]| format!("{v:#?}");
    if kernel.len() != sim.len() {
        return Err(format!(
            "{what}: kernel has {}, nfsim {}\nkernel: {}\nnfsim: {}",
            kernel.len(),
            sim.len(),
            show(kernel),
            show(sim)
        ));
    }
    for (k, s) in kernel.iter().zip(sim) {
        let mut k = k.clone();
        let mut s = s.clone();
        // Keys nfsim's listing has that the kernel's does not need to (use=, delta-time=,
        // compared through the age it gives): the state, tuples, flags and mark must agree.
        for e in [&mut k, &mut s] {
            e.extra.retain(|(key, _)| key == "mark");
            if !events && !e.extra.iter().any(|(key, _)| key == "mark") {
                e.extra.push(("mark".into(), "0".into()));
            }
        }
        let secs_ok = match (k.timeout_secs, s.timeout_secs) {
            (Some(a), Some(b)) if events => {
                kernel::event_secs_agree(a, b, k.event.as_deref() == Some("DESTROY"))
            }
            (Some(a), Some(b)) => a.abs_diff(b) <= 1,
            (a, b) => a == b,
        };
        k.timeout_secs = None;
        s.timeout_secs = None;
        if !secs_ok || k != s {
            return Err(format!(
                "{what} differ:\nkernel: {k:?} ({:?} s)\nnfsim:  {s:?} ({:?} s)",
                kernel
                    .iter()
                    .find(|e| e.orig == k.orig)
                    .and_then(|e| e.timeout_secs),
                sim.iter()
                    .find(|e| e.orig == s.orig)
                    .and_then(|e| e.timeout_secs),
            ));
        }
    }
    Ok(())
}

/// The endpoint a random probe's entry reached on the kernel (its reply source).
fn endpoint_of(seen: &Seen) -> Option<String> {
    let e = seen.entries.first()?;
    Some(format!("{}:{}", e.reply.src, e.reply.sport?))
}

/// Every outcome nfsim's `--all-branches` lists for `pkt`, as `(DNAT target, probability)`.
fn branches(saved: &Saved, after_ms: f64, pkt: Packet) -> Vec<(String, String)> {
    let (node, ns, at) = nfsim_node(saved, after_ms, 1);
    let r = nfsim::explain::trace(
        &node,
        &ns,
        pkt,
        &nfsim::explain::TraceOptions {
            local: false,
            all_branches: true,
            at,
        },
    )
    .expect("nfsim traces the probe");
    let b = r.branches.expect("--all-branches reports branches");
    assert!(b.sums_to_one, "the branches sum to {}", b.total.fraction());
    b.outcomes
        .iter()
        .map(|o| {
            let target = o
                .outcome
                .dnat
                .as_deref()
                .and_then(|d| d.split(" -> ").nth(1))
                .unwrap_or("none")
                .to_string();
            (target, o.probability.fraction())
        })
        .collect()
}

/// The node's masquerading sources: its addresses.
const MASQ_SOURCES: [&str; 2] = [NODE_ADDR, "10.244.2.1"];

/// Compares one probe; returns the differences (empty when nfsim agrees).
fn compare_probe(saved: &Saved, run: &LabRun, p: &Probe, until_ms: f64) -> Result<String, String> {
    let (pkt, mut k) = kernel_seen(run, p.label, until_ms);
    let after = run.injected(p.label).at_ms - saved.listed_ms;
    let mut note = String::new();
    let seed = if p.random {
        let picked = endpoint_of(&k).ok_or(format!("{}: the kernel made no entry", p.label))?;
        let outcomes = branches(saved, after, pkt);
        let n = outcomes.len();
        if !outcomes.iter().any(|(t, _)| *t == picked) {
            return Err(format!(
                "{}: the kernel sent it to {picked}; nfsim's branches: {outcomes:?}",
                p.label
            ));
        }
        let expected = format!("1/{n}");
        if n != 2 || outcomes.iter().any(|(_, pr)| *pr != expected) {
            return Err(format!(
                "{}: nfsim's branches are not the two endpoints at 1/2 each: {outcomes:?}",
                p.label
            ));
        }
        note = format!(" (kernel's pick {picked}, one of {outcomes:?})");
        // Follow the kernel's branch: the first seed whose draw makes nfsim pick it too.
        (1..=64)
            .find(|&seed| {
                endpoint_of(&nfsim_seen(saved, run, p.label, pkt, seed)).as_deref()
                    == Some(picked.as_str())
            })
            .ok_or(format!(
                "{}: no seed of 1..=64 makes nfsim pick {picked}",
                p.label
            ))?
    } else {
        1
    };
    // Nothing compared vacuously: each probe made the kernel send something, and each but
    // the REJECTed one has an entry.
    if k.emitted.is_empty() || (k.entries.is_empty() != (p.label == "nodns")) {
        return Err(format!(
            "{}: the kernel's run is not what this probe is for: emitted {:?}, entries {:?}",
            p.label, k.emitted, k.entries
        ));
    }
    let mut s = nfsim_seen(saved, run, p.label, pkt, seed);
    hide_masquerade_port(&mut k, &MASQ_SOURCES);
    hide_masquerade_port(&mut s, &MASQ_SOURCES);
    let mut diffs = Vec::new();
    if k.emitted != s.emitted {
        diffs.push(format!(
            "emitted:\n  kernel: {:?}\n  nfsim:  {:?}",
            k.emitted, s.emitted
        ));
    }
    if let Err(e) = same_entries("entries", &k.entries, &s.entries, false) {
        diffs.push(e);
    }
    if let Err(e) = same_entries("events", &k.events, &s.events, true) {
        diffs.push(e);
    }
    if diffs.is_empty() {
        Ok(format!("{}: agrees{note}", p.label))
    } else {
        Err(format!("{} ({pkt}):\n{}", p.label, diffs.join("\n")))
    }
}

// ---------------------------------------------------------------------------------------------
// The same probes through `nfsim replay`, in one sequence
// ---------------------------------------------------------------------------------------------

fn dur(ms_value: f64) -> String {
    format!("{}us", (ms_value.max(0.0) * 1000.0).round() as u64)
}

/// The entry's endpoint (reply source) made `*` when the entry is a random probe's flow:
/// the replay draws with its own seed (the probe-by-probe comparison checked the kernel's pick
/// is one of nfsim's branches, and followed it).
fn hide_random_endpoint(e: &mut CtEntry, random: &[Packet], endpoints: &[String]) {
    let Some(p) = random.iter().find(|p| flow_of(e, p)) else {
        return;
    };
    if e.orig.src != p.src.to_string() {
        return;
    }
    // An entry of that flow from before the probe (a TIME_WAIT one reopened) keeps its
    // endpoint, compared exactly.
    let picked = format!("{}:{}", e.reply.src, e.reply.sport.unwrap_or(0));
    if !endpoints.contains(&picked) {
        return;
    }
    e.reply.src = "*".into();
    e.reply.sport = Some(0);
}

/// The `conntrack -L at T` sections of `nfsim replay`'s text, in order.
fn replay_listings(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur: Option<String> = None;
    for l in text.lines() {
        if l.starts_with("conntrack -L at ") {
            if let Some(c) = cur.take() {
                out.push(c);
            }
            cur = Some(String::new());
        } else if let Some(c) = cur.as_mut() {
            if l.is_empty() || l.starts_with("conntrack v") {
                out.push(cur.take().unwrap_or_default());
            } else {
                c.push_str(l);
                c.push('\n');
            }
        }
    }
    out.extend(cur);
    out
}

/// Runs every probe through `nfsim replay` from the saved state and compares each of the
/// kernel's listings after a probe with the replay's `--conntrack-at` listing at that instant,
/// and the events between one probe and the next. Returns how many listings were compared.
fn replay_agrees(saved: &Saved, run: &LabRun, probes: &[Probe]) -> Result<usize, String> {
    let first = run.injected(probes[0].label).at_ms;
    let mut w = sim_core::pcap::PcapWriter::new(Vec::new(), sim_core::pcap::WriteLink::RawIp)
        .expect("a pcap in memory");
    for p in probes {
        let inj = run.injected(p.label);
        w.write_frame(SimTime::ZERO + ms(inj.at_ms - first), &inj.bytes())
            .expect("a small packet");
    }
    let pcap = saved.dir.join("probes.pcap");
    std::fs::write(&pcap, w.into_inner()).expect("writing the pcap");
    let json = saved.dir.join("replay.json");
    let mut args: Vec<String> = [
        "replay",
        "-q",
        "--rules",
        &saved.rules,
        "--interfaces",
        &saved.addr,
        "--routes",
        &saved.route,
        "--conntrack",
        &saved.conntrack,
        "--sysctls",
        &saved.sysctls,
        "--recent-jiffies",
        &saved.jiffies.to_string(),
        "--recent-hz",
        &saved.hz.to_string(),
        "--after",
        &dur(first - saved.listed_ms),
        "--json",
        &path_str(&json),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    for (name, file) in &saved.recent {
        args.push("--recent".into());
        args.push(format!("{name}={file}"));
    }
    for p in probes {
        args.push("--conntrack-at".into());
        args.push(dur(read_at(run, &listing_label(p.label)) - first));
    }
    args.push(path_str(&pcap));
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args(&args)
        .output()
        .expect("running nfsim replay");
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    if !out.status.success() {
        return Err(format!(
            "nfsim replay failed: {}\n{text}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    // The random probes' flows and the endpoints their branches allow.
    let random: Vec<Packet> = probes
        .iter()
        .filter(|p| p.random)
        .map(|p| sim_core::wire::parse_ip(&run.injected(p.label).bytes()).expect("parses"))
        .collect();
    let endpoints: Vec<String> = [WEB_A, WEB_C, STK_A, STK_B]
        .iter()
        .map(|(_, ip, port)| format!("{ip}:{port}"))
        .collect();
    let normal = |mut v: Vec<CtEntry>, events: bool| {
        let mut seen = Seen {
            entries: std::mem::take(&mut v),
            ..Seen::default()
        };
        if events {
            std::mem::swap(&mut seen.entries, &mut seen.events);
        }
        hide_masquerade_port(&mut seen, &MASQ_SOURCES);
        let mut v = if events { seen.events } else { seen.entries };
        for e in &mut v {
            hide_random_endpoint(e, &random, &endpoints);
        }
        if !events {
            v.sort_by_key(|e| format!("{:?}", e.orig));
        }
        v
    };
    // The --conntrack-at listings, then the one at the end.
    let mut listings = replay_listings(&text);
    listings.truncate(probes.len());
    if listings.len() != probes.len() {
        return Err(format!(
            "nfsim replay printed {} listings for {} --conntrack-at:\n{text}",
            listings.len(),
            probes.len()
        ));
    }
    let lines = std::fs::read_to_string(&json).expect("the replay's JSON lines");
    let mut events: Vec<(u64, String)> = Vec::new();
    for l in lines.lines() {
        let v: serde_json::Value = serde_json::from_str(l).expect("JSON lines");
        if v["kind"] == "conntrack" {
            let t = v["t_ns"].as_u64().unwrap_or(0);
            events.push((t, v["line"].as_str().unwrap_or("").to_string()));
        }
    }
    let mut diffs = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        let kernel = normal(
            all_entries(&run.output(&listing_label(p.label)).stdout),
            false,
        );
        let sim = normal(all_entries(&listings[i]), false);
        if let Err(e) = same_entries(
            &format!("after {}: the tables", p.label),
            &kernel,
            &sim,
            false,
        ) {
            diffs.push(e);
        }
        let from = run.injected(p.label).at_ms;
        let until = probes
            .get(i + 1)
            .map(|n| run.injected(n.label).at_ms - 1.0)
            .unwrap_or(f64::MAX);
        let k_ev = normal(
            run.events
                .iter()
                .filter(|e| e.at_ms.is_some_and(|t| t >= from - 1.0 && t < until))
                .filter_map(|e| parse_ct_line(&e.line))
                .collect(),
            true,
        );
        let lo = ms(from - first).as_nanos();
        let hi = if i + 1 < probes.len() {
            ms(until - first).as_nanos()
        } else {
            u64::MAX
        };
        let s_ev = normal(
            events
                .iter()
                .filter(|(t, _)| *t >= lo && *t < hi)
                .filter_map(|(_, l)| parse_ct_line(l))
                .collect(),
            true,
        );
        if let Err(e) = same_entries(&format!("{}: the events", p.label), &k_ev, &s_ev, true) {
            diffs.push(e);
        }
    }
    if diffs.is_empty() {
        Ok(listings.len())
    } else {
        Err(diffs.join("\n\n"))
    }
}

/// Every packet injected and what the kernel sent, and every event, one line each (kept
/// beside the state files for a failing run).
fn summary(run: &LabRun) -> String {
    let mut o = String::new();
    for st in &run.steps {
        if let Some(i) = &st.inject {
            let p = sim_core::wire::parse_ip(&i.bytes())
                .map(|p| p.to_string())
                .unwrap_or_else(|e| e.to_string());
            let label = st.label.as_deref().unwrap_or("");
            o.push_str(&format!("{:9.1} {label} {} {p}\n", i.at_ms, i.dev));
            for e in &i.emitted {
                let q = sim_core::wire::parse_ip(&e.bytes())
                    .map(|p| show_packet(&e.dev, &p))
                    .unwrap_or_else(|err| err.to_string());
                o.push_str(&format!("{:9.1}     => {q}\n", e.at_ms));
            }
        }
    }
    for e in &run.events {
        o.push_str(&format!("{:9.1} {}\n", e.at_ms.unwrap_or(-1.0), e.line));
    }
    o
}

#[test]
fn the_node_state_probe_for_probe_matches_the_kernel() {
    let test = "kernel_probe::the_node_state_probe_for_probe_matches_the_kernel";
    let Some(lab) =
        kernel::lab_with_or_skip(test, &["sh", "cat", "grep", "sysctl"], &["/dev/net/tun"])
    else {
        return;
    };
    let run = lab.run(&scenario()).unwrap_or_else(|e| panic!("{e}"));
    let saved = save_state(&run);
    std::fs::write(saved.dir.join("run.txt"), summary(&run)).expect("writing the run's summary");
    let probes = probes();
    let mut agreed = Vec::new();
    let mut differ = Vec::new();
    for (i, p) in probes.iter().enumerate() {
        let until = probes
            .get(i + 1)
            .map(|n| run.injected(n.label).at_ms - 1.0)
            .unwrap_or(f64::MAX);
        match compare_probe(&saved, &run, p, until) {
            Ok(line) => agreed.push(line),
            Err(e) => differ.push(e),
        }
    }
    assert!(
        differ.is_empty(),
        "{} of {} probes differ (state in {}):\n\n{}\n\nagreed:\n{}",
        differ.len(),
        probes.len(),
        saved.dir.display(),
        differ.join("\n\n"),
        agreed.join("\n")
    );
    eprintln!(
        "{} probes, all agree with the kernel:\n{}",
        probes.len(),
        agreed.join("\n")
    );
    let listings = replay_agrees(&saved, &run, &probes).unwrap_or_else(|e| {
        panic!(
            "nfsim replay of the probes differs (state in {}):\n{e}",
            saved.dir.display()
        )
    });
    eprintln!("nfsim replay: the {listings} tables after each probe equal the kernel's");
    let _ = std::fs::remove_dir_all(&saved.dir);
}
