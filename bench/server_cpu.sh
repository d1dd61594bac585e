#!/usr/bin/env bash
# server_cpu.sh: the server's CPU time per request (user + system, from /proc), for gpukvd or
# redis-server under one gpukv-bench load. On a machine where the clients and the server share
# few cores, throughput swings with scheduling from run to run; the server's own CPU per
# request does not, so before/after comparisons of server code use this.
#   bench/server_cpu.sh gpukv|redis [BUILD] [-- SERVER ARGS...]
# Load (fixed): 50 connections, 2 threads, 8000 requests each after 3 s of the same load:
#   GKV_LOAD="--size 64 --keys 10000000 --ratio 1:0 --no-prefill" (default: evicting SETs when
#   the server args set a maxmemory and a policy).
# Prints: TARGET BUILD cpu_us_per_req=N user=N (of which in user space) main_thread=N (of which
# in the main thread: the event loop; the rest is helper threads) ops=N
set -uo pipefail
t=$1
b=${2:-build-bench}
shift $(( $# >= 2 ? 2 : 1 ))
[ "${1:-}" = -- ] && shift
load=${GKV_LOAD:---size 64 --keys 10000000 --ratio 1:0 --no-prefill}
d=$(mktemp -d /tmp/gkv-cpu-XXXXXX)
chmod 700 "$d"
if [ "$t" = redis ]; then
    redis-server --port 0 --unixsocket "$d/s.sock" --unixsocketperm 700 --save "" \
        --appendonly no --logfile "$d/server.log" "$@" &
else
    "$b/server/gpukvd" --socket "$d/s.sock" --backend host --log-level warn "$@" 2>"$d/server.log" &
fi
p=$!
trap 'kill $p 2>/dev/null; wait $p 2>/dev/null; rm -rf "$d"' EXIT
for _ in $(seq 200); do [ -S "$d/s.sock" ] && break; sleep 0.02; done
sleep 0.2
a="--clients 50 --threads 2 $load"
# shellcheck disable=SC2086
"$b/bench/gpukv-bench" --target "$t" --url "unix:$d/s.sock" --seconds 3 $a >/dev/null 2>&1
ticks() { awk '{ print $14, $15 }' "/proc/$p/stat"; } # user, system
loop_ticks() { awk '{ print $14 + $15 }' "/proc/$p/task/$p/stat"; } # the main thread's
read -r u0 s0 < <(ticks)
l0=$(loop_ticks)
# shellcheck disable=SC2086
out=$("$b/bench/gpukv-bench" --target "$t" --url "unix:$d/s.sock" --requests 8000 --warmup 0 $a 2>&1 | tail -1)
read -r u1 s1 < <(ticks)
l1=$(loop_ticks)
hz=$(getconf CLK_TCK)
ops=$(echo "$out" | sed -E 's/.*: ([0-9.]+) ops\/s.*/\1/')
per() { awk -v t="$1" -v hz="$hz" 'BEGIN { printf "%.2f", t * 1e6 / hz / 400000 }'; }
echo "$t $b cpu_us_per_req=$(per $((u1 - u0 + s1 - s0))) user=$(per $((u1 - u0))) main_thread=$(per $((l1 - l0))) ops=$ops"
