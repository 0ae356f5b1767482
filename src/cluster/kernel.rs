//! The one place the cluster talks to a node's kernel.
//!
//! Everything the simulation needs from a node's network namespace goes through [`Kernel`]:
//! interfaces and routes, `iptables-restore` / `iptables-save`, packet processing through the
//! hooks, conntrack listing/deletion/events and expiry. When `sim_netfilter::netns::Netns` lands
//! only this file changes.
//!
//! # TEST DOUBLE
//!
//! Until then, [`Kernel`] is a **minimal stand-in kernel, a test double**, not the simulator's
//! netfilter. It does not interpret iptables rules: the kube-proxy adapter hands it, next to the
//! restore text (which it only stores and prints back), the service → endpoint map that text
//! encodes ([`ServiceMap`]), and it picks endpoints the way kube-proxy's `statistic` chain does
//! (endpoint i of n with probability 1/(n−i), in order). It keeps a conntrack table with the
//! UDP timeout and `[ASSURED]` rules of KERNEL.md §2, a coarse TCP state machine, DNAT with
//! reply un-DNAT, RELATED ICMP errors, and `conntrack -L` / `-E` text. It does no SNAT or
//! MASQUERADE, no filter table, no early drop. Its conntrack filter understands the address and
//! port options of `conntrack -L` (`-p`, `-s`, `-d`, `-r`, `-q`, `--sport`, `--dport`,
//! `--reply-port-src`, `--reply-port-dst`) and their long forms.

use sim_core::packet::icmp;
use sim_core::{IcmpBody, IfName, Packet, SimDuration, SimRng, SimTime, TcpFlags, L4};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::net::IpAddr;

/// Where a packet enters the namespace.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Ingress {
    /// Received on an interface (PREROUTING).
    Interface(IfName),
    /// Sent by a local process (OUTPUT).
    Local,
}

/// What leaves the namespace after processing.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Egress {
    /// Sent out of `dev` towards `next_hop`.
    Transmit {
        /// Outgoing interface.
        dev: IfName,
        /// The next hop's address (the destination itself when on-link).
        next_hop: IpAddr,
        /// The packet as it leaves.
        packet: Packet,
    },
    /// Delivered to a local socket.
    LocalDeliver {
        /// The packet as delivered.
        packet: Packet,
    },
}

/// One endpoint of a service port, in kube-proxy's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceBackend {
    /// Endpoint address.
    pub ip: IpAddr,
    /// Endpoint port.
    pub port: u16,
}

/// The test double's view of the nat rules: (protocol, address, port) → endpoints (empty:
/// REJECT, "has no endpoints").
pub type ServiceMap = BTreeMap<(u8, IpAddr, u16), Vec<ServiceBackend>>;

/// A conntrack tuple (one direction).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Tuple {
    /// Protocol number.
    pub proto: u8,
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (0 when none).
    pub sport: u16,
    /// Destination port (0 when none).
    pub dport: u16,
}

impl Tuple {
    fn of(p: &Packet) -> Tuple {
        Tuple {
            proto: p.protocol(),
            src: p.src,
            dst: p.dst,
            sport: p.sport().unwrap_or(0),
            dport: p.dport().unwrap_or(0),
        }
    }
    fn inverse(self) -> Tuple {
        Tuple {
            proto: self.proto,
            src: self.dst,
            dst: self.src,
            sport: self.dport,
            dport: self.sport,
        }
    }
}

/// A conntrack entry as listed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtEntry {
    /// Original direction.
    pub orig: Tuple,
    /// Reply direction.
    pub reply: Tuple,
    /// Seconds left, floored, as `conntrack -L` prints.
    pub timeout_secs: u64,
    /// `[ASSURED]`.
    pub assured: bool,
    /// A reply was seen (no `[UNREPLIED]`).
    pub seen_reply: bool,
    /// TCP state name, for TCP.
    pub tcp_state: Option<&'static str>,
    /// The `conntrack -L` line.
    pub line: String,
}

/// Kind of a conntrack event.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CtEventKind {
    /// `[NEW]`.
    New,
    /// `[UPDATE]`.
    Update,
    /// `[DESTROY]`.
    Destroy,
}

/// A conntrack event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CtEvent {
    /// When.
    pub at: SimTime,
    /// Kind.
    pub kind: CtEventKind,
    /// The entry after the change.
    pub entry: CtEntry,
    /// The `conntrack -E` line.
    pub line: String,
}

