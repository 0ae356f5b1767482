//! # `nfsim serve`: the testkit over line-delimited JSON
//!
//! A [`Session`] is the state of one `nfsim serve` conversation: a node (a
//! [`testkit::Node`](crate::testkit::Node)) or a scenario's cluster (a
//! [`testkit::Cluster`](crate::testkit::Cluster)), on simulated time. It is sans-IO, like the
//! rest of nfsim: [`Session::handle_line`] takes one request line and returns the response
//! line; it reads no clock and does no I/O. The `nfsim serve` command only moves lines
//! between stdin and stdout. The protocol (requests, responses, errors, limits) is
//! `docs/serve-protocol.md`; its version is [`PROTOCOL_VERSION`].
//!
//! Every answer comes from the testkit: a `flow` is [`Node::send`](crate::testkit::Node::send),
//! a `selection` is [`Node::selection`](crate::testkit::Node::selection), a `conntrack` is
//! [`Node::conntrack`](crate::testkit::Node::conntrack) and its text, and so on; this module
//! only decodes requests and encodes answers. Responses are `serde_json` objects, whose keys
//! are kept sorted: the same requests give the same bytes.
//!
//! A bad request (not JSON, unknown `op`, a missing or mistyped field, a value the testkit
//! refuses, a request out of order) gets an error response naming the request line, the
//! field and what was expected ([`ServeError`]); the session goes on as if the request had
//! not been made.
//!
//! ```
//! use nfsim::serve::Session;
//!
//! let mut s = Session::new();
//! let hello = s.handle_line(br#"{"op":"hello","version":1}"#);
//! assert!(hello.contains(r#""ok":true"#));
//! let yaml = serde_json::to_string(nfsim::testkit::examples::KUBE_DNS_TWO_ENDPOINTS).unwrap();
//! s.handle_line(format!(r#"{{"op":"node","objects":{yaml}}}"#).as_bytes());
//! let flow = s.handle_line(br#"{"op":"flow","packet":"udp 10.244.0.9:40000 -> 10.96.0.10:53"}"#);
//! assert!(flow.contains(r#""fate":"transmitted""#));
//! let bad = s.handle_line(br#"{"op":"advance","at":"1x"}"#);
//! assert!(bad.contains(r#""field":"at""#) && bad.contains(r#""line":4"#));
//! ```

mod encode;
mod request;

use crate::testkit::{Cluster, Node, Origin, Release, SimTime, Table, TestkitError};
use request::Req;
use serde_json::{Map, Value};

/// The protocol version this nfsim speaks (`hello`'s `version`).
pub const PROTOCOL_VERSION: u64 = 1;

/// The longest request line taken, its `\n` excluded: 64 MiB (a node's rules text fits;
/// the CLI reads no more of a longer line, and the session answers it with a `too_long`
/// error).
pub const MAX_REQUEST_BYTES: usize = 64 << 20;

/// What kind of mistake a request made (the `kind` of an error response).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ErrorKind {
    /// The line is not UTF-8, not JSON, or not a JSON object.
    Json,
    /// The line is longer than [`MAX_REQUEST_BYTES`].
    TooLong,
    /// A request came before `hello`, or `hello` asked for another version.
    Handshake,
    /// `op` names no request.
    UnknownOp,
    /// A required field is absent.
    MissingField,
    /// A field has the wrong JSON type, or is not one this request takes.
    BadField,
    /// A field's value is refused (a packet, a filter, a rule, a duration, a file).
    BadValue,
    /// The request needs what the session does not have (a node, a scenario).
    State,
    /// An instant before the session's current time.
    Time,
}

impl ErrorKind {
    /// The name on the wire.
    pub fn name(self) -> &'static str {
        match self {
            ErrorKind::Json => "json",
            ErrorKind::TooLong => "too_long",
            ErrorKind::Handshake => "handshake",
            ErrorKind::UnknownOp => "unknown_op",
            ErrorKind::MissingField => "missing_field",
            ErrorKind::BadField => "bad_field",
            ErrorKind::BadValue => "bad_value",
            ErrorKind::State => "state",
            ErrorKind::Time => "time",
        }
    }
}

/// A refused request: what kind of mistake, in which field, what was expected.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServeError {
    /// The kind.
    pub kind: ErrorKind,
    /// The field at fault (`packet`, `objects`), if one is.
    pub field: Option<String>,
    /// What would have been taken.
    pub expected: String,
    /// What was wrong (the testkit's message, with its file, line and column where it has
    /// them).
    pub message: String,
}

