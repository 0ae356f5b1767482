//! [`IpvsOps`] over a namespace's IPVS table (sim-netfilter's [`Ipvs`]): what kube-proxy's
//! `utilipvs` netlink calls do there, and one IPVS-mode sync applied to a node
//! ([`apply_to_node`]): `kube-ipvs0`, its addresses, the virtual and real servers, and at
//! the proxier's first sync the sysctls and timeouts `NewProxier` sets.

use super::graceful::{
    apply_virtual_servers, GracefulTermination, IpvsApplyReport, IpvsOps, RsStats, VsConfig, VsKey,
};
use super::render::{RealServer, KUBE_IPVS0};
use crate::k8s::{IpFamily, Protocol};
use crate::kubeproxy::proxier::IpvsSyncOutput;
use crate::kubeproxy::render::ProxierConfig;
use sim_core::IfName;
use sim_netfilter::ipvs::{self as kipvs, DestSpec, Ipvs, ServiceFlags, ServiceKey, ServiceSpec};
use sim_netfilter::netns::Netns;
use std::net::IpAddr;

/// `kube-ipvs0` as an interface name (nine bytes, within `IFNAMSIZ`).
fn ipvs0() -> IfName {
    IfName::new(KUBE_IPVS0).unwrap_or_else(|_| unreachable!("kube-ipvs0 is a valid name"))
}

/// A namespace's IPVS table as kube-proxy reaches it.
pub struct KernelIpvs<'a>(pub &'a mut Ipvs);

fn key(k: &VsKey) -> ServiceKey {
    ServiceKey {
        protocol: match k.protocol {
            Protocol::TCP => kipvs::Protocol::Tcp,
            Protocol::UDP => kipvs::Protocol::Udp,
            Protocol::SCTP => kipvs::Protocol::Sctp,
        },
        addr: k.address,
        port: k.port,
    }
}

fn spec(c: &VsConfig) -> Option<ServiceSpec> {
    let sched = c.scheduler.parse().ok()?;
    let mut s = ServiceSpec::new(key(&c.key), sched);
    if let Some(t) = c.persistence_timeout_secs {
        s = s.persistent(t);
    }
    if c.source_hash {
        // utilipvs.FlagSourceHash = 0x10 (IP_VS_SVC_F_SCHED2, mh's `mh-port`).
        s.flags.0 |= ServiceFlags::SCHED2;
    }
    Some(s)
}

impl IpvsOps for KernelIpvs<'_> {
    fn virtual_servers(&self) -> Vec<VsConfig> {
        self.0
            .services()
            .map(|v| {
                let protocol = match v.spec.key.protocol {
                    kipvs::Protocol::Tcp => Protocol::TCP,
                    kipvs::Protocol::Udp => Protocol::UDP,
                    kipvs::Protocol::Sctp => Protocol::SCTP,
                };
                let persistent = v.spec.flags.has(ServiceFlags::PERSISTENT);
                VsConfig {
                    key: VsKey {
                        address: v.spec.key.addr,
                        port: v.spec.key.port,
                        protocol,
                    },
                    scheduler: v.spec.scheduler.to_string(),
                    persistence_timeout_secs: persistent.then_some(v.spec.timeout_secs),
                    source_hash: v.spec.flags.has(ServiceFlags::SCHED2),
                }
            })
            .collect()
    }
    fn add_virtual_server(&mut self, vs: &VsConfig) {
        // kube-proxy logs a failed call and goes on; the loader only lets valid
        // schedulers through.
        if let Some(s) = spec(vs) {
            let _ = self.0.add_service(s);
        }
    }
    fn update_virtual_server(&mut self, vs: &VsConfig) {
        if let Some(s) = spec(vs) {
            let _ = self.0.edit_service(s);
        }
    }
    fn delete_virtual_server(&mut self, vs: &VsKey) {
        let _ = self.0.del_service(key(vs));
    }
    fn real_servers(&self, vs: &VsKey) -> Option<Vec<RsStats>> {
        let d = self.0.dests(key(vs)).ok()?;
        Some(
            d.iter()
                .map(|d| RsStats {
                    address: d.spec.addr,
                    port: d.spec.port,
                    weight: d.spec.weight,
                    active_conns: d.counters.activeconns,
                    inactive_conns: d.counters.inactconns,
                })
                .collect(),
        )
    }
    fn set_real_server(&mut self, vs: &VsKey, rs: &RealServer) {
        let k = key(vs);
        let d = DestSpec::masq(rs.address, rs.port, rs.weight);
        let exists = self.0.dests(k).is_ok_and(|l| {
            l.iter()
                .any(|x| x.spec.addr == rs.address && x.spec.port == rs.port)
        });
        let _ = if exists {
            self.0.edit_dest(k, d)
        } else {
            self.0.add_dest(k, d)
        };
    }
    fn delete_real_server(&mut self, vs: &VsKey, address: IpAddr, port: u16) {
        let _ = self.0.del_dest(key(vs), address, port);
    }
}

