#!/usr/bin/env python3
"""zarr_bench.py: a zarr v3 array written and read through GpukvStore, beside zarr's own stores.

    zarr_bench.py URL [--size 1G] [--chunks 4M,64K] [--gpu [--gpu-only]] [--reads 5]
                  [--rounds 3] [--profile] [--lease-cache BYTES] [--concurrency N]

For each chunk size, a 1-D uint8 array of --size bytes (no compression: the store is measured,
not a codec) is written then read whole through:
  - MemoryStore (host buffers) and, with --gpu, GpuMemoryStore (GPU buffers), in-process;
  - LocalStore on /dev/shm, in-process, host buffers (and GPU buffers with --gpu);
  - GpukvStore on URL, host buffers (and GPU buffers with --gpu): written by this process and
    read by a second process, which is what sharing chunks between processes means.
Throughput is size / the median of --reads reads after one warm-up read (writes: the better of
2; with --gpu and --rounds > 1 the two GPU rows the targets compare write a fresh array once
per round, alternating, and give the median); "read vs in-process memory store" is the read
throughput over the memory store with the same buffers in this process (MemoryStore for host,
GpuMemoryStore for GPU). Targets: GPU reads through gpukv from another process >= 0.8x
GpuMemoryStore, and GPU writes through gpukv >= 0.8x GpuMemoryStore's (issue 38). The two GPU
rows that target compares are measured in
--rounds alternating rounds (the table takes the median; the ratio of each round is printed). Processes
run at different speeds on a shared machine (the same code's reads swing 1.5x from one child
process to the next), so the reading process also holds the array in a GpuMemoryStore of its own
and reads the two in turn: the last column, the median over rounds of that ratio, compares them
at one process's speed.
--lease-cache BYTES: the reading store's lease_cache (default: the store's own, 1 GiB; chunks
read again renew their leases instead of importing the memory again). --concurrency N: zarr's async.concurrency.
--profile: the reading process also times the steps of a GPU chunk read (MAP, the CuPy view,
the store's get) over distinct chunks.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import zarr

from gpukv.zarr import GpukvStore
from sizes import size_arg  # bench/sizes.py


def sync(gpu: bool) -> None:
    if gpu:
        import cupy as cp

        cp.cuda.Device().synchronize()


def timed(fn, reps: int, gpu: bool, warmup: int = 0, best: bool = False) -> float:
    """The median (or the best) of reps timed calls of fn, after warmup untimed ones. Python's
    garbage collector runs before each call and not during it: a full collection (tens of ms
    with zarr's objects about) would land on whichever store's call it fell in."""
    times = []
    for i in range(warmup + reps):
        sync(gpu)
        gc.collect()
        gc.disable()
        try:
            t0 = time.perf_counter()
            fn()
            sync(gpu)
            t = time.perf_counter() - t0
        finally:
            gc.enable()
        if i >= warmup:
            times.append(t)
    return min(times) if best else sorted(times)[len(times) // 2]


def make_store(kind: str, url: str, root: str, tmp: str):
    if kind == "MemoryStore":
        return zarr.storage.MemoryStore()
    if kind == "GpuMemoryStore":
        return zarr.storage.GpuMemoryStore()
    if kind == "LocalStore":
        return zarr.storage.LocalStore(os.path.join(tmp, root))
    return GpukvStore(url, root=root)


def read_in_child(url: str, root: str, gpu: bool, reps: int, size: int, profile: bool,
                  lease_cache: int | None = None, concurrency: int | None = None) -> dict:
    """Reads the array back in a second process. Returns the median time ("median") and, with
    GPU buffers, the median time of a GpuMemoryStore in that same process holding the same
    array, read in turn with it ("ref"): the two then share the process's speed."""
    code = f"""
import contextlib, json, time, zarr
from gpukv.zarr import GpukvStore
import gpukv
gpu, reps = {gpu!r}, {reps!r}
if {concurrency!r}:
    zarr.config.set({{"async.concurrency": {concurrency!r}}})
def sync():
    if gpu:
        import cupy as cp
        cp.cuda.Device().synchronize()
lease_cache = {lease_cache!r}
store = GpukvStore({url!r}, root={root!r}, read_only=True,
                   **({{}} if lease_cache is None else {{"lease_cache": lease_cache}}))
z = zarr.open_array(store, mode="r")
ref = None
if gpu:
    with zarr.config.enable_gpu():
        ref = zarr.create_array(zarr.storage.GpuMemoryStore(), shape=z.shape, chunks=z.chunks,
                                dtype=z.dtype, compressors=None)
        ref[:] = z[:]
times, ref_times = [], []
# With --profile: where each read's time goes, in the store's two steps (the pipelined MAPs, and
# the views zarr gets), the rest being zarr's own work and the event loop.
spent = {{"map_many": 0.0, "views": 0.0}}
if {profile!r}:
    def timed_in(name, fn):
        def wrapper(*a, **k):
            t = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                spent[name] += time.perf_counter() - t
        return wrapper
    store.client._map_many = timed_in("map_many", store.client._map_many)
    store._from_mapping = timed_in("views", store._from_mapping)
steps = []
with zarr.config.enable_gpu() if gpu else contextlib.nullcontext():
    for i in range(reps + 1):
        spent["map_many"] = spent["views"] = 0.0
        sync(); t0 = time.perf_counter(); out = z[:]; sync()
        if i:
            times.append(time.perf_counter() - t0)
            steps.append((times[-1], spent["map_many"], spent["views"]))
        if ref is not None:
            sync(); t0 = time.perf_counter(); ref[:]; sync()
            if i:
                ref_times.append(time.perf_counter() - t0)
    tail = out[-1000:]
    tail = tail.get() if gpu else tail
assert tail.nbytes == 1000 and int(tail[-1]) == ({size} - 1) % 256, int(tail[-1])
med = lambda t: sorted(t)[len(t) // 2]
result = {{"median": med(times), "steps": steps, "ref": med(ref_times) if ref_times else None}}
if {profile!r} and gpu:
    import cupy as cp
    from zarr.core.buffer import gpu as gbuf
    proto = gbuf.buffer_prototype
    c = store.client
    keys = list(c.keys({root!r} + "/c/"))[:2000]  # distinct values, as a read meets them
    n = len(keys)
    def per(fn):
        t0 = time.perf_counter()
        for k in keys:
            fn(k)
        c.ping()
        sync()
        return (time.perf_counter() - t0) / n * 1e6
    result["profile"] = {{
        "PING": per(lambda k: c.ping()),
        "map+unmap": per(lambda k: c.map(k).unmap()),
        "map + cupy view, dropped": per(lambda k: cp.asarray(c.map(k))),
        "store.get_sync (GPU)": per(lambda k: store.get_sync(k[len({root!r}) + 1:],
                                                            prototype=proto)),
    }}
print(json.dumps(result))
"""
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True)
    res = json.loads(out.stdout.strip().splitlines()[-1])
    if "profile" in res:
        print(f"per-chunk steps over distinct chunks, {root}: " + ", ".join(
            f"{k} {v:.1f} us" for k, v in res["profile"].items()))
    if profile:
        print(f"each read of the array, {root}: " + "; ".join(
            f"{t * 1e3:.1f} ms (map_many {m * 1e3:.1f}, views {v * 1e3:.1f})"
            for t, m, v in res["steps"]))
    return res


