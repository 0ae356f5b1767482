//! The per-destination rate limit on the ICMP errors a namespace's kernel sends (REJECT's
//! answers, time exceeded): `net.ipv4.icmp_ratelimit` and `net.ipv4.icmp_ratemask`.
//!
//! After `icmpv4_xrlim_allow` and `inet_peer_xrlim_allow` (net/ipv4/icmp.c,
//! net/ipv4/inetpeer.c): each destination address has a token bucket (its `inet_peer`)
//! holding up to `XRLIM_BURST_FACTOR` (6) × `icmp_ratelimit` of time; every error of a type
//! in `icmp_ratemask` (default 0x1818: destination unreachable, source quench, time
//! exceeded, parameter problem; never "fragmentation needed") costs `icmp_ratelimit` of it,
//! and is not sent when the bucket holds less. The bucket refills with elapsed time. A new
//! destination starts full (the kernel's fresh peer has `rate_last` far in the past), so the
//! default allows a burst of 6 errors, then one a second. Errors routed out through the
//! loopback device (to one of the namespace's own addresses) are never limited, and a
//! ratelimit of 0 turns the limit off.
//!
//! Modelled in continuous time (the kernel counts jiffies, so its edges fall on 1–4 ms
//! ticks). Not modelled: the global `icmp_msgs_per_sec` / `icmp_msgs_burst` limiter (1,000
//! errors a second per kernel, with a random cost per message since 6.x), shared by both
//! families.
//!
//! ICMPv6 errors have their own limit of the same shape (`icmpv6_xrlim_allow`,
//! net/ipv6/icmp.c, on the IPv6 `inet_peer` base): `net.ipv6.icmp.ratelimit` (default
//! **100 ms**, not IPv4's 1000) per error and destination, the same burst of 6, and
//! `net.ipv6.icmp.ratemask` (default `0-1,3-127`: every error type but packet too big;
//! informational types, 128 and up, never). Errors routed out through `lo` are never
//! limited (`dst->dev->flags & IFF_LOOPBACK`). The kernel source still "gives more
//! bandwidth to wider prefixes" (shifts the cost by the route's prefix length), but on Linux
//! 6.18 the route the error is sent by has a /128 destination whatever route matched:
//! measured in a private namespace with port unreachables to a neighbour on a /64, to one
//! on a /128 route and to one behind the default route, each got 6 errors and then one per
//! 100 ms. So the cost here is the sysctl's value, whatever the route.

use sim_core::packet::icmp;
use sim_core::{SimDuration, SimTime};
use std::collections::BTreeMap;
use std::net::{Ipv4Addr, Ipv6Addr};

/// `XRLIM_BURST_FACTOR`: a bucket holds this many errors' worth of time.
const BURST: u64 = 6;

/// With this many buckets, a new destination first prunes those that are full anyway (the
/// kernel's peer garbage collection; a pruned destination comes back full, as it would have
/// been); the next pruning waits until the map has doubled, so pruning costs O(1) a bucket.
const PRUNE_AT: usize = 4096;

/// The limit of one network namespace (one `inet_peer` base): its settings and buckets.
/// [`super::Netns`] keeps one for the errors its rules and forwarding send; a driver that
/// models a namespace's sockets (a pod's closed ports) keeps one per such namespace.
#[derive(Clone, Debug)]
pub struct IcmpRateLimit {
    /// `icmp_ratelimit`: the cost of one error (default 1 s; 0 = no limit).
    pub ratelimit: SimDuration,
    /// `icmp_ratemask`: bit `t` set = type `t` is limited.
    pub ratemask: u32,
    /// `net.ipv6.icmp.ratelimit`: the cost of one ICMPv6 error (default 100 ms; 0 = no
    /// limit).
    pub ratelimit_v6: SimDuration,
    /// `net.ipv6.icmp.ratemask`: bit `t` set = ICMPv6 type `t` is limited (default
    /// `0-1,3-127`).
    pub ratemask_v6: [u64; 4],
    /// By destination: (time held, last refill).
    peers: BTreeMap<Ipv4Addr, (u64, SimTime)>,
    /// The size at which the next new destination prunes.
    prune_at: usize,
    /// The IPv6 destinations' buckets (the kernel's separate IPv6 `inet_peer` base).
    peers_v6: BTreeMap<Ipv6Addr, (u64, SimTime)>,
    /// The size at which the next new IPv6 destination prunes.
    prune_at_v6: usize,
}

