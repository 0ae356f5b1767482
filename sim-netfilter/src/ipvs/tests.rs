//! Unit tests of the IPVS model. Expected ipvsadm lines are derived from ipvsadm 1.31's
//! format strings (`print_title`, `print_service_entry`, `list_conn`, `print_conn`,
//! `print_largenum`), expanded by hand with the values below.

use super::conn::{ConnTable, InKey};
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
