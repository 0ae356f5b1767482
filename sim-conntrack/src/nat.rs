//! NAT bindings: `nf_nat_setup_info`, `get_unique_tuple`, the null binding, and rewriting
//! packets by their entry (`nf_nat_packet`).

use crate::entry::{CtEntry, EntryId, Status};
use crate::table::{Conntrack, CtHandle, CtInfo, Life};
use crate::tuple::{
    has_ports, inet_addr_words, is_icmp, jhash2, reciprocal_scale, Dir, Key, Tuple,
};
use sim_core::{IcmpBody, Packet, L4};
use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

/// Which part of a packet a NAT hook rewrites (`enum nf_nat_manip_type`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Manip {
    /// Source NAT: POSTROUTING and INPUT (SNAT, MASQUERADE, the SNAT null binding).
    Src,
    /// Destination NAT: PREROUTING and OUTPUT (DNAT, REDIRECT, the DNAT null binding).
    Dst,
}

impl Manip {
    fn done_bit(self) -> Status {
        match self {
            Manip::Src => Status::SRC_NAT_DONE,
            Manip::Dst => Status::DST_NAT_DONE,
        }
    }
    fn nat_bit(self) -> Status {
        match self {
            Manip::Src => Status::SRC_NAT,
            Manip::Dst => Status::DST_NAT,
        }
    }
    fn flip(self) -> Manip {
        match self {
            Manip::Src => Manip::Dst,
            Manip::Dst => Manip::Src,
        }
    }
}

/// A NAT target's range (`struct nf_nat_range2`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct NatRange {
    /// `NF_NAT_RANGE_MAP_IPS`: the addresses to map to, first and last (inclusive).
    pub addrs: Option<(IpAddr, IpAddr)>,
    /// `NF_NAT_RANGE_PROTO_SPECIFIED`: the ports (ICMP: ids) to map to, inclusive.
    pub ports: Option<(u16, u16)>,
    /// `NF_NAT_RANGE_PROTO_RANDOM` (`--random`).
    pub random: bool,
    /// `NF_NAT_RANGE_PROTO_RANDOM_FULLY` (`--random-fully`).
    pub random_fully: bool,
    /// `NF_NAT_RANGE_PERSISTENT` (`--persistent`).
    pub persistent: bool,
}

/// Why a NAT range text did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("bad NAT range {input:?}: {reason} (expected ip[-ip][:port[-port]], IPv6 as [ip]:port, as in 10.244.1.7:53 or 10.0.0.1-10.0.0.9:1024-65535)")]
pub struct NatRangeError {
    /// The text given.
    pub input: String,
    /// What was wrong.
    pub reason: String,
}

impl NatRange {
    /// Map to one address, keep ports (`--to-destination 10.244.1.7`).
    pub fn to_addr(ip: IpAddr) -> NatRange {
        NatRange {
            addrs: Some((ip, ip)),
            ..NatRange::default()
        }
    }
    /// Map to one address and port (`--to-destination 10.244.1.7:53`).
    pub fn to_addr_port(ip: IpAddr, port: u16) -> NatRange {
        NatRange {
            addrs: Some((ip, ip)),
            ports: Some((port, port)),
            ..NatRange::default()
        }
    }
    /// Whether either random flag is set (`NF_NAT_RANGE_PROTO_RANDOM_ALL`).
    pub fn random_all(&self) -> bool {
        self.random || self.random_fully
    }
}

impl FromStr for NatRange {
    type Err = NatRangeError;

