//! Every relative link in the documentation resolves: `README.md`, `docs/*.md` and the other
//! Markdown files of the repository. A link's file must exist (relative to the file that
//! links, as GitHub resolves it), and a `#anchor` into a Markdown file must name one of its
//! headings as GitHub slugs them (or an `id=`/`name=` in its HTML), so moving a section breaks
//! this test rather than a reader's click.
//!
//! GitHub's slug of a heading: its text as rendered (code spans, emphasis and links reduced to
//! their text), lower-cased, every character that is not a letter, a digit, a space, `-` or
//! `_` dropped, each space made a `-`; a repeated slug gets `-1`, `-2`, … in order.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One link found in a Markdown text: its line and its target as written.
#[derive(Debug)]
struct Link {
    line: usize,
    target: String,
}

/// The text outside fenced code blocks, line by line (fenced lines are blanked, so line
/// numbers stay right).
fn prose_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fence: Option<String> = None;
    for line in text.lines() {
        let t = line.trim_start();
        let marker: String = t.chars().take_while(|&c| c == '`' || c == '~').collect();
        match &fence {
            Some(open) => {
                if marker.len() >= open.len()
                    && marker.starts_with(&open[..1])
                    && t.trim() == marker
                {
                    fence = None;
                }
                out.push(String::new());
            }
            None if marker.len() >= 3
                && marker.chars().all(|c| c == marker.as_bytes()[0] as char) =>
            {
                fence = Some(marker);
                out.push(String::new());
            }
            None => out.push(line.to_string()),
        }
    }
    out
}

/// `line` with each code span (`` `…` ``) reduced to its content, as a heading's slug keeps it.
fn code_spans_to_text(line: &str) -> String {
    map_code_spans(line, |content| content.to_string())
}

/// `line` with each code span replaced by `with(its content)`; an unclosed run of backticks
/// is left as it is.
fn map_code_spans(line: &str, with: impl Fn(&str) -> String) -> String {
    let mut out = String::new();
    let mut rest = line;
    while let Some(i) = rest.find('`') {
        out.push_str(&rest[..i]);
        let ticks = rest[i..].chars().take_while(|&c| c == '`').count();
        let after = &rest[i + ticks..];
        match after.find(&"`".repeat(ticks)) {
            Some(j) => {
                out.push_str(&with(&after[..j]));
                rest = &after[j + ticks..];
            }
            None => {
                out.push_str(&rest[i..]);
                rest = "";
            }
        }
    }
    out.push_str(rest);
    out
}

/// The inline links (`[text](target)`, `![alt](target)`) and reference definitions
/// (`[label]: target`) of a Markdown text, outside code.
fn links(text: &str) -> Vec<Link> {
    let mut found = Vec::new();
    for (n, raw) in prose_lines(text).iter().enumerate() {
        // A code span holds text, never a link; a link's text may be one (`[`x`](y)`), so
        // each becomes a placeholder word.
        let line = code_spans_to_placeholder(raw);
        let b = line.as_bytes();
        let mut i = 0;
        while let Some(off) = line[i..].find("](") {
            let start = i + off + 2;
            // The target runs to the matching `)`, allowing balanced parentheses inside.
            let mut depth = 1;
            let mut end = start;
            while end < b.len() {
                match b[end] {
                    b'(' => depth += 1,
                    b')' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    _ => {}
                }
                end += 1;
            }
            if end < b.len() {
                let target = line[start..end].split_whitespace().next().unwrap_or("");
                let target = target.trim_start_matches('<').trim_end_matches('>');
                found.push(Link {
                    line: n + 1,
                    target: target.to_string(),
                });
            }
            i = end.min(b.len());
        }
        let t = line.trim_start();
        if t.starts_with('[') {
            if let Some(j) = t.find("]: ") {
                let label = &t[1..j];
                if !label.is_empty() && !label.contains('[') {
                    let target = t[j + 3..].split_whitespace().next().unwrap_or("");
                    found.push(Link {
                        line: n + 1,
                        target: target.to_string(),
                    });
                }
            }
        }
    }
    found
}

