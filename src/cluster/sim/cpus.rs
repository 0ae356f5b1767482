//! Many CPUs on a node (`nodes[].cpus` > 1): which CPU processes a packet, and when two
//! packets of one new flow are in flight at once on two of them.
//!
//! The kernel processes a packet from its `conntrack_in` to its confirmation on one CPU,
//! without a lock held in between (`nf_conntrack_in` allocates an unconfirmed entry,
//! `__nf_conntrack_confirm` inserts it). A second packet of the same flow processed on
//! another CPU in that window finds no entry, makes its own, and meets the first at its
//! confirmation: a clash, handled as the node's kernel release handles it
//! (`Conntrack::confirm_resolving`, docs/kernel-model.md §22).
//!
//! nfsim's event loop runs one packet at a time, so the overlap is made explicit: when a
//! packet of the flow whose entry the node's last new-flow packet created arrives within
//! [`CONFIRM_WINDOW`] of it, on another CPU, that entry is hidden from the packet's lookups
//! (`Conntrack::race_hide`) and put back at its confirmation. The first packet's whole path
//! ran before (it wins), the second's NAT decision is its own (a `statistic`/`numgen` draw of
//! its own), and the clash is decided at its confirm, as the kernel decides it when the two
//! confirmations come in that order.
//!
//! Which CPU, as far as it decides an outcome (only whether two packets share a CPU does):
//! - a packet from the wire (`eth0`): the receive queue its RSS hash picks, a hash of its
//!   addresses, ports and protocol keyed from the seed (the NIC's key is random at boot,
//!   `netdev_rss_key_fill`): every packet of one flow lands on one CPU, so packets from the
//!   wire never race each other;
//! - a packet a node process sends (OUTPUT), and a pod's packet entering by its veth (the
//!   veth peer's transmit runs on the sending task's CPU, `veth_xmit` → `netif_rx`, RPS
//!   off): the sending task's CPU, drawn from the seed for each packet, uniformly. This is
//!   the simplification: nfsim does not model threads, so each send is taken as coming from
//!   a thread that may run on any CPU (the kernel's clash fix, 6a757c07e51f, describes the
//!   resolver's A and AAAA queries sent "back-to-back from different threads on the same
//!   socket").
//!
//! Only pairs race: the packet that lost a race starts no second one, so a burst of three
//! packets of one flow on three CPUs is not modelled (the kernel selftest's 128 threads
//! are). With `cpus: 1` none of this runs.

use sim_conntrack::{EntryId, Tuple};
use sim_core::{IfName, Packet, SimDuration, SimRng, SimTime};
use sim_netfilter::netns::Ingress;

/// How long a new flow's first packet takes from `conntrack_in` to its confirmation, during
/// which another CPU's packet of the same flow misses its entry: 10 µs, the order of a
/// packet's walk through the nat table and routing on a busy node. Two packets of one flow
/// sent in one `sendmmsg` (glibc's A and AAAA) arrive well within it.
pub const CONFIRM_WINDOW: SimDuration = SimDuration::from_micros(10);

/// One node's CPUs.
#[derive(Debug, Clone)]
pub(super) struct Cpus {
    count: u32,
    /// The sending tasks' CPUs.
    tasks: SimRng,
    /// The RSS hash key.
    rss_key: u64,
    /// The node's last packet that made a new entry: when, on which CPU, the entry, and the
    /// tuple the packet had when it came in.
    last_new: Option<(SimTime, u32, EntryId, Tuple)>,
}

/// A packet being processed on a CPU, and whether it races the last new flow's packet.
#[derive(Debug, Clone, Copy)]
pub(super) struct OnCpu {
    cpu: u32,
    /// The entry hidden from this packet.
    pub(super) raced: Option<EntryId>,
}

impl Cpus {
    /// `count` (> 1) CPUs of the node `name`.
    pub(super) fn new(seed: u64, name: &str, count: u32) -> Cpus {
        let mut rss = SimRng::derive(seed, &format!("node/{name}/rss-key"));
        Cpus {
            count,
            tasks: SimRng::derive(seed, &format!("node/{name}/task-cpu")),
            rss_key: rss.next_u64(),
            last_new: None,
        }
    }

    /// The CPU `p` is processed on.
    fn cpu_of(&mut self, p: &Packet, from: Ingress, eth0: IfName) -> u32 {
        match from {
            Ingress::Interface(dev) if dev == eth0 => {
                let t = Tuple::from_packet(p);
                let mut h = self.rss_key;
                for w in [
                    u64::from(t.sport) << 16 | u64::from(t.dport),
                    u64::from(t.proto),
                    ip_bits(t.src),
                    ip_bits(t.dst),
                ] {
                    h = (h ^ w).wrapping_mul(0x9e37_79b9_7f4a_7c15);
                    h ^= h >> 29;
                }
                (h % u64::from(self.count)) as u32
            }
            _ => self.tasks.below(u64::from(self.count)) as u32,
        }
    }

