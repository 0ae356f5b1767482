//! `nft -f` text into [`Command`]s: the command syntax kube-proxy (knftables) writes, one
//! command per line (or `;`-separated), `#` comments. The block syntax (`table ip t { … }`)
//! and everything outside the supported subset is refused with the word's line and column.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::*;
use crate::rule::RejectWith;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Tok {
    Word(String),
    Str(String),
    LBrace,
    RBrace,
    Semi,
    Comma,
    End,
}

#[derive(Clone, Debug)]
struct Token {
    tok: Tok,
    line: usize,
    col: usize,
}

fn lex(file: &str, text: &str) -> Result<Vec<Token>, NftError> {
    let mut out = Vec::new();
    let mut depth = 0usize;
    for (ln, line) in text.lines().enumerate() {
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i < chars.len() {
            let c = chars[i];
            let col = i + 1;
            let push = |out: &mut Vec<Token>, tok| {
                out.push(Token {
                    tok,
                    line: ln + 1,
                    col,
                })
            };
            match c {
                ' ' | '\t' | '\r' => i += 1,
                '#' => break,
                '{' => {
                    depth += 1;
                    push(&mut out, Tok::LBrace);
                    i += 1;
                }
                '}' => {
                    depth = depth.saturating_sub(1);
                    push(&mut out, Tok::RBrace);
                    i += 1;
                }
                ';' => {
                    push(&mut out, if depth == 0 { Tok::End } else { Tok::Semi });
                    i += 1;
                }
                ',' => {
                    push(&mut out, Tok::Comma);
                    i += 1;
                }
                '"' => {
                    let mut s = String::new();
                    i += 1;
                    while i < chars.len() && chars[i] != '"' {
                        s.push(chars[i]);
                        i += 1;
                    }
                    if i >= chars.len() {
                        return Err(NftError {
                            file: file.into(),
                            line: ln + 1,
                            col,
                            msg: "syntax error, unterminated string".into(),
                        });
                    }
                    i += 1;
                    push(&mut out, Tok::Str(s));
                }
                _ => {
                    let start = i;
                    while i < chars.len() && !" \t\r{};,\"#".contains(chars[i]) {
                        i += 1;
                    }
                    let w: String = chars[start..i].iter().collect();
                    push(&mut out, Tok::Word(w));
                }
            }
        }
        if depth == 0 {
            out.push(Token {
                tok: Tok::End,
                line: ln + 1,
                col: chars.len() + 1,
            });
        }
    }
    out.push(Token {
        tok: Tok::End,
        line: text.lines().count().max(1),
        col: 1,
    });
    Ok(out)
}

struct P<'a> {
    file: &'a str,
    toks: Vec<Token>,
    pos: usize,
    /// The family of the table the rule being parsed belongs to.
    family: Family,
    /// The key types of the sets known so far (the ruleset's, then those this file adds),
    /// so that `add element` reads its values as the set's types, as nft does.
    types: BTreeMap<(Family, String, String), Vec<DataType>>,
}

type R<T> = Result<T, NftError>;

impl<'a> P<'a> {
    fn peek(&self) -> &Tok {
        &self.toks[self.pos.min(self.toks.len() - 1)].tok
    }

    fn peek_word(&self) -> Option<&str> {
        match self.peek() {
            Tok::Word(w) => Some(w),
            _ => None,
        }
    }

    fn peek_word_at(&self, n: usize) -> Option<&str> {
        match self.toks.get(self.pos + n).map(|t| &t.tok) {
            Some(Tok::Word(w)) => Some(w),
            _ => None,
        }
    }

    fn here(&self) -> (usize, usize) {
        let t = &self.toks[self.pos.min(self.toks.len() - 1)];
        (t.line, t.col)
    }

    fn err<T>(&self, msg: impl Into<String>) -> R<T> {
        let (line, col) = self.here();
        Err(NftError {
            file: self.file.to_string(),
            line,
            col,
            msg: msg.into(),
        })
    }

    fn what(&self) -> String {
        match self.peek() {
            Tok::Word(w) => format!("'{w}'"),
            Tok::Str(s) => format!("\"{s}\""),
            Tok::LBrace => "'{'".into(),
            Tok::RBrace => "'}'".into(),
            Tok::Semi => "';'".into(),
            Tok::Comma => "','".into(),
            Tok::End => "end of command".into(),
        }
    }

    fn bump(&mut self) -> Tok {
        let t = self.peek().clone();
        self.pos += 1;
        t
    }

    fn word(&mut self, what: &str) -> R<String> {
        match self.peek().clone() {
            Tok::Word(w) => {
                self.pos += 1;
                Ok(w)
            }
            _ => self.err(format!(
                "syntax error, expected {what}, got {}",
                self.what()
            )),
        }
    }

    fn eat_word(&mut self, w: &str) -> bool {
        if self.peek_word() == Some(w) {
            self.pos += 1;
            true
        } else {
            false
        }
    }

    fn expect_word(&mut self, w: &str) -> R<()> {
        if self.eat_word(w) {
            Ok(())
        } else {
            self.err(format!("syntax error, expected '{w}', got {}", self.what()))
        }
    }

    fn expect(&mut self, t: Tok, what: &str) -> R<()> {
        if *self.peek() == t {
            self.pos += 1;
            Ok(())
        } else {
            self.err(format!(
                "syntax error, expected {what}, got {}",
                self.what()
            ))
        }
    }

    fn string(&mut self) -> R<String> {
        match self.peek().clone() {
            Tok::Str(s) => {
                self.pos += 1;
                Ok(s)
            }
            Tok::Word(w) => {
                self.pos += 1;
                Ok(w)
            }
            _ => self.err(format!(
                "syntax error, expected a string, got {}",
                self.what()
            )),
        }
    }

    fn family(&mut self) -> R<Family> {
        let f = match self.peek_word() {
            Some("ip") => Family::Ip,
            Some("ip6") => Family::Ip6,
            Some("inet") => Family::Inet,
            Some(f @ ("arp" | "bridge" | "netdev")) => {
                return self.err(format!("unsupported: family {f} (only ip, ip6, inet)"))
            }
            _ => return Ok(Family::Ip),
        };
        self.pos += 1;
        Ok(f)
    }

    fn at_end(&self) -> bool {
        *self.peek() == Tok::End
    }
}

