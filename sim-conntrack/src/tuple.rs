//! Connection tuples (`struct nf_conntrack_tuple`), directions, and the seeded tuple hash.

use sim_core::packet::{
    icmp, IPPROTO_ICMP, IPPROTO_ICMPV6, IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP,
};
use sim_core::{Packet, L4};
use std::fmt;
use std::net::{IpAddr, Ipv4Addr};

/// IP protocol number of UDP-Lite.
pub const IPPROTO_UDPLITE: u8 = 136;
/// IP protocol number of GRE.
pub const IPPROTO_GRE: u8 = 47;
/// IP protocol number of DCCP.
pub const IPPROTO_DCCP: u8 = 33;

/// The direction of a packet relative to its connection (`enum ip_conntrack_dir`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dir {
    /// The direction of the packet that created the entry (`IP_CT_DIR_ORIGINAL`).
    Original = 0,
    /// The other way (`IP_CT_DIR_REPLY`).
    Reply = 1,
}

impl Dir {
    /// The other direction.
    pub fn flip(self) -> Dir {
        match self {
            Dir::Original => Dir::Reply,
            Dir::Reply => Dir::Original,
        }
    }
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// What conntrack keys a connection by: addresses, protocol and the protocol's identifiers.
///
/// For TCP, UDP, UDP-Lite, SCTP and DCCP the identifiers are the ports. For ICMP/ICMPv6,
/// `sport` holds the echo identifier and `dport` holds `type << 8 | code`, as the kernel keeps
/// `src.u.icmp.id` and `dst.u.icmp.{type,code}`. Other protocols have both at 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tuple {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (ICMP: identifier).
    pub sport: u16,
    /// Destination port (ICMP: type << 8 | code).
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
}

/// Whether the protocol's tuple carries ports.
pub fn has_ports(proto: u8) -> bool {
    matches!(
        proto,
        IPPROTO_TCP | IPPROTO_UDP | IPPROTO_UDPLITE | IPPROTO_SCTP | IPPROTO_DCCP
    )
}

/// Whether `proto` is ICMP or ICMPv6.
pub fn is_icmp(proto: u8) -> bool {
    proto == IPPROTO_ICMP || proto == IPPROTO_ICMPV6
}

/// The reply type of an ICMP query type (`invmap[]` of nf_conntrack_proto_icmp.c and
/// nf_conntrack_proto_icmpv6.c), or `None` when the type has no inverse.
pub fn icmp_inverse_type(v4: bool, t: u8) -> Option<u8> {
    if v4 {
        Some(match t {
            icmp::ECHO_REQUEST => icmp::ECHO_REPLY,
            icmp::ECHO_REPLY => icmp::ECHO_REQUEST,
            icmp::TIMESTAMP => icmp::TIMESTAMP_REPLY,
            icmp::TIMESTAMP_REPLY => icmp::TIMESTAMP,
            icmp::INFO_REQUEST => icmp::INFO_REPLY,
            icmp::INFO_REPLY => icmp::INFO_REQUEST,
            icmp::ADDRESS => icmp::ADDRESS_REPLY,
            icmp::ADDRESS_REPLY => icmp::ADDRESS,
            _ => return None,
        })
    } else {
        Some(match t {
            icmp::V6_ECHO_REQUEST => icmp::V6_ECHO_REPLY,
            icmp::V6_ECHO_REPLY => icmp::V6_ECHO_REQUEST,
            139 => 140, // node information query / response
            140 => 139,
            _ => return None,
        })
    }
}

/// Whether an ICMP type may create an entry (`valid_new[]` of icmp_packet): the requests.
pub fn icmp_type_creates(v4: bool, t: u8) -> bool {
    if v4 {
        matches!(
            t,
            icmp::ECHO_REQUEST | icmp::TIMESTAMP | icmp::INFO_REQUEST | icmp::ADDRESS
        )
    } else {
        matches!(t, icmp::V6_ECHO_REQUEST | 139)
    }
}

