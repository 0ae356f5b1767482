//! UDP behaviour measured on a real 6.18 kernel (docs/kernel-model.md §2).
mod common;
use common::*;
use sim_conntrack::*;
use sim_core::SimTime;

const CLIENT: &str = "127.0.0.1:40004";
const SVC: &str = "127.96.0.10:53";
const EP: &str = "127.0.0.2:5353";

fn dns_rules() -> Rules {
    Rules {
        dnat: vec![(sa(SVC), "127.0.0.2:5353".parse().unwrap())],
        ..Rules::default()
    }
}

/// Query from the client to the service; returns the DNAT'd packet.
fn query(ct: &mut Conntrack, now: SimTime) -> sim_core::Packet {
    passed(send(ct, now, udp(CLIENT, SVC), &dns_rules()))
}

/// Answer from the endpoint; returns the un-DNAT'd packet.
fn answer(ct: &mut Conntrack, now: SimTime) -> sim_core::Packet {
    passed(send(ct, now, udp(EP, CLIENT), &dns_rules()))
}

#[test]
fn query_only_is_unreplied_30s() {
    let mut ct = table(Sysctls::default());
    let q = query(&mut ct, t(0));
    assert_eq!(q.to_string(), "udp 127.0.0.1:40004 -> 127.0.0.2:5353");
    assert_eq!(
        lines(&ct, t(500)),
        ["udp      17 29 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004 mark=0 use=1"]
    );
}

#[test]
fn answer_is_un_dnatted_and_entry_stays_30s_not_assured() {
    let mut ct = table(Sysctls::default());
    query(&mut ct, t(0));
    let a = answer(&mut ct, t(1));
    assert_eq!(a.to_string(), "udp 127.96.0.10:53 -> 127.0.0.1:40004");
    assert_eq!(
        lines(&ct, t(500)),
        ["udp      17 29 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004 mark=0 use=1"]
    );
    // A third packet within 2 s: still 30 s, not assured.
    query(&mut ct, t(1500));
    assert_eq!(
        lines(&ct, t(1500)),
        ["udp      17 30 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004 mark=0 use=1"]
    );
    // Exactly 2 s after creation is not "more than 2 s".
    query(&mut ct, t(2000));
    assert!(!ct.list(t(2000), &Filter::all())[0]
        .status
        .contains(Status::ASSURED));
}

#[test]
fn the_kernel_event_sequence() {
    let mut ct = table(Sysctls::default());
    ct.set_userspace_portid(3180571402);
    query(&mut ct, t(0));
    answer(&mut ct, t(1));
    query(&mut ct, t(100));
    query(&mut ct, t(2600)); // after a 2.5 s pause
    assert_eq!(
        lines(&ct, t(2700)),
        ["udp      17 119 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004 [ASSURED] mark=0 use=1"]
    );
    answer(&mut ct, t(2601));
    let deleted = ct.delete(t(3000), &Filter::all());
    assert_eq!(deleted.len(), 1);
    assert_eq!(
        event_lines(&mut ct),
        [
            "    [NEW] udp      17 30 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 [UNREPLIED] src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004",
            " [UPDATE] udp      17 30 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004",
            " [UPDATE] udp      17 120 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004 [ASSURED]",
            "[DESTROY] udp      17 119 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004 [ASSURED] [USERSPACE] portid=3180571402",
        ]
    );
    assert!(ct.is_empty());
}

#[test]
fn a_query_every_30s_keeps_one_entry_for_an_hour_then_it_expires_at_120s_exactly() {
    let mut ct = table(Sysctls::default());
    let mut last = SimTime::ZERO;
    for i in 0..=120u64 {
        let now = SimTime::from_secs(i * 30);
        let q = query(&mut ct, now);
        assert_eq!(
            q.dst.to_string(),
            "127.0.0.2",
            "still DNAT'd to the first endpoint at {now}"
        );
        // The answer comes 1 ms later, so the entry outlives the next query at +30 s.
        last = now + sim_core::SimDuration::from_millis(1);
        answer(&mut ct, last);
        assert_eq!(ct.len(), 1);
    }
    assert_eq!(last, t(3_600_001));
    let evs = ct.drain_events();
    assert_eq!(evs.iter().filter(|e| e.kind == EventKind::New).count(), 1);
    assert_eq!(
        evs.iter().filter(|e| e.kind == EventKind::Destroy).count(),
        0
    );

    let gone = last + sim_core::SimDuration::from_secs(120);
    assert_eq!(ct.next_expiry(), Some(gone));
    let almost = SimTime::from_nanos(gone.as_nanos() - 1_000_000);
    ct.expire(almost);
    assert_eq!(lines(&ct, almost).len(), 1, "present at 119.999 s");
    assert!(lines(&ct, gone).is_empty(), "absent from dumps at 120 s");
    ct.expire(gone);
    assert!(ct.is_empty());
    let evs = event_lines(&mut ct);
    assert_eq!(
        evs,
        ["[DESTROY] udp      17 src=127.0.0.1 dst=127.96.0.10 sport=40004 dport=53 src=127.0.0.2 dst=127.0.0.1 sport=5353 dport=40004 [ASSURED]"]
    );
    // A query now creates a new entry: a lookup at the expiry instant misses.
    query(&mut ct, gone);
    let e = ct.drain_events();
    assert_eq!(e.len(), 1);
    assert_eq!(e[0].kind, EventKind::New);
}

