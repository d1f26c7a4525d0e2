#!/usr/bin/env bash
# Per-kernel profile of the GPU reconstruction with Nsight Compute (`ncu`), on a machine with
# an NVIDIA GPU: for every kernel of a few batches, its device time, how much of the SMs
# and of the memory bandwidth it used, its achieved occupancy and its launch shape, summed
# and averaged per kernel, largest total time first. What chooses the next kernel work:
# `gpu-check.sh` gives each kernel's time; this says whether that time is spent using the
# device (a wide, busy grid) or waiting on one block per event. ncu runs the kernels one at a
# time and replays each, so the times are uncontended, and the run is slow: about a minute
# for the default 48 events.
#   scripts/gpu-profile.sh
# Environment: QUIVER_BIN (prebuilt binary, else a release build), GPU_PROFILE_EVENTS
# (default 48), GPU_PROFILE_BATCH (events per batch, default 16), GPU_PROFILE_DATASET (an
# existing dataset, else one generated at <PU> 50), NCU (the ncu binary), QUIVER_NVRTC.
# Writes the per-kernel table to docs/perf/gpu-profile-DATE.csv and ncu's raw CSV beside
# it (.raw.csv).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
EVENTS="${GPU_PROFILE_EVENTS:-48}"
BATCH="${GPU_PROFILE_BATCH:-16}"
NCU="${NCU:-$(command -v ncu || echo /usr/local/cuda/bin/ncu)}"
[ -x "$NCU" ] || { echo "error: Nsight Compute (ncu) not found; set NCU=/path/to/ncu" >&2; exit 1; }
. scripts/gpu-nvrtc.sh
if [ -n "${QUIVER_BIN:-}" ]; then
    BIN="$QUIVER_BIN"
else
    cargo build --release --bin quiver
    BIN="$CARGO_TARGET_DIR/release/quiver"
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
DS="${GPU_PROFILE_DATASET:-$WORK/dataset}"
[ -n "${GPU_PROFILE_DATASET:-}" ] || "$BIN" generate --events "$EVENTS" --pileup 50 --output "$DS" > /dev/null
scripts/gpu-plans.sh "$BIN" "$WORK"
METRICS=gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__warps_active.avg.pct_of_peak_sustained_active,launch__grid_size,launch__block_size,launch__registers_per_thread
mkdir -p docs/perf
OUTCSV="docs/perf/gpu-profile-$(date -u +%Y%m%d-%H%M).csv"
RAW="${OUTCSV%.csv}.raw.csv"
# One worker: the batches' kernels in order, none overlapping (ncu serialises them anyway).
"$NCU" --metrics "$METRICS" --csv --page raw --print-units base --target-processes all \
    "$BIN" run "$WORK/gpu-reco.toml" --input "$DS" --events "$EVENTS" --batch-size "$BATCH" --threads 1 --output "$WORK/out" --no-progress \
    > "$WORK/ncu.out" 2> "$WORK/ncu.err" || {
    echo "error: ncu failed (profiling counters may need root or NVreg_RestrictProfilingToAdminUsers=0):" >&2
    tail -20 "$WORK/ncu.err" >&2
    exit 1
}
# ncu's CSV starts at its header line ("ID",...); the program's own output comes before.
awk 'found || /^"ID"/ {found = 1; print}' "$WORK/ncu.out" > "$RAW"
[ -s "$RAW" ] || { echo "error: no kernel was profiled; ncu said:" >&2; tail -20 "$WORK/ncu.err" "$WORK/ncu.out" >&2; exit 1; }
python3 - "$RAW" "$OUTCSV" "$EVENTS" <<'PY'
import csv, sys
raw, out, events = sys.argv[1], sys.argv[2], int(sys.argv[3])
rows = list(csv.reader(open(raw)))
head, body = rows[0], [r for r in rows[2:] if len(r) == len(rows[0])]  # row 1: units
col = {name: i for i, name in enumerate(head)}
def num(r, name):
    try:
        return float(r[col[name]].replace(",", ""))
    except (KeyError, ValueError):
        return float("nan")
by = {}
for r in body:
    name = r[col["Kernel Name"]].split("(")[0]
    by.setdefault(name, []).append(r)
table = []
for name, rs in by.items():
    t = [num(r, "gpu__time_duration.sum") for r in rs]
    total = sum(t)
    # Time-weighted averages: what the kernel's device time was spent doing.
    w = lambda m: sum(num(r, m) * x for r, x in zip(rs, t)) / total if total > 0 else float("nan")
    table.append([name, len(rs), total / 1e6, total / 1e3 / events,
                  w("sm__throughput.avg.pct_of_peak_sustained_elapsed"),
                  w("dram__throughput.avg.pct_of_peak_sustained_elapsed"),
                  w("sm__warps_active.avg.pct_of_peak_sustained_active"),
                  sum(num(r, "launch__grid_size") for r in rs) / len(rs),
                  num(rs[0], "launch__block_size"), num(rs[0], "launch__registers_per_thread")])
table.sort(key=lambda x: -x[2])
head_out = ["kernel", "launches", "ms", "us_per_event", "sm_pct", "dram_pct", "occupancy_pct", "mean_grid", "block", "registers"]
with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(head_out)
    for r in table:
        w.writerow([r[0], r[1]] + [f"{x:.4g}" for x in r[2:]])
print(f"{'kernel':<22}{'launches':>9}{'ms':>9}{'us/event':>10}{'SM %':>7}{'DRAM %':>8}{'occup. %':>9}{'grid':>9}{'block':>6}{'regs':>6}")
for r in table:
    print(f"{r[0]:<22}{r[1]:>9}{r[2]:>9.3f}{r[3]:>10.2f}{r[4]:>7.1f}{r[5]:>8.1f}{r[6]:>9.1f}{r[7]:>9.0f}{r[8]:>6.0f}{r[9]:>6.0f}")
all_ms = sum(r[2] for r in table)
print(f"all kernels: {all_ms:.3f} ms over {events} events ({all_ms * 1e3 / events:.1f} us/event, uncontended)")
PY
echo "wrote $OUTCSV (and ncu's raw CSV $RAW)"
