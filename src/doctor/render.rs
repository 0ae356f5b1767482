//! The text report: what a colleague would say, most urgent first, then the tables behind
//! it (frontends, cleanups, the fix).

use super::Report;
use std::fmt::Write as _;

fn plural(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The report as text.
pub(super) fn text(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "nfsim doctor: {}", r.subject);
    let _ = writeln!(s, "endpoints from {}", r.truth);
    let m = &r.summary;
    let _ = writeln!(
        s,
        "{}, {} to Services: {} ({} kept alive), {}",
        plural(m.entries, "entry", "entries"),
        m.service_entries,
        plural(m.stale, "stale", "stale"),
        m.kept_alive,
        plural(
            m.blackholes,
            "frontend without endpoints",
            "frontends without endpoints"
        )
    );
    if r.findings.is_empty() {
        let _ = writeln!(
            s,
            "\nnothing to report: every entry goes where the rules send it"
        );
    }
    for f in &r.findings {
        let _ = writeln!(s, "\n{} {}: {}", f.severity.word(), f.kind, f.summary);
        for (label, items) in [("why", &f.evidence), ("then", &f.forecast), ("fix", &f.fix)] {
            for (i, e) in items.iter().enumerate() {
                let head = if i == 0 { label } else { "" };
                let _ = writeln!(s, "  {head:<5} {e}");
            }
        }
    }
    if !r.frontends.is_empty() {
        let _ = writeln!(s, "\nfrontends (new flows as the rules send them):");
        for f in &r.frontends {
            let _ = writeln!(
                s,
                "  {}{}: {}, {} stale{}",
                f.frontend,
                f.service
                    .as_deref()
                    .map(|n| format!(" ({n})"))
                    .unwrap_or_default(),
                plural(f.entries, "entry", "entries"),
                f.stale,
                if f.affinity {
                    "; ClientIP affinity: probabilities of a new client"
                } else {
                    ""
                }
            );
            for e in &f.endpoints {
                let _ = writeln!(
                    s,
                    "    -> {:<21} p={:<14} {} live{}{}",
                    e.endpoint,
                    e.probability,
                    e.live_entries,
                    e.slices
                        .as_deref()
                        .map(|x| format!(", {x} in the slices"))
                        .unwrap_or_default(),
                    if e.rule_lines.is_empty() {
                        String::new()
                    } else {
                        format!(
                            " (lines {})",
                            e.rule_lines
                                .iter()
                                .map(|l| l.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        )
                    }
                );
            }
            if f.no_endpoint_p > 0.0 {
                let _ = writeln!(
                    s,
                    "    -> no endpoint, p={}: {}",
                    f.no_endpoint_p,
                    f.without_dnat.as_deref().unwrap_or("")
                );
            }
            if let Some(k) = &f.skew {
                let _ = writeln!(
                    s,
                    "    skew: chi-square {:.3}, {} df, p-value {:.4} over {} live entries{}",
                    k.chi_square,
                    k.df,
                    k.p_value,
                    k.entries,
                    if k.min_expected < 5.0 {
                        " (fewer than 5 expected per endpoint: rough)"
                    } else {
                        ""
                    }
                );
            }
        }
    }
    if m.stale > 0 {
        let _ = writeln!(
            s,
            "\nkube-proxy's cleanup, release by release (its own code, run on a copy of the table):"
        );
        for c in &r.cleanup {
            let _ = writeln!(
                s,
                "  {:<46} deletes {} of {} stale{}: {}",
                c.releases.join(", "),
                c.stale_deleted,
                c.stale_deleted + c.stale_kept,
                if c.live_deleted > 0 {
                    format!(" and {} live", c.live_deleted)
                } else {
                    String::new()
                },
                c.when
            );
        }
        let _ = writeln!(
            s,
            "\nthe fix (each line run on a copy of the table: together they delete exactly the {}):",
            plural(m.stale, "stale entry", "stale entries")
        );
        for f in &r.fix {
            let _ = writeln!(
                s,
                "  {}    # {}",
                f.command,
                plural(f.deletes, "entry", "entries")
            );
        }
    }
    let p = &r.pressure;
    let _ = writeln!(
        s,
        "\ntable: {} of nf_conntrack_max {}; TIME_WAIT {}, unreplied UDP {}, without [ASSURED] {} (what early drop takes first)",
        p.entries,
        if p.max == 0 {
            "unlimited".to_string()
        } else {
            p.max.to_string()
        },
        p.time_wait,
        p.unreplied_udp,
        p.not_assured
    );
    for w in &r.warnings {
        let _ = writeln!(s, "warning: {w}");
    }
    s
}
