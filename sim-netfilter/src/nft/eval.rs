//! Walking a base chain for a packet, as `nft_do_chain` does: rules in order, each rule's
//! statements in order until one does not match (`NFT_BREAK`) or a verdict ends the rule;
//! `jump` pushes a return point, `goto` does not, `return` (or running off the end of a
//! regular chain) pops one, and the end of a base chain is its policy. A verdict map lookup
//! that finds nothing ends the rule like a failed match.
//!
//! `numgen random mod N offset O` draws one 32-bit number from the namespace's random stream
//! and maps it as `nft_ng_random_gen` does: `reciprocal_scale(draw, N) + O`, i.e.
//! `(draw * N) >> 32` — each of the N results owns ⌊2³²/N⌋ or ⌈2³²/N⌉ of the 2³² draws.

use std::fmt;

use sim_core::{Packet, SimDuration};

use super::print::{rule_text, stmt_text};
use super::*;
use crate::eval::{CtState, EvalCtx, NatRequest, Verdict};
use crate::rule::{NatRange, PortNat};
use crate::Action;

/// nf_tables' `NFT_JUMP_STACK_SIZE`.
pub(super) const MAX_DEPTH: usize = 16;

/// One `numgen random` draw.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NftDraw {
    /// The 32-bit random number.
    pub draw: u32,
    /// `mod N`.
    pub modulus: u32,
    /// The result, `(draw * N >> 32) + offset`.
    pub value: u32,
}

/// One step of a walk through nftables chains, for `nfsim trace`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NftStep {
    /// A base chain starts.
    Enter {
        /// `ip kube-proxy`.
        table: String,
        /// The base chain.
        chain: String,
        /// Its declaration, `type nat hook prerouting priority dstnat`.
        decl: String,
    },
    /// A rule was evaluated.
    Rule {
        /// The chain.
        chain: String,
        /// 1-based position in the chain.
        num: usize,
        /// Whether all its matches passed.
        matched: bool,
        /// The rule as `nft list` prints it.
        text: String,
        /// Its `numgen` draws.
        draws: Vec<NftDraw>,
        /// A verdict map's result (`vmap @service-ips: goto …`).
        lookup: Option<String>,
    },
    /// Back to the calling chain.
    Return {
        /// The chain left.
        from: String,
        /// The chain resumed.
        to: String,
    },
    /// The base chain's policy decided.
    Policy {
        /// The chain.
        chain: String,
        /// `accept` or `drop`.
        policy: String,
    },
    /// The base chain's verdict.
    Verdict {
        /// The chain.
        chain: String,
        /// What it decided.
        verdict: String,
    },
}

impl fmt::Display for NftDraw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "numgen 0x{:08x} * {} >> 32 = {}",
            self.draw, self.modulus, self.value
        )
    }
}

impl fmt::Display for NftStep {
    /// One line. The ruleset's own text (names, a rule with its `comment`) is escaped
    /// ([`sim_core::text::Escaped`]): a comment holding a newline or an escape sequence cannot
    /// forge a trace line or reach the terminal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use sim_core::text::Escaped;
        match self {
            NftStep::Enter { table, chain, decl } => write!(
                f,
                "-> table {} chain {} {{ {} }}",
                Escaped(table),
                Escaped(chain),
                Escaped(decl)
            ),
            NftStep::Rule {
                chain,
                num,
                matched,
                text,
                draws,
                lookup,
            } => {
                write!(
                    f,
                    "   {} #{num} {} {}",
                    Escaped(chain),
                    if *matched { "MATCH   " } else { "no match" },
                    Escaped(text)
                )?;
                for d in draws {
                    write!(f, " [{d}]")?;
                }
                if let Some(l) = lookup {
                    write!(f, " [{l}]")?;
                }
                Ok(())
            }
            NftStep::Return { from, to } => {
                write!(f, "   return from {} to {}", Escaped(from), Escaped(to))
            }
            NftStep::Policy { chain, policy } => {
                write!(f, "   {} policy {policy}", Escaped(chain))
            }
            NftStep::Verdict { chain, verdict } => write!(f, "<- {}: {verdict}", Escaped(chain)),
        }
    }
}

