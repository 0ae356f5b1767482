//! Reading real `conntrack -L` output: entries made with `conntrack -I` in a private network
//! namespace (loopback addresses), listed by the real tool, read by nfsim's parser, loaded
//! into a table and listed again, byte for byte.

#[path = "support/tools.rs"]
mod tools;

use sim_conntrack::{load_listing, parse_listing, AgeSource, Conntrack, Filter, Sysctls};
use sim_core::{SimDuration, SimTime};
use std::process::Command;

const INSERTS: &str = "\
conntrack -I -p udp -s 127.0.0.1 -d 127.0.0.2 --sport 1000 --dport 53 -t 30 -r 127.0.0.3 -q 127.0.0.1 --reply-port-src 53 --reply-port-dst 1000 -u SEEN_REPLY,ASSURED -m 5
conntrack -I -p tcp -s 127.0.0.1 -d 127.0.0.2 --sport 1001 --dport 80 -t 300 -r 127.0.0.2 -q 127.0.0.9 --reply-port-src 80 --reply-port-dst 61000 --state ESTABLISHED -u SEEN_REPLY,ASSURED
conntrack -I -p udp -s 127.0.0.1 -d 127.0.0.2 --sport 1002 --dport 53 -t 30 -r 127.0.0.2 -q 127.0.0.1 --reply-port-src 53 --reply-port-dst 1002
conntrack -I -p tcp -s 127.0.0.1 -d 127.0.0.2 --sport 1003 --dport 80 -t 100 -r 127.0.0.2 -q 127.0.0.1 --reply-port-src 80 --reply-port-dst 1003 --state TIME_WAIT -u SEEN_REPLY
";

fn real(script: &str) -> String {
    let out = Command::new(tools::find("unshare").unwrap())
        .args(["-n", "sh", "-c", script])
        .output()
        .expect("unshare");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn a_real_listing_loads_and_lists_back_byte_for_byte() {
    let test = "a_real_listing_loads_and_lists_back_byte_for_byte";
    if !tools::have_or_skip(test, &["conntrack", "sysctl"]) {
        return;
    }
    let plain = real(&format!(
        "sysctl -qw net.netfilter.nf_conntrack_timestamp=0\n{INSERTS}conntrack -L 2>/dev/null"
    ));
    let es = parse_listing(&plain).unwrap();
    assert_eq!(es.len(), 4, "{plain}");
    let mut ct = Conntrack::new(1, "t", Sysctls::default());
    let now = SimTime::ZERO + SimDuration::from_secs(1000);
    let r = load_listing(&mut ct, now, &es, SimDuration::from_secs(60)).unwrap();
    assert_eq!(r.assumed, 4);
    // The real tool lists in hash order, nfsim in creation (here: file) order.
    let mut want: Vec<&str> = plain.lines().collect();
    let dump = ct.dump(now, &Filter::all());
    let mut got: Vec<&str> = dump.lines().collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);

    // With timestamps: delta-time=, [start=…] and id= are read.
    let ext = real(&format!(
        "sysctl -qw net.netfilter.nf_conntrack_timestamp=1\n{INSERTS}conntrack -L -o extended,ktimestamp,id 2>/dev/null"
    ));
    let es = parse_listing(&ext).unwrap();
    assert_eq!(es.len(), 4, "{ext}");
    for e in &es {
        assert!(
            e.delta_time.is_some() && e.start.is_some() && e.id.is_some(),
            "{ext}"
        );
    }
    let ages = sim_conntrack::listing::entry_ages(&es, SimDuration::from_secs(60));
    assert!(ages.iter().all(|(_, s)| *s == AgeSource::DeltaTime));
}
