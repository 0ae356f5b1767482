//! Parsing one iptables command line into a [`Command`].
//!
//! The words of a line are split exactly as iptables-restore splits them
//! (`add_param_to_argv` in iptables' `xshared.c`: double quotes group, a backslash escapes the
//! next character inside quotes, a closing quote ends the word). Options are then resolved the
//! way iptables' `getopt_long` table is built: core options first, then the options of each
//! loaded match in load order, then the target's; an exact name wins, otherwise a unique
//! prefix (`--to-dest`, `--dp`). A `-p tcp` followed by an option no loaded match knows loads
//! the protocol's match implicitly, at that position (`load_proto`), which is why
//! `-p tcp -m comment --comment x --dport 80` saves as `-m comment … -m tcp --dport 80`.

use std::borrow::Cow;
use std::net::Ipv4Addr;

use crate::error::{RuleError, RuleErrorKind};
use crate::rule::*;
use crate::types::*;

/// One word of a line and where it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token<'a> {
    pub text: Cow<'a, str>,
    pub start: usize,
    pub end: usize,
}

impl Token<'_> {
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }
}

/// Splits a line into words like iptables-restore (`add_param_to_argv`). Words without
/// escapes borrow from the line.
#[cfg(test)]
pub(crate) fn tokenize(line: &str) -> Result<Vec<Token<'_>>, String> {
    let mut out = Vec::new();
    tokenize_into(line, &mut out)?;
    Ok(out)
}

/// [`tokenize`] into a reused buffer (cleared first).
pub(crate) fn tokenize_into<'a>(line: &'a str, out: &mut Vec<Token<'a>>) -> Result<(), String> {
    out.clear();
    let bytes = line.as_bytes();
    let mut i = 0;
    let n = bytes.len();
    while i < n {
        let c = bytes[i];
        if c == b' ' || c == b'\t' || c == b'\n' {
            i += 1;
            continue;
        }
        let start = i;
        // Fast path: a word of plain characters.
        let mut j = i;
        while j < n && !matches!(bytes[j], b' ' | b'\t' | b'\n' | b'"') {
            j += 1;
        }
        if j == n || bytes[j] != b'"' {
            if j - start >= 1023 {
                return Err("parameter too long (iptables allows 1023 bytes per word)".into());
            }
            out.push(Token {
                text: Cow::Borrowed(&line[start..j]),
                start,
                end: j,
            });
            i = j;
            continue;
        }
        // A word with a quote: the plain prefix, then the quoted part up to the closing
        // quote, which ends the word (even an empty one).
        let mut param: Vec<u8> = bytes[start..j].to_vec();
        let mut k = j + 1;
        let mut escaped = false;
        let mut closed = false;
        let mut plain = true;
        while k < n {
            let c = bytes[k];
            k += 1;
            if escaped {
                param.push(c);
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
                plain = false;
            } else if c == b'"' {
                closed = true;
                break;
            } else {
                param.push(c);
            }
            if param.len() >= 1023 {
                return Err("parameter too long (iptables allows 1023 bytes per word)".into());
            }
        }
        if !closed && param.is_empty() {
            // An unterminated empty quote adds no word.
            break;
        }
        let text = if plain && start == j {
            // "abc" with nothing to unescape: borrow the inside.
            let inner_end = if k > j + 1 && bytes[k - 1] == b'"' {
                k - 1
            } else {
                k
            };
            Cow::Borrowed(&line[j + 1..inner_end])
        } else {
            Cow::Owned(String::from_utf8_lossy(&param).into_owned())
        };
        out.push(Token {
            text,
            start,
            end: k,
        });
        i = k;
    }
    Ok(())
}

/// A parsed command line.
#[derive(Clone, Debug)]
pub(crate) enum Command {
    /// `-A CHAIN rule` (several rules when `-s`/`-d` list several addresses).
    Append { chain: String, rules: Vec<Rule> },
    /// `-I CHAIN [num] rule`.
    Insert {
        chain: String,
        num: u32,
        rules: Vec<Rule>,
    },
    /// `-D CHAIN num`.
    DeleteNum { chain: String, num: u32 },
    /// `-D CHAIN rule`.
    DeleteSpec { chain: String, rules: Vec<Rule> },
    /// `-N CHAIN`.
    NewChain(String),
    /// `-X [CHAIN]`.
    DeleteChain(Option<String>),
    /// `-F [CHAIN]`.
    Flush(Option<String>),
    /// `-P CHAIN POLICY`.
    Policy { chain: String, policy: Policy },
    /// `-Z [CHAIN]`.
    Zero(Option<String>),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Core {
    Append,
    Delete,
    Insert,
    Replace,
    Check,
    List,
    ListRules,
    Flush,
    Zero,
    NewChain,
    DeleteChain,
    Policy,
    RenameChain,
    Source,
    Destination,
    Protocol,
    InIface,
    OutIface,
    Jump,
    Goto,
    Match,
    Table,
    Numeric,
    Verbose,
    Exact,
    Fragment,
    Version,
    Help,
    LineNumbers,
    Modprobe,
    SetCounters,
    Ipv4,
    Ipv6,
    Wait,
    WaitInterval,
}

const CORE_LONG: &[(&str, Core, u8)] = &[
    ("append", Core::Append, 1),
    ("delete", Core::Delete, 1),
    ("insert", Core::Insert, 1),
    ("replace", Core::Replace, 1),
    ("check", Core::Check, 1),
    ("list", Core::List, 0),
    ("list-rules", Core::ListRules, 0),
    ("flush", Core::Flush, 0),
    ("zero", Core::Zero, 0),
    ("new-chain", Core::NewChain, 1),
    ("delete-chain", Core::DeleteChain, 0),
    ("policy", Core::Policy, 1),
    ("rename-chain", Core::RenameChain, 1),
    ("source", Core::Source, 1),
    ("src", Core::Source, 1),
    ("destination", Core::Destination, 1),
    ("dst", Core::Destination, 1),
    ("protocol", Core::Protocol, 1),
    ("in-interface", Core::InIface, 1),
    ("jump", Core::Jump, 1),
    ("table", Core::Table, 1),
    ("match", Core::Match, 1),
    ("numeric", Core::Numeric, 0),
    ("out-interface", Core::OutIface, 1),
    ("verbose", Core::Verbose, 0),
    ("exact", Core::Exact, 0),
    ("fragments", Core::Fragment, 0),
    ("version", Core::Version, 0),
    ("help", Core::Help, 0),
    ("line-numbers", Core::LineNumbers, 0),
    ("modprobe", Core::Modprobe, 1),
    ("set-counters", Core::SetCounters, 1),
    ("goto", Core::Goto, 1),
    ("ipv4", Core::Ipv4, 0),
    ("ipv6", Core::Ipv6, 0),
    ("wait", Core::Wait, 0),
    ("wait-interval", Core::WaitInterval, 1),
];

fn core_short(c: char) -> Option<(Core, u8)> {
    Some(match c {
        'A' => (Core::Append, 1),
        'D' => (Core::Delete, 1),
        'I' => (Core::Insert, 1),
        'R' => (Core::Replace, 1),
        'C' => (Core::Check, 1),
        'L' => (Core::List, 0),
        'S' => (Core::ListRules, 0),
        'F' => (Core::Flush, 0),
        'Z' => (Core::Zero, 0),
        'N' => (Core::NewChain, 1),
        'X' => (Core::DeleteChain, 0),
        'P' => (Core::Policy, 1),
        'E' => (Core::RenameChain, 1),
        's' => (Core::Source, 1),
        'd' => (Core::Destination, 1),
        'p' => (Core::Protocol, 1),
        'i' => (Core::InIface, 1),
        'o' => (Core::OutIface, 1),
        'j' => (Core::Jump, 1),
        'g' => (Core::Goto, 1),
        'm' => (Core::Match, 1),
        't' => (Core::Table, 1),
        'n' => (Core::Numeric, 0),
        'v' => (Core::Verbose, 0),
        'x' => (Core::Exact, 0),
        'f' => (Core::Fragment, 0),
        'V' => (Core::Version, 0),
        'h' => (Core::Help, 0),
        'c' => (Core::SetCounters, 1),
        '4' => (Core::Ipv4, 0),
        '6' => (Core::Ipv6, 0),
        'w' => (Core::Wait, 0),
        'W' => (Core::WaitInterval, 1),
        _ => return None,
    })
}

/// An extension option: name, id within the extension, number of arguments, invertible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OptDef {
    name: &'static str,
    id: u8,
    args: u8,
    inv: bool,
}

const fn o(name: &'static str, id: u8, args: u8, inv: bool) -> OptDef {
    OptDef {
        name,
        id,
        args,
        inv,
    }
}

