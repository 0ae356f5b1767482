//! `nfsim replay --pcap-out` writes what left the node as the node would have sent it: every
//! shipped capture (`tests/fixtures/**/*.pcap*`) is replayed through the kube-proxy fixture,
//! and in the output every byte of a packet that came in is the captured byte, except the
//! fields the kernel changes (addresses, ports, ICMP ids, TTL, the checksums over them, the
//! header quoted in an ICMP error). tshark, where installed, reads the output with checksum
//! validation on and finds nothing wrong.

#[path = "support/tools.rs"]
mod tools;

use sim_core::pcap::{self, Capture, ReadOptions, Record};
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");
const RULES: &str = "tests/fixtures/cli/kube-proxy.rules";

fn captures(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for p in entries {
        if p.is_dir() {
            captures(&p, out);
        } else if p
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| n.contains(".pcap"))
        {
            out.push(p);
        }
    }
}

fn shipped() -> Vec<PathBuf> {
    let mut v = Vec::new();
    captures(&Path::new(ROOT).join("tests/fixtures"), &mut v);
    assert!(v.len() >= 2, "the fixtures are gone: {v:?}");
    v
}

fn tmp(name: &str) -> PathBuf {
    std::env::temp_dir().join(format!("nfsim-pcap-out-{}-{name}", std::process::id()))
}

fn replay(input: &Path, out: &Path) -> String {
    let o = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args(["replay", "--rules", RULES, "--pod-cidr", "10.244.0.0/16"])
        .arg("--pcap-out")
        .arg(out)
        .arg(input)
        .current_dir(ROOT)
        .output()
        .unwrap();
    let stdout = String::from_utf8(o.stdout).unwrap();
    assert!(
        o.status.success(),
        "{}: {}\n{stdout}",
        input.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    stdout
}

/// Marks the bytes of the IPv4 packet at `ip[at..]` that NAT and forwarding may change.
fn mark_v4(ip: &[u8], at: usize, quoted: bool, may: &mut [bool]) {
    if ip.len() < at + 20 {
        return;
    }
    let ihl = usize::from(ip[at] & 0xf) * 4;
    let mut set = |from: usize, to: usize| {
        for m in may.iter_mut().take(to.min(ip.len())).skip(from) {
            *m = true;
        }
    };
    set(at + 8, at + 9); // TTL
    set(at + 10, at + 20); // header checksum, addresses
    let l4 = at + ihl;
    match ip[at + 9] {
        6 => {
            set(l4, l4 + 4);
            set(l4 + 16, l4 + 18);
        }
        17 => {
            set(l4, l4 + 4);
            set(l4 + 6, l4 + 8);
        }
        1 => {
            set(l4 + 2, l4 + 6); // checksum, echo id
            if !quoted && ip.len() > l4 && matches!(ip[l4], 3 | 4 | 5 | 11 | 12) {
                mark_v4(ip, l4 + 8, true, may);
            }
        }
        _ => {}
    }
}

/// The input record that `out` (an output record) is the forwarded copy of: same time, same
/// protocol and length, same IPv4 identification. `None` for a packet the kernel generated.
fn source_of<'a>(
    input: &'a Capture,
    out_cap: &Capture,
    out: &Record,
    first_in: u64,
    first_out: u64,
) -> Option<&'a Record> {
    let ob = out_cap.ip_bytes(out);
    let t_out = first_out + out.time.as_nanos();
    input.records.iter().find(|r| {
        let ib = input.ip_bytes(r);
        first_in + r.time.as_nanos() == t_out
            && ib.len() == ob.len()
            && ib.len() >= 20
            && ib[0] == ob[0]
            && ib[4..6] == ob[4..6]
            && ib[9] == ob[9]
    })
}

