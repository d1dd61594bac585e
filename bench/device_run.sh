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
"$build/server/gpukvd" --socket "$dir/s.sock" --backend cuda --maxmemory 8G 2>"$out/gpukvd-bench.log" &
pid=$!
for _ in $(seq 200); do "$build/client/gpukv" -s "$dir/s.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
echo "zc_bench on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader), commit ${GKV_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
"$build/bench/zc_bench" "unix:$dir/s.sock" | tee "$out/zc_bench.md"
"$build/client/gpukv" -s "$dir/s.sock" map bench/small
kill -TERM $pid; wait $pid; echo "gpukvd exit $?"
# The same with --busy-poll: the daemon polls instead of sleeping between requests.
"$build/server/gpukvd" --socket "$dir/s.sock" --backend cuda --maxmemory 8G --busy-poll 200 \
    2>>"$out/gpukvd-bench.log" &
pid=$!
for _ in $(seq 200); do "$build/client/gpukv" -s "$dir/s.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
echo "zc_bench with gpukvd --busy-poll 200"
"$build/bench/zc_bench" "unix:$dir/s.sock" | tee "$out/zc_bench_busy.md"
kill -TERM $pid; wait $pid; echo "gpukvd exit $?"
# Once more with a busy-poll window longer than a 1 GiB copy: is the time around the copy the
# daemon waking from idle?
"$build/server/gpukvd" --socket "$dir/s.sock" --backend cuda --maxmemory 8G --busy-poll 1000 \
    2>>"$out/gpukvd-bench.log" &
pid=$!
for _ in $(seq 200); do "$build/client/gpukv" -s "$dir/s.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
echo "zc_bench with gpukvd --busy-poll 1000"
"$build/bench/zc_bench" "unix:$dir/s.sock" | tee "$out/zc_bench_busy1000.md"
kill -TERM $pid; wait $pid; echo "gpukvd exit $?"
