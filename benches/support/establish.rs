//! Established flows for the benches: a flow's first packet through a node and the
//! endpoint's answer back, so that its later packets are ctstate ESTABLISHED.

use sim_core::{Packet, SimTime};
use sim_netfilter::netns::{Egress, Ingress, Netns};

/// Sends `p`, the first packet of its flow, and the endpoint's answer to what left the node
/// (back through the node, un-NAT'd), so that the flow's entry has seen a reply: from then on
/// its packets are ctstate ESTABLISHED, as in a real established connection.
pub fn establish(n: &mut Netns, p: Packet, from: Ingress) {
    let r = n.process(SimTime::ZERO, p, from);
    let Some(Egress::Transmit { dev, packet, .. }) = r.out.first().copied() else {
        panic!("the first packet of {p} was not forwarded: {:?}", r.fate);
    };
    let mut reply = packet;
    (reply.src, reply.dst) = (packet.dst, packet.src);
    if let (Some(s), Some(d)) = (packet.sport(), packet.dport()) {
        reply.set_sport(d);
        reply.set_dport(s);
    }
    let back = n.process(SimTime::ZERO, reply, Ingress::Interface(dev));
    assert!(
        matches!(back.out.first(), Some(Egress::Transmit { packet, .. }) if packet.dst == p.src),
        "the reply to {p} did not come back to its client: {:?}",
        back.fate
    );
}
