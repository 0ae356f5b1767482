//! Reading and writing capture files.
//!
//! # Reading
//!
//! [`read`] (bytes) and [`read_file`] (a path) take a classic pcap file (microsecond or
//! nanosecond timestamps, either byte order) or a pcapng file, and turn every record into a
//! [`Record`]: its time as a [`SimTime`], and the [`Packet`] [`crate::wire`] parses from it.
//! Link types read: Ethernet, raw IP (101, 228, 229) and Linux cooked captures (SLL, SLL2);
//! see [`LinkType`]. In a pcapng file each interface has its own link type and timestamp
//! resolution (`if_tsresol`, `if_tsoffset`); simple packet blocks (no timestamp) get the time
//! of the record before them.
//!
//! **Time.** By default ([`Timestamps::RelativeToFirst`]) a record's time is the nanoseconds
//! since the *earliest* timestamp in the file, which is the first record's in any capture
//! written in order; records stay in file order even if a timestamp goes backwards.
//! [`Timestamps::Absolute`] gives nanoseconds since the Unix epoch instead.
//! [`Capture::first_epoch_ns`] is the earliest timestamp, so either can be turned into the
//! other.
//!
//! **Errors** name the file (when read from one), the record by its 1-based frame number (as
//! Wireshark numbers them) and the byte offset in the file: a truncated file or record, a
//! record whose fields are impossible, an unsupported link type, or a frame that does not
//! parse (the [`WireError`] inside gives the offset within the frame). A pcapng block whose
//! framing is wrong (a length below its type's minimum, not a multiple of 4, beyond the end of
//! the file, different at its start and end, or a captured length that does not fit) is
//! named by its type, its frame when it holds a packet, its offset and both lengths
//! ([`PcapErrorKind::BadBlock`], [`PcapErrorKind::TruncatedBlock`]). A record cut short by
//! the snap length (captured length below the original length) is accepted while the headers
//! nfsim reads are present. Frames that are not IP at all (ARP, LLDP, …) are skipped and
//! listed in [`Capture::skipped`], unless [`ReadOptions::skip_non_ip`] is off.
//!
//! # Writing
//!
//! [`PcapWriter`] writes a classic pcap file with nanosecond timestamps, little-endian, snap
//! length 262144, link type Ethernet (with the MAC addresses given) or raw IP, one record per
//! packet from [`crate::wire::emit_ip`]. A [`SimTime`] is written as the epoch time
//! `start_epoch_ns + time` (by default the epoch itself, 1970-01-01). The same packets at the
//! same times always give the same bytes.

use std::io::Write;
use std::path::{Path, PathBuf};

use pcap_file::pcap::{PcapHeader, PcapParser};
use pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionOption;
use pcap_file::pcapng::Block;
use pcap_file::pcapng::PcapNgParser;
use pcap_file::{DataLink, Endianness, PcapError, TsResolution};

use crate::packet::Packet;
use crate::time::{SimTime, NANOS_PER_SEC};
use crate::wire::{self, EmitError, LinkType, ParseOptions, WireError, SUPPORTED_LINKTYPES};

mod ngblock;

/// The snap length written in pcap headers (tcpdump's default, `MAXIMUM_SNAPLEN`).
pub const WRITE_SNAPLEN: u32 = 262_144;

/// Largest captured length a record may claim (256 MiB): anything bigger is a corrupt length
/// field, not a packet.
pub const MAX_RECORD_LEN: u32 = 256 * 1024 * 1024;

/// What a record's [`SimTime`] counts from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Timestamps {
    /// Nanoseconds since the earliest timestamp in the file.
    #[default]
    RelativeToFirst,
    /// Nanoseconds since the Unix epoch.
    Absolute,
}

/// How to read a capture.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReadOptions {
    /// What record times count from.
    pub timestamps: Timestamps,
    /// Skip frames that carry something other than IP (listed in [`Capture::skipped`]) instead
    /// of failing on them. Default: on.
    pub skip_non_ip: bool,
    /// Read [`Packet::tag`] from the payload (see [`crate::wire`]). Default: on.
    pub read_tag: bool,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            timestamps: Timestamps::RelativeToFirst,
            skip_non_ip: true,
            read_tag: true,
        }
    }
}

/// The file format a capture was read from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CaptureFormat {
    /// Classic libpcap format.
    Pcap,
    /// pcapng.
    PcapNg,
}

/// One packet of a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// 1-based record number in the file (Wireshark's frame number).
    pub frame: usize,
    /// When it was captured (see [`Timestamps`]).
    pub time: SimTime,
    /// The packet.
    pub packet: Packet,
    /// The link type of its frame.
    pub link: LinkType,
    /// Bytes captured.
    pub captured_len: u32,
    /// Bytes the frame had on the wire.
    pub orig_len: u32,
    /// Where the record's IP packet starts in [`Capture::ip_data`].
    pub ip_at: usize,
    /// How many bytes of the IP packet were captured (the IP length, or less when the snap
    /// length cut it; link-layer padding and trailers not counted).
    pub ip_captured: usize,
    /// For a Linux cooked capture (`tcpdump -i any`), the packet type the kernel gave the
    /// frame (`sll_pkttype`, see [`PACKET_OUTGOING`]); `None` for other link types.
    pub pkttype: Option<u8>,
}

/// `sll_pkttype` of a frame addressed to this host (`PACKET_HOST`, `<linux/if_packet.h>`).
pub const PACKET_HOST: u8 = 0;
/// `sll_pkttype` of a frame to another host, seen by a promiscuous or bridge port
/// (`PACKET_OTHERHOST`).
pub const PACKET_OTHERHOST: u8 = 3;
/// `sll_pkttype` of a frame the host sent (`PACKET_OUTGOING`): in a `tcpdump -i any` capture,
/// every packet the node transmits, forwarded ones included, appears with it.
pub const PACKET_OUTGOING: u8 = 4;

/// A frame that was skipped because it is not IP.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    /// 1-based record number.
    pub frame: usize,
    /// What it carries instead.
    pub what: String,
}

/// A capture file, read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Capture {
    /// The file format.
    pub format: CaptureFormat,
    /// The IP packets, in file order.
    pub records: Vec<Record>,
    /// Frames skipped because they are not IP.
    pub skipped: Vec<Skipped>,
    /// The earliest timestamp in the file, in nanoseconds since the Unix epoch (0 when empty).
    pub first_epoch_ns: u64,
    /// Bytes holding every record's captured IP packet, at its [`Record::ip_at`] (see
    /// [`Capture::ip_bytes`]): from [`read`], the IP packets copied one after the other;
    /// from [`read_file`], the file itself (no copy), a record's IP packet where it is in
    /// the file.
    pub ip_data: Vec<u8>,
}

impl Capture {
    /// The captured bytes of `record`'s IP packet, from its IP header on: exactly what the
    /// capture holds, cut where the IP length ends (an Ethernet frame's padding is not part of
    /// it) or where the snap length cut it.
    pub fn ip_bytes(&self, record: &Record) -> &[u8] {
        self.ip_data
            .get(record.ip_at..record.ip_at + record.ip_captured)
            .unwrap_or(&[])
    }
}

