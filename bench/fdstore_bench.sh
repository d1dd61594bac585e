#!/usr/bin/env bash
# fdstore_bench.sh: what the fd store (--fd-store, server/fdstore.h) costs and buys, in one run.
# Cost: SETs against one gpukvd without the fd store and one with it (a small service manager
# in Python holds what it stores), side by side with redis-server: compare.sh's S1 (64 B, 50
# clients, P=1 and P=16) and S3 (one client, median request) rows for SET, and 1 MiB SETs from
# 16 clients. Gain: restart to serving after SIGKILL against the GiB stored (the `large` case of
# test_fdstore, which fills, kills, restarts and checks every byte). Appends to RESULTS.md.
#   bench/fdstore_bench.sh [--backend host|cuda] [--seconds S] [--gib "1 4 10"] [--no-append]
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
cd "$root"
backend=host seconds=5 gibs="0.5 1" append=1
args="$*"
while [ $# -gt 0 ]; do
    case $1 in
    --backend) backend=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --gib) gibs=$2; shift ;;
    --no-append) append=0 ;;
    *) echo "usage: $0 [--backend host|cuda] [--seconds S] [--gib \"1 4 10\"] [--no-append]"; exit 2 ;;
    esac
    shift
done
build=${GKV_BUILD_DIR:-$root/build-bench}
cuda=AUTO; [ "$backend" = cuda ] && cuda=ON
gen=Ninja; command -v ninja >/dev/null || gen="Unix Makefiles"
mkdir -p "$build"
cmake -S . -B "$build" -G "$gen" -DCMAKE_BUILD_TYPE=Release -DGKV_WITH_CUDA=$cuda -DGKV_BUILD_TESTS=ON >"$build/configure.log" 2>&1 ||
    { tail -30 "$build/configure.log"; exit 1; }
cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1 || { grep -E "error" "$build/build.log" | head; exit 1; }
B=$build/bench/gpukv-bench
dir=$(mktemp -d /tmp/gkv-fdsb-XXXXXX)
chmod 700 "$dir"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

# The service manager: keeps what is stored, drops what is removed.
cat >"$dir/sm.py" <<'PY'
import array, socket, sys, os
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
kept = {}
while True:
    msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(64 * 4))
    name = ""
    for line in msg.decode(errors="replace").split("\n"):
        if line.startswith("FDNAME="):
            name = line[7:]
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds = array.array("i")
            fds.frombytes(data[: len(data) - len(data) % 4])
            kept.setdefault(name, []).extend(fds)
    if b"FDSTOREREMOVE=1" in msg:
        for fd in kept.pop(name, []):
            os.close(fd)
PY
python3 "$dir/sm.py" "$dir/notify" &
pids+=($!)
redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700 --save "" --appendonly no \
    --logfile "$dir/redis.log" &
pids+=($!)
mm=8G; [ "$backend" = cuda ] && mm=16G
"$build/server/gpukvd" --socket "$dir/off.sock" --backend "$backend" --maxmemory $mm --fd-store no \
    --log-level warn 2>>"$dir/gpukvd.log" &
pids+=($!)
for _ in $(seq 100); do [ -S "$dir/notify" ] && break; sleep 0.05; done
NOTIFY_SOCKET=$dir/notify "$build/server/gpukvd" --socket "$dir/on.sock" --backend "$backend" \
    --maxmemory $mm --fd-store yes --log-level warn 2>>"$dir/gpukvd.log" &
pids+=($!)
for s in off on; do
    for _ in $(seq 400); do "$build/client/gpukv" -s "$dir/$s.sock" ping >/dev/null 2>&1 && break; sleep 0.025; done
