"""shmrc.shared_memory as a drop-in for multiprocessing.shared_memory: a block made
under a name, attached by that name in another process (no pickling), used through
numpy; then a process that made a block is SIGKILLed and its block goes with it,
which the stdlib's would not. Run: python shared_memory_by_name.py (CI runs it, and
checks it with mypy --strict)."""
import multiprocessing as mp
import os
import signal
import time

import numpy as np

from shmrc.shared_memory import SharedMemory


def fill(name: str) -> None:
    block = SharedMemory(name)  # attach by name
    array: np.ndarray = np.ndarray((1000,), dtype=np.float64, buffer=block.buf)
    array[:] = np.arange(1000)
    del array
    block.close()


def make_and_hang(name: str) -> None:
    block = SharedMemory(name, create=True, size=1 << 20)
    block.buf[0] = 1
    time.sleep(300)  # killed long before


def main() -> None:
    # The examples' own namespace (names are per run: the pid is in them).
    os.environ["SHMRC_SHARED_MEMORY_NAMESPACE"] = "shmrc-example"
    ctx = mp.get_context("spawn")
    name = "example-%d" % os.getpid()
    block = SharedMemory(name, create=True, size=8000)
    child = ctx.Process(target=fill, args=(name,), daemon=True)
    child.start()
    child.join(60)
    total = np.ndarray((1000,), dtype=np.float64, buffer=block.buf).sum()
    print("the child wrote through the name; sum =", total)
    assert total == 499500.0
    block.unlink()
    block.close()

    doomed = name + "-doomed"
    victim = ctx.Process(target=make_and_hang, args=(doomed,), daemon=True)
    victim.start()
    deadline = time.monotonic() + 60
    while True:  # until the victim's block is there
        try:
            SharedMemory(doomed).close()
            break
        except FileNotFoundError:
            assert time.monotonic() < deadline, "the victim made no block"
            time.sleep(0.01)
    assert victim.pid is not None
    os.kill(victim.pid, signal.SIGKILL)
    victim.join(60)
    deadline = time.monotonic() + 10
    while True:  # the manager frees the dead creator's block within milliseconds
        try:
            SharedMemory(doomed).close()
        except FileNotFoundError:
            break
        assert time.monotonic() < deadline, "the killed creator's block stayed"
        time.sleep(0.01)
    print("the SIGKILLed creator's block is gone, with no unlink and no warning")


if __name__ == "__main__":
    main()
