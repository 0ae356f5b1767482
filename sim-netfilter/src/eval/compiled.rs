//! The compiled, indexed walk (the same results as the reference walk, see `compile.rs`),
//! and the memo that replays a pure walk's verdict, counters and mark per feature key.

use std::net::IpAddr;

use sim_core::{Packet, L4};

use crate::compile::{
    CMatch, CRule, CTarget, MemoSpec, Program, DST_INV, END_INDEXED, HAS_DST, HAS_INIT, HAS_PROTO,
    HAS_SRC, IP_TESTS, PROTO_INV, SLOW_IP, SRC_INV,
};
use crate::index::{Key, Lookup};
use crate::rule::*;
use crate::ruleset::{Ruleset, TableData};
use crate::state::{MemoKey, MemoRef, RulesetState, MEMO_NFACCT, MEMO_POLICY};
use crate::types::*;

use super::matches::{ifaces_ok, match_one, ports_ok};
use super::{effect, Action, EvalCtx, Pkt, Verdict, MAX_DEPTH};

/// The IP part checks the compiled form leaves to the original rule (interfaces, fragments).
#[inline]
fn slow_ip_ok(ip: &IpMatch, ctx: &EvalCtx<'_>) -> bool {
    if !ifaces_ok(ip, &ctx.packet) {
        return false;
    }
    // The compiled form holds IPv4 addresses; an IPv6 rule's (never walked compiled, see
    // `run_hook`) are tested here.
    for (n, inv, a) in [
        (&ip.src, ip.src_inv, ctx.packet.src),
        (&ip.dst, ip.dst_inv, ctx.packet.dst),
    ] {
        if let Some(n @ IpNet::V6(_)) = n {
            if n.contains(a) == inv {
                return false;
            }
        }
    }
    ip.frag != Some(false)
}

/// The original rule of compiled rule `at`.
#[inline]
pub(crate) fn origin_rule<'a>(td: &'a TableData, prog: &Program, at: usize) -> &'a Rule {
    let (chain, pos) = prog.origins[at];
    &td.chain(chain).rules[pos as usize]
}

#[inline]
#[allow(clippy::too_many_arguments)]
fn fast_matches(
    rs: &Ruleset,
    td: &TableData,
    prog: &Program,
    cr: &CRule,
    at: usize,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    pk: &Pkt,
    state: &mut RulesetState,
    mut rec: Option<&mut Recorder<'_>>,
) -> bool {
    if cr.flags & IP_TESTS != 0 {
        if cr.flags & HAS_SRC != 0
            && ((pk.src ^ cr.src) & cr.smask == 0) == (cr.flags & SRC_INV != 0)
        {
            return false;
        }
        if cr.flags & HAS_DST != 0
            && ((pk.dst ^ cr.dst) & cr.dmask == 0) == (cr.flags & DST_INV != 0)
        {
            return false;
        }
        if cr.flags & HAS_PROTO != 0 && (pk.proto == cr.proto) == (cr.flags & PROTO_INV != 0) {
            return false;
        }
        if cr.flags & SLOW_IP != 0 && !slow_ip_ok(&origin_rule(td, prog, at).ip, ctx) {
            return false;
        }
    }
    let rest = match cr.nmatch {
        0 => &[][..],
        n => &prog.matches[cr.match_start as usize..][..usize::from(n)],
    };
    for m in std::iter::once(&cr.first).chain(rest) {
        if !cmatch_ok(
            rs,
            td,
            prog,
            m,
            at,
            hook,
            ctx,
            pk,
            state,
            rec.as_deref_mut(),
        ) {
            return false;
        }
    }
    true
}

