//! nftables in userspace: the subset of the nftables language kube-proxy's nftables proxier
//! writes, as the kernel keeps it and as `nft` (1.0.6) prints it.
//!
//! Read in this order:
//!
//! - this module: the model. An [`NftRuleset`] holds tables ([`NftTable`], families `ip`,
//!   `ip6`, `inet`) of named sets and maps ([`NftSet`]) and chains ([`NftChain`]); a base chain
//!   ([`BaseChain`]) is attached to a hook with a type (`filter` or `nat`) and a priority.
//! - `parse.rs`: `nft -f` text — the commands `add`/`create`/`flush`/`delete` of tables,
//!   chains, sets, maps, rules and elements, one per line — into [`Command`]s.
//!   [`NftRuleset::apply`] runs a file's commands as one transaction: all or nothing, as
//!   `nft -f` sends one netlink batch that the kernel commits or aborts whole.
//! - `print.rs`: `nft list ruleset` / `nft list table F T`, byte for byte as nft 1.0.6 prints
//!   them (canonical expressions: `meta mark set meta mark | 0x00004000`, named priorities,
//!   sorted set elements, implied protocol matches elided).
//! - `eval.rs`: [`NftRuleset::run_base_chain`] walks one base chain for a packet, returning
//!   the same [`crate::Verdict`] the iptables tables return; the namespace pipeline
//!   (`netns`) interleaves base chains with the iptables tables by priority. It is the
//!   reference, and what traced walks take.
//! - `compiled.rs`: [`NftProgram`], the same walk compiled (names resolved to indices, keys
//!   packed without allocation, sets and maps as hash tables and sorted arrays), which the
//!   namespace walks for untraced packets; property tests keep it equal to `eval.rs`.
//!
//! What is supported is exactly what kube-proxy's ruleset uses (`pkg/proxy/nftables/
//! proxier.go`): payload matches `ip saddr|daddr|protocol`, `th|tcp|udp|sctp sport|dport`,
//! `meta l4proto|mark`, `ct state|status`, `fib saddr|daddr type`, `numgen random mod N`,
//! concatenations (`ip daddr . meta l4proto . th dport`), anonymous and named sets and
//! verdict maps, and the statements `counter`, `meta mark set`, `update @set { … }`, `dnat to`,
//! `snat to`, `masquerade [fully-random]`, `reject [with …]`, `accept`, `drop`, `return`,
//! `continue`, `jump`, `goto`, `comment`. Anything else is refused with an error naming the
//! line, column and word. For IPv6 (`ip6` and `inet` tables) the same subset with
//! `ip6 saddr|daddr|nexthdr`, `ipv6_addr` sets and maps (prefixes, ranges, concatenations),
//! `meta nfproto` (inet), `icmpv6 type`, `dnat|snat to [ADDR]:PORT` and `reject` as
//! ICMPv6 port-unreachable; `oifname` and `iifname` in every family.

mod compiled;
mod eval;
mod parse;
mod print;
#[cfg(test)]
pub(crate) mod testgen;

use std::fmt;

use indexmap::IndexMap;
use sim_core::SimTime;

use crate::types::Hook;

pub use compiled::{NftProgram, NotCompiled, KEY_BITS};
pub use eval::{BaseRef, NftDraw, NftStep};

/// An address family of a table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Family {
    /// `ip`: IPv4 packets.
    Ip,
    /// `ip6`: IPv6 packets.
    Ip6,
    /// `inet`: both.
    Inet,
}

impl Family {
    /// The name nft takes and prints.
    pub fn name(self) -> &'static str {
        match self {
            Family::Ip => "ip",
            Family::Ip6 => "ip6",
            Family::Inet => "inet",
        }
    }

    /// Whether a table of this family sees IPv4 (`v4`) or IPv6 packets.
    pub fn sees(self, v4: bool) -> bool {
        match self {
            Family::Ip => v4,
            Family::Ip6 => !v4,
            Family::Inet => true,
        }
    }
}

