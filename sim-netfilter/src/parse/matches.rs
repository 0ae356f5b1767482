//! The match extensions (`-m tcp`, `-m conntrack`, `-m recent`, …): each one's options, and
//! building a [`Match`] from the options given.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::error::RuleErrorKind;
use crate::rule::*;
use crate::types::*;

use super::value::*;
use super::{o, OptDef};

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
const ICMP6_OPTS: &[OptDef] = &[o("icmpv6-type", 0, 1, true)];
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
const SET_OPTS: &[OptDef] = &[
    o("match-set", 0, 2, true),
    o("return-nomatch", 1, 0, false),
    o("update-counters", 2, 0, true),
    o("update-subcounters", 3, 0, true),
];
const PHYSDEV_OPTS: &[OptDef] = &[
    o("physdev-in", 0, 1, true),
    o("physdev-out", 1, 1, true),
    o("physdev-is-in", 2, 0, true),
    o("physdev-is-out", 3, 0, true),
    o("physdev-is-bridged", 4, 0, true),
];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MKind {
    Tcp,
    Udp,
    Sctp,
    Icmp,
    Icmp6,
    Multiport,
    Statistic,
    Mark,
    Conntrack,
    State,
    Addrtype,
    Comment,
    Recent,
    Nfacct,
    Set,
    Physdev,
}

impl MKind {
    /// The match called `s` in `family` (`icmp` is iptables', `icmp6` ip6tables').
    pub(super) fn from_name_for(family: Family, s: &str) -> Option<MKind> {
        match (family, MKind::from_name(s)?) {
            (Family::Ipv6, MKind::Icmp) | (Family::Ipv4, MKind::Icmp6) => None,
            (_, k) => Some(k),
        }
    }

    pub(super) fn from_name(s: &str) -> Option<MKind> {
        Some(match s {
            "tcp" => MKind::Tcp,
            "udp" => MKind::Udp,
            "sctp" => MKind::Sctp,
            "icmp" => MKind::Icmp,
            "icmp6" => MKind::Icmp6,
            "multiport" => MKind::Multiport,
            "statistic" => MKind::Statistic,
            "mark" => MKind::Mark,
            "conntrack" => MKind::Conntrack,
            "state" => MKind::State,
            "addrtype" => MKind::Addrtype,
            "comment" => MKind::Comment,
            "recent" => MKind::Recent,
            "nfacct" => MKind::Nfacct,
            "set" => MKind::Set,
            "physdev" => MKind::Physdev,
            _ => return None,
        })
    }

    pub(super) fn opts(self) -> &'static [OptDef] {
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
            MKind::Icmp6 => ICMP6_OPTS,
            MKind::Multiport => MULTIPORT_OPTS,
            MKind::Statistic => STATISTIC_OPTS,
            MKind::Mark => MARK_OPTS,
            MKind::Conntrack => CONNTRACK_OPTS,
            MKind::State => STATE_OPTS,
            MKind::Addrtype => ADDRTYPE_OPTS,
            MKind::Comment => COMMENT_OPTS,
            MKind::Recent => RECENT_OPTS,
            MKind::Nfacct => NFACCT_OPTS,
            MKind::Set => SET_OPTS,
            MKind::Physdev => PHYSDEV_OPTS,
        }
    }
}

/// The largest `--hitcount` the kernel's `xt_recent` accepts (XT_RECENT_MAX_NSTAMPS − 1,
/// checked on Linux 6.18).
pub const RECENT_MAX_HITCOUNT: u32 = 65535;

/// A match being built from its options.
#[derive(Clone, Debug)]
pub(super) struct MatchBuilder {
    pub(super) kind: MKind,
    /// The ruleset's family: which addresses the options take.
    family: Family,
    /// Options of this instance seen so far (bit per option id).
    seen: u32,
    /// A later `-m` of the same name completes this instance (`xtables_find_match`).
    pub(super) completed: bool,
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
    set: Option<Box<SetMatch>>,
    physdev: PhysdevMatch,
}

