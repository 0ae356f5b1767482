//! nftables base chains at the namespace's hooks, interleaved with the iptables tables by
//! priority as the kernel orders a hook's entries (`nf_hook_entries_grow`: ascending
//! priority; a new entry goes after the entries of equal priority, and the iptables tables
//! and conntrack register before a ruleset is loaded, so at equal priority they run first).
//!
//! The built-in entries and their priorities (`enum nf_ip_hook_priorities`): raw −300,
//! conntrack −200, mangle −150, NAT (DNAT) −100, filter 0, NAT (SNAT) 100, confirm last.
//! The pipeline calls [`Netns::nft_filter`] between two of them with the half-open priority
//! range `[lo, hi)` that lies between: a `filter` chain at −110 in prerouting runs after
//! mangle and before DNAT (kube-proxy's `filter-prerouting-pre-dnat`).
//!
//! `nat` chains are not hook entries of their own: the NAT core calls them, with the iptables
//! nat table, in priority order for a connection's first packet, and stops at the first
//! that sets up a binding (`nf_nat_inet_fn` over `nf_nat_lookup_hook_priv`'s entries;
//! the iptables nat table sits at −100 / 100 among them).

use super::*;
use crate::nft::{BaseRef, ChainType, NftError, NftProgram, NftRuleset, NftStep};

/// Priorities of the built-in hook entries.
pub(super) mod prio {
    /// `NF_IP_PRI_RAW`.
    pub const RAW: i32 = -300;
    /// `NF_IP_PRI_CONNTRACK`.
    pub const CONNTRACK: i32 = -200;
    /// `NF_IP_PRI_MANGLE`.
    pub const MANGLE: i32 = -150;
    /// `NF_IP_PRI_NAT_DST`.
    pub const NAT_DST: i32 = -100;
    /// `NF_IP_PRI_FILTER`.
    pub const FILTER: i32 = 0;
    /// `NF_IP_PRI_NAT_SRC`.
    pub const NAT_SRC: i32 = 100;
    /// Below every priority.
    pub const FIRST: i32 = i32::MIN;
    /// Above every priority (`NF_IP_PRI_CONNTRACK_CONFIRM` is `INT_MAX`).
    pub const LAST: i32 = i32::MAX;
}

/// The base chains per hook, kept sorted when the ruleset changes (so a packet does not
/// search the tables).
#[derive(Clone, Debug, Default)]
pub(super) struct NftHooks {
    /// `filter` chains per hook (IPv4, IPv6).
    filter: [[Vec<BaseRef>; 5]; 2],
    /// `nat` chains per hook (IPv4, IPv6).
    nat: [[Vec<BaseRef>; 5]; 2],
}

impl NftHooks {
    fn of(rs: &NftRuleset) -> NftHooks {
        let mut h = NftHooks::default();
        for hook in Hook::ALL {
            for (i, v4) in [true, false].into_iter().enumerate() {
                h.filter[i][hook as usize] = rs.base_chains(hook, ChainType::Filter, v4);
                h.nat[i][hook as usize] = rs.base_chains(hook, ChainType::Nat, v4);
            }
        }
        h
    }
}

/// The compiled form of the namespace's ruleset (`nft/compiled.rs`).
///
/// After `nft -f` the interpreter walks the new ruleset until it has walked base chains as
/// many times as a quarter of the ruleset's rules (at least [`COMPILE_AFTER_WALKS`]); then
/// the ruleset is compiled. Compiling costs about as much as that many walks, so a node that
/// sees few packets between two syncs (most of a big cluster's nodes) does not pay for a
/// program it would hardly use, and one that sees many pays little. Both walks give the
/// same results, so when it switches changes nothing but the time.
#[derive(Clone, Debug, Default)]
pub(super) enum NftFast {
    /// Walked by the interpreter: the ruleset does not compile, or compiling is off.
    #[default]
    Off,
    /// Walked by the interpreter until `walks` reaches `after`, then compiled.
    Pending {
        /// Untraced base-chain walks since the ruleset changed.
        walks: u32,
        /// When to compile.
        after: u32,
    },
    /// Compiled.
    Ready(NftProgram),
}

/// The fewest interpreted base-chain walks before a changed ruleset is compiled.
pub(super) const COMPILE_AFTER_WALKS: u32 = 64;

impl NftFast {
    /// Compiling `rs` after enough walks, when `on`.
    fn pending(rs: &NftRuleset, on: bool) -> NftFast {
        if !on {
            return NftFast::Off;
        }
        let rules: usize = rs
            .tables
            .values()
            .flat_map(|t| t.chains.values())
            .map(|c| c.rules.len())
            .sum();
        NftFast::Pending {
            walks: 0,
            after: u32::try_from(rules / 4)
                .unwrap_or(u32::MAX)
                .max(COMPILE_AFTER_WALKS),
        }
    }

