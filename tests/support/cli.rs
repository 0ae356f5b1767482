//! Runs the `nfsim` binary the way a user does, from the repository's root, for the CLI tests.

#![allow(dead_code)]

use std::process::Command;

/// The repository's root: the CLI tests name shipped files relative to it.
pub const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `nfsim ARGS` run from the repository's root: (exit code, stdout, stderr).
pub fn nfsim(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_nfsim"))
        .args(args)
        .current_dir(ROOT)
        .output()
        .expect("the nfsim binary runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8(out.stdout).expect("nfsim prints UTF-8"),
        String::from_utf8(out.stderr).expect("nfsim prints UTF-8"),
    )
}
