use super::*;
use crate::k8s::Protocol;
use crate::kubeproxy::model::ServicePortInfo;

fn cfg() -> ProxierConfig {
    ProxierConfig::new(
        "node-a",
        "192.168.0.2".parse().unwrap(),
        "10.244.0.0/16".parse().unwrap(),
    )
}

fn svc_port(
    ns: &str,
    name: &str,
    port_name: &str,
    proto: Protocol,
    cip: &str,
    port: u16,
) -> ServicePortInfo {
    ServicePortInfo {
        name: ServicePortName::new(ns, name, port_name, proto),
        cluster_ip: cip.parse().unwrap(),
        port,
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

fn ep(ip: &str, port: u16) -> EndpointInfo {
    EndpointInfo {
        ip: ip.parse().unwrap(),
        port,
        is_local: false,
        ready: true,
        serving: true,
        terminating: false,
        hints: Default::default(),
    }
}

fn state_with(svc: ServicePortInfo, eps: Vec<EndpointInfo>) -> ProxyState {
    let mut st = ProxyState::default();
    if !eps.is_empty() {
        st.endpoints.insert(svc.name.clone(), eps);
    }
    st.services.insert(svc.name.clone(), svc);
    st
}

fn full() -> SyncScope<'static> {
    SyncScope {
        full: true,
        changed: None,
        existing_nat_chains: None,
    }
}

#[test]
fn probabilities_use_ten_decimals() {
    assert_eq!(probability(2), "0.5000000000");
    assert_eq!(probability(3), "0.3333333333");
    assert_eq!(probability(6), "0.1666666667");
    assert_eq!(probability(1000), "0.0010000000");
}

#[test]
fn mark_is_formatted_like_go() {
    assert_eq!(cfg().masquerade_mark(), "0x00004000");
    let mut c = cfg();
    c.masquerade_bit = 0;
    assert_eq!(c.masquerade_mark(), "0x00000001");
}

#[test]
fn three_endpoints_split_one_third_one_half_rest() {
    let s = svc_port(
        "kube-system",
        "kube-dns",
        "dns",
        Protocol::UDP,
        "10.96.0.10",
        53,
    );
    let st = state_with(
        s,
        vec![
            ep("10.244.1.7", 53),
            ep("10.244.2.8", 53),
            ep("10.244.1.10", 53),
        ],
    );
    // Endpoints sorted as strings: 10.244.1.10, 10.244.1.7, 10.244.2.8.
    let mut sorted = st.endpoints.values().next().unwrap().clone();
    sorted.sort_by_key(|e| e.endpoint_string());
    let mut st = st;
    *st.endpoints.values_mut().next().unwrap() = sorted;
    let r = render_sync(&cfg(), &st, &full());
    let svc_lines: Vec<&str> = r
        .restore
        .lines()
        .filter(|l| l.starts_with("-A KUBE-SVC-TCOU7JCQXEZGVUNU"))
        .collect();
    assert_eq!(svc_lines.len(), 4, "{}", r.restore);
    assert_eq!(
        svc_lines[0],
        "-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp -p udp -d 10.96.0.10 --dport 53 ! -s 10.244.0.0/16 -j KUBE-MARK-MASQ"
    );
    assert!(svc_lines[1].contains("\"kube-system/kube-dns:dns -> 10.244.1.10:53\" -m statistic --mode random --probability 0.3333333333 -j KUBE-SEP-"));
    assert!(svc_lines[2].contains(
        "-> 10.244.1.7:53\" -m statistic --mode random --probability 0.5000000000 -j KUBE-SEP-"
    ));
    assert!(
        svc_lines[3].contains("-> 10.244.2.8:53\" -j KUBE-SEP-")
            && !svc_lines[3].contains("statistic")
    );
    assert!(r.restore.contains(
        "-A KUBE-SERVICES -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp -p udp -d 10.96.0.10 --dport 53 -j KUBE-SVC-TCOU7JCQXEZGVUNU\n"
    ));
    let sep = ServicePortName::new("kube-system", "kube-dns", "dns", Protocol::UDP)
        .sep_chain("10.244.1.7:53");
    assert!(r.restore.contains(&format!(
        "-A {sep} -m comment --comment kube-system/kube-dns:dns -s 10.244.1.7 -j KUBE-MARK-MASQ\n"
    )));
    assert!(r.restore.contains(&format!(
        "-A {sep} -m comment --comment kube-system/kube-dns:dns -m udp -p udp -j DNAT --to-destination 10.244.1.7:53\n"
    )));
    // Structure: filter first, then nat, each closed by COMMIT; nodeports jump is the last rule.
    assert!(r.restore.starts_with("*filter\n:KUBE-SERVICES - [0:0]\n"));
    let nat = r.restore.split("*nat\n").nth(1).unwrap();
    let last_rule = nat
        .lines()
        .rfind(|l| l.starts_with("-A KUBE-SERVICES"))
        .unwrap();
    assert!(
        last_rule.contains("kubernetes service nodeports"),
        "{last_rule}"
    );
    assert!(r.restore.ends_with("COMMIT\n"));
    assert!(r.restore.contains("-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n"));
}

#[test]
fn no_endpoints_rejects_in_filter_and_writes_no_nat_chains() {
    let mut s = svc_port("ns", "empty", "", Protocol::UDP, "10.96.0.20", 53);
    s.node_port = Some(30053);
    s.external_ips = vec!["192.0.2.10".parse().unwrap()];
    let st = state_with(s, vec![]);
    let r = render_sync(&cfg(), &st, &full());
    assert!(r.restore.contains("-A KUBE-SERVICES -m comment --comment \"ns/empty has no endpoints\" -m udp -p udp -d 10.96.0.20 --dport 53 -j REJECT\n"));
    assert!(r.restore.contains("-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/empty has no endpoints\" -m udp -p udp -d 192.0.2.10 --dport 53 -j REJECT\n"));
    assert!(r.restore.contains("-A KUBE-EXTERNAL-SERVICES -m comment --comment \"ns/empty has no endpoints\" -m addrtype --dst-type LOCAL -m udp -p udp --dport 30053 -j REJECT\n"));
    assert!(!r.restore.contains("KUBE-SVC-"));
    assert!(r.active_nat_chains.is_empty());
}

#[test]
fn internal_local_without_local_endpoints_drops() {
    let mut s = svc_port("ns", "loc", "", Protocol::TCP, "10.96.0.30", 80);
    s.internal_policy_local = true;
    let st = state_with(s, vec![ep("10.244.9.9", 8080)]);
    let r = render_sync(&cfg(), &st, &full());
    assert!(r.restore.contains("-A KUBE-SERVICES -m comment --comment \"ns/loc has no local endpoints\" -m tcp -p tcp -d 10.96.0.30 --dport 80 -j DROP\n"), "{}", r.restore);
    assert!(!r.restore.contains("KUBE-SVL-"));
}

#[test]
fn large_clusters_drop_endpoint_comments() {
    let s = svc_port("ns", "big", "", Protocol::TCP, "10.96.0.40", 80);
    let eps: Vec<EndpointInfo> = (0..1001u32)
        .map(|i| {
            ep(
                &format!("10.{}.{}.{}", 1 + i / 65536, (i / 256) % 256, i % 256),
                80,
            )
        })
        .collect();
    let mut st = state_with(s, eps);
    st.endpoints
        .values_mut()
        .next()
        .unwrap()
        .sort_by_key(|e| e.endpoint_string());
    let r = render_sync(&cfg(), &st, &full());
    assert!(r.large_cluster_mode);
    let sep_lines: Vec<&str> = r
        .restore
        .lines()
        .filter(|l| l.starts_with("-A KUBE-SEP-"))
        .collect();
    assert_eq!(sep_lines.len(), 2002);
    assert!(sep_lines.iter().all(|l| !l.contains("--comment")));
    let svc_lines: Vec<&str> = r
        .restore
        .lines()
        .filter(|l| l.starts_with("-A KUBE-SVC-"))
        .collect();
    // The masquerade rule keeps its comment; the 1001 endpoint rules lose theirs.
    assert!(svc_lines[0].contains("cluster IP"));
    assert!(svc_lines[1..].iter().all(|l| !l.contains("--comment")));
    assert!(
        svc_lines[1].contains("--probability 0.0009990010"),
        "{}",
        svc_lines[1]
    );
}

#[test]
fn partial_sync_writes_only_changed_services_and_deletes_stale_chains() {
    let a = svc_port("ns", "a", "", Protocol::TCP, "10.96.0.1", 80);
    let b = svc_port("ns", "b", "", Protocol::TCP, "10.96.0.2", 80);
    let mut st = ProxyState::default();
    st.endpoints
        .insert(a.name.clone(), vec![ep("10.244.0.1", 80)]);
    st.endpoints
        .insert(b.name.clone(), vec![ep("10.244.0.2", 80)]);
    st.services.insert(a.name.clone(), a.clone());
    st.services.insert(b.name.clone(), b.clone());
    let first = render_sync(&cfg(), &st, &full());
    assert_eq!(first.active_nat_chains.len(), 4);

    // b's endpoint moves to a new IP.
    st.endpoints
        .insert(b.name.clone(), vec![ep("10.244.0.3", 80)]);
    let changed: BTreeSet<(String, String)> = [("ns".to_string(), "b".to_string())].into();
    let r = render_sync(
        &cfg(),
        &st,
        &SyncScope {
            full: false,
            changed: Some(&changed),
            existing_nat_chains: Some(&first.active_nat_chains),
        },
    );
    let old_sep = b.name.sep_chain("10.244.0.2:80");
    let new_sep = b.name.sep_chain("10.244.0.3:80");
    assert_eq!(r.deleted_chains, vec![old_sep.clone()]);
    assert!(r.restore.contains(&format!(":{old_sep} - [0:0]\n")));
    assert!(r.restore.contains(&format!("-X {old_sep}\n")));
    assert!(r.restore.contains(&format!(":{new_sep} - [0:0]\n")));
    // a's chains are neither declared nor rewritten, but its KUBE-SERVICES rule is.
    assert!(!r
        .restore
        .contains(&format!(":{} - [0:0]", a.name.svc_chain())));
    assert!(!r.restore.contains(&format!("-A {}", a.name.svc_chain())));
    assert!(r.restore.contains(&format!("-j {}\n", a.name.svc_chain())));
    assert!(r.active_nat_chains.contains(&a.name.svc_chain()));
    // The -X comes before the final nodeports rule, as kube-proxy writes it.
    let x = r.restore.find("-X ").unwrap();
    let np = r.restore.find("kubernetes service nodeports").unwrap();
    assert!(x < np);
}

#[test]
fn jump_rules_are_kube_proxys() {
    let j = jump_rules();
    assert_eq!(j.len(), 14);
    assert_eq!(
        j[9].command(),
        "iptables -t nat -I OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
    );
    assert_eq!(
        j[0].command(),
        "iptables -t filter -I INPUT -m conntrack --ctstate NEW -m comment --comment \"kubernetes externally-visible service portals\" -j KUBE-EXTERNAL-SERVICES"
    );
    assert_eq!(
        j[13].command(),
        "iptables -t filter -I OUTPUT -j KUBE-FIREWALL"
    );
}

#[test]
fn external_traffic_policy_local_uses_svl_for_outside_traffic() {
    let mut s = svc_port("ns", "web", "http", Protocol::TCP, "10.96.0.50", 80);
    s.node_port = Some(30080);
    s.external_policy_local = true;
    let mut local = ep("10.244.0.5", 8080);
    local.is_local = true;
    let st = state_with(s.clone(), vec![ep("10.244.1.5", 8080), local]);
    let r = render_sync(&cfg(), &st, &full());
    let (svc, svl, ext) = (s.name.svc_chain(), s.name.svl_chain(), s.name.ext_chain());
    let text = &r.restore;
    assert!(text.contains(&format!(
        "-A KUBE-NODEPORTS -m comment --comment ns/web:http -m tcp -p tcp --dport 30080 -j {ext}\n"
    )));
    let ext_rules: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("-A {ext} ")))
        .collect();
    assert_eq!(ext_rules.len(), 4, "{text}");
    assert!(ext_rules[0].ends_with(&format!("-s 10.244.0.0/16 -j {svc}")));
    assert!(ext_rules[1].ends_with("-m addrtype --src-type LOCAL -j KUBE-MARK-MASQ"));
    assert!(ext_rules[2].ends_with(&format!("-m addrtype --src-type LOCAL -j {svc}")));
    assert_eq!(ext_rules[3], format!("-A {ext} -j {svl}"));
    // The SVL chain has only the local endpoint, without a masquerade rule; SVC has both.
    let svl_rules: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with(&format!("-A {svl} ")))
        .collect();
    assert_eq!(svl_rules.len(), 1);
    assert!(svl_rules[0].contains("10.244.0.5:8080"));
    let svc_rules = text
        .lines()
        .filter(|l| l.starts_with(&format!("-A {svc} ")))
        .count();
    assert_eq!(svc_rules, 3);
    // Both endpoints get SEP chains (the remote one is reachable through KUBE-SVC).
    assert_eq!(
        r.active_nat_chains
            .iter()
            .filter(|c| c.starts_with("KUBE-SEP-"))
            .count(),
        2
    );
    assert!(
        !text.contains("KUBE-EXTERNAL-SERVICES -m"),
        "local endpoints exist: no DROP"
    );
}
