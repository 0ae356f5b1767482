//! The IPVS connection table (`net/netfilter/ipvs/ip_vs_conn.c`): one entry per client
//! flow, keyed by protocol and the client's and virtual address and port, pointing at the
//! real server it was scheduled to; persistence templates; the protocol states and their
//! timeouts (`ip_vs_proto_tcp.c`, `ip_vs_proto_udp.c`, `ip_vs_proto_sctp.c`).
//!
//! Entries live in a hash table of 4096 buckets (`ip_vs_conn_tab`, `CONFIG_IP_VS_TAB_BITS`
//! 12) under `ip_vs_conn_hashkey`: `jhash_3words(caddr, cport, protocol, ip_vs_conn_rnd)`
//! (an IPv6 address first through `jhash(addr, 16, rnd)`), a new entry at the head of its
//! bucket (`hlist_add_head_rcu`). `/proc/net/ip_vs_conn`, which `ipvsadm -Lnc` reads, walks
//! buckets in order, so that is the listing order. The kernel draws `ip_vs_conn_rnd` at
//! boot; here it comes from the seed. The `(size_t)ipvs >> 8` the kernel XORs in (the
//! namespace's address) is taken as 0.

use std::collections::BTreeMap;
use std::net::IpAddr;

use sim_conntrack::tuple::jhash2;
use sim_core::{SimDuration, SimRng, SimTime};

use super::{DestKey, Protocol};

/// The protocol timeouts (`pd->timeout_table` of each protocol), in seconds, with the
/// kernel's defaults. `ipvsadm --set` changes three of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpvsTimeouts {
    /// `tcp_timeouts[]` by [`TcpState`] index.
    pub tcp_secs: [u32; 11],
    /// `udp_timeouts[IP_VS_UDP_S_NORMAL]`: 300 s.
    pub udp_secs: u32,
    /// `sctp_timeouts[]` of NONE, ESTABLISHED and CLOSED.
    pub sctp_secs: [u32; 3],
}

impl Default for IpvsTimeouts {
    fn default() -> Self {
        IpvsTimeouts {
            // ip_vs_proto_tcp.c tcp_timeouts: NONE 2 s, ESTABLISHED 15 min, SYN_SENT 2 min,
            // SYN_RECV 1 min, FIN_WAIT 2 min, TIME_WAIT 2 min, CLOSE 10 s, CLOSE_WAIT 60 s,
            // LAST_ACK 30 s, LISTEN 2 min, SYNACK 120 s.
            tcp_secs: [2, 900, 120, 60, 120, 120, 10, 60, 30, 120, 120],
            // ip_vs_proto_udp.c udp_timeouts: NORMAL 5 min.
            udp_secs: 300,
            // ip_vs_proto_sctp.c sctp_timeouts: NONE 2 s, ESTABLISHED 15 min, CLOSED 10 s.
            sctp_secs: [2, 900, 10],
        }
    }
}

impl IpvsTimeouts {
    /// `ip_vs_set_timeout`: tcp → ESTABLISHED, tcpfin → FIN_WAIT, udp → NORMAL; a 0 leaves
    /// that one alone.
    pub fn set(&mut self, tcp_secs: u32, tcpfin_secs: u32, udp_secs: u32) {
        if tcp_secs != 0 {
            self.tcp_secs[TcpState::Established as usize] = tcp_secs;
        }
        if tcpfin_secs != 0 {
            self.tcp_secs[TcpState::FinWait as usize] = tcpfin_secs;
        }
        if udp_secs != 0 {
            self.udp_secs = udp_secs;
        }
    }

    /// `ipvsadm -L --timeout`: `Timeout (tcp tcpfin udp): 900 120 300`.
    pub fn text(&self) -> String {
        format!(
            "Timeout (tcp tcpfin udp): {} {} {}\n",
            self.tcp_secs[TcpState::Established as usize],
            self.tcp_secs[TcpState::FinWait as usize],
            self.udp_secs
        )
    }

