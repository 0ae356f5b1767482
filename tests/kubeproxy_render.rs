//! The kube-proxy renderer against kubernetes' own expectations and against the real
//! iptables-restore of this machine.

use nfsim::k8s::{parse_objects, EndpointSlice, K8sObject, Service};
use nfsim::kubeproxy::{
    jump_rules, render_sync, LocalDetector, ProxierConfig, ProxyState, SyncScope,
};
use std::collections::BTreeSet;
use std::io::Write;
use std::process::{Command, Stdio};

#[path = "support/tools.rs"]
mod tools;

fn load(path: &str) -> (Vec<Service>, Vec<EndpointSlice>) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut svcs = Vec::new();
    let mut slices = Vec::new();
    for o in parse_objects(&text).unwrap() {
        match o {
            K8sObject::Service(s) => svcs.push(s),
            K8sObject::EndpointSlice(e) => slices.push(e),
        }
    }
    (svcs, slices)
}

/// Chain names, and (chain, rule) lines, of one table.
type Table = (Vec<String>, Vec<(String, String)>);

/// Groups each table's chain declarations and rules by chain: KUBE-NODEPORTS, KUBE-SERVICES,
/// then the rest by name; rules keep their order within a chain. This is the comparison
/// proxier_test.go's assertIPTablesRulesEqual makes (service order is a Go map's there).
fn normalize(restore: &str) -> String {
    let mut out = String::new();
    let mut table: Option<Table> = None;
    let key = |c: &str| match c {
        "KUBE-NODEPORTS" => (0, c.to_string()),
        "KUBE-SERVICES" => (1, c.to_string()),
        _ => (2, c.to_string()),
    };
    for line in restore.lines() {
        if line.starts_with('*') {
            out.push_str(line);
            out.push('\n');
            table = Some((Vec::new(), Vec::new()));
        } else if line == "COMMIT" {
            let (mut chains, rules) = table.take().unwrap();
            chains.sort_by_key(|c| key(c));
            for c in &chains {
                out.push_str(&format!(":{c} - [0:0]\n"));
            }
            for c in &chains {
                for (rc, r) in &rules {
                    if rc == c {
                        out.push_str(r);
                        out.push('\n');
                    }
                }
            }
            out.push_str("COMMIT\n");
        } else if let Some(decl) = line.strip_prefix(':') {
            table
                .as_mut()
                .unwrap()
                .0
                .push(decl.split(' ').next().unwrap().to_string());
        } else {
            let chain = line.split(' ').nth(1).unwrap().to_string();
            table.as_mut().unwrap().1.push((chain, line.to_string()));
        }
    }
    out
}

#[test]
fn reproduces_kubernetes_overall_iptables_rules() {
    let (svcs, slices) = load("tests/golden/kubeproxy/overall_services.yaml");
    let state = ProxyState::build("test-node", &svcs, &slices);
    // NewFakeProxier: node 192.168.0.2, ClusterCIDR 10.0.0.0/8, localhost NodePorts, nfacct
    // counters present, a fake iptables without --random-fully.
    let mut cfg = ProxierConfig::new(
        "test-node",
        "192.168.0.2".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
    );
    cfg.nfacct = true;
    cfg.random_fully = false;
    let r = render_sync(
        &cfg,
        &state,
        &SyncScope {
            full: true,
            changed: None,
            existing_nat_chains: None,
        },
    );
    // The fake proxier hard-codes the mark as "0x4000"; the real one formats "%#08x".
    let got = normalize(&r.restore).replace("0x00004000", "0x4000");
    let want = std::fs::read_to_string("tests/golden/kubeproxy/overall_expected.rules").unwrap();
    if got != want {
        for (i, (g, w)) in got.lines().zip(want.lines()).enumerate() {
            if g != w {
                panic!(
                    "line {}:\n got: {g}\nwant: {w}\n\nfull output:\n{got}",
                    i + 1
                );
            }
        }
        panic!("length differs:\n{got}");
    }
    // Not normalised: the per-service order is nfsim's (sorted), filter before nat.
    assert!(r.restore.starts_with("*filter\n:KUBE-SERVICES - [0:0]\n:KUBE-EXTERNAL-SERVICES - [0:0]\n:KUBE-FORWARD - [0:0]\n:KUBE-NODEPORTS - [0:0]\n:KUBE-PROXY-FIREWALL - [0:0]\n:KUBE-FIREWALL - [0:0]\n"));
}

