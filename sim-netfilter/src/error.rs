//! Errors. Every error caused by input says what was wrong and what was expected; restore
//! errors also name the line, show it, and put a caret under the offending word.

use std::fmt;

use crate::types::Table;

/// What was wrong with the arguments of one rule or command line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RuleErrorKind {
    /// An option no loaded extension knows.
    #[error("unknown option {0:?} (not a core option, and no loaded match or target takes it)")]
    UnknownOption(String),
    /// A word where an option was expected.
    #[error("bad argument {0:?}: expected an option such as -s, -p, -m or -j")]
    BadArgument(String),
    /// `-m NAME` for a match nfsim does not model.
    #[error("unknown or unsupported match {0:?} (supported: tcp, udp, sctp, icmp, multiport, statistic, mark, conntrack, state, addrtype, comment, recent, nfacct, physdev)")]
    UnknownMatch(String),
    /// `-j NAME` for an iptables target nfsim does not model.
    #[error("unsupported target {0:?} (supported: ACCEPT, DROP, RETURN, REJECT, DNAT, SNAT, MASQUERADE, REDIRECT, MARK, CONNMARK, CT --notrack, NOTRACK, LOG, TRACE, or a user chain)")]
    UnsupportedTarget(String),
    /// An option value that does not parse or is out of range.
    #[error("bad value {value:?} for {option}: {expected}")]
    BadValue {
        /// The option (`--dport`).
        option: String,
        /// The value given.
        value: String,
        /// What was expected.
        expected: String,
    },
    /// An option given without its argument.
    #[error("option {0} needs an argument")]
    MissingArgument(String),
    /// The same option twice where it may appear once.
    #[error("option {0} can only be used once")]
    Repeated(String),
    /// `!` before an option that cannot be inverted.
    #[error("option {0} cannot be inverted with `!`")]
    CannotInvert(String),
    /// `!` at the end or twice.
    #[error("`!` must be followed by exactly one invertible option")]
    DanglingInvert,
    /// No command (`-A`, `-I`, …) on the line.
    #[error("no command: expected -A, -I, -D, -N, -X, -F, -P or -Z")]
    NoCommand,
    /// An iptables command or option nfsim does not take in a restore.
    #[error("{0} is not supported here (supported commands: -A, -I, -D, -N, -X, -F, -P, -Z)")]
    Unsupported(String),
    /// Any other inconsistency, described.
    #[error("{0}")]
    Invalid(String),
}

/// An error in one rule line, with the index of the word it is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RuleError {
    /// What was wrong.
    pub kind: RuleErrorKind,
    /// Index of the offending word in the line's words, when known.
    pub token: Option<usize>,
}

impl RuleError {
    pub(crate) fn at(kind: RuleErrorKind, token: usize) -> RuleError {
        RuleError {
            kind,
            token: Some(token),
        }
    }
    pub(crate) fn new(kind: RuleErrorKind) -> RuleError {
        RuleError { kind, token: None }
    }
}

impl fmt::Display for RuleError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&self.kind, f)
    }
}

impl std::error::Error for RuleError {}

