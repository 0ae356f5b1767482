//! proptest strategies for Services, endpoint sets, packets and churn, so a law is a few
//! lines. proptest itself is re-exported (`strategies::proptest`): a crate that only depends on `nfsim`
//! can run them with `proptest::test_runner::TestRunner`; one that also depends on proptest
//! can use its `proptest!` macro.
//!
//! ```
//! use nfsim::testkit::strategies::{self, proptest};
//! use nfsim::testkit::Node;
//! use proptest::test_runner::{Config, TestRunner};
//!
//! let mut runner = TestRunner::new(Config { cases: 8, ..Config::default() });
//! runner.run(&strategies::service(1..=6), |svc| {
//!     let node = Node::from_objects(&svc.yaml()).unwrap();
//!     let sel = node.selection(&svc.chain()).unwrap();
//!     assert_eq!(sel.choices.len(), svc.endpoints.len());
//!     Ok(())
//! }).unwrap();
//! ```
//!
//! The generated values are plain data ([`ServiceSpec`], [`Churn`]) with a `Debug` form that
//! proptest prints when it shrinks a failure, so a failing case reads as what it is.

pub use proptest;

use proptest::collection::{btree_set, vec};
use proptest::prelude::*;
use proptest::sample::SizeRange;
use sim_core::Packet;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr};

/// A Service with one port and one EndpointSlice of ready endpoints, all in namespace
/// `default`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServiceSpec {
    /// `metadata.name`.
    pub name: String,
    /// `spec.clusterIP`, in 10.96.0.0/16.
    pub cluster_ip: Ipv4Addr,
    /// The service port (also the target port).
    pub port: u16,
    /// `UDP` or `TCP`.
    pub protocol: &'static str,
    /// The endpoints' addresses, in 10.244.0.0/16, distinct.
    pub endpoints: Vec<Ipv4Addr>,
}

impl ServiceSpec {
    /// The Service and its EndpointSlice as YAML, for [`super::Node::from_objects`].
    pub fn yaml(&self) -> String {
        let (name, ip, port, proto) = (&self.name, self.cluster_ip, self.port, self.protocol);
        let mut s = format!(
            "apiVersion: v1\nkind: Service\nmetadata: {{name: {name}, namespace: default}}\nspec:\n  clusterIP: {ip}\n  ports: [{{name: p, port: {port}, protocol: {proto}, targetPort: {port}}}]\n"
        );
        if !self.endpoints.is_empty() {
            let _ = write!(
                s,
                "---\napiVersion: discovery.k8s.io/v1\nkind: EndpointSlice\nmetadata:\n  name: {name}-1\n  namespace: default\n  labels: {{kubernetes.io/service-name: {name}}}\naddressType: IPv4\nendpoints:\n"
            );
            for e in &self.endpoints {
                let _ = writeln!(s, "  - {{addresses: [{e}], conditions: {{ready: true}}}}");
            }
            let _ = writeln!(s, "ports: [{{name: p, port: {port}, protocol: {proto}}}]");
        }
        s
    }

    /// Its `KUBE-SVC-…` chain.
    pub fn chain(&self) -> String {
        super::examples::svc_chain(&format!("default/{}:p", self.name), self.protocol)
    }

    /// The service address.
    pub fn address(&self) -> SocketAddr {
        SocketAddr::new(self.cluster_ip.into(), self.port)
    }

    /// The endpoints as `ip:port`.
    pub fn endpoint_addrs(&self) -> Vec<SocketAddr> {
        self.endpoints
            .iter()
            .map(|e| SocketAddr::new((*e).into(), self.port))
            .collect()
    }

    /// A new packet from `client` to the service (UDP, or a TCP SYN).
    pub fn packet_from(&self, client: SocketAddr) -> Packet {
        match self.protocol {
            "TCP" => Packet::tcp(client, self.address(), sim_core::TcpFlags::SYN),
            _ => Packet::udp(client, self.address()),
        }
    }
}

