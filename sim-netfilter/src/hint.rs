//! Software prefetch hints for a new flow's first packet.
//!
//! A first packet through a node with many Services reads memory no other recent packet
//! read: its Service's entry in `KUBE-SERVICES`' index, the dispatching rule, the
//! `KUBE-SVC-`/`KUBE-SEP-` chains, their counter slots and DNAT's range. Read in the order
//! the walk needs them, each is a wait for memory of its own; at 10,000 Services that made a
//! first packet nearly twice as slow as at 100 (issue 15). The hints here ask the CPU for
//! those lines early and side by side. A hint changes no result: it reads only what the walk
//! reads anyway, and a prefetch cannot fault or write.

use sim_core::Packet;

use crate::compile::Program;
use crate::index::{Key, NO_JUMP};
use crate::ruleset::Ruleset;
use crate::state::RulesetState;
use crate::types::Table;

/// How many compiled rules from a jump's target on [`prefetch_hit`] asks for: a Service
/// of two endpoints has 3 `KUBE-SVC-` rules and 2 per `KUBE-SEP-` chain.
pub(crate) const PREFETCH_RULES: usize = 8;

/// How many of the kept targets after a jump [`prefetch_hit`] asks for: the DNAT ranges of
/// a Service's first endpoints.
const PREFETCH_OTHERS: usize = 3;

/// Programs with fewer rules than this get no hints: at 64 bytes a rule, a program of up
/// to 256 KiB mostly stays in a core's L2 cache, and there is nothing to hide.
pub(crate) const HINT_MIN_RULES: usize = 4096;

/// How many indexed chains of the nat table [`Ruleset::prefetch_new_flow`] looks in
/// (kube-proxy's `KUBE-SERVICES`, and `KUBE-NODEPORTS` when it is long).
const HINT_CHAINS: usize = 2;

/// Asks the CPU for what a walk reads after an index hit at rule `pos` of the indexed chain
/// whose rules start at `start`: the rule and its counter slot, and when the rule jumps to
/// `to`, the rules from there on, their counter slots and the targets kept in `others` from
/// `others` on.
///
/// The program lays chains out depth first (`compile::layout_order`), so the rules that
/// follow a Service's `KUBE-SVC-` chain are its `KUBE-SEP-` chains; `others` is filled in
/// the same order, and so are a table's counter slots. So none of this needs the rules'
/// own lines: the program's copy of the index gives the target and its first kept target
/// ([`crate::index::ChainIndex::annotate`]), and a rule's slot is most likely the chain's
/// first rule's plus the distance between them (a guess: a wrong one only loads a line for
/// nothing). At 10,000 Services none of it is in the cache; walked rule by rule, each line
/// was a wait of its own. Asked for together, they load side by side.
#[inline]
fn prefetch_hit(
    prog: &Program,
    state: &RulesetState,
    start: usize,
    pos: usize,
    (to, others): (u32, u32),
) {
    let (Some(first), Some(rule)) = (prog.rules.get(start), prog.rules.get(pos)) else {
        return;
    };
    sim_core::prefetch::line(rule);
    let slot_of = |p: usize| (first.slot_idx as usize + p).checked_sub(start);
    if let Some(s) = slot_of(pos) {
        state.slots.prefetch_run(s, 1);
    }
    if to == NO_JUMP {
        return;
    }
    let to = to as usize;
    let ahead = prog.rules.get(to..).unwrap_or(&[]);
    for r in ahead.iter().take(PREFETCH_RULES) {
        sim_core::prefetch::line(r);
    }
    if let Some(s) = slot_of(to) {
        state.slots.prefetch_run(s, PREFETCH_RULES);
    }
    let kept = prog.others.get(others as usize..).unwrap_or(&[]);
    for t in kept.iter().take(PREFETCH_OTHERS) {
        sim_core::prefetch::line(t);
    }
}

