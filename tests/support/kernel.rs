//! # The kernel lab: scenarios run against the real Linux kernel, for differential tests
//!
//! nfsim claims to behave like Linux netfilter and conntrack. This module runs the same kind of
//! scenario on the real kernel, in a private network namespace, and hands back what the kernel
//! did, as text the real tools printed, so a test can compare it with nfsim's pipeline.
//!
//! Include it from an integration test with
//! `#[path = "support/kernel.rs"] mod kernel;` and start every test with
//!
//! ```ignore
//! let Some(lab) = kernel::lab_or_skip("my_test") else { return };
//! ```
//!
//! which prints `skipped: my_test: <reason>` to stderr (and records it for the line naming
//! every skipped comparison at the end of `cargo test --workspace`) and
//! lets the test pass where the lab cannot run: not root, no `unshare`, `ip`,
//! `iptables-restore`, `iptables-save`, `conntrack`, `nft` or `python3`, or `unshare -n`
//! refused. Set `NFSIM_REQUIRE_KERNEL_LAB=1` to make that
//! a failure instead (for a CI machine that must run them), `NFSIM_SKIP_KERNEL_LAB=1` to skip
//! on purpose.
//!
//! ## Building a scenario
//!
//! [`Scenario`] is a builder; steps run in the order they are added.
//!
//! ```ignore
//! let run = lab.run(
//!     &Scenario::new()
//!         .sysctl("net.netfilter.nf_conntrack_udp_timeout", "3")
//!         .rules(RESTORE_TEXT)                        // iptables-restore, before any step
//!         .udp_listen("127.0.0.2:5353", true)         // a UDP server that answers
//!         .udp_send("q1", "127.0.0.1:40004", "127.96.0.10:53")
//!         .conntrack("after-q1", &["-L"])             // `conntrack -L`, captured
//!         .sleep_ms(2500)
//!         .iptables_save("counters"),                 // `iptables-save -c`, captured
//! )?;
//! run.udp("q1").reply.as_ref().unwrap().server;       // "127.0.0.2:5353": who answered
//! run.conntrack_entries("after-q1");                  // parsed `conntrack -L` lines
//! run.event_lines();                                  // `conntrack -E` lines, in order
//! ```
//!
//! Setup, in this order: `lo` up, extra addresses on `lo` ([`Scenario::address`]; all of
//! 127.0.0.0/8 is local on `lo` anyway), sysctls ([`Scenario::sysctl`]; the conntrack timeouts
//! are per namespace), conntrack turned on ([`Scenario::enable_conntrack`], default on: a new
//! namespace tracks nothing until some rule needs conntrack, so the lab adds an nft table of
//! its own, `inet nfsim_lab`, which iptables-save does not show), `conntrack -E` started and
//! proven subscribed (a sentinel flow from 127.255.255.254, filtered out of the results),
//! the initial ruleset ([`Scenario::rules`], with `iptables-restore`), frame capture on `lo`
//! ([`Scenario::capture`]). A failure in setup fails the run with the tool's message.
//!
//! Steps:
//!
//! - [`Scenario::udp_listen`] / [`Scenario::udp_close`]: a UDP server on `ip:port`; with
//!   `answer` it replies to each datagram with `"<its own address>|<datagram>"`.
//! - [`Scenario::udp_send`]: one datagram from `ip:port` (the socket is kept and reused for
//!   every later send from the same address, as a fixed-port client does) to `ip:port`; waits
//!   up to 200 ms ([`Scenario::udp_send_wait`] to choose) for the answer. The result
//!   ([`UdpExchange`]) says where the reply came from (the service address, after un-DNAT) and
//!   which server sent it (the endpoint the kernel picked).
//! - [`Scenario::tcp_listen`], [`Scenario::tcp_connect`], [`Scenario::tcp_send`],
//!   [`Scenario::tcp_close`], [`Scenario::tcp_reset`], [`Scenario::tcp_close_server`]: TCP
//!   servers (answering reads like UDP servers; closing when the client closes, or staying
//!   half-open) and clients named by an id.
//! - [`Scenario::sleep_ms`]: wall-clock pause (servers keep answering).
//! - [`Scenario::conntrack`], [`Scenario::iptables_save`], [`Scenario::iptables_restore`],
//!   [`Scenario::command`]: run a tool inside the namespace and keep its exit code, stdout
//!   and stderr ([`CommandOutput`]).
//! - [`Scenario::mark`]: just a labelled instant, to line events up with.
//! - [`Scenario::inject`]: a raw IPv4 packet ([`RawPacket`]) written into a TUN link
//!   ([`Scenario::tun`], with [`Scenario::route`]s), so the kernel receives it on that link as
//!   a node receives a pod's or the network's packet (PREROUTING, then FORWARD or INPUT);
//!   what the kernel sends out of the links meanwhile is kept ([`Injected`]). An injected
//!   packet can answer what an earlier one made the kernel send (`reply_to`), whatever NAT
//!   chose.
//!
//! Every step result carries its start and end time in milliseconds since the driver started;
//! events ([`CtEvent`]), what servers saw ([`ServerSaw`], the peer address after SNAT) and
//! captured frames ([`Frame`], parsed with `sim_core::wire`, or written as a pcap with
//! [`LabRun::frames_pcap`]) carry the same clock.
//!
//! ## Safety
//!
//! Only loopback addresses are accepted in a scenario's sockets and `lo` addresses (127.0.0.0/8,
//! ::1): [`Lab::run`] refuses anything else before starting. The namespace has no interface
//! but `lo` and the scenario's TUN links, whose other end is a file descriptor the driver
//! holds: a packet the kernel routes out of a TUN link is read by the driver and goes nowhere
//! else, so nothing the namespace sends can leave it, whatever the rules or the injected
//! packets' addresses say. The driver (a Python
//! script, `kernel_driver.py` beside this file, run as `unshare -n python3 -c`) and the tools
//! it starts die with it, and a run is killed after its time limit.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

