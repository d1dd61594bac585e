#!/usr/bin/env bash
# bench/nixl_probe.sh: issue 35's open question on the GPU's own clock (RESULTS.md, sessions
# 35-36): why UCX's NVLink writes run slower inside gpukvd (~116 us per 32 MiB) than between
# two bare processes (nixl_xfer, ~92 us). On a machine with two GPUs, set up as for
# bench/nixl_device.sh (carry .device and .nixl):
#   source .device/env.sh && bench/nixl_probe.sh
# Builds (device_setup.sh), then, each under libgkv_cutrace.so and summed by cutrace.py:
# nixl_xfer's staged writes as they are, the same inside gpukvd's own cuda backend
# (--gkv-backend: its arenas, values and arena copies, without the data plane's protocol), and
# the daemons' 1 GiB pull (which now also times the owner's copies into its arena). Outputs
# go to $OUT (or /tmp); every step has a time limit and its processes are killed after it.
set -uo pipefail
out=${OUT:-/tmp}
source "$(dirname "$0")/device_setup.sh" || exit 1
mkdir -p /tmp/nixl && tar xJf .nixl/nixl-site.tar.xz -C /tmp/nixl || exit 1
ct=/tmp/after/bench/libgkv_cutrace.so
summary() { timeout 30 python3 bench/cutrace.py "$1" --min-bytes "${2:-1G}" | tail -4 | cut -c1-600; }
for r in 1 2; do
    for how in "" --gkv-backend; do
        echo "== round $r: nixl_xfer --staged 2 ${how:-(cudaMalloc and cudaMemcpyAsync)}"
        rm -f /tmp/cx.*
        LD_PRELOAD=$ct CUTRACE=/tmp/cx timeout -k 2 60 /tmp/after/bench/nixl_xfer /tmp/nixl/site \
            --sizes 64M --conc 4 --rounds 32 --staged 2 --op write $how >"$out/xfer_${r}${how}.md" 2>&1
        pkill -9 -f nixl_xfer
        grep -E "WRITE|rror|fail" "$out/xfer_${r}${how}.md" | head -3
        summary /tmp/cx
    done
    echo "== round $r: the daemons' pull of 1 GiB"
    rm -f /tmp/ct.*
    LD_PRELOAD=$ct CUTRACE=/tmp/ct PYTHONUNBUFFERED=1 timeout -k 2 90 python3 bench/nixl_bench.py \
        /tmp/after/server/gpukvd /tmp/nixl/site --nixl-only --sizes 1G --rounds 5 >"$out/pull_$r.md" 2>&1
    pkill -9 gpukvd
    pkill -9 etcd
    grep -E "^\| 1G|pull alone|rror" "$out/pull_$r.md" | head -2 | cut -c1-120
    summary /tmp/ct
    tar czf "$out/traces_$r.tgz" /tmp/cx.* /tmp/ct.* 2>/dev/null
done
