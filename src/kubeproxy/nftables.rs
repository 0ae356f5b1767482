//! The nftables proxier's output: the `nft -f` transaction of a sync, as kubernetes'
//! `pkg/proxy/nftables/proxier.go` (`syncProxyRules`, `setupNFTables`,
//! `writeServiceToEndpointRules`) writes it through knftables: table `ip kube-proxy`, the
//! `service-ips` / `service-nodeports` verdict maps, `service-*` / `external-*` /
//! `endpoint-*` / `firewall-*` chains, `no-endpoint-*` maps, `cluster-ips`,
//! `mark-for-masquerade`.
//!
//! Full syncs (`setupNFTables`) add and flush the base chains and the fixed chains, flush the
//! maps and write every service; partial syncs write only the chains of services that
//! changed, and bring the map elements up to date element by element (`nftElementStorage`:
//! add what is missing, delete and re-add what changed, delete what is left over). Stale
//! service chains are flushed at once and deleted by a later sync more than a second after
//! (`staleChains`: kernels before 6.2 notice an unreferenced chain late); stale affinity sets
//! are deleted at once.
//!
//! The rules follow upstream at kubernetes/kubernetes 81810de635aa13aa0a32992f6def3aa9d6025ebc
//! (`tests/kubeproxy_nftables_upstream.rs` checks a full sync against that commit's
//! `TestOverallNFTablesRules` and `TestBadIPs`; `docs/kube-proxy-model.md §9`).
//!
//! Differences, each deliberate: services are written sorted by [`ServicePortName`] (kube-proxy
//! iterates a Go map); `nodeport-ips` holds [`ProxierConfig::node_port_addresses`] (`None`:
//! every address, `fib daddr type local`); there is no `Drop traffic to unallocated
//! ClusterIPs` rule unless [`ProxierConfig::service_cidrs`] is set (a scenario always sets
//! its `serviceCIDR`).
//!
//! One proxier renders one family: the IPv6 one writes table `ip6 kube-proxy` with `ip6
//! daddr` / `ip6 saddr` matches, `ipv6_addr` sets and maps, `dnat to [addr]:port`, and
//! `ip6 daddr != ::1` where the IPv4 one excludes 127.0.0.0/8 (`setupNFTables`: `ipX`,
//! `ipvX_addr`, `noLocalhost`); endpoint chain names write the address's colons as dots
//! (`servicePortEndpointChainNameBase`).

use super::model::{categorize_endpoints, EndpointInfo, ProxyState};
use super::names::ServicePortName;
use super::render::{LocalDetector, ProxierConfig};
use crate::k8s::IpFamily;
use sha2::{Digest, Sha256};
use sim_core::{SimDuration, SimTime};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;

/// The table the IPv4 proxier owns.
pub const TABLE: &str = "ip kube-proxy";
/// The table the IPv6 proxier owns.
pub const TABLE6: &str = "ip6 kube-proxy";

/// What differs between the families' transactions (`setupNFTables`, `syncProxyRules`:
/// `ipX`, `ipvX_addr`, `noLocalhost`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NftFamily {
    /// `ip kube-proxy` / `ip6 kube-proxy`.
    pub table: &'static str,
    /// `ip` / `ip6`: the payload expression of addresses.
    pub ip: &'static str,
    /// `ipv4_addr` / `ipv6_addr`: the element type of address sets and maps.
    pub addr_type: &'static str,
    /// `noLocalhost`: the loopback range NodePorts are never served on.
    pub no_localhost: &'static str,
}

impl NftFamily {
    /// The family's names.
    pub fn of(family: IpFamily) -> NftFamily {
        match family {
            IpFamily::IPv4 => NftFamily {
                table: TABLE,
                ip: "ip",
                addr_type: "ipv4_addr",
                no_localhost: "ip daddr != 127.0.0.0/8",
            },
            IpFamily::IPv6 => NftFamily {
                table: TABLE6,
                ip: "ip6",
                addr_type: "ipv6_addr",
                no_localhost: "ip6 daddr != ::1",
            },
        }
    }
}

