//! Lookup and `conntrack_in`: the per-packet path, inline fast paths, ICMP errors.

use super::*;

impl Conntrack {
    // ----- lookup ------------------------------------------------------------------------

    #[inline]
    pub(crate) fn lookup(&self, t: &Tuple) -> Option<(usize, Dir)> {
        let k = Key::from_tuple(t);
        self.lookup_key(k.hash(&self.hseed), &k)
    }

    /// The slot and direction of the key `k` whose hash is `h`. Always inlined: the
    /// compiler's own choice, once the comparison went through [`Slim`]s, was a call.
    #[inline(always)]
    pub(super) fn lookup_key(&self, h: u32, k: &Key) -> Option<(usize, Dir)> {
        let ks = k.slim();
        self.index.find(h, |v| self.key_matches(v, k, ks)).map(|v| {
            let dir = if v & 1 == 0 {
                Dir::Original
            } else {
                Dir::Reply
            };
            ((v >> 1) as usize, dir)
        })
    }

    // ----- conntrack in ------------------------------------------------------------------

    /// "Conntrack in" (`nf_conntrack_in`) for a packet at PREROUTING or OUTPUT: find its
    /// entry by either tuple, or allocate an unconfirmed one (where `nf_conntrack_max`,
    /// early drop and "table full" apply), then run the protocol tracker. ICMP errors that
    /// quote a known connection are RELATED to it and create nothing.
    #[inline]
    pub fn conntrack_in(&mut self, now: SimTime, pkt: &Packet) -> CtVerdict {
        self.conntrack_in_then(now, pkt, || {})
    }

    /// [`Conntrack::conntrack_in`], calling `on_new` when the packet's tuple is in no entry,
    /// before the new entry is made: the caller can start on what a new flow will need
    /// next (a namespace asks the CPU for the nat rules it is about to walk). `on_new` must
    /// not change anything this call's outcome depends on.
    #[inline]
    pub fn conntrack_in_then(
        &mut self,
        now: SimTime,
        pkt: &Packet,
        on_new: impl FnOnce(),
    ) -> CtVerdict {
        let key = Key::from_packet(pkt);
        let h = key.hash(&self.hseed);
        self.conntrack_in_keyed(now, pkt, key, h, on_new)
    }

    /// [`Conntrack::conntrack_in`] for each packet of `pkts` in order, the verdicts appended
    /// to `out`: the same verdicts, entries, events and statistics as that many calls (with
    /// nothing in between: a new entry is not confirmed before the next packet).
    ///
    /// Faster on a large table: a single call waits for two dependent memory reads (the
    /// index line, then the entry), while this works as a pipeline over the packets: while
    /// it tracks packet `i`, it has asked the CPU (software prefetch) for the home index slot
    /// of packet `i +` [`BATCH`] and for the entry named by the home slot of packet
    /// `i + BATCH / 2`, so the cache misses of many packets are in flight at once and mostly
    /// over by the time each packet is tracked. Prefetches are hints: what the packets find
    /// is decided by the same reads as in `conntrack_in`. On a table small enough to stay in
    /// the caches it simply calls `conntrack_in` for each packet.
    pub fn conntrack_in_many(&mut self, now: SimTime, pkts: &[Packet], out: &mut Vec<CtVerdict>) {
        out.reserve(pkts.len());
        if self.index.slot_count() < READ_AHEAD_MIN_SLOTS {
            // A table this small stays in the caches: no misses to overlap.
            for p in pkts {
                out.push(self.conntrack_in(now, p));
            }
            return;
        }
        // Stages, by distance ahead of the packet being tracked: hash the key and prefetch
        // its home index slot (AHEAD_INDEX); read that slot and prefetch the entry it names
        // (AHEAD_ENTRY); compare that entry's key, and for a packet whose tuple is not at
        // home (most likely a new flow), prefetch the home slot of its reply tuple, which
        // the new entry's confirm will look up (AHEAD_CHECK).
        const AHEAD_INDEX: usize = BATCH;
        const AHEAD_ENTRY: usize = BATCH / 2;
        const AHEAD_CHECK: usize = 2;
        const RING: usize = 2 * BATCH;
        let n = pkts.len();
        let mut keys = [Key([0; 5]); RING];
        let mut hashes = [0u32; RING];
        let mut homes: [Option<u32>; RING] = [None; RING];
        for j in 0..AHEAD_INDEX.min(n) {
            self.stage_index(pkts, j, &mut keys, &mut hashes);
        }
        for j in 0..AHEAD_ENTRY.min(n) {
            homes[j % RING] = self.stage_entry(hashes[j % RING]);
        }
        for j in 0..AHEAD_CHECK.min(n) {
            self.stage_check(&keys[j % RING], homes[j % RING]);
        }
        for i in 0..n {
            let j = i + AHEAD_INDEX;
            if j < n {
                self.stage_index(pkts, j, &mut keys, &mut hashes);
            }
            let j = i + AHEAD_ENTRY;
            if j < n {
                homes[j % RING] = self.stage_entry(hashes[j % RING]);
            }
            let j = i + AHEAD_CHECK;
            if j < n {
                self.stage_check(&keys[j % RING], homes[j % RING]);
            }
            let r = i % RING;
            out.push(self.conntrack_in_keyed(now, &pkts[i], keys[r], hashes[r], || {}));
        }
    }

