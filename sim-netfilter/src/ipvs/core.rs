//! What IPVS does with a packet (`ip_vs_core.c`): `ip_vs_in` for a packet from a client
//! (look the connection up, or schedule a new one, then transmit by NAT), `ip_vs_out` for a
//! packet from a real server (un-NAT its source), and the expiry of connections
//! (`ip_vs_conn_expire`). Sans-IO: the namespace (`netns/ipvs_hook.rs`) calls these at its
//! hooks with a [`PacketView`] and applies the verdict to the packet and conntrack.

use std::net::IpAddr;

use sim_core::{SimDuration, SimTime, TcpFlags};

use super::conn::{next_tcp_state, Dir, InKey, OutKey};
use super::sched::SchedInput;
use super::{
    Conn, ConnFlags, ConnId, ConnState, DestKey, FwdMethod, Ipvs, Protocol, SctpState,
    ServiceFlags, ServiceKey,
};

/// What IPVS reads of a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PacketView {
    /// Its protocol.
    pub protocol: Protocol,
    /// Source address.
    pub saddr: IpAddr,
    /// Source port.
    pub sport: u16,
    /// Destination address.
    pub daddr: IpAddr,
    /// Destination port.
    pub dport: u16,
    /// TCP flags (TCP only).
    pub tcp_flags: Option<TcpFlags>,
    /// The IP length in bytes (the stats' byte counters).
    pub len: u16,
}

/// What IPVS knows of the packet's conntrack entry (`nf_ct_get`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtView {
    /// The packet has an entry (it is tracked).
    pub tracked: bool,
    /// The entry is confirmed: an old one, not created by this packet.
    pub confirmed: bool,
}

/// What `ip_vs_in` decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InVerdict {
    /// Not IPVS's: the packet goes on as it is (`NF_ACCEPT`).
    Accept,
    /// Dropped (`NF_DROP`).
    Drop,
    /// No real server available: dropped and answered with an ICMP port unreachable
    /// (`ip_vs_leave`'s `icmp_send(ICMP_DEST_UNREACH, ICMP_PORT_UNREACH)`, for TCP too).
    Unreachable,
    /// Transmit by NAT to the real server (`ip_vs_nat_xmit`): the destination is rewritten
    /// to `daddr`:`dport`.
    Nat {
        /// The connection.
        conn: ConnId,
        /// The real server's address.
        daddr: IpAddr,
        /// The real server's port.
        dport: u16,
        /// `IP_VS_CONN_F_NFCT`: the conntrack entry is kept and, while unconfirmed, its reply
        /// tuple altered (`ip_vs_update_conntrack`); without it the packet is made
        /// untracked (`ip_vs_notrack`).
        nfct: bool,
        /// The forwarding method (only NAT transmits here; others are refused upstream).
        fwd: FwdMethod,
    },
}

/// What `ip_vs_out` decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutVerdict {
    /// Not a reply of an IPVS connection.
    Accept,
    /// A reply: its source is rewritten to the virtual address and port
    /// (`handle_response`).
    Snat {
        /// The connection.
        conn: ConnId,
        /// The virtual address.
        vaddr: IpAddr,
        /// The virtual port.
        vport: u16,
        /// As in [`InVerdict::Nat`].
        nfct: bool,
    },
}

/// A verdict and the line `trace` shows for it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Decision<V> {
    /// The verdict.
    pub verdict: V,
    /// What IPVS did, in words, or `None` when the packet was not its business.
    pub note: Option<String>,
}

/// The conntrack entry (by its original tuple) to kill when a connection expired
/// (`ip_vs_conn_drop_conntrack`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CtKill {
    /// Protocol number.
    pub proto: u8,
    /// Client address.
    pub caddr: IpAddr,
    /// Client port.
    pub cport: u16,
    /// Virtual address.
    pub vaddr: IpAddr,
    /// Virtual port.
    pub vport: u16,
}