/// A base chain's place at a hook: its priority and where it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseRef {
    /// Priority.
    pub priority: i32,
    /// Index of its table in [`NftRuleset::tables`].
    pub table: usize,
    /// Index of the chain in the table.
    pub chain: usize,
}

enum RuleOutcome {
    NoMatch,
    Next,
    Verdict(NftVerdict),
    Nat(NatRequest),
    Reject(crate::rule::RejectWith),
}

impl NftRuleset {
    /// The base chains of type `ty` at `hook` that see IPv4 (`v4`) or IPv6 packets, in the
    /// order the kernel calls them: by priority, chains of equal priority in the order they
    /// were registered (`nf_hook_entries_grow` inserts after equal priorities).
    pub fn base_chains(&self, hook: Hook, ty: ChainType, v4: bool) -> Vec<BaseRef> {
        let mut v = Vec::new();
        for (ti, t) in self.tables.values().enumerate() {
            if !t.family.sees(v4) {
                continue;
            }
            for (ci, c) in t.chains.values().enumerate() {
                if let Some(b) = c.base {
                    if b.hook == hook && b.ty == ty {
                        v.push(BaseRef {
                            priority: b.priority,
                            table: ti,
                            chain: ci,
                        });
                    }
                }
            }
        }
        v.sort_by_key(|b| b.priority);
        v
    }

    /// Whether any base chain is attached to `hook` (a cheap test for the pipeline).
    pub fn has_hook(&self, hook: Hook) -> bool {
        self.tables.values().any(|t| {
            t.chains
                .values()
                .any(|c| c.base.is_some_and(|b| b.hook == hook))
        })
    }

    /// Walks the base chain `at` for the packet in `ctx`. Counters, `update`d set elements
    /// and the packet's mark change as the rules say; the returned [`Verdict`] carries a NAT
    /// request from `dnat`/`snat`/`masquerade`.
    pub fn run_base_chain(
        &mut self,
        at: BaseRef,
        ctx: &mut EvalCtx<'_>,
        trace: Option<&mut Vec<NftStep>>,
    ) -> Verdict {
        self.run_base_chain_with(at, ctx, trace, None)
    }

