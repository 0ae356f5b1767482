//! iptables-restore text: restored into an empty ruleset, and through `nfsim rules
//! normalize` (restore, then iptables-save with counters).
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut rs = sim_netfilter::Ruleset::new();
    let _ = rs.restore(&text, &sim_netfilter::RestoreOptions::default());
    let _ = nfsim::explain::normalize(&text, "fuzz.rules", true, &[]);
});
