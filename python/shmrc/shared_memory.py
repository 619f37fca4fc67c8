"""A crash-safe drop-in for :mod:`multiprocessing.shared_memory`.

``SharedMemory(name=None, create=False, size=0)`` has the stdlib's signature,
attributes (``buf``, ``name``, ``size``) and methods (``close()``, ``unlink()``), and
its errors (``FileNotFoundError`` for a missing name, ``FileExistsError`` for a taken
one, ``ValueError`` for a bad size). What differs: the memory is a shmrc file_system
segment, freed when its last holder closes it *or dies* (SIGKILL included; the user's
manager reclaims a dead holder's reference within milliseconds), with no resource
tracker process and no "leaked shared_memory objects" warnings.

Names. The segment itself lives in ``/dev/shm`` under a shmrc name of the namespace
``$SHMRC_SHARED_MEMORY_NAMESPACE`` (default ``shmrc-sm``); the user's name is a file
in the *name index*, ``<runtime dir>/shared_memory/<namespace>/<name>``, in the user's
private runtime directory (``0700``; ``$SHMRC_RUNTIME_DIR``, ``$XDG_RUNTIME_DIR/shmrc``
or ``/tmp/shmrc-<uid>``). The file holds the segment's *locator*: the bytes of a
shmrc handle without an in-flight reference (``ShmBuf.locator()`` in Rust), which any
process of the user attaches with ``ShareHandle::from_bytes`` and ``ShmBuf::attach``
while the segment lives. An entry whose segment is gone is judged by the lookup
itself: attaching it answers "gone", and the entry is removed
(:func:`prune` removes every such entry at once).

``unlink()`` removes the name; processes that hold the memory keep it until they
close it or die.

``ShareableList`` is CPython's own class, run over this module's ``SharedMemory``.
"""

import errno
import fcntl
import operator
import os
import secrets
import stat

from . import GoneError, ShmBuf, ShmrcError, _check_namespace, _make_error, _shmrc

__all__ = ["SharedMemory", "ShareableList", "prune"]

_USE_POSIX = True
_O_CREX = os.O_CREAT | os.O_EXCL
# As the stdlib's: names made here are '/psm_' and 8 hex digits (the leading slash is
# the stdlib's POSIX convention: ``_name`` has it, ``name`` does not).
_SHM_SAFE_NAME_LENGTH = 14
_SHM_NAME_PREFIX = "/psm_"

#: The environment variable that names the shmrc namespace of new segments and of
#: the name index (default :data:`DEFAULT_NAMESPACE`).
NAMESPACE_ENV = "SHMRC_SHARED_MEMORY_NAMESPACE"
DEFAULT_NAMESPACE = "shmrc-sm"
_NAME_MAX = 255
# The longest entry read: a locator is at most 74 + 255 bytes (src/handle.rs).
_MAX_ENTRY = 4096


def _make_filename():
    "A random name for a new block (as the stdlib's)."
    nbytes = (_SHM_SAFE_NAME_LENGTH - len(_SHM_NAME_PREFIX)) // 2
    return _SHM_NAME_PREFIX + secrets.token_hex(nbytes)


def _namespace():
    return _check_namespace(os.environ.get(NAMESPACE_ENV) or DEFAULT_NAMESPACE)


_INDEX_DIRS = {}


def _index_dir(namespace, make=False):
    """The name index of ``namespace`` (made ``0700`` if missing when ``make``)."""
    key = (
        namespace,
        os.environ.get("SHMRC_RUNTIME_DIR"),
        os.environ.get("XDG_RUNTIME_DIR"),
    )
    path = _INDEX_DIRS.get(key)
    if path is None:
        path = os.path.join(os.fsdecode(_shmrc.runtime_dir()), "shared_memory", namespace)
        _INDEX_DIRS[key] = path
    if make:
        _make_dirs(path)
    return path


def _make_dirs(path):
    """``path`` and its parent (``shared_memory``), each ``0700`` (``os.makedirs``
    gives a parent it makes the default mode)."""
    for directory in (os.path.dirname(path), path):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:
            pass


def _check_name(name):
    """The user's ``name`` as a file name of the index: a non-empty str of at most 255
    bytes (UTF-8) with no '/' or NUL, not '.' or '..'."""
    if not isinstance(name, str):
        raise TypeError("name must be a str or None, not %s" % type(name).__name__)
    if not name or name in (".", "..") or "/" in name or "\0" in name:
        raise ValueError(
            "invalid shared memory name %r: it must be non-empty, not '.' or '..', and "
            "contain no '/' or NUL (a leading '/' is allowed)" % name
        )
    if len(name.encode("utf-8", "surrogateescape")) > _NAME_MAX:
        raise ValueError(
            "shared memory name %r is longer than %d bytes" % (name[:32] + "...", _NAME_MAX)
        )
    return name


def _not_found(name):
    return FileNotFoundError(
        errno.ENOENT, "no shared memory block named %r" % name, name
    )


