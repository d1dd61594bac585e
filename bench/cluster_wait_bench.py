#!/usr/bin/env python3
"""cluster_wait_bench.py: a value handed from a writer on one cluster node to a reader on
another (issue 37, waits across a cluster), three nodes with a private etcd on loopback (host
backend), side by side in one run, in alternating blocks:
  - wait:  the reader's GET with wait (the key's home notifies the reader's node);
  - poll:  the reader GETs the key again and again until it exists (what a reader without waits
           does), back to back;
  - poll1: the same with 1 ms between tries.
Each round a new key (its home any node); the writer sets it once the reader is waiting (or
polling). The latency is from just before the writer's SET to the reader having the bytes, on
one clock (both are threads of this process). Also the home's and the reader's CPU time.

Usage: cluster_wait_bench.py GPUKVD [--rounds N] [--size BYTES]
Needs etcd on PATH and the gpukv package. Prints a Markdown table."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "cluster"))
from cluster_fixture import Cluster  # noqa: E402

import gpukv  # noqa: E402


def cpu_s(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        parts = f.read().rsplit(")", 1)[1].split()
    return (int(parts[11]) + int(parts[12])) / os.sysconf("SC_CLK_TCK")


def one_round(mode: str, reader, writer, key: str, value: bytes) -> float:
    got = {}
    ready = threading.Event()

    def read():
        if mode == "wait":
            ready.set()
            got["v"] = reader.get(key, wait=10)
        else:
            ready.set()
            while True:
                try:
                    got["v"] = reader.get(key)
                    break
                except gpukv.NotFound:
                    if mode == "poll1":
                        time.sleep(0.001)
        got["t"] = time.monotonic()

    t = threading.Thread(target=read)
    t.start()
    ready.wait()
    time.sleep(0.003)  # the reader waits (or polls) by now
    t0 = time.monotonic()
    writer.set(key, value)
    t.join(20)
    assert got.get("v") == value, mode
    return (got["t"] - t0) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("gpukvd")
    ap.add_argument("--rounds", type=int, default=300)
    ap.add_argument("--size", type=int, default=4096)
    a = ap.parse_args()
    cl = Cluster(a.gpukvd, partitionable=False)
    modes = ("wait", "poll", "poll1")
    lat = {m: [] for m in modes}
    cpu = {m: 0.0 for m in modes}
    value = os.urandom(a.size)
    try:
        n1, n2 = cl.nodes[0], cl.nodes[1]
        with n1.client() as reader, n2.client() as writer:
            i = 0
            while i < a.rounds:
                for m in modes:
                    c0 = sum(cpu_s(n.proc.pid) for n in cl.nodes)
                    for j in range(25):
                        lat[m].append(one_round(m, reader, writer, f"cwb/{m}/{i + j}", value))
                    cpu[m] += sum(cpu_s(n.proc.pid) for n in cl.nodes) - c0
                i += 25
    finally:
        cl.close()
    print(f"## a {a.size}-byte value from a writer on n2 to a reader on n1, {a.rounds} rounds "
          "each (three nodes, loopback, host backend)\n")
    print("| reader | p50 us | p90 us | p99 us | the nodes' CPU per round (ms) |")
    print("|---|---|---|---|---|")
    for m in modes:
        v = sorted(lat[m])
        print(f"| {m} | {statistics.median(v):.0f} | {v[int(len(v) * 0.9)]:.0f} | "
              f"{v[int(len(v) * 0.99)]:.0f} | {cpu[m] * 1e3 / len(v):.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
