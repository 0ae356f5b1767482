//! A real node's sysctls: `sysctl -a` output (or a `sysctl.conf`), taken whole.
//!
//! Each `NAME = VALUE` line is one of:
//!
//! - **modelled**: a conntrack sysctl nfsim has ([`sim_conntrack::Sysctls::names`]) or the
//!   ICMP error rate limit's (`net.ipv4.icmp_ratelimit`, `…_ratemask`): its value is checked
//!   as the kernel checks it and applied ([`crate::netns::Netns::set_sysctl`]);
//!   `nf_conntrack_count` is read-only, the table's own count, and is skipped.
//! - **without effect**: a netfilter sysctl that only steers what nfsim does not produce
//!   (kernel log lines, expectations of conntrack helpers, lightweight tunnels); its value is
//!   checked and it is skipped without a word.
//! - **not modelled**: a netfilter sysctl whose behaviour nfsim does not simulate: one
//!   warning each, saying why and what nfsim does instead ([`SysctlWarning`]); where nfsim's
//!   fixed behaviour is the kernel's at one value (`nf_conntrack_acct=0`), that value draws no
//!   warning.
//! - **unknown**: a `net.netfilter.` name the 6.18 kernel this was checked against does not
//!   have: one warning each. Lines outside `net.netfilter.` (the rest of `sysctl -a`) are
//!   counted and named in one warning.
//!
//! Only a value the kernel would refuse is an error, with its line ([`SysctlFileError`]).
//! Names are matched as `sysctl` takes them (dots or slashes), values as its files do.

use sim_conntrack::{SysctlError, Sysctls};
use std::fmt;

/// The prefix of netfilter's sysctls.
const NETFILTER: &str = "net.netfilter.";

pub use crate::netns::ICMP_SYSCTLS;

/// What a netfilter sysctl nfsim does not model may hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// 0 or 1.
    Bool,
    /// An integer from 0 to `INT_MAX`.
    Int,
    /// Any text (`nf_log.N`: a logger's name or `NONE`).
    Text,
}

/// How nfsim treats a netfilter sysctl it does not model.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Treatment {
    /// Steers only what nfsim does not produce: no warning.
    NoEffect,
    /// nfsim behaves as the kernel does with this value: a warning for any other.
    Fixed(&'static str),
    /// Not simulated at any value: always a warning.
    Unmodelled,
}

/// The `net.netfilter.` sysctls of the 6.18 kernel (`sysctl -a` in a fresh network
/// namespace lists 53 lines) that nfsim does not model, with their kind, treatment and why.
const NOT_MODELLED: &[(&str, Kind, Treatment, &str)] = &[
    (
        "nf_conntrack_acct",
        Kind::Bool,
        Treatment::Fixed("0"),
        "per-entry packet and byte counters (packets= bytes= in conntrack -L) are not kept",
    ),
    (
        "nf_conntrack_checksum",
        Kind::Bool,
        Treatment::Fixed("0"),
        "conntrack does not verify layer-4 checksums: a packet with a bad TCP, UDP or ICMP checksum is tracked, not INVALID",
    ),
    (
        "nf_conntrack_expect_max",
        Kind::Int,
        Treatment::NoEffect,
        "no conntrack helpers, so no expectations",
    ),
    (
        "nf_conntrack_frag6_high_thresh",
        Kind::Int,
        Treatment::Unmodelled,
        "IPv6 fragments are not reassembled before conntrack (nf_defrag_ipv6)",
    ),
    (
        "nf_conntrack_frag6_low_thresh",
        Kind::Int,
        Treatment::Unmodelled,
        "IPv6 fragments are not reassembled before conntrack (nf_defrag_ipv6)",
    ),
    (
        "nf_conntrack_frag6_timeout",
        Kind::Int,
        Treatment::Unmodelled,
        "IPv6 fragments are not reassembled before conntrack (nf_defrag_ipv6)",
    ),
    (
        "nf_conntrack_gre_timeout",
        Kind::Int,
        Treatment::Unmodelled,
        "GRE is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_gre_timeout_stream",
        Kind::Int,
        Treatment::Unmodelled,
        "GRE is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_log_invalid",
        Kind::Int,
        Treatment::NoEffect,
        "it only writes kernel log lines",
    ),
    (
        "nf_conntrack_sctp_timeout_closed",
        Kind::Int,
        Treatment::Unmodelled,
        "SCTP is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_sctp_timeout_cookie_echoed",
        Kind::Int,
        Treatment::Unmodelled,
        "SCTP is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_sctp_timeout_cookie_wait",
        Kind::Int,
        Treatment::Unmodelled,
        "SCTP is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_sctp_timeout_established",
        Kind::Int,
        Treatment::Unmodelled,
        "SCTP is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_sctp_timeout_heartbeat_sent",
        Kind::Int,
        Treatment::Unmodelled,
        "SCTP is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_sctp_timeout_shutdown_ack_sent",
        Kind::Int,
        Treatment::Unmodelled,
        "SCTP is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_sctp_timeout_shutdown_recd",
        Kind::Int,
        Treatment::Unmodelled,
        "SCTP is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_sctp_timeout_shutdown_sent",
        Kind::Int,
        Treatment::Unmodelled,
        "SCTP is tracked as the generic protocol, with nf_conntrack_generic_timeout",
    ),
    (
        "nf_conntrack_tcp_ignore_invalid_rst",
        Kind::Bool,
        Treatment::Fixed("0"),
        "a RST out of sequence is INVALID",
    ),
    (
        "nf_hooks_lwtunnel",
        Kind::Bool,
        Treatment::NoEffect,
        "no lightweight tunnels",
    ),
];

