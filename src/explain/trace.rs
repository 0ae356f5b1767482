//! `nfsim trace`: one new packet through the node, rule by rule.

use super::branches::{self, BranchReport};
use super::{ExplainError, NodeSpec};
use serde::Serialize;
use sim_conntrack::Manip;
use sim_core::{Packet, SimTime};
use sim_netfilter::netns::{Egress, Fate, Ingress, Netns, ProcessResult, Step};
use sim_netfilter::{Hook, StatDraw, Table, Target, TraceEvent};
use std::fmt::Write as _;
use std::net::IpAddr;

/// What to trace.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TraceOptions {
    /// The packet comes from a process of the node (OUTPUT) rather than from outside.
    pub local: bool,
    /// Follow every `statistic` branch (see [`super::branches`]).
    pub all_branches: bool,
    /// The instant the packet arrives (the namespace's conntrack entries are relative to it).
    pub at: SimTime,
}

/// How a packet's journey ended, and what it looked like at the end. Two branches with equal
/// outcomes are the same outcome.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize)]
pub struct Outcome {
    /// `transmitted`, `delivered`, `dropped` or `rejected`.
    pub verdict: String,
    /// The trace's last line: where it went or why it stopped, with the packet as it left.
    pub detail: String,
    /// The packet as it left the node or reached the local socket (`None` if it did not).
    pub final_packet: Option<String>,
    /// The interface it left by (transmitted only).
    pub interface: Option<String>,
    /// The next hop (transmitted only).
    pub next_hop: Option<String>,
    /// `original -> translated` destination, when DNAT (or REDIRECT) changed it.
    pub dnat: Option<String>,
    /// `original -> translated` source, when SNAT or MASQUERADE changed it.
    pub snat: Option<String>,
    /// Whether POSTROUTING masqueraded it (a MASQUERADE rule set up the source binding).
    pub masqueraded: bool,
    /// Whether a rule marked it for masquerading: set kube-proxy's masquerade bit 0x4000
    /// (`KUBE-MARK-MASQ`'s `--or-mark 0x4000`, or a rule of the nftables proxier's
    /// `mark-for-masquerade` chain), whether or not it was masqueraded in the end.
    pub marked_for_masquerade: bool,
}

