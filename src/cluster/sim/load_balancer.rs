//! The cloud load balancer in front of `type: LoadBalancer` Services (`cloudLoadBalancer:`;
//! docs/kube-proxy-model.md §13).
//!
//! It is a passthrough load balancer, as Google Cloud's external passthrough Network Load
//! Balancer is: a packet a host outside the cluster sends to a Service's IPv4
//! `status.loadBalancer.ingress` IP reaches one node unchanged (destination the load-balancer
//! IP, the client's source kept), where kube-proxy's rules for the load-balancer IP take it;
//! the node answers the client directly (direct server return). The backends are every node.
//!
//! Which node: the load balancer keeps a connection table (flow → node, forgotten after
//! [`FLOW_IDLE_TIMEOUT`] idle). A TCP SYN always starts a new connection (tracking mode
//! `PER_CONNECTION`); any other packet of a known flow goes to its node, except that a UDP
//! flow does not persist on a node that turned unhealthy (`DEFAULT_FOR_PROTOCOL`: "the
//! existing connections persist on unhealthy backends only for connection-oriented protocols
//! … They do not persist for UDP"; TCP flows stay). A new connection goes to one of the
//! *eligible* nodes: the healthy ones, or every node when none is healthy ("unless all
//! backends are unhealthy"). The pick is a hash of the 5-tuple and the scenario seed over the
//! eligible nodes in scenario order: Google's Maglev consistent hash is a different function,
//! but a flow's SYN retransmissions go to the same node as its first SYN in both, until the
//! eligible set changes.
//!
//! Health: for a Service with `externalTrafficPolicy: Local`, every `interval` the load
//! balancer sends `GET /healthz` to each node's `healthCheckNodePort`. kube-proxy's health
//! server answers it (upstream `pkg/proxy/healthcheck/service_health.go`, `hcHandler.ServeHTTP`):
//! 200 when the Service has local endpoints, 503 with `"localEndpoints": 0` otherwise. The
//! count is what kube-proxy's last successful sync gave its health server
//! (`SyncEndpoints(proxier.endpointsMap.LocalReadyEndpoints())`, after the rules were
//! restored): the distinct IPs of the Service's local endpoints that are *ready*, so a node
//! whose only endpoints are terminating fails ("Terminating endpoints may still serve traffic
//! but the health check signal should fail if there are only terminating endpoints on a
//! node"). The server listens only once a sync has opened it (`SyncServices`); a node whose
//! kube-proxy is stopped refuses the connection. Both fail the check, as does an answer later
//! than `timeout`. `healthyThreshold` checks passed in a row make a node healthy,
//! `unhealthyThreshold` failed in a row make it unhealthy; a node starts unhealthy. For
//! `externalTrafficPolicy: Cluster` the load balancer would check kube-proxy's own
//! `/healthz` on 10256; nfsim does not model that server, and every node of such a Service is
//! eligible.
//!
//! The timeline says when a node's answer changes (`:32000/healthz answers 503
//! (localEndpoints 0)`) and when it turns healthy or unhealthy, with the nodes new
//! connections then go to.

use super::*;
use crate::kubeproxy::model::service_ports;
use crate::scenario::load_balancer::{CloudLoadBalancer, FLOW_IDLE_TIMEOUT};
use sim_core::TcpFlags;
use std::collections::VecDeque;

/// What one check of a node got.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Answer {
    /// `200 OK`, with `localEndpoints`.
    Ok(usize),
    /// `503 Service Unavailable`, `localEndpoints: 0`.
    Unavailable,
    /// No server on the port: kube-proxy has not opened it (no sync yet), or is stopped.
    Refused(&'static str),
    /// The answer would come after the check's timeout.
    TimedOut,
}