/// `is_new_conn`: a TCP SYN without ACK (SCTP INIT is not modelled; UDP never).
fn is_new_conn(p: &PacketView) -> bool {
    p.protocol == Protocol::Tcp
        && p.tcp_flags
            .is_some_and(|f| f.contains(TcpFlags::SYN) && !f.contains(TcpFlags::ACK))
}

fn addr_port(a: IpAddr, p: u16) -> String {
    super::text::addr_port(a, p)
}

fn mask(a: IpAddr, len: u8) -> IpAddr {
    match a {
        IpAddr::V4(v) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(len.min(32)))
            };
            IpAddr::V4((u32::from(v) & m).into())
        }
        IpAddr::V6(v) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(len.min(128)))
            };
            IpAddr::V6((u128::from(v) & m).into())
        }
    }
}

impl Ipvs {
    /// `ip_vs_in` (LOCAL_IN at priority `NF_IP_PRI_NAT_SRC - 1`, and LOCAL_OUT at
    /// `NF_IP_PRI_NAT_DST + 2` for locally generated packets, `ip_vs_local_request4`).
    pub fn ip_vs_in(&mut self, now: SimTime, p: &PacketView, ct: CtView) -> Decision<InVerdict> {
        let key = InKey {
            template: false,
            protocol: p.protocol,
            caddr: p.saddr,
            cport: p.sport,
            vaddr: p.daddr,
            vport: p.dport,
        };
        let mut cp = self.conns.lookup_in(&key);
        let mut note = String::new();

        // conn_reuse_mode: a new SYN on the tuple of an old connection.
        if let Some(id) = cp {
            if self.sysctls.conn_reuse_mode != 0 && is_new_conn(p) {
                match self.conn_reuse(now, id, ct) {
                    Reuse::Keep => {}
                    Reuse::Reschedule(why) => {
                        note.push_str(&why);
                        cp = None;
                    }
                    Reuse::Drop(why) => {
                        return Decision {
                            verdict: InVerdict::Drop,
                            note: Some(why),
                        }
                    }
                }
            }
        }

        // The server status (`IP_VS_DEST_F_AVAILABLE`), before scheduling: a deleted real
        // server's connection drops its packets; with expire_nodest_conn it is expired now,
        // and the packet scheduled afresh unless the connection uses an old conntrack entry
        // (then the packet is dropped and the entry goes with the connection).
        if let Some(id) = cp {
            let gone = self
                .conns
                .get(id)
                .and_then(|c| c.dest)
                .filter(|&dk| !self.dest_available(dk));
            if let Some(dk) = gone {
                let server = addr_port(dk.addr, dk.port);
                if !self.sysctls.expire_nodest_conn {
                    return Decision {
                        verdict: InVerdict::Drop,
                        note: Some(format!(
                            "{note}connection to {server} whose real server is gone: dropped (expire_nodest_conn=0: until the connection times out)"
                        )),
                    };
                }
                if self.uses_ct(id, ct) {
                    self.conns.set_expiry(id, now);
                    return Decision {
                        verdict: InVerdict::Drop,
                        note: Some(format!(
                            "{note}connection to {server} whose real server is gone: expired (expire_nodest_conn=1), packet dropped as the connection uses conntrack"
                        )),
                    };
                }
                // `cp->flags &= ~IP_VS_CONN_F_NFCT`, expired, rescheduled.
                let _no_ct_to_kill = self.expire_conn(id);
                note.push_str(&format!(
                    "connection to {server} whose real server is gone: expired (expire_nodest_conn=1); "
                ));
                cp = None;
            }
        }
        let id = match cp {
            Some(id) => id,
            None => {
                let svc_key = ServiceKey {
                    protocol: p.protocol,
                    addr: p.daddr,
                    port: p.dport,
                };
                if !self.services.contains_key(&svc_key) {
                    return Decision {
                        verdict: InVerdict::Accept,
                        note: (!note.is_empty()).then_some(note),
                    };
                }
                // tcp_conn_schedule: only a SYN (no RST) schedules a TCP connection
                // (`sloppy_tcp` is 0); anything else goes on to the local stack.
                if p.protocol == Protocol::Tcp
                    && !p
                        .tcp_flags
                        .is_some_and(|f| f.contains(TcpFlags::SYN) && !f.contains(TcpFlags::RST))
                {
                    note.push_str(&format!(
                        "no connection for {} -> {} and not a SYN: not scheduled, goes on to the local stack",
                        addr_port(p.saddr, p.sport),
                        addr_port(p.daddr, p.dport)
                    ));
                    return Decision {
                        verdict: InVerdict::Accept,
                        note: Some(note),
                    };
                }
                match self.ip_vs_schedule(now, svc_key, p) {
                    Ok((id, why)) => {
                        note.push_str(&why);
                        id
                    }
                    Err(why) => {
                        note.push_str(&why);
                        return Decision {
                            verdict: InVerdict::Unreachable,
                            note: Some(note),
                        };
                    }
                }
            }
        };

        let Some(c) = self.conns.get(id) else {
            return Decision {
                verdict: InVerdict::Accept,
                note: None,
            };
        };
        let (daddr, dport, nfct, dest, one_packet) =
            (c.daddr, c.dport, c.flags.nfct, c.dest, c.timeout.is_zero());
        if cp.is_some() {
            note.push_str(&format!(
                "connection {} -> {} -> {} found ({})",
                addr_port(p.saddr, p.sport),
                addr_port(p.daddr, p.dport),
                addr_port(daddr, dport),
                c.state_name()
            ));
        }
        self.in_stats(dest, p.len);
        self.set_state(id, Dir::Input, p);
        let fwd = dest
            .and_then(|dk| self.live_dest(dk).map(|d| d.spec.fwd))
            .unwrap_or(FwdMethod::Masq);
        if one_packet {
            // IP_VS_CONN_F_ONE_PACKET: not kept once transmitted (and its conntrack entry,
            // never altered, is left to conntrack).
            let _ = self.expire_conn(id);
        } else {
            self.conn_put(now, id);
        }
        Decision {
            verdict: InVerdict::Nat {
                conn: id,
                daddr,
                dport,
                nfct,
                fwd,
            },
            note: Some(note),
        }
    }

