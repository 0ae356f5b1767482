//! Kubernetes' rules for label keys and values, as `k8s.io/apimachinery/pkg/util/validation`
//! checks them (`IsQualifiedName`, `IsValidLabelValue`): the API server refuses an object
//! whose labels or selector break them, so a scenario holding one describes no real cluster.

use std::collections::BTreeMap;

/// `validation.LabelValueMaxLength` and `qualifiedNameMaxLength`: 63.
pub const LABEL_MAX: usize = 63;
/// `validation.DNS1123SubdomainMaxLength`: the longest key prefix, 253.
const PREFIX_MAX: usize = 253;

/// `qualifiedNameFmt` / label value format: alphanumeric at both ends, `-`, `_`, `.` and
/// alphanumerics between.
fn is_name_part(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

/// What is wrong with label value `v`, if anything (`IsValidLabelValue`).
pub fn label_value_problem(v: &str) -> Option<String> {
    let n = v.chars().count();
    if n > LABEL_MAX {
        return Some(format!(
            "label value of {n} characters: expected at most {LABEL_MAX}"
        ));
    }
    if !v.is_empty() && !is_name_part(v) {
        return Some(format!(
            "label value {:?}: expected an empty value or at most {LABEL_MAX} characters of A-Z, a-z, 0-9, '-', '_' and '.', beginning and ending with a letter or digit",
            sim_core::text::escape(v)
        ));
    }
    None
}

/// What is wrong with label key `k`, if anything (`IsQualifiedName`: `[PREFIX/]NAME`, the
/// prefix a DNS-1123 subdomain).
pub fn label_key_problem(k: &str) -> Option<String> {
    let shown = || {
        sim_core::text::escape(k)
            .chars()
            .take(80)
            .collect::<String>()
    };
    let (prefix, name) = match k.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, k),
    };
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= PREFIX_MAX
            && p.split('.').all(|l| {
                let b = l.as_bytes();
                !b.is_empty()
                    && b[0].is_ascii_alphanumeric()
                    && b[b.len() - 1].is_ascii_alphanumeric()
                    && b.iter()
                        .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
            });
        if !ok {
            return Some(format!(
                "label key {:?}: its prefix must be a DNS-1123 subdomain (lower-case alphanumerics, '-' and '.', at most {PREFIX_MAX} characters), as in example.com/name",
                shown()
            ));
        }
    }
    let n = name.chars().count();
    if n > LABEL_MAX || !is_name_part(name) {
        return Some(format!(
            "label key {:?}: expected a name of 1 to {LABEL_MAX} characters of A-Z, a-z, 0-9, '-', '_' and '.', beginning and ending with a letter or digit, with an optional DNS-1123 prefix and '/'",
            shown()
        ));
    }
    None
}

/// The first problem of a label map (or a selector, which follows the same rules), naming
/// its key.
pub fn labels_problem(labels: &BTreeMap<String, String>) -> Option<String> {
    labels.iter().find_map(|(k, v)| {
        label_key_problem(k).or_else(|| {
            label_value_problem(v).map(|m| {
                let k: String = sim_core::text::escape(k).chars().take(80).collect();
                format!("{k}: {m}")
            })
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_and_keys_follow_apimachinery() {
        for ok in ["", "a", "dns", "kube-dns", "A.b_c-1", &"x".repeat(63)] {
            assert_eq!(label_value_problem(ok), None, "{ok}");
        }
        for bad in ["-a", "a-", "a b", "a/b", "é", &"x".repeat(64), ".a", "a\n"] {
            assert!(label_value_problem(bad).is_some(), "{bad}");
        }
        for ok in [
            "app",
            "app.kubernetes.io/name",
            "kubernetes.io/service-name",
            "A_b",
        ] {
            assert_eq!(label_key_problem(ok), None, "{ok}");
        }
        for bad in [
            "",
            "/a",
            "a/",
            "Example.com/a",
            "a/b/c",
            "-a",
            &"k".repeat(64),
            "a b",
        ] {
            assert!(label_key_problem(bad).is_some(), "{bad}");
        }
    }
}
