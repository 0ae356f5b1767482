//! `conntrack -L` text (`--conntrack FILE`, `nodes[].state.conntrack`): parsed, loaded into a
//! table an hour into a run, and listed.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sim_core::{SimDuration, SimTime};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(entries) = sim_conntrack::listing::parse_listing(&text) else {
        return;
    };
    let now = SimTime::ZERO + SimDuration::from_secs(3600);
    let mut ct = sim_conntrack::table::Conntrack::new(1, "fuzz", Default::default());
    let _ =
        sim_conntrack::listing::load_listing(&mut ct, now, &entries, SimDuration::from_secs(60));
    let _ = ct.dump(now, &Default::default());
});
