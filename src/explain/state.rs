//! A node's saved state as a starting point: `conntrack -L` output loaded into its table.

use super::{read_text, ExplainError};
use sim_conntrack::{load_listing, parse_listing, LoadReport};
use sim_core::{SimDuration, SimTime};
use sim_netfilter::netns::Netns;

/// The age assumed for an entry whose line prints none (no `delta-time=`, no `[start=…]`):
/// older than the 2 s after which a replied UDP entry's next packet makes it ASSURED
/// (`nf_conntrack_udp_packet`), as almost every entry of a dump taken on a busy node is.
pub const DEFAULT_ASSUMED_AGE: SimDuration = SimDuration::from_secs(60);

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