impl fmt::Display for Family {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// The type of a base chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum ChainType {
    /// `filter`: called at its hook at its priority.
    Filter,
    /// `nat`: consulted by the NAT core for a connection's first packet
    /// (`nf_nat_inet_fn`), in priority order among the hook's NAT lookups.
    Nat,
}

impl ChainType {
    /// The name nft prints.
    pub fn name(self) -> &'static str {
        match self {
            ChainType::Filter => "filter",
            ChainType::Nat => "nat",
        }
    }
}

/// The attachment of a base chain.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BaseChain {
    /// `filter` or `nat`.
    pub ty: ChainType,
    /// The hook.
    pub hook: Hook,
    /// Its priority (lower runs first).
    pub priority: i32,
    /// `policy accept` (true) or `policy drop`.
    pub policy_accept: bool,
}

/// A verdict, as rules and verdict maps carry it.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum NftVerdict {
    /// `accept`.
    Accept,
    /// `drop`.
    Drop,
    /// `continue`.
    Continue,
    /// `return`.
    Return,
    /// `jump CHAIN`.
    Jump(String),
    /// `goto CHAIN`.
    Goto(String),
}

impl fmt::Display for NftVerdict {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            NftVerdict::Accept => f.write_str("accept"),
            NftVerdict::Drop => f.write_str("drop"),
            NftVerdict::Continue => f.write_str("continue"),
            NftVerdict::Return => f.write_str("return"),
            NftVerdict::Jump(c) => write!(f, "jump {c}"),
            NftVerdict::Goto(c) => write!(f, "goto {c}"),
        }
    }
}

impl NftVerdict {
    fn target(&self) -> Option<&str> {
        match self {
            NftVerdict::Jump(c) | NftVerdict::Goto(c) => Some(c),
            _ => None,
        }
    }
}

/// The data type of one field of a set key (`type ipv4_addr . inet_proto . inet_service`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DataType {
    /// `ipv4_addr`.
    Ipv4Addr,
    /// `ipv6_addr` (a full 128-bit [`Datum`]).
    Ipv6Addr,
    /// `inet_proto`.
    InetProto,
    /// `inet_service`.
    InetService,
    /// `mark`.
    Mark,
    /// `integer` (numgen results, `th dport` in anonymous maps).
    Integer,
    /// `ct_state` (anonymous sets only).
    CtState,
    /// `nf_proto` (`meta nfproto`: `ipv4` is 2, `ipv6` is 10, the `NFPROTO_*` numbers).
    NfProto,
    /// `icmpv6_type` (`icmpv6 type`).
    Icmpv6Type,
}

impl DataType {
    fn name(self) -> &'static str {
        match self {
            DataType::Ipv4Addr => "ipv4_addr",
            DataType::Ipv6Addr => "ipv6_addr",
            DataType::InetProto => "inet_proto",
            DataType::InetService => "inet_service",
            DataType::Mark => "mark",
            DataType::Integer => "integer",
            DataType::CtState => "ct_state",
            DataType::NfProto => "nf_proto",
            DataType::Icmpv6Type => "icmpv6_type",
        }
    }

    fn from_name(s: &str) -> Option<DataType> {
        Some(match s {
            "ipv4_addr" => DataType::Ipv4Addr,
            "ipv6_addr" => DataType::Ipv6Addr,
            "inet_proto" => DataType::InetProto,
            "inet_service" => DataType::InetService,
            "mark" => DataType::Mark,
            _ => return None,
        })
    }

    /// Width in bytes (for nft's element sort order).
    fn width(self) -> usize {
        match self {
            DataType::Ipv4Addr | DataType::Mark | DataType::Integer => 4,
            DataType::Ipv6Addr => 16,
            DataType::InetProto | DataType::NfProto | DataType::Icmpv6Type => 1,
            DataType::InetService => 2,
            DataType::CtState => 4,
        }
    }
}

