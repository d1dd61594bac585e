"""Fixtures: a real gpukvd on a temporary socket (and TCP port 0) for the tests.

GPUKVD names the daemon binary (ctest sets it; else build-test/ or build/ of the checkout, else
PATH). GKV_TEST_BACKEND picks the backend: host (default; zero-copy through the shared arena)
or cuda (the GPU machine)."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

import gpukv

ROOT = Path(__file__).resolve().parents[3]


def daemon_path() -> str:
    env = os.environ.get("GPUKVD")
    if env:
        return env
    for build in ("build-test", "build"):
        p = ROOT / build / "server" / "gpukvd"
        if p.exists():
            return str(p)
    found = shutil.which("gpukvd")
    if not found:
        pytest.skip("no gpukvd: set GPUKVD")
    return found


BACKEND = os.environ.get("GKV_TEST_BACKEND", "host")


@dataclass
class Daemon:
    proc: subprocess.Popen
    dir: str
    sock: str
    url: str
    tcp_url: str

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log(self) -> str:
        try:
            return Path(self.dir, "gpukvd.log").read_text()
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def start_daemon(*extra: str, maxmemory: str = "256M") -> Daemon:
    d = tempfile.mkdtemp(prefix="gkv-py-")
    os.chmod(d, 0o700)
    sock = os.path.join(d, "gpukv.sock")
    args = [daemon_path(), "--socket", sock, "--listen", "127.0.0.1:0", "--backend", BACKEND,
            "--maxmemory", maxmemory]
    if BACKEND == "host":
        args += ["--host-zero-copy", "yes"]
    args += extra  # the test's own flags win
    log = open(os.path.join(d, "gpukvd.log"), "wb")
    proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    log.close()
    url = "unix:" + sock
    deadline = time.monotonic() + 30
    while True:
        if proc.poll() is not None:
            text = Path(d, "gpukvd.log").read_text()
            shutil.rmtree(d, ignore_errors=True)
            if BACKEND == "cuda" and "no usable GPU" in text:
                pytest.skip(f"the cuda backend cannot start here: {text.strip()}")
            raise RuntimeError(f"gpukvd exited {proc.returncode}: {text}")
        try:
            with gpukv.Client(url) as c:
                text = c._info()
            break
        except gpukv.ConnectionError:
            if time.monotonic() > deadline:
                proc.kill()
                raise
            time.sleep(0.05)
    m = re.search(r"tcp_listen:(\S+)", text)
    return Daemon(proc, d, sock, url, "tcp:" + m.group(1) if m else "")


@pytest.fixture(scope="session")
def daemon():
    d = start_daemon()
    yield d
    d.stop()


@pytest.fixture
def fresh_daemon():
    """A daemon of the test's own, for tests that stop or kill it."""
    started: list[Daemon] = []

    def start(*extra: str, **kw: str) -> Daemon:
        d = start_daemon(*extra, **kw)
        started.append(d)
        return d

    yield start
    for d in started:
        d.stop()


@pytest.fixture
def client(daemon):
    with gpukv.Client(daemon.url) as c:
        c.flush()
        yield c


def leases(url: str) -> int:
    """The server's count of leases held (by every connection)."""
    with gpukv.Client(url) as c:
        return c.info("leases")["leases"]


def wait_for(pred, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return True
        time.sleep(0.01)
    return pred()
