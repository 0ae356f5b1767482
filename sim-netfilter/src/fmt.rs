//! Printing rules the way iptables 1.8.9 (nf_tables) prints them.
//!
//! Two forms, each following the extension's own printer in iptables' `extensions/`:
//! the `save` form of `iptables-save` (`-A CHAIN -d 10.96.0.10/32 -p udp -m udp --dport 53 …`)
//! and the `print` form of `iptables -L -n -v` (`udp dpt:53 …`). The column layout of the
//! listing follows `print_header` / `print_rule_details` / `print_ifaces` in `xshared.c`.

use std::fmt::Write;

use crate::rule::*;
use crate::types::*;

/// `xtables_save_string`: bare when only `[_-0-9A-Za-z]`, else double-quoted with `"`, `\`
/// and `'` escaped by a backslash.
pub(crate) fn save_string(out: &mut String, s: &str) {
    let bare = !s.is_empty()
        && s.bytes()
            .all(|b| b == b'_' || b == b'-' || b.is_ascii_alphanumeric());
    out.push(' ');
    if bare {
        out.push_str(s);
        return;
    }
    out.push('"');
    for c in s.chars() {
        if matches!(c, '"' | '\\' | '\'') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}

fn tcp_flag_names(v: u8) -> String {
    const NAMES: [(&str, u8); 6] = [
        ("FIN", 0x01),
        ("SYN", 0x02),
        ("RST", 0x04),
        ("PSH", 0x08),
        ("ACK", 0x10),
        ("URG", 0x20),
    ];
    if v == 0 {
        return "NONE".into();
    }
    let names: Vec<&str> = NAMES
        .iter()
        .filter(|(_, b)| v & b != 0)
        .map(|(n, _)| *n)
        .collect();
    names.join(",")
}

fn list_of<T: Copy>(names: &[(&str, T)], has: impl Fn(T) -> bool) -> String {
    let v: Vec<&str> = names
        .iter()
        .filter(|(_, b)| has(*b))
        .map(|(n, _)| *n)
        .collect();
    v.join(",")
}

fn state_names(mask: u16) -> String {
    list_of(&ctstate::NAMES, |b| mask & b != 0)
}

fn status_names(mask: u32) -> String {
    if mask == 0 {
        return "NONE".into();
    }
    list_of(&ctstatus::NAMES, |b| mask & b != 0)
}

fn addrtype_names(mask: u16) -> String {
    let v: Vec<&str> = AddrType::ALL
        .iter()
        .filter(|t| mask & t.bit() != 0)
        .map(|t| t.name())
        .collect();
    v.join(",")
}

fn ct_addr(n: &IpNet) -> String {
    n.list_form()
}

fn ct_ports(r: &PortRange) -> String {
    if r.max == 0 || r.min == r.max {
        r.min.to_string()
    } else {
        format!("{}:{}", r.min, r.max)
    }
}

fn multiport_list(ports: &[PortRange]) -> String {
    let v: Vec<String> = ports
        .iter()
        .map(|r| {
            if r.min == r.max {
                r.min.to_string()
            } else {
                format!("{}:{}", r.min, r.max)
            }
        })
        .collect();
    v.join(",")
}

fn to_ports(p: (u16, u16)) -> String {
    if p.0 == p.1 {
        p.0.to_string()
    } else {
        format!("{}-{}", p.0, p.1)
    }
}

/// The IP-header part in save form.
fn save_ip(out: &mut String, ip: &IpMatch) {
    if let Some(n) = ip.src {
        out.push_str(if ip.src_inv { " ! -s " } else { " -s " });
        out.push_str(&n.save_form());
    }
    if let Some(n) = ip.dst {
        out.push_str(if ip.dst_inv { " ! -d " } else { " -d " });
        out.push_str(&n.save_form());
    }
    for (p, inv, flag) in [(&ip.iif, ip.iif_inv, "-i"), (&ip.oif, ip.oif_inv, "-o")] {
        if let Some(p) = p {
            if !p.is_any() || inv {
                let _ = write!(out, "{} {flag} {}", if inv { " !" } else { "" }, p.as_str());
            }
        }
    }
    if ip.proto != 0 {
        if ip.proto_inv {
            out.push_str(" !");
        }
        match protocol_save_name(ip.proto) {
            Some(n) => {
                let _ = write!(out, " -p {n}");
            }
            None => {
                let _ = write!(out, " -p {}", ip.proto);
            }
        }
    }
    if let Some(inv) = ip.frag {
        out.push_str(if inv { " ! -f" } else { " -f" });
    }
}

fn save_ports(out: &mut String, sport: &PortRange, sinv: bool, dport: &PortRange, dinv: bool) {
    if !sport.is_all() {
        let _ = write!(
            out,
            "{} --sport {}",
            if sinv { " !" } else { "" },
            sport.colon_form()
        );
    }
    if !dport.is_all() {
        let _ = write!(
            out,
            "{} --dport {}",
            if dinv { " !" } else { "" },
            dport.colon_form()
        );
    }
}

/// One match in save form, `-m NAME` included.
pub(crate) fn save_match(out: &mut String, m: &Match) {
    out.push_str(" -m ");
    out.push_str(m.name());
    let inv = |b: bool| if b { " !" } else { "" };
    match m {
        Match::Tcp(t) => {
            save_ports(out, &t.sport, t.sport_inv, &t.dport, t.dport_inv);
            if let Some((mask, cmp, i)) = t.flags {
                if mask != 0 || i {
                    let _ = write!(
                        out,
                        "{} --tcp-flags {} {}",
                        inv(i),
                        tcp_flag_names(mask),
                        tcp_flag_names(cmp)
                    );
                }
            }
        }
        Match::Udp(p) | Match::Sctp(p) => {
            save_ports(out, &p.sport, p.sport_inv, &p.dport, p.dport_inv)
        }
        Match::Icmp(i) => {
            out.push_str(inv(i.inv));
            if i.icmp_type == 0xff {
                out.push_str(" --icmp-type any");
            } else {
                let _ = write!(out, " --icmp-type {}", i.icmp_type);
                if i.code_min != 0 || i.code_max != 0xff {
                    let _ = write!(out, "/{}", i.code_min);
                }
            }
        }
        Match::Icmp6(i) => {
            // libip6t_icmp6 `icmp6_save`: always numeric, the code when not every code.
            out.push_str(inv(i.inv));
            let _ = write!(out, " --icmpv6-type {}", i.icmp_type);
            if i.code_min != 0 || i.code_max != 0xff {
                let _ = write!(out, "/{}", i.code_min);
            }
        }
        Match::Multiport(mp) => {
            let opt = match mp.kind {
                MultiportKind::Source => "--sports",
                MultiportKind::Destination => "--dports",
                MultiportKind::Either => "--ports",
            };
            let _ = write!(out, "{} {opt} {}", inv(mp.inv), multiport_list(&mp.ports));
        }
        Match::Statistic(s) => match s.mode {
            StatisticMode::Random { probability } => {
                let _ = write!(
                    out,
                    " --mode random{} --probability {}",
                    inv(s.inv),
                    format_probability(probability)
                );
            }
            StatisticMode::Nth { every, packet } => {
                let _ = write!(
                    out,
                    " --mode nth{} --every {every} --packet {packet}",
                    inv(s.inv)
                );
            }
        },
        Match::Mark(mk) => {
            let _ = write!(out, "{} --mark", inv(mk.inv));
            mark_value(out, mk.value, mk.mask);
        }
        Match::Conntrack(c) => conntrack_dump(out, c, "--"),
        Match::Addrtype(a) => {
            if let Some((t, i)) = a.src {
                let _ = write!(out, "{} --src-type {}", inv(i), addrtype_names(t));
            }
            if let Some((t, i)) = a.dst {
                let _ = write!(out, "{} --dst-type {}", inv(i), addrtype_names(t));
            }
            match a.limit {
                Some(LimitIface::In) => out.push_str(" --limit-iface-in"),
                Some(LimitIface::Out) => out.push_str(" --limit-iface-out"),
                None => {}
            }
        }
        Match::Comment(c) => {
            out.push_str(" --comment");
            save_string(out, c);
        }
        Match::Recent(r) => {
            out.push_str(inv(r.inv));
            out.push_str(match r.command {
                RecentCommand::Set => " --set",
                RecentCommand::Check => " --rcheck",
                RecentCommand::Update => " --update",
                RecentCommand::Remove => " --remove",
            });
            if r.seconds != 0 {
                let _ = write!(out, " --seconds {}", r.seconds);
            }
            if r.reap {
                out.push_str(" --reap");
            }
            if r.hitcount != 0 {
                let _ = write!(out, " --hitcount {}", r.hitcount);
            }
            if r.rttl {
                out.push_str(" --rttl");
            }
            let _ = write!(out, " --name {} --mask {}", r.name, ip_to_numeric(r.mask));
            out.push_str(if r.rdest { " --rdest" } else { " --rsource" });
        }
        Match::Nfacct(n) => {
            let _ = write!(out, " --nfacct-name  {}", n.name);
        }
        Match::Set(m) => set_match(out, m, "--"),
        Match::Physdev(p) => physdev_dump(out, p, "--"),
    }
}

/// libxt_set `set_save_v4` (`prefix` `--`) and `set_print_v4` (`prefix` empty).
fn set_match(out: &mut String, m: &SetMatch, prefix: &str) {
    let inv = if m.inv { " !" } else { "" };
    let _ = write!(out, "{inv} {prefix}match-set {} ", m.name);
    for (i, f) in m.flags.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push_str(match f {
            crate::ipset::SetDir::Src => "src",
            crate::ipset::SetDir::Dst => "dst",
        });
    }
    if m.return_nomatch {
        let _ = write!(out, " {prefix}return-nomatch");
    }
    if m.skip_counter_update {
        let _ = write!(out, " ! {prefix}update-counters");
    }
    if m.skip_subcounter_update {
        let _ = write!(out, " ! {prefix}update-subcounters");
    }
}

