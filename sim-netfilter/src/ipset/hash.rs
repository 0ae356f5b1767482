//! The kernel's hash set storage (`net/netfilter/ipset/ip_set_hash_gen.h`), as far as it
//! shows: which bucket an element lands in (`HKEY`: `jhash2` of the element's bytes under the
//! set's `initval`, masked to `htable_bits`), the slot order inside a bucket, the growth of a
//! bucket by `AHASH_INIT_SIZE` slots up to `bucketsize`, the table doubling (`mtype_resize`)
//! when a full bucket takes one more, and the `Size in memory` it all adds up to. `ipset list`
//! walks buckets in index order and slots in array order (`mtype_list`), so this decides the
//! order of members in `ipset save` / `ipset list`.

use std::collections::BTreeMap;

/// `AHASH_INIT_SIZE`: the slots a new bucket gets, and the step it grows by.
pub(super) const AHASH_INIT_SIZE: u8 = 2;
/// `AHASH_MAX_SIZE`: the default and largest `bucketsize`.
pub(super) const AHASH_MAX_SIZE: u8 = 12;
/// `HTABLE_REGION_BITS`: a table of 2^bits buckets has 2^(bits - 10) lock regions (at least 1).
const HTABLE_REGION_BITS: u8 = 10;
/// `sizeof(struct ip_set_region)` on x86_64 (a spinlock and two `size_t`s), measured: each
/// region past the first adds 24 bytes to `Size in memory`.
const REGION_BYTES: u64 = 24;
/// `sizeof(struct hbucket)` on x86_64 (an `rcu_head`, the `used` bitmap, `size`, `pos`,
/// padded), measured: a new bucket adds 32 bytes plus its slots.
const HBUCKET_BYTES: u64 = 32;

/// `lib/jhash.h` `jhash2`: Bob Jenkins' lookup3 over 32-bit words (one copy, in sim-conntrack).
pub(super) use sim_conntrack::tuple::jhash2;

/// `htable_bits`: the table size for a `hashsize`, rounded up to a power of two (and at
/// least `IPSET_MIMINAL_HASHSIZE`, 64).
pub(super) fn htable_bits(hashsize: u32) -> u8 {
    let hashsize = hashsize.max(64);
    let fls = |x: u32| (32 - x.leading_zeros()) as u8;
    let bits = fls(hashsize - 1);
    if 1u64 << bits != u64::from(hashsize) {
        fls(hashsize)
    } else {
        bits
    }
}

/// One bucket: `size` slots allocated, `pos` used or once used, holes where deleted.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bucket<E> {
    size: u8,
    slots: Vec<Option<E>>,
}

/// What an element gives the table: its hash key words.
pub(super) trait Keyed: Clone + PartialEq {
    /// The words `HKEY` hashes (the element struct's bytes read as native u32s).
    fn key_words(&self) -> Vec<u32>;
}

/// A hash set's table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Table<E> {
    pub(super) bits: u8,
    pub(super) bucketsize: u8,
    pub(super) initval: u32,
    buckets: BTreeMap<u32, Bucket<E>>,
    len: usize,
}

/// Why an element could not go in.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum AddOutcome {
    Added,
    /// An equal element is there (its slot index is given back for `-exist`).
    Exists,
}

impl<E: Keyed> Table<E> {
    pub(super) fn new(hashsize: u32, bucketsize: u8, initval: u32) -> Table<E> {
        Table {
            bits: htable_bits(hashsize),
            bucketsize,
            initval,
            buckets: BTreeMap::new(),
            len: 0,
        }
    }

    fn key(&self, e: &E, bits: u8) -> u32 {
        let mask = if bits >= 32 {
            u32::MAX
        } else {
            (1u32 << bits) - 1
        };
        jhash2(&e.key_words(), self.initval) & mask
    }

    /// The stored element equal to `e` (by `eq`), if any.
    pub(super) fn find(&self, e: &E, eq: impl Fn(&E, &E) -> bool) -> Option<&E> {
        let b = self.buckets.get(&self.key(e, self.bits))?;
        b.slots.iter().flatten().find(|s| eq(s, e))
    }

    /// The stored element equal to `e`, to change its extensions (`-exist`).
    pub(super) fn find_mut(&mut self, e: &E, eq: impl Fn(&E, &E) -> bool) -> Option<&mut E> {
        let k = self.key(e, self.bits);
        let b = self.buckets.get_mut(&k)?;
        b.slots.iter_mut().flatten().find(|s| eq(s, e))
    }

