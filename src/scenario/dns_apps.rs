//! The DNS words of a scenario, checked into the model: a server's `zone:`
//! (`apps[].udpServer.zone`), the `resolver:` client, and the run's [`DnsData`] built from
//! both (every name a resolver may ask and every name a zone holds, interned once).
//!
//! docs/scenario-reference.md documents the fields, docs/resolver.md the behaviour.

use super::load::{Ctx, ScenarioError};
use super::model::{ClientKind, ClientSchedule, ResolverDef};
use super::schema::{EventDoc, ResolverClientDoc, ZoneDoc, S};
use super::warnings::ScenarioWarning;
use crate::dns::zone::{counted_a, counted_aaaa};
use crate::dns::{candidates, DnsData, DnsNames, Libc, NameId, ResolvConf, Zone, ZoneEntry};
use crate::k8s;
use serde_saphyr::Location;
use std::collections::BTreeMap;
use std::path::Path;

/// musl's version when the scenario gives none: 1.2.5, the latest release (with the TCP
/// fallback of 1.2.4).
pub const MUSL_DEFAULT_VERSION: &str = "1.2.5";

/// The most records of one type a zone name may have: more would not fit a TCP answer's
/// 65535 octets (16 + 12 octets each for AAAA).
pub const MAX_ZONE_RECORDS: u16 = 2000;

/// One zone as written, until the run's names are known.
#[derive(Clone, Debug)]
pub(super) struct ZoneSpec {
    /// The Services' names (CoreDNS's `kubernetes` plugin).
    services: bool,
    /// Each name with its `A` and `AAAA` counts, and where it was written.
    names: Vec<(String, u16, u16, Location)>,
}

impl ZoneSpec {
    /// The zone of the `coredns` preset: the Services' names only.
    pub(super) fn services_only() -> ZoneSpec {
        ZoneSpec {
            services: true,
            names: Vec::new(),
        }
    }
}

/// Checks `zone:` of a server.
pub(super) fn zone_spec(ctx: &Ctx, z: &S<ZoneDoc>) -> Result<ZoneSpec, ScenarioError> {
    let mut names = Vec::new();
    for (name, d) in &z.value.names {
        let n =
            crate::dns::wire::normalize(name).map_err(|e| ctx.err(d, format!("zone name {e}")))?;
        if n.is_empty() {
            return Err(ctx.err(d, "zone name \".\": expected a name below the root"));
        }
        let count = |c: &Option<S<u16>>| -> Result<u16, ScenarioError> {
            match c {
                Some(c) if c.value > MAX_ZONE_RECORDS => Err(ctx.err(
                    c,
                    format!(
                        "{} records: at most {MAX_ZONE_RECORDS} (MAX_ZONE_RECORDS), more would not fit one TCP answer",
                        c.value
                    ),
                )),
                Some(c) => Ok(c.value),
                None => Ok(0),
            }
        };
        names.push((n, count(&d.value.a)?, count(&d.value.aaaa)?, d.referenced));
    }
    Ok(ZoneSpec {
        services: z.value.services.unwrap_or(true),
        names,
    })
}