/// One value of a key field: an IPv4 or IPv6 address, protocol, port, mark or integer, held
/// as an unsigned number in host order (an IPv4 address is `u32::from(Ipv4Addr)`, an IPv6
/// address `u128::from(Ipv6Addr)`, a port or protocol its number). 128 bits hold the widest
/// field nft compares (`ipv6_addr`); a concatenation is one [`Datum`] per field
/// ([`ElemKey::Exact`]), so `ipv6_addr . inet_proto . inet_service` is three of them. A
/// field narrower than 128 bits never sets the bits above its width, so comparing two values
/// of one field compares them as the kernel's set backends do (network-order bytes).
pub type Datum = u128;

/// A set element's key: a single value, a prefix or range (interval sets), one per field.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ElemKey {
    /// An exact key (a concatenation of one value per field).
    Exact(Vec<Datum>),
    /// An inclusive range of one field, printed as a prefix when it is one.
    Range(Datum, Datum),
}

/// One element of a named set or map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Element {
    /// The verdict of a verdict map's element.
    pub verdict: Option<NftVerdict>,
    /// `comment "…"`.
    pub comment: Option<String>,
    /// A per-element timeout other than the set's (milliseconds).
    pub timeout_ms: Option<u64>,
    /// When the element expires (sets with timeouts).
    pub expires: Option<SimTime>,
}

/// A named set or map.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NftSet {
    /// Its name.
    pub name: String,
    /// Key fields.
    pub key: Vec<DataType>,
    /// A verdict map (`type K : verdict`).
    pub is_map: bool,
    /// `flags` as given (`dynamic`, `interval`, `timeout`, `constant`).
    pub flags: Vec<String>,
    /// The default element timeout, milliseconds.
    pub timeout_ms: Option<u64>,
    /// `size`.
    pub size: Option<u64>,
    /// `comment`.
    pub comment: Option<String>,
    /// Elements, keyed by their key.
    pub elements: std::collections::BTreeMap<ElemKey, Element>,
}

impl NftSet {
    fn is_interval(&self) -> bool {
        self.flags.iter().any(|f| f == "interval")
    }
}

/// A table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NftTable {
    /// Family.
    pub family: Family,
    /// Name.
    pub name: String,
    /// `comment`.
    pub comment: Option<String>,
    /// Named sets and maps, in creation order.
    pub sets: IndexMap<String, NftSet>,
    /// Chains, in creation order.
    pub chains: IndexMap<String, NftChain>,
}

/// A chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NftChain {
    /// Name.
    pub name: String,
    /// The hook attachment of a base chain.
    pub base: Option<BaseChain>,
    /// `comment`.
    pub comment: Option<String>,
    /// Rules in order.
    pub rules: Vec<NftRule>,
}

/// A field a rule reads from the packet or its context.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Field {
    /// `ip saddr`.
    IpSaddr,
    /// `ip daddr`.
    IpDaddr,
    /// `ip protocol`.
    IpProtocol,
    /// `ip6 saddr`.
    Ip6Saddr,
    /// `ip6 daddr`.
    Ip6Daddr,
    /// `ip6 nexthdr`.
    Ip6Nexthdr,
    /// `meta nfproto` (the packet's family; `inet` tables only).
    MetaNfproto,
    /// `icmpv6 type`.
    Icmpv6Type,
    /// `meta l4proto`.
    MetaL4proto,
    /// `meta mark`.
    MetaMark,
    /// `th sport`.
    ThSport,
    /// `th dport`.
    ThDport,
    /// `tcp|udp|sctp sport` (the protocol number).
    Sport(u8),
    /// `tcp|udp|sctp dport`.
    Dport(u8),
    /// `ct state`.
    CtState,
    /// `ct status`.
    CtStatus,
    /// `fib saddr type`.
    FibSaddrType,
    /// `fib daddr type`.
    FibDaddrType,
    /// `numgen random mod N offset O`.
    Numgen {
        /// Modulus.
        modulus: u32,
        /// Offset.
        offset: u32,
    },
}

