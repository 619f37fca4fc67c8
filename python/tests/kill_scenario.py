"""A DataLoader worker SIGKILLed mid-epoch while the main process trains on, run
under shmrc (``shmrc``) or torch's own file_system strategy (``torch_file_system``).
The victim (worker 0) is killed while it holds a batch it has built and not sent (its
collate sleeps on its third batch) and has another in flight in the result queue.
Prints one JSON object: how many of the victim's segments were in /dev/shm at the
kill, 1 s later (the main process still training), once the main process has let go
of the broken epoch, and how long the unheld ones took to go. Run by test_torch.py in
a process of its own, which counts what is left after it exits."""
import json
import os
import signal
import sys
import time

import torch
from torch.utils.data import DataLoader, Dataset, default_collate, get_worker_info

MODE, NS, MARKER = sys.argv[1], sys.argv[2], sys.argv[3]
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


CALLS = [0]


def collate_and_hold(items):
    """The default collate (the batch is built in shared memory); worker 0 holds its
    third batch, telling the main process through MARKER, until it is killed."""
    batch = default_collate(items)
    info = get_worker_info()
    CALLS[0] += 1
    if info is not None and info.id == 0 and CALLS[0] == 3:
        with open(MARKER, "w") as f:
            f.write(str(os.getpid()))
        time.sleep(120)
    return batch


def victim_names(pid):
    """The victim's segment names in /dev/shm, by a plain directory listing (cheap)."""
    if MODE == "shmrc":
        return {n for n in os.listdir("/dev/shm") if n.startswith(NS + ".") and ".%d." % pid in n}
    return {n for n in os.listdir("/dev/shm") if n.startswith("torch_%d_" % pid)}


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


loader = DataLoader(
    Items(), batch_size=16, num_workers=4, prefetch_factor=4, collate_fn=collate_and_hold
)
it = iter(loader)
for _ in range(4):  # batches 0-3: worker 0 built 0 and 4, and holds 8
    batch = next(it)
    assert batch[0, 0].item() == batch[0, -1].item()
    train(batch)
victim = it._workers[0].pid
deadline = time.monotonic() + 60
while not os.path.exists(MARKER) and time.monotonic() < deadline:
    train(batch)
time.sleep(0.2)
at_kill = len(victim_segments(victim))
gone_ms = None
steps = 0
broken = None
seen = None
killed = None
# torch's SIGCHLD handler raises the dead worker's error wherever the main thread is:
# inside a step, and also between two (at the loop's own check, which a try inside
# the loop does not cover). Either way it is noted and training goes on until 1 s
# after the kill.
while True:
    try:
        if killed is None:
            killed = time.monotonic()
            os.kill(victim, signal.SIGKILL)
        while time.monotonic() - killed < 1.0:
            train(batch)  # the main process trains on
            steps += 1
            names = victim_names(victim)
            # Ask shmrc which are unheld only when the listing changed (ls costs more).
            if gone_ms is None and names != seen:
                seen = names
                if not victim_segments(victim, unheld_only=True):
                    gone_ms = round((time.monotonic() - killed) * 1000, 1)
        break
    except RuntimeError as e:
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
after_release = len(victim_segments(victim))
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
            "after_main_let_go": after_release,
            "second_epoch_batches": epoch2,
            "victim_segments_at_main_end": len(victim_segments(victim)),
        }
    ),
    flush=True,
)
