#!/usr/bin/env python3
"""tier_bench.py: issue 36's figures for the host tier, side by side in one run on one GPU.

  1. Moves between the GPU and the host tier (4 MiB and 64 MiB values): the daemon's own count
     of its copies (INFO demoted_to_host_*, promoted_from_host_*) against the pinned D2H and
     H2D ceiling measured here with CuPy (cudaMemcpy to and from cudaHostAlloc'd memory).
     Demotions come from SETs into a full GPU, promotions from MAPs of values in the tier.
     Also the wall time of a SET that demotes against one that does not.
  2. A GET of a value in the host tier against one on the GPU, over the Unix socket into a
     client buffer (target >= 1.0x): the tier's bytes go to the socket from host memory.
  3. SETs into a full GPU with moves on the writes against moves in the background
     (--tier-headroom 10): p50, p99 and the worst.
  4. A zipf(0.99) read/write load (90% GET, 10% SET, 1 MiB values) over a key set of 4x the
     GPU's limit: with a host tier of 4x against eviction alone: hit ratio, operations per
     second, p50/p99 of GETs by where the value was.
  5. What other clients pay (a reader process's 4 KiB GETs): beside a writer filling a full GPU
     ("others"), beside GETs of disk values ("reads"), beside MAPs of host-tier values ("maps");
     --before GPUKVD runs an older daemon beside this one.

Usage: tier_bench.py GPUKVD [--backend cuda] [--gpu-mem 2G] [--rounds 5] [--ops 20000]
Needs the gpukv package (and CuPy for the ceiling). Prints Markdown tables."""

from __future__ import annotations

import argparse
import os
import subprocess
import statistics
import tempfile
import multiprocessing
import time

import numpy as np

import gpukv
from sizes import size_arg  # bench/sizes.py

try:
    import cupy
    import cupyx
except ImportError:  # the ceiling needs a GPU
    cupy = None


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


class Daemon:
    def __init__(self, binary, backend, root, name, flags):
        self.sock = os.path.join(root, f"{name}.sock")
        self.log = open(os.path.join(root, f"{name}.log"), "ab")
        self.p = subprocess.Popen([binary, "--backend", backend, "--socket", self.sock,
                                   "--max-value-size", "256M"] + flags +
                                  (["--host-zero-copy", "yes"] if backend == "host" else []),
                                  stdout=self.log, stderr=self.log, stdin=subprocess.DEVNULL)
        t0 = time.time()
        while not os.path.exists(self.sock):
            if self.p.poll() is not None or time.time() - t0 > 60:
                raise RuntimeError(f"{name} did not start (see {self.log.name})")
            time.sleep(0.05)
        self.c = gpukv.Client(self.sock)

    def info(self, name):
        info = self.c.info()
        if name in info:
            return info[name]
        for section in info.values():
            if isinstance(section, dict) and name in section:
                return section[name]
        raise KeyError(name)

    def stop(self):
        self.c.close()
        self.p.terminate()
        self.p.wait(30)
        self.log.close()


def wait_locked(d, args, want: int) -> float:
    """Waits (at most 120 s) until the daemon has page-locked want bytes of its host tier (a
    thread does it at start; measured once it is): the seconds it took."""
    t0 = time.time()
    while args.backend != "host" and time.time() - t0 < 120 and d.info("tier_host_locked") < want:
        time.sleep(0.1)
    return time.time() - t0


def probed(sock, work) -> list:
    """work() run while a reader process GETs the 4 KiB key "probe" (probe_reader): the reader's
    latencies."""
    stop, out = multiprocessing.Event(), multiprocessing.Queue()
    reader = multiprocessing.Process(target=probe_reader, args=(sock, stop, out))
    reader.start()  # a process of its own: no interpreter lock shared with the work
    time.sleep(0.2)
    work()
    stop.set()
    lat = out.get(timeout=60)
    reader.join(30)
    return lat


