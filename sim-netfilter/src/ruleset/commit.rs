//! Committing a table block: validation, counter slots and the recent/nfacct registries.

use super::*;

impl Ruleset {
    /// Validates and installs a block. Errors carry the line of the offending rule when known.
    #[allow(clippy::type_complexity)]
    pub(super) fn commit(
        &mut self,
        mut b: Block,
    ) -> Result<(), (Option<(usize, String)>, RestoreErrorKind)> {
        let ti = b.table.index();
        if !b.touched {
            if b.flush {
                self.release_table(ti);
                self.tables[ti] = None;
            }
            return Ok(());
        }
        let old = self.tables[ti].take();
        let modified: Vec<u32> = (0..b.work.chains.len() as u32)
            .filter(|&id| {
                let Some(new) = &b.work.chains[id as usize] else {
                    return false;
                };
                match old.as_ref().and_then(|o| o.chains.get(id as usize)) {
                    Some(Some(oc)) => !Arc::ptr_eq(oc, new),
                    _ => true,
                }
            })
            .collect();
        // Resolve jumps of modified chains.
        for &id in &modified {
            let resolved: Vec<Result<Option<u32>, String>> = b
                .work
                .chain(id)
                .rules
                .iter()
                .map(|r| match r.jump_target() {
                    None => Ok(None),
                    Some(t) => b.work.id(t).map(Some).ok_or_else(|| t.to_string()),
                })
                .collect();
            for (i, res) in resolved.into_iter().enumerate() {
                let kind = match res {
                    Ok(None) => continue,
                    Ok(Some(tid)) if b.work.chain(tid).hook.is_none() => {
                        if let Target::Jump(c) | Target::Goto(c) =
                            &mut b.work.chain_mut(id).rules[i].target
                        {
                            c.id = Bind { idx: tid, uid: 0 };
                        }
                        continue;
                    }
                    Ok(Some(tid)) => {
                        RestoreErrorKind::JumpToBuiltin(b.work.chain(tid).name.clone())
                    }
                    Err(t) => RestoreErrorKind::DanglingJump {
                        target: t,
                        from: b.work.chain(id).name.clone(),
                    },
                };
                let target = match &kind {
                    RestoreErrorKind::JumpToBuiltin(t) => t.clone(),
                    RestoreErrorKind::DanglingJump { target, .. } => target.clone(),
                    _ => String::new(),
                };
                self.tables[ti] = old;
                let h = name_hash(&target);
                let line = b
                    .jump_lines
                    .iter()
                    .rev()
                    .find(|(_, c, t)| *c == id && *t == h)
                    .map(|(l, _, _)| (*l, String::new()));
                return Err((line, kind));
            }
        }
        if let Err(k) = validate(&b.work, b.table) {
            self.tables[ti] = old;
            return Err((None, k));
        }
        for &id in &modified {
            for r in &b.work.chain(id).rules {
                for m in &r.matches {
                    if let Match::Nfacct(n) = m {
                        if self.nfacct_bind(&n.name).is_none() {
                            self.tables[ti] = old;
                            return Err((None, RestoreErrorKind::NoSuchNfacct(n.name.clone())));
                        }
                    }
                    // xt_set checkentry: "Set NAME doesn't exist."
                    if let Match::Set(m) = m {
                        if !self.ipsets().contains(&m.name) {
                            self.tables[ti] = old;
                            return Err((None, RestoreErrorKind::NoSuchSet(m.name.clone())));
                        }
                    }
                }
            }
        }
        // Release what the replaced chains held, keep what carried over, bind the new.
        let mut freed: Vec<Bind> = Vec::new();
        let mut recent_delta: BTreeMap<String, i64> = BTreeMap::new();
        let mut nfacct_delta: BTreeMap<String, i64> = BTreeMap::new();
        if let Some(o) = &old {
            for (id, oc) in o.chains.iter().enumerate() {
                let Some(oc) = oc else { continue };
                let same = matches!(b.work.chains.get(id), Some(Some(nc)) if Arc::ptr_eq(nc, oc));
                if !same {
                    collect_binds(oc, &mut freed, &mut recent_delta, &mut nfacct_delta, -1);
                }
            }
        }
        // Looked up only (`contains`), never iterated: its order cannot reach any output.
        let mut kept: HashSet<u32> = HashSet::new();
        let mut recent_first: BTreeMap<String, (u128, u32)> = BTreeMap::new();
        // Counter slots first, in the layout order of the compiled program
        // (`compile::layout_order`): a fresh table's slots then lie in the order a walk
        // meets its rules, one service's counters next to each other.
        let mut rank = vec![u32::MAX; b.work.chains.len()];
        for (i, id) in layout_order(&b.work).into_iter().enumerate() {
            rank[id as usize] = i as u32;
        }
        let mut by_layout = modified.clone();
        by_layout.sort_by_key(|&id| rank[id as usize]);
        // A counter slot not bound yet gets a fresh one (and a fresh uid); a bound one is kept.
        let mut bind_slot = |slot: &mut Bind| {
            if slot.uid == 0 {
                *slot = Bind {
                    idx: Arc::make_mut(&mut self.alloc).take(),
                    uid: self.next_uid,
                };
                self.next_uid += 1;
            } else {
                kept.insert(slot.idx);
            }
        };
        for &id in &by_layout {
            let c = b.work.chain_mut(id);
            if c.hook.is_some() {
                bind_slot(&mut c.policy_slot);
            }
            for r in &mut c.rules {
                bind_slot(&mut r.slot);
                for m in &mut r.matches {
                    if let Match::Statistic(s) = m {
                        if matches!(s.mode, StatisticMode::Nth { .. }) {
                            bind_slot(&mut s.slot);
                        }
                    }
                }
            }
        }
        for &id in &modified {
            let c = b.work.chain_mut(id);
            for r in &mut c.rules {
                for m in &mut r.matches {
                    match m {
                        Match::Recent(rm) => {
                            let idx = self.recent.get_or_add(&rm.name);
                            rm.table = Bind { idx, uid: 0 };
                            *recent_delta.entry(rm.name.clone()).or_insert(0) += 1;
                            let cap = recent_cap(rm.hitcount);
                            let e = recent_first
                                .entry(rm.name.clone())
                                .or_insert((ip_num(rm.mask), cap as u32));
                            e.1 = e.1.max(cap as u32);
                        }
                        Match::Nfacct(n) => {
                            let idx = self.nfacct.get_or_add(&n.name);
                            n.obj = Bind { idx, uid: 0 };
                            *nfacct_delta.entry(n.name.clone()).or_insert(0) += 1;
                        }
                        _ => {}
                    }
                }
            }
            c.index = ChainIndex::build(&c.rules);
        }
        for f in freed {
            if !kept.contains(&f.idx) {
                Arc::make_mut(&mut self.alloc).free.push(f.idx);
            }
        }
        for (name, d) in recent_delta {
            let i = self.recent.get_or_add(&name) as usize;
            let e = &mut self.recent.entries[i];
            let was = e.refs;
            e.refs = (e.refs + d).max(0);
            if let Some(&(mask, cap)) = recent_first.get(&name) {
                if was <= 0 && e.refs > 0 {
                    e.uid = self.next_uid;
                    self.next_uid += 1;
                    e.mask = mask;
                    e.cap = cap as usize;
                } else if cap as usize > e.cap {
                    // A rule needing more stamps flushes the table (recent_mt_check).
                    e.cap = cap as usize;
                    e.uid = self.next_uid;
                    self.next_uid += 1;
                }
            }
        }
        for (name, d) in nfacct_delta {
            let i = self.nfacct.get_or_add(&name) as usize;
            let e = &mut self.nfacct.entries[i];
            e.refs = (e.refs + d).max(0);
        }
        b.work.program = Arc::new(compile(&b.work));
        self.tables[ti] = Some(Arc::new(b.work));
        Ok(())
    }

