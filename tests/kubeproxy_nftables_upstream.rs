//! nfsim's nftables proxier against upstream's own expectations: the Service and
//! EndpointSlice objects of `TestOverallNFTablesRules` and `TestBadIPs`
//! (kubernetes/kubernetes `pkg/proxy/nftables/proxier_test.go` at
//! 81810de635aa13aa0a32992f6def3aa9d6025ebc, transcribed in
//! `tests/fixtures/kubeproxy-upstream/`), rendered by nfsim's proxier configured as the test's
//! fake proxier, must leave the table upstream expects, compared as upstream compares
//! (`assertNFTablesTransactionEqual`: both sides sorted by `sortNFTablesTransaction`). The same
//! transaction must also load into nfsim and into the real `nft`, which list it byte for byte
//! alike.

use nfsim::k8s::parse_objects;
use nfsim::kubeproxy::{KubeProxy, MemConntrack, ProxierConfig, ProxyMode, SyncTiming, V133};
use sim_core::SimTime;
use sim_netfilter::nft::{Family, NftRuleset};

#[path = "support/knftables_fake.rs"]
mod knftables_fake;
#[path = "support/tools.rs"]
mod tools;

use knftables_fake::{sort_transaction, FakeTable};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/tests/fixtures/kubeproxy-upstream/{name}")).unwrap()
}

/// `NewFakeProxier(v1.IPv4Protocol)`: node `test-node` at 192.168.0.2, pod CIDR 10.0.0.0/8,
/// service CIDR 172.30.0.0/16, `nodePortAddresses` 192.168.0.2/32 (the node's address).
fn fake_proxier(objects: &str) -> KubeProxy {
    let mut cfg = ProxierConfig::new(
        "test-node",
        "192.168.0.2".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
    );
    cfg.mode = ProxyMode::Nftables;
    cfg.service_cidrs = vec!["172.30.0.0/16".parse().unwrap()];
    cfg.node_port_addresses = Some(vec!["192.168.0.2".parse().unwrap()]);
    let mut kp = KubeProxy::new(
        cfg,
        SyncTiming::default(),
        Box::new(V133::default()),
        SimTime::ZERO,
    );
    for o in parse_objects(objects).unwrap_or_else(|e| panic!("{e}")) {
        kp.upsert(SimTime::ZERO, o);
    }
    kp
}

/// The first (full) sync's transactions.
fn first_sync(kp: &mut KubeProxy) -> Vec<String> {
    let t = kp.poll_timeout().unwrap();
    let out = kp.on_timeout(t).expect("a sync is due");
    kp.complete_sync(t, Ok(()), &mut MemConntrack::default());
    let mut v: Vec<String> = out.nft_cleanup.into_iter().collect();
    v.push(out.restore);
    v
}

/// `fp.syncProxyRules()` then `assertNFTablesTransactionEqual(t, getLine(), expected,
/// nft.Dump())`. The fake proxier's mark is the literal `0x4000` where `NewProxier` formats
/// `%#08x` (`0x00004000`, what nfsim writes): the one substitution made before comparing.
fn assert_upstream_equal(objects: &str, expected: &str) -> Vec<String> {
    let mut kp = fake_proxier(&fixture(objects));
    let txs = first_sync(&mut kp);
    let mut fake = FakeTable::default();
    for t in &txs {
        fake.run(t);
    }
    let ours = sort_transaction(&fake.dump().replace("0x00004000", "0x4000"));
    let want = sort_transaction(&format!("{}\n{}", fixture("base.nft"), fixture(expected)));
    if ours != want {
        let (o, w): (Vec<&str>, Vec<&str>) = (ours.lines().collect(), want.lines().collect());
        let missing: Vec<&&str> = w.iter().filter(|l| !o.contains(l)).collect();
        let extra: Vec<&&str> = o.iter().filter(|l| !w.contains(l)).collect();
        panic!(
            "{expected}: tables do not match\nmissing (upstream has, nfsim not):\n{}\nextra (nfsim has, upstream not):\n{}\n\nfull result:\n{ours}",
            missing.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"),
            extra.iter().map(|l| format!("  {l}")).collect::<Vec<_>>().join("\n"),
        );
    }
    txs
}

#[test]
fn overall_rules_are_upstreams() {
    assert_upstream_equal("overall.yaml", "overall.nft");
}

#[test]
fn leading_zero_addresses_are_read_as_kube_proxy_reads_them() {
    assert_upstream_equal("bad-ips.yaml", "bad-ips.nft");
}

/// The overall transaction through nfsim's nft and the real one: `nft list table ip
/// kube-proxy` byte for byte.
#[test]
fn overall_rules_list_as_the_real_nft_lists_them() {
    let txs = assert_upstream_equal("overall.yaml", "overall.nft");
    let mut rs = NftRuleset::new();
    for t in &txs {
        rs.apply("sync-1", t, SimTime::ZERO)
            .unwrap_or_else(|e| panic!("{e}\n{t}"));
    }
    let ours = rs
        .list_table(Family::Ip, "kube-proxy", SimTime::ZERO)
        .unwrap();
    if !tools::have_or_skip("overall_rules_list_as_the_real_nft_lists_them", &["nft"]) {
        return;
    }
    let real = tools::real_nft_listing(&txs)
        .unwrap_or_else(|e| panic!("real nft refused the transaction: {e}"));
    if real != ours {
        for (i, (a, b)) in real.lines().zip(ours.lines()).enumerate() {
            assert_eq!(a, b, "line {} differs\nreal:\n{real}\nours:\n{ours}", i + 1);
        }
        panic!("lengths differ\nreal:\n{real}\nours:\n{ours}");
    }
}
