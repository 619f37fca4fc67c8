"""shmrc for PyTorch: CPU tensors and storages that cross processes through
``torch.multiprocessing`` (queues, pipes, pools) and ``DataLoader`` workers live in
shmrc buffers, with the reference count that survives SIGKILL.

``install(strategy=None, namespace=None, pool=False)`` registers ``ForkingPickler`` reducers for
``torch.Tensor``, ``torch.UntypedStorage`` and ``torch.TypedStorage`` that take
precedence over torch's, and makes ``torch.UntypedStorage._new_shared`` (what
``DataLoader``'s default collate builds each batch in, inside a worker) allocate in
shmrc memory, so batches are built there directly, not copied. A tensor travels as
metadata (dtype, shape, strides, storage offset) over its storage, which travels
once as a shmrc handle; a process that receives the same storage twice gets one
storage. ``uninstall()`` restores torch's reducers and allocator.

With ``pool=True`` (either strategy) each process allocates from a
:class:`shmrc.ShmPool` of its own: a ``DataLoader`` worker's next batch reuses the
segment of a batch the main process has let go of (zeroed, as a new one would be)
instead of a new segment whose pages the kernel must reserve and clear.

Every child process of ``multiprocessing`` (``DataLoader`` workers, ``torch.multiprocessing``
processes and pools, ``torch.multiprocessing.spawn``) uses shmrc too, whatever its
start method and wherever ``install()`` ran (module top level, inside ``main()``): a
``fork`` child inherits the installation; a ``spawn`` or ``forkserver`` child gets it
with its process object, which multiprocessing pickles through
``multiprocessing.reduction.dump`` (wrapped while installed: unpickled in the child,
the process object installs shmrc.torch with the parent's options before the child
runs anything). Children started *before* ``install()`` cannot be reached: install()
warns once and names the fix. Calling ``install()`` in ``worker_init_fn`` (or a
``Pool`` initializer) alone also works.

``DataLoader`` is torch's, plus the replacement of a worker killed by a signal: the
batches it owed are requested again from the replacement, so the epoch completes with
every sample exactly once, in order.

Tensors that are not on the CPU, sparse, or that require grad without being leaves
go through torch's own reducers, unchanged.
"""

import inspect
import multiprocessing
import multiprocessing.reduction
import os
import queue
import re
import threading
import time
import warnings
import weakref

import torch
import torch.multiprocessing  # noqa: F401  (registers torch's reducers first)
from multiprocessing.reduction import ForkingPickler
from torch.multiprocessing.reductions import StorageWeakRef
from torch.utils.data import _utils as _data_utils

# torch's internals that shmrc.torch.DataLoader builds on (the tests pin them down).
from torch.utils.data.dataloader import _DatasetKind, _MultiProcessingDataLoaderIter

import shmrc

__all__ = ["install", "uninstall", "installed", "new_shared_storage", "buffer_of", "DataLoader"]

_LOCK = threading.Lock()
# What install() replaced: {class: torch's reducer or None}, and torch's _new_shared.
_SAVED = None
_OPTIONS = {"strategy": None, "namespace": None, "pool": False}
# pid -> this process's ShmPool (a forked child makes its own: a pool recycles only
# what its own process holds).
_POOLS = {}
# address -> (weakref to the ShmBuf, StorageWeakRef to its one torch storage).
_BY_ADDRESS = {}


def installed():
    """Whether :func:`install` is in effect."""
    return _SAVED is not None


def _forget(address, ref):
    entry = _BY_ADDRESS.get(address)
    if entry is not None and entry[0] is ref:
        del _BY_ADDRESS[address]