// A test binary that includes both tools.rs and kernel.rs compiles skips.rs twice; both
// copies only append to the run's record file, so that is harmless.
#[allow(clippy::duplicate_mod)]
#[path = "skips.rs"]
mod skips;

/// Set to a non-empty value to make an unavailable lab a test failure.
pub const REQUIRE_ENV: &str = "NFSIM_REQUIRE_KERNEL_LAB";
/// Set to a non-empty value to skip lab tests on purpose.
pub const SKIP_ENV: &str = "NFSIM_SKIP_KERNEL_LAB";

/// The Python driver run inside the namespace.
const DRIVER: &str = include_str!("kernel_driver.py");

/// A machine where the lab can run, with the versions of what it runs.
#[derive(Clone, Debug)]
pub struct Lab {
    /// `uname -r`.
    pub kernel: String,
    /// `iptables --version`.
    pub iptables: String,
    /// `conntrack --version`.
    pub conntrack: String,
    python: PathBuf,
}

fn env_set(name: &str) -> bool {
    std::env::var_os(name).is_some_and(|v| !v.is_empty())
}

#[path = "tools.rs"]
pub mod tools;

use tools::find as find_in_path;

fn first_line(out: &std::process::Output) -> String {
    let text = if out.stdout.is_empty() {
        &out.stderr
    } else {
        &out.stdout
    };
    String::from_utf8_lossy(text)
        .lines()
        .next()
        .unwrap_or("")
        .trim()
        .to_string()
}

fn detect() -> Result<Lab, String> {
    const TOOLS: [&str; 7] = [
        "unshare",
        "ip",
        "iptables",
        "iptables-restore",
        "iptables-save",
        "conntrack",
        "nft",
    ];
    if let Some(reason) = tools::why_not(&TOOLS) {
        return Err(reason);
    }
    let mut tools = BTreeMap::new();
    for tool in TOOLS {
        tools.insert(tool, find_in_path(tool).expect("checked by why_not"));
    }
    let python = ["/usr/bin/python3"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.is_file())
        .or_else(|| find_in_path("python3"))
        .ok_or("`python3` not found")?;
    let probe = Command::new(&tools["unshare"])
        .args([
            "-n",
            "sh",
            "-c",
            "ip link set lo up && iptables-save >/dev/null && conntrack -L >/dev/null 2>&1 && nft list ruleset >/dev/null",
        ])
        .output()
        .map_err(|e| format!("cannot run unshare: {e}"))?;
    if !probe.status.success() {
        return Err(format!(
            "`unshare -n` with ip/iptables-save/conntrack/nft inside failed ({}): {}",
            probe.status,
            String::from_utf8_lossy(&probe.stderr).trim()
        ));
    }
    let version = |tool: &str| {
        Command::new(&tools[tool])
            .arg("--version")
            .output()
            .map(|o| first_line(&o))
            .unwrap_or_default()
    };
    Ok(Lab {
        kernel: std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .unwrap_or_default()
            .trim()
            .to_string(),
        iptables: version("iptables"),
        conntrack: version("conntrack"),
        python,
    })
}

/// The lab, or why it cannot run here (detected once per test binary).
pub fn lab() -> Result<Lab, String> {
    static LAB: OnceLock<Result<Lab, String>> = OnceLock::new();
    LAB.get_or_init(detect).clone()
}

/// The lab; or, where it cannot run, prints `skipped: <test>: <reason>` to stderr and returns
/// `None` (panics instead when `NFSIM_REQUIRE_KERNEL_LAB` is set).
pub fn lab_or_skip(test: &str) -> Option<Lab> {
    lab_with_or_skip(test, &[], &[])
}