def ceiling(size: int, rounds: int) -> tuple[float, float]:
    """GB/s of cudaMemcpy D2H into pinned memory and H2D from it, medians of rounds."""
    if cupy is None:
        return float("nan"), float("nan")
    dev = cupy.ones(size, dtype=cupy.uint8)
    host = cupyx.empty_pinned((size,), dtype=np.uint8)
    rt = cupy.cuda.runtime
    out = []
    for kind in (rt.memcpyDeviceToHost, rt.memcpyHostToDevice):
        ts = []
        for _ in range(rounds + 1):
            t0 = time.perf_counter()
            if kind == rt.memcpyDeviceToHost:
                rt.memcpy(host.ctypes.data, dev.data.ptr, size, kind)
            else:
                rt.memcpy(dev.data.ptr, host.ctypes.data, size, kind)
            ts.append(time.perf_counter() - t0)
        out.append(size / statistics.median(ts[1:]) / 1e9)
    return out[0], out[1]


def moves(args, root, size):
    """Demotion and promotion of values of size bytes: the daemon's copy throughput, and the
    wall time of a SET that demotes against one that does not."""
    gpu = size_arg(args.gpu_mem)
    d = Daemon(args.daemon, args.backend, root, f"moves-{size}",
               ["--maxmemory", str(gpu), "--tier-host", str(4 * gpu),
                "--maxmemory-policy", "allkeys-lru"])
    try:
        waited = wait_locked(d, args, 4 * gpu)
        locked = (d.info("tier_host_locked"), waited)
        v = os.urandom(size)
        n = gpu // size
        plain, demoting = [], []
        for i in range(n - 1):  # the GPU fills: no demotion
            t0 = time.perf_counter()
            d.c.set(f"m/{i}", v)
            plain.append(time.perf_counter() - t0)
        b0, u0 = d.info("demoted_to_host_bytes"), d.info("demoted_to_host_us")
        for i in range(n - 1, 3 * n):  # each SET moves one value down
            t0 = time.perf_counter()
            d.c.set(f"m/{i}", v)
            demoting.append(time.perf_counter() - t0)
        b1, u1 = d.info("demoted_to_host_bytes"), d.info("demoted_to_host_us")
        down = (b1 - b0) / max(u1 - u0, 1) / 1e3
        low = [i for i in range(3 * n) if d.c.tier(f"m/{i}") == "host"][: n]
        p0, q0 = d.info("promoted_from_host_bytes"), d.info("promoted_from_host_us")
        for i in low:  # each MAP brings one up (and sends another down)
            d.c.map(f"m/{i}").unmap()
        p1, q1 = d.info("promoted_from_host_bytes"), d.info("promoted_from_host_us")
        up = (p1 - p0) / max(q1 - q0, 1) / 1e3
        assert d.info("evicted_keys") == 0
        return (down, up, statistics.median(plain), statistics.median(demoting), (b1 - b0) // size,
                locked)
    finally:
        d.stop()


def gets(args, root, size):
    """p50 of a GET into a client buffer: a value on the GPU, one in the host tier."""
    gpu = size_arg(args.gpu_mem)
    d = Daemon(args.daemon, args.backend, root, f"gets-{size}",
               ["--maxmemory", str(gpu), "--tier-host", str(2 * gpu),
                "--maxmemory-policy", "allkeys-lru"])
    try:
        v = os.urandom(size)
        n = gpu // size
        for i in range(2 * n):
            d.c.set(f"g/{i}", v)
        where = [d.c.tier(f"g/{i}") for i in range(2 * n)]
        hot = f"g/{where.index('gpu')}" if "gpu" in where else None
        cold = f"g/{where.index('host')}" if "host" in where else None
        if not hot or not cold:
            raise RuntimeError(f"no value on the GPU or none in the tier: {where}, "
                               f"{d.c.info('tiers')}, {d.c.info('memory')}")
        buf = bytearray(size)
        ts = {"gpu": [], "host": []}
        for r in range(args.rounds * 8 + 2):  # interleaved: drift hits both alike
            for name, key in (("gpu", hot), ("host", cold)) if r % 2 else (("host", cold),
                                                                         ("gpu", hot)):
                t0 = time.perf_counter()
                d.c.get_into(key, buf)
                ts[name].append(time.perf_counter() - t0)
                if r < 2:
                    assert bytes(buf) == v
        res = {name: statistics.median(t[2:]) for name, t in ts.items()}
        assert d.c.tier(cold) == "host" and d.info("promoted_keys") == 0
        return res["gpu"], res["host"]
    finally:
        d.stop()


