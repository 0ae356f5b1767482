//! Nodes and hosts: names, addresses, pod CIDRs, sysctls, saved state, their own rules.

use super::*;

/// The most CPUs a node may have (`cpus`).
pub const MAX_NODE_CPUS: u32 = 256;

/// The sysctl whose default depends on the kernel release (docs/kernel-model.md §22).
const UDP_TIMEOUT_STREAM: &str = "net.netfilter.nf_conntrack_udp_timeout_stream";

/// The node's `kernel.version`, else the scenario's, else the release the model follows;
/// refused with its place when nfsim does not model it.
pub(super) fn node_kernel(
    ctx: &Ctx,
    doc: &ScenarioDoc,
    d: &super::schema::NodeDoc,
) -> Result<sim_conntrack::KernelVersion, ScenarioError> {
    let Some(k) = d.kernel.as_ref().or(doc.kernel.as_ref()) else {
        return Ok(sim_conntrack::KernelVersion::MODEL);
    };
    let v = &k.value.version;
    v.value
        .0
        .parse::<sim_conntrack::KernelVersion>()
        .map_err(|e| ctx.err(v, format!("kernel.version: {e}")))
}

/// Where a node's kernel version was written (its own, else the scenario's), for errors
/// about what that release lacks.
pub(super) fn kernel_version_place(
    doc: &ScenarioDoc,
    d: &super::schema::NodeDoc,
) -> Option<Location> {
    d.kernel
        .as_ref()
        .or(doc.kernel.as_ref())
        .map(|k| k.value.version.referenced)
}

/// `nodes[].state`: reads the files (relative to the scenario file's directory) and checks
/// them as the node would take them: the rules restore into an empty namespace, the listing
/// parses. Errors name the scenario's line and the file's.
fn node_state(
    ctx: &Ctx,
    st: &Spanned<super::schema::NodeStateDoc>,
    warnings: &mut Vec<ScenarioWarning>,
) -> Result<NodeState, ScenarioError> {
    let d = &st.value;
    if d.rules.is_none() && d.rules6.is_none() && d.conntrack.is_none() && d.sysctls.is_none() {
        return Err(ctx.err(
            st,
            "state: expected `rules` (an iptables-save file), `rules6` (an ip6tables-save file), `conntrack` (a conntrack -L file), `sysctls` (a sysctl -a file), or several",
        ));
    }
    let base = std::path::Path::new(ctx.file)
        .parent()
        .unwrap_or(std::path::Path::new(""));
    let read = |f: &Spanned<String>| -> Result<(String, String), ScenarioError> {
        let path = base.join(&f.value);
        let shown = path.display().to_string();
        let text = sim_core::input::read_text_limited(
            &path,
            sim_core::input::MAX_RULES_BYTES,
            "MAX_RULES_BYTES",
        )
        .map_err(|e| ctx.err(f, format!("cannot read {shown}: {e}")))?;
        Ok((shown, text))
    };
    let mut out = NodeState::default();
    if let Some(f) = &d.rules {
        let (path, text) = read(f)?;
        let mut ns =
            sim_netfilter::netns::Netns::new(sim_netfilter::netns::NetnsConfig::new("check", 1));
        if let Err(e) = ns.restore_with_counters(&text, false) {
            let why = match e {
                sim_netfilter::netns::NetnsError::Restore(error) => {
                    crate::rules_error::text(&path, &error, true)
                }
                other => format!("{path}: {other}"),
            };
            return Err(ctx.err(f, format!("state.rules: {why}")));
        }
        out.rules = Some((path, text));
    }
    if let Some(f) = &d.rules6 {
        let (path, text) = read(f)?;
        let mut ns =
            sim_netfilter::netns::Netns::new(sim_netfilter::netns::NetnsConfig::new("check", 1));
        if let Err(e) = ns.restore_family(sim_netfilter::Family::Ipv6, &text, false, true) {
            let why = match e {
                sim_netfilter::netns::NetnsError::Restore(error) => {
                    crate::rules_error::text(&path, &error, true)
                }
                other => format!("{path}: {other}"),
            };
            return Err(ctx.err(f, format!("state.rules6: {why}")));
        }
        // The cluster's machines are IPv4 (IPv6 addresses are refused), so no packet of the
        // run meets these tables; say so rather than let them look as if they act.
        warnings.push(ScenarioWarning {
            file: ctx.file().to_string(),
            line: f.referenced.line(),
            column: f.referenced.column(),
            message: format!(
                "state.rules6: {path}: loaded into the node's ip6tables (`nfsim rules -6` prints them), but the scenario's machines are IPv4, so no packet of the run meets them (IPv6 clusters are issue #23)"
            ),
        });
        out.rules6 = Some((path, text));
    }
    if let Some(f) = &d.conntrack {
        let (path, text) = read(f)?;
        let entries = sim_conntrack::parse_listing(&text)
            .map_err(|e| ctx.err(f, format!("state.conntrack: {path}: {e}")))?;
        out.conntrack = Some((path, entries));
    }
    if let Some(f) = &d.sysctls {
        let (path, text) = read(f)?;
        let file = sim_netfilter::sysctl_file::read_sysctl_file(&text)
            .map_err(|e| ctx.err(f, format!("state.sysctls: {path}: {e}")))?;
        for w in file.warning_lines() {
            warnings.push(ScenarioWarning {
                file: ctx.file().to_string(),
                line: f.referenced.line(),
                column: f.referenced.column(),
                message: format!("state.sysctls: {path}: {w}"),
            });
        }
        for (name, value) in file.apply {
            // Every modelled sysctl takes an integer, checked by read_sysctl_file.
            let v = value.parse::<u64>().map_err(|_| {
                ctx.err(
                    f,
                    format!("state.sysctls: {path}: {name} = {value}: expected an integer"),
                )
            })?;
            out.sysctls.insert(name, v);
        }
    }
    Ok(out)
}

