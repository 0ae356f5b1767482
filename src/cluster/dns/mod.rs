//! DNS for the simulation's clients and servers: the messages (`wire`), a server's zone
//! (`zone`), `resolv.conf` (`resolv_conf`) and the stub resolvers of glibc and musl
//! (`resolver`), all sans-IO and clock-free. docs/resolver.md describes the behaviour and the
//! C library sources each part follows.
//!
//! Reading order: [`wire`] (names are interned in a [`DnsNames`] table; queries and answers
//! travel as small `Copy` values and become bytes only for captures), [`zone`] (which names
//! exist; NXDOMAIN, NODATA, truncation with TC), [`resolv_conf`], [`resolver`]; [`drive`] runs a
//! resolver against a zone alone (what the kernel-lab test compares with a real lookup).

pub mod drive;
pub mod resolv_conf;
pub mod resolver;
pub mod wire;
pub mod zone;

pub use resolv_conf::{Libc, ResolvConf, ResolvConfError};
pub use resolver::{candidates, Action, LookupRecord, LookupResult, Resolver, SocketId};
pub use wire::{Answer, DnsNames, NameId, QType, Query, Rcode};
pub use zone::{Transport, Zone, ZoneEntry};

#[cfg(test)]
mod tests;