const FILTER_PREROUTING_PRE_DNAT: &str = "filter-prerouting-pre-dnat";
const FILTER_OUTPUT_PRE_DNAT: &str = "filter-output-pre-dnat";
const FILTER_INPUT: &str = "filter-input";
const FILTER_FORWARD: &str = "filter-forward";
const FILTER_OUTPUT: &str = "filter-output";
const NAT_PREROUTING: &str = "nat-prerouting";
const NAT_OUTPUT: &str = "nat-output";
const NAT_POSTROUTING: &str = "nat-postrouting";
const SERVICES: &str = "services";
const SERVICE_IPS: &str = "service-ips";
const SERVICE_NODEPORTS: &str = "service-nodeports";
const NODEPORT_IPS: &str = "nodeport-ips";
const CLUSTER_IPS: &str = "cluster-ips";
const SERVICE_ENDPOINTS_CHECK: &str = "service-endpoints-check";
const NODEPORT_ENDPOINTS_CHECK: &str = "nodeport-endpoints-check";
const NO_ENDPOINT_SERVICES: &str = "no-endpoint-services";
const NO_ENDPOINT_NODEPORTS: &str = "no-endpoint-nodeports";
const REJECT_CHAIN: &str = "reject-chain";
const CLUSTER_IPS_CHECK: &str = "cluster-ips-check";
const FIREWALL_IPS: &str = "firewall-ips";
const FIREWALL_CHECK: &str = "firewall-check";
const MARK_MASQ: &str = "mark-for-masquerade";
const MASQUERADING: &str = "masquerading";

/// `nftablesBaseChains`: name, type, hook, priority. The two `-pre-dnat` chains run at
/// `dstnat-10`, before DNAT, so that `firewall-check` sees the LoadBalancer IP; the other
/// filter chains at `filter` (0). knftables writes the priorities as numbers (-110, 0), which
/// every nft accepts at every hook.
const BASE_CHAINS: [(&str, &str, &str, i32); 8] = [
    (FILTER_PREROUTING_PRE_DNAT, "filter", "prerouting", -110),
    (FILTER_OUTPUT_PRE_DNAT, "filter", "output", -110),
    (FILTER_INPUT, "filter", "input", 0),
    (FILTER_FORWARD, "filter", "forward", 0),
    (FILTER_OUTPUT, "filter", "output", 0),
    (NAT_PREROUTING, "nat", "prerouting", -100),
    (NAT_OUTPUT, "nat", "output", -100),
    (NAT_POSTROUTING, "nat", "postrouting", 100),
];

/// `nftablesJumpChains`: destination, source, extra match. `cluster-ips-check` hangs off
/// `filter-forward` and `filter-output`, which run after DNAT: a packet that reached it was
/// not DNAT'd, so it is to a port of a ClusterIP no service has, or to an unallocated one.
const JUMP_CHAINS: [(&str, &str, &str); 11] = [
    (NODEPORT_ENDPOINTS_CHECK, FILTER_INPUT, "ct state new"),
    (SERVICE_ENDPOINTS_CHECK, FILTER_INPUT, "ct state new"),
    (SERVICE_ENDPOINTS_CHECK, FILTER_FORWARD, "ct state new"),
    (SERVICE_ENDPOINTS_CHECK, FILTER_OUTPUT, "ct state new"),
    (FIREWALL_CHECK, FILTER_PREROUTING_PRE_DNAT, "ct state new"),
    (FIREWALL_CHECK, FILTER_OUTPUT_PRE_DNAT, "ct state new"),
    (SERVICES, NAT_OUTPUT, ""),
    (SERVICES, NAT_PREROUTING, ""),
    (MASQUERADING, NAT_POSTROUTING, ""),
    (CLUSTER_IPS_CHECK, FILTER_FORWARD, "ct state new"),
    (CLUSTER_IPS_CHECK, FILTER_OUTPUT, "ct state new"),
];

/// `chainNameBaseLengthMax`: knftables' `NameLengthMax` (256, the kernel's
/// `NFT_NAME_MAXLEN`) less `chainNamePrefixLengthMax` (16, the longest prefix with its
/// hyphen).
pub const CHAIN_NAME_BASE_LENGTH_MAX: usize = 256 - 16;

/// `hashAndTruncate`: `base32(sha256(name))[:8] + "-" + name`; longer than
/// [`CHAIN_NAME_BASE_LENGTH_MAX`] (240), its first 237 characters and `...`. The hash is of
/// the whole name, so two names that differ only past the cut stay apart. Names are
/// ASCII (namespace, service and port names are `[a-z0-9-]`), so bytes are characters.
pub fn hash_and_truncate(name: &str) -> String {
    let digest = Sha256::digest(name.as_bytes());
    let enc = base32::encode(base32::Alphabet::Rfc4648 { padding: true }, &digest);
    let mut s = format!("{}-{name}", &enc[..8]);
    if s.len() > CHAIN_NAME_BASE_LENGTH_MAX {
        let mut cut = CHAIN_NAME_BASE_LENGTH_MAX - 3;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push_str("...");
    }
    s
}

