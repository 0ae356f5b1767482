//! # sim-conntrack
//!
//! The connection tracking table.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
