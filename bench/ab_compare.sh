#!/usr/bin/env bash
# ab_compare.sh: compare.sh --quick (cuda backend) of an older tree and of this checkout, in the
# order given, one after the other on this machine; tables into $OUT (or /tmp) as
# compare-<label>-<PAIR>.md. Run it twice with the order reversed for an interleaved pair.
#   BEFORE=DIR [PAIR=1] bench/ab_compare.sh before after
# BEFORE is a source tree of the older commit (e.g. `git archive d81e8fb | tar -x -C DIR`).
set -uo pipefail
out=${OUT:-/tmp} n=${PAIR:-1}
for label in "$@"; do
    if [ "$label" = before ]; then src=${BEFORE:?BEFORE=DIR} build=/tmp/ab-before; else src=. build=/tmp/ab-after; fi
    t0=$(date +%s)
    (cd "$src" && GKV_BUILD_DIR=$build timeout "${LIMIT:-285}" bench/compare.sh --backend cuda --quick \
        --no-append >"$out/compare-$label-$n.md" 2>&1)
    echo "$label: compare.sh exit $? in $(($(date +%s) - t0)) s"
done
