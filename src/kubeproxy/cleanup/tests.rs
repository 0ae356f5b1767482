use super::*;
use crate::kubeproxy::model::{EndpointInfo, ProxyState, ServicePortInfo};

const CIP: &str = "10.96.0.10";
const A: &str = "10.244.1.7";
const B: &str = "10.244.2.8";
const CLIENT: &str = "10.244.2.9";

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn dns_port(proto: Protocol) -> ServicePortInfo {
    let name = if proto == Protocol::UDP {
        "dns"
    } else {
        "dns-tcp"
    };
    ServicePortInfo {
        name: ServicePortName::new("kube-system", "kube-dns", name, proto),
        cluster_ip: ip(CIP),
        port: 53,
        protocol: proto,
        node_port: None,
        load_balancer_vips: vec![],
        sticky_max_age_seconds: None,
        external_ips: vec![],
        load_balancer_source_ranges: vec![],
        health_check_node_port: None,
        external_policy_local: false,
        internal_policy_local: false,
        hints_annotation: None,
    }
}

fn ep(addr: &str, port: u16, serving: bool) -> EndpointInfo {
    EndpointInfo {
        ip: ip(addr),
        port,
        is_local: false,
        ready: serving,
        serving,
        terminating: false,
        hints: Default::default(),
    }
}

/// kube-dns with a UDP and a TCP port, both backed by `eps`.
fn dns_state(eps: Vec<EndpointInfo>) -> ProxyState {
    let mut st = ProxyState::default();
    for proto in [Protocol::UDP, Protocol::TCP] {
        let p = dns_port(proto);
        if !eps.is_empty() {
            st.endpoints.insert(p.name.clone(), eps.clone());
        }
        st.services.insert(p.name.clone(), p);
    }
    st
}

/// A DNATed UDP flow from CLIENT:sport to svc:port, answered by ep:epport.
fn flow(svc: &str, port: u16, sport: u16, ep: &str, epport: u16) -> CtEntry {
    CtEntry {
        proto: IPPROTO_UDP,
        orig: CtTuple {
            src: ip(CLIENT),
            dst: ip(svc),
            sport,
            dport: port,
        },
        reply: CtTuple {
            src: ip(ep),
            dst: ip(CLIENT),
            sport: epport,
            dport: sport,
        },
    }
}

fn run(
    c: &mut dyn ConntrackCleanup,
    before: &ProxyState,
    after: &ProxyState,
    ct: &mut MemConntrack,
) -> CleanupReport {
    c.after_sync(SimTime::ZERO, &CleanupInput { before, after }, ct)
}

fn all() -> Vec<Box<dyn ConntrackCleanup>> {
    vec![
        Box::new(NoCleanup),
        Box::new(V131 { serving_fix: false }),
        Box::new(V131 { serving_fix: true }),
        Box::new(V132::default()),
        Box::new(V133::default()),
        Box::new(Latest::default()),
    ]
}

/// The 2025-09-04 incident: the CoreDNS pod behind a fixed-port client's entry is OOM-killed
/// and restarts in place: its endpoint stays with the same IP but stops being ready/serving.
#[test]
fn oom_killed_pod_restarting_in_place() {
    let before = dns_state(vec![ep(A, 53, true), ep(B, 53, true)]);
    let after = dns_state(vec![ep(A, 53, false), ep(B, 53, true)]);
    let stuck = flow(CIP, 53, 40123, A, 53);
    let healthy = flow(CIP, 53, 40999, B, 53);
    let expect = [
        ("none", false),
        ("v1.31-nofix", false),
        ("v1.31", true),
        ("v1.32", true),
        ("v1.34", true),
        ("latest", true),
    ];
    for (mut c, (name, deleted)) in all().into_iter().zip(expect) {
        assert_eq!(c.name(), name);
        let mut ct = MemConntrack {
            entries: vec![stuck, healthy],
        };
        let r = run(c.as_mut(), &before, &after, &mut ct);
        assert_eq!(!ct.entries.contains(&stuck), deleted, "{name}: {r:?}");
        assert!(
            ct.entries.contains(&healthy),
            "{name} must keep the flow to the live pod"
        );
        assert_eq!(r.deleted(), usize::from(deleted), "{name}");
    }
    // The v1.31 filter is kube-proxy's ClearEntriesForNAT(clusterIP, endpointIP).
    let mut ct = MemConntrack {
        entries: vec![stuck],
    };
    let r = run(&mut V131 { serving_fix: true }, &before, &after, &mut ct);
    assert_eq!(
        r.deletions[0].filter.to_string(),
        "-p udp --orig-dst 10.96.0.10 --reply-src 10.244.1.7"
    );
}

/// The pod is deleted and recreated elsewhere: its endpoint disappears. Every release but
/// "none" cleans this one.
#[test]
fn endpoint_disappears() {
    let before = dns_state(vec![ep(A, 53, true), ep(B, 53, true)]);
    let after = dns_state(vec![ep(B, 53, true), ep("10.244.3.3", 53, true)]);
    for mut c in all() {
        let mut ct = MemConntrack {
            entries: vec![flow(CIP, 53, 40123, A, 53)],
        };
        run(c.as_mut(), &before, &after, &mut ct);
        assert_eq!(ct.entries.is_empty(), c.name() != "none", "{}", c.name());
    }
}