/// Checks conntrack sysctls (full `net.netfilter.nf_conntrack_*` names) and the ICMP rate
/// limit's ([`ICMP_SYSCTLS`]) as the kernel would take them: known names, values in range.
pub(super) fn check_sysctls(
    ctx: &Ctx,
    src: &BTreeMap<String, Spanned<u64>>,
    into: &mut BTreeMap<String, u64>,
    at: Location,
    warnings: &mut Vec<ScenarioWarning>,
) -> Result<(), ScenarioError> {
    for (k, v) in src {
        // The key has no span of its own; point at its value, or at the mapping.
        let loc = if v.referenced.line() > 0 {
            v.referenced
        } else {
            at
        };
        if k == sim_netfilter::netns::BRIDGE_NF_CALL_IPTABLES {
            // br_netfilter's switch (Netns::set_sysctl); the kernel stores any non-zero
            // value as 1, a scenario says 0 or 1.
            if v.value > 1 {
                return Err(ctx.at(
                    loc,
                    format!("sysctl {k}: {} is out of range: expected 0 or 1", v.value),
                ));
            }
            into.insert(k.clone(), v.value);
            continue;
        }
        if sim_netfilter::ipvs::IPVS_SYSCTLS.contains(&k.as_str()) {
            // IPVS's (net.ipv4.vs.*, Netns::set_sysctl), checked as proc_dointvec takes them.
            sim_netfilter::ipvs::Ipvs::default()
                .set_sysctl(k, &v.value.to_string())
                .map_err(|e| ctx.at(loc, e.to_string()))?;
            into.insert(k.clone(), v.value);
            continue;
        }
        if ICMP_SYSCTLS.contains(&k.as_str()) {
            // The node kernel's ICMP error rate limit (Netns::set_sysctl).
            if v.value > i32::MAX as u64 {
                return Err(ctx.at(
                    loc,
                    format!(
                        "sysctl {k}: {} is out of range: expected an integer from 0 to 2147483647",
                        v.value
                    ),
                ));
            }
            into.insert(k.clone(), v.value);
            continue;
        }
        let warn = |warnings: &mut Vec<ScenarioWarning>, message: String| {
            warnings.push(ScenarioWarning {
                file: ctx.file().to_string(),
                line: loc.line(),
                column: loc.column(),
                message: format!("sysctl {k}: {message}"),
            })
        };
        let Some(short) = k
            .strip_prefix(SYSCTL_PREFIX)
            .filter(|s| sim_conntrack::Sysctls::names().any(|n| n == *s))
        else {
            // A netfilter sysctl of the kernel that nfsim does not model: a warning with why
            // (a real node's values are taken whole); an impossible value is still refused.
            if sim_netfilter::sysctl_file::is_kernel_sysctl(k) {
                match sim_netfilter::sysctl_file::unmodelled(k, &v.value.to_string()) {
                    Err(m) => return Err(ctx.at(loc, m)),
                    Ok(Some(m)) => warn(warnings, m),
                    Ok(None) => {}
                }
                continue;
            }
            let last = k.rsplit('.').next().unwrap_or(k);
            // Suggest the known name sharing the longest prefix of its last segment.
            let common = |n: &str| {
                n.bytes()
                    .zip(last.bytes())
                    .take_while(|(a, b)| a == b)
                    .count()
            };
            let hint = sim_conntrack::Sysctls::names()
                .max_by_key(|n| (common(n), std::cmp::Reverse(n.len())))
                .filter(|n| common(n) >= 12)
                .map(|n| format!(" (did you mean {SYSCTL_PREFIX}{n}?)"))
                .unwrap_or_default();
            return Err(ctx.at(
                loc,
                format!(
                    "unknown sysctl {k:?}{hint}: expected a conntrack sysctl such as net.netfilter.nf_conntrack_udp_timeout, or net.ipv4.icmp_ratelimit / icmp_ratemask"
                ),
            ));
        };
        sim_conntrack::Sysctls::default()
            .set(short, &v.value.to_string())
            .map_err(|e| ctx.at(loc, e.to_string()))?;
        if let Ok(Some(m)) = sim_netfilter::sysctl_file::unmodelled(k, &v.value.to_string()) {
            warn(warnings, m);
        }
        into.insert(k.clone(), v.value);
    }
    Ok(())
}

