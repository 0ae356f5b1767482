"""Driver of the nfsim kernel lab: runs inside a private network namespace (`unshare -n`).

tests/support/kernel.rs starts `unshare -n python3 -c <this file>` and writes a JSON scenario
on stdin: {"setup": {...}, "steps": [{"op": ..., ...}, ...]}. This script sets the namespace up
(lo up, addresses, sysctls, conntrack turned on, `conntrack -E` listening, the initial
iptables-restore), runs the steps in order with real sockets on loopback addresses, and prints
one JSON object on stdout: per-step results, what the servers saw, the conntrack events and the
captured frames. It never touches anything outside the namespace: the namespace has no
interface but lo.

Servers answer every UDP datagram and every TCP read with b"<server address>|<what was read>",
so a client knows which endpoint answered (after DNAT) and what the server saw as the peer
(after SNAT). All waiting happens in pump(), a select() loop that serves every socket, so
servers answer while the client waits.
"""

import ctypes
import fcntl
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
import time
import traceback

SPEC = json.load(sys.stdin)
SETUP = SPEC["setup"]
T0 = time.monotonic()
W0 = time.time()

# The flow used to check that `conntrack -E` is listening before anything happens.
SENTINEL = "127.255.255.254"

LIBC = ctypes.CDLL(None, use_errno=True)


def die_with_parent():
    # PR_SET_PDEATHSIG: children die with this driver, even if it is killed.
    LIBC.prctl(1, signal.SIGKILL)


def now_ms():
    return round((time.monotonic() - T0) * 1000.0, 3)


class Fail(Exception):
    pass


def run(argv, stdin=None, timeout=30):
    p = subprocess.run(
        argv,
        input=stdin,
        capture_output=True,
        text=True,
        timeout=timeout,
        preexec_fn=die_with_parent,
    )
    return {"argv": argv, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}


def must(r, what):
    if r["rc"] != 0:
        raise Fail(
            "%s: `%s` exited %d: %s"
            % (what, " ".join(r["argv"]), r["rc"], r["stderr"].strip())
        )
    return r


def split_addr(s):
    host, port = s.rsplit(":", 1)
    return host.strip("[]"), int(port)


def fmt_addr(a):
    host, port = a[0], a[1]
    return "[%s]:%d" % (host, port) if ":" in host else "%s:%d" % (host, port)


def family(host):
    return socket.AF_INET6 if ":" in host else socket.AF_INET


# ---------------------------------------------------------------------------------------------
# conntrack -E, frame capture
# ---------------------------------------------------------------------------------------------

EVENTS = []
EV_COND = threading.Condition()