/// A parsed `conntrack -L`/`-D` filter.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtFilter {
    proto: Option<u8>,
    orig_src: Option<IpAddr>,
    orig_dst: Option<IpAddr>,
    reply_src: Option<IpAddr>,
    reply_dst: Option<IpAddr>,
    orig_sport: Option<u16>,
    orig_dport: Option<u16>,
    reply_sport: Option<u16>,
    reply_dport: Option<u16>,
}

impl CtFilter {
    /// Matches every entry with this original destination and reply source (kube-proxy's
    /// cleanup filter).
    pub fn orig_dst_reply_src(proto: u8, orig_dst: IpAddr, reply_src: IpAddr) -> CtFilter {
        CtFilter {
            proto: Some(proto),
            orig_dst: Some(orig_dst),
            reply_src: Some(reply_src),
            ..CtFilter::default()
        }
    }
    /// Also requires this original destination.
    pub fn with_orig_dst(mut self, ip: IpAddr) -> CtFilter {
        self.orig_dst = Some(ip);
        self
    }
    /// Also requires this original destination port.
    pub fn with_orig_dport(mut self, port: u16) -> CtFilter {
        self.orig_dport = Some(port);
        self
    }
    /// Matches every entry of a protocol.
    pub fn proto(proto: u8) -> CtFilter {
        CtFilter {
            proto: Some(proto),
            ..CtFilter::default()
        }
    }
    fn matches(&self, e: &Entry) -> bool {
        let (o, r) = (e.orig, e.reply);
        self.proto.is_none_or(|p| p == o.proto)
            && self.orig_src.is_none_or(|a| a == o.src)
            && self.orig_dst.is_none_or(|a| a == o.dst)
            && self.reply_src.is_none_or(|a| a == r.src)
            && self.reply_dst.is_none_or(|a| a == r.dst)
            && self.orig_sport.is_none_or(|p| p == o.sport)
            && self.orig_dport.is_none_or(|p| p == o.dport)
            && self.reply_sport.is_none_or(|p| p == r.sport)
            && self.reply_dport.is_none_or(|p| p == r.dport)
    }
}

/// Parses `conntrack -L` filter options (see the module docs for what the double supports).
pub fn parse_ct_filter(text: &str) -> Result<CtFilter, String> {
    let mut f = CtFilter::default();
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut i = 0;
    while i < words.len() {
        let opt = words[i];
        let val = words
            .get(i + 1)
            .ok_or_else(|| format!("option {opt} needs a value"))?;
        let ip = || {
            val.parse::<IpAddr>()
                .map_err(|_| format!("{opt} {val}: expected an IP address"))
        };
        let port = || {
            val.parse::<u16>()
                .map_err(|_| format!("{opt} {val}: expected a port number"))
        };
        match opt {
            "-p" | "--proto" => {
                f.proto = Some(match val.to_ascii_lowercase().as_str() {
                    "udp" => 17,
                    "tcp" => 6,
                    "icmp" => 1,
                    "sctp" => 132,
                    other => other
                        .parse()
                        .map_err(|_| format!("-p {val}: expected udp, tcp, icmp, sctp or a number"))?,
                })
            }
            "-s" | "--orig-src" | "--src" => f.orig_src = Some(ip()?),
            "-d" | "--orig-dst" | "--dst" => f.orig_dst = Some(ip()?),
            "-r" | "--reply-src" => f.reply_src = Some(ip()?),
            "-q" | "--reply-dst" => f.reply_dst = Some(ip()?),
            "--sport" | "--orig-port-src" => f.orig_sport = Some(port()?),
            "--dport" | "--orig-port-dst" => f.orig_dport = Some(port()?),
            "--reply-port-src" => f.reply_sport = Some(port()?),
            "--reply-port-dst" => f.reply_dport = Some(port()?),
            _ => {
                return Err(format!(
                    "unknown option {opt}: expected -p, -s/--orig-src, -d/--orig-dst, -r/--reply-src, -q/--reply-dst, --sport/--orig-port-src, --dport/--orig-port-dst, --reply-port-src, --reply-port-dst"
                ))
            }
        }
        i += 2;
    }
    let ports = [f.orig_sport, f.orig_dport, f.reply_sport, f.reply_dport];
    if f.proto.is_none() && ports.iter().any(Option::is_some) {
        return Err("port options need -p (a protocol), as conntrack requires".into());
    }
    Ok(f)
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum TcpState {
    SynSent,
    SynRecv,
    Established,
    FinWait,
    CloseWait,
    LastAck,
    TimeWait,
    Close,
}

impl TcpState {
    fn name(self) -> &'static str {
        match self {
            TcpState::SynSent => "SYN_SENT",
            TcpState::SynRecv => "SYN_RECV",
            TcpState::Established => "ESTABLISHED",
            TcpState::FinWait => "FIN_WAIT",
            TcpState::CloseWait => "CLOSE_WAIT",
            TcpState::LastAck => "LAST_ACK",
            TcpState::TimeWait => "TIME_WAIT",
            TcpState::Close => "CLOSE",
        }
    }
    fn timeout(self) -> SimDuration {
        SimDuration::from_secs(match self {
            TcpState::SynSent => 120,
            TcpState::SynRecv => 60,
            TcpState::Established => 432_000,
            TcpState::FinWait => 120,
            TcpState::CloseWait => 60,
            TcpState::LastAck => 30,
            TcpState::TimeWait => 120,
            TcpState::Close => 10,
        })
    }
}

