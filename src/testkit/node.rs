//! [`Node`]: one node's netfilter and conntrack, fed packets one at a time.

use super::selection::{selection_of, Selection};
use super::TestkitError;
use crate::cluster::proxy::{release_cleanup, ProxyGroup};
use crate::explain::BranchReport;
use crate::explain::NodeSpec;
use crate::k8s::{parse_objects, Cidr};
use crate::kubeproxy::{
    CleanupReport, KubeProxy, LocalDetector, ProxierConfig, ProxyMode, SyncTiming,
};
use crate::scenario::model::Release;
use sim_conntrack::{CtEntry, CtEvent, Filter};
use sim_core::{Packet, SimTime};
use sim_netfilter::netns::{Egress, Fate, Ingress, Netns};
use sim_netfilter::Table;
use std::net::{IpAddr, SocketAddr};

/// Builds a [`Node`]: its address, pod CIDR, seed, sysctls, and either iptables-save text or
/// Kubernetes objects for kube-proxy to render.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    name: String,
    address: String,
    prefix_len: u8,
    pod_cidr: Option<String>,
    seed: u64,
    sysctls: Vec<(String, String)>,
    rules: Vec<String>,
    objects: Vec<String>,
    masquerade_all: bool,
    release: Release,
    mode: ProxyMode,
}

impl Default for NodeBuilder {
    fn default() -> Self {
        NodeBuilder {
            name: "node".into(),
            address: crate::explain::DEFAULT_NODE_ADDR.to_string(),
            prefix_len: crate::explain::DEFAULT_NODE_PREFIX,
            pod_cidr: Some("10.244.0.0/16".into()),
            seed: 1,
            sysctls: Vec::new(),
            rules: Vec::new(),
            objects: Vec::new(),
            masquerade_all: false,
            release: Release::LATEST,
            mode: ProxyMode::Iptables,
        }
    }
}

impl NodeBuilder {
    /// The node's name (kube-proxy's `nodeName`; endpoints with this `nodeName` are local).
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }
    /// `eth0`'s address (IPv4; default `172.18.0.2`, a kind node's).
    pub fn address(mut self, addr: &str) -> Self {
        self.address = addr.to_string();
        self
    }
    /// `eth0`'s prefix length (8–30, default 24).
    pub fn prefix_len(mut self, len: u8) -> Self {
        self.prefix_len = len;
        self
    }
    /// The pod CIDR behind `cni0` (default `10.244.0.0/16`; also kube-proxy's cluster CIDR
    /// for its masquerade rule). `None`: no pod side, every packet arrives on `eth0`.
    pub fn pod_cidr(mut self, cidr: Option<&str>) -> Self {
        self.pod_cidr = cidr.map(str::to_string);
        self
    }
    /// The seed of the node's random streams (statistic draws, NAT port offsets).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// A sysctl, as `sysctl -w` takes it (`net.netfilter.nf_conntrack_udp_timeout`, `"30"`).
    pub fn sysctl(mut self, name: &str, value: &str) -> Self {
        self.sysctls.push((name.to_string(), value.to_string()));
        self
    }
    /// iptables-save (or iptables-restore) text, loaded with `iptables-restore --noflush`.
    /// May be given several times; each is restored in turn.
    pub fn rules(mut self, text: &str) -> Self {
        self.rules.push(text.to_string());
        self
    }
    /// Service and EndpointSlice YAML (several documents separated by `---`); kube-proxy
    /// renders them at time 0 and writes its rules as it does on a real node.
    pub fn objects(mut self, yaml: &str) -> Self {
        self.objects.push(yaml.to_string());
        self
    }
    /// kube-proxy's `masqueradeAll`.
    pub fn masquerade_all(mut self, on: bool) -> Self {
        self.masquerade_all = on;
        self
    }
    /// Which release's stale-UDP cleanup kube-proxy runs after each sync (default `latest`).
    pub fn release(mut self, release: Release) -> Self {
        self.release = release;
        self
    }

    /// kube-proxy's mode for the objects: `iptables` (the default) or `nftables` (its
    /// `ip kube-proxy` table).
    pub fn mode(mut self, mode: ProxyMode) -> Self {
        self.mode = mode;
        self
    }

    /// Builds the node at time 0. Errors name what was wrong: a rules line with a caret, a
    /// YAML object, an address.
    pub fn build(self) -> Result<Node, TestkitError> {
        let spec = NodeSpec::parse(
            &self.address,
            self.prefix_len,
            self.pod_cidr.as_deref(),
            self.seed,
        )?;
        let spec = NodeSpec {
            name: self.name.clone(),
            ..spec
        };
        let mut ns = spec.build("", "rules")?;
        for (k, v) in &self.sysctls {
            ns.set_sysctl(k, v).map_err(|e| TestkitError::Input {
                what: format!("sysctl {k}={v}"),
                message: e.to_string(),
            })?;
        }
        for (i, text) in self.rules.iter().enumerate() {
            let file = format!("rules #{}", i + 1);
            ns.restore(text, true)
                .map_err(|e| crate::explain::ExplainError::netns(&file, e))?;
        }
        let mut node = Node {
            spec,
            ns,
            now: SimTime::ZERO,
            trace: false,
            events: Vec::new(),
            proxy: None,
            cleanups: Vec::new(),
        };
        if !self.objects.is_empty() {
            let pod_cidr: Cidr = match &self.pod_cidr {
                Some(c) => c.parse().map_err(|e| TestkitError::Input {
                    what: format!("pod CIDR {c:?}"),
                    message: format!("{e}"),
                })?,
                None => {
                    return Err(TestkitError::Input {
                        what: "objects".into(),
                        message: "kube-proxy needs a pod CIDR (NodeBuilder::pod_cidr)".into(),
                    })
                }
            };
            let mut cfg = ProxierConfig::new(&self.name, IpAddr::V4(node.spec.addr), pod_cidr);
            cfg.local_detector = LocalDetector::ClusterCidr(pod_cidr);
            cfg.masquerade_all = self.masquerade_all;
            cfg.mode = self.mode;
            let mut kp = KubeProxy::new(
                cfg,
                SyncTiming::default(),
                release_cleanup(self.release),
                SimTime::ZERO,
            );
            for (i, text) in self.objects.iter().enumerate() {
                let objs = objects(text, &format!("objects #{}", i + 1))?;
                for o in objs {
                    kp.upsert(SimTime::ZERO, o);
                }
            }
            node.proxy = Some(ProxyGroup::new(kp, vec![0], None));
            node.sync_due(SimTime::ZERO)?;
        }
        Ok(node)
    }
}