/// libxt_physdev `physdev_save` (`prefix` `--`) and `physdev_print` (after `PHYSDEV match`,
/// the same words): is-in, in, is-out, out, is-bridged, each with its `!` (iptables 1.8.9).
fn physdev_dump(out: &mut String, p: &PhysdevMatch, prefix: &str) {
    let inv = |b: bool| if b { " !" } else { "" };
    if let Some(i) = p.is_in {
        let _ = write!(out, "{} {prefix}physdev-is-in", inv(i));
    }
    if let Some((n, i)) = p.physdev_in {
        let _ = write!(out, "{} {prefix}physdev-in {n}", inv(i));
    }
    if let Some(i) = p.is_out {
        let _ = write!(out, "{} {prefix}physdev-is-out", inv(i));
    }
    if let Some((n, i)) = p.physdev_out {
        let _ = write!(out, "{} {prefix}physdev-out {n}", inv(i));
    }
    if let Some(i) = p.is_bridged {
        let _ = write!(out, "{} {prefix}physdev-is-bridged", inv(i));
    }
}

fn mark_value(out: &mut String, value: u32, mask: u32) {
    if mask == u32::MAX {
        let _ = write!(out, " 0x{value:x}");
    } else {
        let _ = write!(out, " 0x{value:x}/0x{mask:x}");
    }
}

