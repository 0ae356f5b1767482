//! TCP through a DNAT, as measured on a real kernel (docs/kernel-model.md §3), read back through
//! `-L`.
mod common;
use common::*;
use sim_conntrack::*;
use sim_core::{SimDuration, TcpFlags};

const C: &str = "127.0.0.1:41000";
const SVC: &str = "127.96.0.10:80";
const EP: &str = "127.0.0.2:8080";
const SYN: TcpFlags = TcpFlags::SYN;
const ACK: TcpFlags = TcpFlags::ACK;
const FIN: TcpFlags = TcpFlags(0x11); // FIN|ACK
const SYNACK: TcpFlags = TcpFlags(0x12);
const RSTACK: TcpFlags = TcpFlags(0x14);

fn rules() -> Rules {
    Rules {
        dnat: vec![
            (sa(SVC), "127.0.0.2:8080".parse().unwrap()),
            (sa("127.96.0.10:81"), "127.0.0.2:9999".parse().unwrap()),
        ],
        ..Rules::default()
    }
}

fn c2s(ct: &mut Conntrack, ms: u64, f: TcpFlags) -> sim_core::Packet {
    passed(send(ct, t(ms), tcp(C, SVC, f), &rules()))
}
fn s2c(ct: &mut Conntrack, ms: u64, f: TcpFlags) -> sim_core::Packet {
    passed(send(ct, t(ms), tcp(EP, C, f), &rules()))
}

const TUPLES: &str = "src=127.0.0.1 dst=127.96.0.10 sport=41000 dport=80 src=127.0.0.2 dst=127.0.0.1 sport=8080 dport=41000";

#[test]
fn handshake_close_states_timeouts_and_events() {
    let mut ct = table(Sysctls::default());
    assert_eq!(
        c2s(&mut ct, 0, SYN).to_string(),
        "tcp 127.0.0.1:41000 -> 127.0.0.2:8080 SYN"
    );
    assert_eq!(
        s2c(&mut ct, 1, SYNACK).to_string(),
        "tcp 127.96.0.10:80 -> 127.0.0.1:41000 SYN,ACK"
    );
    c2s(&mut ct, 2, ACK);
    assert_eq!(
        lines(&ct, t(200)),
        [format!(
            "tcp      6 431999 ESTABLISHED {TUPLES} [ASSURED] mark=0 use=1"
        )]
    );
    c2s(&mut ct, 300, FIN);
    s2c(&mut ct, 301, ACK);
    assert_eq!(
        lines(&ct, t(500)),
        [format!(
            "tcp      6 59 CLOSE_WAIT {TUPLES} [ASSURED] mark=0 use=1"
        )]
    );
    s2c(&mut ct, 600, FIN);
    c2s(&mut ct, 601, ACK);
    assert_eq!(
        lines(&ct, t(800)),
        [format!(
            "tcp      6 119 TIME_WAIT {TUPLES} [ASSURED] mark=0 use=1"
        )]
    );
    let unreplied = "src=127.0.0.1 dst=127.96.0.10 sport=41000 dport=80 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 sport=8080 dport=41000";
    assert_eq!(
        event_lines(&mut ct),
        [
            format!("    [NEW] tcp      6 120 SYN_SENT {unreplied}"),
            format!(" [UPDATE] tcp      6 60 SYN_RECV {TUPLES}"),
            format!(" [UPDATE] tcp      6 432000 ESTABLISHED {TUPLES} [ASSURED]"),
            format!(" [UPDATE] tcp      6 120 FIN_WAIT {TUPLES} [ASSURED]"),
            format!(" [UPDATE] tcp      6 60 CLOSE_WAIT {TUPLES} [ASSURED]"),
            format!(" [UPDATE] tcp      6 30 LAST_ACK {TUPLES} [ASSURED]"),
            format!(" [UPDATE] tcp      6 120 TIME_WAIT {TUPLES} [ASSURED]"),
        ]
    );
    // TIME_WAIT ends after 120 s; the DESTROY keeps the state and omits the seconds.
    ct.expire(t(601) + SimDuration::from_secs(120));
    assert_eq!(
        event_lines(&mut ct),
        [format!("[DESTROY] tcp      6 TIME_WAIT {TUPLES} [ASSURED]")]
    );
}

