"""shmrc.torch.DataLoader (issue 27, item 4): a worker SIGKILLed mid-epoch is replaced
and its batches requested again, so the epoch completes with every sample exactly once
and in order; otherwise it behaves as torch's DataLoader."""
import json
import os
import signal
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import shmrc  # noqa: E402
import shmrc.torch  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


def _scenario(ns, persistent, kills):
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "resilient_scenario.py"), ns, str(int(persistent)), str(kills)],
        capture_output=True,
        text=True,
        timeout=240,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def undisturbed():
    return _scenario("shmrc-py-resilient-%d-calm" % os.getpid(), False, 0)


@pytest.mark.timeout(300)
@pytest.mark.parametrize("persistent", [False, True], ids=["fresh_workers", "persistent_workers"])
def test_three_sigkills_in_one_epoch_cost_no_sample(ns, undisturbed, persistent):
    got = _scenario(ns, persistent, 3)
    print(json.dumps(got["kills"]))
    assert len(got["kills"]) == 3
    assert all(kill["owed"] >= 1 for kill in got["kills"]), "each victim owed a batch"
    assert got["ids"] == list(range(256)), "every sample exactly once, in order"
    assert got["losses"] == undisturbed["losses"], "the same training as without kills"
    assert undisturbed["ids"] == list(range(256))
    for kill in got["kills"]:
        # Left 0.5 s after the kill: only batches the victim had delivered, which the
        # main process holds (out of order, waiting for their turn; 3 tensors a batch).
        assert kill["unheld_after_500ms"] == 0, kill
    assert got["victims_left_at_epoch_end"] == 0, got["kills"]
    if persistent:
        assert got["second_epoch_ok"], "the persistent loader works on"


class Items(torch.utils.data.Dataset):
    def __init__(self, fail_at=None, how="raise"):
        self.fail_at, self.how = fail_at, how

    def __len__(self):
        return 32

    def __getitem__(self, i):
        if i == self.fail_at:
            if self.how == "raise":
                raise KeyError("no item %d" % i)
            if self.how == "exit":
                os._exit(3)
            os.kill(os.getpid(), signal.SIGKILL)
        return torch.full((4,), float(i))


@pytest.mark.timeout(120)
def test_otherwise_it_fails_as_torchs_loader_does():
    # An exception of the dataset's is re-raised in the main process, as by torch.
    with pytest.raises(KeyError, match="Caught KeyError in DataLoader worker process"):
        list(shmrc.torch.DataLoader(Items(fail_at=5), batch_size=4, num_workers=2))
    # A worker that exits with an error status is no signal death: not replaced.
    with pytest.raises(RuntimeError, match=r"exited unexpectedly with exit code 3"):
        list(shmrc.torch.DataLoader(Items(fail_at=5, how="exit"), batch_size=4, num_workers=2, timeout=60))
    # A sample that kills every worker that loads it: replaced up to the limit, then
    # torch's error, not an endless loop.
    with pytest.raises(RuntimeError, match=r"killed by signal 9 after 2 replacements.*max_worker_restarts=2"):
        list(
            shmrc.torch.DataLoader(
                Items(fail_at=5, how="kill"), batch_size=4, num_workers=2, max_worker_restarts=2, timeout=60
            )
        )
    with pytest.raises(shmrc.InvalidArgumentError, match="max_worker_restarts must be at least 0"):
        shmrc.torch.DataLoader(Items(), max_worker_restarts=-1)
    # Without workers, or over an iterable dataset, it is torch's loader.
    plain = shmrc.torch.DataLoader(Items(), batch_size=8)
    assert [b[0, 0].item() for b in plain] == [0.0, 8.0, 16.0, 24.0]
    assert isinstance(plain, torch.utils.data.DataLoader)


class Stream(torch.utils.data.IterableDataset):
    def __iter__(self):
        return iter(range(4))


@pytest.mark.timeout(60)
def test_an_iterable_dataset_gets_torchs_iterator():
    it = iter(shmrc.torch.DataLoader(Stream(), num_workers=1))
    assert type(it) is torch.utils.data.dataloader._MultiProcessingDataLoaderIter
    assert [int(b) for b in it] == [0, 1, 2, 3]
