//! `nfsim serve`: the line I/O around [`nfsim::serve::Session`], which does everything else.
//!
//! Each line of stdin is a request; each answer is written and flushed before the next line
//! is read, so a client can wait for it. A line longer than
//! [`MAX_REQUEST_BYTES`](nfsim::serve::MAX_REQUEST_BYTES) is read no further than that (the
//! rest up to its `\n` is skipped) and answered with the session's `too_long` error. The
//! session ends at the end of stdin, exit 0; bad requests never end it.

use anyhow::{Context, Result};
use nfsim::serve::{Session, MAX_REQUEST_BYTES};
use std::io::{BufRead, Read, Write};
use std::process::ExitCode;

/// `nfsim serve` takes no flags: everything is said in the session.
#[derive(clap::Args, Debug)]
pub(crate) struct Args {}

/// Reads one line of at most `MAX_REQUEST_BYTES + 1` bytes into `buf` (without its `\n`),
/// skipping the rest of a longer one. `false` at the end of input.
fn read_line(input: &mut impl BufRead, buf: &mut Vec<u8>) -> std::io::Result<bool> {
    buf.clear();
    let limit = MAX_REQUEST_BYTES as u64 + 1;
    let n = input.by_ref().take(limit).read_until(b'\n', buf)?;
    if n == 0 {
        return Ok(false);
    }
    if buf.last() == Some(&b'\n') {
        buf.pop();
        if buf.last() == Some(&b'\r') {
            buf.pop();
        }
    } else if n as u64 == limit {
        // Too long: skip to the end of the line, holding none of it.
        let mut skipped = Vec::new();
        loop {
            skipped.clear();
            let k = input
                .by_ref()
                .take(1 << 16)
                .read_until(b'\n', &mut skipped)?;
            if k == 0 || skipped.last() == Some(&b'\n') {
                break;
            }
        }
    }
    Ok(true)
}

pub(crate) fn run(_args: Args) -> Result<ExitCode> {
    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    let mut session = Session::new();
    let mut buf = Vec::new();
    while read_line(&mut input, &mut buf).context("reading stdin")? {
        let answer = session.handle_line(&buf);
        if answer.is_empty() {
            continue;
        }
        out.write_all(answer.as_bytes())
            .and_then(|()| out.write_all(b"\n"))
            .and_then(|()| out.flush())
            .context("writing stdout")?;
    }
    Ok(ExitCode::SUCCESS)
}