/// libxt_conntrack `conntrack_dump`, for save (`prefix` `--`) and print (`prefix` empty).
fn conntrack_dump(out: &mut String, c: &ConntrackMatch, prefix: &str) {
    let inv = |b: bool| if b { " !" } else { "" };
    if let Some((mask, i)) = c.state {
        let _ = write!(
            out,
            "{} {prefix}{} {}",
            inv(i),
            if c.state_alias { "state" } else { "ctstate" },
            state_names(mask)
        );
    }
    if let Some((p, i)) = c.proto {
        let _ = write!(out, "{} {prefix}ctproto {p}", inv(i));
    }
    for (v, name) in [
        (&c.orig_src, "ctorigsrc"),
        (&c.orig_dst, "ctorigdst"),
        (&c.repl_src, "ctreplsrc"),
        (&c.repl_dst, "ctrepldst"),
    ] {
        if let Some((n, i)) = v {
            let _ = write!(out, "{} {prefix}{name} {}", inv(*i), ct_addr(n));
        }
    }
    for (v, name) in [
        (&c.orig_src_port, "ctorigsrcport"),
        (&c.orig_dst_port, "ctorigdstport"),
        (&c.repl_src_port, "ctreplsrcport"),
        (&c.repl_dst_port, "ctrepldstport"),
    ] {
        if let Some((r, i)) = v {
            let _ = write!(out, "{} {prefix}{name} {}", inv(*i), ct_ports(r));
        }
    }
    if let Some((mask, i)) = c.status {
        let _ = write!(out, "{} {prefix}ctstatus {}", inv(i), status_names(mask));
    }
    if let Some((lo, hi, i)) = c.expires {
        if lo == hi {
            let _ = write!(out, "{} {prefix}ctexpire {lo}", inv(i));
        } else {
            let _ = write!(out, "{} {prefix}ctexpire {lo}:{hi}", inv(i));
        }
    }
    match c.dir {
        Some(CtDirection::Original) => {
            let _ = write!(out, " {prefix}ctdir ORIGINAL");
        }
        Some(CtDirection::Reply) => {
            let _ = write!(out, " {prefix}ctdir REPLY");
        }
        None => {}
    }
}

