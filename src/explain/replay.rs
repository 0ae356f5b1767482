//! `nfsim replay`: a capture pushed through the node's ruleset, packet by packet.
//!
//! Each record enters the node at its capture time (counted from the first record, see
//! [`sim_core::pcap::Timestamps::RelativeToFirst`]); conntrack entries expire in between as
//! they would. Where a packet enters: a source address of the node itself (its `eth0` or
//! `cni0` address, or loopback) is sent by a local process (OUTPUT), since the kernel drops a
//! received packet claiming a local source; a source in the pod CIDR is received on `cni0`;
//! anything else on `eth0` (see [`super::NodeSpec`]). The capture is best taken on one
//! interface: `tcpdump -i any` records a forwarded packet twice (in and out), and both would be
//! replayed. A record whose time goes backwards is processed at the previous record's time.

use super::{ExplainError, NodeSpec};
use sim_core::manip;
use sim_core::pcap::{Capture, PcapWriter, Record, WriteLink};
use sim_core::{IcmpBody, Packet, SimTime, TcpFlags, L4};
use sim_netfilter::netns::{Egress, Fate, Ingress, Netns};
use sim_netfilter::types::Hook;
use std::collections::BTreeMap;
use std::io::Write;
use std::net::IpAddr;

/// What `nfsim replay` does besides one line per packet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplayOptions {
    /// Print each packet's trace after its line.
    pub trace: bool,
    /// Write every packet that left the node (transmitted, kernel answers included) to this
    /// pcap file (raw IP, nanosecond timestamps, at the input's epoch times). A packet that
    /// came in keeps every captured byte of its IP packet; only what the kernel changes is
    /// changed (see [`sim_core::manip`]).
    pub pcap_out: Option<String>,
    /// Print the conntrack table (`conntrack -L` form) at each of these times, as the replay
    /// passes them (`--conntrack-at T`).
    pub conntrack_at: Vec<SimTime>,
}

/// What a replay did, counted.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReplaySummary {
    /// IP packets replayed.
    pub packets: usize,
    /// Frames in the capture that were not IP (skipped).
    pub skipped: usize,
    /// Transmitted on an interface.
    pub transmitted: usize,
    /// Delivered to a local socket.
    pub delivered: usize,
    /// Dropped, by cause.
    pub dropped: BTreeMap<String, usize>,
    /// Rejected (with an answer generated), by table and hook.
    pub rejected: BTreeMap<String, usize>,
    /// Packets whose addresses or ports NAT changed.
    pub translated: usize,
    /// Packets that left the node (what `pcap_out` holds).
    pub left: usize,
    /// Records processed at an earlier record's time because their timestamp went backwards.
    pub reordered: usize,
    /// Conntrack entries at the end.
    pub conntrack_entries: usize,
    /// The last record's time.
    pub end: SimTime,
    /// Packets on loopback addresses (127.0.0.0/8, ::1): a capture on `lo`, which the node
    /// delivers to itself or drops and never forwards.
    pub loopback: usize,
    /// Packets that started a new conntrack entry though they answer a flow the replay is
    /// tracking (to its source address and port, from another address): replies captured on
    /// the other side of a NAT than the one this node performs, remapped as new flows.
    pub replies_as_new: usize,
    /// The first such packet, for the warning.
    pub replies_as_new_first: Option<String>,
    /// Packets received on eth0 that the node sent back out of eth0 untranslated: traffic
    /// between other hosts (a promiscuous capture), not for this node.
    pub not_for_node: usize,
    /// The conntrack table at the end, in `conntrack -L` form.
    pub conntrack_table: String,
}

fn secs(t: SimTime) -> String {
    let ns = t.as_nanos();
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1_000)
}

fn ingress_for(node: &NodeSpec, ns: &Netns, pkt: &Packet) -> (Ingress, String) {
    let own = |a: IpAddr| ns.routing().is_local(a) || a.is_loopback();
    if own(pkt.src) {
        return (Ingress::Local, "local".to_string());
    }
    let (ingress, _) = node.ingress_for(pkt, false);
    let name = match ingress {
        Ingress::Local => "local".to_string(),
        Ingress::Interface(d) => d.to_string(),
    };
    (ingress, name)
}

