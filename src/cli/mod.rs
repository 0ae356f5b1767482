//! The commands of the `nfsim` binary, one module each, and what they share.
//!
//! Every command module has the same three parts, in ripgrep's order:
//! - `Args`: the flags as clap parses them (the low-level form: strings and durations as
//!   typed);
//! - a resolve step (`resolve`, or the first lines of `run` where there is little to
//!   resolve): the flags checked and turned into what the library takes (a loaded
//!   [`Scenario`], a [`NodeSpec`](nfsim::explain::NodeSpec), a conntrack filter, a sweep
//!   plan), every refusal said before any work is done;
//! - `run`: the library called, its output written, the exit code returned (0 done, 1 an
//!   expectation failed, 2 an error: see `main`).
//!
//! This module holds what several commands share: the node options of `trace` and `replay`
//! ([`NodeArgs`], [`StateArgs`] with its [`RecentArgs`] and [`SysctlArgs`]), loading a scenario and checking `--node` and instants
//! against it, and the output helpers (writers whose errors name what was being written, and
//! the recognition of a closed pipe).

pub(crate) mod conntrack;
pub(crate) mod doctor;
pub(crate) mod ipvs;
pub(crate) mod replay;
pub(crate) mod rules;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod sweep;
pub(crate) mod trace;

use anyhow::{anyhow, Context, Result};
use nfsim::cluster::sim::SimError;
use nfsim::scenario::{load_file, Scenario};
use sim_core::SimDuration;
use std::io::Write;

/// The node a packet is explained on (`nfsim trace`, `nfsim replay`).
#[derive(clap::Args, Debug)]
pub(crate) struct NodeArgs {
    /// The node's address on eth0 (default 172.18.0.2, a kind node's); the default route goes
    /// via the subnet's first address.
    #[arg(long, value_name = "ADDR")]
    pub(crate) node_addr: Option<String>,
    /// The prefix length of eth0's subnet (default 24).
    #[arg(long, value_name = "LEN")]
    pub(crate) node_prefix: Option<u8>,
    /// The pod CIDR, directly connected through the bridge cni0 (which holds its first
    /// address); packets from it enter on cni0. Without it, everything enters on eth0.
    #[arg(long)]
    pub(crate) pod_cidr: Option<String>,
    /// Rename one of the node's two interfaces by its role, as `NAME=uplink` (the one called
    /// eth0: the network) or `NAME=pods` (cni0: the pods' bridge), so rules naming the real
    /// node's interfaces (`-i ens5`, `! -i cbr0`) match (repeatable).
    #[arg(long, value_name = "NAME=ROLE", conflicts_with = "interfaces")]
    pub(crate) interface: Vec<String>,
    /// A real node's interfaces and addresses: its `ip -j addr` output. The node then has
    /// exactly these (instead of --node-addr, --node-prefix, --pod-cidr), and a packet enters
    /// on the interface the node routes its source to.
    #[arg(long, value_name = "FILE", conflicts_with_all = ["node_addr", "node_prefix", "pod_cidr"])]
    pub(crate) interfaces: Option<String>,
    /// The real node's routes: its `ip -j route` output (with --interfaces; without it only
    /// the connected subnets are routed).
    #[arg(long, value_name = "FILE", requires = "interfaces")]
    pub(crate) routes: Option<String>,
    /// The node's ip6tables rules (ip6tables-save or ip6tables-restore text, loaded as
    /// `ip6tables-restore -c --noflush`), which IPv6 packets meet beside --rules' IPv4 ones.
    #[arg(long, value_name = "FILE")]
    pub(crate) rules6: Option<String>,
    /// The node's ipsets: `ipset save` (or `ipset restore`) text, loaded before --rules so
    /// its `-m set --match-set` rules (kube-proxy's IPVS mode) find their sets.
    #[arg(long, value_name = "FILE")]
    pub(crate) ipsets: Option<String>,
    /// The seed of the node's random streams (statistic draws, NAT port offsets; default 1).
    /// With a scenario (`nfsim trace SCENARIO`): the run's seed, over the scenario's.
    #[arg(long)]
    pub(crate) seed: Option<u64>,
}