impl Field {
    fn dtype(self) -> DataType {
        match self {
            Field::IpSaddr | Field::IpDaddr => DataType::Ipv4Addr,
            Field::Ip6Saddr | Field::Ip6Daddr => DataType::Ipv6Addr,
            Field::IpProtocol | Field::MetaL4proto | Field::Ip6Nexthdr => DataType::InetProto,
            Field::MetaNfproto => DataType::NfProto,
            Field::Icmpv6Type => DataType::Icmpv6Type,
            Field::MetaMark => DataType::Mark,
            Field::ThSport | Field::ThDport | Field::Sport(_) | Field::Dport(_) => {
                DataType::InetService
            }
            Field::CtState => DataType::CtState,
            Field::CtStatus | Field::FibSaddrType | Field::FibDaddrType => DataType::Integer,
            Field::Numgen { .. } => DataType::Integer,
        }
    }
}

/// The right-hand side of a match or lookup.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rhs {
    /// One value (or prefix/range, for a single field).
    Value(ElemKey),
    /// An anonymous set `{ a, b }`.
    Set(Vec<ElemKey>),
    /// A named set `@name`.
    SetRef(String),
}

/// A rule's statement.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Stmt {
    /// A relational match: `lhs [& mask] [==|!=] rhs`.
    Match {
        /// The field(s), concatenated.
        lhs: Vec<Field>,
        /// `meta mark & MASK == …`.
        mask: Option<u32>,
        /// `!=`.
        negated: bool,
        /// The value, set or set reference.
        rhs: Rhs,
    },
    /// `counter packets P bytes B`.
    Counter {
        /// Packets.
        packets: u64,
        /// Bytes.
        bytes: u64,
    },
    /// A verdict.
    Verdict(NftVerdict),
    /// `lhs vmap @map` or `lhs vmap { k : v, … }`.
    Vmap {
        /// The key.
        lhs: Vec<Field>,
        /// Named map.
        map: Option<String>,
        /// Anonymous map.
        anon: Vec<(ElemKey, NftVerdict)>,
    },
    /// `meta mark set …`.
    MarkSet(MarkOp),
    /// `update @set { key }`.
    Update {
        /// The set.
        set: String,
        /// The key.
        key: Vec<Field>,
    },
    /// `dnat to A[:P]` / `snat to A[:P]` (`[A6]:P` for IPv6).
    Nat {
        /// `dnat` (true) or `snat`.
        dnat: bool,
        /// The address: IPv4 in `ip` tables, IPv6 in `ip6` tables, either in `inet` tables
        /// (where the statement acts on packets of the address's family only).
        addr: std::net::IpAddr,
        /// The port.
        port: Option<u16>,
        /// The rule is in an `inet` table, where nft prints the address family
        /// (`dnat ip6 to [fd00::1]:80`).
        inet: bool,
    },
    /// `masquerade [fully-random]`.
    Masquerade {
        /// `fully-random`.
        fully_random: bool,
    },
    /// `reject [with icmp X | with tcp reset]`.
    Reject(crate::rule::RejectWith),
    /// `iifname [!=] "NAME"`: the input interface's name; a trailing `*` matches every name
    /// with that prefix (kube-proxy's LocalDetector in `BridgeInterface` and
    /// `InterfaceNamePrefix` modes).
    Iifname {
        /// `!=`.
        negated: bool,
        /// The name or `prefix*`.
        name: String,
    },
    /// `oifname [!=] "NAME"`: the output interface's name, as [`Stmt::Iifname`] (no output
    /// interface, before routing, compares as the empty name).
    Oifname {
        /// `!=`.
        negated: bool,
        /// The name or `prefix*`.
        name: String,
    },
}