/// The bytes of `packet`, which left the node while `rec` was processed, and its length on
/// the wire. `own`: it is `rec`'s packet itself, so its captured bytes are edited in place
/// into what left. Otherwise the kernel sent it: an ICMP error quoting `rec`'s bytes (lowered
/// TTL if `forwarded`), a TCP reset, or anything else written from the packet model.
fn left_bytes(
    capture: &Capture,
    rec: &Record,
    packet: &Packet,
    own: bool,
    forwarded: bool,
    ip_id: u16,
) -> Result<(Vec<u8>, usize), manip::ManipError> {
    let captured = capture.ip_bytes(rec);
    if own {
        let mut b = captured.to_vec();
        manip::rewrite(&mut b, &rec.packet, packet)?;
        return Ok((b, usize::from(packet.len)));
    }
    let emitted = |p: &Packet| {
        sim_core::wire::emit_ip(p).map_err(|e| manip::ManipError::NotAnEdit {
            from: rec.packet.to_string(),
            to: format!("{p} ({e})"),
        })
    };
    match packet.l4 {
        L4::Icmp {
            icmp_type,
            body: IcmpBody::Error(_),
            ..
        } => {
            // Time exceeded is sent before ip_decrease_ttl; REJECT in FORWARD after it.
            let exceeded = if packet.is_ipv4() {
                icmp_type == sim_core::packet::icmp::TIME_EXCEEDED
            } else {
                icmp_type == sim_core::packet::icmp::V6_TIME_EXCEEDED
            };
            let b = manip::icmp_error_bytes(
                packet,
                captured,
                &rec.packet,
                forwarded && !exceeded,
                ip_id,
            )?;
            Ok((b.bytes, b.wire_len))
        }
        L4::Tcp { flags, .. } if flags.contains(TcpFlags::RST) => {
            let b = manip::tcp_reset_bytes(packet).map_err(|e| manip::ManipError::NotAnEdit {
                from: rec.packet.to_string(),
                to: format!("{packet} ({e})"),
            })?;
            let n = b.len();
            Ok((b, n))
        }
        _ => {
            let b = emitted(packet)?;
            let n = b.len();
            Ok((b, n))
        }
    }
}

