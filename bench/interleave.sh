#!/usr/bin/env bash
# interleave.sh: before/after of built trees on the same machine, rounds interleaved (A B A B
# ...) so that drift of the machine lands on all: S1 (64 B, 50 connections, P=1, unix) and S3
# (one client, one request at a time), the compare.sh workloads whose single runs swing most.
# Prints one CSV line per round and row, then medians per tree.
#   [GKV_ROUNDS=3] [GKV_BACKEND=cuda] [GKV_SIZES="4096 65536 1048576 16777216"] [GKV_S1=1] \
#   bench/interleave.sh BUILD_A BUILD_B [BUILD_C ...]
# The builds are CMake trees with gpukvd and gpukv-bench (e.g. those compare.sh leaves); one may
# be given twice, with GKV_FLAGS_A, GKV_FLAGS_B, ... adding gpukvd flags per tree (a daemon with
# a token: set GPUKV_TOKEN_FILE for the clients too).
set -uo pipefail
rounds=${GKV_ROUNDS:-3} backend=${GKV_BACKEND:-cuda}
sizes=${GKV_SIZES:-4096 65536 1048576 16777216}
builds=("$@")
dir=$(mktemp -d /tmp/gkv-interleave-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
csv=$dir/all.csv
: >"$csv"

one_tree() { # label build
    local label=$1 build=$2 flags_var="GKV_FLAGS_$1"
    # shellcheck disable=SC2086 # GKV_FLAGS_<label>: more gpukvd flags for that tree, split
    "$build/server/gpukvd" --socket "$dir/s.sock" --backend "$backend" --maxmemory 8G \
        --log-level warn ${!flags_var:-} 2>>"$dir/gpukvd.log" &
    pid=$!
    for _ in $(seq 400); do "$build/client/gpukv" -s "$dir/s.sock" ping >/dev/null 2>&1 && break; sleep 0.025; done
    local B=$build/bench/gpukv-bench url=unix:$dir/s.sock out
    for op in SET GET; do
        [ "${GKV_S1:-1}" = 1 ] || break
        r=1:0; [ $op = GET ] && r=0:1
        out=$("$B" --csv --target gpukv --url "$url" --clients 50 --threads 2 --pipeline 1 --size 64 \
            --keys 100000 --ratio $r --seconds 3 2>/dev/null | head -1)
        echo "$label,S1 $op 64 B ops/s,$(echo "$out" | cut -d, -f1)" | tee -a "$csv"
    done
    for size in $sizes; do
        reqs=$((2000000000 / size)); [ $reqs -gt 20000 ] && reqs=20000
        for op in SET GET; do
            r=1:0 pf=--no-prefill; [ $op = GET ] && { r=0:1; pf=; }
            out=$("$B" --csv --target gpukv --url "$url" --clients 1 --threads 1 --size $size --keys 1 \
                --ratio $r --requests $reqs --warmup 0 $pf 2>/dev/null | head -1)
            echo "$label,S3 $op $size B median us,$(echo "$out" | cut -d, -f2)" | tee -a "$csv"
        done
    done
    kill -TERM $pid; wait $pid 2>/dev/null; pid=
}

labels=(A B C D E F)
for i in $(seq "$rounds"); do
    for j in "${!builds[@]}"; do one_tree "${labels[$j]}" "${builds[$j]}"; done
done
echo "medians (first tree A):"
for j in "${!builds[@]}"; do echo "${labels[$j]} = ${builds[$j]}"; done
python3 - "$csv" <<'EOF'
import csv, statistics, sys
rows = {}
for label, name, v in csv.reader(open(sys.argv[1])):
    rows.setdefault(name, {}).setdefault(label, []).append(float(v or 0))
for name, d in rows.items():
    med = {k: statistics.median(v) for k, v in sorted(d.items())}
    a = med.get("A", 0)
    print(f"{name}: " + "  ".join(
        f"{k} {m:.1f}" + (f" ({m / a:.3f}x A)" if k != "A" and a else "") for k, m in med.items()))
EOF
