"""gpukv.Client against a real gpukvd: every command, bad input, and a daemon that dies or
stops answering."""

from __future__ import annotations

import errno
import os
import pickle
import signal
import threading
import time

import numpy as np
import pytest

import gpukv
from gpukv import _gpukv

from conftest import BACKEND, wait_for


def test_hello_and_ping(client, daemon):
    assert client.ping() is True
    info = client.server_info
    assert info["protocol"] == 2  # the newest: libgpukv asks for it
    assert info["backend"] in ("host", "cuda")
    assert info["max_meta"] == 4096
    assert client.url == daemon.url
    assert not client.closed
    assert daemon.url in repr(client)


def test_set_and_get_every_bytes_like_value(client):
    values = {
        "b": b"bytes",
        "ba": bytearray(b"bytearray"),
        "mv": memoryview(b"xmemoryviewx")[1:-1],
        "np": np.arange(16, dtype=np.uint32),
        "s": "str as utf-8: \u00e9",
        "empty": b"",
    }
    for k, v in values.items():
        client.set(k, v)
    assert client.get("b") == b"bytes"
    assert client.get("ba") == b"bytearray"
    assert client.get("mv") == b"memoryview"
    assert client.get("np") == np.arange(16, dtype=np.uint32).tobytes()
    assert client.get("s") == "str as utf-8: \u00e9".encode()
    assert client.get("empty") == b""
    assert client.get(b"b") == b"bytes"  # bytes keys name the same key
    big = os.urandom(3 << 20)
    client.set("big", big)
    assert client.get("big") == big


def test_ranges(client):
    client.set("r", b"abcdefghij")
    assert client.get("r", offset=2, length=3) == b"cde"
    assert client.get("r", offset=7) == b"hij"
    assert client.get("r", suffix=4) == b"ghij"
    assert client.get("r", suffix=40) == b"abcdefghij"
    assert client.get("r", offset=8, length=100) == b"ij"
    assert client.get("r", offset=10) == b""
    # Asking for no bytes gets none, and still checks the key and the offset.
    assert client.get("r", suffix=0) == b""
    assert client.get("r", offset=3, length=0) == b""
    with pytest.raises(gpukv.NotFound):
        client.get("missing", suffix=0)
    with pytest.raises(gpukv.RangeError):
        client.get("r", offset=11, length=0)
    with pytest.raises(gpukv.RangeError):
        client.get("r", offset=11)
    v = client.get_value("r", suffix=0)
    assert (v.data, v.size, v.offset) == (b"", 10, 10)
    with pytest.raises(ValueError):
        client.get("r", offset=1, suffix=2)
    with pytest.raises(ValueError):
        client.get("r", offset=-1)
    with pytest.raises(TypeError):
        client.get("r", length="3")


def test_get_value_metadata_and_get_into(client):
    client.set("m", b"0123456789", meta=b"dtype=u1;shape=10")
    v = client.get_value("m", offset=4, length=2)
    assert v == (b"45", b"dtype=u1;shape=10", 10, 4)
    assert (v.data, v.meta, v.size, v.offset) == (b"45", b"dtype=u1;shape=10", 10, 4)
    client.set("nometa", b"x", meta="")
    assert client.get_value("nometa").meta is None
    buf = bytearray(16)
    assert client.get_into("m", buf) == 10
    assert bytes(buf[:10]) == b"0123456789"
    arr = np.zeros(4, dtype=np.uint8)
    assert client.get_into("m", arr, suffix=4) == 4
    assert arr.tobytes() == b"6789"
    with pytest.raises(gpukv.NoSpace) as e:
        client.get_into("m", bytearray(4))
    assert "10 bytes" in str(e.value)
    with pytest.raises(TypeError):
        client.get_into("m", b"read-only bytes")
    assert client.ping()  # the connection is still in step