def start_events():
    p = subprocess.Popen(
        ["conntrack", "-E", "-o", "timestamp"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        bufsize=1,
        preexec_fn=die_with_parent,
    )

    def reader():
        for raw in p.stdout:
            line = raw.rstrip("\n")
            at = None
            # "[1795946785.868450]\t    [NEW] udp ...": the event line keeps its own padding.
            if line.startswith("[") and "]\t" in line:
                ts, rest = line[1:].split("]\t", 1)
                try:
                    at = round((float(ts) - W0) * 1000.0, 3)
                    line = rest
                except ValueError:
                    pass
            with EV_COND:
                EVENTS.append({"at_ms": at, "line": line})
                EV_COND.notify_all()

    t = threading.Thread(target=reader, daemon=True)
    t.start()
    return p, t


def wait_event(pred, seconds):
    deadline = time.monotonic() + seconds
    with EV_COND:
        while not any(pred(e["line"]) for e in EVENTS):
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            EV_COND.wait(left)
    return True


def sentinel_handshake():
    """Makes the event listener prove it is subscribed: sends a datagram to itself from a new
    SENTINEL port every 50 ms until a [NEW] event for one shows up, then deletes the sentinel
    entries (their events are filtered out of the result)."""
    mark = "src=%s " % SENTINEL
    deadline = time.monotonic() + 5.0
    port = 9
    while True:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.bind((SENTINEL, port))
        s.sendto(b"sentinel", (SENTINEL, port))
        s.recv(64)
        s.close()
        if wait_event(lambda l: "[NEW]" in l and mark in l, 0.05):
            break
        if time.monotonic() > deadline:
            raise Fail(
                "conntrack -E reported no [NEW] event for the sentinel flows within 5 s: "
                "conntrack is not tracking in this namespace (turn enable_conntrack on, or load "
                "rules that use it)"
            )
        port += 1
    must(run(["conntrack", "-D", "-s", SENTINEL]), "deleting the sentinel entries")


def flush_events(seconds=5.0):
    """Waits until `conntrack -E` has printed every event of the run: the kernel delivers a
    namespace's events to the listener's netlink socket in order, so once the [NEW] event of
    one more SENTINEL flow (port 7, unused by the handshake's ports 9 and up) has been read,
    every event before it has been too. A fixed sleep lost the last events on a loaded
    machine. Returns False if the sentinel's event did not come within `seconds`."""
    mark = "src=%s " % SENTINEL
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    # The run's rules may drop it: then the fixed sleep is all there is.
    s.settimeout(1.0)
    s.bind((SENTINEL, 7))
    s.sendto(b"sentinel", (SENTINEL, 7))
    s.recv(64)
    s.close()
    return wait_event(lambda l: "[NEW]" in l and mark in l and "sport=7 " in l, seconds)


FRAMES = []


# SO_TIMESTAMPNS (asm-generic and x86; the socket module does not name it): the kernel stamps
# each frame when it is queued on lo, so a frame's time does not depend on when this thread
# gets to read it.
SO_TIMESTAMPNS = 35
TIMESPEC = struct.Struct("@ll")


# The socket that keeps the kernel's receive timestamps on for the driver's life.
STAMPING = None


def arm_rx_timestamps(seconds=2.0):
    """Turns the kernel's receive timestamps on before the capture starts, and waits until they
    are really on. SO_TIMESTAMPNS enables them through a static key that deferred work flips
    (net_enable_timestamp() schedules netstamp_work); until that has run, frames reach a socket
    unstamped and __sock_recv_timestamp() fills in the time they are *read* ("Race occurred
    between timestamp enabling and packet receiving"). On a loaded machine the capture thread
    reads the first frames after the next step has begun, so they were replayed one step late
    (kernel_diff saw no entry where the kernel listed one). Here a socket with SO_TIMESTAMPNS is
    held open (so the key stays on) and a datagram from SENTINEL to itself is read 30 ms after
    it was sent, until its stamp is its arrival, not its reading. Its conntrack entry is
    deleted (it has one only if the namespace already tracks), and it runs before the rules are
    loaded, so no counter sees it."""
    global STAMPING
    keep = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    keep.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    keep.bind((SENTINEL, 6))
    keep.settimeout(0.5)
    STAMPING = keep
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.bind((SENTINEL, 5))
    deadline = time.monotonic() + seconds
    try:
        while time.monotonic() < deadline:
            tx.sendto(b"stamp", (SENTINEL, 6))
            time.sleep(0.03)
            try:
                _, anc, _, _ = keep.recvmsg(64, 64)
            except socket.timeout:
                return  # the run's rules drop it: nothing more to learn
            read = time.time()
            stamp = None
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= TIMESPEC.size:
                    sec, nsec = TIMESPEC.unpack_from(value)
                    stamp = sec + nsec / 1e9
            if stamp is not None and read - stamp >= 0.015:
                return
    finally:
        tx.close()
        try:
            run(["conntrack", "-D", "-s", SENTINEL])
        except OSError:
            pass


class Capture:
    def __init__(self):
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
        self.sock.bind(("lo", 0))
        try:
            self.sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            pass
        self.sock.settimeout(0.05)
        self.running = True
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self):
        # Until stopped and drained: a frame still queued on the socket when `stop` is called
        # (the thread starved of CPU on a loaded machine) is read before the loop ends, so
        # the capture holds every frame the namespace saw before the stop.
        while True:
            try:
                data, anc, _, addr = self.sock.recvmsg(262144, 64)
            except socket.timeout:
                if not self.running:
                    return
                continue
            except OSError:
                return
            # On lo every packet is seen leaving and arriving; keep the arrival, as libpcap does.
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            at = now_ms()
            for level, kind, value in anc:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(value) >= TIMESPEC.size:
                    sec, nsec = TIMESPEC.unpack_from(value)
                    # The same clock as the events: wall time since the driver started.
                    at = round((sec + nsec / 1e9 - W0) * 1000.0, 3)
            FRAMES.append({"at_ms": at, "hex": data.hex()})

    def stop(self):
        time.sleep(0.05)
        self.running = False
        # The loop returns at the first 50 ms without a frame after this.
        self.thread.join(10)
        self.sock.close()


