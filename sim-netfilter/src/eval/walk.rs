//! The reference walk (`ipt_do_table`): a table's built-in chain at one hook, rule by rule in
//! order, with jumps, gotos, RETURN, the policy, the counters and the trace.

use crate::fmt::rule_spec;
use crate::index::{Key, Lookup};
use crate::rule::*;
use crate::ruleset::{Chain, Ruleset, TableData};
use crate::state::RulesetState;
use crate::trace::{Trace, TraceEvent};
use crate::types::*;

use super::{effect, rule_matches, Action, EvalCtx, Pkt, Verdict, MAX_DEPTH};

impl Ruleset {
    /// Whether `table` exists with a built-in chain at `hook` (else [`Ruleset::run_hook`]
    /// accepts without evaluating anything).
    #[inline]
    pub(crate) fn has_hook(&self, table: Table, hook: Hook) -> bool {
        matches!(&self.tables[table.index()], Some(td) if td.builtin[hook as usize].is_some())
    }

    /// Evaluates the packet in `ctx` through `table`'s built-in chain at `hook`.
    ///
    /// Returns ACCEPT without evaluating anything when the table does not exist, has no chain
    /// at this hook, or the packet is not of the ruleset's family (`iptables` rules see IPv4
    /// packets, `ip6tables` rules IPv6 ones). With a `trace`, every rule evaluated is
    /// recorded and evaluation is plain in-order (the index is only a shortcut to the same
    /// result). IPv6 packets are always walked in order: the index and the remembered walks
    /// key on IPv4 addresses.
    pub fn run_hook(
        &self,
        table: Table,
        hook: Hook,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
        mut trace: Option<&mut Trace>,
    ) -> Verdict {
        let td = match &self.tables[table.index()] {
            Some(td) if td.builtin[hook as usize].is_some() && self.sees(&ctx.packet) => td,
            _ => {
                if let Some(t) = trace.as_deref_mut() {
                    let reason = if !self.sees(&ctx.packet) {
                        match self.family {
                            Family::Ipv4 => "IPv6 packet: not seen by iptables",
                            Family::Ipv6 => "IPv4 packet: not seen by ip6tables",
                        }
                    } else if self.tables[table.index()].is_none() {
                        "table does not exist"
                    } else {
                        "no built-in chain at this hook"
                    };
                    t.push(TraceEvent::Skip {
                        table,
                        hook,
                        reason: reason.into(),
                    });
                }
                return Verdict::accept();
            }
        };
        if let Some(t) = trace.as_deref_mut() {
            t.push(TraceEvent::Enter {
                table,
                hook,
                packet: ctx.packet.to_string(),
                ct: ctx.ct.describe(),
            });
        }
        let v = if trace.is_none() && self.indexing && ctx.packet.is_ipv4() {
            self.walk_fast(td, table, hook, ctx, state)
        } else {
            self.walk(td, table, hook, ctx, state, trace.as_deref_mut())
        };
        if let Some(t) = trace {
            t.push(TraceEvent::Verdict {
                table,
                hook,
                verdict: v.describe(),
            });
        }
        v
    }

    /// Whether the packet is of this ruleset's family.
    #[inline]
    pub(crate) fn sees(&self, p: &sim_core::Packet) -> bool {
        p.is_ipv4() == (self.family == Family::Ipv4)
    }

    fn walk(
        &self,
        td: &TableData,
        table: Table,
        hook: Hook,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
        mut trace: Option<&mut Trace>,
    ) -> Verdict {
        let pk = Pkt::of(ctx);
        let key = pk.dport.map(|d| Key {
            dst: Some(pk.dst),
            proto: pk.proto,
            dport: d,
        });
        // The reference walk: in order, no index (the fast walk is `walk_fast`).
        let use_index = false;
        let mut out = Verdict::accept();
        let base = td.builtin[hook as usize].unwrap_or_default();
        let mut stack = [(0u32, 0u32); MAX_DEPTH];
        let mut sp = 0usize;
        let mut chain_id = base;
        let mut chain: &Chain = td.chain(base);
        let mut pos = 0usize;
        loop {
            // The end of a chain, or a RETURN: back to the calling chain, or the policy at the
            // end of the built-in one.
            if pos >= chain.rules.len() {
                match sp.checked_sub(1) {
                    None => return self.policy(td, base, table, state, &pk, out, trace),
                    Some(top) => {
                        sp = top;
                        let (cid, p) = stack[top];
                        let p = p as usize;
                        if let Some(t) = trace.as_deref_mut() {
                            t.push(TraceEvent::Return {
                                table,
                                from: chain.name().to_string(),
                                to: td.chain(cid).name().to_string(),
                            });
                        }
                        chain_id = cid;
                        chain = td.chain(cid);
                        pos = p;
                        continue;
                    }
                }
            }
            let mut known = false;
            if use_index {
                if let Some(ix) = &chain.index {
                    match ix.lookup(pos, key) {
                        Lookup::Outside => {}
                        Lookup::Past(end) => {
                            pos = end;
                            continue;
                        }
                        Lookup::Match(at) => {
                            pos = at;
                            known = true;
                        }
                    }
                }
            }
            let rule = &chain.rules[pos];
            let mut draws = Vec::new();
            // A rule the index found matches by construction: its only tests are its key.
            let matched = known
                || rule_matches(
                    self,
                    rule,
                    hook,
                    ctx,
                    &pk,
                    state,
                    trace.is_some().then_some(&mut draws),
                );
            if let Some(t) = trace.as_deref_mut() {
                t.push(TraceEvent::Rule {
                    table,
                    chain: chain.name().to_string(),
                    num: pos + 1,
                    matched,
                    draws,
                    spec: rule_spec(rule),
                });
            }
            if !matched {
                pos += 1;
                continue;
            }
            let s = state.slot(rule.slot, rule.initial_counters);
            s.packets += 1;
            s.bytes += pk.len;
            match &rule.target {
                Target::None => pos += 1,
                Target::Accept => return out,
                Target::Drop => {
                    out.action = Action::Drop;
                    return out;
                }
                // RETURN leaves the chain as its end does: the step at the top of the loop.
                Target::Return => pos = chain.rules.len(),
                Target::Jump(c) | Target::Goto(c) => {
                    if matches!(rule.target, Target::Jump(_)) {
                        if sp >= MAX_DEPTH {
                            out.action = Action::Drop;
                            return out;
                        }
                        stack[sp] = (chain_id, (pos + 1) as u32);
                        sp += 1;
                    }
                    chain_id = c.id.idx;
                    chain = td.chain(chain_id);
                    pos = 0;
                }
                other => {
                    if effect(other, ctx, &mut out, trace.as_deref_mut()) {
                        return out;
                    }
                    pos += 1;
                }
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn policy(
        &self,
        td: &TableData,
        base: u32,
        table: Table,
        state: &mut RulesetState,
        pk: &Pkt,
        mut out: Verdict,
        trace: Option<&mut Trace>,
    ) -> Verdict {
        let c = td.chain(base);
        let s = state.slot(c.policy_slot, c.policy_init);
        s.packets += 1;
        s.bytes += pk.len;
        if let Some(t) = trace {
            t.push(TraceEvent::Policy {
                table,
                chain: c.name().to_string(),
                policy: c.policy(),
            });
        }
        if c.policy() == Policy::Drop {
            out.action = Action::Drop;
        }
        out
    }
}
