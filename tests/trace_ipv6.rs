//! `trace` of an IPv6 packet (issue #23): refused, naming why, on a node given no IPv6
//! rules or no IPv6 address; traced through the ip6tables rules and IPv6 routes of a node
//! that has both (the path `nfsim trace SCENARIO --node N` takes for a scenario's node).

use nfsim::explain::{ipv6_unmodelled, trace_in, TraceOptions};
use sim_core::{IfName, Packet, SimTime};
use sim_netfilter::netns::{Ingress, Netns, NetnsConfig};
use sim_netfilter::Family;

const IP6_RULES: &str = "\
*nat
:PREROUTING ACCEPT [0:0]
:INPUT ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
:POSTROUTING ACCEPT [0:0]
-A PREROUTING -d fd00:96::10/128 -p udp -m udp --dport 53 -j DNAT --to-destination [fd01::5]:5353
-A POSTROUTING -s fd01::/64 -o eth0 -j MASQUERADE
COMMIT
";

fn ifn(s: &str) -> IfName {
    IfName::new(s).unwrap()
}

fn node(v6_addresses: bool, rules: bool) -> Netns {
    let mut ns = Netns::new(NetnsConfig::new("node", 1));
    if v6_addresses {
        ns.add_interface(ifn("eth0"), &[("fd00::1".parse().unwrap(), 64)])
            .unwrap();
        ns.add_interface(ifn("cni0"), &[("fd01::1".parse().unwrap(), 64)])
            .unwrap();
    } else {
        ns.add_interface(ifn("eth0"), &[("192.168.0.12".parse().unwrap(), 24)])
            .unwrap();
    }
    if rules {
        ns.restore_family(Family::Ipv6, IP6_RULES, false, false)
            .unwrap();
    }
    ns
}

fn trace(ns: &Netns, pkt: &str) -> Result<String, String> {
    let pkt: Packet = pkt.parse().unwrap();
    let opts = TraceOptions {
        local: false,
        all_branches: false,
        at: SimTime::ZERO,
    };
    trace_in(
        ns,
        pkt,
        Ingress::Interface(ifn("eth0")),
        "received on eth0".into(),
        1,
        &opts,
    )
    .map(|r| r.text())
    .map_err(|e| e.to_string())
}

#[test]
fn an_ipv6_packet_is_refused_without_ipv6_rules_or_addresses() {
    let p = "udp [fd00::2]:40000 -> [fd00:96::10]:53";
    let e = trace(&node(true, false), p).unwrap_err();
    assert!(
        e.contains("--packet") && e.contains("the node was given no IPv6 rules"),
        "{e}"
    );
    let e = trace(&node(false, true), p).unwrap_err();
    assert!(e.contains("the node has no IPv6 address"), "{e}");
    assert!(ipv6_unmodelled(&node(true, true)).is_none());
}

#[test]
fn an_ipv6_packet_is_traced_through_ip6tables_and_ipv6_routes() {
    let ns = node(true, true);
    let text = trace(&ns, "udp [fd00::2]:40000 -> [fd00:96::10]:53").unwrap();
    assert!(
        text.contains("[fd01::5]:5353"),
        "DNAT'd to the pod:\n{text}"
    );
    assert!(text.contains("cni0"), "forwarded out of cni0:\n{text}");
    // A pod's packet out of eth0: masqueraded to eth0's address.
    let text = trace(&ns, "udp [fd01::5]:41000 -> [fd00::2]:53").unwrap();
    assert!(
        text.contains("[fd00::1]:"),
        "masqueraded to fd00::1:\n{text}"
    );
    // The base namespace is unchanged (trace works on a copy).
    assert_eq!(ns.conntrack().count(), 0);
}

/// `replay` replays IPv6 packets on a node given IPv6 rules and addresses (through its
/// ip6tables), and skips them with the reason on one that is not.
#[test]
fn replay_replays_ipv6_packets_on_a_node_modelled_for_them() {
    use nfsim::explain::{replay_inputs, NodeSpec, ReplayInput, ReplayOptions, ReplayOutput, Tap};
    let mut w =
        sim_core::pcap::PcapWriter::new(Vec::new(), sim_core::pcap::WriteLink::RawIp).unwrap();
    for (ms, p) in [
        (0, "udp [fd00::2]:40000 -> [fd00:96::10]:53"),
        (1, "udp [fd00::2]:40001 -> [fd00:96::10]:53"),
    ] {
        let p: Packet = p.parse().unwrap();
        w.write_packet(SimTime::from_millis(ms), &p).unwrap();
    }
    let cap = sim_core::pcap::read(&w.into_inner(), &Default::default()).unwrap();
    let node = NodeSpec::parse("192.168.0.12", 24, Some("10.244.0.0/16"), 1).unwrap();
    let run = |ns: Netns| {
        let mut text = Vec::new();
        let inputs = [ReplayInput {
            capture: &cap,
            file: "v6.pcap",
            interface: None,
            tap: Tap::Wire,
        }];
        let sum = replay_inputs(
            &node,
            ns,
            &inputs,
            &ReplayOptions::default(),
            ReplayOutput {
                text: Some(&mut text),
                json: None,
                pcap: None,
            },
        )
        .unwrap();
        (sum, String::from_utf8(text).unwrap())
    };
    let (sum, text) = run(node_with_names(true));
    assert_eq!(sum.ipv6, 0, "{text}");
    assert!(
        text.contains("[fd01::5]:5353"),
        "DNAT'd through ip6tables:\n{text}"
    );
    let (sum, text) = run(node_with_names(false));
    assert_eq!(sum.ipv6, 2, "{text}");
    let w = sum.warnings().join("\n");
    assert!(
        w.contains(
            "2 IPv6 packets not replayed (first: frame 1): the node was given no IPv6 rules"
        ),
        "{w}"
    );
}

/// [`node`] with or without the ip6tables rules.
fn node_with_names(rules: bool) -> Netns {
    node(true, rules)
}

/// A saved listing's IPv6 entries: a note on a node modelled for IPv6, the "only age"
/// warning with the reason on one that is not.
#[test]
fn ipv6_entries_of_a_saved_listing_are_noted_or_warned_about_by_the_node() {
    use nfsim::explain::{load_saved_state, SavedState};
    let ct = std::env::temp_dir().join(format!("nfsim-ct6-trace-{}.txt", std::process::id()));
    std::fs::write(
        &ct,
        "udp      17 25 src=fd00::2 dst=fd00:96::10 sport=40000 dport=53 src=fd01::5 dst=fd00::2 sport=5353 dport=40000 mark=0 use=1\n",
    )
    .unwrap();
    let file = ct.to_str().unwrap().to_string();
    let load = |rules: bool| {
        let mut ns = node(true, rules);
        let state = SavedState {
            conntrack: Some(&file),
            ..SavedState::default()
        };
        let l = load_saved_state(&mut ns, &state).unwrap();
        (l.notes.join("\n"), l.warnings.join("\n"))
    };
    let (notes, warnings) = load(true);
    assert!(warnings.is_empty(), "{warnings}");
    assert!(
        notes.contains("1 IPv6 entries loaded (first: line 1)"),
        "{notes}"
    );
    let (_, warnings) = load(false);
    let _ = std::fs::remove_file(&ct);
    assert!(
        warnings.contains("line 1: 1 IPv6 entries loaded: they only age")
            && warnings.contains("the node was given no IPv6 rules"),
        "{warnings}"
    );
}
