"""The CUDA paths on the GPU machine (GKV_TEST_BACKEND=cuda): CuPy and PyTorch views of mapped
values, writes from device arrays, processes sharing values, and zarr with GPU buffers."""

from __future__ import annotations

import gc
import os
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import gpukv
from conftest import BACKEND, leases, wait_for

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(BACKEND != "cuda", reason="needs the cuda backend (GKV_TEST_BACKEND=cuda)"),
]


@pytest.fixture
def gc_client(daemon):
    with gpukv.Client(daemon.url) as c:
        if c.zero_copy != "cuda-pool-fd":
            pytest.skip(f"no CUDA zero-copy: {c.server_info['zero_copy_why']}")
        c.flush()
        yield c


def run_py(code: str, *args: str, env: dict | None = None, timeout: float = 120) -> str:
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args],
                         capture_output=True, text=True, timeout=timeout,
                         env={**os.environ, **(env or {})})
    assert out.returncode == 0, out.stderr
    return out.stdout


def test_cupy_and_torch_view_the_value_in_place(gc_client):
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    data = np.random.default_rng(1).integers(0, 256, 1 << 20, dtype=np.uint8)
    gc_client.set("v", data, meta="dtype=u1")
    with gc_client.map("v") as m:
        assert m.on_device and m.device >= 0 and m.gpu_uuid.startswith("GPU-")
        assert hasattr(m, "__cuda_array_interface__")
        assert m.__dlpack_device__() == (2, m.device)
        a = cp.asarray(m)
        assert a.data.ptr == m.ptr and a.nbytes == m.nbytes
        assert int(a.sum()) == int(data.sum())
        t = torch.as_tensor(m, device="cuda")
        assert t.data_ptr() == m.ptr
        d = torch.from_dlpack(m)
        assert d.data_ptr() == m.ptr and d.device.type == "cuda"
        assert int(d.sum()) == int(data.sum())
        assert cp.from_dlpack(m).data.ptr == m.ptr
        with pytest.raises(BufferError):
            memoryview(m)
        del a, t, d
    with gc_client.map("v", offset=1000, length=24) as m:
        assert cp.asnumpy(cp.asarray(m)).tobytes() == data[1000:1024].tobytes()


def test_create_and_seal_from_torch_and_cupy(gc_client):
    torch = pytest.importorskip("torch")
    cp = pytest.importorskip("cupy")
    src = torch.arange(4096, dtype=torch.float32, device="cuda")
    with gc_client.create("t", src.numel() * 4, meta="dtype=f4") as w:
        assert w.writable
        torch.from_dlpack(w).copy_(src.view(torch.uint8))
    # seal() waited for the device before publishing.
    assert gc_client.get("t") == src.cpu().numpy().tobytes()
    assert gc_client.get_value("t").meta == b"dtype=f4"
    w = gc_client.create("c", 1024)
    cp.asarray(w)[:] = 7
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        cp.asarray(w)[:512] = 9
    w.seal(stream=stream)  # waits for that stream only
    assert gc_client.get("c") == b"\x09" * 512 + b"\x07" * 512
    with pytest.raises(RuntimeError):
        with gc_client.create("gone", 64) as w:
            raise RuntimeError("producer failed")
    assert gc_client.exists("gone") == 0
    # Rewrites of a key reuse its spare: every version reads back right.
    for i in range(10):
        with gc_client.create("rw", 1 << 16) as w:
            cp.asarray(w)[:] = i
        assert gc_client.get("rw", suffix=4) == bytes([i]) * 4


def test_a_seal_that_does_not_wait_hands_off_to_another_process(gc_client, daemon):
    """A producer's stream writes the value and seals it without waiting; a consumer process
    waiting for the key maps it and reads the right bytes, never an incomplete value."""
    cp = pytest.importorskip("cupy")
    consumer = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent("""
            import sys, cupy as cp, gpukv
            with gpukv.Client(sys.argv[1]) as c:
                for i in range(20):
                    with c.map(f"h/{i}", wait=30) as m:
                        a = cp.asarray(m).view(cp.float32)
                        assert float(a.min()) == float(a.max()) == i, (i, float(a.min()))
            print("ok")
        """), daemon.url], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stream = cp.cuda.Stream(non_blocking=True)
    for i in range(20):
        w = gc_client.create(f"h/{i}", 4 << 20)
        with stream:
            a = cp.asarray(w).view(cp.float32)
            cp.cuda.runtime.memsetAsync(a.data.ptr, 0, a.nbytes, stream.ptr)
            a[:] = i  # the last write on the stream before the counter
        w.seal(stream=stream, wait=False)
    out, err = consumer.communicate(timeout=120)
    assert consumer.returncode == 0 and out.strip() == "ok", err
    stream.synchronize()


