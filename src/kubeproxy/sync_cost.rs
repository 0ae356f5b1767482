//! What a kube-proxy sync costs in time: a model of `iptables-restore` and `nft -f` as a
//! function of the payload, and of the conntrack reconciler as a function of the table,
//! calibrated on the real kernel (`docs/calibration/`; docs/kube-proxy-model.md §5a).
//!
//! A payload is reduced to its [`PayloadShape`] (lines, chains, rules, set/map elements);
//! [`SyncCostModel::restore_ns`] charges an operation's fixed cost plus its per-line term
//! and a term for the rules already loaded (iptables-nft and nft read the table back before
//! they commit). [`SyncCostModel::cleanup_ns`] charges the reconciler's dump of the UDP
//! table and its deletes: one netlink request each (kube-proxy before kubernetes #135511)
//! or batched (after).

/// The size of one restore payload.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PayloadShape {
    /// Lines of text.
    pub lines: usize,
    /// Chains declared (`:CHAIN` lines; `add chain`).
    pub chains: usize,
    /// Rules (`-A` lines; `add rule`).
    pub rules: usize,
    /// Set and map elements (`add element`, one element a line as kube-proxy writes them).
    pub elements: usize,
}

impl PayloadShape {
    /// The shape of an `iptables-restore` payload.
    pub fn of_iptables(text: &str) -> PayloadShape {
        let mut s = PayloadShape::default();
        for l in text.lines() {
            s.lines += 1;
            if l.starts_with(':') {
                s.chains += 1;
            } else if l.starts_with("-A ") || l.starts_with("-I ") {
                s.rules += 1;
            }
        }
        s
    }

    /// The shape of an `nft -f` transaction.
    pub fn of_nft(text: &str) -> PayloadShape {
        let mut s = PayloadShape::default();
        for l in text.lines() {
            s.lines += 1;
            if l.starts_with("add chain ") {
                s.chains += 1;
            } else if l.starts_with("add rule ") || l.starts_with("insert rule ") {
                s.rules += 1;
            } else if l.starts_with("add element ") {
                s.elements += 1;
            }
        }
        s
    }
}

/// One operation's modelled time: `fixed + per_unit * x + per_unit_sq * x^2` nanoseconds,
/// where `x` is what [`SyncCostModel`] says for the operation.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct OpCost {
    /// Nanoseconds whatever the size (process start, netlink socket, the commit).
    pub fixed_ns: f64,
    /// Nanoseconds per unit.
    pub per_unit_ns: f64,
    /// Nanoseconds per unit squared (nft and iptables-nft look chains up by name in lists).
    pub per_unit_sq_ns: f64,
}

impl OpCost {
    /// The modelled time for `x` units, in whole nanoseconds.
    pub fn ns(&self, x: usize) -> u64 {
        let x = x as f64;
        (self.fixed_ns + self.per_unit_ns * x + self.per_unit_sq_ns * x * x).round() as u64
    }
}

/// How the reconciler's deletes are charged.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteCost {
    /// Not charged: the event-based cleanups of v1.31 and earlier run `conntrack -D` per
    /// filter, which the calibration does not time, and an external reconciler is a real
    /// process of its own.
    NotCharged,
    /// One netlink request and its ack per flow (kube-proxy v1.32 – v1.35, before
    /// kubernetes #135511).
    PerEntry,
    /// Requests batched (#135511, merged for v1.36).
    Batched,
}

/// The calibrated cost of kube-proxy's operations (see the module documentation).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct SyncCostModel {
    /// `iptables-restore --noflush` of a full sync; `x` = payload lines + rules loaded.
    pub iptables_full: OpCost,
    /// `iptables-restore --noflush` of a partial sync; `x` = payload lines + rules loaded.
    pub iptables_partial: OpCost,
    /// `nft -f` of a full sync; `x` = transaction lines + rules loaded.
    pub nft_full: OpCost,
    /// `nft -f` of an incremental sync; `x` = transaction lines + rules loaded.
    pub nft_incremental: OpCost,
    /// The reconciler's dump of the table; `x` = entries listed.
    pub ct_list: OpCost,
    /// Deletes one request each; `x` = deletes.
    pub ct_delete_each: OpCost,
    /// Deletes batched; `x` = deletes.
    pub ct_delete_batched: OpCost,
}

