//! `nfsim replay`: captures pushed through the node's ruleset, packet by packet.
//!
//! Each record enters the node at its capture time (counted from the earliest record of all
//! the captures, see [`sim_core::pcap::Timestamps::RelativeToFirst`]); conntrack entries
//! expire in between as they would. Several captures (one per interface, [`ReplayInput`])
//! are merged by capture time, ties in the order given, each capture's records in file
//! order. A record whose time goes backwards (earlier than a record before it in its own
//! capture) is processed at the previous record's time, since the node's clock cannot go
//! back; the summary counts them per capture and warns, naming the first and both times.
//!
//! Before the hooks, as the kernel does (`docs/kernel-model.md §14`, [`super::defrag`]): a
//! received IPv4 packet whose header checksum does not verify is dropped (`ip_rcv_core()`),
//! and IPv4 fragments wait in a reassembly queue (`nf_defrag_ipv4`), one set of queues for
//! all the captures since they enter one node: the hooks see a datagram once, when its last
//! missing fragment arrives, as its first fragment shows it (ports included); fragments whose
//! datagram never completes are dropped when `ipfrag_time` expires, unseen by conntrack. Both
//! are counted and warned about.
//!
//! Where a packet enters: a source address of the node itself (its `eth0` or `cni0` address,
//! or loopback) is sent by a local process (OUTPUT), since the kernel drops a received packet
//! claiming a local source. Otherwise the capture's [`Tap`] decides: a capture of `eth0`
//! comes from the wire, one of `cni0` or a pod's veth from a pod (received on `cni0`); a
//! capture of unknown interface goes by source address (the pod CIDR on `cni0`, anything
//! else on `eth0`, see [`super::NodeSpec`]).
//!
//! A Linux cooked capture (`tcpdump -i any`) also holds what the node sent (packet type
//! `PACKET_OUTGOING`: a forwarded packet appears on its way in and again on its way out)
//! and a bridged packet once per interface it crossed (a pod's veth, then `cni0`, with the
//! same bytes). Outgoing records are not replayed, nor a record repeating one of the last
//! [`DUPLICATE_WINDOW_NS`]; the summary warns once with their counts.
//!
//! The loop is written for long captures: one reused buffer each for what left the node, the
//! bytes of the packet written to `--pcap-out` and the text line; a conntrack snapshot only
//! for entries a packet created (or for `--json`); no text at all with
//! [`ReplayOptions::quiet`] (`benches/replay.rs`).

use super::defrag::{self, Before, IPFRAG_TIME_SECS};
use super::{ExplainError, NodeSpec};
use crate::cluster::sim::record::destroy_cause;
use crate::cluster::sim::{CtRecord, TimelineEvent, What, JSON_SCHEMA_VERSION};
use sim_conntrack::EventKind;
use sim_core::manip;
use sim_core::pcap::{Capture, PcapWriter, Record, WriteLink, PACKET_OUTGOING};
use sim_core::{IcmpBody, IfName, Packet, SimTime, TcpFlags, L4};
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
    /// No line per packet (`--quiet`): the listings and the summary only.
    pub quiet: bool,
    /// The node's clock when the capture's first record arrives: state loaded into the node
    /// before the replay (a real node's `conntrack -L` and `xt_recent` lists, aged relative
    /// to the instant they were read) is that far in the past. Every time the replay prints
    /// (lines, JSON, `--conntrack-at`, the pcap it writes) stays relative to the first
    /// record.
    pub start: SimTime,
}

/// Where a replay writes: its text (lines, listings, summary) and, when asked, the capture of
/// what left the node.
pub struct ReplayOutput<'a> {
    /// The report (none with `--json -`).
    pub text: Option<&'a mut dyn Write>,
    /// The JSON lines (`--json`, docs/json-schema.md).
    pub json: Option<&'a mut dyn Write>,
    /// The pcap file of what left the node (see [`ReplayOptions::pcap_out`], which names it in
    /// errors).
    pub pcap: Option<&'a mut dyn Write>,
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
    /// Records processed at an earlier record's time because their timestamp went backwards
    /// (earlier than a record before them in the same capture).
    pub reordered: usize,
    /// The first of them, for the warning: `[FILE: ]frame N at T s, after frame M at T' s`.
    pub reordered_first: Option<String>,
    /// With several captures, how many of those each capture has (captures with none left
    /// out), in the order given.
    pub reordered_by_capture: Vec<(String, usize)>,
    /// Received IPv4 packets dropped for a header checksum that does not verify
    /// (`ip_rcv_core()`: `InCsumErrors`).
    pub bad_checksum: usize,
    /// The first such packet, for the warning (`[FILE: ]frame N`).
    pub bad_checksum_first: Option<String>,
    /// IPv4 datagrams reassembled from fragments (each went through the hooks once).
    pub reassembled: usize,
    /// Fragments held for reassembly and passed on inside their datagram.
    pub fragments_held: usize,
    /// Fragments whose datagram never completed: dropped when `ipfrag_time` expired.
    pub fragments_expired: usize,
    /// Of those, fragments whose queue never held the first fragment (a lone non-first
    /// fragment).
    pub fragments_without_first: usize,
    /// The first fragment dropped unreassembled, for the warning (`[FILE: ]frame N`).
    pub fragments_expired_first: Option<String>,
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
    /// On a real node (`--interfaces`): packets forwarded back out of the interface they came
    /// in by ([`super::interfaces::same_link_warning`]), and the first, for the warning.
    pub same_link: usize,
    /// The first such packet (`FRAME: PACKET on DEV`).
    pub same_link_first: Option<String>,
    /// The conntrack table at the end, in `conntrack -L` form.
    pub conntrack_table: String,
    /// Records of a Linux cooked capture (`tcpdump -i any`) that the node sent (packet type
    /// `PACKET_OUTGOING`): not replayed as arrivals.
    pub outgoing: usize,
    /// Records of a Linux cooked capture that repeat, byte for byte, one taken less than
    /// `DUPLICATE_WINDOW_NS` (1 ms) before: one packet seen on two interfaces (a bridge port and
    /// the bridge). Replayed once.
    pub duplicates: usize,
    /// IPv6 packets, not replayed: the node was given no IPv6 rules or has no IPv6 address
    /// ([`super::ipv6_unmodelled`]), so their fate would be silently wrong.
    pub ipv6: usize,
    /// The first of them, for the warning (`[FILE: ]frame N`).
    pub ipv6_first: Option<String>,
    /// Why IPv6 packets were not replayed (with [`ReplaySummary::ipv6`]).
    pub ipv6_reason: Option<String>,
    /// IPv6 fragments, not replayed on a node that replays IPv6: the kernel reassembles them
    /// (`nf_defrag_ipv6`) before conntrack, which nfsim does not model for IPv6.
    pub ipv6_fragments: usize,
    /// The first of them (`[FILE: ]frame N`).
    pub ipv6_fragments_first: Option<String>,
}

