//! `clients[].pcap`: a capture read at load time into the packets a pod or host sends.

use super::load::Ctx;
use super::model::{PcapClientDef, PcapPacket, Placement};
use super::schema::PcapClientDoc;
use super::ScenarioError;
use serde_saphyr::Spanned;
use sim_core::pcap::{self, ReadOptions};
use sim_core::{SimDuration, SimTime, L4};
use std::path::Path;

/// The bytes after the layer-4 header of the IP packet `ip` (as much as was captured); empty
/// for an ICMP error (its quote is rebuilt from the packet) and a later fragment.
fn l4_payload(ip: &[u8], l4: &L4) -> Vec<u8> {
    let Some(&first) = ip.first() else {
        return Vec::new();
    };
    let ihl = usize::from(first & 0x0f) * 4;
    let l4_len = match l4 {
        L4::Tcp { .. } => ip
            .get(ihl + 12)
            .map(|b| usize::from(b >> 4) * 4)
            .unwrap_or(20),
        L4::Udp { .. } | L4::Icmp { .. } => 8,
        L4::Sctp { .. } => 12,
        L4::Other { .. } => 0,
    };
    if matches!(
        l4,
        L4::Icmp {
            body: sim_core::IcmpBody::Error(_),
            ..
        }
    ) {
        return Vec::new();
    }
    ip.get(ihl + l4_len..).unwrap_or(&[]).to_vec()
}

/// Reads `doc.file` (relative to the scenario file's directory) into a pcap client named
/// `name` sending from `placement`: its IPv4 packets at `offset + (time − first time)`.
/// A file that cannot be read, is not a capture, or holds no IPv4 packet is an error at
/// `file:`'s line and column, naming the frame and byte offset where the capture is wrong.
pub(super) fn load(
    ctx: &Ctx,
    name: &str,
    doc: &Spanned<PcapClientDoc>,
    placement: Placement,
    duration: SimDuration,
) -> Result<PcapClientDef, ScenarioError> {
    let d = &doc.value;
    let base = Path::new(ctx.file()).parent().unwrap_or(Path::new(""));
    let path = base.join(&d.file.value);
    let capture = pcap::read_file(&path, &ReadOptions::default())
        .map_err(|e| ctx.err(&d.file, format!("cannot use the capture: {e}")))?;
    let offset = match &d.offset {
        Some(o) => {
            if o.value.get() > duration {
                return Err(ctx.err(
                    o,
                    format!(
                        "offset {} is after the end of the run ({duration}): expected at most {duration}",
                        o.value
                    ),
                ));
            }
            o.value.get()
        }
        None => SimDuration::ZERO,
    };
    let mut packets = Vec::new();
    let mut skipped = capture.skipped.len();
    for r in &capture.records {
        if !r.packet.is_ipv4() {
            skipped += 1;
            continue;
        }
        let mut packet = r.packet;
        packet.tag = 0;
        packets.push(PcapPacket {
            at: SimTime::ZERO + offset + (r.time - SimTime::ZERO),
            frame: r.frame,
            payload: l4_payload(capture.ip_bytes(r), &packet.l4),
            packet,
        });
    }
    if packets.is_empty() {
        return Err(ctx.err(
            &d.file,
            format!(
                "{} holds no IPv4 packet ({} frames): a pcap client sends a capture's IPv4 packets",
                path.display(),
                capture.records.len() + capture.skipped.len()
            ),
        ));
    }
    Ok(PcapClientDef {
        name: name.to_string(),
        file: d.file.value.clone(),
        placement,
        packets: std::sync::Arc::new(packets),
        skipped,
    })
}
