//! DNS messages on the wire (RFC 1035 §4.1, EDNS0 OPT of RFC 6891 §6.1.2): the query a stub
//! resolver sends and the answer a server returns, built from interned names so that the
//! per-packet path (a length, a tag) needs no allocation; bytes are made only for captures.

use std::collections::BTreeMap;
use std::net::IpAddr;

/// The classic UDP message limit without EDNS0 (RFC 1035 §2.3.4: 512 octets).
pub const UDP_CLASSIC_LIMIT: usize = 512;
/// The fixed header of every DNS message.
pub const HEADER_LEN: usize = 12;
/// An EDNS0 OPT pseudo-record with no options: root name, type, class (the UDP size), TTL,
/// RDLENGTH.
pub const OPT_LEN: usize = 11;

/// An index into a [`DnsNames`] table: what a query carries instead of its name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct NameId(pub u16);

/// The names of one run, interned: every name a resolver may ask and every name a zone
/// holds. Lower-case, without the trailing dot. Iteration order is insertion order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DnsNames {
    names: Vec<String>,
    index: BTreeMap<String, NameId>,
}

/// A name longer than DNS allows (RFC 1035 §2.3.4: labels of 1–63 octets, 255 in all), or a
/// table holding more names than a [`NameId`] can number.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    /// A label is empty (two dots in a row) or longer than 63 octets.
    #[error("{name:?}: a label must be 1 to 63 characters")]
    Label {
        /// The name.
        name: String,
    },
    /// The name's wire form is longer than 255 octets.
    #[error("{name:?}: longer than the 255 octets a DNS name may take")]
    TooLong {
        /// The name.
        name: String,
    },
    /// More than 65535 distinct names.
    #[error("more than 65535 distinct DNS names in one run")]
    TableFull,
}

/// The wire length of `name` (no trailing dot): one length octet per label, the label, the
/// root's zero octet.
pub fn name_wire_len(name: &str) -> usize {
    if name.is_empty() {
        1
    } else {
        name.len() + 2
    }
}

/// Checks `name` (trailing dot allowed) and returns it lower-case without the trailing dot.
pub fn normalize(name: &str) -> Result<String, NameError> {
    let n = name.strip_suffix('.').unwrap_or(name).to_ascii_lowercase();
    if !n.is_empty() && n.split('.').any(|l| l.is_empty() || l.len() > 63) {
        return Err(NameError::Label { name: name.into() });
    }
    if name_wire_len(&n) > 255 {
        return Err(NameError::TooLong { name: name.into() });
    }
    Ok(n)
}

impl DnsNames {
    /// An empty table.
    pub fn new() -> DnsNames {
        DnsNames::default()
    }
    /// The id of `name` (normalized), adding it if new.
    pub fn intern(&mut self, name: &str) -> Result<NameId, NameError> {
        let n = normalize(name)?;
        if let Some(id) = self.index.get(&n) {
            return Ok(*id);
        }
        let id = NameId(u16::try_from(self.names.len()).map_err(|_| NameError::TableFull)?);
        if id.0 == u16::MAX {
            return Err(NameError::TableFull);
        }
        self.names.push(n.clone());
        self.index.insert(n, id);
        Ok(id)
    }
    /// The id of `name` if it is in the table.
    pub fn find(&self, name: &str) -> Option<NameId> {
        let n = normalize(name).ok()?;
        self.index.get(&n).copied()
    }
    /// The name of `id` (empty for an id not from this table).
    pub fn name(&self, id: NameId) -> &str {
        self.names.get(usize::from(id.0)).map_or("", |s| s.as_str())
    }
    /// How many names.
    pub fn len(&self) -> usize {
        self.names.len()
    }
    /// Whether the table is empty.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }
}

/// The record type asked (QTYPE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum QType {
    /// An IPv4 address (1).
    A,
    /// An IPv6 address (28).
    Aaaa,
}