def test_device_arrays_in_and_out(gc_client):
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    x = cp.random.random(1000).astype(cp.float32)
    gc_client.set("x", x)
    assert gc_client.get("x") == x.get().tobytes()
    t = torch.randn(77, 3, device="cuda")
    gc_client.set_from_device("t", t, meta=b"f4[77,3]")
    assert gc_client.get("t") == t.cpu().numpy().tobytes()
    out = cp.zeros(4000, dtype=cp.uint8)
    assert gc_client.get_to_device("x", out) == 4000
    assert out.get().tobytes() == x.get().tobytes()
    part = torch.zeros(100, dtype=torch.uint8, device="cuda")
    assert gc_client.get_to_device("x", part, offset=10, length=100) == 100
    assert part.cpu().numpy().tobytes() == x.get().tobytes()[10:110]
    assert gc_client.get_to_device("x", part, length=0) == 0
    with pytest.raises(gpukv.NoSpace):
        gc_client.get_to_device("x", cp.zeros(10, dtype=cp.uint8))
    with pytest.raises(ValueError):
        gc_client.set("bad", x[::2])  # not contiguous
    with pytest.raises(gpukv.NotFound):
        gc_client.get_to_device("nope", out)
    big = cp.arange(64 << 20, dtype=cp.uint8)
    gc_client.set("big", big)
    back = cp.empty_like(big)
    gc_client.get_to_device("big", back)
    assert bool((back == big).all())


def own_client(fresh_daemon):
    """A client of a daemon of the test's own: its lease counts are the test's alone."""
    d = fresh_daemon()
    c = gpukv.Client(d.url)
    if c.zero_copy != "cuda-pool-fd":
        pytest.skip(f"no CUDA zero-copy: {c.server_info['zero_copy_why']}")
    return d, c


def test_many_device_arrays_stored_together(gc_client):
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    sizes = [0, 1, 4096, 65539, 1 << 20, 4 << 20] * 5
    arrays = {f"many/{i:02d}": cp.random.randint(0, 256, n, dtype=cp.uint8)
              for i, n in enumerate(sizes)}
    arrays["many/torch"] = torch.arange(1000, dtype=torch.float32, device="cuda")
    gc_client.set_many_from_device(arrays)
    for k, a in arrays.items():
        want = a.cpu().numpy().tobytes() if isinstance(a, torch.Tensor) else a.get().tobytes()
        assert gc_client.get(k) == want
    # NX: the existing keys refused (the first named raises), a new one stored, none changed.
    new = cp.full(100, 7, dtype=cp.uint8)
    with pytest.raises(gpukv.Exists, match="item 1"):
        gc_client.set_many_from_device([("many/new", new), ("many/03", new)], nx=True)
    assert gc_client.get("many/new") == new.get().tobytes()
    assert gc_client.get("many/03") == arrays["many/03"].get().tobytes()
    with pytest.raises(TypeError):
        gc_client.set_many_from_device({"many/host": np.zeros(4, dtype=np.uint8)})
    gc_client.set_many_from_device({}, ex=10)


def test_zarr_writes_of_gpu_chunks_are_stored_together(gc_client, daemon, monkeypatch):
    cp = pytest.importorskip("cupy")
    zarr = pytest.importorskip("zarr")
    from gpukv.zarr import GpukvStore

    calls = {"chunks": 0, "batches": 0}
    orig = gpukv.Client._set_many_from_device

    def counting(self, keys, ptrs, nbytes, **kw):
        calls["chunks"] += sum("/c/" in k for k in keys)
        calls["batches"] += 1
        return orig(self, keys, ptrs, nbytes, **kw)

    monkeypatch.setattr(gpukv.Client, "_set_many_from_device", counting)
    want = cp.arange(512 * 512, dtype="f4").reshape(512, 512)
    with zarr.config.enable_gpu():
        z = zarr.create_array(GpukvStore(daemon.url, root="gw"), shape=(512, 512),
                              chunks=(128, 128), dtype="f4", compressors=None, overwrite=True)
        z[:] = want
        z[:128] = want[:128] + 1  # rewrites of four chunks
    assert calls["chunks"] == 20
    assert calls["batches"] < 20  # the chunks zarr writes together are stored together
    with zarr.config.enable_gpu():
        got = zarr.open_array(GpukvStore(daemon.url, root="gw", read_only=True), mode="r")[:]
    want[:128] += 1
    assert bool((got == want).all())