/// Parses a whole `nft -f` file; `known` is the ruleset it will apply to (for the types of
/// the sets its `add element` commands fill).
pub(super) fn parse(file: &str, text: &str, known: &NftRuleset) -> R<Vec<Command>> {
    let toks = lex(file, text)?;
    let mut types = BTreeMap::new();
    for ((f, t), table) in &known.tables {
        for (n, set) in &table.sets {
            types.insert((*f, t.clone(), n.clone()), set.key.clone());
        }
    }
    let mut p = P {
        file,
        toks,
        pos: 0,
        family: Family::Ip,
        types,
    };
    let mut out = Vec::new();
    while p.pos < p.toks.len() {
        if p.at_end() {
            p.pos += 1;
            continue;
        }
        let (line, col) = p.here();
        let op = command(&mut p)?;
        if !p.at_end() {
            return p.err(format!("syntax error, unexpected {}", p.what()));
        }
        out.push(Command { line, col, op });
    }
    Ok(out)
}

fn command(p: &mut P) -> R<Op> {
    let verb = p.word("a command (add, create, insert, flush, delete)")?;
    match verb.as_str() {
        "add" | "create" | "insert" => {
            let create = verb == "create";
            let obj = p.word("table, chain, set, map, rule or element")?;
            match (verb.as_str(), obj.as_str()) {
                ("insert", "rule") | (_, "rule") if verb != "create" => {
                    rule_cmd(p, verb == "insert")
                }
                ("insert", _) => p.err(format!("syntax error, insert {obj}")),
                (_, "table") => {
                    let family = p.family()?;
                    let name = p.word("a table name")?;
                    let mut comment = None;
                    if *p.peek() == Tok::LBrace {
                        p.bump();
                        while *p.peek() != Tok::RBrace {
                            if *p.peek() == Tok::Semi {
                                p.bump();
                                continue;
                            }
                            match p.word("comment")?.as_str() {
                                "comment" => comment = Some(p.string()?),
                                w => {
                                    p.pos -= 1;
                                    return p.err(format!("unsupported: table option '{w}'"));
                                }
                            }
                        }
                        p.bump();
                    }
                    Ok(Op::AddTable {
                        family,
                        name,
                        comment,
                        create,
                    })
                }
                (_, "chain") => {
                    let family = p.family()?;
                    let table = p.word("a table name")?;
                    let name = p.word("a chain name")?;
                    let chain = chain_spec(p, name, family)?;
                    Ok(Op::AddChain {
                        family,
                        table,
                        chain,
                        create,
                    })
                }
                (_, "set") | (_, "map") => {
                    let family = p.family()?;
                    let table = p.word("a table name")?;
                    let name = p.word("a set name")?;
                    let set = set_spec(p, name, obj == "map")?;
                    p.types
                        .insert((family, table.clone(), set.name.clone()), set.key.clone());
                    Ok(Op::AddSet {
                        family,
                        table,
                        set,
                        create,
                    })
                }
                (_, "element") => {
                    let family = p.family()?;
                    let table = p.word("a table name")?;
                    let set = p.word("a set name")?;
                    let ty = p.types.get(&(family, table.clone(), set.clone())).cloned();
                    let elems = elements(p, ty.as_deref(), true)?;
                    Ok(Op::AddElements {
                        family,
                        table,
                        set,
                        elems,
                    })
                }
                _ => {
                    p.pos -= 1;
                    p.err(format!("unsupported: {verb} {obj}"))
                }
            }
        }
        "flush" | "delete" | "destroy" => {
            let obj = p.word("table, chain, set, map or element")?;
            let target = match obj.as_str() {
                "ruleset" => Target::Ruleset,
                "table" => {
                    let f = p.family()?;
                    Target::Table(f, p.word("a table name")?)
                }
                "chain" => {
                    let f = p.family()?;
                    let t = p.word("a table name")?;
                    Target::Chain(f, t, p.word("a chain name")?)
                }
                "set" | "map" => {
                    let f = p.family()?;
                    let t = p.word("a table name")?;
                    Target::Set(f, t, p.word("a set name")?)
                }
                "element" if verb == "delete" => {
                    let family = p.family()?;
                    let table = p.word("a table name")?;
                    let set = p.word("a set name")?;
                    let ty = p.types.get(&(family, table.clone(), set.clone())).cloned();
                    let keys = elements(p, ty.as_deref(), false)?
                        .into_iter()
                        .map(|(k, _)| k)
                        .collect();
                    return Ok(Op::DeleteElements {
                        family,
                        table,
                        set,
                        keys,
                    });
                }
                _ => {
                    p.pos -= 1;
                    return p.err(format!("unsupported: {verb} {obj}"));
                }
            };
            if verb == "destroy" {
                return p.err("unsupported: destroy (nft 1.0.6 has no destroy command)");
            }
            Ok(if verb == "flush" {
                Op::Flush(target)
            } else {
                Op::Delete(target)
            })
        }
        "table" | "list" | "replace" | "rename" | "reset" | "monitor" | "describe" => {
            p.pos -= 1;
            p.err(format!(
                "unsupported: '{verb}' (nfsim takes add, create, insert, flush and delete commands)"
            ))
        }
        _ => {
            p.pos -= 1;
            p.err(format!("syntax error, unexpected '{verb}'"))
        }
    }
}

fn hook_of(p: &P, w: &str) -> R<Hook> {
    Ok(match w {
        "prerouting" => Hook::PreRouting,
        "input" => Hook::Input,
        "forward" => Hook::Forward,
        "output" => Hook::Output,
        "postrouting" => Hook::PostRouting,
        _ => return p.err(format!("unsupported: hook '{w}'")),
    })
}

/// The standard priority names (`std_prios` in nftables' `src/rule.c`) and where nft 1.0.6
/// accepts them (`std_prio_family_hook_compat`: `dstnat` only at prerouting, `srcnat` only at
/// postrouting).
pub(super) const STD_PRIOS: [(&str, i32); 6] = [
    ("raw", -300),
    ("mangle", -150),
    ("dstnat", -100),
    ("filter", 0),
    ("security", 50),
    ("srcnat", 100),
];

pub(super) fn std_prio_ok(prio: i32, hook: Hook) -> bool {
    match prio {
        -100 => hook == Hook::PreRouting,
        100 => hook == Hook::PostRouting,
        _ => true,
    }
}

fn priority(p: &mut P, hook: Hook) -> R<i32> {
    let w = p.word("a priority")?;
    if let Ok(n) = w.parse::<i32>() {
        return Ok(n);
    }
    let Some(&(_, base)) = STD_PRIOS.iter().find(|(n, _)| *n == w) else {
        p.pos -= 1;
        return p.err(format!("unknown priority '{w}'"));
    };
    if !std_prio_ok(base, hook) {
        p.pos -= 1;
        return p.err(format!("'{w}' is invalid priority in this context."));
    }
    let sign = match p.peek_word() {
        Some("+") => 1,
        Some("-") => -1,
        _ => return Ok(base),
    };
    p.bump();
    let off = p.word("a number")?;
    let Ok(off) = off.parse::<i32>() else {
        p.pos -= 1;
        return p.err(format!("syntax error, expected a number, got '{off}'"));
    };
    Ok(base + sign * off)
}

