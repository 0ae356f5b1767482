//! IPVS, the kernel's layer-4 load balancer (`net/netfilter/ipvs/`), as kube-proxy's IPVS
//! mode programs it: per network namespace, virtual services keyed by (protocol, virtual
//! address, port), each with a scheduler and real servers ("destinations"), the connection
//! table that pins a client's flow to the real server it was scheduled to, and the text of
//! `ipvsadm-save -n`, `ipvsadm -Ln`, `ipvsadm -Ln --stats` and `ipvsadm -Lnc` as ipvsadm
//! 1.31 prints it.
//!
//! Read in this order:
//!
//! - this file: the types ([`ServiceKey`], [`ServiceSpec`], [`DestSpec`], [`Scheduler`],
//!   [`ServiceFlags`]), the namespace's state [`Ipvs`] and the control operations kube-proxy's
//!   netlink calls make (`IPVS_CMD_NEW_SERVICE`, `IPVS_CMD_SET_SERVICE`,
//!   `IPVS_CMD_DEL_SERVICE`, `IPVS_CMD_NEW_DEST`, `IPVS_CMD_SET_DEST`, `IPVS_CMD_DEL_DEST`,
//!   `IPVS_CMD_GET_*`, `IPVS_CMD_SET_CONFIG`), after `ip_vs_ctl.c`.
//! - `sched.rs`: the schedulers, each as its `ip_vs_<name>.c` picks a real server.
//! - `conn.rs`: the connection table (`ip_vs_conn.c`), its protocol states and timeouts
//!   (`ip_vs_proto_tcp.c`, `ip_vs_proto_udp.c`, `ip_vs_proto_sctp.c`) and persistence
//!   templates.
//! - `core.rs`: what IPVS does with a packet: [`Ipvs::ip_vs_in`] (find or schedule the
//!   connection, NAT to the real server), [`Ipvs::ip_vs_out`] (un-NAT the reply), and
//!   [`Ipvs::handle_timeout`] (`ip_vs_conn_expire`); the namespace's hooks
//!   (`netns/ipvs_hook.rs`) call them and apply the verdicts.
//! - `text.rs`: ipvsadm's listings.
//!
//! What it deliberately leaves out: firewall-mark services (`-f`), the tunnel and direct
//! routing forwarding methods' transmit paths (kube-proxy uses masquerading only; the
//! methods are kept and listed), thresholds' effect on scheduling beyond the overload flag,
//! persistence engines (`--pe sip`), the sync daemon, and rate estimators (`--rate`).
//!
//! This machine's kernel has no `CONFIG_IP_VS`, so nothing here was checked against a real
//! kernel: each behaviour cites the kernel function it follows (docs/kernel-model.md, IPVS).

mod conn;
mod core;
mod sched;
mod text;

pub use conn::{Conn, ConnFlags, ConnId, ConnState, IpvsTimeouts, SctpState, TcpState};
pub use core::{CtKill, CtView, Decision, InVerdict, OutVerdict, PacketView};
pub use sched::Scheduler;

use std::collections::BTreeMap;
use std::fmt;
use std::net::IpAddr;

use sim_conntrack::SysctlError;
use sim_core::packet::{IPPROTO_SCTP, IPPROTO_TCP, IPPROTO_UDP};

use sched::SchedState;

/// `IP_VS_VERSION_CODE` 1.2.1, which every kernel since 2.6.10 reports and `ipvsadm -L`
/// prints in its first line.
pub const IP_VS_VERSION: (u8, u8, u8) = (1, 2, 1);

/// `CONFIG_IP_VS_TAB_BITS` default 12: the connection hash table has `1 << 12` = 4096
/// buckets (`ip_vs_conn_tab_size`, the `size=` of `ipvsadm -L`'s first line).
pub const IP_VS_CONN_TAB_BITS: u32 = 12;

/// `IP_VS_SCHEDNAME_MAXLEN`: a scheduler's name is at most 15 bytes.
pub const IP_VS_SCHEDNAME_MAXLEN: usize = 16;

