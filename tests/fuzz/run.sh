#!/usr/bin/env bash
# run.sh: builds the libFuzzer target (clang, AddressSanitizer, UndefinedBehaviorSanitizer) and
# runs it for GKV_FUZZ_SECONDS (default 60) over the seed corpus and the committed regression
# inputs, on GKV_FUZZ_JOBS workers (default 1). A crash fails the test and leaves its input in
# the work directory printed below: commit it to tests/fuzz/regressions/ with the fix.
# Skipped (77) without a clang that has libFuzzer.
#   tests/fuzz/run.sh SOURCE_DIR [WORK_DIR]
set -uo pipefail
src=$(cd "$1" && pwd)
work=${2:-$(mktemp -d /tmp/gkv-fuzz-XXXXXX)}
mkdir -p "$work/corpus" "$work/artifacts"
cc=$(command -v clang || true)
if [ -z "$cc" ] || ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n){return 0;}' |
    "$cc" -x c -fsanitize=fuzzer - -o "$work/probe" 2>/dev/null; then
    echo "no clang with libFuzzer: skipped"; exit 77
fi
"$cc" -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
    -I"$src/proto" -I"$src/common" -I"$src/include" $(pkg-config --cflags msgpack 2>/dev/null) \
    "$src/tests/fuzz/fuzz_request.c" "$src/proto/frame.c" "$src/proto/reader.c" \
    "$src/proto/message.c" "$src/common/error.c" -o "$work/fuzz_request" || exit 1
cp "$src"/tests/fuzz/corpus/* "$work/corpus/"
# Regression inputs first, each once: a known crash fails at once.
regress=$(ls "$src"/tests/fuzz/regressions/* 2>/dev/null | grep -v README)
if [ -n "$regress" ]; then
    "$work/fuzz_request" $regress || { echo "FAIL: a regression input crashes"; exit 1; }
fi
jobs=${GKV_FUZZ_JOBS:-1}
"$work/fuzz_request" -max_total_time="${GKV_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
    $([ "$jobs" -gt 1 ] && echo "-fork=$jobs") "$work/corpus" >"$work/fuzz.log" 2>&1
rc=$?
grep -E "stat::number_of_executed_units|stat::new_units_added|cov:" "$work/fuzz.log" | tail -3
if [ $rc -ne 0 ] || ls "$work/artifacts"/* >/dev/null 2>&1; then
    tail -40 "$work/fuzz.log"
    echo "FAIL: see $work/artifacts"
    exit 1
fi
echo "ok: $(ls "$work/corpus" | wc -l) corpus inputs; work directory $work"
