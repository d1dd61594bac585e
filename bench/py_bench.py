#!/usr/bin/env python3
"""py_bench.py: the Python binding's warm MAP+unmap round trip beside libgpukv's own, in one run.

    py_bench.py URL --zc-bench PATH [--rounds 3] [--key bench/small]

Alternates rounds of the C figure (zc_bench URL --warm KEY: 10,000 MAP+unmap of a 4 KiB value
after 1,000 warm-ups, and 10,000 PINGs) with the same loops through gpukv.Client, on the same
daemon and key, and prints a Markdown table of the medians over rounds. Target: the Python p50
within 2 us of the C p50.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

import gpukv

N, WARM = 10000, 1000


def pct(v: list[float], p: float) -> float:
    v = sorted(v)
    return v[int(p * (len(v) - 1) + 0.5)]


def py_round(c: gpukv.Client, key: str) -> tuple[float, float, float, float]:
    pc = time.perf_counter_ns
    for _ in range(WARM):
        c.map(key).unmap()
        c.ping()
    rt = [0.0] * N
    for i in range(N):
        t0 = pc()
        m = c.map(key)
        m.unmap()
        rt[i] = (pc() - t0) / 1e3
    ctx = [0.0] * N
    for i in range(N):
        t0 = pc()
        with c.map(key):
            pass
        ctx[i] = (pc() - t0) / 1e3
    ping = [0.0] * N
    for i in range(N):
        t0 = pc()
        c.ping()
        ping[i] = (pc() - t0) / 1e3
    return pct(rt, 0.5), pct(rt, 0.99), pct(ping, 0.5), pct(ctx, 0.5)


def c_round(zc_bench: str, url: str, key: str) -> tuple[float, float, float]:
    out = subprocess.run([zc_bench, url, "--warm", key], check=True, capture_output=True,
                         text=True).stdout.split()
    return float(out[0]), float(out[1]), float(out[2])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("url")
    ap.add_argument("--zc-bench", required=True)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--key", default="bench/small")
    a = ap.parse_args()
    with gpukv.Client(a.url) as c:
        c.set(a.key, bytes(4096))
        if c.zero_copy == "none":
            raise SystemExit(f"no zero-copy: {c.server_info['zero_copy_why']}")
        cs, ps = [], []
        for _ in range(a.rounds):
            cs.append(c_round(a.zc_bench, a.url, a.key))
            ps.append(py_round(c, a.key))
        backend, mech = c.backend, c.zero_copy
    med = lambda rows, i: statistics.median(r[i] for r in rows)  # noqa: E731
    print(f"Python binding vs libgpukv ({backend} backend, {mech}), medians of {a.rounds} "
          f"interleaved rounds of {N}:\n")
    print("| measurement | Python | C (zc_bench --warm) | difference | target |")
    print("|---|---|---|---|---|")
    d = med(ps, 0) - med(cs, 0)
    print(f"| warm MAP+unmap of a 4 KiB value, p50 | {med(ps, 0):.2f} us | {med(cs, 0):.2f} us | "
          f"{d:+.2f} us | <= +2 us |")
    print(f"| — p99 | {med(ps, 1):.2f} us | {med(cs, 1):.2f} us | {med(ps, 1) - med(cs, 1):+.2f} us"
          " | — |")
    print(f"| — as `with c.map(key):`, p50 | {med(ps, 3):.2f} us | — | "
          f"{med(ps, 3) - med(cs, 0):+.2f} us | — |")
    print(f"| PING round trip, p50 | {med(ps, 2):.2f} us | {med(cs, 2):.2f} us | "
          f"{med(ps, 2) - med(cs, 2):+.2f} us | — |")
    print("\nper round (C p50 / Python p50, us): " + ", ".join(
        f"{cr[0]:.2f} / {pr[0]:.2f}" for cr, pr in zip(cs, ps)))


if __name__ == "__main__":
    main()