/// v1.32 matched service IPs only: every UDP flow to the service IP on a port the Service does
/// not have (not DNATed, so its reply source is the service IP itself) is deleted, at every
/// sync that runs the reconciler. v1.33 checks the port (#130484).
#[test]
fn v132_deletes_unrelated_ports_of_a_service_ip() {
    let before = dns_state(vec![ep(A, 53, true), ep(B, 53, true)]);
    let after = dns_state(vec![ep(A, 53, false), ep(B, 53, true)]);
    let unrelated = flow(CIP, 9999, 41000, CIP, 9999);
    for (mut c, kept) in [
        (
            Box::new(V132::default()) as Box<dyn ConntrackCleanup>,
            false,
        ),
        (Box::new(V133::default()), true),
        (Box::new(Latest::default()), true),
    ] {
        let mut ct = MemConntrack {
            entries: vec![unrelated],
        };
        let r = run(c.as_mut(), &before, &after, &mut ct);
        assert_eq!(ct.entries.contains(&unrelated), kept, "{}: {r:?}", c.name());
    }
    // At the next sync with a UDP endpoint change, the re-created flow goes again.
    let later = dns_state(vec![ep(A, 53, true), ep(B, 53, true)]);
    let mut ct = MemConntrack {
        entries: vec![unrelated],
    };
    let r = run(&mut V132::default(), &after, &later, &mut ct);
    assert_eq!(r.deleted(), 1);
    assert_eq!(
        r.deletions[0].filter.to_string(),
        "-p udp --orig-dst 10.96.0.10 --reply-src 10.96.0.10"
    );
}

/// #139629: a one-way UDP sender (statsd-like, `[UNREPLIED]`, refreshed by every packet) to a
/// Service scaled to zero. v1.33 skips Services without serving endpoints, so the flow stays
/// DNATed to the deleted pod for as long as the sender keeps sending.
#[test]
fn scale_to_zero_with_a_one_way_flow() {
    let before = dns_state(vec![ep(A, 53, true)]);
    let after = dns_state(vec![]);
    let one_way = flow(CIP, 53, 8125, A, 53);
    let expect = [
        ("none", true),
        ("v1.31-nofix", false),
        ("v1.31", false),
        ("v1.32", false),
        ("v1.33", true),
        ("latest", false),
    ];
    for (mut c, (name, kept)) in all().into_iter().zip(expect) {
        let mut ct = MemConntrack {
            entries: vec![one_way],
        };
        let r = run(c.as_mut(), &before, &after, &mut ct);
        assert_eq!(ct.entries.contains(&one_way), kept, "{name}: {r:?}");
    }
}

/// #130542: the endpoint keeps its IP but its port changes (a targetPort change).
#[test]
fn target_port_change() {
    let before = dns_state(vec![ep(A, 53, true)]);
    let after = dns_state(vec![ep(A, 5353, true)]);
    let old = flow(CIP, 53, 40123, A, 53);
    for (mut c, kept) in [
        (
            Box::new(V131 { serving_fix: true }) as Box<dyn ConntrackCleanup>,
            false,
        ),
        (Box::new(V132::default()), true),
        (
            Box::new(V133 {
                reply_port: false,
                ..V133::default()
            }),
            true,
        ),
        (Box::new(V133::default()), false),
        (Box::new(Latest::default()), false),
    ] {
        let mut ct = MemConntrack { entries: vec![old] };
        run(c.as_mut(), &before, &after, &mut ct);
        assert_eq!(ct.entries.contains(&old), kept, "{}", c.name());
    }
}

/// #141371: the UDP Service itself is deleted.
#[test]
fn deleted_udp_service() {
    let before = dns_state(vec![ep(A, 53, true)]);
    let after = ProxyState::default();
    let f = flow(CIP, 53, 8125, A, 53);
    for (mut c, kept) in [
        (
            Box::new(V131 { serving_fix: true }) as Box<dyn ConntrackCleanup>,
            false,
        ),
        (Box::new(V132::default()), true),
        (Box::new(V133::default()), true),
        (Box::new(Latest::default()), false),
    ] {
        let mut ct = MemConntrack { entries: vec![f] };
        run(c.as_mut(), &before, &after, &mut ct);
        assert_eq!(ct.entries.contains(&f), kept, "{}", c.name());
    }
}