    /// Before `p` enters the node at `now`: its CPU, and the entry to hide from it when it
    /// races the last new flow's packet.
    pub(super) fn begin(&mut self, now: SimTime, p: &Packet, from: Ingress, eth0: IfName) -> OnCpu {
        let cpu = self.cpu_of(p, from, eth0);
        let raced = match self.last_new {
            Some((at, c, id, t))
                if c != cpu
                    && now.saturating_since(at) < CONFIRM_WINDOW
                    && Tuple::from_packet(p) == t =>
            {
                Some(id)
            }
            _ => None,
        };
        if raced.is_some() {
            // One race per pair: the loser starts no second one.
            self.last_new = None;
        }
        OnCpu { cpu, raced }
    }

    /// After a packet that did not race: it made the new entry `id` (its tuple as it came in
    /// is `t`), which a packet of its flow on another CPU may race within the window.
    pub(super) fn made_entry(&mut self, now: SimTime, on: OnCpu, id: EntryId, t: Tuple) {
        if on.raced.is_none() {
            self.last_new = Some((now, on.cpu, id, t));
        }
    }
}

fn ip_bits(a: std::net::IpAddr) -> u64 {
    match a {
        std::net::IpAddr::V4(v) => u64::from(u32::from(v)),
        std::net::IpAddr::V6(v) => {
            let x = u128::from(v);
            (x as u64) ^ ((x >> 64) as u64)
        }
    }
}

impl super::Simulation {
    /// A packet about to enter node `n` on a CPU: when it races, the winner's entry is hidden
    /// from it until its confirmation.
    pub(super) fn race_begin(&mut self, n: usize, mut on: OnCpu) -> OnCpu {
        if let Some(id) = on.raced {
            if !self.nodes[n].netns.conntrack_mut().race_hide(id) {
                on.raced = None;
            }
        }
        on
    }

    /// The packet `p` left node `n`'s pipeline holding `entry` (`seq_before`: the table's
    /// next sequence number before it came in).
    pub(super) fn race_end(
        &mut self,
        n: usize,
        on: OnCpu,
        entry: Option<EntryId>,
        seq_before: u64,
        p: &Packet,
    ) {
        let now = self.now;
        let node = &mut self.nodes[n];
        let ct = node.netns.conntrack_mut();
        if on.raced.is_some() {
            // Confirmed, discarded or never tracked: the winner is back in any case.
            ct.race_reveal();
        }
        let made = entry.filter(|id| ct.get(*id).is_some_and(|e| e.seq >= seq_before));
        if let (Some(id), Some(c)) = (made, node.cpus.as_mut()) {
            c.made_entry(now, on, id, Tuple::from_packet(p));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkt(sport: u16) -> Packet {
        Packet::udp(
            format!("10.244.1.5:{sport}").parse().unwrap(),
            "10.96.0.10:53".parse().unwrap(),
        )
    }

    #[test]
    fn one_flow_from_the_wire_stays_on_one_cpu_and_flows_spread() {
        let eth0 = IfName::new("eth0").unwrap();
        let mut c = Cpus::new(1, "n", 4);
        let from = Ingress::Interface(eth0);
        let first = c.cpu_of(&pkt(40000), from, eth0);
        for _ in 0..20 {
            assert_eq!(c.cpu_of(&pkt(40000), from, eth0), first);
        }
        let used: std::collections::BTreeSet<u32> = (0..200)
            .map(|s| c.cpu_of(&pkt(40000 + s), from, eth0))
            .collect();
        assert_eq!(used.len(), 4, "RSS spreads flows over every queue");
    }

    #[test]
    fn a_same_flow_packet_on_another_cpu_within_the_window_races() {
        let eth0 = IfName::new("eth0").unwrap();
        let veth = IfName::new("veth1").unwrap();
        let mut ct = sim_conntrack::Conntrack::new(1, "t", Default::default());
        let id = match ct.conntrack_in(SimTime::ZERO, &pkt(1)) {
            sim_conntrack::CtVerdict::Tracked(h) => h.id,
            v => panic!("{v:?}"),
        };
        let t0 = SimTime::from_nanos(100_000);
        let p = pkt(40000);
        let mut races = 0;
        let mut c = Cpus::new(7, "n", 2);
        for _ in 0..1000 {
            let a = c.begin(t0, &p, Ingress::Interface(veth), eth0);
            assert!(a.raced.is_none());
            c.made_entry(t0, a, id, Tuple::from_packet(&p));
            let b = c.begin(t0, &p, Ingress::Interface(veth), eth0);
            if b.raced.is_some() {
                races += 1;
                assert_ne!(a.cpu, b.cpu);
            }
            c.last_new = None;
        }
        assert!((400..600).contains(&races), "two CPUs: about half, {races}");
        // Too late, or another flow: no race.
        let a = c.begin(t0, &p, Ingress::Local, eth0);
        c.made_entry(t0, a, id, Tuple::from_packet(&p));
        let late = t0.saturating_add(CONFIRM_WINDOW);
        for _ in 0..50 {
            assert!(c.begin(late, &p, Ingress::Local, eth0).raced.is_none());
            assert!(c
                .begin(t0, &pkt(40001), Ingress::Local, eth0)
                .raced
                .is_none());
        }
    }
}
