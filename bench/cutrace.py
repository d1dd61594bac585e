#!/usr/bin/env python3
"""cutrace.py: sums up the GPU-side timelines bench/cutrace.c wrote (PATH.PID files): per burst
of copies (a pause of over 1 ms ends one), the bytes, the span, how much of the span a copy was
running (the union of the copies) and the rate while one was, each copy's median duration, the
pauses between them, how long a copy waited from its post to its start, how many streams the
copies ran on, how much of the busy time two or more ran at once, and how many host callbacks
were put on a stream between two copies (each holds the stream until it ran) and how many of
the pauses of over 20 us followed one. Where the process's own device-to-device copies were
timed too (lines ending in L: gpukvd's copies into and out of its transfer arena), also how
many ran during the burst, their median, and UCX's median copy while one of them ran beside
it against while none did.

Usage: cutrace.py PATH [--min-bytes 512M]"""

from __future__ import annotations

import argparse
import glob
import statistics

from sizes import size_arg  # bench/sizes.py


def bursts(rows):
    out, cur, end = [], [], None
    for r in rows:
        if cur and r[0] - end > 1000:
            out.append(cur)
            cur = []
        cur.append(r)
        end = r[1] if len(cur) == 1 else max(end, r[1])
    if cur:
        out.append(cur)
    return out


def callbacks(b, cbs) -> str:
    """Host callbacks posted on a copy's stream after it and before the next copy there."""
    between, after_cb, long_gaps = 0, 0, 0
    for r, n in zip(b, b[1:]):
        k = sum(1 for t, st in cbs if st == r[4] and r[2] <= t < n[2])
        between += k
        if n[0] - r[1] > 20:
            long_gaps += 1
            after_cb += k > 0
    return (f"; {between} callbacks between copies, {after_cb} of {long_gaps} pauses > 20 us "
            "after one")


def beside(b, local) -> str:
    """The process's own copies during burst b, and UCX's copies with and without one beside."""
    lo, hi = b[0][0], max(r[1] for r in b)
    mine = [x for x in local if x[1] > lo and x[0] < hi]
    if not mine:
        return ""
    overlapped, alone = [], []
    for r in b:
        beside_one = any(x[0] < r[1] and x[1] > r[0] for x in mine)
        (overlapped if beside_one else alone).append(r[1] - r[0])

    def med(xs):
        return f"{statistics.median(xs):.0f} us ({len(xs)})" if xs else "none"
    return (f"; {len(mine)} local copies, {statistics.median(x[1] - x[0] for x in mine):.0f} us "
            f"(median); UCX's copy with a local one beside it {med(overlapped)}, "
            f"alone {med(alone)}")


def summary(b, cbs, local) -> str:
    total = sum(r[3] for r in b)
    span = max(r[1] for r in b) - b[0][0]
    busy, end, gaps = 0.0, b[0][0], []
    for start, stop, *_ in b:
        if start > end:
            gaps.append(start - end)
        busy += max(0.0, stop - max(start, end))
        end = max(end, stop)
    durs = [r[1] - r[0] for r in b]
    edges = sorted([(r[0], 1) for r in b] + [(r[1], -1) for r in b])
    depth, last, shared = 0, edges[0][0], 0.0
    for t, d in edges:
        if depth >= 2:
            shared += t - last
        depth, last = depth + d, t
    waits = [r[0] - r[2] for r in b]
    return (f"{len(b)} copies, {total / 2**20:.0f} MiB in {span:.0f} us = {total / span / 1e3:.1f} "
            f"GB/s; busy {busy:.0f} us ({busy / span * 100:.0f}%) = {total / busy / 1e3:.1f} GB/s "
            f"while busy; a copy {statistics.median(durs):.0f} us (median); {len(gaps)} pauses, "
            f"{sum(gaps):.0f} us; post to start {statistics.median(waits):.0f} us (median); "
            f"{len({r[4] for r in b})} streams, "
            f"2+ copies at once {shared / busy * 100:.0f}% of busy"
            + callbacks(b, cbs) + beside(b, local))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--min-bytes", type=size_arg, default=512 << 20)
    a = ap.parse_args()
    for f in sorted(glob.glob(a.path + ".*")):
        rows, cbs, local = [], [], []
        with open(f) as fh:
            for line in fh:
                p = line.split()
                if len(p) == 3 and p[0] == "cb":
                    cbs.append((float(p[1]), p[2]))
                elif len(p) == 5 or (len(p) == 6 and p[5] == "L"):
                    # (start, end, post, bytes, stream): UCX's copies, or the process's own (L)
                    (rows if len(p) == 5 else local).append(
                        (float(p[1]), float(p[2]), float(p[0]), int(p[3]), p[4]))
        rows.sort()
        print(f"{f}: {len(rows)} copies")
        for b in bursts(rows):
            if sum(r[3] for r in b) >= a.min_bytes:
                print("  " + summary(b, cbs, local))


if __name__ == "__main__":
    main()
