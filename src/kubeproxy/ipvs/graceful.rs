//! Applying a sync's virtual servers to the kernel's IPVS table, and graceful termination
//! (pkg/proxy/ipvs/proxier.go `syncService`, `syncEndpoint`, `cleanLegacyService`;
//! graceful_termination.go `GracefulTerminationManager`).
//!
//! Sans-IO: the table is reached through [`IpvsOps`]; the manager's one-minute check
//! (`rsCheckDeleteInterval`, `wait.Until(tryDeleteRs, …)`, first run when the proxier
//! starts) is [`GracefulTermination::poll_timeout`] / [`GracefulTermination::on_timeout`].
//!
//! What `syncEndpoint` does with a real server that is no longer wanted
//! (`GracefulDeleteRS`): it tries `deleteRsFunc` first, which deletes it at once when the
//! virtual server is UDP or SCTP (`IsRsGracefulTerminationNeeded` is false for them; the
//! kernel then drops their connections on the next packet, `expire_nodest_conn=1`) or when
//! it has no active and no inactive connections; otherwise it sets its weight to 0 (no new
//! connections are scheduled to it) and puts it on the list, and the check deletes it once
//! `ActiveConn + InactiveConn` is 0. An endpoint that comes back while on the list is
//! deleted and added again with weight 1 (`MoveRSOutofGracefulDeleteList`). A real server
//! whose virtual server is gone leaves the list.

use super::render::{RealServer, VirtualServer};
use crate::k8s::Protocol;
use sim_core::{SimDuration, SimTime};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// `rsCheckDeleteInterval`.
pub const RS_CHECK_DELETE_INTERVAL: SimDuration = SimDuration::from_secs(60);

/// A virtual server's identity: address, port, protocol (`VirtualServer.String()`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VsKey {
    /// The address.
    pub address: IpAddr,
    /// The port.
    pub port: u16,
    /// The protocol.
    pub protocol: Protocol,
}

/// A real server's identity within its virtual server.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RealServerKey {
    /// The virtual server.
    pub vs: VsKey,
    /// The real server's address.
    pub address: IpAddr,
    /// The real server's port.
    pub port: u16,
}

impl RealServerKey {
    /// `GetUniqueRSName`: `10.96.0.10:53/UDP/10.244.1.7:53`.
    pub fn unique_name(&self) -> String {
        format!(
            "{}/{}/{}",
            host_port(self.vs.address, self.vs.port),
            self.vs.protocol,
            host_port(self.address, self.port)
        )
    }
}

fn host_port(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// The settings of a virtual server kube-proxy compares (`VirtualServer.Equal`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VsConfig {
    /// Identity.
    pub key: VsKey,
    /// Scheduler name.
    pub scheduler: String,
    /// `FlagPersistent` and its timeout.
    pub persistence_timeout_secs: Option<u32>,
    /// `FlagSourceHash`.
    pub source_hash: bool,
}

impl VirtualServer {
    /// The virtual server's identity.
    pub fn vs_key(&self) -> VsKey {
        VsKey {
            address: self.address,
            port: self.port,
            protocol: self.protocol,
        }
    }
    /// The settings `syncService` compares and writes.
    pub fn vs_config(&self) -> VsConfig {
        VsConfig {
            key: self.vs_key(),
            scheduler: self.scheduler.clone(),
            persistence_timeout_secs: self.persistence_timeout_secs,
            source_hash: self.source_hash,
        }
    }
}

/// A real server as `GetRealServers` lists it: weight and connection counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RsStats {
    /// Address.
    pub address: IpAddr,
    /// Port.
    pub port: u16,
    /// Weight.
    pub weight: u32,
    /// `ActiveConn`: connections in TCP ESTABLISHED.
    pub active_conns: u32,
    /// `InactiveConn`: the other connections (TCP in other states, UDP).
    pub inactive_conns: u32,
}

/// The kernel's IPVS table as kube-proxy reaches it (`utilipvs.Interface`).
pub trait IpvsOps {
    /// Every virtual server (`GetVirtualServers`).
    fn virtual_servers(&self) -> Vec<VsConfig>;
    /// Adds a virtual server (`AddVirtualServer`).
    fn add_virtual_server(&mut self, vs: &VsConfig);
    /// Changes a virtual server's scheduler or persistence (`UpdateVirtualServer`).
    fn update_virtual_server(&mut self, vs: &VsConfig);
    /// Deletes a virtual server and its real servers (`DeleteVirtualServer`).
    fn delete_virtual_server(&mut self, vs: &VsKey);
    /// The real servers of a virtual server, `None` when it does not exist
    /// (`GetRealServers`).
    fn real_servers(&self, vs: &VsKey) -> Option<Vec<RsStats>>;
    /// Adds a real server, or sets its weight when present (`AddRealServer`;
    /// `UpdateRealServer`).
    fn set_real_server(&mut self, vs: &VsKey, rs: &RealServer);
    /// Deletes a real server (`DeleteRealServer`).
    fn delete_real_server(&mut self, vs: &VsKey, address: IpAddr, port: u16);
}

