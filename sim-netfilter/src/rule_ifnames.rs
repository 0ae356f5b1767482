//! Interface names in rules: which rules name an interface a node does not have.
//!
//! A rule with `-i tcli` (iptables) or `iifname "cali*"` (nft) never matches on a node
//! without such an interface, and a negated one always does: where nfsim's node lacks an
//! interface the real node had, marks and NAT quietly differ. [`rule_interface_warnings`]
//! says so, per rule, with its line.

/// Whether `rules` is nft command text (`nft -f`: its first command is `add`, `create`,
/// `insert`, `replace`, `delete`, `destroy`, `flush` or `table`) rather than iptables-restore
/// text (`*filter`, `:CHAIN`, `-A …`, `COMMIT`). Comments and blank lines are skipped.
pub fn is_nft_text(rules: &str) -> bool {
    let first = rules
        .lines()
        .map(str::trim)
        .find(|l| !l.is_empty() && !l.starts_with('#'))
        .and_then(|l| l.split_whitespace().next());
    matches!(
        first,
        Some("add" | "create" | "insert" | "replace" | "delete" | "destroy" | "flush" | "table")
    )
}

/// One warning per rule of `rules` (read from `file`) that names an interface not in `have`
/// (`-i`/`-o` of iptables text, `iifname`/`oifname` of nft text; a `+` or `*` suffix matches by
/// prefix, as the kernel's `ifname_compare` and nft's wildcard do): such a rule never matches
/// on the node (or, negated, always does), where on the real node it may. In `have`, a name, ending in `+`
/// stands for every name with that prefix (`veth+`: a scenario node's pods' interfaces, one
/// per pod); `node` names the node in the message (`this node`, `node node-2`).
pub fn rule_interface_warnings(
    rules: &str,
    file: &str,
    have: &[String],
    node: &str,
) -> Vec<String> {
    let family = |h: &str| h.strip_suffix('+').map(str::to_string);
    let nft = is_nft_text(rules);
    let flags: &[&str] = if nft {
        &["iifname", "oifname"]
    } else {
        &["-i", "--in-interface", "-o", "--out-interface"]
    };
    let mut out = Vec::new();
    for (i, line) in rules.lines().enumerate() {
        let l = line.trim();
        let is_rule = if nft {
            l.starts_with("add rule ") || l.starts_with("insert rule ")
        } else {
            l.starts_with("-A ") || l.starts_with("-I ") || l.starts_with('[')
        };
        if !is_rule {
            continue;
        }
        let words: Vec<&str> = l.split_whitespace().collect();
        for (j, w) in words.iter().enumerate() {
            if !flags.contains(w) {
                continue;
            }
            let mut v = words.get(j + 1).copied().unwrap_or_default();
            if v == "!=" || v == "==" {
                v = words.get(j + 2).copied().unwrap_or_default();
            }
            let name = v.trim_matches('"');
            if name.is_empty() || name == "+" || name == "*" {
                continue;
            }
            let found = match name.strip_suffix('+').or_else(|| name.strip_suffix('*')) {
                Some(prefix) => have.iter().any(|h| match family(h) {
                    Some(f) => f.starts_with(prefix) || prefix.starts_with(f.as_str()),
                    None => h.starts_with(prefix),
                }),
                None => have.iter().any(|h| match family(h) {
                    Some(f) => name.starts_with(f.as_str()) && name.len() > f.len(),
                    None => h == name,
                }),
            };
            if !found {
                out.push(format!(
                    "{file}:{}: the rule names interface {name}, which {node} lacks (it has {}), so it never matches here (negated: always): {l}",
                    i + 1,
                    have.join(", ")
                ));
            }
        }
    }
    out
}