    /// Parses `ip[-ip][:port[-port]]` as `--to-destination`/`--to-source` take it; IPv6
    /// addresses in brackets when a port follows (`[fd00::1]:53`). A leading `:` gives ports
    /// only.
    fn from_str(input: &str) -> Result<Self, Self::Err> {
        let err = |reason: String| NatRangeError {
            input: input.to_string(),
            reason,
        };
        let s = input.trim();
        if s.is_empty() {
            return Err(err("empty".into()));
        }
        // Split the address part from the port part.
        let (addr_part, port_part) = if s.starts_with('[') {
            let close = s.find(']').ok_or_else(|| err("missing ']'".into()))?;
            let mut addrs = s[1..close].to_string();
            let mut rest = &s[close + 1..];
            if let Some(r) = rest.strip_prefix("-[") {
                let c2 = r.find(']').ok_or_else(|| err("missing ']'".into()))?;
                addrs = format!("{addrs}-{}", &r[..c2]);
                rest = &r[c2 + 1..];
            }
            let port = if rest.is_empty() {
                None
            } else {
                Some(
                    rest.strip_prefix(':')
                        .ok_or_else(|| err(format!("unexpected {rest:?} after the address")))?
                        .to_string(),
                )
            };
            (addrs, port)
        } else if s.matches(':').count() > 1 {
            (s.to_string(), None) // bare IPv6 address(es), no port
        } else {
            match s.split_once(':') {
                Some((a, p)) => (a.to_string(), Some(p.to_string())),
                None => (s.to_string(), None),
            }
        };
        let mut r = NatRange::default();
        if !addr_part.is_empty() {
            let (a, b) = match addr_part.split_once('-') {
                Some((a, b)) => (a, b),
                None => (addr_part.as_str(), addr_part.as_str()),
            };
            let pa: IpAddr = a
                .parse()
                .map_err(|_| err(format!("{a:?} is not an IPv4 or IPv6 address")))?;
            let pb: IpAddr = b
                .parse()
                .map_err(|_| err(format!("{b:?} is not an IPv4 or IPv6 address")))?;
            if pa.is_ipv4() != pb.is_ipv4() {
                return Err(err("the two addresses are of different families".into()));
            }
            if addr_key(pa) > addr_key(pb) {
                return Err(err(format!("{a} is after {b}")));
            }
            r.addrs = Some((pa, pb));
        }
        if let Some(p) = port_part {
            let (a, b) = match p.split_once('-') {
                Some((a, b)) => (a, b),
                None => (p.as_str(), p.as_str()),
            };
            let port = |x: &str| {
                x.parse::<u16>()
                    .map_err(|_| err(format!("{x:?} is not a port number 0-65535")))
            };
            let (pa, pb) = (port(a)?, port(b)?);
            if pa > pb {
                return Err(err(format!("port {pa} is after {pb}")));
            }
            r.ports = Some((pa, pb));
        }
        if r.addrs.is_none() && r.ports.is_none() {
            return Err(err("neither an address nor a port".into()));
        }
        Ok(r)
    }
}

impl fmt::Display for NatRange {
    /// The `--to-destination` form (`10.244.1.7:53`, `[fd00::1]:53`, `10.0.0.1-10.0.0.9`).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let v6 = matches!(self.addrs, Some((IpAddr::V6(_), _)));
        if let Some((a, b)) = self.addrs {
            let br = v6 && self.ports.is_some();
            if br {
                write!(f, "[{a}]")?;
            } else {
                write!(f, "{a}")?;
            }
            if a != b {
                if br {
                    write!(f, "-[{b}]")?;
                } else {
                    write!(f, "-{b}")?;
                }
            }
        }
        if let Some((p, q)) = self.ports {
            write!(f, ":{p}")?;
            if p != q {
                write!(f, "-{q}")?;
            }
        }
        Ok(())
    }
}

fn addr_key(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u128::from(u32::from(v)),
        IpAddr::V6(v) => u128::from(v),
    }
}

fn addr_in(a: IpAddr, lo: IpAddr, hi: IpAddr) -> bool {
    a.is_ipv4() == lo.is_ipv4() && addr_key(a) >= addr_key(lo) && addr_key(a) <= addr_key(hi)
}

/// Why NAT could not be set up.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NatError {
    /// The handle names no live entry.
    #[error("no such conntrack entry {0}: it was destroyed or never existed")]
    NoEntry(EntryId),
    /// NAT is set up only for a connection's first packet, while the entry is unconfirmed.
    #[error("entry {0} is already confirmed: NAT is only set up on a connection's first packet")]
    Confirmed(EntryId),
    /// This manip type is already set up (a second SNAT, or NAT after a null binding).
    #[error("entry {id} already has its {manip:?} NAT set up")]
    AlreadyInitialized {
        /// The entry.
        id: EntryId,
        /// Which manip.
        manip: Manip,
    },
    /// The range's addresses are of the other IP family.
    #[error("NAT range {range} does not fit entry {id}: expected {family} addresses")]
    FamilyMismatch {
        /// The entry.
        id: EntryId,
        /// The range.
        range: NatRange,
        /// The entry's family.
        family: &'static str,
    },
}

