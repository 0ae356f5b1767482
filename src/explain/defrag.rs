//! What the kernel does to a captured IPv4 packet before netfilter sees it, for `nfsim replay`
//! (`docs/kernel-model.md §13`):
//!
//! - **The header checksum.** `ip_rcv_core()` (net/ipv4/ip_input.c) drops a *received* IPv4
//!   packet whose header checksum does not verify (`ip_fast_csum()` → `csum_error`: counted in
//!   `InCsumErrors` and `InHdrErrors`, drop reason `SKB_DROP_REASON_IP_CSUM`) before the
//!   PREROUTING hook. A packet the node sends itself never passes there.
//! - **Fragments.** `nf_defrag_ipv4` (at `NF_IP_PRI_CONNTRACK_DEFRAG`, before raw and
//!   conntrack, in PREROUTING and OUTPUT) steals every fragment into a reassembly queue keyed by
//!   (source, destination, protocol, identification, and the defrag "user": conntrack's
//!   PREROUTING or OUTPUT queue) per network namespace (`ip_defrag()` → `ip_find()`,
//!   net/ipv4/ip_fragment.c; the interface counts only through its VRF master, none here). When the queue holds the first fragment, the last one, and every
//!   byte between (`ip_frag_queue()`: `INET_FRAG_FIRST_IN | INET_FRAG_LAST_IN` and
//!   `meat == len`), the datagram is rebuilt and goes on through the hooks *once*, at the time
//!   the completing fragment arrived. A queue that does not complete within `ipfrag_time`
//!   (30 s, from its first fragment) is killed by `ip_expire()`: its fragments are freed
//!   (`ReasmFails`, `ReasmTimeout`), and conntrack never sees them. A lone non-first fragment
//!   is such a queue.
//!
//! [`plan`] decides this for every record of a replay (all its captures merged: they enter one
//! node, so one set of queues) before the replay starts.

use sim_core::{SimDuration, SimTime};
use std::collections::BTreeMap;
use std::net::Ipv4Addr;

/// `net.ipv4.ipfrag_time`: how long a reassembly queue waits for its missing fragments
/// (`IP_FRAG_TIME`, 30 s).
pub const IPFRAG_TIME_SECS: u64 = 30;

/// The IPv4 header fields the receive path checks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Header {
    checksum_ok: bool,
    src: Ipv4Addr,
    dst: Ipv4Addr,
    proto: u8,
    id: u16,
    /// The fragment offset, in bytes.
    offset: u32,
    more_fragments: bool,
    /// The payload length the header declares (total length minus header length).
    payload: u32,
}

/// Reads the IPv4 header at the start of `ip` (`None` for IPv6 or a header not all there).
fn header(ip: &[u8]) -> Option<Header> {
    let first = *ip.first()?;
    if first >> 4 != 4 {
        return None;
    }
    let ihl = usize::from(first & 0x0f) * 4;
    let h = ip.get(..ihl.max(20))?;
    // The ones' complement sum of the header, its checksum field included, is 0xffff when it
    // verifies (RFC 1071), as ip_fast_csum() computes it.
    let mut sum: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    let be16 = |at: usize| u16::from_be_bytes([h[at], h[at + 1]]);
    let frag = be16(6);
    Some(Header {
        checksum_ok: sum == 0xffff,
        src: Ipv4Addr::new(h[12], h[13], h[14], h[15]),
        dst: Ipv4Addr::new(h[16], h[17], h[18], h[19]),
        proto: h[9],
        id: be16(4),
        offset: u32::from(frag & 0x1fff) * 8,
        more_fragments: frag & 0x2000 != 0,
        payload: u32::from(be16(2)).saturating_sub(ihl as u32),
    })
}

/// What happens to one arrival before the hooks, when it is not simply passed on whole.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Before {
    /// Received with an IPv4 header checksum that does not verify: dropped by `ip_rcv_core()`.
    BadChecksum,
    /// The fragment that completes its datagram: the hooks see the datagram now, as the
    /// arrival `first` (its first fragment, which holds the layer-4 header) shows it.
    Reassembled {
        /// Index (in the arrivals given to [`plan`]) of the first fragment.
        first: usize,
        /// The indexes of all its fragments, in arrival order.
        members: Vec<usize>,
    },
    /// Held in a reassembly queue that the arrival `by` completes later.
    Held {
        /// The completing fragment's index.
        by: usize,
    },
    /// Held in a reassembly queue that never completes: freed when `ipfrag_time` expires.
    Expired {
        /// The queue never held the first fragment (offset 0): a lone non-first fragment, or
        /// several.
        no_first: bool,
    },
}

