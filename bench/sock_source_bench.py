#!/usr/bin/env python3
"""sock_source_bench.py: does the memory a large reply is sent from change a Unix socket's
throughput? (issue 36: a 64 MiB GET from the host tier, whose pages are a memfd's, runs at
0.89-0.98x one from the GPU, whose bytes go out of 4 MiB staging chunks.)

Sends SIZE bytes through a Unix stream socket pair to a reader thread (recv_into a buffer of its
own), ROUNDS times, from: a memfd mapping (like the host tier), anonymous memory with and
without transparent huge pages, and one 4 MiB buffer sent over and over (like staging).
Prints the median GB/s of each. Usage: sock_source_bench.py [--size 64M] [--rounds 20]"""

from __future__ import annotations

import argparse
import mmap
import os
import socket
import statistics
import threading
import time


def run(src: memoryview, size: int, rounds: int, chunk: int) -> float:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
    sink = bytearray(size)
    view = memoryview(sink)

    def reader():
        for _ in range(rounds):
            got = 0
            while got < size:
                got += b.recv_into(view[got:], size - got)

    t = threading.Thread(target=reader)
    t.start()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        sent = 0
        while sent < size:
            n = min(chunk, size - sent)
            a.sendall(src[sent % len(src):sent % len(src) + n])
            sent += n
        times.append(time.perf_counter() - t0)
    t.join()
    a.close()
    b.close()
    return size / statistics.median(times[2:]) / 1e9


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", default="64M")
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    size = int(args.size[:-1]) << {"K": 10, "M": 20, "G": 30}[args.size[-1]]
    fd = os.memfd_create("gkv-bench")
    os.ftruncate(fd, size)
    memfd = mmap.mmap(fd, size)
    memfd.write(os.urandom(size))
    anon_thp = mmap.mmap(-1, size)
    if hasattr(anon_thp, "madvise") and hasattr(mmap, "MADV_HUGEPAGE"):
        anon_thp.madvise(mmap.MADV_HUGEPAGE)
    anon_thp.write(os.urandom(size))
    anon = mmap.mmap(-1, size)
    if hasattr(anon, "madvise") and hasattr(mmap, "MADV_NOHUGEPAGE"):
        anon.madvise(mmap.MADV_NOHUGEPAGE)
    anon.write(os.urandom(size))
    small = bytearray(os.urandom(4 << 20))
    print(f"| source | GB/s, {size >> 20} MiB sent in one call | in 4 MiB calls |")
    print("|---|---|---|")
    for name, buf in (("memfd (4 KiB pages)", memfd), ("anonymous, huge pages advised", anon_thp),
                      ("anonymous, no huge pages", anon), ("one 4 MiB buffer again", small)):
        whole = run(memoryview(buf), size, args.rounds, size) if len(buf) == size else float("nan")
        parts = run(memoryview(buf), size, args.rounds, 4 << 20)
        print(f"| {name} | {whole:.2f} | {parts:.2f} |", flush=True)


if __name__ == "__main__":
    main()