/// What applying one sync did to the IPVS table.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpvsApplyReport {
    /// Virtual servers added.
    pub added_vs: usize,
    /// Virtual servers deleted (`cleanLegacyService`).
    pub deleted_vs: usize,
    /// Real servers added (or re-added).
    pub added_rs: usize,
    /// Real servers deleted at once.
    pub deleted_rs: Vec<RealServerKey>,
    /// Real servers set to weight 0 and put on the graceful-termination list.
    pub quiesced_rs: Vec<RealServerKey>,
}

/// The `GracefulTerminationManager` of one proxier.
#[derive(Clone, Debug)]
pub struct GracefulTermination {
    /// `rsList`, by unique name (`GetUniqueRSName`).
    list: BTreeMap<String, RealServerKey>,
    next_check: SimTime,
}

impl GracefulTermination {
    /// A manager started at `start` (its first check runs then).
    pub fn new(start: SimTime) -> GracefulTermination {
        GracefulTermination {
            list: BTreeMap::new(),
            next_check: start,
        }
    }

    /// The real servers waiting for their connections to drain.
    pub fn pending(&self) -> impl Iterator<Item = &RealServerKey> {
        self.list.values()
    }

    /// Whether a real server is on the list (`InTerminationList`).
    pub fn in_termination_list(&self, rs: &RealServerKey) -> bool {
        self.list.contains_key(&rs.unique_name())
    }

    /// When the next check is due.
    pub fn poll_timeout(&self) -> SimTime {
        self.next_check
    }

    /// Runs the check due at `now` (`tryDeleteRs`), if due; returns the real servers it
    /// deleted.
    pub fn on_timeout(&mut self, now: SimTime, ops: &mut dyn IpvsOps) -> Vec<RealServerKey> {
        if now < self.next_check {
            return Vec::new();
        }
        self.next_check = now + RS_CHECK_DELETE_INTERVAL;
        let mut deleted = Vec::new();
        let items: Vec<(String, RealServerKey)> =
            self.list.iter().map(|(k, v)| (k.clone(), *v)).collect();
        for (name, rs) in items {
            match delete_rs(&rs, ops) {
                DeleteOutcome::Deleted => {
                    deleted.push(rs);
                    self.list.remove(&name);
                }
                DeleteOutcome::Gone => {
                    self.list.remove(&name);
                }
                DeleteOutcome::Kept => {}
            }
        }
        deleted
    }

    /// `GracefulDeleteRS`: deletes the real server now if it may go, else sets its weight
    /// to 0 and lists it. Returns whether it was deleted now.
    pub fn graceful_delete(&mut self, rs: RealServerKey, ops: &mut dyn IpvsOps) -> bool {
        match delete_rs(&rs, ops) {
            DeleteOutcome::Deleted | DeleteOutcome::Gone => true,
            DeleteOutcome::Kept => {
                ops.set_real_server(
                    &rs.vs,
                    &RealServer {
                        address: rs.address,
                        port: rs.port,
                        weight: 0,
                    },
                );
                self.list.insert(rs.unique_name(), rs);
                false
            }
        }
    }

    /// `MoveRSOutofGracefulDeleteList`: the endpoint is back; the real server is deleted
    /// (to be added again by the caller) and leaves the list.
    pub fn move_out(&mut self, rs: &RealServerKey, ops: &mut dyn IpvsOps) {
        if self.list.remove(&rs.unique_name()).is_some() {
            ops.delete_real_server(&rs.vs, rs.address, rs.port);
        }
    }
}

enum DeleteOutcome {
    Deleted,
    Gone,
    Kept,
}

/// `deleteRsFunc`.
fn delete_rs(rs: &RealServerKey, ops: &mut dyn IpvsOps) -> DeleteOutcome {
    let Some(list) = ops.real_servers(&rs.vs) else {
        return DeleteOutcome::Gone;
    };
    let Some(cur) = list
        .iter()
        .find(|s| s.address == rs.address && s.port == rs.port)
    else {
        return DeleteOutcome::Gone;
    };
    let graceful_needed = !matches!(rs.vs.protocol, Protocol::UDP | Protocol::SCTP);
    if graceful_needed && cur.active_conns + cur.inactive_conns != 0 {
        return DeleteOutcome::Kept;
    }
    ops.delete_real_server(&rs.vs, rs.address, rs.port);
    DeleteOutcome::Deleted
}