const TCP_OPTS: &[OptDef] = &[
    o("source-port", 0, 1, true),
    o("sport", 0, 1, true),
    o("destination-port", 1, 1, true),
    o("dport", 1, 1, true),
    o("syn", 2, 0, true),
    o("tcp-flags", 3, 2, true),
    o("tcp-option", 4, 1, true),
];
const SCTP_OPTS: &[OptDef] = &[
    o("source-port", 0, 1, true),
    o("sport", 0, 1, true),
    o("destination-port", 1, 1, true),
    o("dport", 1, 1, true),
    o("chunk-types", 5, 2, true),
];
const ICMP_OPTS: &[OptDef] = &[o("icmp-type", 0, 1, true)];
const MULTIPORT_OPTS: &[OptDef] = &[
    o("source-ports", 0, 1, true),
    o("sports", 0, 1, true),
    o("destination-ports", 1, 1, true),
    o("dports", 1, 1, true),
    o("ports", 2, 1, true),
];
const STATISTIC_OPTS: &[OptDef] = &[
    o("mode", 0, 1, false),
    o("probability", 1, 1, true),
    o("every", 2, 1, true),
    o("packet", 3, 1, false),
];
const MARK_OPTS: &[OptDef] = &[o("mark", 0, 1, true)];
const CONNTRACK_OPTS: &[OptDef] = &[
    o("ctstate", 0, 1, true),
    o("ctproto", 1, 1, true),
    o("ctorigsrc", 2, 1, true),
    o("ctorigdst", 3, 1, true),
    o("ctreplsrc", 4, 1, true),
    o("ctrepldst", 5, 1, true),
    o("ctorigsrcport", 6, 1, true),
    o("ctorigdstport", 7, 1, true),
    o("ctreplsrcport", 8, 1, true),
    o("ctrepldstport", 9, 1, true),
    o("ctstatus", 10, 1, true),
    o("ctexpire", 11, 1, true),
    o("ctdir", 12, 1, false),
];
const STATE_OPTS: &[OptDef] = &[o("state", 0, 1, true)];
const ADDRTYPE_OPTS: &[OptDef] = &[
    o("src-type", 0, 1, true),
    o("dst-type", 1, 1, true),
    o("limit-iface-in", 2, 0, false),
    o("limit-iface-out", 3, 0, false),
];
const COMMENT_OPTS: &[OptDef] = &[o("comment", 0, 1, false)];
const RECENT_OPTS: &[OptDef] = &[
    o("set", 0, 0, true),
    o("rcheck", 1, 0, true),
    o("update", 2, 0, true),
    o("remove", 3, 0, true),
    o("seconds", 4, 1, false),
    o("reap", 5, 0, false),
    o("hitcount", 6, 1, false),
    o("rttl", 7, 0, false),
    o("name", 8, 1, false),
    o("rsource", 9, 0, false),
    o("rdest", 10, 0, false),
    o("mask", 11, 1, false),
];
const NFACCT_OPTS: &[OptDef] = &[o("nfacct-name", 0, 1, false)];
const NO_OPTS: &[OptDef] = &[];
const REJECT_TARGET_OPTS: &[OptDef] = &[o("reject-with", 0, 1, false)];
const DNAT_TARGET_OPTS: &[OptDef] = &[
    o("to-destination", 0, 1, false),
    o("random", 1, 0, false),
    o("persistent", 2, 0, false),
];
const SNAT_TARGET_OPTS: &[OptDef] = &[
    o("to-source", 0, 1, false),
    o("random", 1, 0, false),
    o("random-fully", 3, 0, false),
    o("persistent", 2, 0, false),
];
const MASQUERADE_TARGET_OPTS: &[OptDef] = &[
    o("to-ports", 0, 1, false),
    o("random", 1, 0, false),
    o("random-fully", 3, 0, false),
];
const REDIRECT_TARGET_OPTS: &[OptDef] = &[o("to-ports", 0, 1, false), o("random", 1, 0, false)];
const MARK_TARGET_OPTS: &[OptDef] = &[
    o("set-xmark", 0, 1, false),
    o("set-mark", 1, 1, false),
    o("and-mark", 2, 1, false),
    o("or-mark", 3, 1, false),
    o("xor-mark", 4, 1, false),
];
const CONNMARK_TARGET_OPTS: &[OptDef] = &[
    o("set-xmark", 0, 1, false),
    o("save-mark", 1, 0, false),
    o("restore-mark", 2, 0, false),
    o("and-mark", 3, 1, false),
    o("or-mark", 4, 1, false),
    o("xor-mark", 5, 1, false),
    o("set-mark", 6, 1, false),
    o("mask", 7, 1, false),
    o("nfmask", 8, 1, false),
    o("ctmask", 9, 1, false),
];
const CT_TARGET_OPTS: &[OptDef] = &[
    o("notrack", 0, 0, false),
    o("helper", 1, 1, false),
    o("ctevents", 2, 1, false),
    o("expevents", 3, 1, false),
    o("zone", 4, 1, false),
    o("zone-orig", 5, 1, false),
    o("zone-reply", 6, 1, false),
    o("timeout", 7, 1, false),
];
const LOG_TARGET_OPTS: &[OptDef] = &[
    o("log-level", 0, 1, false),
    o("log-prefix", 1, 1, false),
    o("log-tcp-sequence", 2, 0, false),
    o("log-tcp-options", 3, 0, false),
    o("log-ip-options", 4, 0, false),
    o("log-uid", 5, 0, false),
    o("log-macdecode", 6, 0, false),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum MKind {
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Multiport,
    Statistic,
    Mark,
    Conntrack,
    State,
    Addrtype,
    Comment,
    Recent,
    Nfacct,
}

impl MKind {
    fn from_name(s: &str) -> Option<MKind> {
        Some(match s {
            "tcp" => MKind::Tcp,
            "udp" => MKind::Udp,
            "sctp" => MKind::Sctp,
            "icmp" => MKind::Icmp,
            "multiport" => MKind::Multiport,
            "statistic" => MKind::Statistic,
            "mark" => MKind::Mark,
            "conntrack" => MKind::Conntrack,
            "state" => MKind::State,
            "addrtype" => MKind::Addrtype,
            "comment" => MKind::Comment,
            "recent" => MKind::Recent,
            "nfacct" => MKind::Nfacct,
            _ => return None,
        })
    }

    fn opts(self) -> &'static [OptDef] {
        const PORTS: &[OptDef] = &[
            o("source-port", 0, 1, true),
            o("sport", 0, 1, true),
            o("destination-port", 1, 1, true),
            o("dport", 1, 1, true),
        ];
        match self {
            MKind::Tcp => TCP_OPTS,
            MKind::Udp => PORTS,
            MKind::Sctp => SCTP_OPTS,
            MKind::Icmp => ICMP_OPTS,
            MKind::Multiport => MULTIPORT_OPTS,
            MKind::Statistic => STATISTIC_OPTS,
            MKind::Mark => MARK_OPTS,
            MKind::Conntrack => CONNTRACK_OPTS,
            MKind::State => STATE_OPTS,
            MKind::Addrtype => ADDRTYPE_OPTS,
            MKind::Comment => COMMENT_OPTS,
            MKind::Recent => RECENT_OPTS,
            MKind::Nfacct => NFACCT_OPTS,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TKind {
    Accept,
    Drop,
    Return,
    Reject,
    Dnat,
    Snat,
    Masquerade,
    Redirect,
    Mark,
    Connmark,
    Ct,
    Notrack,
    Log,
    Trace,
}

impl TKind {
    fn from_name(s: &str) -> Option<TKind> {
        Some(match s {
            "ACCEPT" => TKind::Accept,
            "DROP" => TKind::Drop,
            "RETURN" => TKind::Return,
            "REJECT" => TKind::Reject,
            "DNAT" => TKind::Dnat,
            "SNAT" => TKind::Snat,
            "MASQUERADE" => TKind::Masquerade,
            "REDIRECT" => TKind::Redirect,
            "MARK" => TKind::Mark,
            "CONNMARK" => TKind::Connmark,
            "CT" => TKind::Ct,
            "NOTRACK" => TKind::Notrack,
            "LOG" => TKind::Log,
            "TRACE" => TKind::Trace,
            _ => return None,
        })
    }

    fn opts(self) -> &'static [OptDef] {
        match self {
            TKind::Accept | TKind::Drop | TKind::Return | TKind::Notrack | TKind::Trace => NO_OPTS,
            TKind::Reject => REJECT_TARGET_OPTS,
            TKind::Dnat => DNAT_TARGET_OPTS,
            TKind::Snat => SNAT_TARGET_OPTS,
            TKind::Masquerade => MASQUERADE_TARGET_OPTS,
            TKind::Redirect => REDIRECT_TARGET_OPTS,
            TKind::Mark => MARK_TARGET_OPTS,
            TKind::Connmark => CONNMARK_TARGET_OPTS,
            TKind::Ct => CT_TARGET_OPTS,
            TKind::Log => LOG_TARGET_OPTS,
        }
    }
}

/// iptables targets nfsim knows by name but does not model: refused rather than taken for a
/// chain name.
const UNSUPPORTED_TARGETS: &[&str] = &[
    "QUEUE",
    "NFQUEUE",
    "NFLOG",
    "ULOG",
    "TPROXY",
    "TEE",
    "SET",
    "CLASSIFY",
    "DSCP",
    "TOS",
    "TTL",
    "ECN",
    "TCPMSS",
    "CHECKSUM",
    "SECMARK",
    "CONNSECMARK",
    "AUDIT",
    "NETMAP",
    "SYNPROXY",
    "HMARK",
    "IDLETIMER",
    "LED",
    "RATEEST",
    "TCPOPTSTRIP",
    "CLUSTERIP",
    "HL",
    "DNPT",
    "SNPT",
];

/// An option name printed as `--name`, built only when an error needs it.
#[derive(Clone, Copy)]
struct OptName(&'static str);

impl std::fmt::Display for OptName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "--{}", self.0)
    }
}