def test_nx_xx_and_limits(client):
    client.set("k", b"1")
    with pytest.raises(gpukv.Exists) as e:
        client.set("k", b"2", nx=True)
    assert e.value.code == -3 and e.value.name == "EXISTS"
    with pytest.raises(gpukv.NotFound):
        client.set("new", b"2", xx=True)
    client.set("new", b"3", nx=True)
    client.set("new", b"4", xx=True)
    assert client.get("new") == b"4"
    with pytest.raises(ValueError):
        client.set("k", b"x", nx=True, xx=True)
    with pytest.raises(gpukv.TooBig):
        client.set("k", b"x", meta=b"m" * 4097)
    with pytest.raises(gpukv.TooBig):
        client.set("k" * 5000, b"x")
    assert client.get("k") == b"1"


def test_bad_arguments_raise_before_any_request(client):
    before = client.info("stats")["total_commands_processed"]
    with pytest.raises(ValueError):
        client.set("", b"x")
    with pytest.raises(TypeError):
        client.set(42, b"x")
    with pytest.raises(TypeError):
        client.set("k", 42)
    with pytest.raises(TypeError):
        client.set("k", object())
    with pytest.raises(ValueError):
        client.set("k", np.arange(10)[::2])  # not contiguous
    with pytest.raises(TypeError):
        client.get(None)
    with pytest.raises(TypeError):
        client.set_from_device("k", b"host bytes")
    with pytest.raises(TypeError):
        client.create("k", "12")
    with pytest.raises(ValueError):
        client.create("k", -1)
    with pytest.raises(ValueError):
        client.mget(["a"], [slice(0, 1, 2)])
    with pytest.raises(ValueError):
        list(client.list(delimiter="//"))
    after = client.info("stats")["total_commands_processed"]
    assert after == before + 1  # only the INFO itself


def test_mget(client):
    client.set("a", b"0123456789")
    client.set("b", b"xyz")
    got = client.mget(["a", "missing", "b"])
    assert got == [b"0123456789", None, b"xyz"]
    got = client.mget(["a", "a", "a", "a", "b"],
                      [slice(2, 5), slice(-3, None), (None, None, 0), slice(4, 4), None])
    assert got == [b"234", b"789", b"", b"", b"xyz"]
    assert client.mget([]) == []
    with pytest.raises(gpukv.RangeError):
        client.mget(["b"], [slice(9, None)])
    keys = [f"many/{i}" for i in range(5000)]
    for k in keys[:10]:
        client.set(k, k)
    got = client.mget(keys)  # two requests
    assert len(got) == 5000
    assert got[:10] == [k.encode() for k in keys[:10]]
    assert got[10:] == [None] * 4990


def test_exists_delete_sizes(client):
    for i in range(5):
        client.set(f"d/{i}", b"x" * i)
    assert client.exists("d/0", "d/1", "nope") == 2
    assert client.exists("d/0", "d/0") == 2
    assert client.getsize("d/4") == 4
    assert client.getsize_prefix("d/") == 10
    assert client.count_prefix("d/") == 5
    assert client.getsize_prefix("") == 10
    with pytest.raises(gpukv.NotFound):
        client.getsize("nope")
    assert client.delete("d/0", "nope") == 1
    assert client.delete() == 0
    many = [f"x/{i}" for i in range(4200)]
    for k in many[:3]:
        client.set(k, b"v")
    assert client.exists(*many) == 3
    assert client.delete(*many) == 3
    client.flush()
    assert client.count_prefix("") == 0


def test_list(client):
    for k in ["a/1", "a/2", "a/b/3", "a/b/4", "a/c/5", "b/6"]:
        client.set(k, k)
    entries = list(client.list("a/", page=2))
    assert [e.key for e in entries] == ["a/1", "a/2", "a/b/3", "a/b/4", "a/c/5"]
    assert entries[0] == gpukv.ListEntry("a/1", 3, False)
    folded = list(client.list("a/", delimiter="/"))
    assert [(e.key, e.is_dir) for e in folded] == [
        ("a/1", False), ("a/2", False), ("a/b/", True), ("a/c/", True)]
    assert list(client.keys("b")) == ["b/6"]
    assert list(client.keys("zzz")) == []
    # Keys that are not UTF-8 come back as str that names the same bytes again.
    client.set(b"raw/\xff\xfe", b"v")
    (k,) = list(client.keys("raw/"))
    assert client.get(k) == b"v"
    # Other calls may come between two steps of a listing.
    it = client.list("a/", page=1)
    assert next(it).key == "a/1"
    client.set("a/0", b"late")
    assert [e.key for e in it] == ["a/2", "a/b/3", "a/b/4", "a/c/5"]


