//! A scenario that loads is run for its first simulated second and its timeline printed: the
//! loader's checks must leave nothing that panics at run time.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sim_core::{SimDuration, SimTime};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let Ok(sc) = nfsim::scenario::load_str("fuzz.yaml", &text) else {
        return;
    };
    if let Ok(mut c) = nfsim::testkit::Cluster::from_scenario(sc) {
        if c.run_until(SimTime::ZERO + SimDuration::from_secs(1))
            .is_ok()
        {
            let _ = c.timeline_text();
        }
    }
});
