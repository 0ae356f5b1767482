//! IP families in a scenario's Kubernetes objects and machines: one family per cluster, the
//! other refused or warned about, never loaded and ignored.
//!
//! A scenario's cluster is single-stack, IPv4 or IPv6: the family of its nodes' addresses
//! ([`crate::scenario::model::Scenario::family`]). Every node runs that family's kube-proxy
//! proxier (`iptables` or `ip6tables`), as a single-stack node's kube-proxy does
//! (`cmd/kube-proxy/app/server.go`: the primary family is the node IP's; a second proxier
//! only when the node has an address of the other family). Upstream kube-proxy runs one
//! proxier per family (`NewDualStackProxier`): for a dual-stack Service the cluster family's
//! proxier writes exactly the rules it would for a single-stack Service of that family. So:
//! - a Service none of whose cluster IPs is of the cluster's family would get no rules at
//!   all: an error, at the Service, since every result about it would be silently wrong;
//! - a dual-stack Service's half of the cluster's family is simulated exactly; its addresses
//!   of the other family (cluster IPs, external IPs, load-balancer ingress IPs) get a warning
//!   at the Service;
//! - an EndpointSlice of the other `addressType` feeds only the other family's proxier: a
//!   warning at the slice (each proxier skips the other family's slices too:
//!   `EndpointSliceCache` keeps slices by address family);
//! - a node, pod, host or client address of the other family is refused at its place (nodes
//!   with both families, dual-stack machines, are not modelled yet).

use super::load::Ctx;
use super::schema::{EventDoc, ScenarioDoc};
use super::warnings::ScenarioWarning;
use super::ScenarioError;
use crate::k8s::{self, IpFamily};
use serde_saphyr::Spanned;
use std::net::IpAddr;

/// Why the other family gets no rules in nfsim, for every message of this module.
fn why(family: IpFamily) -> String {
    format!(
        "the scenario's cluster is {f}-only (its nodes' addresses are {f}), so nfsim runs kube-proxy's {f} proxier only (dual-stack nodes are not modelled yet)",
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
/// family and an EndpointSlice of the other family are warnings, each at its place.
pub(super) fn check(
    ctx: &Ctx,
    family: IpFamily,
    services: &[Spanned<k8s::Service>],
    events: &[Spanned<EventDoc>],
    slices: Option<&[Spanned<k8s::EndpointSlice>]>,
) -> Result<Vec<ScenarioWarning>, ScenarioError> {
    let mut warnings = Vec::new();
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
        "the scenario's cluster is {f}-only (the family of its first node's address): its nodes, pods, hosts and clients run kube-proxy's {f} proxier and {f} addresses only (nodes with both families, dual-stack machines, are not modelled yet)",
        f = family.as_str()
    )
}

/// The cluster's family as the documents give it: the first node's address's (IPv4 without
/// nodes), as [`crate::scenario::model::Scenario::family`] has it once loaded.
pub(super) fn doc_family(doc: &ScenarioDoc) -> IpFamily {
    doc.nodes
        .first()
        .map_or(IpFamily::IPv4, |n| IpFamily::of(n.value.address.value))
}

/// Refuses an address of the other family where the cluster would run it with its own
/// family's rules: a node's address, pod CIDR or extra address, a host's address, a pod's
/// IP, a client's `IP:PORT` target. Such a node would get the wrong family's rules, and a
/// client would send from one family's address to the other's.
pub(super) fn check_addresses(ctx: &Ctx, doc: &ScenarioDoc) -> Result<(), ScenarioError> {
    let family = doc_family(doc);
    let (f, o) = (family.as_str(), family.other().as_str());
    let wrong = |a: IpAddr| !family.contains(a);
    for n in &doc.nodes {
        let name = &n.value.name.value;
        if wrong(n.value.address.value) {
            return Err(ctx.err(
                &n.value.address,
                format!(
                    "node {name}'s address {} is {o}: {}; expected an {f} address",
                    n.value.address.value,
                    why_addr(family)
                ),
            ));
        }
        if wrong(n.value.pod_cidr.value.addr()) {
            return Err(ctx.err(
                &n.value.pod_cidr,
                format!(
                    "node {name}'s podCIDR {} is {o}: {}; expected an {f} range",
                    n.value.pod_cidr.value,
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