    /// Counts an untraced walk of `rs`, compiling it when its time has come.
    #[inline]
    fn walked(&mut self, rs: &NftRuleset) {
        if let NftFast::Pending { walks, after } = self {
            *walks += 1;
            if *walks >= *after {
                *self = NftFast::of(rs, true);
            }
        }
    }

    /// `rs` compiled, when `on` and it compiles.
    fn of(rs: &NftRuleset, on: bool) -> NftFast {
        match NftProgram::compile(rs) {
            Ok(p) if on => NftFast::Ready(p),
            _ => NftFast::Off,
        }
    }

    /// The first-packet hint of the compiled ruleset ([`NftProgram::prefetch_new_flow`]).
    #[inline]
    pub(super) fn prefetch_new_flow(&self, pkt: &Packet) {
        if let NftFast::Ready(p) = self {
            p.prefetch_new_flow(pkt);
        }
    }

    /// After the interpreter walked `rs`: the compiled copies of the sets it may have
    /// written (`update`) are brought up to date.
    fn interpreted(&mut self, rs: &NftRuleset) {
        if let NftFast::Ready(p) = self {
            if p.writes_sets() {
                p.resync(rs);
            }
        }
    }
}

/// The value `ct state` loads for a packet of `--ctstate` bits `bits`: `NF_CT_STATE_BIT`
/// of its ctinfo (established 2, related 4, new 8, as the iptables bits), invalid 1,
/// untracked 64 (`NF_CT_STATE_UNTRACKED_BIT`; `nf_conntrack_common.h`), as `nft/eval.rs`'s
/// load gives them.
fn nft_ct_state(bits: u16) -> u32 {
    use crate::rule::ctstate as S;
    if bits & S::UNTRACKED != 0 {
        64
    } else if bits & S::INVALID != 0 {
        1
    } else {
        u32::from(bits & (S::ESTABLISHED | S::RELATED | S::NEW))
    }
}

fn fam(pkt: &Packet) -> usize {
    usize::from(!pkt.is_ipv4())
}

impl Netns {
    /// Runs `nft -f` input (`file` names it in errors) as one transaction: all of it or,
    /// on error, nothing.
    pub fn nft_apply(&mut self, file: &str, text: &str, now: SimTime) -> Result<usize, NftError> {
        let n = self.nft.apply(file, text, now)?;
        self.nft_hooks = NftHooks::of(&self.nft);
        self.nft_fast = NftFast::pending(&self.nft, self.nft_compile);
        Ok(n)
    }

    /// Whether untraced packets walk the compiled form of the nftables ruleset
    /// (`nft/compiled.rs`; on by default) or the interpreter, which traced walks always take.
    /// Both give the same results; the switch is for measuring and for tests that compare
    /// them. Switched on, the ruleset is compiled now, rather than after the walks `nft -f`
    /// waits for (a bench's node, copied for every batch of packets, compiles once).
    pub fn set_nft_compiled(&mut self, on: bool) {
        self.nft_compile = on;
        self.nft_fast = NftFast::of(&self.nft, on);
    }

    /// Whether untraced packets walk the nftables ruleset in its compiled form: compiling is
    /// on ([`Netns::set_nft_compiled`]) and the ruleset compiles (`nft/compiled.rs` says
    /// what does not).
    pub fn nft_is_compiled(&self) -> bool {
        matches!(self.nft_fast, NftFast::Ready(_))
    }

    /// The nftables ruleset.
    pub fn nft(&self) -> &NftRuleset {
        &self.nft
    }

    /// `filter` base chains at `hook` with a priority in `[lo, hi)`, in order.
    #[inline]
    pub(super) fn nft_filter(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        hook: Hook,
        lo: i32,
        hi: i32,
    ) -> TableOutcome {
        if self.nft_hooks.filter[fam(&f.pkt)][hook as usize].is_empty() {
            return TableOutcome::Continue;
        }
        self.nft_filter_run(now, f, hook, lo, hi)
    }

    #[inline(never)]
    fn nft_filter_run(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        hook: Hook,
        lo: i32,
        hi: i32,
    ) -> TableOutcome {
        let (fi, hi_idx) = (fam(&f.pkt), hook as usize);
        let mut i = 0;
        while let Some(&at) = self.nft_hooks.filter[fi][hi_idx].get(i) {
            i += 1;
            if at.priority < lo {
                continue;
            }
            if at.priority >= hi {
                break;
            }
            if self.nft_skips(f, at) {
                continue;
            }
            let v = self.nft_eval(now, f, at);
            match v.action {
                Action::Accept => {}
                Action::Drop => {
                    return TableOutcome::Stop(Fate::Dropped(DropCause::NftRule {
                        chain: self.nft_chain_name(at),
                        hook,
                    }))
                }
                Action::Reject(with) => {
                    self.send_reject(now, f, with);
                    return TableOutcome::Stop(Fate::RejectedNft {
                        chain: self.nft_chain_name(at),
                        hook,
                    });
                }
            }
        }
        TableOutcome::Continue
    }