/// A sysctl of the file nfsim does not apply, or applies without its whole effect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SysctlWarning {
    /// Its line in the file (1-based).
    pub line: usize,
    /// The sysctl's full name.
    pub name: String,
    /// Why, and what nfsim does instead.
    pub message: String,
}

impl fmt::Display for SysctlWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}: {}", self.line, self.name, self.message)
    }
}

/// A line nfsim refuses: not `NAME = VALUE`, or a value the kernel would refuse.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct SysctlFileError {
    /// Its line (1-based).
    pub line: usize,
    /// What is wrong and what was expected.
    pub message: String,
}

/// What a sysctl file holds for nfsim: the sysctls to apply, in file order (the last of a
/// name repeated wins, as `sysctl -p` does), and the warnings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SysctlFile {
    /// `(full name, value)` of each modelled sysctl, to give to
    /// [`crate::netns::Netns::set_sysctl`] (or a scenario's `sysctls`).
    pub apply: Vec<(String, String)>,
    /// One per sysctl not applied or not applied whole, in file order.
    pub warnings: Vec<SysctlWarning>,
    /// Lines outside `net.netfilter.` (and not the ICMP rate limit's): skipped.
    pub outside: usize,
    /// The first of them, `(line, name)`, for the warning.
    pub outside_first: Option<(usize, String)>,
}

impl SysctlFile {
    /// The warnings as text, the lines outside netfilter as one more.
    pub fn warning_lines(&self) -> Vec<String> {
        let mut v: Vec<String> = self.warnings.iter().map(|w| w.to_string()).collect();
        if let Some((line, name)) = &self.outside_first {
            v.push(format!(
                "{} sysctl(s) outside net.netfilter. skipped (not netfilter's; first: {name} at line {line})",
                self.outside
            ));
        }
        v
    }
}

/// The full name of a sysctl as `sysctl` takes it (`net/netfilter/x` → `net.netfilter.x`).
pub fn full_name(name: &str) -> String {
    name.trim().replace('/', ".")
}

/// What nfsim does with the sysctl `name` (full) set to `value`, beyond applying it: `None`
/// when a modelled one has its whole effect (or one not modelled has none here), else the
/// warning's text. `Err` for a value the kernel would refuse, of a sysctl nfsim does not
/// model (a modelled one's value is checked by setting it). Unknown names are
/// `Ok(Some(..))` too: callers that must refuse typos check [`is_kernel_sysctl`] first.
pub fn unmodelled(name: &str, value: &str) -> Result<Option<String>, String> {
    if ICMP_SYSCTLS.contains(&name) || crate::ipvs::IPVS_SYSCTLS.contains(&name) {
        return Ok(None);
    }
    let short = name.strip_prefix(NETFILTER).unwrap_or(name);
    if name.starts_with(NETFILTER) && Sysctls::names().any(|n| n == short) {
        return Ok(None);
    }
    if let Some((_, kind, treatment, why)) = NOT_MODELLED
        .iter()
        .find(|(n, ..)| *n == short)
        .map(|(n, k, t, w)| (n, *k, *t, *w))
        .or_else(|| {
            // nf_log.N: the logger of protocol family N (0 to 12, NFPROTO_NUMPROTO - 1).
            short
                .strip_prefix("nf_log.")
                .and_then(|n| n.parse::<u8>().ok())
                .filter(|n| *n < 13)
                .map(|_| {
                    (
                        &"nf_log",
                        Kind::Text,
                        Treatment::NoEffect,
                        "the LOG target's logger: it only writes kernel log lines",
                    )
                })
        })
    {
        check_kind(name, value, kind)?;
        return Ok(warning_for(treatment, value, why));
    }
    Ok(Some(
        "not a netfilter sysctl of the kernel nfsim follows (6.18): skipped".to_string(),
    ))
}