/// Applies a sync's virtual servers (`syncService` + `syncEndpoint` for each, then
/// `cleanLegacyService` for those of the family no longer wanted). `initial_sync`: the
/// proxier's first sync, which resets the weight of real servers it keeps to 1.
pub fn apply_virtual_servers(
    wanted: &[VirtualServer],
    family: crate::k8s::IpFamily,
    initial_sync: bool,
    gt: &mut GracefulTermination,
    ops: &mut dyn IpvsOps,
) -> IpvsApplyReport {
    let mut report = IpvsApplyReport::default();
    let current: BTreeMap<VsKey, VsConfig> = ops
        .virtual_servers()
        .into_iter()
        .map(|c| (c.key, c))
        .collect();
    let mut active: BTreeSet<VsKey> = BTreeSet::new();
    for vs in wanted {
        let cfg = vs.vs_config();
        match current.get(&cfg.key) {
            None => {
                ops.add_virtual_server(&cfg);
                report.added_vs += 1;
            }
            Some(c) if *c != cfg => ops.update_virtual_server(&cfg),
            Some(_) => {}
        }
        active.insert(cfg.key);
        let cur = ops.real_servers(&cfg.key).unwrap_or_default();
        let cur_keys: BTreeSet<(IpAddr, u16)> = cur.iter().map(|r| (r.address, r.port)).collect();
        let new_keys: BTreeSet<(IpAddr, u16)> = vs
            .real_servers
            .iter()
            .map(|r| (r.address, r.port))
            .collect();
        for rs in &vs.real_servers {
            let key = RealServerKey {
                vs: cfg.key,
                address: rs.address,
                port: rs.port,
            };
            if cur_keys.contains(&(rs.address, rs.port)) {
                if initial_sync {
                    if let Some(c) = cur
                        .iter()
                        .find(|c| c.address == rs.address && c.port == rs.port)
                    {
                        if c.weight != rs.weight {
                            ops.set_real_server(&cfg.key, rs);
                        }
                    }
                }
                if !gt.in_termination_list(&key) {
                    continue;
                }
                gt.move_out(&key, ops);
            }
            ops.set_real_server(&cfg.key, rs);
            report.added_rs += 1;
        }
        for &(address, port) in cur_keys.difference(&new_keys) {
            let key = RealServerKey {
                vs: cfg.key,
                address,
                port,
            };
            if gt.in_termination_list(&key) {
                continue;
            }
            if gt.graceful_delete(key, ops) {
                report.deleted_rs.push(key);
            } else {
                report.quiesced_rs.push(key);
            }
        }
    }
    for (key, _) in current {
        if family.contains(key.address) && !active.contains(&key) {
            ops.delete_virtual_server(&key);
            report.deleted_vs += 1;
        }
    }
    report
}

/// The real servers of one virtual server in [`MemIpvs`], by address and port.
pub type MemRealServers = BTreeMap<(IpAddr, u16), RsStats>;

/// An IPVS table in memory, for tests and for runs without the kernel model: virtual
/// servers with real servers and connection counters set by hand.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct MemIpvs {
    /// Virtual servers and their real servers.
    pub services: BTreeMap<VsKey, (VsConfig, MemRealServers)>,
}

impl MemIpvs {
    /// The real servers of a virtual server (empty when it does not exist).
    pub fn real_servers_of(&self, vs: &VsKey) -> Vec<RsStats> {
        self.real_servers(vs).unwrap_or_default()
    }

    /// Sets a real server's connection counters (what the kernel counts as connections
    /// come and go).
    pub fn set_conns(
        &mut self,
        vs: &VsKey,
        address: IpAddr,
        port: u16,
        active: u32,
        inactive: u32,
    ) {
        if let Some(rs) = self
            .services
            .get_mut(vs)
            .and_then(|(_, l)| l.get_mut(&(address, port)))
        {
            rs.active_conns = active;
            rs.inactive_conns = inactive;
        }
    }
}

impl IpvsOps for MemIpvs {
    fn virtual_servers(&self) -> Vec<VsConfig> {
        self.services.values().map(|(c, _)| c.clone()).collect()
    }
    fn add_virtual_server(&mut self, vs: &VsConfig) {
        self.services
            .entry(vs.key)
            .or_insert_with(|| (vs.clone(), BTreeMap::new()));
    }
    fn update_virtual_server(&mut self, vs: &VsConfig) {
        if let Some(e) = self.services.get_mut(&vs.key) {
            e.0 = vs.clone();
        }
    }
    fn delete_virtual_server(&mut self, vs: &VsKey) {
        self.services.remove(vs);
    }
    fn real_servers(&self, vs: &VsKey) -> Option<Vec<RsStats>> {
        self.services
            .get(vs)
            .map(|(_, rs)| rs.values().copied().collect())
    }
    fn set_real_server(&mut self, vs: &VsKey, rs: &RealServer) {
        if let Some((_, list)) = self.services.get_mut(vs) {
            let e = list.entry((rs.address, rs.port)).or_insert(RsStats {
                address: rs.address,
                port: rs.port,
                weight: rs.weight,
                active_conns: 0,
                inactive_conns: 0,
            });
            e.weight = rs.weight;
        }
    }
    fn delete_real_server(&mut self, vs: &VsKey, address: IpAddr, port: u16) {
        if let Some((_, list)) = self.services.get_mut(vs) {
            list.remove(&(address, port));
        }
    }
}
