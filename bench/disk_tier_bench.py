#!/usr/bin/env python3
"""disk_tier_bench.py: issue 36's figures for the disk tier, with O_DIRECT (through io_uring and
one copy at a time) and without, beside a raw O_DIRECT copy of the same bytes in the same
directory, in one run.

For each value size and each mode (--tier-disk-direct yes with --tier-disk-uring yes, then with
--tier-disk-uring no, then --tier-disk-direct no), a fresh daemon with a
small GPU limit and host tier and a disk tier takes SETs of new values until TOTAL bytes have
gone down to the disk, then GETs every value the disk holds (each comes up to the host tier,
and another goes down). Reported: the daemon's own count of its disk copies (INFO
demoted_to_disk_*, promoted_from_disk_*: the pread/pwrite, the checksum and, with O_DIRECT, the
aligned buffer's copy), the wall time of the SETs and GETs, and how much of the tier's file
sat in the page cache afterwards (mincore). The ceiling: the bench's own O_DIRECT pwrite and
pread of TOTAL bytes in value-sized pieces to a file in the same directory.

Usage: disk_tier_bench.py GPUKVD [--backend cuda] [--dir DIR] [--sizes 4M,64M] [--total 2G]
Needs the gpukv package. Prints Markdown tables."""

from __future__ import annotations

import argparse
import ctypes
import mmap
import os
import tempfile
import time

from sizes import size_arg  # bench/sizes.py
from tier_bench import Daemon  # this directory's: the same daemon


def cached_fraction(path: str) -> float:
    """The share of path's pages in the page cache (mincore of a mapping, which faults none)."""
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int,
                          ctypes.c_int, ctypes.c_long]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    size = os.path.getsize(path)
    pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
    fd = os.open(path, os.O_RDONLY)
    try:
        addr = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if addr in (None, ctypes.c_void_p(-1).value):
            return float("nan")
        vec = (ctypes.c_ubyte * pages)()
        rc = libc.mincore(addr, size, vec)
        libc.munmap(addr, size)
    finally:
        os.close(fd)
    return float("nan") if rc else sum(v & 1 for v in vec) / pages


def raw_direct(directory: str, size: int, total: int) -> tuple[float, float]:
    """GB/s of O_DIRECT pwrite then pread of total bytes in size-byte pieces."""
    path = os.path.join(directory, "raw-direct.bin")
    buf = mmap.mmap(-1, size)  # page-aligned
    buf.write(os.urandom(1 << 20) * (size // (1 << 20)) if size >= 1 << 20 else os.urandom(size))
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_DIRECT, 0o600)
    try:
        n = total // size
        t0 = time.perf_counter()
        for i in range(n):
            os.pwritev(fd, [buf], i * size)
        w = n * size / (time.perf_counter() - t0) / 1e9
        t0 = time.perf_counter()
        for i in range(n):
            os.preadv(fd, [buf], i * size)
        r = n * size / (time.perf_counter() - t0) / 1e9
    finally:
        os.close(fd)
        os.unlink(path)
        buf.close()
    return w, r


MODES = {"uring": ["--tier-disk-direct", "yes", "--tier-disk-uring", "yes"],
         "direct": ["--tier-disk-direct", "yes", "--tier-disk-uring", "no"],
         "buffered": ["--tier-disk-direct", "no"]}


def one(args, root, size, mode):
    """The daemon in mode (MODES): SETs until total bytes went to the disk, then GETs of what
    the disk holds."""
    gpu = 4 * size
    name = f"disk-{size}-{mode}"
    ddir = os.path.join(args.dir, name)
    os.makedirs(ddir, exist_ok=True)
    d = Daemon(args.daemon, args.backend, root, name,
               ["--maxmemory", str(gpu), "--tier-host", str(gpu), "--tier-disk", ddir,
                "--tier-disk-size", str(2 * args.total), "--maxmemory-policy", "allkeys-lru"] +
               MODES[mode])
    try:
        is_direct, is_uring = d.info("tier_disk_direct"), d.info("tier_disk_uring")
        v = os.urandom(size)
        n = args.total // size + 2 * gpu // size
        t0 = time.perf_counter()
        for i in range(n):
            d.c.set(f"d/{i}", v)
        set_s = time.perf_counter() - t0
        down_b, down_us = d.info("demoted_to_disk_bytes"), d.info("demoted_to_disk_us")
        files = [f for f in os.listdir(ddir) if f.startswith("gpukv-tier-")]
        cached_w = cached_fraction(os.path.join(ddir, files[0]))
        low = [i for i in range(n) if d.c.tier(f"d/{i}") == "disk"]
        t0 = time.perf_counter()
        for i in low:
            got = d.c.get(f"d/{i}")
            assert got == v, f"d/{i} read back wrong"
        get_s = time.perf_counter() - t0
        up_b, up_us = d.info("promoted_from_disk_bytes"), d.info("promoted_from_disk_us")
        cached_r = cached_fraction(os.path.join(ddir, files[0]))
        assert d.info("evicted_keys") == 0 and d.info("tier_disk_corrupt") == 0
        return dict(direct=is_direct, uring=is_uring, down=down_b / max(down_us, 1) / 1e3,
                    up=up_b / max(up_us, 1) / 1e3, set_gbs=n * size / set_s / 1e9,
                    get_gbs=len(low) * size / get_s / 1e9, read=len(low),
                    cached_w=cached_w, cached_r=cached_r)
    finally:
        d.stop()
        os.sync()  # a buffered run's dirty pages must not be written during the next run


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("daemon")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--dir", default=None, help="the disk tier's directory (default: /var/tmp)")
    ap.add_argument("--sizes", default="4M,64M")
    ap.add_argument("--total", default="2G", help="bytes sent to the disk per run")
    ap.add_argument("--modes", default="uring,direct,buffered", help="comma list of " +
                    ", ".join(MODES))
    args = ap.parse_args()
    args.total = size_arg(args.total)
    with tempfile.TemporaryDirectory(prefix="gkv-disk-bench-",
                                     dir=args.dir or "/var/tmp") as root:
        args.dir = root
        print(f"disk tier in {root} ({os.statvfs(root).f_bsize}-byte blocks), "
              f"{args.total >> 20} MiB to the disk per run\n")
        print("| value | mode | raw O_DIRECT write / read GB/s | to disk GB/s (x raw) | "
              "from disk GB/s (x raw) | SETs GB/s | GETs of disk values GB/s | "
              "file in page cache after writes / reads |")
        print("|---|---|---|---|---|---|---|---|")
        for size in [size_arg(s) for s in args.sizes.split(",")]:
            w, r = raw_direct(root, size, args.total)
            for mode in args.modes.split(","):
                m = one(args, root, size, mode)
                said = ("buffered" if not m["direct"] else
                        "O_DIRECT, io_uring" if m["uring"] else "O_DIRECT, one copy at a time")
                if mode != "buffered" and said != {"uring": "O_DIRECT, io_uring",
                                                   "direct": "O_DIRECT, one copy at a time"}[mode]:
                    said += f" ({mode} refused)"
                print(f"| {size >> 20} MiB | {said} | {w:.2f} / {r:.2f} | {m['down']:.2f} "
                      f"({m['down'] / w:.2f}x) | {m['up']:.2f} ({m['up'] / r:.2f}x) | "
                      f"{m['set_gbs']:.2f} | {m['get_gbs']:.2f} ({m['read']} values) | "
                      f"{100 * m['cached_w']:.0f}% / {100 * m['cached_r']:.0f}% |", flush=True)


if __name__ == "__main__":
    main()
