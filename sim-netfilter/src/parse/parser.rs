//! Walking the words of one command line: each option resolved like iptables' `getopt_long`
//! (exact name, else a unique prefix), extensions loaded in order (`-p` loading its protocol's
//! match implicitly), and the [`Command`] assembled.

use crate::error::{RuleError, RuleErrorKind};
use crate::rule::*;
use crate::types::*;

use super::core_opts::*;
use super::matches::*;
use super::target::*;
use super::value::bad;
use super::{Command, OptDef, Token};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OptSet {
    Match(MKind),
    Target,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Resolved {
    Core(Core, u8),
    Match(MKind, OptDef),
    Target(OptDef),
}

struct Parser<'a> {
    toks: &'a [Token<'a>],
    table: Table,
    family: Family,
    cmd: Option<(Core, usize)>,
    chain: Option<String>,
    rulenum: Option<u32>,
    chain_opt: Option<String>,
    policy: Option<String>,
    ip: IpMatch,
    srcs: Vec<IpNet>,
    dsts: Vec<IpNet>,
    rule_opts: bool,
    matches: Vec<MatchBuilder>,
    /// Option sets in first-load order. iptables merges each newly loaded extension's
    /// options in front of the older ones (`xtables_options_xfrm`: core options, then the
    /// newest extension, then older ones), so later extensions win a shared name
    /// (`-m recent … -j CONNMARK --mask` is CONNMARK's `--mask`).
    loaded: Vec<OptSet>,
    target: Option<TargetBuilder>,
    jump: Option<(String, bool, usize)>,
    counters: Option<Counters>,
}

fn err_at(kind: RuleErrorKind, i: usize) -> RuleError {
    RuleError::at(kind, i)
}

impl<'a> Parser<'a> {
    fn resolve_long(&self, name: &str) -> Result<Option<Resolved>, RuleErrorKind> {
        // The getopt table: core options, then each loaded match kind's, then the target's.
        let core = CORE_LONG
            .iter()
            .map(|&(n, c, args)| (n, Resolved::Core(c, args)));
        let target_kind = self.target.as_ref().map(|t| t.kind);
        let exts = self.loaded.iter().rev().flat_map(move |set| {
            let (opts, m): (&'static [OptDef], Option<MKind>) = match *set {
                OptSet::Match(k) => (k.opts(), Some(k)),
                OptSet::Target => (target_kind.map(|k| k.opts()).unwrap_or(NO_OPTS), None),
            };
            opts.iter().map(move |d| {
                (
                    d.name,
                    match m {
                        Some(k) => Resolved::Match(k, *d),
                        None => Resolved::Target(*d),
                    },
                )
            })
        });
        let all = || core.clone().chain(exts.clone());
        if let Some((_, r)) = all().find(|(n, _)| *n == name) {
            return Ok(Some(r));
        }
        let mut first: Option<Resolved> = None;
        for (n, r) in all() {
            if !n.starts_with(name) {
                continue;
            }
            match first {
                None => first = Some(r),
                Some(f) => {
                    let same = match (r, f) {
                        (Resolved::Core(a, _), Resolved::Core(b, _)) => a == b,
                        (Resolved::Match(k1, d1), Resolved::Match(k2, d2)) => {
                            k1 == k2 && d1.id == d2.id
                        }
                        (Resolved::Target(d1), Resolved::Target(d2)) => d1.id == d2.id,
                        _ => false,
                    };
                    // getopt_long reports an ambiguous abbreviation; iptables then says
                    // "unknown option".
                    if !same {
                        return Ok(None);
                    }
                }
            }
        }
        Ok(first)
    }

    fn load_match(&mut self, kind: MKind) {
        for m in self.matches.iter_mut().filter(|m| m.kind == kind) {
            m.completed = true;
        }
        self.matches.push(MatchBuilder::new(kind, self.family));
        if !self.loaded.contains(&OptSet::Match(kind)) {
            self.loaded.push(OptSet::Match(kind));
        }
    }

