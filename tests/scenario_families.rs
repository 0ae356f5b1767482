//! IPv6 in Kubernetes objects is refused or warned about at its place, never loaded and
//! ignored (failed before: an IPv6-only Service loaded without a word and got no rules, its
//! traffic passing untranslated). A cluster is single-stack (its nodes' family) and runs
//! that family's proxier; a dual-stack Service's half in that family is simulated exactly.

use nfsim::cluster::sim::{RunOptions, Simulation};
use nfsim::scenario::load_str;
use nfsim::testkit::Node;
use sim_core::SimTime;

const GOOD: &str = include_str!("fixtures/scenario/minimal.yaml");

fn with(from: &str, to: &str) -> String {
    assert!(GOOD.contains(from), "{from}");
    GOOD.replace(from, to)
}

fn nat_rules(text: &str) -> String {
    let sc = load_str("t.yaml", text).unwrap_or_else(|e| panic!("{e}"));
    let mut sim = Simulation::new(sc, RunOptions::default()).unwrap();
    sim.run_until(SimTime::from_secs(1)).unwrap();
    sim.rules(0)
}

#[test]
fn an_ipv6_only_service_is_refused_at_the_service() {
    let text = with(
        "      clusterIP: 10.96.0.10\n",
        "      clusterIP: fd00:10:96::10\n      ipFamilies: [IPv6]\n",
    )
    // The client cannot target it either way; keep the error about the Service.
    .replace("clients:\n  - name: c\n    node: n1\n    udp: {target: default/dns:dns, interval: 10s}\nexpectations:\n  - client: {name: c, sent: 6}\n", "");
    let e = load_str("t.yaml", &text).unwrap_err();
    assert_eq!((e.line, e.column), (15, 5), "{e}");
    assert!(
        e.message
            .starts_with("Service default/dns is IPv6-only (fd00:10:96::10): the scenario's cluster is IPv4-only (its nodes' addresses are IPv4), so nfsim runs kube-proxy's IPv4 proxier only"),
        "{e}"
    );
    // Also when an event creates it.
    let text = format!(
        "{GOOD}events:\n  - at: 10s\n    createService:\n      metadata: {{name: v6, namespace: default}}\n      spec:\n        clusterIP: fd00:10:96::20\n        selector: {{app: dns}}\n        ports: [{{port: 53, protocol: UDP}}]\n"
    );
    let e = load_str("t.yaml", &text).unwrap_err();
    assert!(e.message.contains("Service default/v6 is IPv6-only"), "{e}");
    assert_eq!(e.line, 29, "{e}");
}

#[test]
fn a_dual_stack_service_warns_and_its_ipv4_half_is_exact() {
    let dual = with(
        "      clusterIP: 10.96.0.10\n",
        "      clusterIP: 10.96.0.10\n      clusterIPs: [10.96.0.10, \"fd00:10:96::10\"]\n      ipFamilies: [IPv4, IPv6]\n      ipFamilyPolicy: PreferDualStack\n      externalIPs: [\"2001:db8::7\"]\n",
    );
    let sc = load_str("t.yaml", &dual).unwrap();
    let w: Vec<String> = sc.warnings.iter().map(|w| w.to_string()).collect();
    assert_eq!(w.len(), 1, "{w:?}");
    assert!(
        w[0].starts_with("t.yaml:15:5: warning: Service default/dns: its IPv6 addresses (fd00:10:96::10, 2001:db8::7) get no rules"),
        "{w:?}"
    );
    // The IPv4 proxier writes for the dual-stack Service exactly what it writes for the
    // IPv4-only one.
    assert_eq!(nat_rules(&dual), nat_rules(GOOD));
    assert!(load_str("t.yaml", GOOD).unwrap().warnings.is_empty());
}

#[test]
fn an_ipv6_endpoint_slice_is_warned_about() {
    let text = format!(
        "{GOOD}endpointSlices:\n  - metadata: {{name: dns-v4, namespace: default, labels: {{kubernetes.io/service-name: dns}}}}\n    addressType: IPv4\n    endpoints: [{{addresses: [10.244.1.5], conditions: {{ready: true}}}}]\n    ports: [{{name: dns, port: 53, protocol: UDP}}]\n  - metadata: {{name: dns-v6, namespace: default, labels: {{kubernetes.io/service-name: dns}}}}\n    addressType: IPv6\n    endpoints: [{{addresses: [\"fd00:10:244:1::5\"], conditions: {{ready: true}}}}]\n    ports: [{{name: dns, port: 53, protocol: UDP}}]\n"
    );
    let sc = load_str("t.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    let w: Vec<String> = sc.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        w.iter().any(|w| w.starts_with("t.yaml:31:5: warning: EndpointSlice default/dns-v6 (addressType IPv6) feeds only kube-proxy's IPv6 proxier")),
        "{w:?}"
    );
}

