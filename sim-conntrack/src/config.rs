//! The conntrack sysctls (`/proc/sys/net/netfilter/nf_conntrack_*`), settable by their real
//! names.
//!
//! Names are accepted with or without the `net.netfilter.` prefix, and values are integers as
//! the kernel's files take them (timeouts in whole seconds). [`Sysctls::set_duration`] also
//! takes a [`SimDuration`] text (`2500ms`) for timeouts, which the kernel cannot express but a
//! simulation sometimes wants.

use sim_core::SimDuration;
use std::fmt;

/// The prefix of every conntrack sysctl name.
pub const SYSCTL_PREFIX: &str = "net.netfilter.";

/// Largest timeout accepted, in seconds: `INT_MAX / HZ` with `CONFIG_HZ=250`, the bound
/// `proc_dointvec_jiffies` enforces on the kernel this was checked against.
pub const MAX_TIMEOUT_SECS: u64 = 2_147_483_647 / 250;

/// Why a sysctl could not be set.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SysctlError {
    /// The name is not a conntrack sysctl nfsim knows.
    #[error(
        "unknown sysctl {name:?}: expected one of the net.netfilter.nf_conntrack_* names ({known})"
    )]
    UnknownName {
        /// The name given.
        name: String,
        /// The names that exist, comma-separated.
        known: String,
    },
    /// The value is not an integer.
    #[error("sysctl {name}: {value:?} is not a number: expected {expected}")]
    NotANumber {
        /// The sysctl.
        name: String,
        /// The text given.
        value: String,
        /// What the sysctl takes.
        expected: &'static str,
    },
    /// The value is out of the sysctl's range.
    #[error("sysctl {name}: {value} is out of range: expected {expected}")]
    OutOfRange {
        /// The sysctl.
        name: String,
        /// The value given.
        value: String,
        /// What the sysctl takes.
        expected: &'static str,
    },
    /// The duration text did not parse.
    #[error("sysctl {name}: {source}")]
    BadDuration {
        /// The sysctl.
        name: String,
        /// The parse error.
        source: sim_core::time::DurationParseError,
    },
    /// The sysctl cannot be written (`nf_conntrack_count`).
    #[error("sysctl {name} is read-only")]
    ReadOnly {
        /// The sysctl.
        name: String,
    },
    /// A duration was given for a sysctl that is not a timeout.
    #[error("sysctl {name} is not a timeout: expected an integer, not a duration")]
    NotATimeout {
        /// The sysctl.
        name: String,
    },
}

/// Index of a TCP timeout in [`Timeouts::tcp`], in the kernel's `tcp_conntrack` order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TcpTimeout {
    SynSent = 1,
    SynRecv = 2,
    Established = 3,
    FinWait = 4,
    CloseWait = 5,
    LastAck = 6,
    TimeWait = 7,
    Close = 8,
    SynSent2 = 9,
    Retrans = 10,
    Unack = 11,
}

/// Every conntrack setting nfsim models, with the kernel's defaults.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sysctls {
    /// `nf_conntrack_max`: entries allowed (unconfirmed ones count); 0 = unlimited.
    pub max: u32,
    /// `nf_conntrack_buckets`: hash buckets; decides which entries `early_drop` looks at.
    pub buckets: u32,
    /// `nf_conntrack_tcp_loose`: pick up TCP connections from a mid-stream ACK.
    pub tcp_loose: bool,
    /// `nf_conntrack_tcp_be_liberal`: a TCP segment out of window is accepted (without
    /// updating the window data) instead of INVALID or ignored (`nf_tcp_log_invalid`).
    pub tcp_be_liberal: bool,
    /// `nf_conntrack_tcp_max_retrans`: retransmissions after which the timeout is at most
    /// `nf_conntrack_tcp_timeout_max_retrans`.
    pub tcp_max_retrans: u8,
    /// `nf_conntrack_events`: 0 = no events, 1 = events, 2 = events if someone listens (nfsim
    /// treats 2 like 1: the caller drains them).
    pub events: u8,
    /// `nf_conntrack_timestamp` (0): each new entry records its start
    /// (`nf_conntrack_timestamp.c`; written at confirmation), which `conntrack -L` prints as
    /// `delta-time=` and `-o ktimestamp` as `[start=…]`. An entry made while it is 0 never
    /// gets one.
    pub timestamp: bool,
    /// `nf_conntrack_udp_timeout` (30 s).
    pub udp_timeout: SimDuration,
    /// `nf_conntrack_udp_timeout_stream` (120 s).
    pub udp_timeout_stream: SimDuration,
    /// `nf_conntrack_icmp_timeout` (30 s).
    pub icmp_timeout: SimDuration,
    /// `nf_conntrack_icmpv6_timeout` (30 s).
    pub icmpv6_timeout: SimDuration,
    /// `nf_conntrack_generic_timeout` (600 s).
    pub generic_timeout: SimDuration,
    /// TCP timeouts indexed by the kernel's `tcp_conntrack` state (index 0, NONE, unused),
    /// then RETRANS (10) and UNACK (11).
    pub(crate) tcp: [SimDuration; 12],
}

