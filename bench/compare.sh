#!/usr/bin/env bash
# compare.sh: gpukvd and redis-server side by side on this machine, in one run: the workload
# matrix of bench/README (S1-S6), the ceilings it is judged against (a raw socket copy), and a
# check of the instrument against redis-benchmark. Prints one table with ratios and appends it,
# with date, machine, commit, versions and the command, to bench/RESULTS.md.
#   bench/compare.sh [--backend host|cuda] [--seconds S] [--big-keys N] [--quick] [--no-append]
# On the GPU machine: source .device/env.sh && bench/compare.sh --backend cuda
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=bench/lib.sh
. "$root/bench/lib.sh"
cd "$root"
backend=host seconds=5 bigkeys=10000000 quick=0 append=1
args="$*"
while [ $# -gt 0 ]; do
    case $1 in
    --backend) backend=$2; shift ;;
    --seconds) seconds=$2; shift ;;
    --big-keys) bigkeys=$2; shift ;;
    --quick) quick=1; seconds=2; bigkeys=1000000 ;;
    --no-append) append=0 ;;
    *) echo "usage: $0 [--backend host|cuda] [--seconds S] [--big-keys N] [--quick] [--no-append]"; exit 2 ;;
    esac
    shift
done
build=${GKV_BUILD_DIR:-$root/build-bench}
cuda=OFF; [ "$backend" = cuda ] && cuda=ON
mkdir -p "$build"
gen=Ninja; command -v ninja >/dev/null || gen="Unix Makefiles"
if ! cmake -S . -B "$build" -G "$gen" -DCMAKE_BUILD_TYPE=Release \
    -DGKV_WITH_CUDA=$([ $cuda = ON ] && echo ON || echo AUTO) >"$build/configure.log" 2>&1; then
    echo "configure failed:"; tail -30 "$build/configure.log"; exit 1
fi
if ! cmake --build "$build" -j "$(nproc)" >"$build/build.log" 2>&1; then
    echo "build failed:"; grep -E "error|Error" "$build/build.log" | head -20; exit 1
fi
B=$build/bench/gpukv-bench
[ -x "$B" ] || { echo "gpukv-bench was not built (libhiredis-dev missing?)"; exit 1; }
command -v redis-server >/dev/null || { echo "redis-server not found"; exit 1; }

dir=$(mktemp -d /tmp/gkv-compare-XXXXXX)
chmod 700 "$dir"
rport=$((20000 + RANDOM % 20000)) gport=$((rport + 1))
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$dir"; }
trap cleanup EXIT

start_redis() {
    redis-server --port "$rport" --bind 127.0.0.1 --unixsocket "$dir/redis.sock" --unixsocketperm 700 \
        --save "" --appendonly no --logfile "$dir/redis.log" &
    pids+=($!)
}
start_gpukvd() { # extra args...
    "$build/server/gpukvd" --socket "$dir/gkv.sock" --listen "127.0.0.1:$gport" --backend "$backend" \
        --log-level warn "$@" 2>>"$dir/gpukvd.log" &
    gpid=$!
    pids+=($gpid)
}
url() { # target transport
    if [ "$1" = redis ]; then [ "$2" = unix ] && echo "unix:$dir/redis.sock" || echo "tcp:127.0.0.1:$rport"
    else [ "$2" = unix ] && echo "unix:$dir/gkv.sock" || echo "tcp:127.0.0.1:$gport"; fi
}
bench() { # one CSV line, also when the run reported errors (its exit code is 1 then)
    local out
    out=$("$B" --csv "$@" 2>/dev/null | head -1)
    echo "${out:-0,0,0,0}"
}
field() { echo "$1" | cut -d, -f"$2"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "n/a" }'; }
ge() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a >= b) }'; }
le() { awk -v a="$1" -v b="$2" 'BEGIN { exit !(a <= b) }'; }
yes_no() { if "$@"; then echo yes; else echo "**no**"; fi; }