/// The node's local addresses of a family other than `kube-ipvs0`'s, loopback and IPv6
/// link-local left out (`GetAllLocalAddressesExcept(kube-ipvs0)` with `isValidForSet`):
/// where NodePort virtual servers listen.
pub fn node_addresses(ns: &Netns, family: IpFamily) -> Vec<IpAddr> {
    let ipvs0 = ipvs0();
    let mut v: Vec<IpAddr> = ns
        .routing()
        .interfaces()
        .iter()
        .filter(|i| i.name != ipvs0)
        .flat_map(|i| i.addrs.iter().map(|&(a, _)| a))
        .filter(|a| family.contains(*a) && !a.is_loopback())
        .filter(|a| match a {
            IpAddr::V6(v6) => (v6.segments()[0] & 0xffc0) != 0xfe80,
            IpAddr::V4(_) => true,
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// The sysctls `NewProxier` ensures (`net/ipv4/vs/conntrack`, `expire_nodest_conn`,
/// `expire_quiescent_template` to 1; `conn_reuse_mode` is left as it is on kernels since
/// 5.9, kubernetes #93297, which nfsim's nodes are) and the IPVS timeouts
/// (`ConfigureTimeouts`, when any is set).
pub fn start_proxier(ns: &mut Netns, cfg: &ProxierConfig) -> Result<(), String> {
    for name in [
        "net.ipv4.vs.conntrack",
        "net.ipv4.vs.expire_nodest_conn",
        "net.ipv4.vs.expire_quiescent_template",
    ] {
        ns.set_sysctl(name, "1")
            .map_err(|e| format!("{name}: {e}"))?;
    }
    let s = &cfg.ipvs;
    if s.tcp_timeout_secs > 0 || s.tcp_fin_timeout_secs > 0 || s.udp_timeout_secs > 0 {
        ns.ipvs_mut().set_timeouts(
            s.tcp_timeout_secs,
            s.tcp_fin_timeout_secs,
            s.udp_timeout_secs,
        );
    }
    Ok(())
}

/// The IPVS half of one sync on a node, after the sets and rules are in: `kube-ipvs0`
/// ensured and given the wanted addresses (`EnsureDummyDevice`, `EnsureAddressBind`), the
/// virtual and real servers synced, then addresses no longer wanted unbound.
pub fn apply_to_node(
    ns: &mut Netns,
    out: &IpvsSyncOutput,
    family: IpFamily,
    gt: &mut GracefulTermination,
) -> Result<IpvsApplyReport, String> {
    let dev = ipvs0();
    ns.ensure_dummy_device(dev)
        .map_err(|e| format!("kube-ipvs0: {e}"))?;
    let bound = ns.bound_addresses(dev);
    for a in &out.rendered.bind_addrs {
        if !bound.contains(a) {
            ns.ensure_address_bind(*a, dev)
                .map_err(|e| format!("kube-ipvs0 {a}: {e}"))?;
        }
    }
    let report = apply_virtual_servers(
        &out.rendered.virtual_servers,
        family,
        out.initial_sync,
        gt,
        &mut KernelIpvs(ns.ipvs_mut()),
    );
    for a in bound {
        if family.contains(a) && !out.rendered.bind_addrs.contains(&a) {
            let _ = ns.unbind_address(a, dev);
        }
    }
    Ok(report)
}