def test_info(client):
    info = client.info()
    assert info["backend"] in ("host", "cuda")
    assert isinstance(info["connected_clients"], int)
    mem = client.info("memory")
    assert "used_bytes" in mem and "connected_clients" not in mem
    assert client.info("nosuchsection") == {}


def test_metrics_are_valid_prometheus_text(client):
    """client.metrics() is what --metrics-listen serves; prometheus_client's own parser reads
    it, and the histogram of a command agrees with its count."""
    parser = pytest.importorskip("prometheus_client.parser")
    client.set("metrics/a", b"x")
    client.get("metrics/a")
    types, samples = {}, {}
    for fam in parser.text_string_to_metric_families(client.metrics()):
        types[fam.name] = fam.type
        for s in fam.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    assert types["gpukv_command_duration_seconds"] == "histogram"
    assert types["gpukv_commands"] == "counter"
    sets = samples[("gpukv_commands_total", (("command", "set"),))]
    assert sets >= 1
    assert samples[("gpukv_command_duration_seconds_count", (("command", "set"),))] == sets
    assert samples[("gpukv_command_duration_seconds_bucket",
                    (("command", "set"), ("le", "+Inf")))] == sets
    assert samples[("gpukv_keys", ())] >= 1


def test_errors_cover_every_code():
    seen = set()
    for code, name, text in _gpukv.ERRORS:
        cls = gpukv._errors.CLASSES[code]
        assert cls.code == code
        e = cls(text)
        assert e.name == name and str(e) == text
        assert issubclass(cls, gpukv.Error)
        seen.add(code)
    assert seen == set(gpukv._errors.CLASSES)
    assert issubclass(gpukv.NotFound, KeyError)
    assert issubclass(gpukv.ConnectionError, ConnectionError)
    assert issubclass(gpukv.TimeoutError, TimeoutError)
    assert issubclass(gpukv.InvalidArgument, ValueError)


def test_closed_client_raises(daemon):
    c = gpukv.Client(daemon.url)
    c.close()
    c.close()  # idempotent
    assert c.closed
    with pytest.raises(gpukv.ConnectionClosed):
        c.ping()
    with pytest.raises(gpukv.ConnectionClosed):
        c.get("k")
    with pytest.raises(gpukv.ConnectionClosed):
        c.server_info
    with gpukv.Client(daemon.url) as c2:
        pass
    assert c2.closed
    with pytest.raises(TypeError):
        pickle.dumps(gpukv.Client(daemon.url))


def test_connect_errors():
    t0 = time.monotonic()
    with pytest.raises(gpukv.ConnectionError) as e:
        gpukv.Client("unix:/nonexistent/gpukv.sock")
    assert "unix:/nonexistent/gpukv.sock" in str(e.value)
    # The system's reason, as the CLI shows it, and as OSError's errno (issue 32).
    assert "No such file or directory" in str(e.value)
    assert e.value.errno == errno.ENOENT
    with pytest.raises(gpukv.InvalidArgument):
        gpukv.Client("http://example")
    with pytest.raises(TypeError):
        gpukv.Client(7)
    with pytest.raises(ValueError):
        gpukv.Client(timeout=-1)
    assert time.monotonic() - t0 < 1


