//! Whether a rule's matches pass a packet: the IP part, then each match in order (ports,
//! TCP flags, ICMP, multiport, statistic, mark, conntrack, addrtype, recent, nfacct, physdev).

use std::net::{IpAddr, Ipv6Addr};

use sim_core::{Packet, SimTime, L4};

use crate::rule::*;
use crate::ruleset::Ruleset;
use crate::state::{RecentEntry, RulesetState, RECENT_MAX_ENTRIES};
use crate::trace::StatDraw;
use crate::types::*;

use super::{CtState, EvalCtx, PhysDevs, Pkt};

/// Whether the packet address (`v4` of an IPv4 packet, `v6` of an IPv6 one) is in `n`.
/// A ruleset holds nets of its own family only and sees packets of it only.
#[inline]
fn net_contains(n: &IpNet, v4: u32, v6: u128) -> bool {
    match n {
        IpNet::V4(n) => n.contains(v4),
        IpNet::V6(n) => n.contains(v6),
    }
}

/// Whether the packet's interfaces pass the rule's `-i`/`-o`, as `ip_packet_match` tests
/// them (an interface the packet has not got is tested as the empty name).
#[inline]
pub(super) fn ifaces_ok(ip: &IpMatch, packet: &Packet) -> bool {
    if let Some(p) = &ip.iif {
        let name = packet.iif.as_ref().map(|i| i.as_str()).unwrap_or("");
        if p.matches(name) == ip.iif_inv {
            return false;
        }
    }
    if let Some(p) = &ip.oif {
        let name = packet.oif.as_ref().map(|i| i.as_str()).unwrap_or("");
        if p.matches(name) == ip.oif_inv {
            return false;
        }
    }
    true
}

#[inline]
pub(crate) fn rule_matches(
    rs: &Ruleset,
    rule: &Rule,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    pk: &Pkt,
    state: &mut RulesetState,
    mut draws: Option<&mut Vec<StatDraw>>,
) -> bool {
    let ip = &rule.ip;
    // ip_packet_match.
    if let Some(n) = &ip.src {
        if net_contains(n, pk.src, pk.src6) == ip.src_inv {
            return false;
        }
    }
    if let Some(n) = &ip.dst {
        if net_contains(n, pk.dst, pk.dst6) == ip.dst_inv {
            return false;
        }
    }
    if !ifaces_ok(ip, &ctx.packet) {
        return false;
    }
    if ip.proto != 0 && (pk.proto == ip.proto) == ip.proto_inv {
        return false;
    }
    // Simulated packets are never non-first fragments: `-f` never matches, `! -f` always.
    if ip.frag == Some(false) {
        return false;
    }
    for m in &rule.matches {
        if !match_one(rs, m, hook, ctx, pk, state, draws.as_deref_mut()) {
            return false;
        }
    }
    true
}

#[inline]
pub(super) fn ports_ok(
    sport: &PortRange,
    sinv: bool,
    dport: &PortRange,
    dinv: bool,
    pk: &Pkt,
) -> bool {
    match (pk.sport, pk.dport) {
        (Some(s), Some(d)) => sport.contains(s) != sinv && dport.contains(d) != dinv,
        _ => false,
    }
}

