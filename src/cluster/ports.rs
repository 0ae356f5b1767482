//! Source ports of TCP `connect()`, picked as Linux picks them (`docs/kernel-model.md` §11).
//!
//! `connect()` on an unbound socket calls `inet_hash_connect`, which hashes (source address,
//! destination address, destination port) with a per-boot secret
//! (`secure_ipv4_port_ephemeral`) and hands the hash to `__inet_hash_connect`. That function
//! keeps a table of 2^16 counters (`table_perturb`, random at boot): the hash picks a counter,
//! the counter plus the hash's upper half gives a starting offset in
//! `net.ipv4.ip_local_port_range`, and the scan walks up from there, ports of the range's
//! parity first (even for 32768–60999), then the other parity. A port is taken when
//! `__inet_check_established` finds no socket with the same 4-tuple — an established one or
//! one in TIME_WAIT (`tcp_twsk_unique` refuses to reuse a TIME_WAIT 4-tuple unless
//! `net.ipv4.tcp_tw_reuse` allows it, and its default, 2, allows it on loopback only). After a
//! pick the counter grows by `max(i, 2 × random(0..8)) + 2`, where `i` is how far the scan
//! went, so connections to one destination walk up the range a few ports at a time instead
//! of landing anywhere, and a 4-tuple is not met again until the walk wraps around.
//!
//! [`ConnectPorts`] is one host's (one network namespace's) state: the secret, the counters
//! (kept only for the slots in use) and the stream for the random step. Everything is drawn
//! from the scenario's seed, so a run picks the same ports every time; the ports differ from
//! a real node's only because a real node's secret and counters are random at boot.

use crate::cluster::apps::{PortsInUse, EPHEMERAL_PORT_FIRST, EPHEMERAL_PORT_LAST};
use sim_core::SimRng;
use std::collections::BTreeMap;
use std::net::{IpAddr, SocketAddr};

/// Counters in `table_perturb` (`CONFIG_INET_TABLE_PERTURB_ORDER` = 16 by default).
pub const INET_TABLE_PERTURB_SIZE: u32 = 1 << 16;

/// One host's state for picking the source ports of `connect()` (see the module doc).
#[derive(Debug, Clone)]
pub struct ConnectPorts {
    /// The per-boot secret of `secure_ipv4_port_ephemeral`.
    secret: [u64; 2],
    /// The counters of `table_perturb` that have moved, by slot; the others still hold their
    /// boot value ([`ConnectPorts::boot_value`]).
    perturb: BTreeMap<u32, u32>,
    /// `get_random_u32_below(8)` of the step after a pick.
    step_rng: SimRng,
}

impl Default for ConnectPorts {
    fn default() -> Self {
        ConnectPorts::new(0, "")
    }
}

/// One round of a 64-bit mixer (splitmix64's finaliser): the keyed hash below chains it.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn addr_bits(a: IpAddr) -> u128 {
    match a {
        IpAddr::V4(v) => u32::from(v) as u128,
        IpAddr::V6(v) => u128::from(v),
    }
}

impl ConnectPorts {
    /// A host's state, its secret and boot counters drawn from `seed` and `label` (the
    /// stream `{label}/inet_hash_connect`).
    pub fn new(seed: u64, label: &str) -> ConnectPorts {
        let mut rng = SimRng::child(seed, label, "inet_hash_connect");
        ConnectPorts {
            secret: [rng.next_u64(), rng.next_u64()],
            perturb: BTreeMap::new(),
            step_rng: rng,
        }
    }

    /// `secure_ipv4_port_ephemeral(saddr, daddr, dport)`: a keyed hash of the three (the
    /// kernel uses siphash with `net_secret`; any keyed hash gives the same behaviour).
    pub fn port_offset(&self, saddr: IpAddr, daddr: IpAddr, dport: u16) -> u64 {
        let mut h = self.secret[0];
        for part in [
            addr_bits(saddr) as u64,
            (addr_bits(saddr) >> 64) as u64,
            addr_bits(daddr) as u64,
            (addr_bits(daddr) >> 64) as u64,
            dport as u64,
        ] {
            h = mix(h ^ part).wrapping_add(self.secret[1]);
        }
        mix(h)
    }

    /// The value counter `index` had at boot (`get_random_sleepable_once` fills the table).
    fn boot_value(&self, index: u32) -> u32 {
        (mix(self.secret[1] ^ (index as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15)) >> 16) as u32
    }

    fn counter(&self, index: u32) -> u32 {
        self.perturb
            .get(&index)
            .copied()
            .unwrap_or_else(|| self.boot_value(index))
    }

