//! The tuple index: an open-addressing hash table over both tuples of every confirmed entry.
//!
//! Each slot is one `u64`: the tuple's 32-bit hash in the high half and the entry's slab slot
//! with the direction bit in the low half (`slot << 1 | dir`). Probing is linear and the home
//! position is the *top* bits of the hash, so slots are ordered by hash: all keys whose hash
//! falls in a range sit together. That is what lets [`Index::bucket_members`] enumerate the
//! members of one simulated `nf_conntrack_buckets` bucket (the kernel's hash chain, which holds
//! both directions of each entry) without a separate chain structure. Deletion shifts
//! following keys back, so there are no tombstones.
//!
//! Slots are stored complemented (`!value`), so that an empty slot is a zero word: a grown
//! array comes zeroed from the allocator (fresh pages, no fill pass).

const EMPTY: u64 = u64::MAX;
const MIN_BITS: u32 = 4;

#[derive(Clone, Debug)]
pub(crate) struct Index {
    slots: Vec<u64>,
    bits: u32,
    len: usize,
}

#[inline]
fn pack(hash: u32, val: u32) -> u64 {
    (u64::from(hash) << 32) | u64::from(val)
}

impl Index {
    pub(crate) fn new() -> Index {
        Index {
            slots: vec![0; 1 << MIN_BITS],
            bits: MIN_BITS,
            len: 0,
        }
    }

    #[inline]
    fn mask(&self) -> usize {
        (1usize << self.bits) - 1
    }

    #[inline]
    fn home(&self, hash: u32) -> usize {
        (hash >> (32 - self.bits)) as usize
    }

    /// How many slots the array has.
    #[inline]
    pub(crate) fn slot_count(&self) -> usize {
        self.slots.len()
    }

    pub(crate) fn heap_bytes(&self) -> usize {
        self.slots.capacity() * std::mem::size_of::<u64>()
    }

    /// The value (`slot << 1 | dir`) of the first key with `hash` for which `eq` holds.
    #[inline(always)]
    pub(crate) fn find(&self, hash: u32, mut eq: impl FnMut(u32) -> bool) -> Option<u32> {
        let mask = self.mask();
        let mut pos = self.home(hash);
        loop {
            let s = !self.slots[pos];
            if s == EMPTY {
                return None;
            }
            if (s >> 32) as u32 == hash && eq(s as u32) {
                return Some(s as u32);
            }
            pos = (pos + 1) & mask;
        }
    }

    /// The value in the home slot of `hash`, if any: the likely match of a lookup.
    #[inline]
    pub(crate) fn home_value(&self, hash: u32) -> Option<u32> {
        let s = !self.slots[self.home(hash)];
        (s != EMPTY).then_some(s as u32)
    }

    /// Asks the CPU to start loading the home slot of `hash` (a hint only: nothing is read).
    #[inline(always)]
    pub(crate) fn prefetch_home(&self, hash: u32) {
        sim_core::prefetch::line(&self.slots[self.home(hash)]);
    }

    /// Adds a key; the caller has checked it is not present.
    pub(crate) fn insert(&mut self, hash: u32, val: u32) {
        if (self.len + 1) * 4 > self.slots.len() * 3 {
            self.grow();
        }
        self.place(pack(hash, val));
        self.len += 1;
    }

    fn place(&mut self, packed: u64) {
        let mask = self.mask();
        let mut pos = self.home((packed >> 32) as u32);
        while !self.slots[pos] != EMPTY {
            pos = (pos + 1) & mask;
        }
        self.slots[pos] = !packed;
    }

    fn grow(&mut self) {
        let old = std::mem::replace(&mut self.slots, vec![0; 1 << (self.bits + 1)]);
        self.bits += 1;
        // Start after an empty slot, so no cluster wraps across the start: keys with equal
        // hashes keep their relative order (lookups find the first one).
        let start = old.iter().position(|&s| !s == EMPTY).unwrap_or(0);
        let mask = old.len() - 1;
        for k in 1..=old.len() {
            let s = !old[(start + k) & mask];
            if s != EMPTY {
                self.place(s);
            }
        }
    }

