"""The bridge lab of tests/bridge_kernel.rs, run as `unshare -n python3 bridge_lab.py CONFIG`.

In a private network namespace: bridge cni0 holding the gateway address /24 (its MAC
0a:58 + the address, as nfsim's model gives it), one TAP port per pod (the driver holds
the fd: what the bridge sends out of a port is read here and goes nowhere else), a
permanent neighbour entry per pod, net.bridge.bridge-nf-call-iptables and hairpin mode as
CONFIG says, CONFIG's iptables-restore input. Then each frame of CONFIG is written into
its port (UDP from a pod, to the MAC its sender would use) and the IPv4 UDP frames the
bridge sends out of any port within 150 ms are recorded. Prints JSON: per frame what came
out, then `iptables-save -c` and `conntrack -L`. Prints {"skip": reason} without
br_netfilter. Only the namespace's own TAP links carry the traffic.
"""
import fcntl, json, os, select, struct, subprocess, sys, time

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

def udp_frame(src_mac, dst_mac, src, sport, dst, dport, ttl=64, payload=b'hello'):
    ulen = 8 + len(payload)
    ph = aton(src) + aton(dst) + struct.pack('!BBH', 0, 17, ulen)
    u = struct.pack('!HHHH', sport, dport, ulen, 0) + payload
    uc = csum(ph + u) or 0xffff
    u = struct.pack('!HHHH', sport, dport, ulen, uc) + payload
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + ulen, 1, 0x4000, ttl, 17, 0, aton(src), aton(dst))
    ip = ip[:10] + struct.pack('!H', csum(ip)) + ip[12:]
    return dst_mac + src_mac + b'\x08\x00' + ip + u

def tap(name):
    fd = os.open('/dev/net/tun', os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH', name.encode(), 0x0002 | 0x1000))
    return fd

def parse(fr):
    if len(fr) < 42 or fr[12:14] != b'\x08\x00' or fr[23] != 17: return None
    ihl = (fr[14] & 15) * 4
    u = 14 + ihl
    sport, dport = struct.unpack('!HH', fr[u:u+4])
    return {"dst_mac": fr[0:6].hex(':'), "src_mac": fr[6:12].hex(':'), "ttl": fr[22],
            "src": f"{ntoa(fr[26:30])}:{sport}", "dst": f"{ntoa(fr[30:34])}:{dport}"}

def main():
    cfg = json.loads(sys.argv[1])
    sh('ip', 'link', 'set', 'lo', 'up')
    for k in ('all', 'default'):
        sh('sysctl', '-qw', f'net.ipv6.conf.{k}.disable_ipv6=1')
    if not os.path.exists('/proc/sys/net/bridge/bridge-nf-call-iptables'):
        print(json.dumps({"skip": "no /proc/sys/net/bridge/bridge-nf-call-iptables (br_netfilter not loaded)"})); return
    sh('ip', 'link', 'add', 'cni0', 'address', mac_of(cfg['gw']).hex(':'), 'type', 'bridge')
    sh('ip', 'addr', 'add', cfg['gw'] + '/24', 'dev', 'cni0')
    sh('ip', 'link', 'set', 'cni0', 'up')
    fds = {}
    for name, ip in cfg['ports']:
        fds[name] = tap(name)
        sh('ip', 'link', 'set', name, 'master', 'cni0')
        sh('ip', 'link', 'set', name, 'up')
        sh('ip', 'link', 'set', name, 'type', 'bridge_slave', 'hairpin', 'on' if cfg['hairpin'] else 'off')
        sh('ip', 'neigh', 'replace', ip, 'lladdr', mac_of(ip).hex(':'), 'dev', 'cni0', 'nud', 'permanent')
    sh('sysctl', '-qw', f"net.bridge.bridge-nf-call-iptables={cfg['call_iptables']}")
    sh('sysctl', '-qw', 'net.ipv4.ip_forward=1')
    sh('sysctl', '-qw', 'net.ipv4.conf.all.send_redirects=0')
    sh('sysctl', '-qw', 'net.ipv4.conf.cni0.send_redirects=0')
    sh('iptables-restore', inp=cfg['rules'])
    time.sleep(0.05)
    out = []
    for step in cfg['frames']:
        port, src, dst, to_mac = step['port'], step['src'], step['dst'], step['to_mac']
        s_ip, s_port = src.split(':'); d_ip, d_port = dst.split(':')
        if step.get('reply_to') is not None:
            prev = out[step['reply_to']]['out']
            if prev:
                d_ip, d_port = prev[0]['src'].split(':')
        fr = udp_frame(mac_of(s_ip), mac_of(to_mac), s_ip, int(s_port), d_ip, int(d_port))
        for fd in fds.values():
            while True:
                try: os.read(fd, 65536)
                except BlockingIOError: break
        os.write(fds[port], fr)
        seen = []
        end = time.time() + 0.15
        while time.time() < end:
            r, _, _ = select.select(list(fds.values()), [], [], 0.02)
            for name, fd in fds.items():
                if fd in r:
                    try: b = os.read(fd, 65536)
                    except BlockingIOError: continue
                    p = parse(b)
                    if p: p['dev'] = name; seen.append(p)
        out.append({"in": port, "out": seen})
    res = {"steps": out,
           "save": sh('iptables-save', '-c'),
           "conntrack": sh('conntrack', '-L', check=False)}
    print(json.dumps(res))

main()
