//! The record of how a packet went through the rules: every rule evaluated (table, chain,
//! rule number, matched or not, the random draw of a `statistic` match), jumps and returns,
//! policies, LOG/TRACE hits, NAT requested and the verdict. Its `Display` is the text
//! `nfsim trace` prints; the events are plain data for JSON.

use std::fmt;

use crate::types::{Hook, Policy, Table};

/// What a `statistic` match drew.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatDraw {
    /// `--mode random`: `draw = random_u32 & 0x7fffffff`, matched when `draw < threshold`.
    Random {
        /// The 31-bit draw.
        draw: u32,
        /// The stored probability, `round(p × 2^31)`.
        threshold: u32,
    },
    /// `--mode nth`: the rule's counter before this packet.
    Nth {
        /// This packet's 0-based index modulo `every`.
        index: u32,
        /// n.
        every: u32,
        /// p.
        packet: u32,
    },
}

/// One step of a trace.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TraceEvent {
    /// A table's built-in chain starts.
    Enter {
        /// Table.
        table: Table,
        /// Hook.
        hook: Hook,
        /// The packet as text.
        packet: String,
        /// The conntrack state seen by rules (`NEW`, `ESTABLISHED`, `INVALID`, …).
        ct: String,
    },
    /// The table has no chain at this hook, or the packet is not IPv4: nothing evaluated.
    Skip {
        /// Table.
        table: Table,
        /// Hook.
        hook: Hook,
        /// Why.
        reason: String,
    },
    /// A rule was evaluated.
    Rule {
        /// Table.
        table: Table,
        /// Chain.
        chain: String,
        /// 1-based rule number.
        num: usize,
        /// Whether all its matches matched.
        matched: bool,
        /// Draws of its `statistic` matches.
        draws: Vec<StatDraw>,
        /// The rule as iptables-save prints it (without `-A CHAIN`).
        spec: String,
    },
    /// The end of a user chain or a RETURN: back to the calling chain.
    Return {
        /// Table.
        table: Table,
        /// The chain left.
        from: String,
        /// The chain resumed.
        to: String,
    },
    /// The built-in chain's policy applied.
    Policy {
        /// Table.
        table: Table,
        /// Chain.
        chain: String,
        /// Policy.
        policy: Policy,
    },
    /// A LOG target fired.
    Log {
        /// `--log-prefix`.
        prefix: String,
        /// `--log-level`.
        level: u8,
    },
    /// A TRACE target fired (the kernel would now log every rule for this packet).
    TraceTarget,
    /// The packet mark changed (MARK, CONNMARK --restore-mark).
    Mark {
        /// Old mark.
        from: u32,
        /// New mark.
        to: u32,
    },
    /// The conntrack mark changed (CONNMARK).
    CtMark {
        /// Old mark.
        from: u32,
        /// New mark.
        to: u32,
    },
    /// The table's verdict.
    Verdict {
        /// Table.
        table: Table,
        /// Hook.
        hook: Hook,
        /// `ACCEPT`, `DROP`, `REJECT …`, with NAT and notrack requests.
        verdict: String,
    },
}

/// The events of one or more hook evaluations, in order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Trace {
    /// The events.
    pub events: Vec<TraceEvent>,
}

impl Trace {
    /// An empty trace.
    pub fn new() -> Trace {
        Trace::default()
    }

    pub(crate) fn push(&mut self, e: TraceEvent) {
        self.events.push(e);
    }

    /// The rules that matched, as (table, chain, rule number).
    pub fn matched_rules(&self) -> Vec<(Table, &str, usize)> {
        self.events
            .iter()
            .filter_map(|e| match e {
                TraceEvent::Rule {
                    table,
                    chain,
                    num,
                    matched: true,
                    ..
                } => Some((*table, chain.as_str(), *num)),
                _ => None,
            })
            .collect()
    }
}

impl fmt::Display for StatDraw {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StatDraw::Random { draw, threshold } => write!(
                f,
                "random 0x{draw:08x} {} 0x{threshold:08x}",
                if draw < threshold { "<" } else { ">=" }
            ),
            StatDraw::Nth {
                index,
                every,
                packet,
            } => write!(f, "nth packet {index} of every {every} (matches {packet})"),
        }
    }
}

impl fmt::Display for TraceEvent {
    /// One line. The rules file's own text (chain names, a rule with its `--comment`) is
    /// escaped ([`sim_core::text::Escaped`]): a comment holding a newline or an escape
    /// sequence cannot forge a trace line or reach the terminal.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        use sim_core::text::Escaped;
        match self {
            TraceEvent::Enter {
                table,
                hook,
                packet,
                ct,
            } => write!(f, "-> {table} {hook}: {packet} ct={ct}"),
            TraceEvent::Skip {
                table,
                hook,
                reason,
            } => write!(f, "   {table} {hook}: {reason}"),
            TraceEvent::Rule {
                table,
                chain,
                num,
                matched,
                draws,
                spec,
            } => {
                write!(
                    f,
                    "   {table} {} #{num} {}",
                    Escaped(chain),
                    if *matched { "MATCH   " } else { "no match" }
                )?;
                for d in draws {
                    write!(f, " [{d}]")?;
                }
                write!(f, "  {}", Escaped(spec))
            }
            TraceEvent::Return { table, from, to } => {
                write!(f, "   {table} {}: return to {}", Escaped(from), Escaped(to))
            }
            TraceEvent::Policy {
                table,
                chain,
                policy,
            } => write!(f, "   {table} {}: policy {}", Escaped(chain), policy.name()),
            TraceEvent::Log { prefix, level } => {
                write!(f, "   LOG level {level} prefix {prefix:?}")
            }
            TraceEvent::TraceTarget => write!(f, "   TRACE"),
            TraceEvent::Mark { from, to } => write!(f, "   mark 0x{from:x} -> 0x{to:x}"),
            TraceEvent::CtMark { from, to } => write!(f, "   ctmark 0x{from:x} -> 0x{to:x}"),
            TraceEvent::Verdict {
                table,
                hook,
                verdict,
            } => write!(f, "<- {table} {hook}: {verdict}"),
        }
    }
}

impl fmt::Display for Trace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for e in &self.events {
            writeln!(f, "{e}")?;
        }
        Ok(())
    }
}
