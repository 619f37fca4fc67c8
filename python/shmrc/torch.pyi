"""Type stubs of ``shmrc.torch``."""

from typing import Any, TypeVar

import torch
from torch.utils.data import DataLoader as _TorchDataLoader

from . import ShmBuf, Strategy

def install(
    strategy: Strategy | None = None, namespace: str | None = None, pool: bool = False
) -> None: ...
def uninstall() -> None: ...
def installed() -> bool: ...
def new_shared_storage(nbytes: int) -> torch.UntypedStorage: ...
def buffer_of(storage: torch.UntypedStorage) -> ShmBuf | None: ...

_T_co = TypeVar("_T_co", covariant=True)

class DataLoader(_TorchDataLoader[_T_co]):
    """torch's DataLoader that replaces a worker killed by a signal."""

    max_worker_restarts: int
    def __init__(self, *args: Any, max_worker_restarts: int = 16, **kwargs: Any) -> None: ...
