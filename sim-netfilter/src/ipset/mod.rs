//! ipset: the sets kube-proxy's IPVS mode keeps (`KUBE-CLUSTER-IP`, `KUBE-LOOP-BACK`,
//! `KUBE-NODE-PORT-TCP`, …), `ipset restore` input, `ipset save` / `ipset list` text as
//! ipset 7.17 prints it from a Linux 6.x kernel, and the membership test of iptables'
//! `-m set --match-set NAME FLAGS` (`xt_set`).
//!
//! The set types are those kube-proxy declares (`pkg/proxy/ipvs/ipset/types.go`):
//! `hash:ip`, `hash:ip,port`, `hash:ip,port,ip`, `hash:ip,port,net`, `bitmap:port`, and
//! `hash:net`, for family `inet` (IPv4). Hash sets place each element as the kernel does
//! (`hash.rs`: `jhash2` under the set's `initval`), so members list in the kernel's order and
//! `Size in memory` is the kernel's figure; bitmap sets list in port order. A set made
//! without `initval` gets one drawn from its name (the kernel draws it at random), so the
//! order is the same run to run.
//!
//! Not modelled, refused with the line: family `inet6`, the `timeout`, `counters`,
//! `skbinfo`, `forceadd` and `netmask` options, element ranges (`10.0.0.1-10.0.0.9`,
//! `tcp:80-90`), port names, `swap` and `rename`. After `del`, a bucket keeps the slots it
//! had (the kernel may shrink it), so `Size in memory` can differ there.

mod hash;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::Ipv4Addr;

use hash::{AddOutcome, Keyed, Table, AHASH_INIT_SIZE, AHASH_MAX_SIZE};

/// `IPSET_MAXNAMELEN - 1`: the longest set name.
pub const IPSET_MAX_NAME_LEN: usize = 31;
/// `IPSET_DEFAULT_HASHSIZE`.
pub const IPSET_DEFAULT_HASHSIZE: u32 = 1024;
/// `IPSET_DEFAULT_MAXELEM`.
pub const IPSET_DEFAULT_MAXELEM: u32 = 65536;
/// `IPSET_MAX_COMMENT_SIZE`: a comment's longest length in bytes.
pub const IPSET_MAX_COMMENT_SIZE: usize = 255;

/// The set types modelled.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum SetType {
    /// `hash:ip`.
    HashIp,
    /// `hash:ip,port`.
    HashIpPort,
    /// `hash:ip,port,ip`.
    HashIpPortIp,
    /// `hash:ip,port,net`.
    HashIpPortNet,
    /// `hash:net`.
    HashNet,
    /// `bitmap:port`.
    BitmapPort,
}

impl SetType {
    /// The type's name as `ipset` takes and prints it.
    pub fn name(self) -> &'static str {
        match self {
            SetType::HashIp => "hash:ip",
            SetType::HashIpPort => "hash:ip,port",
            SetType::HashIpPortIp => "hash:ip,port,ip",
            SetType::HashIpPortNet => "hash:ip,port,net",
            SetType::HashNet => "hash:net",
            SetType::BitmapPort => "bitmap:port",
        }
    }

    /// The type from its name.
    pub fn from_name(s: &str) -> Option<SetType> {
        Some(match s {
            "hash:ip" => SetType::HashIp,
            "hash:ip,port" => SetType::HashIpPort,
            "hash:ip,port,ip" => SetType::HashIpPortIp,
            "hash:ip,port,net" => SetType::HashIpPortNet,
            "hash:net" => SetType::HashNet,
            "bitmap:port" => SetType::BitmapPort,
            _ => return None,
        })
    }

    /// The type's newest revision in Linux 6.1 (`IPSET_TYPE_REV_MAX` of each
    /// `ip_set_*.c`), the one `ipset list` shows.
    pub fn revision(self) -> u8 {
        match self {
            SetType::HashIp => 6,
            SetType::HashIpPort => 7,
            SetType::HashIpPortIp => 6,
            SetType::HashIpPortNet => 8,
            SetType::HashNet => 7,
            SetType::BitmapPort => 3,
        }
    }

    /// How many of `--match-set`'s `src`/`dst` flags the type reads (its `dimension`).
    pub fn dimension(self) -> usize {
        match self {
            SetType::HashIp | SetType::HashNet | SetType::BitmapPort => 1,
            SetType::HashIpPort => 2,
            SetType::HashIpPortIp | SetType::HashIpPortNet => 3,
        }
    }

    /// The empty set's `Size in memory` (x86_64, Linux 6.1, family inet, measured with
    /// `ipset list` here: `sizeof(struct htype)` with its `nets` array for net types, one
    /// lock region; `sizeof(struct bitmap_port)`).
    fn base_memsize(self) -> u64 {
        match self {
            SetType::HashIp | SetType::HashIpPort => 216,
            SetType::HashIpPortIp => 208,
            SetType::HashIpPortNet => 464,
            SetType::HashNet => 456,
            SetType::BitmapPort => 72,
        }
    }

    /// The element struct's size (`sizeof(struct hash_*4_elem)`), and with the comment
    /// extension (the element aligned to 8, then the comment pointer).
    fn dsize(self, comment: bool) -> u64 {
        let elem: u64 = match self {
            SetType::HashIp => 4,
            SetType::HashIpPort | SetType::HashNet => 8,
            SetType::HashIpPortIp | SetType::HashIpPortNet => 12,
            SetType::BitmapPort => 0,
        };
        if comment {
            elem.div_ceil(8) * 8 + 8
        } else {
            elem
        }
    }

    fn has_net(self) -> bool {
        matches!(self, SetType::HashIpPortNet | SetType::HashNet)
    }
}