    /// The timeout of a connection in `state`.
    pub fn of(&self, state: ConnState) -> SimDuration {
        let secs = match state {
            ConnState::Tcp(s) => self.tcp_secs[s as usize],
            ConnState::Udp => self.udp_secs,
            ConnState::Sctp(s) => self.sctp_secs[s as usize],
        };
        SimDuration::from_secs(u64::from(secs))
    }
}

/// `IP_VS_TCP_S_*`, in the kernel's order (the index of `tcp_states[]`' columns).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum TcpState {
    None = 0,
    Established,
    SynSent,
    SynRecv,
    FinWait,
    TimeWait,
    Close,
    CloseWait,
    LastAck,
    Listen,
    Synack,
}

impl TcpState {
    const ALL: [TcpState; 11] = [
        TcpState::None,
        TcpState::Established,
        TcpState::SynSent,
        TcpState::SynRecv,
        TcpState::FinWait,
        TcpState::TimeWait,
        TcpState::Close,
        TcpState::CloseWait,
        TcpState::LastAck,
        TcpState::Listen,
        TcpState::Synack,
    ];

    /// `tcp_state_name_table`.
    pub fn name(self) -> &'static str {
        [
            "NONE",
            "ESTABLISHED",
            "SYN_SENT",
            "SYN_RECV",
            "FIN_WAIT",
            "TIME_WAIT",
            "CLOSE",
            "CLOSE_WAIT",
            "LAST_ACK",
            "LISTEN",
            "SYNACK",
        ][self as usize]
    }
}

/// The SCTP states the model uses (`IP_VS_SCTP_S_NONE`, `_ESTABLISHED`, `_CLOSED`): nfsim's
/// SCTP packets carry ports only, no chunks, so `sctp_state_transition`'s chunk-driven
/// machine cannot run; a connection is ESTABLISHED from its first packet and CLOSED never
/// (docs/kernel-model.md, IPVS).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[allow(missing_docs)]
pub enum SctpState {
    None = 0,
    Established = 1,
    Closed = 2,
}

impl SctpState {
    /// `sctp_state_name_table`'s names of these states.
    pub fn name(self) -> &'static str {
        ["NONE", "ESTABLISHED", "CLOSED"][self as usize]
    }
}

/// A connection's protocol state.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ConnState {
    /// A TCP state.
    Tcp(TcpState),
    /// UDP's one state, `IP_VS_UDP_S_NORMAL` ("UDP").
    Udp,
    /// An SCTP state.
    Sctp(SctpState),
}

impl ConnState {
    /// The state a new connection starts in (`ip_vs_conn_new`: `cp->state = 0`), which for
    /// UDP is already NORMAL.
    pub fn initial(p: Protocol) -> ConnState {
        match p {
            Protocol::Tcp => ConnState::Tcp(TcpState::None),
            Protocol::Udp => ConnState::Udp,
            Protocol::Sctp => ConnState::Sctp(SctpState::None),
        }
    }

    /// The name `/proc/net/ip_vs_conn` shows (`ip_vs_state_name`).
    pub fn name(self) -> &'static str {
        match self {
            ConnState::Tcp(s) => s.name(),
            ConnState::Udp => "UDP",
            ConnState::Sctp(s) => s.name(),
        }
    }

    /// Whether the state counts as active (`activeconns`): TCP and SCTP ESTABLISHED only.
    pub fn is_active(self) -> bool {
        matches!(
            self,
            ConnState::Tcp(TcpState::Established) | ConnState::Sctp(SctpState::Established)
        )
    }
}

/// A connection's flags (`IP_VS_CONN_F_*`) that the model uses.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ConnFlags {
    /// `IP_VS_CONN_F_TEMPLATE`: a persistence template, not a flow.
    pub template: bool,
    /// `IP_VS_CONN_F_INACTIVE`: counted in the real server's `inactconns`.
    pub inactive: bool,
    /// `IP_VS_CONN_F_NOOUTPUT`: no packet from the real server seen yet (TCP state
    /// transitions use the INPUT-ONLY table; set for non-NAT methods).
    pub no_output: bool,
    /// `IP_VS_CONN_F_NFCT`: the connection uses conntrack (`net.ipv4.vs.conntrack=1`).
    pub nfct: bool,
}

