"""Zero-copy through gpukv.Mapping on the host backend (the daemon's shared arena): views,
lifetimes, create/seal/abort, misuse. The same code paths serve CUDA memory on the cuda
backend (test_gpu.py)."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import gpukv
from conftest import BACKEND, leases, wait_for

pytestmark = pytest.mark.skipif(BACKEND != "host", reason="host-memory views (cuda: test_gpu.py)")


def test_map_shows_the_value_in_place(client):
    client.set("v", b"0123456789", meta="dtype=u1")
    with client.map("v") as m:
        assert isinstance(m, gpukv.Mapping)
        assert (m.nbytes, m.size, m.offset, len(m)) == (10, 10, 0, 10)
        assert m.on_device is False and m.device == -1 and m.gpu_uuid == ""
        assert m.meta == b"dtype=u1" and m.key == "v" and not m.writable
        assert m.ptr != 0 and m.lease > 0
        assert bytes(m) == b"0123456789"
        assert "10 bytes" in repr(m)
    with client.map("v", offset=2, length=3) as m:
        assert (bytes(m), m.offset, m.size) == (b"234", 2, 10)
    with client.map("v", suffix=4) as m:
        assert (bytes(m), m.offset) == (b"6789", 6)
    with pytest.raises(ValueError):
        client.map("v", length=0)
    with pytest.raises(gpukv.NotFound):
        client.map("nope")
    with pytest.raises(gpukv.RangeError):
        client.map("v", offset=11)


def test_views_are_read_only_and_keep_the_memory(client, daemon):
    client.set("v", b"abcdefgh")
    base = leases(daemon.url)
    m = client.map("v")
    arr = np.asarray(m)
    assert arr.dtype == np.uint8 and arr.tobytes() == b"abcdefgh"
    assert not arr.flags.writeable
    with pytest.raises(ValueError):
        arr[0] = 1
    mv = memoryview(m)
    assert mv.readonly
    with pytest.raises(TypeError):
        mv[0] = 1
    assert not hasattr(m, "__cuda_array_interface__")  # host memory
    assert m.__dlpack_device__() == (1, 0)
    dl = np.from_dlpack(m)
    assert dl.tobytes() == b"abcdefgh"
    m.unmap()
    # The object is closed, but the views still show the value: the lease waits for them.
    with pytest.raises(ValueError):
        m.ptr
    with pytest.raises(ValueError):
        m.__dlpack__()
    with pytest.raises(BufferError):
        memoryview(m)
    client.delete("v")
    client.set("other", b"XXXXXXXX" * 1000)  # reuse of freed memory must not show through
    assert arr.tobytes() == b"abcdefgh" and dl.tobytes() == b"abcdefgh"
    assert bytes(mv) == b"abcdefgh"
    assert leases(daemon.url) == base + 1
    del arr, mv, dl, m
    gc.collect()
    client.ping()  # the deferred end runs at the client's next call
    assert leases(daemon.url) == base


def test_unmap_without_views_is_immediate_and_idempotent(client, daemon):
    client.set("v", b"x" * 2_000_000)  # over 1 MiB: not parked by libgpukv
    base = leases(daemon.url)
    m = client.map("v")
    assert leases(daemon.url) == base + 1
    m.unmap()
    m.unmap()
    assert m.closed and "unmapped" in repr(m)
    assert leases(daemon.url) == base
    with pytest.raises(ValueError):
        len(m)
    with pytest.raises(ValueError):
        m.seal()
    with pytest.raises(ValueError):
        m.__enter__()


def test_a_forgotten_mapping_ends_with_its_object(client, daemon):
    client.set("v", b"y" * 2_000_000)
    base = leases(daemon.url)
    client.map("v")  # dropped at once
    client.ping()
    assert leases(daemon.url) == base


def test_create_seal_abort(client):
    with client.create("w", 6, meta=b"made") as w:
        assert w.writable and w.nbytes == 6
        np.asarray(w)[:] = np.frombuffer(b"sealed", dtype=np.uint8)
        assert client.exists("w") == 0  # invisible until sealed
    assert w.closed and "sealed" in repr(w)
    v = client.get_value("w")
    assert (v.data, v.meta) == (b"sealed", b"made")
    with pytest.raises(RuntimeError):
        with client.create("w2", 3) as w2:
            memoryview(w2)[:] = b"abc"
            raise RuntimeError("the producer failed")
    assert "aborted" in repr(w2)
    assert client.exists("w2") == 0
    w3 = client.create("w3", 2)
    with pytest.raises(ValueError):
        w3.unmap()
    w3.abort()
    w3.abort()  # idempotent
    with pytest.raises(ValueError):
        w3.seal()
    m = client.map("w")
    with pytest.raises(ValueError):
        m.seal()
    with pytest.raises(ValueError):
        m.abort()
    m.unmap()
    client.set("w", b"exists")
    with pytest.raises(gpukv.Exists):
        client.create("w", 2, nx=True)
    w4 = client.create("fresh", 2, nx=True)
    client.set("fresh", b"zz")  # someone else wins the key meanwhile
    memoryview(w4)[:] = b"me"
    with pytest.raises(gpukv.Exists):
        w4.seal()
    assert "discarded" in repr(w4)
    assert client.get("fresh") == b"zz"
    with client.create("zero", 0) as z:
        assert z.nbytes == 0 and bytes(z) == b""
    assert client.get("zero") == b""


def test_rewrites_of_a_key(client):
    # libgpukv double-buffers a key this connection rewrites; every version reads back right.
    for i in range(20):
        with client.create("rw", 4096) as w:
            np.asarray(w)[:] = i
        assert client.get("rw") == bytes([i]) * 4096


def test_close_waits_for_views(daemon):
    c = gpukv.Client(daemon.url)
    c.set("cv", b"still here")
    arr = np.asarray(c.map("cv"))
    plain = c.map("cv")
    c.close()
    assert plain.closed
    with pytest.raises(ValueError):
        plain.ptr
    # The arena stays mapped for the view; reading it is safe after close.
    assert arr.tobytes() == b"still here"
    with gpukv.Client(daemon.url) as other:
        before = other.info("clients")["connected_clients"]
        del arr
        gc.collect()
        assert wait_for(lambda: other.info("clients")["connected_clients"] == before - 1)


def test_zero_copy_misuse_over_tcp_and_without_zero_copy(daemon, fresh_daemon):
    with gpukv.Client(daemon.tcp_url) as c:
        with pytest.raises(gpukv.NotSupported):
            c.create("k", 4)
    plain = fresh_daemon("--host-zero-copy", "no")
    with gpukv.Client(plain.url) as c:
        assert c.zero_copy == "none"
        c.set("k", b"v")
        with pytest.raises(gpukv.NotSupported) as e:
            c.map("k")
        assert str(e.value)


def test_leases_come_back_when_a_holder_is_killed(daemon):
    with gpukv.Client(daemon.url) as c:
        for i in range(1000):
            c.set(f"kill/{i}", b"v" * 64)
        base = leases(daemon.url)
    holder = textwrap.dedent(f"""
        import sys, numpy, gpukv
        c = gpukv.Client({daemon.url!r})
        views = [numpy.asarray(c.map(f"kill/{{i}}")) for i in range(1000)]
        with gpukv.Client({daemon.url!r}) as probe:
            print(probe.info("leases")["leases"], flush=True)
        sys.stdin.read()
    """)
    p = subprocess.Popen([sys.executable, "-c", holder], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    held = int(p.stdout.readline())
    assert held >= base + 1000
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert wait_for(lambda: leases(daemon.url) == base, timeout=2)


def test_device_paths_with_host_buffers(client):
    client.set("h", b"host")
    out = bytearray(8)
    assert client.get_to_device("h", out) == 4  # a host buffer: get_into
    assert bytes(out[:4]) == b"host"


def test_deferred_ends_come_in_batches(client, daemon):
    for i in range(100):
        client.set(f"b/{i}", bytes([i]) * 2_000_000)  # not parked by libgpukv
    base = leases(daemon.url)
    most = 0
    for i in range(100):
        view = np.asarray(client.map(f"b/{i}"))  # a view: the end waits for the object
        assert view[0] == i
        del view
        most = max(most, leases(daemon.url) - base)
    # map leaves them pending, at most 32 at a time; any other call ends them all.
    assert 1 < most <= 33
    client.ping()
    assert leases(daemon.url) == base


def test_map_many(client, daemon):
    for i in range(10):
        client.set(f"mm/{i}", bytes([i]) * (i + 1))
    base = leases(daemon.url)
    before = client.info("stats")["total_commands_processed"]
    ms = client.map_many([f"mm/{i}" for i in range(10)] + ["mm/none"])
    assert client.info("stats")["total_commands_processed"] == before + 11 + 1  # + the INFO
    assert ms[-1] is None
    assert [bytes(m) for m in ms[:-1]] == [bytes([i]) * (i + 1) for i in range(10)]
    assert leases(daemon.url) == base + 10
    for m in ms[:-1]:
        m.unmap()
    del ms, m  # bytes(m) took a view: each lease ends with its object
    client.ping()
    assert leases(daemon.url) == base
    parts = client.map_many(["mm/9", "mm/9"], [slice(2, 5), slice(-1, None)])
    assert [(m.nbytes, m.offset) for m in parts] == [(3, 2), (1, 9)]
    for m in parts:
        m.unmap()
    with pytest.raises(gpukv.RangeError):
        client.map_many(["mm/1", "mm/2"], [None, slice(50, None)])
    client.ping()
    assert leases(daemon.url) == base  # the one mapped before the error was ended
    with pytest.raises(ValueError):
        client.map_many(["mm/1"], [slice(1, 1)])
    with pytest.raises(ValueError):
        client.map_many(["", "mm/1"])
    assert client.map_many([]) == []
    with gpukv.Client(daemon.tcp_url) as tcp:
        with pytest.raises(gpukv.NotSupported):
            tcp.map_many(["mm/1"])


def test_a_sized_lease_cache_renews_large_values(client, daemon):
    """set_lease_cache keeps large values' leases after unmap; map_many renews them."""
    with pytest.raises(ValueError):
        client.set_lease_cache(5000, 1)
    client.set_lease_cache(64, 8 << 20, 16 << 20)
    big = bytes(range(256)) * (8192 * 2)  # 4 MiB
    client.set("lc/a", big)
    client.set("lc/b", big[::-1])
    (m,) = client.map_many(["lc/a"])
    first = m.lease
    m.unmap()
    base = leases(daemon.url)
    ma, mb = client.map_many(["lc/a", "lc/b"])
    assert ma.lease == first  # renewed: no new lease, no new import
    assert bytes(ma) == big and bytes(mb) == big[::-1]
    ma.unmap()
    mb.unmap()
    del ma, mb  # bytes() took views: the mappings end (into the cache) with the objects
    gc.collect()
    assert leases(daemon.url) == base + 1  # lc/b's joined the cache
    client.set_lease_cache(0, 0)  # off: the cached leases end
    assert wait_for(lambda: leases(daemon.url) == base - 1), leases(daemon.url)