#[derive(Clone, Debug)]
struct Entry {
    orig: Tuple,
    reply: Tuple,
    expires: SimTime,
    stream_ts: SimTime,
    seen_reply: bool,
    assured: bool,
    tcp: Option<TcpState>,
}

fn proto_label(p: u8) -> String {
    sim_core::packet::proto_name(p)
        .map(str::to_string)
        .unwrap_or_else(|| "unknown".into())
}

impl Entry {
    fn view(&self, now: SimTime) -> CtEntry {
        let secs = self.expires.saturating_since(now).as_nanos() / 1_000_000_000;
        CtEntry {
            orig: self.orig,
            reply: self.reply,
            timeout_secs: secs,
            assured: self.assured,
            seen_reply: self.seen_reply,
            tcp_state: self.tcp.map(TcpState::name),
            line: self.line(Some(secs), true),
        }
    }
    fn line(&self, secs: Option<u64>, with_mark: bool) -> String {
        let mut s = format!("{:<8} {} ", proto_label(self.orig.proto), self.orig.proto);
        if let Some(secs) = secs {
            s.push_str(&format!("{secs} "));
        }
        if let Some(t) = self.tcp {
            s.push_str(&format!("{} ", t.name()));
        }
        let tup = |t: &Tuple| {
            format!(
                "src={} dst={} sport={} dport={}",
                t.src, t.dst, t.sport, t.dport
            )
        };
        s.push_str(&tup(&self.orig));
        if !self.seen_reply {
            s.push_str(" [UNREPLIED]");
        }
        s.push(' ');
        s.push_str(&tup(&self.reply));
        if self.assured {
            s.push_str(" [ASSURED]");
        }
        if with_mark {
            s.push_str(" mark=0 use=1");
        }
        s
    }
}

/// Why a kernel call failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KernelError {
    /// A sysctl the kernel does not have, or a value it refuses.
    #[error("sysctl {name}: {reason}")]
    Sysctl {
        /// The name.
        name: String,
        /// What was wrong.
        reason: String,
    },
}

/// A node's network namespace (see the module docs: currently a test double).
#[derive(Debug, Clone)]
pub struct Kernel {
    name: String,
    local: BTreeSet<IpAddr>,
    /// (prefix, len) → (dev, gateway), longest prefix wins.
    routes: Vec<(IpAddr, u8, IfName, Option<IpAddr>)>,
    rules_text: String,
    services: ServiceMap,
    entries: BTreeMap<Tuple, Entry>,
    by_reply: BTreeMap<Tuple, Tuple>,
    events: Vec<CtEvent>,
    rng: SimRng,
    udp_timeout: SimDuration,
    udp_timeout_stream: SimDuration,
}

fn in_prefix(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    match (ip, net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let m = if len == 0 {
                0
            } else {
                u32::MAX << (32 - len as u32)
            };
            u32::from(a) & m == u32::from(n) & m
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let m = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len as u32)
            };
            u128::from(a) & m == u128::from(n) & m
        }
        _ => false,
    }
}

