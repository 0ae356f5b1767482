//! The conntrack confirm race on the real kernel, and nfsim's model of it (#27,
//! docs/kernel-model.md §22).
//!
//! What the kernel's selftest `tools/testing/selftests/net/netfilter/conntrack_clash.sh`
//! (with `udpclash.c`) exercises, written afresh: many threads of one process send one
//! datagram each from one UDP socket, so every packet has the same tuple, released at once
//! from a spin; nftables DNATs each with `dnat to numgen random mod 3` to one of three echo
//! servers. On this machine's kernel (6.18) every answer comes back, however the packets
//! clash, and `conntrack -S` counts the clashes in `clash_resolve`. The test binary runs
//! itself again inside `unshare -n` for that part (so the threads are Rust's, and nothing
//! needs `unsafe`).
//!
//! nfsim's side: the same kind of workload (a process sending two datagrams of one flow at
//! once through a DNAT to three endpoints, glibc's A and AAAA) on a node with `cpus: 2`: on a
//! 6.x kernel every lookup is answered at once and `clash_resolve` counts the clashes, as the
//! kernel did; on 4.19 and 4.14 the clashes those kernels cannot resolve are dropped
//! (`drop`, `insert_failed`) and the lookups wait for glibc's retry.

#[path = "support/scenario.rs"]
mod scenario_run;
#[path = "support/tools.rs"]
mod tools;

use std::net::UdpSocket;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// Set in the environment of the copy of this test that runs inside the namespace.
const INNER: &str = "NFSIM_CLASH_KERNEL_INNER";
const SENDERS: usize = 8;
const MAX_ROUNDS: usize = 300;
const TEST: &str = "the_kernel_answers_every_clashing_datagram_and_counts_clash_resolve";

const NFT: &str = "table ip clash {
	chain lb {
		meta l4proto udp dnat to numgen random mod 3 map { 0 : 127.0.0.2 . 9000, 1 : 127.0.0.2 . 9001, 2 : 127.0.0.2 . 9002 }
	}
	chain output {
		type nat hook output priority -100; policy accept;
		ip daddr 127.96.0.10 udp dport 22111 jump lb
	}
}
";

fn run(cmd: &str, args: &[&str], stdin: Option<&str>) -> String {
    use std::io::Write;
    let mut c = Command::new(cmd)
        .args(args)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd}: {e}"));
    c.stdin
        .take()
        .unwrap()
        .write_all(stdin.unwrap_or("").as_bytes())
        .unwrap();
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// A counter of `conntrack -S`, summed over the CPUs.
fn stat(text: &str, name: &str) -> u64 {
    text.split_whitespace()
        .filter_map(|w| w.strip_prefix(name)?.strip_prefix('='))
        .filter_map(|v| v.parse::<u64>().ok())
        .sum()
}

