#!/usr/bin/env python3
"""Throughput of `quiver.dask.reconstruct` on a Dask LocalCluster of 1 and 2 worker processes
against a single-process run (`quiver.Plan.run`, 1 and 2 threads), on the same events.

    .venv/bin/python scripts/bench-dask.py [--dataset DIR] [--events N] [--partition-events N] [--repeat R]

Every run writes its products (the plan's write_parquet step) to a fresh directory; each
Dask run's merged products are checked equal to the single-process run's. Cluster start-up
is not timed (workers are started and have imported quiver before the clock starts);
per-partition costs (loading the plan, opening and checksumming the dataset) are.
Prints one line per configuration (best and median of R runs) and the per-step time
summed over workers.
"""

import argparse
import os
import pathlib
import statistics
import sys
import tempfile
import time

import pyarrow as pa
import pyarrow.parquet as pq

ROOT = pathlib.Path(__file__).resolve().parents[1]


def default_dataset() -> pathlib.Path:
    base = os.environ.get("QUIVER_DATA")
    return pathlib.Path(base) / "default" if base else pathlib.Path.home() / ".cache/quiver/datasets/default"


def same_products(dask_out: pathlib.Path, single: pathlib.Path) -> bool:
    import quiver.dask as qd

    parts = [d for _, _, d in qd.complete_parts(dask_out)]
    for f in sorted(single.glob("*.parquet")):
        if f.name == "histograms.parquet":
            continue
        merged = pa.concat_tables([pq.read_table(d / f.name) for d in parts])
        if not merged.equals(pq.read_table(f)):
            return False
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--plan", default=str(ROOT / "plans/pixel.toml"))
    ap.add_argument("--dataset", default=str(default_dataset()), help="default: the default dataset (100 events, <PU> 50)")
    ap.add_argument("--events", type=int, help="default: all events of the dataset")
    ap.add_argument("--partition-events", type=int, default=25)
    ap.add_argument("--repeat", type=int, default=3, help="runs per configuration (default 3)")
    ap.add_argument("--workers", default="1,2", help="Dask worker counts (default 1,2)")
    a = ap.parse_args()

    import quiver
    import quiver.cli
    import quiver.dask as qd
    from distributed import Client, LocalCluster

    ds = pathlib.Path(a.dataset)
    if not (ds / "manifest.toml").exists():
        print(f"generating {ds} (100 events, <PU> 50, seed 1) ...", flush=True)
        if quiver.cli.main(["generate", "--output", str(ds)]) != 0:
            return 1
    n_available, _ = qd.dataset_info(ds)
    events = min(a.events or n_available, n_available)
    tmp = pathlib.Path(tempfile.mkdtemp(prefix="bench-dask-"))
    print(f"plan {a.plan}\ndataset {ds} ({events} events)  partitions of {a.partition_events} events  "
          f"{a.repeat} runs each  {os.cpu_count()} cores  load {os.getloadavg()[0]:.2f}\n", flush=True)

    rows = []
    plan = quiver.Plan.load(a.plan)
    single = tmp / "single"
    for threads in (1, 2):
        walls = []
        for r in range(a.repeat):
            out = tmp / f"single-{threads}-{r}"
            t0 = time.perf_counter()
            plan.run(input=ds, output=out, events=events, threads=threads, collect=[])
            walls.append(time.perf_counter() - t0)
            if threads == 1 and r == 0:
                out.rename(single)
        rows.append((f"single process, {threads} thread{'s' * (threads > 1)}", walls, None))

    step_seconds = {}
    for n_workers in [int(w) for w in a.workers.split(",")]:
        with LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, dashboard_address=None,
                          silence_logs=40) as cluster, Client(cluster) as client:
            client.run(lambda: __import__("quiver.dask"))  # imports outside the clock
            walls = []
            for r in range(a.repeat):
                out = tmp / f"dask-{n_workers}-{r}"
                s = qd.reconstruct(a.plan, ds, out, client=client, events=events,
                                   partition_events=a.partition_events)
                if not s.ok or s.events != events:
                    print(f"dask run failed: {s}")
                    return 1
                if not same_products(out, single):
                    print(f"dask run with {n_workers} workers: products differ from the single-process run")
                    return 1
                walls.append(s.wall_s)
                step_seconds[n_workers] = s.step_seconds
        rows.append((f"Dask, {n_workers} worker process{'es' * (n_workers > 1)}", walls, n_workers))

    base = min(rows[0][1])
    print(f"{'configuration':<34} {'best s':>8} {'median s':>9} {'events/s (best)':>16} {'speed-up':>9}")
    for name, walls, _ in rows:
        best = min(walls)
        print(f"{name:<34} {best:>8.3f} {statistics.median(walls):>9.3f} {events / best:>16.1f} {base / best:>9.2f}")
    print("\nmerged Dask products equal the single-process run's: yes")
    for n_workers, steps in step_seconds.items():
        total = sum(steps.values())
        print(f"\nper step, Dask {n_workers} worker(s), last run, ms/event summed over workers (total {1e3 * total / events:.1f}):")
        print("  " + "  ".join(f"{k} {1e3 * v / events:.2f}" for k, v in steps.items()))
    import shutil

    shutil.rmtree(tmp, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