/// A pod IP must lie in its node's pod CIDR and be neither the CIDR's network address nor
/// its first address, which the node holds on its pod veths (the pods' gateway).
/// A node's or host's address must be one a machine can hold on the node network:
/// not unspecified, broadcast, loopback, multicast or link-local-free nonsense.
pub(super) fn check_node_address(
    ctx: &Ctx,
    a: &Spanned<IpAddr>,
    what: &str,
) -> Result<(), ScenarioError> {
    let ip = a.value;
    let bad = match ip {
        IpAddr::V4(v) if v.is_unspecified() => Some("the unspecified address"),
        IpAddr::V4(v) if v.is_broadcast() => Some("the limited broadcast address"),
        IpAddr::V4(v) if v.is_loopback() => {
            Some("a loopback address (127.0.0.0/8 stays inside each machine)")
        }
        IpAddr::V4(v) if v.is_multicast() => Some("a multicast address"),
        IpAddr::V6(v) if v.is_unspecified() => Some("the unspecified address"),
        IpAddr::V6(v) if v.is_loopback() => Some("the loopback address"),
        IpAddr::V6(v) if v.is_multicast() => Some("a multicast address"),
        _ => None,
    };
    match bad {
        Some(why) => Err(ctx.err(
            a,
            format!("{what} address {ip} is {why}: expected a unicast address on the node network"),
        )),
        None => Ok(()),
    }
}

/// The CIDR as written must have no host bits set: the kernel refuses a route to it
/// (`fib_table_insert`: "Invalid prefix for given prefix length").
pub(super) fn check_cidr_text(ctx: &Ctx, c: &Spanned<k8s::Cidr>) -> Result<(), ScenarioError> {
    let loc = c.referenced;
    let Some(line) = (loc.line() as usize)
        .checked_sub(1)
        .and_then(|i| ctx.lines.get(i))
    else {
        return Ok(());
    };
    let rest: String = line
        .chars()
        .skip((loc.column() as usize).saturating_sub(1))
        .collect();
    let rest = rest.trim_start().trim_start_matches(['"', '\'']);
    let raw: String = rest
        .chars()
        .take_while(|ch| ch.is_ascii_hexdigit() || matches!(ch, '.' | ':' | '/'))
        .collect();
    let Some((a, _)) = raw.split_once('/') else {
        return Ok(());
    };
    if let Ok(addr) = a.parse::<IpAddr>() {
        if addr != c.value.addr() {
            return Err(ctx.err(
                c,
                format!(
                    "pod CIDR {raw} has host bits set: expected {} (the network address of the prefix)",
                    c.value
                ),
            ));
        }
    }
    Ok(())
}

/// The checked nodes, their index by name, and the addresses they took (with the node
/// or host that holds each).
pub(super) struct Nodes {
    pub(super) nodes: Vec<NodeDef>,
    pub(super) node_index: BTreeMap<String, usize>,
    pub(super) addrs: BTreeMap<IpAddr, String>,
}