impl ServeError {
    fn new(kind: ErrorKind, field: Option<&str>, expected: &str, message: String) -> Self {
        ServeError {
            kind,
            field: field.map(str::to_string),
            expected: expected.to_string(),
            message,
        }
    }

    /// A value the testkit refused.
    fn value(field: &str, expected: &str, e: impl std::fmt::Display) -> Self {
        ServeError::new(ErrorKind::BadValue, Some(field), expected, e.to_string())
    }

    /// The testkit refused something `field` gave.
    fn testkit(field: &str, expected: &str, e: TestkitError) -> Self {
        match e {
            TestkitError::Time { at, now } => ServeError::new(
                ErrorKind::Time,
                Some("at"),
                &format!("an instant at or after the current time {now}"),
                format!(
                    "time {at} is before the current time {now}: simulated time only moves forward"
                ),
            ),
            other => ServeError::value(field, expected, other),
        }
    }
}

/// What the session drives.
enum Target {
    Node(Box<Node>),
    Cluster(Box<Cluster>),
}

/// One `nfsim serve` session: a handshake, then a node or a scenario, on simulated time.
/// Feed it request lines in order ([`Session::handle_line`]); each returns its response.
#[derive(Default)]
pub struct Session {
    line: u64,
    hello: bool,
    target: Option<Target>,
    scenario: Option<ScenarioSource>,
}

/// The scenario a session loaded, and the events `apply` added to it: each `apply` checks
/// its events as part of the whole scenario, with the loader that checks a file.
struct ScenarioSource {
    /// The file (or the `name` of its text), for messages.
    name: String,
    /// Its text.
    text: String,
    /// The events applied so far, as `events:` items.
    added: Vec<Value>,
}

type Reply = Result<Map<String, Value>, ServeError>;

impl Session {
    /// A session before its `hello`.
    pub fn new() -> Session {
        Session::default()
    }

    /// Answers one request line (without its `\n`): the response, one JSON object, without
    /// its `\n`. Lines are numbered from 1 in the order given; an empty line (or one of
    /// blanks) is skipped, and answered with an empty string (write nothing).
    pub fn handle_line(&mut self, line: &[u8]) -> String {
        self.line += 1;
        if line.len() <= MAX_REQUEST_BYTES && line.iter().all(u8::is_ascii_whitespace) {
            return String::new();
        }
        let (id, op, r) = self.handle_bytes(line);
        let mut out = match r {
            Ok(mut m) => {
                m.insert("ok".into(), Value::Bool(true));
                m
            }
            Err(e) => {
                let mut m = Map::new();
                m.insert("ok".into(), Value::Bool(false));
                let mut err = Map::new();
                err.insert("kind".into(), e.kind.name().into());
                err.insert("field".into(), e.field.map_or(Value::Null, Value::String));
                err.insert("expected".into(), e.expected.into());
                err.insert("message".into(), e.message.into());
                m.insert("error".into(), Value::Object(err));
                m
            }
        };
        out.insert("line".into(), self.line.into());
        out.insert("op".into(), op.map_or(Value::Null, Value::String));
        if let Some(id) = id {
            out.insert("id".into(), id);
        }
        Value::Object(out).to_string()
    }

