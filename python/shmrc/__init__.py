"""shmrc: shared memory between processes without leaks, for Python and PyTorch.

A :class:`ShmBuf` is a shared buffer with a reference count that survives SIGKILL.
It exposes the buffer protocol (``memoryview(buf)`` is writable, ``numpy.frombuffer``
and ``torch.frombuffer`` are zero-copy). :meth:`ShmBuf.share` makes a
:class:`ShareHandle` that pickles (through ``multiprocessing`` queues, pipes, pools);
:meth:`ShmBuf.attach` turns it into the receiving process's own ``ShmBuf``.

Two strategies, named as in ``torch.multiprocessing``: ``file_descriptor`` (an
anonymous memfd whose descriptor travels with ``multiprocessing``'s fd passing; the
kernel frees it when the last holder goes) and ``file_system`` (a named segment in
``/dev/shm`` with holder slots; the user's manager, started from this package with
nothing else installed, unlinks it within milliseconds of the death of its last
holder, even a SIGKILLed one).

``shmrc.torch.install()`` makes torch's CPU tensors cross processes in shmrc memory.
The logic is the Rust library's; this package is a skin over it (``shmrc._shmrc``).

A namespace (``namespace=`` of ShmBuf, ShmPool, ls, sweep, shmrc.torch.install) is
a prefix of the job's own that starts with ``shmrc``, of at most 48 bytes of ASCII
letters, digits, ``-`` and ``_`` (e.g. ``"shmrc-train-42"``). Every argument is
checked when it is passed: a bad type is a ``TypeError``, a bad value a
``ValueError`` subclass below.

Exceptions: every failure raises a subclass of ShmrcError named after its cause,
importable from ``shmrc`` and picklable (they cross process boundaries, e.g. from
a DataLoader worker); some are builtin exceptions too (``shmrc.ERRORS`` maps every
name to its class):
"""

import ctypes
import json
import math
import numbers
import operator
import os
import sys
import weakref
from typing import Literal, TypedDict

from . import _shmrc
from ._errors import (  # noqa: F401  (the exception classes, re-exported)
    CAUSES as _CAUSES,
    BadMagicError,
    BadNamespaceError,
    CorruptedError,
    DisconnectedError,
    GoneError,
    HalfCreatedError,
    HoldersFullError,
    InvalidArgumentError,
    MalformedError,
    ManagerRefusedError,
    ManagerStartError,
    ManagerTimeoutError,
    NoManagerError,
    NoSpaceError,
    NotHolderError,
    NotSharedMemoryError,
    OsError,
    OtherPidNamespaceError,
    OtherUserError,
    OutOfBoundsError,
    OutsideNamespaceError,
    ShmrcError,
    SocketPathTooLongError,
    StaleError,
    TimeNamespaceError,
    TimedOutError,
    TooManyFdsError,
    TruncatedError,
    UnknownStrategyError,
    UnsafeRuntimeDirError,
    WrongStrategyError,
    WrongVersionError,
)
from ._errors import make as _make_error

__version__ = _shmrc.__version__

#: The sharing strategies, by torch's names (for type annotations).
Strategy = Literal["file_descriptor", "file_system"]

__doc__ += "".join(
    "\n    %s%s: %s" % (name, " (%s)" % base.__name__ if base else "", doc)
    for name, base, doc, _ in _CAUSES
)

#: Every exception class, by name: the causes of ``shmrc::Error`` (and ShmrcError).
ERRORS = {"ShmrcError": ShmrcError}
ERRORS.update((name, globals()[name]) for name, _, _, _ in _CAUSES)

# What `from shmrc import *` and help(shmrc) show: the API and the base exception.
# The cause classes are listed in the module docs (each one's page, help(shmrc.X),
# repeats the builtin's inherited methods: dozens of lines each).
__all__ = [
    "ShmBuf",
    "ShmPool",
    "ShareHandle",
    "set_sharing_strategy",
    "get_sharing_strategy",
    "get_all_sharing_strategies",
    "sweep",
    "ls",
    "manager_status",
    "ShmrcError",
    "ERRORS",
]