/// Whether an ICMP type is an error that quotes another packet (`icmp_is_err`; for ICMPv6,
/// every type below 128).
pub fn icmp_is_error(v4: bool, t: u8) -> bool {
    if v4 {
        matches!(t, 3 | 4 | 5 | 11 | 12)
    } else {
        t < 128
    }
}

/// An ICMP packet's tuple "ports": the query id (0 for an error) and type << 8 | code.
#[inline]
fn icmp_ports(icmp_type: u8, code: u8, body: sim_core::IcmpBody) -> (u16, u16) {
    let id = match body {
        sim_core::IcmpBody::Query { id, .. } => id,
        _ => 0,
    };
    (id, u16::from(icmp_type) << 8 | u16::from(code))
}

impl Tuple {
    /// The tuple of a packet (`nf_ct_get_tuple`), before any lookup.
    pub fn from_packet(p: &Packet) -> Tuple {
        let (sport, dport) = match p.l4 {
            L4::Tcp { sport, dport, .. } | L4::Udp { sport, dport } | L4::Sctp { sport, dport } => {
                (sport, dport)
            }
            L4::Icmp {
                icmp_type,
                code,
                body,
            } => icmp_ports(icmp_type, code, body),
            L4::Other { .. } => (0, 0),
        };
        Tuple {
            src: p.src,
            dst: p.dst,
            sport,
            dport,
            proto: p.protocol(),
        }
    }

    /// The tuple of the other direction (`nf_ct_invert_tuple`), or `None` for an ICMP type
    /// without an inverse.
    pub fn invert(&self) -> Option<Tuple> {
        if is_icmp(self.proto) {
            let v4 = self.src.is_ipv4();
            let t = icmp_inverse_type(v4, self.icmp_type())?;
            return Some(Tuple {
                src: self.dst,
                dst: self.src,
                sport: self.sport,
                dport: u16::from(t) << 8 | (self.dport & 0xff),
                proto: self.proto,
            });
        }
        Some(self.swapped())
    }

    /// Addresses and ports swapped, whatever the protocol.
    pub(crate) fn swapped(&self) -> Tuple {
        Tuple {
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
            proto: self.proto,
        }
    }

    /// For ICMP: the message type.
    pub fn icmp_type(&self) -> u8 {
        (self.dport >> 8) as u8
    }
    /// For ICMP: the message code.
    pub fn icmp_code(&self) -> u8 {
        (self.dport & 0xff) as u8
    }
    /// For ICMP: the identifier.
    pub fn icmp_id(&self) -> u16 {
        self.sport
    }
}

/// An IPv4 tuple as iptables rules read it (`-m conntrack --ctorigsrc` …); an IPv6
/// address reads 0.0.0.0 (iptables never sees IPv6 packets).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TupleV4 {
    /// Source address (0.0.0.0 for an IPv6 one).
    pub src: Ipv4Addr,
    /// Destination address (0.0.0.0 for an IPv6 one).
    pub dst: Ipv4Addr,
    /// Source port (ICMP: identifier), as in [`Tuple::sport`].
    pub sport: u16,
    /// Destination port (ICMP: type << 8 | code), as in [`Tuple::dport`].
    pub dport: u16,
    /// IP protocol number.
    pub proto: u8,
}

impl TupleV4 {
    /// The IPv4 view of a tuple: an IPv6 address reads 0.0.0.0.
    pub fn from_tuple(t: &Tuple) -> TupleV4 {
        let v4 = |a: IpAddr| match a {
            IpAddr::V4(v) => v,
            IpAddr::V6(_) => Ipv4Addr::UNSPECIFIED,
        };
        TupleV4 {
            src: v4(t.src),
            dst: v4(t.dst),
            sport: t.sport,
            dport: t.dport,
            proto: t.proto,
        }
    }
}

