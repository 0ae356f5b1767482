//! Pods' lifecycle: a pod created (its veth, its route and its servers), readiness and its
//! timers, the process killed (an OOM kill) and restarted in place, deletion with its grace
//! period, and gone; each change schedules the EndpointSlice sync that follows it. The
//! scenario's pod events (`oomKill`, `deletePod`, `createPod`, `readiness`) are dispatched
//! here; the other events go to `changes.rs`.

use super::*;
use crate::scenario::model::{OnSigterm, Termination};

/// The kubelet's `minimumGracePeriodInSeconds` (pkg/kubelet/kuberuntime): a container whose
/// preStop hook used up its grace period still gets this long after SIGTERM.
pub const MINIMUM_GRACE_PERIOD: SimDuration = SimDuration::from_secs(2);

/// From a terminating pod's container exiting to the pod being gone (sandbox stopped, its
/// IP no longer routed, the object deleted by the kubelet's status manager): nfsim's
/// figure for what takes a second or so on a kind node.
pub const POD_REMOVAL_AFTER_EXIT: SimDuration = SimDuration::from_secs(1);

#[derive(Debug, Clone, Copy)]
pub(super) enum PodTimer {
    SetReady(bool),
    Restart,
    /// The `preStop` hook has ended (or there was none): the kubelet sends SIGTERM.
    Sigterm,
    /// The process exits on its own after SIGTERM (at once, or at the end of its lameduck).
    Exit,
    /// `controlPlane.podStopDelay` after the exit: the kubelet's `killPod` returns.
    Stopped,
    Gone,
}

