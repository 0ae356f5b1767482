//! The `nfsim` command: run scenarios, show a node's rules or conntrack table at an instant,
//! normalise a rules file, explain one packet (`trace`), replay a capture (`replay`).
//!
//! Flags are parsed by clap into [`Cli`], then resolved into library calls; errors are
//! reported with `anyhow` and exit code 2, failed expectations with exit code 1.

use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser, Subcommand};
use nfsim::cluster::sim::{
    DumpRecord, EndRecord, EventSink, JsonLinesSink, RunOptions, RunResult, SimError, Simulation,
    StartRecord, TextSink,
};
use nfsim::scenario::{load_file, Scenario};
use sim_core::{SimDuration, SimTime};
use std::cell::RefCell;
use std::io::{BufWriter, IsTerminal, Write};
use std::process::ExitCode;
use std::rc::Rc;

/// Deterministic simulator of Linux netfilter and conntrack for Kubernetes Service traffic.
#[derive(Parser, Debug)]
#[command(name = "nfsim", version, about)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand, Debug)]
enum Cmd {
    /// Run a scenario: print its timeline and summary; exit 1 if an expectation fails.
    Run(RunArgs),
    /// Print the iptables-save of a node at an instant, or normalise a rules file.
    Rules(RulesArgs),
    /// Print a node's `conntrack -L` at an instant.
    Conntrack(ConntrackArgs),
    /// Explain one packet rule by rule, through every hook, to its verdict.
    ///
    /// The node: eth0 with --node-addr/--node-prefix and a default route via the subnet's
    /// first address; with --pod-cidr, a bridge cni0 holding the CIDR's first address. The
    /// packet enters on cni0 if its source is in the pod CIDR, else on eth0, or takes OUTPUT
    /// with --local. --all-branches forces each statistic rule met both ways and lists every
    /// outcome with its exact probability (the kernel's round(p × 2^31) / 2^31).
    Trace(TraceArgs),
    /// Push a pcap capture through a ruleset, packet by packet.
    ///
    /// The node is built as for `nfsim trace`. Each packet enters at its capture time
    /// (relative to the first): a source address of the node itself takes OUTPUT, a source in
    /// the pod CIDR enters on cni0, any other on eth0.
    Replay(ReplayArgs),
    /// Run a scenario across many seeds and --set combinations: JSON lines out, one per run,
    /// then the aggregate (pass rates with 95 % Wilson intervals, distributions of each
    /// client's figures); a table of the aggregate on stderr.
    ///
    /// Runs are numbered combination by combination (the first --set varies slowest), seeds
    /// in increasing order within each; the output is in run order, the same bytes whatever
    /// --jobs. `nfsim sweep merge` puts --shard outputs back together.
    Sweep(SweepArgs),
}

#[derive(Args, Debug)]
struct RunArgs {
    /// The scenario file.
    file: String,
    /// Override the scenario's seed.
    #[arg(long)]
    seed: Option<u64>,
    /// Stop at this simulated time (e.g. 10m); expectations after it (or at the end) are skipped.
    #[arg(long)]
    until: Option<SimDuration>,
    /// Also write the timeline as JSON lines to FILE (`-`: to stdout, instead of the text;
    /// schema in docs/json-schema.md).
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// Also write the run as one self-contained HTML page to FILE: swimlanes over simulated
    /// time (clients, conntrack entries, pods, EndpointSlices, kube-proxy), the
    /// expectations and the command that replays the run.
    #[arg(long, value_name = "FILE")]
    report: Option<String>,
    /// Print every node's `conntrack -L` at this simulated time (repeatable).
    #[arg(long, value_name = "AT")]
    dump_conntrack: Vec<SimDuration>,
    /// Leave conntrack events out of the timeline.
    #[arg(long)]
    no_conntrack_events: bool,
    /// Show progress on stderr (default: only when stderr is a terminal).
    #[arg(long)]
    progress: bool,
    /// Write what `tcpdump -i IF` would capture on every node's eth0 and every pod's veth
    /// into DIR (created if missing), one pcap file per interface: NODE-eth0.pcap,
    /// NODE-veth-POD.pcap (see the README's "Captures" section).
    #[arg(long, value_name = "DIR")]
    pcap: Option<String>,
    /// The Unix time of the scenario's start, for the --pcap timestamps (default 0,
    /// 1970-01-01 UTC, as `nfsim rules --epoch`).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    epoch: u64,
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct RulesArgs {
    #[command(subcommand)]
    sub: Option<RulesSub>,
    /// The scenario file.
    file: Option<String>,
    /// The node.
    #[arg(long)]
    node: Option<String>,
    /// The simulated time (default: the end of the run).
    #[arg(long)]
    at: Option<SimDuration>,
    /// Only this table, as `iptables-save -t` (with --list: the table listed, default filter).
    #[arg(short = 't', long = "table", value_name = "TABLE")]
    table: Option<String>,
    /// Counters, as `iptables-save -c`.
    #[arg(short = 'c', long = "counters")]
    counters: bool,
    /// `iptables -t TABLE -L -n -v` instead of iptables-save.
    #[arg(long)]
    list: bool,
    /// The Unix time of the scenario's start, for the `# Generated by` / `# Completed on`
    /// lines (which print the simulated instant as a date; default 0, 1970-01-01 UTC).
    #[arg(long, value_name = "SECONDS", default_value_t = 0)]
    epoch: u64,
}

#[derive(Subcommand, Debug)]
enum RulesSub {
    /// Read iptables-save or iptables-restore text and print what iptables-save would show.
    Normalize {
        /// The rules file.
        file: String,
        /// Keep counters, as `iptables-restore -c` and `iptables-save -c`.
        #[arg(short, long)]
        counters: bool,
        /// Create this nfacct object before loading, as `nfacct add NAME` (repeatable).
        #[arg(long, value_name = "NAME")]
        nfacct: Vec<String>,
    },
}

#[derive(Args, Debug)]
struct ConntrackArgs {
    /// The scenario file.
    file: String,
    /// The node.
    #[arg(long)]
    node: String,
    /// The simulated time (-L, -C, -S, -D; default: the end of the run).
    #[arg(long)]
    at: Option<SimDuration>,
    /// With -E: the first instant of the events shown.
    #[arg(long, value_name = "T1")]
    from: Option<SimDuration>,
    /// With -E: the last instant of the events shown (default: the end of the run).
    #[arg(long, value_name = "T2")]
    to: Option<SimDuration>,
    /// conntrack's own command and filters, as conntrack-tools 1.4.7 takes them: `-L`
    /// (default), `-C`, `-S`, `-E`, or `-D` (shown, not applied: the run is read-only), then
    /// filters such as `-p udp --orig-dst 10.96.0.10 --dport 53 --dst-nat --state
    /// ESTABLISHED --mark 0x4000/0x4000`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        value_name = "CONNTRACK ARGS"
    )]
    args: Vec<String>,
}