    /// Pipeline stage of `conntrack_in_many`: packet `j`'s key and hash into the ring, and a
    /// prefetch of its home index slot.
    #[inline(always)]
    fn stage_index(
        &self,
        pkts: &[Packet],
        j: usize,
        keys: &mut [Key; 2 * BATCH],
        hashes: &mut [u32; 2 * BATCH],
    ) {
        let r = j % (2 * BATCH);
        keys[r] = Key::from_packet(&pkts[j]);
        hashes[r] = keys[r].hash(&self.hseed);
        self.index.prefetch_home(hashes[r]);
    }

    /// Pipeline stage of `conntrack_in_many`: reads the home index slot of `hash` (fetched
    /// by then) and prefetches the entry it names (one line, whichever the direction).
    /// Returns the slot's value.
    #[inline(always)]
    fn stage_entry(&self, hash: u32) -> Option<u32> {
        let v = self.index.home_value(hash)?;
        if let Some(e) = self.slab.get((v >> 1) as usize) {
            sim_core::prefetch::line(e);
        }
        Some(v)
    }

    /// Pipeline stage of `conntrack_in_many`: if the entry at the key's home slot is not the
    /// key's, prefetch the home index slot of the key's reply tuple.
    #[inline(always)]
    fn stage_check(&self, key: &Key, home: Option<u32>) {
        if home.is_some_and(|v| {
            ((v >> 1) as usize) < self.slab.len() && self.key_matches(v, key, key.slim())
        }) {
            return;
        }
        if let Some(r) = key.swapped() {
            self.index.prefetch_home(r.hash(&self.hseed));
        }
    }

    /// [`Conntrack::conntrack_in`] with the packet's key and its hash computed.
    #[inline(always)]
    fn conntrack_in_keyed(
        &mut self,
        now: SimTime,
        pkt: &Packet,
        key: Key,
        h: u32,
        on_new: impl FnOnce(),
    ) -> CtVerdict {
        self.expire_due(now);
        if let L4::Icmp {
            icmp_type, body, ..
        } = pkt.l4
        {
            if icmp_is_error(pkt.is_ipv4(), icmp_type) {
                return self.icmp_error(now, pkt, body);
            }
        }
        let found = self.lookup_key(h, &key);
        #[cfg(test)]
        if self.general_only {
            return self.conntrack_in_general(now, pkt, key, h, found);
        }
        // The common cases, a packet of a known UDP flow and a plain ACK of an ESTABLISHED
        // TCP connection, without leaving this function: the same trackers and bookkeeping
        // as `conntrack_in_general`, only inlined, on one borrow of the entry.
        match found {
            Some((slot, dir)) => {
                if let Some(v) = self.track_inline(now, pkt, slot, dir) {
                    return v;
                }
            }
            None => on_new(),
        }
        self.conntrack_in_general(now, pkt, key, h, found)
    }

    /// The inline part of [`Conntrack::conntrack_in_keyed`]: a known UDP flow's packet
    /// (`track::udp`) or a plain ACK of an ESTABLISHED TCP entry (`track::tcp` for it), then
    /// the refresh and what `tracked` does. `None`: anything else, for the general path.
    #[inline(always)]
    fn track_inline(
        &mut self,
        now: SimTime,
        pkt: &Packet,
        slot: usize,
        dir: Dir,
    ) -> Option<CtVerdict> {
        let cfg = &self.cfg;
        let e = self.slab.get_mut(slot)?;
        if e.status.contains(Status::NAT_CLASH) {
            return None; // a clash entry's fixed timeout: `track::udp`
        }
        let seen_reply = e.status.contains(Status::SEEN_REPLY);
        let extra = match pkt.l4 {
            L4::Udp { .. } => crate::track::udp_known(e, cfg, now),
            L4::Tcp { flags, .. }
                if crate::track::tcp_is_plain_ack(flags)
                    && e.tcp_state() == TcpState::Established as u8 =>
            {
                let w = self.windows.get_mut(e.tcp_window())?;
                let seg = crate::tcp_window::Segment::of(pkt)?;
                let t = crate::track::tcp_established_ack(e, w, cfg, dir, &seg)?;
                #[cfg(test)]
                {
                    self.tcp_fast_hits += 1;
                }
                t
            }
            _ => return None,
        };
        let rearm = e.refresh(now, extra);
        let ctinfo = if dir == Dir::Reply {
            if !seen_reply {
                e.status.insert(Status::SEEN_REPLY);
                e.pending |= ev::REPLY;
            }
            CtInfo::EstablishedReply
        } else if seen_reply {
            CtInfo::Established
        } else {
            CtInfo::New
        };
        let id = EntryId {
            slot: slot as u32,
            gen: e.gen,
        };
        if let Some(t) = rearm {
            self.rearm_earlier(slot, t);
        }
        Some(CtVerdict::Tracked(CtHandle { id, ctinfo }))
    }

