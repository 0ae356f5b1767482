//! A first-match index for long chains of "simple" rules.
//!
//! kube-proxy's `KUBE-SERVICES` holds one rule per service port:
//! `-d CLUSTER_IP/32 -p udp -m comment --comment … -m udp --dport 53 -j KUBE-SVC-…`.
//! Such a rule matches exactly when (destination, protocol, destination port) equal its key,
//! and it has no side effect when it does not match. In a run of consecutive simple rules the
//! first rule that matches a packet at or after position `pos` is therefore the smallest
//! position ≥ `pos` among the rules keyed by the packet's (dst, proto, dport) or by
//! (any dst, proto, dport). Evaluation jumps straight to it (or past the run); every rule it
//! skips could not have matched, so verdicts, NAT, counters and random draws are those of
//! plain in-order evaluation (a property test in `tests/` compares both).

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};

use crate::rule::{Match, Rule};
use crate::types::{IpNet, PortRange};

/// Runs shorter than this are evaluated in order (the lookup would cost more).
pub(crate) const MIN_INDEXED_RUN: usize = 16;

const NO_RUN: u32 = u32::MAX;

/// The key of a simple rule: destination (`None` = any), protocol, destination port.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Key {
    pub dst: Option<u32>,
    pub proto: u8,
    pub dport: u16,
}

/// A fast deterministic hasher for [`Key`]s and chain names; used for lookups only, never
/// iterated into output.
#[derive(Default, Clone, Copy)]
pub(crate) struct KeyHasher(u64);

/// `HashMap` with [`KeyHasher`], for lookups only: nothing iterates one into output (where the order would
/// show, callers collect and sort first).
pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<KeyHasher>>;

impl Hasher for KeyHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.write_u64(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.write_u64(u64::from_le_bytes(w) ^ ((rest.len() as u64) << 59));
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0.rotate_left(5) ^ v).wrapping_mul(0x517c_c1b7_2722_0a95);
    }
    fn write_u32(&mut self, v: u32) {
        self.write_u64(u64::from(v));
    }
    fn write_u16(&mut self, v: u16) {
        self.write_u64(u64::from(v));
    }
    fn write_u8(&mut self, v: u8) {
        self.write_u64(u64::from(v));
    }
    fn write_usize(&mut self, v: usize) {
        self.write_u64(v as u64);
    }
}

/// A map value: where the key's rules are, and for a key of one rule, where that rule's
/// jump target starts in the compiled program (for prefetch hints, `hint.rs`).
#[derive(Clone, Copy, Debug)]
struct Hit {
    /// With [`MANY`] set, an index into the run's `many` lists (keys shared by several
    /// rules); otherwise the only rule position with that key.
    at: u32,
    /// The program position where the rule's jump or goto target starts, or [`NO_JUMP`];
    /// set by [`ChainIndex::annotate`] when the table is compiled.
    to: u32,
    /// The first of the program's kept targets (`Program::others`) at or after `to`.
    others: u32,
}

type KeyMap = FastMap<Key, Hit>;

/// A map value's `at` with this bit set is an index into the run's `many` lists.
const MANY: u32 = 1 << 31;

/// In a [`Hit`], and from [`ChainIndex::first_hit`]: no jump target known.
pub(crate) const NO_JUMP: u32 = u32::MAX;

#[derive(Clone, Debug)]
struct Run {
    end: u32,
    map: KeyMap,
    /// Ascending positions of keys used by more than one rule.
    many: Vec<Vec<u32>>,
    /// Whether some rule of the run has no destination (then two lookups are needed).
    has_any_dst: bool,
}

/// Where evaluation goes from a position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// The position is not in an indexed run: evaluate normally.
    Outside,
    /// No rule of the run from here on can match: continue at this position (the run's end).
    Past(usize),
    /// The rule at this position is the first one from here on that matches: all its tests
    /// hold (they are exactly its key), run its target.
    Match(usize),
}

/// The index of one chain.
#[derive(Clone, Debug, Default)]
pub(crate) struct ChainIndex {
    runs: Vec<Run>,
    /// For each rule position, the run it belongs to, or `NO_RUN`.
    run_of: Vec<u32>,
}

/// The key of a rule if it is simple: no source, no interfaces, no fragment flag, a
/// non-inverted tcp/udp/sctp protocol, an optional non-inverted /32 destination, one port match
/// of that protocol with a single non-inverted destination port and nothing else, and
/// otherwise only comments.
pub(crate) fn simple_key(rule: &Rule) -> Option<Key> {
    let ip = &rule.ip;
    if ip.src.is_some() || ip.frag.is_some() || ip.proto_inv {
        return None;
    }
    for (p, inv) in [(&ip.iif, ip.iif_inv), (&ip.oif, ip.oif_inv)] {
        if let Some(p) = p {
            if !p.is_any() || inv {
                return None;
            }
        }
    }
    if !matches!(ip.proto, 6 | 17 | 132) {
        return None;
    }
    let dst = match ip.dst {
        None => None,
        Some(IpNet::V4(n)) if !ip.dst_inv && n.mask == u32::MAX => Some(n.addr),
        Some(_) => return None,
    };
    let mut dport = None;
    for m in &rule.matches {
        let (sport, sinv, dp, dinv, proto) = match m {
            Match::Comment(_) => continue,
            Match::Tcp(t) if t.flags.is_none() => (t.sport, t.sport_inv, t.dport, t.dport_inv, 6),
            Match::Udp(p) => (p.sport, p.sport_inv, p.dport, p.dport_inv, 17),
            Match::Sctp(p) => (p.sport, p.sport_inv, p.dport, p.dport_inv, 132),
            _ => return None,
        };
        if dport.is_some()
            || proto != ip.proto
            || sport != PortRange::ALL
            || sinv
            || dinv
            || dp.min != dp.max
        {
            return None;
        }
        dport = Some(dp.min);
    }
    Some(Key {
        dst,
        proto: ip.proto,
        dport: dport?,
    })
}

