//! The timeline: one line per event that matters, as people read it and as the JSON lines
//! carry it.

use super::*;

/// One thing that happened, for the timeline and the JSON lines.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct TimelineEvent {
    /// Nanoseconds since the start.
    pub t_ns: u64,
    /// `HH:MM:SS.mmm`.
    pub time: String,
    /// What happened.
    #[serde(flatten)]
    pub what: What,
}

/// The kinds of timeline events (JSON: `"kind": "query_sent"`, …).
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum What {
    /// A client sent a query (or a retry).
    QuerySent {
        /// Client.
        client: String,
        /// Query number (JSON: `id`).
        #[serde(rename = "id")]
        query: u32,
        /// Try.
        attempt: u8,
        /// Source socket.
        src: String,
        /// Destination.
        dst: String,
    },
    /// A ping client sent an echo request.
    PingSent {
        /// Client.
        client: String,
        /// Request number, from 0 (JSON: `id`).
        #[serde(rename = "id")]
        query: u32,
        /// The ping socket's identifier.
        ident: u16,
        /// The ICMP sequence number (from 1).
        icmp_seq: u16,
        /// Source address.
        src: String,
        /// Destination address.
        dst: String,
    },
    /// A client's packet was DNAT'd on a node.
    Dnat {
        /// Client.
        client: String,
        /// Query or connection number (JSON: `id`).
        #[serde(rename = "id")]
        query: u32,
        /// Node.
        node: String,
        /// Original destination.
        from: String,
        /// New destination.
        to: String,
    },
    /// A query was answered.
    QueryAnswered {
        /// Client.
        client: String,
        /// Query number (JSON: `id`).
        #[serde(rename = "id")]
        query: u32,
        /// Round trip from the first send, in nanoseconds.
        rtt_ns: u64,
        /// Source of the answer.
        from: String,
    },
    /// A query timed out on its last try.
    QueryTimedOut {
        /// Client.
        client: String,
        /// Query number (JSON: `id`).
        #[serde(rename = "id")]
        query: u32,
        /// Tries.
        attempts: u8,
    },
    /// A query was refused by an ICMP error.
    QueryRefused {
        /// Client.
        client: String,
        /// Query number (JSON: `id`).
        #[serde(rename = "id")]
        query: u32,
        /// ICMP code.
        code: u8,
        /// The error was ICMPv6 (JSON: present, `true`, only then).
        #[serde(skip_serializing_if = "is_false")]
        icmpv6: bool,
    },
    /// An ICMP error about a query was not seen by the client's unconnected socket.
    IcmpIgnored {
        /// Client.
        client: String,
        /// Query number (JSON: `id`).
        #[serde(rename = "id")]
        query: u32,
        /// ICMP code.
        code: u8,
        /// The error was ICMPv6 (JSON: present, `true`, only then).
        #[serde(skip_serializing_if = "is_false")]
        icmpv6: bool,
        /// Who sent the error.
        from: String,
    },
    /// A TCP client started a connection.
    TcpConnect {
        /// Client.
        client: String,
        /// Connection number (JSON: `id`).
        #[serde(rename = "id")]
        conn: u32,
        /// Source socket.
        src: String,
        /// Destination.
        dst: String,
    },
    /// A TCP exchange completed.
    TcpDone {
        /// Client.
        client: String,
        /// Connection number (JSON: `id`).
        #[serde(rename = "id")]
        conn: u32,
        /// Time to the response, in nanoseconds.
        rtt_ns: u64,
    },
    /// A TCP exchange failed.
    TcpFailed {
        /// Client.
        client: String,
        /// Connection number (JSON: `id`).
        #[serde(rename = "id")]
        conn: u32,
        /// Why.
        reason: String,
    },
    /// A keep-alive TCP client's connection changed (opened, closed, reset, …).
    TcpConnection {
        /// Client.
        client: String,
        /// Connection number, per client.
        conn: u32,
        /// The last request sent on it (JSON: `id`).
        #[serde(rename = "id")]
        request: u32,
        /// What happened.
        change: String,
    },
    /// A keep-alive TCP client sent a request on a connection.
    TcpRequest {
        /// Client.
        client: String,
        /// Request number (JSON: `id`).
        #[serde(rename = "id")]
        request: u32,
        /// Connection number.
        conn: u32,
        /// Source socket.
        src: String,
        /// Destination.
        dst: String,
    },
    /// A keep-alive TCP client's request was answered.
    TcpAnswered {
        /// Client.
        client: String,
        /// Request number (JSON: `id`).
        #[serde(rename = "id")]
        request: u32,
        /// Connection number.
        conn: u32,
        /// Time from the request being due to its response, in nanoseconds.
        rtt_ns: u64,
    },
    /// A keep-alive TCP client's request failed.
    TcpRequestFailed {
        /// Client.
        client: String,
        /// Request number (JSON: `id`).
        #[serde(rename = "id")]
        request: u32,
        /// Connection number.
        conn: u32,
        /// Why.
        reason: String,
    },
    /// A conntrack event on a node.
    Conntrack {
        /// Node.
        node: String,
        /// NEW, UPDATE or DESTROY.
        event: String,
        /// For DESTROY, why: `timeout`, `userspace`, `early_drop` or `killed`.
        #[serde(skip_serializing_if = "Option::is_none")]
        cause: Option<&'static str>,
        /// The `conntrack -E` line.
        line: String,
        /// The entry, field by field.
        entry: CtRecord,
        /// The entry itself, for `conntrack -E` filters (not serialized: `entry` says it).
        #[serde(skip)]
        ct: sim_conntrack::CtEntry,
    },
    /// A pod lifecycle change.
    Pod {
        /// `namespace/name`.
        pod: String,
        /// What happened.
        change: String,
    },
    /// An EndpointSlice changed.
    Endpoints {
        /// `namespace/service`.
        service: String,
        /// Endpoints with their conditions.
        endpoints: String,
    },
    /// A kube-proxy sync.
    Sync {
        /// Node.
        node: String,
        /// On a dual-stack node, which proxier synced (`IPv4` or `IPv6`); `None` for a
        /// single-stack node's one proxier.
        #[serde(skip_serializing_if = "Option::is_none")]
        family: Option<&'static str>,
        /// Full or partial.
        full: bool,
        /// Services whose rules changed.
        changed: Vec<String>,
        /// nat rules written.
        nat_rules: usize,
        /// `kubeProxy.syncCost: modelled`: how long the sync took.
        #[serde(skip_serializing_if = "Option::is_none")]
        took: Option<SyncTook>,
    },
    /// Applying a kube-proxy sync to a node failed (kube-proxy retries with a full sync).
    SyncFailed {
        /// Node.
        node: String,
        /// The error.
        error: String,
    },
    /// A conntrack entry deleted by kube-proxy's cleanup.
    CleanupDelete {
        /// Node.
        node: String,
        /// The deleted entry's `conntrack -L` line.
        line: String,
        /// Why the cleanup deleted it, in kube-proxy's terms.
        reason: String,
        /// The deleted entry, field by field.
        entry: CtRecord,
    },
    /// A client's packet (or an answer to it) was dropped or rejected by a node.
    Dropped {
        /// Client.
        client: String,
        /// Query or connection number (JSON: `id`).
        #[serde(rename = "id")]
        query: u32,
        /// Node.
        node: String,
        /// The packet.
        packet: String,
        /// Why (`no route to host`, `dropped by filter FORWARD`, …).
        reason: String,
    },
    /// A change an event made to an object, a process or a node (`service default/web`,
    /// `kube-proxy node-1`, `node node-1`).
    Change {
        /// What changed.
        subject: String,
        /// How.
        change: String,
    },
    /// One line of what a command typed on a node printed (`conntrack -D …`).
    Command {
        /// Node.
        node: String,
        /// The command line.
        command: String,
        /// The line it printed.
        output: String,
    },
    /// A resolver client sent a DNS query.
    DnsQuery {
        /// Client.
        client: String,
        /// Lookup number (JSON: `id`).
        #[serde(rename = "id")]
        lookup: u32,
        /// The name asked.
        name: String,
        /// `A` or `AAAA`.
        qtype: String,
        /// `udp` or `tcp`.
        transport: &'static str,
        /// Source socket.
        src: String,
        /// The nameserver.
        dst: String,
    },
    /// A resolver client got a DNS answer.
    DnsAnswer {
        /// Client.
        client: String,
        /// Lookup number (JSON: `id`).
        #[serde(rename = "id")]
        lookup: u32,
        /// The name answered.
        name: String,
        /// `A` or `AAAA`.
        qtype: String,
        /// `NOERROR` or `NXDOMAIN`.
        rcode: &'static str,
        /// Records of the type asked.
        records: u16,
        /// TC: truncated.
        truncated: bool,
        /// `udp` or `tcp`.
        transport: &'static str,
        /// Who answered, as the client saw it.
        from: String,
    },
    /// A resolver client's lookup ended.
    Lookup {
        /// Client.
        client: String,
        /// Lookup number (JSON: `id`).
        #[serde(rename = "id")]
        lookup: u32,
        /// The name looked up, as written.
        name: String,
        /// `answered`, `nxdomain`, `nodata`, `timedOut` or `refused`.
        result: &'static str,
        /// Addresses returned.
        records: u32,
        /// From the call to its return, in nanoseconds.
        latency_ns: u64,
        /// The names asked, in order.
        tried: Vec<String>,
        /// Whether it went over TCP.
        tcp: bool,
    },
    /// An expectation was checked.
    Expectation {
        /// Name.
        name: String,
        /// Its line in the scenario file.
        line: u64,
        /// Passed.
        passed: bool,
        /// What was seen.
        detail: String,
    },
}

