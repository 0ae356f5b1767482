//! Confirm races by kernel release (docs/kernel-model.md §22): two packets of one UDP flow
//! both miss the table (the first is not confirmed yet when the second is looked up, as on
//! two CPUs), get DNAT'd, and confirm in order; what `__nf_conntrack_confirm` does with the
//! second depends on the release. Each case cites the kernel function whose behaviour it
//! pins down (net/netfilter/nf_conntrack_core.c, nf_conntrack_proto_udp.c).
mod common;
use common::*;
use sim_conntrack::*;
use sim_core::{Packet, SimTime};

const CLIENT: &str = "10.244.1.5:40004";
const SVC: &str = "10.96.0.10:53";
const POD_X: &str = "10.244.2.7:53";
const POD_Y: &str = "10.244.3.8:53";

fn kernel(v: &str) -> Conntrack {
    let mut ct = table(Sysctls::default());
    ct.set_kernel(v.parse().unwrap());
    ct
}

/// One packet's NAT stage: DNAT to `to` (or a null binding when `None`), null SNAT.
fn nat(ct: &mut Conntrack, h: CtHandle, to: Option<&str>, p: &mut Packet) {
    match to {
        Some(to) => {
            let a = sa(to);
            ct.nat_setup(h.id, Manip::Dst, &NatRange::to_addr_port(a.ip(), a.port()))
                .unwrap();
        }
        None => {
            ct.nat_null_binding(h.id, Manip::Dst).unwrap();
        }
    }
    ct.nat_packet(h, Manip::Dst, p);
    ct.nat_null_binding(h.id, Manip::Src).unwrap();
    ct.nat_packet(h, Manip::Src, p);
}

fn tracked(v: CtVerdict) -> CtHandle {
    match v {
        CtVerdict::Tracked(h) => h,
        v => panic!("{v:?}"),
    }
}

/// A and B of one flow race: both `conntrack_in` before either confirms; A is DNAT'd to
/// `a`, B to `b` (`None`: no nat table at all, no bindings). Returns B's confirm result
/// and B's packet as it left NAT.
fn race(
    ct: &mut Conntrack,
    a: Option<&str>,
    b: Option<&str>,
    nat_table: bool,
) -> (Result<Option<CtHandle>, ConfirmError>, Packet) {
    let now = t(0);
    let mut pa = udp(CLIENT, SVC);
    let mut pb = udp(CLIENT, SVC);
    let ha = tracked(ct.conntrack_in(now, &pa));
    let hb = tracked(ct.conntrack_in(now, &pb));
    assert_ne!(ha.id, hb.id, "both packets made an unconfirmed entry");
    if nat_table {
        nat(ct, ha, a, &mut pa);
        nat(ct, hb, b, &mut pb);
    }
    assert_eq!(ct.confirm_resolving(now, ha), Ok(None), "A wins");
    (ct.confirm_resolving(now, hb), pb)
}

fn stats(ct: &Conntrack) -> (u64, u64, u64) {
    let s = ct.stats();
    (s.insert_failed, s.drop, s.clash_resolve)
}

/// 4.14 `nf_ct_resolve_clash`: merged only when the winner has no NAT binding
/// (`(ct->status & IPS_NAT_DONE_MASK) == 0`); `insert_failed` counts every clash at the
/// `dying:` label of `__nf_conntrack_confirm`, `drop` the unresolved ones.
#[test]
fn kernel_4_14_drops_every_clash_a_nat_table_saw() {
    let mut ct = kernel("4.14");
    let (r, _) = race(&mut ct, Some(POD_X), Some(POD_X), true);
    assert!(matches!(r, Err(ConfirmError::InsertFailed(_))), "{r:?}");
    assert_eq!(stats(&ct), (1, 1, 0));
    let mut ct = kernel("4.14");
    let (r, _) = race(&mut ct, None, None, true);
    assert!(
        matches!(r, Err(ConfirmError::InsertFailed(_))),
        "null bindings are bindings"
    );
    let mut ct = kernel("4.14");
    let (r, _) = race(&mut ct, None, None, false);
    assert!(matches!(r, Ok(Some(_))), "no nat table: merged, {r:?}");
    assert_eq!(stats(&ct), (1, 0, 0));
    assert_eq!(ct.len(), 1);
}

/// 4.19 (ed07d9a021df): `nf_ct_match` — the same NAT in both entries merges, another NAT
/// drops; still counted in `insert_failed` either way (no `clash_resolve` before 5.10).
#[test]
fn kernel_4_19_and_5_4_merge_the_same_nat_and_drop_another() {
    for v in ["4.19", "5.4"] {
        let mut ct = kernel(v);
        let (r, p) = race(&mut ct, Some(POD_X), Some(POD_X), true);
        let merged = r.unwrap().expect("merged onto A's entry");
        assert_eq!(p.to_string(), "udp 10.244.1.5:40004 -> 10.244.2.7:53");
        assert_eq!(ct.get(merged.id).unwrap().reply.src, sa(POD_X).ip());
        assert_eq!(stats(&ct), (1, 0, 0), "{v}");
        let mut ct = kernel(v);
        let (r, _) = race(&mut ct, Some(POD_X), Some(POD_Y), true);
        assert!(matches!(r, Err(ConfirmError::InsertFailed(_))), "{v}");
        assert_eq!(stats(&ct), (1, 1, 0), "{v}");
        assert_eq!(ct.len(), 1);
    }
}

