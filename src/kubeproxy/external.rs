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

/// Most bytes of one line the process writes, its `\n` included: a request is a filter of a
/// few options and a short reason, far below it. A longer line ends the turn with an error
/// after reading no more than this much of it.
pub const MAX_LINE_BYTES: usize = 4096;

/// Most characters of a line (or of a word in it) quoted in an error.
const EXCERPT_CHARS: usize = 100;

/// Most bytes of the process's stderr quoted in an error.
const STDERR_TAIL: usize = 2000;

/// How long nfsim waits for each line the process owes, by default.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(10);

struct Proc {
    child: Child,
    stdin: ChildStdin,
    /// Each line, or what was wrong with it (too long, not UTF-8, a read error).
    lines: Receiver<Result<String, String>>,
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
                match read_line_bounded(&mut r) {
                    Ok(None) => break,
                    Ok(Some(Ok(line))) => {
                        if tx.send(Ok(line)).is_err() {
                            break;
                        }
                    }
                    // A line too long or not UTF-8: said once, and nothing more is read.
                    Ok(Some(Err(e))) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                    Err(e) => {
                        let _ = tx.send(Err(format!("could not be read ({e})")));
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
            Ok(Err(e)) => Err(format!("line {} of its output {e}", p.read + 1)),
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
            match handle_line(n, &line, ct, report)? {
                Reply::Done => return Ok(()),
                Reply::Answer(answer) => self.send(&answer)?,
            }
        }
        Err(format!(
            "more than {MAX_REQUESTS_PER_SYNC} requests in one sync (MAX_REQUESTS_PER_SYNC)"
        ))
    }
}

/// What nfsim does with one line of the process's output in its turn.
#[derive(Clone, Debug, PartialEq)]
pub enum Reply {
    /// `done`: the turn is over.
    Done,
    /// The answer to write back (`entries`, `deleted`).
    Answer(Value),
}

/// One request of the process (line `n` of its output, `\n` included or not): the request
/// carried out on `ct` and noted in `report`, and the answer to write, or a message naming
/// the line (quoted once, at most 100 characters of it) and what was wrong.
pub fn handle_line(
    n: u64,
    line: &str,
    ct: &mut dyn ConntrackOps,
    report: &mut CleanupReport,
) -> Result<Reply, String> {
    let bad = |what: String| format!("line {n} of its output {}: {what}", excerpt(line));
    let v: Value = serde_json::from_str(line.trim()).map_err(|e| bad(format!("not JSON ({e})")))?;
    let kind = v
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| bad("expected a JSON object with a string \"type\"".into()))?;
    match kind {
        "done" => Ok(Reply::Done),
        "list" => {
            let text = filter_text(&v).map_err(&bad)?;
            let f = parse_filter(&text).map_err(&bad)?;
            let entries = ct.list(&f);
            report.listed += entries.len();
            report
                .requests
                .push(format!("list {text} → {} entries", entries.len()));
            Ok(Reply::Answer(json!({
                "type": "entries",
                "entries": entries.iter().map(entry_json).collect::<Vec<_>>(),
            })))
        }
        "delete" => {
            let text = filter_text(&v).map_err(&bad)?;
            let f = parse_filter(&text).map_err(&bad)?;
            let reason = match v.get("reason") {
                None | Some(Value::Null) => "external reconciler".to_string(),
                Some(Value::String(r)) => r.clone(),
                Some(_) => return Err(bad("\"reason\" must be a string".into())),
            };
            let deleted = ct.delete(&f);
            report
                .requests
                .push(format!("delete {text} → {deleted} deleted ({reason})"));
            report.deletions.push(CleanupDeletion {
                filter: f,
                deleted,
                reason,
            });
            Ok(Reply::Answer(json!({"type": "deleted", "count": deleted})))
        }
        other => Err(bad(format!(
            "unknown type {}: expected \"list\", \"delete\" or \"done\"",
            excerpt(other)
        ))),
    }
}

/// Reads one line of at most [`MAX_LINE_BYTES`] (its `\n` included; the last line may lack
/// it): `Ok(None)` at the end, `Ok(Some(Err(what)))` for a line too long (after reading
/// [`MAX_LINE_BYTES`] + 1 bytes of it, no more) or not UTF-8, `what` quoting a bounded excerpt.
pub fn read_line_bounded<R: BufRead>(r: &mut R) -> std::io::Result<Option<Result<String, String>>> {
    let mut buf = Vec::new();
    r.take(MAX_LINE_BYTES as u64 + 1)
        .read_until(b'\n', &mut buf)?;
    if buf.is_empty() {
        return Ok(None);
    }
    if buf.len() > MAX_LINE_BYTES {
        let head = String::from_utf8_lossy(&buf[..buf.len().min(4 * EXCERPT_CHARS)]);
        return Ok(Some(Err(format!(
            "{}: longer than {MAX_LINE_BYTES} bytes (MAX_LINE_BYTES; a request is one short line)",
            excerpt(&head)
        ))));
    }
    Ok(Some(String::from_utf8(buf).map_err(|e| {
        let head = String::from_utf8_lossy(e.as_bytes());
        format!(
            "{}: not UTF-8 (invalid byte at offset {})",
            excerpt(&head),
            e.utf8_error().valid_up_to()
        )
    })))
}

