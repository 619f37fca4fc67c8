"""shmrc.shared_memory against the stdlib's multiprocessing.shared_memory, in one run.

Timings (each round times both, alternating which goes first; the median of the
rounds is reported, with the ratio shmrc / stdlib):

* ``cycle_4KiB``, ``cycle_64MiB``: create a block (random name), attach it by name,
  close both, unlink: what a producer/consumer pair does per block.
* ``cycle_fill_64MiB``: the same, the creator writing every byte before the attach
  (both then pay for the pages; shmrc reserves them at create, with
  ``posix_fallocate``, so that a full ``/dev/shm`` is an error at create and never a
  SIGBUS at a write, while the stdlib maps them lazily).
* ``attach_4KiB``: attach by name and close, here, a block another process made and
  holds (the stdlib's attach also registers the name with its resource tracker; one
  unregister after the timed loop keeps the tracker from unlinking the holder's block
  at this process's exit).

Crash (the table of docs/PYTHON.md): a process holding 100 blocks of 4 KiB, writing
to them, is SIGKILLed; this process holds every other one (50). Then /dev/shm is
polled every millisecond until 2 s after the kill (times count from the kill call): when the 50 blocks nobody else holds went, and how
many of each half are there 100 ms and 2 s after the kill. Twice per module: the
holder alone is killed, and its whole process group is (as a container stop or
``kill -9 -PGID`` does: the stdlib's resource tracker, a child of the holder, dies
with it; shmrc's manager runs in a session of its own).

    python bench/bench_shared_memory.py [--rounds 15] [--out results.json] [--crash-only]
"""
import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import time
import warnings
from multiprocessing import resource_tracker
from multiprocessing import shared_memory as stdlib

HERE = os.path.dirname(os.path.abspath(__file__))
SCENARIO = os.path.join(HERE, "..", "tests", "shm_holder_scenario.py")
NS = "shmrc-bench-sm-%d" % os.getpid()
os.environ["SHMRC_SHARED_MEMORY_NAMESPACE"] = NS

from shmrc import shared_memory as shmrc_sm  # noqa: E402  (after the namespace)

MODULES = {"stdlib": stdlib, "shmrc": shmrc_sm}


def cycle(module, size, n):
    SharedMemory = module.SharedMemory
    start = time.perf_counter()
    for _ in range(n):
        a = SharedMemory(create=True, size=size)
        b = SharedMemory(a.name)
        b.close()
        a.close()
        a.unlink()
    return (time.perf_counter() - start) / n


def cycle_fill(module, size, n):
    SharedMemory = module.SharedMemory
    ones = FILL[size]
    start = time.perf_counter()
    for _ in range(n):
        a = SharedMemory(create=True, size=size)
        a.buf[:] = ones
        b = SharedMemory(a.name)
        b.close()
        a.close()
        a.unlink()
    return (time.perf_counter() - start) / n


HOLDER = """
import sys
from %s import SharedMemory
block = SharedMemory(create=True, size=%d)
print(block.name, flush=True)
sys.stdin.read()
block.close()
block.unlink()
"""


def attach(module, size, n):
    """Attach by name and close, in this process, a block another process made and
    holds (so that each attach is a whole one)."""
    SharedMemory = module.SharedMemory
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER % (module.__name__, size)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    name = holder.stdout.readline().decode().strip()
    start = time.perf_counter()
    for _ in range(n):
        b = SharedMemory(name)
        b.close()
    elapsed = time.perf_counter() - start
    if module is stdlib:
        # The stdlib registered each attach with its resource tracker (a set of
        # names), which would unlink the holder's block at this process's exit.
        resource_tracker.unregister("/" + name, "shared_memory")
    holder.stdin.close()
    holder.wait()
    holder.stdout.close()
    return elapsed / n


FILL = {64 << 20: b"\x01" * (64 << 20)}

WORKLOADS = {
    "cycle_4KiB": (cycle, 4096, 2000),
    "cycle_64MiB": (cycle, 64 << 20, 30),
    "cycle_fill_64MiB": (cycle_fill, 64 << 20, 10),
    "attach_4KiB": (attach, 4096, 5000),
}


