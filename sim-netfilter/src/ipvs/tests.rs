//! Unit tests of the IPVS model. Expected ipvsadm lines are derived from ipvsadm 1.31's
//! format strings (`print_title`, `print_service_entry`, `list_conn`, `print_conn`,
//! `print_largenum`), expanded by hand with the values below.

use super::conn::{ConnTable, InKey};
use super::sched;
use super::*;
use sim_core::{SimDuration, SimTime};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn tcp(addr: &str, port: u16) -> ServiceKey {
    ServiceKey {
        protocol: Protocol::Tcp,
        addr: ip(addr),
        port,
    }
}

fn udp(addr: &str, port: u16) -> ServiceKey {
    ServiceKey {
        protocol: Protocol::Udp,
        addr: ip(addr),
        port,
    }
}

/// A node's table as kube-proxy would program it: the API server, DNS over UDP and TCP, a
/// persistent web service.
fn cluster() -> Ipvs {
    let mut v = Ipvs::new(1, "node");
    let api = tcp("10.96.0.1", 443);
    v.add_service(ServiceSpec::new(api, Scheduler::Rr)).unwrap();
    v.add_dest(api, DestSpec::masq(ip("172.18.0.2"), 6443, 1))
        .unwrap();
    let dns = udp("10.96.0.10", 53);
    v.add_service(ServiceSpec::new(dns, Scheduler::Rr)).unwrap();
    v.add_dest(dns, DestSpec::masq(ip("10.244.1.3"), 53, 1))
        .unwrap();
    v.add_dest(dns, DestSpec::masq(ip("10.244.0.4"), 53, 1))
        .unwrap();
    let web = tcp("10.96.0.20", 80);
    v.add_service(ServiceSpec::new(web, Scheduler::Wrr).persistent(10800))
        .unwrap();
    v.add_dest(web, DestSpec::masq(ip("10.244.2.7"), 8080, 0))
        .unwrap();
    v
}

#[test]
fn list_prints_ipvsadm_ln() {
    let v = cluster();
    let want = "\
IP Virtual Server version 1.2.1 (size=4096)
Prot LocalAddress:Port Scheduler Flags
  -> RemoteAddress:Port           Forward Weight ActiveConn InActConn
TCP  10.96.0.1:443 rr
  -> 172.18.0.2:6443              Masq    1      0          0         
TCP  10.96.0.20:80 wrr persistent 10800
  -> 10.244.2.7:8080              Masq    0      0          0         
UDP  10.96.0.10:53 rr
  -> 10.244.0.4:53                Masq    1      0          0         
  -> 10.244.1.3:53                Masq    1      0          0         
";
    assert_eq!(v.list(), want);
}

#[test]
fn save_prints_ipvsadm_save_n() {
    let mut v = cluster();
    let dns = udp("10.96.0.10", 53);
    let mut spec = ServiceSpec::new(dns, Scheduler::Sh).persistent(60);
    spec.netmask_len = 24;
    spec.flags.0 |= ServiceFlags::SCHED1 | ServiceFlags::SCHED2;
    v.edit_service(spec).unwrap();
    let want = "\
-A -t 10.96.0.1:443 -s rr
-a -t 10.96.0.1:443 -r 172.18.0.2:6443 -m -w 1
-A -t 10.96.0.20:80 -s wrr -p 10800
-a -t 10.96.0.20:80 -r 10.244.2.7:8080 -m -w 0
-A -u 10.96.0.10:53 -s sh -p 60 -M 255.255.255.0 -b sh-fallback,sh-port
-a -u 10.96.0.10:53 -r 10.244.0.4:53 -m -w 1
-a -u 10.96.0.10:53 -r 10.244.1.3:53 -m -w 1
";
    assert_eq!(v.save(), want);
    assert!(v.list().contains(
        "UDP  10.96.0.10:53 sh (sh-fallback,sh-port) persistent 60 mask 255.255.255.0\n"
    ));
}

