//! Reading the YAML text: the reader's limits, and its errors in the scenario's words.
//!
//! The YAML reader (serde-saphyr) guards against resource-amplifying input with budgets;
//! nfsim raises the ones a big cluster reaches ([`MAX_YAML_NODES`], [`MAX_YAML_EVENTS`]) and
//! says in words which limit was hit. Its messages written for programmers (advice about its
//! own options, "expected mapping start") are rewritten for the scenario's author.
//!
//! Aliases: many objects sharing one anchored block (`spec: *web` in 500 Services) is normal
//! YAML, so the reader's alias-to-anchor ratio heuristic is off. What an alias bomb (the
//! "billion laughs") costs is what its aliases expand to, and that is bounded: the aliases
//! of a file replay at most [`MAX_YAML_EVENTS`] parser events in all, no more than the file
//! could have written out, and nest at most [`MAX_YAML_DEPTH`] deep.

use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{Error, Location};

pub use sim_core::input::MAX_SCENARIO_BYTES;
/// The most YAML values a scenario may hold (every scalar, list and mapping counts: a pod
/// written in flow style is about 20), enough for about 100,000 pods.
pub const MAX_YAML_NODES: usize = 2_000_000;
/// The most YAML parser events (about twice the values); also the most events the file's
/// aliases (`*name`) may replay in all.
pub const MAX_YAML_EVENTS: usize = 4_000_000;
/// The most parser events the anchored blocks (`&name`) of a file may hold, counting each
/// block an event is in: a shared Service spec is about 20, so this is thousands of
/// templates, and it stops a billion laughs while its anchors are being recorded.
pub const MAX_YAML_ANCHORED_EVENTS: usize = 100_000;
/// How deep lists and mappings may nest (a scenario needs about 10), and aliases within
/// aliases.
pub const MAX_YAML_DEPTH: usize = 64;

/// The reader's options: one document, the budgets above.
pub fn options() -> serde_saphyr::Options {
    serde_saphyr::options! {
        budget: serde_saphyr::budget! {
            max_nodes: MAX_YAML_NODES,
            max_events: MAX_YAML_EVENTS,
            max_depth: MAX_YAML_DEPTH,
            enforce_alias_anchor_ratio: false,
            max_recorded_anchor_events: MAX_YAML_ANCHORED_EVENTS,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: MAX_YAML_EVENTS,
            max_replay_stack_depth: MAX_YAML_DEPTH,
        },
    }
}

/// What was at `loc` in the text, for "found …".
fn found_at(lines: &[&str], loc: Location) -> String {
    let Some(line) = (loc.line() as usize)
        .checked_sub(1)
        .and_then(|i| lines.get(i))
    else {
        return "the end of the file".into();
    };
    let col = (loc.column() as usize).saturating_sub(1);
    let rest: String = line.chars().skip(col).collect();
    let rest = rest.trim();
    if rest.is_empty() {
        return "nothing".into();
    }
    // In flow style (`{port: 70000}`) the value ends at the next delimiter.
    let rest = if rest.starts_with(['"', '\'', '[', '{']) {
        rest
    } else {
        rest.split([',', '}', ']', '#'])
            .next()
            .unwrap_or(rest)
            .trim_end()
    };
    let short: String = rest.chars().take(40).collect();
    if short.len() < rest.len() {
        format!("`{short}…`")
    } else {
        format!("`{short}`")
    }
}

