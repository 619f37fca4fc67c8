#!/usr/bin/env python3
"""torch's CUDA IPC, measured as bench/src/bin/cuda_bandwidth.rs measures shmrc's.

A producer shares a CUDA uint8 tensor of --mib MiB with a consumer process through
torch.multiprocessing (a legacy IPC handle under the hood); the consumer times the
receive (the handle's open), then --iters device-to-device copies from the shared
tensor into one of its own, one torch.cuda.synchronize(), and checks the bytes. The
baseline is the same copy loop in the producer. Prints a table; --json PATH writes it.

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

    start = time.perf_counter()
    src = tensors.get()
    attach_us = (time.perf_counter() - start) * 1e6
    dst = torch.empty_like(src)
    seconds = time_copies(torch, dst, src, iters)
    n = min(CHECKED, dst.numel())
    ok = bool(torch.equal(dst[:n].cpu(), pattern(torch, n)))
    del src
    results.put((attach_us, seconds, ok))
    tensors.get()  # the producer's go-ahead to exit


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=256)
    parser.add_argument("--iters", type=int, default=20)
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
    attach_us, seconds, ok = results.get(timeout=600)
    tensors.put(None)
    proc.join(timeout=60)
    if proc.exitcode != 0 or not ok:
        print(f"the torch consumer failed (exit {proc.exitcode}, bytes ok: {ok})")
        return 1
    ipc = nbytes * iters / seconds / 1e9
    rows = [
        {"path": "torch_in_process", "gbps": local, "ratio": 1.0, "attach_us": None},
        {"path": "torch_cuda_ipc", "gbps": ipc, "ratio": ipc / local, "attach_us": attach_us},
    ]
    device = f"{torch.cuda.get_device_name(0)}, torch {torch.__version__}, CUDA {torch.version.cuda}"
    print(f"device-to-device copies of {nbytes >> 20} MiB x {iters} ({device})")
    print(f"{'path':<16} {'GB/s':>10} {'ratio':>8} {'attach µs':>10}")
    for row in rows:
        attach = "-" if row["attach_us"] is None else f"{row['attach_us']:.0f}"
        print(f"{row['path']:<16} {row['gbps']:>10.2f} {row['ratio']:>8.3f} {attach:>10}")
    if args.json:
        with open(args.json, "w") as out:
            json.dump({"device": device, "bytes": nbytes, "iters": iters, "rows": rows}, out, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