/// What went wrong reading a capture (see [`PcapReadError`] for where).
#[derive(Debug, thiserror::Error)]
pub enum PcapErrorKind {
    /// The file could not be read.
    #[error("cannot read: {0}")]
    Io(#[source] std::io::Error),
    /// The first bytes are no pcap or pcapng magic number.
    #[error("not a pcap or pcapng file: it starts with {found} (expected a pcap magic number a1b2c3d4 or a1b23c4d in either byte order, or the pcapng block type 0a0d0d0a)")]
    NotACapture {
        /// The first bytes, in hex.
        found: String,
    },
    /// The file ends inside its file header or section header.
    #[error("the file ends inside its {what} at byte offset 0: need {needed} bytes, only {available} present")]
    TruncatedHeader {
        /// Which header.
        what: &'static str,
        /// Bytes it needs.
        needed: usize,
        /// Bytes present.
        available: usize,
    },
    /// The file header or a block is malformed.
    #[error("malformed {what} at byte offset {offset}: {reason}")]
    BadHeader {
        /// Which header or block.
        what: &'static str,
        /// Where it starts in the file.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
    /// A pcapng block's framing is wrong: its length or byte-order magic (see the `ngblock`
    /// module).
    #[error("malformed {block} at byte offset {offset}: {reason}")]
    BadBlock {
        /// The block: its name and type number, and for a packet block its frame number.
        block: String,
        /// Where it starts in the file.
        offset: usize,
        /// What is wrong, with the values read.
        reason: String,
    },
    /// A pcapng block declares more bytes than the file has left.
    #[error("the file ends inside the {block} at byte offset {offset}: its length field says {declared} bytes, only {available} are left")]
    TruncatedBlock {
        /// The block: its name and type number, and for a packet block its frame number.
        block: String,
        /// Where it starts in the file.
        offset: usize,
        /// The length its length field declares.
        declared: usize,
        /// Bytes left in the file from its start.
        available: usize,
    },
    /// The file ends inside a record.
    #[error("the file ends inside frame {frame} at byte offset {offset}: need {needed} bytes, only {available} left")]
    TruncatedRecord {
        /// 1-based record number.
        frame: usize,
        /// Where the record starts in the file.
        offset: usize,
        /// Bytes the record needs.
        needed: usize,
        /// Bytes left in the file.
        available: usize,
    },
    /// A record's header holds an impossible value.
    #[error("frame {frame} at byte offset {offset}: {reason}")]
    BadRecord {
        /// 1-based record number.
        frame: usize,
        /// Where the record starts in the file.
        offset: usize,
        /// What is wrong.
        reason: String,
    },
    /// The link type is not one nfsim reads.
    #[error("unsupported link type {linktype}{}: nfsim reads {SUPPORTED_LINKTYPES}", interface.map(|i| format!(" on interface {i}")).unwrap_or_default())]
    UnsupportedLinkType {
        /// The `LINKTYPE_*` number.
        linktype: u32,
        /// For pcapng, the interface that has it.
        interface: Option<u32>,
    },
    /// A pcapng packet names an interface no interface description block declared.
    #[error("frame {frame} at byte offset {offset}: interface {interface} was never described (no interface description block for it)")]
    UnknownInterface {
        /// 1-based record number.
        frame: usize,
        /// Where the block starts in the file.
        offset: usize,
        /// The interface id.
        interface: u32,
    },
    /// A frame does not parse into a packet.
    #[error("frame {frame} (data at byte offset {data_offset}): {source}")]
    Packet {
        /// 1-based record number.
        frame: usize,
        /// Where the frame's first byte is in the file; the error's offsets count from there.
        data_offset: usize,
        /// Why it does not parse.
        #[source]
        source: WireError,
    },
}

/// Why a capture could not be read: the file (if read from one) and what went wrong.
#[derive(Debug, thiserror::Error)]
#[error("{}: {kind}", file.as_ref().map(|f| f.display().to_string()).unwrap_or_else(|| "capture".to_string()))]
pub struct PcapReadError {
    /// The file, when read with [`read_file`].
    pub file: Option<PathBuf>,
    /// What went wrong, and where.
    pub kind: PcapErrorKind,
}

impl From<PcapErrorKind> for PcapReadError {
    fn from(kind: PcapErrorKind) -> Self {
        PcapReadError { file: None, kind }
    }
}

/// Reads the capture file at `path`. Errors name the file.
pub fn read_file(path: impl AsRef<Path>, opts: &ReadOptions) -> Result<Capture, PcapReadError> {
    let path = path.as_ref();
    let with_file = |kind| PcapReadError {
        file: Some(path.to_path_buf()),
        kind,
    };
    let bytes =
        crate::input::read_limited(path, crate::input::MAX_CAPTURE_BYTES, "MAX_CAPTURE_BYTES")
            .map_err(|e| with_file(PcapErrorKind::Io(e)))?;
    // The file's bytes become the capture's `ip_data` as they are: no second copy of every
    // packet (at a million packets that copy alone is ~70 MB of fresh memory to fault in).
    read_bytes(Bytes::Owned(bytes), opts).map_err(|e| with_file(e.kind))
}

/// The bytes a capture is read from: borrowed (the IP packets are copied out into
/// [`Capture::ip_data`]) or owned (they become `ip_data` as they are, the records pointing
/// into the file).
enum Bytes<'a> {
    Borrowed(&'a [u8]),
    Owned(Vec<u8>),
}

const PCAPNG_SHB: [u8; 4] = [0x0a, 0x0d, 0x0d, 0x0a];

/// Reads a capture from its bytes.
pub fn read(bytes: &[u8], opts: &ReadOptions) -> Result<Capture, PcapReadError> {
    read_bytes(Bytes::Borrowed(bytes), opts)
}

fn read_bytes(input: Bytes<'_>, opts: &ReadOptions) -> Result<Capture, PcapReadError> {
    let bytes: &[u8] = match &input {
        Bytes::Borrowed(b) => b,
        Bytes::Owned(v) => v,
    };
    if bytes.len() < 4 {
        return Err(PcapErrorKind::TruncatedHeader {
            what: "file header",
            needed: 24,
            available: bytes.len(),
        }
        .into());
    }
    let owned = matches!(input, Bytes::Owned(_));
    let mut b = Builder::new(bytes, owned, opts);
    let format = if bytes[..4] == PCAPNG_SHB {
        read_pcapng(bytes, &mut b)?;
        CaptureFormat::PcapNg
    } else {
        read_classic(bytes, &mut b)?;
        CaptureFormat::Pcap
    };
    let ip_data = match input {
        Bytes::Owned(v) => v,
        Bytes::Borrowed(_) => std::mem::take(&mut b.ip_data),
    };
    b.finish(format, ip_data).map_err(Into::into)
}

/// A record before its frame is parsed.
struct RawRecord<'a> {
    frame: usize,
    data_offset: usize,
    epoch_ns: u64,
    link: LinkType,
    data: &'a [u8],
    orig_len: u32,
}

fn hex4(b: &[u8]) -> String {
    b.iter().take(4).map(|x| format!("{x:02x}")).collect()
}

fn link_of(dl: DataLink, interface: Option<u32>) -> Result<LinkType, PcapErrorKind> {
    let n = u32::from(dl);
    LinkType::from_linktype(n).ok_or(PcapErrorKind::UnsupportedLinkType {
        linktype: n,
        interface,
    })
}

fn read_classic(bytes: &[u8], b: &mut Builder) -> Result<(), PcapErrorKind> {
    let magic = u32::from_be_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if !matches!(magic, 0xa1b2c3d4 | 0xa1b23c4d | 0xd4c3b2a1 | 0x4d3cb2a1) {
        return Err(PcapErrorKind::NotACapture { found: hex4(bytes) });
    }
    let (mut rest, parser) = PcapParser::new(bytes).map_err(|e| match e {
        PcapError::IncompleteBuffer => PcapErrorKind::TruncatedHeader {
            what: "pcap file header",
            needed: 24,
            available: bytes.len(),
        },
        other => PcapErrorKind::BadHeader {
            what: "pcap file header",
            offset: 0,
            reason: other.to_string(),
        },
    })?;
    let header = parser.header();
    let link = link_of(header.datalink, None)?;
    let nanos = header.ts_resolution == TsResolution::NanoSecond;
    let read_u32 = |b: &[u8]| {
        let a = [b[0], b[1], b[2], b[3]];
        match header.endianness {
            Endianness::Big => u32::from_be_bytes(a),
            Endianness::Little => u32::from_le_bytes(a),
        }
    };
    let mut frame = 0;
    while !rest.is_empty() {
        frame += 1;
        let offset = bytes.len() - rest.len();
        if rest.len() < 16 {
            return Err(PcapErrorKind::TruncatedRecord {
                frame,
                offset,
                needed: 16,
                available: rest.len(),
            });
        }
        let incl_len = read_u32(&rest[8..12]);
        if incl_len > MAX_RECORD_LEN {
            return Err(PcapErrorKind::BadRecord {
                frame,
                offset,
                reason: format!(
                    "captured length {incl_len} is larger than any packet ({MAX_RECORD_LEN} at most): the file is corrupt"
                ),
            });
        }
        let (next, raw) = parser.next_raw_packet(rest).map_err(|e| match e {
            PcapError::IncompleteBuffer => PcapErrorKind::TruncatedRecord {
                frame,
                offset,
                needed: 16 + incl_len as usize,
                available: rest.len(),
            },
            other => PcapErrorKind::BadRecord {
                frame,
                offset,
                reason: other.to_string(),
            },
        })?;
        let frac_limit = if nanos { NANOS_PER_SEC } else { 1_000_000 };
        if u64::from(raw.ts_frac) >= frac_limit {
            return Err(PcapErrorKind::BadRecord {
                frame,
                offset,
                reason: format!(
                    "timestamp fraction {} is not below {frac_limit} ({})",
                    raw.ts_frac,
                    if nanos { "nanoseconds" } else { "microseconds" }
                ),
            });
        }
        let frac_ns = if nanos {
            u64::from(raw.ts_frac)
        } else {
            u64::from(raw.ts_frac) * 1000
        };
        let data: &[u8] = &rest[16..16 + incl_len as usize];
        b.push(RawRecord {
            frame,
            data_offset: offset + 16,
            epoch_ns: u64::from(raw.ts_sec) * NANOS_PER_SEC + frac_ns,
            link,
            data,
            orig_len: raw.orig_len,
        });
        rest = next;
    }
    Ok(())
}

/// Per-interface facts of a pcapng file.
#[derive(Clone, Copy)]
struct Iface {
    link: Result<LinkType, u32>,
    /// Timestamp units per second (`if_tsresol`, default 10^6).
    units_per_sec: u128,
    /// Seconds added to every timestamp (`if_tsoffset`).
    offset_secs: u64,
}

fn iface_of(
    idb: &pcap_file::pcapng::blocks::interface_description::InterfaceDescriptionBlock<'_>,
) -> Iface {
    let mut units_per_sec: u128 = 1_000_000;
    let mut offset_secs = 0;
    for opt in &idb.options {
        match opt {
            // if_tsresol: MSB clear = negative power of 10, set = negative power of 2.
            InterfaceDescriptionOption::IfTsResol(r) => {
                let exp = u32::from(r & 0x7f);
                units_per_sec = if r & 0x80 == 0 {
                    10u128.checked_pow(exp).unwrap_or(u128::MAX)
                } else {
                    2u128.checked_pow(exp).unwrap_or(u128::MAX)
                };
            }
            InterfaceDescriptionOption::IfTsOffset(o) => offset_secs = *o,
            _ => {}
        }
    }
    Iface {
        link: LinkType::from_linktype(u32::from(idb.linktype)).ok_or(u32::from(idb.linktype)),
        units_per_sec,
        offset_secs,
    }
}

fn read_pcapng(bytes: &[u8], b: &mut Builder) -> Result<(), PcapErrorKind> {
    // Every block's framing is checked first (ngblock), so pcap-file's own errors are only
    // about a block's contents.
    ngblock::check(bytes, 0, false, 1)?;
    let (mut rest, mut parser) = PcapNgParser::new(bytes).map_err(|e| PcapErrorKind::BadBlock {
        block: ngblock::block_name(ngblock::SHB),
        offset: 0,
        reason: e.to_string(),
    })?;
    let mut frame = 0;
    let mut last_epoch_ns = 0u64;
    while !rest.is_empty() {
        let offset = bytes.len() - rest.len();
        let big = parser.section().endianness == Endianness::Big;
        let framed = ngblock::check(rest, offset, big, frame + 1)?;
        let (next, block) = parser.next_block(rest).map_err(|e| {
            let mut name = ngblock::block_name(framed.block_type);
            if ngblock::is_packet_block(framed.block_type) {
                name.push_str(&format!(" of frame {}", frame + 1));
            }
            PcapErrorKind::BadBlock {
                block: name,
                offset,
                reason: match e {
                    // The framing was checked: what is missing is inside the block.
                    PcapError::IncompleteBuffer => {
                        format!("its fields do not fit its length of {} bytes", framed.len)
                    }
                    other => other.to_string(),
                },
            }
        })?;
        // Where the packet data starts inside each packet block type.
        // (interface, raw timestamp, captured bytes, original length, data offset in block)
        let (iface_id, ts_raw, data_len, orig_len, data_at) = match &block {
            Block::EnhancedPacket(epb) => (
                Some(epb.interface_id),
                Some(epb.timestamp.as_nanos()),
                epb.data.len(),
                epb.original_len,
                28,
            ),
            Block::Packet(pb) => (
                Some(u32::from(pb.interface_id)),
                Some(u128::from(pb.timestamp)),
                pb.data.len(),
                pb.original_len,
                28,
            ),
            // The block holds min(original length, snap length) bytes plus padding.
            Block::SimplePacket(spb) => (
                Some(0),
                None,
                (spb.original_len as usize).min(spb.data.len()),
                spb.original_len,
                12,
            ),
            _ => (None, None, 0, 0, 0),
        };
        // The frame, sliced from the file itself (the block's copy borrows from it anyway).
        let data = bytes
            .get(offset + data_at..offset + data_at + data_len)
            .unwrap_or(&[]);
        if let Some(id) = iface_id {
            frame += 1;
            let descr =
                parser
                    .interfaces()
                    .get(id as usize)
                    .ok_or(PcapErrorKind::UnknownInterface {
                        frame,
                        offset,
                        interface: id,
                    })?;
            let iface = iface_of(descr);
            let link = iface.link.map_err(|n| PcapErrorKind::UnsupportedLinkType {
                linktype: n,
                interface: Some(id),
            })?;
            let epoch_ns = match ts_raw {
                // pcap-file hands the raw 64-bit timestamp over as a Duration of that many
                // nanoseconds; scale it by the interface's resolution here.
                Some(raw) => {
                    let ns = raw * u128::from(NANOS_PER_SEC) / iface.units_per_sec.max(1)
                        + u128::from(iface.offset_secs) * u128::from(NANOS_PER_SEC);
                    u64::try_from(ns).map_err(|_| PcapErrorKind::BadRecord {
                        frame,
                        offset,
                        reason: format!("timestamp {raw} is past the year 2554"),
                    })?
                }
                None => last_epoch_ns,
            };
            last_epoch_ns = epoch_ns;
            b.push(RawRecord {
                frame,
                data_offset: offset + data_at,
                epoch_ns,
                link,
                data,
                orig_len,
            });
        }
        rest = next;
    }
    Ok(())
}

/// The records of a capture, parsed as the framing reads them: no list of unparsed records
/// is kept. A frame that does not parse is an error only once the whole file's framing has
/// been read, as when the frames were parsed after it: a framing error anywhere in the file
/// comes first, then the first frame that does not parse.
struct Builder {
    /// `ip_at` counts in `bytes` (they become [`Capture::ip_data`]) instead of in a copy.
    in_place: bool,
    opts: ReadOptions,
    records: Vec<Record>,
    skipped: Vec<Skipped>,
    ip_data: Vec<u8>,
    first_epoch_ns: Option<u64>,
    /// The first frame that did not parse: reported once the framing is through.
    bad: Option<PcapErrorKind>,
}

impl Builder {
    fn new(bytes: &[u8], in_place: bool, opts: &ReadOptions) -> Builder {
        Builder {
            in_place,
            opts: *opts,
            records: Vec::new(),
            skipped: Vec::new(),
            // At most the file's size; pages never written are never faulted in.
            ip_data: if in_place {
                Vec::new()
            } else {
                Vec::with_capacity(bytes.len())
            },
            first_epoch_ns: None,
            bad: None,
        }
    }