    /// [`NftRuleset::run_base_chain`] with the `numgen` results `plan` forces, forcing the
    /// first value of every other `numgen` met and noting its other values
    /// ([`crate::branch::NumgenPlan`]).
    pub(crate) fn run_base_chain_with(
        &mut self,
        at: BaseRef,
        ctx: &mut EvalCtx<'_>,
        mut trace: Option<&mut Vec<NftStep>>,
        mut plan: Option<&mut crate::branch::NumgenPlan>,
    ) -> Verdict {
        let Some((_, t)) = self.tables.get_index_mut(at.table) else {
            return Verdict::accept();
        };
        let family = t.family;
        let tname = t.name.clone();
        let NftTable { sets, chains, .. } = t;
        let Some((bname, base)) = chains.get_index(at.chain) else {
            return Verdict::accept();
        };
        let Some(b) = base.base else {
            return Verdict::accept();
        };
        if let Some(tr) = trace.as_deref_mut() {
            tr.push(NftStep::Enter {
                table: format!("{family} {tname}"),
                chain: bname.clone(),
                decl: format!(
                    "type {} hook {} priority {}; policy {};",
                    b.ty.name(),
                    b.hook.chain_name().to_lowercase(),
                    b.priority,
                    if b.policy_accept { "accept" } else { "drop" }
                ),
            });
        }
        let bname = bname.clone();
        let mut stack: Vec<(usize, usize)> = Vec::new();
        let (mut ci, mut ri) = (at.chain, 0usize);
        let v = loop {
            let chain = &mut chains[ci];
            if ri >= chain.rules.len() {
                match stack.pop() {
                    Some((c, r)) => {
                        if let Some(tr) = trace.as_deref_mut() {
                            tr.push(NftStep::Return {
                                from: chain.name.clone(),
                                to: chains[c].name.clone(),
                            });
                        }
                        ci = c;
                        ri = r;
                        continue;
                    }
                    None => break policy(&bname, b.policy_accept, trace.as_deref_mut()),
                }
            }
            let cname = &chain.name;
            let rule = &mut chain.rules[ri];
            let mut draws = Vec::new();
            let mut lookup = None;
            let tracing = trace.is_some();
            if let Some(p) = plan.as_deref_mut() {
                ctx.force_numgen = Some(p.forced(cname, ri + 1).unwrap_or(0));
            }
            let out = eval_rule(rule, sets, ctx, &mut draws, &mut lookup, tracing);
            ctx.force_numgen = None;
            if let (Some(p), Some(d)) = (plan.as_deref_mut(), draws.first()) {
                p.reached(
                    &format!("{family} {tname}"),
                    cname,
                    ri + 1,
                    d,
                    rule_text(rule),
                );
            }
            if let Some(tr) = trace.as_deref_mut() {
                tr.push(NftStep::Rule {
                    chain: cname.clone(),
                    num: ri + 1,
                    matched: !matches!(out, RuleOutcome::NoMatch),
                    text: rule_text(rule),
                    draws,
                    lookup,
                });
            }
            let verdict = match out {
                RuleOutcome::NoMatch | RuleOutcome::Next => {
                    ri += 1;
                    continue;
                }
                RuleOutcome::Nat(req) => break Verdict::nat(req),
                RuleOutcome::Reject(w) => break Verdict::reject(w),
                RuleOutcome::Verdict(v) => v,
            };
            match verdict {
                NftVerdict::Accept => break Verdict::accept(),
                NftVerdict::Drop => break Verdict::drop(),
                NftVerdict::Continue => ri += 1,
                NftVerdict::Return => match stack.pop() {
                    Some((c, r)) => {
                        if let Some(tr) = trace.as_deref_mut() {
                            tr.push(NftStep::Return {
                                from: chains[ci].name.clone(),
                                to: chains[c].name.clone(),
                            });
                        }
                        ci = c;
                        ri = r;
                    }
                    None => break policy(&bname, b.policy_accept, trace.as_deref_mut()),
                },
                NftVerdict::Jump(ref target) | NftVerdict::Goto(ref target) => {
                    let is_jump = matches!(verdict, NftVerdict::Jump(_));
                    let Some(next) = chains.get_index_of(target.as_str()) else {
                        break Verdict::drop();
                    };
                    if is_jump {
                        if stack.len() >= MAX_DEPTH {
                            break Verdict::drop();
                        }
                        stack.push((ci, ri + 1));
                    }
                    ci = next;
                    ri = 0;
                }
            }
        };
        if let Some(tr) = trace {
            tr.push(NftStep::Verdict {
                chain: bname,
                verdict: describe(&v),
            });
        }
        v
    }
}

fn describe(v: &Verdict) -> String {
    let mut s = match v.action {
        Action::Accept => "accept".to_string(),
        Action::Drop => "drop".to_string(),
        Action::Reject(w) => stmt_text(&Stmt::Reject(w)),
    };
    match &v.nat {
        Some(NatRequest::Dnat(r)) => s.push_str(&format!(", dnat to {}", r.range_text())),
        Some(NatRequest::Snat(r)) => s.push_str(&format!(", snat to {}", r.range_text())),
        Some(NatRequest::Masquerade(_)) => s.push_str(", masquerade"),
        Some(NatRequest::Redirect(_)) => s.push_str(", redirect"),
        None => {}
    }
    s
}

fn policy(chain: &str, accept_it: bool, trace: Option<&mut Vec<NftStep>>) -> Verdict {
    if let Some(tr) = trace {
        tr.push(NftStep::Policy {
            chain: chain.to_string(),
            policy: if accept_it { "accept" } else { "drop" }.into(),
        });
    }
    if accept_it {
        Verdict::accept()
    } else {
        Verdict::drop()
    }
}

