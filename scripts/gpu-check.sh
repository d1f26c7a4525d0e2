#!/usr/bin/env bash
# GPU check of Quiver, on a machine with an NVIDIA GPU (driver + CUDA 13), in one command
# and well under 10 minutes:
#   1. builds the release binary (or uses $QUIVER_BIN);
#   2. checks the catalogue has the GPU step types and that a GPU and NVRTC are usable;
#   3. generates a dataset (or uses $GPU_CHECK_DATASET);
#   4. runs plans/examples/compare-gpu.toml: CPU and GPU chains, every product compared
#      (bit-identical; from the fit on, within the fit's documented tolerance) and prints
#      how many values are within the tolerance without being bit-identical. The comparisons
#      run with `strict = false`, so that one run reports every product that differs (device
#      time is scarce); the script still fails, at its end, when any product differs;
#   5. reruns that comparison with one event per batch on one thread and with 64-event
#      batches on every core: every comparison line must be the same (determinism);
#   6. runs the default chain on CPU only and with every GPU step type, prints the
#      transfer share, each kernel's device time, the residency table and the device
#      memory, and the reconstruction on one thread with every kernel and copy timed
#      (uncontended device times, their sums and the chain's transfer share), then scans the GPU chain's
#      throughput over 1, 2, 4, 8, 16 CPU threads (one stream each) beside the CPU chain on
#      all cores, then both chains without the validation histograms (the reconstruction
#      alone, raw data to tracks and vertices: the target in docs/gpu.md);
#   7. with QUIVER_GPU_SYNC=streams (no per-buffer CUDA events): the comparison again (the
#      same lines as in 4) and both GPU benchmarks on the most threads, beside step 6's;
#   8. the reconstruction on 16 and 32 threads with QUIVER_GPU_WAIT=block and =yield (a
#      waiting worker frees its core); and writes a CSV under docs/perf/.
# Between 6 and 7, the steady state: the reconstruction alone on the most threads with
# GPU_CHECK_STEADY_ROUNDS (16) batches per worker, of 16 and of 64 events on the GPU, beside
# the CPU chain. The benchmarks replay the dataset (`quiver bench --cycle`, as
# pixeltrack-standalone's source repeats its events) where they ask for more events than it
# has: GPU_CHECK_GENERATE (default 800) events are generated.
# Environment: QUIVER_BIN (prebuilt binary), GPU_CHECK_EVENTS (events compared, default
# 400), GPU_CHECK_BENCH_EVENTS (events of the throughput runs, default 2400: with 16 workers
# and 16-event batches, 400 events are 25 batches and the last round runs half empty;
# with GPU_CHECK_DATASET, GPU_CHECK_EVENTS),
# GPU_CHECK_PILEUP (default 50), GPU_CHECK_DATASET (existing dataset dir),
# GPU_CHECK_BATCH (events per batch for every run, default 16: a launch pays per batch),
# GPU_CHECK_THREADS (thread counts of the GPU scan, default 1,2,4,8,16),
# QUIVER_NVRTC (libnvrtc.so.13 or its folder, when not on the loader path).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
EVENTS="${GPU_CHECK_EVENTS:-400}"
# With a dataset of one's own, as many as are compared unless said otherwise.
if [ -n "${GPU_CHECK_DATASET:-}" ]; then BENCH_EVENTS="${GPU_CHECK_BENCH_EVENTS:-$EVENTS}"; else BENCH_EVENTS="${GPU_CHECK_BENCH_EVENTS:-2400}"; fi
PILEUP="${GPU_CHECK_PILEUP:-50}"
BATCH=(--batch-size "${GPU_CHECK_BATCH:-16}")
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
t0=$(date +%s)
say() { printf '\n== %s (%ss)\n' "$*" "$(( $(date +%s) - t0 ))"; }

say "device"
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
else
    echo "nvidia-smi not found: the run below will say what is missing"
fi

