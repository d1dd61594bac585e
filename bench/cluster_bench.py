#!/usr/bin/env python3
"""cluster_bench.py: two gpukvd nodes of one cluster (one per GPU, or both on GPU 0) with a
private etcd, measured side by side in one run (issue 34):
  - small values: GET p50/p99 of a value the node owns (local), of a value another node owns
    with a replica here already (one round trip to the home, or none when we are it), and of a
    value rewritten on the other node before each read (a full pull: home, owner, relay);
  - large values (1 MiB .. 1 GiB): a pull from the other node vs a local GET of the same size vs
    a raw TCP socket copy of the same bytes between two processes.

  - with --one-node: SET/GET p50 on a daemon alone vs a one-node cluster (the cluster's cost).

Usage: cluster_bench.py GPUKVD [--gpus 0,1] [--small 4096] [--large 1M,64M,1G] [--rounds N]
                        [--one-node]
Needs etcd on PATH and the gpukv package. Prints a Markdown table."""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "cluster"))
from cluster_fixture import Etcd, free_port, wait_for  # noqa: E402
from sizes import size_arg  # noqa: E402  (bench/sizes.py)

import gpukv  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402


def bench_env(prefix):
    """A private folder with a token file ($GPUKV_TOKEN_FILE names it) and a started etcd."""
    root = tempfile.mkdtemp(prefix=prefix)
    os.chmod(root, 0o700)
    token = os.path.join(root, "token")
    with open(token, "w") as f:
        f.write("bench-token-0123456789abcdef0123\n")
    os.chmod(token, 0o600)
    os.environ["GPUKV_TOKEN_FILE"] = token
    etcd = Etcd(root)
    etcd.start()
    return root, token, etcd


