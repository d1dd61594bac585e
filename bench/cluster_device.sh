#!/usr/bin/env bash
# bench/cluster_device.sh: on a GPU machine with two GPUs (the device tool's nvidia-h200-x2 or
# nvidia-h100-x2), after `../shared/device/stage.sh` and with these Debian packages copied into
# .device/debs/ (apt-get download etcd-server libcjson1 libcjson-dev libcurl4-openssl-dev):
#   source .device/env.sh && bench/cluster_device.sh
# Points the carried curl/cJSON pkg-config files at /opt/deps, links the machine's own libcurl
# behind Debian's headers, builds Release with CUDA, runs ctest -L gpu, the two-node bench and
# a one-node cluster against no cluster (interleave.sh, A: off, B: a one-node cluster).
set -uo pipefail
out=${OUT:-/tmp}
source "$(dirname "$0")/device_setup.sh" || exit 1
if [ "${GKV_COST_ONLY:-0}" != 1 ]; then # GKV_COST_ONLY=1: the one-node cost alone
    (cd /tmp/after && timeout 480 ctest -L gpu --output-on-failure >"$out/ctest-gpu.log" 2>&1)
    grep -E "tests passed|tests failed" "$out/ctest-gpu.log"
    timeout 400 python3 bench/cluster_bench.py /tmp/after/server/gpukvd --gpus 0,1 --rounds 3000 \
        --large 4K,1M,64M,1G --one-node | tee "$out/cluster_bench.md"
fi
# A one-node cluster against the same daemon without --cluster, with the C benchmark (S1, S3),
# interleaved: both with a token and a TCP listener, so that --cluster is the only difference.
tok=$(mktemp /tmp/gkv-cost-token-XXXXXX)
echo "bench-token-0123456789abcdef0123" >"$tok"
etcd --data-dir /tmp/gkv-cost-etcd --listen-client-urls http://127.0.0.1:23790 \
    --advertise-client-urls http://127.0.0.1:23790 --listen-peer-urls http://127.0.0.1:23791 \
    --initial-advertise-peer-urls http://127.0.0.1:23791 \
    --initial-cluster default=http://127.0.0.1:23791 >"$out/etcd-cost.log" 2>&1 &
epid=$!
trap 'kill $epid 2>/dev/null; rm -f "$tok"' EXIT
sleep 3
GPUKV_TOKEN_FILE=$tok GKV_ROUNDS=${GKV_ROUNDS:-3} GKV_SIZES=${GKV_SIZES:-4096 65536 1048576} \
    GKV_FLAGS_A="--auth-token-file $tok --listen 127.0.0.1:23801" \
    GKV_FLAGS_B="--auth-token-file $tok --listen 127.0.0.1:23802 --cluster etcd://127.0.0.1:23790 --cluster-name cost --node-name solo" \
    timeout 500 bench/interleave.sh /tmp/after /tmp/after | tee "$out/one_node_cost.txt" | tail -12
