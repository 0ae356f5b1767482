//! # sim-core
//!
//! The foundation every other nfsim crate stands on. Nothing here knows about netfilter; it
//! provides the deterministic substrate:
//!
//! - [`time`]: [`SimTime`] and [`SimDuration`], integer nanoseconds, parsed from and printed as
//!   `30s`, `250ms`, `2m`, `1h30m`. No code in nfsim reads the wall clock.
//! - [`queue`]: the [`EventQueue`], ordered by (time, sequence) so ties break in insertion
//!   order.
//! - [`rng`]: [`SimRng`], a ChaCha8 stream derived from (seed, label), one per consumer.
//! - [`packet`]: the typed [`Packet`] all layers work on.
//! - [`wire`]: conversion between packets and bytes (etherparse), used only at the edges.
//! - [`pcap`]: reading and writing capture files.
//! - [`manip`]: editing a captured packet's bytes in place as the kernel does (NAT, TTL,
//!   checksums), and building the packets the kernel sends itself.
//! - [`input`]: reading input files with a size limit.
//! - [`text`]: printing foreign text safely: control characters escaped ([`text::Escaped`]),
//!   long source lines cut around the place an error points at ([`text::Snippet`]).
//! - [`prefetch`]: a safe software-prefetch hint (changes no result, only when memory is read).

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod input;
pub mod manip;
pub mod packet;
pub mod pcap;
pub mod prefetch;
pub mod queue;
pub mod rng;
pub mod text;
pub mod time;
pub mod wire;

pub use packet::{IcmpBody, IfName, InnerHeader, Packet, TcpFlags, TcpOpts, L4};
pub use queue::{EventQueue, Scheduled};
pub use rng::SimRng;
pub use time::{SimDuration, SimTime};