impl Ruleset {
    /// Asks the CPU for the nat rules the first packet of a new flow `pkt` is likely to walk:
    /// in each indexed nat chain (kube-proxy's `KUBE-SERVICES`), the rule its destination,
    /// protocol and port select, and what `prefetch_hit` asks for after it (the Service's
    /// `KUBE-SVC-` and `KUBE-SEP-` chains, their counters and DNAT ranges).
    ///
    /// A hint: it changes no result and nothing in the ruleset or `state`. A namespace
    /// calls it when conntrack finds no entry for a packet, so that the lines load while
    /// the entry is made, before the nat walk needs them. Its one map probe is the one the
    /// walk's index lookup makes next, which then finds it in the cache. (The walk itself
    /// asks for nothing. Issued at the walk's own index hit, the same prefetches helped on
    /// their own, but the hint's come a thousand instructions earlier and help more; both
    /// together only repeated the hint's, at 120 instructions a first packet.)
    #[inline]
    pub fn prefetch_new_flow(&self, state: &RulesetState, pkt: &Packet) {
        if !self.indexing {
            return;
        }
        let Some(td) = self.tables[Table::Nat.index()].as_deref() else {
            return;
        };
        let prog = &*td.program;
        if prog.rules.len() < HINT_MIN_RULES {
            return;
        }
        let (std::net::IpAddr::V4(dst), Some(dport)) = (pkt.dst, pkt.dport()) else {
            return;
        };
        let key = Key {
            dst: Some(u32::from(dst)),
            proto: pkt.protocol(),
            dport,
        };
        for (chain, ix) in prog.indexes.iter().take(HINT_CHAINS) {
            if let Some((at, to, others)) = ix.first_hit(key) {
                let start = prog.spans[*chain as usize].start as usize;
                prefetch_hit(prog, state, start, start + at, (to, others));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    //! The hint asks for the lines the walk will read: for a packet to a Service, the rule
    //! it finds is that Service's `KUBE-SERVICES` rule, and the rules it asks for from that
    //! rule's target on are the Service's `KUBE-SVC-` chain and then its `KUBE-SEP-` chains.
    use super::*;
    use crate::compile::CTarget;
    use crate::synth::KubeServices;
    use crate::RestoreOptions;
    use sim_core::Packet;
    use std::net::{SocketAddr, SocketAddrV4};

    #[test]
    fn the_hint_finds_the_services_rule_and_its_chains() {
        // Enough Services for a program the hints are for (HINT_MIN_RULES).
        let k = KubeServices::new(600, 2);
        let mut rs = Ruleset::new();
        rs.restore(&k.save_text(), &RestoreOptions::default())
            .expect("synthetic ruleset loads");
        let td = rs.tables[Table::Nat.index()].as_deref().expect("nat table");
        let prog = &*td.program;
        assert!(
            prog.rules.len() >= HINT_MIN_RULES,
            "{} rules",
            prog.rules.len()
        );
        let services = td.id("KUBE-SERVICES").expect("KUBE-SERVICES");
        assert_eq!(prog.indexes.len(), 1, "one indexed chain");
        assert_eq!(prog.indexes[0].0, services, "KUBE-SERVICES is indexed");
        let ix = prog.index_of(services).expect("index");
        for i in [0, 3, 150, 599] {
            let (proto, svc) = k.service(i);
            let src = SocketAddr::V4(SocketAddrV4::new([172, 18, 0, 9].into(), 40000));
            let pkt = if proto == 17 {
                Packet::udp(src, SocketAddr::V4(svc))
            } else {
                Packet::tcp(src, SocketAddr::V4(svc), sim_core::TcpFlags::SYN)
            };
            // What prefetch_new_flow looks up.
            let key = Key {
                dst: Some(u32::from(*svc.ip())),
                proto: pkt.protocol(),
                dport: svc.port(),
            };
            let (at, to, others) = ix.first_hit(key).expect("the service's rule");
            let rule = &td.chain(services).rules()[at];
            let svc_chain = k.svc_chain(i);
            assert!(
                matches!(&rule.target, crate::rule::Target::Jump(c) if c.name == svc_chain),
                "service {i}: found {rule:?}"
            );
            let pos = prog.spans[services as usize].start as usize + at;
            // The walk's own lookup from the chain's start finds the same rule.
            assert_eq!(
                ix.lookup(0, Some(key)),
                crate::index::Lookup::Match(at),
                "service {i}"
            );
            let to = to as usize;
            let svc_id = td.id(&svc_chain).expect("KUBE-SVC chain");
            assert_eq!(to, prog.spans[svc_id as usize].start as usize);
            // Within PREFETCH_RULES of it: the SVC chain, then each SEP chain in turn (for
            // the first Service, KUBE-MARK-MASQ's rule comes between: the depth-first
            // layout puts a shared chain where it is first reached).
            let seps: Vec<u32> = (0..k.endpoints)
                .map(|j| td.id(&k.sep_chain(i, j)).expect("SEP"))
                .collect();
            let got: Vec<u32> = prog.origins[to..to + PREFETCH_RULES]
                .iter()
                .map(|o| o.0)
                .collect();
            let mut chains = got.clone();
            chains.dedup();
            chains.retain(|c| *c == svc_id || seps.contains(c));
            let mut want = vec![svc_id];
            want.extend(&seps);
            assert_eq!(
                chains, want,
                "service {i}: the rules after the jump {got:?}"
            );
            for sep in &seps {
                let span = prog.spans[*sep as usize];
                assert!(
                    span.end as usize <= to + PREFETCH_RULES,
                    "service {i}: SEP chain {sep} ends past the prefetched rules"
                );
            }
            // The kept targets it asks for are the SEP chains' DNAT ranges, in order.
            for (j, sep) in seps.iter().enumerate() {
                let span = prog.spans[*sep as usize];
                let dnat = prog.rules[span.start as usize..span.end as usize]
                    .iter()
                    .find_map(|r| match r.target {
                        CTarget::Other(i) => Some(i),
                        _ => None,
                    });
                assert_eq!(dnat, Some(others + j as u32), "service {i}, endpoint {j}");
            }
            // In a fresh table the slot guess is right: slots follow the layout.
            let start = prog.spans[services as usize].start as usize;
            let guess = |p: usize| prog.rules[start].slot_idx as usize + p - start;
            assert_eq!(guess(pos), prog.rules[pos].slot_idx as usize);
            let subtree_end = seps
                .iter()
                .map(|c| prog.spans[*c as usize].end as usize)
                .max()
                .expect("endpoints");
            for p in to..subtree_end {
                assert_eq!(guess(p), prog.rules[p].slot_idx as usize, "rule {p}");
            }
            // And the hint itself runs on the packet without effect on the ruleset.
            rs.prefetch_new_flow(&RulesetState::new(), &pkt);
        }
    }
}
