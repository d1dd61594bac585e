"""peers.py: the two systems peer_bench.py compares, each as a server started once and a client
any process can open (README.md beside this file says how each is configured and why).

A client has the same calls for both systems, all on CUDA tensors of uint8:
  put(key, t), get(key, out), remove(key)
  put_batch(keys, ts), get_batch(keys, outs)   one call each where the system has one
  close()
Anything a peer answers wrongly, or a peer that cannot start, ends the run through fail()
(exit 2, the reason on stderr).
"""
from __future__ import annotations

import socket
import subprocess
import sys
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


def nbytes(t) -> int:
    return t.numel() * t.element_size()


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


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class GpukvServer:
    """gpukvd --backend cuda on a Unix socket in work/."""
    name = "gpukv"

    def __init__(self, daemon: str, work: Path, extra: list[str]) -> None:
        self.sock = str(work / "gpukv.sock")
        self.log = work / "gpukvd.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [daemon, "--socket", self.sock, "--backend", "cuda", "--maxmemory", "24G",
                 *extra], stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while True:
            if self.proc.poll() is not None:
                fail(f"gpukvd exited {self.proc.returncode}: {self.log.read_text()[-2000:]}")
            try:
                c = GpukvClient(self.sock)
                break
            except Exception as e:  # gpukv.Error until the socket answers
                if time.monotonic() > deadline:
                    fail(f"gpukvd did not answer within 30 s: {e}")
                time.sleep(0.05)
        info = c.c
        if info.backend != "cuda" or info.zero_copy != "cuda-pool-fd":
            fail(f"gpukvd runs {info.backend} with zero-copy {info.zero_copy}: "
                 f"{info.server_info.get('zero_copy_why')}")
        self.config = (f"gpukvd {info.server_info['server']} on its defaults but --maxmemory "
                       f"24G {' '.join(extra)}, cuda backend, Unix socket, zero-copy (CUDA pool "
                       "IPC)")
        c.close()

    def address(self) -> tuple:
        return ("gpukv", self.sock)

    def close(self) -> None:
        stop(self.proc)


class GpukvClient:
    name = "gpukv"

    def __init__(self, sock: str) -> None:
        import gpukv
        self.c = gpukv.Client("unix:" + sock)

    def put(self, key: str, t) -> None:
        self.c.set(key, t)

    def get(self, key: str, out) -> None:
        self.c.get_to_device(key, out)

    def map_read(self, key: str) -> None:
        import torch
        with self.c.map(key) as m:
            torch.from_dlpack(m).sum()  # a read of every byte in place
            torch.cuda.synchronize()

    def put_batch(self, keys: list[str], ts: list) -> None:
        # One call (pipelined CREATEs, the copies waited for together, pipelined SEALs).
        self.c.set_many_from_device(zip(keys, ts))

    def get_batch(self, keys: list[str], outs: list) -> None:
        # One call maps them all (pipelined MAPs), then one device-to-device copy each.
        import torch
        ms = self.c.map_many(keys)
        try:
            for i, m in enumerate(ms):
                if m is None:
                    fail(f"gpukv's map_many found no {keys[i]}")
                outs[i].copy_(torch.from_dlpack(m), non_blocking=True)
            torch.cuda.synchronize()
        finally:
            for m in ms:
                if m is not None:
                    m.unmap()

    def remove(self, key: str) -> None:
        self.c.delete(key)

    def close(self) -> None:
        self.c.close()


class MooncakeServer:
    """mooncake_master with its HTTP metadata server, on loopback ports."""
    name = "Mooncake"

    def __init__(self, master: str, work: Path) -> None:
        try:
            import mooncake.store  # noqa: F401
        except ImportError as e:
            fail(f"Mooncake's Python package is missing ({e}): "
                 "pip install mooncake-transfer-engine-cuda13")
        self.rpc, self.http = free_port(), free_port()
        self.log = work / "mooncake_master.log"
        with open(self.log, "wb") as log:
            self.proc = subprocess.Popen(
                [master, f"--rpc_port={self.rpc}", "--enable_http_metadata_server=true",
                 f"--http_metadata_server_port={self.http}",
                 "--http_metadata_server_host=127.0.0.1"],
                stdout=log, stderr=subprocess.STDOUT)
        wait_port(self.rpc, self.proc, "mooncake_master", self.log)
        wait_port(self.http, self.proc, "mooncake_master's metadata server", self.log)

    def address(self) -> tuple:
        return ("Mooncake", self.rpc, self.http)

    def close(self) -> None:
        stop(self.proc)