    /// The protocol match `-p` implies (`load_proto`), if any; also for `! -p`.
    fn proto_match(&self) -> Option<MKind> {
        // should_load_proto does not look at an inverted -p.
        match (self.ip.proto, self.family) {
            (6, _) => Some(MKind::Tcp),
            (17, _) => Some(MKind::Udp),
            (132, _) => Some(MKind::Sctp),
            (1, Family::Ipv4) => Some(MKind::Icmp),
            (58, Family::Ipv6) => Some(MKind::Icmp6),
            _ => None,
        }
    }

    /// Whether a NAT target may name ports: libxt_NAT's `portok` (tcp, udp, sctp, dccp and
    /// icmp, whose id is NATed like a port), which looks at the `-p` value only, not at its
    /// inversion.
    fn ports_ok(&self) -> bool {
        matches!(self.ip.proto, 6 | 17 | 132 | 33 | 1)
    }

    fn set_command(&mut self, c: Core, i: usize) -> Result<(), RuleError> {
        if let Some((prev, _)) = self.cmd {
            return Err(err_at(
                RuleErrorKind::Invalid(format!(
                    "cannot use {} with {}",
                    core_flag(c),
                    core_flag(prev)
                )),
                i,
            ));
        }
        self.cmd = Some((c, i));
        Ok(())
    }

    fn run(&mut self) -> Result<(), RuleError> {
        let toks = self.toks;
        let mut i = 0;
        let mut invert: Option<usize> = None;
        while i < toks.len() {
            let tok_i = i;
            let t = toks[i].as_str();
            i += 1;
            if t == "!" {
                if invert.is_some() {
                    return Err(err_at(
                        RuleErrorKind::Invalid("multiple consecutive ! not allowed".into()),
                        tok_i,
                    ));
                }
                invert = Some(tok_i);
                continue;
            }
            let (resolved, inline, shown) = if let Some(long) = t.strip_prefix("--") {
                let (name, inline) = match long.split_once('=') {
                    Some((n, v)) => (n, Some(v)),
                    None => (long, None),
                };
                let mut r = self.resolve_long(name).map_err(|k| err_at(k, tok_i))?;
                if r.is_none() {
                    // load_proto: an option nobody knows loads -p's match and tries again.
                    if let Some(k) = self.proto_match() {
                        if !self.loaded.contains(&OptSet::Match(k)) || name_in(k, name) {
                            self.load_match(k);
                            r = self.resolve_long(name).map_err(|k| err_at(k, tok_i))?;
                        }
                    }
                }
                match r {
                    Some(r) => (r, inline, format!("--{name}")),
                    None => return Err(err_at(RuleErrorKind::UnknownOption(t.to_string()), tok_i)),
                }
            } else if t.len() == 2 && t.starts_with('-') {
                let c = t.chars().nth(1).unwrap_or('?');
                match core_short(c) {
                    Some((core, args)) => (Resolved::Core(core, args), None, t.to_string()),
                    None => return Err(err_at(RuleErrorKind::UnknownOption(t.to_string()), tok_i)),
                }
            } else if t.starts_with('-') && t.len() > 2 {
                return Err(err_at(RuleErrorKind::UnknownOption(t.to_string()), tok_i));
            } else {
                return Err(err_at(RuleErrorKind::BadArgument(t.to_string()), tok_i));
            };
            let nargs = match resolved {
                Resolved::Core(_, n) => n,
                Resolved::Match(_, d) | Resolved::Target(d) => d.args,
            };
            // At most two arguments (--tcp-flags MASK COMP); no allocation per option.
            let mut argv: [&str; 2] = ["", ""];
            let mut argc = 0;
            if let Some(v) = inline {
                argv[0] = v;
                argc = 1;
            }
            while argc < usize::from(nargs) {
                match toks.get(i) {
                    Some(a) => {
                        argv[argc] = a.as_str();
                        argc += 1;
                        i += 1;
                    }
                    None => {
                        return Err(err_at(RuleErrorKind::MissingArgument(shown), tok_i));
                    }
                }
            }
            let args = &argv[..argc];
            let inv = invert.take().is_some();
            match resolved {
                Resolved::Core(c, _) => {
                    i = self.core(c, args, inv, tok_i, i)?;
                }
                Resolved::Match(kind, def) => {
                    if inv && !def.inv {
                        return Err(err_at(RuleErrorKind::CannotInvert(shown), tok_i));
                    }
                    self.rule_opts = true;
                    let ip = &self.ip;
                    let m = self
                        .matches
                        .iter_mut()
                        .find(|m| m.kind == kind && !m.completed)
                        .ok_or_else(|| {
                            err_at(RuleErrorKind::UnknownOption(shown.clone()), tok_i)
                        })?;
                    m.apply(&def, args, inv, ip).map_err(|k| err_at(k, tok_i))?;
                }
                Resolved::Target(def) => {
                    if inv {
                        return Err(err_at(RuleErrorKind::CannotInvert(shown), tok_i));
                    }
                    let ports_ok = self.ports_ok();
                    if let Some(tb) = self.target.as_mut() {
                        tb.apply(&def, args, ports_ok)
                            .map_err(|k| err_at(k, tok_i))?;
                    }
                }
            }
        }
        if let Some(at) = invert {
            return Err(err_at(RuleErrorKind::DanglingInvert, at));
        }
        Ok(())
    }