/// The protocols a virtual service can balance (`ip_vs_proto_*.c`; kube-proxy creates TCP,
/// UDP and SCTP services).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Protocol {
    /// TCP.
    Tcp,
    /// UDP.
    Udp,
    /// SCTP.
    Sctp,
}

impl Protocol {
    /// The IP protocol number.
    pub fn number(self) -> u8 {
        match self {
            Protocol::Tcp => IPPROTO_TCP,
            Protocol::Udp => IPPROTO_UDP,
            Protocol::Sctp => IPPROTO_SCTP,
        }
    }

    /// The protocol of an IP protocol number, if IPVS balances it.
    pub fn from_number(n: u8) -> Option<Protocol> {
        match n {
            IPPROTO_TCP => Some(Protocol::Tcp),
            IPPROTO_UDP => Some(Protocol::Udp),
            IPPROTO_SCTP => Some(Protocol::Sctp),
            _ => None,
        }
    }

    /// The upper-case name `ipvsadm -L` and `/proc/net/ip_vs_conn` print (`protocol_name`
    /// in ipvsadm.c, `ip_vs_proto_name` in the kernel).
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "TCP",
            Protocol::Udp => "UDP",
            Protocol::Sctp => "SCTP",
        }
    }

    /// The option `ipvsadm -S` writes for a service of this protocol
    /// (`option_from_protocol`).
    pub fn save_option(self) -> &'static str {
        match self {
            Protocol::Tcp => "-t",
            Protocol::Udp => "-u",
            Protocol::Sctp => "--sctp-service",
        }
    }
}

impl fmt::Display for Protocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// What identifies a virtual service: protocol, virtual address and port
/// (`ip_vs_service_find`; firewall-mark services are not modelled).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ServiceKey {
    /// The protocol.
    pub protocol: Protocol,
    /// The virtual address (IPv4 or IPv6).
    pub addr: IpAddr,
    /// The virtual port.
    pub port: u16,
}

impl fmt::Display for ServiceKey {
    /// `TCP 10.96.0.1:443`, `UDP [fd00::a]:53`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}",
            self.protocol,
            text::addr_port(self.addr, self.port)
        )
    }
}

/// A virtual service's flags (`IP_VS_SVC_F_*` in `include/uapi/linux/ip_vs.h`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct ServiceFlags(pub u32);

impl ServiceFlags {
    /// `IP_VS_SVC_F_PERSISTENT`: a client keeps its real server for the persistence timeout
    /// (kube-proxy sets it for `sessionAffinity: ClientIP`).
    pub const PERSISTENT: u32 = 0x0001;
    /// `IP_VS_SVC_F_HASHED`: the kernel's own "in the service table" flag; kube-proxy
    /// sets it in what it sends, the kernel ignores it there.
    pub const HASHED: u32 = 0x0002;
    /// `IP_VS_SVC_F_ONEPACKET`: one-packet scheduling (UDP only).
    pub const ONEPACKET: u32 = 0x0004;
    /// `IP_VS_SVC_F_SCHED1`: scheduler flag 1 (`sh-fallback`, `mh-fallback`).
    pub const SCHED1: u32 = 0x0008;
    /// `IP_VS_SVC_F_SCHED2`: scheduler flag 2 (`sh-port`, `mh-port`).
    pub const SCHED2: u32 = 0x0010;
    /// `IP_VS_SVC_F_SCHED3`: scheduler flag 3.
    pub const SCHED3: u32 = 0x0020;
    /// The bits the kernel keeps from what userspace sends (`ip_vs_add_service`:
    /// `svc->flags = u->flags | IP_VS_SVC_F_HASHED` after the table insert; userspace's
    /// HASHED bit is masked out of `u->flags` by `ip_vs_genl_parse_service`'s
    /// `flags.mask`).
    const USER_MASK: u32 = !Self::HASHED;