fn chain_spec(p: &mut P, name: String, _family: Family) -> R<NftChain> {
    let mut chain = NftChain {
        name,
        base: None,
        comment: None,
        rules: Vec::new(),
    };
    if *p.peek() != Tok::LBrace {
        return Ok(chain);
    }
    p.bump();
    let mut policy_accept = true;
    while *p.peek() != Tok::RBrace {
        if *p.peek() == Tok::Semi {
            p.bump();
            continue;
        }
        let w = p.word("type, policy or comment")?;
        match w.as_str() {
            "type" => {
                let t = p.word("filter or nat")?;
                let ty = match t.as_str() {
                    "filter" => ChainType::Filter,
                    "nat" => ChainType::Nat,
                    _ => {
                        p.pos -= 1;
                        return p.err(format!("unsupported: chain type '{t}'"));
                    }
                };
                p.expect_word("hook")?;
                let h = p.word("a hook")?;
                let hook = hook_of(p, &h)?;
                p.expect_word("priority")?;
                let priority = priority(p, hook)?;
                chain.base = Some(BaseChain {
                    ty,
                    hook,
                    priority,
                    policy_accept: true,
                });
            }
            "policy" => {
                policy_accept = match p.word("accept or drop")?.as_str() {
                    "accept" => true,
                    "drop" => false,
                    other => {
                        p.pos -= 1;
                        return p.err(format!("syntax error, policy '{other}'"));
                    }
                };
            }
            "comment" => chain.comment = Some(p.string()?),
            _ => {
                p.pos -= 1;
                return p.err(format!("unsupported: chain option '{w}'"));
            }
        }
    }
    p.bump();
    if let Some(b) = chain.base.as_mut() {
        b.policy_accept = policy_accept;
    }
    Ok(chain)
}

fn set_spec(p: &mut P, name: String, is_map: bool) -> R<NftSet> {
    let mut set = NftSet {
        name,
        key: Vec::new(),
        is_map,
        flags: Vec::new(),
        timeout_ms: None,
        size: None,
        comment: None,
        elements: Default::default(),
    };
    p.expect(Tok::LBrace, "'{'")?;
    let mut pending_elems = None;
    while *p.peek() != Tok::RBrace {
        if *p.peek() == Tok::Semi {
            p.bump();
            continue;
        }
        let w = p.word("type, flags, timeout, size, comment or elements")?;
        match w.as_str() {
            "type" => {
                loop {
                    let t = p.word("a data type")?;
                    let Some(d) = DataType::from_name(&t) else {
                        p.pos -= 1;
                        return p.err(format!("unsupported: data type '{t}'"));
                    };
                    set.key.push(d);
                    if !p.eat_word(".") {
                        break;
                    }
                }
                if is_map {
                    p.expect_word(":")?;
                    let v = p.word("verdict")?;
                    if v != "verdict" {
                        p.pos -= 1;
                        return p.err(format!(
                            "unsupported: map of '{v}' (only verdict maps are modelled)"
                        ));
                    }
                }
            }
            "flags" => loop {
                let f = p.word("a set flag")?;
                for f in f.split(',').filter(|s| !s.is_empty()) {
                    if !["constant", "dynamic", "interval", "timeout"].contains(&f) {
                        p.pos -= 1;
                        return p.err(format!("unsupported: set flag '{f}'"));
                    }
                    if !set.flags.iter().any(|x| x == f) {
                        set.flags.push(f.to_string());
                    }
                }
                if *p.peek() == Tok::Comma {
                    p.bump();
                    continue;
                }
                break;
            },
            "timeout" => set.timeout_ms = Some(time(p)?),
            "size" => {
                let n = p.word("a size")?;
                set.size = Some(n.parse().or_else(|_| {
                    p.pos -= 1;
                    p.err(format!("syntax error, size '{n}'"))
                })?);
            }
            "comment" => set.comment = Some(p.string()?),
            "elements" => {
                p.expect_word("=")?;
                pending_elems = Some(p.pos);
                // Parsed once the type is known (it comes first in knftables' output).
                let types = set.key.clone();
                let elems = elements(p, Some(&types), true)?;
                for (k, e) in elems {
                    set.elements.insert(k, e);
                }
            }
            _ => {
                p.pos -= 1;
                return p.err(format!("unsupported: set option '{w}'"));
            }
        }
    }
    let _ = pending_elems;
    p.bump();
    if set.key.is_empty() {
        return p.err(format!("set {} has no type", set.name));
    }
    // Flags are kept in the order nft prints them.
    let order = ["constant", "dynamic", "interval", "timeout"];
    set.flags
        .sort_by_key(|f| order.iter().position(|o| o == f).unwrap_or(9));
    Ok(set)
}

/// The rule's network protocol so far, as nft's protocol context has it for a NAT
/// statement in an `inet` table: an `ip`/`ip6` payload match, `icmpv6 type`, or
/// `meta nfproto ipv4|ipv6`.
fn network_context(prev: &[Stmt]) -> Option<Family> {
    let mut fam = None;
    for s in prev {
        let Stmt::Match { lhs, rhs, .. } = s else {
            continue;
        };
        for f in lhs {
            match f {
                Field::IpSaddr | Field::IpDaddr | Field::IpProtocol => fam = Some(Family::Ip),
                Field::Ip6Saddr | Field::Ip6Daddr | Field::Ip6Nexthdr | Field::Icmpv6Type => {
                    fam = Some(Family::Ip6)
                }
                Field::MetaNfproto => {
                    if let Rhs::Value(ElemKey::Exact(v)) = rhs {
                        match v.first() {
                            Some(2) => fam = Some(Family::Ip),
                            Some(10) => fam = Some(Family::Ip6),
                            _ => {}
                        }
                    }
                }
                _ => {}
            }
        }
    }
    fam
}

/// Whether a statement fixes the transport protocol for a later NAT port: a match of
/// `meta l4proto`, `ip protocol` or `ip6 nexthdr` alone (value or set, not `!=`), or a
/// `tcp|udp|sctp sport|dport` field.
fn fixes_transport(s: &Stmt) -> bool {
    match s {
        Stmt::Match { lhs, negated, .. } => {
            (!negated
                && matches!(
                    lhs.as_slice(),
                    [Field::MetaL4proto | Field::IpProtocol | Field::Ip6Nexthdr]
                ))
                || lhs
                    .iter()
                    .any(|f| matches!(f, Field::Sport(_) | Field::Dport(_)))
        }
        Stmt::Vmap { lhs, .. } => lhs
            .iter()
            .any(|f| matches!(f, Field::Sport(_) | Field::Dport(_))),
        _ => false,
    }
}

