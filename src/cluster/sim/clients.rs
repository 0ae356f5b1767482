//! Clients on their machines: each scenario client placed on its pod, host or node and given
//! its application, its bound ports entered in the table of ports in use, and its wake-ups
//! queued for the instants it is due.

use super::*;

impl Simulation {
    pub(super) fn add_client(&mut self, index: usize, def: ClientDef) {
        // The client's address of its target's family (a dual-stack pod or node sends from
        // its address of that family, as the kernel's source selection does), else its
        // primary one.
        let family = crate::k8s::IpFamily::of(def.target.ip());
        let (machine, ip) = match &def.placement {
            Placement::Pod(k) => match self.pod_ids.get(k) {
                Some(&id) => {
                    let d = &self.pods[id].state.def;
                    (Machine::Pod(id), Some(d.ip_of(family).unwrap_or(d.ip)))
                }
                None => return,
            },
            Placement::Host(h) => (Machine::Host(*h), Some(self.hosts[*h].0.address)),
            Placement::Node(n) => {
                let d = &self.nodes[*n].def;
                (
                    Machine::Node(*n),
                    Some(d.address_of(family).unwrap_or(d.address)),
                )
            }
        };
        let Some(ip) = ip else { return };
        let label = format!("client/{}", def.name);
        let app = match def.kind.clone() {
            ClientKind::Resolver(r) => {
                let dns = self.sc.dns.clone();
                let plans = r
                    .names
                    .iter()
                    .map(|n| LookupPlan {
                        name: n.clone(),
                        // Every name was interned at load (`scenario::dns_apps::build`).
                        candidates: crate::dns::candidates(n, &r.conf, r.libc)
                            .iter()
                            .filter_map(|c| dns.names.find(c))
                            .collect(),
                        as_is_first: crate::dns::resolver::asks_as_is_first(n, &r.conf, r.libc),
                    })
                    .collect();
                ClientApp::Resolver(Box::new(ResolverClient::new(
                    ResolverClientConfig {
                        index: index as u32,
                        local_ip: ip,
                        libc: r.libc,
                        conf: r.conf.clone(),
                        plans,
                        schedule: def.schedule.clone(),
                        dns,
                    },
                    self.sc.seed,
                    &label,
                )))
            }
            ClientKind::Udp {
                source_port,
                timeout,
                retries,
                connected,
                one_way,
                socket,
            } => ClientApp::Udp(Box::new(UdpClient::new(
                UdpClientConfig {
                    index: index as u32,
                    local_ip: ip,
                    dst: def.target,
                    schedule: def.schedule.clone(),
                    source_port,
                    timeout,
                    retries,
                    connected,
                    one_way,
                    socket,
                },
                self.sc.seed,
                &label,
            ))),
            ClientKind::Ping { timeout } => {
                let ident = self
                    .stack_mut(&machine)
                    .and_then(|s| s.ping_idents.as_mut()?.assign())
                    .unwrap_or(1);
                ClientApp::Ping(Box::new(PingClient::new(
                    PingClientConfig {
                        index: index as u32,
                        local_ip: ip,
                        dst: def.target.ip(),
                        schedule: def.schedule.clone(),
                        timeout,
                        ident,
                    },
                    self.sc.seed,
                    &label,
                )))
            }
            ClientKind::Tcp {
                connect_timeout,
                request_timeout,
                connection,
            } => {
                let client = TcpClientConfig {
                    index: index as u32,
                    local_ip: ip,
                    dst: def.target,
                    schedule: def.schedule.clone(),
                    connect_timeout,
                    request_timeout,
                    request_bytes: 100,
                };
                match connection {
                    Some(policy) => ClientApp::TcpSession(Box::new(TcpSessionClient::new(
                        TcpSessionConfig { client, policy },
                        self.sc.seed,
                        &label,
                    ))),
                    None => ClientApp::Tcp(Box::new(TcpClient::new(client, self.sc.seed, &label))),
                }
            }
        };
        self.clients_by_ip.entry(ip).or_default().push(index);
        for p in app.bound_ports() {
            let holders = self.client_ports.entry((ip, app.proto(), p)).or_default();
            if let Err(k) = holders.binary_search(&index) {
                holders.insert(k, index);
            }
        }
        self.clients.push(ClientRt {
            def,
            machine,
            ip,
            app,
            wake: None,
            due: None,
        });
        self.arm_client(index);
    }

    pub(super) fn arm_client(&mut self, i: usize) {
        let c = &mut self.clients[i];
        c.due = c.app.poll_timeout();
        self.wake_client_when_due(i);
    }

    /// Queues a wake-up of client `i` at its `due` instant unless an earlier one is queued.
    pub(super) fn wake_client_when_due(&mut self, i: usize) {
        let c = &mut self.clients[i];
        if let Some(t) = c.due {
            if c.wake.is_none_or(|w| t < w) {
                c.wake = Some(t);
                self.queue.push(t.max(self.now), Ev::ClientWake(i));
            }
        }
    }
}