pub(super) fn match_one(
    rs: &Ruleset,
    m: &Match,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    pk: &Pkt,
    state: &mut RulesetState,
    draws: Option<&mut Vec<StatDraw>>,
) -> bool {
    match m {
        Match::Comment(_) => true,
        // iptables-nft turns tcp/udp port matches into transport-header payload comparisons,
        // which do not check the protocol themselves (`! -p udp -m udp --dport 5` compares
        // the ports of any packet that has them).
        Match::Tcp(t) => {
            if !ports_ok(&t.sport, t.sport_inv, &t.dport, t.dport_inv, pk) {
                return false;
            }
            match t.flags {
                Some((mask, cmp, inv)) => match ctx.packet.l4 {
                    L4::Tcp { flags, .. } => ((flags.0 & mask) == cmp) != inv,
                    _ => false,
                },
                None => true,
            }
        }
        Match::Udp(p) => ports_ok(&p.sport, p.sport_inv, &p.dport, p.dport_inv, pk),
        Match::Sctp(p) => {
            matches!(ctx.packet.l4, L4::Sctp { .. })
                && ports_ok(&p.sport, p.sport_inv, &p.dport, p.dport_inv, pk)
        }
        Match::Icmp(i) => {
            let L4::Icmp {
                icmp_type, code, ..
            } = ctx.packet.l4
            else {
                return false;
            };
            // icmp_type_code_match.
            let hit = i.icmp_type == 0xff
                || (i.icmp_type == icmp_type && code >= i.code_min && code <= i.code_max);
            hit != i.inv
        }
        Match::Icmp6(i) => {
            let L4::Icmp {
                icmp_type, code, ..
            } = ctx.packet.l4
            else {
                return false;
            };
            // icmp6_type_code_match: no `any` type in IPv6.
            let hit = i.icmp_type == icmp_type && code >= i.code_min && code <= i.code_max;
            hit != i.inv
        }
        Match::Multiport(mp) => {
            let (Some(s), Some(d)) = (pk.sport, pk.dport) else {
                return false;
            };
            // ports_match_v1.
            for r in &mp.ports {
                let hit = match mp.kind {
                    MultiportKind::Source => r.contains(s),
                    MultiportKind::Destination => r.contains(d),
                    MultiportKind::Either => r.contains(s) || r.contains(d),
                };
                if hit {
                    return !mp.inv;
                }
            }
            mp.inv
        }
        Match::Statistic(s) => match s.mode {
            StatisticMode::Random { probability } => {
                // statistic_mt: (get_random_u32() & 0x7FFFFFFF) < probability.
                let draw = ctx.rng.next_u32() & 0x7fff_ffff;
                if let Some(d) = draws {
                    d.push(StatDraw::Random {
                        draw,
                        threshold: probability,
                    });
                }
                match ctx.force_random {
                    Some(forced) => forced,
                    None => (draw < probability) != s.inv,
                }
            }
            StatisticMode::Nth { every, packet } => {
                // statistic_mt with the count libxt_statistic starts at (every-1)-packet:
                // the i-th packet (0-based) reaching the match matches when i % every == packet.
                let slot = state.slot(s.slot, Counters::default());
                let index = slot.packets as u32;
                slot.packets = if index + 1 >= every {
                    0
                } else {
                    u64::from(index + 1)
                };
                if let Some(d) = draws {
                    d.push(StatDraw::Nth {
                        index,
                        every,
                        packet,
                    });
                }
                (index == packet) != s.inv
            }
        },
        Match::Mark(mk) => ((ctx.packet.mark & mk.mask) == mk.value) != mk.inv,
        Match::Conntrack(c) => conntrack_mt(c, &ctx.ct),
        Match::Addrtype(a) => {
            let dev = match a.limit {
                Some(LimitIface::In) => ctx.packet.iif.as_ref().map(|i| i.as_str()),
                Some(LimitIface::Out) => ctx.packet.oif.as_ref().map(|i| i.as_str()),
                None => None,
            };
            for (want, addr) in [(a.src, ctx.packet.src), (a.dst, ctx.packet.dst)] {
                let Some((mask, inv)) = want else { continue };
                let hit = match addr {
                    IpAddr::V4(v) => mask & ctx.addr_types.addr_type(v, dev).bit() != 0,
                    IpAddr::V6(v) => match_type6(ctx, v, dev, mask),
                };
                if hit == inv {
                    return false;
                }
            }
            true
        }
        Match::Recent(r) => recent_mt(rs, r, hook, ctx, state),
        Match::Set(m) => set_mt(rs, m, ctx, pk),
        Match::Nfacct(n) => {
            let e = &rs.nfacct.entries[n.obj.idx as usize];
            let s = state.nfacct_slot(Bind {
                idx: n.obj.idx,
                uid: e.uid,
            });
            s.packets += 1;
            s.bytes += pk.len;
            true
        }
        Match::Physdev(m) => physdev_mt(m, ctx.phys.as_ref()),
    }
}

