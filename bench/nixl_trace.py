#!/usr/bin/env python3
"""nixl_trace.py: where a remote read through NIXL spends its time, from the timelines the
daemons write with GPUKV_TRACE=PATH (common/trace.h: "us event value part" lines in
PATH.PID, one file per process, one clock for the machine).

For each pull the reader made (r_pull .. r_pulled, one at a time), with the owner's steps in
the same window: the pull's rate; per chunk, the median time of each step (the owner's STAGE
waiting for a worker, its copies and posts, its writes until seen done, the reply through the
owner's loop, the request and reply on the wire, the reader's copy out); and how many chunks
were on average in each state over the pull (time-weighted), which shows where the pipeline's
depth goes.

Usage: nixl_trace.py PATH [--min-size 64M] [--show 1]"""

from __future__ import annotations

import argparse
import collections
import glob
import statistics

from sizes import size_arg  # bench/sizes.py


def load(path):
    events = []
    for f in glob.glob(path + ".*"):
        pid = int(f.rsplit(".", 1)[1]) if f.rsplit(".", 1)[1].isdigit() else -1
        with open(f) as fh:
            for line in fh:
                parts = line.split()
                if len(parts) >= 4:  # a fifth field, the thread, is not used here
                    events.append((int(parts[0]), pid, parts[1], int(parts[2]), int(parts[3])))
    events.sort()
    return events


def busy(intervals, t0, t1):
    """The time-weighted number of intervals open over [t0, t1]."""
    total = sum(max(0, min(b, t1) - max(a, t0)) for a, b in intervals)
    return total / max(1, t1 - t0)


def around(events, pull):
    """The read around the pull: from the client's MAP (bench/nixl_bench.py's b_map) to its
    answer, in the reader's and the client's steps (those seen, in this order)."""
    t0, t1, size, rpid = pull
    seen = {"r_pull": t0, "r_pulled": t1}
    for t, pid, ev, val, part in events:
        if t < t0 and (ev == "b_map" or (pid == rpid and ev in ("r_read", "r_alloc",
                                                                 "r_queued"))):
            seen[ev] = t
        elif t > t1 and "b_mapped" not in seen and ev not in seen and (
                ev in ("b_mapped", "c_reply", "c_made") or
                (pid == rpid and ev in ("r_kept", "d_map"))):
            seen[ev] = t
    steps = [("b_map", "the client's MAP called"),
             ("r_read", "the MAP sent, the reader's READ job made"),
             ("r_alloc", "the key's home and owner asked (the READ job)"),
             ("r_queued", "the replica's new memory"),
             ("r_pull", "the pull waited for a worker"),
             ("r_pulled", "the pull"),
             ("r_kept", "back on the loop, the replica kept"),
             ("d_map", "the MAP handled"),
             ("c_reply", "its answer read by the client"),
             ("c_made", "the client's mapping made (its import)"),
             ("b_mapped", "back in Python")]
    got = [(ev, what) for ev, what in steps if ev in seen]
    if len(got) > 2 and got[0][0] == "b_map" and got[-1][0] == "b_mapped":
        total = seen["b_mapped"] - seen["b_map"]
        print(f"  the whole read: {total} us, {size / max(1, total) / 1e3:.1f} GB/s")
        for (e0, _), (e1, what) in zip(got, got[1:]):
            print(f"    {what:52s} {seen[e1] - seen[e0]:8d} us")


def analyse(events, pull, show):
    t0, t1, size, rpid = pull
    win = [e for e in events if t0 <= e[0] <= t1]
    first = collections.defaultdict(dict)  # (side, offset) -> event -> time (first seen)
    for t, pid, ev, val, part in win:
        side = "r" if pid == rpid else "o"
        key = ev if ev in ("r_send", "r_recv", "r_copied", "o_in", "o_run", "o_sent",
                           "o_reply") else f"{ev}{part}"
        first[(side, val)].setdefault(key, t)
    offs = sorted({v for (s, v) in first})
    steps = collections.defaultdict(list)
    states = collections.defaultdict(list)
    for off in offs:
        r, o = first.get(("r", off), {}), first.get(("o", off), {})
        need = ("r_send", "r_recv", "o_in", "o_run", "o_sent", "o_reply")
        if any(k not in r and k not in o for k in need):
            continue
        parts = sorted(k for k in o if k.startswith("o_copied"))
        steps["request on the wire and into the owner's loop"].append(o["o_in"] - r["r_send"])
        steps["waiting for an owner's worker"].append(o["o_run"] - o["o_in"])
        prev = o["o_run"]
        for k in parts:
            i = k[len("o_copied"):]
            steps[f"part {i}: copy into the owner's slot"].append(o[k] - prev)
            steps[f"part {i}: post"].append(o[f"o_posted{i}"] - o[k])
            prev = o[f"o_posted{i}"]
        steps["writes until seen done (after the last post)"].append(o["o_sent"] - prev)
        steps["reply through the owner's loop"].append(o["o_reply"] - o["o_sent"])
        steps["reply on the wire until the reader took it"].append(r["r_recv"] - o["o_reply"])
        if "r_copied" in r:
            steps["reader's copy out"].append(r["r_copied"] - r["r_recv"])
        states["asked, not yet at a worker"].append((r["r_send"], o["o_run"]))
        states["at a worker: copying or writing"].append((o["o_run"], o["o_sent"]))
        if parts:
            states["a write posted, not seen done"].append((o[f"o_posted{parts[0][8:]}"],
                                                            o["o_sent"]))
        states["done, reply not yet taken by the reader"].append((o["o_sent"], r["r_recv"]))
        states["asked, reply not taken (the reader's depth)"].append((r["r_send"], r["r_recv"]))
    dt = t1 - t0
    print(f"pull of {size} bytes: {dt} us, {size / max(1, dt) / 1e3:.1f} GB/s, "
          f"{len(offs)} chunks")
    around(events, pull)
    for k, v in steps.items():
        print(f"  {k:52s} median {statistics.median(v):8.0f} us  max {max(v):8.0f}")
    for k, v in states.items():
        print(f"  on average {busy(v, t0, t1):5.2f} chunks {k}")
    if show:
        print("  timeline (us from the pull's start):")
        for t, pid, ev, val, part in win:
            print(f"    {t - t0:8d} {'reader' if pid == rpid else 'owner '} {ev:9s} "
                  f"{val >> 20:6d} MiB {part}")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--min-size", type=size_arg, default=64 << 20)
    ap.add_argument("--show", type=int, default=0, help="print the last N pulls' timelines")
    a = ap.parse_args()
    events = load(a.path)
    pulls, open_ = [], {}
    for t, pid, ev, val, part in events:
        if ev == "r_pull":
            open_[pid] = t
        elif ev == "r_pulled" and pid in open_ and val >= a.min_size and part == 0:
            pulls.append((open_.pop(pid), t, val, pid))
    by_size = collections.defaultdict(list)
    for p in pulls:
        by_size[p[2]].append(p)
    for size, ps in sorted(by_size.items()):
        rates = [s / max(1, b - a) / 1e3 for a, b, s, _ in ps]
        print(f"== {size} bytes: {len(ps)} pulls, GB/s median {statistics.median(rates):.1f} "
              f"(min {min(rates):.1f}, max {max(rates):.1f})")
        for i, p in enumerate(ps[-2:]):
            analyse(events, p, a.show and i == len(ps[-2:]) - 1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