fn warning_for(t: Treatment, value: &str, why: &str) -> Option<String> {
    match t {
        Treatment::NoEffect => None,
        Treatment::Fixed(v) if v == value.trim() => None,
        Treatment::Fixed(v) => Some(format!("not modelled ({why}); nfsim behaves as {v}")),
        Treatment::Unmodelled => Some(format!("not modelled ({why})")),
    }
}

fn check_kind(name: &str, value: &str, kind: Kind) -> Result<(), String> {
    let v = value.trim();
    let ok = match kind {
        Kind::Bool => matches!(v, "0" | "1"),
        Kind::Int => v
            .parse::<i64>()
            .is_ok_and(|n| (0..=i64::from(i32::MAX)).contains(&n)),
        Kind::Text => !v.is_empty(),
    };
    if ok {
        return Ok(());
    }
    let expected = match kind {
        Kind::Bool => "0 or 1",
        Kind::Int => "an integer from 0 to 2147483647",
        Kind::Text => "a logger's name or NONE",
    };
    Err(format!("sysctl {name}: {v:?}: expected {expected}"))
}

/// Whether `name` (full) is a netfilter sysctl of the 6.18 kernel, modelled or not.
pub fn is_kernel_sysctl(name: &str) -> bool {
    let Some(short) = name.strip_prefix(NETFILTER) else {
        return ICMP_SYSCTLS.contains(&name) || crate::ipvs::IPVS_SYSCTLS.contains(&name);
    };
    Sysctls::names().any(|n| n == short)
        || NOT_MODELLED.iter().any(|(n, ..)| *n == short)
        || short
            .strip_prefix("nf_log.")
            .and_then(|n| n.parse::<u8>().ok())
            .is_some_and(|n| n < 13)
}

/// Checks a modelled sysctl's value as the kernel would (`Err` with the reason if refused).
fn check_modelled(name: &str, value: &str) -> Result<(), SysctlError> {
    if crate::ipvs::IPVS_SYSCTLS.contains(&name) {
        return crate::ipvs::Ipvs::default().set_sysctl(name, value);
    }
    if let Some(short) = ICMP_SYSCTLS
        .iter()
        .find(|n| **n == name)
        .map(|n| n.strip_prefix("net.ipv4.").unwrap_or(n))
    {
        let mut ns = crate::netns::Netns::new(crate::netns::NetnsConfig::new("check", 1));
        return match ns.set_sysctl(short, value) {
            Err(crate::netns::NetnsError::Sysctl(e)) => Err(e),
            _ => Ok(()),
        };
    }
    Sysctls::default().set(name, value)
}

