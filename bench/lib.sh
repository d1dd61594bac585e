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
