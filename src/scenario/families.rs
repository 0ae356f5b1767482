//! IP families in a scenario's Kubernetes objects and machines: the cluster's families, the
//! other one refused or warned about, never loaded and ignored.
//!
//! A scenario's cluster is single-stack, IPv4 or IPv6, or dual-stack: the families of its
//! nodes' addresses ([`crate::scenario::model::Scenario::families`]). A single-stack node
//! runs that family's kube-proxy proxier (`iptables` or `ip6tables`), as a single-stack
//! node's kube-proxy does (`cmd/kube-proxy/app/server.go`: the primary family is the node
//! IP's; a second proxier only when the node has an address of the other family). A
//! dual-stack node (`addresses` and `podCIDRs` of both families) runs both
//! (`NewDualStackProxier`). Every node of a cluster is single-stack of one family, or every
//! node dual-stack with the same primary family ([`normalize_nodes`]). Upstream kube-proxy
//! runs one proxier per family: for a dual-stack Service each family's proxier writes
//! exactly the rules it would for a single-stack Service of that family. So, on a
//! single-stack cluster:
//! - a Service none of whose cluster IPs is of the cluster's family would get no rules at
//!   all: an error, at the Service, since every result about it would be silently wrong;
//! - a dual-stack Service's half of the cluster's family is simulated exactly; its addresses
//!   of the other family (cluster IPs, external IPs, load-balancer ingress IPs) get a warning
//!   at the Service;
//! - an EndpointSlice of the other `addressType` feeds only the other family's proxier: a
//!   warning at the slice (each proxier skips the other family's slices too:
//!   `EndpointSliceCache` keeps slices by address family);
//! - a node, pod, host or client address of the other family is refused at its place.
//!
//! On a dual-stack cluster both families are simulated: nothing of either is refused.

use super::load::Ctx;
use super::schema::{EventDoc, NodeDoc, ScenarioDoc, S};
use super::warnings::ScenarioWarning;
use super::ScenarioError;
use crate::k8s::{self, IpFamily};
use serde_saphyr::Spanned;
use std::net::IpAddr;

/// Why the other family gets no rules in nfsim, for every message of this module.
fn why(family: IpFamily) -> String {
    format!(
        "the scenario's cluster is {f}-only (its nodes' addresses are {f}), so nfsim runs kube-proxy's {f} proxier only (give the nodes `addresses` and `podCIDRs` of both families for a dual-stack cluster)",
        f = family.as_str()
    )
}

/// The addresses of `family` that family's proxier would write rules for: cluster IPs,
/// external IPs and load-balancer ingress IPs.
fn family_addresses(s: &k8s::Service, family: IpFamily) -> Vec<IpAddr> {
    let spec = &s.spec;
    let mut v: Vec<IpAddr> = spec
        .cluster_ip
        .iter()
        .chain(spec.cluster_ips.iter())
        .filter_map(|c| c.ip())
        .chain(spec.external_ips.iter().copied())
        .chain(s.status.load_balancer.ingress.iter().filter_map(|i| i.ip))
        .filter(|a| family.contains(*a))
        .collect();
    v.dedup();
    v
}

/// Checks every Service (at the start and in `createService` / `updateService` events) and
/// every EndpointSlice of the scenario against the cluster's `family`: a Service with cluster
/// IPs of the other family only is an error, a dual-stack Service's addresses of the other
/// family and an EndpointSlice of the other family are warnings, each at its place. On a
/// dual-stack cluster (`dual`) both families are simulated and nothing is said.
pub(super) fn check(
    ctx: &Ctx,
    family: IpFamily,
    dual: bool,
    services: &[Spanned<k8s::Service>],
    events: &[Spanned<EventDoc>],
    slices: Option<&[Spanned<k8s::EndpointSlice>]>,
) -> Result<Vec<ScenarioWarning>, ScenarioError> {
    let mut warnings = Vec::new();
    if dual {
        // Both families' proxiers run: every address and slice takes part.
        return Ok(warnings);
    }
    let from_events = events.iter().flat_map(|e| {
        e.value
            .create_service
            .iter()
            .chain(e.value.update_service.iter())
    });
    for s in services.iter().chain(from_events) {
        let other = family_addresses(&s.value, family.other());
        if other.is_empty() {
            continue;
        }
        let list = other
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        let (f, o) = (family.as_str(), family.other().as_str());
        if s.value.cluster_ip_of(family).is_none()
            && s.value.spec.cluster_ip.is_some_and(|c| c.ip().is_some())
        {
            return Err(ctx.err(
                s,
                format!(
                    "Service {} is {o}-only ({list}): {}, so it would get no rules and its traffic would pass untranslated; expected an {f} cluster IP (a dual-stack Service's {f} half is simulated)",
                    s.value.key(),
                    why(family)
                ),
            ));
        }
        warnings.push(warning(
            ctx,
            s,
            format!(
                "Service {}: its {o} addresses ({list}) get no rules: {}; its {f} half is simulated as kube-proxy's {f} proxier writes it",
                s.value.key(),
                why(family)
            ),
        ));
    }
    for s in slices.unwrap_or_default() {
        let o = family.other();
        if s.value.address_type == o.address_type() {
            warnings.push(warning(
                ctx,
                s,
                format!(
                    "EndpointSlice {} (addressType {}) feeds only kube-proxy's {} proxier: {}; it is loaded and takes no part",
                    s.value.key(),
                    o.as_str(),
                    o.as_str(),
                    why(family)
                ),
            ));
        }
    }
    Ok(warnings)
}