    /// Whether `bit` (one of the constants) is set.
    pub fn has(self, bit: u32) -> bool {
        self.0 & bit != 0
    }
}

/// A real server's forwarding method (`IP_VS_CONN_F_FWD_MASK` values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FwdMethod {
    /// `IP_VS_CONN_F_MASQ`: NAT (the only method kube-proxy uses).
    Masq,
    /// `IP_VS_CONN_F_LOCALNODE`: the real server is this host.
    Local,
    /// `IP_VS_CONN_F_TUNNEL`: IP-in-IP.
    Tunnel,
    /// `IP_VS_CONN_F_DROUTE`: direct routing.
    Route,
}

impl FwdMethod {
    /// The word `ipvsadm -L` prints (`fwd_name`).
    pub fn name(self) -> &'static str {
        match self {
            FwdMethod::Masq => "Masq",
            FwdMethod::Local => "Local",
            FwdMethod::Tunnel => "Tunnel",
            FwdMethod::Route => "Route",
        }
    }

    /// The switch `ipvsadm -S` writes (`fwd_switch`: local and direct routing both `-g`).
    pub fn save_switch(self) -> &'static str {
        match self {
            FwdMethod::Masq => "-m",
            FwdMethod::Tunnel => "-i",
            FwdMethod::Local | FwdMethod::Route => "-g",
        }
    }
}

/// A virtual service as `ipvsadm -A` / `-E` or kube-proxy's `AddVirtualServer` /
/// `UpdateVirtualServer` give it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    /// Protocol, virtual address and port.
    pub key: ServiceKey,
    /// The scheduler.
    pub scheduler: Scheduler,
    /// Flags ([`ServiceFlags`]).
    pub flags: ServiceFlags,
    /// The persistence timeout in seconds (used with [`ServiceFlags::PERSISTENT`];
    /// kube-proxy passes `sessionAffinityConfig.clientIP.timeoutSeconds`, default 10800).
    pub timeout_secs: u32,
    /// The persistence granularity as a prefix length: a template covers the clients of one
    /// `/netmask_len` (kube-proxy: 32 for IPv4, 128 for IPv6, one client each). The kernel
    /// takes any IPv4 mask; only contiguous ones are modelled.
    pub netmask_len: u8,
}

impl ServiceSpec {
    /// A service with `scheduler`, no flags, persistence off, full-length netmask.
    pub fn new(key: ServiceKey, scheduler: Scheduler) -> ServiceSpec {
        ServiceSpec {
            key,
            scheduler,
            flags: ServiceFlags::default(),
            timeout_secs: 0,
            netmask_len: if key.addr.is_ipv4() { 32 } else { 128 },
        }
    }

    /// The same, persistent for `timeout_secs` (`ipvsadm -p`, `sessionAffinity: ClientIP`).
    pub fn persistent(mut self, timeout_secs: u32) -> ServiceSpec {
        self.flags.0 |= ServiceFlags::PERSISTENT;
        self.timeout_secs = timeout_secs;
        self
    }
}

/// A real server as `ipvsadm -a` / `-e` or kube-proxy's `AddRealServer` /
/// `UpdateRealServer` give it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DestSpec {
    /// The real server's address (of the service's family).
    pub addr: IpAddr,
    /// Its port.
    pub port: u16,
    /// Its weight, 0 ..= `i32::MAX` (0: no new connections, `ip_vs_dest_set`'s quiescing,
    /// which kube-proxy's graceful termination uses).
    pub weight: u32,
    /// Forwarding method (kube-proxy: [`FwdMethod::Masq`]).
    pub fwd: FwdMethod,
    /// Upper connection threshold (0: none).
    pub u_threshold: u32,
    /// Lower connection threshold (0: none).
    pub l_threshold: u32,
}

impl DestSpec {
    /// A masquerading real server of weight `weight`, no thresholds (what kube-proxy adds).
    pub fn masq(addr: IpAddr, port: u16, weight: u32) -> DestSpec {
        DestSpec {
            addr,
            port,
            weight,
            fwd: FwdMethod::Masq,
            u_threshold: 0,
            l_threshold: 0,
        }
    }
}

