//! The conntrack side of the pipeline: "conntrack in" at PREROUTING/OUTPUT, the confirm
//! hook, and a conntrack entry as the rules see it (`-m conntrack`, `-m state`) and as the
//! trace prints it.

use super::*;

fn ct_tuple(t: TupleV4) -> CtTuple {
    CtTuple {
        src: t.src.into(),
        dst: t.dst.into(),
        proto: t.proto,
        sport: t.sport,
        dport: t.dport,
    }
}

pub(super) fn tuple_text(t: &Tuple) -> String {
    if sim_conntrack::tuple::has_ports(t.proto) {
        format!(
            "src={} dst={} sport={} dport={}",
            t.src, t.dst, t.sport, t.dport
        )
    } else {
        format!("src={} dst={}", t.src, t.dst)
    }
}

/// Whether `pkt` is an ICMPv6 message conntrack leaves untracked (`noct_valid_new` of
/// nf_conntrack_proto_icmpv6.c): MLD query, report and done (130–132), router solicitation
/// and advertisement (133, 134), neighbour solicitation and advertisement (135, 136), MLDv2
/// report (143).
fn is_icmpv6_noct(pkt: &Packet) -> bool {
    matches!(
        pkt.l4,
        sim_core::L4::Icmp { icmp_type: 130..=136 | 143, .. } if !pkt.is_ipv4()
    )
}

/// What `--ctstate` calls a packet's ctinfo.
pub(super) fn ct_info_kind(ctinfo: sim_conntrack::CtInfo) -> CtInfoKind {
    use sim_conntrack::CtInfo as K;
    match ctinfo {
        K::New => CtInfoKind::New,
        K::Established | K::EstablishedReply => CtInfoKind::Established,
        K::Related | K::RelatedReply => CtInfoKind::Related,
    }
}

/// The conntrack view rules see for a packet holding `handle`.
pub(super) fn ct_state_of(
    ct: &Conntrack,
    handle: Option<CtHandle>,
    untracked: bool,
    now: SimTime,
) -> CtState {
    if untracked {
        return CtState::Untracked;
    }
    let Some(h) = handle else {
        return CtState::Invalid;
    };
    let Some(e) = ct.rule_view(h.id) else {
        return CtState::Invalid;
    };
    let info = ct_info_kind(h.ctinfo);
    let dir = match h.dir() {
        Dir::Original => CtDirection::Original,
        Dir::Reply => CtDirection::Reply,
    };
    // `--ctexpire` compares nf_ct_expires(ct) / HZ: the whole seconds left. An unconfirmed
    // entry still holds its timeout relative (nf_ct_expires subtracts the jiffies stamp from
    // it), which on any host up longer than the timeout plus 5 minutes is negative: 0. Measured
    // on a 6.x kernel: a connection's first packet sees 0, the next one 29 (UDP, 30 s).
    let expires = match e.expiry {
        Expiry::At(t) => t.saturating_since(now).as_secs(),
        Expiry::AfterConfirm(_) => 0,
    };
    CtState::Tracked(CtInfo {
        info,
        dir,
        status: u32::from(e.status.0),
        orig: ct_tuple(e.orig),
        reply: ct_tuple(e.reply),
        mark: e.mark,
        expires_secs: u32::try_from(expires).unwrap_or(u32::MAX),
    })
}

fn ct_state_text(state: &CtState) -> String {
    match state {
        CtState::Invalid => "INVALID".into(),
        CtState::Untracked => "UNTRACKED".into(),
        CtState::Tracked(i) => {
            let mut s = match i.info {
                CtInfoKind::New => "NEW".to_string(),
                CtInfoKind::Established => "ESTABLISHED".to_string(),
                CtInfoKind::Related => "RELATED".to_string(),
            };
            if i.dir == CtDirection::Reply {
                s.push_str(" (reply direction)");
            }
            s
        }
    }
}
impl Netns {
    /// "Conntrack in" at PREROUTING/OUTPUT. Returns a fate when conntrack drops the packet.
    #[inline]
    pub(super) fn conntrack_in(&mut self, now: SimTime, f: &mut Flight) -> Option<Fate> {
        if f.handle.is_some() {
            // Already tracked: a packet looped back through lo.
            return None;
        }
        if f.untracked {
            Self::step(f, |_| Step::Conntrack {
                state: "UNTRACKED".into(),
                entry: None,
            });
            return None;
        }
        if is_icmpv6_noct(&f.pkt) {
            // nf_conntrack_icmpv6_error: MLD and neighbour discovery messages are never
            // tracked (`noct_valid_new`): nf_ct_set(skb, NULL, IP_CT_UNTRACKED), no entry,
            // no `invalid` count. Checked on Linux 6.18: a neighbour solicitation and advert
            // on a TUN link match `ct state untracked`, an echo reply without request
            // `ct state invalid`.
            f.untracked = true;
            Self::step(f, |_| Step::Conntrack {
                state: "UNTRACKED (ICMPv6 neighbour discovery / MLD)".into(),
                entry: None,
            });
            return None;
        }
        // A packet of no known flow walks the nat table next: ask for its rules now, so
        // that they load while conntrack makes the entry (`hint.rs`; for nftables,
        // `NftProgram::prefetch_new_flow`).
        let (ruleset, state, nft) = (&self.ruleset, &self.rules_state, &self.nft_fast);
        let pkt = &f.pkt;
        let v = self.conntrack.conntrack_in_then(now, pkt, || {
            ruleset.prefetch_new_flow(state, pkt);
            nft.prefetch_new_flow(pkt);
        });
        match v {
            CtVerdict::Tracked(h) if f.trace.is_none() => {
                f.handle = Some(h);
                f.view = None;
                None
            }
            v => self.conntrack_in_rare(now, f, v),
        }
    }