/// One packet entering the node, as [`plan`] needs it.
#[derive(Clone, Copy, Debug)]
pub struct Arrival<'a> {
    /// Its IP bytes as captured.
    pub ip: &'a [u8],
    /// When the node sees it (replay time: never earlier than the arrival before it).
    pub at: SimTime,
    /// It enters on an interface (PREROUTING: `ip_rcv_core()` checks it, conntrack's "in"
    /// defrag queue) rather than being sent by the node itself (OUTPUT, the "out" queue).
    pub received: bool,
}

/// A reassembly queue being filled.
struct Queue {
    created: SimTime,
    members: Vec<usize>,
    first: Option<usize>,
    /// The datagram's payload length, once the last fragment (no more-fragments flag) came.
    len: Option<u32>,
    /// Byte ranges of the payload present.
    ranges: Vec<(u32, u32)>,
}

impl Queue {
    fn complete(&mut self) -> bool {
        let (Some(_), Some(len)) = (self.first, self.len) else {
            return false;
        };
        self.ranges.sort_unstable();
        let mut end = 0;
        for &(s, e) in &self.ranges {
            if s > end {
                return false;
            }
            end = end.max(e);
        }
        end >= len
    }
}

/// `ip_find()`'s key within one namespace: source, destination, protocol, identification, and
/// the defrag user (`nf_ct_defrag_user()`: `IP_DEFRAG_CONNTRACK_IN` in PREROUTING,
/// `IP_DEFRAG_CONNTRACK_OUT` in OUTPUT, plus the conntrack zone, always 0 here). The key's
/// `vif` is the receiving device's VRF master (`l3mdev_master_ifindex_rcu()`), 0 without VRF:
/// fragments of one datagram received on different interfaces share a queue.
type Key = (Ipv4Addr, Ipv4Addr, u8, u16, bool);