/// A connection's id in its table.
pub type ConnId = u64;

/// One entry of the connection table (`struct ip_vs_conn`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Conn {
    /// Its id.
    pub id: ConnId,
    /// The protocol.
    pub protocol: Protocol,
    /// Client address and port (a template's port is 0).
    pub caddr: IpAddr,
    /// Client port.
    pub cport: u16,
    /// Virtual address and port (an invalidated template's port is 65535).
    pub vaddr: IpAddr,
    /// Virtual port.
    pub vport: u16,
    /// Real server address and port.
    pub daddr: IpAddr,
    /// Real server port.
    pub dport: u16,
    /// Protocol state.
    pub state: ConnState,
    /// Flags.
    pub flags: ConnFlags,
    /// The current timeout (`cp->timeout`), restarted on each packet (`ip_vs_conn_put`).
    pub timeout: SimDuration,
    /// When it expires.
    pub expires: SimTime,
    /// The real server it is bound to (`cp->dest`), kept after that server is deleted.
    pub dest: Option<DestKey>,
    /// The template controlling it (`cp->control`), for a flow of a persistent service.
    pub control: Option<ConnId>,
    /// How many flows it controls (`cp->n_control`), for a template.
    pub n_control: u32,
    /// Where it sits in the hash table (bucket, insertion sequence).
    pub(crate) slot: (u32, u64),
}

impl Conn {
    /// The state name `ipvsadm -Lnc` prints: a template's is `NONE`
    /// (`ip_vs_ctpl_state_name_table[IP_VS_CTPL_S_NONE]`).
    pub fn state_name(&self) -> &'static str {
        if self.flags.template {
            "NONE"
        } else {
            self.state.name()
        }
    }
}

/// What finds a connection for a packet from the client (`__ip_vs_conn_in_get`): protocol,
/// client and virtual address and port; templates are found apart (`ip_vs_ct_in_get`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct InKey {
    pub template: bool,
    pub protocol: Protocol,
    pub caddr: IpAddr,
    pub cport: u16,
    pub vaddr: IpAddr,
    pub vport: u16,
}

/// What finds a connection for a packet from the real server (`ip_vs_conn_out_get`):
/// protocol, real server address and port, client address and port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) struct OutKey {
    pub protocol: Protocol,
    pub daddr: IpAddr,
    pub dport: u16,
    pub caddr: IpAddr,
    pub cport: u16,
}

/// The table.
#[derive(Clone, Debug, Default)]
pub(crate) struct ConnTable {
    rnd: u32,
    seq: u64,
    next_id: ConnId,
    conns: BTreeMap<ConnId, Conn>,
    by_in: BTreeMap<InKey, ConnId>,
    by_out: BTreeMap<OutKey, ConnId>,
    /// `/proc` order: bucket ascending, newest first in a bucket.
    by_slot: BTreeMap<(u32, std::cmp::Reverse<u64>), ConnId>,
    /// Expiry order.
    by_expiry: BTreeMap<(SimTime, ConnId), ()>,
}

/// `ip_vs_conn_hashkey` without the namespace term.
fn hashkey(rnd: u32, protocol: Protocol, addr: IpAddr, port: u16) -> u32 {
    // The address and port as the kernel's `__be32` / `__be16` values read on a
    // little-endian machine.
    let a = match addr {
        IpAddr::V4(v) => u32::from_le_bytes(v.octets()),
        IpAddr::V6(v) => {
            let o = v.octets();
            let w: Vec<u32> = o
                .chunks(4)
                .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                .collect();
            jhash2(&w, rnd)
        }
    };
    let p = u32::from(port.swap_bytes());
    // jhash_3words(a, b, c, initval) is jhash2 of the three words.
    jhash2(&[a, p, u32::from(protocol.number())], rnd) & ((1 << super::IP_VS_CONN_TAB_BITS) - 1)
}

