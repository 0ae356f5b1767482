//! Laws of the kube-proxy renderer, over random Services and endpoints:
//! - a partial sync applied on top of the previous sync's tables leaves exactly what a full
//!   sync of the new state leaves (with `iptables-restore --noflush` semantics);
//! - the output does not depend on the order objects arrive in.

use nfsim::k8s::{
    AddressType, ClusterIp, Endpoint, EndpointConditions, EndpointPort, EndpointSlice, ObjectMeta,
    Protocol, Service, ServicePort, ServiceSpec, ServiceType, SessionAffinity, TrafficPolicy,
    LABEL_SERVICE_NAME,
};
use nfsim::kubeproxy::{render_sync, ProxierConfig, ProxyState, SyncScope};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

/// `iptables-restore --noflush` on a model of the tables: chain → rules.
type Tables = BTreeMap<String, BTreeMap<String, Vec<String>>>;

fn apply(tables: &mut Tables, restore: &str) {
    let mut table = String::new();
    for line in restore.lines() {
        if let Some(t) = line.strip_prefix('*') {
            table = t.to_string();
        } else if let Some(decl) = line.strip_prefix(':') {
            let chain = decl.split(' ').next().unwrap().to_string();
            tables
                .entry(table.clone())
                .or_default()
                .insert(chain, Vec::new());
        } else if let Some(chain) = line.strip_prefix("-X ") {
            tables.get_mut(&table).unwrap().remove(chain);
        } else if line.starts_with("-A ") {
            let chain = line.split(' ').nth(1).unwrap().to_string();
            let t = tables.get_mut(&table).unwrap();
            assert!(t.contains_key(&chain), "append to undeclared chain {chain}");
            t.get_mut(&chain).unwrap().push(line.to_string());
        }
    }
}

/// Every jump target must exist (what iptables-restore checks before committing).
fn check_targets(tables: &Tables) {
    for (t, chains) in tables {
        for rules in chains.values() {
            for r in rules {
                let words: Vec<&str> = r.split(' ').collect();
                if let Some(i) = words.iter().position(|w| *w == "-j") {
                    let target = words[i + 1];
                    if target.starts_with("KUBE-") {
                        assert!(
                            chains.contains_key(target),
                            "{t}: {r} jumps to a missing chain"
                        );
                    }
                }
            }
        }
    }
}

#[derive(Clone, Debug)]
struct Svc {
    udp: bool,
    node_port: bool,
    lb: bool,
    ext_local: bool,
    int_local: bool,
    affinity: bool,
    eps: Vec<(u8, bool, bool, bool, bool)>, // (last octet, ready, serving, terminating, local)
}

fn svc_strategy() -> impl Strategy<Value = Svc> {
    (
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        any::<bool>(),
        prop::collection::vec(
            (
                1u8..20,
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
                any::<bool>(),
            ),
            0..5,
        ),
    )
        .prop_map(
            |(udp, node_port, lb, ext_local, int_local, affinity, eps)| Svc {
                udp,
                node_port,
                lb,
                ext_local,
                int_local,
                affinity,
                eps,
            },
        )
}