def headroom(args, root, size, room):
    """SET latencies (p50, p99, max) of a stream of new values of size bytes into a GPU kept
    full, with moves down on the writes (room 0) or in the background (--tier-headroom room);
    a pause of 2 ms between writes leaves the background its time, as a real producer does."""
    gpu = size_arg(args.gpu_mem)
    d = Daemon(args.daemon, args.backend, root, f"headroom-{size}-{room}",
               ["--maxmemory", str(gpu), "--tier-host", str(4 * gpu),
                "--maxmemory-policy", "allkeys-lru", "--tier-headroom", str(room)])
    try:
        wait_locked(d, args, 4 * gpu)
        v = os.urandom(size)
        n = gpu // size
        for i in range(n):  # full
            d.c.set(f"h/{i}", v)
        ts = []
        for i in range(n, 3 * n):
            t0 = time.perf_counter()
            d.c.set(f"h/{i}", v)
            ts.append(time.perf_counter() - t0)
            time.sleep(0.002)
        return pct(ts, 0.5), pct(ts, 0.99), max(ts), d.info("demoted_background_keys")
    finally:
        d.stop()


def zipf_keys(n, count, s, rng):
    p = 1.0 / np.arange(1, n + 1) ** s
    cdf = np.cumsum(p / p.sum())
    ranks = np.searchsorted(cdf, rng.random(count))
    perm = rng.permutation(n)  # hot keys spread over the key space
    return perm[np.minimum(ranks, n - 1)]


def zipf_load(args, root, tier):
    gpu = size_arg(args.gpu_mem)
    size = 1 << 20
    nkeys = 4 * gpu // size
    flags = ["--maxmemory", str(gpu), "--maxmemory-policy", "allkeys-lru"]
    if tier:
        flags += ["--tier-host", str(4 * gpu)]
    d = Daemon(args.daemon, args.backend, root, f"zipf-{int(tier)}", flags)
    try:
        rng = np.random.default_rng(7)
        v = os.urandom(size)
        for i in range(nkeys):
            d.c.set(f"z/{i}", v)
        keys = zipf_keys(nkeys, args.ops, 0.99, rng)
        writes = rng.random(args.ops) < 0.10
        buf = bytearray(size)
        lat = {"gpu": [], "host": [], "miss": []}
        hits = reads = 0
        t_all = 0.0
        for k, w in zip(keys, writes):
            key = f"z/{k}"
            if w:
                t0 = time.perf_counter()
                d.c.set(key, v)
                t_all += time.perf_counter() - t0
                continue
            where = d.c.tier(key) if tier else None  # untimed: where the read finds it
            t0 = time.perf_counter()
            try:
                d.c.get_into(key, buf)
                hit = True
            except gpukv.NotFound:
                hit = False
            dt = time.perf_counter() - t0
            t_all += dt
            reads += 1
            hits += hit
            lat[(where or "gpu") if hit else "miss"].append(dt)
        return hits / reads, args.ops / t_all, lat, d.info("evicted_keys")
    except gpukv.NotFound:
        raise
    finally:
        d.stop()


def probe_reader(sock, stop, out):
    """GETs of the 4 KiB key "probe" until stop is set; their latencies into out."""
    c = gpukv.Client(sock)
    buf = bytearray(4096)
    lat = []
    while not stop.is_set():
        t = time.perf_counter()
        try:
            c.get_into("probe", buf)
        except gpukv.NotFound:
            c.set("probe", bytes(4096))
        lat.append(time.perf_counter() - t)
    c.close()
    out.put(lat)


