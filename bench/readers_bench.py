#!/usr/bin/env python3
"""readers_bench.py: N reader processes reading one value each from one gpukvd at once (values
the daemon holds on GPU 0, rewritten before each round), three ways, side by side in one run:
  - map: MAP, the reader's import, unmap (the reader reads nothing: the bound is the mapping);
  - get_to_device: libgpukv maps and copies into the reader's own buffer (its import held);
  - get_to_buffer: the reader registered its buffer once; the daemon copies into it itself
    (PROTOCOL.md "Reading into a registered buffer"): no import, copy or GPU work of the
    reader's per read.
The reference: one process copying the same bytes device to device (cudaMemcpyAsync of N x
SIZE into N buffers, on one stream), the GPU's own bound for moving them once.

Usage: readers_bench.py GPUKVD [--readers 16] [--size 64M] [--rounds 5]
Needs CuPy and the gpukv package. Prints a Markdown table."""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import proc_readers  # noqa: E402  (bench/proc_readers.py)
from sizes import size_arg  # noqa: E402  (bench/sizes.py)

import cupy  # noqa: E402
import gpukv  # noqa: E402


def raw_copy(n: int, size: int, rounds: int) -> float:
    """GB/s of n device-to-device copies of size bytes on one stream (median of rounds)."""
    src = [cupy.random.randint(0, 255, size, dtype=cupy.uint8) for _ in range(n)]
    dst = [cupy.empty(size, dtype=cupy.uint8) for _ in range(n)]
    s = cupy.cuda.Stream(non_blocking=True)
    walls = []
    for _ in range(rounds + 1):
        t0 = time.perf_counter()
        for a, b in zip(src, dst):
            cupy.cuda.runtime.memcpyAsync(b.data.ptr, a.data.ptr, size, 3, s.ptr)
        s.synchronize()
        walls.append(time.perf_counter() - t0)
    del src, dst
    return n * size / statistics.median(walls[1:]) / 1e9


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("daemon")
    ap.add_argument("--readers", type=int, default=16)
    ap.add_argument("--size", default="64M")
    ap.add_argument("--rounds", type=int, default=5)
    a = ap.parse_args()
    n, size = a.readers, size_arg(a.size)
    root = tempfile.mkdtemp(prefix="gkv-readers-")
    sock = os.path.join(root, "s.sock")
    log = open(os.path.join(root, "gpukvd.log"), "wb")
    p = subprocess.Popen([a.daemon, "--backend", "cuda", "--socket", sock, "--maxmemory", "40G"],
                         stdout=subprocess.DEVNULL, stderr=log)
    try:
        for _ in range(200):
            try:
                c = gpukv.Client(f"unix:{sock}")
                break
            except Exception:  # noqa: BLE001  (not listening yet)
                time.sleep(0.05)
        url = c.url
        vals = [cupy.random.randint(0, 255, size, dtype=cupy.uint8) for _ in range(n)]
        c.set_from_device("warm", vals[0][: 1 << 20])
        res = {}
        for how in ("map", "get_to_device", "get_to_buffer", "map", "get_to_device",
                    "get_to_buffer"):
            keys = [f"{how}/{i}" for i in range(n)]
            gbs = proc_readers.concurrent_reads(
                lambda i: c.set_from_device(keys[i], vals[i]), url, keys, size, a.rounds,
                warm="warm", how=how, dev=0)
            res.setdefault(how, []).append(gbs)
        ref = raw_copy(n, size, a.rounds)
        print(f"\n{n} reader processes of {a.size} each (one GPU, values the daemon holds), "
              f"median round of {a.rounds}, two runs each, interleaved:\n")
        print("| read | GB/s aggregate | / raw device copy |")
        print("|---|---|---|")
        for how, v in res.items():
            print(f"| {how} | {' / '.join(f'{x:.1f}' for x in v)} | "
                  f"{' / '.join(f'{x / ref:.2f}' for x in v)} |")
        print(f"| raw copy of the same bytes on the GPU (one process, one stream) | {ref:.1f} "
              f"| 1.00 |")
        c.close()
    finally:
        p.terminate()
        p.wait(30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
