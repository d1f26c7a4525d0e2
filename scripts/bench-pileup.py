#!/usr/bin/env python3
"""The cost curve of the pixel chain against pile-up (docs/performance.md, docs/physics.md).

    python3 scripts/bench-pileup.py [--pileups 30,50,70,100,140,200] [--events 10]
        [--seed 555] [--quiver PATH] [--out docs/perf]

For each ⟨PU⟩ the script generates a dataset (cached under ~/.cache/quiver/datasets), then
1. runs plans/pixel-sized.toml (capacities sized from the event: nothing truncated) on one
   thread and records the time per event of every step, the whole process's wall time and
   peak RSS, and the rows per event of the products;
2. runs `quiver report` on that run: efficiency, fake, duplicate and vertex rates;
3. runs plans/pixel.toml (the reference's capacities) and records which capacities its
   summary warns about, in how many events.

It writes `pileup-steps.csv` (pile-up, step, ms/event), `pileup.csv` (one row per pile-up:
rows per event, time, RSS, physics, capacities reached) and `pileup.svg` (ms/event against
⟨PU⟩, log-log, per step and for the chain), and prints the fitted exponent k of
time ∝ PU^k per step from ⟨PU⟩ 50 up. Only the standard library is needed; `--quiver`
defaults to the release binary of `$CARGO_TARGET_DIR` (or `target/`).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RECO_STEPS = ["raw", "digis", "calib", "clusters", "chargecut", "hits", "doublets", "ntuplets", "fit", "tracks", "vertices"]


def run(cmd: list) -> tuple[str, float, float]:
    """Output, wall seconds and peak RSS (MiB) of one process."""
    t0 = time.perf_counter()
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(map(str, cmd))}\n{out[-3000:]}")
    return out, wall, usage.ru_maxrss / 1024.0


def parse_summary(text: str) -> tuple[dict, dict, list]:
    """(ms/event by step label, rows/event by product key, warnings) of a run summary."""
    steps, rows, warnings = {}, {}, []
    section = None
    for line in text.splitlines():
        if line.startswith("step "):
            section = "steps"
            continue
        if line.startswith("product "):
            section = "products"
            continue
        if line.startswith("warning: step"):
            warnings.append(line)
            continue
        if not line.strip():
            section = None if section == "products" else section
            continue
        f = line.split()
        if section == "steps" and len(f) >= 5 and f[-1].endswith("%"):
            steps[f[0]] = float(f[-2])
        elif section == "products" and len(f) == 3:
            rows[f[0]] = float(f[1])
    return steps, rows, warnings


def fit_k(pus: list, ts: list) -> float:
    xs = [math.log(p) for p, t in zip(pus, ts) if p >= 50 and t > 0]
    ys = [math.log(t) for p, t in zip(pus, ts) if p >= 50 and t > 0]
    if len(xs) < 2:
        return float("nan")
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def svg(pus: list, series: dict, path: Path) -> None:
    w, h, l, r, t, b = 760, 480, 70, 170, 20, 50
    ys = [v for s in series.values() for v in s if v > 0]
    y0, y1 = math.floor(math.log10(min(ys))), math.ceil(math.log10(max(ys)))
    x0, x1 = math.log10(min(pus)) - 0.02, math.log10(max(pus)) + 0.02
    X = lambda p: l + (math.log10(p) - x0) / (x1 - x0) * (w - l - r)
    Y = lambda v: t + (y1 - math.log10(v)) / (y1 - y0) * (h - t - b)
    colors = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#000000"]
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
         f'<rect width="{w}" height="{h}" fill="white"/>']
    for e in range(y0, y1 + 1):
        o.append(f'<line x1="{l}" x2="{w - r}" y1="{Y(10**e):.1f}" y2="{Y(10**e):.1f}" stroke="#ddd"/>')
        o.append(f'<text x="{l - 6}" y="{Y(10**e) + 4:.1f}" text-anchor="end">{10**e:g}</text>')
    for p in pus:
        o.append(f'<line x1="{X(p):.1f}" x2="{X(p):.1f}" y1="{t}" y2="{h - b}" stroke="#eee"/>')
        o.append(f'<text x="{X(p):.1f}" y="{h - b + 16}" text-anchor="middle">{p:g}</text>')
    o.append(f'<text x="{(l + w - r) / 2}" y="{h - 10}" text-anchor="middle">mean pile-up ⟨PU⟩</text>')
    o.append(f'<text x="16" y="{(t + h - b) / 2}" transform="rotate(-90 16 {(t + h - b) / 2})" text-anchor="middle">ms per event (1 thread)</text>')
    for i, (name, vals) in enumerate(series.items()):
        c = colors[i % len(colors)]
        pts = " ".join(f"{X(p):.1f},{Y(v):.1f}" for p, v in zip(pus, vals) if v > 0)
        width = 3 if name.startswith("chain") else 1.5
        o.append(f'<polyline points="{pts}" fill="none" stroke="{c}" stroke-width="{width}"/>')
        o.append(f'<text x="{w - r + 8}" y="{t + 14 + 16 * i}" fill="{c}">{name}</text>')
    o.append("</svg>")
    path.write_text("\n".join(o) + "\n")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pileups", default="30,50,70,100,140,200")
    ap.add_argument("--events", type=int, default=10)
    ap.add_argument("--seed", type=int, default=555)
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    ap.add_argument("--quiver", type=Path, default=target / "release" / "quiver")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "perf")
    a = ap.parse_args()
    if not a.quiver.exists():
        sys.exit(f"{a.quiver} not found: build it with `cargo build --release` or pass --quiver")
    pus = [float(p) for p in a.pileups.split(",")]
    cache = Path(os.environ.get("QUIVER_DATA", Path.home() / ".cache" / "quiver" / "datasets"))
    a.out.mkdir(parents=True, exist_ok=True)
    rows, per_step = [], {}
    with tempfile.TemporaryDirectory() as tmp:
        for pu in pus:
            ds = cache / f"pileup-{pu:g}-{a.events}-{a.seed}"
            if not (ds / "manifest.toml").exists():
                run([a.quiver, "generate", "--events", a.events, "--pileup", pu, "--seed", a.seed, "--output", ds])
            sized = Path(tmp) / f"sized-{pu:g}"
            text, wall, rss = run([a.quiver, "run", ROOT / "plans/pixel-sized.toml", "--no-progress", "--threads", 1, "--input", ds, "--output", sized])
            steps, prods, warnings = parse_summary(text)
            if warnings:
                sys.exit(f"sized capacities reported a truncation at PU {pu:g}:\n" + "\n".join(warnings))
            rep = json.loads(run([a.quiver, "report", "--run", sized, "--truth", ds, "--output", Path(tmp) / f"report-{pu:g}"])[0].split("\nreport written")[0])
            ref_text, _, _ = run([a.quiver, "run", ROOT / "plans/pixel.toml", "--no-progress", "--threads", 1, "--input", ds, "--output", Path(tmp) / f"ref-{pu:g}"])
            reached = []
            for w in parse_summary(ref_text)[2]:
                m = re.search(r"step '([^']+)': capacity '([^']+)' \((\d+)\) reached in (\d+) of (\d+) events", w)
                if m:
                    reached.append(f"{m.group(2)} {m.group(4)}/{m.group(5)}")
            chain = sum(steps.get(s, 0.0) for s in RECO_STEPS)
            for s in RECO_STEPS:
                per_step.setdefault(s, []).append(steps.get(s, 0.0))
            per_step.setdefault("chain (raw → vertices)", []).append(chain)
            rows.append({
                "pileup": pu, "events": a.events, "chain_ms_per_event": round(chain, 2), "process_wall_s": round(wall, 2),
                "peak_rss_mib": round(rss, 1),
                "hits_per_event": prods.get("hits:hits", 0), "doublets_per_event": prods.get("doublets:doublets", 0),
                "tuples_per_event": prods.get("ntuplets:ntuplets", 0), "vertices_per_event": prods.get("vertices:vertices", 0),
                "loose_tracks_per_event": rep.get("mean_loose_tracks"),
                "track_efficiency": rep.get("track_efficiency"), "track_fake_rate": rep.get("track_fake_rate"),
                "track_duplicate_rate": rep.get("track_duplicate_rate"), "vertex_efficiency": rep.get("vertex_efficiency"),
                "reference_capacities_reached": "; ".join(reached) or "none",
            })
            print(f"PU {pu:g}: chain {chain:.1f} ms/event, RSS {rss:.0f} MiB, efficiency {rep.get('track_efficiency')}, "
                  f"reference capacities reached: {rows[-1]['reference_capacities_reached']}", flush=True)
    with open(a.out / "pileup.csv", "w", newline="") as f:
        wr = csv.DictWriter(f, fieldnames=list(rows[0]))
        wr.writeheader()
        wr.writerows(rows)
    with open(a.out / "pileup-steps.csv", "w", newline="") as f:
        wr = csv.writer(f)
        wr.writerow(["pileup", "step", "ms_per_event", "k_from_pu50"])
        for s, ts in per_step.items():
            k = fit_k(pus, ts)
            for pu, v in zip(pus, ts):
                wr.writerow([pu, s, v, round(k, 3)])
    svg(pus, per_step, a.out / "pileup.svg")
    print("\nfitted time ∝ PU^k, ⟨PU⟩ ≥ 50:")
    for s, ts in per_step.items():
        print(f"  {s:<24} k = {fit_k(pus, ts):.2f}")
    print(f"\nwrote {a.out / 'pileup.csv'}, {a.out / 'pileup-steps.csv'}, {a.out / 'pileup.svg'}")


if __name__ == "__main__":
    main()
