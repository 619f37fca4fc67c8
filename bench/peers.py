#!/usr/bin/env python3
"""The Python peers of shmrc's benchmarks, and the plot of docs/PERFORMANCE.md.

Runs the ping-pong, stream and fill workloads of `shmrc bench` (a producer creates a
fresh shared buffer, writes byte 0 and sends it; a consumer process attaches, reads
byte 0, releases and acks; stream keeps up to 64 buffers in flight, fewer so that at
most 512 MiB are; fill is the stream with every byte written by the producer, the
64-bit words seed, seed + 1, ..., and every byte checked by the consumer, which acks
with the seed, as in bench/src/payload.rs) with:

- torch.multiprocessing, both sharing strategies (file_descriptor, file_system), the
  buffer a uint8 tensor whose storage is created in shared memory and sent through a
  torch.multiprocessing SimpleQueue;
- multiprocessing.shared_memory, the name sent through a Pipe, the producer unlinking
  after the ack.

torch fills and checks with one intra-op thread per process (`torch.set_num_threads(1)`,
as in DataLoader workers); numpy fills and checks multiprocessing.shared_memory's.

It also runs `shmrc bench --json` (shmrc and the raw-syscall floor) in the same run,
reads the criterion estimates of the Rust peers if `cargo bench -p shmrc-bench` left
them, prints one table and writes a JSON document and a PNG plot of microseconds per
buffer against size.

Usage, from the repository root (after `cargo build --release -p shmrc-cli -p shmrc-bench` and
`pip install torch matplotlib`):

    python3 bench/peers.py [--shmrc target/release/shmrc] [--quick]
        [--out docs/perf] [--criterion target/criterion]

torch is optional: without it only multiprocessing.shared_memory runs. numpy is needed
(torch brings it).
"""

import argparse
import glob
import json
import multiprocessing as mp
import os
import statistics
import subprocess
import sys
import time
from multiprocessing import shared_memory

SIZES = [4 << 10, 1 << 20, 64 << 20]