#[test]
fn ipv6_and_sctp_services_print_bracketed() {
    let mut v = Ipvs::new(1, "node");
    let k = ServiceKey {
        protocol: Protocol::Sctp,
        addr: ip("fd00:10:96::1"),
        port: 9000,
    };
    v.add_service(ServiceSpec::new(k, Scheduler::Mh)).unwrap();
    v.add_dest(k, DestSpec::masq(ip("fd00:10:244::5"), 9000, 3))
        .unwrap();
    assert_eq!(
        v.save(),
        "-A --sctp-service [fd00:10:96::1]:9000 -s mh\n\
         -a --sctp-service [fd00:10:96::1]:9000 -r [fd00:10:244::5]:9000 -m -w 3\n"
    );
    assert!(v.list().ends_with(
        "SCTP [fd00:10:96::1]:9000 mh\n  -> [fd00:10:244::5]:9000        Masq    3      0          0         \n"
    ));
}

#[test]
fn stats_columns_are_ipvsadm_largenum() {
    let mut v = cluster();
    let api = tcp("10.96.0.1", 443);
    let svc = v.services.get_mut(&api).unwrap();
    svc.stats = Stats {
        conns: 3,
        inpkts: 10,
        outpkts: 8,
        inbytes: 600,
        outbytes: 123_456_789,
    };
    svc.dests[0].stats = Stats {
        conns: 3,
        inpkts: 10,
        outpkts: 8,
        inbytes: 600,
        outbytes: 1_234_567_890,
    };
    let text = v.list_stats();
    let mut lines = text.lines();
    assert_eq!(
        lines.next(),
        Some("IP Virtual Server version 1.2.1 (size=4096)")
    );
    assert_eq!(
        lines.next(),
        Some("Prot LocalAddress:Port               Conns   InPkts  OutPkts  InBytes OutBytes")
    );
    assert_eq!(lines.next(), Some("  -> RemoteAddress:Port"));
    assert_eq!(
        lines.next(),
        Some("TCP  10.96.0.1:443                       3       10        8      600  123456K")
    );
    assert_eq!(
        lines.next(),
        Some("  -> 172.18.0.2:6443                     3       10        8      600    1234M")
    );
}

#[test]
fn largenum_steps() {
    let f = |n| {
        let mut s = String::new();
        text::largenum_for_tests(&mut s, n);
        s
    };
    assert_eq!(f(99_999_999), " 99999999");
    assert_eq!(f(100_000_000), "  100000K");
    assert_eq!(f(99_999_999_999), "   99999M");
    assert_eq!(f(100_000_000_000), "     100G");
    assert_eq!(f(100_000_000_000_000), "     100T");
}

fn conn(
    protocol: Protocol,
    c: (&str, u16),
    v: (&str, u16),
    d: (&str, u16),
    state: ConnState,
    left_secs: u64,
) -> Conn {
    Conn {
        id: 0,
        protocol,
        caddr: ip(c.0),
        cport: c.1,
        vaddr: ip(v.0),
        vport: v.1,
        daddr: ip(d.0),
        dport: d.1,
        state,
        flags: ConnFlags::default(),
        timeout: SimDuration::from_secs(left_secs),
        expires: SimTime::from_secs(100 + left_secs),
        dest: None,
        control: None,
        n_control: 0,
        slot: (0, 0),
    }
}

#[test]
fn list_conns_prints_ipvsadm_lnc() {
    let mut v = cluster();
    v.conns.insert(conn(
        Protocol::Tcp,
        ("10.244.1.5", 40000),
        ("10.96.0.1", 443),
        ("172.18.0.2", 6443),
        ConnState::Tcp(TcpState::Established),
        899,
    ));
    v.conns.insert(conn(
        Protocol::Udp,
        ("10.244.1.5", 5353),
        ("10.96.0.10", 53),
        ("10.244.1.3", 53),
        ConnState::Udp,
        298,
    ));
    let mut t = conn(
        Protocol::Tcp,
        ("10.244.1.5", 0),
        ("10.96.0.20", 80),
        ("10.244.2.7", 8080),
        ConnState::Tcp(TcpState::None),
        10799,
    );
    t.flags.template = true;
    v.conns.insert(t);
    // Half a second later the whole seconds left round down, as `(expires - jiffies) / HZ`.
    let now = SimTime::from_secs(100).saturating_add(SimDuration::from_millis(500));
    let text = v.list_conns(now);
    let mut lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.remove(0), "IPVS connection entries");
    assert_eq!(
        lines.remove(0),
        "pro expire state       source             virtual            destination"
    );
    lines.sort();
    assert_eq!(
        lines,
        [
            "TCP 14:58  ESTABLISHED 10.244.1.5:40000   10.96.0.1:443      172.18.0.2:6443",
            "TCP 179:58 NONE        10.244.1.5:0       10.96.0.20:80      10.244.2.7:8080",
            "UDP 04:57  UDP         10.244.1.5:5353    10.96.0.10:53      10.244.1.3:53",
        ]
    );
}