    /// The packet's `ctinfo` from its direction and the entry's status, before tracking.
    #[inline(always)]
    fn ctinfo_of(&self, slot: usize, dir: Dir) -> CtInfo {
        if dir == Dir::Reply {
            CtInfo::EstablishedReply
        } else if self.slab[slot].status.contains(Status::SEEN_REPLY) {
            CtInfo::Established
        } else {
            CtInfo::New
        }
    }

    /// After an accepting tracker: a first reply-direction packet sets `SEEN_REPLY`
    /// (`IPCT_REPLY`); the packet carries the entry.
    #[inline(always)]
    fn tracked(&mut self, slot: usize, dir: Dir, ctinfo: CtInfo) -> CtVerdict {
        let e = &mut self.slab[slot];
        if dir == Dir::Reply && !e.status.contains(Status::SEEN_REPLY) {
            e.status.insert(Status::SEEN_REPLY);
            e.pending |= ev::REPLY;
        }
        CtVerdict::Tracked(CtHandle {
            id: EntryId {
                slot: slot as u32,
                gen: e.gen,
            },
            ctinfo,
        })
    }

    /// [`Conntrack::conntrack_in`] for everything but a known UDP flow or a plain ACK of an
    /// ESTABLISHED TCP connection: allocation, the trackers, and their outcomes. `found` is
    /// the lookup of `key` (hash `h`).
    #[inline(never)]
    fn conntrack_in_general(
        &mut self,
        now: SimTime,
        pkt: &Packet,
        key: Key,
        h: u32,
        mut found: Option<(usize, Dir)>,
    ) -> CtVerdict {
        let mut repeated = false;
        loop {
            let (slot, dir, new) = match found {
                Some((slot, dir)) => (slot, dir, false),
                None => {
                    let reply = key.swapped().or_else(|| {
                        Tuple::from_packet(pkt)
                            .invert()
                            .map(|r| Key::from_tuple(&r))
                    });
                    let Some(reply) = reply else {
                        self.stats.invalid += 1;
                        return CtVerdict::Invalid(InvalidReason::CannotInvert);
                    };
                    match self.alloc(now, key, reply, h) {
                        Some(slot) => (slot, Dir::Original, true),
                        None => {
                            self.stats.drop += 1;
                            return CtVerdict::Drop(DropReason::TableFull);
                        }
                    }
                }
            };
            let ctinfo = self.ctinfo_of(slot, dir);
            match crate::track::track(self, now, slot, dir, pkt, new) {
                crate::track::Track::Accept => {}
                crate::track::Track::Invalid(r) => {
                    if new {
                        self.free_slot(slot);
                    }
                    self.stats.invalid += 1;
                    return CtVerdict::Invalid(r);
                }
                crate::track::Track::Kill => {
                    self.destroy(slot, now, DestroyCause::Killed, true);
                }
                crate::track::Track::Repeat => {
                    self.destroy(slot, now, DestroyCause::Killed, false);
                    if !repeated {
                        repeated = true;
                        found = self.lookup_key(h, &key);
                        continue;
                    }
                    self.stats.invalid += 1;
                    return CtVerdict::Invalid(InvalidReason::TcpInvalidState);
                }
            }
            return self.tracked(slot, dir, ctinfo);
        }
    }

    /// `nf_conntrack_inet_error`: an ICMP error is RELATED to the entry of the packet it
    /// quotes.
    fn icmp_error(&mut self, now: SimTime, pkt: &Packet, body: IcmpBody) -> CtVerdict {
        let IcmpBody::Error(inner) = body else {
            self.stats.error += 1;
            return CtVerdict::Invalid(InvalidReason::IcmpErrorMalformed);
        };
        let ports = crate::tuple::has_ports(inner.proto);
        let icmp = crate::tuple::is_icmp(inner.proto);
        let quoted = Tuple {
            src: inner.src,
            dst: inner.dst,
            sport: if ports || icmp { inner.sport } else { 0 },
            dport: if ports {
                inner.dport
            } else if icmp {
                u16::from(inner.icmp_type) << 8
            } else {
                0
            },
            proto: inner.proto,
        };
        let found = quoted
            .invert()
            .and_then(|t| self.lookup(&t))
            .filter(|(slot, _)| self.slab[*slot].timeout > now);
        let _ = pkt;
        match found {
            Some((slot, dir)) => CtVerdict::Tracked(CtHandle {
                id: self.id_of(slot),
                ctinfo: if dir == Dir::Reply {
                    CtInfo::RelatedReply
                } else {
                    CtInfo::Related
                },
            }),
            None => {
                self.stats.error += 1;
                CtVerdict::Invalid(InvalidReason::IcmpErrorNoMatch)
            }
        }
    }
}