impl TimelineEvent {
    /// The human timeline line. Foreign text in it (a reconciler's reason or error, a typed
    /// command, names) is escaped with [`sim_core::text::Escaped`], so that no newline in it
    /// forges a line (`expect PASS: …`) and no escape sequence reaches the terminal; only a
    /// command's output, which nfsim writes as the tool would (`conntrack -S`'s tab), is
    /// printed as it is.
    pub fn line(&self) -> String {
        use sim_core::text::Escaped;
        let body = match &self.what {
            What::QuerySent {
                client,
                query,
                attempt,
                src,
                dst,
            } => {
                if *attempt == 0 {
                    format!("{client}: query #{query} sent {src} -> {dst}")
                } else {
                    format!("{client}: query #{query} retry {attempt} sent {src} -> {dst}")
                }
            }
            What::PingSent {
                client,
                query,
                ident,
                icmp_seq,
                src,
                dst,
            } => format!(
                "{client}: echo request #{query} sent {src} -> {dst} id={ident} seq={icmp_seq}"
            ),
            What::Dnat {
                client,
                query,
                node,
                from,
                to,
            } => format!("{client}: #{query} DNAT'd on {node}: {from} -> {to}"),
            What::QueryAnswered {
                client,
                query,
                rtt_ns,
                from,
            } => format!(
                "{client}: query #{query} answered by {from} in {}",
                SimDuration::from_nanos(*rtt_ns)
            ),
            What::QueryTimedOut {
                client,
                query,
                attempts,
            } => {
                format!(
                    "{client}: query #{query} TIMED OUT ({attempts} tr{})",
                    if *attempts == 1 { "y" } else { "ies" }
                )
            }
            What::QueryRefused {
                client,
                query,
                code,
                icmpv6,
            } => format!(
                "{client}: query #{query} REFUSED ({} unreachable code {code})",
                icmp_name(*icmpv6)
            ),
            What::IcmpIgnored {
                client,
                query,
                code,
                from,
                icmpv6,
            } => format!(
                "{client}: {} unreachable code {code} from {from} about query #{query} not seen (unconnected socket)",
                icmp_name(*icmpv6)
            ),
            What::TcpConnect {
                client,
                conn,
                src,
                dst,
            } => format!("{client}: connection #{conn} {src} -> {dst} SYN"),
            What::TcpDone {
                client,
                conn,
                rtt_ns,
            } => format!(
                "{client}: connection #{conn} answered in {}, closing",
                SimDuration::from_nanos(*rtt_ns)
            ),
            What::TcpFailed {
                client,
                conn,
                reason,
            } => format!("{client}: connection #{conn} FAILED: {reason}"),
            What::TcpConnection {
                client, conn, change, ..
            } => format!("{client}: connection #{conn} {change}"),
            What::TcpRequest {
                client,
                request,
                conn,
                src,
                dst,
            } => format!("{client}: request #{request} on connection #{conn} {src} -> {dst}"),
            What::TcpAnswered {
                client,
                request,
                conn,
                rtt_ns,
            } => format!(
                "{client}: request #{request} answered in {} (connection #{conn})",
                SimDuration::from_nanos(*rtt_ns)
            ),
            What::TcpRequestFailed {
                client,
                request,
                conn,
                reason,
            } => format!("{client}: request #{request} FAILED on connection #{conn}: {reason}"),
            What::DnsQuery {
                client,
                lookup,
                name,
                qtype,
                transport,
                src,
                dst,
            } => format!("{client}: lookup #{lookup} asks {qtype} {name} {src} -> {dst} ({transport})"),
            What::DnsAnswer {
                client,
                lookup,
                name,
                qtype,
                rcode,
                records,
                truncated,
                transport,
                from,
            } => format!(
                "{client}: lookup #{lookup} {rcode} {qtype} {name}, {records} record{}{} from {from} ({transport})",
                if *records == 1 { "" } else { "s" },
                if *truncated { ", TRUNCATED (TC)" } else { "" }
            ),
            What::Lookup {
                client,
                lookup,
                name,
                result,
                records,
                latency_ns,
                tried,
                tcp,
            } => {
                let how = match *result {
                    "answered" => format!("answered ({records} address{})", if *records == 1 { "" } else { "es" }),
                    "nxdomain" => "NXDOMAIN".to_string(),
                    "nodata" => "NODATA (no address)".to_string(),
                    "timedOut" => "TIMED OUT".to_string(),
                    other => other.to_uppercase(),
                };
                format!(
                    "{client}: lookup #{lookup} of {name} {how} in {}, {} name{} asked{}: {}",
                    SimDuration::from_nanos(*latency_ns),
                    tried.len(),
                    if tried.len() == 1 { "" } else { "s" },
                    if *tcp { ", over TCP" } else { "" },
                    tried.join(", ")
                )
            }
            What::Conntrack { node, line, .. } => format!("ct {node}: {line}"),
            What::Pod { pod, change } => format!("pod {pod}: {change}"),
            What::Endpoints { service, endpoints } => format!("endpoints {service}: {endpoints}"),
            What::Sync {
                node,
                family,
                full,
                changed,
                nat_rules,
                took,
            } => format!(
                "kube-proxy {node}{}: {} sync, {nat_rules} nat rules{}{}",
                family.map_or(String::new(), |f| format!(" ({f} proxier)")),
                if *full { "full" } else { "partial" },
                if changed.is_empty() {
                    String::new()
                } else {
                    format!(", changed: {}", changed.join(" "))
                },
                took.as_ref().map_or(String::new(), SyncTook::describe),
            ),
            What::SyncFailed { node, error } => {
                format!("kube-proxy {node}: sync FAILED: {error}")
            }
            What::CleanupDelete {
                node, line, reason, ..
            } => {
                format!("kube-proxy {node}: cleanup deleted {line} ({reason})")
            }
            What::Dropped {
                client,
                query,
                node,
                packet,
                reason,
            } => format!("{client}: #{query} {reason} on {node}: {packet}"),
            What::Change { subject, change } => format!("{subject}: {change}"),
            What::Command {
                node,
                command,
                output,
            } => {
                return format!(
                    "{}  {}$ {}: {output}",
                    self.time,
                    Escaped(node),
                    Escaped(command)
                )
            }
            What::Expectation {
                name,
                passed,
                detail,
                ..
            } => {
                format!(
                    "expect {}: {name} ({detail})",
                    if *passed { "PASS" } else { "FAIL" }
                )
            }
        };
        format!("{}  {}", self.time, Escaped(&body))
    }
}