/// The target in save form (`-j NAME …`, `-g CHAIN`), or nothing.
pub(crate) fn save_target(out: &mut String, t: &Target) {
    match t {
        Target::None => {}
        Target::Accept => out.push_str(" -j ACCEPT"),
        Target::Drop => out.push_str(" -j DROP"),
        Target::Return => out.push_str(" -j RETURN"),
        Target::Jump(c) => {
            let _ = write!(out, " -j {}", c.name);
        }
        Target::Goto(c) => {
            let _ = write!(out, " -g {}", c.name);
        }
        Target::Reject(w) => {
            let _ = write!(out, " -j REJECT --reject-with {}", w.name());
        }
        Target::Dnat(r) | Target::Snat(r) => {
            let dnat = matches!(t, Target::Dnat(_));
            let _ = write!(
                out,
                " -j {} {} {}",
                if dnat { "DNAT" } else { "SNAT" },
                if dnat {
                    "--to-destination"
                } else {
                    "--to-source"
                },
                r.range_text()
            );
            if r.random {
                out.push_str(" --random");
            }
            if r.random_fully {
                out.push_str(" --random-fully");
            }
            if r.persistent {
                out.push_str(" --persistent");
            }
        }
        Target::Masquerade(p) | Target::Redirect(p) => {
            out.push_str(if matches!(t, Target::Masquerade(_)) {
                " -j MASQUERADE"
            } else {
                " -j REDIRECT"
            });
            if let Some(ports) = p.ports {
                let _ = write!(out, " --to-ports {}", to_ports(ports));
            }
            if p.random {
                out.push_str(" --random");
            }
            if p.random_fully {
                out.push_str(" --random-fully");
            }
        }
        Target::Mark { value, mask } => {
            let _ = write!(out, " -j MARK --set-xmark 0x{value:x}/0x{mask:x}");
        }
        Target::Connmark(op) => match *op {
            ConnmarkOp::Set { value, mask } => {
                let _ = write!(out, " -j CONNMARK --set-xmark 0x{value:x}/0x{mask:x}");
            }
            ConnmarkOp::Save { nfmask, ctmask } => {
                let _ = write!(
                    out,
                    " -j CONNMARK --save-mark --nfmask 0x{nfmask:x} --ctmask 0x{ctmask:x}"
                );
            }
            ConnmarkOp::Restore { nfmask, ctmask } => {
                let _ = write!(
                    out,
                    " -j CONNMARK --restore-mark --nfmask 0x{nfmask:x} --ctmask 0x{ctmask:x}"
                );
            }
        },
        Target::Ct { notrack, alias } => {
            if *alias {
                out.push_str(" -j NOTRACK");
            } else {
                out.push_str(" -j CT");
                if *notrack {
                    out.push_str(" --notrack");
                }
            }
        }
        Target::Log(l) => {
            out.push_str(" -j LOG");
            if !l.prefix.is_empty() {
                out.push_str(" --log-prefix");
                save_string(out, &l.prefix);
            }
            if l.level != 4 {
                let _ = write!(out, " --log-level {}", l.level);
            }
            for (bit, name) in [
                (0x01, " --log-tcp-sequence"),
                (0x02, " --log-tcp-options"),
                (0x04, " --log-ip-options"),
                (0x08, " --log-uid"),
                (0x20, " --log-macdecode"),
            ] {
                if l.flags & bit != 0 {
                    out.push_str(name);
                }
            }
        }
        Target::Trace => out.push_str(" -j TRACE"),
    }
}

