#!/usr/bin/env python3
"""nixl_bench.py: issue 35's figures, side by side in one run on a machine with two GPUs.
Two clusters of two nodes each, with one etcd: in each, node a (GPU 0) owns the values and
node b (GPU 1) reads them; one cluster moves values through NIXL (--nixl PATH), the other over
TCP (--nixl off). A remote read is timed from the request until a local client holds a MAP of
the value on GPU 1 (b pulled it into its own memory). The reference: cudaMemcpyPeerAsync of the
same bytes from GPU 0 to GPU 1 in one process (the link's ceiling). Also: the first read from a
new peer against the steady state (and the second, from the same peer into memory as new to b),
and 16 concurrent readers of 64 MiB values (and the same readers of values b holds itself: what
the clients' MAPs alone allow), as threads of one process and as 16 processes; and reads into
a buffer the reader registered once (get_to_buffer: b copies the value into it itself).

Usage: nixl_bench.py GPUKVD NIXL_PATH [--sizes 1M,64M,1G] [--rounds 5] [--settle MS]
                     [--nixl-only] [--by-home SIZE] [--readers HOW[,HOW]] [--each K]
--settle MS: wait MS milliseconds between a's write and b's read (the owner's GPU idle before
the pull: does the write just before it slow the pull's first copy?).
--readers map,get_to_device,get_to_buffer: only the 16 reader processes, each way named, with
both nodes' time counters over them (tuning runs; GPUKV_NIXL_* in the environment reach the
nodes). --each K: each of them reads K values one after another per round (sustained reading:
one read begins as the process's last ended, so the round's start and end are paid once per K).
Needs etcd on PATH, CuPy and the gpukv package. Prints Markdown tables."""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "cluster"))
from cluster_bench import bench_env, start_node  # noqa: E402
from cluster_fixture import wait_for  # noqa: E402
from sizes import size_arg  # noqa: E402  (bench/sizes.py)
import proc_readers  # noqa: E402  (bench/proc_readers.py)

import cupy  # noqa: E402
import gpukv  # noqa: E402


def start(root, daemon, etcd, cluster, name, gpu, token, nixl):
    env = dict(os.environ, **({"UCX_PROTO_INFO": "y"} if os.environ.get("GKV_UCX_INFO") else {}))
    # GKV_NIXL_ARENA: every node's --nixl-arena (e.g. 2G); GKV_NODE_ARGS: more flags for every
    # node (e.g. "--busy-poll 200"); for measurements.
    arena = os.environ.get("GKV_NIXL_ARENA")
    more = (["--nixl-arena", arena] if arena else []) + os.environ.get("GKV_NODE_ARGS", "").split()
    return start_node(root, daemon, etcd, name, gpu, token, "cuda", cluster=cluster,
                      maxmemory="20G", extra=["--nixl", nixl] + more, env=env)


def peer_copy(size: int, rounds: int) -> float:
    """GB/s of cudaMemcpyPeerAsync GPU 0 -> GPU 1 (median of rounds), in this process, with
    peer access enabled (NVLink where the GPUs have it)."""
    for d, other in ((0, 1), (1, 0)):
        with cupy.cuda.Device(d):
            if cupy.cuda.runtime.deviceCanAccessPeer(d, other):
                try:
                    cupy.cuda.runtime.deviceEnablePeerAccess(other)
                except cupy.cuda.runtime.CUDARuntimeError:
                    pass  # enabled already
    with cupy.cuda.Device(0):
        src = cupy.ones(size, dtype=cupy.uint8)
    with cupy.cuda.Device(1):
        dst = cupy.empty(size, dtype=cupy.uint8)
        s = cupy.cuda.Stream(non_blocking=True)
        times = []
        for _ in range(rounds + 1):
            t0 = time.perf_counter()
            cupy.cuda.runtime.memcpyPeerAsync(dst.data.ptr, 1, src.data.ptr, 0, size, s.ptr)
            s.synchronize()
            times.append(time.perf_counter() - t0)
    del src, dst
    return size / statistics.median(times[1:]) / 1e9