impl Kernel {
    /// A namespace named `name`, its random streams derived from `seed`, with conntrack
    /// sysctls (full `net.netfilter.…` names) applied.
    pub fn new(
        name: &str,
        seed: u64,
        sysctls: &BTreeMap<String, u64>,
    ) -> Result<Kernel, KernelError> {
        let mut k = Kernel {
            name: name.to_string(),
            local: BTreeSet::new(),
            routes: Vec::new(),
            rules_text: String::new(),
            services: ServiceMap::new(),
            entries: BTreeMap::new(),
            by_reply: BTreeMap::new(),
            events: Vec::new(),
            rng: SimRng::derive(seed, &format!("node/{name}/statistic")),
            udp_timeout: SimDuration::from_secs(30),
            udp_timeout_stream: SimDuration::from_secs(120),
        };
        for (n, v) in sysctls {
            match n.as_str() {
                "net.netfilter.nf_conntrack_udp_timeout" => {
                    k.udp_timeout = SimDuration::from_secs(*v)
                }
                "net.netfilter.nf_conntrack_udp_timeout_stream" => {
                    k.udp_timeout_stream = SimDuration::from_secs(*v)
                }
                _ => {} // accepted; the test double models only the UDP timeouts
            }
        }
        Ok(k)
    }

    /// The namespace's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Adds an interface with addresses.
    pub fn add_interface(&mut self, _dev: IfName, addrs: &[(IpAddr, u8)]) {
        self.local.extend(addrs.iter().map(|a| a.0));
    }

    /// Adds a route.
    pub fn add_route(&mut self, dst: (IpAddr, u8), gateway: Option<IpAddr>, dev: IfName) {
        self.routes.retain(|r| (r.0, r.1) != dst);
        self.routes.push((dst.0, dst.1, dev, gateway));
    }

    /// Deletes the route to exactly `dst`, if any.
    pub fn del_route(&mut self, dst: (IpAddr, u8)) {
        self.routes.retain(|r| (r.0, r.1) != dst);
    }

    /// Applies an `iptables-restore` payload (`noflush` as kube-proxy writes it). The test
    /// double takes the service map the payload encodes alongside it.
    pub fn restore(
        &mut self,
        text: &str,
        _noflush: bool,
        services: &ServiceMap,
    ) -> Result<(), String> {
        self.rules_text = text.to_string();
        self.services = services.clone();
        Ok(())
    }

    /// What `iptables-save` prints (without the date comment lines).
    pub fn save(&self) -> String {
        self.rules_text.clone()
    }

    fn route(&self, dst: IpAddr) -> Option<(IfName, IpAddr)> {
        self.routes
            .iter()
            .filter(|r| in_prefix(dst, r.0, r.1))
            .max_by_key(|r| r.1)
            .map(|r| (r.2, r.3.unwrap_or(dst)))
    }

    fn emit(&mut self, now: SimTime, kind: CtEventKind, key: Tuple) {
        if let Some(e) = self.entries.get(&key) {
            let prefix = match kind {
                CtEventKind::New => "    [NEW]",
                CtEventKind::Update => " [UPDATE]",
                CtEventKind::Destroy => "[DESTROY]",
            };
            let secs = e.expires.saturating_since(now).as_nanos() / 1_000_000_000;
            let secs = (kind != CtEventKind::Destroy || e.expires > now).then_some(secs);
            let line = format!("{prefix} {}", e.line(secs, false));
            self.events.push(CtEvent {
                at: now,
                kind,
                entry: e.view(now),
                line,
            });
        }
    }

    fn pick_backend(&mut self, backends: &[ServiceBackend]) -> Option<ServiceBackend> {
        let n = backends.len();
        for (i, b) in backends.iter().enumerate() {
            if i + 1 == n {
                return Some(b.clone());
            }
            // xt_statistic: stored = round(p × 2^31); match when (random & 0x7FFFFFFF) < stored.
            let p = 1.0 / (n - i) as f64;
            let stored = (p * 2f64.powi(31)).round() as u32;
            if self.rng.next_u32() & 0x7FFF_FFFF < stored {
                return Some(b.clone());
            }
        }
        None
    }

