#!/usr/bin/env python3
"""map_import.py: what a zero-copy MAP of a new value costs the client, round by round, and
what GPU work of the client's own in between does to it (issue 35: a remote read ends with the
reader's client importing the replica's new memory).

Each round a writer stores a new value under the key (over the socket) and a reader MAPs it
and unmaps it again, timed. Modes, each in a fresh process with its own daemon on GPU DEVICE:
  plain  - nothing else;
  other  - between rounds the process also MAPs a value of a second daemon (on GPU 0);
  gpu    - between rounds the process also stores a value from a CuPy array on GPU 0 into the
           second daemon (set_from_device: kernels and a copy of its own), as nixl_bench.py's
           rounds do;
  kernel - between rounds a CuPy kernel runs on GPU 0 (no other gpukv call);
  same   - between rounds a value from a CuPy array on GPU 0 is stored into the reader's own
           daemon under another key (set_from_device).

Usage: map_import.py GPUKVD [--device 1] [--sizes 64M,1G] [--rounds 6] [--modes plain,gpu,...]
Needs two GPUs for the second daemon on GPU 0 (or --device 0: both on one), CuPy for `gpu`."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "cluster"))
from cluster_fixture import wait_for  # noqa: E402
from sizes import size_arg  # noqa: E402  (bench/sizes.py)


def daemon(root, path, name, gpu):
    sock = os.path.join(root, f"{name}.sock")
    log = open(os.path.join(root, f"{name}.log"), "ab")
    p = subprocess.Popen([path, "--backend", "cuda", "--device", str(gpu), "--maxmemory", "20G",
                          "--max-value-size", "2G", "--socket", sock],
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL)
    wait_for(lambda: os.path.exists(sock) or p.poll() is not None, 60, f"{name}'s socket")
    return p, sock


def run(a, mode: str) -> None:
    import gpukv
    root = tempfile.mkdtemp(prefix="gkv-mapimport-")
    procs = []
    try:
        p, s = daemon(root, a.daemon, "reader", a.device)
        p2, s2 = daemon(root, a.daemon, "other", 0)
        procs = [p, p2]
        writer, reader, other = (gpukv.Client(f"unix:{s}"), gpukv.Client(f"unix:{s}"),
                                 gpukv.Client(f"unix:{s2}"))
        for size in [size_arg(x) for x in a.sizes.split(",")]:
            val, ms = b"\x01" * size, []
            for _ in range(a.rounds):
                writer.set("k", val)
                if mode == "other":
                    other.set("o", val)
                    other.map("o").unmap()
                elif mode in ("gpu", "kernel", "same"):
                    import cupy
                    with cupy.cuda.Device(0):
                        arr = cupy.ones(size, dtype=cupy.uint8)
                        if mode == "gpu":
                            other.set_from_device("o", arr)
                        elif mode == "same":
                            writer.set_from_device("o", arr)
                        cupy.cuda.Device(0).synchronize()
                t0 = time.perf_counter()
                m = reader.map("k")
                ms.append((time.perf_counter() - t0) * 1e3)
                m.unmap()
            print(f"| {mode} | {size >> 20} MiB | " + " | ".join(f"{x:.2f}" for x in ms) + " |",
                  flush=True)
    finally:
        for q in procs:
            q.terminate()
            q.wait()


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("daemon")
    ap.add_argument("--device", type=int, default=1)
    ap.add_argument("--sizes", default="64M,1G")
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--modes", default="plain,other,gpu,kernel,same")
    ap.add_argument("--mode", help="one mode in this process (the others run in children)")
    a = ap.parse_args()
    if a.mode:
        run(a, a.mode)
        return 0
    print("| mode | size | MAP ms, round by round |\n|---|---|---|")
    for mode in a.modes.split(","):
        subprocess.run([sys.executable, __file__, a.daemon, "--device", str(a.device), "--sizes",
                        a.sizes, "--rounds", str(a.rounds), "--mode", mode], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