impl SyncCostModel {
    /// The model fitted to `docs/calibration/sync-cost.csv` by `docs/calibration/fit.py`
    /// (this project's 2-core VM, kernel 6.18, iptables v1.8.9 (nf_tables), nftables
    /// v1.0.6; docs/calibration/README.md has the machine, the points and the fit).
    pub const CALIBRATED: SyncCostModel = SyncCostModel {
        iptables_full: OpCost {
            fixed_ns: IPT_FULL.0,
            per_unit_ns: IPT_FULL.1,
            per_unit_sq_ns: IPT_FULL.2,
        },
        iptables_partial: OpCost {
            fixed_ns: IPT_PARTIAL.0,
            per_unit_ns: IPT_PARTIAL.1,
            per_unit_sq_ns: IPT_PARTIAL.2,
        },
        nft_full: OpCost {
            fixed_ns: NFT_FULL.0,
            per_unit_ns: NFT_FULL.1,
            per_unit_sq_ns: NFT_FULL.2,
        },
        nft_incremental: OpCost {
            fixed_ns: NFT_INCR.0,
            per_unit_ns: NFT_INCR.1,
            per_unit_sq_ns: NFT_INCR.2,
        },
        ct_list: OpCost {
            fixed_ns: CT_LIST.0,
            per_unit_ns: CT_LIST.1,
            per_unit_sq_ns: CT_LIST.2,
        },
        ct_delete_each: OpCost {
            fixed_ns: CT_EACH.0,
            per_unit_ns: CT_EACH.1,
            per_unit_sq_ns: CT_EACH.2,
        },
        ct_delete_batched: OpCost {
            fixed_ns: CT_BATCHED.0,
            per_unit_ns: CT_BATCHED.1,
            per_unit_sq_ns: CT_BATCHED.2,
        },
    };

    /// The modelled time of writing a payload of `shape` (`nft`: an `nft -f` transaction,
    /// else an `iptables-restore` payload; `full`: a full sync) onto a table holding
    /// `loaded_rules` rules.
    pub fn restore_ns(
        &self,
        nft: bool,
        full: bool,
        shape: &PayloadShape,
        loaded_rules: usize,
    ) -> u64 {
        let op = match (nft, full) {
            (false, true) => &self.iptables_full,
            (false, false) => &self.iptables_partial,
            (true, true) => &self.nft_full,
            (true, false) => &self.nft_incremental,
        };
        op.ns(shape.lines + loaded_rules)
    }

    /// The modelled time of the reconciler's work after a sync: `lists` dumps that returned
    /// `listed` entries in all, then `deletes` deletes charged as `how`.
    pub fn cleanup_ns(&self, lists: usize, listed: usize, deletes: usize, how: DeleteCost) -> u64 {
        if how == DeleteCost::NotCharged {
            return 0;
        }
        let list = if lists == 0 {
            0
        } else {
            self.ct_list.ns(listed) + self.ct_list.fixed_ns.round() as u64 * (lists as u64 - 1)
        };
        let delete = match (deletes, how) {
            (0, _) => 0,
            (_, DeleteCost::PerEntry) => self.ct_delete_each.ns(deletes),
            _ => self.ct_delete_batched.ns(deletes),
        };
        list + delete
    }
}

// The coefficients `docs/calibration/fit.py` printed for `docs/calibration/sync-cost.csv`
// (fixed ns, ns per unit, ns per unit squared).
const IPT_FULL: (f64, f64, f64) = (19_360_121.0, 2_429.76, 2.133);
const IPT_PARTIAL: (f64, f64, f64) = (52_620_073.0, 2_903.53, 0.1021);
const NFT_FULL: (f64, f64, f64) = (35_747_865.0, 0.0, 0.9188);
const NFT_INCR: (f64, f64, f64) = (10_048_414.0, 1_891.30, 0.008_660);
const CT_LIST: (f64, f64, f64) = (3_418_454.0, 980.76, 0.0);
const CT_EACH: (f64, f64, f64) = (0.0, 15_106.25, 0.0);
const CT_BATCHED: (f64, f64, f64) = (0.0, 10_496.89, 0.053_60);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_count_what_each_tool_reads() {
        let ipt = "*nat\n:KUBE-SERVICES - [0:0]\n:KUBE-SVC-X - [0:0]\n-A KUBE-SERVICES -j KUBE-SVC-X\nCOMMIT\n";
        let s = PayloadShape::of_iptables(ipt);
        assert_eq!((s.lines, s.chains, s.rules, s.elements), (5, 2, 1, 0));
        let nft = "add table ip kube-proxy\nadd chain ip kube-proxy services\nadd rule ip kube-proxy services ip daddr 10.96.0.1 goto x\nadd element ip kube-proxy cluster-ips { 10.96.0.1 }\n";
        let s = PayloadShape::of_nft(nft);
        assert_eq!((s.lines, s.chains, s.rules, s.elements), (4, 1, 1, 1));
    }

    #[test]
    fn bigger_payloads_and_tables_cost_more() {
        let m = SyncCostModel::CALIBRATED;
        let small = PayloadShape {
            lines: 1_000,
            ..PayloadShape::default()
        };
        let big = PayloadShape {
            lines: 100_000,
            ..PayloadShape::default()
        };
        for nft in [false, true] {
            for full in [false, true] {
                assert!(m.restore_ns(nft, full, &big, 0) > m.restore_ns(nft, full, &small, 0));
                assert!(
                    m.restore_ns(nft, full, &small, 50_000) > m.restore_ns(nft, full, &small, 0)
                );
            }
        }
        let each = m.cleanup_ns(1, 40_000, 10_000, DeleteCost::PerEntry);
        let batched = m.cleanup_ns(1, 40_000, 10_000, DeleteCost::Batched);
        assert!(each > batched && batched > m.cleanup_ns(1, 40_000, 0, DeleteCost::Batched));
        assert_eq!(m.cleanup_ns(1, 40_000, 10_000, DeleteCost::NotCharged), 0);
    }
}