rows=$dir/rows.md
: >"$rows"
row() { echo "| $* |" >>"$rows"; echo "| $* |"; }

start_redis
case $backend in cuda) start_gpukvd --maxmemory 16G ;; *) start_gpukvd --maxmemory 8G ;; esac
wait_up
threads=$(( $(nproc) >= 8 ? 4 : 2 ))

# S1/S2: small values, 50 connections, without and with pipelining, Unix socket and TCP.
for pipe in 1 16; do
    for tr in unix tcp; do
        for op in SET GET; do
            r=1:0; [ $op = GET ] && r=0:1
            common=(--clients 50 --threads $threads --pipeline $pipe --size 64 --keys 100000 --ratio $r --seconds "$seconds")
            rd=$(bench --target redis --url "$(url redis $tr)" "${common[@]}")
            gk=$(bench --target gpukv --url "$(url gpukv $tr)" "${common[@]}")
            s=S1; [ $pipe = 16 ] && s=S2
            ok=$(yes_no ge "$(field "$gk" 1)" "$(field "$rd" 1)")
            p99=""
            if [ $pipe = 1 ]; then
                p99=" p99 $(field "$gk" 3) vs $(field "$rd" 3) us ($(ratio "$(field "$gk" 3)" "$(field "$rd" 3)")x, target <= 1.5x: $(yes_no le "$(ratio "$(field "$gk" 3)" "$(field "$rd" 3)")" 1.5))"
            fi
            row "$s | $op 64 B, $tr, P=$pipe | $(field "$gk" 1) | $(field "$rd" 1) | $(ratio "$(field "$gk" 1)" "$(field "$rd" 1)") | >= 1.0x: $ok;$p99"
        done
    done
done

# The instrument against redis-benchmark on the same workloads (S1 unix, and P=16).
for pipe in 1 16; do
    for op in set get; do
        n=$((seconds * 150000 * (pipe > 1 ? 5 : 1)))
        rb=$(redis-benchmark -s "$dir/redis.sock" -c 50 -n $n -d 64 -r 100000 -P $pipe -t $op -q --threads $((threads / 2 > 0 ? threads / 2 : 1)) 2>&1 |
            tr '\r' '\n' | awk '/requests per second/ { print $2 }' | tail -1)
        r=1:0; [ $op = get ] && r=0:1
        ours=$(bench --target redis --url "$(url redis unix)" --clients 50 --threads $((threads / 2 > 0 ? threads / 2 : 1)) --pipeline $pipe --size 64 --keys 100000 --ratio $r --seconds "$seconds")
        row "check | redis ${op^^} 64 B, unix, P=$pipe: gpukv-bench vs redis-benchmark | $(field "$ours" 1) | $rb | $(ratio "$(field "$ours" 1)" "$rb") | within 10%: $(yes_no awk -v a="$(ratio "$(field "$ours" 1)" "$rb")" 'BEGIN { exit !(a >= 0.9 && a <= 1.1) }')"
    done
done

