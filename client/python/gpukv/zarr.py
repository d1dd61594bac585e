"""GpukvStore: a zarr v3 store (zarr-python 3.x) over gpukvd, so that processes share chunks
kept in GPU memory: zarr's GpuMemoryStore as a service.

    import zarr, gpukv.zarr
    store = gpukv.zarr.GpukvStore("unix:/run/gpukv/gpukv.sock", root="datasets/a")
    z = zarr.create_array(store, shape=(4096, 4096), chunks=(512, 512), dtype="f4")

With zarr's GPU buffers (``zarr.config.enable_gpu()``) on a local connection to a cuda-backend
daemon, a read is zero-copy: the chunk buffer zarr gets *is* the value's memory in the daemon's
pool, mapped into this process (MAP; the value stays unchanged while zarr holds the buffer,
whatever other clients do, and its lease and import stay in the lease cache after, for the next
read of the chunk: see ``lease_cache``); host buffers are read the same way from
a host-backend daemon that shares its arena (``--host-zero-copy yes``). The reads zarr issues
together are mapped with one pipelined round trip. Zarr's codecs never write into a buffer they
read (they copy first, as they must for MemoryStore). A write of a GPU buffer goes from device
memory (CREATE, one device-to-device copy, SEAL), and the writes zarr issues together are
stored together: pipelined CREATEs, the copies waited for together, pipelined SEALs. Otherwise
bytes go through the socket.
"""

from __future__ import annotations

import asyncio
import os
import threading
import types
from collections.abc import AsyncIterator, Iterable
from typing import Any

import numpy as np
from zarr.abc.store import (
    ByteRequest,
    OffsetByteRequest,
    RangeByteRequest,
    Store,
    SuffixByteRequest,
)
from zarr.core.buffer import Buffer, BufferPrototype, default_buffer_prototype

from ._errors import CLASSES, Error, Exists, NotFound, RangeError
from ._gpukv import Mapping
from .client import _TEXTS as TEXTS
from .client import MAX_BATCH, Client

__all__ = ["GpukvStore", "disconnect"]

# The read leases a store keeps for chunks read again (bytes, and chunks): see GpukvStore.
LEASE_CACHE = 1 << 30
LEASE_CACHE_SLOTS = 1024

# Bumped in a forked child: a store's connection is its process's own (os.getpid() per call
# would be a system call).
_fork_generation = 0

# This process's connections, one per (url, timeout, lease_cache), shared by its stores (as
# fsspec shares one filesystem instance between zarr's FsspecStores): a store made again for
# the same daemon (zarr.open_array in a loop, a store per task) finds the imports of the
# memory its values go to already made. libgpukv keeps the imports of what it writes and reads
# for the caller past their leases ("held imports", PROTOCOL.md), and those end with the
# connection: a new connection per store would import every allocation again (~10% of 4 MiB
# imports take 100-350 us on an H100). A store's close() leaves the shared connection open;
# disconnect() closes them (the process's exit does too).
_shared: dict[tuple[str | None, float | None, int], Client] = {}
_shared_lock = threading.Lock()


def _forked() -> None:
    global _fork_generation, _shared_lock
    _fork_generation += 1
    _shared_lock = threading.Lock()  # another thread may have held it at the fork
    _shared.clear()  # the parent's (the binding leaves a forked copy's connection alone)


def disconnect() -> None:
    """Closes this process's connections that GpukvStores share (a store used again
    reconnects)."""
    with _shared_lock:
        clients = list(_shared.values())
        _shared.clear()
    for c in clients:
        c.close()


def _shared_client(url: str | None, timeout: float | None, lease_cache: int) -> Client:
    """The process's open connection for these settings, made if there is none."""
    key = (url, timeout, lease_cache)
    with _shared_lock:
        c = _shared.get(key)
        if c is None or c.closed:
            c = Client(url, timeout=timeout)
            if lease_cache:
                # 1024 leases: well under the daemon's --max-leases (4096 by default).
                c.set_lease_cache(LEASE_CACHE_SLOTS, lease_cache, lease_cache)
            _shared[key] = c
        return c


os.register_at_fork(after_in_child=_forked)


