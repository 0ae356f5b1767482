//! A DNS message in a packet's tag: the simulation's packets carry no payload, so a stub
//! resolver's query and a server's answer travel as a 64-bit [`sim_core::Packet::tag`] that
//! names the question (an interned [`NameId`] and the QTYPE) and, for an answer, its RCODE,
//! record count and TC bit. No allocation per packet; the bytes are made only for captures.
//!
//! Layout, from the top: bit 63 and 62 stay clear (injected and pcap packets use them),
//! bit 61 marks a DNS message, bits 40–60 hold the client number plus one (as
//! [`crate::cluster::apps::Tag`] does), bits 24–39 the name, bits 8–23 the lookup number
//! (query) or the record count (answer), bits 0–7 the flags below. [`crate::cluster::apps::Tag::unpack`]
//! reads the client of a DNS tag like any other.

use super::resolv_conf::GLIBC_EDNS_UDP_SIZE;
use super::wire::{Answer, NameId, QType, Query, Rcode};

/// The bit that marks a DNS message's tag.
pub const DNS_TAG: u64 = 1 << 61;

const AAAA: u64 = 1;
const EDNS: u64 = 1 << 1;
const RESPONSE: u64 = 1 << 2;
const NXDOMAIN: u64 = 1 << 3;
const TC: u64 = 1 << 4;

/// The largest client number a DNS tag holds (21 bits, less the one added).
pub const MAX_DNS_CLIENT: u32 = (1 << 21) - 2;

/// The tag of `client`'s query `q` of lookup `lookup` (its low 16 bits).
pub fn query_tag(client: u32, lookup: u32, q: Query) -> u64 {
    DNS_TAG
        | (u64::from(client.min(MAX_DNS_CLIENT)) + 1) << 40
        | u64::from(q.name.0) << 24
        | u64::from(lookup & 0xffff) << 8
        | if q.qtype == QType::Aaaa { AAAA } else { 0 }
        | if q.edns_udp_size.is_some() { EDNS } else { 0 }
}

/// The tag of the answer `a` to the query whose tag is `query_tag`.
pub fn answer_tag(query_tag: u64, a: Answer) -> u64 {
    (query_tag & !(0xffff << 8))
        | RESPONSE
        | u64::from(a.records) << 8
        | if a.rcode == Rcode::NxDomain {
            NXDOMAIN
        } else {
            0
        }
        | if a.truncated { TC } else { 0 }
}

/// What a DNS tag says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DnsMessage {
    /// A query, of lookup number `lookup` (low 16 bits).
    Query {
        /// The question (the EDNS0 size is glibc's, the only one sent).
        query: Query,
        /// The lookup's number, low 16 bits.
        lookup: u16,
    },
    /// An answer.
    Answer(Answer),
}

impl DnsMessage {
    /// The question asked or answered.
    pub fn query(&self) -> Query {
        match self {
            DnsMessage::Query { query, .. } => *query,
            DnsMessage::Answer(a) => a.query,
        }
    }
}

/// Reads a DNS tag; `None` for any other tag.
pub fn decode(tag: u64) -> Option<DnsMessage> {
    if tag & DNS_TAG == 0 || tag >> 62 != 0 {
        return None;
    }
    let query = Query {
        name: NameId(((tag >> 24) & 0xffff) as u16),
        qtype: if tag & AAAA != 0 {
            QType::Aaaa
        } else {
            QType::A
        },
        edns_udp_size: (tag & EDNS != 0).then_some(GLIBC_EDNS_UDP_SIZE),
    };
    let mid = ((tag >> 8) & 0xffff) as u16;
    Some(if tag & RESPONSE == 0 {
        DnsMessage::Query { query, lookup: mid }
    } else {
        DnsMessage::Answer(Answer {
            query,
            rcode: if tag & NXDOMAIN != 0 {
                Rcode::NxDomain
            } else {
                Rcode::NoError
            },
            records: mid,
            truncated: tag & TC != 0,
        })
    })
}

/// The client number (from 0) of a DNS tag.
pub fn client(tag: u64) -> Option<u32> {
    decode(tag)?;
    ((tag >> 40) & 0x1f_ffff).checked_sub(1).map(|c| c as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_and_its_answer_round_trip_through_the_tag() {
        let q = Query {
            name: NameId(513),
            qtype: QType::Aaaa,
            edns_udp_size: Some(GLIBC_EDNS_UDP_SIZE),
        };
        let t = query_tag(7, 70_000, q);
        assert_eq!(
            decode(t),
            Some(DnsMessage::Query {
                query: q,
                lookup: (70_000 & 0xffff) as u16
            })
        );
        assert_eq!(client(t), Some(7));
        let a = Answer {
            query: q,
            rcode: Rcode::NxDomain,
            records: 0,
            truncated: false,
        };
        assert_eq!(decode(answer_tag(t, a)), Some(DnsMessage::Answer(a)));
        let big = Answer {
            rcode: Rcode::NoError,
            records: 30,
            truncated: true,
            ..a
        };
        assert_eq!(decode(answer_tag(t, big)), Some(DnsMessage::Answer(big)));
        // Other tags are not DNS messages, whatever their bits.
        assert_eq!(decode(0), None);
        assert_eq!(decode(t | 1 << 63), None);
        assert_eq!(decode(0x0000_0100_0000_0300), None);
    }
}
