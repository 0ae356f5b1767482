//! A [`Reconciler`] in another process, in any language: nfsim and the process speak JSON
//! lines on the process's stdin and stdout (`docs/reconciler-protocol.md`).
//!
//! After each successful sync nfsim writes one `sync` message (the service ports and their
//! endpoints as kube-proxy now sees them, and as it saw them at the previous sync); the
//! process then makes requests, one line each, and nfsim answers each one: `list` (a
//! `conntrack -L` filter; answer `entries`), `delete` (a `conntrack -D` filter; answer
//! `deleted` with the count); `done` ends the sync's turn. The process keeps running from one
//! sync to the next.
//!
//! Determinism: the process sees simulated time only (`timeNs` in the `sync` message) and gets
//! answers that depend only on the simulation, so a deterministic program gives the same run
//! every time. The wall clock is used for one thing, the timeout on each line the process
//! owes: a process that does not answer within [`ExternalReconciler::timeout`] is an error,
//! never a hang.
//!
//! Every way the process can misbehave — it cannot start, it exits, it writes a line that is
//! not a JSON object of a known `type`, a filter with an unknown option, too many requests, or
//! nothing in time — ends its turn with [`CleanupReport::error`] set to a message that names
//! the command, the node, the simulated time and the offending line; the simulation stops
//! with that error (`SimError::Reconciler`).

use super::cleanup::{
    CleanupDeletion, CleanupInput, CleanupReport, ConntrackOps, CtEntry, CtFilter, Reconciler,
};
use super::model::ProxyState;
use crate::k8s::Protocol;
use serde_json::{json, Value};
use sim_core::SimTime;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::IpAddr;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The protocol version nfsim speaks (`protocol` in the `sync` message).
pub const PROTOCOL_VERSION: u32 = 1;

/// Most requests a process may make in one sync's turn.
pub const MAX_REQUESTS_PER_SYNC: usize = 100_000;

/// Most bytes of the process's stderr quoted in an error.
const STDERR_TAIL: usize = 2000;

/// How long nfsim waits for each line the process owes, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

struct Proc {
    child: Child,
    stdin: ChildStdin,
    lines: Receiver<std::io::Result<String>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    /// Lines read so far (for messages: "line N of its output").
    read: u64,
}

impl Drop for Proc {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A reconciler process (see the module documentation).
pub struct ExternalReconciler {
    /// The program and its arguments.
    pub command: Vec<String>,
    /// The node whose kube-proxy runs it (in messages and in the `sync` message).
    pub node: String,
    /// How long to wait for each line the process owes.
    pub timeout: Duration,
    proc: Option<Proc>,
    syncs: u64,
    failed: Option<String>,
}

impl ExternalReconciler {
    /// A reconciler that will run `command` (started at the first sync).
    pub fn new(command: Vec<String>, node: &str, timeout: Duration) -> ExternalReconciler {
        ExternalReconciler {
            command,
            node: node.to_string(),
            timeout,
            proc: None,
            syncs: 0,
            failed: None,
        }
    }