    /// `ip_vs_out` (LOCAL_IN at `NF_IP_PRI_NAT_SRC - 2`, LOCAL_OUT at `NF_IP_PRI_NAT_DST + 1`,
    /// FORWARD at 100): a packet from a real server to a client of a NAT connection gets the
    /// virtual address and port as its source (`handle_response`).
    pub fn ip_vs_out(&mut self, now: SimTime, p: &PacketView) -> Decision<OutVerdict> {
        let key = OutKey {
            protocol: p.protocol,
            daddr: p.saddr,
            dport: p.sport,
            caddr: p.daddr,
            cport: p.dport,
        };
        let Some(id) = self.conns.lookup_out(&key) else {
            return Decision {
                verdict: OutVerdict::Accept,
                note: None,
            };
        };
        let Some(c) = self.conns.get(id) else {
            return Decision {
                verdict: OutVerdict::Accept,
                note: None,
            };
        };
        // handle_response only for masquerading connections.
        let fwd = c
            .dest
            .and_then(|dk| self.live_dest(dk).map(|d| d.spec.fwd))
            .unwrap_or(FwdMethod::Masq);
        if fwd != FwdMethod::Masq {
            return Decision {
                verdict: OutVerdict::Accept,
                note: None,
            };
        }
        let (vaddr, vport, nfct, dest) = (c.vaddr, c.vport, c.flags.nfct, c.dest);
        let note = format!(
            "reply of connection {} -> {}: source {} rewritten to {}",
            addr_port(c.caddr, c.cport),
            addr_port(vaddr, vport),
            addr_port(p.saddr, p.sport),
            addr_port(vaddr, vport)
        );
        self.out_stats(dest, p.len);
        self.set_state(id, Dir::Output, p);
        self.conn_put(now, id);
        Decision {
            verdict: OutVerdict::Snat {
                conn: id,
                vaddr,
                vport,
                nfct,
            },
            note: Some(note),
        }
    }