impl QType {
    /// The QTYPE number.
    pub fn code(self) -> u16 {
        match self {
            QType::A => 1,
            QType::Aaaa => 28,
        }
    }
    /// The RDATA length of one record.
    pub fn rdata_len(self) -> usize {
        match self {
            QType::A => 4,
            QType::Aaaa => 16,
        }
    }
    /// The wire length of one answer record whose owner is a pointer to the question's name
    /// (RFC 1035 §4.1.4): pointer 2, type 2, class 2, TTL 4, RDLENGTH 2, RDATA.
    pub fn record_len(self) -> usize {
        12 + self.rdata_len()
    }
}

impl std::fmt::Display for QType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            QType::A => "A",
            QType::Aaaa => "AAAA",
        })
    }
}

/// The response code (RCODE).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Rcode {
    /// NOERROR (0): the name exists (with or without records of the type asked).
    NoError,
    /// NXDOMAIN (3): the name does not exist.
    NxDomain,
}

impl Rcode {
    /// The RCODE number.
    pub fn code(self) -> u8 {
        match self {
            Rcode::NoError => 0,
            Rcode::NxDomain => 3,
        }
    }
}

/// A query as it travels: the question, and the EDNS0 UDP size when the resolver sends an
/// OPT record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Query {
    /// The name asked.
    pub name: NameId,
    /// The type asked.
    pub qtype: QType,
    /// The requestor's UDP payload size of its OPT record, or `None` without EDNS0.
    pub edns_udp_size: Option<u16>,
}

/// An answer as it travels: which query it answers and what it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Answer {
    /// The query answered (its question is repeated in the answer).
    pub query: Query,
    /// NOERROR or NXDOMAIN.
    pub rcode: Rcode,
    /// How many records of the question's type it holds (after truncation).
    pub records: u16,
    /// TC: the full answer did not fit; the records that did are here.
    pub truncated: bool,
}

impl Query {
    /// The message length in octets: header, question, the OPT record if any.
    pub fn wire_len(&self, names: &DnsNames) -> usize {
        HEADER_LEN
            + name_wire_len(names.name(self.name))
            + 4
            + self.edns_udp_size.map_or(0, |_| OPT_LEN)
    }

    /// The message bytes with ID `id`: RD set, one question (RFC 1035 §4.1.1–2), the OPT
    /// record in the additional section when EDNS0 is on (RFC 6891 §6.1.2).
    pub fn encode(&self, names: &DnsNames, id: u16) -> Vec<u8> {
        let mut m = Vec::with_capacity(self.wire_len(names));
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&0x0100u16.to_be_bytes()); // RD
        let ar = u16::from(self.edns_udp_size.is_some());
        for c in [1u16, 0, 0, ar] {
            m.extend_from_slice(&c.to_be_bytes());
        }
        question(&mut m, names.name(self.name), self.qtype);
        if let Some(size) = self.edns_udp_size {
            opt(&mut m, size);
        }
        m
    }
}

fn question(m: &mut Vec<u8>, name: &str, qtype: QType) {
    for label in name.split('.').filter(|l| !l.is_empty()) {
        m.push(label.len() as u8);
        m.extend_from_slice(label.as_bytes());
    }
    m.push(0);
    m.extend_from_slice(&qtype.code().to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes()); // IN
}

fn opt(m: &mut Vec<u8>, udp_size: u16) {
    m.push(0); // root
    m.extend_from_slice(&41u16.to_be_bytes());
    m.extend_from_slice(&udp_size.to_be_bytes());
    m.extend_from_slice(&0u32.to_be_bytes()); // extended RCODE, version 0, no DO
    m.extend_from_slice(&0u16.to_be_bytes());
}

/// The EDNS0 UDP size a server advertises in its answers' OPT record: CoreDNS's default
/// (`plugin/bufsize`: 1232, the DNS flag day 2020 value).
pub const SERVER_EDNS_UDP_SIZE: u16 = 1232;

