//! The resolvers against a zone, through a tiny driver: every nameserver that is up answers
//! after `rtt` (TCP after two), one that is down never does.

use super::resolver::candidates;
use super::zone::{counted_a, counted_aaaa};
use super::*;

const KUBE: &str = "search default.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n";

struct Driver(drive::ZoneDriver);

impl std::ops::Deref for Driver {
    type Target = drive::ZoneDriver;
    fn deref(&self) -> &Self::Target {
        &self.0
    }
}
impl std::ops::DerefMut for Driver {
    fn deref_mut(&mut self) -> &mut Self::Target {
        &mut self.0
    }
}

impl Driver {
    fn new(libc: Libc, conf: &str) -> Driver {
        let mut names = DnsNames::new();
        let mut zone = Zone::new();
        let shop = names.intern("payment.shop").unwrap();
        zone.insert(
            shop,
            ZoneEntry {
                a: vec![counted_a(0)],
                aaaa: vec![counted_aaaa(0)],
            },
        );
        let big = names.intern("big.default.svc.cluster.local").unwrap();
        zone.insert(
            big,
            ZoneEntry {
                a: (0..40).map(counted_a).collect(),
                aaaa: Vec::new(),
            },
        );
        let v4only = names.intern("v4only.default.svc.cluster.local").unwrap();
        zone.insert(v4only, ZoneEntry::default());
        let conf = ResolvConf::parse(conf, libc).unwrap();
        Driver(drive::ZoneDriver::new(libc, conf, names, zone))
    }

    fn lookup(&mut self, name: &str) -> LookupRecord {
        self.0.lookup(name).unwrap()
    }
}

const MUSL_OLD: Libc = Libc::Musl {
    tcp_fallback: false,
};
const MUSL: Libc = Libc::Musl { tcp_fallback: true };

fn names(r: &LookupRecord, d: &Driver) -> Vec<String> {
    r.tried
        .iter()
        .map(|n| d.names.name(*n).to_string())
        .collect()
}

fn ms(r: &LookupRecord) -> u64 {
    (r.ended.as_nanos() - r.started.as_nanos()) / 1_000_000
}

#[test]
fn ndots_5_walks_the_search_list_then_asks_the_name_with_both_libraries() {
    for libc in [Libc::Glibc, MUSL] {
        let mut d = Driver::new(libc, KUBE);
        let r = d.lookup("payment.shop");
        assert_eq!(r.result, LookupResult::Answered { records: 2 });
        assert_eq!(
            names(&r, &d),
            [
                "payment.shop.default.svc.cluster.local",
                "payment.shop.svc.cluster.local",
                "payment.shop.cluster.local",
                "payment.shop"
            ]
        );
        // A then AAAA for each name, back to back from one socket, a new socket per name.
        let per_name: Vec<(u32, QType)> = d.sent.iter().map(|s| (s.socket, s.qtype)).collect();
        assert_eq!(
            per_name,
            [
                (0, QType::A),
                (0, QType::Aaaa),
                (1, QType::A),
                (1, QType::Aaaa),
                (2, QType::A),
                (2, QType::Aaaa),
                (3, QType::A),
                (3, QType::Aaaa)
            ],
            "{libc:?}"
        );
        assert!(
            d.sent.chunks(2).all(|p| p[0].at_ms == p[1].at_ms),
            "in parallel"
        );
        assert_eq!(ms(&r), 4, "four exchanges of 1 ms");
        assert_eq!(r.udp_queries, 8);
    }
}

#[test]
fn a_name_with_ndots_dots_is_asked_first_by_glibc_and_alone_by_musl() {
    let conf = ResolvConf::parse(KUBE, Libc::Glibc).unwrap();
    assert_eq!(
        candidates("a.b.c.d.e.f", &conf, Libc::Glibc),
        [
            "a.b.c.d.e.f",
            "a.b.c.d.e.f.default.svc.cluster.local",
            "a.b.c.d.e.f.svc.cluster.local",
            "a.b.c.d.e.f.cluster.local"
        ]
    );
    assert_eq!(candidates("a.b.c.d.e.f", &conf, MUSL), ["a.b.c.d.e.f"]);
    assert_eq!(
        candidates("payment.shop.", &conf, Libc::Glibc),
        ["payment.shop"]
    );
    assert_eq!(candidates("payment.shop.", &conf, MUSL), ["payment.shop"]);
}