/// How `meta mark set` computes the new mark.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum MarkOp {
    /// `meta mark set V`.
    Set(u32),
    /// `meta mark set meta mark | V`.
    Or(u32),
    /// `meta mark set meta mark ^ V`.
    Xor(u32),
    /// `meta mark set meta mark & V`.
    And(u32),
}

/// A rule.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NftRule {
    /// Statements in order.
    pub stmts: Vec<Stmt>,
    /// `comment "…"`.
    pub comment: Option<String>,
}

/// All nftables tables of a namespace.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NftRuleset {
    /// Tables in creation order, keyed by (family, name).
    pub tables: IndexMap<(Family, String), NftTable>,
}

/// An error of `nft -f` input: where and what.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{file}:{line}:{col}: Error: {msg}")]
pub struct NftError {
    /// The file name as given.
    pub file: String,
    /// 1-based line.
    pub line: usize,
    /// 1-based column.
    pub col: usize,
    /// What went wrong.
    pub msg: String,
}

/// One parsed `nft -f` command, with the line it came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Command {
    /// 1-based line.
    pub line: usize,
    /// 1-based column of the command.
    pub col: usize,
    /// What it does.
    pub op: Op,
}

/// What a command does.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// `add table` (`create`: fails if it exists).
    AddTable {
        /// Family.
        family: Family,
        /// Name.
        name: String,
        /// Comment.
        comment: Option<String>,
        /// `create`.
        create: bool,
    },
    /// `add chain`.
    AddChain {
        /// Family.
        family: Family,
        /// Table.
        table: String,
        /// The chain (rules empty).
        chain: NftChain,
        /// `create`.
        create: bool,
    },
    /// `add set` / `add map`.
    AddSet {
        /// Family.
        family: Family,
        /// Table.
        table: String,
        /// The set (elements as declared).
        set: NftSet,
        /// `create`.
        create: bool,
    },
    /// `add rule` / `insert rule`.
    AddRule {
        /// Family.
        family: Family,
        /// Table.
        table: String,
        /// Chain.
        chain: String,
        /// The rule.
        rule: NftRule,
        /// `insert` (at the head).
        insert: bool,
    },
    /// `add element`.
    AddElements {
        /// Family.
        family: Family,
        /// Table.
        table: String,
        /// Set.
        set: String,
        /// Elements.
        elems: Vec<(ElemKey, Element)>,
    },
    /// `delete element`.
    DeleteElements {
        /// Family.
        family: Family,
        /// Table.
        table: String,
        /// Set.
        set: String,
        /// Keys.
        keys: Vec<ElemKey>,
    },
    /// `flush table|chain|set|map|ruleset`.
    Flush(Target),
    /// `delete table|chain|set|map`.
    Delete(Target),
}

/// The object of a `flush` / `delete`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Target {
    /// `ruleset`.
    Ruleset,
    /// `table F T`.
    Table(Family, String),
    /// `chain F T C`.
    Chain(Family, String, String),
    /// `set F T S` / `map F T S`.
    Set(Family, String, String),
}

impl NftRuleset {
    /// An empty ruleset.
    pub fn new() -> NftRuleset {
        NftRuleset::default()
    }

    /// Whether there are no tables.
    pub fn is_empty(&self) -> bool {
        self.tables.is_empty()
    }

    /// Runs the commands of `text` (`nft -f FILE`, `file` naming it in errors) as one
    /// transaction: either all apply or, on the first error, none does. `now` is when, for
    /// the expiry of elements added to sets with timeouts.
    pub fn apply(&mut self, file: &str, text: &str, now: SimTime) -> Result<usize, NftError> {
        let cmds = parse::parse(file, text, self)?;
        let mut next = self.clone();
        for c in &cmds {
            next.run(c, now).map_err(|msg| NftError {
                file: file.to_string(),
                line: c.line,
                col: c.col,
                msg,
            })?;
        }
        *self = next;
        Ok(cmds.len())
    }