/// Packet and connection counters of a service or real server (`struct ip_vs_kstats`):
/// what `ipvsadm -Ln --stats` prints.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Connections scheduled (`ip_vs_conn_stats`).
    pub conns: u64,
    /// Packets client → real server (`ip_vs_in_stats`).
    pub inpkts: u64,
    /// Packets real server → client (`ip_vs_out_stats`).
    pub outpkts: u64,
    /// Bytes (IP length) client → real server.
    pub inbytes: u64,
    /// Bytes real server → client.
    pub outbytes: u64,
}

/// The connection counters of one real server (`struct ip_vs_dest`'s `activeconns`,
/// `inactconns`, `persistconns`), kept as the kernel keeps them: a connection counts from
/// `ip_vs_bind_dest` to `ip_vs_unbind_dest`, moving between active and inactive as its
/// protocol state changes (`ip_vs_tcp_state`'s `set_tcp_state`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DestCounters {
    /// Connections in an active state (TCP ESTABLISHED; UDP never).
    pub activeconns: u32,
    /// Other connections (TCP not established, every UDP one).
    pub inactconns: u32,
    /// Persistence templates pointing at it.
    pub persistconns: u32,
}

impl DestCounters {
    fn is_zero(&self) -> bool {
        self.activeconns == 0 && self.inactconns == 0 && self.persistconns == 0
    }
}

/// A real server of a service, with its counters.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Destination {
    /// What it was added or last edited with.
    pub spec: DestSpec,
    /// Its connection counters.
    pub counters: DestCounters,
    /// Its packet counters.
    pub stats: Stats,
    /// The last non-zero weight it was given (`dest->last_weight`, which mh's table keeps
    /// a quiesced server's entries by).
    pub last_weight: u32,
    /// `IP_VS_DEST_F_OVERLOAD`: its connections reached the upper threshold.
    pub overloaded: bool,
}

/// A virtual service with its real servers in the kernel's list order, newest first (a new
/// server goes to the head: `list_add_rcu(&dest->n_list, &svc->destinations)` in
/// `__ip_vs_update_dest`), which the schedulers walk and netlink dumps give.
#[derive(Clone, Debug)]
pub struct VirtualService {
    /// What it was added or last edited with.
    pub spec: ServiceSpec,
    /// Its real servers in list order.
    pub dests: Vec<Destination>,
    /// Its packet counters.
    pub stats: Stats,
    sched: SchedState,
}

impl VirtualService {
    /// The real server at `addr`:`port`, if the service has it.
    pub fn dest(&self, addr: IpAddr, port: u16) -> Option<&Destination> {
        self.dests
            .iter()
            .find(|d| d.spec.addr == addr && d.spec.port == port)
    }
}

/// Identifies a real server of a service: the service key and the server's address and
/// port. Connections keep it after the server is deleted (the kernel's `dest_trash`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DestKey {
    /// The service.
    pub svc: ServiceKey,
    /// The real server's address.
    pub addr: IpAddr,
    /// The real server's port.
    pub port: u16,
}