/// xt_physdev `physdev_mt`, its tests in its order. Without bridge information (a packet
/// that did not come through `br_netfilter`) only options given with `!` match. With it,
/// `--physdev-in` is not checked when there is no in-port, nor `--physdev-out` when there
/// is no out-port yet (PREROUTING, INPUT): both then match, as the kernel's do.
pub(crate) fn physdev_mt(m: &PhysdevMatch, phys: Option<&PhysDevs>) -> bool {
    let Some(p) = phys else {
        return [
            m.is_bridged,
            m.is_in,
            m.is_out,
            m.physdev_in.map(|x| x.1),
            m.physdev_out.map(|x| x.1),
        ]
        .into_iter()
        .all(|o| o.is_none_or(|inv| inv));
    };
    let (indev, outdev) = (p.indev.as_ref(), p.outdev.as_ref());
    if let Some(inv) = m.is_bridged {
        if outdev.is_some() == inv {
            return false;
        }
    }
    if m.is_in.is_some_and(|inv| indev.is_none() != inv)
        || m.is_out.is_some_and(|inv| outdev.is_none() != inv)
    {
        return false;
    }
    if let (Some((pat, inv)), Some(d)) = (m.physdev_in, indev) {
        if pat.matches(d.as_str()) == inv {
            return false;
        }
    }
    match (m.physdev_out, outdev) {
        (Some((pat, inv)), Some(d)) => pat.matches(d.as_str()) != inv,
        _ => true,
    }
}

/// xt_addrtype `match_type6`: for IPv6 every type named in `mask` must hold (unlike IPv4,
/// where the address's one type must be among them). MULTICAST and UNICAST come from the
/// address's class (`ipv6_addr_type`), UNSPEC is `::`, and LOCAL (the only one of LOCAL,
/// ANYCAST, UNREACHABLE modelled) from the route lookup (`match_lookup_rt6`).
fn match_type6(ctx: &EvalCtx<'_>, a: Ipv6Addr, dev: Option<&str>, mask: u16) -> bool {
    let multicast = a.segments()[0] >> 8 == 0xff;
    if mask & AddrType::Multicast.bit() != 0 && !multicast {
        return false;
    }
    if mask & AddrType::Unicast.bit() != 0 && (multicast || a.is_unspecified()) {
        return false;
    }
    if mask & AddrType::Unspec.bit() != 0 && !a.is_unspecified() {
        return false;
    }
    let routed = AddrType::Local.bit() | AddrType::Anycast.bit() | AddrType::Unreachable.bit();
    if mask & routed != 0 {
        let local = ctx.addr_types.is_local6(a, dev);
        return local && mask & AddrType::Local.bit() != 0;
    }
    true
}

/// xt_conntrack `conntrack_mt` (revision 3).
fn conntrack_mt(c: &ConntrackMatch, ct: &CtState) -> bool {
    if let Some((mask, inv)) = c.state {
        if (mask & ct.state_bits() != 0) == inv {
            return false;
        }
    }
    let CtState::Tracked(ci) = ct else {
        // No entry: only a state test can match.
        return c.state.is_some();
    };
    if let Some(d) = c.dir {
        if d != ci.dir {
            return false;
        }
    }
    let addr_ok = |v: &Option<(IpNet, bool)>, a: IpAddr| match v {
        Some((n, inv)) => n.contains(a) != *inv,
        None => true,
    };
    if !addr_ok(&c.orig_src, ci.orig.src)
        || !addr_ok(&c.orig_dst, ci.orig.dst)
        || !addr_ok(&c.repl_src, ci.reply.src)
        || !addr_ok(&c.repl_dst, ci.reply.dst)
    {
        return false;
    }
    if let Some((p, inv)) = c.proto {
        if (ci.orig.proto == p) == inv {
            return false;
        }
    }
    let port_ok = |v: &Option<(PortRange, bool)>, p: u16| match v {
        Some((r, inv)) => r.contains(p) != *inv,
        None => true,
    };
    if !port_ok(&c.orig_src_port, ci.orig.sport)
        || !port_ok(&c.orig_dst_port, ci.orig.dport)
        || !port_ok(&c.repl_src_port, ci.reply.sport)
        || !port_ok(&c.repl_dst_port, ci.reply.dport)
    {
        return false;
    }
    if let Some((mask, inv)) = c.status {
        if (mask & ci.status != 0) == inv {
            return false;
        }
    }
    if let Some((lo, hi, inv)) = c.expires {
        let e = ci.expires_secs;
        if (e >= lo && e <= hi) == inv {
            return false;
        }
    }
    true
}

