//! The 2025-09-04 incident through one node's kube-proxy: objects in, syncs out on kube-proxy's
//! schedule, and each release's conntrack cleanup against a fixed-port DNS client's entry.

use nfsim::k8s::{EndpointSlice, Service};
use nfsim::kubeproxy::{
    ConntrackCleanup, CtEntry, CtTuple, KubeProxy, Latest, MemConntrack, NoCleanup, ProxierConfig,
    SyncKind, SyncTiming, V131, V132, V133,
};
use sim_core::SimTime;

const SVC: &str = r#"
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec:
  clusterIP: 10.96.0.10
  ports:
  - {name: dns, port: 53, protocol: UDP}
  - {name: dns-tcp, port: 53, protocol: TCP}
"#;

fn slice(a_ready: bool) -> EndpointSlice {
    EndpointSlice::from_yaml(&format!(
        r#"
kind: EndpointSlice
metadata: {{name: kube-dns-abc, namespace: kube-system, labels: {{kubernetes.io/service-name: kube-dns}}}}
addressType: IPv4
endpoints:
- addresses: [10.244.1.7]
  conditions: {{ready: {a_ready}, serving: {a_ready}, terminating: false}}
  nodeName: kind-worker2
- addresses: [10.244.2.8]
  conditions: {{ready: true, serving: true, terminating: false}}
  nodeName: kind-worker3
ports:
- {{name: dns, port: 53, protocol: UDP}}
- {{name: dns-tcp, port: 53, protocol: TCP}}
"#
    ))
    .unwrap()
}

fn secs(s: f64) -> SimTime {
    SimTime::from_millis((s * 1000.0) as u64)
}

/// The sidecar's fixed-port query entry, DNATed to the CoreDNS pod that will be OOM-killed.
fn stuck_entry() -> CtEntry {
    CtEntry {
        proto: 17,
        orig: CtTuple {
            src: "10.244.3.9".parse().unwrap(),
            dst: "10.96.0.10".parse().unwrap(),
            sport: 40123,
            dport: 53,
        },
        reply: CtTuple {
            src: "10.244.1.7".parse().unwrap(),
            dst: "10.244.3.9".parse().unwrap(),
            sport: 53,
            dport: 40123,
        },
    }
}

fn node(cleanup: Box<dyn ConntrackCleanup>) -> KubeProxy {
    let cfg = ProxierConfig::new(
        "kind-worker3",
        "172.18.0.4".parse().unwrap(),
        "10.244.0.0/16".parse().unwrap(),
    );
    let mut kp = KubeProxy::new(cfg, SyncTiming::default(), cleanup, SimTime::ZERO);
    assert!(kp.upsert_service(SimTime::ZERO, Service::from_yaml(SVC).unwrap()));
    assert!(kp.upsert_endpoint_slice(SimTime::ZERO, slice(true)));
    kp
}

/// Runs the OOM kill with one cleanup strategy; returns whether the stuck entry survived.
fn oom_kill(cleanup: Box<dyn ConntrackCleanup>) -> bool {
    let mut kp = node(cleanup);
    let mut ct = MemConntrack::default();
    assert_eq!(kp.poll_timeout(), Some(SimTime::ZERO));
    let first = kp.on_timeout(SimTime::ZERO).expect("start-up sync");
    assert_eq!(first.kind, SyncKind::Full);
    assert_eq!(first.jump_rules.len(), 14);
    assert!(first.restore.contains("-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.1.7:53\" -m statistic --mode random --probability 0.5000000000"));
    kp.complete_sync(SimTime::ZERO, Ok(()), &mut ct);
    ct.entries.push(stuck_entry());

    // The container is OOM-killed at 60 s; the EndpointSlice says not ready/not serving.
    assert!(kp.upsert_endpoint_slice(secs(60.0), slice(false)));
    assert_eq!(kp.poll_timeout(), Some(secs(60.0)));
    let out = kp.on_timeout(secs(60.0)).expect("a partial sync");
    assert_eq!(out.kind, SyncKind::Partial);
    assert!(out.jump_rules.is_empty());
    assert_eq!(
        out.changed_services.iter().cloned().collect::<Vec<_>>(),
        vec![("kube-system".to_string(), "kube-dns".to_string())]
    );
    // The rules now send everything to the healthy pod and drop the dead one's chains ...
    assert!(out.restore.contains("-A KUBE-SVC-TCOU7JCQXEZGVUNU -m comment --comment \"kube-system/kube-dns:dns -> 10.244.2.8:53\" -j KUBE-SEP-"));
    assert!(!out.restore.contains("-> 10.244.1.7:53"));
    assert_eq!(
        out.deleted_chains.len(),
        2,
        "one SEP chain per port of the dead endpoint"
    );
    // ... but the existing flow keeps its DNAT unless the cleanup deletes its entry.
    kp.complete_sync(secs(60.0), Ok(()), &mut ct);
    ct.entries.contains(&stuck_entry())
}

