//! DNS for the simulation's clients and servers: the messages (`wire`), a server's zone
//! (`zone`), `resolv.conf` (`resolv_conf`) and the stub resolvers of glibc and musl
//! (`resolver`), all sans-IO and clock-free. docs/resolver.md describes the behaviour and the
//! C library sources each part follows.
//!
//! Reading order: [`wire`] (names are interned in a [`DnsNames`] table; queries and answers
//! travel as small `Copy` values and become bytes only for captures), [`zone`] (which names
//! exist; NXDOMAIN, NODATA, truncation with TC), [`resolv_conf`], [`resolver`]; [`drive`] runs a
//! resolver against a zone alone (what the kernel-lab test compares with a real lookup);
//! [`tag`] carries a query or an answer in a simulated packet's tag, and [`DnsData`] is what a
//! run shares: its names and its servers' zones.

pub mod drive;
pub mod resolv_conf;
pub mod resolver;
pub mod tag;
pub mod wire;
pub mod zone;

pub use resolv_conf::{Libc, ResolvConf, ResolvConfError};
pub use resolver::{candidates, Action, LookupRecord, LookupResult, Resolver, SocketId};
pub use wire::{Answer, DnsNames, NameId, QType, Query, Rcode};
pub use zone::{Transport, Zone, ZoneEntry};

/// The DNS of one run: every name its resolvers may ask and its servers know, interned once
/// at load, and the zones of its DNS servers (`apps[].udpServer.zone`), by index.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsData {
    /// The names.
    pub names: DnsNames,
    /// The zones, numbered as `AppDef::UdpServer::zone` names them.
    pub zones: Vec<Zone>,
}

impl DnsData {
    /// The records of `name` as a capture writes them: those of the first zone that has the
    /// name (the loader refuses zones that give one name different records).
    pub fn records(&self, name: NameId, qtype: QType) -> &[std::net::IpAddr] {
        self.zones
            .iter()
            .find_map(|z| z.get(name))
            .map_or(&[], |e| e.records(qtype))
    }
}

#[cfg(test)]
mod tests;