/// A NAT target: `A`, `A:P`, `A6` or `[A6]:P` (`[A6]` alone too).
fn nat_target(a: &str) -> Option<(IpAddr, Option<u16>)> {
    if let Some(rest) = a.strip_prefix('[') {
        let (ad, tail) = rest.split_once(']')?;
        let addr: Ipv6Addr = ad.parse().ok()?;
        let port = match tail {
            "" => None,
            t => Some(t.strip_prefix(':')?.parse::<u16>().ok()?),
        };
        return Some((IpAddr::V6(addr), port));
    }
    if let Ok(v6) = a.parse::<Ipv6Addr>() {
        return Some((IpAddr::V6(v6), None));
    }
    match a.rsplit_once(':') {
        Some((ad, pt)) => Some((IpAddr::V4(ad.parse().ok()?), Some(pt.parse::<u16>().ok()?))),
        None => Some((IpAddr::V4(a.parse().ok()?), None)),
    }
}

/// A time: `10800s`, `3h`, `1m30s`, `250ms`; milliseconds.
fn time(p: &mut P) -> R<u64> {
    let w = p.word("a time")?;
    match parse_time(&w) {
        Some(ms) => Ok(ms),
        None => {
            p.pos -= 1;
            p.err(format!(
                "syntax error, '{w}' is not a time (like 3h, 10800s)"
            ))
        }
    }
}

fn parse_time(w: &str) -> Option<u64> {
    if let Ok(n) = w.parse::<u64>() {
        return n.checked_mul(1000);
    }
    let mut total = 0u64;
    let mut num = String::new();
    let b = w.as_bytes();
    let mut i = 0;
    while i < b.len() {
        let c = b[i] as char;
        if c.is_ascii_digit() {
            num.push(c);
            i += 1;
            continue;
        }
        let n: u64 = num.parse().ok()?;
        num.clear();
        let mult = if w[i..].starts_with("ms") {
            i += 2;
            1
        } else {
            i += 1;
            match c {
                'd' => 86_400_000,
                'h' => 3_600_000,
                'm' => 60_000,
                's' => 1000,
                _ => return None,
            }
        };
        total = total.checked_add(n.checked_mul(mult)?)?;
    }
    if !num.is_empty() {
        return None;
    }
    Some(total)
}

/// The elements of `{ … }`, read as the set's key types `ty`. Without a known type (an
/// `add element` to a set nfsim has not seen, which then fails when it runs), values are read
/// by their look.
fn elements(p: &mut P, ty: Option<&[DataType]>, with_data: bool) -> R<Vec<(ElemKey, Element)>> {
    p.expect(Tok::LBrace, "'{'")?;
    let mut out = Vec::new();
    loop {
        if *p.peek() == Tok::RBrace {
            p.bump();
            break;
        }
        let key = key_value(p, ty)?;
        let mut e = Element {
            verdict: None,
            comment: None,
            timeout_ms: None,
            expires: None,
        };
        loop {
            match p.peek_word() {
                Some("comment") => {
                    p.bump();
                    e.comment = Some(p.string()?);
                }
                Some("timeout") => {
                    p.bump();
                    e.timeout_ms = Some(time(p)?);
                }
                Some("expires") => {
                    p.bump();
                    time(p)?;
                }
                _ => break,
            }
        }
        if p.eat_word(":") {
            let v = verdict(p)?;
            if with_data {
                e.verdict = Some(v);
            }
        }
        out.push((key, e));
        match p.peek() {
            Tok::Comma => {
                p.bump();
            }
            Tok::RBrace => {}
            _ => {
                return p.err(format!(
                    "syntax error, expected ',' or '}}', got {}",
                    p.what()
                ))
            }
        }
    }
    Ok(out)
}

fn verdict(p: &mut P) -> R<NftVerdict> {
    let w = p.word("a verdict")?;
    Ok(match w.as_str() {
        "accept" => NftVerdict::Accept,
        "drop" => NftVerdict::Drop,
        "continue" => NftVerdict::Continue,
        "return" => NftVerdict::Return,
        "jump" => NftVerdict::Jump(p.word("a chain name")?),
        "goto" => NftVerdict::Goto(p.word("a chain name")?),
        _ => {
            p.pos -= 1;
            return p.err(format!("syntax error, expected a verdict, got '{w}'"));
        }
    })
}

/// A (possibly concatenated) value `a . b . c`, each field typed by `types` when known.
fn key_value(p: &mut P, types: Option<&[DataType]>) -> R<ElemKey> {
    let mut parts = Vec::new();
    loop {
        let i = parts.len();
        let dt = types.and_then(|t| t.get(i)).copied();
        let w = p.word("a value")?;
        let v = match value(&w, dt) {
            Some(v) => v,
            None => {
                p.pos -= 1;
                return p.err(format!(
                    "unsupported value '{w}'{}",
                    dt.map(|d| format!(" for {}", d.name())).unwrap_or_default()
                ));
            }
        };
        parts.push(v);
        if !p.eat_word(".") {
            break;
        }
    }
    if parts.len() == 1 {
        return Ok(parts.pop().unwrap_or(ElemKey::Exact(vec![])));
    }
    let mut exact = Vec::new();
    for (i, part) in parts.into_iter().enumerate() {
        match part {
            ElemKey::Exact(v) => exact.extend(v),
            ElemKey::Range(..) => {
                let _ = i;
                return p.err("unsupported: ranges inside concatenations");
            }
        }
    }
    Ok(ElemKey::Exact(exact))
}

fn proto_num(w: &str) -> Option<u32> {
    Some(match w {
        "tcp" => 6,
        "udp" => 17,
        "sctp" => 132,
        "icmp" => 1,
        "icmpv6" | "ipv6-icmp" => 58,
        _ => return w.parse::<u8>().ok().map(u32::from),
    })
}

pub(super) const CT_STATES: [(&str, u32); 5] = [
    ("invalid", 1),
    ("established", 2),
    ("related", 4),
    ("new", 8),
    ("untracked", 64),
];

pub(super) const CT_STATUS: [(&str, u32); 7] = [
    ("expected", 1),
    ("seen-reply", 2),
    ("assured", 4),
    ("confirmed", 8),
    ("snat", 16),
    ("dnat", 32),
    ("dying", 512),
];

/// `meta nfproto` values (`nfproto_tbl` in nftables' `src/meta.c`: the `NFPROTO_*` numbers).
pub(super) const NFPROTOS: [(&str, u32); 2] = [("ipv4", 2), ("ipv6", 10)];