# ---------------------------------------------------------------------------------------------
# Sockets and the pump
# ---------------------------------------------------------------------------------------------

RECEIVED = []
UDP_SERVERS = {}  # addr -> {"sock", "answer"}
UDP_CLIENTS = {}  # key -> {"sock", "inbox": [...]}
TCP_LISTENERS = {}  # addr -> {"sock", "close_on_eof", "conns": [...]}
TCP_CLIENTS = {}  # id -> {"sock", "inbox": bytearray, "eof", "error"}
HANDLERS = {}  # fileno -> callable


def saw(proto, server, peer, event, payload=None):
    RECEIVED.append(
        {
            "at_ms": now_ms(),
            "proto": proto,
            "server": server,
            "peer": peer,
            "event": event,
            "payload": payload,
        }
    )


def on_udp_server(addr):
    def handle():
        srv = UDP_SERVERS[addr]
        try:
            data, peer = srv["sock"].recvfrom(65535)
        except OSError:
            return
        text = data.decode("utf-8", "replace")
        saw("udp", addr, fmt_addr(peer), "datagram", text)
        if srv["answer"]:
            srv["sock"].sendto(("%s|" % addr).encode() + data, peer)

    return handle


def on_udp_client(key):
    def handle():
        c = UDP_CLIENTS[key]
        try:
            data, peer = c["sock"].recvfrom(65535)
        except OSError as e:
            c["inbox"].append({"at_ms": now_ms(), "error": str(e)})
            return
        c["inbox"].append(
            {"at_ms": now_ms(), "from": fmt_addr(peer), "payload": data.decode("utf-8", "replace")}
        )

    return handle


def on_listener(addr):
    def handle():
        lst = TCP_LISTENERS[addr]
        try:
            conn, peer = lst["sock"].accept()
        except OSError:
            return
        conn.setblocking(False)
        entry = {"sock": conn, "peer": fmt_addr(peer), "open": True}
        lst["conns"].append(entry)
        saw("tcp", addr, entry["peer"], "accept")
        HANDLERS[conn.fileno()] = on_conn(addr, entry)

    return handle


def close_conn(entry):
    if entry["open"]:
        HANDLERS.pop(entry["sock"].fileno(), None)
        entry["sock"].close()
        entry["open"] = False


def on_conn(addr, entry):
    def handle():
        try:
            data = entry["sock"].recv(65535)
        except (ConnectionResetError, OSError):
            saw("tcp", addr, entry["peer"], "reset")
            close_conn(entry)
            return
        if data:
            text = data.decode("utf-8", "replace")
            saw("tcp", addr, entry["peer"], "data", text)
            try:
                entry["sock"].send(("%s|" % addr).encode() + data)
            except OSError:
                pass
            return
        saw("tcp", addr, entry["peer"], "eof")
        if TCP_LISTENERS[addr]["close_on_eof"]:
            close_conn(entry)
        else:
            # Half-closed: keep the socket open, stop reading it.
            HANDLERS.pop(entry["sock"].fileno(), None)

    return handle


def on_tcp_client(cid):
    def handle():
        c = TCP_CLIENTS[cid]
        try:
            data = c["sock"].recv(65535)
        except OSError as e:
            c["error"] = errname(e)
            HANDLERS.pop(c["sock"].fileno(), None)
            return
        if data:
            c["inbox"].extend(data)
        else:
            c["eof"] = True
            HANDLERS.pop(c["sock"].fileno(), None)

    return handle


