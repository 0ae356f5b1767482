//! nfsim's ipset model against the real `ipset` (7.x) and kernel in a private network
//! namespace: the same `ipset restore` input through both, `ipset save` and `ipset list`
//! compared byte for byte (member order is the kernel's hash order), and packets sent
//! through `iptables -m set` rules in the kernel, their rule counters compared with nfsim's.
//! Skips (passing) where `ipset`, `iptables` or `unshare -n` is not available.

#[path = "support/tools.rs"]
mod tools;

use std::process::Command;

use sim_core::{Packet, SimRng, SimTime};
use sim_netfilter::{EvalCtx, Hook, LocalAddrs, RestoreOptions, Ruleset, RulesetState, Table};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn fixture() -> String {
    std::fs::read_to_string(format!("{ROOT}/tests/fixtures/ipset/kube-proxy.ipset")).unwrap()
}

/// Runs `script` with `sh -c` in a fresh network namespace, the files given written first.
fn in_netns(files: &[(&str, &str)], script: &str) -> String {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    let dir = std::env::temp_dir().join(format!("nfsim-ipset-{}-{n}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    let out = Command::new(tools::find("unshare").unwrap())
        .args([
            "-n",
            "sh",
            "-c",
            &format!("set -e\ncd {}\n{script}", dir.display()),
        ])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert!(
        out.status.success(),
        "{script}\nfailed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

fn same(what: &str, real: &str, ours: &str) {
    if real == ours {
        return;
    }
    for (i, (a, b)) in real.lines().zip(ours.lines()).enumerate() {
        assert_eq!(
            a,
            b,
            "{what}, line {}:\nreal:\n{real}\nours:\n{ours}",
            i + 1
        );
    }
    panic!("{what}: lengths differ\nreal:\n{real}\nours:\n{ours}");
}

fn sim(text: &str) -> Ruleset {
    let mut rs = Ruleset::new();
    rs.ipset_restore(text).unwrap_or_else(|e| panic!("{e}"));
    rs
}

#[test]
fn ipset_save_and_list_match_the_real_tool() {
    if !tools::have_or_skip("ipset_save_and_list_match_the_real_tool", &["ipset"]) {
        return;
    }
    let text = fixture();
    let real = in_netns(
        &[("sets", &text)],
        "ipset restore < sets\nipset save\necho ====\nipset list\necho ====\nipset list -t\n",
    );
    let parts: Vec<&str> = real.split("====\n").collect();
    let rs = sim(&text);
    same("ipset save", parts[0], &rs.ipsets().save());
    same("ipset list", parts[1], &rs.ipset_list(false));
    same("ipset list -t", parts[2], &rs.ipset_list(true));
}

/// Sets made without `initval` get a random one in the kernel: restoring the real `ipset
/// save` (which prints it) into nfsim gives the kernel's order, sizes and all, also after
/// the table has grown (`mtype_resize`) and after deletions.
#[test]
fn the_kernels_random_initval_and_table_growth_reproduce() {
    if !tools::have_or_skip(
        "the_kernels_random_initval_and_table_growth_reproduce",
        &["ipset"],
    ) {
        return;
    }
    let mut text = String::from(
        "create BIG hash:ip,port hashsize 64 bucketsize 2\n\
         create LB hash:ip,port,ip\n\
         create NETS hash:net hashsize 64 bucketsize 2\n",
    );
    for i in 0..300u32 {
        text.push_str(&format!(
            "add BIG 10.{}.{}.{},{}:{}\n",
            i / 200,
            i % 200,
            i % 7,
            ["tcp", "udp", "sctp"][(i % 3) as usize],
            30000 + i
        ));
    }
    for i in 0..40u32 {
        text.push_str(&format!("add LB 10.244.{i}.2,tcp:80,10.244.{i}.2\n"));
        text.push_str(&format!("add NETS 10.{i}.0.0/{}\n", 16 + i % 16));
    }
    for i in (0..300u32).step_by(7) {
        text.push_str(&format!(
            "del BIG 10.{}.{}.{},{}:{}\n",
            i / 200,
            i % 200,
            i % 7,
            ["tcp", "udp", "sctp"][(i % 3) as usize],
            30000 + i
        ));
    }
    let real = in_netns(
        &[("sets", &text)],
        "ipset restore < sets\nipset save\necho ====\nipset list -t\n",
    );
    let parts: Vec<&str> = real.split("====\n").collect();
    let rs = sim(parts[0]);
    same("ipset save", parts[0], &rs.ipsets().save());
    // After `del` the kernel may shrink a bucket, which nfsim does not model: sizes of the
    // set with deletions are not compared.
    let terse = rs.ipset_list(true);
    let strip = |s: &str| -> String {
        s.split("\n\n")
            .map(|set| {
                if set.starts_with("Name: BIG\n") {
                    set.lines()
                        .filter(|l| !l.starts_with("Size in memory"))
                        .collect::<Vec<_>>()
                        .join("\n")
                } else {
                    set.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n\n")
    };
    same("ipset list -t", &strip(parts[1]), &strip(&terse));
}

/// The `-m set` rules IPVS mode writes, each a counting rule in OUTPUT; the same packets
/// sent by a process in the real namespace and evaluated by nfsim; the per-rule packet
/// counts compared.
#[test]
fn match_set_rules_count_the_packets_the_kernel_counts() {
    if !tools::have_or_skip(
        "match_set_rules_count_the_packets_the_kernel_counts",
        &[
            "ipset",
            "iptables-restore",
            "iptables-save",
            "ip",
            "python3",
        ],
    ) {
        return;
    }
    // The kernel's answers (a RST from a closed TCP port, ICMP port unreachable from a
    // closed UDP one) also pass OUTPUT: the first two rules take them out of the count.
    let rules = "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n\
        -A OUTPUT -p icmp -j ACCEPT\n\
        -A OUTPUT -p tcp -m tcp --tcp-flags RST RST -j ACCEPT\n\
        -A OUTPUT -m set --match-set KUBE-CLUSTER-IP dst,dst\n\
        -A OUTPUT -m set ! --match-set KUBE-CLUSTER-IP dst,dst\n\
        -A OUTPUT -m set --match-set KUBE-CLUSTER-IP dst\n\
        -A OUTPUT -m set --match-set KUBE-CLUSTER-IP src,dst\n\
        -A OUTPUT -m set --match-set KUBE-CLUSTER-IP dst,dst,src\n\
        -A OUTPUT -m set --match-set KUBE-LOOP-BACK dst,dst,src\n\
        -A OUTPUT -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src\n\
        -A OUTPUT -m set --match-set KUBE-LOAD-BALANCER-SOURCE-CIDR dst,dst,src --return-nomatch\n\
        -A OUTPUT -m set --match-set KUBE-NODE-PORT-TCP dst\n\
        -A OUTPUT -m set --match-set KUBE-NODE-PORT-UDP dst\n\
        -A OUTPUT -m set --match-set KUBE-IPVS-IPS dst\n\
        -A OUTPUT -m set --match-set KUBE-NETS dst\n\
        -A OUTPUT -m set --match-set KUBE-NETS src,dst --return-nomatch\n\
        COMMIT\n";
    // (protocol, source, destination, port): sources are 127.0.0.1 or the address itself.
    let sends: &[(&str, &str, &str, u16)] = &[
        ("udp", "127.0.0.1", "127.0.0.2", 53),
        ("tcp", "127.0.0.1", "127.0.0.2", 80),
        ("tcp", "127.0.0.1", "127.0.0.2", 53),
        ("udp", "127.0.0.5", "127.0.0.5", 5353),
        ("udp", "127.0.0.1", "127.0.0.5", 5353),
        ("udp", "127.0.0.1", "127.0.0.3", 7000),
        ("udp", "127.0.0.3", "127.0.0.3", 7000),
        ("tcp", "127.0.0.1", "127.0.0.9", 30080),
        ("udp", "127.0.0.1", "127.0.0.9", 31053),
        ("udp", "127.0.0.1", "127.0.1.9", 30080),
        ("tcp", "127.0.0.1", "127.0.0.8", 32767),
    ];
    let mut py = String::from(
        "import socket\n\
         def send(proto, src, dst, port):\n\
         \x20   if proto == 'udp':\n\
         \x20       s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\n\
         \x20       s.bind((src, 0))\n\
         \x20       s.sendto(b'x', (dst, port))\n\
         \x20   else:\n\
         \x20       s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)\n\
         \x20       s.bind((src, 0))\n\
         \x20       try:\n\
         \x20           s.connect((dst, port))\n\
         \x20       except OSError:\n\
         \x20           pass\n\
         \x20   s.close()\n",
    );
    for (p, s, d, port) in sends {
        py.push_str(&format!("send('{p}', '{s}', '{d}', {port})\n"));
    }
    let text = fixture();
    let real = in_netns(
        &[("sets", &text), ("rules", rules), ("send.py", &py)],
        "ip link set lo up\nipset restore < sets\niptables-restore -c < rules\n\
         python3 send.py\niptables-save -c -t filter\n",
    );
    let mut rs = sim(&text);
    rs.restore(rules, &RestoreOptions::default()).unwrap();
    let mut state = RulesetState::new();
    let mut rng = SimRng::derive(1, "statistic");
    let addrs = LocalAddrs::new();
    for (p, s, d, port) in sends {
        let src = format!("{s}:40000").parse().unwrap();
        let dst = format!("{d}:{port}").parse().unwrap();
        let pkt = if *p == "udp" {
            Packet::udp(src, dst)
        } else {
            Packet::tcp(src, dst, sim_core::TcpFlags::SYN)
        };
        let mut ctx = EvalCtx::new(pkt, &addrs, SimTime::ZERO, &mut rng);
        ctx.local_origin = true;
        rs.run_hook(Table::Filter, Hook::Output, &mut ctx, &mut state, None);
    }
    let packets = |save: &str| -> Vec<String> {
        save.lines()
            .filter(|l| l.contains("-A OUTPUT") && !l.contains(" -j ACCEPT"))
            .map(|l| {
                let (c, rule) = l.split_once("] ").unwrap();
                format!(
                    "{} {rule}",
                    c.trim_start_matches('[').split(':').next().unwrap()
                )
            })
            .collect()
    };
    let ours = rs.save(
        &state,
        &sim_netfilter::SaveOptions {
            counters: true,
            timestamp: None,
            table: None,
        },
    );
    assert_eq!(
        packets(&real),
        packets(&ours),
        "real:\n{real}\nours:\n{ours}"
    );
    // The kernel counts each rule's reference to its set.
    let listed = rs.ipset_list(true);
    assert!(listed.contains("Name: KUBE-CLUSTER-IP\n"), "{listed}");
    assert!(listed.contains("References: 5\n"), "{listed}");
}
