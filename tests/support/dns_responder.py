"""A tiny DNS server for the resolver kernel-lab test: UDP and TCP on ADDR:53, answering
from a zone given as NAME=A_COUNT,AAAA_COUNT arguments. Unknown names get NXDOMAIN; UDP
answers past 512 octets (or the query's EDNS0 size) keep the records that fit and set TC.
Writes "ready" to the file named by its second argument once both sockets listen."""
import socket, struct, sys, threading

addr, ready = sys.argv[1], sys.argv[2]
zone = {}
for spec in sys.argv[3:]:
    name, counts = spec.split("=")
    a, aaaa = counts.split(",")
    zone[name.lower()] = (int(a), int(aaaa))


def question(m):
    i = 12
    labels = []
    while m[i]:
        labels.append(m[i + 1 : i + 1 + m[i]].decode())
        i += 1 + m[i]
    qtype = struct.unpack("!H", m[i + 1 : i + 3])[0]
    end = i + 5
    edns = None
    if struct.unpack("!H", m[10:12])[0] and m[end : end + 3] == b"\x00\x00\x29":
        edns = struct.unpack("!H", m[end + 3 : end + 5])[0]
    return ".".join(labels).lower(), qtype, m[12:end], edns


def answer(m, tcp):
    name, qtype, q, edns = question(m)
    entry = zone.get(name)
    rcode = 3 if entry is None else 0
    count = 0 if entry is None else {1: entry[0], 28: entry[1]}.get(qtype, 0)
    size = 4 if qtype == 1 else 16
    records = [
        b"\xc0\x0c" + struct.pack("!HHIH", qtype, 1, 5, size) + k.to_bytes(size, "big")
        for k in range(count)
    ]
    flags = 0x8480 | (m[2] & 1) << 8 | rcode
    limit = 65535 if tcp else max(512, edns or 0)
    while not tcp and 12 + len(q) + sum(map(len, records)) > limit:
        records.pop()
        flags |= 0x0200
    return m[:2] + struct.pack("!HHHHH", flags, 1, len(records), 0, 0) + q + b"".join(records)


def serve_tcp(s):
    while True:
        c, _ = s.accept()
        buf = b""
        while True:
            d = c.recv(4096)
            if not d:
                break
            buf += d
            while len(buf) >= 2 and len(buf) >= 2 + struct.unpack("!H", buf[:2])[0]:
                n = struct.unpack("!H", buf[:2])[0]
                r = answer(buf[2 : 2 + n], True)
                buf = buf[2 + n :]
                c.sendall(struct.pack("!H", len(r)) + r)
        c.close()


u = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
u.bind((addr, 53))
t = socket.socket()
t.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
t.bind((addr, 53))
t.listen(8)
threading.Thread(target=serve_tcp, args=(t,), daemon=True).start()
open(ready, "w").write("ready\n")
while True:
    m, peer = u.recvfrom(4096)
    u.sendto(answer(m, False), peer)
