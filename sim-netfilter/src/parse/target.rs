//! The targets (`-j DNAT`, `-j MARK`, `-j LOG`, …): each one's options, the targets nfsim
//! refuses by name, and building a [`Target`] from the options given.

use crate::error::RuleErrorKind;
use crate::rule::*;
use crate::types::*;

use super::value::*;
use super::{o, OptDef};

pub(super) const NO_OPTS: &[OptDef] = &[];
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
pub(super) enum TKind {
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
    pub(super) fn from_name(s: &str) -> Option<TKind> {
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

    pub(super) fn opts(self) -> &'static [OptDef] {
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
pub(super) const UNSUPPORTED_TARGETS: &[&str] = &[
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

/// A target being built from its options.
#[derive(Clone, Debug)]
pub(super) struct TargetBuilder {
    pub(super) kind: TKind,
    family: Family,
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
    pub(super) fn new(kind: TKind, family: Family) -> TargetBuilder {
        TargetBuilder {
            kind,
            family,
            seen: 0,
            reject: RejectWith::default_for(family),
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

    pub(super) fn apply(
        &mut self,
        def: &OptDef,
        args: &[&str],
        ports_ok: bool,
    ) -> Result<(), RuleErrorKind> {
        let opt = OptName(def.name);
        let a = args.first().copied().unwrap_or("");
        let bit = 1u32 << def.id;
        if self.seen & bit != 0 {
            return Err(RuleErrorKind::Repeated(opt.to_string()));
        }
        self.seen |= bit;
        match self.kind {
            TKind::Reject => {
                let expected = match self.family {
                    Family::Ipv4 => "icmp-net-unreachable, icmp-host-unreachable, icmp-port-unreachable, icmp-proto-unreachable, icmp-net-prohibited, icmp-host-prohibited, icmp-admin-prohibited or tcp-reset",
                    Family::Ipv6 => "icmp6-no-route, icmp6-adm-prohibited, icmp6-addr-unreachable, icmp6-port-unreachable, icmp6-policy-fail, icmp6-reject-route or tcp-reset (ip6tables)",
                };
                self.reject =
                    RejectWith::parse_for(self.family, a).ok_or_else(|| bad(opt, a, expected))?;
            }
            TKind::Dnat | TKind::Snat => match def.id {
                0 => {
                    let r = parse_nat_range(self.family, opt, a, ports_ok)?;
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

    pub(super) fn finish(self, ip: &IpMatch, table: Table) -> Result<Target, RuleErrorKind> {
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