#[test]
fn conns_list_in_hash_bucket_order_fixed_by_the_seed() {
    let order = |seed| {
        let mut t = ConnTable::new(seed, "node");
        for port in 40000..40020u16 {
            t.insert(conn(
                Protocol::Tcp,
                ("10.244.1.5", port),
                ("10.96.0.1", 443),
                ("172.18.0.2", 6443),
                ConnState::Tcp(TcpState::Established),
                10,
            ));
        }
        t.in_proc_order()
            .iter()
            .map(|c| c.cport)
            .collect::<Vec<_>>()
    };
    assert_eq!(order(1), order(1));
    assert_ne!(order(1), order(2));
    assert_ne!(order(1), (40000..40020).collect::<Vec<_>>());
    let t = ConnTable::new(1, "node");
    assert!(t
        .lookup_in(&InKey {
            template: false,
            protocol: Protocol::Tcp,
            caddr: ip("10.244.1.5"),
            cport: 1,
            vaddr: ip("10.96.0.1"),
            vport: 443,
        })
        .is_none());
}

#[test]
fn services_sort_as_libipvs_compares_them() {
    let mut v = Ipvs::new(1, "node");
    for (p, a, port) in [
        (Protocol::Udp, "10.96.0.10", 53),
        (Protocol::Tcp, "192.168.0.1", 30080),
        (Protocol::Tcp, "10.96.0.1", 443),
        (Protocol::Tcp, "10.96.0.1", 80),
    ] {
        let k = ServiceKey {
            protocol: p,
            addr: ip(a),
            port,
        };
        v.add_service(ServiceSpec::new(k, Scheduler::Rr)).unwrap();
    }
    let heads: Vec<String> = v
        .save()
        .lines()
        .map(|l| l.split(' ').nth(2).unwrap().to_string())
        .collect();
    // TCP before UDP (protocol 6 < 17); 192.168.0.1 before 10.96.0.1 because
    // `ntohl(a) - ntohl(b)` overflows an int for addresses more than 2^31 apart.
    assert_eq!(
        heads,
        [
            "192.168.0.1:30080",
            "10.96.0.1:80",
            "10.96.0.1:443",
            "10.96.0.10:53"
        ]
    );
}

#[test]
fn glibc_msort_is_stable_and_sorts() {
    let mut v = vec![(3, 'a'), (1, 'b'), (3, 'c'), (2, 'd'), (1, 'e')];
    text::glibc_msort(&mut v, &|a: &(i32, char), b: &(i32, char)| a.0 - b.0);
    assert_eq!(v, [(1, 'b'), (1, 'e'), (2, 'd'), (3, 'a'), (3, 'c')]);
}

