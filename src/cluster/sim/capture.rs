//! Capture points: what `tcpdump -i IF` would record on each node's interfaces, written while
//! the run goes (`nfsim run FILE --pcap DIR`).
//!
//! # Where packets are seen
//!
//! A packet tap sees a received frame before the IP stack does (`__netif_receive_skb_core`
//! hands it to every `ETH_P_ALL` socket before `ip_rcv` runs PREROUTING) and a transmitted
//! frame after POSTROUTING (`dev_hard_start_xmit` → `dev_queue_xmit_nit`, after
//! `ip_finish_output2` resolved the neighbour); see `docs/kernel-model.md §12`. So:
//!
//! - **a pod's veth** (the host side, on its node) shows the pod's packets as the pod sent
//!   them (a Service's ClusterIP as the destination) and what the node sends the pod after
//!   its NAT is undone (an answer from the ClusterIP);
//! - **a node's `eth0`** shows what left the node after POSTROUTING (the DNAT'd endpoint, a
//!   masqueraded source) and what arrives before PREROUTING.
//!
//! - **a bridge** (`network.cni: bridge`, `cni0`) shows what it passes up to the node (after
//!   `br_netfilter`'s PREROUTING when that ran) and what the node routes out of it, never
//!   what it forwards port to port; its ports (the pods' veths) show each frame as it
//!   enters and leaves the bridge, with the MACs of its Ethernet header (the bridge's own as
//!   the source of what the node routed).
//!
//! On kindnet's `ptp` layout (a /32 veth per pod) there is no bridge to capture on. Hosts
//! outside the cluster are not captured.
//!
//! # What is written
//!
//! The simulation's packets carry no payload; the frames here are built from them
//! deterministically ([`FrameBuilder`]): Ethernet II headers with the MAC addresses of
//! [`mac_for_address`], [`pod_mac`] and [`veth_mac`]; IP and layer-4 headers from the packet
//! (TTL as forwarding left it, IPv4 identification 0 with don't-fragment — an ICMP error
//! without it, as `__icmp_send()` sends it —, TCP without options, window 65535) with every
//! checksum computed; and payloads:
//!
//! - a UDP client whose target port is 53 sends DNS queries and its server answers them
//!   ([`DnsQuestion`]): one question, the answer an `A` (or `AAAA`) record with TTL 5 s
//!   (CoreDNS's `kubernetes` plugin default), authoritative, recursion desired and available;
//!   the message ID is drawn from the seed per query (retries reuse it, as resolvers do);
//! - a resolver client's queries and its DNS server's answers are the real messages
//!   ([`crate::dns::tag`] carries them): the names asked, QTYPE, the OPT record
//!   glibc's `edns0` sends, NXDOMAIN, the zone's records, TC; over TCP each message after its
//!   two-octet length;
//! - TCP segments carry as many bytes as the model says (the client's request, the server's
//!   response), so sequence and acknowledgement numbers add up; their bytes are filler;
//! - other UDP datagrams and ICMP echo carry filler of the model's length;
//! - an ICMP error quotes the packet it is about as `__icmp_send()` does: its IP header and as
//!   much of the rest as fits in a 576-byte error, the quoted header as the error's NAT
//!   reverse translation left it (`nf_nat_icmp_reply_translation()`).
//!
//! Timestamps are the sink's epoch plus simulated time, in nanoseconds.

use super::*;
use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

/// One capture point: an interface on a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CapturePoint {
    /// The node.
    pub node: String,
    /// The interface name on the node (`eth0`, `veth0000000a`).
    pub interface: String,
    /// The pod behind a veth (`namespace/name`), `None` for `eth0`.
    pub pod: Option<String>,
    /// The file name (`node-2-eth0.pcap`, `node-2-veth-app.pcap`).
    pub file: String,
}

