#!/usr/bin/env python3
"""The Python-ports benchmark of docs/performance.md.

Runs, side by side in one process on the same events, the all-Rust pixel chain
(plans/examples/chain.toml) and the same chain with the four Python ports of the package
(beamspot, clusterize + cluster_charge_cut, rechits, vertices: the steps of
plans/examples/python-chain.toml without its histogram and output steps), at 1 and 2
threads, alternating the two plans; then the cost of crossing into a Python step: the
Rust chain plus a Python step that only takes the hits of each batch.

    .venv/bin/python scripts/bench-python.py [--input DATASET] [--repeat 3]

Prints a table (events/s, ratio Python/Rust, ms/event of the ported steps) and writes a
CSV (and an SVG plot when matplotlib is importable).
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import sys
import tempfile
import tomllib
from pathlib import Path

import quiver

ROOT = Path(__file__).resolve().parent.parent
PORTED = {"beamspot", "clusters", "chargecut", "hits", "vertices"}
NOT_TIMED = {"histograms", "output"}  # file writers: the same in both plans, left out


class TouchHits(quiver.Step):
    """Takes the hits of the batch as a pyarrow RecordBatch and publishes nothing: the cost
    of calling into Python, with one product handed over, per batch."""

    consumes = {"hits": "hits"}
    produces = []

    def produce(self, batch):
        batch.get("hits")


def plan_from(path: Path) -> quiver.Plan:
    spec = tomllib.loads(path.read_text())
    plan = quiver.Plan()
    for step in spec["step"]:
        step = dict(step)
        if step["label"] in NOT_TIMED:
            continue
        label, ty = step.pop("label"), step.pop("type")
        backend = step.pop("backend", None)
        plan.add(label, ty, backend=backend, **step)
    return plan


def run(plan, args, threads, out):
    r = plan.run(input=args.input, events=args.events, threads=threads, batch_size=args.batch_size, output=out, collect=[])
    return r.numbers


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--input", default=os.path.expanduser("~/.cache/quiver/datasets/default"), help="dataset directory")
    ap.add_argument("--events", type=int, default=None, help="events per run (default: all)")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=3, help="measured runs per plan and thread count (after one warm-up)")
    ap.add_argument("--csv", default=str(ROOT / "bench-results" / "python-chain.csv"))
    ap.add_argument("--plot", default=None, help="write an SVG plot here (needs matplotlib)")
    args = ap.parse_args()

    plans = {"rust": plan_from(ROOT / "plans/examples/chain.toml"), "python": plan_from(ROOT / "plans/examples/python-chain.toml")}
    touch = plan_from(ROOT / "plans/examples/chain.toml").add("touch", TouchHits, hits="hits")
    rows = []
    with tempfile.TemporaryDirectory() as out:
        for threads in [int(t) for t in args.threads.split(",")]:
            for name in plans:  # warm-up: caches, instances, page cache
                run(plans[name], args, threads, out)
            for rep in range(args.repeat):
                for name in plans if rep % 2 == 0 else reversed(list(plans)):
                    n = run(plans[name], args, threads, out)
                    rows.append({"plan": name, "threads": threads, "rep": rep, "events": n["events"], "batches": n["batches"],
                                 "wall_s": n["wall_s"], "events_per_s": n["events"] / n["wall_s"],
                                 **{f"ms_{k}": 1e3 * v / n["events"] for k, v in n["step_s"].items() if k in PORTED}})
        cross = []
        for rep in range(args.repeat + 1):
            n = run(touch, args, 1, out)
            if rep:
                cross.append(1e6 * n["step_s"]["touch"] / n["batches"])

    Path(args.csv).parent.mkdir(parents=True, exist_ok=True)
    keys = sorted({k for r in rows for k in r}, key=lambda k: (not k in ("plan", "threads", "rep"), k))
    with open(args.csv, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(rows)

    med = lambda plan, t, k: statistics.median(r[k] for r in rows if r["plan"] == plan and r["threads"] == t)
    print(f"{'threads':>7} {'Rust ev/s':>10} {'Python ev/s':>12} {'ratio':>6}")
    summary = []
    for t in sorted({r["threads"] for r in rows}):
        a, b = med("rust", t, "events_per_s"), med("python", t, "events_per_s")
        summary.append((t, a, b))
        print(f"{t:>7} {a:>10.1f} {b:>12.1f} {b / a:>6.2f}")
    print("\nms/event of the ported steps, 1 thread (Rust | Python):")
    for k in sorted(PORTED):
        col = f"ms_{k}"
        if any(col in r for r in rows):
            print(f"  {k:<10} {med('rust', 1, col):7.3f} | {med('python', 1, col):7.3f}")
    print(f"\ncrossing into a Python step (hits handed over, nothing published): {statistics.median(cross):.1f} µs per batch "
          f"of {args.batch_size} events (median of {len(cross)})")
    print(f"CSV: {args.csv}")

    if args.plot:
        try:
            import matplotlib

            matplotlib.use("svg")
            import matplotlib.pyplot as plt
        except ImportError:
            print("no matplotlib: no plot", file=sys.stderr)
            return 0
        fig, ax = plt.subplots(figsize=(5, 3.2))
        ts = [s[0] for s in summary]
        w = 0.38
        ax.bar([t - w / 2 for t in ts], [s[1] for s in summary], w, label="all Rust")
        ax.bar([t + w / 2 for t in ts], [s[2] for s in summary], w, label="4 Python ports")
        for t, a, b in summary:
            ax.annotate(f"{b / a:.2f}×", (t + w / 2, b), ha="center", va="bottom", fontsize=8)
        ax.set_xticks(ts)
        ax.set_xlabel("threads")
        ax.set_ylabel("events / s")
        ax.set_title("Pixel chain, ⟨PU⟩ 50: Rust vs Python ports", fontsize=9)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(args.plot)
        print(f"plot: {args.plot}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
