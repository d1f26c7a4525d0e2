#!/usr/bin/env python3
"""Quiver against the C++ reference, side by side: same events, same machine, one run.

You build the reference yourself (cms-patatrack/pixeltrack-standalone, `make serial`, see
its README; nothing of it is in this repository) and pass its `serial` program:

    python3 scripts/bench-reference.py --serial PATH/TO/serial [--input DATASET]
        [--threads 1,2] [--repeat 5] [--csv FILE]
    python3 scripts/bench-reference.py --reference-cuda PATH/TO/pixeltrack-standalone [--input DATASET]

(the second packs the reference's `cuda` program for the GPU machine and runs it there beside
Quiver's GPU chain, see docs/gpu.md; where no GPU is present it stops with an error after the pack).

The script
1. exports the dataset in the reference's format (`quiver export pixeltrack`) and writes
   our per-event counts next to it as the reference's validation files (`event_counts`
   with `reference_files = true`);
2. checks the two chains agree: the reference's own `--validation` (its CountValidator
   against our modules, digis, clusters, tracks and vertices per event) and its
   `--histogram` file against the text histograms of `quiver run` (byte for byte);
3. times, alternating, the reference (`--numberOfThreads T --numberOfStreams T`, its
   event-loop timer), the reference with the glibc allocator settings the `quiver` command
   uses, and `quiver bench plans/examples/chain.toml --threads T --repeat 2` (the second
   of two runs), `--repeat` times each per thread count, and prints events/s (median, min,
   max) and the ratios of the medians;
4. in the same rounds, each program as a user runs it: the whole process's wall time and
   peak resident set (`wait4`'s rusage), the reference's plain run above against
   `quiver run plans/examples/chain.toml --threads T` (no outputs, no progress bar).

Only the standard library is needed. `--quiver` defaults to the release binary of
`$CARGO_TARGET_DIR` (or `target/`).
"""

from __future__ import annotations

import argparse
import csv
import filecmp
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# What tune_malloc (columnar/src/tune.rs) sets in the quiver command.
TUNED = "glibc.malloc.mmap_threshold=33554432:glibc.malloc.trim_threshold=268435456"


def default_quiver() -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target"))
    return target / "release" / "quiver"


def default_dataset() -> Path:
    base = os.environ.get("QUIVER_DATA")
    return Path(base) / "default" if base else Path.home() / ".cache" / "quiver" / "datasets" / "default"


def process(cmd: list, env: dict, cwd: Path) -> tuple[str, float, float]:
    """Runs cmd to its end: (stdout + stderr, wall seconds, peak RSS in MB from wait4)."""
    t0 = time.perf_counter()
    p = subprocess.Popen([str(c) for c in cmd], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=cwd)
    out = p.stdout.read().decode(errors="replace")
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    code = os.waitstatus_to_exitcode(status)
    if code != 0:
        sys.exit(f"failed ({code}): {' '.join(map(str, cmd))}\n{out[-2000:]}")
    return out, wall, usage.ru_maxrss / 1000.0  # ru_maxrss is in KiB on Linux