    /// Runs one packet through the namespace.
    pub fn process(&mut self, now: SimTime, mut pkt: Packet, from: Ingress) -> Vec<Egress> {
        self.expire(now);
        let mut out = Vec::new();
        if let Ingress::Interface(dev) = from {
            pkt.iif = Some(dev);
        }
        let tuple = Tuple::of(&pkt);
        // ICMP errors: RELATED to the entry their quoted header belongs to.
        if let L4::Icmp {
            body: IcmpBody::Error(inner),
            ..
        } = pkt.l4
        {
            let quoted = Tuple {
                proto: inner.proto,
                src: inner.src,
                dst: inner.dst,
                sport: inner.sport,
                dport: inner.dport,
            };
            if let Some(okey) = self.by_reply.get(&quoted.inverse()).copied() {
                // Error about a packet that travelled in the original direction, sent back
                // towards its source: un-DNAT the outer source and the quoted destination.
                if let Some(e) = self.entries.get(&okey) {
                    pkt.src = e.orig.dst;
                    if let L4::Icmp {
                        body: IcmpBody::Error(ref mut q),
                        ..
                    } = pkt.l4
                    {
                        q.dst = e.orig.dst;
                        q.dport = e.orig.dport;
                    }
                }
            }
            self.route_out(pkt, &mut out);
            return out;
        }
        let tracked = matches!(pkt.l4, L4::Udp { .. } | L4::Tcp { .. });
        if tracked {
            if let Some(e) = self.entries.get(&tuple) {
                // Original direction of a known flow: DNAT from the entry.
                let key = e.orig;
                pkt.dst = e.reply.src;
                pkt.set_dport(e.reply.sport);
                self.update(now, key, &pkt, false);
                if !self.entries.contains_key(&key) {
                    // A RST before any reply deletes the entry; the packet still goes.
                }
            } else if let Some(okey) = self.by_reply.get(&tuple).copied() {
                let (osrc, osport) = match self.entries.get(&okey) {
                    Some(e) => (e.orig.dst, e.orig.dport),
                    None => (pkt.src, tuple.sport),
                };
                pkt.src = osrc;
                pkt.set_sport(osport);
                self.update(now, okey, &pkt, true);
            } else {
                // A new flow: the nat table's DNAT (the service map), then confirm.
                let key = (tuple.proto, tuple.dst, tuple.dport);
                if let Some(backends) = self.services.get(&key).cloned() {
                    match self.pick_backend(&backends) {
                        Some(b) => {
                            pkt.dst = b.ip;
                            pkt.set_dport(b.port);
                        }
                        None => {
                            // filter KUBE-SERVICES "has no endpoints" → REJECT.
                            let mut rej = match pkt.l4 {
                                L4::Tcp { .. } => {
                                    match crate::cluster::apps::closed_port_response(&pkt) {
                                        Some(r) => r,
                                        None => return out,
                                    }
                                }
                                _ => Packet::icmp_error(
                                    pkt.dst,
                                    &pkt,
                                    icmp::DEST_UNREACH,
                                    icmp::CODE_PORT_UNREACH,
                                ),
                            };
                            rej.tag = pkt.tag;
                            self.route_out(rej, &mut out);
                            return out;
                        }
                    }
                }
                let is_new_ok = match pkt.l4 {
                    L4::Tcp { flags, .. } => {
                        flags.contains(TcpFlags::SYN) && !flags.contains(TcpFlags::ACK)
                    }
                    _ => true,
                };
                if is_new_ok {
                    let reply = Tuple {
                        proto: tuple.proto,
                        src: pkt.dst,
                        dst: pkt.src,
                        sport: pkt.dport().unwrap_or(0),
                        dport: pkt.sport().unwrap_or(0),
                    };
                    let e = Entry {
                        orig: tuple,
                        reply,
                        expires: now,
                        stream_ts: now + SimDuration::from_secs(2),
                        seen_reply: false,
                        assured: false,
                        tcp: matches!(pkt.l4, L4::Tcp { .. }).then_some(TcpState::SynSent),
                    };
                    self.entries.insert(tuple, e);
                    self.by_reply.insert(reply, tuple);
                    self.update(now, tuple, &pkt, false);
                    self.emit(now, CtEventKind::New, tuple);
                }
            }
        }
        self.route_out(pkt, &mut out);
        out
    }

    fn route_out(&self, pkt: Packet, out: &mut Vec<Egress>) {
        if self.local.contains(&pkt.dst) {
            out.push(Egress::LocalDeliver { packet: pkt });
            return;
        }
        if let Some((dev, next_hop)) = self.route(pkt.dst) {
            let mut p = pkt;
            p.oif = Some(dev);
            out.push(Egress::Transmit {
                dev,
                next_hop,
                packet: p,
            });
        }
    }