    /// Handles a core option; returns the next token index (positional arguments consumed).
    fn core(
        &mut self,
        c: Core,
        args: &[&str],
        inv: bool,
        tok_i: usize,
        mut next: usize,
    ) -> Result<usize, RuleError> {
        let toks = self.toks;
        let a = args.first().copied().unwrap_or("");
        let positional = |next: usize| -> Option<&str> {
            toks.get(next)
                .map(|t| t.as_str())
                .filter(|s| !s.starts_with('-') && !s.starts_with('!'))
        };
        let invertible = matches!(
            c,
            Core::Source
                | Core::Destination
                | Core::Protocol
                | Core::InIface
                | Core::OutIface
                | Core::Fragment
        );
        if inv && !invertible {
            return Err(err_at(
                RuleErrorKind::CannotInvert(core_flag(c).to_string()),
                tok_i,
            ));
        }
        let once = |seen: bool, flag: &str| -> Result<(), RuleError> {
            if seen {
                Err(err_at(
                    RuleErrorKind::Invalid(format!("multiple {flag} flags not allowed")),
                    tok_i,
                ))
            } else {
                Ok(())
            }
        };
        match c {
            Core::Append | Core::NewChain => {
                self.set_command(c, tok_i)?;
                self.chain = Some(a.to_string());
            }
            Core::Insert | Core::Delete => {
                self.set_command(c, tok_i)?;
                self.chain = Some(a.to_string());
                if let Some(n) = positional(next) {
                    let num = n
                        .parse::<u32>()
                        .ok()
                        .filter(|v| *v >= 1 && *v <= i32::MAX as u32)
                        .ok_or_else(|| {
                            err_at(bad(core_flag(c), n, "a rule number starting at 1"), next)
                        })?;
                    self.rulenum = Some(num);
                    next += 1;
                }
            }
            Core::DeleteChain | Core::Flush | Core::Zero => {
                self.set_command(c, tok_i)?;
                if let Some(ch) = positional(next) {
                    self.chain_opt = Some(ch.to_string());
                    next += 1;
                }
            }
            Core::Policy => {
                self.set_command(c, tok_i)?;
                self.chain = Some(a.to_string());
                match positional(next) {
                    Some(p) => {
                        self.policy = Some(p.to_string());
                        next += 1;
                    }
                    None => {
                        return Err(err_at(
                            RuleErrorKind::MissingArgument("-P CHAIN needs a policy".into()),
                            tok_i,
                        ))
                    }
                }
            }
            Core::Source | Core::Destination => {
                let is_src = c == Core::Source;
                once(
                    if is_src {
                        !self.srcs.is_empty()
                    } else {
                        !self.dsts.is_empty()
                    },
                    if is_src { "-s" } else { "-d" },
                )?;
                self.rule_opts = true;
                let mut list = Vec::new();
                for part in a.split(',') {
                    let n = parse_ip_net(self.family, part)
                        .map_err(|e| err_at(bad(core_flag(c), a, e), tok_i + 1))?;
                    list.push(n.masked());
                }
                if inv && list[0].is_any() {
                    return Err(err_at(
                        RuleErrorKind::Invalid(format!(
                            "! {} {} would never match (the kernel refuses it)",
                            core_flag(c),
                            self.family.any_net()
                        )),
                        tok_i,
                    ));
                }
                if is_src {
                    self.srcs = list;
                    self.ip.src_inv = inv;
                } else {
                    self.dsts = list;
                    self.ip.dst_inv = inv;
                }
            }
            Core::Protocol => {
                once(self.ip.proto != 0 || self.ip.proto_inv, "-p")?;
                self.rule_opts = true;
                let p = parse_protocol(a).map_err(|e| err_at(bad("-p", a, e), tok_i + 1))?;
                if p == 0 && inv {
                    return Err(err_at(
                        RuleErrorKind::Invalid("rule would never match protocol".into()),
                        tok_i,
                    ));
                }
                self.ip.proto = p;
                self.ip.proto_inv = inv;
            }
            Core::InIface | Core::OutIface => {
                let is_in = c == Core::InIface;
                once(
                    if is_in {
                        self.ip.iif.is_some()
                    } else {
                        self.ip.oif.is_some()
                    },
                    if is_in { "-i" } else { "-o" },
                )?;
                self.rule_opts = true;
                let p = IfacePattern::parse(a)
                    .map_err(|e| err_at(bad(core_flag(c), a, e), tok_i + 1))?;
                if is_in {
                    self.ip.iif = Some(p);
                    self.ip.iif_inv = inv;
                } else {
                    self.ip.oif = Some(p);
                    self.ip.oif_inv = inv;
                }
            }
            Core::Fragment => {
                if self.family == Family::Ipv6 {
                    return Err(err_at(
                        RuleErrorKind::Invalid(
                            "`-f' is not supported in IPv6, use -m frag instead".into(),
                        ),
                        tok_i,
                    ));
                }
                once(self.ip.frag.is_some(), "-f")?;
                self.rule_opts = true;
                self.ip.frag = Some(inv);
            }
            Core::Jump | Core::Goto => {
                if self.jump.is_some() {
                    return Err(err_at(
                        RuleErrorKind::Invalid("multiple -j flags not allowed".into()),
                        tok_i,
                    ));
                }
                self.rule_opts = true;
                if a.is_empty() || a.len() >= 29 || a.chars().any(char::is_whitespace) {
                    return Err(err_at(
                        bad(core_flag(c), a, "a target or chain name of 1-28 characters"),
                        tok_i + 1,
                    ));
                }
                let is_goto = c == Core::Goto;
                if !is_goto {
                    if let Some(k) = TKind::from_name(a) {
                        self.target = Some(TargetBuilder::new(k, self.family));
                        self.loaded.push(OptSet::Target);
                    } else if UNSUPPORTED_TARGETS.contains(&a) {
                        return Err(err_at(
                            RuleErrorKind::UnsupportedTarget(a.to_string()),
                            tok_i + 1,
                        ));
                    }
                }
                self.jump = Some((a.to_string(), is_goto, tok_i + 1));
            }
            Core::Match => {
                self.rule_opts = true;
                match MKind::from_name_for(self.family, a) {
                    Some(k) => self.load_match(k),
                    None => {
                        return Err(err_at(
                            RuleErrorKind::UnknownMatch(a.to_string()),
                            tok_i + 1,
                        ))
                    }
                }
            }
            Core::SetCounters => {
                once(self.counters.is_some(), "-c")?;
                let bytes_tok = toks.get(next).map(|t| t.as_str()).ok_or_else(|| {
                    err_at(
                        RuleErrorKind::MissingArgument("-c PACKETS BYTES".into()),
                        tok_i,
                    )
                })?;
                next += 1;
                let num = |s: &str, at: usize| -> Result<u64, RuleError> {
                    s.parse::<u64>()
                        .map_err(|_| err_at(bad("-c", s, "packet and byte counts"), at))
                };
                self.counters = Some(Counters {
                    packets: num(a, tok_i + 1)?,
                    bytes: num(bytes_tok, next - 1)?,
                });
            }
            Core::Table => {
                return Err(err_at(
                    RuleErrorKind::Invalid(
                        "the -t option cannot be used in iptables-restore".into(),
                    ),
                    tok_i,
                ))
            }
            Core::Ipv4 if self.family == Family::Ipv4 => {}
            Core::Ipv6 if self.family == Family::Ipv6 => {}
            other => {
                return Err(err_at(
                    RuleErrorKind::Unsupported(core_flag(other).to_string()),
                    tok_i,
                ))
            }
        }
        Ok(next)
    }

