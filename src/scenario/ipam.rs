//! Addresses a scenario leaves out: pod IPs from their node's pod CIDR, as the CNI's
//! host-local IPAM hands them out, and Service cluster IPs from the service CIDR, as
//! kube-apiserver's allocator picks them (docs/kube-proxy-model.md §8).
//!
//! Both run once, at load time, over the objects in the order the simulation creates them:
//! the pods and Services of the file (in file order), then the events by time (then file
//! order). Every address given in the file, anywhere, is kept out of both draws, so an
//! allocated address never collides with an explicit one, and an address is handed out once
//! per run. The result is written into the document, so the rest of the loader and the
//! simulation see ordinary addresses; [`Ipam::allocated`] remembers which ones were
//! allocated, for the timeline.
//!
//! - Pods (`plugins/ipam/host-local/backend/allocator`: `Range.Canonicalize`,
//!   `IPAllocator.Get`, `RangeIter.Next`): the range runs from the network address + 1 to the
//!   broadcast address − 1; the gateway (network + 1, the node's own address on the pod
//!   veths) is skipped; the iterator starts after the last address reserved and goes round.
//!   On a fresh node that hands out network + 2, + 3, … in turn, and an address a pod
//!   released comes back only after the whole range has gone round: nfsim hands out the
//!   lowest address never used in the run ([`first_free_pod_ip`]; the same rule brings back
//!   pods a `scale` event scaled down).
//! - Services (`pkg/registry/core/service/ipallocator/bitmap.go`: `New`,
//!   `calculateRangeOffset`; `pkg/registry/core/service/allocator/bitmap.go`:
//!   `randomScanStrategyWithOffset`): offsets count from the network address + 1, the
//!   broadcast address is left out; the first `min(max(16, size / 16), 256)` offsets (none
//!   for a range of 16 addresses or fewer) are the static band, kept for addresses users
//!   choose. A dynamic allocation draws a random start in the upper band and scans forward
//!   (wrapping within the band) for a free offset; only when the upper band is full does it
//!   draw and scan in the lower band. kube-apiserver seeds its draw from the clock; nfsim
//!   draws from the scenario's seed (stream `ipam/service-cidr`). An IPv6 range has no
//!   broadcast address and its bitmap is capped at 65,536 addresses (`New`: "Limit the max
//!   size, since the allocator keeps a bitmap of that size"); the second family draws from
//!   its own stream (`ipam/service-cidr/IPv6`).
//! - Which families a Service gets (`pkg/registry/core/service/storage/alloc.go`:
//!   `initIPFamilyFields`): the families of the `clusterIPs` it gives, else its
//!   `ipFamilies`, else the cluster's primary family (the first of `serviceCIDRs`), and with
//!   `PreferDualStack` or `RequireDualStack` on a dual-stack cluster the other family after
//!   it; `RequireDualStack` on a single-stack cluster and a family the cluster has no range
//!   for are errors at the Service, in the apiserver's words. `ipFamilyPolicy` defaults to
//!   `SingleStack`, or `RequireDualStack` when two families are given.

use super::load::{Ctx, ScenarioError};
use super::model::NodeDef;
use super::schema::{EventDoc, PodDoc, ScenarioDoc, S};
use crate::k8s::{self, ClusterIp, IpFamily, IpFamilyPolicy, ServiceType};
use serde_saphyr::Spanned;
use sim_core::SimRng;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// kube-apiserver's default `--service-cluster-ip-range`.
pub const DEFAULT_SERVICE_CIDR: &str = "10.96.0.0/12";

/// What the allocation decided.
#[derive(Clone, Debug)]
pub struct Ipam {
    /// The primary service CIDR (`serviceCIDR`, the first of `serviceCIDRs`, default
    /// [`DEFAULT_SERVICE_CIDR`]).
    pub service_cidr: k8s::Cidr,
    /// Every service CIDR, one per family, primary first.
    pub service_cidrs: Vec<k8s::Cidr>,
    /// The allocated addresses: (`pod NS/NAME` or `service NS/NAME`, address) → where it came
    /// from (`node-1's pod CIDR 10.244.1.0/24`, `the service CIDR 10.96.0.0/12`).
    pub allocated: BTreeMap<(String, IpAddr), String>,
}

