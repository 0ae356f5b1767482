//! kube-proxy's first full sync for the Services of `benches/proxy_modes.rs`, as files the
//! real tools load, for measuring the real kernel with the same rules
//! (`benches/kernel/first_packet.py`):
//!
//! `cargo run --release --example proxy_payload -- iptables|nftables SERVICES DIR`
//!
//! - `iptables`: `DIR/iptables.rules` (the `iptables-restore --noflush` payload) and
//!   `DIR/iptables.jumps` (the jump rules kube-proxy inserts with `iptables -I`, one command
//!   per line);
//! - `nftables`: `DIR/nftables.rules` (the `nft -f` transaction).
use nfsim::k8s::parse_objects;
use nfsim::kubeproxy::{KubeProxy, MemConntrack, ProxierConfig, ProxyMode, SyncTiming, V133};
use sim_core::SimTime;
use std::path::Path;

#[path = "../benches/support/proxy_objects.rs"]
mod proxy_objects;

fn fail(msg: &str) -> ! {
    eprintln!("proxy_payload: {msg}");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [mode, services, dir] = args.as_slice() else {
        fail("usage: proxy_payload iptables|nftables SERVICES DIR")
    };
    let mode = match mode.as_str() {
        "iptables" => ProxyMode::Iptables,
        "nftables" => ProxyMode::Nftables,
        m => fail(&format!("mode must be iptables or nftables, got {m:?}")),
    };
    let services: usize = services
        .parse()
        .unwrap_or_else(|_| fail(&format!("SERVICES must be a number, got {services:?}")));
    let mut cfg = ProxierConfig::new(
        "bench",
        "172.18.0.2".parse().expect("an address"),
        "10.244.0.0/16".parse().expect("a CIDR"),
    );
    cfg.mode = mode;
    cfg.service_cidrs = vec!["10.96.0.0/16".parse().expect("a CIDR")];
    let mut kp = KubeProxy::new(
        cfg,
        SyncTiming::default(),
        Box::new(V133::default()),
        SimTime::ZERO,
    );
    for text in proxy_objects::objects(services) {
        let objects =
            parse_objects(&text).unwrap_or_else(|e| fail(&format!("generated objects: {e}")));
        for o in objects {
            kp.upsert(SimTime::ZERO, o);
        }
    }
    let at = kp.poll_timeout().unwrap_or_else(|| fail("no sync due"));
    let out = kp.on_timeout(at).unwrap_or_else(|| fail("no sync due"));
    kp.complete_sync(at, Ok(()), &mut MemConntrack::default());
    let dir = Path::new(dir);
    let write = |name: &str, text: &str| {
        std::fs::write(dir.join(name), text)
            .unwrap_or_else(|e| fail(&format!("{}: {e}", dir.join(name).display())))
    };
    match mode {
        ProxyMode::Iptables => {
            write("iptables.rules", &out.restore);
            let jumps: String = out.jump_rules.iter().map(|j| j.command() + "\n").collect();
            write("iptables.jumps", &jumps);
        }
        ProxyMode::Nftables => write("nftables.rules", &out.restore),
    }
}