/// How close in capture time two identical records of a cooked capture must be to count as
/// one packet seen on two interfaces (1 ms; a TCP retransmission of the same bytes waits at
/// least `TCP_RTO_MIN`, 200 ms).
pub const DUPLICATE_WINDOW_NS: u64 = 1_000_000;

/// FNV-1a over a packet's bytes: the cheap first test for a repeated record.
fn fnv1a(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325, |h, &x| {
        (h ^ u64::from(x)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The drop cause of a received IPv4 packet whose header checksum does not verify.
const BAD_CHECKSUM: &str = "bad IPv4 header checksum (ip_rcv_core)";
/// The drop cause of a fragment whose datagram never completed.
const NOT_REASSEMBLED: &str = "fragment never reassembled (ipfrag_time expired)";

/// `t` of the node's clock as replay time: since `base` ([`ReplayOptions::start`]).
fn since(base: SimTime, t: SimTime) -> SimTime {
    SimTime::ZERO + t.saturating_since(base)
}

fn secs(t: SimTime) -> String {
    let ns = t.as_nanos();
    format!("{}.{:06}", ns / 1_000_000_000, (ns % 1_000_000_000) / 1_000)
}

/// The bytes of `packet`, which left the node while `rec` was processed, into `buf`, and its
/// length on the wire. `own`: it is `rec`'s packet itself, so its captured bytes are edited in
/// place into what left. Otherwise the kernel sent it: an ICMP error quoting `rec`'s bytes
/// (lowered TTL if `forwarded`), a TCP reset, or anything else written from the packet model.
fn left_bytes(
    capture: &Capture,
    rec: &Record,
    packet: &Packet,
    own: bool,
    forwarded: bool,
    ip_id: u16,
    buf: &mut Vec<u8>,
) -> Result<usize, manip::ManipError> {
    let captured = capture.ip_bytes(rec);
    buf.clear();
    if own {
        buf.extend_from_slice(captured);
        manip::rewrite(buf, &rec.packet, packet)?;
        return Ok(usize::from(packet.len));
    }
    let emitted = |p: &Packet| {
        sim_core::wire::emit_ip(p).map_err(|e| manip::ManipError::NotAnEdit {
            from: rec.packet.to_string(),
            to: format!("{p} ({e})"),
        })
    };
    let (b, n) = match packet.l4 {
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
            (b.bytes, b.wire_len)
        }
        L4::Tcp { flags, .. } if flags.contains(TcpFlags::RST) => {
            let b = manip::tcp_reset_bytes(packet).map_err(|e| manip::ManipError::NotAnEdit {
                from: rec.packet.to_string(),
                to: format!("{packet} ({e})"),
            })?;
            let n = b.len();
            (b, n)
        }
        _ => {
            let b = emitted(packet)?;
            let n = b.len();
            (b, n)
        }
    };
    *buf = b;
    Ok(n)
}

/// Replays `capture` (read from `file`) through `base`, writing one line per packet (and traces
/// with [`ReplayOptions::trace`]) and then the summary to `out`, and what left the node to the
/// file [`ReplayOptions::pcap_out`] names.
pub fn replay(
    node: &NodeSpec,
    base: Netns,
    capture: &Capture,
    file: &str,
    opts: &ReplayOptions,
    out: &mut dyn Write,
) -> Result<ReplaySummary, ExplainError> {
    let pcap_err = |path: &str, e: std::io::Error| ExplainError::PcapWrite {
        file: path.to_string(),
        source: sim_core::pcap::PcapWriteError::Io(e),
    };
    let mut file_out = match &opts.pcap_out {
        Some(path) => Some(std::io::BufWriter::with_capacity(
            1 << 16,
            std::fs::File::create(path).map_err(|e| pcap_err(path, e))?,
        )),
        None => None,
    };
    let sum = replay_with(
        node,
        base,
        capture,
        file,
        opts,
        ReplayOutput {
            text: Some(out),
            json: None,
            pcap: file_out.as_mut().map(|f| f as &mut dyn Write),
        },
    )?;
    if let (Some(path), Some(f)) = (&opts.pcap_out, file_out) {
        f.into_inner().map_err(|e| pcap_err(path, e.into_error()))?;
    }
    Ok(sum)
}

/// Where a capture was taken, which decides where its packets enter the node (`--ingress
/// IFACE=FILE`). Whatever the tap, a packet whose source is an address of the node itself is
/// sent by a local process (OUTPUT): the kernel drops a received packet claiming a local
/// source, so a capture holding one saw the node send it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Tap {
    /// Not said (a capture given without `--ingress`, or taken on `any`): by each packet's
    /// source address, a source in the pod CIDR on `cni0`, anything else on `eth0`.
    BySource,
    /// The node's uplink `eth0`: every packet comes from the wire (PREROUTING, then FORWARD
    /// or INPUT).
    Wire,
    /// The pod side: the bridge `cni0` or a pod's `veth…` on it. Every packet comes from a
    /// pod, received on `cni0`.
    Pod,
    /// An interface of a real node (`--interfaces`): every packet is received on it.
    On(IfName),
}

impl Tap {
    /// The tap of a capture taken on interface `name` of `node`: `eth0` is the wire; `cni0`,
    /// `cbr0` and a pod's host-side `veth…`, `cali…` or `lxc…` interface are the pod side
    /// (which needs `--pod-cidr`); `any` decides by source address.
    pub fn for_interface(node: &NodeSpec, name: &str) -> Result<Tap, ExplainError> {
        let bad = |expected: String| ExplainError::BadFlag {
            flag: "--ingress",
            value: name.to_string(),
            expected,
        };
        if name == "any" {
            return Ok(Tap::BySource);
        }
        if let Some(real) = &node.real {
            return match IfName::new(name) {
                Ok(n) if node.has_interface(name) && name != "lo" => Ok(Tap::On(n)),
                _ => Err(bad(format!(
                    "an interface of the node ({} in {}; lo is the node's own traffic), or any (by source address)",
                    super::interfaces::names(&real.interfaces).trim_start_matches("lo, "),
                    real.file
                ))),
            };
        }
        let pod_side = name == node.pods
            || name == "cbr0"
            || ["veth", "cali", "lxc"]
                .iter()
                .any(|p| name.len() > p.len() && name.starts_with(p));
        if name == node.uplink {
            Ok(Tap::Wire)
        } else if pod_side {
            if node.pod_cidr.is_none() {
                return Err(bad(format!(
                    "a capture on the pod side needs --pod-cidr: without it the node has no {}",
                    node.pods
                )));
            }
            Ok(Tap::Pod)
        } else {
            Err(bad(format!(
                "an interface of the node: {} (the wire), {}, cbr0 or a pod's veth…/cali…/lxc… (the pod side), or any (by source address)",
                node.uplink, node.pods
            )))
        }
    }
}

/// One capture of a replay.
#[derive(Clone, Copy, Debug)]
pub struct ReplayInput<'a> {
    /// The capture, read with [`sim_core::pcap::Timestamps::RelativeToFirst`] (the default).
    pub capture: &'a Capture,
    /// Its file, as named on the command line.
    pub file: &'a str,
    /// The interface it was taken on (`--ingress IFACE=FILE`), if given.
    pub interface: Option<&'a str>,
    /// Where its packets enter the node.
    pub tap: Tap,
}