def test_dead_daemon_raises_at_once(fresh_daemon):
    d = fresh_daemon()
    c = gpukv.Client(d.url)
    c.set("k", b"v")
    os.kill(d.pid, signal.SIGKILL)
    d.proc.wait()
    t0 = time.monotonic()
    with pytest.raises(gpukv.ConnectionError):
        c.get("k")
    with pytest.raises(gpukv.ConnectionClosed):
        c.ping()
    assert time.monotonic() - t0 < 1
    c.close()


def test_stopped_daemon_times_out_and_the_gil_is_free_meanwhile(fresh_daemon):
    d = fresh_daemon()
    c = gpukv.Client(d.url, timeout=0.5)
    c.set("k", b"v")
    os.kill(d.pid, signal.SIGSTOP)
    ticks = 0
    done = threading.Event()
    errors: list[BaseException] = []

    def call() -> None:
        try:
            c.get("k")
        except BaseException as e:  # noqa: BLE001 - the test checks which
            errors.append(e)
        done.set()

    t0 = time.monotonic()
    th = threading.Thread(target=call)
    th.start()
    while not done.is_set():
        ticks += 1  # this thread runs while the other waits for the server
        time.sleep(0.001)
    th.join()
    elapsed = time.monotonic() - t0
    assert isinstance(errors[0], gpukv.TimeoutError), errors
    assert 0.4 < elapsed < 2
    assert ticks > 50
    with pytest.raises(gpukv.ConnectionClosed):
        c.ping()
    os.kill(d.pid, signal.SIGCONT)
    c.close()


def test_one_client_shared_by_threads(client):
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(200):
                k = f"t{t}/{i}"
                client.set(k, k * 3)
                assert client.get(k) == (k * 3).encode()
        except BaseException as e:  # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    assert client.count_prefix("t") == 1600


def test_a_forked_child_must_connect_again(client):
    client.set("k", b"v")
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            client.get("k")
        except gpukv.NotSupported:
            code = 0
        except BaseException:  # noqa: BLE001
            code = 2
        os.write(w, bytes([code]))
        os._exit(0)
    os.close(w)
    got = os.read(r, 1)
    os.waitpid(pid, 0)
    assert got == b"\x00"
    assert client.get("k") == b"v"  # the parent's connection is untouched


def test_pool_threads_and_asyncio(daemon):
    import asyncio

    with gpukv.ClientPool(daemon.url, size=3) as pool:
        errors: list[BaseException] = []

        def work(t: int) -> None:
            try:
                for i in range(50):
                    with pool.client() as c:
                        c.set(f"p/{t}/{i}", b"v")
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        threads = [threading.Thread(target=work, args=(t,)) for t in range(6)]
        for th in threads:
            th.start()
        for th in threads:
            th.join()
        assert not errors
        assert pool._count <= 3

        async def main() -> list:
            sets = [pool.run(lambda c, i=i: c.set(f"a/{i}", str(i))) for i in range(20)]
            await asyncio.gather(*sets)
            return await asyncio.gather(*[pool.run(gpukv.Client.get, f"a/{i}") for i in range(20)])

        assert asyncio.run(main()) == [str(i).encode() for i in range(20)]
        assert pool.call(gpukv.Client.count_prefix, "p/") == 300
    with pytest.raises(gpukv.ConnectionError):
        pool.call(gpukv.Client.ping)


def test_tcp_has_no_zero_copy(daemon):
    with gpukv.Client(daemon.tcp_url) as c:
        assert c.zero_copy == "none"
        c.set("tcp", b"over tcp")
        assert c.get("tcp") == b"over tcp"
        with pytest.raises(gpukv.NotSupported) as e:
            c.map("tcp")
        assert "Unix socket" in str(e.value) or "unix" in str(e.value).lower()


