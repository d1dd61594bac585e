# lib.sh: shell pieces the benchmark scripts share; sourced, not run.
# wait_up: waits until gpukvd on $dir/gkv.sock and redis-server on $dir/redis.sock both answer
# PING (the CLI from $build); exits the script when they do not within 10 s.
wait_up() {
    for _ in $(seq 400); do
        "$build/client/gpukv" -s "$dir/gkv.sock" ping >/dev/null 2>&1 &&
            redis-cli -s "$dir/redis.sock" ping >/dev/null 2>&1 && return 0
        sleep 0.025
    done
    echo "servers did not start"
    exit 1
}

# report_head TITLE: the heading of a RESULTS.md entry and its machine and commit lines (the
# gpukvd in $build, redis-server's version). The caller adds its command line and its table.
report_head() {
    local commit gpu
    commit=${GKV_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
    gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
    echo
    echo "## $(date -u +%Y-%m-%d) — $1"
    echo
    echo "- Machine: $(nproc) CPUs ($(awk -F: '/model name/ { print $2; exit }' /proc/cpuinfo | sed 's/^ *//')), $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo) RAM${gpu:+, GPU: $gpu}, $(uname -sr)"
    echo "- Commit: $commit; $("$build/server/gpukvd" --version); $(redis-server --version | cut -d' ' -f1-3)"
}