/// A tuple as the table stores, hashes and compares it: five machine words, equal exactly
/// when the tuples are equal, so that a lookup compares keys with a few XORs instead of
/// matching on address families.
///
/// Words 0–1 are the source address and 2–3 the destination (an IPv4 address is its value
/// and the constant 4; an IPv6 one its low 64 bits and its high 64 bits XOR 6), word 4 holds
/// `sport << 32 | dport << 16 | proto`, with bit 63 set for an IPv6 source and bit 62 for an
/// IPv6 destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Key(pub(crate) [u64; 5]);

const SRC_V6: u64 = 1 << 63;
const DST_V6: u64 = 1 << 62;
const PORTS_PROTO: u64 = (1 << 48) - 1;

impl Key {
    /// The key of a tuple.
    #[inline]
    pub(crate) fn from_tuple(t: &Tuple) -> Key {
        let (s0, s1) = addr_words(t.src);
        let (d0, d1) = addr_words(t.dst);
        let fam =
            if t.src.is_ipv6() { SRC_V6 } else { 0 } | if t.dst.is_ipv6() { DST_V6 } else { 0 };
        let ports = (u64::from(t.sport) << 32) | (u64::from(t.dport) << 16) | u64::from(t.proto);
        Key([s0, s1, d0, d1, ports | fam])
    }

    /// The key of a packet's tuple (`nf_ct_get_tuple`): what `Key::from_tuple` gives for
    /// `Tuple::from_packet`, with one look at the L4 header for both ports and protocol.
    #[inline]
    pub(crate) fn from_packet(p: &Packet) -> Key {
        let (s0, s1) = addr_words(p.src);
        let (d0, d1) = addr_words(p.dst);
        let fam =
            if p.src.is_ipv6() { SRC_V6 } else { 0 } | if p.dst.is_ipv6() { DST_V6 } else { 0 };
        let (sport, dport, proto) = match p.l4 {
            L4::Tcp { sport, dport, .. } => (sport, dport, IPPROTO_TCP),
            L4::Udp { sport, dport } => (sport, dport, IPPROTO_UDP),
            L4::Sctp { sport, dport } => (sport, dport, IPPROTO_SCTP),
            L4::Icmp {
                icmp_type,
                code,
                body,
            } => {
                let (id, tc) = icmp_ports(icmp_type, code, body);
                let proto = if p.src.is_ipv4() {
                    IPPROTO_ICMP
                } else {
                    IPPROTO_ICMPV6
                };
                (id, tc, proto)
            }
            L4::Other { proto } => (0, 0, proto),
        };
        let ports = (u64::from(sport) << 32) | (u64::from(dport) << 16) | u64::from(proto);
        Key([s0, s1, d0, d1, ports | fam])
    }

    /// The tuple back.
    pub(crate) fn tuple(&self) -> Tuple {
        Tuple {
            src: self.src_addr(),
            dst: self.dst_addr(),
            sport: self.sport(),
            dport: self.dport(),
            proto: self.proto(),
        }
    }

    /// The tuple as rules read it ([`TupleV4`]), straight from the words: an IPv4 address
    /// is word 0 or 2 as it is, an IPv6 one reads 0.0.0.0.
    #[inline]
    pub(crate) fn v4(&self) -> TupleV4 {
        let w = &self.0;
        let addr = |word: u64, v6: bool| {
            if v6 {
                Ipv4Addr::UNSPECIFIED
            } else {
                Ipv4Addr::from(word as u32)
            }
        };
        TupleV4 {
            src: addr(w[0], w[4] & SRC_V6 != 0),
            dst: addr(w[2], w[4] & DST_V6 != 0),
            sport: (w[4] >> 32) as u16,
            dport: (w[4] >> 16) as u16,
            proto: w[4] as u8,
        }
    }

    /// The source address, from words 0–1.
    #[inline]
    pub(crate) fn src_addr(&self) -> IpAddr {
        key_addr(self.0[0], self.0[1], self.0[4] & SRC_V6 != 0)
    }