/// Replays `capture` (read from `file`) through `base`, writing one line per packet (and traces
/// with [`ReplayOptions::trace`]) and then the summary to `out`.
pub fn replay(
    node: &NodeSpec,
    base: Netns,
    capture: &Capture,
    file: &str,
    opts: &ReplayOptions,
    out: &mut dyn Write,
) -> Result<ReplaySummary, ExplainError> {
    let mut ns = base;
    let mut sum = ReplaySummary {
        skipped: capture.skipped.len(),
        ..ReplaySummary::default()
    };
    let mut writer = match &opts.pcap_out {
        Some(path) => {
            let f = std::fs::File::create(path).map_err(|e| ExplainError::PcapWrite {
                file: path.clone(),
                source: sim_core::pcap::PcapWriteError::Io(e),
            })?;
            let w = PcapWriter::with_start(
                std::io::BufWriter::new(f),
                WriteLink::RawIp,
                capture.first_epoch_ns,
            )
            .map_err(|source| ExplainError::PcapWrite {
                file: path.clone(),
                source,
            })?;
            Some((path.clone(), w))
        }
        None => None,
    };
    let w =
        |out: &mut dyn Write, s: &str| out.write_all(s.as_bytes()).map_err(ExplainError::Output);
    w(
        out,
        &format!("replaying {file}: {} packets\n", capture.records.len()),
    )?;
    let mut now = SimTime::ZERO;
    // Packets the kernel generated so far: their IPv4 identification (the kernel's is a keyed
    // hash of the addresses, unknowable here).
    let mut answers: u16 = 0;
    let mut dumps = opts.conntrack_at.clone();
    dumps.sort();
    let mut dumps = dumps.into_iter().peekable();
    // The original source of each flow the replay created (protocol, address, port), with
    // the source its replies come from: only looked up, never iterated.
    let mut originators: std::collections::HashMap<(u8, IpAddr, u16), (IpAddr, u16)> =
        std::collections::HashMap::new();
    let mut newest_seq = ns
        .conntrack()
        .list(now, &Default::default())
        .iter()
        .map(|e| e.seq)
        .max();
    for rec in &capture.records {
        while let Some(&t) = dumps.peek().filter(|&&t| t < rec.time.max(now)) {
            dumps.next();
            ns.handle_timeout(t.max(now));
            w(
                out,
                &conntrack_listing(&ns, t.max(now), &format!("conntrack -L at {}", secs(t))),
            )?;
        }
        if rec.time < now {
            sum.reordered += 1;
        } else {
            now = rec.time;
        }
        ns.handle_timeout(now);
        if rec.packet.src.is_loopback() || rec.packet.dst.is_loopback() {
            sum.loopback += 1;
        }
        let (ingress, from) = ingress_for(node, &ns, &rec.packet);
        let r = if opts.trace {
            ns.process_traced(now, rec.packet, ingress)
        } else {
            ns.process(now, rec.packet, ingress)
        };
        sum.packets += 1;
        let result = match (&r.fate, r.out.first()) {
            (Fate::Transmitted, Some(Egress::Transmit { dev, packet, .. })) => {
                sum.transmitted += 1;
                format!("transmitted on {dev}: {packet}")
            }
            (Fate::Delivered, Some(Egress::LocalDeliver { packet })) => {
                sum.delivered += 1;
                format!("delivered locally: {packet}")
            }
            (Fate::Transmitted, _) => {
                sum.transmitted += 1;
                "transmitted".to_string()
            }
            (Fate::Delivered, _) => {
                sum.delivered += 1;
                "delivered locally".to_string()
            }
            (Fate::Dropped(c), _) => {
                *sum.dropped.entry(c.to_string()).or_default() += 1;
                format!("dropped: {c}")
            }
            (Fate::Rejected { table, hook }, _) => {
                *sum.rejected.entry(format!("{table} {hook}")).or_default() += 1;
                format!("rejected by {table} {hook}")
            }
            (Fate::RejectedNft { chain, hook }, _) => {
                *sum.rejected
                    .entry(format!("nft {chain} {hook}"))
                    .or_default() += 1;
                format!("rejected by nft chain {chain} ({hook})")
            }
        };
        let survived = matches!(r.fate, Fate::Transmitted | Fate::Delivered);
        if let Some(e) = &r.entry {
            let p = &rec.packet;
            let new = newest_seq.is_none_or(|n| e.seq > n);
            if new {
                newest_seq = Some(e.seq);
                if e.orig.src == p.src {
                    let key = (e.orig.proto, e.orig.dst, e.orig.dport);
                    // It is sent to a flow's originator, from elsewhere than that flow's
                    // replies come from: an answer the node does not recognise.
                    if let Some(&(rsrc, rport)) = originators
                        .get(&key)
                        .filter(|_| sim_conntrack::tuple::has_ports(e.orig.proto))
                    {
                        if (rsrc, rport) != (e.orig.src, e.orig.sport) {
                            sum.replies_as_new += 1;
                            if sum.replies_as_new_first.is_none() {
                                sum.replies_as_new_first = Some(format!(
                                    "frame {}: {p} (the flow's replies come from {})",
                                    rec.frame,
                                    std::net::SocketAddr::new(rsrc, rport)
                                ));
                            }
                        }
                    }
                    originators.insert(
                        (e.orig.proto, e.orig.src, e.orig.sport),
                        (e.reply.src, e.reply.sport),
                    );
                }
            }
        }
        if let (Ingress::Interface(i), Some(Egress::Transmit { dev, packet, .. })) =
            (ingress, r.out.first())
        {
            if i.as_str() == "eth0"
                && dev.as_str() == "eth0"
                && packet.src == rec.packet.src
                && packet.dst == rec.packet.dst
            {
                sum.not_for_node += 1;
            }
        }
        let translated = survived
            && r.out.first().is_some_and(|e| {
                let p = match e {
                    Egress::Transmit { packet, .. } | Egress::LocalDeliver { packet } => packet,
                };
                p.src != rec.packet.src
                    || p.dst != rec.packet.dst
                    || p.sport() != rec.packet.sport()
                    || p.dport() != rec.packet.dport()
            });
        if translated {
            sum.translated += 1;
        }
        let mut line = format!(
            "{:>5} {:>12} {:<5} {}  =>  {}{}",
            rec.frame,
            secs(now),
            from,
            rec.packet,
            result,
            if translated { "  [NAT]" } else { "" }
        );
        // After the packet itself (if it survived) come the packets the kernel generated.
        for e in r.out.iter().skip(usize::from(survived)) {
            if let Egress::Transmit { dev, packet, .. } = e {
                line.push_str(&format!("  (kernel answer on {dev}: {packet})"));
            }
        }
        line.push('\n');
        w(out, &line)?;
        if let Some(t) = &r.trace {
            for l in t.to_string().lines() {
                w(out, &format!("        {l}\n"))?;
            }
        }
        for (i, e) in r.out.iter().enumerate() {
            if let Egress::Transmit { packet, .. } = e {
                sum.left += 1;
                if let Some((path, wr)) = writer.as_mut() {
                    let own = i == 0 && survived;
                    let forwarded = matches!(
                        r.fate,
                        Fate::Rejected {
                            hook: Hook::Forward,
                            ..
                        } | Fate::RejectedNft {
                            hook: Hook::Forward,
                            ..
                        }
                    );
                    answers += u16::from(!own);
                    let (bytes, wire_len) = left_bytes(
                        capture, rec, packet, own, forwarded, answers,
                    )
                    .map_err(|source| ExplainError::Rewrite {
                        file: file.to_string(),
                        frame: rec.frame,
                        source,
                    })?;
                    wr.write_frame_snapped(now, &bytes, wire_len as u32)
                        .map_err(|source| ExplainError::PcapWrite {
                            file: path.clone(),
                            source,
                        })?;
                }
            }
        }
    }
    if let Some((path, wr)) = writer {
        wr.into_inner()
            .flush()
            .map_err(|e| ExplainError::PcapWrite {
                file: path,
                source: sim_core::pcap::PcapWriteError::Io(e),
            })?;
    }
    sum.end = now;
    sum.conntrack_entries = ns.conntrack().len();
    for t in dumps {
        if t >= now {
            ns.handle_timeout(t);
        }
        w(
            out,
            &conntrack_listing(&ns, t.max(now), &format!("conntrack -L at {}", secs(t))),
        )?;
    }
    sum.conntrack_table = ns.conntrack().dump(now.max(sum.end), &Default::default());
    w(out, &sum.text(opts.pcap_out.as_deref()))?;
    Ok(sum)
}

