#!/usr/bin/env python3
"""write_trace.py: where a batch of GPU values stored together (gkv_set_many_from_device, what
GpukvStore does with zarr's chunk writes) spends its time, from GPUKV_TRACE files (common/trace.h)
of the writing process and the daemon: per batch, the CREATE pass (the frames out, then each
reply read and its memory imported, its copy enqueued), the wait for the copies, the SEAL pass,
and the time between batches (the caller's own work: zarr, Python); the daemon's CREATE and SEAL
handlers. Medians over the batches of N values (the most common N).

Usage: write_trace.py TRACE_PREFIX   (the PATH given as GPUKV_TRACE: reads PATH.*)"""

from __future__ import annotations

import collections
import glob
import statistics
import sys


def load(prefix: str):
    per_file = {}
    for f in glob.glob(prefix + ".*"):
        ev = []
        for line in open(f):
            p = line.split()
            if len(p) >= 4:  # a fifth field, the thread, is not used here
                ev.append((int(p[0]), p[1], int(p[2]), int(p[3])))
        per_file[f] = sorted(ev)
    return per_file


def med(v):
    return statistics.median(v) if v else float("nan")


def main() -> int:
    files = load(sys.argv[1])
    writer = [e for evs in files.values() for e in evs if e[1].startswith("w_")]
    daemon = [e for evs in files.values() for e in evs if e[1].startswith("d_")]
    writer.sort()
    batches, cur = [], None
    for t, ev, v, _ in writer:
        if ev == "w_start":
            cur = {"n": v, "start": t, "replies": [], "made": [], "queued": []}
        elif cur is None:
            continue
        elif ev == "w_sent":
            cur["sent"], cur["ncreate"] = t, v
        elif ev == "w_reply":
            cur["replies"].append(t)
        elif ev == "w_made":
            cur["made"].append(t)
        elif ev == "w_queued":
            cur["queued"].append(t)
        elif ev == "w_created":
            cur["created"] = t
        elif ev == "w_copied":
            cur["copied"] = t
        elif ev == "w_end":
            cur["end"] = t
            batches.append(cur)
            cur = None
    if not batches:
        print("no batches traced")
        return 1
    common = collections.Counter(b["n"] for b in batches).most_common(1)[0][0]
    bs = [b for b in batches if b["n"] == common and "copied" in b and "sent" in b]
    gaps = [b2["start"] - b1["end"] for b1, b2 in zip(batches, batches[1:]) if b1["n"] == common]
    per = collections.defaultdict(list)
    for b in bs:
        per["whole batch"].append(b["end"] - b["start"])
        per["CREATE frames out (w_start to w_sent)"].append(b["sent"] - b["start"])
        if b["replies"]:
            per["first CREATE reply after the send"].append(b["replies"][0] - b["sent"])
            per["the rest of the replies, read and imported"].append(b["created"] - b["replies"][0])
            per["an import (reply to made), median in the batch"].append(
                med([m - r for r, m in zip(b["replies"], b["made"])]))
            if b["queued"]:
                per["its copy enqueued (made to queued), median in the batch"].append(
                    med([q - m for m, q in zip(b["made"], b["queued"])]))
                per["the next reply read (queued to reply), median in the batch"].append(
                    med([r - q for q, r in zip(b["queued"], b["replies"][1:])]))
        per["wait for the copies"].append(b["copied"] - b["created"])
        per["SEAL pass"].append(b["end"] - b["copied"])
        per["CREATEs sent (the rest from spares)"].append(b["ncreate"])
    per["between batches (the caller's work)"] = gaps
    dd = collections.defaultdict(list)
    opened = {}
    for t, ev, v, _ in sorted(daemon):
        if ev in ("d_create", "d_seal"):
            opened[ev] = t
        elif ev == "d_created" and "d_create" in opened:
            dd["daemon: a CREATE's handler"].append(t - opened.pop("d_create"))
        elif ev == "d_seal_done" and "d_seal" in opened:
            dd["daemon: a SEAL's handler"].append(t - opened.pop("d_seal"))
    # The daemon's fences (a CREATE's reply waits for the shared stream) and where its
    # memory came from: kept and cleared, kept before its clear ran, or fresh from the pool.
    waits, fence_open = [], {}
    kinds = collections.Counter()
    for t, ev, v, part in sorted(daemon):
        if ev == "d_fence":
            if part == 0:
                fence_open[v] = t
            kinds["fences: waited" if part == 0 else "fences: nothing to wait for"] += 1
        elif ev == "d_fence_done" and v in fence_open:
            waits.append(t - fence_open.pop(v))
        elif ev in ("d_kept", "d_kept_unclear", "d_fresh"):
            kinds[{"d_kept": "allocations: kept", "d_kept_unclear": "... of which not yet cleared",
                   "d_fresh": "allocations: fresh from the pool"}[ev]] += 1
    dd["daemon: a fence that waited, until done"] = waits
    # The daemon's CREATEs inside each batch: the first after the frames went out, the spacing
    # of the rest, and the stock's top-ups (d_ahead .. d_ahead_done) between them.
    creates = [t for t, ev, _, _ in sorted(daemon) if ev == "d_create"]
    aheads = []
    a_open = None
    for t, ev, _, _ in sorted(daemon):
        if ev == "d_ahead":
            a_open = t
        elif ev == "d_ahead_done" and a_open is not None:
            aheads.append((a_open, t))
            a_open = None
    import bisect
    first, spacing, ahead_in = [], [], []
    for b in bs:
        lo = bisect.bisect_left(creates, b["sent"])
        hi = bisect.bisect_left(creates, b["created"])
        cs = creates[lo:hi]
        if cs:
            first.append(cs[0] - b["sent"])
            spacing += [y - x for x, y in zip(cs, cs[1:])]
            ahead_in.append(sum(min(e, b["created"]) - max(s0, b["sent"]) for s0, e in aheads
                                if e > b["sent"] and s0 < b["created"]))
    # The SEAL pass: the daemon's SEALs after the copies were waited for (the frames go out
    # right after), their spacing, and the replies' flushes (d_flush) until the batch's end.
    seals = [t for t, ev, _, _ in sorted(daemon) if ev == "d_seal"]
    flushes = [t for t, ev, _, _ in sorted(daemon) if ev == "d_flush"]
    s_first, s_spacing, s_last_to_flush, s_flush_to_end = [], [], [], []
    for b in bs:
        lo = bisect.bisect_left(seals, b["copied"])
        hi = bisect.bisect_left(seals, b["end"])
        ss = seals[lo:hi]
        if not ss:
            continue
        s_first.append(ss[0] - b["copied"])
        s_spacing += [y - x for x, y in zip(ss, ss[1:])]
        fl = [f for f in flushes[bisect.bisect_left(flushes, ss[-1]):] if f < b["end"]]
        if fl:
            s_last_to_flush.append(fl[0] - ss[-1])
            s_flush_to_end.append(b["end"] - fl[-1])
    dd["daemon: first SEAL handled after the copies were waited for"] = s_first
    dd["daemon: from one SEAL handled to the next"] = s_spacing
    dd["daemon: last SEAL handled to its replies' flush"] = s_last_to_flush
    dd["the SEAL replies' flush to the batch's end (client)"] = s_flush_to_end
    dd["daemon: first CREATE handled after the frames went out"] = first
    dd["daemon: from one CREATE handled to the next"] = spacing
    dd["daemon: stock top-ups during a batch's CREATE pass (us summed)"] = ahead_in
    print(f"{len(bs)} batches of {common} values ({len(batches)} batches in all)\n")
    print("| daemon counts | n |\n|---|---|")
    for k, v in sorted(kinds.items()):
        print(f"| {k} | {v} |")
    print()
    print("| step | median us |\n|---|---|")
    for k, v in list(per.items()) + list(dd.items()):
        print(f"| {k} | {med(v):.1f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
