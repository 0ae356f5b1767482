//! An entry's life: allocation and early drop, confirm / discard, destroy, expiry, events.

use super::*;
use crate::kernel::ClashHandling;

impl Conntrack {
    /// `__nf_conntrack_alloc`: a new unconfirmed entry, after early drop if the table is
    /// full. `None` = table full.
    pub(super) fn alloc(
        &mut self,
        now: SimTime,
        orig: Key,
        reply: Key,
        hash: u32,
    ) -> Option<usize> {
        if self.cfg.max != 0 && self.count >= self.cfg.max && !self.early_drop(now, hash) {
            return None;
        }
        self.count += 1;
        let seq = self.next_seq;
        self.next_seq += 1;
        // nf_ct_tstamp_ext_add at init_conntrack when nf_conntrack_timestamp is 1; the start
        // is written at confirmation (__nf_conntrack_confirm), the same instant here.
        let start = if self.cfg.timestamp {
            sim_ns(now)
        } else {
            NO_START
        };
        let fresh = |gen: u32| Entry {
            keys: [Slim::default(); 2],
            timeout: SimTime::ZERO,
            armed: SimTime::MAX,
            proto_state: [0; 8],
            gen,
            status: Status::default(),
            pending: 0,
            life: Life::Unconfirmed,
        };
        let slot = match self.free.pop() {
            Some(s) => {
                let s = s as usize;
                let gen = self.slab[s].gen;
                self.slab[s] = fresh(gen);
                self.marks[s] = 0;
                self.seqs[s] = seq;
                self.starts[s] = start;
                s
            }
            None => {
                self.slab.push(fresh(0));
                self.marks.push(0);
                self.seqs.push(seq);
                self.starts.push(start);
                self.slab.len() - 1
            }
        };
        self.set_keys(slot, orig, reply);
        Some(slot)
    }

    /// `early_drop`: from the new tuple's bucket, up to [`EVICTION_RANGE`] buckets, drop every
    /// non-ASSURED entry of the first bucket that has any.
    fn early_drop(&mut self, now: SimTime, hash: u32) -> bool {
        let nb = self.cfg.buckets.max(1);
        let mut bucket = reciprocal_scale(hash, nb);
        let mut members = std::mem::take(&mut self.scratch);
        for i in 0..EVICTION_RANGE {
            if i > 0 {
                bucket = (bucket + 1) % nb;
            }
            self.index.bucket_members(bucket, nb, &mut members);
            let mut drops = 0u64;
            for &v in &members {
                let slot = (v >> 1) as usize;
                let e = &self.slab[slot];
                if e.life != Life::Confirmed || e.status.contains(Status::ASSURED) {
                    continue;
                }
                self.destroy(slot, now, DestroyCause::EarlyDrop, false);
                drops += 1;
            }
            if drops > 0 {
                self.stats.early_drop += drops;
                self.scratch = members;
                return true;
            }
        }
        self.scratch = members;
        false
    }

    /// Sets an entry's timeout to `now + extra` (`nf_ct_refresh`): replaced, never max'd.
    #[inline(always)]
    pub(crate) fn refresh(&mut self, slot: usize, now: SimTime, extra: sim_core::SimDuration) {
        if let Some(t) = self.slab[slot].refresh(now, extra) {
            self.rearm_earlier(slot, t);
        }
    }

    /// A confirmed entry's deadline moved earlier, to `t`: arm a timer there unless one is
    /// armed sooner.
    #[inline(never)]
    pub(super) fn rearm_earlier(&mut self, slot: usize, t: SimTime) {
        let e = &mut self.slab[slot];
        if t < e.armed && e.life == Life::Confirmed {
            e.armed = t;
            self.timers.push(Reverse(Timer::new(t, slot as u32)));
        }
    }

    // ----- confirm / discard -------------------------------------------------------------

    /// The confirm hook (`nf_conntrack_confirm`), at POSTROUTING or INPUT: a new entry enters
    /// the table (`[NEW]`) and its timeout starts; then the events this packet caused are
    /// delivered. A handle of an entry killed on the way (RST before reply) is released.
    #[inline]
    pub fn confirm(&mut self, now: SimTime, handle: CtHandle) -> Result<(), ConfirmError> {
        self.confirm_resolving(now, handle).map(|_| ())
    }

