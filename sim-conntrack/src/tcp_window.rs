//! TCP sequence-window tracking (`tcp_in_window` and the bookkeeping around it in
//! nf_conntrack_proto_tcp.c, Linux 6.x; docs/kernel-model.md §3): per direction the highest
//! sequence sent (`td_end`), the highest the receiver allows (`td_maxend`), the largest
//! window (`td_maxwin`) and acknowledgement (`td_maxack`) seen, the window scale, and the
//! flags — among them `IP_CT_TCP_FLAG_DATA_UNACKNOWLEDGED`, which caps the timeout at
//! `nf_conntrack_tcp_timeout_unacknowledged`; per entry the last segment's numbers, from
//! which retransmissions are counted (`nf_conntrack_tcp_max_retrans`).
//!
//! An entry's window data live in [`Windows`], a slab beside the table's entries: an entry
//! names its record by an index kept in its protocol bytes, so that UDP and ICMP entries
//! pay nothing for it.

use sim_core::{Packet, TcpFlags, TcpOpts, L4};

/// `IP_CT_TCP_FLAG_*` bits of [`Seen::flags`].
pub(crate) mod sf {
    /// `IP_CT_TCP_FLAG_WINDOW_SCALE`: the sender sent the window scale option.
    pub const WINDOW_SCALE: u8 = 0x01;
    /// `IP_CT_TCP_FLAG_SACK_PERM`: the sender sent SACK-permitted.
    pub const SACK_PERM: u8 = 0x02;
    /// `IP_CT_TCP_FLAG_BE_LIBERAL`: out-of-window segments of this sender are accepted.
    pub const BE_LIBERAL: u8 = 0x08;
    /// `IP_CT_TCP_FLAG_DATA_UNACKNOWLEDGED`: the sender has data the receiver has not
    /// acknowledged.
    pub const DATA_UNACKNOWLEDGED: u8 = 0x10;
    /// `IP_CT_TCP_FLAG_MAXACK_SET`: `td_maxack` holds a value.
    pub const MAXACK_SET: u8 = 0x20;
    /// nfsim's own: the entry was loaded from a listing and this direction has sent nothing
    /// since, so its first segment's payload counts as in flight (see [`super::Window::listed`]).
    pub const LISTED: u8 = 0x80;
}

/// `IP_CT_EXP_CHALLENGE_ACK` in [`Window::last_flags`] (the other bits there are
/// [`sf`]'s, recorded from an ignored SYN's options).
pub(crate) const EXP_CHALLENGE_ACK: u8 = 0x40;

/// `struct ip_ct_tcp_state`: what the tracker knows of one direction's sender.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Seen {
    pub td_end: u32,
    pub td_maxend: u32,
    pub td_maxwin: u32,
    pub td_maxack: u32,
    pub td_scale: u8,
    pub flags: u8,
}

/// The window part of `struct ip_ct_tcp` (the state, `last_index`, `last_dir` and the
/// close-init and simultaneous-open flags are in the entry's protocol bytes).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Window {
    /// By direction (`Dir::index`).
    pub seen: [Seen; 2],
    pub last_seq: u32,
    pub last_ack: u32,
    pub last_end: u32,
    pub last_win: u16,
    pub last_wscale: u8,
    pub last_flags: u8,
    pub retrans: u8,
}

impl Window {
    /// The state after `tcp_new` for the connection's first segment `seg`: for a SYN the
    /// original sender's end, window and options; for a segment picked up mid-stream
    /// (`nf_conntrack_tcp_loose`) its end and window, with SACK and liberal window checks
    /// assumed for both directions.
    pub fn new_connection(seg: &Segment) -> Window {
        let mut w = Window::default();
        let s = &mut w.seen[0];
        s.td_end = seg.end;
        s.td_maxwin = u32::from(seg.win).max(1);
        if seg.flags.contains(TcpFlags::SYN) {
            s.td_maxend = s.td_end;
            tcp_options(seg, s);
        } else {
            s.td_maxend = s.td_end.wrapping_add(s.td_maxwin);
            w.seen[0].flags = sf::SACK_PERM | sf::BE_LIBERAL;
            w.seen[1].flags = sf::SACK_PERM | sf::BE_LIBERAL;
        }
        w
    }