    /// Per-packet conntrack update (nf_conntrack_udp_packet / a coarse tcp_packet).
    fn update(&mut self, now: SimTime, key: Tuple, pkt: &Packet, is_reply: bool) {
        let (udp_t, udp_s) = (self.udp_timeout, self.udp_timeout_stream);
        let mut kinds = Vec::new();
        let mut delete = false;
        if let Some(e) = self.entries.get_mut(&key) {
            match pkt.l4 {
                L4::Udp { .. } => {
                    if e.seen_reply && now > e.stream_ts {
                        e.expires = now + udp_s;
                        if !e.assured {
                            e.assured = true;
                            kinds.push(CtEventKind::Update);
                        }
                    } else {
                        e.expires = now + udp_t;
                    }
                }
                L4::Tcp { flags, .. } => {
                    let old = e.tcp.unwrap_or(TcpState::SynSent);
                    let new = if flags.contains(TcpFlags::RST) {
                        if !e.seen_reply && !is_reply {
                            delete = true;
                        }
                        if is_reply && old == TcpState::SynSent {
                            delete = true;
                        }
                        TcpState::Close
                    } else if flags.contains(TcpFlags::SYN) && flags.contains(TcpFlags::ACK) {
                        if is_reply && old == TcpState::SynSent {
                            TcpState::SynRecv
                        } else {
                            old
                        }
                    } else if flags.contains(TcpFlags::SYN) {
                        TcpState::SynSent
                    } else if flags.contains(TcpFlags::FIN) {
                        match old {
                            TcpState::Established | TcpState::SynRecv => TcpState::FinWait,
                            TcpState::FinWait | TcpState::CloseWait => TcpState::LastAck,
                            s => s,
                        }
                    } else if flags.contains(TcpFlags::ACK) {
                        match old {
                            TcpState::SynRecv if !is_reply => TcpState::Established,
                            TcpState::FinWait => TcpState::CloseWait,
                            TcpState::LastAck => TcpState::TimeWait,
                            s => s,
                        }
                    } else {
                        old
                    };
                    if !e.assured
                        && e.seen_reply
                        && new == TcpState::Established
                        && matches!(old, TcpState::SynRecv | TcpState::Established)
                    {
                        e.assured = true;
                        kinds.push(CtEventKind::Update);
                    }
                    e.tcp = Some(new);
                    e.expires = now + new.timeout();
                }
                _ => {}
            }
            if is_reply && !e.seen_reply {
                e.seen_reply = true;
                kinds.insert(0, CtEventKind::Update);
            }
        }
        if delete {
            self.remove(now, key);
            return;
        }
        for k in kinds {
            self.emit(now, k, key);
        }
    }

    fn remove(&mut self, now: SimTime, key: Tuple) {
        self.emit(now, CtEventKind::Destroy, key);
        if let Some(e) = self.entries.remove(&key) {
            self.by_reply.remove(&e.reply);
        }
    }

    /// Removes entries whose timeout has run out (the double reaps exactly at expiry).
    pub fn expire(&mut self, now: SimTime) {
        let dead: Vec<Tuple> = self
            .entries
            .iter()
            .filter(|(_, e)| e.expires <= now)
            .map(|(k, _)| *k)
            .collect();
        for k in dead {
            if let Some(e) = self.entries.get(&k) {
                let at = e.expires;
                self.remove(at, k);
            }
        }
    }

    /// The next conntrack expiry.
    pub fn poll_timeout(&self) -> Option<SimTime> {
        self.entries.values().map(|e| e.expires).min()
    }

    /// Expires what is due at `now`.
    pub fn handle_timeout(&mut self, now: SimTime) {
        self.expire(now);
    }

    /// Events since the last call.
    pub fn drain_conntrack_events(&mut self) -> Vec<CtEvent> {
        std::mem::take(&mut self.events)
    }

    /// `conntrack -L [filter]` at `now`, in table order.
    pub fn ct_list(&mut self, now: SimTime, filter: &CtFilter) -> Vec<CtEntry> {
        self.expire(now);
        self.entries
            .values()
            .filter(|e| filter.matches(e))
            .map(|e| e.view(now))
            .collect()
    }