/// Distinct endpoint addresses in 10.244.0.0/16 (host part 1..=65534), `size` of them.
pub fn endpoint_set(size: impl Into<SizeRange>) -> impl Strategy<Value = Vec<Ipv4Addr>> {
    btree_set(1u16..=65534, size).prop_map(|set| {
        set.into_iter()
            .map(|h| Ipv4Addr::new(10, 244, (h >> 8) as u8, h as u8))
            .collect()
    })
}

/// A Service (UDP or TCP, cluster IP in 10.96.0.0/16, port 1..=65535) with `endpoints` ready
/// endpoints.
pub fn service(endpoints: impl Into<SizeRange>) -> impl Strategy<Value = ServiceSpec> {
    (
        "[a-z][a-z0-9]{0,8}",
        1u16..=65534,
        1u16..=65535,
        prop_oneof![Just("UDP"), Just("TCP")],
        endpoint_set(endpoints),
    )
        .prop_map(|(name, ip, port, protocol, endpoints)| ServiceSpec {
            name,
            cluster_ip: Ipv4Addr::new(10, 96, (ip >> 8) as u8, ip as u8),
            port,
            protocol,
            endpoints,
        })
}

/// A client socket in a pod of 10.244.200.0/22 (kept apart from [`endpoint_set`]'s usual
/// range only by chance: laws must not care), port 1024..=65535.
pub fn client() -> impl Strategy<Value = SocketAddr> {
    (0u16..1024, 1024u16..=65535).prop_map(|(h, port)| {
        SocketAddr::new(
            Ipv4Addr::new(10, 244, 200 + (h >> 8) as u8, h as u8).into(),
            port,
        )
    })
}

/// `n` distinct client sockets (distinct source ports on one pod address, so each is a new
/// flow).
pub fn clients(n: impl Into<SizeRange>) -> impl Strategy<Value = Vec<SocketAddr>> {
    (1u8..=254, btree_set(1024u16..=65535, n)).prop_map(|(h, ports)| {
        ports
            .into_iter()
            .map(|p| SocketAddr::new(Ipv4Addr::new(10, 244, 250, h).into(), p))
            .collect()
    })
}

/// One change to a Service's endpoints, as the reconciler harness applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ChurnOp {
    /// Endpoint `i` (mod the current count) dies and is removed from the slice.
    Kill(usize),
    /// Endpoint `i`'s container restarts in place: not serving, then serving again, same IP.
    RestartInPlace(usize),
    /// Endpoint `i`'s pod is recreated with a new IP.
    Recreate(usize),
    /// Every endpoint goes away; they come back after the next step.
    ScaleToZeroAndBack,
    /// The Service's targetPort changes (the endpoints listen on the new port).
    ChangeTargetPort,
    /// The Service is deleted and created again with the same cluster IP.
    DeleteAndRecreate,
}

/// A sequence of churn steps, each after a gap in seconds.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Churn {
    /// `(gap before it, seconds; the change)`.
    pub steps: Vec<(u64, ChurnOp)>,
}

/// One churn operation.
pub fn churn_op() -> impl Strategy<Value = ChurnOp> {
    prop_oneof![
        3 => (0usize..8).prop_map(ChurnOp::Kill),
        3 => (0usize..8).prop_map(ChurnOp::RestartInPlace),
        2 => (0usize..8).prop_map(ChurnOp::Recreate),
        1 => Just(ChurnOp::ScaleToZeroAndBack),
        1 => Just(ChurnOp::ChangeTargetPort),
        1 => Just(ChurnOp::DeleteAndRecreate),
    ]
}

/// `steps` churn operations, each 5..=120 s after the previous one.
pub fn churn(steps: impl Into<SizeRange>) -> impl Strategy<Value = Churn> {
    vec((5u64..=120, churn_op()), steps).prop_map(|steps| Churn { steps })
}