impl Default for Sysctls {
    fn default() -> Self {
        let s = SimDuration::from_secs;
        Sysctls {
            max: 262_144,
            buckets: 262_144,
            tcp_loose: true,
            tcp_be_liberal: false,
            tcp_max_retrans: 3,
            events: 1,
            timestamp: false,
            udp_timeout: s(30),
            udp_timeout_stream: s(120),
            icmp_timeout: s(30),
            icmpv6_timeout: s(30),
            generic_timeout: s(600),
            // tcp_timeouts[] in nf_conntrack_proto_tcp.c
            tcp: [
                s(0),
                s(120),     // SYN_SENT
                s(60),      // SYN_RECV
                s(432_000), // ESTABLISHED (5 days)
                s(120),     // FIN_WAIT
                s(60),      // CLOSE_WAIT
                s(30),      // LAST_ACK
                s(120),     // TIME_WAIT
                s(10),      // CLOSE
                s(120),     // SYN_SENT2
                s(300),     // RETRANS
                s(300),     // UNACK
            ],
        }
    }
}

#[derive(Clone, Copy)]
enum Key {
    Max,
    Buckets,
    Count,
    TcpLoose,
    TcpBeLiberal,
    TcpMaxRetrans,
    Events,
    Timestamp,
    Udp,
    UdpStream,
    Icmp,
    Icmpv6,
    Generic,
    Tcp(TcpTimeout),
}

const NAMES: &[(&str, Key)] = &[
    ("nf_conntrack_max", Key::Max),
    ("nf_conntrack_buckets", Key::Buckets),
    ("nf_conntrack_count", Key::Count),
    ("nf_conntrack_tcp_loose", Key::TcpLoose),
    ("nf_conntrack_tcp_be_liberal", Key::TcpBeLiberal),
    ("nf_conntrack_tcp_max_retrans", Key::TcpMaxRetrans),
    ("nf_conntrack_events", Key::Events),
    ("nf_conntrack_timestamp", Key::Timestamp),
    ("nf_conntrack_udp_timeout", Key::Udp),
    ("nf_conntrack_udp_timeout_stream", Key::UdpStream),
    ("nf_conntrack_icmp_timeout", Key::Icmp),
    ("nf_conntrack_icmpv6_timeout", Key::Icmpv6),
    ("nf_conntrack_generic_timeout", Key::Generic),
    (
        "nf_conntrack_tcp_timeout_syn_sent",
        Key::Tcp(TcpTimeout::SynSent),
    ),
    (
        "nf_conntrack_tcp_timeout_syn_recv",
        Key::Tcp(TcpTimeout::SynRecv),
    ),
    (
        "nf_conntrack_tcp_timeout_established",
        Key::Tcp(TcpTimeout::Established),
    ),
    (
        "nf_conntrack_tcp_timeout_fin_wait",
        Key::Tcp(TcpTimeout::FinWait),
    ),
    (
        "nf_conntrack_tcp_timeout_close_wait",
        Key::Tcp(TcpTimeout::CloseWait),
    ),
    (
        "nf_conntrack_tcp_timeout_last_ack",
        Key::Tcp(TcpTimeout::LastAck),
    ),
    (
        "nf_conntrack_tcp_timeout_time_wait",
        Key::Tcp(TcpTimeout::TimeWait),
    ),
    (
        "nf_conntrack_tcp_timeout_close",
        Key::Tcp(TcpTimeout::Close),
    ),
    (
        "nf_conntrack_tcp_timeout_syn_sent2",
        Key::Tcp(TcpTimeout::SynSent2),
    ),
    (
        "nf_conntrack_tcp_timeout_max_retrans",
        Key::Tcp(TcpTimeout::Retrans),
    ),
    (
        "nf_conntrack_tcp_timeout_unacknowledged",
        Key::Tcp(TcpTimeout::Unack),
    ),
];

const TIMEOUT_EXPECTED: &str = "a whole number of seconds from 0 to 8589934";

