"""Type stubs of ``shmrc.shared_memory``."""

from multiprocessing.shared_memory import ShareableList as _StdlibShareableList

NAMESPACE_ENV: str
DEFAULT_NAMESPACE: str

class SharedMemory:
    """A crash-safe shared memory block, created or attached by name."""

    def __init__(self, name: str | None = None, create: bool = False, size: int = 0) -> None: ...
    @property
    def buf(self) -> memoryview: ...
    @property
    def name(self) -> str: ...
    @property
    def size(self) -> int: ...
    def close(self) -> None: ...
    def unlink(self) -> None: ...

class ShareableList(_StdlibShareableList):  # type: ignore[type-arg]
    """CPython's ShareableList in a shmrc SharedMemory."""

    shm: SharedMemory  # type: ignore[assignment]

def prune(namespace: str | None = None) -> list[str]: ...