/// Reads a sysctl file: `sysctl -a` output (`NAME = VALUE`), or `sysctl.conf` lines
/// (`NAME=VALUE`, `#` and `;` comments, blank lines). See the module documentation.
pub fn read_sysctl_file(text: &str) -> Result<SysctlFile, SysctlFileError> {
    let mut out = SysctlFile::default();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let l = raw.trim();
        if l.is_empty() || l.starts_with('#') || l.starts_with(';') {
            continue;
        }
        let Some((name, value)) = l.split_once('=') else {
            return Err(SysctlFileError {
                line,
                message: format!(
                    "{l:?}: expected NAME = VALUE, as `sysctl -a` prints (net.netfilter.nf_conntrack_max = 262144)"
                ),
            });
        };
        let (name, value) = (full_name(name), value.trim().to_string());
        if name.is_empty() {
            return Err(SysctlFileError {
                line,
                message: format!("{l:?}: expected a sysctl's name before ="),
            });
        }
        let modelled = ICMP_SYSCTLS.contains(&name.as_str())
            || crate::ipvs::IPVS_SYSCTLS.contains(&name.as_str())
            || name
                .strip_prefix(NETFILTER)
                .is_some_and(|s| Sysctls::names().any(|n| n == s));
        if !modelled && !name.starts_with(NETFILTER) {
            out.outside += 1;
            if out.outside_first.is_none() {
                out.outside_first = Some((line, name));
            }
            continue;
        }
        if name == "net.netfilter.nf_conntrack_count" {
            // Read-only: the count of the node's table, which its listing gives.
            if value.parse::<u32>().is_err() {
                return Err(SysctlFileError {
                    line,
                    message: format!(
                        "sysctl {name}: {value:?}: expected the number of entries (an integer)"
                    ),
                });
            }
            continue;
        }
        if modelled {
            check_modelled(&name, &value).map_err(|e| SysctlFileError {
                line,
                message: e.to_string(),
            })?;
        }
        match unmodelled(&name, &value) {
            Err(message) => return Err(SysctlFileError { line, message }),
            Ok(Some(message)) => {
                out.warnings.push(SysctlWarning {
                    line,
                    name: name.clone(),
                    message,
                });
            }
            Ok(None) => {}
        }
        if modelled {
            out.apply.push((name, value));
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `sysctl -a 2>/dev/null | grep ^net.netfilter` in a fresh network namespace of the
    /// 6.18 kernel this was checked against (53 lines).
    const KERNEL_618: &str = include_str!("../../tests/fixtures/sysctl/netfilter-6.18.txt");

    #[test]
    fn a_real_nodes_whole_file_is_taken() {
        assert_eq!(KERNEL_618.lines().count(), 53);
        let f = read_sysctl_file(KERNEL_618).unwrap();
        // Every modelled one is applied: all but nf_conntrack_count (read-only) and
        // …_tcp_timeout_syn_sent2 (which 6.18 no longer lists).
        let applied: Vec<&str> = f.apply.iter().map(|(n, _)| n.as_str()).collect();
        for n in Sysctls::names() {
            let full = format!("{NETFILTER}{n}");
            let absent = ["nf_conntrack_count", "nf_conntrack_tcp_timeout_syn_sent2"].contains(&n);
            assert_eq!(applied.contains(&full.as_str()), !absent, "{n}");
        }
        let warned: Vec<&str> = f.warnings.iter().map(|w| w.name.as_str()).collect();
        for n in [
            "net.netfilter.nf_conntrack_checksum",
            "net.netfilter.nf_conntrack_sctp_timeout_established",
            "net.netfilter.nf_conntrack_frag6_timeout",
        ] {
            assert!(warned.contains(&n), "{n} not warned: {warned:?}");
        }
        // The kernel's value where nfsim behaves so, and what has no effect: no warning.
        for n in [
            "net.netfilter.nf_conntrack_acct",
            "net.netfilter.nf_log.2",
            "net.netfilter.nf_conntrack_expect_max",
            "net.netfilter.nf_conntrack_timestamp",
            "net.netfilter.nf_conntrack_tcp_be_liberal",
            "net.netfilter.nf_conntrack_tcp_timeout_unacknowledged",
            "net.netfilter.nf_conntrack_tcp_ignore_invalid_rst",
        ] {
            assert!(!warned.contains(&n), "{n} warned");
        }
        // Once per name.
        let mut dedup = warned.clone();
        dedup.dedup();
        assert_eq!(dedup, warned);
        assert_eq!(f.outside, 0);
    }

    #[test]
    fn only_impossible_values_are_refused() {
        let e = read_sysctl_file(
            "net.netfilter.nf_conntrack_udp_timeout = 30\nnet.netfilter.nf_conntrack_acct = 2\n",
        )
        .unwrap_err();
        assert_eq!(e.line, 2);
        assert!(e.message.contains("expected 0 or 1"), "{e}");
        let e = read_sysctl_file("net.netfilter.nf_conntrack_max = -1\n").unwrap_err();
        assert!(e.message.contains("out of range"), "{e}");
        let e = read_sysctl_file("garbage\n").unwrap_err();
        assert!(e.message.contains("expected NAME = VALUE"), "{e}");
        let f = read_sysctl_file(
            "# sysctl.conf\nnet/netfilter/nf_conntrack_udp_timeout=60\nnet.ipv4.ip_forward = 1\nnet.ipv4.icmp_ratelimit = 100\nnet.netfilter.nf_flowtable_tcp_timeout = 30\n",
        )
        .unwrap();
        assert_eq!(
            f.apply,
            vec![
                (
                    "net.netfilter.nf_conntrack_udp_timeout".to_string(),
                    "60".to_string()
                ),
                ("net.ipv4.icmp_ratelimit".to_string(), "100".to_string()),
            ]
        );
        assert_eq!(f.outside, 1);
        assert_eq!(f.warnings.len(), 1);
        assert!(f.warnings[0]
            .message
            .contains("not a netfilter sysctl of the kernel"));
        assert_eq!(
            f.warning_lines()[1],
            "1 sysctl(s) outside net.netfilter. skipped (not netfilter's; first: net.ipv4.ip_forward at line 3)"
        );
    }
}