impl Answer {
    fn passed(&self) -> bool {
        matches!(self, Answer::Ok(_))
    }
    fn describe(&self, port: u16) -> String {
        match self {
            Answer::Ok(n) => format!(":{port}/healthz answers 200 (localEndpoints {n})"),
            Answer::Unavailable => format!(":{port}/healthz answers 503 (localEndpoints 0)"),
            Answer::Refused(why) => format!(":{port}/healthz refuses the connection ({why})"),
            Answer::TimedOut => format!(":{port}/healthz does not answer within the timeout"),
        }
    }
}

/// One node's health as the load balancer sees it, for one Service.
#[derive(Clone, Debug, Default)]
struct NodeHealth {
    healthy: bool,
    passed: u32,
    failed: u32,
    last: Option<Answer>,
}

/// A flow as the load balancer's connection tracking keys it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FlowKey {
    proto: u8,
    src: IpAddr,
    sport: u16,
    dst: IpAddr,
    dport: u16,
}

/// The load balancer's state.
#[derive(Debug, Default)]
pub(super) struct LbRt {
    /// Its settings (`cloudLoadBalancer:`).
    settings: CloudLoadBalancer,
    /// Per Service (`namespace/name`) with a health check: each node's health.
    health: BTreeMap<String, Vec<NodeHealth>>,
    /// Connection tracking: flow → (node, last packet).
    flows: BTreeMap<FlowKey, (usize, SimTime)>,
    /// Answers on their way back to the load balancer: (Service, health check port, node,
    /// answer), one batch per round.
    in_flight: VecDeque<Vec<(String, u16, usize, Answer)>>,
}

impl LbRt {
    /// A load balancer with these settings, no flow and no node checked yet.
    pub(super) fn new(settings: CloudLoadBalancer) -> LbRt {
        LbRt {
            settings,
            ..LbRt::default()
        }
    }
}

/// A load-balancer frontend a packet was sent to.
struct Frontend {
    /// The Service, `namespace/name`.
    service: String,
    /// Its `healthCheckNodePort`, when the load balancer checks its nodes.
    health_check: Option<u16>,
}

/// The Services the load balancer checks now: (`namespace/name`, `healthCheckNodePort`).
fn checked_services(services: &[crate::k8s::Service]) -> Vec<(String, u16)> {
    let mut v: Vec<(String, u16)> = services
        .iter()
        .filter(|s| s.spec.type_ == crate::k8s::ServiceType::LoadBalancer)
        .flat_map(|s| {
            service_ports(s)
                .into_iter()
                .filter(|p| !p.load_balancer_vips.is_empty())
                .filter_map(|p| p.health_check_node_port)
                .map(move |hc| (s.key(), hc))
        })
        .collect();
    v.sort();
    v.dedup();
    v
}

/// `1 check`, `3 checks`.
fn checks(n: u32) -> String {
    if n == 1 {
        "1 check".into()
    } else {
        format!("{n} checks")
    }
}

/// FNV-1a over the flow and the seed, mixed: the pick among eligible nodes.
fn flow_hash(seed: u64, k: &FlowKey) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |bytes: &[u8]| {
        for b in bytes {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0000_0100_0000_01b3);
        }
    };
    eat(&seed.to_be_bytes());
    eat(&[k.proto]);
    for ip in [k.src, k.dst] {
        match ip {
            IpAddr::V4(a) => eat(&a.octets()),
            IpAddr::V6(a) => eat(&a.octets()),
        }
    }
    eat(&k.sport.to_be_bytes());
    eat(&k.dport.to_be_bytes());
    // FNV's low bits follow the inputs' (connect() prefers even ports): mix them in
    // (splitmix64's finalizer) before taking the hash modulo the node count.
    h ^= h >> 30;
    h = h.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h ^= h >> 27;
    h = h.wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

impl Simulation {
    /// Schedules the first round of health checks, if any Service (at the start or created by
    /// an event) is checked.
    pub(super) fn lb_start(&mut self, all_services: &[crate::k8s::Service]) {
        if checked_services(all_services).is_empty() {
            return;
        }
        let first =
            SimTime::ZERO.saturating_add(self.lb.settings.health_check.start + self.sc.latency);
        self.queue.push(first, Ev::LbProbe);
    }

