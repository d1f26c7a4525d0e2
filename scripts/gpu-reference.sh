#!/usr/bin/env bash
# On the device, from the folder scripts/pack-reference-cuda.sh made (.devbin/ref-cuda) and a
# stripped Quiver binary (.devbin/quiver): the reference's `cuda` program validates Quiver's
# per-event counts on the packed events (must pass), then both programs are timed on the same
# events and the same GPU; writes docs/perf/reference-cuda-<date>.csv.
# Environment: REF_CUDA_THREADS (scanned, default 8,16,32; streams = threads),
# REF_CUDA_EVENTS (timed events, default 1000, the reference repeats its events).
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "gpu-reference: $*" >&2; exit 1; }
PACK=.devbin/ref-cuda BIN="${QUIVER_BIN:-.devbin/quiver}"
[ -f "$PACK/MANIFEST" ] || die "$PACK/MANIFEST is missing: run scripts/pack-reference-cuda.sh here and carry $PACK"
[ -x "$BIN" ] || die "$BIN is not an executable: carry a stripped release binary as .devbin/quiver"
# Everything needs no GPU up to here: the pack must be whole.
(cd "$PACK" && grep -v '^events ' MANIFEST | sha256sum --quiet -c -) || die "$PACK does not match its MANIFEST"
command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 \
    || die "no NVIDIA GPU here (nvidia-smi finds none): the pack is whole; run this on the device"
export LD_LIBRARY_PATH="$PWD/$PACK/lib:${LD_LIBRARY_PATH:-}"
EVENTS="$(awk '/^events /{print $2}' "$PACK/MANIFEST")"

echo "== the reference's --validation on Quiver's counts ($EVENTS events)"
out="$("$PACK/cuda" --data "$PACK/data" --numberOfThreads 1 --numberOfStreams 1 --maxEvents "$EVENTS" --validation 2>&1)" || true
echo "$out" | tail -5
echo "$out" | grep -q "passed validation" || die "the reference's validation did not pass"

echo "== timing: the reference (threads = streams scanned), then Quiver's GPU reconstruction"
N="${REF_CUDA_EVENTS:-1000}" CSV="docs/perf/reference-cuda-$(date -u +%Y%m%d).csv"
echo "program,threads,streams,events,wall_s,events_per_s" > "$CSV"
for t in ${REF_CUDA_THREADS:-8 16 32}; do
    s=$(date +%s.%N)
    "$PACK/cuda" --data "$PACK/data" --numberOfThreads "$t" --numberOfStreams "$t" --maxEvents "$N" > /dev/null
    e=$(date +%s.%N)
    awk -v t="$t" -v n="$N" -v s="$s" -v e="$e" 'BEGIN {printf "reference-cuda,%d,%d,%d,%.3f,%.1f\n", t, t, n, e - s, n / (e - s)}' | tee -a "$CSV"
done
WORK="$(mktemp -d)"; trap 'rm -rf "$WORK"' EXIT
scripts/gpu-plans.sh "$BIN" "$WORK"
"$BIN" bench --cycle "$WORK/gpu-reco.toml" --input "${QUIVER_INPUT:?set QUIVER_INPUT to the dataset the pack was exported from}" \
    --events "$N" --threads "${REF_CUDA_THREADS:-8,16,32}" --repeat 2 --csv "$WORK/quiver.csv"
sed 's/^/quiver,/' "$WORK/quiver.csv" >> "$CSV"
echo "wrote $CSV"
