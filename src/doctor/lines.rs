//! Where a rule the tracer names (`nat KUBE-SVC-X #2`, `ip kube-proxy services #1`) is in the
//! rules text the doctor was given, so a finding can cite the line.
//!
//! This is a map, not a parser: the rules were loaded by sim-netfilter, which refused any
//! text it could not read. In iptables-save text (`*nat` … `-A CHAIN …` … `COMMIT`) the N-th
//! `-A CHAIN` line of a table is rule N of the chain; a file that also inserts or deletes
//! (`-I`, `-D`, `-R`) has no such map and gets none. nft text is either `nft -f` commands
//! (`add rule ip kube-proxy CHAIN …`: the N-th such line of a chain is rule N) or the
//! `nft list ruleset` form (`chain NAME {` then one rule per line, after the chain's
//! `type …;`/`comment …` lines).

use std::collections::BTreeMap;

/// Rule → 1-based line of the text.
#[derive(Clone, Debug, Default)]
pub struct RuleLines {
    /// `(table key, chain, rule number)` → line; the table key is `nat` for iptables and
    /// `ip kube-proxy` for nft.
    map: BTreeMap<(String, String, usize), usize>,
}

impl RuleLines {
    /// The map of `text`.
    pub fn of(text: &str) -> RuleLines {
        let mut map = BTreeMap::new();
        let mut counts: BTreeMap<(String, String), usize> = BTreeMap::new();
        let mut table = String::new();
        let mut nft_table: Option<String> = None;
        let mut nft_chain: Option<String> = None;
        let mut in_chain_header = false;
        let mut in_set = false;
        let mut ipt_unmappable = false;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let t = raw.trim();
            let mut bump = |key: (String, String)| {
                let n = counts.entry(key.clone()).or_insert(0);
                *n += 1;
                map.insert((key.0, key.1, *n), line);
            };
            if let Some(name) = t.strip_prefix('*') {
                table = name.trim().to_string();
                continue;
            }
            if t.starts_with("-I ") || t.starts_with("-D ") || t.starts_with("-R ") {
                ipt_unmappable = true;
            }
            if let Some(rest) = t.strip_prefix("-A ") {
                if let Some(chain) = rest.split_whitespace().next() {
                    bump((table.clone(), chain.to_string()));
                }
                continue;
            }
            // nft commands: `add rule FAMILY TABLE CHAIN …`.
            let words: Vec<&str> = t.split_whitespace().collect();
            if words.len() > 5 && words[0] == "add" && words[1] == "rule" {
                bump((format!("{} {}", words[2], words[3]), words[4].to_string()));
                continue;
            }
            // nft list form.
            if words.len() >= 3 && words[0] == "table" && words.last() == Some(&"{") {
                nft_table = Some(format!("{} {}", words[1], words[2]));
                continue;
            }
            if words.len() == 3 && words[0] == "chain" && words[2] == "{" {
                nft_chain = Some(words[1].to_string());
                in_chain_header = true;
                continue;
            }
            if words.len() == 3 && (words[0] == "set" || words[0] == "map") && words[2] == "{" {
                in_set = true;
                continue;
            }
            if t == "}" {
                if in_set {
                    in_set = false;
                } else if nft_chain.take().is_none() {
                    nft_table = None;
                }
                continue;
            }
            if let (Some(tb), Some(ch)) = (&nft_table, &nft_chain) {
                if t.is_empty() {
                    continue;
                }
                if in_chain_header && (t.starts_with("type ") || t.starts_with("comment ")) {
                    continue;
                }
                in_chain_header = false;
                bump((tb.clone(), ch.clone()));
            }
        }
        if ipt_unmappable {
            map.retain(|(t, _, _), _| t.contains(' '));
        }
        RuleLines { map }
    }

    /// The line of a rule as the tracer names it: `nat KUBE-SVC-X #2: …` or
    /// `ip kube-proxy services #1: …`.
    pub fn line_of(&self, matched: &str) -> Option<usize> {
        let (head, _) = matched.split_once(": ")?;
        let (place, num) = head.rsplit_once(" #")?;
        let num: usize = num.parse().ok()?;
        let (table, chain) = place.rsplit_once(' ')?;
        self.map
            .get(&(table.to_string(), chain.to_string(), num))
            .copied()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iptables_save_rules_map_to_their_lines() {
        let text = "*filter\n:INPUT ACCEPT [0:0]\n-A INPUT -j ACCEPT\nCOMMIT\n*nat\n:X - [0:0]\n-A X -j RETURN\n-A X -j ACCEPT\nCOMMIT\n";
        let m = RuleLines::of(text);
        assert_eq!(m.line_of("nat X #2: -j ACCEPT"), Some(8));
        assert_eq!(m.line_of("filter INPUT #1: -j ACCEPT"), Some(3));
        assert_eq!(m.line_of("nat X #3: -j ACCEPT"), None);
        let inserted = RuleLines::of("*nat\n:X - [0:0]\n-A X -j RETURN\n-I X -j ACCEPT\nCOMMIT\n");
        assert_eq!(inserted.line_of("nat X #1: -j ACCEPT"), None);
    }

    #[test]
    fn nft_commands_and_listings_map_to_their_lines() {
        let cmds = "add table ip kube-proxy\nadd chain ip kube-proxy services\nadd rule ip kube-proxy services ip daddr 1.2.3.4 drop\nadd rule ip kube-proxy services accept\n";
        let m = RuleLines::of(cmds);
        assert_eq!(m.line_of("ip kube-proxy services #2: accept"), Some(4));
        let listing = "table ip kube-proxy {\n\tmap m {\n\t\ttype ipv4_addr : verdict\n\t}\n\n\tchain nat-prerouting {\n\t\ttype nat hook prerouting priority dstnat; policy accept;\n\t\tjump services\n\t}\n\n\tchain services {\n\t\tip daddr 1.2.3.4 drop\n\t}\n}\n";
        let m = RuleLines::of(listing);
        assert_eq!(
            m.line_of("ip kube-proxy nat-prerouting #1: jump services"),
            Some(8)
        );
        assert_eq!(
            m.line_of("ip kube-proxy services #1: ip daddr 1.2.3.4 drop"),
            Some(12)
        );
    }
}
