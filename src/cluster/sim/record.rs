//! The structured parts of the JSON lines (`nfsim run --json`): conntrack entries, the
//! summary and the run's last line. The schema is documented in `docs/json-schema.md`; its
//! version is [`JSON_SCHEMA_VERSION`].

use serde::Serialize;
use sim_conntrack::tuple::{ct_proto_name, has_ports, is_icmp};
use sim_conntrack::{CtEntry, CtEvent, DestroyCause, Status};
use sim_core::SimTime;
use std::net::IpAddr;

/// The version of the JSON lines' schema (`docs/json-schema.md`): raised whenever a field is
/// renamed, removed or changes meaning (adding a field does not raise it).
pub const JSON_SCHEMA_VERSION: u32 = 1;

/// One direction's tuple of a conntrack entry.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CtTupleRecord {
    /// Source address.
    pub src: IpAddr,
    /// Destination address.
    pub dst: IpAddr,
    /// Source port (protocols with ports: tcp, udp, sctp, dccp, udplite).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sport: Option<u16>,
    /// Destination port.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dport: Option<u16>,
    /// ICMP type (icmp, icmpv6).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u8>,
    /// ICMP code.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp_code: Option<u8>,
    /// ICMP echo identifier.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub icmp_id: Option<u16>,
}

impl CtTupleRecord {
    fn new(t: &sim_conntrack::Tuple) -> CtTupleRecord {
        let ports = has_ports(t.proto);
        let icmp = is_icmp(t.proto);
        CtTupleRecord {
            src: t.src,
            dst: t.dst,
            sport: ports.then_some(t.sport),
            dport: ports.then_some(t.dport),
            icmp_type: icmp.then(|| t.icmp_type()),
            icmp_code: icmp.then(|| t.icmp_code()),
            icmp_id: icmp.then(|| t.icmp_id()),
        }
    }
}

/// One address translation an entry carries: what the original direction's packets had, and
/// what they were rewritten to.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct NatRecord {
    /// The address before.
    pub from_addr: IpAddr,
    /// The port before (protocols with ports).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_port: Option<u16>,
    /// The address after.
    pub to_addr: IpAddr,
    /// The port after.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to_port: Option<u16>,
}

/// A conntrack entry at one instant, field by field.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct CtRecord {
    /// `tcp`, `udp`, `icmp`, … (conntrack-tools' name).
    pub proto: &'static str,
    /// The IP protocol number.
    pub proto_num: u8,
    /// The original direction.
    pub orig: CtTupleRecord,
    /// The reply direction (after NAT: what replies look like).
    pub reply: CtTupleRecord,
    /// The TCP state (`ESTABLISHED`, …); absent for other protocols.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub state: Option<&'static str>,
    /// The flags conntrack-tools prints: `UNREPLIED` (no reply seen), `ASSURED`.
    pub flags: Vec<&'static str>,
    /// Every status bit, by the kernel's name (`SEEN_REPLY`, `ASSURED`, `CONFIRMED`,
    /// `SRC_NAT`, `DST_NAT`, …).
    pub status: Vec<&'static str>,
    /// Whole seconds left before it times out (absent where conntrack-tools prints none: a
    /// DESTROY event at 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timeout_s: Option<u64>,
    /// The connection mark.
    pub mark: u32,
    /// Destination NAT: the original destination and the endpoint it was rewritten to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dnat: Option<NatRecord>,
    /// Source NAT: the original source and what it was rewritten to (masquerade).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub snat: Option<NatRecord>,
}

/// Kernel names of the status bits, in bit order.
const STATUS_NAMES: [(Status, &str); 10] = [
    (Status::EXPECTED, "EXPECTED"),
    (Status::SEEN_REPLY, "SEEN_REPLY"),
    (Status::ASSURED, "ASSURED"),
    (Status::CONFIRMED, "CONFIRMED"),
    (Status::SRC_NAT, "SRC_NAT"),
    (Status::DST_NAT, "DST_NAT"),
    (Status::SRC_NAT_DONE, "SRC_NAT_DONE"),
    (Status::DST_NAT_DONE, "DST_NAT_DONE"),
    (Status::DYING, "DYING"),
    (Status::NAT_CLASH, "NAT_CLASH"),
];