impl ConnTable {
    pub(crate) fn new(seed: u64, label: &str) -> ConnTable {
        ConnTable {
            rnd: SimRng::derive(seed, &format!("{label}/ip_vs_conn_rnd")).next_u32(),
            ..ConnTable::default()
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.conns.is_empty()
    }

    pub(crate) fn in_proc_order(&self) -> Vec<&Conn> {
        self.by_slot.values().map(|id| &self.conns[id]).collect()
    }

    pub(crate) fn get(&self, id: ConnId) -> Option<&Conn> {
        self.conns.get(&id)
    }

    pub(crate) fn get_mut(&mut self, id: ConnId) -> Option<&mut Conn> {
        self.conns.get_mut(&id)
    }

    fn in_key(c: &Conn) -> InKey {
        InKey {
            template: c.flags.template,
            protocol: c.protocol,
            caddr: c.caddr,
            cport: c.cport,
            vaddr: c.vaddr,
            vport: c.vport,
        }
    }

    fn out_key(c: &Conn) -> Option<OutKey> {
        (!c.flags.template).then_some(OutKey {
            protocol: c.protocol,
            daddr: c.daddr,
            dport: c.dport,
            caddr: c.caddr,
            cport: c.cport,
        })
    }

    pub(crate) fn lookup_in(&self, k: &InKey) -> Option<ConnId> {
        self.by_in.get(k).copied()
    }

    pub(crate) fn lookup_out(&self, k: &OutKey) -> Option<ConnId> {
        self.by_out.get(k).copied()
    }

    /// Hashes a new entry (`ip_vs_conn_new` + `ip_vs_conn_hash`); `c.id` and `c.slot` are
    /// filled in.
    pub(crate) fn insert(&mut self, mut c: Conn) -> ConnId {
        let id = self.next_id;
        self.next_id += 1;
        c.id = id;
        self.place(&mut c);
        self.by_in.insert(Self::in_key(&c), id);
        if let Some(k) = Self::out_key(&c) {
            self.by_out.insert(k, id);
        }
        self.by_expiry.insert((c.expires, id), ());
        self.conns.insert(id, c);
        id
    }

    fn place(&mut self, c: &mut Conn) {
        self.seq += 1;
        let bucket = hashkey(self.rnd, c.protocol, c.caddr, c.cport);
        c.slot = (bucket, self.seq);
        self.by_slot
            .insert((bucket, std::cmp::Reverse(self.seq)), c.id);
    }

    /// Changes what an entry is looked up by (unhash, edit, hash again: `ip_vs_check_template`
    /// invalidating a template), so it moves to the head of its new bucket.
    pub(crate) fn rehash(&mut self, id: ConnId, edit: impl FnOnce(&mut Conn)) {
        let Some(mut c) = self.conns.remove(&id) else {
            return;
        };
        self.unindex(&c);
        self.by_slot
            .remove(&(c.slot.0, std::cmp::Reverse(c.slot.1)));
        edit(&mut c);
        self.place(&mut c);
        self.by_in.insert(Self::in_key(&c), id);
        if let Some(k) = Self::out_key(&c) {
            self.by_out.insert(k, id);
        }
        self.conns.insert(id, c);
    }

    /// Takes an entry out of the lookups, where it is still the one found (a newer entry
    /// with the same tuple shadows an older one, as the head of a hash chain does).
    fn unindex(&mut self, c: &Conn) {
        let k = Self::in_key(c);
        if self.by_in.get(&k) == Some(&c.id) {
            self.by_in.remove(&k);
        }
        if let Some(k) = Self::out_key(c) {
            if self.by_out.get(&k) == Some(&c.id) {
                self.by_out.remove(&k);
            }
        }
    }

    /// Restarts an entry's timer: `now + timeout` (`__ip_vs_conn_put_timer`).
    pub(crate) fn set_expiry(&mut self, id: ConnId, expires: SimTime) {
        if let Some(c) = self.conns.get_mut(&id) {
            self.by_expiry.remove(&(c.expires, id));
            c.expires = expires;
            self.by_expiry.insert((expires, id), ());
        }
    }

    /// Unhashes and drops an entry.
    pub(crate) fn remove(&mut self, id: ConnId) -> Option<Conn> {
        let c = self.conns.remove(&id)?;
        self.unindex(&c);
        self.by_slot
            .remove(&(c.slot.0, std::cmp::Reverse(c.slot.1)));
        self.by_expiry.remove(&(c.expires, id));
        Some(c)
    }

    /// The earliest expiry.
    pub(crate) fn next_expiry(&self) -> Option<SimTime> {
        self.by_expiry.keys().next().map(|(t, _)| *t)
    }

    /// The earliest entry due at `now`, with its expiry.
    pub(crate) fn first_due(&self, now: SimTime) -> Option<(SimTime, ConnId)> {
        self.by_expiry
            .keys()
            .next()
            .filter(|(t, _)| *t <= now)
            .copied()
    }
}

/// `tcp_state_idx`: rst 3, syn 0, fin 1, ack 2, none of them -1.
fn tcp_state_idx(flags: sim_core::TcpFlags) -> Option<usize> {
    if flags.contains(sim_core::TcpFlags::RST) {
        Some(3)
    } else if flags.contains(sim_core::TcpFlags::SYN) {
        Some(0)
    } else if flags.contains(sim_core::TcpFlags::FIN) {
        Some(1)
    } else if flags.contains(sim_core::TcpFlags::ACK) {
        Some(2)
    } else {
        None
    }
}

/// The direction a packet takes for the TCP state table (`IP_VS_DIR_*`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Dir {
    /// Client → real server.
    Input,
    /// Real server → client.
    Output,
}