/// A UDP port going from no serving endpoint to some: v1.31 flushes every entry to its IPs
/// and node port (entries created while traffic was not DNATed).
#[test]
fn newly_active_service_flushes_its_ips_and_node_port() {
    let mut before = dns_state(vec![]);
    let mut after = dns_state(vec![ep(A, 53, true)]);
    for st in [&mut before, &mut after] {
        for p in st.services.values_mut() {
            p.node_port = Some(30053);
        }
    }
    let blackhole = flow(CIP, 53, 40123, CIP, 53);
    let via_node_port = flow("192.168.0.2", 30053, 40124, "192.168.0.2", 30053);
    let mut ct = MemConntrack {
        entries: vec![blackhole, via_node_port],
    };
    let r = run(&mut V131 { serving_fix: true }, &before, &after, &mut ct);
    assert!(ct.entries.is_empty(), "{r:?}");
    let filters: Vec<String> = r.deletions.iter().map(|d| d.filter.to_string()).collect();
    assert_eq!(
        filters,
        [
            "-p udp --orig-dst 10.96.0.10",
            "-p udp --orig-port-dst 30053"
        ]
    );
}

/// The reconcilers only run when a Service with a UDP port had endpoint changes, unless told
/// to run after every sync.
#[test]
fn reconcilers_run_only_on_udp_endpoint_changes() {
    let st = dns_state(vec![ep(A, 53, false)]);
    let stuck = flow(CIP, 53, 40123, A, 53);
    let mut ct = MemConntrack {
        entries: vec![stuck],
    };
    let r = run(&mut V132::default(), &st, &st, &mut ct);
    assert!(!r.ran && ct.entries.len() == 1);
    let r = run(
        &mut V132 {
            trigger: ReconcileTrigger::EverySync,
        },
        &st,
        &st,
        &mut ct,
    );
    assert!(r.ran && ct.entries.is_empty());

    // A TCP-only Service changing does not trigger them.
    let mut before = ProxyState::default();
    let tcp = dns_port(Protocol::TCP);
    before.services.insert(tcp.name.clone(), tcp.clone());
    before
        .endpoints
        .insert(tcp.name.clone(), vec![ep(A, 53, true)]);
    let mut after = before.clone();
    after
        .endpoints
        .insert(tcp.name.clone(), vec![ep(B, 53, true)]);
    assert!(!CleanupInput {
        before: &before,
        after: &after
    }
    .udp_endpoints_changed());
    // kube-dns: its TCP port's endpoints change, and it has a UDP port too.
    let before = dns_state(vec![ep(A, 53, true)]);
    let mut after = before.clone();
    after
        .endpoints
        .insert(dns_port(Protocol::TCP).name, vec![ep(B, 53, true)]);
    assert!(CleanupInput {
        before: &before,
        after: &after
    }
    .udp_endpoints_changed());
}

#[test]
fn filters_match_every_field_set() {
    let e = flow(CIP, 53, 40123, A, 53);
    assert!(CtFilter::exact(&e).matches(&e));
    assert!(CtFilter::udp().matches(&e));
    let tcp = CtFilter {
        proto: Some(6),
        ..CtFilter::default()
    };
    assert!(!tcp.matches(&e));
    let other = CtFilter {
        reply_sport: Some(54),
        ..CtFilter::udp()
    };
    assert!(!other.matches(&e));
}

/// A deleted CoreDNS pod in graceful termination (ready false, still serving): v1.28 compares
/// readiness and deletes the client's entry at once; v1.29+ (with #127780) compares serving
/// and keeps it until the pod stops serving, then deletes it.
#[test]
fn v1_28_deletes_a_terminating_pods_entries_when_it_turns_not_ready() {
    let before = dns_state(vec![ep(A, 53, true), ep(B, 53, true)]);
    let terminating = EndpointInfo {
        ready: false,
        serving: true,
        terminating: true,
        ..ep(A, 53, true)
    };
    let during = dns_state(vec![terminating.clone(), ep(B, 53, true)]);
    let stopped = dns_state(vec![
        EndpointInfo {
            serving: false,
            ..terminating
        },
        ep(B, 53, true),
    ]);
    let stuck = flow(CIP, 53, 40000, A, 53);
    for (mut c, at_not_ready) in [
        (Box::new(V128) as Box<dyn ConntrackCleanup>, true),
        (Box::new(V131 { serving_fix: true }), false),
    ] {
        let mut ct = MemConntrack {
            entries: vec![stuck],
        };
        run(c.as_mut(), &before, &during, &mut ct);
        assert_eq!(ct.entries.is_empty(), at_not_ready, "{}", c.name());
        ct.entries = vec![stuck];
        run(c.as_mut(), &during, &stopped, &mut ct);
        assert_eq!(ct.entries.is_empty(), !at_not_ready, "{}", c.name());
    }
}

/// v1.37 (#139629 without #141371) leaves a deleted UDP service's entries; latest deletes them.
#[test]
fn v1_37_leaves_a_deleted_services_entries_latest_cleans_them() {
    let before = dns_state(vec![ep(A, 53, true)]);
    let after = ProxyState::default();
    let stuck = flow(CIP, 53, 40000, A, 53);
    for (deleted_services, gone) in [(false, false), (true, true)] {
        let mut c = Latest {
            deleted_services,
            ..Latest::default()
        };
        let mut ct = MemConntrack {
            entries: vec![stuck],
        };
        run(&mut c, &before, &after, &mut ct);
        assert_eq!(ct.entries.is_empty(), gone, "{}", c.name());
    }
}
