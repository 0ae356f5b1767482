//! The first-match index gives exactly what plain in-order evaluation gives: same verdicts,
//! NAT requests, marks, counters (every rule and policy), statistic draws and nth counters,
//! on random rulesets with long runs of indexable rules mixed with rules that are not, and
//! random packets (many of which hit the same rules, RETURN into the middle of a run, or
//! match nothing).

use proptest::prelude::*;
use sim_core::{Packet, SimRng, SimTime, TcpFlags};
use sim_netfilter::*;

const DSTS: [&str; 6] = [
    "10.96.0.1",
    "10.96.0.2",
    "10.96.0.3",
    "10.96.0.4",
    "10.96.0.5",
    "10.0.0.9",
];
const PORTS: [u16; 5] = [53, 80, 443, 8080, 9153];

fn pick<'a, T>(r: &mut SimRng, xs: &'a [T]) -> &'a T {
    &xs[r.below(xs.len() as u64) as usize]
}

/// A random ruleset (nat and filter) built from `seed`.
fn random_ruleset(seed: u64) -> String {
    let mut r = SimRng::derive(seed, "ruleset");
    let mut nat = String::from(
        "*nat\n:PREROUTING ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n:POSTROUTING ACCEPT [0:0]\n:BIG - [0:0]\n:MASQ - [0:0]\n:SVC1 - [0:0]\n:SVC2 - [0:0]\n",
    );
    nat.push_str("-A PREROUTING -m mark --mark 0x7 -j RETURN\n-A PREROUTING -j BIG\n");
    nat.push_str("-A MASQ -j MARK --set-xmark 0x4000/0x4000\n");
    nat.push_str("-A SVC1 -m statistic --mode random --probability 0.5 -j DNAT --to-destination 10.244.0.1\n-A SVC1 -j DNAT --to-destination 10.244.0.2\n");
    nat.push_str("-A SVC2 -m statistic --mode nth --every 3 --packet 1 -j RETURN\n-A SVC2 -j MARK --set-xmark 0x1/0x1\n");
    let n = 60 + r.below(100) as usize;
    // Runs of indexable rules (long enough to be indexed) separated by a few others.
    let mut simple_left = 0u64;
    for _ in 0..n {
        if simple_left == 0 {
            simple_left = 20 + r.below(40);
        }
        simple_left -= 1;
        let kind = if simple_left < 3 {
            7 + r.below(3)
        } else {
            r.below(7)
        };
        let proto = *pick(&mut r, &["tcp", "udp"]);
        let port = *pick(&mut r, &PORTS);
        let dst = if r.below(5) == 0 {
            String::new()
        } else {
            format!(" -d {}/32", pick(&mut r, &DSTS))
        };
        let target = match r.below(7) {
            0 => " -j MASQ",
            1 => " -j SVC1",
            2 => " -j SVC2",
            3 => " -j RETURN",
            4 => "",
            5 => " -j MARK --set-xmark 0x10/0x10",
            _ => " -j ACCEPT",
        };
        let line = match kind {
            // Mostly indexable: -d IP/32 -p P -m comment -m P --dport N.
            0..=6 => format!(
                "-A BIG{dst} -p {proto} -m comment --comment \"svc\" -m {proto} --dport {port}{target}\n"
            ),
            // Not indexable: port ranges, sources, statistic, inverted ports, marks.
            7 => format!("-A BIG{dst} -p {proto} -m {proto} --dport {port}:{}{target}\n", port + 5),
            8 => format!(
                "-A BIG -s 10.244.0.0/16{dst} -p {proto} -m {proto} --dport {port}{target}\n"
            ),
            _ => match r.below(9) {
                0 => format!("-A BIG -m statistic --mode random --probability 0.3{target}\n"),
                1 => format!("-A BIG -p {proto} -m {proto} ! --dport {port}{target}\n"),
                2 => format!("-A BIG -i eth+ ! -o lo -m mark --mark 0x10/0x10{target}\n"),
                3 => format!("-A BIG -p {proto} -m multiport --dports 53,80:90{target}\n"),
                4 => format!("-A BIG -p icmp -m icmp --icmp-type echo-request{target}\n"),
                5 => format!("-A BIG -m addrtype --dst-type LOCAL{target}\n"),
                6 => format!("-A BIG -m recent --name R --rcheck --seconds 1{target}\n-A BIG -m recent --name R --set\n"),
                7 => "-A BIG -m conntrack --ctstate NEW --ctorigdst 10.96.0.0/12 -j CONNMARK --set-xmark 0x5/0xff\n".to_string(),
                _ => format!("-A BIG ! -s 10.244.0.0/16 -j LOG --log-prefix x\n-A BIG -m statistic --mode nth --every 2 --packet 1{target}\n"),
            },
        };
        nat.push_str(&line);
    }
    nat.push_str("COMMIT\n");
    // A filter table with the same shape, ending in REJECT/DROP decisions.
    let mut filter = String::from(
        "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:SVCS - [0:0]\n-A FORWARD -j SVCS\n",
    );
    for _ in 0..(30 + r.below(60)) {
        let proto = *pick(&mut r, &["tcp", "udp"]);
        let port = *pick(&mut r, &PORTS);
        let dst = pick(&mut r, &DSTS);
        let target = *pick(
            &mut r,
            &[" -j REJECT", " -j DROP", " -j ACCEPT", "", " -j RETURN"],
        );
        if r.below(8) == 0 {
            filter.push_str(&format!("-A SVCS -m conntrack --ctstate NEW{target}\n"));
        } else {
            filter.push_str(&format!(
                "-A SVCS -d {dst}/32 -p {proto} -m {proto} --dport {port}{target}\n"
            ));
        }
    }
    filter.push_str("COMMIT\n");
    format!("{filter}{nat}")
}

