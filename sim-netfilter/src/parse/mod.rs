//! Parsing one iptables command line into a [`Command`].
//!
//! The words of a line are split exactly as iptables-restore splits them
//! (`add_param_to_argv` in iptables' `xshared.c`: double quotes group, a backslash escapes the
//! next character inside quotes, a closing quote ends the word). Options are then resolved the
//! way iptables' `getopt_long` table is built: core options first, then the options of each
//! loaded match in load order, then the target's; an exact name wins, otherwise a unique
//! prefix (`--to-dest`, `--dp`). A `-p tcp` followed by an option no loaded match knows loads
//! the protocol's match implicitly, at that position (`load_proto`), which is why
//! `-p tcp -m comment --comment x --dport 80` saves as `-m comment … -m tcp --dport 80`.
//!
//! The rooms: `lexer` splits a line into words; `core_opts` is iptables' own option table
//! (`-A`, `-s`, `-j`, …); `matches` and `target` hold each extension's options and build a
//! [`Match`] or [`Target`] from them; `value` turns one option's argument into a value, with
//! the error naming the option; `parser` walks the words, resolves each option and assembles
//! the [`Command`].

mod core_opts;
mod lexer;
mod matches;
mod parser;
mod target;
mod value;

use crate::rule::*;
use crate::types::*;

#[cfg(test)]
pub(crate) use lexer::tokenize;
pub(crate) use lexer::{tokenize_into, Token};
pub(crate) use parser::parse_command;

/// A parsed command line.
#[derive(Clone, Debug)]
pub(crate) enum Command {
    /// `-A CHAIN rule` (several rules when `-s`/`-d` list several addresses).
    Append { chain: String, rules: Vec<Rule> },
    /// `-I CHAIN [num] rule`.
    Insert {
        chain: String,
        num: u32,
        rules: Vec<Rule>,
    },
    /// `-D CHAIN num`.
    DeleteNum { chain: String, num: u32 },
    /// `-D CHAIN rule`.
    DeleteSpec { chain: String, rules: Vec<Rule> },
    /// `-N CHAIN`.
    NewChain(String),
    /// `-X [CHAIN]`.
    DeleteChain(Option<String>),
    /// `-F [CHAIN]`.
    Flush(Option<String>),
    /// `-P CHAIN POLICY`.
    Policy { chain: String, policy: Policy },
    /// `-Z [CHAIN]`.
    Zero(Option<String>),
}

/// An extension option: name, id within the extension, number of arguments, invertible.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct OptDef {
    name: &'static str,
    id: u8,
    args: u8,
    inv: bool,
}

const fn o(name: &'static str, id: u8, args: u8, inv: bool) -> OptDef {
    OptDef {
        name,
        id,
        args,
        inv,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::{RuleError, RuleErrorKind};

    fn rule(s: &str) -> Result<Vec<Rule>, RuleError> {
        match parse_command(&tokenize(s).unwrap(), Table::Filter, Family::Ipv4)? {
            Command::Append { rules, .. } => Ok(rules),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn implicit_protocol_match_is_loaded_where_its_option_appears() {
        let r = rule("-A X -p tcp -m comment --comment x --dport 80").unwrap();
        assert_eq!(r[0].matches.len(), 2);
        assert_eq!(r[0].matches[0].name(), "comment");
        assert_eq!(r[0].matches[1].name(), "tcp");
    }

    #[test]
    fn abbreviations_resolve_like_getopt() {
        let r = rule("-A X -p tcp --dp 80").unwrap();
        assert!(matches!(&r[0].matches[0], Match::Tcp(t) if t.dport == PortRange::single(80)));
        // --d is ambiguous (--delete, --destination, --dst, --dport…): unknown option.
        let e = rule("-A X -p tcp --d 80").unwrap_err();
        assert_eq!(e.kind, RuleErrorKind::UnknownOption("--d".into()));
        assert_eq!(e.token, Some(4));
    }

    #[test]
    fn multiple_addresses_give_multiple_rules() {
        let r = rule("-A X -s 10.0.0.1,10.0.0.2 -d 1.1.1.1,2.2.2.2 -j ACCEPT").unwrap();
        assert_eq!(r.len(), 4);
        assert!(rule("-A X ! -s 10.0.0.1,10.0.0.2").is_err());
    }

    #[test]
    fn errors_name_the_option() {
        let e = rule("-A X -m statistic --mode nth --every 3").unwrap_err();
        assert!(e.to_string().contains("--packet"), "{e}");
        let e = rule("-A X --foo").unwrap_err();
        assert_eq!(e.kind, RuleErrorKind::UnknownOption("--foo".into()));
        let e = rule("-A X -m limit --limit 1/s").unwrap_err();
        assert_eq!(e.kind, RuleErrorKind::UnknownMatch("limit".into()));
        let e = rule("-A X -j NFLOG").unwrap_err();
        assert_eq!(e.kind, RuleErrorKind::UnsupportedTarget("NFLOG".into()));
        assert!(rule("-A X -p tcp --dport 80:70").is_err());
        assert!(rule("-A X -m tcp --dport 80").is_err());
        assert!(rule("-A X -j DNAT --to-destination 1.2.3.4").is_err());
    }

    #[test]
    fn mark_forms_store_value_and_mask() {
        let t = |s: &str| rule(s).unwrap()[0].target.clone();
        assert_eq!(
            t("-A X -j MARK --or-mark 0x4000"),
            Target::Mark {
                value: 0x4000,
                mask: 0x4000
            }
        );
        assert_eq!(
            t("-A X -j MARK --xor-mark 0x4000"),
            Target::Mark {
                value: 0x4000,
                mask: 0
            }
        );
        assert_eq!(
            t("-A X -j MARK --and-mark 0x20"),
            Target::Mark {
                value: 0,
                mask: !0x20
            }
        );
        assert_eq!(
            t("-A X -j MARK --set-mark 0x1/0x2"),
            Target::Mark { value: 1, mask: 3 }
        );
    }
}
