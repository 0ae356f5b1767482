//! Printing text that came from outside (a scenario's names, a reconciler's reasons, a rules
//! file's comments, the line an error points at) so that a reader can trust what they see.
//!
//! - [`Escaped`] / [`escape`]: the one escaping every text output uses. A character that
//!   could forge a line, move the cursor, recolour the terminal or reorder what is shown is
//!   printed as an escape; everything else, backslashes included, is printed as it is, so
//!   ordinary text never changes. The forms (those of Rust's `char::escape_debug`):
//!   - `\n`, `\r`, `\t` for newline, carriage return and tab;
//!   - `\x00`–`\x1f` and `\x7f` for the other C0 controls and DEL (`\x1b`, ESC);
//!   - `\u{80}`–`\u{9f}` for the C1 controls, and `\u{…}` for the Unicode controls of
//!     layout: the bidirectional marks, embeddings, overrides and isolates (U+061C,
//!     U+200E, U+200F, U+202A–U+202E, U+2066–U+2069) and the line and paragraph separators
//!     (U+2028, U+2029).
//!
//!   JSON output needs none of this: serde_json escapes control characters itself.
//! - [`Snippet`]: a source line as an error shows it, under [`SNIPPET_CONTEXT_CHARS`]
//!   characters either side of the place (cut with `…`), escaped, with the caret's column.

use std::borrow::Cow;
use std::fmt;

/// Whether `c` is printed as an escape (see the module doc).
pub fn needs_escape(c: char) -> bool {
    matches!(c,
        '\u{0}'..='\u{1f}'
        | '\u{7f}'..='\u{9f}'
        | '\u{61c}'
        | '\u{200e}'
        | '\u{200f}'
        | '\u{2028}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}')
}

/// Writes `c` in its escaped form, or as it is when it needs none.
fn write_char(f: &mut impl fmt::Write, c: char) -> fmt::Result {
    match c {
        '\n' => f.write_str("\\n"),
        '\r' => f.write_str("\\r"),
        '\t' => f.write_str("\\t"),
        '\u{0}'..='\u{1f}' | '\u{7f}' => write!(f, "\\x{:02x}", c as u32),
        c if needs_escape(c) => write!(f, "\\u{{{:x}}}", c as u32),
        c => f.write_char(c),
    }
}

/// How many characters `c` takes once escaped.
fn escaped_width(c: char) -> usize {
    match c {
        '\n' | '\r' | '\t' => 2,
        '\u{0}'..='\u{1f}' | '\u{7f}' => 4,
        c if needs_escape(c) => format!("{:x}", c as u32).len() + 4,
        _ => 1,
    }
}

/// `Display` of a foreign string with its control characters escaped (see the module doc).
#[derive(Clone, Copy, Debug)]
pub struct Escaped<'a>(pub &'a str);

impl fmt::Display for Escaped<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = self.0;
        if !s.chars().any(needs_escape) {
            return f.pad(s);
        }
        let mut out = String::with_capacity(s.len() + 8);
        for c in s.chars() {
            write_char(&mut out, c)?;
        }
        f.pad(&out)
    }
}

/// `s` with its control characters escaped; borrowed when there is none.
pub fn escape(s: &str) -> Cow<'_, str> {
    if s.chars().any(needs_escape) {
        Cow::Owned(Escaped(s).to_string())
    } else {
        Cow::Borrowed(s)
    }
}

/// How many characters of a source line an error shows on each side of the place it points
/// at; a longer line is cut there, each cut marked `…`.
pub const SNIPPET_CONTEXT_CHARS: usize = 60;

/// A source line as an error shows it: at most [`SNIPPET_CONTEXT_CHARS`] characters either
/// side of the place, control characters escaped, and where the caret goes under it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snippet {
    /// The text to print (escaped; `…` where the line was cut).
    pub text: String,
    /// Characters of `text` before the place: the caret's 0-based column.
    pub lead: usize,
    /// Characters of `text` the place covers (at least 1): the caret's width.
    pub width: usize,
}

