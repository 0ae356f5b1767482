//! The NAT core (`nf_nat_inet_fn`): for a connection's first packet the nat table (and the
//! nft nat chains) asked in priority order, the binding they set up (or a null binding), and
//! every packet rewritten from the conntrack entry alone (`nf_nat_packet`).

use super::*;

impl Netns {
    /// The nat table at a DNAT-type hook (PREROUTING, OUTPUT) or INPUT, then the rewrite.
    #[inline]
    pub(super) fn nat_hook(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        hook: Hook,
    ) -> Result<(), Fate> {
        let manip = match hook {
            Hook::PreRouting | Hook::Output => Manip::Dst,
            _ => Manip::Src,
        };
        let Some(h) = f.handle else {
            return Ok(());
        };
        if self.needs_nat_lookup(h, manip) {
            self.nat_lookup(now, f, h, manip, hook)?;
        }
        self.rewrite(f, h, manip, hook);
        Ok(())
    }

    /// A connection's first packet at a DNAT-type hook or INPUT: the nat table, and the
    /// binding it asks for.
    #[inline(never)]
    fn nat_lookup(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        h: CtHandle,
        manip: Manip,
        hook: Hook,
    ) -> Result<(), Fate> {
        let req = self.run_nat_table(now, f, hook)?;
        let range = match req {
            Some(NatRequest::Dnat(ref r)) | Some(NatRequest::Snat(ref r)) => Some(range_of(r)),
            Some(NatRequest::Redirect(ref p)) => {
                // nf_nat_redirect_ipv4: the incoming interface's primary address, or
                // 127.0.0.1 for locally generated packets. nf_nat_redirect_ipv6: ::1 for
                // locally generated packets, else the first address of the incoming
                // interface's list that is usable for the destination's scope
                // (nf_nat_redirect_ipv6_usable: a link-local destination only a link-local
                // address); the kernel keeps that list sorted by scope, widest first (as
                // `ip -6 addr` lists it), so a global address before a link-local one.
                let addr = match (f.pkt.iif, f.pkt.dst) {
                    (None, IpAddr::V4(_)) => Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
                    (None, IpAddr::V6(_)) => Some(IpAddr::V6(std::net::Ipv6Addr::LOCALHOST)),
                    (Some(dev), dst) => {
                        let addrs = self
                            .routes
                            .interfaces()
                            .iter()
                            .find(|i| i.name == dev)
                            .map(|i| i.addrs.as_slice())
                            .unwrap_or(&[]);
                        let link_local = |a: &IpAddr| matches!(a, IpAddr::V6(x) if x.segments()[0] & 0xffc0 == 0xfe80);
                        let of_family = addrs.iter().filter(|(a, _)| a.is_ipv4() == dst.is_ipv4());
                        if link_local(&dst) {
                            of_family.clone().find(|(a, _)| link_local(a))
                        } else {
                            of_family
                                .clone()
                                .find(|(a, _)| !link_local(a))
                                .or_else(|| of_family.clone().next())
                        }
                        .map(|&(a, _)| a)
                    }
                };
                match addr {
                    Some(a) => Some(port_range(a, p)),
                    None => return Err(Fate::Dropped(DropCause::NoMasqueradeAddress)),
                }
            }
            Some(NatRequest::Masquerade(_)) | None => None,
        };
        self.bind(f, h, manip, hook, range, req.as_ref())
    }

    /// The nat table at POSTROUTING (MASQUERADE needs the outgoing interface), then the
    /// rewrite.
    #[inline]
    pub(super) fn nat_postrouting(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        dev: IfName,
        next_hop: IpAddr,
    ) -> Result<(), Fate> {
        let Some(h) = f.handle else {
            return Ok(());
        };
        if self.needs_nat_lookup(h, Manip::Src) {
            self.nat_lookup_postrouting(now, f, h, dev, next_hop)?;
        }
        self.rewrite(f, h, Manip::Src, Hook::PostRouting);
        Ok(())
    }

    /// A connection's first packet at POSTROUTING: the nat table, and the binding it asks
    /// for (MASQUERADE's address from the outgoing interface).
    #[inline(never)]
    fn nat_lookup_postrouting(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        h: CtHandle,
        dev: IfName,
        next_hop: IpAddr,
    ) -> Result<(), Fate> {
        let manip = Manip::Src;
        let req = self.run_nat_table(now, f, Hook::PostRouting)?;
        let range = match &req {
            Some(NatRequest::Snat(r)) | Some(NatRequest::Dnat(r)) => Some(range_of(r)),
            Some(NatRequest::Masquerade(p)) => {
                // nf_nat_masquerade_ipv4: the outgoing interface's address for this next
                // hop (inet_select_addr); nf_nat_masquerade_ipv6: the source
                // `ipv6_dev_get_saddr` picks on the outgoing interface for the packet's
                // destination (nat_ipv6_dev_get_saddr); none → drop.
                let source = match f.pkt.dst {
                    IpAddr::V6(d) => self.routes.select_source_v6(Some(dev), d).map(IpAddr::V6),
                    IpAddr::V4(_) => self.routes.select_source(dev, next_hop),
                };
                match source {
                    Some(a) => Some(port_range(a, p)),
                    None => return Err(Fate::Dropped(DropCause::NoMasqueradeAddress)),
                }
            }
            _ => None,
        };
        self.bind(f, h, manip, Hook::PostRouting, range, req.as_ref())
    }