    fn push(&mut self, r: RawRecord<'_>) {
        self.first_epoch_ns = Some(
            self.first_epoch_ns
                .map_or(r.epoch_ns, |t| t.min(r.epoch_ns)),
        );
        if self.bad.is_some() {
            return;
        }
        let captured_len = r.data.len() as u32;
        let popts = ParseOptions {
            allow_snapped: captured_len < r.orig_len,
            read_tag: self.opts.read_tag,
        };
        let packet = match wire::parse_link(r.link, r.data, &popts) {
            Ok(p) => p,
            Err(WireError::NotIp { what, .. }) if self.opts.skip_non_ip => {
                self.skipped.push(Skipped {
                    frame: r.frame,
                    what,
                });
                return;
            }
            Err(source) => {
                self.bad = Some(PcapErrorKind::Packet {
                    frame: r.frame,
                    data_offset: r.data_offset,
                    source,
                });
                return;
            }
        };
        // The frame parsed, so its IP header is where the link layer says.
        let at = wire::ip_offset(r.link, r.data).filter(|&at| at <= r.data.len());
        let ip = at.and_then(|at| r.data.get(at..)).unwrap_or(&[]);
        let ip = &ip[..wire::ip_total_len(ip).map_or(ip.len(), |n| n.min(ip.len()))];
        let ip_at = if self.in_place {
            // Where `ip` starts in the file (an empty slice: anywhere, it is never read).
            at.map_or(0, |at| r.data_offset + at)
        } else {
            let ip_at = self.ip_data.len();
            self.ip_data.extend_from_slice(ip);
            ip_at
        };
        // struct sll_header has the packet type as a 16-bit field first; struct sll2_header
        // as one byte at offset 10.
        let pkttype = match r.link {
            LinkType::LinuxSll => r.data.get(1).copied(),
            LinkType::LinuxSll2 => r.data.get(10).copied(),
            _ => None,
        };
        self.records.push(Record {
            frame: r.frame,
            // The epoch time until [`Builder::finish`] knows the earliest.
            time: SimTime::from_nanos(r.epoch_ns),
            packet,
            link: r.link,
            captured_len,
            orig_len: r.orig_len,
            ip_at,
            ip_captured: ip.len(),
            pkttype,
        });
    }