TARGET = (("GpuMemoryStore", True), ("GpukvStore", True))


def run(url: str, size: int, chunk: int, gpu: bool, reps: int, tmp: str, profile: bool,
        rounds: int, gpu_only: bool = False, lease_cache: int | None = None,
        concurrency: int | None = None) -> list[dict]:
    host = np.arange(size, dtype=np.uint8)  # wraps at 256
    dev = None
    if gpu:
        import cupy as cp

        dev = cp.asarray(host)
    configs = [] if gpu_only else [("MemoryStore", False), ("LocalStore", False),
                                   ("GpukvStore", False)]
    if gpu:
        configs += [("GpuMemoryStore", True), ("LocalStore", True), ("GpukvStore", True)]
    arrays, writes, reads = {}, {}, {cfg: [] for cfg in configs}
    same = []  # (gpukv, GpuMemoryStore) medians in the reading process, by round
    for kind, on_gpu in configs:
        root = f"zb/{kind}/{'gpu' if on_gpu else 'host'}/{chunk}"
        store = make_store(kind, url, root, tmp)
        with zarr.config.enable_gpu() if on_gpu else contextlib.nullcontext():
            z = zarr.create_array(store, shape=(size,), chunks=(chunk,), dtype="u1",
                                  compressors=None, overwrite=True)
            src = dev if on_gpu else host
            writes[(kind, on_gpu)] = timed(lambda: z.__setitem__(slice(None), src), 2, on_gpu,
                                           best=True)
        arrays[(kind, on_gpu)] = (store, z, root)
    # GPU writes of the two rows the targets compare, again in alternating rounds, each a fresh
    # array (new keys) written once: one write of each, spread over seconds, swings more than
    # the stores differ. The table's write figure for these rows is the median of the rounds.
    wround: dict = {cfg: [] for cfg in TARGET} if gpu and rounds > 1 else {}
    for r in range(rounds if wround else 0):
        for kind, on_gpu in TARGET:
            root = f"zb/{kind}/gpu/{chunk}/w{r}"
            store = make_store(kind, url, root, tmp)
            with zarr.config.enable_gpu():
                z = zarr.create_array(store, shape=(size,), chunks=(chunk,), dtype="u1",
                                      compressors=None, overwrite=True)
                wround[(kind, on_gpu)].append(
                    timed(lambda: z.__setitem__(slice(None), dev), 1, True))
            if kind == "GpukvStore":
                asyncio.run(store.clear())
                store.close()
    if wround:
        # How many of the daemon's allocations this process's shared connection holds imports
        # of (held imports): the writes of a round after the first find them imported.
        mem = GpukvStore(url).client.info("memory")
        print(f"after the write rounds: held_imports {mem.get('held_imports', 'n/a')}, "
              f"kept_export_reuses {mem.get('kept_export_reuses', 'n/a')}")
    # The rows the target compares are read again in alternating rounds: the machine's noise
    # then shows in the spread of their ratio.
    for r in range(rounds):
        for cfg in configs:
            if r and cfg not in TARGET:
                continue
            store, z, root = arrays[cfg]
            kind, on_gpu = cfg
            if kind == "GpukvStore":
                res = read_in_child(url, root, on_gpu, reps, size, profile, lease_cache,
                                    concurrency)
                t = res["median"]
                if res["ref"]:
                    same.append((t, res["ref"]))
            else:
                with zarr.config.enable_gpu() if on_gpu else contextlib.nullcontext():
                    t = timed(lambda: z[:], reps, on_gpu, warmup=1)
                    out = z[:]
                    tail = out[-1000:].get() if on_gpu else out[-1000:]
                    assert int(tail[-1]) == (size - 1) % 256
            reads[cfg].append(t)
    rows = []
    for cfg in configs:
        kind, on_gpu = cfg
        store, z, root = arrays[cfg]
        w = statistics.median(wround[cfg]) if cfg in wround else writes[cfg]
        rows.append({"store": kind, "buffers": "GPU" if on_gpu else "host", "chunk": chunk,
                     "write_gbs": size / w / 1e9,
                     "read_gbs": size / statistics.median(reads[cfg]) / 1e9,
                     "read_from": "another process" if kind == "GpukvStore" else "in-process",
                     "same": statistics.median(r / g for g, r in same)
                     if kind == "GpukvStore" and on_gpu and same else None})
        if kind == "GpukvStore":
            asyncio.run(store.clear())
        elif kind == "LocalStore":
            shutil.rmtree(os.path.join(tmp, root), ignore_errors=True)
    if gpu and rounds > 1:
        print_rounds(f"{human(chunk)} chunks: GPU reads", reads)
    if wround:
        print_rounds(f"{human(chunk)} chunks: GPU writes of a new array", wround, median=True)
    if same:
        print(f"{human(chunk)} chunks: GPU reads, GpukvStore / GpuMemoryStore in the reading "
              "process, read in turn, by round: " + ", ".join(f"{r / g:.2f}" for g, r in same)
              + " (ms: " + ", ".join(f"{g * 1e3:.1f}/{r * 1e3:.1f}" for g, r in same)
              + f"); median {statistics.median(r / g for g, r in same):.2f}")
    return rows


