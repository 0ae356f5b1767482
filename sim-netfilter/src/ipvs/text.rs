//! ipvsadm 1.31's listings, byte for byte (`ipvsadm.c`): `ipvsadm -S -n` (what
//! `ipvsadm-save -n` runs), `ipvsadm -L -n`, `ipvsadm -L -n --stats` and `ipvsadm -L -n -c`.
//!
//! Services and real servers are listed in the order ipvsadm sorts them
//! (`ipvs_sort_services` / `ipvs_sort_dests` in libipvs, with `ipvs_cmp_services` and
//! `ipvs_cmp_dests`), which includes a quirk of those functions: an address difference is
//! computed as `ntohl(a) - ntohl(b)` into an `int`, so two IPv4 addresses more than 2^31
//! apart compare the wrong way round (`192.168.0.1` sorts before `10.0.0.1`). The sort is
//! glibc's `qsort`, a merge sort (`msort_with_tmp`), reproduced here so that the
//! comparator's quirk gives the same order.

use std::fmt::Write as _;
use std::net::{IpAddr, Ipv4Addr};

use super::{Conn, Destination, Ipvs, ServiceFlags, Stats, VirtualService, IP_VS_CONN_TAB_BITS};
use super::{Scheduler, IP_VS_VERSION};

/// `addrport_to_anyname` with `FMT_NUMERIC`: `10.96.0.1:443`, `[fd00::1]:443`.
pub(crate) fn addr_port(addr: IpAddr, port: u16) -> String {
    match addr {
        IpAddr::V4(a) => format!("{a}:{port}"),
        IpAddr::V6(a) => format!("[{a}]:{port}"),
    }
}

