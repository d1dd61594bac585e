"""cluster_fixture.py: a private etcd and gpukvd nodes on loopback for the cluster tests.

Every process is started here and stopped by pid (SIGTERM, then SIGKILL); every file lives
under one temporary directory that close() removes."""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time

import gpukv


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(pred, timeout: float, what: str, step: float = 0.05):
    end = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > end:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(step)


def _ip(*args: str) -> bool:
    return subprocess.run(["ip", *args], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL).returncode == 0


class Net:
    """A network namespace of our own joined to this one by a veth pair: 10.251.X.1 on this
    side, 10.251.X.2 inside. Cutting the pair (`ip link set ... down`) partitions whatever
    runs inside from everything here, both ways; no other address is ever used."""

    def __init__(self) -> None:
        tag = f"{os.getpid() % 100000}"
        self.ns, self.here, self.there = f"gkvns{tag}", f"gkvh{tag}", f"gkvt{tag}"
        self.outer = self.inner = ""
        self.why = ""
        if os.geteuid() != 0 or not shutil.which("ip"):
            self.why = "network namespaces need root and iproute2"
            return
        # Two suites at once (ctest -j) must not take the same 10.251.X.0/24: a subnet on two
        # interfaces here routes one suite's packets into the other's namespace (its nodes
        # then never meet). The choice and the address are made under a lock.
        with open(os.path.join(tempfile.gettempdir(), "gkv-netns.lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True,
                                  text=True).stdout
            start = os.getpid() % 250
            x = next(((start + k) % 250 + 1 for k in range(250)
                      if f" 10.251.{(start + k) % 250 + 1}." not in used), start + 1)
            self.outer, self.inner = f"10.251.{x}.1", f"10.251.{x}.2"
            ok = self._make()
        if not ok:
            self.close()
            self.why = "cannot create a network namespace and a veth pair here"

    def _make(self) -> bool:
        return (_ip("netns", "add", self.ns)
                and _ip("link", "add", self.here, "type", "veth", "peer", "name", self.there)
                and _ip("link", "set", self.there, "netns", self.ns)
                and _ip("addr", "add", f"{self.outer}/24", "dev", self.here)
                and _ip("link", "set", self.here, "up")
                and _ip("netns", "exec", self.ns, "ip", "addr", "add", f"{self.inner}/24", "dev",
                        self.there)
                and _ip("netns", "exec", self.ns, "ip", "link", "set", self.there, "up")
                and _ip("netns", "exec", self.ns, "ip", "link", "set", "lo", "up"))

    @property
    def ok(self) -> bool:
        return not self.why

    def cut(self) -> None:
        assert _ip("link", "set", self.here, "down")

    def heal(self) -> None:
        assert _ip("link", "set", self.here, "up")

    def close(self) -> None:
        _ip("link", "del", self.here)
        _ip("netns", "del", self.ns)


class Etcd:
    def __init__(self, root: str, host: str = "127.0.0.1") -> None:
        self.dir = os.path.join(root, "etcd")
        os.makedirs(self.dir)
        self.host = host
        self.port, self.peer = free_port(), free_port()
        self.endpoint = f"{host}:{self.port}"
        self.proc: subprocess.Popen | None = None

    def start(self) -> None:
        client, peer = f"http://{self.host}:{self.port}", f"http://127.0.0.1:{self.peer}"
        log = open(os.path.join(self.dir, "etcd.log"), "ab")
        self.proc = subprocess.Popen(
            [os.environ.get("GKV_ETCD", "etcd"), "--data-dir", os.path.join(self.dir, "data"),
             "--listen-client-urls", client, "--advertise-client-urls", client,
             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
             "--initial-cluster", f"default={peer}"],
            stdout=log, stderr=log, stdin=subprocess.DEVNULL)
        log.close()
        wait_for(self.healthy, 20, "etcd to become healthy")

    def healthy(self) -> bool:
        try:
            with socket.create_connection((self.host, self.port), timeout=1) as s:
                s.sendall(b"GET /health HTTP/1.0\r\nHost: x\r\n\r\n")
                s.settimeout(1)
                data = b""
                while chunk := s.recv(4096):
                    data += chunk
            return b'"health":"true"' in data
        except OSError:
            return False

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


class Node:
    def __init__(self, cluster: "Cluster", name: str, token_file: str, weight: int = 1,
                 inside: bool = False, extra: list[str] | None = None,
                 env: dict[str, str] | None = None) -> None:
        self.cluster, self.name, self.token_file, self.weight = cluster, name, token_file, weight
        self.extra = extra or []  # more gpukvd flags (the later ones win)
        self.env = env or {}  # more environment for the daemon
        self.inside = inside  # runs in the cluster's network namespace (partitions cut it off)
        net = cluster.net
        self.host = (net.inner if inside else net.outer) if net else "127.0.0.1"
        self.sock = os.path.join(cluster.root, f"{name}.sock")
        self.log = os.path.join(cluster.root, f"{name}.log")
        self.proc: subprocess.Popen | None = None
        self.port = 0

    def start(self) -> "Node":
        # free_port's port may be taken before the daemon binds it (an outgoing connection's
        # ephemeral port): start again on another.
        for attempt in range(3):
            try:
                return self._start()
            except AssertionError as e:
                if "address already in use" not in str(e) or attempt == 2:
                    raise
        raise AssertionError("unreachable")

    def _start(self) -> "Node":
        self.port = free_port()
        log = open(self.log, "ab")
        prefix = ["ip", "netns", "exec", self.cluster.net.ns] if self.inside else []
        self.proc = subprocess.Popen(
            prefix + [self.cluster.daemon, "--backend", "host", "--maxmemory", "256M",
             "--socket", self.sock, "--listen", f"{self.host}:{self.port}",
             "--auth-token-file", self.token_file,
             "--cluster", f"etcd://{self.cluster.etcd.endpoint}",
             "--cluster-name", self.cluster.name, "--node-name", self.name,
             "--cluster-ttl", str(self.cluster.ttl), "--cluster-weight", str(self.weight)]
            + self.extra,
            stdout=log, stderr=log, stdin=subprocess.DEVNULL,
            env={**os.environ, **self.env} if self.env else None)
        log.close()
        # Up when its socket takes a connection: a killed predecessor's socket file, still
        # there, would pass for it (and hide a failure to start, "address already in use"
        # among them).
        wait_for(lambda: self.accepts() or self.proc.poll() is not None, 20,
                 f"{self.name}'s socket")
        if self.proc.poll() is not None:
            raise AssertionError(f"{self.name} exited: {self.log_tail(2000)}")
        return self

    def accepts(self) -> bool:
        """Whether the daemon's Unix socket takes a connection."""
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(self.sock)
                return True
            except OSError:
                return False

    def log_tail(self, n: int = 3000) -> str:
        try:
            with open(self.log, errors="replace") as f:
                return f.read()[-n:]
        except OSError as e:
            return f"(no log: {e})"

    def client(self, timeout: float | None = 10) -> gpukv.Client:
        with open(self.token_file) as f:
            os.environ["GPUKV_TOKEN"] = f.read().strip()
        return gpukv.Client(f"unix:{self.sock}", timeout=timeout)

    def info(self) -> dict:
        with self.client() as c:
            return c.info("cluster")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


class Cluster:
    """A private etcd and nodes n1..nN of one cluster (token shared)."""

    def __init__(self, daemon: str, n: int = 3, ttl: int = 3, name: str = "test",
                 partitionable: bool = True, extra: list[str] | None = None) -> None:
        """With partitionable (and where network namespaces can be made), etcd and the nodes
        listen on a veth pair's addresses and the last node runs inside the namespace, so
        that net.cut() partitions it from etcd and the others; else all is on loopback and
        net is None (net_why says why)."""
        self.net: Net | None = None
        self.net_why = "not asked for"
        if partitionable:
            net = Net()
            self.net, self.net_why = (net, "") if net.ok else (None, net.why)
        self.root = tempfile.mkdtemp(prefix="gkv-cluster-")
        os.chmod(self.root, 0o700)
        self.daemon, self.ttl, self.name = daemon, ttl, name
        # Flags every node gets (before its own): the data plane (--nixl) by default comes
        # from $GKV_TEST_NIXL ("off" when unset: TCP).
        self.extra = extra if extra is not None else [
            "--nixl", os.environ.get("GKV_TEST_NIXL") or "off"]
        self.token = os.path.join(self.root, "token")
        with open(self.token, "w") as f:
            f.write("cluster-test-token-0123456789abcdef\n")
        os.chmod(self.token, 0o600)
        self.etcd = Etcd(self.root, self.net.outer if self.net else "127.0.0.1")
        self.nodes: list[Node] = []
        try:
            self.etcd.start()
            for i in range(n):
                self.add(inside=i == n - 1 and self.net is not None)
            self.wait_members(n)
        except BaseException:
            self.close()
            raise

    def add(self, name: str | None = None, token_file: str | None = None, weight: int = 1,
            inside: bool = False, extra: list[str] | None = None,
            env: dict[str, str] | None = None) -> Node:
        node = Node(self, name or f"n{len(self.nodes) + 1}", token_file or self.token, weight,
                    inside, self.extra + (extra or []), env)
        self.nodes.append(node.start())
        return node

    @contextlib.contextmanager
    def extra_node(self, name: str = "n4", extra: list[str] | None = None,
                   sig: int = signal.SIGTERM, leave_timeout: float = 15,
                   env: dict[str, str] | None = None):
        """A node more, for a with block: added, seen by every member, then stopped (sig)
        and gone from every member's view (within leave_timeout) after the block."""
        n = len(self.live())
        node = self.add(name, extra=extra, env=env)
        try:
            try:
                self.wait_members(n + 1, also=node)
            except AssertionError as e:
                raise AssertionError(f"{e}\n--- {name} log tail ---\n{node.log_tail()}") from None
            yield node
        finally:
            node.kill(sig)
            self.nodes.remove(node)
            self.wait_members(n, timeout=leave_timeout)

    def live(self) -> list[Node]:
        return [n for n in self.nodes if n.alive()]

    def wait_members(self, n: int, timeout: float = 15, also: Node | None = None) -> None:
        """Until every live member sees n members; fails at once when also (a node just
        started) has exited."""
        def sees(node: Node) -> bool:
            if also is not None and not also.alive():
                raise AssertionError(f"{also.name} exited ({also.proc.poll()})")
            return node.info().get("members") == n
        for node in self.live():
            if node.token_file != self.token:
                continue
            wait_for(lambda: sees(node), timeout, f"{node.name} to see {n} members")

    def close(self) -> list[str]:
        """Stops everything; returns what went wrong on the way (a node that did not exit 0
        on SIGTERM, a sanitizer's report in a log)."""
        problems = []
        for node in self.nodes:
            proc = node.proc
            node.kill(signal.SIGTERM)
            if proc is not None and proc.returncode not in (0, None):
                problems.append(f"{node.name} exited {proc.returncode} on SIGTERM")
            try:
                log = open(node.log, errors="replace").read()
            except OSError:
                log = ""
            if "Sanitizer" in log or "runtime error" in log:
                problems.append(f"{node.name}: {log[log.find('Sanitizer') - 200:][:3000]}")
            # A reply under another request's id (peer.c refuses it, and the request fails as
            # UNAVAILABLE, which a test may take in its stride): a bug of one side, never normal.
            refused = [line for line in log.splitlines() if "reply refused" in line]
            if refused:
                problems.append(f"{node.name}: " + "\n".join(refused[:10]))
        self.etcd.stop()
        if self.net:
            self.net.close()
        shutil.rmtree(self.root, ignore_errors=True)
        return problems
