#!/usr/bin/env bash
# run.sh: builds a libFuzzer target (clang, AddressSanitizer, UndefinedBehaviorSanitizer) and
# runs it for GKV_FUZZ_SECONDS (default 60) over its seed corpus and its committed regression
# inputs, on GKV_FUZZ_JOBS workers (default 1). A crash fails the test and leaves its input in
# the work directory printed below: commit it to the target's regressions folder with the fix.
# Skipped (77) without a clang that has libFuzzer.
#   tests/fuzz/run.sh SOURCE_DIR [WORK_DIR] [TARGET]
# TARGET: request (fuzz_request.c: the frame reader and message decoding; corpus/, regressions/)
# or daemon (fuzz_daemon.c: the whole daemon through socketpairs, built by CMake with GKV_FUZZ
# in WORK_DIR/build, kept between runs; corpus_daemon/, regressions_daemon/).
set -uo pipefail
src=$(cd "$1" && pwd)
work=${2:-$(mktemp -d /tmp/gkv-fuzz-XXXXXX)}
made=$([ -z "${2:-}" ] && echo yes) # a work directory of its own: removed when all went well
rm -rf "$work"/gkv-fuzzd-* # the daemon fuzzer's directories of an earlier run (GKV_FUZZ_TMP)
export GKV_FUZZ_TMP=$work
target=${3:-request}
mkdir -p "$work/corpus" "$work/artifacts"
cc=$(command -v clang || true)
if [ -z "$cc" ] || ! echo 'int LLVMFuzzerTestOneInput(const char *d, long n){return 0;}' |
    "$cc" -x c -fsanitize=fuzzer - -o "$work/probe" 2>/dev/null; then
    echo "no clang with libFuzzer: skipped"; exit 77
fi
case $target in
request)
    "$cc" -g -O1 -D_GNU_SOURCE -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
        -I"$src/proto" -I"$src/common" -I"$src/include" $(pkg-config --cflags msgpack 2>/dev/null) \
        "$src/tests/fuzz/fuzz_request.c" "$src/proto/frame.c" "$src/proto/reader.c" \
        "$src/proto/message.c" "$src/common/error.c" -o "$work/fuzz_request" || exit 1
    exe=$work/fuzz_request seeds=$src/tests/fuzz/corpus regressions=$src/tests/fuzz/regressions
    ;;
daemon)
    gen=Ninja; command -v ninja >/dev/null || gen="Unix Makefiles"
    { cmake -S "$src" -B "$work/build" -G "$gen" -DCMAKE_C_COMPILER="$cc" -DCMAKE_BUILD_TYPE=Debug \
        -DCMAKE_C_FLAGS=-O1 -DGKV_WITH_CUDA=OFF -DGKV_FUZZ=ON -DGKV_BUILD_TESTS=OFF &&
        cmake --build "$work/build" -j "$(nproc)" --target fuzz_daemon; } >"$work/build.log" 2>&1 ||
        { tail -40 "$work/build.log"; echo "FAIL: building fuzz_daemon"; exit 1; }
    exe=$work/build/tests/fuzz/fuzz_daemon
    seeds=$src/tests/fuzz/corpus_daemon regressions=$src/tests/fuzz/regressions_daemon
    # The CUDA runtime maps memory where ASan would keep its shadow gap (none here, but the
    # daemon's code is the same); a crash's report names the input.
    export ASAN_OPTIONS=${ASAN_OPTIONS:-protect_shadow_gap=0}:abort_on_error=0
    ;;
*)
    echo "unknown target $target (request or daemon)"; exit 2
    ;;
esac
cp "$seeds"/* "$work/corpus/"
# Regression inputs first, each once: a known crash fails at once.
regress=$(ls "$regressions"/* 2>/dev/null | grep -v README)
if [ -n "$regress" ]; then
    "$exe" $regress || { echo "FAIL: a regression input crashes"; exit 1; }
fi
jobs=${GKV_FUZZ_JOBS:-1}
"$exe" -max_total_time="${GKV_FUZZ_SECONDS:-60}" -rss_limit_mb=2048 \
    -max_len=65536 -artifact_prefix="$work/artifacts/" -print_final_stats=1 \
    $([ "$jobs" -gt 1 ] && echo "-fork=$jobs") "$work/corpus" >"$work/fuzz.log" 2>&1
rc=$?
grep -E "stat::number_of_executed_units|stat::new_units_added|cov:" "$work/fuzz.log" | tail -3
if [ $rc -ne 0 ] || ls "$work/artifacts"/* >/dev/null 2>&1; then
    grep -v "^#" "$work/fuzz.log" | tail -60
    echo "FAIL: see $work/artifacts"
    exit 1
fi
echo "ok: $target, $(ls "$work/corpus" | wc -l) corpus inputs; work directory $work$([ -n "$made" ] && echo ', removed')"
[ -n "$made" ] && [ -z "${GKV_TEST_KEEP:-}" ] && rm -rf "$work"
exit 0