impl MatchBuilder {
    pub(super) fn new(kind: MKind, family: Family) -> MatchBuilder {
        MatchBuilder {
            kind,
            family,
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
            set: None,
            physdev: PhysdevMatch::default(),
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
        let all_ones = match self.family {
            Family::Ipv4 => IpAddr::V4(Ipv4Addr::BROADCAST),
            Family::Ipv6 => IpAddr::V6(Ipv6Addr::from(u128::MAX)),
        };
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
                mask: all_ones,
                table: Bind::default(),
            })
        })
    }

    pub(super) fn apply(
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
            MKind::Icmp6 => {
                let (t, c0, c1) = parse_icmpv6_type(a)?;
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
                2 => self.ct_mut().orig_src = Some((parse_ct_addr(self.family, opt, a)?, inv)),
                3 => self.ct_mut().orig_dst = Some((parse_ct_addr(self.family, opt, a)?, inv)),
                4 => self.ct_mut().repl_src = Some((parse_ct_addr(self.family, opt, a)?, inv)),
                5 => self.ct_mut().repl_dst = Some((parse_ct_addr(self.family, opt, a)?, inv)),
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
                    let expected = match self.family {
                        Family::Ipv4 => "a dotted netmask",
                        Family::Ipv6 => "an IPv6 netmask (ffff:ffff:ffff:ffff::)",
                    };
                    self.recent_mut().mask =
                        parse_ip(self.family, a).ok_or_else(|| bad(opt, a, expected))?;
                }
            },
            MKind::Nfacct => {
                if a.is_empty() || a.len() > 31 {
                    return Err(bad(opt, a, "an nfacct object name of 1-31 bytes"));
                }
                self.nfacct = Some(a.to_string());
            }
            MKind::Set => {
                let m = self.set.get_or_insert_with(|| {
                    Box::new(SetMatch {
                        name: String::new(),
                        flags: Vec::new(),
                        inv: false,
                        return_nomatch: false,
                        skip_counter_update: false,
                        skip_subcounter_update: false,
                    })
                });
                match def.id {
                    0 => {
                        // libxt_set parse_dirs: IPSET_DIM_MAX (6) flags, each src or dst.
                        let flags_text = args.get(1).copied().unwrap_or("");
                        if a.is_empty() || a.len() > crate::ipset::IPSET_MAX_NAME_LEN {
                            return Err(bad(opt, a, "a set name of 1-31 bytes"));
                        }
                        let mut flags = Vec::new();
                        for f in flags_text.split(',') {
                            flags.push(match f {
                                "src" => crate::ipset::SetDir::Src,
                                "dst" => crate::ipset::SetDir::Dst,
                                _ => {
                                    return Err(bad(
                                        opt,
                                        flags_text,
                                        "src/dst flags separated by ',' (dst,dst)",
                                    ))
                                }
                            });
                        }
                        if flags.len() > 6 {
                            return Err(bad(opt, flags_text, "at most 6 src/dst flags"));
                        }
                        m.name = a.to_string();
                        m.flags = flags;
                        m.inv = inv;
                    }
                    1 => m.return_nomatch = true,
                    2 => m.skip_counter_update = inv,
                    _ => m.skip_subcounter_update = inv,
                }
            }
            // libxt_physdev `physdev_parse`: names as `-i` takes them (`+` a wildcard).
            MKind::Physdev => {
                let name = || {
                    crate::types::IfacePattern::parse(a)
                        .map(|p| (p, inv))
                        .map_err(|e| bad(opt, a, e))
                };
                match def.id {
                    0 => self.physdev.physdev_in = Some(name()?),
                    1 => self.physdev.physdev_out = Some(name()?),
                    2 => self.physdev.is_in = Some(inv),
                    3 => self.physdev.is_out = Some(inv),
                    _ => self.physdev.is_bridged = Some(inv),
                }
            }
        }
        Ok(())
    }

    pub(super) fn finish(mut self, ip: &IpMatch) -> Result<Match, RuleErrorKind> {
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
            MKind::Icmp6 => {
                if !proto_is(58) {
                    return Err(invalid("ICMPv6 match requires '-p ipv6-icmp'"));
                }
                let (t, a, b, inv) = self
                    .icmp
                    .ok_or_else(|| invalid("icmp6: option \"--icmpv6-type\" must be specified"))?;
                Match::Icmp6(IcmpMatch {
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
            MKind::Set => {
                let m = self.set.filter(|m| !m.name.is_empty()).ok_or_else(|| {
                    invalid("set: You must specify \"--match-set\" with proper arguments")
                })?;
                Match::Set(m)
            }
            MKind::Physdev => {
                if self.seen == 0 {
                    return Err(invalid("PHYSDEV: no physdev option specified"));
                }
                Match::Physdev(self.physdev)
            }
        })
    }
}