    /// [`Conntrack::confirm`], saying which entry the packet holds afterwards: `Some(h)` when
    /// its new entry lost a confirm race and the clash was resolved by merging it onto the
    /// entry already in the table (`__nf_ct_resolve_clash`: `nf_ct_set(skb, ct, ctinfo)`),
    /// `None` when it keeps its own.
    #[inline]
    pub fn confirm_resolving(
        &mut self,
        now: SimTime,
        handle: CtHandle,
    ) -> Result<Option<CtHandle>, ConfirmError> {
        self.expire_due(now);
        // The common case, a packet of a confirmed entry with no event to deliver, without a
        // call: what `confirm_general` and `deliver` do for it.
        let events = self.cfg.events != 0;
        if let Some(e) = self.slab.get_mut(handle.id.slot as usize) {
            if e.gen == handle.id.gen && e.life == Life::Confirmed && (e.pending == 0 || !events) {
                e.pending = 0;
                return Ok(None);
            }
        }
        self.confirm_general(now, handle)
    }

    /// [`Conntrack::confirm`] of a new, dying or gone entry, or one with events to deliver.
    #[inline(never)]
    fn confirm_general(
        &mut self,
        now: SimTime,
        handle: CtHandle,
    ) -> Result<Option<CtHandle>, ConfirmError> {
        self.expire_due(now);
        let Some(slot) = self.slot_of(handle.id) else {
            return Err(ConfirmError::NoEntry(handle.id));
        };
        match self.slab[slot].life {
            Life::Dying => {
                self.free_slot(slot);
                return Ok(None);
            }
            Life::Unconfirmed => {
                // The packet another CPU confirmed meanwhile is in the table by now.
                self.race_reveal();
                let (o, r) = (self.key(slot, 0), self.key(slot, 1));
                let ho = o.hash(&self.hseed);
                let hr = r.hash(&self.hseed);
                // __nf_conntrack_confirm: the original tuple's bucket, then the reply's.
                if let Some((winner, _)) =
                    self.lookup_key(ho, &o).or_else(|| self.lookup_key(hr, &r))
                {
                    return self.resolve_clash(now, handle, slot, winner, hr);
                }
                let v = (slot as u32) << 1;
                // The reply key goes in first so that, as with the kernel's head insertion of
                // the reply tuplehash after the original, a connection whose two tuples are
                // equal (a packet to itself) is found in the reply direction.
                self.index.insert(hr, v | 1);
                self.index.insert(ho, v);
                let e = &mut self.slab[slot];
                let deadline = now.saturating_add(e.timeout.since_start());
                e.timeout = deadline;
                e.armed = deadline;
                e.life = Life::Confirmed;
                e.status.insert(Status::CONFIRMED);
                e.pending |= ev::NEW;
                self.timers.push(Reverse(Timer::new(deadline, slot as u32)));
                self.confirmed += 1;
            }
            Life::Confirmed | Life::Free => {}
        }
        self.deliver(slot, now);
        Ok(None)
    }

    /// `nf_ct_resolve_clash`: the new entry in `loser` found `winner` in the table with one
    /// of its tuples (`hr`: the hash of the loser's reply key). By the table's kernel release
    /// ([`ClashHandling`]) the loser's packet is merged onto the winner, given a reply-only
    /// `IPS_NAT_CLASH` entry (`nf_ct_resolve_clash_harder`), or dropped; the counters are the
    /// release's (before 5.10 every clash counts `insert_failed`, a resolved one nothing else;
    /// from 5.10 a resolved one counts `clash_resolve` only). Only UDP allows clashes
    /// (`l4proto->allow_clash`).
    #[cold]
    fn resolve_clash(
        &mut self,
        now: SimTime,
        handle: CtHandle,
        loser: usize,
        winner: usize,
        hr: u32,
    ) -> Result<Option<CtHandle>, ConfirmError> {
        let k = self.kernel;
        let udp = self.slab[loser].keys[0].proto() == sim_core::packet::IPPROTO_UDP;
        let resolved = |st: &mut Stats| {
            if k.counts_clash_resolve() {
                st.clash_resolve += 1;
            } else {
                st.insert_failed += 1;
            }
        };
        if udp && self.clash_mergeable(winner, loser) {
            resolved(&mut self.stats);
            self.free_slot(loser);
            return Ok(Some(CtHandle {
                id: self.id_of(winner),
                ctinfo: handle.ctinfo,
            }));
        }
        if udp && k.clash() == ClashHandling::InsertClash {
            // nf_ct_resolve_clash_harder: the reply direction must not clash, unless with an
            // entry the loser can be merged onto (a clash entry with the same NAT).
            let r = self.key(loser, 1);
            match self.lookup_key(hr, &r) {
                Some((other, _)) => {
                    if self.clash_mergeable(other, loser) {
                        resolved(&mut self.stats);
                        self.free_slot(loser);
                        return Ok(Some(CtHandle {
                            id: self.id_of(other),
                            ctinfo: handle.ctinfo,
                        }));
                    }
                }
                None => {
                    // Inserted by its reply tuple only ("fake add" of the original), 1 s,
                    // IPS_FIXED_TIMEOUT | IPS_NAT_CLASH; no [NEW] event is cached for it.
                    let v = (loser as u32) << 1;
                    self.index.insert(hr, v | 1);
                    let e = &mut self.slab[loser];
                    let deadline = now.saturating_add(sim_core::SimDuration::from_secs(1));
                    e.timeout = deadline;
                    e.armed = deadline;
                    e.life = Life::Confirmed;
                    e.status.insert(Status::CONFIRMED);
                    e.status.insert(Status::FIXED_TIMEOUT);
                    e.status.insert(Status::NAT_CLASH);
                    e.pending = 0;
                    self.timers
                        .push(Reverse(Timer::new(deadline, loser as u32)));
                    self.confirmed += 1;
                    resolved(&mut self.stats);
                    return Ok(None);
                }
            }
        }
        self.stats.drop += 1;
        self.stats.insert_failed += 1;
        self.free_slot(loser);
        Err(ConfirmError::InsertFailed(handle.id))
    }