def run(cmd: list, check: bool = True, **kw) -> str:
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, **kw)
    if check and p.returncode != 0:
        sys.exit(f"failed ({p.returncode}): {' '.join(map(str, cmd))}\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return p.stdout + p.stderr


def reference_rate(serial: Path, data: Path, threads: int, events: int, env: dict) -> tuple[float, float, float]:
    """The reference's event-loop rate (its own timer), and its process's wall seconds and peak RSS (MB)."""
    out, wall, rss = process([serial, "--data", data, "--numberOfThreads", threads, "--numberOfStreams", threads,
                              "--maxEvents", events], env, data.parent)
    m = re.search(r"throughput ([0-9.eE+-]+) events/s", out)
    if not m:
        sys.exit(f"no throughput line in the reference's output:\n{out[-2000:]}")
    return float(m.group(1)), wall, rss


def quiver_process(quiver: Path, dataset: Path, threads: int, events: int, out_dir: Path) -> tuple[float, float]:
    """`quiver run plans/examples/chain.toml` as a user runs it: wall seconds and peak RSS (MB)."""
    _, wall, rss = process([quiver, "run", ROOT / "plans/examples/chain.toml", "--input", dataset, "--threads", threads,
                            "--events", events, "--output", out_dir, "--no-progress"], dict(os.environ), ROOT)
    return wall, rss


def quiver_rate(quiver: Path, dataset: Path, threads: int, events: int) -> float:
    out = run([quiver, "bench", ROOT / "plans/examples/chain.toml", "--input", dataset, "--threads", threads,
               "--events", events, "--repeat", 2], cwd=ROOT)
    rows = [l.split() for l in out.splitlines() if re.match(r"^\s+\d+\s+\d+\s+\d+\s+[0-9.]+\s+[0-9.]+", l)]
    if not rows:
        sys.exit(f"no result line in quiver bench's output:\n{out[-2000:]}")
    return float(rows[-1][4])


def reference_cuda(a: argparse.Namespace) -> int:
    """The cuda program is timed on a GPU machine, from the pack: pack it here (needs no GPU),
    then run the device script, which stops with an error where no GPU is present."""
    pack = [str(ROOT / "scripts/pack-reference-cuda.sh"), "--reference-cuda", str(a.reference_cuda),
            "--quiver", str(a.quiver)]
    if a.input is not None:  # otherwise a small generated one: the default dataset is too big to carry
        pack += ["--input", str(a.input)]
    if subprocess.run(pack).returncode != 0:
        return 1
    return subprocess.run([str(ROOT / "scripts/gpu-reference.sh")]).returncode


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--serial", type=Path, help="the reference's serial program")
    ap.add_argument("--reference-cuda", type=Path, metavar="DIR",
                    help="instead: pack DIR's cuda program for the GPU machine and run it there beside "
                         "Quiver (scripts/pack-reference-cuda.sh, scripts/gpu-reference.sh; docs/gpu.md)")
    ap.add_argument("--quiver", type=Path, default=default_quiver())
    ap.add_argument("--input", type=Path, help="dataset (default: the default dataset)")
    ap.add_argument("--events", type=int, default=100)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--csv", type=Path)
    ap.add_argument("--skip-checks", action="store_true", help="time only")
    ap.add_argument("--checks-only", action="store_true",
                    help="the two checks, no timing; exits non-zero when either fails (scripts/refcheck.sh)")
    a = ap.parse_args()
    if a.reference_cuda is not None:
        sys.exit(reference_cuda(a))
    if a.serial is None:
        sys.exit("one of --serial or --reference-cuda is required")
    a.input = a.input or default_dataset()
    for p, what in [(a.serial, "--serial"), (a.quiver, "--quiver"), (a.input, "--input")]:
        if not p.exists():
            sys.exit(f"{what}: {p} does not exist")
    serial, quiver = a.serial.resolve(), a.quiver.resolve()

    with tempfile.TemporaryDirectory(prefix="quiver-vs-reference-") as tmp:
        work = Path(tmp)
        data = work / "data"
        run([quiver, "export", "pixeltrack", "--input", a.input, "--output", data])
        if a.checks_only and a.skip_checks:
            sys.exit("--checks-only and --skip-checks exclude each other")
        if not a.skip_checks:
            plan = work / "counts.toml"
            plan.write_text((ROOT / "plans/examples/chain.toml").read_text()
                            + '\n[[step]]\nlabel = "counts"\ntype = "event_counts"\nreference_files = true\n')
            # A run writes only into a directory of its own; the count files then join the export.
            counts = work / "counts"
            run([quiver, "run", plan, "--input", a.input, "--events", a.events, "--output", counts, "--no-progress"])
            for f in counts.iterdir():
                if f.is_file() and f.name != "quiver-run.toml":
                    shutil.copy(f, data / f.name)
            out = run([serial, "--data", data, "--numberOfThreads", 1, "--numberOfStreams", 1, "--maxEvents", a.events,
                       "--validation"], check=False, cwd=work)  # a failed validation exits non-zero
            verdict = [l for l in out.splitlines() if l.startswith("CountValidator")]
            print("reference --validation against our counts:", verdict[-1] if verdict else out[-500:])
            validated = bool(verdict) and "passed validation" in verdict[-1]
            hist = work / "hist"
            hist.mkdir()
            run([serial, "--data", data, "--numberOfThreads", 1, "--numberOfStreams", 1, "--maxEvents", a.events,
                 "--histogram"], cwd=hist)
            ours = work / "ours"
            run([quiver, "run", ROOT / "plans/pixel.toml", "--input", a.input, "--events", a.events, "--output", ours,
                 "--no-progress"], cwd=ROOT)
            same = filecmp.cmp(hist / "histograms_serial.txt", ours / "histograms.txt", shallow=False)
            print("reference --histogram against quiver's histograms.txt:", "identical" if same else "DIFFERENT")
            if a.checks_only:
                sys.exit(0 if validated and same else 1)

        plain = dict(os.environ)
        plain.pop("GLIBC_TUNABLES", None)
        tuned = dict(plain, GLIBC_TUNABLES=TUNED)
        rows = []
        for t in [int(x) for x in a.threads.split(",")]:
            rates: dict[str, list[float]] = {"reference": [], "reference, tuned malloc": [], "quiver": []}
            # The whole process as a user runs it: the reference's plain run, and `quiver run`.
            walls: dict[str, list[float]] = {"reference": [], "quiver": []}
            rss: dict[str, list[float]] = {"reference": [], "quiver": []}
            for i in range(a.repeat):
                rate, wall, peak = reference_rate(serial, data, t, a.events, plain)
                rates["reference"].append(rate)
                walls["reference"].append(wall)
                rss["reference"].append(peak)
                rates["reference, tuned malloc"].append(reference_rate(serial, data, t, a.events, tuned)[0])
                rates["quiver"].append(quiver_rate(quiver, a.input, t, a.events))
                wall, peak = quiver_process(quiver, a.input, t, a.events, work / "run")
                walls["quiver"].append(wall)
                rss["quiver"].append(peak)
                print(f"threads {t} run {i + 1}: " + ", ".join(f"{k} {v[-1]:.2f}" for k, v in rates.items())
                      + "; process " + ", ".join(f"{k} {walls[k][-1]:.2f} s {rss[k][-1]:.0f} MB" for k in walls),
                      flush=True)
            q = statistics.median(rates["quiver"])
            qw = statistics.median(walls["quiver"])
            for k, v in rates.items():
                med = statistics.median(v)
                rows.append({"threads": t, "program": k, "median_events_per_s": round(med, 2), "min": round(min(v), 2),
                             "max": round(max(v), 2), "wall_ms_per_event": round(1000 / med, 2) if med else None,
                             "quiver_over_this": round(q / med, 2), "runs": " ".join(f"{x:.2f}" for x in v),
                             "process_wall_s": round(statistics.median(walls[k]), 3) if k in walls else None,
                             "process_quiver_over_this": round(statistics.median(walls[k]) / qw, 2) if k in walls else None,
                             "peak_rss_mb": round(statistics.median(rss[k]), 1) if k in rss else None,
                             "peak_rss_mb_max": round(max(rss[k]), 1) if k in rss else None})

    print(f"\n{'threads':>7}  {'program':<24} {'events/s median [min-max]':>27}  {'quiver / this':>13}")
    for r in rows:
        print(f"{r['threads']:>7}  {r['program']:<24} {r['median_events_per_s']:>10.2f} [{r['min']:.2f}-{r['max']:.2f}]"
              f"  {r['quiver_over_this']:>13.2f}")
    print(f"\n{'threads':>7}  {'program (whole process)':<24} {'wall s':>8} {'this / quiver':>13} {'peak RSS MB (max)':>18}")
    for r in rows:
        if r["process_wall_s"] is not None:
            print(f"{r['threads']:>7}  {r['program']:<24} {r['process_wall_s']:>8.3f} {r['process_quiver_over_this']:>13.2f}"
                  f" {r['peak_rss_mb']:>10.1f} ({r['peak_rss_mb_max']:.1f})")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
