//! The hook pipeline gives the same results with the rule index and the walk memo (the
//! default) as with plain in-order evaluation of every rule: the same fate and egress for
//! every packet, the same rule counters, the same conntrack table. The traffic is what a
//! node sees: new flows to kube-proxy services (DNAT, MASQUERADE), their replies, and many
//! more packets of the same flows (so remembered walks are replayed, in both directions and
//! in every ctstate), through filter chains that mix rules a walk can be remembered for
//! with rules that make it impure (statistic, recent, CONNMARK).

use proptest::prelude::*;
use sim_core::{IfName, Packet, SimDuration, SimRng, SimTime, TcpFlags};
use sim_netfilter::netns::{Egress, Ingress, Netns, NetnsConfig, Prefix};
use sim_netfilter::synth::KubeServices;
use sim_netfilter::Table;
use std::net::{IpAddr, SocketAddr};

const SERVICES: usize = 12;

fn ifn(s: &str) -> IfName {
    IfName::new(s).unwrap()
}

fn pick<'a, T>(r: &mut SimRng, xs: &'a [T]) -> &'a T {
    &xs[r.below(xs.len() as u64) as usize]
}

/// Random filter rules inserted ahead of kube-proxy's: pure ones (addresses, ports,
/// interfaces, marks, ctstate, MARK, REJECT) and a few that make a walk impure.
fn extra_rules(r: &mut SimRng, k: &KubeServices) -> Vec<(Table, String)> {
    let mut out = Vec::new();
    for _ in 0..(4 + r.below(10)) {
        let chain = *pick(r, &["FORWARD", "INPUT", "OUTPUT"]);
        let (proto, svc) = k.service(r.below(SERVICES as u64) as usize);
        let p = if proto == 17 { "udp" } else { "tcp" };
        let target = *pick(
            r,
            &[
                "-j ACCEPT",
                "-j DROP",
                "-j REJECT",
                "-j RETURN",
                "-j MARK --set-xmark 0x10/0x10",
                "",
            ],
        );
        let kind = r.below(14);
        // Broad rules decide nothing (most traffic must get through); the narrow ones (one
        // service, one client) may drop or reject.
        let target = if matches!(kind, 0 | 6) {
            target
        } else {
            *pick(r, &["-j MARK --set-xmark 0x10/0x10", "", "-j ACCEPT"])
        };
        let spec = match kind {
            13 => "-m conntrack --ctstate ESTABLISHED -m nfacct --nfacct-name acct".to_string(),
            11 => "-m conntrack --ctstate DNAT".to_string(),
            12 => "-m conntrack ! --ctstate SNAT,INVALID".to_string(),
            0 => format!("-d {}/32 -p {p} -m {p} --dport {}", svc.ip(), svc.port()),
            1 => "-m conntrack --ctstate ESTABLISHED".to_string(),
            2 => "-m conntrack --ctstate NEW,RELATED".to_string(),
            3 => match chain {
                "FORWARD" => "-i eth0 -o cni0".to_string(),
                "INPUT" => "-i eth0".to_string(),
                _ => "-o cni0".to_string(),
            },
            4 if chain == "INPUT" => "! -i eth0".to_string(),
            4 => "! -o eth0".to_string(),
            5 => "-m mark --mark 0x10/0x10".to_string(),
            6 => format!("-s 172.18.1.{}/32", 10 + r.below(3)),
            7 => "-p tcp -m tcp --tcp-flags SYN,ACK SYN".to_string(),
            8 => "-m statistic --mode nth --every 3 --packet 0".to_string(),
            9 => "-m recent --name seen --set".to_string(),
            _ => "-m conntrack --ctstate ESTABLISHED -j CONNMARK --set-xmark 0x1/0x1".to_string(),
        };
        let line = if spec.contains(" -j ") {
            format!("-I {chain} 1 {spec}")
        } else {
            format!("-I {chain} 1 {spec} {target}")
        };
        out.push((Table::Filter, line));
    }
    out
}

