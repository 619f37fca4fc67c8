"""A shmrc error raised inside a DataLoader worker, for a real cause, and how the main
process sees it. Run by test_errors.py as `worker_error_scenario.py CAUSE NAMESPACE`:
`no_space` (run by the test in a mount namespace whose /dev/shm is a 1 MiB tmpfs: the
worker's 4 MiB batch, built in shmrc memory by the default collate, does not fit) or
`bad_handle` (the worker attaches bytes that are no shmrc handle). Prints one JSON line:
what the main process caught and after how many seconds. DataLoader's own timeout (20 s)
turns a lost exception (the hang of issue 27) into a failure instead of a hang."""
import json
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

import shmrc
import shmrc.torch

CAUSE, NAMESPACE = sys.argv[1], sys.argv[2]


class Items(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        if CAUSE == "bad_handle":
            return torch.frombuffer(
                shmrc.ShareHandle._of("file_system", 64, b"\x01" * 48).attach(), dtype=torch.uint8
            )
        return torch.zeros(4 << 20, dtype=torch.uint8)


def main():
    shmrc.torch.install("file_system", NAMESPACE)
    loader = DataLoader(Items(), batch_size=1, num_workers=1, timeout=20)
    start = time.monotonic()
    try:
        for _ in loader:
            pass
        caught = None
    except Exception as e:  # noqa: BLE001 (reported)
        caught = e
    seconds = time.monotonic() - start
    print(
        json.dumps(
            {
                "type": type(caught).__name__,
                "module": type(caught).__module__,
                "shmrc": isinstance(caught, shmrc.ShmrcError),
                "oserror": isinstance(caught, OSError),
                "valueerror": isinstance(caught, ValueError),
                "seconds": round(seconds, 2),
                "message": str(caught)[:400],
            }
        )
    )


if __name__ == "__main__":
    main()