/// [`lab_or_skip`] for a test that also runs the programs `programs` inside the namespace
/// (`sysctl`, `grep`, …) and needs the files `paths` (`/dev/net/tun` for TUN links).
pub fn lab_with_or_skip(test: &str, programs: &[&str], paths: &[&str]) -> Option<Lab> {
    let why = lab()
        .err()
        .or_else(|| tools::why_not_programs(programs))
        .or_else(|| {
            paths
                .iter()
                .find(|p| !Path::new(p).exists())
                .map(|p| format!("{p} missing"))
        });
    match why {
        None => {
            skips::ran(test);
            lab().ok()
        }
        Some(reason) => {
            if env_set(REQUIRE_ENV) && !env_set(SKIP_ENV) {
                panic!(
                    "{test}: the kernel lab is required ({REQUIRE_ENV}) but cannot run: {reason}"
                );
            }
            skips::report(test, &reason);
            None
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Scenarios
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Debug, Serialize)]
struct Setup {
    addresses: Vec<String>,
    sysctls: Vec<(String, String)>,
    enable_conntrack: bool,
    events: bool,
    capture: bool,
    rules: Option<String>,
    rules6: Option<String>,
    tuns: Vec<Tun>,
    routes: Vec<String>,
}

/// A TUN link of the namespace: the driver holds its file descriptor, so what the kernel
/// routes out of it is read by the driver and goes nowhere else.
#[derive(Clone, Debug, Serialize)]
struct Tun {
    name: String,
    addrs: Vec<String>,
}

/// A raw IPv4 or IPv6 packet (by its addresses) for [`Scenario::inject`], built by the driver
/// (checksums included).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RawPacket {
    /// `tcp`, `udp` or `icmp`.
    pub proto: String,
    /// Source address (replaced under `reply_to`).
    pub src: String,
    /// Destination address (replaced under `reply_to`).
    pub dst: String,
    /// TCP/UDP source port.
    pub sport: u16,
    /// TCP/UDP destination port.
    pub dport: u16,
    /// TCP flags, `S`, `SA`, `PA`, `FA`, `R`, `A`… (default `S`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flags: Option<String>,
    /// TCP sequence number.
    pub seq: u32,
    /// TCP acknowledgement number.
    pub ack: u32,
    /// ICMP type (default 8, echo request).
    #[serde(rename = "type", skip_serializing_if = "Option::is_none")]
    pub icmp_type: Option<u8>,
    /// ICMP echo identifier.
    pub icmp_id: u16,
    /// ICMP echo sequence number.
    pub icmp_seq: u16,
    /// Payload length in bytes.
    pub len: u16,
    /// TTL / hop limit (default 64).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ttl: Option<u8>,
    /// ICMP code (default 0).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<u8>,
    /// For an ICMPv6 error: the label of an earlier inject step whose first emitted packet
    /// the error quotes (after 4 unused bytes, as much as fits in 1280 bytes), in place of
    /// an id, a sequence and a payload.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quote: Option<String>,
    /// IPv6 extension headers between the IPv6 header and layer 4, by number, in order: 0
    /// (hop-by-hop options) and 60 (destination options), each 8 bytes of padding (PadN).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ext: Vec<u8>,
}

#[derive(Clone, Debug, Serialize)]
#[serde(tag = "op", rename_all = "snake_case")]
enum Step {
    UdpListen {
        addr: String,
        answer: bool,
    },
    UdpClose {
        addr: String,
    },
    UdpSend {
        label: String,
        from: Option<String>,
        to: String,
        payload: Option<String>,
        wait_ms: u64,
    },
    TcpListen {
        addr: String,
        close_on_eof: bool,
    },
    TcpConnect {
        label: String,
        id: String,
        from: Option<String>,
        to: String,
        payload: Option<String>,
        wait_ms: u64,
    },
    TcpSend {
        label: String,
        id: String,
        payload: String,
        wait_ms: u64,
    },
    TcpClose {
        id: String,
        rst: bool,
        wait_ms: u64,
    },
    TcpCloseServer {
        addr: String,
        wait_ms: u64,
    },
    Sleep {
        ms: u64,
    },
    Command {
        label: String,
        argv: Vec<String>,
        stdin: Option<String>,
    },
    Mark {
        label: String,
    },
    Inject {
        label: String,
        dev: String,
        packet: RawPacket,
        reply_to: Option<String>,
        wait_ms: u64,
    },
}

impl Step {
    /// Upper bound of the time the step may take, for the run's time limit.
    fn budget_ms(&self) -> u64 {
        match self {
            Step::UdpSend { wait_ms, .. }
            | Step::TcpSend { wait_ms, .. }
            | Step::TcpClose { wait_ms, .. }
            | Step::TcpCloseServer { wait_ms, .. }
            | Step::Inject { wait_ms, .. } => *wait_ms,
            Step::TcpConnect { wait_ms, .. } => 2 * wait_ms,
            Step::Sleep { ms } => *ms,
            Step::Command { .. } => 5_000,
            _ => 10,
        }
    }

    /// Socket addresses the step names.
    fn addresses(&self) -> Vec<&str> {
        match self {
            Step::UdpListen { addr, .. }
            | Step::UdpClose { addr }
            | Step::TcpListen { addr, .. }
            | Step::TcpCloseServer { addr, .. } => vec![addr],
            Step::UdpSend { from, to, .. } | Step::TcpConnect { from, to, .. } => {
                let mut v = vec![to.as_str()];
                v.extend(from.as_deref());
                v
            }
            _ => vec![],
        }
    }
}

/// What to run in the namespace (see the module documentation).
#[derive(Clone, Debug, Serialize)]
pub struct Scenario {
    setup: Setup,
    steps: Vec<Step>,
}

impl Default for Scenario {
    fn default() -> Self {
        Scenario::new()
    }
}

/// Default wait for an answer.
pub const DEFAULT_WAIT_MS: u64 = 200;

impl Scenario {
    /// `lo` up, conntrack on, `conntrack -E` recorded, no rules, no capture, no step.
    pub fn new() -> Scenario {
        Scenario {
            setup: Setup {
                addresses: vec![],
                sysctls: vec![],
                enable_conntrack: true,
                events: true,
                capture: false,
                rules: None,
                rules6: None,
                tuns: vec![],
                routes: vec![],
            },
            steps: vec![],
        }
    }

    fn step(mut self, s: Step) -> Scenario {
        self.steps.push(s);
        self
    }

    /// Adds an address to `lo` (`ip addr add`; /32 or /128 unless a prefix is given).
    pub fn address(mut self, addr: &str) -> Scenario {
        self.setup.addresses.push(addr.to_string());
        self
    }

    /// Sets a sysctl in the namespace before anything runs (`sysctl -w key=value`).
    pub fn sysctl(mut self, key: &str, value: &str) -> Scenario {
        self.setup
            .sysctls
            .push((key.to_string(), value.to_string()));
        self
    }