fn random_packet(r: &mut SimRng) -> Packet {
    let dst = pick(r, &DSTS);
    let port = *pick(r, &PORTS);
    let src = format!(
        "10.{}.0.{}:{}",
        pick(r, &[244u8, 1]),
        r.below(5) + 1,
        1000 + r.below(5)
    );
    let mut p = match r.below(5) {
        0 => Packet::icmp_echo_request(
            src.split(':').next().unwrap().parse().unwrap(),
            dst.parse().unwrap(),
            1,
            1,
        ),
        1 | 2 => Packet::udp(
            src.parse().unwrap(),
            format!("{dst}:{port}").parse().unwrap(),
        ),
        _ => Packet::tcp(
            src.parse().unwrap(),
            format!("{dst}:{port}").parse().unwrap(),
            TcpFlags::SYN,
        ),
    };
    p.mark = *pick(r, &[0u32, 0, 0, 0x7, 0x10]);
    const IIFS: [&str; 3] = ["eth0", "lo", "veth1"];
    const OIFS: [&str; 2] = ["eth0", "lo"];
    let iif = pick::<&str>(r, &IIFS);
    let oif = pick::<&str>(r, &OIFS);
    p.iif = Some(sim_core::IfName::new(iif).unwrap());
    p.oif = Some(sim_core::IfName::new(oif).unwrap());
    p
}

