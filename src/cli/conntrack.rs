//! `nfsim conntrack`: a scenario node's `conntrack -L`, `-C`, `-S`, `-D` at an instant or
//! its `-E` events over an interval, taking conntrack-tools 1.4.7's own arguments and
//! refusing what it refuses, in its words.

use super::{known_node, load, out, within_run};
use anyhow::{anyhow, Result};
use nfsim::cluster::sim::{RunOptions, Simulation};
use sim_conntrack::{deleted_summary, shown_summary, Filter};
use sim_core::{SimDuration, SimTime};
use std::cell::RefCell;
use std::collections::BTreeSet;
use std::io::Write;
use std::process::ExitCode;
use std::rc::Rc;

/// `nfsim conntrack`'s flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The scenario file.
    pub(crate) file: String,
    /// The node.
    #[arg(long)]
    pub(crate) node: String,
    /// The simulated time (-L, -C, -S, -D; default: the end of the run).
    #[arg(long)]
    pub(crate) at: Option<SimDuration>,
    /// With -E: the first instant of the events shown.
    #[arg(long, value_name = "T1")]
    pub(crate) from: Option<SimDuration>,
    /// With -E: the last instant of the events shown (default: the end of the run).
    #[arg(long, value_name = "T2")]
    pub(crate) to: Option<SimDuration>,
    /// The Unix time of the scenario's start, for the dates `-o ktimestamp` prints in
    /// `[start=…]` (default 0, 1970-01-01 UTC, as `nfsim rules --epoch`).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    pub(crate) epoch: u64,
    /// conntrack's own command and filters, as conntrack-tools 1.4.7 takes them: `-L`
    /// (default), `-C`, `-S`, `-E`, or `-D` (shown, not applied: the run is read-only), then
    /// filters such as `-p udp --orig-dst 10.96.0.10 --dport 53 --dst-nat --state
    /// ESTABLISHED --mark 0x4000/0x4000`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CONNTRACK ARGS"
    )]
    pub(crate) args: Vec<String>,
}

/// conntrack's command, the first of its arguments (`-L` when none is given).
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Command {
    /// `-L`, `--dump`: the table.
    List,
    /// `-C`, `--count`: how many entries.
    Count,
    /// `-S`, `--stats`: the statistics.
    Stats,
    /// `-E`, `--event`: the events over an interval.
    Event,
    /// `-D`, `--delete`: the entries that would be deleted (shown, not deleted).
    Delete,
}

/// What the arguments ask for, checked as conntrack-tools checks them.
struct Query {
    /// conntrack's command.
    cmd: Command,
    /// The filters the entries (or the events' entries) must match.
    filter: Filter,
    /// With -E and `-e`: the event types kept (all without).
    event_mask: Option<BTreeSet<&'static str>>,
    /// `--from`, from nfsim's flags or among conntrack's arguments.
    from: Option<SimDuration>,
    /// `--to`, likewise.
    to: Option<SimDuration>,
    /// `-o extended` and `-o ktimestamp`, from `-o LIST`.
    format: sim_conntrack::ListFormat,
}

/// The arguments resolved: a query, or the real tool's refusal of them (printed in its
/// words, exit 2).
enum Resolved {
    /// What to show.
    Query(Box<Query>),
    /// conntrack-tools' message for the arguments it refuses.
    Refused(String),
}