#[test]
fn syn_answered_by_rst_leaves_no_entry_and_the_rst_is_un_dnatted() {
    let mut ct = table(Sysctls::default());
    let syn = passed(send(&mut ct, t(0), tcp(C, "127.96.0.10:81", SYN), &rules()));
    assert_eq!(syn.to_string(), "tcp 127.0.0.1:41000 -> 127.0.0.2:9999 SYN");
    let rst = passed(send(
        &mut ct,
        t(0),
        tcp("127.0.0.2:9999", C, RSTACK),
        &rules(),
    ));
    assert_eq!(
        rst.to_string(),
        "tcp 127.96.0.10:81 -> 127.0.0.1:41000 RST,ACK"
    );
    assert!(lines(&ct, t(1)).is_empty());
    assert_eq!(ct.count(), 0, "the dying entry is released at confirm");
    assert_eq!(
        event_lines(&mut ct),
        [
            "    [NEW] tcp      6 120 SYN_SENT src=127.0.0.1 dst=127.96.0.10 sport=41000 dport=81 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 sport=9999 dport=41000",
            "[DESTROY] tcp      6 120 CLOSE src=127.0.0.1 dst=127.96.0.10 sport=41000 dport=81 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 sport=9999 dport=41000",
        ]
    );
}

#[test]
fn rst_after_establishment_gives_close_10s() {
    let mut ct = table(Sysctls::default());
    c2s(&mut ct, 0, SYN);
    s2c(&mut ct, 1, SYNACK);
    c2s(&mut ct, 2, ACK);
    s2c(&mut ct, 1000, RSTACK);
    assert_eq!(
        lines(&ct, t(1000)),
        [format!(
            "tcp      6 10 CLOSE {TUPLES} [ASSURED] mark=0 use=1"
        )]
    );
}

#[test]
fn syn_retransmit_does_not_refresh_and_every_original_packet_is_new() {
    let mut ct = table(Sysctls::default());
    let h = match send(&mut ct, t(0), tcp(C, SVC, SYN), &rules()) {
        Out::Passed(_, Some(h)) => h,
        o => panic!("{o:?}"),
    };
    assert_eq!(h.ctinfo, CtInfo::New);
    let h2 = match send(&mut ct, t(3000), tcp(C, SVC, SYN), &rules()) {
        Out::Passed(_, Some(h)) => h,
        o => panic!("{o:?}"),
    };
    assert_eq!(h2.ctinfo, CtInfo::New);
    assert_eq!(h2.id, h.id);
    assert_eq!(ct.get(h.id).unwrap().expiry, Expiry::At(t(120_000)));
}

#[test]
fn invalid_packets_get_no_entry_and_count_invalid() {
    let mut ct = table(Sysctls::default());
    for f in [
        TcpFlags::FIN,
        TcpFlags::NONE,
        TcpFlags(0x03),
        SYNACK,
        RSTACK,
    ] {
        assert_eq!(
            send(&mut ct, t(0), tcp(C, SVC, f), &rules()),
            Out::Passed(tcp(C, SVC, f), None),
            "{f}"
        );
    }
    assert!(ct.is_empty());
    assert_eq!(ct.count(), 0);
    assert_eq!(ct.stats().invalid, 5);
    assert!(ct.drain_events().is_empty());
}

#[test]
fn loose_pickup_of_a_mid_stream_ack() {
    let mut ct = table(Sysctls::default());
    c2s(&mut ct, 0, ACK);
    let l = lines(&ct, t(0));
    assert_eq!(
        l,
        ["tcp      6 300 ESTABLISHED src=127.0.0.1 dst=127.96.0.10 sport=41000 dport=80 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 sport=8080 dport=41000 mark=0 use=1"]
    );
    s2c(&mut ct, 10, ACK);
    c2s(&mut ct, 20, ACK);
    assert_eq!(
        lines(&ct, t(20)),
        [format!(
            "tcp      6 432000 ESTABLISHED {TUPLES} [ASSURED] mark=0 use=1"
        )]
    );

    let mut strict = Sysctls::default();
    strict.set("nf_conntrack_tcp_loose", "0").unwrap();
    let mut ct = table(strict);
    c2s(&mut ct, 0, ACK);
    assert!(ct.is_empty());
}

