//! The per-protocol trackers: UDP (docs/kernel-model.md §2), TCP (§3), ICMP and generic (§4).
//!
//! TCP follows `nf_conntrack_tcp_packet`: the state table, the reopen of a closed
//! connection, ignored segments and their resynchronisation, RST validation, and the window
//! checks and bookkeeping of `tcp_in_window` ([`crate::tcp_window`]), which decide the
//! unacknowledged-data, retransmission and zero-window timeouts.

use crate::config::{Sysctls, TcpTimeout};
use crate::entry::{Status, TcpState};
use crate::table::{ev, sim_ns, tf, Conntrack, Entry, InvalidReason};
use crate::tcp_window::{
    before, in_window, sf, state_reset, tcp_options, InWindow, Seen, Segment, Window,
    EXP_CHALLENGE_ACK,
};
use crate::tuple::{icmp_type_creates, Dir};
use sim_core::packet::IPPROTO_ICMPV6;
use sim_core::{Packet, SimDuration, SimTime, TcpFlags, L4};

/// What a tracker decided.
pub(crate) enum Track {
    /// Go on with the entry.
    Accept,
    /// No entry for this packet.
    Invalid(InvalidReason),
    /// Delete the entry now; the packet keeps it until released (RST before reply).
    Kill,
    /// Delete the entry and look the packet up again (a SYN reopening a closed connection).
    Repeat,
}

/// Flag classes, the kernel's `enum tcp_bit_set` (`get_conntrack_index`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TcpIndex {
    Syn = 0,
    SynAck = 1,
    Fin = 2,
    Ack = 3,
    Rst = 4,
    None = 5,
}

fn tcp_index(f: TcpFlags) -> TcpIndex {
    if f.contains(TcpFlags::RST) {
        TcpIndex::Rst
    } else if f.contains(TcpFlags::SYN) {
        if f.contains(TcpFlags::ACK) {
            TcpIndex::SynAck
        } else {
            TcpIndex::Syn
        }
    } else if f.contains(TcpFlags::FIN) {
        TcpIndex::Fin
    } else if f.contains(TcpFlags::ACK) {
        TcpIndex::Ack
    } else {
        TcpIndex::None
    }
}

/// `tcp_valid_flags[]`: the combinations (ECE, CWR and PSH ignored) that are ever valid.
fn tcp_flags_valid(f: TcpFlags) -> bool {
    const FIN: u8 = 0x01;
    const SYN: u8 = 0x02;
    const RST: u8 = 0x04;
    const ACK: u8 = 0x10;
    const URG: u8 = 0x20;
    const SYN_URG: u8 = SYN | URG;
    const SYN_ACK: u8 = SYN | ACK;
    const RST_ACK: u8 = RST | ACK;
    const FIN_ACK: u8 = FIN | ACK;
    const FIN_ACK_URG: u8 = FIN | ACK | URG;
    const ACK_URG: u8 = ACK | URG;
    // A `match` on constants (a jump table or bit test), not a search of a slice.
    matches!(
        f.0 & !(0x40 | 0x80 | 0x08),
        SYN | SYN_URG | SYN_ACK | RST | RST_ACK | FIN_ACK | FIN_ACK_URG | ACK | ACK_URG
    )
}

/// Whether a valid TCP segment falls in the ACK class (`get_conntrack_index` gives
/// `TCP_ACK_SET`): ACK, maybe with PSH, URG, ECE or CWR, and no SYN, FIN or RST.
#[inline(always)]
pub(crate) fn tcp_is_plain_ack(f: TcpFlags) -> bool {
    f.0 & !(TcpFlags::PSH.0 | TcpFlags::URG.0 | TcpFlags::ECE.0 | TcpFlags::CWR.0)
        == TcpFlags::ACK.0
}

// The kernel's state codes: sNO..sS2 are 0..9, sIV = 10 (TCP_CONNTRACK_MAX), sIG = 11.
const NO: u8 = 0;
const SS: u8 = 1;
const SR: u8 = 2;
const ES: u8 = 3;
const FW: u8 = 4;
const CW: u8 = 5;
const LA: u8 = 6;
const TW: u8 = 7;
const CL: u8 = 8;
const S2: u8 = 9;
const IV: u8 = 10;
const IG: u8 = 11;

