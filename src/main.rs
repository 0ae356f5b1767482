//! The `nfsim` command: run scenarios, show a node's rules or conntrack table at an instant,
//! normalise a rules file, explain one packet (`trace`), replay a capture (`replay`).
//!
//! Flags are parsed by clap into [`Cli`], then resolved into library calls; errors are
//! reported with `anyhow` and exit code 2, failed expectations with exit code 1.
//!
//! Each command lives in its own module under `cli/` (its flags, their resolution into
//! library calls, its run); this file only dispatches.

mod cli;

use clap::{Parser, Subcommand};
use std::io::Write;
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
    Run(cli::run::Args),
    /// Print the iptables-save of a node at an instant, or normalise a rules file.
    Rules(cli::rules::Args),
    /// Print a node's `conntrack -L` at an instant.
    Conntrack(cli::conntrack::Args),
    /// Print a node's IPVS table at an instant: `ipvsadm -Lnc` (the connections, default),
    /// `-Ln`, `-Ln --stats` or `ipvsadm-save -n` (kube-proxy `mode: ipvs`).
    Ipvs(cli::ipvs::Args),
    /// Explain one packet rule by rule, through every hook, to its verdict.
    ///
    /// The node: eth0 with --node-addr/--node-prefix and a default route via the subnet's
    /// first address; with --pod-cidr, a bridge cni0 holding the CIDR's first address. The
    /// packet enters on cni0 if its source is in the pod CIDR, else on eth0, or takes OUTPUT
    /// with --local. --all-branches forces each statistic rule met both ways and lists every
    /// outcome with its exact probability (the kernel's round(p × 2^31) / 2^31).
    Trace(cli::trace::Args),
    /// Push a pcap capture through a ruleset, packet by packet.
    ///
    /// The node is built as for `nfsim trace`. Each packet enters at its capture time
    /// (relative to the first): a source address of the node itself takes OUTPUT, a source in
    /// the pod CIDR enters on cni0, any other on eth0.
    Replay(cli::replay::Args),
    /// Run a scenario across many seeds and --set combinations: JSON lines out, one per run,
    /// then the aggregate (pass rates with 95 % Wilson intervals, distributions of each
    /// client's figures); a table of the aggregate on stderr.
    ///
    /// Runs are numbered combination by combination (the first --set varies slowest), seeds
    /// in increasing order within each; the output is in run order, the same bytes whatever
    /// --jobs. `nfsim sweep merge` puts --shard outputs back together.
    Sweep(cli::sweep::Args),
    /// Audit a node's conntrack table against its rules: stale entries and the exact
    /// `conntrack -D` that deletes them, blackholes, table pressure, skew, surprising rules.
    ///
    /// Exit 0 when nothing is stale, 1 when something is, 2 on bad input.
    Doctor(cli::doctor::Args),
    /// A line-delimited JSON session on stdin/stdout: build a node or load a scenario, send
    /// packets, advance time, read and change its rules and conntrack table
    /// (docs/serve-protocol.md). For tests in Go, Python or any other language.
    Serve(cli::serve::Args),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let r = match cli.cmd {
        Cmd::Run(a) => cli::run::run(a),
        Cmd::Rules(a) => cli::rules::run(a),
        Cmd::Conntrack(a) => cli::conntrack::run(a),
        Cmd::Ipvs(a) => cli::ipvs::run(a),
        Cmd::Trace(a) => cli::trace::run(a),
        Cmd::Replay(a) => cli::replay::run(a),
        Cmd::Sweep(a) => cli::sweep::run(a),
        Cmd::Doctor(a) => cli::doctor::run(a),
        Cmd::Serve(a) => cli::serve::run(a),
    };
    match r {
        Ok(c) => c,
        // A closed pipe (`nfsim run X | head -1`): the reader has what it wanted; end quietly,
        // as ripgrep does.
        Err(e) if cli::closed_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "error: {}", cli::error_text(&e));
            ExitCode::from(2)
        }
    }
}
