#!/usr/bin/env python3
"""The default job's writing, before against after: two `quiver` binaries, side by side.

    python3 scripts/bench-output.py --before OLD/quiver --after NEW/quiver [--rounds 5]
        [--input DATASET] [--python PYTHON_WITH_POLARS] [--csv FILE]

Each round runs `quiver run` (the default plan, the default dataset) once with each binary,
in a turned order, and records: events/s (the run's own report), the whole process's CPU
seconds (user + system, from `wait4`: on a shared machine the wall time measures the other
programs as much as this one), the `write_parquet` step's share of the workers' time, the
bytes written, and, with `--python` (an interpreter with Polars), the time Polars takes to
read `tracks.tracks.parquet` whole, to filter it on one event, and to read
`hits.hits.parquet` whole (best of 5 each). It prints every round and, per binary, the
median [min-max]; the machine's load is printed with each round: compare rounds, not
machines. With `--python`, the last round's products of the two binaries are read back with
Polars and compared as values, so that a faster writer cannot change what is written.
"""

from __future__ import annotations

import argparse
import csv
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLARS = r"""
import sys, time, polars as pl
d = sys.argv[1]
def best(f):
    t = []
    for _ in range(5):
        t0 = time.perf_counter(); f(); t.append(time.perf_counter() - t0)
    return min(t) * 1000
print(best(lambda: pl.read_parquet(f"{d}/tracks.tracks.parquet")),
      best(lambda: pl.scan_parquet(f"{d}/tracks.tracks.parquet").filter(pl.col("event") == 50).collect()),
      best(lambda: pl.read_parquet(f"{d}/hits.hits.parquet")))
"""

SAME = r"""
import sys, pathlib, polars as pl
a, b = map(pathlib.Path, sys.argv[1:3])
names = sorted(p.name for p in a.glob("*.parquet"))
assert names == sorted(p.name for p in b.glob("*.parquet")), "different files"
for n in names:
    x, y = pl.read_parquet(a / n), pl.read_parquet(b / n)
    assert x.equals(y), n
print(len(names))
"""


def run_job(quiver: Path, dataset: Path | None, out: Path) -> dict:
    cmd = [str(quiver), "run", "--no-progress", "--output", str(out)]
    if dataset is not None:
        cmd += ["--input", str(dataset)]
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    text = p.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        sys.exit(f"failed: {' '.join(cmd)}\n{text[-2000:]}")
    rate = re.search(r"throughput ([0-9.]+) events/s", text)
    share = re.search(r"^\S+\s+write_parquet\s+\S+\s+[0-9.]+\s+([0-9.]+)%", text, re.M)
    if not rate or not share:
        sys.exit(f"no throughput or write_parquet line in the output of {' '.join(cmd)}:\n{text[-2000:]}")
    return {"events_per_s": float(rate.group(1)), "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall,
            "write_share_pct": float(share.group(1)),
            "mb_written": sum(f.stat().st_size for f in out.glob("*.parquet")) / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--input", type=Path, help="dataset (default: the default dataset)")
    ap.add_argument("--python", type=Path, help="a Python with Polars, for the read times and the value check")
    ap.add_argument("--csv", type=Path)
    a = ap.parse_args()
    for p in (a.before, a.after):
        if not p.exists():
            sys.exit(f"{p} does not exist")
    names = ["before", "after"]
    bins = {"before": a.before.resolve(), "after": a.after.resolve()}
    results: dict[str, list[dict]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="quiver-bench-output-") as tmp:
        for r in range(a.rounds):
            for n in names[r % 2:] + names[:r % 2]:
                out = Path(tmp) / n
                subprocess.run(["rm", "-rf", str(out)], check=True)
                m = run_job(bins[n], a.input, out)
                if a.python:
                    t = subprocess.run([str(a.python), "-c", POLARS, str(out)], capture_output=True, text=True,
                                       check=True).stdout.split()
                    m.update(tracks_read_ms=float(t[0]), tracks_event_filter_ms=float(t[1]),
                             hits_read_ms=float(t[2]))
                results[n].append(m)
                load = Path("/proc/loadavg").read_text().split()[0]
                print(f"round {r + 1} {n:<6} " + "  ".join(f"{k} {v:.2f}" for k, v in m.items())
                      + f"  load {load}", flush=True)
        if a.python:
            same = subprocess.run([str(a.python), "-c", SAME, str(Path(tmp) / "before"), str(Path(tmp) / "after")],
                                  capture_output=True, text=True)
            if same.returncode != 0:
                sys.exit(f"the two binaries wrote different products:\n{same.stderr[-2000:]}")
            print(f"products: {same.stdout.strip()} files, the same values")
    rows = []
    for n in names:
        row = {"binary": n, "path": str(bins[n]), "rounds": a.rounds}
        for k in results[n][0]:
            v = [m[k] for m in results[n]]
            row[k] = round(statistics.median(v), 3)
            row[f"{k}_min"] = round(min(v), 3)
            row[f"{k}_max"] = round(max(v), 3)
        rows.append(row)
        print(f"{n:<6} " + "  ".join(f"{k} {row[k]:.2f} [{row[k + '_min']:.2f}-{row[k + '_max']:.2f}]"
                                     for k in results[n][0]))
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
