//! Explaining packets: `nfsim trace` (in progress).
