//! Events (`conntrack -E`) and statistics (`conntrack -S`).

use crate::entry::CtEntry;
use sim_core::SimTime;
use std::fmt;

/// The kind of a conntrack event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventKind {
    /// The entry was confirmed (`IPCT_NEW`).
    New,
    /// Something a listener cares about changed: first reply seen, ASSURED set, TCP state,
    /// mark (`IPCT_REPLY`, `IPCT_ASSURED`, `IPCT_PROTOINFO`, `IPCT_MARK`).
    Update,
    /// The entry left the table (`IPCT_DESTROY`).
    Destroy,
}

/// Why an entry was destroyed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DestroyCause {
    /// Its timeout passed. nfsim reaps at the exact instant of expiry, and stamps the event
    /// with it (the kernel's garbage collector may report it later).
    Timeout,
    /// Deleted from userspace (`conntrack -D`, a reconciler); `portid` is the netlink port
    /// the real tool would show.
    Delete {
        /// Printed as `[USERSPACE] portid=N`.
        portid: u32,
    },
    /// Dropped to make room for a new entry (`early_drop`).
    EarlyDrop,
    /// Killed by the TCP tracker: a RST before any reply, or a SYN reopening a closed
    /// connection.
    Killed,
}

/// One event, as a listener (`conntrack -E`) receives it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtEvent {
    /// When it happened.
    pub at: SimTime,
    /// NEW, UPDATE or DESTROY.
    pub kind: EventKind,
    /// For DESTROY, why.
    pub cause: Option<DestroyCause>,
    /// The entry as it was then.
    pub entry: CtEntry,
}

impl CtEvent {
    /// The seconds field of the `-E` line: whole seconds left at the event, omitted for a
    /// DESTROY when zero (`ctnetlink_dump_timeout(…, skip_zero)`).
    pub fn secs(&self) -> Option<u64> {
        let s = self.entry.expiry.secs_left(self.at);
        match self.kind {
            EventKind::Destroy if s == 0 => None,
            _ => Some(s),
        }
    }
}

impl fmt::Display for CtEvent {
    /// The `conntrack -E` line, byte for byte:
    /// `    [NEW] udp      17 30 src=… [UNREPLIED] src=…`,
    /// `[DESTROY] udp      17 src=… [ASSURED]` (expired), with ` mark=N` when the mark is
    /// not 0 and ` [USERSPACE] portid=N` for a userspace delete.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let tag = match self.kind {
            EventKind::New => "[NEW]",
            EventKind::Update => "[UPDATE]",
            EventKind::Destroy => "[DESTROY]",
        };
        write!(f, "{tag:>9} ")?;
        self.entry.fmt_body(f, self.secs())?;
        if self.entry.mark != 0 {
            write!(f, " mark={}", self.entry.mark)?;
        }
        if let Some(DestroyCause::Delete { portid }) = self.cause {
            write!(f, " [USERSPACE] portid={portid}")?;
        }
        Ok(())
    }
}

/// The `conntrack -S` counters (`struct ip_conntrack_stat`), incremented where the kernel
/// increments them. As on a 6.x kernel, `found` counts only NAT tuples found taken
/// (`nf_conntrack_tuple_taken`) and `insert` only userspace inserts, never packets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Stats {
    /// A NAT candidate tuple was found in use.
    pub found: u64,
    /// Packets that got no entry (ctstate INVALID) from the trackers.
    pub invalid: u64,
    /// Entries inserted from userspace.
    pub insert: u64,
    /// Confirmations that found the tuple already in the table (before 5.10 every clash,
    /// from 5.10 the unresolved ones).
    pub insert_failed: u64,
    /// Packets dropped because no entry could be allocated (table full), or because a clash
    /// at confirmation could not be resolved.
    pub drop: u64,
    /// Entries removed by early drop.
    pub early_drop: u64,
    /// ICMP errors that matched no entry, and other malformed packets.
    pub error: u64,
    /// Lookups restarted (never, here).
    pub search_restart: u64,
    /// Clashes at confirmation resolved (from 5.10; `KernelVersion::counts_clash_resolve`).
    pub clash_resolve: u64,
    /// Hash chains found too long (never, here).
    pub chaintoolong: u64,
}

impl fmt::Display for Stats {
    /// The `conntrack -S` line of CPU 0, trailing space included: the counters of every CPU
    /// a node has are summed on it.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "cpu=0   \tfound={} invalid={} insert={} insert_failed={} drop={} early_drop={} error={} search_restart={} clash_resolve={} chaintoolong={} ",
            self.found,
            self.invalid,
            self.insert,
            self.insert_failed,
            self.drop,
            self.early_drop,
            self.error,
            self.search_restart,
            self.clash_resolve,
            self.chaintoolong
        )
    }
}
