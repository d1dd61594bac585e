#!/usr/bin/env python3
"""peer_bench.py: gpukv beside Mooncake Store on one GPU machine, the same workloads from one
Python process, interleaved in rounds (issue 38; README.md beside this file says how each peer
is configured and why).

Rows (each a median over its repetitions, per round; the table gives the median of the rounds):
  put  SIZE  a CUDA tensor of SIZE bytes stored under a new key
             gpukv: Client.set(key, tensor) (CREATE, device-to-device copy, SEAL)
             Mooncake: put_from(key, ptr, size) of a registered buffer (the tensor)
  get  SIZE  a value read into a CUDA tensor
             gpukv: get_to_device(key, out) (MAP, device-to-device copy, unmap)
             Mooncake: get_into(key, ptr, size) into a registered buffer
  map  SIZE  gpukv only: map(key) and a reduction over the mapped value in place (what a
             reader that only reads does); beside Mooncake's get_into
  4 KiB get latency: p50 and p99 of single gets (gpukv get_to_device, Mooncake get_into)

Usage: peer_bench.py [--sizes 4K,64K,1M,16M,256M] [--rounds 3] [--gpukvd PATH]
                     [--mooncake-master PATH] [--json FILE]
A peer that cannot start stops the run with its reason (exit 2).
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

UNITS = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def size_of(text: str) -> int:
    text = text.strip().upper()
    return int(text[:-1]) * UNITS[text[-1]] if text[-1] in UNITS else int(text)


def label(n: int) -> str:
    for u, m in (("G", 1 << 30), ("M", 1 << 20), ("K", 1 << 10)):
        if n >= m and n % m == 0:
            return f"{n // m} {u}iB"
    return f"{n} B"


def fail(msg: str) -> None:
    print(f"peer_bench: {msg}", file=sys.stderr)
    sys.exit(2)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, what: str, log: Path) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            fail(f"{what} exited {proc.returncode}: {log.read_text()[-2000:]}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    fail(f"{what} did not listen on port {port} within 30 s: {log.read_text()[-2000:]}")


class Gpukv:
    name = "gpukv"

    def __init__(self, daemon: str, work: Path, extra: list[str]) -> None:
        import gpukv
        sock = work / "gpukv.sock"
        self.log = work / "gpukvd.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [daemon, "--socket", str(sock), "--backend", "cuda", "--maxmemory", "24G",
                 *extra],
                stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                fail(f"gpukvd exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                self.c = gpukv.Client("unix:" + str(sock))
                break
            except gpukv.Error as e:
                if time.monotonic() > deadline:
                    fail(f"gpukvd did not answer within 30 s: {e}")
                time.sleep(0.05)
        if self.c.backend != "cuda" or self.c.zero_copy != "cuda-pool-fd":
            fail(f"gpukvd runs {self.c.backend} with zero-copy {self.c.zero_copy}: "
                 f"{self.c.server_info.get('zero_copy_why')}")
        self.config = (f"gpukvd {self.c.server_info['server']} on its defaults but --maxmemory "
                       f"24G {' '.join(extra)}, cuda backend, Unix socket, zero-copy (CUDA pool "
                       "IPC)")

    def put(self, key: str, t) -> None:
        self.c.set(key, t)

    def get(self, key: str, out) -> None:
        self.c.get_to_device(key, out)

    def map_read(self, key: str) -> None:
        import torch
        with self.c.map(key) as m:
            torch.from_dlpack(m).sum()  # a read of every byte in place
            torch.cuda.synchronize()

    def remove(self, key: str) -> None:
        self.c.delete(key)

    def close(self) -> None:
        self.c.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


class Mooncake:
    name = "Mooncake"

    def __init__(self, master: str, work: Path, segment: int, buffer: int) -> None:
        try:
            from mooncake.store import MooncakeDistributedStore
        except ImportError as e:
            fail(f"Mooncake's Python package is missing ({e}): "
                 "pip install mooncake-transfer-engine-cuda13")
        rpc, http = free_port(), free_port()
        self.log = work / "mooncake_master.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [master, f"--rpc_port={rpc}", "--enable_http_metadata_server=true",
                 f"--http_metadata_server_port={http}", "--http_metadata_server_host=127.0.0.1"],
                stdout=log, stderr=subprocess.STDOUT)
        wait_port(rpc, self.proc, "mooncake_master", self.log)
        wait_port(http, self.proc, "mooncake_master's metadata server", self.log)
        self.s = MooncakeDistributedStore()
        rc = self.s.setup("127.0.0.1", f"http://127.0.0.1:{http}/metadata", segment, buffer,
                          "tcp", "", f"127.0.0.1:{rpc}")
        if rc != 0:
            fail(f"Mooncake's setup returned {rc}: {self.log.read_text()[-2000:]}")
        self.registered: set[int] = set()
        self.config = (f"mooncake_master (HTTP metadata server) and an embedded store client "
                       f"in this process: TCP transport, a {label(segment)} segment of host "
                       f"memory, a {label(buffer)} local buffer; tensors registered with "
                       "register_buffer, moved with put_from / get_into")

    def _reg(self, t) -> None:
        p = t.data_ptr()
        if p not in self.registered:
            rc = self.s.register_buffer(p, t.numel() * t.element_size())
            if rc != 0:
                fail(f"Mooncake's register_buffer returned {rc}")
            self.registered.add(p)

    def put(self, key: str, t) -> None:
        self._reg(t)
        rc = self.s.put_from(key, t.data_ptr(), t.numel() * t.element_size())
        if rc != 0:
            fail(f"Mooncake's put_from of {key} returned {rc}")

    def get(self, key: str, out) -> None:
        self._reg(out)
        n = out.numel() * out.element_size()
        rc = self.s.get_into(key, out.data_ptr(), n)
        if rc != n:
            fail(f"Mooncake's get_into of {key} returned {rc}, not {n}")

    def remove(self, key: str) -> None:
        self.s.remove(key)

    def close(self) -> None:
        self.s.close()
        self.proc.terminate()
        self.proc.wait(timeout=30)


def reps_for(size: int) -> int:
    return 200 if size <= 64 << 10 else 50 if size <= 1 << 20 else 10 if size <= 16 << 20 else 3


def timed(fn) -> float:
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="4K,64K,1M,16M,256M")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--gpukvd", default=shutil.which("gpukvd") or "gpukvd")
    ap.add_argument("--mooncake-master", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--gpukvd-args", default="", help="more gpukvd flags, space-separated")
    a = ap.parse_args()
    sizes = [size_of(s) for s in a.sizes.split(",")]
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
    big = max(sizes)
    g = Gpukv(a.gpukvd, work, a.gpukvd_args.split())
    m = Mooncake(master, work, segment=max(4 << 30, 4 * big), buffer=max(1 << 30, 2 * big))
    peers = (g, m)
    src = {n: torch.randint(0, 256, (n,), dtype=torch.uint8, device="cuda") for n in sizes}
    dst = {n: torch.empty(n, dtype=torch.uint8, device="cuda") for n in sizes}
    rows: dict[tuple, list[float]] = {}
    seq = 0
    for rnd in range(a.rounds):
        for n in sizes:
            for p in peers:
                k = reps_for(n)
                puts, gets, maps = [], [], []
                for i in range(k):
                    seq += 1
                    key = f"pb/{p.name}/{n}/{seq}"
                    puts.append(timed(lambda: p.put(key, src[n])))
                    gets.append(timed(lambda: p.get(key, dst[n])))
                    if isinstance(p, Gpukv):
                        maps.append(timed(lambda: p.map_read(key)))
                    if i == 0 and not torch.equal(dst[n], src[n]):
                        fail(f"{p.name} read back other bytes than it stored ({label(n)})")
                    p.remove(key)
                rows.setdefault(("put", n, p.name), []).append(statistics.median(puts))
                rows.setdefault(("get", n, p.name), []).append(statistics.median(gets))
                if maps:
                    rows.setdefault(("map", n, p.name), []).append(statistics.median(maps))
    lat: dict[str, list[float]] = {}
    lat_src = torch.randint(0, 256, (4096,), dtype=torch.uint8, device="cuda")
    lat_dst = torch.empty(4096, dtype=torch.uint8, device="cuda")
    for p in peers:  # 4 KiB get latency, one key read again and again
        key = f"pb/{p.name}/lat"
        p.put(key, lat_src)
        lat[p.name] = sorted(timed(lambda: p.get(key, lat_dst)) for _ in range(a.rounds * 1000))
        p.remove(key)
    for p in peers:
        p.close()

    print(f"## gpukv beside Mooncake Store ({torch.cuda.get_device_name()}, {a.rounds} rounds)\n")
    print("| row | gpukv | Mooncake | gpukv/Mooncake (throughput) |\n|---|---|---|---|")
    out_rows = []
    for (op, n, name) in sorted({(o, n, nm) for (o, n, nm) in rows if nm == "gpukv"},
                                key=lambda r: (["put", "get", "map"].index(r[0]), r[1])):
        tg = statistics.median(rows[(op, n, "gpukv")])
        tm = statistics.median(rows[("get" if op == "map" else op, n, "Mooncake")])
        what = f"{op} {label(n)}" + (" (in place, against Mooncake's get_into)"
                                     if op == "map" else "")
        print(f"| {what} | {tg * 1e6:.1f} us ({n / tg / 1e9:.2f} GB/s) | {tm * 1e6:.1f} us "
              f"({n / tm / 1e9:.2f} GB/s) | {tm / tg:.2f}x |")
        out_rows.append({"row": what, "gpukv_s": tg, "mooncake_s": tm, "ratio": tm / tg})
    pg, pm = lat["gpukv"], lat["Mooncake"]
    q = lambda xs, f: xs[min(len(xs) - 1, int(len(xs) * f))] * 1e6  # noqa: E731
    print(f"| get 4 KiB latency p50 / p99 | {q(pg, .5):.1f} / {q(pg, .99):.1f} us | "
          f"{q(pm, .5):.1f} / {q(pm, .99):.1f} us | {q(pm, .5) / q(pg, .5):.2f}x (p50) |")
    print(f"\ngpukv: {g.config}.\n\nMooncake: {m.config}.")
    if a.json:
        Path(a.json).write_text(json.dumps({"rows": out_rows, "lat_us": {
            "gpukv": [q(pg, .5), q(pg, .99)], "mooncake": [q(pm, .5), q(pm, .99)]}}, indent=1))
    shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
