"""DataLoader epochs and queue ping-pong under torch's file_descriptor, torch's
file_system, and shmrc (both strategies, file_system with recycling:
``shmrc.torch.install(..., pool=True)``, and that with ``shmrc.torch.DataLoader``, the
loader that replaces killed workers), all in one run: each configuration in a fresh
process, the configurations interleaved round by round, the median reported.

Workloads: a whole epoch with worker start-up (``epoch_*``), and the steady-state
epoch: the second epoch of a loader with persistent workers, the first untimed
(``steady_epoch_1MiB``).

    python bench/bench_torch.py --out docs/python-bench.json --plot docs/python-bench.png

Writes one JSON object (config -> workload -> seconds per round) and, with --plot, a
bar chart of the medians relative to torch's default (file_descriptor)."""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

LOAD_AT_START = None

CONFIGS = [
    "torch_file_descriptor",
    "torch_file_system",
    "shmrc_file_descriptor",
    "shmrc_file_system",
    "shmrc_file_system_pooled",
    "shmrc_file_system_pooled_resilient",
]


def setup(config):
    import torch.multiprocessing as tmp

    if config.startswith("torch_"):
        tmp.set_sharing_strategy(config[len("torch_"):])
    else:
        import shmrc.torch

        strategy = config[len("shmrc_"):]
        if strategy.endswith("_resilient"):
            strategy = strategy[: -len("_resilient")]
        pool = strategy.endswith("_pooled")
        strategy = strategy[: -len("_pooled")] if pool else strategy
        shmrc.torch.install(strategy, "shmrc-bench-%d" % os.getpid(), pool=pool)


def loader_class(config):
    if config.endswith("_resilient"):
        import shmrc.torch

        return shmrc.torch.DataLoader
    from torch.utils.data import DataLoader

    return DataLoader


def epoch(config, batch_mib, batches, workers, steady=False):
    import torch
    from torch.utils.data import Dataset

    item = torch.ones(batch_mib * (1 << 20) // 16 // 4)  # 16 float32 items per batch

    class Items(Dataset):
        def __len__(self):
            return batches * 16

        def __getitem__(self, i):
            return item

    loader = loader_class(config)(
        Items(), batch_size=16, num_workers=workers, prefetch_factor=2, persistent_workers=steady
    )

    def one_epoch():
        total = 0.0
        for batch in loader:
            total += float(batch[0, 0])  # touch the batch, as a training step would
        assert total == batches

    if steady:
        one_epoch()  # workers started, pools filled
    start = time.perf_counter()
    one_epoch()
    return time.perf_counter() - start


def _pong(inbox, outbox, rounds):
    for _ in range(rounds):
        outbox.put(inbox.get())
    inbox.get()  # stay until the last tensor was received (its fd is passed from here)


def ping_pong(mib, rounds):
    import torch
    import torch.multiprocessing as tmp

    ctx = tmp.get_context("fork")
    inbox, outbox = ctx.Queue(), ctx.Queue()
    child = ctx.Process(target=_pong, args=(inbox, outbox, rounds + 1))
    child.start()
    tensor = torch.ones(mib * (1 << 20) // 4)
    inbox.put(tensor)
    tensor = outbox.get()  # warm-up round: the storage is shared from now on
    start = time.perf_counter()
    for _ in range(rounds):
        inbox.put(tensor)
        tensor = outbox.get()
    elapsed = time.perf_counter() - start
    inbox.put(None)
    child.join()
    return elapsed / rounds


def one(config, args):
    setup(config)
    return {
        "epoch_1MiB": epoch(config, 1, args.batches_1mib, 4),
        "epoch_16MiB": epoch(config, 16, args.batches_16mib, 4),
        "steady_epoch_1MiB": epoch(config, 1, args.batches_1mib, 4, steady=True),
        "pingpong_1MiB": ping_pong(1, args.rounds),
    }


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rounds-of-all", type=int, default=3)
    p.add_argument("--batches-1mib", type=int, default=1000)
    p.add_argument("--batches-16mib", type=int, default=100)
    p.add_argument("--rounds", type=int, default=500)
    p.add_argument("--only", help=argparse.SUPPRESS)
    p.add_argument("--out")
    p.add_argument("--plot")
    args = p.parse_args()
    if args.only:
        print(json.dumps(one(args.only, args)))
        return
    global LOAD_AT_START
    LOAD_AT_START = os.getloadavg()
    results = {c: {} for c in CONFIGS}
    for _ in range(args.rounds_of_all):
        for config in CONFIGS:
            out = subprocess.run(
                [sys.executable, os.path.abspath(__file__), "--only", config]
                + ["--batches-1mib", str(args.batches_1mib), "--batches-16mib", str(args.batches_16mib)]
                + ["--rounds", str(args.rounds)],
                capture_output=True, text=True, check=True, cwd="/",
            )
            for k, v in json.loads(out.stdout.splitlines()[-1]).items():
                results[config].setdefault(k, []).append(v)
    summary = {
        "setup": {
            "batches_1MiB": args.batches_1mib, "batches_16MiB": args.batches_16mib,
            "workers": 4, "pingpong_rounds": args.rounds, "repeats": args.rounds_of_all,
            "cpus": os.cpu_count(),
        },
        "seconds": results,
        "median": {c: {k: statistics.median(v) for k, v in r.items()} for c, r in results.items()},
        "min": {c: {k: min(v) for k, v in r.items()} for c, r in results.items()},
        "max": {c: {k: max(v) for k, v in r.items()} for c, r in results.items()},
        "load_average_at_start_and_end": [LOAD_AT_START, os.getloadavg()],
    }
    text = json.dumps(summary, indent=1)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.plot:
        plot(summary, args.plot)


def plot(summary, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    workloads = list(summary["median"][CONFIGS[0]])
    base = summary["median"]["torch_file_descriptor"]
    fig, ax = plt.subplots(figsize=(8, 4))
    width = 0.8 / len(CONFIGS)
    for i, config in enumerate(CONFIGS):
        ratios = [summary["median"][config][w] / base[w] for w in workloads]
        ax.bar([x + i * width for x in range(len(workloads))], ratios, width, label=config)
    ax.set_xticks([x + width * (len(CONFIGS) - 1) / 2 for x in range(len(workloads))])
    ax.set_xticklabels(workloads)
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_ylabel("time relative to torch file_descriptor (lower is faster)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    main()
