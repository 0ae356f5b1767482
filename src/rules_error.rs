//! How nfsim says that a rules file did not load: `FILE:LINE: what`, then the line with a
//! caret. One text for every front that loads one: `nfsim trace`/`replay --rules`,
//! `nfsim rules normalize`, and a scenario's `state.rules` (checked when it is loaded).

use sim_netfilter::{RestoreError, RestoreErrorKind};

/// `FILE:LINE: what`, then the offending line with a caret, as the restore error prints it;
/// `into_netns`: loaded into a node's namespace (trace, replay, a scenario's node) rather than
/// by `rules normalize`, where the way out of some errors differs.
pub(crate) fn text(file: &str, e: &RestoreError, into_netns: bool) -> String {
    // RestoreError's Display is "line N: what\n  text\n  caret"; keep all but its prefix.
    let full = e.to_string();
    let rest = full.split_once('\n').map(|(_, r)| r).unwrap_or("");
    let what = match &e.kind {
        // The library's hint names its API; say what a command-line user can do.
        RestoreErrorKind::NoSuchNfacct(n) if into_netns => format!(
            "nfacct object {n:?} does not exist (on a node kube-proxy creates it with `nfacct add \
             {n}` before it restores; nfsim trace and replay cannot create nfacct objects yet. \
             Without a quota the match always matches, so deleting `-m nfacct --nfacct-name {n}` \
             from the file changes no packet's way)"
        ),
        RestoreErrorKind::NoSuchNfacct(n) => format!(
            "nfacct object {n:?} does not exist (iptables-restore fails the same way; on a node \
             kube-proxy creates it with `nfacct add {n}` first: --nfacct {n} does the same)"
        ),
        k => k.to_string(),
    };
    let mut s = format!("{file}:{}: {what}", e.line);
    if !rest.is_empty() {
        s.push('\n');
        s.push_str(rest);
    }
    s
}
