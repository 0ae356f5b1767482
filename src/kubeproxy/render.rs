//! The iptables proxier's output: the `iptables-restore --noflush` payload of a sync and the
//! jump rules it installs with `iptables -I` (proxier.go `syncProxyRules`,
//! `writeServiceToEndpointRules`, `iptablesJumpChains`).
//!
//! The payload is the text kube-proxy writes, byte for byte: its own argument order
//! (`-m comment --comment "…" -m udp -p udp -d 10.96.0.10 --dport 53 -j …`), addresses without
//! `/32`, probabilities with `%0.10f`, the mark as `%#08x` (`0x00004000`). What iptables-save
//! shows after loading it differs (order of options, `/32`, `--set-xmark`); normalising is
//! sim-netfilter's job.
//!
//! Service order: kube-proxy iterates a Go map, so its order is random run to run. nfsim writes
//! service ports sorted by [`ServicePortName`] (namespace, name, port name, protocol), and the
//! stale chains it deletes sorted by name.
//!
//! One proxier renders one family ([`ProxierConfig::family`]): a dual-stack node runs two
//! (`NewDualStackProxier`), the IPv6 one writing `ip6tables-restore` input of the same shape
//! and chain names (`portProtoHash` hashes the port name and protocol only; `KUBE-SEP-`
//! hashes `[ip]:port`). The IPv6 proxier differs in three places only (proxier.go
//! `syncProxyRules`): no `KUBE-FIREWALL` anti-martian rule (localhost NodePorts are
//! IPv4-only: `NewDualStackProxier` passes `localhostNodePorts=false`, and
//! `ContainsIPv4Loopback` is false for an IPv6 `--nodeport-addresses`), the NodePort jump
//! for every local address excludes `::1/128`, and loopback node addresses never get one.

use super::model::{categorize_endpoints, EndpointInfo, ProxyState, ServicePortInfo};
use super::names::*;
use crate::k8s::{Cidr, IpFamily};
use std::collections::{BTreeMap, BTreeSet};
use std::net::IpAddr;

/// More endpoints than this in total and kube-proxy drops the per-endpoint comments
/// (`largeClusterEndpointsThreshold`).
pub const LARGE_CLUSTER_ENDPOINTS_THRESHOLD: usize = 1000;

/// `ct_state_invalid_dropped_pkts`: the nfacct counter on the INVALID drop rule.
pub const NFACCT_CT_STATE_INVALID: &str = "ct_state_invalid_dropped_pkts";
/// `localhost_nps_accepted_pkts`: the nfacct counter on localhost NodePort rules.
pub const NFACCT_LOCALHOST_NODEPORTS: &str = "localhost_nps_accepted_pkts";

/// How kube-proxy tells pod traffic from other traffic (`--detect-local-mode`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalDetector {
    /// No detector: no `! -s` masquerade rule in KUBE-SVC, no pod short-circuit in KUBE-EXT.
    None,
    /// `ClusterCIDR` mode (or `NodeCIDR`, with the node's pod CIDR): pods are `-s <cidr>`
    /// (`NewDetectLocalByCIDR`).
    ClusterCidr(Cidr),
    /// `BridgeInterface` mode: pods are `-i <bridge>` (`NewDetectLocalByBridgeInterface`).
    BridgeInterface(String),
    /// `InterfaceNamePrefix` mode: pods are `-i <prefix>+`
    /// (`NewDetectLocalByInterfaceNamePrefix`).
    InterfaceNamePrefix(String),
}

impl LocalDetector {
    /// kube-proxy's `IfLocal()` and `IfNotLocal()` arguments, if the detector is
    /// implemented (pkg/proxy/util/localdetector.go).
    pub fn args(&self) -> Option<(Vec<String>, Vec<String>)> {
        let (flag, value) = match self {
            LocalDetector::None => return None,
            LocalDetector::ClusterCidr(c) => ("-s", c.to_string()),
            LocalDetector::BridgeInterface(i) => ("-i", i.clone()),
            LocalDetector::InterfaceNamePrefix(p) => ("-i", format!("{p}+")),
        };
        Some((
            vec![flag.to_string(), value.clone()],
            vec!["!".to_string(), flag.to_string(), value],
        ))
    }
}