    /// Loads `restore_text` with `iptables-restore` during setup (a failure fails the run).
    pub fn rules(mut self, restore_text: &str) -> Scenario {
        self.setup.rules = Some(restore_text.to_string());
        self
    }

    /// Loads `restore_text` with `ip6tables-restore` during setup, right after the IPv4 rules
    /// (a failure fails the run). A test using it checks for `ip6tables-restore` with
    /// [`lab_with_or_skip`].
    pub fn rules6(mut self, restore_text: &str) -> Scenario {
        self.setup.rules6 = Some(restore_text.to_string());
        self
    }

    /// Whether to turn conntrack on with the lab's own nft table (default on). Off, only the
    /// rules decide whether the namespace tracks connections.
    pub fn enable_conntrack(mut self, on: bool) -> Scenario {
        self.setup.enable_conntrack = on;
        self
    }

    /// Whether to record `conntrack -E` (default on).
    pub fn events(mut self, on: bool) -> Scenario {
        self.setup.events = on;
        self
    }

    /// Whether to capture the frames on `lo` (default off).
    pub fn capture(mut self, on: bool) -> Scenario {
        self.setup.capture = on;
        self
    }

    /// A UDP server at `addr`; with `answer`, it replies to every datagram.
    pub fn udp_listen(self, addr: &str, answer: bool) -> Scenario {
        self.step(Step::UdpListen {
            addr: addr.into(),
            answer,
        })
    }

    /// Closes the UDP server at `addr` (later datagrams to it draw ICMP port unreachable).
    pub fn udp_close(self, addr: &str) -> Scenario {
        self.step(Step::UdpClose { addr: addr.into() })
    }

    /// Sends one datagram from `from` to `to` and waits up to 200 ms for the answer.
    pub fn udp_send(self, label: &str, from: &str, to: &str) -> Scenario {
        self.udp_send_wait(label, Some(from), to, DEFAULT_WAIT_MS)
    }

    /// [`Scenario::udp_send`] with the source port left to the kernel (`from` None; a new
    /// socket each time) and the wait chosen.
    pub fn udp_send_wait(
        self,
        label: &str,
        from: Option<&str>,
        to: &str,
        wait_ms: u64,
    ) -> Scenario {
        self.step(Step::UdpSend {
            label: label.into(),
            from: from.map(Into::into),
            to: to.into(),
            payload: None,
            wait_ms,
        })
    }

    /// A TCP server at `addr`, answering every read; it closes a connection when the client
    /// does if `close_on_eof`, else keeps it half-open until [`Scenario::tcp_close_server`].
    pub fn tcp_listen(self, addr: &str, close_on_eof: bool) -> Scenario {
        self.step(Step::TcpListen {
            addr: addr.into(),
            close_on_eof,
        })
    }

    /// Connects client `id` (from `from`, or a kernel-chosen port) to `to`, waiting up to
    /// 500 ms; then, with `payload`, sends it and waits for the answer.
    pub fn tcp_connect(
        self,
        label: &str,
        id: &str,
        from: Option<&str>,
        to: &str,
        payload: Option<&str>,
    ) -> Scenario {
        self.step(Step::TcpConnect {
            label: label.into(),
            id: id.into(),
            from: from.map(Into::into),
            to: to.into(),
            payload: payload.map(Into::into),
            wait_ms: 500,
        })
    }

    /// Sends `payload` on client `id` and waits up to 200 ms for the answer.
    pub fn tcp_send(self, label: &str, id: &str, payload: &str) -> Scenario {
        self.step(Step::TcpSend {
            label: label.into(),
            id: id.into(),
            payload: payload.into(),
            wait_ms: DEFAULT_WAIT_MS,
        })
    }

    /// Closes client `id` (FIN), then serves sockets for 100 ms so the close completes (the
    /// server's delayed ACK takes ~40 ms).
    pub fn tcp_close(self, id: &str) -> Scenario {
        self.step(Step::TcpClose {
            id: id.into(),
            rst: false,
            wait_ms: 100,
        })
    }

    /// Aborts client `id` with a RST (`SO_LINGER` 0), then serves sockets for 100 ms.
    pub fn tcp_reset(self, id: &str) -> Scenario {
        self.step(Step::TcpClose {
            id: id.into(),
            rst: true,
            wait_ms: 100,
        })
    }

    /// Closes every connection the server at `addr` accepted, then serves sockets for 100 ms.
    pub fn tcp_close_server(self, addr: &str) -> Scenario {
        self.step(Step::TcpCloseServer {
            addr: addr.into(),
            wait_ms: 100,
        })
    }

    /// Waits `ms` milliseconds of wall-clock time, servers answering meanwhile.
    pub fn sleep_ms(self, ms: u64) -> Scenario {
        self.step(Step::Sleep { ms })
    }

    /// Runs `conntrack ARGS` (e.g. `["-L"]`, `["-D", "-p", "udp"]`, `["-S"]`).
    pub fn conntrack(self, label: &str, args: &[&str]) -> Scenario {
        let mut argv = vec!["conntrack"];
        argv.extend_from_slice(args);
        self.command(label, &argv, None)
    }

    /// Runs `iptables-save -c`.
    pub fn iptables_save(self, label: &str) -> Scenario {
        self.command(label, &["iptables-save", "-c"], None)
    }

    /// Runs `iptables-restore [--noflush]` with `text` on stdin (its exit code is kept, not
    /// checked: a failing restore is a result too).
    pub fn iptables_restore(self, label: &str, text: &str, noflush: bool) -> Scenario {
        let argv: &[&str] = if noflush {
            &["iptables-restore", "--noflush"]
        } else {
            &["iptables-restore"]
        };
        self.command(label, argv, Some(text))
    }

