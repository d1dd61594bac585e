#!/usr/bin/env python3
"""bench/idle_probe.py: what runs slower after an idle pause, without gpukvd (issue 35).

A remote read that follows a pause of 20-200 ms runs slower than one that follows another read
(RESULTS.md, session 37), and holding the CPUs out of deep idle states did not change it (session
39). This probe times, after pauses of 0, 1, 20 and 200 ms, each of the pieces a pull is made
of, alone:
  d2d     a 32 MiB copy on one GPU (what the owner does into its arena), on the GPU's clock
          (events) and the host's (from the call to the synchronize's return)
  peer    a 32 MiB and a 1 GiB cudaMemcpyPeerAsync from GPU 0 to GPU 1 (what the link does)
  thread  a thread woken through a condition variable (the loop handing a job to a worker)
  proc    a process woken through a pipe and answering through another (a request between
          two daemons)
Each row: the median and the largest of --reps tries, in microseconds. Pauses are taken in
turn (0, 1, 20, 200, 0, 1, ...) so that a drift over the run shows in every column alike. Each
piece is timed after a sleep of the column's pause, but what ran before that sleep is the
previous piece: a column's GPU rows measure how long since the GPU (or the link) last worked
only roughly (the 0 ms column's first copy on one GPU and first copy across follow the 200 ms
column's steps: their GPU and link were idle for about half a second).

  python3 bench/idle_probe.py [--reps 9]
Needs CuPy and two GPUs for `peer` (one GPU: that row is left out).
"""
import argparse
import os
import statistics
import threading
import time

import cupy as cp

PAUSES_MS = (0, 1, 20, 200)


def d2d(src, dst, nbytes, stream, ev0, ev1):
    t0 = time.perf_counter()
    ev0.record(stream)
    cp.cuda.runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, 3, stream.ptr)
    ev1.record(stream)
    stream.synchronize()
    host = (time.perf_counter() - t0) * 1e6
    return host, cp.cuda.get_elapsed_time(ev0, ev1) * 1e3


def peer(src, dst, nbytes, stream, ev0, ev1):
    t0 = time.perf_counter()
    ev0.record(stream)
    cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, 1, src.data.ptr, 0, nbytes, stream.ptr)
    ev1.record(stream)
    stream.synchronize()
    host = (time.perf_counter() - t0) * 1e6
    return host, cp.cuda.get_elapsed_time(ev0, ev1) * 1e3


class Waker:
    """A thread that waits on a condition variable and notes when it woke."""

    def __init__(self):
        self.cv = threading.Condition()
        self.go = False
        self.woke = 0.0
        self.done = threading.Event()
        self.t = threading.Thread(target=self.run, daemon=True)
        self.t.start()

    def run(self):
        while True:
            with self.cv:
                while not self.go:
                    self.cv.wait()
                self.go = False
            self.woke = time.perf_counter()
            self.done.set()

    def once(self):
        self.done.clear()
        t0 = time.perf_counter()
        with self.cv:
            self.go = True
            self.cv.notify()
        self.done.wait()
        return (self.woke - t0) * 1e6


class Echo:
    """A child process that answers each byte written to its pipe."""

    def __init__(self):
        r1, self.w = os.pipe()
        self.r, w2 = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            os.close(self.w)
            os.close(self.r)
            while True:
                b = os.read(r1, 1)
                if not b:
                    os._exit(0)
                os.write(w2, b)
        os.close(r1)
        os.close(w2)

    def once(self):
        t0 = time.perf_counter()
        os.write(self.w, b"x")
        os.read(self.r, 1)
        return (time.perf_counter() - t0) * 1e6

    def close(self):
        os.close(self.w)
        os.waitpid(self.pid, 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=9)
    args = ap.parse_args()
    ngpu = cp.cuda.runtime.getDeviceCount()
    small, big = 32 << 20, 1 << 30
    with cp.cuda.Device(0):
        a = cp.ones(big, dtype=cp.uint8)
        b = cp.empty(big, dtype=cp.uint8)
        s0 = cp.cuda.Stream(non_blocking=True)
        e0, e1 = cp.cuda.Event(), cp.cuda.Event()
    if ngpu > 1:
        with cp.cuda.Device(1):
            c = cp.empty(big, dtype=cp.uint8)
        with cp.cuda.Device(0):
            try:
                cp.cuda.runtime.deviceEnablePeerAccess(1)
            except cp.cuda.runtime.CUDARuntimeError:
                pass
    waker, echo = Waker(), Echo()
    rows = {}

    def note(name, pause, v):
        rows.setdefault(name, {}).setdefault(pause, []).append(v)

    # warm every path once
    with cp.cuda.Device(0):
        d2d(a, b, small, s0, e0, e1)
        if ngpu > 1:
            peer(a, c, big, s0, e0, e1)
    waker.once()
    echo.once()
    for _ in range(args.reps):
        for pause in PAUSES_MS:
            with cp.cuda.Device(0):
                time.sleep(pause / 1e3)
                h, g = d2d(a, b, small, s0, e0, e1)
                note("d2d 32 MiB, GPU", pause, g)
                note("d2d 32 MiB, host", pause, h)
                h, g = d2d(a, b, small, s0, e0, e1)
                note("d2d 32 MiB again at once, GPU", pause, g)
                if ngpu > 1:
                    time.sleep(pause / 1e3)
                    h, g = peer(a, c, small, s0, e0, e1)
                    note("peer 32 MiB, GPU", pause, g)
                    note("peer 32 MiB, host", pause, h)
                    time.sleep(pause / 1e3)
                    h, g = peer(a, c, big, s0, e0, e1)
                    note("peer 1 GiB, GPU", pause, g)
            time.sleep(pause / 1e3)
            note("thread wake-up", pause, waker.once())
            time.sleep(pause / 1e3)
            note("process round trip", pause, echo.once())
    echo.close()
    print("| us: median / max after a pause of | " + " | ".join(f"{p} ms" for p in PAUSES_MS)
          + " |")
    print("|---|" + "---|" * len(PAUSES_MS))
    for name, by in rows.items():
        cells = [f"{statistics.median(by[p]):.1f} / {max(by[p]):.1f}" for p in PAUSES_MS]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