/// The parts of kube-proxy's configuration that shape the rules.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ProxierConfig {
    /// The IP family this proxier handles (`ipFamily`): IPv4 writes `iptables` / `ip
    /// kube-proxy`, IPv6 `ip6tables` / `ip6 kube-proxy`.
    pub family: IpFamily,
    /// `--hostname-override` / the node name: which endpoints are local.
    pub node_name: String,
    /// The node's address of the family (used by `loadBalancerSourceRanges`: traffic from
    /// the node itself is allowed when a range contains it).
    pub node_ip: IpAddr,
    /// `--detect-local-mode` and its CIDR.
    pub local_detector: LocalDetector,
    /// `--masquerade-all`.
    pub masquerade_all: bool,
    /// `--iptables-masquerade-bit` (14: mark 0x4000).
    pub masquerade_bit: u8,
    /// `--iptables-localhost-nodeports` (default true): NodePorts on 127.0.0.0/8, the
    /// KUBE-FIREWALL anti-martian rule.
    pub localhost_node_ports: bool,
    /// Whether the nfacct counters exist (kube-proxy adds `-m nfacct` matches only then).
    /// Default false: loading such rules needs the counters created first (`nfacct add`).
    pub nfacct: bool,
    /// Whether iptables supports `MASQUERADE --random-fully` (any current iptables: true).
    pub random_fully: bool,
    /// `net.netfilter.nf_conntrack_tcp_be_liberal` is set: no INVALID drop rule.
    pub conntrack_tcp_be_liberal: bool,
    /// `--proxy-mode`: iptables (default) or nftables.
    pub mode: ProxyMode,
    /// The service CIDRs (nftables mode: the `Drop traffic to unallocated ClusterIPs` rule;
    /// none by default).
    pub service_cidrs: Vec<Cidr>,
    /// `--nodeport-addresses` resolved to the node's addresses it selects (`GetNodeIPs`),
    /// or `None` when it matches every address (empty, `0.0.0.0/0`): then one
    /// `-m addrtype --dst-type LOCAL` jump to KUBE-NODEPORTS, else one `-d IP` jump per
    /// address. kube-proxy collects the addresses in a Go map (any order); they are
    /// written here in ascending order.
    pub node_port_addresses: Option<Vec<IpAddr>>,
    /// The node's `topology.kubernetes.io/zone` label, as the node informer gives it to
    /// kube-proxy (none by default).
    pub zone: Option<String>,
    /// How this kube-proxy release uses EndpointSlice hints (the newest by default).
    pub hints_use: super::topology::HintsUse,
    /// IPVS mode's own settings (`--ipvs-scheduler`, …), read in [`ProxyMode::Ipvs`] only.
    pub ipvs: super::ipvs::IpvsSettings,
}

/// `--proxy-mode`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ProxyMode {
    /// `iptables`: `iptables-restore --noflush` payloads.
    #[default]
    Iptables,
    /// `nftables`: `nft -f` transactions on table `ip kube-proxy`.
    Nftables,
    /// `ipvs`: IPVS virtual servers, ipsets and `iptables-restore` payloads
    /// ([`super::ipvs`]).
    Ipvs,
}

impl ProxierConfig {
    /// What this kube-proxy knows of its node's topology.
    pub fn node_topology(&self) -> super::topology::NodeTopology<'_> {
        super::topology::NodeTopology {
            node_name: &self.node_name,
            zone: self.zone.as_deref(),
            hints_use: self.hints_use,
        }
    }
    /// A node's configuration with kube-proxy's defaults, ClusterCIDR detection of `pod_cidr`,
    /// for the family of `node_ip`.
    pub fn new(node_name: &str, node_ip: IpAddr, pod_cidr: Cidr) -> ProxierConfig {
        ProxierConfig {
            family: IpFamily::of(node_ip),
            node_name: node_name.to_string(),
            node_ip,
            local_detector: LocalDetector::ClusterCidr(pod_cidr),
            masquerade_all: false,
            masquerade_bit: 14,
            localhost_node_ports: true,
            nfacct: false,
            random_fully: true,
            conntrack_tcp_be_liberal: false,
            mode: ProxyMode::Iptables,
            service_cidrs: Vec::new(),
            node_port_addresses: None,
            zone: None,
            hints_use: super::topology::HintsUse::default(),
            ipvs: super::ipvs::IpvsSettings::default(),
        }
    }
    /// Whether localhost NodePorts are served: `--iptables-localhost-nodeports` and the IPv4
    /// proxier (`NewDualStackProxier` turns them off for IPv6).
    pub fn serves_localhost_node_ports(&self) -> bool {
        self.localhost_node_ports && self.family == IpFamily::IPv4
    }
    /// The mark as kube-proxy formats it: `fmt.Sprintf("%#08x", 1<<bit)` = `0x00004000`.
    pub fn masquerade_mark(&self) -> String {
        format!("{:#010x}", 1u32 << (self.masquerade_bit.min(31)))
    }
}

/// An iptables table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Table {
    /// `filter`.
    Filter,
    /// `nat`.
    Nat,
}

impl Table {
    /// `filter` / `nat`.
    pub fn name(self) -> &'static str {
        match self {
            Table::Filter => "filter",
            Table::Nat => "nat",
        }
    }
}