def start_node(root, daemon, etcd, name, gpu, token, backend, cluster="gpukv",
               maxmemory="8G", extra=(), env=None):
    """A node of cluster (None: a daemon alone, with the same flags otherwise); extra: more
    flags, env: its environment (default ours). Files are named cluster-name."""
    tag = f"{cluster}-{name}" if cluster else name
    sock, port = os.path.join(root, f"{tag}.sock"), free_port()
    log = open(os.path.join(root, f"{tag}.log"), "ab")
    joined = ["--cluster", f"etcd://{etcd.endpoint}", "--cluster-name", cluster,
              "--node-name", name] if cluster else []
    p = subprocess.Popen([daemon, "--backend", backend, "--device", str(gpu),
                          "--maxmemory", maxmemory, "--max-value-size", "2G", "--socket", sock,
                          "--listen", f"127.0.0.1:{port}", "--auth-token-file", token]
                         + joined + list(extra),
                         stdout=log, stderr=log, stdin=subprocess.DEVNULL, env=env)
    wait_for(lambda: os.path.exists(sock) or p.poll() is not None, 60, f"{name}'s socket")
    return p, sock


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def raw_tcp_copy(size: int, rounds: int) -> float:
    """GB/s of size bytes sent over a loopback TCP socket to another thread, read into one buffer."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    payload = memoryview(bytearray(os.urandom(1 << 20)) * (size // (1 << 20) or 1))[:size]

    def sender():
        conn, _ = srv.accept()
        for _ in range(rounds):
            conn.sendall(payload)
            conn.recv(1)
        conn.close()

    t = threading.Thread(target=sender)
    t.start()
    c = socket.create_connection(("127.0.0.1", port))
    buf = bytearray(size)
    best = []
    for _ in range(rounds):
        view, got, t0 = memoryview(buf), 0, time.perf_counter()
        while got < size:
            got += c.recv_into(view[got:])
        best.append(time.perf_counter() - t0)
        c.sendall(b"k")
    t.join()
    c.close()
    srv.close()
    return size / statistics.median(best) / 1e9


def one_node_cost(root, daemon, etcd, gpu, token, backend, rounds):
    """SET and GET p50 on a daemon alone and on a one-node cluster (same flags otherwise), in
    interleaved rounds; prints a table."""
    procs = []
    try:
        off = start_node(root, daemon, etcd, "solo-off", gpu, token, backend, cluster=None)
        procs.append(off[0])
        on = start_node(root, daemon, etcd, "solo-on", gpu, token, backend, cluster="solo")
        procs.append(on[0])
        clients = {"off": gpukv.Client(f"unix:{off[1]}"), "on": gpukv.Client(f"unix:{on[1]}")}
        wait_for(lambda: clients["on"].info("cluster")["members"] == 1, 20, "the one member")
        res = {(w, op, size): [] for w in clients for op in ("SET", "GET") for size in (64, 4096)}
        for _ in range(3):
            for w, c in clients.items():
                for size in (64, 4096):
                    v = os.urandom(size)
                    for op in ("SET", "GET"):
                        out = res[(w, op, size)]
                        for i in range(rounds):
                            t0 = time.perf_counter()
                            if op == "SET":
                                c.set(f"solo/{i % 256}", v)
                            else:
                                c.get(f"solo/{i % 256}")
                            out.append((time.perf_counter() - t0) * 1e6)
        print("\n| one node, one client (Python), 3 interleaved rounds | cluster off p50 us | "
              "one-node cluster p50 us | on / off |")
        print("|---|---|---|---|")
        for op in ("SET", "GET"):
            for size in (64, 4096):
                a_, b_ = (statistics.median(res[(w, op, size)]) for w in ("off", "on"))
                print(f"| {op} {size} B | {a_:.1f} | {b_:.1f} | {b_ / a_:.2f} |")
        for c in clients.values():
            c.close()
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("daemon")
    ap.add_argument("--gpus", default="0,1")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--small", default="4096")
    ap.add_argument("--large", default="1M,64M,1G")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--one-node", action="store_true",
                    help="also: a daemon alone vs a one-node cluster, on the first GPU")
    a = ap.parse_args()
    gpus = [int(g) for g in a.gpus.split(",")]
    root, token, etcd = bench_env("gkv-clbench-")
    procs = []
    try:
        pa, sa = start_node(root, a.daemon, etcd, "a", gpus[0], token, a.backend)
        procs.append(pa)
        pb, sb = start_node(root, a.daemon, etcd, "b", gpus[-1], token, a.backend)
        procs.append(pb)
        ca, cb = gpukv.Client(f"unix:{sa}"), gpukv.Client(f"unix:{sb}")
        wait_for(lambda: ca.info("cluster")["members"] == 2, 20, "two members")
        time.sleep(2)  # past the settling after the join
        rows = []
        small = size_arg(a.small)
        value = os.urandom(small)
        keys = [f"small/{i}" for i in range(64)]
        for k in keys:
            ca.set(k, value)
        def timed(fn, n):
            out = []
            for i in range(n):
                t0 = time.perf_counter()
                fn(i)
                out.append((time.perf_counter() - t0) * 1e6)
            return out
        ping = timed(lambda i: cb.ping(), a.rounds)
        local = timed(lambda i: ca.get(keys[i % 64]), a.rounds)
        cb.get(keys[0])
        for k in keys:
            cb.get(k)  # replicas
        replica = timed(lambda i: cb.get(keys[i % 64]), a.rounds)
        def pull(i):
            ca.set(keys[i % 64], value)
            t0 = time.perf_counter()
            cb.get(keys[i % 64])
            return time.perf_counter() - t0
        pulls = [pull(i) * 1e6 for i in range(a.rounds // 4)]
        rows.append(("PING (node b)", small, statistics.median(ping), pct(ping, .99), ""))
        rows.append(("GET, owned here (node a)", small, statistics.median(local), pct(local, .99), ""))
        rows.append(("GET, replica confirmed by the home (node b)", small,
                     statistics.median(replica), pct(replica, .99),
                     f"{statistics.median(replica) / statistics.median(local):.2f}x local"))
        rows.append(("GET, pulled from the owner (node b, value rewritten on a)", small,
                     statistics.median(pulls), pct(pulls, .99),
                     f"{statistics.median(pulls) / statistics.median(local):.2f}x local"))
        print(f"\n| small values ({small} B), {a.rounds} requests, one client | p50 us | p99 us | vs local |")
        print("|---|---|---|---|")
        for name, _, p50, p99, note in rows:
            print(f"| {name} | {p50:.1f} | {p99:.1f} | {note} |")
        print("\n| size | local GET GB/s | remote GET (pull) GB/s | raw TCP copy GB/s | pull / raw |")
        print("|---|---|---|---|---|")
        for s in a.large.split(","):
            size = size_arg(s)
            n = 3 if size >= 1 << 30 else 5 if size >= 64 << 20 else 20
            big = os.urandom(1 << 20) * (size // (1 << 20) or 1)
            big = big[:size]
            ca.set("big", big)
            loc, rem = [], []
            for _ in range(n):
                t0 = time.perf_counter()
                got = ca.get("big")
                loc.append(time.perf_counter() - t0)
                ca.set("big", big)  # a new version: b must pull it
                t0 = time.perf_counter()
                got = cb.get("big")
                rem.append(time.perf_counter() - t0)
                assert len(got) == size
            raw = raw_tcp_copy(size, n)
            lg, rg = size / statistics.median(loc) / 1e9, size / statistics.median(rem) / 1e9
            print(f"| {s} | {lg:.2f} | {rg:.2f} | {raw:.2f} | {rg / raw:.2f} |")
        info = cb.info("cluster")
        print(f"\nnode b: remote_reads {info['remote_reads']}, bytes_pulled {info['bytes_pulled']},"
              f" replica_hits {info['replica_hits']}")
        ca.close()
        cb.close()
        for p in procs:
            p.terminate()
            p.wait(30)
        procs = []
        if a.one_node:
            one_node_cost(root, a.daemon, etcd, gpus[0], token, a.backend, a.rounds)
    finally:
        for p in procs:
            p.terminate()
            p.wait(30)
        etcd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