/// One element of a hash set (IPv4). Fields a type does not have are 0.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Elem {
    kind: SetType,
    ip: u32,
    port: u16,
    proto: u8,
    /// The second address (`hash:ip,port,ip`) or the net (`hash:ip,port,net`; for
    /// `hash:net` the net is `ip`).
    ip2: u32,
    /// The net's prefix length (net types).
    cidr: u8,
    nomatch: bool,
    comment: Option<String>,
}

impl Elem {
    /// An element of `kind` with every field 0 (a /32 net, no comment).
    fn zero(kind: SetType) -> Elem {
        Elem {
            kind,
            ip: 0,
            port: 0,
            proto: 0,
            ip2: 0,
            cidr: 32,
            nomatch: false,
            comment: None,
        }
    }
}

fn le(x: u32) -> u32 {
    u32::from_le_bytes(x.to_be_bytes())
}

impl Keyed for Elem {
    /// The element struct's bytes (network order fields) as x86's native words; the
    /// `nomatch` flag is cleared while hashing (`mtype_add` sets it after).
    fn key_words(&self) -> Vec<u32> {
        let [ph, pl] = self.port.to_be_bytes();
        match self.kind {
            SetType::HashIp => vec![le(self.ip)],
            SetType::HashIpPort => vec![le(self.ip), u32::from_le_bytes([ph, pl, self.proto, 0])],
            SetType::HashIpPortIp => vec![
                le(self.ip),
                le(self.ip2),
                u32::from_le_bytes([ph, pl, self.proto, 0]),
            ],
            // struct hash_ipportnet4_elem: ip, ip2, port, u8 cidr:7 (prefix - 1), nomatch:1,
            // proto.
            SetType::HashIpPortNet => vec![
                le(self.ip),
                le(self.ip2),
                u32::from_le_bytes([ph, pl, (self.cidr - 1) & 0x7f, self.proto]),
            ],
            // struct hash_net4_elem: ip, u16 padding, u8 nomatch, u8 cidr.
            SetType::HashNet => vec![le(self.ip), u32::from_le_bytes([0, 0, 0, self.cidr])],
            SetType::BitmapPort => vec![u32::from(self.port)],
        }
    }
}

/// `mtype_data_equal`: the element's data, not its flags or extensions.
fn same(a: &Elem, b: &Elem) -> bool {
    a.ip == b.ip && a.port == b.port && a.proto == b.proto && a.ip2 == b.ip2 && a.cidr == b.cidr
}

fn mask(cidr: u8) -> u32 {
    if cidr == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(cidr))
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Body {
    Hash {
        table: Table<Elem>,
        /// The prefix lengths present (net types), with their element counts: the test
        /// tries them most specific first (`h->nets`).
        nets: BTreeMap<u8, u32>,
        hashsize: u32,
        maxelem: u32,
    },
    Bitmap {
        first: u16,
        last: u16,
        members: BTreeMap<u16, Option<String>>,
    },
}

/// One set.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IpSet {
    name: String,
    kind: SetType,
    comment: bool,
    body: Body,
}

impl IpSet {
    /// Its name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its type.
    pub fn set_type(&self) -> SetType {
        self.kind
    }

    /// The number of entries.
    pub fn len(&self) -> usize {
        match &self.body {
            Body::Hash { table, .. } => table.len(),
            Body::Bitmap { members, .. } => members.len(),
        }
    }

    /// Whether it has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The members as `ipset save` prints them after `add NAME `, in listing order.
    pub fn members(&self) -> Vec<String> {
        match &self.body {
            Body::Hash { table, .. } => table.iter().map(member_text).collect(),
            Body::Bitmap { members, .. } => members
                .iter()
                .map(|(p, c)| {
                    let mut s = p.to_string();
                    push_comment(&mut s, c);
                    s
                })
                .collect(),
        }
    }