/// The IPVS sysctls (`/proc/sys/net/ipv4/vs/*`, `ip_vs_ctl.c`'s `vs_vars`) that decide what
/// a connection does when its real server goes away, with the kernel's defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpvsSysctls {
    /// `net.ipv4.vs.conntrack` (default 0): keep conntrack entries for IPVS connections and
    /// alter them to show the real server (`ip_vs_update_conntrack`); kube-proxy sets 1.
    pub conntrack: bool,
    /// `net.ipv4.vs.expire_nodest_conn` (default 0): a packet of a connection whose real
    /// server was deleted expires the connection (and is dropped) instead of still going
    /// to the old server; kube-proxy sets 1.
    pub expire_nodest_conn: bool,
    /// `net.ipv4.vs.expire_quiescent_template` (default 0): a persistence template whose
    /// real server has weight 0 is expired when used (`ip_vs_check_template`); kube-proxy
    /// sets 1.
    pub expire_quiescent_template: bool,
    /// `net.ipv4.vs.conn_reuse_mode` (default 1): how a new TCP SYN reusing a connection's
    /// tuple is handled (`is_new_conn_expected` in `ip_vs_in`); kube-proxy sets 0 on kernels
    /// before 5.9 and leaves it alone after (see [`IpvsSysctls::kernel_5_9`]).
    pub conn_reuse_mode: u8,
    /// Whether the kernel has 5.9's `ip_vs_in` (commit d752c3645717, "ipvs: allow connection
    /// reuse for unconfirmed conntrack"): with `conn_reuse_mode=1` a reused tuple is
    /// rescheduled without the one-second delay older kernels had when `conntrack=1`.
    pub kernel_5_9: bool,
}

impl Default for IpvsSysctls {
    fn default() -> Self {
        IpvsSysctls {
            conntrack: false,
            expire_nodest_conn: false,
            expire_quiescent_template: false,
            conn_reuse_mode: 1,
            kernel_5_9: true,
        }
    }
}

/// The sysctls [`Ipvs::set_sysctl`] takes, by their full names.
pub const IPVS_SYSCTLS: [&str; 4] = [
    "net.ipv4.vs.conntrack",
    "net.ipv4.vs.expire_nodest_conn",
    "net.ipv4.vs.expire_quiescent_template",
    "net.ipv4.vs.conn_reuse_mode",
];

/// Why a control operation was refused: the errno the kernel returns, with the text
/// `ipvsadm` prints for it (`ipvs_strerror` in libipvs).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IpvsError {
    /// `EEXIST` from `ip_vs_add_service`.
    #[error("Service already exists")]
    ServiceExists,
    /// `ESRCH` from `ip_vs_edit_service`, `ip_vs_del_service` or a get.
    #[error("No such service")]
    NoSuchService,
    /// `ESRCH` from a destination command: the service is not there.
    #[error("Service not defined")]
    ServiceNotDefined,
    /// `EEXIST` from `ip_vs_add_dest`.
    #[error("Destination already exists")]
    DestExists,
    /// `ENOENT` from `ip_vs_edit_dest` or `ip_vs_del_dest`.
    #[error("No such destination")]
    NoSuchDest,
    /// `ERANGE` from `ip_vs_check_dest`... weight or thresholds out of range.
    #[error("weight or thresholds out of range")]
    OutOfRange,
    /// `EINVAL`: address family mismatch, persistence timeout 0 with the flag, and the like.
    #[error("Invalid operation.  Possibly wrong module version, address not unicast, ...")]
    Invalid,
}

/// The IPVS state of one network namespace (`struct netns_ipvs`): services, their real
/// servers, the connection table, the protocol timeouts and the sysctls.
///
/// Sans-IO like the conntrack table: time is passed in (`now`), the caller runs
/// [`Ipvs::handle_timeout`] at [`Ipvs::poll_timeout`].
#[derive(Clone, Debug, Default)]
pub struct Ipvs {
    services: BTreeMap<ServiceKey, VirtualService>,
    /// Counters of real servers by key, alive or deleted while connections still point at
    /// them (the kernel keeps a deleted `ip_vs_dest` in `dest_trash` until its last
    /// reference goes, and `ip_vs_trash_get_dest` revives it with its counters when it is
    /// added again). A live server's [`Destination::counters`] mirror its entry here.
    counters: BTreeMap<DestKey, DestCounters>,
    conns: conn::ConnTable,
    timeouts: IpvsTimeouts,
    sysctls: IpvsSysctls,
}

fn family_matches(a: IpAddr, b: IpAddr) -> bool {
    a.is_ipv4() == b.is_ipv4()
}