def trace(event: str, value: int) -> None:
    """A line in the daemons' timeline (GPUKV_TRACE, read by bench/nixl_trace.py)."""
    path = os.environ.get("GPUKV_TRACE")
    if path:
        with open(f"{path}.{os.getpid()}", "a") as f:
            f.write(f"{time.monotonic_ns() // 1000} {event} {value} 0\n")


SETTLE_S = 0.0  # --settle


def remote_read(ca, cb, key, arr, check=False) -> float:
    """Seconds for b to MAP a value a has just rewritten (a pull into b, then the mapping)."""
    ca.set_from_device(key, arr)  # a new version: b must pull it
    if SETTLE_S:
        time.sleep(SETTLE_S)
    trace("b_map", arr.nbytes)
    t0 = time.perf_counter()
    m = cb.map(key)
    dt = time.perf_counter() - t0
    trace("b_mapped", arr.nbytes)
    if check:
        with cupy.cuda.Device(1):
            got = cupy.asarray(m)
            want = cupy.empty_like(got)
            cupy.cuda.runtime.memcpyPeer(want.data.ptr, 1, arr.data.ptr, 0, arr.nbytes)
            assert bool((got == want).all()), f"{key}: the bytes differ"
            del got, want
    m.unmap()
    return dt


def remote_into(ca, cb, key, arr, buf, check=False) -> float:
    """Seconds for b to copy a value a has just rewritten into a registered buffer of the
    reader's on GPU 1 (a pull into b, then b's copy into the buffer: no MAP, no import)."""
    ca.set_from_device(key, arr)
    t0 = time.perf_counter()
    n = cb.get_to_buffer(key, buf)
    dt = time.perf_counter() - t0
    assert n == arr.nbytes
    if check:
        with cupy.cuda.Device(1):
            want = cupy.empty(arr.nbytes, dtype=cupy.uint8)
            cupy.cuda.runtime.memcpyPeer(want.data.ptr, 1, arr.data.ptr, 0, arr.nbytes)
            assert bool((buf.array[: arr.nbytes] == want).all()), f"{key}: the bytes differ"
            m = cb.map(key)  # the replica b kept as it filled the buffer
            assert bool((cupy.asarray(m) == want).all()), f"{key}: b's replica differs"
            m.unmap()
            del want
    return dt


def concurrent_reads(writer, reader_url, dev, prefix, n, size, rounds) -> float:
    """GB/s of n clients of reader_url each MAPping its own size-byte value at once, just
    rewritten by writer from GPU dev (the median round of rounds)."""
    with cupy.cuda.Device(dev):
        vals = [cupy.random.randint(0, 255, size, dtype=cupy.uint8) for _ in range(n)]
    walls = []
    for _ in range(rounds):
        for i in range(n):
            writer.set_from_device(f"{prefix}/{i}", vals[i])
        readers = [gpukv.Client(reader_url) for _ in range(n)]
        go = threading.Barrier(n + 1)
        errs = []

        def read(i):
            go.wait()
            try:
                readers[i].map(f"{prefix}/{i}").unmap()
            except Exception as e:  # noqa: BLE001
                errs.append(e)
        ts = [threading.Thread(target=read, args=(i,)) for i in range(n)]
        for t in ts:
            t.start()
        go.wait()
        trace("c_round", n)  # the concurrent readers' rounds, for nixl_trace-style timelines
        t0 = time.perf_counter()
        for t in ts:
            t.join()
        walls.append(time.perf_counter() - t0)
        trace("c_done", n)
        for r in readers:
            r.close()
        assert not errs, errs
    del vals
    return n * size / statistics.median(walls) / 1e9


