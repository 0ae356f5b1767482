//! nfsim's nftables model against the real `nft` (1.0.x) in a private network namespace:
//! the same `nft -f` text through both, and `nft list ruleset` / `nft list table` compared
//! byte for byte. Skips (passing) where `nft` or `unshare -n` is not available.

#[path = "support/tools.rs"]
mod tools;

use sim_core::SimTime;
use sim_netfilter::nft::{Family, NftRuleset};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(format!("{ROOT}/tests/fixtures/nft/{name}")).unwrap()
}

/// `nft -f` each text in turn in one fresh namespace, then `nft <list>`.
fn real_nft(texts: &[&str], list: &str) -> Result<String, String> {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("nfsim-nft-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut script = String::from("set -e\n");
    for (i, t) in texts.iter().enumerate() {
        let f = dir.join(format!("{i}.nft"));
        std::fs::write(&f, t).unwrap();
        script.push_str(&format!("nft -f {}\n", f.display()));
    }
    script.push_str(&format!("nft {list}\n"));
    let out = Command::new(tools::find("unshare").unwrap())
        .args(["-n", "sh", "-c", &script])
        .output()
        .unwrap();
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    Ok(String::from_utf8(out.stdout).unwrap())
}

fn sim(texts: &[&str]) -> NftRuleset {
    let mut rs = NftRuleset::new();
    for (i, t) in texts.iter().enumerate() {
        rs.apply(&format!("{i}.nft"), t, SimTime::ZERO)
            .unwrap_or_else(|e| panic!("{e}"));
    }
    rs
}

fn diff(real: &str, ours: &str) {
    if real != ours {
        let rl: Vec<&str> = real.lines().collect();
        let ol: Vec<&str> = ours.lines().collect();
        for (i, (a, b)) in rl.iter().zip(&ol).enumerate() {
            if a != b {
                panic!(
                    "line {}:\n real: {a:?}\n ours: {b:?}\n\nreal:\n{real}\nours:\n{ours}",
                    i + 1
                );
            }
        }
        panic!(
            "lengths differ ({} vs {} lines)\nreal:\n{real}\nours:\n{ours}",
            rl.len(),
            ol.len()
        );
    }
}

#[test]
fn kube_proxy_base_ruleset_lists_as_nft_does() {
    if !tools::have_or_skip("kube_proxy_base_ruleset_lists_as_nft_does", &["nft"]) {
        return;
    }
    let text = fixture("kube-proxy-base.nft");
    let real = real_nft(&[&text], "list ruleset").unwrap();
    diff(&real, &sim(&[&text]).list_ruleset(SimTime::ZERO));
    let real = real_nft(&[&text], "list table ip kube-proxy").unwrap();
    let ours = sim(&[&text])
        .list_table(Family::Ip, "kube-proxy", SimTime::ZERO)
        .unwrap();
    diff(&real, &ours);
}

#[test]
fn normalized_expressions_list_as_nft_does() {
    if !tools::have_or_skip("normalized_expressions_list_as_nft_does", &["nft"]) {
        return;
    }
    let text = fixture("formats.nft");
    let real = real_nft(&[&text], "list ruleset").unwrap();
    diff(&real, &sim(&[&text]).list_ruleset(SimTime::ZERO));
}