/// One step of the trace, for JSON: `kind` says which, the other fields depend on it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum StepJson {
    /// A hook starts.
    Hook {
        /// `PREROUTING`, …
        hook: String,
    },
    /// What conntrack made of the packet.
    Conntrack {
        /// `NEW`, `ESTABLISHED`, `INVALID (…)`, …
        state: String,
        /// The entry as `conntrack -L` prints it: for an entry found in the table, as it was
        /// found, before this packet refreshed it.
        entry: Option<String>,
        /// Whether the entry was in the table before this packet (its NAT applies; the nat
        /// rules are not consulted).
        found: bool,
        /// For a found entry, the entry as this packet left it (timeout refreshed, status
        /// bits and TCP state updated).
        #[serde(skip_serializing_if = "Option::is_none")]
        after: Option<String>,
        /// For a SYN that reopened a closed connection: the entry found for its tuple (TCP
        /// `TIME_WAIT` or `CLOSE`) as `conntrack -L` showed it, destroyed before the packet
        /// made a new entry through the rules (`nf_conntrack_tcp_packet`, `-NF_REPEAT`).
        #[serde(skip_serializing_if = "Option::is_none")]
        reopened: Option<String>,
    },
    /// A table's built-in chain starts.
    Enter {
        /// Table.
        table: String,
        /// Hook.
        hook: String,
        /// The packet as the table sees it.
        packet: String,
        /// The ctstate rules see.
        ct: String,
    },
    /// Nothing evaluated in this table at this hook.
    Skip {
        /// Table.
        table: String,
        /// Hook.
        hook: String,
        /// Why.
        reason: String,
    },
    /// A rule was evaluated.
    Rule {
        /// Table.
        table: String,
        /// Chain.
        chain: String,
        /// 1-based rule number in the chain.
        num: usize,
        /// Whether all its matches matched.
        matched: bool,
        /// Its `statistic` draws.
        draws: Vec<DrawJson>,
        /// The rule as iptables-save prints it, without `-A CHAIN`.
        spec: String,
    },
    /// Back from a user chain.
    Return {
        /// Table.
        table: String,
        /// The chain left.
        from: String,
        /// The chain resumed.
        to: String,
    },
    /// A built-in chain's policy applied.
    Policy {
        /// Table.
        table: String,
        /// Chain.
        chain: String,
        /// `ACCEPT` or `DROP`.
        policy: String,
    },
    /// A LOG target fired.
    Log {
        /// `--log-prefix`.
        prefix: String,
        /// `--log-level`.
        level: u8,
    },
    /// A TRACE target fired.
    TraceTarget,
    /// The packet mark changed.
    Mark {
        /// Old mark.
        from: u32,
        /// New mark.
        to: u32,
    },
    /// The conntrack mark changed.
    CtMark {
        /// Old mark.
        from: u32,
        /// New mark.
        to: u32,
    },
    /// A table's verdict.
    Verdict {
        /// Table.
        table: String,
        /// Hook.
        hook: String,
        /// `ACCEPT`, `DROP`, with NAT requests.
        verdict: String,
    },
    /// A NAT binding was set up for the connection.
    NatSetup {
        /// Hook.
        hook: String,
        /// `SNAT` or `DNAT`.
        manip: String,
        /// What the rules asked for, or the null binding.
        what: String,
        /// The entry's reply tuple afterwards.
        reply: String,
    },
    /// The packet was rewritten from its conntrack entry.
    Rewrite {
        /// Hook.
        hook: String,
        /// Before.
        before: String,
        /// After.
        after: String,
    },
    /// The routing decision.
    Route {
        /// What was decided.
        decision: String,
    },
    /// A bridge's or `br_netfilter`'s decision.
    Bridge {
        /// What was decided, in the kernel's words.
        text: String,
    },
    /// What IPVS did with the packet (the connection found, the real server scheduled).
    Ipvs {
        /// In words.
        text: String,
    },
    /// A VXLAN device's encapsulation or decapsulation step.
    Vxlan {
        /// What was done, in the kernel's words.
        text: String,
    },
    /// The entry was confirmed.
    Confirm {
        /// The entry as `conntrack -L` prints it.
        entry: String,
    },
    /// How it ended (or, after the first, a packet the kernel generated).
    Fate {
        /// The text.
        text: String,
    },
    /// A step through an nftables base chain, in nft's words (the chain entered, each rule
    /// as `nft list` prints it with MATCH / no match, returns, policy, verdict).
    Nft {
        /// The text.
        text: String,
    },
}

/// A `statistic` draw, for JSON.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
#[serde(tag = "mode", rename_all = "snake_case")]
pub enum DrawJson {
    /// `--mode random`: matched when `draw < threshold`.
    Random {
        /// The 31-bit draw.
        draw: u32,
        /// `round(p × 2^31)`.
        threshold: u32,
    },
    /// `--mode nth`.
    Nth {
        /// This packet's index modulo `every`.
        index: u32,
        /// `--every`.
        every: u32,
        /// `--packet`.
        packet: u32,
    },
}

/// Everything `nfsim trace` reports about one packet.
#[derive(Clone, Debug, Serialize)]
pub struct TraceReport {
    /// The packet as given.
    pub packet: String,
    /// Where it entered: `eth0`, `cni0` or `local`.
    pub ingress: String,
    /// Why it entered there.
    pub ingress_reason: String,
    /// The seed of the namespace's random streams.
    pub seed: u64,
    /// The node's interfaces (`eth0 172.18.0.2/24`).
    pub interfaces: Vec<String>,
    /// The node's routes (`default via 172.18.0.1 dev eth0`).
    pub routes: Vec<String>,
    /// Every step, in order.
    pub steps: Vec<StepJson>,
    /// How it ended.
    pub outcome: Outcome,
    /// Its conntrack entry afterwards, as `conntrack -L` prints it.
    pub conntrack: Option<String>,
    /// Every reachable outcome of the statistic matches (with `--all-branches`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branches: Option<BranchReport>,
    /// What the node's starting state was made of (`--conntrack`: how many entries, which
    /// age was assumed), one line each.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
    /// The trace as text.
    #[serde(skip)]
    trace_text: String,
}

/// One run of a packet through a namespace, analysed.
pub(crate) struct Run {
    pub result: ProcessResult,
    pub outcome: Outcome,
}