impl Simulation {
    /// Creates a pod: its veth on the node (holding the pod CIDR's first address, each pod
    /// CIDR's on a dual-stack node) with a /32 (/128) route to each of the pod's IPs, and its
    /// servers.
    pub(super) fn add_pod(&mut self, def: PodDef, announce: bool) -> Result<(), SimError> {
        let key = def.key();
        for ip in def.ips() {
            if let Some(from) = self.sc.allocated.get(&(format!("pod {key}"), ip)) {
                let change = format!("assigned {ip} (from {from})");
                self.log(What::Pod {
                    pod: key.clone(),
                    change,
                });
            }
        }
        let node = def.node;
        self.veth_counter += 1;
        // Linux names are at most 15 bytes: "veth" and 8 hex digits; Calico's are named
        // after the pod.
        let veth = match &self.sc.cni {
            crate::scenario::Cni::Calico(_) => calico::veth_name(&def.namespace, &def.name),
            _ => IfName::new(&format!("veth{:08x}", self.veth_counter & 0xffff_ffff))
                .unwrap_or_else(|_| unreachable!("12 bytes")),
        };
        let n = &mut self.nodes[node];
        let err = |e: sim_netfilter::netns::NetnsError| SimError::Netns {
            node: n.def.name.clone(),
            message: format!("pod {key}: {e}"),
        };
        if let Some(b) = self.sc.cni.bridge() {
            // The bridge plugin: the veth a port of the bridge, no address, no route of its
            // own; the pod's gratuitous ARP (the plugin sends one for each IPv4 address)
            // teaches the node's neighbour table and the bridge's forwarding database.
            let br = IfName::new(&b.name).unwrap_or_else(|_| unreachable!("checked at load"));
            n.netns.bridge_add_port(br, veth, b.hairpin).map_err(err)?;
            if let IpAddr::V4(a) = def.ip {
                let mac = sim_netfilter::netns::Mac::from_ipv4(a);
                n.netns.bridge_set_neighbour(def.ip, mac);
                n.netns.bridge_learn(veth, mac);
            }
            if b.ip_masq {
                let cmds = node_setup::ip_masq_commands(
                    b,
                    self.sc.seed,
                    &key,
                    veth,
                    def.ip,
                    &n.def.pod_cidr,
                    true,
                );
                for c in cmds {
                    n.netns
                        .iptables(sim_netfilter::Table::Nat, &c)
                        .map_err(&err)?;
                }
            }
        } else {
            // ptp: the veth holds the pod CIDR's gateway as a /32 (each pod CIDR's on a
            // dual-stack node, with a host route per pod address). Calico: no address (the
            // pod's gateway 169.254.1.1 is answered by proxy ARP); a pod created again under
            // its name finds its veth (the plugin's DEL and ADD leave it as it was).
            let calico = matches!(self.sc.cni, crate::scenario::Cni::Calico(_));
            let host = |gw: IpAddr| (gw, if gw.is_ipv4() { 32 } else { 128 });
            let mut gws = vec![host(pod_gateway(&n.def.pod_cidr))];
            gws.extend(n.def.secondary.map(|s| host(pod_gateway(&s.pod_cidr))));
            let addrs: &[(IpAddr, u8)] = if calico { &[] } else { &gws };
            let exists = calico
                && n.netns
                    .routing()
                    .interfaces()
                    .iter()
                    .any(|i| i.name == veth);
            if !exists {
                n.netns.add_interface(veth, addrs).map_err(err)?;
            }
            // Calico's plugin: `net.ipv4.conf.caliX.proxy_arp=1` (and forwarding=1,
            // `neigh.caliX.proxy_delay=0`).
            if calico {
                n.netns.set_proxy_arp(veth, true);
            }
            for ip in def.ips() {
                match &mut self.pending_pod_routes {
                    Some(pending) => pending[node].push((Prefix::host(ip), None, veth)),
                    None => n
                        .netns
                        .add_route(Prefix::host(ip), None, veth)
                        .map_err(err)?,
                }
            }
        }
        let id = match self.pod_ids.get(&key) {
            Some(&id) => id,
            None => self.pods.len(),
        };
        n.veths.insert(veth, id);
        let number = self.veth_counter;
        let stack = Stack::build(
            &def.apps,
            &self.sc.dns,
            self.sc.seed,
            &format!("pod/{key}/{}", self.veth_counter),
        );
        let node_name = n.def.name.clone();
        let old = self.pods.get(id);
        let mut ips = old.map(|p| p.ips.clone()).unwrap_or_default();
        ips.extend(def.ips());
        let generation = old.map(|p| p.state.generation + 1).unwrap_or(0);
        let ready = def.ready;
        let mut state = PodState::new(def.clone(), &node_name);
        state.generation = generation;
        if announce {
            self.log(What::Pod {
                pod: key.clone(),
                change: format!(
                    "created on {node_name} with IP {}{}{}",
                    def.ip,
                    def.secondary_ip
                        .map(|s| format!(" and {s}"))
                        .unwrap_or_default(),
                    if ready { "" } else { ", not ready yet" }
                ),
            });
            if !ready {
                let at = self.now + def.probe.success_delay();
                self.queue.push(
                    at,
                    Ev::PodTimer {
                        pod: id,
                        generation,
                        what: PodTimer::SetReady(true),
                    },
                );
            }
        }
        let rt = PodRt {
            key: key.clone(),
            state,
            stack,
            veth,
            ips,
        };
        if id == self.pods.len() {
            self.pods.push(rt);
            self.pod_ids.insert(key, id);
        } else {
            self.pods[id] = rt;
        }
        self.tap_veth(node, veth, number, id);
        if announce {
            self.pod_changed();
        }
        Ok(())
    }

    pub(super) fn pod_changed(&mut self) {
        if self.sc.endpoint_slices.is_some() || self.slice_sync_pending {
            return;
        }
        self.slice_sync_pending = true;
        self.queue.push(
            self.now + self.sc.control_plane.endpoint_slice_delay,
            Ev::SliceSync,
        );
    }

    pub(super) fn pod_timer(&mut self, id: usize, after: SimDuration, what: PodTimer) {
        let generation = self.pods[id].state.generation;
        self.queue.push(
            self.now + after,
            Ev::PodTimer {
                pod: id,
                generation,
                what,
            },
        );
    }

    pub(super) fn set_ready(&mut self, id: usize, ready: bool) {
        let p = &mut self.pods[id];
        if p.state.ready == ready || p.state.phase == Phase::Gone {
            return;
        }
        p.state.ready = ready;
        let key = p.key.clone();
        self.log(What::Pod {
            pod: key,
            change: if ready {
                "Ready".into()
            } else {
                "not Ready".into()
            },
        });
        self.pod_changed();
    }