    fn table_mut(&mut self, family: Family, name: &str) -> Result<&mut NftTable, String> {
        self.tables
            .get_mut(&(family, name.to_string()))
            .ok_or_else(|| format!("No such file or directory: table {family} {name}"))
    }

    /// The tables, as `FAMILY NAME`, in creation order (`nft list tables`).
    pub fn table_names(&self) -> Vec<String> {
        self.tables
            .keys()
            .map(|(f, n)| format!("{f} {n}"))
            .collect()
    }

    /// The table `family name`.
    pub fn table(&self, family: Family, name: &str) -> Option<&NftTable> {
        self.tables.get(&(family, name.to_string()))
    }

    fn run(&mut self, c: &Command, now: SimTime) -> Result<(), String> {
        match &c.op {
            Op::AddTable {
                family,
                name,
                comment,
                create,
            } => {
                let key = (*family, name.clone());
                if let Some(t) = self.tables.get_mut(&key) {
                    if *create {
                        return Err(format!("File exists: table {family} {name}"));
                    }
                    if comment.is_some() {
                        t.comment = comment.clone();
                    }
                    return Ok(());
                }
                self.tables.insert(
                    key,
                    NftTable {
                        family: *family,
                        name: name.clone(),
                        comment: comment.clone(),
                        sets: IndexMap::new(),
                        chains: IndexMap::new(),
                    },
                );
                Ok(())
            }
            Op::AddChain {
                family,
                table,
                chain,
                create,
            } => {
                let t = self.table_mut(*family, table)?;
                if let Some(old) = t.chains.get_mut(&chain.name) {
                    if *create {
                        return Err(format!("File exists: chain {}", chain.name));
                    }
                    if chain.base.is_some()
                        && old.base.map(|b| (b.ty, b.hook, b.priority))
                            != chain.base.map(|b| (b.ty, b.hook, b.priority))
                    {
                        return Err(format!(
                            "Operation not supported: chain {} cannot change its hook, type or priority",
                            chain.name
                        ));
                    }
                    if let (Some(o), Some(n)) = (old.base.as_mut(), chain.base) {
                        o.policy_accept = n.policy_accept;
                    }
                    return Ok(());
                }
                if let Some(b) = chain.base {
                    if b.ty == ChainType::Nat && t.family == Family::Inet {
                        // Supported by the kernel; kept for completeness.
                    }
                    if b.ty == ChainType::Nat && b.hook == Hook::Forward {
                        return Err(
                            "Operation not supported: nat chains cannot hook forward".to_string()
                        );
                    }
                }
                t.chains.insert(chain.name.clone(), chain.clone());
                Ok(())
            }
            Op::AddSet {
                family,
                table,
                set,
                create,
            } => {
                let t = self.table_mut(*family, table)?;
                if let Some(old) = t.sets.get_mut(&set.name) {
                    if *create {
                        return Err(format!("File exists: set {}", set.name));
                    }
                    if old.key != set.key || old.is_map != set.is_map {
                        return Err(format!(
                            "File exists: set {} already exists with another type",
                            set.name
                        ));
                    }
                    let elems: Vec<_> = set.elements.clone().into_iter().collect();
                    return add_elements(old, elems, now);
                }
                let mut s = set.clone();
                let elems: Vec<_> = std::mem::take(&mut s.elements).into_iter().collect();
                add_elements(&mut s, elems, now)?;
                t.sets.insert(s.name.clone(), s);
                Ok(())
            }
            Op::AddRule {
                family,
                table,
                chain,
                rule,
                insert,
            } => {
                let t = self.table_mut(*family, table)?;
                check_rule_refs(t, chain, rule)?;
                // A set an `update` statement writes becomes dynamic; nft gives it the
                // default size of a dynamic set when it has none (what `nft list` then shows).
                for s in &rule.stmts {
                    if let Stmt::Update { set, .. } = s {
                        if let Some(st) = t.sets.get_mut(set) {
                            if !st.flags.iter().any(|f| f == "dynamic") {
                                st.flags.insert(0, "dynamic".into());
                            }
                            if st.size.is_none() {
                                st.size = Some(65535);
                            }
                        }
                    }
                }
                let c = t.chains.get_mut(chain).ok_or_else(|| {
                    format!("No such file or directory: chain {family} {table} {chain}")
                })?;
                if *insert {
                    c.rules.insert(0, rule.clone());
                } else {
                    c.rules.push(rule.clone());
                }
                Ok(())
            }
            Op::AddElements {
                family,
                table,
                set,
                elems,
            } => {
                let t = self.table_mut(*family, table)?;
                for (_, e) in elems {
                    if let Some(v) = &e.verdict {
                        check_target(t, v)?;
                    }
                }
                let s = t
                    .sets
                    .get_mut(set)
                    .ok_or_else(|| format!("No such file or directory: set {set}"))?;
                add_elements(s, elems.clone(), now)
            }
            Op::DeleteElements {
                family,
                table,
                set,
                keys,
            } => {
                let t = self.table_mut(*family, table)?;
                let s = t
                    .sets
                    .get_mut(set)
                    .ok_or_else(|| format!("No such file or directory: set {set}"))?;
                for k in keys {
                    if s.elements.remove(k).is_none() {
                        return Err(format!(
                            "No such file or directory: element not in set {set}"
                        ));
                    }
                }
                Ok(())
            }
            Op::Flush(target) => match target {
                Target::Ruleset => {
                    self.tables.clear();
                    Ok(())
                }
                Target::Table(f, n) => {
                    let t = self.table_mut(*f, n)?;
                    for c in t.chains.values_mut() {
                        c.rules.clear();
                    }
                    for s in t.sets.values_mut() {
                        s.elements.clear();
                    }
                    Ok(())
                }
                Target::Chain(f, n, c) => {
                    let t = self.table_mut(*f, n)?;
                    t.chains
                        .get_mut(c)
                        .ok_or_else(|| format!("No such file or directory: chain {c}"))?
                        .rules
                        .clear();
                    Ok(())
                }
                Target::Set(f, n, s) => {
                    let t = self.table_mut(*f, n)?;
                    t.sets
                        .get_mut(s)
                        .ok_or_else(|| format!("No such file or directory: set {s}"))?
                        .elements
                        .clear();
                    Ok(())
                }
            },
            Op::Delete(target) => match target {
                Target::Ruleset => Err("syntax error: delete ruleset".into()),
                Target::Table(f, n) => {
                    self.tables
                        .shift_remove(&(*f, n.clone()))
                        .ok_or_else(|| format!("No such file or directory: table {f} {n}"))?;
                    Ok(())
                }
                Target::Chain(f, n, c) => {
                    let t = self.table_mut(*f, n)?;
                    let ch = t
                        .chains
                        .get(c)
                        .ok_or_else(|| format!("No such file or directory: chain {c}"))?;
                    if !ch.rules.is_empty() || chain_referenced(t, c) {
                        return Err(format!("Device or resource busy: chain {c}"));
                    }
                    t.chains.shift_remove(c);
                    Ok(())
                }
                Target::Set(f, n, s) => {
                    let t = self.table_mut(*f, n)?;
                    if !t.sets.contains_key(s) {
                        return Err(format!("No such file or directory: set {s}"));
                    }
                    if set_referenced(t, s) {
                        return Err(format!("Device or resource busy: set {s}"));
                    }
                    t.sets.shift_remove(s);
                    Ok(())
                }
            },
        }
    }
}