/// The conntrack table of `ns` at `now` as `conntrack -L` prints it, under a `title` line, with
/// conntrack-tools' closing line.
fn conntrack_listing(ns: &Netns, now: SimTime, title: &str) -> String {
    let d = ns.conntrack().dump(now, &Default::default());
    format!(
        "\n{title}\n{d}{}\n",
        sim_conntrack::shown_summary(d.lines().count())
    )
}

impl ReplaySummary {
    /// The warnings about a capture that does not fit the node, once each with its count.
    pub fn warnings(&self) -> Vec<String> {
        let mut v = Vec::new();
        if self.loopback > 0 {
            v.push(format!(
                "{} packets on loopback addresses (127.0.0.0/8, ::1): a capture on lo? The node delivers them to itself or drops them and never forwards them, so they leave nothing in --pcap-out",
                self.loopback
            ));
        }
        if self.replies_as_new > 0 {
            v.push(format!(
                "{} packets answer a flow this node tracks but come from another address or port than its replies do, so they were treated as new flows (and remapped); were they captured on the other side of a NAT? First: {}",
                self.replies_as_new,
                self.replies_as_new_first.as_deref().unwrap_or("")
            ));
        }
        if self.not_for_node > 0 {
            v.push(format!(
                "{} packets came in on eth0 and went straight back out of eth0 untranslated: traffic between other hosts (a promiscuous capture?), not for this node",
                self.not_for_node
            ));
        }
        v
    }

    /// The summary block `nfsim replay` prints last.
    pub fn text(&self, pcap_out: Option<&str>) -> String {
        let mut s = String::from("\nsummary\n");
        s.push_str(&format!("  packets        {}\n", self.packets));
        if self.skipped > 0 {
            s.push_str(&format!("  not IP         {} (skipped)\n", self.skipped));
        }
        s.push_str(&format!("  transmitted    {}\n", self.transmitted));
        s.push_str(&format!("  delivered      {}\n", self.delivered));
        let dropped: usize = self.dropped.values().sum();
        s.push_str(&format!("  dropped        {dropped}\n"));
        for (why, n) in &self.dropped {
            s.push_str(&format!("    {n:>5}  {why}\n"));
        }
        let rejected: usize = self.rejected.values().sum();
        s.push_str(&format!("  rejected       {rejected}\n"));
        for (by, n) in &self.rejected {
            s.push_str(&format!("    {n:>5}  by {by}\n"));
        }
        s.push_str(&format!("  NAT'd          {}\n", self.translated));
        s.push_str(&format!(
            "  left the node  {}{}\n",
            self.left,
            pcap_out
                .map(|p| format!(" (written to {p})"))
                .unwrap_or_default()
        ));
        if self.reordered > 0 {
            s.push_str(&format!(
                "  out of order   {} (processed at the previous record's time)\n",
                self.reordered
            ));
        }
        s.push_str(&format!(
            "  conntrack      {} entries at {}\n",
            self.conntrack_entries,
            secs(self.end)
        ));
        for warning in self.warnings() {
            s.push_str(&format!("\nwarning: {warning}\n"));
        }
        s.push_str(&format!("\nconntrack -L at {}\n", secs(self.end)));
        s.push_str(&self.conntrack_table);
        s.push_str(&sim_conntrack::shown_summary(self.conntrack_entries));
        s.push('\n');
        s
    }
}