    /// Pod `id`'s process dies: its UDP sockets and TCP listeners go; the kernel sends a FIN
    /// on each TCP connection and keeps it as an orphan ([`TcpServer::process_exit`]).
    fn kill_process(&mut self, id: usize) {
        let now = self.now;
        let mut out = Outbox::new();
        let old = std::mem::take(&mut self.pods[id].stack);
        for (key, srv) in old.servers {
            if let Server::Tcp(mut t) = srv {
                t.process_exit(now, &mut out);
                if t.has_connections() {
                    self.pods[id].stack.servers.insert(key, Server::Tcp(t));
                }
            }
        }
        let m = Machine::Pod(id);
        self.send_from(&m, out.packets);
        self.arm_stack(&m);
    }

    pub(super) fn pod_gone(&mut self, id: usize) -> Option<PodDef> {
        if self.pods[id].state.phase == Phase::Gone {
            return None;
        }
        // SIGKILL at the end of the grace period: the FINs leave before the network goes.
        if self.pods[id].state.process_alive {
            self.kill_process(id);
        }
        let p = &mut self.pods[id];
        p.state.phase = Phase::Gone;
        p.state.process_alive = false;
        p.stack = Stack::default();
        let def = p.state.def.clone();
        let veth = p.veth;
        let key = p.key.clone();
        let n = &mut self.nodes[def.node];
        for ip in def.ips() {
            n.netns.remove_route(Prefix::host(ip));
        }
        // A bridge forgets the MACs of a deleted port; the neighbour entries stay (stale).
        n.netns.bridge_del_port(veth);
        if let Some(b) = self.sc.cni.bridge() {
            if b.ip_masq {
                let cmds = node_setup::ip_masq_commands(
                    b,
                    self.sc.seed,
                    &key,
                    veth,
                    def.ip,
                    &n.def.pod_cidr,
                    false,
                );
                for c in cmds {
                    // The plugin's DEL ignores rules already gone.
                    let _ = n.netns.iptables(sim_netfilter::Table::Nat, &c);
                }
            }
        }
        n.veths.remove(&veth);
        self.log(What::Pod {
            pod: key,
            change: match def.secondary_ip {
                None => format!("gone; IP {} no longer routed", def.ip),
                Some(s) => format!("gone; IPs {} and {s} no longer routed", def.ip),
            },
        });
        self.pod_changed();
        Some(def)
    }

    /// Deletes pod `id` (graceful termination, then gone): returns when it will be gone, or
    /// `None` if it was not running.
    pub(super) fn delete_pod(
        &mut self,
        id: usize,
        grace_period: Option<SimDuration>,
    ) -> Option<SimTime> {
        let p = &mut self.pods[id];
        if p.state.phase != Phase::Running {
            return None;
        }
        let grace = grace_period.unwrap_or(p.state.def.grace_period);
        p.state.phase = Phase::Terminating(self.now + grace);
        p.state.generation += 1;
        let pod = p.key.clone();
        self.log(What::Pod {
            pod,
            change: format!("deleted; terminating with grace period {grace}"),
        });
        self.pod_changed();
        let t = self.pods[id].state.def.termination;
        // kubelet `killContainer` (pkg/kubelet/kuberuntime/kuberuntime_container.go): the
        // preStop hook runs first, cut at the grace period; the container then gets what is
        // left of it, but never less than `minimumGracePeriodInSeconds` (2 s).
        let hook = t.pre_stop_sleep.map(|h| h.min(grace));
        let kill_after = match hook {
            Some(h) => {
                let left = SimDuration::from_nanos(grace.as_nanos().saturating_sub(h.as_nanos()));
                h + left.max(MINIMUM_GRACE_PERIOD)
            }
            None => grace,
        };
        if let Some(h) = hook {
            let pod = self.pods[id].key.clone();
            self.log(What::Pod {
                pod,
                change: format!("preStop hook: sleep {h}; SIGTERM after it"),
            });
        }
        self.pod_timer(id, hook.unwrap_or(SimDuration::ZERO), PodTimer::Sigterm);
        self.pod_timer(id, kill_after, PodTimer::Gone);
        let until = self.now + kill_after;
        self.pods[id].state.phase = Phase::Terminating(until);
        Some(until)
    }