#[test]
fn the_testkit_refuses_an_ipv6_only_service() {
    let e = Node::from_objects(
        "kind: Service\nmetadata: {name: v6, namespace: default}\nspec:\n  clusterIP: fd00:10:96::20\n  ports: [{port: 53, protocol: UDP}]\n",
    )
    .err()
    .expect("an IPv6-only Service is refused");
    assert!(
        e.to_string().contains("Service default/v6 is IPv6-only"),
        "{e}"
    );
}

/// `trace` refuses an IPv6 packet and `replay` skips IPv6 packets with a warning naming the
/// first (failed before: traced through the IPv4 rules' node and "dropped: no route to
/// host", as if that were the node's answer).
#[test]
fn trace_refuses_and_replay_skips_ipv6_packets() {
    let nfsim = |args: &[&str]| {
        let o = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
            .args(args)
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output()
            .unwrap();
        (
            o.status.code(),
            String::from_utf8(o.stdout).unwrap(),
            String::from_utf8(o.stderr).unwrap(),
        )
    };
    let rules = "tests/fixtures/cli/kube-proxy.rules";
    let (code, _, err) = nfsim(&[
        "trace",
        "--rules",
        rules,
        "--packet",
        "udp [fd00::9]:40000 -> [fd00::10]:53",
    ]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("the node was given no IPv6 rules"), "{err}");

    let cap = std::env::temp_dir().join(format!("nfsim-v6-{}.pcap", std::process::id()));
    let mut w =
        sim_core::pcap::PcapWriter::new(Vec::new(), sim_core::pcap::WriteLink::RawIp).unwrap();
    for (ms, p) in [
        (0, "udp 10.244.2.9:40000 -> 10.96.0.10:53"),
        (1, "udp [fd00::9]:40000 -> [fd00::10]:53"),
        (2, "udp [fd00::9]:40001 -> [fd00::10]:53"),
    ] {
        let p: sim_core::Packet = p.parse().unwrap();
        w.write_packet(SimTime::from_millis(ms), &p).unwrap();
    }
    std::fs::write(&cap, w.into_inner()).unwrap();
    let (code, out, err) = nfsim(&[
        "replay",
        "--rules",
        rules,
        "--pod-cidr",
        "10.244.0.0/16",
        cap.to_str().unwrap(),
    ]);
    let _ = std::fs::remove_file(&cap);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        out.contains("warning: 2 IPv6 packets not replayed (first: frame 2)"),
        "{out}"
    );
    assert!(
        out.contains("  IPv6           2 (not modelled, skipped)\n"),
        "{out}"
    );
    assert!(!out.contains("fd00::9"), "no IPv6 packet line: {out}");
}

