//! Splitting a line into words, exactly as iptables-restore does (`add_param_to_argv` in
//! iptables' `xshared.c`).

use std::borrow::Cow;

/// One word of a line and where it was.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Token<'a> {
    pub text: Cow<'a, str>,
    pub start: usize,
    pub end: usize,
}

impl Token<'_> {
    pub(crate) fn as_str(&self) -> &str {
        &self.text
    }
}

/// Splits a line into words like iptables-restore (`add_param_to_argv`). Words without
/// escapes borrow from the line.
#[cfg(test)]
pub(crate) fn tokenize(line: &str) -> Result<Vec<Token<'_>>, String> {
    let mut out = Vec::new();
    tokenize_into(line, &mut out)?;
    Ok(out)
}

/// [`tokenize`] into a reused buffer (cleared first).
pub(crate) fn tokenize_into<'a>(line: &'a str, out: &mut Vec<Token<'a>>) -> Result<(), String> {
    out.clear();
    let bytes = line.as_bytes();
    let mut i = 0;
    let n = bytes.len();
    while i < n {
        let c = bytes[i];
        if c == b' ' || c == b'\t' || c == b'\n' {
            i += 1;
            continue;
        }
        let start = i;
        // Fast path: a word of plain characters.
        let mut j = i;
        while j < n && !matches!(bytes[j], b' ' | b'\t' | b'\n' | b'"') {
            j += 1;
        }
        if j == n || bytes[j] != b'"' {
            if j - start >= 1023 {
                return Err("parameter too long (iptables allows 1023 bytes per word)".into());
            }
            out.push(Token {
                text: Cow::Borrowed(&line[start..j]),
                start,
                end: j,
            });
            i = j;
            continue;
        }
        // A word with a quote: the plain prefix, then the quoted part up to the closing
        // quote, which ends the word (even an empty one).
        let mut param: Vec<u8> = bytes[start..j].to_vec();
        let mut k = j + 1;
        let mut escaped = false;
        let mut closed = false;
        let mut plain = true;
        while k < n {
            let c = bytes[k];
            k += 1;
            if escaped {
                param.push(c);
                escaped = false;
            } else if c == b'\\' {
                escaped = true;
                plain = false;
            } else if c == b'"' {
                closed = true;
                break;
            } else {
                param.push(c);
            }
            if param.len() >= 1023 {
                return Err("parameter too long (iptables allows 1023 bytes per word)".into());
            }
        }
        if !closed && param.is_empty() {
            // An unterminated empty quote adds no word.
            break;
        }
        let text = if plain && start == j {
            // "abc" with nothing to unescape: borrow the inside.
            let inner_end = if k > j + 1 && bytes[k - 1] == b'"' {
                k - 1
            } else {
                k
            };
            Cow::Borrowed(&line[j + 1..inner_end])
        } else {
            Cow::Owned(String::from_utf8_lossy(&param).into_owned())
        };
        out.push(Token {
            text,
            start,
            end: k,
        });
        i = k;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn words(s: &str) -> Vec<String> {
        tokenize(s)
            .unwrap()
            .into_iter()
            .map(|t| t.text.into_owned())
            .collect()
    }

    #[test]
    fn tokenizer_follows_add_param_to_argv() {
        assert_eq!(
            words(r#"-m comment --comment "a b" -j X"#),
            ["-m", "comment", "--comment", "a b", "-j", "X"]
        );
        assert_eq!(
            words(r#"--comment "it's \"q\"""#),
            ["--comment", r#"it's "q""#]
        );
        assert_eq!(words(r#"--comment """#), ["--comment", ""]);
        // A closing quote ends the word: abc"def ghi"jkl is two words.
        assert_eq!(words(r#"abc"def ghi"jkl"#), ["abcdef ghi", "jkl"]);
        // Single quotes are ordinary characters.
        assert_eq!(words("'a b'"), ["'a", "b'"]);
        assert_eq!(words("  a\t\tb  "), ["a", "b"]);
    }
}