/// `resolver:` of a client: its kind, its schedule (a loop: the next lookup `sleep` after the
/// previous one ended) and its first nameserver's port 53.
pub(super) fn resolver_kind(
    ctx: &Ctx,
    d: &ResolverClientDoc,
    end: sim_core::SimTime,
) -> Result<(ClientKind, ClientSchedule, std::net::SocketAddr), ScenarioError> {
    let libc = match d.libc.value.as_str() {
        "glibc" => {
            if let Some(v) = &d.version {
                return Err(ctx.err(
                    v,
                    "version is musl's (which releases retry over TCP); glibc's resolver is 2.36's",
                ));
            }
            Libc::Glibc
        }
        "musl" => {
            let v = d
                .version
                .as_ref()
                .map_or(MUSL_DEFAULT_VERSION, |v| v.value.as_str());
            let parts: Vec<Option<u32>> = v.split('.').map(|p| p.parse().ok()).collect();
            let (Some(Some(major)), Some(Some(minor)), patch) =
                (parts.first(), parts.get(1), parts.get(2).copied().flatten())
            else {
                let at = d.version.as_ref().map_or(&d.libc, |v| v);
                return Err(ctx.err(
                    at,
                    format!("musl version {v:?}: expected MAJOR.MINOR.PATCH (1.2.4)"),
                ));
            };
            let v = (*major, *minor, patch.unwrap_or(0));
            Libc::Musl {
                tcp_fallback: v >= (1, 2, 4),
            }
        }
        other => return Err(ctx.err(&d.libc, format!("libc {other:?}: expected glibc or musl"))),
    };
    let (text, place) = match (&d.resolv_conf, &d.resolv_conf_file) {
        (Some(t), None) => (t.value.clone(), ("resolvConf", t.referenced)),
        (None, Some(f)) => {
            let base = Path::new(ctx.file()).parent().unwrap_or(Path::new(""));
            let path = base.join(&f.value);
            let text = std::fs::read_to_string(&path).map_err(|e| {
                ctx.err(f, format!("cannot read {}: {e}", path.display()))
            })?;
            (text, ("resolvConfFile", f.referenced))
        }
        (Some(t), Some(_)) => {
            return Err(ctx.err(
                t,
                "a resolver has one resolv.conf: `resolvConf` (the text) or `resolvConfFile` (a file), not both",
            ))
        }
        (None, None) => {
            return Err(ctx.err(
                &d.libc,
                "a resolver needs its resolv.conf: `resolvConf` (the text) or `resolvConfFile` (a file)",
            ))
        }
    };
    let conf = ResolvConf::parse(&text, libc).map_err(|e| {
        let what = match place.0 {
            "resolvConfFile" => d.resolv_conf_file.as_ref().map_or("", |f| f.value.as_str()),
            _ => "resolvConf",
        };
        ctx.at(
            place.1,
            format!("{what} line {}, column {}: {}", e.line, e.column, e.message),
        )
    })?;
    if conf.nameservers.iter().any(|n| !n.is_ipv4()) {
        return Err(ctx.at(
            place.1,
            "an IPv6 nameserver: nfsim's clients reach servers over IPv4 only; expected IPv4 nameserver lines",
        ));
    }
    if d.names.value.is_empty() {
        return Err(ctx.err(&d.names, "names: expected at least one name to look up"));
    }
    let mut names = Vec::new();
    for n in &d.names.value {
        for c in candidates(&n.value, &conf, libc) {
            crate::dns::wire::normalize(&c)
                .map_err(|e| ctx.err(n, format!("name {:?}: {e}", n.value)))?;
        }
        if n.value.trim_end_matches('.').is_empty() {
            return Err(ctx.err(n, "name \".\": expected a host name"));
        }
        names.push(n.value.clone());
    }
    if d.sleep.value.is_zero() {
        return Err(ctx.err(&d.sleep, "sleep 0s: expected a positive duration"));
    }
    let schedule = ClientSchedule {
        start: sim_core::SimTime::ZERO + d.start.map_or(sim_core::SimDuration::ZERO, |s| s.get()),
        stop: d
            .stop
            .map(|s| sim_core::SimTime::ZERO + s.get())
            .unwrap_or(end)
            .min(end),
        interval: d.sleep.value.get(),
        jitter: sim_core::SimDuration::ZERO,
        count: d.count,
    };
    let target = std::net::SocketAddr::new(conf.nameservers[0], 53);
    Ok((
        ClientKind::Resolver(Box::new(ResolverDef { libc, conf, names })),
        schedule,
        target,
    ))
}