def _type_name(value):
    return type(value).__name__


def _check_size(value, what, minimum):
    """``value`` as an int >= ``minimum`` (``TypeError`` for a non-integer,
    :class:`InvalidArgumentError` below the minimum)."""
    if isinstance(value, bool):
        raise TypeError("%s must be an int, not bool" % what)
    try:
        number = operator.index(value)
    except TypeError:
        raise TypeError("%s must be an int, not %s" % (what, _type_name(value))) from None
    if number < minimum:
        raise InvalidArgumentError("%s must be at least %d, not %d" % (what, minimum, number))
    return number


def _check_strategy(strategy, allow_none=True):
    """``strategy``: one of :func:`get_all_sharing_strategies` (or ``None``)."""
    if strategy is None and allow_none:
        return None
    if not isinstance(strategy, str):
        raise TypeError(
            "strategy must be %s, not %s"
            % ("a str or None" if allow_none else "a str", _type_name(strategy))
        )
    known = _shmrc.get_all_sharing_strategies()
    if strategy not in known:
        raise UnknownStrategyError(
            "unknown sharing strategy %r (known: %s)" % (strategy, ", ".join(sorted(known)))
        )
    return strategy


def _check_namespace(namespace):
    """``namespace``: ``None`` or a prefix by the library's rule (it starts with
    ``shmrc``, at most 48 bytes of ASCII letters, digits, ``-`` and ``_``)."""
    if namespace is None:
        return None
    if not isinstance(namespace, str):
        raise TypeError("namespace must be a str or None, not %s" % _type_name(namespace))
    _shmrc.check_namespace(namespace)
    return namespace


def _check_flag(value, what):
    if not isinstance(value, bool):
        raise TypeError("%s must be True or False, not %r" % (what, value))
    return value


def _check_seconds(value, what):
    # Any real number (int, float, numpy's, Fraction), not a bool or a str.
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError("%s must be a number of seconds, not %s" % (what, _type_name(value)))
    if not math.isfinite(value) or value < 0:
        raise InvalidArgumentError(
            "%s must be a finite number of seconds >= 0, not %r" % (what, value)
        )
    return float(value)


def _manager_command():
    """The command that runs the manager from this very package: the interpreter
    running now, importing shmrc from where this copy lives."""
    parent = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    code = (
        "import sys; sys.path.insert(0, %r); "
        "import shmrc._manager as m; sys.exit(m.main(sys.argv[1:]))" % parent
    )
    return sys.executable, ["-c", code]


if sys.executable:
    _program, _args = _manager_command()
    _shmrc.set_manager_command(_program, _args)


def set_sharing_strategy(strategy):
    """Sets the strategy (``"file_descriptor"`` or ``"file_system"``) of buffers created
    from now on in this process, as ``torch.multiprocessing.set_sharing_strategy``.
    An unknown name raises :class:`UnknownStrategyError`."""
    _shmrc.set_sharing_strategy(_check_strategy(strategy, allow_none=False))


def get_sharing_strategy():
    """The strategy new buffers are created with (``$SHMRC_SHARING_STRATEGY``, else
    ``"file_descriptor"``, until set)."""
    return _shmrc.get_sharing_strategy()


def get_all_sharing_strategies():
    """The strategies this system supports, as a set of torch's names."""
    return set(_shmrc.get_all_sharing_strategies())


def ls(namespace=None):
    """This user's shmrc segments (of ``namespace``, or of every shmrc namespace), with
    their holders, the publish/subscribe services (each namespace's ``services``: name,
    publisher and whether it lives, subscribers, samples, size, state) and the manager:
    the same data as ``shmrc ls --json``."""
    return json.loads(_shmrc.ls_json(_check_namespace(namespace)))