def procs_reads(writer, reader_url, dev, prefix, n, size, rounds, how="map", each=1,
                walls=None) -> float:
    """concurrent_reads with n processes instead of threads (bench/proc_readers.py); how:
    "get_to_device" copies each value into a buffer of the reader's on GPU 1 instead; each > 1:
    every process reads that many values one after another per round."""
    with cupy.cuda.Device(dev):
        vals = [cupy.random.randint(0, 255, size, dtype=cupy.uint8) for _ in range(n)]
    if each == 1:
        keys = [f"{prefix}/{i}" for i in range(n)]
        flat = keys
    else:
        keys = [[f"{prefix}/{i}/{k}" for k in range(each)] for i in range(n)]
        flat = [k for ks in keys for k in ks]
    try:
        return proc_readers.concurrent_reads(
            lambda j: writer.set_from_device(flat[j], vals[j % n]), reader_url, keys, size,
            rounds, warm="warm", how=how, dev=1, walls=walls)
    finally:
        del vals


def homed_on(writer, node, prefix) -> str:
    """A new key (written by writer) whose home is node (a client of it)."""
    for i in range(500):
        key, before = f"{prefix}/{i}", node.info("cluster")["keys_homed"]
        writer.set(key, b"x")
        if node.info("cluster")["keys_homed"] > before:
            return key
    raise AssertionError("no key homed there")


def by_home(ca, cb, arr, rounds) -> None:
    """Steady reads of one size by b of keys a owns, homed on a (b asks a where the value is,
    and guesses a meanwhile: docs/cluster.md) and homed on b (b knows it from its records)."""
    line = []
    for where, node in (("a", ca), ("b", cb)):
        key = homed_on(ca, node, f"home{where}")
        for _ in range(2):
            remote_read(ca, cb, key, arr, check=True)
        i0 = cb.info("cluster")
        ms = statistics.median(remote_read(ca, cb, key, arr) for _ in range(rounds)) * 1e3
        i1 = cb.info("cluster")
        guesses = i1.get("nixl_head_guesses", 0) - i0.get("nixl_head_guesses", 0)
        missed = i1.get("nixl_guesses_missed", 0) - i0.get("nixl_guesses_missed", 0)
        line.append(f"homed on {where} {ms:.3f} ms ({guesses} guesses, {missed} missed)")
    print(f"\n{arr.nbytes >> 20} MiB steady reads by the key's home (median of {rounds}): "
          + "; ".join(line))