/// Pushes `pkt` through `ns` at `now` with a trace, and analyses what happened.
pub(crate) fn run_once(ns: &mut Netns, pkt: Packet, ingress: Ingress, now: SimTime) -> Run {
    // A packet from a station on a bridge port enters as its frame (the bridge decides).
    let frame = match ingress {
        Ingress::Interface(port) => ns.station_frame(port, &pkt).map(|f| (f, port)),
        Ingress::Local => None,
    };
    // A pod behind a proxy-ARP link (Calico's, the AWS VPC CNI's) sends once the host
    // answers its ARP for its gateway 169.254.1.1.
    let arp = match ingress {
        Ingress::Interface(dev) if ns.proxy_arp(dev) && pkt.is_ipv4() => {
            let gw = sim_netfilter::netns::LINK_LOCAL_GATEWAY;
            let a = ns.arp_answer(dev, gw);
            Some((
                a,
                format!("ARP who-has {gw} (the pod's gateway) on {dev}: {a}"),
            ))
        }
        _ => None,
    };
    let mut result = match (frame, &arp) {
        (_, Some((a, text))) if !a.answered() => unanswered_arp(text),
        (Some((Ok(f), port)), _) => ns.process_frame_traced(now, f, port),
        (Some((Err(to), _)), _) => unresolved_result(to),
        (None, _) => ns.process_traced(now, pkt, ingress),
    };
    if let (Some((a, text)), Some(t)) = (&arp, result.trace.as_mut()) {
        if a.answered() {
            t.steps.insert(0, Step::Route(text.clone()));
        }
    }
    let steps = result
        .trace
        .as_ref()
        .map(|t| t.steps.as_slice())
        .unwrap_or(&[]);
    let outcome = outcome_of(ns, &pkt, &result, steps);
    Run { result, outcome }
}

/// A pod's ARP for its gateway unanswered (`text` says why): nothing sent.
fn unanswered_arp(text: &str) -> ProcessResult {
    let gw = IpAddr::V4(sim_netfilter::netns::LINK_LOCAL_GATEWAY);
    let cause = sim_netfilter::netns::DropCause::NeighbourUnresolved(gw);
    let steps = vec![
        Step::Route(text.to_string()),
        Step::Fate(format!("dropped: {cause}")),
    ];
    ProcessResult {
        out: Vec::new(),
        fate: sim_netfilter::netns::Fate::Dropped(cause),
        entry: None,
        trace: Some(sim_netfilter::netns::PacketTrace { steps }),
    }
}

/// What a station's unanswered ARP leaves: nothing sent.
fn unresolved_result(to: IpAddr) -> ProcessResult {
    let cause = sim_netfilter::netns::DropCause::NeighbourUnresolved(to);
    let steps = vec![
        Step::Bridge(format!(
            "the sender's ARP for {to} is unanswered: nothing is sent"
        )),
        Step::Fate(format!("dropped: {cause}")),
    ];
    ProcessResult {
        out: Vec::new(),
        fate: sim_netfilter::netns::Fate::Dropped(cause),
        entry: None,
        trace: Some(sim_netfilter::netns::PacketTrace { steps }),
    }
}

fn endpoint(a: IpAddr, port: Option<u16>) -> String {
    match (a, port) {
        (IpAddr::V6(v), Some(p)) => format!("[{v}]:{p}"),
        (a, Some(p)) => format!("{a}:{p}"),
        (a, None) => a.to_string(),
    }
}

pub(crate) fn outcome_of(
    ns: &Netns,
    original: &Packet,
    r: &ProcessResult,
    steps: &[Step],
) -> Outcome {
    let detail = steps
        .iter()
        .find_map(|s| match s {
            Step::Fate(t) => Some(t.clone()),
            _ => None,
        })
        .unwrap_or_default();
    let verdict = match r.fate {
        Fate::Transmitted => "transmitted",
        Fate::Delivered => "delivered",
        Fate::Dropped(_) => "dropped",
        Fate::Rejected { .. } | Fate::RejectedNft { .. } => "rejected",
    };
    let (final_pkt, interface, next_hop) = match (&r.fate, r.out.first()) {
        (
            Fate::Transmitted,
            Some(Egress::Transmit {
                dev,
                next_hop,
                packet,
            }),
        ) => (
            Some(*packet),
            Some(dev.to_string()),
            Some(next_hop.to_string()),
        ),
        (Fate::Delivered, Some(Egress::LocalDeliver { packet })) => (Some(*packet), None, None),
        _ => (None, None, None),
    };
    // An encapsulated packet's addresses are compared by its inner packet (the outer one
    // is the node's own, network.cni: flannel-vxlan).
    let inner = final_pkt.and_then(|p| ns.vxlan_sent(&p).map(|w| w.inner));
    let (dnat, snat) = match inner.or(final_pkt) {
        Some(p) => {
            let d = (p.dst != original.dst || p.dport() != original.dport()).then(|| {
                format!(
                    "{} -> {}",
                    endpoint(original.dst, original.dport()),
                    endpoint(p.dst, p.dport())
                )
            });
            let s = (p.src != original.src || p.sport() != original.sport()).then(|| {
                format!(
                    "{} -> {}",
                    endpoint(original.src, original.sport()),
                    endpoint(p.src, p.sport())
                )
            });
            (d, s)
        }
        None => (None, None),
    };
    Outcome {
        verdict: verdict.to_string(),
        detail,
        final_packet: final_pkt.map(|p| p.to_string()),
        interface,
        next_hop,
        dnat,
        snat,
        masqueraded: masqueraded(ns, steps),
        marked_for_masquerade: marked_for_masquerade(steps),
    }
}