    /// Removes the key (hash, val); returns whether it was there.
    pub(crate) fn remove(&mut self, hash: u32, val: u32) -> bool {
        let mask = self.mask();
        let want = pack(hash, val);
        let mut pos = self.home(hash);
        loop {
            let s = !self.slots[pos];
            if s == EMPTY {
                return false;
            }
            if s == want {
                break;
            }
            pos = (pos + 1) & mask;
        }
        // Backward-shift deletion: move later members of the cluster into the hole when
        // their home position allows it.
        let mut hole = pos;
        let mut next = (hole + 1) & mask;
        loop {
            let s = !self.slots[next];
            if s == EMPTY {
                break;
            }
            let home = self.home((s >> 32) as u32);
            // Distance from home to `next` vs from home to `hole`, both cyclic.
            let d_next = next.wrapping_sub(home) & mask;
            let d_hole = hole.wrapping_sub(home) & mask;
            if d_hole <= d_next {
                self.slots[hole] = !s;
                hole = next;
            }
            next = (next + 1) & mask;
        }
        self.slots[hole] = !EMPTY;
        self.len -= 1;
        true
    }

    /// The values of every key whose hash falls in bucket `bucket` of `buckets`
    /// (`reciprocal_scale(hash, buckets) == bucket`), in index order.
    pub(crate) fn bucket_members(&self, bucket: u32, buckets: u32, out: &mut Vec<u32>) {
        out.clear();
        if self.len == 0 || buckets == 0 {
            return;
        }
        let in_bucket = |h: u32| crate::tuple::reciprocal_scale(h, buckets) == bucket;
        // Smallest hash of the bucket: ceil(bucket * 2^32 / buckets).
        let lo = ((u64::from(bucket) << 32).div_ceil(u64::from(buckets))).min(u64::from(u32::MAX));
        let hi = (((u64::from(bucket) + 1) << 32).div_ceil(u64::from(buckets)) - 1)
            .min(u64::from(u32::MAX));
        let mask = self.mask();
        let start = self.home(lo as u32);
        let end = self.home(hi as u32);
        let span = end.wrapping_sub(start) & mask;
        let mut pos = start;
        let mut steps = 0usize;
        loop {
            let s = !self.slots[pos];
            if s == EMPTY {
                if steps >= span {
                    break;
                }
            } else if in_bucket((s >> 32) as u32) {
                out.push(s as u32);
            }
            steps += 1;
            if steps > mask {
                break;
            }
            pos = (pos + 1) & mask;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeSet;

    fn mix(i: u32) -> u32 {
        i.wrapping_mul(0x9E37_79B9).rotate_left(13) ^ i
    }

    #[test]
    fn insert_find_remove_many() {
        let mut ix = Index::new();
        for i in 0..5000u32 {
            ix.insert(mix(i), i);
        }
        for i in 0..5000u32 {
            assert_eq!(ix.find(mix(i), |v| v == i), Some(i));
        }
        for i in (0..5000u32).step_by(3) {
            assert!(ix.remove(mix(i), i));
        }
        for i in 0..5000u32 {
            let found = ix.find(mix(i), |v| v == i);
            assert_eq!(found.is_some(), i % 3 != 0, "{i}");
        }
        assert!(!ix.remove(mix(0), 0));
    }

    #[test]
    fn colliding_hashes_stay_findable() {
        let mut ix = Index::new();
        for i in 0..100u32 {
            ix.insert(0xdead_0000, i);
        }
        for i in (0..100u32).rev().step_by(2) {
            assert!(ix.remove(0xdead_0000, i));
        }
        for i in 0..100u32 {
            assert_eq!(ix.find(0xdead_0000, |v| v == i).is_some(), i % 2 == 0);
        }
    }

    #[test]
    fn bucket_members_are_exactly_the_bucket() {
        let mut ix = Index::new();
        for i in 0..3000u32 {
            ix.insert(mix(i), i);
        }
        for buckets in [1u32, 7, 64, 1000, 262_144] {
            let mut all = BTreeSet::new();
            let mut out = Vec::new();
            let probe: Vec<u32> = (0..buckets.min(2000)).collect();
            for &b in &probe {
                ix.bucket_members(b, buckets, &mut out);
                for &v in &out {
                    assert_eq!(crate::tuple::reciprocal_scale(mix(v), buckets), b);
                    assert!(all.insert(v));
                }
            }
            if buckets <= 2000 {
                assert_eq!(all.len(), 3000, "buckets={buckets}");
            } else {
                let expect = (0..3000u32)
                    .filter(|&i| crate::tuple::reciprocal_scale(mix(i), buckets) < 2000)
                    .count();
                assert_eq!(all.len(), expect);
            }
        }
    }
}