/// Receives captured frames as they happen.
pub trait CaptureSink {
    /// A new capture point, numbered `id` (0, 1, … in the order they appear).
    fn open(&mut self, id: usize, point: &CapturePoint) -> io::Result<()>;
    /// An Ethernet frame seen at capture point `id` at simulated time `at`.
    fn frame(&mut self, id: usize, at: SimTime, frame: &[u8]) -> io::Result<()>;
    /// The run is over: write out whatever is buffered.
    fn finish(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// At most this many capture files are open at once; the least recently written is closed
/// (and reopened for appending when it gets a frame again), so a large cluster does not run
/// out of file descriptors.
pub const MAX_OPEN_CAPTURE_FILES: usize = 64;

/// The pcap link type of the files: Ethernet.
const LINKTYPE_ETHERNET: u32 = 1;
/// Raw IP (pcap's `LINKTYPE_RAW`): what `tcpdump -i tunl0` writes, an IPIP device having
/// no link-layer header (`ARPHRD_TUNNEL`).
const LINKTYPE_RAW: u32 = 101;

impl CapturePoint {
    /// The pcap link type of its file: raw IP for an IPIP device (`tunl0`), else Ethernet.
    pub fn link_type(&self) -> u32 {
        if self.interface == "tunl0" {
            LINKTYPE_RAW
        } else {
            LINKTYPE_ETHERNET
        }
    }
}

/// Writes one classic pcap file per capture point in a directory: nanosecond timestamps
/// (magic `0xa1b23c4d`), little-endian, snap length 262144, link type Ethernet. A file is
/// created (emptied) when its point appears, so a point that saw nothing is a file with a
/// header and no record.
#[derive(Debug)]
pub struct PcapDir {
    dir: PathBuf,
    epoch_ns: u64,
    files: Vec<PcapFile>,
    open: usize,
    clock: u64,
}

#[derive(Debug)]
struct PcapFile {
    path: PathBuf,
    writer: Option<BufWriter<File>>,
    last_use: u64,
}

impl PcapDir {
    /// Files go to `dir` (which must exist); simulated time 0 is written as `epoch_ns`
    /// nanoseconds after the Unix epoch.
    pub fn new(dir: impl AsRef<Path>, epoch_ns: u64) -> PcapDir {
        PcapDir {
            dir: dir.as_ref().to_path_buf(),
            epoch_ns,
            files: Vec::new(),
            open: 0,
            clock: 0,
        }
    }

    fn writer(&mut self, id: usize) -> io::Result<&mut BufWriter<File>> {
        self.clock += 1;
        if self.files[id].writer.is_none() {
            if self.open >= MAX_OPEN_CAPTURE_FILES {
                let lru = self
                    .files
                    .iter()
                    .enumerate()
                    .filter(|(_, f)| f.writer.is_some())
                    .min_by_key(|(_, f)| f.last_use)
                    .map(|(i, _)| i);
                if let Some(i) = lru {
                    if let Some(mut w) = self.files[i].writer.take() {
                        w.flush()?;
                    }
                    self.open -= 1;
                }
            }
            let f = OpenOptions::new()
                .append(true)
                .open(&self.files[id].path)
                .map_err(|e| with_path(e, &self.files[id].path))?;
            self.files[id].writer = Some(BufWriter::new(f));
            self.open += 1;
        }
        let file = &mut self.files[id];
        file.last_use = self.clock;
        Ok(file
            .writer
            .as_mut()
            .unwrap_or_else(|| unreachable!("opened above")))
    }
}

fn with_path(e: io::Error, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// The 24-byte header of a nanosecond pcap file of Ethernet frames.
pub fn pcap_header() -> [u8; 24] {
    pcap_header_of(LINKTYPE_ETHERNET)
}

/// The 24-byte header of a nanosecond pcap file of link type `link_type`.
pub fn pcap_header_of(link_type: u32) -> [u8; 24] {
    let mut h = [0u8; 24];
    h[0..4].copy_from_slice(&0xa1b2_3c4du32.to_le_bytes());
    h[4..6].copy_from_slice(&2u16.to_le_bytes());
    h[6..8].copy_from_slice(&4u16.to_le_bytes());
    // thiszone 0, sigfigs 0.
    h[16..20].copy_from_slice(&sim_core::pcap::WRITE_SNAPLEN.to_le_bytes());
    h[20..24].copy_from_slice(&link_type.to_le_bytes());
    h
}

impl CaptureSink for PcapDir {
    fn open(&mut self, id: usize, point: &CapturePoint) -> io::Result<()> {
        let path = self.dir.join(&point.file);
        std::fs::write(&path, pcap_header_of(point.link_type()))
            .map_err(|e| with_path(e, &path))?;
        while self.files.len() <= id {
            self.files.push(PcapFile {
                path: PathBuf::new(),
                writer: None,
                last_use: 0,
            });
        }
        self.files[id].path = path;
        Ok(())
    }

    fn frame(&mut self, id: usize, at: SimTime, frame: &[u8]) -> io::Result<()> {
        let ns = u128::from(self.epoch_ns) + u128::from(at.as_nanos());
        let secs = ns / 1_000_000_000;
        let secs = u32::try_from(secs).map_err(|_| {
            io::Error::other(format!(
                "capture time {ns} ns after the Unix epoch does not fit a pcap timestamp (32-bit seconds)"
            ))
        })?;
        let mut rec = [0u8; 16];
        rec[0..4].copy_from_slice(&secs.to_le_bytes());
        rec[4..8].copy_from_slice(&((ns % 1_000_000_000) as u32).to_le_bytes());
        let len = frame.len() as u32;
        rec[8..12].copy_from_slice(&len.to_le_bytes());
        rec[12..16].copy_from_slice(&len.to_le_bytes());
        let path = self.files[id].path.clone();
        let w = self.writer(id)?;
        w.write_all(&rec)
            .and_then(|_| w.write_all(frame))
            .map_err(|e| with_path(e, &path))
    }

    fn finish(&mut self) -> io::Result<()> {
        for f in &mut self.files {
            if let Some(mut w) = f.writer.take() {
                w.flush().map_err(|e| with_path(e, &f.path))?;
            }
        }
        self.open = 0;
        Ok(())
    }
}

/// Who put a frame on a link, for its source MAC address.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Hop {
    /// A node (by index) on the node network.
    Node(usize),
    /// The network's router, seen on this node's network.
    Router,
    /// The pod at the other end of a veth.
    Pod,
}

/// The MAC address nfsim gives the interface holding `addr` on the node network (a node's
/// `eth0`, a host, the router): `02:42` and the IPv4 address's four bytes (the last four of
/// an IPv6 address), as Docker numbers a container on a bridge network (a kind node).
pub fn mac_for_address(addr: IpAddr) -> [u8; 6] {
    with_prefix([0x02, 0x42], addr)
}

/// The MAC address of a pod's `eth0`: `0a:58` and its IP's four bytes, as the CNI plugins'
/// `ip.SetHWAddrByIP` made them.
pub fn pod_mac(ip: IpAddr) -> [u8; 6] {
    with_prefix([0x0a, 0x58], ip)
}

/// The MAC address of the host side of a pod's veth: `0e:00` and the 32-bit number in its
/// name (`veth0000000a` → `0e:00:00:00:00:0a`); locally administered, unique on the node.
pub fn veth_mac(number: u32) -> [u8; 6] {
    let n = number.to_be_bytes();
    [0x0e, 0x00, n[0], n[1], n[2], n[3]]
}

fn with_prefix(prefix: [u8; 2], addr: IpAddr) -> [u8; 6] {
    let b: [u8; 4] = match addr {
        IpAddr::V4(a) => a.octets(),
        IpAddr::V6(a) => {
            let o = a.octets();
            [o[12], o[13], o[14], o[15]]
        }
    };
    [prefix[0], prefix[1], b[0], b[1], b[2], b[3]]
}

/// The question a DNS client asks, and the record its server answers with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DnsQuestion {
    /// The name asked, fully qualified (`kube-dns.kube-system.svc.cluster.local.`).
    pub name: String,
    /// The address answered (an `A` record for IPv4, `AAAA` for IPv6).
    pub answer: IpAddr,
}

impl DnsQuestion {
    /// What a client of scenario `sc` with target `target` asks: the first Service of the
    /// scenario with a cluster IP other than the target's (`NAME.NAMESPACE.svc.cluster.local.`,
    /// answered with that cluster IP), else the target's own Service, else `example.com.`
    /// answered with 192.0.2.1 (a documentation address).
    pub fn for_target(sc: &Scenario, target: SocketAddr) -> DnsQuestion {
        let named: Vec<(String, IpAddr)> = sc
            .services
            .iter()
            .filter_map(|s| {
                let ip = s.spec.cluster_ip.and_then(|c| c.ip())?;
                Some((
                    format!(
                        "{}.{}.svc.cluster.local.",
                        s.metadata.name, s.metadata.namespace
                    ),
                    ip,
                ))
            })
            .collect();
        let pick = named
            .iter()
            .find(|(_, ip)| *ip != target.ip())
            .or_else(|| named.first());
        match pick {
            Some((name, ip)) => DnsQuestion {
                name: name.clone(),
                answer: *ip,
            },
            None => DnsQuestion {
                name: "example.com.".into(),
                answer: IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)),
            },
        }
    }

    fn qtype(&self) -> u16 {
        if self.answer.is_ipv4() {
            1 // A
        } else {
            28 // AAAA
        }
    }

    fn question(&self, out: &mut Vec<u8>) {
        for label in self.name.split('.').filter(|l| !l.is_empty()) {
            let l = &label.as_bytes()[..label.len().min(63)];
            out.push(l.len() as u8);
            out.extend_from_slice(l);
        }
        out.push(0);
        out.extend_from_slice(&self.qtype().to_be_bytes());
        out.extend_from_slice(&1u16.to_be_bytes()); // IN
    }

    /// The query message with ID `id`: recursion desired, one question (RFC 1035 §4.1).
    pub fn query(&self, id: u16) -> Vec<u8> {
        let mut m = Vec::with_capacity(64);
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&0x0100u16.to_be_bytes()); // RD
        m.extend_from_slice(&[0, 1, 0, 0, 0, 0, 0, 0]); // QD 1, AN 0, NS 0, AR 0
        self.question(&mut m);
        m
    }

    /// The answer to [`DnsQuestion::query`] `id`: response, authoritative, recursion desired
    /// and available, no error; the question, then one record for it (the name as a pointer
    /// to the question's, RFC 1035 §4.1.4) with TTL 5 s.
    pub fn answer(&self, id: u16) -> Vec<u8> {
        let mut m = Vec::with_capacity(80);
        m.extend_from_slice(&id.to_be_bytes());
        m.extend_from_slice(&0x8580u16.to_be_bytes()); // QR AA RD RA, NOERROR
        m.extend_from_slice(&[0, 1, 0, 1, 0, 0, 0, 0]); // QD 1, AN 1
        self.question(&mut m);
        m.extend_from_slice(&[0xc0, 0x0c]);
        m.extend_from_slice(&self.qtype().to_be_bytes());
        m.extend_from_slice(&1u16.to_be_bytes());
        m.extend_from_slice(&5u32.to_be_bytes());
        match self.answer {
            IpAddr::V4(a) => {
                m.extend_from_slice(&4u16.to_be_bytes());
                m.extend_from_slice(&a.octets());
            }
            IpAddr::V6(a) => {
                m.extend_from_slice(&16u16.to_be_bytes());
                m.extend_from_slice(&a.octets());
            }
        }
        m
    }
}

