#!/usr/bin/env python3
"""The tables of docs/PERFORMANCE.md, from one run: the JSON document `bench/peers.py`
wrote (`shmrc bench --json` and the Python peers, same run) and the criterion estimates
`cargo bench -p shmrc-bench -- --quick` left just before (the Rust crates).

    python3 bench/perf_tables.py docs/perf.json [--criterion target/criterion]
    python3 bench/perf_tables.py --goals BENCH.json

Prints Markdown: one table of microseconds per buffer for each buffer workload
(ping-pong, stream, fill) with every contender side by side, the attach/release and
the other `shmrc bench` rows, and the issue-11 targets as ratios of the same run. A
contender a run did not measure shows as a dash. With `--goals`, from a
`shmrc bench --json` document alone (or peers.py's, which holds one): the goal table,
each goal's ratio in that run, its bound's ratios where it has one (the least the
protocol's design must do, measured in the same run: bound ÷ baseline and this ÷ bound),
met / missed / not measured, and the reason of each miss, as the harness judged them
(bench/src/goals.rs)."""

import argparse
import glob
import json
import os

SIZES = [4 << 10, 1 << 20, 64 << 20]
SIZE_NAMES = {4 << 10: "4 KiB", 1 << 20: "1 MiB", 64 << 20: "64 MiB"}
# Contenders of the buffer tables, in column order: (column, where, contender).
BUFFER_COLUMNS = [
    ("shmrc fd", "shmrc", "shmrc file_descriptor"),
    ("shmrc fs", "shmrc", "shmrc file_system"),
    ("shmrc pool fs", "shmrc", "shmrc pool file_system"),
    ("shmrc pool fd", "shmrc", "shmrc pool file_descriptor"),
    ("floor memfd", "shmrc", "floor memfd"),
    ("floor memfd+fallocate", "shmrc", "floor memfd+fallocate"),
    ("floor shm_open", "shmrc", "floor shm_open"),
    ("floor shm_open+fallocate", "shmrc", "floor shm_open+fallocate"),
    ("bare floor (reused)", "shmrc", "floor shm_open reused"),
    ("bare floor memfd (reused)", "shmrc", "floor memfd reused"),
    ("memfd crate", "criterion", "memfd crate"),
    ("shared_memory crate", "criterion", "shared_memory crate"),
    ("torch fd", "python", "torch file_descriptor"),
    ("torch fs", "python", "torch file_system"),
    ("mp.shared_memory", "python", "multiprocessing.shared_memory"),
]
CRITERION_GROUPS = {"ping-pong": "ping_pong", "stream": "stream", "fill": "fill", "attach/release": "attach_release"}


def criterion_estimates(directory):
    """{(workload, contender, size): mean ns} for every buffer group criterion left."""
    found = {}
    for workload, group in CRITERION_GROUPS.items():
        pattern = os.path.join(directory, group, "*", "*", "new", "estimates.json")
        for path in glob.glob(pattern):
            parts = path.split(os.sep)
            name, size = parts[-4], parts[-3]
            scale = {"KiB": 1 << 10, "MiB": 1 << 20}.get(size[-3:])
            if scale is None:
                continue
            with open(path) as f:
                mean = json.load(f)["mean"]["point_estimate"]
            found[(workload, name, int(size[:-3]) * scale)] = mean
    return found


def load(path, criterion_dir):
    with open(path) as f:
        doc = json.load(f)
    ns = {}
    for row in doc["shmrc_bench"]["results"]:
        ns[("shmrc", row["workload"], row["contender"], row["size"])] = row["nanos_per_op"]
    for row in doc.get("python_peers", []):
        ns[("python", row["workload"], row["contender"], row["size"])] = row["nanos_per_op"]
    for (workload, name, size), mean in criterion_estimates(criterion_dir).items():
        ns[("criterion", workload, name, size)] = mean
    return doc, ns


def us(value):
    if value is None:
        return "–"
    value /= 1e3
    return f"{value:,.0f}" if value >= 1000 else f"{value:.3g}" if value < 100 else f"{value:.1f}"


