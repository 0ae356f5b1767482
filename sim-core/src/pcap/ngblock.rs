//! The framing of a pcapng block, checked before `pcap-file` parses it.
//!
//! Every pcapng block is `type (4) | length (4) | body | length (4)`, the length counting the
//! whole block, a multiple of 4 and at least 12 (pcapng specification, "General Block
//! Structure"). The section header block's byte-order magic (`1a2b3c4d`) at offset 8 sets the
//! byte order of every length in its section. Checking this here, in one place, makes each
//! error about a block's length say one thing: which block (its name and type number, and for
//! a packet block its frame), the byte offset where it starts, the length it declares and the
//! bytes the file has for it.

use super::PcapErrorKind;

/// The pcapng section header block's type (the same bytes in either byte order).
pub(super) const SHB: u32 = 0x0a0d0d0a;
const IDB: u32 = 1;
const PB: u32 = 2;
const SPB: u32 = 3;
const EPB: u32 = 6;

/// A block's name as the specification calls it, with its type number.
pub(super) fn block_name(block_type: u32) -> String {
    let name = match block_type {
        SHB => "section header block",
        IDB => "interface description block",
        PB => "packet block",
        SPB => "simple packet block",
        4 => "name resolution block",
        5 => "interface statistics block",
        EPB => "enhanced packet block",
        0xa => "decryption secrets block",
        0xbad | 0x4000_0bad => "custom block",
        _ => "block",
    };
    format!("pcapng {name} (type 0x{block_type:08x})")
}

/// Whether a block of this type holds a packet (and so counts as a frame).
pub(super) fn is_packet_block(block_type: u32) -> bool {
    matches!(block_type, PB | SPB | EPB)
}

/// The smallest length a block of this type can have: the 12 bytes of framing plus its fixed
/// fields.
fn min_len(block_type: u32) -> usize {
    match block_type {
        SHB => 28,
        IDB => 20,
        PB | EPB => 32,
        SPB => 16,
        _ => 12,
    }
}

/// A block whose framing is sound.
pub(super) struct Framed {
    /// Its type.
    pub(super) block_type: u32,
    /// Its total length, within the bytes present.
    pub(super) len: usize,
}

fn u32_at(b: &[u8], at: usize, big: bool) -> u32 {
    let a = [b[at], b[at + 1], b[at + 2], b[at + 3]];
    if big {
        u32::from_be_bytes(a)
    } else {
        u32::from_le_bytes(a)
    }
}

/// Checks the framing of the block that starts `rest`, at byte `offset` of the file. `big`:
/// the current section's byte order (a section header block brings its own). `frame`: the
/// frame number a packet block here would have.
pub(super) fn check(
    rest: &[u8],
    offset: usize,
    big: bool,
    frame: usize,
) -> Result<Framed, PcapErrorKind> {
    if rest.len() < 8 {
        return Err(PcapErrorKind::BadBlock {
            block: "pcapng block".to_string(),
            offset,
            reason: format!(
                "the file ends inside its header: a block starts with 8 bytes (type and length), only {} are left",
                rest.len()
            ),
        });
    }
    let block_type = u32_at(rest, 0, big);
    let mut name = block_name(block_type);
    if is_packet_block(block_type) {
        name.push_str(&format!(" of frame {frame}"));
    }
    let bad = |reason: String| PcapErrorKind::BadBlock {
        block: name.clone(),
        offset,
        reason,
    };
    let big = if block_type == SHB {
        if rest.len() < 12 {
            return Err(bad(format!(
                "the file ends {} bytes after its start, before its byte-order magic (bytes 8 to 11)",
                rest.len()
            )));
        }
        match u32_at(rest, 8, false) {
            0x1a2b_3c4d => false,
            0x4d3c_2b1a => true,
            m => {
                return Err(bad(format!(
                    "byte-order magic {m:08x} (expected 1a2b3c4d in either byte order)"
                )))
            }
        }
    } else {
        big
    };
    let len = u32_at(rest, 4, big) as usize;
    let min = min_len(block_type);
    if len < min {
        return Err(bad(format!(
            "its length field says {len} bytes, less than the {min} this block type needs"
        )));
    }
    if len % 4 != 0 {
        return Err(bad(format!(
            "its length field says {len} bytes, which is not a multiple of 4"
        )));
    }
    if len > rest.len() {
        return Err(PcapErrorKind::TruncatedBlock {
            block: name,
            offset,
            declared: len,
            available: rest.len(),
        });
    }
    let trailer = u32_at(rest, len - 4, big) as usize;
    if trailer != len {
        return Err(bad(format!(
            "its length field says {len} bytes at its start but {trailer} at its end (byte offset {})",
            offset + len - 4
        )));
    }
    if matches!(block_type, PB | EPB) {
        // Interface and timestamp (12 bytes), then the captured length at byte 20 of the block;
        // the data starts at byte 28, padded to 4, and the trailing length follows.
        let captured = u32_at(rest, 20, big) as usize;
        let room = len - 32;
        if captured.div_ceil(4) * 4 > room {
            return Err(bad(format!(
                "its captured length is {captured} bytes, but its length of {len} bytes leaves room for {room} bytes of packet data"
            )));
        }
    }
    Ok(Framed { block_type, len })
}