/// A DNS client's question and the ports its server answers from.
#[derive(Clone, Debug)]
struct DnsClient {
    question: DnsQuestion,
    /// The target's port and the target Service's numeric target ports: a datagram from
    /// one of them (to another port) is an answer.
    server_ports: BTreeSet<u16>,
    ip: IpAddr,
}

/// How many TCP segments [`FrameBuilder`] remembers (by tag) to quote them in ICMP errors.
const TCP_MEMORY: usize = 4096;

/// Builds frames from the simulation's packets (see the module documentation).
#[derive(Debug)]
pub struct FrameBuilder {
    seed: u64,
    /// Per scenario client: its DNS question when it is a DNS client.
    dns: Vec<Option<DnsClient>>,
    /// The last TCP segment seen per tag (flags, sequence and acknowledgement numbers,
    /// payload length): an ICMP error about a segment quotes its header, which the model's
    /// quoted header does not carry.
    tcp_seen: BTreeMap<u64, (L4, u16)>,
    tcp_order: VecDeque<u64>,
    /// The pcap clients' packets, for their captured payloads.
    pcap: Vec<std::sync::Arc<Vec<PcapPacket>>>,
    /// The scenario's Services by DNS name (`name.namespace.svc.cluster.local`).
    service_ips: BTreeMap<String, IpAddr>,
    /// The run's DNS names and zones, for resolvers' messages.
    dns_data: std::sync::Arc<crate::dns::DnsData>,
}

/// The RFC 1071 checksum of an IPv4 header whose checksum field is zero.
fn ipv4_header_checksum(h: &[u8]) -> u16 {
    let mut acc: u32 = h
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w.get(1).copied().unwrap_or(0)])))
        .sum();
    while acc >> 16 != 0 {
        acc = (acc & 0xffff) + (acc >> 16);
    }
    !(acc as u16)
}

/// The IPv4 ICMP error's size limit (`__icmp_send`: 576 bytes); IPv6's is 1280.
fn icmp_error_limit(v4: bool) -> usize {
    if v4 {
        576
    } else {
        1280
    }
}