fn v4(a: std::net::IpAddr) -> Option<u32> {
    match a {
        std::net::IpAddr::V4(v) => Some(u32::from(v)),
        std::net::IpAddr::V6(_) => None,
    }
}

fn v6(a: std::net::IpAddr) -> Option<Datum> {
    match a {
        std::net::IpAddr::V4(_) => None,
        std::net::IpAddr::V6(v) => Some(u128::from(v)),
    }
}

/// The value of one field for the packet, or `None` where the kernel's load fails
/// (`NFT_BREAK`: no transport header, no conntrack entry; in an `inet` table, an IPv6 packet
/// for `ip saddr` or an IPv4 one for `ip6 saddr`, whose implied `meta nfproto` dependency
/// fails).
pub(super) fn load(f: Field, ctx: &mut EvalCtx<'_>, draws: &mut Vec<NftDraw>) -> Option<Datum> {
    let p: &Packet = &ctx.packet;
    Some(Datum::from(match f {
        // nft_payload on the IPv6 header's addresses: a full 128-bit value.
        Field::Ip6Saddr => return v6(p.src),
        Field::Ip6Daddr => return v6(p.dst),
        // The fixed header's next header; nfsim's packets carry no extension headers, so it
        // is the transport protocol.
        Field::Ip6Nexthdr => {
            v6(p.src)?;
            u32::from(p.protocol())
        }
        // nft_meta_get_eval NFT_META_NFPROTO: nft_pf(pkt), NFPROTO_IPV4 (2) or NFPROTO_IPV6 (10).
        Field::MetaNfproto => {
            if p.is_ipv4() {
                2
            } else {
                10
            }
        }
        // `icmpv6 type`: the first byte of the ICMPv6 header, behind the implied
        // `meta l4proto ipv6-icmp`.
        Field::Icmpv6Type => match p.l4 {
            sim_core::L4::Icmp { icmp_type, .. } if !p.is_ipv4() => u32::from(icmp_type),
            _ => return None,
        },
        Field::IpSaddr => v4(p.src)?,
        Field::IpDaddr => v4(p.dst)?,
        Field::IpProtocol => {
            v4(p.src)?;
            u32::from(p.protocol())
        }
        Field::MetaL4proto => u32::from(p.protocol()),
        Field::MetaMark => p.mark,
        Field::ThSport => u32::from(p.sport()?),
        Field::ThDport => u32::from(p.dport()?),
        Field::Sport(q) => {
            if p.protocol() != q {
                return None;
            }
            u32::from(p.sport()?)
        }
        Field::Dport(q) => {
            if p.protocol() != q {
                return None;
            }
            u32::from(p.dport()?)
        }
        Field::CtState => match ctx.ct {
            CtState::Invalid => 1,
            CtState::Untracked => 64,
            CtState::Tracked(i) => match i.info {
                crate::CtInfoKind::Established => 2,
                crate::CtInfoKind::Related => 4,
                crate::CtInfoKind::New => 8,
            },
        },
        Field::CtStatus => match ctx.ct {
            CtState::Tracked(i) => i.status,
            _ => return None,
        },
        Field::FibSaddrType => fib_type(ctx, p.src),
        Field::FibDaddrType => fib_type(ctx, p.dst),
        Field::Numgen { modulus, offset } => {
            let draw = ctx.rng.next_u32();
            // nft_ng_random_eval: reciprocal_scale(get_random_u32(), priv->modulus) + offset.
            let scaled = match ctx.force_numgen {
                Some(v) => v.min(modulus.saturating_sub(1)),
                None => ((u64::from(draw) * u64::from(modulus)) >> 32) as u32,
            };
            let value = scaled.wrapping_add(offset);
            draws.push(NftDraw {
                draw,
                modulus,
                value,
            });
            value
        }
    }))
}

