//! The schedulers kube-proxy offers (`--ipvs-scheduler`), each as its
//! `net/netfilter/ipvs/ip_vs_<name>.c` picks a real server for a new connection. None of
//! them draws at random: round robin keeps a cursor, the hashing ones hash addresses under
//! keys fixed in the source (`ip_vs_mh.c`'s `generate_hash_secret`), so a run is the same
//! every time without a seed.
//!
//! The real servers are walked in the kernel's list order, which is [`VirtualService::dests`]'
//! order (a new server goes to the head, `list_add_rcu` in `__ip_vs_update_dest`).
//!
//! [`VirtualService::dests`]: super::VirtualService::dests

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use super::{Destination, ServiceFlags};

/// A scheduler, by the name `ipvsadm -s` and kube-proxy's `--ipvs-scheduler` take.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scheduler {
    /// `rr`, round robin (`ip_vs_rr.c`), kube-proxy's default.
    Rr,
    /// `wrr`, weighted round robin (`ip_vs_wrr.c`).
    Wrr,
    /// `lc`, least connection (`ip_vs_lc.c`).
    Lc,
    /// `wlc`, weighted least connection (`ip_vs_wlc.c`).
    Wlc,
    /// `sh`, source hashing (`ip_vs_sh.c`).
    Sh,
    /// `dh`, destination hashing (`ip_vs_dh.c`).
    Dh,
    /// `sed`, shortest expected delay (`ip_vs_sed.c`).
    Sed,
    /// `nq`, never queue (`ip_vs_nq.c`).
    Nq,
    /// `mh`, Maglev hashing (`ip_vs_mh.c`).
    Mh,
}

impl Scheduler {
    /// Every scheduler, in the order kube-proxy's documentation lists them.
    pub const ALL: [Scheduler; 9] = [
        Scheduler::Rr,
        Scheduler::Wrr,
        Scheduler::Lc,
        Scheduler::Wlc,
        Scheduler::Sh,
        Scheduler::Dh,
        Scheduler::Sed,
        Scheduler::Nq,
        Scheduler::Mh,
    ];

    /// Its name (`struct ip_vs_scheduler`'s `.name`).
    pub fn name(self) -> &'static str {
        match self {
            Scheduler::Rr => "rr",
            Scheduler::Wrr => "wrr",
            Scheduler::Lc => "lc",
            Scheduler::Wlc => "wlc",
            Scheduler::Sh => "sh",
            Scheduler::Dh => "dh",
            Scheduler::Sed => "sed",
            Scheduler::Nq => "nq",
            Scheduler::Mh => "mh",
        }
    }
}

impl fmt::Display for Scheduler {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Scheduler {
    type Err = String;

    /// The scheduler of a name; an unknown name is the kernel's `ENOENT` ("Scheduler or
    /// persistence engine not found"), and the message lists the known ones.
    fn from_str(s: &str) -> Result<Scheduler, String> {
        Scheduler::ALL
            .into_iter()
            .find(|x| x.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Scheduler::ALL.iter().map(|x| x.name()).collect();
                format!(
                    "unknown IPVS scheduler {s:?} (expected one of {})",
                    names.join(", ")
                )
            })
    }
}

/// `IP_VS_SH_TAB_BITS` (`CONFIG_IP_VS_SH_TAB_BITS` default 8): the sh table has 256 buckets.
const SH_TAB_BITS: u32 = 8;
const SH_TAB_SIZE: usize = 1 << SH_TAB_BITS;
/// `IP_VS_DH_TAB_BITS` (`CONFIG_IP_VS_DH_TAB_BITS` default 8).
const DH_TAB_SIZE: usize = 1 << 8;
/// `IP_VS_MH_TAB_SIZE`: `primes[CONFIG_IP_VS_MH_TAB_INDEX - 8]` with the default index 12:
/// 251 entries.
pub(crate) const MH_TAB_SIZE: usize = 251;
/// `IP_VS_MH_TAB_BITS`: `CONFIG_IP_VS_MH_TAB_INDEX / 2` = 6.
const MH_TAB_BITS: u32 = 6;
/// `generate_hash_secret` in `ip_vs_mh.c`: both words of `hash1` are 2654435761, both of
/// `hash2` 2654446892 (fixed in the source, not random).
const MH_HASH1: (u64, u64) = (2_654_435_761, 2_654_435_761);
const MH_HASH2: (u64, u64) = (2_654_446_892, 2_654_446_892);
/// `GOLDEN_RATIO_32` of `include/linux/hash.h` (Linux 4.7 and later), `hash_32`'s multiplier.
const GOLDEN_RATIO_32: u32 = 0x61C8_8647;

