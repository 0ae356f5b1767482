//! The real kernel picks TCP source ports as `docs/kernel-model.md` §11 says and nfsim's
//! `ConnectPorts` does: successive connections to one destination take even ports 2 to 16
//! apart, and no 4-tuple in TIME_WAIT is picked again.

#[path = "support/kernel.rs"]
mod kernel;

use kernel::Scenario;
use nfsim::cluster::ports::ConnectPorts;
use std::collections::BTreeSet;

/// 60 short connections to one listener, each closed by the client (TIME_WAIT on its side).
const CONNECT_LOOP: &str = r#"
import socket
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", 8080))
srv.listen(1000)
ports = []
for _ in range(60):
    c = socket.socket()
    c.connect(("127.0.0.1", 8080))
    a, _ = srv.accept()
    ports.append(c.getsockname()[1])
    c.close()
    a.close()
print(" ".join(map(str, ports)))
"#;

/// Steps between successive ports, modulo the even-length range (28,232).
fn steps(ports: &[u16]) -> Vec<i32> {
    ports
        .windows(2)
        .map(|w| (w[1] as i32 - w[0] as i32).rem_euclid(28_232))
        .collect()
}

#[test]
fn connect_source_ports_climb_by_small_even_steps_like_the_kernel() {
    // nfsim's side, always checked.
    let mut model = ConnectPorts::new(7, "pod/x");
    let none = BTreeSet::<u16>::new();
    let dst = "127.0.0.1:8080".parse().unwrap();
    let sim: Vec<u16> = (0..60)
        .map(|_| {
            model
                .pick("127.0.0.1".parse().unwrap(), dst, &none)
                .unwrap()
        })
        .collect();
    let ok = |ports: &[u16]| {
        ports.iter().all(|p| p % 2 == 0)
            && steps(ports).iter().all(|d| (2..=16).contains(d))
            && ports.iter().collect::<BTreeSet<_>>().len() == ports.len()
    };
    assert!(ok(&sim), "nfsim: {sim:?}");

    let Some(lab) =
        kernel::lab_or_skip("connect_source_ports_climb_by_small_even_steps_like_the_kernel")
    else {
        return;
    };
    let run = lab
        .run(
            &Scenario::new()
                .sysctl("net.ipv4.tcp_tw_reuse", "0")
                .command("ports", &["python3", "-c", CONNECT_LOOP], None),
        )
        .expect("lab run");
    let out = run.output("ports");
    assert_eq!(out.rc, 0, "{}", out.stderr);
    let real: Vec<u16> = out
        .stdout
        .split_whitespace()
        .map(|p| p.parse().unwrap())
        .collect();
    assert_eq!(real.len(), 60);
    assert!(ok(&real), "kernel: {real:?}");
}