/// The node a packet is explained on (`nfsim trace`, `nfsim replay`).
#[derive(Args, Debug)]
struct NodeArgs {
    /// The node's address on eth0; the default route goes via the subnet's first address.
    #[arg(long, default_value_t = nfsim::explain::DEFAULT_NODE_ADDR.to_string())]
    node_addr: String,
    /// The prefix length of eth0's subnet.
    #[arg(long, default_value_t = nfsim::explain::DEFAULT_NODE_PREFIX)]
    node_prefix: u8,
    /// The pod CIDR, directly connected through the bridge cni0 (which holds its first
    /// address); packets from it enter on cni0. Without it, everything enters on eth0.
    #[arg(long)]
    pod_cidr: Option<String>,
    /// The seed of the node's random streams (statistic draws, NAT port offsets).
    #[arg(long, default_value_t = 1)]
    seed: u64,
}

impl NodeArgs {
    fn spec(&self) -> Result<nfsim::explain::NodeSpec> {
        Ok(nfsim::explain::NodeSpec::parse(
            &self.node_addr,
            self.node_prefix,
            self.pod_cidr.as_deref(),
            self.seed,
        )?)
    }
}

/// A real node's `recent` lists (sessionAffinity: ClientIP) as the starting state.
#[derive(Args, Debug)]
struct RecentArgs {
    /// A copy of a real node's `/proc/net/xt_recent/NAME` loaded into the rules' recent list
    /// NAME (kube-proxy's ClientIP affinity lists are named after the KUBE-SEP chain;
    /// repeatable).
    #[arg(long = "recent", value_name = "NAME=FILE")]
    lists: Vec<String>,
    /// The node's `jiffies` when the files were read (`grep -m1 ^jiffies /proc/timer_list`);
    /// default: the newest stamp in the files.
    #[arg(long = "recent-jiffies", value_name = "JIFFIES", requires = "lists")]
    jiffies: Option<u64>,
    /// The node kernel's CONFIG_HZ, jiffies per second (`1000` on RHEL and Fedora kernels).
    #[arg(long = "recent-hz", value_name = "HZ", default_value_t = sim_netfilter::DEFAULT_HZ,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    hz: u32,
}

impl RecentArgs {
    /// `(NAME, FILE)` pairs, or an error naming the malformed one.
    fn pairs(&self) -> Result<Vec<(String, String)>> {
        self.lists
            .iter()
            .map(|kv| match kv.split_once('=') {
                Some((n, f)) if !n.is_empty() && !f.is_empty() => {
                    Ok((n.to_string(), f.to_string()))
                }
                _ => Err(anyhow!(
                    "--recent {kv:?}: expected NAME=FILE (the list's name, = and the file)"
                )),
            })
            .collect()
    }

    fn clock(&self) -> nfsim::explain::RecentClock {
        nfsim::explain::RecentClock {
            now: self.jiffies,
            hz: self.hz,
        }
    }
}

#[derive(Args, Debug)]
struct TraceArgs {
    /// A scenario: trace on its node --node as it is at --at (its interfaces, routes, rules
    /// and conntrack table; the run is not changed).
    scenario: Option<String>,
    /// The scenario's node.
    #[arg(long, requires = "scenario")]
    node: Option<String>,
    /// The scenario's instant (default: its start).
    #[arg(long, requires = "scenario")]
    at: Option<SimDuration>,
    /// Inside a scenario: the pod (`ns/name` or `name`) or host that sends the packet (by
    /// default the node's pod holding the source address, else from the network on eth0).
    #[arg(long, requires = "scenario", conflicts_with = "local")]
    from: Option<String>,
    /// The rules (iptables-save or iptables-restore text, loaded as `--noflush`).
    #[arg(
        long,
        required_unless_present = "scenario",
        conflicts_with = "scenario"
    )]
    rules: Option<String>,
    /// A real node's `conntrack -L` output (with or without `-o extended`) as the table the
    /// packet meets.
    #[arg(long, value_name = "FILE", conflicts_with = "scenario")]
    conntrack: Option<String>,
    /// The age of --conntrack entries whose line prints none (no delta-time=: the node had
    /// nf_conntrack_timestamp=0); it decides whether a UDP entry's next packet makes it
    /// ASSURED (more than 2 s after creation).
    #[arg(
        long,
        value_name = "AGE",
        default_value = "60s",
        requires = "conntrack"
    )]
    conntrack_age: SimDuration,
    #[command(flatten)]
    recent: RecentArgs,
    #[command(flatten)]
    node_args: NodeArgs,
    /// The packet, as `udp 10.244.2.9:40000 -> 10.96.0.10:53` (tcp takes flags, default SYN).
    #[arg(long)]
    packet: String,
    /// The packet comes from a process of the node (OUTPUT) rather than from a pod or the
    /// network (PREROUTING).
    #[arg(long)]
    local: bool,
    /// Follow every statistic branch and list each outcome with its exact probability.
    #[arg(long)]
    all_branches: bool,
    /// JSON output.
    #[arg(long)]
    json: bool,
}