    /// The kubelet sends SIGTERM: the process acts on it as its `termination` says.
    fn sigterm(&mut self, id: usize) {
        let p = &mut self.pods[id];
        if !matches!(p.state.phase, Phase::Terminating(_)) || !p.state.process_alive {
            return;
        }
        let t = p.state.def.termination;
        let key = p.key.clone();
        let what = match t.on_sigterm {
            OnSigterm::Exit => "exits".to_string(),
            OnSigterm::Lameduck(d) => format!("keeps serving for {d} (lameduck), then exits"),
            OnSigterm::Ignore => "ignores it; SIGKILL at the end of the grace period".into(),
        };
        // A pod without `termination:` stays as quiet as before it had one.
        if t != Termination::IGNORE {
            self.log(What::Pod {
                pod: key,
                change: format!("SIGTERM: the process {what}"),
            });
        }
        if t.unready_on_sigterm {
            // The readiness probe fails from now on; the kubelet marks the pod not ready
            // after failureThreshold failed probes, unless the process exits first.
            let p = &mut self.pods[id];
            p.state.probe_ok = false;
            let delay = p.state.def.probe.failure_delay();
            self.pod_timer(id, delay, PodTimer::SetReady(false));
        }
        match t.on_sigterm {
            OnSigterm::Exit => self.container_exit(id),
            OnSigterm::Lameduck(d) => self.pod_timer(id, d, PodTimer::Exit),
            OnSigterm::Ignore => {}
        }
    }

    /// The terminating pod's process exits by itself: the kubelet sees the container
    /// terminated and reports the pod not ready when `killPod` returns (`SyncTerminatingPod`
    /// regenerates the status after it, and a container not running is not ready:
    /// `prober_manager`'s `UpdatePodStatus`), so its endpoint turns `ready: false, serving:
    /// false, terminating: true` while the pod object still exists. The kubelet then stops the
    /// sandbox (the pod's network goes) and the pod object is deleted,
    /// [`POD_REMOVAL_AFTER_EXIT`] later. `controlPlane.podStopDelay` (0 s unless set) puts
    /// time between the exit and `killPod` returning: the sources read have none, a kind
    /// measurement fits 4 s (docs/kube-proxy-model.md §10).
    fn container_exit(&mut self, id: usize) {
        if !self.pods[id].state.process_alive {
            return;
        }
        self.kill_process(id);
        self.pods[id].state.process_alive = false;
        let key = self.pods[id].key.clone();
        self.log(What::Pod {
            pod: key,
            change: "container exited".into(),
        });
        let stop = self.sc.control_plane.pod_stop_delay;
        if stop.is_zero() {
            self.pod_stopped(id);
        } else {
            self.pod_timer(id, stop, PodTimer::Stopped);
        }
    }

    /// `killPod` has returned for a pod whose process exited: not Ready, then gone
    /// [`POD_REMOVAL_AFTER_EXIT`] later.
    fn pod_stopped(&mut self, id: usize) {
        self.set_ready(id, false);
        self.pod_timer(id, POD_REMOVAL_AFTER_EXIT, PodTimer::Gone);
    }

    /// A pod timer fires: it applies only to the pod generation it was set for.
    pub(super) fn pod_timer_fired(&mut self, pod: usize, generation: u64, what: PodTimer) {
        if self
            .pods
            .get(pod)
            .is_none_or(|p| p.state.generation != generation)
        {
            return;
        }
        match what {
            PodTimer::SetReady(r) => {
                // A timer applies only if what it was set for still holds: the
                // kubelet marks a pod Ready when its process runs and its probe
                // passes, not Ready otherwise. Several may be pending at once (a
                // probe failing and an OOM kill): each stands on its own.
                let p = &self.pods[pod];
                let ok = p.state.process_alive && p.state.probe_ok;
                if r == ok {
                    self.set_ready(pod, r);
                }
            }
            PodTimer::Restart => {
                let p = &mut self.pods[pod];
                if p.state.phase == Phase::Gone {
                    return;
                }
                p.state.process_alive = true;
                p.state.generation += 1;
                let label = format!("pod/{}/restart{}", p.key, p.state.generation);
                p.stack = Stack::build(&p.state.def.apps, &self.sc.dns, self.sc.seed, &label);
                let probe_ok = p.state.probe_ok;
                let delay = if probe_ok {
                    p.state.def.probe.success_delay()
                } else {
                    p.state.def.probe.failure_delay()
                };
                let key = p.key.clone();
                self.log(What::Pod {
                    pod: key,
                    change: if probe_ok {
                        format!("container restarted in place (same IP); Ready after the probe passes in {delay}")
                    } else {
                        "container restarted in place (same IP); its readiness probe still fails".into()
                    },
                });
                self.pod_timer(pod, delay, PodTimer::SetReady(probe_ok));
            }
            PodTimer::Sigterm => self.sigterm(pod),
            PodTimer::Exit => self.container_exit(pod),
            PodTimer::Stopped => self.pod_stopped(pod),
            PodTimer::Gone => {
                self.pod_gone(pod);
            }
        }
    }