impl FrameBuilder {
    /// The builder for a run of `sc`.
    pub fn new(sc: &Scenario) -> FrameBuilder {
        let dns = sc
            .clients
            .iter()
            .map(|c| {
                let udp = matches!(c.kind, ClientKind::Udp { .. });
                if !udp || c.target.port() != 53 {
                    return None;
                }
                let mut server_ports: BTreeSet<u16> = [c.target.port()].into();
                for s in &sc.services {
                    if s.spec.cluster_ip.and_then(|x| x.ip()) != Some(c.target.ip()) {
                        continue;
                    }
                    for p in &s.spec.ports {
                        if p.port == c.target.port() {
                            if let Some(crate::k8s::IntOrString::Int(t)) = p.target_port {
                                server_ports.insert(t);
                            }
                        }
                    }
                }
                Some(DnsClient {
                    question: DnsQuestion::for_target(sc, c.target),
                    server_ports,
                    ip: IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
                })
            })
            .collect();
        FrameBuilder {
            dns_data: sc.dns.clone(),
            seed: sc.seed,
            dns,
            tcp_seen: BTreeMap::new(),
            tcp_order: VecDeque::new(),
            pcap: sc.pcap_clients.iter().map(|c| c.packets.clone()).collect(),
            service_ips: sc
                .services
                .iter()
                .filter_map(|s| {
                    let ip = s.spec.cluster_ip.and_then(|c| c.ip())?;
                    let name = format!(
                        "{}.{}.svc.cluster.local",
                        s.metadata.name, s.metadata.namespace
                    );
                    Some((name, ip))
                })
                .collect(),
        }
    }

    /// Tells the builder client `i`'s address (for telling queries from answers when both
    /// ports are DNS ports).
    pub(super) fn client_ip(&mut self, i: usize, ip: IpAddr) {
        if let Some(Some(d)) = self.dns.get_mut(i) {
            d.ip = ip;
        }
    }