/// kube-proxy's masquerade mark (`--iptables-masquerade-bit`, 14 by default; the nftables
/// proxier uses the same bit).
const KUBE_MASQ_MARK: u32 = 0x4000;

/// Whether a rule set the masquerade bit before the packet's fate (packets the kernel
/// generated for it do not count).
fn marked_for_masquerade(steps: &[Step]) -> bool {
    steps
        .iter()
        .take_while(|s| !matches!(s, Step::Fate(_)))
        .any(|s| match s {
            Step::Rules(TraceEvent::Mark { from, to }) => {
                to & KUBE_MASQ_MARK != 0 && from & KUBE_MASQ_MARK == 0
            }
            Step::Nft(sim_netfilter::nft::NftStep::Rule {
                chain,
                matched: true,
                ..
            }) => chain == "mark-for-masquerade",
            _ => false,
        })
}

/// Whether a masquerade rule in nat POSTROUTING set up the connection's source binding: the
/// rule that matched last in that walk has a MASQUERADE target (iptables) or a `masquerade`
/// statement (nftables: a base chain of `type nat hook postrouting`), and a source binding
/// followed.
fn masqueraded(ns: &Netns, steps: &[Step]) -> bool {
    use sim_netfilter::nft::{Family, NftStep, Stmt};
    let mut at: Option<(Table, Hook)> = None;
    // The nftables table of the nat postrouting base chain being walked.
    let mut nft_at: Option<(Family, String)> = None;
    let mut masq_rule = false;
    for s in steps {
        match s {
            // Packets the kernel generated for this one (after the first fate) do not count.
            Step::Fate(_) => break,
            Step::Nft(NftStep::Enter { table, decl, .. }) => {
                at = None;
                nft_at = None;
                if decl.starts_with("type nat hook postrouting ") {
                    if let Some((fam, name)) = table.split_once(' ') {
                        nft_at = [Family::Ip, Family::Ip6, Family::Inet]
                            .into_iter()
                            .find(|f| f.name() == fam)
                            .map(|f| (f, name.to_string()));
                    }
                }
            }
            Step::Nft(NftStep::Rule {
                chain,
                num,
                matched: true,
                ..
            }) => {
                let stmts = nft_at.as_ref().and_then(|(f, t)| {
                    let r = ns
                        .nft()
                        .table(*f, t)?
                        .chains
                        .get(chain)?
                        .rules
                        .get(num.wrapping_sub(1))?;
                    Some(&r.stmts)
                });
                let nat = stmts.and_then(|st| {
                    st.iter().find_map(|x| match x {
                        Stmt::Masquerade { .. } => Some(true),
                        Stmt::Nat { .. } => Some(false),
                        _ => None,
                    })
                });
                if let Some(m) = nat {
                    masq_rule = m;
                }
            }
            Step::Rules(TraceEvent::Enter { table, hook, .. }) => {
                nft_at = None;
                at = Some((*table, *hook))
            }
            Step::Rules(TraceEvent::Rule {
                table,
                chain,
                num,
                matched: true,
                ..
            }) if at == Some((Table::Nat, Hook::PostRouting)) => {
                let target = ns
                    .ruleset()
                    .rules(*table, chain)
                    .and_then(|rs| rs.get(num.wrapping_sub(1)))
                    .map(|r| &r.target);
                if let Some(t) = target {
                    if t.is_terminal_nat() {
                        masq_rule = matches!(t, Target::Masquerade(_));
                    }
                }
            }
            Step::NatSetup {
                hook: Hook::PostRouting,
                manip: Manip::Src,
                ..
            } => return masq_rule,
            _ => {}
        }
    }
    false
}