    /// When the next connection expires.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        self.conns.next_expiry()
    }

    /// Expires the connections due at `now` (`ip_vs_conn_expire`): a template that still
    /// controls flows waits 60 s more (and keeps 60 s as its timeout); the others are
    /// unhashed, their real servers' counters decremented, and the conntrack entries of
    /// those that used conntrack returned, for the namespace to kill
    /// (`ip_vs_conn_drop_conntrack`).
    pub fn handle_timeout(&mut self, now: SimTime) -> Vec<CtKill> {
        let mut kills = Vec::new();
        // One timer at a time, earliest first, each at its own instant: a template re-armed
        // while its flows live must see them expire in order.
        while let Some((at, id)) = self.conns.first_due(now) {
            let Some(c) = self.conns.get(id) else { break };
            if c.n_control > 0 {
                // expire_later: `cp->timeout = 60*HZ`.
                let t = SimDuration::from_secs(60);
                if let Some(c) = self.conns.get_mut(id) {
                    c.timeout = t;
                }
                self.conns.set_expiry(id, at.saturating_add(t));
                continue;
            }
            if let Some(k) = self.expire_conn(id) {
                kills.push(k);
            }
        }
        kills
    }

    /// Unlinks a connection: control, counters, and the conntrack entry to drop.
    fn expire_conn(&mut self, id: ConnId) -> Option<CtKill> {
        let c = self.conns.remove(id)?;
        if let Some(t) = c.control {
            if let Some(tc) = self.conns.get_mut(t) {
                tc.n_control = tc.n_control.saturating_sub(1);
            }
        }
        if let Some(dk) = c.dest {
            self.unbind_dest(dk, &c);
        }
        (c.flags.nfct && c.cport != 0 && !c.flags.template).then_some(CtKill {
            proto: c.protocol.number(),
            caddr: c.caddr,
            cport: c.cport,
            vaddr: c.vaddr,
            vport: c.vport,
        })
    }

    /// `ip_vs_expire_nodest_conn_flush` (Linux 5.9 and later, with `expire_nodest_conn`):
    /// the connections of real servers no longer in their service are expired at once
    /// (with the templates controlling them), instead of at their next packet.
    pub(super) fn expire_nodest_conns(&mut self) {
        if !(self.sysctls.expire_nodest_conn && self.sysctls.kernel_5_9) {
            return;
        }
        let ids: Vec<ConnId> = self
            .conns
            .in_proc_order()
            .iter()
            .filter(|c| c.n_control == 0 && c.dest.is_some_and(|dk| !self.dest_available(dk)))
            .map(|c| c.id)
            .collect();
        for id in ids {
            let control = self.conns.get(id).and_then(|c| c.control);
            if let Some(t) = control {
                self.conns.set_expiry(t, SimTime::ZERO);
            }
            self.conns.set_expiry(id, SimTime::ZERO);
        }
    }

    /// `ip_vs_schedule`: picks a real server (through a template for a persistent service,
    /// `ip_vs_sched_persist`) and creates the connection.
    fn ip_vs_schedule(
        &mut self,
        now: SimTime,
        key: ServiceKey,
        p: &PacketView,
    ) -> Result<(ConnId, String), String> {
        let svc = &self.services[&key];
        let (sched, flags) = (svc.spec.scheduler, svc.spec.flags);
        let input = SchedInput {
            saddr: p.saddr,
            sport: p.sport,
            daddr: p.daddr,
        };
        let mut note = String::new();
        let (dest_i, template) = if flags.has(ServiceFlags::PERSISTENT) {
            let snet = mask(p.saddr, svc.spec.netmask_len);
            let tkey = InKey {
                template: true,
                protocol: p.protocol,
                caddr: snet,
                cport: 0,
                vaddr: p.daddr,
                vport: p.dport,
            };
            let found = self.conns.lookup_in(&tkey);
            let valid = found.filter(|&t| self.check_template(t));
            match valid {
                Some(t) => {
                    let dk = self.conns.get(t).and_then(|c| c.dest);
                    let svc = &self.services[&key];
                    let i = dk.and_then(|dk| {
                        svc.dests
                            .iter()
                            .position(|d| d.spec.addr == dk.addr && d.spec.port == dk.port)
                    });
                    let Some(i) = i else {
                        return Err("persistence template's real server is gone".into());
                    };
                    note.push_str(&format!(
                        "persistence template {} -> {} found: ",
                        addr_port(snet, 0),
                        addr_port(p.daddr, p.dport)
                    ));
                    (i, Some(t))
                }
                None => {
                    if found.is_some() {
                        note.push_str(
                            "persistence template invalidated (real server unavailable): ",
                        );
                    }
                    let (i, daddr, dport) = self
                        .pick(key, input)
                        .ok_or_else(|| format!("{note}{sched}: no destination available"))?;
                    let timeout_secs = self.services.get(&key).map_or(0, |s| s.spec.timeout_secs);
                    let timeout = SimDuration::from_secs(u64::from(timeout_secs));
                    let t = self.conn_new(
                        now,
                        key,
                        Conn {
                            protocol: p.protocol,
                            caddr: snet,
                            cport: 0,
                            vaddr: p.daddr,
                            vport: p.dport,
                            daddr,
                            dport,
                            flags: ConnFlags {
                                template: true,
                                ..ConnFlags::default()
                            },
                            ..blank(p.protocol, p.saddr)
                        },
                    );
                    if let Some(c) = self.conns.get_mut(t) {
                        c.timeout = timeout;
                    }
                    note.push_str(&format!(
                        "{sched} chose {} (new persistence template, {} s): ",
                        addr_port(daddr, dport),
                        timeout.as_secs()
                    ));
                    (i, Some(t))
                }
            }
        } else {
            let (i, daddr, dport) = self
                .pick(key, input)
                .ok_or_else(|| format!("{sched}: no destination available"))?;
            note.push_str(&format!("{sched} chose {}: ", addr_port(daddr, dport)));
            (i, None)
        };
        let svc = &self.services[&key];
        let d = &svc.dests[dest_i].spec;
        let (daddr, dport) = (d.addr, if d.port != 0 { d.port } else { p.dport });
        let one_packet = flags.has(ServiceFlags::ONEPACKET) && p.protocol == Protocol::Udp;
        let id = self.conn_new(
            now,
            key,
            Conn {
                protocol: p.protocol,
                caddr: p.saddr,
                cport: p.sport,
                vaddr: p.daddr,
                vport: p.dport,
                daddr,
                dport,
                control: template,
                ..blank(p.protocol, p.saddr)
            },
        );
        if one_packet {
            if let Some(c) = self.conns.get_mut(id) {
                c.timeout = SimDuration::ZERO;
            }
        }
        if let Some(t) = template {
            if let Some(tc) = self.conns.get_mut(t) {
                tc.n_control += 1;
            }
            // ip_vs_conn_put(ct): the template's timer restarts.
            self.conn_put(now, t);
        }
        // ip_vs_conn_stats.
        if let Some(s) = self.services.get_mut(&key) {
            s.stats.conns += 1;
            if let Some(d) = s.dests.get_mut(dest_i) {
                d.stats.conns += 1;
            }
        }
        note.push_str(&format!(
            "new connection {} -> {} -> {}",
            addr_port(p.saddr, p.sport),
            addr_port(p.daddr, p.dport),
            addr_port(daddr, dport)
        ));
        Ok((id, note))
    }

    /// The scheduler's pick for a new connection of `key` (`sched->schedule`): the real
    /// server's index in the list, its address and port.
    fn pick(&mut self, key: ServiceKey, input: SchedInput) -> Option<(usize, IpAddr, u16)> {
        let svc = self.services.get_mut(&key)?;
        let (sched, flags) = (svc.spec.scheduler, svc.spec.flags);
        let i = svc.sched.schedule(sched, flags, &svc.dests, input)?;
        let d = &svc.dests[i].spec;
        Some((i, d.addr, d.port))
    }

    /// `ip_vs_conn_new` + `ip_vs_bind_dest`: the connection starts INACTIVE (the dest's
    /// `conn_flags` carry `IP_VS_CONN_F_INACTIVE`), with a 3 s timeout until its first state
    /// transition, and uses conntrack when `net.ipv4.vs.conntrack` is set.
    fn conn_new(&mut self, now: SimTime, svc: ServiceKey, mut c: Conn) -> ConnId {
        let dk = DestKey {
            svc,
            addr: c.daddr,
            port: c.dport,
        };
        let fwd = self
            .live_dest(dk)
            .map(|d| d.spec.fwd)
            .unwrap_or(FwdMethod::Masq);
        c.dest = Some(dk);
        c.flags.inactive = true;
        c.flags.no_output = fwd != FwdMethod::Masq;
        c.flags.nfct = self.sysctls.conntrack;
        c.timeout = SimDuration::from_secs(3);
        c.expires = now.saturating_add(c.timeout);
        self.bind_dest(dk, &c);
        self.conns.insert(c)
    }

    /// `ip_vs_conn_put`: the timer restarts at `now + timeout`.
    fn conn_put(&mut self, now: SimTime, id: ConnId) {
        if let Some(t) = self.conns.get(id).map(|c| c.timeout) {
            self.conns.set_expiry(id, now.saturating_add(t));
        }
    }

    /// `ip_vs_check_template`: a template whose real server was deleted (or, with
    /// `expire_quiescent_template`, has weight 0) is invalidated: its ports become 65535 and
    /// 0 so no lookup finds it, and it lives on until its timer.
    fn check_template(&mut self, t: ConnId) -> bool {
        let Some(dk) = self.conns.get(t).and_then(|c| c.dest) else {
            return false;
        };
        let ok = match self.live_dest(dk) {
            None => false,
            Some(d) => !(self.sysctls.expire_quiescent_template && d.spec.weight == 0),
        };
        if !ok && self.conns.get(t).is_some_and(|c| c.vport != 0xffff) {
            self.conns.rehash(t, |c| {
                c.dport = 0xffff;
                c.vport = 0xffff;
                c.cport = 0;
            });
        }
        ok
    }

    /// The conn_reuse_mode handling at the top of `ip_vs_in`, as the kernel's version has
    /// it (see [`super::IpvsSysctls::kernel_5_9`]).
    fn conn_reuse(&mut self, now: SimTime, id: ConnId, ct: CtView) -> Reuse {
        let Some(c) = self.conns.get(id) else {
            return Reuse::Keep;
        };
        let quiesced = self.sysctls.expire_nodest_conn
            && c.dest
                .and_then(|dk| self.live_dest(dk))
                .is_some_and(|d| d.spec.weight == 0);
        let expected = || {
            // is_new_conn_expected: never for a flow controlled by a template.
            if c.control.is_some() {
                return false;
            }
            match c.state {
                ConnState::Tcp(s) => {
                    use super::TcpState as T;
                    s == T::TimeWait
                        || s == T::Close
                        || (self.sysctls.conn_reuse_mode & 2 != 0
                            && s == T::FinWait
                            && c.flags.no_output)
                }
                ConnState::Sctp(s) => s == SctpState::Closed,
                ConnState::Udp => false,
            }
        };
        let uses_ct = self.uses_ct(id, ct);
        let resched = if quiesced {
            true
        } else if expected() {
            c.n_control == 0 || !uses_ct
        } else {
            false
        };
        if !resched {
            return Reuse::Keep;
        }
        let state = c.state_name();
        let dest = addr_port(c.daddr, c.dport);
        let n_control = c.n_control;
        if !uses_ct {
            if let Some(c) = self.conns.get_mut(id) {
                c.flags.nfct = false;
            }
        }
        if n_control == 0 {
            // ip_vs_conn_expire_now: the timer fires at once. A connection that keeps
            // conntrack has its entry killed then (so the client's next SYN starts afresh);
            // one rescheduled right away makes room for the new connection now.
            if uses_ct {
                self.conns.set_expiry(id, now);
            } else {
                let _no_ct_to_kill = self.expire_conn(id);
            }
        }
        if uses_ct {
            Reuse::Drop(format!(
                "new SYN on the tuple of a {state} connection to {dest} that uses conntrack: connection expired, SYN dropped (conn_reuse_mode={}, {} kernel)",
                self.sysctls.conn_reuse_mode,
                if self.sysctls.kernel_5_9 { "5.9+" } else { "pre-5.9" }
            ))
        } else {
            Reuse::Reschedule(format!(
                "new SYN on the tuple of a {state} connection to {dest}: rescheduled (conn_reuse_mode={}); ",
                self.sysctls.conn_reuse_mode
            ))
        }
    }

    /// Whether connection `id` holds on to the packet's conntrack entry: before 5.9
    /// `ip_vs_conn_uses_conntrack` (any entry), from 5.9 `ip_vs_conn_uses_old_conntrack`
    /// (only a confirmed one; a new entry, as conntrack makes when it re-opens a closed
    /// tuple, does not count).
    fn uses_ct(&self, id: ConnId, ct: CtView) -> bool {
        self.conns.get(id).is_some_and(|c| c.flags.nfct)
            && ct.tracked
            && (!self.sysctls.kernel_5_9 || ct.confirmed)
    }

    /// `ip_vs_set_state`: the protocol's state transition and its timeout.
    fn set_state(&mut self, id: ConnId, dir: Dir, p: &PacketView) {
        let Some(c) = self.conns.get(id) else { return };
        let old = c.state;
        let mut no_output = c.flags.no_output;
        let new = match c.state {
            ConnState::Tcp(s) => ConnState::Tcp(next_tcp_state(
                s,
                &mut no_output,
                dir,
                p.tcp_flags.unwrap_or(TcpFlags::NONE),
            )),
            ConnState::Udp => ConnState::Udp,
            ConnState::Sctp(_) => ConnState::Sctp(SctpState::Established),
        };
        let timeout = if c.timeout.is_zero() {
            SimDuration::ZERO
        } else {
            self.timeouts.of(new)
        };
        let (inactive, dest) = (c.flags.inactive, c.dest);
        // set_tcp_state: active/inactive move with the ESTABLISHED state.
        let now_inactive = if old != new && dest.is_some() {
            if !inactive && !new.is_active() {
                true
            } else if inactive && new.is_active() {
                false
            } else {
                inactive
            }
        } else {
            inactive
        };
        if now_inactive != inactive {
            if let Some(dk) = dest {
                self.move_counter(dk, now_inactive);
            }
        }
        if let Some(c) = self.conns.get_mut(id) {
            c.state = new;
            c.flags.no_output = no_output;
            c.flags.inactive = now_inactive;
            c.timeout = timeout;
        }
    }

    fn dest_available(&self, dk: DestKey) -> bool {
        self.live_dest(dk).is_some()
    }

    fn live_dest(&self, dk: DestKey) -> Option<&super::Destination> {
        self.services.get(&dk.svc)?.dest(dk.addr, dk.port)
    }

    fn with_counters(&mut self, dk: DestKey, f: impl Fn(&mut super::DestCounters)) {
        let e = self.counters.entry(dk).or_default();
        f(e);
        let snapshot = *e;
        if snapshot.is_zero() {
            self.counters.remove(&dk);
        }
        if let Some(svc) = self.services.get_mut(&dk.svc) {
            if let Some(d) = svc
                .dests
                .iter_mut()
                .find(|d| d.spec.addr == dk.addr && d.spec.port == dk.port)
            {
                d.counters = snapshot;
                let total = snapshot.activeconns + snapshot.inactconns;
                // ip_vs_bind_dest / ip_vs_unbind_dest: the overload flag by thresholds.
                let (u, l) = (d.spec.u_threshold, d.spec.l_threshold);
                if u != 0 && total >= u {
                    d.overloaded = true;
                } else if l != 0 {
                    if total < l {
                        d.overloaded = false;
                    }
                } else if u != 0 {
                    if total * 4 < u * 3 {
                        d.overloaded = false;
                    }
                } else {
                    d.overloaded = false;
                }
            }
        }
    }

    fn bind_dest(&mut self, dk: DestKey, c: &Conn) {
        let (template, inactive) = (c.flags.template, c.flags.inactive);
        self.with_counters(dk, |k| {
            if template {
                k.persistconns += 1;
            } else if inactive {
                k.inactconns += 1;
            } else {
                k.activeconns += 1;
            }
        });
    }

    fn unbind_dest(&mut self, dk: DestKey, c: &Conn) {
        let (template, inactive) = (c.flags.template, c.flags.inactive);
        self.with_counters(dk, |k| {
            if template {
                k.persistconns = k.persistconns.saturating_sub(1);
            } else if inactive {
                k.inactconns = k.inactconns.saturating_sub(1);
            } else {
                k.activeconns = k.activeconns.saturating_sub(1);
            }
        });
    }

    fn move_counter(&mut self, dk: DestKey, to_inactive: bool) {
        self.with_counters(dk, |k| {
            if to_inactive {
                k.activeconns = k.activeconns.saturating_sub(1);
                k.inactconns += 1;
            } else {
                k.inactconns = k.inactconns.saturating_sub(1);
                k.activeconns += 1;
            }
        });
    }

    fn in_stats(&mut self, dk: Option<DestKey>, len: u16) {
        self.stats_of(dk, |s| {
            s.inpkts += 1;
            s.inbytes += u64::from(len);
        });
    }

    fn out_stats(&mut self, dk: Option<DestKey>, len: u16) {
        self.stats_of(dk, |s| {
            s.outpkts += 1;
            s.outbytes += u64::from(len);
        });
    }

    /// `ip_vs_in_stats` / `ip_vs_out_stats`: the real server's and its service's counters
    /// (only while the server is in the service).
    fn stats_of(&mut self, dk: Option<DestKey>, f: impl Fn(&mut super::Stats)) {
        let Some(dk) = dk else { return };
        let Some(svc) = self.services.get_mut(&dk.svc) else {
            return;
        };
        if let Some(d) = svc
            .dests
            .iter_mut()
            .find(|d| d.spec.addr == dk.addr && d.spec.port == dk.port)
        {
            f(&mut d.stats);
            f(&mut svc.stats);
        }
    }
}

/// What the conn_reuse_mode check decided.
enum Reuse {
    Keep,
    Reschedule(String),
    Drop(String),
}

/// A connection with every field but the addresses to be filled in.
fn blank(protocol: Protocol, caddr: IpAddr) -> Conn {
    Conn {
        id: 0,
        protocol,
        caddr,
        cport: 0,
        vaddr: caddr,
        vport: 0,
        daddr: caddr,
        dport: 0,
        state: ConnState::initial(protocol),
        flags: ConnFlags::default(),
        timeout: SimDuration::ZERO,
        expires: SimTime::ZERO,
        dest: None,
        control: None,
        n_control: 0,
        slot: (0, 0),
    }
}