    fn finish(self, format: CaptureFormat, ip_data: Vec<u8>) -> Result<Capture, PcapErrorKind> {
        if let Some(e) = self.bad {
            return Err(e);
        }
        let first_epoch_ns = self.first_epoch_ns.unwrap_or(0);
        let mut records = self.records;
        if self.opts.timestamps == Timestamps::RelativeToFirst {
            for r in &mut records {
                r.time = SimTime::from_nanos(r.time.as_nanos() - first_epoch_ns);
            }
        }
        Ok(Capture {
            format,
            records,
            skipped: self.skipped,
            first_epoch_ns,
            ip_data,
        })
    }
}

// ---------------------------------------------------------------------------------------------
// Writing
// ---------------------------------------------------------------------------------------------

/// The link layer a [`PcapWriter`] writes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WriteLink {
    /// Ethernet II frames between two MAC addresses (`LINKTYPE_ETHERNET`).
    Ethernet {
        /// Source MAC of every frame.
        src_mac: [u8; 6],
        /// Destination MAC of every frame.
        dst_mac: [u8; 6],
    },
    /// Bare IPv4/IPv6 packets (`LINKTYPE_RAW`).
    RawIp,
}

impl WriteLink {
    /// The link type it writes.
    pub fn link_type(self) -> LinkType {
        match self {
            WriteLink::Ethernet { .. } => LinkType::Ethernet,
            WriteLink::RawIp => LinkType::RawIp,
        }
    }
}