    /// The `Header:` line's text (and what `ipset save` prints after `create NAME TYPE`).
    pub fn header(&self) -> String {
        match &self.body {
            Body::Hash {
                table,
                hashsize: _,
                maxelem,
                ..
            } => {
                let mut s = format!(
                    "family inet hashsize {} maxelem {maxelem}",
                    1u64 << table.bits
                );
                if self.comment {
                    s.push_str(" comment");
                }
                let _ = write!(
                    s,
                    " bucketsize {} initval 0x{:08x}",
                    table.bucketsize, table.initval
                );
                s
            }
            Body::Bitmap { first, last, .. } => {
                let mut s = format!("range {first}-{last}");
                if self.comment {
                    s.push_str(" comment");
                }
                s
            }
        }
    }

    /// `Size in memory:` as the kernel reports it (x86_64 struct sizes).
    pub fn memsize(&self) -> u64 {
        let comments: u64 = self.comment_bytes();
        match &self.body {
            Body::Hash { table, .. } => {
                self.kind.base_memsize() + table.memsize(self.kind.dsize(self.comment)) + comments
            }
            Body::Bitmap { first, last, .. } => {
                let n = u64::from(*last - *first) + 1;
                let ext = if self.comment { n * 8 } else { 0 };
                self.kind.base_memsize() + n.div_ceil(64) * 8 + ext + comments
            }
        }
    }

    /// Each comment costs `sizeof(struct ip_set_comment_rcu)` (16) + its length + 1.
    fn comment_bytes(&self) -> u64 {
        let one = |c: &Option<String>| c.as_ref().map_or(0, |c| 16 + c.len() as u64 + 1);
        match &self.body {
            Body::Hash { table, .. } => table.iter().map(|e| one(&e.comment)).sum(),
            Body::Bitmap { members, .. } => members.values().map(one).sum(),
        }
    }

    /// `ip_set_test` for the packet's fields under `--match-set`'s flags.
    fn test(&self, pkt: &SetPacket, flags: &[SetDir]) -> SetTest {
        // ip_set_test: fewer flags than the type's dimension never match.
        if flags.len() < self.kind.dimension() {
            return SetTest::NotFound;
        }
        let addr = |d: SetDir| match d {
            SetDir::Src => pkt.src,
            SetDir::Dst => pkt.dst,
        };
        let port = |d: SetDir| match d {
            SetDir::Src => pkt.sport,
            SetDir::Dst => pkt.dport,
        };
        match &self.body {
            Body::Bitmap {
                first,
                last,
                members,
            } => {
                // ip_set_get_ip_port: bitmap:port matches TCP and UDP only.
                if pkt.proto != 6 && pkt.proto != 17 {
                    return SetTest::NotFound;
                }
                let p = port(flags[0]);
                if p < *first || p > *last || !members.contains_key(&p) {
                    SetTest::NotFound
                } else {
                    SetTest::Found
                }
            }
            Body::Hash { table, nets, .. } => {
                let mut e = Elem {
                    ip: addr(flags[0]),
                    ..Elem::zero(self.kind)
                };
                match self.kind {
                    SetType::HashIp => {}
                    SetType::HashIpPort => {
                        e.port = port(flags[1]);
                        e.proto = pkt.proto;
                    }
                    SetType::HashIpPortIp => {
                        e.port = port(flags[1]);
                        e.proto = pkt.proto;
                        e.ip2 = addr(flags[2]);
                    }
                    SetType::HashIpPortNet => {
                        e.port = port(flags[1]);
                        e.proto = pkt.proto;
                    }
                    SetType::HashNet | SetType::BitmapPort => {}
                }
                if !self.kind.has_net() {
                    return match table.find(&e, same) {
                        Some(_) => SetTest::Found,
                        None => SetTest::NotFound,
                    };
                }
                // mtype_test_cidrs: the prefixes present, most specific first; the first
                // hit decides (a `nomatch` element answers "not in the set").
                let full = if self.kind == SetType::HashNet {
                    e.ip
                } else {
                    addr(flags[2])
                };
                for &cidr in nets.keys().rev() {
                    e.cidr = cidr;
                    if self.kind == SetType::HashNet {
                        e.ip = full & mask(cidr);
                    } else {
                        e.ip2 = full & mask(cidr);
                    }
                    if let Some(hit) = table.find(&e, same) {
                        return if hit.nomatch {
                            SetTest::Nomatch
                        } else {
                            SetTest::Found
                        };
                    }
                }
                SetTest::NotFound
            }
        }
    }
}

fn proto_name(p: u8) -> String {
    match p {
        6 => "tcp".into(),
        17 => "udp".into(),
        132 => "sctp".into(),
        136 => "udplite".into(),
        n => format!("{n}"),
    }
}