#[test]
fn control_errors_are_libipvs_messages() {
    let mut v = cluster();
    let api = tcp("10.96.0.1", 443);
    let err = v
        .add_service(ServiceSpec::new(api, Scheduler::Rr))
        .unwrap_err();
    assert_eq!(err.to_string(), "Service already exists");
    let none = tcp("10.96.0.99", 1);
    assert_eq!(
        v.del_service(none).unwrap_err().to_string(),
        "No such service"
    );
    assert_eq!(
        v.add_dest(none, DestSpec::masq(ip("10.0.0.1"), 1, 1))
            .unwrap_err()
            .to_string(),
        "Service not defined"
    );
    assert_eq!(
        v.add_dest(api, DestSpec::masq(ip("172.18.0.2"), 6443, 1))
            .unwrap_err(),
        IpvsError::DestExists
    );
    assert_eq!(
        v.del_dest(api, ip("172.18.0.9"), 6443).unwrap_err(),
        IpvsError::NoSuchDest
    );
    assert_eq!(
        v.add_dest(api, DestSpec::masq(ip("fd00::1"), 6443, 1))
            .unwrap_err(),
        IpvsError::Invalid
    );
    assert_eq!(
        v.add_dest(api, DestSpec::masq(ip("10.0.0.1"), 1, u32::MAX))
            .unwrap_err(),
        IpvsError::OutOfRange
    );
    assert_eq!(
        v.add_service(ServiceSpec::new(tcp("10.96.0.2", 1), Scheduler::Rr).persistent(0))
            .unwrap_err(),
        IpvsError::Invalid
    );
}

#[test]
fn edit_and_delete_keep_the_kernel_list_order() {
    let mut v = cluster();
    let dns = udp("10.96.0.10", 53);
    // Newest first: 10.244.0.4 was added after 10.244.1.3.
    let order: Vec<IpAddr> = v.dests(dns).unwrap().iter().map(|d| d.spec.addr).collect();
    assert_eq!(order, [ip("10.244.0.4"), ip("10.244.1.3")]);
    v.edit_dest(dns, DestSpec::masq(ip("10.244.1.3"), 53, 0))
        .unwrap();
    let d = v.service(dns).unwrap().dest(ip("10.244.1.3"), 53).unwrap();
    assert_eq!((d.spec.weight, d.last_weight), (0, 1));
    v.del_dest(dns, ip("10.244.0.4"), 53).unwrap();
    assert_eq!(v.dests(dns).unwrap().len(), 1);
    v.del_service(dns).unwrap();
    assert!(v.dests(dns).is_err());
    v.flush();
    assert_eq!(v.services().count(), 0);
    assert!(!v.is_active());
}

#[test]
fn timeouts_set_as_ipvsadm_set() {
    let mut v = Ipvs::new(1, "node");
    assert_eq!(
        v.timeouts().text(),
        "Timeout (tcp tcpfin udp): 900 120 300\n"
    );
    v.set_timeouts(0, 30, 0);
    assert_eq!(
        v.timeouts().text(),
        "Timeout (tcp tcpfin udp): 900 30 300\n"
    );
    v.set_timeouts(3600, 0, 60);
    assert_eq!(
        v.timeouts().text(),
        "Timeout (tcp tcpfin udp): 3600 30 60\n"
    );
}

#[test]
fn sysctls_by_name() {
    let mut v = Ipvs::new(1, "node");
    assert_eq!(v.sysctls(), IpvsSysctls::default());
    v.set_sysctl("net.ipv4.vs.conntrack", "1").unwrap();
    v.set_sysctl("net.ipv4.vs.expire_nodest_conn", "1").unwrap();
    v.set_sysctl("net.ipv4.vs.expire_quiescent_template", "1")
        .unwrap();
    v.set_sysctl("net.ipv4.vs.conn_reuse_mode", "0").unwrap();
    let s = v.sysctls();
    assert!(s.conntrack && s.expire_nodest_conn && s.expire_quiescent_template);
    assert_eq!(s.conn_reuse_mode, 0);
    assert!(v.set_sysctl("net.ipv4.vs.nope", "1").is_err());
    assert!(v.set_sysctl("net.ipv4.vs.conntrack", "x").is_err());
}

// ---- Schedulers. Sequences derived by hand from each ip_vs_<name>.c; the hashing ones'
// buckets computed with an independent transcription of the kernel's hash functions
// (siphash checked against the SipHash paper's test vector).

