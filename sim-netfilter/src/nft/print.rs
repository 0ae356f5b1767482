//! `nft list ruleset` / `nft list table F T`, byte for byte as nft 1.0.6 prints them
//! (`table_print`, `set_print`, `chain_print` in nftables' `src/rule.c`;
//! `calculate_delim` / `set_expr_print` in `src/expression.c`; element order by
//! `list_expr_sort` in `src/mergesort.c`).

use std::fmt::Write;

use sim_core::SimTime;

use super::parse::{
    std_prio_ok, CT_STATES, CT_STATUS, FIB_TYPES, ICMPV6_TYPES, NFPROTOS, STD_PRIOS,
};
use super::*;
use crate::rule::RejectWith;

impl NftRuleset {
    /// `nft list ruleset`, at time `now` (for the `expires` of timed-out set elements).
    pub fn list_ruleset(&self, now: SimTime) -> String {
        let mut out = String::new();
        for t in self.tables.values() {
            print_table(&mut out, t, now);
        }
        out
    }

    /// `nft list table FAMILY NAME`, or `None` when there is no such table.
    pub fn list_table(&self, family: Family, name: &str, now: SimTime) -> Option<String> {
        let t = self.table(family, name)?;
        let mut out = String::new();
        print_table(&mut out, t, now);
        Some(out)
    }
}

fn print_table(out: &mut String, t: &NftTable, now: SimTime) {
    let _ = writeln!(out, "table {} {} {{", t.family, t.name);
    if let Some(c) = &t.comment {
        let _ = writeln!(out, "\tcomment \"{c}\"");
    }
    let mut delim = "";
    for s in t.sets.values() {
        out.push_str(delim);
        print_set(out, s, now);
        delim = "\n";
    }
    for c in t.chains.values() {
        out.push_str(delim);
        print_chain(out, c);
        delim = "\n";
    }
    out.push_str("}\n");
}

/// nft's `time_print`: days, hours, minutes, seconds, milliseconds, each only when non-zero.
pub(super) fn time_text(ms: u64) -> String {
    let mut s = String::new();
    let mut rest = ms;
    for (unit, n) in [
        ("d", 86_400_000),
        ("h", 3_600_000),
        ("m", 60_000),
        ("s", 1000),
        ("ms", 1),
    ] {
        let v = rest / n;
        rest %= n;
        if v > 0 {
            let _ = write!(s, "{v}{unit}");
        }
    }
    s
}

fn print_set(out: &mut String, s: &NftSet, now: SimTime) {
    let kind = if s.is_map { "map" } else { "set" };
    let _ = writeln!(out, "\t{kind} {} {{", s.name);
    let key = s
        .key
        .iter()
        .map(|d| d.name())
        .collect::<Vec<_>>()
        .join(" . ");
    if s.is_map {
        let _ = writeln!(out, "\t\ttype {key} : verdict");
    } else {
        let _ = writeln!(out, "\t\ttype {key}");
    }
    if let Some(n) = s.size {
        let _ = writeln!(out, "\t\tsize {n}");
    }
    let mut flags = s.flags.clone();
    if !flags.is_empty() && s.timeout_ms.is_some() && !flags.iter().any(|f| f == "timeout") {
        flags.push("timeout".into());
    }
    if !flags.is_empty() {
        let _ = writeln!(out, "\t\tflags {}", flags.join(","));
    }
    if let Some(t) = s.timeout_ms {
        let _ = writeln!(out, "\t\ttimeout {}", time_text(t));
    }
    if let Some(c) = &s.comment {
        let _ = writeln!(out, "\t\tcomment \"{c}\"");
    }
    let live: Vec<(&ElemKey, &Element)> = s
        .elements
        .iter()
        .filter(|(_, e)| e.expires.is_none_or(|x| x > now))
        .collect();
    if !live.is_empty() {
        out.push_str("\t\telements = { ");
        let mut sorted = live;
        sorted.sort_by_key(|a| sort_key(a.0, &s.key));
        let texts: Vec<String> = sorted
            .iter()
            .map(|(k, e)| {
                let mut t = key_text(k, &s.key);
                if let Some(ms) = e.timeout_ms {
                    let _ = write!(t, " timeout {}", time_text(ms));
                }
                if let Some(x) = e.expires {
                    let left = x.saturating_since(now).as_millis();
                    let _ = write!(t, " expires {}", time_text(left));
                }
                if let Some(c) = &e.comment {
                    let _ = write!(t, " comment \"{c}\"");
                }
                if let Some(v) = &e.verdict {
                    let _ = write!(t, " : {v}");
                }
                t
            })
            .collect();
        out.push_str(&join_elements(&texts, &s.key, false));
        out.push_str(" }\n");
    }
    out.push_str("\t}\n");
}

