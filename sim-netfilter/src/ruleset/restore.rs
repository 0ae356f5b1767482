//! Applying `iptables-restore` input: table blocks, `:CHAIN` lines and rule lines.

use super::*;

fn chain_name_ok(name: &str) -> Result<(), RestoreErrorKind> {
    let bad = |why| {
        Err(RestoreErrorKind::BadChainName {
            name: name.to_string(),
            why,
        })
    };
    if name.is_empty() {
        return bad("empty");
    }
    if name.len() >= 29 {
        return bad("longer than 28 characters");
    }
    if name.starts_with('-') || name.starts_with('!') {
        return bad("must not start with `-` or `!`");
    }
    if name.chars().any(char::is_whitespace) {
        return bad("contains whitespace");
    }
    if Hook::from_chain_name(name).is_some() {
        return bad("is the name of a built-in chain of another table");
    }
    if matches!(
        name,
        "ACCEPT"
            | "DROP"
            | "RETURN"
            | "REJECT"
            | "DNAT"
            | "SNAT"
            | "MASQUERADE"
            | "REDIRECT"
            | "MARK"
            | "CONNMARK"
            | "CT"
            | "NOTRACK"
            | "LOG"
            | "TRACE"
            | "QUEUE"
            | "NFQUEUE"
            | "NFLOG"
    ) {
        return bad("clashes with a target name");
    }
    Ok(())
}

fn parse_counters(s: &str) -> Option<Counters> {
    let inner = s.strip_prefix('[')?.strip_suffix(']')?;
    let (p, b) = inner.split_once(':')?;
    Some(Counters {
        packets: p.parse().ok()?,
        bytes: b.parse().ok()?,
    })
}

impl Ruleset {
    /// Runs one iptables command against `table` as `iptables -t TABLE ARGS` would
    /// (e.g. `"-I INPUT -p tcp --dport 22 -j ACCEPT"`): a one-line `--noflush` transaction.
    pub fn command(&mut self, table: Table, args: &str) -> Result<(), RestoreError> {
        let text = format!("*{}\n{}\nCOMMIT\n", table.name(), args);
        self.restore(
            &text,
            &RestoreOptions {
                noflush: true,
                counters: false,
            },
        )
        .map(|_| ())
        .map_err(|mut e| {
            // Report against the command itself rather than the wrapper's line 2.
            e.line = 1;
            e
        })
    }

    /// Applies `iptables-restore` input. See the module docs.
    pub fn restore(
        &mut self,
        input: &str,
        opts: &RestoreOptions,
    ) -> Result<RestoreReport, RestoreError> {
        self.restore_digested(input, opts, &text_digest(input))
    }

    /// [`Ruleset::restore`] with the input's digest already computed.
    pub(super) fn restore_digested(
        &mut self,
        input: &str,
        opts: &RestoreOptions,
        digest: &[u8; 32],
    ) -> Result<RestoreReport, RestoreError> {
        // Recorded whatever the outcome: a failed restore may still have committed earlier
        // blocks, and the outcome is as deterministic as a success.
        self.lineage = self.lineage.then(&restore_op(opts), digest);
        let mut report = RestoreReport::default();
        let mut block: Option<Block> = None;
        let mut last_line = 0;
        let mut toks: Vec<Token<'_>> = Vec::with_capacity(32);
        let fail = |line: usize, text: &str, kind, span, report: &RestoreReport| RestoreError {
            line,
            text: text.to_string(),
            kind,
            span,
            committed: report.committed.clone(),
        };
        for (i, raw) in input.split('\n').enumerate() {
            let lineno = i + 1;
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            last_line = lineno;
            let Some(b) = block.as_mut() else {
                if let Some(rest) = line.strip_prefix('*') {
                    let name = rest.split_whitespace().next().unwrap_or("");
                    let table = Table::from_name(name).ok_or_else(|| {
                        fail(
                            lineno,
                            line,
                            RestoreErrorKind::UnknownTable(name.to_string()),
                            Some((1, line.len())),
                            &report,
                        )
                    })?;
                    let existing = self.tables[table.index()].as_deref().cloned();
                    let (work, flush) = match (opts.noflush, existing) {
                        (true, Some(t)) => (t, false),
                        _ => (TableData::new(table), !opts.noflush),
                    };
                    block = Some(Block {
                        table,
                        work,
                        touched: false,
                        flush,
                        jump_lines: Vec::new(),
                    });
                    continue;
                }
                let what = if line.starts_with(':') {
                    "chain line"
                } else if line == "COMMIT" {
                    "COMMIT"
                } else {
                    "rule"
                };
                return Err(fail(
                    lineno,
                    line,
                    RestoreErrorKind::OutsideTable(what),
                    None,
                    &report,
                ));
            };
            if line == "COMMIT" {
                let Some(b) = block.take() else {
                    continue;
                };
                let table = b.table;
                self.commit(b).map_err(|(l, kind)| match l {
                    Some((l, text)) => fail(l, &text, kind, None, &report),
                    None => fail(lineno, line, kind, None, &report),
                })?;
                report.committed.push(table);
                continue;
            }
            if let Some(rest) = line.strip_prefix(':') {
                self.chain_line(b, rest, opts)
                    .map_err(|kind| fail(lineno, line, kind, None, &report))?;
                continue;
            }
            self.rule_line(b, line, lineno, opts, &mut toks)
                .map_err(|(kind, span)| fail(lineno, line, kind, span, &report))?;
        }
        if let Some(b) = block {
            return Err(fail(
                last_line + 1,
                "",
                RestoreErrorKind::MissingCommit(b.table),
                None,
                &report,
            ));
        }
        Ok(report)
    }