#[derive(Args, Debug)]
struct ReplayArgs {
    /// The rules (iptables-save or iptables-restore text, loaded as `--noflush`).
    #[arg(long)]
    rules: String,
    #[command(flatten)]
    node: NodeArgs,
    /// Print each packet's trace.
    #[arg(long)]
    trace: bool,
    /// No line per packet: the conntrack listings and the summary only.
    #[arg(short, long, conflicts_with = "trace")]
    quiet: bool,
    /// Write what left the node to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap_out: Option<String>,
    /// Print the conntrack table (`conntrack -L` form) at this capture time (repeatable).
    #[arg(long, value_name = "T")]
    conntrack_at: Vec<SimDuration>,
    /// Set a conntrack sysctl before the replay, as `NAME=VALUE`
    /// (`nf_conntrack_udp_timeout=60`; repeatable).
    #[arg(long, value_name = "NAME=VALUE")]
    sysctl: Vec<String>,
    /// Start from this conntrack table: `conntrack -L` output of a real node.
    #[arg(long, value_name = "CT.txt")]
    conntrack: Option<String>,
    /// Write the replay as JSON lines to FILE (schema in docs/json-schema.md); `-` writes
    /// them to stdout instead of the text.
    #[arg(long, value_name = "FILE")]
    json: Option<String>,
    /// A capture taken on interface IFACE of the node, as `IFACE=FILE` (repeatable): eth0's
    /// packets come from the wire, cni0's or a pod veth's from pods. The captures are merged
    /// by time (ties in the order of the flags).
    #[arg(long, value_name = "IFACE=FILE")]
    ingress: Vec<String>,
    /// The capture (pcap or pcapng); where each packet enters is decided by its source
    /// address.
    #[arg(required_unless_present = "ingress")]
    capture: Option<String>,
}

#[derive(Args, Debug)]
#[command(args_conflicts_with_subcommands = true)]
struct SweepArgs {
    #[command(subcommand)]
    sub: Option<SweepSub>,
    /// The scenario file.
    file: Option<String>,
    /// The seeds: A..B, both included (1..10000 is 10,000 seeds), or one seed.
    #[arg(long, value_name = "A..B")]
    seeds: Option<nfsim::sweep::SeedRange>,
    /// Set a scenario field to each of these values in turn: a dotted path as the file spells
    /// it (kubeProxy.release, clients.sidecar.udp.interval, sysctls.net.netfilter.NAME) and
    /// comma-separated values (repeatable: every combination runs).
    #[arg(long = "set", value_name = "PATH=V1,V2")]
    sets: Vec<nfsim::sweep::SetAxis>,
    /// Threads (default: the machine's cores).
    #[arg(long, short)]
    jobs: Option<usize>,
    /// Run only the i-th (from 0) of N contiguous slices of the runs.
    #[arg(long, value_name = "i/N")]
    shard: Option<nfsim::sweep::Shard>,
    /// Write the JSON lines to FILE instead of stdout.
    #[arg(long, short, value_name = "FILE")]
    out: Option<String>,
    /// Print no table on stderr.
    #[arg(long, short)]
    quiet: bool,
    /// Also write the sweep as one self-contained HTML page to FILE: pass rates with their
    /// intervals, distributions of the clients' figures as histograms.
    #[arg(long, value_name = "FILE")]
    report: Option<String>,
}

#[derive(Subcommand, Debug)]
enum SweepSub {
    /// Merge shards' outputs: check every run is there once, print the whole sweep's output.
    Merge {
        /// The shards' outputs.
        #[arg(required = true)]
        files: Vec<String>,
        /// Write the JSON lines to FILE instead of stdout.
        #[arg(long, short, value_name = "FILE")]
        out: Option<String>,
        /// Print no table on stderr.
        #[arg(long, short)]
        quiet: bool,
        /// Also write the merged sweep as one self-contained HTML page to FILE.
        #[arg(long, value_name = "FILE")]
        report: Option<String>,
    },
}