#[test]
fn a_truncated_answer_goes_to_tcp_on_glibc_and_new_musl_and_is_kept_by_old_musl() {
    let mut d = Driver::new(Libc::Glibc, KUBE);
    let r = d.lookup("big");
    assert_eq!(r.result, LookupResult::Answered { records: 40 });
    assert!(r.tcp);
    // glibc: both queries again on one TCP connection to the same server.
    let tcp: Vec<_> = d
        .sent
        .iter()
        .filter(|s| s.tcp)
        .map(|s| (s.socket, s.qtype))
        .collect();
    assert_eq!(tcp.len(), 2);
    assert_eq!(tcp[0].0, tcp[1].0);

    let mut d = Driver::new(MUSL, KUBE);
    let r = d.lookup("big");
    assert_eq!(r.result, LookupResult::Answered { records: 40 });
    let tcp: Vec<_> = d.sent.iter().filter(|s| s.tcp).map(|s| s.qtype).collect();
    assert_eq!(
        tcp,
        [QType::A],
        "musl 1.2.4 retries only the truncated query"
    );

    let mut d = Driver::new(MUSL_OLD, KUBE);
    let r = d.lookup("big");
    // 12 + 31 + 4 octets before the records: (512 - 47) / 16 = 29 fit.
    assert_eq!(
        r.result,
        LookupResult::Answered { records: 29 },
        "what fit in 512 octets"
    );
    assert!(!r.tcp);
}

#[test]
fn glibc_waits_retrans_shifted_by_the_nameserver_index_over_nscount() {
    let conf = "nameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\noptions timeout:2 attempts:2\n";
    let mut d = Driver::new(Libc::Glibc, conf);
    d.up = vec![false; 3];
    let r = d.lookup("payment.shop");
    assert_eq!(r.result, LookupResult::TimedOut);
    // ns0 waits 2 s, ns1 (2 << 1) / 3 = 1 s, ns2 (2 << 2) / 3 = 2 s; two rounds.
    let starts: Vec<(u64, usize)> = d.sent.iter().step_by(2).map(|s| (s.at_ms, s.ns)).collect();
    assert_eq!(
        starts,
        [
            (0, 0),
            (2000, 1),
            (3000, 2),
            (5000, 0),
            (7000, 1),
            (8000, 2)
        ]
    );
    assert_eq!(ms(&r), 10_000);
    // A nameserver keeps its socket over the rounds of one res_send.
    assert_eq!(d.sent[0].socket, d.sent[6].socket);
}

#[test]
fn glibc_skips_the_rest_of_the_search_list_after_a_timeout_but_asks_the_name_last() {
    let mut d = Driver::new(
        Libc::Glibc,
        &format!("{KUBE}options timeout:1 attempts:1\n"),
    );
    d.up = vec![false];
    let r = d.lookup("payment.shop");
    assert_eq!(r.result, LookupResult::TimedOut);
    assert_eq!(
        names(&r, &d),
        ["payment.shop.default.svc.cluster.local", "payment.shop"]
    );
    assert_eq!(ms(&r), 2000);
}

#[test]
fn musl_resends_to_all_nameservers_every_timeout_over_attempts_and_stops_the_search() {
    let conf = format!("{KUBE}nameserver 10.96.0.11\n");
    let mut d = Driver::new(MUSL, &conf);
    d.up = vec![false, false];
    let r = d.lookup("payment.shop");
    assert_eq!(r.result, LookupResult::TimedOut);
    assert_eq!(names(&r, &d), ["payment.shop.default.svc.cluster.local"]);
    // A to both, AAAA to both, at 0 and at 2.5 s, one socket; the lookup ends at 5 s.
    let sent: Vec<(u64, usize, QType)> = d.sent.iter().map(|s| (s.at_ms, s.ns, s.qtype)).collect();
    assert_eq!(
        sent,
        [
            (0, 0, QType::A),
            (0, 1, QType::A),
            (0, 0, QType::Aaaa),
            (0, 1, QType::Aaaa),
            (2500, 0, QType::A),
            (2500, 1, QType::A),
            (2500, 0, QType::Aaaa),
            (2500, 1, QType::Aaaa)
        ]
    );
    assert!(d.sent.iter().all(|s| s.socket == d.sent[0].socket));
    assert_eq!(ms(&r), 5000);
}

#[test]
fn single_request_serialises_and_reopen_takes_a_new_port_for_the_second() {
    let mut d = Driver::new(Libc::Glibc, &format!("{KUBE}options single-request\n"));
    d.lookup("payment.shop.");
    assert_eq!(
        d.sent[1].at_ms,
        d.sent[0].at_ms + 1,
        "AAAA after A's answer"
    );
    assert_eq!(d.sent[0].socket, d.sent[1].socket, "same socket");
    let mut d = Driver::new(
        Libc::Glibc,
        &format!("{KUBE}options single-request-reopen\n"),
    );
    d.lookup("payment.shop.");
    assert_eq!(d.sent[1].at_ms, d.sent[0].at_ms + 1);
    assert_ne!(d.sent[0].socket, d.sent[1].socket, "a new socket for AAAA");
}