    /// Picks the source port for a connection from `local` to `dst`, as `__inet_hash_connect`
    /// does; `taken(port)` says whether `port` cannot be used toward `dst` (a socket with the
    /// same 4-tuple, established or in TIME_WAIT, or a port bound by `bind()`). `None` when
    /// every port is taken (`EADDRNOTAVAIL`).
    ///
    /// Each call costs one `taken` per port the scan passes: one in the common case, where
    /// the walk finds the next port free.
    pub fn pick<P: PortsInUse + ?Sized>(
        &mut self,
        local: IpAddr,
        dst: SocketAddr,
        taken: &P,
    ) -> Option<u16> {
        let low = EPHEMERAL_PORT_FIRST as u32;
        let high = EPHEMERAL_PORT_LAST as u32 + 1;
        let step = 2;
        // The range's length, made even so both parities have the same count.
        let mut remaining = high - low;
        if remaining > 1 {
            remaining &= !1;
        }
        let port_offset = self.port_offset(local, dst.ip(), dst.port());
        let index = (port_offset as u32) & (INET_TABLE_PERTURB_SIZE - 1);
        let mut offset = self.counter(index).wrapping_add((port_offset >> 32) as u32) % remaining;
        // The first pass tries ports of the range's low end's parity.
        offset &= !1;
        loop {
            let mut port = low + offset;
            let mut i = 0;
            while i < remaining {
                if port >= high {
                    port -= remaining;
                }
                if !taken.in_use(port as u16) {
                    let bump = i.max(self.step_rng.below(8) as u32 * step);
                    let c = self.counter(index).wrapping_add(bump + step);
                    self.perturb.insert(index, c);
                    return Some(port as u16);
                }
                i += step;
                port += step;
            }
            offset += 1;
            if offset & 1 == 0 || remaining <= 1 {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ports_walk_up_the_range_even_first_and_are_seeded() {
        let local: IpAddr = "10.244.1.5".parse().unwrap();
        let mut p = ConnectPorts::new(1, "pod/a");
        let none = BTreeSet::new();
        let ports: Vec<u16> = (0..200)
            .map(|_| p.pick(local, sa("10.96.0.1:443"), &none).unwrap())
            .collect();
        assert!(ports.iter().all(|p| p % 2 == 0), "even ports first");
        // Each step is 2..=16 ports up (modulo the wrap of the range).
        let span = (EPHEMERAL_PORT_LAST - EPHEMERAL_PORT_FIRST + 1) as i32 & !1;
        for w in ports.windows(2) {
            let d = (w[1] as i32 - w[0] as i32).rem_euclid(span);
            assert!((2..=16).contains(&d), "{w:?}");
        }
        let mut again = ConnectPorts::new(1, "pod/a");
        assert_eq!(
            again.pick(local, sa("10.96.0.1:443"), &none),
            Some(ports[0])
        );
        let mut other = ConnectPorts::new(2, "pod/a");
        assert_ne!(
            other.pick(local, sa("10.96.0.1:443"), &none),
            Some(ports[0])
        );
    }

    #[test]
    fn a_taken_port_is_skipped_and_odd_ports_come_when_even_ones_run_out() {
        let local: IpAddr = "10.244.1.5".parse().unwrap();
        let dst = sa("10.96.0.1:443");
        let mut p = ConnectPorts::new(1, "h");
        let first = p.clone().pick(local, dst, &BTreeSet::new()).unwrap();
        let taken: BTreeSet<u16> = [first].into();
        assert_eq!(p.clone().pick(local, dst, &taken), Some(first + 2));
        let evens: BTreeSet<u16> = (EPHEMERAL_PORT_FIRST..=EPHEMERAL_PORT_LAST)
            .filter(|p| p % 2 == 0)
            .collect();
        let got = p.pick(local, dst, &evens).unwrap();
        assert_eq!(got % 2, 1);
        let all: BTreeSet<u16> = (EPHEMERAL_PORT_FIRST..=EPHEMERAL_PORT_LAST).collect();
        assert_eq!(p.pick(local, dst, &all), None, "EADDRNOTAVAIL");
    }

    #[test]
    fn destinations_start_in_different_places() {
        let local: IpAddr = "10.244.1.5".parse().unwrap();
        let mut p = ConnectPorts::new(1, "h");
        let none = BTreeSet::new();
        let a = p.pick(local, sa("10.96.0.1:443"), &none).unwrap();
        let b = p.pick(local, sa("10.96.0.10:53"), &none).unwrap();
        let c = p.pick(local, sa("10.96.0.10:80"), &none).unwrap();
        assert!(a != b && b != c && a != c, "{a} {b} {c}");
    }
}