    /// The destination address, from words 2–3.
    #[inline]
    pub(crate) fn dst_addr(&self) -> IpAddr {
        key_addr(self.0[2], self.0[3], self.0[4] & DST_V6 != 0)
    }

    /// The source port (ICMP: identifier).
    #[inline]
    pub(crate) fn sport(&self) -> u16 {
        (self.0[4] >> 32) as u16
    }

    /// The destination port (ICMP: type << 8 | code).
    #[inline]
    pub(crate) fn dport(&self) -> u16 {
        (self.0[4] >> 16) as u16
    }

    /// The IP protocol number.
    #[inline]
    pub(crate) fn proto(&self) -> u8 {
        self.0[4] as u8
    }

    /// The key of the inverted tuple (`nf_ct_invert_tuple`) when that is a plain swap of
    /// addresses and ports, as for every protocol but ICMP and ICMPv6 (`None` for those:
    /// their inverse maps the message type, see [`Tuple::invert`]).
    #[inline]
    pub(crate) fn swapped(&self) -> Option<Key> {
        let w = &self.0;
        if is_icmp(self.proto()) {
            return None;
        }
        let sport = (w[4] >> 32) & 0xffff;
        let dport = (w[4] >> 16) & 0xffff;
        let fam = (if w[4] & SRC_V6 != 0 { DST_V6 } else { 0 })
            | (if w[4] & DST_V6 != 0 { SRC_V6 } else { 0 });
        let rest = (dport << 32) | (sport << 16) | u64::from(self.proto()) | fam;
        Some(Key([w[2], w[3], w[0], w[1], rest]))
    }

    /// Equality without branches: the common lookup compares one key and finds it equal.
    #[inline]
    pub(crate) fn same(&self, o: &Key) -> bool {
        let (a, b) = (&self.0, &o.0);
        ((a[0] ^ b[0]) | (a[1] ^ b[1]) | (a[2] ^ b[2]) | (a[3] ^ b[3]) | (a[4] ^ b[4])) == 0
    }

    /// The seeded hash of the tuple: decides its place in the index and its simulated
    /// `nf_conntrack_buckets` bucket.
    #[inline]
    pub(crate) fn hash(&self, seed: &HashSeed) -> u32 {
        let w = &self.0;
        let mut h = folded_mul(w[0] ^ seed.k[0], w[1] ^ seed.k[1]);
        h = folded_mul(h ^ w[2], w[3] ^ seed.k[2]);
        h = folded_mul(h ^ (w[4] & PORTS_PROTO), seed.k[3]);
        (h ^ (h >> 32)) as u32
    }
}

impl Key {
    /// Whether both addresses are IPv4, so that the key fits a [`Slim`] by itself.
    #[inline(always)]
    pub(crate) fn is_narrow(&self) -> bool {
        self.0[4] & (SRC_V6 | DST_V6) == 0
    }

    /// The key as an entry stores it ([`Slim`]).
    #[inline(always)]
    pub(crate) fn slim(&self) -> Slim {
        let w = &self.0;
        if self.is_narrow() {
            Slim([(w[0] << 32) | w[2], w[4]])
        } else {
            Slim([0, w[4]])
        }
    }
}

/// A [`Key`] as an entry stores it, in 16 bytes, so that both tuples, the deadline and the
/// tracker state share one cache line. A key whose addresses are both IPv4 (the narrow
/// case) is complete here: word 0 is `src << 32 | dst`, word 1 is the key's word 4. A key
/// with an IPv6 address keeps word 1 (whose family bits say so) and a zero word 0, and the
/// whole key lives in the table's side map of wide entries. Two slims are equal exactly
/// when their keys are, for narrow keys; for wide ones, equal slims still need the side
/// map's keys compared.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Slim(pub(crate) [u64; 2]);

