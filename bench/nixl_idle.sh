#!/usr/bin/env bash
# bench/nixl_idle.sh: issue 35's open question from session 37 (RESULTS.md): a remote read
# that follows an idle pause runs slower (1 GiB 0.72x with no pause, 0.58x after 200 ms), not
# because of the GPUs' clocks nor the progress thread. Hypothesis: the host threads' wake-ups
# (the loops', the cluster's workers', UCX's) out of deep CPU idle states. Test: the same
# reads after a 200 ms pause, four ways, alternating, in two rounds:
#   plain    the daemons as they are
#   busy     every node with --busy-poll 200 (its loop spins 200 us before it sleeps)
#   cstate   /dev/cpu_dma_latency held at 0 for the run (no deep idle states on any core;
#            the kernel's PM QoS, undone when the holder exits)
#   both     busy and cstate
# and once each plain and cstate with no pause. If cstate closes the gap, the wake-ups are the
# cause and the daemon can hold the same request itself (a flag), or spin where it waits.
# On a machine with two GPUs, set up as for bench/nixl_device.sh (carry .device and .nixl):
#   source .device/env.sh && bench/nixl_idle.sh
# Outputs go to $OUT (or /tmp); each step has a time limit and its processes are killed after it.
set -uo pipefail
out=${OUT:-/tmp}
source "$(dirname "$0")/device_setup.sh" || exit 1
mkdir -p /tmp/nixl && tar xJf .nixl/nixl-site.tar.xz -C /tmp/nixl || exit 1
holder=
hold_cstates() { # writes 0 to /dev/cpu_dma_latency and keeps it open until killed
    python3 -c 'import os, struct, time
fd = os.open("/dev/cpu_dma_latency", os.O_WRONLY)
os.write(fd, struct.pack("i", 0))
time.sleep(3600)' &
    holder=$!
    sleep 0.5
    kill -0 "$holder" 2>/dev/null || { echo "cannot hold /dev/cpu_dma_latency"; holder=; }
}
release_cstates() { [ -n "$holder" ] && kill "$holder" 2>/dev/null; wait "$holder" 2>/dev/null; holder=; }
trap 'release_cstates; pkill -9 gpukvd; pkill -9 etcd' EXIT
one() { # NAME SETTLE_MS: one nixl_bench run; prints its rows
    local name=$1 settle=$2 args=
    case $name in busy | both) args="--busy-poll 200" ;; esac
    case $name in cstate | both) hold_cstates ;; esac
    GKV_NODE_ARGS="$args" PYTHONUNBUFFERED=1 timeout -k 2 120 python3 bench/nixl_bench.py \
        /tmp/after/server/gpukvd /tmp/nixl/site --nixl-only --sizes 64M,1G --rounds 5 \
        --settle "$settle" >"$out/idle_${name}_${settle}_$3.md" 2>&1
    release_cstates
    pkill -9 gpukvd
    pkill -9 etcd
    echo "== $name, settle $settle ms (round $3)"
    grep -E "^\| (64M|1G) |rror" "$out/idle_${name}_${settle}_$3.md" | cut -c1-100
}
for r in 1 2; do
    for name in plain busy cstate both; do
        one "$name" 200 "$r"
    done
done
one plain 0 1
one cstate 0 1
