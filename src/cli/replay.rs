//! `nfsim replay`: captures pushed through a ruleset packet by packet, each entering at its
//! capture time; what left the node, the conntrack tables and a summary out.

use super::{json_out, node_with_rules, Named, NodeArgs, StateArgs};
use anyhow::{anyhow, Context, Result};
use nfsim::explain::{replay_inputs, NodeSpec, ReplayInput, ReplayOptions, ReplayOutput, Tap};
use sim_core::pcap::{read_file, Capture, ReadOptions};
use sim_core::{SimDuration, SimTime};
use sim_netfilter::netns::Netns;
use std::io::{BufWriter, Write};
use std::process::ExitCode;

/// `nfsim replay`'s flags.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// The rules (iptables-save or iptables-restore text, loaded as `--noflush`).
    #[arg(long)]
    pub(crate) rules: String,
    #[command(flatten)]
    pub(crate) node: NodeArgs,
    /// Print each packet's trace.
    #[arg(long)]
    pub(crate) trace: bool,
    /// No line per packet: the conntrack listings and the summary only.
    #[arg(short, long, conflicts_with = "trace")]
    pub(crate) quiet: bool,
    /// Write what left the node to this pcap file.
    #[arg(long, value_name = "FILE")]
    pub(crate) pcap_out: Option<String>,
    /// Print the conntrack table (`conntrack -L` form) at this capture time (repeatable).
    #[arg(long, value_name = "T")]
    pub(crate) conntrack_at: Vec<SimDuration>,
    #[command(flatten)]
    pub(crate) state: StateArgs,
    /// Write the replay as JSON lines to FILE (schema in docs/json-schema.md); `-` writes
    /// them to stdout instead of the text.
    #[arg(long, value_name = "FILE")]
    pub(crate) json: Option<String>,
    /// A capture taken on interface IFACE of the node, as `IFACE=FILE` (repeatable): eth0's
    /// packets come from the wire, cni0's or a pod veth's from pods. The captures are merged
    /// by time (ties in the order of the flags).
    #[arg(long, value_name = "IFACE=FILE")]
    pub(crate) ingress: Vec<String>,
    /// The capture (pcap or pcapng); where each packet enters is decided by its source
    /// address.
    #[arg(required_unless_present = "ingress")]
    pub(crate) capture: Option<String>,
}

/// The replay the flags ask for: the node in its starting state and the captures, read.
struct Setup {
    /// The node's interfaces and addresses.
    node: NodeSpec,
    /// The node with its rules, sysctls and starting conntrack table.
    base: Netns,
    /// What `--sysctls`, `--conntrack` and `--recent` loaded, said before the packets.
    loaded: Vec<String>,
    /// The node's clock at the first packet (after the loaded state, `--after` later).
    start: SimTime,
    /// Each capture's interface (`None`: by source address) and file, in the flags' order.
    named: Vec<(Option<String>, String)>,
    /// The captures, in the same order.
    captures: Vec<Capture>,
    /// Where each capture's packets enter.
    taps: Vec<Tap>,
}

/// Builds the node and reads the captures.
fn resolve(a: &Args) -> Result<Setup> {
    let node = a.node.spec()?;
    let mut base = node_with_rules(
        &node,
        &a.rules,
        a.node.rules6.as_deref(),
        a.node.ipsets.as_deref(),
    )?;
    let state = a.state.load_into(&mut base)?;
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
    Ok(Setup {
        node,
        base,
        loaded: state.notes,
        start: state.at,
        named,
        captures,
        taps,
    })
}

/// Replays the captures, writing the text, JSON lines and pcap the flags ask for.
pub(crate) fn run(a: Args) -> Result<ExitCode> {
    let Setup {
        node,
        base,
        loaded,
        start,
        named,
        captures,
        taps,
    } = resolve(&a)?;
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
        start,
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
        Some(path) => Some(BufWriter::new(json_out(path)?)),
        None => None,
    };
    let stdout = std::io::stdout();
    let mut text = (!json_to_stdout).then(|| BufWriter::new(Named::new("stdout", stdout.lock())));
    if let Some(w) = text.as_mut() {
        for l in &loaded {
            writeln!(w, "{l}")?;
        }
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