impl Slim {
    /// Whether the key is complete here (both addresses IPv4).
    #[inline(always)]
    pub(crate) fn is_narrow(&self) -> bool {
        self.0[1] & (SRC_V6 | DST_V6) == 0
    }

    /// The key of a narrow slim (meaningless for a wide one).
    #[inline(always)]
    pub(crate) fn narrow_key(&self) -> Key {
        let w = &self.0;
        Key([w[0] >> 32, 0x4, w[0] & 0xffff_ffff, 0x4, w[1]])
    }

    /// The IP protocol number.
    #[inline(always)]
    pub(crate) fn proto(&self) -> u8 {
        self.0[1] as u8
    }
}

/// The address [`addr_words`] made these two words of.
#[inline]
fn key_addr(lo: u64, hi: u64, v6: bool) -> IpAddr {
    if v6 {
        IpAddr::V6(std::net::Ipv6Addr::from(
            (u128::from(hi ^ 0x6) << 64) | u128::from(lo),
        ))
    } else {
        IpAddr::V4(Ipv4Addr::from(lo as u32))
    }
}

#[inline]
fn addr_words(a: IpAddr) -> (u64, u64) {
    match a {
        IpAddr::V4(v) => (u64::from(u32::from(v)), 0x4),
        IpAddr::V6(v) => {
            let x = u128::from(v);
            (x as u64, ((x >> 64) as u64) ^ 0x6)
        }
    }
}

#[inline]
fn folded_mul(a: u64, b: u64) -> u64 {
    let r = u128::from(a).wrapping_mul(u128::from(b));
    (r as u64) ^ ((r >> 64) as u64)
}

/// Keys of the tuple hash, drawn from the table's seeded stream.
#[derive(Clone, Debug)]
pub(crate) struct HashSeed {
    k: [u64; 4],
}

impl HashSeed {
    pub(crate) fn new(rng: &mut sim_core::SimRng) -> HashSeed {
        // Odd multipliers keep the folded multiply from collapsing.
        HashSeed {
            k: [
                rng.next_u64() | 1,
                rng.next_u64() | 1,
                rng.next_u64() | 1,
                rng.next_u64() | 1,
            ],
        }
    }
}

/// The kernel's `reciprocal_scale`: maps a 32-bit hash onto `0..n`.
#[inline]
pub(crate) fn reciprocal_scale(h: u32, n: u32) -> u32 {
    ((u64::from(h) * u64::from(n)) >> 32) as u32
}

/// conntrack-tools' protocol name column (`tcp`, `udp`, `icmp`, `icmpv6`, …, `unknown`).
pub fn ct_proto_name(proto: u8) -> &'static str {
    match proto {
        IPPROTO_TCP => "tcp",
        IPPROTO_UDP => "udp",
        IPPROTO_UDPLITE => "udplite",
        IPPROTO_ICMP => "icmp",
        IPPROTO_ICMPV6 => "icmpv6",
        IPPROTO_SCTP => "sctp",
        IPPROTO_GRE => "gre",
        IPPROTO_DCCP => "dccp",
        _ => "unknown",
    }
}

impl fmt::Display for Tuple {
    /// The tuple as conntrack-tools prints it: `src=A dst=B sport=P dport=Q`, ICMP as
    /// `src=A dst=B type=T code=C id=I`, others `src=A dst=B`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "src={} dst={}", self.src, self.dst)?;
        if has_ports(self.proto) {
            write!(f, " sport={} dport={}", self.sport, self.dport)?;
        } else if is_icmp(self.proto) {
            write!(
                f,
                " type={} code={} id={}",
                self.icmp_type(),
                self.icmp_code(),
                self.icmp_id()
            )?;
        }
        Ok(())
    }
}

