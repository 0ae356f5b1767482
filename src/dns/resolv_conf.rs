//! `resolv.conf` as the two C libraries read it: glibc's `resolv/res_init.c`
//! (`res_vinit_1`, `res_setoptions`) and musl's `src/network/resolvconf.c`
//! (`__get_resolv_conf`). docs/resolver.md lists the words and their limits.

use std::net::IpAddr;

/// Which C library's stub resolver a client runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Libc {
    /// glibc (2.36 as checked here): `getaddrinfo` → `_nss_dns_gethostbyname4_r` →
    /// `res_nsearch` → `res_nsend`.
    Glibc,
    /// musl: `getaddrinfo` → `__lookup_name` → `name_from_dns_search` → `__res_msend_rc`.
    Musl {
        /// Whether a truncated UDP answer is retried over TCP: musl 1.2.4 and later
        /// (`res_msend.c` `start_tcp`); before it the truncated answer is used as it is.
        tcp_fallback: bool,
    },
}

/// glibc's `MAXNS` and musl's: at most three nameservers are used; later lines are ignored.
pub const MAXNS: usize = 3;

/// A parsed `resolv.conf`, with each library's defaults and limits applied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolvConf {
    /// `nameserver` lines, at most [`MAXNS`]; 127.0.0.1 when there is none (both libraries).
    pub nameservers: Vec<IpAddr>,
    /// `search` (or `domain`) list, in order; the last such line wins.
    pub search: Vec<String>,
    /// `options ndots:N` (default 1, at most 15).
    pub ndots: u8,
    /// `options timeout:N` in seconds (default 5; glibc caps at 30, musl at 60).
    pub timeout_secs: u8,
    /// `options attempts:N` (default 2; glibc caps at 5, musl at 10 and makes 0 one).
    pub attempts: u8,
    /// `options rotate` (glibc only).
    pub rotate: bool,
    /// `options single-request` (glibc only).
    pub single_request: bool,
    /// `options single-request-reopen` (glibc only).
    pub single_request_reopen: bool,
    /// `options use-vc` (glibc only): TCP for every query.
    pub use_vc: bool,
    /// `options edns0` (glibc only): an OPT record with UDP size 1200 on every query.
    pub edns0: bool,
    /// Words a library ignores that were written (musl ignores `rotate`, `edns0`, …), with
    /// their line, for a warning.
    pub ignored: Vec<(usize, String)>,
}

/// A line of a `resolv.conf` nfsim cannot read, with its 1-based line and column.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ResolvConfError {
    /// The line (from 1).
    pub line: usize,
    /// The column (from 1).
    pub column: usize,
    /// What was expected.
    pub message: String,
}

/// glibc's `RESOLV_EDNS_BUFFER_SIZE` (`resolv/resolv-internal.h`): the UDP size of its OPT
/// record.
pub const GLIBC_EDNS_UDP_SIZE: u16 = 1200;

/// Options both libraries accept and that change nothing nfsim models.
const HARMLESS: &[&str] = &[
    "debug",
    "trust-ad",
    "no-reload",
    "no-check-names",
    "ip6-dotint",
    "no-ip6-dotint",
];