impl Conntrack {
    /// Whether NAT of this manip type is set up (`nf_nat_initialized`): true after
    /// [`Conntrack::nat_setup`] or [`Conntrack::nat_null_binding`], so the nat table is not
    /// consulted again.
    #[inline]
    pub fn nat_initialized(&self, id: EntryId, manip: Manip) -> bool {
        self.slot_of(id)
            .map(|s| self.slab[s].status.contains(manip.done_bit()))
            .unwrap_or(false)
    }

    /// Sets up NAT for a new connection (`nf_nat_setup_info`): computes the translated tuple
    /// (`get_unique_tuple`, see docs/kernel-model.md §6), records the new reply tuple, sets
    /// `SRC_NAT` / `DST_NAT` when something changed and `*_NAT_DONE` always. Returns the entry
    /// as it is now. Only an unconfirmed entry can be set up.
    pub fn nat_setup(
        &mut self,
        id: EntryId,
        manip: Manip,
        range: &NatRange,
    ) -> Result<CtEntry, NatError> {
        let slot = self.nat_setup_slot(id, manip, range)?;
        Ok(self.snapshot(slot))
    }

    /// [`Conntrack::nat_setup`] without the copy of the entry: for a packet's pipeline, which
    /// does not look at it (a first packet's two bindings made two copies of its entry).
    pub fn nat_bind(
        &mut self,
        id: EntryId,
        manip: Manip,
        range: &NatRange,
    ) -> Result<(), NatError> {
        self.nat_setup_slot(id, manip, range).map(|_| ())
    }

    /// [`Conntrack::nat_null_binding`] without the copy of the entry.
    pub fn nat_null_bind(&mut self, id: EntryId, manip: Manip) -> Result<(), NatError> {
        let slot = self.slot_of(id).ok_or(NatError::NoEntry(id))?;
        let range = NatRange::to_addr(self.null_binding_addr(slot, manip));
        self.nat_bind(id, manip, &range)
    }

    /// The address a null binding maps `manip` onto: the entry's own.
    fn null_binding_addr(&self, slot: usize, manip: Manip) -> std::net::IpAddr {
        let reply = self.key(slot, 1).tuple();
        match manip {
            Manip::Src => reply.dst,
            Manip::Dst => reply.src,
        }
    }

    /// [`Conntrack::nat_setup`]'s work; the entry's slot.
    fn nat_setup_slot(
        &mut self,
        id: EntryId,
        manip: Manip,
        range: &NatRange,
    ) -> Result<usize, NatError> {
        let slot = self.slot_of(id).ok_or(NatError::NoEntry(id))?;
        let e = &self.slab[slot];
        if e.life != Life::Unconfirmed {
            return Err(NatError::Confirmed(id));
        }
        if e.status.contains(manip.done_bit()) {
            return Err(NatError::AlreadyInitialized { id, manip });
        }
        let v4 = self.key(slot, 0).tuple().src.is_ipv4();
        if let Some((a, b)) = range.addrs {
            if a.is_ipv4() != v4 || b.is_ipv4() != v4 {
                return Err(NatError::FamilyMismatch {
                    id,
                    range: *range,
                    family: if v4 { "IPv4" } else { "IPv6" },
                });
            }
        }
        let reply = self.key(slot, 1).tuple();
        let curr = invert_for_nat(&reply);
        let new = self.get_unique_tuple(&curr, range, manip, slot);
        if new != curr {
            let orig = self.key(slot, 0);
            self.set_keys(slot, orig, Key::from_tuple(&invert_for_nat(&new)));
            self.slab[slot].status.insert(manip.nat_bit());
            if manip == Manip::Src {
                let o = orig.tuple();
                self.bysource.insert((o.proto, o.src, o.sport), id);
            }
        }
        let e = &mut self.slab[slot];
        e.status.insert(manip.done_bit());
        Ok(slot)
    }

    /// Replaces the reply tuple of an unconfirmed entry (`nf_conntrack_alter_reply`): IPVS
    /// does it for a connection it translates itself, so that the reply from the real
    /// server belongs to the entry (`ip_vs_update_conntrack`, `net.ipv4.vs.conntrack=1`).
    /// No NAT status is set: conntrack does not rewrite those packets, IPVS does.
    pub fn alter_reply(&mut self, id: EntryId, reply: &crate::Tuple) -> Result<(), NatError> {
        let slot = self.slot_of(id).ok_or(NatError::NoEntry(id))?;
        if self.slab[slot].life != Life::Unconfirmed {
            return Err(NatError::Confirmed(id));
        }
        let orig = self.key(slot, 0);
        self.set_keys(slot, orig, Key::from_tuple(reply));
        Ok(())
    }