    fn start(&mut self) -> Result<(), String> {
        let (prog, args) = self
            .command
            .split_first()
            .ok_or_else(|| "the command is empty".to_string())?;
        let mut child = Command::new(prog)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("cannot start it: {e}"))?;
        let stdin = child.stdin.take().ok_or("no stdin pipe")?;
        let stdout = child.stdout.take().ok_or("no stdout pipe")?;
        let mut err_pipe = child.stderr.take().ok_or("no stderr pipe")?;
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut r = BufReader::new(stdout);
            loop {
                let mut line = String::new();
                match r.read_line(&mut line) {
                    Ok(0) => break,
                    Ok(_) => {
                        if tx.send(Ok(line)).is_err() {
                            break;
                        }
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                }
            }
        });
        let stderr = Arc::new(Mutex::new(Vec::new()));
        let sink = Arc::clone(&stderr);
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n) = err_pipe.read(&mut buf) {
                if n == 0 {
                    break;
                }
                if let Ok(mut v) = sink.lock() {
                    v.extend_from_slice(&buf[..n]);
                    let len = v.len();
                    if len > 4 * STDERR_TAIL {
                        v.drain(..len - STDERR_TAIL);
                    }
                }
            }
        });
        self.proc = Some(Proc {
            child,
            stdin,
            lines: rx,
            stderr,
            read: 0,
        });
        Ok(())
    }

    /// `; it exited: exit status: 3` when the process is gone, then the tail of its stderr.
    fn postmortem(&mut self) -> String {
        let Some(p) = self.proc.as_mut() else {
            return String::new();
        };
        // Give a dying process, and the stderr reader, a moment to finish.
        std::thread::sleep(Duration::from_millis(100));
        let status = match p.child.try_wait() {
            Ok(Some(s)) => format!("; it exited: {s}"),
            _ => String::new(),
        };
        let v = p.stderr.lock().map(|v| v.clone()).unwrap_or_default();
        let s = String::from_utf8_lossy(&v);
        let s = s.trim_end();
        if s.is_empty() {
            status
        } else {
            let start = s.len().saturating_sub(STDERR_TAIL);
            let start = (start..=s.len())
                .find(|&i| s.is_char_boundary(i))
                .unwrap_or(s.len());
            format!("{status}; its stderr ends with:\n{}", &s[start..])
        }
    }

    fn send(&mut self, msg: &Value) -> Result<(), String> {
        let p = self.proc.as_mut().ok_or("not running")?;
        let mut line = msg.to_string();
        line.push('\n');
        p.stdin
            .write_all(line.as_bytes())
            .and_then(|_| p.stdin.flush())
            .map_err(|e| format!("writing to it failed ({e}): it has probably exited"))
    }

    /// The next line the process writes, within the timeout.
    fn recv(&mut self) -> Result<(u64, String), String> {
        let timeout = self.timeout;
        let p = self.proc.as_mut().ok_or("not running")?;
        match p.lines.recv_timeout(timeout) {
            Ok(Ok(line)) => {
                p.read += 1;
                Ok((p.read, line))
            }
            Ok(Err(e)) => Err(format!("reading its output failed: {e}")),
            Err(RecvTimeoutError::Timeout) => Err(format!(
                "no answer within {} s (after {} lines of output)",
                timeout.as_secs_f64(),
                p.read
            )),
            Err(RecvTimeoutError::Disconnected) => Err(format!(
                "it closed its output after {} lines, before `done`",
                p.read
            )),
        }
    }

    fn turn(
        &mut self,
        now: SimTime,
        input: &CleanupInput<'_>,
        ct: &mut dyn ConntrackOps,
        report: &mut CleanupReport,
    ) -> Result<(), String> {
        if self.proc.is_none() {
            self.start()?;
        }
        self.syncs += 1;
        let msg = json!({
            "type": "sync",
            "protocol": PROTOCOL_VERSION,
            "node": self.node,
            "sync": self.syncs,
            "timeNs": now.as_nanos(),
            "time": now.hms().to_string(),
            "services": services_json(input.after),
            "previousServices": services_json(input.before),
        });
        self.send(&msg)?;
        for _ in 0..MAX_REQUESTS_PER_SYNC {
            let (n, line) = self.recv()?;
            let bad = |what: String| format!("line {n} of its output {line:?}: {what}");
            let v: Value =
                serde_json::from_str(line.trim()).map_err(|e| bad(format!("not JSON ({e})")))?;
            let kind = v
                .get("type")
                .and_then(Value::as_str)
                .ok_or_else(|| bad("expected a JSON object with a string \"type\"".into()))?;
            match kind {
                "done" => return Ok(()),
                "list" => {
                    let text = filter_text(&v).map_err(&bad)?;
                    let f = parse_filter(&text).map_err(&bad)?;
                    let entries = ct.list(&f);
                    report.listed += entries.len();
                    report
                        .requests
                        .push(format!("list {text} → {} entries", entries.len()));
                    let answer = json!({
                        "type": "entries",
                        "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
                    });
                    self.send(&answer)?;
                }
                "delete" => {
                    let text = filter_text(&v).map_err(&bad)?;
                    let f = parse_filter(&text).map_err(&bad)?;
                    let reason = v
                        .get("reason")
                        .and_then(Value::as_str)
                        .unwrap_or("external reconciler")
                        .to_string();
                    let deleted = ct.delete(&f);
                    report
                        .requests
                        .push(format!("delete {text} → {deleted} deleted ({reason})"));
                    report.deletions.push(CleanupDeletion {
                        filter: f,
                        deleted,
                        reason,
                    });
                    self.send(&json!({"type": "deleted", "count": deleted}))?;
                }
                other => {
                    return Err(bad(format!(
                        "unknown type {other:?}: expected \"list\", \"delete\" or \"done\""
                    )))
                }
            }
        }
        Err(format!(
            "more than {MAX_REQUESTS_PER_SYNC} requests in one sync (MAX_REQUESTS_PER_SYNC)"
        ))
    }
}

fn filter_text(v: &Value) -> Result<String, String> {
    match v.get("filter") {
        None => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(_) => Err("\"filter\" must be a string of conntrack options".into()),
    }
}

