#!/usr/bin/env python3
"""torch's CUDA IPC, measured as bench/src/bin/cuda_bandwidth.rs measures shmrc's.

A producer shares a CUDA uint8 tensor of --mib MiB with a consumer process through
torch.multiprocessing (a legacy IPC handle under the hood); the consumer does --iters
device-to-device copies from the shared tensor into one of its own, one
torch.cuda.synchronize(), and checks the bytes. The baseline is the same copy loop in
the producer.

Attach times as cuda_bandwidth measures shmrc's: in --rounds fresh consumer processes,
each with its CUDA context made (and torch imported) and every message already arrived
before the clock starts (the consumer says it is ready, the producer sends 1 + --warm
tensors of distinct allocations, one message each, and the consumer polls until the last
is there); the clock covers only the unpickling that opens the IPC handle. The first
attach in a process is the "first" figure, the others the "warm" ones. Prints a table;
--json PATH writes it.

Exit status 2 (and a line saying why) when torch is missing or sees no GPU: the
comparison did not run; nothing is reported as measured.
"""
import argparse
import json
import sys
import time

CHECKED = 1 << 20


def pattern(torch, n):
    return (torch.arange(n, dtype=torch.int64) * 31 % 251).to(torch.uint8)


def time_copies(torch, dst, src, iters):
    """Seconds for `iters` copies of src into dst, after one warm-up copy."""
    dst.copy_(src)
    torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(iters):
        dst.copy_(src)
    torch.cuda.synchronize()
    return time.perf_counter() - start


def consumer(tensors, results, iters):
    import torch

    src = tensors.get()
    dst = torch.empty_like(src)
    seconds = time_copies(torch, dst, src, iters)
    n = min(CHECKED, dst.numel())
    ok = bool(torch.equal(dst[:n].cpu(), pattern(torch, n)))
    del src
    results.put((seconds, ok))
    tensors.get()  # the producer's go-ahead to exit


def attach_consumer(conn, count):
    """Makes its CUDA context, says ready, receives all `count` messages (raw bytes),
    then times each unpickling, which opens the IPC handle, alone; checks the bytes
    after."""
    import torch
    import torch.multiprocessing  # noqa: F401  (its reductions: imported before the clock)
    from multiprocessing.reduction import ForkingPickler

    torch.empty(1, device="cuda")
    torch.cuda.synchronize()
    conn.send("ready")
    raws = [conn.recv_bytes() for _ in range(count)]
    times, tensors = [], []
    for raw in raws:
        start = time.perf_counter()
        tensor = ForkingPickler.loads(raw)
        times.append((time.perf_counter() - start) * 1e6)
        tensors.append(tensor)
    n = min(CHECKED, tensors[0].numel())
    expected = pattern(torch, n)
    ok = all(bool(torch.equal(t[:n].cpu(), expected)) for t in tensors)
    del tensors
    torch.cuda.synchronize()
    conn.send((ok, times))
    conn.recv()  # the producer's go-ahead to exit


def attach_round(torch, ctx, nbytes, warm):
    """One consumer process: (first attach µs, [warm attach µs]), or raises."""
    n = min(CHECKED, nbytes)
    sources = []
    for _ in range(1 + warm):
        t = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
        t[:n] = pattern(torch, n).cuda()
        sources.append(t)
    torch.cuda.synchronize()
    mine, theirs = ctx.Pipe()
    proc = ctx.Process(target=attach_consumer, args=(theirs, len(sources)))
    proc.start()
    try:
        if not mine.poll(300) or mine.recv() != "ready":
            raise RuntimeError("the attach consumer did not get ready")
        for t in sources:
            mine.send(t)
        if not mine.poll(300):
            raise RuntimeError("the attach consumer did not answer")
        ok, times = mine.recv()
        mine.send("done")
        proc.join(timeout=60)
    finally:
        if proc.is_alive():
            proc.kill()  # ours, by its handle
            proc.join()
    if proc.exitcode != 0 or not ok:
        raise RuntimeError(f"the attach consumer failed (exit {proc.exitcode}, bytes ok: {ok})")
    return times[0], times[1:]


def summary(values):
    if not values:
        return None
    values = sorted(values)
    k = len(values)
    median = values[k // 2] if k % 2 else (values[k // 2 - 1] + values[k // 2]) / 2
    return {"median": median, "min": values[0], "max": values[-1], "n": k}


def show(s):
    return "-" if s is None else f"{s['median']:.0f} ({s['min']:.0f}-{s['max']:.0f})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--warm", type=int, default=4)
    parser.add_argument("--json")
    args = parser.parse_args()
    try:
        import torch
        import torch.multiprocessing as mp
    except ImportError:
        print("torch is not installed: the torch CUDA IPC comparison did not run")
        return 2
    if not torch.cuda.is_available():
        print("torch sees no GPU: the torch CUDA IPC comparison did not run")
        return 2
    nbytes, iters = max(args.mib, 1) << 20, max(args.iters, 1)
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda")
    n = min(CHECKED, nbytes)
    src[:n] = pattern(torch, n).cuda()
    dst = torch.empty_like(src)
    local = nbytes * iters / time_copies(torch, dst, src, iters) / 1e9
    del dst

    ctx = mp.get_context("spawn")
    tensors, results = ctx.Queue(), ctx.Queue()
    proc = ctx.Process(target=consumer, args=(tensors, results, iters))
    proc.start()
    tensors.put(src)
    seconds, ok = results.get(timeout=600)
    tensors.put(None)
    proc.join(timeout=60)
    if proc.exitcode != 0 or not ok:
        print(f"the torch consumer failed (exit {proc.exitcode}, bytes ok: {ok})")
        return 1
    del src
    rounds, warm = max(args.rounds, 1), max(args.warm, 0)
    first, warm_times = [], []
    for _ in range(rounds):
        f, w = attach_round(torch, ctx, nbytes, warm)
        first.append(f)
        warm_times.extend(w)
        torch.cuda.empty_cache()
    ipc = nbytes * iters / seconds / 1e9
    rows = [
        {"path": "torch_in_process", "gbps": local, "ratio": 1.0,
         "attach_first_us": None, "attach_warm_us": None},
        {"path": "torch_cuda_ipc", "gbps": ipc, "ratio": ipc / local,
         "attach_first_us": summary(first), "attach_warm_us": summary(warm_times)},
    ]
    device = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    print(f"device-to-device copies of {nbytes >> 20} MiB x {iters} ({device})")
    print(f"attach: {rounds} consumer processes, each with its context made and the messages "
          f"arrived before the clock; first = its first attach, warm = the {warm} after "
          "(µs, median (min-max))")
    print(f"{'path':<16} {'GB/s':>10} {'ratio':>8} {'attach first µs':>22} {'attach warm µs':>22}")
    for row in rows:
        print(f"{row['path']:<16} {row['gbps']:>10.2f} {row['ratio']:>8.3f} "
              f"{show(row['attach_first_us']):>22} {show(row['attach_warm_us']):>22}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": device, "bytes": nbytes, "iters": iters, "rounds": rounds,
                       "warm": warm,
                       "attach_measured": "context ready and the message arrived before the clock",
                       "rows": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