#[test]
fn oom_kill_in_place_by_release() {
    assert!(oom_kill(Box::new(NoCleanup)));
    assert!(
        oom_kill(Box::new(V131 { serving_fix: false })),
        "v1.29-v1.31 before the fix miss it"
    );
    assert!(!oom_kill(Box::new(V131 { serving_fix: true })));
    assert!(!oom_kill(Box::new(V132::default())));
    assert!(!oom_kill(Box::new(V133::default())));
    assert!(!oom_kill(Box::new(Latest::default())));
}

#[test]
fn sync_timing_follows_min_sync_period_and_burst() {
    let mut kp = node(Box::new(V132::default()));
    let mut ct = MemConntrack::default();
    let mut syncs = Vec::new();
    let mut changes = vec![(60.0, false), (60.2, true), (60.4, false), (60.6, true)];
    changes.reverse();
    let mut now;
    loop {
        let next = kp.poll_timeout();
        match (changes.last(), next) {
            (Some(&(t, ready)), Some(n)) if secs(t) <= n => {
                changes.pop();
                now = secs(t);
                kp.upsert_endpoint_slice(now, slice(ready));
                continue;
            }
            (_, Some(n)) if n <= secs(120.0) => now = n,
            _ => break,
        }
        if let Some(out) = kp.on_timeout(now) {
            syncs.push((now, out.kind));
            kp.complete_sync(now, Ok(()), &mut ct);
        }
    }
    // Start-up (free), then the burst of two at 60.0 and 60.2, then the rate limit: the
    // changes at 60.4 and 60.6 are served together one second after the 60.2 sync.
    assert_eq!(
        syncs,
        vec![
            (secs(0.0), SyncKind::Full),
            (secs(60.0), SyncKind::Partial),
            (secs(60.2), SyncKind::Partial),
            (secs(61.2), SyncKind::Partial),
        ]
    );
    assert!(kp
        .applied_state()
        .endpoints
        .values()
        .all(|eps| eps.iter().all(|e| e.serving)));
}

#[test]
fn failed_restore_forces_a_full_retry_and_skips_cleanup() {
    let mut kp = node(Box::new(V132::default()));
    let mut ct = MemConntrack::default();
    kp.on_timeout(SimTime::ZERO).unwrap();
    kp.complete_sync(SimTime::ZERO, Ok(()), &mut ct);
    ct.entries.push(stuck_entry());
    kp.upsert_endpoint_slice(secs(10.0), slice(false));
    kp.on_timeout(secs(10.0)).unwrap();
    let r = kp.complete_sync(
        secs(10.0),
        Err("iptables-restore: line 3 failed".into()),
        &mut ct,
    );
    assert!(!r.ran);
    assert_eq!(ct.entries.len(), 1);
    assert_eq!(kp.poll_timeout(), Some(secs(40.0)));
    let retry = kp.on_timeout(secs(40.0)).unwrap();
    assert_eq!(retry.kind, SyncKind::Full);
    // The endpoint change was consumed by the failed sync: the retry sees no UDP endpoint
    // change and the reconciler does not run (kube-proxy loses it the same way).
    let r = kp.complete_sync(secs(40.0), Ok(()), &mut ct);
    assert!(!r.ran);
}

#[test]
fn deleting_the_service_removes_its_chains_and_latest_cleans_its_flows() {
    let mut kp = node(Box::new(Latest::default()));
    let mut ct = MemConntrack::default();
    let first = kp.on_timeout(SimTime::ZERO).unwrap();
    kp.complete_sync(SimTime::ZERO, Ok(()), &mut ct);
    assert_eq!(kp.nat_chains().len(), 6, "2 SVC + 4 SEP chains");
    assert!(first.restore.contains(":KUBE-SVC-TCOU7JCQXEZGVUNU - [0:0]"));
    ct.entries.push(stuck_entry());
    assert!(kp.delete_service(secs(5.0), "kube-system", "kube-dns"));
    let out = kp.on_timeout(secs(5.0)).unwrap();
    assert_eq!(out.deleted_chains.len(), 6);
    assert!(out.restore.contains("-X KUBE-SVC-TCOU7JCQXEZGVUNU\n"));
    let r = kp.complete_sync(secs(5.0), Ok(()), &mut ct);
    assert!(ct.entries.is_empty(), "{r:?}");
    assert!(kp.nat_chains().is_empty());
    // A change kube-proxy does not care about requests no sync.
    let mut svc = Service::from_yaml(SVC).unwrap();
    svc.spec
        .selector
        .insert("k8s-app".into(), "kube-dns".into());
    assert!(kp.upsert_service(secs(6.0), svc.clone()));
    kp.on_timeout(secs(6.0)).unwrap();
    kp.complete_sync(secs(6.0), Ok(()), &mut ct);
    svc.spec.selector.insert("other".into(), "label".into());
    assert!(!kp.upsert_service(secs(7.0), svc));
}