def _storage_of(buf):
    """The one torch storage over ``buf``'s memory in this process (made on first
    need). Attaching a segment this process holds already gives the same mapping, so
    the address names it while the storage made for it lives (that storage keeps its
    buffer, hence the mapping, alive)."""
    address = buf.address
    entry = _BY_ADDRESS.get(address)
    if entry is not None and not entry[1].expired():
        storage = torch.UntypedStorage._new_with_weak_ptr(entry[1].cdata)
        if storage.nbytes() == len(buf):
            return storage
    storage = torch.frombuffer(buf, dtype=torch.uint8).untyped_storage()
    ref = weakref.ref(buf, lambda r, a=address: _forget(a, r))
    _BY_ADDRESS[address] = (ref, StorageWeakRef(storage))
    return storage


def buffer_of(storage):
    """The :class:`shmrc.ShmBuf` a CPU storage lives in, or ``None``."""
    entry = _BY_ADDRESS.get(storage.data_ptr())
    if entry is None:
        return None
    buf = entry[0]()
    if buf is None or len(buf) != storage.nbytes():
        return None
    return buf


def _pool():
    pid = os.getpid()
    pool = _POOLS.get(pid)
    if pool is None:
        _POOLS.clear()  # a parent's pool is of no use here
        pool = _POOLS[pid] = shmrc.ShmPool(_OPTIONS["namespace"], strategy=_OPTIONS["strategy"])
    return pool


def new_shared_storage(nbytes):
    """A zero-filled ``torch.UntypedStorage`` of ``nbytes`` bytes in a shmrc buffer
    (the strategy and namespace given to :func:`install`; with ``pool=True``, a
    recycled one when this process's pool has one free)."""
    if _OPTIONS["pool"]:
        buf = _pool().get(max(nbytes, 1), zero=True)
    else:
        buf = shmrc.ShmBuf(max(nbytes, 1), _OPTIONS["strategy"], _OPTIONS["namespace"])
    storage = _storage_of(buf)
    if nbytes == 0:
        storage = storage[0:0]
    return storage


def _new_shared(cls, size, *, device="cpu"):
    if torch.device(device).type != "cpu":
        return _SAVED["bound_new_shared"](size, device=device)
    return new_shared_storage(size)


def _rebuild_storage(handle):
    return _storage_of(handle.attach())


def _reduce_untyped_storage(storage):
    if storage.device.type != "cpu" or storage.nbytes() == 0:
        return _SAVED[torch.UntypedStorage](storage)
    buf = buffer_of(storage)
    if buf is None:
        # Not in shmrc memory yet: a copy in a new buffer goes (torch would move the
        # storage into shared memory in place, which Python cannot do to a storage).
        copy = new_shared_storage(storage.nbytes())
        copy.copy_(storage)
        buf = buffer_of(copy)
    return (_rebuild_storage, (buf.share(),))


def _rebuild_typed_storage(storage, dtype):
    return torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)


def _reduce_typed_storage(storage):
    return (_rebuild_typed_storage, (storage._untyped_storage, storage.dtype))


def _rebuild_tensor(storage, dtype, offset, size, stride, requires_grad):
    typed = torch.storage.TypedStorage(wrap_storage=storage, dtype=dtype, _internal=True)
    tensor = torch._utils._rebuild_tensor(typed, offset, size, stride)
    tensor.requires_grad_(requires_grad)
    return tensor


def _reduce_tensor(tensor):
    if (
        type(tensor) is not torch.Tensor
        or tensor.device.type != "cpu"
        or tensor.layout != torch.strided
        or tensor.is_quantized
        or tensor.is_nested
        or (tensor.requires_grad and not tensor.is_leaf)
    ):
        return _SAVED[torch.Tensor](tensor)
    return (
        _rebuild_tensor,
        (
            tensor.untyped_storage(),
            tensor.dtype,
            tensor.storage_offset(),
            tuple(tensor.size()),
            tuple(tensor.stride()),
            tensor.requires_grad,
        ),
    )


_REDUCERS = {
    torch.Tensor: _reduce_tensor,
    torch.UntypedStorage: _reduce_untyped_storage,
    torch.storage.TypedStorage: _reduce_typed_storage,
}


