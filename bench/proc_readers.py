"""proc_readers.py: n reader processes MAPping one value each at once, for nixl_bench.py's
concurrent readers. Threads of one Python process (nixl_bench.concurrent_reads) share one
CUDA context, and the imports of their mappings run one after another there (300-390 us apart
for 64 MiB values new to the process, session 40's trace): 16 of them then bound the round, not
the daemons. Processes, as 16 ranks or loader workers would be, import side by side.

Each reader connects and maps WARM_KEY once (its CUDA context and the daemon's pool imported,
untimed), then per round waits at a barrier until the writer has rewritten every value, MAPs
its key and reports when it began and ended (time.monotonic: CLOCK_MONOTONIC, one clock for
the machine's processes). A round's wall time runs from the first reader's start to the last
one's end.

how="get_to_device": each reader copies its value into a buffer of its own on GPU dev instead
(Client.get_to_device: libgpukv maps the value itself, and the import of a mapping it keeps to
itself may be held past its lease, PROTOCOL.md "Held imports", where a MAP's never is); its
connection stays open across the rounds, so what it holds carries over.

how="get_to_buffer": each reader registers a buffer of its own on GPU dev once (untimed) and
the daemon copies each value into it (Client.get_to_buffer, PROTOCOL.md "Reading into a
registered buffer"): no import, copy or GPU work of the reader's per read.

With a list of keys per reader (sustained reading) each reads several values one after another
in a round (a new read as soon as its last one ended), so the readers' reads overlap each
other's starts and ends instead of all starting at one barrier and ending together."""

from __future__ import annotations

import multiprocessing
import statistics
import time


def _reader(url: str, key: str | list[str], warm: str | None, rounds: int, go, out,
            how: str = "map", dev: int = 0, size: int = 0) -> None:
    import gpukv  # a process of its own: its own client, CUDA context and imports

    buf = None
    try:
        c = gpukv.Client(url)
        if how == "get_to_device":
            try:
                import cupy
                with cupy.cuda.Device(dev):
                    buf = cupy.empty(size, dtype=cupy.uint8)
            except ImportError:  # no GPU here: a host buffer (get_to_device reads into it)
                buf = bytearray(size)
            read = lambda k: c.get_to_device(k, buf)  # noqa: E731
        elif how == "get_to_buffer":  # registered once, untimed; the daemon copies into it
            import cupy
            with cupy.cuda.Device(dev):
                buf = cupy.empty(size, dtype=cupy.uint8)
            reg = c.register_buffer(buf)
            read = lambda k: c.get_to_buffer(k, reg)  # noqa: E731
        else:
            read = lambda k: c.map(k).unmap()  # noqa: E731
        if warm:
            read(warm)
    except Exception as e:  # noqa: BLE001
        out.put((0.0, 0.0, f"setup: {e!r}"))
        return
    out.put((0.0, 0.0, None))  # ready
    for _ in range(rounds):
        try:
            go.wait(120)
        except Exception as e:  # noqa: BLE001  (a broken barrier: the bench gave up)
            out.put((0.0, 0.0, f"barrier: {e!r}"))
            return
        t0 = time.monotonic()
        err = None
        for k in [key] if isinstance(key, str) else key:
            try:
                read(k)
            except Exception as e:  # noqa: BLE001
                err = f"{k}: {e!r}"
                break
        out.put((t0, time.monotonic(), err))
    c.close()


def concurrent_reads(write, url: str, keys: list, size: int, rounds: int,
                     warm: str | None = None, how: str = "map", dev: int = 0,
                     walls: list | None = None) -> float:
    """GB/s of len(keys) processes each MAPping its key of url at once (size bytes each), the
    median round of rounds; write(j) rewrites the j-th value before each round (the readers
    wait). how="get_to_device": each copies its value into its own buffer on GPU dev instead.
    keys[i] may be a list (sustained reading): process i reads those keys one after another in
    each round, and the values are counted in order, process 0's first. walls: a list that gets
    each round's seconds, in order."""
    n = len(keys)
    nvalues = sum(1 if isinstance(k, str) else len(k) for k in keys)
    ctx = multiprocessing.get_context("spawn")  # no CUDA state inherited through fork
    go, out = ctx.Barrier(n + 1), ctx.Queue()
    procs = [ctx.Process(target=_reader, args=(url, k, warm, rounds, go, out, how, dev, size),
                         daemon=True)
             for k in keys]
    for p in procs:
        p.start()
    walls = [] if walls is None else walls
    try:
        ready = [out.get(timeout=120) for _ in range(n)]
        errs = [r[2] for r in ready if r[2]]
        assert not errs, errs
        for _ in range(rounds):
            for j in range(nvalues):
                write(j)
            go.wait(120)
            res = [out.get(timeout=120) for _ in range(n)]
            errs = [r[2] for r in res if r[2]]
            assert not errs, errs
            walls.append(max(r[1] for r in res) - min(r[0] for r in res))
    finally:
        go.abort()
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
    return nvalues * size / statistics.median(walls) / 1e9
