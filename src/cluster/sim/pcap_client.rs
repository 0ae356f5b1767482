//! `clients[].pcap`: a capture's IPv4 packets sent from a pod or host at their captured
//! times (offset), through the node's real path.
//!
//! Each packet is sent as captured (addresses, ports, TCP flags and sequence numbers, length,
//! TTL) with a tag of its own ([`PCAP_TAG`], the client and the packet's index) so the
//! `--pcap` output can carry its captured payload. The sender holds the source ports its
//! packets leave from, as the sockets of the captured program did: what comes back to them
//! is received quietly (counted) instead of drawing a port unreachable or a reset.

use super::*;

/// The bit that marks a packet tag as a pcap client's; bits 32–47 hold the client, bits 0–31
/// the packet's index in its capture.
pub const PCAP_TAG: u64 = 1 << 62;

/// Runtime state of the pcap clients.
#[derive(Debug, Default)]
pub(super) struct PcapRt {
    machines: Vec<Option<Machine>>,
    /// (address, protocol, port) a pcap client sent from → the client.
    ports: BTreeMap<(IpAddr, u8, u16), usize>,
    sent: Vec<u64>,
    received: Vec<u64>,
}

/// The pcap client and packet index of a tag, if it is a pcap client's.
pub fn pcap_tag(tag: u64) -> Option<(usize, usize)> {
    (tag & PCAP_TAG != 0 && tag & INJECTED_TAG == 0).then_some((
        ((tag >> 32) & 0xffff) as usize,
        (tag & 0xffff_ffff) as usize,
    ))
}

impl Simulation {
    /// Resolves the senders and schedules every pcap client's first packet.
    pub(super) fn pcap_start(&mut self) {
        let n = self.sc.pcap_clients.len();
        self.pcap.sent = vec![0; n];
        self.pcap.received = vec![0; n];
        for i in 0..n {
            let c = &self.sc.pcap_clients[i];
            let m = match &c.placement {
                Placement::Pod(k) => self.pod_ids.get(k).map(|&id| Machine::Pod(id)),
                Placement::Host(h) => Some(Machine::Host(*h)),
                Placement::Node(n) => Some(Machine::Node(*n)),
            };
            self.pcap.machines.push(m);
            if let Some(first) = c.packets.first() {
                if first.at <= self.end {
                    self.queue.push(first.at, Ev::PcapSend(i, 0));
                }
            }
        }
    }

    /// Sends packet `k` of pcap client `i` and schedules the next.
    pub(super) fn pcap_send(&mut self, i: usize, k: usize) {
        let c = &self.sc.pcap_clients[i];
        let packets = c.packets.clone();
        let Some(pp) = packets.get(k) else { return };
        let Some(m) = self.pcap.machines[i].clone() else {
            return;
        };
        if k == 0 {
            let who = match &c.placement {
                Placement::Pod(p) => format!("pod {p}"),
                Placement::Host(h) => format!("host {}", self.sc.hosts[*h].name),
                Placement::Node(n) => format!("node {}", self.sc.nodes[*n].name),
            };
            let skipped = if c.skipped > 0 {
                format!(" ({} frames that are not IPv4 left out)", c.skipped)
            } else {
                String::new()
            };
            let what = What::Change {
                subject: format!("pcap client {}", c.name),
                change: format!(
                    "sending the {} IPv4 packets of {} from {who}{skipped}",
                    packets.len(),
                    c.file
                ),
            };
            self.log(what);
        }
        let mut p = pp.packet;
        p.tag = PCAP_TAG | ((i as u64 & 0xffff) << 32) | (k as u64 & 0xffff_ffff);
        if let Some(port) = p.sport() {
            self.pcap
                .ports
                .entry((p.src, p.protocol(), port))
                .or_insert(i);
        }
        self.pcap.sent[i] += 1;
        self.send_from(&m, vec![p]);
        if let Some(next) = packets.get(k + 1) {
            if next.at <= self.end {
                self.queue
                    .push(next.at.max(self.now), Ev::PcapSend(i, k + 1));
            }
        }
    }

    /// Whether a pcap client holds the socket `p` is for (then it is received and counted).
    pub(super) fn pcap_receives(&mut self, p: &Packet, proto: u8, dport: u16) -> bool {
        match self.pcap.ports.get(&(p.dst, proto, dport)) {
            Some(&i) => {
                self.pcap.received[i] += 1;
                true
            }
            None => false,
        }
    }

    /// One timeline line per pcap client at the end: packets sent and received.
    pub(super) fn pcap_summary(&mut self) {
        for i in 0..self.sc.pcap_clients.len() {
            let what = What::Change {
                subject: format!("pcap client {}", self.sc.pcap_clients[i].name),
                change: format!(
                    "{} of {} packets sent; {} came back to the ports it sent from (answers, ICMP errors)",
                    self.pcap.sent[i],
                    self.sc.pcap_clients[i].packets.len(),
                    self.pcap.received[i]
                ),
            };
            self.log(what);
        }
    }
}
