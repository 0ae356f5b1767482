//! The real kernel's first packet of a new flow through kube-proxy's rules, in iptables mode
//! and in nftables mode, for the figures in docs/performance.md next to `benches/proxy_modes.rs`:
//!
//! `cargo run --release --example kernel_first_packet -- [SERVICES] [PACKETS] [ROUNDS] [MODES]`
//!
//! (defaults 10,000 Services, 20,000 packets, 1 round, MODES `none,iptables,nftables`). Needs root, `unshare`, `python3`,
//! `ip`, `iptables`, `iptables-restore`, `nft` and `conntrack`; says why and exits 0 where
//! one is missing. Each run is a private network namespace of its own on loopback addresses
//! only (`benches/kernel/first_packet.py` says what it sends); a round runs the baseline (no
//! kube-proxy rules), iptables mode and nftables mode one after the other, and prints the
//! wall-clock time per first packet and that time less the baseline's (the syscall, the
//! driver's loop and the loopback delivery; measured first in the round, or 0 when MODES
//! leaves it out). Loading 10,000 Services with the real `iptables-restore` (iptables-nft)
//! takes tens of minutes on a loaded machine; `nft -f` takes seconds.
use std::process::Command;

#[path = "../benches/support/kernel_first_packet.rs"]
mod kernel_first_packet;
use kernel_first_packet::{measure, KernelMode, TOOLS};

fn fail(msg: &str) -> ! {
    eprintln!("kernel_first_packet: {msg}");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let arg = |i: usize, default: usize| -> usize {
        args.get(i).map_or(default, |v| {
            v.parse()
                .unwrap_or_else(|_| fail(&format!("argument {}: a number, got {v:?}", i + 1)))
        })
    };
    let (services, packets, rounds) = (arg(0, 10_000), arg(1, 20_000), arg(2, 1));
    if services == 0 || services > 10_000 || packets == 0 {
        fail("SERVICES must be 1..=10000 and PACKETS at least 1");
    }
    let modes: Vec<KernelMode> = args
        .get(3)
        .map_or("none,iptables,nftables", String::as_str)
        .split(',')
        .map(|m| match m {
            "none" => KernelMode::Baseline,
            "iptables" => KernelMode::Iptables,
            "nftables" => KernelMode::Nftables,
            _ => fail(&format!("MODES: none, iptables or nftables, got {m:?}")),
        })
        .collect();
    for tool in TOOLS {
        let found = Command::new("sh")
            .args(["-c", &format!("command -v {tool}")])
            .output()
            .is_ok_and(|o| o.status.success());
        if !found {
            eprintln!("kernel_first_packet: skipped: {tool} missing");
            return;
        }
    }
    if !Command::new("unshare")
        .args(["-n", "true"])
        .status()
        .is_ok_and(|s| s.success())
    {
        eprintln!("kernel_first_packet: skipped: `unshare -n` refused (not root?)");
        return;
    }
    println!("mode      services  packets  ns/packet  less baseline  entries  DNAT'd  masqueraded");
    for _ in 0..rounds {
        let mut base = 0;
        for &mode in &modes {
            let f = measure(mode, services, packets).unwrap_or_else(|e| fail(&e));
            if mode == KernelMode::Baseline {
                base = f.ns_per_packet;
            }
            println!(
                "{:<9} {:>8} {:>8} {:>10} {:>14} {:>8} {:>7} {:>12}",
                mode.name(),
                f.services,
                f.packets,
                f.ns_per_packet,
                f.ns_per_packet as i64 - base as i64,
                f.entries,
                f.dnatted,
                f.masqueraded
            );
        }
    }
}