    /// The DNS message ID of a client's query: drawn from the seed, the client and the query
    /// number (SplitMix64), the same for every try.
    pub fn dns_id(&self, tag: Tag) -> u16 {
        let mut z = self
            .seed
            .wrapping_add(u64::from(tag.client) << 32 | u64::from(tag.seq))
            .wrapping_add(0x9e37_79b9_7f4a_7c15);
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) as u16
    }

    fn remember_tcp(&mut self, p: &Packet) {
        if p.tag == 0 || !matches!(p.l4, L4::Tcp { .. }) {
            return;
        }
        let hdr = if p.is_ipv4() { 40 } else { 60 };
        let payload = p.len.saturating_sub(hdr);
        if self.tcp_seen.insert(p.tag, (p.l4, payload)).is_none() {
            self.tcp_order.push_back(p.tag);
            if self.tcp_order.len() > TCP_MEMORY {
                if let Some(old) = self.tcp_order.pop_front() {
                    self.tcp_seen.remove(&old);
                }
            }
        }
    }

    /// Filler bytes: `nfsim ` repeated, so a reader sees at once the bytes are made up.
    fn filler(len: usize) -> Vec<u8> {
        b"nfsim ".iter().copied().cycle().take(len).collect()
    }

    /// The DNS message a UDP packet of a DNS client carries, if it is one.
    fn dns_payload(&self, p: &Packet) -> Option<Vec<u8>> {
        let t = Tag::unpack(p.tag).filter(|_| p.tag & INJECTED_TAG == 0)?;
        let d = self.dns.get(t.client as usize)?.as_ref()?;
        let (sport, dport) = (p.sport()?, p.dport()?);
        let from_server = d.server_ports.contains(&sport);
        let to_server = d.server_ports.contains(&dport);
        let answer = match (from_server, to_server) {
            (true, false) => true,
            (false, _) => false,
            (true, true) => p.src != d.ip,
        };
        let id = self.dns_id(t);
        Some(if answer {
            d.question.answer(id)
        } else {
            d.question.query(id)
        })
    }

    /// The DNS message a resolver client's packet carries in its tag
    /// ([`crate::dns::tag`]): its query (with the OPT record when it sent one), or
    /// the answer with the zone's records, RCODE and TC; over TCP after its two-octet length
    /// (RFC 1035 §4.2.2). The message ID is drawn from the seed, the client, the question and
    /// the client's port, so a query and its answer share it. `None` for any other packet
    /// and for a TCP segment without data.
    fn resolver_payload(&self, p: &Packet) -> Option<Vec<u8>> {
        use crate::dns::tag::{self as dtag, DnsMessage};
        let m = dtag::decode(p.tag)?;
        let client = dtag::client(p.tag)?;
        let (sport, dport) = (p.sport()?, p.dport()?);
        let (tcp, l4) = match p.l4 {
            L4::Udp { .. } => (false, 8),
            L4::Tcp { .. } => (true, 20),
            _ => return None,
        };
        let ip_hdr: usize = if p.is_ipv4() { 20 } else { 40 };
        if tcp && usize::from(p.len) <= ip_hdr + l4 {
            return None;
        }
        let q = m.query();
        let port = match m {
            DnsMessage::Query { .. } => sport,
            DnsMessage::Answer(_) => dport,
        };
        let id = self.dns_id(Tag {
            client,
            seq: u32::from(q.name.0) << 16 | u32::from(port),
            attempt: 0,
        }) ^ u16::from(q.qtype == crate::dns::QType::Aaaa);
        let names = &self.dns_data.names;
        let msg = match m {
            DnsMessage::Query { query, .. } => query.encode(names, id),
            DnsMessage::Answer(a) => a.encode(names, id, self.dns_data.records(q.name, q.qtype)),
        };
        Some(if tcp {
            let mut b = (msg.len() as u16).to_be_bytes().to_vec();
            b.extend_from_slice(&msg);
            b
        } else {
            msg
        })
    }

    /// The captured payload of a pcap client's packet, when `p` is that packet (on its way,
    /// not an answer to it that copied its tag), as long as the model's length says.
    fn captured_payload(&self, p: &Packet, l4_len: usize) -> Option<Vec<u8>> {
        let (i, k) = pcap_tag(p.tag)?;
        let orig = self.pcap.get(i)?.get(k)?;
        let same_way = p.protocol() == orig.packet.protocol()
            && match (p.l4, orig.packet.l4) {
                (L4::Icmp { icmp_type: a, .. }, L4::Icmp { icmp_type: b, .. }) => a == b,
                _ => p.sport() == orig.packet.sport(),
            };
        if matches!(
            p.l4,
            L4::Icmp {
                body: IcmpBody::Error(_),
                ..
            }
        ) {
            return None;
        }
        if !same_way {
            // A server's answer to a captured DNS query: the answer to that question.
            let to_dns =
                matches!(orig.packet.l4, L4::Udp { .. }) && orig.packet.dport() == Some(53);
            return to_dns.then(|| self.answer_to(&orig.payload)).flatten();
        }
        let ip_hdr: usize = if p.is_ipv4() { 20 } else { 40 };
        let want = usize::from(p.len).saturating_sub(ip_hdr + l4_len);
        let mut b = orig.payload.clone();
        // A record cut by the snap length: the rest is zeros.
        b.resize(want, 0);
        Some(b)
    }

    /// CoreDNS's answer to the DNS query `q` (one question): an `A` (`AAAA`) record with the
    /// ClusterIP of the scenario's Service of that name (`NAME.NAMESPACE.svc.cluster.local`),
    /// TTL 5 s; NXDOMAIN for a name the scenario does not have; no record for another type.
    /// `None` when `q` is not a DNS query.
    fn answer_to(&self, q: &[u8]) -> Option<Vec<u8>> {
        if q.len() < 12 || q[2] & 0x80 != 0 || q[4..6] != [0, 1] {
            return None;
        }
        let mut at = 12;
        let mut labels = Vec::new();
        loop {
            let n = usize::from(*q.get(at)?);
            if n == 0 {
                at += 1;
                break;
            }
            if n > 63 {
                return None;
            }
            labels.push(String::from_utf8_lossy(q.get(at + 1..at + 1 + n)?).to_ascii_lowercase());
            at += 1 + n;
        }
        let qtype = u16::from_be_bytes([*q.get(at)?, *q.get(at + 1)?]);
        let question = q.get(12..at + 4)?;
        let name = labels.join(".");
        let ip = self.service_ips.get(&name);
        let record = ip.filter(|ip| (qtype == 1 && ip.is_ipv4()) || (qtype == 28 && ip.is_ipv6()));
        let mut m = Vec::with_capacity(question.len() + 28);
        m.extend_from_slice(&q[0..2]);
        // QR AA, the query's RD, RA; NXDOMAIN for an unknown name.
        m.push(0x84 | (q[2] & 0x01));
        m.push(if ip.is_some() { 0x80 } else { 0x83 });
        m.extend_from_slice(&[0, 1, 0, u8::from(record.is_some()), 0, 0, 0, 0]);
        m.extend_from_slice(question);
        if let Some(ip) = record {
            crate::dns::wire::address_record(&mut m, qtype, *ip);
        }
        Some(m)
    }

    /// The payload of `p` (for an ICMP error, the quoted packet).
    fn payload(&self, p: &Packet) -> Vec<u8> {
        let ip_hdr: usize = if p.is_ipv4() { 20 } else { 40 };
        let model_payload = |l4: usize| usize::from(p.len).saturating_sub(ip_hdr + l4);
        let l4_len = match p.l4 {
            L4::Tcp { .. } => 20,
            L4::Udp { .. } | L4::Icmp { .. } => 8,
            L4::Sctp { .. } => 12,
            L4::Other { .. } => 0,
        };
        if let Some(b) = self.captured_payload(p, l4_len) {
            return b;
        }
        if let Some(b) = self.resolver_payload(p) {
            return b;
        }
        match p.l4 {
            L4::Udp { .. } => self
                .dns_payload(p)
                .unwrap_or_else(|| Self::filler(model_payload(8))),
            L4::Tcp { .. } => Self::filler(model_payload(20)),
            L4::Sctp { .. } => Self::filler(model_payload(12)),
            L4::Icmp {
                body: IcmpBody::Error(inner),
                ..
            } => {
                let limit = icmp_error_limit(p.is_ipv4()) - ip_hdr - 8;
                // The model's error is as long as the quote it holds: the quoted packet's
                // length, when it was not cut.
                let quoted_len = usize::from(p.len).saturating_sub(ip_hdr + 8);
                let whole_len = (quoted_len < limit).then_some(quoted_len);
                let mut q = self.quoted(&inner, p.tag, whole_len);
                q.truncate(limit);
                q
            }
            L4::Icmp { .. } => Self::filler(model_payload(8)),
            L4::Other { .. } => Self::filler(model_payload(0)),
        }
    }

    /// The bytes of the packet an ICMP error quotes, rebuilt from its quoted header (as the
    /// NAT reverse translation left it), the tag it shares with the error, and `whole_len`,
    /// its length when the model knows it.
    fn quoted(&self, inner: &InnerHeader, tag: u64, whole_len: Option<usize>) -> Vec<u8> {
        let v4 = inner.src.is_ipv4();
        let icmp_p = if v4 {
            pk::IPPROTO_ICMP
        } else {
            pk::IPPROTO_ICMPV6
        };
        let l4 = match inner.proto {
            pk::IPPROTO_UDP => L4::Udp {
                sport: inner.sport,
                dport: inner.dport,
            },
            pk::IPPROTO_TCP => match self.tcp_seen.get(&tag) {
                Some((
                    L4::Tcp {
                        flags,
                        seq,
                        ack,
                        win,
                        opts,
                        ..
                    },
                    _,
                )) => L4::Tcp {
                    sport: inner.sport,
                    dport: inner.dport,
                    flags: *flags,
                    seq: *seq,
                    ack: *ack,
                    win: *win,
                    opts: *opts,
                },
                _ => L4::Tcp {
                    sport: inner.sport,
                    dport: inner.dport,
                    flags: sim_core::TcpFlags::SYN,
                    seq: 0,
                    ack: 0,
                    win: sim_core::packet::DEFAULT_TCP_WINDOW,
                    opts: sim_core::TcpOpts::NONE,
                },
            },
            pk::IPPROTO_SCTP => L4::Sctp {
                sport: inner.sport,
                dport: inner.dport,
            },
            p if p == icmp_p => L4::Icmp {
                icmp_type: inner.icmp_type,
                code: 0,
                body: IcmpBody::Query {
                    id: inner.sport,
                    seq: 0,
                },
            },
            other => L4::Other { proto: other },
        };
        let mut q = Packet {
            src: inner.src,
            dst: inner.dst,
            l4,
            len: 0,
            ttl: inner.ttl,
            mark: 0,
            iif: None,
            oif: None,
            tag,
        };
        let hdrs = sim_core::wire::header_len(&q);
        q.len = match (whole_len, &q.l4) {
            (_, L4::Tcp { .. }) if self.tcp_seen.contains_key(&tag) => {
                let payload = self.tcp_seen.get(&tag).map(|x| x.1).unwrap_or(0);
                (hdrs + usize::from(payload)) as u16
            }
            (Some(n), _) => n.max(hdrs) as u16,
            (None, _) => (hdrs + usize::from(sim_core::packet::DEFAULT_PAYLOAD_LEN)) as u16,
        };
        self.ip_bytes(&q).unwrap_or_default()
    }

    /// The IP packet's bytes.
    pub fn ip_bytes(&self, p: &Packet) -> Result<Vec<u8>, sim_core::wire::EmitError> {
        let mut b = sim_core::wire::emit_ip_with_payload(p, &self.payload(p))?;
        let is_error = matches!(
            p.l4,
            L4::Icmp {
                body: IcmpBody::Error(_),
                ..
            }
        );
        if is_error && p.is_ipv4() {
            // __icmp_send's socket does no path-MTU discovery (IP_PMTUDISC_DONT): the error
            // goes out without don't-fragment.
            b[6] &= !0x40;
            b[10..12].fill(0);
            let sum = ipv4_header_checksum(&b[..20]);
            b[10..12].copy_from_slice(&sum.to_be_bytes());
        }
        Ok(b)
    }

    /// The Ethernet frame of `p` from `src` to `dst`.
    pub fn frame(
        &mut self,
        p: &Packet,
        src: [u8; 6],
        dst: [u8; 6],
    ) -> Result<Vec<u8>, sim_core::wire::EmitError> {
        self.remember_tcp(p);
        let ip = self.ip_bytes(p)?;
        let mut f = Vec::with_capacity(14 + ip.len());
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        let ethertype: u16 = if p.is_ipv4() { 0x0800 } else { 0x86dd };
        f.extend_from_slice(&ethertype.to_be_bytes());
        f.extend_from_slice(&ip);
        Ok(f)
    }
}

