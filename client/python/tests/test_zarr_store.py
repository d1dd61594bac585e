"""GpukvStore against zarr's own store test suite (zarr.testing.store.StoreTests), on a real
gpukvd, plus what the suite does not cover: roots, pickling into another process, arrays."""

from __future__ import annotations

import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

zarr = pytest.importorskip("zarr")

import gpukv  # noqa: E402
from gpukv.zarr import GpukvStore  # noqa: E402
from zarr.abc.store import OffsetByteRequest, RangeByteRequest, SuffixByteRequest  # noqa: E402
from zarr.core.buffer import cpu, default_buffer_prototype  # noqa: E402
from zarr.testing.store import StoreTests  # noqa: E402


class TestGpukvStore(StoreTests[GpukvStore, cpu.Buffer]):
    store_cls = GpukvStore
    buffer_cls = cpu.Buffer

    @pytest.fixture
    def store_kwargs(self, daemon):
        # Each test starts from an empty keyspace under its own root.
        with gpukv.Client(daemon.url) as c:
            c.flush()
        return {"url": daemon.url, "root": "t"}

    @pytest.fixture
    def raw(self, daemon):
        with gpukv.Client(daemon.url) as c:
            yield c

    async def set(self, store, key, value):
        with gpukv.Client(store.url) as c:
            c.set(store._key(key), value.to_bytes())

    async def get(self, store, key):
        with gpukv.Client(store.url) as c:
            return self.buffer_cls.from_bytes(c.get(store._key(key)))

    def test_store_repr(self, store):
        assert repr(store) == f"GpukvStore({store.url!r}, root='t', read_only=False)"
        assert str(store).startswith("gpukv://")

    def test_store_supports_writes(self, store):
        assert store.supports_writes

    def test_store_supports_listing(self, store):
        assert store.supports_listing


def _proto():
    return default_buffer_prototype()


async def test_roots_are_separate_and_clear_stays_in_its_root(daemon):
    with gpukv.Client(daemon.url) as c:
        c.flush()
        c.set("outside", b"keep me")
    a = await GpukvStore.open(daemon.url, root="a")
    b = await GpukvStore.open(daemon.url, root="/a/b/")
    assert b.root == "a/b"
    await a.set("x", cpu.Buffer.from_bytes(b"1"))
    await b.set("x", cpu.Buffer.from_bytes(b"2"))
    assert (await a.get("x", _proto())).to_bytes() == b"1"
    assert (await b.get("x", _proto())).to_bytes() == b"2"
    assert sorted([k async for k in a.list()]) == ["b/x", "x"]
    assert [k async for k in a.list_dir("")] == ["b", "x"]
    await b.clear()
    assert [k async for k in a.list()] == ["x"]
    await a.clear()
    with gpukv.Client(daemon.url) as c:
        assert list(c.keys()) == ["outside"]
    with pytest.raises(ValueError):
        GpukvStore(daemon.url, root="a/../b")


async def test_byte_requests_at_the_edges(daemon):
    s = await GpukvStore.open(daemon.url, root="edge")
    await s.set("k", cpu.Buffer.from_bytes(b"0123456789"))
    cases = {
        RangeByteRequest(2, 5): b"234",
        RangeByteRequest(3, 3): b"",       # empty range
        RangeByteRequest(8, 20): b"89",    # past the end: clamped
        RangeByteRequest(12, 20): b"",     # starts past the end
        OffsetByteRequest(10): b"",
        OffsetByteRequest(11): b"",
        SuffixByteRequest(0): b"",         # the last 0 bytes
        SuffixByteRequest(3): b"789",
        SuffixByteRequest(30): b"0123456789",
    }
    for rng, want in cases.items():
        assert (await s.get("k", _proto(), rng)).to_bytes() == want, rng
    assert await s.get("missing", _proto(), SuffixByteRequest(0)) is None
    got = await s.get_partial_values(_proto(), [("k", r) for r in cases] + [("missing", None)])
    assert [g.to_bytes() for g in got[:-1]] == list(cases.values())
    assert got[-1] is None
    with pytest.raises(ValueError):
        await s.get("k", _proto(), RangeByteRequest(-1, 2))


async def test_set_if_not_exists_is_atomic_and_read_only_refuses(daemon):
    s = await GpukvStore.open(daemon.url, root="nx")
    await s.set_if_not_exists("k", cpu.Buffer.from_bytes(b"first"))
    await s.set_if_not_exists("k", cpu.Buffer.from_bytes(b"second"))
    assert (await s.get("k", _proto())).to_bytes() == b"first"
    ro = s.with_read_only(True)
    for op in (ro.set("k", cpu.Buffer.from_bytes(b"x")), ro.delete("k"), ro.clear(),
               ro.delete_dir(""), ro.set_if_not_exists("z", cpu.Buffer.from_bytes(b"x"))):
        with pytest.raises(ValueError, match="read-only"):
            await op
    assert (await ro.get("k", _proto())).to_bytes() == b"first"
    assert await ro.getsize("k") == 5
    assert await ro.getsize_prefix("") == 5
    with pytest.raises(FileNotFoundError):
        await ro.getsize("nope")