/// Targets that end the nat table's walk with a mapping.
trait TerminalNat {
    fn is_terminal_nat(&self) -> bool;
}

impl TerminalNat for Target {
    fn is_terminal_nat(&self) -> bool {
        matches!(
            self,
            Target::Masquerade(_)
                | Target::Snat(_)
                | Target::Dnat(_)
                | Target::Redirect(_)
                | Target::Accept
        )
    }
}

fn step_json(s: &Step) -> StepJson {
    let t = |t: &Table| t.name().to_string();
    let h = |h: &Hook| h.chain_name().to_string();
    match s {
        Step::Hook(hook) => StepJson::Hook { hook: h(hook) },
        Step::Conntrack { state, entry } => StepJson::Conntrack {
            state: state.clone(),
            entry: entry.clone(),
            found: false,
            after: None,
            reopened: None,
        },
        Step::Rules(e) => match e {
            TraceEvent::Enter {
                table,
                hook,
                packet,
                ct,
            } => StepJson::Enter {
                table: t(table),
                hook: h(hook),
                packet: packet.clone(),
                ct: ct.clone(),
            },
            TraceEvent::Skip {
                table,
                hook,
                reason,
            } => StepJson::Skip {
                table: t(table),
                hook: h(hook),
                reason: reason.clone(),
            },
            TraceEvent::Rule {
                table,
                chain,
                num,
                matched,
                draws,
                spec,
            } => StepJson::Rule {
                table: t(table),
                chain: chain.clone(),
                num: *num,
                matched: *matched,
                draws: draws
                    .iter()
                    .map(|d| match *d {
                        StatDraw::Random { draw, threshold } => {
                            DrawJson::Random { draw, threshold }
                        }
                        StatDraw::Nth {
                            index,
                            every,
                            packet,
                        } => DrawJson::Nth {
                            index,
                            every,
                            packet,
                        },
                    })
                    .collect(),
                spec: spec.clone(),
            },
            TraceEvent::Return { table, from, to } => StepJson::Return {
                table: t(table),
                from: from.clone(),
                to: to.clone(),
            },
            TraceEvent::Policy {
                table,
                chain,
                policy,
            } => StepJson::Policy {
                table: t(table),
                chain: chain.clone(),
                policy: policy.name().to_string(),
            },
            TraceEvent::Log { prefix, level } => StepJson::Log {
                prefix: prefix.clone(),
                level: *level,
            },
            TraceEvent::TraceTarget => StepJson::TraceTarget,
            TraceEvent::Mark { from, to } => StepJson::Mark {
                from: *from,
                to: *to,
            },
            TraceEvent::CtMark { from, to } => StepJson::CtMark {
                from: *from,
                to: *to,
            },
            TraceEvent::Verdict {
                table,
                hook,
                verdict,
            } => StepJson::Verdict {
                table: t(table),
                hook: h(hook),
                verdict: verdict.clone(),
            },
        },
        Step::NatSetup {
            hook,
            manip,
            what,
            reply,
        } => StepJson::NatSetup {
            hook: h(hook),
            manip: match manip {
                Manip::Src => "SNAT",
                Manip::Dst => "DNAT",
            }
            .to_string(),
            what: what.clone(),
            reply: reply.clone(),
        },
        Step::Rewrite {
            hook,
            before,
            after,
        } => StepJson::Rewrite {
            hook: h(hook),
            before: before.clone(),
            after: after.clone(),
        },
        Step::Route(r) => StepJson::Route {
            decision: r.clone(),
        },
        Step::Bridge(t) => StepJson::Bridge { text: t.clone() },
        Step::Ipvs(t) => StepJson::Ipvs { text: t.clone() },
        Step::Vxlan(t) => StepJson::Vxlan { text: t.clone() },
        Step::Confirm(e) => StepJson::Confirm { entry: e.clone() },
        Step::Fate(f) => StepJson::Fate { text: f.clone() },
        Step::Nft(e) => StepJson::Nft {
            text: e.to_string().trim().to_string(),
        },
    }
}

