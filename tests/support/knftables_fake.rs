//! What upstream's kube-proxy unit tests compare: the state a transaction leaves in one
//! nftables table, dumped one `add` line per object, and the sort upstream applies to both
//! sides before comparing.
//!
//! Facts from kubernetes-sigs/knftables `fake.go` (`Fake.Run` applies `add` / `flush` /
//! `delete` of tables, chains, rules, sets, maps and elements to an in-memory table;
//! `Fake.Dump` writes the table back as `add table`, `add chain`, `add set`, `add map`,
//! `add rule` and `add element` lines, a rule and an element as they were added) and from
//! kubernetes `pkg/proxy/nftables/helpers_test.go` (`sortNFTablesTransaction`,
//! `diffNFTablesTransaction`) at 81810de635aa13aa0a32992f6def3aa9d6025ebc.

use std::collections::BTreeMap;

#[derive(Default)]
struct Chain {
    header: String,
    rules: Vec<String>,
}

#[derive(Default)]
struct Container {
    header: String,
    /// key -> the whole `add element` line.
    elements: BTreeMap<String, String>,
}

/// One table, as a knftables `Fake` holds it.
#[derive(Default)]
pub struct FakeTable {
    table: Option<String>,
    chains: BTreeMap<String, Chain>,
    containers: BTreeMap<String, Container>,
}

/// The key of an element line's `{ KEY [comment "…"] [: VALUE] }`.
fn element_key(rest: &str) -> String {
    let inner = rest
        .trim()
        .trim_start_matches('{')
        .trim_end_matches('}')
        .trim();
    let inner = inner.split(" : ").next().unwrap_or(inner);
    let inner = inner.split(" comment ").next().unwrap_or(inner);
    inner.trim().to_string()
}

impl FakeTable {
    /// Applies one transaction (`nft -f` text of table `ip kube-proxy`, or `ip6 kube-proxy`:
    /// one fake holds one table), as `Fake.Run`.
    pub fn run(&mut self, tx: &str) {
        for line in tx.lines().map(str::trim).filter(|l| !l.is_empty()) {
            let w: Vec<&str> = line.splitn(6, ' ').collect();
            assert!(w.len() >= 4, "short line {line:?}");
            assert!(
                matches!((w[2], w[3]), ("ip" | "ip6", "kube-proxy")),
                "{line}"
            );
            let name = w.get(4).copied().unwrap_or("").to_string();
            let rest = w.get(5).copied().unwrap_or("");
            match (w[0], w[1]) {
                ("add", "table") => {
                    self.table.get_or_insert_with(|| line.to_string());
                }
                ("delete", "table") => *self = FakeTable::default(),
                ("add", "chain") => {
                    self.chains.entry(name).or_insert_with(|| Chain {
                        header: line.to_string(),
                        rules: Vec::new(),
                    });
                }
                ("flush", "chain") => self.chains.get_mut(&name).expect(line).rules.clear(),
                ("delete", "chain") => {
                    self.chains.remove(&name).expect(line);
                }
                ("add", "rule") => self
                    .chains
                    .get_mut(&name)
                    .expect(line)
                    .rules
                    .push(line.into()),
                ("add", "set" | "map") => {
                    self.containers.entry(name).or_insert_with(|| Container {
                        header: line.to_string(),
                        elements: BTreeMap::new(),
                    });
                }
                ("flush", "set" | "map") => {
                    self.containers.get_mut(&name).expect(line).elements.clear()
                }
                ("delete", "set" | "map") => {
                    self.containers.remove(&name).expect(line);
                }
                ("add", "element") => {
                    let c = self.containers.get_mut(&name).expect(line);
                    c.elements.insert(element_key(rest), line.to_string());
                }
                ("delete", "element") => {
                    let c = self.containers.get_mut(&name).expect(line);
                    c.elements.remove(&element_key(rest)).expect(line);
                }
                _ => panic!("unexpected transaction line {line:?}"),
            }
        }
    }

    /// `Fake.Dump`: one `add` line per object.
    pub fn dump(&self) -> String {
        let mut out = Vec::new();
        out.extend(self.table.clone());
        for c in self.containers.values() {
            out.push(c.header.clone());
        }
        for c in self.chains.values() {
            out.push(c.header.clone());
        }
        for c in self.chains.values() {
            out.extend(c.rules.iter().cloned());
        }
        for c in self.containers.values() {
            out.extend(c.elements.values().cloned());
        }
        out.join("\n")
    }
}

/// `objectOrder`: higher sorts first.
fn object_order(t: &str) -> i32 {
    match t {
        "table" => 10,
        "chain" => 9,
        "rule" => 8,
        "set" => 7,
        "map" => 6,
        "element" => 5,
        _ => 0,
    }
}

/// `sortNFTablesTransaction`: drop blank and `#` lines; sort by object type (table, chain,
/// rule, set, map, element), then by object name; rules of one chain keep their order,
/// other lines of one object sort as whole lines.
pub fn sort_transaction(tx: &str) -> String {
    let lines: Vec<&str> = tx
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    let mut keyed: Vec<(i32, String, usize, String)> = lines
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let w: Vec<&str> = l.split(' ').collect();
            assert!(w.len() >= 5, "every line has at least 5 words: {l:?}");
            let tie = if w[1] == "rule" {
                (i, String::new())
            } else {
                (0, l.to_string())
            };
            (-object_order(w[1]), w[4].to_string(), tie.0, tie.1)
        })
        .collect();
    keyed.sort();
    keyed
        .into_iter()
        .map(|(_, _, i, l)| {
            if l.is_empty() {
                lines[i].to_string()
            } else {
                l
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
}