impl Ipvs {
    /// An empty table with the kernel's default timeouts and sysctls; `seed` and `label`
    /// (the namespace's name) fix the connection hash's random value (`ip_vs_conn_rnd`),
    /// which orders `ipvsadm -Lnc`.
    pub fn new(seed: u64, label: &str) -> Ipvs {
        Ipvs {
            conns: conn::ConnTable::new(seed, label),
            ..Ipvs::default()
        }
    }

    /// After a reboot: no services, no connections, default timeouts; the sysctls stay (the
    /// machine's configuration sets them again) and the hash draws a new random value.
    pub fn reboot(&mut self, seed: u64, label: &str) {
        let sysctls = self.sysctls;
        *self = Ipvs::new(seed, label);
        self.sysctls = sysctls;
    }

    /// Whether any virtual service exists (the namespace runs the IPVS hooks only then, and
    /// while connections remain).
    pub fn is_active(&self) -> bool {
        !self.services.is_empty() || !self.conns.is_empty()
    }

    /// `IPVS_CMD_NEW_SERVICE` (`ip_vs_add_service`).
    pub fn add_service(&mut self, spec: ServiceSpec) -> Result<(), IpvsError> {
        check_service(&spec)?;
        if self.services.contains_key(&spec.key) {
            return Err(IpvsError::ServiceExists);
        }
        let mut spec = spec;
        spec.flags.0 = (spec.flags.0 & ServiceFlags::USER_MASK) | ServiceFlags::HASHED;
        let sched = SchedState::new(spec.scheduler);
        self.services.insert(
            spec.key,
            VirtualService {
                spec,
                dests: Vec::new(),
                stats: Stats::default(),
                sched,
            },
        );
        Ok(())
    }

    /// `IPVS_CMD_SET_SERVICE` (`ip_vs_edit_service`): a new scheduler starts from its
    /// initial state (`ip_vs_unbind_scheduler` then `ip_vs_bind_scheduler`); the same one
    /// keeps its state.
    pub fn edit_service(&mut self, spec: ServiceSpec) -> Result<(), IpvsError> {
        check_service(&spec)?;
        let svc = self
            .services
            .get_mut(&spec.key)
            .ok_or(IpvsError::NoSuchService)?;
        let mut spec = spec;
        spec.flags.0 = (spec.flags.0 & ServiceFlags::USER_MASK) | ServiceFlags::HASHED;
        if spec.scheduler != svc.spec.scheduler {
            svc.sched = SchedState::new(spec.scheduler);
            svc.sched.rebuild(spec.scheduler, &svc.dests);
        }
        svc.spec = spec;
        Ok(())
    }

    /// `IPVS_CMD_DEL_SERVICE` (`ip_vs_del_service`): its real servers go to the trash;
    /// connections to them stay until they expire.
    pub fn del_service(&mut self, key: ServiceKey) -> Result<(), IpvsError> {
        self.services.remove(&key).ok_or(IpvsError::NoSuchService)?;
        self.expire_nodest_conns();
        Ok(())
    }

    /// `IPVS_CMD_FLUSH` (`ipvsadm -C`, kube-proxy's cleanup): every service deleted.
    pub fn flush(&mut self) {
        self.services.clear();
        self.expire_nodest_conns();
    }

    /// `IPVS_CMD_NEW_DEST` (`ip_vs_add_dest`): added at the tail of the service's list; a
    /// server deleted while connections remained comes back with their counts.
    pub fn add_dest(&mut self, key: ServiceKey, dest: DestSpec) -> Result<(), IpvsError> {
        check_dest(key, &dest)?;
        let svc = self
            .services
            .get_mut(&key)
            .ok_or(IpvsError::ServiceNotDefined)?;
        if svc.dest(dest.addr, dest.port).is_some() {
            return Err(IpvsError::DestExists);
        }
        let dk = DestKey {
            svc: key,
            addr: dest.addr,
            port: dest.port,
        };
        let counters = self.counters.get(&dk).copied().unwrap_or_default();
        svc.dests.insert(
            0,
            Destination {
                spec: dest,
                counters,
                stats: Stats::default(),
                last_weight: dest.weight,
                overloaded: false,
            },
        );
        svc.sched.dest_added(svc.spec.scheduler, &svc.dests);
        Ok(())
    }

