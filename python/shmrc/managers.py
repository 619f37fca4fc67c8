"""``SharedMemoryManager`` over :mod:`shmrc.shared_memory`: the stdlib's
:class:`multiprocessing.managers.SharedMemoryManager` (a manager process that
tracks the blocks made through it and unlinks them at ``shutdown()``), with this
package's ``SharedMemory`` and ``ShareableList`` and without starting the resource
tracker. Blocks are freed anyway when their last holder closes or dies; the manager
removes their names at shutdown, as the stdlib's does.
"""

from multiprocessing import managers as _stdlib

from . import shared_memory

__all__ = ["SharedMemoryManager", "SharedMemoryServer"]


class _SharedMemoryTracker(_stdlib._SharedMemoryTracker):
    def destroy_segment(self, segment_name):
        """Removes the block's name (a block already freed just loses its name)."""
        self.segment_names.remove(segment_name)
        shared_memory._unlink_name(segment_name)


class SharedMemoryServer(_stdlib.SharedMemoryServer):
    """The stdlib's server, tracking names of :mod:`shmrc.shared_memory`."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.shared_memory_context = _SharedMemoryTracker(
            self.shared_memory_context.shared_memory_context_name
        )


class SharedMemoryManager(_stdlib.SharedMemoryManager):
    """The stdlib's ``SharedMemoryManager`` for shmrc blocks: ``SharedMemory(size)``
    and ``ShareableList(sequence)`` make blocks whose names ``shutdown()`` (or leaving
    the ``with`` block) removes."""

    _Server = SharedMemoryServer

    def __init__(self, *args, **kwargs):
        # Not the stdlib's __init__: it starts the resource tracker.
        _stdlib.BaseManager.__init__(self, *args, **kwargs)

    def SharedMemory(self, size):
        """A new :class:`shmrc.shared_memory.SharedMemory` of ``size`` bytes, tracked by
        the manager."""
        with self._Client(self._address, authkey=self._authkey) as conn:
            sms = shared_memory.SharedMemory(None, create=True, size=size)
            try:
                _stdlib.dispatch(conn, None, "track_segment", (sms.name,))
            except BaseException:
                sms.unlink()
                raise
        return sms

    def ShareableList(self, sequence):
        """A new :class:`shmrc.shared_memory.ShareableList` of ``sequence``, tracked
        by the manager."""
        with self._Client(self._address, authkey=self._authkey) as conn:
            sl = shared_memory.ShareableList(sequence)
            try:
                _stdlib.dispatch(conn, None, "track_segment", (sl.shm.name,))
            except BaseException:
                sl.shm.unlink()
                raise
        return sl