def test_pickled_store_reconnects_in_another_process(daemon):
    s = GpukvStore(daemon.url, root="pk")
    s.set_sync("k", cpu.Buffer.from_bytes(b"from the parent"))
    blob = pickle.dumps(s)
    code = textwrap.dedent("""
        import pickle, sys
        from zarr.core.buffer import cpu
        s = pickle.loads(sys.stdin.buffer.read())
        print(s.get_sync("k").to_bytes().decode())
        s.set_sync("k2", cpu.Buffer.from_bytes(b"from the child"))
    """)
    out = subprocess.run([sys.executable, "-c", code], input=blob, capture_output=True,
                         check=True)
    assert out.stdout.decode().strip() == "from the parent"
    assert s.get_sync("k2").to_bytes() == b"from the child"
    assert pickle.loads(blob) == s


def test_a_zarr_array_written_by_one_process_is_read_by_another(daemon):
    writer = textwrap.dedent(f"""
        import numpy as np, zarr
        from gpukv.zarr import GpukvStore
        group = zarr.open_group(GpukvStore({daemon.url!r}, root="arrays"), mode="w")
        z = group.create_array("shared", shape=(300, 200), chunks=(64, 64), dtype="f4",
                               attributes={{"made_by": "writer"}})
        z[:] = np.arange(300 * 200, dtype="f4").reshape(300, 200)
    """)
    subprocess.run([sys.executable, "-c", writer], check=True)
    store = GpukvStore(daemon.url, root="arrays/shared", read_only=True)
    z = zarr.open_array(store, mode="r")
    assert z.shape == (300, 200) and z.attrs["made_by"] == "writer"
    np.testing.assert_array_equal(z[:], np.arange(300 * 200, dtype="f4").reshape(300, 200))
    np.testing.assert_array_equal(z[10:20, 190:], np.arange(300 * 200, dtype="f4")
                                  .reshape(300, 200)[10:20, 190:])
    assert z.nbytes_stored() > 0
    # A group and its listing through the store.
    g = zarr.open_group(GpukvStore(daemon.url, root="arrays"), mode="r")
    assert "shared" in list(g.array_keys())


def test_a_forked_child_gets_its_own_connection(daemon):
    import os

    s = GpukvStore(daemon.url, root="fork")
    s.set_sync("k", cpu.Buffer.from_bytes(b"parent"))
    parent_client = s.client
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        ok = 0
        try:
            ok = s.get_sync("k").to_bytes() == b"parent" and s.client is not parent_client
            s.set_sync("k2", cpu.Buffer.from_bytes(b"child"))
        except BaseException:  # noqa: BLE001
            ok = 0
        os.write(w, b"1" if ok else b"0")
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"1"
    assert s.client is parent_client
    assert s.get_sync("k2").to_bytes() == b"child"


def test_stores_of_one_daemon_share_the_process_connection(daemon):
    from gpukv.zarr import disconnect

    a = GpukvStore(daemon.url, root="share/a")
    b = GpukvStore(daemon.url, root="share/b")
    other = GpukvStore(daemon.url, root="share/c", lease_cache=0)  # other settings
    assert a.client is b.client
    assert other.client is not a.client
    shared = a.client
    a.set_sync("k", cpu.Buffer.from_bytes(b"a"))
    a.close()  # the store ends; the connection stays for b
    assert not shared.closed
    assert b.get_sync("k") is None and b.client is shared
    again = GpukvStore(daemon.url, root="share/a")  # a store made again finds it
    assert again.client is shared
    assert again.get_sync("k").to_bytes() == b"a"
    disconnect()  # closes the process's shared connections ...
    assert shared.closed and other.client is not shared
    assert again.get_sync("k").to_bytes() == b"a"  # ... and a store used again reconnects
    assert again.client is not shared and not again.client.closed
    assert again.client is b.client


async def _mapped_store(daemon, root: str, n: int, size: int, **kw) -> GpukvStore:
    """A store whose reads are views (a host daemon sharing its arena), with chunks c/0..c/n-1
    of size bytes, each all bytes i."""
    s = await GpukvStore.open(daemon.url, root=root, **kw)
    if s.client.zero_copy != "host-memfd":
        pytest.skip("needs a daemon that shares its arena (--host-zero-copy yes)")
    for i in range(n):
        await s.set(f"c/{i}", cpu.Buffer.from_bytes(bytes([i]) * size))
    return s


