//! nft text (`nft -f FILE`): applied as one transaction to an empty ruleset, listed when it
//! applies.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sim_core::SimTime;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let mut nft = sim_netfilter::nft::NftRuleset::new();
    if nft.apply("fuzz.nft", &text, SimTime::ZERO).is_ok() {
        let _ = nft.list_ruleset(SimTime::ZERO);
    }
});