def print_rounds(what: str, times: dict, median: bool = False) -> None:
    """The two target rows' times by round (GpukvStore / GpuMemoryStore, as throughput)."""
    mem, kv = times[TARGET[0]], times[TARGET[1]]
    ratios = [m / g for m, g in zip(mem, kv)]
    print(f"{what}, GpukvStore / GpuMemoryStore by round: "
          + ", ".join(f"{x:.2f}" for x in ratios) + " (ms: "
          + ", ".join(f"{g * 1e3:.1f}/{m * 1e3:.1f}" for m, g in zip(mem, kv)) + ")"
          + (f"; median {statistics.median(ratios):.2f}" if median else ""))


def human(n: int) -> str:
    for unit, m in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m} {unit}"
    return str(n)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--size", default="1G")
    ap.add_argument("--chunks", default="4M,64K")
    ap.add_argument("--gpu", action="store_true")
    ap.add_argument("--reads", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpu-only", action="store_true",
                    help="only the GPU-buffer rows (with --gpu)")
    ap.add_argument("--lease-cache", type=size_arg,
                    help="the reading GpukvStore's lease_cache (bytes; default: the store's)")
    ap.add_argument("--concurrency", type=int, help="zarr's async.concurrency (default 10)")
    a = ap.parse_args()
    size = size_arg(a.size)
    if a.concurrency:
        zarr.config.set({"async.concurrency": a.concurrency})
    tmp = tempfile.mkdtemp(prefix="gkv-zarr-bench-", dir="/dev/shm")
    rows = []
    try:
        for c in a.chunks.split(","):
            rows += run(a.url, size, size_arg(c), a.gpu, a.reads, tmp, a.profile, a.rounds,
                        a.gpu_only, a.lease_cache, a.concurrency)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    ref = {(r["chunk"], r["buffers"]): r["read_gbs"] for r in rows
           if r["store"] in ("MemoryStore", "GpuMemoryStore")}
    print(f"zarr {zarr.__version__}, {human(size)} uint8 array, no compression; write: the better "
          f"of 2, read: the median of {a.reads} after a warm-up read\n")
    print("| store | buffers | chunk | write GB/s | read GB/s | read from | read vs in-process "
          "memory store | read vs GpuMemoryStore in the reading process |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        ratio = r["read_gbs"] / ref[(r["chunk"], r["buffers"])]
        same = f"{r['same']:.2f}x" if r["same"] else "—"
        print(f"| {r['store']} | {r['buffers']} | {human(r['chunk'])} | {r['write_gbs']:.2f} | "
              f"{r['read_gbs']:.2f} | {r['read_from']} | {ratio:.2f}x | {same} |")


if __name__ == "__main__":
    main()