    /// The EndpointSlice controller's sync: derives the slices from the pods, logs the
    /// changed ones and hands kube-proxy's informers the batch after the watch delay.
    pub(super) fn slice_sync(&mut self) {
        self.slice_sync_pending = false;
        let new = derive_slices_in(
            &self.sc.services,
            self.pods.iter().map(|p| &p.state),
            &ControllerTopology::of_scenario(&self.sc),
        );
        if new != self.slices {
            for s in &new {
                if self.slices.iter().any(|o| o == s) {
                    continue;
                }
                let eps: Vec<String> = s
                    .endpoints
                    .iter()
                    .map(|e| {
                        let c = e.conditions;
                        format!(
                            "{}{}{}{}",
                            e.addresses
                                .first()
                                .map(|a| a.to_string())
                                .unwrap_or_default(),
                            if c.is_ready() { "" } else { " (not ready" },
                            if c.is_ready() {
                                ""
                            } else if c.is_serving() {
                                ", serving"
                            } else {
                                ", not serving"
                            },
                            if c.is_terminating() {
                                ", terminating)"
                            } else if c.is_ready() {
                                ""
                            } else {
                                ")"
                            },
                        )
                    })
                    .collect();
                let svc = format!(
                    "{}/{}",
                    s.metadata.namespace,
                    s.service_name().unwrap_or_default()
                );
                self.log(What::Endpoints {
                    service: svc,
                    endpoints: if eps.is_empty() {
                        "(none)".into()
                    } else {
                        eps.join(", ")
                    },
                });
            }
            // What kube-proxy's informer will deliver: changed and removed slices.
            let key = |s: &EndpointSlice| (s.metadata.namespace.clone(), s.metadata.name.clone());
            let old: BTreeMap<(String, String), &EndpointSlice> =
                self.slices.iter().map(|s| (key(s), s)).collect();
            let new_keys: BTreeSet<(String, String)> = new.iter().map(key).collect();
            let batch = WatchBatch {
                services: Vec::new(),
                service_deletes: Vec::new(),
                upserts: new
                    .iter()
                    .filter(|s| old.get(&key(s)) != Some(s))
                    .cloned()
                    .collect(),
                deletes: old
                    .keys()
                    .filter(|k| !new_keys.contains(*k))
                    .cloned()
                    .collect(),
            };
            self.slices = new;
            self.watches.push(Some(batch));
            self.queue.push(
                self.now + self.sc.control_plane.watch_delay,
                Ev::Watch(self.watches.len() - 1),
            );
        }
    }