def others_reads(args, root, size, binary):
    """The reader's 4 KiB GETs while another client GETs every value on the disk tier (each comes
    up to the host tier, another goes down): GPU, host tier 1x, disk 8x."""
    gpu = size_arg(args.gpu_mem)
    name = f"reads-{size}-{abs(hash(binary))}"
    ddir = os.path.join(root, name + "-disk")
    os.makedirs(ddir, exist_ok=True)
    d = Daemon(binary, args.backend, root, name,
               ["--maxmemory", str(gpu), "--maxmemory-policy", "allkeys-lru", "--tier-host",
                str(gpu), "--tier-disk", ddir, "--tier-disk-size", str(8 * gpu)])
    try:
        wait_locked(d, args, gpu)
        v = os.urandom(size)
        d.c.set("probe", os.urandom(4096))
        n = 4 * gpu // size
        for i in range(n):
            d.c.set(f"r/{i}", v)
        low, lost = [], 0
        for i in range(n):
            try:
                low += [i] if d.c.tier(f"r/{i}") == "disk" else []
            except gpukv.NotFound:
                lost += 1
        if lost:
            print(f"({binary}: {lost} of {n} keys gone: " + ", ".join(
                f"{k} {d.info(k)}" for k in ("evicted_keys", "tier_host_used", "tier_disk_used",
                                             "tier_disk_keys", "tier_disk_oom_errors",
                                             "tier_host_oom_errors")) + ")")
        gets, buf = [], bytearray(size)

        def read_disk_values():
            for i in low:
                t = time.perf_counter()
                d.c.get_into(f"r/{i}", buf)
                gets.append(time.perf_counter() - t)

        lat = probed(d.sock, read_disk_values)
        try:  # an older daemon has no such fields
            state = (d.info("tier_disk_state_writes"), d.info("tier_disk_state_max_us"))
        except KeyError:
            state = (0, 0)
        if not gets:  # nothing on the disk to read (every move failed, say)
            return float("nan"), float("nan"), float("nan"), float("nan"), 0, state
        return pct(lat, 0.5), pct(lat, 0.99), max(lat), pct(gets, 0.5), len(low), state
    finally:
        d.stop()


def others_maps(args, root, size, binary):
    """The reader's 4 KiB GETs while another client MAPs every value in the host tier (each comes
    up to the GPU, another goes down): GPU, host tier 4x, 3x the GPU written."""
    gpu = size_arg(args.gpu_mem)
    name = f"maps-{size}-{abs(hash(binary))}"
    d = Daemon(binary, args.backend, root, name,
               ["--maxmemory", str(gpu), "--maxmemory-policy", "allkeys-lru", "--tier-host",
                str(4 * gpu)])
    try:
        wait_locked(d, args, 4 * gpu)
        v = os.urandom(size)
        d.c.set("probe", os.urandom(4096))
        n = 3 * gpu // size
        for i in range(n):
            d.c.set(f"m/{i}", v)
        low = [i for i in range(n) if d.c.tier(f"m/{i}") == "host"]
        maps = []

        def map_tier_values():
            for i in low:
                t = time.perf_counter()
                with d.c.map(f"m/{i}") as m:
                    assert m.nbytes == size
                maps.append(time.perf_counter() - t)

        lat = probed(d.sock, map_tier_values)
        waits = d.info("tier_room_waits")
        for i in low[:4]:
            assert d.c.get(f"m/{i}") == v, f"m/{i} read back wrong"
        return pct(lat, 0.5), pct(lat, 0.99), max(lat), pct(maps, 0.5), len(low), waits
    finally:
        d.stop()


