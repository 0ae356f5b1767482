//! The scenario loader (`nfsim run FILE`): any bytes, as UTF-8 text, give a scenario or a
//! located error, never a panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = nfsim::scenario::load_str("fuzz.yaml", &text);
});