#[test]
fn pcap_out_keeps_every_byte_the_kernel_does_not_change() {
    for input in shipped() {
        let name = input.file_name().unwrap().to_string_lossy().to_string();
        let out = tmp(&format!("{name}.out.pcap"));
        let text = replay(&input, &out);
        let inp = pcap::read_file(&input, &ReadOptions::default()).unwrap();
        let outp = pcap::read_file(&out, &ReadOptions::default()).unwrap();
        assert!(
            text.contains(&format!("left the node  {}", outp.records.len())),
            "{text}"
        );
        let mut forwarded = 0;
        for o in &outp.records {
            let Some(i) = source_of(&inp, &outp, o, inp.first_epoch_ns, outp.first_epoch_ns) else {
                continue;
            };
            forwarded += 1;
            let (ib, ob) = (inp.ip_bytes(i), outp.ip_bytes(o));
            assert_eq!(o.orig_len as usize, usize::from(i.packet.len), "{name}");
            let mut may = vec![false; ib.len()];
            if ib[0] >> 4 == 4 {
                mark_v4(ib, 0, false, &mut may);
            }
            for (k, (a, b)) in ib.iter().zip(ob).enumerate() {
                assert!(
                    a == b || may[k],
                    "{name}: frame {}: byte {k} changed from {a:#04x} to {b:#04x}, outside any NAT'd field",
                    i.frame
                );
            }
            // A packet's payload beyond its headers is the captured payload, all of it.
            assert!(ib.len() > 20, "{name}");
        }
        assert!(forwarded > 0, "{name}: nothing was forwarded\n{text}");
        let _ = std::fs::remove_file(&out);
    }
}

#[test]
fn the_node_in_fixture_comes_out_translated() {
    let input = Path::new(ROOT).join("tests/fixtures/pcap/node-in.pcap");
    let out = tmp("node-in-translated.pcap");
    replay(&input, &out);
    let outp = pcap::read_file(&out, &ReadOptions::default()).unwrap();
    let got: Vec<String> = outp.records.iter().map(|r| r.packet.to_string()).collect();
    // The answer, un-DNAT'd to the ClusterIP; the API server's SYN-ACK likewise; the
    // endpoint's port unreachable with its quote translated back to what the pod sent; the
    // REJECT's answer from cni0's address quoting the SYN.
    for want in [
        "udp 10.96.0.10:53 -> 10.244.2.9:40000",
        "tcp 10.96.0.1:443 -> 10.244.2.9:52100 SYN,ACK",
        "icmp 10.96.0.10 -> 10.244.2.9 unreachable code=3 (udp 10.244.2.9:40001 -> 10.96.0.10:53)",
        "icmp 10.244.0.1 -> 10.244.2.9 unreachable code=3 (tcp 10.244.2.9:42000 -> 10.96.200.1:80)",
    ] {
        assert!(got.iter().any(|g| g == want), "{want} not in {got:#?}");
    }
    // The TLS segment keeps its 1,448 bytes of payload and its TCP options.
    let data = outp
        .records
        .iter()
        .find(|r| r.packet.len == 1500)
        .expect("the 1500-byte segment");
    let b = outp.ip_bytes(data);
    assert_eq!(b.len(), 1500);
    assert_eq!(
        b[32] >> 4,
        8,
        "TCP header of 32 bytes: the timestamps option is kept"
    );
    assert_eq!(&b[52..55], &[0x17, 0x03, 0x03]);
    let _ = std::fs::remove_file(&out);
}

#[test]
fn tshark_validates_every_checksum_of_the_output() {
    let test = "tshark_validates_every_checksum_of_the_output";
    if !tools::have_or_skip(test, &["tshark"]) {
        return;
    }
    for input in shipped() {
        let name = input.file_name().unwrap().to_string_lossy().to_string();
        let out = tmp(&format!("{name}.tshark.pcap"));
        replay(&input, &out);
        let run = |filter: &str| {
            let o = Command::new(tools::find("tshark").unwrap())
                .args(["-n", "-r"])
                .arg(&out)
                .args([
                    "-o",
                    "ip.check_checksum:TRUE",
                    "-o",
                    "tcp.check_checksum:TRUE",
                    "-o",
                    "udp.check_checksum:TRUE",
                    "-Y",
                    filter,
                ])
                .output()
                .unwrap();
            assert!(
                o.status.success(),
                "tshark: {}",
                String::from_utf8_lossy(&o.stderr)
            );
            String::from_utf8(o.stdout).unwrap()
        };
        let bad = run("ip.checksum.status == \"Bad\" || tcp.checksum.status == \"Bad\" || udp.checksum.status == \"Bad\" || icmp.checksum.status == \"Bad\" || _ws.malformed || _ws.expert.severity == \"Error\"");
        assert_eq!(bad, "", "{name}: tshark finds errors in the output");
        let all = run("frame");
        let n = pcap::read_file(&out, &ReadOptions::default())
            .unwrap()
            .records
            .len();
        assert_eq!(all.lines().count(), n, "{name}: tshark read\n{all}");
        // Checksums were really checked: the complete TCP/UDP records say "Good".
        let good = run("ip.checksum.status == \"Good\"");
        assert!(good.lines().count() > 0, "{name}");
        let _ = std::fs::remove_file(&out);
    }
}