impl Answer {
    /// The message length in octets.
    pub fn wire_len(&self, names: &DnsNames) -> usize {
        HEADER_LEN
            + name_wire_len(names.name(self.query.name))
            + 4
            + usize::from(self.records) * self.query.qtype.record_len()
            + self.query.edns_udp_size.map_or(0, |_| OPT_LEN)
    }

    /// The message bytes with ID `id`, answering with the first [`Answer::records`] of
    /// `addrs` (the records of the question's family): QR, AA, the query's RD, RA, TC when
    /// truncated, the RCODE; TTL 5 s (CoreDNS's `kubernetes` plugin default); an OPT record
    /// when the query had one.
    pub fn encode(&self, names: &DnsNames, id: u16, addrs: &[IpAddr]) -> Vec<u8> {
        let mut m = Vec::with_capacity(self.wire_len(names));
        m.extend_from_slice(&id.to_be_bytes());
        m.push(0x80 | 0x04 | if self.truncated { 0x02 } else { 0 } | 0x01);
        m.push(0x80 | self.rcode.code());
        let ar = u16::from(self.query.edns_udp_size.is_some());
        for c in [1u16, self.records, 0, ar] {
            m.extend_from_slice(&c.to_be_bytes());
        }
        question(&mut m, names.name(self.query.name), self.query.qtype);
        for addr in addrs.iter().take(usize::from(self.records)) {
            address_record(&mut m, self.query.qtype.code(), *addr);
        }
        if self.query.edns_udp_size.is_some() {
            opt(&mut m, SERVER_EDNS_UDP_SIZE);
        }
        m
    }
}

/// Appends one answer record for the question's name (a pointer to offset 12, RFC 1035
/// §4.1.4): type `qtype`, class IN, TTL 5 s (CoreDNS's `kubernetes` plugin default), the
/// address as its RDATA (4 octets for `A`, 16 for `AAAA`).
pub fn address_record(m: &mut Vec<u8>, qtype: u16, addr: IpAddr) {
    m.extend_from_slice(&[0xc0, 0x0c]);
    m.extend_from_slice(&qtype.to_be_bytes());
    m.extend_from_slice(&1u16.to_be_bytes());
    m.extend_from_slice(&5u32.to_be_bytes());
    match addr {
        IpAddr::V4(a) => {
            m.extend_from_slice(&4u16.to_be_bytes());
            m.extend_from_slice(&a.octets());
        }
        IpAddr::V6(a) => {
            m.extend_from_slice(&16u16.to_be_bytes());
            m.extend_from_slice(&a.octets());
        }
    }
}

/// A DNS message read back from bytes (a capture): enough to check what nfsim wrote.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Parsed {
    /// The message ID.
    pub id: u16,
    /// QR: a response.
    pub response: bool,
    /// TC.
    pub truncated: bool,
    /// RCODE.
    pub rcode: u8,
    /// The question's name (no trailing dot) and QTYPE.
    pub question: (String, u16),
    /// ANCOUNT.
    pub answers: u16,
    /// The UDP size of an OPT record in the additional section, if any.
    pub edns_udp_size: Option<u16>,
}

