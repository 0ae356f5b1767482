//! Packets: nfsim's packet syntax (`udp 10.0.0.1:1 -> 10.0.0.2:53`) and IP bytes as a capture
//! holds them, each printed or written back when it parses.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(p) = String::from_utf8_lossy(data).parse::<sim_core::Packet>() {
        let _ = p.to_string();
        let _ = sim_core::wire::emit_ip(&p);
    }
    if let Ok(p) = sim_core::wire::parse_ip(data) {
        let _ = p.to_string();
        let _ = sim_core::wire::emit_ip(&p);
    }
    let _ = sim_core::wire::parse_ethernet(data);
});