/// `icmpv6 type` names and numbers (`icmp6_type_tbl` in nftables' `src/proto.c`, as
/// `nft describe icmpv6 type` lists them; 132 has two names, nft prints the first).
pub(super) const ICMPV6_TYPES: [(&str, u32); 19] = [
    ("destination-unreachable", 1),
    ("packet-too-big", 2),
    ("time-exceeded", 3),
    ("parameter-problem", 4),
    ("echo-request", 128),
    ("echo-reply", 129),
    ("mld-listener-query", 130),
    ("mld-listener-report", 131),
    ("mld-listener-done", 132),
    ("mld-listener-reduction", 132),
    ("nd-router-solicit", 133),
    ("nd-router-advert", 134),
    ("nd-neighbor-solicit", 135),
    ("nd-neighbor-advert", 136),
    ("nd-redirect", 137),
    ("router-renumbering", 138),
    ("ind-neighbor-solicit", 141),
    ("ind-neighbor-advert", 142),
    ("mld2-listener-report", 143),
];

fn named(w: &str, table: &[(&str, u32)]) -> Option<u32> {
    table
        .iter()
        .find(|(n, _)| *n == w)
        .map(|(_, v)| *v)
        .or_else(|| w.parse::<u8>().ok().map(u32::from))
}

/// An IPv6 address, prefix (`fd00::/64`) or range (`a-b`), as `ipv6_addr` values.
fn value6(w: &str) -> Option<ElemKey> {
    if let Some((a, len)) = w.split_once('/') {
        let a: Ipv6Addr = a.parse().ok()?;
        let len: u32 = len.parse().ok()?;
        if len > 128 {
            return None;
        }
        let mask = if len == 0 {
            0
        } else {
            u128::MAX << (128 - len)
        };
        let lo = u128::from(a) & mask;
        return Some(ElemKey::Range(lo, lo | !mask));
    }
    if let Some((a, b)) = w.split_once('-') {
        let a: Ipv6Addr = a.parse().ok()?;
        let b: Ipv6Addr = b.parse().ok()?;
        return Some(ElemKey::Range(u128::from(a), u128::from(b)));
    }
    Some(ElemKey::Exact(vec![u128::from(
        w.parse::<Ipv6Addr>().ok()?,
    )]))
}

pub(super) const FIB_TYPES: [&str; 12] = [
    "unspec",
    "unicast",
    "local",
    "broadcast",
    "anycast",
    "multicast",
    "blackhole",
    "unreachable",
    "prohibit",
    "throw",
    "nat",
    "xresolve",
];

fn num(w: &str) -> Option<u32> {
    if let Some(h) = w.strip_prefix("0x") {
        u32::from_str_radix(h, 16).ok()
    } else {
        w.parse().ok()
    }
}

fn flags_of(w: &str, table: &[(&str, u32)]) -> Option<u32> {
    let mut v = 0;
    for part in w.split(',') {
        v |= table.iter().find(|(n, _)| *n == part)?.1;
    }
    Some(v)
}

/// One value as a field of type `dt` (or by its look when unknown): an address, prefix or
/// range, a protocol, a port, a mark, a state.
fn value(w: &str, dt: Option<DataType>) -> Option<ElemKey> {
    let one = |v: u32| Some(ElemKey::Exact(vec![Datum::from(v)]));
    match dt {
        Some(DataType::Ipv6Addr) => value6(w),
        None if w.contains(':') => value6(w),
        Some(DataType::Ipv4Addr) | None if w.contains('.') || w.contains('/') => {
            if let Some((a, len)) = w.split_once('/') {
                let a: Ipv4Addr = a.parse().ok()?;
                let len: u32 = len.parse().ok()?;
                if len > 32 {
                    return None;
                }
                let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
                let lo = u32::from(a) & mask;
                return Some(ElemKey::Range(lo.into(), (lo | !mask).into()));
            }
            if let Some((a, b)) = w.split_once('-') {
                let a: Ipv4Addr = a.parse().ok()?;
                let b: Ipv4Addr = b.parse().ok()?;
                return Some(ElemKey::Range(u32::from(a).into(), u32::from(b).into()));
            }
            one(u32::from(w.parse::<Ipv4Addr>().ok()?))
        }
        Some(DataType::Ipv4Addr) => None,
        Some(DataType::InetProto) => one(proto_num(w)?),
        Some(DataType::InetService) => {
            if let Some((a, b)) = w.split_once('-') {
                return Some(ElemKey::Range(
                    a.parse::<u16>().ok()?.into(),
                    b.parse::<u16>().ok()?.into(),
                ));
            }
            one(w.parse::<u16>().ok()?.into())
        }
        Some(DataType::Mark) | Some(DataType::Integer) => one(num(w)?),
        Some(DataType::CtState) => one(flags_of(w, &CT_STATES)?),
        Some(DataType::NfProto) => one(named(w, &NFPROTOS)?),
        Some(DataType::Icmpv6Type) => one(named(w, &ICMPV6_TYPES)?),
        None => {
            if let Some(n) = num(w) {
                return one(n);
            }
            one(proto_num(w)?)
        }
    }
}

fn rule_cmd(p: &mut P, insert: bool) -> R<Op> {
    let family = p.family()?;
    let table = p.word("a table name")?;
    let chain = p.word("a chain name")?;
    if matches!(p.peek_word(), Some("position" | "handle" | "index")) {
        return p.err("unsupported: rule positions (position/handle/index)");
    }
    p.family = family;
    let rule = rule(p)?;
    Ok(Op::AddRule {
        family,
        table,
        chain,
        rule,
        insert,
    })
}

/// The statements of a rule, up to the end of the command.
fn rule(p: &mut P) -> R<NftRule> {
    let mut stmts = Vec::new();
    let mut comment = None;
    while !p.at_end() {
        if p.eat_word("comment") {
            comment = Some(p.string()?);
            continue;
        }
        let s = stmt(p, &stmts)?;
        // In `inet` tables nft gives `reject with tcp reset` the dependency `meta l4proto
        // tcp` and prints it (checked with the real nft 1.0.6); `ip`/`ip6` tables need none.
        if p.family == Family::Inet
            && s == Stmt::Reject(RejectWith::TcpReset)
            && !stmts.iter().any(is_tcp_match)
        {
            stmts.push(Stmt::Match {
                lhs: vec![Field::MetaL4proto],
                mask: None,
                negated: false,
                rhs: Rhs::Value(ElemKey::Exact(vec![6])),
            });
        }
        stmts.push(s);
    }
    if stmts.is_empty() {
        return p.err("syntax error, empty rule");
    }
    Ok(NftRule { stmts, comment })
}