/// 5.6 (6a757c07e51f, `nf_ct_resolve_clash_harder`): a loser with another NAT is inserted
/// by its reply tuple only, `IPS_NAT_CLASH`, 1 s; its packet passes with its own NAT and the
/// other pod's answer finds it; `conntrack -L` does not show it. 5.6 to 5.8.7 kill it on its
/// first reply (`nf_conntrack_udp_refresh_unreplied`), 5.8.8 on keep it (c46172147ebb) until
/// its fixed 1 s runs out.
#[test]
fn kernel_5_6_on_inserts_a_reply_only_clash_entry() {
    for (v, survives) in [("5.8.7", false), ("5.8.8", true), ("6.18", true)] {
        let mut ct = kernel(v);
        let (r, p) = race(&mut ct, Some(POD_X), Some(POD_Y), true);
        assert_eq!(r, Ok(None), "{v}: B keeps its own entry");
        assert_eq!(p.to_string(), "udp 10.244.1.5:40004 -> 10.244.3.8:53");
        let counted = if v == "6.18" { (0, 0, 1) } else { (1, 0, 0) };
        assert_eq!(stats(&ct), counted, "{v}");
        assert_eq!(lines(&ct, t(1)).len(), 1, "{v}: only A's entry is listed");
        assert_eq!(ct.len(), 2, "{v}: both are in the table");
        // Pod Y's answer is un-DNAT'd through the clash entry.
        let back = |ct: &mut Conntrack, ms| {
            let mut a = udp(POD_Y, CLIENT);
            let h = tracked(ct.conntrack_in(t(ms), &a));
            ct.nat_packet(h, Manip::Dst, &mut a);
            ct.nat_packet(h, Manip::Src, &mut a);
            ct.confirm(t(ms), h).unwrap();
            (h, a)
        };
        let (h, a) = back(&mut ct, 5);
        assert_eq!(
            a.to_string(),
            "udp 10.96.0.10:53 -> 10.244.1.5:40004",
            "{v}"
        );
        let e = ct.get(h.id);
        assert_eq!(e.is_some(), survives, "{v}: after the first reply");
        if let Some(e) = e {
            assert!(e.status.contains(Status::NAT_CLASH));
            let (h2, a2) = back(&mut ct, 600);
            assert_eq!(h2.id, h.id, "{v}: a second reply finds it too");
            assert_eq!(a2.to_string(), "udp 10.96.0.10:53 -> 10.244.1.5:40004");
            assert!(!ct.get(h.id).unwrap().status.contains(Status::ASSURED));
            ct.expire(t(1000));
            assert_eq!(
                ct.get(h.id),
                None,
                "{v}: gone 1 s after its confirm, refreshed or not"
            );
        }
    }
}

/// From 5.10 (bc92470413f3) a resolved clash counts `clash_resolve` only.
#[test]
fn kernel_6_18_counts_clash_resolve_for_merged_clashes() {
    let mut ct = kernel("6.18");
    let (r, _) = race(&mut ct, Some(POD_X), Some(POD_X), true);
    assert!(matches!(r, Ok(Some(_))));
    assert_eq!(stats(&ct), (0, 0, 1));
}

/// Only UDP allows clashes (`l4proto->allow_clash`): two SYNs of one connection drop.
#[test]
fn a_tcp_clash_drops_on_every_release() {
    for v in ["4.14", "5.4", "6.18"] {
        let mut ct = kernel(v);
        let now = SimTime::ZERO;
        let s = || tcp(CLIENT, POD_X, sim_core::TcpFlags::SYN);
        let ha = tracked(ct.conntrack_in(now, &s()));
        let hb = tracked(ct.conntrack_in(now, &s()));
        ct.confirm(now, ha).unwrap();
        assert!(matches!(
            ct.confirm(now, hb),
            Err(ConfirmError::InsertFailed(_))
        ));
        assert_eq!(stats(&ct), (1, 1, 0), "{v}");
    }
}

/// `race_hide` makes a later packet miss a confirmed entry until its own confirm, where
/// the clash is met; nothing of the sort without it.
#[test]
fn a_hidden_entry_is_missed_until_the_next_confirm() {
    let mut ct = kernel("4.14");
    let rules = Rules {
        dnat: vec![(sa(SVC), NatRange::to_addr_port(sa(POD_X).ip(), 53))],
        ..Rules::default()
    };
    let a = match send(&mut ct, t(0), udp(CLIENT, SVC), &rules) {
        Out::Passed(_, Some(h)) => h,
        o => panic!("{o:?}"),
    };
    assert!(ct.race_hide(a.id));
    assert_eq!(send(&mut ct, t(0), udp(CLIENT, SVC), &rules), Out::Dropped);
    assert_eq!(stats(&ct), (1, 1, 0));
    // Revealed by that confirm: the next packet finds A.
    assert!(matches!(
        send(&mut ct, t(1), udp(CLIENT, SVC), &rules),
        Out::Passed(_, Some(h)) if h.id == a.id
    ));
}