class _InstallFirst:
    """A process object on its way to a ``spawn`` or ``forkserver`` child, with the
    installation it must have: unpickled there, it installs shmrc.torch with the
    parent's options (and the parent's process-wide strategy), then hands the process
    object to multiprocessing, before the child runs anything of its own."""

    __slots__ = ("process",)

    def __init__(self, process):
        self.process = process

    def __reduce__(self):
        options = dict(_OPTIONS)
        return (_install_then, (options, shmrc.get_sharing_strategy(), self.process))


def _install_then(options, sharing_strategy, process):
    shmrc.set_sharing_strategy(sharing_strategy)
    install(**options)
    return process


def _dump(obj, file, protocol=None):
    """``multiprocessing.reduction.dump`` while installed: what a ``spawn`` or
    ``forkserver`` Popen sends a new child (its preparation data, then the process
    object) goes as before, the process object wrapped in :class:`_InstallFirst`."""
    if isinstance(obj, multiprocessing.process.BaseProcess):
        obj = _InstallFirst(obj)
    ForkingPickler(file, protocol).dump(obj)


_WARNED = set()


def _warn_once(key, message):
    if key not in _WARNED:
        _WARNED.add(key)
        warnings.warn(message, RuntimeWarning, stacklevel=3)


def _warn_of_children_started_before():
    """The one path install() cannot cover: a ``spawn`` or ``forkserver`` child started
    before it (a ``Pool`` made, or a ``DataLoader`` iterated with persistent workers,
    before ``install()``) runs without shmrc. Says so once, with the fix."""
    started = [
        p
        for p in multiprocessing.active_children()
        if getattr(p, "_start_method", None) in ("spawn", "forkserver")
    ]
    if started:
        _warn_once(
            "started-before",
            "shmrc.torch.install(): %d %s process(es) started before it (e.g. %s) do "
            "not use shmrc memory: call install() before creating the Pool or "
            "DataLoader, or in the children themselves (worker_init_fn=, "
            "Pool(initializer=shmrc.torch.install))"
            % (len(started), started[0]._start_method, started[0].name),
        )


def install(strategy=None, namespace=None, pool=False):
    """Makes CPU tensors and storages cross processes in shmrc buffers (see the module
    docs). ``strategy``: ``"file_descriptor"`` or ``"file_system"`` (``None``:
    :func:`shmrc.get_sharing_strategy` at each allocation); ``namespace``: a prefix of
    the job's own for its file_system segments; ``pool``: recycle segments through a
    :class:`shmrc.ShmPool` per process, of ``strategy`` (``None``: the process-wide
    strategy when the process makes its pool). Calling it again changes the options."""
    global _SAVED
    # Every argument is checked before anything changes: a bad one raises here, not
    # at the first allocation (inside a worker).
    strategy = shmrc._check_strategy(strategy)
    namespace = shmrc._check_namespace(namespace)
    pool = shmrc._check_flag(pool, "pool")
    with _LOCK:
        _OPTIONS["strategy"] = strategy
        _OPTIONS["namespace"] = namespace
        _OPTIONS["pool"] = pool
        _POOLS.clear()
        if _SAVED is not None:
            return
        _warn_of_children_started_before()
        saved = {cls: ForkingPickler._extra_reducers.get(cls) for cls in _REDUCERS}
        saved["dump"] = multiprocessing.reduction.dump
        multiprocessing.reduction.dump = _dump
        saved["_new_shared"] = torch.UntypedStorage.__dict__.get("_new_shared")
        saved["bound_new_shared"] = torch.UntypedStorage._new_shared
        for cls, reducer in _REDUCERS.items():
            ForkingPickler.register(cls, reducer)
        torch.UntypedStorage._new_shared = classmethod(_new_shared)
        _SAVED = saved