/// Steps that say nothing: a rewrite that changed nothing, a table the node does not have.
fn is_noop(s: &Step) -> bool {
    match s {
        Step::Rewrite { before, after, .. } => before == after,
        Step::Rules(TraceEvent::Skip { reason, .. }) => reason == "table does not exist",
        _ => false,
    }
}

/// Whether a conntrack step found an entry already in the table (any state but NEW).
fn entry_found(s: &Step) -> bool {
    matches!(s, Step::Conntrack { state, entry: Some(_) } if !state.starts_with("NEW") && !state.starts_with("INVALID") && state != "UNTRACKED")
}

/// The entry as `nf_conntrack_in` finds it for `pkt` at `now` (by either tuple), before the
/// packet's protocol handler refreshes it: what `conntrack -L` showed just before.
fn entry_before(base: &Netns, pkt: &Packet, now: SimTime) -> Option<sim_conntrack::CtEntry> {
    base.conntrack()
        .find(now, &sim_conntrack::Tuple::from_packet(pkt))
        .map(|(e, _)| e)
}

/// What this packet changed in a found entry: its timeout (refreshed by the protocol
/// handler, `nf_ct_refresh_acct`), the status bits it set, its TCP state.
fn refresh_text(
    before: &sim_conntrack::CtEntry,
    after: &sim_conntrack::CtEntry,
    now: SimTime,
) -> String {
    use sim_conntrack::Status;
    let mut s = format!(
        "this packet refreshes it: {} s left -> {} s",
        before.expiry.secs_left(now),
        after.expiry.secs_left(now)
    );
    if after.status.contains(Status::SEEN_REPLY) && !before.status.contains(Status::SEEN_REPLY) {
        s.push_str(", no longer [UNREPLIED]");
    }
    if after.status.contains(Status::ASSURED) && !before.status.contains(Status::ASSURED) {
        s.push_str(", now [ASSURED]");
    }
    if before.proto() == sim_core::packet::IPPROTO_TCP && before.tcp_state != after.tcp_state {
        if let (Some(a), Some(b)) = (before.tcp_state, after.tcp_state) {
            s.push_str(&format!(", {} -> {}", a.name(), b.name()));
        }
    }
    s
}

/// One step's line. An entry found in the table is shown as it was found (as `conntrack -L`
/// showed it just before), with the NAT it carries and what this packet changed in it (the
/// kernel refreshes it in the same `nf_conntrack_in` call that finds it).
fn step_text(
    s: &Step,
    entry: Option<&sim_conntrack::CtEntry>,
    before: Option<&sim_conntrack::CtEntry>,
    now: SimTime,
) -> String {
    if let (
        true,
        Step::Conntrack {
            state,
            entry: Some(line),
        },
    ) = (entry_found(s), s)
    {
        let found_line = before.map_or_else(|| line.clone(), |b| b.list_line(now).to_string());
        let refreshed = match (before, entry) {
            (Some(b), Some(a)) => format!("\n    {}", refresh_text(b, a, now)),
            _ => String::new(),
        };
        let mut nat = Vec::new();
        if let Some(e) = entry {
            if e.is_dst_nat() {
                nat.push(format!(
                    "DNAT from the entry ({} -> {})",
                    endpoint(e.orig.dst, ports(e).then_some(e.orig.dport)),
                    endpoint(e.reply.src, ports(e).then_some(e.reply.sport))
                ));
            }
            if e.is_src_nat() {
                nat.push(format!(
                    "SNAT from the entry ({} -> {})",
                    endpoint(e.orig.src, ports(e).then_some(e.orig.sport)),
                    endpoint(e.reply.dst, ports(e).then_some(e.reply.dport))
                ));
            }
        }
        if nat.is_empty() {
            nat.push("no NAT".to_string());
        }
        return format!(
            "  conntrack: entry found: {found_line}\n    {state}, {}, nat rules not consulted{refreshed}",
            nat.join(", ")
        );
    }
    if let Some(b) = reopened(s, before, entry) {
        return format!(
            "{s}\n    reopened: the entry found for this tuple, {}, was destroyed first (a SYN reopens a closed connection: nf_conntrack_tcp_packet, -NF_REPEAT), so the rules decide anew",
            b.list_line(now)
        );
    }
    s.to_string()
}