    fn handle_bytes(&mut self, line: &[u8]) -> (Option<Value>, Option<String>, Reply) {
        if line.len() > MAX_REQUEST_BYTES {
            let e = ServeError::new(
                ErrorKind::TooLong,
                None,
                &format!("a line of at most {MAX_REQUEST_BYTES} bytes (MAX_REQUEST_BYTES)"),
                format!("the line is longer than {MAX_REQUEST_BYTES} bytes"),
            );
            return (None, None, Err(e));
        }
        let json = || "one JSON object on the line, with an \"op\" string".to_string();
        let text = match std::str::from_utf8(line) {
            Ok(t) => t,
            Err(e) => {
                let e = ServeError::new(ErrorKind::Json, None, &json(), format!("not UTF-8: {e}"));
                return (None, None, Err(e));
            }
        };
        let obj = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(m)) => m,
            Ok(other) => {
                let e = ServeError::new(
                    ErrorKind::Json,
                    None,
                    &json(),
                    format!("a JSON {} is not an object", encode::type_name(&other)),
                );
                return (None, None, Err(e));
            }
            Err(e) => {
                let e = ServeError::new(ErrorKind::Json, None, &json(), e.to_string());
                return (None, None, Err(e));
            }
        };
        let id = obj.get("id").cloned();
        let mut req = Req::new(obj);
        let op = match req.op() {
            Ok(op) => op,
            Err(e) => return (id, None, Err(e)),
        };
        if let Some(allowed) = fields_of(&op) {
            if let Err(e) = req.only(allowed) {
                return (id, Some(op), Err(e));
            }
        }
        let r = self.dispatch(&op, &mut req);
        (id, Some(op), r)
    }

    fn dispatch(&mut self, op: &str, req: &mut Req) -> Reply {
        if op != "hello" && !self.hello {
            return Err(ServeError::new(
                ErrorKind::Handshake,
                Some("op"),
                &format!("{{\"op\":\"hello\",\"version\":{PROTOCOL_VERSION}}} first"),
                format!("{op:?} before hello: the session starts with a hello"),
            ));
        }
        match op {
            "hello" => self.hello(req),
            "node" => self.node(req),
            "scenario" => self.scenario(req),
            "state" => self.state(req),
            "flow" => self.flow(req),
            "sightings" => self.sightings(req),
            "advance" => self.advance(req),
            "conntrack" => self.conntrack(req),
            "delete" => self.delete(req),
            "rules" => self.rules(req),
            "selection" => self.selection(req),
            "restore" => self.restore(req),
            "apply" => self.apply(req),
            other => Err(ServeError::new(
                ErrorKind::UnknownOp,
                Some("op"),
                "one of hello, node, scenario, state, flow, sightings, advance, conntrack, delete, rules, selection, restore, apply",
                format!("no request {other:?}"),
            )),
        }
    }

    fn hello(&mut self, req: &mut Req) -> Reply {
        let v = req.u64("version")?.ok_or_else(|| {
            ServeError::new(
                ErrorKind::MissingField,
                Some("version"),
                &format!("the protocol version the client speaks ({PROTOCOL_VERSION})"),
                "hello without a version".into(),
            )
        })?;
        if v != PROTOCOL_VERSION {
            return Err(ServeError::new(
                ErrorKind::Handshake,
                Some("version"),
                &PROTOCOL_VERSION.to_string(),
                format!("this nfsim speaks protocol version {PROTOCOL_VERSION}, not {v}"),
            ));
        }
        self.hello = true;
        let mut m = Map::new();
        m.insert("version".into(), PROTOCOL_VERSION.into());
        m.insert("nfsim".into(), env!("CARGO_PKG_VERSION").into());
        Ok(m)
    }

    fn node(&mut self, req: &mut Req) -> Reply {
        let mut b = Node::builder();
        if let Some(n) = req.str("name")? {
            b = b.name(&n);
        }
        if let Some(a) = req.str("address")? {
            b = b.address(&a);
        }
        if let Some(l) = req.u64("prefixLen")? {
            let l = u8::try_from(l)
                .map_err(|_| ServeError::value("prefixLen", "a prefix length 8-30", l))?;
            b = b.prefix_len(l);
        }
        if req.has("podCidr") {
            b = b.pod_cidr(req.nullable_str("podCidr")?.as_deref());
        }
        if let Some(s) = req.u64("seed")? {
            b = b.seed(s);
        }
        for (k, v) in req.str_map("sysctls")? {
            b = b.sysctl(&k, &v);
        }
        if let Some(r) = req.str("release")? {
            let rel = Release::parse(&r).ok_or_else(|| {
                ServeError::value(
                    "release",
                    "a kube-proxy release: none, v1.31, v1.31-fixed, v1.32, v1.33, latest",
                    format!("no release {r:?}"),
                )
            })?;
            b = b.release(rel);
        }
        if let Some(m) = req.str("mode")? {
            b = b.mode(match m.as_str() {
                "iptables" => crate::testkit::ProxyMode::Iptables,
                "nftables" => crate::testkit::ProxyMode::Nftables,
                _ => {
                    return Err(ServeError::value(
                        "mode",
                        "iptables or nftables",
                        format!("no mode {m:?}"),
                    ))
                }
            });
        }
        if let Some(on) = req.bool("masqueradeAll")? {
            b = b.masquerade_all(on);
        }
        let rules = req.str("rules")?;
        let nft = req.str("nft")?;
        let objects = req.str("objects")?;
        if let Some(r) = &rules {
            b = b.rules(r);
        }
        if let Some(o) = &objects {
            b = b.objects(o);
        }
        let field = if objects.is_some() {
            "objects"
        } else {
            "rules"
        };
        let mut node = b.build().map_err(|e| {
            ServeError::testkit(field, "a node nfsim can build from these fields", e)
        })?;
        if let Some(text) = &nft {
            node.netns_mut()
                .nft_apply("nft", text, SimTime::ZERO)
                .map_err(|e| ServeError::value("nft", "nft -f input", e))?;
        }
        let mut m = Map::new();
        m.insert("now".into(), encode::time(node.now()));
        self.target = Some(Target::Node(Box::new(node)));
        self.scenario = None;
        Ok(m)
    }

    fn scenario(&mut self, req: &mut Req) -> Reply {
        let file = req.str("file")?;
        let yaml = req.str("yaml")?;
        let seed = req.u64("seed")?;
        let (name, text, field) = match (file, yaml) {
            (Some(f), None) => {
                let text = sim_core::input::read_text_limited(
                    std::path::Path::new(&f),
                    sim_core::input::MAX_SCENARIO_BYTES,
                    "MAX_SCENARIO_BYTES",
                )
                .map_err(|e| {
                    ServeError::value(
                        "file",
                        "a scenario file nfsim run takes",
                        format!("{f}: cannot read the scenario file: {e}"),
                    )
                })?;
                (f, text, "file")
            }
            (None, Some(y)) => (
                req.str("name")?.unwrap_or_else(|| "scenario".into()),
                y,
                "yaml",
            ),
            _ => {
                return Err(ServeError::new(
                    ErrorKind::MissingField,
                    Some("file"),
                    "exactly one of file (a path) and yaml (the scenario's text)",
                    "give the scenario as file or as yaml".into(),
                ))
            }
        };
        let mut sc = crate::scenario::load_str(&name, &text)
            .map_err(|e| ServeError::value(field, "a scenario nfsim run takes", e))?;
        if let Some(s) = seed {
            sc.seed = s;
        }
        let c = Cluster::from_scenario(sc)
            .map_err(|e| ServeError::value(field, "a scenario that starts", e))?;
        let mut m = Map::new();
        m.insert("now".into(), encode::time(c.now()));
        let nodes: Vec<Value> = c
            .simulation()
            .node_names()
            .into_iter()
            .map(Value::String)
            .collect();
        m.insert("nodes".into(), Value::Array(nodes));
        self.target = Some(Target::Cluster(Box::new(c)));
        self.scenario = Some(ScenarioSource {
            name,
            text,
            added: Vec::new(),
        });
        Ok(m)
    }

    fn node_mut(&mut self, op: &str) -> Result<&mut Node, ServeError> {
        match &mut self.target {
            Some(Target::Node(n)) => Ok(n),
            Some(Target::Cluster(_)) => Err(ServeError::new(
                ErrorKind::State,
                None,
                "a node (the node request) for this request",
                format!("{op} works on a node, and this session holds a scenario"),
            )),
            None => Err(no_target(op)),
        }
    }

    fn state(&mut self, req: &mut Req) -> Reply {
        let conntrack = req.str("conntrack")?;
        let age = req.duration("conntrackAge")?;
        let recent = req.str_map("recent")?;
        let recent_now = req.u64("recentNow")?;
        let hz = req.u64("hz")?;
        let sysctl_file = req.str("sysctlFile")?;
        let after = req.duration("after")?;
        let node = self.node_mut("state")?;
        if node.now() > SimTime::ZERO {
            return Err(ServeError::new(
                ErrorKind::State,
                None,
                "state loaded before the first flow, advance or apply",
                format!(
                    "the node is at {}: saved state is the node's state when the session starts",
                    node.now()
                ),
            ));
        }
        let recent: Vec<(String, String)> = recent.into_iter().collect();
        let mut clock = crate::explain::RecentClock {
            now: recent_now,
            ..Default::default()
        };
        if let Some(h) = hz {
            clock.hz = u32::try_from(h)
                .map_err(|_| ServeError::value("hz", "CONFIG_HZ (100, 250, 300, 1000)", h))?;
        }
        let state = crate::explain::SavedState {
            sysctl_file: sysctl_file.as_deref(),
            sysctls: &[],
            conntrack: conntrack.as_deref(),
            assumed_age: age.unwrap_or(crate::explain::DEFAULT_ASSUMED_AGE),
            recent: &recent,
            recent_clock: clock,
            after: after.unwrap_or_default(),
        };
        let loaded = crate::explain::load_saved_state(node.netns_mut(), &state).map_err(|e| {
            ServeError::value(
                "conntrack",
                "saved state nfsim trace takes (--conntrack, --recent, --sysctls)",
                e,
            )
        })?;
        node.sync_due(loaded.at)
            .map_err(|e| ServeError::testkit("at", "an instant", e))?;
        let mut m = Map::new();
        m.insert("notes".into(), loaded.notes.into());
        m.insert("warnings".into(), loaded.warnings.into());
        m.insert("now".into(), encode::time(node.now()));
        Ok(m)
    }

    /// The instant of `at` (default: the session's time now).
    fn at(&self, req: &mut Req) -> Result<SimTime, ServeError> {
        let now = match &self.target {
            Some(Target::Node(n)) => n.now(),
            Some(Target::Cluster(c)) => c.now(),
            None => SimTime::ZERO,
        };
        let at = req.instant("at")?.unwrap_or(now);
        if at < now {
            return Err(ServeError::testkit(
                "at",
                "",
                TestkitError::Time { at, now },
            ));
        }
        Ok(at)
    }

    fn flow(&mut self, req: &mut Req) -> Reply {
        let packet = req.required_str(
            "packet",
            "a packet as nfsim trace --packet takes it: udp 10.244.0.9:40000 -> 10.96.0.10:53",
        )?;
        let pkt: sim_core::Packet = packet.parse().map_err(|e| {
            ServeError::value(
                "packet",
                "a packet as nfsim trace --packet takes it: udp 10.244.0.9:40000 -> 10.96.0.10:53",
                e,
            )
        })?;
        let at = self.at(req)?;
        match &mut self.target {
            Some(Target::Cluster(c)) => {
                let from =
                    req.required_str("from", "pod NAMESPACE/NAME, host NAME or node NAME")?;
                let origin = origin(&from)?;
                c.run_until(at)
                    .map_err(|e| ServeError::testkit("at", "an instant of the run", e))?;
                let id = c.send_packet(&origin, pkt).map_err(|e| {
                    ServeError::testkit("from", "a pod, host or node of the scenario", e)
                })?;
                let mut m = Map::new();
                m.insert("flow".into(), id.into());
                m.insert("now".into(), encode::time(c.now()));
                Ok(m)
            }
            Some(Target::Node(n)) => {
                let local = req.bool("local")?.unwrap_or(false);
                let trace = req.bool("trace")?.unwrap_or(false);
                n.set_trace(trace);
                let r = if local {
                    n.send_local(at, pkt)
                } else {
                    n.send(at, pkt)
                };
                n.set_trace(false);
                let f =
                    r.map_err(|e| ServeError::testkit("packet", "a packet the node can take", e))?;
                Ok(encode::flow(&f))
            }
            None => Err(no_target("flow")),
        }
    }

    fn sightings(&mut self, req: &mut Req) -> Reply {
        let id = req.u64("flow")?.ok_or_else(|| {
            ServeError::new(
                ErrorKind::MissingField,
                Some("flow"),
                "the number a flow on the scenario returned (its flow field)",
                "sightings without a flow".into(),
            )
        })?;
        let c = match &self.target {
            Some(Target::Cluster(c)) => c,
            Some(Target::Node(_)) => {
                return Err(ServeError::new(ErrorKind::State, None, "a scenario (the scenario request)", "sightings works on a scenario, and this session holds a node: a node's flow answers at once".into()))
            }
            None => return Err(no_target("sightings")),
        };
        let id = u32::try_from(id)
            .map_err(|_| ServeError::value("flow", "the number a flow returned", id))?;
        let mut m = Map::new();
        m.insert(
            "sightings".into(),
            Value::Array(c.sightings(id).iter().map(encode::sighting).collect()),
        );
        Ok(m)
    }

    fn advance(&mut self, req: &mut Req) -> Reply {
        if !req.has("at") {
            return Err(ServeError::new(
                ErrorKind::MissingField,
                Some("at"),
                "the instant to advance to (\"90s\", or nanoseconds)",
                "advance without at".into(),
            ));
        }
        let at = self.at(req)?;
        let mut m = Map::new();
        match &mut self.target {
            Some(Target::Node(n)) => {
                let reports = n
                    .sync_due(at)
                    .map_err(|e| ServeError::testkit("at", "an instant", e))?;
                m.insert("syncs".into(), reports.len().into());
                m.insert("now".into(), encode::time(n.now()));
            }
            Some(Target::Cluster(c)) => {
                c.run_until(at)
                    .map_err(|e| ServeError::testkit("at", "an instant of the run", e))?;
                m.insert("now".into(), encode::time(c.now()));
            }
            None => return Err(no_target("advance")),
        }
        Ok(m)
    }

    fn conntrack(&mut self, req: &mut Req) -> Reply {
        let filter = req.str("filter")?.unwrap_or_default();
        let node = req.str("node")?;
        let expected = "conntrack -L options: -p udp --orig-dst 10.96.0.10 --orig-port-dst 53";
        let (entries, text, now) = match (&self.target, node) {
            (Some(Target::Node(n)), None) => (
                n.conntrack(&filter)
                    .map_err(|e| ServeError::testkit("filter", expected, e))?,
                n.conntrack_text(&filter)
                    .map_err(|e| ServeError::testkit("filter", expected, e))?,
                n.now(),
            ),
            (Some(Target::Cluster(c)), Some(node)) => (
                c.conntrack(&node, &filter)
                    .map_err(|e| cluster_err(e, &filter))?,
                c.conntrack_text(&node, &filter)
                    .map_err(|e| cluster_err(e, &filter))?,
                c.now(),
            ),
            (Some(Target::Node(_)), Some(_)) => return Err(node_field_on_node()),
            (Some(Target::Cluster(_)), None) => return Err(node_field_missing()),
            (None, _) => return Err(no_target("conntrack")),
        };
        let mut m = Map::new();
        m.insert("text".into(), text.into());
        m.insert(
            "entries".into(),
            Value::Array(entries.iter().map(|e| encode::entry(e, now)).collect()),
        );
        Ok(m)
    }

    fn delete(&mut self, req: &mut Req) -> Reply {
        let filter = req.required_str(
            "filter",
            "conntrack -D options: -p udp --orig-dst 10.96.0.10",
        )?;
        let at = self.at(req)?;
        let n = self.node_mut("delete")?;
        let gone = n.conntrack_delete(at, &filter).map_err(|e| {
            ServeError::testkit(
                "filter",
                "conntrack -D options: -p udp --orig-dst 10.96.0.10",
                e,
            )
        })?;
        let mut m = Map::new();
        m.insert("count".into(), gone.len().into());
        m.insert(
            "entries".into(),
            Value::Array(gone.iter().map(|e| encode::entry(e, at)).collect()),
        );
        m.insert("now".into(), encode::time(n.now()));
        Ok(m)
    }

    fn rules(&mut self, req: &mut Req) -> Reply {
        let format = req.str("format")?.unwrap_or_else(|| "iptables".into());
        let node = req.str("node")?;
        let nft = match format.as_str() {
            "iptables" => false,
            "nft" => true,
            other => {
                return Err(ServeError::value(
                    "format",
                    "iptables (iptables-save text) or nft (nft list ruleset)",
                    format!("no format {other:?}"),
                ))
            }
        };
        let text = match (&self.target, node) {
            (Some(Target::Node(n)), None) if nft => n.netns().nft().list_ruleset(n.now()),
            (Some(Target::Node(n)), None) => n.rules(),
            (Some(Target::Cluster(c)), Some(node)) => {
                let sim = c.simulation();
                let i = sim
                    .node_index(&node)
                    .map_err(|e| cluster_err(e.into(), ""))?;
                if nft {
                    sim.netns(i).nft().list_ruleset(c.now())
                } else {
                    sim.rules(i)
                }
            }
            (Some(Target::Node(_)), Some(_)) => return Err(node_field_on_node()),
            (Some(Target::Cluster(_)), None) => return Err(node_field_missing()),
            (None, _) => return Err(no_target("rules")),
        };
        let mut m = Map::new();
        m.insert("text".into(), text.into());
        Ok(m)
    }

    fn selection(&mut self, req: &mut Req) -> Reply {
        let chain = req.required_str("chain", "a chain of the node (KUBE-SVC-…)")?;
        let table = match req.str("table")?.as_deref() {
            None | Some("nat") => Table::Nat,
            Some("filter") => Table::Filter,
            Some("mangle") => Table::Mangle,
            Some("raw") => Table::Raw,
            Some(other) => {
                return Err(ServeError::value(
                    "table",
                    "nat, filter, mangle or raw",
                    format!("no table {other:?}"),
                ))
            }
        };
        let n = self.node_mut("selection")?;
        let s = n.selection_in(table, &chain).map_err(|e| {
            ServeError::testkit(
                "chain",
                "a chain whose rules do not depend on the packet",
                e,
            )
        })?;
        Ok(encode::selection(&s))
    }

    fn restore(&mut self, req: &mut Req) -> Reply {
        let format = req.str("format")?.unwrap_or_else(|| "iptables".into());
        let payload = req.required_str("payload", "an iptables-restore or nft -f payload")?;
        let noflush = req.bool("noflush")?.unwrap_or(false);
        let at = self.at(req)?;
        let n = self.node_mut("restore")?;
        n.sync_due(at)
            .map_err(|e| ServeError::testkit("at", "an instant", e))?;
        let mut m = Map::new();
        match format.as_str() {
            "iptables" => {
                n.netns_mut().restore(&payload, noflush).map_err(|e| {
                    ServeError::value(
                        "payload",
                        "iptables-restore input",
                        crate::explain::ExplainError::netns("payload", e),
                    )
                })?;
            }
            "nft" => {
                if noflush {
                    return Err(ServeError::new(ErrorKind::BadField, Some("noflush"), "noflush only with format iptables (nft -f has no such option: a payload flushes what it says)", "noflush with format nft".into()));
                }
                let k = n
                    .netns_mut()
                    .nft_apply("payload", &payload, at)
                    .map_err(|e| ServeError::value("payload", "nft -f input", e))?;
                m.insert("commands".into(), k.into());
            }
            other => {
                return Err(ServeError::value(
                    "format",
                    "iptables (iptables-restore) or nft (nft -f)",
                    format!("no format {other:?}"),
                ))
            }
        }
        m.insert("now".into(), encode::time(n.now()));
        Ok(m)
    }

    fn apply(&mut self, req: &mut Req) -> Reply {
        if matches!(self.target, Some(Target::Cluster(_))) {
            return self.apply_event(req);
        }
        if req.has("event") {
            return Err(ServeError::new(
                ErrorKind::BadField,
                Some("event"),
                "objects or delete: the session holds a node (event is for a scenario)",
                "event on a node".into(),
            ));
        }
        let objects = req.str("objects")?;
        let delete = req.str_map("delete")?;
        let at = self.at(req)?;
        let n = self.node_mut("apply")?;
        let reports = match (objects, delete.is_empty()) {
            (Some(yaml), true) => n
                .apply_objects(at, &yaml)
                .map_err(|e| ServeError::testkit("objects", "Service and EndpointSlice YAML", e))?,
            (None, false) => {
                let get = |k: &str| {
                    delete.get(k).cloned().ok_or_else(|| {
                        ServeError::new(ErrorKind::MissingField, Some(&format!("delete.{k}")), "delete: {kind, namespace, name}", format!("delete without {k}"))
                    })
                };
                let (kind, ns, name) = (get("kind")?, get("namespace")?, get("name")?);
                n.delete_object(at, &kind, &ns, &name)
                    .map_err(|e| ServeError::testkit("delete", "kind Service or EndpointSlice, a namespace and a name", e))?
            }
            _ => {
                return Err(ServeError::new(ErrorKind::MissingField, Some("objects"), "exactly one of objects (YAML to create or replace) and delete ({kind, namespace, name})", "apply needs objects or delete".into()))
            }
        };
        let mut m = Map::new();
        m.insert("syncs".into(), reports.len().into());
        let deleted: usize = reports
            .iter()
            .map(|r| r.deletions.iter().map(|d| d.deleted).sum::<usize>())
            .sum();
        m.insert("cleanupDeleted".into(), deleted.into());
        m.insert("now".into(), encode::time(n.now()));
        Ok(m)
    }
}