/// xt_recent `recent_mt`.
fn recent_mt(
    rs: &Ruleset,
    r: &RecentMatch,
    hook: Hook,
    ctx: &mut EvalCtx<'_>,
    state: &mut RulesetState,
) -> bool {
    let reg = &rs.recent.entries[r.table.idx as usize];
    let table = state.recent_table(Bind {
        idx: r.table.idx,
        uid: reg.uid,
    });
    let addr = if r.rdest {
        ip_num(ctx.packet.dst)
    } else {
        ip_num(ctx.packet.src)
    } & reg.mask;
    let mut ttl = ctx.packet.ttl;
    // "use TTL as seen before forwarding": an output device and no local socket.
    if matches!(hook, Hook::Forward | Hook::PostRouting) && !ctx.local_origin {
        ttl = ttl.wrapping_add(1);
    }
    let now = ctx.now;
    let mut ret = r.inv;
    let want_ttl = if r.rttl { ttl } else { 0 };
    let found = table
        .entries
        .iter()
        .position(|e| e.addr == addr && (want_ttl == e.ttl || want_ttl == 0 || e.ttl == 0));
    let Some(i) = found else {
        if r.command != RecentCommand::Set {
            return ret;
        }
        if table.entries.len() >= RECENT_MAX_ENTRIES {
            table.entries.remove(0);
        }
        let mut stamps = std::collections::VecDeque::with_capacity(4);
        stamps.push_back(now);
        table.entries.push(RecentEntry { addr, ttl, stamps });
        return !ret;
    };
    match r.command {
        RecentCommand::Set => ret = !ret,
        RecentCommand::Remove => {
            table.entries.remove(i);
            return !ret;
        }
        RecentCommand::Check | RecentCommand::Update => {
            let window = sim_core::SimDuration::from_secs(u64::from(r.seconds));
            let mut hits = 0;
            for &st in &table.entries[i].stamps {
                if r.seconds != 0 && now.saturating_since(st) > window {
                    continue;
                }
                hits += 1;
                if r.hitcount == 0 || hits >= r.hitcount {
                    ret = !ret;
                    break;
                }
            }
            if r.reap {
                // recent_entry_reap: drop the least recently used entry if its newest stamp is
                // outside the window, unless it is the entry about to be updated.
                let updating = r.command == RecentCommand::Update && ret;
                let head_old = table.entries.first().is_some_and(|e| {
                    e.stamps
                        .back()
                        .is_some_and(|s| now.saturating_since(*s) > window)
                });
                if head_old && !(updating && i == 0) {
                    table.entries.remove(0);
                    if i == 0 {
                        return ret;
                    }
                    return update_after(table, i - 1, r, ret, ttl, now, reg.cap);
                }
            }
        }
    }
    update_after(table, i, r, ret, ttl, now, reg.cap)
}

fn update_after(
    table: &mut crate::state::RecentTable,
    i: usize,
    r: &RecentMatch,
    ret: bool,
    ttl: u8,
    now: SimTime,
    cap: usize,
) -> bool {
    let matched_update = r.command == RecentCommand::Update && ret;
    if r.command == RecentCommand::Set || matched_update {
        // recent_entry_update: a new stamp, most recently used.
        let mut e = table.entries.remove(i);
        if e.stamps.len() >= cap {
            e.stamps.pop_front();
        }
        e.stamps.push_back(now);
        e.ttl = ttl;
        table.entries.push(e);
    }
    ret
}

/// xt_set `set_match_v4`: `ip_set_test` of the packet under the flags; a `nomatch` element
/// is not in the set, except under `--return-nomatch`, which reverses the sense of a hit. Sets hold IPv4 elements only, so an IPv6
/// packet is never in one.
fn set_mt(rs: &Ruleset, m: &SetMatch, ctx: &EvalCtx<'_>, pk: &Pkt) -> bool {
    use crate::ipset::{SetPacket, SetTest};
    let found = if !ctx.packet.is_ipv4() {
        false
    } else {
        // ip_set_get_ip4_port: an ICMP packet's "port" is type << 8 | code.
        let (sport, dport) = match ctx.packet.l4 {
            L4::Icmp {
                icmp_type, code, ..
            } => {
                let p = u16::from(icmp_type) << 8 | u16::from(code);
                (p, p)
            }
            _ => (pk.sport.unwrap_or(0), pk.dport.unwrap_or(0)),
        };
        let sp = SetPacket {
            src: pk.src,
            dst: pk.dst,
            proto: pk.proto,
            sport,
            dport,
        };
        // --return-nomatch reverses the sense of a hit (ipset(8)): a `nomatch` element
        // matches, a plain one does not.
        match rs.ipsets().test(&m.name, &sp, &m.flags) {
            SetTest::Found => !m.return_nomatch,
            SetTest::Nomatch => m.return_nomatch,
            SetTest::NotFound => false,
        }
    };
    found != m.inv
}