/// A service of `sched` with real servers added in this order (so listed newest first)
/// with (weight, activeconns, inactconns).
fn svc_with(sched: Scheduler, servers: &[(&str, u32, u32, u32)]) -> (Ipvs, ServiceKey) {
    let mut v = Ipvs::new(1, "node");
    let k = tcp("10.96.0.20", 80);
    v.add_service(ServiceSpec::new(k, sched)).unwrap();
    for &(a, w, act, inact) in servers {
        v.add_dest(k, DestSpec::masq(ip(a), 8080, w)).unwrap();
        let s = v.services.get_mut(&k).unwrap();
        s.dests[0].counters = DestCounters {
            activeconns: act,
            inactconns: inact,
            persistconns: 0,
        };
    }
    (v, k)
}

fn pick_from(v: &mut Ipvs, k: ServiceKey, src: &str) -> Option<String> {
    let s = v.services.get_mut(&k).unwrap();
    let input = sched::SchedInput {
        saddr: ip(src),
        sport: 40000,
        daddr: k.addr,
    };
    s.sched
        .schedule(s.spec.scheduler, s.spec.flags, &s.dests, input)
        .map(|i| s.dests[i].spec.addr.to_string())
}

fn picks(v: &mut Ipvs, k: ServiceKey, n: usize) -> Vec<String> {
    (0..n)
        .map(|_| pick_from(v, k, "10.244.1.5").unwrap_or_else(|| "-".into()))
        .collect()
}

#[test]
fn rr_walks_the_list_newest_first_skipping_weight_zero() {
    let (mut v, k) = svc_with(
        Scheduler::Rr,
        &[
            ("10.0.0.1", 1, 0, 0),
            ("10.0.0.2", 1, 0, 0),
            ("10.0.0.3", 1, 0, 0),
        ],
    );
    assert_eq!(
        picks(&mut v, k, 4),
        ["10.0.0.3", "10.0.0.2", "10.0.0.1", "10.0.0.3"]
    );
    // The cursor is on 10.0.0.3; quiescing 10.0.0.2 skips it.
    v.edit_dest(k, DestSpec::masq(ip("10.0.0.2"), 8080, 0))
        .unwrap();
    assert_eq!(picks(&mut v, k, 3), ["10.0.0.1", "10.0.0.3", "10.0.0.1"]);
    // Deleting the server under the cursor (10.0.0.1, last in the list) moves the cursor to
    // the one before it (ip_vs_rr_del_dest), so the walk goes on at the head.
    v.del_dest(k, ip("10.0.0.1"), 8080).unwrap();
    assert_eq!(picks(&mut v, k, 2), ["10.0.0.3", "10.0.0.3"]);
    v.edit_dest(k, DestSpec::masq(ip("10.0.0.3"), 8080, 0))
        .unwrap();
    assert_eq!(picks(&mut v, k, 1), ["-"]);
}

#[test]
fn wrr_steps_the_current_weight_by_the_gcd() {
    // List order a(4), b(3), c(2): added c, b, a.
    let (mut v, k) = svc_with(
        Scheduler::Wrr,
        &[
            ("10.0.0.3", 2, 0, 0),
            ("10.0.0.2", 3, 0, 0),
            ("10.0.0.1", 4, 0, 0),
        ],
    );
    let a = "10.0.0.1";
    let b = "10.0.0.2";
    let c = "10.0.0.3";
    // Adding one by one runs ip_vs_wrr_dest_changed each time: c alone gives di 2,
    // mw = 2 - 1 = 1, cw = 1; b and a keep cw 1 (not above mw, di 1). So cw 1: a b c;
    // then cw 0 -> mw 4: a; cw 3: a b; cw 2: a b c; ...
    assert_eq!(picks(&mut v, k, 10), [a, b, c, a, a, b, a, b, c, a]);
    // Weights 4 and 2 (gcd 2): mw = 4 - (2 - 1) = 3; b alone left cw at 1, and
    // (1 / 2) * 2 + 1 = 1 keeps it: cw 1: a b; cw 3: a; cw 1: a b; ...
    let (mut v, k) = svc_with(
        Scheduler::Wrr,
        &[("10.0.0.2", 2, 0, 0), ("10.0.0.1", 4, 0, 0)],
    );
    assert_eq!(picks(&mut v, k, 6), [a, b, a, a, b, a]);
    let (mut v, k) = svc_with(Scheduler::Wrr, &[("10.0.0.1", 0, 0, 0)]);
    assert_eq!(picks(&mut v, k, 1), ["-"]);
}