/// Kubernetes objects from YAML text (`what` names it in errors); an IPv6-only Service is
/// refused (nfsim models kube-proxy's IPv4 proxier: it would get no rules). A dual-stack
/// Service is taken: its IPv4 half gets exactly the rules the IPv4 proxier writes.
fn objects(text: &str, what: &str) -> Result<Vec<crate::k8s::K8sObject>, TestkitError> {
    let objs = parse_objects(text).map_err(|e| TestkitError::Input {
        what: what.to_string(),
        message: e.to_string(),
    })?;
    for o in &objs {
        if let crate::k8s::K8sObject::Service(s) = o {
            if s.ipv6_only() {
                return Err(TestkitError::Input {
                    what: what.to_string(),
                    message: format!(
                        "Service {} is IPv6-only: nfsim models kube-proxy's IPv4 proxier only (IPv6 is not modelled yet), so it would get no rules; expected an IPv4 or dual-stack Service",
                        s.key()
                    ),
                });
            }
        }
    }
    Ok(objs)
}

/// One node: its interfaces and routes (`eth0`, `cni0` for the pod CIDR, a default route),
/// its rules and its conntrack table, on simulated time.
///
/// ```
/// use nfsim::testkit::{Node, SimTime};
///
/// let mut node = Node::builder()
///     .objects(nfsim::testkit::examples::KUBE_DNS_TWO_ENDPOINTS)
///     .build()
///     .unwrap();
/// let f = node.flow(SimTime::ZERO, "udp 10.244.0.9:40000 -> 10.96.0.10:53").unwrap();
/// assert!(f.transmitted());
/// let ep = f.endpoint().unwrap();           // where DNAT sent it
/// assert!(["10.244.1.5:53", "10.244.2.5:53"].contains(&ep.to_string().as_str()));
/// // The reply comes back and is un-DNAT'd to the service address.
/// let back = node.flow(SimTime::from_millis(1), &format!("udp {ep} -> 10.244.0.9:40000")).unwrap();
/// assert_eq!(back.source().unwrap().to_string(), "10.96.0.10:53");
/// assert_eq!(node.conntrack("-p udp").unwrap().len(), 1);
/// ```
pub struct Node {
    spec: NodeSpec,
    ns: Netns,
    now: SimTime,
    trace: bool,
    events: Vec<CtEvent>,
    proxy: Option<ProxyGroup>,
    cleanups: Vec<(SimTime, CleanupReport)>,
}