fn add_elements(
    s: &mut NftSet,
    elems: Vec<(ElemKey, Element)>,
    now: SimTime,
) -> Result<(), String> {
    for (k, mut e) in elems {
        if s.is_map && e.verdict.is_none() {
            return Err(format!("map {}: element without a verdict", s.name));
        }
        if !s.is_map && e.verdict.is_some() {
            return Err(format!("set {}: element with a verdict", s.name));
        }
        if matches!(k, ElemKey::Range(..)) && !s.is_interval() {
            return Err(format!(
                "set {}: a prefix or range needs `flags interval`",
                s.name
            ));
        }
        if let ElemKey::Exact(v) = &k {
            if v.len() != s.key.len() {
                return Err(format!(
                    "set {}: element has {} fields, the set's type {}",
                    s.name,
                    v.len(),
                    s.key.len()
                ));
            }
        }
        let timeout = e.timeout_ms.or(s.timeout_ms);
        if let Some(ms) = timeout {
            if e.timeout_ms == s.timeout_ms {
                e.timeout_ms = None;
            }
            e.expires = Some(now + sim_core::SimDuration::from_millis(ms));
        }
        // `add element` of an existing key keeps the element (NLM_F_EXCL not set).
        s.elements.entry(k).or_insert(e);
    }
    Ok(())
}

