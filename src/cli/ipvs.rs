//! `nfsim ipvs`: a scenario node's IPVS table at an instant, as ipvsadm 1.31 prints it: the
//! connection table (`ipvsadm -Lnc`, the default), the virtual servers (`-Ln`), with their
//! counters (`-Ln --stats`), or `ipvsadm-save -n`.

use super::{known_node, load, out, within_run};
use anyhow::Result;
use nfsim::cluster::sim::{RunOptions, Simulation};
use sim_core::{SimDuration, SimTime};
use std::process::ExitCode;

/// `nfsim ipvs`' flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The scenario file.
    pub(crate) file: String,
    /// The node.
    #[arg(long)]
    pub(crate) node: String,
    /// The simulated time (default: the end of the run).
    #[arg(long)]
    pub(crate) at: Option<SimDuration>,
    /// `ipvsadm -Ln`: the virtual servers and their real servers instead of the
    /// connections.
    #[arg(long, conflicts_with_all = ["stats", "save"])]
    pub(crate) list: bool,
    /// `ipvsadm -Ln --stats`: the virtual servers with their packet and byte counters.
    #[arg(long, conflicts_with = "save")]
    pub(crate) stats: bool,
    /// `ipvsadm-save -n`.
    #[arg(long)]
    pub(crate) save: bool,
}

/// Prints the table.
pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let sc = load(&a.file, None)?;
    if let Some(at) = a.at {
        within_run("--at", at, &sc)?;
    }
    known_node(&a.node, &sc)?;
    let at = SimTime::ZERO + a.at.unwrap_or(sc.duration);
    let mut sim = Simulation::new(sc, RunOptions::default())?;
    let n = sim.node_index(&a.node)?;
    sim.run_until(at)?;
    let now = sim.now();
    // Connections whose time ran out are gone from /proc/net/ip_vs_conn (the run is
    // read-only: a copy of the node expires them).
    let mut ns = sim.netns(n).clone();
    ns.ipvs_expire(now);
    let ipvs = ns.ipvs();
    out(&if a.save {
        ipvs.save()
    } else if a.stats {
        ipvs.list_stats()
    } else if a.list {
        ipvs.list()
    } else {
        ipvs.list_conns(now)
    })?;
    Ok(ExitCode::SUCCESS)
}