    /// Runs any command inside the namespace.
    pub fn command(self, label: &str, argv: &[&str], stdin: Option<&str>) -> Scenario {
        self.step(Step::Command {
            label: label.into(),
            argv: argv.iter().map(|s| s.to_string()).collect(),
            stdin: stdin.map(Into::into),
        })
    }

    /// A TUN link `name` holding `addrs` (`192.168.0.12/24`, `fd00::1/64`), up, created during
    /// setup after the sysctls (so `net.ipv6.conf.default.disable_ipv6=1` keeps it
    /// IPv4-only). A link given an IPv6 address gets no address of its own making
    /// (`addrgenmode none`: no link-local one nfsim would not know of), and its IPv6
    /// addresses are added `nodad` (a TUN link does no duplicate address detection anyway).
    pub fn tun(mut self, name: &str, addrs: &[&str]) -> Scenario {
        self.setup.tuns.push(Tun {
            name: name.into(),
            addrs: addrs.iter().map(|a| a.to_string()).collect(),
        });
        self
    }

    /// A route added after the TUN links (`ip route add ROUTE`: `default via 192.168.0.1`).
    pub fn route(mut self, route: &str) -> Scenario {
        self.setup.routes.push(route.into());
        self
    }

    /// Writes `packet` into TUN link `dev`: the kernel receives it on that link (PREROUTING).
    /// Then serves the links for `wait_ms`, recording what the kernel sent out of any of them
    /// ([`Injected`]). With `reply_to` (the label of an earlier inject step), the packet
    /// answers the first packet that step made the kernel send: its addresses and ports are
    /// that packet's, swapped, and it enters on the link that packet left by.
    pub fn inject(
        self,
        label: &str,
        dev: &str,
        packet: RawPacket,
        reply_to: Option<&str>,
        wait_ms: u64,
    ) -> Scenario {
        self.step(Step::Inject {
            label: label.into(),
            dev: dev.into(),
            packet,
            reply_to: reply_to.map(Into::into),
            wait_ms,
        })
    }

    /// A labelled instant.
    pub fn mark(self, label: &str) -> Scenario {
        self.step(Step::Mark {
            label: label.into(),
        })
    }

    /// Checks that every address is a loopback one ([`Lab::run`] does this first), and that
    /// injected packets go into a TUN link of the scenario (their addresses stay inside it).
    pub fn check_loopback(&self) -> Result<(), LabError> {
        let bad = |what: String| Err(LabError::NotLoopback { what });
        for (i, s) in self.steps.iter().enumerate() {
            if let Step::Inject { dev, .. } = s {
                if !self.setup.tuns.iter().any(|t| &t.name == dev) {
                    return bad(format!(
                        "step {i}: inject into {dev:?}, not a TUN link of the scenario"
                    ));
                }
            }
        }
        for a in &self.setup.addresses {
            let ip = a.split('/').next().unwrap_or("");
            match ip.parse::<IpAddr>() {
                Ok(ip) if ip.is_loopback() => {}
                _ => return bad(format!("address {a:?}")),
            }
        }
        for (i, s) in self.steps.iter().enumerate() {
            for a in s.addresses() {
                match a.parse::<std::net::SocketAddr>() {
                    Ok(sa) if sa.ip().is_loopback() => {}
                    Ok(_) => return bad(format!("step {i}: {a:?}")),
                    Err(_) => {
                        return bad(format!(
                            "step {i}: {a:?} is not ip:port (IPv6 as [addr]:port)"
                        ))
                    }
                }
            }
        }
        Ok(())
    }

    fn time_limit(&self) -> Duration {
        let steps: u64 = self.steps.iter().map(Step::budget_ms).sum();
        Duration::from_millis(steps + 30_000)
    }
}

// ---------------------------------------------------------------------------------------------
// Results
// ---------------------------------------------------------------------------------------------

/// Why a lab run failed.
#[derive(Debug, thiserror::Error)]
pub enum LabError {
    /// A scenario named an address outside 127.0.0.0/8 and ::1.
    #[error("the kernel lab only uses loopback addresses (127.0.0.0/8, ::1); refusing {what}")]
    NotLoopback {
        /// The offending address.
        what: String,
    },
    /// The driver could not be started.
    #[error("cannot start `unshare -n python3`: {0}")]
    Spawn(#[source] std::io::Error),
    /// The run took longer than its limit and was killed.
    #[error("the lab run took longer than {limit:?} and was killed; driver stderr: {stderr}")]
    Timeout {
        /// The limit.
        limit: Duration,
        /// What the driver printed on stderr.
        stderr: String,
    },
    /// Setup or a step failed inside the namespace (the tool's message is in `error`).
    #[error("lab run failed: {error}")]
    Driver {
        /// What failed.
        error: String,
        /// What was recorded until then.
        partial: Box<LabRun>,
    },
    /// The driver's output is not what this module expects.
    #[error("the lab driver printed no result ({reason}); stderr: {stderr}; stdout: {stdout}")]
    BadOutput {
        /// Why it could not be read.
        reason: String,
        /// Its stdout.
        stdout: String,
        /// Its stderr.
        stderr: String,
    },
}

/// A command's exit code and output.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
pub struct CommandOutput {
    /// The command line.
    pub argv: Vec<String>,
    /// Exit code.
    pub rc: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

/// An answer a client received.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Reply {
    /// When it arrived.
    pub at_ms: f64,
    /// Its source address as the client saw it (UDP; `None` for TCP, where it is the
    /// connection's peer).
    pub from: Option<String>,
    /// The server that sent it (its bound address: the endpoint, after DNAT).
    pub server: String,
    /// The whole answer, `"<server>|<request>"`.
    pub payload: String,
}

/// One UDP datagram sent, and its answer.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct UdpExchange {
    /// The client's address (`None` if sending failed from a kernel-chosen port).
    pub from: Option<String>,
    /// Where it was sent.
    pub to: String,
    /// The datagram.
    pub payload: String,
    /// When it was sent.
    pub sent_at_ms: f64,
    /// `sendto` failure (errno name), if any.
    pub error: Option<String>,
    /// The answer, if one came within the wait.
    pub reply: Option<Reply>,
}