/// What happened to one packet sent through a [`Node`].
#[derive(Clone, Debug)]
pub struct Flow {
    /// When it was sent.
    pub at: SimTime,
    /// The packet as sent.
    pub packet: Packet,
    /// Where it entered: `local` (OUTPUT), or the interface it was received on.
    pub ingress: String,
    /// How its journey ended.
    pub fate: Fate,
    /// What left the node: the packet itself (after NAT) if it survived, then anything the
    /// node generated (a REJECT's answer).
    pub egress: Vec<Egress>,
    /// The conntrack entry it belongs to afterwards, if any.
    pub entry: Option<CtEntry>,
    /// The rule-by-rule trace, when [`Node::set_trace`] is on.
    pub trace: Option<String>,
}

fn egress_packet(e: &Egress) -> &Packet {
    match e {
        Egress::Transmit { packet, .. } | Egress::LocalDeliver { packet } => packet,
    }
}

fn sock(ip: IpAddr, port: Option<u16>) -> Option<SocketAddr> {
    port.map(|p| SocketAddr::new(ip, p))
}

impl Flow {
    /// The packet itself as it left the node (transmitted or delivered), after NAT.
    pub fn out_packet(&self) -> Option<&Packet> {
        match self.fate {
            Fate::Transmitted | Fate::Delivered => self.egress.first().map(egress_packet),
            _ => None,
        }
    }
    /// Whether it was transmitted on an interface.
    pub fn transmitted(&self) -> bool {
        self.fate == Fate::Transmitted
    }
    /// Whether it reached a socket of the node.
    pub fn delivered(&self) -> bool {
        self.fate == Fate::Delivered
    }
    /// The interface it left by (transmitted only).
    pub fn out_interface(&self) -> Option<String> {
        match self.egress.first() {
            Some(Egress::Transmit { dev, .. }) if self.transmitted() => Some(dev.to_string()),
            _ => None,
        }
    }
    /// Its destination after NAT (address:port), when it left the node.
    pub fn endpoint(&self) -> Option<SocketAddr> {
        self.out_packet().and_then(|p| sock(p.dst, p.dport()))
    }
    /// Its source after NAT (address:port), when it left the node.
    pub fn source(&self) -> Option<SocketAddr> {
        self.out_packet().and_then(|p| sock(p.src, p.sport()))
    }
    /// `(before, after)` destination when the node rewrote it (DNAT, or un-SNAT of a reply).
    pub fn dnat(&self) -> Option<(SocketAddr, SocketAddr)> {
        let out = self.out_packet()?;
        let before = sock(self.packet.dst, self.packet.dport())?;
        let after = sock(out.dst, out.dport())?;
        (before != after).then_some((before, after))
    }
    /// `(before, after)` source when the node rewrote it (SNAT/MASQUERADE, or un-DNAT of a
    /// reply).
    pub fn snat(&self) -> Option<(SocketAddr, SocketAddr)> {
        let out = self.out_packet()?;
        let before = sock(self.packet.src, self.packet.sport())?;
        let after = sock(out.src, out.sport())?;
        (before != after).then_some((before, after))
    }
}

impl Node {
    /// A builder (address `172.18.0.2/24`, pod CIDR `10.244.0.0/16`, seed 1, no rules).
    pub fn builder() -> NodeBuilder {
        NodeBuilder::default()
    }

    /// A node with the defaults of [`Node::builder`] and `iptables_save` loaded.
    pub fn from_rules(iptables_save: &str) -> Result<Node, TestkitError> {
        Node::builder().rules(iptables_save).build()
    }

    /// A node whose kube-proxy rendered `yaml` (Services and EndpointSlices).
    pub fn from_objects(yaml: &str) -> Result<Node, TestkitError> {
        Node::builder().objects(yaml).build()
    }

    /// Records a rule-by-rule trace of every packet from now on ([`Flow::trace`]).
    pub fn set_trace(&mut self, on: bool) {
        self.trace = on;
    }

    /// The node's simulated time: the latest instant a packet was sent or a sync ran.
    pub fn now(&self) -> SimTime {
        self.now
    }

    fn advance(&mut self, at: SimTime) -> Result<(), TestkitError> {
        if at < self.now {
            return Err(TestkitError::Time { at, now: self.now });
        }
        self.now = at;
        if self.ns.poll_timeout().is_some_and(|t| t <= at) {
            self.ns.handle_timeout(at);
        }
        self.events.extend(self.ns.drain_conntrack_events());
        Ok(())
    }