    /// The load-balancer frontend `p` is addressed to, if any.
    fn lb_frontend(&self, p: &Packet) -> Option<Frontend> {
        let proto = p.protocol();
        let dport = p.dport()?;
        for s in &self.sc.services {
            if s.spec.type_ != crate::k8s::ServiceType::LoadBalancer {
                continue;
            }
            for port in service_ports(s) {
                let same_proto = matches!(
                    (port.protocol, proto),
                    (crate::k8s::Protocol::TCP, 6)
                        | (crate::k8s::Protocol::UDP, 17)
                        | (crate::k8s::Protocol::SCTP, 132)
                );
                if same_proto && port.port == dport && port.load_balancer_vips.contains(&p.dst) {
                    return Some(Frontend {
                        service: s.key(),
                        health_check: port.health_check_node_port,
                    });
                }
            }
        }
        None
    }

    /// Takes `p`, from a host, when it is for a load-balancer IP (the load balancer sends it
    /// on to a node); gives it back otherwise.
    pub(super) fn lb_route(&mut self, p: Packet) -> Option<Packet> {
        if self.owners.contains_key(&p.dst) {
            return Some(p);
        }
        let Some(fe) = self.lb_frontend(&p) else {
            return Some(p);
        };
        let key = FlowKey {
            proto: p.protocol(),
            src: p.src,
            sport: p.sport().unwrap_or(0),
            dst: p.dst,
            dport: p.dport().unwrap_or(0),
        };
        let healthy: Option<Vec<bool>> = fe
            .health_check
            .and_then(|_| self.lb.health.get(&fe.service))
            .map(|v| v.iter().map(|h| h.healthy).collect());
        let is_healthy = |n: usize| healthy.as_ref().is_none_or(|v| v[n]);
        let syn = p
            .tcp_flags()
            .is_some_and(|f| f.contains(TcpFlags::SYN) && !f.contains(TcpFlags::ACK));
        let now = self.now;
        let known = self
            .lb
            .flows
            .get(&key)
            .filter(|(_, last)| now.saturating_since(*last) < FLOW_IDLE_TIMEOUT)
            .map(|(n, _)| *n);
        let any_healthy = (0..self.nodes.len()).any(is_healthy);
        let node = match known {
            // A SYN is always a new connection (PER_CONNECTION).
            Some(n) if !syn && (is_healthy(n) || key.proto == 6 || !any_healthy) => n,
            _ => {
                let eligible: Vec<usize> = if any_healthy {
                    (0..self.nodes.len()).filter(|&n| is_healthy(n)).collect()
                } else {
                    (0..self.nodes.len()).collect()
                };
                if eligible.is_empty() {
                    self.network_drop(&p, "the load balancer has no backend".into());
                    return None;
                }
                let h = flow_hash(self.sc.seed, &key);
                eligible[(h % eligible.len() as u64) as usize]
            }
        };
        self.lb.flows.insert(key, (node, now));
        self.queue.push(
            now + self.sc.latency,
            Ev::Deliver(Dest::NodeIn(node, eth0(), capture::Hop::Router), p),
        );
        None
    }

    /// What node `n`'s kube-proxy health server answers for Service `service` on port `port`
    /// now.
    fn lb_answer(&self, service: &str, port: u16, n: usize) -> Answer {
        if 2 * self.sc.latency.as_nanos() > self.lb.settings.health_check.timeout.as_nanos() {
            return Answer::TimedOut;
        }
        let Some(g) = self.groups.iter().position(|g| g.nodes.contains(&n)) else {
            return Answer::Refused("no kube-proxy");
        };
        if !self.proxy_running[g] {
            return Answer::Refused("kube-proxy is not running");
        }
        let state = self.groups[g].proxy.applied_state();
        let open = state.services.values().any(|p| {
            format!("{}/{}", p.name.namespace, p.name.name) == service
                && p.health_check_node_port == Some(port)
        });
        if !open {
            return Answer::Refused("kube-proxy has not opened it yet");
        }
        // LocalReadyEndpoints: distinct IPs of local, ready endpoints, over the ports.
        let ips: BTreeSet<IpAddr> = state
            .endpoints
            .iter()
            .filter(|(name, _)| format!("{}/{}", name.namespace, name.name) == service)
            .flat_map(|(_, eps)| eps.iter())
            .filter(|e| e.is_local && e.ready)
            .map(|e| e.ip)
            .collect();
        if ips.is_empty() {
            Answer::Unavailable
        } else {
            Answer::Ok(ips.len())
        }
    }