/// `icmpv6_ratemask`'s default, `0-1,3-127` (net/ipv6/icmp.c, `icmpv6_sysctl_init`).
pub const ICMPV6_RATEMASK_DEFAULT: [u64; 4] = [!(1 << 2), u64::MAX, 0, 0];

/// A token bucket per destination (`inet_peer_xrlim_allow`): whether an error to `dst`
/// costing `cost` may go at `now`; takes the cost when it may.
fn bucket_allow<K: Ord + Copy>(
    peers: &mut BTreeMap<K, (u64, SimTime)>,
    prune_at: &mut usize,
    now: SimTime,
    dst: K,
    cost: u64,
) -> bool {
    let cap = cost.saturating_mul(BURST);
    if peers.len() >= *prune_at && !peers.contains_key(&dst) {
        peers.retain(|_, (held, last)| {
            held.saturating_add(now.saturating_since(*last).as_nanos()) < cap
        });
        *prune_at = PRUNE_AT.max(2 * peers.len());
    }
    let (held, last) = peers.entry(dst).or_insert((cap, now));
    let tokens = held
        .saturating_add(now.saturating_since(*last).as_nanos())
        .min(cap);
    *last = now;
    if tokens >= cost {
        *held = tokens - cost;
        true
    } else {
        *held = tokens;
        false
    }
}

/// Parses a `net.ipv6.icmp.ratemask` value as `proc_do_large_bitmap` takes it: a
/// comma-separated list of types and `a-b` ranges (0–255), or empty for none.
pub fn parse_ratemask_v6(s: &str) -> Result<[u64; 4], String> {
    let mut m = [0u64; 4];
    let t = s.trim();
    if t.is_empty() {
        return Ok(m);
    }
    let num = |x: &str| -> Result<u8, String> {
        x.trim()
            .parse::<u8>()
            .map_err(|_| format!("{x:?} is not an ICMPv6 type from 0 to 255"))
    };
    for part in t.split(',') {
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => {
                let a = num(part)?;
                (a, a)
            }
        };
        if a > b {
            return Err(format!("range {part:?} runs backwards"));
        }
        for ty in a..=b {
            m[usize::from(ty / 64)] |= 1 << (ty % 64);
        }
    }
    Ok(m)
}

impl Default for IcmpRateLimit {
    fn default() -> Self {
        IcmpRateLimit {
            ratelimit: SimDuration::from_millis(1000),
            ratemask: 0x1818,
            ratelimit_v6: SimDuration::from_millis(100),
            ratemask_v6: ICMPV6_RATEMASK_DEFAULT,
            peers: BTreeMap::new(),
            prune_at: PRUNE_AT,
            peers_v6: BTreeMap::new(),
            prune_at_v6: PRUNE_AT,
        }
    }
}

impl IcmpRateLimit {
    /// `icmpv4_mask_allow`: types outside the mask, and "fragmentation needed" (path MTU
    /// discovery), are never limited.
    fn exempt(&self, icmp_type: u8, code: u8) -> bool {
        const NR_ICMP_TYPES: u8 = 18;
        const FRAG_NEEDED: u8 = 4;
        icmp_type > NR_ICMP_TYPES
            || (icmp_type == icmp::DEST_UNREACH && code == FRAG_NEEDED)
            || (1u32 << icmp_type) & self.ratemask == 0
    }

