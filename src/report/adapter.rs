//! The one place that reads the run's events: each [`TimelineEvent`] becomes an [`Ev`], the
//! small vocabulary the report is drawn from. When the events' shape changes (structured
//! tuples, ids), only this file follows.

use super::ctline::CtLine;
use crate::cluster::sim::{TimelineEvent, What};

/// How a query or connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Answered (UDP) or the exchange completed (TCP).
    Answered,
    /// Timed out on its last try.
    TimedOut,
    /// Refused by an ICMP error (UDP, connected socket).
    Refused,
    /// A TCP exchange failed (reset, refused, timed out).
    Failed,
}

impl Outcome {
    /// The one-letter code the page uses.
    pub fn code(self) -> &'static str {
        match self {
            Outcome::Answered => "a",
            Outcome::TimedOut => "t",
            Outcome::Refused => "r",
            Outcome::Failed => "f",
        }
    }
}

/// What one event says, for the report.
#[derive(Debug)]
pub(crate) enum Ev<'a> {
    /// A client sent a query (attempt 0), a retry, or opened a connection.
    Send {
        client: &'a str,
        id: u32,
        attempt: u8,
        src: &'a str,
        dst: &'a str,
    },
    /// The client's packet was DNAT'd on `node` to `to`.
    Dnat {
        client: &'a str,
        id: u32,
        node: &'a str,
        to: &'a str,
    },
    /// The query or connection ended.
    Done {
        client: &'a str,
        id: u32,
        outcome: Outcome,
    },
    /// Something else about a query (an unseen ICMP error, a drop): its line joins the query's.
    Note { client: &'a str, id: u32 },
    /// A `conntrack -E` event.
    Conntrack { node: &'a str, ct: CtLine },
    /// A pod's lifecycle.
    Pod { pod: &'a str, change: &'a str },
    /// A Service's EndpointSlice now holds these endpoints (address, condition).
    Endpoints {
        service: &'a str,
        endpoints: Vec<(&'a str, EpCond)>,
    },
    /// A kube-proxy sync (or its failure).
    Sync {
        node: &'a str,
        full: bool,
        failed: bool,
    },
    /// kube-proxy's cleanup deleted an entry.
    Cleanup { node: &'a str, ct: CtLine },
    /// A scenario event changed an object, a process or a node, or a command was typed on a
    /// node (its output line).
    Change,
    /// An expectation was checked.
    Expectation { passed: bool },
}

/// An endpoint's conditions in an EndpointSlice, as the timeline prints them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EpCond {
    /// Ready (and serving).
    Ready,
    /// Not ready but serving.
    Serving,
    /// Neither ready nor serving.
    NotServing,
    /// Terminating.
    Terminating,
}

impl EpCond {
    /// The name the page uses.
    pub fn code(self) -> &'static str {
        match self {
            EpCond::Ready => "ready",
            EpCond::Serving => "serving",
            EpCond::NotServing => "notserving",
            EpCond::Terminating => "terminating",
        }
    }
}

/// `10.244.1.5 (not ready, not serving), 10.244.2.5` → addresses and conditions.
fn parse_endpoints(text: &str) -> Vec<(&str, EpCond)> {
    let mut out = Vec::new();
    if text == "(none)" {
        return out;
    }
    let mut depth = 0usize;
    let mut start = 0usize;
    let bytes = text.as_bytes();
    let mut items: Vec<&str> = Vec::new();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'(' => depth += 1,
            b')' => depth = depth.saturating_sub(1),
            b',' if depth == 0 => {
                items.push(text[start..i].trim());
                start = i + 1;
            }
            _ => {}
        }
    }
    items.push(text[start..].trim());
    for item in items.into_iter().filter(|s| !s.is_empty()) {
        let (addr, cond) = match item.split_once(' ') {
            None => (item, EpCond::Ready),
            Some((a, rest)) => {
                let c = if rest.contains("terminating") {
                    EpCond::Terminating
                } else if rest.contains("not serving") {
                    EpCond::NotServing
                } else if rest.contains("serving") {
                    EpCond::Serving
                } else {
                    EpCond::NotServing
                };
                (a, c)
            }
        };
        out.push((addr, cond));
    }
    out
}

/// The address part of `10.96.0.10:53` or `[fd00::1]:53`.
pub(crate) fn host(sock: &str) -> &str {
    if let Some(rest) = sock.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match sock.rsplit_once(':') {
        Some((h, p)) if !h.contains(':') && p.chars().all(|c| c.is_ascii_digit()) => h,
        _ => sock,
    }
}