# NVRTC: use the CUDA toolkit's when it is not already on the loader path.
. scripts/gpu-nvrtc.sh
echo "QUIVER_NVRTC=${QUIVER_NVRTC:-<loader path>}"

say "build"
if [ -n "${QUIVER_BIN:-}" ]; then
    BIN="$QUIVER_BIN"
else
    cargo build --release --bin quiver
    BIN="$CARGO_TARGET_DIR/release/quiver"
fi
"$BIN" --version
if ! "$BIN" steps | grep -Eq '^calibrate +\[cpu, gpu\]'; then
    echo "error: this quiver binary has no GPU step types: the CLI registry must call quiver_gpu::register" >&2
    exit 1
fi

say "dataset"
if [ -n "${GPU_CHECK_DATASET:-}" ]; then
    DS="$GPU_CHECK_DATASET"
else
    DS="$WORK/dataset"
    # The benchmarks replay the dataset (`bench --cycle`): 800 events generated, not 2 400
    # (about 40 s less of device time).
    GENERATE="${GPU_CHECK_GENERATE:-800}"
    "$BIN" generate --events "$(( EVENTS > GENERATE ? EVENTS : GENERATE ))" --pileup "$PILEUP" --output "$DS" >/dev/null
fi
echo "dataset: $DS; $EVENTS events compared, $BENCH_EVENTS benchmarked (the dataset replayed where it has fewer)"

say "CPU vs GPU, every product compared (plans/examples/compare-gpu.toml, strict = false)"
# Not strict: every product is compared and its differences counted, rather than the job
# stopping at the first one; the script fails at its end when any product differs.
awk '{print} /^type = "compare"$/ {print "strict = false"}' plans/examples/compare-gpu.toml > "$WORK/compare.toml"
FAILED=""
"$BIN" run "$WORK/compare.toml" --input "$DS" --events "$EVENTS" --output "$WORK/out-compare" --no-progress ${BATCH[@]+"${BATCH[@]}"} \
    | tee "$WORK/compare.txt"
if grep -E '^compared .* [1-9][0-9]* differences' "$WORK/compare.txt"; then
    echo "error: CPU and GPU products differ (above); the checks below still run" >&2
    FAILED="CPU and GPU products differ"
fi
echo "values within the tolerance but not bit-identical (fits, tracks, vertices):"
grep -B2 'within tolerance but not bit-identical' "$WORK/compare.txt" | grep -E '^compared|within' || echo "  none: every value bit-identical"

# Determinism: the same comparison with one event per batch on one thread, and with 64-event
# batches on every core. The CPU products do not depend on either; the GPU products must not
# either, so every comparison line (rows, differences, values within the tolerance) must be
# the same in both runs.
say "determinism: batch size 1 on one thread vs batch size 64 on $(nproc) threads"
for run in "1 1" "64 $(nproc)"; do
    set -- $run
    "$BIN" run "$WORK/compare.toml" --input "$DS" --events "$EVENTS" --output "$WORK/out-det-$1" --no-progress \
        --batch-size "$1" --threads "$2" > "$WORK/det-$1.txt"
    grep -E '^compared|within tolerance' "$WORK/det-$1.txt" > "$WORK/det-$1.lines"
done
if ! diff "$WORK/det-1.lines" "$WORK/det-64.lines"; then
    echo "error: the GPU products depend on the batch size or the number of threads; the checks below still run" >&2
    FAILED="${FAILED:+$FAILED; }the GPU products depend on the batch size or the number of threads"
fi
echo "the same $(wc -l < "$WORK/det-1.lines") comparison lines at both settings"