#[test]
fn no_pod_cidr_and_masquerade_all() {
    let (svcs, slices) = load("tests/golden/kubeproxy/overall_services.yaml");
    let state = ProxyState::build("test-node", &svcs, &slices);
    let mut cfg = ProxierConfig::new(
        "test-node",
        "192.168.0.2".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
    );
    cfg.local_detector = LocalDetector::None;
    let full = SyncScope {
        full: true,
        changed: None,
        existing_nat_chains: None,
    };
    let r = render_sync(&cfg, &state, &full);
    assert!(
        !r.restore.contains("! -s 10."),
        "no detector, no masquerade of off-cluster sources"
    );
    assert!(
        !r.restore.contains("pod traffic for"),
        "no detector, no pod short-circuit"
    );
    cfg.masquerade_all = true;
    let r = render_sync(&cfg, &state, &full);
    assert!(r.restore.contains("-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 cluster IP\" -m tcp -p tcp -d 172.30.0.41 --dport 80 -j KUBE-MARK-MASQ\n"));
}

/// Runs `script` as root in a private network namespace; `None` (after printing
/// `skipped: …`) where a tool it calls, `tools` and `bash`, is missing or no namespace can be
/// made here.
fn in_netns(test: &str, tools: &[&str], script: &str, stdin: &str) -> Option<(bool, String)> {
    let mut needed = vec!["bash"];
    needed.extend_from_slice(tools);
    // kube-proxy's `-m nfacct` rules load only where the nfacct tool made the counters.
    if script.contains("nfacct") || stdin.contains("-m nfacct") {
        needed.push("nfacct");
    }
    if !tools::have_or_skip(test, &needed) {
        return None;
    }
    let mut child = Command::new("unshare")
        .args(["-n", "bash", "-c", script])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("unshare was found and `unshare -n true` ran");
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), text))
}

/// The commands that install the jump rules as kube-proxy's EnsureChain/EnsureRule do.
fn jump_script() -> String {
    let mut s = String::new();
    for j in jump_rules() {
        s.push_str(&format!(
            "iptables -t {t} -N {c} 2>/dev/null || true; iptables -t {t} -C {ch} {r} 2>/dev/null || {cmd} || exit 1\n",
            t = j.table.name(),
            c = j.target,
            ch = j.chain,
            r = j.rule_text(),
            cmd = j.command()
        ));
    }
    s
}

