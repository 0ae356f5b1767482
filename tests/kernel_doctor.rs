//! # `nfsim doctor` on a real node (issue #28's kernel-lab proof)
//!
//! A kube-proxy-shaped node on the real kernel, in a private `unshare -n` namespace with two
//! TUN links the test drives by hand (the kernel lab, tests/support/kernel.rs): `eth0`
//! (192.168.0.12/24: the network, the other node's pods 10.244.1.0/24 behind it) and `cni0`
//! (10.244.2.1/24: this node's pods).
//!
//! 1. Rules of epoch A (iptables-restore, kube-proxy's iptables mode): `kube-dns`
//!    10.96.0.10:53/udp → 10.244.1.8:53 (on the other node).
//! 2. A fixed-port sender (a DNS forwarder's source port 5353) and an ephemeral client query
//!    kube-dns; the endpoint answers both.
//! 3. Epoch B (`iptables-restore --noflush`, as kube-proxy writes, `-X` of the removed
//!    chain): kube-dns → 10.244.2.7:53 only. The fixed-port sender sends again: its entry
//!    still DNATs it to the gone 10.244.1.8 and is refreshed. A third client's new flow goes
//!    to 10.244.2.7 (live); a flow to a pod without any Service is not DNAT'd at all.
//! 4. Inside the namespace: `iptables-save`, `conntrack -L`, `nfsim doctor --rules …
//!    --conntrack … --json` on those files, then every `conntrack -D` line of the report's
//!    `fix`, run as it is printed, then `conntrack -L` again.
//! 5. The fixed-port sender sends once more.
//!
//! Checked: the doctor exits 1 and names exactly the two entries to 10.244.1.8 as stale (the
//! fixed-port one kept alive); its fix line deletes exactly those on the real kernel (the
//! listing after is the listing before less those two, and `conntrack` says 2 deleted); the
//! sender's next packet leaves by `cni0` to the live 10.244.2.7:53.
//!
//! Skips, saying why, without `unshare`, `iptables-restore`, `iptables-save`, `conntrack`,
//! `python3` (the lab's driver and its check), `sh` or `/dev/net/tun`.

#[path = "support/kernel.rs"]
mod kernel;

use kernel::{parse_ct_line, CtEntry, RawPacket, Scenario};
use std::collections::BTreeSet;

const POD: &str = "10.244.2.9";
const DNS: &str = "10.96.0.10";
const GONE: &str = "10.244.1.8";
const LIVE: &str = "10.244.2.7";
const FIXED: u16 = 5353;
const WAIT_MS: u64 = 15;
const SVC: &str = "KUBE-SVC-TCOU7JCQXEZGVUNU";
const SEP_GONE: &str = "KUBE-SEP-IT2ZTR26TO4XFPTO";
const SEP_LIVE: &str = "KUBE-SEP-PBFVJUGNX7I4VSY2";

/// kube-proxy's nat table with kube-dns sent to `ep` through `sep` (`drop`: the chain of the
/// other epoch, deleted with `-X`).
fn rules(sep: &str, ep: &str, drop: Option<&str>) -> String {
    let mut s = String::from("*nat\n");
    for c in [
        "KUBE-SERVICES",
        "KUBE-MARK-MASQ",
        "KUBE-POSTROUTING",
        SVC,
        sep,
    ]
    .into_iter()
    .chain(drop)
    {
        s.push_str(&format!(":{c} - [0:0]\n"));
    }
    if drop.is_none() {
        s.push_str(
            "-A PREROUTING -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n",
        );
        s.push_str(
            "-A OUTPUT -m comment --comment \"kubernetes service portals\" -j KUBE-SERVICES\n",
        );
        s.push_str("-A POSTROUTING -m comment --comment \"kubernetes postrouting rules\" -j KUBE-POSTROUTING\n");
    }
    s.push_str("-A KUBE-MARK-MASQ -j MARK --set-xmark 0x4000/0x4000\n");
    s.push_str("-A KUBE-POSTROUTING -m mark ! --mark 0x4000/0x4000 -j RETURN\n");
    s.push_str("-A KUBE-POSTROUTING -j MARK --set-xmark 0x4000/0x0\n");
    s.push_str("-A KUBE-POSTROUTING -m comment --comment \"kubernetes service traffic requiring SNAT\" -j MASQUERADE --random-fully\n");
    s.push_str(&format!("-A KUBE-SERVICES -d {DNS}/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j {SVC}\n"));
    s.push_str(&format!("-A {SVC} ! -s 10.244.2.0/24 -d {DNS}/32 -p udp -m comment --comment \"kube-system/kube-dns:dns cluster IP\" -m udp --dport 53 -j KUBE-MARK-MASQ\n"));
    s.push_str(&format!(
        "-A {SVC} -m comment --comment \"kube-system/kube-dns:dns -> {ep}:53\" -j {sep}\n"
    ));
    s.push_str(&format!(
        "-A {sep} -s {ep}/32 -m comment --comment \"kube-system/kube-dns:dns\" -j KUBE-MARK-MASQ\n"
    ));
    s.push_str(&format!("-A {sep} -p udp -m comment --comment \"kube-system/kube-dns:dns\" -m udp -j DNAT --to-destination {ep}:53\n"));
    // As kube-proxy deletes a chain: declared (so flushed) above, `-X` once nothing jumps
    // to it.
    if let Some(d) = drop {
        s.push_str(&format!("-X {d}\n"));
    }
    s.push_str("COMMIT\n");
    s
}

