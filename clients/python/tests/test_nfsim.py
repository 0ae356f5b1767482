"""The Python client's examples: uniform endpoint selection over random Services, and a
reconciler written here acting on a simulated node through the stale-DNS incident.

Run with ``python3 -m unittest discover -s clients/python`` (pytest collects them too).
NFSIM_BIN names the nfsim binary (else nfsim on PATH); without one the tests skip.
"""

import os
import random
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

import nfsim  # noqa: E402


def have_nfsim():
    try:
        nfsim.binary()
        return True
    except FileNotFoundError:
        return False


# The chi-square quantile at p = 0.001 for 1..9 degrees of freedom.
CHI2_999 = [10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88]


@unittest.skipUnless(have_nfsim(), "nfsim not found: set NFSIM_BIN")
class Uniformity(unittest.TestCase):
    def test_endpoint_frequencies_match_the_exact_probabilities(self):
        rng = random.Random(32)
        with nfsim.Session() as s:
            for k in range(4):
                n = rng.randint(1, 8)
                ip = "10.96.%d.%d" % (rng.randint(1, 200), rng.randint(1, 250))
                port = rng.choice([53, 80, 443, 8080])
                eps = ["10.244.%d.%d" % (1 + i // 200, 10 + i % 200) for i in range(n)]
                s.node(objects=nfsim.service_yaml("svc%d" % k, ip, port, "TCP", eps), seed=k + 1)
                chain = nfsim.svc_chain_of(s.rules(), ip, port)
                sel = s.selection(chain)
                probs = {}
                for c in sel["choices"]:
                    ep = c["endpoint"].rsplit(":", 1)[0]
                    probs[ep] = probs.get(ep, 0.0) + c["probability"]["float"]
                self.assertEqual(sorted(probs), sorted(eps))
                self.assertEqual(sel["fallThrough"]["fraction"], "0")
                self.assertAlmostEqual(sum(probs.values()), 1.0, places=12)
                for p in probs.values():
                    # kube-proxy's 1/(n-i) probabilities, quantized to 2^-31 by the kernel.
                    self.assertAlmostEqual(p, 1.0 / n, places=8)
                flows = 300
                seen = {ep: 0 for ep in eps}
                for i in range(flows):
                    src = "10.244.0.%d:%d" % (2 + i % 250, 20000 + i)
                    f = s.flow("tcp %s -> %s:%d SYN" % (src, ip, port))
                    self.assertEqual(f["fate"], "transmitted", f)
                    seen[f["endpoint"].rsplit(":", 1)[0]] += 1
                if n > 1:
                    chi2 = sum((seen[e] - flows * probs[e]) ** 2 / (flows * probs[e]) for e in eps)
                    self.assertLess(chi2, CHI2_999[n - 2], (seen, probs))
                else:
                    self.assertEqual(seen[eps[0]], flows)


DNS_IP, CLIENT = "10.96.0.10", "10.244.0.9:40000"
PODS = ["10.244.1.5", "10.244.2.5"]
QUERY = "udp %s -> %s:53" % (CLIENT, DNS_IP)


def reconcile(s, serving):
    """A stale-UDP reconciler: delete the entries to the DNS Service whose endpoint (the
    reply's source) is not serving. Returns how many it deleted."""
    to_service = "-p udp --orig-dst %s --orig-port-dst 53" % DNS_IP
    deleted = 0
    for e in s.conntrack(to_service)["entries"]:
        ep = e["reply"]["src"]
        if ep not in serving:
            deleted += s.delete("%s --reply-src %s --reply-port-src 53" % (to_service, ep))
    return deleted


@unittest.skipUnless(have_nfsim(), "nfsim not found: set NFSIM_BIN")
class StaleDns(unittest.TestCase):
    def test_reconciler_clears_the_stale_udp_entry(self):
        with nfsim.Session() as s:
            # kube-proxy without any stale-entry cleanup: the reconciler is ours.
            s.node(objects=nfsim.service_yaml("dns", DNS_IP, 53, "UDP", PODS), release="none")
            first = s.flow(QUERY, at="1s")["endpoint"].rsplit(":", 1)[0]
            live = [p for p in PODS if p != first]
            # The pod the client talks to stops serving; kube-proxy syncs.
            s.apply(objects=nfsim.service_yaml("dns", DNS_IP, 53, "UDP", PODS, not_serving=[first]), at="2s")
            s.advance("3s")
            # The fixed-port client is still sent to it: the stale UDP entry.
            self.assertEqual(s.flow(QUERY, at="4s")["endpoint"], first + ":53")
            self.assertEqual(len(s.conntrack("-p udp --reply-src " + first)["entries"]), 1)
            # The reconciler deletes it (and nothing else)...
            self.assertEqual(reconcile(s, live), 1)
            self.assertEqual(reconcile(s, live), 0)
            # ...and the next query reaches the live pod.
            after = s.flow(QUERY, at="5s")
            self.assertEqual(after["endpoint"], live[0] + ":53")
            self.assertEqual(after["entry"]["reply"]["src"], live[0])


@unittest.skipUnless(have_nfsim(), "nfsim not found: set NFSIM_BIN")
class Errors(unittest.TestCase):
    def test_a_bad_request_is_located_and_the_session_goes_on(self):
        with nfsim.Session() as s:
            with self.assertRaises(nfsim.NfsimError) as cm:
                s.flow("udp 1.2.3.4:1 -> 5.6.7.8:9")
            self.assertEqual((cm.exception.kind, cm.exception.line), ("state", 2))
            s.node(objects=nfsim.service_yaml("dns", DNS_IP, 53, "UDP", PODS))
            with self.assertRaises(nfsim.NfsimError) as cm:
                s.flow("udp 1.2.3.4 -> 5.6.7.8:9")
            self.assertEqual((cm.exception.kind, cm.exception.field), ("bad_value", "packet"))
            self.assertEqual(s.flow(QUERY)["fate"], "transmitted")


if __name__ == "__main__":
    unittest.main()