/// Why a capture could not be written.
#[derive(Debug, thiserror::Error)]
pub enum PcapWriteError {
    /// Writing failed.
    #[error("cannot write the capture: {0}")]
    Io(#[source] std::io::Error),
    /// A packet could not be turned into bytes.
    #[error("frame {frame}: {source}")]
    Emit {
        /// 1-based number of the record that failed.
        frame: usize,
        /// Why.
        #[source]
        source: EmitError,
    },
    /// The time does not fit a pcap timestamp (seconds since the epoch beyond 2^32, the year
    /// 2106).
    #[error("frame {frame}: time {at_ns} ns after the epoch does not fit a pcap timestamp (32-bit seconds)")]
    TimeOverflow {
        /// 1-based number of the record that failed.
        frame: usize,
        /// The epoch time in nanoseconds.
        at_ns: u128,
    },
    /// A raw frame is longer than the snap length.
    #[error("frame {frame}: {len} bytes is more than the snap length {WRITE_SNAPLEN}")]
    TooLong {
        /// 1-based number of the record that failed.
        frame: usize,
        /// Its length.
        len: usize,
    },
}

fn write_err(e: PcapError) -> PcapWriteError {
    match e {
        PcapError::IoError(io) => PcapWriteError::Io(io),
        other => PcapWriteError::Io(std::io::Error::other(other.to_string())),
    }
}

/// Writes packets at simulated times as a pcap file (see the module documentation).
///
/// The file header is written by `pcap-file`; each record (little-endian, nanosecond
/// timestamps, as that header says) is written here, its 16-byte header and its bytes in two
/// writes.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    inner: W,
    link: WriteLink,
    start_epoch_ns: u64,
    frames: usize,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header to `out`; [`SimTime::ZERO`] is written as the epoch.
    pub fn new(out: W, link: WriteLink) -> Result<PcapWriter<W>, PcapWriteError> {
        PcapWriter::with_start(out, link, 0)
    }

    /// Like [`PcapWriter::new`], with [`SimTime::ZERO`] written as `start_epoch_ns`
    /// nanoseconds after the Unix epoch.
    pub fn with_start(
        out: W,
        link: WriteLink,
        start_epoch_ns: u64,
    ) -> Result<PcapWriter<W>, PcapWriteError> {
        let header = PcapHeader {
            version_major: 2,
            version_minor: 4,
            ts_correction: 0,
            ts_accuracy: 0,
            snaplen: WRITE_SNAPLEN,
            datalink: DataLink::from(link.link_type().linktype()),
            ts_resolution: TsResolution::NanoSecond,
            endianness: Endianness::Little,
        };
        let inner = pcap_file::pcap::PcapWriter::with_header(out, header)
            .map_err(write_err)?
            .into_writer();
        Ok(PcapWriter {
            inner,
            link,
            start_epoch_ns,
            frames: 0,
        })
    }

    /// Appends `packet`, captured at `at`.
    pub fn write_packet(&mut self, at: SimTime, packet: &Packet) -> Result<(), PcapWriteError> {
        let frame = self.frames + 1;
        let bytes = match self.link {
            WriteLink::Ethernet { src_mac, dst_mac } => {
                wire::emit_ethernet(packet, src_mac, dst_mac)
            }
            WriteLink::RawIp => wire::emit_ip(packet),
        }
        .map_err(|source| PcapWriteError::Emit { frame, source })?;
        self.write_frame(at, &bytes)
    }

    /// Appends an already encoded frame of this writer's link type, captured at `at`.
    pub fn write_frame(&mut self, at: SimTime, frame_bytes: &[u8]) -> Result<(), PcapWriteError> {
        self.write_frame_snapped(at, frame_bytes, frame_bytes.len() as u32)
    }

    /// Appends a frame of this writer's link type captured at `at`, of which `frame_bytes`
    /// were captured out of `orig_len` on the wire (a record cut by the snap length when
    /// `orig_len` is larger).
    pub fn write_frame_snapped(
        &mut self,
        at: SimTime,
        frame_bytes: &[u8],
        orig_len: u32,
    ) -> Result<(), PcapWriteError> {
        let frame = self.frames + 1;
        if frame_bytes.len() > WRITE_SNAPLEN as usize {
            return Err(PcapWriteError::TooLong {
                frame,
                len: frame_bytes.len(),
            });
        }
        let overflow = || PcapWriteError::TimeOverflow {
            frame,
            at_ns: u128::from(self.start_epoch_ns) + u128::from(at.as_nanos()),
        };
        let ns = self
            .start_epoch_ns
            .checked_add(at.as_nanos())
            .ok_or_else(overflow)?;
        let secs = u32::try_from(ns / NANOS_PER_SEC).map_err(|_| overflow())?;
        let nanos = (ns % NANOS_PER_SEC) as u32;
        let incl_len = frame_bytes.len() as u32;
        let orig_len = orig_len.max(incl_len);
        // The record header (pcap-savefile(5)): seconds, nanoseconds, captured length, length
        // on the wire.
        let mut head = [0u8; 16];
        for (i, v) in [secs, nanos, incl_len, orig_len].into_iter().enumerate() {
            head[4 * i..4 * i + 4].copy_from_slice(&v.to_le_bytes());
        }
        self.inner
            .write_all(&head)
            .and_then(|()| self.inner.write_all(frame_bytes))
            .map_err(PcapWriteError::Io)?;
        self.frames = frame;
        Ok(())
    }

    /// Records written so far.
    pub fn frames(&self) -> usize {
        self.frames
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.inner
    }
}

/// The bytes of a pcap file holding `records` (see [`PcapWriter`]).
pub fn to_bytes<'a>(
    link: WriteLink,
    records: impl IntoIterator<Item = (SimTime, &'a Packet)>,
) -> Result<Vec<u8>, PcapWriteError> {
    let mut w = PcapWriter::new(Vec::new(), link)?;
    for (at, p) in records {
        w.write_packet(at, p)?;
    }
    Ok(w.into_inner())
}