async def test_reads_issued_together_are_mapped_together(daemon, monkeypatch):
    import asyncio
    import gc

    from conftest import leases

    s = await _mapped_store(daemon, "batch", 20, 100)
    base = leases(daemon.url)
    calls = []
    orig = gpukv.Client._map_many

    def spy(self, keys, ranges):
        calls.append(len(keys))
        return orig(self, keys, ranges)

    monkeypatch.setattr(gpukv.Client, "_map_many", spy)
    reads = [s.get(f"c/{i}", _proto()) for i in range(20)]
    reads += [s.get("missing", _proto()), s.get("c/0", _proto(), RangeByteRequest(200, 300)),
              s.get("c/1", _proto(), SuffixByteRequest(10))]
    got = await asyncio.gather(*reads)
    assert calls == [23]  # one pipelined round trip for all of them
    assert [g.to_bytes() for g in got[:20]] == [bytes([i]) * 100 for i in range(20)]
    assert got[20] is None
    assert got[21].to_bytes() == b""
    assert got[22].to_bytes() == b"\x01" * 10
    assert leases(daemon.url) == base + 21  # the buffers are views: their leases are held
    del got, reads
    await asyncio.sleep(0)  # asyncio keeps the awaited results until this task yields once
    gc.collect()
    s.client.ping()
    assert leases(daemon.url) == base


@pytest.mark.parametrize("lease_cache", [None, 0])
async def test_chunks_read_keep_their_leases_for_the_next_read(daemon, lease_cache):
    """By default the store keeps the leases (and imports) of the chunks zarr dropped, up to
    1 GiB and 1024 chunks, so that reading them again imports nothing; lease_cache=0 leaves
    libgpukv's 8."""
    import asyncio
    import gc

    from conftest import leases, wait_for

    n = 40  # more than the binding's batch of deferred ends (32)
    kw = {} if lease_cache is None else {"lease_cache": lease_cache}
    s = await _mapped_store(daemon, f"keep{lease_cache}", n, 100, **kw)
    s.client.ping()
    base = leases(daemon.url)
    got = await asyncio.gather(*[s.get(f"c/{i}", _proto()) for i in range(n)])
    assert [g.to_bytes() for g in got] == [bytes([i]) * 100 for i in range(n)]
    del got
    await asyncio.sleep(0)
    gc.collect()
    # The dropped chunks' mappings end at the store's next read, into the cache; that read
    # renews c/0's cached lease (with the default cache) or gets a new one.
    b = await s.get("c/0", _proto())
    assert b.to_bytes() == bytes([0]) * 100
    if lease_cache is None:  # all kept: 39 cached, c/0's renewed
        assert wait_for(lambda: leases(daemon.url) == base + n), leases(daemon.url)
    else:  # 8 cached (c/0's lease among them or not), c/0's mapping
        assert wait_for(lambda: leases(daemon.url) <= base + 9), leases(daemon.url)
    del b
    gc.collect()
    s.client.ping()  # anything but a read ends the cache
    assert wait_for(lambda: leases(daemon.url) == base), leases(daemon.url)
    # The store's close ends what its reads left in the cache of the connection it shares.
    got = await asyncio.gather(*[s.get(f"c/{i}", _proto()) for i in range(n)])
    del got
    await asyncio.sleep(0)
    gc.collect()
    await s.get("c/0", _proto())  # the dropped mappings go into the cache
    gc.collect()
    assert leases(daemon.url) > base
    shared = s.client
    s.close()
    assert wait_for(lambda: leases(daemon.url) == base), leases(daemon.url)
    assert not shared.closed


async def test_a_batch_that_fails_or_loses_a_reader_fails_no_other(daemon, monkeypatch):
    import asyncio
    import gc

    from conftest import leases

    s = await _mapped_store(daemon, "batchfail", 4, 10)
    base = leases(daemon.url)
    # A cancelled read: the others still get their bytes, and its mapping ends.
    tasks = [asyncio.ensure_future(s.get(f"c/{i}", _proto())) for i in range(4)]
    await asyncio.sleep(0)  # every read has joined the batch
    tasks[1].cancel()
    done = await asyncio.gather(*tasks, return_exceptions=True)
    assert isinstance(done[1], asyncio.CancelledError)
    assert [done[i].to_bytes() for i in (0, 2, 3)] == [bytes([i]) * 10 for i in (0, 2, 3)]
    del done, tasks
    await asyncio.sleep(0)
    gc.collect()
    s.client.ping()
    assert leases(daemon.url) == base
    # A batch whose MAPs fail: every read in it raises that error.

    def broken(self, keys, ranges):
        raise gpukv.ConnectionError("gone")

    monkeypatch.setattr(gpukv.Client, "_map_many", broken)
    got = await asyncio.gather(*[s.get(f"c/{i}", _proto()) for i in range(3)],
                               return_exceptions=True)
    assert [type(g) for g in got] == [gpukv.ConnectionError] * 3
