#!/usr/bin/env bash
# device_run.sh: on the GPU machine, in one go: build with CUDA, install the Python package, run
# the GPU tests (C and Python), then benchmarks against fresh gpukvds (cuda backend). Logs go to
# $OUT (or /tmp).
#   source .device/env.sh && bench/device_run.sh
# GKV_BENCH: "zc" (zc_bench, three daemon settings), "py" (the Python binding and zarr), "all"
# (default), or "none" (tests only); GKV_TESTS=0 skips the tests; GKV_ZARR_ARGS adds arguments
# to zarr_bench.py (e.g. --gpu-only). Python packages the machine lacks (zarr and its needs)
# travel as wheels in .whl/ (see ../shared/device/README.md).
set -uo pipefail
out=${OUT:-/tmp}
build=${GKV_BUILD_DIR:-/tmp/gkv-build}
what=${GKV_BENCH:-all}
commit=${GKV_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}

# Python: the carried wheels and the gpukv package, built from this checkout, in one site dir.
site=/tmp/gkv-site
python=$(command -v python3)
{
    if ls .whl/*.whl >/dev/null 2>&1; then
        python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
            --target "$site" .whl/*.whl
    fi
    python3 -m pip install -q --no-index --no-deps --no-build-isolation --no-cache-dir \
        --upgrade --target "$site" ./client/python
} >"$out/python-install.log" 2>&1 || { echo "python package: install failed"; tail -30 "$out/python-install.log"; python=; }
export PYTHONPATH=$site${PYTHONPATH:+:$PYTHONPATH}

cmake -S . -B "$build" -G Ninja -DGKV_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
    -DGKV_PYTHON="$python" >"$out/configure.log" 2>&1 || { tail -30 "$out/configure.log"; exit 1; }
cmake --build "$build" >"$out/build.log" 2>&1 || { grep -E "error" "$out/build.log" | head -30; exit 1; }
if [ "${GKV_TESTS:-1}" = 0 ]; then
    echo "GKV_TESTS=0: no tests"
else
    (cd "$build" && ctest -L gpu -V >"$out/ctest-gpu.log" 2>&1; echo "ctest -L gpu exit $?")
    grep -E "^[0-9]+: (cuda:|large value|10000|100 GPU|[0-9]+%: Checks)|Test +#|tests passed|^[0-9]+: .*(passed|failed|skipped|error)" "$out/ctest-gpu.log"
fi
[ "$what" = none ] && exit 0

dir=$(mktemp -d /tmp/gkv-bench-XXXXXX)
# start_daemon [GPUKVD ARGS...]: a fresh gpukvd (cuda backend) on $dir/s.sock.
start_daemon() {
    "$build/server/gpukvd" --socket "$dir/s.sock" --backend cuda --maxmemory 8G "$@" \
        2>>"$out/gpukvd-bench.log" &
    pid=$!
    for _ in $(seq 200); do "$build/client/gpukv" -s "$dir/s.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
}
stop_daemon() { kill -TERM $pid; wait $pid; echo "gpukvd exit $?"; }
# bench_with LABEL OUTFILE [GPUKVD ARGS...]: zc_bench against a fresh gpukvd.
bench_with() {
    local label=$1 file=$2
    shift 2
    start_daemon "$@"
    echo "$label"
    "$build/bench/zc_bench" "unix:$dir/s.sock" | tee "$out/$file"
}
: >"$out/gpukvd-bench.log"
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader)
if [ "$what" = all ] || [ "$what" = zc ]; then
    bench_with "zc_bench on $gpu, commit $commit" zc_bench.md
    "$build/client/gpukv" -s "$dir/s.sock" map bench/small
    stop_daemon
    # The same with --busy-poll: the daemon polls instead of sleeping between requests.
    bench_with "zc_bench with gpukvd --busy-poll 200" zc_bench_busy.md --busy-poll 200
    stop_daemon
    # Once more with a busy-poll window longer than a 1 GiB copy: is the time around the copy
    # the daemon waking from idle?
    bench_with "zc_bench with gpukvd --busy-poll 1000" zc_bench_busy1000.md --busy-poll 1000
    stop_daemon
fi
if { [ "$what" = all ] || [ "$what" = py ]; } && [ -n "$python" ]; then
    start_daemon
    echo "py_bench on $gpu, commit $commit"
    "$python" bench/py_bench.py "unix:$dir/s.sock" --zc-bench "$build/bench/zc_bench" | tee "$out/py_bench.md"
    stop_daemon
    start_daemon --maxmemory 16G
    echo "zarr_bench on $gpu, commit $commit"
    "$python" bench/zarr_steps.py "unix:$dir/s.sock" | tee "$out/zarr_steps.md"
    "$python" bench/zarr_bench.py "unix:$dir/s.sock" --gpu --profile ${GKV_ZARR_ARGS:-} |
        tee "$out/zarr_bench.md"
    stop_daemon
fi