/// One rule in iptables-save form, with its newline; `counters` adds the `[p:b] ` prefix
/// of `iptables-save -c`.
pub(crate) fn save_rule(out: &mut String, chain: &str, rule: &Rule, counters: Option<Counters>) {
    if let Some(c) = counters {
        let _ = write!(out, "[{}:{}] ", c.packets, c.bytes);
    }
    out.push_str("-A ");
    out.push_str(chain);
    save_ip(out, &rule.ip);
    for m in &rule.matches {
        save_match(out, m);
    }
    save_target(out, &rule.target);
    out.push('\n');
}

/// The rule's text without `-A CHAIN` (for traces and error messages).
pub fn rule_spec(rule: &Rule) -> String {
    let mut s = String::new();
    save_ip(&mut s, &rule.ip);
    for m in &rule.matches {
        save_match(&mut s, m);
    }
    save_target(&mut s, &rule.target);
    s.trim_start().to_string()
}

/// The target's text in save form without the leading space (`DNAT --to-destination …`).
pub fn target_spec(t: &Target) -> String {
    let mut s = String::new();
    save_target(&mut s, t);
    s.trim_start()
        .trim_start_matches("-j ")
        .trim_start_matches("-g ")
        .to_string()
}

fn list_ports(out: &mut String, name: &str, r: &PortRange, inv: bool) {
    if r.min != 0 || r.max != u16::MAX || inv {
        let i = if inv { "!" } else { "" };
        if r.min == r.max {
            let _ = write!(out, " {name}:{i}{}", r.min);
        } else {
            let _ = write!(out, " {name}s:{i}{}:{}", r.min, r.max);
        }
    }
}

