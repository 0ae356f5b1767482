//! What one sync of the IPVS proxier writes (proxier.go `syncProxyRules`,
//! `writeIptablesRules`, `acceptIPVSTraffic`, `createAndLinkKubeChain`, `syncService`,
//! `syncEndpoint`), as data: the ipset entries, the `iptables-restore --noflush` payload,
//! the jump rules, the addresses on `kube-ipvs0`, and the virtual servers with their real
//! servers.
//!
//! Order: kube-proxy visits its service map (a Go map) in a random order; nfsim visits
//! service ports sorted by [`ServicePortName`], and lists a port's virtual servers as
//! kube-proxy creates them (cluster IP, external IPs, load-balancer IPs, then one per node
//! address for a NodePort).

use super::sets::*;
use super::IpvsSettings;
use crate::k8s::{IpFamily, Protocol};
use crate::kubeproxy::model::{categorize_endpoints, EndpointInfo, ProxyState, ServicePortInfo};
use crate::kubeproxy::names::ServicePortName;
use crate::kubeproxy::render::{JumpRule, ProxierConfig, Table};
use std::collections::BTreeSet;
use std::net::IpAddr;

/// `KUBE-SERVICES`.
pub const KUBE_SERVICES: &str = "KUBE-SERVICES";
/// `KUBE-PROXY-FIREWALL`.
pub const KUBE_PROXY_FIREWALL: &str = "KUBE-PROXY-FIREWALL";
/// `KUBE-SOURCE-RANGES-FIREWALL`.
pub const KUBE_SOURCE_RANGES_FIREWALL: &str = "KUBE-SOURCE-RANGES-FIREWALL";
/// `KUBE-POSTROUTING`.
pub const KUBE_POSTROUTING: &str = "KUBE-POSTROUTING";
/// `KUBE-MARK-MASQ`.
pub const KUBE_MARK_MASQ: &str = "KUBE-MARK-MASQ";
/// `KUBE-NODE-PORT` (IPVS mode's name; iptables mode's is `KUBE-NODEPORTS`).
pub const KUBE_NODE_PORT: &str = "KUBE-NODE-PORT";
/// `KUBE-FORWARD`.
pub const KUBE_FORWARD: &str = "KUBE-FORWARD";
/// `KUBE-LOAD-BALANCER`.
pub const KUBE_LOAD_BALANCER_CHAIN: &str = "KUBE-LOAD-BALANCER";
/// `KUBE-IPVS-FILTER` (kubernetes #72236).
pub const KUBE_IPVS_FILTER: &str = "KUBE-IPVS-FILTER";
/// `KUBE-IPVS-OUT-FILTER` (kubernetes #119656).
pub const KUBE_IPVS_OUT_FILTER: &str = "KUBE-IPVS-OUT-FILTER";
/// `defaultDummyDevice`: the interface holding every Service address.
pub const KUBE_IPVS0: &str = "kube-ipvs0";

/// `iptablesChains`: the chains every sync declares, nat then filter.
pub const IPTABLES_CHAINS: [(Table, &str); 11] = [
    (Table::Nat, KUBE_SERVICES),
    (Table::Nat, KUBE_POSTROUTING),
    (Table::Nat, KUBE_NODE_PORT),
    (Table::Nat, KUBE_LOAD_BALANCER_CHAIN),
    (Table::Nat, KUBE_MARK_MASQ),
    (Table::Filter, KUBE_FORWARD),
    (Table::Filter, KUBE_NODE_PORT),
    (Table::Filter, KUBE_PROXY_FIREWALL),
    (Table::Filter, KUBE_SOURCE_RANGES_FIREWALL),
    (Table::Filter, KUBE_IPVS_FILTER),
    (Table::Filter, KUBE_IPVS_OUT_FILTER),
];