/// `line` with every code span replaced by the word `code` (a `](` inside code is no link).
fn code_spans_to_placeholder(line: &str) -> String {
    map_code_spans(line, |_| "code".to_string())
}

/// A heading's text as GitHub renders it: links reduced to their text, code spans to their
/// content, emphasis markers and inline HTML dropped.
fn rendered(heading: &str) -> String {
    let mut s = code_spans_to_text(heading);
    // [text](target) -> text
    while let (Some(a), Some(m)) = (s.find('['), s.find("](")) {
        if a >= m {
            break;
        }
        let Some(close) = s[m..].find(')') else { break };
        let text = s[a + 1..m].to_string();
        s.replace_range(a..m + close + 1, &text);
    }
    // Inline HTML tags go; their text stays.
    while let (Some(a), Some(b)) = (s.find('<'), s.find('>')) {
        if a >= b {
            break;
        }
        s.replace_range(a..=b, "");
    }
    s.replace('*', "")
}

/// GitHub's slug of a heading's rendered text (before de-duplication).
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-' || *c == '_')
        .map(|c| if c == ' ' { '-' } else { c })
        .collect()
}

/// Every anchor a Markdown text offers: its headings' slugs (de-duplicated as GitHub does)
/// and the `id="…"` / `name="…"` of its HTML.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeSet<String> = BTreeSet::new();
    for line in prose_lines(text) {
        let t = line.trim_start();
        let hashes = t.chars().take_while(|&c| c == '#').count();
        if (1..=6).contains(&hashes) && t[hashes..].starts_with(' ') {
            let text = t[hashes..].trim().trim_end_matches('#').trim_end();
            let base = slug(&rendered(text));
            let mut s = base.clone();
            let mut k = 0;
            while seen.contains(&s) {
                k += 1;
                s = format!("{base}-{k}");
            }
            seen.insert(s);
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = line.as_str();
            while let Some(i) = rest.find(attr) {
                let after = &rest[i + attr.len()..];
                if let Some(j) = after.find('"') {
                    seen.insert(after[..j].to_string());
                    rest = &after[j..];
                } else {
                    break;
                }
            }
        }
    }
    seen
}

/// What is wrong with each relative link of `file` (its text `text`), as `file:line: …`.
/// `read` gives another Markdown file's text (for its anchors); `exists` says whether a path
/// is there.
fn broken_links(
    file: &Path,
    text: &str,
    read: &dyn Fn(&Path) -> Option<String>,
    exists: &dyn Fn(&Path) -> bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    let dir = file.parent().unwrap_or(Path::new(""));
    for link in links(text) {
        let t = link.target.as_str();
        if t.is_empty()
            || t.starts_with("http://")
            || t.starts_with("https://")
            || t.starts_with("mailto:")
            || t.contains("://")
        {
            continue;
        }
        let (path, anchor) = match t.split_once('#') {
            Some((p, a)) => (p, Some(a)),
            None => (t, None),
        };
        let target = if path.is_empty() {
            file.to_path_buf()
        } else {
            normalize(&dir.join(path))
        };
        if !path.is_empty() && !exists(&target) {
            problems.push(format!(
                "{}:{}: link to {t}: {} does not exist",
                file.display(),
                link.line,
                target.display()
            ));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if target.extension().is_none_or(|e| e != "md") {
            continue; // #L10 into a source file: GitHub's line anchors, not checked
        }
        let Some(other) = (if target == file {
            Some(text.to_string())
        } else {
            read(&target)
        }) else {
            problems.push(format!(
                "{}:{}: link to {t}: cannot read {}",
                file.display(),
                link.line,
                target.display()
            ));
            continue;
        };
        if !anchors(&other).contains(anchor) {
            problems.push(format!(
                "{}:{}: link to {t}: {} has no heading whose anchor is #{anchor}",
                file.display(),
                link.line,
                target.display()
            ));
        }
    }
    problems
}

/// `p` with `.` and `..` components resolved lexically (no symlinks followed).
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            std::path::Component::CurDir => {}
            std::path::Component::ParentDir => {
                if !out.pop() {
                    out.push("..");
                }
            }
            other => out.push(other),
        }
    }
    out
}

