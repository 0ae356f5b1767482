//! Captures (pcap, pcapng; Ethernet, raw IP, Linux cooked): read, and when one reads, replayed
//! (`nfsim replay --trace --json --pcap-out`) through the kube-proxy fixture's rules.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfsim::explain::{replay_with, NodeSpec, ReplayOptions, ReplayOutput};
use sim_netfilter::netns::Netns;
use std::sync::OnceLock;

fn node() -> &'static (NodeSpec, Netns) {
    static NODE: OnceLock<(NodeSpec, Netns)> = OnceLock::new();
    NODE.get_or_init(|| {
        let spec = NodeSpec::parse("172.18.0.2", 24, Some("10.244.0.0/16"), 1).unwrap();
        let rules = include_str!("../../tests/fixtures/cli/kube-proxy.rules");
        let ns = spec.build(rules, "kube-proxy.rules").unwrap();
        (spec, ns)
    })
}

fuzz_target!(|data: &[u8]| {
    let Ok(cap) = sim_core::pcap::read(data, &sim_core::pcap::ReadOptions::default()) else {
        return;
    };
    let (spec, base) = node();
    let (mut text, mut json, mut pcap) = (Vec::new(), Vec::new(), Vec::new());
    let _ = replay_with(
        spec,
        base.clone(),
        &cap,
        "fuzz.pcap",
        &ReplayOptions {
            trace: true,
            ..Default::default()
        },
        ReplayOutput {
            text: Some(&mut text),
            json: Some(&mut json),
            pcap: Some(&mut pcap),
        },
    );
});