/// The Services a `zone.services` zone leaves out, each warned about at its place when a
/// `resolver:` client could ask for it: a Service without an IPv4 cluster IP (headless,
/// `ExternalName`, IPv6-only: CoreDNS's `kubernetes` plugin answers those with the
/// endpoints' addresses, a CNAME or AAAA records, which nfsim's zone does not model) and a
/// Service created by an event (the zone is made at the start). A lookup of such a name
/// gets NXDOMAIN here where CoreDNS would answer, so it must not pass in silence.
pub(super) fn zone_warnings(
    ctx: &Ctx,
    zones: &[ZoneSpec],
    services: &[S<k8s::Service>],
    events: &[S<EventDoc>],
    clients: &[super::model::ClientDef],
) -> Vec<ScenarioWarning> {
    let resolvers = clients
        .iter()
        .any(|c| matches!(c.kind, ClientKind::Resolver(_)));
    if !resolvers || !zones.iter().any(|z| z.services) {
        return Vec::new();
    }
    let warn = |line: u64, column: u64, message: String| ScenarioWarning {
        file: ctx.file().to_string(),
        line,
        column,
        message,
    };
    let name = |s: &k8s::Service| {
        format!(
            "{}.{}.svc.cluster.local",
            s.metadata.name, s.metadata.namespace
        )
    };
    let mut out = Vec::new();
    for s in services {
        if s.value.ipv4_cluster_ip().is_none() {
            out.push(warn(
                s.referenced.line(),
                s.referenced.column(),
                format!(
                    "Service {} has no IPv4 cluster IP (headless, ExternalName or IPv6-only), so the DNS servers' zones (`zone.services`) have no name for it: a resolver's lookup of {} gets NXDOMAIN here, where CoreDNS would answer with its endpoints' addresses, a CNAME or AAAA records (not modelled)",
                    s.value.key(),
                    name(&s.value)
                ),
            ));
        }
    }
    for e in events {
        if let Some(s) = &e.value.create_service {
            out.push(warn(
                s.referenced.line(),
                s.referenced.column(),
                format!(
                    "Service {} is created by an event, and the DNS servers' zones (`zone.services`) are made at the start: a resolver's lookup of {} gets NXDOMAIN for the whole run, where CoreDNS would answer once it sees the Service",
                    s.value.key(),
                    name(&s.value)
                ),
            ));
        }
    }
    out
}

/// The run's DNS: every name its resolvers may ask (in client order, each lookup's names in
/// the order asked), then every zone name; and each zone with its records. Two zones that
/// give one name different records are refused (a capture writes one answer per name).
pub(super) fn build(
    ctx: &Ctx,
    zones: &[ZoneSpec],
    services: &[k8s::Service],
    clients: &[super::model::ClientDef],
) -> Result<DnsData, ScenarioError> {
    let mut names = DnsNames::new();
    let full = |e| ctx.at_line(0, 0, format!("{e}"));
    for c in clients {
        if let ClientKind::Resolver(r) = &c.kind {
            for n in &r.names {
                for cand in candidates(n, &r.conf, r.libc) {
                    names.intern(&cand).map_err(full)?;
                }
            }
        }
    }
    let mut seen: BTreeMap<NameId, (u16, u16)> = BTreeMap::new();
    let mut out = Vec::new();
    for z in zones {
        let mut zone = Zone::new();
        let mut entries: Vec<(NameId, u16, u16, Option<Location>)> = Vec::new();
        if z.services {
            for s in services {
                let Some(ip) = s.ipv4_cluster_ip() else {
                    continue;
                };
                let name = format!(
                    "{}.{}.svc.cluster.local",
                    s.metadata.name, s.metadata.namespace
                );
                let id = names.intern(&name).map_err(full)?;
                zone.insert(
                    id,
                    ZoneEntry {
                        a: vec![ip],
                        aaaa: Vec::new(),
                    },
                );
            }
        }
        for (n, a, aaaa, loc) in &z.names {
            let id = names.intern(n).map_err(full)?;
            entries.push((id, *a, *aaaa, Some(*loc)));
        }
        for (id, a, aaaa, loc) in entries {
            if let Some(prev) = seen.insert(id, (a, aaaa)) {
                if prev != (a, aaaa) {
                    return Err(ctx.at(
                        loc.unwrap_or(Location::UNKNOWN),
                        format!(
                            "zone name {}: {a} A and {aaaa} AAAA records here, {} and {} in an earlier zone: every server of a run gives a name the same records",
                            names.name(id),
                            prev.0,
                            prev.1
                        ),
                    ));
                }
            }
            zone.insert(
                id,
                ZoneEntry {
                    a: (0..u32::from(a)).map(counted_a).collect(),
                    aaaa: (0..u32::from(aaaa)).map(counted_aaaa).collect(),
                },
            );
        }
        out.push(zone);
    }
    Ok(DnsData { names, zones: out })
}