    /// A round of checks arrives at the nodes: each node's answer now, on its way back.
    pub(super) fn lb_probe(&mut self) {
        let checked = checked_services(&self.sc.services);
        let mut batch = Vec::new();
        for (svc, port) in &checked {
            for n in 0..self.nodes.len() {
                batch.push((svc.clone(), *port, n, self.lb_answer(svc, *port, n)));
            }
        }
        self.lb.in_flight.push_back(batch);
        self.queue.push(self.now + self.sc.latency, Ev::LbAnswers);
        // Forget idle flows, so that the table holds only what can still be looked up.
        let now = self.now;
        self.lb
            .flows
            .retain(|_, (_, last)| now.saturating_since(*last) < FLOW_IDLE_TIMEOUT);
        let next = self.now + self.lb.settings.health_check.interval;
        if next <= self.end {
            self.queue.push(next, Ev::LbProbe);
        }
    }

    /// A round's answers reach the load balancer: thresholds counted, changes logged.
    pub(super) fn lb_answers(&mut self) {
        let Some(batch) = self.lb.in_flight.pop_front() else {
            return;
        };
        let hc = self.lb.settings.health_check.clone();
        let nodes = self.nodes.len();
        for (svc, port, n, answer) in batch {
            let states = self
                .lb
                .health
                .entry(svc.clone())
                .or_insert_with(|| vec![NodeHealth::default(); nodes]);
            let h = &mut states[n];
            let changed_answer = h.last.as_ref() != Some(&answer);
            let mut turned = None;
            if answer.passed() {
                h.passed += 1;
                h.failed = 0;
                if !h.healthy && h.passed >= hc.healthy_threshold {
                    h.healthy = true;
                    turned = Some(format!(
                        "HEALTHY ({} passed in a row, healthyThreshold {})",
                        checks(h.passed),
                        hc.healthy_threshold
                    ));
                }
            } else {
                h.failed += 1;
                h.passed = 0;
                if h.healthy && h.failed >= hc.unhealthy_threshold {
                    h.healthy = false;
                    turned = Some(format!(
                        "UNHEALTHY ({} failed in a row, unhealthyThreshold {})",
                        checks(h.failed),
                        hc.unhealthy_threshold
                    ));
                }
            }
            let what = answer.describe(port);
            h.last = Some(answer);
            let eligible = self.lb_eligible(&svc);
            let node = self.nodes[n].def.name.clone();
            let subject = format!("load balancer {svc}");
            if changed_answer {
                self.log(What::Change {
                    subject: subject.clone(),
                    change: format!("{node} {what}"),
                });
            }
            if let Some(t) = turned {
                self.log(What::Change {
                    subject,
                    change: format!("{node} {t}; new connections go to {eligible}"),
                });
            }
        }
    }

    /// The nodes new connections to `svc` go to, in words.
    fn lb_eligible(&self, svc: &str) -> String {
        let Some(states) = self.lb.health.get(svc) else {
            return "every node".into();
        };
        let healthy: Vec<&str> = states
            .iter()
            .enumerate()
            .filter(|(_, h)| h.healthy)
            .map(|(n, _)| self.nodes[n].def.name.as_str())
            .collect();
        if healthy.is_empty() {
            "every node (none is healthy)".into()
        } else {
            healthy.join(", ")
        }
    }
}
