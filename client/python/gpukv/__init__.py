"""gpukv: the Python client of gpukvd, a daemon that keeps binary values in GPU memory under
string keys.

    import gpukv
    with gpukv.Client() as c:                     # $GPUKV_URL or the default socket
        c.set("chunk/0", b"...", meta="dtype=f4")
        data = c.get("chunk/0", suffix=16)
        with c.map("chunk/0") as m:               # zero-copy, local connections
            t = torch.from_dlpack(m)              # or cupy.asarray(m), numpy.asarray(m)

It binds libgpukv (a C extension); nothing here speaks the protocol itself. The zarr store is
``gpukv.zarr.GpukvStore``.
"""

from . import _gpukv
from ._errors import (
    AuthError,
    BackendError,
    Busy,
    ConnectionClosed,
    ConnectionError,
    Error,
    Exists,
    InvalidArgument,
    LeaseLimit,
    NoLease,
    NoMemory,
    NoSpace,
    NotFound,
    NotSupported,
    OOM,
    Overflow,
    ProtocolError,
    RangeError,
    ShuttingDown,
    SystemCallError,
    TimeoutError,
    TooBig,
    Unavailable,
    UnknownCommand,
    VersionError,
)
from ._gpukv import Mapping, Value, default_socket
from .client import Client, ClientPool, Event, ListEntry, RegisteredBuffer, Watch

__version__ = "0.1.0"
#: True when this build can use CUDA (zero-copy on the cuda backend, device arrays).
HAVE_CUDA = bool(_gpukv.HAVE_CUDA)

__all__ = [
    "AuthError", "BackendError", "Busy", "Client", "ClientPool", "ConnectionClosed", "ConnectionError",
    "Error", "Event", "Exists", "HAVE_CUDA", "InvalidArgument", "LeaseLimit", "ListEntry",
    "Mapping", "NoLease", "NoMemory", "NoSpace", "NotFound", "NotSupported", "OOM", "Overflow",
    "ProtocolError", "RangeError", "RegisteredBuffer", "ShuttingDown", "SystemCallError", "TimeoutError", "TooBig",
    "Unavailable", "UnknownCommand", "Value", "VersionError", "Watch", "default_socket",
]
