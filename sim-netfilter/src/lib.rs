//! # sim-netfilter
//!
//! Tables, chains, matches, targets, iptables-save/restore text and the hook pipeline.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
