//! The rooms of the `nfsim` library stand on each other in one order, and no room names a
//! room above it.
//!
//! The crates are layered by Cargo (sim-core ← sim-conntrack ← sim-netfilter ← nfsim); inside
//! `nfsim` nothing but this test keeps the modules from pointing both ways. [`ROOMS`] is the
//! order, lowest first: the model of what to run (`k8s`, `kubeproxy`, `scenario`) below the
//! cluster that runs it, the cluster below what explains, sweeps and reports on runs, and the
//! testkit above them all. A file of `src/ROOM/` (or `src/ROOM.rs`) may name its own room and
//! the rooms below; a path to a room of its own level or above (`crate::explain::…` in
//! `cluster`, or `super::super::cluster` reaching the crate root from `scenario`) fails the
//! test with the file and the line. The binary (`src/main.rs`, `src/cli/`) stands above the
//! whole library and is not checked.
//!
//! Paths are read from the code, not from comments (a doc link upward is a reader's pointer,
//! not a dependency): lines whose text starts with `//` are skipped, and a `//` later on a
//! line ends what is read of it, unless it is inside a string.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The library's top-level modules, lowest first, with their level; a room may use only
/// rooms of a lower level.
const ROOMS: &[(&str, u8)] = &[
    // The Kubernetes objects nfsim reads, and how a rules file's load error is said.
    ("k8s", 0),
    ("rules_error", 0),
    // kube-proxy: objects in, rules out.
    ("kubeproxy", 1),
    // DNS messages, zones, resolv.conf and the C libraries' stub resolvers (sans-IO).
    ("dns", 1),
    // What to run: the scenario model, its loader and its types.
    ("scenario", 2),
    // How it runs: the cluster simulation.
    ("cluster", 3),
    // Above the runs: packet explanation and replay, sweeps, reports.
    ("explain", 4),
    // The doctor: a node's state audited, on top of explain.
    ("doctor", 5),
    ("sweep", 5),
    ("report", 6),
    // The front door for code.
    ("testkit", 7),
    // The testkit over line-delimited JSON (`nfsim serve`).
    ("serve", 8),
];

/// One path from a room to a room not below it.
#[derive(Debug, PartialEq, Eq)]
struct Violation {
    file: String,
    line: usize,
    from: String,
    to: String,
}

/// The code of one line: up to a `//` comment, string literals blanked (so that a
/// `"crate::x"` in a message or a `"http://"` does not count).
fn code_of(line: &str) -> String {
    if line.trim_start().starts_with("//") {
        return String::new();
    }
    let mut out = String::with_capacity(line.len());
    let mut in_str = false;
    let mut chars = line.chars().peekable();
    while let Some(c) = chars.next() {
        if in_str {
            match c {
                '\\' => {
                    chars.next();
                }
                '"' => {
                    in_str = false;
                    out.push('"');
                }
                _ => out.push(' '),
            }
            continue;
        }
        match c {
            '"' => {
                in_str = true;
                out.push('"');
            }
            '/' if chars.peek() == Some(&'/') => break,
            _ => out.push(c),
        }
    }
    out
}

/// The module path of a file under `src/` (`cluster/sim/mod.rs` → `[cluster, sim]`).
fn module_path(rel: &Path) -> Vec<String> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().unwrap_or_default();
    let stem = last.strip_suffix(".rs").unwrap_or(&last).to_string();
    if stem != "mod" && stem != "lib" {
        parts.push(stem);
    }
    parts
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The first identifier of `s` (after spaces).
fn ident(s: &str) -> String {
    s.trim_start()
        .chars()
        .take_while(|&c| is_ident(c))
        .collect()
}

/// The first names of the paths in a `{…}` group that starts `s` (`{a::b, c::{d}}` → `[a, c]`);
/// `None` when the group does not close in `s`.
fn group_heads(s: &str) -> Option<Vec<String>> {
    let mut depth = 0usize;
    let mut heads = Vec::new();
    let mut at_item = false;
    for (i, c) in s.char_indices() {
        match c {
            '{' => {
                depth += 1;
                if depth == 1 {
                    at_item = true;
                }
            }
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(heads);
                }
            }
            ',' if depth == 1 => at_item = true,
            c if at_item && depth == 1 && !c.is_whitespace() => {
                at_item = false;
                heads.push(ident(&s[i..]));
            }
            _ => {}
        }
    }
    None
}

/// The first names of what follows `crate::` (or `super::` at the root): one, or a group's.
fn heads(after: &str) -> Vec<String> {
    if after.starts_with('{') {
        group_heads(after).unwrap_or_default()
    } else {
        vec![ident(after)]
    }
}