/// Bob Jenkins' lookup3 `jhash2` as the kernel has it (`include/linux/jhash.h`), used where
/// the kernel's choice is deterministic and worth reproducing exactly (NAT address selection,
/// and sim-netfilter's ipset buckets).
pub fn jhash2(k: &[u32], initval: u32) -> u32 {
    #[inline]
    fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
        *a = a.wrapping_sub(*c);
        *a ^= c.rotate_left(4);
        *c = c.wrapping_add(*b);
        *b = b.wrapping_sub(*a);
        *b ^= a.rotate_left(6);
        *a = a.wrapping_add(*c);
        *c = c.wrapping_sub(*b);
        *c ^= b.rotate_left(8);
        *b = b.wrapping_add(*a);
        *a = a.wrapping_sub(*c);
        *a ^= c.rotate_left(16);
        *c = c.wrapping_add(*b);
        *b = b.wrapping_sub(*a);
        *b ^= a.rotate_left(19);
        *a = a.wrapping_add(*c);
        *c = c.wrapping_sub(*b);
        *c ^= b.rotate_left(4);
        *b = b.wrapping_add(*a);
    }
    #[inline]
    fn fin(a: &mut u32, b: &mut u32, c: &mut u32) {
        *c ^= *b;
        *c = c.wrapping_sub(b.rotate_left(14));
        *a ^= *c;
        *a = a.wrapping_sub(c.rotate_left(11));
        *b ^= *a;
        *b = b.wrapping_sub(a.rotate_left(25));
        *c ^= *b;
        *c = c.wrapping_sub(b.rotate_left(16));
        *a ^= *c;
        *a = a.wrapping_sub(c.rotate_left(4));
        *b ^= *a;
        *b = b.wrapping_sub(a.rotate_left(14));
        *c ^= *b;
        *c = c.wrapping_sub(b.rotate_left(24));
    }
    let init = 0xdead_beefu32
        .wrapping_add((k.len() as u32) << 2)
        .wrapping_add(initval);
    let (mut a, mut b, mut c) = (init, init, init);
    let mut rest = k;
    while rest.len() > 3 {
        a = a.wrapping_add(rest[0]);
        b = b.wrapping_add(rest[1]);
        c = c.wrapping_add(rest[2]);
        mix(&mut a, &mut b, &mut c);
        rest = &rest[3..];
    }
    match rest.len() {
        3 => {
            c = c.wrapping_add(rest[2]);
            b = b.wrapping_add(rest[1]);
            a = a.wrapping_add(rest[0]);
            fin(&mut a, &mut b, &mut c);
        }
        2 => {
            b = b.wrapping_add(rest[1]);
            a = a.wrapping_add(rest[0]);
            fin(&mut a, &mut b, &mut c);
        }
        1 => {
            a = a.wrapping_add(rest[0]);
            fin(&mut a, &mut b, &mut c);
        }
        _ => {}
    }
    c
}