fn node(k: &KubeServices, extra: &[(Table, String)], indexing: bool) -> Netns {
    let mut n = Netns::new(NetnsConfig::new("eq", 7));
    n.add_interface(ifn("eth0"), &[("172.18.0.2".parse().unwrap(), 16)])
        .unwrap();
    n.add_interface(ifn("cni0"), &[("10.244.0.1".parse().unwrap(), 16)])
        .unwrap();
    n.add_route(
        Prefix::default_for(true),
        Some("172.18.0.1".parse().unwrap()),
        ifn("eth0"),
    )
    .unwrap();
    n.restore(&k.save_text(), false).unwrap();
    n.nfacct_add("acct").unwrap();
    for (t, line) in extra {
        n.iptables(*t, line)
            .unwrap_or_else(|e| panic!("{line}: {e}"));
    }
    n.set_rule_indexing(indexing);
    n
}

fn run(seed: u64) {
    let k = KubeServices::new(SERVICES, 2);
    let mut r = SimRng::derive(seed, "pipeline");
    let extra = extra_rules(&mut r, &k);
    let mut fast = node(&k, &extra, true);
    let mut plain = node(&k, &extra, false);
    // Flows: (client packet, the last packet that left towards the endpoint).
    let mut flows: Vec<(Packet, Option<(IfName, Packet)>)> = Vec::new();
    let mut now = SimTime::ZERO;
    let mut answers_back = 0;
    let flags = [
        TcpFlags::SYN,
        TcpFlags::ACK,
        TcpFlags::ACK,
        TcpFlags::ACK,
        TcpFlags(TcpFlags::FIN.0 | TcpFlags::ACK.0),
        TcpFlags::RST,
    ];
    for step in 0..300 {
        now += SimDuration::from_millis(r.below(3000));
        let (pkt, from) = if flows.is_empty() || r.below(5) == 0 {
            let (proto, mut svc) = k.service(r.below(SERVICES as u64) as usize);
            if r.below(3) == 0 {
                // Straight to a pod, no service: no NAT.
                svc = std::net::SocketAddrV4::new([10, 244, 3, 7].into(), 8080);
            }
            let src = SocketAddr::new(
                IpAddr::from([172, 18, 1, 10 + r.below(3) as u8]),
                40_000 + r.below(4) as u16,
            );
            let p = if proto == 17 {
                Packet::udp(src, svc.into())
            } else {
                Packet::tcp(src, svc.into(), TcpFlags::SYN)
            };
            flows.push((p, None));
            (p, Ingress::Interface(ifn("eth0")))
        } else {
            let i = r.below(flows.len() as u64) as usize;
            let (mut p, sent) = flows[i];
            match (sent, r.below(2)) {
                // The endpoint answers what it received.
                (Some((dev, out)), 0) => {
                    let mut reply = out;
                    (reply.src, reply.dst) = (out.dst, out.src);
                    if let (Some(s), Some(d)) = (out.sport(), out.dport()) {
                        reply.set_sport(d);
                        reply.set_dport(s);
                    }
                    reply.mark = 0;
                    if let sim_core::L4::Tcp { flags: f, .. } = &mut reply.l4 {
                        *f = if f.contains(TcpFlags::SYN) {
                            TcpFlags(TcpFlags::SYN.0 | TcpFlags::ACK.0)
                        } else {
                            *pick(&mut r, &flags)
                        };
                    }
                    (reply, Ingress::Interface(dev))
                }
                // The client sends again.
                _ => {
                    if let sim_core::L4::Tcp { flags: f, .. } = &mut p.l4 {
                        *f = *pick(&mut r, &flags);
                    }
                    (p, Ingress::Interface(ifn("eth0")))
                }
            }
        };
        let a = fast.process(now, pkt, from);
        let b = plain.process(now, pkt, from);
        assert_eq!(a, b, "seed {seed} step {step}: {pkt} from {from:?}");
        if let Some(Egress::Transmit { packet, .. }) = a.out.first() {
            let to_client =
                |c: &(Packet, _)| c.0.src == packet.dst && c.0.sport() == packet.dport();
            answers_back += usize::from(flows.iter().any(to_client));
        }
        // Remember what went towards an endpoint, for its answer.
        if let Some(Egress::Transmit { dev, packet, .. }) = a.out.first() {
            if let Some(f) = flows.iter_mut().find(|(c, _)| {
                c.src == packet.src && c.sport() == packet.sport() || {
                    // Masqueraded: the flow whose client sent it.
                    c.src == pkt.src && c.sport() == pkt.sport() && c.dst == pkt.dst
                }
            }) {
                if packet.dst != f.0.src {
                    f.1 = Some((*dev, *packet));
                }
            }
        }
    }
    assert!(
        answers_back > 10,
        "seed {seed}: only {answers_back} answers reached a client"
    );
    assert_eq!(fast.save(true), plain.save(true), "seed {seed}: counters");
    let acct = |n: &Netns| n.rules_state().nfacct_counters(n.ruleset(), "acct");
    assert_eq!(acct(&fast), acct(&plain), "seed {seed}: nfacct counters");
    let filter = sim_conntrack::Filter::default();
    assert_eq!(
        fast.conntrack().dump(now, &filter),
        plain.conntrack().dump(now, &filter),
        "seed {seed}: conntrack tables"
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn indexed_and_memoized_pipeline_agrees_with_plain_evaluation(seed in any::<u64>()) {
        run(seed);
    }
}

/// The test can fail: a node whose rules differ (one more counted rule) is told apart.
#[test]
fn a_different_node_is_told_apart() {
    let k = KubeServices::new(SERVICES, 2);
    let mut a = node(&k, &[], true);
    let mut b = node(
        &k,
        &[(
            Table::Filter,
            "-I FORWARD 1 -m conntrack --ctstate ESTABLISHED".into(),
        )],
        true,
    );
    let (_, svc) = k.service(0);
    let p = Packet::udp("172.18.1.10:40000".parse().unwrap(), svc.into());
    let from = Ingress::Interface(ifn("eth0"));
    a.process(SimTime::ZERO, p, from);
    b.process(SimTime::ZERO, p, from);
    assert_ne!(a.save(true), b.save(true));
}

/// A node with enough Services for the first-packet prefetch hints (`hint.rs`: programs of
/// 4,096 rules and more) gives the same results as plain evaluation, which takes no hint:
/// every first packet's fate and egress, the counters and the conntrack table.
#[test]
fn a_node_with_hints_agrees_with_plain_evaluation() {
    let k = KubeServices::new(700, 3);
    let mut fast = node(&k, &[], true);
    let mut plain = node(&k, &[], false);
    let mut r = SimRng::derive(15, "hints");
    let from = Ingress::Interface(ifn("eth0"));
    let now = SimTime::ZERO;
    let mut dnat = 0;
    for i in 0..400u16 {
        let (proto, svc) = k.service(r.below(k.services as u64) as usize);
        let src = SocketAddr::new(IpAddr::from([172, 18, 1, 10]), 20_000 + i);
        let p = if proto == 17 {
            Packet::udp(src, svc.into())
        } else {
            Packet::tcp(src, svc.into(), TcpFlags::SYN)
        };
        let a = fast.process(now, p, from);
        assert_eq!(a, plain.process(now, p, from), "packet {i}: {p}");
        if let Some(Egress::Transmit { packet, .. }) = a.out.first() {
            dnat += usize::from(packet.dst != p.dst);
        }
    }
    assert_eq!(dnat, 400, "every first packet reached an endpoint");
    assert_eq!(fast.save(true), plain.save(true), "counters");
    let filter = sim_conntrack::Filter::default();
    assert_eq!(
        fast.conntrack().dump(now, &filter),
        plain.conntrack().dump(now, &filter),
        "conntrack tables"
    );
}