# S3: large values, one client, SET then GET; against redis (to 256 MiB, under its 512 MB
# limit) and a raw socket copy of the same bytes from and to the same kind of memory (rawcopy
# set|get: the value's buffer on the client's side, a 4 MiB buffer on the server's); the copy
# between two cache-resident buffers (rawcopy hot), which no real transfer reaches, is shown too.
sizes="4096 65536 1048576 16777216 268435456 1073741824"
[ $quick = 1 ] && sizes="4096 65536 1048576 16777216 268435456"
for size in $sizes; do
    reqs=$((2000000000 / size)); [ $reqs -gt 20000 ] && reqs=20000; [ $reqs -lt 5 ] && reqs=5
    hot=$("$build/bench/rawcopy" unix "$size" 3 hot | cut -d, -f3)
    for op in SET GET; do
        raw=$("$build/bench/rawcopy" unix "$size" 3 "${op,,}" | cut -d, -f3)
        r=1:0 pf=--no-prefill; [ $op = GET ] && { r=0:1; pf=; }
        common=(--clients 1 --threads 1 --size "$size" --keys 1 --ratio $r --requests "$reqs" --warmup 0 $pf)
        gk=$(bench --target gpukv --url "$(url gpukv unix)" "${common[@]}")
        # One client, one request at a time: bytes over the median request time (robust to the
        # first requests, which also pay for fresh memory).
        gbs=$(awk -v t="$(field "$gk" 2)" -v s="$size" 'BEGIN { printf "%.2f", (t > 0 ? s / (t * 1e3) : 0) }')
        if [ "$size" -le 268435456 ]; then
            rd=$(bench --target redis --url "$(url redis unix)" "${common[@]}")
            rbs=$(awk -v t="$(field "$rd" 2)" -v s="$size" 'BEGIN { printf "%.2f", (t > 0 ? s / (t * 1e3) : 0) }')
        else
            rbs="n/a"
        fi
        t1="$(ratio "$gbs" "$raw")x raw"
        want=0.8; [ "$size" -ge 16777216 ] && want=0.9
        okraw=$(if [ "$size" -ge 1048576 ]; then yes_no ge "$(ratio "$gbs" "$raw")" $want; else echo "—"; fi)
        okr=$(if [ "$rbs" = n/a ]; then echo "—"; else yes_no ge "$gbs" "$rbs"; fi)
        row "S3 | $op $size B, unix, 1 client (median request) | $gbs GB/s | redis $rbs GB/s, raw copy $raw GB/s (cache-hot $hot) | $(ratio "$gbs" "$rbs")x redis, $t1 ($(ratio "$gbs" "$hot")x hot) | >= 1.0x redis: $okr; >= 0.8x raw (>= 1 MiB), 0.9x (>= 16 MiB): $okraw"
    done
done

# S4: many keys: host memory per key, LIST of 100 keys under a prefix, daemon start.
kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null
t0=$(date +%s%N)
start_gpukvd --maxmemory 8G
for _ in $(seq 2000); do "$build/client/gpukv" -s "$dir/gkv.sock" ping >/dev/null 2>&1 && break; sleep 0.001; done
start_ms=$(( ($(date +%s%N) - t0) / 1000000 ))
anon() { awk '/RssAnon/ { print $2 }' "/proc/$gpid/status"; }
a0=$(anon)
bench --target gpukv --url "$(url gpukv unix)" --clients 8 --threads 1 --keys "$bigkeys" --size 64 --ratio 0:1 --requests 1 --warmup 0 >/dev/null
a1=$(anon)
perkey=$(awk -v a="$a0" -v b="$a1" -v n="$bigkeys" 'BEGIN { printf "%.1f", (b - a) * 1024 / n }')
beyond=$(awk -v p="$perkey" 'BEGIN { printf "%.1f", p - 16 }')
ls=$(bench --target gpukv --url "$(url gpukv unix)" --clients 1 --threads 1 --keys 1 --no-prefill --list-prefix key:0000001000 --seconds "$seconds")
row "S4 | $bigkeys keys of 64 B: daemon RssAnon per key | $perkey B (key 16 B, so $beyond B beyond it) | — | — | <= 100 B beyond the key: $(yes_no le "$beyond" 100)"
row "S4 | LIST of 100 keys under a prefix among $bigkeys | p50 $(field "$ls" 2) us, p99 $(field "$ls" 3) us | — | — | <= 1 ms: $(yes_no le "$(field "$ls" 3)" 1000)"
row "S4 | daemon start to first answer (includes the CLI's own start) | $start_ms ms | — | — | <= 500 ms: $(yes_no le "$start_ms" 500)"

