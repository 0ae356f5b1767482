//! Checks of a table before it commits: jump loops, nesting depth, per-hook targets.

use super::*;

const PRE: u8 = Hook::PreRouting.bit();
const IN: u8 = Hook::Input.bit();
const FWD: u8 = Hook::Forward.bit();
const OUT: u8 = Hook::Output.bit();
const POST: u8 = Hook::PostRouting.bit();

fn hook_names(mask: u8) -> &'static str {
    match mask {
        m if m == PRE | OUT => "PREROUTING and OUTPUT",
        m if m == POST | IN => "POSTROUTING and INPUT",
        m if m == POST => "POSTROUTING",
        m if m == IN | FWD | OUT => "INPUT, FORWARD and OUTPUT",
        m if m == IN | FWD | PRE => "PREROUTING, INPUT and FORWARD",
        m if m == OUT | FWD | POST => "FORWARD, OUTPUT and POSTROUTING",
        m if m == PRE | IN | FWD | POST => "PREROUTING, INPUT, FORWARD and POSTROUTING",
        _ => "other hooks",
    }
}

/// Loop detection from the built-in chains, nesting depth, and per-hook validity of targets
/// and matches (xt `.hooks` masks: DNAT/REDIRECT PRE|OUT, SNAT POST|IN, MASQUERADE POST,
/// REJECT IN|FWD|OUT; addrtype `--limit-iface-in` not in OUTPUT/POSTROUTING,
/// `--limit-iface-out` not in PREROUTING/INPUT). One pass over the rules builds the jump graph
/// and the constraints; the graph walks are over chains only.
pub(super) fn validate(td: &TableData, table: Table) -> Result<(), RestoreErrorKind> {
    let n = td.chains.len();
    let mut edges: Vec<Vec<u32>> = vec![Vec::new(); n];
    // (chain, what, valid hooks, checked against the chain's own hook only)
    let mut constraints: Vec<(u32, &'static str, u8, bool)> = Vec::new();
    for (id, c) in td.chains.iter().enumerate() {
        let Some(c) = c else { continue };
        let e = &mut edges[id];
        for r in &c.rules {
            match &r.target {
                Target::Jump(t) | Target::Goto(t) => e.push(t.id.idx),
                Target::Dnat(_) => constraints.push((id as u32, "DNAT", PRE | OUT, false)),
                Target::Redirect(_) => constraints.push((id as u32, "REDIRECT", PRE | OUT, false)),
                Target::Snat(_) => constraints.push((id as u32, "SNAT", POST | IN, false)),
                Target::Masquerade(_) => constraints.push((id as u32, "MASQUERADE", POST, false)),
                Target::Reject(_) => constraints.push((id as u32, "REJECT", IN | FWD | OUT, false)),
                _ => {}
            }
            // Match hook checks run in checkentry, which nf_tables' compat layer only gives a
            // hook mask for rules directly in a base chain.
            if c.hook.is_some() {
                for m in &r.matches {
                    // physdev_mt_check: an out-port test without `--physdev-is-bridged`
                    // cannot be in OUTPUT ("--physdev-out and --physdev-is-out only
                    // supported in the FORWARD and POSTROUTING chains with bridged traffic").
                    if let Match::Physdev(p) = m {
                        if (p.physdev_out.is_some() || p.is_out.is_some())
                            && p.is_bridged != Some(false)
                        {
                            constraints.push((
                                id as u32,
                                "physdev --physdev-out",
                                PRE | IN | FWD | POST,
                                true,
                            ));
                        }
                    }
                    if let Match::Addrtype(a) = m {
                        match a.limit {
                            Some(LimitIface::In) => constraints.push((
                                id as u32,
                                "addrtype --limit-iface-in",
                                PRE | IN | FWD,
                                true,
                            )),
                            Some(LimitIface::Out) => constraints.push((
                                id as u32,
                                "addrtype --limit-iface-out",
                                OUT | FWD | POST,
                                true,
                            )),
                            None => {}
                        }
                    }
                }
            }
        }
        e.sort_unstable();
        e.dedup();
    }
    let mut mask = vec![0u8; n];
    let mut height: Vec<Option<u32>> = vec![None; n];
    for &h in table.hooks() {
        let Some(root) = td.builtin[h as usize] else {
            continue;
        };
        // Iterative DFS with the current path marked, to find cycles.
        let mut state = vec![0u8; n]; // 0 new, 1 on path, 2 done
        let mut stack: Vec<(u32, usize)> = vec![(root, 0)];
        state[root as usize] = 1;
        mask[root as usize] |= h.bit();
        while let Some(&mut (cid, ref mut pos)) = stack.last_mut() {
            let next = edges[cid as usize].get(*pos).copied();
            *pos += 1;
            match next {
                Some(t) => {
                    let ts = t as usize;
                    if state[ts] == 1 {
                        return Err(RestoreErrorKind::Loop(td.chain(t).name.clone()));
                    }
                    mask[ts] |= h.bit();
                    if state[ts] == 0 {
                        state[ts] = 1;
                        stack.push((t, 0));
                    }
                }
                None => {
                    // All children are done: this chain's height is known.
                    let hgt = edges[cid as usize]
                        .iter()
                        .map(|&t| height[t as usize].unwrap_or(0) + 1)
                        .max()
                        .unwrap_or(0);
                    height[cid as usize] = Some(hgt);
                    state[cid as usize] = 2;
                    stack.pop();
                }
            }
        }
        // nf_tables refuses more than 15 nested jumps/gotos below a base chain
        // (NFT_JUMP_STACK_SIZE, "Too many links"); measured with iptables-restore 1.8.9.
        if height[root as usize].unwrap_or(0) > 15 {
            return Err(RestoreErrorKind::TooDeep(h.chain_name().to_string()));
        }
    }
    let hook_of = |bad: u8| -> &'static str {
        Hook::ALL
            .iter()
            .find(|h| bad & h.bit() != 0)
            .map(|h| h.chain_name())
            .unwrap_or("?")
    };
    for (cid, what, valid, own_only) in constraints {
        let c = td.chain(cid);
        let m = if own_only {
            c.hook.map(|h| h.bit()).unwrap_or(0)
        } else {
            mask[cid as usize]
        };
        if m & !valid != 0 {
            return Err(RestoreErrorKind::WrongHook {
                what,
                chain: c.name.clone(),
                hook: hook_of(m & !valid),
                valid: hook_names(valid),
            });
        }
    }
    Ok(())
}

pub(super) fn name_hash(name: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = KeyHasher::default();
    name.hash(&mut h);
    h.finish()
}
