#!/usr/bin/env bash
# snapshot_bench.sh: SAVE and load rates of gpukvd's snapshots (docs/snapshots.md) against the
# disk's own sequential write and read rates (dd with O_DIRECT, 8 MiB blocks) on the same
# filesystem. Fills GIB GiB of 64 MiB values and 100,000 keys of 64 B, saves, restarts with the
# snapshot, and prints markdown rows.
#   bench/snapshot_bench.sh [--backend cuda|host] [--gib N] [--dir DIR]
# GKV_BUILD_DIR: a Release build (default build-bench). DIR: where snapshots go (default /tmp).
# Both sides read and write with O_DIRECT where the filesystem allows it (gpukvd falls back to
# buffered I/O where it does not).
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${GKV_BUILD_DIR:-$root/build-bench}
backend=auto gib=4 base=/tmp
while [ $# -gt 0 ]; do
    case "$1" in
    --backend) backend=$2; shift 2 ;;
    --gib) gib=$2; shift 2 ;;
    --dir) base=$2; shift 2 ;;
    *) echo "usage: $0 [--backend cuda|host] [--gib N] [--dir DIR]"; exit 2 ;;
    esac
done
dir=$(mktemp -d "$base/gkv-snapbench-XXXXXX")
chmod 700 "$dir"
pid=
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; wait 2>/dev/null; rm -rf "$dir"' EXIT
G() { "$build/client/gpukv" -s "$dir/gkv.sock" "$@"; }
start() {
    local t0=$(date +%s%N)
    "$build/server/gpukvd" --socket "$dir/gkv.sock" --backend "$backend" \
        --maxmemory "$((gib + 2))G" --snapshot-dir "$dir/snaps" --log-file "$dir/gpukvd.log" \
        >/dev/null 2>&1 &
    pid=$!
    for _ in $(seq 6000); do G ping >/dev/null 2>&1 && break; sleep 0.01; done
    echo $(( ($(date +%s%N) - t0) / 1000000 ))
}
rate() { awk -v b="$1" -v ms="$2" 'BEGIN { if (ms > 0) printf "%.2f", b / ms / 1e6; else print "n/a" }'; }

# The disk alone, on the same filesystem.
bytes=$((gib << 30))
dd if=/dev/urandom of="$dir/chunk" bs=1M count=64 status=none
t0=$(date +%s%N)
dd if=/dev/zero of="$dir/dd" bs=8M count=$((gib * 128)) oflag=direct conv=fsync status=none
dd_w=$(( ($(date +%s%N) - t0) / 1000000 ))
t0=$(date +%s%N)
dd if="$dir/dd" of=/dev/null bs=8M iflag=direct status=none
dd_r=$(( ($(date +%s%N) - t0) / 1000000 ))
rm -f "$dir/dd"

start >/dev/null
for i in $(seq $((gib * 16))); do G set "big/$i" -f "$dir/chunk" >/dev/null || exit 1; done
B=$build/bench/gpukv-bench
[ -x "$B" ] && "$B" --target gpukv --url "unix:$dir/gkv.sock" --clients 8 --threads 1 \
    --keys 100000 --size 64 --ratio 0:1 --requests 1 --warmup 0 >/dev/null 2>&1
keys=$(G info | awk -F: '/^keys:/ { print $2 }' | tr -d '\r')
G save --wait >/dev/null || { tail -5 "$dir/gpukvd.log"; exit 1; }
save_ms=$(G info | awk -F: '/^last_save_ms:/ { print $2 }' | tr -d '\r')
size=$(stat -c %s "$dir"/snaps/gpukv-*.snap)
kill "$pid"; wait "$pid" 2>/dev/null
sync
start_ms=$(start)
load_ms=$(G info | awk -F: '/^load_ms:/ { print $2 }' | tr -d '\r')
loaded=$(G info | awk -F: '/^loaded_keys:/ { print $2 }' | tr -d '\r')
G get big/1 | cmp -s - "$dir/chunk" && same=yes || same=**no**
be=$(G info | awk -F: '/^backend:/ { print $2 }' | tr -d '\r')
echo "| snapshot ($be) | what | gpukvd | disk alone (dd, O_DIRECT, 8 MiB) | ratio |"
echo "|---|---|---|---|---|"
echo "| save | $keys keys, $size bytes (${gib} GiB of 64 MiB values + 100,000 of 64 B) | $save_ms ms, $(rate "$size" "$save_ms") GB/s | write $(rate "$bytes" "$dd_w") GB/s | $(awk -v a="$(rate "$size" "$save_ms")" -v b="$(rate "$bytes" "$dd_w")" 'BEGIN { printf "%.2f", a / b }')x |"
echo "| load | $loaded keys back, a 64 MiB value bit-exact: $same | $load_ms ms, $(rate "$size" "$load_ms") GB/s | read $(rate "$bytes" "$dd_r") GB/s | $(awk -v a="$(rate "$size" "$load_ms")" -v b="$(rate "$bytes" "$dd_r")" 'BEGIN { printf "%.2f", a / b }')x |"
echo "| restart | start to first answer, the load included | $start_ms ms | — | — |"