/// The fields each request takes (besides `op` and `id`), so that a misspelt one is
/// refused before the request does anything.
fn fields_of(op: &str) -> Option<&'static [&'static str]> {
    Some(match op {
        "hello" => &["version"],
        "node" => &[
            "name",
            "address",
            "prefixLen",
            "podCidr",
            "seed",
            "sysctls",
            "release",
            "mode",
            "masqueradeAll",
            "rules",
            "nft",
            "objects",
        ],
        "scenario" => &["file", "yaml", "name", "seed"],
        "state" => &[
            "conntrack",
            "conntrackAge",
            "recent",
            "recentNow",
            "hz",
            "sysctlFile",
            "after",
        ],
        "flow" => &["packet", "at", "from", "local", "trace"],
        "sightings" => &["flow"],
        "advance" => &["at"],
        "conntrack" => &["filter", "node"],
        "delete" => &["filter", "at"],
        "rules" => &["format", "node"],
        "selection" => &["chain", "table"],
        "restore" => &["format", "payload", "noflush", "at"],
        "apply" => &["objects", "delete", "at", "event"],
        _ => return None,
    })
}

impl Session {
    /// `apply` on a scenario: `event` is one item of a scenario's `events:` (as JSON), checked
    /// with the scenario's other events and those applied before, then added to the run.
    fn apply_event(&mut self, req: &mut Req) -> Reply {
        let expected = "one item of a scenario's events: list, as a JSON object ({\"at\": \"90s\", \"readiness\": {\"pod\": \"default/app\", \"ready\": false}})";
        let event = match req.take("event") {
            Some(Value::Object(m)) => Value::Object(m),
            Some(other) => {
                return Err(ServeError::new(
                    ErrorKind::BadField,
                    Some("event"),
                    expected,
                    format!("event is a JSON {}", encode::type_name(&other)),
                ))
            }
            None => {
                return Err(ServeError::new(
                    ErrorKind::MissingField,
                    Some("event"),
                    expected,
                    "apply on a scenario needs an event".into(),
                ))
            }
        };
        for f in ["objects", "delete", "at"] {
            if req.has(f) {
                return Err(ServeError::new(
                    ErrorKind::BadField,
                    Some(f),
                    "event only: the session holds a scenario (the event says its at)",
                    format!("{f} on a scenario"),
                ));
            }
        }
        let (Some(src), Some(Target::Cluster(c))) = (&mut self.scenario, &mut self.target) else {
            return Err(no_target("apply"));
        };
        let mut doc: Value = serde_saphyr::from_str(&src.text)
            .map_err(|e| ServeError::value("event", "a scenario whose text reads as YAML", e))?;
        let Some(m) = doc.as_object_mut() else {
            return Err(ServeError::value(
                "event",
                "a scenario that is a YAML mapping",
                "the scenario is not a mapping",
            ));
        };
        let mut events = match m.remove("events") {
            Some(Value::Array(a)) => a,
            _ => Vec::new(),
        };
        events.extend(src.added.iter().cloned());
        events.push(event.clone());
        let total = events.len();
        m.insert("events".into(), Value::Array(events));
        let merged = serde_json::to_string_pretty(&doc)
            .map_err(|e| ServeError::value("event", expected, e))?;
        let what = format!("{} with the events applied (as JSON)", src.name);
        let sc = crate::scenario::load_str(&what, &merged)
            .map_err(|e| ServeError::value("event", expected, e))?;
        // The loader makes one event per events: item, in order: the new one is the last.
        let Some(new) = sc.events.into_iter().nth(total - 1) else {
            return Err(ServeError::value(
                "event",
                expected,
                "the event made no action",
            ));
        };
        let at = new.at;
        c.apply(at, new.action)
            .map_err(|e| ServeError::testkit("event", expected, e))?;
        src.added.push(event);
        let mut m = Map::new();
        m.insert("at".into(), encode::time(at));
        m.insert("now".into(), encode::time(c.now()));
        Ok(m)
    }
}