#[cfg(test)]
mod tests {
    use crate::pcap::{read, PcapErrorKind, ReadOptions};

    fn block(t: u32, body: &[u8], len: Option<u32>, trailer: Option<u32>) -> Vec<u8> {
        let pad = (4 - body.len() % 4) % 4;
        let l = (12 + body.len() + pad) as u32;
        let mut b = Vec::new();
        b.extend_from_slice(&t.to_le_bytes());
        b.extend_from_slice(&len.unwrap_or(l).to_le_bytes());
        b.extend_from_slice(body);
        b.extend_from_slice(&vec![0; pad]);
        b.extend_from_slice(&trailer.unwrap_or(l).to_le_bytes());
        b
    }

    /// A section header and one raw-IP interface: 48 bytes.
    fn head() -> Vec<u8> {
        let mut shb = Vec::new();
        shb.extend_from_slice(&0x1a2b3c4du32.to_le_bytes());
        shb.extend_from_slice(&[1, 0, 0, 0]);
        shb.extend_from_slice(&(-1i64).to_le_bytes());
        let mut f = block(super::SHB, &shb, None, None);
        f.extend(block(1, &[101, 0, 0, 0, 0, 0, 0, 0], None, None));
        f
    }

    /// An enhanced packet block body with `caplen` declared over `data`.
    fn epb(caplen: u32, data: &[u8]) -> Vec<u8> {
        let mut b = vec![0; 12];
        b.extend_from_slice(&caplen.to_le_bytes());
        b.extend_from_slice(&(data.len() as u32).to_le_bytes());
        b.extend_from_slice(data);
        b
    }

    fn err(bytes: &[u8]) -> String {
        let e = read(bytes, &ReadOptions::default()).unwrap_err();
        assert!(
            matches!(
                e.kind,
                PcapErrorKind::BadBlock { .. } | PcapErrorKind::TruncatedBlock { .. }
            ),
            "{e}"
        );
        e.to_string()
    }

    #[test]
    fn each_length_error_names_the_block_its_offset_and_both_lengths() {
        let ip = [0x45u8; 20];
        let mut f = head();
        f.extend(&block(6, &epb(20, &ip), None, None)[..30]);
        assert_eq!(
            err(&f),
            "capture: the file ends inside the pcapng enhanced packet block (type 0x00000006) of frame 1 at byte offset 48: its length field says 52 bytes, only 30 are left"
        );
        let mut f = head();
        f.extend(block(6, &epb(20, &ip), None, Some(56)));
        assert_eq!(
            err(&f),
            "capture: malformed pcapng enhanced packet block (type 0x00000006) of frame 1 at byte offset 48: its length field says 52 bytes at its start but 56 at its end (byte offset 96)"
        );
        let mut f = head();
        f.extend(block(6, &epb(200, &ip), None, None));
        assert_eq!(
            err(&f),
            "capture: malformed pcapng enhanced packet block (type 0x00000006) of frame 1 at byte offset 48: its captured length is 200 bytes, but its length of 52 bytes leaves room for 20 bytes of packet data"
        );
        let mut f = head();
        f.extend(block(6, &epb(20, &ip), Some(8), None));
        assert!(err(&f)
            .ends_with("its length field says 8 bytes, less than the 32 this block type needs"));
        let mut f = head();
        f.extend(block(6, &epb(20, &ip), Some(53), Some(53)));
        assert!(err(&f).ends_with("its length field says 53 bytes, which is not a multiple of 4"));
        let mut f = head();
        f.extend(&[6, 0, 0, 0, 1]);
        assert!(err(&f).contains("pcapng block at byte offset 48: the file ends inside its header: a block starts with 8 bytes (type and length), only 5 are left"));
        // The section header itself, declared longer than the file.
        let mut f = head();
        f[4] = 100;
        assert_eq!(
            err(&f[..28]),
            "capture: the file ends inside the pcapng section header block (type 0x0a0d0d0a) at byte offset 0: its length field says 100 bytes, only 28 are left"
        );
        let mut f = head();
        f[8] = 0x11;
        assert!(err(&f).contains("byte-order magic 1a2b3c11"));
        // A short interface description block is not a frame.
        let mut f = head();
        f.extend(block(1, &[1, 0], None, None));
        assert_eq!(
            err(&f),
            "capture: malformed pcapng interface description block (type 0x00000001) at byte offset 48: its length field says 16 bytes, less than the 20 this block type needs"
        );
    }

    #[test]
    fn a_big_endian_section_reads_its_lengths_big_endian() {
        let mut shb = Vec::new();
        shb.extend_from_slice(&0x1a2b3c4du32.to_be_bytes());
        shb.extend_from_slice(&[0, 1, 0, 0]);
        shb.extend_from_slice(&(-1i64).to_be_bytes());
        let mut f = Vec::new();
        f.extend_from_slice(&super::SHB.to_be_bytes());
        f.extend_from_slice(&28u32.to_be_bytes());
        f.extend_from_slice(&shb);
        f.extend_from_slice(&28u32.to_be_bytes());
        let cap = read(&f, &ReadOptions::default()).unwrap();
        assert!(cap.records.is_empty());
    }
}