/// A jump from a built-in chain into a kube-proxy chain, which kube-proxy installs with
/// `EnsureChain(table, target)` then `EnsureRule(Prepend, table, chain, args…)`: create the
/// target chain if missing, then insert the rule at position 1 unless an identical rule is
/// already in the chain (`iptables -C`). Applied in list order, so of several jumps from one
/// chain the last one listed ends up first.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JumpRule {
    /// The family: the rule goes to `iptables` or `ip6tables`.
    pub family: IpFamily,
    /// The table.
    pub table: Table,
    /// The built-in chain the rule goes into (`INPUT`, `PREROUTING`, …).
    pub chain: &'static str,
    /// The kube-proxy chain it jumps to.
    pub target: &'static str,
    /// The rule's arguments after the chain name, as passed to iptables (unquoted).
    pub args: Vec<String>,
}

impl JumpRule {
    /// The arguments as one line of restore text (comments quoted).
    pub fn rule_text(&self) -> String {
        join_args(&self.args)
    }
    /// The command kube-proxy effectively runs: `iptables -t nat -I PREROUTING -m comment …`
    /// (`ip6tables` for the IPv6 proxier).
    pub fn command(&self) -> String {
        format!(
            "{} -t {} -I {} {}",
            iptables_command(self.family),
            self.table.name(),
            self.chain,
            self.rule_text()
        )
    }
}

/// `iptables` or `ip6tables`: the program of a family.
pub fn iptables_command(family: IpFamily) -> &'static str {
    match family {
        IpFamily::IPv4 => "iptables",
        IpFamily::IPv6 => "ip6tables",
    }
}