/// A TCP connect or send, and its answer.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct TcpExchange {
    /// The client id.
    pub id: String,
    /// The client's address.
    pub local: String,
    /// Where it connected (connect steps).
    pub to: Option<String>,
    /// Whether the connection is established.
    pub connected: bool,
    /// `ECONNREFUSED`, `timeout`, `ECONNRESET`, …
    pub error: Option<String>,
    /// The answer to the payload, if one came.
    pub reply: Option<Reply>,
}

/// The result of one step.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct StepResult {
    /// Position in the scenario.
    pub index: usize,
    /// The step kind (`udp_send`, `command`, …).
    pub op: String,
    /// Its label, for steps that have one.
    pub label: Option<String>,
    /// When it started (ms since the driver started).
    pub at_ms: f64,
    /// When it ended.
    pub end_ms: f64,
    /// For commands.
    pub command: Option<CommandOutput>,
    /// For `udp_send`.
    pub udp: Option<UdpExchange>,
    /// For `tcp_connect` and `tcp_send`.
    pub tcp: Option<TcpExchange>,
    /// For `inject`.
    pub inject: Option<Injected>,
}

/// A packet written into a TUN link, and what the kernel sent out of the links meanwhile.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Injected {
    /// The link it entered by.
    pub dev: String,
    /// When it was written (ms since the driver started).
    pub at_ms: f64,
    /// Its bytes, in hex.
    pub hex: String,
    /// What left the links during the step's wait, in order.
    pub emitted: Vec<EmittedPacket>,
}

/// A packet the kernel sent out of a TUN link.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct EmittedPacket {
    /// The link.
    pub dev: String,
    /// When the driver read it.
    pub at_ms: f64,
    /// Its bytes, in hex.
    pub hex: String,
}

impl Injected {
    /// The bytes written.
    pub fn bytes(&self) -> Vec<u8> {
        unhex(&self.hex).unwrap_or_default()
    }
}

impl EmittedPacket {
    /// The bytes the kernel sent.
    pub fn bytes(&self) -> Vec<u8> {
        unhex(&self.hex).unwrap_or_default()
    }
}

/// One `conntrack -E` line.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct CtEvent {
    /// When conntrack received it (ms since the driver started), if its timestamp was read.
    pub at_ms: Option<f64>,
    /// The line as `conntrack -E` prints it (`    [NEW] udp      17 30 src=…`).
    pub line: String,
}

/// Something a server saw.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct ServerSaw {
    /// When.
    pub at_ms: f64,
    /// `udp` or `tcp`.
    pub proto: String,
    /// The server's address.
    pub server: String,
    /// The peer's address as the server saw it (after SNAT).
    pub peer: String,
    /// `datagram`, `accept`, `data`, `eof` or `reset`.
    pub event: String,
    /// What was read.
    pub payload: Option<String>,
}

/// A frame captured on `lo` (Ethernet header with zero MACs, as lo has).
#[derive(Clone, Debug, PartialEq)]
pub struct Frame {
    /// When the kernel queued it on `lo` (its `SO_TIMESTAMPNS` stamp, on the events' clock:
    /// wall time since the driver started), or when it was read if no stamp came with it.
    pub at_ms: f64,
    /// The bytes.
    pub bytes: Vec<u8>,
}

#[derive(Deserialize)]
struct RawFrame {
    at_ms: f64,
    hex: String,
}

#[derive(Deserialize)]
struct RawRun {
    ok: bool,
    error: Option<String>,
    setup: Vec<CommandOutput>,
    steps: Vec<StepResult>,
    events: Vec<CtEvent>,
    received: Vec<ServerSaw>,
    frames: Vec<RawFrame>,
}

/// What the kernel did in one run.
#[derive(Clone, Debug, PartialEq)]
pub struct LabRun {
    /// The setup commands and their output.
    pub setup: Vec<CommandOutput>,
    /// One result per step, in order.
    pub steps: Vec<StepResult>,
    /// `conntrack -E` lines, in order (sentinel lines removed).
    pub events: Vec<CtEvent>,
    /// What the servers saw, in order.
    pub received: Vec<ServerSaw>,
    /// Frames captured on `lo`, if capture was on.
    pub frames: Vec<Frame>,
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if s.len() % 2 != 0 {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(s.get(i..i + 2)?, 16).ok())
        .collect()
}

impl LabRun {
    /// The step labelled `label`. Panics (listing the labels) if there is none.
    pub fn step(&self, label: &str) -> &StepResult {
        self.steps
            .iter()
            .find(|s| s.label.as_deref() == Some(label))
            .unwrap_or_else(|| {
                let labels: Vec<_> = self.steps.iter().filter_map(|s| s.label.clone()).collect();
                panic!("no step labelled {label:?}; labels: {labels:?}")
            })
    }

