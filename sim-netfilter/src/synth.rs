//! Synthetic kube-proxy rulesets (filled in below).