/// The records of several captures in one sequence: by capture time (nanoseconds since the
/// Unix epoch), ties broken by the order of the inputs, then by frame number. Each capture's
/// own records stay in file order (one whose time goes backwards comes when its turn in the
/// file comes).
struct Merge<'a, 'b> {
    inputs: &'b [ReplayInput<'a>],
    next: Vec<usize>,
}

impl<'a> Iterator for Merge<'a, '_> {
    /// (input index, record, its epoch time in nanoseconds)
    type Item = (usize, &'a Record, u64);
    fn next(&mut self) -> Option<Self::Item> {
        let mut best: Option<(u64, usize)> = None;
        for (i, inp) in self.inputs.iter().enumerate() {
            if let Some(r) = inp.capture.records.get(self.next[i]) {
                let t = inp.capture.first_epoch_ns + r.time.as_nanos();
                // Strictly earlier only: on a tie the earlier input keeps its turn.
                if best.is_none_or(|(bt, _)| t < bt) {
                    best = Some((t, i));
                }
            }
        }
        let (t, i) = best?;
        let r = &self.inputs[i].capture.records[self.next[i]];
        self.next[i] += 1;
        Some((i, r, t))
    }
}

/// The JSON line of one replayed packet (`"kind":"packet"`, docs/json-schema.md).
#[derive(serde::Serialize)]
struct PacketLine<'a> {
    t_ns: u64,
    time: String,
    kind: &'static str,
    capture: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tap: Option<&'a str>,
    frame: usize,
    ingress: &'a str,
    packet: String,
    verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    out_dev: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    out: Option<String>,
    nat: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    entry: Option<CtRecord>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    answers: Vec<AnswerLine>,
    /// The fragments a reassembled datagram was rebuilt from.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    fragments: Vec<FrameRef<'a>>,
}

/// A record of one of the captures.
#[derive(serde::Serialize)]
struct FrameRef<'a> {
    capture: &'a str,
    frame: usize,
}

/// A record the node sees, in the order it sees them (see [`replay_inputs`]).
/// Kept small (24 bytes): a capture of millions of packets has one per record.
struct Arrival<'a> {
    rec: &'a Record,
    /// When the node sees it: its capture time, or the clock's if that went back.
    at: SimTime,
    /// Its capture (index in the inputs).
    k: u32,
    /// Where it enters.
    enters: Enters,
}

const _: () = assert!(std::mem::size_of::<Arrival<'static>>() == 24);

/// Where a packet enters the node (an [`Ingress`] in one byte).
#[derive(Clone, Copy, PartialEq, Eq)]
enum Enters {
    Local,
    Eth0,
    Cni0,
    /// A real node's interface (`--interfaces`), by its index among the node's interfaces.
    Dev(u16),
}

/// A packet the kernel sent in answer (REJECT's ICMP error or reset).
#[derive(serde::Serialize)]
struct AnswerLine {
    dev: String,
    packet: String,
}

/// The JSON lines' first line of a replay.
#[derive(serde::Serialize)]
struct StartLine<'a> {
    kind: &'static str,
    version: u32,
    command: &'static str,
    seed: u64,
    captures: Vec<CaptureLine<'a>>,
}

#[derive(serde::Serialize)]
struct CaptureLine<'a> {
    file: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    tap: Option<&'a str>,
    packets: usize,
    not_ip: usize,
    out_of_order: usize,
}

/// The JSON lines' last line of a replay.
#[derive(serde::Serialize)]
struct EndLine<'a> {
    kind: &'static str,
    version: u32,
    summary: SummaryLine<'a>,
    warnings: Vec<String>,
    conntrack: Vec<CtRecord>,
}

#[derive(serde::Serialize)]
struct SummaryLine<'a> {
    packets: usize,
    not_ip: usize,
    transmitted: usize,
    delivered: usize,
    dropped: &'a BTreeMap<String, usize>,
    rejected: &'a BTreeMap<String, usize>,
    nat: usize,
    left: usize,
    out_of_order: usize,
    loopback: usize,
    replies_as_new: usize,
    not_for_node: usize,
    outgoing: usize,
    duplicates: usize,
    /// IPv6 packets not replayed; left out when there are none.
    #[serde(skip_serializing_if = "is_zero")]
    ipv6: usize,
    bad_checksum: usize,
    reassembled: usize,
    fragments_held: usize,
    fragments_expired: usize,
    fragments_without_first: usize,
    conntrack_entries: usize,
    end_ns: u64,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