/// A scheduler's state for one service (`svc->sched_data`).
#[derive(Clone, Debug)]
pub(crate) enum SchedState {
    /// rr's cursor: the last server chosen, `None` for the list head.
    Rr { cursor: Option<usize> },
    /// wrr's `struct ip_vs_wrr_mark`.
    Wrr {
        cl: Option<usize>,
        cw: i64,
        mw: i64,
        di: i64,
    },
    /// The least-connection family keeps no state.
    Stateless,
    /// sh's and dh's 256 buckets, each an index into the list.
    Buckets(Vec<Option<usize>>),
    /// mh's 251-entry lookup table.
    Mh(Vec<Option<usize>>),
}

/// What a scheduler reads of a real server.
fn weight(d: &Destination) -> i64 {
    i64::from(d.spec.weight)
}

/// `ip_vs_dest_conn_overhead`: `(activeconns << 8) + inactconns`.
fn conn_overhead(d: &Destination) -> i64 {
    (i64::from(d.counters.activeconns) << 8) + i64::from(d.counters.inactconns)
}

/// `ip_vs_sed_dest_overhead` / `ip_vs_nq_dest_overhead`: `activeconns + 1`.
fn active_overhead(d: &Destination) -> i64 {
    i64::from(d.counters.activeconns) + 1
}

fn gcd(a: i64, b: i64) -> i64 {
    let (mut a, mut b) = (a, b);
    while b != 0 {
        (a, b) = (b, a % b);
    }
    a
}