def buffer_table(ns, workload):
    columns = [c for c in BUFFER_COLUMNS if any((c[1], workload, c[2], s) in ns for s in SIZES)]
    lines = ["| size | " + " | ".join(c[0] for c in columns) + " |", "|---" * (len(columns) + 1) + "|"]
    for size in SIZES:
        cells = [us(ns.get((where, workload, name, size))) for _, where, name in columns]
        lines.append(f"| {SIZE_NAMES[size]} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def ratio(ns, workload, a, b, size, where_a="shmrc", where_b="shmrc"):
    x, y = ns.get((where_a, workload, a, size)), ns.get((where_b, workload, b, size))
    return None if x is None or y is None else x / y


def fmt(r):
    return "–" if r is None else f"{r:.2f}×"


def targets(ns):
    rows = []
    for strategy, floor in [("file_descriptor", "floor memfd"), ("file_system", "floor shm_open")]:
        for base in [floor, floor + "+fallocate"]:
            rows.append(
                (f"ping-pong 4 KiB, shmrc {strategy} ÷ {base} (≤ 1.3×)", fmt(ratio(ns, "ping-pong", f"shmrc {strategy}", base, 4 << 10)))
            )
        rows.append(
            (
                f"attach + release, shmrc {strategy} ÷ {floor} (≤ 1.5×), 4 KiB / 1 MiB / 64 MiB",
                " / ".join(fmt(ratio(ns, "attach/release", f"shmrc {strategy}", floor, s)) for s in SIZES),
            )
        )
    # The pooled rows of each strategy: (short name, pool, its bare floor).
    pools = [
        ("fs", "shmrc pool file_system", "floor shm_open reused"),
        ("fd", "shmrc pool file_descriptor", "floor memfd reused"),
    ]
    for short, pool, bare in pools:
        flat = None
        if ("shmrc", "stream", pool, 64 << 20) in ns and ("shmrc", "stream", pool, 4 << 10) in ns:
            flat = ns[("shmrc", "stream", pool, 64 << 20)] / ns[("shmrc", "stream", pool, 4 << 10)]
        rows.append((f"pooled {short} stream flat in size: 64 MiB ÷ 4 KiB (≤ 1.5×)", fmt(flat)))
        rows.append(
            (
                f"pooled {short} stream ÷ its bare floor (≤ 1.3×), 4 KiB / 1 MiB / 64 MiB",
                " / ".join(fmt(ratio(ns, "stream", pool, bare, s)) for s in SIZES),
            )
        )
        for peer in ["torch file_descriptor", "torch file_system", "multiprocessing.shared_memory"]:
            rows.append(
                (
                    f"{peer} ÷ pooled {short} stream (torch ≥ 10×, shared_memory > 1×), 4 KiB / 1 MiB / 64 MiB",
                    " / ".join(fmt(ratio(ns, "stream", peer, pool, s, where_a="python")) for s in SIZES),
                )
            )
    for strategy, floor in [("file_descriptor", "floor memfd+fallocate"), ("file_system", "floor shm_open+fallocate")]:
        rows.append(
            (
                f"fill, shmrc {strategy} ÷ {floor} (≤ 1.2×), 4 KiB / 1 MiB / 64 MiB",
                " / ".join(fmt(ratio(ns, "fill", f"shmrc {strategy}", floor, s)) for s in SIZES),
            )
        )
    for short, pool, bare in pools:
        rows.append(
            (
                f"fill, pooled {short} ÷ its bare floor (≤ 1.2×), 4 KiB / 1 MiB / 64 MiB",
                " / ".join(fmt(ratio(ns, "fill", pool, bare, s)) for s in SIZES),
            )
        )
    sweep = ratio(ns, "sweep", "shmrc sweep, 10000 segments", "floor list+unlink, 10000 names", None)
    rows.append(("sweep of 10,000 dead-held segments ÷ floor list+unlink (≤ 2×)", fmt(sweep)))
    return "\n".join(["| target | this run |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows])


def other_rows(doc):
    lines = ["| workload | contender | value | ratio |", "|---|---|---|---|"]
    for row in doc["shmrc_bench"]["results"]:
        if row["workload"] in ("ping-pong", "stream", "fill", "attach/release"):
            continue
        ratios = ", ".join(f"{r['ratio']:.2f}× {r['baseline']}" for r in row.get("ratios", []) if r["baseline"] != row["contender"])
        lines.append(f"| {row['workload']} | {row['contender']} | {row['value']:.4g} {row['unit']} | {ratios} |")
    return "\n".join(lines)


def goals_table(doc):
    """The goals `shmrc bench` judged in the run of `doc` (its own document, or
    peers.py's holding one under "shmrc_bench")."""
    goals = doc.get("shmrc_bench", doc).get("goals")
    if not goals:
        raise SystemExit("no goals in this document (a `shmrc bench --json` of 2026-11-27 or later has them)")
    lines = [
        "| issue | goal | limit | this run | bound ÷ baseline | this ÷ bound | verdict | reason |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for g in goals:
        size = f" {SIZE_NAMES.get(g['size'], g['size'])}" if g["size"] else ""
        what = f"{g['workload']}{size}: {g['contender']} ÷ {g['baseline']}"
        verdict = {"met": "met", "missed": "**missed**"}.get(g["verdict"], g["verdict"])
        reason = g["reason"].replace("|", "\\|")
        # The bound (the least the protocol's design must do, measured in the same run):
        # absent from documents before bound rows, null where a goal has none or the run
        # did not measure it.
        bound = g.get("bound") or {}
        over, under = fmt(bound.get("over_baseline")), fmt(bound.get("contender_over_bound"))
        lines.append(
            f"| {g['issue']} | {what} | ≤ {g['limit']}× | {fmt(g['ratio'])} | {over} | {under} | {verdict} | {reason} |"
        )
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("perf_json")
    p.add_argument("--criterion", default="target/criterion")
    p.add_argument("--goals", action="store_true", help="print only the goal table of the document's run")
    a = p.parse_args()
    if a.goals:
        with open(a.perf_json) as f:
            print(goals_table(json.load(f)))
        return
    doc, ns = load(a.perf_json, a.criterion)
    for workload in ["ping-pong", "stream", "fill", "attach/release"]:
        print(f"#### {workload} (µs per buffer)\n")
        print(buffer_table(ns, workload) + "\n")
    print("#### other workloads (`shmrc bench`)\n")
    print(other_rows(doc) + "\n")
    print("#### targets (issue 11)\n")
    print(targets(ns))


if __name__ == "__main__":
    main()
