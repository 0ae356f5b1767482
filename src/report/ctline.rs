//! A conntrack entry as the report looks at it, read from the structured record the run's
//! events carry ([`CtRecord`]: both tuples, state, flags, timeout, NAT).

use crate::cluster::sim::CtRecord;
use std::net::IpAddr;

/// One entry at one event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CtLine {
    /// `NEW`, `UPDATE`, `DESTROY`, or empty for an entry read from a listing.
    pub event: String,
    /// For DESTROY: `timeout`, `userspace`, `early_drop` or `killed`.
    pub cause: Option<&'static str>,
    /// Protocol name (`udp`, `tcp`, `icmp`, …).
    pub proto: &'static str,
    /// Seconds left, where conntrack-tools prints them.
    pub timeout: Option<u64>,
    /// The TCP state (`SYN_SENT`, `ESTABLISHED`, …).
    pub state: Option<&'static str>,
    orig: (IpAddr, Option<u16>, IpAddr, Option<u16>),
    reply_src: (IpAddr, Option<u16>),
    /// No reply seen (`[UNREPLIED]`).
    pub unreplied: bool,
    /// `[ASSURED]`.
    pub assured: bool,
}

fn sock(a: IpAddr, p: Option<u16>) -> String {
    match (a, p) {
        (IpAddr::V6(a), Some(p)) => format!("[{a}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}

impl CtLine {
    /// The entry of a `conntrack` event (`event` is NEW, UPDATE or DESTROY).
    pub fn from_record(event: &str, cause: Option<&'static str>, r: &CtRecord) -> CtLine {
        CtLine {
            event: event.to_string(),
            cause,
            proto: r.proto,
            timeout: r.timeout_s,
            state: r.state,
            orig: (r.orig.src, r.orig.sport, r.orig.dst, r.orig.dport),
            reply_src: (r.reply.src, r.reply.sport),
            unreplied: r.flags.contains(&"UNREPLIED"),
            assured: r.flags.contains(&"ASSURED"),
        }
    }

    /// What identifies the entry in its table: the protocol and the original tuple.
    pub fn key(&self) -> String {
        format!("{} {} {}", self.proto, self.orig_src(), self.orig_dst())
    }

    /// The original tuple's `src:sport` (or `src` without ports).
    pub fn orig_src(&self) -> String {
        sock(self.orig.0, self.orig.1)
    }

    /// The original tuple's `dst:dport`.
    pub fn orig_dst(&self) -> String {
        sock(self.orig.2, self.orig.3)
    }

    /// The reply tuple's `src:sport`: where the node sends the traffic (the endpoint after
    /// DNAT).
    pub fn reply_src(&self) -> String {
        sock(self.reply_src.0, self.reply_src.1)
    }

    /// The reply tuple's source address alone.
    pub fn reply_src_ip(&self) -> String {
        self.reply_src.0.to_string()
    }
}