/// The usable pod addresses of `cidr` as host-local's default range has them
/// (`Range.Canonicalize`): from the network address + 2 (after the gateway, network + 1) to
/// `lastIP`, the broadcast address − 1 for IPv4 and the last address for IPv6 (which has no
/// broadcast). Empty for an IPv4 /31 or /32, an IPv6 /127 or /128.
fn pod_range(cidr: &k8s::Cidr) -> Option<(u128, u128)> {
    let (base, width) = match cidr.addr() {
        IpAddr::V4(net) => (u128::from(u32::from(net)), 32),
        IpAddr::V6(net) => (u128::from(net), 128),
    };
    let host_bits = width - u32::from(cidr.prefix_len());
    if host_bits < 2 {
        return None;
    }
    let ones = u128::MAX >> (128 - host_bits);
    let last = if width == 32 {
        (base | ones) - 1
    } else {
        base | ones
    };
    Some((base + 2, last))
}

/// The lowest address of node pod CIDR `cidr` after its gateway that is not in `used` (the
/// addresses pods of the run have had or will have), or `None` when there is none.
pub fn first_free_pod_ip(cidr: &k8s::Cidr, used: &BTreeSet<IpAddr>) -> Option<IpAddr> {
    let (first, last) = pod_range(cidr)?;
    (first..=last)
        .map(|a| range_ip(cidr, a))
        .find(|ip| !used.contains(ip))
}

/// Address `a` (as a number) in the family of `cidr`.
fn range_ip(cidr: &k8s::Cidr, a: u128) -> IpAddr {
    match cidr.addr() {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(a as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(a)),
    }
}

/// `calculateRangeOffset`: the size of the static band of a range of `size` addresses.
pub fn static_band(size: u64) -> u64 {
    if size <= 16 {
        return 0;
    }
    (size / 16).clamp(16, 256)
}

/// kube-apiserver's ClusterIP allocator over one range, with a seeded draw.
#[derive(Debug)]
pub struct ServiceIpAllocator {
    cidr: k8s::Cidr,
    base: u128,
    max: u64,
    offset: u64,
    used: BTreeSet<u64>,
    rng: SimRng,
}

impl ServiceIpAllocator {
    /// An allocator over `cidr` (an IPv4 /30 or larger, an IPv6 /126 or larger), drawing
    /// from `seed` (stream `ipam/service-cidr`, `ipam/service-cidr/IPv6` for IPv6).
    pub fn new(cidr: k8s::Cidr, seed: u64) -> Option<ServiceIpAllocator> {
        let (base, size, max, stream) = match cidr.addr() {
            IpAddr::V4(net) => {
                let size = 1u64 << (32 - u32::from(cidr.prefix_len()));
                // Neither the network address nor the broadcast address.
                (
                    u128::from(u32::from(net)),
                    size,
                    size.checked_sub(2)?,
                    "ipam/service-cidr",
                )
            }
            IpAddr::V6(net) => {
                let bits = 128 - u32::from(cidr.prefix_len());
                // RangeSize, capped where it no longer matters (the bitmap and the static
                // band both are).
                let size = if bits >= 63 { 1u64 << 63 } else { 1u64 << bits };
                // Not the network address; the bitmap holds at most 65,536.
                let max = size.min(65536).checked_sub(1)?;
                (u128::from(net), size, max, "ipam/service-cidr/IPv6")
            }
        };
        if max < 2 {
            return None;
        }
        Some(ServiceIpAllocator {
            cidr,
            base: base + 1,
            max,
            offset: static_band(size),
            used: BTreeSet::new(),
            rng: SimRng::derive(seed, stream),
        })
    }

    /// The offset of `ip`, if it is allocatable in the range.
    fn offset_of(&self, ip: IpAddr) -> Option<u64> {
        let v = match (ip, self.cidr.addr()) {
            (IpAddr::V4(a), IpAddr::V4(_)) => u128::from(u32::from(a)),
            (IpAddr::V6(a), IpAddr::V6(_)) => u128::from(a),
            _ => return None,
        };
        let off = u64::try_from(v.checked_sub(self.base)?).ok()?;
        (off < self.max).then_some(off)
    }