/// How long a sync took under `kubeProxy.syncCost: modelled` (JSON: `took` of a `sync`
/// event, in nanoseconds).
#[derive(Debug, Clone, Copy, Serialize, PartialEq, Eq)]
pub struct SyncTook {
    /// The restore (`iptables-restore` / `nft -f`): the rules went in at its end, the
    /// instant of the event.
    pub restore_ns: u64,
    /// The conntrack cleanup after it; the next sync starts no earlier than its end.
    pub cleanup_ns: u64,
}

impl SyncTook {
    /// `, sync took 2.3 s (modelled: restore 2.1 s, conntrack cleanup 200 ms)`.
    fn describe(&self) -> String {
        let total = self.restore_ns + self.cleanup_ns;
        if self.cleanup_ns == 0 {
            return format!(", sync took {} (modelled)", human_ns(total));
        }
        format!(
            ", sync took {} (modelled: restore {}, conntrack cleanup {})",
            human_ns(total),
            human_ns(self.restore_ns),
            human_ns(self.cleanup_ns)
        )
    }
}

/// `2.3 s`, `27 ms`, `0.4 ms`.
fn human_ns(ns: u64) -> String {
    if ns >= 1_000_000_000 {
        format!("{:.1} s", ns as f64 / 1e9)
    } else if ns >= 1_000_000 {
        format!("{} ms", (ns + 500_000) / 1_000_000)
    } else {
        format!("{:.1} ms", ns as f64 / 1e6)
    }
}

/// `serde`'s `skip_serializing_if` for a flag absent from the JSON unless set.
fn is_false(b: &bool) -> bool {
    !*b
}

/// How the timeline names an error's protocol.
fn icmp_name(icmpv6: bool) -> &'static str {
    if icmpv6 {
        "ICMPv6"
    } else {
        "ICMP"
    }
}