def test_registered_buffers_take_values_from_the_daemon(gc_client):
    cp = pytest.importorskip("cupy")
    torch = pytest.importorskip("torch")
    data = np.random.default_rng(3).integers(0, 256, 3 << 20, dtype=np.uint8)
    gc_client.set("rb/a", data)
    gc_client.set("rb/s", b"hello")
    out = cp.full(4 << 20, 0xEE, dtype=cp.uint8)
    with gc_client.register_buffer(out) as buf:
        assert buf.nbytes == out.nbytes and buf.array is out
        assert gc_client.get_to_buffer("rb/a", buf) == data.nbytes
        assert bool((out[: data.nbytes].get() == data).all())  # there when the call returns
        assert gc_client.get_to_buffer("rb/a", buf, at=10, offset=5, length=100) == 100
        assert bool((out[10:110].get() == data[5:105]).all())
        assert gc_client.get_to_buffer("rb/s", buf, at=out.nbytes - 5) == 5
        assert out[-5:].get().tobytes() == b"hello"
        with pytest.raises(gpukv.NoSpace):
            gc_client.get_to_buffer("rb/a", buf, at=2 << 20)
        with pytest.raises(gpukv.NotFound):
            gc_client.get_to_buffer("rb/none", buf)
        assert gc_client.info()["registered_buffers"] == 1
    assert gc_client.info()["registered_buffers"] == 0
    with pytest.raises(ValueError):
        gc_client.get_to_buffer("rb/a", buf)
    # A PyTorch tensor (its caching allocator's cudaMalloc blocks), through DLPack or CAI.
    t = torch.zeros(1 << 20, dtype=torch.uint8, device="cuda")
    tb = gc_client.register_buffer(t)
    assert gc_client.get_to_buffer("rb/a", tb, length=1 << 20) == 1 << 20
    assert bool((t.cpu().numpy() == data[: 1 << 20]).all())
    tb.drop()
    tb.drop()
    with pytest.raises(TypeError):
        gc_client.register_buffer(bytearray(16))


@pytest.mark.parametrize("how", ["ptr", "view"])
def test_a_kernel_reading_a_mapping_at_unmap_never_sees_the_memory_reused(fresh_daemon, how):
    # A kernel of this process reads a mapped value on a stream of its own (through m.ptr, or a
    # CuPy view of the mapping) and notes each byte it sees change; the mapping ends while the
    # kernel still runs (unmap(), or the view and the object dropped), then the key is deleted
    # and other keys are written (into the freed memory, on a daemon of the test's own). Taking
    # the pointer or a view guards the mapping (gkv_mapping_guard): the free of its import
    # waits for the device (the kernel ends once a thread sets its flag), so the kernel only
    # ever saw the value's bytes. Until 2026-11-28 the free returned at once (cudaFree of an
    # imported pointer does not wait) and the kernel went on to see zeros, then another key's.
    import threading
    cp = pytest.importorskip("cupy")
    d, c = own_client(fresh_daemon)
    size = 4 << 20
    c.set("a", b"\x01" * size)
    m = c.map("a")
    cp.cuda.Device(m.device).use()
    view = cp.asarray(m) if how == "view" else None
    ptr = view.data.ptr if how == "view" else m.ptr
    watch = cp.RawKernel(r"""
        extern "C" __global__ void watch(const volatile unsigned char *v, volatile int *flag,
                                         int *out, int n) {
            int last = -1, cnt = 0;
            while (*flag == 0) {
                int x = v[0];
                if (x != last && cnt < n) { out[cnt++] = x; last = x; }
                __nanosleep(2000);
            }
            out[n] = cnt;
        }""", "watch")
    flag_mem = cp.cuda.alloc_pinned_memory(4)
    flag = np.frombuffer(flag_mem, dtype=np.int32, count=1)
    flag[0] = 0
    out = cp.zeros(17, dtype=cp.int32)
    s = cp.cuda.Stream(non_blocking=True)
    with s:
        watch((1,), (1,), (cp.uint64(ptr), cp.uint64(flag_mem.ptr), out, cp.int32(16)))
    order = []

    def release():
        time.sleep(0.3)
        order.append("flag")
        flag[0] = 1
    t = threading.Thread(target=release)
    t.start()
    try:
        m.unmap()
        del view, m  # with a view the lease ends here, sent before the next request
        c.delete("a")
        order.append("deleted")
        for i in range(16):
            c.set(f"b{i}", bytes([2 + i]) * size)
    finally:
        flag[0] = 1
        t.join()
    s.synchronize()
    got = out.get()
    assert list(got[:got[16]]) == [1], f"bytes seen at the old mapping: {list(got[:got[16]])}"
    assert order == ["flag", "deleted"], order
    c.close()


def test_views_outlive_unmap(fresh_daemon):
    cp = pytest.importorskip("cupy")
    d, c = own_client(fresh_daemon)
    c.set("v", b"\x05" * 4096)
    assert leases(d.url) == 0
    m = c.map("v")
    a = cp.asarray(m)
    m.unmap()
    with pytest.raises(ValueError):
        m.ptr
    c.set("v", b"\x06" * 4096)  # overwrite: the view keeps the old value
    c.delete("v")
    assert int(a.sum()) == 5 * 4096
    assert leases(d.url) == 1
    del a, m
    gc.collect()
    c.ping()
    assert wait_for(lambda: leases(d.url) == 0), leases(d.url)
    c.close()