def _range_kwargs(byte_range: ByteRequest | None) -> dict[str, int | None]:
    """gpukv's offset/length/suffix for a zarr byte request (zarr's ranges end exclusive)."""
    if byte_range is None:
        return {}
    if isinstance(byte_range, RangeByteRequest):
        if byte_range.start < 0:
            raise ValueError(f"negative start in {byte_range}")
        return {"offset": byte_range.start, "length": max(byte_range.end - byte_range.start, 0)}
    if isinstance(byte_range, OffsetByteRequest):
        if byte_range.offset < 0:
            raise ValueError(f"negative offset in {byte_range}")
        return {"offset": byte_range.offset}
    if isinstance(byte_range, SuffixByteRequest):
        if byte_range.suffix < 0:
            raise ValueError(f"negative suffix in {byte_range}")
        return {"suffix": byte_range.suffix}
    raise TypeError(f"Unexpected byte_range, got {byte_range}.")


def _empty(rng: dict) -> bool:
    return rng.get("length") == 0 or rng.get("suffix") == 0


def _range_tuple(rng: dict) -> tuple | None:
    return (rng.get("offset"), rng.get("length"), rng.get("suffix")) if rng else None


_gpu_buffer: type | None = None


def _gpu_buffer_type() -> type:
    """zarr's GPU buffer class (imported at first use: it needs CuPy only then)."""
    global _gpu_buffer
    if _gpu_buffer is None:
        from zarr.core.buffer import gpu

        _gpu_buffer = gpu.Buffer
    return _gpu_buffer


def _is_gpu(prototype: BufferPrototype) -> bool:
    return issubclass(prototype.buffer, _gpu_buffer_type())


def _is_gpu_buffer(value: Any) -> bool:
    """Whether value is a zarr GPU buffer (device memory behind it)."""
    return isinstance(value, _gpu_buffer_type())


def _cupy_view(m: Mapping) -> Any:
    """A CuPy array over GPU mapping m, owning it (m is unmapped when the array goes). Made
    directly (the pointer, size and device are known), which is about 2 us a chunk faster
    than cupy.asarray(m)."""
    import cupy as cp

    cai = m.__cuda_array_interface__  # marks the mapping as viewed: it outlives its client
    n = cai["shape"][0]
    mem = cp.cuda.UnownedMemory(cai["data"][0], n, m, m.device)
    return cp.ndarray((n,), cp.uint8, cp.cuda.MemoryPointer(mem, 0))