    /// Sends `packet` through the node at `at` (not before [`Node::now`]). It enters as
    /// `nfsim trace` decides: on `cni0` when its source is in the pod CIDR, else on `eth0`.
    pub fn send(&mut self, at: SimTime, packet: Packet) -> Result<Flow, TestkitError> {
        let (ingress, _) = self.spec.ingress_for(&packet, false);
        self.send_via(at, packet, ingress)
    }

    /// Sends `packet` from a process of the node (the OUTPUT path).
    pub fn send_local(&mut self, at: SimTime, packet: Packet) -> Result<Flow, TestkitError> {
        self.send_via(at, packet, Ingress::Local)
    }

    /// [`Node::send`] of a packet written as `nfsim trace --packet` takes it:
    /// `"udp 10.244.0.9:40000 -> 10.96.0.10:53"`, `"tcp A:P -> B:Q SYN,ACK"`.
    pub fn flow(&mut self, at: SimTime, packet: &str) -> Result<Flow, TestkitError> {
        let p: Packet = packet.parse()?;
        self.send(at, p)
    }

    fn send_via(
        &mut self,
        at: SimTime,
        packet: Packet,
        ingress: Ingress,
    ) -> Result<Flow, TestkitError> {
        self.advance(at)?;
        let r = if self.trace {
            self.ns.process_traced(at, packet, ingress)
        } else {
            self.ns.process(at, packet, ingress)
        };
        self.events.extend(self.ns.drain_conntrack_events());
        Ok(Flow {
            at,
            packet,
            ingress: match ingress {
                Ingress::Local => "local".into(),
                Ingress::Interface(d) => d.to_string(),
            },
            fate: r.fate,
            egress: r.out,
            entry: r.entry,
            trace: r.trace.map(|t| t.to_string()),
        })
    }

    /// The live conntrack entries matching `conntrack -L` options (`""` for all,
    /// `"-p udp --orig-dst 10.96.0.10"`), in dump order.
    pub fn conntrack(&self, filter: &str) -> Result<Vec<CtEntry>, TestkitError> {
        let f = Filter::parse(filter).map_err(|e| TestkitError::Input {
            what: format!("conntrack filter {filter:?}"),
            message: e.to_string(),
        })?;
        Ok(self.ns.conntrack().list(self.now, &f))
    }

    /// `conntrack -L` with those options, as the tool prints it (stdout).
    pub fn conntrack_text(&self, filter: &str) -> Result<String, TestkitError> {
        let f = Filter::parse(filter).map_err(|e| TestkitError::Input {
            what: format!("conntrack filter {filter:?}"),
            message: e.to_string(),
        })?;
        Ok(self.ns.conntrack().dump(self.now, &f))
    }

    /// `conntrack -D` with those options at `at`: returns the entries deleted.
    pub fn conntrack_delete(
        &mut self,
        at: SimTime,
        filter: &str,
    ) -> Result<Vec<CtEntry>, TestkitError> {
        let f = Filter::parse(filter).map_err(|e| TestkitError::Input {
            what: format!("conntrack filter {filter:?}"),
            message: e.to_string(),
        })?;
        self.advance(at)?;
        let gone = self.ns.conntrack_mut().delete(at, &f);
        self.events.extend(self.ns.drain_conntrack_events());
        Ok(gone)
    }

    /// The conntrack events (`conntrack -E`) so far, and forgets them.
    pub fn take_events(&mut self) -> Vec<CtEvent> {
        std::mem::take(&mut self.events)
    }

    /// The rules as `iptables-save` prints them (without the dated comment lines).
    pub fn rules(&self) -> String {
        self.ns.save(false)
    }

    /// The exact probabilities with which the rules of nat chain `chain` send a packet to
    /// each target (see [`Selection`]).
    pub fn selection(&self, chain: &str) -> Result<Selection, TestkitError> {
        selection_of(self.ns.ruleset(), Table::Nat, chain)
    }

    /// The same for a chain of another table.
    pub fn selection_in(&self, table: Table, chain: &str) -> Result<Selection, TestkitError> {
        selection_of(self.ns.ruleset(), table, chain)
    }