def test_deadlines(client):
    client.set("ttl/a", b"x", px=60000)
    assert 50000 < client.pttl("ttl/a") <= 60000
    assert 50 < client.ttl("ttl/a") <= 60
    assert client.persist("ttl/a") is True
    assert client.pttl("ttl/a") is None
    assert client.persist("ttl/a") is False
    assert client.expire("ttl/a", 0.05) is True
    assert client.pexpire("ttl/none", 100) is False
    time.sleep(0.1)
    assert client.exists("ttl/a") == 0
    with pytest.raises(gpukv.NotFound):
        client.pttl("ttl/a")
    client.set("ttl/b", b"y", ex=30)
    client.set("ttl/b", b"z")  # an overwrite without a ttl drops the deadline
    assert client.pttl("ttl/b") is None
    with pytest.raises(ValueError):
        client.set("ttl/c", b"v", ex=1, px=1000)
    with pytest.raises(ValueError):
        client.set("ttl/c", b"v", px=0)


def test_delete_prefix(client):
    for i in range(3000):
        client.set(f"dp/{i}", b"v")
    client.set("dq", b"w")
    assert client.delete_prefix("dp/") == 3000
    assert client.count_prefix("dp/") == 0
    assert client.exists("dq") == 1
    # An empty prefix would delete every key: flush() says that; this deletes nothing.
    for everything in ("", b""):
        with pytest.raises(ValueError, match="flush"):
            client.delete_prefix(everything)
    assert client.exists("dq") == 1


def test_not_found_names_the_key(client):
    for call in (lambda k: client.get(k), lambda k: client.getsize(k),
                 lambda k: client.pttl(k), lambda k: client.get_into(k, bytearray(4))):
        with pytest.raises(gpukv.NotFound) as e:
            call("no/such/key")
        assert e.value.key == "no/such/key"
        assert "no/such/key" in str(e.value)
        assert isinstance(e.value, KeyError)
    with pytest.raises(gpukv.NotFound) as e:
        client.get(b"bin\x00ary")
    assert e.value.key == b"bin\x00ary"
    assert "bin\\x00ary" in str(e.value)


@pytest.mark.skipif(BACKEND != "host", reason="two host arenas stand for two GPUs")
def test_values_on_two_gpus(fresh_daemon):
    d = fresh_daemon("--devices", "0,1", maxmemory="8M,8M")
    with gpukv.Client(d.url) as c:
        assert c.server_info["gpus"] == ["HOST-0", "HOST-1"]
        c.set("a", b"x" * 5000, gpu=1)
        c.set("b", b"y" * 100, gpu=0)
        assert c.locate("a") == (5000, 1)
        assert c.locate("b") == (100, 0)
        with pytest.raises(gpukv.InvalidArgument):
            c.set("c", b"z", gpu=2)
        assert c.move("a", 0) is True
        assert c.move("a", 0) is False
        assert c.locate("a") == (5000, 0)
        assert c.get("a") == b"x" * 5000
        with pytest.raises(gpukv.NotFound):
            c.move("nope", 1)


def test_values_moved_to_the_host_tier_come_back(fresh_daemon):
    d = fresh_daemon("--tier-host", "8M", "--maxmemory-policy", "allkeys-lru", maxmemory="2M")
    with gpukv.Client(d.url) as c:
        vals = {f"t{i}": bytes([i]) * (256 << 10) for i in range(32)}  # 4x the GPU
        for k, v in vals.items():
            c.set(k, v)
        tiers = [c.tier(k) for k in vals]
        assert tiers.count("host") == 24 and tiers.count("gpu") == 8, tiers
        for k, v in vals.items():  # from where they are: GETs do not bring them up
            assert c.get(k) == v
        assert c.info("tiers")["promoted_keys"] == 0
        assert [c.tier(k) for k in vals] == tiers
        low = tiers.index("host")  # the coldest moved first, but not one held by a copy then
        with c.map(f"t{low}") as m:  # a mapping does
            assert m.size == 256 << 10
        assert c.tier(f"t{low}") == "gpu"
        assert c.info("tiers")["promoted_keys"] == 1
        assert c.info("tiers")["tier_host_used"] <= 8 << 20
        with pytest.raises(gpukv.NotFound):
            c.tier("nope")