    /// Records that a NAT hook found no rule for a new connection (`nf_nat_alloc_null_binding`):
    /// a mapping onto the entry's own address, so later NAT at this hook cannot happen. The
    /// source port may still change if the reply tuple is already taken.
    pub fn nat_null_binding(&mut self, id: EntryId, manip: Manip) -> Result<CtEntry, NatError> {
        let slot = self.slot_of(id).ok_or(NatError::NoEntry(id))?;
        let ip = self.null_binding_addr(slot, manip);
        self.nat_setup(id, manip, &NatRange::to_addr(ip))
    }

    /// Rewrites a packet at a NAT hook from its entry alone (`nf_nat_packet`): at a `Dst`
    /// hook (PREROUTING, OUTPUT) original-direction packets of a DNAT'd entry get the new
    /// destination and reply-direction packets of an SNAT'd entry get the original
    /// destination back; at a `Src` hook (POSTROUTING, INPUT) likewise for sources. ICMP
    /// errors RELATED to the entry have their quoted header translated too
    /// (`nf_nat_icmp_reply_translation`). Returns whether anything was rewritten.
    #[inline(always)]
    pub fn nat_packet(&self, handle: CtHandle, manip: Manip, pkt: &mut Packet) -> bool {
        let Some(e) = self.slab.get(handle.id.slot as usize) else {
            return false;
        };
        if e.gen != handle.id.gen || e.life == Life::Free {
            return false;
        }
        let dir = handle.dir();
        let bit = match dir {
            Dir::Original => manip.nat_bit(),
            Dir::Reply => manip.flip().nat_bit(),
        };
        if !e.status.contains(bit) {
            return false;
        }
        // The other direction's key; the target is its inverse. For every protocol but ICMP
        // that inverse is a plain swap (`nf_ct_invert_tuple`), so the manip's address and port
        // are read straight from the key's words: a Src manip takes the other direction's
        // destination, a Dst manip its source (`nf_nat_ipv4_manip_pkt` / `l4proto_manip_pkt`).
        let other = self.entry_key(e, handle.id.slot as usize, dir.flip().index() as u32);
        let proto = other.proto();
        if is_icmp(proto) || matches!(handle.ctinfo, CtInfo::Related | CtInfo::RelatedReply) {
            return self.nat_packet_general(handle, manip, pkt);
        }
        match manip {
            Manip::Src => {
                pkt.src = other.dst_addr();
                if has_ports(proto) {
                    pkt.set_sport(other.dport());
                }
            }
            Manip::Dst => {
                pkt.dst = other.src_addr();
                if has_ports(proto) {
                    pkt.set_dport(other.sport());
                }
            }
        }
        true
    }

    /// [`Conntrack::nat_packet`] of an ICMP entry's packet or a RELATED one (an ICMP error
    /// whose quoted header is translated too), for an entry whose status calls for it.
    #[inline(never)]
    fn nat_packet_general(&self, handle: CtHandle, manip: Manip, pkt: &mut Packet) -> bool {
        let Some(slot) = self.slot_of(handle.id) else {
            return false;
        };
        let dir = handle.dir();
        let other = self.key(slot, dir.flip().index() as u32).tuple();
        let target = invert_for_nat(&other);
        if matches!(handle.ctinfo, CtInfo::Related | CtInfo::RelatedReply) {
            if let L4::Icmp {
                body: IcmpBody::Error(mut inner),
                icmp_type,
                code,
            } = pkt.l4
            {
                // Inner header: made to look like the packet as it was before this hook's
                // opposite manip (the tuple of the other direction, opposite manip type).
                match manip.flip() {
                    Manip::Src => {
                        inner.src = other.src;
                        if has_ports(other.proto) || is_icmp(other.proto) {
                            inner.sport = other.sport;
                        }
                    }
                    Manip::Dst => {
                        inner.dst = other.dst;
                        if has_ports(other.proto) {
                            inner.dport = other.dport;
                        }
                    }
                }
                pkt.l4 = L4::Icmp {
                    icmp_type,
                    code,
                    body: IcmpBody::Error(inner),
                };
                match manip {
                    Manip::Src => pkt.src = target.src,
                    Manip::Dst => pkt.dst = target.dst,
                }
                return true;
            }
        }
        match manip {
            Manip::Src => {
                pkt.src = target.src;
                if has_ports(target.proto) {
                    pkt.set_sport(target.sport);
                }
            }
            Manip::Dst => {
                pkt.dst = target.dst;
                if has_ports(target.proto) {
                    pkt.set_dport(target.dport);
                }
            }
        }
        if is_icmp(target.proto) {
            // icmp_manip_pkt: the echo id follows the tuple whatever the manip type.
            if let L4::Icmp {
                body: IcmpBody::Query { id, .. },
                ..
            } = &mut pkt.l4
            {
                *id = target.sport;
            }
        }
        true
    }