def sweep(namespace=None, dry_run=False):
    """Reclaims dead holders' slots and unlinks every segment nobody live holds (in
    ``namespace``, or every shmrc namespace of this user); returns what it did, as
    ``shmrc sweep --json``. The manager does this by itself within milliseconds of a
    death; call it when the manager is off."""
    return json.loads(
        _shmrc.sweep_json(_check_namespace(namespace), _check_flag(dry_run, "dry_run"))
    )


def manager_status():
    """The running manager's pid, counters and clients (``shmrc status --json``);
    :class:`NoManagerError` when none runs (this never starts one)."""
    return json.loads(_shmrc.manager_status_json())


class ShareHandle:
    """A buffer on its way to another process: pickle it (any ``multiprocessing``
    channel), then :meth:`ShmBuf.attach` it there, once.

    A file_system handle is bytes that carry an in-flight reference (the buffer stays
    alive while it travels, even if the sender drops its own). A file_descriptor handle
    owns a duplicate of the memfd, passed with ``multiprocessing``'s descriptor passing
    (``multiprocessing.reduction.DupFd``) when pickled.
    """

    __slots__ = ("strategy", "nbytes", "_bytes", "_fd", "_dupfd", "_spent", "__weakref__")

    def __init__(self, *args, **kwargs):
        # A handle owns a descriptor or an in-flight reference that the library made:
        # built from a caller's values, it would close a descriptor the caller owns.
        raise TypeError(
            "ShareHandle is not made directly: ShmBuf.share() makes one, and unpickling "
            "it in another process makes that process's copy"
        )

    @classmethod
    def _of(cls, strategy, nbytes, data, fd=None, dupfd=None):
        """A handle of the library's own parts (``fd``: a descriptor the library
        opened, which the handle then owns)."""
        self = object.__new__(cls)
        self.strategy = strategy
        self.nbytes = nbytes
        self._bytes = data
        self._fd = fd
        self._dupfd = dupfd
        self._spent = False
        return self

    def _take(self):
        if self._spent:
            raise _make_error(
                "InvalidArgumentError",
                "this handle was already attached or sent: call ShmBuf.share() again",
            )
        self._spent = True

    def attach(self):
        """Attaches the buffer in this process (see :meth:`ShmBuf.attach`)."""
        self._take()
        if self.strategy == "file_system":
            return _wrap(_shmrc.Buf.attach_bytes(self._bytes))
        fd, self._fd = self._fd, None
        if fd is None:
            fd = _receive_fd(self._dupfd)
        return _wrap(_shmrc.Buf.attach_fd(self._bytes, fd))

    def __reduce__(self):
        self._take()
        if self.strategy == "file_system":
            return (_handle_from_bytes, (self.nbytes, self._bytes))
        from multiprocessing import reduction

        fd, self._fd = self._fd, None
        try:
            dupfd = reduction.DupFd(fd)
        finally:
            os.close(fd)
        return (_handle_from_dupfd, (self.nbytes, self._bytes, dupfd))

    def __del__(self):
        if self._spent:
            return
        self._spent = True
        try:
            if self._fd is not None:
                # Give the in-flight reference back (a pool's memfd has one; a plain
                # memfd's handle only closes its descriptor).
                fd, self._fd = self._fd, None
                _shmrc.Buf.drop_fd(self._bytes, fd)
            elif self.strategy == "file_system" and self._dupfd is None:
                # As above, for a file_system handle.
                _shmrc.Buf.attach_bytes(self._bytes)
        except Exception:  # noqa: BLE001 (a finalizer must not raise)
            pass

    def __repr__(self):
        return "ShareHandle(%s, %d bytes)" % (self.strategy, self.nbytes)


def _handle_from_bytes(nbytes, data):
    return ShareHandle._of("file_system", nbytes, data)


def _handle_from_dupfd(nbytes, data, dupfd):
    return ShareHandle._of("file_descriptor", nbytes, data, dupfd=dupfd)