/// Reads a DNS message with one question; `None` when `b` is not one.
pub fn parse(b: &[u8]) -> Option<Parsed> {
    if b.len() < HEADER_LEN || b[4..6] != [0, 1] {
        return None;
    }
    let mut at = HEADER_LEN;
    let mut labels = Vec::new();
    loop {
        let n = usize::from(*b.get(at)?);
        at += 1;
        if n == 0 {
            break;
        }
        if n > 63 {
            return None;
        }
        labels.push(String::from_utf8_lossy(b.get(at..at + n)?).into_owned());
        at += n;
    }
    let qtype = u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]);
    at += 4;
    let answers = u16::from_be_bytes([b[6], b[7]]);
    // Skip the answer records (owner as a pointer or a name).
    for _ in 0..answers {
        at = skip_name(b, at)?;
        let rdlen = usize::from(u16::from_be_bytes([*b.get(at + 8)?, *b.get(at + 9)?]));
        at += 10 + rdlen;
    }
    let ns = u16::from_be_bytes([b[8], b[9]]);
    for _ in 0..ns {
        at = skip_name(b, at)?;
        let rdlen = usize::from(u16::from_be_bytes([*b.get(at + 8)?, *b.get(at + 9)?]));
        at += 10 + rdlen;
    }
    let mut edns_udp_size = None;
    for _ in 0..u16::from_be_bytes([b[10], b[11]]) {
        let start = skip_name(b, at)?;
        let rtype = u16::from_be_bytes([*b.get(start)?, *b.get(start + 1)?]);
        if rtype == 41 {
            edns_udp_size = Some(u16::from_be_bytes([*b.get(start + 2)?, *b.get(start + 3)?]));
        }
        let rdlen = usize::from(u16::from_be_bytes([*b.get(start + 8)?, *b.get(start + 9)?]));
        at = start + 10 + rdlen;
    }
    Some(Parsed {
        id: u16::from_be_bytes([b[0], b[1]]),
        response: b[2] & 0x80 != 0,
        truncated: b[2] & 0x02 != 0,
        rcode: b[3] & 0x0f,
        question: (labels.join("."), qtype),
        answers,
        edns_udp_size,
    })
}

fn skip_name(b: &[u8], mut at: usize) -> Option<usize> {
    loop {
        let n = *b.get(at)?;
        if n & 0xc0 == 0xc0 {
            return Some(at + 2);
        }
        at += 1 + usize::from(n);
        if n == 0 {
            return Some(at);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_interned_once_lower_case_without_the_root_dot() {
        let mut t = DnsNames::new();
        let a = t.intern("Payment.Shop.").unwrap();
        assert_eq!(t.intern("payment.shop").unwrap(), a);
        assert_eq!(t.name(a), "payment.shop");
        assert_eq!(t.len(), 1);
        assert!(matches!(t.intern("a..b"), Err(NameError::Label { .. })));
        let long = ["x"; 130].join(".");
        assert!(matches!(t.intern(&long), Err(NameError::TooLong { .. })));
    }

    #[test]
    fn a_query_with_edns0_reads_back_and_its_length_is_the_bytes_length() {
        let mut t = DnsNames::new();
        let name = t.intern("payment.shop.default.svc.cluster.local").unwrap();
        for edns in [None, Some(1200)] {
            let q = Query {
                name,
                qtype: QType::Aaaa,
                edns_udp_size: edns,
            };
            let b = q.encode(&t, 0xbeef);
            assert_eq!(b.len(), q.wire_len(&t));
            let p = parse(&b).unwrap();
            assert_eq!(p.id, 0xbeef);
            assert!(!p.response);
            assert_eq!(
                p.question,
                ("payment.shop.default.svc.cluster.local".into(), 28)
            );
            assert_eq!(p.edns_udp_size, edns);
        }
    }

    #[test]
    fn an_answer_holds_its_records_and_flags() {
        let mut t = DnsNames::new();
        let name = t.intern("big.example").unwrap();
        let q = Query {
            name,
            qtype: QType::A,
            edns_udp_size: None,
        };
        let addrs: Vec<IpAddr> = (1..=3)
            .map(|k| format!("10.0.0.{k}").parse().unwrap())
            .collect();
        let a = Answer {
            query: q,
            rcode: Rcode::NoError,
            records: 2,
            truncated: true,
        };
        let b = a.encode(&t, 7, &addrs);
        assert_eq!(b.len(), a.wire_len(&t));
        let p = parse(&b).unwrap();
        assert!(p.response && p.truncated);
        assert_eq!((p.rcode, p.answers), (0, 2));
        assert_eq!(&b[b.len() - 4..], &[10, 0, 0, 2]);
        let nx = Answer {
            rcode: Rcode::NxDomain,
            records: 0,
            truncated: false,
            ..a
        };
        assert_eq!(parse(&nx.encode(&t, 7, &[])).unwrap().rcode, 3);
    }
}