    fn chain_line(
        &mut self,
        b: &mut Block,
        rest: &str,
        opts: &RestoreOptions,
    ) -> Result<(), RestoreErrorKind> {
        let mut words = rest.split([' ', '\t']).filter(|w| !w.is_empty());
        let name = words.next().unwrap_or("");
        let policy = words.next();
        let counters = words.next();
        if name.len() >= 29 {
            return Err(RestoreErrorKind::BadChainName {
                name: name.into(),
                why: "longer than 28 characters",
            });
        }
        let Some(policy) = policy else {
            return Err(RestoreErrorKind::BadPolicy(String::new()));
        };
        b.touched = true;
        let builtin_hook = Hook::from_chain_name(name).filter(|h| b.table.has_hook(*h));
        if let Some(h) = builtin_hook {
            let pol = match policy {
                "-" => None,
                "ACCEPT" => Some(Policy::Accept),
                "DROP" => Some(Policy::Drop),
                other => return Err(RestoreErrorKind::BadPolicy(other.into())),
            };
            let init = if opts.counters {
                match counters {
                    Some(c) => {
                        parse_counters(c).ok_or_else(|| RestoreErrorKind::BadCounters(c.into()))?
                    }
                    None => Counters::default(),
                }
            } else {
                Counters::default()
            };
            if let Some(p) = pol {
                let id = b.work.builtin[h as usize].unwrap_or_else(|| unreachable!());
                let c = b.work.chain_mut(id);
                c.policy = p;
                c.policy_slot = Bind::default();
                c.policy_init = init;
            }
            return Ok(());
        }
        chain_name_ok(name)?;
        match b.work.id(name) {
            Some(id) => {
                let old = std::mem::take(&mut b.work.chain_mut(id).rules);
                b.work.note_refs(&old, -1);
            }
            None => {
                b.work.add_chain(name, None);
            }
        }
        Ok(())
    }