/// nft's `calculate_delim`: anonymous sets on one line; named sets of addresses two per line,
/// of integers/services/protocols/marks five per line, anything else one per line.
fn join_elements(texts: &[String], key: &[DataType], anonymous: bool) -> String {
    let per_line = if anonymous {
        usize::MAX
    } else if key.len() != 1 {
        1
    } else {
        // nft 1.0.6 lists `ipv6_addr` sets one element per line (checked with the real nft).
        match key[0] {
            DataType::Ipv4Addr | DataType::CtState => 2,
            DataType::Ipv6Addr => 1,
            _ => 5,
        }
    };
    let mut s = String::new();
    let mut count = 0;
    for (i, t) in texts.iter().enumerate() {
        if i > 0 {
            if count < per_line {
                s.push_str(", ");
            } else {
                count = 0;
                s.push_str(",\n\t\t\t     ");
            }
        }
        s.push_str(t);
        count += 1;
    }
    s
}

/// The order nft lists elements in (`list_expr_sort`): a single field by its value; a
/// concatenation by its fields' bytes (network order for addresses and ports, host order
/// for marks and integers) read as one little-endian number.
fn sort_key(k: &ElemKey, key: &[DataType]) -> Vec<u8> {
    match k {
        ElemKey::Range(lo, _) => lo.to_be_bytes().to_vec(),
        ElemKey::Exact(v) if v.len() == 1 => v[0].to_be_bytes().to_vec(),
        ElemKey::Exact(v) => {
            let mut bytes = Vec::new();
            for (d, x) in key.iter().zip(v) {
                let w = d.width();
                match d {
                    DataType::Mark | DataType::Integer | DataType::CtState => {
                        bytes.extend_from_slice(&x.to_le_bytes()[..w])
                    }
                    _ => bytes.extend_from_slice(&x.to_be_bytes()[16 - w..]),
                }
            }
            bytes.reverse();
            bytes
        }
    }
}