def test_a_torch_writer_and_eight_cupy_readers_in_other_processes(gc_client, daemon):
    pytest.importorskip("cupy")
    pytest.importorskip("torch")
    writer = """
        import sys, torch, gpukv
        c = gpukv.Client(sys.argv[1])
        g = torch.Generator(device="cuda").manual_seed(7)
        for i in range(16):
            t = torch.randint(0, 256, (1 << 20,), dtype=torch.uint8, device="cuda", generator=g)
            with c.create(f"shared/{i}", t.numel()) as w:
                torch.from_dlpack(w).copy_(t)
            print(int(t.sum()))
    """
    sums = [int(s) for s in run_py(writer, daemon.url).split()]
    assert len(sums) == 16
    reader = """
        import sys, cupy, gpukv
        c = gpukv.Client(sys.argv[1])
        out = []
        for i in range(16):
            with c.map(f"shared/{i}") as m:
                a = cupy.asarray(m)
                assert a.data.ptr == m.ptr
                out.append(int(a.sum()))
                del a
        print(" ".join(map(str, out)))
    """
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(reader), daemon.url],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(8)]
    for p in procs:
        out, err = p.communicate(timeout=180)
        assert p.returncode == 0, err
        assert [int(s) for s in out.split()] == sums


def test_sigkill_of_a_python_process_holding_mappings(fresh_daemon):
    pytest.importorskip("cupy")
    daemon, gc_client = own_client(fresh_daemon)
    for i in range(1000):
        gc_client.set(f"k/{i}", b"v" * 256)
    base = leases(daemon.url)
    holder = """
        import sys, cupy, gpukv
        c = gpukv.Client(sys.argv[1])
        keep = [cupy.asarray(c.map(f"k/{i}")) for i in range(1000)]
        print("ready", flush=True)
        sys.stdin.read()
    """
    p = subprocess.Popen([sys.executable, "-c", textwrap.dedent(holder), daemon.url],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    assert leases(daemon.url) >= base + 1000
    os.kill(p.pid, signal.SIGKILL)
    p.wait()
    assert wait_for(lambda: leases(daemon.url) == base, timeout=5), leases(daemon.url)
    assert gc_client.get("k/999") == b"v" * 256
    gc_client.close()


def test_a_process_that_cannot_see_the_gpu_gets_a_reason(gc_client, daemon):
    gc_client.set("v", b"visible")
    code = """
        import sys, gpukv
        c = gpukv.Client(sys.argv[1])
        assert c.get("v") == b"visible"
        try:
            c.map("v")
        except gpukv.NotSupported as e:
            print("NotSupported:", e)
    """
    out = run_py(code, daemon.url, env={"CUDA_VISIBLE_DEVICES": ""})
    assert out.startswith("NotSupported:") and "GPU" in out


def test_zarr_with_gpu_buffers_across_processes(gc_client, daemon, monkeypatch):
    cp = pytest.importorskip("cupy")
    zarr = pytest.importorskip("zarr")
    from gpukv.zarr import GpukvStore

    writer = """
        import sys, cupy, zarr
        from gpukv.zarr import GpukvStore
        with zarr.config.enable_gpu():
            z = zarr.create_array(GpukvStore(sys.argv[1], root="gz"), shape=(512, 512),
                                  chunks=(128, 128), dtype="f4", compressors=None,
                                  overwrite=True)
            z[:] = cupy.arange(512 * 512, dtype="f4").reshape(512, 512)
    """
    run_py(writer, daemon.url)
    calls = {"map": 0, "batches": 0, "get": 0}
    orig_map_many, orig_get = gpukv.Client._map_many, gpukv.Client.get

    def counting_map_many(self, keys, ranges):
        calls["map"] += sum("/c/" in k for k in keys)  # chunk keys: gz/c/0/1
        calls["batches"] += 1
        return orig_map_many(self, keys, ranges)

    def counting_get(self, key, *a, **kw):
        calls["get"] += "/c/" in key
        return orig_get(self, key, *a, **kw)

    monkeypatch.setattr(gpukv.Client, "_map_many", counting_map_many)
    monkeypatch.setattr(gpukv.Client, "get", counting_get)
    with zarr.config.enable_gpu():
        z = zarr.open_array(GpukvStore(daemon.url, root="gz", read_only=True), mode="r")
        got = z[:]
    assert isinstance(got, cp.ndarray)
    assert bool((got == cp.arange(512 * 512, dtype="f4").reshape(512, 512)).all())
    assert calls["map"] == 16  # every chunk mapped: the buffers are views of the values
    assert calls["batches"] < 16  # the chunks zarr reads together are mapped together
    assert calls["get"] == 0  # none through host memory (only metadata is)