    /// Marks `ip` taken (an address given in the file); false when it is outside the range.
    pub fn reserve(&mut self, ip: IpAddr) -> bool {
        match self.offset_of(ip) {
            Some(o) => {
                self.used.insert(o);
                true
            }
            None => false,
        }
    }

    /// Whether `ip` is an allocatable address of the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        self.offset_of(ip).is_some()
    }

    /// The next dynamic address: upper band first, then the static band; `None` when full.
    pub fn allocate(&mut self) -> Option<IpAddr> {
        let upper = self.max - self.offset;
        let mut pick = None;
        if upper > 0 {
            let start = self.rng.below(upper);
            pick = (0..upper)
                .map(|i| self.offset + (start + i) % upper)
                .find(|o| !self.used.contains(o));
        }
        if pick.is_none() && self.offset > 0 {
            let start = self.rng.below(self.offset);
            pick = (0..self.offset)
                .map(|i| (start + i) % self.offset)
                .find(|o| !self.used.contains(o));
        }
        let o = pick?;
        self.used.insert(o);
        let v = self.base + u128::from(o);
        Some(match self.cidr.addr() {
            IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(v as u32)),
            IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(v)),
        })
    }

    /// The range, for messages.
    pub fn cidr(&self) -> k8s::Cidr {
        self.cidr
    }

    /// The family of the range.
    pub fn family(&self) -> IpFamily {
        IpFamily::of(self.cidr.addr())
    }
}

/// The pod's `namespace/name`.
fn pod_key(p: &PodDoc) -> String {
    format!(
        "{}/{}",
        p.namespace.as_deref().unwrap_or("default"),
        p.name.value
    )
}

/// A reference `NAME` or `NS/NAME` as a key.
fn ref_key(r: &str) -> String {
    if r.contains('/') {
        r.to_string()
    } else {
        format!("default/{r}")
    }
}

/// Pod address allocation over the nodes.
struct Pods<'a> {
    nodes: &'a [NodeDef],
    used: BTreeSet<IpAddr>,
}

impl Pods<'_> {
    /// An address for pod `key` on node `n`, or a located error at `at`.
    fn allocate<T>(
        &mut self,
        ctx: &Ctx,
        at: &Spanned<T>,
        key: &str,
        n: usize,
        ipam: &mut Ipam,
    ) -> Result<Spanned<IpAddr>, ScenarioError> {
        let cidr = self.nodes[n].pod_cidr;
        self.allocate_from(ctx, at, key, n, cidr, ipam)
    }

    /// On a dual-stack node `n`, pod `key`'s address of the second family (`status.podIPs[1]`:
    /// the CNI's host-local IPAM with one range per family hands out one address of each).
    fn allocate_secondary<T>(
        &mut self,
        ctx: &Ctx,
        at: &Spanned<T>,
        key: &str,
        n: usize,
        ipam: &mut Ipam,
    ) -> Result<Option<Spanned<IpAddr>>, ScenarioError> {
        match self.nodes[n].secondary {
            Some(sec) => self
                .allocate_from(ctx, at, key, n, sec.pod_cidr, ipam)
                .map(Some),
            None => Ok(None),
        }
    }

    fn allocate_from<T>(
        &mut self,
        ctx: &Ctx,
        at: &Spanned<T>,
        key: &str,
        n: usize,
        cidr: k8s::Cidr,
        ipam: &mut Ipam,
    ) -> Result<Spanned<IpAddr>, ScenarioError> {
        let node = &self.nodes[n];
        let Some((first, last)) = pod_range(&cidr) else {
            return Err(ctx.err(
                at,
                format!(
                    "pod {key} has no `ip` and node {}'s pod CIDR {cidr} has no addresses to allocate from (nfsim allocates from pod CIDRs of /30 or larger, /126 or larger for IPv6): give the pod an `ip`",
                    node.name
                ),
            ));
        };
        let Some(ip) = first_free_pod_ip(&cidr, &self.used) else {
            return Err(ctx.err(
                at,
                format!(
                    "pod {key} has no `ip` and node {}'s pod CIDR {cidr} is exhausted: its {} usable address{} {} to {} {} used by pods of this run (an address is handed out once per run); give the pod an `ip`, put it on another node, or give node {} a larger podCIDR",
                    node.name,
                    last - first + 1,
                    if last == first { "" } else { "es" },
                    range_ip(&cidr, first),
                    range_ip(&cidr, last),
                    if last == first { "is" } else { "are all" },
                    node.name
                ),
            ));
        };
        self.used.insert(ip);
        ipam.allocated.insert(
            (format!("pod {key}"), ip),
            format!("{}'s pod CIDR {cidr}", node.name),
        );
        Ok(Spanned::new(ip, at.referenced, at.defined))
    }
}