impl NodeArgs {
    /// The node the flags describe, checked.
    pub(crate) fn spec(&self) -> Result<nfsim::explain::NodeSpec> {
        let mut spec = nfsim::explain::NodeSpec::parse(
            &self
                .node_addr
                .clone()
                .unwrap_or_else(|| nfsim::explain::DEFAULT_NODE_ADDR.to_string()),
            self.node_prefix
                .unwrap_or(nfsim::explain::DEFAULT_NODE_PREFIX),
            self.pod_cidr.as_deref(),
            self.seed.unwrap_or(1),
        )?;
        for i in &self.interface {
            let (name, role) = i.split_once('=').ok_or_else(|| {
                anyhow!("--interface {i:?}: expected NAME=ROLE, as ens5=uplink or cbr0=pods")
            })?;
            spec = spec.rename(name, role)?;
        }
        if let Some(file) = &self.interfaces {
            let real =
                nfsim::explain::interfaces::RealInterfaces::read(file, self.routes.as_deref())?;
            spec = spec.with_real(real);
        }
        Ok(spec)
    }

    /// The flags that describe the node's own addresses (not the seed), as typed, for the
    /// refusal of a scenario's trace, whose node has its own.
    pub(crate) fn addressing(&self) -> Option<&'static str> {
        if self.node_addr.is_some() {
            Some("--node-addr")
        } else if self.node_prefix.is_some() {
            Some("--node-prefix")
        } else if self.pod_cidr.is_some() {
            Some("--pod-cidr")
        } else if !self.interface.is_empty() {
            Some("--interface")
        } else if self.interfaces.is_some() {
            Some("--interfaces")
        } else {
            None
        }
    }
}

/// A real node's sysctls (`nfsim trace`, `nfsim replay`).
#[derive(clap::Args, Debug)]
pub(crate) struct SysctlArgs {
    /// The node's `sysctl -a` output (or `sysctl.conf` lines), taken whole: each sysctl nfsim
    /// models applied, each netfilter one it does not a warning on stderr saying why; only a
    /// value the kernel would refuse is an error.
    #[arg(long, value_name = "FILE")]
    pub(crate) sysctls: Option<String>,
    /// Set a sysctl, as `NAME=VALUE` (`nf_conntrack_udp_timeout=60`,
    /// `net.netfilter.nf_conntrack_timestamp=1`; repeatable; after --sysctls).
    #[arg(long, value_name = "NAME=VALUE")]
    pub(crate) sysctl: Vec<String>,
}

impl SysctlArgs {
    /// `(NAME, VALUE)` pairs, or an error naming the malformed one.
    pub(crate) fn pairs(&self) -> Result<Vec<(String, String)>> {
        self.sysctl
            .iter()
            .map(|kv| {
                kv.split_once('=')
                    .map(|(n, v)| (n.trim().to_string(), v.trim().to_string()))
                    .filter(|(n, _)| !n.is_empty())
                    .ok_or_else(|| anyhow!("--sysctl {kv:?}: expected NAME=VALUE"))
            })
            .collect()
    }
}

/// A real node's saved state as the starting point (`nfsim trace --rules`, `nfsim replay`):
/// its conntrack listing, recent lists and sysctls, and the time since they were read.
#[derive(clap::Args, Debug)]
pub(crate) struct StateArgs {
    /// A real node's `conntrack -L` output (with or without `-o extended`) as the table the
    /// packets meet: each entry with the seconds left and the age its line prints.
    #[arg(long, value_name = "FILE")]
    pub(crate) conntrack: Option<String>,
    /// The age of --conntrack entries whose line prints none (no delta-time=: the node had
    /// nf_conntrack_timestamp=0); it decides whether a UDP entry's next packet makes it
    /// ASSURED (more than 2 s after creation).
    #[arg(
        long,
        value_name = "AGE",
        default_value = "60s",
        requires = "conntrack"
    )]
    pub(crate) conntrack_age: SimDuration,
    #[command(flatten)]
    pub(crate) recent: RecentArgs,
    #[command(flatten)]
    pub(crate) sysctls: SysctlArgs,
    /// The time between the reading of --conntrack / --recent and the first packet (`1.5s`):
    /// the entries have that much less time left (those that expired in between are gone)
    /// and the recent stamps are that much older.
    #[arg(long, value_name = "DURATION")]
    pub(crate) after: Option<SimDuration>,
}

