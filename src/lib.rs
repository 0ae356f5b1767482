//! # nfsim
//!
//! The simulated cluster, the kube-proxy model, scenario files and the command line.
#![forbid(unsafe_code)]
#![warn(missing_docs)]