    /// `conntrack -D [filter]`: deletes what matches, returning the deleted entries.
    pub fn ct_delete(&mut self, now: SimTime, filter: &CtFilter) -> Vec<CtEntry> {
        self.expire(now);
        let keys: Vec<Tuple> = self
            .entries
            .iter()
            .filter(|(_, e)| filter.matches(e))
            .map(|(k, _)| *k)
            .collect();
        let mut out = Vec::new();
        for k in keys {
            if let Some(e) = self.entries.get(&k) {
                out.push(e.view(now));
            }
            self.remove(now, k);
        }
        out
    }

    /// The `conntrack -L` text at `now` (stdout only).
    pub fn ct_dump(&mut self, now: SimTime) -> String {
        let mut s = String::new();
        for e in self.ct_list(now, &CtFilter::default()) {
            s.push_str(&e.line);
            s.push('\n');
        }
        s
    }
}

impl fmt::Display for CtEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            CtEventKind::New => "NEW",
            CtEventKind::Update => "UPDATE",
            CtEventKind::Destroy => "DESTROY",
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::SocketAddr;

    fn sa(s: &str) -> SocketAddr {
        s.parse().unwrap()
    }

    fn node() -> Kernel {
        let mut k = Kernel::new("n", 1, &BTreeMap::new()).unwrap();
        let eth0 = IfName::new("eth0").unwrap();
        let veth = IfName::new("veth1").unwrap();
        k.add_interface(eth0, &[("192.168.0.2".parse().unwrap(), 24)]);
        k.add_route(("10.244.1.5".parse().unwrap(), 32), None, veth);
        k.add_route(("0.0.0.0".parse().unwrap(), 0), None, eth0);
        let mut m = ServiceMap::new();
        m.insert(
            (17, "10.96.0.10".parse().unwrap(), 53),
            vec![ServiceBackend {
                ip: "10.244.1.5".parse().unwrap(),
                port: 53,
            }],
        );
        k.restore("", true, &m).unwrap();
        k
    }

    #[test]
    fn udp_flow_follows_the_kernel_timeouts_and_assured_rule() {
        let mut k = node();
        let veth2 = Ingress::Interface(IfName::new("veth2").unwrap());
        let q = Packet::udp(sa("10.244.1.9:40000"), sa("10.96.0.10:53"));
        let out = k.process(SimTime::ZERO, q, veth2);
        let Egress::Transmit { packet, .. } = &out[0] else {
            panic!("{out:?}")
        };
        assert_eq!(
            packet.dst,
            "10.244.1.5".parse::<IpAddr>().unwrap(),
            "DNAT'd"
        );
        let list = k.ct_list(SimTime::ZERO, &CtFilter::default());
        assert!(list[0].line.contains("[UNREPLIED]"), "{}", list[0].line);
        assert_eq!(list[0].timeout_secs, 30);
        let a = Packet::udp(sa("10.244.1.5:53"), sa("10.244.1.9:40000"));
        let out = k.process(
            SimTime::from_millis(1),
            a,
            Ingress::Interface(IfName::new("veth1").unwrap()),
        );
        let Egress::Transmit { packet, .. } = &out[0] else {
            panic!()
        };
        assert_eq!(
            packet.src,
            "10.96.0.10".parse::<IpAddr>().unwrap(),
            "un-DNAT'd"
        );
        // A query 30 s later: > 2 s after creation with a reply seen → 120 s and ASSURED.
        k.process(SimTime::from_millis(29_999), q, veth2);
        let e = &k.ct_list(SimTime::from_secs(30), &CtFilter::default())[0];
        assert!(e.assured);
        assert_eq!(e.timeout_secs, 119);
        let kinds: Vec<_> = k.drain_conntrack_events().iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [CtEventKind::New, CtEventKind::Update, CtEventKind::Update]
        );
    }

    #[test]
    fn filter_parses_conntrack_options_and_rejects_unknown_ones() {
        assert!(parse_ct_filter("-p udp --orig-dst 10.96.0.10 --dport 53").is_ok());
        assert!(parse_ct_filter("--bogus 1")
            .unwrap_err()
            .contains("unknown option"));
        assert!(parse_ct_filter("-d").unwrap_err().contains("needs a value"));
        assert!(parse_ct_filter("-d 1.2.3")
            .unwrap_err()
            .contains("IP address"));
    }
}
