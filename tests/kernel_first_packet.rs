//! `examples/kernel_first_packet.rs` kept working: kube-proxy's first full sync from nfsim's
//! model, on loopback addresses, loaded into the real kernel in a private network namespace
//! (`iptables-restore` + its jump rules in iptables mode, `nft -f` in nftables mode), and a
//! few hundred first packets sent through it by `benches/kernel/first_packet.py`. Every
//! packet must have made a confirmed conntrack entry, DNAT'd from its ClusterIP to one of
//! the Service's endpoints and masqueraded, as in nfsim's `proxy_modes` bench. The times it
//! prints are not checked (a loaded machine makes them anything); the figures in docs/performance.md come
//! from the example with 10,000 Services. Skips where the tools or root are missing.

#[path = "../benches/support/kernel_first_packet.rs"]
mod kernel_first_packet;
#[path = "support/tools.rs"]
mod tools;

use kernel_first_packet::{measure, KernelMode, TOOLS};

#[test]
fn the_kernel_dnats_and_masquerades_every_first_packet_in_both_modes() {
    let test = "the_kernel_dnats_and_masquerades_every_first_packet_in_both_modes";
    if !tools::have_or_skip(test, TOOLS) {
        return;
    }
    let (services, packets) = (50, 300);
    for mode in [KernelMode::Iptables, KernelMode::Nftables] {
        let f = measure(mode, services, packets).unwrap_or_else(|e| panic!("{e}"));
        eprintln!("{f:?}");
        assert_eq!((f.services, f.packets), (services, packets), "{f:?}");
        assert_eq!(f.entries, packets, "one entry per first packet: {f:?}");
        assert_eq!(
            f.dnatted, packets,
            "every packet DNAT'd to an endpoint: {f:?}"
        );
        assert_eq!(f.masqueraded, packets, "every packet masqueraded: {f:?}");
    }
    let f = measure(KernelMode::Baseline, services, packets).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!((f.entries, f.dnatted), (packets, 0), "{f:?}");
}
