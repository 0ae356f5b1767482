"""The Calico lab of tests/calico_kernel.rs, run as `unshare -n python3 calico_lab.py CONFIG`.

In a private network namespace, a node as Calico's CNI plugin builds it: `eth0` (a TAP link
holding the node address /24, a permanent neighbour entry for the router and the other node,
the default route via the router) and one TAP link per pod named as Calico names its host
side, with no address, `proxy_arp` 1, `forwarding` 1, `neigh.<dev>.proxy_delay` 0, a route
`<pod IP> dev <veth> scope link` and a permanent neighbour entry for the pod (what the pod's
answer to the node's ARP would leave). The driver holds every TAP fd: what the node sends
out of a link is read here and goes nowhere else. CONFIG's iptables-restore input is loaded.

Then the steps of CONFIG, in order, each recording what the node sent within 150 ms:
- {"arp": dev, "sender": ip, "target": ip}: an ARP request written into dev; records the
  ARP replies (who answered, with which MAC);
- {"udp": dev, "src": "ip:port", "dst": "ip:port"}: a UDP datagram from a pod, to the MAC
  of its host-side link (as the pod's neighbour entry for 169.254.1.1 holds it); records
  the IPv4 frames out (link, addresses, TTL, protocol);
- {"ipip_in": [outer_src, outer_dst]}: a protocol-4 packet written into eth0, carrying a
  UDP datagram of CONFIG's "inner" addresses;
- {"route": [args]}: `ip route` with these arguments.
Prints JSON: the steps' results, `conntrack -L`, and whether this kernel makes ipip links.
"""
import fcntl, json, os, select, struct, subprocess, sys, time

def sh(*a, inp=None, check=True):
    r = subprocess.run(a, input=inp, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise SystemExit(f"{' '.join(a)}: {r.stderr.strip()}")
    return r

def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack(f'!{len(b)//2}H', b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff

def aton(a): return bytes(int(x) for x in a.split('.'))
def ntoa(b): return '.'.join(str(x) for x in b)
def mac_of(ip): return bytes([0x0a, 0x58]) + aton(ip)

def ip_packet(src, dst, proto, body, ttl=64):
    ip = struct.pack('!BBHHHBBH4s4s', 0x45, 0, 20 + len(body), 1, 0x4000, ttl, proto, 0, aton(src), aton(dst))
    return ip[:10] + struct.pack('!H', csum(ip)) + ip[12:] + body

def udp_packet(src, sport, dst, dport, payload=b'hello', ttl=64):
    ulen = 8 + len(payload)
    ph = aton(src) + aton(dst) + struct.pack('!BBH', 0, 17, ulen)
    u = struct.pack('!HHHH', sport, dport, ulen, 0) + payload
    uc = csum(ph + u) or 0xffff
    u = struct.pack('!HHHH', sport, dport, ulen, uc) + payload
    return ip_packet(src, dst, 17, u, ttl)

def arp_request(sha, sip, tip):
    body = struct.pack('!HHBBH6s4s6s4s', 1, 0x0800, 6, 4, 1, sha, aton(sip), b'\0' * 6, aton(tip))
    return b'\xff' * 6 + sha + b'\x08\x06' + body

def mac_of_link(dev):
    # (/sys shows the host's links, not this namespace's.)
    return bytes.fromhex(json.loads(sh('ip', '-j', 'link', 'show', 'dev', dev).stdout)[0]['address'].replace(':', ''))

def tap(name):
    fd = os.open('/dev/net/tun', os.O_RDWR | os.O_NONBLOCK)
    fcntl.ioctl(fd, 0x400454ca, struct.pack('16sH', name.encode(), 0x0002 | 0x1000))
    return fd

def parse(fr):
    if len(fr) >= 42 and fr[12:14] == b'\x08\x06':
        op, sha, spa = struct.unpack('!H6s4s', fr[20:32])
        if op == 2:
            return {"arp_reply": ntoa(spa), "mac": sha.hex(':')}
        return None
    if len(fr) < 34 or fr[12:14] != b'\x08\x00': return None
    ihl = (fr[14] & 15) * 4
    out = {"ttl": fr[22], "proto": fr[23], "src": ntoa(fr[26:30]), "dst": ntoa(fr[30:34])}
    if fr[23] == 17:
        sport, dport = struct.unpack('!HH', fr[14 + ihl:14 + ihl + 4])
        out["src"] += f":{sport}"; out["dst"] += f":{dport}"
    return out

def main():
    cfg = json.loads(sys.argv[1])
    sh('ip', 'link', 'set', 'lo', 'up')
    for k in ('all', 'default'):
        sh('sysctl', '-qw', f'net.ipv6.conf.{k}.disable_ipv6=1')
    sh('sysctl', '-qw', 'net.ipv4.ip_forward=1')
    fds = {'eth0': tap('eth0')}
    sh('ip', 'addr', 'add', cfg['node'] + '/24', 'dev', 'eth0')
    sh('ip', 'link', 'set', 'eth0', 'up')
    for peer in (cfg['router'], cfg['peer']):
        sh('ip', 'neigh', 'replace', peer, 'lladdr', mac_of(peer).hex(':'), 'dev', 'eth0', 'nud', 'permanent')
    sh('ip', 'route', 'add', 'default', 'via', cfg['router'], 'dev', 'eth0')
    macs = {}
    for dev, ip in cfg['pods']:
        fds[dev] = tap(dev)
        sh('ip', 'link', 'set', dev, 'up')
        for k, v in (('conf', 'proxy_arp'), ('conf', 'forwarding')):
            sh('sysctl', '-qw', f'net.ipv4.{k}.{dev}.{v}=1')
        sh('sysctl', '-qw', f'net.ipv4.neigh.{dev}.proxy_delay=0')
        sh('ip', 'route', 'add', ip, 'dev', dev, 'scope', 'link')
        sh('ip', 'neigh', 'replace', ip, 'lladdr', mac_of(ip).hex(':'), 'dev', dev, 'nud', 'permanent')
        macs[dev] = mac_of_link(dev)
    sh('iptables-restore', inp=cfg['rules'])
    ipip = sh('ip', 'link', 'add', 'ipiptest', 'type', 'ipip', 'remote', cfg['peer'], check=False).returncode == 0
    time.sleep(0.05)
    results = []
    for step in cfg['steps']:
        if 'route' in step:
            sh('ip', 'route', *step['route'])
            results.append({"out": []}); continue
        if 'arp' in step:
            dev = step['arp']
            fr = arp_request(mac_of(step['sender']), step['sender'], step['target'])
        elif 'udp' in step:
            dev = step['udp']
            (s, sp), (d, dp) = step['src'].split(':'), step['dst'].split(':')
            fr = macs[dev] + mac_of(s) + b'\x08\x00' + udp_packet(s, int(sp), d, int(dp))
        else:
            dev = 'eth0'
            o_src, o_dst = step['ipip_in']
            (s, sp), (d, dp) = step['inner'][0].split(':'), step['inner'][1].split(':')
            inner = udp_packet(s, int(sp), d, int(dp), ttl=63)
            fr = mac_of_link('eth0') + mac_of(o_src) + b'\x08\x00' + ip_packet(o_src, o_dst, 4, inner, ttl=63)
        for fd in fds.values():
            while True:
                try: os.read(fd, 65536)
                except BlockingIOError: break
        os.write(fds[dev], fr)
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
        results.append({"out": seen})
    print(json.dumps({"steps": results, "macs": {k: v.hex(':') for k, v in macs.items()},
                      "ipip": ipip,
                      "conntrack": sh('conntrack', '-L', check=False).stdout}))

main()