    fn build_rules(&mut self, chain: &str) -> Result<Vec<Rule>, RuleError> {
        if (self.ip.src_inv || self.ip.dst_inv) && (self.srcs.len() > 1 || self.dsts.len() > 1) {
            return Err(RuleError::new(RuleErrorKind::Invalid(
                "! not allowed with multiple source or destination IP addresses".into(),
            )));
        }
        // "Can't use -i with OUTPUT" (do_parse): direction checks on built-in chains.
        if matches!(chain, "PREROUTING" | "INPUT") && self.ip.oif.is_some() {
            return Err(RuleError::new(RuleErrorKind::Invalid(format!(
                "can't use -o with {chain}"
            ))));
        }
        if matches!(chain, "POSTROUTING" | "OUTPUT") && self.ip.iif.is_some() {
            return Err(RuleError::new(RuleErrorKind::Invalid(format!(
                "can't use -i with {chain}"
            ))));
        }
        let mut matches = Vec::with_capacity(self.matches.len());
        for m in std::mem::take(&mut self.matches) {
            matches.push(m.finish(&self.ip).map_err(RuleError::new)?);
        }
        let target = match self.jump.take() {
            None => Target::None,
            Some((name, is_goto, at)) => match self.target.take() {
                Some(tb) => tb.finish(&self.ip, self.table).map_err(|k| err_at(k, at))?,
                None => {
                    if TKind::from_name(&name).is_some() && is_goto {
                        return Err(err_at(
                            RuleErrorKind::Invalid(format!(
                                "-g needs a user chain; {name} is a target"
                            )),
                            at,
                        ));
                    }
                    if Hook::from_chain_name(&name).is_some() {
                        return Err(err_at(
                            RuleErrorKind::Invalid(format!("cannot jump to built-in chain {name}")),
                            at,
                        ));
                    }
                    if is_goto {
                        Target::Goto(ChainRef {
                            name,
                            id: Bind::default(),
                        })
                    } else {
                        Target::Jump(ChainRef {
                            name,
                            id: Bind::default(),
                        })
                    }
                }
            },
        };
        let srcs: Vec<Option<IpNet>> = if self.srcs.is_empty() {
            vec![None]
        } else {
            self.srcs.iter().copied().map(Some).collect()
        };
        let dsts: Vec<Option<IpNet>> = if self.dsts.is_empty() {
            vec![None]
        } else {
            self.dsts.iter().copied().map(Some).collect()
        };
        let total = srcs.len() * dsts.len();
        let mut rules = Vec::with_capacity(total);
        let (mut matches, mut target) = (Some(matches), Some(target));
        for s in &srcs {
            for d in &dsts {
                let mut ip = self.ip.clone();
                ip.src = s.filter(|n| !n.is_any() || ip.src_inv);
                ip.dst = d.filter(|n| !n.is_any() || ip.dst_inv);
                if ip.src.is_none() {
                    ip.src_inv = false;
                }
                if ip.dst.is_none() {
                    ip.dst_inv = false;
                }
                let last = rules.len() + 1 == total;
                let (m, t) = if last {
                    (matches.take(), target.take())
                } else {
                    (matches.clone(), target.clone())
                };
                rules.push(Rule {
                    ip,
                    matches: m.unwrap_or_default(),
                    target: t.unwrap_or(Target::None),
                    initial_counters: match self.family {
                        Family::Ipv4 => self.counters.unwrap_or_default(),
                        // ip6tables 1.8.9 (nf_tables) drops the counters a rule is given
                        // (`-c P B`, `[P:B]` with `ip6tables-restore -c`): they read back
                        // 0 (measured; policy counters are kept).
                        Family::Ipv6 => Counters::default(),
                    },
                    slot: Bind::default(),
                });
            }
        }
        Ok(rules)
    }
}

