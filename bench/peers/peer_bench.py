#!/usr/bin/env python3
"""peer_bench.py: gpukv beside Mooncake Store on one GPU machine, the same workloads, interleaved
in rounds (issue 38; README.md beside this file says how each peer is configured and why).

Rows (each a median over its repetitions, per round; the table gives the median of the rounds):
  put  SIZE  a CUDA tensor of SIZE bytes stored under a new key
             gpukv: Client.set(key, tensor) (CREATE, device-to-device copy, SEAL)
             Mooncake: put_from(key, ptr, size) of a registered buffer (the tensor)
  get  SIZE  a value read into a CUDA tensor
             gpukv: get_to_device(key, out) (MAP, device-to-device copy, unmap)
             Mooncake: get_into(key, ptr, size) into a registered buffer
  map  SIZE  gpukv only: map(key) and a reduction over the mapped value in place (what a
             reader that only reads does); beside Mooncake's get_into
  batch put / get  N values of SIZE (--batch 64x1M) in one call each where the system has one:
             Mooncake batch_put_from / batch_get_into; gpukv set_many_from_device for the
             put, map_many and a copy per value for the get
  N processes put / get  (--procs 16, --procs-size 1M, --procs-values 32): N client processes
             at once, each putting then getting its own values, one at a time; aggregate GB/s
             (all bytes over the time from the first start to the last end) and p99 per op
  4 KiB get latency: p50 and p99 of single gets (gpukv get_to_device, Mooncake get_into)

Usage: peer_bench.py [--sizes 4K,64K,1M,16M,256M] [--rounds 3] [--batch 64x1M]
                     [--procs 16] [--procs-size 1M] [--procs-values 32] [--gpukvd PATH]
                     [--gpukvd-args "..."] [--mooncake-master PATH] [--json FILE]
A peer that cannot start stops the run with its reason (exit 2).
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import queue
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers import (Arena, GpukvServer, MooncakeServer, connect, fail, label,  # noqa: E402
                   size_of)

PROC_SEGMENT = 512 << 20  # a Mooncake worker process's segment and buffer (16 of them at once)
PROC_BUFFER = 64 << 20
ROW_BYTES: dict[str, int] = {}  # bytes one timed operation of a row moves (for its GB/s)


def reps_for(size: int) -> int:
    return 200 if size <= 64 << 10 else 50 if size <= 1 << 20 else 10 if size <= 16 << 20 else 3


def timed(fn) -> float:
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def pct(xs: list[float], f: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(len(xs) * f))]


def single_rows(peers, arena, sizes, rounds, rows) -> None:
    import torch
    src = {n: arena.take(n, random=True) for n in sizes}
    dst = {n: arena.take(n) for n in sizes}
    seq = 0
    for _ in range(rounds):
        for n in sizes:
            for p in peers:
                puts, gets, maps = [], [], []
                for i in range(reps_for(n)):
                    seq += 1
                    key = f"pb/{p.name}/{n}/{seq}"
                    puts.append(timed(lambda: p.put(key, src[n])))
                    gets.append(timed(lambda: p.get(key, dst[n])))
                    if hasattr(p, "map_read"):
                        maps.append(timed(lambda: p.map_read(key)))
                    if i == 0 and not torch.equal(dst[n], src[n]):
                        fail(f"{p.name} read back other bytes than it stored ({label(n)})")
                    p.remove(key)
                for op in ("put", "get", "map"):
                    ROW_BYTES[f"{op} {label(n)}"] = n
                rows.setdefault((f"put {label(n)}", p.name), []).append(statistics.median(puts))
                rows.setdefault((f"get {label(n)}", p.name), []).append(statistics.median(gets))
                if maps:
                    rows.setdefault((f"map {label(n)}", p.name), []).append(
                        statistics.median(maps))


def batch_rows(peers, arena, count, size, rounds, rows) -> None:
    import torch
    src = [arena.take(size, random=True) for _ in range(count)]
    dst = [arena.take(size) for _ in range(count)]
    what = f"{count} x {label(size)}"
    ROW_BYTES[f"batch put {what}"] = ROW_BYTES[f"batch get {what}"] = count * size
    for rnd in range(rounds):
        for p in peers:
            puts, gets = [], []
            for rep in range(5):
                keys = [f"pb/{p.name}/batch/{rnd}/{rep}/{i}" for i in range(count)]
                puts.append(timed(lambda: p.put_batch(keys, src)))
                for t in dst:
                    t.zero_()
                gets.append(timed(lambda: p.get_batch(keys, dst)))
                if not all(torch.equal(a, b) for a, b in zip(src, dst)):
                    fail(f"{p.name}'s batch get read back other bytes than it stored")
                for k in keys:
                    p.remove(k)
            rows.setdefault((f"batch put {what}", p.name), []).append(statistics.median(puts))
            rows.setdefault((f"batch get {what}", p.name), []).append(statistics.median(gets))


def proc_worker(address, idx, size, count, rounds, bar, q) -> None:
    """One of the client processes: rounds of (put phase, get phase), each between two
    barrier waits; reports (phase, round, start, end, latencies) through q."""
    try:
        import torch
        arena = Arena(2 * size + 8192)
        src, dst = arena.take(size, random=True), arena.take(size)
        c = connect(address, PROC_SEGMENT, PROC_BUFFER, arena)
        for r in range(rounds):
            keys = [f"pb/{c.name}/procs/{idx}/{r}/{i}" for i in range(count)]
            for phase in ("put", "get"):
                bar.wait()
                lats = []
                t0 = time.perf_counter()
                for k in keys:
                    lats.append(timed(lambda: c.put(k, src) if phase == "put" else
                                      c.get(k, dst)))
                t1 = time.perf_counter()
                if phase == "get":
                    if not torch.equal(dst, src):
                        raise RuntimeError("read back other bytes than it stored")
                    for k in keys:
                        c.remove(k)
                q.put((phase, r, t0, t1, lats))
                bar.wait()
        c.close()
    except BaseException as e:  # noqa: BLE001: the parent must hear of any end
        q.put(("error", idx, repr(e)))
        bar.abort()
        raise


def procs_rows(servers, nprocs, size, count, rounds, rows) -> None:
    """nprocs client processes per system (both sets started first), their phases interleaved
    round by round: gpukv put, gpukv get, Mooncake put, Mooncake get."""
    ctx = mp.get_context("spawn")
    groups = []
    for s in servers:
        bar, q = ctx.Barrier(nprocs + 1, timeout=300), ctx.Queue()
        ps = [ctx.Process(target=proc_worker, args=(s.address(), i, size, count, rounds, bar, q),
                          daemon=True) for i in range(nprocs)]
        for p in ps:
            p.start()
        groups.append((s.name, bar, q, ps))
    what = f"{nprocs} processes, {label(size)}"
    ROW_BYTES[f"{what} put (aggregate)"] = ROW_BYTES[f"{what} get (aggregate)"] = size
    try:
        for r in range(rounds):
            for name, bar, q, ps in groups:
                for phase in ("put", "get"):
                    bar.wait()  # start
                    bar.wait()  # every process done and reported
                    got = [q.get(timeout=60) for _ in range(nprocs)]
                    errs = [g for g in got if g[0] == "error"]
                    if errs:
                        raise RuntimeError(f"{name}'s process {errs[0][1]}: {errs[0][2]}")
                    wall = max(g[3] for g in got) - min(g[2] for g in got)
                    lats = [x for g in got for x in g[4]]
                    rows.setdefault((f"{what} {phase} (aggregate)", name), []).append(
                        wall / (nprocs * count))  # seconds per value, all processes together
                    rows.setdefault((f"{what} {phase} p99", name), []).append(pct(lats, .99))
    except Exception as e:  # noqa: BLE001
        detail = repr(e)
        for name, bar, q, ps in groups:
            while True:
                try:
                    g = q.get_nowait()
                except queue.Empty:
                    break
                if g[0] == "error":
                    detail += f"; {name}'s process {g[1]}: {g[2]}"
        print(f"peer_bench: the {what} rows failed: {detail}", file=sys.stderr)
    finally:
        for _, bar, _, ps in groups:
            for p in ps:
                p.join(timeout=30)
                if p.is_alive():
                    p.kill()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4K,64K,1M,16M,256M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--batch", default="64x1M", help="COUNTxSIZE, or 0 to skip")
    ap.add_argument("--procs", type=int, default=16, help="client processes at once; 0 skips")
    ap.add_argument("--procs-size", default="1M")
    ap.add_argument("--procs-values", type=int, default=32, help="values per process and round")
    ap.add_argument("--gpukvd", default=shutil.which("gpukvd") or "gpukvd")
    ap.add_argument("--mooncake-master", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--gpukvd-args", default="", help="more gpukvd flags, space-separated")
    a = ap.parse_args()
    sizes = [size_of(s) for s in a.sizes.split(",")] if a.sizes else []
    try:
        import torch
    except ImportError:
        fail("PyTorch is needed (CUDA tensors on both sides)")
    if not torch.cuda.is_available():
        fail("no CUDA device: both peers are measured with GPU tensors")
    master = a.mooncake_master
    if not master:
        try:
            import mooncake
            master = str(Path(mooncake.__file__).parent / "mooncake_master")
        except ImportError:
            master = shutil.which("mooncake_master") or "mooncake_master"
    work = Path(tempfile.mkdtemp(prefix="peer-bench-"))
    os.chmod(work, 0o700)
    big = max(sizes + [1 << 20])
    servers = (GpukvServer(a.gpukvd, work, a.gpukvd_args.split()), MooncakeServer(master, work))
    # a segment no run fills: Mooncake refuses to remove a value read within its lease (5 s),
    # and eviction would take values the run still reads
    segment, buffer = max(16 << 30, 16 * big), max(1 << 30, 2 * big)
    count, bsize = 0, 0
    if a.batch != "0":
        count, bsize = (int(a.batch.lower().split("x")[0]), size_of(a.batch.lower().split("x")[1]))
    # every tensor of this process: src and dst of each size, of the batch, of the latency row
    arena = Arena(sum(2 * ((n + 4095) // 4096 * 4096) for n in sizes + [4096] + [bsize] * count))
    peers = [connect(s.address(), segment, buffer, arena) for s in servers]
    rows: dict[tuple, list[float]] = {}
    single_rows(peers, arena, sizes, a.rounds, rows)
    if count:
        batch_rows(peers, arena, count, bsize, a.rounds, rows)
    lat: dict[str, list[float]] = {}
    lat_src, lat_dst = arena.take(4096, random=True), arena.take(4096)
    for p in peers:  # 4 KiB get latency, one key read again and again
        key = f"pb/{p.name}/lat"
        p.put(key, lat_src)
        lat[p.name] = [timed(lambda: p.get(key, lat_dst)) for _ in range(a.rounds * 1000)]
        p.remove(key)
    if a.procs > 0:
        procs_rows(servers, a.procs, size_of(a.procs_size), a.procs_values, a.rounds, rows)
    for p in peers:
        p.close()
    for s in servers:
        s.close()
    report(a, rows, lat, servers, peers)
    shutil.rmtree(work, ignore_errors=True)


def report(a, rows, lat, servers, peers) -> None:
    import torch
    print(f"## gpukv beside Mooncake Store ({torch.cuda.get_device_name()}, {a.rounds} rounds)\n")
    print("| row | gpukv | Mooncake | gpukv/Mooncake (throughput) |\n|---|---|---|---|")
    order = ["put ", "get ", "map ", "batch put", "batch get", "processes"]
    names = sorted((w for (w, n) in rows if n == "gpukv"),
                   key=lambda w: next(i for i, o in enumerate(order) if o in w))
    out_rows = []
    for what in names:
        tg = statistics.median(rows[(what, "gpukv")])
        other = ("get" + what[3:]) if what.startswith("map ") else what
        tm = statistics.median(rows[(other, "Mooncake")]) if (other, "Mooncake") in rows else 0
        n = ROW_BYTES.get(what)
        show = lambda t: f"{t * 1e6:.1f} us" + (f" ({n / t / 1e9:.2f} GB/s)" if n else "")  # noqa: E731
        shown = what + (" (in place, against Mooncake's get_into)" if what.startswith("map ")
                        else "")
        if not tm:
            print(f"| {shown} | {show(tg)} | (not measured) | |")
            continue
        print(f"| {shown} | {show(tg)} | {show(tm)} | {tm / tg:.2f}x |")
        out_rows.append({"row": shown, "gpukv_s": tg, "mooncake_s": tm, "ratio": tm / tg})
    pg, pm = lat["gpukv"], lat["Mooncake"]
    print(f"| get 4 KiB latency p50 / p99 | {pct(pg, .5) * 1e6:.1f} / {pct(pg, .99) * 1e6:.1f} us "
          f"| {pct(pm, .5) * 1e6:.1f} / {pct(pm, .99) * 1e6:.1f} us | "
          f"{pct(pm, .5) / pct(pg, .5):.2f}x (p50) |")
    print("\nBatch rows: time per batch. Process rows: 'aggregate' is the wall time from the "
          "first process's start to the last one's end over the values all moved (GB/s: all "
          "processes together); p99 of single operations across the processes.")
    print(f"\ngpukv: {servers[0].config}.\n\nMooncake: {peers[1].config}.")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": out_rows, "lat_us": {
            "gpukv": [pct(pg, .5) * 1e6, pct(pg, .99) * 1e6],
            "mooncake": [pct(pm, .5) * 1e6, pct(pm, .99) * 1e6]}}, indent=1))


if __name__ == "__main__":
    main()
