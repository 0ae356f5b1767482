//! Laws of the table, checked on random workloads.
mod common;
use common::*;
use proptest::prelude::*;
use sim_conntrack::*;
use sim_core::{Packet, SimTime, TcpFlags};
use std::net::SocketAddr;

/// One step of a random workload.
#[derive(Clone, Debug)]
enum Step {
    /// UDP from client `c` (port p) to service `s`, answered or not.
    Udp { c: u8, p: u8, s: u8, answer: bool },
    /// A TCP packet between client `c` and service `s` with flags.
    Tcp {
        c: u8,
        s: u8,
        flags: u8,
        reply: bool,
    },
    /// Time passes.
    Wait { ms: u32 },
    /// A reconciler deletes entries to one endpoint.
    Delete { ep: u8 },
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0u8..6, 0u8..3, 0u8..3, any::<bool>()).prop_map(|(c, p, s, answer)| Step::Udp { c, p, s, answer }),
        2 => (0u8..6, 0u8..3, prop::sample::select(vec![0x02u8, 0x12, 0x10, 0x11, 0x14, 0x04, 0x01]), any::<bool>())
            .prop_map(|(c, s, flags, reply)| Step::Tcp { c, s, flags, reply }),
        2 => (0u32..200_000).prop_map(|ms| Step::Wait { ms }),
        1 => (0u8..3).prop_map(|ep| Step::Delete { ep }),
    ]
}

fn client(c: u8, p: u8) -> SocketAddr {
    sa(&format!("127.1.0.{}:{}", c + 1, 40000 + u16::from(p)))
}
fn service(s: u8) -> SocketAddr {
    sa(&format!("127.96.0.{}:53", s + 10))
}
fn endpoint(s: u8) -> SocketAddr {
    sa(&format!("127.244.0.{}:5353", s + 1))
}

fn rules() -> Rules {
    Rules {
        dnat: (0..3u8)
            .map(|s| {
                (
                    service(s),
                    NatRange::to_addr_port(endpoint(s).ip(), endpoint(s).port()),
                )
            })
            .collect(),
        // Everything leaves through one masquerade address: port clashes happen.
        snat: Some(NatRange::to_addr("127.0.0.9".parse().unwrap())),
        ..Rules::default()
    }
}

/// Runs a workload; returns the event lines and the final dump.
fn run(
    seed: u64,
    steps: &[Step],
    mut check: impl FnMut(&Conntrack, SimTime),
) -> (Vec<String>, Vec<String>) {
    let mut s = Sysctls::default();
    s.set("nf_conntrack_max", "12").unwrap();
    s.set("nf_conntrack_buckets", "4").unwrap();
    let mut ct = Conntrack::new(seed, "prop/conntrack", s);
    let r = rules();
    let mut now = SimTime::ZERO;
    let mut events = Vec::new();
    for st in steps {
        now += sim_core::SimDuration::from_millis(1);
        match *st {
            Step::Udp { c, p, s, answer } => {
                if let Out::Passed(q, Some(_)) =
                    send(&mut ct, now, Packet::udp(client(c, p), service(s)), &r)
                {
                    if answer {
                        let back = Packet::udp(
                            SocketAddr::new(q.dst, q.dport().unwrap()),
                            SocketAddr::new(q.src, q.sport().unwrap()),
                        );
                        let a = send(&mut ct, now, back, &r);
                        if let Out::Passed(a, Some(_)) = a {
                            assert_eq!(a.dst, client(c, p).ip(), "reply goes back to the client");
                            assert_eq!(a.src, service(s).ip(), "reply comes from the service IP");
                        }
                    }
                }
            }
            Step::Tcp { c, s, flags, reply } => {
                let p = if reply {
                    Packet::tcp(endpoint(s), client(c, 0), TcpFlags(flags))
                } else {
                    Packet::tcp(client(c, 0), service(s), TcpFlags(flags))
                };
                let _ = send(&mut ct, now, p, &r);
            }
            Step::Wait { ms } => {
                now += sim_core::SimDuration::from_millis(u64::from(ms));
                ct.expire(now);
            }
            Step::Delete { ep } => {
                let f = Filter::parse(&format!("--reply-src {}", endpoint(ep).ip())).unwrap();
                ct.delete(now, &f);
            }
        }
        check(&ct, now);
        events.extend(
            ct.drain_events()
                .iter()
                .map(|e| format!("{} {}", e.at.as_nanos(), e)),
        );
    }
    let dump = ct
        .list(now, &Filter::all())
        .iter()
        .map(|e| e.list_line(now).to_string())
        .collect();
    (events, dump)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn lookup_by_either_tuple_finds_the_same_entry(steps in prop::collection::vec(step(), 1..60)) {
        run(1, &steps, |ct, now| {
            for e in ct.list(now, &Filter::all()) {
                let (a, da) = ct.find(now, &e.orig).expect("found by original tuple");
                let (b, db) = ct.find(now, &e.reply).expect("found by reply tuple");
                assert_eq!(a.id, e.id);
                assert_eq!(b.id, e.id);
                assert_eq!((da, db), (Dir::Original, Dir::Reply));
            }
            assert!(ct.count() as usize >= ct.len());
            assert!(ct.len() <= 12, "nf_conntrack_max holds");
        });
    }

    #[test]
    fn same_seed_gives_the_same_event_sequence(steps in prop::collection::vec(step(), 1..60), seed in 0u64..4) {
        let a = run(seed, &steps, |_, _| {});
        let b = run(seed, &steps, |_, _| {});
        prop_assert_eq!(a, b);
    }

    #[test]
    fn events_are_in_time_order_and_every_new_entry_is_destroyed_once(steps in prop::collection::vec(step(), 1..60)) {
        let (events, dump) = run(3, &steps, |_, _| {});
        let times: Vec<u64> = events.iter().map(|l| l.split(' ').next().unwrap().parse().unwrap()).collect();
        prop_assert!(times.windows(2).all(|w| w[0] <= w[1]), "{:?}", events);
        let news = events.iter().filter(|l| l.contains("[NEW]")).count();
        let destroys = events.iter().filter(|l| l.contains("[DESTROY]")).count();
        prop_assert_eq!(news, destroys + dump.len());
    }

    #[test]
    fn udp_timeouts_never_go_backwards_under_refresh(gaps in prop::collection::vec(0u64..40_000, 1..40), answer_at in 0usize..40) {
        let mut ct = table(Sysctls::default());
        let r = Rules::default();
        let mut now = SimTime::ZERO;
        let mut last: Option<(EntryId, SimTime)> = None;
        for (i, g) in gaps.iter().enumerate() {
            now += sim_core::SimDuration::from_millis(*g);
            let p = if i == answer_at { udp("127.0.0.2:53", "127.0.0.1:4000") } else { udp("127.0.0.1:4000", "127.0.0.2:53") };
            let _ = send(&mut ct, now, p, &r);
            if let Some((e, _)) = ct.find(now, &sim_conntrack::Tuple::from_packet(&udp("127.0.0.1:4000", "127.0.0.2:53"))) {
                let Expiry::At(exp) = e.expiry else { panic!("confirmed entries have an instant") };
                if let Some((id, prev)) = last {
                    if id == e.id {
                        prop_assert!(exp >= prev, "expiry went back from {} to {}", prev, exp);
                    }
                }
                last = Some((e.id, exp));
            }
        }
    }
}
