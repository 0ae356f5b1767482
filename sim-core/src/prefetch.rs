//! Software prefetch: a hint that the CPU should start loading a cache line now, so that a
//! later read finds it there. Unlike a read, the hint does not wait for the data and cannot
//! fault; it changes no result, only when memory is touched. On x86-64 it is the `PREFETCHT0`
//! instruction through `safe_arch`'s safe wrapper (the crates keep `forbid(unsafe_code)`);
//! elsewhere it does nothing. Used by conntrack's batched lookups and by the rule walk, which
//! asks for a chain's rules as soon as it knows it will jump there.

/// Starts loading the cache line that holds `r` into every cache level.
#[inline(always)]
pub fn line<T>(r: &T) {
    #[cfg(all(target_arch = "x86_64", target_feature = "sse"))]
    safe_arch::prefetch_t0(r);
    #[cfg(not(all(target_arch = "x86_64", target_feature = "sse")))]
    let _ = r;
}
