#!/usr/bin/env bash
# evict_compare.sh: gpukvd and redis-server side by side as full caches (issue 13), both with
# the same --maxmemory and allkeys-lru, in one run: SET throughput and latency when every SET
# evicts (64 B and 1 MiB values, the cache filled first), and the hit ratio of a zipf GET/SET
# mix on the same key sequence. Prints one Markdown table. The throughput rows are medians of
# GKV_EVICT_ROUNDS (default 3) alternated rounds.
#   [GKV_BUILD_DIR=build-bench] bench/evict_compare.sh [--backend host|cuda] [--seconds S] [--rows]
# --rows prints compare.sh's rows (S7) instead of the two tables.
# Note: redis counts its keys and per-key overhead in maxmemory; gpukvd counts value bytes only
# (keys live in host memory, under --maxmemory-keys), so at one maxmemory gpukvd holds more
# small values. The table says how many keys each held.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
cd "$root"
backend=host seconds=5 rows=0
while [ $# -gt 0 ]; do
    case $1 in
    --backend) backend=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --rows) rows=1 ;;
    *) echo "usage: $0 [--backend host|cuda] [--seconds S] [--rows]"; exit 2 ;;
    esac
    shift
done
build=${GKV_BUILD_DIR:-$root/build-bench}
if [ ! -x "$build/bench/gpukv-bench" ] || [ ! -x "$build/server/gpukvd" ]; then
    cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGKV_BUILD_TESTS=OFF \
        -DGKV_WITH_CUDA=$([ "$backend" = cuda ] && echo ON || echo AUTO) \
        >"/tmp/evict-configure.log" 2>&1 && cmake --build "$build" >"/tmp/evict-build.log" 2>&1 ||
        { echo "build failed"; exit 1; }
fi
B=$build/bench/gpukv-bench
dir=$(mktemp -d /tmp/gkv-evict-XXXXXX)
chmod 700 "$dir"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

# start MAXMEMORY [GPUKVD_MAXMEMORY]: both servers, fresh and empty, allkeys-lru.
start() {
    for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
    wait 2>/dev/null
    pids=()
    rm -f "$dir"/*.sock
    redis-server --port 0 --unixsocket "$dir/redis.sock" --unixsocketperm 700 --save "" \
        --appendonly no --maxmemory "$1" --maxmemory-policy allkeys-lru \
        --logfile "$dir/redis.log" &
    pids+=($!)
    "$build/server/gpukvd" --socket "$dir/gkv.sock" --backend "$backend" --log-level warn \
        --maxmemory "${2:-$1}" --maxmemory-policy allkeys-lru 2>>"$dir/gpukvd.log" &
    pids+=($!)
    wait_up
}
# run TARGET ARGS...: one gpukv-bench line (target, url set here).
run() {
    local t=$1 url
    shift
    [ "$t" = gpukv ] && url=unix:$dir/gkv.sock || url=unix:$dir/redis.sock
    "$B" --target "$t" --url "$url" --seconds "$seconds" "$@" 2>&1 | tail -1
}
field() { # field LINE NAME: the number after NAME in a gpukv-bench line
    echo "$1" | sed -E "s/.* $2 ([0-9.]+).*/\1/"
}
keys_of() { # keys_of TARGET
    if [ "$1" = gpukv ]; then
        "$build/client/gpukv" -s "$dir/gkv.sock" info | tr -d '\r' | sed -n 's/^keys://p'
    else
        redis-cli -s "$dir/redis.sock" dbsize
    fi
}
evicted_of() {
    if [ "$1" = gpukv ]; then
        "$build/client/gpukv" -s "$dir/gkv.sock" info | tr -d '\r' | sed -n 's/^evicted_keys://p'
    else
        redis-cli -s "$dir/redis.sock" info stats | tr -d '\r' | sed -n 's/^evicted_keys://p'
    fi
}

