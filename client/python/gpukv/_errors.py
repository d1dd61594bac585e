"""gpukv's exceptions: one class per stable error code of libgpukv and the wire protocol."""

from __future__ import annotations

import builtins

from . import _gpukv

_NAMES = {code: name for code, name, _ in _gpukv.ERRORS}


class Error(Exception):
    """A gpukv error. ``code`` is the stable negative code (the same number libgpukv returns and
    the server sends), ``name`` its name ("NOTFOUND", "OOM", ...); the message is the server's
    when it sent one."""

    code: int = 0

    @property
    def name(self) -> str:
        return _NAMES.get(self.code, "UNKNOWN")

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else self.name


class ProtocolError(Error):
    """The byte stream broke (a malformed frame); the connection is closed."""

    code = -1


class NotFound(Error, KeyError):
    """No such key. The message names it; ``key`` is the key as the call was given it (None
    where the call named no single key)."""

    code = -2
    key: object = None


class Exists(Error):
    """The key exists (SET or CREATE with nx=True)."""

    code = -3


class OOM(Error):
    """The value does not fit under the server's --maxmemory or in device memory."""

    code = -4


class InvalidArgument(Error, ValueError):
    """The server (or libgpukv, before sending) refused an argument."""

    code = -5


class TooBig(Error, ValueError):
    """A key, value, metadata blob or batch over its limit."""

    code = -6


class UnknownCommand(Error):
    code = -7


class RangeError(Error, ValueError):
    """A byte range that starts past the end of the value."""

    code = -8


class Busy(Error):
    """The server has too many clients."""

    code = -9


class BackendError(Error):
    """A device or backend copy failed."""

    code = -10


class ConnectionError(Error, builtins.ConnectionError):
    """Cannot reach the server, or the connection broke."""

    code = -11


class ConnectionClosed(ConnectionError):
    """The connection is closed (by the client, the server, or a dead daemon)."""

    code = -12


class NoMemory(Error, MemoryError):
    """Out of host memory in the client."""

    code = -13


class NotSupported(Error):
    """Not available here (zero-copy over TCP, a GPU this process cannot see, ...); the message
    says why."""

    code = -14


class ShuttingDown(ConnectionError):
    """The server is stopping."""

    code = -15


class SystemCallError(Error, OSError):
    code = -16


class VersionError(Error):
    """The server does not speak this protocol version."""

    code = -17


class NoSpace(Error, ValueError):
    """The destination buffer is too small."""

    code = -18


class NoLease(Error):
    code = -19


class LeaseLimit(Error):
    """This connection holds too many leases or leased bytes."""

    code = -20


class TimeoutError(ConnectionError, builtins.TimeoutError):
    """The server did not answer within the client's timeout; the connection is closed."""

    code = -21


class AuthError(Error, PermissionError):
    """The server needs a token (set GPUKV_TOKEN or GPUKV_TOKEN_FILE), the token was wrong, or
    this user may not connect (--allow-uid / --allow-gid)."""

    code = -22


CLASSES: dict[int, type[Error]] = {
    cls.code: cls
    for cls in (
        ProtocolError, NotFound, Exists, OOM, InvalidArgument, TooBig, UnknownCommand,
        RangeError, Busy, BackendError, ConnectionError, ConnectionClosed, NoMemory,
        NotSupported, ShuttingDown, SystemCallError, VersionError, NoSpace, NoLease, LeaseLimit,
        TimeoutError, AuthError,
    )
}

_gpukv._register_errors(Error, CLASSES)
