//! A node's saved state as a starting point: `conntrack -L` output loaded into its table,
//! `/proc/net/xt_recent/NAME` files into its `recent` lists, `sysctl -a` output and single
//! sysctls applied ([`load_saved_state`], what `nfsim trace` and `nfsim replay` share).

use super::{read_text, ExplainError};
use sim_conntrack::{load_listing, parse_listing, LoadReport};
use sim_core::{SimDuration, SimTime};
use sim_netfilter::netns::Netns;

/// The age assumed for an entry whose line prints none: conntrack's own default (a scenario's
/// `state.conntrack` assumes the same).
pub use sim_conntrack::DEFAULT_ASSUMED_AGE;

/// The instant a saved state is loaded at: late enough that any age of a listing's entries
/// or a recent list's stamps fits before it (a year).
pub const LOAD_AT: SimTime = SimTime::from_secs(365 * 86_400);

/// A real node's saved state, as `nfsim trace` and `nfsim replay` take it.
#[derive(Clone, Debug, Default)]
pub struct SavedState<'a> {
    /// `sysctl -a` output (or `sysctl.conf` lines), applied first
    /// ([`sim_netfilter::sysctl_file`]).
    pub sysctl_file: Option<&'a str>,
    /// Single sysctls, `(NAME, VALUE)`, applied after the file (`--sysctl`).
    pub sysctls: &'a [(String, String)],
    /// A `conntrack -L` listing (`--conntrack`).
    pub conntrack: Option<&'a str>,
    /// The age of its entries whose line prints none.
    pub assumed_age: SimDuration,
    /// `(NAME, FILE)` copies of `/proc/net/xt_recent/NAME` (`--recent`).
    pub recent: &'a [(String, String)],
    /// The clock of those files.
    pub recent_clock: RecentClock,
    /// The time between the reading of the listing and lists and the first packet
    /// (`--after`).
    pub after: SimDuration,
}

/// What [`load_saved_state`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Loaded {
    /// One line per thing loaded, for the report.
    pub notes: Vec<String>,
    /// One line per sysctl not modelled (or not whole), `FILE: line N: NAME: why`, and one
    /// for the lines outside netfilter: to say, once each.
    pub warnings: Vec<String>,
    /// When the first packet arrives: [`LOAD_AT`] (or 0 when no listing or list was loaded)
    /// plus [`SavedState::after`].
    pub at: SimTime,
}

/// Loads `state` into `ns`: the sysctls (file, then single ones), then the conntrack
/// listing and recent lists at [`LOAD_AT`]. The packets that follow arrive at
/// [`Loaded::at`], `after` later: entries have the seconds left their lines print less
/// `after`, and those that expire in between are gone.
pub fn load_saved_state(ns: &mut Netns, state: &SavedState<'_>) -> Result<Loaded, ExplainError> {
    let mut out = Loaded {
        notes: Vec::new(),
        warnings: Vec::new(),
        at: SimTime::ZERO,
    };
    if let Some(file) = state.sysctl_file {
        let text = read_text(file)?;
        let f = sim_netfilter::sysctl_file::read_sysctl_file(&text).map_err(|e| {
            ExplainError::Sysctls {
                file: file.to_string(),
                message: e.to_string(),
            }
        })?;
        for (name, value) in &f.apply {
            ns.set_sysctl(name, value)
                .map_err(|e| ExplainError::Sysctls {
                    file: file.to_string(),
                    message: e.to_string(),
                })?;
        }
        out.warnings.extend(
            f.warning_lines()
                .into_iter()
                .map(|w| format!("{file}: {w}")),
        );
        out.notes
            .push(format!("sysctls from {file}: {} applied", f.apply.len()));
    }
    for (name, value) in state.sysctls {
        let full = sim_netfilter::sysctl_file::full_name(name);
        let bad = |message: String| ExplainError::BadFlag {
            flag: "--sysctl",
            value: format!("{name}={value}"),
            expected: message,
        };
        // A short name (`nf_conntrack_udp_timeout`) is netfilter's, as `--sysctl` has
        // always taken it.
        let full = if full.contains('.') {
            full
        } else {
            format!("net.netfilter.{full}")
        };
        let short = full.strip_prefix("net.netfilter.").unwrap_or(&full);
        let modelled = sim_netfilter::sysctl_file::ICMP_SYSCTLS.contains(&full.as_str())
            || sim_netfilter::ipvs::IPVS_SYSCTLS.contains(&full.as_str())
            || sim_conntrack::Sysctls::names().any(|n| n == short);
        if !modelled && !sim_netfilter::sysctl_file::is_kernel_sysctl(&full) {
            // Unknown: refused, with the names that exist.
            ns.set_sysctl(&full, value)
                .map_err(|e| bad(e.to_string()))?;
        }
        match sim_netfilter::sysctl_file::unmodelled(&full, value) {
            Err(m) => return Err(bad(m)),
            Ok(Some(m)) => out.warnings.push(format!("--sysctl {full}: {m}")),
            Ok(None) => {}
        }
        if modelled {
            ns.set_sysctl(&full, value)
                .map_err(|e| bad(e.to_string()))?;
        }
    }
    if state.conntrack.is_some() || !state.recent.is_empty() {
        out.at = LOAD_AT;
    }
    if let Some(ct) = state.conntrack {
        let (rep, v6) = load_listing_file(ns, ct, out.at, state.assumed_age)?;
        out.notes.push(format!("conntrack from {ct}: {rep}"));
        if let Some((n, first)) = v6 {
            match super::ipv6_unmodelled(ns) {
                Some(why) => out.warnings.push(format!(
                    "{ct}: line {first}: {n} IPv6 entries loaded: they only age and count against nf_conntrack_max; {why}, so IPv6 packets are not modelled on it (trace refuses them, replay skips them)"
                )),
                None => out
                    .notes
                    .push(format!("{ct}: {n} IPv6 entries loaded (first: line {first})")),
            }
        }
    }
    if !state.recent.is_empty() {
        out.notes
            .extend(load_recent(ns, state.recent, state.recent_clock, out.at)?);
    }
    out.at = out.at.saturating_add(state.after);
    if !state.after.is_zero() {
        out.notes.push(format!(
            "packets arrive {} after the saved state was read (--after)",
            state.after
        ));
    }
    Ok(out)
}