/// `fib saddr|daddr type`: the route type of the address (nft_fib4_eval_type /
/// nft_fib6_eval_type). For IPv6 nfsim tells `local` (an address of the namespace, `::1`
/// included), `multicast` and otherwise `unicast`; the parser admits only `local` in `ip6`
/// and `inet` tables, so the types it does not tell apart never decide a match.
fn fib_type(ctx: &EvalCtx<'_>, a: std::net::IpAddr) -> u32 {
    match a {
        std::net::IpAddr::V4(a) => ctx.addr_types.addr_type(a, None) as u32,
        std::net::IpAddr::V6(a) => {
            if ctx.addr_types.is_local6(a, None) {
                2
            } else if a.is_multicast() {
                5
            } else {
                1
            }
        }
    }
}

fn load_key(lhs: &[Field], ctx: &mut EvalCtx<'_>, draws: &mut Vec<NftDraw>) -> Option<Vec<Datum>> {
    let mut v = Vec::with_capacity(lhs.len());
    for f in lhs {
        v.push(load(*f, ctx, draws)?);
    }
    Some(v)
}

fn key_matches(k: &ElemKey, v: &[Datum]) -> bool {
    match k {
        ElemKey::Exact(x) => x.as_slice() == v,
        ElemKey::Range(lo, hi) => v.len() == 1 && *lo <= v[0] && v[0] <= *hi,
    }
}

fn set_lookup<'s>(s: &'s NftSet, v: &[Datum], now: sim_core::SimTime) -> Option<&'s Element> {
    let live = |e: &&Element| e.expires.is_none_or(|x| x > now);
    if !s.is_interval() {
        return s.elements.get(&ElemKey::Exact(v.to_vec())).filter(live);
    }
    s.elements
        .iter()
        .find(|(k, e)| key_matches(k, v) && live(e))
        .map(|(_, e)| e)
}

fn is_flag_field(f: Field) -> bool {
    matches!(f, Field::CtState | Field::CtStatus)
}

