"""A few training steps on batches that DataLoader workers build in shmrc memory,
with shmrc.torch.install() called inside main() and the workers started with
"spawn" (or the start method given as the first argument): the workers use shmrc too.
The loader is shmrc.torch.DataLoader, which survives a worker's SIGKILL.
Run: python dataloader_training.py [fork|spawn|forkserver] (CI runs it, and checks it
with mypy --strict)."""
import sys

import torch
from torch.utils.data import DataLoader, Dataset

import shmrc
import shmrc.torch


class Squares(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    def __len__(self) -> int:
        return 64

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        x = torch.full((8,), float(i) / 64)
        return x, x.sum(dim=0, keepdim=True)


def main(start_method: str) -> None:
    shmrc.torch.install("file_system", namespace="shmrc-example", pool=True)
    # shmrc.torch.DataLoader: torch's, plus a replacement for a worker killed by a
    # signal (its batches are requested again: the epoch goes on).
    loader: DataLoader[tuple[torch.Tensor, torch.Tensor]] = shmrc.torch.DataLoader(
        Squares(), batch_size=16, num_workers=2, multiprocessing_context=start_method
    )
    model = torch.nn.Linear(8, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    in_shmrc = 0
    for features, target in loader:
        in_shmrc += shmrc.torch.buffer_of(features.untyped_storage()) is not None
        loss = torch.nn.functional.mse_loss(model(features), target)
        optimizer.zero_grad()
        torch.autograd.backward(loss)
        optimizer.step()
    print("%d of %d batches built in shmrc memory (%s); last loss %.4f" % (in_shmrc, len(loader), start_method, loss.item()))
    assert in_shmrc == len(loader)


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "spawn")