    /// `IPVS_CMD_SET_DEST` (`ip_vs_edit_dest`): weight, method and thresholds changed in
    /// place (the scheduler's `upd_dest` runs).
    pub fn edit_dest(&mut self, key: ServiceKey, dest: DestSpec) -> Result<(), IpvsError> {
        check_dest(key, &dest)?;
        let svc = self
            .services
            .get_mut(&key)
            .ok_or(IpvsError::ServiceNotDefined)?;
        let d = svc
            .dests
            .iter_mut()
            .find(|d| d.spec.addr == dest.addr && d.spec.port == dest.port)
            .ok_or(IpvsError::NoSuchDest)?;
        // __ip_vs_update_dest: "keep the last_weight with latest non-0 weight".
        if dest.weight != 0 {
            d.last_weight = dest.weight;
        }
        d.spec = dest;
        svc.sched.rebuild(svc.spec.scheduler, &svc.dests);
        Ok(())
    }

    /// `IPVS_CMD_DEL_DEST` (`ip_vs_del_dest`): the server leaves the list (no longer
    /// `IP_VS_DEST_F_AVAILABLE`); its connections stay, and with `expire_nodest_conn` their
    /// next packet expires them.
    pub fn del_dest(&mut self, key: ServiceKey, addr: IpAddr, port: u16) -> Result<(), IpvsError> {
        let svc = self
            .services
            .get_mut(&key)
            .ok_or(IpvsError::ServiceNotDefined)?;
        let at = svc
            .dests
            .iter()
            .position(|d| d.spec.addr == addr && d.spec.port == port)
            .ok_or(IpvsError::NoSuchDest)?;
        svc.dests.remove(at);
        svc.sched.dest_removed(svc.spec.scheduler, &svc.dests, at);
        self.expire_nodest_conns();
        Ok(())
    }

    /// A virtual service (`IPVS_CMD_GET_SERVICE`).
    pub fn service(&self, key: ServiceKey) -> Option<&VirtualService> {
        self.services.get(&key)
    }

    /// Every virtual service, by key (`IPVS_CMD_GET_SERVICE` with `NLM_F_DUMP`; kube-proxy's
    /// `GetVirtualServers`).
    pub fn services(&self) -> impl Iterator<Item = &VirtualService> {
        self.services.values()
    }

    /// The real servers of a service with their active and inactive connection counts
    /// (`IPVS_CMD_GET_DEST`; kube-proxy's `GetRealServers`, which graceful termination
    /// reads).
    pub fn dests(&self, key: ServiceKey) -> Result<&[Destination], IpvsError> {
        self.services
            .get(&key)
            .map(|s| s.dests.as_slice())
            .ok_or(IpvsError::NoSuchService)
    }

    /// The protocol timeouts (`ipvsadm -L --timeout`).
    pub fn timeouts(&self) -> IpvsTimeouts {
        self.timeouts
    }

    /// `IPVS_CMD_SET_CONFIG` (`ipvsadm --set tcp tcpfin udp`, kube-proxy's
    /// `--ipvs-tcp-timeout`, `--ipvs-tcpfin-timeout`, `--ipvs-udp-timeout`): a 0 leaves that
    /// timeout as it is (`ip_vs_set_timeout`). Existing connections keep the timeout they
    /// have until their next state change.
    pub fn set_timeouts(&mut self, tcp_secs: u32, tcpfin_secs: u32, udp_secs: u32) {
        self.timeouts.set(tcp_secs, tcpfin_secs, udp_secs);
    }

    /// The sysctls.
    pub fn sysctls(&self) -> IpvsSysctls {
        self.sysctls
    }

