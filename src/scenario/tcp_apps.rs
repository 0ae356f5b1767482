//! The TCP application fields of a scenario: a server's `halfClose` / `maxRequests` and a
//! client's `connection:` (keep-alive, requests per connection, parallel connections, a
//! pause), checked into the model's [`ConnectionPolicy`] and the server's close point.
//!
//! docs/scenario-reference.md documents the fields.

use super::load::{Ctx, ScenarioError};
use super::model::{ConnectionPolicy, Pause};
use super::schema::{ConnectionDoc, ServerDoc, S};
use serde_saphyr::Location;

/// Most connections one client may keep open at once (`connection.parallel`).
pub const MAX_PARALLEL_CONNECTIONS: u32 = 1024;

/// After how many responses a `tcpServer` half-closes a connection: `halfClose: true` alone
/// after the first, `maxRequests: N` after the Nth; `None` when it never does.
pub(super) fn server_close_after(ctx: &Ctx, s: &ServerDoc) -> Result<Option<u32>, ScenarioError> {
    match (&s.half_close, &s.max_requests) {
        (Some(h), Some(_)) if !h.value => Err(ctx.err(
            h,
            "`halfClose: false` with `maxRequests`: a server that closes after maxRequests half-closes; drop one of them",
        )),
        (_, Some(n)) if n.value == 0 => Err(ctx.err(
            n,
            "maxRequests 0: expected at least 1 (responses on a connection before the server closes it)",
        )),
        (_, Some(n)) => Ok(Some(n.value)),
        (Some(h), None) => Ok(h.value.then_some(1)),
        (None, None) => Ok(None),
    }
}

/// Where `s`, a `udpServer`, carries a TCP-only field.
pub(super) fn tcp_only_field(s: &ServerDoc) -> Option<Location> {
    match (&s.half_close, &s.max_requests) {
        (Some(h), _) => Some(h.referenced),
        (None, Some(n)) => Some(n.referenced),
        (None, None) => None,
    }
}

/// The checked `connection:` of a `tcp:` client.
pub(super) fn connection_policy(
    ctx: &Ctx,
    c: &S<ConnectionDoc>,
) -> Result<ConnectionPolicy, ScenarioError> {
    let d = &c.value;
    let requests = match (&d.requests, &d.keep_alive) {
        (Some(r), Some(k)) if k.value => {
            return Err(ctx.err(
                r,
                "`requests` and `keepAlive: true` both given: expected one (requests per connection, or one connection for every request)",
            ))
        }
        (Some(r), _) if r.value == 0 => {
            return Err(ctx.err(
                r,
                "requests 0: expected at least 1 request per connection",
            ))
        }
        (Some(r), _) => Some(r.value),
        (None, Some(k)) if !k.value => Some(1),
        (None, _) => None,
    };
    let parallel = match &d.parallel {
        None => 1,
        Some(p) if p.value == 0 || p.value > MAX_PARALLEL_CONNECTIONS => {
            return Err(ctx.err(
                p,
                format!(
                    "parallel {}: expected 1 to {MAX_PARALLEL_CONNECTIONS} connections (MAX_PARALLEL_CONNECTIONS)",
                    p.value
                ),
            ))
        }
        Some(p) => p.value,
    };
    let pause = match &d.pause {
        None => None,
        Some(p) if p.value.duration.value.is_zero() => {
            return Err(ctx.err(
                &p.value.duration,
                "pause for 0s: expected a positive duration",
            ))
        }
        Some(p) => Some(Pause {
            after: p.value.after.value.get(),
            duration: p.value.duration.value.get(),
        }),
    };
    Ok(ConnectionPolicy {
        requests,
        parallel,
        pause,
    })
}