#[test]
fn syn_on_time_wait_reopens_with_a_new_entry() {
    let mut ct = table(Sysctls::default());
    c2s(&mut ct, 0, SYN);
    s2c(&mut ct, 1, SYNACK);
    c2s(&mut ct, 2, ACK);
    c2s(&mut ct, 3, FIN);
    s2c(&mut ct, 4, FIN);
    c2s(&mut ct, 5, ACK);
    let old = ct.list(t(5), &Filter::all())[0];
    assert_eq!(old.tcp_state, Some(TcpState::TimeWait));
    ct.drain_events();
    c2s(&mut ct, 1000, SYN);
    let now = ct.list(t(1000), &Filter::all());
    assert_eq!(now.len(), 1);
    assert_ne!(now[0].id, old.id);
    assert_eq!(now[0].tcp_state, Some(TcpState::SynSent));
    let kinds: Vec<EventKind> = ct.drain_events().iter().map(|e| e.kind).collect();
    assert_eq!(kinds, [EventKind::Destroy, EventKind::New]);
}

#[test]
fn timeouts_are_settable_by_sysctl_name() {
    let mut s = Sysctls::default();
    s.set("net.netfilter.nf_conntrack_tcp_timeout_established", "7440")
        .unwrap();
    s.set("nf_conntrack_tcp_timeout_syn_sent", "5").unwrap();
    let mut ct = table(s);
    c2s(&mut ct, 0, SYN);
    assert!(lines(&ct, t(0))[0].starts_with("tcp      6 5 SYN_SENT"));
    s2c(&mut ct, 1, SYNACK);
    c2s(&mut ct, 2, ACK);
    assert!(lines(&ct, t(2))[0].starts_with("tcp      6 7440 ESTABLISHED"));
}

/// The rules after the endpoint 127.0.0.2 was removed: the Service now goes to 127.0.0.3.
fn rules_after_removal() -> Rules {
    Rules {
        dnat: vec![(sa(SVC), "127.0.0.3:8080".parse().unwrap())],
        ..Rules::default()
    }
}

fn loaded(state: &str, secs: u32) -> Conntrack {
    let mut ct = table(Sysctls::default());
    let text = format!("tcp      6 {secs} {state} {TUPLES} [ASSURED] mark=0 use=1\n");
    let entries = parse_listing(&text).unwrap();
    load_listing(&mut ct, t(0), &entries, SimDuration::from_secs(60)).unwrap();
    ct.drain_events();
    ct
}

/// A SYN from the client on a TIME_WAIT or CLOSE entry loaded from a listing reopens the
/// connection as the kernel does (`nf_conntrack_tcp_packet`: the entry is killed and the
/// SYN looked up again, -NF_REPEAT): a new entry, through the rules of now, to the new
/// endpoint. (Before entries loaded from a listing carried their close history, the SYN was
/// ignored on the old entry and went to the removed endpoint.)
#[test]
fn a_syn_on_a_loaded_time_wait_or_close_entry_reopens_through_the_rules() {
    for (state, secs) in [("TIME_WAIT", 100), ("CLOSE", 8)] {
        let mut ct = loaded(state, secs);
        let old = ct.list(t(0), &Filter::all())[0];
        let p = passed(send(
            &mut ct,
            t(1000),
            tcp(C, SVC, SYN),
            &rules_after_removal(),
        ));
        assert_eq!(p.dst.to_string(), "127.0.0.3", "{state}: the new endpoint");
        let now = ct.list(t(1000), &Filter::all());
        assert_eq!(now.len(), 1, "{state}");
        assert_ne!(now[0].id, old.id, "{state}");
        assert_eq!(now[0].tcp_state, Some(TcpState::SynSent), "{state}");
        let ev = event_lines(&mut ct);
        assert!(ev[0].starts_with("[DESTROY] tcp"), "{state}: {ev:?}");
        assert!(ev[1].starts_with("    [NEW] tcp"), "{state}: {ev:?}");
    }
}

/// An entry inserted as `conntrack -I` makes it has no close history (the kernel zeroes
/// `struct ip_ct_tcp`): a SYN on its TIME_WAIT is ignored and keeps it.
#[test]
fn a_syn_on_a_userspace_inserted_time_wait_entry_is_ignored() {
    let mut ct = table(Sysctls::default());
    let e = &parse_listing(&format!(
        "tcp      6 100 TIME_WAIT {TUPLES} [ASSURED] mark=0 use=1\n"
    ))
    .unwrap()[0];
    ct.insert(
        t(0),
        &NewEntry {
            orig: e.orig,
            reply: e.reply,
            status: e.status,
            tcp_state: e.tcp_state,
            mark: 0,
            timeout: SimDuration::from_secs(100),
            age: SimDuration::ZERO,
            history: History::Userspace,
            timestamped: false,
        },
    )
    .unwrap();
    let p = passed(send(
        &mut ct,
        t(1000),
        tcp(C, SVC, SYN),
        &rules_after_removal(),
    ));
    assert_eq!(p.dst.to_string(), "127.0.0.2", "the old entry's endpoint");
    assert_eq!(
        ct.list(t(1000), &Filter::all())[0].tcp_state,
        Some(TcpState::TimeWait)
    );
}