    /// The output of the command step `label`.
    pub fn output(&self, label: &str) -> &CommandOutput {
        self.step(label)
            .command
            .as_ref()
            .unwrap_or_else(|| panic!("step {label:?} is not a command"))
    }

    /// The exchange of the `udp_send` step `label`.
    pub fn udp(&self, label: &str) -> &UdpExchange {
        self.step(label)
            .udp
            .as_ref()
            .unwrap_or_else(|| panic!("step {label:?} is not a udp_send"))
    }

    /// The result of the `inject` step `label`.
    pub fn injected(&self, label: &str) -> &Injected {
        self.step(label)
            .inject
            .as_ref()
            .unwrap_or_else(|| panic!("step {label:?} is not an inject"))
    }

    /// The exchange of the `tcp_connect`/`tcp_send` step `label`.
    pub fn tcp(&self, label: &str) -> &TcpExchange {
        self.step(label)
            .tcp
            .as_ref()
            .unwrap_or_else(|| panic!("step {label:?} is not a tcp_connect or tcp_send"))
    }

    /// The entries a `conntrack -L` step printed, parsed.
    pub fn conntrack_entries(&self, label: &str) -> Vec<CtEntry> {
        self.output(label)
            .stdout
            .lines()
            .filter_map(parse_ct_line)
            .collect()
    }

    /// The `conntrack -E` lines, in order.
    pub fn event_lines(&self) -> Vec<&str> {
        self.events.iter().map(|e| e.line.as_str()).collect()
    }

    /// The `conntrack -E` lines, parsed.
    pub fn event_entries(&self) -> Vec<CtEntry> {
        self.events
            .iter()
            .filter_map(|e| parse_ct_line(&e.line))
            .collect()
    }

    /// What the server at `server` saw.
    pub fn received_by(&self, server: &str) -> Vec<&ServerSaw> {
        self.received
            .iter()
            .filter(|r| r.server == server)
            .collect()
    }

    /// The captured frames as a pcap file (Ethernet link type), times in ms since the driver
    /// started, written with `sim_core::pcap`.
    pub fn frames_pcap(&self) -> Vec<u8> {
        let link = sim_core::pcap::WriteLink::Ethernet {
            src_mac: [0; 6],
            dst_mac: [0; 6],
        };
        let mut w = sim_core::pcap::PcapWriter::new(Vec::new(), link)
            .expect("writing to a Vec cannot fail");
        for f in &self.frames {
            let at = sim_core::SimTime::from_nanos((f.at_ms * 1e6) as u64);
            w.write_frame(at, &f.bytes)
                .expect("frames captured on lo fit the snap length");
        }
        w.into_inner()
    }
}

impl Lab {
    /// Runs `scenario` in a fresh private network namespace.
    pub fn run(&self, scenario: &Scenario) -> Result<LabRun, LabError> {
        // One lab run at a time: runs measure wall-clock behaviour (sleeps, waits for answers,
        // `conntrack -E` catching up), and several at once on a small machine skewed it enough
        // to make an event differ now and then (kernel_diff's TCP case failed in a few full runs,
        // never alone). Serialising them costs a few seconds.
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        scenario.check_loopback()?;
        let spec = serde_json::to_vec(scenario).map_err(|e| LabError::BadOutput {
            reason: format!("cannot encode the scenario: {e}"),
            stdout: String::new(),
            stderr: String::new(),
        })?;
        let limit = scenario.time_limit();
        let mut child = Command::new(find_in_path("unshare").unwrap_or_else(|| "unshare".into()))
            .arg("-n")
            .arg(&self.python)
            .arg("-c")
            .arg(DRIVER)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(LabError::Spawn)?;
        let mut stdin = child.stdin.take().expect("stdin is piped");
        let writer = std::thread::spawn(move || {
            let _ = stdin.write_all(&spec);
        });
        let mut out = child.stdout.take().expect("stdout is piped");
        let mut err = child.stderr.take().expect("stderr is piped");
        let out_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = out.read_to_string(&mut s);
            s
        });
        let err_reader = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = err.read_to_string(&mut s);
            s
        });
        let started = Instant::now();
        let timed_out = loop {
            match child.try_wait() {
                Ok(Some(_)) => break false,
                Ok(None) if started.elapsed() > limit => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break true;
                }
                Ok(None) => std::thread::sleep(Duration::from_millis(10)),
                Err(_) => break false,
            }
        };
        let _ = writer.join();
        let stdout = out_reader.join().unwrap_or_default();
        let stderr = err_reader.join().unwrap_or_default();
        if timed_out {
            return Err(LabError::Timeout { limit, stderr });
        }
        let raw: RawRun = serde_json::from_str(&stdout).map_err(|e| LabError::BadOutput {
            reason: e.to_string(),
            stdout: stdout.chars().take(2000).collect(),
            stderr: stderr.chars().take(4000).collect(),
        })?;
        let frames = raw
            .frames
            .into_iter()
            .filter_map(|f| {
                Some(Frame {
                    at_ms: f.at_ms,
                    bytes: unhex(&f.hex)?,
                })
            })
            .collect();
        let run = LabRun {
            setup: raw.setup,
            steps: raw.steps,
            events: raw.events,
            received: raw.received,
            frames,
        };
        if !raw.ok {
            return Err(LabError::Driver {
                error: raw.error.unwrap_or_else(|| "unknown error".into()),
                partial: Box::new(run),
            });
        }
        Ok(run)
    }
}

// ---------------------------------------------------------------------------------------------
// Reading conntrack and iptables-save text
// ---------------------------------------------------------------------------------------------