def _receive_fd(dupfd):
    """The descriptor behind ``dupfd``; at the open-file limit, a
    :class:`TooManyFdsError` that says so (instead of "received 0 items of ancdata" or
    a bare EMFILE)."""
    try:
        return dupfd.detach()
    except (OSError, RuntimeError) as e:
        import errno
        import resource

        if isinstance(e, OSError) and e.errno not in (errno.EMFILE, errno.ENFILE):
            raise
        if isinstance(e, RuntimeError) and "ancdata" not in str(e):
            raise
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        raise _make_error(
            "TooManyFdsError",
            "cannot receive a file_descriptor buffer: this process is at its open-file "
            "limit (RLIMIT_NOFILE %d soft, %d hard; %s). Raise the limit (ulimit -n), "
            "hold fewer buffers, or use the file_system strategy "
            "(shmrc.set_sharing_strategy('file_system'))" % (soft, hard, e)
        ) from e


class ShmBuf:
    """A shared-memory buffer of ``nbytes`` zero-filled bytes.

    ``ShmBuf(nbytes, strategy=None, namespace=None)``: ``strategy`` is
    ``"file_descriptor"`` or ``"file_system"`` (``None``: :func:`get_sharing_strategy`);
    ``namespace`` a prefix of your own for file_system segments (``None``: ``shmrc``),
    so that :func:`ls` and :func:`sweep` can look at just yours.

    The buffer protocol gives the memory itself: ``memoryview(buf)`` (writable; its
    format is ctypes' ``<B``, so index it through :meth:`view`, which is
    ``memoryview(buf).cast("B")``), ``numpy.frombuffer(buf, dtype)``,
    ``torch.frombuffer(buf, dtype=...)``; each keeps the buffer alive. ``len(buf)`` is its size. The reference is released
    when the last Python reference to the buffer (or to a view of it) goes.

    Pickling a ``ShmBuf`` through ``multiprocessing`` shares it (``share()`` on the
    way out, ``attach`` on the way in).
    """

    # The concrete class of each buffer is a subclass of this one and of a ctypes
    # byte array of its size (made once per size): ctypes gives the buffer protocol on
    # every CPython >= 3.9 under the stable ABI, and the instance keeps the Rust buffer
    # (``_buf``) alive as long as any view of it lives.
    __slots__ = ()

    def __new__(cls, nbytes, strategy=None, namespace=None):
        nbytes = _check_size(nbytes, "nbytes", 1)
        strategy = _check_strategy(strategy)
        namespace = _check_namespace(namespace)
        return _wrap(_shmrc.Buf(nbytes, strategy, namespace))

    def __init__(self, *args, **kwargs):
        pass

    @staticmethod
    def attach(handle):
        """The buffer ``handle`` (from :meth:`share` in another process, unpickled here)
        points at, held by this process. A handle whose buffer is gone raises
        :class:`GoneError`; each handle attaches once."""
        return handle.attach()

    def share(self):
        """A :class:`ShareHandle` for one other process (pickle it to send it)."""
        if self._buf.strategy == "file_system":
            return ShareHandle._of("file_system", len(self), self._buf.share_bytes())
        data, fd = self._buf.share_fd()
        return ShareHandle._of("file_descriptor", len(self), data, fd=fd)

    def view(self):
        """A writable ``memoryview`` of the bytes, format ``B`` (zero-copy)."""
        return memoryview(self).cast("B")

    @property
    def strategy(self):
        """``"file_descriptor"`` or ``"file_system"``."""
        return self._buf.strategy

    @property
    def name(self):
        """The segment's name in ``/dev/shm`` (file_system), else ``None``."""
        return self._buf.name

    @property
    def address(self):
        """The address of the first byte in this process."""
        return self._buf.address

    @property
    def generation(self):
        """Which use of a :class:`ShmPool`'s recycled segment this is (0: its first,
        or never recycled)."""
        return self._buf.generation

    def __reduce__(self):
        return (ShmBuf.attach, (self.share(),))

    def __repr__(self):
        where = (" %s" % self.name) if self.name else ""
        return "ShmBuf(%d bytes, %s%s)" % (len(self), self.strategy, where)


