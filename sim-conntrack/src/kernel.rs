//! Which Linux release a node runs, and what of the model depends on it.
//!
//! nfsim's model follows Linux 6.18 ([`KernelVersion::MODEL`], checked on this project's lab
//! machine). A scenario may name an older release per node (`kernel: {version: "5.4"}`);
//! every behaviour that differs between releases asks a [`KernelVersion`] here, and
//! docs/kernel-model.md §22 tables them (release, behaviour, commit). Releases before
//! [`KernelVersion::OLDEST`] (4.14) and after the model's are refused: nfsim has not looked at
//! what they do.

use std::fmt;

/// A Linux release, `major.minor[.patch]`, ordered as releases are (`5.8.7 < 5.8.8 < 5.9`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct KernelVersion {
    /// `5` of `5.8.8`.
    pub major: u16,
    /// `8` of `5.8.8`.
    pub minor: u16,
    /// The stable release, `8` of `5.8.8` (0 when not given).
    pub patch: u16,
}

/// Why a version string was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum KernelVersionError {
    /// Not `MAJOR.MINOR[.PATCH]`.
    #[error("{0:?} is not a kernel version: expected MAJOR.MINOR or MAJOR.MINOR.PATCH, as \"5.4\" or \"5.8.8\"")]
    Syntax(String),
    /// Before [`KernelVersion::OLDEST`].
    #[error("kernel {0} is older than the oldest release nfsim models ({oldest}): expected {oldest} or later", oldest = KernelVersion::OLDEST)]
    TooOld(KernelVersion),
    /// After [`KernelVersion::MODEL`].
    #[error("kernel {0} is newer than the release nfsim's model follows ({model}): expected {oldest} to {model}", oldest = KernelVersion::OLDEST, model = KernelVersion::MODEL)]
    TooNew(KernelVersion),
}

impl KernelVersion {
    /// `major.minor.patch`.
    pub const fn new(major: u16, minor: u16, patch: u16) -> KernelVersion {
        KernelVersion {
            major,
            minor,
            patch,
        }
    }

    /// The release today's model follows (and every node's default): Linux 6.18.
    pub const MODEL: KernelVersion = KernelVersion::new(6, 18, 0);

    /// The oldest release nfsim models: 4.14 (an LTS still found on older cloud images).
    pub const OLDEST: KernelVersion = KernelVersion::new(4, 14, 0);

    /// Whether this release is `major.minor.patch` or later.
    pub const fn at_least(self, major: u16, minor: u16, patch: u16) -> bool {
        let (a, b) = (
            ((self.major as u64) << 32) | ((self.minor as u64) << 16) | self.patch as u64,
            ((major as u64) << 32) | ((minor as u64) << 16) | patch as u64,
        );
        a >= b
    }

    /// How `__nf_conntrack_confirm` handles a clash on this release.
    pub const fn clash(self) -> ClashHandling {
        if self.at_least(5, 6, 0) {
            ClashHandling::InsertClash
        } else if self.at_least(4, 19, 0) {
            ClashHandling::MergeMatching
        } else {
            ClashHandling::MergeUnNatted
        }
    }

    /// Whether a resolved clash counts `clash_resolve` (5.10, bc92470413f3 "netfilter:
    /// conntrack: add clash resolution stat counter") rather than `insert_failed`, as
    /// earlier releases count every clash.
    pub const fn counts_clash_resolve(self) -> bool {
        self.at_least(5, 10, 0)
    }

    /// Whether an `IPS_NAT_CLASH` entry lives past its first reply: 5.8.8 and 5.9
    /// (c46172147ebb "netfilter: conntrack: do not auto-delete clash entries on reply");
    /// from 5.6 to 5.8.7 `nf_conntrack_udp_refresh_unreplied` kills it on that reply.
    pub const fn clash_entry_survives_reply(self) -> bool {
        self.at_least(5, 8, 8)
    }

    /// `nf_conntrack_udp_timeout_stream`'s default in seconds: 120 from 5.14 (294304e4c50b
    /// "netfilter: conntrack: udp: set stream timeout to 2 minutes"), 180 before.
    pub const fn udp_timeout_stream_secs(self) -> u64 {
        if self.at_least(5, 14, 0) {
            120
        } else {
            180
        }
    }

    /// Whether nftables has what kube-proxy's nftables mode needs: 5.13 (kube-proxy's own
    /// check, `utilkernel.NFTablesKubeProxyKernelVersion`).
    pub const fn has_kube_proxy_nftables(self) -> bool {
        self.at_least(5, 13, 0)
    }
}

impl Default for KernelVersion {
    fn default() -> KernelVersion {
        KernelVersion::MODEL
    }
}

impl fmt::Display for KernelVersion {
    /// `5.4`, `5.8.8`: the patch level only when it is not 0.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.major, self.minor)?;
        if self.patch != 0 {
            write!(f, ".{}", self.patch)?;
        }
        Ok(())
    }
}