/// `servicePortChainNameBase`: `HASH-ns/name/proto/port`.
pub fn service_chain_base(spn: &ServicePortName) -> String {
    hash_and_truncate(&format!(
        "{}/{}/{}/{}",
        spn.namespace,
        spn.name,
        spn.protocol.lower(),
        spn.port
    ))
}

/// `servicePortEndpointChainNameBase`: `HASH-ns/name/proto/port__ip/port`.
pub fn endpoint_chain_base(spn: &ServicePortName, ep: &EndpointInfo) -> String {
    let ip = ep.ip.to_string().replace(':', ".");
    hash_and_truncate(&format!(
        "{}/{}/{}/{}__{ip}/{}",
        spn.namespace,
        spn.name,
        spn.protocol.lower(),
        spn.port,
        ep.port
    ))
}

/// One verdict map or set kube-proxy keeps in step element by element
/// (`nftElementStorage`): key → (value, comment).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct Elements {
    table: &'static str,
    kind: &'static str,
    name: &'static str,
    elements: BTreeMap<String, (String, Option<String>)>,
    leftover: BTreeSet<String>,
}

impl Elements {
    fn new(table: &'static str, kind: &'static str, name: &'static str) -> Elements {
        Elements {
            table,
            kind,
            name,
            ..Default::default()
        }
    }

    fn reset(&mut self, tx: &mut String) {
        self.elements.clear();
        let _ = writeln!(tx, "flush {} {} {}", self.kind, self.table, self.name);
        self.leftover.clear();
    }

    fn element_text(&self, key: &str, value: &str, comment: Option<&str>) -> String {
        let mut s = format!("{{ {key}");
        if let Some(c) = comment {
            let _ = write!(s, " comment \"{c}\"");
        }
        if !value.is_empty() {
            let _ = write!(s, " : {value}");
        }
        s.push_str(" }");
        s
    }

    fn ensure(&mut self, tx: &mut String, key: String, value: String, comment: Option<String>) {
        let add = format!(
            "add element {} {} {}\n",
            self.table,
            self.name,
            self.element_text(&key, &value, comment.as_deref())
        );
        match self.elements.get(&key) {
            Some((v, _)) if *v == value => {}
            Some(_) => {
                let _ = writeln!(
                    tx,
                    "delete element {} {} {{ {key} }}",
                    self.table, self.name
                );
                tx.push_str(&add);
                self.elements.insert(key.clone(), (value, comment));
            }
            None => {
                tx.push_str(&add);
                self.elements.insert(key.clone(), (value, comment));
            }
        }
        self.leftover.remove(&key);
    }

    fn cleanup_leftovers(&mut self, tx: &mut String) {
        for key in std::mem::take(&mut self.leftover) {
            let _ = writeln!(
                tx,
                "delete element {} {} {{ {key} }}",
                self.table, self.name
            );
            self.elements.remove(&key);
        }
        self.leftover = self.elements.keys().cloned().collect();
    }
}

/// What the nftables proxier remembers between syncs: the map elements it wrote, the
/// service chains and affinity sets in the table, stale chains waiting for deletion.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NftProxierState {
    flushed: bool,
    stale_chains: BTreeMap<String, SimTime>,
    chains: BTreeSet<String>,
    affinity_sets: BTreeSet<String>,
    storages: Vec<Elements>,
}

impl Default for NftProxierState {
    fn default() -> Self {
        NftProxierState::new(IpFamily::IPv4)
    }
}

impl NftProxierState {
    /// The state of a fresh proxier of `family`.
    pub fn new(family: IpFamily) -> NftProxierState {
        let t = NftFamily::of(family).table;
        NftProxierState {
            flushed: false,
            stale_chains: BTreeMap::new(),
            chains: BTreeSet::new(),
            affinity_sets: BTreeSet::new(),
            storages: vec![
                Elements::new(t, "set", CLUSTER_IPS),
                Elements::new(t, "map", SERVICE_IPS),
                Elements::new(t, "map", FIREWALL_IPS),
                Elements::new(t, "map", NO_ENDPOINT_SERVICES),
                Elements::new(t, "map", NO_ENDPOINT_NODEPORTS),
                Elements::new(t, "map", SERVICE_NODEPORTS),
            ],
        }
    }
}

const S_CLUSTER_IPS: usize = 0;
const S_SERVICE_IPS: usize = 1;
const S_FIREWALL_IPS: usize = 2;
const S_NO_EP_SERVICES: usize = 3;
const S_NO_EP_NODEPORTS: usize = 4;
const S_SERVICE_NODEPORTS: usize = 5;