fn name_in(k: MKind, name: &str) -> bool {
    k.opts().iter().any(|d| d.name.starts_with(name))
}

/// Parses the words of one command line (without the `[p:b]` prefix) for `table` of a
/// `family` ruleset (`iptables` or `ip6tables` syntax).
pub(crate) fn parse_command(
    toks: &[Token<'_>],
    table: Table,
    family: Family,
) -> Result<Command, RuleError> {
    let mut p = Parser {
        toks,
        table,
        family,
        cmd: None,
        chain: None,
        rulenum: None,
        chain_opt: None,
        policy: None,
        ip: IpMatch::default(),
        srcs: Vec::new(),
        dsts: Vec::new(),
        rule_opts: false,
        matches: Vec::new(),
        loaded: Vec::new(),
        target: None,
        jump: None,
        counters: None,
    };
    p.run()?;
    let (cmd, cmd_tok) = p
        .cmd
        .ok_or_else(|| RuleError::new(RuleErrorKind::NoCommand))?;
    let rule_cmd =
        matches!(cmd, Core::Append | Core::Insert) || (cmd == Core::Delete && p.rulenum.is_none());
    if !rule_cmd && (p.rule_opts || p.counters.is_some()) {
        return Err(RuleError::at(
            RuleErrorKind::Invalid(format!(
                "rule options cannot be used with {}",
                core_flag(cmd)
            )),
            cmd_tok,
        ));
    }
    let chain = p.chain.clone().unwrap_or_default();
    Ok(match cmd {
        Core::Append => Command::Append {
            rules: p.build_rules(&chain)?,
            chain,
        },
        Core::Insert => Command::Insert {
            num: p.rulenum.unwrap_or(1),
            rules: p.build_rules(&chain)?,
            chain,
        },
        Core::Delete => match p.rulenum {
            Some(num) => Command::DeleteNum { chain, num },
            None => Command::DeleteSpec {
                rules: p.build_rules(&chain)?,
                chain,
            },
        },
        Core::NewChain => Command::NewChain(chain),
        Core::DeleteChain => Command::DeleteChain(p.chain_opt),
        Core::Flush => Command::Flush(p.chain_opt),
        Core::Zero => Command::Zero(p.chain_opt),
        Core::Policy => {
            let pol = p.policy.unwrap_or_default();
            let policy = match pol.as_str() {
                "ACCEPT" => Policy::Accept,
                "DROP" => Policy::Drop,
                _ => {
                    return Err(RuleError::at(
                        RuleErrorKind::BadValue {
                            option: "-P".into(),
                            value: pol,
                            expected: "ACCEPT or DROP".into(),
                        },
                        cmd_tok,
                    ))
                }
            };
            Command::Policy { chain, policy }
        }
        other => {
            return Err(RuleError::at(
                RuleErrorKind::Unsupported(core_flag(other).to_string()),
                cmd_tok,
            ))
        }
    })
}