impl Sysctls {
    /// The names [`Sysctls::set`] and [`Sysctls::get`] take (without the prefix).
    pub fn names() -> impl Iterator<Item = &'static str> {
        NAMES.iter().map(|(n, _)| *n)
    }

    fn key(name: &str) -> Result<(&'static str, Key), SysctlError> {
        let short = name.trim();
        let short = short.strip_prefix(SYSCTL_PREFIX).unwrap_or(short);
        // `sysctl` also accepts slashes: net/netfilter/nf_conntrack_max.
        let short = short.strip_prefix("net/netfilter/").unwrap_or(short);
        NAMES
            .iter()
            .find(|(n, _)| *n == short)
            .map(|(n, k)| (*n, *k))
            .ok_or_else(|| SysctlError::UnknownName {
                name: name.to_string(),
                known: Self::names().collect::<Vec<_>>().join(", "),
            })
    }

    /// Sets a sysctl from the text the kernel's file takes (`echo 60 > …`).
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), SysctlError> {
        let (full, key) = Self::key(name)?;
        let full = format!("{SYSCTL_PREFIX}{full}");
        let v = value.trim();
        let parse = |expected: &'static str| -> Result<i64, SysctlError> {
            v.parse::<i64>().map_err(|_| SysctlError::NotANumber {
                name: full.clone(),
                value: value.to_string(),
                expected,
            })
        };
        let range = |n: i64, lo: i64, hi: i64, expected: &'static str| {
            if n < lo || n > hi {
                Err(SysctlError::OutOfRange {
                    name: full.clone(),
                    value: n.to_string(),
                    expected,
                })
            } else {
                Ok(n)
            }
        };
        match key {
            Key::Count => {
                return Err(SysctlError::ReadOnly { name: full });
            }
            Key::Max => {
                const E: &str = "an integer from 0 (unlimited) to 2147483647";
                self.max = range(parse(E)?, 0, i32::MAX as i64, E)? as u32;
            }
            Key::Buckets => {
                const E: &str = "an integer from 1 to 1073741824";
                self.buckets = range(parse(E)?, 1, 1 << 30, E)? as u32;
            }
            Key::TcpLoose => {
                const E: &str = "0 or 1";
                self.tcp_loose = range(parse(E)?, 0, 1, E)? == 1;
            }
            Key::TcpBeLiberal => {
                const E: &str = "0 or 1";
                self.tcp_be_liberal = range(parse(E)?, 0, 1, E)? == 1;
            }
            Key::TcpMaxRetrans => {
                const E: &str = "an integer from 0 to 255";
                self.tcp_max_retrans = range(parse(E)?, 0, 255, E)? as u8;
            }
            Key::Events => {
                const E: &str = "0, 1 or 2";
                self.events = range(parse(E)?, 0, 2, E)? as u8;
            }
            Key::Timestamp => {
                // proc_dou8vec_minmax with extra1 = 0, extra2 = 1.
                const E: &str = "0 or 1";
                self.timestamp = range(parse(E)?, 0, 1, E)? == 1;
            }
            _ => {
                let n = range(
                    parse(TIMEOUT_EXPECTED)?,
                    0,
                    MAX_TIMEOUT_SECS as i64,
                    TIMEOUT_EXPECTED,
                )?;
                *self.timeout_slot(key) = SimDuration::from_secs(n as u64);
            }
        }
        Ok(())
    }

    /// Sets a timeout sysctl from a duration text (`30s`, `2500ms`, `2m`). Sub-second values
    /// are a simulation convenience the kernel (whole seconds) does not have.
    pub fn set_duration(&mut self, name: &str, value: &str) -> Result<(), SysctlError> {
        let (full, key) = Self::key(name)?;
        let full = format!("{SYSCTL_PREFIX}{full}");
        if !matches!(
            key,
            Key::Udp | Key::UdpStream | Key::Icmp | Key::Icmpv6 | Key::Generic | Key::Tcp(_)
        ) {
            return Err(SysctlError::NotATimeout { name: full });
        }
        let d: SimDuration = value.parse().map_err(|source| SysctlError::BadDuration {
            name: full.clone(),
            source,
        })?;
        if d > SimDuration::from_secs(MAX_TIMEOUT_SECS) {
            return Err(SysctlError::OutOfRange {
                name: full,
                value: value.to_string(),
                expected: "a duration of at most 8589934s",
            });
        }
        *self.timeout_slot(key) = d;
        Ok(())
    }

    fn timeout_slot(&mut self, key: Key) -> &mut SimDuration {
        match key {
            Key::Udp => &mut self.udp_timeout,
            Key::UdpStream => &mut self.udp_timeout_stream,
            Key::Icmp => &mut self.icmp_timeout,
            Key::Icmpv6 => &mut self.icmpv6_timeout,
            Key::Tcp(t) => &mut self.tcp[t as usize],
            // Only timeout keys reach here (callers match first); the generic slot is a
            // harmless answer for anything else.
            _ => &mut self.generic_timeout,
        }
    }

    /// The value as the kernel's file would print it (timeouts in whole seconds, floor).
    /// `nf_conntrack_count` is not known here; [`crate::Conntrack::sysctl`] answers it.
    pub fn get(&self, name: &str) -> Result<String, SysctlError> {
        let (_, key) = Self::key(name)?;
        let secs = |d: SimDuration| d.as_secs().to_string();
        Ok(match key {
            Key::Max => self.max.to_string(),
            Key::Buckets => self.buckets.to_string(),
            Key::Count => "0".to_string(),
            Key::TcpLoose => u8::from(self.tcp_loose).to_string(),
            Key::TcpBeLiberal => u8::from(self.tcp_be_liberal).to_string(),
            Key::TcpMaxRetrans => self.tcp_max_retrans.to_string(),
            Key::Events => self.events.to_string(),
            Key::Timestamp => u8::from(self.timestamp).to_string(),
            Key::Udp => secs(self.udp_timeout),
            Key::UdpStream => secs(self.udp_timeout_stream),
            Key::Icmp => secs(self.icmp_timeout),
            Key::Icmpv6 => secs(self.icmpv6_timeout),
            Key::Generic => secs(self.generic_timeout),
            Key::Tcp(t) => secs(self.tcp[t as usize]),
        })
    }

    /// The TCP timeout of `state` (`nf_conntrack_tcp_timeout_<state>`).
    pub fn tcp_timeout(&self, state: crate::TcpState) -> SimDuration {
        self.tcp[state as usize]
    }

    pub(crate) fn tcp_special(&self, t: TcpTimeout) -> SimDuration {
        self.tcp[t as usize]
    }

    /// kube-proxy's value for `nf_conntrack_max`: `max(32768 × cores, 131072)`
    /// (`--conntrack-max-per-core`, `--conntrack-min` defaults).
    pub fn kube_proxy_max(cores: u32) -> u32 {
        (32_768u32.saturating_mul(cores)).max(131_072)
    }
}

