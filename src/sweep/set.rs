//! `--set PATH=VALUE`: one scenario field changed in the file's text before it is loaded.
//!
//! The path names a field by its keys, dot-separated, as the scenario file spells them
//! (`kubeProxy.release`, `network.latency`, `clients.0.udp.interval`). A sequence is indexed
//! by a number or, when its items are mappings with a `name`, by that name
//! (`clients.sidecar.udp.interval`); a key that itself holds dots (a sysctl) is matched
//! whole (`sysctls.net.netfilter.nf_conntrack_udp_timeout`).
//!
//! The value replaces the field's value where it stands in the text; a field the file does
//! not have is added at the end of its mapping. The edited text then goes through the
//! ordinary loader, so a misspelt field or a bad value is refused with the usual located
//! error, shown on the edited line. Editing the text rather than a parsed tree keeps every
//! other line where it was, comments included.

use serde_saphyr::granit_parser::{Event, Parser, ScalarStyle, StructureStyle};
use std::fmt;

/// One `--set PATH=V1,V2,…`: a field and the values a sweep gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SetAxis {
    /// The dotted path.
    pub path: String,
    /// Its segments.
    segments: Vec<String>,
    /// The values, in the order given.
    pub values: Vec<String>,
}

/// Why a `--set` was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("--set {arg}: {message}")]
pub struct SetError {
    /// The `--set` argument as given (`PATH=VALUE`).
    pub arg: String,
    /// What was wrong and what was expected.
    pub message: String,
}

impl std::str::FromStr for SetAxis {
    type Err = SetError;
    fn from_str(s: &str) -> Result<SetAxis, SetError> {
        let err = |message: String| SetError {
            arg: s.to_string(),
            message,
        };
        let Some((path, values)) = s.split_once('=') else {
            return Err(err(
                "no '=': expected PATH=VALUE[,VALUE…], as kubeProxy.release=v1.31,v1.32".into(),
            ));
        };
        let path = path.trim();
        let segments: Vec<String> = path.split('.').map(str::to_string).collect();
        if path.is_empty() || segments.iter().any(|x| x.is_empty()) {
            return Err(err(format!(
                "the path {path:?} has an empty segment: expected keys separated by single dots, as kubeProxy.release"
            )));
        }
        if path == "seed" {
            return Err(err(
                "the seed is swept with --seeds: expected another field".into(),
            ));
        }
        let values: Vec<String> = values.split(',').map(|v| v.trim().to_string()).collect();
        for v in &values {
            if v.is_empty() {
                return Err(err(
                    "an empty value: expected values separated by single commas".into(),
                ));
            }
            check_value(v).map_err(|m| err(format!("value {v:?}: {m}")))?;
        }
        Ok(SetAxis {
            path: path.to_string(),
            segments,
            values,
        })
    }
}

impl fmt::Display for SetAxis {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}={}", self.path, self.values.join(","))
    }
}