/// One compiled match of `cr`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
fn cmatch_ok(
    rs: &Ruleset,
    td: &TableData,
    prog: &Program,
    m: &CMatch,
    at: usize,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    pk: &Pkt,
    state: &mut RulesetState,
    rec: Option<&mut Recorder<'_>>,
) -> bool {
    match *m {
        CMatch::Always => true,
        CMatch::Ports {
            kind,
            sport,
            dport,
            sinv,
            dinv,
            flags,
        } => {
            if kind == 2 && !matches!(ctx.packet.l4, L4::Sctp { .. }) {
                return false;
            }
            if !ports_ok(&sport, sinv, &dport, dinv, pk) {
                return false;
            }
            match flags {
                Some((mask, cmp, inv)) => match ctx.packet.l4 {
                    L4::Tcp { flags, .. } => ((flags.0 & mask) == cmp) != inv,
                    _ => false,
                },
                None => true,
            }
        }
        CMatch::Mark { value, mask, inv } => ((ctx.packet.mark & mask) == value) != inv,
        CMatch::State { mask, inv } => (mask & pk.ctbits != 0) != inv,
        CMatch::Random { threshold, inv } => {
            ((ctx.rng.next_u32() & 0x7fff_ffff) < threshold) != inv
        }
        CMatch::Nfacct { idx } => {
            // xt_nfacct: count and match (a walk being remembered notes the count).
            let bind = Bind {
                idx,
                uid: rs.nfacct.entries[idx as usize].uid,
            };
            let s = state.nfacct_slot(bind);
            s.packets += 1;
            s.bytes += pk.len;
            if let Some(r) = rec {
                r.refs.push(MemoRef {
                    bind,
                    pos: MEMO_NFACCT,
                });
            }
            true
        }
        CMatch::Slow { idx } => {
            let rule = origin_rule(td, prog, at);
            match_one(
                rs,
                &rule.matches[usize::from(idx)],
                hook,
                ctx,
                pk,
                state,
                None,
            )
        }
    }
}

/// What a walk being remembered collects: the counters it bumps and its mark change.
struct Recorder<'a> {
    refs: &'a mut Vec<MemoRef>,
    keep: u32,
    xor: u32,
}

/// The memo key of a packet whose `--ctstate` bits are `ctbits`, for a pure walk reading
/// `spec` (see [`MemoSpec`]): the packet's raw key words masked by `spec.masks`.
#[inline]
fn memo_key(spec: &MemoSpec, packet: &Packet, ctbits: u16) -> MemoKey {
    let v4 = |a: IpAddr| match a {
        IpAddr::V4(v) => u32::from(v),
        IpAddr::V6(_) => 0,
    };
    let (sport, dport, l4, a, b) = match packet.l4 {
        L4::Tcp {
            sport,
            dport,
            flags,
            ..
        } => (sport, dport, 1u8 | 4, flags.0, 0u8),
        L4::Udp { sport, dport } => (sport, dport, 1, 0, 0),
        L4::Sctp { sport, dport } => (sport, dport, 1 | 2, 0, 0),
        L4::Icmp {
            icmp_type, code, ..
        } => (0, 0, 8, icmp_type, code),
        L4::Other { .. } => (0, 0, 0, 0, 0),
    };
    let m = &spec.masks;
    MemoKey {
        words: [
            (u64::from(v4(packet.src)) | u64::from(v4(packet.dst)) << 32) & m[0],
            (u64::from(packet.mark) | u64::from(sport) << 32 | u64::from(dport) << 48) & m[1],
            (u64::from(packet.protocol())
                | u64::from(l4) << 8
                | u64::from(a) << 16
                | u64::from(b) << 24
                | u64::from(ctbits) << 32)
                & m[2],
        ],
        ifaces: (spec.iif || spec.oif).then(|| {
            (
                packet.iif.filter(|_| spec.iif),
                packet.oif.filter(|_| spec.oif),
            )
        }),
    }
}

impl Ruleset {
    /// The remembered outcome of `table` at `hook` for `packet` (whose `--ctstate` bits are
    /// `ctbits`), without an [`EvalCtx`]: when the hook's walk is pure and this feature key
    /// was walked before, its counters are bumped, its mark change applied to `packet` and
    /// its verdict returned, exactly as [`Ruleset::run_hook`] without a trace would.
    /// `None`: nothing remembered (or indexing is off); evaluate with `run_hook`, which then
    /// remembers it.
    #[inline]
    pub(crate) fn replay_hook(
        &self,
        table: Table,
        hook: Hook,
        packet: &mut Packet,
        ctbits: u16,
        state: &mut RulesetState,
    ) -> Option<Verdict> {
        if !self.indexing || !packet.is_ipv4() {
            return None;
        }
        let td = self.tables[table.index()].as_ref()?;
        let base = td.builtin[hook as usize]?;
        let spec = td.program.memo[hook as usize].as_ref()?;
        let key = memo_key(spec, packet, ctbits);
        let at = table.index() * 5 + hook as usize;
        let len = u64::from(packet.len);
        let (action, nat) =
            state.memo_replay(at, td, &self.nfacct, base, &key, len, &mut packet.mark)?;
        Some(Verdict {
            action,
            nat,
            notrack: false,
            ct_mark: None,
        })
    }