fn check_target(t: &NftTable, v: &NftVerdict) -> Result<(), String> {
    if let Some(c) = v.target() {
        match t.chains.get(c) {
            None => return Err(format!("No such file or directory: chain {c}")),
            Some(ch) if ch.base.is_some() => {
                return Err(format!(
                    "Operation not supported: cannot jump to base chain {c}"
                ))
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_rule_refs(t: &NftTable, _chain: &str, rule: &NftRule) -> Result<(), String> {
    for s in &rule.stmts {
        match s {
            Stmt::Verdict(v) => check_target(t, v)?,
            Stmt::Vmap { map, anon, lhs } => {
                for (_, v) in anon {
                    check_target(t, v)?;
                }
                if let Some(m) = map {
                    let st = t
                        .sets
                        .get(m)
                        .ok_or_else(|| format!("No such file or directory: map {m}"))?;
                    if !st.is_map {
                        return Err(format!("{m} is a set, not a verdict map"));
                    }
                    check_key_type(st, lhs)?;
                }
            }
            Stmt::Match {
                rhs: Rhs::SetRef(name),
                lhs,
                ..
            }
            | Stmt::Update {
                set: name,
                key: lhs,
            } => {
                let st = t
                    .sets
                    .get(name)
                    .ok_or_else(|| format!("No such file or directory: set {name}"))?;
                check_key_type(st, lhs)?;
            }
            _ => {}
        }
    }
    Ok(())
}

fn check_key_type(s: &NftSet, lhs: &[Field]) -> Result<(), String> {
    let got: Vec<DataType> = lhs.iter().map(|f| f.dtype()).collect();
    if got != s.key {
        let names = |v: &[DataType]| v.iter().map(|d| d.name()).collect::<Vec<_>>().join(" . ");
        return Err(format!(
            "datatype mismatch, expected {}, expression has type {}",
            names(&s.key),
            names(&got)
        ));
    }
    Ok(())
}

fn chain_referenced(t: &NftTable, c: &str) -> bool {
    let hit = |v: &NftVerdict| v.target() == Some(c);
    t.chains.values().any(|ch| {
        ch.rules.iter().any(|r| {
            r.stmts.iter().any(|s| match s {
                Stmt::Verdict(v) => hit(v),
                Stmt::Vmap { anon, .. } => anon.iter().any(|(_, v)| hit(v)),
                _ => false,
            })
        })
    }) || t.sets.values().any(|s| {
        s.elements
            .values()
            .any(|e| e.verdict.as_ref().is_some_and(hit))
    })
}

fn set_referenced(t: &NftTable, name: &str) -> bool {
    t.chains.values().any(|ch| {
        ch.rules.iter().any(|r| {
            r.stmts.iter().any(|s| match s {
                Stmt::Match {
                    rhs: Rhs::SetRef(n),
                    ..
                }
                | Stmt::Update { set: n, .. } => n == name,
                Stmt::Vmap { map: Some(n), .. } => n == name,
                _ => false,
            })
        })
    })
}