fn open_out(out: Option<&str>) -> Result<Box<dyn Write>> {
    Ok(match out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {p}"))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    })
}

fn finish_sweep(
    w: &mut dyn Write,
    header: &nfsim::sweep::Header,
    runs: &[nfsim::sweep::RunRecord],
    quiet: bool,
    report: Option<&str>,
) -> Result<ExitCode> {
    let agg = nfsim::sweep::stats::aggregate(header, runs);
    writeln!(w, "{}", nfsim::sweep::aggregate_line(&agg)).context("writing the output")?;
    w.flush().context("writing the output")?;
    if let Some(path) = report {
        // The command as typed (its arguments, quoted where they hold spaces).
        let mut command = String::from("nfsim");
        for arg in std::env::args().skip(1) {
            if arg.contains(char::is_whitespace) || arg.is_empty() {
                command.push_str(&format!(" '{arg}'"));
            } else {
                command.push(' ');
                command.push_str(&arg);
            }
        }
        let html = nfsim::report::render_sweep(header, runs, &agg, &command);
        std::fs::write(path, html).with_context(|| format!("writing {path}"))?;
    }
    if !quiet {
        err_out(&nfsim::sweep::stats::render(&agg))?;
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_sweep(a: SweepArgs) -> Result<ExitCode> {
    use nfsim::sweep::{execute, header_line, merge, run_line, Sweep};
    if let Some(SweepSub::Merge {
        files,
        out,
        quiet,
        report,
    }) = a.sub
    {
        let mut inputs = Vec::new();
        for f in &files {
            let text = sim_core::input::read_text_limited(
                std::path::Path::new(f),
                sim_core::input::MAX_RESULTS_BYTES,
                "MAX_RESULTS_BYTES",
            )
            .with_context(|| format!("reading {f}"))?;
            inputs.push((f.clone(), text));
        }
        let (header, runs) = merge(&inputs)?;
        let mut w = open_out(out.as_deref())?;
        writeln!(w, "{}", header_line(&header)).context("writing the output")?;
        for r in &runs {
            writeln!(w, "{}", run_line(r)).context("writing the output")?;
        }
        return finish_sweep(&mut w, &header, &runs, quiet, report.as_deref());
    }
    let file = a.file.ok_or_else(|| {
        anyhow!("usage: nfsim sweep FILE --seeds A..B [--set PATH=V1,V2] [--jobs N] [--shard i/N] | nfsim sweep merge FILES...")
    })?;
    let seeds = a
        .seeds
        .ok_or_else(|| anyhow!("--seeds is required: which seeds to run, as 1..10000"))?;
    let text = sim_core::input::read_text_limited(
        std::path::Path::new(&file),
        sim_core::input::MAX_SCENARIO_BYTES,
        "MAX_SCENARIO_BYTES",
    )
    .with_context(|| format!("{file}: cannot read the scenario file"))?;
    let sweep = Sweep::plan(&file, &text, seeds, &a.sets)?;
    let jobs = a
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if jobs == 0 {
        return Err(anyhow!("--jobs 0: expected at least one thread"));
    }
    let mut header = sweep.header().clone();
    let range = match a.shard {
        Some(s) => {
            header.shard = Some(s.to_string());
            s.range(sweep.runs())
        }
        None => 0..sweep.runs(),
    };
    let mut w = open_out(a.out.as_deref())?;
    writeln!(w, "{}", header_line(&header)).context("writing the output")?;
    let runs = execute(&sweep, range, jobs, |r| writeln!(w, "{}", run_line(r)))?;
    finish_sweep(&mut w, &header, &runs, a.quiet, a.report.as_deref())
}

fn load(file: &str, seed: Option<u64>) -> Result<Scenario> {
    let mut sc = load_file(file).map_err(|e| anyhow!("{e}"))?;
    // Once each, to stderr: the timeline and the JSON lines stay the run's own.
    for w in &sc.warnings {
        let _ = writeln!(std::io::stderr(), "{w}");
    }
    if let Some(s) = seed {
        sc.seed = s;
    }
    Ok(sc)
}

/// An instant given on the command line must fall within the run (a later one would show the
/// state at the end as if it were later: entries that should have expired).
fn within_run(flag: &str, at: SimDuration, sc: &Scenario) -> Result<()> {
    if at > sc.duration {
        return Err(anyhow!(
            "{flag} {at} is after the end of the run ({}, the scenario's duration in {}): expected at most {}",
            sc.duration,
            sc.file,
            sc.duration
        ));
    }
    Ok(())
}

/// `--node` must name a node of the scenario.
fn known_node(node: &str, sc: &Scenario) -> Result<()> {
    if sc.nodes.iter().any(|n| n.name == node) {
        return Ok(());
    }
    Err(anyhow!(
        "--node {node:?}: no such node in {}: expected one of {}",
        sc.file,
        sc.nodes
            .iter()
            .map(|n| n.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    ))
}

/// Progress on stderr, at most every half second of wall time, only after the first second.
fn progress_printer(enabled: bool) -> Option<Box<dyn FnMut(SimTime, SimTime)>> {
    if !enabled {
        return None;
    }
    let start = std::time::Instant::now();
    let mut last = start;
    Some(Box::new(move |now: SimTime, end: SimTime| {
        let t = std::time::Instant::now();
        if t.duration_since(start).as_secs_f64() < 1.0 || t.duration_since(last).as_secs_f64() < 0.5
        {
            return;
        }
        last = t;
        let pct = if end.as_nanos() == 0 {
            100.0
        } else {
            now.as_nanos() as f64 * 100.0 / end.as_nanos() as f64
        };
        let mut e = std::io::stderr();
        let _ = write!(
            e,
            "\r[nfsim] simulated {} / {} ({pct:.0}%)",
            now.hms(),
            end.hms()
        );
        let _ = e.flush();
    }))
}

fn cmd_run(a: RunArgs) -> Result<ExitCode> {
    let mut sc = load(&a.file, a.seed)?;
    if let Some(u) = a.until {
        within_run("--until", u, &sc)?;
    }
    for &at in &a.dump_conntrack {
        within_run("--dump-conntrack", at, &sc)?;
    }
    let mut skipped = Vec::new();
    if let Some(u) = a.until {
        if u < sc.duration {
            sc.duration = u;
            let end = SimTime::ZERO + u;
            sc.expectations.retain(|x| {
                // Checks at the end of the run refer to the scenario's end, not to --until.
                let keep = x.at.is_some_and(|t| t <= end);
                if !keep {
                    skipped.push(x.name.clone());
                }
                keep
            });
        }
    }
    let show_progress = a.progress || std::io::stderr().is_terminal();
    let (file, seed, name) = (sc.file.clone(), sc.seed, sc.name.clone());
    // The timeline is written as it happens: text to stdout, JSON lines to --json (to stdout
    // instead of the text with `--json -`).
    let json_to_stdout = a.json.as_deref() == Some("-");
    let text = (!json_to_stdout).then(|| {
        let stdout = Named::new("stdout", std::io::stdout());
        Rc::new(RefCell::new(TextSink::new(BufWriter::new(stdout))))
    });
    let mut sinks: Vec<Box<dyn EventSink>> = Vec::new();
    if let Some(t) = &text {
        sinks.push(Box::new(t.clone()));
    }
    type JsonOut = Rc<RefCell<JsonLinesSink<BufWriter<Named<Box<dyn Write>>>>>>;
    let json: Option<JsonOut> = match &a.json {
        Some(path) => {
            let w: Box<dyn Write> = if json_to_stdout {
                Box::new(std::io::stdout())
            } else {
                Box::new(std::fs::File::create(path).with_context(|| format!("writing {path}"))?)
            };
            let name = if json_to_stdout { "stdout" } else { path };
            let j = Rc::new(RefCell::new(JsonLinesSink::new(BufWriter::new(
                Named::new(name, w),
            ))));
            sinks.push(Box::new(j.clone()));
            Some(j)
        }
        None => None,
    };
    // The report follows the run event by event, like the other sinks.
    let report = a
        .report
        .as_ref()
        .map(|_| Rc::new(RefCell::new(nfsim::report::Report::new(&sc))));
    if let Some(r) = &report {
        sinks.push(Box::new(r.clone()));
    }
    if let Some(t) = &text {
        let mut t = t.borrow_mut();
        let w = t.writer();
        writeln!(w, "scenario {name} (seed {seed})")?;
        if !sc.description.is_empty() {
            writeln!(w, "  {}", sc.description.trim())?;
        }
        writeln!(w)?;
    }
    if let Some(j) = &json {
        let mut j = j.borrow_mut();
        let w = j.writer();
        let start = StartRecord::new(&name, &file, seed, sc.duration.as_nanos());
        serde_json::to_writer(&mut *w, &start).map_err(std::io::Error::from)?;
        writeln!(w)?;
    }
    let opts = RunOptions {
        record_timeline: false,
        conntrack_events: !a.no_conntrack_events,
        progress: progress_printer(show_progress),
    };
    let mut b = Simulation::builder(sc).options(opts);
    for s in sinks {
        b = b.sink(s);
    }
    if let Some(dir) = &a.pcap {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("creating the --pcap directory {dir}"))?;
        let epoch_ns = a.epoch.checked_mul(1_000_000_000).ok_or_else(|| {
            anyhow!(
                "--epoch {}: more seconds than a capture's time holds",
                a.epoch
            )
        })?;
        b = b.capture(Box::new(nfsim::cluster::sim::PcapDir::new(dir, epoch_ns)));
    }
    let mut sim = b.build()?;
    let mut ats = a.dump_conntrack.clone();
    ats.sort();
    for at in ats {
        let t = SimTime::ZERO + at;
        sim.run_until(t)?;
        if let Some(text) = &text {
            let mut s = format!("{}  conntrack -L at {}:\n", t.hms(), t.hms());
            for (i, n) in sim.node_names().iter().enumerate() {
                let dump = sim.conntrack_dump(i);
                let count = dump.lines().count();
                s.push_str(&format!("--- {n} ---\n{dump}conntrack v1.4.7 (conntrack-tools): {count} flow entries have been shown.\n"));
            }
            text.borrow_mut().writer().write_all(s.as_bytes())?;
        }
        if let Some(j) = &json {
            let mut j = j.borrow_mut();
            let w = j.writer();
            for (i, n) in sim.node_names().iter().enumerate() {
                let rec = DumpRecord::new(n, t, &sim.conntrack_entries(i));
                serde_json::to_writer(&mut *w, &rec).map_err(std::io::Error::from)?;
                writeln!(w)?;
            }
        }
    }
    let result = sim.finish()?;
    if show_progress {
        let _ = write!(std::io::stderr(), "\r\x1b[K");
    }
    let mut replay = format!("nfsim run {file} --seed {seed}");
    if let Some(u) = a.until {
        replay.push_str(&format!(" --until {u}"));
    }
    if let Some(t) = &text {
        let mut t = t.borrow_mut();
        let w = t.writer();
        w.write_all(render_end(&result, &skipped).as_bytes())?;
        if !result.passed() {
            writeln!(w, "replay: {replay}")?;
        }
        w.flush()?;
    } else if !result.passed() {
        let _ = writeln!(std::io::stderr(), "replay: {replay}");
    }
    if let Some(j) = json {
        let mut j = j.borrow_mut();
        let w = j.writer();
        let end = EndRecord::new(&name, &file, seed, &result, &skipped);
        serde_json::to_writer(&mut *w, &end).map_err(std::io::Error::from)?;
        writeln!(w)?;
        w.flush()?;
    }
    if let (Some(path), Some(report)) = (&a.report, report) {
        let report = Rc::try_unwrap(report)
            .map_err(|_| anyhow!("the report is still held by the run"))?
            .into_inner();
        let html = report.finish(&result, &format!("{replay} --report {path}"), &skipped);
        std::fs::write(path, html).with_context(|| format!("writing {path}"))?;
    }
    if result.passed() {
        Ok(ExitCode::SUCCESS)
    } else {
        Ok(ExitCode::from(1))
    }
}

/// What `nfsim run` prints after the timeline: the summary and the verdicts.
fn render_end(r: &RunResult, skipped: &[String]) -> String {
    let mut s = String::from("\nsummary\n");
    s.push_str(&r.summary);
    s.push_str("\nexpectations\n");
    for x in &r.results {
        s.push_str(&format!(
            "  {} {} (line {}, at {}): {}\n",
            if x.passed { "PASS" } else { "FAIL" },
            x.name,
            x.line,
            x.at,
            x.detail
        ));
    }
    for n in skipped {
        s.push_str(&format!("  SKIP {n} (after --until)\n"));
    }
    let failed = r.results.iter().filter(|x| !x.passed).count();
    s.push_str(&format!(
        "\n{} passed, {} failed\n",
        r.results.len() - failed,
        failed
    ));
    s
}

fn cmd_rules(a: RulesArgs) -> Result<ExitCode> {
    if let Some(RulesSub::Normalize {
        file,
        counters,
        nfacct,
    }) = a.sub
    {
        let text = nfsim::explain::read_text(&file)?;
        out(&nfsim::explain::normalize(&text, &file, counters, &nfacct)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let file = a.file.ok_or_else(|| {
        anyhow!("usage: nfsim rules FILE --node N [--at T] | nfsim rules normalize RULES.txt")
    })?;
    let node = a
        .node
        .ok_or_else(|| anyhow!("--node is required: which node's rules to print"))?;
    let sc = load(&file, None)?;
    if let Some(at) = a.at {
        within_run("--at", at, &sc)?;
    }
    known_node(&node, &sc)?;
    let at = SimTime::ZERO + a.at.unwrap_or(sc.duration);
    let mut sim = Simulation::new(sc, RunOptions::default())?;
    let n = sim.node_index(&node)?;
    sim.run_until(at)?;
    let table = match &a.table {
        Some(t) => Some(
            sim_netfilter::Table::from_name(t)
                .ok_or_else(|| anyhow!("-t {t:?}: no such table (raw, mangle, filter, nat)"))?,
        ),
        None => None,
    };
    let ns = sim.netns(n);
    let text = if a.list {
        ns.ruleset()
            .list(
                ns.rules_state(),
                table.unwrap_or(sim_netfilter::Table::Filter),
                None,
                &sim_netfilter::ListOptions::default(),
            )
            .map_err(|e| anyhow!("{e}"))?
    } else {
        ns.ruleset().save(
            ns.rules_state(),
            &sim_netfilter::SaveOptions {
                counters: a.counters,
                timestamp: Some(a.epoch + sim.now().as_nanos() / 1_000_000_000),
                table,
            },
        )
    };
    out(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn cmd_conntrack(a: ConntrackArgs) -> Result<ExitCode> {
    use sim_conntrack::{deleted_summary, shown_summary, Filter};
    let mut args = a.args.clone();
    // The command is the first word (conntrack's own order); `-L` when none is given.
    let cmd = match args.first().map(String::as_str) {
        Some("-L" | "--dump") => 'L',
        Some("-C" | "--count") => 'C',
        Some("-S" | "--stats") => 'S',
        Some("-E" | "--event") => 'E',
        Some("-D" | "--delete") => 'D',
        _ => '?',
    };
    let cmd = if cmd == '?' {
        'L'
    } else {
        args.remove(0);
        cmd
    };
    // The real tool's own words for what it refuses, exit 2.
    let refuse = |msg: String| -> Result<ExitCode> {
        let _ = writeln!(
            std::io::stderr(),
            "conntrack v1.4.7 (conntrack-tools): {msg}\nTry `conntrack -h' or 'conntrack --help' for more information."
        );
        Ok(ExitCode::from(2))
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
        Err(m) => return refuse(m),
    };
    if event_mask.is_some() && cmd != 'E' {
        return refuse("Illegal option `--event-mask' with this command".into());
    }
    if cmd == 'E' {
        for (short, long) in [("-t", "--timeout"), ("-u", "--status"), ("-z", "--zero")] {
            if args
                .iter()
                .any(|x| x == short || x == long || x.starts_with(&format!("{long}=")))
            {
                return refuse(format!("Illegal option `{long}' with this command"));
            }
        }
    }
    if matches!(cmd, 'S' | 'C') && !args.is_empty() {
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
        return refuse(format!("Illegal option `{long}' with this command"));
    }
    let filter = match Filter::parse_args(&args) {
        Ok(f) => f,
        Err(e) => return refuse(conntrack_refusal(&e)),
    };
    if cmd == 'D' {
        if let Some(m) = filter.delete_refusal() {
            return refuse(m);
        }
    }
    let sc = load(&a.file, None)?;
    known_node(&a.node, &sc)?;
    for (flag, t) in [("--at", a.at), ("--from", from), ("--to", to)] {
        if let Some(t) = t {
            within_run(flag, t, &sc)?;
        }
    }
    let end = sc.duration;
    if cmd == 'E' {
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
                let wanted = event_mask
                    .as_ref()
                    .is_none_or(|m| m.contains(event.as_str()));
                if *node == a.node
                    && e.t_ns >= from.as_nanos()
                    && e.t_ns <= to.as_nanos()
                    && wanted
                    && filter.matches(ct)
                {
                    // `conntrack -E -o timestamp`'s prefix (`[%-.8ld.%-.6ld]\t`), with
                    // simulated seconds since the start.
                    let us = e.t_ns / 1000;
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
        'S' => {
            out(&format!("{}\n", ct.stats()))?;
        }
        'C' => {
            out(&format!("{}\n", ct.list(now, &Filter::all()).len()))?;
        }
        _ => {
            let entries = ct.list(now, &filter);
            let mut text = String::new();
            for e in &entries {
                text.push_str(&format!("{}\n", e.list_line(now)));
            }
            out(&text)?;
            let summary = if cmd == 'D' {
                deleted_summary(entries.len())
            } else {
                shown_summary(entries.len())
            };
            let _ = writeln!(std::io::stderr(), "{summary}");
            if cmd == 'D' {
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

/// conntrack-tools 1.4.7's words for a filter it refuses (checked against the real tool):
/// `unknown option `--sport'` (a protocol option before `-p`), `` `bogus' unsupported
/// protocol``, ``unknown TCP state `FOO'``; other refusals keep nfsim's own text.
/// Takes `-e/--event-mask LIST` out of conntrack's arguments: the event types it keeps
/// (`NEW`, `UPDATE`, `DESTROY`, as the timeline names them), or the real tool's refusal of a
/// bad name ("Bad parameter `X'"; names are case-insensitive, `ALL` is every type).
#[allow(clippy::type_complexity)]
fn take_event_mask(
    args: &[String],
) -> std::result::Result<
    (
        Vec<String>,
        Option<std::collections::BTreeSet<&'static str>>,
    ),
    String,
> {
    let mut rest = Vec::new();
    let mut mask: Option<std::collections::BTreeSet<&'static str>> = None;
    let mut it = args.iter();
    while let Some(x) = it.next() {
        let value = if x == "-e" || x == "--event-mask" {
            Some(
                it.next()
                    .cloned()
                    .ok_or_else(|| format!("option `{x}' requires an argument"))?,
            )
        } else if let Some(v) = x.strip_prefix("--event-mask=") {
            Some(v.to_string())
        } else {
            x.strip_prefix("-e")
                .filter(|v| !v.is_empty() && !x.starts_with("--"))
                .map(str::to_string)
        };
        let Some(v) = value else {
            rest.push(x.clone());
            continue;
        };
        let m = mask.get_or_insert_with(Default::default);
        for name in v.split(',') {
            match name.to_ascii_uppercase().as_str() {
                "ALL" => m.extend(["NEW", "UPDATE", "DESTROY"]),
                "NEW" => {
                    m.insert("NEW");
                }
                "UPDATES" => {
                    m.insert("UPDATE");
                }
                "DESTROY" => {
                    m.insert("DESTROY");
                }
                _ => return Err(format!("Bad parameter `{name}'")),
            }
        }
    }
    Ok((rest, mask))
}

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
        other => other.to_string(),
    }
}

fn cmd_trace(a: TraceArgs) -> Result<ExitCode> {
    use nfsim::explain::{load_conntrack, read_text, trace, trace_in, TraceOptions};
    let packet: sim_core::Packet = a
        .packet
        .parse()
        .map_err(nfsim::explain::ExplainError::from)?;
    let mut opts = TraceOptions {
        local: a.local,
        all_branches: a.all_branches,
        at: SimTime::ZERO,
    };
    let report = if let Some(file) = &a.scenario {
        let node = a
            .node
            .as_deref()
            .ok_or_else(|| anyhow!("--node is required with a scenario: which node to trace on"))?;
        if !a.recent.lists.is_empty() {
            anyhow::bail!(
                "--recent goes with --rules: a scenario's recent lists are those its own run built"
            );
        }
        let sc = load(file, None)?;
        let at = SimTime::ZERO + a.at.unwrap_or(SimDuration::ZERO);
        let seed = sc.seed;
        let mut sim = Simulation::new(sc, RunOptions::default())?;
        let n = sim.node_index(node)?;
        sim.run_until(at)?;
        let (ingress, reason) = sim.ingress_for(n, packet.src, a.from.as_deref(), a.local)?;
        opts.at = sim.now();
        let mut r = trace_in(sim.netns(n), packet, ingress, reason, seed, &opts)?;
        r.notes.push(format!(
            "{node} of {file} at {} ({} conntrack entries)",
            sim.now().hms(),
            sim.conntrack_count(n)
        ));
        r
    } else {
        let node = a.node_args.spec()?;
        let rules_file = a.rules.as_deref().unwrap_or_default();
        let rules = read_text(rules_file)?;
        let mut base = node.build(&rules, rules_file)?;
        let mut notes = Vec::new();
        let recent = a.recent.pairs()?;
        if a.conntrack.is_some() || !recent.is_empty() {
            // Entries are loaded at an instant late enough that any age fits before it.
            opts.at = SimTime::ZERO + SimDuration::from_secs(365 * 86_400);
        }
        if let Some(ct) = &a.conntrack {
            let rep = load_conntrack(&mut base, ct, opts.at, a.conntrack_age)?;
            notes.push(format!("conntrack from {ct}: {rep}"));
        }
        if !recent.is_empty() {
            notes.extend(nfsim::explain::load_recent(
                &mut base,
                &recent,
                a.recent.clock(),
                opts.at,
            )?);
        }
        let mut r = trace(&node, &base, packet, &opts)?;
        r.notes = notes;
        r
    };
    if a.json {
        out(&format!("{}\n", report.json()))?;
    } else {
        out(&report.text())?;
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_replay(a: ReplayArgs) -> Result<ExitCode> {
    use nfsim::explain::{read_text, replay_inputs, ReplayInput, ReplayOptions, ReplayOutput, Tap};
    use sim_core::pcap::{read_file, ReadOptions};
    let node = a.node.spec()?;
    let rules = read_text(&a.rules)?;
    let mut base = node.build(&rules, &a.rules)?;
    for kv in &a.sysctl {
        let (name, value) = kv
            .split_once('=')
            .ok_or_else(|| anyhow!("--sysctl {kv:?}: expected NAME=VALUE"))?;
        base.conntrack_mut()
            .sysctls_mut()
            .set(name.trim(), value.trim())
            .map_err(|e| anyhow!("--sysctl {kv:?}: {e}"))?;
    }
    let mut loaded = None;
    if let Some(ct) = &a.conntrack {
        let text = read_text(ct)?;
        let entries = sim_conntrack::parse_listing(&text).map_err(|e| anyhow!("{ct}: {e}"))?;
        let report = sim_conntrack::load_listing(
            base.conntrack_mut(),
            SimTime::ZERO,
            &entries,
            SimDuration::ZERO,
        )
        .map_err(|e| anyhow!("{ct}: {e}"))?;
        loaded = Some(format!("conntrack from {ct}: {report}"));
    }
    // The captures in the order given: the positional one first, then each --ingress.
    let mut named: Vec<(Option<String>, String)> = Vec::new();
    if let Some(c) = &a.capture {
        named.push((None, c.clone()));
    }
    for i in &a.ingress {
        let (iface, file) = i
            .split_once('=')
            .filter(|(n, f)| !n.is_empty() && !f.is_empty())
            .ok_or_else(|| {
                anyhow!("--ingress {i:?}: expected IFACE=FILE, the interface the capture was taken on and the file (eth0=a.pcap)")
            })?;
        named.push((Some(iface.to_string()), file.to_string()));
    }
    let mut captures = Vec::with_capacity(named.len());
    let mut taps = Vec::with_capacity(named.len());
    for (iface, file) in &named {
        taps.push(match iface {
            Some(n) => Tap::for_interface(&node, n)?,
            None => Tap::BySource,
        });
        captures.push(read_file(file, &ReadOptions::default())?);
    }
    let inputs: Vec<ReplayInput> = named
        .iter()
        .zip(&captures)
        .zip(&taps)
        .map(|(((iface, file), capture), &tap)| ReplayInput {
            capture,
            file,
            interface: iface.as_deref(),
            tap,
        })
        .collect();
    let json_to_stdout = a.json.as_deref() == Some("-");
    let opts = ReplayOptions {
        trace: a.trace,
        pcap_out: a.pcap_out.clone(),
        conntrack_at: a.conntrack_at.iter().map(|d| SimTime::ZERO + *d).collect(),
        quiet: a.quiet,
    };
    let mut pcap = match &a.pcap_out {
        Some(path) => Some(BufWriter::with_capacity(
            1 << 16,
            Named::new(
                path,
                std::fs::File::create(path).with_context(|| format!("writing {path}"))?,
            ),
        )),
        None => None,
    };
    let mut json: Option<BufWriter<Named<Box<dyn Write>>>> = match &a.json {
        Some(path) => {
            let w: Box<dyn Write> = if json_to_stdout {
                Box::new(std::io::stdout())
            } else {
                Box::new(std::fs::File::create(path).with_context(|| format!("writing {path}"))?)
            };
            let name = if json_to_stdout { "stdout" } else { path };
            Some(BufWriter::new(Named::new(name, w)))
        }
        None => None,
    };
    let stdout = std::io::stdout();
    let mut text = (!json_to_stdout).then(|| BufWriter::new(Named::new("stdout", stdout.lock())));
    if let (Some(l), Some(w)) = (loaded, text.as_mut()) {
        writeln!(w, "{l}")?;
    }
    replay_inputs(
        &node,
        base,
        &inputs,
        &opts,
        ReplayOutput {
            text: text.as_mut().map(|w| w as &mut dyn Write),
            json: json.as_mut().map(|w| w as &mut dyn Write),
            pcap: pcap.as_mut().map(|w| w as &mut dyn Write),
        },
    )?;
    for w in [
        text.as_mut().map(|w| w as &mut dyn Write),
        json.as_mut().map(|w| w as &mut dyn Write),
        pcap.as_mut().map(|w| w as &mut dyn Write),
    ]
    .into_iter()
    .flatten()
    {
        w.flush()?;
    }
    Ok(ExitCode::SUCCESS)
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run(a) => cmd_run(a),
        Cmd::Rules(a) => cmd_rules(a),
        Cmd::Conntrack(a) => cmd_conntrack(a),
        Cmd::Trace(a) => cmd_trace(a),
        Cmd::Replay(a) => cmd_replay(a),
        Cmd::Sweep(a) => cmd_sweep(a),
    };
    match r {
        Ok(c) => c,
        // A closed pipe (`nfsim run X | head -1`): the reader has what it wanted; end quietly,
        // as ripgrep does.
        Err(e) if closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {}", error_text(&e));
            ExitCode::from(2)
        }
    }
}

/// The error and its causes, `: `-separated, each said once: an error whose message already
/// holds its cause's text (`cannot read F: {source}` with `#[source]`) does not repeat it.
fn error_text(e: &anyhow::Error) -> String {
    let mut s = String::new();
    for cause in e.chain() {
        let t = cause.to_string();
        if s.contains(&t) {
            continue;
        }
        if !s.is_empty() {
            s.push_str(": ");
        }
        s.push_str(&t);
    }
    s
}

/// A writer whose errors say what was being written (`writing stdout: No space left on
/// device`).
struct Named<W> {
    name: String,
    inner: W,
}

impl<W: Write> Named<W> {
    fn new(name: &str, inner: W) -> Named<W> {
        Named {
            name: name.to_string(),
            inner,
        }
    }
    fn wrap(&self, e: std::io::Error) -> std::io::Error {
        std::io::Error::new(e.kind(), format!("writing {}: {e}", self.name))
    }
}

impl<W: Write> Write for Named<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.wrap(e))
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush().map_err(|e| self.wrap(e))
    }
}

/// Writes `text` to stdout (an error, not a panic, when stdout is closed or full).
fn out(text: &str) -> Result<()> {
    write_named("stdout", std::io::stdout().lock(), text)
}

/// Writes `text` to stderr (an error, not a panic as `eprint!` would, when stderr is closed
/// or full).
fn err_out(text: &str) -> Result<()> {
    write_named("stderr", std::io::stderr().lock(), text)
}

fn write_named(name: &str, inner: impl Write, text: &str) -> Result<()> {
    let mut w = Named::new(name, inner);
    w.write_all(text.as_bytes())?;
    w.flush()?;
    Ok(())
}

/// Whether an error comes from writing to a pipe whose reader has gone.
fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<SimError>().is_some_and(|s| {
                matches!(s, SimError::Output { kind, .. } if *kind == std::io::ErrorKind::BrokenPipe)
            })
    })
}