def window_for(size):
    return max(1, min(64, (512 << 20) // size))


# ----------------------------------------------------------------- the fill pattern
# Word k of a filled buffer is seed + k (little-endian int64 here; the seeds stay far
# from overflow). Each side keeps, per size, the words 0, 1, ... (`base`) and a scratch
# array, so that a fill is one pass writing the shared bytes (reading `base`) and a
# check one pass reading them (plus the scratch and `base`), with no allocation.

_seed = 0


def next_seed():
    global _seed
    _seed += 1
    return _seed << 32


class Pattern:
    """The per-size arrays of one side; `lib` is torch or numpy."""

    def __init__(self, lib):
        self.lib, self.cache = lib, {}

    def arrays(self, words):
        if words not in self.cache:
            base = self.lib.arange(words, dtype=self.lib.int64)
            scratch = base.clone() if self.lib.__name__ == "torch" else base.copy()
            self.cache[words] = (base, scratch)
        return self.cache[words]

    def fill(self, words_view, seed):
        base, _ = self.arrays(len(words_view))
        self.lib.add(base, seed, out=words_view)

    def check(self, words_view):
        """The seed in word 0 if every word follows it, else None."""
        base, scratch = self.arrays(len(words_view))
        seed = int(words_view[0])
        self.lib.subtract(words_view, seed, out=scratch)
        if self.lib.__name__ == "torch":
            same = self.lib.equal(scratch, base)
        else:
            same = self.lib.array_equal(scratch, base)
        return seed if same else None


def pattern_self_check(libs):
    """The check must catch one wrong byte anywhere (else the fill rows prove nothing)."""
    for lib in libs:
        pattern = Pattern(lib)
        for offset in (0, 9, 4095):
            words = lib.zeros(512, dtype=lib.int64)
            pattern.fill(words, 7 << 32)
            if pattern.check(words) != 7 << 32:
                raise RuntimeError(f"{lib.__name__}: a right buffer failed the check")
            raw = words.view(lib.uint8)
            raw[offset] ^= 0x40
            if pattern.check(words) == 7 << 32:
                raise RuntimeError(f"{lib.__name__}: byte {offset} written wrong passed the check")


# ---------------------------------------------------------------- torch.multiprocessing


def torch_consumer(strategy, inbox, acks):
    import torch
    import torch.multiprocessing as tmp

    tmp.set_sharing_strategy(strategy)
    torch.set_num_threads(1)  # as in a DataLoader worker (see TorchContender)
    pattern = Pattern(torch)
    while True:
        msg = inbox.get()
        if msg is None:
            return
        t, fill = msg
        ack = pattern.check(t.view(torch.int64)) if fill else int(t[0])
        del t, msg
        acks.put(ack)


def torch_new_buffer(torch, size):
    storage = torch.UntypedStorage._new_shared(size)
    t = torch.empty(0, dtype=torch.uint8).set_(storage)
    t[0] = 1
    return t


class TorchContender:
    def __init__(self, strategy):
        import torch
        import torch.multiprocessing as tmp

        self.torch = torch
        # One intra-op thread per process, as DataLoader workers run: with one per core
        # (torch's default), a producer and a consumer on a small machine spin against
        # each other in every whole-buffer op (the fill rows).
        torch.set_num_threads(1)
        self.name = f"torch {strategy}"
        tmp.set_sharing_strategy(strategy)
        ctx = tmp.get_context("spawn")
        self.inbox, self.acks = ctx.SimpleQueue(), ctx.SimpleQueue()
        self.proc = ctx.Process(target=torch_consumer, args=(strategy, self.inbox, self.acks))
        self.proc.start()
        self.pattern = Pattern(torch)

    def send(self, size, seed=None):
        t = torch_new_buffer(self.torch, size)
        if seed is not None:
            self.pattern.fill(t.view(self.torch.int64), seed)
        self.inbox.put((t, seed is not None))
        return t

    def ack(self, seed=None):
        expect = 1 if seed is None else seed
        got = self.acks.get()
        if got != expect:
            raise RuntimeError(f"consumer acked {got}, not {expect}: the bytes were not as written")

    def close(self):
        self.inbox.put(None)
        self.proc.join()


# --------------------------------------------------------- multiprocessing.shared_memory


def shm_consumer(conn):
    import numpy

    pattern = Pattern(numpy)
    while True:
        msg = conn.recv()
        if msg is None:
            return
        name, fill = msg
        # A spawned child shares its parent's resource tracker: registering the name
        # again there is a no-op, and the producer's unlink unregisters it.
        shm = shared_memory.SharedMemory(name=name)
        if fill:
            words = numpy.frombuffer(shm.buf, dtype=numpy.int64)
            ack = pattern.check(words)
            del words
        else:
            ack = shm.buf[0]
        shm.close()
        conn.send(ack)


class ShmContender:
    name = "multiprocessing.shared_memory"

    def __init__(self):
        ctx = mp.get_context("spawn")
        self.conn, theirs = ctx.Pipe()
        self.proc = ctx.Process(target=shm_consumer, args=(theirs,))
        self.proc.start()

    def send(self, size, seed=None):
        shm = shared_memory.SharedMemory(create=True, size=size)
        shm.buf[0] = 1
        if seed is not None:
            import numpy

            if not hasattr(self, "pattern"):
                self.pattern = Pattern(numpy)
            words = numpy.frombuffer(shm.buf, dtype=numpy.int64)
            self.pattern.fill(words, seed)
            del words
        self.conn.send((shm.name, seed is not None))
        return shm

    def ack(self, seed=None):
        expect = 1 if seed is None else seed
        got = self.conn.recv()
        if got != expect:
            raise RuntimeError(f"consumer acked {got}, not {expect}: the bytes were not as written")

    @staticmethod
    def drop(shm):
        shm.close()
        shm.unlink()

    def close(self):
        self.conn.send(None)
        self.proc.join()


def drop(contender, buf):
    if hasattr(contender, "drop"):
        contender.drop(buf)


def ping_pong(c, size, n):
    start = time.perf_counter()
    for _ in range(n):
        buf = c.send(size)
        c.ack()
        drop(c, buf)
    return time.perf_counter() - start


def stream(c, size, n, fill=False):
    window = window_for(size)
    start = time.perf_counter()
    in_flight = []
    for _ in range(n):
        if len(in_flight) == window:
            buf, seed = in_flight.pop(0)
            c.ack(seed)
            drop(c, buf)
        seed = next_seed() if fill else None
        in_flight.append((c.send(size, seed), seed))
    while in_flight:
        buf, seed = in_flight.pop(0)
        c.ack(seed)
        drop(c, buf)
    return time.perf_counter() - start


def fill_stream(c, size, n):
    return stream(c, size, n, fill=True)


def measure(c, workload, size, rounds, batch_seconds):
    one = max(workload(c, size, 1), 1e-6)
    n = max(1, min(5000, int(batch_seconds / one)))
    return statistics.median(workload(c, size, n) / n for _ in range(rounds)) * 1e9


# ---------------------------------------------------------------------------- the run


def run_shmrc(binary, quick):
    args = [binary, "bench", "--json"] + (["--quick"] if quick else [])
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    return json.loads(out)


def criterion_peers(directory):
    """Mean ns per ping-pong of the Rust peers from `cargo bench -p shmrc-bench` (if it ran)."""
    found = {}
    for path in glob.glob(os.path.join(directory, "ping_pong", "*", "*", "new", "estimates.json")):
        parts = path.split(os.sep)
        name, size = parts[-4], parts[-3]
        scale = {"KiB": 1 << 10, "MiB": 1 << 20}[size[-3:]]
        with open(path) as f:
            found.setdefault(name, {})[int(size[:-3]) * scale] = json.load(f)["mean"]["point_estimate"]
    return found


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shmrc", default="target/release/shmrc")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="docs/perf")
    p.add_argument("--criterion", default="target/criterion")
    a = p.parse_args()
    rounds, batch = (3, 0.2) if a.quick else (7, 0.5)

    contenders = []
    try:
        import torch  # noqa: F401

        contenders += [TorchContender("file_descriptor"), TorchContender("file_system")]
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
        print("torch is not installed: only multiprocessing.shared_memory runs", file=sys.stderr)
    contenders.append(ShmContender())
    import numpy

    pattern_self_check([numpy] + ([__import__("torch")] if torch_version else []))

    python = []
    for workload, fn in (("ping-pong", ping_pong), ("stream", stream), ("fill", fill_stream)):
        for size in SIZES:
            for c in contenders:
                ns = measure(c, fn, size, rounds, batch)
                python.append({"workload": workload, "size": size, "contender": c.name, "nanos_per_op": ns})
                print(f"{workload:10} {size:>9} {c.name:32} {ns / 1e3:12.2f} us/buffer", flush=True)
    for c in contenders:
        c.close()

    shmrc = run_shmrc(a.shmrc, a.quick)
    rust_peers = criterion_peers(a.criterion)
    doc = {
        "python": sys.version.split()[0],
        "torch": torch_version,
        "python_peers": python,
        "shmrc_bench": shmrc,
        "criterion_ping_pong_ns": rust_peers,
    }
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)

    # Ratios: Python peers against shmrc of the same strategy (cost over cost).
    rows = {(r["workload"], r["size"], r["contender"]): r["nanos_per_op"] for r in shmrc["results"]}
    rows.update({(r["workload"], r["size"], r["contender"]): r["nanos_per_op"] for r in python})
    print("\ncost relative to shmrc of the same strategy (higher = slower than shmrc)")
    for workload in ("ping-pong", "stream", "fill"):
        for size in SIZES:
            for peer, ours in (
                ("torch file_descriptor", "shmrc file_descriptor"),
                ("torch file_system", "shmrc file_system"),
                ("multiprocessing.shared_memory", "shmrc file_system"),
                ("torch file_system", "shmrc pool file_system"),
                ("multiprocessing.shared_memory", "shmrc pool file_system"),
                ("torch file_descriptor", "shmrc pool file_descriptor"),
                ("multiprocessing.shared_memory", "shmrc pool file_descriptor"),
            ):
                if (workload, size, peer) in rows:
                    r = rows[(workload, size, peer)] / rows[(workload, size, ours)]
                    print(f"{workload:10} {size:>9} {peer:32} {r:8.2f}x {ours}")

    plot(rows, rust_peers, a.out + ".png")


def plot(rows, rust_peers, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.5))
    panels = (
        ("ping-pong", "ping-pong: create (or reuse), share, attach, read byte 0, release, ack"),
        ("fill", "fill: the stream, every byte written and every byte checked"),
    )
    for ax, (workload, title) in zip(axes, panels):
        names = sorted({name for (w, _, name) in rows if w == workload})
        for name in names:
            ys = [rows.get((workload, s, name)) for s in SIZES]
            if all(y is not None for y in ys):
                if name.startswith("shmrc"):
                    style = "-D" if "pool" in name else "-o"
                elif name.startswith("floor"):
                    style = "-." if "reused" in name else "--"
                else:
                    style = ":s"
                ax.plot(SIZES, [y / 1e3 for y in ys], style, label=name)
        if workload == "ping-pong":
            for name, by_size in sorted(rust_peers.items()):
                if all(s in by_size for s in SIZES) and not name.startswith(("shmrc", "floor")):
                    ax.plot(SIZES, [by_size[s] / 1e3 for s in SIZES], ":^", label=f"{name} (criterion)")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(SIZES, ["4 KiB", "1 MiB", "64 MiB"])
        ax.set_xlabel("buffer size")
        ax.set_ylabel(f"microseconds per buffer ({workload})")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}")


if __name__ == "__main__":
    main()