    /// `nf_nat_used_tuple`: is the reply this tuple implies already in the table (by an entry
    /// other than `ignore`)? Counts `found` when it is.
    fn nat_used_tuple(&mut self, t: &Tuple, ignore: usize) -> bool {
        let reply = invert_for_nat(t);
        let taken = self
            .lookup(&reply)
            .map(|(slot, _)| slot != ignore)
            .unwrap_or(false);
        if taken {
            self.stats.found += 1;
        }
        taken
    }

    /// `in_range`: would a source mapping giving this tuple meet the range?
    fn in_range(t: &Tuple, r: &NatRange) -> bool {
        if let Some((lo, hi)) = r.addrs {
            if !addr_in(t.src, lo, hi) {
                return false;
            }
        }
        match r.ports {
            None => true,
            Some((lo, hi)) => l4proto_in_range(t, Manip::Src, lo, hi),
        }
    }

    /// `find_appropriate_src`: an existing SNAT mapping of the same source, reused if it fits.
    fn find_appropriate_src(&self, t: &Tuple, r: &NatRange) -> Option<Tuple> {
        let ids = self.bysource.get((t.proto, t.src, t.sport));
        // The kernel adds at the head of the chain: newest first.
        for id in ids.iter().rev() {
            let Some(slot) = self.slot_of(*id) else {
                continue;
            };
            let o = self.key(slot, 0).tuple();
            if o.proto == t.proto && o.src == t.src && o.sport == t.sport {
                let mut res = invert_for_nat(&self.key(slot, 1).tuple());
                res.dst = t.dst;
                res.dport = t.dport;
                if Self::in_range(&res, r) {
                    return Some(res);
                }
            }
        }
        None
    }

    fn get_unique_tuple(&mut self, orig: &Tuple, r: &NatRange, manip: Manip, slot: usize) -> Tuple {
        if manip == Manip::Src && !r.random_all() {
            if Self::in_range(orig, r) {
                if !self.nat_used_tuple(orig, slot) {
                    return *orig;
                }
            } else if let Some(t) = self.find_appropriate_src(orig, r) {
                if !self.nat_used_tuple(&t, slot) {
                    return t;
                }
            }
        }
        let mut t = *orig;
        find_best_ips_proto(&mut t, r, manip);
        if !r.random_all() {
            match r.ports {
                Some((lo, hi)) => {
                    if l4proto_in_range(&t, manip, lo, hi)
                        && (lo == hi || !self.nat_used_tuple(&t, slot))
                    {
                        return t;
                    }
                }
                None => {
                    if !self.nat_used_tuple(&t, slot) {
                        return t;
                    }
                }
            }
        }
        self.l4proto_unique_tuple(&mut t, r, manip, slot);
        t
    }

    /// `nf_nat_l4proto_unique_tuple`: search the port (ICMP: id) range from a random offset,
    /// at most 128 tries, halving the window and re-drawing the offset while it is ≥ 16.
    fn l4proto_unique_tuple(&mut self, t: &mut Tuple, r: &NatRange, manip: Manip, slot: usize) {
        let icmp = is_icmp(t.proto);
        if !icmp && !has_ports(t.proto) {
            return;
        }
        let src_key = icmp || manip == Manip::Src;
        let key = if src_key { t.sport } else { t.dport };
        let (min, size): (u32, u32) = match (r.ports, icmp) {
            (None, true) => (0, 65536),
            (Some((lo, hi)), _) => {
                let (lo, hi) = if hi < lo { (hi, lo) } else { (lo, hi) };
                (u32::from(lo), u32::from(hi) - u32::from(lo) + 1)
            }
            (None, false) => {
                if manip == Manip::Dst {
                    return; // DNAT never changes a port it was not given
                }
                if key < 1024 {
                    if key < 512 {
                        (1, 511)
                    } else {
                        (600, 1023 - 600 + 1)
                    }
                } else {
                    (1024, 65535 - 1024 + 1)
                }
            }
        };
        let mut off: u16 = self.nat_rng.next_u32() as u16;
        let mut attempts = size.min(128);
        loop {
            for _ in 0..attempts {
                let port = (min + u32::from(off) % size) as u16;
                if src_key {
                    t.sport = port;
                } else {
                    t.dport = port;
                }
                if !self.nat_used_tuple(t, slot) {
                    return;
                }
                off = off.wrapping_add(1);
            }
            if attempts >= size || attempts < 16 {
                return;
            }
            attempts /= 2;
            off = self.nat_rng.next_u32() as u16;
        }
    }
}

