//! `nfsim doctor`: a node's whole conntrack table audited against its rules (and the
//! EndpointSlices, when given): stale entries with their fix, blackholes in waiting, table
//! pressure, skew, rules that will surprise. Exit 0 when nothing is stale, 1 when something
//! is, 2 on bad input.
//!
//! A real node: `--rules` (iptables-save or nft text) and `--conntrack` (its `conntrack -L`),
//! the node flags of `trace`. A simulated one: `nfsim doctor SCENARIO --node N --at T`, the
//! node as the run left it at `T`, with the API objects its kube-proxy has seen.

use super::{known_node, load, node_with_rules, out, within_run, NodeArgs, StateArgs};
use anyhow::{anyhow, Context, Result};
use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::doctor::{examine, Input, Report};
use nfsim::k8s::{parse_objects, K8sObject};
use nfsim::kubeproxy::ProxyState;
use sim_core::{SimDuration, SimTime};
use sim_netfilter::netns::Prefix;
use std::process::ExitCode;

/// `nfsim doctor`'s flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// A scenario file: audit its node --node at --at instead of a real node's files.
    pub(crate) scenario: Option<String>,
    /// The scenario's node.
    #[arg(long, requires = "scenario")]
    pub(crate) node: Option<String>,
    /// The scenario's instant (default: the end of the run).
    #[arg(long, requires = "scenario")]
    pub(crate) at: Option<SimDuration>,
    /// The node's rules: iptables-save output, or kube-proxy's nftables commands (`nft -f`
    /// text).
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
    /// The cluster's EndpointSlices (`kubectl get endpointslices -A -o yaml`): an endpoint
    /// the rules still list but the slices say is not serving counts as stale.
    #[arg(long, value_name = "FILE", conflicts_with = "scenario")]
    pub(crate) endpointslices: Option<String>,
    /// The cluster's Services (`kubectl get services -A -o yaml`), with --endpointslices.
    #[arg(long, value_name = "FILE", conflicts_with = "scenario")]
    pub(crate) services: Option<String>,
    /// The cluster's pod address range (kube-proxy's `--cluster-cidr`, repeatable): a DNAT
    /// target outside it (a host-network pod, an external endpoint, a hand-written rule) is
    /// pointed out.
    #[arg(long, value_name = "CIDR", conflicts_with = "scenario")]
    pub(crate) cluster_cidr: Vec<String>,
    /// The report as one JSON document (docs/json-schema.md, "nfsim doctor --json").
    #[arg(long)]
    pub(crate) json: bool,
}