/// The key whose value is at `loc` (`port` in `port: 70000`), if the line shows one.
fn key_before(lines: &[&str], loc: Location) -> Option<String> {
    let line = lines.get((loc.line() as usize).checked_sub(1)?)?;
    let before: String = line
        .chars()
        .take((loc.column() as usize).saturating_sub(1))
        .collect();
    let before = before.trim_end().strip_suffix(':')?;
    let key: String = before
        .chars()
        .rev()
        .take_while(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    (!key.is_empty()).then_some(key)
}

/// The fields every scenario must have at its top level.
const TOP_LEVEL_REQUIRED: [&str; 3] = ["name", "duration", "nodes"];

fn breach_words(b: &BudgetBreach) -> String {
    match b {
        BudgetBreach::Nodes { nodes } => format!(
            "the file holds more than {MAX_YAML_NODES} YAML values (every scalar, list and mapping counts; {nodes} seen): the most a scenario may have (MAX_YAML_NODES)"
        ),
        BudgetBreach::Events { events } => format!(
            "the file holds more than {MAX_YAML_EVENTS} YAML parser events ({events} seen): the most a scenario may have (MAX_YAML_EVENTS)"
        ),
        BudgetBreach::Depth { depth } => format!(
            "lists and mappings are nested {depth} deep: expected at most {MAX_YAML_DEPTH} levels (MAX_YAML_DEPTH)"
        ),
        BudgetBreach::Documents { documents } => {
            format!("{documents} YAML documents: one document expected")
        }
        BudgetBreach::Aliases { aliases } => {
            format!("{aliases} YAML aliases (*name): more than the YAML reader takes")
        }
        BudgetBreach::AliasAnchorRatio { aliases, anchors } => format!(
            "{aliases} YAML aliases (*name) of {anchors} anchors (&name): more than the YAML reader takes"
        ),
        BudgetBreach::RecordedAnchorEvents {
            recorded_anchor_events,
        } => format!(
            "the anchored blocks (&name) hold more than {MAX_YAML_ANCHORED_EVENTS} YAML parser events ({recorded_anchor_events} seen; an anchor of aliases of anchors multiplies): the most a scenario may have (MAX_YAML_ANCHORED_EVENTS)"
        ),
        BudgetBreach::Anchors { anchors } => {
            format!("{anchors} YAML anchors (&name): more than the YAML reader takes")
        }
        BudgetBreach::ScalarBytes { total_scalar_bytes } => format!(
            "{total_scalar_bytes} bytes of text in values: more than the YAML reader takes"
        ),
        other => format!("a limit of the YAML reader was reached ({other:?})"),
    }
}

/// The place (line, column) and the message of a YAML reading error.
pub fn describe(e: &Error, lines: &[&str]) -> (u64, u64, String) {
    let loc = e.location().unwrap_or(Location::UNKNOWN);
    // The error itself, under the snippet and alias wrappers (an error inside an aliased
    // block is wrapped with the alias's and the anchor's places).
    let mut inner = e;
    while let Error::WithSnippet { error, .. } | Error::AliasError { error, .. } = inner {
        inner = error;
    }
    let field = key_before(lines, loc)
        .map(|k| format!("{k}: "))
        .unwrap_or_default();
    if let Error::SerdeMissingField { field, .. } = inner {
        // The reader points at the mapping's last key; a mapping that starts in column 1 is
        // the top level, which starts on the file's first line.
        if loc.column() <= 1 && TOP_LEVEL_REQUIRED.contains(field) {
            let first = lines
                .iter()
                .position(|l| {
                    let t = l.trim();
                    !t.is_empty() && !t.starts_with('#') && t != "---"
                })
                .map_or(1, |i| i as u64 + 1);
            return (
                first,
                1,
                format!("missing field `{field}`: every scenario needs `{field}` at its top level"),
            );
        }
    }
    let msg = match inner {
        Error::DuplicateMappingKey { key: Some(k), .. } => {
            format!("duplicate key {k}: each key may appear once in a mapping")
        }
        Error::DuplicateMappingKey { key: None, .. } => {
            "duplicate key: each key may appear once in a mapping".into()
        }
        Error::MultipleDocuments { .. } => {
            "a second YAML document (`---`): one document expected".into()
        }
        Error::Budget { breach, .. } => breach_words(breach),
        Error::AliasReplayLimitExceeded {
            total_replayed_events,
            ..
        } => format!(
            "the aliases (*name) expand to more than {MAX_YAML_EVENTS} YAML parser events ({total_replayed_events} seen): more than the file could hold written out (MAX_YAML_EVENTS); an alias of an alias of an alias… multiplies"
        ),
        Error::AliasReplayStackDepthExceeded { depth, .. } => format!(
            "aliases (*name) nested {depth} deep: expected at most {MAX_YAML_DEPTH} (MAX_YAML_DEPTH)"
        ),
        Error::AliasExpansionLimitExceeded { expansions, .. } => format!(
            "one anchor (&name) expanded {expansions} times: more than the YAML reader takes"
        ),
        Error::Unexpected { expected, .. } => {
            let what = match *expected {
                "mapping start" => "a mapping (`key: value` lines, or `{key: value}`)",
                "sequence start" => "a list (`- item` lines, or `[a, b]`)",
                "scalar" => "a single value",
                other => other,
            };
            format!("{field}expected {what}, found {}", found_at(lines, loc))
        }
        Error::SerdeUnknownField {
            field, expected, ..
        } if expected.is_empty() => {
            format!("unknown field `{field}`: this mapping takes no fields")
        }
        Error::SerdeUnknownVariant {
            variant, expected, ..
        } if expected.is_empty() => format!("unknown variant `{variant}`: none is accepted here"),
        Error::SerdeInvalidValue {
            unexpected,
            expected,
            ..
        } => {
            let range = match expected.as_str() {
                "u8" => Some("0 to 255"),
                "u16" => Some("0 to 65535"),
                "u32" => Some("0 to 4294967295"),
                "u64" => Some("0 to 18446744073709551615"),
                "i32" => Some("-2147483648 to 2147483647"),
                _ => None,
            };
            match range {
                Some(r) => format!(
                    "{field}{} is out of range: expected an integer from {r}",
                    unexpected.trim_start_matches("integer ").trim_matches('`')
                ),
                None => format!("invalid value: {unexpected}, expected {expected}"),
            }
        }
        Error::InvalidScalar { ty, .. } => {
            let range = match *ty {
                "u8" => " from 0 to 255",
                "u16" => " from 0 to 65535",
                "u32" => " from 0 to 4294967295",
                "u64" => " from 0 to 18446744073709551615",
                "i32" => " from -2147483648 to 2147483647",
                "i64" => " from -9223372036854775808 to 9223372036854775807",
                _ => "",
            };
            if range.is_empty() {
                format!("{field}invalid {ty}: found {}", found_at(lines, loc))
            } else {
                format!("{field}{} is not an integer{range}", found_at(lines, loc))
            }
        }
        _ => {
            let plain = inner.to_string();
            // serde-saphyr appends " at line L, column C"; the place is printed in front.
            let suffix = format!(" at line {}, column {}", loc.line(), loc.column());
            let msg = plain.strip_suffix(&suffix).unwrap_or(&plain);
            // std's address parsers say only "invalid IP address syntax".
            if msg == "invalid IP address syntax" {
                format!(
                    "{field}{} is not an IP address: expected one such as 192.168.0.1 or fd00::1",
                    found_at(lines, loc)
                )
            } else if msg == "invalid socket address syntax" {
                format!(
                    "{field}{} is not an address and port: expected one such as 10.96.0.10:53",
                    found_at(lines, loc)
                )
            } else if msg == "recursion limit exceeded" {
                format!("lists and mappings are nested too deep: expected at most {MAX_YAML_DEPTH} levels (MAX_YAML_DEPTH)")
            } else if msg.contains(super::schema::TOO_LONG) {
                // A duration field beyond MAX_DURATION: its reader cannot know the key.
                if field.is_empty() {
                    format!("duration {msg}")
                } else {
                    format!("{field}{msg}")
                }
            } else {
                msg.to_string()
            }
        }
    };
    (loc.line(), loc.column(), msg)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_budget_breach_names_the_limit_in_words() {
        let opts = serde_saphyr::options! {
            budget: serde_saphyr::budget! { max_nodes: 5 },
        };
        let text = "a: [1, 2, 3, 4, 5, 6, 7]\n";
        let e =
            serde_saphyr::from_str_with_options::<std::collections::BTreeMap<String, Vec<u32>>>(
                text, opts,
            )
            .unwrap_err();
        let (_, _, m) = describe(&e, &text.lines().collect::<Vec<_>>());
        assert!(
            m.contains("YAML values") && m.contains("MAX_YAML_NODES"),
            "{m}"
        );
        assert!(!m.contains("Nodes {"), "{m}");
    }

    #[test]
    fn a_second_document_is_named_so() {
        let text = "a: 1\n---\na: 2\n";
        let e = serde_saphyr::from_str_with_options::<std::collections::BTreeMap<String, u32>>(
            text,
            options(),
        )
        .unwrap_err();
        let (_, _, m) = describe(&e, &text.lines().collect::<Vec<_>>());
        assert_eq!(m, "a second YAML document (`---`): one document expected");
    }
}