/// The entry a SYN found for its tuple and destroyed before making a new one (a TCP
/// `TIME_WAIT` or `CLOSE` entry reopened), for the conntrack step of a new entry.
fn reopened<'a>(
    s: &Step,
    before: Option<&'a sim_conntrack::CtEntry>,
    entry: Option<&sim_conntrack::CtEntry>,
) -> Option<&'a sim_conntrack::CtEntry> {
    use sim_conntrack::TcpState;
    match (s, before, entry) {
        (Step::Conntrack { state, .. }, Some(b), Some(a))
            if state.starts_with("NEW")
                && b.id != a.id
                && matches!(b.tcp_state, Some(TcpState::TimeWait | TcpState::Close)) =>
        {
            Some(b)
        }
        _ => None,
    }
}

fn ports(e: &sim_conntrack::CtEntry) -> bool {
    sim_conntrack::tuple::has_ports(e.proto())
}

/// Traces `pkt` through a copy of `base` (the node's namespace, rules loaded) and, with
/// [`TraceOptions::all_branches`], follows every statistic branch.
///
/// With `local`, the packet's source must be an address of the node: a process can only send
/// from its own addresses (`bind` fails with `EADDRNOTAVAIL` otherwise).
pub fn trace(
    node: &NodeSpec,
    base: &Netns,
    pkt: Packet,
    opts: &TraceOptions,
) -> Result<TraceReport, ExplainError> {
    if opts.local && !(base.routing().is_local(pkt.src) || pkt.src.is_loopback()) {
        let (ifaces, _) = node.describe(base);
        return Err(ExplainError::BadFlag {
            flag: "--local",
            value: pkt.to_string(),
            expected: format!(
                "a source address of the node (a process can only send from its own addresses; the node has {})",
                ifaces.join(", ")
            ),
        });
    }
    let (ingress, reason) = node.ingress_for(&pkt, opts.local);
    trace_in(base, pkt, ingress, reason, node.seed, opts)
}

/// Why `ns` cannot tell an IPv6 packet's fate, or `None` when it can: the node must have
/// been given IPv6 rules (an ip6tables table, or an nft `ip6` / `inet` table: with none,
/// nfsim would run the packet through an empty ip6tables, which a real node is unlikely to
/// have) and an IPv6 address besides `::1` (else it has no IPv6 addressing to route by).
pub fn ipv6_unmodelled(ns: &Netns) -> Option<&'static str> {
    let ip6tables = [Table::Raw, Table::Mangle, Table::Nat, Table::Filter]
        .into_iter()
        .any(|t| ns.ruleset_of(sim_netfilter::Family::Ipv6).has_table(t));
    let nft6 = ns
        .nft()
        .table_names()
        .iter()
        .any(|n| n.starts_with("ip6 ") || n.starts_with("inet "));
    if !ip6tables && !nft6 {
        return Some(
            "the node was given no IPv6 rules (no ip6tables table, no ip6 or inet nft table)",
        );
    }
    let v6_addr = ns.routing().interfaces().iter().any(|i| {
        i.addrs
            .iter()
            .any(|(a, _)| matches!(a, IpAddr::V6(v) if !v.is_loopback()))
    });
    if !v6_addr {
        return Some("the node has no IPv6 address but ::1 (give its `ip -j addr` with --interfaces, its `ip -6 -j route` with --routes)");
    }
    None
}

