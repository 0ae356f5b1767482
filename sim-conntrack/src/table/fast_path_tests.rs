//! The inline paths of `conntrack_in_keyed` (a known UDP flow, a plain ACK of an ESTABLISHED
//! TCP connection) against `conntrack_in_general`: two tables, one forced through the general
//! path, fed the same random packets, compared after every packet.

use super::*;
use proptest::prelude::*;
use sim_core::{SimDuration, TcpFlags};
use std::net::{Ipv4Addr, SocketAddr};

/// One packet of a random workload.
#[derive(Clone, Debug)]
struct Step {
    /// Flows 0–2 are TCP, 3 is UDP.
    flow: u8,
    reply: bool,
    flags: u8,
    gap_ms: u64,
    /// Confirm the packet's entry, else discard it (dropped before the confirm hook).
    confirm: bool,
}

fn flags() -> impl Strategy<Value = u8> {
    prop_oneof![
        // The ACK class: ACK, PSH|ACK, URG|ACK, ECE|ACK, CWR|PSH|ACK.
        8 => prop::sample::select(vec![0x10u8, 0x18, 0x30, 0x50, 0x98]),
        // SYN, SYN|ACK, FIN|ACK, FIN|PSH|ACK, RST, RST|ACK, and invalid ones.
        4 => prop::sample::select(vec![0x02u8, 0x12, 0x11, 0x19, 0x04, 0x14, 0x01, 0x00, 0x03, 0x06]),
        1 => any::<u8>(),
    ]
}

fn gap_ms() -> impl Strategy<Value = u64> {
    prop_oneof![
        8 => 0u64..3_000,
        // Past the UNACK (300 s) and CLOSE/TIME_WAIT timeouts.
        2 => 0u64..400_000,
        // Past ESTABLISHED's 5 days (or the 100 s some cases set).
        1 => 400_000_000u64..500_000_000,
    ]
}

fn step() -> impl Strategy<Value = Step> {
    (
        0u8..4,
        any::<bool>(),
        flags(),
        gap_ms(),
        prop::bool::weighted(0.9),
    )
        .prop_map(|(flow, reply, flags, gap_ms, confirm)| Step {
            flow,
            reply,
            flags,
            gap_ms,
            confirm,
        })
}

fn packet(s: &Step) -> Packet {
    let c = SocketAddr::new(
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, 1 + s.flow)),
        4000 + u16::from(s.flow),
    );
    let v = SocketAddr::new(IpAddr::V4(Ipv4Addr::new(127, 0, 1, 1)), 80);
    let (a, b) = if s.reply { (v, c) } else { (c, v) };
    if s.flow == 3 {
        Packet::udp(a, b)
    } else {
        Packet::tcp(a, b, TcpFlags(s.flags))
    }
}

/// Sysctl variations: loose pickup on or off, events on or off, an ESTABLISHED timeout
/// below UNACK's, a tiny table (early drop, table full).
fn table(variant: u8) -> Conntrack {
    let mut s = Sysctls {
        tcp_loose: variant & 1 == 0,
        events: u8::from(variant & 2 == 0),
        ..Sysctls::default()
    };
    if variant & 4 != 0 {
        s.set("nf_conntrack_tcp_timeout_established", "100")
            .expect("valid");
    }
    if variant & 8 != 0 {
        s.set("nf_conntrack_max", "2").expect("valid");
        s.set("nf_conntrack_buckets", "1").expect("valid");
    }
    Conntrack::new(5, "fast-path", s)
}

/// Everything observable, and the entries' hidden tracker state, must agree.
fn assert_same(fast: &mut Conntrack, general: &mut Conntrack, now: SimTime, at: usize) {
    let ev = |ct: &mut Conntrack| {
        ct.drain_events()
            .iter()
            .map(|e| format!("{} {e}", e.at.as_nanos()))
            .collect::<Vec<_>>()
    };
    assert_eq!(ev(fast), ev(general), "events after packet {at}");
    assert_eq!(fast.stats(), general.stats(), "stats after packet {at}");
    assert_eq!(
        fast.list(now, &Filter::all()),
        general.list(now, &Filter::all()),
        "list after packet {at}"
    );
    assert_eq!((fast.count(), fast.len()), (general.count(), general.len()));
    assert_eq!(
        format!("{:?}", fast.slab),
        format!("{:?}", general.slab),
        "entries after packet {at}"
    );
    assert_eq!(
        format!("{:?}", fast.timers),
        format!("{:?}", general.timers),
        "timers after packet {at}"
    );
}

/// Runs `steps` through both tables; returns how many packets took the inline TCP path.
fn run(variant: u8, steps: &[Step]) -> u64 {
    let mut fast = table(variant);
    let mut general = table(variant);
    general.general_only = true;
    let mut now = SimTime::ZERO;
    for (i, s) in steps.iter().enumerate() {
        now += SimDuration::from_millis(s.gap_ms);
        let p = packet(s);
        let v = fast.conntrack_in(now, &p);
        assert_eq!(
            v,
            general.conntrack_in(now, &p),
            "verdict of packet {i}: {s:?}"
        );
        if let CtVerdict::Tracked(h) = v {
            if s.confirm {
                assert_eq!(fast.confirm(now, h), general.confirm(now, h));
            } else {
                fast.discard(now, h);
                general.discard(now, h);
            }
        }
        assert_same(&mut fast, &mut general, now, i);
    }
    assert_eq!(
        general.tcp_fast_hits, 0,
        "the general table took no shortcut"
    );
    fast.tcp_fast_hits
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]

    #[test]
    fn inline_paths_do_what_the_general_path_does(
        variant in 0u8..16,
        steps in prop::collection::vec(step(), 1..80),
    ) {
        run(variant, &steps);
    }
}

/// A connection through every branch of the inline TCP path: a loose pickup (ESTABLISHED
/// without a reply: UNACK's timeout), the first reply (SEEN_REPLY), the next ACK (ASSURED),
/// then plain data both ways, a FIN and what follows; in every sysctl variant.
#[test]
fn inline_tcp_path_covers_pickup_reply_assured_and_data() {
    let ack = |reply: bool, gap_ms: u64| Step {
        flow: 0,
        reply,
        flags: 0x10,
        gap_ms,
        confirm: true,
    };
    let mut steps = vec![
        ack(false, 0),
        ack(false, 10),
        ack(true, 10),
        ack(false, 10),
        Step {
            flags: 0x18,
            ..ack(true, 10)
        },
        ack(false, 50_000),
        Step {
            flags: 0x11,
            ..ack(false, 10)
        },
        ack(true, 10),
    ];
    // A handshake on another flow, then data.
    for (reply, flags) in [(false, 0x02), (true, 0x12), (false, 0x10), (true, 0x18)] {
        steps.push(Step {
            flow: 1,
            reply,
            flags,
            gap_ms: 5,
            confirm: true,
        });
    }
    for variant in 0..16 {
        let hits = run(variant, &steps);
        let loose = variant & 1 == 0;
        // Loose: the pickup's second ACK, the reply, the next two, and the one 50 s on; then
        // the handshake's data (its ACK finds SYN_RECV). Strict: the pickup is INVALID.
        assert_eq!(hits, if loose { 5 + 1 } else { 1 }, "variant {variant}");
    }
}