/// One sync's transactions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NftSync {
    /// The separate transaction deleting chains stale for more than a second (run first;
    /// its failure does not stop the sync), if any.
    pub cleanup: Option<String>,
    /// The sync's transaction.
    pub tx: String,
    /// The state to keep once the transaction succeeded.
    pub next: NftProxierState,
    /// The state to keep when it failed (the cleanup ran; `staleChains` is forgotten, as
    /// kube-proxy clears it, to be recomputed).
    pub failed: NftProxierState,
}

fn ensure_chain(
    f: &NftFamily,
    tx: &mut String,
    active: &mut BTreeSet<String>,
    chain: &str,
    skip: bool,
) {
    if !active.insert(chain.to_string()) || skip {
        return;
    }
    let t = f.table;
    let _ = writeln!(tx, "add chain {t} {chain}");
    let _ = writeln!(tx, "flush chain {t} {chain}");
}

fn rule(f: &NftFamily, tx: &mut String, chain: &str, text: &str) {
    let _ = writeln!(tx, "add rule {} {chain} {text}", f.table);
}

/// Renders one sync (`full`, or partial for the services in `changed`) at `now` from
/// `prev`, the state the last successful sync left.
pub fn render_nft_sync(
    cfg: &ProxierConfig,
    state: &ProxyState,
    prev: &NftProxierState,
    full: bool,
    changed: &BTreeSet<(String, String)>,
    now: SimTime,
) -> NftSync {
    let f = &NftFamily::of(cfg.family);
    let (t, ipx) = (f.table, f.ip);
    let mut st = prev.clone();
    // Stale chains flushed more than a second ago are deleted in a transaction of their own.
    let mut cleanup = String::new();
    let second_ago = SimTime::ZERO + now.since_start().saturating_sub(SimDuration::from_secs(1));
    let old: Vec<String> = st
        .stale_chains
        .iter()
        .filter(|(_, t)| **t < second_ago)
        .map(|(c, _)| c.clone())
        .collect();
    for c in old {
        let _ = writeln!(cleanup, "delete chain {t} {c}");
        st.stale_chains.remove(&c);
        st.chains.remove(&c);
    }
    let mut failed = st.clone();
    failed.stale_chains.clear();
    let mut tx = String::new();
    if full {
        setup(f, cfg, &mut st, &mut tx);
    }
    let (if_local, if_not_local) = match &cfg.local_detector {
        LocalDetector::ClusterCidr(c) => (
            Some(format!("{ipx} saddr {c}")),
            Some(format!("{ipx} saddr != {c}")),
        ),
        // IfLocalNFT / IfNotLocalNFT (pkg/proxy/util/localdetector.go): `iifname`, the
        // name as a string (a prefix with `*`), in both interface modes.
        LocalDetector::BridgeInterface(i) => (
            Some(format!("iifname {i}")),
            Some(format!("iifname != {i}")),
        ),
        LocalDetector::InterfaceNamePrefix(p) => (
            Some(format!("iifname {p}*")),
            Some(format!("iifname != {p}*")),
        ),
        LocalDetector::None => (None, None),
    };
    let mut active = BTreeSet::new();
    let mut active_sets = BTreeSet::new();
    for (spn, svc) in &state.services {
        if !cfg.family.contains(svc.cluster_ip) {
            continue;
        }
        let proto = spn.protocol.lower();
        let name_string = spn.to_string();
        let cat = categorize_endpoints(state.endpoints_of(spn), svc, &cfg.node_topology());
        let skip = !full && !changed.contains(&spn.service());
        let base = service_chain_base(spn);
        let cluster_chain = format!("service-{base}");
        let local_chain = format!("local-{base}");
        let external_chain = format!("external-{base}");
        let fw_chain = format!("firewall-{base}");
        let ep_chain = |ep: &EndpointInfo| format!("endpoint-{}", endpoint_chain_base(spn, ep));
        let aff_set = |ep: &EndpointInfo| format!("affinity-{}", endpoint_chain_base(spn, ep));
        let affinity = svc.sticky_max_age_seconds;
        for ep in &cat.all_reachable {
            ensure_chain(f, &mut tx, &mut active, &ep_chain(ep), skip);
            if affinity.is_some() {
                active_sets.insert(aff_set(ep));
            }
        }
        let uses_cluster = !cat.cluster.is_empty() && svc.uses_cluster_endpoints();
        if uses_cluster {
            ensure_chain(f, &mut tx, &mut active, &cluster_chain, skip);
        }
        let uses_local = !cat.local.is_empty() && svc.uses_local_endpoints();
        if uses_local {
            ensure_chain(f, &mut tx, &mut active, &local_chain, skip);
        }
        let has_endpoints = cat.has_any;
        let (mut internal_chain, mut has_internal) = (&cluster_chain, has_endpoints);
        if svc.internal_policy_local {
            internal_chain = &local_chain;
            if cat.local.is_empty() {
                has_internal = false;
            }
        }
        let (mut external_policy_chain, mut has_external) = (&cluster_chain, has_endpoints);
        if svc.external_policy_local {
            external_policy_chain = &local_chain;
            if cat.local.is_empty() {
                has_external = false;
            }
        }
        let uses_external = has_endpoints && svc.externally_accessible();
        if uses_external {
            ensure_chain(f, &mut tx, &mut active, &external_chain, skip);
        }
        let reject = format!("goto {REJECT_CHAIN}");
        let (internal_verdict, external_verdict) = if !has_endpoints {
            (reject.clone(), reject)
        } else {
            (
                if has_internal {
                    String::new()
                } else {
                    "drop".into()
                },
                if has_external {
                    String::new()
                } else {
                    "drop".into()
                },
            )
        };
        let key = |ip: std::net::IpAddr, port: u16| format!("{ip} . {proto} . {port}");
        st.storages[S_CLUSTER_IPS].ensure(&mut tx, svc.cluster_ip.to_string(), String::new(), None);
        if has_internal {
            st.storages[S_SERVICE_IPS].ensure(
                &mut tx,
                key(svc.cluster_ip, svc.port),
                format!("goto {internal_chain}"),
                None,
            );
        } else {
            st.storages[S_NO_EP_SERVICES].ensure(
                &mut tx,
                key(svc.cluster_ip, svc.port),
                internal_verdict.clone(),
                Some(name_string.clone()),
            );
        }
        for ip in svc.external_ips.iter().filter(|i| cfg.family.contains(**i)) {
            if has_endpoints {
                st.storages[S_SERVICE_IPS].ensure(
                    &mut tx,
                    key(*ip, svc.port),
                    format!("goto {external_chain}"),
                    None,
                );
            }
            if !has_external {
                st.storages[S_NO_EP_SERVICES].ensure(
                    &mut tx,
                    key(*ip, svc.port),
                    external_verdict.clone(),
                    Some(name_string.clone()),
                );
            }
        }
        let lb_vips: Vec<_> = svc
            .load_balancer_vips
            .iter()
            .filter(|i| cfg.family.contains(**i))
            .collect();
        let uses_fw = !lb_vips.is_empty() && !svc.load_balancer_source_ranges.is_empty();
        if uses_fw {
            ensure_chain(f, &mut tx, &mut active, &fw_chain, skip);
        }
        for ip in &lb_vips {
            if has_endpoints {
                st.storages[S_SERVICE_IPS].ensure(
                    &mut tx,
                    key(**ip, svc.port),
                    format!("goto {external_chain}"),
                    None,
                );
            }
            if uses_fw {
                st.storages[S_FIREWALL_IPS].ensure(
                    &mut tx,
                    key(**ip, svc.port),
                    format!("goto {fw_chain}"),
                    None,
                );
            }
        }
        if !has_external {
            for ip in &lb_vips {
                st.storages[S_NO_EP_SERVICES].ensure(
                    &mut tx,
                    key(**ip, svc.port),
                    external_verdict.clone(),
                    Some(name_string.clone()),
                );
            }
        }
        if let Some(np) = svc.node_port {
            if has_endpoints {
                st.storages[S_SERVICE_NODEPORTS].ensure(
                    &mut tx,
                    format!("{proto} . {np}"),
                    format!("goto {external_chain}"),
                    None,
                );
            }
            if !has_external {
                st.storages[S_NO_EP_NODEPORTS].ensure(
                    &mut tx,
                    format!("{proto} . {np}"),
                    external_verdict.clone(),
                    Some(name_string.clone()),
                );
            }
        }
        if skip {
            continue;
        }
        if has_internal {
            // No `tcp dport`: upstream matches the ClusterIP alone (the chain is only
            // reached through the service-ips element of this port).
            let head = format!("{ipx} daddr {}", svc.cluster_ip);
            if cfg.masquerade_all {
                rule(
                    f,
                    &mut tx,
                    internal_chain,
                    &format!("{head} jump {MARK_MASQ}"),
                );
            } else if let Some(nl) = &if_not_local {
                rule(
                    f,
                    &mut tx,
                    internal_chain,
                    &format!("{head} {nl} jump {MARK_MASQ}"),
                );
            }
        }
        if uses_external {
            if !svc.external_policy_local {
                rule(f, &mut tx, &external_chain, &format!("jump {MARK_MASQ}"));
            } else {
                if let Some(l) = &if_local {
                    rule(
                        f,
                        &mut tx,
                        &external_chain,
                        &format!("{l} goto {cluster_chain} comment \"short-circuit pod traffic\""),
                    );
                }
                rule(f, &mut tx,
                    &external_chain,
                    &format!("fib saddr type local jump {MARK_MASQ} comment \"masquerade local traffic\""),
                );
                rule(f, &mut tx,
                    &external_chain,
                    &format!("fib saddr type local goto {cluster_chain} comment \"short-circuit local traffic\""),
                );
            }
            if has_external {
                rule(
                    f,
                    &mut tx,
                    &external_chain,
                    &format!("goto {external_policy_chain}"),
                );
            }
        }
        if uses_fw {
            let mut sources: Vec<String> = Vec::new();
            let mut allow_from_node = false;
            for c in &svc.load_balancer_source_ranges {
                sources.push(c.to_string());
                if c.contains(cfg.node_ip) {
                    allow_from_node = true;
                }
            }
            if allow_from_node {
                sources.extend(lb_vips.iter().map(|i| i.to_string()));
            }
            rule(
                f,
                &mut tx,
                &fw_chain,
                &format!("{ipx} saddr != {{ {} }} drop", sources.join(" , ")),
            );
        }
        if let Some(secs) = affinity {
            for ep in &cat.all_reachable {
                let _ = writeln!(
                    tx,
                    "add set {t} {} {{ type {} ; flags dynamic,timeout ; timeout {secs}s ; }}",
                    aff_set(ep),
                    f.addr_type
                );
            }
        }
        if uses_cluster {
            endpoint_rules(
                f,
                &mut tx,
                &cluster_chain,
                &cat.cluster,
                affinity.is_some(),
                &ep_chain,
                &aff_set,
            );
        }
        if uses_local {
            endpoint_rules(
                f,
                &mut tx,
                &local_chain,
                &cat.local,
                affinity.is_some(),
                &ep_chain,
                &aff_set,
            );
        }
        for ep in &cat.all_reachable {
            let chain = ep_chain(ep);
            rule(
                f,
                &mut tx,
                &chain,
                &format!("{ipx} saddr {} jump {MARK_MASQ}", ep.ip),
            );
            if affinity.is_some() {
                rule(
                    f,
                    &mut tx,
                    &chain,
                    &format!("update @{} {{ {ipx} saddr }}", aff_set(ep)),
                );
            }
            rule(
                f,
                &mut tx,
                &chain,
                &format!("meta l4proto {proto} dnat to {}", ep.endpoint_string()),
            );
        }
    }
    // Stale service chains: flushed now, deleted by a later sync.
    for c in st.chains.clone() {
        if !c.contains('/') {
            continue;
        }
        if !active.contains(&c) {
            let _ = writeln!(tx, "flush chain {t} {c}");
            st.stale_chains.entry(c).or_insert(now);
        } else {
            st.stale_chains.remove(&c);
        }
    }
    for s in st.affinity_sets.clone() {
        if !active_sets.contains(&s) {
            let _ = writeln!(tx, "delete set {t} {s}");
            st.affinity_sets.remove(&s);
        }
    }
    for s in st.storages.iter_mut() {
        s.cleanup_leftovers(&mut tx);
    }
    st.chains.extend(active);
    st.affinity_sets.extend(active_sets);
    NftSync {
        cleanup: (!cleanup.is_empty()).then_some(cleanup),
        tx,
        next: st,
        failed,
    }
}

