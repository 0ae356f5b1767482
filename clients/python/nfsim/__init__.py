"""nfsim from Python: a client of ``nfsim serve`` (docs/serve-protocol.md).

Standard library only. ``Session()`` starts ``nfsim serve`` (the binary named by the
``NFSIM_BIN`` environment variable, else ``nfsim`` on ``PATH``), says ``hello``, and turns
each call into one request line and its answer::

    with nfsim.Session() as s:
        s.node(objects=open("kube-dns.yaml").read())
        f = s.flow("udp 10.244.0.9:40000 -> 10.96.0.10:53", at="1s")
        print(f["fate"], f["endpoint"])

An error response raises :class:`NfsimError` (its ``kind``, ``field``, ``expected`` and
request ``line``); the session goes on.
"""

import json
import os
import shutil
import subprocess

PROTOCOL_VERSION = 1

__all__ = ["Session", "NfsimError", "PROTOCOL_VERSION", "service_yaml", "svc_chain_of"]


class NfsimError(Exception):
    """An error response: the request at ``line`` was refused."""

    def __init__(self, response):
        err = response.get("error", {})
        self.response = response
        self.line = response.get("line")
        self.op = response.get("op")
        self.kind = err.get("kind")
        self.field = err.get("field")
        self.expected = err.get("expected")
        self.message = err.get("message")
        super().__init__(
            "request line %s (%s): %s [%s, field %s; expected %s]"
            % (self.line, self.op, self.message, self.kind, self.field, self.expected)
        )


def binary():
    """The nfsim binary: $NFSIM_BIN, else nfsim on PATH."""
    b = os.environ.get("NFSIM_BIN") or shutil.which("nfsim")
    if not b:
        raise FileNotFoundError("nfsim not found: set NFSIM_BIN or put nfsim on PATH")
    return b


class Session:
    """One ``nfsim serve`` process, after its hello."""

    def __init__(self, binary_path=None):
        self._proc = subprocess.Popen(
            [binary_path or binary(), "serve"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            encoding="utf-8",
        )
        self.hello = self.request("hello", version=PROTOCOL_VERSION)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        """Ends the session (closes stdin) and waits for the process."""
        if self._proc.poll() is None:
            self._proc.stdin.close()
            self._proc.wait(timeout=30)
        self._proc.stdout.close()

    def request(self, op, **fields):
        """Sends one request (fields whose value is None are left out); returns the answer or
        raises NfsimError."""
        req = {"op": op}
        req.update({k: v for k, v in fields.items() if v is not None})
        self._proc.stdin.write(json.dumps(req, sort_keys=True) + "\n")
        self._proc.stdin.flush()
        line = self._proc.stdout.readline()
        if not line:
            raise EOFError("nfsim serve ended before answering %r" % op)
        resp = json.loads(line)
        if not resp.get("ok"):
            raise NfsimError(resp)
        return resp

    def send_raw(self, line):
        """Sends one line as it is, returns the parsed answer (ok or not): for protocol tests."""
        self._proc.stdin.write(line + "\n")
        self._proc.stdin.flush()
        return json.loads(self._proc.stdout.readline())

    # The requests, one method each (docs/serve-protocol.md names their fields).
    def node(self, **fields):
        return self.request("node", **fields)

    def scenario(self, file=None, yaml=None, **fields):
        return self.request("scenario", file=file, yaml=yaml, **fields)

    def state(self, **fields):
        return self.request("state", **fields)

    def flow(self, packet, at=None, **fields):
        return self.request("flow", packet=packet, at=at, **fields)

    def sightings(self, flow_id):
        return self.request("sightings", flow=flow_id)["sightings"]

    def advance(self, at):
        return self.request("advance", at=at)

    def conntrack(self, filter="", node=None):
        return self.request("conntrack", filter=filter, node=node)

    def delete(self, filter, at=None):
        return self.request("delete", filter=filter, at=at)["count"]

    def rules(self, format="iptables", node=None):
        return self.request("rules", format=format, node=node)["text"]

    def selection(self, chain, table=None):
        return self.request("selection", chain=chain, table=table)

    def restore(self, payload, format="iptables", noflush=None, at=None):
        return self.request("restore", payload=payload, format=format, noflush=noflush, at=at)

    def apply(self, objects=None, delete=None, at=None):
        return self.request("apply", objects=objects, delete=delete, at=at)


def service_yaml(name, cluster_ip, port, protocol, endpoints, not_serving=()):
    """A Service default/NAME and its EndpointSlice: ``endpoints`` a list of IPs, those in
    ``not_serving`` with ready and serving false."""
    out = [
        "apiVersion: v1",
        "kind: Service",
        "metadata: {name: %s, namespace: default}" % name,
        "spec:",
        "  clusterIP: %s" % cluster_ip,
        "  ports: [{name: p%d, port: %d, protocol: %s, targetPort: %d}]" % (port, port, protocol, port),
        "---",
        "apiVersion: discovery.k8s.io/v1",
        "kind: EndpointSlice",
        "metadata:",
        "  name: %s-1" % name,
        "  namespace: default",
        "  labels: {kubernetes.io/service-name: %s}" % name,
        "addressType: IPv4",
        "endpoints:",
    ]
    for ip in endpoints:
        up = "false" if ip in not_serving else "true"
        out.append("  - {addresses: [%s], conditions: {ready: %s, serving: %s}}" % (ip, up, up))
    out.append("ports: [{name: p%d, port: %d, protocol: %s}]" % (port, port, protocol))
    return "\n".join(out) + "\n"


def svc_chain_of(rules_text, cluster_ip, port):
    """The KUBE-SVC chain kube-proxy's KUBE-SERVICES rule sends ``cluster_ip:port`` to."""
    for line in rules_text.splitlines():
        if (
            line.startswith("-A KUBE-SERVICES ")
            and (" -d %s/32 " % cluster_ip) in line
            and (" --dport %d " % port) in line
            and " -j KUBE-SVC-" in line
        ):
            return line.rsplit(" -j ", 1)[1].strip()
    raise KeyError("no KUBE-SERVICES rule for %s:%d" % (cluster_ip, port))