/// Checks `nodes` (on top of the scenario's `sysctls`) and the nodes' own rules
/// (`iptablesRestore`).
pub(super) fn check_nodes(
    ctx: &Ctx,
    doc: &ScenarioDoc,
    sysctls: &BTreeMap<String, u64>,
    sysctl_warnings: &mut Vec<ScenarioWarning>,
) -> Result<Nodes, ScenarioError> {
    // Nodes.
    if doc.nodes.is_empty() {
        return Err(ctx.err(
            &doc.name,
            "no nodes: a scenario needs at least one entry under `nodes`",
        ));
    }
    let mut nodes = Vec::new();
    let mut node_index = BTreeMap::new();
    let mut addrs: BTreeMap<IpAddr, String> = BTreeMap::new();
    for n in &doc.nodes {
        let d = &n.value;
        names::check_dns1123_subdomain("node name", &d.name.value)
            .map_err(|m| ctx.err(&d.name, m))?;
        if node_index
            .insert(d.name.value.clone(), nodes.len())
            .is_some()
        {
            return Err(ctx.err(
                &d.name,
                format!(
                    "duplicate node name {:?}: node names must be unique",
                    d.name.value
                ),
            ));
        }
        // (`families::normalize_nodes` gave every node its primary address and pod CIDR.)
        let Some((address, pod_cidr)) = super::super::families::node_primary(d) else {
            return Err(ctx.err(n, format!("node {} has no address", d.name.value)));
        };
        let secondary = super::super::families::node_secondary(d);
        for (a, c) in std::iter::once((address, pod_cidr)).chain(secondary) {
            check_node_address(ctx, a, "node")?;
            check_cidr_text(ctx, c)?;
            if let Some(prev) = addrs.insert(a.value, format!("node {}", d.name.value)) {
                return Err(ctx.err(a, format!("address {} is already used by {prev}", a.value)));
            }
        }
        let state = match &d.state {
            Some(st) => node_state(ctx, st, sysctl_warnings)?,
            None => NodeState::default(),
        };
        // The scenario's sysctls, then the node's saved ones (`state.sysctls`), then the
        // node's own `sysctls`.
        let mut s = sysctls.clone();
        s.extend(state.sysctls.clone());
        check_sysctls(ctx, &d.sysctls, &mut s, d.name.referenced, sysctl_warnings)?;
        let kernel = node_kernel(ctx, doc, d)?;
        // A default that changed between releases, where nothing set it (sysctl files
        // included): the release's own.
        let stream = kernel.udp_timeout_stream_secs();
        if stream != sim_conntrack::KernelVersion::MODEL.udp_timeout_stream_secs() {
            s.entry(UDP_TIMEOUT_STREAM.to_string()).or_insert(stream);
        }
        let cpus = match &d.cpus {
            None => 1,
            Some(c) if (1..=MAX_NODE_CPUS).contains(&c.value) => c.value,
            Some(c) => {
                return Err(ctx.err(
                    c,
                    format!(
                        "cpus: {}: expected 1 to {MAX_NODE_CPUS} (MAX_NODE_CPUS)",
                        c.value
                    ),
                ))
            }
        };
        let mut extra_addresses = Vec::new();
        for a in &d.extra_addresses {
            let x = &a.value;
            let dev = x.interface.clone().unwrap_or_else(|| "eth0".into());
            // An address on an interface of its own is the node's alone (several nodes may
            // hold the same one); on eth0 it is on the node network and must be unique.
            let dup = if dev == "eth0" {
                addrs.insert(x.address, format!("node {}", d.name.value))
            } else {
                addrs.get(&x.address).cloned()
            };
            if let Some(prev) = dup {
                return Err(ctx.err(
                    a,
                    format!("address {} is already used by {prev}", x.address),
                ));
            }
            let len = match x.len {
                Some(l) => l,
                None if dev == "eth0" => 0, // the node network's length, set below
                None if x.address.is_ipv4() => 32,
                None => 128,
            };
            extra_addresses.push((dev, x.address, len));
        }
        // A saved ruleset naming an interface this node lacks (a bridge CNI's cni0 where the
        // pods here have veths of their own) never matches it: say so, rule by rule.
        if let (Some((path, text)), Some(f)) = (
            &state.rules,
            d.state.as_ref().and_then(|st| st.value.rules.as_ref()),
        ) {
            let mut have = vec!["lo".to_string(), "eth0".to_string()];
            for (dev, ..) in &extra_addresses {
                if !have.contains(dev) {
                    have.push(dev.clone());
                }
            }
            // The pods' interfaces: one `veth…` per pod (their names are nfsim's own).
            have.push("veth+".into());
            let node = format!("node {}", d.name.value);
            for w in sim_netfilter::rule_ifnames::rule_interface_warnings(text, path, &have, &node)
            {
                sysctl_warnings.push(ScenarioWarning {
                    file: ctx.file().to_string(),
                    line: f.referenced.line(),
                    column: f.referenced.column(),
                    message: format!("state.rules: {w}"),
                });
            }
        }
        nodes.push(NodeDef {
            name: d.name.value.clone(),
            address: address.value,
            pod_cidr: pod_cidr.value,
            secondary: secondary.map(|(a, c)| SecondaryFamily {
                address: a.value,
                pod_cidr: c.value,
            }),
            sysctls: s,
            apps: app_defs(ctx, &d.apps)?,
            extra_addresses,
            extra_rules: Vec::new(),
            state,
            labels: super::topology::node_labels(ctx, d)?,
            allocatable_cpu_milli: super::topology::node_cpu_milli(d),
            kernel,
            cpus,
        });
    }
    for (i, n) in doc.nodes.iter().enumerate() {
        let fams = super::super::families::node_primary(&n.value)
            .into_iter()
            .chain(super::super::families::node_secondary(&n.value));
        for (address, pod_cidr) in fams {
            if let Some((m, c)) = nodes.iter().find_map(|m| {
                m.families()
                    .into_iter()
                    .filter_map(|f| m.pod_cidr_of(f))
                    .find(|c| c.contains(address.value))
                    .map(|c| (m, c))
            }) {
                return Err(ctx.err(
                    address,
                    format!(
                        "node address {} is inside node {}'s pod CIDR {c}: node addresses are on the node network, outside every pod CIDR",
                        address.value, m.name
                    ),
                ));
            }
            for (j, m) in nodes.iter().enumerate() {
                let Some(c) = m.pod_cidr_of(k8s::IpFamily::of(pod_cidr.value.addr())) else {
                    continue;
                };
                if i != j
                    && (c.contains(pod_cidr.value.addr()) || pod_cidr.value.contains(c.addr()))
                {
                    return Err(ctx.err(
                        pod_cidr,
                        format!(
                            "pod CIDR {} overlaps node {}'s {c}: pod CIDRs must be disjoint",
                            pod_cidr.value, m.name
                        ),
                    ));
                }
            }
        }
    }

    // The nodes' own rules.
    for r in &doc.iptables_restore {
        let noflush = r.value.noflush.unwrap_or(true);
        super::events::check_restore_text(ctx, &r.value.rules, noflush)?;
        let targets: Vec<usize> = match &r.value.node {
            None => (0..nodes.len()).collect(),
            Some(n) => vec![*node_index.get(&n.value).ok_or_else(|| {
                ctx.err(
                    n,
                    format!(
                        "unknown node {:?}: expected one of {}",
                        n.value,
                        node_index.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                )
            })?],
        };
        for t in targets {
            nodes[t]
                .extra_rules
                .push((r.value.rules.value.clone(), noflush));
        }
    }
    Ok(Nodes {
        nodes,
        node_index,
        addrs,
    })
}

/// Checks `hosts`: names unique, addresses outside every pod CIDR and not yet taken.
pub(super) fn check_hosts(
    ctx: &Ctx,
    doc: &ScenarioDoc,
    nodes: &[NodeDef],
    addrs: &mut BTreeMap<IpAddr, String>,
) -> Result<(Vec<HostDef>, BTreeMap<String, usize>), ScenarioError> {
    // Hosts.
    let mut hosts = Vec::new();
    let mut host_index = BTreeMap::new();
    for h in &doc.hosts {
        let d = &h.value;
        names::check_display_name("host name", &d.name.value, names::DISPLAY_NAME_MAX, false)
            .map_err(|m| ctx.err(&d.name, m))?;
        if host_index
            .insert(d.name.value.clone(), hosts.len())
            .is_some()
        {
            return Err(ctx.err(&d.name, format!("duplicate host name {:?}", d.name.value)));
        }
        check_node_address(ctx, &d.address, "host")?;
        if let Some(n) = nodes.iter().find(|n| n.pod_cidrs_contain(d.address.value)) {
            return Err(ctx.err(&d.address, format!("host address {} is inside node {}'s pod CIDR {}: a host sits outside the cluster", d.address.value, n.name, n.pod_cidr)));
        }
        if let Some(prev) = addrs.insert(d.address.value, format!("host {}", d.name.value)) {
            return Err(ctx.err(
                &d.address,
                format!("address {} is already used by {prev}", d.address.value),
            ));
        }
        for a in &d.extra_addresses {
            if let Some(prev) = addrs.insert(a.value, format!("host {}", d.name.value)) {
                return Err(ctx.err(a, format!("address {} is already used by {prev}", a.value)));
            }
        }
        hosts.push(HostDef {
            name: d.name.value.clone(),
            address: d.address.value,
            extra_addresses: d.extra_addresses.iter().map(|a| a.value).collect(),
            apps: app_defs(ctx, &d.apps)?,
        });
    }
    Ok((hosts, host_index))
}