def test_the_zarr_store_sizes_its_lease_cache(daemon):
    from gpukv.zarr import GpukvStore

    with pytest.raises(ValueError):
        GpukvStore(daemon.url, lease_cache=-1)
    s = GpukvStore(daemon.url, root="lc", lease_cache=1 << 20)
    assert s.lease_cache == 1 << 20
    import pickle

    assert pickle.loads(pickle.dumps(s)).lease_cache == 1 << 20
    assert s.with_read_only(True).lease_cache == 1 << 20


def test_seal_without_waiting_publishes_for_a_waiting_reader(client, daemon):
    """seal(wait=False): published by the daemon (at once for host memory); a reader waiting
    for the key gets it; refused seals leave the mapping writable."""
    with gpukv.Client(daemon.url) as reader:
        w = client.create("async/1", 8)
        expect = bytes(8)  # a new value reads as zeros
        if not w.on_device:
            memoryview(w)[:] = expect = b"12345678"
        w.seal(wait=False)
        assert reader.get("async/1", wait=5) == expect
        nx = client.create("async/nx", 4, nx=True)
        with pytest.raises(gpukv.InvalidArgument):
            nx.seal(wait=False)  # NX is decided after the reply: refused, still writable
        assert nx.writable
        nx.seal()
        assert reader.exists("async/nx") == 1
        assert int(reader.info("clients")["async_seals_published"]) >= 1