    /// Whether `__nf_ct_resolve_clash` merges `loser` onto `other`: `other` is not dying
    /// and has no NAT binding (`IPS_NAT_DONE_MASK` clear), or, from 4.19 (ed07d9a021df),
    /// both have the same tuples in both directions (`nf_ct_match`).
    fn clash_mergeable(&self, other: usize, loser: usize) -> bool {
        let w = &self.slab[other];
        if w.life != Life::Confirmed || w.status.contains(Status::DYING) {
            return false;
        }
        let done = Status(Status::SRC_NAT_DONE.0 | Status::DST_NAT_DONE.0);
        if !w.status.intersects(done) {
            return true;
        }
        self.kernel.clash() != ClashHandling::MergeUnNatted
            && self.key(other, 0) == self.key(loser, 0)
            && self.key(other, 1) == self.key(loser, 1)
    }

    // ----- races between CPUs --------------------------------------------------------------

    /// Another CPU is about to process a packet while the packet that created entry `id`
    /// has not been confirmed yet from that CPU's point of view (its `conntrack_in` and NAT
    /// ran before the entry entered the table): the entry's keys leave the index until the
    /// next [`Conntrack::confirm`] of a new entry, [`Conntrack::discard`] or
    /// [`Conntrack::race_reveal`], so that the packet finds no entry, gets an unconfirmed one
    /// of its own and meets the winner only at its confirmation (the clash). Returns false,
    /// hiding nothing, when `id` is no confirmed entry of the table (or a clash entry).
    pub fn race_hide(&mut self, id: EntryId) -> bool {
        self.race_reveal();
        let Some(slot) = self.slot_of(id) else {
            return false;
        };
        let e = &self.slab[slot];
        if e.life != Life::Confirmed || e.status.contains(Status::NAT_CLASH) {
            return false;
        }
        let (o, r) = (self.key(slot, 0), self.key(slot, 1));
        let v = (slot as u32) << 1;
        self.index.remove(o.hash(&self.hseed), v);
        self.index.remove(r.hash(&self.hseed), v | 1);
        self.hidden = Some((slot as u32, id.gen));
        true
    }

    /// Puts an entry [`Conntrack::race_hide`] took out back into the index (if it is still
    /// there); nothing when none is hidden.
    pub fn race_reveal(&mut self) {
        let Some((slot, gen)) = self.hidden.take() else {
            return;
        };
        let s = slot as usize;
        let e = &self.slab[s];
        if e.gen != gen || e.life != Life::Confirmed {
            return;
        }
        let (o, r) = (self.key(s, 0), self.key(s, 1));
        let v = slot << 1;
        self.index.insert(r.hash(&self.hseed), v | 1);
        self.index.insert(o.hash(&self.hseed), v);
    }

    /// A packet holding `handle` was dropped or consumed before any confirm hook: a new
    /// entry vanishes without an event (`nf_ct_put` of an unconfirmed entry). For a confirmed
    /// entry nothing happens; its pending events wait for the next packet's confirm.
    pub fn discard(&mut self, now: SimTime, handle: CtHandle) {
        let _ = now;
        self.race_reveal();
        if let Some(slot) = self.slot_of(handle.id) {
            if matches!(self.slab[slot].life, Life::Unconfirmed | Life::Dying) {
                self.free_slot(slot);
            }
        }
    }

    pub(super) fn deliver(&mut self, slot: usize, now: SimTime) {
        let pending = std::mem::take(&mut self.slab[slot].pending);
        if pending == 0 || self.cfg.events == 0 {
            return;
        }
        let kind = if pending & ev::NEW != 0 {
            EventKind::New
        } else {
            EventKind::Update
        };
        let entry = self.snapshot(slot);
        self.events.push(CtEvent {
            at: now,
            kind,
            cause: None,
            entry,
        });
    }