/// Whether a statement already restricts the rule to TCP (`meta l4proto tcp`, `tcp dport`).
fn is_tcp_match(s: &Stmt) -> bool {
    match s {
        Stmt::Match {
            lhs,
            negated: false,
            rhs: Rhs::Value(ElemKey::Exact(v)),
            ..
        } => {
            (lhs.as_slice() == [Field::MetaL4proto] && v.as_slice() == [6])
                || lhs
                    .iter()
                    .any(|f| matches!(f, Field::Sport(6) | Field::Dport(6)))
        }
        _ => false,
    }
}

/// A field (`ip daddr`, `meta l4proto`, `th dport`, `ct state`, `fib daddr type`, `numgen …`),
/// or `None` when the next word starts none.
fn field(p: &mut P) -> R<Option<Field>> {
    let Some(w) = p.peek_word().map(str::to_string) else {
        return Ok(None);
    };
    let f = match w.as_str() {
        "ip" | "ip6" => {
            // nft: `ip` payload in an `ip6` table (or `ip6` in `ip`) is a conflict
            // (`conflicting protocols specified: ip6 vs. ip`).
            let table = p.family;
            if (w == "ip" && table == Family::Ip6) || (w == "ip6" && table == Family::Ip) {
                return p.err(format!("conflicting protocols specified: {table} vs. {w}"));
            }
            if w == "ip6" {
                p.bump();
                return Ok(Some(match p.word("saddr, daddr or nexthdr")?.as_str() {
                    "saddr" => Field::Ip6Saddr,
                    "daddr" => Field::Ip6Daddr,
                    "nexthdr" => Field::Ip6Nexthdr,
                    o => {
                        p.pos -= 1;
                        return p.err(format!("unsupported: ip6 {o}"));
                    }
                }));
            }
            p.bump();
            match p.word("saddr, daddr or protocol")?.as_str() {
                "saddr" => Field::IpSaddr,
                "daddr" => Field::IpDaddr,
                "protocol" => Field::IpProtocol,
                o => {
                    p.pos -= 1;
                    return p.err(format!("unsupported: ip {o}"));
                }
            }
        }
        "meta" => {
            p.bump();
            match p.word("l4proto, nfproto or mark")?.as_str() {
                "l4proto" => Field::MetaL4proto,
                "mark" => Field::MetaMark,
                "nfproto" => {
                    if p.family != Family::Inet {
                        p.pos -= 2;
                        return p.err("meta nfproto is only useful in the inet family");
                    }
                    Field::MetaNfproto
                }
                o => {
                    p.pos -= 1;
                    return p.err(format!("unsupported: meta {o}"));
                }
            }
        }
        "mark" => {
            p.bump();
            Field::MetaMark
        }
        "icmpv6" => {
            if p.family == Family::Ip {
                return p.err("conflicting protocols specified: ip vs. icmpv6");
            }
            p.bump();
            match p.word("type")?.as_str() {
                "type" => Field::Icmpv6Type,
                o => {
                    p.pos -= 1;
                    return p.err(format!("unsupported: icmpv6 {o} (only 'icmpv6 type')"));
                }
            }
        }
        "th" | "tcp" | "udp" | "sctp" => {
            // `udp` alone is a value elsewhere (`meta l4proto udp`), but here it starts a
            // field only when followed by sport/dport.
            let next = p.peek_word_at(1);
            if !matches!(next, Some("sport" | "dport")) {
                if w == "th" {
                    p.bump();
                    return p.err(format!(
                        "unsupported: th {}",
                        p.peek_word().unwrap_or("(nothing)")
                    ));
                }
                return Ok(None);
            }
            p.bump();
            let dport = p.word("sport or dport")? == "dport";
            let proto = match w.as_str() {
                "tcp" => 6,
                "udp" => 17,
                "sctp" => 132,
                _ => 0,
            };
            match (proto, dport) {
                (0, true) => Field::ThDport,
                (0, false) => Field::ThSport,
                (p, true) => Field::Dport(p),
                (p, false) => Field::Sport(p),
            }
        }
        "ct" => {
            p.bump();
            match p.word("state or status")?.as_str() {
                "state" => Field::CtState,
                "status" => Field::CtStatus,
                o => {
                    p.pos -= 1;
                    return p.err(format!("unsupported: ct {o}"));
                }
            }
        }
        "fib" => {
            p.bump();
            let which = p.word("saddr or daddr")?;
            let f = match which.as_str() {
                "saddr" => Field::FibSaddrType,
                "daddr" => Field::FibDaddrType,
                o => {
                    p.pos -= 1;
                    return p.err(format!("unsupported: fib {o}"));
                }
            };
            if p.peek_word() != Some("type") {
                return p.err(format!(
                    "unsupported: fib {which} {} (only 'fib saddr|daddr type')",
                    p.what()
                ));
            }
            p.bump();
            f
        }
        "numgen" => {
            p.bump();
            if p.peek_word() != Some("random") {
                return p.err(format!("unsupported: numgen {}", p.what()));
            }
            p.bump();
            p.expect_word("mod")?;
            let m = p.word("a modulus")?;
            let Some(modulus) = num(&m).filter(|&m| m > 0) else {
                p.pos -= 1;
                return p.err(format!("syntax error, modulus '{m}'"));
            };
            let mut offset = 0;
            if p.eat_word("offset") {
                let o = p.word("an offset")?;
                offset = match num(&o) {
                    Some(o) => o,
                    None => {
                        p.pos -= 1;
                        return p.err(format!("syntax error, offset '{o}'"));
                    }
                };
            }
            Field::Numgen { modulus, offset }
        }
        _ => return Ok(None),
    };
    Ok(Some(f))
}