/// `tcp_states[]` (the non-`secure_tcp` table, as since Linux 3.12's sloppy TCP: an ACK in
/// NONE is ESTABLISHED): rows INPUT syn/fin/ack/rst, OUTPUT …,
/// INPUT-ONLY …; columns the current state.
const TCP_STATES: [[u8; 11]; 12] = {
    const ES: u8 = 1;
    const SS: u8 = 2;
    const SR: u8 = 3;
    const FW: u8 = 4;
    const TW: u8 = 5;
    const CL: u8 = 6;
    const CW: u8 = 7;
    const LA: u8 = 8;
    const LI: u8 = 9;
    [
        // INPUT
        [SR, ES, ES, SR, SR, SR, SR, SR, SR, SR, SR],
        [CL, CW, SS, TW, TW, TW, CL, CW, LA, LI, TW],
        [ES, ES, SS, ES, FW, TW, CL, CW, CL, LI, ES],
        [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, SR],
        // OUTPUT
        [SS, ES, SS, SR, SS, SS, SS, SS, SS, LI, SR],
        [TW, FW, SS, TW, FW, TW, CL, TW, LA, LI, TW],
        [ES, ES, SS, ES, FW, TW, CL, CW, LA, ES, ES],
        [CL, CL, SS, CL, CL, TW, CL, CL, CL, CL, CL],
        // INPUT-ONLY
        [SR, ES, ES, SR, SR, SR, SR, SR, SR, SR, SR],
        [CL, FW, SS, TW, FW, TW, CL, CW, LA, LI, TW],
        [ES, ES, SS, ES, FW, TW, CL, CW, CL, LI, ES],
        [CL, CL, CL, SR, CL, CL, CL, CL, LA, LI, CL],
    ]
};

/// `set_tcp_state`: the next state of a TCP connection for a packet with `flags` going
/// `dir`, updating the NOOUTPUT flag; a packet with none of RST/SYN/FIN/ACK gives CLOSE.
pub(crate) fn next_tcp_state(
    cur: TcpState,
    no_output: &mut bool,
    dir: Dir,
    flags: sim_core::TcpFlags,
) -> TcpState {
    let mut off = match dir {
        Dir::Input => 0,
        Dir::Output => 4,
    };
    if *no_output {
        if dir == Dir::Output {
            *no_output = false;
        } else {
            off = 8;
        }
    }
    match tcp_state_idx(flags) {
        Some(i) => TcpState::ALL[usize::from(TCP_STATES[off + i][cur as usize])],
        None => TcpState::Close,
    }
}
