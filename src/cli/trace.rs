//! `nfsim trace`: one packet explained rule by rule, through every hook, to its verdict, on
//! a node built from flags and a rules file, or on a scenario's node at an instant.

use super::{load, node_with_rules, out, within_run, NodeArgs, StateArgs};
use anyhow::{anyhow, Result};
use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::explain::{trace, trace_in, TraceOptions, TraceReport};
use sim_core::{Packet, SimDuration, SimTime};
use std::process::ExitCode;

/// `nfsim trace`'s flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// A scenario: trace on its node --node as it is at --at (its interfaces, routes, rules
    /// and conntrack table; the run is not changed).
    pub(crate) scenario: Option<String>,
    /// The scenario's node.
    #[arg(long, requires = "scenario")]
    pub(crate) node: Option<String>,
    /// The scenario's instant (default: its start).
    #[arg(long, requires = "scenario")]
    pub(crate) at: Option<SimDuration>,
    /// Inside a scenario: the pod (`ns/name` or `name`) or host that sends the packet (by
    /// default the node's pod holding the source address, else from the network on eth0).
    #[arg(long, requires = "scenario", conflicts_with = "local")]
    pub(crate) from: Option<String>,
    /// The rules (iptables-save or iptables-restore text, loaded as `--noflush`).
    #[arg(
        long,
        required_unless_present = "scenario",
        conflicts_with = "scenario"
    )]
    pub(crate) rules: Option<String>,
    #[command(flatten)]
    pub(crate) state: StateArgs,
    #[command(flatten)]
    pub(crate) node_args: NodeArgs,
    /// The packet, as `udp 10.244.2.9:40000 -> 10.96.0.10:53` (tcp takes flags, default SYN).
    #[arg(long)]
    pub(crate) packet: String,
    /// The packet comes from a process of the node (OUTPUT) rather than from a pod or the
    /// network (PREROUTING).
    #[arg(long)]
    pub(crate) local: bool,
    /// Follow every statistic branch and list each outcome with its exact probability.
    #[arg(long)]
    pub(crate) all_branches: bool,
    /// JSON output.
    #[arg(long)]
    pub(crate) json: bool,
}
/// The packet and how to trace it.
fn resolve(a: &Args) -> Result<(Packet, TraceOptions)> {
    let packet: Packet = a
        .packet
        .parse()
        .map_err(nfsim::explain::ExplainError::from)?;
    let opts = TraceOptions {
        local: a.local,
        all_branches: a.all_branches,
        at: SimTime::ZERO,
    };
    Ok((packet, opts))
}

/// Traces the packet and prints the report (text, or JSON with `--json`).
pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let (packet, opts) = resolve(&a)?;
    let report = match &a.scenario {
        Some(file) => on_scenario(&a, file, packet, opts)?,
        None => on_rules(&a, packet, opts)?,
    };
    if a.json {
        out(&format!("{}\n", report.json()))?;
    } else {
        out(&report.text())?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The packet on the scenario's node `--node` as the run left it at `--at`.
fn on_scenario(
    a: &Args,
    file: &str,
    packet: Packet,
    mut opts: TraceOptions,
) -> Result<TraceReport> {
    let node = a
        .node
        .as_deref()
        .ok_or_else(|| anyhow!("--node is required with a scenario: which node to trace on"))?;
    match a.state.given() {
        Some("--recent") => anyhow::bail!(
            "--recent goes with --rules: a scenario's recent lists are those its own run built"
        ),
        Some(flag @ ("--sysctls" | "--sysctl")) => anyhow::bail!(
            "{flag} goes with --rules: a scenario's node has the scenario's sysctls (sysctls, nodes[].sysctls, nodes[].state.sysctls)"
        ),
        Some(flag) => anyhow::bail!(
            "{flag} goes with --rules: a scenario's node has the conntrack table its own run built (use --at for a later instant)"
        ),
        None => {}
    }
    if a.node_args.rules6.is_some() {
        anyhow::bail!(
            "--rules6 goes with --rules: a scenario's node has the ip6tables rules its own run wrote"
        );
    }
    if a.node_args.ipsets.is_some() {
        anyhow::bail!(
            "--ipsets goes with --rules: a scenario's node has the ipsets its own run made"
        );
    }
    if let Some(flag) = a.node_args.addressing() {
        anyhow::bail!(
            "{flag} goes with --rules: a scenario's node has the addresses the scenario gives it"
        );
    }
    // --seed: the run's seed over the scenario's, as `nfsim run --seed`.
    let sc = load(file, a.node_args.seed)?;
    let at = a.at.unwrap_or(SimDuration::ZERO);
    // As `run --until`, `rules --at` and `conntrack --at` do: a later instant would trace on
    // the state at the end as if it were later.
    within_run("--at", at, &sc)?;
    let at = SimTime::ZERO + at;
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
    Ok(r)
}

/// The packet on the node of `--node-addr`/`--pod-cidr` with the rules of `--rules` (and
/// the conntrack table and recent lists of `--conntrack`, `--recent`).
fn on_rules(a: &Args, packet: Packet, mut opts: TraceOptions) -> Result<TraceReport> {
    let node = a.node_args.spec()?;
    let mut base = node_with_rules(
        &node,
        a.rules.as_deref().unwrap_or_default(),
        a.node_args.rules6.as_deref(),
        a.node_args.ipsets.as_deref(),
    )?;
    let loaded = a.state.load_into(&mut base)?;
    opts.at = loaded.at;
    let notes = loaded.notes;
    let mut r = trace(&node, &base, packet, &opts)?;
    if node.real.is_some()
        && r.outcome.verdict == "transmitted"
        && r.outcome.interface.as_deref() == Some(r.ingress.as_str())
    {
        super::warn_all(&[nfsim::explain::interfaces::same_link_warning(&r.ingress)]);
    }
    r.notes = notes;
    Ok(r)
}