impl Snippet {
    /// The window of `line` around characters `start..end` (0-based character indices;
    /// an empty or out-of-line range points at one character).
    pub fn new(line: &str, start: usize, end: usize) -> Snippet {
        let len = line.chars().count();
        let start = start.min(len);
        let end = end
            .clamp(start, len)
            .min(start.saturating_add(SNIPPET_CONTEXT_CHARS));
        let from = start.saturating_sub(SNIPPET_CONTEXT_CHARS);
        let to = end
            .max(start + 1)
            .saturating_add(SNIPPET_CONTEXT_CHARS)
            .min(len);
        let mut text = String::new();
        let mut lead = 0;
        let mut width = 0;
        if from > 0 {
            text.push('…');
            lead += 1;
        }
        for (i, c) in line.chars().enumerate().skip(from).take(to - from) {
            let w = escaped_width(c);
            if i < start {
                lead += w;
            } else if i < end {
                width += w;
            }
            // Writing to a String cannot fail.
            let _ = write_char(&mut text, c);
        }
        if to < len {
            text.push('…');
        }
        Snippet {
            text,
            lead,
            width: width.max(1),
        }
    }

    /// The caret line: `lead` spaces and `width` carets.
    pub fn caret(&self) -> String {
        format!("{}{}", " ".repeat(self.lead), "^".repeat(self.width))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_text_is_unchanged_and_controls_are_escaped() {
        for s in ["", "plain", "a\\nb", "ünïcödé …", "tab-free: 10.0.0.1:53"] {
            assert_eq!(escape(s), s);
            assert!(matches!(escape(s), Cow::Borrowed(_)));
        }
        assert_eq!(
            escape("ok\nexpect PASS: x\r\t\u{1b}[2J\u{7f}\u{85}\u{202e}\u{2028}"),
            "ok\\nexpect PASS: x\\r\\t\\x1b[2J\\x7f\\u{85}\\u{202e}\\u{2028}"
        );
        assert_eq!(format!("[{:>5}]", Escaped("a\nb")), "[ a\\nb]");
    }

    #[test]
    fn a_short_line_is_shown_whole_with_the_caret_under_the_place() {
        let s = Snippet::new("    node: n9", 10, 12);
        assert_eq!(s.text, "    node: n9");
        assert_eq!(s.caret(), "          ^^");
    }

    #[test]
    fn a_long_line_is_cut_around_the_place_with_ellipses() {
        let line = format!("{}X{}", "a".repeat(20_000_000), "b".repeat(1000));
        let s = Snippet::new(&line, 20_000_000, 20_000_001);
        assert_eq!(s.text.chars().count(), 1 + 60 + 1 + 60 + 1);
        assert!(s.text.starts_with('…') && s.text.ends_with('…'));
        assert_eq!(s.text.chars().nth(s.lead), Some('X'));
        assert_eq!(s.width, 1);
        // At the start: no leading ellipsis.
        let s = Snippet::new(&line, 0, 1);
        assert!(!s.text.starts_with('…') && s.text.ends_with('…'));
        assert_eq!(s.lead, 0);
        // Past the end: the caret just after the last character.
        let s = Snippet::new("abc", 99, 99);
        assert_eq!((s.text.as_str(), s.lead), ("abc", 3));
    }

    #[test]
    fn multi_byte_characters_and_escapes_keep_the_caret_in_place() {
        let line = format!("{}\u{1b}é{}", "é".repeat(100), "ü".repeat(100));
        let s = Snippet::new(&line, 101, 102);
        assert_eq!(s.text.chars().nth(s.lead), Some('é'));
        assert!(s.text.contains("\\x1b"));
        let before: String = s.text.chars().take(s.lead).collect();
        assert!(before.ends_with("\\x1b"), "{before}");
    }
}
