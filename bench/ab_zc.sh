#!/usr/bin/env bash
# ab_zc.sh: zc_bench of an older tree and of this checkout on this machine (cuda), a fresh
# gpukvd each: alternated (before after after before before after), then every pair of daemon
# tree and client tree twice (which side moved). Prints MAP p50, the import-held row and PING.
#   BEFORE=DIR bench/ab_zc.sh
set -uo pipefail
for n in before after; do
    src=.; [ $n = before ] && src=${BEFORE:?BEFORE=DIR}
    cmake -S "$src" -B /tmp/zc-$n -G Ninja -DGKV_WITH_CUDA=ON -DCMAKE_BUILD_TYPE=Release \
        -DGKV_BUILD_TESTS=ON >/tmp/zc-cfg-$n.log 2>&1 &&
        cmake --build /tmp/zc-$n -j "$(nproc)" --target gpukvd zc_bench gpukv_cli \
            >/tmp/zc-build-$n.log 2>&1 || { echo "$n: build failed (/tmp/zc-build-$n.log)"; exit 1; }
done
d=$(mktemp -d /tmp/ab-zc-XXXXXX); chmod 700 "$d"
one() { # daemon-tree client-tree label
    "/tmp/zc-$1/server/gpukvd" --socket "$d/s.sock" --backend cuda --maxmemory 8G --log-level warn 2>>/tmp/zc-gpukvd.log &
    local p=$!
    for _ in $(seq 200); do "/tmp/zc-$1/client/gpukv" -s "$d/s.sock" ping >/dev/null 2>&1 && break; sleep 0.05; done
    local o; o=$(timeout 60 "/tmp/zc-$2/bench/zc_bench" "unix:$d/s.sock" 2>&1)
    kill -TERM $p; wait $p
    echo "$3: $(echo "$o" | grep -E 'of which MAP|import held|PING round' | cut -d'|' -f3 | tr '\n' ' ')"
}
for n in before after after before before after; do one $n $n "$n"; done
for r in 1 2; do for s in before after; do for c in before after; do one $s $c "r$r daemon $s, client $c"; done; done; done