/// The rooms a file's code names: `(line, room)` for every `crate::ROOM`, `crate::{ROOM…}`
/// and `super::…` path that reaches the crate root.
fn rooms_named(text: &str, module: &[String]) -> Vec<(usize, String)> {
    // The code with comments and strings blanked, keeping line breaks for line numbers.
    let code: String = text.lines().map(|l| code_of(l) + "\n").collect();
    let line_of = |pos: usize| code[..pos].matches('\n').count() + 1;
    let mut found = Vec::new();
    let bytes = code.as_bytes();
    let mut i = 0;
    while i < code.len() {
        let rest = &code[i..];
        let starts_word = i == 0 || !is_ident(bytes[i - 1] as char);
        if starts_word && rest.starts_with("crate::") {
            for h in heads(&rest["crate::".len()..]) {
                found.push((line_of(i), h));
            }
            i += "crate::".len();
            continue;
        }
        if starts_word && rest.starts_with("super::") {
            // Walk up: each `super::` is one module up from the file's module.
            let mut depth = module.len();
            let mut j = 0;
            while rest[j..].starts_with("super::") {
                depth = depth.saturating_sub(1);
                j += "super::".len();
            }
            if depth == 0 {
                for h in heads(&rest[j..]) {
                    found.push((line_of(i), h));
                }
            }
            i += j;
            continue;
        }
        i += rest.chars().next().map_or(1, char::len_utf8);
    }
    found
}

/// Every violation in the files `(path under src/, text)`.
fn violations(files: &[(PathBuf, String)]) -> Result<Vec<Violation>, String> {
    let level: BTreeMap<&str, u8> = ROOMS.iter().copied().collect();
    let mut out = Vec::new();
    for (rel, text) in files {
        let module = module_path(rel);
        let Some(room) = module.first() else {
            continue; // lib.rs: the map of the crate, above every room.
        };
        let Some(&mine) = level.get(room.as_str()) else {
            return Err(format!(
                "src/{}: the room {room:?} is not in tests/layering.rs's ROOMS: place it in the order",
                rel.display()
            ));
        };
        for (line, to) in rooms_named(text, &module) {
            if &to == room {
                continue;
            }
            // Names below the crate root that are not rooms (`crate::Result`, macros) are
            // not checked.
            let Some(&theirs) = level.get(to.as_str()) else {
                continue;
            };
            if theirs >= mine {
                out.push(Violation {
                    file: format!("src/{}", rel.display()),
                    line,
                    from: room.clone(),
                    to,
                });
            }
        }
    }
    Ok(out)
}

/// The library's files: every `.rs` under `src/` but the binary's.
fn library_files() -> Vec<(PathBuf, String)> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    let mut dirs = vec![src.clone()];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let p = e.unwrap().path();
            let rel = p.strip_prefix(&src).unwrap().to_path_buf();
            if rel == Path::new("main.rs") || rel.starts_with("cli") {
                continue;
            }
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&p).unwrap();
                files.push((rel, text));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn no_room_names_a_room_above_it() {
    let files = library_files();
    assert!(
        files.len() > 50,
        "read only {} files under src/",
        files.len()
    );
    let v = violations(&files).unwrap_or_else(|e| panic!("{e}"));
    let text: Vec<String> = v
        .iter()
        .map(|v| {
            format!(
                "{}:{}: {} names {}, which is not below it",
                v.file, v.line, v.from, v.to
            )
        })
        .collect();
    assert!(
        text.is_empty(),
        "imports against the room order (tests/layering.rs's ROOMS):\n{}",
        text.join("\n")
    );
}

#[test]
fn every_top_level_module_is_a_room() {
    let lib =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("src/lib.rs")).unwrap();
    let rooms: Vec<&str> = ROOMS.iter().map(|r| r.0).collect();
    for line in lib.lines().map(code_of) {
        let words: Vec<&str> = line.split_whitespace().collect();
        if let Some(i) = words.iter().position(|w| *w == "mod") {
            let name = ident(words.get(i + 1).copied().unwrap_or_default());
            assert!(
                rooms.contains(&name.as_str()),
                "src/lib.rs declares `mod {name}`, which tests/layering.rs's ROOMS does not place"
            );
        }
    }
}

/// The checker itself: each form of path to a higher room is caught, each allowed one is
/// not.
#[test]
fn the_checker_sees_each_form_of_path() {
    let file = |path: &str, text: &str| (PathBuf::from(path), text.to_string());
    let files = vec![
        // Caught: a plain path, a group, a nested group, `super::` up to the root.
        file("cluster/sim/changes.rs", "let a = crate::explain::X;\n"),
        file(
            "scenario/load.rs",
            "use crate::{k8s, cluster::apps::{A, B}};\n",
        ),
        file("k8s/mod.rs", "use crate::{\n    kubeproxy::Y,\n};\n"),
        file("scenario/model.rs", "use super::super::cluster::Z;\n"),
        // Allowed: downward, own room, comments, strings, `super` within the room.
        file(
            "cluster/apps.rs",
            "use crate::scenario::model::UdpReply;\n\
             use crate::cluster::ports::P;\n\
             /// See [`crate::testkit::Cluster`].\n\
             let s = \"crate::report\"; // crate::explain\n\
             use super::sim::Q;\n",
        ),
        file("testkit/mod.rs", "use crate::{cluster, explain, report};\n"),
    ];
    let v = violations(&files).unwrap();
    let got: Vec<(&str, usize, &str)> = v
        .iter()
        .map(|v| (v.file.as_str(), v.line, v.to.as_str()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("src/cluster/sim/changes.rs", 1, "explain"),
            ("src/scenario/load.rs", 1, "cluster"),
            ("src/k8s/mod.rs", 1, "kubeproxy"),
            ("src/scenario/model.rs", 1, "cluster"),
        ]
    );
    // A room the order does not place is an error, not a pass.
    assert!(violations(&[file("newroom/mod.rs", "")]).is_err());
}