fn seg(src: &str, dst: &str, text: &str) -> sim_core::Packet {
    format!("tcp {src} -> {dst} {text}").parse().unwrap()
}

/// A handshake, then data from the client that is never acknowledged: the kernel caps the
/// ESTABLISHED timeout at `nf_conntrack_tcp_timeout_unacknowledged` (300 s) from the first
/// unacknowledged segment on, and the server's ACK gives the 5 days back. (nfsim gave 5
/// days throughout before it tracked windows.)
#[test]
fn unacknowledged_data_caps_the_timeout_until_it_is_acked() {
    let mut ct = table(Sysctls::default());
    let r = rules();
    let go = |ct: &mut Conntrack, ms: u64, from_client: bool, text: &str| {
        let p = if from_client {
            seg(C, SVC, text)
        } else {
            seg(EP, C, text)
        };
        passed(send(ct, t(ms), p, &r));
    };
    go(&mut ct, 0, true, "SYN seq=1000 len=0");
    go(&mut ct, 1, false, "SYN,ACK seq=5000 ack=1001 len=0");
    go(&mut ct, 2, true, "ACK seq=1001 ack=5001 len=0");
    assert!(lines(&ct, t(21))[0].starts_with("tcp      6 431999 ESTABLISHED"));
    go(&mut ct, 3, true, "ACK,PSH seq=1001 ack=5001 len=100");
    assert!(
        lines(&ct, t(31))[0].starts_with("tcp      6 299 ESTABLISHED"),
        "{:?}",
        lines(&ct, t(31))
    );
    go(&mut ct, 4, false, "ACK seq=5001 ack=1101 len=0");
    assert!(lines(&ct, t(41))[0].starts_with("tcp      6 431999 ESTABLISHED"));
    let mut s = Sysctls::default();
    s.set("nf_conntrack_tcp_timeout_unacknowledged", "42")
        .unwrap();
    let mut ct = table(s);
    go(&mut ct, 0, true, "SYN seq=1000 len=0");
    go(&mut ct, 1, false, "SYN,ACK seq=5000 ack=1001 len=0");
    go(&mut ct, 2, true, "ACK seq=1001 ack=5001 len=0");
    go(&mut ct, 3, true, "ACK,PSH seq=1001 ack=5001 len=100");
    assert!(lines(&ct, t(31))[0].starts_with("tcp      6 41 ESTABLISHED"));
}

/// The same ACK-class segment again and again (a retransmission: same direction, seq,
/// ack, end and window): from the `nf_conntrack_tcp_max_retrans`-th (3) on, the timeout
/// is `nf_conntrack_tcp_timeout_max_retrans` (300 s), both settable.
#[test]
fn retransmissions_past_max_retrans_cap_the_timeout() {
    for (max, cap, after) in [(None, None, 3u64), (Some("1"), Some("77"), 1)] {
        let mut s = Sysctls::default();
        if let Some(m) = max {
            s.set("nf_conntrack_tcp_max_retrans", m).unwrap();
        }
        if let Some(c) = cap {
            s.set("nf_conntrack_tcp_timeout_max_retrans", c).unwrap();
        }
        // Unacknowledged data would cap it at 300 s anyway: give UNACK more so that only the
        // retransmission count can bring it down.
        s.set("nf_conntrack_tcp_timeout_unacknowledged", "100000")
            .unwrap();
        let want = cap.unwrap_or("300").parse::<u64>().unwrap() - 1;
        let mut ct = table(s);
        let r = rules();
        let c = |ct: &mut Conntrack, ms: u64, text: &str| {
            passed(send(ct, t(ms), seg(C, SVC, text), &r));
        };
        c(&mut ct, 0, "SYN seq=1000 len=0");
        passed(send(
            &mut ct,
            t(1),
            seg(EP, C, "SYN,ACK seq=5000 ack=1001 len=0"),
            &r,
        ));
        c(&mut ct, 2, "ACK seq=1001 ack=5001 len=0");
        c(&mut ct, 3, "ACK,PSH seq=1001 ack=5001 len=100");
        let secs = |ct: &Conntrack, ms: u64| {
            lines(ct, t(ms + 1))[0]
                .split_whitespace()
                .nth(2)
                .unwrap()
                .to_string()
        };
        for k in 1..after {
            c(&mut ct, 10 * k, "ACK,PSH seq=1001 ack=5001 len=100");
            assert_eq!(secs(&ct, 10 * k), "99999", "after retransmission {k}");
        }
        c(&mut ct, 10 * after, "ACK,PSH seq=1001 ack=5001 len=100");
        let l = lines(&ct, t(1000));
        assert!(
            l[0].starts_with(&format!("tcp      6 {want} ESTABLISHED")),
            "{max:?}: {l:?}"
        );
    }
}

