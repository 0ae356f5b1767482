//! The IPVS proxier's output loaded: one sync of Services of every shape
//! (`tests/fixtures/kubeproxy-ipvs/mixed.yaml`) applied to an nfsim namespace (ipsets, jump
//! rules, `iptables-restore --noflush`) and to the real kernel in `unshare -n` (`ipset
//! restore`, `iptables -I`, `iptables-restore --noflush`): both take it, and list the same
//! rules and set members. Then what a second sync writes after an endpoint goes, and what
//! graceful termination does with the real server left behind.

use nfsim::k8s::parse_objects;
use nfsim::kubeproxy::ipvs::graceful::{apply_virtual_servers, MemIpvs};
use nfsim::kubeproxy::ipvs::IpvsSettings;
use nfsim::kubeproxy::ipvs::{GracefulTermination, RealServerKey, VsKey};
use nfsim::kubeproxy::{KubeProxy, MemConntrack, ProxierConfig, ProxyMode, SyncOutput, V133};
use sim_core::{SimDuration, SimTime};

#[path = "support/tools.rs"]
mod tools;

const MIXED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/kubeproxy-ipvs/mixed.yaml"
);

fn proxier(objects: &str) -> KubeProxy {
    let mut cfg = ProxierConfig::new(
        "node-a",
        "172.18.0.2".parse().unwrap(),
        "10.244.0.0/16".parse().unwrap(),
    );
    cfg.mode = ProxyMode::Ipvs;
    let mut kp = KubeProxy::new(
        cfg,
        IpvsSettings::timing(),
        Box::new(V133::default()),
        SimTime::ZERO,
    );
    for o in parse_objects(objects).unwrap() {
        kp.upsert(SimTime::ZERO, o);
    }
    kp
}

fn sync(kp: &mut KubeProxy) -> SyncOutput {
    let t = kp.poll_timeout().unwrap();
    let out = kp.on_timeout(t).expect("a sync is due");
    kp.complete_sync(t, Ok(()), &mut MemConntrack::default());
    out
}

/// The `-A` lines of one table in iptables-save text.
fn table_rules(save: &str, table: &str) -> Vec<String> {
    let mut inside = false;
    let mut out = Vec::new();
    for l in save.lines() {
        if let Some(t) = l.strip_prefix('*') {
            inside = t == table;
        } else if inside && l.starts_with("-A ") {
            out.push(l.to_string());
        }
    }
    out
}

