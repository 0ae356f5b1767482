//! The UDP client fields that say how a client holds its socket over time, checked into the
//! model: a `dig` loop (`clients[].dig`), a pause (`udp.pause`) and a close and reopen
//! (`udp.reopen`); and the check that two clients bind one fixed source port only in turn.
//!
//! docs/scenario-reference.md documents the fields.

use super::load::{Ctx, ScenarioError};
use super::model::{ClientKind, ClientSchedule, SocketGap, SourcePort, UdpSocketUse};
use super::schema::{DigClientDoc, PauseDoc, SourcePortDoc, UdpClientDoc, S};
use sim_core::{SimDuration, SimTime};
use std::collections::BTreeMap;

/// dig's default `+tries` (dig(1): "instead of the default, 3").
pub const DIG_DEFAULT_TRIES: u8 = 3;
/// dig's default `+timeout`, 5 s (BIND 9.18 `bin/dig/dighost.h`: `UDP_TIMEOUT 5`).
pub const DIG_DEFAULT_TIMEOUT: SimDuration = SimDuration::from_secs(5);

fn gap(ctx: &Ctx, p: &S<PauseDoc>, closed: bool) -> Result<SocketGap, ScenarioError> {
    let d = &p.value;
    if d.duration.value.is_zero() {
        let word = if closed { "reopen" } else { "pause" };
        return Err(ctx.err(
            &d.duration,
            format!("{word} for 0s: expected a positive duration"),
        ));
    }
    Ok(SocketGap {
        after: d.after.value.get(),
        duration: d.duration.value.get(),
        closed,
    })
}

/// `udp.pause` or `udp.reopen` (at most one of them).
pub(super) fn udp_socket_use(
    ctx: &Ctx,
    u: &UdpClientDoc,
    source_port: SourcePort,
) -> Result<UdpSocketUse, ScenarioError> {
    let gap = match (&u.pause, &u.reopen) {
        (Some(_), Some(r)) => {
            return Err(ctx.err(
                r,
                "a client has one gap: `pause` (the socket kept open) or `reopen` (closed, then bound again), not both",
            ))
        }
        (Some(p), None) => Some(gap(ctx, p, false)?),
        (None, Some(r)) => {
            if source_port == SourcePort::PerQuery {
                return Err(ctx.err(
                    r,
                    "reopen on a perQuery client: each query has its own socket already; give a sourcePort (a number or `fixed`) or use `pause`",
                ));
            }
            Some(gap(ctx, r, true)?)
        }
        (None, None) => None,
    };
    Ok(UdpSocketUse {
        sequential: false,
        gap,
    })
}

/// `dig:` of a client: its kind (a sequential UDP client), its schedule from `sched`.
pub(super) fn dig_kind(ctx: &Ctx, d: &DigClientDoc) -> Result<ClientKind, ScenarioError> {
    let source_port = match d.source_port.as_ref() {
        None => SourcePort::PerQuery,
        Some(s) => match s.value {
            SourcePortDoc::Port(p) => SourcePort::Fixed(p),
            SourcePortDoc::PerQuery => SourcePort::PerQuery,
            SourcePortDoc::Fixed => {
                return Err(ctx.err(
                    s,
                    "sourcePort fixed on a dig loop: each dig is a new process with a new socket; give the port it binds (`dig -b ADDR#PORT`) or leave sourcePort out (a new ephemeral port per run)",
                ))
            }
        },
    };
    let tries = match &d.tries {
        Some(t) if t.value == 0 => {
            return Err(ctx.err(t, "tries 0: dig makes at least one try (+tries=1 or more)"))
        }
        Some(t) => t.value,
        None => DIG_DEFAULT_TRIES,
    };
    Ok(ClientKind::Udp {
        source_port,
        timeout: d.timeout.map_or(DIG_DEFAULT_TIMEOUT, |t| t.get()),
        retries: tries - 1,
        connected: d.connected.unwrap_or(true),
        one_way: false,
        socket: UdpSocketUse {
            sequential: true,
            gap: None,
        },
    })
}

/// When a client's socket may hold a fixed source port: half-open spans, from its start to
/// the latest instant its last query can end (a bound, never less than the run holds it).
fn open_spans(s: &ClientSchedule, kind: &ClientKind) -> Spans {
    let ClientKind::Udp {
        timeout,
        retries,
        socket,
        ..
    } = kind
    else {
        return Vec::new();
    };
    // The longest a query holds the socket after its first send: every try's timeout.
    let busy = timeout.saturating_mul(*retries as u64 + 1);
    let shift = socket.gap.map_or(SimDuration::ZERO, |g| g.duration);
    let mut last_send = s.stop;
    if let Some(c) = s.count {
        let bound = if socket.sequential {
            // Each run lasts at most `busy`, then sleeps `interval`.
            s.start + (busy + s.interval).saturating_mul(c as u64)
        } else {
            s.start + s.interval.saturating_mul(c.saturating_sub(1) as u64) + shift
        };
        last_send = last_send.min(bound + SimDuration::from_nanos(1));
    }
    let end = last_send + s.jitter + busy;
    match socket.gap {
        Some(g) if g.closed => {
            let closes_by = s.start + g.after + s.jitter + busy;
            let reopens = s.start + g.after + g.duration;
            if closes_by < reopens {
                vec![(s.start, closes_by), (reopens, end)]
            } else {
                vec![(s.start, end)]
            }
        }
        _ => vec![(s.start, end)],
    }
}

/// Half-open spans of simulated time.
type Spans = Vec<(SimTime, SimTime)>;

/// The fixed UDP source ports bound so far, by (placement, port): who binds each and when.
#[derive(Default)]
pub(super) struct FixedPorts(BTreeMap<(String, u16), Vec<(String, Spans)>>);

impl FixedPorts {
    /// Records that client `name` on `placement` binds its fixed port, if it has one; a
    /// second socket on the same address and port while the first is open makes bind() fail
    /// with EADDRINUSE (`udp_lib_get_port` without `SO_REUSEPORT`): an error.
    pub(super) fn claim(
        &mut self,
        ctx: &Ctx,
        name: &S<String>,
        placement: String,
        schedule: &ClientSchedule,
        kind: &ClientKind,
    ) -> Result<(), ScenarioError> {
        let ClientKind::Udp {
            source_port: SourcePort::Fixed(port),
            ..
        } = kind
        else {
            return Ok(());
        };
        let spans = open_spans(schedule, kind);
        let holders = self.0.entry((placement, *port)).or_default();
        for (other, theirs) in holders.iter() {
            let clash = spans.iter().find_map(|a| {
                let b = theirs.iter().find(|b| a.0 < b.1 && b.0 < a.1)?;
                Some(a.0.max(b.0))
            });
            if let Some(from) = clash {
                return Err(ctx.err(
                    name,
                    format!(
                        "client {} binds UDP source port {port} at {} while client {other} may still have it open: the kernel refuses the second bind (EADDRINUSE); give one of them another sourcePort, or start it after the other's last query has ended",
                        name.value,
                        from.hms()
                    ),
                ));
            }
        }
        holders.push((name.value.clone(), spans));
        Ok(())
    }
}