/// A value must be one YAML node written on one line (a scalar, or a flow `{…}` / `[…]`).
fn check_value(v: &str) -> Result<(), String> {
    if v.contains('\n') {
        return Err("a value spans lines: expected one line".into());
    }
    let mut nodes = 0;
    let mut depth = 0usize;
    for ev in Parser::new_from_str(v) {
        let (ev, _) = ev.map_err(|e| {
            format!("not valid YAML ({e}): expected a scalar or a flow mapping/sequence")
        })?;
        match ev {
            Event::Scalar(..) if depth == 0 => nodes += 1,
            Event::MappingStart(style, ..) | Event::SequenceStart(style, ..) => {
                if depth == 0 {
                    nodes += 1;
                    if style == StructureStyle::Block {
                        return Err(
                            "a block mapping: expected a scalar or a flow mapping {k: v}".into(),
                        );
                    }
                }
                depth += 1;
            }
            Event::MappingEnd | Event::SequenceEnd => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    if nodes != 1 {
        return Err("expected exactly one value".into());
    }
    Ok(())
}

/// A node of the file, with its byte range.
#[derive(Debug)]
struct Node {
    kind: Kind,
    start: usize,
    end: usize,
    line: usize,
    col: usize,
    flow: bool,
}

#[derive(Debug)]
enum Kind {
    Scalar { text: String, empty: bool },
    Map(Vec<(String, Node)>),
    Seq(Vec<Node>),
}

/// Reads the first document of `text` as a tree of nodes with byte ranges.
fn parse_tree(text: &str) -> Result<Node, String> {
    let mut stack: Vec<(Node, Option<String>)> = Vec::new();
    let mut pending_key: Vec<Option<String>> = Vec::new();
    let mut root: Option<Node> = None;
    let off = |m: &serde_saphyr::granit_parser::Marker| m.byte_offset().unwrap_or(m.index());
    for ev in Parser::new_from_str(text) {
        let (ev, span) = ev.map_err(|e| e.to_string())?;
        let (start, end) = (off(&span.start), off(&span.end));
        let (line, col) = (span.start.line(), span.start.col());
        let done: Option<Node> = match ev {
            Event::Scalar(v, style, ..) => Some(Node {
                kind: Kind::Scalar {
                    // `key:` with nothing after it: an empty span (at the colon).
                    empty: style == ScalarStyle::Plain && start == end,
                    text: v.into_owned(),
                },
                start,
                end,
                line,
                col,
                flow: true,
            }),
            Event::MappingStart(style, ..) | Event::SequenceStart(style, ..) => {
                let kind = if matches!(ev, Event::MappingStart(..)) {
                    Kind::Map(Vec::new())
                } else {
                    Kind::Seq(Vec::new())
                };
                stack.push((
                    Node {
                        kind,
                        start,
                        end: start,
                        line,
                        col,
                        flow: style == StructureStyle::Flow,
                    },
                    None,
                ));
                pending_key.push(None);
                None
            }
            Event::MappingEnd | Event::SequenceEnd => {
                pending_key.pop();
                stack.pop().map(|(mut n, _)| {
                    if n.flow {
                        n.end = end;
                    }
                    n
                })
            }
            Event::DocumentEnd => break,
            _ => None,
        };
        let Some(node) = done else { continue };
        match stack.last_mut() {
            None => {
                root = Some(node);
            }
            Some((parent, _)) => {
                if !parent.flow {
                    parent.end = parent.end.max(node.end);
                }
                let key_slot = pending_key.last_mut().expect("one per open collection");
                match &mut parent.kind {
                    Kind::Seq(items) => items.push(node),
                    Kind::Map(entries) => match key_slot.take() {
                        None => {
                            *key_slot = Some(match &node.kind {
                                Kind::Scalar { text, .. } => text.clone(),
                                _ => String::new(),
                            })
                        }
                        Some(k) => entries.push((k, node)),
                    },
                    Kind::Scalar { .. } => unreachable!("scalars are never open"),
                }
            }
        }
    }
    root.ok_or_else(|| "the file holds no YAML document".to_string())
}

/// One text edit: replace `start..end` with `text`.
struct Edit {
    start: usize,
    end: usize,
    text: String,
}

/// `{a: {b: value}}` for the path rest `[a, b]`.
fn nested(rest: &[String], value: &str) -> String {
    let mut s = value.to_string();
    for k in rest.iter().rev() {
        s = format!("{{{k}: {s}}}");
    }
    s
}

impl SetAxis {
    /// A `--set` of one value, for tests and callers outside a sweep.
    pub fn single(path: &str, value: &str) -> Result<SetAxis, SetError> {
        format!("{path}={value}").parse()
    }

    /// `text` (the scenario file `file`) with this field set to `value`.
    pub fn apply(&self, file: &str, text: &str, value: &str) -> Result<String, SetError> {
        let err = |message: String| SetError {
            arg: format!("{}={value}", self.path),
            message,
        };
        let root = parse_tree(text).map_err(|e| err(format!("{file}: {e}")))?;
        let edit = self
            .locate(&root, text, value)
            .map_err(|m| err(format!("{m} (in {file})")))?;
        let mut out = String::with_capacity(text.len() + edit.text.len());
        out.push_str(&text[..edit.start]);
        out.push_str(&edit.text);
        out.push_str(&text[edit.end..]);
        Ok(out)
    }

    fn locate(&self, root: &Node, text: &str, value: &str) -> Result<Edit, String> {
        let segs = &self.segments;
        let mut node = root;
        let mut i = 0;
        let at = |n: &Node| format!("line {}, column {}", n.line, n.col + 1);
        while i < segs.len() {
            let here = if i == 0 {
                "the file".to_string()
            } else {
                segs[..i].join(".")
            };
            match &node.kind {
                Kind::Map(entries) => {
                    // The longest run of segments that is one key (keys may hold dots).
                    let found = (i + 1..=segs.len()).rev().find_map(|j| {
                        let k = segs[i..j].join(".");
                        entries
                            .iter()
                            .find(|(key, _)| *key == k)
                            .map(|(_, n)| (j, n))
                    });
                    if let Some((j, n)) = found {
                        node = n;
                        i = j;
                        continue;
                    }
                    // Absent: add it. Under `sysctls` the rest is one dotted key.
                    let rest: Vec<String> = if i == 1 && segs[0] == "sysctls" {
                        vec![segs[1..].join(".")]
                    } else {
                        segs[i..].to_vec()
                    };
                    let (key, deeper) = (&rest[0], &rest[1..]);
                    let v = nested(deeper, value);
                    return Ok(insert_entry(node, entries, text, key, &v));
                }
                Kind::Seq(items) => {
                    let s = &segs[i];
                    let idx = if let Ok(k) = s.parse::<usize>() {
                        if k >= items.len() {
                            return Err(format!(
                                "{here} has {} items ({}): expected an index below {}",
                                items.len(),
                                at(node),
                                items.len()
                            ));
                        }
                        k
                    } else {
                        let names: Vec<&str> = items
                            .iter()
                            .filter_map(|it| match &it.kind {
                                Kind::Map(e) => {
                                    e.iter()
                                        .find(|(k, _)| k == "name")
                                        .and_then(|(_, v)| match &v.kind {
                                            Kind::Scalar { text, .. } => Some(text.as_str()),
                                            _ => None,
                                        })
                                }
                                _ => None,
                            })
                            .collect();
                        let Some(k) = items.iter().position(|it| match &it.kind {
                            Kind::Map(e) => e.iter().any(|(k, v)| {
                                k == "name"
                                    && matches!(&v.kind, Kind::Scalar { text, .. } if text == s)
                            }),
                            _ => false,
                        }) else {
                            return Err(format!(
                                "{here} ({}) has no item named {s:?}: expected an index from 0 to {} or one of the names [{}]",
                                at(node),
                                items.len().saturating_sub(1),
                                names.join(", ")
                            ));
                        };
                        k
                    };
                    node = &items[idx];
                    i += 1;
                }
                Kind::Scalar { empty: true, .. } => {
                    // `key:` with nothing after it: give it a mapping.
                    let pos = after_colon(text, node.start);
                    return Ok(Edit {
                        start: pos,
                        end: pos,
                        text: format!(" {}", nested(&segs[i..], value)),
                    });
                }
                Kind::Scalar { .. } => {
                    return Err(format!(
                        "{here} is a scalar ({}), it has no field {:?}: expected a path that ends at {here}",
                        at(node),
                        segs[i]
                    ));
                }
            }
        }
        // The value takes the node's place; a block collection becomes a flow value on the
        // line after its key, at the collection's indentation.
        if let Kind::Scalar { empty: true, .. } = node.kind {
            let pos = after_colon(text, node.start);
            return Ok(Edit {
                start: pos,
                end: pos,
                text: format!(" {value}"),
            });
        }
        Ok(Edit {
            start: node.start,
            end: node.end,
            text: value.to_string(),
        })
    }
}

/// Where a value goes after `key:` whose value is empty: the parser puts the empty value at
/// the colon.
fn after_colon(text: &str, at: usize) -> usize {
    let line_end = text[at..].find('\n').map_or(text.len(), |k| at + k);
    text[at..line_end].find(':').map_or(at, |k| at + k + 1)
}

/// The edit that adds `key: value` to the mapping `node`.
fn insert_entry(
    node: &Node,
    entries: &[(String, Node)],
    text: &str,
    key: &str,
    value: &str,
) -> Edit {
    if node.flow {
        // Before the closing brace.
        let close = node.end.saturating_sub(1);
        let sep = if entries.is_empty() { "" } else { ", " };
        return Edit {
            start: close,
            end: close,
            text: format!("{sep}{key}: {value}"),
        };
    }
    // A block mapping: a new line after its last entry, at its indentation.
    let last_end = entries.last().map_or(node.end, |(_, n)| n.end);
    let from = last_end.saturating_sub(1);
    let pos = text[from..].find('\n').map_or(text.len(), |k| from + k);
    let indent = " ".repeat(node.col);
    Edit {
        start: pos,
        end: pos,
        text: format!("\n{indent}{key}: {value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DOC: &str = "name: x  # the name\nkubeProxy:\n  release: v1.31\n  minSyncPeriod: 1s\nnetwork: {latency: 100us}\nsysctls:\n  net.netfilter.nf_conntrack_udp_timeout: 30\nclients:\n  - name: a\n    udp: {interval: 30s}\n  - name: b\n    udp:\n      interval: 10s\nempty:\n";

    fn set(path: &str, value: &str) -> Result<String, SetError> {
        SetAxis::single(path, value)?.apply("f.yaml", DOC, value)
    }

    #[test]
    fn replaces_a_scalar_in_place_keeping_the_other_lines() {
        let out = set("kubeProxy.release", "v1.33").unwrap();
        assert_eq!(out, DOC.replace("release: v1.31", "release: v1.33"));
        let out = set("name", "y").unwrap();
        assert!(out.starts_with("name: y  # the name\n"));
    }

    #[test]
    fn adds_an_absent_key_to_a_block_or_flow_mapping() {
        let out = set("kubeProxy.syncPeriod", "30s").unwrap();
        assert!(out.contains("  minSyncPeriod: 1s\n  syncPeriod: 30s\nnetwork"));
        let out = set("network.jitter", "1ms").unwrap();
        assert!(out.contains("network: {latency: 100us, jitter: 1ms}\n"));
        let out = set("controlPlane.watchDelay", "1s").unwrap();
        assert!(
            out.ends_with("empty:\ncontrolPlane: {watchDelay: 1s}\n"),
            "{out}"
        );
        let out = set("empty.a.b", "1").unwrap();
        assert!(out.ends_with("empty: {a: {b: 1}}\n"), "{out}");
    }

    #[test]
    fn sequences_by_index_or_name_and_dotted_keys_whole() {
        let out = set("clients.1.udp.interval", "5s").unwrap();
        assert!(out.contains("      interval: 5s\n"));
        let out = set("clients.a.udp.interval", "5s").unwrap();
        assert!(out.contains("udp: {interval: 5s}"));
        let out = set("sysctls.net.netfilter.nf_conntrack_udp_timeout", "60").unwrap();
        assert!(out.contains("nf_conntrack_udp_timeout: 60\n"));
        let out = set("sysctls.net.netfilter.nf_conntrack_max", "100").unwrap();
        assert!(out.contains("_timeout: 30\n  net.netfilter.nf_conntrack_max: 100\n"));
    }

    #[test]
    fn bad_paths_are_refused_with_the_place() {
        let e = set("clients.c.udp", "x").unwrap_err();
        assert!(e.to_string().contains("has no item named \"c\""), "{e}");
        assert!(e.to_string().contains("[a, b]"), "{e}");
        let e = set("clients.5", "x").unwrap_err();
        assert!(e.to_string().contains("has 2 items"), "{e}");
        let e = set("kubeProxy.release.x", "1").unwrap_err();
        assert!(
            e.to_string()
                .contains("kubeProxy.release is a scalar (line 3, column 12)"),
            "{e}"
        );
        assert!("a..b=1".parse::<SetAxis>().is_err());
        assert!("a.b".parse::<SetAxis>().is_err());
        assert!("a=1,,2".parse::<SetAxis>().is_err());
        assert!("a={b: 1".parse::<SetAxis>().is_err());
        assert!("seed=3".parse::<SetAxis>().is_err());
        let ok: SetAxis = "kubeProxy.release=v1.31, v1.32".parse().unwrap();
        assert_eq!(ok.values, ["v1.31", "v1.32"]);
    }
}