/// The 32-bit words of an address in host order, as libipvs compares them.
fn words(a: IpAddr) -> Vec<u32> {
    match a {
        IpAddr::V4(v) => vec![u32::from(v)],
        IpAddr::V6(v) => v
            .octets()
            .chunks(4)
            .map(|c| u32::from_be_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    }
}

/// `r = ntohl(a) - ntohl(b)` word by word into an `int`, first nonzero wins
/// (`ipvs_cmp_services`, `ipvs_cmp_dests`).
fn cmp_addr(a: IpAddr, b: IpAddr) -> i32 {
    let mut r = 0i32;
    for (x, y) in words(a).into_iter().zip(words(b)) {
        r = x.wrapping_sub(y) as i32;
        if r != 0 {
            break;
        }
    }
    r
}

/// `AF_INET` 2, `AF_INET6` 10.
fn af(a: IpAddr) -> i32 {
    if a.is_ipv4() {
        2
    } else {
        10
    }
}

/// `ipvs_cmp_services`: fwmark (always 0 here), family, protocol, address, port.
fn cmp_services(a: &VirtualService, b: &VirtualService) -> i32 {
    let (ka, kb) = (a.spec.key, b.spec.key);
    let r = af(ka.addr) - af(kb.addr);
    if r != 0 {
        return r;
    }
    let r = i32::from(ka.protocol.number()) - i32::from(kb.protocol.number());
    if r != 0 {
        return r;
    }
    let r = cmp_addr(ka.addr, kb.addr);
    if r != 0 {
        return r;
    }
    i32::from(ka.port) - i32::from(kb.port)
}

/// `ipvs_cmp_dests`: address, port.
fn cmp_dests(a: &Destination, b: &Destination) -> i32 {
    let r = cmp_addr(a.spec.addr, b.spec.addr);
    if r != 0 {
        return r;
    }
    i32::from(a.spec.port) - i32::from(b.spec.port)
}

/// glibc's `qsort` as a merge sort (`msort_with_tmp`: halves `n / 2` and `n - n / 2`, the
/// left element taken while `cmp <= 0`), so that a comparator that is not a total order
/// gives glibc's result.
pub(crate) fn glibc_msort<T: Copy>(v: &mut [T], cmp: &dyn Fn(&T, &T) -> i32) {
    let n = v.len();
    if n <= 1 {
        return;
    }
    let n1 = n / 2;
    {
        let (left, right) = v.split_at_mut(n1);
        glibc_msort(left, cmp);
        glibc_msort(right, cmp);
    }
    let mut out = Vec::with_capacity(n);
    let (mut i, mut j) = (0, n1);
    while i < n1 && j < n {
        if cmp(&v[i], &v[j]) <= 0 {
            out.push(v[i]);
            i += 1;
        } else {
            out.push(v[j]);
            j += 1;
        }
    }
    out.extend_from_slice(&v[i..n1]);
    out.extend_from_slice(&v[j..n]);
    v.copy_from_slice(&out);
}

fn sorted_services(ipvs: &Ipvs) -> Vec<&VirtualService> {
    let mut v: Vec<&VirtualService> = ipvs.services().collect();
    glibc_msort(&mut v, &|a, b| cmp_services(a, b));
    v
}

fn sorted_dests(svc: &VirtualService) -> Vec<&Destination> {
    let mut v: Vec<&Destination> = svc.dests.iter().collect();
    glibc_msort(&mut v, &|a, b| cmp_dests(a, b));
    v
}

/// `print_sched_flags`: the scheduler flags' names, comma-separated.
fn sched_flags(svc: &VirtualService) -> String {
    let f = svc.spec.flags;
    let mut names = Vec::new();
    match svc.spec.scheduler {
        Scheduler::Sh | Scheduler::Mh => {
            let p = svc.spec.scheduler.name();
            if f.has(ServiceFlags::SCHED1) {
                names.push(format!("{p}-fallback"));
            }
            if f.has(ServiceFlags::SCHED2) {
                names.push(format!("{p}-port"));
            }
        }
        _ => {
            for (bit, name) in [
                (ServiceFlags::SCHED1, "flag-1"),
                (ServiceFlags::SCHED2, "flag-2"),
                (ServiceFlags::SCHED3, "flag-3"),
            ] {
                if f.has(bit) {
                    names.push(name.to_string());
                }
            }
        }
    }
    names.join(",")
}

fn has_sched_flags(svc: &VirtualService) -> bool {
    svc.spec.flags.0 & (ServiceFlags::SCHED1 | ServiceFlags::SCHED2 | ServiceFlags::SCHED3) != 0
}

/// The netmask as `inet_ntoa` prints it, for an IPv4 service whose mask is not /32; the
/// prefix length for an IPv6 one not /128.
fn mask_text(svc: &VirtualService) -> Option<String> {
    let len = svc.spec.netmask_len;
    if svc.spec.key.addr.is_ipv4() {
        if len >= 32 {
            return None;
        }
        let m = if len == 0 { 0 } else { u32::MAX << (32 - len) };
        Some(Ipv4Addr::from(m).to_string())
    } else if len >= 128 {
        None
    } else {
        Some(len.to_string())
    }
}

/// `print_largenum` without `--exact`: right-aligned in 9 columns, K/M/G/T past 10^8.
fn largenum(out: &mut String, i: u64) {
    let _ = if i < 100_000_000 {
        write!(out, "{i:9}")
    } else if i < 1_000_000_000 {
        write!(out, "{:8}K", i / 1000)
    } else if i < 100_000_000_000 {
        write!(out, "{:8}M", i / 1_000_000)
    } else if i < 100_000_000_000_000 {
        write!(out, "{:8}G", i / 1_000_000_000)
    } else {
        write!(out, "{:8}T", i / 1_000_000_000_000)
    };
}

fn stats_columns(out: &mut String, s: &Stats) {
    for n in [s.conns, s.inpkts, s.outpkts, s.inbytes, s.outbytes] {
        largenum(out, n);
    }
}

/// `snprintf(svc_name, …, "%-4s %s", …)` cut at 33 bytes for IPv4 (`svc_name[33] = '\0'`).
fn list_name(svc: &VirtualService) -> String {
    let k = svc.spec.key;
    let mut s = format!("{:<4} {}", k.protocol.name(), addr_port(k.addr, k.port));
    if k.addr.is_ipv4() {
        s.truncate(33);
    }
    s
}

/// A real server's name for the listings, cut at 28 bytes for IPv4 (`dname[28] = '\0'`).
fn dest_name(d: &Destination) -> String {
    let mut s = addr_port(d.spec.addr, d.spec.port);
    if d.spec.addr.is_ipv4() {
        s.truncate(28);
    }
    s
}

fn version_line(out: &mut String) {
    let (a, b, c) = IP_VS_VERSION;
    let _ = writeln!(
        out,
        "IP Virtual Server version {a}.{b}.{c} (size={})",
        1u32 << IP_VS_CONN_TAB_BITS
    );
}

impl Ipvs {
    /// `ipvsadm -S -n` (`ipvsadm-save -n`): one `-A` line per service and one `-a` line per
    /// real server, as `ipvsadm-restore` takes them back.
    pub fn save(&self) -> String {
        let mut out = String::new();
        for svc in sorted_services(self) {
            let k = svc.spec.key;
            let name = format!("{} {}", k.protocol.save_option(), addr_port(k.addr, k.port));
            let _ = write!(out, "-A {name} -s {}", svc.spec.scheduler.name());
            if svc.spec.flags.has(ServiceFlags::PERSISTENT) {
                let _ = write!(out, " -p {}", svc.spec.timeout_secs);
                if let Some(m) = mask_text(svc) {
                    let _ = write!(out, " -M {m}");
                }
            }
            if svc.spec.flags.has(ServiceFlags::ONEPACKET) {
                out.push_str(" -o");
            }
            if has_sched_flags(svc) {
                let _ = write!(out, " -b {}", sched_flags(svc));
            }
            out.push('\n');
            for d in sorted_dests(svc) {
                let _ = writeln!(
                    out,
                    "-a {name} -r {} {} -w {}",
                    addr_port(d.spec.addr, d.spec.port),
                    d.spec.fwd.save_switch(),
                    d.spec.weight
                );
            }
        }
        out
    }

    /// `ipvsadm -L -n`: the version line, the two title lines, then each service with its
    /// real servers' method, weight and active / inactive connection counts.
    pub fn list(&self) -> String {
        let mut out = String::new();
        version_line(&mut out);
        out.push_str("Prot LocalAddress:Port Scheduler Flags\n");
        out.push_str("  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn\n");
        for svc in sorted_services(self) {
            let _ = write!(out, "{} {}", list_name(svc), svc.spec.scheduler.name());
            if has_sched_flags(svc) {
                let _ = write!(out, " ({})", sched_flags(svc));
            }
            if svc.spec.flags.has(ServiceFlags::PERSISTENT) {
                let _ = write!(out, " persistent {}", svc.spec.timeout_secs);
                if let Some(m) = mask_text(svc) {
                    let _ = write!(out, " mask {m}");
                }
            }
            if svc.spec.flags.has(ServiceFlags::ONEPACKET) {
                out.push_str(" ops");
            }
            out.push('\n');
            for d in sorted_dests(svc) {
                let _ = writeln!(
                    out,
                    "  -> {:<28} {:<7} {:<6} {:<10} {:<10}",
                    dest_name(d),
                    d.spec.fwd.name(),
                    d.spec.weight,
                    d.counters.activeconns,
                    d.counters.inactconns
                );
            }
        }
        out
    }

    /// `ipvsadm -L -n --stats`: connections, packets and bytes in and out per service and
    /// real server.
    pub fn list_stats(&self) -> String {
        let mut out = String::new();
        version_line(&mut out);
        let _ = writeln!(
            out,
            "{:<33} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "Prot LocalAddress:Port", "Conns", "InPkts", "OutPkts", "InBytes", "OutBytes"
        );
        out.push_str("  -> RemoteAddress:Port\n");
        for svc in sorted_services(self) {
            let _ = write!(out, "{:<33}", list_name(svc));
            stats_columns(&mut out, &svc.stats);
            out.push('\n');
            for d in sorted_dests(svc) {
                let _ = write!(out, "  -> {:<28}", dest_name(d));
                stats_columns(&mut out, &d.stats);
                out.push('\n');
            }
        }
        out
    }

    /// `ipvsadm -L -n -c`: the connection table as `/proc/net/ip_vs_conn` gives it
    /// (`ip_vs_conn_seq_show`, hash order), each entry's time left as `mm:ss`
    /// (`print_conn`).
    pub fn list_conns(&self, now: sim_core::SimTime) -> String {
        let mut out = String::from("IPVS connection entries\n");
        let _ = writeln!(
            out,
            "pro expire {:<11} {:<18} {:<18} destination",
            "state", "source", "virtual"
        );
        for c in self.conns() {
            conn_line(&mut out, c, now);
        }
        out
    }
}

fn conn_line(out: &mut String, c: &Conn, now: sim_core::SimTime) {
    // `(cp->timer.expires - jiffies) / HZ`, whole seconds.
    let secs = c.expires.saturating_since(now).as_secs();
    let expire = format!("{:02}:{:02}", secs / 60, secs % 60);
    let _ = writeln!(
        out,
        "{:<3} {:<6} {:<11} {:<18} {:<18} {}",
        c.protocol.name(),
        expire,
        c.state_name(),
        addr_port(c.caddr, c.cport),
        addr_port(c.vaddr, c.vport),
        addr_port(c.daddr, c.dport)
    );
}

#[cfg(test)]
pub(crate) fn largenum_for_tests(out: &mut String, i: u64) {
    largenum(out, i)
}