    /// Whether the compiled ruleset says the base chain `at` accepts the untraced packet in
    /// flight without a walk: its `ct state` is in none of the states every rule of the chain
    /// starts by matching ([`NftProgram::accepts_untouched`]). Built from the `--ctstate`
    /// bits, without a conntrack view.
    #[inline]
    fn nft_skips(&self, f: &Flight, at: BaseRef) -> bool {
        let NftFast::Ready(p) = &self.nft_fast else {
            return false;
        };
        if f.trace.is_some() {
            return false;
        }
        p.accepts_untouched(at, nft_ct_state(self.ct_bits(f)))
    }

    /// `family table chain`, for fates.
    fn nft_chain_name(&self, at: BaseRef) -> String {
        self.nft
            .tables
            .get_index(at.table)
            .and_then(|(_, t)| {
                t.chains
                    .get_index(at.chain)
                    .map(|(c, _)| format!("{} {} {c}", t.family, t.name))
            })
            .unwrap_or_default()
    }

    /// Whether `nat` base chains are attached at `hook` for this packet's family.
    #[inline]
    pub(super) fn has_nft_nat(&self, f: &Flight, hook: Hook) -> bool {
        !self.nft_hooks.nat[fam(&f.pkt)][hook as usize].is_empty()
    }

    /// The NAT lookups of a connection's first packet at `hook`: nftables `nat` chains and
    /// the iptables nat table in priority order, until one sets up a binding.
    #[inline(never)]
    pub(super) fn nat_lookups(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        hook: Hook,
    ) -> Result<Option<NatRequest>, Fate> {
        let ipt_prio = match hook {
            Hook::PreRouting | Hook::Output => prio::NAT_DST,
            _ => prio::NAT_SRC,
        };
        let (fi, hi_idx) = (fam(&f.pkt), hook as usize);
        let mut ipt_done = false;
        let mut i = 0;
        while let Some(&at) = self.nft_hooks.nat[fi][hi_idx].get(i) {
            i += 1;
            if !ipt_done && at.priority >= ipt_prio {
                ipt_done = true;
                if let Some(req) = self.run_iptables_nat(now, f, hook)? {
                    return Ok(Some(req));
                }
            }
            let v = self.nft_eval(now, f, at);
            match v.action {
                Action::Accept if v.nat.is_some() => return Ok(v.nat),
                Action::Accept => {}
                Action::Drop => {
                    return Err(Fate::Dropped(DropCause::NftRule {
                        chain: self.nft_chain_name(at),
                        hook,
                    }))
                }
                Action::Reject(_) => {
                    return Err(Fate::RejectedNft {
                        chain: self.nft_chain_name(at),
                        hook,
                    })
                }
            }
        }
        if ipt_done {
            Ok(None)
        } else {
            self.run_iptables_nat(now, f, hook)
        }
    }

    /// Walks one base chain for the packet in flight (its conntrack view, its mark), keeping
    /// the mark the rules set and appending the chain's trace.
    fn nft_eval(&mut self, now: SimTime, f: &mut Flight, at: BaseRef) -> crate::Verdict {
        let addr_types = AddrTypes(&self.routes);
        let mut steps = f.trace.as_ref().map(|_| Vec::<NftStep>::new());
        let mut ctx = f.eval_ctx(&self.conntrack, &addr_types, now, &mut self.stat_rng);
        let v = match (self.branching.as_mut(), steps.as_mut()) {
            (Some(br), Some(st)) => {
                let j = br.walks;
                br.walks += 1;
                let path = br.path().cloned();
                let mut plan = match br.injected(j) {
                    Some(crate::branch::Taken::Numgen(p)) => {
                        crate::branch::NumgenPlan::again(&p, path)
                    }
                    _ => crate::branch::NumgenPlan::start(path),
                };
                plan.budget = br.budget;
                let v = self
                    .nft
                    .run_base_chain_with(at, &mut ctx, Some(st), Some(&mut plan));
                self.nft_fast.interpreted(&self.nft);
                let others = plan.take_others();
                br.budget = plan.budget;
                br.took(
                    j,
                    crate::branch::Taken::Numgen(std::sync::Arc::new(plan)),
                    others,
                );
                v
            }
            (_, None) => {
                self.nft_fast.walked(&self.nft);
                match &mut self.nft_fast {
                    NftFast::Ready(p) => p.run_base_chain(&mut self.nft, at, &mut ctx),
                    _ => self.nft.run_base_chain(at, &mut ctx, None),
                }
            }
            (None, Some(st)) => {
                let v = self.nft.run_base_chain(at, &mut ctx, Some(st));
                self.nft_fast.interpreted(&self.nft);
                v
            }
        };
        f.pkt.mark = ctx.packet.mark;
        if let (Some(t), Some(s)) = (f.trace.as_mut(), steps) {
            t.steps.extend(s.into_iter().map(Step::Nft));
        }
        v
    }
}

#[cfg(test)]
#[path = "nft_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "nft_compiled_tests.rs"]
mod compiled_tests;
