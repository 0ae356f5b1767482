//! Which real tools this machine has, for the tests that compare nfsim with them.
//!
//! A test that runs a real program (`iptables-restore`, `nfacct`, `tshark`, …) first asks
//! [`have_or_skip`] for every program it will call. Where one is missing, or where a private
//! network namespace cannot be made (not root, `unshare -n` refused), the test prints
//! `skipped: <test>: <tool> missing` (or the reason) to stderr and passes: the README's test
//! command must pass on a machine with only the Rust toolchain. Each skip is also recorded
//! ([`skips`]) for the one line that ends `cargo test --workspace` naming every comparison
//! skipped in the run (libtest hides a passing test's stderr). `.ci/run` installs the Debian
//! packages (iptables, conntrack, nftables, nfacct, tshark) where it can, so CI runs them.
//!
//! `NFSIM_REQUIRE_KERNEL_LAB=1` turns a skip into a failure (for a machine that must run them);
//! `NFSIM_SKIP_KERNEL_LAB=1` (or the older `NFSIM_SKIP_REAL_IPTABLES=1`) skips on purpose.

#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

// A test binary that includes both tools.rs and kernel.rs compiles skips.rs twice; both
// copies only append to the run's record file, so that is harmless.
#[allow(clippy::duplicate_mod)]
#[path = "skips.rs"]
pub mod skips;

/// Set to a non-empty value to make a missing tool a test failure.
pub const REQUIRE_ENV: &str = "NFSIM_REQUIRE_KERNEL_LAB";
/// Set to a non-empty value to skip the real-tool tests on purpose.
pub const SKIP_ENV: &str = "NFSIM_SKIP_KERNEL_LAB";
const SKIP_ENV_OLD: &str = "NFSIM_SKIP_REAL_IPTABLES";

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

/// The path of `tool` in PATH, or `None`. Only PATH counts: the scripts the tests run inside
/// the namespace find their programs through the same PATH, so a tool outside it (say in an
/// sbin directory a non-login PATH lacks) is missing for them too, and the test skips.
pub fn find(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}

fn uid() -> Option<u32> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("Uid:"))?;
    line.split_whitespace().nth(1)?.parse().ok()
}

/// Why the tools cannot run here: the first missing one, or why a private namespace cannot be
/// made; `None` when every tool is present and `unshare -n` works.
pub fn why_not(tools: &[&str]) -> Option<String> {
    if env_set(SKIP_ENV) {
        return Some(format!("{SKIP_ENV} is set"));
    }
    if env_set(SKIP_ENV_OLD) {
        return Some(format!("{SKIP_ENV_OLD} is set"));
    }
    // `unshare` first: every real-kernel test runs inside a private network namespace.
    let mut all = vec!["unshare"];
    all.extend(tools.iter().copied().filter(|t| *t != "unshare"));
    for tool in &all {
        if find(tool).is_none() {
            return Some(format!("{tool} missing"));
        }
    }
    match uid() {
        Some(0) => {}
        Some(u) => {
            return Some(format!(
                "not root (uid {u}): `unshare -n` needs CAP_SYS_ADMIN"
            ))
        }
        None => return Some("cannot read the uid from /proc/self/status".into()),
    }
    let ok = Command::new(find("unshare").expect("checked above"))
        .args(["-n", "true"])
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        return Some("`unshare -n true` failed: no private network namespace here".into());
    }
    None
}

/// True when every tool in `tools` (and `unshare -n`) can run here; otherwise prints
/// `skipped: <test>: <reason>` to stderr and returns false (panics instead when
/// `NFSIM_REQUIRE_KERNEL_LAB` is set).
pub fn have_or_skip(test: &str, tools: &[&str]) -> bool {
    match why_not(tools) {
        None => {
            skips::ran(test);
            true
        }
        Some(reason) => {
            if env_set(REQUIRE_ENV) && !env_set(SKIP_ENV) {
                panic!("{test}: the real tools are required ({REQUIRE_ENV}) but: {reason}");
            }
            skips::report(test, &reason);
            false
        }
    }
}

/// Why `tools` cannot run here, for programs that need neither root nor a network namespace
/// (a headless browser): the first one missing from PATH, or the skip variable.
pub fn why_not_programs(tools: &[&str]) -> Option<String> {
    if env_set(SKIP_ENV) {
        return Some(format!("{SKIP_ENV} is set"));
    }
    tools
        .iter()
        .find(|t| find(t).is_none())
        .map(|t| format!("{t} missing"))
}

/// Like [`have_or_skip`] for programs that run as any user outside a namespace: true when
/// every one is in PATH; otherwise prints `skipped: <test>: <tool> missing` and returns false
/// (panics instead when `NFSIM_REQUIRE_KERNEL_LAB` is set).
pub fn have_programs_or_skip(test: &str, tools: &[&str]) -> bool {
    match why_not_programs(tools) {
        None => {
            skips::ran(test);
            true
        }
        Some(reason) => {
            if env_set(REQUIRE_ENV) && !env_set(SKIP_ENV) {
                panic!("{test}: the real tools are required ({REQUIRE_ENV}) but: {reason}");
            }
            skips::report(test, &reason);
            false
        }
    }
}

/// The lines `tshark` prints for the frames of `file` that match the display `filter`, read
/// with checksum validation on for IPv4, UDP and TCP (tshark leaves it off by default).
/// Panics if tshark fails; callers have checked it is present.
pub fn tshark_matching(file: &std::path::Path, filter: &str) -> String {
    let o = std::process::Command::new(find("tshark").expect("tshark was checked for"))
        .args(["-n", "-r"])
        .arg(file)
        .args([
            "-o",
            "ip.check_checksum:TRUE",
            "-o",
            "udp.check_checksum:TRUE",
            "-o",
            "tcp.check_checksum:TRUE",
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
}

/// What the real `nft list table ip kube-proxy` prints after `nft -f` of each transaction in
/// `txs`, in order, in a private network namespace; `Err` with nft's words when it refused
/// one. Callers have checked for `nft` and `unshare`. Each call has its own directory (the
/// tests of one file run in parallel threads of one process).
pub fn real_nft_listing(txs: &[String]) -> Result<String, String> {
    real_nft_table_listing(txs, "ip kube-proxy")
}

/// As [`real_nft_listing`], listing `table` (`ip6 kube-proxy`, …).
pub fn real_nft_table_listing(txs: &[String], table: &str) -> Result<String, String> {
    static CALLS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let call = CALLS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("nfsim-nft-{}-{call}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut script = String::from("set -e\n");
    for (i, t) in txs.iter().enumerate() {
        let f = dir.join(format!("{i}.nft"));
        std::fs::write(&f, t).unwrap();
        script.push_str(&format!("nft -f {}\n", f.display()));
    }
    script.push_str(&format!("nft list table {table}\n"));
    let out = std::process::Command::new(find("unshare").expect("unshare was checked for"))
        .args(["-n", "sh", "-c", &script])
        .output()
        .unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).unwrap())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).into_owned())
    }
}

/// Runs `script` with `bash` in a private network namespace (`unshare -n`), `stdin` on its
/// standard input; whether it succeeded, and its standard output then error. Callers have
/// checked for `unshare`, `bash` and the programs the script calls.
pub fn in_private_netns(script: &str, stdin: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(find("unshare").expect("unshare was checked for"))
        .args(["-n", "bash", "-c", script])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
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
    (out.status.success(), text)
}
