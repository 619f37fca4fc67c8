#!/usr/bin/env python3
"""shmrc against iceoryx2 in the same run (issue 33 item 6): the table and the plot.

Builds and runs bench/iceoryx2 (its own package and lock file: iceoryx2 needs Rust 1.89),
which prints one JSON object a line; writes OUT.json (the rows, the date, the commit,
the load average before and after), prints the markdown table of docs/PERFORMANCE.md
("shmrc against iceoryx2"), and draws OUT.png (needs matplotlib).

    python3 bench/iceoryx2_compare.py [--quick] [--out docs/perf/iceoryx2]
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MANIFEST = os.path.join(HERE, "iceoryx2", "Cargo.toml")


def size_name(size):
    for unit, name in ((1 << 20, "MiB"), (1 << 10, "KiB")):
        if size >= unit and size % unit == 0:
            return f"{size // unit} {name}"
    return f"{size} B"


def run(quick, extra):
    subprocess.run(["cargo", "build", "--release", "--locked", "--manifest-path", MANIFEST], check=True)
    target = os.environ.get("CARGO_TARGET_DIR", os.path.join(HERE, "iceoryx2", "target"))
    binary = os.path.join(target, "release", "shmrc-iceoryx2-compare")
    args = [binary, "run"] + (["--quick"] if quick else []) + extra
    load_before = os.getloadavg()
    out = subprocess.run(args, check=True, stdout=subprocess.PIPE, text=True).stdout
    load_after = os.getloadavg()
    rows = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    commit = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE, text=True).stdout.strip()
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"], stdout=subprocess.PIPE, text=True).stdout.strip()
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "commit": commit + ("+uncommitted" if dirty else ""),
        "cpus": os.cpu_count(),
        "load_before": [round(x, 2) for x in load_before],
        "load_after": [round(x, 2) for x in load_after],
        "quick": quick,
        "rows": rows,
    }


def verdict(ours, theirs):
    """Goal: ours <= 2x theirs (costs in µs); a cost at or below zero is no cost."""
    if ours is None or theirs is None:
        return "—"
    if ours <= 0:
        return "met (no cost above the floor)"
    if theirs <= 0:
        return "missed (iceoryx2 has no cost above the floor)"
    ratio = ours / theirs
    return f"{'met' if ratio <= 2 else 'missed'} ({ratio:.1f}×)"


def table(doc):
    rows = doc["rows"]
    rt = {(r["contender"], r["receive"], r["size"], r["subscribers"]): r for r in rows if r["kind"] == "round_trip"}
    shapes = sorted({(s, n) for (_, _, s, n) in rt})
    rounds = next(iter(rt.values()))["rounds"] if rt else 0
    passes = next(iter(rt.values())).get("passes", 1) if rt else 0
    lines = [
        f"Measured {doc['date']}, commit {doc['commit']}, {doc['cpus']} CPUs, load average "
        f"{doc['load_before'][0]} before the run and {doc['load_after'][0]} after "
        f"({'quick' if doc['quick'] else 'full'} run, {rounds} timed rounds a row in {passes} "
        f"pass{'es' if passes > 1 else ''} over every configuration).",
        "",
        "Round trip, µs, p50 / p99:",
        "",
        "| size | subs | floor (socket) | shmrc pub/sub, futex | shmrc pub/sub, polling | shmrc pool + transport "
        "| iceoryx2, event | iceoryx2, polling |",
        "|---|---|---|---|---|---|---|---|",
    ]

    def get(c, recv, size, n):
        return rt.get((c, recv, size, n))

    def pp(r):
        return f"{r['p50_us']:.1f} / {r['p99_us']:.1f}" if r else "—"

    contenders = (
        ("floor", "blocking"),
        ("shmrc-pubsub", "blocking"),
        ("shmrc-pubsub", "polling"),
        ("shmrc-pool", "blocking"),
        ("iceoryx2", "blocking"),
        ("iceoryx2", "polling"),
    )
    for size, n in shapes:
        cells = " | ".join(pp(get(c, recv, size, n)) for c, recv in contenders)
        lines.append(f"| {size_name(size)} | {n} | {cells} |")
    lines += [
        "",
        "Goals (p50): own cost above the wake-up floor ≤ 2× iceoryx2's; polling receive ≤ 2× iceoryx2's:",
        "",
        "| size | subs | above floor: shmrc pub/sub · shmrc pool · iceoryx2 | pub/sub vs iceoryx2 | pool vs iceoryx2 "
        "| polling: shmrc · iceoryx2 | polling goal |",
        "|---|---|---|---|---|---|---|",
    ]
    for size, n in shapes:
        floor = get("floor", "blocking", size, n)
        above = {}
        for c in ("shmrc-pubsub", "shmrc-pool", "iceoryx2"):
            r = get(c, "blocking", size, n)
            above[c] = r["p50_us"] - floor["p50_us"] if r and floor else None
        fmt = " · ".join(f"{above[c]:.1f}" if above[c] is not None else "—" for c in above)
        sp, ip = get("shmrc-pubsub", "polling", size, n), get("iceoryx2", "polling", size, n)
        poll = f"{sp['p50_us']:.1f} · {ip['p50_us']:.1f}" if sp and ip else "—"
        poll_goal = verdict(sp["p50_us"], ip["p50_us"]) if sp and ip else "—"
        lines.append(
            f"| {size_name(size)} | {n} | {fmt} | {verdict(above['shmrc-pubsub'], above['iceoryx2'])} "
            f"| {verdict(above['shmrc-pool'], above['iceoryx2'])} | {poll} | {poll_goal} |"
        )
    lines += [
        "",
        "Throughput, samples a second reaching every subscriber (8 in flight, over the median round of 8):",
        "",
        "| size | subs | " + " | ".join(f"{c} {recv}" for c, recv in contenders) + " |",
        "|---|---|" + "---|" * len(contenders),
    ]
    for size, n in shapes:
        cells = " | ".join(
            f"{r['samples_per_s']:.0f}" if (r := get(c, recv, size, n)) else "—" for c, recv in contenders
        )
        lines.append(f"| {size_name(size)} | {n} | {cells} |")
    lines += [
        "",
        "| recovery: a subscriber SIGKILLed holding 4 samples of 4 KiB | cleanup call | recovered | µs from the kill, p50 / p99 |",
        "|---|---|---|---|",
    ]
    for r in rows:
        if r["kind"] == "recovery":
            when = (
                f"{r['p50_us']:.0f} / {r['p99_us']:.0f}"
                if r["p50_us"] is not None
                else f"never within {r['deadline_ms']} ms"
            )
            lines.append(
                f"| {r['contender']} | {r['cleanup']} | {r['recovered']} of {r['trials']} "
                f"(deadline {r['deadline_ms']} ms) | {when} |"
            )
    return "\n".join(lines)


def plot(doc, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot", file=sys.stderr)
        return
    rt = [r for r in doc["rows"] if r["kind"] == "round_trip"]
    subs = sorted({r["subscribers"] for r in rt})
    sizes = sorted({r["size"] for r in rt})
    fig, axes = plt.subplots(1, len(subs), figsize=(7 * len(subs), 5), squeeze=False)
    styles = {
        ("floor", "blocking"): ("--", "Unix-socket floor"),
        ("shmrc-pool", "blocking"): ("-D", "shmrc pool + transport"),
        ("shmrc-pubsub", "blocking"): ("-o", "shmrc pub/sub, blocking"),
        ("shmrc-pubsub", "polling"): (":o", "shmrc pub/sub, polling"),
        ("iceoryx2", "blocking"): ("-s", "iceoryx2, event"),
        ("iceoryx2", "polling"): (":s", "iceoryx2, spin"),
    }
    for ax, n in zip(axes[0], subs):
        for (c, recv), (style, label) in styles.items():
            by = {r["size"]: r for r in rt if r["contender"] == c and r["receive"] == recv and r["subscribers"] == n}
            if all(s in by for s in sizes):
                line = ax.plot(sizes, [by[s]["p50_us"] for s in sizes], style, label=f"{label} p50")[0]
                ax.plot(sizes, [by[s]["p99_us"] for s in sizes], style, alpha=0.35, color=line.get_color(), label=f"{label} p99")
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xticks(sizes, [size_name(s) for s in sizes])
        ax.set_xlabel("sample size")
        ax.set_ylabel("round trip, µs")
        ax.set_title(f"{n} subscriber{'s' if n > 1 else ''}: publish, every subscriber checks, releases, acks", fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)
    fig.suptitle(f"shmrc against iceoryx2, {doc['date']}, commit {doc['commit']}, load {doc['load_before'][0]}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(f"plot: {path}", file=sys.stderr)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", help="a few hundred rounds a row")
    p.add_argument("--out", default="docs/perf/iceoryx2")
    p.add_argument("--from-json", help="redraw from an earlier OUT.json instead of running")
    p.add_argument("rest", nargs="*", help="passed to the program's `run` (e.g. --sizes 4096)")
    a = p.parse_args()
    if a.from_json:
        with open(a.from_json) as f:
            doc = json.load(f)
    else:
        doc = run(a.quick, a.rest)
        os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
        with open(a.out + ".json", "w") as f:
            json.dump(doc, f, indent=1)
    print(table(doc))
    plot(doc, a.out + ".png")


if __name__ == "__main__":
    main()