    /// The compiled, indexed walk: same results as `walk` (see `compile.rs`). A pure walk
    /// (see [`MemoSpec`]) is remembered per feature key in the state and replayed the next
    /// time: same verdict, counters and mark.
    pub(super) fn walk_fast(
        &self,
        td: &TableData,
        table: Table,
        hook: Hook,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
    ) -> Verdict {
        let mut pk = Pkt::of(ctx);
        let base = td.builtin[hook as usize].unwrap_or_default();
        let Some(spec) = &td.program.memo[hook as usize] else {
            return self.walk_compiled(td, base, hook, ctx, state, &mut pk, None);
        };
        let key = memo_key(spec, &ctx.packet, pk.ctbits);
        let at = table.index() * 5 + hook as usize;
        if let Some((action, nat)) = state.memo_replay(
            at,
            td,
            &self.nfacct,
            base,
            &key,
            pk.len,
            &mut ctx.packet.mark,
        ) {
            return Verdict {
                action,
                nat,
                notrack: false,
                ct_mark: None,
            };
        }
        let mut refs = std::mem::take(&mut state.memo_scratch);
        refs.clear();
        let mut rec = Recorder {
            refs: &mut refs,
            keep: u32::MAX,
            xor: 0,
        };
        let v = self.walk_compiled(td, base, hook, ctx, state, &mut pk, Some(&mut rec));
        let (keep, xor) = (rec.keep, rec.xor);
        state.memo_insert(
            at,
            &td.program,
            key,
            v.action,
            v.nat.clone(),
            keep,
            xor,
            &refs,
        );
        state.memo_scratch = refs;
        v
    }