use sim_core::packet as pk;
use sim_core::{IcmpBody, InnerHeader};

/// A pod veth's capture point and the MACs of its two ends.
#[derive(Debug, Clone)]
struct VethTap {
    id: usize,
    pod_mac: [u8; 6],
    host_mac: [u8; 6],
}

/// The run's capture state: the sink, the points, the frame builder.
pub(super) struct Tap {
    sink: Box<dyn CaptureSink>,
    frames: FrameBuilder,
    /// Capture point ids of each node's eth0, and its MAC and its router's.
    eth0: Vec<(usize, [u8; 6], [u8; 6])>,
    veths: BTreeMap<(usize, IfName), VethTap>,
    /// Capture point ids of each bridged node's bridge device (`network.cni: bridge`).
    bridges: BTreeMap<usize, usize>,
    /// Capture point ids of each Calico node's `tunl0` (IPIP).
    tunnels: BTreeMap<usize, usize>,
    /// File names given so far.
    names: BTreeSet<String>,
    points: usize,
}

/// A name safe as a file name: letters, digits, `.`, `_` and `-` kept, anything else `_`.
fn file_safe(s: &str) -> String {
    s.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect()
}

impl Tap {
    pub(super) fn new(sink: Box<dyn CaptureSink>, sc: &Scenario) -> Tap {
        Tap {
            sink,
            frames: FrameBuilder::new(sc),
            eth0: Vec::new(),
            veths: BTreeMap::new(),
            bridges: BTreeMap::new(),
            tunnels: BTreeMap::new(),
            names: BTreeSet::new(),
            points: 0,
        }
    }

    fn add_point(&mut self, point: CapturePoint) -> io::Result<usize> {
        let id = self.points;
        self.points += 1;
        self.names.insert(point.file.clone());
        self.sink.open(id, &point)?;
        Ok(id)
    }

    /// A file name not given yet: `stem.pcap`, else `stem.2.pcap`, `stem.3.pcap`, ….
    fn fresh_name(&self, stem: &str) -> String {
        let first = format!("{stem}.pcap");
        if !self.names.contains(&first) {
            return first;
        }
        (2..)
            .map(|k| format!("{stem}.{k}.pcap"))
            .find(|n| !self.names.contains(n))
            .unwrap_or_else(|| unreachable!("an unbounded range"))
    }
}