    /// Every reachable outcome of a new packet on this node, with its exact probability, as
    /// `nfsim trace --all-branches` gives them: each `statistic` rule (iptables) and
    /// `numgen random` (nftables) it meets is followed every way. The node is not changed.
    pub fn branches(&self, packet: &str) -> Result<BranchReport, TestkitError> {
        let pkt: Packet = packet.parse().map_err(|e| TestkitError::Input {
            what: format!("packet {packet:?}"),
            message: format!("{e}"),
        })?;
        let (ingress, reason) = self.spec.ingress_for(&pkt, false);
        let opts = crate::explain::TraceOptions {
            all_branches: true,
            at: self.now,
            ..Default::default()
        };
        let r = crate::explain::trace_in(&self.ns, pkt, ingress, reason, self.spec.seed, &opts)?;
        r.branches.ok_or_else(|| TestkitError::Input {
            what: format!("packet {packet:?}"),
            message: "no branches were followed".into(),
        })
    }

    /// The network namespace itself, for what the testkit does not wrap.
    pub fn netns(&self) -> &Netns {
        &self.ns
    }

    /// The network namespace itself, mutably: to load saved state into it
    /// ([`crate::explain::load_saved_state`]) or change its rules as a process on the node
    /// would ([`Netns::restore`], [`Netns::nft_apply`]). Conntrack events of what you do
    /// through it are not recorded.
    pub fn netns_mut(&mut self) -> &mut Netns {
        &mut self.ns
    }

    /// Changes kube-proxy's objects at `at` (YAML Services / EndpointSlices: created or
    /// replaced), then runs every sync due up to `at`; with its rate limit (`minSyncPeriod`
    /// 1 s, burst 2) a sync may fall due later: [`Node::sync_due`] runs it. Returns the
    /// cleanup reports of the syncs that ran. Only for nodes built from objects.
    pub fn apply_objects(
        &mut self,
        at: SimTime,
        yaml: &str,
    ) -> Result<Vec<CleanupReport>, TestkitError> {
        let objs = objects(yaml, "objects")?;
        self.advance(at)?;
        let g = self.proxy_mut()?;
        for o in objs {
            g.proxy.upsert(at, o);
        }
        self.sync_due(at)
    }

    /// Deletes a Service (`namespace`, `name`) or EndpointSlice from kube-proxy's view at
    /// `at`, then runs the syncs due.
    pub fn delete_object(
        &mut self,
        at: SimTime,
        kind: &str,
        namespace: &str,
        name: &str,
    ) -> Result<Vec<CleanupReport>, TestkitError> {
        self.advance(at)?;
        let g = self.proxy_mut()?;
        match kind {
            "Service" => g.proxy.delete_service(at, namespace, name),
            "EndpointSlice" => g.proxy.delete_endpoint_slice(at, namespace, name),
            other => {
                return Err(TestkitError::Input {
                    what: format!("kind {other:?}"),
                    message: "expected Service or EndpointSlice".into(),
                })
            }
        };
        self.sync_due(at)
    }

    fn proxy_mut(&mut self) -> Result<&mut ProxyGroup, TestkitError> {
        self.proxy.as_mut().ok_or_else(|| TestkitError::Input {
            what: "kube-proxy".into(),
            message: "this node was built from rules, not objects: it has no kube-proxy".into(),
        })
    }

    /// When kube-proxy's next sync is due, if one is pending.
    pub fn next_sync(&self) -> Option<SimTime> {
        self.proxy.as_ref().and_then(|g| g.proxy.poll_timeout())
    }

    /// Runs every kube-proxy sync due up to `until` (advancing the node's time to each), and
    /// its cleanup; returns the cleanup reports.
    pub fn sync_due(&mut self, until: SimTime) -> Result<Vec<CleanupReport>, TestkitError> {
        let mut reports = Vec::new();
        while let Some(t) = self.next_sync().filter(|t| *t <= until) {
            let t = t.max(self.now);
            self.advance(t)?;
            let Some(g) = self.proxy.as_mut() else { break };
            let Some(r) = g.on_timeout(t, vec![(0, &mut self.ns)], &mut || {}) else {
                break;
            };
            if let Some(e) = r.nodes.iter().find_map(|n| n.error.clone()) {
                return Err(TestkitError::Input {
                    what: "kube-proxy sync".into(),
                    message: e,
                });
            }
            self.events.extend(self.ns.drain_conntrack_events());
            self.cleanups.push((t, r.cleanup.clone()));
            reports.push(r.cleanup);
        }
        self.advance(until.max(self.now))?;
        Ok(reports)
    }

    /// Every cleanup report so far, with the instant of its sync.
    pub fn cleanups(&self) -> &[(SimTime, CleanupReport)] {
        &self.cleanups
    }
}