fn warning<T>(ctx: &Ctx, at: &Spanned<T>, message: String) -> ScenarioWarning {
    ScenarioWarning {
        file: ctx.file().to_string(),
        line: at.referenced.line(),
        column: at.referenced.column(),
        message,
    }
}

/// Why an address of the other family on the cluster's own machines is refused.
fn why_addr(family: IpFamily) -> String {
    format!(
        "the scenario's cluster is {f}-only (the family of its first node's address): its nodes, pods, hosts and clients run kube-proxy's {f} proxier and {f} addresses only (give the nodes `addresses` and `podCIDRs` of both families for a dual-stack cluster)",
        f = family.as_str()
    )
}

/// Whether the scenario's nodes are dual-stack (checked by [`normalize_nodes`]: all of them
/// or none).
pub(super) fn dual_stack(nodes: &[Spanned<NodeDoc>]) -> bool {
    nodes.first().is_some_and(|n| {
        n.value
            .addresses
            .as_ref()
            .is_some_and(|a| a.value.len() == 2)
    })
}

/// The first pass over `nodes:`: each node gives `address` or `addresses`, `podCIDR` or
/// `podCIDRs`, and after it `address` and `podCIDR` hold the primary ones. A dual-stack node
/// (two `addresses`, one per family) needs two `podCIDRs` in the same family order, as a
/// dual-stack node gets them (`--cluster-cidr=IPV4,IPV6` in the node IPAM, `--node-ip`
/// in the kubelet, the same order); every node of a cluster is dual-stack with the same
/// primary family, or every one single-stack.
pub(super) fn normalize_nodes(ctx: &Ctx, doc: &mut ScenarioDoc) -> Result<(), ScenarioError> {
    let mut first: Option<(bool, IpFamily)> = None;
    for n in &mut doc.nodes {
        let (at_ref, at_def) = (n.referenced, n.defined);
        let d = &mut n.value;
        let name = d.name.value.clone();
        let addrs = match (&d.address, &d.addresses) {
            (Some(a), None) => vec![a.clone()],
            (None, Some(list)) => list.value.clone(),
            (Some(_), Some(list)) => {
                return Err(ctx.err(list, format!("node {name} gives both `address` and `addresses`: give `address` for a single-stack node, or `addresses` (one per family, primary first) for a dual-stack one")));
            }
            (None, None) => {
                return Err(ctx.at(at_ref, format!("node {name} has no `address`: expected `address: IP`, or `addresses: [IP, IP]` (one per family, primary first) for a dual-stack node")));
            }
        };
        let cidrs = match (&d.pod_cidr, &d.pod_cidrs) {
            (Some(c), None) => vec![c.clone()],
            (None, Some(list)) => list.value.clone(),
            (Some(_), Some(list)) => {
                return Err(ctx.err(list, format!("node {name} gives both `podCIDR` and `podCIDRs`: give `podCIDR` for a single-stack node, or `podCIDRs` (one per family, in the order of its addresses) for a dual-stack one")));
            }
            (None, None) => {
                return Err(ctx.at(at_ref, format!("node {name} has no `podCIDR`: expected `podCIDR: CIDR`, or `podCIDRs: [CIDR, CIDR]` for a dual-stack node")));
            }
        };
        match addrs.len() {
            1 | 2 => {}
            k => {
                let at = d.addresses.as_ref().map_or(at_ref, |l| l.referenced);
                return Err(ctx.at(at, format!("node {name} has {k} addresses: expected one, or two (one per family, primary first) for a dual-stack node")));
            }
        }
        if cidrs.is_empty() || cidrs.len() > 2 {
            return Err(ctx.at(d.pod_cidrs.as_ref().map_or(at_ref, |l| l.referenced), format!("node {name} has {} podCIDRs: expected one, or two (one per family) for a dual-stack node", cidrs.len())));
        }
        if addrs.len() == 2 && IpFamily::of(addrs[0].value) == IpFamily::of(addrs[1].value) {
            return Err(ctx.err(&addrs[1], format!("node {name}'s addresses {} and {} are both {}: a dual-stack node has one address per family (kubelet: \"dual-stack --node-ip must be of different families\")", addrs[0].value, addrs[1].value, IpFamily::of(addrs[0].value).as_str())));
        }
        if cidrs.len() == 2
            && IpFamily::of(cidrs[0].value.addr()) == IpFamily::of(cidrs[1].value.addr())
        {
            return Err(ctx.err(&cidrs[1], format!("node {name}'s podCIDRs {} and {} are both {}: a dual-stack node has one pod CIDR per family (kube-apiserver: \"may specify no more than one CIDR for each IP family\")", cidrs[0].value, cidrs[1].value, IpFamily::of(cidrs[0].value.addr()).as_str())));
        }
        if addrs.len() != cidrs.len() {
            let (what, at) = if addrs.len() == 2 {
                (
                    "two addresses and one pod CIDR: expected `podCIDRs` of both families too",
                    cidrs[0].referenced,
                )
            } else {
                (
                    "two podCIDRs and one address: expected `addresses` of both families too",
                    addrs[0].referenced,
                )
            };
            return Err(ctx.at(at, format!("node {name} has {what} (a dual-stack node has an InternalIP and a pod CIDR of each family)")));
        }
        // (A single-stack node's pod CIDR of the other family is `check_addresses`' to refuse.)
        for (a, c) in addrs.iter().zip(&cidrs).filter(|_| addrs.len() == 2) {
            if IpFamily::of(a.value) != IpFamily::of(c.value.addr()) {
                return Err(ctx.err(c, format!("node {name}'s pod CIDR {} is {} where its address {} is {}: give podCIDRs in the order of the node's addresses (primary family first)", c.value, IpFamily::of(c.value.addr()).as_str(), a.value, IpFamily::of(a.value).as_str())));
            }
        }
        let this = (addrs.len() == 2, IpFamily::of(addrs[0].value));
        match first {
            None => first = Some(this),
            Some(f) if f != this => {
                let describe = |(dual, fam): (bool, IpFamily)| {
                    if dual {
                        format!("dual-stack with {} primary", fam.as_str())
                    } else {
                        format!("{}-only", fam.as_str())
                    }
                };
                return Err(ctx.err(&addrs[0], format!("node {name} is {} where the first node is {}: nfsim runs every node of a cluster with the same families (give every node `addresses` and `podCIDRs` of both families in the same order, or every node one of each)", describe(this), describe(f))));
            }
            Some(_) => {}
        }
        d.address = Some(addrs[0].clone());
        d.pod_cidr = Some(cidrs[0].clone());
        if d.addresses.is_none() {
            d.addresses = Some(Spanned::new(addrs, at_ref, at_def));
        }
        if d.pod_cidrs.is_none() {
            d.pod_cidrs = Some(Spanned::new(cidrs, at_ref, at_def));
        }
    }
    Ok(())
}