/// One match in `-L -n` form.
fn list_match(out: &mut String, m: &Match) {
    let inv = |b: bool| if b { " !" } else { "" };
    match m {
        Match::Tcp(t) => {
            out.push_str(" tcp");
            list_ports(out, "spt", &t.sport, t.sport_inv);
            list_ports(out, "dpt", &t.dport, t.dport_inv);
            if let Some((mask, cmp, i)) = t.flags {
                if mask != 0 || i {
                    let _ = write!(
                        out,
                        " flags:{}0x{mask:02X}/0x{cmp:02X}",
                        if i { "!" } else { "" }
                    );
                }
            }
        }
        Match::Udp(p) | Match::Sctp(p) => {
            out.push_str(if matches!(m, Match::Udp(_)) {
                " udp"
            } else {
                " sctp"
            });
            list_ports(out, "spt", &p.sport, p.sport_inv);
            list_ports(out, "dpt", &p.dport, p.dport_inv);
        }
        Match::Icmp(i) => {
            // libxt_icmp print_icmptype (numeric): no space before "type".
            let _ = write!(out, " icmp{}type {}", inv(i.inv), i.icmp_type);
            if i.code_min == i.code_max {
                let _ = write!(out, " code {}", i.code_min);
            } else if i.code_min != 0 || i.code_max != 0xff {
                let _ = write!(out, " codes {}-{}", i.code_min, i.code_max);
            }
        }
        Match::Icmp6(i) => {
            // libip6t_icmp6 `print_icmpv6type`, numeric.
            let _ = write!(out, " ipv6-icmp{}type {}", inv(i.inv), i.icmp_type);
            if i.code_min == i.code_max {
                let _ = write!(out, " code {}", i.code_min);
            } else if i.code_min != 0 || i.code_max != 0xff {
                let _ = write!(out, " codes {}-{}", i.code_min, i.code_max);
            }
        }
        Match::Multiport(mp) => {
            let kind = match mp.kind {
                MultiportKind::Source => "sports ",
                MultiportKind::Destination => "dports ",
                MultiportKind::Either => "ports ",
            };
            let _ = write!(
                out,
                " multiport {kind}{}{}",
                inv(mp.inv),
                multiport_list(&mp.ports)
            );
        }
        Match::Statistic(s) => match s.mode {
            StatisticMode::Random { probability } => {
                let _ = write!(
                    out,
                    " statistic mode random{} probability {}",
                    inv(s.inv),
                    format_probability(probability)
                );
            }
            StatisticMode::Nth { every, packet } => {
                let _ = write!(out, " statistic mode nth{} every {every}", inv(s.inv));
                if packet != 0 {
                    let _ = write!(out, " packet {packet}");
                }
            }
        },
        Match::Mark(mk) => {
            let _ = write!(out, " mark match{}", inv(mk.inv));
            mark_value(out, mk.value, mk.mask);
        }
        Match::Conntrack(c) => conntrack_dump(out, c, ""),
        Match::Addrtype(a) => {
            out.push_str(" ADDRTYPE match");
            if let Some((t, i)) = a.src {
                let _ = write!(
                    out,
                    " src-type {}{}",
                    if i { "!" } else { "" },
                    addrtype_names(t)
                );
            }
            if let Some((t, i)) = a.dst {
                let _ = write!(
                    out,
                    " dst-type {}{}",
                    if i { "!" } else { "" },
                    addrtype_names(t)
                );
            }
            match a.limit {
                Some(LimitIface::In) => out.push_str(" limit-in"),
                Some(LimitIface::Out) => out.push_str(" limit-out"),
                None => {}
            }
        }
        Match::Comment(c) => {
            let _ = write!(out, " /* {c} */");
        }
        Match::Recent(r) => {
            out.push_str(inv(r.inv));
            out.push_str(" recent:");
            out.push_str(match r.command {
                RecentCommand::Set => " SET",
                RecentCommand::Check => " CHECK",
                RecentCommand::Update => " UPDATE",
                RecentCommand::Remove => " REMOVE",
            });
            if r.seconds != 0 {
                let _ = write!(out, " seconds: {}", r.seconds);
            }
            if r.reap {
                out.push_str(" reap");
            }
            if r.hitcount != 0 {
                let _ = write!(out, " hit_count: {}", r.hitcount);
            }
            if r.rttl {
                out.push_str(" TTL-Match");
            }
            let _ = write!(
                out,
                " name: {} side: {} mask: {}",
                r.name,
                if r.rdest { "dest" } else { "source" },
                ip_to_numeric(r.mask)
            );
        }
        Match::Nfacct(n) => {
            let _ = write!(out, " nfacct-name  {}", n.name);
        }
        Match::Set(m) => set_match(out, m, ""),
        Match::Physdev(p) => {
            out.push_str(" PHYSDEV match");
            physdev_dump(out, p, "--");
        }
    }
}

