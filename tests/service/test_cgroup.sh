#!/usr/bin/env bash
# test_cgroup.sh: gpukvd inside a memory cgroup (a container's limit, a unit's MemoryMax=) takes
# its host-memory defaults from the cgroup's limit, not the machine's RAM: the host backend's
# arena and --maxmemory-keys fit under it together. Makes a cgroup (v2, or v1's memory
# controller) with a 1 GiB limit; skipped (77) where none can be made (not root, read-only).
#   tests/service/test_cgroup.sh GPUKVD GPUKV
set -uo pipefail
gpukvd=$1 gpukv=$2
limit=$((1 << 30))
name=gkv-test-$$
if [ -f /sys/fs/cgroup/cgroup.controllers ] && mkdir "/sys/fs/cgroup/$name" 2>/dev/null; then
    cg=/sys/fs/cgroup/$name
    echo "+memory" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null
    echo $limit >"$cg/memory.max" 2>/dev/null || { rmdir "$cg"; echo "cannot limit a v2 cgroup: skipped"; exit 77; }
elif [ -d /sys/fs/cgroup/memory ] && mkdir "/sys/fs/cgroup/memory/$name" 2>/dev/null; then
    cg=/sys/fs/cgroup/memory/$name
    echo $limit >"$cg/memory.limit_in_bytes" || { rmdir "$cg"; echo "cannot limit a v1 cgroup: skipped"; exit 77; }
else
    echo "no writable memory cgroup here: skipped"; exit 77
fi
tmp=$(mktemp -d /tmp/gkv-cgroup-XXXXXX)
chmod 700 "$tmp"
pid=
cleanup() {
    [ -n "$pid" ] && kill "$pid" 2>/dev/null && wait "$pid" 2>/dev/null
    rmdir "$cg" 2>/dev/null
    rm -rf "$tmp"
}
trap cleanup EXIT
# The daemon starts inside the cgroup: this shell joins it first, the daemon inherits it.
(echo $BASHPID >"$cg/cgroup.procs" && exec "$gpukvd" --backend host --socket "$tmp/s.sock" \
    >"$tmp/log" 2>&1) &
pid=$!
for _ in $(seq 100); do "$gpukv" -s "$tmp/s.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
info=$("$gpukv" -s "$tmp/s.sock" info) || { cat "$tmp/log"; echo "FAIL: no INFO"; exit 1; }
field() { sed -n "s/^$1:\([0-9]*\).*/\1/p" <<<"$info" | tr -d '\r'; }
keys=$(field maxmemory_keys) values=$(field maxmemory)
echo "in a ${limit}-byte cgroup: maxmemory $values, maxmemory_keys $keys"
[ "$keys" -eq $((limit / 4)) ] || { echo "FAIL: maxmemory_keys $keys is not a quarter of the limit"; exit 1; }
[ $((values + keys)) -le $((limit * 9 / 10 + 4096)) ] ||
    { echo "FAIL: values ($values) and keys ($keys) exceed 90% of the limit"; exit 1; }
echo ok
