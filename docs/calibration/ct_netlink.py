"""The conntrack reconciler's kernel work, timed: run inside `unshare -n` as root.

python3 ct_netlink.py ENTRIES DELETES

Makes ENTRIES UDP conntrack entries on loopback (one datagram each from its own source
port to 127.0.0.1:9, with an nftables `ct state new` rule in output so that conntrack is
hooked in this namespace), then times, with ctnetlink on a NETLINK_NETFILTER socket:

- list: one IPCTNL_MSG_CT_GET dump of the IPv4 table (what ConntrackTableList does);
- each: DELETES entries deleted by their original tuple, one IPCTNL_MSG_CT_DELETE request
  and its ack at a time (kube-proxy's reconciler before kubernetes #135511);
- batched: DELETES other entries deleted with all requests in as few sendmsg calls as fit
  a 64 KiB buffer, acks read afterwards (the batched deletes after #135511).

Prints `entries listed list_ns deletes each_ns batched_ns`.
"""
import os
import socket
import struct
import subprocess
import sys
import time

NETLINK_NETFILTER = 12
NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_GET = 1
IPCTNL_MSG_CT_DELETE = 2
NLM_F_REQUEST, NLM_F_ACK, NLM_F_DUMP = 1, 4, 0x300
NLMSG_ERROR, NLMSG_DONE = 2, 3
NLA_F_NESTED = 0x8000
CTA_TUPLE_ORIG, CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 1, 2
CTA_IP_V4_SRC, CTA_IP_V4_DST = 1, 2
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3


def attr(kind, payload):
    a = struct.pack("=HH", 4 + len(payload), kind) + payload
    return a + b"\0" * (-len(a) % 4)


def msg(kind, flags, seq, body):
    nfgen = struct.pack("=BBH", socket.AF_INET, 0, 0)
    payload = nfgen + body
    return struct.pack("=IHHII", 16 + len(payload), kind, flags, seq, 0) + payload


def tuple_orig(sport):
    ip = attr(CTA_IP_V4_SRC, socket.inet_aton("127.0.0.1")) + attr(
        CTA_IP_V4_DST, socket.inet_aton("127.0.0.1")
    )
    proto = (
        attr(CTA_PROTO_NUM, struct.pack("B", 17))
        + attr(CTA_PROTO_SRC_PORT, struct.pack("!H", sport))
        + attr(CTA_PROTO_DST_PORT, struct.pack("!H", 9))
    )
    return attr(
        CTA_TUPLE_ORIG | NLA_F_NESTED,
        attr(CTA_TUPLE_IP | NLA_F_NESTED, ip) + attr(CTA_TUPLE_PROTO | NLA_F_NESTED, proto),
    )


def read_until(sock, want_acks=None):
    """Reads messages: a dump until NLMSG_DONE (returns the count), or `want_acks` acks."""
    n = 0
    while True:
        data = sock.recv(1 << 20)
        off = 0
        while off < len(data):
            length, kind = struct.unpack_from("=IH", data, off)
            if kind == NLMSG_DONE:
                return n
            if kind == NLMSG_ERROR:
                (err,) = struct.unpack_from("=i", data, off + 16)
                if err != 0:
                    sys.exit(f"ctnetlink error {err}")
            n += 1
            if want_acks is not None and n == want_acks:
                return n
            off += (length + 3) & ~3


def main():
    entries, deletes = int(sys.argv[1]), int(sys.argv[2])
    if 2 * deletes > entries:
        sys.exit("DELETES must be at most half of ENTRIES")
    subprocess.run(["ip", "link", "set", "lo", "up"], check=True)
    subprocess.run(
        ["nft", "add table ip t; add chain ip t o { type filter hook output priority 0 ; ct state new counter ; }"],
        check=True,
    )
    base = 10000
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    for i in range(entries):
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("127.0.0.1", base + i))
        s.sendto(b"x", ("127.0.0.1", 9))
        s.close()
    tx.close()
    with open("/proc/sys/net/netfilter/nf_conntrack_count") as f:
        count = int(f.read())
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 24)
    kind_get = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET
    kind_del = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_DELETE
    t = time.perf_counter_ns()
    sock.send(msg(kind_get, NLM_F_REQUEST | NLM_F_DUMP, 1, b""))
    listed = read_until(sock)
    list_ns = time.perf_counter_ns() - t
    # One request and its ack at a time.
    t = time.perf_counter_ns()
    for i in range(deletes):
        sock.send(msg(kind_del, NLM_F_REQUEST | NLM_F_ACK, 10 + i, tuple_orig(base + i)))
        read_until(sock, want_acks=1)
    each_ns = time.perf_counter_ns() - t
    # Batched: many requests per sendmsg, acks read after each buffer.
    reqs = [
        msg(kind_del, NLM_F_REQUEST | NLM_F_ACK, 10 + deletes + i, tuple_orig(base + deletes + i))
        for i in range(deletes)
    ]
    t = time.perf_counter_ns()
    i = 0
    while i < len(reqs):
        buf, k = b"", 0
        while i < len(reqs) and len(buf) + len(reqs[i]) <= 65536:
            buf += reqs[i]
            i += 1
            k += 1
        sock.send(buf)
        read_until(sock, want_acks=k)
    batched_ns = time.perf_counter_ns() - t
    with open("/proc/sys/net/netfilter/nf_conntrack_count") as f:
        left = int(f.read())
    if left != count - 2 * deletes:
        sys.exit(f"expected {count - 2 * deletes} entries left, found {left}")
    print(count, listed, list_ns, deletes, each_ns, batched_ns)


main()