fn check(seed: u64) {
    let text = random_ruleset(seed);
    let mut indexed = Ruleset::new();
    indexed
        .restore(&text, &RestoreOptions::default())
        .unwrap_or_else(|e| panic!("{e}\n{text}"));
    assert!(
        indexed.chain(Table::Nat, "BIG").unwrap().is_indexed(),
        "the test must exercise the index"
    );
    let mut plain = indexed.clone();
    plain.set_indexing(false);
    let addrs = LocalAddrs::new();
    let (mut s1, mut s2) = (RulesetState::new(), RulesetState::new());
    let (mut g1, mut g2) = (SimRng::derive(seed, "stat"), SimRng::derive(seed, "stat"));
    let mut pr = SimRng::derive(seed, "packets");
    for i in 0..200 {
        let pkt = random_packet(&mut pr);
        for (table, hook) in [
            (Table::Nat, Hook::PreRouting),
            (Table::Filter, Hook::Forward),
        ] {
            let ct = CtState::Tracked(CtInfo {
                info: CtInfoKind::New,
                dir: rule::CtDirection::Original,
                status: 0,
                orig: CtTuple {
                    src: "10.244.0.1".parse().unwrap(),
                    dst: "10.96.0.1".parse().unwrap(),
                    proto: 6,
                    sport: 1,
                    dport: 2,
                },
                reply: CtTuple {
                    src: "10.96.0.1".parse().unwrap(),
                    dst: "10.244.0.1".parse().unwrap(),
                    proto: 6,
                    sport: 2,
                    dport: 1,
                },
                mark: 0,
                expires_secs: 30,
            });
            let now = SimTime::from_millis(i * 300);
            let mut c1 = EvalCtx::new(pkt, &addrs, now, &mut g1);
            c1.ct = ct;
            let v1 = indexed.run_hook(table, hook, &mut c1, &mut s1, None);
            let m1 = c1.packet.mark;
            let mut c2 = EvalCtx::new(pkt, &addrs, now, &mut g2);
            c2.ct = ct;
            let ct1 = c1.ct;
            let v2 = plain.run_hook(table, hook, &mut c2, &mut s2, None);
            assert_eq!(v1, v2, "seed {seed} packet {i} {pkt} {table} {hook}");
            assert_eq!(m1, c2.packet.mark, "seed {seed} packet {i}");
            assert_eq!(ct1, c2.ct, "seed {seed} packet {i}");
            // The traced walk (always in order) agrees too.
            if i % 50 == 0 {
                let mut g3 = g2.clone();
                let mut s3 = s2.clone();
                let mut c3 = EvalCtx::new(pkt, &addrs, now, &mut g3);
                c3.ct = ct;
                let mut t = Trace::new();
                let v3 = indexed.run_hook(table, hook, &mut c3, &mut s3, Some(&mut t));
                let mut g4 = g2.clone();
                let mut s4 = s2.clone();
                let mut c4 = EvalCtx::new(pkt, &addrs, now, &mut g4);
                c4.ct = ct;
                let v4 = plain.run_hook(table, hook, &mut c4, &mut s4, None);
                assert_eq!(v3, v4);
            }
        }
    }
    let opts = SaveOptions {
        counters: true,
        ..SaveOptions::default()
    };
    assert_eq!(
        indexed.save(&s1, &opts),
        plain.save(&s2, &opts),
        "seed {seed}: counters differ"
    );
    assert_eq!(
        g1.next_u64(),
        g2.next_u64(),
        "seed {seed}: random draws differ"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn index_and_in_order_evaluation_agree(seed in any::<u64>()) {
        check(seed);
    }
}

#[test]
fn kube_proxy_shaped_rulesets_agree() {
    let k = synth::KubeServices::new(300, 3);
    let mut indexed = Ruleset::from_save(&k.save_text()).unwrap();
    assert!(indexed
        .chain(Table::Nat, "KUBE-SERVICES")
        .unwrap()
        .is_indexed());
    let mut plain = indexed.clone();
    plain.set_indexing(false);
    indexed.set_indexing(true);
    let addrs = LocalAddrs::new();
    let (mut s1, mut s2) = (RulesetState::new(), RulesetState::new());
    let (mut g1, mut g2) = (SimRng::derive(9, "stat"), SimRng::derive(9, "stat"));
    let mut pr = SimRng::derive(9, "pk");
    for i in 0..2000u64 {
        let svc = pr.below(320) as usize; // some beyond the last service: no match
        let (proto, addr) = k.service(svc);
        let src = format!("10.1.{}.{}:{}", i % 200, i % 250 + 1, 1024 + i);
        let dst = format!("{}:{}", addr.ip(), addr.port());
        let pkt = if proto == 17 {
            Packet::udp(src.parse().unwrap(), dst.parse().unwrap())
        } else {
            Packet::tcp(src.parse().unwrap(), dst.parse().unwrap(), TcpFlags::SYN)
        };
        let mut c1 = EvalCtx::new(pkt, &addrs, SimTime::ZERO, &mut g1);
        let v1 = indexed.run_hook(Table::Nat, Hook::PreRouting, &mut c1, &mut s1, None);
        let m1 = c1.packet.mark;
        let mut c2 = EvalCtx::new(pkt, &addrs, SimTime::ZERO, &mut g2);
        let v2 = plain.run_hook(Table::Nat, Hook::PreRouting, &mut c2, &mut s2, None);
        assert_eq!(v1, v2);
        assert_eq!(m1, c2.packet.mark);
        if svc < 300 {
            assert!(matches!(v1.nat, Some(NatRequest::Dnat(_))));
        }
    }
    let opts = SaveOptions {
        counters: true,
        ..SaveOptions::default()
    };
    assert_eq!(indexed.save(&s1, &opts), plain.save(&s2, &opts));
}