def uninstall():
    """Restores torch's reducers and allocator (buffers already shared stay valid)."""
    global _SAVED
    with _LOCK:
        if _SAVED is None:
            return
        for cls in _REDUCERS:
            original = _SAVED[cls]
            if original is None:
                ForkingPickler._extra_reducers.pop(cls, None)
            else:
                ForkingPickler.register(cls, original)
        multiprocessing.reduction.dump = _SAVED["dump"]
        if _SAVED["_new_shared"] is None:
            del torch.UntypedStorage._new_shared
        else:
            torch.UntypedStorage._new_shared = _SAVED["_new_shared"]
        _SAVED = None
        _OPTIONS["pool"] = False
        _POOLS.clear()  # idle pooled buffers are given back


class DataLoader(torch.utils.data.DataLoader):
    """``torch.utils.data.DataLoader`` (the same arguments, and the same behaviour)
    that survives its workers' deaths by a signal: when a worker of a map-style
    dataset is killed (SIGKILL, the OOM killer), a replacement is started with the
    same worker id, seed and ``worker_init_fn``, and the batches the dead worker owed
    are requested from it again, so the epoch completes with every batch delivered
    exactly once, in the sampler's order. A worker that exits with an error status,
    an exception raised by the dataset (re-raised in the main process as by torch),
    an ``IterableDataset`` (whose position only the dead worker knew) or more than
    ``max_worker_restarts`` deaths in one epoch fail as under torch. With
    ``shmrc.torch.install("file_system")`` the manager unlinks the dead worker's
    segments within milliseconds. See docs/PYTHON.md for what it cannot recover."""

    def __init__(self, *args, max_worker_restarts=16, **kwargs):
        restarts = shmrc._check_size(max_worker_restarts, "max_worker_restarts", 0)
        super().__init__(*args, **kwargs)
        self.max_worker_restarts = restarts

    def _get_iterator(self):
        if self.num_workers == 0 or self._dataset_kind != _DatasetKind.Map:
            return super()._get_iterator()
        self.check_worker_number_rationality()
        return _ResilientIter(self)


# A segment's name, as the library makes it: prefix.uid.pid-namespace.creator-pid.
# creator-start-ticks.nonce (shmrc::Namespace::segment_name).
_SEGMENT_NAME = re.compile(r"\.\d+\.\d+\.(\d+)\.\d+\.[0-9a-f]{32}\b")


def _creator_pid(error):
    """The pid of the process that created the segment an error names, or None."""
    found = _SEGMENT_NAME.search(str(error))
    return int(found.group(1)) if found else None


