//! The reconciler protocol (docs/reconciler-protocol.md) from the process's side: whatever
//! a hostile reconciler writes on its stdout, read as nfsim reads it (lines of at most
//! `MAX_LINE_BYTES`) and handled request by request against a small conntrack table, until
//! `done` or the first error, as one sync's turn.
#![no_main]

use libfuzzer_sys::fuzz_target;
use nfsim::kubeproxy::cleanup::{CleanupReport, CtEntry, CtTuple, MemConntrack};
use nfsim::kubeproxy::external::{handle_line, read_line_bounded, Reply};

fn table() -> MemConntrack {
    let t = |src: &str, dst: &str, sport, dport| CtTuple {
        src: src.parse().unwrap(),
        dst: dst.parse().unwrap(),
        sport,
        dport,
    };
    MemConntrack {
        entries: vec![
            CtEntry {
                proto: 17,
                orig: t("10.244.2.9", "10.96.0.10", 40000, 53),
                reply: t("10.244.1.5", "10.244.2.9", 53, 40000),
            },
            CtEntry {
                proto: 6,
                orig: t("10.244.2.9", "10.96.0.1", 40001, 443),
                reply: t("172.18.0.2", "10.244.2.9", 6443, 40001),
            },
        ],
    }
}

fuzz_target!(|data: &[u8]| {
    let mut r = std::io::Cursor::new(data);
    let mut ct = table();
    let mut report = CleanupReport::default();
    let mut n = 0u64;
    while let Ok(Some(Ok(line))) = read_line_bounded(&mut r) {
        n += 1;
        match handle_line(n, &line, &mut ct, &mut report) {
            Ok(Reply::Answer(v)) => {
                let _ = v.to_string();
            }
            Ok(Reply::Done) | Err(_) => break,
        }
    }
});
