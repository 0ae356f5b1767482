//! Names a scenario gives to things, checked as Kubernetes checks them.
//!
//! Kubernetes' API server validates object names (k8s.io/apimachinery
//! `pkg/util/validation/validation.go`):
//!
//! - a DNS-1123 label (`IsDNS1123Label`): at most 63 characters, lowercase letters, digits and
//!   `-`, starting and ending with a letter or digit — namespaces;
//! - a DNS-1123 subdomain (`IsDNS1123Subdomain`): at most 253 characters, DNS-1123 labels
//!   joined by `.` — pods and nodes (`ValidatePodName`, `ValidateNodeName`);
//! - a DNS-1035 label (`IsDNS1035Label`): a DNS-1123 label starting with a letter —
//!   Services (`ValidateServiceName`).
//!
//! Names that are not Kubernetes objects (clients, hosts, the scenario, expectations) are
//! only printed: [`check_display_name`] refuses `/` (where the name is joined to others),
//! control characters (which would reach the terminal raw) and lengths beyond a limit.

/// The longest DNS-1123 label.
pub const DNS1123_LABEL_MAX: usize = 63;
/// The longest DNS-1123 subdomain.
pub const DNS1123_SUBDOMAIN_MAX: usize = 253;
/// The longest client, host or scenario name.
pub const DISPLAY_NAME_MAX: usize = 253;
/// The longest expectation name (a sentence).
pub const EXPECTATION_NAME_MAX: usize = 1024;

/// `s` shortened for an error message (a 65,536-character name is not repeated whole).
pub fn shown(s: &str) -> String {
    const MAX: usize = 40;
    let n = s.chars().count();
    if n <= MAX {
        format!("{s:?}")
    } else {
        let head: String = s.chars().take(MAX).collect();
        format!("{head:?}… ({n} characters)")
    }
}

fn label_chars_ok(l: &str) -> bool {
    let b = l.as_bytes();
    !b.is_empty()
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// Checks a DNS-1123 label (`what` is e.g. "namespace").
pub fn check_dns1123_label(what: &str, s: &str) -> Result<(), String> {
    let n = s.chars().count();
    if n > DNS1123_LABEL_MAX {
        return Err(format!(
            "{what} {} is {n} characters long: expected at most {DNS1123_LABEL_MAX} (a DNS-1123 label, as Kubernetes requires)",
            shown(s)
        ));
    }
    if !label_chars_ok(s) {
        return Err(format!(
            "{what} {} is not a DNS-1123 label: expected lowercase letters, digits and '-', starting and ending with a letter or digit (as Kubernetes requires)",
            shown(s)
        ));
    }
    Ok(())
}

/// Checks a DNS-1035 label (a Service name).
pub fn check_dns1035_label(what: &str, s: &str) -> Result<(), String> {
    check_dns1123_label(what, s)?;
    if !s.as_bytes()[0].is_ascii_lowercase() {
        return Err(format!(
            "{what} {} does not start with a letter: expected a DNS-1035 label (lowercase letters, digits and '-', starting with a letter), as Kubernetes requires",
            shown(s)
        ));
    }
    Ok(())
}

/// Checks a DNS-1123 subdomain (a pod or node name).
pub fn check_dns1123_subdomain(what: &str, s: &str) -> Result<(), String> {
    let n = s.chars().count();
    if n > DNS1123_SUBDOMAIN_MAX {
        return Err(format!(
            "{what} {} is {n} characters long: expected at most {DNS1123_SUBDOMAIN_MAX} (a DNS-1123 subdomain, as Kubernetes requires)",
            shown(s)
        ));
    }
    if !s.split('.').all(label_chars_ok) {
        return Err(format!(
            "{what} {} is not a DNS-1123 subdomain: expected lowercase letters, digits, '-' and '.', each part starting and ending with a letter or digit (as Kubernetes requires)",
            shown(s)
        ));
    }
    Ok(())
}

/// Checks a name that is only printed: not empty, at most `max` characters, no `/`, no
/// control characters.
pub fn check_display_name(what: &str, s: &str, max: usize, slash_ok: bool) -> Result<(), String> {
    let n = s.chars().count();
    if n == 0 {
        return Err(format!("empty {what}"));
    }
    if n > max {
        return Err(format!(
            "{what} {} is {n} characters long: expected at most {max}",
            shown(s)
        ));
    }
    if let Some(c) = s.chars().find(|c| c.is_control()) {
        return Err(format!(
            "{what} {} holds the control character {:?}: expected printable characters",
            shown(s),
            c
        ));
    }
    if !slash_ok && s.contains('/') {
        return Err(format!(
            "{what} {} holds '/': expected a name without '/' (it is joined to others with '/')",
            shown(s)
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubernetes_rules() {
        assert!(check_dns1123_label("namespace", "kube-system").is_ok());
        assert!(check_dns1123_label("namespace", &"a".repeat(63)).is_ok());
        let e = check_dns1123_label("namespace", &"a".repeat(64)).unwrap_err();
        assert!(
            e.contains("64 characters long") && e.contains("at most 63"),
            "{e}"
        );
        assert!(check_dns1123_label("namespace", "Kube").is_err());
        assert!(check_dns1123_label("namespace", "-a").is_err());
        assert!(check_dns1123_label("namespace", "").is_err());
        assert!(check_dns1123_subdomain("pod name", "coredns-a.x1").is_ok());
        assert!(check_dns1123_subdomain("pod name", "a..b").is_err());
        assert!(check_dns1123_subdomain("pod name", "a/b").is_err());
        assert!(check_dns1123_subdomain("pod name", &"a".repeat(254)).is_err());
        assert!(check_dns1035_label("Service name", "1dns").is_err());
        assert!(check_dns1035_label("Service name", "dns1").is_ok());
    }

    #[test]
    fn display_names() {
        assert!(check_display_name("client name", "Sidecar_1 (fixed port)", 253, false).is_ok());
        assert!(check_display_name("client name", "a/b", 253, false).is_err());
        assert!(check_display_name("client name", "a\u{1b}[31m", 253, false).is_err());
        let e = check_display_name("client name", &"x".repeat(70_000), 253, false).unwrap_err();
        assert!(e.contains("70000 characters") && e.len() < 200, "{e}");
    }
}