fn udp(src: &str, sport: u16, dst: &str, dport: u16) -> RawPacket {
    RawPacket {
        proto: "udp".into(),
        src: src.into(),
        dst: dst.into(),
        sport,
        dport,
        len: 30,
        ..RawPacket::default()
    }
}

fn answer() -> RawPacket {
    RawPacket {
        len: 60,
        ..udp("0.0.0.0", 0, "0.0.0.0", 0)
    }
}

/// The tuple key of a listed entry.
fn key(e: &CtEntry) -> String {
    format!(
        "{} {:?}:{:?} -> {:?}:{:?} / {:?}:{:?}",
        e.proto, e.orig.src, e.orig.sport, e.orig.dst, e.orig.dport, e.reply.src, e.reply.sport
    )
}

fn entries(listing: &str) -> Vec<CtEntry> {
    listing.lines().filter_map(parse_ct_line).collect()
}

#[test]
fn the_doctors_fix_deletes_exactly_the_stale_entries_on_the_real_node() {
    let test = "kernel_doctor::the_doctors_fix_deletes_exactly_the_stale_entries_on_the_real_node";
    let Some(lab) = kernel::lab_with_or_skip(test, &["sh", "python3"], &["/dev/net/tun"]) else {
        return;
    };
    let dir = std::env::temp_dir().join(format!("nfsim-kernel-doctor-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let d = dir.display().to_string();
    let nfsim = env!("CARGO_BIN_EXE_nfsim");
    let doctor = format!(
        "iptables-save > {d}/rules.txt && conntrack -L > {d}/ct.txt 2>/dev/null; {nfsim} doctor --rules {d}/rules.txt --conntrack {d}/ct.txt --node-addr 192.168.0.12 --pod-cidr 10.244.2.0/24 --json > {d}/doctor.json; echo $?"
    );
    // The report's fix lines, each run as printed (split on spaces, as a shell would).
    let fix = format!(
        "import json, subprocess, sys\nfor f in json.load(open('{d}/doctor.json'))['fix']:\n    r = subprocess.run(f['command'].split(), capture_output=True, text=True)\n    sys.stdout.write(r.stdout)\n    sys.stderr.write(r.stderr)\n    print('exit', r.returncode)\n"
    );
    let s = Scenario::new()
        .enable_conntrack(false)
        .events(false)
        .sysctl("net.ipv6.conf.all.disable_ipv6", "1")
        .sysctl("net.ipv6.conf.default.disable_ipv6", "1")
        .sysctl("net.ipv4.ip_forward", "1")
        .sysctl("net.ipv4.conf.all.rp_filter", "0")
        .sysctl("net.ipv4.conf.default.rp_filter", "0")
        .sysctl("net.ipv4.conf.all.send_redirects", "0")
        .sysctl("net.ipv4.conf.default.send_redirects", "0")
        .tun("eth0", &["192.168.0.12/24"])
        .tun("cni0", &["10.244.2.1/24"])
        .route("default via 192.168.0.1 dev eth0")
        .rules(&rules(SEP_GONE, GONE, None))
        .inject("fixed-1", "cni0", udp(POD, FIXED, DNS, 53), None, WAIT_MS)
        .inject("fixed-1-ans", "eth0", answer(), Some("fixed-1"), WAIT_MS)
        .inject(
            "eph-1",
            "cni0",
            udp("10.244.2.10", 40001, DNS, 53),
            None,
            WAIT_MS,
        )
        .inject("eph-1-ans", "eth0", answer(), Some("eph-1"), WAIT_MS)
        .iptables_restore("epoch-b", &rules(SEP_LIVE, LIVE, Some(SEP_GONE)), true)
        .inject("fixed-2", "cni0", udp(POD, FIXED, DNS, 53), None, WAIT_MS)
        .inject("fixed-2-ans", "eth0", answer(), Some("fixed-2"), WAIT_MS)
        .inject(
            "new-1",
            "cni0",
            udp("10.244.2.11", 40003, DNS, 53),
            None,
            WAIT_MS,
        )
        .inject("new-1-ans", "cni0", answer(), Some("new-1"), WAIT_MS)
        .inject(
            "plain",
            "cni0",
            udp(POD, 40005, "10.244.1.20", 9000),
            None,
            WAIT_MS,
        )
        .command("doctor", &["sh", "-c", &doctor], None)
        .command("fix", &["python3", "-c", &fix], None)
        .conntrack("after", &["-L"])
        .inject("fixed-3", "cni0", udp(POD, FIXED, DNS, 53), None, WAIT_MS);
    let run = lab.run(&s).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(run.output("epoch-b").rc, 0, "{:?}", run.output("epoch-b"));

    // The state the doctor read.
    let before = std::fs::read_to_string(dir.join("ct.txt")).expect("the saved listing");
    let report = std::fs::read_to_string(dir.join("doctor.json")).expect("the doctor's report");
    assert_eq!(
        run.output("doctor").stdout.trim(),
        "1",
        "the doctor exits 1 on stale entries: {:?}\n{report}",
        run.output("doctor")
    );
    let v: serde_json::Value =
        serde_json::from_str(&report).unwrap_or_else(|e| panic!("{e}: {report}"));
    assert_eq!(v["summary"]["stale"], 2, "{report}\n{before}");
    let stale = &v["findings"][0];
    assert_eq!(stale["kind"], "stale", "{report}");
    assert_eq!(stale["service"], "kube-system/kube-dns:dns");
    let eps: BTreeSet<String> = stale["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["endpoint"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        eps,
        [format!("{GONE}:53")].into_iter().collect(),
        "{report}"
    );
    let kept: Vec<&serde_json::Value> = stale["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kept_alive"] == true)
        .collect();
    assert_eq!(kept.len(), 1, "{report}");
    assert_eq!(kept[0]["client"], format!("{POD}:{FIXED}"));
    let lines: Vec<&str> = v["fix"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["command"].as_str().unwrap())
        .collect();
    assert_eq!(
        lines,
        [format!("conntrack -D -p udp --orig-dst {DNS} --orig-port-dst 53 --reply-src {GONE} --reply-port-src 53")],
        "{report}"
    );

    // Run on the real node: exactly the two stale entries are gone.
    let fix_out = run.output("fix");
    assert!(fix_out.stdout.contains("exit 0"), "{fix_out:?}");
    assert!(
        fix_out.stderr.contains("2 flow entries have been deleted"),
        "{fix_out:?}"
    );
    let before_keys: BTreeSet<String> = entries(&before).iter().map(key).collect();
    let after_keys: BTreeSet<String> = entries(&run.output("after").stdout)
        .iter()
        .map(key)
        .collect();
    let gone: Vec<&String> = before_keys.difference(&after_keys).collect();
    assert_eq!(
        gone.len(),
        2,
        "before:\n{before}\nafter:\n{}",
        run.output("after").stdout
    );
    assert!(gone.iter().all(|k| k.contains(GONE)), "{gone:?}");
    assert!(
        after_keys.is_subset(&before_keys),
        "nothing new between the listings"
    );
    assert_eq!(after_keys.len(), before_keys.len() - 2);
    assert!(
        after_keys.iter().any(|k| k.contains(LIVE)),
        "the live entry stays"
    );
    assert!(
        after_keys.iter().any(|k| k.contains("10.244.1.20")),
        "the plain flow stays"
    );

    // The fixed-port sender's next packet reaches the live endpoint.
    let next = run.injected("fixed-3");
    let out: Vec<sim_core::Packet> = next
        .emitted
        .iter()
        .filter_map(|p| sim_core::wire::parse_ip(&p.bytes()).ok())
        .collect();
    assert!(
        next.emitted.iter().any(|p| p.dev == "cni0")
            && out
                .iter()
                .any(|p| p.dst.to_string() == LIVE && p.dport() == Some(53)),
        "{next:?}"
    );
    eprintln!(
        "the doctor found {} stale entries on {}; its fix `{}` deleted them on the real node ({} entries left), and the next packet went to {LIVE}:53",
        gone.len(),
        lab.kernel,
        lines[0],
        after_keys.len()
    );
    let _ = std::fs::remove_dir_all(&dir);
}
