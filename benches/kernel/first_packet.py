#!/usr/bin/env python3
"""The real kernel's cost of a new flow's first packet through kube-proxy's rules, in
iptables mode and in nftables mode, next to `benches/proxy_modes.rs`.

Not run by hand: `examples/kernel_first_packet.rs` writes kube-proxy's first full sync for
the Services and runs this script as `unshare -n python3 first_packet.py DIR MODE SERVICES N`
(`tests/kernel_first_packet.rs` runs it small, so it keeps working).

Loopback only. The namespace is private (`unshare -n`: no interface but `lo`), every address
here is in 127.0.0.0/8 and the script refuses any other: ClusterIPs 127.1.0.1 up, endpoints
127.2.0.2 up (port 8080), clients 127.3.x.y. `lo` gets 127.0.0.2/32 with scope global as well,
so that MASQUERADE has a source to pick (`nf_nat_masquerade_ipv4` asks `inet_select_addr` for
a scope-universe address; 127.0.0.1 has scope host). No route is added.

Each of the N datagrams is a locally generated UDP datagram (a raw socket, IP_HDRINCL) from a
new client tuple: the same clients, source ports and Service picks as the bench's
`first_packet`. Through the output hook, conntrack creates an entry, kube-proxy's nat output
chain DNATs it to one of the Service's endpoints (`KUBE-SERVICES` walked rule by rule in
iptables mode; the `service-ips` verdict map in nftables mode), marks it for masquerade (the
clients are outside the cluster CIDR 127.2.0.0/16), MASQUERADE rewrites its source to
127.0.0.2, the entry is confirmed, and the datagram is delivered on `lo` to a socket bound to
port 8080 that is never read (a full receive buffer drops silently). Mode `none` is the
baseline: conntrack on (one nft rule asking `ct state`), no kube-proxy rules, the same
datagrams sent straight to the endpoints: the syscall, this loop and the loopback delivery.

Prints one line: `MODE SERVICES N NS_PER_PACKET ENTRIES DNATTED MASQUERADED`, the wall-clock
time per datagram, then how many conntrack entries there are, how many were DNAT'd from a
ClusterIP to an endpoint and how many of those were masqueraded to 127.0.0.2.
"""
import ipaddress
import os
import shlex
import socket
import struct
import subprocess
import sys
import time

LOOPBACK = ipaddress.ip_network("127.0.0.0/8")
MASQ_SOURCE = "127.0.0.2"


def loopback(addr):
    if ipaddress.ip_address(addr) not in LOOPBACK:
        sys.exit(f"refusing {addr}: this script uses loopback addresses only")
    return addr


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


def cluster_ip(i):
    return str(ipaddress.ip_address("127.1.0.1") + i)


def endpoint(i, j):
    return str(ipaddress.ip_address("127.2.0.2") + 2 * i + j)


def main():
    if len(sys.argv) != 5:
        sys.exit(__doc__)
    d, mode, services, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    devices = sorted(name for _, name in socket.if_nameindex())
    if devices != ["lo"]:
        sys.exit("not in a fresh private network namespace (`unshare -n`): devices "
                 + " ".join(devices))
    sh("ip", "link", "set", "lo", "up")
    sh("ip", "address", "add", f"{loopback(MASQ_SOURCE)}/32", "dev", "lo", "scope", "global")
    if mode == "iptables":
        sh("iptables-restore", "--noflush", stdin=open(os.path.join(d, "rules")).read())
        for line in open(os.path.join(d, "jumps")):
            sh(*shlex.split(line))
    elif mode == "nftables":
        sh("nft", "-f", os.path.join(d, "rules"))
    elif mode == "none":
        sh("nft", "-f", "-", stdin="table inet baseline {\n"
           "  chain output { type filter hook output priority 0; ct state new counter; }\n"
           "}\n")
    else:
        sys.exit("MODE must be iptables, nftables or none")
    sink = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sink.bind(("0.0.0.0", 8080))
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    packets = []
    for i in range(n):
        # As `first_packet` in benches/proxy_modes.rs: no tuple repeats.
        pick = i * 7919 % 10000
        src = loopback(f"127.3.{1 + pick // 200}.{10 + pick % 200}")
        sport = 1024 + i // 10000 % 60000
        if mode == "none":
            dst, dport = loopback(endpoint(pick % services, 0)), 8080
        else:
            dst, dport = loopback(cluster_ip(pick % services)), 80
        packets.append((datagram(src, sport, dst, dport), dst))
    t = time.perf_counter()
    for p, dst in packets:
        raw.sendto(p, (dst, 0))
    dt = time.perf_counter() - t
    entries = dnatted = masqueraded = 0
    for line in sh("conntrack", "-L", "-p", "udp").splitlines():
        kv = [f.split("=", 1) for f in line.split() if "=" in f]
        src = [v for k, v in kv if k == "src"]
        dst = [v for k, v in kv if k == "dst"]
        if len(src) != 2 or len(dst) != 2:
            continue
        entries += 1
        orig_dst, reply_src, reply_dst = (ipaddress.ip_address(a) for a in
                                          (dst[0], src[1], dst[1]))
        if (orig_dst in ipaddress.ip_network("127.1.0.0/16")
                and reply_src in ipaddress.ip_network("127.2.0.0/16")):
            dnatted += 1
            if str(reply_dst) == MASQ_SOURCE:
                masqueraded += 1
    print(f"{mode} {services} {n} {dt / n * 1e9:.0f} {entries} {dnatted} {masqueraded}")


main()