class _Locked:
    """The index's lock (``.lock`` in it, flock): held by whoever removes an entry,
    so that an entry is removed only while it is still the one judged."""

    def __init__(self, directory):
        self._path = os.path.join(directory, ".lock")

    def __enter__(self):
        self._fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        fcntl.flock(self._fd, fcntl.LOCK_EX)
        return self

    def __exit__(self, *exc):
        os.close(self._fd)


def _read_entry(path):
    """The locator in the entry at ``path`` (``FileNotFoundError`` if none). An entry
    that is no regular file (a symbolic link is not followed) reads as ``b""``, which
    no block's locator equals."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        if e.errno == errno.ELOOP:
            return b""
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return b""
        return os.read(fd, _MAX_ENTRY)
    finally:
        os.close(fd)


def _remove_if(directory, name, locator):
    """Removes the entry ``name`` if it still holds ``locator``; whether it did."""
    path = os.path.join(directory, name)
    try:
        with _Locked(directory):
            if _read_entry(path) != locator:
                return False
            os.unlink(path)
            return True
    except FileNotFoundError:  # no such entry, or no index at all
        return False


def _attach_entry(directory, name):
    """(raw buffer, locator) of the live block ``name``; ``FileNotFoundError`` when
    there is none (a stale entry is removed on the way)."""
    try:
        locator = _read_entry(os.path.join(directory, name))
    except FileNotFoundError:
        raise _not_found(name) from None
    try:
        return _shmrc.Buf.attach_bytes(locator), locator
    except GoneError:
        _remove_if(directory, name, locator)
        raise _not_found(name) from None
    except ShmrcError as e:
        # Not a block's locator (written by something else, or of another shmrc
        # version): the same cause, naming the entry.
        raise _make_error(
            type(e).__name__,
            "the name index entry %s is not a usable shmrc locator: %s"
            % (os.path.join(directory, name), e),
            getattr(e, "errno", None),
        ) from e


def _publish(directory, name, locator):
    """Adds the entry ``name`` -> ``locator`` atomically (a temporary file linked in:
    a reader never sees a partial entry, and a taken name fails the link); ``False``
    if the name is taken by a live block (a stale entry is removed and the link tried
    again)."""
    path = os.path.join(directory, name)
    tmp = os.path.join(directory, ".tmp-%d-%s" % (os.getpid(), secrets.token_hex(8)))
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    except FileNotFoundError:  # no index yet (or it was removed)
        _make_dirs(directory)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.write(fd, locator)
        finally:
            os.close(fd)
        while True:
            try:
                os.link(tmp, path)
                return True
            except FileExistsError:
                pass
            if not _taken(directory, name):
                continue  # stale (now removed) or removed meanwhile: try again
            return False
    finally:
        os.unlink(tmp)


def _taken(directory, name):
    """Whether the entry ``name`` is a live block's (or something that is not a block's
    entry at all: the name is taken all the same, and nothing here removes or
    replaces what it did not make); a stale entry is removed."""
    try:
        raw, _ = _attach_entry(directory, name)
    except FileNotFoundError:
        return False
    except ShmrcError as e:
        raise FileExistsError(errno.EEXIST, "the name %r is taken: %s" % (name, e), name) from e
    del raw
    return True


def prune(namespace=None):
    """Removes every entry of the name index (of ``namespace``, default the current
    one) whose block is gone, and returns their names; also removes the temporary
    files of creates whose process died midway."""
    namespace = _check_namespace(namespace) if namespace is not None else _namespace()
    directory = _index_dir(namespace)
    removed = []
    try:
        names = sorted(os.listdir(directory))
    except FileNotFoundError:
        return removed
    for name in names:
        if name.startswith(".tmp-"):
            # A create's temporary file, left if its process died between making
            # it and removing it.
            try:
                pid = int(name.split("-")[1])
                os.kill(pid, 0)
            except ProcessLookupError:
                try:
                    os.unlink(os.path.join(directory, name))
                except FileNotFoundError:
                    pass
            except (ValueError, IndexError, PermissionError):
                pass
            continue
        if name.startswith("."):
            continue
        try:
            raw, _ = _attach_entry(directory, name)
        except FileNotFoundError:
            removed.append(name)
            continue
        del raw
    return removed


class SharedMemory:
    """A shared memory block, created or attached by name: see the module's docs.

    ``SharedMemory(name=None, create=False, size=0)``: ``create=True`` makes a new
    block of ``size`` (> 0) zero bytes under ``name`` (``None``: a random free name),
    ``FileExistsError`` if a live block has that name; ``create=False`` attaches the
    block named ``name`` (``size`` is ignored), ``FileNotFoundError`` if none lives.
    """

    _name = None
    _raw = None
    _buf = None
    _size = 0
    _locator = None
    _namespace = None
    _flags = os.O_RDWR
    _mode = 0o600
    _prepend_leading_slash = True

    def __init__(self, name=None, create=False, size=0):
        self._open(name, create, size, _namespace())

    def _open(self, name, create, size, namespace):
        if isinstance(size, bool):
            raise TypeError("'size' must be an int, not bool")
        try:
            size = operator.index(size)
        except TypeError:
            raise TypeError("'size' must be an int, not %s" % type(size).__name__) from None
        if size < 0:
            raise ValueError("'size' must be a positive integer")
        if create:
            self._flags = _O_CREX | os.O_RDWR
            if size == 0:
                raise ValueError("'size' must be a positive number different from zero")
        if name is None and not self._flags & os.O_EXCL:
            raise ValueError("'name' can only be None if create=True")
        directory = _index_dir(namespace)
        if name is not None:
            if not isinstance(name, str):
                _check_name(name)
            shown = name[1:] if name.startswith("/") else name
            _check_name(shown)
        raw = None
        if not self._flags & os.O_CREAT:
            raw, self._locator = _attach_entry(directory, shown)
            full = "/" + shown
        elif not self._flags & os.O_EXCL:
            # O_CREAT alone (a subclass's _flags, as the stdlib allows): attach the
            # live block of that name, else create it.
            try:
                raw, self._locator = _attach_entry(directory, shown)
                full = "/" + shown
            except FileNotFoundError:
                if size == 0:
                    raise
        if raw is None:
            raw = ShmBuf(size, "file_system", namespace)._buf
            locator = raw.locator()
            try:
                if name is not None:
                    if not _publish(directory, shown, locator):
                        raise FileExistsError(
                            errno.EEXIST, "a shared memory block named %r exists" % shown, shown
                        )
                    full = "/" + shown
                else:
                    while True:
                        full = _make_filename()
                        if _publish(directory, full.lstrip("/"), locator):
                            break
            except BaseException:
                # The new block goes now, not with the traceback's frame.
                del raw
                raise
            self._locator = locator
        self._name = full
        self._namespace = namespace
        self._size = len(raw)
        self._raw = raw
        self._buf = memoryview(_wrap(raw)).cast("B")

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (a finalizer must not raise)
            pass

    def __reduce__(self):
        return (_rebuild, (self.__class__, self.name, self.size, self._namespace))

    def __repr__(self):
        return f"{self.__class__.__name__}({self.name!r}, size={self.size})"

    @property
    def buf(self):
        "A memoryview of the block's bytes (format 'B')."
        return self._buf

    @property
    def name(self):
        "The name that attaches the block (without the stdlib's leading '/')."
        reported = self._name
        if self._prepend_leading_slash and reported is not None and reported.startswith("/"):
            reported = reported[1:]
        return reported

    @property
    def size(self):
        "Size in bytes."
        return self._size

    def close(self):
        """Closes this instance's access. The block is freed when no process holds it
        any more (a process that dies lets go too). Views of ``buf`` that are still
        alive (a slice, a numpy array over it) keep the memory mapped until they go:
        unlike the stdlib's, close() never leaves them pointing at unmapped memory
        (a segmentation fault there)."""
        self._buf = None
        self._raw = None

    def unlink(self):
        """Removes the name: nobody attaches the block by it any more, and a new block
        may take it. Holders keep their memory until they close it. A name already
        removed (or taken by another block since) raises ``FileNotFoundError``, as a
        second ``shm_unlink`` does."""
        if self._name is None:
            return
        directory = _index_dir(self._namespace)
        if not _remove_if(directory, self.name, self._locator):
            raise _not_found(self.name)


def _unlink_name(name, namespace=None):
    """Removes the index entry ``name`` (of ``namespace``, default the current one),
    whatever block it names; whether there was one."""
    namespace = _check_namespace(namespace) if namespace is not None else _namespace()
    directory = _index_dir(namespace)
    name = _check_name(name[1:] if name.startswith("/") else name)
    try:
        with _Locked(directory):
            os.unlink(os.path.join(directory, name))
    except FileNotFoundError:  # no such entry, or no index at all
        return False
    return True


def _rebuild(cls, name, size, namespace):
    """Unpickles a :class:`SharedMemory`: attaches ``name`` in ``namespace`` (the
    sender's, whatever this process's environment says)."""
    block = cls.__new__(cls)
    block._open(name, False, size, _check_namespace(namespace))
    return block


def _wrap(raw):
    from . import _wrap as wrap

    return wrap(raw)


def _cpython_shareable_list():
    """CPython's own ``ShareableList`` class, from a private copy of the interpreter's
    ``multiprocessing/shared_memory.py`` whose ``SharedMemory`` is this module's."""
    import importlib.util
    import multiprocessing.shared_memory as stdlib

    spec = importlib.util.spec_from_file_location(
        "shmrc._cpython_shared_memory", stdlib.__file__
    )
    module = importlib.util.module_from_spec(spec)
    module.__package__ = "multiprocessing"
    spec.loader.exec_module(module)
    module.SharedMemory = SharedMemory
    return module.ShareableList


class ShareableList(_cpython_shareable_list()):
    """CPython's ``multiprocessing.shared_memory.ShareableList`` (this interpreter's
    own code), stored in a :class:`SharedMemory` of this module."""

    __module__ = __name__


del _cpython_shareable_list
