#!/usr/bin/env python3
"""The real kernel's cost of a new flow's first packet through kube-proxy's rules, in
iptables mode and in nftables mode, for comparison with `benches/proxy_modes.rs`.

    cargo run --release --example proxy_payload -- iptables 10000 /tmp/kp
    cargo run --release --example proxy_payload -- nftables 10000 /tmp/kp
    sudo unshare -n python3 benches/kernel/first_packet.py /tmp/kp iptables [N]
    sudo unshare -n python3 benches/kernel/first_packet.py /tmp/kp nftables [N]

Run it in a private network namespace (`unshare -n`): it brings `lo` up, routes the
Services' 10.96.0.0/16 to `lo`, makes the endpoints' 10.244.0.0/16 local (a `local` route,
as 127.0.0.0/8 is) and loads the rules; nothing leaves the namespace. Then it sends N UDP
datagrams (default 20,000) through a raw socket, each from a new source port (a new flow)
of a host-network client 172.18.x.y to a Service `10.96.a.b:80` picked as the bench picks
it: conntrack creates an entry, the nat OUTPUT chains DNAT it to an endpoint, KUBE-MARK-MASQ
/ mark-for-masquerade and MASQUERADE rewrite its source, the entry is confirmed, and the
datagram is delivered on `lo` to a socket bound to port 8080 that is never read (a full
receive buffer drops silently). It prints the wall-clock time per datagram: the syscall and
the loopback delivery are in it, the same in both modes.
"""
import os
import socket
import struct
import subprocess
import sys
import time


def sh(*args, stdin=None):
    r = subprocess.run(args, input=stdin, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def datagram(src, sport, dst, dport):
    payload = b"q"
    udp_len = 8 + len(payload)
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + udp_len, 0, 0x4000, 64, 17, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", checksum(ip)) + ip[12:]
    # UDP checksum 0: none (allowed over IPv4).
    return ip + struct.pack("!HHHH", sport, dport, udp_len, 0) + payload


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    d, mode = sys.argv[1], sys.argv[2]
    n = int(sys.argv[3]) if len(sys.argv) > 3 else 20000
    services = None
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "route", "add", "10.96.0.0/16", "dev", "lo")
    sh("ip", "route", "add", "local", "10.244.0.0/16", "dev", "lo", "table", "local")
    if mode == "iptables":
        text = open(os.path.join(d, "iptables.rules")).read()
        sh("iptables-restore", "--noflush", stdin=text)
        for line in open(os.path.join(d, "iptables.jumps")):
            # `iptables -t T -I CHAIN args…` with quoted comments: let the shell split it.
            sh("sh", "-c", line.strip())
        services = text.count("-j KUBE-SVC-") - text.count(":KUBE-SVC-")
    elif mode == "nftables":
        text = open(os.path.join(d, "nftables.rules")).read()
        sh("nft", "-f", "-", stdin=text)
        services = text.count("add chain ip kube-proxy service-")
    else:
        sys.exit("mode must be iptables or nftables")
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("0.0.0.0", 8080))
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    packets = []
    for i in range(n):
        pick = i * 7919 % 10000
        src = f"172.18.{1 + pick // 200}.{10 + pick % 200}"
        sport = 1024 + i // 10000 % 60000
        svc = pick % services + 1
        dst = f"10.96.{svc >> 8}.{svc & 255}"
        packets.append((datagram(src, sport, dst, 80), dst))
    t = time.perf_counter()
    for p, dst in packets:
        raw.sendto(p, (dst, 0))
    dt = time.perf_counter() - t
    entries = sh("conntrack", "-C").strip()
    print(f"{mode}: {services} services, {n} new flows, {dt / n * 1e6:.2f} µs per first packet "
          f"({entries} conntrack entries)")


main()
