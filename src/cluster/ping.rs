//! A ping client: ICMP echo requests on one ping socket, as `ping` sends them
//! (`docs/kernel-model.md` §4 and §11).
//!
//! `ping` opens one ICMP datagram socket (`SOCK_DGRAM`, `IPPROTO_ICMP`) for its whole life.
//! The kernel gives that socket an identifier the way it gives a UDP socket a port
//! (`ping_get_port`): one more than the namespace's `ping_port_rover`, which starts at a
//! random value when the namespace is created and moves with every socket, skipping 0 and
//! identifiers in use. Every echo request carries that identifier and the sequence number
//! (1, 2, 3, …); the kernel delivers an echo reply to the socket whose identifier it
//! carries (`ping_lookup`). Conntrack keys the flow on the identifier: every request of one
//! `ping` refreshes one entry, 30 s (`nf_conntrack_icmp_timeout`), never ASSURED.
//!
//! The client is sans-IO like the others in [`crate::cluster::apps`]: `handle_timeout` sends
//! due requests and ends those past their timeout, `handle_packet` takes replies and ICMP
//! errors, `poll_timeout` names the next deadline.

use crate::cluster::apps::{
    due_at, AppEvent, ClientSchedule, Outbox, Pacing, QueryOutcome, QueryRecord, Scheduler, Tag,
};
use crate::cluster::querylog::QueryLog;
use sim_core::packet::icmp;
use sim_core::{IcmpBody, Packet, SimDuration, SimRng, SimTime, L4};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// The kernel's answer to an echo request for one of its addresses (`icmp_echo`, with
/// `net.ipv4.icmp_echo_ignore_all` = 0): an echo reply from the address asked, with the
/// request's identifier, sequence number and tag. `None` for anything else.
pub fn echo_reply(req: &Packet) -> Option<Packet> {
    let L4::Icmp {
        icmp_type,
        body: IcmpBody::Query { id, seq },
        ..
    } = req.l4
    else {
        return None;
    };
    let reply_type = match icmp_type {
        icmp::ECHO_REQUEST if req.is_ipv4() => icmp::ECHO_REPLY,
        icmp::V6_ECHO_REQUEST if !req.is_ipv4() => icmp::V6_ECHO_REPLY,
        _ => return None,
    };
    let mut p = Packet::icmp_echo_request(req.dst, req.src, id, seq);
    if let L4::Icmp { icmp_type, .. } = &mut p.l4 {
        *icmp_type = reply_type;
    }
    p.len = req.len;
    p.tag = req.tag;
    Some(p)
}

/// The configuration of a [`PingClient`].
#[derive(Clone, Debug)]
pub struct PingClientConfig {
    /// Index of the client in the scenario (goes into the [`Tag`]).
    pub index: u32,
    /// The client's address.
    pub local_ip: IpAddr,
    /// Where echo requests go.
    pub dst: IpAddr,
    /// When it sends.
    pub schedule: ClientSchedule,
    /// How long one request waits for its reply (`ping -W`).
    pub timeout: SimDuration,
    /// The socket's identifier (from [`PingIdents`]).
    pub ident: u16,
}

/// A namespace's `ping_port_rover`: hands out ping socket identifiers (`ping_get_port`).
#[derive(Clone, Debug)]
pub struct PingIdents {
    rover: u16,
    in_use: BTreeSet<u16>,
}

impl PingIdents {
    /// The rover of a new namespace: a random start (`get_random_u16()` at namespace
    /// creation), drawn from `seed` and `label`.
    pub fn new(seed: u64, label: &str) -> PingIdents {
        PingIdents {
            rover: SimRng::child(seed, label, "ping_port_rover").next_u32() as u16,
            in_use: BTreeSet::new(),
        }
    }
    /// The next free identifier after the rover, skipping 0 (`ping_get_port` with ident 0).
    pub fn assign(&mut self) -> Option<u16> {
        let mut result = self.rover.wrapping_add(1);
        for _ in 0..=u16::MAX as u32 {
            if result != 0 && !self.in_use.contains(&result) {
                self.rover = result;
                self.in_use.insert(result);
                return Some(result);
            }
            result = result.wrapping_add(1);
        }
        None
    }
}

/// A ping client: one echo request per interval, each waiting `timeout` for its reply.
#[derive(Debug, Clone)]
pub struct PingClient {
    cfg: PingClientConfig,
    sends: Scheduler,
    /// Requests waiting for a reply, by ICMP sequence number, with their deadline.
    inflight: BTreeMap<u16, (u32, SimTime)>,
    deadlines: BTreeSet<(SimTime, u32)>,
    records: QueryLog,
}