fn no_target(op: &str) -> ServeError {
    ServeError::new(
        ErrorKind::State,
        None,
        "a node or scenario request first",
        format!("{op} before any node: the session has no node or scenario yet"),
    )
}

fn node_field_on_node() -> ServeError {
    ServeError::new(
        ErrorKind::BadField,
        Some("node"),
        "no node field: the session holds one node",
        "node names a scenario's node".into(),
    )
}

fn node_field_missing() -> ServeError {
    ServeError::new(
        ErrorKind::MissingField,
        Some("node"),
        "the name of one of the scenario's nodes",
        "the session holds a scenario: say which node".into(),
    )
}

fn cluster_err(e: TestkitError, filter: &str) -> ServeError {
    match e {
        TestkitError::Sim(_) => {
            ServeError::value("node", "the name of one of the scenario's nodes", e)
        }
        other => ServeError::value(
            "filter",
            &format!("conntrack -L options ({filter:?} was given)"),
            other,
        ),
    }
}

fn origin(from: &str) -> Result<Origin, ServeError> {
    let bad = || {
        ServeError::value(
            "from",
            "pod NAMESPACE/NAME, host NAME or node NAME",
            format!("no origin {from:?}"),
        )
    };
    let (kind, name) = from.split_once(' ').ok_or_else(bad)?;
    let name = name.trim().to_string();
    if name.is_empty() {
        return Err(bad());
    }
    match kind {
        "pod" => Ok(Origin::Pod(name)),
        "host" => Ok(Origin::Host(name)),
        "node" => Ok(Origin::Node(name)),
        _ => Err(bad()),
    }
}
