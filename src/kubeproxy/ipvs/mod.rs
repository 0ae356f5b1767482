//! kube-proxy's IPVS proxier (kubernetes `pkg/proxy/ipvs`): what one node's kube-proxy in
//! `--proxy-mode=ipvs` writes on every sync, as data.
//!
//! Reading order:
//!
//! 1. [`sets`]: the seventeen ipsets of `ipsetInfo` (`KUBE-CLUSTER-IP`, `KUBE-LOOP-BACK`,
//!    `KUBE-NODE-PORT-TCP`, …) with their types and comments, the entry text, and the
//!    `ipset` commands of a sync ([`IpsetEntries::restore_text`]).
//! 2. [`render`]: [`render_ipvs_sync`], `syncProxyRules` as data: the ipset entries, the
//!    `iptables-restore --noflush` payload (`writeIptablesRules`, nat then filter), the jump
//!    rules (`iptablesJumpChain`, ensured on every sync), the `kube-ipvs0` addresses, and
//!    the virtual servers with the real servers `syncEndpoint` wants.
//! 3. [`graceful`]: the `GracefulTerminationManager`: a removed real server is deleted at
//!    once when it is UDP or SCTP or has no connections, else set to weight 0 and deleted
//!    once its active and inactive connections are gone, checked every minute.
//! 4. [`kernel`]: the same over a node's IPVS table (sim-netfilter's `Ipvs`), and one
//!    sync's `kube-ipvs0` addresses and servers applied to a node.
//! 5. [`IpvsSettings`] (`--ipvs-scheduler`, `--ipvs-strict-arp`, `--ipvs-tcp-timeout`, …)
//!    and [`IpvsSettings::timing`]: every IPVS sync is a full one, `minSyncPeriod` 0 and
//!    `syncPeriod` 30 s as `NewBoundedFrequencyRunner(…, minSyncPeriod, syncPeriod, 2)`.
//!
//! The conntrack cleanup after a sync is the same call as iptables mode's
//! (`conntrack.CleanStaleEntries` at the end of `syncProxyRules`), so each release's
//! [`crate::kubeproxy::ConntrackCleanup`] serves IPVS mode unchanged.
//!
//! Releases: the rules written here are those of kubernetes v1.30 to v1.37 (the
//! `KUBE-IPVS-OUT-FILTER` chain of #119656, the `KUBE-PROXY-FIREWALL` /
//! `KUBE-SOURCE-RANGES-FIREWALL` pair of v1.26, `KUBE-IPVS-FILTER` of #72236);
//! [`release_supported`] refuses the others and `none`.

pub mod graceful;
pub mod kernel;
pub mod render;
pub mod sets;

pub use graceful::{
    apply_virtual_servers, GracefulTermination, IpvsApplyReport, IpvsOps, MemIpvs, RealServerKey,
    RsStats, VsConfig, VsKey,
};
pub use render::{
    ipvs_jump_rules, render_ipvs_sync, IpvsRendered, RealServer, VirtualServer, KUBE_IPVS0,
};
pub use sets::{IpsetEntries, IpvsSetInfo, IpvsSetType, IPSET_INFO};

use crate::kubeproxy::render::ProxierConfig;
use crate::kubeproxy::runner::SyncTiming;
use sim_core::SimDuration;
use std::net::IpAddr;

/// The schedulers `--ipvs-scheduler` accepts (`validateIPVSSchedulerMethod`, with `mh`,
/// which the proxier handles with `FlagSourceHash`).
pub const SCHEDULERS: [&str; 9] = ["rr", "wrr", "lc", "wlc", "sh", "dh", "sed", "nq", "mh"];

/// `defaultScheduler`.
pub const DEFAULT_SCHEDULER: &str = "rr";

/// `KubeProxyIPVSConfiguration.SyncPeriod`'s default (pkg/proxy/apis/config/v1alpha1
/// `SetDefaults_KubeProxyConfiguration`): 30 s. `MinSyncPeriod` has no default (0).
pub const IPVS_SYNC_PERIOD: SimDuration = SimDuration::from_secs(30);

/// The IPVS proxier's own settings (`KubeProxyIPVSConfiguration`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpvsSettings {
    /// `--ipvs-scheduler` (default `rr`).
    pub scheduler: String,
    /// `--ipvs-strict-arp`: `arp_ignore=1`, `arp_announce=2` on all interfaces.
    pub strict_arp: bool,
    /// `--ipvs-tcp-timeout` in seconds (0: leave the kernel's, 900 s).
    pub tcp_timeout_secs: u32,
    /// `--ipvs-tcpfin-timeout` in seconds (0: leave the kernel's, 120 s).
    pub tcp_fin_timeout_secs: u32,
    /// `--ipvs-udp-timeout` in seconds (0: leave the kernel's, 300 s).
    pub udp_timeout_secs: u32,
    /// The node's local addresses of the family other than `kube-ipvs0`'s
    /// (`GetAllLocalAddressesExcept`, loopback and link-local left out): NodePort virtual
    /// servers listen on each. `None`: the node address of [`ProxierConfig`] only.
    pub node_addresses: Option<Vec<IpAddr>>,
}

impl Default for IpvsSettings {
    fn default() -> IpvsSettings {
        IpvsSettings {
            scheduler: DEFAULT_SCHEDULER.to_string(),
            strict_arp: false,
            tcp_timeout_secs: 0,
            tcp_fin_timeout_secs: 0,
            udp_timeout_secs: 0,
            node_addresses: None,
        }
    }
}

impl IpvsSettings {
    /// The node addresses NodePorts listen on, sorted (kube-proxy: a Go set, any order).
    pub fn node_addresses(&self, cfg: &ProxierConfig) -> Vec<IpAddr> {
        let mut v: Vec<IpAddr> = match &self.node_addresses {
            None => vec![cfg.node_ip],
            Some(addrs) => addrs
                .iter()
                .copied()
                .filter(|a| cfg.family.contains(*a) && !a.is_loopback())
                .collect(),
        };
        v.sort();
        v.dedup();
        v
    }

    /// The IPVS proxier's sync timing: `minSyncPeriod` 0, `syncPeriod` 30 s as the runner's
    /// `maxInterval` (a sync at least every 30 s), burst 2; every sync is full.
    pub fn timing() -> SyncTiming {
        SyncTiming {
            min_sync_period: SimDuration::ZERO,
            sync_period: IPVS_SYNC_PERIOD,
            burst_syncs: 2,
            full_sync_period: IPVS_SYNC_PERIOD,
        }
    }
}

/// Whether nfsim models IPVS mode for a `kubeProxy.release` name; the error says which
/// releases it does.
pub fn release_supported(release: &str) -> Result<(), String> {
    const OK: [&str; 10] = [
        "v1.30",
        "v1.31",
        "v1.31-fixed",
        "v1.31+127780",
        "v1.32",
        "v1.33",
        "v1.34",
        "v1.35",
        "v1.36",
        "v1.37",
    ];
    if OK.contains(&release) || release == "latest" {
        Ok(())
    } else {
        Err(format!(
            "IPVS mode is modelled for releases v1.30 to v1.37 and latest (the rules of \
             pkg/proxy/ipvs since KUBE-IPVS-OUT-FILTER, kubernetes #119656), not {release:?}"
        ))
    }
}