#[test]
fn least_connection_schedulers_use_the_kernel_overheads() {
    // List order a, b, c (added c, b, a).
    let three = |sched, a: (u32, u32, u32), b: (u32, u32, u32), c: (u32, u32, u32)| {
        let (mut v, k) = svc_with(
            sched,
            &[
                ("10.0.0.3", c.0, c.1, c.2),
                ("10.0.0.2", b.0, b.1, b.2),
                ("10.0.0.1", a.0, a.1, a.2),
            ],
        );
        pick_from(&mut v, k, "10.244.1.5").unwrap()
    };
    // lc: (active << 8) + inactive = 256, 5, 5: the first lowest, b.
    assert_eq!(
        three(Scheduler::Lc, (1, 1, 0), (1, 0, 5), (1, 0, 5)),
        "10.0.0.2"
    );
    // ... and a weight-0 server is skipped even when idle.
    assert_eq!(
        three(Scheduler::Lc, (1, 1, 0), (0, 0, 0), (1, 0, 5)),
        "10.0.0.3"
    );
    // wlc: overheads 256 (w1), 266 (w2), 512 (w3): 256*2 > 266*1 takes b; 266*3 > 512*2
    // does not take c.
    assert_eq!(
        three(Scheduler::Wlc, (1, 1, 0), (2, 1, 10), (3, 2, 0)),
        "10.0.0.2"
    );
    // sed: active + 1 = 2 (w1), 2 (w2), 3 (w3): b by 2*2 > 2*1; c's 2*3 > 3*2 is false.
    assert_eq!(
        three(Scheduler::Sed, (1, 1, 0), (2, 1, 9), (3, 2, 0)),
        "10.0.0.2"
    );
    // nq: an idle server at once, though a is lighter by sed's measure.
    assert_eq!(
        three(Scheduler::Nq, (9, 1, 0), (1, 0, 0), (1, 5, 0)),
        "10.0.0.2"
    );
    assert_eq!(
        three(Scheduler::Nq, (9, 1, 0), (1, 3, 0), (1, 5, 0)),
        "10.0.0.1"
    );
}

#[test]
fn sh_fills_256_buckets_by_weight_and_hashes_the_source() {
    // List order a(1), b(2): buckets a b b a b b ...; hash_32 buckets of the sources:
    // 10.244.1.5 -> 115, 10.244.1.6 -> 212, 172.18.0.9 -> 149.
    let (mut v, k) = svc_with(
        Scheduler::Sh,
        &[("10.0.0.2", 2, 0, 0), ("10.0.0.1", 1, 0, 0)],
    );
    for (src, want) in [
        ("10.244.1.5", "10.0.0.2"),
        ("10.244.1.6", "10.0.0.2"),
        ("172.18.0.9", "10.0.0.2"),
    ] {
        assert_eq!(pick_from(&mut v, k, src).unwrap(), want, "{src}");
    }
    // a, b, c of weight 1: bucket % 3.
    let (mut v, k) = svc_with(
        Scheduler::Sh,
        &[
            ("10.0.0.3", 1, 0, 0),
            ("10.0.0.2", 1, 0, 0),
            ("10.0.0.1", 1, 0, 0),
        ],
    );
    assert_eq!(pick_from(&mut v, k, "10.244.1.5").unwrap(), "10.0.0.2");
    assert_eq!(pick_from(&mut v, k, "10.244.1.6").unwrap(), "10.0.0.3");
    // b quiesced: it keeps its bucket, so 10.244.1.5 finds no server...
    v.edit_dest(k, DestSpec::masq(ip("10.0.0.2"), 8080, 0))
        .unwrap();
    assert_eq!(pick_from(&mut v, k, "10.244.1.5"), None);
    // ... unless sh-fallback: offset 0 probes bucket (0 + 2 * 115) & 255 = 230 -> c.
    let mut spec = v.service(k).unwrap().spec.clone();
    spec.flags.0 |= ServiceFlags::SCHED1;
    v.edit_service(spec).unwrap();
    assert_eq!(pick_from(&mut v, k, "10.244.1.5").unwrap(), "10.0.0.3");
}