/// `ipset save` lines, sorted (members list in hash order, which depends on the set's
/// random `initval`), `initval` left out of the headers.
fn sets_sorted(save: &str) -> Vec<String> {
    let mut v: Vec<String> = save
        .lines()
        .map(|l| match l.find(" initval ") {
            Some(i) => l[..i].to_string(),
            None => l.to_string(),
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_sync_loads_into_nfsim_and_into_the_kernel_alike() {
    let mut kp = proxier(&std::fs::read_to_string(MIXED).unwrap());
    let out = sync(&mut kp);
    let ipvs = out.ipvs.as_ref().unwrap();
    let mut ns =
        sim_netfilter::netns::Netns::new(sim_netfilter::netns::NetnsConfig::new("node-a", 1));
    nfsim::cluster::proxy::apply_sync(&mut ns, &out, None).unwrap();
    let ours = ns.save(false);
    let our_sets = ns.ipset_save();
    // What the sync wrote, in nfsim's words.
    assert!(ours.contains("-A KUBE-SERVICES ! -s 10.244.0.0/16 -m comment --comment \"Kubernetes service cluster ip + port for masquerade purpose\" -m set --match-set KUBE-CLUSTER-IP dst,dst -j KUBE-MARK-MASQ"), "{ours}");
    assert!(
        our_sets.contains("add KUBE-LOOP-BACK 10.244.0.7,udp:53,10.244.0.7"),
        "{our_sets}"
    );
    assert!(
        our_sets.contains("add KUBE-NODE-PORT-LOCAL-TCP 30080"),
        "{our_sets}"
    );
    assert!(
        our_sets.contains("add KUBE-LOAD-BALANCER-SOURCE-IP 198.51.100.5,tcp:443,198.51.100.5"),
        "{our_sets}"
    );

    let tools_needed = [
        "bash",
        "ipset",
        "iptables",
        "iptables-restore",
        "iptables-save",
    ];
    if !tools::have_or_skip(
        "a_sync_loads_into_nfsim_and_into_the_kernel_alike",
        &tools_needed,
    ) {
        return;
    }
    let jumps: String = out
        .jump_rules
        .iter()
        .map(|j| {
            // EnsureChain, then EnsureRule(Prepend, …).
            format!(
                "iptables -t {t} -N {c} 2>/dev/null || true\n{cmd}\n",
                t = j.table.name(),
                c = j.target,
                cmd = j.command()
            )
        })
        .collect();
    let script = format!(
        "set -e\nipset restore <<'NFSIM_SETS'\n{}NFSIM_SETS\n{jumps}iptables-restore --noflush\niptables-save\necho ====\nipset save\n",
        ipvs.ipset_restore
    );
    let (ok, real) = tools::in_private_netns(&script, &out.restore);
    assert!(
        ok,
        "the kernel refused:\n{real}\n--- payload:\n{}",
        out.restore
    );
    let (real_rules, real_sets) = real.split_once("====\n").unwrap();
    for table in ["nat", "filter"] {
        assert_eq!(
            table_rules(real_rules, table),
            table_rules(&ours, table),
            "{table}"
        );
    }
    assert_eq!(sets_sorted(real_sets), sets_sorted(&our_sets));
}

#[test]
fn a_removed_endpoint_leaves_the_sets_and_drains_as_its_protocol_says() {
    let text = std::fs::read_to_string(MIXED).unwrap();
    let mut kp = proxier(&text);
    let first = sync(&mut kp);
    let mut table = MemIpvs::default();
    let mut gt = GracefulTermination::new(SimTime::ZERO);
    let family = nfsim::k8s::IpFamily::IPv4;
    let r = &first.ipvs.as_ref().unwrap().rendered;
    apply_virtual_servers(&r.virtual_servers, family, true, &mut gt, &mut table);
    let dns = VsKey {
        address: "10.96.0.10".parse().unwrap(),
        port: 53,
        protocol: nfsim::k8s::Protocol::UDP,
    };
    let web = VsKey {
        address: "10.96.0.30".parse().unwrap(),
        port: 80,
        protocol: nfsim::k8s::Protocol::TCP,
    };
    assert_eq!(table.real_servers_of(&dns).len(), 2);
    // Connections on both remote endpoints.
    table.set_conns(&dns, "10.244.1.7".parse().unwrap(), 53, 0, 3);
    table.set_conns(&web, "10.244.1.9".parse().unwrap(), 8080, 2, 0);

    // Both remote endpoints go.
    let edited = text
        .replace(", {addresses: [10.244.1.7], nodeName: node-b}", "")
        .replace(", {addresses: [10.244.1.9], nodeName: node-b}", "");
    for o in parse_objects(&edited).unwrap() {
        kp.upsert(SimTime::from_secs(5), o);
    }
    let second = sync(&mut kp);
    let ipvs = second.ipvs.as_ref().unwrap();
    assert!(
        !ipvs.ipset_restore.contains("del KUBE-LOOP-BACK"),
        "local endpoints stay: {}",
        ipvs.ipset_restore
    );
    assert!(!ipvs.initial_sync && first.ipvs.as_ref().unwrap().initial_sync);
    let rep = apply_virtual_servers(
        &ipvs.rendered.virtual_servers,
        family,
        false,
        &mut gt,
        &mut table,
    );
    let udp = RealServerKey {
        vs: dns,
        address: "10.244.1.7".parse().unwrap(),
        port: 53,
    };
    let tcp = RealServerKey {
        vs: web,
        address: "10.244.1.9".parse().unwrap(),
        port: 8080,
    };
    // UDP: deleted at once whatever its connections; TCP with connections: weight 0.
    assert!(rep.deleted_rs.contains(&udp), "{rep:?}");
    assert!(rep.quiesced_rs.contains(&tcp), "{rep:?}");
    assert_eq!(table.real_servers_of(&dns).len(), 1);
    let w = table.real_servers_of(&web);
    assert_eq!(
        w.iter()
            .find(|r| r.port == 8080 && r.address == tcp.address)
            .unwrap()
            .weight,
        0
    );
    // The one-minute check: kept while connections last, deleted once they are gone.
    assert!(gt.on_timeout(SimTime::ZERO, &mut table).is_empty());
    assert_eq!(
        gt.poll_timeout(),
        SimTime::ZERO + SimDuration::from_secs(60)
    );
    assert!(gt.on_timeout(SimTime::from_secs(60), &mut table).is_empty());
    table.set_conns(&web, tcp.address, 8080, 0, 0);
    assert!(
        gt.on_timeout(SimTime::from_secs(90), &mut table).is_empty(),
        "not due yet"
    );
    assert_eq!(
        gt.on_timeout(SimTime::from_secs(120), &mut table),
        vec![tcp]
    );
    assert!(gt.pending().next().is_none());
}

#[test]
fn an_endpoint_back_before_it_drained_is_added_again_with_weight_one() {
    let text = std::fs::read_to_string(MIXED).unwrap();
    let mut kp = proxier(&text);
    let first = sync(&mut kp);
    let mut table = MemIpvs::default();
    let mut gt = GracefulTermination::new(SimTime::ZERO);
    let family = nfsim::k8s::IpFamily::IPv4;
    let vss = first
        .ipvs
        .as_ref()
        .unwrap()
        .rendered
        .virtual_servers
        .clone();
    apply_virtual_servers(&vss, family, true, &mut gt, &mut table);
    let web = VsKey {
        address: "10.96.0.30".parse().unwrap(),
        port: 80,
        protocol: nfsim::k8s::Protocol::TCP,
    };
    let addr = "10.244.1.9".parse().unwrap();
    table.set_conns(&web, addr, 8080, 1, 0);
    let without: Vec<_> = vss
        .iter()
        .cloned()
        .map(|mut v| {
            v.real_servers.retain(|r| r.address != addr);
            v
        })
        .collect();
    apply_virtual_servers(&without, family, false, &mut gt, &mut table);
    assert_eq!(gt.pending().count(), 1);
    let rep = apply_virtual_servers(&vss, family, false, &mut gt, &mut table);
    assert_eq!(rep.added_rs, 1);
    assert_eq!(gt.pending().count(), 0);
    let rs = table.real_servers_of(&web);
    assert_eq!(rs.iter().find(|r| r.address == addr).unwrap().weight, 1);
}