    /// Whether the nat table must be consulted (`nf_nat_inet_fn`): ctinfo NEW or RELATED and
    /// NAT of this manip type not yet set up.
    #[inline]
    fn needs_nat_lookup(&self, h: CtHandle, manip: Manip) -> bool {
        use sim_conntrack::CtInfo as K;
        matches!(h.ctinfo, K::New | K::Related | K::RelatedReply)
            && !self.conntrack.nat_initialized(h.id, manip)
    }

    fn run_nat_table(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        hook: Hook,
    ) -> Result<Option<NatRequest>, Fate> {
        if self.has_nft_nat(f, hook) {
            return self.nat_lookups(now, f, hook);
        }
        self.run_iptables_nat(now, f, hook)
    }

    /// The iptables nat table's lookup for a connection's first packet at `hook`.
    pub(super) fn run_iptables_nat(
        &mut self,
        now: SimTime,
        f: &mut Flight,
        hook: Hook,
    ) -> Result<Option<NatRequest>, Fate> {
        let table = Table::Nat;
        let verdict = match self.replay(f, table, hook) {
            Some(v) => v,
            None => self.eval(now, f, table, hook),
        };
        match verdict.action {
            Action::Accept => Ok(verdict.nat),
            Action::Drop => Err(Fate::Dropped(DropCause::Rule { table, hook })),
            Action::Reject(_) => Err(Fate::Rejected { table, hook }),
        }
    }

    /// Sets up the binding (or a null binding) for a new connection.
    fn bind(
        &mut self,
        f: &mut Flight,
        h: CtHandle,
        manip: Manip,
        hook: Hook,
        range: Option<NatRange>,
        req: Option<&NatRequest>,
    ) -> Result<(), Fate> {
        let what = f.trace.as_ref().map(|_| match (req, &range) {
            (Some(NatRequest::Dnat(_)), Some(r)) => format!("DNAT to {r}"),
            (Some(NatRequest::Snat(_)), Some(r)) => format!("SNAT to {r}"),
            (Some(NatRequest::Masquerade(_)), Some(r)) => format!("MASQUERADE to {r}"),
            (Some(NatRequest::Redirect(_)), Some(r)) => format!("REDIRECT to {r}"),
            _ => "null binding (no nat rule matched)".to_string(),
        });
        f.view = None;
        // A NAT target of the wrong manip type for this hook cannot be in a valid ruleset
        // (iptables refuses DNAT in POSTROUTING); treat it as no mapping.
        // No copy of the entry unless a trace shows its reply tuple.
        let result = match range {
            Some(r) => self.conntrack.nat_bind(h.id, manip, &r),
            None => self.conntrack.nat_null_bind(h.id, manip),
        };
        match result {
            Ok(()) => {
                if let Some(what) = what {
                    let reply = self
                        .conntrack
                        .get(h.id)
                        .map(|e| tuple_text(&e.reply))
                        .unwrap_or_default();
                    Self::step(f, |_| Step::NatSetup {
                        hook,
                        manip,
                        what,
                        reply,
                    });
                }
                Ok(())
            }
            Err(e) => Err(Fate::Dropped(DropCause::Nat(e.to_string()))),
        }
    }

    #[inline]
    fn rewrite(&mut self, f: &mut Flight, h: CtHandle, manip: Manip, hook: Hook) {
        if f.trace.is_none() {
            self.conntrack.nat_packet(h, manip, &mut f.pkt);
            return;
        }
        self.rewrite_traced(f, h, manip, hook);
    }

    #[inline(never)]
    fn rewrite_traced(&mut self, f: &mut Flight, h: CtHandle, manip: Manip, hook: Hook) {
        let before = f.trace.as_ref().map(|_| f.pkt);
        if self.conntrack.nat_packet(h, manip, &mut f.pkt) {
            if let Some(before) = before {
                Self::step(f, |p| Step::Rewrite {
                    hook,
                    before: before.to_string(),
                    after: p.to_string(),
                });
            }
        }
    }
}

fn range_of(r: &crate::rule::NatRange) -> NatRange {
    NatRange {
        addrs: r.addrs,
        ports: r.ports,
        random: r.random,
        random_fully: r.random_fully,
        persistent: r.persistent,
    }
}

fn port_range(addr: IpAddr, p: &PortNat) -> NatRange {
    NatRange {
        addrs: Some((addr, addr)),
        ports: p.ports,
        random: p.random,
        random_fully: p.random_fully,
        persistent: false,
    }
}