#[test]
fn destroy_is_stamped_with_the_expiry_instant_even_when_reaped_later() {
    let mut ct = table(Sysctls::default());
    query(&mut ct, t(0));
    ct.expire(SimTime::from_secs(500));
    let ev = ct.drain_events();
    assert_eq!(ev.last().unwrap().kind, EventKind::Destroy);
    assert_eq!(ev.last().unwrap().at, SimTime::from_secs(30));
    assert_eq!(ev.last().unwrap().cause, Some(DestroyCause::Timeout));
}

#[test]
fn shortened_timeouts_keep_a_stale_dnat_alive_while_traffic_flows() {
    // docs/kernel-model.md §2: 3 s / 6 s timeouts, a fixed-port client querying every 2 s keeps its
    // ASSURED entry to endpoint A after the rule moved to B; a 7.5 s pause frees it.
    let mut s = Sysctls::default();
    s.set("net.netfilter.nf_conntrack_udp_timeout", "3")
        .unwrap();
    s.set("net.netfilter.nf_conntrack_udp_timeout_stream", "6")
        .unwrap();
    let mut ct = table(s);
    let to_a = dns_rules();
    let to_b = Rules {
        dnat: vec![(sa(SVC), "127.0.0.3:5353".parse().unwrap())],
        ..Rules::default()
    };
    passed(send(&mut ct, t(0), udp(CLIENT, SVC), &to_a));
    passed(send(&mut ct, t(10), udp(EP, CLIENT), &to_a));
    for i in 1..20u64 {
        let q = passed(send(&mut ct, t(i * 2000), udp(CLIENT, SVC), &to_b));
        assert_eq!(q.dst.to_string(), "127.0.0.2", "query {i} still goes to A");
    }
    let e = &ct.list(t(38_000), &Filter::all())[0];
    assert!(e.status.contains(Status::ASSURED));
    assert_eq!(e.expiry, Expiry::At(t(38_000 + 6000)));
    let q = passed(send(&mut ct, t(38_000 + 7500), udp(CLIENT, SVC), &to_b));
    assert_eq!(q.dst.to_string(), "127.0.0.3");
}

#[test]
fn a_packet_dropped_before_confirm_leaves_nothing() {
    let mut ct = table(Sysctls::default());
    let rules = Rules {
        drop_before_confirm: true,
        ..dns_rules()
    };
    assert_eq!(send(&mut ct, t(0), udp(CLIENT, SVC), &rules), Out::Dropped);
    assert!(ct.is_empty());
    assert_eq!(ct.count(), 0);
    assert!(ct.drain_events().is_empty());
    assert_eq!(ct.next_expiry(), None);
}

#[test]
fn a_socket_sending_to_itself_is_its_own_reply() {
    // Measured: the second datagram 127.0.0.1:5000 -> 127.0.0.1:5000 clears [UNREPLIED],
    // because the kernel's hash chain holds the reply tuple ahead of the original.
    let mut ct = table(Sysctls::default());
    let r = Rules::default();
    passed(send(
        &mut ct,
        t(0),
        udp("127.0.0.1:5000", "127.0.0.1:5000"),
        &r,
    ));
    assert!(lines(&ct, t(100))[0].contains("[UNREPLIED]"));
    passed(send(
        &mut ct,
        t(100),
        udp("127.0.0.1:5000", "127.0.0.1:5000"),
        &r,
    ));
    assert_eq!(
        lines(&ct, t(200)),
        ["udp      17 29 src=127.0.0.1 dst=127.0.0.1 sport=5000 dport=5000 src=127.0.0.1 dst=127.0.0.1 sport=5000 dport=5000 mark=0 use=1"]
    );
}
