#!/usr/bin/env python3
"""nixl_rounds.py: where a round of concurrent remote reads spends its time, from the timelines
the daemons and clients write with GPUKV_TRACE=PATH (common/trace.h, one file per process:
PATH.PID), as nixl_bench.py's 16 readers (threads or processes) make them.

A round is a burst of MAPs reaching the reader's daemon (its r_read events, at least --min
of them, less than --gap ms apart). For each round, from its first MAP on (ms):
  served   the reader's last replica kept after its pull (r_kept)
  owner    the owner's STAGEs: first taken in .. last written (o_in .. o_sent)
  clients  the round's last client answer (the first as many c_reply of the pulls' size as
           there were reads, in the clients' own files, when traced)
  loop     the reader's loop giving the pulls their memory, summed (r_alloc .. r_queued), and
           how many allocations were fresh from the pool with the longest pool call
           (d_fresh .. d_pooled)
  pulls    the pulls on their workers: first started .. last done, and how many at most at once
  waits    the MAPs' early frames: from a pull's memory queued (r_queued) to an early frame
           (d_early), the round's two lists paired in order (approximate where some pulls
           sent theirs before queueing, as kept memory does: those count 0)

Usage: nixl_rounds.py PATH [--min 8] [--gap 4]"""

from __future__ import annotations

import argparse
import collections
import glob


def load(path):
    """{pid: [(us, event, value), ...]} over the files PATH.*, each sorted."""
    by_pid = collections.defaultdict(list)
    for f in glob.glob(path + ".*"):
        tail = f.rsplit(".", 1)[1]
        if not tail.isdigit():
            continue
        with open(f) as fh:
            for line in fh:
                p = line.split()
                if len(p) >= 4:
                    by_pid[int(tail)].append((int(p[0]), p[1], int(p[2])))
    for evs in by_pid.values():
        evs.sort()
    return by_pid


def roles(by_pid):
    """The reader's daemon (most r_read), the owner's (most o_in), the clients (c_reply)."""
    def most(ev):
        counts = {pid: sum(1 for e in evs if e[1] == ev) for pid, evs in by_pid.items()}
        pid = max(counts, key=counts.get, default=None)
        return pid if pid is not None and counts[pid] else None
    reader, owner = most("r_read"), most("o_in")
    clients = [pid for pid, evs in by_pid.items()
               if pid not in (reader, owner) and any(e[1] == "c_reply" for e in evs)]
    return reader, owner, clients


def rounds(reads, least, gap_us):
    """Bursts of read times: (first, last) for each of at least `least` reads."""
    out, start, prev, n = [], None, None, 0
    for t in reads + [None]:
        if t is not None and prev is not None and t - prev <= gap_us:
            n += 1
        else:
            if start is not None and n >= least:
                out.append((start, prev))
            start, n = t, 1
        prev = t
    return out


def spans(evs, begin, end, t0, t1):
    """(start, stop) pairs of events begin .. end inside [t0, t1], matched in order."""
    out, open_ = [], []
    for t, ev, _ in evs:
        if t < t0 or t > t1:
            continue
        if ev == begin:
            open_.append(t)
        elif ev == end and open_:
            out.append((open_.pop(0), t))
    return out


def most_at_once(pairs):
    edges = sorted([(a, 1) for a, _ in pairs] + [(b, -1) for _, b in pairs])
    now = best = 0
    for _, d in edges:
        now += d
        best = max(best, now)
    return best


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("path")
    ap.add_argument("--min", type=int, default=8, help="reads in a round, at least")
    ap.add_argument("--gap", type=float, default=4.0, help="ms between rounds, at least")
    a = ap.parse_args()
    by_pid = load(a.path)
    reader, owner, clients = roles(by_pid)
    if reader is None:
        print("no reader's daemon in the trace (no r_read)")
        return 1
    r_evs = by_pid[reader]
    o_evs = by_pid.get(owner, [])
    reads = [t for t, ev, _ in r_evs if ev == "r_read"]
    found = rounds(reads, a.min, a.gap * 1000)
    print(f"reader {reader}, owner {owner}, {len(clients)} traced clients, {len(found)} rounds")
    print("round  reads  served  owner          clients  loop (fresh, longest pool)   "
          "pulls (at once)  early frame after memory (median, max)")
    for i, (t0, last_read) in enumerate(found):
        horizon = t0 + 200_000  # a round ends well within 0.2 s
        nxt = [s for s, _ in found if s > t0]
        t1 = min([horizon] + nxt)
        n = sum(1 for t in reads if t0 <= t <= last_read)
        pulls = spans(r_evs, "r_pull", "r_pulled", t0, t1)
        size = next((v for t, ev, v in r_evs if ev == "r_pull" and t0 <= t < t1), 0)
        kept = [t for t, ev, _ in r_evs if ev == "r_kept" and t0 <= t < t1][:n]
        served = (kept[-1] - t0) / 1e3 if kept else float("nan")
        o_in = [t for t, ev, _ in o_evs if ev == "o_in" and t0 - 5_000 <= t < t1]
        o_sent = [t for t, ev, _ in o_evs if ev == "o_sent" and t0 - 5_000 <= t < t1]
        owner_txt = (f"{(o_in[0] - t0) / 1e3:5.2f}..{(o_sent[-1] - t0) / 1e3:5.2f}"
                     if o_in and o_sent else "     -      ")
        replies = sorted(t for pid in clients for t, ev, v in by_pid[pid]
                         if ev == "c_reply" and v == size and t0 <= t < t1)[:n]
        clients_txt = f"{(replies[-1] - t0) / 1e3:6.2f}" if replies else "     -"
        allocs = spans(r_evs, "r_alloc", "r_queued", t0, t1)
        loop_ms = sum(b - x for x, b in allocs) / 1e3
        pools = spans(r_evs, "d_fresh", "d_pooled", t0, t1)
        longest = max((b - x for x, b in pools), default=0) / 1e3
        pulls_txt = (f"{(pulls[0][0] - t0) / 1e3:5.2f}..{(max(b for _, b in pulls) - t0) / 1e3:5.2f}"
                     f" ({most_at_once(pulls)})" if pulls else "      -")
        queued = [t for t, ev, _ in r_evs if ev == "r_queued" and t0 <= t < t1]
        early = [t for t, ev, _ in r_evs if ev == "d_early" and t0 <= t < t1]
        lags = sorted(max(0, e - q) for q, e in zip(queued, early))
        lag_txt = (f"{lags[len(lags) // 2] / 1e3:.2f}, {lags[-1] / 1e3:.2f}" if lags else "-")
        print(f"{i:5d}  {n:5d}  {served:6.2f}  {owner_txt}  {clients_txt}  "
              f"{loop_ms:5.2f} ({len(pools)}, {longest:4.2f})            {pulls_txt}  {lag_txt}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