# table: the first table's header, unless --rows
[ $rows = 1 ] || {
    echo "| workload | gpukvd ops/s | gpukvd p50 / p99 us | redis ops/s | redis p50 / p99 us | ratio | keys held (gpukvd / redis) |"
    echo "|---|---|---|---|---|---|---|"
}
median() { tr ' ' '\n' | grep . | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }
# row LABEL MAXMEM BENCH-ARGS...: GKV_EVICT_ROUNDS (3) rounds, gpukvd and redis alternated, each
# on a fresh server filled first; medians. Single runs on a shared machine swing by 10-20%.
row() {
    local label=$1 mem=$2
    shift 2
    declare -A ops p50 p99 held all_ops all_p50 all_p99
    local rounds=${GKV_EVICT_ROUNDS:-3}
    for _ in $(seq "$rounds"); do
        for t in gpukv redis; do
            start "$mem"
            run "$t" "$@" --seconds 3 >/dev/null # fill: from here on every new key evicts
            line=$(run "$t" "$@")
            all_ops[$t]+=" $(echo "$line" | sed -E 's/.*: ([0-9.]+) ops\/s.*/\1/')"
            all_p50[$t]+=" $(field "$line" "p50")"
            all_p99[$t]+=" $(field "$line" "p99")"
            held[$t]="$(keys_of $t) ($(evicted_of $t) evicted)"
        done
    done
    for t in gpukv redis; do
        ops[$t]=$(echo "${all_ops[$t]}" | median)
        p50[$t]=$(echo "${all_p50[$t]}" | median)
        p99[$t]=$(echo "${all_p99[$t]}" | median)
    done
    local r
    r=$(awk "BEGIN { printf \"%.2f\", ${ops[gpukv]} / ${ops[redis]} }")
    if [ $rows = 1 ]; then
        printf "| S7 | %s, median of %s alternated rounds | %.0f ops/s, p99 %s us | redis allkeys-lru %.0f ops/s, p99 %s us | %sx | >= 1.0x redis: %s |\n" \
            "$label" "$rounds" "${ops[gpukv]}" "${p99[gpukv]}" "${ops[redis]}" "${p99[redis]}" "$r" \
            "$(awk "BEGIN { exit !($r >= 1.0) }" && echo yes || echo "**no**")"
        return
    fi
    printf "| %s | %.0f | %s / %s | %.0f | %s / %s | %s | %s / %s |\n" "$label" "${ops[gpukv]}" \
        "${p50[gpukv]}" "${p99[gpukv]}" "${ops[redis]}" "${p50[redis]}" "${p99[redis]}" \
        "$r" "${held[gpukv]}" "${held[redis]}"
}
row "SET 64 B, every SET evicts (50 clients, 10 M keys, maxmemory 16M)" 16mb \
    --clients 50 --threads 2 --size 64 --keys 10000000 --ratio 1:0 --no-prefill
row "SET 1 MiB, every SET evicts (8 clients, 10,000 keys, maxmemory 256M)" 256mb \
    --clients 8 --threads 2 --size 1M --keys 10000 --ratio 1:0 --no-prefill

# Hit ratio: a zipf GET/SET mix (9 GETs to 1 SET) over 1 M keys of 64 B, each cache filled first
# by zipf SETs. To compare the policies rather than the accounting, gpukvd's maxmemory is set
# to the number of keys redis held at 16 MB times 64 B: both hold about as many keys.
# Both run the same requests: each connection's key sequence is seeded by its number, and the
# fill and the measured phase are counted in requests, not seconds.
mix="--clients 50 --threads 2 --size 64 --keys 1000000 --dist zipf --no-prefill --warmup 0"
fill="--ratio 1:0 --requests 8000"  # 400,000 SETs
measure="--ratio 1:9 --requests 20000" # 1,000,000 requests
start 16mb
run redis $mix $fill >/dev/null
kr=$(keys_of redis)
[ $rows = 1 ] || {
    echo
    echo "| zipf GET:SET 9:1, 64 B, 1 M keys | maxmemory | keys held | GETs (approx.) | misses | hit ratio |"
    echo "|---|---|---|---|---|---|"
}
declare -A hit
for t in gpukv redis; do
    gmem=$((kr * 64))
    start 16mb "$gmem"
    mem=16mb
    [ "$t" = gpukv ] && mem="$gmem B"
    run "$t" $mix $fill >/dev/null
    line=$(run "$t" $mix $measure)
    n=$(echo "$line" | sed -E 's/.*: ([0-9]+) requests.*/\1/')
    m=$(echo "$line" | sed -E 's/.*misses ([0-9]+).*/\1/')
    gets=$((n * 9 / 10))
    hit[$t]=$(awk "BEGIN { printf \"%.3f\", 1 - $m / $gets }")
    [ $rows = 1 ] ||
        printf "| %s | %s | %s | %d | %d | %s |\n" "$t" "$mem" "$(keys_of $t)" "$gets" "$m" "${hit[$t]}"
done
if [ $rows = 1 ]; then
    d=$(awk "BEGIN { printf \"%.1f\", (${hit[gpukv]} - ${hit[redis]}) * 100 }")
    printf "| S7 | hit ratio, zipf GET:SET 9:1 of 64 B over 1 M keys, ~%s keys held by each | %s | redis allkeys-lru %s | %s points | within 2 points (or better): %s |\n" \
        "$kr" "${hit[gpukv]}" "${hit[redis]}" "$d" "$(awk "BEGIN { exit !($d >= -2) }" && echo yes || echo "**no**")"
fi