/// Audits the node and prints the report; exit 1 when something is stale.
pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let report = match &a.scenario {
        Some(file) => on_scenario(&a, file)?,
        None => on_files(&a)?,
    };
    if a.json {
        out(&format!("{}\n", report.json()))?;
    } else {
        out(&report.text())?;
    }
    Ok(if report.has_stale() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// The Services and EndpointSlices of `--services` / `--endpointslices` (either file may
/// hold both kinds), as kube-proxy derives its maps from them.
fn cluster_view(a: &Args) -> Result<Option<(ProxyState, String)>> {
    let files: Vec<&str> = [a.services.as_deref(), a.endpointslices.as_deref()]
        .into_iter()
        .flatten()
        .collect();
    if files.is_empty() {
        return Ok(None);
    }
    let mut services = Vec::new();
    let mut slices = Vec::new();
    for f in &files {
        let text = nfsim::explain::read_text(f)?;
        for o in parse_objects(&text).map_err(|e| anyhow!("{f}: {e}"))? {
            match o {
                K8sObject::Service(s) => services.push(s),
                K8sObject::EndpointSlice(s) => slices.push(s),
            }
        }
    }
    if slices.is_empty() {
        return Err(anyhow!(
            "{}: no EndpointSlice: expected the cluster's EndpointSlices (kubectl get endpointslices -A -o yaml) with --endpointslices",
            files.join(", ")
        ));
    }
    let st = ProxyState::build("", services.iter(), slices.iter());
    Ok(Some((
        st,
        format!("the EndpointSlices ({})", files.join(", ")),
    )))
}

/// `--cluster-cidr` values, checked.
fn cluster_cidrs(v: &[String]) -> Result<Vec<Prefix>> {
    v.iter()
        .map(|t| {
            let c: nfsim::k8s::Cidr = t
                .parse()
                .map_err(|e| anyhow!("--cluster-cidr {t:?}: {e}"))?;
            Prefix::new(c.addr(), c.prefix_len()).map_err(|e| anyhow!("--cluster-cidr {t:?}: {e}"))
        })
        .collect()
}

/// A real node's files.
fn on_files(a: &Args) -> Result<Report> {
    let rules = a.rules.as_deref().unwrap_or_default();
    let node = a.node_args.spec()?;
    let rules_text = nfsim::explain::read_text(rules)?;
    let mut base = node_with_rules(
        &node,
        rules,
        a.node_args.rules6.as_deref(),
        a.node_args.ipsets.as_deref(),
    )?;
    let rule_warnings = nfsim::explain::interface_warnings(&rules_text, rules, &base);
    let loaded = a.state.load_into(&mut base)?;
    let listed = match &a.state.conntrack {
        Some(f) => {
            let text = nfsim::explain::read_text(f)?;
            Some((
                f.as_str(),
                sim_conntrack::parse_listing(&text).map_err(|e| anyhow!("{f}: {e}"))?,
            ))
        }
        None => None,
    };
    let cluster = cluster_view(a)?;
    let subject = match &a.state.conntrack {
        Some(ct) => format!("{ct} against {rules}"),
        None => format!("{rules} (no --conntrack: rules only)"),
    };
    let input = Input {
        ns: &base,
        now: loaded.at,
        seed: node.seed,
        subject,
        rules_file: rules,
        rules_text: &rules_text,
        listing: listed.as_ref().map(|(f, l)| (*f, l.as_slice())),
        cluster: cluster.as_ref().map(|(s, w)| (s, w.clone())),
        pod_cidrs: cluster_cidrs(&a.cluster_cidr)?,
        rule_warnings,
    };
    let mut ingress = |p: &sim_core::Packet, local: bool| Ok(node.ingress_for(p, local));
    Ok(examine(&input, &mut ingress)?)
}

/// The scenario's node `--node` as the run left it at `--at`.
fn on_scenario(a: &Args, file: &str) -> Result<Report> {
    let node = a
        .node
        .as_deref()
        .ok_or_else(|| anyhow!("--node is required with a scenario: which node to audit"))?;
    if let Some(flag) = a.state.given() {
        anyhow::bail!(
            "{flag} goes with --rules: a scenario's node has the state its own run built (use --at for another instant)"
        );
    }
    if a.node_args.rules6.is_some() {
        anyhow::bail!(
            "--rules6 goes with --rules: a scenario's node has the ip6tables rules its own run wrote"
        );
    }
    if let Some(flag) = a.node_args.addressing() {
        anyhow::bail!(
            "{flag} goes with --rules: a scenario's node has the addresses the scenario gives it"
        );
    }
    let sc = load(file, a.node_args.seed)?;
    known_node(node, &sc)?;
    let at = a.at.unwrap_or(sc.duration);
    within_run("--at", at, &sc)?;
    let seed = sc.seed;
    let mut sim = Simulation::new(sc, RunOptions::default())?;
    let n = sim.node_index(node)?;
    if sim.is_dual_stack(n) {
        // The audit compares the table with one proxier's maps; a dual-stack node has two.
        return Err(anyhow!(
            "{file}: node {node} is dual-stack (kube-proxy runs an IPv4 and an IPv6 proxier): nfsim doctor audits a single-stack node's table against its one proxier and does not audit dual-stack nodes yet; use `nfsim conntrack` and `nfsim rules` (with -6 for ip6tables) on it"
        ));
    }
    sim.run_until(SimTime::ZERO + at)?;
    let rules_text = sim.rules(n);
    let rules_label = format!("`nfsim rules {file} --node {node} --at {at}`");
    let mut pod_cidrs = Vec::new();
    for i in 0..sim.node_names().len() {
        let c = sim.pod_cidr(i);
        pod_cidrs.push(
            Prefix::new(c.addr(), c.prefix_len())
                .with_context(|| format!("the pod CIDR of node {i}"))?,
        );
    }
    let view = sim.kube_proxy_view(n);
    let now = sim.now();
    let input = Input {
        ns: sim.netns(n),
        now,
        seed,
        subject: format!("{node} of {file} at {}", now.hms()),
        rules_file: &rules_label,
        rules_text: &rules_text,
        listing: None,
        cluster: view.as_ref().map(|s| {
            (
                s,
                format!("the Services and EndpointSlices {node}'s kube-proxy has seen"),
            )
        }),
        pod_cidrs,
        rule_warnings: Vec::new(),
    };
    let mut ingress = |p: &sim_core::Packet, local: bool| {
        sim.ingress_for(n, p.src, None, local)
            .map_err(|e| e.to_string())
    };
    Ok(examine(&input, &mut ingress)?)
}