/// The node index of a pod document, if its node exists.
fn node_of(nodes: &[NodeDef], p: &PodDoc) -> Option<usize> {
    nodes.iter().position(|n| n.name == p.node.value)
}

/// Fills in the pod IPs and cluster IPs `doc` leaves out (see the module documentation).
/// `nodes` are the checked nodes. Errors: a malformed or too small `serviceCIDR`, an
/// explicit cluster IP outside an explicit `serviceCIDR`, an exhausted range.
pub(super) fn assign(
    ctx: &Ctx,
    doc: &mut ScenarioDoc,
    nodes: &[NodeDef],
) -> Result<Ipam, ScenarioError> {
    let (cidrs, strict) = service_cidrs(ctx, doc)?;
    let seed = doc.seed.unwrap_or(1);
    let mut allocators = Vec::new();
    for (c, at) in &cidrs {
        let Some(a) = ServiceIpAllocator::new(*c, seed) else {
            return Err(ctx.err(
                at,
                format!("serviceCIDR {c}: expected an IPv4 range of at least 4 addresses (a /30 or larger) or an IPv6 one of at least 4 (a /126 or larger), such as {DEFAULT_SERVICE_CIDR} or fd00:10:96::/112"),
            ));
        };
        allocators.push(a);
    }
    let mut svc = ServiceAllocators(allocators);
    let mut ipam = Ipam {
        service_cidr: cidrs[0].0,
        service_cidrs: cidrs.iter().map(|(c, _)| *c).collect(),
        allocated: BTreeMap::new(),
    };

    // Every address the file gives is kept out of the draws.
    let mut pods = Pods {
        nodes,
        used: nodes
            .iter()
            .flat_map(|n| std::iter::once(n.address).chain(n.secondary.map(|s| s.address)))
            .collect(),
    };
    let explicit_svc = |s: &S<k8s::Service>| -> Vec<IpAddr> {
        let spec = &s.value.spec;
        let mut v: Vec<IpAddr> = spec
            .cluster_ip
            .iter()
            .chain(&spec.cluster_ips)
            .filter_map(|c| c.ip())
            .collect();
        v.dedup();
        v
    };
    for p in &doc.pods {
        pods.used.extend(p.value.ip.as_ref().map(|i| i.value));
    }
    for e in &doc.events {
        let d = &e.value;
        if let Some(p) = &d.create_pod {
            pods.used.extend(p.ip.as_ref().map(|i| i.value));
        }
        if let Some(r) = d.delete_pod.as_ref().and_then(|x| x.recreate.as_ref()) {
            pods.used.extend(r.ip.as_ref().map(|i| i.value));
        }
    }
    let all_services = doc.services.iter().chain(
        doc.events
            .iter()
            .flat_map(|e| [&e.value.create_service, &e.value.update_service])
            .flatten(),
    );
    for s in all_services {
        for ip in explicit_svc(s) {
            let family = IpFamily::of(ip);
            let reserved = svc.of(family).is_some_and(|a| a.reserve(ip));
            // Only ranges the file gives are checked, and an IPv4 address only against an
            // IPv4 range the file gives (without one, any IPv4 address is taken as it is).
            let checked = strict && (family == IpFamily::IPv4 || svc.of(family).is_some());
            if !reserved && checked {
                let msg = match svc.of(family) {
                    Some(a) => {
                        let c = a.cidr();
                        format!("cluster IP {ip} is not in the serviceCIDR {c}: kube-apiserver refuses it (\"provided IP is not in the valid range\"); expected an address in {c}, or leave `clusterIP` out to have one allocated")
                    }
                    None => format!("cluster IP {ip} is {family} and the scenario's serviceCIDRs have no {family} range: kube-apiserver refuses it (\"not configured on this cluster\"); add a {family} range to serviceCIDRs"),
                };
                return Err(ctx.err(s, format!("Service {}: {msg}", s.value.key())));
            }
        }
    }

    // The file's pods and Services, in file order.
    for p in &mut doc.pods {
        if p.value.ip.is_none() {
            if let Some(n) = node_of(nodes, &p.value) {
                let key = pod_key(&p.value);
                let ip = pods.allocate(ctx, &p.value.name, &key, n, &mut ipam)?;
                p.value.ip = Some(ip);
            }
        }
        if let Some(n) = node_of(nodes, &p.value) {
            let key = pod_key(&p.value);
            p.value.secondary_ip =
                pods.allocate_secondary(ctx, &p.value.name, &key, n, &mut ipam)?;
        }
    }
    let mut current: BTreeMap<String, k8s::ServiceSpec> = BTreeMap::new();
    for s in &mut doc.services {
        allocate_service(ctx, s, &mut svc, &mut ipam)?;
        current.insert(s.value.key(), s.value.spec.clone());
    }

    // The events, in the order the simulation runs them.
    let mut order: Vec<usize> = (0..doc.events.len()).collect();
    order.sort_by_key(|&i| doc.events[i].value.at.value);
    let mut pod_nodes: BTreeMap<String, usize> = doc
        .pods
        .iter()
        .filter_map(|p| Some((pod_key(&p.value), node_of(nodes, &p.value)?)))
        .collect();
    for i in order {
        let e: &mut EventDoc = &mut doc.events[i].value;
        if let Some(p) = &mut e.create_pod {
            let key = pod_key(p);
            if let Some(n) = node_of(nodes, p) {
                if p.ip.is_none() {
                    let ip = pods.allocate(ctx, &p.name, &key, n, &mut ipam)?;
                    p.ip = Some(ip);
                }
                p.secondary_ip = pods.allocate_secondary(ctx, &p.name, &key, n, &mut ipam)?;
                pod_nodes.insert(key, n);
            }
        }
        if let Some(dp) = &mut e.delete_pod {
            // With `endpointOf` the pod is only known at run time (and `recreate` is refused).
            let key = dp.pod.as_ref().map_or(String::new(), |p| ref_key(&p.value));
            if let Some(r) = &mut dp.recreate {
                if let Some(flag) = &r.new_ip {
                    if flag.value && r.ip.is_some() {
                        return Err(ctx.err(
                            flag,
                            "`newIp: true` and `ip` both choose the new pod's address: give one of them",
                        ));
                    }
                }
                let node = match &r.node {
                    Some(n) => nodes.iter().position(|x| x.name == n.value),
                    None => pod_nodes.get(&key).copied(),
                };
                if let (Some(flag), Some(n)) = (&r.new_ip, node) {
                    if flag.value {
                        let ip = pods.allocate(ctx, flag, &key, n, &mut ipam)?;
                        r.ip = Some(ip);
                    }
                }
                if let Some(n) = node {
                    pod_nodes.insert(key, n);
                }
            }
        }
        if let Some(s) = &mut e.create_service {
            allocate_service(ctx, s, &mut svc, &mut ipam)?;
            current.insert(s.value.key(), s.value.spec.clone());
        }
        if let Some(s) = &mut e.update_service {
            // An update that leaves `clusterIP` out keeps the Service's addresses and
            // families (the API server copies the allocated values of the old object,
            // `PatchAllocatedValues`).
            if s.value.spec.cluster_ip.is_none() && s.value.spec.cluster_ips.is_empty() {
                if let Some(old) = current.get(&s.value.key()) {
                    let spec = &mut s.value.spec;
                    spec.cluster_ip = old.cluster_ip;
                    spec.cluster_ips = old.cluster_ips.clone();
                    if spec.ip_families.is_empty() {
                        spec.ip_families = old.ip_families.clone();
                    }
                    if spec.ip_family_policy.is_none() {
                        spec.ip_family_policy = old.ip_family_policy;
                    }
                }
            }
        }
        if let Some(k) = &e.delete_service {
            current.remove(&k.value);
        }
    }
    Ok(ipam)
}

