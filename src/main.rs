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
    /// Print every node's `conntrack -L` at this simulated time (repeatable).
    #[arg(long, value_name = "AT")]
    dump_conntrack: Vec<SimDuration>,
    /// Leave conntrack events out of the timeline.
    #[arg(long)]
    no_conntrack_events: bool,
    /// Show progress on stderr (default: only when stderr is a terminal).
    #[arg(long)]
    progress: bool,
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
    /// Write what left the node to this pcap file.
    #[arg(long, value_name = "FILE")]
    pcap_out: Option<String>,
    /// The capture (pcap or pcapng).
    capture: String,
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
) -> Result<ExitCode> {
    let agg = nfsim::sweep::stats::aggregate(header, runs);
    writeln!(w, "{}", nfsim::sweep::aggregate_line(&agg)).context("writing the output")?;
    w.flush().context("writing the output")?;
    if !quiet {
        eprint!("{}", nfsim::sweep::stats::render(&agg));
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_sweep(a: SweepArgs) -> Result<ExitCode> {
    use nfsim::sweep::{execute, header_line, merge, run_line, Sweep};
    if let Some(SweepSub::Merge { files, out, quiet }) = a.sub {
        let mut inputs = Vec::new();
        for f in &files {
            let text = std::fs::read_to_string(f).with_context(|| format!("reading {f}"))?;
            inputs.push((f.clone(), text));
        }
        let (header, runs) = merge(&inputs)?;
        let mut w = open_out(out.as_deref())?;
        writeln!(w, "{}", header_line(&header)).context("writing the output")?;
        for r in &runs {
            writeln!(w, "{}", run_line(r)).context("writing the output")?;
        }
        return finish_sweep(&mut w, &header, &runs, quiet);
    }
    let file = a.file.ok_or_else(|| {
        anyhow!("usage: nfsim sweep FILE --seeds A..B [--set PATH=V1,V2] [--jobs N] [--shard i/N] | nfsim sweep merge FILES...")
    })?;
    let seeds = a
        .seeds
        .ok_or_else(|| anyhow!("--seeds is required: which seeds to run, as 1..10000"))?;
    let text = std::fs::read_to_string(&file)
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
    finish_sweep(&mut w, &header, &runs, a.quiet)
}

fn load(file: &str, seed: Option<u64>) -> Result<Scenario> {
    let mut sc = load_file(file).map_err(|e| anyhow!("{e}"))?;
    if let Some(s) = seed {
        sc.seed = s;
    }
    Ok(sc)
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
    let at = SimTime::ZERO + a.at.unwrap_or(sc.duration);
    let mut sim = Simulation::new(sc, RunOptions::default())?;
    let n = sim.node_index(&node)?;
    sim.run_until(at)?;
    out(&sim.rules(n))?;
    Ok(ExitCode::SUCCESS)
}

fn cmd_conntrack(a: ConntrackArgs) -> Result<ExitCode> {
    use sim_conntrack::{deleted_summary, shown_summary, Filter};
    let mut args = a.args.clone();
    let cmd = match args.first().map(String::as_str) {
        Some("-L" | "--dump") => {
            args.remove(0);
            'L'
        }
        Some("-C" | "--count") => {
            args.remove(0);
            'C'
        }
        Some("-S" | "--stats") => {
            args.remove(0);
            'S'
        }
        Some("-E" | "--event") => {
            args.remove(0);
            'E'
        }
        Some("-D" | "--delete") => {
            args.remove(0);
            'D'
        }
        _ => 'L',
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
    let end = sc.duration;
    if cmd == 'E' {
        if !args.is_empty() {
            anyhow::bail!(
                "-E: filters are not supported with -E yet (they are with -L, -C and -D)"
            );
        }
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
            if let nfsim::cluster::sim::What::Conntrack { node, line, .. } = &e.what {
                if *node == a.node && e.t_ns >= from.as_nanos() && e.t_ns <= to.as_nanos() {
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
        if let Some(ct) = &a.conntrack {
            // Entries are loaded at an instant late enough that any age fits before it.
            opts.at = SimTime::ZERO + SimDuration::from_secs(365 * 86_400);
            let rep = load_conntrack(&mut base, ct, opts.at, a.conntrack_age)?;
            notes.push(format!("conntrack from {ct}: {rep}"));
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
    use nfsim::explain::{read_text, replay, ReplayOptions};
    use sim_core::pcap::{read_file, ReadOptions};
    let node = a.node.spec()?;
    let rules = read_text(&a.rules)?;
    let base = node.build(&rules, &a.rules)?;
    let capture = read_file(&a.capture, &ReadOptions::default())?;
    let opts = ReplayOptions {
        trace: a.trace,
        pcap_out: a.pcap_out.clone(),
    };
    let stdout = std::io::stdout();
    let mut w = BufWriter::new(Named::new("stdout", stdout.lock()));
    replay(&node, base, &capture, &a.capture, &opts, &mut w)?;
    w.flush()?;
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
            let _ = writeln!(std::io::stderr(), "error: {e:#}");
            ExitCode::from(2)
        }
    }
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
    let mut w = Named::new("stdout", std::io::stdout().lock());
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
