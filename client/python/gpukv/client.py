"""gpukv.Client: one connection to a gpukvd, and ClientPool for threads and asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple, TypeVar, Union

from . import _gpukv
from ._device import device_memory, host_view, wait_all
from ._errors import CLASSES, ConnectionError, NotFound

Key = Union[str, bytes, bytearray, memoryview]
#: A byte range for mget: None (the whole value), a slice (``slice(start, stop)``, or
#: ``slice(-n, None)`` for the last n bytes) or a tuple ``(offset, length, suffix)``.
RangeLike = Union[None, slice, tuple]

MAX_BATCH = _gpukv.MAX_BATCH
T = TypeVar("T")
_TEXTS = {code: text for code, _, text in _gpukv.ERRORS}



def _ttl_ms(ex: float | None, px: int | None) -> int:
    """A TTL in milliseconds from ``ex`` (seconds) or ``px`` (milliseconds); 0: none."""
    if ex is not None and px is not None:
        raise ValueError("ex and px exclude each other")
    if ex is not None:
        ms = int(round(ex * 1000))
    elif px is not None:
        if not isinstance(px, int):
            raise TypeError("px is an int of milliseconds")
        ms = px
    else:
        return 0
    if ms < 1:
        raise ValueError("a TTL is at least 1 millisecond")
    return ms

class ListEntry(NamedTuple):
    """One LIST result: a key (or, with a delimiter, a folded directory ending in it)."""

    key: str
    size: int
    is_dir: bool


class Event(NamedTuple):
    """One change a ``Watch`` saw: ``kind`` is "set", "delete", "expire", "evict" (dropped for
    room) or "flush" (every key went; ``key`` is ""); ``size`` the value's for "set", else 0;
    ``seq`` the daemon's count of changes at this one (a key's events come in seq order);
    ``node`` the cluster member it happened on, for a watch of a cluster node ("" for the node
    watched itself, and on a daemon alone; each member has its own seq); ``version`` the key's
    cluster version on a cluster node (it grows with every write of the key wherever it is
    written; a watch of the cluster gives a key's events in its order), 0 for "flush" and on
    a daemon alone."""

    kind: str
    key: str
    size: int
    seq: int
    node: str = ""
    version: int = 0


_EVENT_KINDS = {1: "set", 2: "delete", 3: "expire", 4: "evict", 5: "flush"}


class Watch:
    """The changes of the keys under a prefix, as they happen: ``Client.watch(prefix)``.

    A watch has a connection of its own (the client that made it stays usable), so iterate it
    in one thread or task. ``for ev in w`` waits for each ``Event`` as long as it takes;
    ``w.get(timeout)`` returns None when none came in time; ``async for ev in w`` waits without
    blocking the event loop. A watcher that reads too slowly for the daemon
    (``--watch-buffer``) loses its watch: ``gpukv.Overflow`` is raised and the watch is over.
    ``close()`` (or the ``with`` block's end) ends it. ``seq`` is the daemon's count of changes
    when the watch began: every event's seq is above it.
    """

    def __init__(self, url: str, prefix: Key = "", *, timeout: float | None = None,
                 local: bool = False) -> None:
        self._c = _gpukv.Client(url, timeout=timeout)
        try:
            self.seq: int = self._c._watch(prefix, local)
        except BaseException:
            self._c.close()
            raise
        self.prefix = prefix

    def get(self, timeout: float | None = None) -> Event | None:
        """The next event, waiting up to ``timeout`` seconds (None: as long as it takes)."""
        if timeout is None:
            ms = -1
        else:
            if timeout < 0:
                raise ValueError("timeout is seconds, at least 0, or None")
            ms = min(int(timeout * 1000 + 0.999), 3_600_000)
        while True:
            got = self._c._watch_next(ms if ms >= 0 else 3_600_000)
            if got is not None or ms >= 0:
                break
        if got is None:
            return None
        kind, key, size, seq, node, version = got
        return Event(_EVENT_KINDS.get(kind, str(kind)), _decode(key), size, seq, node, version)

    def __iter__(self) -> Watch:
        return self

    def __next__(self) -> Event:
        ev = self.get()
        assert ev is not None
        return ev

    def __aiter__(self) -> Watch:
        return self

    async def __anext__(self) -> Event:
        # Waits in a worker thread a quarter second at a time, so that a cancelled task leaves
        # no thread blocked for long.
        while True:
            ev = await asyncio.to_thread(self.get, 0.25)
            if ev is not None:
                return ev

    def close(self) -> None:
        """Ends the watch and its connection. Idempotent."""
        if not self._c.closed:
            with contextlib.suppress(Exception):
                self._c._unwatch()
            self._c.close()

    @property
    def closed(self) -> bool:
        return self._c.closed

    def __enter__(self) -> Watch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):
            self._c.close()

    def __repr__(self) -> str:
        return f"<gpukv.Watch {self.prefix!r} {'closed' if self.closed else 'open'}>"


def _decode(key: bytes) -> str:
    # Keys are bytes on the wire; surrogateescape keeps any byte string round-trippable.
    return key.decode("utf-8", "surrogateescape")


def _range_tuple(r: RangeLike) -> tuple | None:
    if r is None:
        return None
    if isinstance(r, slice):
        if r.step not in (None, 1):
            raise ValueError("a byte range has no step")
        start, stop = r.start, r.stop
        if start is not None and start < 0:
            if stop is not None:
                raise ValueError("a suffix range is slice(-n, None)")
            return (None, None, -start)
        if stop is not None and stop < 0:
            raise ValueError("a range's stop must not be negative")
        start = start or 0
        return (start, None if stop is None else max(stop - start, 0), None)
    if isinstance(r, tuple) and len(r) == 3:
        return r
    raise TypeError("a range is None, a slice or (offset, length, suffix)")


def _in_batches(call: Callable[[list, list | None], list], keys: Sequence[Key],
                ranges: Sequence[RangeLike] | None) -> list:
    """call(keys, ranges) (_mget or _map_many) over at most MAX_BATCH items at a time, with
    ranges normalised; the results concatenated."""
    keys = list(keys)
    if ranges is not None:
        ranges = [_range_tuple(r) for r in ranges]
        if len(ranges) != len(keys):
            raise ValueError("ranges must be as long as keys")
    out: list = []
    for i in range(0, len(keys), MAX_BATCH):
        part = None if ranges is None else list(ranges[i : i + MAX_BATCH])
        out.extend(call(keys[i : i + MAX_BATCH], part))
    return out


def _chunks(seq: Sequence[T], n: int = MAX_BATCH) -> Iterator[Sequence[T]]:
    for i in range(0, len(seq), n):
        yield seq[i : i + n]


def _parse_info(text: str) -> dict[str, dict[str, Any]]:
    sections: dict[str, dict[str, Any]] = {}
    current = sections.setdefault("", {})
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            current = sections.setdefault(line.lstrip("# ").lower(), {})
            continue
        name, sep, value = line.partition(":")
        if not sep:
            continue
        parsed: Any = value
        for conv in (int, float):
            try:
                parsed = conv(value)
                break
            except ValueError:
                pass
        current[name] = parsed
    return {k: v for k, v in sections.items() if v}


class RegisteredBuffer:
    """Device memory of this process registered with the daemon (``Client.register_buffer``):
    ``Client.get_to_buffer`` has the daemon copy values into it itself, with no import, copy or
    GPU work of this process per read. The client keeps the array alive until ``drop()`` (or the
    ``with`` block's end, or the client's ``close``): the daemon holds the memory open until
    then. ``id`` names it on its client's connection; ``nbytes`` is its size."""

    def __init__(self, client: Client, mem: Any, array: Any, id: int) -> None:
        self._client, self._mem, self.array, self.id = client, mem, array, id
        self.nbytes: int = mem.nbytes

    def drop(self) -> None:
        """Ends the registration (the daemon closes the memory). Twice is harmless."""
        if self._mem is None:
            return
        try:
            if not self._client.closed:
                self._client._buffer_drop(self.id)
        finally:
            self._client._buffers.pop(self.id, None)
            self._mem.close()
            self._mem = None

    def __enter__(self) -> RegisteredBuffer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.drop()

    def __repr__(self) -> str:
        return f"<gpukv.RegisteredBuffer {self.id} of {self.nbytes} bytes>"


class Client(_gpukv.Client):
    """A connection to gpukvd.

    ``Client(url=None, *, timeout=None)``: url is ``unix:/path``, ``tcp:host:port`` or a socket
    path; None means ``$GPUKV_URL``, else the default socket (as the CLI). ``timeout`` (seconds)
    bounds every wait for the server; a server that stops answering then raises
    ``gpukv.TimeoutError`` and the connection is closed. Without it a call waits as long as the
    server takes; a server that dies makes calls raise ``gpukv.ConnectionClosed`` at once.

    Keys are ``str`` (UTF-8) or bytes-like; values are bytes-like objects (bytes, bytearray,
    memoryview, NumPy arrays: anything with the buffer protocol, C-contiguous), ``str`` (UTF-8),
    or device arrays (CuPy, PyTorch CUDA tensors: anything with ``__cuda_array_interface__`` or
    DLPack on a CUDA device). Reads return ``bytes`` unless they go to a buffer you pass.

    Every blocking call releases the GIL. A client may be shared by threads (its calls are
    serialised), but one client per thread is what runs in parallel; ``ClientPool`` hands them
    out. Errors raise subclasses of ``gpukv.Error`` carrying the stable code.
    """

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else self.backend
        return f"<gpukv.Client {self.url} {state}>"

    def __reduce__(self) -> Any:
        raise TypeError("a gpukv.Client is a live connection: connect again in the other process")

    # -- values ------------------------------------------------------------------------------

    def set(self, key: Key, value: Any, *, nx: bool = False, xx: bool = False,
            meta: bytes | str | None = None, ex: float | None = None,
            px: int | None = None, gpu: int | None = None) -> None:
        """Stores value under key, replacing any older value atomically. ``nx``: only if the key
        does not exist (else ``Exists``); ``xx``: only if it does (else ``NotFound``). ``meta``:
        up to 4 KiB of opaque metadata stored with the value (e.g. dtype and shape). ``ex``
        (seconds) or ``px`` (milliseconds): the key expires that long after the write; without
        either it has no deadline, as redis-py's ``set``. ``gpu``: the daemon's GPU to store it
        on (an index of ``gpus``; default: the daemon's placement). A device array is stored
        from device memory (``set_from_device``)."""
        ttl = _ttl_ms(ex, px)
        g = -1 if gpu is None else gpu
        if isinstance(value, (bytes, bytearray, memoryview, str)):
            return super().set(key, value, nx=nx, xx=xx, meta=meta, ttl_ms=ttl, gpu=g)
        dev = device_memory(value)
        if dev is not None:
            with dev:
                dev.wait()
                return super()._set_from_device(key, dev.ptr, dev.nbytes, nx=nx, xx=xx, meta=meta,
                                                ttl_ms=ttl, gpu=g)
        try:
            memoryview(value).release()  # the buffer protocol (NumPy, array, mmap, ...)
        except TypeError:
            view = host_view(value)  # e.g. a CPU torch tensor, through DLPack
            if view is not None:
                with view:
                    return super().set(key, view, nx=nx, xx=xx, meta=meta, ttl_ms=ttl, gpu=g)
        return super().set(key, value, nx=nx, xx=xx, meta=meta, ttl_ms=ttl, gpu=g)

    def expire(self, key: Key, seconds: float) -> bool:
        """The key expires ``seconds`` from now; False when there is no such key."""
        return bool(self._expire(key, _ttl_ms(seconds, None)))

    def pexpire(self, key: Key, milliseconds: int) -> bool:
        """The key expires ``milliseconds`` from now; False when there is no such key."""
        return bool(self._expire(key, _ttl_ms(None, milliseconds)))

    def persist(self, key: Key) -> bool:
        """Takes the key's deadline away; False when it had none (``NotFound`` without a key)."""
        return bool(self._persist(key))

    def pttl(self, key: Key) -> int | None:
        """Milliseconds the key has left, or None when it has no deadline (``NotFound``)."""
        return self._pttl(key)

    def ttl(self, key: Key) -> float | None:
        """Seconds the key has left, or None when it has no deadline (``NotFound``)."""
        ms = self._pttl(key)
        return None if ms is None else ms / 1000

    def delete_prefix(self, prefix: Key) -> int:
        """Deletes every key under prefix (2,048 per request, others served in between);
        returns how many existed. An empty prefix would delete every key: that is what
        ``flush()`` says, so ``delete_prefix("")`` is a ValueError and deletes nothing."""
        if len(prefix) == 0:
            raise ValueError("delete_prefix('') would delete every key: call flush() for that")
        return self._delete_prefix(prefix)

    def set_from_device(self, key: Key, array: Any, *, nx: bool = False, xx: bool = False,
                        meta: bytes | str | None = None, ex: float | None = None,
                        px: int | None = None) -> None:
        """Stores a CUDA array's bytes (C-contiguous; CUDA array interface or DLPack). On a local
        connection with zero-copy: CREATE, one device-to-device copy, SEAL (no host bounce);
        otherwise through host memory. Work pending on the stream the array names (CAI v3) is
        waited for first; any other stream writing it must be synchronised by the caller."""
        dev = device_memory(array)
        if dev is None:
            raise TypeError(f"not a CUDA device array: {type(array).__name__}")
        with dev:
            dev.wait()
            super()._set_from_device(key, dev.ptr, dev.nbytes, nx=nx, xx=xx, meta=meta,
                                     ttl_ms=_ttl_ms(ex, px))

    def set_many_from_device(self, items: Mapping[Key, Any] | Iterable[tuple[Key, Any]], *,
                             nx: bool = False, xx: bool = False,
                             meta: bytes | str | None = None, ex: float | None = None,
                             px: int | None = None) -> None:
        """Stores many CUDA arrays, each as ``set_from_device`` would (same options for all):
        ``items`` a dict {key: array} or (key, array) pairs. On a local connection with
        zero-copy the requests are pipelined: every CREATE goes out before the first answer is
        read, the copies are waited for together, then every SEAL goes out the same way (about
        two round trips and one wait for up to 4096 values). Every item is tried; the first
        that failed then raises (the others are stored)."""
        pairs = list(items.items() if isinstance(items, Mapping) else items)
        codes = self._set_many_codes(pairs, nx=nx, xx=xx, meta=meta, ttl_ms=_ttl_ms(ex, px))
        failed = next(((i, r) for i, r in enumerate(codes) if r), None)
        if failed:
            i, r = failed
            raise CLASSES[r](f"item {i}: {_TEXTS.get(r, 'unknown error')}")

    def _set_many_codes(self, pairs: Sequence[tuple[Key, Any]], **opts: Any) -> list[int]:
        """set_many_from_device's work (also GpukvStore's writes): each pair's code, 0 when it
        was stored. Each producer's stream is waited for once; MAX_BATCH pairs a call."""
        with contextlib.ExitStack() as stack:
            devs = []
            for _, array in pairs:
                dev = device_memory(array)
                if dev is None:
                    raise TypeError(f"not a CUDA device array: {type(array).__name__}")
                devs.append(stack.enter_context(dev))
            wait_all(devs)
            codes: list[int] = []
            for j in range(0, len(pairs), MAX_BATCH):
                part = range(j, min(j + MAX_BATCH, len(pairs)))
                codes += self._set_many_from_device(
                    [pairs[i][0] for i in part], [devs[i].ptr for i in part],
                    [devs[i].nbytes for i in part], **opts)
            return codes

    def get_to_device(self, key: Key, out: Any, *, offset: int | None = None,
                      length: int | None = None, suffix: int | None = None,
                      wait: float | None = None, after: int | None = None) -> int:
        """Reads key (or a range) into ``out``, a writable CUDA array (or a writable host
        buffer), and returns the number of bytes stored. Locally: MAP, a device-to-device copy,
        unmap. The copy has finished when this returns. ``NoSpace`` if the bytes do not fit.
        ``wait`` (seconds): a key that does not exist yet is waited for, as in ``get``;
        ``after`` (a version) waits for a value newer than that one."""
        dev = device_memory(out, writable=True)
        if dev is None:
            return self.get_into(key, out, offset=offset, length=length, suffix=suffix,
                                 wait=wait, after=after)
        with dev:
            return super()._get_to_device(key, dev.ptr, dev.nbytes, offset=offset,
                                          length=length, suffix=suffix, wait=wait,
                                          after=after)

    @property
    def _buffers(self) -> dict[int, RegisteredBuffer]:
        return self.__dict__.setdefault("_live_buffers", {})

    def register_buffer(self, out: Any) -> RegisteredBuffer:
        """Registers ``out``, a writable CUDA array (CuPy, PyTorch: memory from cudaMalloc, as
        their default allocators give; not from a memory pool of cudaMallocAsync), with the daemon
        for ``get_to_buffer``: it opens the memory once and writes values into it itself.
        Needs a local zero-copy connection to a daemon on GPUs (else ``NotSupported``); at most
        16 per connection (``LeaseLimit``). Keep the ``RegisteredBuffer`` or ``drop()`` it; the
        client holds the array until then."""
        dev = device_memory(out, writable=True)
        if dev is None:
            raise TypeError(f"register_buffer needs a CUDA array, not {type(out).__name__}")
        try:
            id = super()._buffer_register(dev.ptr, dev.nbytes)
        except BaseException:
            dev.close()
            raise
        buf = RegisteredBuffer(self, dev, out, id)
        self._buffers[id] = buf
        return buf

    def get_to_buffer(self, key: Key, buf: RegisteredBuffer, *, at: int = 0,
                      offset: int | None = None, length: int | None = None,
                      suffix: int | None = None, wait: float | None = None,
                      after: int | None = None) -> int:
        """Reads key (or a range) into registered buffer ``buf`` at byte ``at``: the daemon
        copies the bytes on the buffer's GPU and answers once the copy has run, so work this
        process starts afterwards sees them. Returns the number of bytes written; ``NoSpace``
        (nothing written) when they do not fit. ``wait`` and ``after`` as in ``get``. On a
        cluster node a value another node owns is pulled into the node first."""
        if buf._client is not self or buf._mem is None:
            raise ValueError("the buffer is not registered on this client")
        return super()._get_to_buffer(key, buf.id, at, offset=offset, length=length,
                                      suffix=suffix, wait=wait, after=after)

    def mget(self, keys: Sequence[Key], ranges: Sequence[RangeLike] | None = None
             ) -> list[bytes | None]:
        """Reads many values (or ranges) at once: a list with bytes for each key found and None
        for each missing one. More than 4096 items take several requests."""
        return _in_batches(self._mget, keys, ranges)

    def map_many(self, keys: Sequence[Key], ranges: Sequence[RangeLike] | None = None
                 ) -> list[_gpukv.Mapping | None]:
        """Maps many keys (or ranges) with pipelined MAP requests: n mappings for about one
        round trip. A list with a Mapping for each key found and None for each missing one; any
        other error raises (the mappings already made are ended first)."""
        out = _in_batches(self._map_many, keys, ranges)
        for i, r in enumerate(out):
            if isinstance(r, int):
                if r == NotFound.code:
                    out[i] = None
                    continue
                for m in out:
                    if isinstance(m, _gpukv.Mapping):
                        m.unmap()
                raise CLASSES[r](f"item {i}: {_TEXTS.get(r, 'unknown error')}")
        return out

    def exists(self, *keys: Key) -> int:
        """How many of keys exist (a key named twice counts twice, as in Redis)."""
        return sum(self._exists(list(part)) for part in _chunks(keys))

    def delete(self, *keys: Key) -> int:
        """Deletes keys; returns how many existed. A missing key is not an error."""
        return sum(self._delete(list(part)) for part in _chunks(keys))

    def getsize_prefix(self, prefix: Key = "") -> int:
        """Total bytes of the values under a prefix ("" for everything)."""
        return self._getsize_prefix(prefix)[0]

    def count_prefix(self, prefix: Key = "") -> int:
        """Number of keys under a prefix."""
        return self._getsize_prefix(prefix)[1]

    # -- listing -----------------------------------------------------------------------------

    def list(self, prefix: Key = "", *, delimiter: str | None = None,
             page: int = 1000) -> Iterator[ListEntry]:
        """Iterates over the keys under prefix in byte order, a page of ``page`` keys per round
        trip. With a delimiter (e.g. "/"), keys that continue past the next delimiter are folded
        into one directory entry ("a/b/", is_dir True). Other calls on this client may come
        between two steps."""
        if delimiter is None:
            d = 0
        else:
            db = delimiter.encode() if isinstance(delimiter, str) else bytes(delimiter)
            if len(db) != 1:
                raise ValueError("a delimiter is one byte")
            d = db[0]
        if not 1 <= page <= 10000:
            raise ValueError("page must be 1..10000")
        for key, size, is_dir in self._list(prefix, d, page):
            yield ListEntry(_decode(key), size, is_dir)

    def keys(self, prefix: Key = "") -> Iterator[str]:
        """The keys under prefix, in byte order."""
        for key, _, _ in self._list(prefix, 0, 1000):
            yield _decode(key)

    # -- server --------------------------------------------------------------------------------

    def watch(self, prefix: Key = "", *, local: bool = False) -> Watch:
        """A ``Watch`` of the keys under prefix ("" for every key), on a connection of its own:
        ``for ev in c.watch("kv/")`` sees each set, delete, expiry, eviction and flush as it
        happens, in the daemon's order. On a cluster node it spans the cluster (every member's
        values, not replicas; ``Event.node`` names the member, each in its own order);
        ``local=True`` keeps to that node's own values."""
        return Watch(self.url, prefix, local=local)

    def info(self, section: str | None = None) -> dict[str, Any]:
        """INFO as a dict of name -> value (numbers converted). ``section`` ("server",
        "memory", "clients", "stats", "keyspace", "leases") keeps one section."""
        sections = _parse_info(self._info())
        if section is not None:
            return dict(sections.get(section.lower(), {}))
        merged: dict[str, Any] = {}
        for fields in sections.values():
            merged.update(fields)
        return merged

    def metrics(self) -> str:
        """The server's metrics in the Prometheus text format: what ``GET /metrics`` on
        ``gpukvd --metrics-listen`` answers (per-command counts and latency histograms, bytes,
        memory, keys, leases, connections)."""
        return self._info(True)


class ClientPool:
    """Clients for code that runs on many threads: asyncio (``await pool.run(fn, ...)`` runs
    ``fn(client, ...)`` on a worker thread with a client of its own), executors, web servers.
    Thread-safe. At most ``size`` connections; a borrower waits when all are busy. A client
    whose connection broke is closed instead of going back to the pool."""

    def __init__(self, url: str | None = None, *, size: int = 8,
                 timeout: float | None = None) -> None:
        if size < 1:
            raise ValueError("size must be at least 1")
        self.url, self.size, self.timeout = url, size, timeout
        self._idle: list[Client] = []
        self._count = 0
        self._cond = threading.Condition()
        self._closed = False

    def _take(self) -> Client:
        with self._cond:
            while True:
                if self._closed:
                    raise ConnectionError("the pool is closed")
                if self._idle:
                    return self._idle.pop()
                if self._count < self.size:
                    self._count += 1
                    break
                self._cond.wait()
        try:
            return Client(self.url, timeout=self.timeout)
        except BaseException:
            with self._cond:
                self._count -= 1
                self._cond.notify()
            raise

    def _give(self, c: Client, broken: bool) -> None:
        with self._cond:
            if broken or self._closed or c.closed:
                self._count -= 1
                c.close()
            else:
                self._idle.append(c)
            self._cond.notify()

    @contextlib.contextmanager
    def client(self) -> Iterator[Client]:
        """Borrows a client for the block."""
        c = self._take()
        broken = False
        try:
            yield c
        except ConnectionError:
            broken = True
            raise
        finally:
            self._give(c, broken)

    def call(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Runs ``fn(client, *args, **kwargs)`` with a borrowed client, on this thread."""
        with self.client() as c:
            return fn(c, *args, **kwargs)

    async def run(self, fn: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
        """Runs ``fn(client, *args, **kwargs)`` on a worker thread (``asyncio.to_thread``) with
        a borrowed client, so the event loop never blocks on the server."""
        return await asyncio.to_thread(self.call, fn, *args, **kwargs)

    def close(self) -> None:
        """Closes idle clients now and busy ones when they come back."""
        with self._cond:
            self._closed = True
            idle, self._idle = self._idle, []
            self._count -= len(idle)
            self._cond.notify_all()
        for c in idle:
            c.close()

    def __enter__(self) -> ClientPool:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