impl Simulation {
    /// Opens every node's `eth0` capture point (at build, before any pod).
    pub(super) fn tap_nodes(&mut self) {
        let Some(tap) = self.tap.as_mut() else { return };
        for n in &self.nodes {
            let point = CapturePoint {
                node: n.def.name.clone(),
                interface: "eth0".into(),
                pod: None,
                file: tap.fresh_name(&format!("{}-eth0", file_safe(&n.def.name))),
            };
            let router = router_address(n.def.address, &self.sc).unwrap_or(n.def.address);
            match tap.add_point(point) {
                Ok(id) => {
                    tap.eth0
                        .push((id, mac_for_address(n.def.address), mac_for_address(router)))
                }
                Err(e) => {
                    self.output_error.get_or_insert(e);
                    return;
                }
            }
        }
        // The bridge device of each node of the bridge plugin; its frames (and its ports')
        // come from the namespace's bridge log (Netns::drain_bridge_seen).
        if let Some(b) = self.sc.cni.bridge() {
            for (k, n) in self.nodes.iter_mut().enumerate() {
                let point = CapturePoint {
                    node: n.def.name.clone(),
                    interface: b.name.clone(),
                    pod: None,
                    file: tap.fresh_name(&format!(
                        "{}-{}",
                        file_safe(&n.def.name),
                        file_safe(&b.name)
                    )),
                };
                match tap.add_point(point) {
                    Ok(id) => {
                        tap.bridges.insert(k, id);
                        n.netns.bridge_capture(true);
                    }
                    Err(e) => {
                        self.output_error.get_or_insert(e);
                        return;
                    }
                }
            }
        }
        // Calico's tunl0 under IPIP: the inner packets, raw IP.
        if let Cni::Calico(c) = &self.sc.cni {
            if c.encapsulates() {
                for (k, n) in self.nodes.iter().enumerate() {
                    let point = CapturePoint {
                        node: n.def.name.clone(),
                        interface: "tunl0".into(),
                        pod: None,
                        file: tap.fresh_name(&format!("{}-tunl0", file_safe(&n.def.name))),
                    };
                    match tap.add_point(point) {
                        Ok(id) => {
                            tap.tunnels.insert(k, id);
                        }
                        Err(e) => {
                            self.output_error.get_or_insert(e);
                            return;
                        }
                    }
                }
            }
        }
        for (i, c) in self.sc.clients.iter().enumerate() {
            let ip = match &c.placement {
                Placement::Pod(k) => self.sc.pods.iter().find(|p| &p.key() == k).map(|p| p.ip),
                Placement::Host(h) => self.sc.hosts.get(*h).map(|h| h.address),
                Placement::Node(n) => self.sc.nodes.get(*n).map(|n| n.address),
            };
            if let Some(ip) = ip {
                tap.frames.client_ip(i, ip);
            }
        }
    }

    /// Opens the capture point of a new pod veth.
    pub(super) fn tap_veth(&mut self, node: usize, veth: IfName, number: u64, pod: usize) {
        let Some(tap) = self.tap.as_mut() else { return };
        let p = &self.pods[pod];
        let name = &self.nodes[node].def.name;
        let pod_name = &p.state.def.name;
        let ambiguous = self
            .sc
            .pods
            .iter()
            .any(|o| &o.name == pod_name && o.namespace != p.state.def.namespace);
        let who = if ambiguous {
            format!("{}-{}", p.state.def.namespace, pod_name)
        } else {
            pod_name.clone()
        };
        let point = CapturePoint {
            node: name.clone(),
            interface: veth.to_string(),
            pod: Some(p.key.clone()),
            file: tap.fresh_name(&format!("{}-veth-{}", file_safe(name), file_safe(&who))),
        };
        match tap.add_point(point) {
            Ok(id) => {
                tap.veths.insert(
                    (node, veth),
                    VethTap {
                        id,
                        pod_mac: pod_mac(p.state.def.ip),
                        // Calico gives every host side ee:ee:ee:ee:ee:ee (cni-plugin
                        // dataplane_linux.go `hostSideMAC`).
                        host_mac: match self.sc.cni {
                            Cni::Calico(_) => [0xee; 6],
                            _ => veth_mac(number as u32),
                        },
                    },
                );
            }
            Err(e) => {
                self.output_error.get_or_insert(e);
            }
        }
    }

    fn tap_write(&mut self, id: usize, p: &Packet, src: [u8; 6], dst: [u8; 6]) {
        let now = self.now;
        let Some(tap) = self.tap.as_mut() else { return };
        let frame = match tap.frames.frame(p, src, dst) {
            Ok(f) => f,
            // A packet the wire cannot carry (mixed families) is not captured.
            Err(_) => return,
        };
        if self.output_error.is_none() {
            if let Err(e) = tap.sink.frame(id, now, &frame) {
                self.output_error = Some(e);
            }
        }
    }

    /// The MAC address of the sender `hop` on node `n`'s network.
    fn hop_mac(&self, n: usize, hop: Hop) -> [u8; 6] {
        match hop {
            Hop::Node(m) => mac_for_address(self.nodes[m].def.address),
            Hop::Router => self
                .tap
                .as_ref()
                .and_then(|t| t.eth0.get(n))
                .map(|e| e.2)
                .unwrap_or([0; 6]),
            Hop::Pod => [0; 6],
        }
    }

    /// A frame received on node `n`'s `dev` from `hop`.
    pub(super) fn tap_rx(&mut self, n: usize, dev: IfName, hop: Hop, p: &Packet) {
        let Some(tap) = self.tap.as_ref() else { return };
        if dev == eth0() {
            let Some(&(id, mac, _)) = tap.eth0.get(n) else {
                return;
            };
            let src = self.hop_mac(n, hop);
            self.tap_write(id, p, src, mac);
        } else if let Some(v) = tap
            .veths
            .get(&(n, dev))
            .filter(|_| !tap.bridges.contains_key(&n))
        {
            let (id, src, dst) = (v.id, v.pod_mac, v.host_mac);
            self.tap_write(id, p, src, dst);
        }
    }

    /// The frames node `n`'s bridge saw on its device and ports (`L2Seen`), each to its
    /// capture point with the MACs of its Ethernet header.
    pub(super) fn tap_bridge(&mut self, n: usize) {
        let Some(tap) = self.tap.as_ref() else { return };
        let Some(&br_id) = tap.bridges.get(&n) else {
            return;
        };
        let seen = self.nodes[n].netns.drain_bridge_seen();
        for s in seen {
            let tap = self
                .tap
                .as_ref()
                .unwrap_or_else(|| unreachable!("checked above"));
            let id = match tap.veths.get(&(n, s.dev)) {
                Some(v) => v.id,
                None if self.nodes[n].netns.bridges().iter().any(|b| b.dev == s.dev) => br_id,
                None => continue,
            };
            self.tap_write(id, &s.packet, s.src_mac.0, s.dst_mac.0);
        }
    }