#[test]
fn dh_hashes_the_virtual_address() {
    // (ntohl(daddr) * 2654435761) & 255: 10.96.0.20 -> 212, 212 % 3 = 2 -> the third in
    // list order, whatever the client.
    let (mut v, k) = svc_with(
        Scheduler::Dh,
        &[
            ("10.0.0.3", 1, 0, 0),
            ("10.0.0.2", 5, 0, 0),
            ("10.0.0.1", 1, 0, 0),
        ],
    );
    for src in ["10.244.1.5", "10.244.1.6", "172.18.0.9"] {
        assert_eq!(pick_from(&mut v, k, src).unwrap(), "10.0.0.3");
    }
}

#[test]
fn siphash_matches_the_reference_vector() {
    // SipHash-2-4, key 00..0f, message 00..0e (the SipHash paper's Appendix A).
    let data: Vec<u8> = (0..15).collect();
    assert_eq!(
        sched::siphash(&data, 0x0706_0504_0302_0100, 0x0f0e_0d0c_0b0a_0908, 2, 4),
        0xa129_ca61_49be_45e5
    );
}

#[test]
fn mh_builds_the_maglev_table_from_fixed_keys() {
    // List order 10.244.2.7 (w1), 10.244.1.3 (w1), 10.244.0.4 (w2); turns 1, 1, 2.
    let (mut v, k) = svc_with(
        Scheduler::Mh,
        &[
            ("10.244.0.4", 2, 0, 0),
            ("10.244.1.3", 1, 0, 0),
            ("10.244.2.7", 1, 0, 0),
        ],
    );
    let s = v.services.get(&k).unwrap();
    let sched::SchedState::Mh(table) = &s.sched else {
        panic!("not mh")
    };
    let count = |i| table.iter().filter(|&&x| x == Some(i)).count();
    assert_eq!((count(0), count(1), count(2)), (63, 63, 125));
    let first: Vec<usize> = table[..10].iter().map(|x| x.unwrap()).collect();
    assert_eq!(first, [2, 0, 2, 2, 2, 1, 2, 2, 1, 0]);
    for (src, want) in [
        ("10.244.1.5", "10.244.2.7"),
        ("10.244.1.6", "10.244.1.3"),
        ("172.18.0.9", "10.244.2.7"),
    ] {
        assert_eq!(pick_from(&mut v, k, src).unwrap(), want, "{src}");
    }
    // Quiesced, a server keeps its entries (last_weight), so its clients get nothing
    // without mh-fallback.
    v.edit_dest(k, DestSpec::masq(ip("10.244.2.7"), 8080, 0))
        .unwrap();
    let s = v.services.get(&k).unwrap();
    let sched::SchedState::Mh(t2) = &s.sched else {
        panic!("not mh")
    };
    assert_eq!(t2.iter().filter(|&&x| x == Some(0)).count(), 63);
    assert_eq!(pick_from(&mut v, k, "10.244.1.5"), None);
}

#[test]
fn every_scheduler_name_parses_and_prints() {
    for s in Scheduler::ALL {
        assert_eq!(s.name().parse::<Scheduler>().unwrap(), s);
    }
    let e = "fo".parse::<Scheduler>().unwrap_err();
    assert!(e.contains("rr, wrr, lc, wlc, sh, dh, sed, nq, mh"), "{e}");
}