    /// `mtype_add`: the first hole of the bucket, else its next slot, growing it by
    /// `AHASH_INIT_SIZE`; a full bucket at `bucketsize` doubles the table first
    /// (`-EAGAIN`, `mtype_resize`, retried).
    pub(super) fn add(&mut self, e: E, eq: impl Fn(&E, &E) -> bool) -> AddOutcome {
        if self.find(&e, &eq).is_some() {
            return AddOutcome::Exists;
        }
        loop {
            let k = self.key(&e, self.bits);
            let bucketsize = self.bucketsize;
            let b = self.buckets.entry(k).or_insert(Bucket {
                size: AHASH_INIT_SIZE,
                slots: Vec::new(),
            });
            if let Some(hole) = b.slots.iter_mut().find(|s| s.is_none()) {
                *hole = Some(e);
                self.len += 1;
                return AddOutcome::Added;
            }
            if b.slots.len() < usize::from(b.size) {
                b.slots.push(Some(e));
                self.len += 1;
                return AddOutcome::Added;
            }
            if b.size < bucketsize {
                b.size += AHASH_INIT_SIZE;
                b.slots.push(Some(e));
                self.len += 1;
                return AddOutcome::Added;
            }
            self.resize();
        }
    }

    /// `mtype_resize`: one more bit, every element rehashed in listing order; when a new
    /// bucket overflows, one more bit again.
    fn resize(&mut self) {
        let mut bits = self.bits + 1;
        'retry: loop {
            let mut next: BTreeMap<u32, Bucket<E>> = BTreeMap::new();
            for e in self.buckets.values().flat_map(|b| b.slots.iter().flatten()) {
                let k = self.key(e, bits);
                let b = next.entry(k).or_insert(Bucket {
                    size: AHASH_INIT_SIZE,
                    slots: Vec::new(),
                });
                if b.slots.len() >= usize::from(b.size) {
                    if b.size >= self.bucketsize {
                        bits += 1;
                        continue 'retry;
                    }
                    b.size += AHASH_INIT_SIZE;
                }
                b.slots.push(Some(e.clone()));
            }
            self.bits = bits;
            self.buckets = next;
            return;
        }
    }

    /// `mtype_del`: the slot becomes a hole (the bucket's `pos` shrinks when it was the last;
    /// an emptied bucket is freed).
    pub(super) fn del(&mut self, e: &E, eq: impl Fn(&E, &E) -> bool) -> bool {
        let k = self.key(e, self.bits);
        let Some(b) = self.buckets.get_mut(&k) else {
            return false;
        };
        let Some(i) = b
            .slots
            .iter()
            .position(|s| s.as_ref().is_some_and(|s| eq(s, e)))
        else {
            return false;
        };
        b.slots[i] = None;
        while b.slots.last().is_some_and(|s| s.is_none()) {
            b.slots.pop();
        }
        if b.slots.is_empty() {
            self.buckets.remove(&k);
        }
        self.len -= 1;
        true
    }

    /// The elements in `ipset list` order.
    pub(super) fn iter(&self) -> impl Iterator<Item = &E> {
        self.buckets.values().flat_map(|b| b.slots.iter().flatten())
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    /// The table's part of `Size in memory` (`mtype_ahash_memsize` without the set's base):
    /// the lock regions past the first, and each bucket's header and slots of `dsize` bytes.
    pub(super) fn memsize(&self, dsize: u64) -> u64 {
        let regions: u64 = if self.bits < HTABLE_REGION_BITS {
            1
        } else {
            1u64 << (self.bits - HTABLE_REGION_BITS)
        };
        (regions - 1) * REGION_BYTES
            + self
                .buckets
                .values()
                .map(|b| HBUCKET_BYTES + u64::from(b.size) * dsize)
                .sum::<u64>()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn htable_bits_rounds_up_to_a_power_of_two() {
        assert_eq!(htable_bits(1024), 10);
        assert_eq!(htable_bits(1000), 10);
        assert_eq!(htable_bits(16), 6);
        assert_eq!(htable_bits(4096), 12);
    }

    #[test]
    fn jhash2_of_nothing_is_its_seed() {
        assert_eq!(jhash2(&[], 0), 0xdead_beef);
    }
}
