//! `nfsim sweep merge`: the input is cut into shard files at each `\x00` byte, merged, and
//! when they merge, aggregated, tabled and drawn as the HTML report.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let inputs: Vec<(String, String)> = text
        .split('\0')
        .enumerate()
        .map(|(i, t)| (format!("shard-{i}.jsonl"), t.to_string()))
        .collect();
    if let Ok((header, runs)) = nfsim::sweep::merge(&inputs) {
        let agg = nfsim::sweep::stats::aggregate(&header, &runs);
        let _ = nfsim::sweep::stats::render(&agg);
        let _ = nfsim::sweep::aggregate_line(&agg);
        let _ = nfsim::report::render_sweep(&header, &runs, &agg, "nfsim sweep merge");
    }
});