/// `tcp_conntracks[dir][index][old_state]` (nf_conntrack_proto_tcp.c; docs/kernel-model.md §3).
const TCP_CONNTRACKS: [[[u8; 10]; 6]; 2] = [
    [
        //        NO  SS  SR  ES  FW  CW  LA  TW  CL  S2
        /*syn*/
        [SS, SS, IG, IG, IG, IG, IG, SS, SS, S2],
        /*synack*/ [IV, IV, SR, IV, IV, IV, IV, IV, IV, SR],
        /*fin*/ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /*ack*/ [ES, IV, ES, ES, CW, CW, TW, TW, CL, IV],
        /*rst*/ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /*none*/ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
    [
        /*syn*/ [IV, S2, IV, IV, IV, IV, IV, SS, IV, S2],
        /*synack*/ [IV, SR, IG, IG, IG, IG, IG, IG, IG, SR],
        /*fin*/ [IV, IV, FW, FW, LA, LA, LA, TW, CL, IV],
        /*ack*/ [IV, IG, SR, ES, CW, CW, TW, TW, CL, IG],
        /*rst*/ [IV, CL, CL, CL, CL, CL, CL, CL, CL, CL],
        /*none*/ [IV, IV, IV, IV, IV, IV, IV, IV, IV, IV],
    ],
];

/// The new state for a packet, per the table (`None` = invalid, `Some(None)` = ignored).
pub fn tcp_transition(dir: Dir, flags: TcpFlags, old: TcpState) -> Option<Option<TcpState>> {
    let n = TCP_CONNTRACKS[dir.index()][tcp_index(flags) as usize][old as usize];
    match n {
        IV => None,
        IG => Some(None),
        s => Some(Some(TcpState::from_u8(s))),
    }
}

/// Runs the tracker of the packet's protocol on the entry in `slot`.
pub(crate) fn track(
    ct: &mut Conntrack,
    now: SimTime,
    slot: usize,
    dir: Dir,
    pkt: &Packet,
    new: bool,
) -> Track {
    match pkt.l4 {
        L4::Udp { .. } => udp(ct, now, slot, dir, new),
        L4::Tcp { .. } => tcp(ct, now, slot, dir, pkt, new),
        L4::Icmp { icmp_type, .. } => {
            if new && !icmp_type_creates(pkt.is_ipv4(), icmp_type) {
                return Track::Invalid(InvalidReason::IcmpCannotCreate);
            }
            let t = if pkt.protocol() == IPPROTO_ICMPV6 {
                ct.cfg.icmpv6_timeout
            } else {
                ct.cfg.icmp_timeout
            };
            ct.refresh(slot, now, t);
            Track::Accept
        }
        // SCTP chunks are not modelled: SCTP is tracked by ports with the generic timeout.
        L4::Sctp { .. } | L4::Other { .. } => {
            let t = ct.cfg.generic_timeout;
            ct.refresh(slot, now, t);
            Track::Accept
        }
    }
}

/// `nf_conntrack_udp_packet`.
pub(crate) fn udp(ct: &mut Conntrack, now: SimTime, slot: usize, dir: Dir, new: bool) -> Track {
    if new {
        ct.slab[slot].set_stream_ts(sim_ns(now).saturating_add(2_000_000_000));
    }
    let st = ct.slab[slot].status;
    if st.contains(Status::NAT_CLASH) {
        // A clash entry: IPS_FIXED_TIMEOUT, so `nf_ct_refresh_acct` leaves its 1 s alone, and
        // never ASSURED. From 5.6 to 5.8.7 its first reply kills it
        // (`nf_conntrack_udp_refresh_unreplied`); the reply itself still passes with it.
        if dir == Dir::Reply
            && !st.contains(Status::SEEN_REPLY)
            && !ct.kernel.clash_entry_survives_reply()
        {
            return Track::Kill;
        }
        return Track::Accept;
    }
    let extra = udp_known(&mut ct.slab[slot], &ct.cfg, now);
    ct.refresh(slot, now, extra);
    Track::Accept
}

/// `nf_conntrack_udp_packet` on an entry whose `stream_ts` is set: the timeout to refresh it
/// with (`udp_timeout`, or `udp_timeout_stream` once a reply was seen and the flow is still
/// active after two seconds), and ASSURED (`IPCT_ASSURED`) the first time the stream timeout
/// applies. The caller refreshes.
#[inline(always)]
pub(crate) fn udp_known(e: &mut Entry, cfg: &Sysctls, now: SimTime) -> SimDuration {
    if !e.status.contains(Status::SEEN_REPLY) {
        return cfg.udp_timeout;
    }
    // Still active after two seconds? (time_after: strictly later)
    if sim_ns(now) > e.stream_ts() {
        if !e.status.contains(Status::ASSURED) && !e.status.contains(Status::NAT_CLASH) {
            e.status.insert(Status::ASSURED);
            e.pending |= ev::ASSURED;
        }
        return cfg.udp_timeout_stream;
    }
    cfg.udp_timeout
}

/// `nf_conntrack_tcp_packet` (with `tcp_new` for a new entry and `tcp_in_window`).
fn tcp(ct: &mut Conntrack, now: SimTime, slot: usize, dir: Dir, pkt: &Packet, new: bool) -> Track {
    let Some(seg) = Segment::of(pkt) else {
        return Track::Invalid(InvalidReason::TcpBadFlags);
    };
    let flags = seg.flags;
    if !tcp_flags_valid(flags) {
        return Track::Invalid(InvalidReason::TcpBadFlags);
    }
    let index = tcp_index(flags);
    if new {
        // tcp_new: the state for the first packet; only SYN, or ACK when loose.
        let first = TCP_CONNTRACKS[0][index as usize][NO as usize];
        if first == IV || first == IG {
            return Track::Invalid(InvalidReason::TcpCannotCreate);
        }
        if first != SS && !ct.cfg.tcp_loose {
            return Track::Invalid(InvalidReason::TcpCannotCreate);
        }
        let name = ct.windows.alloc(Window::new_connection(&seg));
        let e = &mut ct.slab[slot];
        e.set_tcp_state(NO);
        *e.tcp_flags_mut() = TcpIndex::None as u8;
        e.set_tcp_window(name);
    }
    if ct.slab[slot].tcp_window() == 0 {
        let name = ct.windows.alloc(Window::default());
        ct.slab[slot].set_tcp_window(name);
    }
    let wname = ct.slab[slot].tcp_window();
    let e = &ct.slab[slot];
    let mut old = e.tcp_state();
    let mut newst = TCP_CONNTRACKS[dir.index()][index as usize][usize::from(old)];
    let fl = e.tcp_flags();
    let status = e.status;
    let last_index = fl & tf::LAST_INDEX_MASK;
    let last_dir = usize::from(fl & tf::LAST_DIR_REPLY != 0);
    let close_init = fl & (tf::CLOSE_INIT_ORIG | tf::CLOSE_INIT_REPLY) != 0;
    let d = dir.index();
    let Some(w) = ct.windows.get_mut(wname) else {
        return Track::Invalid(InvalidReason::TcpInvalidState);
    };
    let mut check_window = true;
    match newst {
        SS | IG if newst == IG || old >= TW => {
            if newst == SS && (close_init || (last_dir == d && last_index == TcpIndex::Rst as u8)) {
                // RFC 1122 reopen from TIME_WAIT/CLOSE: the connection was closed (a FIN was
                // seen) or aborted by a RST from this side: kill it and look up again
                // (nf_ct_kill, -NF_REPEAT).
                return Track::Repeat;
            }
            // Ignored packets: the entry may be out of sync with the real connection.
            if index == TcpIndex::SynAck
                && last_index == TcpIndex::Syn as u8
                && last_dir != d
                && seg.ack == w.last_end
            {
                // The SYN/ACK answers a SYN ignored earlier: client and server are in sync,
                // the entry is not; take the SYN's annotated values.
                old = SS;
                newst = SR;
                let ld = last_dir;
                w.seen[ld].td_end = w.last_end;
                w.seen[ld].td_maxend = w.last_end;
                w.seen[ld].td_maxwin = u32::from(w.last_win).max(1);
                w.seen[ld].td_scale = w.last_wscale;
                w.last_flags &= !EXP_CHALLENGE_ACK;
                w.seen[ld].flags = w.last_flags;
                state_reset(&mut w.seen[d]);
            } else {
                w.last_seq = seg.seq;
                w.last_end = seg.end;
                w.last_win = seg.win;
                if index == TcpIndex::Syn && dir == Dir::Original {
                    // A SYN the entry does not expect: note its options; the server's
                    // SYN/ACK (or RFC 5961 challenge ACK) will tell.
                    let mut seen = Seen::default();
                    tcp_options(&seg, &mut seen);
                    w.last_flags = 0;
                    w.last_wscale = 0;
                    if seen.flags & sf::WINDOW_SCALE != 0 {
                        w.last_flags |= sf::WINDOW_SCALE;
                        w.last_wscale = seen.td_scale;
                    }
                    if seen.flags & sf::SACK_PERM != 0 {
                        w.last_flags |= sf::SACK_PERM;
                    }
                    if old == LA {
                        w.last_flags |= EXP_CHALLENGE_ACK;
                    }
                    // last_flags also holds IP_CT_TCP_SIMULTANEOUS_OPEN, cleared with it.
                    *ct.slab[slot].tcp_flags_mut() &= !tf::SIMULTANEOUS_OPEN;
                }
                if old == SS && index == TcpIndex::Ack && dir == Dir::Reply {
                    // A possible challenge ACK answering the SYN.
                    w.last_ack = seg.ack;
                }
                return ignore(ct, slot, dir, index);
            }
        }
        IV => return Track::Invalid(InvalidReason::TcpInvalidState),
        TW if old == LA
            && index == TcpIndex::Ack
            && last_dir != d
            && last_index == TcpIndex::Syn as u8
            && w.last_flags & EXP_CHALLENGE_ACK != 0 =>
        {
            // An RFC 5961 challenge ACK answering a SYN, not the ACK of the last FIN.
            w.last_flags &= !EXP_CHALLENGE_ACK;
            return Track::Accept;
        }
        S2 => {
            *ct.slab[slot].tcp_flags_mut() |= tf::SIMULTANEOUS_OPEN;
        }
        SR if dir == Dir::Reply
            && index == TcpIndex::Ack
            && ct.slab[slot].tcp_flags() & tf::SIMULTANEOUS_OPEN != 0 =>
        {
            newst = ES;
        }
        CL if index == TcpIndex::Rst => {
            // tcp_can_early_drop: closing already; the tuple may have been reused.
            if matches!(old, FW | LA | TW | CL | CW) {
                check_window = false;
            } else {
                let established = old == ES && status.contains(Status::ASSURED);
                let r = 1 - d;
                let mut validate = true;
                if w.seen[r].flags & sf::MAXACK_SET != 0 && last_index != TcpIndex::Syn as u8 {
                    let seq = seg.seq;
                    if seq == 0 && !established {
                        validate = false;
                    } else if before(seq, w.seen[r].td_maxack) {
                        // nf_conntrack_tcp_ignore_invalid_rst is 0 (not modelled).
                        return Track::Invalid(InvalidReason::TcpInvalidRst);
                    } else if !established
                        || seq == w.seen[r].td_maxack
                        // A RST that is part of a train (data, then RST at its end).
                        || (last_index == TcpIndex::Ack as u8 && last_dir == d && seq == w.last_end)
                    {
                        validate = false;
                    } else {
                        // Not exactly in sequence: keep the state for a challenge ACK.
                        newst = old;
                    }
                }
                if validate {
                    if ((status.contains(Status::SEEN_REPLY) && last_index == TcpIndex::Syn as u8)
                        || (!status.contains(Status::ASSURED) && last_index == TcpIndex::Ack as u8))
                        && seg.ack == w.last_end
                    {
                        // A RST answering a SYN or ACK let through as ignored.
                        check_window = false;
                    } else if old == SS
                        && last_index == TcpIndex::Ack as u8
                        && last_dir == 1
                        && seg.seq == w.last_ack
                    {
                        // A RST answering a challenge ACK let through earlier.
                        check_window = false;
                    }
                }
            }
        }
        _ => {}
    }
    if check_window {
        let mut ld = last_dir;
        let res = in_window(
            w,
            d,
            old,
            index == TcpIndex::Ack,
            &mut ld,
            &seg,
            ct.cfg.tcp_be_liberal,
        );
        match res {
            InWindow::Accept => {}
            InWindow::Ignore(_) => return Track::Accept,
            InWindow::Invalid(_) => {
                handle_invalid(ct, now, slot, d, index);
                return Track::Invalid(InvalidReason::TcpOutOfWindow);
            }
        }
    }
    // in_window: from here on the packet counts.
    {
        let f = ct.tcp_flags_mut(slot);
        set_last(f, index, dir);
        if old != newst && newst == FW {
            *f |= if dir == Dir::Reply {
                tf::CLOSE_INIT_REPLY
            } else {
                tf::CLOSE_INIT_ORIG
            };
        }
    }
    let Some(w) = ct.windows.get_mut(wname) else {
        return Track::Invalid(InvalidReason::TcpInvalidState);
    };
    let w = *w;
    let cfg = &ct.cfg;
    let mut timeout = tcp_timeout(cfg, &w, newst, index);
    let unack = cfg.tcp_special(TcpTimeout::Unack);
    let e = &mut ct.slab[slot];
    e.set_tcp_state(newst);
    if old != newst {
        e.pending |= ev::PROTOINFO;
    }
    if !e.status.contains(Status::SEEN_REPLY) {
        if index == TcpIndex::Rst {
            // "If only reply is a RST, we can consider ourselves not to have an
            // established connection": delete at once.
            return if new {
                Track::Invalid(InvalidReason::TcpInvalidState)
            } else {
                Track::Kill
            };
        }
        if index == TcpIndex::Syn && old == SS {
            // A SYN retransmit does not renew the timeout.
            return Track::Accept;
        }
        if newst == ES && timeout > unack {
            // Picked up mid-stream (loose): no long ESTABLISHED timeout before a reply.
            timeout = unack;
        }
    } else if !e.status.contains(Status::ASSURED) && (old == SR || old == ES) && newst == ES {
        e.status.insert(Status::ASSURED);
        e.pending |= ev::ASSURED;
    }
    ct.refresh(slot, now, timeout);
    Track::Accept
}

/// The timeout `nf_conntrack_tcp_packet` gives an entry entering `newst` on a segment of
/// class `index`: `timeout_max_retrans` after `nf_conntrack_tcp_max_retrans`
/// retransmissions, CLOSE's for a RST, `timeout_unacknowledged` while data is in flight
/// unacknowledged, `timeout_max_retrans` after a zero window, each only when lower than
/// the state's own.
#[inline(always)]
fn tcp_timeout(cfg: &Sysctls, w: &Window, newst: u8, index: TcpIndex) -> SimDuration {
    let own = cfg.tcp[usize::from(newst)];
    let retrans = cfg.tcp_special(TcpTimeout::Retrans);
    let unack = cfg.tcp_special(TcpTimeout::Unack);
    if w.retrans >= cfg.tcp_max_retrans && own > retrans {
        retrans
    } else if index == TcpIndex::Rst {
        cfg.tcp_timeout(TcpState::Close)
    } else if w.unacknowledged() && own > unack {
        unack
    } else if w.last_win == 0 && own > retrans {
        retrans
    } else {
        own
    }
}

/// `nf_tcp_handle_invalid`: an out-of-window FIN or RST of an ASSURED entry answering the
/// other side's FIN or RST lowers the timeout to `timeout_unacknowledged` (when more than
/// 120 s and that are left), so that a dead connection out of sync with its entry goes;
/// any other records itself as the last segment.
fn handle_invalid(ct: &mut Conntrack, now: SimTime, slot: usize, d: usize, index: TcpIndex) {
    let e = &ct.slab[slot];
    if !e.status.contains(Status::ASSURED) || !matches!(index, TcpIndex::Rst | TcpIndex::Fin) {
        return;
    }
    let fl = e.tcp_flags();
    let last_index = fl & tf::LAST_INDEX_MASK;
    let last_dir = usize::from(fl & tf::LAST_DIR_REPLY != 0);
    if last_dir != d && (last_index == TcpIndex::Fin as u8 || last_index == TcpIndex::Rst as u8) {
        let left = e.timeout.saturating_since(now);
        let unack = ct.cfg.tcp_special(TcpTimeout::Unack);
        if left >= SimDuration::from_secs(120) && left > unack {
            ct.refresh(slot, now, unack);
        }
    } else {
        let dir = if d == 1 { Dir::Reply } else { Dir::Original };
        set_last(ct.tcp_flags_mut(slot), index, dir);
    }
}

/// What [`tcp`] does for a segment of the ACK class ([`tcp_is_plain_ack`]) on a known entry
/// in ESTABLISHED, either direction (`nf_conntrack_tcp_packet`), when `tcp_in_window`
/// accepts it: the flags are valid, `tcp_conntracks[dir][TCP_ACK_SET][sES]` is sES, so the
/// state stays and no PROTOINFO is cached; the window is updated; `last_index`/`last_dir`
/// record the segment; the timeout is [`tcp_timeout`]'s, UNACK's if lower and no reply was
/// seen yet (a loose pickup); with a reply seen, the first such segment sets ASSURED.
/// Returns the timeout, or `None` (nothing changed but what a second `tcp_in_window` of
/// the same segment does again) when the window check does not accept the segment, for
/// [`tcp`] to handle. The caller refreshes, then sets SEEN_REPLY for a reply, as after
/// [`tcp`].
#[inline(always)]
pub(crate) fn tcp_established_ack(
    e: &mut Entry,
    w: &mut Window,
    cfg: &Sysctls,
    dir: Dir,
    seg: &Segment,
) -> Option<SimDuration> {
    let fl = e.tcp_flags();
    let mut ld = usize::from(fl & tf::LAST_DIR_REPLY != 0);
    if in_window(w, dir.index(), ES, true, &mut ld, seg, cfg.tcp_be_liberal) != InWindow::Accept {
        return None;
    }
    let mut timeout = tcp_timeout(cfg, w, ES, TcpIndex::Ack);
    set_last(e.tcp_flags_mut(), TcpIndex::Ack, dir);
    if !e.status.contains(Status::SEEN_REPLY) {
        let unack = cfg.tcp_special(TcpTimeout::Unack);
        if timeout > unack {
            timeout = unack;
        }
    } else if !e.status.contains(Status::ASSURED) {
        e.status.insert(Status::ASSURED);
        e.pending |= ev::ASSURED;
    }
    Some(timeout)
}

/// `TCP_CONNTRACK_IGNORE`: the packet passes, the state and timeout stay.
fn ignore(ct: &mut Conntrack, slot: usize, dir: Dir, index: TcpIndex) -> Track {
    set_last(ct.tcp_flags_mut(slot), index, dir);
    Track::Accept
}

/// Notes the packet's flag class and direction (`last_index`, `last_dir`), as every packet
/// the TCP tracker lets through does.
#[inline(always)]
fn set_last(f: &mut u8, index: TcpIndex, dir: Dir) {
    *f &= !(tf::LAST_INDEX_MASK | tf::LAST_DIR_REPLY);
    *f |= index as u8;
    if dir == Dir::Reply {
        *f |= tf::LAST_DIR_REPLY;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flag_classes_and_validity() {
        assert_eq!(tcp_index(TcpFlags::SYN | TcpFlags::ACK), TcpIndex::SynAck);
        assert_eq!(tcp_index(TcpFlags::RST | TcpFlags::ACK), TcpIndex::Rst);
        assert_eq!(tcp_index(TcpFlags::FIN | TcpFlags::ACK), TcpIndex::Fin);
        assert!(!tcp_flags_valid(TcpFlags::FIN));
        assert!(!tcp_flags_valid(TcpFlags::NONE));
        assert!(!tcp_flags_valid(TcpFlags::SYN | TcpFlags::FIN));
        assert!(tcp_flags_valid(TcpFlags::ACK | TcpFlags::PSH));
        assert!(tcp_flags_valid(
            TcpFlags::SYN | TcpFlags::ECE | TcpFlags::CWR
        ));
    }

    /// The `matches!` form agrees with `tcp_valid_flags[]` (nf_conntrack_proto_tcp.c) as a
    /// list, for every byte, and the ACK class is what `get_conntrack_index` calls TCP_ACK_SET.
    #[test]
    fn valid_flags_and_the_ack_class_for_every_byte() {
        let valid = [0x02u8, 0x22, 0x12, 0x04, 0x14, 0x11, 0x31, 0x10, 0x30];
        for b in 0..=255u8 {
            let f = TcpFlags(b);
            assert_eq!(tcp_flags_valid(f), valid.contains(&(b & !0xc8)), "{b:#04x}");
            assert_eq!(
                tcp_is_plain_ack(f),
                tcp_flags_valid(f) && tcp_index(f) == TcpIndex::Ack,
                "{b:#04x}"
            );
        }
    }

    #[test]
    fn table_matches_kernel_md() {
        use TcpState::*;
        assert_eq!(
            tcp_transition(Dir::Original, TcpFlags::SYN, None),
            Some(Some(SynSent))
        );
        assert_eq!(
            tcp_transition(Dir::Reply, TcpFlags::SYN | TcpFlags::ACK, SynSent),
            Some(Some(SynRecv))
        );
        assert_eq!(
            tcp_transition(Dir::Original, TcpFlags::ACK, SynRecv),
            Some(Some(Established))
        );
        assert_eq!(
            tcp_transition(Dir::Original, TcpFlags::ACK, SynSent),
            Option::None
        );
        assert_eq!(
            tcp_transition(Dir::Reply, TcpFlags::ACK, SynSent),
            Some(Option::None)
        );
        assert_eq!(
            tcp_transition(Dir::Reply, TcpFlags::SYN, TimeWait),
            Some(Some(SynSent))
        );
        assert_eq!(
            tcp_transition(Dir::Original, TcpFlags::RST, None),
            Option::None
        );
    }
}