fn eval_rule(
    rule: &mut NftRule,
    sets: &mut IndexMap<String, NftSet>,
    ctx: &mut EvalCtx<'_>,
    draws: &mut Vec<NftDraw>,
    lookup: &mut Option<String>,
    tracing: bool,
) -> RuleOutcome {
    for s in rule.stmts.iter_mut() {
        match s {
            Stmt::Match {
                lhs,
                mask,
                negated,
                rhs,
            } => {
                let Some(v) = load_key(lhs, ctx, draws) else {
                    return RuleOutcome::NoMatch;
                };
                let hit = match rhs {
                    Rhs::Value(k) => {
                        if let (Some(m), ElemKey::Exact(x)) = (mask, &k) {
                            (v[0] & Datum::from(*m)) == x[0]
                        } else if lhs.len() == 1 && is_flag_field(lhs[0]) {
                            match k {
                                ElemKey::Exact(x) => v[0] & x[0] != 0,
                                ElemKey::Range(..) => false,
                            }
                        } else {
                            key_matches(k, &v)
                        }
                    }
                    Rhs::Set(elems) => elems.iter().any(|k| key_matches(k, &v)),
                    Rhs::SetRef(name) => sets
                        .get(name.as_str())
                        .is_some_and(|st| set_lookup(st, &v, ctx.now).is_some()),
                };
                if hit == *negated {
                    return RuleOutcome::NoMatch;
                }
            }
            Stmt::Counter { packets, bytes } => {
                *packets += 1;
                *bytes += u64::from(ctx.packet.len);
            }
            Stmt::Verdict(v) => {
                return RuleOutcome::Verdict(v.clone());
            }
            Stmt::Vmap { lhs, map, anon } => {
                let Some(v) = load_key(lhs, ctx, draws) else {
                    return RuleOutcome::NoMatch;
                };
                let found = match map {
                    Some(name) => sets
                        .get(name.as_str())
                        .and_then(|st| set_lookup(st, &v, ctx.now))
                        .and_then(|e| e.verdict.clone()),
                    None => anon
                        .iter()
                        .find(|(k, _)| key_matches(k, &v))
                        .map(|(_, vd)| vd.clone()),
                };
                if tracing {
                    *lookup = Some(match (&found, map) {
                        (Some(vd), Some(m)) => format!("@{m}: {vd}"),
                        (Some(vd), None) => format!("vmap: {vd}"),
                        (None, Some(m)) => format!("@{m}: no element"),
                        (None, None) => "vmap: no element".into(),
                    });
                }
                match found {
                    Some(vd) => {
                        return RuleOutcome::Verdict(vd);
                    }
                    None => return RuleOutcome::NoMatch,
                }
            }
            Stmt::MarkSet(op) => {
                let m = &mut ctx.packet.mark;
                *m = match *op {
                    MarkOp::Set(v) => v,
                    MarkOp::Or(v) => *m | v,
                    MarkOp::Xor(v) => *m ^ v,
                    MarkOp::And(v) => *m & v,
                };
            }
            Stmt::Update { set, key } => {
                let Some(v) = load_key(key, ctx, draws) else {
                    return RuleOutcome::NoMatch;
                };
                if let Some(st) = sets.get_mut(set.as_str()) {
                    let expires = st
                        .timeout_ms
                        .map(|ms| ctx.now + SimDuration::from_millis(ms));
                    let e = st.elements.entry(ElemKey::Exact(v)).or_insert(Element {
                        verdict: None,
                        comment: None,
                        timeout_ms: None,
                        expires,
                    });
                    // `update` refreshes the expiry of an element that is there.
                    e.expires = expires;
                }
            }
            Stmt::Nat {
                dnat, addr, port, ..
            } => {
                // nft_nat_inet_eval: in an `inet` table a `dnat ip to` acts on IPv4 packets
                // only (and `ip6` on IPv6 ones); for the other family the statement does
                // nothing and the rule goes on.
                if addr.is_ipv4() != ctx.packet.is_ipv4() {
                    continue;
                }
                let range = NatRange {
                    addrs: Some((*addr, *addr)),
                    ports: port.map(|p| (p, p)),
                    base_port: None,
                    random: false,
                    random_fully: false,
                    persistent: false,
                };
                return RuleOutcome::Nat(if *dnat {
                    NatRequest::Dnat(range)
                } else {
                    NatRequest::Snat(range)
                });
            }
            Stmt::Masquerade { fully_random } => {
                return RuleOutcome::Nat(NatRequest::Masquerade(PortNat {
                    ports: None,
                    random: false,
                    random_fully: *fully_random,
                }))
            }
            Stmt::Reject(w) => {
                // Only an `inet` table's `reject` (nft_reject_inet: ICMPX port-unreachable)
                // meets an IPv6 packet with the IPv4 code: nf_send_unreach6 sends ICMPv6
                // port-unreachable.
                let w = match *w {
                    crate::rule::RejectWith::IcmpPortUnreachable if !ctx.packet.is_ipv4() => {
                        crate::rule::RejectWith::Icmp6PortUnreachable
                    }
                    w => w,
                };
                return RuleOutcome::Reject(w);
            }
            Stmt::Iifname { negated, name } => {
                if ifname_hit(ctx.packet.iif.as_ref(), name) == *negated {
                    return RuleOutcome::NoMatch;
                }
            }
            Stmt::Oifname { negated, name } => {
                if ifname_hit(ctx.packet.oif.as_ref(), name) == *negated {
                    return RuleOutcome::NoMatch;
                }
            }
        }
    }
    RuleOutcome::Next
}

/// meta iifname / oifname: the interface name compared as a string (no interface is the
/// empty name); `prefix*` is a prefix match (nft turns it into a shorter comparison).
fn ifname_hit(dev: Option<&sim_core::IfName>, name: &str) -> bool {
    let dev = dev.map(|i| i.as_str()).unwrap_or("");
    match name.strip_suffix('*') {
        Some(prefix) => dev.starts_with(prefix),
        None => dev == name,
    }
}
