"""The VXLAN lab of tests/vxlan_kernel.rs, run as `unshare -n python3 vxlan_lab.py CONFIG`.

Two flannel nodes: this private network namespace is node A, a child namespace
(`unshare -n sleep`) node B, joined by a veth pair (eth0 on both, 172.18.0.2/24 and
172.18.0.3/24). Each node as flannel builds it: bridge cni0 with the pod CIDR's gateway
10.244.N.1/24 (MAC 0a:58 + the address), one TAP "pod" port (the driver holds the fd: what
the bridge sends out of it is read here and goes nowhere else), flannel.1 (`type vxlan id 1
local NODE dev eth0 dstport 8472 nolearning`, MAC from CONFIG, 10.244.N.0/32), the route
to the other pod CIDR via its flannel.1 `onlink`, the permanent neighbour and FDB entries,
CONFIG's iptables-restore input. Each frame of CONFIG is written into its node's TAP and
what comes out of the TAPs within 200 ms is recorded, with raw captures (AF_PACKET) of
node A's eth0, flannel.1 and cni0 and node B's flannel.1. Prints JSON: per frame what came
out and the captured frames (parsed), then each node's `conntrack -L` and `iptables-save
-c`. Only the namespaces' own links carry the traffic.
"""
import fcntl, json, os, select, socket, struct, subprocess, sys, time

def sh(*a, inp=None, check=True):
    r = subprocess.run(a, input=inp, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"{' '.join(a)}: {r.stderr.strip()}")
    return r.stdout

def mac_of(ip):
    return bytes([0x0a, 0x58] + [int(x) for x in ip.split('.')])

def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack(f'!{len(b)//2}H', b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff

def aton(a): return bytes(int(x) for x in a.split('.'))
def ntoa(b): return '.'.join(str(x) for x in b)

def ip_frame(src_mac, dst_mac, src, dst, proto, l4, df, ttl=64):
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(l4), 1, 0x4000 if df else 0, ttl,
                     proto, 0, aton(src), aton(dst))
    ip = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:]
    return dst_mac + src_mac + b'\x08\x00' + ip + l4

def frame(step):
    s_ip, d_ip = step['src'].split(':')[0], step['dst'].split(':')[0]
    smac, dmac = mac_of(s_ip), mac_of(step['gw'])
    payload = b'x' * step['payload']
    if step['proto'] == 'icmp':
        ic = struct.pack('!BBHHH', 8, 0, 0, 0x1234, 1) + payload
        ic = ic[:2] + struct.pack('!H', csum(ic)) + ic[4:]
        return ip_frame(smac, dmac, s_ip, d_ip, 1, ic, step['df'])
    sport, dport = int(step['src'].split(':')[1]), int(step['dst'].split(':')[1])
    ulen = 8 + len(payload)
    ph = aton(s_ip) + aton(d_ip) + struct.pack('!BBH', 0, 17, ulen)
    u = struct.pack('!HHHH', sport, dport, ulen, 0) + payload
    uc = csum(ph + u) or 0xffff
    u = struct.pack('!HHHH', sport, dport, ulen, uc) + payload
    return ip_frame(smac, dmac, s_ip, d_ip, 17, u, step['df'])

def parse_ip(b):
    """An IPv4 packet's headers (and a VXLAN packet's inner frame)."""
    if len(b) < 20 or b[0] >> 4 != 4: return None
    ihl = (b[0] & 15) * 4
    tot, ident, frag = struct.unpack('!HHH', b[2:8])
    p = {"src": ntoa(b[12:16]), "dst": ntoa(b[16:20]), "ttl": b[8], "tos": b[1],
         "proto": b[9], "len": tot, "df": bool(frag & 0x4000),
         "frag": bool(frag & 0x2000) or (frag & 0x1fff) != 0}
    l4 = b[ihl:]
    if p["proto"] in (6, 17) and len(l4) >= 4 and not (frag & 0x1fff):
        p["sport"], p["dport"] = struct.unpack('!HH', l4[:4])
    if p["proto"] == 1 and len(l4) >= 8:
        p["icmp"] = [l4[0], l4[1]]
        if l4[0] == 3 and l4[1] == 4: p["mtu"] = struct.unpack('!H', l4[6:8])[0]
    if p["proto"] == 17 and p.get("dport") == 8472 and len(l4) >= 8 + 8 + 14:
        vx = l4[8:16]
        inner = l4[16:]
        p["vni"] = int.from_bytes(vx[4:7], 'big')
        p["inner_dst_mac"] = inner[0:6].hex(':')
        p["inner_src_mac"] = inner[6:12].hex(':')
        p["inner"] = parse_ip(inner[14:])
    return p

def parse_eth(fr):
    if len(fr) < 34 or fr[12:14] != b'\x08\x00': return None
    p = parse_ip(fr[14:])
    if p: p["dst_mac"], p["src_mac"] = fr[0:6].hex(':'), fr[6:12].hex(':')
    return p