impl ChainIndex {
    /// Builds the index of `rules`, or `None` if no run is long enough.
    pub(crate) fn build(rules: &[Rule]) -> Option<ChainIndex> {
        let keys: Vec<Option<Key>> = rules.iter().map(simple_key).collect();
        let mut idx = ChainIndex {
            runs: Vec::new(),
            run_of: vec![NO_RUN; rules.len()],
        };
        let mut i = 0;
        while i < keys.len() {
            if keys[i].is_none() {
                i += 1;
                continue;
            }
            let start = i;
            while i < keys.len() && keys[i].is_some() {
                i += 1;
            }
            if i - start < MIN_INDEXED_RUN {
                continue;
            }
            let mut map = KeyMap::default();
            let mut many: Vec<Vec<u32>> = Vec::new();
            let mut has_any_dst = false;
            for (pos, k) in keys.iter().enumerate().take(i).skip(start) {
                let Some(k) = k else { continue };
                has_any_dst |= k.dst.is_none();
                let pos = pos as u32;
                let hit = |at| Hit {
                    at,
                    to: NO_JUMP,
                    others: 0,
                };
                match map.get(k).map(|h| h.at) {
                    None => {
                        map.insert(*k, hit(pos));
                    }
                    Some(v) if v & MANY != 0 => many[(v & !MANY) as usize].push(pos),
                    Some(first) => {
                        many.push(vec![first, pos]);
                        map.insert(*k, hit(MANY | (many.len() - 1) as u32));
                    }
                }
            }
            let run_id = idx.runs.len() as u32;
            for r in &mut idx.run_of[start..i] {
                *r = run_id;
            }
            idx.runs.push(Run {
                end: i as u32,
                map,
                many,
                has_any_dst,
            });
        }
        if idx.runs.is_empty() {
            None
        } else {
            Some(idx)
        }
    }

    /// Records, for each key of one rule, where that rule's jump target starts in the
    /// compiled program and the first kept target from there: `targets(position in the
    /// chain)` gives both ([`NO_JUMP`] for a rule that does not jump). Called when the
    /// table is compiled, on the program's own copy of the index.
    pub(crate) fn annotate(&mut self, targets: impl Fn(usize) -> (u32, u32)) {
        for run in &mut self.runs {
            for h in run.map.values_mut() {
                if h.at & MANY == 0 {
                    (h.to, h.others) = targets(h.at as usize);
                }
            }
        }
    }

    /// For a prefetch hint: the rule of the chain's first indexed run that a walk reaching
    /// that run from its start goes to for `key`, with its jump target and first kept
    /// target as [`ChainIndex::annotate`] recorded them (`NO_JUMP` when unknown). One map
    /// probe, the same the walk's lookup makes next, so that one is then in the cache.
    #[inline]
    pub(crate) fn first_hit(&self, key: Key) -> Option<(usize, u32, u32)> {
        let run = self.runs.first()?;
        if run.has_any_dst {
            // Two keys to look at: leave it to the walk's lookup.
            return None;
        }
        let h = run.map.get(&key)?;
        if h.at & MANY != 0 {
            let at = *run.many[(h.at & !MANY) as usize].first()?;
            return Some((at as usize, NO_JUMP, 0));
        }
        Some((h.at as usize, h.to, h.others))
    }

    /// Where to go from `pos` for a packet with `key` (`None` for a packet without ports):
    /// in an indexed run, straight to the first rule at or after `pos` that matches, or past
    /// the run.
    #[inline]
    pub(crate) fn lookup(&self, pos: usize, key: Option<Key>) -> Lookup {
        let Some(&run) = self.run_of.get(pos) else {
            return Lookup::Outside;
        };
        if run == NO_RUN {
            return Lookup::Outside;
        }
        let run = &self.runs[run as usize];
        let Some(key) = key else {
            return Lookup::Past(run.end as usize);
        };
        let p = pos as u32;
        let first_at_or_after = |k: &Key| -> u32 {
            match run.map.get(k).map(|h| h.at) {
                None => run.end,
                Some(v) if v & MANY != 0 => {
                    let v = &run.many[(v & !MANY) as usize];
                    let i = v.partition_point(|&x| x < p);
                    v.get(i).copied().unwrap_or(run.end)
                }
                Some(x) if x >= p => x,
                Some(_) => run.end,
            }
        };
        let mut at = first_at_or_after(&key);
        if run.has_any_dst {
            at = at.min(first_at_or_after(&Key { dst: None, ..key }));
        }
        if at >= run.end {
            Lookup::Past(run.end as usize)
        } else {
            Lookup::Match(at as usize)
        }
    }
}
