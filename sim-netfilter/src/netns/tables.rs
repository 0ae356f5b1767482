//! Running one iptables table at one hook (the walk, or its remembered outcome) and applying
//! its verdict to the packet in flight.

use super::*;

impl Netns {
    /// Sends the answer a REJECT rule (xtables or nft) gives the packet in flight, if any.
    /// icmp_send answers from the packet's destination when it is ours, else from the address
    /// the route back to the sender would use.
    pub(super) fn send_reject(&mut self, now: SimTime, f: &mut Flight, with: crate::RejectWith) {
        let src = if self.routes.is_local(f.pkt.dst) {
            f.pkt.dst
        } else {
            self.routes.source_for(f.pkt.src).unwrap_or(f.pkt.dst)
        };
        if let Some(answer) = with.response(&f.pkt, src) {
            self.send_error(now, f, answer);
        }
    }

    /// Evaluates one table at one hook and applies what it says to the flight.
    #[inline]
    pub(super) fn run_table(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        table: Table,
        hook: Hook,
    ) -> TableOutcome {
        // A table without a chain at this hook accepts at once; only a trace wants to say so.
        if f.trace.is_none() && !self.rules_for(&f.pkt).0.has_hook(table, hook) {
            return TableOutcome::Continue;
        }
        match self.replay(f, table, hook) {
            // A remembered walk never untracks (CT is impure): an ACCEPT just goes on.
            Some(v) if v.action == Action::Accept => TableOutcome::Continue,
            Some(v) => self.outcome(now, f, table, hook, v),
            None => self.run_table_rules(now, f, table, hook),
        }
    }

    /// The remembered outcome of a pure walk of `table` at `hook` for the packet in flight,
    /// replayed from its `--ctstate` bits and the packet alone, without building the whole
    /// conntrack view (see [`Ruleset::replay_hook`]); `None` when the rules must be walked
    /// (always with a trace, which records every rule).
    #[inline]
    pub(super) fn replay(
        &mut self,
        f: &mut Flight,
        table: Table,
        hook: Hook,
    ) -> Option<crate::Verdict> {
        if f.trace.is_some() {
            return None;
        }
        let bits = self.ct_bits(f);
        let (rs, st) = self.rules_for_mut(&f.pkt);
        rs.replay_hook(table, hook, &mut f.pkt, bits, st)
    }

    /// The rules that see this packet: `iptables`' for IPv4, `ip6tables`' for IPv6.
    #[inline]
    fn rules_for(&self, p: &Packet) -> (&Ruleset, &RulesetState) {
        if p.is_ipv4() {
            (&self.ruleset, &self.rules_state)
        } else {
            (&self.ruleset6, &self.rules_state6)
        }
    }

    /// [`Netns::rules_for`], the state writable.
    #[inline]
    fn rules_for_mut(&mut self, p: &Packet) -> (&Ruleset, &mut RulesetState) {
        if p.is_ipv4() {
            (&self.ruleset, &mut self.rules_state)
        } else {
            (&self.ruleset6, &mut self.rules_state6)
        }
    }

    /// [`Netns::run_table`] once there is something to evaluate.
    #[inline(never)]
    fn run_table_rules(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        table: Table,
        hook: Hook,
    ) -> TableOutcome {
        let verdict = self.eval(now, f, table, hook);
        self.outcome(now, f, table, hook, verdict)
    }

    /// What a table's verdict does to the flight.
    fn outcome(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        table: Table,
        hook: Hook,
        verdict: crate::Verdict,
    ) -> TableOutcome {
        if verdict.notrack && table == Table::Raw {
            f.untracked = true;
            f.view = None;
        }
        match verdict.action {
            Action::Accept => TableOutcome::Continue,
            Action::Drop => TableOutcome::Stop(Fate::Dropped(DropCause::Rule { table, hook })),
            Action::Reject(with) => {
                self.send_reject(now, f, with);
                TableOutcome::Stop(Fate::Rejected { table, hook })
            }
        }
    }

    /// Evaluates `table` at `hook` for the packet in flight: builds the rules' view of it
    /// (conntrack state, address types), keeps MARK's change to the packet and CONNMARK's to
    /// the entry, and appends the rule trace.
    pub(super) fn eval(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        table: Table,
        hook: Hook,
    ) -> crate::Verdict {
        let addr_types = AddrTypes(&self.routes);
        // iptables' tables for an IPv4 packet, ip6tables' for an IPv6 one.
        let (ruleset, rules_state) = if f.pkt.is_ipv4() {
            (&self.ruleset, &mut self.rules_state)
        } else {
            (&self.ruleset6, &mut self.rules_state6)
        };
        let mut rule_trace = f.trace.as_ref().map(|_| Trace::new());
        let mut ctx = f.eval_ctx(&self.conntrack, &addr_types, now, &mut self.stat_rng);
        let verdict = match (self.branching.as_mut(), rule_trace.as_mut()) {
            (Some(br), Some(rt)) => {
                let j = br.walks;
                br.walks += 1;
                let (leaf, others) = match br.injected(j) {
                    Some(crate::branch::Taken::Leaf(l)) => (l, Vec::new()),
                    _ => {
                        let path = br.path().cloned();
                        let (first, rest) = ruleset.walk_all(
                            table,
                            hook,
                            &mut ctx,
                            &mut *rules_state,
                            path,
                            &mut br.budget,
                        );
                        (
                            std::sync::Arc::new(first),
                            rest.into_iter()
                                .map(|l| crate::branch::Taken::Leaf(std::sync::Arc::new(l)))
                                .collect(),
                        )
                    }
                };
                ctx.packet.mark = leaf.mark;
                *ctx.rng = leaf.rng.clone();
                leaf.state.apply(&mut *rules_state);
                rt.events.extend(leaf.events.iter().cloned());
                let v = leaf.verdict.clone();
                br.took(j, crate::branch::Taken::Leaf(leaf), others);
                v
            }
            _ => ruleset.run_hook(
                table,
                hook,
                &mut ctx,
                &mut *rules_state,
                rule_trace.as_mut(),
            ),
        };
        // Rules change nothing of the packet but its mark (MARK, CONNMARK --restore-mark).
        f.pkt.mark = ctx.packet.mark;
        if let (Some(t), Some(rt)) = (f.trace.as_mut(), rule_trace) {
            t.steps.extend(rt.events.into_iter().map(Step::Rules));
        }
        if let (Some(m), Some(h)) = (verdict.ct_mark, f.handle) {
            self.conntrack.set_mark(h.id, m);
            f.view = None;
        }
        verdict
    }

    /// The `--ctstate` bits of the packet in flight: those of its view when it has one, else
    /// from its handle and the entry's status alone.
    #[inline]
    pub(super) fn ct_bits(&self, f: &Flight) -> u16 {
        if let Some(v) = &f.view {
            return v.state_bits();
        }
        if f.untracked {
            return crate::rule::ctstate::UNTRACKED;
        }
        let Some(h) = f.handle else {
            return crate::rule::ctstate::INVALID;
        };
        let Some(status) = self.conntrack.status(h.id) else {
            return crate::rule::ctstate::INVALID;
        };
        crate::eval::tracked_state_bits(ct_info_kind(h.ctinfo), u32::from(status.0))
    }
}