class _ResilientIter(_MultiProcessingDataLoaderIter):
    """torch's multi-process iterator, plus: which sample indices each outstanding
    task holds, a check for dead workers whenever it waits for data, the replacement
    of a worker killed by a signal, and a filter that drops a second result of a task
    (the dead worker's, if it had sent it after all)."""

    def __init__(self, loader):
        self._sent_indices = {}  # task idx -> sample indices, until its result arrives
        self._in_resume = False
        self._restarts = 0
        self._max_restarts = loader.max_worker_restarts
        self._last_index = None
        self._dead_pids = set()  # the workers replaced so far
        # The context torch starts the workers with (it keeps it in a local).
        self._context = loader.multiprocessing_context or torch.multiprocessing
        super().__init__(loader)
        # torch's SIGCHLD handler raises in the main thread, wherever it is, when a
        # registered worker dies; here a death is handled where data is awaited.
        if self._worker_pids_set:
            _data_utils.signal_handling._remove_worker_pids(id(self))
            self._worker_pids_set = False

    def _reset(self, loader, first_iter=False):
        self._sent_indices = {}
        self._restarts = 0
        self._in_resume = not first_iter
        super()._reset(loader, first_iter)
        self._in_resume = False

    def _next_index(self):
        self._last_index = super()._next_index()
        return self._last_index

    def _try_put_index(self):
        self._in_resume = False  # torch puts the first index once every worker resumed
        sent = self._send_idx
        super()._try_put_index()
        if self._send_idx != sent:
            self._sent_indices[sent] = self._last_index

    def _try_get_data(self, timeout=_data_utils.MP_STATUS_CHECK_INTERVAL):
        deadline = time.monotonic() + timeout
        while True:
            self._replace_dead_workers()
            wait = min(0.05, max(0.0, deadline - time.monotonic()))
            try:
                message = self._data_queue.get(timeout=wait)
            except queue.Empty:
                if time.monotonic() >= deadline:
                    return (False, None)
                continue
            except shmrc.GoneError as e:
                # A batch the dead worker had sent before it died, whose segment the
                # manager reclaimed with the worker (nobody live held it): its task is
                # requested again from the replacement. Any other is an error.
                self._replace_dead_workers()
                if _creator_pid(e) not in self._dead_pids:
                    raise
                continue
            idx = message[0]
            if isinstance(idx, _data_utils.worker._ResumeIteration):
                if self._in_resume:
                    return (True, message)
                continue  # a replacement's ack after the resumption was complete
            if idx not in self._sent_indices:
                continue  # a task's second result: the dead worker had sent it
            del self._sent_indices[idx]
            return (True, message)

    def _replace_dead_workers(self):
        for worker_id, worker in enumerate(self._workers):
            if not self._workers_status[worker_id] or worker.is_alive():
                continue
            code = worker.exitcode
            if code is None or code >= 0 or self._restarts >= self._max_restarts:
                self._mark_worker_as_unavailable(worker_id)
                why = (
                    "exited unexpectedly with exit code %s" % code
                    if code is None or code >= 0
                    else "is killed by signal %d after %d replacements this epoch "
                    "(max_worker_restarts=%d)" % (-code, self._restarts, self._max_restarts)
                )
                raise RuntimeError("DataLoader worker (pid %s) %s" % (worker.pid, why))
            self._restart_worker(worker_id)

    def _restart_worker(self, worker_id):
        dead, dead_queue = self._workers[worker_id], self._index_queues[worker_id]
        index_queue = self._context.Queue()
        index_queue.cancel_join_thread()
        # The arguments torch gave the dead worker (Process.start drops them), by the
        # names of torch's worker loop, its index queue a new one (the reader lock of
        # the old one may have died held).
        known = {
            "dataset_kind": self._dataset_kind,
            "dataset_holder": [self._dataset],
            "index_queue": index_queue,
            "data_queue": self._worker_result_queue,
            "done_event": self._workers_done_event,
            "auto_collation": self._auto_collation,
            "collate_fn": self._collate_fn,
            "drop_last": self._drop_last,
            "base_seed": self._base_seed,
            "init_fn": self._worker_init_fn,
            "worker_id": worker_id,
            "num_workers": self._num_workers,
            "persistent_workers": self._persistent_workers,
            "shared_seed": self._shared_seed,
        }
        loop = _data_utils.worker._worker_loop
        names = list(inspect.signature(loop).parameters)
        unknown = [name for name in names if name not in known]
        if unknown:
            raise RuntimeError(
                "shmrc.torch.DataLoader cannot replace worker %d (pid %s): this torch's "
                "worker loop takes %s, unknown to shmrc" % (worker_id, dead.pid, unknown)
            )
        worker = self._context.Process(target=loop, args=tuple(known[n] for n in names))
        worker.daemon = True
        worker.start()
        self._workers[worker_id] = worker
        self._index_queues[worker_id] = index_queue
        dead_queue.cancel_join_thread()
        dead_queue.close()
        self._restarts += 1
        self._dead_pids.add(dead.pid)
        if self._in_resume:
            index_queue.put(_data_utils.worker._ResumeIteration(self._shared_seed))
        owed = sorted(
            idx
            for idx, info in self._task_info.items()
            if len(info) == 1 and info[0] == worker_id and idx in self._sent_indices
        )
        for idx in owed:
            index_queue.put((idx, self._sent_indices[idx]))