def errname(e):
    import errno

    return errno.errorcode.get(e.errno, str(e)) if getattr(e, "errno", None) else str(e)


def pump(seconds, until=None):
    """Serves every socket for `seconds`, or until `until()` is true. Returns whether it was."""
    deadline = time.monotonic() + seconds
    while True:
        if until is not None and until():
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        fds = list(HANDLERS.keys())
        r, _, _ = select.select(fds, [], [], min(left, 0.02))
        for fd in r:
            h = HANDLERS.get(fd)
            if h is not None:
                h()


# ---------------------------------------------------------------------------------------------
# TUN links: raw IPv4 and IPv6 packets in and out
# ---------------------------------------------------------------------------------------------

# <linux/if_tun.h>: TUNSETIFF = _IOW('T', 202, int), IFF_TUN, IFF_NO_PI.
TUNSETIFF = 0x400454CA
IFF_TUN = 0x0001
IFF_NO_PI = 0x1000

TUNS = {}  # name -> fd
EMITTED = []  # what the kernel sent out of a TUN link: {"dev", "at_ms", "hex"}


def open_tun(name):
    fd = os.open("/dev/net/tun", os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, TUNSETIFF, struct.pack("16sH", name.encode(), IFF_TUN | IFF_NO_PI))
    TUNS[name] = fd

    def handle():
        while True:
            try:
                data = os.read(fd, 65535)
            except BlockingIOError:
                return
            # IPv4 and IPv6, but not the kernel's own neighbour discovery and multicast
            # listener traffic on the link (to a multicast address: MLD reports behind a
            # hop-by-hop header, router solicitations; or ICMPv6 types 130-143), which is no
            # packet's fate.
            if data and data[0] >> 4 == 4:
                EMITTED.append({"dev": name, "at_ms": now_ms(), "hex": data.hex()})
            elif data and data[0] >> 4 == 6 and len(data) >= 41:
                if data[24] != 0xFF and not (data[6] == 58 and 130 <= data[40] <= 143):
                    EMITTED.append({"dev": name, "at_ms": now_ms(), "hex": data.hex()})

    HANDLERS[fd] = handle


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack("!%dH" % (len(data) // 2), data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


TCP_FLAGS = {"F": 0x01, "S": 0x02, "R": 0x04, "P": 0x08, "A": 0x10, "U": 0x20}


def build(p):
    """An IPv4 or IPv6 packet (by the addresses) from its description: proto tcp/udp/icmp
    (ICMPv6 for IPv6 addresses), src, dst, sport, dport, ttl (the hop limit), id (IPv4);
    tcp: flags ("SA", "PA", …), seq, ack, win; icmp: type (default echo request: 8, or 128),
    code, icmp_id, icmp_seq; len: payload bytes (b"x" each)."""
    if ":" in p["src"]:
        return build6(p)
    src = socket.inet_aton(p["src"])
    dst = socket.inet_aton(p["dst"])
    payload = b"x" * p.get("len", 0)
    proto = p["proto"]
    if proto == "tcp":
        flags = sum(TCP_FLAGS[c] for c in p.get("flags", "S"))
        hdr = struct.pack(
            "!HHIIBBHHH", p["sport"], p["dport"], p.get("seq", 0), p.get("ack", 0),
            5 << 4, flags, p.get("win", 64240), 0, 0,
        )
        num = 6
    elif proto == "udp":
        hdr = struct.pack("!HHHH", p["sport"], p["dport"], 8 + len(payload), 0)
        num = 17
    elif proto == "icmp":
        hdr = struct.pack(
            "!BBHHH", p.get("type", 8), p.get("code", 0), 0, p.get("icmp_id", 0), p.get("icmp_seq", 0)
        )
        num = 1
    else:
        raise Fail("inject: unknown protocol %r" % proto)
    seg = hdr + payload
    if num == 1:
        c = csum(seg)
    else:
        c = csum(src + dst + struct.pack("!BBH", 0, num, len(seg)) + seg)
        if num == 17 and c == 0:
            c = 0xFFFF
    at = {6: 16, 17: 6, 1: 2}[num]
    seg = seg[:at] + struct.pack("!H", c) + seg[at + 2 :]
    ip = struct.pack(
        "!BBHHHBBH4s4s", 0x45, 0, 20 + len(seg), p.get("id", 1), 0x4000, p.get("ttl", 64), num, 0, src, dst
    )
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return ip + seg


def build6(p):
    """`build` for IPv6: a 40-byte header (traffic class and flow label 0, no extension
    header), the layer-4 checksum over the IPv6 pseudo-header (ICMPv6's too)."""
    src = socket.inet_pton(socket.AF_INET6, p["src"])
    dst = socket.inet_pton(socket.AF_INET6, p["dst"])
    payload = b"x" * p.get("len", 0)
    proto = p["proto"]
    if proto == "tcp":
        flags = sum(TCP_FLAGS[c] for c in p.get("flags", "S"))
        hdr = struct.pack(
            "!HHIIBBHHH", p["sport"], p["dport"], p.get("seq", 0), p.get("ack", 0),
            5 << 4, flags, p.get("win", 64240), 0, 0,
        )
        num = 6
    elif proto == "udp":
        hdr = struct.pack("!HHHH", p["sport"], p["dport"], 8 + len(payload), 0)
        num = 17
    elif proto == "icmp" and p.get("quote"):
        # An error (destination unreachable, time exceeded…) quoting what an earlier step
        # made the kernel send, as the host it reached would (icmp6_send: up to 1280 bytes).
        prior = INJECTED.get(p["quote"])
        if not prior or not prior["emitted"]:
            raise Fail("inject: step %r emitted nothing to quote" % p["quote"])
        quoted = bytes.fromhex(prior["emitted"][0]["hex"])[: 1280 - 48]
        hdr = struct.pack("!BBHI", p.get("type", 1), p.get("code", 0), 0, 0)
        payload = quoted
        num = 58
    elif proto == "icmp":
        hdr = struct.pack(
            "!BBHHH", p.get("type", 128), p.get("code", 0), 0, p.get("icmp_id", 0), p.get("icmp_seq", 0)
        )
        num = 58
    else:
        raise Fail("inject: unknown protocol %r" % proto)
    seg = hdr + payload
    c = csum(src + dst + struct.pack("!IxxxB", len(seg), num) + seg)
    if num == 17 and c == 0:
        c = 0xFFFF
    at = {6: 16, 17: 6, 58: 2}[num]
    seg = seg[:at] + struct.pack("!H", c) + seg[at + 2 :]
    # Extension headers (hop-by-hop 0, destination options 60): 8 bytes each, a PadN option.
    first = num
    for nh in reversed(p.get("ext", [])):
        if nh not in (0, 60):
            raise Fail("inject: extension header %r (expected 0 or 60)" % nh)
        seg = struct.pack("!BBBB4x", first, 0, 1, 4) + seg
        first = nh
    return struct.pack("!IHBB", 6 << 28, len(seg), first, p.get("ttl", 64)) + src + dst + seg


def addresses_of(raw):
    """(src, dst, sport, dport) of an emitted IPv4 or IPv6 packet (ports None for ICMP)."""
    if raw[0] >> 4 == 6:
        src = socket.inet_ntop(socket.AF_INET6, raw[8:24])
        dst = socket.inet_ntop(socket.AF_INET6, raw[24:40])
        if raw[6] in (6, 17):
            sport, dport = struct.unpack("!HH", raw[40:44])
            return src, dst, sport, dport
        return src, dst, None, None
    ihl = (raw[0] & 0x0F) * 4
    src, dst = socket.inet_ntoa(raw[12:16]), socket.inet_ntoa(raw[16:20])
    if raw[9] in (6, 17):
        sport, dport = struct.unpack("!HH", raw[ihl : ihl + 4])
        return src, dst, sport, dport
    return src, dst, None, None


def step_inject(st, out):
    """Writes one packet into TUN link `dev` (the kernel receives it there), then serves the
    links for `wait_ms`, keeping what the kernel sent out of any of them. With `reply_to`
    (the label of an earlier inject step), the packet answers the first packet that step
    emitted: its addresses and ports are that packet's, swapped, and it enters where that
    packet left."""
    p = dict(st["packet"])
    dev = st["dev"]
    if st.get("reply_to"):
        prior = INJECTED.get(st["reply_to"])
        if not prior or not prior["emitted"]:
            raise Fail("inject %s: step %r emitted nothing to answer" % (st["label"], st["reply_to"]))
        first = prior["emitted"][0]
        src, dst, sport, dport = addresses_of(bytes.fromhex(first["hex"]))
        p.update({"src": dst, "dst": src})
        if sport is not None:
            p.update({"sport": dport, "dport": sport})
        dev = first["dev"]
    raw = build(p)
    seen = len(EMITTED)
    at = now_ms()
    os.write(TUNS[dev], raw)
    pump(st["wait_ms"] / 1000.0)
    res = {"dev": dev, "at_ms": at, "hex": raw.hex(), "emitted": EMITTED[seen:]}
    INJECTED[st["label"]] = res
    out["inject"] = res


INJECTED = {}  # label -> the result of an inject step


# ---------------------------------------------------------------------------------------------
# Steps
# ---------------------------------------------------------------------------------------------


def step_udp_listen(st, out):
    addr = st["addr"]
    host, port = split_addr(addr)
    s = socket.socket(family(host), socket.SOCK_DGRAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.setblocking(False)
    UDP_SERVERS[addr] = {"sock": s, "answer": st["answer"]}
    HANDLERS[s.fileno()] = on_udp_server(addr)


def step_udp_close(st, out):
    srv = UDP_SERVERS.pop(st["addr"], None)
    if srv is None:
        raise Fail("udp_close: no UDP server at %s" % st["addr"])
    HANDLERS.pop(srv["sock"].fileno(), None)
    srv["sock"].close()


def step_udp_send(st, out):
    to_host, to_port = split_addr(st["to"])
    key = st.get("from") or ("ephemeral:%d" % st["index"])
    c = UDP_CLIENTS.get(key)
    if c is None:
        s = socket.socket(family(to_host), socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if st.get("from"):
            s.bind(split_addr(st["from"]))
        s.setblocking(False)
        c = {"sock": s, "inbox": []}
        UDP_CLIENTS[key] = c
        HANDLERS[s.fileno()] = on_udp_client(key)
    payload = st.get("payload") or ("q%d" % st["index"])
    seen = len(c["inbox"])
    sent_at = now_ms()
    error = None
    try:
        c["sock"].sendto(payload.encode(), (to_host, to_port))
    except OSError as e:
        error = errname(e)
    local = fmt_addr(c["sock"].getsockname()[:2]) if error is None or st.get("from") else None

    def answered():
        return any(
            m.get("payload", "").endswith("|" + payload) for m in c["inbox"][seen:]
        )

    reply = None
    if error is None and pump(st["wait_ms"] / 1000.0, answered):
        m = next(m for m in c["inbox"][seen:] if m.get("payload", "").endswith("|" + payload))
        server = m["payload"][: -len("|" + payload)]
        reply = {"at_ms": m["at_ms"], "from": m["from"], "server": server, "payload": m["payload"]}
    out["udp"] = {
        "from": local,
        "to": st["to"],
        "payload": payload,
        "sent_at_ms": sent_at,
        "error": error,
        "reply": reply,
    }


def step_tcp_listen(st, out):
    addr = st["addr"]
    host, port = split_addr(addr)
    s = socket.socket(family(host), socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(64)
    s.setblocking(False)
    TCP_LISTENERS[addr] = {"sock": s, "close_on_eof": st["close_on_eof"], "conns": []}
    HANDLERS[s.fileno()] = on_listener(addr)


def tcp_exchange(c, payload, wait_ms):
    start = len(c["inbox"])
    c["sock"].send(payload.encode())
    want = ("|" + payload).encode()

    def answered():
        return bytes(c["inbox"][start:]).endswith(want) or c["eof"] or c["error"]

    pump(wait_ms / 1000.0, answered)
    got = bytes(c["inbox"][start:])
    if got.endswith(want):
        text = got.decode("utf-8", "replace")
        return {"at_ms": now_ms(), "from": None, "server": text[: -len(want)], "payload": text}
    return None


def step_tcp_connect(st, out):
    cid = st["id"]
    if cid in TCP_CLIENTS:
        raise Fail("tcp_connect: connection id %r is already in use" % cid)
    to_host, to_port = split_addr(st["to"])
    s = socket.socket(family(to_host), socket.SOCK_STREAM)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if st.get("from"):
        s.bind(split_addr(st["from"]))
    s.setblocking(False)
    c = {"sock": s, "inbox": bytearray(), "eof": False, "error": None}
    TCP_CLIENTS[cid] = c
    rc = s.connect_ex((to_host, to_port))
    state = {"done": rc == 0, "err": None if rc in (0, 115) else rc}

    def connected():
        if state["done"] or state["err"]:
            return True
        _, w, _ = select.select([], [s], [], 0)
        if w:
            e = s.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if e == 0:
                state["done"] = True
            else:
                state["err"] = e
            return True
        return False

    pump(st["wait_ms"] / 1000.0, connected)
    import errno

    error = None
    if state["err"]:
        error = errno.errorcode.get(state["err"], str(state["err"]))
    elif not state["done"]:
        error = "timeout"
    local = fmt_addr(s.getsockname()[:2])
    reply = None
    if state["done"]:
        HANDLERS[s.fileno()] = on_tcp_client(cid)
        if st.get("payload"):
            reply = tcp_exchange(c, st["payload"], st["wait_ms"])
    out["tcp"] = {
        "id": cid,
        "local": local,
        "to": st["to"],
        "connected": bool(state["done"]),
        "error": error,
        "reply": reply,
    }


def client(cid, op):
    c = TCP_CLIENTS.get(cid)
    if c is None:
        raise Fail("%s: no TCP connection with id %r" % (op, cid))
    return c


def step_tcp_send(st, out):
    c = client(st["id"], "tcp_send")
    reply = tcp_exchange(c, st["payload"], st["wait_ms"])
    out["tcp"] = {
        "id": st["id"],
        "local": fmt_addr(c["sock"].getsockname()[:2]),
        "to": None,
        "connected": True,
        "error": c["error"],
        "reply": reply,
    }


def step_tcp_close(st, out):
    c = client(st["id"], "tcp_close")
    if st.get("rst"):
        import struct

        c["sock"].setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    HANDLERS.pop(c["sock"].fileno(), None)
    c["sock"].close()
    pump(st["wait_ms"] / 1000.0)


def step_tcp_close_server(st, out):
    lst = TCP_LISTENERS.get(st["addr"])
    if lst is None:
        raise Fail("tcp_close_server: no TCP listener at %s" % st["addr"])
    for entry in lst["conns"]:
        close_conn(entry)
    pump(st["wait_ms"] / 1000.0)


def step_sleep(st, out):
    pump(st["ms"] / 1000.0)


def step_command(st, out):
    out["command"] = run(st["argv"], st.get("stdin"))


def step_mark(st, out):
    pass


STEPS = {
    "udp_listen": step_udp_listen,
    "udp_close": step_udp_close,
    "udp_send": step_udp_send,
    "tcp_listen": step_tcp_listen,
    "tcp_connect": step_tcp_connect,
    "tcp_send": step_tcp_send,
    "tcp_close": step_tcp_close,
    "tcp_close_server": step_tcp_close_server,
    "sleep": step_sleep,
    "command": step_command,
    "mark": step_mark,
    "inject": step_inject,
}


def main():
    result = {"ok": False, "error": None, "setup": [], "steps": [], "events": [], "received": RECEIVED, "frames": FRAMES}
    events = None
    capture = None
    try:
        result["setup"].append(must(run(["ip", "link", "set", "lo", "up"]), "bringing lo up"))
        if SETUP["capture"]:
            # Before any rule or conntrack exists, so its datagram counts nowhere.
            arm_rx_timestamps()
        for a in SETUP["addresses"]:
            cidr = a if "/" in a else a + ("/128" if ":" in a else "/32")
            result["setup"].append(must(run(["ip", "addr", "add", cidr, "dev", "lo"]), "adding an address"))
        for k, v in SETUP["sysctls"]:
            result["setup"].append(must(run(["sysctl", "-w", "%s=%s" % (k, v)]), "setting a sysctl"))
        for t in SETUP["tuns"]:
            open_tun(t["name"])
            if any(":" in a for a in t["addrs"]):
                # No address of the kernel's making (a random link-local one) on the link.
                result["setup"].append(must(run(["ip", "link", "set", t["name"], "addrgenmode", "none"]), "addrgenmode none on a TUN link"))
            for a in t["addrs"]:
                extra = ["nodad"] if ":" in a else []
                result["setup"].append(must(run(["ip", "addr", "add", a, "dev", t["name"]] + extra), "addressing a TUN link"))
            result["setup"].append(must(run(["ip", "link", "set", t["name"], "up"]), "bringing a TUN link up"))
        for r in SETUP["routes"]:
            result["setup"].append(must(run(["ip", "route", "add"] + r.split()), "adding a route"))
        if SETUP["enable_conntrack"]:
            # An nft table of its own (iptables-save does not show it) whose `ct state`
            # expression makes the kernel track connections in this namespace, as a node's nat
            # table would; without a rule that needs conntrack a new namespace tracks nothing.
            table = (
                "table inet nfsim_lab {\n"
                " chain out { type filter hook output priority 1000; ct state invalid counter; }\n"
                " chain pre { type filter hook prerouting priority 1000; ct state invalid counter; }\n"
                "}\n"
            )
            result["setup"].append(must(run(["nft", "-f", "-"], table), "turning conntrack on"))
        rules_first = not SETUP["enable_conntrack"]
        if SETUP["rules"] is not None and rules_first:
            result["setup"].append(must(run(["iptables-restore"], SETUP["rules"]), "loading the rules"))
        if SETUP["rules6"] is not None and rules_first:
            result["setup"].append(must(run(["ip6tables-restore"], SETUP["rules6"]), "loading the IPv6 rules"))
        if SETUP["events"]:
            events = start_events()
            sentinel_handshake()
        if SETUP["rules"] is not None and not rules_first:
            result["setup"].append(must(run(["iptables-restore"], SETUP["rules"]), "loading the rules"))
        if SETUP["rules6"] is not None and not rules_first:
            result["setup"].append(must(run(["ip6tables-restore"], SETUP["rules6"]), "loading the IPv6 rules"))
        if SETUP["capture"]:
            capture = Capture()
        for i, st in enumerate(SPEC["steps"]):
            st["index"] = i
            out = {"index": i, "op": st["op"], "label": st.get("label"), "at_ms": now_ms()}
            STEPS[st["op"]](st, out)
            out["end_ms"] = now_ms()
            result["steps"].append(out)
        pump(0.05)
        result["ok"] = True
    except Fail as e:
        result["error"] = str(e)
    except Exception:
        result["error"] = traceback.format_exc()
    finally:
        if capture is not None:
            capture.stop()
        if events is not None:
            proc, reader = events
            try:
                flushed = flush_events()
            except OSError:
                flushed = False
            if not flushed:
                time.sleep(0.1)
            proc.send_signal(signal.SIGINT)
            try:
                proc.wait(3)
            except subprocess.TimeoutExpired:
                proc.kill()
            reader.join(3)
            mark = "src=%s " % SENTINEL
            with EV_COND:
                result["events"] = [e for e in EVENTS if mark not in e["line"]]
    sys.stdout.write(json.dumps(result))
    sys.stdout.flush()


main()