/// Why a restore (or a single command) failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RestoreErrorKind {
    /// A rule or command line did not parse.
    #[error("{0}")]
    Rule(RuleErrorKind),
    /// `*NAME` with an unknown table.
    #[error("unknown table {0:?} (expected raw, mangle, filter or nat)")]
    UnknownTable(String),
    /// A line that is only valid inside `*table … COMMIT`.
    #[error("{0} outside of a table: expected a `*table` line first")]
    OutsideTable(&'static str),
    /// The input ended inside a table.
    #[error("COMMIT expected before the end of the input (table {0} is still open)")]
    MissingCommit(Table),
    /// `:CHAIN` without a policy field, or a bad one.
    #[error(
        "bad policy {0:?}: expected ACCEPT or DROP for a built-in chain, `-` for a user chain"
    )]
    BadPolicy(String),
    /// A chain name that is too long, starts with `-`/`!`, or clashes with a target.
    #[error("invalid chain name {name:?}: {why}")]
    BadChainName {
        /// The name.
        name: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// A `[packets:bytes]` field that does not parse.
    #[error("bad counters {0:?}: expected [packets:bytes]")]
    BadCounters(String),
    /// `-N` of an existing chain.
    #[error("chain {0:?} already exists")]
    ChainExists(String),
    /// A command naming a chain that does not exist.
    #[error("no chain named {0:?} in this table")]
    NoSuchChain(String),
    /// A rule jumps to a chain that does not exist at COMMIT.
    #[error("chain {target:?} does not exist (jumped to from chain {from:?})")]
    DanglingJump {
        /// The missing chain.
        target: String,
        /// The chain holding the rule.
        from: String,
    },
    /// A jump to a built-in chain.
    #[error("cannot jump to built-in chain {0:?}")]
    JumpToBuiltin(String),
    /// `-X` of a chain that still has rules or is referenced.
    #[error(
        "cannot delete chain {0:?}: it still has rules or is referenced (device or resource busy)"
    )]
    ChainBusy(String),
    /// `-X` of a built-in chain.
    #[error("cannot delete built-in chain {0:?}")]
    DeleteBuiltin(String),
    /// `-P` on a user chain.
    #[error("bad built-in chain name {0:?} for a policy")]
    NotBuiltin(String),
    /// `-I`/`-D` with a rule number past the end.
    #[error("rule number {num} is too big: chain {chain:?} has {len} rules")]
    IndexTooBig {
        /// The chain.
        chain: String,
        /// The number given.
        num: u32,
        /// The chain's length.
        len: usize,
    },
    /// `-D` with a specification that matches no rule.
    #[error("no rule matching that specification in chain {0:?}")]
    NoMatchingRule(String),
    /// A jump loop reachable from a built-in chain.
    #[error("loop detected: chain {0:?} can reach itself")]
    Loop(String),
    /// More than 15 nested jumps below a built-in chain (nf_tables' jump stack).
    #[error("too many levels of nested chains below {0} (nf_tables allows 15 jumps deep)")]
    TooDeep(String),
    /// A target or match used in a hook it does not support (e.g. DNAT in POSTROUTING).
    #[error("{what} cannot be used in chain {chain:?}: it is reached from hook {hook}, but {what} is only valid in {valid}")]
    WrongHook {
        /// The extension (`DNAT`, `addrtype --limit-iface-in`).
        what: &'static str,
        /// The chain holding the rule.
        chain: String,
        /// The hook that reaches it.
        hook: &'static str,
        /// Where it is valid.
        valid: &'static str,
    },
    /// `-m nfacct` naming an object that does not exist (`nfacct add` it first).
    #[error("nfacct object {0:?} does not exist (create it with Ruleset::nfacct_add)")]
    NoSuchNfacct(String),
    /// `-m set --match-set` naming a set that does not exist (`ipset restore` it first).
    #[error("Set {0} doesn't exist.")]
    NoSuchSet(String),
}

/// A failed restore: the line, its text, what was wrong, and which earlier tables had already
/// been committed (iptables-restore commits each `*table … COMMIT` block on its own; the
/// failing block changes nothing).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RestoreError {
    /// 1-based line number.
    pub line: usize,
    /// The line's text.
    pub text: String,
    /// What was wrong.
    pub kind: RestoreErrorKind,
    /// Byte span of the offending word within the line, for the caret.
    pub span: Option<(usize, usize)>,
    /// Tables committed by earlier blocks of the same input before the failure.
    pub committed: Vec<Table>,
}

impl fmt::Display for RestoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}: {}", self.line, self.kind)?;
        if !self.text.is_empty() {
            // A bounded window around the word, escaped (sim_core::text::Snippet): a 20 MB
            // line shows as about 120 characters.
            let chars_to = |byte: usize| {
                let mut b = byte.min(self.text.len());
                while !self.text.is_char_boundary(b) {
                    b -= 1;
                }
                self.text[..b].chars().count()
            };
            let (start, end) = match self.span {
                Some((a, b)) => (chars_to(a), chars_to(b)),
                None => (0, 0),
            };
            let snip = sim_core::text::Snippet::new(&self.text, start, end);
            write!(f, "\n  {}", snip.text)?;
            if self.span.is_some() {
                write!(f, "\n  {}", snip.caret())?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for RestoreError {}

#[cfg(test)]
mod tests {
    use super::*;

    fn shown(text: String, span: Option<(usize, usize)>) -> String {
        RestoreError {
            line: 3,
            text,
            kind: RestoreErrorKind::Rule(RuleErrorKind::DanglingInvert),
            span,
            committed: Vec::new(),
        }
        .to_string()
    }

    #[test]
    fn a_huge_line_is_cut_around_the_caret() {
        // The whole line was echoed (a 20 MB line: 20 MB on stderr, issue 31); here 4 MB.
        let pad = "é".repeat(1_000_000);
        let text = format!("-A X {pad} --dport BAD {pad}");
        let a = text.find("BAD").unwrap();
        let out = shown(text, Some((a, a + 3)));
        assert!(out.len() < 1000, "{} bytes", out.len());
        let lines: Vec<&str> = out.lines().collect();
        let caret = lines[2].find('^').unwrap();
        let at: String = lines[1].chars().skip(caret).take(3).collect();
        assert_eq!(at, "BAD", "{out}");
        assert_eq!(lines[2].trim(), "^^^");
    }

    #[test]
    fn an_ordinary_line_shows_as_before_and_controls_are_escaped() {
        let out = shown("-A X -p tcp !".into(), Some((12, 13)));
        assert_eq!(out, "line 3: `!` must be followed by exactly one invertible option\n  -A X -p tcp !\n              ^");
        let out = shown("-A X \u{1b}[2J !".into(), Some((10, 11)));
        assert!(out.ends_with("-A X \\x1b[2J !\n               ^"), "{out}");
    }
}
