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
3. times, in `--repeat` rounds, each round running every thread count (their order turned
   round by round) and, per thread count, every program (their order turned too):
   - the event loop by each program's own report: the reference
     (`--numberOfThreads T --numberOfStreams T`, its event-loop timer), the reference with
     the glibc allocator settings the `quiver` command uses, and `quiver bench
     plans/examples/chain.toml --threads T --repeat 2` (the second of two runs);
   - each program as a user runs it: the whole process's events over its wall time and
     its peak resident set (`wait4`'s rusage), the reference's plain run above against
     `quiver run plans/examples/chain.toml --threads T` (no outputs, no progress bar);
   and prints every round's rates and Quiver / reference ratios, then per thread count the
   median [min-max] of each program and of the ratio;
4. refuses to time on a busy machine: before each round it samples /proc for a second and
   stops (exit status 3) when processes other than its own use more than 10 % of a core
   (`--noise-limit`), naming the busiest. `--allow-noisy` times anyway, and the CSV says
   so, with the CPU model, kernel, transparent huge pages setting, load average and the
   other processes' CPU of every round.

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


def machine() -> dict:
    """What the rates depend on besides the programs: CPU, kernel, huge pages, load."""
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    try:
        thp = Path("/sys/kernel/mm/transparent_hugepage/enabled").read_text().strip()
        thp = re.search(r"\[(\w+)\]", thp).group(1) if "[" in thp else thp  # the one in force
    except OSError:
        thp = "unknown"
    return {"cpu_model": cpu, "cores": os.cpu_count(), "kernel": os.uname().release, "thp": thp}


def loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "unknown"


def cpu_ticks() -> dict[int, tuple[int, str, int]]:
    """Every process: (its CPU ticks, its name, its parent), from /proc/PID/stat."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:  # gone meanwhile
            continue
        # The name is in parentheses and may hold spaces; the fields after it are plain.
        name = stat[stat.index("(") + 1:stat.rindex(")")]
        rest = stat[stat.rindex(")") + 2:].split()
        out[int(d)] = (int(rest[11]) + int(rest[12]), name, int(rest[1]))  # utime, stime; ppid
    return out


def busy_ticks() -> int:
    """All CPUs' non-idle ticks since boot, from /proc/stat (processes that come and go
    between two samples of /proc/PID count here too)."""
    f = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    return sum(f) - f[3] - f[4]  # less idle and iowait


def own_tree(procs: dict) -> set[int]:
    mine, grew = {os.getpid()}, True
    while grew:
        more = {p for p, (_, _, ppid) in procs.items() if ppid in mine} - mine
        grew = bool(more)
        mine |= more
    return mine


def other_load(seconds: float = 1.0) -> tuple[float, list[tuple[str, float]]]:
    """The CPU that processes outside this script's tree used over `seconds`, in % of one
    core, and the busiest of them."""
    hz = os.sysconf("SC_CLK_TCK")
    before, busy0, t0 = cpu_ticks(), busy_ticks(), time.perf_counter()
    time.sleep(seconds)
    after, busy1, t1 = cpu_ticks(), busy_ticks(), time.perf_counter()
    mine = own_tree(after) | own_tree(before)
    wall = t1 - t0
    own = sum(after[p][0] - before.get(p, (0,))[0] for p in mine if p in after)
    others = [(f"{after[p][1]} (pid {p})", 100.0 * (after[p][0] - before.get(p, (0,))[0]) / hz / wall)
              for p in after if p not in mine]
    others = sorted((o for o in others if o[1] > 0.5), key=lambda o: -o[1])
    total = max(0.0, 100.0 * (busy1 - busy0 - own) / hz / wall)
    return total, others[:5]


def check_quiet(limit: float, allow_noisy: bool) -> float:
    """Samples the machine before a round; exits (status 3) when it is busy, unless allowed."""
    pct, top = other_load()
    if pct > limit and not allow_noisy:
        names = ", ".join(f"{n} {c:.0f} %" for n, c in top) or "short-lived processes"
        print(f"bench-reference: the machine is busy: other processes used {pct:.0f} % of a core "
                 f"over the last second (limit {limit:g} %; {names}), so the timings would measure "
                 f"them too. Wait for a quiet machine, or pass --allow-noisy to time anyway "
                 f"(the CSV then records it).", file=sys.stderr)
        sys.exit(3)
    return pct


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
    ap.add_argument("--allow-noisy", action="store_true",
                    help="time even when other processes use the CPU (recorded in the CSV)")
    ap.add_argument("--noise-limit", type=float, default=10.0, metavar="PCT",
                    help="the most CPU, in %% of one core, other processes may use before a round (default 10)")
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
            if not (validated and same):
                # A ratio between programs that reconstruct different events means nothing.
                sys.exit("the programs disagree (see above): not timing them")

        rows, noise, load = time_rounds(a, serial, quiver, data, work)
    report(a, rows, noise, load)


def time_rounds(a: argparse.Namespace, serial: Path, quiver: Path, data: Path, work: Path):
    """The timed rounds: (summary rows, others' CPU before each round, load averages)."""
    plain = dict(os.environ)
    plain.pop("GLIBC_TUNABLES", None)
    tuned = dict(plain, GLIBC_TUNABLES=TUNED)
    threads = [int(x) for x in a.threads.split(",")]
    progs = ["reference", "reference, tuned malloc", "quiver"]
    # m[(t, what, prog)]: one value per round; what is loop (events/s by the program's own
    # timer), process (events/s over the whole process's wall time) or rss (MB).
    m: dict[tuple, list[float]] = {}
    noise: list[float] = []
    load = []

    def one(t: int, prog: str) -> None:
        if prog == "quiver":
            m.setdefault((t, "loop", prog), []).append(quiver_rate(quiver, a.input, t, a.events))
            wall, peak = quiver_process(quiver, a.input, t, a.events, work / "run")
        else:
            rate, wall, peak = reference_rate(serial, data, t, a.events, tuned if "tuned" in prog else plain)
            m.setdefault((t, "loop", prog), []).append(rate)
        m.setdefault((t, "process", prog), []).append(a.events / wall)
        m.setdefault((t, "rss", prog), []).append(peak)

    for r in range(a.repeat):
        noise.append(check_quiet(a.noise_limit, a.allow_noisy))
        load.append(loadavg())
        # Thread counts and programs in a turned order each round, so that a drift of the
        # machine does not favour whichever runs first.
        for t in threads[r % len(threads):] + threads[:r % len(threads)]:
            for prog in progs[r % len(progs):] + progs[:r % len(progs)]:
                one(t, prog)
            lp, pp = m[(t, "loop", "quiver")][-1], m[(t, "process", "quiver")][-1]
            rl, rp = m[(t, "loop", "reference")][-1], m[(t, "process", "reference")][-1]
            print(f"round {r + 1} threads {t}: event loop: reference {rl:.2f}, tuned "
                  f"{m[(t, 'loop', 'reference, tuned malloc')][-1]:.2f}, quiver {lp:.2f} events/s "
                  f"(quiver / reference {lp / rl:.2f}); whole process: reference {rp:.2f}, quiver "
                  f"{pp:.2f} events/s ({pp / rp:.2f}), peak RSS {m[(t, 'rss', 'reference')][-1]:.0f} / "
                  f"{m[(t, 'rss', 'quiver')][-1]:.0f} MB; others' CPU before the round {noise[-1]:.0f} %",
                  flush=True)
    return summarize(m, threads, progs), noise, load


def report(a: argparse.Namespace, rows: list[dict], noise: list[float], load: list[str]) -> None:
    """Prints the summary tables and writes the CSV, with the machine's state."""
    env = dict(machine(), events=a.events, rounds=a.repeat, allow_noisy=a.allow_noisy,
               others_cpu_pct=" ".join(f"{x:.0f}" for x in noise), loadavg=" | ".join(load))
    print(f"\n{env['cpu_model']}, {env['cores']} cores, kernel {env['kernel']}, THP {env['thp']}; "
          f"others' CPU before each round (% of a core): {env['others_cpu_pct']}"
          + ("  [--allow-noisy: the machine was shared]" if a.allow_noisy else ""))
    print(f"\n{'threads':>7}  {'program':<24} {'event loop, events/s':>28} {'whole process, events/s':>28}"
          f" {'peak RSS MB':>12}")
    for r in rows:
        if not r["program"].startswith("quiver / "):
            print(f"{r['threads']:>7}  {r['program']:<24} {r['loop_median']:>10.2f} [{r['loop_min']:.2f}-"
                  f"{r['loop_max']:.2f}]    {r['process_median']:>10.2f} [{r['process_min']:.2f}-"
                  f"{r['process_max']:.2f}] {r['rss_median']:>12.0f}")
    print(f"\n{'threads':>7}  {'ratio, per round':<34} {'event loop median [min-max]':>28} "
          f"{'whole process median [min-max]':>31}")
    for r in rows:
        if r["program"].startswith("quiver / "):
            print(f"{r['threads']:>7}  {r['program']:<34} {r['loop_median']:>10.2f} [{r['loop_min']:.2f}-"
                  f"{r['loop_max']:.2f}]    {r['process_median']:>10.2f} [{r['process_min']:.2f}-"
                  f"{r['process_max']:.2f}]")
    if a.csv:
        with open(a.csv, "w", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(rows[0]) + list(env))
            w.writeheader()
            w.writerows(dict(r, **env) for r in rows)


def summarize(m: dict, threads: list[int], progs: list[str]) -> list[dict]:
    """Per thread count: each program's median, min and max, then Quiver over each
    reference program round by round (the ratio of one round's two runs, not of medians)."""
    rows = []

    def stats(row: dict, what: str, v: list[float]) -> None:
        row[f"{what}_median"] = round(statistics.median(v), 3)
        row[f"{what}_min"] = round(min(v), 3)
        row[f"{what}_max"] = round(max(v), 3)
        row[f"{what}_runs"] = " ".join(f"{x:.3f}" for x in v)

    for t in threads:
        for prog in progs:
            row = {"threads": t, "program": prog}
            for what in ("loop", "process", "rss"):
                stats(row, what, m[(t, what, prog)])
            rows.append(row)
        for ref in progs[:-1]:
            row = {"threads": t, "program": f"quiver / {ref}"}
            for what in ("loop", "process"):
                stats(row, what, [q / r for q, r in zip(m[(t, what, "quiver")], m[(t, what, ref)])])
            for k in ("median", "min", "max", "runs"):
                row[f"rss_{k}"] = None
            rows.append(row)
    return rows


if __name__ == "__main__":
    main()