/// The target's options in `-L -n` form.
fn list_target(out: &mut String, t: &Target) {
    match t {
        Target::Reject(w) => {
            let _ = write!(out, " reject-with {}", w.name());
        }
        Target::Dnat(r) | Target::Snat(r) => {
            let _ = write!(out, " to:{}", r.range_text());
            if r.random {
                out.push_str(" random");
            }
            if r.random_fully {
                out.push_str(" random-fully");
            }
            if r.persistent {
                out.push_str(" persistent");
            }
        }
        Target::Masquerade(p) => {
            if let Some(ports) = p.ports {
                let _ = write!(out, " masq ports: {}", to_ports(ports));
            }
            if p.random {
                out.push_str(" random");
            }
            if p.random_fully {
                out.push_str(" random-fully");
            }
        }
        Target::Redirect(p) => {
            if let Some(ports) = p.ports {
                let _ = write!(out, " redir ports {}", to_ports(ports));
            }
            if p.random {
                out.push_str(" random");
            }
        }
        Target::Mark { value, mask } => {
            // libxt_MARK mark_tg_print (revision 2).
            let (v, m) = (*value, *mask);
            if v == 0 {
                let _ = write!(out, " MARK and 0x{:x}", !m);
            } else if v == m {
                let _ = write!(out, " MARK or 0x{v:x}");
            } else if m == 0 {
                let _ = write!(out, " MARK xor 0x{v:x}");
            } else if m == u32::MAX {
                let _ = write!(out, " MARK set 0x{v:x}");
            } else {
                let _ = write!(out, " MARK xset 0x{v:x}/0x{m:x}");
            }
        }
        Target::Connmark(op) => match *op {
            ConnmarkOp::Set { value: v, mask: m } => {
                if v == 0 {
                    let _ = write!(out, " CONNMARK and 0x{:x}", !m);
                } else if v == m {
                    let _ = write!(out, " CONNMARK or 0x{v:x}");
                } else if m == 0 {
                    let _ = write!(out, " CONNMARK xor 0x{v:x}");
                } else if m == u32::MAX {
                    let _ = write!(out, " CONNMARK set 0x{v:x}");
                } else {
                    let _ = write!(out, " CONNMARK xset 0x{v:x}/0x{m:x}");
                }
            }
            ConnmarkOp::Save { nfmask, ctmask } => {
                if nfmask == u32::MAX && ctmask == u32::MAX {
                    out.push_str(" CONNMARK save");
                } else if nfmask == ctmask {
                    let _ = write!(out, " CONNMARK save mask 0x{nfmask:x}");
                } else {
                    let _ = write!(
                        out,
                        " CONNMARK save nfmask 0x{nfmask:x} ctmask ~0x{ctmask:x}"
                    );
                }
            }
            ConnmarkOp::Restore { nfmask, ctmask } => {
                if nfmask == u32::MAX && ctmask == u32::MAX {
                    out.push_str(" CONNMARK restore");
                } else if nfmask == ctmask {
                    let _ = write!(out, " CONNMARK restore mask 0x{ctmask:x}");
                } else {
                    let _ = write!(
                        out,
                        " CONNMARK restore ctmask 0x{ctmask:x} nfmask ~0x{nfmask:x}"
                    );
                }
            }
        },
        Target::Ct { notrack, alias } => {
            if *alias {
                out.push_str(" NOTRACK");
            } else if *notrack {
                out.push_str(" CT notrack");
            } else {
                out.push_str(" CT");
            }
        }
        Target::Log(l) => {
            let _ = write!(out, " LOG flags {} level {}", l.flags, l.level);
            if !l.prefix.is_empty() {
                let _ = write!(out, " prefix \"{}\"", l.prefix);
            }
        }
        _ => {}
    }
}