def others(args, root, size, binary, flags):
    """A reader's 4 KiB GETs of a GPU value while a writer SETs new values of size bytes into a
    full GPU (each needs a move down, or an eviction): p50 / p99 / max of the reader, and the
    writer's SET p50. What other clients pay for the moves."""
    gpu = size_arg(args.gpu_mem)
    name = f"others-{size}-{len(flags)}-{abs(hash(binary))}"
    if "DISK" in flags:  # a directory of its own: no file left by another run to take over
        flags = [os.path.join(root, name + "-disk") if f == "DISK" else f for f in flags]
        os.makedirs(flags[flags.index("--tier-disk") + 1], exist_ok=True)
    d = Daemon(binary, args.backend, root, name,
               ["--maxmemory", str(gpu), "--maxmemory-policy", "allkeys-lru"] + flags)
    try:
        if "--tier-host" in flags:
            wait_locked(d, args, size_arg(flags[flags.index("--tier-host") + 1]))
        v = os.urandom(size)
        n = gpu // size
        d.c.set("probe", os.urandom(4096))
        for i in range(n):  # full
            d.c.set(f"o/{i}", v)
        sets = []

        def write_new_values():
            for i in range(n, 3 * n):
                t = time.perf_counter()
                d.c.set(f"o/{i}", v)
                sets.append(time.perf_counter() - t)

        lat = probed(d.sock, write_new_values)
        return pct(lat, 0.5), pct(lat, 0.99), max(lat), pct(sets, 0.5), len(lat)
    finally:
        d.stop()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("daemon")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--gpu-mem", default="2G")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--ops", type=int, default=20000)
    ap.add_argument("--sizes", default="4M,64M")
    ap.add_argument("--skip", default="",
                    help="comma list of moves,gets,headroom,zipf,others,reads,maps")
    ap.add_argument("--before", default=None,
                    help="an older gpukvd, for the 'others' rows beside this one")
    args = ap.parse_args()
    skip = set(args.skip.split(","))
    # The daemons the "others", "reads" and "maps" rows compare.
    daemons = [("this", args.daemon)] + ([("before", args.before)] if args.before else [])
    root = tempfile.mkdtemp(prefix="gkv-tierbench-")
    sizes = [size_arg(s) for s in args.sizes.split(",")]
    if "moves" not in skip:
        print("| value | D2H pinned ceiling GB/s | demotion GB/s | x ceiling | H2D pinned "
              "ceiling GB/s | promotion GB/s | x ceiling | SET p50 without / with a demotion "
              "(ms) |")
        print("|---|---|---|---|---|---|---|---|")
        notes = []
        for size in sizes:
            d2h, h2d = ceiling(size, args.rounds)
            down, up, plain, demoting, moved, locked = moves(args, root, size)
            notes.append(f"{size >> 20} MiB run: {locked[0] / (1 << 30):.1f} GiB of the host tier "
                         f"page-locked {locked[1]:.1f} s after the daemon started")
            print(f"| {size >> 20} MiB | {d2h:.1f} | {down:.1f} | {down / d2h:.2f} | {h2d:.1f} | "
                  f"{up:.1f} | {up / h2d:.2f} | {plain * 1e3:.2f} / {demoting * 1e3:.2f} "
                  f"({moved} moved) |", flush=True)
        print("\n" + "\n".join(f"- {n}" for n in notes))
    if "gets" not in skip:
        print("\n| value | GET p50, on the GPU (ms) | GET p50, in the host tier (ms) | "
              "host tier / GPU throughput |")
        print("|---|---|---|---|")
        for size in sizes:
            g, h = gets(args, root, size)
            print(f"| {size >> 20} MiB | {g * 1e3:.3f} ({size / g / 1e9:.2f} GB/s) | "
                  f"{h * 1e3:.3f} ({size / h / 1e9:.2f} GB/s) | {g / h:.2f} |", flush=True)
    if "headroom" not in skip:
        print("\n| value | SET p50 / p99 / max (ms), moves on the writes | the same, "
              "--tier-headroom 10 | moved in the background |")
        print("|---|---|---|---|")
        for size in sizes:
            a = headroom(args, root, size, 0)
            b = headroom(args, root, size, 10)
            print(f"| {size >> 20} MiB | {a[0] * 1e3:.2f} / {a[1] * 1e3:.2f} / {a[2] * 1e3:.2f} | "
                  f"{b[0] * 1e3:.2f} / {b[1] * 1e3:.2f} / {b[2] * 1e3:.2f} | {b[3]} |", flush=True)
    if "others" not in skip:
        print("\nA reader's 4 KiB GETs while a writer SETs new values into a full GPU (host tier "
              "4x):\n")
        print("| value | daemon | configuration | reader GET p50 / p99 / max (ms) | writer SET "
              "p50 (ms) | reads |")
        print("|---|---|---|---|---|---|")
        gpu = size_arg(args.gpu_mem)
        confs = [("eviction only", []), ("host tier, moves for the writes", ["--tier-host",
                 str(4 * gpu)]), ("host tier, --tier-headroom 10", ["--tier-host", str(4 * gpu),
                                                                     "--tier-headroom", "10"]),
                 ("host tier 1x and a disk, moves for the writes",
                  ["--tier-host", str(gpu), "--tier-disk", "DISK", "--tier-disk-size",
                   str(8 * gpu)])]
        for size in sizes:
            for name, flags in confs:
                for which, binary in daemons:
                    if which == "before" and not flags:
                        continue
                    r = others(args, root, size, binary, flags)
                    print(f"| {size >> 20} MiB | {which} | {name} | {r[0] * 1e3:.3f} / "
                          f"{r[1] * 1e3:.3f} / {r[2] * 1e3:.3f} | {r[3] * 1e3:.2f} | {r[4]} |",
                          flush=True)
    if "reads" not in skip:
        print("\nA reader's 4 KiB GETs while another client GETs every value on the disk tier "
              "(host tier 1x, disk 8x):\n")
        print("| value | daemon | reader GET p50 / p99 / max (ms) | GET of a disk value p50 (ms) "
              "| disk values read | record state changes on the loop: count, longest (ms) |")
        print("|---|---|---|---|---|---|")
        for size in sizes:
            for which, binary in daemons:
                r = others_reads(args, root, size, binary)
                print(f"| {size >> 20} MiB | {which} | {r[0] * 1e3:.3f} / {r[1] * 1e3:.3f} / "
                      f"{r[2] * 1e3:.3f} | {r[3] * 1e3:.2f} | {r[4]} | {r[5][0]}, "
                      f"{r[5][1] / 1e3:.2f} |", flush=True)
    if "maps" not in skip:
        print("\nA reader's 4 KiB GETs while another client MAPs every value in the host tier "
              "(host tier 4x, 3x the GPU written):\n")
        print("| value | daemon | reader GET p50 / p99 / max (ms) | MAP of a tier value p50 (ms) "
              "| tier values mapped | waits (INFO tier_room_waits) |")
        print("|---|---|---|---|---|---|")
        for size in sizes:
            for which, binary in daemons:
                r = others_maps(args, root, size, binary)
                print(f"| {size >> 20} MiB | {which} | {r[0] * 1e3:.3f} / {r[1] * 1e3:.3f} / "
                      f"{r[2] * 1e3:.3f} | {r[3] * 1e3:.2f} | {r[4]} | {r[5]} |", flush=True)
    if "zipf" not in skip:
        print(f"\nzipf(0.99), 90% GET / 10% SET of 1 MiB values, {args.ops} operations, key set "
              f"4x the GPU's {args.gpu_mem}, one client:\n")
        print("| configuration | hit ratio | ops/s | GET p50 / p99 (ms) by where the value was "
              "| evicted |")
        print("|---|---|---|---|---|")
        for tier in (False, True):
            hit, ops, lat, evicted = zipf_load(args, root, tier)
            where = ", ".join(f"{k} {pct(v, 0.5) * 1e3:.2f} / {pct(v, 0.99) * 1e3:.2f} "
                              f"({len(v)})" for k, v in lat.items() if v)
            name = "host tier 4x" if tier else "eviction only"
            print(f"| {name} | {hit:.3f} | {ops:.0f} | {where} | {evicted} |", flush=True)


if __name__ == "__main__":
    main()
