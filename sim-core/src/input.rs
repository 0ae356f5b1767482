//! Reading input files with a size limit: a file larger than the limit (or an endless one,
//! such as `/dev/zero` or a pipe that never ends) is refused after reading at most one byte
//! beyond the limit, instead of being read until memory runs out.

use std::io::{self, Read};
use std::path::Path;

/// The largest scenario file nfsim reads: 64 MiB.
pub const MAX_SCENARIO_BYTES: u64 = 64 << 20;
/// The largest rules file (iptables-save / iptables-restore / nft text): 512 MiB (a
/// 10,000-Service kube-proxy dump is about 15 MiB).
pub const MAX_RULES_BYTES: u64 = 512 << 20;
/// The largest capture file (pcap or pcapng): 1 GiB.
pub const MAX_CAPTURE_BYTES: u64 = 1 << 30;
/// The largest results file `nfsim sweep merge` reads (JSON lines, one per run): 1 GiB (a
/// run's line is well under 1 KiB, so over a million runs).
pub const MAX_RESULTS_BYTES: u64 = 1 << 30;

/// `n` bytes in words (`64 MiB`).
pub fn size_words(n: u64) -> String {
    if n >= 1 << 30 && n % (1 << 30) == 0 {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 && n % (1 << 20) == 0 {
        format!("{} MiB", n >> 20)
    } else {
        format!("{n} bytes")
    }
}

/// Reads all of `path`, refusing more than `limit` bytes with an
/// [`io::ErrorKind::FileTooLarge`] error naming the limit (`what` names it, as
/// `MAX_SCENARIO_BYTES`).
pub fn read_limited(path: &Path, limit: u64, what: &str) -> io::Result<Vec<u8>> {
    let f = std::fs::File::open(path)?;
    let too_large = || {
        io::Error::new(
            io::ErrorKind::FileTooLarge,
            format!(
                "the file is larger than {}, the most nfsim reads ({what})",
                size_words(limit)
            ),
        )
    };
    if let Ok(m) = f.metadata() {
        if m.is_file() && m.len() > limit {
            return Err(too_large());
        }
    }
    let mut buf = Vec::new();
    f.take(limit + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > limit {
        return Err(too_large());
    }
    Ok(buf)
}

/// [`read_limited`] as UTF-8 text.
pub fn read_text_limited(path: &Path, limit: u64, what: &str) -> io::Result<String> {
    String::from_utf8(read_limited(path, limit, what)?).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        )
    })
}

/// `s` quoted as Rust's `{:?}` writes a string (quotes, control characters escaped), cut
/// after its first `max_chars` characters with `…` after the closing quote when longer: an
/// error that quotes foreign input stays short however long the input is.
pub fn quote_excerpt(s: &str, max_chars: usize) -> String {
    match s.char_indices().nth(max_chars) {
        None => format!("{s:?}"),
        Some((cut, _)) => format!("{:?}…", &s[..cut]),
    }
}

/// `s` as it is when at most `max_chars` characters, else its first `max_chars` and `…`
/// (unquoted, for messages that print a value bare: `mark=12x: not a number`).
pub fn cut(s: &str, max_chars: usize) -> std::borrow::Cow<'_, str> {
    match s.char_indices().nth(max_chars) {
        None => s.into(),
        Some((at, _)) => format!("{}…", &s[..at]).into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_endless_file_is_refused_at_the_limit() {
        let p = Path::new("/dev/zero");
        if !p.exists() {
            return;
        }
        let e = read_limited(p, 1000, "TEST_LIMIT").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("larger than 1000 bytes"), "{e}");
        assert_eq!(size_words(MAX_SCENARIO_BYTES), "64 MiB");
        assert_eq!(size_words(MAX_CAPTURE_BYTES), "1 GiB");
    }

    #[test]
    fn a_file_within_the_limit_is_read_whole() {
        let dir = std::env::temp_dir().join(format!("sim-core-input-{}", std::process::id()));
        std::fs::write(&dir, b"12345").unwrap();
        assert_eq!(read_limited(&dir, 5, "X").unwrap(), b"12345");
        assert_eq!(
            read_limited(&dir, 4, "X").unwrap_err().kind(),
            io::ErrorKind::FileTooLarge
        );
        let _ = std::fs::remove_file(dir);
    }

    #[test]
    fn excerpts_are_cut_at_a_character_and_escaped() {
        assert_eq!(quote_excerpt("a\nb", 5), "\"a\\nb\"");
        assert_eq!(quote_excerpt("ééé", 2), "\"éé\"…");
        assert_eq!(quote_excerpt(&"x".repeat(1 << 20), 3), "\"xxx\"…");
        assert_eq!(cut("abcd", 4), "abcd");
        assert_eq!(cut("abcdé", 4), "abcd…");
    }
}