#[test]
fn rotate_starts_each_res_send_at_the_next_nameserver_and_musl_ignores_it() {
    let conf = "nameserver 10.0.0.1\nnameserver 10.0.0.2\noptions rotate\n";
    let mut d = Driver::new(Libc::Glibc, conf);
    let first: Vec<usize> = (0..3)
        .map(|_| {
            d.lookup("x.example.");
            d.sent[0].ns
        })
        .collect();
    assert_eq!(first, [0, 1, 0]);
}

#[test]
fn nodata_ends_a_musl_search_but_glibc_walks_on() {
    let mut d = Driver::new(MUSL, KUBE);
    let r = d.lookup("v4only");
    assert_eq!(r.result, LookupResult::NoData);
    assert_eq!(r.tried.len(), 1);
    let mut d = Driver::new(Libc::Glibc, KUBE);
    let r = d.lookup("v4only");
    assert_eq!(r.result, LookupResult::NoData);
    assert_eq!(r.tried.len(), 4);
    let r = d.lookup("nothere");
    assert_eq!(r.result, LookupResult::NxDomain);
}

#[test]
fn edns0_puts_glibcs_size_on_every_query_and_use_vc_goes_straight_to_tcp() {
    let mut d = Driver::new(Libc::Glibc, &format!("{KUBE}options edns0\n"));
    let r = d.lookup("big");
    assert_eq!(r.result, LookupResult::Answered { records: 40 });
    assert!(!r.tcp, "680 octets fit in the 1200 of EDNS0");
    let mut d = Driver::new(Libc::Glibc, &format!("{KUBE}options use-vc\n"));
    let r = d.lookup("payment.shop.");
    assert!(r.tcp);
    assert_eq!(r.udp_queries, 0);
}

#[test]
fn glibc_goes_to_the_next_nameserver_at_once_on_port_unreachable_and_stops_when_all_refuse() {
    let conf = format!("{KUBE}nameserver 10.96.0.11\noptions timeout:1\n");
    let mut d = Driver::new(Libc::Glibc, &conf);
    d.up = vec![false, true];
    d.refuses = vec![true, false];
    let r = d.lookup("payment.shop.");
    assert_eq!(r.result, LookupResult::Answered { records: 2 });
    assert_eq!(ms(&r), 2, "no wait: the refusal, then the second server");
    d.up = vec![false, false];
    d.refuses = vec![true, true];
    let r = d.lookup("payment.shop");
    assert_eq!(r.result, LookupResult::Refused);
    assert_eq!(r.tried.len(), 1, "ECONNREFUSED ends res_nsearch");
    assert_eq!(
        r.udp_queries,
        2 * 2 * 2,
        "two rounds of two servers, A and AAAA each"
    );
}

#[test]
fn glibc_falls_back_to_single_request_for_good_after_one_of_two_answers() {
    let mut d = Driver::new(Libc::Glibc, &format!("{KUBE}options timeout:1\n"));
    d.lose_aaaa = 1;
    let r = d.lookup("payment.shop.");
    assert_eq!(r.result, LookupResult::Answered { records: 2 });
    // A and AAAA at 0; A answered; at 1 s (the wait) A again, AAAA after its answer.
    let sent: Vec<(u64, QType)> = d.sent.iter().map(|s| (s.at_ms, s.qtype)).collect();
    assert_eq!(
        sent,
        [
            (0, QType::A),
            (0, QType::Aaaa),
            (1000, QType::A),
            (1001, QType::Aaaa)
        ]
    );
    assert!(
        d.sent.iter().all(|s| s.socket == d.sent[0].socket),
        "same socket"
    );
    // The next lookup is single-request from the start.
    d.lookup("payment.shop.");
    assert_eq!(d.sent[1].at_ms, d.sent[0].at_ms + 1);
    // musl just resends the unanswered AAAA at 2.5 s to every server.
    let mut d = Driver::new(MUSL, KUBE);
    d.lose_aaaa = 1;
    let r = d.lookup("payment.shop.");
    assert_eq!(ms(&r), 2501);
    assert_eq!(
        d.sent.last().map(|s| (s.at_ms, s.qtype)),
        Some((2500, QType::Aaaa))
    );
}