impl ResolvConf {
    /// Parses `text` as `libc` reads it.
    pub fn parse(text: &str, libc: Libc) -> Result<ResolvConf, ResolvConfError> {
        let glibc = libc == Libc::Glibc;
        let mut c = ResolvConf {
            nameservers: Vec::new(),
            search: Vec::new(),
            ndots: 1,
            timeout_secs: 5,
            attempts: 2,
            rotate: false,
            single_request: false,
            single_request_reopen: false,
            use_vc: false,
            edns0: false,
            ignored: Vec::new(),
        };
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let err = |col: usize, message: String| ResolvConfError {
                line,
                column: col + 1,
                message,
            };
            let trimmed = raw.trim_start();
            if trimmed.starts_with(';') || trimmed.starts_with('#') || trimmed.is_empty() {
                continue;
            }
            let mut words = words(raw);
            let Some((_, key)) = words.next() else {
                continue;
            };
            match key {
                "nameserver" => {
                    let Some((col, addr)) = words.next() else {
                        return Err(err(raw.len(), "nameserver without an address".into()));
                    };
                    let ip: IpAddr = addr.parse().map_err(|_| {
                        err(col, format!("{addr:?} is not an IPv4 or IPv6 address"))
                    })?;
                    if c.nameservers.len() < MAXNS {
                        c.nameservers.push(ip);
                    } else {
                        c.ignored
                            .push((line, format!("nameserver {addr} (only {MAXNS} are used)")));
                    }
                }
                "search" | "domain" => {
                    let mut list = Vec::new();
                    for (col, d) in words.by_ref() {
                        let d = super::wire::normalize(d).map_err(|e| err(col, e.to_string()))?;
                        list.push(d);
                    }
                    if key == "domain" {
                        list.truncate(1);
                    }
                    c.search = list;
                }
                "options" => {
                    for (col, opt) in words.by_ref() {
                        c.option(opt, libc).map_err(|m| err(col, m))?;
                        if !glibc
                            && matches!(
                                opt,
                                "rotate"
                                    | "single-request"
                                    | "single-request-reopen"
                                    | "use-vc"
                                    | "edns0"
                            )
                        {
                            c.ignored
                                .push((line, format!("options {opt} (musl ignores it)")));
                        }
                    }
                }
                // Both libraries skip lines they do not know (`sortlist`, …).
                _ => c.ignored.push((line, key.to_string())),
            }
        }
        if !glibc {
            c.rotate = false;
            c.single_request = false;
            c.single_request_reopen = false;
            c.use_vc = false;
            c.edns0 = false;
        }
        if c.nameservers.is_empty() {
            c.nameservers
                .push(IpAddr::V4(std::net::Ipv4Addr::LOCALHOST));
        }
        Ok(c)
    }

    fn option(&mut self, opt: &str, libc: Libc) -> Result<(), String> {
        let glibc = libc == Libc::Glibc;
        let number = |v: &str| -> Result<u32, String> {
            v.parse::<u32>()
                .map_err(|_| format!("{opt:?}: expected a number after the colon"))
        };
        if let Some(v) = opt.strip_prefix("ndots:") {
            self.ndots = number(v)?.min(15) as u8;
        } else if let Some(v) = opt.strip_prefix("timeout:") {
            self.timeout_secs = number(v)?.min(if glibc { 30 } else { 60 }) as u8;
        } else if let Some(v) = opt.strip_prefix("attempts:") {
            let n = number(v)?;
            self.attempts = if glibc {
                n.min(5) as u8
            } else {
                n.clamp(1, 10) as u8
            };
        } else {
            match opt {
                "rotate" => self.rotate = true,
                "single-request" => self.single_request = true,
                "single-request-reopen" => self.single_request_reopen = true,
                "use-vc" => self.use_vc = true,
                "edns0" => self.edns0 = true,
                o if HARMLESS.contains(&o) => {}
                o => {
                    return Err(format!(
                        "option {o:?}: nfsim models ndots:N, timeout:N, attempts:N, rotate, single-request, single-request-reopen, use-vc, edns0 (and ignores {})",
                        HARMLESS.join(", ")
                    ))
                }
            }
        }
        Ok(())
    }
}

/// The whitespace-separated words of a line with their 0-based byte columns.
fn words(line: &str) -> impl Iterator<Item = (usize, &str)> {
    let mut at = 0;
    line.split([' ', '\t'])
        .map(move |w| {
            let col = at;
            at += w.len() + 1;
            (col, w)
        })
        .filter(|(_, w)| !w.is_empty())
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBE: &str = "# kubelet writes this\nsearch default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n";

    #[test]
    fn a_kubelet_resolv_conf_reads_as_both_libraries_read_it() {
        for libc in [Libc::Glibc, Libc::Musl { tcp_fallback: true }] {
            let c = ResolvConf::parse(KUBE, libc).unwrap();
            assert_eq!(c.nameservers, vec!["10.96.0.10".parse::<IpAddr>().unwrap()]);
            assert_eq!(
                c.search,
                [
                    "default.svc.cluster.local",
                    "svc.cluster.local",
                    "cluster.local"
                ]
            );
            assert_eq!((c.ndots, c.timeout_secs, c.attempts), (5, 5, 2));
        }
    }

    #[test]
    fn limits_and_library_specific_options_follow_each_library() {
        let text = "nameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\nnameserver 10.0.0.4\noptions timeout:45 attempts:0 ndots:20 rotate edns0 single-request-reopen use-vc\n";
        let g = ResolvConf::parse(text, Libc::Glibc).unwrap();
        assert_eq!(g.nameservers.len(), 3);
        assert_eq!((g.timeout_secs, g.attempts, g.ndots), (30, 0, 15));
        assert!(g.rotate && g.edns0 && g.single_request_reopen && g.use_vc);
        let m = ResolvConf::parse(
            text,
            Libc::Musl {
                tcp_fallback: false,
            },
        )
        .unwrap();
        assert_eq!((m.timeout_secs, m.attempts), (45, 1));
        assert!(!m.rotate && !m.edns0 && !m.use_vc);
        assert!(m
            .ignored
            .iter()
            .any(|(l, w)| *l == 5 && w.contains("rotate")));
    }

    #[test]
    fn bad_lines_are_located() {
        let e = ResolvConf::parse("search a\nnameserver 10.96.0.x\n", Libc::Glibc).unwrap_err();
        assert_eq!((e.line, e.column), (2, 12));
        let e = ResolvConf::parse("options ndots:five\n", Libc::Glibc).unwrap_err();
        assert_eq!((e.line, e.column), (1, 9));
        let e = ResolvConf::parse("options no-aaaa\n", Libc::Glibc).unwrap_err();
        assert!(e.message.contains("no-aaaa"), "{e}");
        let c = ResolvConf::parse("", Libc::Glibc).unwrap();
        assert_eq!(c.nameservers, vec!["127.0.0.1".parse::<IpAddr>().unwrap()]);
    }
}