/// An address as the four 32-bit words of the kernel's `union nf_inet_addr`, each read from
/// memory in network order on a little-endian machine (what `jhash2((u32 *)&addr, 4, …)` sees).
pub(crate) fn inet_addr_words(a: IpAddr) -> [u32; 4] {
    match a {
        IpAddr::V4(v) => [u32::from_le_bytes(v.octets()), 0, 0, 0],
        IpAddr::V6(v) => {
            let o = v.octets();
            let w = |i: usize| u32::from_le_bytes([o[i], o[i + 1], o[i + 2], o[i + 3]]);
            [w(0), w(4), w(8), w(12)]
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use sim_core::{IcmpBody, InnerHeader, TcpFlags};

    /// An address of either family (a packet mixing them, which the constructors never
    /// make, must still give the same key both ways).
    fn any_addr() -> impl Strategy<Value = IpAddr> {
        prop_oneof![
            any::<u32>().prop_map(|x| IpAddr::V4(Ipv4Addr::from(x))),
            any::<u128>().prop_map(|x| IpAddr::V6(std::net::Ipv6Addr::from(x))),
        ]
    }

    fn any_l4() -> impl Strategy<Value = L4> {
        let body = prop_oneof![
            (any::<u16>(), any::<u16>()).prop_map(|(id, seq)| IcmpBody::Query { id, seq }),
            Just(IcmpBody::Other),
            (any::<u16>(), any::<u16>()).prop_map(|(sport, dport)| IcmpBody::Error(InnerHeader {
                src: IpAddr::V4(Ipv4Addr::LOCALHOST),
                dst: IpAddr::V4(Ipv4Addr::LOCALHOST),
                proto: 17,
                sport,
                dport,
                icmp_type: 0,
                ttl: 64,
            })),
        ];
        prop_oneof![
            (any::<u16>(), any::<u16>(), any::<u8>()).prop_map(|(sport, dport, f)| L4::Tcp {
                sport,
                dport,
                flags: TcpFlags(f),
                seq: 0,
                ack: 0,
                win: sim_core::packet::DEFAULT_TCP_WINDOW,
                opts: sim_core::TcpOpts::NONE,
            }),
            (any::<u16>(), any::<u16>()).prop_map(|(sport, dport)| L4::Udp { sport, dport }),
            (any::<u16>(), any::<u16>()).prop_map(|(sport, dport)| L4::Sctp { sport, dport }),
            (any::<u8>(), any::<u8>(), body).prop_map(|(icmp_type, code, body)| L4::Icmp {
                icmp_type,
                code,
                body
            }),
            any::<u8>().prop_map(|proto| L4::Other { proto }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]

        /// `Key::from_packet` reads the packet directly; it must be the key of its tuple.
        #[test]
        fn key_of_a_packet_is_the_key_of_its_tuple(
            src in any_addr(),
            dst in any_addr(),
            l4 in any_l4(),
        ) {
            let mut p = Packet::other(src, dst, 0);
            p.l4 = l4;
            let want = Key::from_tuple(&Tuple::from_packet(&p));
            prop_assert_eq!(Key::from_packet(&p), want);
            prop_assert_eq!(Key::from_packet(&p).tuple(), Tuple::from_packet(&p));
        }

        /// A narrow key (both addresses IPv4) comes back whole from its [`Slim`]; a wide one
        /// keeps its ports, protocol and families there; slims of different narrow keys
        /// differ, and a narrow slim never equals a wide one.
        #[test]
        fn slim_keys_round_trip(
            a in (any_addr(), any_addr(), any_l4()),
            b in (any_addr(), any_addr(), any_l4()),
        ) {
            let key = |(src, dst, l4): &(IpAddr, IpAddr, L4)| {
                let mut p = Packet::other(*src, *dst, 0);
                p.l4 = *l4;
                Key::from_packet(&p)
            };
            let (ka, kb) = (key(&a), key(&b));
            let (sa, sb) = (ka.slim(), kb.slim());
            prop_assert_eq!(sa.is_narrow(), ka.is_narrow());
            prop_assert_eq!(sa.proto(), ka.proto());
            if ka.is_narrow() {
                prop_assert_eq!(sa.narrow_key(), ka);
            } else {
                prop_assert_eq!(sa.0[1], ka.0[4]);
            }
            if ka.is_narrow() && kb.is_narrow() {
                prop_assert_eq!(sa == sb, ka == kb);
            }
            if ka.is_narrow() != kb.is_narrow() {
                prop_assert!(sa != sb);
            }
        }
    }

    #[test]
    fn icmp_echo_inverts_to_reply() {
        let p = Packet::icmp_echo_request(
            "10.0.0.1".parse().unwrap(),
            "10.0.0.2".parse().unwrap(),
            7,
            1,
        );
        let t = Tuple::from_packet(&p);
        assert_eq!(
            t.to_string(),
            "src=10.0.0.1 dst=10.0.0.2 type=8 code=0 id=7"
        );
        assert_eq!(
            t.invert().unwrap().to_string(),
            "src=10.0.0.2 dst=10.0.0.1 type=0 code=0 id=7"
        );
        let mut u = t;
        u.dport = 3 << 8;
        assert_eq!(u.invert(), None);
    }

    #[test]
    fn jhash2_known_values() {
        // Fixed points of lookup3's hashword(): empty input is the init value, as in the
        // reference implementation; one-word inputs differ by word.
        assert_eq!(jhash2(&[], 0), 0xdeadbeef);
        assert_ne!(jhash2(&[1], 0), jhash2(&[2], 0));
        assert_ne!(jhash2(&[1, 0, 0, 0], 0), jhash2(&[1, 0, 0, 0], 1));
    }

    #[test]
    fn keys_round_trip_and_tell_families_apart() {
        let v4: IpAddr = "10.1.2.3".parse().unwrap();
        // The IPv6 address whose words would equal 10.1.2.3's without the family bits.
        let v6: IpAddr = "0:0:0:2::a01:203".parse().unwrap();
        let t = |src, dst, sport, dport, proto| Tuple {
            src,
            dst,
            sport,
            dport,
            proto,
        };
        let all = [
            t(v4, v4, 1, 2, 17),
            t(v4, v6, 1, 2, 17),
            t(v6, v4, 1, 2, 17),
            t(v6, v6, 1, 2, 17),
            t(v4, v4, 2, 1, 17),
            t(v4, v4, 1, 2, 6),
            t(v4, v4, 65535, 65535, 255),
            t(v4, v4, 7, 8 << 8, 1),
            t(v6, v6, 7, 128 << 8, 58),
        ];
        for a in &all {
            assert_eq!(Key::from_tuple(a).tuple(), *a);
            // A plain swap exactly when the inverse is one; ICMP maps the type instead.
            let want = (!is_icmp(a.proto)).then(|| Key::from_tuple(&a.swapped()));
            assert_eq!(Key::from_tuple(a).swapped(), want, "{a}");
            if !is_icmp(a.proto) {
                assert_eq!(a.invert(), Some(a.swapped()));
            }
            for b in &all {
                assert_eq!(
                    Key::from_tuple(a).same(&Key::from_tuple(b)),
                    a == b,
                    "{a} {b}"
                );
            }
        }
    }

    #[test]
    fn reciprocal_scale_covers_range() {
        assert_eq!(reciprocal_scale(0, 10), 0);
        assert_eq!(reciprocal_scale(u32::MAX, 10), 9);
    }
}
#[cfg(test)]
mod hash_quality {
    use super::*;

    /// Linear probing stays short for the address patterns a cluster produces (clients in
    /// one subnet, a handful of services, sequential ports): the seeded hash spreads them.
    #[test]
    fn probes_stay_short_for_sequential_clients() {
        let mut rng = sim_core::SimRng::derive(1, "hash-quality");
        let seed = HashSeed::new(&mut rng);
        let bits = 18u32;
        let mut occ = vec![false; 1 << bits];
        let mut total = 0u64;
        let n = 50_000u32;
        for i in 0..n {
            let c = IpAddr::V4(std::net::Ipv4Addr::from(0x0a00_0000 + i / 50));
            let s = IpAddr::V4(std::net::Ipv4Addr::new(10, 96, 0, (i % 4) as u8 + 1));
            let t = Tuple {
                src: c,
                dst: s,
                sport: 20000 + (i % 50) as u16,
                dport: 53,
                proto: 17,
            };
            for tt in [t, t.swapped()] {
                let mut pos = (Key::from_tuple(&tt).hash(&seed) >> (32 - bits)) as usize;
                while occ[pos] {
                    pos = (pos + 1) & ((1 << bits) - 1);
                    total += 1;
                }
                occ[pos] = true;
            }
        }
        let avg = total as f64 / f64::from(2 * n);
        assert!(avg < 0.6, "average probe length {avg} at load 0.38");
    }
}
