#!/usr/bin/env bash
# busy_poll.sh: what --busy-poll buys and costs (issue 14, S6): gpukvd's CPU time (user + system,
# from /proc) and the request latency, with and without --busy-poll, at three loads: idle (no
# client), one client with one request at a time (64 B GETs), 50 clients (64 B GETs).
#   [GKV_BUILD_DIR=build-bench] bench/busy_poll.sh [--backend host|cuda] [--seconds S] [USEC...]
# USEC: the --busy-poll settings to try besides off (default: 200). Prints one Markdown table.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
backend=host seconds=3 settings=()
while [ $# -gt 0 ]; do
    case $1 in
    --backend) backend=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    *) settings+=("$1") ;;
    esac
    shift
done
[ ${#settings[@]} = 0 ] && settings=(200)
build=${GKV_BUILD_DIR:-$root/build-bench}
B=$build/bench/gpukv-bench
dir=$(mktemp -d /tmp/gkv-busy-XXXXXX)
pid=
cleanup() { [ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT
hz=$(getconf CLK_TCK)
ticks() { awk '{ print $14 + $15 }' "/proc/$pid/stat"; }
# cpu_during CMD...: runs CMD; prints "CPU% OUTPUT" (gpukvd's share of one core meanwhile).
cpu_during() {
    local t0 t1 s0 s1 out
    t0=$(ticks); s0=$(date +%s%N)
    out=$("$@" 2>&1 | tail -1)
    t1=$(ticks); s1=$(date +%s%N)
    echo "$(awk -v t="$((t1 - t0))" -v hz="$hz" -v ns="$((s1 - s0))" 'BEGIN { printf "%.0f", t / hz / (ns / 1e9) * 100 }') $out"
}
lat() { echo "$1" | sed -E 's/.*p50 ([0-9.]+) us, p99 ([0-9.]+) us.*/\1 \/ \2/'; }
ops() { echo "$1" | sed -E 's/.*: ([0-9.]+) ops\/s.*/\1/' | awk '{ printf "%.0f", $1 }'; }
echo "| gpukvd | idle: CPU | 1 client, 64 B GET: CPU, p50 / p99 us | 50 clients, 64 B GET: CPU, ops/s, p50 / p99 us |"
echo "|---|---|---|---|"
for s in off "${settings[@]}"; do
    args=(--socket "$dir/s.sock" --backend "$backend" --log-level warn)
    [ "$s" != off ] && args+=(--busy-poll "$s")
    "$build/server/gpukvd" "${args[@]}" 2>>"$dir/gpukvd.log" &
    pid=$!
    for _ in $(seq 200); do "$build/client/gpukv" -s "$dir/s.sock" ping >/dev/null 2>&1 && break; sleep 0.025; done
    idle=$(cpu_during sleep "$seconds")
    one=$(cpu_during "$B" --target gpukv --url "unix:$dir/s.sock" --clients 1 --threads 1 --size 64 \
        --keys 1000 --ratio 0:1 --seconds "$seconds")
    many=$(cpu_during "$B" --target gpukv --url "unix:$dir/s.sock" --clients 50 --threads 2 --size 64 \
        --keys 100000 --ratio 0:1 --seconds "$seconds")
    name="default"; [ "$s" != off ] && name="--busy-poll $s"
    echo "| $name | ${idle%% *}% | ${one%% *}%, $(lat "$one") | ${many%% *}%, $(ops "$many"), $(lat "$many") |"
    kill "$pid"; wait "$pid" 2>/dev/null; pid=
done