    fn rule_line<'a>(
        &mut self,
        b: &mut Block,
        line: &'a str,
        lineno: usize,
        opts: &RestoreOptions,
        toks: &mut Vec<Token<'a>>,
    ) -> Result<(), (RestoreErrorKind, Option<(usize, usize)>)> {
        let (prefix_counters, body, offset) = if line.starts_with('[') {
            let close = line
                .find(']')
                .ok_or((RestoreErrorKind::BadCounters(line.into()), None))?;
            let c = parse_counters(&line[..=close]).ok_or((
                RestoreErrorKind::BadCounters(line[..=close].into()),
                Some((0, close + 1)),
            ))?;
            (Some(c), &line[close + 1..], close + 1)
        } else {
            (None, line, 0)
        };
        tokenize_into(body, toks)
            .map_err(|e| (RestoreErrorKind::Rule(RuleErrorKind::Invalid(e)), None))?;
        let toks = &*toks;
        let cmd = parse_command(toks, b.table, self.family).map_err(|e| {
            let span = e
                .token
                .and_then(|i| toks.get(i))
                .map(|t| (t.start + offset, t.end + offset));
            (RestoreErrorKind::Rule(e.kind), span)
        })?;
        let chain_span = toks.get(1).map(|t| (t.start + offset, t.end + offset));
        b.touched = true;
        let with_counters = |mut rules: Vec<Rule>| -> Vec<Rule> {
            // ip6tables 1.8.9 keeps no rule counters given to it (see `parse_command`).
            if let (true, Some(c), Family::Ipv4) = (opts.counters, prefix_counters, self.family) {
                for r in &mut rules {
                    r.initial_counters = c;
                }
            }
            rules
        };
        let need =
            |b: &Block, name: &str| -> Result<u32, (RestoreErrorKind, Option<(usize, usize)>)> {
                b.work
                    .id(name)
                    .ok_or((RestoreErrorKind::NoSuchChain(name.into()), chain_span))
            };
        match cmd {
            Command::Append { chain, rules } => {
                let id = need(b, &chain)?;
                let rules = with_counters(rules);
                for r in &rules {
                    if let Some(t) = r.jump_target() {
                        b.jump_lines.push((lineno, id, name_hash(t)));
                    }
                }
                b.work.note_refs(&rules, 1);
                b.work.chain_mut(id).rules.extend(rules);
            }
            Command::Insert { chain, num, rules } => {
                let id = need(b, &chain)?;
                let len = b.work.chain(id).rules.len();
                if num as usize > len + 1 {
                    return Err((RestoreErrorKind::IndexTooBig { chain, num, len }, None));
                }
                let rules = with_counters(rules);
                for r in &rules {
                    if let Some(t) = r.jump_target() {
                        b.jump_lines.push((lineno, id, name_hash(t)));
                    }
                }
                b.work.note_refs(&rules, 1);
                let at = num as usize - 1;
                b.work.chain_mut(id).rules.splice(at..at, rules);
            }
            Command::DeleteNum { chain, num } => {
                let id = need(b, &chain)?;
                let len = b.work.chain(id).rules.len();
                if num as usize > len {
                    return Err((RestoreErrorKind::IndexTooBig { chain, num, len }, None));
                }
                let r = b.work.chain_mut(id).rules.remove(num as usize - 1);
                b.work.note_refs(std::slice::from_ref(&r), -1);
            }
            Command::DeleteSpec { chain, rules } => {
                let id = need(b, &chain)?;
                for spec in rules {
                    let pos = b
                        .work
                        .chain(id)
                        .rules
                        .iter()
                        .position(|r| r.same_spec(&spec))
                        .ok_or((RestoreErrorKind::NoMatchingRule(chain.clone()), None))?;
                    let r = b.work.chain_mut(id).rules.remove(pos);
                    b.work.note_refs(std::slice::from_ref(&r), -1);
                }
            }
            Command::NewChain(name) => {
                if b.work.id(&name).is_some() {
                    return Err((RestoreErrorKind::ChainExists(name), chain_span));
                }
                chain_name_ok(&name).map_err(|k| (k, chain_span))?;
                b.work.add_chain(&name, None);
            }
            Command::DeleteChain(name) => {
                let names: Vec<String> = match name {
                    Some(n) => {
                        let id = need(b, &n)?;
                        if b.work.chain(id).hook.is_some() {
                            return Err((RestoreErrorKind::DeleteBuiltin(n), chain_span));
                        }
                        vec![n]
                    }
                    None => b
                        .work
                        .user_names_sorted()
                        .into_iter()
                        .map(|(n, _)| n.to_string())
                        .collect(),
                };
                for n in names {
                    let id = need(b, &n)?;
                    let busy = !b.work.chain(id).rules.is_empty()
                        || b.work.refs.get(&n).copied().unwrap_or(0) > 0;
                    if busy {
                        return Err((RestoreErrorKind::ChainBusy(n), None));
                    }
                    b.work.chains[id as usize] = None;
                    b.work.by_name.remove(&n);
                    b.work.refs.remove(&n);
                    b.work.free_ids.push(id);
                }
            }
            Command::Flush(name) => {
                let ids = match name {
                    Some(n) => vec![need(b, &n)?],
                    None => b.work.all_ids(),
                };
                for id in ids {
                    if b.work.chain(id).rules.is_empty() {
                        continue;
                    }
                    let old = std::mem::take(&mut b.work.chain_mut(id).rules);
                    b.work.note_refs(&old, -1);
                }
            }
            Command::Policy { chain, policy } => {
                let id = need(b, &chain)?;
                if b.work.chain(id).hook.is_none() {
                    return Err((RestoreErrorKind::NotBuiltin(chain), chain_span));
                }
                b.work.chain_mut(id).policy = policy;
            }
            Command::Zero(name) => {
                let ids = match name {
                    Some(n) => vec![need(b, &n)?],
                    None => b.work.all_ids(),
                };
                for id in ids {
                    // Fresh ids give fresh (zero) counters; nth counters are kept.
                    let c = b.work.chain_mut(id);
                    for r in &mut c.rules {
                        r.slot.uid = 0;
                        r.initial_counters = Counters::default();
                    }
                    if c.hook.is_some() {
                        c.policy_slot = Bind::default();
                        c.policy_init = Counters::default();
                    }
                }
            }
        }
        Ok(())
    }
}