fn proto_name(p: u32) -> String {
    match p {
        1 => "icmp".into(),
        6 => "tcp".into(),
        17 => "udp".into(),
        58 => "ipv6-icmp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

fn flags_text(v: u32, table: &[(&str, u32)]) -> String {
    table
        .iter()
        .filter(|(_, b)| v & b != 0)
        .map(|(n, _)| *n)
        .collect::<Vec<_>>()
        .join(",")
}

/// The low 32 bits of a [`Datum`]: every field but an IPv6 address is at most 32 bits wide
/// and never sets the bits above.
fn low32(v: Datum) -> u32 {
    v as u32
}

/// A symbolic constant's name (`symbol_table` of a data type), or the number.
fn symbol_text(v: u32, table: &[(&str, u32)]) -> String {
    table
        .iter()
        .find(|(_, n)| *n == v)
        .map_or_else(|| v.to_string(), |(s, _)| s.to_string())
}

fn datum_text(v: Datum, d: DataType) -> String {
    let w = low32(v);
    match d {
        // nft prints IPv6 addresses with inet_ntop (datatype.c ip6addr_type_print).
        DataType::Ipv6Addr => crate::types::ipv6_to_numeric(std::net::Ipv6Addr::from(v)),
        DataType::NfProto => symbol_text(w, &NFPROTOS),
        DataType::Icmpv6Type => symbol_text(w, &ICMPV6_TYPES),
        DataType::Ipv4Addr => std::net::Ipv4Addr::from(w).to_string(),
        DataType::InetProto => proto_name(w),
        DataType::InetService | DataType::Integer => w.to_string(),
        DataType::Mark => format!("0x{w:08x}"),
        DataType::CtState => flags_text(w, &CT_STATES),
    }
}

fn field_datum_text(v: Datum, f: Field) -> String {
    match f {
        Field::CtStatus => flags_text(low32(v), &CT_STATUS),
        Field::FibSaddrType | Field::FibDaddrType => FIB_TYPES
            .get(low32(v) as usize)
            .map_or_else(|| v.to_string(), |s| s.to_string()),
        _ => datum_text(v, f.dtype()),
    }
}

fn range_text(lo: Datum, hi: Datum, d: DataType) -> String {
    if d == DataType::Ipv6Addr {
        let span = hi.wrapping_sub(lo).wrapping_add(1);
        if span == 0 && lo == 0 {
            return "::/0".into();
        }
        if span.is_power_of_two() && lo & (span - 1) == 0 {
            let len = 128 - span.trailing_zeros();
            return format!("{}/{len}", datum_text(lo, d));
        }
    }
    if d == DataType::Ipv4Addr {
        let (lo, hi) = (low32(lo), low32(hi));
        let span = hi.wrapping_sub(lo).wrapping_add(1);
        if span == 0 && lo == 0 {
            return "0.0.0.0/0".into();
        }
        if span.is_power_of_two() && lo & (span - 1) == 0 {
            let len = 32 - span.trailing_zeros();
            return format!("{}/{len}", std::net::Ipv4Addr::from(lo));
        }
    }
    format!("{}-{}", datum_text(lo, d), datum_text(hi, d))
}

fn key_text(k: &ElemKey, key: &[DataType]) -> String {
    match k {
        ElemKey::Range(lo, hi) => {
            range_text(*lo, *hi, key.first().copied().unwrap_or(DataType::Integer))
        }
        ElemKey::Exact(v) => v
            .iter()
            .zip(key)
            .map(|(x, d)| datum_text(*x, *d))
            .collect::<Vec<_>>()
            .join(" . "),
    }
}

fn field_key_text(k: &ElemKey, fields: &[Field]) -> String {
    match k {
        ElemKey::Range(lo, hi) => range_text(
            *lo,
            *hi,
            fields.first().map_or(DataType::Integer, |f| f.dtype()),
        ),
        ElemKey::Exact(v) => v
            .iter()
            .zip(fields)
            .map(|(x, f)| field_datum_text(*x, *f))
            .collect::<Vec<_>>()
            .join(" . "),
    }
}

pub(super) fn field_text(f: Field) -> String {
    let l4 = |p: u8| match p {
        6 => "tcp",
        17 => "udp",
        132 => "sctp",
        _ => "th",
    };
    match f {
        Field::IpSaddr => "ip saddr".into(),
        Field::IpDaddr => "ip daddr".into(),
        Field::IpProtocol => "ip protocol".into(),
        Field::Ip6Saddr => "ip6 saddr".into(),
        Field::Ip6Daddr => "ip6 daddr".into(),
        Field::Ip6Nexthdr => "ip6 nexthdr".into(),
        Field::MetaNfproto => "meta nfproto".into(),
        Field::Icmpv6Type => "icmpv6 type".into(),
        Field::MetaL4proto => "meta l4proto".into(),
        Field::MetaMark => "meta mark".into(),
        Field::ThSport => "th sport".into(),
        Field::ThDport => "th dport".into(),
        Field::Sport(p) => format!("{} sport", l4(p)),
        Field::Dport(p) => format!("{} dport", l4(p)),
        Field::CtState => "ct state".into(),
        Field::CtStatus => "ct status".into(),
        Field::FibSaddrType => "fib saddr type".into(),
        Field::FibDaddrType => "fib daddr type".into(),
        Field::Numgen { modulus, offset } => {
            if offset == 0 {
                format!("numgen random mod {modulus}")
            } else {
                format!("numgen random mod {modulus} offset {offset}")
            }
        }
    }
}

fn lhs_text(lhs: &[Field]) -> String {
    lhs.iter()
        .map(|f| field_text(*f))
        .collect::<Vec<_>>()
        .join(" . ")
}

/// An anonymous set's elements as nft keeps them: interval sets (any prefix or range in a
/// single-field set) with overlapping and adjacent ranges merged (`set_automerge`), then
/// sorted.
pub(super) fn normalize_anon(elems: &[ElemKey], fields: &[Field]) -> Vec<ElemKey> {
    let interval = fields.len() == 1 && elems.iter().any(|e| matches!(e, ElemKey::Range(..)));
    let dts: Vec<DataType> = fields.iter().map(|f| f.dtype()).collect();
    if !interval {
        let mut v = elems.to_vec();
        v.sort_by_key(|k| sort_key(k, &dts));
        v.dedup();
        return v;
    }
    let mut ranges: Vec<(Datum, Datum)> = elems
        .iter()
        .map(|e| match e {
            ElemKey::Range(a, b) => (*a, *b),
            ElemKey::Exact(v) => (v[0], v[0]),
        })
        .collect();
    ranges.sort();
    let mut merged: Vec<(Datum, Datum)> = Vec::new();
    for (a, b) in ranges {
        match merged.last_mut() {
            // Overlapping or adjacent (`a` at most one past the last end).
            Some(last) if a <= last.1.saturating_add(1) => last.1 = last.1.max(b),
            _ => merged.push((a, b)),
        }
    }
    merged
        .into_iter()
        .map(|(a, b)| {
            if a == b {
                ElemKey::Exact(vec![a])
            } else {
                ElemKey::Range(a, b)
            }
        })
        .collect()
}

fn chain_prio_text(b: &BaseChain) -> String {
    for (name, std) in STD_PRIOS {
        let off = i64::from(b.priority) - i64::from(std);
        if off.abs() <= 10 {
            if !std_prio_ok(std, b.hook) {
                break;
            }
            return match off {
                0 => name.to_string(),
                o if o > 0 => format!("{name} + {o}"),
                o => format!("{name} - {}", -o),
            };
        }
    }
    b.priority.to_string()
}

fn hook_name(h: Hook) -> &'static str {
    match h {
        Hook::PreRouting => "prerouting",
        Hook::Input => "input",
        Hook::Forward => "forward",
        Hook::Output => "output",
        Hook::PostRouting => "postrouting",
    }
}

fn print_chain(out: &mut String, c: &NftChain) {
    let _ = write!(out, "\tchain {} {{", c.name);
    if let Some(cm) = &c.comment {
        let _ = write!(out, "\n\t\tcomment \"{cm}\"");
    }
    out.push('\n');
    if let Some(b) = &c.base {
        let _ = writeln!(
            out,
            "\t\ttype {} hook {} priority {}; policy {};",
            b.ty.name(),
            hook_name(b.hook),
            chain_prio_text(b),
            if b.policy_accept { "accept" } else { "drop" }
        );
    }
    for r in &c.rules {
        let _ = writeln!(out, "\t\t{}", rule_text(r));
    }
    out.push_str("\t}\n");
}

/// A rule as `nft list` prints it.
pub fn rule_text(r: &NftRule) -> String {
    let mut parts = Vec::new();
    for (i, s) in r.stmts.iter().enumerate() {
        if implied_dependency(s, &r.stmts[i + 1..]) {
            continue;
        }
        parts.push(stmt_text(s));
    }
    let mut t = parts.join(" ");
    if let Some(c) = &r.comment {
        let _ = write!(t, " comment \"{c}\"");
    }
    t
}

/// A protocol match that a later expression of the rule implies, which nft adds itself and
/// does not print (`payload_dependency_kill`): `meta l4proto P` before a `P sport|dport`
/// (or `ipv6-icmp` before `icmpv6 type`), and in `inet` tables `meta nfproto ipv4|ipv6`
/// before an `ip` / `ip6` header field.
fn implied_dependency(s: &Stmt, rest: &[Stmt]) -> bool {
    let Stmt::Match {
        lhs,
        mask: None,
        negated: false,
        rhs: Rhs::Value(ElemKey::Exact(v)),
    } = s
    else {
        return false;
    };
    if lhs.len() != 1 || v.len() != 1 {
        return false;
    }
    let implied_by: fn(Field, Datum) -> bool = match lhs[0] {
        Field::MetaL4proto => |f, p| match f {
            Field::Sport(q) | Field::Dport(q) => Datum::from(q) == p,
            Field::Icmpv6Type => p == 58,
            _ => false,
        },
        Field::MetaNfproto => |f, p| match f {
            Field::IpSaddr | Field::IpDaddr | Field::IpProtocol => p == 2,
            Field::Ip6Saddr | Field::Ip6Daddr | Field::Ip6Nexthdr => p == 10,
            _ => false,
        },
        _ => return false,
    };
    rest.iter().any(|s| match s {
        Stmt::Match { lhs, .. } | Stmt::Vmap { lhs, .. } => {
            lhs.iter().any(|f| implied_by(*f, v[0]))
        }
        _ => false,
    })
}

/// One statement as `nft list` prints it.
pub fn stmt_text(s: &Stmt) -> String {
    match s {
        Stmt::Match {
            lhs,
            mask,
            negated,
            rhs,
        } => {
            let mut t = lhs_text(lhs);
            if let Some(m) = mask {
                let _ = write!(t, " & 0x{m:08x}");
            }
            t.push_str(match (negated, mask.is_some()) {
                (true, _) => " != ",
                (false, true) => " == ",
                (false, false) => " ",
            });
            match rhs {
                Rhs::Value(k) => t.push_str(&field_key_text(k, lhs)),
                Rhs::SetRef(n) => {
                    let _ = write!(t, "@{n}");
                }
                Rhs::Set(elems) => {
                    let texts: Vec<String> = normalize_anon(elems, lhs)
                        .iter()
                        .map(|k| field_key_text(k, lhs))
                        .collect();
                    let _ = write!(t, "{{ {} }}", texts.join(", "));
                }
            }
            t
        }
        Stmt::Counter { packets, bytes } => format!("counter packets {packets} bytes {bytes}"),
        Stmt::Verdict(v) => v.to_string(),
        Stmt::Vmap { lhs, map, anon } => match map {
            Some(m) => format!("{} vmap @{m}", lhs_text(lhs)),
            None => {
                let dts: Vec<DataType> = lhs.iter().map(|f| f.dtype()).collect();
                let mut v: Vec<&(ElemKey, NftVerdict)> = anon.iter().collect();
                v.sort_by_key(|(k, _)| sort_key(k, &dts));
                let items: Vec<String> = v
                    .iter()
                    .map(|(k, vd)| format!("{} : {vd}", field_key_text(k, lhs)))
                    .collect();
                format!("{} vmap {{ {} }}", lhs_text(lhs), items.join(", "))
            }
        },
        Stmt::MarkSet(op) => match op {
            MarkOp::Set(v) => format!("meta mark set 0x{v:08x}"),
            MarkOp::Or(v) => format!("meta mark set meta mark | 0x{v:08x}"),
            MarkOp::Xor(v) => format!("meta mark set meta mark ^ 0x{v:08x}"),
            MarkOp::And(v) => format!("meta mark set meta mark & 0x{v:08x}"),
        },
        Stmt::Update { set, key } => format!("update @{set} {{ {} }}", lhs_text(key)),
        Stmt::Nat {
            dnat,
            addr,
            port,
            inet,
        } => {
            // nft's nat_stmt_print: the family in `inet` tables, IPv6 addresses in brackets
            // before a port.
            let kw = match (*dnat, *inet, addr.is_ipv4()) {
                (true, false, _) => "dnat",
                (false, false, _) => "snat",
                (true, true, true) => "dnat ip",
                (true, true, false) => "dnat ip6",
                (false, true, true) => "snat ip",
                (false, true, false) => "snat ip6",
            };
            match (addr, port) {
                (std::net::IpAddr::V4(a), Some(p)) => format!("{kw} to {a}:{p}"),
                (std::net::IpAddr::V6(a), Some(p)) => {
                    format!("{kw} to [{}]:{p}", crate::types::ipv6_to_numeric(*a))
                }
                (std::net::IpAddr::V4(a), None) => format!("{kw} to {a}"),
                (std::net::IpAddr::V6(a), None) => {
                    format!("{kw} to {}", crate::types::ipv6_to_numeric(*a))
                }
            }
        }
        Stmt::Iifname { negated, name } | Stmt::Oifname { negated, name } => {
            let kw = if matches!(s, Stmt::Iifname { .. }) {
                "iifname"
            } else {
                "oifname"
            };
            if *negated {
                format!("{kw} != \"{name}\"")
            } else {
                format!("{kw} \"{name}\"")
            }
        }
        Stmt::Masquerade { fully_random } => {
            if *fully_random {
                "masquerade fully-random".into()
            } else {
                "masquerade".into()
            }
        }
        Stmt::Reject(w) => match w {
            RejectWith::IcmpPortUnreachable => "reject".into(),
            RejectWith::TcpReset => "reject with tcp reset".into(),
            RejectWith::IcmpHostUnreachable => "reject with icmp host-unreachable".into(),
            RejectWith::IcmpNetUnreachable => "reject with icmp net-unreachable".into(),
            RejectWith::IcmpProtoUnreachable => "reject with icmp prot-unreachable".into(),
            RejectWith::IcmpNetProhibited => "reject with icmp net-prohibited".into(),
            RejectWith::IcmpHostProhibited => "reject with icmp host-prohibited".into(),
            RejectWith::IcmpAdminProhibited => "reject with icmp admin-prohibited".into(),
            RejectWith::Icmp6PortUnreachable => "reject".into(),
            RejectWith::Icmp6NoRoute => "reject with icmpv6 no-route".into(),
            RejectWith::Icmp6AdmProhibited => "reject with icmpv6 admin-prohibited".into(),
            RejectWith::Icmp6AddrUnreachable => "reject with icmpv6 addr-unreachable".into(),
            RejectWith::Icmp6PolicyFail => "reject with icmpv6 policy-fail".into(),
            RejectWith::Icmp6RejectRoute => "reject with icmpv6 reject-route".into(),
        },
    }
}