/// One direction's tuple of a conntrack line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtTuple {
    /// `src=`.
    pub src: String,
    /// `dst=`.
    pub dst: String,
    /// `sport=`, for protocols with ports.
    pub sport: Option<u16>,
    /// `dport=`, for protocols with ports.
    pub dport: Option<u16>,
    /// Other keys of the tuple (`type=`, `code=`, `id=` for ICMP), in order.
    pub other: Vec<(String, String)>,
}

/// A `conntrack -L` or `conntrack -E` line, taken apart.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CtEntry {
    /// `NEW`, `UPDATE` or `DESTROY` for an event line.
    pub event: Option<String>,
    /// `udp`, `tcp`, …
    pub proto: String,
    /// The protocol number.
    pub proto_num: u8,
    /// Seconds left (absent in a DESTROY of an expired entry).
    pub timeout_secs: Option<u64>,
    /// TCP (and SCTP, DCCP) state.
    pub state: Option<String>,
    /// The original-direction tuple.
    pub orig: CtTuple,
    /// The reply-direction tuple.
    pub reply: CtTuple,
    /// Bracketed flags in order, without brackets (`UNREPLIED`, `ASSURED`, `USERSPACE`, …).
    pub flags: Vec<String>,
    /// Keys after the tuples (`mark`, `use`, `portid`, `zone`, …), in order.
    pub extra: Vec<(String, String)>,
}

impl CtEntry {
    /// Whether `[UNREPLIED]` is shown.
    pub fn unreplied(&self) -> bool {
        self.flags.iter().any(|f| f == "UNREPLIED")
    }
    /// Whether `[ASSURED]` is shown.
    pub fn assured(&self) -> bool {
        self.flags.iter().any(|f| f == "ASSURED")
    }
    /// The value of an extra key (`mark`, `use`, …).
    pub fn extra(&self, key: &str) -> Option<&str> {
        self.extra
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }
}

/// Whether the seconds left in a `conntrack -E` event agree between the kernel (`kernel`)
/// and nfsim (`nfsim`). The kernel prints them when it builds the event, truncated
/// (`ctnetlink_dump_timeout`: `nf_ct_expires(ct) / HZ`), so a jiffy passing between the state
/// change and the event shows one second less: the kernel's are nfsim's or one below. A
/// DESTROY's may also be one above: an entry killed within the jiffy it was refreshed in
/// still shows its full timeout, where nfsim floors the exact time left.
#[allow(dead_code)] // not every test file that includes this module compares events
pub fn event_secs_agree(kernel: u64, nfsim: u64, destroy: bool) -> bool {
    kernel == nfsim || kernel + 1 == nfsim || (destroy && kernel == nfsim + 1)
}

/// Parses a line `conntrack -L` or `conntrack -E` prints (without `-o extended`, which adds the
/// family first: strip `ipv4     2 ` before calling). `None` for anything else (the
/// "N flow entries" summary, blank lines).
pub fn parse_ct_line(line: &str) -> Option<CtEntry> {
    let mut toks = line.split_whitespace().peekable();
    let mut e = CtEntry::default();
    if let Some(t) = toks.peek() {
        if t.starts_with('[') && t.ends_with(']') {
            e.event = Some(t.trim_matches(|c| c == '[' || c == ']').to_string());
            toks.next();
        }
    }
    e.proto = toks.next()?.to_string();
    e.proto_num = toks.next()?.parse().ok()?;
    if let Some(t) = toks.peek() {
        if let Ok(n) = t.parse::<u64>() {
            e.timeout_secs = Some(n);
            toks.next();
        }
    }
    if let Some(t) = toks.peek() {
        if !t.contains('=')
            && !t.starts_with('[')
            && t.chars()
                .all(|c| c.is_ascii_uppercase() || c == '_' || c.is_ascii_digit())
        {
            e.state = Some(t.to_string());
            toks.next();
        }
    }
    // 0: before any tuple, 1: original, 2: reply, 3: after the tuples. A tuple starts at
    // `src=`; a key that no tuple has (mark, use, portid, zone, …) ends the tuples.
    const TUPLE_KEYS: [&str; 9] = [
        "src", "dst", "sport", "dport", "type", "code", "id", "srckey", "dstkey",
    ];
    let mut part = 0;
    for t in toks {
        if t.starts_with('[') && t.ends_with(']') {
            e.flags
                .push(t.trim_matches(|c| c == '[' || c == ']').to_string());
            continue;
        }
        let (k, v) = t.split_once('=')?;
        if part < 3 {
            if k == "src" && part < 2 {
                part += 1;
            } else if !TUPLE_KEYS.contains(&k) || part == 0 {
                part = 3;
            }
        }
        let tuple = match part {
            1 => &mut e.orig,
            2 => &mut e.reply,
            _ => {
                e.extra.push((k.to_string(), v.to_string()));
                continue;
            }
        };
        match k {
            "src" => tuple.src = v.to_string(),
            "dst" => tuple.dst = v.to_string(),
            "sport" => tuple.sport = v.parse().ok(),
            "dport" => tuple.dport = v.parse().ok(),
            _ => tuple.other.push((k.to_string(), v.to_string())),
        }
    }
    if e.orig.src.is_empty() {
        return None;
    }
    Some(e)
}

/// The rules of `iptables-save` output without its `# Generated by` / `# Completed on` comment
/// lines (they carry the date), for comparing two saves.
pub fn iptables_save_rules(text: &str) -> String {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect()
}

/// Writes `bytes` to `path` (for keeping a run's pcap or dumps next to a failing test).
pub fn save(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, bytes)
}