    /// A limit with the kernel's defaults (1 s, mask 0x1818).
    pub fn new() -> IcmpRateLimit {
        IcmpRateLimit::default()
    }

    /// Whether an ICMPv4 error of `icmp_type`/`code` to `dst` may be sent at `now`; takes
    /// its cost from `dst`'s bucket when it may. `via_loopback`: the error is routed out
    /// through `lo` (no limit).
    pub fn allow(
        &mut self,
        now: SimTime,
        dst: Ipv4Addr,
        icmp_type: u8,
        code: u8,
        via_loopback: bool,
    ) -> bool {
        if via_loopback || self.exempt(icmp_type, code) {
            return true;
        }
        let cost = self.ratelimit.as_nanos();
        bucket_allow(&mut self.peers, &mut self.prune_at, now, dst, cost)
    }

    /// Whether an ICMPv6 error of `icmp_type` to `dst` may be sent at `now`
    /// (`icmpv6_xrlim_allow` after `icmpv6_mask_allow`); takes its cost from `dst`'s bucket
    /// when it may. `via_loopback`: the error is routed out through `lo` (no limit).
    pub fn allow_v6(
        &mut self,
        now: SimTime,
        dst: Ipv6Addr,
        icmp_type: u8,
        via_loopback: bool,
    ) -> bool {
        let limited = self.ratemask_v6[usize::from(icmp_type / 64)] & (1 << (icmp_type % 64)) != 0;
        if via_loopback || !limited {
            return true;
        }
        let cost = self.ratelimit_v6.as_nanos();
        bucket_allow(&mut self.peers_v6, &mut self.prune_at_v6, now, dst, cost)
    }

