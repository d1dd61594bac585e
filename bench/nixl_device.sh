#!/usr/bin/env bash
# bench/nixl_device.sh: issue 35 on a GPU machine with two GPUs (nvidia-h200-x2 or
# nvidia-h100-x2), after `../shared/device/stage.sh` (with etcd-server, libcjson1, libcjson-dev
# and libcurl4-openssl-dev in .device/debs/) and with NIXL packed by bench/nixl_pack.py into
# .nixl/nixl-site.tar.xz (carry .device and .nixl):
#   source .device/env.sh && bench/nixl_device.sh
# Builds (device_setup.sh), runs NIXL alone (nixl_xfer, with GKV_NIXL_XFER), ctest -L gpu
# (unless GKV_BENCH_ONLY=1), then nixl_bench.py: remote reads through NIXL
# and over TCP against cudaMemcpyPeerAsync, the first read of a new peer, 16 readers at once.
set -uo pipefail
out=${OUT:-/tmp}
source "$(dirname "$0")/device_setup.sh" || exit 1
mkdir -p /tmp/nixl && tar xJf .nixl/nixl-site.tar.xz -C /tmp/nixl || exit 1
nvidia-smi topo -m >"$out/topo.txt" 2>&1
if [ -n "${GKV_NIXL_XFER:-}" ]; then # NIXL alone: GKV_NIXL_XFER="--sizes 64M,256M --conc 1,2,4,8"
    timeout 200 /tmp/after/bench/nixl_xfer /tmp/nixl/site $GKV_NIXL_XFER 2>&1 | tee "$out/nixl_xfer.md"
fi
if [ "${GKV_BENCH_ONLY:-0}" != 1 ]; then
    (cd /tmp/after && timeout 420 ctest -L gpu --output-on-failure >"$out/ctest-gpu.log" 2>&1)
    grep -E "tests passed|tests failed" "$out/ctest-gpu.log"
fi
PYTHONUNBUFFERED=1 timeout 420 python3 bench/nixl_bench.py /tmp/after/server/gpukvd /tmp/nixl/site \
    ${GKV_NIXL_BENCH_ARGS:-} 2>&1 | tee "$out/nixl_bench.md"
for f in /tmp/gkv-nixlbench-*/*.log; do echo "== $f"; grep -iE "plane|nixl|error|warn|ucx|proto|cuda_ipc|cuda_copy" "$f" | head -60; done >"$out/daemon-logs.txt" 2>&1
# GKV_NIXL_TUNE="DEPTH:CHUNK:PTHR_US:PARTS ..." (CHUNK in bytes, PTHR_US NIXL's progress
# thread's delay, PARTS an owner's writes per chunk): the 1 GiB row again for each setting.
for t in ${GKV_NIXL_TUNE:-}; do
    IFS=: read -r depth chunk pthr parts <<<"$t"
    echo "== depth $depth, chunk $chunk, progress delay ${pthr:-100} us, parts ${parts:-2}"
    GPUKV_NIXL_DEPTH=$depth GPUKV_NIXL_CHUNK=$chunk GPUKV_NIXL_PTHR_US=${pthr:-100} \
        GPUKV_NIXL_PARTS=${parts:-2} timeout 120 python3 bench/nixl_bench.py \
        /tmp/after/server/gpukvd /tmp/nixl/site --nixl-only --sizes 1G --rounds 3 2>&1 | grep -E "^\| 1G|so far"
done | tee "$out/nixl_tune.md"
# GKV_NIXL_MODES="stage push:4 ...": the 64 MiB and 1 GiB rows again with GPUKV_NIXL_MODE set
# to each (after a colon: GPUKV_NIXL_OWN, an owner's slots per PUSH).
for m in ${GKV_NIXL_MODES:-}; do
    echo "== mode $m"
    GPUKV_NIXL_MODE=${m%%:*} GPUKV_NIXL_OWN=$([ "${m#*:}" != "$m" ] && echo "${m#*:}") timeout 120 python3 bench/nixl_bench.py /tmp/after/server/gpukvd /tmp/nixl/site \
        --nixl-only --sizes 64M,1G --rounds 3 2>&1 | grep -E "^\| (64M|1G)|pull alone"
done | tee "$out/nixl_modes.md"
# GKV_NIXL_ENVS="GPUKV_NIXL_DEPTH=4 GPUKV_NIXL_DEPTH=8,GPUKV_NIXL_PARTS=1 ...": the 64 MiB
# and 1 GiB rows again under each set of variables (commas between a set's variables).
for e in ${GKV_NIXL_ENVS:-}; do
    echo "== $e"
    env ${e//,/ } timeout 120 python3 bench/nixl_bench.py /tmp/after/server/gpukvd /tmp/nixl/site \
        --nixl-only --sizes 64M,1G --rounds 3 2>&1 | grep -E "^\| (64M|1G)|pull alone|so far"
done | tee "$out/nixl_envs.md"