/// Traces `pkt` entering `base` by `ingress` (`reason` says why there), read-only: the
/// packet goes through a copy. For a namespace built elsewhere (a scenario's node at an
/// instant).
pub fn trace_in(
    base: &Netns,
    pkt: Packet,
    ingress: Ingress,
    reason: String,
    seed: u64,
    opts: &TraceOptions,
) -> Result<TraceReport, ExplainError> {
    if !pkt.is_ipv4() {
        if let Some(why) = ipv6_unmodelled(base) {
            return Err(ExplainError::BadFlag {
                flag: "--packet",
                value: pkt.to_string(),
                expected: format!("an IPv4 packet: {why}, so an IPv6 packet's path would be wrong"),
            });
        }
    }
    let mut ns = base.clone();
    let before = entry_before(base, &pkt, opts.at);
    let run = run_once(&mut ns, pkt, ingress, opts.at);
    let steps: &[Step] = run
        .result
        .trace
        .as_ref()
        .map(|t| t.steps.as_slice())
        .unwrap_or(&[]);
    let (interfaces, routes) = super::node::describe(base);
    let shown: Vec<&Step> = steps.iter().filter(|s| !is_noop(s)).collect();
    let branches = if opts.all_branches {
        Some(branches::explore(base, pkt, ingress, opts.at)?)
    } else {
        None
    };
    Ok(TraceReport {
        packet: pkt.to_string(),
        ingress: match ingress {
            Ingress::Local => "local".to_string(),
            Ingress::Interface(d) => d.to_string(),
        },
        ingress_reason: reason,
        seed,
        interfaces,
        routes,
        steps: shown
            .iter()
            .map(|s| {
                let mut j = step_json(s);
                if let StepJson::Conntrack {
                    found,
                    entry,
                    after,
                    reopened: gone,
                    ..
                } = &mut j
                {
                    *gone = reopened(s, before.as_ref(), run.result.entry.as_ref())
                        .map(|b| b.list_line(opts.at).to_string());
                    *found = entry_found(s);
                    if *found {
                        if let Some(b) = &before {
                            // As found; `after`: as this packet left it.
                            *after = entry.take();
                            *entry = Some(b.list_line(opts.at).to_string());
                        }
                    }
                }
                j
            })
            .collect(),
        outcome: run.outcome.clone(),
        conntrack: run
            .result
            .entry
            .as_ref()
            .map(|e| e.list_line(opts.at).to_string()),
        branches,
        notes: Vec::new(),
        trace_text: shown
            .iter()
            .map(|s| step_text(s, run.result.entry.as_ref(), before.as_ref(), opts.at) + "\n")
            .collect(),
    })
}

impl Outcome {
    /// `DNAT 10.96.0.10:53 -> 10.244.1.7:53; masqueraded 10.244.2.9:40000 -> 10.244.0.1:…`.
    pub fn nat_summary(&self) -> String {
        let mut parts = Vec::new();
        match &self.dnat {
            Some(d) => parts.push(format!("DNAT {d}")),
            None => parts.push("no DNAT".to_string()),
        }
        match (&self.snat, self.masqueraded) {
            (Some(s), true) => parts.push(format!("masqueraded {s}")),
            (None, true) => parts.push("masqueraded (source unchanged)".to_string()),
            (Some(s), false) => parts.push(format!("source NAT {s}, not masqueraded")),
            (None, false) => parts.push("not masqueraded".to_string()),
        }
        parts.join("; ")
    }
}

impl TraceReport {
    /// The report for people.
    pub fn text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "packet:  {}", self.packet);
        let _ = writeln!(s, "node:    {}", self.interfaces.join(", "));
        let _ = writeln!(s, "routes:  {}", self.routes.join("; "));
        let _ = writeln!(s, "enters:  {}", self.ingress_reason);
        let _ = writeln!(s, "seed:    {}", self.seed);
        for n in &self.notes {
            let _ = writeln!(s, "state:   {n}");
        }
        s.push('\n');
        s.push_str(&self.trace_text);
        s.push('\n');
        let o = &self.outcome;
        let _ = writeln!(s, "verdict:      {}", o.verdict);
        let _ = writeln!(s, "fate:         {}", o.detail);
        let _ = writeln!(
            s,
            "final tuple:  {}",
            o.final_packet
                .as_deref()
                .unwrap_or("(none: the packet did not leave)")
        );
        if let (Some(i), Some(n)) = (&o.interface, &o.next_hop) {
            let _ = writeln!(s, "leaves by:    {i} to {n}");
        }
        let _ = writeln!(s, "DNAT:         {}", o.dnat.as_deref().unwrap_or("none"));
        let _ = writeln!(
            s,
            "masqueraded:  {}",
            match (o.masqueraded, &o.snat) {
                (true, Some(sn)) => format!("yes, {sn}"),
                (true, None) => "yes (source unchanged)".to_string(),
                (false, Some(sn)) => format!("no (source NAT {sn})"),
                (false, None) => "no".to_string(),
            }
        );
        let _ = writeln!(
            s,
            "conntrack:    {}",
            self.conntrack.as_deref().unwrap_or("(no entry)")
        );
        if let Some(b) = &self.branches {
            s.push('\n');
            s.push_str(&b.text());
        }
        s
    }

    /// The report as one JSON object (stable field names; see the field docs).
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_else(|e| {
            // Serialising plain strings and numbers cannot fail; say so if it ever does.
            format!("{{\"error\": {:?}}}", e.to_string())
        })
    }
}