fn endpoint_rules(
    f: &NftFamily,
    tx: &mut String,
    chain: &str,
    eps: &[EndpointInfo],
    affinity: bool,
    ep_chain: &dyn Fn(&EndpointInfo) -> String,
    aff_set: &dyn Fn(&EndpointInfo) -> String,
) {
    if affinity {
        for ep in eps {
            rule(
                f,
                tx,
                chain,
                &format!("{} saddr @{} goto {}", f.ip, aff_set(ep), ep_chain(ep)),
            );
        }
    }
    let elems: Vec<String> = eps
        .iter()
        .enumerate()
        .map(|(i, ep)| format!("{i} : goto {}", ep_chain(ep)))
        .collect();
    rule(
        f,
        tx,
        chain,
        &format!(
            "numgen random mod {} vmap {{ {} }}",
            eps.len(),
            elems.join(" , ")
        ),
    );
}

/// `setupNFTables`: the table, base chains, fixed chains and their rules, sets and maps,
/// and the flush of every map kube-proxy fills.
fn setup(f: &NftFamily, cfg: &ProxierConfig, st: &mut NftProxierState, tx: &mut String) {
    let (t, ipx, addr) = (f.table, f.ip, f.addr_type);
    let _ = writeln!(tx, "add table {t} {{ comment \"rules for kube-proxy\" ; }}");
    if !st.flushed {
        for (name, ..) in BASE_CHAINS {
            let _ = writeln!(tx, "add chain {t} {name}");
            let _ = writeln!(tx, "delete chain {t} {name}");
        }
        st.flushed = true;
    }
    for (name, ty, hook, prio) in BASE_CHAINS {
        let _ = writeln!(
            tx,
            "add chain {t} {name} {{ type {ty} hook {hook} priority {prio} ; }}"
        );
        let _ = writeln!(tx, "flush chain {t} {name}");
    }
    let mut created = BTreeSet::new();
    for (dst, src, extra) in JUMP_CHAINS {
        ensure_chain(f, tx, &mut created, dst, false);
        let m = if extra.is_empty() {
            String::new()
        } else {
            format!("{extra} ")
        };
        rule(f, tx, src, &format!("{m}jump {dst}"));
    }
    for c in [SERVICES, CLUSTER_IPS_CHECK, MASQUERADING, MARK_MASQ] {
        ensure_chain(f, tx, &mut created, c, false);
    }
    let mark = cfg.masquerade_mark();
    rule(f, tx, MARK_MASQ, &format!("mark set mark or {mark}"));
    rule(f, tx, MASQUERADING, &format!("mark and {mark} == 0 return"));
    rule(f, tx, MASQUERADING, &format!("mark set mark xor {mark}"));
    rule(f, tx, MASQUERADING, "masquerade fully-random");
    let _ = writeln!(
        tx,
        "add set {t} {CLUSTER_IPS} {{ type {addr} ; comment \"Active ClusterIPs\" ; }}"
    );
    rule(f, tx,
        CLUSTER_IPS_CHECK,
        &format!("{ipx} daddr @{CLUSTER_IPS} reject comment \"Reject traffic to invalid ports of ClusterIPs\""),
    );
    // `OnServiceCIDRsChanged` keeps the CIDRs of the proxier's family.
    let cidrs: Vec<String> = cfg
        .service_cidrs
        .iter()
        .filter(|c| cfg.family.contains(c.addr()))
        .map(|c| c.to_string())
        .collect();
    if !cidrs.is_empty() {
        rule(
            f,
            tx,
            CLUSTER_IPS_CHECK,
            &format!(
                "{ipx} daddr {{ {} }} drop comment \"Drop traffic to unallocated ClusterIPs\"",
                cidrs.join(",")
            ),
        );
    }
    // `nodeport-ips`: with `nodePortAddresses` matching every address (`MatchAll`) the set
    // is added and deleted (so that it does not exist, whether or not it did), and NodePorts
    // are matched by `fib daddr type local`; otherwise it holds the node's addresses inside
    // the CIDRs (`GetNodeIPs`), loopback left out ("localhost NodePorts are not supported").
    let _ = writeln!(
        tx,
        "add set {t} {NODEPORT_IPS} {{ type {addr} ; comment \"IPs that accept NodePort traffic\" ; }}"
    );
    let match_all = cfg.node_port_addresses.is_none();
    match &cfg.node_port_addresses {
        None => {
            let _ = writeln!(tx, "delete set {t} {NODEPORT_IPS}");
        }
        Some(ips) => {
            let _ = writeln!(tx, "flush set {t} {NODEPORT_IPS}");
            let mut ips = ips.clone();
            ips.sort();
            ips.dedup();
            for ip in ips
                .iter()
                .filter(|i| cfg.family.contains(**i) && !i.is_loopback())
            {
                let _ = writeln!(tx, "add element {t} {NODEPORT_IPS} {{ {ip} }}");
            }
        }
    }
    let _ = writeln!(
        tx,
        "add map {t} {NO_ENDPOINT_SERVICES} {{ type {addr} . inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to services with no endpoints\" ; }}"
    );
    let _ = writeln!(
        tx,
        "add map {t} {NO_ENDPOINT_NODEPORTS} {{ type inet_proto . inet_service : verdict ; comment \"vmap to drop or reject packets to service nodeports with no endpoints\" ; }}"
    );
    let _ = writeln!(
        tx,
        "add chain {t} {REJECT_CHAIN} {{ comment \"helper for @no-endpoint-services / @no-endpoint-nodeports\" ; }}"
    );
    let _ = writeln!(tx, "flush chain {t} {REJECT_CHAIN}");
    rule(f, tx, REJECT_CHAIN, "reject");
    rule(
        f,
        tx,
        SERVICE_ENDPOINTS_CHECK,
        &format!("{ipx} daddr . meta l4proto . th dport vmap @{NO_ENDPOINT_SERVICES}"),
    );
    let nodeport_dst = if match_all {
        f.no_localhost.to_string()
    } else {
        format!("{ipx} daddr @{NODEPORT_IPS}")
    };
    rule(
        f,
        tx,
        NODEPORT_ENDPOINTS_CHECK,
        &format!("{nodeport_dst} meta l4proto . th dport vmap @{NO_ENDPOINT_NODEPORTS}"),
    );
    let _ = writeln!(
        tx,
        "add map {t} {FIREWALL_IPS} {{ type {addr} . inet_proto . inet_service : verdict ; comment \"destinations that are subject to LoadBalancerSourceRanges\" ; }}"
    );
    ensure_chain(f, tx, &mut created, FIREWALL_CHECK, false);
    rule(
        f,
        tx,
        FIREWALL_CHECK,
        &format!("{ipx} daddr . meta l4proto . th dport vmap @{FIREWALL_IPS}"),
    );
    let _ = writeln!(
        tx,
        "add map {t} {SERVICE_IPS} {{ type {addr} . inet_proto . inet_service : verdict ; comment \"ClusterIP, ExternalIP and LoadBalancer IP traffic\" ; }}"
    );
    let _ = writeln!(
        tx,
        "add map {t} {SERVICE_NODEPORTS} {{ type inet_proto . inet_service : verdict ; comment \"NodePort traffic\" ; }}"
    );
    rule(
        f,
        tx,
        SERVICES,
        &format!("{ipx} daddr . meta l4proto . th dport vmap @{SERVICE_IPS}"),
    );
    let nodeport_dst = if match_all {
        format!("fib daddr type local {}", f.no_localhost)
    } else {
        format!("{ipx} daddr @{NODEPORT_IPS}")
    };
    rule(
        f,
        tx,
        SERVICES,
        &format!("{nodeport_dst} meta l4proto . th dport vmap @{SERVICE_NODEPORTS}"),
    );
    for s in st.storages.iter_mut() {
        s.reset(tx);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::Protocol;

    #[test]
    fn chain_names_hash_as_upstream() {
        // The names of upstream's proxier_test.go (TestOverallNFTablesRules).
        let spn = ServicePortName::new("ns1", "svc1", "p80", Protocol::TCP);
        assert_eq!(service_chain_base(&spn), "ULMVA6XW-ns1/svc1/tcp/p80");
        let ep = EndpointInfo {
            ip: "10.180.0.1".parse().unwrap(),
            port: 80,
            is_local: false,
            ready: true,
            serving: true,
            terminating: false,
            hints: Default::default(),
        };
        assert_eq!(
            endpoint_chain_base(&spn, &ep),
            "5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"
        );
    }

    /// Upstream's `Test_servicePortEndpointChainNameBase` cases around the 240-character cut
    /// (proxier_test.go at 81810de635aa13aa0a32992f6def3aa9d6025ebc): the hash is of the
    /// whole name, the cut keeps 237 characters and adds `...`.
    #[test]
    fn long_names_are_cut_at_240_as_upstream() {
        let svc = "very-long-namespace-name-abcdefghijklmnopqrstuvwxyz0123456789xx/very-long-service-name-why-would-you-even-do-this-i-mean-really/sctp/port-443-providing-the-hypertext-transmission-protocol-with-tls";
        let kept = hash_and_truncate(&format!("{svc}__1234.5678.9abc.def0..abc.1234/443"));
        assert_eq!(
            kept,
            format!("5YS7AFEA-{svc}__1234.5678.9abc.def0..abc.1234/443")
        );
        assert_eq!(kept.len(), 240);
        let cut1 = hash_and_truncate(&format!("{svc}__1234.5678.9abc.def0..abcd.1234.5678/443"));
        assert_eq!(
            cut1,
            format!("CI6C53Q3-{svc}__1234.5678.9abc.def0..abcd.1234...")
        );
        assert_eq!(cut1.len(), CHAIN_NAME_BASE_LENGTH_MAX);
        let cut2 = hash_and_truncate(&format!("{svc}__1234.5678.9abc.def0..abcd.1234.8765/443"));
        assert_eq!(
            cut2,
            format!("2FLXFK6X-{svc}__1234.5678.9abc.def0..abcd.1234...")
        );
        // The longest service chain base is never cut.
        let spn = ServicePortName::new(
            "very-long-namespace-name-abcdefghijklmnopqrstuvwxyz0123456789xx",
            "very-long-service-name-why-would-you-even-do-this-i-mean-really",
            "port-443-providing-the-hypertext-transmission-protocol-with-tls",
            Protocol::SCTP,
        );
        assert_eq!(service_chain_base(&spn), format!("KR6NACJP-{svc}"));
    }
}