    /// Sets one of [`IPVS_SYSCTLS`] from its text value (`proc_dointvec`: `conntrack`,
    /// `expire_nodest_conn` and `expire_quiescent_template` are read as booleans, any
    /// integer; `conn_reuse_mode` is a bit mask of which bits 0 and 1 mean something).
    pub fn set_sysctl(&mut self, name: &str, value: &str) -> Result<(), SysctlError> {
        let name = name.trim();
        if !IPVS_SYSCTLS.contains(&name) {
            return Err(SysctlError::UnknownName {
                name: name.to_string(),
                known: IPVS_SYSCTLS.join(", "),
            });
        }
        let v: i64 = value.trim().parse().map_err(|_| SysctlError::NotANumber {
            name: name.to_string(),
            value: value.to_string(),
            expected: "an integer",
        })?;
        let v = i32::try_from(v).map_err(|_| SysctlError::OutOfRange {
            name: name.to_string(),
            value: v.to_string(),
            expected: "an integer from -2147483648 to 2147483647",
        })?;
        match name {
            "net.ipv4.vs.conntrack" => self.sysctls.conntrack = v != 0,
            "net.ipv4.vs.expire_nodest_conn" => self.sysctls.expire_nodest_conn = v != 0,
            "net.ipv4.vs.expire_quiescent_template" => {
                self.sysctls.expire_quiescent_template = v != 0
            }
            _ => {
                self.sysctls.conn_reuse_mode =
                    u8::try_from(v).map_err(|_| SysctlError::OutOfRange {
                        name: name.to_string(),
                        value: v.to_string(),
                        expected: "0, 1, 2 or 3",
                    })?
            }
        }
        Ok(())
    }

    /// Which `ip_vs_in` the namespace runs: 5.9 and later (`true`, the default) or older
    /// (see [`IpvsSysctls::kernel_5_9`]); set from the node's kernel version.
    pub fn set_kernel_5_9(&mut self, on: bool) {
        self.sysctls.kernel_5_9 = on;
    }

    /// The same from a kernel release (`major.minor`): 5.9 and later run 5.9's `ip_vs_in`
    /// and `ip_vs_expire_nodest_conn_flush`.
    pub fn set_kernel_version(&mut self, major: u32, minor: u32) {
        self.set_kernel_5_9((major, minor) >= (5, 9));
    }

    /// The connection table's entries in `/proc/net/ip_vs_conn` order (hash bucket, newest
    /// first within one).
    pub fn conns(&self) -> Vec<&Conn> {
        self.conns.in_proc_order()
    }

    /// The counters of a real server, deleted or not (zero if nothing points at it).
    pub fn dest_counters(&self, key: DestKey) -> DestCounters {
        self.counters.get(&key).copied().unwrap_or_default()
    }
}

fn check_service(spec: &ServiceSpec) -> Result<(), IpvsError> {
    let width = if spec.key.addr.is_ipv4() { 32 } else { 128 };
    if spec.netmask_len > width {
        return Err(IpvsError::Invalid);
    }
    // ip_vs_genl_parse_service / ip_vs_add_service: a persistent service needs a timeout
    // (ipvsadm refuses `-p 0`; netlink passes it and the template would never live).
    if spec.flags.has(ServiceFlags::PERSISTENT) && spec.timeout_secs == 0 {
        return Err(IpvsError::Invalid);
    }
    Ok(())
}

fn check_dest(key: ServiceKey, d: &DestSpec) -> Result<(), IpvsError> {
    // ip_vs_add_dest / ip_vs_edit_dest: `udest->weight < 0` and `l_threshold > u_threshold`
    // are ERANGE.
    if d.weight > i32::MAX as u32 || (d.u_threshold != 0 && d.l_threshold > d.u_threshold) {
        return Err(IpvsError::OutOfRange);
    }
    // A mixed-family real server is only allowed for tunnelling (ip_vs_add_dest's
    // `udest->af != svc->af` check).
    if !family_matches(key.addr, d.addr) && d.fwd != FwdMethod::Tunnel {
        return Err(IpvsError::Invalid);
    }
    Ok(())
}

#[cfg(test)]
mod tests;