    // ----- destroy, free -----------------------------------------------------------------

    /// Removes a confirmed entry from the table with a DESTROY event stamped `at`. With
    /// `keep_slot` the slot stays (Dying) until its packet's handle is released.
    pub(super) fn destroy(
        &mut self,
        slot: usize,
        at: SimTime,
        cause: DestroyCause,
        keep_slot: bool,
    ) {
        if self.slab[slot].life != Life::Confirmed {
            if !keep_slot {
                self.free_slot(slot);
            }
            return;
        }
        let (o, r) = (self.key(slot, 0), self.key(slot, 1));
        let v = (slot as u32) << 1;
        self.index.remove(o.hash(&self.hseed), v);
        self.index.remove(r.hash(&self.hseed), v | 1);
        self.confirmed -= 1;
        if self.cfg.events != 0 {
            let mut entry = self.snapshot(slot);
            entry.status.insert(Status::DYING);
            self.events.push(CtEvent {
                at,
                kind: EventKind::Destroy,
                cause: Some(cause),
                entry,
            });
        }
        let e = &mut self.slab[slot];
        e.status.insert(Status::DYING);
        e.pending = 0;
        if keep_slot {
            e.life = Life::Dying;
        } else {
            self.free_slot(slot);
        }
    }

    pub(super) fn free_slot(&mut self, slot: usize) {
        if self.slab[slot].life == Life::Free {
            return;
        }
        let o = self.key(slot, 0);
        if !self.wide.is_empty() {
            self.wide.remove(&(slot as u32));
        }
        let e = &mut self.slab[slot];
        if e.keys[0].proto() == IPPROTO_TCP {
            self.windows.release(e.tcp_window());
            e.set_tcp_window(0);
        }
        let nat_src = e.status.contains(Status::SRC_NAT);
        let id = EntryId {
            slot: slot as u32,
            gen: e.gen,
        };
        e.life = Life::Free;
        e.gen = e.gen.wrapping_add(1);
        e.armed = SimTime::MAX;
        e.pending = 0;
        self.count -= 1;
        self.free.push(slot as u32);
        if nat_src {
            let o = o.tuple();
            self.bysource.remove((o.proto, o.src, o.sport), id);
        }
    }

    // ----- expiry --------------------------------------------------------------------------

    /// [`Conntrack::expire`] when a timer is due, else nothing: one comparison with the
    /// earliest timer, so a packet that expires nothing pays nothing more.
    #[inline]
    pub(super) fn expire_due(&mut self, now: SimTime) {
        if matches!(self.timers.peek(), Some(&Reverse(t)) if t.at() <= now) {
            self.expire(now);
        }
    }

    /// Reaps every entry whose timeout is ≤ `now`, in deadline order, each with a DESTROY
    /// event stamped with its exact expiry instant. O(log n) per timer.
    pub fn expire(&mut self, now: SimTime) {
        while let Some(&Reverse(timer)) = self.timers.peek() {
            let (t, slot) = (timer.at(), timer.slot());
            if t > now {
                break;
            }
            self.timers.pop();
            let s = slot as usize;
            let e = &self.slab[s];
            if e.life != Life::Confirmed || e.armed != t {
                continue; // stale timer
            }
            if e.timeout <= t {
                let at = e.timeout;
                self.destroy(s, at, DestroyCause::Timeout, false);
            } else {
                // Refreshed since it was armed: re-arm at the current deadline (even if that
                // too is past, so that DESTROY events come out in deadline order).
                let d = e.timeout;
                self.slab[s].armed = d;
                self.timers.push(Reverse(Timer::new(d, slot)));
            }
        }
    }

    /// The next instant an entry expires, if any (quinn's `poll_timeout`). Exact: stale
    /// timers left by refreshes are re-armed here, which is why it takes `&mut self`.
    pub fn next_expiry(&mut self) -> Option<SimTime> {
        while let Some(&Reverse(timer)) = self.timers.peek() {
            let (t, slot) = (timer.at(), timer.slot());
            let s = slot as usize;
            let e = &self.slab[s];
            if e.life != Life::Confirmed || e.armed != t {
                self.timers.pop();
                continue;
            }
            if e.timeout == t {
                return Some(t);
            }
            let d = e.timeout;
            self.timers.pop();
            self.slab[s].armed = d;
            self.timers.push(Reverse(Timer::new(d, slot)));
        }
        None
    }

    // ----- events --------------------------------------------------------------------------

    /// Takes the events recorded so far, oldest first.
    pub fn drain_events(&mut self) -> Vec<CtEvent> {
        std::mem::take(&mut self.events)
    }

    /// Events recorded and not yet drained.
    pub fn pending_events(&self) -> &[CtEvent] {
        &self.events
    }
}