/// Parses `conntrack -L`/`-D` filter options into the filter kube-proxy's cleanups use:
/// `-p`, `-s/--orig-src`, `-d/--orig-dst`, `-r/--reply-src`, `-q/--reply-dst`,
/// `--sport/--orig-port-src`, `--dport/--orig-port-dst`, `--reply-port-src`,
/// `--reply-port-dst`. Ports need `-p` first, as conntrack-tools requires.
pub fn parse_filter(text: &str) -> Result<CtFilter, String> {
    let mut f = CtFilter::default();
    let words: Vec<&str> = text.split_whitespace().collect();
    let mut i = 0;
    while i < words.len() {
        let opt = words[i];
        let val = words
            .get(i + 1)
            .ok_or_else(|| format!("filter {text:?}: option {opt} needs a value"))?;
        let ip = || -> Result<IpAddr, String> {
            val.parse()
                .map_err(|_| format!("filter {text:?}: {opt} {val:?} is not an IP address"))
        };
        let port = || -> Result<u16, String> {
            if f.proto.is_none() {
                return Err(format!(
                    "filter {text:?}: {opt} needs -p tcp|udp|sctp before it (as conntrack does)"
                ));
            }
            val.parse()
                .map_err(|_| format!("filter {text:?}: {opt} {val:?} is not a port 0-65535"))
        };
        match opt {
            "-p" | "--proto" => {
                f.proto = Some(match *val {
                    "udp" => 17,
                    "tcp" => 6,
                    "sctp" => 132,
                    other => {
                        return Err(format!(
                            "filter {text:?}: -p {other:?}: expected udp, tcp or sctp"
                        ))
                    }
                })
            }
            "-s" | "--orig-src" | "--src" => f.orig_src = Some(ip()?),
            "-d" | "--orig-dst" | "--dst" => f.orig_dst = Some(ip()?),
            "-r" | "--reply-src" => f.reply_src = Some(ip()?),
            "-q" | "--reply-dst" => f.reply_dst = Some(ip()?),
            "--sport" | "--orig-port-src" => f.orig_sport = Some(port()?),
            "--dport" | "--orig-port-dst" => f.orig_dport = Some(port()?),
            "--reply-port-src" => f.reply_sport = Some(port()?),
            "--reply-port-dst" => f.reply_dport = Some(port()?),
            other => {
                return Err(format!(
                    "filter {text:?}: unknown or unsupported option {other:?} (expected -p, --orig-src, --orig-dst, --reply-src, --reply-dst, --orig-port-src, --orig-port-dst, --reply-port-src, --reply-port-dst)"
                ))
            }
        }
        i += 2;
    }
    Ok(f)
}

fn proto_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        n => n.to_string(),
    }
}

fn entry_json(e: &CtEntry) -> Value {
    let t = |t: &super::cleanup::CtTuple| json!({"src": t.src.to_string(), "dst": t.dst.to_string(), "sport": t.sport, "dport": t.dport});
    json!({"proto": proto_name(e.proto), "orig": t(&e.orig), "reply": t(&e.reply)})
}

fn services_json(state: &ProxyState) -> Vec<Value> {
    state
        .services
        .iter()
        .map(|(spn, svc)| {
            let eps: Vec<Value> = state
                .endpoints_of(spn)
                .iter()
                .map(|e| {
                    json!({
                        "ip": e.ip.to_string(),
                        "port": e.port,
                        "ready": e.ready,
                        "serving": e.serving,
                        "terminating": e.terminating,
                        "local": e.is_local,
                    })
                })
                .collect();
            json!({
                "name": spn.to_string(),
                "protocol": match svc.protocol {
                    Protocol::UDP => "UDP",
                    Protocol::TCP => "TCP",
                    Protocol::SCTP => "SCTP",
                },
                "clusterIP": svc.cluster_ip.to_string(),
                "port": svc.port,
                "nodePort": svc.node_port,
                "externalIPs": svc.external_ips.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
                "loadBalancerIPs": svc.load_balancer_vips.iter().map(|i| i.to_string()).collect::<Vec<_>>(),
                "endpoints": eps,
            })
        })
        .collect()
}

impl Reconciler for ExternalReconciler {
    fn name(&self) -> String {
        format!("external `{}`", self.command.join(" "))
    }

    fn after_sync(
        &mut self,
        now: SimTime,
        input: &CleanupInput<'_>,
        ct: &mut dyn ConntrackOps,
    ) -> CleanupReport {
        let mut report = CleanupReport {
            ran: true,
            ..CleanupReport::default()
        };
        if let Some(e) = &self.failed {
            report.error = Some(e.clone());
            return report;
        }
        if let Err(e) = self.turn(now, input, ct, &mut report) {
            let tail = self.postmortem();
            let msg = format!(
                "reconciler `{}` on node {} at {} (sync {}): {e}{tail}",
                self.command.join(" "),
                self.node,
                now.hms(),
                self.syncs,
            );
            self.proc = None;
            self.failed = Some(msg.clone());
            report.error = Some(msg);
        }
        report
    }
}