    /// The state of an entry loaded from a `conntrack -L` listing, which prints no window
    /// data: as after a mid-stream pickup (`tcp_new` with `nf_conntrack_tcp_loose`), nothing
    /// known (`td_maxwin` 0: each direction's first segment initialises it in
    /// `tcp_in_window`), SACK and liberal window checks assumed in both directions. One
    /// difference from a pickup: a direction's first segment is taken to start at the
    /// sender's `td_end` (its payload is new data, not yet acknowledged, as it would be on
    /// the node the listing came from), where a pickup takes its end.
    pub fn listed() -> Window {
        let mut w = Window::default();
        w.seen[0].flags = sf::SACK_PERM | sf::BE_LIBERAL | sf::LISTED;
        w.seen[1].flags = sf::SACK_PERM | sf::BE_LIBERAL | sf::LISTED;
        w
    }

    /// Whether either side has data in flight the other has not acknowledged.
    pub fn unacknowledged(&self) -> bool {
        (self.seen[0].flags | self.seen[1].flags) & sf::DATA_UNACKNOWLEDGED != 0
    }
}

/// What `tcp_in_window` reads of a segment.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Segment {
    pub flags: TcpFlags,
    pub seq: u32,
    pub ack: u32,
    /// The window field, unscaled.
    pub win: u16,
    /// `segment_seq_plus_len`: seq + payload + SYN + FIN.
    pub end: u32,
    pub opts: TcpOpts,
}

impl Segment {
    /// The segment of a TCP packet (`None` for other protocols).
    #[inline(always)]
    pub fn of(pkt: &Packet) -> Option<Segment> {
        let L4::Tcp {
            flags,
            seq,
            ack,
            win,
            opts,
            ..
        } = pkt.l4
        else {
            return None;
        };
        let end = seq
            .wrapping_add(pkt.tcp_payload_len())
            .wrapping_add(u32::from(flags.contains(TcpFlags::SYN)))
            .wrapping_add(u32::from(flags.contains(TcpFlags::FIN)));
        Some(Segment {
            flags,
            seq,
            ack,
            win,
            end,
            opts,
        })
    }

    fn has(&self, f: TcpFlags) -> bool {
        self.flags.contains(f)
    }
}

/// `before(a, b)`: `a` comes before `b` in sequence space.
#[inline(always)]
pub(crate) fn before(a: u32, b: u32) -> bool {
    (a.wrapping_sub(b) as i32) < 0
}

/// `after(a, b)`.
#[inline(always)]
pub(crate) fn after(a: u32, b: u32) -> bool {
    before(b, a)
}

/// `MAXACKWINDOW(sender)`.
fn max_ack_window(s: &Seen) -> u32 {
    s.td_maxwin.max(66_000)
}

/// `tcp_options`: the window scale and SACK-permitted options into `s` (a header without
/// options changes nothing).
pub(crate) fn tcp_options(seg: &Segment, s: &mut Seen) {
    if seg.opts.hdr_len <= 20 {
        return;
    }
    s.td_scale = 0;
    s.flags &= sf::BE_LIBERAL;
    if seg.opts.sack_perm {
        s.flags |= sf::SACK_PERM;
    }
    if let Some(w) = seg.opts.wscale {
        s.td_scale = w.min(14);
        s.flags |= sf::WINDOW_SCALE;
    }
}

/// `tcp_init_sender`: a SYN/ACK answering a SYN, or a SYN from the reply direction.
fn init_sender(w: &mut Window, d: usize, seg: &Segment) {
    let s = &mut w.seen[d];
    s.td_end = seg.end;
    s.td_maxend = seg.end;
    s.td_maxwin = u32::from(seg.win).max(1);
    tcp_options(seg, s);
    // RFC 1323: scaling only when both sides sent the option.
    if d == 1
        && !(w.seen[1].flags & sf::WINDOW_SCALE != 0 && w.seen[0].flags & sf::WINDOW_SCALE != 0)
    {
        w.seen[0].td_scale = 0;
        w.seen[1].td_scale = 0;
    }
}

