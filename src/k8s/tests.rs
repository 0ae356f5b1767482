use super::*;

/// As `kubectl get svc -n kube-system kube-dns -o yaml` prints it on a kind node.
pub(crate) const KUBE_DNS_SVC: &str = r#"
apiVersion: v1
kind: Service
metadata:
  annotations:
    prometheus.io/port: "9153"
    prometheus.io/scrape: "true"
  creationTimestamp: "2026-11-29T09:00:00Z"
  labels:
    k8s-app: kube-dns
    kubernetes.io/cluster-service: "true"
    kubernetes.io/name: CoreDNS
  name: kube-dns
  namespace: kube-system
  resourceVersion: "234"
  uid: 2f5c1b9e-0000-4000-8000-000000000000
spec:
  clusterIP: 10.96.0.10
  clusterIPs:
  - 10.96.0.10
  internalTrafficPolicy: Cluster
  ipFamilies:
  - IPv4
  ipFamilyPolicy: SingleStack
  ports:
  - name: dns
    port: 53
    protocol: UDP
    targetPort: 53
  - name: dns-tcp
    port: 53
    protocol: TCP
    targetPort: 53
  - name: metrics
    port: 9153
    protocol: TCP
    targetPort: 9153
  selector:
    k8s-app: kube-dns
  sessionAffinity: None
  type: ClusterIP
status:
  loadBalancer: {}
"#;

pub(crate) const KUBE_DNS_SLICE: &str = r#"
addressType: IPv4
apiVersion: discovery.k8s.io/v1
endpoints:
- addresses:
  - 10.244.0.3
  conditions:
    ready: true
    serving: true
    terminating: false
  nodeName: kind-control-plane
  targetRef:
    kind: Pod
    name: coredns-7db6d8ff4d-abcde
    namespace: kube-system
- addresses:
  - 10.244.0.4
  conditions:
    ready: false
    serving: false
    terminating: false
  nodeName: kind-worker
kind: EndpointSlice
metadata:
  labels:
    endpointslice.kubernetes.io/managed-by: endpointslice-controller.k8s.io
    kubernetes.io/service-name: kube-dns
  name: kube-dns-xyz12
  namespace: kube-system
ports:
- name: dns-tcp
  port: 53
  protocol: TCP
- name: dns
  port: 53
  protocol: UDP
- name: metrics
  port: 9153
  protocol: TCP
"#;

#[test]
fn reads_kubectl_service_output() {
    let s = Service::from_yaml(KUBE_DNS_SVC).unwrap();
    assert_eq!(s.key(), "kube-system/kube-dns");
    assert_eq!(s.spec.type_, ServiceType::ClusterIP);
    assert_eq!(s.ipv4_cluster_ip(), Some("10.96.0.10".parse().unwrap()));
    assert_eq!(s.spec.ports.len(), 3);
    assert_eq!(s.spec.ports[0].protocol, Protocol::UDP);
    assert_eq!(s.spec.ports[0].target_port, Some(IntOrString::Int(53)));
    assert_eq!(s.spec.internal_traffic_policy, Some(TrafficPolicy::Cluster));
    assert_eq!(s.sticky_max_age_seconds(), None);
}

#[test]
fn reads_kubectl_endpointslice_output() {
    let e = EndpointSlice::from_yaml(KUBE_DNS_SLICE).unwrap();
    assert_eq!(e.service_name(), Some("kube-dns"));
    assert_eq!(e.endpoints.len(), 2);
    assert!(e.endpoints[0].conditions.is_ready());
    assert!(!e.endpoints[1].conditions.is_serving());
    assert_eq!(e.endpoints[1].node_name.as_deref(), Some("kind-worker"));
    assert_eq!(e.ports[1].protocol, Some(Protocol::UDP));
}

#[test]
fn unknown_conditions_count_as_ready_and_serving() {
    let c = EndpointConditions::default();
    assert!(c.is_ready() && c.is_serving() && !c.is_terminating());
}