/// Writes `records` to a pcap file at `path` (see [`PcapWriter`]).
pub fn write_file<'a>(
    path: impl AsRef<Path>,
    link: WriteLink,
    records: impl IntoIterator<Item = (SimTime, &'a Packet)>,
) -> Result<(), PcapWriteError> {
    let bytes = to_bytes(link, records)?;
    std::fs::write(path, bytes).map_err(PcapWriteError::Io)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::{icmp, TcpFlags, L4};
    use proptest::prelude::*;

    fn sa(s: &str) -> std::net::SocketAddr {
        s.parse().unwrap()
    }

    const ETH: WriteLink = WriteLink::Ethernet {
        src_mac: [2, 0, 0, 0, 0, 1],
        dst_mac: [2, 0, 0, 0, 0, 2],
    };

    fn sample() -> Vec<(SimTime, Packet)> {
        let q = Packet::udp(sa("10.244.2.9:40000"), sa("10.96.0.10:53")).tagged(1);
        let a = Packet::udp(sa("10.96.0.10:53"), sa("10.244.2.9:40000")).tagged(1);
        let syn = Packet::tcp(sa("[fd00::1]:5555"), sa("[fd00::2]:80"), TcpFlags::SYN);
        let err = Packet::icmp_error(q.dst, &q, icmp::DEST_UNREACH, icmp::CODE_PORT_UNREACH);
        vec![
            (SimTime::from_millis(0), q),
            (SimTime::from_nanos(1_500_000_123), a),
            (SimTime::from_secs(2), syn),
            (SimTime::from_secs(31), err),
        ]
    }

    #[test]
    fn write_then_read_round_trips() {
        for link in [ETH, WriteLink::RawIp] {
            let recs = sample();
            let bytes = to_bytes(link, recs.iter().map(|(t, p)| (*t, p))).unwrap();
            let cap = read(&bytes, &ReadOptions::default()).unwrap();
            assert_eq!(cap.format, CaptureFormat::Pcap);
            assert_eq!(cap.records.len(), recs.len());
            assert!(cap.skipped.is_empty());
            for (i, (r, (t, p))) in cap.records.iter().zip(&recs).enumerate() {
                assert_eq!(r.frame, i + 1);
                assert_eq!(r.time, *t);
                assert_eq!(r.packet, *p);
                assert_eq!(r.link, link.link_type());
                assert_eq!(r.captured_len, r.orig_len);
            }
        }
    }

    #[test]
    fn written_bytes_are_deterministic_and_as_specified() {
        let recs = sample();
        let a = to_bytes(ETH, recs.iter().map(|(t, p)| (*t, p))).unwrap();
        let b = to_bytes(ETH, recs.iter().map(|(t, p)| (*t, p))).unwrap();
        assert_eq!(a, b);
        // Little-endian nanosecond magic, version 2.4, snaplen 262144, LINKTYPE_ETHERNET.
        assert_eq!(&a[0..4], &[0x4d, 0x3c, 0xb2, 0xa1]);
        assert_eq!(&a[4..8], &[2, 0, 4, 0]);
        assert_eq!(u32::from_le_bytes(a[16..20].try_into().unwrap()), 262_144);
        assert_eq!(u32::from_le_bytes(a[20..24].try_into().unwrap()), 1);
        // Second record at 1.500000123 s.
        let first_len = u32::from_le_bytes(a[32..36].try_into().unwrap()) as usize;
        let r2 = 24 + 16 + first_len;
        assert_eq!(u32::from_le_bytes(a[r2..r2 + 4].try_into().unwrap()), 1);
        assert_eq!(
            u32::from_le_bytes(a[r2 + 4..r2 + 8].try_into().unwrap()),
            500_000_123
        );
        // A start time shifts every timestamp, and relative reading undoes it.
        let mut w =
            PcapWriter::with_start(Vec::new(), WriteLink::RawIp, 1_700_000_000 * NANOS_PER_SEC)
                .unwrap();
        for (t, p) in &recs {
            w.write_packet(*t, p).unwrap();
        }
        assert_eq!(w.frames(), 4);
        let bytes = w.into_inner();
        let rel = read(&bytes, &ReadOptions::default()).unwrap();
        assert_eq!(rel.first_epoch_ns, 1_700_000_000 * NANOS_PER_SEC);
        assert_eq!(rel.records[1].time, SimTime::from_nanos(1_500_000_123));
        let abs = read(
            &bytes,
            &ReadOptions {
                timestamps: Timestamps::Absolute,
                ..ReadOptions::default()
            },
        )
        .unwrap();
        assert_eq!(
            abs.records[1].time,
            SimTime::from_nanos(1_700_000_001_500_000_123)
        );
    }

    /// A classic microsecond pcap, big-endian, raw IP, built field by field.
    fn hand_built_be_usec() -> Vec<u8> {
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b2c3d4u32.to_be_bytes());
        f.extend_from_slice(&2u16.to_be_bytes());
        f.extend_from_slice(&4u16.to_be_bytes());
        f.extend_from_slice(&0i32.to_be_bytes());
        f.extend_from_slice(&0u32.to_be_bytes());
        f.extend_from_slice(&65535u32.to_be_bytes());
        f.extend_from_slice(&101u32.to_be_bytes());
        // An IPv4/UDP datagram 10.0.0.1:1234 -> 10.0.0.2:53, TTL 63, 4-byte payload "abcd".
        let ip: [u8; 32] = [
            0x45, 0x00, 0x00, 0x20, 0x12, 0x34, 0x00, 0x00, 0x3f, 0x11, 0x00, 0x00, 10, 0, 0, 1,
            10, 0, 0, 2, 0x04, 0xd2, 0x00, 0x35, 0x00, 0x0c, 0x00, 0x00, b'a', b'b', b'c', b'd',
        ];
        for (sec, usec) in [(1_000u32, 999_999u32), (1_002, 5)] {
            f.extend_from_slice(&sec.to_be_bytes());
            f.extend_from_slice(&usec.to_be_bytes());
            f.extend_from_slice(&32u32.to_be_bytes());
            f.extend_from_slice(&32u32.to_be_bytes());
            f.extend_from_slice(&ip);
        }
        f
    }

    #[test]
    fn hand_built_fixture_reads() {
        let cap = read(&hand_built_be_usec(), &ReadOptions::default()).unwrap();
        assert_eq!(cap.records.len(), 2);
        assert_eq!(cap.first_epoch_ns, 1_000_999_999_000);
        let r = &cap.records[0];
        assert_eq!(r.time, SimTime::ZERO);
        assert_eq!(r.packet.to_string(), "udp 10.0.0.1:1234 -> 10.0.0.2:53");
        assert_eq!(r.packet.len, 32);
        assert_eq!(r.packet.ttl, 63);
        assert_eq!(r.packet.tag, 0, "4 bytes of payload carry no tag");
        // 1002.000005 - 1000.999999 = 1.000006 s.
        assert_eq!(cap.records[1].time, SimTime::from_nanos(1_000_006_000));
    }

    #[test]
    fn truncated_files_are_errors_naming_frame_and_offset() {
        let f = hand_built_be_usec();
        // Every prefix either reads (at a record boundary) or fails; never panics.
        for n in 0..f.len() {
            let r = read(&f[..n], &ReadOptions::default());
            if n == 24 || n == 24 + 48 {
                assert!(r.is_ok(), "prefix {n}");
            } else {
                assert!(r.is_err(), "prefix {n}");
            }
        }
        let e = read(&f[..24 + 48 + 20], &ReadOptions::default()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "capture: the file ends inside frame 2 at byte offset 72: need 48 bytes, only 20 left"
        );
        let e = read(&f[..10], &ReadOptions::default()).unwrap_err();
        assert!(e.to_string().contains("file header"), "{e}");
    }

    #[test]
    fn a_file_read_in_place_reads_as_its_bytes_do() {
        let dir = std::env::temp_dir().join(format!("nfsim-pcap-place-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for (name, link) in [("eth.pcap", ETH), ("raw.pcap", WriteLink::RawIp)] {
            let path = dir.join(name);
            let recs = sample();
            write_file(&path, link, recs.iter().map(|(t, p)| (*t, p))).unwrap();
            let opts = ReadOptions::default();
            let (a, b) = (
                read(&std::fs::read(&path).unwrap(), &opts).unwrap(),
                read_file(&path, &opts).unwrap(),
            );
            assert_eq!(a.records.len(), 4);
            assert_eq!(
                b.ip_data.len(),
                std::fs::metadata(&path).unwrap().len() as usize
            );
            for (x, y) in a.records.iter().zip(&b.records) {
                assert_eq!((x.frame, x.time, &x.packet), (y.frame, y.time, &y.packet));
                assert_eq!(a.ip_bytes(x), b.ip_bytes(y), "{name} frame {}", x.frame);
                assert_eq!(a.ip_bytes(x), &wire::emit_ip(&x.packet).unwrap()[..]);
            }
        }
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Frames are parsed as the framing is read, but a framing error later in the file is
    /// still the one reported, as when every frame was parsed after the framing.
    #[test]
    fn a_framing_error_comes_before_a_frame_that_does_not_parse() {
        let recs = sample();
        let mut f = to_bytes(WriteLink::RawIp, recs.iter().map(|(t, p)| (*t, p))).unwrap();
        // Frame 1's IP version nibble: 0, which no IP packet has.
        f[24 + 16] = 0;
        let e = read(&f, &ReadOptions::default()).unwrap_err();
        assert!(
            matches!(
                e.kind,
                PcapErrorKind::Packet {
                    frame: 1,
                    data_offset: 40,
                    ..
                }
            ),
            "{e}"
        );
        f.truncate(f.len() - 3);
        let e = read(&f, &ReadOptions::default()).unwrap_err();
        assert!(
            matches!(e.kind, PcapErrorKind::TruncatedRecord { frame: 4, .. }),
            "{e}"
        );
    }

    #[test]
    fn errors_name_the_file() {
        let dir = std::env::temp_dir().join(format!("nfsim-pcap-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("cut.pcap");
        let f = hand_built_be_usec();
        std::fs::write(&path, &f[..50]).unwrap();
        let e = read_file(&path, &ReadOptions::default()).unwrap_err();
        assert!(
            e.to_string().starts_with(&format!("{}: ", path.display())),
            "{e}"
        );
        assert!(matches!(
            e.kind,
            PcapErrorKind::TruncatedRecord {
                frame: 1,
                offset: 24,
                ..
            }
        ));
        let missing = read_file(dir.join("nope.pcap"), &ReadOptions::default()).unwrap_err();
        assert!(matches!(missing.kind, PcapErrorKind::Io(_)));
        let good = dir.join("good.pcap");
        let recs = sample();
        write_file(&good, WriteLink::RawIp, recs.iter().map(|(t, p)| (*t, p))).unwrap();
        assert_eq!(
            read_file(&good, &ReadOptions::default())
                .unwrap()
                .records
                .len(),
            4
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn bad_packets_and_link_types_are_errors() {
        let mut f = hand_built_be_usec();
        // Break the first packet's IHL: the error names frame 1, its data offset (40) and the
        // offset inside the frame.
        f[40] = 0x43;
        let e = read(&f, &ReadOptions::default()).unwrap_err();
        assert!(
            e.to_string().starts_with(
                "capture: frame 1 (data at byte offset 40): malformed IPv4 header at byte 0:"
            ),
            "{e}"
        );
        let mut f = hand_built_be_usec();
        f[20..24].copy_from_slice(&147u32.to_be_bytes()); // LINKTYPE_USER0
        let e = read(&f, &ReadOptions::default()).unwrap_err();
        assert!(matches!(
            e.kind,
            PcapErrorKind::UnsupportedLinkType {
                linktype: 147,
                interface: None
            }
        ));
        let e = read(b"GIF89a-not-a-capture....", &ReadOptions::default()).unwrap_err();
        assert!(
            e.to_string()
                .contains("not a pcap or pcapng file: it starts with 47494638"),
            "{e}"
        );
        let mut f = hand_built_be_usec();
        f[28..32].copy_from_slice(&2_000_000u32.to_be_bytes()); // usec >= 10^6
        let e = read(&f, &ReadOptions::default()).unwrap_err();
        assert!(
            matches!(
                e.kind,
                PcapErrorKind::BadRecord {
                    frame: 1,
                    offset: 24,
                    ..
                }
            ),
            "{e}"
        );
    }

    #[test]
    fn non_ip_frames_are_skipped_or_refused() {
        let q = Packet::udp(sa("10.0.0.1:1"), sa("10.0.0.2:2"));
        let mut w = PcapWriter::new(Vec::new(), ETH).unwrap();
        let mut arp = vec![0xff; 6];
        arp.extend_from_slice(&[2, 0, 0, 0, 0, 1, 0x08, 0x06]);
        arp.extend_from_slice(&[0; 28]);
        w.write_frame(SimTime::ZERO, &arp).unwrap();
        w.write_packet(SimTime::from_secs(1), &q).unwrap();
        let bytes = w.into_inner();
        let cap = read(&bytes, &ReadOptions::default()).unwrap();
        assert_eq!(cap.records.len(), 1);
        assert_eq!(cap.records[0].frame, 2);
        assert_eq!(
            cap.records[0].time,
            SimTime::from_secs(1),
            "relative to the earliest record, skipped ones included"
        );
        assert_eq!(
            cap.skipped,
            vec![Skipped {
                frame: 1,
                what: "ether type 0x0806 (ARP)".into()
            }]
        );
        let strict = ReadOptions {
            skip_non_ip: false,
            ..ReadOptions::default()
        };
        assert!(matches!(
            read(&bytes, &strict).unwrap_err().kind,
            PcapErrorKind::Packet {
                frame: 1,
                data_offset: 40,
                ..
            }
        ));
    }

    #[test]
    fn snapped_records_keep_the_ip_length() {
        let mut p = Packet::udp(sa("10.0.0.1:1"), sa("10.0.0.2:2"));
        p.len = 1000;
        let ip = wire::emit_ip(&p).unwrap();
        // A record holding 64 of the 1000 bytes, orig_len 1000.
        let mut f = Vec::new();
        f.extend_from_slice(&0xa1b23c4du32.to_le_bytes());
        f.extend_from_slice(&[2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        f.extend_from_slice(&64u32.to_le_bytes());
        f.extend_from_slice(&101u32.to_le_bytes());
        f.extend_from_slice(&[0; 8]);
        f.extend_from_slice(&64u32.to_le_bytes());
        f.extend_from_slice(&1000u32.to_le_bytes());
        f.extend_from_slice(&ip[..64]);
        let cap = read(&f, &ReadOptions::default()).unwrap();
        assert_eq!(cap.records[0].packet.len, 1000);
        assert_eq!(cap.records[0].captured_len, 64);
        assert_eq!(cap.records[0].orig_len, 1000);
        // The same bytes claiming to be complete are a truncated packet.
        f[32..36].copy_from_slice(&64u32.to_le_bytes());
        f[36..40].copy_from_slice(&64u32.to_le_bytes());
        assert!(matches!(
            read(&f, &ReadOptions::default()).unwrap_err().kind,
            PcapErrorKind::Packet { .. }
        ));
    }

    /// A pcapng file (little-endian): section header, one Linux SLL2 interface with
    /// nanosecond resolution, one Ethernet interface with the default microsecond resolution,
    /// an enhanced packet on each, and a simple packet (interface 0).
    fn hand_built_pcapng() -> Vec<u8> {
        fn block(t: u32, body: &[u8]) -> Vec<u8> {
            let pad = (4 - body.len() % 4) % 4;
            let len = (12 + body.len() + pad) as u32;
            let mut b = Vec::new();
            b.extend_from_slice(&t.to_le_bytes());
            b.extend_from_slice(&len.to_le_bytes());
            b.extend_from_slice(body);
            b.extend_from_slice(&vec![0; pad]);
            b.extend_from_slice(&len.to_le_bytes());
            b
        }
        let mut shb = Vec::new();
        shb.extend_from_slice(&0x1a2b3c4du32.to_le_bytes());
        shb.extend_from_slice(&1u16.to_le_bytes());
        shb.extend_from_slice(&0u16.to_le_bytes());
        shb.extend_from_slice(&(-1i64).to_le_bytes());
        let mut idb0 = Vec::new();
        idb0.extend_from_slice(&276u16.to_le_bytes());
        idb0.extend_from_slice(&0u16.to_le_bytes());
        idb0.extend_from_slice(&0u32.to_le_bytes());
        // if_tsresol = 9, then opt_endofopt.
        idb0.extend_from_slice(&[9, 0, 1, 0, 9, 0, 0, 0, 0, 0, 0, 0]);
        let mut idb1 = Vec::new();
        idb1.extend_from_slice(&1u16.to_le_bytes());
        idb1.extend_from_slice(&0u16.to_le_bytes());
        idb1.extend_from_slice(&0u32.to_le_bytes());
        let p = Packet::udp(sa("10.0.0.1:40000"), sa("10.0.0.2:53")).tagged(7);
        let ip = wire::emit_ip(&p).unwrap();
        let mut sll2 = vec![
            0x08, 0x00, 0, 0, 0, 0, 0, 3, 0, 1, 4, 6, 2, 0, 0, 0, 0, 9, 0, 0,
        ];
        sll2.extend_from_slice(&ip);
        let eth = wire::emit_ethernet(&p, [2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]).unwrap();
        let epb = |iface: u32, ts: u64, data: &[u8]| {
            let mut b = Vec::new();
            b.extend_from_slice(&iface.to_le_bytes());
            b.extend_from_slice(&((ts >> 32) as u32).to_le_bytes());
            b.extend_from_slice(&(ts as u32).to_le_bytes());
            b.extend_from_slice(&(data.len() as u32).to_le_bytes());
            b.extend_from_slice(&(data.len() as u32).to_le_bytes());
            b.extend_from_slice(data);
            b.extend_from_slice(&vec![0; (4 - data.len() % 4) % 4]);
            b
        };
        let mut spb = Vec::new();
        spb.extend_from_slice(&(sll2.len() as u32).to_le_bytes());
        spb.extend_from_slice(&sll2);
        let mut f = Vec::new();
        f.extend(block(0x0a0d0d0a, &shb));
        f.extend(block(1, &idb0));
        f.extend(block(1, &idb1));
        // 10.000000001 s in nanoseconds on interface 0; 12.5 s in microseconds on interface 1.
        f.extend(block(6, &epb(0, 10_000_000_001, &sll2)));
        f.extend(block(6, &epb(1, 12_500_000, &eth)));
        f.extend(block(3, &spb));
        f
    }

    #[test]
    fn pcapng_with_two_interfaces() {
        let cap = read(&hand_built_pcapng(), &ReadOptions::default()).unwrap();
        assert_eq!(cap.format, CaptureFormat::PcapNg);
        assert_eq!(cap.records.len(), 3);
        assert_eq!(cap.first_epoch_ns, 10_000_000_001);
        let r: Vec<_> = cap
            .records
            .iter()
            .map(|r| (r.frame, r.time, r.link))
            .collect();
        assert_eq!(
            r,
            vec![
                (1, SimTime::ZERO, LinkType::LinuxSll2),
                (2, SimTime::from_nanos(2_499_999_999), LinkType::Ethernet),
                (3, SimTime::from_nanos(2_499_999_999), LinkType::LinuxSll2),
            ]
        );
        for rec in &cap.records {
            assert_eq!(rec.packet.to_string(), "udp 10.0.0.1:40000 -> 10.0.0.2:53");
            assert_eq!(rec.packet.tag, 7);
        }
        let f = hand_built_pcapng();
        for n in 0..f.len() {
            let _ = read(&f[..n], &ReadOptions::default());
        }
        let e = read(&f[..f.len() - 3], &ReadOptions::default()).unwrap_err();
        assert!(
            matches!(
                &e.kind,
                PcapErrorKind::TruncatedBlock { block, offset: 300, declared: 96, available: 93 }
                    if block.ends_with("of frame 3")
            ),
            "{e}"
        );
    }

    #[test]
    fn raw_ip_writes_ipv6_too() {
        let p = Packet::udp(sa("[fd00::1]:1"), sa("[fd00::2]:53"));
        let bytes = to_bytes(WriteLink::RawIp, [(SimTime::ZERO, &p)]).unwrap();
        assert_eq!(
            read(&bytes, &ReadOptions::default()).unwrap().records[0].packet,
            p
        );
        let mut bad = p;
        bad.len = 10;
        let e = to_bytes(
            WriteLink::RawIp,
            [(SimTime::ZERO, &p), (SimTime::ZERO, &bad)],
        )
        .unwrap_err();
        assert!(matches!(e, PcapWriteError::Emit { frame: 2, .. }), "{e}");
        let mut w = PcapWriter::new(Vec::new(), WriteLink::RawIp).unwrap();
        let e = w
            .write_packet(SimTime::from_secs(u64::from(u32::MAX) + 1), &p)
            .unwrap_err();
        assert!(
            matches!(e, PcapWriteError::TimeOverflow { frame: 1, .. }),
            "{e}"
        );
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]

        #[test]
        fn arbitrary_bytes_after_a_magic_never_panic(
            which in 0usize..5,
            tail in proptest::collection::vec(any::<u8>(), 0..200),
        ) {
            let magics: [&[u8]; 5] = [
                &[0xd4, 0xc3, 0xb2, 0xa1],
                &[0xa1, 0xb2, 0x3c, 0x4d],
                &[0x0a, 0x0d, 0x0d, 0x0a],
                &[0x0a, 0x0d, 0x0d, 0x0a, 28, 0, 0, 0, 0x4d, 0x3c, 0x2b, 0x1a],
                &[],
            ];
            let mut f = magics[which].to_vec();
            f.extend_from_slice(&tail);
            let _ = read(&f, &ReadOptions::default());
        }

        #[test]
        fn mutated_pcapng_never_panics(at in any::<prop::sample::Index>(), byte in any::<u8>()) {
            let mut f = hand_built_pcapng();
            let i = at.index(f.len());
            f[i] = byte;
            let _ = read(&f, &ReadOptions::default());
        }

        #[test]
        fn written_captures_read_back(times in proptest::collection::vec(0u64..10_000_000_000_000, 1..8)) {
            let mut times = times;
            times.sort();
            let p = Packet::tcp(sa("10.0.0.1:1"), sa("10.0.0.2:2"), TcpFlags::ACK);
            let recs: Vec<_> = times.iter().map(|&t| (SimTime::from_nanos(t), p)).collect();
            let bytes = to_bytes(ETH, recs.iter().map(|(t, p)| (*t, p))).unwrap();
            let cap = read(&bytes, &ReadOptions { timestamps: Timestamps::Absolute, ..ReadOptions::default() }).unwrap();
            let got: Vec<_> = cap.records.iter().map(|r| (r.time, r.packet)).collect();
            prop_assert_eq!(got, recs);
            let is_tcp = matches!(cap.records[0].packet.l4, L4::Tcp { .. });
            prop_assert!(is_tcp);
        }
    }
}
