//! `/proc/net/xt_recent/NAME` text (`trace --recent NAME=FILE`): parsed, each entry mapped
//! to simulated time, and loaded into the recent list of a rule that uses it.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sim_core::{SimDuration, SimTime};

const RULES: &str = "*filter
-A INPUT -m recent --name X --rcheck --seconds 60 --hitcount 2 -j DROP
-A INPUT -m recent --name X --set
COMMIT
";

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(entries) = sim_netfilter::parse_proc_recent(&text) else {
        return;
    };
    let jiffies = sim_netfilter::Jiffies {
        now: entries.iter().map(|e| e.last_seen).max().unwrap_or(0),
        hz: sim_netfilter::DEFAULT_HZ,
    };
    let at = SimTime::ZERO + SimDuration::from_secs(365 * 86_400);
    let mut views = Vec::new();
    for e in &entries {
        let _ = e.stamps_oldest_first();
        match e.to_view(jiffies, at) {
            Ok(v) => views.push(v),
            Err(_) => return,
        }
    }
    let node = nfsim::explain::NodeSpec::parse("172.18.0.2", 24, None, 1).unwrap();
    let Ok(mut ns) = node.build(RULES, "fuzz.rules") else {
        return;
    };
    let _ = ns.load_recent("X", &views);
});
