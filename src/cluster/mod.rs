//! cluster (in progress).
