#!/usr/bin/env python3
"""The default job's writing, before against after: two `quiver` binaries, side by side.

    python3 scripts/bench-output.py --before OLD/quiver --after NEW/quiver [--rounds 5]
        [--input DATASET] [--python PYTHON_WITH_POLARS] [--csv FILE]
        [--after-variant no-output|ipc|lean|ipc-lean]

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

`--after-variant` runs the after binary on a variant of `plans/pixel.toml` instead, to
measure what a different default would buy: `no-output` (the plan without its output step),
`ipc` (`write_ipc` instead of `write_parquet`), `lean` (no `digis` or `clustered_digis`
written: the truth report could not run) or `ipc-lean` (both). The values are then not
compared, and the read times are left out where the variant writes no Parquet `tracks`.
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


PLAN = Path(__file__).resolve().parent.parent / "plans" / "pixel.toml"
VARIANTS = ("no-output", "ipc", "lean", "ipc-lean")


def variant_plan(variant: str) -> str:
    """`plans/pixel.toml` changed as `variant` says; each change must apply (the plan may move on)."""
    text = PLAN.read_text()

    def change(old: str, new: str) -> None:
        nonlocal text
        if text.count(old) != 1:
            sys.exit(f"{PLAN} no longer has exactly one {old!r}: update the {variant!r} variant")
        text = text.replace(old, new)

    if variant == "no-output":
        at = text.find('[[step]]\nlabel = "output"')
        if at < 0 or "[[step]]" in text[at + 1:]:
            sys.exit(f"{PLAN}: the output step is no longer the last step: update the variant")
        return text[:at]
    if "ipc" in variant:
        change('type = "write_parquet"', 'type = "write_ipc"')
    if "lean" in variant:
        change('products = ["digis", "chargecut:clustered_digis", ', 'products = [')
    return text


def run_job(quiver: Path, dataset: Path | None, out: Path, plan: Path | None = None) -> dict:
    cmd = [str(quiver), "run", *([str(plan)] if plan else []), "--no-progress", "--output", str(out)]
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
    share = re.search(r"^\S+\s+write_(?:parquet|ipc)\s+\S+\s+[0-9.]+\s+([0-9.]+)%", text, re.M)
    if not rate or (not share and plan is None):
        sys.exit(f"no throughput or write_parquet line in the output of {' '.join(cmd)}:\n{text[-2000:]}")
    written = [f for f in out.iterdir() if f.suffix in (".parquet", ".arrow")]
    return {"events_per_s": float(rate.group(1)), "cpu_s": usage.ru_utime + usage.ru_stime, "wall_s": wall,
            "write_share_pct": float(share.group(1)) if share else 0.0,
            "mb_written": sum(f.stat().st_size for f in written) / 1e6}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", type=Path, required=True)
    ap.add_argument("--after", type=Path, required=True)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--input", type=Path, help="dataset (default: the default dataset)")
    ap.add_argument("--python", type=Path, help="a Python with Polars, for the read times and the value check")
    ap.add_argument("--csv", type=Path)
    ap.add_argument("--after-variant", choices=VARIANTS,
                    help="run the after binary on this variant of plans/pixel.toml (see above)")
    a = ap.parse_args()
    for p in (a.before, a.after):
        if not p.exists():
            sys.exit(f"{p} does not exist")
    names = ["before", "after"]
    bins = {"before": a.before.resolve(), "after": a.after.resolve()}
    results: dict[str, list[dict]] = {n: [] for n in names}
    with tempfile.TemporaryDirectory(prefix="quiver-bench-output-") as tmp:
        plans = {"before": None, "after": None}
        if a.after_variant:
            plans["after"] = Path(tmp) / f"pixel-{a.after_variant}.toml"
            plans["after"].write_text(variant_plan(a.after_variant))
        for r in range(a.rounds):
            for n in names[r % 2:] + names[:r % 2]:
                out = Path(tmp) / n
                subprocess.run(["rm", "-rf", str(out)], check=True)
                m = run_job(bins[n], a.input, out, plans[n])
                if a.python and (out / "tracks.tracks.parquet").exists():
                    t = subprocess.run([str(a.python), "-c", POLARS, str(out)], capture_output=True, text=True,
                                       check=True).stdout.split()
                    m.update(tracks_read_ms=float(t[0]), tracks_event_filter_ms=float(t[1]),
                             hits_read_ms=float(t[2]))
                results[n].append(m)
                load = Path("/proc/loadavg").read_text().split()[0]
                print(f"round {r + 1} {n:<6} " + "  ".join(f"{k} {v:.2f}" for k, v in m.items())
                      + f"  load {load}", flush=True)
        if a.python and not a.after_variant:
            same = subprocess.run([str(a.python), "-c", SAME, str(Path(tmp) / "before"), str(Path(tmp) / "after")],
                                  capture_output=True, text=True)
            if same.returncode != 0:
                sys.exit(f"the two binaries wrote different products:\n{same.stderr[-2000:]}")
            print(f"products: {same.stdout.strip()} files, the same values")
    rows = []
    for n in names:
        row = {"binary": n, "path": str(bins[n]), "rounds": a.rounds,
               "plan": (a.after_variant if n == "after" else None) or "default"}
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