    /// This limit's settings with fresh buckets (a reboot keeps the sysctls).
    pub fn reset(&self) -> IcmpRateLimit {
        IcmpRateLimit {
            ratelimit: self.ratelimit,
            ratemask: self.ratemask,
            ratelimit_v6: self.ratelimit_v6,
            ratemask_v6: self.ratemask_v6,
            ..IcmpRateLimit::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(ms: u64) -> SimTime {
        SimTime::from_millis(ms)
    }

    #[test]
    fn a_burst_of_six_then_one_a_second_per_destination() {
        let mut l = IcmpRateLimit::default();
        let a = Ipv4Addr::new(10, 0, 0, 1);
        let b = Ipv4Addr::new(10, 0, 0, 2);
        let sent = |l: &mut IcmpRateLimit, t: u64, d: Ipv4Addr| l.allow(at(t), d, 3, 3, false);
        let burst: Vec<bool> = (0..8).map(|i| sent(&mut l, i, a)).collect();
        assert_eq!(burst, [true, true, true, true, true, true, false, false]);
        // Another destination has its own bucket.
        assert!(sent(&mut l, 8, b));
        // One second after the burst began (the bucket was full then, so the refill counts
        // from each error's own time): 1 s of time came back by t = 1,005.
        assert!(!sent(&mut l, 900, a));
        assert!(sent(&mut l, 1_006, a));
        assert!(!sent(&mut l, 1_500, a));
        // Echo replies are not in the mask; fragmentation needed is never limited.
        assert!(l.allow(at(1_500), a, icmp::ECHO_REPLY, 0, false));
        assert!(l.allow(at(1_500), a, icmp::DEST_UNREACH, 4, false));
        // Through lo: no limit.
        assert!(l.allow(at(1_500), a, 3, 3, true));
        // Six idle seconds fill the bucket again, not more.
        let again: Vec<bool> = (0..7).map(|i| sent(&mut l, 20_000 + i, a)).collect();
        assert_eq!(again, [true, true, true, true, true, true, false]);
    }

    #[test]
    fn zero_turns_it_off_and_the_mask_selects_types() {
        let mut l = IcmpRateLimit {
            ratelimit: SimDuration::ZERO,
            ..IcmpRateLimit::default()
        };
        let a = Ipv4Addr::new(10, 0, 0, 1);
        assert!((0..100).all(|i| l.allow(at(i), a, 3, 3, false)));
        let mut l = IcmpRateLimit {
            ratemask: 0,
            ..IcmpRateLimit::default()
        };
        assert!((0..100).all(|i| l.allow(at(i), a, 11, 0, false)));
    }

    #[test]
    fn icmpv6_has_its_own_limit_a_burst_of_six_then_one_per_100_ms() {
        let mut l = IcmpRateLimit::default();
        let a: Ipv6Addr = "fd00::2".parse().unwrap();
        let unreach =
            |l: &mut IcmpRateLimit, t: u64| l.allow_v6(at(t), a, icmp::V6_DEST_UNREACH, false);
        // As measured on Linux 6.18: port unreachables 2 ms apart, 6 then one per 100 ms.
        let sent: Vec<u64> = (0..200)
            .map(|i| 2 * i)
            .filter(|&t| unreach(&mut l, t))
            .collect();
        assert_eq!(sent, [0, 2, 4, 6, 8, 10, 100, 200, 300]);
        // The IPv4 bucket of the "same" host is another one; packet too big (2) and echo
        // replies are outside the default mask; through lo, no limit.
        assert!(l.allow(at(300), Ipv4Addr::new(10, 0, 0, 2), 3, 3, false));
        assert!(l.allow_v6(at(301), a, 2, false));
        assert!(l.allow_v6(at(301), a, icmp::V6_ECHO_REPLY, false));
        assert!(l.allow_v6(at(301), a, icmp::V6_TIME_EXCEEDED, true));
        assert!(!l.allow_v6(at(301), a, icmp::V6_TIME_EXCEEDED, false));
        // 0 turns it off.
        l.ratelimit_v6 = SimDuration::ZERO;
        assert!((0..50).all(|t| unreach(&mut l, 400 + t)));
    }

    #[test]
    fn the_ipv6_ratemask_parses_as_the_kernel_lists_it() {
        assert_eq!(parse_ratemask_v6("0-1,3-127"), Ok(ICMPV6_RATEMASK_DEFAULT));
        assert_eq!(parse_ratemask_v6(""), Ok([0; 4]));
        assert_eq!(parse_ratemask_v6("1,255"), Ok([2, 0, 0, 1 << 63]));
        assert!(parse_ratemask_v6("3-1").is_err());
        assert!(parse_ratemask_v6("256").unwrap_err().contains("0 to 255"));
    }

    #[test]
    fn pruning_forgets_only_full_buckets() {
        let mut l = IcmpRateLimit::default();
        let busy = Ipv4Addr::new(192, 0, 2, 1);
        for _ in 0..6 {
            assert!(l.allow(at(0), busy, 3, 3, false));
        }
        for i in 0..PRUNE_AT as u32 {
            l.allow(at(10), Ipv4Addr::from(0x0a00_0000 + i), 3, 3, false);
        }
        // At 3 s nothing is full again: the next new destination prunes nothing.
        l.allow(at(3_000), Ipv4Addr::new(192, 0, 2, 2), 3, 3, false);
        assert_eq!(l.peers.len(), PRUNE_AT + 2);
        // At 9 s the 4,096 have refilled (5 s held + 9 s) but the busy one, which has sent
        // since, has not: pruning at the next doubling keeps only the not-full ones.
        assert!(l.allow(at(5_000), busy, 3, 3, false));
        for i in 0..PRUNE_AT as u32 {
            l.allow(at(5_000), Ipv4Addr::from(0x0b00_0000 + i), 3, 3, false);
        }
        assert!(l.peers.len() < 2 * PRUNE_AT + 3);
        assert!(l.peers.contains_key(&busy));
        assert!(!l.peers.contains_key(&Ipv4Addr::from(0x0a00_0000)));
    }
}