/// `iptablesJumpChain`: (table, built-in chain, kube chain, comment), ensured in this order
/// with `EnsureRule(Prepend, …)` on every sync.
pub const IPTABLES_JUMP_CHAIN: [(Table, &str, &str, &str); 9] = [
    (
        Table::Nat,
        "OUTPUT",
        KUBE_SERVICES,
        "kubernetes service portals",
    ),
    (
        Table::Nat,
        "PREROUTING",
        KUBE_SERVICES,
        "kubernetes service portals",
    ),
    (
        Table::Nat,
        "POSTROUTING",
        KUBE_POSTROUTING,
        "kubernetes postrouting rules",
    ),
    (
        Table::Filter,
        "FORWARD",
        KUBE_FORWARD,
        "kubernetes forwarding rules",
    ),
    (
        Table::Filter,
        "INPUT",
        KUBE_NODE_PORT,
        "kubernetes health check rules",
    ),
    (
        Table::Filter,
        "INPUT",
        KUBE_PROXY_FIREWALL,
        "kube-proxy firewall rules",
    ),
    (
        Table::Filter,
        "FORWARD",
        KUBE_PROXY_FIREWALL,
        "kube-proxy firewall rules",
    ),
    (
        Table::Filter,
        "INPUT",
        KUBE_IPVS_FILTER,
        "kubernetes ipvs access filter",
    ),
    (
        Table::Filter,
        "OUTPUT",
        KUBE_IPVS_OUT_FILTER,
        "kubernetes ipvs access filter",
    ),
];

/// One `ipsetWithIptablesChain` row: the set, table, chain, target, match flags and the
/// `-p` protocol, written when the set is not empty.
struct SetRule {
    set: IpvsSetInfo,
    table: Table,
    from: &'static str,
    to: &'static str,
    flags: &'static str,
    proto: Option<&'static str>,
}

const fn sr(
    set: IpvsSetInfo,
    table: Table,
    from: &'static str,
    to: &'static str,
    flags: &'static str,
    proto: Option<&'static str>,
) -> SetRule {
    SetRule {
        set,
        table,
        from,
        to,
        flags,
        proto,
    }
}

/// `ipsetWithIptablesChain`, in its order (the local NodePort sets before the others).
const IPSET_WITH_IPTABLES_CHAIN: [SetRule; 12] = [
    sr(
        KUBE_LOOP_BACK,
        Table::Nat,
        KUBE_POSTROUTING,
        "MASQUERADE",
        "dst,dst,src",
        None,
    ),
    sr(
        KUBE_LOAD_BALANCER,
        Table::Nat,
        KUBE_SERVICES,
        KUBE_LOAD_BALANCER_CHAIN,
        "dst,dst",
        None,
    ),
    sr(
        KUBE_LOAD_BALANCER_LOCAL,
        Table::Nat,
        KUBE_LOAD_BALANCER_CHAIN,
        "RETURN",
        "dst,dst",
        None,
    ),
    sr(
        KUBE_NODE_PORT_LOCAL_TCP,
        Table::Nat,
        KUBE_NODE_PORT,
        "RETURN",
        "dst",
        Some("tcp"),
    ),
    sr(
        KUBE_NODE_PORT_TCP,
        Table::Nat,
        KUBE_NODE_PORT,
        KUBE_MARK_MASQ,
        "dst",
        Some("tcp"),
    ),
    sr(
        KUBE_NODE_PORT_LOCAL_UDP,
        Table::Nat,
        KUBE_NODE_PORT,
        "RETURN",
        "dst",
        Some("udp"),
    ),
    sr(
        KUBE_NODE_PORT_UDP,
        Table::Nat,
        KUBE_NODE_PORT,
        KUBE_MARK_MASQ,
        "dst",
        Some("udp"),
    ),
    sr(
        KUBE_NODE_PORT_LOCAL_SCTP,
        Table::Nat,
        KUBE_NODE_PORT,
        "RETURN",
        "dst,dst",
        Some("sctp"),
    ),
    sr(
        KUBE_NODE_PORT_SCTP,
        Table::Nat,
        KUBE_NODE_PORT,
        KUBE_MARK_MASQ,
        "dst,dst",
        Some("sctp"),
    ),
    sr(
        KUBE_LOAD_BALANCER_FW,
        Table::Filter,
        KUBE_PROXY_FIREWALL,
        KUBE_SOURCE_RANGES_FIREWALL,
        "dst,dst",
        None,
    ),
    sr(
        KUBE_LOAD_BALANCER_SOURCE_CIDR,
        Table::Filter,
        KUBE_SOURCE_RANGES_FIREWALL,
        "RETURN",
        "dst,dst,src",
        None,
    ),
    sr(
        KUBE_LOAD_BALANCER_SOURCE_IP,
        Table::Filter,
        KUBE_SOURCE_RANGES_FIREWALL,
        "RETURN",
        "dst,dst,src",
        None,
    ),
];

