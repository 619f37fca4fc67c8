"""The exception classes of ``shmrc``: one per cause of the Rust library's
``shmrc::Error``, each a subclass of :class:`ShmrcError` and, where a builtin says the
same, of that builtin too (``NoSpaceError`` is an ``OSError`` with ``errno.ENOSPC``, a
bad argument a ``ValueError``, ...), so ``except OSError`` and ``except ValueError``
catch what Python code expects them to.

They are plain Python classes whose ``__module__`` is ``shmrc``, so pickle finds them
as ``shmrc.NoSpaceError`` in any process (torch sends an exception raised in a
``DataLoader`` worker to the main process pickled). This module owns the classes and
the one factory, :func:`make`, that the Rust extension and the package raise them
through; it imports nothing of the extension.
"""

import errno as _errno

__all__ = ["ShmrcError"]


class ShmrcError(Exception):
    """Every shmrc failure (the Rust library's ``shmrc::Error``); subclasses name the
    cause, and some are builtin exceptions too (see ``shmrc.ERRORS``)."""


def _cause(name, builtin, doc, fixed_errno=None):
    """Declares the class ``name``: a subclass of :class:`ShmrcError` (and of
    ``builtin``, if any), registered in this module."""
    bases = (ShmrcError,) if builtin is None else (ShmrcError, builtin)
    cls = type(name, bases, {"__doc__": doc, "__module__": "shmrc", "__qualname__": name})
    globals()[name] = cls
    __all__.append(name)
    _FIXED_ERRNO[name] = fixed_errno
    return cls


# name -> the errno every instance carries (OSError classes whose cause is one errno).
_FIXED_ERRNO = {}
ShmrcError.__module__ = "shmrc"

# (class name, builtin base or None, doc, fixed errno): the table PYTHON.md shows.
CAUSES = [
    ("GoneError", None, "The segment is gone (unlinked: every holder released it).", None),
    ("StaleError", None, "The handle is of an earlier use of a segment that a pool has recycled since.", None),
    ("HalfCreatedError", None, "The segment's creator died before publishing its header.", None),
    ("TruncatedError", None, "The segment is shorter than its header says.", None),
    ("BadMagicError", None, "The object is no shmrc segment.", None),
    ("WrongVersionError", None, "The segment or handle has another layout version.", None),
    ("OtherUserError", PermissionError, "The segment belongs to another user (errno EACCES).", _errno.EACCES),
    ("OtherPidNamespaceError", None, "The segment was made in another pid namespace.", None),
    ("CorruptedError", None, "The segment's header is corrupted.", None),
    ("NoSpaceError", OSError, "/dev/shm (or the memory cgroup) has no room for the buffer (errno ENOSPC).", _errno.ENOSPC),
    ("TooManyFdsError", OSError, "This process is at its open-file limit: a descriptor could not be received (errno EMFILE).", _errno.EMFILE),
    ("HoldersFullError", None, "Every holder slot of the segment is held by a live process.", None),
    ("OutsideNamespaceError", ValueError, "The name lies outside this user's shmrc namespaces.", None),
    ("BadNamespaceError", ValueError, "Not a valid namespace prefix (it must start with 'shmrc', be at most 48 bytes, of ASCII letters, digits, '-' and '_').", None),
    ("MalformedError", ValueError, "Bytes that are no shmrc handle or message.", None),
    ("OutOfBoundsError", IndexError, "A read or write outside the buffer.", None),
    ("InvalidArgumentError", ValueError, "An argument out of range.", None),
    ("UnknownStrategyError", ValueError, "A sharing strategy name that is not one of get_all_sharing_strategies().", None),
    ("WrongStrategyError", ValueError, "An operation that needs the other sharing strategy.", None),
    ("NotHolderError", None, "This process does not hold the buffer (inherited across fork).", None),
    ("DisconnectedError", ConnectionError, "The peer closed the connection.", None),
    ("OsError", OSError, "A system call failed; errno is its error.", None),
    ("TimedOutError", TimeoutError, "Nothing arrived within the time given (errno ETIMEDOUT).", _errno.ETIMEDOUT),
    ("UnsafeRuntimeDirError", None, "The manager's runtime directory cannot be trusted.", None),
    ("SocketPathTooLongError", None, "The manager's socket path is too long.", None),
    ("NoManagerError", None, "No manager runs.", None),
    ("ManagerStartError", None, "The manager could not be started.", None),
    ("ManagerRefusedError", None, "The manager refused this process.", None),
    ("ManagerTimeoutError", TimeoutError, "The manager did not answer within 10 s: it is stopped or overloaded (errno ETIMEDOUT).", _errno.ETIMEDOUT),
    ("NotSharedMemoryError", ValueError, "A descriptor received as a buffer is not shared memory (a pipe, a socket, a device, a file on a disk).", None),
    ("TimeNamespaceError", None, "This process's time-namespace shift is not known to the tick, so it may hold no segment with slots.", None),
]

for _name, _builtin, _doc, _fixed in CAUSES:
    _cause(_name, _builtin, _doc, _fixed)
del _name, _builtin, _doc, _fixed


def make(cause, message, os_errno=None):
    """The exception of class ``cause`` (a name in :data:`CAUSES`, or
    ``"ShmrcError"``) with ``message``. An ``OSError`` class gets its fixed errno, else
    ``os_errno`` (``OsError``: the failed call's), as ``OSError(errno, message)``
    would; the others get ``message`` alone."""
    cls = globals()[cause]
    if not issubclass(cls, OSError):
        return cls(message)
    number = _FIXED_ERRNO.get(cause) or os_errno
    if number is None:
        return cls(message)
    return cls(number, message)