# Throughput: the default chain without its output step, CPU only, then with every step
# type that has a GPU implementation (from the catalogue) set to `backend = "gpu"`.
scripts/gpu-plans.sh "$BIN" "$WORK"
NCPU="$(nproc)"
SCAN="${GPU_CHECK_THREADS:-1,2,4,8,16}"
for kind in cpu gpu; do
    say "one run of the $kind plan (summary: transfers, kernel times, residency, device memory)"
    # The GPU run times every kernel (two CUDA events per launch; the scan below does not).
    timing=0; [ "$kind" = gpu ] && timing=1
    QUIVER_GPU_KERNEL_TIMES="$timing" "$BIN" run "$WORK/$kind.toml" --input "$DS" --events "$EVENTS" --output "$WORK/out-$kind" --no-progress ${BATCH[@]+"${BATCH[@]}"} \
        | tee "$WORK/$kind.txt"
done
say "single-stream kernel times: the reconstruction on one thread, every kernel timed"
# Uncontended device times (at 16 threads each kernel's time includes the other streams'
# work): what a batch's kernels cost, and the sum beside the wall time.
QUIVER_GPU_KERNEL_TIMES=1 "$BIN" run "$WORK/gpu-reco.toml" --input "$DS" --events "$EVENTS" --threads 1 --output "$WORK/out-k1" --no-progress ${BATCH[@]+"${BATCH[@]}"} > "$WORK/k1.txt"
grep -E '^events|kernel time' "$WORK/k1.txt" || true
grep 'kernel time' "$WORK/k1.txt" | grep -oE '[0-9]+\.[0-9]+ ms' | awk '{s += $1} END {printf "all kernels: %.1f ms over '"$EVENTS"' events (%.3f ms/event)\n", s, s / '"$EVENTS"'}' || true
# The chain's transfer share from each copy's own device time (the phase times of the
# steps' "gpu:" lines also hold the host's work that the stream waited for).
grep 'bus time' "$WORK/k1.txt" || true
kernel_ms="$(grep 'kernel time' "$WORK/k1.txt" | grep -oE '[0-9]+\.[0-9]+ ms' | awk '{s += $1} END {print s + 0}')"
bus_ms="$(grep 'bus time' "$WORK/k1.txt" | grep -oE 'in [0-9]+\.[0-9]+ ms' | awk '{s += $2} END {print s + 0}')"
awk -v b="$bus_ms" -v k="$kernel_ms" -v n="$EVENTS" 'BEGIN {if (b + k > 0) printf "the chain on one stream: copies across the bus %.1f ms (%.3f ms/event), kernels %.1f ms: transfer share %.1f %% (target <= 10 %%)\n", b, b / n, k, 100 * b / (b + k)}' | tee "$WORK/share.txt"

say "throughput scan: GPU chain over $SCAN CPU threads (one stream each), CPU chain on all $NCPU cores"
"$BIN" bench --cycle "$WORK/gpu.toml" --input "$DS" --events "$BENCH_EVENTS" --threads "$SCAN" --repeat 2 --csv "$WORK/gpu-scan.csv" ${BATCH[@]+"${BATCH[@]}"}
"$BIN" bench --cycle "$WORK/cpu.toml" --input "$DS" --events "$BENCH_EVENTS" --threads "$NCPU" --repeat 2 --csv "$WORK/cpu-scan.csv" ${BATCH[@]+"${BATCH[@]}"}
say "reconstruction alone (no validation histograms): GPU chain on ${SCAN##*,} threads, CPU chain on all $NCPU cores"
"$BIN" bench --cycle "$WORK/gpu-reco.toml" --input "$DS" --events "$BENCH_EVENTS" --threads "${SCAN##*,}" --repeat 2 --csv "$WORK/gpu-reco-scan.csv" ${BATCH[@]+"${BATCH[@]}"}
"$BIN" bench --cycle "$WORK/cpu-reco.toml" --input "$DS" --events "$BENCH_EVENTS" --threads "$NCPU" --repeat 2 --csv "$WORK/cpu-reco-scan.csv" ${BATCH[@]+"${BATCH[@]}"}

