//! IPv6 in a scenario's Kubernetes objects: refused or warned about, never loaded and ignored.
//!
//! nfsim models kube-proxy's IPv4 proxier only (the `iptables` / `ip kube-proxy` half of a
//! node; IPv6 and dual-stack are issue #23). Upstream kube-proxy runs one proxier per family
//! (`pkg/proxy/iptables`, `NewDualStackProxier`): for a dual-stack Service the IPv4 proxier
//! writes exactly the rules it would for an IPv4-only Service, and the IPv6 proxier writes
//! ip6tables rules nfsim does not simulate. So:
//! - a Service whose addresses are all IPv6 would get no rules at all here: an error, at the
//!   Service, since every result about it would be silently wrong;
//! - a dual-stack Service's IPv4 half is simulated exactly; its IPv6 addresses (cluster IPs,
//!   external IPs, load-balancer ingress IPs) get a warning at the Service;
//! - an EndpointSlice of `addressType: IPv6` feeds only the IPv6 proxier: a warning at the
//!   slice (kube-proxy's IPv4 proxier skips it too: `EndpointSliceCache` keeps slices by
//!   address family).

use super::load::Ctx;
use super::schema::{EventDoc, ScenarioDoc};
use super::warnings::ScenarioWarning;
use super::ScenarioError;
use crate::k8s::{self, AddressType};
use serde_saphyr::Spanned;
use std::net::IpAddr;

/// Why IPv6 gets no rules in nfsim, for every message of this module.
const WHY: &str = "nfsim simulates kube-proxy's IPv4 proxier only (iptables and nftables `ip` family; IPv6 and dual-stack are not modelled yet)";

/// The IPv6 addresses kube-proxy's IPv6 proxier would write rules for: cluster IPs, external
/// IPs and load-balancer ingress IPs.
fn ipv6_addresses(s: &k8s::Service) -> Vec<IpAddr> {
    let spec = &s.spec;
    let mut v: Vec<IpAddr> = spec
        .cluster_ip
        .iter()
        .chain(spec.cluster_ips.iter())
        .filter_map(|c| c.ip())
        .chain(spec.external_ips.iter().copied())
        .chain(s.status.load_balancer.ingress.iter().filter_map(|i| i.ip))
        .filter(IpAddr::is_ipv6)
        .collect();
    v.dedup();
    v
}

/// Checks every Service (at the start and in `createService` / `updateService` events) and
/// every EndpointSlice of the scenario: an IPv6-only Service is an error, a dual-stack
/// Service's IPv6 addresses and an IPv6 EndpointSlice are warnings, each at its place.
pub(super) fn check(
    ctx: &Ctx,
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
        let v6 = ipv6_addresses(&s.value);
        if v6.is_empty() {
            continue;
        }
        let list = v6
            .iter()
            .map(IpAddr::to_string)
            .collect::<Vec<_>>()
            .join(", ");
        if s.value.ipv4_cluster_ip().is_none()
            && s.value.spec.cluster_ip.is_some_and(|c| c.ip().is_some())
        {
            return Err(ctx.err(
                s,
                format!(
                    "Service {} is IPv6-only ({list}): {WHY}, so it would get no rules and its traffic would pass untranslated; expected an IPv4 cluster IP (a dual-stack Service's IPv4 half is simulated)",
                    s.value.key()
                ),
            ));
        }
        warnings.push(warning(
            ctx,
            s,
            format!(
                "Service {}: its IPv6 addresses ({list}) get no rules: {WHY}; its IPv4 half is simulated as kube-proxy's IPv4 proxier writes it",
                s.value.key()
            ),
        ));
    }
    for s in slices.unwrap_or_default() {
        if s.value.address_type == AddressType::IPv6 {
            warnings.push(warning(
                ctx,
                s,
                format!(
                    "EndpointSlice {} (addressType IPv6) feeds only kube-proxy's IPv6 proxier: {WHY}; it is loaded and takes no part",
                    s.value.key()
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

/// Why IPv6 addresses of the cluster's own machines are refused.
const WHY_ADDR: &str = "nfsim's cluster is IPv4: its nodes, pods, hosts and clients run kube-proxy's IPv4 proxier and iptables only (IPv6 and dual-stack machines are issue #23)";

/// Refuses an IPv6 address where the cluster would run it with IPv4 rules: a node's address,
/// pod CIDR or extra address, a host's address, a pod's IP, a client's `IP:PORT` target.
/// Before this check such a node got kube-proxy's IPv4 rules and its IPv6 packets passed
/// untranslated, and an IPv4 client sent to an IPv6 target from an IPv4 source.
pub(super) fn check_addresses(ctx: &Ctx, doc: &ScenarioDoc) -> Result<(), ScenarioError> {
    for n in &doc.nodes {
        let name = &n.value.name.value;
        if n.value.address.value.is_ipv6() {
            return Err(ctx.err(
                &n.value.address,
                format!(
                    "node {name}'s address {} is IPv6: {WHY_ADDR}; expected an IPv4 address",
                    n.value.address.value
                ),
            ));
        }
        if n.value.pod_cidr.value.addr().is_ipv6() {
            return Err(ctx.err(
                &n.value.pod_cidr,
                format!(
                    "node {name}'s podCIDR {} is IPv6: {WHY_ADDR}; expected an IPv4 range",
                    n.value.pod_cidr.value
                ),
            ));
        }
        for x in &n.value.extra_addresses {
            if x.value.address.is_ipv6() {
                return Err(ctx.err(x, format!("node {name}'s extra address {} is IPv6: {WHY_ADDR}; expected an IPv4 address", x.value.address)));
            }
        }
    }
    for h in &doc.hosts {
        let ips = std::iter::once(&h.value.address).chain(&h.value.extra_addresses);
        for a in ips {
            if a.value.is_ipv6() {
                return Err(ctx.err(
                    a,
                    format!(
                        "host {}'s address {} is IPv6: {WHY_ADDR}; expected an IPv4 address",
                        h.value.name.value, a.value
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
        if let Some(ip) = p.ip.as_ref().filter(|i| i.value.is_ipv6()) {
            return Err(ctx.err(
                ip,
                format!(
                    "pod {}'s ip {} is IPv6: {WHY_ADDR}; expected an IPv4 address",
                    p.name.value, ip.value
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
            let v6 = t
                .value
                .parse::<std::net::SocketAddr>()
                .is_ok_and(|a| a.is_ipv6())
                || t.value.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6());
            if v6 {
                return Err(ctx.err(t, format!("client {}'s target {} is IPv6: {WHY_ADDR}, so it would send from an IPv4 address to an IPv6 one; expected an IPv4 address or a Service port NAMESPACE/NAME[:PORT]", c.name.value, t.value)));
            }
        }
    }
    Ok(())
}