    /// A frame node `n` transmits on `eth0` to `next` (whose address is `next_hop`).
    pub(super) fn tap_eth0_tx(&mut self, n: usize, next_hop: IpAddr, p: &Packet) {
        let Some(tap) = self.tap.as_ref() else { return };
        let Some(&(id, mac, _)) = tap.eth0.get(n) else {
            return;
        };
        self.tap_write(id, p, mac, mac_for_address(next_hop));
    }

    /// A frame node `n` transmits on pod veth `dev`.
    pub(super) fn tap_veth_tx(&mut self, n: usize, dev: IfName, p: &Packet) {
        let Some(tap) = self.tap.as_ref() else { return };
        if tap.bridges.contains_key(&n) {
            // A bridge port: its frames come from the bridge log (tap_bridge).
            return;
        }
        if let Some(v) = tap.veths.get(&(n, dev)) {
            let (id, src, dst) = (v.id, v.host_mac, v.pod_mac);
            self.tap_write(id, p, src, dst);
        }
    }

    /// A packet node `n`'s `tunl0` sends or receives: raw IP, no link-layer header.
    pub(super) fn tap_tunnel(&mut self, n: usize, p: &Packet) {
        let now = self.now;
        let Some(tap) = self.tap.as_mut() else { return };
        let Some(&id) = tap.tunnels.get(&n) else {
            return;
        };
        tap.frames.remember_tcp(p);
        let Ok(bytes) = tap.frames.ip_bytes(p) else {
            return;
        };
        if self.output_error.is_none() {
            if let Err(e) = tap.sink.frame(id, now, &bytes) {
                self.output_error = Some(e);
            }
        }
    }

    /// An IPIP packet `outer` carrying `inner` on node `n`'s `eth0`: sent towards
    /// `next_hop`, or received from `hop`. Its payload is the inner packet's bytes.
    pub(super) fn tap_ipip(
        &mut self,
        n: usize,
        dir: Result<IpAddr, Hop>,
        outer: &Packet,
        inner: &Packet,
    ) {
        let now = self.now;
        let Some(tap) = self.tap.as_ref() else { return };
        let Some(&(id, mac, _)) = tap.eth0.get(n) else {
            return;
        };
        let (src, dst) = match dir {
            Ok(next_hop) => (mac, mac_for_address(next_hop)),
            Err(hop) => (self.hop_mac(n, hop), mac),
        };
        let Some(tap) = self.tap.as_mut() else { return };
        tap.frames.remember_tcp(inner);
        let Ok(inner_bytes) = tap.frames.ip_bytes(inner) else {
            return;
        };
        let Ok(ip) = sim_core::wire::emit_ip_with_payload(outer, &inner_bytes) else {
            return;
        };
        let mut f = Vec::with_capacity(14 + ip.len());
        f.extend_from_slice(&dst);
        f.extend_from_slice(&src);
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        f.extend_from_slice(&ip);
        if self.output_error.is_none() {
            if let Err(e) = tap.sink.frame(id, now, &f) {
                self.output_error = Some(e);
            }
        }
    }

    /// Flushes the capture files (end of the run).
    pub(super) fn tap_finish(&mut self) -> io::Result<()> {
        match self.tap.as_mut() {
            Some(t) => t.sink.finish(),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dns_messages_are_well_formed() {
        let q = DnsQuestion {
            name: "kube-dns.kube-system.svc.cluster.local.".into(),
            answer: "10.96.0.10".parse().unwrap(),
        };
        let m = q.query(0x1234);
        assert_eq!(&m[..12], &[0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0]);
        assert_eq!(m[12], 8);
        assert_eq!(&m[13..21], b"kube-dns");
        assert_eq!(&m[m.len() - 4..], &[0, 1, 0, 1]);
        let a = q.answer(0x1234);
        assert_eq!(&a[..12], &[0x12, 0x34, 0x85, 0x80, 0, 1, 0, 1, 0, 0, 0, 0]);
        assert_eq!(
            &a[a.len() - 16..a.len() - 4],
            &[0xc0, 0x0c, 0, 1, 0, 1, 0, 0, 0, 5, 0, 4]
        );
        assert_eq!(&a[a.len() - 4..], &[10, 96, 0, 10]);
    }

    #[test]
    fn more_points_than_open_files_each_keep_their_frames() {
        let dir = std::env::temp_dir().join(format!("nfsim-pcapdir-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut sink = PcapDir::new(&dir, 1_000_000_000);
        let n = MAX_OPEN_CAPTURE_FILES + 6;
        for id in 0..n {
            let point = CapturePoint {
                node: "n".into(),
                interface: "eth0".into(),
                pod: None,
                file: format!("p{id}.pcap"),
            };
            sink.open(id, &point).unwrap();
        }
        // Round-robin, so every file is closed and reopened on the way.
        for round in 0..3u8 {
            for id in 0..n {
                sink.frame(id, SimTime::from_secs(1), &[round, id as u8])
                    .unwrap();
            }
        }
        sink.finish().unwrap();
        for id in 0..n {
            let b = std::fs::read(dir.join(format!("p{id}.pcap"))).unwrap();
            assert_eq!(&b[..24], &pcap_header());
            assert_eq!(b.len(), 24 + 3 * (16 + 2));
            for round in 0..3u8 {
                let r = 24 + usize::from(round) * 18;
                // 1 s of epoch plus 1 s of simulated time.
                assert_eq!(&b[r..r + 4], &2u32.to_le_bytes());
                assert_eq!(&b[r + 16..r + 18], &[round, id as u8]);
            }
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn macs_follow_the_documented_scheme() {
        assert_eq!(
            mac_for_address("192.168.0.12".parse().unwrap()),
            [0x02, 0x42, 192, 168, 0, 12]
        );
        assert_eq!(
            pod_mac("10.244.2.9".parse().unwrap()),
            [0x0a, 0x58, 10, 244, 2, 9]
        );
        assert_eq!(veth_mac(10), [0x0e, 0, 0, 0, 0, 10]);
    }
}