    /// [`Netns::conntrack_in`]'s outcomes other than an untraced tracked packet.
    #[inline(never)]
    fn conntrack_in_rare(&mut self, now: SimTime, f: &mut Flight, v: CtVerdict) -> Option<Fate> {
        match v {
            CtVerdict::Tracked(h) => {
                f.handle = Some(h);
                f.view = None;
                if f.trace.is_some() {
                    let st = ct_state_text(&ct_state_of(&self.conntrack, f.handle, false, now));
                    let entry = self
                        .conntrack
                        .get(h.id)
                        .map(|e| e.list_line(now).to_string());
                    Self::step(f, |_| Step::Conntrack { state: st, entry });
                }
                None
            }
            CtVerdict::Invalid(reason) => {
                Self::step(f, |_| Step::Conntrack {
                    state: format!("INVALID ({reason:?})"),
                    entry: None,
                });
                None
            }
            CtVerdict::Drop(_) => {
                Self::step(f, |_| Step::Conntrack {
                    state: "dropped: nf_conntrack: table full, dropping packet".into(),
                    entry: None,
                });
                Some(Fate::Dropped(DropCause::TableFull))
            }
        }
    }

    /// The confirm hook. Returns a fate when the packet is dropped here.
    #[inline]
    pub(super) fn confirm(&mut self, now: SimTime, f: &mut Flight) -> Option<Fate> {
        let h = f.handle?;
        if f.trace.is_some() {
            return self.confirm_traced(now, f, h);
        }
        match self.conntrack.confirm_resolving(now, h) {
            Ok(None) => None,
            Ok(Some(merged)) => Self::clash_merged(f, merged),
            Err(e) => Self::confirm_failed(f, e),
        }
    }

    /// A new entry that lost a confirm race and was merged onto the winner's: the packet
    /// holds the winner from here on (`__nf_ct_resolve_clash`: `nf_ct_set`).
    #[cold]
    fn clash_merged(f: &mut Flight, merged: CtHandle) -> Option<Fate> {
        f.handle = Some(merged);
        f.view = None;
        None
    }

    /// [`Netns::confirm`] with a trace, which says when an entry enters the table.
    #[inline(never)]
    fn confirm_traced(&mut self, now: SimTime, f: &mut Flight, h: CtHandle) -> Option<Fate> {
        let was_confirmed = self
            .conntrack
            .get(h.id)
            .map(|e| e.status.contains(Status::CONFIRMED))
            .unwrap_or(true);
        match self.conntrack.confirm_resolving(now, h) {
            Ok(Some(merged)) => {
                let line = self
                    .conntrack
                    .get(merged.id)
                    .map(|e| e.list_line(now).to_string())
                    .unwrap_or_default();
                Self::step(f, |_| {
                    Step::Confirm(format!(
                        "clash resolved onto the entry in the table: {line}"
                    ))
                });
                Self::clash_merged(f, merged)
            }
            Ok(None) => {
                if !was_confirmed {
                    let line = self
                        .conntrack
                        .get(h.id)
                        .map(|e| e.list_line(now).to_string())
                        .unwrap_or_default();
                    Self::step(f, |_| Step::Confirm(line));
                }
                None
            }
            Err(e) => Self::confirm_failed(f, e),
        }
    }

    /// A confirm that failed: the packet loses its entry, and is dropped on a clash.
    #[cold]
    fn confirm_failed(f: &mut Flight, e: ConfirmError) -> Option<Fate> {
        f.handle = None;
        f.view = None;
        match e {
            ConfirmError::InsertFailed(_) => Some(Fate::Dropped(DropCause::InsertFailed)),
            ConfirmError::NoEntry(_) => None,
        }
    }

    /// A packet that stops before confirm releases its new entry without events.
    pub(super) fn dropped(&mut self, now: SimTime, f: &mut Flight, fate: Fate) -> Fate {
        if let Some(h) = f.handle {
            self.conntrack.discard(now, h);
        }
        fate
    }
}