fn bad(option: impl std::fmt::Display, value: &str, expected: impl Into<String>) -> RuleErrorKind {
    RuleErrorKind::BadValue {
        option: option.to_string(),
        value: value.to_string(),
        expected: expected.into(),
    }
}

fn invalid(msg: impl Into<String>) -> RuleErrorKind {
    RuleErrorKind::Invalid(msg.into())
}

/// The largest `--hitcount` the kernel's `xt_recent` accepts (XT_RECENT_MAX_NSTAMPS − 1,
/// checked on Linux 6.18).
pub const RECENT_MAX_HITCOUNT: u32 = 65535;

fn parse_u32(option: impl std::fmt::Display + Copy, s: &str) -> Result<u32, RuleErrorKind> {
    parse_c_uint(s)
        .and_then(|v| u32::try_from(v).ok())
        .ok_or_else(|| {
            bad(
                option,
                s,
                "an unsigned 32-bit integer (decimal, 0x hex or 0 octal)",
            )
        })
}

/// `value[/mask]` with a default mask of all ones (xtables `XTTYPE_MARKMASK32`).
fn parse_markmask(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<(u32, Option<u32>), RuleErrorKind> {
    let (v, m) = match s.split_once('/') {
        Some((v, m)) => (v, Some(m)),
        None => (s, None),
    };
    let value = parse_u32(option, v)?;
    let mask = m.map(|m| parse_u32(option, m)).transpose()?;
    Ok((value, mask))
}

/// TCP flag names as libxt_tcp takes them (ECE and CWR are not among them; ALL is 0x3f).
fn parse_tcp_flag_list(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<u8, RuleErrorKind> {
    let mut v = 0u8;
    for part in s.split(',') {
        v |= match part.to_ascii_uppercase().as_str() {
            "FIN" => 0x01,
            "SYN" => 0x02,
            "RST" => 0x04,
            "PSH" => 0x08,
            "ACK" => 0x10,
            "URG" => 0x20,
            "ALL" => 0x3f,
            "NONE" => 0,
            _ => {
                return Err(bad(
                    option,
                    part,
                    "a TCP flag: FIN, SYN, RST, PSH, ACK, URG, ALL or NONE",
                ))
            }
        };
    }
    Ok(v)
}

const ICMP_NAMES: &[(&str, u8, u8, u8)] = &[
    ("any", 0xff, 0, 0xff),
    ("echo-reply", 0, 0, 0xff),
    ("destination-unreachable", 3, 0, 0xff),
    ("network-unreachable", 3, 0, 0),
    ("host-unreachable", 3, 1, 1),
    ("protocol-unreachable", 3, 2, 2),
    ("port-unreachable", 3, 3, 3),
    ("fragmentation-needed", 3, 4, 4),
    ("source-route-failed", 3, 5, 5),
    ("network-unknown", 3, 6, 6),
    ("host-unknown", 3, 7, 7),
    ("network-prohibited", 3, 9, 9),
    ("host-prohibited", 3, 10, 10),
    ("TOS-network-unreachable", 3, 11, 11),
    ("TOS-host-unreachable", 3, 12, 12),
    ("communication-prohibited", 3, 13, 13),
    ("host-precedence-violation", 3, 14, 14),
    ("precedence-cutoff", 3, 15, 15),
    ("source-quench", 4, 0, 0xff),
    ("redirect", 5, 0, 0xff),
    ("network-redirect", 5, 0, 0),
    ("host-redirect", 5, 1, 1),
    ("TOS-network-redirect", 5, 2, 2),
    ("TOS-host-redirect", 5, 3, 3),
    ("echo-request", 8, 0, 0xff),
    ("router-advertisement", 9, 0, 0xff),
    ("router-solicitation", 10, 0, 0xff),
    ("time-exceeded", 11, 0, 0xff),
    ("ttl-zero-during-transit", 11, 0, 0),
    ("ttl-zero-during-reassembly", 11, 1, 1),
    ("parameter-problem", 12, 0, 0xff),
    ("ip-header-bad", 12, 0, 0),
    ("required-option-missing", 12, 1, 1),
    ("timestamp-request", 13, 0, 0xff),
    ("timestamp-reply", 14, 0, 0xff),
    ("address-mask-request", 17, 0, 0xff),
    ("address-mask-reply", 18, 0, 0xff),
];

fn parse_icmp_type(s: &str) -> Result<(u8, u8, u8), RuleErrorKind> {
    let lower = s.to_ascii_lowercase();
    if let Some(&(_, t, a, b)) = ICMP_NAMES
        .iter()
        .find(|(n, ..)| n.to_ascii_lowercase() == lower)
    {
        return Ok((t, a, b));
    }
    let prefixed: Vec<_> = ICMP_NAMES
        .iter()
        .filter(|(n, ..)| n.to_ascii_lowercase().starts_with(&lower))
        .collect();
    if prefixed.len() == 1 {
        let &(_, t, a, b) = prefixed[0];
        return Ok((t, a, b));
    }
    let (t, c) = match s.split_once('/') {
        Some((t, c)) => (t, Some(c)),
        None => (s, None),
    };
    let expected = "an ICMP type name (echo-request, port-unreachable, any, …) or TYPE[/CODE]";
    let t: u8 = t.parse().map_err(|_| bad("--icmp-type", s, expected))?;
    match c {
        Some(c) => {
            let c: u8 = c.parse().map_err(|_| bad("--icmp-type", s, expected))?;
            Ok((t, c, c))
        }
        None => Ok((t, 0, 0xff)),
    }
}

fn parse_state_list(
    option: impl std::fmt::Display + Copy,
    s: &str,
    with_nat: bool,
) -> Result<u16, RuleErrorKind> {
    // libxt_conntrack compares each item with strncasecmp(item, NAME, len(item)), trying the
    // names in this order, so an unambiguous-looking prefix ("E") is accepted.
    let order: &[(&str, u16)] = &[
        ("INVALID", ctstate::INVALID),
        ("NEW", ctstate::NEW),
        ("ESTABLISHED", ctstate::ESTABLISHED),
        ("RELATED", ctstate::RELATED),
        ("UNTRACKED", ctstate::UNTRACKED),
        ("SNAT", ctstate::SNAT),
        ("DNAT", ctstate::DNAT),
    ];
    let names = if with_nat { order } else { &order[..5] };
    let mut mask = 0;
    for item in s.split(',') {
        let up = item.to_ascii_uppercase();
        let found = (!item.is_empty())
            .then(|| names.iter().find(|(n, _)| n.starts_with(&up)))
            .flatten();
        match found {
            Some((_, bit)) => mask |= bit,
            None => {
                return Err(bad(
                    option,
                    s,
                    if with_nat {
                        "a comma-separated list of INVALID, NEW, RELATED, ESTABLISHED, UNTRACKED, SNAT, DNAT"
                    } else {
                        "a comma-separated list of INVALID, NEW, RELATED, ESTABLISHED, UNTRACKED"
                    },
                ))
            }
        }
    }
    Ok(mask)
}

fn parse_status_list(s: &str) -> Result<u32, RuleErrorKind> {
    let order: &[(&str, u32)] = &[
        ("NONE", 0),
        ("EXPECTED", ctstatus::EXPECTED),
        ("SEEN_REPLY", ctstatus::SEEN_REPLY),
        ("ASSURED", ctstatus::ASSURED),
        ("CONFIRMED", ctstatus::CONFIRMED),
    ];
    let mut mask = 0;
    for item in s.split(',') {
        let up = item.to_ascii_uppercase();
        match (!item.is_empty())
            .then(|| order.iter().find(|(n, _)| n.starts_with(&up)))
            .flatten()
        {
            Some((_, bit)) => mask |= bit,
            None => {
                return Err(bad(
                    "--ctstatus",
                    s,
                    "a comma-separated list of NONE, EXPECTED, SEEN_REPLY, ASSURED, CONFIRMED",
                ))
            }
        }
    }
    Ok(mask)
}

fn parse_addrtype_list(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<u16, RuleErrorKind> {
    let mut mask = 0;
    for item in s.split(',') {
        match AddrType::ALL
            .iter()
            .find(|t| t.name().eq_ignore_ascii_case(item))
        {
            Some(t) => mask |= t.bit(),
            None => return Err(bad(option, s, "a comma-separated list of UNSPEC, UNICAST, LOCAL, BROADCAST, ANYCAST, MULTICAST, BLACKHOLE, UNREACHABLE, PROHIBIT, THROW, NAT, XRESOLVE")),
        }
    }
    Ok(mask)
}

/// A conntrack address (`--ctorigdst 10.0.0.0/8`): kept unmasked, as iptables prints it.
fn parse_ct_addr(option: impl std::fmt::Display + Copy, s: &str) -> Result<Ipv4Net, RuleErrorKind> {
    let n = parse_ipv4_net(s).map_err(|e| bad(option, s, e))?;
    if n.prefix_len().is_none() {
        return Err(bad(
            option,
            s,
            "an address with a prefix length (non-contiguous masks are not modelled here)",
        ));
    }
    Ok(n)
}

/// A conntrack port or range `a[:b]` (revision 3 takes ranges; reversed ranges are accepted
/// and never match).
fn parse_ct_ports(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<PortRange, RuleErrorKind> {
    let p = |x: &str| parse_port_decimal(x).map_err(|e| bad(option, s, e));
    match s.split_once(':') {
        None => Ok(PortRange::single(p(s)?)),
        Some((a, b)) => Ok(PortRange {
            min: if a.is_empty() { 0 } else { p(a)? },
            max: if b.is_empty() { u16::MAX } else { p(b)? },
        }),
    }
}

/// `--to-destination`/`--to-source` (libxt_NAT `parse_to`).
fn parse_nat_range(
    option: impl std::fmt::Display + Copy,
    s: &str,
    ports_ok: bool,
) -> Result<NatRange, RuleErrorKind> {
    let mut r = NatRange::default();
    let (ip_part, port_part) = match s.split_once(':') {
        Some((a, b)) => (a, Some(b)),
        None => (s, None),
    };
    if !ip_part.is_empty() {
        let (a, b) = match ip_part.split_once('-') {
            Some((a, b)) => (a, b),
            None => (ip_part, ip_part),
        };
        let pa = parse_ipv4(a).ok_or_else(|| bad(option, s, "ADDR[-ADDR][:PORT[-PORT]]"))?;
        let pb = parse_ipv4(b).ok_or_else(|| bad(option, s, "ADDR[-ADDR][:PORT[-PORT]]"))?;
        r.addrs = Some((pa, pb));
    }
    if let Some(pp) = port_part {
        if !ports_ok {
            return Err(invalid(
                "Need TCP, UDP, SCTP or DCCP with port specification (give -p tcp, udp, sctp or dccp)",
            ));
        }
        if pp.contains(':') {
            return Err(bad(option, s, "a port range written with a dash (80-90)"));
        }
        let (range, base) = match pp.split_once('/') {
            Some((r, b)) => (r, Some(b)),
            None => (pp, None),
        };
        let port = |x: &str| -> Result<u16, RuleErrorKind> {
            x.parse::<u16>()
                .ok()
                .filter(|p| *p > 0)
                .ok_or_else(|| bad(option, s, "ports 1-65535"))
        };
        let (a, b) = match range.split_once('-') {
            Some((a, b)) => (port(a)?, port(b)?),
            None => {
                let a = port(range)?;
                (a, a)
            }
        };
        if b < a {
            return Err(bad(option, s, "a port range with the low port first"));
        }
        r.ports = Some((a, b));
        if let Some(b) = base {
            r.base_port = Some(port(b)?);
        }
    }
    if r.addrs.is_none() && r.ports.is_none() {
        return Err(bad(option, s, "ADDR[-ADDR][:PORT[-PORT]]"));
    }
    Ok(r)
}

fn parse_to_ports(
    option: impl std::fmt::Display + Copy,
    s: &str,
) -> Result<(u16, u16), RuleErrorKind> {
    let port = |x: &str| -> Result<u16, RuleErrorKind> {
        parse_c_uint(x)
            .and_then(|v| u16::try_from(v).ok())
            .ok_or_else(|| bad(option, s, "PORT[-PORT] with ports 0-65535"))
    };
    let (a, b) = match s.split_once('-') {
        Some((a, b)) => (port(a)?, port(b)?),
        None => {
            let a = port(s)?;
            (a, a)
        }
    };
    if b < a {
        return Err(bad(option, s, "a port range with the low port first"));
    }
    Ok((a, b))
}

fn parse_log_level(s: &str) -> Result<u8, RuleErrorKind> {
    if let Some(v) = parse_c_uint(s) {
        if v <= 7 {
            return Ok(v as u8);
        }
    }
    Ok(match s {
        "emerg" | "panic" => 0,
        "alert" => 1,
        "crit" => 2,
        "err" | "error" => 3,
        "warn" | "warning" => 4,
        "notice" => 5,
        "info" => 6,
        "debug" => 7,
        _ => {
            return Err(bad(
                "--log-level",
                s,
                "0-7 or emerg, alert, crit, error, warning, notice, info, debug",
            ))
        }
    })
}

fn truncate_bytes(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    s[..end].to_string()
}

/// A match being built from its options.
#[derive(Clone, Debug)]
struct MatchBuilder {
    kind: MKind,
    /// Options of this instance seen so far (bit per option id).
    seen: u32,
    /// A later `-m` of the same name completes this instance (`xtables_find_match`).
    completed: bool,
    tcp: TcpMatch,
    icmp: Option<(u8, u8, u8, bool)>,
    multiport: Option<MultiportMatch>,
    stat_mode: Option<u8>,
    stat_prob: Option<u32>,
    stat_every: Option<u32>,
    stat_packet: Option<u32>,
    stat_inv: bool,
    mark: Option<MarkMatch>,
    ct: Option<Box<ConntrackMatch>>,
    addrtype: AddrtypeMatch,
    comment: Option<String>,
    recent: Option<Box<RecentMatch>>,
    recent_cmd: Option<RecentCommand>,
    nfacct: Option<String>,
}

impl MatchBuilder {
    fn new(kind: MKind) -> MatchBuilder {
        MatchBuilder {
            kind,
            seen: 0,
            completed: false,
            tcp: TcpMatch {
                sport: PortRange::ALL,
                sport_inv: false,
                dport: PortRange::ALL,
                dport_inv: false,
                flags: None,
            },
            icmp: None,
            multiport: None,
            stat_mode: None,
            stat_prob: None,
            stat_every: None,
            stat_packet: None,
            stat_inv: false,
            mark: None,
            ct: None,
            addrtype: AddrtypeMatch {
                src: None,
                dst: None,
                limit: None,
            },
            comment: None,
            recent: None,
            recent_cmd: None,
            nfacct: None,
        }
    }

    fn ct_mut(&mut self) -> &mut ConntrackMatch {
        let alias = self.kind == MKind::State;
        self.ct.get_or_insert_with(|| {
            Box::new(ConntrackMatch {
                state_alias: alias,
                ..ConntrackMatch::default()
            })
        })
    }

    fn recent_mut(&mut self) -> &mut RecentMatch {
        self.recent.get_or_insert_with(|| {
            Box::new(RecentMatch {
                name: String::new(),
                command: RecentCommand::Check,
                inv: false,
                seconds: 0,
                reap: false,
                hitcount: 0,
                rttl: false,
                rdest: false,
                mask: Ipv4Addr::BROADCAST,
                table: Bind::default(),
            })
        })
    }

    fn apply(
        &mut self,
        def: &OptDef,
        args: &[&str],
        inv: bool,
        ip: &IpMatch,
    ) -> Result<(), RuleErrorKind> {
        let opt = OptName(def.name);
        let a = args.first().copied().unwrap_or("");
        let bit = 1u32 << def.id;
        let repeatable = matches!(self.kind, MKind::Recent if matches!(def.id, 9 | 10));
        if self.seen & bit != 0 && !repeatable {
            return Err(RuleErrorKind::Repeated(opt.to_string()));
        }
        self.seen |= bit;
        match self.kind {
            MKind::Tcp | MKind::Udp | MKind::Sctp => match def.id {
                0 | 1 => {
                    // libxt_tcp and libxt_sctp refuse min > max; libxt_udp takes it (and the
                    // rule then never matches).
                    let r = if self.kind == MKind::Udp {
                        parse_ct_ports(opt, a)?
                    } else {
                        PortRange::parse_colon(
                            a,
                            Some(if self.kind == MKind::Sctp { 132 } else { 6 }),
                        )
                        .map_err(|e| bad(opt, a, e))?
                    };
                    if def.id == 0 {
                        self.tcp.sport = r;
                        self.tcp.sport_inv = inv;
                    } else {
                        self.tcp.dport = r;
                        self.tcp.dport_inv = inv;
                    }
                }
                2 | 3 => {
                    if self.seen & 0b1100 == 0b1100 {
                        return Err(invalid("only one of --syn or --tcp-flags is allowed"));
                    }
                    self.tcp.flags = Some(if def.id == 2 {
                        (0x17, 0x02, inv)
                    } else {
                        let mask = parse_tcp_flag_list(opt, a)?;
                        let comp = parse_tcp_flag_list(opt, args.get(1).copied().unwrap_or(""))?;
                        (mask, comp, inv)
                    });
                }
                4 => return Err(RuleErrorKind::Unsupported("--tcp-option".into())),
                _ => return Err(RuleErrorKind::Unsupported("--chunk-types".into())),
            },
            MKind::Icmp => {
                let (t, c0, c1) = parse_icmp_type(a)?;
                self.icmp = Some((t, c0, c1, inv));
            }
            MKind::Multiport => {
                // libxt_multiport checks the protocol when it parses the ports.
                if ip.proto == 0 {
                    return Err(invalid(
                        "multiport needs `-p tcp', `-p udp', `-p udplite', `-p sctp' or `-p dccp' before its ports",
                    ));
                }
                if ip.proto_inv || !matches!(ip.proto, 6 | 17 | 136 | 132 | 33) {
                    return Err(invalid(
                        "multiport only works with TCP, UDP, UDPLITE, SCTP and DCCP",
                    ));
                }
                if self.multiport.is_some() {
                    return Err(invalid(
                        "multiport: only one of --sports, --dports or --ports may be given",
                    ));
                }
                let mut ports = Vec::new();
                let mut slots = 0;
                for item in a.split(',') {
                    let r = PortRange::parse_colon(item, Some(ip.proto))
                        .map_err(|_| bad(opt, a, "ports or low:high ranges, comma-separated"))?;
                    slots += if item.contains(':') { 2 } else { 1 };
                    ports.push(if item.contains(':') {
                        r
                    } else {
                        PortRange::single(r.min)
                    });
                }
                if slots > 15 {
                    return Err(bad(opt, a, "at most 15 ports (a range counts as two)"));
                }
                let kind = match def.id {
                    0 => MultiportKind::Source,
                    1 => MultiportKind::Destination,
                    _ => MultiportKind::Either,
                };
                self.multiport = Some(MultiportMatch { kind, ports, inv });
            }
            MKind::Statistic => match def.id {
                0 => {
                    self.stat_mode = Some(match a {
                        "random" => 0,
                        "nth" => 1,
                        _ => return Err(bad(opt, a, "random or nth")),
                    })
                }
                1 => {
                    let p: f64 = a
                        .parse()
                        .ok()
                        .filter(|p: &f64| (0.0..=1.0).contains(p))
                        .ok_or_else(|| bad(opt, a, "a probability between 0 and 1"))?;
                    self.stat_prob = Some(quantize_probability(p));
                    self.stat_inv |= inv;
                }
                2 => {
                    let v = parse_u32(opt, a)?;
                    if v == 0 {
                        return Err(bad(opt, a, "an integer 1-4294967295"));
                    }
                    self.stat_every = Some(v);
                    self.stat_inv |= inv;
                }
                _ => self.stat_packet = Some(parse_u32(opt, a)?),
            },
            MKind::Mark => {
                let (value, mask) = parse_markmask(opt, a)?;
                self.mark = Some(MarkMatch {
                    value,
                    mask: mask.unwrap_or(u32::MAX),
                    inv,
                });
            }
            MKind::State => {
                self.ct_mut().state = Some((parse_state_list("--state", a, false)?, inv));
            }
            MKind::Conntrack => match def.id {
                0 => self.ct_mut().state = Some((parse_state_list(opt, a, true)?, inv)),
                1 => {
                    let p = parse_protocol(a).map_err(|e| bad(opt, a, e))?;
                    // libxt_conntrack tests XT_INV_PROTO (0x40) in the conntrack invert flags,
                    // where 0x40 is --ctstatus: `! --ctstatus X --ctproto 0` is refused.
                    if p == 0 && self.ct.as_ref().and_then(|c| c.status).is_some_and(|s| s.1) {
                        return Err(invalid("conntrack: rule would never match protocol"));
                    }
                    self.ct_mut().proto = Some((p, inv));
                }
                2 => self.ct_mut().orig_src = Some((parse_ct_addr(opt, a)?, inv)),
                3 => self.ct_mut().orig_dst = Some((parse_ct_addr(opt, a)?, inv)),
                4 => self.ct_mut().repl_src = Some((parse_ct_addr(opt, a)?, inv)),
                5 => self.ct_mut().repl_dst = Some((parse_ct_addr(opt, a)?, inv)),
                6 => self.ct_mut().orig_src_port = Some((parse_ct_ports(opt, a)?, inv)),
                7 => self.ct_mut().orig_dst_port = Some((parse_ct_ports(opt, a)?, inv)),
                8 => self.ct_mut().repl_src_port = Some((parse_ct_ports(opt, a)?, inv)),
                9 => self.ct_mut().repl_dst_port = Some((parse_ct_ports(opt, a)?, inv)),
                10 => self.ct_mut().status = Some((parse_status_list(a)?, inv)),
                11 => {
                    let (lo, hi) = match a.split_once(':') {
                        Some((lo, hi)) => (parse_u32(opt, lo)?, parse_u32(opt, hi)?),
                        None => {
                            let v = parse_u32(opt, a)?;
                            (v, v)
                        }
                    };
                    self.ct_mut().expires = Some((lo, hi, inv));
                }
                _ => {
                    self.ct_mut().dir = Some(if a.eq_ignore_ascii_case("ORIGINAL") {
                        CtDirection::Original
                    } else if a.eq_ignore_ascii_case("REPLY") {
                        CtDirection::Reply
                    } else {
                        return Err(bad(opt, a, "ORIGINAL or REPLY"));
                    })
                }
            },
            MKind::Addrtype => match def.id {
                0 => self.addrtype.src = Some((parse_addrtype_list(opt, a)?, inv)),
                1 => self.addrtype.dst = Some((parse_addrtype_list(opt, a)?, inv)),
                2 | 3 => {
                    if self.addrtype.limit.is_some() {
                        return Err(invalid(
                            "addrtype: --limit-iface-in cannot be used together with --limit-iface-out",
                        ));
                    }
                    self.addrtype.limit = Some(if def.id == 2 {
                        LimitIface::In
                    } else {
                        LimitIface::Out
                    });
                }
                _ => unreachable!("addrtype option ids are 0-3"),
            },
            MKind::Comment => self.comment = Some(truncate_bytes(a, 255)),
            MKind::Recent => match def.id {
                0..=3 => {
                    if self.recent_cmd.is_some() {
                        return Err(invalid(
                            "recent: only one of --set, --rcheck, --update or --remove may be given",
                        ));
                    }
                    self.recent_cmd = Some(match def.id {
                        0 => RecentCommand::Set,
                        1 => RecentCommand::Check,
                        2 => RecentCommand::Update,
                        _ => RecentCommand::Remove,
                    });
                    self.recent_mut().inv = inv;
                }
                4 => {
                    let v = parse_u32(opt, a)?;
                    if v == 0 {
                        return Err(bad(opt, a, "an integer 1-4294967295"));
                    }
                    self.recent_mut().seconds = v;
                }
                5 => self.recent_mut().reap = true,
                6 => {
                    let v = parse_u32(opt, a)?;
                    if v == 0 {
                        return Err(bad(opt, a, "an integer 1-4294967295"));
                    }
                    self.recent_mut().hitcount = v;
                }
                7 => self.recent_mut().rttl = true,
                8 => {
                    if a.is_empty() || a.len() >= 200 {
                        return Err(bad(opt, a, "a name of 1-199 bytes"));
                    }
                    self.recent_mut().name = a.to_string();
                }
                9 => self.recent_mut().rdest = false,
                10 => self.recent_mut().rdest = true,
                _ => {
                    self.recent_mut().mask =
                        parse_ipv4(a).ok_or_else(|| bad(opt, a, "a dotted netmask"))?;
                }
            },
            MKind::Nfacct => {
                if a.is_empty() || a.len() > 31 {
                    return Err(bad(opt, a, "an nfacct object name of 1-31 bytes"));
                }
                self.nfacct = Some(a.to_string());
            }
        }
        Ok(())
    }

    fn finish(mut self, ip: &IpMatch) -> Result<Match, RuleErrorKind> {
        let proto_is = |p: u8| ip.proto == p && !ip.proto_inv;
        Ok(match self.kind {
            MKind::Tcp | MKind::Udp | MKind::Sctp => {
                let (p, name) = match self.kind {
                    MKind::Tcp => (6, "tcp"),
                    MKind::Udp => (17, "udp"),
                    _ => (132, "sctp"),
                };
                // tcp and udp become native nf_tables expressions, checked only against the
                // -p value; sctp goes through the xt compat layer, whose checkentry refuses
                // an inverted protocol.
                let ok = if self.kind == MKind::Sctp {
                    proto_is(p)
                } else {
                    ip.proto == p
                };
                if !ok {
                    return Err(invalid(format!(
                        "{} match requires '-p {name}'",
                        name.to_ascii_uppercase()
                    )));
                }
                let mut t = self.tcp;
                if self.kind != MKind::Sctp {
                    // iptables-nft turns `! --dport 0:N` into the native `dport > N`, which
                    // reads back (and prints) as `--dport N+1:65535`.
                    for (r, inv) in [
                        (&mut t.sport, &mut t.sport_inv),
                        (&mut t.dport, &mut t.dport_inv),
                    ] {
                        if *inv && r.min == 0 && r.max != 0 {
                            *r = if r.max == u16::MAX {
                                PortRange::ALL
                            } else {
                                PortRange {
                                    min: r.max + 1,
                                    max: u16::MAX,
                                }
                            };
                            *inv = false;
                        }
                    }
                }
                match self.kind {
                    MKind::Tcp => Match::Tcp(t),
                    MKind::Udp => Match::Udp(PortsMatch {
                        sport: t.sport,
                        sport_inv: t.sport_inv,
                        dport: t.dport,
                        dport_inv: t.dport_inv,
                    }),
                    _ => Match::Sctp(PortsMatch {
                        sport: t.sport,
                        sport_inv: t.sport_inv,
                        dport: t.dport,
                        dport_inv: t.dport_inv,
                    }),
                }
            }
            MKind::Icmp => {
                if !proto_is(1) {
                    return Err(invalid("ICMP match requires '-p icmp'"));
                }
                let (t, a, b, inv) = self
                    .icmp
                    .ok_or_else(|| invalid("icmp: option \"--icmp-type\" must be specified"))?;
                Match::Icmp(IcmpMatch {
                    icmp_type: t,
                    code_min: a,
                    code_max: b,
                    inv,
                })
            }
            MKind::Multiport => Match::Multiport(self.multiport.ok_or_else(|| {
                invalid("multiport: one of --sports, --dports or --ports is required")
            })?),
            MKind::Statistic => {
                let mode = match self.stat_mode {
                    None => return Err(invalid("statistic: option \"--mode\" must be specified")),
                    Some(0) => {
                        if self.stat_every.is_some() || self.stat_packet.is_some() {
                            return Err(invalid(
                                "statistic: --every and --packet can only be used in nth mode",
                            ));
                        }
                        StatisticMode::Random {
                            probability: self.stat_prob.ok_or_else(|| {
                                invalid("--probability must be specified when using random mode")
                            })?,
                        }
                    }
                    Some(_) => {
                        if self.stat_prob.is_some() {
                            return Err(invalid(
                                "statistic: --probability can only be used in random mode",
                            ));
                        }
                        let (every, packet) = match (self.stat_every, self.stat_packet) {
                            (Some(e), Some(p)) => (e, p),
                            (None, _) => {
                                return Err(invalid(
                                    "statistic: --every must be specified when using nth mode",
                                ))
                            }
                            (Some(_), None) => {
                                return Err(invalid(
                                    "statistic: option \"--every\" also requires \"--packet\"",
                                ))
                            }
                        };
                        if packet >= every {
                            return Err(invalid("the --packet p must be 0 <= p <= n-1"));
                        }
                        StatisticMode::Nth { every, packet }
                    }
                };
                Match::Statistic(StatisticMatch {
                    mode,
                    inv: self.stat_inv,
                    slot: Bind::default(),
                })
            }
            MKind::Mark => Match::Mark(
                self.mark
                    .ok_or_else(|| invalid("mark: option \"--mark\" must be specified"))?,
            ),
            MKind::State => {
                let ct = self.ct.unwrap_or_default();
                if ct.state.is_none() {
                    return Err(invalid("state: option \"--state\" must be specified"));
                }
                Match::Conntrack(ct)
            }
            MKind::Conntrack => {
                if self.seen == 0 {
                    return Err(invalid("conntrack: At least one option is required"));
                }
                Match::Conntrack(self.ct.unwrap_or_default())
            }
            MKind::Addrtype => {
                if self.addrtype.src.is_none() && self.addrtype.dst.is_none() {
                    return Err(invalid(
                        "addrtype: you must specify --src-type or --dst-type",
                    ));
                }
                Match::Addrtype(self.addrtype)
            }
            MKind::Comment => Match::Comment(
                self.comment
                    .ok_or_else(|| invalid("comment: option \"--comment\" must be specified"))?,
            ),
            MKind::Recent => {
                let mut r = match self.recent.take() {
                    Some(r) => r,
                    None => {
                        self.recent_mut();
                        self.recent
                            .take()
                            .unwrap_or_else(|| unreachable!("just created"))
                    }
                };
                if r.name.is_empty() {
                    r.name = "DEFAULT".into();
                }
                r.command = self.recent_cmd.ok_or_else(|| {
                    invalid(
                        "recent: you must specify one of `--set', `--rcheck' `--update' or `--remove'",
                    )
                })?;
                if matches!(r.command, RecentCommand::Set | RecentCommand::Remove)
                    && (r.seconds != 0 || r.hitcount != 0 || r.rttl || r.reap)
                {
                    return Err(invalid(
                        "recent: --seconds, --hitcount, --rttl and --reap cannot be used with --set or --remove",
                    ));
                }
                if r.reap && r.seconds == 0 {
                    return Err(invalid(
                        "recent: option \"--reap\" also requires \"--seconds\"",
                    ));
                }
                // recent_mt_check refuses hit_count >= XT_RECENT_MAX_NSTAMPS with EINVAL
                // ("hitcount (N) is larger than allowed maximum (65535)" on Linux 6.18, where
                // the stamp index is 32 bits; kernels with 8-bit indexes stopped at 255).
                if r.hitcount > RECENT_MAX_HITCOUNT {
                    return Err(invalid(format!(
                        "recent: hitcount ({}) is larger than allowed maximum ({RECENT_MAX_HITCOUNT}): the kernel refuses the rule (xt_recent)",
                        r.hitcount
                    )));
                }
                Match::Recent(r)
            }
            MKind::Nfacct => Match::Nfacct(NfacctMatch {
                name: self
                    .nfacct
                    .ok_or_else(|| invalid("nfacct: option \"--nfacct-name\" must be specified"))?,
                obj: Bind::default(),
            }),
        })
    }
}

/// A target being built from its options.
#[derive(Clone, Debug)]
struct TargetBuilder {
    kind: TKind,
    seen: u32,
    reject: RejectWith,
    nat: NatRange,
    nat_to_given: bool,
    portnat: PortNat,
    mark: Option<(u32, u32)>,
    connmark_mode: Option<u8>,
    ctmark: u32,
    ctmask: u32,
    nfmask: u32,
    notrack: bool,
    log: LogOptions,
}

impl TargetBuilder {
    fn new(kind: TKind) -> TargetBuilder {
        TargetBuilder {
            kind,
            seen: 0,
            reject: RejectWith::IcmpPortUnreachable,
            nat: NatRange::default(),
            nat_to_given: false,
            portnat: PortNat::default(),
            mark: None,
            connmark_mode: None,
            ctmark: 0,
            ctmask: u32::MAX,
            nfmask: u32::MAX,
            notrack: false,
            log: LogOptions {
                prefix: String::new(),
                level: 4,
                flags: 0,
            },
        }
    }

    fn apply(&mut self, def: &OptDef, args: &[&str], ports_ok: bool) -> Result<(), RuleErrorKind> {
        let opt = OptName(def.name);
        let a = args.first().copied().unwrap_or("");
        let bit = 1u32 << def.id;
        if self.seen & bit != 0 {
            return Err(RuleErrorKind::Repeated(opt.to_string()));
        }
        self.seen |= bit;
        match self.kind {
            TKind::Reject => {
                self.reject = RejectWith::parse(a).ok_or_else(|| {
                    bad(opt, a, "icmp-net-unreachable, icmp-host-unreachable, icmp-port-unreachable, icmp-proto-unreachable, icmp-net-prohibited, icmp-host-prohibited, icmp-admin-prohibited or tcp-reset")
                })?;
            }
            TKind::Dnat | TKind::Snat => match def.id {
                0 => {
                    let r = parse_nat_range(opt, a, ports_ok)?;
                    self.nat.addrs = r.addrs;
                    self.nat.ports = r.ports;
                    self.nat.base_port = r.base_port;
                    self.nat_to_given = true;
                }
                1 => self.nat.random = true,
                2 => self.nat.persistent = true,
                _ => self.nat.random_fully = true,
            },
            TKind::Masquerade | TKind::Redirect => match def.id {
                0 => {
                    if !ports_ok {
                        return Err(invalid(
                            "Need TCP, UDP, SCTP or DCCP with port specification (give -p tcp, udp, sctp or dccp)",
                        ));
                    }
                    self.portnat.ports = Some(parse_to_ports(opt, a)?);
                }
                1 => self.portnat.random = true,
                _ => self.portnat.random_fully = true,
            },
            TKind::Mark => {
                if self.mark.is_some() {
                    return Err(invalid(
                        "MARK: only one of --set-xmark, --set-mark, --and-mark, --or-mark, --xor-mark",
                    ));
                }
                self.mark = Some(match def.id {
                    0 => {
                        let (v, m) = parse_markmask(opt, a)?;
                        (v, m.unwrap_or(u32::MAX))
                    }
                    1 => {
                        let (v, m) = parse_markmask(opt, a)?;
                        (v, v | m.unwrap_or(u32::MAX))
                    }
                    2 => (0, !parse_u32(opt, a)?),
                    3 => {
                        let b = parse_u32(opt, a)?;
                        (b, b)
                    }
                    _ => (parse_u32(opt, a)?, 0),
                });
            }
            TKind::Connmark => {
                if def.id <= 6 {
                    if self.connmark_mode.is_some() {
                        return Err(invalid(
                            "CONNMARK: only one of --set-xmark, --save-mark, --restore-mark, --and-mark, --or-mark, --xor-mark, --set-mark",
                        ));
                    }
                    self.connmark_mode = Some(match def.id {
                        1 => 1,
                        2 => 2,
                        _ => 0,
                    });
                }
                match def.id {
                    0 => {
                        let (v, m) = parse_markmask(opt, a)?;
                        self.ctmark = v;
                        self.ctmask = m.unwrap_or(u32::MAX);
                    }
                    3 => {
                        self.ctmark = 0;
                        self.ctmask = !parse_u32(opt, a)?;
                    }
                    4 => {
                        let b = parse_u32(opt, a)?;
                        self.ctmark = b;
                        self.ctmask = b;
                    }
                    5 => {
                        self.ctmark = parse_u32(opt, a)?;
                        self.ctmask = 0;
                    }
                    6 => {
                        let (v, m) = parse_markmask(opt, a)?;
                        self.ctmark = v;
                        self.ctmask = v | m.unwrap_or(u32::MAX);
                    }
                    7 => {
                        let m = parse_u32(opt, a)?;
                        self.nfmask = m;
                        self.ctmask = m;
                    }
                    8 => self.nfmask = parse_u32(opt, a)?,
                    9 => self.ctmask = parse_u32(opt, a)?,
                    _ => {}
                }
            }
            TKind::Ct => match def.id {
                0 => self.notrack = true,
                _ => return Err(RuleErrorKind::Unsupported(format!("CT {opt}"))),
            },
            TKind::Log => match def.id {
                0 => self.log.level = parse_log_level(a)?,
                1 => {
                    if a.is_empty() {
                        return Err(bad(opt, a, "a non-empty prefix"));
                    }
                    if a.contains('\n') {
                        return Err(bad(opt, a, "a prefix without newlines"));
                    }
                    self.log.prefix = truncate_bytes(a, 29);
                }
                2 => self.log.flags |= 0x01,
                3 => self.log.flags |= 0x02,
                4 => self.log.flags |= 0x04,
                5 => self.log.flags |= 0x08,
                _ => self.log.flags |= 0x20,
            },
            _ => {}
        }
        Ok(())
    }

    fn finish(self, ip: &IpMatch, table: Table) -> Result<Target, RuleErrorKind> {
        let need_table = |t: Table, name: &str| -> Result<(), RuleErrorKind> {
            if table == t {
                Ok(())
            } else {
                Err(invalid(format!(
                    "{name} is only valid in the {} table, not {table}",
                    t.name()
                )))
            }
        };
        Ok(match self.kind {
            TKind::Accept => Target::Accept,
            TKind::Drop => {
                if table == Table::Nat {
                    return Err(invalid("The \"nat\" table is not intended for filtering, the use of DROP is therefore inhibited."));
                }
                Target::Drop
            }
            TKind::Return => Target::Return,
            TKind::Reject => {
                need_table(Table::Filter, "REJECT")?;
                if self.reject == RejectWith::TcpReset && (ip.proto != 6 || ip.proto_inv) {
                    return Err(invalid("REJECT --reject-with tcp-reset needs -p tcp"));
                }
                Target::Reject(self.reject)
            }
            TKind::Dnat | TKind::Snat => {
                let (name, opt) = if self.kind == TKind::Dnat {
                    ("DNAT", "--to-destination")
                } else {
                    ("SNAT", "--to-source")
                };
                need_table(Table::Nat, name)?;
                if !self.nat_to_given {
                    return Err(invalid(format!(
                        "{name}: option \"{opt}\" must be specified"
                    )));
                }
                if self.kind == TKind::Dnat {
                    Target::Dnat(self.nat)
                } else {
                    Target::Snat(self.nat)
                }
            }
            TKind::Masquerade => {
                need_table(Table::Nat, "MASQUERADE")?;
                Target::Masquerade(self.portnat)
            }
            TKind::Redirect => {
                need_table(Table::Nat, "REDIRECT")?;
                Target::Redirect(self.portnat)
            }
            TKind::Mark => {
                let (value, mask) = self.mark.ok_or_else(|| {
                    invalid(
                        "MARK: One of the --set-xmark, --{and,or,xor,set}-mark options is required",
                    )
                })?;
                Target::Mark { value, mask }
            }
            TKind::Connmark => Target::Connmark(match self.connmark_mode {
                None => return Err(invalid("CONNMARK target: No operation specified")),
                Some(0) => ConnmarkOp::Set {
                    value: self.ctmark,
                    mask: self.ctmask,
                },
                Some(1) => ConnmarkOp::Save {
                    nfmask: self.nfmask,
                    ctmask: self.ctmask,
                },
                Some(_) => ConnmarkOp::Restore {
                    nfmask: self.nfmask,
                    ctmask: self.ctmask,
                },
            }),
            TKind::Ct => {
                need_table(Table::Raw, "CT")?;
                Target::Ct {
                    notrack: self.notrack,
                    alias: false,
                }
            }
            TKind::Notrack => {
                need_table(Table::Raw, "NOTRACK")?;
                Target::Ct {
                    notrack: true,
                    alias: true,
                }
            }
            TKind::Log => Target::Log(self.log),
            TKind::Trace => Target::Trace,
        })
    }
}

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
    cmd: Option<(Core, usize)>,
    chain: Option<String>,
    rulenum: Option<u32>,
    chain_opt: Option<String>,
    policy: Option<String>,
    ip: IpMatch,
    srcs: Vec<Ipv4Net>,
    dsts: Vec<Ipv4Net>,
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
        self.matches.push(MatchBuilder::new(kind));
        if !self.loaded.contains(&OptSet::Match(kind)) {
            self.loaded.push(OptSet::Match(kind));
        }
    }

    /// The protocol match `-p` implies (`load_proto`), if any; also for `! -p`.
    fn proto_match(&self) -> Option<MKind> {
        // should_load_proto does not look at an inverted -p.
        match self.ip.proto {
            6 => Some(MKind::Tcp),
            17 => Some(MKind::Udp),
            132 => Some(MKind::Sctp),
            1 => Some(MKind::Icmp),
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
                            err_at(
                                RuleErrorKind::BadValue {
                                    option: core_flag(c).into(),
                                    value: n.into(),
                                    expected: "a rule number starting at 1".into(),
                                },
                                next,
                            )
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
                    let n = parse_ipv4_net(part).map_err(|e| {
                        err_at(
                            RuleErrorKind::BadValue {
                                option: core_flag(c).into(),
                                value: a.into(),
                                expected: e,
                            },
                            tok_i + 1,
                        )
                    })?;
                    list.push(n.masked());
                }
                if inv && list[0].mask == 0 {
                    return Err(err_at(
                        RuleErrorKind::Invalid(format!(
                            "! {} 0.0.0.0/0 would never match (the kernel refuses it)",
                            core_flag(c)
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
                let p = parse_protocol(a).map_err(|e| {
                    err_at(
                        RuleErrorKind::BadValue {
                            option: "-p".into(),
                            value: a.into(),
                            expected: e,
                        },
                        tok_i + 1,
                    )
                })?;
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
                let p = IfacePattern::parse(a).map_err(|e| {
                    err_at(
                        RuleErrorKind::BadValue {
                            option: core_flag(c).into(),
                            value: a.into(),
                            expected: e,
                        },
                        tok_i + 1,
                    )
                })?;
                if is_in {
                    self.ip.iif = Some(p);
                    self.ip.iif_inv = inv;
                } else {
                    self.ip.oif = Some(p);
                    self.ip.oif_inv = inv;
                }
            }
            Core::Fragment => {
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
                        RuleErrorKind::BadValue {
                            option: core_flag(c).into(),
                            value: a.into(),
                            expected: "a target or chain name of 1-28 characters".into(),
                        },
                        tok_i + 1,
                    ));
                }
                let is_goto = c == Core::Goto;
                if !is_goto {
                    if let Some(k) = TKind::from_name(a) {
                        self.target = Some(TargetBuilder::new(k));
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
                match MKind::from_name(a) {
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
                    s.parse::<u64>().map_err(|_| {
                        err_at(
                            RuleErrorKind::BadValue {
                                option: "-c".into(),
                                value: s.into(),
                                expected: "packet and byte counts".into(),
                            },
                            at,
                        )
                    })
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
            Core::Ipv4 => {}
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
        let srcs: Vec<Option<Ipv4Net>> = if self.srcs.is_empty() {
            vec![None]
        } else {
            self.srcs.iter().copied().map(Some).collect()
        };
        let dsts: Vec<Option<Ipv4Net>> = if self.dsts.is_empty() {
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
                ip.src = s.filter(|n| n.mask != 0 || ip.src_inv);
                ip.dst = d.filter(|n| n.mask != 0 || ip.dst_inv);
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
                    initial_counters: self.counters.unwrap_or_default(),
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

fn core_flag(c: Core) -> &'static str {
    match c {
        Core::Append => "-A",
        Core::Delete => "-D",
        Core::Insert => "-I",
        Core::Replace => "-R",
        Core::Check => "-C",
        Core::List => "-L",
        Core::ListRules => "-S",
        Core::Flush => "-F",
        Core::Zero => "-Z",
        Core::NewChain => "-N",
        Core::DeleteChain => "-X",
        Core::Policy => "-P",
        Core::RenameChain => "-E",
        Core::Source => "-s",
        Core::Destination => "-d",
        Core::Protocol => "-p",
        Core::InIface => "-i",
        Core::OutIface => "-o",
        Core::Jump => "-j",
        Core::Goto => "-g",
        Core::Match => "-m",
        Core::Table => "-t",
        Core::Numeric => "-n",
        Core::Verbose => "-v",
        Core::Exact => "-x",
        Core::Fragment => "-f",
        Core::Version => "-V",
        Core::Help => "-h",
        Core::LineNumbers => "--line-numbers",
        Core::Modprobe => "--modprobe",
        Core::SetCounters => "-c",
        Core::Ipv4 => "-4",
        Core::Ipv6 => "-6",
        Core::Wait => "-w",
        Core::WaitInterval => "-W",
    }
}

/// Parses the words of one command line (without the `[p:b]` prefix) for `table`.
pub(crate) fn parse_command(toks: &[Token<'_>], table: Table) -> Result<Command, RuleError> {
    let mut p = Parser {
        toks,
        table,
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

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        tokenize(s)
            .unwrap()
            .into_iter()
            .map(|t| t.text.into_owned())
            .collect()
    }

    #[test]
    fn tokenizer_follows_add_param_to_argv() {
        assert_eq!(
            words(r#"-m comment --comment "a b" -j X"#),
            ["-m", "comment", "--comment", "a b", "-j", "X"]
        );
        assert_eq!(
            words(r#"--comment "it's \"q\"""#),
            ["--comment", r#"it's "q""#]
        );
        assert_eq!(words(r#"--comment """#), ["--comment", ""]);
        // A closing quote ends the word: abc"def ghi"jkl is two words.
        assert_eq!(words(r#"abc"def ghi"jkl"#), ["abcdef ghi", "jkl"]);
        // Single quotes are ordinary characters.
        assert_eq!(words("'a b'"), ["'a", "b'"]);
        assert_eq!(words("  a\t\tb  "), ["a", "b"]);
    }

    fn rule(s: &str) -> Result<Vec<Rule>, RuleError> {
        match parse_command(&tokenize(s).unwrap(), Table::Filter)? {
            Command::Append { rules, .. } => Ok(rules),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn implicit_protocol_match_is_loaded_where_its_option_appears() {
        let r = rule("-A X -p tcp -m comment --comment x --dport 80").unwrap();
        assert_eq!(r[0].matches.len(), 2);
        assert_eq!(r[0].matches[0].name(), "comment");
        assert_eq!(r[0].matches[1].name(), "tcp");
    }

    #[test]
    fn abbreviations_resolve_like_getopt() {
        let r = rule("-A X -p tcp --dp 80").unwrap();
        assert!(matches!(&r[0].matches[0], Match::Tcp(t) if t.dport == PortRange::single(80)));
        // --d is ambiguous (--delete, --destination, --dst, --dport…): unknown option.
        let e = rule("-A X -p tcp --d 80").unwrap_err();
        assert_eq!(e.kind, RuleErrorKind::UnknownOption("--d".into()));
        assert_eq!(e.token, Some(4));
    }

    #[test]
    fn multiple_addresses_give_multiple_rules() {
        let r = rule("-A X -s 10.0.0.1,10.0.0.2 -d 1.1.1.1,2.2.2.2 -j ACCEPT").unwrap();
        assert_eq!(r.len(), 4);
        assert!(rule("-A X ! -s 10.0.0.1,10.0.0.2").is_err());
    }

    #[test]
    fn errors_name_the_option() {
        let e = rule("-A X -m statistic --mode nth --every 3").unwrap_err();
        assert!(e.to_string().contains("--packet"), "{e}");
        let e = rule("-A X --foo").unwrap_err();
        assert_eq!(e.kind, RuleErrorKind::UnknownOption("--foo".into()));
        let e = rule("-A X -m limit --limit 1/s").unwrap_err();
        assert_eq!(e.kind, RuleErrorKind::UnknownMatch("limit".into()));
        let e = rule("-A X -j NFLOG").unwrap_err();
        assert_eq!(e.kind, RuleErrorKind::UnsupportedTarget("NFLOG".into()));
        assert!(rule("-A X -p tcp --dport 80:70").is_err());
        assert!(rule("-A X -m tcp --dport 80").is_err());
        assert!(rule("-A X -j DNAT --to-destination 1.2.3.4").is_err());
    }

    #[test]
    fn mark_forms_store_value_and_mask() {
        let t = |s: &str| rule(s).unwrap()[0].target.clone();
        assert_eq!(
            t("-A X -j MARK --or-mark 0x4000"),
            Target::Mark {
                value: 0x4000,
                mask: 0x4000
            }
        );
        assert_eq!(
            t("-A X -j MARK --xor-mark 0x4000"),
            Target::Mark {
                value: 0x4000,
                mask: 0
            }
        );
        assert_eq!(
            t("-A X -j MARK --and-mark 0x20"),
            Target::Mark {
                value: 0,
                mask: !0x20
            }
        );
        assert_eq!(
            t("-A X -j MARK --set-mark 0x1/0x2"),
            Target::Mark { value: 1, mask: 3 }
        );
    }
}
