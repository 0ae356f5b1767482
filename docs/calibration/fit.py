"""Fits docs/calibration/sync-cost.csv to nfsim's cost model and prints the fit.

python3 docs/calibration/fit.py docs/calibration/sync-cost.csv

Each operation's time is modelled as fixed + a*x + b*x^2 nanoseconds, where x is
`lines + existing_rules` for the restores (the payload's lines plus the rules already
loaded, which iptables-nft and nft read back before committing) and `entries` (list) or
`deletes` (deletes) for the conntrack reconciler. The fit minimises the squared *relative*
error (each point weighted by 1/ns^2), so 100 Services count as much as 20,000; terms that
come out negative are dropped and the rest refitted. Where a size was measured more than
once the fastest run is fitted (the machine is shared: the slower runs waited for the CPU
behind other builds), and the spread of the runs is printed beside it. Prints, per operation, the three
coefficients (the Rust table in src/kubeproxy/sync_cost.rs) and every point's measured and
modelled time.
"""
import csv
import sys


def solve(a, b):
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(m[r][c]))
        m[c], m[p] = m[p], m[c]
        if abs(m[c][c]) < 1e-300:
            return None
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                for k in range(c, n + 1):
                    m[r][k] -= f * m[c][k]
    return [m[i][n] / m[i][i] for i in range(n)]


def fit(points, terms):
    # Weighted least squares on the chosen terms (0: fixed, 1: x, 2: x^2).
    feats = lambda x: [[1.0, x, x * x][t] for t in terms]
    k = len(terms)
    ata = [[0.0] * k for _ in range(k)]
    atb = [0.0] * k
    for x, y in points:
        f = [v / y for v in feats(x)]
        for i in range(k):
            atb[i] += f[i]
            for j in range(k):
                ata[i][j] += f[i] * f[j]
    sol = solve(ata, atb)
    coef = [0.0, 0.0, 0.0]
    for t, v in zip(terms, sol or []):
        coef[t] = v
    return coef


def model(points):
    terms = [0, 1, 2]
    while True:
        coef = fit(points, terms)
        neg = [t for t in terms if coef[t] < 0]
        if not neg:
            return coef
        terms = [t for t in terms if t not in neg]


def main():
    rows = list(csv.DictReader(open(sys.argv[1])))
    ops = []
    for r in rows:
        if r["op"] not in ops:
            ops.append(r["op"])
    for op in ops:
        pts = []
        for r in rows:
            if r["op"] != op:
                continue
            if op.startswith("ct-list"):
                x = int(r["entries"])
            elif op.startswith("ct-"):
                x = int(r["deletes"])
            else:
                x = int(r["lines"]) + int(r["existing_rules"])
            pts.append((x, int(r["ns"])))
        runs = {}
        for x, y in pts:
            runs.setdefault(x, []).append(y)
        pts = [(x, min(ys)) for x, ys in sorted(runs.items())]
        c = model(pts)
        errs = [abs(c[0] + c[1] * x + c[2] * x * x - y) / y for x, y in pts]
        print(f"{op}: fixed {c[0]:.0f} ns, {c[1]:.4f} ns/unit, {c[2]:.3e} ns/unit^2; "
              f"max error {100 * max(errs):.0f} %, mean {100 * sum(errs) / len(errs):.0f} %")
        for (x, y), e in zip(pts, errs):
            m = c[0] + c[1] * x + c[2] * x * x
            spread = max(runs[x]) / min(runs[x])
            print(f"    x={x:>7} measured {y / 1e6:>10.1f} ms  modelled {m / 1e6:>10.1f} ms  ({100 * e:.0f} %)"
                  f"  runs {len(runs[x])}, slowest {spread:.2f}x")


main()