# The steady state: the scan above runs ~9 rounds of batches per worker at 16 threads and
# 16 events per batch (2 400 events), fewer with larger batches, and its last round runs
# part empty. The reconstruction alone on the most threads, ROUNDS batches per worker
# (GPU_CHECK_STEADY_ROUNDS, default 16), the dataset replayed: 16- and 64-event batches on
# the GPU, 16-event batches on the CPU (all cores).
ROUNDS="${GPU_CHECK_STEADY_ROUNDS:-16}"
NT="${SCAN##*,}"
say "steady state: the reconstruction alone, $ROUNDS batches per worker"
for b in 16 64; do
    "$BIN" bench --cycle "$WORK/gpu-reco.toml" --input "$DS" --events "$(( NT * b * ROUNDS ))" --threads "$NT" --batch-size "$b" --repeat 2 --csv "$WORK/gpu-reco-steady-b$b-scan.csv" \
        || FAILED="${FAILED:+$FAILED; }the steady-state benchmark (batch $b) failed"
done
"$BIN" bench --cycle "$WORK/cpu-reco.toml" --input "$DS" --events "$(( NCPU * 16 * ROUNDS ))" --threads "$NCPU" --batch-size 16 --repeat 2 --csv "$WORK/cpu-reco-steady-b16-scan.csv" \
    || FAILED="${FAILED:+$FAILED; }the steady-state CPU benchmark failed"

# The streams kept apart without per-buffer events (QUIVER_GPU_SYNC=streams, not yet the
# default): the same comparison lines as above (no race changes a product), then the same
# two benchmarks on 16 threads beside the default's.
say "QUIVER_GPU_SYNC=streams: the comparison again, then the GPU benchmarks on ${SCAN##*,} threads"
QUIVER_GPU_SYNC=streams "$BIN" run "$WORK/compare.toml" --input "$DS" --events "$EVENTS" --output "$WORK/out-streams" --no-progress ${BATCH[@]+"${BATCH[@]}"} > "$WORK/streams.txt" \
    || FAILED="${FAILED:+$FAILED; }the comparison with QUIVER_GPU_SYNC=streams failed"
grep -E '^compared|within tolerance' "$WORK/compare.txt" > "$WORK/events.lines"
grep -E '^compared|within tolerance' "$WORK/streams.txt" > "$WORK/streams.lines" || true
if ! diff "$WORK/events.lines" "$WORK/streams.lines"; then
    echo "error: with QUIVER_GPU_SYNC=streams the comparison differs (above)" >&2
    FAILED="${FAILED:+$FAILED; }QUIVER_GPU_SYNC=streams changes the comparison"
fi
echo "the same $(wc -l < "$WORK/streams.lines") comparison lines with QUIVER_GPU_SYNC=streams"
grep -h 'stream sync' "$WORK/streams.txt" | head -1 || true
for kind in gpu gpu-reco; do
    QUIVER_GPU_SYNC=streams "$BIN" bench --cycle "$WORK/$kind.toml" --input "$DS" --events "$BENCH_EVENTS" --threads "${SCAN##*,}" --repeat 2 --csv "$WORK/$kind-streams-scan.csv" ${BATCH[@]+"${BATCH[@]}"} \
        || FAILED="${FAILED:+$FAILED; }the $kind benchmark with QUIVER_GPU_SYNC=streams failed"
done

# How a worker waits for its stream (QUIVER_GPU_WAIT): the driver spins by default, so a
# waiting worker holds its core; blocking frees it, so that more workers than cores can
# prepare batches while others wait. The reconstruction at 16 and 32 threads each way.
say "QUIVER_GPU_WAIT=block and =yield: the reconstruction on 16 and 32 threads"
for wait in block yield; do
    QUIVER_GPU_WAIT=$wait "$BIN" bench --cycle "$WORK/gpu-reco.toml" --input "$DS" --events "$BENCH_EVENTS" --threads 16,32 --repeat 2 --csv "$WORK/gpu-reco-$wait-scan.csv" ${BATCH[@]+"${BATCH[@]}"} \
        || FAILED="${FAILED:+$FAILED; }the benchmark with QUIVER_GPU_WAIT=$wait failed"
