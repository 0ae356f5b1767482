//! The testkit's answers as JSON values (`serde_json` keeps object keys sorted: the bytes
//! depend only on the answer).

use crate::testkit::{CtEntry, Egress, Fate, Flow, Selection, Sighting, SimTime};
use serde_json::{json, Map, Value};

/// `object`, `array`, … for error messages.
pub(super) fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(_) => "number",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// An instant: `{"ns": …, "time": "00:01:30.000"}`.
pub(super) fn time(t: SimTime) -> Value {
    json!({"ns": t.as_nanos(), "time": t.to_string()})
}

fn fate(f: &Fate) -> (&'static str, Option<String>) {
    match f {
        Fate::Transmitted => ("transmitted", None),
        Fate::Delivered => ("delivered", None),
        Fate::Dropped(cause) => ("dropped", Some(cause.to_string())),
        Fate::Rejected { table, hook } => ("rejected", Some(format!("rejected by {table} {hook}"))),
        Fate::RejectedNft { chain, hook } => (
            "rejected",
            Some(format!("rejected by nft chain {chain} ({hook})")),
        ),
    }
}

fn egress(e: &Egress) -> Value {
    match e {
        Egress::Transmit {
            dev,
            next_hop,
            packet,
        } => json!({"kind": "transmit", "dev": dev.to_string(), "nextHop": next_hop.to_string(),
                    "packet": packet.to_string()}),
        Egress::LocalDeliver { packet } => json!({"kind": "deliver", "packet": packet.to_string()}),
    }
}

fn pair(p: Option<(std::net::SocketAddr, std::net::SocketAddr)>) -> Value {
    p.map_or(
        Value::Null,
        |(a, b)| json!({"before": a.to_string(), "after": b.to_string()}),
    )
}

fn opt(s: Option<String>) -> Value {
    s.map_or(Value::Null, Value::String)
}

/// A `flow`'s answer.
pub(super) fn flow(f: &Flow) -> Map<String, Value> {
    let (name, reason) = fate(&f.fate);
    let mut m = Map::new();
    m.insert("at".into(), time(f.at));
    m.insert("packet".into(), f.packet.to_string().into());
    m.insert("ingress".into(), f.ingress.clone().into());
    m.insert("fate".into(), name.into());
    m.insert("reason".into(), opt(reason));
    m.insert(
        "egress".into(),
        Value::Array(f.egress.iter().map(egress).collect()),
    );
    m.insert("outInterface".into(), opt(f.out_interface()));
    m.insert("endpoint".into(), opt(f.endpoint().map(|s| s.to_string())));
    m.insert("source".into(), opt(f.source().map(|s| s.to_string())));
    m.insert("dnat".into(), pair(f.dnat()));
    m.insert("snat".into(), pair(f.snat()));
    m.insert(
        "entry".into(),
        f.entry.as_ref().map_or(Value::Null, |e| entry(e, f.at)),
    );
    m.insert("trace".into(), opt(f.trace.clone()));
    m
}

fn tuple(t: &sim_conntrack::Tuple) -> Value {
    json!({"src": t.src.to_string(), "dst": t.dst.to_string(), "sport": t.sport, "dport": t.dport})
}

/// A conntrack entry at `now`: its tuples (as the reconciler protocol's entries), its mark,
/// and its `conntrack -L` line.
pub(super) fn entry(e: &CtEntry, now: SimTime) -> Value {
    let proto = sim_core::packet::proto_name(e.proto())
        .map_or_else(|| e.proto().to_string(), str::to_string);
    json!({
        "proto": proto,
        "orig": tuple(&e.orig),
        "reply": tuple(&e.reply),
        "mark": e.mark,
        "line": e.list_line(now).to_string(),
    })
}

/// Where an injected packet was seen.
pub(super) fn sighting(s: &Sighting) -> Value {
    json!({
        "at": time(s.at),
        "machine": s.machine,
        "packet": s.packet.to_string(),
        "dropped": s.dropped,
    })
}

fn dyadic(d: &crate::testkit::Dyadic) -> Value {
    json!({"fraction": d.fraction(), "decimal": d.decimal(12), "float": d.to_f64()})
}

/// A `selection`'s answer.
pub(super) fn selection(s: &Selection) -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("chain".into(), s.chain.clone().into());
    m.insert(
        "choices".into(),
        Value::Array(
            s.choices
                .iter()
                .map(|c| {
                    json!({"rule": c.rule, "target": c.target, "endpoint": c.endpoint,
                           "probability": dyadic(&c.probability)})
                })
                .collect(),
        ),
    );
    m.insert("fallThrough".into(), dyadic(&s.fall_through));
    m
}