    #[allow(clippy::too_many_arguments)]
    fn walk_compiled(
        &self,
        td: &TableData,
        base: u32,
        hook: Hook,
        ctx: &mut EvalCtx<'_>,
        state: &mut RulesetState,
        pk: &mut Pkt,
        mut rec: Option<&mut Recorder<'_>>,
    ) -> Verdict {
        let prog = &*td.program;
        let key = pk.dport.map(|d| Key {
            dst: Some(pk.dst),
            proto: pk.proto,
            dport: d,
        });
        let mut out = Verdict::accept();
        // The chains jumped from: (start, end with END_INDEXED, position to return to).
        let mut stack = [(0u32, 0u32, 0u32); MAX_DEPTH];
        let mut sp = 0usize;
        let span = prog.spans[base as usize];
        let mut start = span.start as usize;
        let mut end = span.end as usize;
        let mut indexed = span.indexed;
        let mut pos = start;
        loop {
            if pos >= end {
                match sp.checked_sub(1) {
                    None => {
                        if let Some(r) = rec.as_deref_mut() {
                            r.refs.push(MemoRef {
                                bind: td.chain(base).policy_slot,
                                pos: MEMO_POLICY,
                            });
                        }
                        return self.policy(td, base, Table::Filter, state, pk, out, None);
                    }
                    Some(top) => {
                        sp = top;
                        let (s, e, p) = stack[top];
                        start = s as usize;
                        end = (e & !END_INDEXED) as usize;
                        indexed = e & END_INDEXED != 0;
                        pos = p as usize;
                        continue;
                    }
                }
            }
            let mut known = false;
            if indexed {
                // An indexed chain has rules: its first one says which chain it is.
                let chain = prog.origins[start].0;
                if let Some(ix) = prog.index_of(chain) {
                    match ix.lookup(pos - start, key) {
                        Lookup::Outside => {}
                        Lookup::Past(e) => {
                            pos = start + e;
                            continue;
                        }
                        Lookup::Match(at) => {
                            pos = start + at;
                            known = true;
                        }
                    }
                }
            }
            let cr = &prog.rules[pos];
            if !known
                && !fast_matches(
                    self,
                    td,
                    prog,
                    cr,
                    pos,
                    hook,
                    ctx,
                    pk,
                    state,
                    rec.as_deref_mut(),
                )
            {
                pos += 1;
                continue;
            }
            let bind = Bind {
                idx: cr.slot_idx,
                uid: cr.slot_uid,
            };
            let s = state.slot_lazy(bind, || {
                if cr.flags & HAS_INIT != 0 {
                    origin_rule(td, prog, pos).initial_counters
                } else {
                    Counters::default()
                }
            });
            s.packets += 1;
            s.bytes += pk.len;
            if let Some(r) = rec.as_deref_mut() {
                r.refs.push(MemoRef {
                    bind,
                    pos: pos as u32,
                });
            }
            match cr.target {
                CTarget::None => pos += 1,
                CTarget::Accept => return out,
                CTarget::Drop => {
                    out.action = Action::Drop;
                    return out;
                }
                // RETURN is falling off the end of the chain: the top of the loop pops the
                // stack, or applies the built-in chain's policy.
                CTarget::Return => pos = end,
                CTarget::Jump { start: s, end: e } | CTarget::Goto { start: s, end: e } => {
                    if matches!(cr.target, CTarget::Jump { .. }) {
                        if sp >= MAX_DEPTH {
                            out.action = Action::Drop;
                            return out;
                        }
                        let here = end as u32 | if indexed { END_INDEXED } else { 0 };
                        stack[sp] = (start as u32, here, (pos + 1) as u32);
                        sp += 1;
                    }
                    start = s as usize;
                    end = (e & !END_INDEXED) as usize;
                    indexed = e & END_INDEXED != 0;
                    pos = start;
                }
                CTarget::JumpEmpty => {
                    // The chain returns at once: as a jump and a return, with the same
                    // jump-stack limit.
                    if sp >= MAX_DEPTH {
                        out.action = Action::Drop;
                        return out;
                    }
                    pos += 1;
                }
                CTarget::Mark { value, mask } => {
                    ctx.packet.mark = (ctx.packet.mark & !mask) ^ value;
                    if let Some(r) = rec.as_deref_mut() {
                        r.keep &= !mask;
                        r.xor = (r.xor & !mask) ^ value;
                    }
                    pos += 1;
                }
                CTarget::Other(i) => {
                    if effect(&prog.others[i as usize], ctx, &mut out, None) {
                        return out;
                    }
                    // CT --notrack changes what `--ctstate` sees from here on.
                    pk.ctbits = ctx.ct.state_bits();
                    pos += 1;
                }
            }
        }
    }
}

#[cfg(test)]
mod memo_tests {
    //! The remembered walks give what walking gives: verdicts, NAT requests, marks, every
    //! counter and the random stream, on random filter tables mixing pure rules (addresses,
    //! masks, ports, TCP flags, ICMP, multiport, interfaces, marks, ctstate; MARK, REJECT,
    //! jumps, gotos, LOG) with rules that make a walk impure (statistic, addrtype, CONNMARK,
    //! other conntrack tests), and packets drawn from small pools so that keys repeat; with a
    //! commit and a counter reset in the middle.
    use super::*;
    use crate::eval::{CtInfo, CtInfoKind, CtState, CtTuple, LocalAddrs};
    use crate::{RestoreOptions, SaveOptions};
    use proptest::prelude::*;
    use sim_core::{IfName, SimRng, SimTime, TcpFlags};