def test_save_needs_a_snapshot_dir(fresh_daemon, tmp_path):
    d = fresh_daemon()
    with gpukv.Client(d.url) as c:
        with pytest.raises(gpukv.NotSupported):
            c.save()
    d2 = fresh_daemon("--snapshot-dir", str(tmp_path / "snaps"))
    with gpukv.Client(d2.url) as c:
        c.set("k", b"v")
        c.save()
        assert wait_for(lambda: (tmp_path / "snaps").exists() and
                        any(p.name.endswith(".snap") for p in (tmp_path / "snaps").iterdir()))


def test_reads_wait_for_a_key_another_client_writes(client, daemon):
    """get/get_value/get_into/get_to_device/map with wait=: the value once another client
    writes it; TimedOut (the connection goes on) when nobody does; bad waits refused."""

    def later():
        time.sleep(0.2)
        with gpukv.Client(daemon.url) as other:
            for k, v in (("w/get", b"arrived"), ("w/value", b"meta'd"), ("w/into", b"12345"),
                         ("w/dev", b"device"), ("w/map", b"mapped")):
                other.set(k, v)
                time.sleep(0.02)

    t = threading.Thread(target=later)
    t.start()
    assert client.get("w/get", wait=5) == b"arrived"
    assert client.get_value("w/value", wait=5).data == b"meta'd"
    buf = bytearray(5)
    assert client.get_into("w/into", buf, wait=5) == 5 and bytes(buf) == b"12345"
    out = bytearray(6)
    assert client.get_to_device("w/dev", out, wait=5) == 6 and bytes(out) == b"device"
    with client.map("w/map", wait=5) as m:
        assert m.nbytes == 6 and (m.on_device or bytes(m) == b"mapped")
    t.join()
    t0 = time.monotonic()
    with pytest.raises(gpukv.TimeoutError):
        client.get("w/never", wait=0.15)
    assert 0.1 < time.monotonic() - t0 < 3
    assert client.ping() and client.get("w/get", wait=0.001) == b"arrived"  # goes on
    assert int(client.info("clients")["key_waits_timed_out"]) >= 1
    for bad in (0, -1, 3601, float("nan")):
        with pytest.raises(ValueError):
            client.get("w/get", wait=bad)
    for bad in ("1", True, b"1"):
        with pytest.raises(TypeError):
            client.get("w/get", wait=bad)
    with pytest.raises(ValueError):
        client.map("w/get", wait=0)


def test_reads_wait_for_a_newer_version(fresh_daemon, client):
    """--key-versions: last_version, Mapping.version and Event.version name a value's version;
    after= waits for a newer one (get, get_value, get_into, get_to_device, map)."""
    d = fresh_daemon("--key-versions", "yes", "--host-zero-copy", "yes")
    with gpukv.Client(d.url) as c, c.watch("n/") as w:
        c.set("n/k", b"one")
        assert c.get("n/k") == b"one"
        v1 = c.last_version
        assert v1 > 0 and w.get(5).version == v1
        with c.map("n/k") as m:
            assert m.version == v1

        def later(value):
            time.sleep(0.2)
            with gpukv.Client(d.url) as other:
                other.set("n/k", value)

        def into(v):
            buf = bytearray(5)
            assert c.get_into("n/k", buf, wait=5, after=v) == 5
            return bytes(buf)

        def to_device(v):
            out = bytearray(5)
            assert c.get_to_device("n/k", out, wait=5, after=v) == 5
            return bytes(out)

        got = []
        for i, read in enumerate((lambda v: c.get("n/k", wait=5, after=v),
                                  lambda v: c.get_value("n/k", wait=5, after=v).data,
                                  into, to_device)):
            before = c.last_version
            t = threading.Thread(target=later, args=(b"new-%d" % i,))
            t.start()
            got.append(read(before))  # not the value there now: the next one
            t.join()
            assert c.last_version > before
        assert got == [b"new-0", b"new-1", b"new-2", b"new-3"], got
        t = threading.Thread(target=later, args=(b"mapped",))
        t.start()
        with c.map("n/k", wait=5, after=c.last_version) as m:
            assert m.version > v1 and (m.on_device or bytes(m) == b"mapped")
        t.join()
        # Events name the same versions, in order.
        versions = [e.version for e in iter(lambda: w.get(0.2), None)]
        assert versions == sorted(versions) and len(versions) == 5, versions
        with pytest.raises(gpukv.TimeoutError):
            c.get("n/k", wait=0.1, after=c.last_version)
        for bad in (-1, 2**64):
            with pytest.raises(ValueError):
                c.get("n/k", wait=1, after=bad)
        with pytest.raises(TypeError):
            c.get("n/k", wait=1, after="1")
        with pytest.raises(ValueError):
            c.get("n/k", after=1)  # after needs a wait
    # A daemon without --key-versions names none and refuses after.
    client.set("n/k", b"x")
    assert client.get("n/k") == b"x" and client.last_version == 0
    with pytest.raises(gpukv.NotSupported):
        client.get("n/k", wait=1, after=0)


