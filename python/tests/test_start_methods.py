"""Every start method (issue 27, item 3): {fork, spawn, forkserver} x {install() at module
top level, inside main(), in the children only (worker_init_fn, Pool initializer)} x
{DataLoader worker, torch.multiprocessing Process with Queues, Pool worker}: the children
have shmrc.torch installed and what they send arrives in shmrc memory. Each of the 9
cases is a job of its own (start_method_scenario.py); they run three at a time, started
once for the module, each test asserting its own case's result."""
import json
import multiprocessing as mp
import os
import subprocess
import sys
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

import pytest

torch = pytest.importorskip("torch")
import shmrc  # noqa: E402
import shmrc.torch  # noqa: E402

from conftest import shm_names  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
METHODS = ["fork", "spawn", "forkserver"]
MODES = ["top", "main", "worker_init_fn"]
CASES = [(method, mode) for method in METHODS for mode in MODES]
PREFIX = "shmrc-py-start-%d" % os.getpid()


def _namespace(method, mode):
    return "%s-%s-%s" % (PREFIX, method, mode.replace("_", ""))


def _run(case):
    method, mode = case
    env = dict(os.environ, SHMRC_SCENARIO="%s %s %s" % (method, mode, _namespace(method, mode)))
    start = time.monotonic()
    out = subprocess.run(
        [sys.executable, os.path.join(HERE, "start_method_scenario.py")],
        capture_output=True,
        text=True,
        timeout=240,
        env=env,
        cwd="/",
    )
    seconds = time.monotonic() - start
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    if out.returncode != 0 or not lines:
        return {"error": "exit %d: %s" % (out.returncode, out.stderr[-3000:]), "seconds": seconds}
    return dict(json.loads(lines[-1]), seconds=round(seconds, 1))


@pytest.fixture(scope="module")
def results():
    with ThreadPoolExecutor(max_workers=3) as running:
        done = dict(zip(CASES, running.map(_run, CASES)))
    yield done
    # Every job has exited: the manager unlinks what its processes held within
    # milliseconds; nothing of any case's namespace may stay.
    deadline = time.monotonic() + 3
    left = []
    while time.monotonic() < deadline:
        left = [n for case in CASES for n in shm_names(_namespace(*case))]
        if not left:
            break
        time.sleep(0.05)
    for case in CASES:
        shmrc.sweep(_namespace(*case))
    assert not left, "left in /dev/shm: %s" % left


@pytest.mark.timeout(600)
@pytest.mark.parametrize("method,mode", CASES)
def test_children_use_shmrc_for_every_start_method_and_install_place(results, method, mode):
    got = results[(method, mode)]
    assert "error" not in got, got["error"]
    for kind in ("dataloader", "queue", "pool"):
        child = got[kind]
        assert child["child_installed"], (kind, got)
        assert child["sent_in_shmrc"] == child["of"], (kind, got)
        assert child["data_ok"], (kind, got)
    # What the parent sends goes in shmrc memory too, where the parent installed it.
    assert got["queue"]["received_in_shmrc"] == (mode != "worker_init_fn"), got


@pytest.mark.timeout(60)
def test_install_after_a_spawned_child_started_warns_once_with_the_fix():
    ctx = mp.get_context("spawn")
    child = ctx.Process(target=time.sleep, args=(30,))
    child.start()
    shmrc.torch._WARNED.clear()
    try:
        with pytest.warns(RuntimeWarning, match=r"started before it.*worker_init_fn"):
            shmrc.torch.install()
        shmrc.torch.uninstall()
        with warnings.catch_warnings(record=True) as again:
            warnings.simplefilter("always")
            shmrc.torch.install()
        assert not again, "warned once only: %s" % [str(w.message) for w in again]
    finally:
        shmrc.torch.uninstall()
        child.kill()
        child.join(10)