/// A loaded ESTABLISHED entry (no window data in a listing): a segment carrying data is
/// taken as data in flight, so the timeout drops to `timeout_unacknowledged` as on the node
/// the listing came from; the server's ACK of it gives the 5 days back; a bare ACK changes
/// nothing. (A loaded entry kept the 5 days on data before.)
#[test]
fn data_on_a_loaded_established_entry_is_unacknowledged_until_acked() {
    let mut ct = loaded("ESTABLISHED", 400_000);
    let r = rules_after_removal();
    passed(send(
        &mut ct,
        t(1000),
        seg(C, SVC, "ACK seq=7000 ack=9000 len=0"),
        &r,
    ));
    assert!(lines(&ct, t(1001))[0].starts_with("tcp      6 431999 ESTABLISHED"));
    let p = passed(send(
        &mut ct,
        t(2000),
        seg(C, SVC, "ACK,PSH seq=7000 ack=9000 len=200"),
        &r,
    ));
    assert_eq!(
        p.dst.to_string(),
        "127.0.0.2",
        "the loaded entry's endpoint"
    );
    assert!(
        lines(&ct, t(2001))[0].starts_with("tcp      6 299 ESTABLISHED"),
        "{:?}",
        lines(&ct, t(2001))
    );
    passed(send(
        &mut ct,
        t(3000),
        seg(EP, C, "ACK seq=9000 ack=7200 len=0"),
        &r,
    ));
    assert!(lines(&ct, t(3001))[0].starts_with("tcp      6 431999 ESTABLISHED"));
    // A first segment with data right away counts too.
    let mut ct = loaded("ESTABLISHED", 400_000);
    passed(send(
        &mut ct,
        t(1000),
        seg(C, SVC, "ACK,PSH seq=7000 ack=9000 len=200"),
        &r,
    ));
    assert!(lines(&ct, t(1001))[0].starts_with("tcp      6 299 ESTABLISHED"));
}

/// A segment beyond the receiver's window (`tcp_in_window`: SEQ over `td_maxend`) gets no
/// entry (ctstate INVALID, `conntrack -S invalid=`) and leaves the entry as it was; with
/// `nf_conntrack_tcp_be_liberal=1` it is accepted. (nfsim accepted it whatever the sysctl
/// said before it tracked windows.)
#[test]
fn out_of_window_segments_are_invalid_unless_be_liberal() {
    for liberal in ["0", "1"] {
        let mut s = Sysctls::default();
        s.set("nf_conntrack_tcp_be_liberal", liberal).unwrap();
        let mut ct = table(s);
        let r = rules();
        passed(send(
            &mut ct,
            t(0),
            seg(C, SVC, "SYN seq=1000 win=1000 len=0"),
            &r,
        ));
        passed(send(
            &mut ct,
            t(1),
            seg(EP, C, "SYN,ACK seq=5000 ack=1001 win=1000 len=0"),
            &r,
        ));
        passed(send(
            &mut ct,
            t(2),
            seg(C, SVC, "ACK seq=1001 ack=5001 win=1000 len=0"),
            &r,
        ));
        let far = seg(C, SVC, "ACK,PSH seq=900000 ack=5001 win=1000 len=10");
        let v = ct.conntrack_in(t(3), &far);
        if liberal == "0" {
            assert_eq!(v, CtVerdict::Invalid(InvalidReason::TcpOutOfWindow));
            assert_eq!(ct.stats().invalid, 1);
        } else {
            let CtVerdict::Tracked(h) = v else {
                panic!("be_liberal accepts it: {v:?}")
            };
            ct.confirm(t(3), h).unwrap();
            assert_eq!(ct.stats().invalid, 0);
        }
        // An in-window segment is fine either way.
        passed(send(
            &mut ct,
            t(4),
            seg(C, SVC, "ACK,PSH seq=1001 ack=5001 win=1000 len=10"),
            &r,
        ));
        assert!(lines(&ct, t(5))[0].starts_with("tcp      6 299 ESTABLISHED"));
    }
}