done

say "summary"
mkdir -p docs/perf
CSV="docs/perf/gpu-check-$(date -u +%Y%m%d-%H%M).csv"
{
    echo "chain,threads,events,pileup,events_per_s"
    for kind in gpu cpu gpu-reco cpu-reco gpu-reco-steady-b16 gpu-reco-steady-b64 cpu-reco-steady-b16 gpu-streams gpu-reco-streams gpu-reco-block gpu-reco-yield; do
        [ -f "$WORK/$kind-scan.csv" ] || continue
        awk -F, -v k="$kind" -v p="$PILEUP" 'NR > 1 && !seen[$1]++ {print k "," $1 "," $3 "," p "," $5}' "$WORK/$kind-scan.csv"
    done
} > "$CSV"
cat "$CSV"
best_gpu="$(awk -F, '$1 == "gpu" {if ($5 > b) b = $5} END {print b + 0}' "$CSV")"
cpu_all="$(awk -F, '$1 == "cpu" {print $5}' "$CSV" | tail -1)"
echo "GPU chain, best: $best_gpu events/s; CPU chain on $NCPU cores: $cpu_all events/s; ratio $(awk -v a="$best_gpu" -v b="$cpu_all" 'BEGIN{if (b > 0) printf "%.2f", a / b; else print "n/a"}')"
reco_gpu="$(awk -F, '$1 == "gpu-reco" {print $5}' "$CSV" | tail -1)"
reco_cpu="$(awk -F, '$1 == "cpu-reco" {print $5}' "$CSV" | tail -1)"
echo "reconstruction alone (no histograms): GPU chain $reco_gpu events/s; CPU chain $reco_cpu events/s; ratio $(awk -v a="$reco_gpu" -v b="$reco_cpu" 'BEGIN{if (b > 0) printf "%.2f", a / b; else print "n/a"}')"
steady_cpu="$(awk -F, '$1 == "cpu-reco-steady-b16" {print $5}' "$CSV" | tail -1)"
for b in 16 64; do
    g="$(awk -F, -v k="gpu-reco-steady-b$b" '$1 == k {print $5}' "$CSV" | tail -1)"
    echo "steady state, reconstruction alone, GPU batches of $b on $NT threads: $g events/s; CPU chain (batches of 16, $NCPU cores): $steady_cpu events/s; ratio $(awk -v a="$g" -v b="$steady_cpu" 'BEGIN{if (b > 0) printf "%.2f", a / b; else print "n/a"}')"
done
echo "with QUIVER_GPU_SYNC=streams on ${SCAN##*,} threads: GPU chain $(awk -F, '$1 == "gpu-streams" {print $5}' "$CSV") events/s, reconstruction alone $(awk -F, '$1 == "gpu-reco-streams" {print $5}' "$CSV") events/s"
for wait in block yield; do
    echo "with QUIVER_GPU_WAIT=$wait, reconstruction alone: $(awk -F, -v k="gpu-reco-$wait" '$1 == k {printf "%s threads %s events/s; ", $2, $5}' "$CSV")"
done
echo "targets (docs/gpu.md): >= 5000 events/s and >= 8x the CPU chain on all cores, transfer share <= 10 %, device memory <= 1 GiB per stream"
cat "$WORK/share.txt" 2>/dev/null || true
echo "GPU steps (transfers and kernel time, per step):"
grep -B1 -A5 '^gpu: [0-9]* batches' "$WORK/gpu.txt" | grep -E '^\[|^gpu:' || true
echo "residency (per product: where made, bus crossings, device peak):"
sed -n '/^product (residency)/,/^$/p' "$WORK/gpu.txt" || true
if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=memory.used,memory.total --format=csv,noheader || true
fi
echo "CSV: $CSV (commit it with the numbers in docs/performance.md)"
echo "total $(( $(date +%s) - t0 )) s"
if [ -n "$FAILED" ]; then
    echo "error: $FAILED" >&2
    exit 1
fi