/// `nf_ct_tcp_state_reset`.
pub(crate) fn state_reset(s: &mut Seen) {
    *s = Seen {
        flags: s.flags & sf::BE_LIBERAL,
        ..Seen::default()
    };
}

/// What `tcp_in_window` decided (`enum nf_ct_tcp_action`), and why when it was not ACCEPT.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum InWindow {
    /// In window (or accepted as liberal): go on with the state machine.
    Accept,
    /// Let the packet pass without touching the entry (`NFCT_TCP_IGNORE`).
    Ignore(&'static str),
    /// Out of window: the packet gets no entry (`NFCT_TCP_INVALID`).
    Invalid(&'static str),
}

/// `tcp_in_window` for a segment in direction `d` (0 original, 1 reply) of an entry in TCP
/// state `state`, `ack_class` when the segment is of the ACK class (`TCP_ACK_SET`), `dir`
/// being the entry's `last_dir` in the caller's terms. Updates `w` as the kernel does; with
/// `be_liberal` (the sysctl, or the sender's `IP_CT_TCP_FLAG_BE_LIBERAL`) a failed check
/// accepts the segment without updating the sender (`nf_tcp_log_invalid`). `last_dir` is
/// the entry's last direction (0/1), updated by the retransmission check.
pub(crate) fn in_window(
    w: &mut Window,
    d: usize,
    state: u8,
    ack_class: bool,
    last_dir: &mut usize,
    seg: &Segment,
    be_liberal: bool,
) -> InWindow {
    const SYN_SENT: u8 = 1;
    const SYN_RECV: u8 = 2;
    let r = 1 - d;
    let mut ack = seg.ack;
    let mut sack = ack;
    let win_raw = seg.win;
    let mut win = u32::from(win_raw);
    let mut seq = seg.seq;
    let mut end = seg.end;
    if w.seen[r].flags & sf::SACK_PERM != 0 {
        if let Some(right) = seg.opts.sack {
            if after(right, sack) {
                sack = right;
            }
        }
    }
    if w.seen[d].td_maxwin == 0 {
        // Initialise the sender's data.
        if seg.has(TcpFlags::SYN) {
            init_sender(w, d, seg);
            if !seg.has(TcpFlags::ACK) {
                // Simultaneous open.
                return InWindow::Accept;
            }
        } else {
            // Picked up mid-connection: use what the segment says.
            let s = &mut w.seen[d];
            // A listed entry: the segment's payload is data in flight (see Window::listed).
            s.td_end = if s.flags & sf::LISTED != 0 { seq } else { end };
            s.flags &= !sf::LISTED;
            let swin = win << s.td_scale;
            s.td_maxwin = swin.max(1);
            s.td_maxend = end.wrapping_add(s.td_maxwin);
            let rcv = &mut w.seen[r];
            if rcv.td_maxwin == 0 {
                // Nothing seen the other way yet: make III and IV pass until it is.
                rcv.td_end = sack;
                rcv.td_maxend = sack;
            } else if sack == rcv.td_end.wrapping_add(1) {
                // Likely a reply to a keepalive.
                rcv.td_end = rcv.td_end.wrapping_add(1);
            }
        }
    } else if seg.has(TcpFlags::SYN)
        && after(end, w.seen[d].td_end)
        && (state == SYN_SENT || state == SYN_RECV)
    {
        // RFC 793: a reinitialised TCP uses larger sequence numbers; start over.
        init_sender(w, d, seg);
        if d == 1 && !seg.has(TcpFlags::ACK) {
            return InWindow::Accept;
        }
    }
    if !seg.has(TcpFlags::ACK) {
        ack = w.seen[r].td_end;
        sack = ack;
    } else if seg.has(TcpFlags::RST) && ack == 0 {
        // Broken stacks that set ACK in RSTs with a zero acknowledgement.
        ack = w.seen[r].td_end;
        sack = ack;
    }
    if seg.has(TcpFlags::RST) && seq == 0 && state == SYN_SENT {
        // A RST answering a SYN.
        seq = w.seen[d].td_end;
        end = seq;
    }
    let liberal = |w: &Window| be_liberal || w.seen[d].flags & sf::BE_LIBERAL != 0;
    let (snd, rcv) = (w.seen[d], w.seen[r]);
    if !before(seq, snd.td_maxend.wrapping_add(1)) {
        let overshot = end.wrapping_sub(snd.td_maxend).wrapping_add(1);
        let ack_ok = after(
            sack,
            rcv.td_end
                .wrapping_sub(max_ack_window(&snd))
                .wrapping_sub(1),
        );
        let in_recv_win = rcv.td_maxwin != 0
            && after(end, snd.td_end.wrapping_sub(rcv.td_maxwin).wrapping_sub(1));
        if in_recv_win
            && ack_ok
            && overshot <= rcv.td_maxwin
            && before(sack, rcv.td_end.wrapping_add(1))
        {
            // A sender beyond the receive window: let an ACK of this data update the state.
            w.seen[d].td_end = end;
            w.seen[d].flags |= sf::DATA_UNACKNOWLEDGED;
            return if liberal(w) {
                InWindow::Accept
            } else {
                InWindow::Ignore("bytes more than expected")
            };
        }
        return if liberal(w) {
            InWindow::Accept
        } else {
            InWindow::Invalid("SEQ is over upper bound (over the window of the receiver)")
        };
    }
    if !before(sack, rcv.td_end.wrapping_add(1)) {
        return if liberal(w) {
            InWindow::Accept
        } else {
            InWindow::Invalid("ACK is over upper bound (ACKed data not seen yet)")
        };
    }
    let in_recv_win =
        rcv.td_maxwin == 0 || after(end, snd.td_end.wrapping_sub(rcv.td_maxwin).wrapping_sub(1));
    if !in_recv_win {
        return if liberal(w) {
            InWindow::Accept
        } else {
            InWindow::Ignore("SEQ is under lower bound (already ACKed data retransmitted)")
        };
    }
    if !after(
        sack,
        rcv.td_end
            .wrapping_sub(max_ack_window(&snd))
            .wrapping_sub(1),
    ) {
        return if liberal(w) {
            InWindow::Accept
        } else {
            InWindow::Ignore("ignored ACK under lower bound (possible overly delayed)")
        };
    }
    // Window scaling (RFC 1323).
    if !seg.has(TcpFlags::SYN) {
        win <<= w.seen[d].td_scale;
    }
    // Update the sender's data.
    let swin = win.wrapping_add(sack.wrapping_sub(ack));
    let s = &mut w.seen[d];
    if s.td_maxwin < swin {
        s.td_maxwin = swin;
    }
    if after(end, s.td_end) {
        s.td_end = end;
        s.flags |= sf::DATA_UNACKNOWLEDGED;
    }
    if seg.has(TcpFlags::ACK) {
        if s.flags & sf::MAXACK_SET == 0 {
            s.td_maxack = ack;
            s.flags |= sf::MAXACK_SET;
        } else if after(ack, s.td_maxack) {
            s.td_maxack = ack;
        }
    }
    let snd_maxend = s.td_maxend;
    // Update the receiver's data.
    let rc = &mut w.seen[r];
    if rc.td_maxwin != 0 && after(end, snd_maxend) {
        rc.td_maxwin = rc.td_maxwin.wrapping_add(end.wrapping_sub(snd_maxend));
    }
    if after(sack.wrapping_add(win), rc.td_maxend.wrapping_sub(1)) {
        rc.td_maxend = sack.wrapping_add(win);
        if win == 0 {
            rc.td_maxend = rc.td_maxend.wrapping_add(1);
        }
    }
    if ack == rc.td_end {
        rc.flags &= !sf::DATA_UNACKNOWLEDGED;
    }
    // Retransmissions.
    if ack_class {
        if *last_dir == d
            && w.last_seq == seq
            && w.last_ack == ack
            && w.last_end == end
            && w.last_win == win_raw
        {
            w.retrans = w.retrans.saturating_add(1);
        } else {
            *last_dir = d;
            w.last_seq = seq;
            w.last_ack = ack;
            w.last_end = end;
            w.last_win = win_raw;
            w.retrans = 0;
        }
    }
    InWindow::Accept
}

/// The window records of a table's TCP entries: a slab with a free list, named by
/// `index + 1` (0: none) in an entry's protocol bytes.
#[derive(Clone, Debug, Default)]
pub(crate) struct Windows {
    recs: Vec<Window>,
    free: Vec<u32>,
}

impl Windows {
    /// Stores `w`, returning its name (never 0).
    pub fn alloc(&mut self, w: Window) -> u32 {
        match self.free.pop() {
            Some(i) => {
                self.recs[i as usize] = w;
                i + 1
            }
            None => {
                self.recs.push(w);
                self.recs.len() as u32
            }
        }
    }

    /// Frees the record `name` (0: nothing).
    pub fn release(&mut self, name: u32) {
        if name != 0 {
            self.free.push(name - 1);
        }
    }

    #[inline(always)]
    pub fn get_mut(&mut self, name: u32) -> Option<&mut Window> {
        self.recs.get_mut((name as usize).wrapping_sub(1))
    }

    /// Heap bytes held.
    pub fn heap_bytes(&self) -> usize {
        self.recs.capacity() * std::mem::size_of::<Window>() + self.free.capacity() * 4
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sim_core::Packet;

    fn seg(text: &str) -> Segment {
        Segment::of(&text.parse::<Packet>().unwrap()).unwrap()
    }

    /// A handshake, then data from the client that the server never acknowledges: the
    /// client's DATA_UNACKNOWLEDGED stays set; the server's ACK of it clears it.
    #[test]
    fn unacknowledged_data_is_flagged_until_acked() {
        let c = "tcp 10.0.0.1:1000 -> 10.0.0.2:80";
        let s = "tcp 10.0.0.2:80 -> 10.0.0.1:1000";
        let syn = seg(&format!("{c} SYN seq=100 len=0"));
        let mut w = Window::new_connection(&syn);
        let mut last = 0;
        let mut go = |w: &mut Window, d: usize, st: u8, ack_class: bool, t: &str| {
            in_window(w, d, st, ack_class, &mut last, &seg(t), false)
        };
        assert_eq!(
            go(&mut w, 0, 1, false, &format!("{c} SYN seq=100 len=0")),
            InWindow::Accept
        );
        assert_eq!(
            go(
                &mut w,
                1,
                1,
                false,
                &format!("{s} SYN,ACK seq=500 ack=101 len=0")
            ),
            InWindow::Accept
        );
        assert_eq!(
            go(
                &mut w,
                0,
                2,
                true,
                &format!("{c} ACK seq=101 ack=501 len=0")
            ),
            InWindow::Accept
        );
        assert!(!w.unacknowledged());
        assert_eq!(
            go(
                &mut w,
                0,
                3,
                true,
                &format!("{c} ACK seq=101 ack=501 len=100")
            ),
            InWindow::Accept
        );
        assert!(w.unacknowledged());
        assert_eq!(w.retrans, 0);
        // The same segment again: a retransmission.
        go(
            &mut w,
            0,
            3,
            true,
            &format!("{c} ACK seq=101 ack=501 len=100"),
        );
        go(
            &mut w,
            0,
            3,
            true,
            &format!("{c} ACK seq=101 ack=501 len=100"),
        );
        assert_eq!(w.retrans, 2);
        go(
            &mut w,
            1,
            3,
            true,
            &format!("{s} ACK seq=501 ack=201 len=0"),
        );
        assert!(!w.unacknowledged());
        assert_eq!(w.retrans, 0);
        // A segment far beyond what the server allows is out of window.
        assert!(matches!(
            go(
                &mut w,
                0,
                3,
                true,
                &format!("{c} ACK seq=1000000 ack=501 len=10")
            ),
            InWindow::Invalid(_)
        ));
        let mut l = 0;
        assert_eq!(
            in_window(
                &mut w,
                0,
                3,
                true,
                &mut l,
                &seg(&format!("{c} ACK seq=1000000 ack=501 len=10")),
                true
            ),
            InWindow::Accept,
            "be_liberal accepts it"
        );
    }

    #[test]
    fn sequence_comparisons_wrap() {
        assert!(before(u32::MAX, 0));
        assert!(after(5, u32::MAX - 5));
        assert!(!before(7, 7) && !after(7, 7));
    }
}
