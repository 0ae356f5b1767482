//! # sim-conntrack
//!
//! The connection tracking table of one simulated network namespace, with the kernel's
//! semantics (docs/kernel-model.md §1–§6, §9, §22): entries keyed by both tuples, create-then-confirm,
//! per-protocol trackers and timeouts, NAT bindings with the kernel's port allocation,
//! `nf_conntrack_max` with early drop, exact expiry, events, statistics, clash handling at
//! confirmation by kernel release, and the text of conntrack-tools.
//!
//! The crate is sans-IO: [`Conntrack`] never reads a clock; every call that depends on time
//! takes `now: SimTime`, and outputs (events) are drained by the caller. Its doc comment
//! says in which order the hook pipeline calls what. Modules, bottom up:
//!
//! - [`tuple`](mod@tuple): [`Tuple`] (`struct nf_conntrack_tuple`), [`Dir`], ICMP type inversion.
//! - [`config`]: [`Sysctls`], settable by the real `net.netfilter.nf_conntrack_*` names.
//! - [`entry`]: [`Status`] bits, [`TcpState`], [`CtEntry`] snapshots and their `-L` lines.
//! - [`table`]: [`Conntrack`] itself: lookup, allocation and early drop, confirm, expiry.
//! - `track`: the UDP, TCP, ICMP and generic trackers ([`tcp_transition`] exposes the table).
//! - `tcp_window`: TCP sequence-window tracking (`tcp_in_window`), which decides the
//!   unacknowledged-data and retransmission timeouts and out-of-window INVALIDs.
//! - [`nat`]: [`NatRange`], `nf_nat_setup_info`, null bindings, `nf_nat_packet`.
//! - [`event`]: [`CtEvent`] (`conntrack -E` lines) and [`Stats`] (`conntrack -S`).
//! - [`filter`]: [`Filter`], parsed from `conntrack -L/-D` options.
//! - [`kernel`]: [`KernelVersion`], the Linux release a table behaves as, and what depends
//!   on it (clash handling at confirmation, version-dependent defaults).
//!
//! Speed (figures in `benches/conntrack.rs`): a lookup hashes the tuple once into five
//! machine words ([`Tuple`] is kept for the API), reads one index slot (hash and slab slot in
//! one `u64`) and the entry, one 64-byte line holding both tuples (16 bytes each for IPv4;
//! IPv6 tuples live in a side map), the generation, status, deadline, timer and tracker
//! state, with the mark and creation number in arrays beside it (about 126 bytes per entry
//! in all at 1M, index and timers included); a refresh writes the deadline only and
//! the timer heap catches up lazily when the old deadline fires. A packet of a known UDP flow
//! and a plain ACK of an ESTABLISHED TCP connection are tracked inline (the general path is
//! out of line); `nat_packet` of a TCP/UDP/SCTP entry rewrites from the other direction's key
//! words; [`Conntrack::rule_view`] gives rules their view of an entry without a snapshot. On a table much larger
//! than the caches a single call still waits for those two dependent reads;
//! [`Conntrack::conntrack_in_many`] takes packets in batches and overlaps their reads, with
//! the same results as one call per packet.
//!
//! Deviations from the kernel, all deliberate: TCP options other than window scale and SACK
//! are not read, and NAT sequence adjustment (helpers) is not modelled; SCTP and GRE are tracked like the generic protocol
//! (ports kept for SCTP); expired entries are reaped at the exact instant of expiry; the
//! bucket hash and NAT port offsets come from seeded streams; dumps are in creation order.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod config;
pub mod entry;
pub mod event;
pub mod filter;
mod index;
pub mod kernel;
pub mod listing;
pub mod nat;
pub mod table;
mod tcp_window;
mod track;
pub mod tuple;

pub use config::{SysctlError, Sysctls};
pub use entry::{
    deleted_summary, shown_summary, CtEntry, EntryId, Expiry, ListFormat, ListLine, RuleView,
    Status, TcpState,
};
pub use event::{CtEvent, DestroyCause, EventKind, Stats};
pub use filter::{AddrMatch, Filter, FilterError};
pub use kernel::{ClashHandling, KernelVersion, KernelVersionError};
pub use listing::{
    load_listing, parse_listing, AgeSource, ListedEntry, ListingError, LoadReport,
    DEFAULT_ASSUMED_AGE,
};
pub use nat::{Manip, NatError, NatRange, NatRangeError};
pub use table::{
    ConfirmError, Conntrack, CtHandle, CtInfo, CtVerdict, DropReason, History, InsertError,
    InvalidReason, NewEntry, BATCH,
};
pub use track::tcp_transition;
pub use tuple::{Dir, Tuple, TupleV4};