/// Service CIDRs with where each was given, primary first.
type GivenCidrs = Vec<(k8s::Cidr, Spanned<()>)>;

/// The scenario's service CIDRs with where each was given (`serviceCIDR`, or
/// `serviceCIDRs`: one per family, primary first), and whether the file gave any.
fn service_cidrs(ctx: &Ctx, doc: &ScenarioDoc) -> Result<(GivenCidrs, bool), ScenarioError> {
    let here = |r, d| Spanned::new((), r, d);
    match (&doc.service_cidr, &doc.service_cidrs) {
        (Some(one), Some(list)) => Err(ctx.err(
            list,
            format!(
                "both serviceCIDR ({}) and serviceCIDRs: give one of them (serviceCIDRs for a dual-stack cluster, as --service-cluster-ip-range=IPV4,IPV6)",
                one.value
            ),
        )),
        (Some(one), None) => Ok((vec![(one.value, here(one.referenced, one.defined))], true)),
        (None, Some(list)) => {
            if list.value.is_empty() || list.value.len() > 2 {
                return Err(ctx.err(
                    list,
                    format!(
                        "serviceCIDRs has {} entries: expected one or two, at most one per family (such as [10.96.0.0/12, fd00:10:96::/112])",
                        list.value.len()
                    ),
                ));
            }
            if let [a, b] = &list.value[..] {
                if a.value.addr().is_ipv4() == b.value.addr().is_ipv4() {
                    return Err(ctx.err(
                        b,
                        format!(
                            "serviceCIDRs[1] {} is of the same family as serviceCIDRs[0] {}: kube-apiserver takes one range per family for a dual-stack cluster",
                            b.value, a.value
                        ),
                    ));
                }
            }
            Ok((
                list.value
                    .iter()
                    .map(|c| (c.value, here(c.referenced, c.defined)))
                    .collect(),
                true,
            ))
        }
        (None, None) => Ok((
            vec![(
                DEFAULT_SERVICE_CIDR
                    .parse()
                    .unwrap_or_else(|_| unreachable!("a valid CIDR")),
                here(doc.name.referenced, doc.name.defined),
            )],
            false,
        )),
    }
}

