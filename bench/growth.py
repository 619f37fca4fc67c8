#!/usr/bin/env python3
"""How cost grows: the plot of docs/PERFORMANCE.md's "How cost grows" section.

Runs `shmrc-bench --growth --json` (one run: every row and its floor measured side by
side, interleaved) and plots each row against

- buffer size, 4 KiB to 64 MiB: ping-pong, stream, fill and attach + release, shmrc
  (fresh and pooled) and its floors, both strategies;
- holders of one buffer, 1 to 64: attach + release of a 4 KiB buffer with that many
  handles to it in flight, against the floor's mmap + munmap of as many descriptors
  (or names);
- live segments in the namespace, 100 to 100,000 (10,000 with --quick): creating and
  releasing one more file_system buffer, and the sweep of all of them once their
  holders are SIGKILLed, against the floor's create + unlink among as many names and
  its list + unlink;

with the floor drawn dashed in the colour of the row it is the floor of, on the same
axes. It writes the document (with the date, commit and load average it was measured
at) as OUT.json and the plot as OUT.png.

Usage, from the repository root (after `cargo build --release -p shmrc-bench` and
`pip install matplotlib`):

    python3 bench/growth.py [--bench target/release/shmrc-bench] [--quick]
        [--out docs/perf/growth]

`--plot-only OUT.json` redraws the plot from a document already written.
"""

import argparse
import datetime
import json
import os
import subprocess
import sys

# Which floor each shmrc row is drawn against (the floor of the same mechanism and the
# same reservation; the pool's is the reused floor).
FLOOR_OF = {
    "shmrc file_descriptor": "floor memfd+fallocate",
    "shmrc file_system": "floor shm_open+fallocate",
    "shmrc pool file_descriptor": "floor memfd reused",
    "shmrc pool file_system": "floor shm_open reused",
}
# attach + release, whose floors are the unreserved ones (the buffer is made once).
ATTACH_FLOOR_OF = {
    "shmrc file_descriptor": "floor memfd",
    "shmrc file_system": "floor shm_open",
}


def git(*args):
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return None


def measure(bench, quick):
    load_before = os.getloadavg()
    # The tree the run starts from (the binary is whatever was built last).
    commit = git("rev-parse", "--short", "HEAD")
    dirty = bool(git("status", "--porcelain", "--untracked-files=no"))
    args = [bench, "--growth", "--json"] + (["--quick"] if quick else [])
    print("running", " ".join(args), flush=True)
    out = subprocess.run(args, capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"{bench} failed ({out.returncode}):\n{out.stdout[-2000:]}\n{out.stderr[-2000:]}")
    doc = json.loads(out.stdout)
    doc["date"] = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    doc["commit"] = commit
    doc["dirty"] = dirty
    doc["load_average_before"] = load_before[0]
    doc["load_average_after"] = os.getloadavg()[0]
    return doc