/// Splits conntrack's command from its filters, takes nfsim's `--from`/`--to` out of them,
/// and checks them as conntrack-tools 1.4.7 does.
fn resolve(a: &Args) -> Result<Resolved> {
    use Resolved::Refused;
    let mut args = a.args.clone();
    // The command is the first word (conntrack's own order); `-L` when none is given.
    let cmd = match args.first().map(String::as_str) {
        Some("-L" | "--dump") => Some(Command::List),
        Some("-C" | "--count") => Some(Command::Count),
        Some("-S" | "--stats") => Some(Command::Stats),
        Some("-E" | "--event") => Some(Command::Event),
        Some("-D" | "--delete") => Some(Command::Delete),
        _ => None,
    };
    let cmd = match cmd {
        Some(c) => {
            args.remove(0);
            c
        }
        None => Command::List,
    };
    // nfsim's --from/--to (for -E) may come among conntrack's options.
    let (mut from, mut to) = (a.from, a.to);
    let mut rest = Vec::new();
    let mut it = args.into_iter();
    while let Some(x) = it.next() {
        let (k, v) = match x.split_once('=') {
            Some((k, v)) if k == "--from" || k == "--to" => (k.to_string(), Some(v.to_string())),
            _ => (x.clone(), None),
        };
        if k == "--from" || k == "--to" {
            let v = v
                .or_else(|| it.next())
                .ok_or_else(|| anyhow!("{k} needs a simulated time (e.g. 5m)"))?;
            let d: SimDuration = v.parse().map_err(|e| anyhow!("{k} {v:?}: {e}"))?;
            if k == "--from" {
                from = Some(d);
            } else {
                to = Some(d);
            }
        } else {
            rest.push(x);
        }
    }
    let args = rest;
    // `-e/--event-mask` (only with -E: conntrack.c's commands_v_options has it for CT_EVENT
    // alone), and the options -E refuses (its row: no --timeout, --status, --zero), first in
    // conntrack.c's option-bit order as generic_opt_check reports them.
    let (args, event_mask) = match take_event_mask(&args) {
        Ok(x) => x,
        Err(m) => return Ok(Refused(m)),
    };
    let (args, output) = match take_output(&args) {
        Ok(x) => x,
        Err(m) => return Ok(Refused(m)),
    };
    let mut format = sim_conntrack::ListFormat {
        epoch_secs: a.epoch,
        ..Default::default()
    };
    if let Some(o) = &output {
        if matches!(cmd, Command::Stats | Command::Count) {
            // conntrack.c's commands_v_options: no --output with -C or -S.
            return Ok(Refused(
                "Illegal option `--output' with this command".into(),
            ));
        }
        for v in o {
            match *v {
                "extended" => format.extended = true,
                "ktimestamp" if cmd != Command::Event => format.ktimestamp = true,
                // -L's timestamp option prints nothing more (the event time is -E's).
                "timestamp" => {}
                other => {
                    return Err(anyhow!(
                        "-o {other}{}: not modelled: nfsim prints -o extended, ktimestamp (-L, -D) and timestamp",
                        if other == "ktimestamp" { " with -E" } else { "" }
                    ))
                }
            }
        }
    }
    if event_mask.is_some() && cmd != Command::Event {
        return Ok(Refused(
            "Illegal option `--event-mask' with this command".into(),
        ));
    }
    if cmd == Command::Event {
        for (short, long) in [("-t", "--timeout"), ("-u", "--status"), ("-z", "--zero")] {
            if args
                .iter()
                .any(|x| x == short || x == long || x.starts_with(&format!("{long}=")))
            {
                return Ok(Refused(format!(
                    "Illegal option `{long}' with this command"
                )));
            }
        }
    }
    if matches!(cmd, Command::Stats | Command::Count) && !args.is_empty() {
        // The long name conntrack-tools' option table gives it.
        let long = match args[0].split('=').next().unwrap_or_default() {
            "-p" | "--proto" => "--protonum",
            "-s" | "--orig-src" => "--src",
            "-d" | "--orig-dst" => "--dst",
            "-r" => "--reply-src",
            "-q" => "--reply-dst",
            "-m" => "--mark",
            "-u" => "--status",
            "-f" => "--family",
            "-n" => "--src-nat",
            "-g" => "--dst-nat",
            "-j" => "--any-nat",
            other => other,
        };
        return Ok(Refused(format!(
            "Illegal option `{long}' with this command"
        )));
    }
    let filter = match Filter::parse_args(&args) {
        Ok(f) => f,
        Err(e) => return Ok(Refused(conntrack_refusal(&e))),
    };
    if cmd == Command::Delete {
        if let Some(m) = filter.delete_refusal() {
            return Ok(Refused(m));
        }
    }
    Ok(Resolved::Query(Box::new(Query {
        cmd,
        filter,
        event_mask,
        from,
        to,
        format,
    })))
}