/// A real server (`utilipvs.RealServer`): an endpoint, weight 1 when added.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RealServer {
    /// The endpoint's address.
    pub address: IpAddr,
    /// The endpoint's port.
    pub port: u16,
    /// The weight (`AddRealServer` with `Weight: 1`; graceful termination sets 0).
    pub weight: u32,
}

/// A virtual server (`utilipvs.VirtualServer`) and the real servers `syncEndpoint` wants
/// behind it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VirtualServer {
    /// The service port it serves.
    pub service: ServicePortName,
    /// The address: cluster IP, external IP, load-balancer IP or node address.
    pub address: IpAddr,
    /// The port: service port, or the node port.
    pub port: u16,
    /// The protocol.
    pub protocol: Protocol,
    /// `--ipvs-scheduler`.
    pub scheduler: String,
    /// `FlagPersistent` with `Timeout`: `sessionAffinity: ClientIP`'s timeout in seconds.
    pub persistence_timeout_secs: Option<u32>,
    /// `FlagSourceHash` (0x10, `IP_VS_SVC_F_SCHED2`: mh's `mh-port`), set for the `mh`
    /// scheduler.
    pub source_hash: bool,
    /// Whether the address is bound to `kube-ipvs0` (cluster IPs always; external and
    /// load-balancer IPs unless the node already holds them; node addresses never).
    pub bind: bool,
    /// The real servers, sorted by address and port.
    pub real_servers: Vec<RealServer>,
}

impl VirtualServer {
    /// `VirtualServer.String()`: `10.96.0.10:53/UDP`, the key kube-proxy compares by.
    pub fn key(&self) -> String {
        format!(
            "{}/{}",
            join_host_port(self.address, self.port),
            self.protocol
        )
    }
}