/// One allocator per service CIDR, primary first.
struct ServiceAllocators(Vec<ServiceIpAllocator>);

impl ServiceAllocators {
    fn of(&mut self, family: IpFamily) -> Option<&mut ServiceIpAllocator> {
        self.0.iter_mut().find(|a| a.family() == family)
    }
    fn primary(&self) -> IpFamily {
        self.0[0].family()
    }
    fn dual_stack(&self) -> bool {
        self.0.len() == 2
    }
}

/// `initIPFamilyFields`, then the allocation of the cluster IPs a Service leaves out (not
/// headless, not ExternalName): its families in order, primary first, each address from its
/// family's range; `clusterIP` is `clusterIPs[0]`. The families and the policy are written
/// into the Service, as the apiserver stores them.
fn allocate_service(
    ctx: &Ctx,
    s: &mut S<k8s::Service>,
    svc: &mut ServiceAllocators,
    ipam: &mut Ipam,
) -> Result<(), ScenarioError> {
    let key = s.value.key();
    let spec = &s.value.spec;
    if spec.type_ == ServiceType::ExternalName {
        return Ok(());
    }
    let headless = spec.cluster_ip == Some(ClusterIp::None)
        || spec.cluster_ips.first() == Some(&ClusterIp::None);
    let given: Vec<IpAddr> = spec
        .cluster_ip
        .iter()
        .chain(&spec.cluster_ips)
        .filter_map(|c| c.ip())
        .fold(Vec::new(), |mut v, ip| {
            if !v.contains(&ip) {
                v.push(ip);
            }
            v
        });
    // The policy: as given, else RequireDualStack when two families are given.
    let two_given = given.len() == 2 || spec.ip_families.len() == 2;
    let policy = spec.ip_family_policy.unwrap_or(if two_given {
        IpFamilyPolicy::RequireDualStack
    } else {
        IpFamilyPolicy::SingleStack
    });
    if policy == IpFamilyPolicy::RequireDualStack && !svc.dual_stack() {
        return Err(ctx.err(
            s,
            format!(
                "Service {key}: spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services (kube-apiserver); give the scenario serviceCIDRs of both families, or PreferDualStack / SingleStack"
            ),
        ));
    }
    // The families: those of the given addresses, then `ipFamilies`, then the primary.
    let mut families: Vec<IpFamily> = given.iter().map(|ip| IpFamily::of(*ip)).collect();
    for f in &spec.ip_families {
        if !families.contains(f) {
            families.push(*f);
        }
    }
    if families.is_empty() {
        families.push(svc.primary());
    }
    if policy != IpFamilyPolicy::SingleStack && svc.dual_stack() && families.len() == 1 {
        families.push(families[0].other());
    }
    for (i, f) in families.iter().enumerate() {
        // A family whose address the file gives is checked with the address (against the
        // ranges the file gives); one to allocate needs its range.
        let to_allocate = !headless && !given.iter().any(|ip| f.contains(*ip));
        if to_allocate && svc.of(*f).is_none() {
            return Err(ctx.err(
                s,
                format!(
                    "Service {key}: spec.ipFamilies[{i}]: Invalid value: \"{f}\": not configured on this cluster (kube-apiserver): the scenario has no {f} service CIDR; add one to serviceCIDRs"
                ),
            ));
        }
    }
    if headless {
        // A headless Service keeps `None` and gets its families (the apiserver sets them
        // from the policy and the cluster for selector-backed headless Services).
        let spec = &mut s.value.spec;
        spec.ip_families = families;
        spec.ip_family_policy = Some(policy);
        return Ok(());
    }
    let mut ips = given.clone();
    for f in &families {
        if ips.iter().any(|ip| f.contains(*ip)) {
            continue;
        }
        let a = svc
            .of(*f)
            .unwrap_or_else(|| unreachable!("checked just above"));
        let cidr = a.cidr();
        let Some(ip) = a.allocate() else {
            let what = if given.is_empty() && families.len() == 1 {
                "`clusterIP`".to_string()
            } else {
                format!("{f} cluster IP")
            };
            return Err(ctx.err(
                s,
                format!(
                    "Service {key} has no {what} and the serviceCIDR {cidr} is exhausted (kube-apiserver: \"range is full\"): give it a `clusterIP`, fewer Services, or a larger serviceCIDR"
                ),
            ));
        };
        ipam.allocated.insert(
            (format!("service {key}"), ip),
            format!("the service CIDR {cidr}"),
        );
        ips.push(ip);
    }
    let spec = &mut s.value.spec;
    spec.cluster_ip = ips.first().map(|ip| ClusterIp::Ip(*ip));
    if ips.len() > 1 || !spec.cluster_ips.is_empty() || !spec.ip_families.is_empty() {
        spec.cluster_ips = ips.iter().map(|ip| ClusterIp::Ip(*ip)).collect();
        spec.ip_families = families;
        spec.ip_family_policy = Some(policy);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cidr(s: &str) -> k8s::Cidr {
        s.parse().unwrap()
    }

    #[test]
    fn the_static_band_follows_calculate_range_offset() {
        // /28: 16 addresses, no band; /27: 16; /24: 16; /20: 256; /12: 256 (the cap).
        assert_eq!(static_band(16), 0);
        assert_eq!(static_band(32), 16);
        assert_eq!(static_band(256), 16);
        assert_eq!(static_band(4096), 256);
        assert_eq!(static_band(1 << 20), 256);
    }

    #[test]
    fn pods_get_the_lowest_unused_address_after_the_gateway() {
        let c = cidr("10.244.1.0/24");
        let mut used = BTreeSet::new();
        assert_eq!(
            first_free_pod_ip(&c, &used),
            Some("10.244.1.2".parse().unwrap())
        );
        used.insert("10.244.1.2".parse().unwrap());
        used.insert("10.244.1.3".parse().unwrap());
        assert_eq!(
            first_free_pod_ip(&c, &used),
            Some("10.244.1.4".parse().unwrap())
        );
        // A /30 has one: .2 (.1 is the gateway, .3 the broadcast address).
        let small = cidr("10.244.9.0/30");
        let one: BTreeSet<IpAddr> = ["10.244.9.2".parse().unwrap()].into();
        assert_eq!(
            first_free_pod_ip(&small, &BTreeSet::new()),
            Some("10.244.9.2".parse().unwrap())
        );
        assert_eq!(first_free_pod_ip(&small, &one), None);
        assert_eq!(
            first_free_pod_ip(&cidr("10.244.9.0/31"), &BTreeSet::new()),
            None
        );
    }

    #[test]
    fn cluster_ips_come_from_the_upper_band_until_it_is_full() {
        // A /27: offsets 0..30 (10.96.0.1 to 10.96.0.30), the static band is offsets 0..16.
        let mut a = ServiceIpAllocator::new(cidr("10.96.0.0/27"), 7).unwrap();
        assert!(a.reserve("10.96.0.20".parse().unwrap()));
        assert!(!a.reserve("10.96.0.31".parse().unwrap()), "broadcast");
        assert!(!a.reserve("10.96.0.0".parse().unwrap()), "network");
        let mut got = Vec::new();
        while let Some(ip) = a.allocate() {
            got.push(ip);
        }
        assert_eq!(got.len(), 29, "30 addresses, one given");
        assert!(!got.contains(&"10.96.0.20".parse().unwrap()));
        let last_octet = |ip: &IpAddr| match ip {
            IpAddr::V4(a) => a.octets()[3],
            _ => 0,
        };
        // The first 13 are the upper band's (offsets 16..30 = .17 to .30, minus .20).
        assert!(
            got[..13]
                .iter()
                .all(|ip| (17..=30).contains(&last_octet(ip))),
            "{got:?}"
        );
        assert!(
            got[13..]
                .iter()
                .all(|ip| (1..=16).contains(&last_octet(ip))),
            "{got:?}"
        );
        // Same seed, same draw; another seed, another first address (for this seed pair).
        let first = |seed| {
            ServiceIpAllocator::new(cidr("10.96.0.0/12"), seed)
                .unwrap()
                .allocate()
        };
        assert_eq!(first(1), first(1));
        assert_ne!(first(1), first(2));
    }

    #[test]
    fn ipv6_ranges_have_no_broadcast_address_and_a_capped_bitmap() {
        // A /124: 16 addresses, the network address left out, the last one allocatable.
        let mut a = ServiceIpAllocator::new(cidr("fd00:10:96::/124"), 3).unwrap();
        assert!(a.contains("fd00:10:96::f".parse().unwrap()));
        assert!(!a.contains("fd00:10:96::".parse().unwrap()));
        assert!(!a.contains("10.96.0.1".parse().unwrap()));
        let mut n = 0;
        while a.allocate().is_some() {
            n += 1;
        }
        assert_eq!(n, 15);
        // A /64: the bitmap holds 65,536 addresses (::1 to ::ffff), the static band 256.
        let mut b = ServiceIpAllocator::new(cidr("fd00:10:96::/64"), 3).unwrap();
        assert!(b.contains("fd00:10:96::ffff".parse().unwrap()));
        assert!(!b.contains("fd00:10:96::1:0".parse().unwrap()));
        let IpAddr::V6(ip) = b.allocate().unwrap() else {
            panic!()
        };
        assert!(
            (257..=0xffff).contains(&(u128::from(ip) & 0xffff_ffff)),
            "{ip}"
        );
        // Its own draw: another stream than the IPv4 range's.
        assert_eq!(b.family(), IpFamily::IPv6);
        assert!(ServiceIpAllocator::new(cidr("fd00::/127"), 1).is_none());
    }
}