impl CtRecord {
    /// The entry with `timeout_s` seconds left.
    pub fn new(e: &CtEntry, timeout_s: Option<u64>) -> CtRecord {
        let ports = has_ports(e.proto());
        let port = |p: u16| ports.then_some(p);
        let mut flags = Vec::new();
        if !e.status.contains(Status::SEEN_REPLY) {
            flags.push("UNREPLIED");
        }
        if e.status.contains(Status::ASSURED) {
            flags.push("ASSURED");
        }
        CtRecord {
            proto: ct_proto_name(e.proto()),
            proto_num: e.proto(),
            orig: CtTupleRecord::new(&e.orig),
            reply: CtTupleRecord::new(&e.reply),
            state: if e.proto() == sim_core::packet::IPPROTO_TCP {
                e.tcp_state.map(|s| s.name())
            } else {
                None
            },
            flags,
            status: STATUS_NAMES
                .iter()
                .filter(|(b, _)| e.status.contains(*b))
                .map(|(_, n)| *n)
                .collect(),
            timeout_s,
            mark: e.mark,
            // The original destination became the reply's source (`nf_nat_manip_pkt`).
            dnat: e.is_dst_nat().then(|| NatRecord {
                from_addr: e.orig.dst,
                from_port: port(e.orig.dport),
                to_addr: e.reply.src,
                to_port: port(e.reply.sport),
            }),
            snat: e.is_src_nat().then(|| NatRecord {
                from_addr: e.orig.src,
                from_port: port(e.orig.sport),
                to_addr: e.reply.dst,
                to_port: port(e.reply.dport),
            }),
        }
    }

    /// The entry as `conntrack -L` shows it at `now`.
    pub fn at(e: &CtEntry, now: SimTime) -> CtRecord {
        CtRecord::new(e, Some(e.expiry.secs_left(now)))
    }

    /// The entry of an event, with the seconds the event line shows.
    pub fn of_event(ev: &CtEvent) -> CtRecord {
        CtRecord::new(&ev.entry, ev.secs())
    }
}

/// Why a DESTROY event happened, for the JSON lines.
pub fn destroy_cause(c: Option<DestroyCause>) -> Option<&'static str> {
    c.map(|c| match c {
        DestroyCause::Timeout => "timeout",
        DestroyCause::Delete { .. } => "userspace",
        DestroyCause::EarlyDrop => "early_drop",
        DestroyCause::Killed => "killed",
    })
}

/// One client's line of the summary.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ClientSummary {
    /// The client's name.
    pub client: String,
    /// Its target as the scenario writes it.
    pub target: String,
    /// Queries (connections) sent.
    pub sent: u64,
    /// Answered.
    pub answered: u64,
    /// Failed (timed out or refused).
    pub failed: u64,
    /// Timed out.
    pub timed_out: u64,
    /// Refused (ICMP error, RST, closed port).
    pub refused: u64,
    /// Still waiting for an answer when the run ended (shown only when some client has any).
    #[serde(skip_serializing_if = "is_zero")]
    pub in_flight: u64,
}

fn is_zero(v: &u64) -> bool {
    *v == 0
}

/// How many packets one client sent to one endpoint address.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct FromClient {
    /// The client's name.
    pub client: String,
    /// Packets.
    pub packets: u64,
}

/// One endpoint address's line of the summary.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct EndpointSummary {
    /// `namespace/name` of the pod.
    pub endpoint: String,
    /// The address.
    pub ip: IpAddr,
    /// Client packets that reached it.
    pub packets: u64,
    /// Distinct flows (source socket and protocol) among them.
    pub flows: u64,
    /// Packets per client.
    pub from: Vec<FromClient>,
}

/// The summary at the end of a run, as data (the text table is rendered from it).
#[derive(Debug, Clone, Default, Serialize, PartialEq, Eq)]
pub struct Summary {
    /// One per client, in scenario order.
    pub clients: Vec<ClientSummary>,
    /// One per endpoint address that received client packets (or serves and received
    /// none), pods in name order.
    pub endpoints: Vec<EndpointSummary>,
}

impl Summary {
    /// The text table `nfsim run` prints under `summary`; `pod_width` is the widest pod
    /// name of the scenario, `None` when it has no pods (no endpoint table then).
    pub(crate) fn text(&self, pod_width: Option<usize>) -> String {
        let mut s = String::new();
        let w = self
            .clients
            .iter()
            .map(|c| c.client.len())
            .max()
            .unwrap_or(6)
            .max(6);
        // Queries still in flight at the end get a column when there are any.
        let in_flight = self.clients.iter().any(|c| c.in_flight > 0);
        s.push_str(&format!(
            "{:<w$}  {:<24} {:>6} {:>8} {:>6} {:>9} {:>7}{}\n",
            "client",
            "target",
            "sent",
            "answered",
            "failed",
            "timed out",
            "refused",
            if in_flight { " in flight" } else { "" }
        ));
        for c in &self.clients {
            s.push_str(&format!(
                "{:<w$}  {:<24} {:>6} {:>8} {:>6} {:>9} {:>7}{}\n",
                c.client,
                c.target,
                c.sent,
                c.answered,
                c.failed,
                c.timed_out,
                c.refused,
                if in_flight {
                    format!(" {:>9}", c.in_flight)
                } else {
                    String::new()
                }
            ));
        }
        if let Some(pw) = pod_width {
            let pw = pw.max(8);
            s.push('\n');
            s.push_str(&format!(
                "{:<pw$}  {:<15} {:>8} {:>6}  {}\n",
                "endpoint", "ip", "packets", "flows", "from"
            ));
            for e in &self.endpoints {
                if e.from.is_empty() && e.packets == 0 {
                    s.push_str(&format!(
                        "{:<pw$}  {:<15} {:>8} {:>6}\n",
                        e.endpoint,
                        e.ip.to_string(),
                        0,
                        0
                    ));
                    continue;
                }
                let from: Vec<String> = e
                    .from
                    .iter()
                    .map(|f| format!("{} {}", f.client, f.packets))
                    .collect();
                s.push_str(&format!(
                    "{:<pw$}  {:<15} {:>8} {:>6}  {}\n",
                    e.endpoint,
                    e.ip.to_string(),
                    e.packets,
                    e.flows,
                    from.join(", ")
                ));
            }
        }
        s
    }
}