/// Runs the scenario to the instant (or through the interval) and prints what conntrack
/// would.
pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let q = match resolve(&a)? {
        Resolved::Query(q) => *q,
        Resolved::Refused(msg) => {
            // The real tool's own words for what it refuses, exit 2.
            let _ = writeln!(
                std::io::stderr(),
                "conntrack v1.4.7 (conntrack-tools): {msg}\nTry `conntrack -h' or 'conntrack --help' for more information."
            );
            return Ok(ExitCode::from(2));
        }
    };
    let (cmd, from, to) = (q.cmd, q.from, q.to);
    let sc = load(&a.file, None)?;
    known_node(&a.node, &sc)?;
    for (flag, t) in [("--at", a.at), ("--from", from), ("--to", to)] {
        if let Some(t) = t {
            within_run(flag, t, &sc)?;
        }
    }
    let end = sc.duration;
    if cmd == Command::Event {
        let from = SimTime::ZERO + from.unwrap_or(SimDuration::ZERO);
        let to = SimTime::ZERO + to.unwrap_or(end);
        let collect = Rc::new(RefCell::new(nfsim::cluster::sim::Collect::default()));
        let opts = RunOptions {
            record_timeline: false,
            conntrack_events: true,
            progress: None,
        };
        let mut sim = Simulation::builder(sc)
            .options(opts)
            .sink(Box::new(collect.clone()))
            .build()?;
        sim.run_until(to)?;
        let mut text = String::new();
        let mut count = 0;
        for e in &collect.borrow().events {
            if let nfsim::cluster::sim::What::Conntrack {
                node,
                line,
                event,
                ct,
                ..
            } = &e.what
            {
                // conntrack -E applies the -L filters to each event's entry (event_cb →
                // nfct_filter, as dump_cb does) and -e to its type.
                let wanted = q
                    .event_mask
                    .as_ref()
                    .is_none_or(|m| m.contains(event.as_str()));
                if *node == a.node
                    && e.t_ns >= from.as_nanos()
                    && e.t_ns <= to.as_nanos()
                    && wanted
                    && q.filter.matches(ct)
                {
                    // `conntrack -E -o timestamp`'s prefix (`[%-.8ld.%-.6ld]\t`), with
                    // simulated seconds since the start.
                    let us = e.t_ns / 1000;
                    let line = if q.format.extended {
                        extended_event(line, ct)
                    } else {
                        line.clone()
                    };
                    text.push_str(&format!(
                        "[{:08}.{:06}]\t{line}\n",
                        us / 1_000_000,
                        us % 1_000_000
                    ));
                    count += 1;
                }
            }
        }
        out(&text)?;
        let _ = writeln!(
            std::io::stderr(),
            "conntrack v1.4.7 (conntrack-tools): {count} flow events have been shown."
        );
        return Ok(ExitCode::SUCCESS);
    }
    let mut sim = Simulation::new(sc, RunOptions::default())?;
    let n = sim.node_index(&a.node)?;
    sim.run_until(SimTime::ZERO + a.at.unwrap_or(end))?;
    let now = sim.now();
    let ct = sim.netns(n).conntrack();
    match cmd {
        Command::Stats => {
            out(&format!("{}\n", ct.stats()))?;
        }
        Command::Count => {
            out(&format!("{}\n", ct.list(now, &Filter::all()).len()))?;
        }
        Command::List | Command::Delete | Command::Event => {
            let entries = ct.list(now, &q.filter);
            let mut text = String::new();
            for e in &entries {
                text.push_str(&format!("{}\n", e.list_line_as(now, q.format)));
            }
            out(&text)?;
            let summary = if cmd == Command::Delete {
                deleted_summary(entries.len())
            } else {
                shown_summary(entries.len())
            };
            let _ = writeln!(std::io::stderr(), "{summary}");
            if cmd == Command::Delete {
                let _ = writeln!(
                    std::io::stderr(),
                    "(nfsim: shown, not deleted: the run is not changed)"
                );
                // The real tool exits 1 when nothing matched.
                if entries.is_empty() {
                    return Ok(ExitCode::from(1));
                }
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// Takes every value of the option `-SHORT`/`--LONG` out of conntrack's arguments, as
/// getopt_long reads them (`-e LIST`, `-eLIST`, `--event-mask LIST`, `--event-mask=LIST`):
/// the other arguments in order, and the values in order; a missing value is the real
/// tool's "option `X' requires an argument".
fn take_option(
    args: &[String],
    short: char,
    long: &str,
) -> std::result::Result<(Vec<String>, Vec<String>), String> {
    let (short, long) = (format!("-{short}"), format!("--{long}"));
    let long_eq = format!("{long}=");
    let mut rest = Vec::new();
    let mut values = Vec::new();
    let mut it = args.iter();
    while let Some(x) = it.next() {
        let value = if *x == short || *x == long {
            Some(
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("option `{x}' requires an argument"))?,
            )
        } else if let Some(v) = x.strip_prefix(&long_eq) {
            Some(v.to_string())
        } else {
            x.strip_prefix(&short)
                .filter(|v| !v.is_empty() && !x.starts_with("--"))
                .map(str::to_string)
        };
        match value {
            Some(v) => values.push(v),
            None => rest.push(x.clone()),
        }
    }
    Ok((rest, values))
}

/// Takes `-e/--event-mask LIST` out of conntrack's arguments: the event types it keeps
/// (`NEW`, `UPDATE`, `DESTROY`, as the timeline names them), or the real tool's refusal of a
/// bad name ("Bad parameter `X'"; names are case-insensitive, `ALL` is every type).
#[allow(clippy::type_complexity)]
fn take_event_mask(
    args: &[String],
) -> std::result::Result<(Vec<String>, Option<BTreeSet<&'static str>>), String> {
    let (rest, values) = take_option(args, 'e', "event-mask")?;
    let mask = comma_names(&values, |name| match name.to_ascii_uppercase().as_str() {
        "ALL" => Some(&["NEW", "UPDATE", "DESTROY"][..]),
        "NEW" => Some(&["NEW"][..]),
        "UPDATES" => Some(&["UPDATE"][..]),
        "DESTROY" => Some(&["DESTROY"][..]),
        _ => None,
    })?;
    Ok((rest, mask.map(|m| m.into_iter().collect())))
}

/// The names of an option's comma-separated values (`-e NEW,DESTROY -e UPDATES`), each
/// turned into what it stands for by `meaning`, in order; `None` when the option was not
/// given, the real tool's `Bad parameter` for a name `meaning` does not know.
fn comma_names(
    values: &[String],
    meaning: impl Fn(&str) -> Option<&'static [&'static str]>,
) -> std::result::Result<Option<Vec<&'static str>>, String> {
    if values.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::new();
    for name in values.iter().flat_map(|v| v.split(',')) {
        out.extend(meaning(name).ok_or_else(|| format!("Bad parameter `{name}'"))?);
    }
    Ok(Some(out))
}

