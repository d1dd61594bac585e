#!/usr/bin/env bash
# device_run.sh: on the GPU machine, in one go: build with CUDA, run the GPU tests, then the
# zero-copy benchmark against a fresh gpukvd (cuda backend). Logs go to $OUT (or /tmp).
#   source .device/env.sh && bench/device_run.sh
set -uo pipefail
out=${OUT:-/tmp}
build=${GKV_BUILD_DIR:-/tmp/gkv-build}
cmake -S . -B "$build" -G Ninja -DGKV_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release >"$out/configure.log" 2>&1 ||
    { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
(cd "$build" && ctest -L gpu -V >"$out/ctest-gpu.log" 2>&1; echo "ctest -L gpu exit $?")
grep -E "^[0-9]+: (cuda:|large value|10000|100 GPU|[0-9]+%: Checks)|Test +#|tests passed" "$out/ctest-gpu.log"
dir=$(mktemp -d /tmp/gkv-bench-XXXXXX)
# bench_with LABEL OUTFILE [GPUKVD ARGS...]: zc_bench against a fresh gpukvd (cuda backend).
bench_with() {
    local label=$1 file=$2
    shift 2
    "$build/server/gpukvd" --socket "$dir/s.sock" --backend cuda --maxmemory 8G "$@" \
        2>>"$out/gpukvd-bench.log" &
    pid=$!
    for _ in $(seq 200); do "$build/client/gpukv" -s "$dir/s.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
    echo "$label"
    "$build/bench/zc_bench" "unix:$dir/s.sock" | tee "$out/$file"
}
stop_daemon() { kill -TERM $pid; wait $pid; echo "gpukvd exit $?"; }
: >"$out/gpukvd-bench.log"
bench_with "zc_bench on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), commit ${GKV_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}" zc_bench.md
"$build/client/gpukv" -s "$dir/s.sock" map bench/small
stop_daemon
# The same with --busy-poll: the daemon polls instead of sleeping between requests.
bench_with "zc_bench with gpukvd --busy-poll 200" zc_bench_busy.md --busy-poll 200
stop_daemon
# Once more with a busy-poll window longer than a 1 GiB copy: is the time around the copy the
# daemon waking from idle?
bench_with "zc_bench with gpukvd --busy-poll 1000" zc_bench_busy1000.md --busy-poll 1000
stop_daemon
