"""Type stubs of ``shmrc.managers``."""

from collections.abc import Iterable
from multiprocessing.managers import SharedMemoryServer as _StdlibServer
from multiprocessing.managers import SharedMemoryManager as _StdlibManager
from typing import Any

from .shared_memory import ShareableList, SharedMemory

class SharedMemoryServer(_StdlibServer): ...

class SharedMemoryManager(_StdlibManager):
    """The stdlib's SharedMemoryManager for shmrc blocks."""

    def SharedMemory(self, size: int) -> SharedMemory: ...  # type: ignore[override]
    def ShareableList(self, sequence: Iterable[Any] | None) -> ShareableList: ...  # type: ignore[override]