/// `xtables_print_num`: exact (`-x`) or with K/M/G/T suffixes; `notable` drops the padding.
pub(crate) fn print_num(out: &mut String, n: u64, exact: bool, notable: bool) {
    if exact {
        if notable {
            let _ = write!(out, "{n} ");
        } else {
            let _ = write!(out, "{n:>8} ");
        }
        return;
    }
    if n <= 99_999 {
        if notable {
            let _ = write!(out, "{n} ");
        } else {
            let _ = write!(out, "{n:>5} ");
        }
        return;
    }
    let mut v = n;
    for suffix in ["K", "M", "G"] {
        v = (v + 500) / 1000;
        if v <= 9999 {
            if notable {
                let _ = write!(out, "{v}{suffix} ");
            } else {
                let _ = write!(out, "{v:>4}{suffix} ");
            }
            return;
        }
    }
    v = (v + 500) / 1000;
    if notable {
        let _ = write!(out, "{v}T ");
    } else {
        let _ = write!(out, "{v:>4}T ");
    }
}

/// The column header line of `iptables -L -n -v`.
pub(crate) fn list_header(out: &mut String, exact: bool, line_numbers: bool) {
    if line_numbers {
        let _ = write!(out, "{:<4} ", "num");
    }
    if exact {
        let _ = write!(out, "{:>8} {:>10} ", "pkts", "bytes");
    } else {
        let _ = write!(out, "{:>5} {:>5} ", "pkts", "bytes");
    }
    let _ = write!(out, "{:<9} ", "target");
    out.push_str(" prot ");
    out.push_str("opt");
    let _ = write!(out, " {:<6} ", "in");
    let _ = write!(out, "{:<6} ", "out");
    let _ = write!(out, " {:<19} ", "source");
    let _ = write!(out, " {:<19} ", "destination");
    out.push('\n');
}

/// One rule line of `iptables -L -n -v`.
pub(crate) fn list_rule(
    out: &mut String,
    num: Option<usize>,
    rule: &Rule,
    family: Family,
    c: Counters,
    exact: bool,
) {
    if let Some(n) = num {
        let _ = write!(out, "{n:<4} ");
    }
    print_num(out, c.packets, exact, false);
    print_num(out, c.bytes, exact, false);
    let _ = write!(out, "{:<9} ", rule.target.list_name());
    let ip = &rule.ip;
    out.push(if ip.proto_inv { '!' } else { ' ' });
    let _ = write!(out, "{:<4} ", ip.proto);
    match ip.frag {
        None => out.push_str("-- "),
        Some(false) => out.push_str("-f "),
        Some(true) => out.push_str("!f "),
    }
    let iface = |p: &Option<IfacePattern>, inv: bool| -> String {
        match p {
            Some(p) if !p.is_any() || inv => {
                format!("{}{}", if inv { "!" } else { "" }, p.as_str())
            }
            _ => "*".to_string(),
        }
    };
    let _ = write!(out, " {:<6} ", iface(&ip.iif, ip.iif_inv));
    let _ = write!(out, "{:<6} ", iface(&ip.oif, ip.oif_inv));
    let addr = |n: &Option<IpNet>| {
        n.map(|n| n.list_form())
            .unwrap_or_else(|| family.any_net().into())
    };
    out.push(if ip.src_inv { '!' } else { ' ' });
    let _ = write!(out, "{:<19} ", addr(&ip.src));
    out.push(if ip.dst_inv { '!' } else { ' ' });
    let _ = write!(out, "{:<19} ", addr(&ip.dst));
    if matches!(rule.target, Target::Goto(_)) {
        out.push_str("[goto] ");
    }
    for m in &rule.matches {
        list_match(out, m);
    }
    list_target(out, &rule.target);
    out.push('\n');
}

/// The match part of a rule in listing form, for traces (`udp dpt:53 ctstate NEW`).
pub fn matches_summary(rule: &Rule) -> String {
    let mut s = String::new();
    for m in &rule.matches {
        list_match(&mut s, m);
    }
    s.trim_start().to_string()
}
