//! What `conntrack_in` and `confirm` return: the packet's relation to its entry, verdicts, errors.

use super::*;

/// The packet's relation to its entry (`enum ip_conntrack_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CtInfo {
    /// Original direction, the entry has seen a reply (`IP_CT_ESTABLISHED`).
    Established,
    /// An ICMP error about the entry, travelling in the original direction (`IP_CT_RELATED`).
    Related,
    /// Original direction, no reply seen yet (`IP_CT_NEW`).
    New,
    /// Reply direction (`IP_CT_ESTABLISHED_REPLY`).
    EstablishedReply,
    /// An ICMP error about the entry, travelling in the reply direction
    /// (`IP_CT_RELATED_REPLY`).
    RelatedReply,
}

impl CtInfo {
    /// The direction the packet travels (`CTINFO2DIR`).
    pub fn dir(self) -> Dir {
        match self {
            CtInfo::EstablishedReply | CtInfo::RelatedReply => Dir::Reply,
            _ => Dir::Original,
        }
    }
}

/// What a packet carries after "conntrack in": its entry and how it relates to it
/// (the kernel's `skb->_nfct`). Valid until the packet is confirmed or discarded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CtHandle {
    /// The entry (unconfirmed for a connection's first packet).
    pub id: EntryId,
    /// NEW / ESTABLISHED / RELATED / …
    pub ctinfo: CtInfo,
}

impl CtHandle {
    /// The direction the packet travels.
    pub fn dir(&self) -> Dir {
        self.ctinfo.dir()
    }
}

/// Why a packet got no entry (ctstate INVALID).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum InvalidReason {
    /// The TCP flag combination is never valid (`tcp_error`: a bare FIN, NULL, SYN|FIN…).
    TcpBadFlags,
    /// The TCP state machine rejects the packet in this state (`sIV`).
    TcpInvalidState,
    /// A TCP packet other than SYN (or ACK with `nf_conntrack_tcp_loose`) cannot start an
    /// entry (`tcp_new`).
    TcpCannotCreate,
    /// The segment is outside the TCP window the entry tracks (`tcp_in_window`: SEQ over
    /// the receiver's window, or an ACK of data not seen yet), and neither
    /// `nf_conntrack_tcp_be_liberal` nor the entry (a pickup) is liberal.
    TcpOutOfWindow,
    /// A RST whose sequence number is below what the other side acknowledged ("invalid
    /// rst", with `nf_conntrack_tcp_ignore_invalid_rst` 0).
    TcpInvalidRst,
    /// An ICMP type that is neither a request nor an error cannot start an entry (an
    /// unsolicited echo reply).
    IcmpCannotCreate,
    /// The tuple has no inverse (an ICMP type without a reply type).
    CannotInvert,
    /// An ICMP error that quotes no known connection (counted as `error`).
    IcmpErrorNoMatch,
    /// An ICMP error without a quoted header.
    IcmpErrorMalformed,
}

/// Why conntrack dropped a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DropReason {
    /// `nf_conntrack_max` reached and nothing could be early-dropped.
    TableFull,
}

impl fmt::Display for DropReason {
    /// The kernel log line.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DropReason::TableFull => f.write_str("nf_conntrack: table full, dropping packet"),
        }
    }
}

/// The result of [`Conntrack::conntrack_in`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CtVerdict {
    /// The packet belongs to an entry (maybe a new, unconfirmed one).
    Tracked(CtHandle),
    /// No entry: the packet goes on with ctstate INVALID.
    Invalid(InvalidReason),
    /// Drop the packet.
    Drop(DropReason),
}

/// Why a confirmation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum ConfirmError {
    /// The handle names no live entry.
    #[error("no such conntrack entry {0}")]
    NoEntry(EntryId),
    /// A tuple of the new entry is already in the table (`insert_failed`): drop the packet.
    #[error(
        "entry {0} clashes with an entry already in the table: packet dropped (insert_failed)"
    )]
    InsertFailed(EntryId),
}