def test_watch_sees_each_change_under_its_prefix_in_order(client):
    with client.watch("kv/") as w:
        assert isinstance(w, gpukv.Watch) and w.seq >= 0
        client.set("kv/a", b"123")
        client.set("other", b"x")  # not under the prefix
        client.set("kv/b", b"4567", px=50)
        client.delete("kv/a")
        events = [w.get(5) for _ in range(4)]  # kv/b expires on its own
        assert [(e.kind, e.key, e.size) for e in events] == [
            ("set", "kv/a", 3), ("set", "kv/b", 4), ("delete", "kv/a", 0),
            ("expire", "kv/b", 0)]
        seqs = [e.seq for e in events]
        assert seqs == sorted(seqs) and seqs[0] > w.seq
        assert w.get(0.05) is None  # nothing else came; the watch goes on
        client.flush()
        ev = w.get(5)
        assert (ev.kind, ev.key, ev.size) == ("flush", "", 0) and ev.seq > seqs[-1]
    assert w.closed
    assert client.ping()  # the client that made it was never the watcher


def test_a_local_watch_of_a_daemon_alone_is_the_same_watch(client):
    # local=True asks for this daemon's own changes: on a daemon alone, every change.
    with client.watch("lw/", local=True) as w:
        client.set("lw/a", b"12")
        client.delete("lw/a")
        events = [w.get(5) for _ in range(2)]
        assert [(e.kind, e.key, e.size) for e in events] == [("set", "lw/a", 2),
                                                             ("delete", "lw/a", 0)]
        assert all(e.node == "" for e in events)  # a daemon alone: no other member


def test_watch_iterates_and_async_iterates(client, daemon):
    import asyncio

    def produce():
        time.sleep(0.1)
        with gpukv.Client(daemon.url) as other:
            for i in range(5):
                other.set(f"it/{i}", b"v" * i)

    w = client.watch("it/")
    t = threading.Thread(target=produce)
    t.start()
    got = []
    for ev in w:
        got.append((ev.kind, ev.key, ev.size))
        if len(got) == 5:
            break
    t.join()
    w.close()
    assert got == [("set", f"it/{i}", i) for i in range(5)]

    async def consume():
        w2 = client.watch("as/")
        threading.Thread(target=lambda: (time.sleep(0.1), gpukv.Client(daemon.url).set(
            "as/1", b"z"))).start()
        async for ev in w2:
            w2.close()
            return ev

    ev = asyncio.run(consume())
    assert (ev.kind, ev.key, ev.size) == ("set", "as/1", 1)


def test_a_watch_that_falls_behind_raises_overflow(fresh_daemon):
    d = fresh_daemon("--watch-buffer", "64K")
    with gpukv.Client(d.url) as c, c.watch("o/") as w:
        for i in range(20000):
            c.set("o/" + "k" * 200 + str(i), b"v")
        n = 0
        with pytest.raises(gpukv.Overflow):
            while w.get(5) is not None:
                n += 1
        assert 0 < n < 20000
        assert c.info("clients")["watches_overflowed"] == 1