/// One statement; `prev` are the rule's statements before it (the protocol context nft
/// reads a NAT address's family from in `inet` tables).
fn stmt(p: &mut P, prev: &[Stmt]) -> R<Stmt> {
    let start = p.pos;
    if let Some(f) = field(p)? {
        let mut lhs = vec![f];
        while p.eat_word(".") {
            match field(p)? {
                Some(f) => lhs.push(f),
                None => return p.err(format!("syntax error, expected a field, got {}", p.what())),
            }
        }
        let dts: Vec<DataType> = lhs.iter().map(|f| f.dtype()).collect();
        // `meta mark set …`
        if lhs == [Field::MetaMark] && p.eat_word("set") {
            return mark_set(p);
        }
        if p.eat_word("vmap") {
            if p.eat_word_prefix_at() {
                let name = p.word("a map name")?;
                return Ok(Stmt::Vmap {
                    lhs,
                    map: Some(name.trim_start_matches('@').to_string()),
                    anon: Vec::new(),
                });
            }
            p.expect(Tok::LBrace, "'{' or @map")?;
            let mut anon = Vec::new();
            loop {
                if *p.peek() == Tok::RBrace {
                    p.bump();
                    break;
                }
                let k = key_value(p, Some(&dts))?;
                p.expect_word(":")?;
                anon.push((k, verdict(p)?));
                if *p.peek() == Tok::Comma {
                    p.bump();
                }
            }
            return Ok(Stmt::Vmap {
                lhs,
                map: None,
                anon,
            });
        }
        let mut mask = None;
        if p.eat_word("&") || p.eat_word("and") {
            if lhs != [Field::MetaMark] {
                return p.err("unsupported: masks other than on meta mark");
            }
            let m = p.word("a mask")?;
            mask = Some(num(&m).map_or_else(
                || {
                    p.pos -= 1;
                    p.err(format!("syntax error, mask '{m}'"))
                },
                Ok,
            )?);
        }
        let negated = if p.eat_word("!=") || p.eat_word("ne") {
            true
        } else {
            let _ = p.eat_word("==") || p.eat_word("eq");
            false
        };
        let rhs = if p.eat_word_prefix_at() {
            Rhs::SetRef(p.word("a set name")?.trim_start_matches('@').to_string())
        } else if *p.peek() == Tok::LBrace {
            p.bump();
            let mut elems = Vec::new();
            loop {
                if *p.peek() == Tok::RBrace {
                    p.bump();
                    break;
                }
                elems.push(key_value(p, Some(&dts))?);
                if *p.peek() == Tok::Comma {
                    p.bump();
                }
            }
            // nft turns a one-element anonymous set into a plain comparison.
            if elems.len() == 1 {
                Rhs::Value(elems.remove(0))
            } else {
                Rhs::Set(elems)
            }
        } else {
            if p.at_end() {
                return p.err("syntax error, expected a value");
            }
            if lhs.len() == 1 && matches!(lhs[0], Field::CtState | Field::CtStatus) {
                // `ct state established,related`: one value of several flags.
                let table: &[(&str, u32)] = if lhs[0] == Field::CtState {
                    &CT_STATES
                } else {
                    &CT_STATUS
                };
                let mut v = 0;
                loop {
                    let w = p.word("a state")?;
                    let Some(b) = flags_of(&w, table) else {
                        p.pos -= 1;
                        return p.err(format!(
                            "unsupported value '{w}' for {}",
                            super::print::field_text(lhs[0])
                        ));
                    };
                    v |= b;
                    if *p.peek() == Tok::Comma {
                        p.bump();
                        continue;
                    }
                    break;
                }
                Rhs::Value(ElemKey::Exact(vec![Datum::from(v)]))
            } else if lhs.len() == 1 && matches!(lhs[0], Field::FibSaddrType | Field::FibDaddrType)
            {
                let w = p.word("an address type")?;
                let Some(i) = FIB_TYPES.iter().position(|t| *t == w) else {
                    p.pos -= 1;
                    return p.err(format!("unsupported value '{w}' for fib type"));
                };
                if p.family != Family::Ip && w != "local" {
                    p.pos -= 1;
                    return p.err(format!(
                        "unsupported: fib type '{w}' in an {} table (for IPv6 nfsim tells only 'local')",
                        p.family
                    ));
                }
                Rhs::Value(ElemKey::Exact(vec![i as Datum]))
            } else {
                Rhs::Value(key_value(p, Some(&dts))?)
            }
        };
        return Ok(Stmt::Match {
            lhs,
            mask,
            negated,
            rhs,
        });
    }
    p.pos = start;
    let w = p.word("a statement")?;
    Ok(match w.as_str() {
        "iifname" | "oifname" => {
            let negated = p.eat_word("!=");
            let name = match p.peek().clone() {
                Tok::Word(n) | Tok::Str(n) if !n.is_empty() && n.len() <= 16 => {
                    p.pos += 1;
                    n
                }
                _ => {
                    return p.err(format!(
                        "syntax error, expected an interface name (at most 16 characters), got {}",
                        p.what()
                    ))
                }
            };
            if w == "iifname" {
                Stmt::Iifname { negated, name }
            } else {
                Stmt::Oifname { negated, name }
            }
        }
        "counter" => {
            let (mut packets, mut bytes) = (0, 0);
            if p.eat_word("packets") {
                packets = p.word("a number")?.parse().unwrap_or(0);
                p.expect_word("bytes")?;
                bytes = p.word("a number")?.parse().unwrap_or(0);
            }
            Stmt::Counter { packets, bytes }
        }
        "accept" | "drop" | "continue" | "return" | "jump" | "goto" => {
            p.pos -= 1;
            Stmt::Verdict(verdict(p)?)
        }
        "dnat" | "snat" => {
            let kw_at = p.pos - 1;
            let given = match p.peek_word() {
                Some("ip") => Some(Family::Ip),
                Some("ip6") => Some(Family::Ip6),
                _ => None,
            };
            if given.is_some() {
                p.bump();
            }
            p.expect_word("to")?;
            let a = p.word("an address")?;
            let Some((addr, port)) = nat_target(&a) else {
                p.pos -= 1;
                return p.err(format!(
                    "unsupported: {w} to '{a}' (expected ADDR, ADDR:PORT or [ADDR6]:PORT)"
                ));
            };
            let addr_family = if addr.is_ipv4() {
                Family::Ip
            } else {
                Family::Ip6
            };
            // nft's stmt_evaluate_nat: the address must be of the table's family (the
            // `ip`/`ip6` keyword, or in `inet` the rule's network protocol so far, says which).
            let want = match p.family {
                Family::Inet => given.or_else(|| network_context(prev)),
                f => Some(f),
            };
            match want {
                None => {
                    p.pos = kw_at;
                    return p.err("ip or ip6 must be specified with address for inet tables.");
                }
                Some(f) if f != addr_family => {
                    p.pos -= 1;
                    return p.err(format!(
                        "Could not resolve hostname: '{a}' is not an {} address",
                        if f == Family::Ip { "IPv4" } else { "IPv6" }
                    ));
                }
                _ => {}
            }
            // nft's stmt_evaluate_nat: a port needs the transport protocol fixed by an
            // earlier match (`meta l4proto tcp`, `meta l4proto { tcp, udp }`, `tcp dport`).
            if port.is_some() && !prev.iter().any(fixes_transport) {
                let t = &p.toks[p.pos - 1];
                let at = a.rfind(':').map_or(0, |i| a[..=i].chars().count());
                return Err(NftError {
                    file: p.file.to_string(),
                    line: t.line,
                    col: t.col + at,
                    msg: "transport protocol mapping is only valid after transport protocol match"
                        .into(),
                });
            }
            Stmt::Nat {
                dnat: w == "dnat",
                addr,
                port,
                inet: p.family == Family::Inet,
            }
        }
        "masquerade" => {
            let fully_random = p.eat_word("fully-random");
            Stmt::Masquerade { fully_random }
        }
        "reject" => {
            // nft_reject_ipv4 / nft_reject_ipv6 default to port-unreachable of the family;
            // nft_reject_inet's default is ICMPX port-unreachable, kept as the IPv4 value and
            // sent as ICMPv6 port-unreachable to IPv6 packets (eval.rs).
            let mut with = if p.family == Family::Ip6 {
                RejectWith::Icmp6PortUnreachable
            } else {
                RejectWith::IcmpPortUnreachable
            };
            if p.eat_word("with") {
                let kind = p.word("icmp, icmpv6, icmpx or tcp")?;
                match (kind.as_str(), p.family) {
                    ("tcp", _) => {
                        p.expect_word("reset")?;
                        with = RejectWith::TcpReset;
                    }
                    ("icmpv6", Family::Ip) | ("icmp", Family::Ip6) => {
                        p.pos -= 1;
                        let table = if p.family == Family::Ip { "ip" } else { "ip6" };
                        let other = if table == "ip" { "ip6" } else { "ip" };
                        return p.err(format!(
                            "conflicting protocols specified: {table} vs {other}"
                        ));
                    }
                    ("icmpv6", Family::Ip6) => {
                        let _ = p.eat_word("type");
                        let c = p.word("an ICMPv6 code name")?;
                        with = match c.as_str() {
                            "no-route" => RejectWith::Icmp6NoRoute,
                            "admin-prohibited" => RejectWith::Icmp6AdmProhibited,
                            "addr-unreachable" => RejectWith::Icmp6AddrUnreachable,
                            "port-unreachable" => RejectWith::Icmp6PortUnreachable,
                            "policy-fail" => RejectWith::Icmp6PolicyFail,
                            "reject-route" => RejectWith::Icmp6RejectRoute,
                            _ => {
                                p.pos -= 1;
                                return p.err(format!("unsupported: reject with icmpv6 {c}"));
                            }
                        };
                    }
                    ("icmpx", Family::Inet) => {
                        let _ = p.eat_word("type");
                        let c = p.word("an ICMPX code name")?;
                        if c != "port-unreachable" {
                            p.pos -= 1;
                            return p.err(format!(
                                "unsupported: reject with icmpx {c} in an inet table (nfsim takes reject, reject with icmpx port-unreachable and reject with tcp reset there)"
                            ));
                        }
                    }
                    ("icmp" | "icmpv6", Family::Inet) => {
                        p.pos -= 1;
                        return p.err(format!(
                            "unsupported: reject with {kind} in an inet table (nfsim takes reject, reject with icmpx port-unreachable and reject with tcp reset there)"
                        ));
                    }
                    ("icmp" | "icmpx", Family::Ip) => {
                        let _ = p.eat_word("type");
                        let c = p.word("an ICMP code name")?;
                        with = match c.as_str() {
                            "port-unreachable" => RejectWith::IcmpPortUnreachable,
                            "host-unreachable" => RejectWith::IcmpHostUnreachable,
                            "net-unreachable" => RejectWith::IcmpNetUnreachable,
                            "prot-unreachable" => RejectWith::IcmpProtoUnreachable,
                            "net-prohibited" => RejectWith::IcmpNetProhibited,
                            "host-prohibited" => RejectWith::IcmpHostProhibited,
                            "admin-prohibited" => RejectWith::IcmpAdminProhibited,
                            _ => {
                                p.pos -= 1;
                                return p.err(format!("unsupported: reject with {kind} {c}"));
                            }
                        };
                    }
                    _ => {
                        p.pos -= 1;
                        return p.err(format!("unsupported: reject with {kind}"));
                    }
                }
            }
            Stmt::Reject(with)
        }
        "update" | "add" => {
            if !p.eat_word_prefix_at() {
                return p.err(format!("syntax error, expected @set, got {}", p.what()));
            }
            let set = p.word("a set name")?.trim_start_matches('@').to_string();
            p.expect(Tok::LBrace, "'{'")?;
            let mut key = Vec::new();
            loop {
                match field(p)? {
                    Some(f) => key.push(f),
                    None => {
                        return p.err(format!("syntax error, expected a field, got {}", p.what()))
                    }
                }
                if !p.eat_word(".") {
                    break;
                }
            }
            if p.peek_word() == Some("timeout") {
                return p.err("unsupported: per-element timeout in update");
            }
            p.expect(Tok::RBrace, "'}'")?;
            if w == "add" {
                return p.err("unsupported: add @set (kube-proxy uses update)");
            }
            Stmt::Update { set, key }
        }
        _ => {
            p.pos -= 1;
            return p.err(format!("unsupported: statement or expression '{w}'"));
        }
    })
}