/// Loads the `conntrack -L` listing in `file` into `ns`'s table at `now`, each entry with
/// the seconds left that its line prints and its age (see [`sim_conntrack::listing`]). The
/// listing is the starting state, not traffic: no `[NEW]` events, no `insert=`.
pub fn load_conntrack(
    ns: &mut Netns,
    file: &str,
    now: SimTime,
    assumed_age: SimDuration,
) -> Result<LoadReport, ExplainError> {
    Ok(load_listing_file(ns, file, now, assumed_age)?.0)
}

/// [`load_conntrack`], and how many of the entries are IPv6 with the first one's line.
fn load_listing_file(
    ns: &mut Netns,
    file: &str,
    now: SimTime,
    assumed_age: SimDuration,
) -> Result<(LoadReport, Option<(usize, usize)>), ExplainError> {
    let text = read_text(file)?;
    let entries = parse_listing(&text).map_err(|e| ExplainError::Conntrack {
        file: file.to_string(),
        message: e.to_string(),
    })?;
    let r = load_listing(ns.conntrack_mut(), now, &entries, assumed_age).map_err(|e| {
        ExplainError::Conntrack {
            file: file.to_string(),
            message: e.to_string(),
        }
    })?;
    let v6: Vec<usize> = entries
        .iter()
        .filter(|e| !e.orig.src.is_ipv4())
        .map(|e| e.line)
        .collect();
    Ok((r, v6.first().map(|&first| (v6.len(), first))))
}

/// How `/proc/net/xt_recent` stamps (jiffies) map to simulated time: see
/// [`sim_netfilter::recent`] and docs/kernel-model.md §10.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RecentClock {
    /// `jiffies` when the files were read; `None`: the newest stamp in them (as if read just
    /// after the last packet any list saw, the youngest ages the files allow).
    pub now: Option<u64>,
    /// The node's `CONFIG_HZ`.
    pub hz: u32,
}

impl Default for RecentClock {
    fn default() -> Self {
        RecentClock {
            now: None,
            hz: sim_netfilter::DEFAULT_HZ,
        }
    }
}

/// Loads each `(NAME, FILE)` — a copy of a real node's `/proc/net/xt_recent/NAME` — into the
/// `recent` list NAME of `ns`'s rules, so that the stamps are as old at `at` as they were when
/// the files were read. Returns one note per list for the report.
pub fn load_recent(
    ns: &mut Netns,
    lists: &[(String, String)],
    clock: RecentClock,
    at: SimTime,
) -> Result<Vec<String>, ExplainError> {
    let mut parsed = Vec::with_capacity(lists.len());
    for (name, file) in lists {
        let text = read_text(file)?;
        let entries =
            sim_netfilter::parse_proc_recent(&text).map_err(|e| ExplainError::Recent {
                file: file.clone(),
                message: e.to_string(),
            })?;
        parsed.push((name, file, entries));
    }
    let newest = parsed
        .iter()
        .flat_map(|(_, _, es)| es.iter().map(|e| e.last_seen))
        .max();
    let jiffies = sim_netfilter::Jiffies {
        now: clock.now.or(newest).unwrap_or(0),
        hz: clock.hz,
    };
    let mut notes = Vec::new();
    for (name, file, entries) in parsed {
        let mut views = Vec::with_capacity(entries.len());
        for e in &entries {
            views.push(e.to_view(jiffies, at).map_err(|e| ExplainError::Recent {
                file: file.clone(),
                message: e.to_string(),
            })?);
        }
        ns.load_recent(name, &views)
            .map_err(|e| ExplainError::Recent {
                file: file.clone(),
                message: match e.entry.and_then(|i| entries.get(i)) {
                    Some(pe) => format!("line {}: {}", pe.line, e.message),
                    None => e.message,
                },
            })?;
        notes.push(format!(
            "recent list {name} from {file}: {} addresses, stamps in jiffies read at {}{} with HZ={}",
            views.len(),
            jiffies.now,
            if clock.now.is_none() {
                " (the newest stamp: --recent-jiffies not given)"
            } else {
                ""
            },
            jiffies.hz
        ));
    }
    Ok(notes)
}
