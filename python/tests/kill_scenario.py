"""A DataLoader worker SIGKILLed mid-epoch while the main process trains on, run
under shmrc (``shmrc``) or torch's own file_system strategy (``torch_file_system``).
Prints one JSON object: how many of the victim's segments were in /dev/shm at the
kill, 1 s later (the main process still training), and how long they took to go.
Run by test_torch.py in a process of its own, which counts what is left after it
exits."""
import json
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset

MODE, NS = sys.argv[1], sys.argv[2]
ITEM_FLOATS = 16 * 1024  # 64 KiB items, 1 MiB batches of 16

if MODE == "shmrc":
    import shmrc
    import shmrc.torch

    shmrc.torch.install("file_system", NS)
else:
    torch.multiprocessing.set_sharing_strategy("file_system")


class Items(Dataset):
    def __len__(self):
        return 2000

    def __getitem__(self, i):
        return torch.full((ITEM_FLOATS,), float(i))


def victim_segments(pid, unheld_only=False):
    """The victim's segments in /dev/shm; with ``unheld_only``, those no live process
    holds (shmrc can tell from the holder slots; torch cannot, so all of them)."""
    if MODE == "shmrc":
        listing = shmrc.ls(NS)["namespaces"]
        segments = listing[0]["segments"] if listing else []
        return [
            s["name"]
            for s in segments
            if s["creator"]["pid"] == pid
            and not (unheld_only and s["holders"] and s["holders"]["live"] > 0)
        ]
    return [n for n in os.listdir("/dev/shm") if n.startswith("torch_%d_" % pid)]


model = torch.nn.Linear(ITEM_FLOATS, 1)
opt = torch.optim.SGD(model.parameters(), lr=1e-6)


def train(batch):
    opt.zero_grad()
    loss = model(batch).pow(2).mean()
    loss.backward()
    opt.step()


loader = DataLoader(Items(), batch_size=16, num_workers=4, prefetch_factor=4)
it = iter(loader)
for _ in range(8):
    batch = next(it)
    assert batch[0, 0].item() == batch[0, -1].item()
    train(batch)
victim = it._workers[0].pid
deadline = time.monotonic() + 10
while not victim_segments(victim) and time.monotonic() < deadline:
    time.sleep(0.01)
at_kill = len(victim_segments(victim))
os.kill(victim, signal.SIGKILL)
killed = time.monotonic()
gone_ms = None
steps = 0
broken = None
while time.monotonic() - killed < 1.0:
    try:
        train(batch)  # the main process trains on
        steps += 1
        if gone_ms is None and not victim_segments(victim, unheld_only=True):
            gone_ms = round((time.monotonic() - killed) * 1000, 1)
    except RuntimeError as e:
        # torch's SIGCHLD handler reports the dead worker wherever the main thread is.
        broken = str(e).split("\n")[0][:120]
after_1s = len(victim_segments(victim))
unheld_after_1s = len(victim_segments(victim, unheld_only=True))

# The epoch's iterator is broken; training goes on with a new epoch.
try:
    for batch in it:
        train(batch)
except RuntimeError as e:
    broken = broken or str(e).split("\n")[0][:120]
it._shutdown_workers()
del it, batch
released = time.monotonic()
while victim_segments(victim) and time.monotonic() - released < 1.0:
    train(torch.zeros(1, ITEM_FLOATS))
epoch2 = 0
for batch in DataLoader(Items(), batch_size=16, num_workers=4):
    train(batch)
    epoch2 += 1
print(
    json.dumps(
        {
            "mode": MODE,
            "victim": victim,
            "at_kill": at_kill,
            "after_1s": after_1s,
            "unheld_after_1s": unheld_after_1s,
            "gone_ms": gone_ms,
            "steps_in_that_second": steps,
            "iterator_error": broken,
            "second_epoch_batches": epoch2,
            "victim_segments_at_main_end": len(victim_segments(victim)),
        }
    ),
    flush=True,
)
