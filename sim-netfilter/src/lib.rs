//! # sim-netfilter
//!
//! iptables in userspace: the rule model, `iptables-save` / `iptables-restore` text, and
//! evaluation of packets against the rules, behaving as Linux 6.x with iptables 1.8.9
//! (nf_tables backend) does. Read the modules in this order:
//!
//! - [`types`]: tables, hooks, policies, counters, addresses and ports as iptables parses and
//!   prints them.
//! - [`rule`]: what a rule is once parsed: [`IpMatch`], [`Match`], [`Target`].
//! - [`ruleset`]: the tables and chains of one namespace and
//!   [`Ruleset::restore`] (`iptables-restore`, with `--noflush`), [`Ruleset::save`]
//!   (`iptables-save`, byte for byte) and [`Ruleset::list`] (`iptables -L -n -v`).
//! - [`eval`]: [`Ruleset::run_hook`] walks one table's chain for a packet given an
//!   [`EvalCtx`] of plain values (packet, conntrack view, address types, time, random
//!   stream) and returns a [`Verdict`] (accept/drop/reject, NAT request, notrack, ct mark).
//! - [`state`]: [`RulesetState`], the counters, nth counters, `recent` lists and `nfacct`
//!   counters evaluation updates.
//! - [`ipset`]: the ipsets kube-proxy's IPVS mode keeps, `ipset restore` input, `ipset save`
//!   / `ipset list` text, and the membership test of `-m set --match-set`; a [`Ruleset`] holds
//!   its namespace's sets ([`Ruleset::ipset_restore`]).
//! - [`ipvs`]: the kernel's IPVS as kube-proxy's IPVS mode programs it: virtual services and
//!   real servers, the nine schedulers, the connection table, `ipvsadm` text; a namespace
//!   runs its hooks ([`netns::Netns::ipvs_mut`]) once it has a virtual service.
//! - [`recent`]: `/proc/net/xt_recent/NAME` text parsed back into `recent` list entries, with
//!   jiffies mapped to simulated time, to start from a real node's session affinity state.
//! - [`trace`]: the rule-by-rule [`Trace`] of a packet.
//! - [`rule_ifnames`]: which rules of a rules file name an interface a node lacks (they
//!   never match there), for the warnings of `nfsim trace`, `replay` and scenario nodes.
//! - [`synth`]: kube-proxy-shaped rulesets of any size, for benchmarks and tests.
//! - [`nft`]: nftables — tables, sets, verdict maps and chains as kube-proxy's nftables
//!   proxier writes them; `nft -f` transactions, `nft list` text, and evaluation of base
//!   chains, which the namespace pipeline interleaves with the iptables tables by priority.
//!
//! Long chains of `-d IP -p PROTO --dport N` rules (kube-proxy's `KUBE-SERVICES`) are
//! evaluated through a first-match index (`index.rs`) that gives the same verdicts, NAT
//! requests, counters and random draws as in-order evaluation.
//!
//! ```
//! use sim_netfilter::*;
//! use sim_core::{Packet, SimRng, SimTime};
//!
//! let mut rs = Ruleset::new();
//! rs.restore("*nat\n:PREROUTING ACCEPT [0:0]\n\
//!             -A PREROUTING -d 10.96.0.10/32 -p udp -m udp --dport 53 -j DNAT --to-destination 10.244.1.7:53\n\
//!             COMMIT\n", &RestoreOptions::default()).unwrap();
//! let mut state = RulesetState::new();
//! let mut rng = SimRng::derive(1, "statistic");
//! let addrs = LocalAddrs::new();
//! let pkt = Packet::udp("10.244.2.9:40000".parse().unwrap(), "10.96.0.10:53".parse().unwrap());
//! let mut ctx = EvalCtx::new(pkt, &addrs, SimTime::ZERO, &mut rng);
//! let v = rs.run_hook(Table::Nat, Hook::PreRouting, &mut ctx, &mut state, None);
//! assert!(matches!(v.nat, Some(NatRequest::Dnat(_))));
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
// Restore errors carry the offending line and a structured kind; they are rare and cold.
#![allow(clippy::result_large_err)]

pub mod branch;
mod compile;

/// The last test of `cargo test --workspace`: one line saying which real-tool comparisons of
/// the run were skipped (or that all ran), from the records the skip helpers of the root
/// package's `tests/support/` left (`tests/support/skips.rs` says how). It is a doctest of
/// this crate because cargo runs every test binary first and the doctests after them,
/// package by package in name order, and `sim-netfilter` sorts last.
///
/// ```
/// mod skips {
///     include!(concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/support/skips.rs"));
/// }
/// skips::print_summary_last();
/// ```
#[cfg(doctest)]
mod skipped_comparisons {}
pub mod error;
pub mod eval;
mod fmt;
mod hint;
mod index;
pub mod ipset;
pub mod ipvs;
pub mod netns;
pub mod nft;
mod parse;
pub mod recent;
pub mod rule;
pub mod rule_ifnames;
pub mod ruleset;
pub mod state;
pub mod synth;
pub mod sysctl_file;
pub mod trace;
pub mod types;

pub use error::{RestoreError, RestoreErrorKind, RuleError, RuleErrorKind};
pub use eval::{
    Action, AddrTypeLookup, CtInfo, CtInfoKind, CtState, CtTuple, EvalCtx, LocalAddrs, NatRequest,
    PhysDevs, Verdict,
};
pub use fmt::{matches_summary, rule_spec, target_spec};
pub use recent::{parse_proc_recent, Jiffies, ProcRecentEntry, ProcRecentError, DEFAULT_HZ};
pub use rule::{
    AddrType, ConnmarkOp, CtDirection, IpMatch, LogOptions, Match, NatRange, PhysdevMatch, PortNat,
    RejectWith, Rule, Target,
};
pub use ruleset::{
    Chain, Lineage, ListOptions, NfacctError, RestoreMemo, RestoreOptions, RestoreReport, Ruleset,
    SaveOptions,
};
pub use state::{RecentEntryView, RecentLoadError, RulesetState};
pub use trace::{StatDraw, Trace, TraceEvent};
pub use types::{Counters, Family, Hook, IpNet, Ipv4Net, Ipv6Net, Policy, PortRange, Table};