/// What happens before the hooks to each of `arrivals` (in the order the node sees them) that
/// is not passed on whole, by index: empty for a capture without fragments or bad headers.
pub fn plan<'a>(arrivals: impl IntoIterator<Item = Arrival<'a>>) -> BTreeMap<usize, Before> {
    let mut out = BTreeMap::new();
    let mut queues: BTreeMap<Key, Queue> = BTreeMap::new();
    let expire = |q: Queue, out: &mut BTreeMap<usize, Before>| {
        for i in q.members {
            out.insert(
                i,
                Before::Expired {
                    no_first: q.first.is_none(),
                },
            );
        }
    };
    let timeout = SimDuration::from_secs(IPFRAG_TIME_SECS);
    for (i, a) in arrivals.into_iter().enumerate() {
        let Some(h) = header(a.ip) else {
            continue;
        };
        if !h.checksum_ok && a.received {
            out.insert(i, Before::BadChecksum);
            continue;
        }
        if h.offset == 0 && !h.more_fragments {
            continue;
        }
        let key = (h.src, h.dst, h.proto, h.id, a.received);
        // ip_expire() fired: a fragment after it starts a new queue.
        if queues
            .get(&key)
            .is_some_and(|q| a.at >= q.created + timeout)
        {
            if let Some(q) = queues.remove(&key) {
                expire(q, &mut out);
            }
        }
        let q = queues.entry(key).or_insert_with(|| Queue {
            created: a.at,
            members: Vec::new(),
            first: None,
            len: None,
            ranges: Vec::new(),
        });
        q.members.push(i);
        let end = h.offset.saturating_add(h.payload);
        q.ranges.push((h.offset, end));
        if h.offset == 0 {
            q.first = Some(i);
        }
        if !h.more_fragments {
            q.len = Some(end);
        }
        if q.complete() {
            if let Some(q) = queues.remove(&key) {
                for &m in &q.members {
                    out.insert(m, Before::Held { by: i });
                }
                out.insert(
                    i,
                    Before::Reassembled {
                        first: q.first.unwrap_or(i),
                        members: q.members,
                    },
                );
            }
        }
    }
    for (_, q) in std::mem::take(&mut queues) {
        expire(q, &mut out);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ipv4(id: u16, frag: u16, payload: usize, csum_ok: bool) -> Vec<u8> {
        let total = (20 + payload) as u16;
        let mut h = vec![
            0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        h[2..4].copy_from_slice(&total.to_be_bytes());
        h[4..6].copy_from_slice(&id.to_be_bytes());
        h[6..8].copy_from_slice(&frag.to_be_bytes());
        let mut sum: u32 = h
            .chunks(2)
            .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        let c = !(sum as u16) ^ u16::from(!csum_ok);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend(vec![0; payload]);
        h
    }

    #[test]
    fn the_header_checksum_is_verified() {
        assert!(header(&ipv4(1, 0, 8, true)).unwrap().checksum_ok);
        assert!(!header(&ipv4(1, 0, 8, false)).unwrap().checksum_ok);
        let h = header(&ipv4(7, 0x2000 | 3, 16, true)).unwrap();
        assert_eq!(
            (h.id, h.offset, h.more_fragments, h.payload),
            (7, 24, true, 16)
        );
        assert_eq!(header(&[0x60; 40]), None);
        assert_eq!(header(&[0x45; 10]), None);
    }

    /// [`plan`] as one entry per arrival (`None`: passed on whole).
    fn dense(arrivals: Vec<Arrival<'_>>) -> Vec<Option<Before>> {
        let n = arrivals.len();
        let mut p = plan(arrivals);
        (0..n).map(|i| p.remove(&i)).collect()
    }

    fn at(ip: &[u8], secs: u64, received: bool) -> Arrival<'_> {
        Arrival {
            ip,
            at: SimTime::ZERO + SimDuration::from_secs(secs),
            received,
        }
    }

    #[test]
    fn a_datagram_completes_when_its_first_last_and_every_byte_between_came() {
        // The last piece first, then the first: complete at the first's arrival.
        let (a, b) = (ipv4(9, 3, 8, true), ipv4(9, 0x2000, 24, true));
        let p = dense(vec![at(&a, 0, true), at(&b, 1, true)]);
        assert_eq!(
            p,
            vec![
                Some(Before::Held { by: 1 }),
                Some(Before::Reassembled {
                    first: 1,
                    members: vec![0, 1]
                })
            ]
        );
        // A hole (bytes 16..24 missing): never complete; the queue had its first fragment.
        let c = ipv4(9, 0x2000, 16, true);
        let p = dense(vec![at(&c, 0, true), at(&a, 1, true)]);
        assert_eq!(p, vec![Some(Before::Expired { no_first: false }); 2]);
    }

    #[test]
    fn a_lone_later_fragment_expires_and_a_bad_received_header_is_dropped() {
        let lone = ipv4(4, 3, 8, true);
        let bad = ipv4(5, 0, 8, false);
        let whole = ipv4(6, 0, 8, true);
        let p = dense(vec![
            at(&lone, 0, true),
            at(&bad, 0, true),
            at(&whole, 0, true),
        ]);
        assert_eq!(
            p,
            vec![
                Some(Before::Expired { no_first: true }),
                Some(Before::BadChecksum),
                None
            ]
        );
        // Sent by the node itself: never checked by ip_rcv_core().
        assert_eq!(dense(vec![at(&bad, 0, false)]), vec![None]);
    }

    #[test]
    fn queues_are_keyed_by_direction_and_live_ipfrag_time() {
        let (first, last) = (ipv4(9, 0x2000, 24, true), ipv4(9, 3, 8, true));
        // A received first half and a locally sent second half: conntrack's "in" and "out"
        // queues differ, so neither completes.
        let p = dense(vec![at(&first, 0, true), at(&last, 1, false)]);
        assert!(
            p.iter().all(|b| matches!(b, Some(Before::Expired { .. }))),
            "{p:?}"
        );
        // 30 s after the first fragment its queue is gone: the second half starts a new one.
        let p = dense(vec![at(&first, 0, true), at(&last, IPFRAG_TIME_SECS, true)]);
        assert_eq!(
            p,
            vec![
                Some(Before::Expired { no_first: false }),
                Some(Before::Expired { no_first: true })
            ]
        );
        let p = dense(vec![
            at(&first, 0, true),
            at(&last, IPFRAG_TIME_SECS - 1, true),
        ]);
        assert!(
            matches!(p[1], Some(Before::Reassembled { first: 0, .. })),
            "{p:?}"
        );
    }
}
