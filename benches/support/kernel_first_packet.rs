//! The real kernel's first packet through kube-proxy's rules (issue 14's "next to the
//! kernel's"), shared by `examples/kernel_first_packet.rs` (the figures) and
//! `tests/kernel_first_packet.rs` (the same run, small, so it keeps working).
//!
//! nfsim's kube-proxy model writes its first full sync for the Services of
//! `benches/support/proxy_objects.rs`, moved onto loopback addresses (ClusterIPs 127.1.0.1
//! up, endpoints 127.2.0.2 up, cluster CIDR 127.2.0.0/16); `benches/kernel/first_packet.py`
//! loads it in a private network namespace (`unshare -n`) with the real `iptables-restore` /
//! `nft -f` and times N locally generated first packets through it (see the script's docs).

#![allow(dead_code)]

use nfsim::k8s::parse_objects;
use nfsim::kubeproxy::{KubeProxy, MemConntrack, ProxierConfig, ProxyMode, SyncTiming, V133};
use sim_core::SimTime;
use std::net::Ipv4Addr;
use std::path::Path;
use std::process::Command;

#[path = "proxy_objects.rs"]
mod proxy_objects;

/// The driver, run inside the namespace with `python3 -c`.
pub const SCRIPT: &str = include_str!("../kernel/first_packet.py");

/// The programs a run needs (besides `unshare`, which `tests/support/tools.rs` checks).
pub const TOOLS: &[&str] = &[
    "unshare",
    "python3",
    "ip",
    "iptables",
    "iptables-restore",
    "nft",
    "conntrack",
];

/// What the kernel was asked to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KernelMode {
    /// kube-proxy's iptables-mode rules (`iptables-restore --noflush`, then its jump rules).
    Iptables,
    /// kube-proxy's nftables-mode transaction (`nft -f`).
    Nftables,
    /// No kube-proxy rules: conntrack on, datagrams straight to the endpoints.
    Baseline,
}

impl KernelMode {
    /// The script's name for the mode.
    pub fn name(self) -> &'static str {
        match self {
            KernelMode::Iptables => "iptables",
            KernelMode::Nftables => "nftables",
            KernelMode::Baseline => "none",
        }
    }
}

/// One run's result, as the script prints it.
#[derive(Clone, Debug)]
pub struct KernelFigure {
    /// The mode.
    pub mode: KernelMode,
    /// Services in the ruleset.
    pub services: usize,
    /// Datagrams sent, each a new flow.
    pub packets: usize,
    /// Wall-clock nanoseconds per datagram (the `sendto` loop).
    pub ns_per_packet: u64,
    /// UDP conntrack entries afterwards.
    pub entries: usize,
    /// Entries DNAT'd from a ClusterIP to an endpoint.
    pub dnatted: usize,
    /// Of those, entries masqueraded to 127.0.0.2.
    pub masqueraded: usize,
}

/// kube-proxy's first full sync for `services` Services on loopback addresses: the rules
/// text (`iptables-restore` payload or `nft -f` transaction) and, in iptables mode, the jump
/// rules it inserts, one `iptables -t T -I …` command per line.
pub fn payload(mode: ProxyMode, services: usize) -> (String, String) {
    let mut cfg = ProxierConfig::new(
        "bench",
        "127.0.0.2".parse().expect("an address"),
        "127.2.0.0/16".parse().expect("a CIDR"),
    );
    cfg.mode = mode;
    cfg.service_cidrs = vec!["127.1.0.0/16".parse().expect("a CIDR")];
    let mut kp = KubeProxy::new(
        cfg,
        SyncTiming::default(),
        Box::new(V133::default()),
        SimTime::ZERO,
    );
    let texts = proxy_objects::objects_at(
        services,
        Ipv4Addr::new(127, 1, 0, 1),
        Ipv4Addr::new(127, 2, 0, 2),
    );
    for text in texts {
        for o in parse_objects(&text).expect("generated objects parse") {
            kp.upsert(SimTime::ZERO, o);
        }
    }
    let at = kp.poll_timeout().expect("a sync is due");
    let out = kp.on_timeout(at).expect("a sync is due");
    kp.complete_sync(at, Ok(()), &mut MemConntrack::default());
    let jumps = out.jump_rules.iter().map(|j| j.command() + "\n").collect();
    (out.restore, jumps)
}

/// Runs `packets` first packets through the real kernel with `services` Services in `mode`,
/// in a private network namespace of its own; the error is the script's or the tools'.
pub fn measure(mode: KernelMode, services: usize, packets: usize) -> Result<KernelFigure, String> {
    let dir = std::env::temp_dir().join(format!(
        "nfsim-kernel-first-{}-{}-{services}",
        std::process::id(),
        mode.name()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let result = run_in(&dir, mode, services, packets);
    let _ = std::fs::remove_dir_all(&dir);
    result
}

fn run_in(
    dir: &Path,
    mode: KernelMode,
    services: usize,
    packets: usize,
) -> Result<KernelFigure, String> {
    let (rules, jumps) = match mode {
        KernelMode::Iptables => payload(ProxyMode::Iptables, services),
        KernelMode::Nftables => payload(ProxyMode::Nftables, services),
        KernelMode::Baseline => (String::new(), String::new()),
    };
    for (name, text) in [("rules", &rules), ("jumps", &jumps)] {
        std::fs::write(dir.join(name), text)
            .map_err(|e| format!("{}: {e}", dir.join(name).display()))?;
    }
    let out = Command::new("unshare")
        .args(["-n", "python3", "-c", SCRIPT])
        .arg(dir)
        .arg(mode.name())
        .arg(services.to_string())
        .arg(packets.to_string())
        .output()
        .map_err(|e| format!("unshare: {e}"))?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        return Err(format!(
            "first_packet.py {} {services} {packets}: {}{}",
            mode.name(),
            stdout,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let f: Vec<&str> = stdout.split_whitespace().collect();
    let num = |i: usize| -> Result<u64, String> {
        f.get(i)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| format!("first_packet.py printed {stdout:?}"))
    };
    Ok(KernelFigure {
        mode,
        services: num(1)? as usize,
        packets: num(2)? as usize,
        ns_per_packet: num(3)?,
        entries: num(4)? as usize,
        dnatted: num(5)? as usize,
        masqueraded: num(6)? as usize,
    })
}