class PoolStats(TypedDict):
    """What :meth:`ShmPool.stats` returns."""

    created: int
    recycled: int
    given_back: int
    idle: int
    idle_bytes: int
    lent: int
    in_use: int


class ShmPool:
    """Recycled buffers, the way data loaders reuse shared memory.

    ``ShmPool(namespace=None, max_idle_buffers=64, max_idle_bytes=1 << 30,
    idle_timeout=10.0, strategy="file_system")``: :meth:`get` hands out a :class:`ShmBuf`
    whose segment was used before and that no process holds any more (no new segment,
    no page reservation), else a new one. ``strategy`` is ``"file_system"`` or
    ``"file_descriptor"`` (a pool's memfds carry holder slots, so the pool knows when
    every process it shared one with has let go; ``None``: :func:`get_sharing_strategy`
    now). A buffer goes back to the pool when its last Python reference (and every view
    of it) goes here *and* every process it was shared with has let go; a handle of an
    earlier use then raises :class:`StaleError` instead of reading the new use's bytes
    (``generation`` tells the uses apart). A recycled buffer keeps its previous bytes
    (``get(nbytes, zero=True)`` clears them). A buffer this process let go of but
    another process still holds is *lent*: it is not reused, and does not count as
    idle, until that process lets go (or dies: the next :meth:`get` that finds no idle
    buffer reclaims a dead holder's slot). At most ``max_idle_buffers`` buffers and
    ``max_idle_bytes`` bytes are kept idle; none, idle or lent, longer than
    ``idle_timeout`` seconds (giving back a lent one leaves it to the process that holds
    it). Only the process that made a pool recycles its buffers (a forked child gets
    new ones: make a pool per process).
    """

    def __init__(
        self,
        namespace=None,
        max_idle_buffers=64,
        max_idle_bytes=1 << 30,
        idle_timeout=10.0,
        strategy="file_system",
    ):
        self._pool = _shmrc.Pool(
            _check_strategy(strategy),
            _check_namespace(namespace),
            _check_size(max_idle_buffers, "max_idle_buffers", 0),
            _check_size(max_idle_bytes, "max_idle_bytes", 0),
            _check_seconds(idle_timeout, "idle_timeout"),
        )

    def get(self, nbytes, zero=False):
        """A :class:`ShmBuf` of ``nbytes`` bytes, recycled when one is free."""
        nbytes = _check_size(nbytes, "nbytes", 1)
        zero = _check_flag(zero, "zero")
        buf = _wrap(self._pool.get(nbytes))
        if zero:
            ctypes.memset(buf.address, 0, nbytes)
        return buf

    def trim(self):
        """Gives back idle buffers past the limits now; returns how many."""
        return self._pool.trim()

    def stats(self):
        """``{"created", "recycled", "given_back", "idle", "idle_bytes", "lent", "in_use"}``:
        ``idle`` (and its bytes) nobody holds any more, ``lent`` another process still
        holds, ``in_use`` this process uses."""
        keys = ("created", "recycled", "given_back", "idle", "idle_bytes", "lent", "in_use")
        return dict(zip(keys, self._pool.stats()))

    def __repr__(self):
        return "ShmPool(%r)" % (self.stats(),)


_SIZED = weakref.WeakValueDictionary()


def _sized_class(nbytes):
    cls = _SIZED.get(nbytes)
    if cls is None:
        cls = type("ShmBuf", (ShmBuf, ctypes.c_ubyte * nbytes), {"__module__": __name__})
        _SIZED[nbytes] = cls
    return cls


def _wrap(raw):
    """The Python ``ShmBuf`` over the Rust buffer ``raw``."""
    buf = _sized_class(len(raw)).from_address(raw.address)
    buf._buf = raw
    return buf
