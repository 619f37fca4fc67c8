"""Whether the children of a job use shmrc, for one start method and one place of
shmrc.torch.install() (issue 27, item 3). Run by test_start_methods.py with
SHMRC_SCENARIO="METHOD MODE NAMESPACE" in the environment (not argv: a forkserver
imports this file as its main module with an argv of its own): METHOD is fork, spawn
or forkserver; MODE is `top` (install() at module top level), `main` (inside main())
or `worker_init_fn` (only in the children: DataLoader's worker_init_fn, the queue
child's first line, Pool's initializer). Three kinds of children: a DataLoader
worker, a torch.multiprocessing Process talking through Queues, a Pool worker. Prints
one JSON line: per kind, whether the child had shmrc.torch installed and whether what
it sent arrived in shmrc memory."""
import json
import os

import torch
import torch.multiprocessing as tmp
from torch.utils.data import DataLoader, Dataset

import shmrc
import shmrc.torch

METHOD, MODE, NAMESPACE = os.environ["SHMRC_SCENARIO"].split()

if MODE == "top":
    shmrc.torch.install("file_system", NAMESPACE)


def in_shmrc(tensor):
    return shmrc.torch.buffer_of(tensor.untyped_storage()) is not None


def init_child(*_):
    """worker_init_fn(worker_id), Pool's initializer, the queue child's first line."""
    if MODE == "worker_init_fn":
        shmrc.torch.install("file_system", NAMESPACE)


class Items(Dataset):
    def __len__(self):
        return 4

    def __getitem__(self, i):
        return torch.full((256,), float(i)), shmrc.torch.installed()


def queue_child(inbox, outbox):
    init_child()
    received = inbox.get()
    outbox.put((shmrc.torch.installed(), in_shmrc(received), torch.arange(64.0)))
    # Alive until the parent has the tensor: a file_system handle in flight keeps its
    # segment while its sender lives (P1), and a dead sender's in-flight reference is
    # reclaimed, so a child that returned at once raced the parent's attach (lost once
    # on a loaded machine: GoneError).
    inbox.get(timeout=60)


def pool_task(i):
    return shmrc.torch.installed(), torch.full((64,), float(i))


def run():
    ctx = tmp.get_context(METHOD)
    result = {}
    loader = DataLoader(
        Items(),
        batch_size=2,
        num_workers=1,
        multiprocessing_context=ctx,
        worker_init_fn=init_child,
        timeout=60,
    )
    batches = list(loader)
    result["dataloader"] = {
        "child_installed": all(bool(installed.all()) for _, installed in batches),
        "sent_in_shmrc": sum(in_shmrc(features) for features, _ in batches),
        "of": len(batches),
        "data_ok": [f[:, 0].tolist() for f, _ in batches] == [[0.0, 1.0], [2.0, 3.0]],
    }

    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=queue_child, args=(inbox, outbox))
    child.start()
    inbox.put(torch.ones(64))
    installed, received_in_shmrc, made = outbox.get(timeout=60)
    inbox.put(None)  # received: the child may go
    child.join(30)
    result["queue"] = {
        "child_installed": installed,
        "received_in_shmrc": received_in_shmrc,
        "sent_in_shmrc": int(in_shmrc(made)),
        "of": 1,
        "data_ok": made.tolist() == list(range(64)),
    }

    with ctx.Pool(1, initializer=init_child) as pool:
        got = pool.map(pool_task, [1, 2])
    result["pool"] = {
        "child_installed": all(installed for installed, _ in got),
        "sent_in_shmrc": sum(in_shmrc(t) for _, t in got),
        "of": len(got),
        "data_ok": [t[0].item() for _, t in got] == [1.0, 2.0],
    }
    print(json.dumps(result))


def main():
    if MODE == "main":
        shmrc.torch.install("file_system", NAMESPACE)
    run()


if __name__ == "__main__":
    main()