/// Inside the namespace: the servers, the rounds of senders, and one line of results.
fn inner() {
    run("ip", &["link", "set", "lo", "up"], None);
    run("nft", &["-f", "-"], Some(NFT));
    for port in 9000..9003 {
        let s = UdpSocket::bind(("127.0.0.2", port)).unwrap();
        std::thread::spawn(move || {
            let mut buf = [0u8; 64];
            while let Ok((n, peer)) = s.recv_from(&mut buf) {
                let _ = s.send_to(&buf[..n], peer);
            }
        });
    }
    let (mut sent, mut answered, mut rounds) = (0, 0, 0);
    let mut stats = String::new();
    while rounds < MAX_ROUNDS {
        rounds += 1;
        let c = Arc::new(UdpSocket::bind("127.0.0.1:0").unwrap());
        let go = Arc::new(AtomicBool::new(false));
        let threads: Vec<_> = (0..SENDERS)
            .map(|i| {
                let (c, go) = (c.clone(), go.clone());
                std::thread::spawn(move || {
                    while !go.load(Ordering::Acquire) {
                        std::hint::spin_loop();
                    }
                    c.send_to(format!("q{i}").as_bytes(), "127.96.0.10:22111")
                        .unwrap();
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(2));
        go.store(true, Ordering::Release);
        for t in threads {
            t.join().unwrap();
        }
        sent += SENDERS;
        c.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let mut buf = [0u8; 64];
        for _ in 0..SENDERS {
            if c.recv_from(&mut buf).is_err() {
                break;
            }
            answered += 1;
        }
        stats = run("conntrack", &["-S"], None);
        if stat(&stats, "clash_resolve") > 0 && rounds >= 5 {
            break;
        }
    }
    println!(
        "RESULT rounds={rounds} sent={sent} answered={answered} clash_resolve={} insert_failed={} drop={}",
        stat(&stats, "clash_resolve"),
        stat(&stats, "insert_failed"),
        stat(&stats, "drop")
    );
}

#[test]
fn the_kernel_answers_every_clashing_datagram_and_counts_clash_resolve() {
    if std::env::var_os(INNER).is_some() {
        return inner();
    }
    if !tools::have_or_skip(TEST, &["unshare", "ip", "nft", "conntrack"]) {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    if cpus < 2 {
        tools::skips::report(TEST, "one CPU: no two packets are ever in flight at once");
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(tools::find("unshare").unwrap())
        .arg("-n")
        .arg(exe)
        .args(["--exact", TEST, "--nocapture", "--test-threads=1"])
        .env(INNER, "1")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let line = text
        .lines()
        .find_map(|l| l.find("RESULT ").map(|i| &l[i..]))
        .unwrap_or_else(|| panic!("no result: {text}"));
    let field = |k: &str| stat(line, k);
    assert_eq!(
        field("answered"),
        field("sent"),
        "every datagram answered: {line}"
    );
    assert!(field("clash_resolve") > 0, "the senders clashed: {line}");
    assert_eq!(field("drop"), 0, "{line}");
    assert_eq!(field("insert_failed"), 0, "{line}");
}

/// nfsim's side: a pod (each send on the CPU of its own draw, by its veth) asks through a
/// Service with three endpoints on a two-CPU node, A and AAAA at once. (A node process's
/// packets would be masqueraded `--random-fully` to a port each, which no release before 5.6
/// can merge.)
fn model(kernel: &str) -> nfsim::cluster::sim::RunResult {
    let text = format!(
        "name: clash
seed: 3
duration: 4m
nodes:
  - name: n1
    address: 192.168.0.11
    podCIDR: 10.244.1.0/24
    kernel: {{version: \"{kernel}\"}}
    cpus: 2
pods:
  - {{name: app, node: n1, ip: 10.244.1.9}}
{pods}services:
  - metadata: {{name: echo, namespace: default}}
    spec:
      clusterIP: 10.96.0.20
      selector: {{app: echo}}
      ports: [{{name: dns, protocol: UDP, port: 53, targetPort: 53}}]
clients:
  - name: senders
    pod: app
    resolver:
      libc: glibc
      resolvConf: \"nameserver 10.96.0.20\\noptions ndots:1\\n\"
      names: [clash.example]
      sleep: 1s
      count: 40
expectations:
  - name: stalled
    client: {{name: senders, lookups: {{answered: 40, stalled: 0}}}}
  - name: clashes
    conntrackStats: {{node: n1, clash_resolve: \">= 1\", drop: 0, insert_failed: 0}}
",
        pods = (0..3)
            .map(|i| format!(
                "  - name: echo-{i}\n    node: n1\n    ip: 10.244.1.{}\n    labels: {{app: echo}}\n    apps: [{{udpServer: {{port: 53, zone: {{names: {{clash.example: {{a: 1, aaaa: 1}}}}}}}}}}]\n",
                10 + i
            ))
            .collect::<String>()
    );
    scenario_run::run_text("clash.yaml", &text, false)
}

fn detail(r: &nfsim::cluster::sim::RunResult, name: &str) -> (bool, String) {
    let x = r.results.iter().find(|x| x.name == name).unwrap();
    (x.passed, x.detail.clone())
}

#[test]
fn nfsim_on_6_x_answers_every_clash_and_counts_clash_resolve() {
    for k in ["6.18", "6.6", "5.10"] {
        let r = model(k);
        assert!(r.passed(), "{k}: {:#?}", r.results);
    }
}

#[test]
fn nfsim_on_4_19_and_4_14_drops_what_those_kernels_drop() {
    // 4.19 (ed07d9a021df): clashes to the same endpoint merge, the others drop; 4.14: every
    // clash drops (the nat table gives every entry a binding). Both count insert_failed.
    let (p19, d19) = (model("4.19"), model("4.14"));
    for (k, r) in [("4.19", &p19), ("4.14", &d19)] {
        let (ok, d) = detail(r, "stalled");
        assert!(!ok && !d.contains("stalled 0,"), "{k}: {d}");
        let (ok, d) = detail(r, "clashes");
        assert!(!ok, "{k}: {d}");
        assert!(!d.contains("drop 0,") && !d.contains("drop=0"), "{k}: {d}");
    }
    let drops = |r: &nfsim::cluster::sim::RunResult| {
        let d = detail(r, "clashes").1;
        let n = d
            .split([',', ' ', '='])
            .skip_while(|w| *w != "drop")
            .nth(1)
            .and_then(|v| v.parse::<u64>().ok());
        n.unwrap_or_else(|| panic!("{d}"))
    };
    assert!(
        drops(&p19) < drops(&d19),
        "4.19 merges what 4.14 drops: {} vs {}",
        drops(&p19),
        drops(&d19)
    );
}