/// An event line (`    [NEW] udp      17 …`) as `-o extended` prints it: the layer-3 name
/// and number after the event's tag.
fn extended_event(line: &str, ct: &sim_conntrack::CtEntry) -> String {
    let (fam, num) = if ct.orig.src.is_ipv4() {
        ("ipv4", 2)
    } else {
        ("ipv6", 10)
    };
    match line.split_once("] ") {
        Some((tag, rest)) => format!("{tag}] {fam:<8} {num} {rest}"),
        None => line.to_string(),
    }
}

/// The names `-o` takes (conntrack.c's `output_type`, comma-separated; `Bad parameter` for
/// another).
const OUTPUT_NAMES: [&str; 8] = [
    "xml",
    "extended",
    "timestamp",
    "id",
    "ktimestamp",
    "labels",
    "save",
    "userspace",
];

/// Takes `-o/--output LIST` out of conntrack's arguments: the names given (each checked as
/// conntrack-tools checks them), or its refusal in its words.
#[allow(clippy::type_complexity)]
fn take_output(
    args: &[String],
) -> std::result::Result<(Vec<String>, Option<Vec<&'static str>>), String> {
    let (rest, values) = take_option(args, 'o', "output")?;
    let names = comma_names(&values, |name| {
        OUTPUT_NAMES
            .iter()
            .position(|o| *o == name)
            .map(|i| &OUTPUT_NAMES[i..=i])
    })?;
    Ok((rest, names))
}

/// conntrack-tools 1.4.7's words for a filter it refuses (checked against the real tool):
/// `unknown option `--sport'` (a protocol option before `-p`), `` `bogus' unsupported
/// protocol``, ``unknown TCP state `FOO'``; other refusals keep nfsim's own text.
fn conntrack_refusal(e: &sim_conntrack::FilterError) -> String {
    use sim_conntrack::FilterError as E;
    match e {
        E::UnknownOption { opt, .. } => format!("unknown option `{opt}'"),
        E::BadValue { opt, value, .. }
            if opt == "-p" || opt == "--proto" || opt == "--protonum" =>
        {
            format!("`{value}' unsupported protocol")
        }
        E::BadValue { opt, value, .. } if opt == "--state" => {
            format!("unknown TCP state `{value}'")
        }
        E::MismatchedFamily { .. } => "mismatched address family".to_string(),
        other => other.to_string(),
    }
}