# S5: churn at 90% of --maxmemory (70% 4 KiB, 20% 256 KiB, 10% 3 MiB; each key keeps its size,
# so overwrites keep the total constant and no SET may fail), against GETs of the same data.
kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null
mm=$((2 * 1024 * 1024 * 1024)); [ $quick = 1 ] && mm=$((512 * 1024 * 1024))
mean=$(( (4096 * 70 + 262144 * 20 + 3145728 * 10) / 100 ))
keys5=$(( mm * 9 / 10 / mean ))
start_gpukvd --maxmemory $mm
for _ in $(seq 400); do "$build/client/gpukv" -s "$dir/gkv.sock" ping >/dev/null 2>&1 && break; sleep 0.025; done
mix=4K:70,256K:20,3M:10
# The clients' sockets get the 4 MiB send buffer that libgpukv asks for (client/connect.c): with
# the system's default a 3 MiB SET moves one 208 KiB buffer per round trip of wake-ups.
sb=4194304
steady=$(bench --target gpukv --url "$(url gpukv unix)" --clients 8 --threads $threads --keys $keys5 --size-mix $mix --ratio 0:1 --seconds "$seconds" --sndbuf $sb)
churn=$("$B" --target gpukv --url "$(url gpukv unix)" --clients 8 --threads $threads --keys $keys5 --size-mix $mix --ratio 1:0 --no-prefill --seconds "$seconds" --sndbuf $sb 2>&1)
oom=$("$build/client/gpukv" -s "$dir/gkv.sock" info | awk -F: '/^oom_errors/ { print $2 }' | tr -d '\r')
used=$("$build/client/gpukv" -s "$dir/gkv.sock" info | awk -F: '/^used_bytes/ { print $2 }' | tr -d '\r')
cp99=$(echo "$churn" | sed -n 's/.*p99 \([0-9.]*\) us.*/\1/p')
row "S5 | SET churn at 90% of $((mm >> 20)) MiB ($keys5 keys, used $((used >> 20)) MiB) vs GET steady state, clients with a 4 MiB send buffer as libgpukv | churn p99 $cp99 us, $oom OOM | steady p99 $(field "$steady" 3) us | $(ratio "$cp99" "$(field "$steady" 3)")x | no OOM: $(yes_no [ "${oom:-1}" = 0 ]); p99 <= 1.5x steady: $(yes_no le "$(ratio "$cp99" "$(field "$steady" 3)")" 1.5)"

# S6: zero-copy (cuda backend only), on a fresh daemon.
if [ "$backend" = cuda ] && [ -x "$build/bench/zc_bench" ]; then
    kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null
    start_gpukvd --maxmemory 8G
    for _ in $(seq 400); do "$build/client/gpukv" -s "$dir/gkv.sock" ping >/dev/null 2>&1 && break; sleep 0.025; done
    "$build/bench/zc_bench" "unix:$dir/gkv.sock" >"$dir/zc.md" 2>&1
    tail -n +3 "$dir/zc.md" | sed 's/^| /| S6 | /' >>"$rows"
    cat "$dir/zc.md"
fi

# S7: a full cache beside redis-server allkeys-lru at the same maxmemory (bench/evict_compare.sh).
kill "$gpid" 2>/dev/null; wait "$gpid" 2>/dev/null
ev=$seconds; [ "$ev" -lt 3 ] && ev=3
GKV_BUILD_DIR=$build bench/evict_compare.sh --backend "$backend" --seconds "$ev" --rows >"$dir/s7.md" 2>&1
grep '^| S7' "$dir/s7.md" >>"$rows" || { echo "S7 failed:"; cat "$dir/s7.md"; }
grep '^| S7' "$dir/s7.md"

# The record.
report=$dir/report.md
{
    report_head "compare.sh, $backend backend"
    echo "- Command: \`bench/compare.sh $args\` (Release build; ${seconds} s per run; clients and servers share the machine)"
    echo
    echo "| # | workload | gpukv | reference | ratio | target met? |"
    echo "|---|---|---|---|---|---|"
    cat "$rows"
} >"$report"
echo
cat "$report"
if [ $append = 1 ]; then
    cat "$report" >>"$root/bench/RESULTS.md"
    echo "appended to bench/RESULTS.md"
fi
