use super::*;
use crate::filter::Filter;
use sim_core::{SimDuration, TcpFlags};
use std::net::{Ipv4Addr, SocketAddr};

fn sa(host: u32, port: u16) -> SocketAddr {
    SocketAddr::new(IpAddr::V4(Ipv4Addr::from(0x7f00_0000 + host)), port)
}

/// `conntrack_in_then` calls its hook for a packet of no known flow only, before the
/// entry is made, and tracks every packet as `conntrack_in` does.
#[test]
fn the_new_flow_hook_runs_for_new_flows_only() {
    let mut hooked = Conntrack::new(7, "hook", Sysctls::default());
    let mut plain = hooked.clone();
    let (c, s) = (sa(1, 40_000), sa(2, 53));
    let packets = [
        Packet::udp(c, s),
        Packet::udp(c, s),
        Packet::udp(s, c),
        Packet::udp(sa(3, 40_000), s),
    ];
    let mut calls = Vec::new();
    for (i, p) in packets.iter().enumerate() {
        let now = SimTime::from_millis(i as u64);
        let mut called = false;
        let v = hooked.conntrack_in_then(now, p, || called = true);
        calls.push(called);
        let w = plain.conntrack_in(now, p);
        assert_eq!(format!("{v:?}"), format!("{w:?}"), "packet {i}");
        if let (CtVerdict::Tracked(h), CtVerdict::Tracked(g)) = (v, w) {
            hooked.confirm(now, h).expect("no clash");
            plain.confirm(now, g).expect("no clash");
        }
    }
    // New, known, its reply, another new flow.
    assert_eq!(calls, [true, false, false, true]);
    let now = SimTime::from_millis(10);
    assert_eq!(
        hooked.dump(now, &Filter::default()),
        plain.dump(now, &Filter::default())
    );
}

/// On a table large enough for `conntrack_in_many` to read ahead, a batch mixing known
/// flows, replies, new flows, TCP, ICMP errors and entries expiring at the batch's
/// instant gives what one call per packet gives.
#[test]
fn read_ahead_changes_nothing_on_a_large_table() {
    let mut one = Conntrack::new(7, "read-ahead", Sysctls::default());
    let n = 50_000u32;
    for i in 0..n {
        let now = SimTime::from_nanos(20_000 * u64::from(i));
        let p = Packet::udp(sa(1 + i / 100, 1000 + (i % 100) as u16), sa(1, 53));
        if let CtVerdict::Tracked(h) = one.conntrack_in(now, &p) {
            one.confirm(now, h).expect("no clash");
        }
    }
    one.drain_events();
    assert!(one.index.slot_count() >= READ_AHEAD_MIN_SLOTS);
    let mut many = one.clone();
    // Created 20 µs apart over one second: at 30.02 s the first thousand have expired.
    let now = SimTime::from_millis(30_020);
    let mut pkts = Vec::new();
    for k in 0..3000u32 {
        let i = (k * 7919) % (n + 500);
        let (c, s) = (sa(1 + i / 100, 1000 + (i % 100) as u16), sa(1, 53));
        let p = match k % 6 {
            0 | 1 => Packet::udp(c, s),
            2 => Packet::udp(s, c),
            3 => Packet::tcp(c, sa(2, 80), TcpFlags::SYN),
            4 => Packet::icmp_error(
                IpAddr::V4(Ipv4Addr::new(127, 9, 9, 9)),
                &Packet::udp(s, c),
                3,
                3,
            ),
            _ => Packet::icmp_echo_request(c.ip(), s.ip(), k as u16, 1),
        };
        pkts.push(p);
    }
    let want: Vec<CtVerdict> = pkts.iter().map(|p| one.conntrack_in(now, p)).collect();
    let mut got = Vec::new();
    many.conntrack_in_many(now, &pkts, &mut got);
    assert_eq!(got, want);
    for ct in [&mut one, &mut many] {
        for v in &want {
            if let CtVerdict::Tracked(h) = v {
                let _ = ct.confirm(now, *h);
            }
        }
    }
    let ev = |ct: &mut Conntrack| {
        ct.drain_events()
            .iter()
            .map(|e| format!("{} {e}", e.at.as_nanos()))
            .collect::<Vec<_>>()
    };
    let (a, b) = (ev(&mut one), ev(&mut many));
    assert!(a.iter().any(|l| l.contains("[DESTROY]")), "some expired");
    assert_eq!(a, b);
    assert_eq!(one.stats(), many.stats());
    assert_eq!(one.len(), many.len());
    let later = now + SimDuration::from_secs(5);
    assert_eq!(
        one.dump(later, &Filter::all()),
        many.dump(later, &Filter::all())
    );
}