    pub(super) fn action(&mut self, i: usize) -> Result<(), SimError> {
        let action = self.sc.events[i].action.clone();
        match action {
            Action::OomKill { pod, restart_after } => {
                let Some(&id) = self.pod_ids.get(&pod) else {
                    return Ok(());
                };
                let p = &mut self.pods[id];
                if !p.state.has_network() {
                    return Ok(());
                }
                // The kill leaves the pod's pending timers alone: a readiness failure due
                // before the kubelet notices the exit still marks it not Ready on time.
                p.state.process_alive = false;
                self.kill_process(id);
                self.log(What::Pod {
                    pod: pod.clone(),
                    change: match restart_after {
                        Some(d) => format!(
                            "OOMKilled; process gone, network stays; restarts in place in {d}"
                        ),
                        None => "OOMKilled; process gone, network stays; no restart".into(),
                    },
                });
                self.pod_timer(
                    id,
                    crate::cluster::control::CONTAINER_EXIT_DETECTION,
                    PodTimer::SetReady(false),
                );
                if let Some(d) = restart_after {
                    self.pod_timer(id, d, PodTimer::Restart);
                }
            }
            Action::DeletePod {
                pod,
                grace_period,
                recreate,
            } => {
                let Some(&id) = self.pod_ids.get(&pod) else {
                    return Ok(());
                };
                let Some(until) = self.delete_pod(id, grace_period) else {
                    return Ok(());
                };
                if let Some(r) = recreate {
                    let mut def = self.pods[id].state.def.clone();
                    let moved = def.ip != r.ip || def.node != r.node;
                    def.ip = r.ip;
                    def.node = r.node;
                    if moved {
                        // A new sandbox: a new address of the second family too.
                        def.secondary_ip = self.free_secondary_ip(&def);
                    }
                    def.ready = false;
                    let at = until + r.after;
                    self.recreates.push(def);
                    self.queue.push(at, Ev::Recreate(self.recreates.len() - 1));
                }
            }
            Action::CreatePod(def) => self.add_pod(*def, true)?,
            Action::EndpointOf(b) => {
                // The pod behind the client's entry now; the event becomes the action on it.
                let pod = self.pod_behind(&b)?;
                self.sc.events[i].action = b.then.on(pod);
                return self.action(i);
            }
            other @ (Action::UpsertService { .. }
            | Action::DeleteService { .. }
            | Action::UpsertEndpointSlice(_)
            | Action::DeleteEndpointSlice { .. }
            | Action::Scale { .. }
            | Action::KubeProxy { .. }
            | Action::Conntrack { .. }
            | Action::RebootNode { .. }
            | Action::IptablesRestore { .. }) => self.change(other)?,
            Action::Readiness { pod, ready } => {
                let Some(&id) = self.pod_ids.get(&pod) else {
                    return Ok(());
                };
                let p = &mut self.pods[id];
                p.state.probe_ok = ready;
                let delay = if ready {
                    p.state.def.probe.success_delay()
                } else {
                    p.state.def.probe.failure_delay()
                };
                self.log(What::Pod {
                    pod: pod.clone(),
                    change: format!(
                        "readiness probe now {}",
                        if ready { "succeeds" } else { "fails" }
                    ),
                });
                self.pod_timer(id, delay, PodTimer::SetReady(ready));
            }
        }
        Ok(())
    }

    /// The pod (`namespace/name`) client `b.client`'s conntrack entry points to now, on the
    /// client's node: of the entries from the client's address (and fixed source port) to its
    /// target, the one with the most time left, by its reply source address.
    pub(super) fn pod_behind(&self, b: &PodBehind) -> Result<String, SimError> {
        let now = self.now;
        let c = &self.clients[b.client];
        let fail = |why: String| {
            SimError::Event(format!(
                "{}:{}:{}: {} endpointOf {} at {}: {why}",
                self.sc.file,
                b.line,
                b.column,
                b.then.word(),
                b.client_name,
                now.hms()
            ))
        };
        let node = match c.machine {
            Machine::Pod(id) => self.pods[id].state.def.node,
            Machine::Node(n) => n,
            Machine::Host(_) => {
                return Err(fail(
                    "the client runs on a host outside the cluster, which has no conntrack table nfsim keeps: expected a client in a pod or on a node".into(),
                ))
            }
        };
        let sport = match c.def.kind {
            ClientKind::Udp {
                source_port: SourcePort::Fixed(p),
                ..
            } => Some(p),
            _ => None,
        };
        let target = c.def.target;
        let best = self.nodes[node]
            .netns
            .conntrack()
            .list(now, &Filter::all())
            .into_iter()
            .filter(|e| {
                e.orig.src == c.ip
                    && e.orig.dst == target.ip()
                    && e.orig.dport == target.port()
                    && sport.is_none_or(|p| e.orig.sport == p)
            })
            .enumerate()
            // The most time left; the first listed on a tie.
            .max_by_key(|(i, e)| (e.expiry.secs_left(now), std::cmp::Reverse(*i)))
            .map(|(_, e)| e);
        let node_name = &self.nodes[node].def.name;
        let Some(entry) = best else {
            return Err(fail(format!(
                "the client has no conntrack entry on {node_name} then (from {}{} to {target}): expected the event at an instant when the client's flow has an entry, such as after its first query",
                c.ip,
                sport.map(|p| format!(":{p}")).unwrap_or_default()
            )));
        };
        let ip = entry.reply.src;
        // The pod that has the address and a network now.
        let pod = self
            .pod_ids
            .iter()
            .find(|(_, &id)| self.pods[id].ips.contains(&ip) && self.pods[id].state.has_network())
            .map(|(k, _)| k.clone());
        pod.ok_or_else(|| {
            fail(format!(
                "the client's entry on {node_name} points to {ip}, which no pod has now: {}",
                entry.list_line(now)
            ))
        })
    }
}