/// `s` quoted, control characters escaped, cut after [`EXCERPT_CHARS`] characters.
fn excerpt(s: &str) -> String {
    sim_core::input::quote_excerpt(s, EXCERPT_CHARS)
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
            .ok_or_else(|| format!("filter: option {} needs a value", excerpt(opt)))?;
        let ip = || -> Result<IpAddr, String> {
            val.parse()
                .map_err(|_| format!("filter: {opt} {} is not an IP address", excerpt(val)))
        };
        let port = || -> Result<u16, String> {
            if f.proto.is_none() {
                return Err(format!(
                    "filter: {opt} needs -p tcp|udp|sctp before it (as conntrack does)"
                ));
            }
            val.parse()
                .map_err(|_| format!("filter: {opt} {} is not a port 0-65535", excerpt(val)))
        };
        match opt {
            "-p" | "--proto" => {
                f.proto = Some(match *val {
                    "udp" => 17,
                    "tcp" => 6,
                    "sctp" => 132,
                    other => {
                        return Err(format!(
                            "filter: -p {}: expected udp, tcp or sctp",
                            excerpt(other)
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
                    "filter: unknown or unsupported option {} (expected -p, --orig-src, --orig-dst, --reply-src, --reply-dst, --orig-port-src, --orig-port-dst, --reply-port-src, --reply-port-dst)",
                    excerpt(other)
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::kubeproxy::cleanup::MemConntrack;

    fn line(text: &str) -> Result<Reply, String> {
        handle_line(
            7,
            text,
            &mut MemConntrack::default(),
            &mut CleanupReport::default(),
        )
    }

    #[test]
    fn lines_are_read_up_to_the_limit_and_no_further() {
        let ok = format!("{}\n", "a".repeat(MAX_LINE_BYTES - 1));
        let mut r =
            std::io::Cursor::new(format!("{ok}{}\nnext\n", "b".repeat(10 * MAX_LINE_BYTES)));
        assert_eq!(read_line_bounded(&mut r).unwrap(), Some(Ok(ok)));
        let e = read_line_bounded(&mut r).unwrap().unwrap().unwrap_err();
        assert!(e.contains("longer than 4096 bytes"), "{e}");
        assert!(e.len() < 200, "{e}");
        assert_eq!(
            r.position() as usize,
            2 * MAX_LINE_BYTES + 1,
            "read no further"
        );
        // The last line may lack its newline; then the end.
        let mut r = std::io::Cursor::new(b"{\"type\":\"done\"}".to_vec());
        assert_eq!(
            read_line_bounded(&mut r).unwrap(),
            Some(Ok("{\"type\":\"done\"}".into()))
        );
        assert_eq!(read_line_bounded(&mut r).unwrap(), None);
        let mut r = std::io::Cursor::new(b"{\"type\xff\":1}\n".to_vec());
        let e = read_line_bounded(&mut r).unwrap().unwrap().unwrap_err();
        assert!(e.contains("not UTF-8 (invalid byte at offset 6)"), "{e}");
    }

    #[test]
    fn a_bad_line_is_quoted_once_and_cut() {
        let long = format!(r#"{{"type":"{}"}}"#, "z".repeat(3000));
        let e = line(&long).unwrap_err();
        assert!(
            e.starts_with("line 7 of its output \"{\\\"type\\\":\\\"zzz"),
            "{e}"
        );
        assert!(e.len() < 400, "{e}");
        let e = line(r#"{"type":"delete","filter":"-p udp --orig-dst 10.0.0.x"}"#).unwrap_err();
        assert!(
            e.ends_with("filter: --orig-dst \"10.0.0.x\" is not an IP address"),
            "{e}"
        );
        assert_eq!(e.matches("10.0.0.x").count(), 2, "{e}");
        let e = line(r#"{"type":"delete","reason":7}"#).unwrap_err();
        assert!(e.ends_with("\"reason\" must be a string"), "{e}");
        assert_eq!(line(r#"{"type":"done"}"#), Ok(Reply::Done));
        assert!(matches!(
            line(r#"{"type":"delete","filter":"-p udp"}"#),
            Ok(Reply::Answer(_))
        ));
    }
}