impl StateArgs {
    /// The first of these flags given, for a command that cannot take them (`trace` on a
    /// scenario, whose node has the state its own run built).
    pub(crate) fn given(&self) -> Option<&'static str> {
        if self.conntrack.is_some() {
            Some("--conntrack")
        } else if !self.recent.lists.is_empty() {
            Some("--recent")
        } else if self.sysctls.sysctls.is_some() {
            Some("--sysctls")
        } else if !self.sysctls.sysctl.is_empty() {
            Some("--sysctl")
        } else if self.after.is_some() {
            Some("--after")
        } else {
            None
        }
    }

    /// Loads the state into `base`, saying its warnings on stderr.
    pub(crate) fn load_into(
        &self,
        base: &mut sim_netfilter::netns::Netns,
    ) -> Result<nfsim::explain::Loaded> {
        let recent = self.recent.pairs()?;
        let sysctls = self.sysctls.pairs()?;
        if self.after.is_some() && self.conntrack.is_none() && recent.is_empty() {
            return Err(anyhow!(
                "--after needs --conntrack or --recent: it is the time since they were read"
            ));
        }
        let loaded = nfsim::explain::load_saved_state(
            base,
            &nfsim::explain::SavedState {
                sysctl_file: self.sysctls.sysctls.as_deref(),
                sysctls: &sysctls,
                conntrack: self.conntrack.as_deref(),
                assumed_age: self.conntrack_age,
                recent: &recent,
                recent_clock: self.recent.clock(),
                after: self.after.unwrap_or(SimDuration::ZERO),
            },
        )?;
        warn_all(&loaded.warnings);
        Ok(loaded)
    }
}

/// The node of `--node-addr` / `--pod-cidr` built with the rules of the file `rules_file`
/// (and its ip6tables rules from `rules6_file`, its ipsets from `ipsets_file`), with a warning on stderr for each rule
/// naming an interface the node lacks.
pub(crate) fn node_with_rules(
    node: &nfsim::explain::NodeSpec,
    rules_file: &str,
    rules6_file: Option<&str>,
    ipsets_file: Option<&str>,
) -> Result<sim_netfilter::netns::Netns> {
    let rules = nfsim::explain::read_text(rules_file)?;
    if nfsim::explain::detect_family(&rules) == sim_netfilter::Family::Ipv6 {
        return Err(anyhow!(
            "--rules {rules_file}: the file is ip6tables-save output (its header says ip6tables-save); give it as --rules6 {rules_file}, and the node's iptables-save as --rules"
        ));
    }
    let sets = ipsets_file
        .map(|f| nfsim::explain::read_text(f).map(|t| (f, t)))
        .transpose()?;
    let mut base = node.build_with_ipsets(
        &rules,
        rules_file,
        sets.as_ref().map(|(f, t)| (*f, t.as_str())),
    )?;
    warn_all(&nfsim::explain::interface_warnings(
        &rules, rules_file, &base,
    ));
    if let Some(f6) = rules6_file {
        let text = nfsim::explain::read_text(f6)?;
        nfsim::explain::load_rules6(&mut base, &text, f6)?;
    }
    Ok(base)
}

/// Says each of a saved state's warnings once, on stderr.
pub(crate) fn warn_all(warnings: &[String]) {
    for w in warnings {
        let _ = writeln!(std::io::stderr(), "warning: {w}");
    }
}