#[test]
fn a_template_waits_while_it_controls_connections_then_keeps_60_s() {
    use super::core::{CtView, PacketView};
    let mut v = Ipvs::new(1, "node");
    let k = udp("10.96.0.10", 53);
    v.add_service(ServiceSpec::new(k, Scheduler::Rr).persistent(30))
        .unwrap();
    v.add_dest(k, DestSpec::masq(ip("10.244.1.3"), 53, 1))
        .unwrap();
    let p = PacketView {
        protocol: Protocol::Udp,
        saddr: ip("10.244.1.5"),
        sport: 5353,
        daddr: k.addr,
        dport: 53,
        tcp_flags: None,
        len: 60,
    };
    let ct = CtView {
        tracked: false,
        confirmed: false,
    };
    let t0 = SimTime::ZERO;
    v.ip_vs_in(t0, &p, ct);
    let d = v.service(k).unwrap().dest(ip("10.244.1.3"), 53).unwrap();
    assert_eq!((d.counters.inactconns, d.counters.persistconns), (1, 1));
    // The flow (UDP, 300 s) outlives the template (30 s): at 30 s the template still controls
    // it and is re-armed for 60 s (ip_vs_conn_expire's expire_later).
    v.handle_timeout(SimTime::from_secs(30));
    let t = v
        .conns()
        .into_iter()
        .find(|c| c.flags.template)
        .unwrap()
        .clone();
    assert_eq!(t.expires, SimTime::from_secs(90));
    assert_eq!(t.timeout, SimDuration::from_secs(60));
    // The flow expires at 300 s, the template at its next turn after that.
    v.handle_timeout(SimTime::from_secs(300));
    assert_eq!(v.conns().len(), 1);
    v.handle_timeout(SimTime::from_secs(330));
    assert!(v.conns().is_empty(), "{:?}", v.conns());
    let d = v.service(k).unwrap().dest(ip("10.244.1.3"), 53).unwrap();
    assert_eq!(d.counters, DestCounters::default());
}

#[test]
fn tcp_states_follow_the_kernel_table() {
    use super::conn::{next_tcp_state, Dir};
    use TcpState as S;
    let f = |s: &str| sim_core::TcpFlags::parse_list(s).unwrap();
    let mut no_output = false;
    let mut step = |st, dir, flags: &str| next_tcp_state(st, &mut no_output, dir, f(flags));
    // A NAT connection's life: SYN in, SYN-ACK out, ACK in, FIN in, FIN-ACK out, ACK in.
    let s = step(S::None, Dir::Input, "SYN");
    assert_eq!(s, S::SynRecv);
    let s = step(s, Dir::Output, "SYN,ACK");
    assert_eq!(s, S::SynRecv);
    let s = step(s, Dir::Input, "ACK");
    assert_eq!(s, S::Established);
    let s = step(s, Dir::Input, "FIN,ACK");
    assert_eq!(s, S::CloseWait);
    let s = step(s, Dir::Output, "FIN,ACK");
    assert_eq!(s, S::TimeWait);
    assert_eq!(step(s, Dir::Input, "ACK"), S::TimeWait);
    // RST wins over SYN; no flag at all is CLOSE; an ACK in NONE is ESTABLISHED.
    assert_eq!(step(S::Established, Dir::Input, "SYN,RST"), S::Close);
    assert_eq!(step(S::Established, Dir::Input, "NONE"), S::Close);
    assert_eq!(step(S::None, Dir::Input, "ACK"), S::Established);
    // NOOUTPUT (not masquerading): the INPUT-ONLY rows until the server is seen.
    let mut no_output = true;
    let s = next_tcp_state(S::Established, &mut no_output, Dir::Input, f("FIN"));
    assert_eq!(s, S::FinWait);
    assert!(no_output);
    next_tcp_state(s, &mut no_output, Dir::Output, f("ACK"));
    assert!(!no_output);
}

#[test]
fn the_kernel_generation_comes_from_the_release() {
    let mut v = Ipvs::new(1, "node");
    assert!(v.sysctls().kernel_5_9);
    v.set_kernel_version(5, 4);
    assert!(!v.sysctls().kernel_5_9);
    v.set_kernel_version(5, 9);
    assert!(v.sysctls().kernel_5_9);
    v.set_kernel_version(4, 19);
    assert!(!v.sysctls().kernel_5_9);
    v.set_kernel_version(6, 1);
    assert!(v.sysctls().kernel_5_9);
}