/// The 32-bit fold of an address in host order (`addr_fold` of the hashing schedulers:
/// the IPv4 address, or the XOR of an IPv6 address's four words).
fn addr_fold(a: IpAddr) -> u32 {
    match a {
        IpAddr::V4(v) => u32::from(v),
        IpAddr::V6(v) => v
            .octets()
            .chunks(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .fold(0, |x, w| x ^ w),
    }
}

/// `hash_32(val, bits)`.
fn hash_32(val: u32, bits: u32) -> u32 {
    val.wrapping_mul(GOLDEN_RATIO_32) >> (32 - bits)
}

/// `ip_vs_sh_hashkey`.
fn sh_hashkey(addr: IpAddr, port: u16, offset: u32) -> usize {
    (offset.wrapping_add(hash_32(
        u32::from(port).wrapping_add(addr_fold(addr)),
        SH_TAB_BITS,
    )) as usize)
        & (SH_TAB_SIZE - 1)
}

/// `ip_vs_dh_hashkey`: `(ntohl(addr_fold) * 2654435761UL) & IP_VS_DH_TAB_MASK`.
fn dh_hashkey(addr: IpAddr) -> usize {
    (u64::from(addr_fold(addr)).wrapping_mul(2_654_435_761) as usize) & (DH_TAB_SIZE - 1)
}

/// One SipHash round (`SIPROUND`, `include/linux/siphash.h`).
fn sipround(v: &mut [u64; 4]) {
    v[0] = v[0].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(13);
    v[1] ^= v[0];
    v[0] = v[0].rotate_left(32);
    v[2] = v[2].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(16);
    v[3] ^= v[2];
    v[0] = v[0].wrapping_add(v[3]);
    v[3] = v[3].rotate_left(21);
    v[3] ^= v[0];
    v[2] = v[2].wrapping_add(v[1]);
    v[1] = v[1].rotate_left(17);
    v[1] ^= v[2];
    v[2] = v[2].rotate_left(32);
}

/// SipHash-c-d of `data` under (`k0`, `k1`), the 64-bit result (`lib/siphash.c`).
pub(crate) fn siphash(data: &[u8], k0: u64, k1: u64, c: usize, d: usize) -> u64 {
    let mut v = [
        0x736f_6d65_7073_6575 ^ k0,
        0x646f_7261_6e64_6f6d ^ k1,
        0x6c79_6765_6e65_7261 ^ k0,
        0x7465_6462_7974_6573 ^ k1,
    ];
    let mut chunks = data.chunks_exact(8);
    for ch in &mut chunks {
        let m = u64::from_le_bytes([ch[0], ch[1], ch[2], ch[3], ch[4], ch[5], ch[6], ch[7]]);
        v[3] ^= m;
        for _ in 0..c {
            sipround(&mut v);
        }
        v[0] ^= m;
    }
    let mut b = (data.len() as u64) << 56;
    for (i, &byte) in chunks.remainder().iter().enumerate() {
        b |= u64::from(byte) << (8 * i);
    }
    v[3] ^= b;
    for _ in 0..c {
        sipround(&mut v);
    }
    v[0] ^= b;
    v[2] ^= 0xff;
    for _ in 0..d {
        sipround(&mut v);
    }
    v[0] ^ v[1] ^ v[2] ^ v[3]
}

/// `hsiphash` on a 64-bit kernel: SipHash-1-3 (the 64-bit build makes HalfSipHash-1-3
/// "actually be SipHash1-3"), truncated to 32 bits.
fn hsiphash_u32(v: u32, key: (u64, u64)) -> u32 {
    siphash(&v.to_le_bytes(), key.0, key.1, 1, 3) as u32
}

/// `ip_vs_mh_hashkey`: `hsiphash(offset + ntohs(port) + ntohl(addr_fold))`.
fn mh_hashkey(addr: IpAddr, port: u16, key: (u64, u64), offset: u32) -> u32 {
    let v = offset
        .wrapping_add(u32::from(port))
        .wrapping_add(addr_fold(addr));
    hsiphash_u32(v, key)
}

/// A server the hashing schedulers will not take: weight 0 or overloaded
/// (`is_unavailable`; sh also checks it is still in the service, which every listed server
/// is).
fn unavailable(d: &Destination) -> bool {
    d.spec.weight == 0 || d.overloaded
}

/// `fls`: the 1-based position of the highest set bit, 0 for 0.
fn fls(x: i64) -> i64 {
    if x <= 0 {
        0
    } else {
        64 - i64::from(x.leading_zeros())
    }
}

/// What the scheduler hashes: the client's address and port (sh, mh) and the virtual
/// address (dh).
#[derive(Clone, Copy, Debug)]
pub(crate) struct SchedInput {
    pub saddr: IpAddr,
    pub sport: u16,
    pub daddr: IpAddr,
}

impl SchedState {
    /// `init_service` of `sched` for a service without servers yet.
    pub(crate) fn new(sched: Scheduler) -> SchedState {
        match sched {
            Scheduler::Rr => SchedState::Rr { cursor: None },
            // ip_vs_wrr_init_svc with no servers: di = 1, mw = 0 - 0, cw = mw.
            Scheduler::Wrr => SchedState::Wrr {
                cl: None,
                cw: 0,
                mw: 0,
                di: 1,
            },
            Scheduler::Lc | Scheduler::Wlc | Scheduler::Sed | Scheduler::Nq => {
                SchedState::Stateless
            }
            Scheduler::Sh | Scheduler::Dh => {
                let n = if sched == Scheduler::Sh {
                    SH_TAB_SIZE
                } else {
                    DH_TAB_SIZE
                };
                SchedState::Buckets(vec![None; n])
            }
            Scheduler::Mh => SchedState::Mh(vec![None; MH_TAB_SIZE]),
        }
    }

    /// A server was added at the head of the list (rr keeps pointing at the same server).
    pub(crate) fn dest_added(&mut self, sched: Scheduler, dests: &[Destination]) {
        if let SchedState::Rr { cursor: Some(c) } = self {
            *c += 1;
        }
        self.rebuild(sched, dests);
    }

    /// The server at `removed` left the list (`ip_vs_rr_del_dest`: a cursor on it moves to
    /// the one before).
    pub(crate) fn dest_removed(&mut self, sched: Scheduler, dests: &[Destination], removed: usize) {
        if let SchedState::Rr { cursor } = self {
            *cursor = match *cursor {
                Some(c) if c == removed => removed.checked_sub(1),
                Some(c) if c > removed => Some(c - 1),
                other => other,
            };
        }
        self.rebuild(sched, dests);
    }

    /// A server's weight or flags changed (`upd_dest`), or any other change: the
    /// `*_dest_changed` of wrr, sh, dh and mh.
    pub(crate) fn rebuild(&mut self, sched: Scheduler, dests: &[Destination]) {
        match self {
            SchedState::Rr { .. } | SchedState::Stateless => {}
            SchedState::Wrr { cl, cw, mw, di } => {
                // ip_vs_wrr_dest_changed.
                *cl = None;
                let g = dests.iter().map(weight).filter(|&w| w > 0).fold(0, |g, w| {
                    if g > 0 {
                        gcd(w, g)
                    } else {
                        w
                    }
                });
                *di = if g > 0 { g } else { 1 };
                *mw = dests.iter().map(weight).max().unwrap_or(0).max(0) - (*di - 1);
                if *cw > *mw || *cw == 0 {
                    *cw = *mw;
                } else if *di > 1 {
                    *cw = (*cw / *di) * *di + 1;
                }
            }
            SchedState::Buckets(b) => {
                if sched == Scheduler::Sh {
                    sh_reassign(b, dests)
                } else {
                    dh_reassign(b, dests)
                }
            }
            SchedState::Mh(t) => mh_reassign(t, dests),
        }
    }

    /// The scheduler's `schedule`: the index of the server chosen, or `None` ("no
    /// destination available").
    pub(crate) fn schedule(
        &mut self,
        sched: Scheduler,
        flags: ServiceFlags,
        dests: &[Destination],
        input: SchedInput,
    ) -> Option<usize> {
        match (sched, self) {
            (Scheduler::Rr, SchedState::Rr { cursor }) => rr_schedule(cursor, dests),
            (Scheduler::Wrr, SchedState::Wrr { cl, cw, mw, di }) => {
                wrr_schedule(cl, cw, *mw, *di, dests)
            }
            (Scheduler::Lc, _) => lc_schedule(dests),
            (Scheduler::Wlc, _) => weighted_least(dests, conn_overhead),
            (Scheduler::Sed, _) => weighted_least(dests, active_overhead),
            (Scheduler::Nq, _) => nq_schedule(dests),
            (Scheduler::Sh, SchedState::Buckets(b)) => {
                let port = if flags.has(ServiceFlags::SCHED2) {
                    input.sport
                } else {
                    0
                };
                let fallback = flags.has(ServiceFlags::SCHED1);
                hashed_pick(b, dests, fallback, SH_TAB_SIZE, |off| {
                    sh_hashkey(input.saddr, port, off)
                })
            }
            (Scheduler::Dh, SchedState::Buckets(b)) => {
                let d = b[dh_hashkey(input.daddr)]?;
                (!unavailable(&dests[d])).then_some(d)
            }
            (Scheduler::Mh, SchedState::Mh(t)) => {
                let port = if flags.has(ServiceFlags::SCHED2) {
                    input.sport
                } else {
                    0
                };
                let fallback = flags.has(ServiceFlags::SCHED1);
                hashed_pick(t, dests, fallback, MH_TAB_SIZE, |off| {
                    mh_hashkey(input.saddr, port, MH_HASH1, off) as usize % MH_TAB_SIZE
                })
            }
            // A state always matches its scheduler (made together in SchedState::new).
            _ => None,
        }
    }
}

/// `ip_vs_rr_schedule`: from the server after the cursor round the list, the first with
/// weight > 0 not overloaded; a second pass from the head when the cursor was not there.
fn rr_schedule(cursor: &mut Option<usize>, dests: &[Destination]) -> Option<usize> {
    let ok = |d: &Destination| !d.overloaded && d.spec.weight > 0;
    let last = *cursor;
    let first_from = last.map_or(0, |i| i + 1);
    for (j, d) in dests.iter().enumerate().skip(first_from) {
        if ok(d) {
            *cursor = Some(j);
            return Some(j);
        }
    }
    // `while (pass < 2 && p != &svc->destinations)`: a second pass only if the cursor was
    // on a server; it stops after checking that server.
    if last.is_some() {
        for (j, d) in dests.iter().enumerate() {
            if ok(d) {
                *cursor = Some(j);
                return Some(j);
            }
            if Some(j) == last {
                break;
            }
        }
    }
    None
}

/// `ip_vs_wrr_schedule`.
fn wrr_schedule(
    cl: &mut Option<usize>,
    cw: &mut i64,
    mw: i64,
    di: i64,
    dests: &[Destination],
) -> Option<usize> {
    let mut dest = *cl;
    if mw == 0 {
        return None;
    }
    let last = dest;
    let mut stop: Option<usize> = None;
    let (mut last_pass, mut restarted) = (false, false);
    loop {
        for (j, d) in dests.iter().enumerate().skip(dest.map_or(0, |i| i + 1)) {
            if !d.overloaded && weight(d) >= *cw {
                *cl = Some(j);
                return Some(j);
            }
            if stop == Some(j) {
                *cl = Some(j);
                return None;
            }
        }
        dest = None;
        *cw -= di;
        if *cw <= 0 {
            *cw = mw;
            if last_pass || last.is_none() {
                *cl = None;
                return None;
            }
            restarted = true;
        }
        last_pass = *cw <= di;
        if last_pass && restarted && last.is_some() {
            stop = last;
        }
    }
}

/// `ip_vs_lc_schedule`: the lowest `(activeconns << 8) + inactconns` among servers with
/// weight > 0, not overloaded; the first in list order on a tie.
fn lc_schedule(dests: &[Destination]) -> Option<usize> {
    let mut least: Option<(usize, i64)> = None;
    for (i, d) in dests.iter().enumerate() {
        if d.overloaded || d.spec.weight == 0 {
            continue;
        }
        let doh = conn_overhead(d);
        if least.is_none_or(|(_, loh)| doh < loh) {
            least = Some((i, doh));
        }
    }
    least.map(|(i, _)| i)
}

/// `ip_vs_wlc_schedule` (overhead `(activeconns << 8) + inactconns`) and
/// `ip_vs_sed_schedule` (overhead `activeconns + 1`): the first usable server, then any
/// later one with `loh * weight(d) > doh * weight(least)`.
fn weighted_least(dests: &[Destination], overhead: fn(&Destination) -> i64) -> Option<usize> {
    let first = dests
        .iter()
        .position(|d| !d.overloaded && d.spec.weight > 0)?;
    let (mut least, mut loh) = (first, overhead(&dests[first]));
    for (i, d) in dests.iter().enumerate().skip(first + 1) {
        if d.overloaded {
            continue;
        }
        let doh = overhead(d);
        if loh * weight(d) > doh * weight(&dests[least]) {
            least = i;
            loh = doh;
        }
    }
    Some(least)
}

/// `ip_vs_nq_schedule`: an idle server (no active connection) at once, else as sed.
fn nq_schedule(dests: &[Destination]) -> Option<usize> {
    let mut least: Option<(usize, i64)> = None;
    for (i, d) in dests.iter().enumerate() {
        if d.overloaded || d.spec.weight == 0 {
            continue;
        }
        let doh = active_overhead(d);
        if d.counters.activeconns == 0 {
            return Some(i);
        }
        let better = match least {
            None => true,
            Some((l, loh)) => loh * weight(d) > doh * weight(&dests[l]),
        };
        if better {
            least = Some((i, doh));
        }
    }
    least.map(|(i, _)| i)
}

/// `ip_vs_sh_get` / `ip_vs_sh_get_fallback` and their mh twins: the bucket of the hash, or
/// with the fallback flag, on an unavailable server the buckets of the hashes at offsets
/// `ihash`, `ihash + 1`, … round the table.
fn hashed_pick(
    table: &[Option<usize>],
    dests: &[Destination],
    fallback: bool,
    size: usize,
    hash: impl Fn(u32) -> usize,
) -> Option<usize> {
    let ihash = hash(0);
    let d = table[ihash]?;
    if !unavailable(&dests[d]) {
        return Some(d);
    }
    if !fallback {
        return None;
    }
    for offset in 0..size {
        let roffset = ((offset + ihash) % size) as u32;
        let d = table[hash(roffset)]?;
        if !unavailable(&dests[d]) {
            return Some(d);
        }
    }
    None
}

/// `ip_vs_sh_reassign`: bucket by bucket round the list, each server filling as many
/// consecutive buckets as its weight (at least one, a weight-0 server too).
fn sh_reassign(b: &mut [Option<usize>], dests: &[Destination]) {
    if dests.is_empty() {
        b.iter_mut().for_each(|x| *x = None);
        return;
    }
    let (mut p, mut count) = (0usize, 0i64);
    for slot in b.iter_mut() {
        if p == dests.len() {
            p = 0;
        }
        *slot = Some(p);
        count += 1;
        if count >= weight(&dests[p]) {
            p += 1;
            count = 0;
        }
    }
}

/// `ip_vs_dh_reassign`: one bucket per server round the list, weights ignored.
fn dh_reassign(b: &mut [Option<usize>], dests: &[Destination]) {
    for (i, slot) in b.iter_mut().enumerate() {
        *slot = (!dests.is_empty()).then(|| i % dests.len());
    }
}

/// `ip_vs_mh_reassign`: `ip_vs_mh_gcd_weight`, `ip_vs_mh_shift_weight`, then
/// `ip_vs_mh_permutate` (each server's offset and skip from the two keyed hashes of its
/// address and port) and `ip_vs_mh_populate` (servers take turns claiming their next free
/// preferred entry, `turns` entries a round by their last non-zero weight).
fn mh_reassign(t: &mut [Option<usize>], dests: &[Destination]) {
    let g = dests
        .iter()
        .map(|d| i64::from(d.last_weight))
        .filter(|&w| w > 0)
        .fold(0, |g, w| if g > 0 { gcd(w, g) } else { w });
    if g < 1 {
        // ip_vs_mh_populate: no weight at all resets the table.
        t.iter_mut().for_each(|x| *x = None);
        return;
    }
    let max = dests
        .iter()
        .map(|d| i64::from(d.last_weight))
        .max()
        .unwrap_or(0);
    let rshift = (fls(max / g) - i64::from(MH_TAB_BITS)).max(0);
    let size = MH_TAB_SIZE as u32;
    struct Setup {
        skip: u32,
        perm: u32,
        turns: i64,
    }
    let mut setup: Vec<Setup> = dests
        .iter()
        .map(|d| {
            let offset = mh_hashkey(d.spec.addr, d.spec.port, MH_HASH1, 0) % size;
            let skip = mh_hashkey(d.spec.addr, d.spec.port, MH_HASH2, 0) % (size - 1) + 1;
            let lw = i64::from(d.last_weight);
            let t = (lw / g) >> rshift;
            Setup {
                skip,
                perm: offset,
                turns: if t != 0 { t } else { i64::from(lw != 0) },
            }
        })
        .collect();
    let mut taken = vec![false; MH_TAB_SIZE];
    let mut n = 0usize;
    let mut dt_count = 0i64;
    'fill: while n < MH_TAB_SIZE {
        let mut p = 0usize;
        while p < dests.len() {
            let ds = &mut setup[p];
            if ds.turns < 1 {
                p += 1;
                continue;
            }
            while taken[ds.perm as usize] {
                ds.perm += ds.skip;
                if ds.perm >= size {
                    ds.perm -= size;
                }
            }
            let c = ds.perm as usize;
            taken[c] = true;
            t[c] = Some(p);
            n += 1;
            if n == MH_TAB_SIZE {
                break 'fill;
            }
            dt_count += 1;
            if dt_count >= ds.turns {
                dt_count = 0;
                p += 1;
            }
        }
    }
}