/// `l4proto_in_range`: is the manip's port (ICMP: the id) within `lo..=hi`?
fn l4proto_in_range(t: &Tuple, manip: Manip, lo: u16, hi: u16) -> bool {
    if is_icmp(t.proto) {
        return t.sport >= lo && t.sport <= hi;
    }
    if !has_ports(t.proto) {
        return true;
    }
    let p = match manip {
        Manip::Src => t.sport,
        Manip::Dst => t.dport,
    };
    p >= lo && p <= hi
}

/// `nf_ct_invert_tuple` for NAT purposes: like [`Tuple::invert`], but an ICMP type without
/// an inverse is kept (the kernel's NAT only ever inverts tuples that came from an entry).
pub(crate) fn invert_for_nat(t: &Tuple) -> Tuple {
    t.invert().unwrap_or_else(|| {
        let mut s = t.swapped();
        if is_icmp(t.proto) {
            s.sport = t.sport;
            s.dport = t.dport;
        }
        s
    })
}

/// `find_best_ips_proto`: pick the address within the range; with more than one, by the
/// kernel's own deterministic `jhash2` of the addresses, so the choice matches a real node.
fn find_best_ips_proto(t: &mut Tuple, r: &NatRange, manip: Manip) {
    let Some((lo, hi)) = r.addrs else {
        return;
    };
    if lo == hi {
        match manip {
            Manip::Src => t.src = lo,
            Manip::Dst => t.dst = lo,
        }
        return;
    }
    let v4 = t.src.is_ipv4();
    let max = if v4 { 0 } else { 3 };
    let mut src = inet_addr_words(t.src);
    let mut dst = inet_addr_words(t.dst);
    let lo_w = inet_addr_words(lo);
    let hi_w = inet_addr_words(hi);
    let mut j = jhash2(&src, if r.persistent { 0 } else { dst[max] });
    let mut full_range = false;
    for i in 0..=max {
        let (minip, dist) = if !full_range {
            let minip = u32::from_be(lo_w[i]);
            let maxip = u32::from_be(hi_w[i]);
            (minip, maxip.wrapping_sub(minip).wrapping_add(1))
        } else {
            (0, u32::MAX)
        };
        let v = minip.wrapping_add(reciprocal_scale(j, dist)).to_be();
        match manip {
            Manip::Src => src[i] = v,
            Manip::Dst => dst[i] = v,
        }
        if v != hi_w[i] {
            full_range = true;
        }
        if !r.persistent {
            j ^= dst[i];
        }
    }
    let words = match manip {
        Manip::Src => src,
        Manip::Dst => dst,
    };
    let addr = words_to_addr(words, v4);
    match manip {
        Manip::Src => t.src = addr,
        Manip::Dst => t.dst = addr,
    }
}