fn net_text(ip: u32, cidr: u8) -> String {
    if cidr == 32 {
        Ipv4Addr::from(ip).to_string()
    } else {
        format!("{}/{cidr}", Ipv4Addr::from(ip))
    }
}

fn push_comment(s: &mut String, c: &Option<String>) {
    if let Some(c) = c {
        let _ = write!(s, " comment \"{c}\"");
    }
}

fn member_text(e: &Elem) -> String {
    let ip = Ipv4Addr::from(e.ip);
    let mut s = match e.kind {
        SetType::HashIp => ip.to_string(),
        SetType::HashIpPort => format!("{ip},{}:{}", proto_name(e.proto), e.port),
        SetType::HashIpPortIp => format!(
            "{ip},{}:{},{}",
            proto_name(e.proto),
            e.port,
            Ipv4Addr::from(e.ip2)
        ),
        SetType::HashIpPortNet => format!(
            "{ip},{}:{},{}",
            proto_name(e.proto),
            e.port,
            net_text(e.ip2, e.cidr)
        ),
        SetType::HashNet => net_text(e.ip, e.cidr),
        SetType::BitmapPort => e.port.to_string(),
    };
    if e.nomatch {
        s.push_str(" nomatch");
    }
    push_comment(&mut s, &e.comment);
    s
}

/// Which address or port of the packet a `--match-set` flag reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum SetDir {
    /// `src`.
    Src,
    /// `dst`.
    Dst,
}

/// What a set test found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SetTest {
    /// The packet's element is in the set.
    Found,
    /// It is not.
    NotFound,
    /// It met a `nomatch` element (not in the set, unless `--return-nomatch`).
    Nomatch,
}

/// The packet fields a set test reads (IPv4).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SetPacket {
    /// Source address.
    pub src: u32,
    /// Destination address.
    pub dst: u32,
    /// IP protocol number.
    pub proto: u8,
    /// Source port (ICMP: type << 8 | code, as `ip_set_get_ip4_port` takes it; 0 for a
    /// protocol without ports).
    pub sport: u16,
    /// Destination port (likewise).
    pub dport: u16,
}

/// A bad line of `ipset restore` input.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct IpsetError {
    /// 1-based line.
    pub line: usize,
    /// What was wrong, and what was expected.
    pub message: String,
}

/// The sets of one network namespace, in the kernel's index order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct IpSets {
    /// `ip_set_list`: a destroyed set's index is reused by the next create.
    slots: Vec<Option<IpSet>>,
}

