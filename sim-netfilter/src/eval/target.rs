//! The targets that are not verdicts or jumps: REJECT's response packet, the NAT targets'
//! request to conntrack, MARK, CONNMARK, CT, LOG and TRACE.

use std::net::IpAddr;

use sim_core::packet::icmp;
use sim_core::{Packet, TcpFlags, L4};

use crate::rule::*;
use crate::trace::{Trace, TraceEvent};

use super::{is_icmp_error, Action, CtState, EvalCtx, NatRequest, Verdict};

impl RejectWith {
    /// The packet the kernel sends back for a packet rejected with this (`nf_send_unreach` /
    /// `nf_send_reset`), or `None` when it sends nothing (a RST is never answered with a RST;
    /// an ICMP error never with an ICMP error). `icmp_src` is the address the ICMP error comes
    /// from (the rejecting host's address toward the sender).
    pub fn response(self, pkt: &Packet, icmp_src: IpAddr) -> Option<Packet> {
        match self.icmp_code() {
            Some(code) => {
                if is_icmp_error(pkt) {
                    return None;
                }
                // nf_send_unreach / nf_send_unreach6: ICMP type 3 or ICMPv6 type 1.
                let t = if self.is_icmp6() {
                    icmp::V6_DEST_UNREACH
                } else {
                    icmp::DEST_UNREACH
                };
                Some(Packet::icmp_error(icmp_src, pkt, t, code))
            }
            None => {
                let L4::Tcp {
                    sport,
                    dport,
                    flags,
                    seq,
                    ack,
                    ..
                } = pkt.l4
                else {
                    return None;
                };
                if flags.contains(TcpFlags::RST) {
                    return None;
                }
                let mut r = Packet::tcp(
                    std::net::SocketAddr::new(pkt.dst, dport),
                    std::net::SocketAddr::new(pkt.src, sport),
                    TcpFlags::RST,
                );
                r.len = if pkt.is_ipv4() { 40 } else { 60 };
                let payload = pkt.tcp_payload_len();
                if let L4::Tcp {
                    flags: rf,
                    seq: rseq,
                    ack: rack,
                    ..
                } = &mut r.l4
                {
                    if flags.contains(TcpFlags::ACK) {
                        *rseq = ack;
                    } else {
                        *rseq = 0;
                        *rack = seq
                            .wrapping_add(u32::from(flags.contains(TcpFlags::SYN)))
                            .wrapping_add(u32::from(flags.contains(TcpFlags::FIN)))
                            .wrapping_add(payload);
                        *rf = TcpFlags::RST | TcpFlags::ACK;
                    }
                }
                Some(r)
            }
        }
    }
}

/// Runs a target that is not a verdict or a jump: REJECT and the NAT targets end the walk
/// (returns true); MARK, CONNMARK, CT, LOG and TRACE change the context and continue.
pub(crate) fn effect(
    target: &Target,
    ctx: &mut EvalCtx<'_>,
    out: &mut Verdict,
    trace: Option<&mut Trace>,
) -> bool {
    match target {
        Target::Reject(w) => {
            out.action = Action::Reject(*w);
            true
        }
        Target::Dnat(r) => {
            out.nat = Some(NatRequest::Dnat(r.clone()));
            true
        }
        Target::Snat(r) => {
            out.nat = Some(NatRequest::Snat(r.clone()));
            true
        }
        Target::Masquerade(p) => {
            out.nat = Some(NatRequest::Masquerade(p.clone()));
            true
        }
        Target::Redirect(p) => {
            out.nat = Some(NatRequest::Redirect(p.clone()));
            true
        }
        Target::Mark { value, mask } => {
            let from = ctx.packet.mark;
            ctx.packet.mark = (from & !mask) ^ value;
            if let Some(t) = trace {
                t.push(TraceEvent::Mark {
                    from,
                    to: ctx.packet.mark,
                });
            }
            false
        }
        Target::Connmark(op) => {
            // xt_connmark connmark_tg_shift: nothing without a tracked entry.
            if let CtState::Tracked(ci) = &mut ctx.ct {
                let (old_ct, old_mark) = (ci.mark, ctx.packet.mark);
                match *op {
                    ConnmarkOp::Set { value, mask } => ci.mark = (ci.mark & !mask) ^ value,
                    ConnmarkOp::Save { nfmask, ctmask } => {
                        ci.mark = (ci.mark & !ctmask) ^ (ctx.packet.mark & nfmask)
                    }
                    ConnmarkOp::Restore { nfmask, ctmask } => {
                        ctx.packet.mark = (ctx.packet.mark & !nfmask) ^ (ci.mark & ctmask)
                    }
                }
                if ci.mark != old_ct {
                    out.ct_mark = Some(ci.mark);
                }
                if let Some(t) = trace {
                    if ci.mark != old_ct {
                        t.push(TraceEvent::CtMark {
                            from: old_ct,
                            to: ci.mark,
                        });
                    }
                    if ctx.packet.mark != old_mark {
                        t.push(TraceEvent::Mark {
                            from: old_mark,
                            to: ctx.packet.mark,
                        });
                    }
                }
            }
            false
        }
        Target::Ct { notrack, .. } => {
            if *notrack {
                out.notrack = true;
                ctx.ct = CtState::Untracked;
            }
            false
        }
        Target::Log(l) => {
            if let Some(t) = trace {
                t.push(TraceEvent::Log {
                    prefix: l.prefix.clone(),
                    level: l.level,
                });
            }
            false
        }
        Target::Trace => {
            if let Some(t) = trace {
                t.push(TraceEvent::TraceTarget);
            }
            false
        }
        // Verdicts and jumps are the walkers' business.
        Target::None
        | Target::Accept
        | Target::Drop
        | Target::Return
        | Target::Jump(_)
        | Target::Goto(_) => false,
    }
}