impl fmt::Display for Sysctls {
    /// `sysctl -a` style lines, one per setting, in [`Sysctls::names`] order (without
    /// `nf_conntrack_count`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (name, key) in NAMES {
            if matches!(key, Key::Count) {
                continue;
            }
            let v = self.get(name).map_err(|_| fmt::Error)?;
            writeln!(f, "{SYSCTL_PREFIX}{name} = {v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_with_and_without_prefix() {
        let mut s = Sysctls::default();
        s.set("net.netfilter.nf_conntrack_udp_timeout", "3")
            .unwrap();
        s.set("nf_conntrack_udp_timeout_stream", " 6\n").unwrap();
        assert_eq!(s.udp_timeout, SimDuration::from_secs(3));
        assert_eq!(s.get("nf_conntrack_udp_timeout_stream").unwrap(), "6");
        s.set("nf_conntrack_tcp_timeout_established", "86400")
            .unwrap();
        assert_eq!(
            s.tcp_timeout(crate::TcpState::Established),
            SimDuration::from_secs(86400)
        );
        s.set_duration("nf_conntrack_udp_timeout", "2500ms")
            .unwrap();
        assert_eq!(s.udp_timeout, SimDuration::from_millis(2500));
    }

    #[test]
    fn bad_input_is_an_error_that_says_what_was_expected() {
        let mut s = Sysctls::default();
        let e = s.set("nf_conntrack_udp_timeot", "3").unwrap_err();
        assert!(matches!(e, SysctlError::UnknownName { .. }));
        assert!(e.to_string().contains("nf_conntrack_udp_timeout"));
        let e = s.set("nf_conntrack_udp_timeout", "3s").unwrap_err();
        assert!(e.to_string().contains("whole number of seconds"), "{e}");
        assert!(matches!(
            s.set("nf_conntrack_udp_timeout", "-1"),
            Err(SysctlError::OutOfRange { .. })
        ));
        assert!(matches!(
            s.set("nf_conntrack_tcp_loose", "7"),
            Err(SysctlError::OutOfRange { .. })
        ));
        assert!(matches!(
            s.set("nf_conntrack_count", "7"),
            Err(SysctlError::ReadOnly { .. })
        ));
        assert!(matches!(
            s.set_duration("nf_conntrack_udp_timeout", "3 parsecs"),
            Err(SysctlError::BadDuration { .. })
        ));
        assert!(matches!(
            s.set_duration("nf_conntrack_max", "3s"),
            Err(SysctlError::NotATimeout { .. })
        ));
        assert_eq!(s, Sysctls::default(), "failed sets change nothing");
    }

    #[test]
    fn kube_proxy_max() {
        assert_eq!(Sysctls::kube_proxy_max(2), 131_072);
        assert_eq!(Sysctls::kube_proxy_max(8), 262_144);
    }
}