/// A real node's `recent` lists (sessionAffinity: ClientIP) as the starting state.
#[derive(clap::Args, Debug)]
pub(crate) struct RecentArgs {
    /// A copy of a real node's `/proc/net/xt_recent/NAME` loaded into the rules' recent list
    /// NAME (kube-proxy's ClientIP affinity lists are named after the KUBE-SEP chain;
    /// repeatable).
    #[arg(long = "recent", value_name = "NAME=FILE")]
    pub(crate) lists: Vec<String>,
    /// The node's `jiffies` when the files were read (`grep -m1 ^jiffies /proc/timer_list`);
    /// default: the newest stamp in the files.
    #[arg(long = "recent-jiffies", value_name = "JIFFIES", requires = "lists")]
    pub(crate) jiffies: Option<u64>,
    /// The node kernel's CONFIG_HZ, jiffies per second (`1000` on RHEL and Fedora kernels).
    #[arg(long = "recent-hz", value_name = "HZ", default_value_t = sim_netfilter::DEFAULT_HZ,
          value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) hz: u32,
}

impl RecentArgs {
    /// `(NAME, FILE)` pairs, or an error naming the malformed one.
    pub(crate) fn pairs(&self) -> Result<Vec<(String, String)>> {
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

    /// The clock the files' stamps are read against.
    pub(crate) fn clock(&self) -> nfsim::explain::RecentClock {
        nfsim::explain::RecentClock {
            now: self.jiffies,
            hz: self.hz,
        }
    }
}

/// A buffered writer to the file `out`, or to stdout without one.
pub(crate) fn open_out(out: Option<&str>) -> Result<Box<dyn Write>> {
    Ok(match out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("creating {p}"))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    })
}

/// The writer of a `--json FILE` flag: the file, created, or stdout for `-`.
pub(crate) fn json_out(path: &str) -> Result<Named<Box<dyn Write>>> {
    let to_stdout = path == "-";
    let w: Box<dyn Write> = if to_stdout {
        Box::new(std::io::stdout())
    } else {
        Box::new(std::fs::File::create(path).with_context(|| format!("writing {path}"))?)
    };
    let name = if to_stdout { "stdout" } else { path };
    Ok(Named::new(name, w))
}

/// Loads a scenario file, prints its warnings to stderr, and sets `--seed` where given.
pub(crate) fn load(file: &str, seed: Option<u64>) -> Result<Scenario> {
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
pub(crate) fn within_run(flag: &str, at: SimDuration, sc: &Scenario) -> Result<()> {
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
pub(crate) fn known_node(node: &str, sc: &Scenario) -> Result<()> {
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

/// The error and its causes, `: `-separated, each said once: an error whose message already
/// holds its cause's text (`cannot read F: {source}` with `#[source]`) does not repeat it.
pub(crate) fn error_text(e: &anyhow::Error) -> String {
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
pub(crate) struct Named<W> {
    name: String,
    inner: W,
}

impl<W: Write> Named<W> {
    pub(crate) fn new(name: &str, inner: W) -> Named<W> {
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
pub(crate) fn out(text: &str) -> Result<()> {
    write_named("stdout", std::io::stdout().lock(), text)
}

/// Writes `text` to stderr (an error, not a panic as `eprint!` would, when stderr is closed
/// or full).
pub(crate) fn err_out(text: &str) -> Result<()> {
    write_named("stderr", std::io::stderr().lock(), text)
}

fn write_named(name: &str, inner: impl Write, text: &str) -> Result<()> {
    let mut w = Named::new(name, inner);
    w.write_all(text.as_bytes())?;
    w.flush()?;
    Ok(())
}

/// Whether an error comes from writing to a pipe whose reader has gone.
pub(crate) fn closed_pipe(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
            || c.downcast_ref::<SimError>().is_some_and(|s| {
                matches!(s, SimError::Output { kind, .. } if *kind == std::io::ErrorKind::BrokenPipe)
            })
    })
}
