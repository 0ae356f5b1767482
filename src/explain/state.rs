//! A node's saved state as a starting point: `conntrack -L` output loaded into its table,
//! `/proc/net/xt_recent/NAME` files into its `recent` lists.

use super::{read_text, ExplainError};
use sim_conntrack::{load_listing, parse_listing, LoadReport};
use sim_core::{SimDuration, SimTime};
use sim_netfilter::netns::Netns;

/// The age assumed for an entry whose line prints none: conntrack's own default (a scenario's
/// `state.conntrack` assumes the same).
pub use sim_conntrack::DEFAULT_ASSUMED_AGE;

/// Loads the `conntrack -L` listing in `file` into `ns`'s table at `now`, each entry with
/// the seconds left that its line prints and its age (see [`sim_conntrack::listing`]). The
/// `[NEW]` events of the inserts are dropped: they are the starting state, not traffic.
pub fn load_conntrack(
    ns: &mut Netns,
    file: &str,
    now: SimTime,
    assumed_age: SimDuration,
) -> Result<LoadReport, ExplainError> {
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
    ns.drain_conntrack_events();
    Ok(r)
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
