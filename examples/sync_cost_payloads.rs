//! The payloads `docs/calibration/calibrate.sh` times on the real kernel: kube-proxy's
//! writes for N Services (`benches/support/proxy_objects.rs`: UDP port 80, two endpoints
//! each), rendered by nfsim's own kube-proxy model.
//!
//! `cargo run --example sync_cost_payloads -- DIR N...` writes, per N, into DIR:
//!
//! - `ipt-full-N`: the first full sync's `iptables-restore --noflush` payload, and
//!   `ipt-jumps-N`: its jump rules, one `iptables -t T -I …` command per line;
//! - `ipt-partial-N`: the partial sync after one Service's EndpointSlice changed (one
//!   endpoint replaced), as `iptables-restore --noflush` takes it after the full one;
//! - `nft-full-N` and `nft-incr-N`: the same two syncs in nftables mode (`nft -f`).
//!
//! and prints one line per file: name, lines, chains (`:` lines or `add chain`), rules
//! (`-A` lines or `add rule`), set/map elements (`add element` items).
use nfsim::k8s::parse_objects;
use nfsim::kubeproxy::sync_cost::PayloadShape;
use nfsim::kubeproxy::{KubeProxy, MemConntrack, ProxierConfig, ProxyMode, SyncTiming, V133};
use sim_core::SimTime;
use std::path::Path;

#[path = "../benches/support/proxy_objects.rs"]
mod proxy_objects;

fn fail(msg: &str) -> ! {
    eprintln!("sync_cost_payloads: {msg}");
    std::process::exit(2)
}

/// The full sync, then the partial one after Service 0's slice lost an endpoint for a new one.
fn syncs(mode: ProxyMode, services: usize) -> (String, String, String) {
    let mut cfg = ProxierConfig::new(
        "calib",
        "172.18.0.2".parse().expect("an address"),
        "10.244.0.0/16".parse().expect("a CIDR"),
    );
    cfg.mode = mode;
    let mut kp = KubeProxy::new(
        cfg,
        SyncTiming::default(),
        Box::new(V133::default()),
        SimTime::ZERO,
    );
    for text in proxy_objects::objects(services) {
        for o in parse_objects(&text).expect("generated objects parse") {
            kp.upsert(SimTime::ZERO, o);
        }
    }
    let t0 = kp.poll_timeout().expect("a sync is due");
    let full = kp.on_timeout(t0).expect("a sync is due");
    kp.complete_sync(t0, Ok(()), &mut MemConntrack::default());
    let jumps = full.jump_rules.iter().map(|j| j.command() + "\n").collect();
    let t1 = SimTime::from_secs(10);
    let changed = "kind: EndpointSlice\n\
        metadata: {name: svc0-1, namespace: ns0, labels: {kubernetes.io/service-name: svc0}}\n\
        addressType: IPv4\n\
        endpoints: [{addresses: [10.244.0.2]}, {addresses: [10.245.0.9]}]\n\
        ports: [{name: http, port: 8080, protocol: UDP}]\n";
    for o in parse_objects(changed).expect("the changed slice parses") {
        kp.upsert(t1, o);
    }
    let at = kp.poll_timeout().expect("a sync is due");
    let partial = kp.on_timeout(at).expect("a sync is due");
    (full.restore, jumps, partial.restore)
}

fn write(dir: &Path, name: &str, text: &str, nft: bool) {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap_or_else(|e| fail(&format!("{}: {e}", path.display())));
    let s = if nft {
        PayloadShape::of_nft(text)
    } else {
        PayloadShape::of_iptables(text)
    };
    println!("{name} {} {} {} {}", s.lines, s.chains, s.rules, s.elements);
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some((dir, ns)) = args.split_first() else {
        fail("usage: sync_cost_payloads DIR N...");
    };
    let dir = Path::new(dir);
    std::fs::create_dir_all(dir).unwrap_or_else(|e| fail(&format!("{}: {e}", dir.display())));
    for n in ns {
        let n: usize = n
            .parse()
            .unwrap_or_else(|_| fail(&format!("N: a number, got {n:?}")));
        let (full, jumps, partial) = syncs(ProxyMode::Iptables, n);
        write(dir, &format!("ipt-full-{n}"), &full, false);
        write(dir, &format!("ipt-jumps-{n}"), &jumps, false);
        write(dir, &format!("ipt-partial-{n}"), &partial, false);
        let (full, _, incr) = syncs(ProxyMode::Nftables, n);
        write(dir, &format!("nft-full-{n}"), &full, true);
        write(dir, &format!("nft-incr-{n}"), &incr, true);
    }
}
