//! What a DNS server knows: which names exist and the records each holds, and how it answers a
//! query over UDP (truncated with TC past the limit) or TCP.

use super::wire::{Answer, DnsNames, NameId, QType, Query, Rcode, UDP_CLASSIC_LIMIT};
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// The records of one name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ZoneEntry {
    /// Its `A` records.
    pub a: Vec<IpAddr>,
    /// Its `AAAA` records.
    pub aaaa: Vec<IpAddr>,
}

impl ZoneEntry {
    /// The records of type `t`.
    pub fn records(&self, t: QType) -> &[IpAddr] {
        match t {
            QType::A => &self.a,
            QType::Aaaa => &self.aaaa,
        }
    }
}

/// The `k`-th address (from 0) nfsim gives a name whose zone entry asks for a count of `A`
/// records: 198.18.0.0/15 (RFC 2544's benchmarking range), counted up.
pub fn counted_a(k: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(u32::from(Ipv4Addr::new(198, 18, 0, 1)) + k))
}

/// The `k`-th counted `AAAA` address: 2001:db8::1 counted up (RFC 3849's documentation
/// prefix).
pub fn counted_aaaa(k: u32) -> IpAddr {
    IpAddr::V6(Ipv6Addr::from(
        u128::from(Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 1)) + u128::from(k),
    ))
}

/// A server's zone: names (by id in the run's [`DnsNames`]) and their records. A name not
/// here does not exist (NXDOMAIN); a name here without records of the type asked answers
/// NOERROR with none (NODATA).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Zone {
    entries: BTreeMap<NameId, ZoneEntry>,
}

/// How an answer travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Transport {
    /// A UDP datagram: at most 512 octets, or the query's EDNS0 size when it is larger.
    Udp,
    /// A TCP stream: up to 65535 octets, never truncated.
    Tcp,
}

impl Zone {
    /// An empty zone.
    pub fn new() -> Zone {
        Zone::default()
    }
    /// Adds records to `name` (creating it).
    pub fn insert(&mut self, name: NameId, entry: ZoneEntry) {
        let e = self.entries.entry(name).or_default();
        e.a.extend(entry.a);
        e.aaaa.extend(entry.aaaa);
    }
    /// The entry of `name`.
    pub fn get(&self, name: NameId) -> Option<&ZoneEntry> {
        self.entries.get(&name)
    }
    /// Whether the zone holds no name.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
    /// The names, in id order.
    pub fn names(&self) -> impl Iterator<Item = (NameId, &ZoneEntry)> {
        self.entries.iter().map(|(k, v)| (*k, v))
    }

    /// The answer to `q` over `transport`. Over UDP the message may take the larger of 512
    /// octets and the query's EDNS0 UDP size (RFC 6891 §6.2.5); past it the server keeps
    /// the records that fit and sets TC, as CoreDNS does (miekg/dns `Msg.Truncate`, called
    /// from CoreDNS's `request.Request.Scrub`).
    pub fn answer(&self, names: &DnsNames, q: Query, transport: Transport) -> Answer {
        let Some(entry) = self.entries.get(&q.name) else {
            return Answer {
                query: q,
                rcode: Rcode::NxDomain,
                records: 0,
                truncated: false,
            };
        };
        let have = entry.records(q.qtype).len().min(usize::from(u16::MAX)) as u16;
        let mut a = Answer {
            query: q,
            rcode: Rcode::NoError,
            records: have,
            truncated: false,
        };
        if transport == Transport::Udp {
            let limit = UDP_CLASSIC_LIMIT.max(q.edns_udp_size.map_or(0, usize::from));
            let full = a.wire_len(names);
            if full > limit {
                let over = full - limit;
                let per = q.qtype.record_len();
                let drop = over.div_ceil(per).min(usize::from(have));
                a.records = have - drop as u16;
                a.truncated = true;
            }
        }
        a
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zone(t: &mut DnsNames) -> (Zone, NameId, NameId) {
        let big = t.intern("big.example").unwrap();
        let small = t.intern("payment.shop").unwrap();
        let mut z = Zone::new();
        z.insert(
            big,
            ZoneEntry {
                a: (0..40).map(counted_a).collect(),
                aaaa: Vec::new(),
            },
        );
        z.insert(
            small,
            ZoneEntry {
                a: vec![counted_a(0)],
                aaaa: vec![counted_aaaa(0)],
            },
        );
        (z, big, small)
    }

    #[test]
    fn unknown_names_are_nxdomain_and_a_type_without_records_is_nodata() {
        let mut t = DnsNames::new();
        let (z, big, _) = zone(&mut t);
        let other = t.intern("payment.shop.default.svc.cluster.local").unwrap();
        let q = |name, qtype| Query {
            name,
            qtype,
            edns_udp_size: None,
        };
        let a = z.answer(&t, q(other, QType::A), Transport::Udp);
        assert_eq!((a.rcode, a.records), (Rcode::NxDomain, 0));
        let a = z.answer(&t, q(big, QType::Aaaa), Transport::Udp);
        assert_eq!(
            (a.rcode, a.records, a.truncated),
            (Rcode::NoError, 0, false)
        );
    }

    #[test]
    fn a_big_answer_is_truncated_over_udp_to_what_fits_and_whole_over_tcp() {
        let mut t = DnsNames::new();
        let (z, big, _) = zone(&mut t);
        let mut q = Query {
            name: big,
            qtype: QType::A,
            edns_udp_size: None,
        };
        let a = z.answer(&t, q, Transport::Udp);
        assert!(a.truncated);
        assert!(a.wire_len(&t) <= 512);
        assert!(a.wire_len(&t) + 16 > 512, "as many records as fit");
        // 12 + 13 + 4 = 29 octets before the records: (512 - 29) / 16 = 30.
        assert_eq!(a.records, 30);
        let a = z.answer(&t, q, Transport::Tcp);
        assert_eq!((a.records, a.truncated), (40, false));
        // EDNS0 with 1200 octets: 29 + 11 + 40 × 16 = 680 fits.
        q.edns_udp_size = Some(1200);
        let a = z.answer(&t, q, Transport::Udp);
        assert_eq!((a.records, a.truncated), (40, false));
    }
}