def readers_only(ca, cb, hows, rounds, each=1) -> None:
    """--readers: 16 reader processes of 64 MiB values a owns, read through b each way in hows,
    against the peer copy of 1 GiB; with the time counters of both nodes over each way (where a
    round's time goes: the owner's copies and writes, the reader's waits and copies). each > 1
    (--each): every process reads that many values one after another per round."""
    n, size = 16, 64 << 20
    with cupy.cuda.Device(1):  # each reader maps it once, untimed (its context, b's pool)
        cb.set_from_device("warm", cupy.ones(1 << 20, dtype=cupy.uint8))
    peer = peer_copy(n * size, rounds)
    keys = ("nixl_send_copy_us", "nixl_send_write_us", "nixl_stage_queue_us",
            "nixl_stage_reply_us", "nixl_pull_wait_us", "nixl_pull_copy_us", "nixl_pull_us",
            "nixl_pull_queue_us", "nixl_read_us", "nixl_reads", "nixl_fallbacks")
    print(f"\ncudaMemcpyPeerAsync of 1 GiB: {peer:.1f} GB/s")
    for how in hows:
        ia0, ib0 = ca.info("cluster"), cb.info("cluster")
        walls = []
        try:
            agg = procs_reads(ca, cb.url, 0, f"ro{how}", n, size, rounds, how=how, each=each,
                              walls=walls)
        except Exception as e:  # noqa: BLE001  (a line of its own: the rest still prints)
            print(f"16 reader processes, {how}: failed: {e!r}")
            continue
        ia1, ib1 = ca.info("cluster"), cb.info("cluster")
        d = {k: (ia1.get(k, 0) - ia0.get(k, 0), ib1.get(k, 0) - ib0.get(k, 0)) for k in keys}
        what = f", {each} values each one after another" if each > 1 else ""
        print(f"16 reader processes of 64 MiB{what}, {how}: {agg:.1f} GB/s aggregate "
              f"({agg / peer:.2f}x the peer copy); a/b over {rounds} rounds: "
              + ", ".join(f"{k[5:]} {va}/{vb}" for k, (va, vb) in d.items()))
        # Each round's figure against the peer copy, in order (the median above is of these).
        total = n * each * size
        print("  rounds: " + " ".join(f"{total / w / 1e9 / peer:.2f}" for w in walls))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("daemon")
    ap.add_argument("nixl")
    ap.add_argument("--sizes", default="1M,64M,1G")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--settle", type=float, default=0.0, help="ms between a write and the read")
    ap.add_argument("--nixl-only", action="store_true",
                    help="no TCP cluster, no first read or concurrent readers (tuning runs)")
    ap.add_argument("--by-home", default="", metavar="SIZE",
                    help="steady reads of SIZE by where the key's home is (a or b)")
    ap.add_argument("--readers", default="", metavar="HOW[,HOW]",
                    help="only 16 reader processes of 64 MiB values through NIXL, each way named "
                         "(map, get_to_device, get_to_buffer), and b's and a's time counters "
                         "over them (tuning runs: no TCP cluster, no --sizes)")
    ap.add_argument("--each", type=int, default=1, metavar="K",
                    help="with --readers: each process reads K values one after another per "
                         "round (16 x K x 64 MiB a round: reads overlapping each other's ends; K GiB "
                         "on each node, twice that on the reader while its old replicas stay: "
                         "K <= 8 within the nodes' 20G)")
    a = ap.parse_args()
    if a.readers:
        a.nixl_only, a.sizes = True, ""
    global SETTLE_S
    SETTLE_S = a.settle / 1e3
    root, token, etcd = bench_env("gkv-nixlbench-")
    procs, clients = [], {}
    try:
        for cluster, nixl in (("nixl", a.nixl),) + ((("tcp", "off"),) if not a.nixl_only else ()):
            pa, sa = start(root, a.daemon, etcd, cluster, "a", 0, token, nixl)
            pb, sb = start(root, a.daemon, etcd, cluster, "b", 1, token, nixl)
            procs += [pa, pb]
            clients[cluster] = (gpukv.Client(f"unix:{sa}"), gpukv.Client(f"unix:{sb}"))
        for cluster, (ca, cb) in clients.items():
            wait_for(lambda: cb.info("cluster")["members"] == 2, 30, f"{cluster}: two members")
        wait_for(lambda: clients["nixl"][1].info("cluster").get("member0", "").endswith("plane=nixl")
                 or clients["nixl"][1].info("cluster").get("member1", "").endswith("plane=nixl"),
                 30, "the NIXL plane between a and b")
        time.sleep(2)  # past the settling after the join
        info = clients["nixl"][1].info("cluster")
        print(f"\nnode b (nixl): data_plane {info['data_plane']} ({info['data_plane_why']}), "
              f"nixl {info['nixl_version']}, arena {info['nixl_arena_bytes'] >> 20} MiB, "
              f"chunk {info['nixl_chunk_bytes'] >> 20} MiB")
        for k in ("member0", "member1"):
            print(f"  {k}: {info[k]}")
        if a.readers:
            readers_only(*clients["nixl"], a.readers.split(","), a.rounds, max(1, a.each))
            return 0
        with cupy.cuda.Device(0):
            arrs = {s: cupy.random.randint(0, 255, size_arg(s), dtype=cupy.uint8)
                    for s in a.sizes.split(",")}
        # The first read from a new peer (b has read nothing from a yet), 64 MiB; the client
        # maps a value of b's own first (its first MAP imports b's memory pool).
        ca, cb = clients["nixl"]
        with cupy.cuda.Device(1):
            cb.set_from_device("warm", cupy.ones(1 << 20, dtype=cupy.uint8))
        cb.map("warm").unmap()
        with cupy.cuda.Device(0):
            first_arr = cupy.random.randint(0, 255, 64 << 20, dtype=cupy.uint8)
        if not a.nixl_only:
            first = remote_read(ca, cb, "first", first_arr, check=True)
            # The second read: a peer b knows now, but memory new to b's pool as for the first
            # (the first replica is still held while the second is pulled); from the third on,
            # the replica alternates between two allocations b keeps.
            second = remote_read(ca, cb, "first", first_arr)
            steady = statistics.median(remote_read(ca, cb, "first", first_arr)
                                       for _ in range(a.rounds))
            print(f"\nfirst read from a new peer, 64 MiB: {first * 1e3:.2f} ms; steady state "
                  f"{steady * 1e3:.2f} ms ({first / steady:.2f}x); the second read (the same "
                  f"peer, new memory again) {second * 1e3:.2f} ms ({second / steady:.2f}x)")
        # A buffer of the reader's on GPU 1, registered once, for reads the daemon copies into.
        with cupy.cuda.Device(1):
            into_arr = cupy.empty(max(v.nbytes for v in arrs.values()), dtype=cupy.uint8)
        into = clients["nixl"][1].register_buffer(into_arr)
        print("\n| size | cudaMemcpyPeerAsync GB/s | remote read via NIXL GB/s | via TCP GB/s "
              "| NIXL / peer copy | NIXL / TCP |")
        print("|---|---|---|---|---|---|")
        for s, arr in arrs.items():
            size = arr.nbytes
            peer = peer_copy(size, a.rounds)
            res = {}
            before = clients["nixl"][1].info("cluster")
            for cluster, (ca, cb) in clients.items():
                remote_read(ca, cb, f"v{s}", arr, check=True)
                n = a.rounds if cluster == "nixl" or size < (1 << 30) else 2
                res[cluster] = size / statistics.median(
                    remote_read(ca, cb, f"v{s}", arr) for _ in range(n)) / 1e9
                remote_read(ca, cb, f"v{s}", arr, check=True)  # a steady read's bytes too
            tcp = res.get("tcp", float("nan"))
            # Without the MAP: the pull alone (b's own count of its time), and b's MAP of a
            # value it has just written itself (what the MAP costs anyway).
            ib0 = before
            ib1 = clients["nixl"][1].info("cluster")
            pulled = (ib1["nixl_read_bytes"] - ib0["nixl_read_bytes"]) / max(
                1, ib1["nixl_pull_us"] - ib0["nixl_pull_us"]) / 1e3
            cb_ = clients["nixl"][1]
            with cupy.cuda.Device(1):
                loc = cupy.asarray(arr.get()) if size <= (64 << 20) else cupy.ones(size, cupy.uint8)
            local = size / statistics.median(remote_read(cb_, cb_, f"l{s}", loc)
                                             for _ in range(a.rounds)) / 1e9
            del loc
            print(f"| {s} | {peer:.1f} | {res['nixl']:.1f} | {tcp:.2f} | "
                  f"{res['nixl'] / peer:.2f} | {res['nixl'] / tcp:.1f} |")
            print(f"|   (the pull alone {pulled:.1f} GB/s = {pulled / peer:.2f}x the peer copy; "
                  f"SET then MAP on b alone {local:.1f} GB/s) | | | | | |")
            ca, cb = clients["nixl"]
            remote_into(ca, cb, f"i{s}", arr, into, check=True)
            got = size / statistics.median(remote_into(ca, cb, f"i{s}", arr, into)
                                           for _ in range(a.rounds)) / 1e9
            remote_into(ca, cb, f"i{s}", arr, into, check=True)
            print(f"|   (into a registered buffer on GPU 1, get_to_buffer: {got:.1f} GB/s = "
                  f"{got / peer:.2f}x the peer copy) | | | | | |")
            ia, ib = clients["nixl"][0].info("cluster"), clients["nixl"][1].info("cluster")
            print(f"|   (so far, us: owner copies {ia['nixl_send_copy_us']}, owner writes "
                  f"{ia['nixl_send_write_us']}, owner's STAGEs waiting for a worker "
                  f"{ia['nixl_stage_queue_us']} and for the loop's reply "
                  f"{ia['nixl_stage_reply_us']}, reader waits {ib['nixl_pull_wait_us']}, reader "
                  f"copies {ib['nixl_pull_copy_us']}, pulls {ib['nixl_pull_us']}, pulls waiting "
                  f"for a worker {ib['nixl_pull_queue_us']}, reads from request to replica "
                  f"{ib['nixl_read_us']}) | | | | | |")
        if a.by_home:
            with cupy.cuda.Device(0):
                harr = cupy.random.randint(0, 255, size_arg(a.by_home), dtype=cupy.uint8)
            by_home(*clients["nixl"], harr, max(a.rounds, 9))
            del harr
        # 16 concurrent readers of 64 MiB values (1 GiB in all).
        if a.nixl_only:
            return 0
        ca, cb = clients["nixl"]
        n, size = 16, 64 << 20
        agg = concurrent_reads(ca, cb.url, 0, "conc", n, size, a.rounds)
        # The same readers of values b holds itself (no pull): what the clients' MAPs alone allow.
        local = concurrent_reads(cb, cb.url, 1, "lconc", n, size, a.rounds)
        peer = peer_copy(n * size, a.rounds)
        print(f"\n16 concurrent readers of 64 MiB (1 GiB in all) through NIXL: {agg:.1f} GB/s "
              f"aggregate; cudaMemcpyPeerAsync of 1 GiB {peer:.1f} GB/s ({agg / peer:.2f}x); "
              f"the same readers of values b holds: {local:.1f} GB/s")
        # The same as 16 processes (ranks, loader workers): threads of one process import
        # their mappings one after another in its one CUDA context (proc_readers.py).
        pagg = procs_reads(ca, cb.url, 0, "pconc", n, size, a.rounds)
        plocal = procs_reads(cb, cb.url, 1, "plconc", n, size, a.rounds)
        print(f"16 reader processes of 64 MiB through NIXL: {pagg:.1f} GB/s aggregate "
              f"({pagg / peer:.2f}x the peer copy); the same processes MAPping values b holds: "
              f"{plocal:.1f} GB/s")
        # Readers that copy into buffers of their own (get_to_device: libgpukv's own mappings,
        # whose imports it may hold across rounds, where a MAP's it never holds), and readers
        # with a registered buffer each (get_to_buffer: b copies each value into the reader's
        # memory itself, in its one context; no import or copy of the reader's). Beside each,
        # the same processes on values b holds itself: what their reads alone allow.
        for how, tag, what, local_what in (
                ("get_to_device", "g", "copying with get_to_device", "copying"),
                ("get_to_buffer", "r", "into registered buffers", "reading")):
            try:
                ragg = procs_reads(ca, cb.url, 0, f"{tag}conc", n, size, a.rounds, how=how)
                rlocal = procs_reads(cb, cb.url, 1, f"{tag}lconc", n, size, a.rounds, how=how)
                print(f"16 reader processes of 64 MiB {what} through NIXL: {ragg:.1f} GB/s "
                      f"aggregate ({ragg / peer:.2f}x the peer copy); the same processes "
                      f"{local_what} values b holds: {rlocal:.1f} GB/s ({rlocal / peer:.2f}x)")
            except Exception as e:  # noqa: BLE001  (a line of its own: the rest still prints)
                print(f"16 reader processes with {how}: failed: {e!r}")
        for cluster, (ca, cb) in clients.items():
            i = cb.info("cluster")
            print(f"{cluster} node b: nixl_reads {i['nixl_reads']}, nixl_read_bytes "
                  f"{i['nixl_read_bytes']}, nixl_fallbacks {i['nixl_fallbacks']}, "
                  f"remote_reads {i['remote_reads']}, slots in use {i['nixl_slots_in_use']}, "
                  f"early frames {cb.info('clients')['key_waits_early']}, head starts "
                  f"{i.get('nixl_head_starts', '-')} ({i.get('nixl_heads_dropped', '-')} dropped), "
                  f"pulls landed in registered buffers too {i.get('nixl_tees', '-')}, GETs into "
                  f"buffers {cb.info('clients').get('gets_into', '-')}")
    finally:
        for ca, cb in clients.values():
            ca.close()
            cb.close()
        for p in procs:
            p.terminate()
            p.wait(30)
        etcd.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