def size_name(n):
    for unit, shift in (("MiB", 20), ("KiB", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift} {unit}"
    return f"{n} B"


def series(doc, workload, axis, contender):
    """(x, microseconds) of one contender's rows along `axis` ("size", "holders",
    "segments"), sorted by x."""
    points = []
    for r in doc["results"]:
        if r["workload"] != workload or r["contender"] != contender:
            continue
        a = r.get("axis")
        if axis == "size" and a is None and r["size"] is not None:
            points.append((r["size"], r["nanos_per_op"] / 1e3))
        elif a is not None and a["name"] == axis:
            points.append((a["value"], r["nanos_per_op"] / 1e3))
    return sorted(points)


def plot(doc, path):
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("matplotlib is not installed: pip install matplotlib")
    size_panels = [
        ("ping-pong", FLOOR_OF, "ping-pong: create (or reuse), share, attach, read byte 0, release, ack"),
        ("stream", FLOOR_OF, "stream: the ping-pong with up to 64 buffers in flight"),
        ("fill", FLOOR_OF, "fill: the stream, every byte written and checked"),
        ("attach/release", ATTACH_FLOOR_OF, "attach + release of one buffer (consumer side)"),
    ]
    fig, axes = plt.subplots(2, 3, figsize=(17, 10))
    flat = list(axes.flat)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]

    def draw(ax, workload, axis, pairs, xlabel, title, per=""):
        for i, (ours, floor) in enumerate(pairs):
            colour = colours[i % len(colours)]
            mine = series(doc, workload, axis, ours)
            base = series(doc, workload, axis, floor)
            if mine:
                ax.plot(*zip(*mine), "-o", color=colour, label=ours, markersize=4)
            if base:
                ax.plot(*zip(*base), "--", color=colour, label=f"{floor} (floor)", alpha=0.8)
        ax.set_xscale("log", base=2 if axis != "segments" else 10)
        if axis == "size":
            xs = sorted({x for ours, floor in pairs for x, _ in series(doc, workload, axis, ours)})
            ax.set_xticks(xs, [size_name(x) for x in xs])
        ax.set_yscale("log")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"microseconds{per}")
        ax.set_title(title, fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=6)

    for ax, (workload, floors, title) in zip(flat, size_panels):
        draw(ax, workload, "size", list(floors.items()), "buffer size", title, " per buffer")
    draw(
        flat[4],
        "attach/release",
        "holders",
        list(ATTACH_FLOOR_OF.items()),
        "holders of the buffer (handles in flight)",
        "attach + release of a 4 KiB buffer against its holders",
        " per attach + release",
    )
    ax = flat[5]
    draw(
        ax,
        "create/release",
        "segments",
        [("shmrc create+release (file_system)", "floor shm_open+fallocate+unlink")],
        "live segments in the namespace",
        "live segments in the namespace: create + release of one more (left), sweep of all (right)",
        " (create + release)",
    )
    sweep_ax = ax.twinx()
    sweeps = [r for r in doc["results"] if r["workload"] == "sweep" and r.get("axis")]
    for kind, style, colour in (("shmrc sweep", "-s", colours[2]), ("floor list+unlink", ":", colours[2])):
        pts = sorted(
            (r["axis"]["value"], r["nanos_per_op"] / 1e6) for r in sweeps if r["contender"].startswith(kind)
        )
        if pts:
            label = kind + (" (floor)" if kind.startswith("floor") else "") + " (ms, right axis)"
            sweep_ax.plot(*zip(*pts), style, color=colour, label=label)
    sweep_ax.set_yscale("log")
    sweep_ax.set_ylabel("milliseconds per sweep")
    sweep_ax.legend(fontsize=6, loc="lower right")
    when = f"{doc.get('date')} at {doc.get('commit')}{' (dirty)' if doc.get('dirty') else ''}"
    load = f"load average {doc.get('load_average_before', 0):.1f} -> {doc.get('load_average_after', 0):.1f}"
    fig.suptitle(
        f"How cost grows: shmrc (solid) and its floor (dashed, same colour), one run{' (--quick)' if doc.get('quick') else ''}, {when}, {load}",
        fontsize=10,
    )
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    print(f"plot: {path}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--bench", default="target/release/shmrc-bench")
    p.add_argument("--quick", action="store_true")
    p.add_argument("--out", default="docs/perf/growth")
    p.add_argument("--plot-only", metavar="JSON")
    a = p.parse_args()
    if a.plot_only:
        with open(a.plot_only) as f:
            doc = json.load(f)
        plot(doc, os.path.splitext(a.plot_only)[0] + ".png")
        return
    doc = measure(a.bench, a.quick)
    os.makedirs(os.path.dirname(a.out) or ".", exist_ok=True)
    with open(a.out + ".json", "w") as f:
        json.dump(doc, f, indent=1)
    print(f"document: {a.out}.json ({doc['seconds']:.0f} s of measuring)")
    plot(doc, a.out + ".png")


if __name__ == "__main__":
    main()
