"""Arrays from other libraries: where their bytes are, through the CUDA array interface
(CuPy, PyTorch, Numba) or DLPack (any __dlpack__ producer)."""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from typing import Any

from . import _gpukv

KDL_CPU, KDL_CUDA, KDL_CUDA_HOST, KDL_CUDA_MANAGED = 1, 2, 3, 13


@dataclass
class DeviceMemory:
    """Contiguous device memory of an array: its address, size and what keeps it alive."""

    ptr: int
    nbytes: int
    stream: int | None  # a stream the producer asked us to wait for (CAI v3), or None
    owner: Any  # the array, or the DeviceView that must be closed after use

    def close(self) -> None:
        if isinstance(self.owner, _gpukv.DeviceView):
            self.owner.close()

    def __enter__(self) -> DeviceMemory:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait(self) -> None:
        """Waits for the stream the producer named, so the bytes are complete."""
        if self.stream not in (None, 0):
            _gpukv.stream_synchronize(self.stream)


def wait_all(devs: list[DeviceMemory]) -> None:
    """Waits for the streams the producers of devs named, each stream once (arrays a library
    made one after another name the same stream)."""
    for stream in {d.stream for d in devs if d.stream not in (None, 0)}:
        _gpukv.stream_synchronize(stream)


def _dlpack_device_type(obj: Any) -> int | None:
    """The DLPack device type obj's memory lives on, or None when it is no DLPack producer."""
    dlpack_device = getattr(obj, "__dlpack_device__", None)
    if dlpack_device is None or not hasattr(obj, "__dlpack__"):
        return None
    return dlpack_device()[0]


def _capsule(obj: Any) -> Any:
    """obj's DLPack capsule, versioned when the producer offers it (it can say read-only)."""
    try:
        return obj.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer from before DLPack 1.0 takes no max_version
        return obj.__dlpack__()


def _cai_memory(obj: Any, cai: dict, writable: bool) -> DeviceMemory:
    shape = tuple(cai["shape"])
    typestr = cai["typestr"]
    itemsize = int(typestr[2:])
    n = math.prod(shape)
    strides = cai.get("strides")
    if strides is not None and n:
        want = itemsize
        for dim, stride in zip(reversed(shape), reversed(strides)):
            if dim != 1 and stride != want:
                raise ValueError("the array must be C-contiguous")
            want *= dim
    ptr, readonly = cai["data"]
    if writable and readonly:
        raise ValueError("the array is read-only")
    stream = cai.get("stream") if cai.get("version", 0) >= 3 else None
    return DeviceMemory(int(ptr or 0), n * itemsize, stream, obj)


_cupy_ndarray: type | None = None


def _cupy_memory(obj: Any) -> DeviceMemory | None:
    """A CuPy array's memory read from its attributes, as its CUDA array interface would give
    it (the current stream; 1 for the legacy default one), without building the interface's
    dict: a zarr write of many GPU chunks asks for each. None when obj is no CuPy array."""
    global _cupy_ndarray
    if _cupy_ndarray is None:
        cupy = sys.modules.get("cupy")
        if cupy is None:
            return None
        _cupy_ndarray = cupy.ndarray
    if type(obj) is not _cupy_ndarray:
        return None
    if not obj.flags.c_contiguous and obj.size > 1:
        raise ValueError("the array must be C-contiguous")
    stream = sys.modules["cupy"].cuda.get_current_stream().ptr or 1
    return DeviceMemory(obj.data.ptr, obj.nbytes, stream, obj)


def device_memory(obj: Any, *, writable: bool = False) -> DeviceMemory | None:
    """The CUDA device memory of obj (C-contiguous), or None when obj is not a device array.
    Raises ValueError for a device array that is not contiguous (or is read-only when
    writable is asked)."""
    if not writable:
        mem = _cupy_memory(obj)
        if mem is not None:
            return mem
    try:
        cai = obj.__cuda_array_interface__
    except Exception:  # AttributeError, or what a CPU torch tensor raises
        cai = None
    if cai is not None:
        return _cai_memory(obj, cai, writable)
    if _dlpack_device_type(obj) not in (KDL_CUDA, KDL_CUDA_MANAGED):
        return None
    view = _gpukv.DeviceView(_capsule(obj))
    if writable and view.readonly:
        view.close()
        raise ValueError("the array is read-only")
    return DeviceMemory(view.ptr, view.nbytes, None, view)


def host_view(obj: Any) -> Any | None:
    """A buffer-protocol view of a DLPack producer's host memory (e.g. a CPU torch tensor), or
    None. The caller closes it."""
    if _dlpack_device_type(obj) not in (KDL_CPU, KDL_CUDA_HOST):
        return None
    return _gpukv.DeviceView(_capsule(obj))