/// What a restore line does.
enum Cmd<'a> {
    Create(&'a str, &'a str, Vec<&'a str>),
    Add(&'a str, &'a str, Vec<&'a str>),
    Del(&'a str, &'a str),
    Flush(Option<&'a str>),
    Destroy(Option<&'a str>),
}

/// Splits a line into words, a `"…"` word keeping its spaces (without the quotes).
fn words(line: &str) -> Result<Vec<&str>, String> {
    let mut out = Vec::new();
    let mut rest = line.trim();
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix('"') {
            let end = r
                .find('"')
                .ok_or_else(|| "a quoted word without its closing '\"'".to_string())?;
            out.push(&r[..end]);
            rest = r[end + 1..].trim_start();
        } else {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            out.push(&rest[..end]);
            rest = rest[end..].trim_start();
        }
    }
    Ok(out)
}

fn parse_ip(s: &str) -> Result<u32, String> {
    s.parse::<Ipv4Addr>().map(u32::from).map_err(|_| {
        format!("expected an IPv4 address, got {s:?} (ranges and IPv6 are not modelled)")
    })
}

fn parse_net(s: &str) -> Result<(u32, u8), String> {
    match s.split_once('/') {
        None => Ok((parse_ip(s)?, 32)),
        Some((a, c)) => {
            let ip = parse_ip(a)?;
            let cidr: u8 = c
                .parse()
                .ok()
                .filter(|c| (1..=32).contains(c))
                .ok_or_else(|| format!("expected a prefix length 1-32 after '/', got {c:?}"))?;
            Ok((ip & mask(cidr), cidr))
        }
    }
}

fn parse_proto_port(s: &str) -> Result<(u8, u16), String> {
    let (proto, port) = match s.split_once(':') {
        Some((p, n)) => (p, n),
        None => ("tcp", s),
    };
    let proto = match proto {
        "tcp" => 6,
        "udp" => 17,
        "sctp" => 132,
        "udplite" => 136,
        other => {
            return Err(format!(
                "expected protocol tcp, udp, sctp or udplite before ':', got {other:?}"
            ))
        }
    };
    let port = port.parse::<u16>().map_err(|_| {
        format!("expected a port number, got {port:?} (port names and ranges are not modelled)")
    })?;
    Ok((proto, port))
}

/// `initval` for a set made without one: the kernel draws `get_random_u32()`; nfsim takes
/// it from the set's name, the same run to run.
fn initval_of(name: &str) -> u32 {
    let words: Vec<u32> = name
        .as_bytes()
        .chunks(4)
        .map(|c| {
            let mut b = [0u8; 4];
            b[..c.len()].copy_from_slice(c);
            u32::from_le_bytes(b)
        })
        .collect();
    hash::jhash2(&words, 0x6970_7365)
}

impl IpSets {
    /// No sets.
    pub fn new() -> IpSets {
        IpSets::default()
    }

    /// The sets in index order (as `ipset list` shows them).
    pub fn iter(&self) -> impl Iterator<Item = &IpSet> {
        self.slots.iter().flatten()
    }

    /// The set called `name`.
    pub fn get(&self, name: &str) -> Option<&IpSet> {
        self.iter().find(|s| s.name == name)
    }

    /// Whether a set called `name` exists.
    pub fn contains(&self, name: &str) -> bool {
        self.get(name).is_some()
    }

    fn get_mut(&mut self, name: &str) -> Option<&mut IpSet> {
        self.slots.iter_mut().flatten().find(|s| s.name == name)
    }

    /// Tests a packet against set `name` (`ip_set_test`); an unknown set, or a packet that
    /// is not IPv4, is not in it.
    pub fn test(&self, name: &str, pkt: &SetPacket, flags: &[SetDir]) -> SetTest {
        match self.get(name) {
            Some(s) => s.test(pkt, flags),
            None => SetTest::NotFound,
        }
    }

    /// Applies `ipset restore` input: `create`, `add`, `del`, `flush`, `destroy` lines (with
    /// `-exist` / `-!` anywhere on a line to ignore "already exists" and "not added"),
    /// blank lines and `#` comments. `in_use(name)` says whether a rule references a set
    /// (`destroy` then fails as `ipset` does). Like `ipset restore`, lines before a bad one
    /// stay applied.
    pub fn restore(&mut self, text: &str, in_use: &dyn Fn(&str) -> bool) -> Result<(), IpsetError> {
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let fail = |message: String| IpsetError { line, message };
            let trimmed = raw.trim();
            if trimmed.is_empty() || trimmed.starts_with('#') {
                continue;
            }
            let mut w = words(trimmed).map_err(fail)?;
            let exist = w.iter().any(|x| *x == "-exist" || *x == "-!");
            w.retain(|x| *x != "-exist" && *x != "-!");
            let cmd = match w.as_slice() {
                ["create" | "-N" | "n", name, ty, opts @ ..] => {
                    Cmd::Create(name, ty, opts.to_vec())
                }
                ["add" | "-A" | "a", name, elem, opts @ ..] => Cmd::Add(name, elem, opts.to_vec()),
                ["del" | "-D" | "d", name, elem] => Cmd::Del(name, elem),
                ["flush" | "-F"] => Cmd::Flush(None),
                ["flush" | "-F", name] => Cmd::Flush(Some(name)),
                ["destroy" | "-X" | "x"] => Cmd::Destroy(None),
                ["destroy" | "-X" | "x", name] => Cmd::Destroy(Some(name)),
                [other, ..] if ["swap", "rename", "-W", "-E"].contains(other) => {
                    return Err(fail(format!("{other:?} is not modelled")))
                }
                _ => {
                    return Err(fail(format!(
                        "expected `create NAME TYPE [OPTIONS]`, `add NAME ELEMENT [OPTIONS]`, \
                         `del NAME ELEMENT`, `flush [NAME]` or `destroy [NAME]`, got {trimmed:?}"
                    )))
                }
            };
            self.apply(cmd, exist, in_use).map_err(fail)?;
        }
        Ok(())
    }

    fn apply(
        &mut self,
        cmd: Cmd<'_>,
        exist: bool,
        in_use: &dyn Fn(&str) -> bool,
    ) -> Result<(), String> {
        match cmd {
            Cmd::Create(name, ty, opts) => {
                let set = create(name, ty, &opts)?;
                if let Some(old) = self.get(name) {
                    // ipset: -exist ignores a create identical to the existing set.
                    if exist && old.kind == set.kind && old.header() == set.header() {
                        return Ok(());
                    }
                    return Err(
                        "Set cannot be created: set with the same name already exists".into(),
                    );
                }
                match self.slots.iter_mut().find(|s| s.is_none()) {
                    Some(slot) => *slot = Some(set),
                    None => self.slots.push(Some(set)),
                }
                Ok(())
            }
            Cmd::Add(name, elem, opts) => {
                let set = self.get_mut(name).ok_or_else(|| {
                    format!("The set with the given name does not exist: {name:?}")
                })?;
                add(set, elem, &opts, exist)
            }
            Cmd::Del(name, elem) => {
                let set = self.get_mut(name).ok_or_else(|| {
                    format!("The set with the given name does not exist: {name:?}")
                })?;
                let removed = match &mut set.body {
                    Body::Bitmap { members, .. } => {
                        let p = bitmap_port(elem)?;
                        members.remove(&p).is_some()
                    }
                    Body::Hash { table, nets, .. } => {
                        let e = parse_elem(set.kind, elem)?;
                        let ok = table.del(&e, same);
                        if ok && set.kind.has_net() {
                            if let Some(n) = nets.get_mut(&e.cidr) {
                                *n -= 1;
                                if *n == 0 {
                                    nets.remove(&e.cidr);
                                }
                            }
                        }
                        ok
                    }
                };
                if !removed && !exist {
                    return Err("Element cannot be deleted from the set: it's not added".into());
                }
                Ok(())
            }
            Cmd::Flush(name) => {
                for s in self.slots.iter_mut().flatten() {
                    if name.is_none_or(|n| n == s.name) {
                        flush(s);
                    }
                }
                if let Some(n) = name {
                    if !self.contains(n) {
                        return Err(format!("The set with the given name does not exist: {n:?}"));
                    }
                }
                Ok(())
            }
            Cmd::Destroy(name) => {
                for s in self.slots.iter().flatten() {
                    if name.is_none_or(|n| n == s.name) && in_use(&s.name) {
                        return Err(format!(
                            "Set cannot be destroyed: it is in use by a kernel component ({:?})",
                            s.name
                        ));
                    }
                }
                match name {
                    None => self.slots.clear(),
                    Some(n) => {
                        let slot = self
                            .slots
                            .iter_mut()
                            .find(|s| s.as_ref().is_some_and(|s| s.name == n))
                            .ok_or_else(|| {
                                format!("The set with the given name does not exist: {n:?}")
                            })?;
                        *slot = None;
                        while self.slots.last().is_some_and(|s| s.is_none()) {
                            self.slots.pop();
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// `ipset save` text.
    pub fn save(&self) -> String {
        let mut out = String::new();
        for s in self.iter() {
            let _ = writeln!(out, "create {} {} {}", s.name, s.kind.name(), s.header());
            for m in s.members() {
                let _ = writeln!(out, "add {} {m}", s.name);
            }
        }
        out
    }

    /// `ipset list` text (`terse`: `ipset list -t`, without members). `references(name)`
    /// is how many iptables rules use the set.
    pub fn list(&self, terse: bool, references: &dyn Fn(&str) -> u32) -> String {
        let mut out = String::new();
        for (i, s) in self.iter().enumerate() {
            if i > 0 {
                out.push('\n');
            }
            let _ = write!(
                out,
                "Name: {}\nType: {}\nRevision: {}\nHeader: {}\nSize in memory: {}\n\
                 References: {}\nNumber of entries: {}\n",
                s.name,
                s.kind.name(),
                s.kind.revision(),
                s.header(),
                s.memsize(),
                references(&s.name),
                s.len()
            );
            if !terse {
                out.push_str("Members:\n");
                for m in s.members() {
                    out.push_str(&m);
                    out.push('\n');
                }
            }
        }
        out
    }
}

fn flush(s: &mut IpSet) {
    match &mut s.body {
        Body::Hash {
            table,
            nets,
            hashsize,
            ..
        } => {
            // mtype_flush keeps the table size.
            let bits = table.bits;
            *table = Table::new(*hashsize, table.bucketsize, table.initval);
            table.bits = bits;
            nets.clear();
        }
        Body::Bitmap { members, .. } => members.clear(),
    }
}

fn num<T: std::str::FromStr>(opts: &[&str], i: usize, what: &str) -> Result<T, String> {
    opts.get(i + 1)
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| format!("expected a number after {what:?}"))
}

fn create(name: &str, ty: &str, opts: &[&str]) -> Result<IpSet, String> {
    if name.is_empty() || name.len() > IPSET_MAX_NAME_LEN {
        return Err(format!(
            "set name {name:?} must be 1-{IPSET_MAX_NAME_LEN} bytes"
        ));
    }
    let kind = SetType::from_name(ty).ok_or_else(|| {
        format!(
            "expected a set type hash:ip, hash:ip,port, hash:ip,port,ip, hash:ip,port,net, \
             hash:net or bitmap:port, got {ty:?}"
        )
    })?;
    let mut comment = false;
    let mut hashsize = IPSET_DEFAULT_HASHSIZE;
    let mut maxelem = IPSET_DEFAULT_MAXELEM;
    let mut bucketsize = AHASH_MAX_SIZE;
    let mut initval = None;
    let mut range = None;
    let hashed = kind != SetType::BitmapPort;
    let mut i = 0;
    while i < opts.len() {
        let o = opts[i];
        match o {
            "comment" => {
                comment = true;
                i += 1;
                continue;
            }
            "family" if hashed => match opts.get(i + 1) {
                Some(&"inet") => {}
                Some(&"inet6") => {
                    return Err("family inet6 is not modelled (IPv4 sets only)".into())
                }
                _ => return Err("expected inet or inet6 after \"family\"".into()),
            },
            "hashsize" if hashed => hashsize = num(opts, i, o)?,
            "maxelem" if hashed => maxelem = num(opts, i, o)?,
            "bucketsize" if hashed => {
                let b: u8 = num(opts, i, o)?;
                // mtype_create: at least AHASH_INIT_SIZE, at most AHASH_MAX_SIZE, even.
                bucketsize = b.clamp(AHASH_INIT_SIZE, AHASH_MAX_SIZE);
                if bucketsize % 2 == 1 {
                    bucketsize += 1;
                }
            }
            "initval" if hashed => {
                let v = opts.get(i + 1).copied().unwrap_or("");
                let parsed = match v.strip_prefix("0x") {
                    Some(h) => u32::from_str_radix(h, 16).ok(),
                    None => v.parse().ok(),
                };
                initval =
                    Some(parsed.ok_or_else(|| {
                        format!("expected a number after \"initval\", got {v:?}")
                    })?);
            }
            "range" if !hashed => {
                let v = opts.get(i + 1).copied().unwrap_or("");
                let (a, b) = v
                    .split_once('-')
                    .and_then(|(a, b)| Some((a.parse::<u16>().ok()?, b.parse::<u16>().ok()?)))
                    .ok_or_else(|| {
                        format!("expected a port range FROM-TO after \"range\", got {v:?}")
                    })?;
                range = Some((a.min(b), a.max(b)));
            }
            "timeout" | "counters" | "skbinfo" | "forceadd" | "netmask" | "markmask" => {
                return Err(format!("the {o:?} option is not modelled"))
            }
            _ => return Err(format!("unknown or misplaced option {o:?} for {ty}")),
        }
        if opts.get(i + 1).is_none() {
            return Err(format!("expected a value after {o:?}"));
        }
        i += 2;
    }
    let body = if hashed {
        Body::Hash {
            table: Table::new(
                hashsize,
                bucketsize,
                initval.unwrap_or_else(|| initval_of(name)),
            ),
            nets: BTreeMap::new(),
            hashsize,
            maxelem,
        }
    } else {
        let (first, last) = range.ok_or("bitmap:port needs \"range FROM-TO\"")?;
        Body::Bitmap {
            first,
            last,
            members: BTreeMap::new(),
        }
    };
    Ok(IpSet {
        name: name.to_string(),
        kind,
        comment,
        body,
    })
}

fn bitmap_port(s: &str) -> Result<u16, String> {
    // bitmap:port takes [proto:]port; the protocol is not stored.
    let p = s.split_once(':').map_or(s, |(_, p)| p);
    p.parse().map_err(|_| {
        format!("expected a port number, got {s:?} (port names and ranges are not modelled)")
    })
}

fn parse_elem(kind: SetType, s: &str) -> Result<Elem, String> {
    let parts: Vec<&str> = s.split(',').collect();
    let want = kind.dimension();
    if parts.len() != want {
        return Err(format!(
            "expected a {} element ({want} part(s) separated by ','), got {s:?}",
            kind.name()
        ));
    }
    let mut e = Elem::zero(kind);
    match kind {
        SetType::HashIp => e.ip = parse_ip(parts[0])?,
        SetType::HashIpPort => {
            e.ip = parse_ip(parts[0])?;
            (e.proto, e.port) = parse_proto_port(parts[1])?;
        }
        SetType::HashIpPortIp => {
            e.ip = parse_ip(parts[0])?;
            (e.proto, e.port) = parse_proto_port(parts[1])?;
            e.ip2 = parse_ip(parts[2])?;
        }
        SetType::HashIpPortNet => {
            e.ip = parse_ip(parts[0])?;
            (e.proto, e.port) = parse_proto_port(parts[1])?;
            (e.ip2, e.cidr) = parse_net(parts[2])?;
        }
        SetType::HashNet => (e.ip, e.cidr) = parse_net(parts[0])?,
        SetType::BitmapPort => e.port = bitmap_port(parts[0])?,
    }
    Ok(e)
}

fn add(set: &mut IpSet, elem: &str, opts: &[&str], exist: bool) -> Result<(), String> {
    let mut comment = None;
    let mut nomatch = false;
    let mut i = 0;
    while i < opts.len() {
        match opts[i] {
            "comment" => {
                if !set.comment {
                    return Err(
                        "Comment extension is not enabled for the set (create it with \"comment\")"
                            .into(),
                    );
                }
                let c = opts
                    .get(i + 1)
                    .ok_or("expected the comment text after \"comment\"")?;
                if c.len() > IPSET_MAX_COMMENT_SIZE {
                    return Err(format!(
                        "comment longer than {IPSET_MAX_COMMENT_SIZE} bytes"
                    ));
                }
                comment = Some(c.to_string());
                i += 2;
            }
            "nomatch" if set.kind.has_net() => {
                nomatch = true;
                i += 1;
            }
            o => {
                return Err(format!(
                    "unknown or misplaced option {o:?} for an element of {}",
                    set.kind.name()
                ))
            }
        }
    }
    let already = "Element cannot be added to the set: it's already added";
    match &mut set.body {
        Body::Bitmap {
            first,
            last,
            members,
        } => {
            let p = bitmap_port(elem)?;
            if p < *first || p > *last {
                return Err("Element is out of the range of the set".into());
            }
            if members.contains_key(&p) && !exist {
                return Err(already.into());
            }
            // -exist overwrites the extensions of an element that is there.
            members.insert(p, comment);
            Ok(())
        }
        Body::Hash {
            table,
            nets,
            maxelem,
            ..
        } => {
            let mut e = parse_elem(set.kind, elem)?;
            e.comment = comment;
            e.nomatch = nomatch;
            if let Some(old) = table.find_mut(&e, same) {
                if !exist {
                    return Err(already.into());
                }
                old.comment = e.comment;
                old.nomatch = e.nomatch;
                return Ok(());
            }
            if table.len() >= *maxelem as usize {
                return Err("Hash is full, cannot add more elements".into());
            }
            let cidr = e.cidr;
            if table.add(e, same) == AddOutcome::Added && set.kind.has_net() {
                *nets.entry(cidr).or_insert(0) += 1;
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sets(text: &str) -> IpSets {
        let mut s = IpSets::new();
        s.restore(text, &|_| false).unwrap();
        s
    }

    #[test]
    fn hash_ip_port_lookup_needs_both_dimensions() {
        let s = sets("create C hash:ip,port\nadd C 10.96.0.10,udp:53\n");
        let pkt = SetPacket {
            src: u32::from(Ipv4Addr::new(10, 244, 1, 2)),
            dst: u32::from(Ipv4Addr::new(10, 96, 0, 10)),
            proto: 17,
            sport: 40000,
            dport: 53,
        };
        assert_eq!(
            s.test("C", &pkt, &[SetDir::Dst, SetDir::Dst]),
            SetTest::Found
        );
        assert_eq!(s.test("C", &pkt, &[SetDir::Dst]), SetTest::NotFound);
        assert_eq!(
            s.test("C", &pkt, &[SetDir::Src, SetDir::Dst]),
            SetTest::NotFound
        );
        let tcp = SetPacket { proto: 6, ..pkt };
        assert_eq!(
            s.test("C", &tcp, &[SetDir::Dst, SetDir::Dst]),
            SetTest::NotFound
        );
    }

    #[test]
    fn hash_net_most_specific_prefix_decides() {
        let s = sets("create N hash:net\nadd N 10.0.0.0/8\nadd N 10.1.0.0/16 nomatch\n");
        let at = |a: [u8; 4]| SetPacket {
            src: 0,
            dst: u32::from(Ipv4Addr::from(a)),
            proto: 6,
            sport: 1,
            dport: 2,
        };
        assert_eq!(
            s.test("N", &at([10, 2, 0, 1]), &[SetDir::Dst]),
            SetTest::Found
        );
        assert_eq!(
            s.test("N", &at([10, 1, 0, 1]), &[SetDir::Dst]),
            SetTest::Nomatch
        );
        assert_eq!(
            s.test("N", &at([11, 1, 0, 1]), &[SetDir::Dst]),
            SetTest::NotFound
        );
    }

    #[test]
    fn bad_lines_name_their_line() {
        let mut s = IpSets::new();
        let e = s
            .restore(
                "create A hash:ip\nadd A 10.0.0.1\nadd A 10.0.0.1\n",
                &|_| false,
            )
            .unwrap_err();
        assert_eq!(e.line, 3);
        assert!(e.message.contains("already added"), "{e}");
        let e = s
            .restore("create B hash:ip family inet6\n", &|_| false)
            .unwrap_err();
        assert!(e.message.contains("inet6"), "{e}");
        let e = s.restore("destroy A\n", &|n| n == "A").unwrap_err();
        assert!(e.message.contains("in use"), "{e}");
    }
}