    /// Releases the slots and registry references of a table being dropped.
    fn release_table(&mut self, ti: usize) {
        let Some(o) = &self.tables[ti] else { return };
        let mut freed = Vec::new();
        let mut rd = BTreeMap::new();
        let mut nd = BTreeMap::new();
        for c in o.chains.iter().flatten() {
            collect_binds(c, &mut freed, &mut rd, &mut nd, -1);
        }
        Arc::make_mut(&mut self.alloc)
            .free
            .extend(freed.into_iter().map(|b| b.idx));
        for (name, d) in rd {
            let i = self.recent.get_or_add(&name) as usize;
            let e = &mut self.recent.entries[i];
            e.refs = (e.refs + d).max(0);
        }
        for (name, d) in nd {
            let i = self.nfacct.get_or_add(&name) as usize;
            let e = &mut self.nfacct.entries[i];
            e.refs = (e.refs + d).max(0);
        }
    }
}

/// Stamps kept per address (`recent_mt_check`, with the module parameter `ip_pkt_list_tot`
/// at its default 0): 32 without `--hitcount`, else `--hitcount` rounded up to a power of two
/// (a table used only by `--hitcount 5` rules keeps 8; measured on Linux 6.18, see
/// docs/kernel-model.md §10).
fn recent_cap(hitcount: u32) -> usize {
    if hitcount == 0 {
        32
    } else {
        (hitcount as usize).next_power_of_two()
    }
}

fn collect_binds(
    c: &Chain,
    freed: &mut Vec<Bind>,
    recent: &mut BTreeMap<String, i64>,
    nfacct: &mut BTreeMap<String, i64>,
    d: i64,
) {
    if c.hook.is_some() && c.policy_slot.uid != 0 {
        freed.push(c.policy_slot);
    }
    for r in &c.rules {
        if r.slot.uid != 0 {
            freed.push(r.slot);
        }
        for m in &r.matches {
            match m {
                Match::Statistic(s) if s.slot.uid != 0 => freed.push(s.slot),
                Match::Recent(rm) => *recent.entry(rm.name.clone()).or_insert(0) += d,
                Match::Nfacct(n) => *nfacct.entry(n.name.clone()).or_insert(0) += d,
                _ => {}
            }
        }
    }
}
