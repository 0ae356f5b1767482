#!/bin/sh
# Times kube-proxy's writes and its conntrack reconciler on the real kernel, each run in a
# private network namespace (`unshare -n`, as root), and prints the CSV rows of
# docs/calibration/sync-cost.csv:
#
#   docs/calibration/calibrate.sh "100 1000 5000 20000" "100 1000 5000" > rows.csv
#
# The first list is the Service counts for `nft -f` and the conntrack runs, the second for
# `iptables-restore` (iptables-nft grows much faster than linearly; 20,000 Services take
# longer than a session). Payloads come from `cargo run --example sync_cost_payloads`
# (nfsim's own renderer). Columns: op, services, lines, chains, rules, elements (of the
# payload), existing_rules (rules loaded before it), entries (conntrack entries listed),
# deletes, ns (wall clock of the operation).
set -eu
NFT_NS=${1:-"100 1000 5000 20000"}
IPT_NS=${2:-"100 1000 5000"}
here=$(dirname "$0")
for tool in unshare iptables iptables-restore nft python3 ip; do
    command -v "$tool" >/dev/null || { echo "calibrate.sh: skipped: $tool missing" >&2; exit 0; }
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ALL=$(printf '%s\n' $NFT_NS $IPT_NS | sort -nu | tr '\n' ' ')
cargo run -q --example sync_cost_payloads -- "$dir" $ALL > "$dir/shapes"
shape() { awk -v n="$1" '$1 == n { print $2 "," $3 "," $4 "," $5 }' "$dir/shapes"; }
rules() { awk -v n="$1" '$1 == n { print $4 }' "$dir/shapes"; }
echo "op,services,lines,chains,rules,elements,existing_rules,entries,deletes,ns"
for n in $IPT_NS; do
    out=$(unshare -n sh -c '
        d=$1; n=$2
        ip link set lo up
        t0=$(date +%s%N); iptables-restore --noflush < "$d/ipt-full-$n"; t1=$(date +%s%N)
        sh "$d/ipt-jumps-$n" >/dev/null
        iptables-restore --noflush < "$d/ipt-partial-$n"; t2=$(date +%s%N)
        echo $((t1 - t0)) $((t2 - t1))' sh "$dir" "$n")
    set -- $out
    echo "iptables-restore-full,$n,$(shape ipt-full-$n),0,0,0,$1"
    echo "iptables-restore-partial,$n,$(shape ipt-partial-$n),$(rules ipt-full-$n),0,0,$2"
done
for n in $NFT_NS; do
    out=$(unshare -n sh -c '
        d=$1; n=$2
        t0=$(date +%s%N); nft -f "$d/nft-full-$n"; t1=$(date +%s%N)
        nft -f "$d/nft-incr-$n"; t2=$(date +%s%N)
        echo $((t1 - t0)) $((t2 - t1))' sh "$dir" "$n")
    set -- $out
    echo "nft-full,$n,$(shape nft-full-$n),0,0,0,$1"
    echo "nft-incremental,$n,$(shape nft-incr-$n),$(rules nft-full-$n),0,0,$2"
done
# The reconciler: a table of 2n entries (two UDP flows per Service, as a DNS storm leaves
# them), n/2 deleted one request each and n/2 batched.
for n in $NFT_NS; do
    e=$((2 * n)); m=$((n / 2))
    set -- $(unshare -n python3 "$here/ct_netlink.py" "$e" "$m")
    echo "ct-list,$n,0,0,0,0,0,$2,0,$3"
    echo "ct-delete-each,$n,0,0,0,0,0,$1,$4,$5"
    echo "ct-delete-batched,$n,0,0,0,0,0,$1,$4,$6"
done