fn json_line(out: &mut dyn Write, v: &impl serde::Serialize) -> Result<(), ExplainError> {
    serde_json::to_writer(&mut *out, v).map_err(|e| ExplainError::Output(e.into()))?;
    out.write_all(b"\n").map_err(ExplainError::Output)
}

/// Drains the conntrack events of `ns` into the JSON lines (the `conntrack` kind `nfsim run
/// --json` writes), or drops them when there are no JSON lines.
fn conntrack_events(
    ns: &mut Netns,
    node: &str,
    base: SimTime,
    json: Option<&mut (dyn Write + '_)>,
) -> Result<(), ExplainError> {
    if ns.conntrack().pending_events().is_empty() {
        return Ok(());
    }
    let evs = ns.drain_conntrack_events();
    let Some(out) = json else {
        return Ok(());
    };
    for e in evs {
        let at = since(base, e.at);
        let event = match e.kind {
            EventKind::New => "NEW",
            EventKind::Update => "UPDATE",
            EventKind::Destroy => "DESTROY",
        };
        json_line(
            out,
            &TimelineEvent {
                t_ns: at.as_nanos(),
                time: at.hms().to_string(),
                what: What::Conntrack {
                    node: node.to_string(),
                    event: event.to_string(),
                    cause: destroy_cause(e.cause),
                    line: e.to_string(),
                    entry: CtRecord::of_event(&e),
                    ct: e.entry,
                },
            },
        )?;
    }
    Ok(())
}

/// [`replay`] into writers: the text to `output.text`, the JSON lines to `output.json`,
/// what left the node (when `output.pcap` is given) as a pcap file to `output.pcap`.
pub fn replay_with(
    node: &NodeSpec,
    base: Netns,
    capture: &Capture,
    file: &str,
    opts: &ReplayOptions,
    output: ReplayOutput<'_>,
) -> Result<ReplaySummary, ExplainError> {
    let input = ReplayInput {
        capture,
        file,
        interface: None,
        tap: Tap::BySource,
    };
    replay_inputs(node, base, &[input], opts, output)
}

/// Replays `inputs`, merged by capture time (see [`ReplayInput`]), into `output`.
pub fn replay_inputs(
    node: &NodeSpec,
    base: Netns,
    inputs: &[ReplayInput<'_>],
    opts: &ReplayOptions,
    output: ReplayOutput<'_>,
) -> Result<ReplaySummary, ExplainError> {
    let ReplayOutput {
        mut text,
        mut json,
        pcap,
    } = output;
    let mut ns = base;
    // IPv6 packets are replayed on a node given IPv6 rules and addresses, else skipped.
    let ipv6_why = super::ipv6_unmodelled(&ns);
    let mut sum = ReplaySummary {
        skipped: inputs.iter().map(|i| i.capture.skipped.len()).sum(),
        ..ReplaySummary::default()
    };
    let first_epoch_ns = inputs
        .iter()
        .filter(|i| !i.capture.records.is_empty())
        .map(|i| i.capture.first_epoch_ns)
        .min()
        .unwrap_or(0);
    let pcap_name = opts
        .pcap_out
        .clone()
        .unwrap_or_else(|| "the pcap output".to_string());
    let mut writer = match pcap {
        Some(sink) => Some(
            PcapWriter::with_start(sink, WriteLink::RawIp, first_epoch_ns).map_err(|source| {
                ExplainError::PcapWrite {
                    file: pcap_name.clone(),
                    source,
                }
            })?,
        ),
        None => None,
    };
    let w =
        |out: &mut dyn Write, s: &str| out.write_all(s.as_bytes()).map_err(ExplainError::Output);
    let multi = inputs.len() > 1;
    let named = |n: &str| IfName::new(n).unwrap_or_else(|_| unreachable!("checked by NodeSpec"));
    let eth0_name = named(&node.uplink);
    let eth0 = Ingress::Interface(eth0_name);
    let cni0 = Ingress::Interface(named(&node.pods));
    // A real node's interfaces, for `Enters::Dev`.
    let devs: Vec<IfName> = ns.routing().interfaces().iter().map(|i| i.name).collect();
    let dev_index = |n: IfName| -> Result<Enters, ExplainError> {
        let i = devs.iter().position(|d| *d == n).unwrap_or(0);
        u16::try_from(i)
            .map(Enters::Dev)
            .map_err(|_| ExplainError::BadFlag {
                flag: "--interfaces",
                value: n.to_string(),
                expected: "a node of at most 65,535 interfaces".into(),
            })
    };
    // The records in the order the node sees them, each at the time it does. A cooked capture
    // (`tcpdump -i any`) holds what the node sent as well as what it received, and a bridged
    // packet once per interface it crossed: those are left out here.
    let mut order: Vec<Arrival<'_>> = Vec::new();
    // The cooked records of the last DUPLICATE_WINDOW_NS: (epoch time, hash, bytes).
    let mut recent: std::collections::VecDeque<(u64, u64, &[u8])> = Default::default();
    // Per capture, its latest record so far (time, frame), and how many went back before it.
    let mut latest: Vec<Option<(SimTime, usize)>> = vec![None; inputs.len()];
    let mut out_of_order = vec![0usize; inputs.len()];
    let mut clock = SimTime::ZERO;
    let merge = Merge {
        inputs,
        next: vec![0; inputs.len()],
    };
    for (k, rec, epoch_ns) in merge {
        let input = &inputs[k];
        let place = || {
            format!(
                "{}frame {}",
                if multi {
                    format!("{}: ", input.file)
                } else {
                    String::new()
                },
                rec.frame
            )
        };
        if !rec.packet.is_ipv4() {
            if let Some(why) = ipv6_why {
                sum.ipv6 += 1;
                if sum.ipv6_first.is_none() {
                    sum.ipv6_first = Some(place());
                    sum.ipv6_reason = Some(why.to_string());
                }
                continue;
            }
            if sim_core::wire::is_ipv6_fragment(input.capture.ip_bytes(rec)) {
                sum.ipv6_fragments += 1;
                if sum.ipv6_fragments_first.is_none() {
                    sum.ipv6_fragments_first = Some(place());
                }
                continue;
            }
        }
        if let Some(pkttype) = rec.pkttype {
            if pkttype == PACKET_OUTGOING {
                sum.outgoing += 1;
                continue;
            }
            let b = input.capture.ip_bytes(rec);
            let h = fnv1a(b);
            while recent
                .front()
                .is_some_and(|&(t, _, _)| t.saturating_add(DUPLICATE_WINDOW_NS) < epoch_ns)
            {
                recent.pop_front();
            }
            if recent.iter().any(|&(_, rh, rb)| rh == h && rb == b) {
                sum.duplicates += 1;
                continue;
            }
            recent.push_back((epoch_ns, h, b));
        }
        let at = SimTime::from_nanos(epoch_ns - first_epoch_ns);
        // Time order is a property of each capture: the merge keeps every capture's records
        // in file order, so a record can only come before the clock when its own capture
        // went back in time.
        match latest[k] {
            Some((t, f)) if at < t => {
                out_of_order[k] += 1;
                sum.reordered += 1;
                if sum.reordered_first.is_none() {
                    sum.reordered_first = Some(format!(
                        "{}frame {} at {} s, after frame {f} at {} s",
                        if multi {
                            format!("{}: ", input.file)
                        } else {
                            String::new()
                        },
                        rec.frame,
                        secs(at),
                        secs(t)
                    ));
                }
            }
            _ => latest[k] = Some((at, rec.frame)),
        }
        clock = clock.max(at);
        let pkt = &rec.packet;
        let enters = if ns.routing().is_local(pkt.src) || pkt.src.is_loopback() {
            Enters::Local
        } else {
            match input.tap {
                Tap::Wire => Enters::Eth0,
                Tap::Pod => Enters::Cni0,
                Tap::On(n) => dev_index(n)?,
                Tap::BySource if node.real.is_some() => dev_index(node.arrives_on(pkt.src).0)?,
                Tap::BySource => match node.pod_cidr {
                    Some(p) if p.contains(pkt.src) => Enters::Cni0,
                    _ => Enters::Eth0,
                },
            }
        };
        order.push(Arrival {
            rec,
            at: clock,
            k: k as u32,
            enters,
        });
    }
    if multi {
        sum.reordered_by_capture = inputs
            .iter()
            .zip(&out_of_order)
            .filter(|(_, &n)| n > 0)
            .map(|(i, &n)| (i.file.to_string(), n))
            .collect();
    }
    // What the kernel does to each before the hooks: the header checksum, reassembly.
    let plan = defrag::plan(order.iter().map(|a| defrag::Arrival {
        ip: inputs[a.k as usize].capture.ip_bytes(a.rec),
        at: a.at,
        received: a.enters != Enters::Local,
    }));
    // A packet named in a warning: `FRAME`, or `FILE: frame FRAME` when merged.
    let warn_ref = |a: &Arrival<'_>| {
        if multi {
            format!("{}: frame {}", inputs[a.k as usize].file, a.rec.frame)
        } else {
            format!("frame {}", a.rec.frame)
        }
    };
    if let Some(out) = text.as_deref_mut() {
        if multi {
            w(
                out,
                &format!("replaying {} captures merged by time:\n", inputs.len()),
            )?;
            for (k, i) in inputs.iter().enumerate() {
                w(
                    out,
                    &format!(
                        "  {}: {}{}: {} packets\n",
                        k + 1,
                        i.interface.map(|n| format!("{n}=")).unwrap_or_default(),
                        i.file,
                        i.capture.records.len()
                    ),
                )?;
            }
        } else if let Some(i) = inputs.first() {
            w(
                out,
                &format!(
                    "replaying {}: {} packets\n",
                    i.file,
                    i.capture.records.len()
                ),
            )?;
        }
    }
    if let Some(out) = json.as_deref_mut() {
        json_line(
            out,
            &StartLine {
                kind: "start",
                version: JSON_SCHEMA_VERSION,
                command: "replay",
                seed: node.seed,
                captures: inputs
                    .iter()
                    .enumerate()
                    .map(|(k, i)| CaptureLine {
                        file: i.file,
                        tap: i.interface,
                        packets: i.capture.records.len(),
                        not_ip: i.capture.skipped.len(),
                        out_of_order: out_of_order[k],
                    })
                    .collect(),
            },
        )?;
    }
    // Packets the kernel generated so far: their IPv4 identification (the kernel's is a keyed
    // hash of the addresses, unknowable here).
    let mut answers: u16 = 0;
    let base = opts.start;
    let rel = |t: SimTime| since(base, t);
    let mut now = base;
    let mut dumps: Vec<SimTime> = opts
        .conntrack_at
        .iter()
        .map(|t| base + t.since_start())
        .collect();
    dumps.sort();
    let mut dumps = dumps.into_iter().peekable();
    // The original source of each flow the replay created (protocol, address, port), with
    // the source its replies come from: only looked up, never iterated.
    let mut originators: std::collections::HashMap<(u8, IpAddr, u16), (IpAddr, u16)> =
        std::collections::HashMap::new();
    // Reused from packet to packet: what left the node, the bytes of one packet, one line.
    let mut egress: Vec<Egress> = Vec::with_capacity(4);
    let mut bytes: Vec<u8> = Vec::with_capacity(2048);
    let mut line = String::with_capacity(256);
    // How a packet is named in a line and a warning: `FRAME`, or `CAPTURE:FRAME` when merged.
    let label = |a: &Arrival<'_>| {
        if multi {
            format!("{}:{}", a.k as usize + 1, a.rec.frame)
        } else {
            a.rec.frame.to_string()
        }
    };
    for (idx, arrived) in order.iter().enumerate() {
        let input = &inputs[arrived.k as usize];
        let at = base + arrived.at.since_start();
        while let Some(&t) = dumps.peek().filter(|&&t| t < at.max(now)) {
            dumps.next();
            ns.handle_timeout(t.max(now));
            conntrack_events(&mut ns, &node.name, base, json.as_deref_mut())?;
            dump_at(
                &ns,
                &node.name,
                (base, t),
                now,
                text.as_deref_mut(),
                json.as_deref_mut(),
            )?;
        }
        now = now.max(at);
        ns.handle_timeout(now);
        conntrack_events(&mut ns, &node.name, base, json.as_deref_mut())?;
        if arrived.rec.packet.src.is_loopback() || arrived.rec.packet.dst.is_loopback() {
            sum.loopback += 1;
        }
        let ingress = match arrived.enters {
            Enters::Local => Ingress::Local,
            Enters::Eth0 => eth0,
            Enters::Cni0 => cni0,
            Enters::Dev(i) => Ingress::Interface(devs[usize::from(i)]),
        };
        let from = match &ingress {
            Ingress::Local => "local",
            Ingress::Interface(d) => d.as_str(),
        };
        // Before the hooks (docs/kernel-model.md §14): the header checksum, reassembly. A
        // reassembled datagram is the record of its first fragment (which has the ports),
        // entering where the completing fragment did (ip_frag_reasm(): `head->dev = dev`).
        let (origin, fragments) = match plan.get(&idx) {
            None => (arrived, None),
            Some(Before::Reassembled { first, members }) => {
                sum.reassembled += 1;
                (&order[*first], Some(members))
            }
            Some(before) => {
                sum.packets += 1;
                let (verdict, reason) = match before {
                    Before::BadChecksum => {
                        sum.bad_checksum += 1;
                        if sum.bad_checksum_first.is_none() {
                            sum.bad_checksum_first = Some(warn_ref(arrived));
                        }
                        *sum.dropped.entry(BAD_CHECKSUM.to_string()).or_default() += 1;
                        ("dropped", BAD_CHECKSUM.to_string())
                    }
                    Before::Held { by } => {
                        sum.fragments_held += 1;
                        (
                            "held",
                            format!(
                                "for reassembly (its datagram completes at frame {})",
                                label(&order[*by])
                            ),
                        )
                    }
                    _ => {
                        let no_first = matches!(before, Before::Expired { no_first: true });
                        sum.fragments_expired += 1;
                        sum.fragments_without_first += usize::from(no_first);
                        if sum.fragments_expired_first.is_none() {
                            sum.fragments_expired_first = Some(warn_ref(arrived));
                        }
                        *sum.dropped.entry(NOT_REASSEMBLED.to_string()).or_default() += 1;
                        (
                            "dropped",
                            format!(
                                "{NOT_REASSEMBLED}{}",
                                if no_first { ": no first fragment" } else { "" }
                            ),
                        )
                    }
                };
                if let Some(out) = text.as_deref_mut().filter(|_| !opts.quiet) {
                    let l = if multi {
                        format!("{:>7}", label(arrived))
                    } else {
                        format!("{:>5}", label(arrived))
                    };
                    w(
                        out,
                        &format!(
                            "{l} {:>12} {from:<5} {}  =>  {verdict}: {reason}\n",
                            secs(rel(now)),
                            arrived.rec.packet
                        ),
                    )?;
                }
                if let Some(out) = json.as_deref_mut() {
                    json_line(
                        out,
                        &PacketLine {
                            t_ns: rel(now).as_nanos(),
                            time: rel(now).hms().to_string(),
                            kind: "packet",
                            capture: input.file,
                            tap: input.interface,
                            frame: arrived.rec.frame,
                            ingress: from,
                            packet: arrived.rec.packet.to_string(),
                            verdict,
                            reason: Some(reason),
                            out_dev: None,
                            out: None,
                            nat: false,
                            entry: None,
                            answers: Vec::new(),
                            fragments: Vec::new(),
                        },
                    )?;
                }
                continue;
            }
        };
        let rec = origin.rec;
        let capture = inputs[origin.k as usize].capture;
        let pkt = rec.packet;
        let created_before = ns.conntrack().next_seq();
        egress.clear();
        let (fate, entry_id, trace) = if opts.trace {
            let r = ns.process_traced(now, pkt, ingress);
            egress.extend_from_slice(&r.out);
            (r.fate, r.entry.map(|e| e.id), r.trace)
        } else {
            let r = ns.process_into(now, pkt, ingress, &mut egress);
            (r.fate, r.entry, None)
        };
        sum.packets += 1;
        let survived = matches!(fate, Fate::Transmitted | Fate::Delivered);
        match &fate {
            Fate::Transmitted => sum.transmitted += 1,
            Fate::Delivered => sum.delivered += 1,
            Fate::Dropped(c) => *sum.dropped.entry(c.to_string()).or_default() += 1,
            Fate::Rejected { table, hook } => {
                *sum.rejected.entry(format!("{table} {hook}")).or_default() += 1
            }
            Fate::RejectedNft { chain, hook } => {
                *sum.rejected
                    .entry(format!("nft {chain} {hook}"))
                    .or_default() += 1
            }
        }
        // A new entry (created by this packet): does it answer a flow the replay tracks?
        if let Some(id) = entry_id.filter(|_| ns.conntrack().next_seq() != created_before) {
            if let Some(e) = ns.conntrack().get(id).filter(|e| e.seq >= created_before) {
                if e.orig.src == pkt.src {
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
                                    "{}frame {}: {pkt} (the flow's replies come from {})",
                                    if multi {
                                        format!("{}: ", input.file)
                                    } else {
                                        String::new()
                                    },
                                    arrived.rec.frame,
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
        let first_out = egress.first().map(|e| match e {
            Egress::Transmit { dev, packet, .. } => (Some(*dev), *packet),
            Egress::LocalDeliver { packet } => (None, *packet),
        });
        if let (Ingress::Interface(i), Some((Some(dev), packet))) = (ingress, first_out) {
            if i == eth0_name && dev == eth0_name && packet.src == pkt.src && packet.dst == pkt.dst
            {
                sum.not_for_node += 1;
            } else if i == dev && node.real.is_some() {
                sum.same_link += 1;
                if sum.same_link_first.is_none() {
                    sum.same_link_first =
                        Some(format!("frame {}: {pkt} on {dev}", arrived.rec.frame));
                }
            }
        }
        let translated = survived
            && first_out.is_some_and(|(_, p)| {
                p.src != pkt.src
                    || p.dst != pkt.dst
                    || p.sport() != pkt.sport()
                    || p.dport() != pkt.dport()
            });
        if translated {
            sum.translated += 1;
        }
        if let Some(out) = text.as_deref_mut().filter(|_| !opts.quiet) {
            use std::fmt::Write as _;
            line.clear();
            let t = secs(rel(now));
            let _ = if multi {
                write!(line, "{:>7} ", label(arrived))
            } else {
                write!(line, "{:>5} ", arrived.rec.frame)
            };
            let _ = write!(line, "{t:>12} {from:<5} {pkt}  =>  ");
            let _ = match (&fate, first_out) {
                (Fate::Transmitted, Some((Some(dev), packet))) => {
                    write!(line, "transmitted on {dev}: {packet}")
                }
                (Fate::Delivered, Some((None, packet))) => {
                    write!(line, "delivered locally: {packet}")
                }
                (Fate::Transmitted, _) => write!(line, "transmitted"),
                (Fate::Delivered, _) => write!(line, "delivered locally"),
                (Fate::Dropped(c), _) => write!(line, "dropped: {c}"),
                (Fate::Rejected { table, hook }, _) => write!(line, "rejected by {table} {hook}"),
                (Fate::RejectedNft { chain, hook }, _) => {
                    write!(line, "rejected by nft chain {chain} ({hook})")
                }
            };
            if translated {
                line.push_str("  [NAT]");
            }
            if let Some(members) = fragments {
                line.push_str("  [reassembled from frames ");
                for (i, &m) in members.iter().enumerate() {
                    let _ = write!(
                        line,
                        "{}{}",
                        if i > 0 { ", " } else { "" },
                        label(&order[m])
                    );
                }
                line.push(']');
            }
            // After the packet itself (if it survived) come the packets the kernel generated.
            for e in egress.iter().skip(usize::from(survived)) {
                if let Egress::Transmit { dev, packet, .. } = e {
                    let _ = write!(line, "  (kernel answer on {dev}: {packet})");
                }
            }
            line.push('\n');
            w(out, &line)?;
            if let Some(t) = &trace {
                for l in t.to_string().lines() {
                    w(out, &format!("        {l}\n"))?;
                }
            }
        }
        if let Some(out) = json.as_deref_mut() {
            let (verdict, reason) = match &fate {
                Fate::Transmitted => ("transmitted", None),
                Fate::Delivered => ("delivered", None),
                Fate::Dropped(c) => ("dropped", Some(c.to_string())),
                Fate::Rejected { table, hook } => ("rejected", Some(format!("{table} {hook}"))),
                Fate::RejectedNft { chain, hook } => {
                    ("rejected", Some(format!("nft {chain} {hook}")))
                }
            };
            let out_dev = first_out.filter(|_| survived).and_then(|(d, _)| d);
            let entry = entry_id
                .and_then(|id| ns.conntrack().get(id))
                .map(|e| CtRecord::at(&e, now));
            json_line(
                out,
                &PacketLine {
                    t_ns: rel(now).as_nanos(),
                    time: rel(now).hms().to_string(),
                    kind: "packet",
                    capture: input.file,
                    tap: input.interface,
                    frame: arrived.rec.frame,
                    ingress: from,
                    packet: pkt.to_string(),
                    verdict,
                    reason,
                    out_dev: out_dev.as_ref().map(|d| d.as_str()),
                    out: first_out.filter(|_| survived).map(|(_, p)| p.to_string()),
                    nat: translated,
                    entry,
                    answers: egress
                        .iter()
                        .skip(usize::from(survived))
                        .filter_map(|e| match e {
                            Egress::Transmit { dev, packet, .. } => Some(AnswerLine {
                                dev: dev.to_string(),
                                packet: packet.to_string(),
                            }),
                            Egress::LocalDeliver { .. } => None,
                        })
                        .collect(),
                    fragments: fragments
                        .map(|members| {
                            members
                                .iter()
                                .map(|&m| FrameRef {
                                    capture: inputs[order[m].k as usize].file,
                                    frame: order[m].rec.frame,
                                })
                                .collect()
                        })
                        .unwrap_or_default(),
                },
            )?;
        }
        for (i, e) in egress.iter().enumerate() {
            if let Egress::Transmit { packet, .. } = e {
                sum.left += 1;
                if let Some(wr) = writer.as_mut() {
                    let own = i == 0 && survived;
                    let forwarded = matches!(
                        fate,
                        Fate::Rejected {
                            hook: Hook::Forward,
                            ..
                        } | Fate::RejectedNft {
                            hook: Hook::Forward,
                            ..
                        }
                    );
                    answers += u16::from(!own);
                    let wire_len =
                        left_bytes(capture, rec, packet, own, forwarded, answers, &mut bytes)
                            .map_err(|source| ExplainError::Rewrite {
                                file: inputs[origin.k as usize].file.to_string(),
                                frame: rec.frame,
                                source,
                            })?;
                    wr.write_frame_snapped(rel(now), &bytes, wire_len as u32)
                        .map_err(|source| ExplainError::PcapWrite {
                            file: pcap_name.clone(),
                            source,
                        })?;
                }
            }
        }
        conntrack_events(&mut ns, &node.name, base, json.as_deref_mut())?;
    }
    if let Some(wr) = writer {
        wr.into_inner()
            .flush()
            .map_err(|e| ExplainError::PcapWrite {
                file: pcap_name.clone(),
                source: sim_core::pcap::PcapWriteError::Io(e),
            })?;
    }
    sum.end = rel(now);
    sum.conntrack_entries = ns.conntrack().len();
    for t in dumps {
        if t >= now {
            ns.handle_timeout(t);
        }
        conntrack_events(&mut ns, &node.name, base, json.as_deref_mut())?;
        dump_at(
            &ns,
            &node.name,
            (base, t),
            now,
            text.as_deref_mut(),
            json.as_deref_mut(),
        )?;
    }
    sum.conntrack_table = ns.conntrack().dump(now, &Default::default());
    if let Some(out) = text {
        w(out, &sum.text(opts.pcap_out.as_deref()))?;
    }
    if let Some(out) = json {
        json_line(
            out,
            &EndLine {
                kind: "replay",
                version: JSON_SCHEMA_VERSION,
                summary: SummaryLine {
                    packets: sum.packets,
                    not_ip: sum.skipped,
                    transmitted: sum.transmitted,
                    delivered: sum.delivered,
                    dropped: &sum.dropped,
                    rejected: &sum.rejected,
                    nat: sum.translated,
                    left: sum.left,
                    out_of_order: sum.reordered,
                    loopback: sum.loopback,
                    replies_as_new: sum.replies_as_new,
                    not_for_node: sum.not_for_node,
                    outgoing: sum.outgoing,
                    duplicates: sum.duplicates,
                    ipv6: sum.ipv6,
                    bad_checksum: sum.bad_checksum,
                    reassembled: sum.reassembled,
                    fragments_held: sum.fragments_held,
                    fragments_expired: sum.fragments_expired,
                    fragments_without_first: sum.fragments_without_first,
                    conntrack_entries: sum.conntrack_entries,
                    end_ns: rel(now).as_nanos(),
                },
                warnings: sum.warnings(),
                conntrack: ns
                    .conntrack()
                    .list(now, &Default::default())
                    .iter()
                    .map(|e| CtRecord::at(e, now))
                    .collect(),
            },
        )?;
    }
    Ok(sum)
}

/// The conntrack table at `t` (`--conntrack-at`), the replay being at `now`: in `conntrack
/// -L` form to the text, as a `conntrack_dump` line to the JSON lines.
fn dump_at(
    ns: &Netns,
    node: &str,
    (base, t): (SimTime, SimTime),
    now: SimTime,
    text: Option<&mut (dyn Write + '_)>,
    json: Option<&mut (dyn Write + '_)>,
) -> Result<(), ExplainError> {
    let at = t.max(now);
    let t = since(base, t);
    if let Some(out) = text {
        out.write_all(
            conntrack_listing(ns, at, &format!("conntrack -L at {}", secs(t))).as_bytes(),
        )
        .map_err(ExplainError::Output)?;
    }
    if let Some(out) = json {
        let entries: Vec<CtRecord> = ns
            .conntrack()
            .list(at, &Default::default())
            .iter()
            .map(|e| CtRecord::at(e, at))
            .collect();
        json_line(
            out,
            &DumpLine {
                kind: "conntrack_dump",
                t_ns: t.as_nanos(),
                time: t.hms().to_string(),
                node,
                entries,
            },
        )?;
    }
    Ok(())
}

#[derive(serde::Serialize)]
struct DumpLine<'a> {
    kind: &'static str,
    t_ns: u64,
    time: String,
    node: &'a str,
    entries: Vec<CtRecord>,
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
        if self.ipv6 > 0 {
            v.push(format!(
                "{} IPv6 packets not replayed (first: {}): {}, so their fate would be wrong",
                self.ipv6,
                self.ipv6_first.as_deref().unwrap_or(""),
                self.ipv6_reason
                    .as_deref()
                    .unwrap_or("IPv6 is not modelled on this node")
            ));
        }
        if self.ipv6_fragments > 0 {
            v.push(format!(
                "{} IPv6 fragments not replayed (first: {}): the kernel reassembles them before conntrack (nf_defrag_ipv6), which nfsim does not model for IPv6",
                self.ipv6_fragments,
                self.ipv6_fragments_first.as_deref().unwrap_or("")
            ));
        }
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
        if self.outgoing > 0 {
            v.push(format!(
                "{} packets of a Linux cooked capture (tcpdump -i any) were sent by the node (packet type OUTGOING): copies of packets replayed on their way in, or the node's own; they were not replayed as arrivals",
                self.outgoing
            ));
        }
        if self.duplicates > 0 {
            v.push(format!(
                "{} packets of a Linux cooked capture repeat, byte for byte, one captured less than 1 ms before: one packet seen on two interfaces (a bridge port and the bridge); each was replayed once",
                self.duplicates
            ));
        }
        if self.not_for_node > 0 {
            v.push(format!(
                "{} packets came in on eth0 and went straight back out of eth0 untranslated: traffic between other hosts (a promiscuous capture?), not for this node",
                self.not_for_node
            ));
        }
        if let (n @ 1.., Some(first)) = (self.same_link, &self.same_link_first) {
            v.push(format!(
                "{n} packets were forwarded back out of the interface they came in by (first: {first}): if that interface is a routed link rather than a bridge, {}",
                super::interfaces::SAME_LINK_UNMODELLED
            ));
        }
        if self.bad_checksum > 0 {
            v.push(format!(
                "{} received IPv4 packets have a header checksum that does not verify, and were dropped as the kernel drops them before any hook (ip_rcv_core: InCsumErrors); first: {}",
                self.bad_checksum,
                self.bad_checksum_first.as_deref().unwrap_or("")
            ));
        }
        if self.fragments_expired > 0 {
            v.push(format!(
                "{} IPv4 fragments never completed a datagram ({} of them in a queue without the first fragment, so without ports): the kernel holds fragments for reassembly before conntrack (nf_defrag_ipv4) and drops them when ipfrag_time ({IPFRAG_TIME_SECS} s) expires, so none of them reached the rules; first: {}",
                self.fragments_expired,
                self.fragments_without_first,
                self.fragments_expired_first.as_deref().unwrap_or("")
            ));
        }
        if self.reordered > 0 {
            let per: Vec<String> = self
                .reordered_by_capture
                .iter()
                .map(|(f, n)| format!("{f}: {n}"))
                .collect();
            v.push(format!(
                "{} records have a timestamp earlier than a record before them in the same capture{} and were processed at that record's time, since the node's clock cannot go back; first: {}. `reordercap` sorts a capture by time",
                self.reordered,
                if per.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", per.join(", "))
                },
                self.reordered_first.as_deref().unwrap_or("")
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
        if self.ipv6 > 0 {
            s.push_str(&format!(
                "  IPv6           {} (not modelled, skipped)\n",
                self.ipv6
            ));
        }
        if self.ipv6_fragments > 0 {
            s.push_str(&format!(
                "  IPv6 fragments {} (not reassembled, skipped)\n",
                self.ipv6_fragments
            ));
        }
        if self.outgoing > 0 {
            s.push_str(&format!(
                "  outgoing       {} (sent by the node, skipped)\n",
                self.outgoing
            ));
        }
        if self.duplicates > 0 {
            s.push_str(&format!(
                "  duplicates     {} (seen on a second interface, skipped)\n",
                self.duplicates
            ));
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
        if self.reassembled > 0 || self.fragments_held > 0 {
            s.push_str(&format!(
                "  reassembled    {} datagrams ({} fragments held for them)\n",
                self.reassembled, self.fragments_held
            ));
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