#[test]
fn multi_document_and_list_streams() {
    let stream = format!("{KUBE_DNS_SVC}\n---\n{KUBE_DNS_SLICE}");
    let objs = parse_objects(&stream).unwrap();
    assert!(matches!(objs[0], K8sObject::Service(_)));
    assert!(matches!(objs[1], K8sObject::EndpointSlice(_)));

    let list = r#"
apiVersion: v1
kind: List
items:
- apiVersion: v1
  kind: Service
  metadata: {name: a, namespace: ns}
  spec:
    clusterIP: 10.96.1.1
    ports: [{port: 80}]
- apiVersion: discovery.k8s.io/v1
  kind: EndpointSlice
  metadata:
    name: a-1
    namespace: ns
    labels: {kubernetes.io/service-name: a}
  addressType: IPv4
  endpoints: [{addresses: [10.0.0.1]}]
  ports: [{name: "", port: 8080}]
"#;
    let objs = parse_objects(list).unwrap();
    assert_eq!(objs.len(), 2);
    match &objs[0] {
        K8sObject::Service(s) => {
            assert_eq!(s.spec.ports[0].protocol, Protocol::TCP, "TCP by default")
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn headless_and_external_name_have_no_cluster_ip() {
    let headless = Service::from_yaml(
        "kind: Service\nmetadata: {name: h}\nspec:\n  clusterIP: None\n  ports: [{port: 80}]\n",
    )
    .unwrap();
    assert_eq!(headless.spec.cluster_ip, Some(ClusterIp::None));
    assert_eq!(headless.ipv4_cluster_ip(), None);
    let ext = Service::from_yaml(
        "kind: Service\nmetadata: {name: e}\nspec:\n  type: ExternalName\n  externalName: example.com\n",
    )
    .unwrap();
    assert_eq!(ext.ipv4_cluster_ip(), None);
}

fn yaml_err(text: &str) -> (u64, String) {
    match parse_objects(text) {
        Err(K8sError::Yaml { line, message, .. }) => (line, message),
        other => panic!("expected a YAML error, got {other:?}"),
    }
}

#[test]
fn bad_field_values_name_the_line() {
    let (line, msg) = yaml_err(
        "kind: Service\nmetadata: {name: x}\nspec:\n  clusterIP: 10.96.0.300\n  ports: [{port: 80}]\n",
    );
    assert_eq!(line, 4, "{msg}");
    assert!(msg.contains("10.96.0.300"), "{msg}");

    let (line, msg) = yaml_err(
        "kind: Service\nmetadata: {name: x}\nspec:\n  clusterIP: 10.96.0.3\n  ports:\n  - port: 70000\n",
    );
    assert_eq!(line, 6, "{msg}");
    assert!(msg.contains("1-65535"), "{msg}");

    let (line, msg) = yaml_err(
        "kind: Service\nmetadata: {name: x}\nspec:\n  clusterIP: 10.96.0.3\n  ports:\n  - port: 53\n    protocol: QUIC\n",
    );
    assert_eq!(line, 7, "{msg}");
    assert!(msg.contains("QUIC"), "{msg}");

    let (line, msg) = yaml_err(
        "kind: Service\nmetadata: {name: x}\nspec:\n  clusterIP: 10.96.0.3\n  ports: [{port: 1}]\n  loadBalancerSourceRanges: [\"10.0.0.0/40\"]\n",
    );
    assert_eq!(line, 6, "{msg}");
    assert!(msg.contains("10.0.0.0/40"), "{msg}");

    let (line, msg) = yaml_err(
        "kind: Service\nmetadata: {name: x}\nspec:\n  clusterIP: 10.96.0.3\n  ports: [{port: 1}]\n  sessionAffinity: ClientIP\n  sessionAffinityConfig: {clientIP: {timeoutSeconds: 0}}\n",
    );
    assert_eq!(line, 7, "{msg}");
    assert!(msg.contains("1-86400"), "{msg}");
}

#[test]
fn cross_field_checks_name_object_and_field() {
    let e = parse_objects(
        "kind: EndpointSlice\nmetadata: {name: s, namespace: n}\naddressType: IPv4\nendpoints: [{addresses: [\"fd00::1\"]}]\n",
    )
    .unwrap_err();
    // The missing label is found first.
    assert!(e.to_string().contains("kubernetes.io/service-name"), "{e}");

    let e = parse_objects(
        "kind: EndpointSlice\nmetadata: {name: s, namespace: n, labels: {kubernetes.io/service-name: x}}\naddressType: IPv4\nendpoints: [{addresses: [\"fd00::1\"]}]\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("endpoints[0].addresses[0]"), "{e}");

    let e = parse_objects(
        "kind: Service\nmetadata: {name: m}\nspec:\n  clusterIP: 10.96.0.9\n  ports: [{port: 1, name: a}, {port: 2}]\n",
    )
    .unwrap_err();
    assert!(e.to_string().contains("spec.ports[1].name"), "{e}");

    let e = parse_objects("kind: Deployment\nmetadata: {name: d}\n").unwrap_err();
    assert!(matches!(e, K8sError::UnsupportedKind { .. }), "{e}");
}

#[test]
fn serializes_back_to_an_equal_object() {
    let s = Service::from_yaml(KUBE_DNS_SVC).unwrap();
    let text = serde_saphyr::to_string(&s).unwrap();
    let again = Service::from_yaml(&format!("kind: Service\n{text}")).unwrap();
    assert_eq!(s, again);
    let e = EndpointSlice::from_yaml(KUBE_DNS_SLICE).unwrap();
    let text = serde_saphyr::to_string(&e).unwrap();
    let again = EndpointSlice::from_yaml(&format!("kind: EndpointSlice\n{text}")).unwrap();
    assert_eq!(e, again);
}

#[test]
fn null_lists_read_as_empty() {
    // kubectl prints `endpoints: null` for a slice of a Service scaled to zero.
    let e = EndpointSlice::from_yaml(
        "kind: EndpointSlice\nmetadata: {name: s, namespace: n, labels: {kubernetes.io/service-name: x}}\naddressType: IPv4\nendpoints: null\nports: null\n",
    )
    .unwrap();
    assert!(e.endpoints.is_empty() && e.ports.is_empty());
    let s = Service::from_yaml(
        "kind: Service\nmetadata: {name: x, labels: null}\nspec:\n  clusterIP: 10.96.0.1\n  ports: null\n  selector: null\n",
    )
    .unwrap();
    assert!(s.spec.ports.is_empty());
}

#[test]
fn dual_stack_fields_are_checked_as_the_apiserver_checks_them() {
    let svc = |extra: &str| {
        format!("kind: Service\nmetadata: {{name: d, namespace: n}}\nspec:\n  ports: [{{port: 53}}]\n{extra}")
    };
    let ok = parse_objects(&svc(
        "  clusterIP: 10.96.0.10\n  clusterIPs: [10.96.0.10, \"fd00:10:96::a\"]\n  ipFamilies: [IPv4, IPv6]\n  ipFamilyPolicy: PreferDualStack\n",
    ))
    .unwrap();
    let K8sObject::Service(s) = &ok[0] else {
        panic!()
    };
    assert_eq!(
        s.cluster_ip_of(IpFamily::IPv4),
        Some("10.96.0.10".parse().unwrap())
    );
    assert_eq!(
        s.cluster_ip_of(IpFamily::IPv6),
        Some("fd00:10:96::a".parse().unwrap())
    );
    for (extra, field, words) in [
        (
            "  clusterIP: 10.96.0.10\n  clusterIPs: [10.96.0.10, 10.96.0.11]\n  ipFamilyPolicy: RequireDualStack\n",
            "spec.clusterIPs[1]",
            "same family",
        ),
        (
            "  clusterIP: 10.96.0.10\n  clusterIPs: [10.96.0.10]\n  ipFamilies: [IPv6]\n",
            "spec.ipFamilies[0]",
            "does not match clusterIPs[0]",
        ),
        (
            "  clusterIP: \"fd00::1\"\n  ipFamilies: [IPv4]\n",
            "spec.ipFamilies[0]",
            "does not match clusterIP",
        ),
        (
            "  clusterIP: 10.96.0.10\n  ipFamilies: [IPv4, IPv4]\n  ipFamilyPolicy: PreferDualStack\n",
            "spec.ipFamilies[1]",
            "repeats",
        ),
        (
            "  clusterIP: 10.96.0.10\n  clusterIPs: [10.96.0.10, \"fd00::a\"]\n  ipFamilyPolicy: SingleStack\n",
            "spec.ipFamilyPolicy",
            "SingleStack",
        ),
    ] {
        let e = parse_objects(&svc(extra)).unwrap_err().to_string();
        assert!(e.contains(field) && e.contains(words), "{extra}: {e}");
    }
    let (line, msg) = yaml_err(&svc("  clusterIP: 10.96.0.10\n  ipFamilies: [IPv5]\n"));
    assert_eq!(line, 6, "{msg}");
    assert!(msg.contains("IPv5"), "{msg}");
}