/// The first JSON line of a run: `{"kind":"start","version":1,…}`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct StartRecord<'a> {
    /// Always `start`.
    pub kind: &'static str,
    /// [`JSON_SCHEMA_VERSION`].
    pub version: u32,
    /// The scenario's name.
    pub scenario: &'a str,
    /// Its file.
    pub file: &'a str,
    /// The seed.
    pub seed: u64,
    /// The simulated duration, in nanoseconds.
    pub duration_ns: u64,
}

impl<'a> StartRecord<'a> {
    /// The record.
    pub fn new(scenario: &'a str, file: &'a str, seed: u64, duration_ns: u64) -> StartRecord<'a> {
        StartRecord {
            kind: "start",
            version: JSON_SCHEMA_VERSION,
            scenario,
            file,
            seed,
            duration_ns,
        }
    }
}

/// A node's conntrack table at one instant (`nfsim run --dump-conntrack`):
/// `{"kind":"conntrack_dump",…,"entries":[…]}`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct DumpRecord<'a> {
    /// Always `conntrack_dump`.
    pub kind: &'static str,
    /// Nanoseconds since the start.
    pub t_ns: u64,
    /// `HH:MM:SS.mmm`.
    pub time: String,
    /// The node.
    pub node: &'a str,
    /// Its entries, in `conntrack -L` order.
    pub entries: Vec<CtRecord>,
}

impl<'a> DumpRecord<'a> {
    /// The record of `entries` at `now`.
    pub fn new(node: &'a str, now: SimTime, entries: &[CtEntry]) -> DumpRecord<'a> {
        DumpRecord {
            kind: "conntrack_dump",
            t_ns: now.as_nanos(),
            time: now.hms().to_string(),
            node,
            entries: entries.iter().map(|e| CtRecord::at(e, now)).collect(),
        }
    }
}

/// The last JSON line of a run: `{"kind":"run",…}` with the summary and every verdict.
#[derive(Debug, Clone, Serialize)]
pub struct EndRecord<'a> {
    /// Always `run`.
    pub kind: &'static str,
    /// [`JSON_SCHEMA_VERSION`].
    pub version: u32,
    /// The scenario's name.
    pub scenario: &'a str,
    /// Its file.
    pub file: &'a str,
    /// The seed.
    pub seed: u64,
    /// Whether every expectation passed.
    pub passed: bool,
    /// The run's headline, its outcome in one line (`report::headline`).
    pub headline: &'a str,
    /// Events processed.
    pub events: u64,
    /// Per client and per endpoint.
    pub summary: &'a Summary,
    /// Each expectation's verdict, in check order.
    pub expectations: &'a [super::ExpectResult],
    /// Expectations not checked (after `--until`).
    pub skipped: &'a [String],
}

impl<'a> EndRecord<'a> {
    /// The record of a finished run.
    pub fn new(
        scenario: &'a str,
        file: &'a str,
        seed: u64,
        r: &'a super::RunResult,
        skipped: &'a [String],
        headline: &'a str,
    ) -> EndRecord<'a> {
        EndRecord {
            kind: "run",
            version: JSON_SCHEMA_VERSION,
            scenario,
            file,
            seed,
            passed: r.passed(),
            headline,
            events: r.events,
            summary: &r.summary_data,
            expectations: &r.results,
            skipped,
        }
    }
}

/// A client's queries sent at or after the scenario's first change
/// ([`crate::scenario::Scenario::first_change`]), for the run's headline.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AfterEvent {
    /// Sent.
    pub sent: u64,
    /// Failed: timed out or refused.
    pub failed: u64,
}