/// A normalized node's primary address and pod CIDR ([`normalize_nodes`] has set both).
pub(super) fn node_primary(n: &NodeDoc) -> Option<(&S<IpAddr>, &S<k8s::Cidr>)> {
    Some((n.address.as_ref()?, n.pod_cidr.as_ref()?))
}

/// A normalized dual-stack node's second address and pod CIDR.
pub(super) fn node_secondary(n: &NodeDoc) -> Option<(&S<IpAddr>, &S<k8s::Cidr>)> {
    Some((
        n.addresses.as_ref()?.value.get(1)?,
        n.pod_cidrs.as_ref()?.value.get(1)?,
    ))
}

/// The cluster's family as the documents give it: the first node's address's (IPv4 without
/// nodes), as [`crate::scenario::model::Scenario::family`] has it once loaded.
pub(super) fn doc_family(doc: &ScenarioDoc) -> IpFamily {
    doc.nodes
        .first()
        .and_then(|n| node_primary(&n.value))
        .map_or(IpFamily::IPv4, |(a, _)| IpFamily::of(a.value))
}

/// Refuses an address of the other family where the cluster would run it with its own
/// family's rules: a node's address, pod CIDR or extra address, a host's address, a pod's
/// IP, a client's `IP:PORT` target. Such a node would get the wrong family's rules, and a
/// client would send from one family's address to the other's. On a dual-stack cluster
/// both families are the cluster's, but a pod's `ip` is of its node's primary family (the
/// other is allocated).
pub(super) fn check_addresses(ctx: &Ctx, doc: &ScenarioDoc) -> Result<(), ScenarioError> {
    let family = doc_family(doc);
    let (f, o) = (family.as_str(), family.other().as_str());
    if dual_stack(&doc.nodes) {
        return check_dual_pod_ips(ctx, doc, family);
    }
    let wrong = |a: IpAddr| !family.contains(a);
    for n in &doc.nodes {
        let name = &n.value.name.value;
        let Some((address, pod_cidr)) = node_primary(&n.value) else {
            continue;
        };
        if wrong(address.value) {
            return Err(ctx.err(
                address,
                format!(
                    "node {name}'s address {} is {o}: {}; expected an {f} address",
                    address.value,
                    why_addr(family)
                ),
            ));
        }
        if wrong(pod_cidr.value.addr()) {
            return Err(ctx.err(
                pod_cidr,
                format!(
                    "node {name}'s podCIDR {} is {o}: {}; expected an {f} range",
                    pod_cidr.value,
                    why_addr(family)
                ),
            ));
        }
        for x in &n.value.extra_addresses {
            if wrong(x.value.address) {
                return Err(ctx.err(
                    x,
                    format!(
                        "node {name}'s extra address {} is {o}: {}; expected an {f} address",
                        x.value.address,
                        why_addr(family)
                    ),
                ));
            }
        }
    }
    for h in &doc.hosts {
        let ips = std::iter::once(&h.value.address).chain(&h.value.extra_addresses);
        for a in ips {
            if wrong(a.value) {
                return Err(ctx.err(
                    a,
                    format!(
                        "host {}'s address {} is {o}: {}; expected an {f} address",
                        h.value.name.value,
                        a.value,
                        why_addr(family)
                    ),
                ));
            }
        }
    }
    let pods = doc.pods.iter().map(|p| &p.value).chain(
        doc.events
            .iter()
            .filter_map(|e| e.value.create_pod.as_ref()),
    );
    for p in pods {
        if let Some(ip) = p.ip.as_ref().filter(|i| wrong(i.value)) {
            return Err(ctx.err(
                ip,
                format!(
                    "pod {}'s ip {} is {o}: {}; expected an {f} address",
                    p.name.value,
                    ip.value,
                    why_addr(family)
                ),
            ));
        }
    }
    for c in &doc.clients {
        let c = &c.value;
        let targets = [
            c.udp.as_ref().map(|u| &u.value.target),
            c.tcp.as_ref().map(|t| &t.value.target),
            c.ping.as_ref().map(|p| &p.value.target),
        ];
        for t in targets.into_iter().flatten() {
            let other = t
                .value
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|a| wrong(a.ip()))
                || t.value.parse::<IpAddr>().is_ok_and(wrong);
            if other {
                return Err(ctx.err(t, format!("client {}'s target {} is {o}: {}, so it would send from an {f} address to an {o} one; expected an {f} address or a Service port NAMESPACE/NAME[:PORT]", c.name.value, t.value, why_addr(family))));
            }
        }
    }
    Ok(())
}

/// On a dual-stack cluster, a pod's `ip` is of the primary family (`status.podIP`, from the
/// node's first pod CIDR); its address of the second family is allocated.
fn check_dual_pod_ips(ctx: &Ctx, doc: &ScenarioDoc, family: IpFamily) -> Result<(), ScenarioError> {
    let pods = doc.pods.iter().map(|p| &p.value).chain(
        doc.events
            .iter()
            .filter_map(|e| e.value.create_pod.as_ref()),
    );
    for p in pods {
        if let Some(ip) = p.ip.as_ref().filter(|i| !family.contains(i.value)) {
            return Err(ctx.err(
                ip,
                format!(
                    "pod {}'s ip {} is {}: on this dual-stack cluster a pod's `ip` is its {f} address (`status.podIP`, of the primary family, the first of its node's podCIDRs), and its {} address is allocated from its node's second pod CIDR; expected an {f} address",
                    p.name.value,
                    ip.value,
                    family.other().as_str(),
                    family.other().as_str(),
                    f = family.as_str()
                ),
            ));
        }
    }
    Ok(())
}
