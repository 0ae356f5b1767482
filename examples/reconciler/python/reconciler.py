#!/usr/bin/env python3
"""A stale-UDP conntrack reconciler for nfsim, in Python (standard library only).

It speaks nfsim's reconciler protocol (docs/reconciler-protocol.md) on stdin/stdout and does
what kube-proxy's current cleanup does (pkg/proxy/conntrack/cleanup.go): after each sync, for
every UDP service port, list the entries to its cluster IP and port and delete those whose
reply source (the endpoint the flow was DNAT'd to) is not a serving endpoint of that port,
including when the port has no serving endpoint at all.

Run by a scenario with
    kubeProxy: {cleanup: {command: [python3, examples/reconciler/python/reconciler.py]}}
Diagnostics go to stderr (nfsim quotes its tail if the process fails).
"""
import json
import sys


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


def recv():
    line = sys.stdin.readline()
    if not line:
        sys.exit(0)  # nfsim closed our stdin: the run is over
    return json.loads(line)


def request(msg, expect):
    send(msg)
    answer = recv()
    if answer.get("type") != expect:
        print(f"expected {expect}, got {answer!r}", file=sys.stderr)
        sys.exit(2)
    return answer


def reconcile(sync):
    for svc in sync["services"]:
        if svc["protocol"] != "UDP":
            continue
        serving = {(e["ip"], e["port"]) for e in svc["endpoints"] if e["serving"]}
        ip, port = svc["clusterIP"], svc["port"]
        listed = request(
            {"type": "list", "filter": f"-p udp --orig-dst {ip} --orig-port-dst {port}"},
            "entries",
        )
        stale = sorted(
            {(e["reply"]["src"], e["reply"]["sport"]) for e in listed["entries"]} - serving
        )
        for ep_ip, ep_port in stale:
            request(
                {
                    "type": "delete",
                    "filter": f"-p udp --orig-dst {ip} --orig-port-dst {port} "
                    f"--reply-src {ep_ip} --reply-port-src {ep_port}",
                    "reason": f"{ep_ip}:{ep_port} is not a serving endpoint of {svc['name']}",
                },
                "deleted",
            )
    send({"type": "done"})


def main():
    while True:
        msg = recv()
        if msg.get("type") != "sync":
            print(f"unexpected message {msg!r}", file=sys.stderr)
            sys.exit(2)
        reconcile(msg)


if __name__ == "__main__":
    main()
