//! A minimal hook pipeline for the tests: conntrack in, DNAT at a Dst hook, SNAT at a Src
//! hook, confirm. It calls the table in the order the crate docs prescribe.
#![allow(dead_code)]

use sim_conntrack::*;
use sim_core::{Packet, SimTime, TcpFlags};
use std::net::SocketAddr;

pub fn t(ms: u64) -> SimTime {
    SimTime::from_millis(ms)
}

pub fn sa(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

pub fn udp(src: &str, dst: &str) -> Packet {
    Packet::udp(sa(src), sa(dst))
}

pub fn tcp(src: &str, dst: &str, flags: TcpFlags) -> Packet {
    Packet::tcp(sa(src), sa(dst), flags)
}

/// NAT rules of the test pipeline: a DNAT for packets to `dnat.0` (address and port), and an
/// optional SNAT/MASQUERADE range for everything.
#[derive(Clone, Default)]
pub struct Rules {
    pub dnat: Vec<(SocketAddr, NatRange)>,
    pub snat: Option<NatRange>,
    pub drop_before_confirm: bool,
}

/// What happened to a packet.
#[derive(Debug, Clone, PartialEq)]
pub enum Out {
    Passed(Packet, Option<CtHandle>),
    Dropped,
}

/// One packet through PREROUTING (conntrack in, DNAT) and POSTROUTING (SNAT, confirm).
pub fn send(ct: &mut Conntrack, now: SimTime, mut p: Packet, rules: &Rules) -> Out {
    let h = match ct.conntrack_in(now, &p) {
        CtVerdict::Tracked(h) => h,
        CtVerdict::Invalid(_) => return Out::Passed(p, None),
        CtVerdict::Drop(_) => return Out::Dropped,
    };
    if !ct.nat_initialized(h.id, Manip::Dst) {
        let rule = rules
            .dnat
            .iter()
            .find(|(d, _)| p.dst == d.ip() && p.dport() == Some(d.port()));
        match rule {
            Some((_, r)) => {
                ct.nat_setup(h.id, Manip::Dst, r).unwrap();
            }
            None => {
                ct.nat_null_binding(h.id, Manip::Dst).unwrap();
            }
        }
    }
    ct.nat_packet(h, Manip::Dst, &mut p);
    if rules.drop_before_confirm {
        ct.discard(now, h);
        return Out::Dropped;
    }
    if !ct.nat_initialized(h.id, Manip::Src) {
        match &rules.snat {
            Some(r) => {
                ct.nat_setup(h.id, Manip::Src, r).unwrap();
            }
            None => {
                ct.nat_null_binding(h.id, Manip::Src).unwrap();
            }
        }
    }
    ct.nat_packet(h, Manip::Src, &mut p);
    match ct.confirm(now, h) {
        Ok(()) => Out::Passed(p, Some(h)),
        Err(_) => Out::Dropped,
    }
}

pub fn passed(o: Out) -> Packet {
    match o {
        Out::Passed(p, _) => p,
        Out::Dropped => panic!("packet was dropped"),
    }
}

pub fn lines(ct: &Conntrack, now: SimTime) -> Vec<String> {
    ct.list(now, &Filter::all())
        .iter()
        .map(|e| e.list_line(now).to_string())
        .collect()
}

pub fn event_lines(ct: &mut Conntrack) -> Vec<String> {
    ct.drain_events().iter().map(|e| e.to_string()).collect()
}

pub fn table(sysctls: Sysctls) -> Conntrack {
    Conntrack::new(7, "test/conntrack", sysctls)
}