class _Failed:
    """An exception a batched read raises instead of returning."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


class _Batch:
    """The reads (or the writes of GPU buffers) one event loop issued together: mapped by one
    _map_batch (written by one _write_batch)."""

    __slots__ = ("items", "results")

    def __init__(self) -> None:
        self.items: list[tuple] = []  # (key, range, prototype), or (key, array)
        self.results: list | None = None  # set when the batch has run

    def add(self, *item: Any) -> int:
        self.items.append(item)
        return len(self.items) - 1

    def take(self, i: int) -> Buffer | None:
        assert self.results is not None
        r, self.results[i] = self.results[i], None  # the buffer is the caller's alone
        if isinstance(r, _Failed):
            raise r.exc
        return r


@types.coroutine
def _one_turn() -> Any:
    """Gives up one turn of the event loop, as asyncio.sleep(0) does, more cheaply."""
    yield


class GpukvStore(Store):
    """A zarr v3 store whose keys live in a gpukvd, under ``root`` (a key prefix; "" for the
    whole keyspace). ``url`` as for ``gpukv.Client`` (None: ``$GPUKV_URL`` or the default
    socket). The store connects lazily, once per process, so it pickles (the other process
    reconnects) and survives a fork; the process's stores of one daemon share that connection
    (``gpukv.zarr.disconnect()`` closes it). ``clear()`` deletes this root's keys only."""

    supports_writes: bool = True
    supports_deletes: bool = True
    supports_listing: bool = True

    def __init__(self, url: str | None = None, *, root: str = "", read_only: bool = False,
                 timeout: float | None = None, lease_cache: int = LEASE_CACHE) -> None:
        super().__init__(read_only=read_only)
        if not isinstance(root, str):
            raise TypeError("root must be a str")
        root = root.strip("/")
        if any(part in (".", "..") for part in root.split("/") if root):
            raise ValueError(f"invalid root {root!r}")
        self.url = url if url is not None else os.environ.get("GPUKV_URL") or None
        self.root = root
        self.timeout = timeout
        if not isinstance(lease_cache, int) or lease_cache < 0:
            raise ValueError("lease_cache must be a number of bytes >= 0")
        # Chunks read as mappings keep their lease and import after zarr drops them (libgpukv's
        # lease cache, gkv_client_set_lease_cache), up to lease_cache bytes and 1024 chunks:
        # reading a chunk again while it has that value costs a share of a round trip and no
        # CUDA IPC import (on the H100, 4 MiB chunks: 0.85-0.90x of an in-process GpuMemoryStore
        # with it, 0.70-0.81x without; RESULTS.md, session 17). The price: a cached lease holds
        # an overwritten chunk's old memory in the daemon until the chunk is read again, the
        # cache lets it go, or this store sends anything but a read (a metadata read, a write,
        # a listing). 0: libgpukv's own small cache (8 leases of values up to 1 MiB).
        self.lease_cache = lease_cache
        self._c: Client | None = None
        self._gen = -1
        self._batches: dict[asyncio.AbstractEventLoop, _Batch] = {}
        self._writes: dict[asyncio.AbstractEventLoop, _Batch] = {}

    # -- connection ------------------------------------------------------------------------

    @property
    def client(self) -> Client:
        """This process's connection to the store's daemon, shared with its other stores of the
        same url, timeout and lease_cache (made at first use)."""
        c = self._c
        if c is None or self._gen != _fork_generation or c.closed:
            # _shared_client serialises the connecting: threads racing here get the same one.
            c = _shared_client(self.url, self.timeout, self.lease_cache)
            self._c, self._gen = c, _fork_generation
        return c

    async def _open(self) -> None:
        self.client  # connect now: a wrong URL fails here
        await super()._open()

    def close(self) -> None:
        """Closes the store; the connection it shares stays open for the process's other
        stores (gpukv.zarr.disconnect() closes it). The read leases its lease cache kept end
        now, as they did when a store had a connection of its own."""
        super().close()
        c, self._c = self._c, None
        if c is not None and self._gen == _fork_generation and not c.closed:
            try:
                c.ping()  # any request but a mapping call ends the connection's lease cache
            except Error:
                pass  # a connection that failed has no leases left

    def __getstate__(self) -> dict[str, Any]:
        return {"url": self.url, "root": self.root, "read_only": self._read_only,
                "timeout": self.timeout, "lease_cache": self.lease_cache}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["url"], root=state["root"], read_only=state["read_only"],
                      timeout=state["timeout"], lease_cache=state.get("lease_cache", LEASE_CACHE))

    def with_read_only(self, read_only: bool = False) -> GpukvStore:
        return type(self)(self.url, root=self.root, read_only=read_only, timeout=self.timeout,
                          lease_cache=self.lease_cache)

    def __eq__(self, other: object) -> bool:
        return (isinstance(other, GpukvStore) and self.url == other.url
                and self.root == other.root and self.read_only == other.read_only)

    def __hash__(self) -> int:
        return hash((self.url, self.root, self.read_only))

    def __str__(self) -> str:
        return f"gpukv://{self.url or '(default)'}/{self.root}"

    def __repr__(self) -> str:
        return f"GpukvStore({self.url!r}, root={self.root!r}, read_only={self.read_only})"

    # -- keys ------------------------------------------------------------------------------

    def _key(self, key: str) -> str:
        return f"{self.root}/{key}" if self.root else key

    def _prefix(self, prefix: str) -> str:
        if not self.root:
            return prefix
        return f"{self.root}/{prefix}"

    def _strip(self, key: str) -> str:
        return key[len(self.root) + 1 :] if self.root else key

    # -- reading ---------------------------------------------------------------------------
    #
    # On a local connection whose zero-copy reaches the memory the buffers live in (cuda for
    # GPU buffers, the host arena for host buffers) a read is a view of the mapped value: no
    # copy, and a lease held while zarr holds the buffer (then cached, for the chunk's next
    # read). The reads zarr issues together (async.concurrency of them) are mapped together:
    # one gkv_map_many, one round trip. Otherwise the bytes come over the socket.

    def _maps_into(self, prototype: BufferPrototype) -> bool:
        zc = self.client.zero_copy
        return zc == "cuda-pool-fd" if _is_gpu(prototype) else zc == "host-memfd"

    def _over_socket(self, k: str, rng: dict, prototype: BufferPrototype) -> Buffer | None:
        try:
            return prototype.buffer.from_bytes(self.client.get(k, **rng))
        except NotFound:
            return None
        except RangeError:
            return prototype.buffer.from_bytes(b"")  # past the end: no bytes (as LocalStore)

    def _from_mapping(self, k: str, rng: dict, prototype: BufferPrototype,
                      m: Mapping | int) -> Buffer | None:
        """A read's result from what _map_many gave for it: a mapping or an error code."""
        if isinstance(m, int):
            if m == NotFound.code:
                return None
            if m == RangeError.code:
                return prototype.buffer.from_bytes(b"")
            # This process cannot use the value (a GPU it cannot see, too many leases...):
            # the bytes through the socket instead.
            return self._over_socket(k, rng, prototype)
        if m.nbytes == 0:
            m.unmap()
            return prototype.buffer.create_zero_length()
        if _is_gpu(prototype):
            return prototype.buffer.from_array_like(_cupy_view(m))
        return prototype.buffer.from_array_like(np.asarray(m))  # read-only host view

    def _plan(self, key: str, prototype: BufferPrototype | None,
              byte_range: ByteRequest | None) -> tuple[str, dict, BufferPrototype, bool]:
        """A read's full key, range and prototype, and whether it is to be a mapping."""
        if prototype is None:
            prototype = default_buffer_prototype()
        rng = _range_kwargs(byte_range)
        return self._key(key), rng, prototype, not _empty(rng) and self._maps_into(prototype)

    def get_sync(self, key: str, *, prototype: BufferPrototype | None = None,
                 byte_range: ByteRequest | None = None) -> Buffer | None:
        k, rng, prototype, mapped = self._plan(key, prototype, byte_range)
        if not mapped:
            return self._over_socket(k, rng, prototype)
        (m,) = self.client._map_many([k], [_range_tuple(rng)])
        return self._from_mapping(k, rng, prototype, m)

    async def get(self, key: str, prototype: BufferPrototype | None = None,
                  byte_range: ByteRequest | None = None) -> Buffer | None:
        if not self._is_open:
            await self._open()
        k, rng, prototype, mapped = self._plan(key, prototype, byte_range)
        if not mapped:
            return self._over_socket(k, rng, prototype)
        return await self._in_batch(self._batches, self._map_batch, k, rng, prototype)

    async def _in_batch(self, table: dict, run: Any, *item: Any) -> Any:
        """item's result from the batch of its kind (reads in _batches run by _map_batch,
        writes in _writes run by _write_batch) waiting in this event loop. The first item
        schedules the batch, to run once every task already scheduled has had its turn; then
        this task gives up one turn of the loop (no future: the batch was scheduled before it,
        so it runs first) and takes its result."""
        loop = asyncio.get_running_loop()
        batch = table.get(loop)
        if batch is None:
            batch = table[loop] = _Batch()
            loop.call_soon(run, loop, batch)
        i = batch.add(*item)
        await _one_turn()
        if batch.results is None:  # a loop that ran this task first: run the batch now
            run(loop, batch)
        return batch.take(i)

    @staticmethod
    def _claim(table: dict, loop: asyncio.AbstractEventLoop, batch: _Batch) -> bool:
        """Whether batch is still to run; it leaves table (later items start another)."""
        if batch.results is not None:
            return False
        if table.get(loop) is batch:
            del table[loop]
        return True

    def _map_batch(self, loop: asyncio.AbstractEventLoop, batch: _Batch) -> None:
        if not self._claim(self._batches, loop, batch):
            return
        items, results = batch.items, []
        for j in range(0, len(items), MAX_BATCH):
            part = items[j : j + MAX_BATCH]
            try:
                maps = self.client._map_many([it[0] for it in part],
                                             [_range_tuple(it[1]) for it in part])
            except BaseException as e:  # noqa: BLE001 - raised by every read of the part
                results += [_Failed(e)] * len(part)
                continue
            for (k, rng, prototype), m in zip(part, maps):
                try:
                    results.append(self._from_mapping(k, rng, prototype, m))
                except BaseException as e:  # noqa: BLE001
                    results.append(_Failed(e))
        batch.results = results

    async def get_partial_values(self, prototype: BufferPrototype,
                                 key_ranges: Iterable[tuple[str, ByteRequest | None]]
                                 ) -> list[Buffer | None]:
        pairs = list(key_ranges)
        if not pairs:
            return []
        if _is_gpu(prototype):
            return [self.get_sync(k, prototype=prototype, byte_range=r) for k, r in pairs]
        keys = [self._key(k) for k, _ in pairs]
        ranges = []
        for _, r in pairs:
            kw = _range_kwargs(r)
            ranges.append((kw.get("offset"), kw.get("length"), kw.get("suffix")))
        try:
            values = self.client.mget(keys, ranges)
        except RangeError:
            # A range past some value's end: read each on its own (those give no bytes).
            return [self.get_sync(k, prototype=prototype, byte_range=r) for k, r in pairs]
        return [None if v is None else prototype.buffer.from_bytes(v) for v in values]

    async def exists(self, key: str) -> bool:
        return self.client.exists(self._key(key)) == 1

    async def getsize(self, key: str) -> int:
        try:
            return self.client.getsize(self._key(key))
        except NotFound:
            raise FileNotFoundError(key) from None

    async def getsize_prefix(self, prefix: str) -> int:
        return self.client.getsize_prefix(self._prefix(prefix))

    # -- writing ---------------------------------------------------------------------------

    def _put(self, key: str, value: Buffer, nx: bool = False) -> None:
        self._check_writable()
        if not isinstance(value, Buffer):
            raise TypeError(f"GpukvStore.set(): value must be a Buffer, not {type(value)}")
        arr = value.as_array_like()
        if hasattr(arr, "__cuda_array_interface__"):
            self.client.set_from_device(self._key(key), arr, nx=nx)
        else:
            self.client.set(self._key(key), value.as_numpy_array(), nx=nx)

    def set_sync(self, key: str, value: Buffer) -> None:
        self._put(key, value)

    async def set(self, key: str, value: Buffer) -> None:
        if not self._is_open:
            await self._open()
        if not _is_gpu_buffer(value) or self.client.zero_copy != "cuda-pool-fd":
            self._put(key, value)
            return
        self._check_writable()
        # As reads do: the writes of GPU buffers waiting in this event loop are stored together
        # by one _write_batch (pipelined CREATEs, the copies waited for together, pipelined
        # SEALs).
        await self._in_batch(self._writes, self._write_batch, self._key(key),
                             value.as_array_like())

    def _write_batch(self, loop: asyncio.AbstractEventLoop, batch: _Batch) -> None:
        if not self._claim(self._writes, loop, batch):
            return
        items, results = batch.items, []
        for j in range(0, len(items), MAX_BATCH):
            part = items[j : j + MAX_BATCH]
            try:
                codes = self.client._set_many_codes(part)
            except BaseException as e:  # noqa: BLE001 - raised by every write of the part
                results += [_Failed(e)] * len(part)
                continue
            results += [_Failed(CLASSES[r](f"writing {k}: {TEXTS.get(r, 'error')}")) if r
                        else None for (k, _), r in zip(part, codes)]
        batch.results = results

    async def set_if_not_exists(self, key: str, value: Buffer) -> None:
        try:
            self._put(key, value, nx=True)  # atomic: no race between a check and the write
        except Exists:
            pass

    def delete_sync(self, key: str) -> None:
        self._check_writable()
        self.client.delete(self._key(key))

    async def delete(self, key: str) -> None:
        self.delete_sync(key)

    async def delete_dir(self, prefix: str) -> None:
        self._check_writable()
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        self._delete_prefix(self._prefix(prefix))

    def _delete_prefix(self, full: str) -> None:
        c = self.client
        batch: list[bytes | str] = []
        # Deleting behind a LIST cursor is safe: the walk continues after the cursor's key.
        for key in c.keys(full):
            batch.append(key)
            if len(batch) == MAX_BATCH:
                c.delete(*batch)
                batch = []
        if batch:
            c.delete(*batch)

    async def clear(self) -> None:
        self._check_writable()
        self._delete_prefix(self._prefix(""))

    # -- listing ---------------------------------------------------------------------------

    async def list(self) -> AsyncIterator[str]:
        for key in self.client.keys(self._prefix("")):
            yield self._strip(key)

    async def list_prefix(self, prefix: str) -> AsyncIterator[str]:
        for key in self.client.keys(self._prefix(prefix)):
            yield self._strip(key)

    async def list_dir(self, prefix: str) -> AsyncIterator[str]:
        prefix = prefix.rstrip("/")
        full = self._prefix(prefix + "/" if prefix else "")
        n = len(full)
        for e in self.client.list(full, delimiter="/"):
            name = e.key[n:]
            yield name[:-1] if e.is_dir else name