done
threads=$(( $(nproc) >= 8 ? 4 : 2 ))
bench() { local out; out=$("$B" --csv "$@" 2>/dev/null | head -1); echo "${out:-0,0,0,0}"; }
field() { echo "$1" | cut -d, -f"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
rows=$dir/rows.md
: >"$rows"
row() { echo "| $* |" >>"$rows"; echo "| $* |"; }

# Throughput rows: requests/s (p99 us); the on/off ratio of requests/s.
for pipe in 1 16; do
    common=(--clients 50 --threads $threads --pipeline $pipe --size 64 --keys 100000 --ratio 1:0 --seconds "$seconds")
    off=$(bench --target gpukv --url "unix:$dir/off.sock" "${common[@]}")
    on=$(bench --target gpukv --url "unix:$dir/on.sock" "${common[@]}")
    rd=$(bench --target redis --url "unix:$dir/redis.sock" "${common[@]}")
    row "S1 SET 64 B, 50 clients, P=$pipe | $(field "$off" 1) /s (p99 $(field "$off" 3) us) | $(field "$on" 1) /s (p99 $(field "$on" 3) us) | $(ratio "$(field "$on" 1)" "$(field "$off" 1)")x | redis $(field "$rd" 1) /s (p99 $(field "$rd" 3) us)"
done
common=(--clients 16 --threads $threads --size 1048576 --keys 2000 --ratio 1:0 --seconds "$seconds")
off=$(bench --target gpukv --url "unix:$dir/off.sock" "${common[@]}")
on=$(bench --target gpukv --url "unix:$dir/on.sock" "${common[@]}")
rd=$(bench --target redis --url "unix:$dir/redis.sock" "${common[@]}")
row "SET 1 MiB, 16 clients | $(field "$off" 1) /s (p99 $(field "$off" 3) us) | $(field "$on" 1) /s (p99 $(field "$on" 3) us) | $(ratio "$(field "$on" 1)" "$(field "$off" 1)")x | redis $(field "$rd" 1) /s (p99 $(field "$rd" 3) us)"
# S3: one client, one request at a time; the median request's time.
for size in 4096 65536 1048576 16777216; do
    reqs=$((2000000000 / size)); [ $reqs -gt 20000 ] && reqs=20000
    common=(--clients 1 --threads 1 --size "$size" --keys 1 --ratio 1:0 --requests "$reqs" --warmup 0 --no-prefill)
    off=$(bench --target gpukv --url "unix:$dir/off.sock" "${common[@]}")
    on=$(bench --target gpukv --url "unix:$dir/on.sock" "${common[@]}")
    rd=$(bench --target redis --url "unix:$dir/redis.sock" "${common[@]}")
    row "S3 SET $size B, 1 client, median request | $(field "$off" 2) us | $(field "$on" 2) us | +$(awk -v a="$(field "$on" 2)" -v b="$(field "$off" 2)" 'BEGIN { printf "%.1f", a - b }') us | redis $(field "$rd" 2) us"
done
"$build/client/gpukv" -s "$dir/on.sock" info | grep -E "^fd_store" | tr -d '\r' >"$dir/fdinfo.txt"

# Restart to serving after SIGKILL, against the GiB stored.
for g in $gibs; do
    line=$(GKV_TEST_BACKEND=$backend GKV_FDSTORE_GIB=$g CK_RUN_CASE=large "$build/tests/test_fdstore" 2>&1 |
        grep "back after SIGKILL")
    row "restart after SIGKILL, $g GiB stored | ${line#fd store: } | | |"
done

report=$dir/report.md
{
    report_head "fdstore_bench.sh, $backend backend"
    echo "- Command: \`bench/fdstore_bench.sh $args\` (Release build; ${seconds} s per run; the fd store's daemon after the run: $(tr '\n' ' ' <"$dir/fdinfo.txt"))"
    echo
    echo "| workload | --fd-store no | --fd-store yes | yes vs no | redis-server |"
    echo "|---|---|---|---|---|"
    cat "$rows"
} >"$report"
echo
cat "$report"
[ $append = 1 ] && cat "$report" >>bench/RESULTS.md
exit 0