impl std::str::FromStr for KernelVersion {
    type Err = KernelVersionError;
    /// `"5.4"`, `"5.8.8"`, `"v6.6"`; a suffix after the numbers (`5.15.0-91-generic`, as
    /// `uname -r` prints) is ignored. Checked against [`KernelVersion::OLDEST`] and
    /// [`KernelVersion::MODEL`].
    fn from_str(s: &str) -> Result<KernelVersion, KernelVersionError> {
        let t = s.trim();
        let t = t.strip_prefix('v').unwrap_or(t);
        let core = t.split(['-', '+', '~']).next().unwrap_or("");
        let parts: Vec<&str> = core.split('.').collect();
        let syntax = || KernelVersionError::Syntax(s.to_string());
        if !(2..=3).contains(&parts.len()) {
            return Err(syntax());
        }
        let num = |p: &str| -> Result<u16, KernelVersionError> {
            if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
                return Err(syntax());
            }
            p.parse::<u16>().map_err(|_| syntax())
        };
        let v = KernelVersion::new(
            num(parts[0])?,
            num(parts[1])?,
            parts.get(2).map(|p| num(p)).transpose()?.unwrap_or(0),
        );
        if v < KernelVersion::OLDEST {
            return Err(KernelVersionError::TooOld(v));
        }
        if v > KernelVersion::new(
            KernelVersion::MODEL.major,
            KernelVersion::MODEL.minor,
            u16::MAX,
        ) {
            return Err(KernelVersionError::TooNew(v));
        }
        Ok(v)
    }
}

/// What `__nf_conntrack_confirm` does when a new entry's tuple is already in the table (a
/// packet of the same flow, processed on another CPU, confirmed first): the loser's packet is
/// either merged onto the winner's entry, given an entry of its own, or dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClashHandling {
    /// 4.8 to 4.18 (`nf_ct_resolve_clash`, 71d8c47fc653): a UDP packet is merged onto the
    /// winner when the winner has no NAT binding at all (`IPS_NAT_DONE_MASK` clear), else
    /// dropped. On a node with a nat table every entry has (null) bindings, so in effect
    /// every clash drops.
    MergeUnNatted,
    /// 4.19 to 5.5 (ed07d9a021df "netfilter: nf_conntrack: resolve clash for matching
    /// conntracks"): also merged when both entries have the same tuples in both directions
    /// (`nf_ct_match`: the same NAT), else dropped.
    MergeMatching,
    /// 5.6 on (6a757c07e51f "netfilter: conntrack: allow insertion of clashing entries",
    /// `nf_ct_resolve_clash_harder`): what 4.19 merges is merged; a UDP loser with another
    /// NAT whose reply tuple is free is inserted by its reply tuple only, with
    /// `IPS_NAT_CLASH` and a fixed 1 s timeout, and its packet passes with its own NAT.
    InsertClash,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_orders_and_refuses_what_is_not_modelled() {
        let v = |s: &str| s.parse::<KernelVersion>();
        assert_eq!(v("5.4").unwrap(), KernelVersion::new(5, 4, 0));
        assert_eq!(v("v5.8.8").unwrap(), KernelVersion::new(5, 8, 8));
        assert_eq!(
            v("5.15.0-91-generic").unwrap(),
            KernelVersion::new(5, 15, 0)
        );
        assert_eq!(v("6.18").unwrap(), KernelVersion::MODEL);
        assert_eq!(v("6.18.3").unwrap(), KernelVersion::new(6, 18, 3));
        assert!(v("5.8.7").unwrap() < v("5.8.8").unwrap());
        assert!(v("5.8.8").unwrap() < v("5.9").unwrap());
        assert!(v("4.19").unwrap() > v("4.14").unwrap());
        assert!(matches!(v("4.9"), Err(KernelVersionError::TooOld(_))));
        assert!(matches!(v("6.19"), Err(KernelVersionError::TooNew(_))));
        assert!(matches!(v("7.0"), Err(KernelVersionError::TooNew(_))));
        for bad in ["5", "five", "5.x", "5.4.1.2", "", "5..4"] {
            assert!(
                matches!(v(bad), Err(KernelVersionError::Syntax(_))),
                "{bad}"
            );
        }
        assert_eq!(KernelVersion::new(5, 8, 8).to_string(), "5.8.8");
        assert_eq!(KernelVersion::new(5, 4, 0).to_string(), "5.4");
    }

    #[test]
    fn version_dependent_behaviours_switch_at_their_commits() {
        let v = |s: &str| s.parse::<KernelVersion>().unwrap();
        assert_eq!(v("4.14").clash(), ClashHandling::MergeUnNatted);
        assert_eq!(v("4.19").clash(), ClashHandling::MergeMatching);
        assert_eq!(v("5.4").clash(), ClashHandling::MergeMatching);
        assert_eq!(v("5.6").clash(), ClashHandling::InsertClash);
        assert!(!v("5.8.7").clash_entry_survives_reply());
        assert!(v("5.8.8").clash_entry_survives_reply());
        assert!(!v("5.9").counts_clash_resolve());
        assert!(v("5.10").counts_clash_resolve());
        assert_eq!(v("5.13").udp_timeout_stream_secs(), 180);
        assert_eq!(v("5.14").udp_timeout_stream_secs(), 120);
        assert!(!v("5.12").has_kube_proxy_nftables());
        assert!(v("5.13").has_kube_proxy_nftables());
    }
}