fn objects(svcs: &[Svc]) -> (Vec<Service>, Vec<EndpointSlice>) {
    let mut services = Vec::new();
    let mut slices = Vec::new();
    for (i, s) in svcs.iter().enumerate() {
        let name = format!("svc{i}");
        let proto = if s.udp { Protocol::UDP } else { Protocol::TCP };
        let type_ = if s.lb {
            ServiceType::LoadBalancer
        } else if s.node_port {
            ServiceType::NodePort
        } else {
            ServiceType::ClusterIP
        };
        let mut svc = Service {
            metadata: ObjectMeta::new("ns", &name),
            spec: ServiceSpec {
                type_,
                cluster_ip: Some(ClusterIp::Ip(format!("10.96.0.{}", i + 1).parse().unwrap())),
                ports: vec![ServicePort {
                    name: "p".into(),
                    protocol: proto,
                    port: 80,
                    target_port: None,
                    node_port: (s.node_port || s.lb).then_some(30000 + i as u16),
                }],
                internal_traffic_policy: s.int_local.then_some(TrafficPolicy::Local),
                external_traffic_policy: s.ext_local.then_some(TrafficPolicy::Local),
                session_affinity: if s.affinity {
                    SessionAffinity::ClientIP
                } else {
                    SessionAffinity::None
                },
                health_check_node_port: (s.lb && s.ext_local).then_some(31000 + i as u16),
                ..ServiceSpec::default()
            },
            ..Service::default()
        };
        if s.lb {
            svc.spec.load_balancer_source_ranges = vec!["203.0.113.0/24".parse().unwrap()];
            svc.status.load_balancer.ingress = vec![nfsim::k8s::LoadBalancerIngress {
                ip: Some(format!("198.51.100.{}", i + 1).parse().unwrap()),
                ..Default::default()
            }];
        }
        services.push(svc);
        let mut meta = ObjectMeta::new("ns", &format!("{name}-1"));
        meta.labels.insert(LABEL_SERVICE_NAME.into(), name.clone());
        slices.push(EndpointSlice {
            api_version: None,
            kind: None,
            metadata: meta,
            address_type: AddressType::IPv4,
            endpoints: s
                .eps
                .iter()
                .map(|&(o, ready, serving, terminating, local)| Endpoint {
                    addresses: vec![format!("10.244.{i}.{o}").parse().unwrap()],
                    conditions: EndpointConditions {
                        ready: Some(ready),
                        serving: Some(serving),
                        terminating: Some(terminating),
                    },
                    node_name: Some(if local { "me" } else { "other" }.into()),
                    ..Endpoint::default()
                })
                .collect(),
            ports: vec![EndpointPort {
                name: Some("p".into()),
                port: Some(8080),
                protocol: Some(proto),
            }],
        });
    }
    (services, slices)
}

fn cfg() -> ProxierConfig {
    ProxierConfig::new(
        "me",
        "203.0.113.7".parse().unwrap(),
        "10.244.0.0/16".parse().unwrap(),
    )
}

fn full(state: &ProxyState, existing: Option<&BTreeSet<String>>) -> nfsim::kubeproxy::RenderedSync {
    render_sync(
        &cfg(),
        state,
        &SyncScope {
            full: true,
            changed: None,
            existing_nat_chains: existing,
        },
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn partial_sync_converges_to_full_sync(
        a in prop::collection::vec(svc_strategy(), 1..5),
        b in prop::collection::vec(svc_strategy(), 1..5),
    ) {
        let (sa, ea) = objects(&a);
        let (sb, eb) = objects(&b);
        let s1 = ProxyState::build("me", &sa, &ea);
        let s2 = ProxyState::build("me", &sb, &eb);

        let first = full(&s1, None);
        let mut incremental = Tables::new();
        apply(&mut incremental, &first.restore);
        check_targets(&incremental);
        let changed = s1.changed_services(&s2);
        let second = render_sync(&cfg(), &s2, &SyncScope {
            full: false,
            changed: Some(&changed),
            existing_nat_chains: Some(&first.active_nat_chains),
        });
        apply(&mut incremental, &second.restore);
        check_targets(&incremental);

        let mut fresh = Tables::new();
        apply(&mut fresh, &full(&s2, None).restore);
        prop_assert_eq!(incremental, fresh);
    }

    #[test]
    fn output_does_not_depend_on_arrival_order(a in prop::collection::vec(svc_strategy(), 1..6), rot in 0usize..6) {
        let (mut s, mut e) = objects(&a);
        let r1 = full(&ProxyState::build("me", &s, &e), None).restore;
        let k = rot % s.len();
        s.rotate_left(k);
        e.reverse();
        let r2 = full(&ProxyState::build("me", &s, &e), None).restore;
        prop_assert_eq!(r1, r2);
    }
}