/// IPv6 entries of a `--conntrack` listing load (they age and count against the table's
/// limit, as on the node) with a warning naming the first line: IPv6 packets are not
/// modelled (failed before: loaded without a word).
#[test]
fn ipv6_entries_of_a_saved_listing_are_warned_about() {
    let ct = std::env::temp_dir().join(format!("nfsim-ct6-{}.txt", std::process::id()));
    std::fs::write(
        &ct,
        "udp      17 25 src=10.244.2.9 dst=10.96.0.10 sport=40000 dport=53 src=10.244.1.8 dst=10.244.2.9 sport=53 dport=40000 mark=0 use=1\n\
         udp      17 25 src=fd00::9 dst=fd00::10 sport=40000 dport=53 src=fd00::8 dst=fd00::9 sport=53 dport=40000 mark=0 use=1\n",
    )
    .unwrap();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args([
            "trace",
            "--rules",
            "tests/fixtures/cli/kube-proxy.rules",
            "--conntrack",
            ct.to_str().unwrap(),
            "--packet",
            "udp 10.244.2.9:40000 -> 10.96.0.10:53",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .unwrap();
    let _ = std::fs::remove_file(&ct);
    let err = String::from_utf8(o.stderr).unwrap();
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains(": line 2: 1 IPv6 entries loaded: they only age"),
        "{err}"
    );
}

/// The dual-stack minimal scenario with the Service's address and families as `spec`
/// (instead of `clusterIP: 10.96.0.10`) and `cidrs` as the scenario's service ranges.
fn dual(cidrs: &str, spec: &str) -> String {
    with("      clusterIP: 10.96.0.10\n", spec).replacen(
        "duration: 1m\n",
        &format!("duration: 1m\n{cidrs}"),
        1,
    )
}

const BOTH: &str = "serviceCIDRs: [10.96.0.0/12, \"fd00:10:96::/112\"]\n";

fn spec_of(sc: &nfsim::scenario::Scenario) -> nfsim::k8s::ServiceSpec {
    sc.services[0].spec.clone()
}

/// On a dual-stack cluster (`serviceCIDRs` of both families) a PreferDualStack Service
/// without addresses gets one of each, primary family first, from the upper bands
/// (kube-apiserver's `initIPFamilyFields` and allocator); its IPv6 half is then warned
/// about, as a dual-stack Service's IPv6 addresses are, and its IPv4 half simulated.
#[test]
fn a_prefer_dual_stack_service_gets_an_address_of_each_family() {
    use nfsim::k8s::{ClusterIp, IpFamily, IpFamilyPolicy};
    let text = dual(BOTH, "      ipFamilyPolicy: PreferDualStack\n");
    let sc = load_str("t.yaml", &text).unwrap_or_else(|e| panic!("{e}"));
    let spec = spec_of(&sc);
    assert_eq!(spec.ip_families, vec![IpFamily::IPv4, IpFamily::IPv6]);
    assert_eq!(spec.ip_family_policy, Some(IpFamilyPolicy::PreferDualStack));
    let ips: Vec<std::net::IpAddr> = spec.cluster_ips.iter().filter_map(|c| c.ip()).collect();
    assert_eq!(ips.len(), 2, "{spec:?}");
    assert_eq!(spec.cluster_ip, Some(ClusterIp::Ip(ips[0])));
    let v4: nfsim::k8s::Cidr = "10.96.0.0/12".parse().unwrap();
    let v6: nfsim::k8s::Cidr = "fd00:10:96::/112".parse().unwrap();
    assert!(v4.contains(ips[0]) && v6.contains(ips[1]), "{ips:?}");
    // The upper band of a /112: above the first 256 addresses.
    let std::net::IpAddr::V6(a) = ips[1] else {
        panic!()
    };
    assert!(u128::from(a) & 0xffff > 256, "{a}");
    let w: Vec<String> = sc.warnings.iter().map(|w| w.to_string()).collect();
    assert!(
        w.iter()
            .any(|w| w.contains("Service default/dns: its IPv6 addresses")
                && w.contains(&ips[1].to_string())),
        "{w:?}"
    );
    // Deterministic: the same file and seed, the same addresses.
    assert_eq!(spec_of(&load_str("t.yaml", &text).unwrap()), spec);
    // SingleStack (the default) on the same cluster: only the primary family.
    let single = load_str("t.yaml", &dual(BOTH, "")).unwrap();
    assert!(spec_of(&single).cluster_ips.is_empty());
    assert!(spec_of(&single).cluster_ip.unwrap().ip().unwrap().is_ipv4());
    assert!(single.warnings.is_empty(), "{:?}", single.warnings);
}

/// The apiserver's refusals, at the Service: RequireDualStack on a single-stack cluster, a
/// family the cluster has no range for; and the scenario's own: two ranges of one family,
/// `serviceCIDR` and `serviceCIDRs` both.
#[test]
fn dual_stack_requests_a_cluster_cannot_meet_are_located_errors() {
    let e = load_str(
        "t.yaml",
        &dual("", "      ipFamilyPolicy: RequireDualStack\n"),
    )
    .unwrap_err();
    assert_eq!((e.line, e.column), (15, 5), "{e}");
    assert!(
        e.message.contains("spec.ipFamilyPolicy: Invalid value: \"RequireDualStack\": this cluster is not configured for dual-stack services"),
        "{e}"
    );
    let e = load_str("t.yaml", &dual("", "      ipFamilies: [IPv6]\n")).unwrap_err();
    assert!(
        e.message.contains(
            "spec.ipFamilies[0]: Invalid value: \"IPv6\": not configured on this cluster"
        ),
        "{e}"
    );
    let e = load_str(
        "t.yaml",
        &dual("serviceCIDRs: [10.96.0.0/12, 10.100.0.0/16]\n", ""),
    )
    .unwrap_err();
    assert_eq!(e.line, 3, "{e}");
    assert!(
        e.message
            .contains("serviceCIDRs[1] 10.100.0.0/16 is of the same family"),
        "{e}"
    );
    let e = load_str(
        "t.yaml",
        &dual(&format!("serviceCIDR: 10.96.0.0/12\n{BOTH}"), ""),
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("both serviceCIDR (10.96.0.0/12) and serviceCIDRs"),
        "{e}"
    );
    // An explicit IPv6 address outside the given IPv6 range.
    let e = load_str(
        "t.yaml",
        &dual(
            BOTH,
            "      clusterIP: 10.96.0.10\n      clusterIPs: [10.96.0.10, \"fd00:99::10\"]\n      ipFamilyPolicy: PreferDualStack\n",
        ),
    )
    .unwrap_err();
    assert!(
        e.message
            .contains("cluster IP fd00:99::10 is not in the serviceCIDR fd00:10:96::/112"),
        "{e}"
    );
}

/// An IPv6-primary request on a dual-stack cluster: `ipFamilies: [IPv6]` alone is an
/// IPv6-only Service (refused until IPv6 is simulated end to end); `[IPv6, IPv4]` with
/// RequireDualStack is dual-stack with `clusterIP` the IPv6 address, its IPv4 half simulated.
#[test]
fn ipv6_primary_requests_follow_ip_families_order() {
    let e = load_str("t.yaml", &dual(BOTH, "      ipFamilies: [IPv6]\n")).unwrap_err();
    assert!(e.message.contains("is IPv6-only"), "{e}");
    assert!(
        e.message
            .contains("target Service default/dns is IPv6-only (fd00:10:96::"),
        "{e}"
    );
    let sc = load_str(
        "t.yaml",
        &dual(
            BOTH,
            "      ipFamilies: [IPv6, IPv4]\n      ipFamilyPolicy: RequireDualStack\n",
        ),
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let spec = spec_of(&sc);
    assert!(spec.cluster_ip.unwrap().ip().unwrap().is_ipv6(), "{spec:?}");
    assert!(sc.services[0].ipv4_cluster_ip().is_some());
}

/// IPv6 addresses of the cluster's own machines and IPv6 client targets are refused at
/// their place (failed before: a node at an IPv6 address got IPv4 rules and its packets
/// passed untranslated; a client sent from its IPv4 address to an IPv6 target).
#[test]
fn ipv6_machine_addresses_and_targets_are_refused_at_their_place() {
    // The cluster is single-stack, of its first node's family: on an IPv4 cluster an IPv6
    // pod CIDR, pod address or client target is refused at its place; a node given an IPv6
    // address makes the cluster IPv6, and its IPv4 pod CIDR is then the one refused.
    for (from, to, at, words, cluster) in [
        (
            "    address: 192.168.0.1\n",
            "    address: \"fd00:1::1\"\n",
            (6, 14),
            "node n1's podCIDR 10.244.1.0/24 is IPv4",
            "the scenario's cluster is IPv6-only",
        ),
        (
            "    podCIDR: 10.244.1.0/24\n",
            "    podCIDR: \"fd00:10:244:1::/64\"\n",
            (6, 14),
            "node n1's podCIDR fd00:10:244:1::/64 is IPv6",
            "the scenario's cluster is IPv4-only",
        ),
        (
            "    ip: 10.244.1.5\n",
            "    ip: \"fd00:10:244:1::5\"\n",
            (10, 9),
            "pod dns's ip fd00:10:244:1::5 is IPv6",
            "the scenario's cluster is IPv4-only",
        ),
        (
            "udp: {target: default/dns:dns, interval: 10s}",
            "udp: {target: \"[fd00:10:96::10]:53\", interval: 10s}",
            (23, 19),
            "client c's target [fd00:10:96::10]:53 is IPv6",
            "the scenario's cluster is IPv4-only",
        ),
    ] {
        let e = load_str("t.yaml", &with(from, to)).unwrap_err();
        assert_eq!((e.line, e.column), at, "{e}");
        assert!(e.message.starts_with(words), "{e}");
        assert!(e.message.contains(cluster), "{e}");
    }
}