def timings(rounds):
    results = {w: {m: [] for m in MODULES} for w in WORKLOADS}
    for w, (fn, size, n) in WORKLOADS.items():
        for m in MODULES:  # warm-up, untimed
            fn(MODULES[m], size, max(1, n // 10))
        for r in range(rounds):
            order = list(MODULES) if r % 2 == 0 else list(reversed(list(MODULES)))
            for m in order:
                results[w][m].append(fn(MODULES[m], size, n))
    return results


def on_dev_shm(files):
    return sum(os.path.exists(os.path.join("/dev/shm", f)) for f in files)


def crash(mode, group):
    child = subprocess.Popen(
        [sys.executable, SCENARIO, mode, NS, "100"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    made = json.loads(child.stdout.readline())
    module = MODULES[mode]
    held = []
    for name in made["names"][::2]:
        block = module.SharedMemory(name)
        if mode == "stdlib":
            # This process lets go of the name itself (below), not its tracker at exit.
            resource_tracker.unregister(block._name, "shared_memory")
        held.append(block)
    held_files, unheld_files = made["files"][::2], made["files"][1::2]
    assert on_dev_shm(made["files"]) == 100
    killed = time.perf_counter()  # times count from the kill itself
    if group:
        os.killpg(child.pid, signal.SIGKILL)
    else:
        child.send_signal(signal.SIGKILL)
    child.wait()
    unheld_gone_ms = None
    at_100ms = None
    while True:
        now = time.perf_counter() - killed
        unheld = on_dev_shm(unheld_files)
        if unheld == 0 and unheld_gone_ms is None:
            unheld_gone_ms = now * 1000
        if at_100ms is None and now >= 0.1:
            at_100ms = (unheld, on_dev_shm(held_files))
        if now >= 2.0:
            break
        time.sleep(0.001)
    at_2s = (on_dev_shm(unheld_files), on_dev_shm(held_files))
    intact = all(
        int.from_bytes(block.buf[:8], "little") == 2 * i for i, block in enumerate(held)
    )
    child.stdout.close()
    stderr = child.stderr.read().decode()
    child.stderr.close()
    for block in held:
        block.close()
    # Clean up what the stdlib left (and the names of the held shmrc blocks).
    for name, file in zip(made["names"], made["files"]):
        if mode == "stdlib":
            try:
                os.unlink(os.path.join("/dev/shm", file))
            except FileNotFoundError:
                pass
    if mode == "shmrc":
        shmrc_sm.prune()
    return {
        "killed": "process group" if group else "holder",
        "unheld_gone_ms": unheld_gone_ms,
        "unheld_at_100ms": at_100ms[0],
        "held_at_100ms": at_100ms[1],
        "unheld_at_2s": at_2s[0],
        "held_at_2s": at_2s[1],
        "held_bytes_intact": intact,
        "leak_warning": "leaked shared_memory" in stderr,
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--out")
    parser.add_argument("--crash-only", action="store_true", help="skip the timings")
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    report = {"python": sys.version.split()[0], "timings": {}, "crash": {}}
    for w, per in ({} if args.crash_only else timings(args.rounds)).items():
        med = {m: statistics.median(v) for m, v in per.items()}
        report["timings"][w] = {
            "stdlib_us": med["stdlib"] * 1e6,
            "shmrc_us": med["shmrc"] * 1e6,
            "ratio": med["shmrc"] / med["stdlib"],
        }
        print(
            "%-12s stdlib %9.1f us  shmrc %9.1f us  shmrc/stdlib %.2f"
            % (w, med["stdlib"] * 1e6, med["shmrc"] * 1e6, med["shmrc"] / med["stdlib"]),
            flush=True,
        )
    for mode in ("stdlib", "shmrc"):
        for group in (False, True):
            row = crash(mode, group)
            report["crash"]["%s, %s killed" % (mode, row["killed"])] = row
            print(mode, json.dumps(row), flush=True)
    directory = shmrc_sm._index_dir(NS)
    if os.path.exists(os.path.join(directory, ".lock")):
        os.unlink(os.path.join(directory, ".lock"))
    os.rmdir(directory)
    if args.out:
        with open(args.out, "w") as out:
            json.dump(report, out, indent=1)


if __name__ == "__main__":
    main()
