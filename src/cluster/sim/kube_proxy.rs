//! kube-proxy instances on the event queue: their timers armed, a due sync run on every node
//! the instance serves, and what the sync did written to the timeline (the sync, a failure,
//! a reconciler's requests, each conntrack entry a cleanup deleted).

use super::*;

impl Simulation {
    pub(super) fn arm_proxy(&mut self, g: usize) {
        let now = self.now;
        let grp = &mut self.groups[g];
        if grp.in_flight.is_some() {
            // Its end re-arms the timer.
            return;
        }
        if let Some(t) = grp.poll_timeout().map(|t| t.max(grp.busy_until)) {
            if grp.wake.is_none_or(|w| t < w || w < now) {
                grp.wake = Some(t);
                self.queue.push(t.max(now), Ev::ProxyTimer(g));
            }
        }
    }
}

impl Simulation {
    /// Runs kube-proxy instance `g`'s sync if one is due, on every node it serves; under
    /// `syncCost: modelled` starts it, and [`Simulation::proxy_apply`] applies it when its
    /// restore ends.
    pub(super) fn proxy_timer(&mut self, g: usize) {
        if let Some(cost) = self.groups[g].cost {
            let now = self.now;
            if let Some(at) = self.groups[g].start(now, &cost) {
                self.queue.push(at, Ev::ProxyApply(g));
            }
            return;
        }
        self.run_sync(g, None);
    }

    /// The restore of instance `g`'s sync in flight ends now: the rules go in, the cleanup
    /// runs.
    pub(super) fn proxy_apply(&mut self, g: usize) {
        let Some(cost) = self.groups[g].cost else {
            return;
        };
        if self.groups[g]
            .in_flight
            .as_ref()
            .is_none_or(|f| f.started + f.restore != self.now)
        {
            // The sync this wake-up was for was lost with its process.
            return;
        }
        self.run_sync(g, Some(cost));
    }

    /// Applies instance `g`'s sync on every node it serves: the one due now (`cost: None`)
    /// or the one in flight.
    fn run_sync(&mut self, g: usize, cost: Option<crate::cluster::proxy::SyncCost>) {
        let (now, end) = (self.now, self.end);
        let Simulation {
            groups,
            nodes,
            opts,
            ..
        } = self;
        let grp = &mut groups[g];
        let members: Vec<(usize, &mut Netns)> = nodes
            .iter_mut()
            .enumerate()
            .filter(|(i, _)| grp.nodes.contains(i))
            .map(|(i, n)| (i, &mut n.netns))
            .collect();
        let mut tick = || {
            if let Some(p) = opts.progress.as_mut() {
                p(now, end);
            }
        };
        let result = match cost {
            None => grp.on_timeout(now, members, &mut tick),
            Some(c) => grp.finish(now, &c, members, &mut tick),
        };
        let Some(result) = result else {
            return;
        };
        let served = grp.nodes.clone();
        self.tally_cleanup(&result);
        if self.recording {
            self.log_sync(&result);
        }
        for n in served {
            self.after_kernel(n);
        }
    }

    fn log_sync(&mut self, r: &SyncResult) {
        let changed: Vec<String> = r
            .output
            .changed_services
            .iter()
            .map(|(a, b)| format!("{a}/{b}"))
            .collect();
        let nat_rules = nat_rules_written(&r.output.restore);
        for ns in &r.nodes {
            let node = self.nodes[ns.node].def.name.clone();
            let family =
                (self.nodes[ns.node].def.secondary.is_some()).then(|| r.output.family.as_str());
            self.log(What::Sync {
                node: node.clone(),
                family,
                full: r.output.kind == SyncKind::Full,
                changed: changed.clone(),
                nat_rules,
                took: r.took.map(|(restore, cleanup)| SyncTook {
                    restore_ns: restore.as_nanos(),
                    cleanup_ns: cleanup.as_nanos(),
                }),
            });
            if let Some(e) = &ns.error {
                self.log(What::SyncFailed {
                    node,
                    error: e.clone(),
                });
            }
        }
        // An external reconciler's requests (a process serves one node).
        if let Some(ns) = r.nodes.first() {
            let node = self.nodes[ns.node].def.name.clone();
            for req in &r.cleanup.requests {
                self.log(What::Change {
                    subject: format!("reconciler {node}"),
                    change: req.clone(),
                });
            }
            if let Some(e) = &r.cleanup.error {
                self.log(What::Change {
                    subject: format!("reconciler {node}"),
                    change: format!("FAILED: {e}"),
                });
            }
        }
        for d in &r.deleted {
            let reason = r
                .cleanup
                .deletions
                .get(d.request)
                .map(|x| x.reason.clone())
                .unwrap_or_default();
            self.log(What::CleanupDelete {
                node: self.nodes[d.node].def.name.clone(),
                line: d.line.clone(),
                reason,
                entry: CtRecord::at(&d.entry, d.at),
            });
        }
    }
}