/// Joins arguments into one line, quoting those with spaces or quotes as iptables-restore
/// expects.
fn join_args(args: &[String]) -> String {
    args.iter()
        .map(|a| {
            if a.is_empty() || a.contains(|c: char| c.is_whitespace() || c == '"') {
                format!("\"{}\"", a.replace('\\', "\\\\").replace('"', "\\\""))
            } else {
                a.clone()
            }
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The jump rules of the IPv4 proxier's full sync (see [`jump_rules_for`]).
pub fn jump_rules() -> Vec<JumpRule> {
    jump_rules_for(IpFamily::IPv4)
}

/// The jump rules of a full sync, in the order kube-proxy ensures them (`iptablesJumpChains`
/// followed by `iptablesKubeletJumpChains`): the same list for both families.
pub fn jump_rules_for(family: IpFamily) -> Vec<JumpRule> {
    let new = || vec!["-m", "conntrack", "--ctstate", "NEW"];
    let list: Vec<(
        Table,
        &'static str,
        &'static str,
        &'static str,
        Vec<&'static str>,
    )> = vec![
        (
            Table::Filter,
            KUBE_EXTERNAL_SERVICES,
            "INPUT",
            "kubernetes externally-visible service portals",
            new(),
        ),
        (
            Table::Filter,
            KUBE_EXTERNAL_SERVICES,
            "FORWARD",
            "kubernetes externally-visible service portals",
            new(),
        ),
        (
            Table::Filter,
            KUBE_NODEPORTS,
            "INPUT",
            "kubernetes health check service ports",
            vec![],
        ),
        (
            Table::Filter,
            KUBE_SERVICES,
            "FORWARD",
            "kubernetes service portals",
            new(),
        ),
        (
            Table::Filter,
            KUBE_SERVICES,
            "OUTPUT",
            "kubernetes service portals",
            new(),
        ),
        (
            Table::Filter,
            KUBE_FORWARD,
            "FORWARD",
            "kubernetes forwarding rules",
            vec![],
        ),
        (
            Table::Filter,
            KUBE_PROXY_FIREWALL,
            "INPUT",
            "kubernetes load balancer firewall",
            new(),
        ),
        (
            Table::Filter,
            KUBE_PROXY_FIREWALL,
            "OUTPUT",
            "kubernetes load balancer firewall",
            new(),
        ),
        (
            Table::Filter,
            KUBE_PROXY_FIREWALL,
            "FORWARD",
            "kubernetes load balancer firewall",
            new(),
        ),
        (
            Table::Nat,
            KUBE_SERVICES,
            "OUTPUT",
            "kubernetes service portals",
            vec![],
        ),
        (
            Table::Nat,
            KUBE_SERVICES,
            "PREROUTING",
            "kubernetes service portals",
            vec![],
        ),
        (
            Table::Nat,
            KUBE_POSTROUTING,
            "POSTROUTING",
            "kubernetes postrouting rules",
            vec![],
        ),
        (Table::Filter, KUBE_FIREWALL, "INPUT", "", vec![]),
        (Table::Filter, KUBE_FIREWALL, "OUTPUT", "", vec![]),
    ];
    list.into_iter()
        .map(|(table, target, chain, comment, extra)| {
            let mut args: Vec<String> = extra.into_iter().map(String::from).collect();
            if !comment.is_empty() {
                args.extend(["-m", "comment", "--comment", comment].map(String::from));
            }
            args.extend(["-j".to_string(), target.to_string()]);
            JumpRule {
                family,
                table,
                chain,
                target,
                args,
            }
        })
        .collect()
}

/// What a sync writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RenderedSync {
    /// The `iptables-restore --noflush` input: `*filter … COMMIT` then `*nat … COMMIT`.
    pub restore: String,
    /// Every per-service nat chain the current state needs (written or, in a partial sync,
    /// kept as it is).
    pub active_nat_chains: BTreeSet<String>,
    /// Stale chains flushed and deleted (`-X`) by this payload, sorted.
    pub deleted_chains: Vec<String>,
    /// Number of `-A` lines in the filter table.
    pub filter_rules: usize,
    /// Number of `-A` lines in the nat table.
    pub nat_rules: usize,
    /// Whether more than [`LARGE_CLUSTER_ENDPOINTS_THRESHOLD`] endpoints dropped comments.
    pub large_cluster_mode: bool,
}

/// What [`render_sync`] needs besides the configuration and the state.
#[derive(Clone, Debug, Default)]
pub struct SyncScope<'a> {
    /// Full sync: write every service's chains. Otherwise only those of `changed`.
    pub full: bool,
    /// Services (namespace, name) whose Service or endpoints changed since the last sync.
    pub changed: Option<&'a BTreeSet<(String, String)>>,
    /// The nat chains that exist now (kube-proxy reads them with `iptables-save -t nat`);
    /// per-service ones no longer needed are flushed and `-X`'d.
    pub existing_nat_chains: Option<&'a BTreeSet<String>>,
}

struct Lines {
    text: String,
    rules: usize,
    discard: bool,
}

impl Lines {
    fn new(discard: bool) -> Lines {
        Lines {
            text: String::new(),
            rules: 0,
            discard,
        }
    }
    fn chain(&mut self, name: &str) {
        if !self.discard {
            self.text.push_str(&format!(":{name} - [0:0]\n"));
        }
    }
    fn rule(&mut self, words: &[&str]) {
        if self.discard {
            return;
        }
        self.text.push_str(&words.join(" "));
        self.text.push('\n');
        if words.first() == Some(&"-A") {
            self.rules += 1;
        }
    }
}

fn q(s: String) -> String {
    format!("\"{s}\"")
}

/// Renders one sync (`syncProxyRules` from "Reset all buffers" to the restore call).
pub fn render_sync(cfg: &ProxierConfig, state: &ProxyState, scope: &SyncScope<'_>) -> RenderedSync {
    let mark = cfg.masquerade_mark();
    let mut filter_chains = Lines::new(false);
    let mut filter_rules = Lines::new(false);
    let mut nat_chains = Lines::new(false);
    let mut nat_rules = Lines::new(false);

    for c in [
        KUBE_SERVICES,
        KUBE_EXTERNAL_SERVICES,
        KUBE_FORWARD,
        KUBE_NODEPORTS,
        KUBE_PROXY_FIREWALL,
    ] {
        filter_chains.chain(c);
    }
    for c in [
        KUBE_SERVICES,
        KUBE_NODEPORTS,
        KUBE_POSTROUTING,
        KUBE_MARK_MASQ,
    ] {
        nat_chains.chain(c);
    }
    let mark_mask = format!("{mark}/{mark}");
    nat_rules.rule(&[
        "-A",
        KUBE_POSTROUTING,
        "-m",
        "mark",
        "!",
        "--mark",
        &mark_mask,
        "-j",
        "RETURN",
    ]);
    nat_rules.rule(&["-A", KUBE_POSTROUTING, "-j", "MARK", "--xor-mark", &mark]);
    let mut masq = vec![
        "-A",
        KUBE_POSTROUTING,
        "-m",
        "comment",
        "--comment",
        "\"kubernetes service traffic requiring SNAT\"",
        "-j",
        "MASQUERADE",
    ];
    if cfg.random_fully {
        masq.push("--random-fully");
    }
    nat_rules.rule(&masq);
    nat_rules.rule(&["-A", KUBE_MARK_MASQ, "-j", "MARK", "--or-mark", &mark]);

    if cfg.serves_localhost_node_ports() {
        filter_chains.chain(KUBE_FIREWALL);
        filter_rules.rule(&[
            "-A",
            KUBE_FIREWALL,
            "-m",
            "comment",
            "--comment",
            "\"block incoming localnet connections\"",
            "-d",
            "127.0.0.0/8",
            "!",
            "-s",
            "127.0.0.0/8",
            "-m",
            "conntrack",
            "!",
            "--ctstate",
            "RELATED,ESTABLISHED,DNAT",
            "-j",
            "DROP",
        ]);
    }

    let mut active: BTreeSet<String> = BTreeSet::new();
    let total_endpoints: usize = state
        .services
        .keys()
        .map(|k| state.endpoints_of(k).len())
        .sum();
    let large = total_endpoints > LARGE_CLUSTER_ENDPOINTS_THRESHOLD;
    let detector = cfg.local_detector.args();

    for (spn, svc) in &state.services {
        let proto = svc.protocol.lower();
        let name = spn.to_string();
        let port = svc.port.to_string();
        let cip = svc.cluster_ip.to_string();
        let cat = categorize_endpoints(state.endpoints_of(spn), svc, &cfg.node_topology());

        let hash = spn.port_proto_hash();
        let cluster_chain = format!("{SVC_PREFIX}{hash}");
        let uses_cluster_chain = !cat.cluster.is_empty() && svc.uses_cluster_endpoints();
        let local_chain = format!("{SVL_PREFIX}{hash}");
        let uses_local_chain = !cat.local.is_empty() && svc.uses_local_endpoints();

        let mut internal_chain = cluster_chain.clone();
        let mut has_internal = cat.has_any;
        if svc.internal_policy_local {
            internal_chain = local_chain.clone();
            if cat.local.is_empty() {
                has_internal = false;
            }
        }
        let mut external_policy_chain = cluster_chain.clone();
        let mut has_external = cat.has_any;
        if svc.external_policy_local {
            external_policy_chain = local_chain.clone();
            if cat.local.is_empty() {
                has_external = false;
            }
        }
        let ext_chain = format!("{EXT_PREFIX}{hash}");
        let uses_ext_chain = cat.has_any && svc.externally_accessible();
        let fw_chain = format!("{FW_PREFIX}{hash}");
        let uses_fw = cat.has_any
            && !svc.load_balancer_vips.is_empty()
            && !svc.load_balancer_source_ranges.is_empty();
        let lb_chain = if uses_fw { &fw_chain } else { &ext_chain };

        let (mut internal_target, mut internal_comment) = ("", String::new());
        let (mut external_target, mut external_comment) = ("", String::new());
        if !cat.has_any {
            internal_target = "REJECT";
            internal_comment = q(format!("{name} has no endpoints"));
            external_target = "REJECT";
            external_comment = internal_comment.clone();
        } else {
            if !has_internal {
                internal_target = "DROP";
                internal_comment = q(format!("{name} has no local endpoints"));
            }
            if !has_external {
                external_target = "DROP";
                external_comment = q(format!("{name} has no local endpoints"));
            }
        }

        // Capture the cluster IP.
        if has_internal {
            nat_rules.rule(&[
                "-A",
                KUBE_SERVICES,
                "-m",
                "comment",
                "--comment",
                &q(format!("{name} cluster IP")),
                "-m",
                proto,
                "-p",
                proto,
                "-d",
                &cip,
                "--dport",
                &port,
                "-j",
                &internal_chain,
            ]);
        } else {
            filter_rules.rule(&[
                "-A",
                KUBE_SERVICES,
                "-m",
                "comment",
                "--comment",
                &internal_comment,
                "-m",
                proto,
                "-p",
                proto,
                "-d",
                &cip,
                "--dport",
                &port,
                "-j",
                internal_target,
            ]);
        }

        // Capture external IPs.
        for eip in &svc.external_ips {
            let eip = eip.to_string();
            if cat.has_any {
                nat_rules.rule(&[
                    "-A",
                    KUBE_SERVICES,
                    "-m",
                    "comment",
                    "--comment",
                    &q(format!("{name} external IP")),
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "-d",
                    &eip,
                    "--dport",
                    &port,
                    "-j",
                    &ext_chain,
                ]);
            }
            if !has_external {
                filter_rules.rule(&[
                    "-A",
                    KUBE_EXTERNAL_SERVICES,
                    "-m",
                    "comment",
                    "--comment",
                    &external_comment,
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "-d",
                    &eip,
                    "--dport",
                    &port,
                    "-j",
                    external_target,
                ]);
            }
        }

        // Capture load-balancer ingress.
        for lbip in &svc.load_balancer_vips {
            let lbip = lbip.to_string();
            if cat.has_any {
                nat_rules.rule(&[
                    "-A",
                    KUBE_SERVICES,
                    "-m",
                    "comment",
                    "--comment",
                    &q(format!("{name} loadbalancer IP")),
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "-d",
                    &lbip,
                    "--dport",
                    &port,
                    "-j",
                    lb_chain,
                ]);
            }
            if uses_fw {
                filter_rules.rule(&[
                    "-A",
                    KUBE_PROXY_FIREWALL,
                    "-m",
                    "comment",
                    "--comment",
                    &q(format!("{name} traffic not accepted by {fw_chain}")),
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "-d",
                    &lbip,
                    "--dport",
                    &port,
                    "-j",
                    "DROP",
                ]);
            }
        }
        if !has_external {
            for lbip in &svc.load_balancer_vips {
                filter_rules.rule(&[
                    "-A",
                    KUBE_EXTERNAL_SERVICES,
                    "-m",
                    "comment",
                    "--comment",
                    &external_comment,
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "-d",
                    &lbip.to_string(),
                    "--dport",
                    &port,
                    "-j",
                    external_target,
                ]);
            }
        }

        // Capture node ports.
        if let Some(np) = svc.node_port {
            let np = np.to_string();
            if cat.has_any {
                if cfg.serves_localhost_node_ports() && cfg.nfacct {
                    nat_rules.rule(&[
                        "-A",
                        KUBE_NODEPORTS,
                        "-m",
                        "comment",
                        "--comment",
                        &name,
                        "-m",
                        proto,
                        "-p",
                        proto,
                        "-d",
                        "127.0.0.0/8",
                        "--dport",
                        &np,
                        "-m",
                        "nfacct",
                        "--nfacct-name",
                        NFACCT_LOCALHOST_NODEPORTS,
                        "-j",
                        &ext_chain,
                    ]);
                }
                nat_rules.rule(&[
                    "-A",
                    KUBE_NODEPORTS,
                    "-m",
                    "comment",
                    "--comment",
                    &name,
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "--dport",
                    &np,
                    "-j",
                    &ext_chain,
                ]);
            }
            if !has_external {
                filter_rules.rule(&[
                    "-A",
                    KUBE_EXTERNAL_SERVICES,
                    "-m",
                    "comment",
                    "--comment",
                    &external_comment,
                    "-m",
                    "addrtype",
                    "--dst-type",
                    "LOCAL",
                    "-m",
                    proto,
                    "-p",
                    proto,
                    "--dport",
                    &np,
                    "-j",
                    external_target,
                ]);
            }
        }

        // Health-check node port.
        if let Some(hc) = svc.health_check_node_port {
            filter_rules.rule(&[
                "-A",
                KUBE_NODEPORTS,
                "-m",
                "comment",
                "--comment",
                &q(format!("{name} health check node port")),
                "-m",
                "tcp",
                "-p",
                "tcp",
                "--dport",
                &hc.to_string(),
                "-j",
                "ACCEPT",
            ]);
        }

        // A partial sync skips the per-service chains of unchanged services (they stay as
        // they are in the kernel) but still counts them as active.
        // SEP chain names, hashed once per endpoint (cluster and local endpoints are subsets
        // of all_reachable).
        let seps: BTreeMap<String, String> = cat
            .all_reachable
            .iter()
            .map(|e| {
                let s = e.endpoint_string();
                let sep = spn.sep_chain(&s);
                (s, sep)
            })
            .collect();
        let skip = !scope.full && !scope.changed.is_some_and(|c| c.contains(&spn.service()));
        if skip {
            // kube-proxy renders these into a discarded buffer; only the names matter.
            if uses_ext_chain {
                active.insert(ext_chain);
            }
            if uses_fw {
                active.insert(fw_chain);
            }
            if uses_cluster_chain {
                active.insert(cluster_chain);
            }
            if uses_local_chain {
                active.insert(local_chain);
            }
            active.extend(seps.into_values());
            continue;
        }
        let (chains, rules) = (&mut nat_chains, &mut nat_rules);

        // Internal traffic: masquerade off-cluster sources.
        if has_internal {
            let base = [
                "-m",
                "comment",
                "--comment",
                &q(format!("{name} cluster IP")),
                "-m",
                proto,
                "-p",
                proto,
                "-d",
                &cip,
                "--dport",
                &port,
            ];
            if cfg.masquerade_all {
                let mut w = vec!["-A", internal_chain.as_str()];
                w.extend(base);
                w.extend(["-j", KUBE_MARK_MASQ]);
                rules.rule(&w);
            } else if let Some((_, not_local)) = &detector {
                let mut w = vec!["-A", internal_chain.as_str()];
                w.extend(base);
                w.extend(not_local.iter().map(String::as_str));
                w.extend(["-j", KUBE_MARK_MASQ]);
                rules.rule(&w);
            }
        }

        // External traffic.
        if uses_ext_chain {
            chains.chain(&ext_chain);
            active.insert(ext_chain.clone());
            if !svc.external_policy_local {
                rules.rule(&[
                    "-A",
                    &ext_chain,
                    "-m",
                    "comment",
                    "--comment",
                    &q(format!(
                        "masquerade traffic for {name} external destinations"
                    )),
                    "-j",
                    KUBE_MARK_MASQ,
                ]);
            } else {
                if let Some((local, _)) = &detector {
                    let comment = q(format!("pod traffic for {name} external destinations"));
                    let mut w = vec!["-A", &ext_chain, "-m", "comment", "--comment", &comment];
                    w.extend(local.iter().map(String::as_str));
                    w.extend(["-j", &cluster_chain]);
                    rules.rule(&w);
                }
                rules.rule(&[
                    "-A",
                    &ext_chain,
                    "-m",
                    "comment",
                    "--comment",
                    &q(format!(
                        "masquerade LOCAL traffic for {name} external destinations"
                    )),
                    "-m",
                    "addrtype",
                    "--src-type",
                    "LOCAL",
                    "-j",
                    KUBE_MARK_MASQ,
                ]);
                rules.rule(&[
                    "-A",
                    &ext_chain,
                    "-m",
                    "comment",
                    "--comment",
                    &q(format!(
                        "route LOCAL traffic for {name} external destinations"
                    )),
                    "-m",
                    "addrtype",
                    "--src-type",
                    "LOCAL",
                    "-j",
                    &cluster_chain,
                ]);
            }
            if has_external {
                rules.rule(&["-A", &ext_chain, "-j", &external_policy_chain]);
            }
        }

        // Load-balancer firewall.
        if uses_fw {
            chains.chain(&fw_chain);
            active.insert(fw_chain.clone());
            let comment = q(format!("{name} loadbalancer IP"));
            let mut allow_from_node = false;
            for cidr in &svc.load_balancer_source_ranges {
                rules.rule(&[
                    "-A",
                    &fw_chain,
                    "-m",
                    "comment",
                    "--comment",
                    &comment,
                    "-s",
                    &cidr.to_string(),
                    "-j",
                    &ext_chain,
                ]);
                allow_from_node |= cidr.contains(cfg.node_ip);
            }
            if allow_from_node {
                for lbip in &svc.load_balancer_vips {
                    rules.rule(&[
                        "-A",
                        &fw_chain,
                        "-m",
                        "comment",
                        "--comment",
                        &comment,
                        "-s",
                        &lbip.to_string(),
                        "-j",
                        &ext_chain,
                    ]);
                }
            }
            rules.rule(&[
                "-A",
                &fw_chain,
                "-m",
                "comment",
                "--comment",
                &q(format!(
                    "other traffic to {name} will be dropped by KUBE-PROXY-FIREWALL"
                )),
            ]);
        }

        if uses_cluster_chain {
            chains.chain(&cluster_chain);
            active.insert(cluster_chain.clone());
            write_service_to_endpoint_rules(
                rules,
                &name,
                &seps,
                svc,
                &cluster_chain,
                &cat.cluster,
                large,
            );
        }
        if uses_local_chain {
            chains.chain(&local_chain);
            active.insert(local_chain.clone());
            write_service_to_endpoint_rules(
                rules,
                &name,
                &seps,
                svc,
                &local_chain,
                &cat.local,
                large,
            );
        }

        // Per-endpoint chains.
        for ep in &cat.all_reachable {
            let epstr = ep.endpoint_string();
            let sep = seps[&epstr].clone();
            chains.chain(&sep);
            active.insert(sep.clone());
            let mut head = vec!["-A", sep.as_str()];
            if !large {
                head.extend(["-m", "comment", "--comment", name.as_str()]);
            }
            let epip = ep.ip.to_string();
            let mut hairpin = head.clone();
            hairpin.extend(["-s", epip.as_str(), "-j", KUBE_MARK_MASQ]);
            rules.rule(&hairpin);
            let mut dnat = head;
            if svc.sticky_max_age_seconds.is_some() {
                dnat.extend(["-m", "recent", "--name", sep.as_str(), "--set"]);
            }
            dnat.extend([
                "-m",
                proto,
                "-p",
                proto,
                "-j",
                "DNAT",
                "--to-destination",
                epstr.as_str(),
            ]);
            rules.rule(&dnat);
        }
    }

    // Delete per-service chains that are no longer needed.
    let mut deleted = Vec::new();
    if let Some(existing) = scope.existing_nat_chains {
        for chain in existing.difference(&active) {
            if !is_service_chain_name(chain) {
                continue;
            }
            nat_chains.chain(chain);
            nat_rules.rule(&["-X", chain]);
            deleted.push(chain.clone());
        }
    }

    // Finally, the jump to KUBE-NODEPORTS, last in KUBE-SERVICES: for every local address
    // (`nodePortAddresses.MatchAll()`), or one per selected node address.
    const NODEPORTS_COMMENT: &str =
        "\"kubernetes service nodeports; NOTE: this must be the last rule in this chain\"";
    match &cfg.node_port_addresses {
        None => {
            let mut np = vec![
                "-A",
                KUBE_SERVICES,
                "-m",
                "comment",
                "--comment",
                NODEPORTS_COMMENT,
                "-m",
                "addrtype",
                "--dst-type",
                "LOCAL",
            ];
            // Localhost NodePorts never work on IPv6, and on IPv4 only with route_localnet.
            if cfg.family == IpFamily::IPv6 {
                np.extend(["!", "-d", "::1/128"]);
            } else if !cfg.localhost_node_ports {
                np.extend(["!", "-d", "127.0.0.0/8"]);
            }
            np.extend(["-j", KUBE_NODEPORTS]);
            nat_rules.rule(&np);
        }
        Some(ips) => {
            let mut ips = ips.clone();
            ips.sort();
            ips.dedup();
            for ip in ips {
                // Only addresses of the family (`NewNodePortAddresses` filters the CIDRs
                // by family); loopback ones only with localhostNodePorts (IPv4).
                if !cfg.family.contains(ip) {
                    continue;
                }
                if ip.is_loopback() && (ip.is_ipv6() || !cfg.localhost_node_ports) {
                    continue;
                }
                let ip = ip.to_string();
                nat_rules.rule(&[
                    "-A",
                    KUBE_SERVICES,
                    "-m",
                    "comment",
                    "--comment",
                    NODEPORTS_COMMENT,
                    "-d",
                    &ip,
                    "-j",
                    KUBE_NODEPORTS,
                ]);
            }
        }
    }

    if !cfg.conntrack_tcp_be_liberal {
        let mut w = vec![
            "-A",
            KUBE_FORWARD,
            "-m",
            "conntrack",
            "--ctstate",
            "INVALID",
        ];
        if cfg.nfacct {
            w.extend(["-m", "nfacct", "--nfacct-name", NFACCT_CT_STATE_INVALID]);
        }
        w.extend(["-j", "DROP"]);
        filter_rules.rule(&w);
    }
    filter_rules.rule(&[
        "-A",
        KUBE_FORWARD,
        "-m",
        "comment",
        "--comment",
        "\"kubernetes forwarding rules\"",
        "-m",
        "mark",
        "--mark",
        &mark_mask,
        "-j",
        "ACCEPT",
    ]);
    filter_rules.rule(&[
        "-A",
        KUBE_FORWARD,
        "-m",
        "comment",
        "--comment",
        "\"kubernetes forwarding conntrack rule\"",
        "-m",
        "conntrack",
        "--ctstate",
        "RELATED,ESTABLISHED",
        "-j",
        "ACCEPT",
    ]);

    let mut restore = String::new();
    restore.push_str("*filter\n");
    restore.push_str(&filter_chains.text);
    restore.push_str(&filter_rules.text);
    restore.push_str("COMMIT\n*nat\n");
    restore.push_str(&nat_chains.text);
    restore.push_str(&nat_rules.text);
    restore.push_str("COMMIT\n");
    RenderedSync {
        restore,
        active_nat_chains: active,
        deleted_chains: deleted,
        filter_rules: filter_rules.rules,
        nat_rules: nat_rules.rules,
        large_cluster_mode: large,
    }
}

/// `writeServiceToEndpointRules`: affinity checks, then one rule per endpoint with the
/// probability `1/(n-i)` for all but the last.
fn write_service_to_endpoint_rules(
    rules: &mut Lines,
    name: &str,
    seps: &BTreeMap<String, String>,
    svc: &ServicePortInfo,
    chain: &str,
    endpoints: &[EndpointInfo],
    large: bool,
) {
    if let Some(secs) = svc.sticky_max_age_seconds {
        let secs = secs.to_string();
        for ep in endpoints {
            let epstr = ep.endpoint_string();
            let sep = &seps[&epstr];
            let comment = q(format!("{name} -> {epstr}"));
            let mut w = vec!["-A", chain];
            if !large {
                w.extend(["-m", "comment", "--comment", comment.as_str()]);
            }
            w.extend([
                "-m",
                "recent",
                "--name",
                sep.as_str(),
                "--rcheck",
                "--seconds",
                secs.as_str(),
                "--reap",
                "-j",
                sep.as_str(),
            ]);
            rules.rule(&w);
        }
    }
    let n = endpoints.len();
    for (i, ep) in endpoints.iter().enumerate() {
        let epstr = ep.endpoint_string();
        let sep = &seps[&epstr];
        let comment = q(format!("{name} -> {epstr}"));
        let prob = probability(n - i);
        let mut w = vec!["-A", chain];
        if !large {
            w.extend(["-m", "comment", "--comment", comment.as_str()]);
        }
        if i < n - 1 {
            w.extend([
                "-m",
                "statistic",
                "--mode",
                "random",
                "--probability",
                prob.as_str(),
            ]);
        }
        w.extend(["-j", sep.as_str()]);
        rules.rule(&w);
    }
}

/// `computeProbability`: `fmt.Sprintf("%0.10f", 1.0/float64(n))`.
pub fn probability(n: usize) -> String {
    format!("{:.10}", 1.0 / n as f64)
}

#[cfg(test)]
mod tests;