impl P<'_> {
    /// Whether the next word is `@name` (the `@` is kept for [`P::word`] to strip).
    fn eat_word_prefix_at(&mut self) -> bool {
        matches!(self.peek_word(), Some(w) if w.starts_with('@') && w.len() > 1)
    }
}

fn mark_set(p: &mut P) -> R<Stmt> {
    let w = p.word("a mark value or 'mark'")?;
    if w == "mark" || w == "meta" {
        if w == "meta" {
            p.expect_word("mark")?;
        }
        let op = p.word("or, xor, and (|, ^, &)")?;
        let v = p.word("a value")?;
        let Some(v) = num(&v) else {
            p.pos -= 1;
            return p.err(format!("syntax error, mark value '{v}'"));
        };
        return Ok(Stmt::MarkSet(match op.as_str() {
            "or" | "|" => MarkOp::Or(v),
            "xor" | "^" => MarkOp::Xor(v),
            "and" | "&" => MarkOp::And(v),
            _ => {
                p.pos -= 2;
                return p.err(format!("unsupported: mark operator '{op}'"));
            }
        }));
    }
    match num(&w) {
        Some(v) => Ok(Stmt::MarkSet(MarkOp::Set(v))),
        None => {
            p.pos -= 1;
            p.err(format!("syntax error, mark value '{w}'"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_parse_as_nft_writes_them() {
        assert_eq!(parse_time("10800s"), Some(10_800_000));
        assert_eq!(parse_time("3h"), Some(10_800_000));
        assert_eq!(parse_time("1m30s"), Some(90_000));
        assert_eq!(parse_time("250ms"), Some(250));
        assert_eq!(parse_time("3x"), None);
    }
}