class MooncakeClient:
    """A store client embedded in this process: it mounts a segment of host memory."""
    name = "Mooncake"

    def __init__(self, rpc: int, http: int, segment: int, buffer: int) -> None:
        from mooncake.store import MooncakeDistributedStore
        self.s = MooncakeDistributedStore()
        rc = self.s.setup("127.0.0.1", f"http://127.0.0.1:{http}/metadata", segment, buffer,
                          "tcp", "", f"127.0.0.1:{rpc}")
        if rc != 0:
            fail(f"Mooncake's setup returned {rc}")
        self.regions: list[tuple[int, int]] = []
        self.config = (f"mooncake_master (HTTP metadata server) and an embedded store client "
                       f"in this process: TCP transport, a {label(segment)} segment of host "
                       f"memory, a {label(buffer)} local buffer; tensors registered with "
                       "register_buffer, moved with put_from / get_into (batches: "
                       "batch_put_from / batch_get_into)")

    def _reg(self, t) -> None:
        # Mooncake refuses to register memory that overlaps a registered region, and what it
        # registers is the allocation around the tensor: a tensor cut from a registered
        # Arena's allocation is covered already.
        p, n = t.data_ptr(), nbytes(t)
        if not any(lo <= p and p + n <= hi for lo, hi in self.regions):
            rc = self.s.register_buffer(p, n)
            if rc != 0:
                fail(f"Mooncake's register_buffer returned {rc}")
            self.regions.append((p, p + n))

    def put(self, key: str, t) -> None:
        self._reg(t)
        rc = self.s.put_from(key, t.data_ptr(), nbytes(t))
        if rc != 0:
            fail(f"Mooncake's put_from of {key} returned {rc}")

    def get(self, key: str, out) -> None:
        self._reg(out)
        n = nbytes(out)
        rc = self.s.get_into(key, out.data_ptr(), n)
        if rc != n:
            fail(f"Mooncake's get_into of {key} returned {rc}, not {n}")

    def put_batch(self, keys: list[str], ts: list) -> None:
        for t in ts:
            self._reg(t)
        rcs = self.s.batch_put_from(keys, [t.data_ptr() for t in ts], [nbytes(t) for t in ts])
        bad = [(k, rc) for k, rc in zip(keys, rcs) if rc != 0]
        if bad or len(rcs) != len(keys):
            fail(f"Mooncake's batch_put_from: {len(bad)} of {len(keys)} failed, e.g. {bad[:1]}")

    def get_batch(self, keys: list[str], outs: list) -> None:
        for t in outs:
            self._reg(t)
        sizes = [nbytes(t) for t in outs]
        rcs = self.s.batch_get_into(keys, [t.data_ptr() for t in outs], sizes)
        bad = [(k, rc) for k, rc, n in zip(keys, rcs, sizes) if rc != n]
        if bad or len(rcs) != len(keys):
            fail(f"Mooncake's batch_get_into: {len(bad)} of {len(keys)} short, e.g. {bad[:1]}")

    def remove(self, key: str) -> None:
        self.s.remove(key)

    def close(self) -> None:
        self.s.close()


class Arena:
    """One CUDA allocation of total bytes that a process cuts all its tensors from (so that
    Mooncake registers it once: two tensors that torch placed in one allocation would be
    refused as overlapping regions)."""

    def __init__(self, total: int) -> None:
        import torch
        self.base = torch.empty(total, dtype=torch.uint8, device="cuda")
        self.used = 0

    def take(self, n: int, random: bool = False):
        if self.used + n > nbytes(self.base):
            fail(f"the bench's arena of {label(nbytes(self.base))} is too small")
        t = self.base[self.used:self.used + n]
        self.used += (n + 4095) // 4096 * 4096
        if random:
            t.random_(0, 256)
        return t


def connect(address: tuple, segment: int, buffer: int, arena: Arena):
    """A client of the server at address (GpukvServer/MooncakeServer.address()); a Mooncake
    client registers the process's arena at once."""
    if address[0] == "gpukv":
        return GpukvClient(address[1])
    c = MooncakeClient(address[1], address[2], segment, buffer)
    c._reg(arena.base)
    return c