/// The repository's Markdown files: README.md, docs/*.md, and every other `*.md` outside
/// `target/` and the fuzz corpora.
fn markdown_files(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name();
            let name = name.to_string_lossy();
            if p.is_dir() {
                if !(name.starts_with('.')
                    || name == "target"
                    || name == "corpus"
                    || name == "artifacts")
                {
                    stack.push(p);
                }
            } else if name.ends_with(".md") {
                files.push(p.strip_prefix(root).unwrap().to_path_buf());
            }
        }
    }
    files.sort();
    files
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let files = markdown_files(root);
    assert!(
        files.iter().any(|f| f == Path::new("README.md"))
            && files.iter().filter(|f| f.starts_with("docs")).count() >= 5,
        "the README and docs/ were not found under {}: {files:?}",
        root.display()
    );
    let read = |p: &Path| std::fs::read_to_string(root.join(p)).ok();
    let exists = |p: &Path| root.join(p).exists();
    let mut problems = Vec::new();
    let mut checked = 0;
    for f in &files {
        let text = std::fs::read_to_string(root.join(f)).unwrap();
        checked += links(&text).len();
        problems.extend(broken_links(f, &text, &read, &exists));
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser right?"
    );
    assert!(
        problems.is_empty(),
        "{} broken links:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

/// The checker itself: a planted broken file link and a planted broken anchor are reported,
/// with their lines; good ones, code and external links are not.
#[test]
fn a_planted_broken_link_or_anchor_is_reported() {
    let readme = "# nfsim\n\n\
        See [the CLI](docs/cli.md#nfsim-run) and [speed](docs/performance.md).\n\
        A [moved section](docs/cli.md#nfsim-bake) and [a gone file](docs/gone.md).\n\
        ```\n[not a link](docs/nowhere.md)\n```\n\
        `[code](docs/nowhere.md)`, [web](https://example.com/x#y), [self](#nfsim), [bad self](#nope).\n";
    let cli = "# The CLI\n\n## `nfsim run`\n\n## `nfsim run`\n";
    let read = |p: &Path| (p == Path::new("docs/cli.md")).then(|| cli.to_string());
    let exists = |p: &Path| p == Path::new("docs/cli.md") || p == Path::new("docs/performance.md");
    let problems = broken_links(Path::new("README.md"), readme, &read, &exists);
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(problems[0].starts_with("README.md:4: link to docs/cli.md#nfsim-bake:"));
    assert!(problems[1].starts_with("README.md:4: link to docs/gone.md:"));
    assert!(problems[2].starts_with("README.md:8: link to #nope:"));
    // The second `nfsim run` heading is #nfsim-run-1, as on GitHub.
    assert!(anchors(cli).contains("nfsim-run-1"));
}

#[test]
fn slugs_are_githubs() {
    let cases = [
        ("# `nfsim trace --json`", "nfsim-trace---json"),
        (
            "## 13. Random choices: iptables `statistic` against nftables `numgen`",
            "13-random-choices-iptables-statistic-against-nftables-numgen",
        ),
        (
            "### proxy_modes: kube-proxy's two modes",
            "proxy_modes-kube-proxys-two-modes",
        ),
        (
            "## 10. `/proc/net/xt_recent/NAME` and jiffies",
            "10-procnetxt_recentname-and-jiffies",
        ),
        (
            "### conntrack: lookup + refresh at 1,000,000 entries",
            "conntrack-lookup--refresh-at-1000000-entries",
        ),
        (
            "## The run as a picture: **`--report`**",
            "the-run-as-a-picture---report",
        ),
        ("## See [the docs](docs/x.md)", "see-the-docs"),
    ];
    for (heading, want) in cases {
        assert!(
            anchors(heading).contains(want),
            "{heading} -> {:?}",
            anchors(heading)
        );
    }
}