fn join_host_port(ip: IpAddr, port: u16) -> String {
    match ip {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// What one IPVS sync writes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpvsRendered {
    /// The entries each set should hold after the sync.
    pub ipsets: IpsetEntries,
    /// The `iptables-restore --noflush` payload: `*nat … COMMIT` then `*filter … COMMIT`.
    pub restore: String,
    /// The jumps from built-in chains, ensured before the restore.
    pub jump_rules: Vec<JumpRule>,
    /// The addresses `kube-ipvs0` should hold (`activeBindAddrs`), sorted.
    pub bind_addrs: BTreeSet<IpAddr>,
    /// The virtual servers, in the order kube-proxy syncs them.
    pub virtual_servers: Vec<VirtualServer>,
}

fn q(s: &str) -> String {
    format!("\"{s}\"")
}

/// The jump rules of [`IPTABLES_JUMP_CHAIN`] for a family.
pub fn ipvs_jump_rules(family: IpFamily) -> Vec<JumpRule> {
    IPTABLES_JUMP_CHAIN
        .iter()
        .map(|&(table, chain, target, comment)| JumpRule {
            family,
            table,
            chain,
            target,
            args: ["-m", "comment", "--comment", comment, "-j", target]
                .map(String::from)
                .to_vec(),
        })
        .collect()
}

/// Renders one sync of the IPVS proxier for the state `state`.
pub fn render_ipvs_sync(
    cfg: &ProxierConfig,
    ipvs: &IpvsSettings,
    state: &ProxyState,
) -> IpvsRendered {
    let family = cfg.family;
    let mut sets = IpsetEntries::new();
    let mut vss: Vec<VirtualServer> = Vec::new();
    let mut bind: BTreeSet<IpAddr> = BTreeSet::new();
    // lbNoNodeAccessIPPortProtocolEntries: (ingress IP, protocol, port).
    let mut no_node_access: Vec<(IpAddr, &'static str, u16)> = Vec::new();
    let node_addrs: BTreeSet<IpAddr> = ipvs.node_addresses(cfg).into_iter().collect();
    let has_node_port = state.services.values().any(|s| s.node_port.is_some());
    // nodeIPs for NodePort virtual servers: every node address when --nodeport-addresses
    // matches all, else the selected ones that are not loopback.
    let node_ips: Vec<IpAddr> = if !has_node_port {
        Vec::new()
    } else {
        match &cfg.node_port_addresses {
            None => node_addrs.iter().copied().collect(),
            Some(sel) => {
                let mut v: Vec<IpAddr> = sel.iter().copied().filter(|a| !a.is_loopback()).collect();
                v.sort();
                v.dedup();
                v
            }
        }
    };

    for (spn, svc) in &state.services {
        let proto = svc.protocol.lower();
        let endpoints = state.endpoints_of(spn);
        for ep in endpoints.iter().filter(|e| e.is_local) {
            sets.insert(
                &KUBE_LOOP_BACK,
                format!("{},{proto}:{},{}", ep.ip, ep.port, ep.ip),
            );
        }
        let rs_internal = real_servers(cfg, svc, endpoints, svc.internal_policy_local);
        let rs_external = real_servers(cfg, svc, endpoints, svc.external_policy_local);
        let vs = |address: IpAddr, port: u16, bind: bool, rs: &Vec<RealServer>| VirtualServer {
            service: spn.clone(),
            address,
            port,
            protocol: svc.protocol,
            scheduler: ipvs.scheduler.clone(),
            persistence_timeout_secs: svc.sticky_max_age_seconds,
            source_hash: ipvs.scheduler == "mh",
            bind,
            real_servers: rs.clone(),
        };

        // Cluster IP.
        sets.insert(
            &KUBE_CLUSTER_IP,
            format!("{},{proto}:{}", svc.cluster_ip, svc.port),
        );
        vss.push(vs(svc.cluster_ip, svc.port, true, &rs_internal));
        bind.insert(svc.cluster_ip);

        // External IPs.
        for &ip in &svc.external_ips {
            let set = if svc.external_policy_local {
                &KUBE_EXTERNAL_IP_LOCAL
            } else {
                &KUBE_EXTERNAL_IP
            };
            sets.insert(set, format!("{ip},{proto}:{}", svc.port));
            let should_bind = !node_addrs.contains(&ip);
            vss.push(vs(ip, svc.port, should_bind, &rs_external));
            if should_bind {
                bind.insert(ip);
            }
        }

        // Load-balancer ingress IPs.
        for &ip in &svc.load_balancer_vips {
            let entry = format!("{ip},{proto}:{}", svc.port);
            sets.insert(&KUBE_LOAD_BALANCER, entry.clone());
            if svc.external_policy_local {
                sets.insert(&KUBE_LOAD_BALANCER_LOCAL, entry.clone());
            }
            if !svc.load_balancer_source_ranges.is_empty() {
                sets.insert(&KUBE_LOAD_BALANCER_FW, entry.clone());
                let mut allow_from_node = false;
                for cidr in &svc.load_balancer_source_ranges {
                    sets.insert(
                        &KUBE_LOAD_BALANCER_SOURCE_CIDR,
                        format!("{ip},{proto}:{},{cidr}", svc.port),
                    );
                    if cidr.contains(cfg.node_ip) {
                        allow_from_node = true;
                    }
                }
                if allow_from_node {
                    sets.insert(
                        &KUBE_LOAD_BALANCER_SOURCE_IP,
                        format!("{ip},{proto}:{},{ip}", svc.port),
                    );
                } else {
                    no_node_access.push((ip, proto, svc.port));
                }
            }
            let should_bind = !node_addrs.contains(&ip);
            vss.push(vs(ip, svc.port, should_bind, &rs_external));
            if should_bind {
                bind.insert(ip);
            }
        }

        if let Some(np) = svc.node_port {
            if node_ips.is_empty() {
                // kube-proxy `continue`s: no NodePort servers, and no health check entry.
                continue;
            }
            let entries: Vec<String> = match svc.protocol {
                Protocol::SCTP => node_ips
                    .iter()
                    .map(|ip| format!("{ip},sctp:{np}"))
                    .collect(),
                _ => vec![np.to_string()],
            };
            let (all, local) = match svc.protocol {
                Protocol::TCP => (&KUBE_NODE_PORT_TCP, &KUBE_NODE_PORT_LOCAL_TCP),
                Protocol::UDP => (&KUBE_NODE_PORT_UDP, &KUBE_NODE_PORT_LOCAL_UDP),
                Protocol::SCTP => (&KUBE_NODE_PORT_SCTP, &KUBE_NODE_PORT_LOCAL_SCTP),
            };
            for e in &entries {
                sets.insert(all, e.clone());
                if svc.external_policy_local {
                    sets.insert(local, e.clone());
                }
            }
            for &ip in &node_ips {
                vss.push(vs(ip, np, false, &rs_external));
            }
        }
        if let Some(hc) = svc.health_check_node_port {
            sets.insert(&KUBE_HEALTH_CHECK_NODE_PORT, hc.to_string());
        }
    }
    for a in &bind {
        sets.insert(&KUBE_IPVS_IPS, a.to_string());
    }

    let restore = write_iptables_rules(cfg, &sets, &no_node_access);
    IpvsRendered {
        ipsets: sets,
        restore,
        jump_rules: ipvs_jump_rules(family),
        bind_addrs: bind,
        virtual_servers: vss,
    }
}

/// `syncEndpoint`'s choice: with `only_local`, the local endpoints, else (kubernetes #97081)
/// the cluster ones; without, the cluster ones.
fn real_servers(
    cfg: &ProxierConfig,
    svc: &ServicePortInfo,
    endpoints: &[EndpointInfo],
    only_local: bool,
) -> Vec<RealServer> {
    let c = categorize_endpoints(endpoints, svc, &cfg.node_topology());
    let chosen = if only_local && !c.local.is_empty() {
        c.local
    } else {
        c.cluster
    };
    let mut rs: Vec<RealServer> = chosen
        .iter()
        .map(|e| RealServer {
            address: e.ip,
            port: e.port,
            weight: 1,
        })
        .collect();
    rs.sort();
    rs.dedup();
    rs
}

/// `writeIptablesRules`, with the chain lines `createAndLinkKubeChain` writes first. Each
/// rule is kube-proxy's argument list joined by spaces, comments already quoted
/// (`getComment`).
fn write_iptables_rules(
    cfg: &ProxierConfig,
    sets: &IpsetEntries,
    no_node_access: &[(IpAddr, &'static str, u16)],
) -> String {
    let family = cfg.family;
    let mark = cfg.masquerade_mark();
    let name = |s: &IpvsSetInfo| s.name_for(family);
    // `-m comment --comment "…" -m set --match-set NAME`, the head of most rules.
    let commented = |s: &IpvsSetInfo| {
        format!(
            "-m comment --comment {} -m set --match-set {}",
            q(s.comment),
            name(s)
        )
    };
    let mut nat = String::from("*nat\n");
    let mut filter = String::from("*filter\n");
    let mut push = |table: Table, line: String| {
        let t = match table {
            Table::Nat => &mut nat,
            Table::Filter => &mut filter,
        };
        t.push_str(&line);
        t.push('\n');
    };
    for (t, c) in IPTABLES_CHAINS {
        push(t, format!(":{c} - [0:0]"));
    }
    let lo = match family {
        IpFamily::IPv4 => "127.0.0.0/8",
        IpFamily::IPv6 => "::1/128",
    };
    push(Table::Nat, format!("-A {KUBE_SERVICES} -s {lo} -j RETURN"));

    for r in &IPSET_WITH_IPTABLES_CHAIN {
        if sets.is_empty(&r.set) {
            continue;
        }
        let proto = r.proto.map(|p| format!("-p {p} ")).unwrap_or_default();
        push(
            r.table,
            format!(
                "-A {} {proto}{} {} -j {}",
                r.from,
                commented(&r.set),
                r.flags,
                r.to
            ),
        );
    }

    if !sets.is_empty(&KUBE_CLUSTER_IP) {
        let head = format!("-A {KUBE_SERVICES} {}", commented(&KUBE_CLUSTER_IP));
        let flags = if cfg.masquerade_all {
            "dst,dst".to_string()
        } else if let Some((_, not_local)) = cfg.local_detector.args() {
            format!("dst,dst {}", not_local.join(" "))
        } else {
            // No detector: masquerade node-originated traffic whose source is a VIP.
            "src,dst".to_string()
        };
        push(Table::Nat, format!("{head} {flags} -j {KUBE_MARK_MASQ}"));
    }

    for (set, masq) in [(&KUBE_EXTERNAL_IP, true), (&KUBE_EXTERNAL_IP_LOCAL, false)] {
        if sets.is_empty(set) {
            continue;
        }
        let base = format!("-A {KUBE_SERVICES} {} dst,dst", commented(set));
        if masq {
            push(Table::Nat, format!("{base} -j {KUBE_MARK_MASQ}"));
        }
        // externalIPRules: traffic from off the machine, and to a local address.
        push(
            Table::Nat,
            format!("{base} -m physdev ! --physdev-is-in -m addrtype ! --src-type LOCAL -j ACCEPT"),
        );
        push(
            Table::Nat,
            format!("{base} -m addrtype --dst-type LOCAL -j ACCEPT"),
        );
    }

    push(
        Table::Nat,
        format!("-A {KUBE_SERVICES} -m addrtype --dst-type LOCAL -j {KUBE_NODE_PORT}"),
    );
    push(
        Table::Nat,
        format!("-A {KUBE_LOAD_BALANCER_CHAIN} -j {KUBE_MARK_MASQ}"),
    );
    push(
        Table::Filter,
        format!("-A {KUBE_SOURCE_RANGES_FIREWALL} -j DROP"),
    );
    for (ip, proto, port) in no_node_access {
        push(
            Table::Filter,
            format!("-A {KUBE_IPVS_OUT_FILTER} -s {ip} -m ipvs --vaddr {ip} --vproto {proto} --vport {port} -j DROP"),
        );
    }
    // acceptIPVSTraffic: last in KUBE-SERVICES.
    for set in [&KUBE_CLUSTER_IP, &KUBE_LOAD_BALANCER] {
        if !sets.is_empty(set) {
            push(
                Table::Nat,
                format!(
                    "-A {KUBE_SERVICES} -m set --match-set {} dst,dst -j ACCEPT",
                    name(set)
                ),
            );
        }
    }
    push(
        Table::Filter,
        format!("-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding rules\" -m mark --mark {mark}/{mark} -j ACCEPT"),
    );
    push(
        Table::Filter,
        format!("-A {KUBE_FORWARD} -m comment --comment \"kubernetes forwarding conntrack rule\" -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT"),
    );
    push(
        Table::Filter,
        format!(
            "-A {KUBE_NODE_PORT} {} dst -j ACCEPT",
            commented(&KUBE_HEALTH_CHECK_NODE_PORT)
        ),
    );
    for (set, flags) in [
        (&KUBE_LOAD_BALANCER, "dst,dst"),
        (&KUBE_CLUSTER_IP, "dst,dst"),
        (&KUBE_EXTERNAL_IP, "dst,dst"),
        (&KUBE_EXTERNAL_IP_LOCAL, "dst,dst"),
        (&KUBE_HEALTH_CHECK_NODE_PORT, "dst"),
    ] {
        push(
            Table::Filter,
            format!(
                "-A {KUBE_IPVS_FILTER} -m set --match-set {} {flags} -j RETURN",
                name(set)
            ),
        );
    }
    push(
        Table::Filter,
        format!(
            "-A {KUBE_IPVS_FILTER} -m conntrack --ctstate NEW -m set --match-set {} dst -j REJECT",
            name(&KUBE_IPVS_IPS)
        ),
    );

    push(
        Table::Nat,
        format!("-A {KUBE_POSTROUTING} -m mark ! --mark {mark}/{mark} -j RETURN"),
    );
    push(
        Table::Nat,
        format!("-A {KUBE_POSTROUTING} -j MARK --xor-mark {mark}"),
    );
    let fully = if cfg.random_fully {
        " --random-fully"
    } else {
        ""
    };
    push(
        Table::Nat,
        format!("-A {KUBE_POSTROUTING} -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE{fully}"),
    );
    push(
        Table::Nat,
        format!("-A {KUBE_MARK_MASQ} -j MARK --or-mark {mark}"),
    );
    push(Table::Filter, "COMMIT".to_string());
    push(Table::Nat, "COMMIT".to_string());
    nat + &filter
}