    fn pick<'a, T>(r: &mut SimRng, xs: &'a [T]) -> &'a T {
        &xs[r.below(xs.len() as u64) as usize]
    }

    fn random_filter(r: &mut SimRng, impure: bool) -> String {
        let mut t = String::from(
            "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD DROP [0:0]\n:OUTPUT ACCEPT [0:0]\n:A - [0:0]\n:B - [0:0]\n:E - [0:0]\n",
        );
        let tests = [
            "",
            " -s 10.0.0.0/8",
            " ! -s 127.0.0.0/8",
            " -d 10.96.0.1/32",
            " -d 10.96.0.0/24",
            " -p tcp -m tcp --dport 80",
            " -p udp -m udp --sport 1000:1002",
            " -p tcp -m tcp --tcp-flags SYN,ACK SYN",
            " -p tcp -m multiport --dports 53,80:90",
            " -p icmp -m icmp --icmp-type echo-request",
            " -p sctp -m sctp --dport 80",
            " -m mark --mark 0x1/0x1",
            " -m mark ! --mark 0x10/0x30",
            " -m conntrack --ctstate NEW",
            " -m conntrack ! --ctstate RELATED,ESTABLISHED,DNAT",
            " -m comment --comment x",
            " -i eth0",
            " ! -o lo",
        ];
        let impure_tests = [
            " -m statistic --mode random --probability 0.5",
            " -m addrtype --dst-type LOCAL",
            " -m conntrack --ctstate NEW --ctorigdst 10.96.0.0/12",
            " -m statistic --mode nth --every 3 --packet 1",
        ];
        let targets = [
            "",
            " -j ACCEPT",
            " -j DROP",
            " -j RETURN",
            " -j REJECT",
            " -j A",
            " -j B",
            " -j E",
            " -g B",
            " -j MARK --set-xmark 0x1/0x3",
            " -j MARK --set-xmark 0x10/0x0",
            " -j LOG --log-prefix x",
        ];
        for chain in ["INPUT", "FORWARD", "OUTPUT", "A", "B"] {
            for _ in 0..(2 + r.below(6)) {
                // Interfaces only where both exist (and each at most once).
                let usable = if matches!(chain, "INPUT" | "OUTPUT") {
                    &tests[..15]
                } else {
                    &tests[..]
                };
                let mut test = pick(r, usable).to_string();
                if r.below(3) == 0 {
                    test.push_str(pick::<&str>(r, &tests[11..15]));
                }
                if r.below(6) == 0 {
                    // Counted on an accounting object: still pure.
                    test.push_str(" -m nfacct --nfacct-name acct");
                }
                if impure && r.below(12) == 0 {
                    test.push_str(pick::<&str>(r, &impure_tests));
                }
                let mut target = *pick(r, &targets);
                // Keep jumps acyclic: A may go to B, B to nothing.
                if chain == "B" && (target.contains("-j A") || target.contains("B")) {
                    target = " -j RETURN";
                }
                if chain == "A" && target.contains("-j A") {
                    target = "";
                }
                if impure && r.below(20) == 0 {
                    target = " -j CONNMARK --set-xmark 0x5/0xff";
                }
                t.push_str(&format!("-A {chain}{test}{target}\n"));
            }
        }
        t.push_str("COMMIT\n");
        t
    }

    fn random_packet(r: &mut SimRng) -> (Packet, CtState) {
        let src = *pick(r, &["10.1.0.1", "127.0.0.1", "192.168.0.5"]);
        let dst = *pick(r, &["10.96.0.1", "10.96.0.7", "10.0.0.9"]);
        let sport = *pick(r, &[1000u16, 1001, 5000]);
        let dport = *pick(r, &[53u16, 80, 85, 443]);
        let s = std::net::SocketAddr::new(src.parse().unwrap(), sport);
        let d = std::net::SocketAddr::new(dst.parse().unwrap(), dport);
        let mut p = match r.below(7) {
            6 => {
                // An echo reply: ICMP of another type.
                let mut p = Packet::icmp_echo_request(s.ip(), d.ip(), 7, 1);
                if let L4::Icmp { icmp_type, .. } = &mut p.l4 {
                    *icmp_type = 0;
                }
                p
            }
            0 => Packet::udp(s, d),
            1 => Packet::tcp(s, d, TcpFlags::SYN),
            2 => Packet::tcp(s, d, TcpFlags::ACK),
            3 => Packet::icmp_echo_request(s.ip(), d.ip(), 7, 1),
            4 => {
                let mut p = Packet::udp(s, d);
                p.l4 = L4::Sctp { sport, dport };
                p
            }
            _ => Packet::tcp(s, d, TcpFlags::SYN | TcpFlags::ACK),
        };
        p.mark = *pick(r, &[0u32, 1, 0x10, 0x11, 0x20]);
        p.len = 40 + r.below(3) as u16;
        p.iif = Some(IfName::new(pick::<&str>(r, &["eth0", "lo", "veth1"])).unwrap());
        p.oif = Some(IfName::new(pick::<&str>(r, &["eth0", "lo"])).unwrap());
        let tuple = CtTuple {
            src: "10.1.0.1".parse().unwrap(),
            dst: "10.96.0.1".parse().unwrap(),
            proto: 6,
            sport: 1,
            dport: 2,
        };
        let ct = match r.below(4) {
            0 => CtState::Invalid,
            n => CtState::Tracked(CtInfo {
                info: [
                    CtInfoKind::New,
                    CtInfoKind::Established,
                    CtInfoKind::Related,
                ][n as usize - 1],
                dir: CtDirection::Original,
                status: if r.below(2) == 0 {
                    0
                } else {
                    ctstatus::DST_NAT
                },
                orig: tuple,
                reply: tuple,
                mark: 0,
                expires_secs: 30,
            }),
        };
        (p, ct)
    }

    fn check(seed: u64, impure: bool) -> usize {
        let mut r = SimRng::derive(seed, "memo-rules");
        let text = random_filter(&mut r, impure);
        let mut fast = Ruleset::new();
        fast.nfacct_add("acct").unwrap();
        fast.restore(&text, &RestoreOptions::default())
            .unwrap_or_else(|e| panic!("{e}\n{text}"));
        let mut plain = fast.clone();
        plain.set_indexing(false);
        let addrs = LocalAddrs::new();
        let (mut s1, mut s2) = (RulesetState::new(), RulesetState::new());
        let (mut g1, mut g2) = (SimRng::derive(seed, "stat"), SimRng::derive(seed, "stat"));
        let mut pr = SimRng::derive(seed, "memo-packets");
        for i in 0..300u64 {
            if i == 150 {
                // A commit installs a new program: what was remembered no longer applies.
                let extra = "-I FORWARD 1 -m mark --mark 0x20/0x20 -j DROP";
                fast.command(Table::Filter, extra).unwrap();
                plain.command(Table::Filter, extra).unwrap();
            }
            if i == 200 {
                s1.zero_counters(&fast, None);
                s2.zero_counters(&plain, None);
            }
            let (pkt, ct) = random_packet(&mut pr);
            for hook in [Hook::Input, Hook::Forward, Hook::Output] {
                let now = SimTime::from_millis(i * 10);
                let mut c1 = EvalCtx::new(pkt, &addrs, now, &mut g1);
                c1.ct = ct;
                let v1 = fast.run_hook(Table::Filter, hook, &mut c1, &mut s1, None);
                let (m1, ct1) = (c1.packet.mark, c1.ct);
                let mut c2 = EvalCtx::new(pkt, &addrs, now, &mut g2);
                c2.ct = ct;
                let v2 = plain.run_hook(Table::Filter, hook, &mut c2, &mut s2, None);
                assert_eq!(v1, v2, "seed {seed} packet {i} {pkt} {hook}\n{text}");
                assert_eq!(
                    m1, c2.packet.mark,
                    "seed {seed} packet {i} {pkt} {hook}\n{text}"
                );
                assert_eq!(ct1, c2.ct, "seed {seed} packet {i}");
            }
        }
        let opts = SaveOptions {
            counters: true,
            ..SaveOptions::default()
        };
        assert_eq!(
            fast.save(&s1, &opts),
            plain.save(&s2, &opts),
            "seed {seed}: counters differ\n{text}"
        );
        assert_eq!(
            g1.next_u64(),
            g2.next_u64(),
            "seed {seed}: random draws differ"
        );
        assert_eq!(
            s1.nfacct_counters(&fast, "acct"),
            s2.nfacct_counters(&plain, "acct"),
            "seed {seed}: nfacct counters differ\n{text}"
        );
        s1.memo_entries()
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(48))]
        #[test]
        fn remembered_walks_equal_walking(seed in any::<u64>(), impure in any::<bool>()) {
            check(seed, impure);
        }
    }

    #[test]
    fn the_memo_stays_bounded() {
        let addrs = LocalAddrs::new();
        let mut g = SimRng::derive(1, "stat");
        let run = |rs: &Ruleset, st: &mut RulesetState, g: &mut SimRng, p: Packet| {
            let mut c = EvalCtx::new(p, &addrs, SimTime::ZERO, g);
            rs.run_hook(Table::Filter, Hook::Forward, &mut c, st, None)
        };
        let pkt = |i: u32| {
            let dst = std::net::Ipv4Addr::from(0x0a00_0000 + i);
            Packet::udp(
                "10.1.0.1:1000".parse().unwrap(),
                std::net::SocketAddr::new(dst.into(), 53),
            )
        };
        // A walk bumping 100 counters is walked every time, not remembered.
        let mut text = String::from("*filter\n:FORWARD ACCEPT [0:0]\n");
        for _ in 0..100 {
            text.push_str("-A FORWARD\n");
        }
        text.push_str("COMMIT\n");
        let rs = Ruleset::from_save(&text).unwrap();
        let mut st = RulesetState::new();
        run(&rs, &mut st, &mut g, pkt(1));
        run(&rs, &mut st, &mut g, pkt(1));
        assert_eq!(st.memo_entries(), 0);
        let c = st
            .rule_counters(&rs, Table::Filter, "FORWARD", 100)
            .unwrap();
        assert_eq!(c.packets, 2);
        // Keys beyond the limit start the memo over.
        let rs = Ruleset::from_save(
            "*filter\n:FORWARD ACCEPT [0:0]\n-A FORWARD -d 10.0.0.7/32 -j DROP\nCOMMIT\n",
        )
        .unwrap();
        let mut st = RulesetState::new();
        for i in 0..(crate::state::MEMO_MAX_ENTRIES as u32 + 10) {
            let v = run(&rs, &mut st, &mut g, pkt(i));
            assert_eq!(v.action == Action::Drop, i == 7);
        }
        assert_eq!(st.memo_entries(), 10);
    }

    #[test]
    fn pure_tables_are_remembered_and_impure_ones_are_not() {
        // Pure rulesets are remembered (the property test above is not vacuous)...
        assert!((0..8).map(|s| check(s, false)).sum::<usize>() > 0);
        // ...and a statistic rule anywhere a hook can reach keeps that hook walking.
        let mut rs = Ruleset::new();
        rs.restore(
            "*filter\n:FORWARD ACCEPT [0:0]\n:INPUT ACCEPT [0:0]\n:S - [0:0]\n\
             -A FORWARD -m conntrack --ctstate NEW -j S\n\
             -A S -m statistic --mode random --probability 0.5 -j DROP\n\
             -A INPUT -m conntrack --ctstate NEW -j ACCEPT\nCOMMIT\n",
            &RestoreOptions::default(),
        )
        .unwrap();
        let prog = &rs.tables[Table::Filter.index()].as_ref().unwrap().program;
        assert!(prog.memo[Hook::Forward as usize].is_none());
        assert!(prog.memo[Hook::Input as usize].is_some());
        // kube-proxy >= 1.29 counts its INVALID drops with nfacct: still remembered.
        let mut rs = Ruleset::new();
        rs.nfacct_add("ct_state_invalid_dropped_pkts").unwrap();
        rs.restore(
            "*filter\n:FORWARD ACCEPT [0:0]\n:KUBE-FORWARD - [0:0]\n\
             -A FORWARD -j KUBE-FORWARD\n\
             -A KUBE-FORWARD -m conntrack --ctstate INVALID -m nfacct --nfacct-name ct_state_invalid_dropped_pkts -j DROP\n\
             -A KUBE-FORWARD -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT\nCOMMIT\n",
            &RestoreOptions::default(),
        )
        .unwrap();
        let prog = &rs.tables[Table::Filter.index()].as_ref().unwrap().program;
        assert!(prog.memo[Hook::Forward as usize].is_some());
    }
}