def tap(name):
    fd = os.open('/dev/net/tun', os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH', name.encode(), 0x0002 | 0x1000))
    return fd

def sniffer(dev):
    s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
    s.bind((dev, 0))
    s.setblocking(False)
    return s

def drain(s):
    out = []
    while True:
        try: b, addr = s.recvfrom(65536)
        except BlockingIOError: return out
        # VXLAN devices and veths deliver Ethernet frames; outgoing = PACKET_OUTGOING (4).
        p = parse_eth(b)
        if p: p["dir"] = "tx" if addr[2] == 4 else "rx"; out.append(p)

def capture_mode(devs, path, secs):
    """Node B's side: capture devs for secs, write the parsed frames to path (JSON lines)."""
    socks = {d: sniffer(d) for d in devs}
    end = time.time() + secs
    with open(path, 'w') as f:
        f.write('ready\n'); f.flush()
        while time.time() < end:
            select.select(list(socks.values()), [], [], 0.05)
            for d, s in socks.items():
                for p in drain(s):
                    p["dev"] = d
                    f.write(json.dumps(p) + '\n'); f.flush()

def node_setup(run, i, cfg, other):
    node, pod_gw = f"172.18.0.{2+i}", f"10.244.{i}.1"
    run('ip', 'link', 'set', 'lo', 'up')
    run('ip', 'link', 'add', 'cni0', 'address', mac_of(pod_gw).hex(':'), 'type', 'bridge')
    run('ip', 'addr', 'add', pod_gw + '/24', 'dev', 'cni0')
    run('ip', 'link', 'set', 'cni0', 'up')
    run('ip', 'link', 'add', 'flannel.1', 'address', cfg['vtep_macs'][i], 'type', 'vxlan', 'id', '1',
        'local', node, 'dev', 'eth0', 'dstport', '8472', 'nolearning')
    run('ip', 'addr', 'add', f"10.244.{i}.0/32", 'dev', 'flannel.1')
    run('ip', 'link', 'set', 'flannel.1', 'up')
    o = other
    run('ip', 'route', 'add', f"10.244.{o}.0/24", 'via', f"10.244.{o}.0", 'dev', 'flannel.1', 'onlink')
    run('ip', 'neigh', 'replace', f"10.244.{o}.0", 'lladdr', cfg['vtep_macs'][o], 'dev', 'flannel.1', 'nud', 'permanent')
    run('bridge', 'fdb', 'append', cfg['vtep_macs'][o], 'dev', 'flannel.1', 'dst', f"172.18.0.{2+o}", 'self', 'permanent')
    run('sysctl', '-qw', 'net.ipv4.ip_forward=1')
    run('sysctl', '-qw', 'net.ipv6.conf.all.disable_ipv6=1')
    run('iptables-restore', '--noflush', inp=cfg['rules'][i])

def main():
    if sys.argv[1] == '--capture':
        return capture_mode(sys.argv[2].split(','), sys.argv[3], float(sys.argv[4]))
    cfg = json.loads(sys.argv[1])
    child = subprocess.Popen(['unshare', '-n', 'sleep', '60'])
    time.sleep(0.2)
    pid = str(child.pid)
    inb = lambda *a, inp=None, check=True: sh('nsenter', '-t', pid, '-n', *a, inp=inp, check=check)
    try:
        sh('ip', 'link', 'add', 'eth0', 'type', 'veth', 'peer', 'name', 'eth0b')
        sh('ip', 'link', 'set', 'eth0b', 'netns', pid)
        sh('ip', 'addr', 'add', '172.18.0.2/24', 'dev', 'eth0')
        sh('ip', 'link', 'set', 'eth0', 'up')
        inb('ip', 'link', 'set', 'eth0b', 'name', 'eth0')
        inb('ip', 'addr', 'add', '172.18.0.3/24', 'dev', 'eth0')
        inb('ip', 'link', 'set', 'eth0', 'up')
        node_setup(sh, 0, cfg, 1)
        node_setup(inb, 1, cfg, 0)
        fds = {0: tap('podA'), 1: tap('podB')}
        sh('ip', 'link', 'set', 'podB', 'netns', pid)
        for i, (run, name) in enumerate([(sh, 'podA'), (inb, 'podB')]):
            run('ip', 'link', 'set', name, 'master', 'cni0')
            run('ip', 'link', 'set', name, 'up')
            pod = f"10.244.{i}.2"
            run('ip', 'neigh', 'replace', pod, 'lladdr', mac_of(pod).hex(':'), 'dev', 'cni0', 'nud', 'permanent')
        capfile = '/tmp/vxlan_lab_b_%d.jsonl' % os.getpid()
        cap = subprocess.Popen(['nsenter', '-t', pid, '-n', sys.executable, os.path.abspath(__file__),
                                '--capture', 'flannel.1,eth0', capfile, str(1.0 + 0.3 * len(cfg['frames']))])
        while not (os.path.exists(capfile) and open(capfile).read().startswith('ready')):
            time.sleep(0.02)
        socks = {d: sniffer(d) for d in ('eth0', 'flannel.1', 'cni0')}
        time.sleep(0.1)
        out = []
        for step in cfg['frames']:
            for fd in fds.values():
                while True:
                    try: os.read(fd, 65536)
                    except BlockingIOError: break
            for s in socks.values(): drain(s)
            os.write(fds[step['node']], frame(step))
            seen = []
            end = time.time() + 0.2
            while time.time() < end:
                r, _, _ = select.select(list(fds.values()), [], [], 0.02)
                for i, fd in fds.items():
                    if fd in r:
                        try: b = os.read(fd, 65536)
                        except BlockingIOError: continue
                        p = parse_eth(b)
                        if p: p['pod'] = i; seen.append(p)
            caps = []
            for d, s in socks.items():
                for p in drain(s):
                    p['dev'] = d; caps.append(p)
            out.append({"out": seen, "node_a": caps})
        cap.wait()
        b_caps = [json.loads(l) for l in open(capfile).read().splitlines()[1:]]
        os.unlink(capfile)
        res = {"steps": out, "node_b": b_caps,
               "conntrack": [sh('conntrack', '-L', check=False), inb('conntrack', '-L', check=False)],
               "save": [sh('iptables-save', '-c'), inb('iptables-save', '-c')]}
        print(json.dumps(res))
    finally:
        child.kill()

main()