impl PingClient {
    /// A client; `seed` and `label` name its jitter stream (`{label}/jitter`).
    pub fn new(cfg: PingClientConfig, seed: u64, label: &str) -> PingClient {
        let mut c = PingClient {
            sends: Scheduler::new(seed, label),
            inflight: BTreeMap::new(),
            deadlines: BTreeSet::new(),
            records: QueryLog::new(),
            cfg,
        };
        c.sends.schedule(&c.cfg.schedule, Pacing::Periodic(None));
        c
    }
    /// The configuration.
    pub fn config(&self) -> &PingClientConfig {
        &self.cfg
    }
    /// The requests kept, in order (`src_port` holds the identifier): every one so far,
    /// unless the driver took the finished ones ([`PingClient::take_finished`]).
    pub fn records(&self) -> &[QueryRecord] {
        self.records.kept()
    }
    /// Removes the answered and timed-out requests at the front of [`PingClient::records`]
    /// and returns them (an ended request never changes again).
    pub fn take_finished(&mut self) -> Vec<QueryRecord> {
        self.records.take_finished(|_| false)
    }
    /// The socket's identifier, which takes the place of a port.
    pub fn ident(&self) -> u16 {
        self.cfg.ident
    }
    /// The next instant it needs [`PingClient::handle_timeout`].
    pub fn poll_timeout(&self) -> Option<SimTime> {
        // The earlier of the next send and the nearest deadline, where either exists.
        [self.sends.next(), self.deadlines.first().map(|(t, _)| *t)]
            .into_iter()
            .flatten()
            .min()
    }
    /// The ICMP sequence number of request `k` (ping counts from 1, modulo 2^16).
    fn icmp_seq(k: u32) -> u16 {
        (k.wrapping_add(1) & 0xffff) as u16
    }
    fn end(&mut self, now: SimTime, k: u32, outcome: QueryOutcome) {
        if let Some((_, deadline)) = self.inflight.remove(&Self::icmp_seq(k)) {
            self.deadlines.remove(&(deadline, k));
        }
        if let Some(r) = self.records.get_mut(k) {
            r.outcome = outcome;
        }
        let _ = now;
    }
    /// Sends due requests and ends those whose timeout passed.
    pub fn handle_timeout(&mut self, now: SimTime, out: &mut Outbox) {
        let due = due_at(&self.deadlines, now);
        for k in due {
            self.end(now, k, QueryOutcome::TimedOut(now));
            out.events.push((
                now,
                AppEvent::QueryTimedOut {
                    query: k,
                    attempts: 1,
                },
            ));
        }
        while let Some(k) = self
            .sends
            .take_due(now, &self.cfg.schedule, Pacing::Periodic(None))
        {
            let seq = Self::icmp_seq(k);
            // A request still waiting with the same sequence number (65,536 requests ago)
            // is given up: its reply could not be told apart.
            if let Some(&(old, _)) = self.inflight.get(&seq) {
                self.end(now, old, QueryOutcome::TimedOut(now));
            }
            let deadline = now + self.cfg.timeout;
            self.inflight.insert(seq, (k, deadline));
            self.deadlines.insert((deadline, k));
            self.records.push(QueryRecord {
                seq: k,
                sent_at: now,
                src_port: self.cfg.ident,
                attempts: 1,
                outcome: QueryOutcome::Pending,
            });
            let tag = Tag {
                client: self.cfg.index,
                seq: k,
                attempt: 0,
            };
            out.packets.push(
                Packet::icmp_echo_request(self.cfg.local_ip, self.cfg.dst, self.cfg.ident, seq)
                    .tagged(tag.pack()),
            );
            out.events.push((
                now,
                AppEvent::PingSent {
                    query: k,
                    ident: self.cfg.ident,
                    icmp_seq: seq,
                    src: self.cfg.local_ip,
                    dst: self.cfg.dst,
                },
            ));
        }
    }
    /// An echo reply or an ICMP error for its identifier arrived.
    pub fn handle_packet(&mut self, now: SimTime, pkt: &Packet, out: &mut Outbox) {
        match pkt.l4 {
            L4::Icmp {
                icmp_type,
                body: IcmpBody::Query { id, seq },
                ..
            } if id == self.cfg.ident
                && (icmp_type == icmp::ECHO_REPLY || icmp_type == icmp::V6_ECHO_REPLY) =>
            {
                let Some(&(k, _)) = self.inflight.get(&seq) else {
                    return; // a reply after its timeout: ping counts it as late, not received
                };
                self.end(now, k, QueryOutcome::Answered(now));
                let rtt = now - self.records.get(k).map_or(now, |r| r.sent_at);
                out.events.push((
                    now,
                    AppEvent::PingAnswered {
                        query: k,
                        rtt,
                        from: pkt.src,
                    },
                ));
            }
            L4::Icmp {
                icmp_type,
                code,
                body: IcmpBody::Error(inner),
            } if icmp::is_dest_unreach(!pkt.is_ipv4(), icmp_type)
                && inner.src == self.cfg.local_ip
                && inner.sport == self.cfg.ident =>
            {
                // ping_err: the error reaches the socket; ping reports the request failed.
                // The quote names the identifier; which request it was comes from the tag
                // (the quoted sequence number), else the oldest one waiting.
                let tagged = Tag::unpack(pkt.tag)
                    .filter(|t| t.client == self.cfg.index)
                    .map(|t| t.seq)
                    .filter(|k| self.inflight.contains_key(&Self::icmp_seq(*k)));
                let Some(k) = tagged.or_else(|| self.deadlines.first().map(|(_, k)| *k)) else {
                    return;
                };
                self.end(now, k, QueryOutcome::IcmpError(now, code));
                out.events.push((
                    now,
                    AppEvent::QueryRefused {
                        query: k,
                        code,
                        icmpv6: !pkt.is_ipv4(),
                    },
                ));
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(count: u32) -> PingClient {
        PingClient::new(
            PingClientConfig {
                index: 2,
                local_ip: "10.244.1.5".parse().unwrap(),
                dst: "10.244.2.7".parse().unwrap(),
                schedule: ClientSchedule {
                    start: SimTime::ZERO,
                    stop: SimTime::MAX,
                    interval: SimDuration::from_secs(1),
                    jitter: SimDuration::ZERO,
                    count: Some(count),
                },
                timeout: SimDuration::from_secs(2),
                ident: 4242,
            },
            1,
            "ping",
        )
    }

    #[test]
    fn requests_carry_the_socket_ident_and_count_from_one() {
        let mut c = client(3);
        let mut out = Outbox::new();
        for s in 0..3 {
            c.handle_timeout(SimTime::from_secs(s), &mut out);
        }
        let ids: Vec<(u16, u16)> = out
            .packets
            .iter()
            .map(|p| match p.l4 {
                L4::Icmp {
                    icmp_type: icmp::ECHO_REQUEST,
                    body: IcmpBody::Query { id, seq },
                    ..
                } => (id, seq),
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(ids, [(4242, 1), (4242, 2), (4242, 3)]);
    }

    #[test]
    fn a_reply_answers_its_request_and_a_missing_one_times_out() {
        let mut c = client(2);
        let mut out = Outbox::new();
        c.handle_timeout(SimTime::ZERO, &mut out);
        let req = out.packets[0];
        let mut reply = Packet::icmp_echo_request(req.dst, req.src, 4242, 1);
        if let L4::Icmp { icmp_type, .. } = &mut reply.l4 {
            *icmp_type = icmp::ECHO_REPLY;
        }
        c.handle_packet(SimTime::from_millis(3), &reply, &mut out);
        assert_eq!(
            c.records()[0].outcome,
            QueryOutcome::Answered(SimTime::from_millis(3))
        );
        c.handle_timeout(SimTime::from_secs(1), &mut out);
        c.handle_timeout(SimTime::from_secs(3), &mut out);
        assert_eq!(
            c.records()[1].outcome,
            QueryOutcome::TimedOut(SimTime::from_secs(3))
        );
        // Another ident's reply is not ours.
        let mut c = client(1);
        c.handle_timeout(SimTime::ZERO, &mut out);
        let mut other = reply;
        if let L4::Icmp { body, .. } = &mut other.l4 {
            *body = IcmpBody::Query { id: 7, seq: 1 };
        }
        c.handle_packet(SimTime::from_millis(1), &other, &mut out);
        assert_eq!(c.records()[0].outcome, QueryOutcome::Pending);
    }

    #[test]
    fn idents_follow_the_rover_and_skip_zero_and_those_in_use() {
        let mut ids = PingIdents {
            rover: u16::MAX - 1,
            in_use: [1u16].into(),
        };
        assert_eq!(ids.assign(), Some(u16::MAX));
        assert_eq!(ids.assign(), Some(2), "0 and 1 skipped");
        let a = PingIdents::new(5, "pod/x").assign();
        assert_eq!(a, PingIdents::new(5, "pod/x").assign(), "seeded");
    }
}