fn words_to_addr(w: [u32; 4], v4: bool) -> IpAddr {
    if v4 {
        IpAddr::from(w[0].to_le_bytes())
    } else {
        let mut o = [0u8; 16];
        for i in 0..4 {
            o[i * 4..i * 4 + 4].copy_from_slice(&w[i].to_le_bytes());
        }
        IpAddr::from(o)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_text_round_trips() {
        for s in [
            "10.244.1.7",
            "10.244.1.7:53",
            "10.0.0.1-10.0.0.9:1024-65535",
            "[fd00::1]:53",
            "fd00::1-fd00::9",
            ":8080",
        ] {
            let r: NatRange = s.parse().unwrap();
            assert_eq!(r.to_string(), s);
        }
    }

    #[test]
    fn bad_ranges_say_what_was_expected() {
        for s in [
            "",
            "10.0.0.300",
            "10.0.0.1:70000",
            "10.0.0.9-10.0.0.1",
            "10.0.0.1:90-80",
            "10.0.0.1-fd00::1",
            "[fd00::1:53",
        ] {
            let e = s.parse::<NatRange>().unwrap_err();
            assert!(e.to_string().contains("expected ip[-ip]"), "{e}");
        }
    }

    #[test]
    fn best_ip_is_within_range_and_deterministic() {
        let r: NatRange = "10.0.0.1-10.0.0.9".parse().unwrap();
        let mut seen = std::collections::BTreeSet::new();
        for i in 0..200u32 {
            let mut t = Tuple {
                src: IpAddr::from((0x0a01_0000u32 + i).to_be_bytes()),
                dst: "10.96.0.10".parse().unwrap(),
                sport: 1000,
                dport: 53,
                proto: 17,
            };
            find_best_ips_proto(&mut t, &r, Manip::Dst);
            assert!(addr_in(
                t.dst,
                "10.0.0.1".parse().unwrap(),
                "10.0.0.9".parse().unwrap()
            ));
            seen.insert(t.dst);
        }
        assert!(seen.len() > 5, "spread over the range: {seen:?}");
    }
}

/// The key of [`BySource`]: protocol, source address, source port of the original tuple.
pub(crate) type SrcKey = (u8, IpAddr, u16);

/// The entries SNAT'd from each source (the kernel's `nf_nat_bysource` hash, which
/// `find_appropriate_src` walks to give a source the mapping it already has), oldest first.
///
/// A hash map: it grows with every masqueraded flow, and an ordered map's search from the
/// root costs a cache miss per level at a few hundred thousand sources. It is only ever
/// looked up by key, never iterated, so its order cannot reach any output; the hasher is
/// fixed ([`FxHasher`]), so runs are reproducible anyway. Most sources have one entry, kept
/// inline.
#[derive(Clone, Debug, Default)]
pub(crate) struct BySource {
    map: std::collections::HashMap<SrcKey, SrcIds, std::hash::BuildHasherDefault<FxHasher>>,
}

#[derive(Clone, Debug)]
enum SrcIds {
    One(EntryId),
    Many(Vec<EntryId>),
}

impl BySource {
    pub(crate) fn insert(&mut self, key: SrcKey, id: EntryId) {
        use std::collections::hash_map::Entry;
        match self.map.entry(key) {
            Entry::Vacant(v) => {
                v.insert(SrcIds::One(id));
            }
            Entry::Occupied(mut o) => {
                let ids = o.get_mut();
                match ids {
                    SrcIds::One(first) => *ids = SrcIds::Many(vec![*first, id]),
                    SrcIds::Many(v) => v.push(id),
                }
            }
        }
    }

    /// The entries of `key`, oldest first.
    pub(crate) fn get(&self, key: SrcKey) -> &[EntryId] {
        match self.map.get(&key) {
            None => &[],
            Some(SrcIds::One(id)) => std::slice::from_ref(id),
            Some(SrcIds::Many(v)) => v,
        }
    }

    pub(crate) fn remove(&mut self, key: SrcKey, id: EntryId) {
        let gone = match self.map.get_mut(&key) {
            None => false,
            Some(SrcIds::One(x)) => *x == id,
            Some(SrcIds::Many(v)) => {
                v.retain(|x| *x != id);
                v.is_empty()
            }
        };
        if gone {
            self.map.remove(&key);
        }
    }
}

/// A fixed, fast hasher for small keys (the multiply-rotate scheme of rustc's FxHasher):
/// no per-process random seed, so nothing about a run depends on the process.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct FxHasher(u64);

impl FxHasher {
    const K: u64 = 0x51_7c_c1_b7_27_22_0a_95;
    #[inline]
    fn add(&mut self, w: u64) {
        self.0 = (self.0.rotate_left(5) ^ w).wrapping_mul(Self::K);
    }
}

impl std::hash::Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            self.add(u64::from_le_bytes(c.try_into().unwrap_or([0; 8])));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u16(&mut self, i: u16) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.add(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.add(i);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.add(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        // The multiply leaves the low bits, which pick the bucket, poorly mixed: rotate the
        // well-mixed high bits down (as rustc-hash 2 does).
        self.0.rotate_left(26)
    }
}