/// Reads one event.
pub(crate) fn adapt(e: &TimelineEvent) -> Ev<'_> {
    match &e.what {
        What::QuerySent {
            client,
            query,
            attempt,
            src,
            dst,
        } => Ev::Send {
            client,
            id: *query,
            attempt: *attempt,
            src,
            dst,
        },
        What::PingSent {
            client,
            query,
            src,
            dst,
            ..
        } => Ev::Send {
            client,
            id: *query,
            attempt: 0,
            src,
            dst,
        },
        What::TcpConnect {
            client,
            conn,
            src,
            dst,
        } => Ev::Send {
            client,
            id: *conn,
            attempt: 0,
            src,
            dst,
        },
        What::Dnat {
            client,
            query,
            node,
            to,
            ..
        } => Ev::Dnat {
            client,
            id: *query,
            node,
            to,
        },
        What::QueryAnswered { client, query, .. } => Ev::Done {
            client,
            id: *query,
            outcome: Outcome::Answered,
        },
        What::TcpDone { client, conn, .. } => Ev::Done {
            client,
            id: *conn,
            outcome: Outcome::Answered,
        },
        What::QueryTimedOut { client, query, .. } => Ev::Done {
            client,
            id: *query,
            outcome: Outcome::TimedOut,
        },
        What::QueryRefused { client, query, .. } => Ev::Done {
            client,
            id: *query,
            outcome: Outcome::Refused,
        },
        What::TcpFailed { client, conn, .. } => Ev::Done {
            client,
            id: *conn,
            outcome: Outcome::Failed,
        },
        What::IcmpIgnored { client, query, .. } | What::Dropped { client, query, .. } => {
            Ev::Note { client, id: *query }
        }
        What::Conntrack {
            node,
            event,
            cause,
            entry,
            ..
        } => Ev::Conntrack {
            node,
            ct: CtLine::from_record(event, *cause, entry),
        },
        What::Pod { pod, change } => Ev::Pod { pod, change },
        What::Endpoints { service, endpoints } => Ev::Endpoints {
            service,
            endpoints: parse_endpoints(endpoints),
        },
        What::Sync { node, full, .. } => Ev::Sync {
            node,
            full: *full,
            failed: false,
        },
        What::SyncFailed { node, .. } => Ev::Sync {
            node,
            full: false,
            failed: true,
        },
        What::CleanupDelete { node, entry, .. } => Ev::Cleanup {
            node,
            ct: CtLine::from_record("", None, entry),
        },
        What::Expectation { passed, .. } => Ev::Expectation { passed: *passed },
        What::Change { .. } | What::Command { .. } => Ev::Change,
        What::TcpRequest {
            client,
            request,
            src,
            dst,
            ..
        } => Ev::Send {
            client,
            id: *request,
            attempt: 0,
            src,
            dst,
        },
        What::TcpAnswered {
            client, request, ..
        } => Ev::Done {
            client,
            id: *request,
            outcome: Outcome::Answered,
        },
        What::TcpRequestFailed {
            client, request, ..
        } => Ev::Done {
            client,
            id: *request,
            outcome: Outcome::Failed,
        },
        What::TcpConnection {
            client, request, ..
        } => Ev::Note {
            client,
            id: *request,
        },
        What::DnsQuery {
            client,
            lookup,
            src,
            dst,
            ..
        } => Ev::Send {
            client,
            id: *lookup,
            attempt: 0,
            src,
            dst,
        },
        What::DnsAnswer { client, lookup, .. } => Ev::Note {
            client,
            id: *lookup,
        },
        What::Lookup {
            client,
            lookup,
            result,
            ..
        } => Ev::Done {
            client,
            id: *lookup,
            outcome: match *result {
                "answered" => Outcome::Answered,
                "timedOut" => Outcome::TimedOut,
                "refused" => Outcome::Refused,
                _ => Outcome::Failed,
            },
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoint_lists_read_back_with_their_conditions() {
        assert_eq!(
            parse_endpoints("10.244.1.5 (not ready, not serving), 10.244.2.5"),
            vec![
                ("10.244.1.5", EpCond::NotServing),
                ("10.244.2.5", EpCond::Ready)
            ]
        );
        assert_eq!(
            parse_endpoints(
                "10.0.0.1 (not ready, serving, terminating), 10.0.0.2 (not ready, serving)"
            ),
            vec![
                ("10.0.0.1", EpCond::Terminating),
                ("10.0.0.2", EpCond::Serving)
            ]
        );
        assert!(parse_endpoints("(none)").is_empty());
        assert_eq!(host("10.96.0.10:53"), "10.96.0.10");
        assert_eq!(host("[fd00::1]:53"), "fd00::1");
        assert_eq!(host("10.96.0.10"), "10.96.0.10");
    }
}