#[test]
fn real_iptables_restore_accepts_full_and_partial_syncs() {
    let (mut svcs, mut slices) = load("tests/golden/kubeproxy/overall_services.yaml");
    let extra = parse_objects(
        r#"
kind: Service
metadata: {name: kube-dns, namespace: kube-system}
spec:
  clusterIP: 10.96.0.10
  sessionAffinity: ClientIP
  ports: [{name: dns, port: 53, protocol: UDP}]
---
kind: EndpointSlice
metadata: {name: kube-dns-1, namespace: kube-system, labels: {kubernetes.io/service-name: kube-dns}}
addressType: IPv4
endpoints:
- addresses: [10.244.1.7]
- addresses: [10.244.2.8]
- addresses: [10.244.1.10]
ports: [{name: dns, port: 53, protocol: UDP}]
"#,
    )
    .unwrap();
    for o in extra {
        match o {
            K8sObject::Service(s) => svcs.push(s),
            K8sObject::EndpointSlice(e) => slices.push(e),
        }
    }
    let cfg = ProxierConfig::new(
        "test-node",
        "192.168.0.2".parse().unwrap(),
        "10.244.0.0/16".parse().unwrap(),
    );
    let first_state = ProxyState::build("test-node", &svcs, &slices);
    let first = render_sync(
        &cfg,
        &first_state,
        &SyncScope {
            full: true,
            changed: None,
            existing_nat_chains: None,
        },
    );

    // A CoreDNS pod disappears: the partial sync rewrites kube-dns only and -X's its SEP chain.
    let dns_slice = slices.last_mut().unwrap();
    dns_slice.endpoints.remove(0);
    let second_state = ProxyState::build("test-node", &svcs, &slices);
    let changed = first_state.changed_services(&second_state);
    assert_eq!(
        changed,
        BTreeSet::from([("kube-system".to_string(), "kube-dns".to_string())])
    );
    let second = render_sync(
        &cfg,
        &second_state,
        &SyncScope {
            full: false,
            changed: Some(&changed),
            existing_nat_chains: Some(&first.active_nat_chains),
        },
    );
    assert_eq!(second.deleted_chains.len(), 1);

    let script = format!(
        "set -e\n{jumps}iptables-restore --noflush < /dev/stdin\niptables-save -t nat\n",
        jumps = jump_script()
    );
    let needed = ["iptables", "iptables-restore", "iptables-save"];
    let test = "real_iptables_restore_accepts_full_and_partial_syncs";
    let Some((ok, out)) = in_netns(test, &needed, &script, &first.restore) else {
        return;
    };
    assert!(
        ok,
        "iptables-restore rejected the full sync:\n{out}\n--- payload:\n{}",
        first.restore
    );
    // iptables-save's view of what kube-proxy wrote.
    assert!(
        out.contains(
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES"
        ),
        "{out}"
    );
    assert!(out.contains("--probability 0.33333333349"), "{out}");
    assert!(
        out.contains("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000"),
        "{out}"
    );
    assert!(
        out.contains("-m recent --rcheck --seconds 10800 --reap --name KUBE-SEP-"),
        "{out}"
    );

    // Both payloads, one after the other, as kube-proxy would apply them.
    let script = format!(
        "set -e\n{jumps}iptables-restore --noflush < /tmp/nfsim-kp-a.$$\niptables-restore --noflush < /tmp/nfsim-kp-b.$$\niptables-save\n",
        jumps = jump_script()
    );
    let script = format!(
        "cat > /tmp/nfsim-kp-a.$$ <<'NFSIM_EOF'\n{a}NFSIM_EOF\ncat > /tmp/nfsim-kp-b.$$ <<'NFSIM_EOF'\n{b}NFSIM_EOF\n( {script} ); rc=$?; rm -f /tmp/nfsim-kp-a.$$ /tmp/nfsim-kp-b.$$; exit $rc\n",
        a = first.restore,
        b = second.restore
    );
    let (ok, out) = in_netns(test, &needed, &script, "").expect("the tools were here a moment ago");
    assert!(
        ok,
        "iptables-restore rejected the partial sync:\n{out}\n--- payload:\n{}",
        second.restore
    );
    let gone = &second.deleted_chains[0];
    assert!(
        !out.contains(gone.as_str()),
        "{gone} should have been deleted:\n{out}"
    );
    // Untouched services kept their chains.
    assert!(out.contains(":KUBE-SVC-XPGD46QRK7WJZT7O - [0:0]"), "{out}");
    assert!(out.contains("-A KUBE-SVC-XPGD46QRK7WJZT7O -m comment --comment \"ns1/svc1:p80 -> 10.180.0.1:80\" -j KUBE-SEP-SXIVWICOYRO3J4NJ"), "{out}");
    // The rewritten kube-dns chain now splits between two endpoints.
    assert!(out.contains("--probability 0.50000000000"), "{out}");
    // Filter rules landed too.
    assert!(out.contains("-A KUBE-SERVICES -d 172.30.0.46/32 -p tcp -m comment --comment \"ns6/svc6:p80 has no endpoints\" -m tcp --dport 80 -j REJECT --reject-with icmp-port-unreachable"), "{out}");
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

/// kube-proxy's flags (detectLocalMode's interface variants, nodePortAddresses, the
/// masquerade bit, --random-fully off, localhost NodePorts off): the real iptables-restore
/// takes each payload, and the real iptables-save prints the rules as nfsim's does.
#[test]
fn real_iptables_takes_the_flag_variants_and_saves_them_as_nfsim_does() {
    let test = "real_iptables_takes_the_flag_variants_and_saves_them_as_nfsim_does";
    let (svcs, slices) = load("tests/golden/kubeproxy/overall_services.yaml");
    let state = ProxyState::build("test-node", &svcs, &slices);
    let base = ProxierConfig::new(
        "test-node",
        "192.168.0.2".parse().unwrap(),
        "10.244.0.0/16".parse().unwrap(),
    );
    let mut variants = Vec::new();
    let mut c = base.clone();
    c.local_detector = LocalDetector::BridgeInterface("cbr0".into());
    c.masquerade_bit = 10;
    c.random_fully = false;
    variants.push(c);
    let mut c = base.clone();
    c.local_detector = LocalDetector::InterfaceNamePrefix("veth".into());
    c.localhost_node_ports = false;
    c.node_port_addresses = Some(vec![
        "192.168.0.2".parse().unwrap(),
        "10.244.0.1".parse().unwrap(),
    ]);
    variants.push(c);
    for cfg in variants {
        let r = render_sync(
            &cfg,
            &state,
            &SyncScope {
                full: true,
                changed: None,
                existing_nat_chains: None,
            },
        );
        let script = format!(
            "set -e\n{jumps}iptables-restore --noflush < /dev/stdin\niptables-save\n",
            jumps = jump_script()
        );
        let tools = ["iptables", "iptables-restore", "iptables-save"];
        let Some((ok, real)) = in_netns(test, &tools, &script, &r.restore) else {
            return;
        };
        assert!(
            ok,
            "iptables-restore refused:\n{real}\n--- payload:\n{}",
            r.restore
        );
        let mut ns = sim_netfilter::netns::Netns::new(sim_netfilter::netns::NetnsConfig::new(
            "test-node",
            1,
        ));
        for j in jump_rules() {
            nfsim::cluster::proxy::ensure_jump_rule(&mut ns, &j).unwrap();
        }
        ns.restore(&r.restore, true).unwrap();
        let ours = ns.save(false);
        for table in ["nat", "filter"] {
            assert_eq!(
                table_rules(&real, table),
                table_rules(&ours, table),
                "{table}, {cfg:?}"
            );
        }
    }
}
