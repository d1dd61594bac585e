#!/usr/bin/env python3
"""zarr_steps.py: what one 4 MiB GPU chunk read costs, step by step, in the reading process.

    zarr_steps.py URL [--chunks 256] [--size 4M]

Writes --chunks values of --size bytes (from device memory), then, with a lease cache that
holds them all (as GpukvStore's), times per chunk (best of 5 passes over all of them): the PING
round trip; _map_many of 10 keys at a time (leases renewed); cupy.asarray of a mapping; the view
GpukvStore makes (directly on the pointer); zarr's gpu.Buffer over it; GpuMemoryStore's own
view; and GpukvStore.get against GpuMemoryStore.get under asyncio.gather, as zarr issues reads,
at async.concurrency 10 and 64. Needs a cuda-backend gpukvd on a local socket, CuPy and zarr.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import cupy as cp
import zarr
from zarr.core.buffer import gpu as gbuf

from gpukv import Client
from gpukv.zarr import LEASE_CACHE_SLOTS, GpukvStore, _cupy_view


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--chunks", type=int, default=256)
    ap.add_argument("--size", default="4M")
    a = ap.parse_args()
    size = int(a.size[:-1]) << {"K": 10, "M": 20}[a.size[-1]] if a.size[-1] in "KM" else int(a.size)
    n = a.chunks
    src = cp.arange(size, dtype=cp.uint8)
    keys = [f"zs/c/{i}" for i in range(n)]
    with Client(a.url) as w:
        for k in keys:
            w.set_from_device(k, src)
    c = Client(a.url)
    c.set_lease_cache(LEASE_CACHE_SLOTS, 2 * n * size, 2 * n * size)

    def per(label: str, fn) -> None:
        best = float("inf")
        for _ in range(5):
            cp.cuda.Device().synchronize()
            t0 = time.perf_counter()
            fn()
            cp.cuda.Device().synchronize()
            best = min(best, time.perf_counter() - t0)
        print(f"| {label} | {best / n * 1e6:.2f} |")

    def maps() -> list:
        out = []
        for i in range(0, n, 10):
            out += c._map_many(keys[i : i + 10], None)
        return out

    print("| step | us per chunk |\n|---|---|")
    per("PING round trip alone", lambda: [c.ping() for _ in range(n)])
    # The first pass imports; the dropped mappings end into the cache, and the later passes
    # (the best of which is kept) renew their leases.
    per("_map_many of 10 renewed leases, dropped", maps)
    ms = maps()
    per("cupy.asarray(mapping)", lambda: [cp.asarray(m) for m in ms])
    per("GpukvStore's view (_cupy_view)", lambda: [_cupy_view(m) for m in ms])
    arrs = [_cupy_view(m) for m in ms]
    per("gpu.Buffer.from_array_like", lambda: [gbuf.Buffer.from_array_like(x) for x in arrs])
    bufs = [gbuf.Buffer.from_array_like(x) for x in arrs]
    per("GpuMemoryStore's view (from_buffer(b[0:n]))",
        lambda: [gbuf.Buffer.from_buffer(b[0:size]) for b in bufs])
    del ms, arrs, bufs
    c.close()
    store = GpukvStore(a.url, root="zs", read_only=True)
    one = gbuf.Buffer.from_array_like(src)
    ref = zarr.storage.GpuMemoryStore({f"c/{i}": one for i in range(n)})
    proto = gbuf.buffer_prototype

    async def reads(st, conc: int) -> list:
        sem = asyncio.Semaphore(conc)

        async def read(k: str):
            async with sem:
                return await st.get(k, proto)

        return await asyncio.gather(*[read(f"c/{i}") for i in range(n)])

    for conc in (10, 64):
        for st, name in ((store, "GpukvStore"), (ref, "GpuMemoryStore")):
            asyncio.run(reads(st, conc))
            per(f"{name}.get under asyncio.gather, concurrency {conc}",
                lambda: asyncio.run(reads(st, conc)))
    store.close()
    with Client(a.url) as w:
        w.delete_prefix("zs/")


if __name__ == "__main__":
    main()
