"""One epoch of 64 batches through shmrc.torch.DataLoader (2 workers, fork) with a
linear model trained on it, in a job of its own. Run by test_resilient_loader.py as
`resilient_scenario.py NAMESPACE PERSISTENT KILLS`: PERSISTENT is 0 or 1; KILLS is
how many workers to SIGKILL during the epoch (each time the worker that owes the next
batch, after batches 10, 30, 50), 0 for the undisturbed run. 0.5 s after each kill it
counts the victim's segments, and those of them that no live process holds
(shmrc.ls); at the end of the epoch, the victims' segments left. With persistent
workers it runs a second epoch on the same loader. Prints one JSON line."""
import json
import os
import signal
import sys
import time

import torch

import shmrc
import shmrc.torch

NAMESPACE, PERSISTENT, KILLS = sys.argv[1], sys.argv[2] == "1", int(sys.argv[3])
KILL_AFTER = [10, 30, 50][:KILLS]


class Items(torch.utils.data.Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.002)  # a little work, so that tasks are outstanding at a kill
        x = torch.arange(16, dtype=torch.float32) * (i + 1) / 256
        return x, torch.tensor([float(i % 7)]), i


def segments_of(pid):
    """(every segment the worker created that is still in /dev/shm, those of them
    that no live process holds)."""
    listing = shmrc.ls(NAMESPACE)["namespaces"]
    segments = [s for s in (listing[0]["segments"] if listing else []) if s["creator"]["pid"] == pid]
    unheld = [s for s in segments if not (s["holders"] and s["holders"]["live"] > 0)]
    return len(segments), len(unheld)


def main():
    shmrc.torch.install("file_system", NAMESPACE)
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.001)
    loader = shmrc.torch.DataLoader(
        Items(), batch_size=4, num_workers=2, persistent_workers=PERSISTENT, timeout=60
    )
    ids, losses, kills = [], [], []
    it = iter(loader)
    for step, (x, y, index) in enumerate(it):
        ids.extend(index.tolist())
        loss = torch.nn.functional.mse_loss(model(x), y)
        optimizer.zero_grad()
        torch.autograd.backward(loss)
        optimizer.step()
        losses.append(loss.item())
        if step + 1 in KILL_AFTER:
            owner = it._task_info[it._rcvd_idx][0]  # the worker that owes the next batch
            victim = it._workers[owner].pid
            owed = sum(1 for info in it._task_info.values() if info[0] == owner and len(info) == 1)
            os.kill(victim, signal.SIGKILL)
            time.sleep(0.5)
            left, unheld = segments_of(victim)
            kills.append({"pid": victim, "owed": owed, "left_after_500ms": left, "unheld_after_500ms": unheld})
    del x, y, index
    # Once the main process has used every batch: nothing of any victim is left.
    victims_left = sum(segments_of(kill["pid"])[0] for kill in kills)
    second = None
    if PERSISTENT:
        second = sorted(i for _, _, index in loader for i in index.tolist())
    print(
        json.dumps(
            {
                "ids": ids,
                "losses": losses,
                "kills": kills,
                "victims_left_at_epoch_end": victims_left,
                "second_epoch_ok": second == list(range(256)) if PERSISTENT else None,
            }
        )
    )


if __name__ == "__main__":
    main()
