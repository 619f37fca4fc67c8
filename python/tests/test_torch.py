"""shmrc.torch with real processes: torch.multiprocessing queues, DataLoader workers,
and a worker SIGKILLed mid-epoch, side by side with torch's own file_system
strategy."""
import json
import os
import time
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")
import torch.multiprocessing as tmp  # noqa: E402
from multiprocessing.reduction import ForkingPickler  # noqa: E402
from torch.utils.data import DataLoader, Dataset  # noqa: E402

import shmrc  # noqa: E402
import shmrc.torch  # noqa: E402

from conftest import shm_names  # noqa: E402

STRATEGIES = ["file_descriptor", "file_system"]
HERE = os.path.dirname(os.path.abspath(__file__))


@pytest.fixture
def installed(ns, request):
    strategy = getattr(request, "param", "file_system")
    shmrc.torch.install(strategy, ns)
    yield strategy
    shmrc.torch.uninstall()


def test_uninstall_restores_torchs_reducers():
    before = dict(ForkingPickler._extra_reducers)
    new_shared = torch.UntypedStorage._new_shared
    shmrc.torch.install()
    assert ForkingPickler._extra_reducers[torch.Tensor] is not before[torch.Tensor]
    shmrc.torch.uninstall()
    assert ForkingPickler._extra_reducers == before
    assert torch.UntypedStorage._new_shared == new_shared
    with pytest.raises(shmrc.UnknownStrategyError):
        shmrc.torch.install("shm")
    assert not shmrc.torch.installed()


def _echo(inbox, outbox):
    whole, view, again = inbox.get()
    outbox.put(
        (
            whole.tolist(),
            view.tolist(),
            view.stride(),
            view.untyped_storage()._cdata == whole.untyped_storage()._cdata,
            again.untyped_storage()._cdata == whole.untyped_storage()._cdata,
            shmrc.torch.buffer_of(whole.untyped_storage()) is not None,
        )
    )
    view.mul_(10)  # written in the sender's memory too (shared storage)
    outbox.put("written")
    inbox.get()


@pytest.mark.timeout(90)
@pytest.mark.parametrize("installed", STRATEGIES, indirect=True)
def test_tensors_round_trip_through_a_torch_queue(installed):
    ctx = tmp.get_context("fork")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_echo, args=(inbox, outbox))
    child.start()
    whole = torch.arange(12, dtype=torch.float64).reshape(3, 4)
    view = whole.t()[1:3]  # a strided view with an offset over the same storage
    inbox.put((whole, view, whole[2]))
    got = outbox.get(timeout=60)
    assert got[0] == whole.tolist() and got[1] == view.tolist()
    assert got[2] == view.stride()
    assert got[3] and got[4], "one storage in the receiver"
    assert got[5], "the receiver's storage is a shmrc buffer"
    assert outbox.get(timeout=60) == "written"
    inbox.put("bye")
    child.join(30)
    assert child.exitcode == 0


class Items(Dataset):
    def __len__(self):
        return 256

    def __getitem__(self, i):
        return torch.full((1024,), float(i)), i


@pytest.mark.timeout(120)
@pytest.mark.parametrize("installed", STRATEGIES, indirect=True)
def test_dataloader_batches_are_built_in_shmrc_memory(installed, ns):
    loader = DataLoader(Items(), batch_size=16, num_workers=4)
    seen = []
    for features, index in loader:
        assert shmrc.torch.buffer_of(features.untyped_storage()) is not None
        assert torch.equal(features[:, 0], index.to(features.dtype))
        assert torch.equal(features[:, -1], index.to(features.dtype))
        seen.extend(index.tolist())
    assert sorted(seen) == list(range(256))


def _scenario(mode, ns, tmp_path):
    marker = str(tmp_path / ("%s.held" % mode))
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "kill_scenario.py"), mode, ns, marker],
        capture_output=True,
        text=True,
        timeout=240,
        cwd="/",
    )
    assert out.returncode == 0, out.stderr[-3000:]
    line = [line for line in out.stdout.splitlines() if line.startswith("{")][-1]
    return json.loads(line)


def _report(result):
    path = os.environ.get("SHMRC_PY_REPORT")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps(result) + "\n")


@pytest.mark.timeout(300)
def test_a_worker_sigkilled_mid_epoch_leaves_nothing_while_training_goes_on(ns, tmp_path):
    shmrc_run = _scenario("shmrc", ns, tmp_path)
    # The job has exited (main process and workers, all reaped): the manager sweeps for
    # the last deaths within milliseconds, with no call from anyone. Issue 13: a death
    # the manager judged while its parent was reaping it counted as alive, and a
    # segment only the dead held outlived the job, unswept.
    exited = time.monotonic()
    shmrc_run["left_after_exit"] = len(shm_names(ns))
    while shm_names(ns) and time.monotonic() - exited < 3:
        time.sleep(0.005)
    shmrc_run["left_3s_after_exit"] = len(shm_names(ns))
    shmrc_run["gone_ms_after_exit"] = round((time.monotonic() - exited) * 1000, 1)
    # torch's own file_system strategy, the same scenario, measured side by side.
    torch_run = _scenario("torch_file_system", ns, tmp_path)
    torch_run["left_after_exit"] = len(
        [n for n in os.listdir("/dev/shm") if n.startswith("torch_%d_" % torch_run["victim"])]
    )
    # What a sweep would leave (a dry run: the test sweeps nothing itself).
    would_unlink = shmrc.sweep(ns, dry_run=True)["unlinked"]
    shmrc_run["left_after_a_sweep"] = len(shm_names(ns)) - would_unlink
    _report({"shmrc": shmrc_run, "torch_file_system": torch_run})
    print(json.dumps({"shmrc": shmrc_run, "torch_file_system": torch_run}, indent=1))

    assert shmrc_run["at_kill"] >= 2, "the victim held a batch and had one in flight"
    assert shmrc_run["unheld_after_1s"] == 0
    assert shmrc_run["gone_ms"] is not None and shmrc_run["gone_ms"] <= 1000
    assert shmrc_run["steps_in_that_second"] > 0
    assert shmrc_run["second_epoch_batches"] == 125, "training went on"
    assert shmrc_run["after_main_let_go"] == 0
    assert shmrc_run["victim_segments_at_main_end"] == 0
    assert shmrc_run["left_3s_after_exit"] == 0, "the manager swept the whole job"
