//! The `nfsim` command: run scenarios, show a node's rules or conntrack table at an instant,
//! normalise a rules file, explain one packet (`trace`), replay a capture (`replay`).
//!
//! Flags are parsed by clap into [`Cli`], then resolved into library calls; errors are
//! reported with `anyhow` and exit code 2, failed expectations with exit code 1.

use anyhow::{anyhow, Context, Result};
use clap::{Args, Parser, Subcommand};
use nfsim::cluster::sim::{RunOptions, RunResult, Simulation};
use nfsim::scenario::{load_file, Scenario};
use sim_core::{SimDuration, SimTime};
use std::io::{IsTerminal, Write};
use std::process::ExitCode;

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
    /// Also write the timeline as JSON lines to FILE.
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
    /// The simulated time.
    #[arg(long)]
    at: SimDuration,
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
    /// The rules (iptables-save or iptables-restore text, loaded as `--noflush`).
    #[arg(long)]
    rules: String,
    #[command(flatten)]
    node: NodeArgs,
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
        eprint!(
            "\r[nfsim] simulated {} / {} ({pct:.0}%)",
            now.hms(),
            end.hms()
        );
        let _ = std::io::stderr().flush();
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
    let opts = RunOptions {
        record_timeline: true,
        conntrack_events: !a.no_conntrack_events,
        progress: progress_printer(show_progress),
    };
    let (file, seed, name) = (sc.file.clone(), sc.seed, sc.name.clone());
    let description = sc.description.clone();
    let mut sim = Simulation::new(sc, opts)?;
    let mut dumps: Vec<(u64, String)> = Vec::new();
    let mut ats = a.dump_conntrack.clone();
    ats.sort();
    for at in ats {
        let t = SimTime::ZERO + at;
        sim.run_until(t)?;
        let mut text = format!("{}  conntrack -L at {}:\n", t.hms(), t.hms());
        for (i, n) in sim.node_names().iter().enumerate() {
            let dump = sim.conntrack_dump(i);
            let count = dump.lines().count();
            text.push_str(&format!("--- {n} ---\n{dump}conntrack v1.4.7 (conntrack-tools): {count} flow entries have been shown.\n"));
        }
        dumps.push((t.as_nanos(), text));
    }
    let result = sim.finish()?;
    if show_progress {
        eprint!("\r\x1b[K");
    }
    let out = render_run(&name, &description, seed, &result, &dumps, &skipped);
    print!("{out}");
    if let Some(path) = &a.json {
        let mut j = String::new();
        for e in &result.timeline {
            j.push_str(&serde_json::to_string(e)?);
            j.push('\n');
        }
        j.push_str(&serde_json::to_string(&serde_json::json!({
            "kind": "run",
            "scenario": name,
            "file": file,
            "seed": seed,
            "passed": result.passed(),
            "expectations": result.results,
        }))?);
        j.push('\n');
        std::fs::write(path, j).with_context(|| format!("writing {path}"))?;
    }
    if result.passed() {
        Ok(ExitCode::SUCCESS)
    } else {
        let mut replay = format!("nfsim run {file} --seed {seed}");
        if let Some(u) = a.until {
            replay.push_str(&format!(" --until {u}"));
        }
        println!("replay: {replay}");
        Ok(ExitCode::from(1))
    }
}

/// The whole text `nfsim run` prints (stdout).
fn render_run(
    name: &str,
    description: &str,
    seed: u64,
    r: &RunResult,
    dumps: &[(u64, String)],
    skipped: &[String],
) -> String {
    let mut s = format!("scenario {name} (seed {seed})\n");
    if !description.is_empty() {
        s.push_str(&format!("  {}\n", description.trim()));
    }
    s.push('\n');
    let mut d = dumps.iter().peekable();
    for e in &r.timeline {
        while let Some((t, text)) = d.peek() {
            if *t < e.t_ns {
                s.push_str(text);
                d.next();
            } else {
                break;
            }
        }
        s.push_str(&e.line());
        s.push('\n');
    }
    for (_, text) in d {
        s.push_str(text);
    }
    s.push_str("\nsummary\n");
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
        print!(
            "{}",
            nfsim::explain::normalize(&text, &file, counters, &nfacct)?
        );
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
    print!("{}", sim.rules(n));
    Ok(ExitCode::SUCCESS)
}

fn cmd_conntrack(a: ConntrackArgs) -> Result<ExitCode> {
    let sc = load(&a.file, None)?;
    let mut sim = Simulation::new(sc, RunOptions::default())?;
    let n = sim.node_index(&a.node)?;
    sim.run_until(SimTime::ZERO + a.at)?;
    let dump = sim.conntrack_dump(n);
    print!("{dump}");
    eprintln!(
        "conntrack v1.4.7 (conntrack-tools): {} flow entries have been shown.",
        dump.lines().count()
    );
    Ok(ExitCode::SUCCESS)
}

fn cmd_trace(a: TraceArgs) -> Result<ExitCode> {
    use nfsim::explain::{read_text, trace, TraceOptions};
    let node = a.node.spec()?;
    let packet: sim_core::Packet = a
        .packet
        .parse()
        .map_err(nfsim::explain::ExplainError::from)?;
    let rules = read_text(&a.rules)?;
    let base = node.build(&rules, &a.rules)?;
    let opts = TraceOptions {
        local: a.local,
        all_branches: a.all_branches,
    };
    let report = trace(&node, &base, packet, &opts)?;
    if a.json {
        println!("{}", report.json());
    } else {
        print!("{}", report.text());
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
    let mut out = std::io::BufWriter::new(stdout.lock());
    replay(&node, base, &capture, &a.capture, &opts, &mut out)?;
    out.flush().context("writing the output")?;
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
    };
    match r {
        Ok(c) => c,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::from(2)
        }
    }
}
