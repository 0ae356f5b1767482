//! [`ConntrackOps`] on sim-conntrack's table: what kube-proxy's netlink calls
//! (`ConntrackTableList`, `ConntrackDeleteFilters`) do to a node's kernel.

use super::cleanup::{ConntrackOps, CtEntry, CtFilter, CtTuple};
use sim_conntrack::{AddrMatch, Conntrack, Filter};
use sim_core::SimTime;
use std::net::IpAddr;

/// A node's conntrack table at one instant, seen through [`ConntrackOps`]. Deletions emit the
/// table's `[DESTROY]` events with the userspace cause, as `conntrack -D` does.
pub struct SimConntrackOps<'a> {
    /// The table.
    pub table: &'a mut Conntrack,
    /// The instant of the calls (entries expired by then are not listed).
    pub now: SimTime,
}

impl<'a> SimConntrackOps<'a> {
    /// The table at `now`.
    pub fn new(table: &'a mut Conntrack, now: SimTime) -> SimConntrackOps<'a> {
        SimConntrackOps { table, now }
    }
}

fn host(a: IpAddr) -> AddrMatch {
    AddrMatch {
        addr: a,
        prefix: if a.is_ipv4() { 32 } else { 128 },
    }
}

/// The sim-conntrack filter selecting what `f` selects.
pub fn to_filter(f: &CtFilter) -> Filter {
    Filter {
        proto: f.proto,
        orig_src: f.orig_src.map(host),
        orig_dst: f.orig_dst.map(host),
        reply_src: f.reply_src.map(host),
        reply_dst: f.reply_dst.map(host),
        orig_sport: f.orig_sport,
        orig_dport: f.orig_dport,
        reply_sport: f.reply_sport,
        reply_dport: f.reply_dport,
        ..Filter::default()
    }
}

/// kube-proxy's view of a sim-conntrack entry (protocol and both tuples).
pub fn from_entry(e: &sim_conntrack::CtEntry) -> CtEntry {
    let t = |t: &sim_conntrack::Tuple| CtTuple {
        src: t.src,
        dst: t.dst,
        sport: t.sport,
        dport: t.dport,
    };
    CtEntry {
        proto: e.proto(),
        orig: t(&e.orig),
        reply: t(&e.reply),
    }
}

impl ConntrackOps for SimConntrackOps<'_> {
    fn list(&mut self, filter: &CtFilter) -> Vec<CtEntry> {
        self.table
            .list(self.now, &to_filter(filter))
            .iter()
            .map(from_entry)
            .collect()
    }
    fn delete(&mut self, filter: &CtFilter) -> usize {
        self.table.delete(self.now, &to_filter(filter)).len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeproxy::cleanup::IPPROTO_UDP;
    use sim_conntrack::{CtVerdict, Sysctls};
    use sim_core::Packet;

    fn table_with_flow(now: SimTime) -> Conntrack {
        let mut ct = Conntrack::new(1, "test/conntrack", Sysctls::default());
        let p = Packet::udp(
            "10.244.3.9:40123".parse().unwrap(),
            "10.96.0.10:53".parse().unwrap(),
        );
        match ct.conntrack_in(now, &p) {
            CtVerdict::Tracked(h) => ct.confirm(now, h).unwrap(),
            other => panic!("{other:?}"),
        }
        ct
    }

    #[test]
    fn lists_and_deletes_through_the_real_table() {
        let now = SimTime::from_secs(1);
        let mut table = table_with_flow(now);
        let mut ops = SimConntrackOps::new(&mut table, now);
        let all = ops.list(&CtFilter::udp());
        assert_eq!(all.len(), 1);
        let e = all[0];
        assert_eq!(e.proto, IPPROTO_UDP);
        assert_eq!(e.orig.dport, 53);
        // No NAT here: the reply comes from the address the client sent to.
        assert_eq!(e.reply.src, e.orig.dst);
        let miss = CtFilter {
            reply_src: Some("10.244.1.7".parse().unwrap()),
            ..CtFilter::udp()
        };
        assert_eq!(ops.delete(&miss), 0);
        assert_eq!(ops.delete(&CtFilter::exact(&e)), 1);
        assert!(ops.list(&CtFilter::udp()).is_empty());
        assert!(table.is_empty());
    }

    #[test]
    fn expired_entries_are_not_listed() {
        let mut table = table_with_flow(SimTime::ZERO);
        // An unreplied UDP entry lives 30 s.
        let mut ops = SimConntrackOps::new(&mut table, SimTime::from_secs(31));
        assert!(ops.list(&CtFilter::udp()).is_empty());
    }
}
