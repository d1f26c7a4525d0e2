#!/usr/bin/env bash
# On the GPU machine, from the folder scripts/pack-reference-cuda.sh made (.devbin/ref-cuda)
# and the Quiver binary packed beside it (.devbin/quiver): the reference's `cuda` program
# validates Quiver's per-event counts on the packed events (it must pass), then both programs
# are timed on the same events and the same GPU; writes docs/perf/reference-cuda-DATE.csv.
# Everything that needs no GPU is checked first; without a GPU it stops there with an error.
# Environment:
#   REF_CUDA_PACK     the pack's parent folder (default .devbin)
#   REF_CUDA_EVENTS   events per timed run (default 2400; both programs replay the packed events)
#   REF_CUDA_CONFIGS  the reference's THREADS:STREAMS scanned (default "8:8 16:16 16:24 24:24 32:32")
#   QUIVER_THREADS    Quiver's thread counts (default 16,32), QUIVER_BATCH its batch (default 16)
set -euo pipefail
cd "$(dirname "$0")/.."
die() { echo "gpu-reference: $*" >&2; exit 1; }
PACKDIR="${REF_CUDA_PACK:-.devbin}"
PACK="$PACKDIR/ref-cuda" BIN="$PACKDIR/quiver"
[ -f "$PACK/MANIFEST" ] && [ -f "$PACK/INFO" ] \
    || die "$PACK/MANIFEST or INFO is missing: run scripts/pack-reference-cuda.sh and carry $PACK and $BIN"
(cd "$PACKDIR" && sha256sum --quiet --strict -c ref-cuda/MANIFEST > /dev/null 2>&1) \
    || die "$PACK does not match its MANIFEST (a file changed or did not travel): pack it again"
[ -x "$BIN" ] || die "$BIN is not an executable"
EVENTS="$(awk '$1 == "events" {print $2}' "$PACK/INFO")"
LIBDIR="$(awk '$1 == "libdir" {print $2}' "$PACK/INFO")"
[[ "$EVENTS" =~ ^[1-9][0-9]*$ ]] && [[ "$LIBDIR" == /* ]] || die "$PACK/INFO is malformed"
N="${REF_CUDA_EVENTS:-2400}"
[[ "$N" =~ ^[1-9][0-9]*$ ]] || die "REF_CUDA_EVENTS: '$N' is not a positive whole number"
CONFIGS="${REF_CUDA_CONFIGS:-8:8 16:16 16:24 24:24 32:32}"
for c in $CONFIGS; do [[ "$c" =~ ^[1-9][0-9]*:[1-9][0-9]*$ ]] || die "REF_CUDA_CONFIGS: '$c' is not THREADS:STREAMS"; done
export LD_LIBRARY_PATH="$PWD/$PACK/lib:$PWD/$PACK/lib/cuda:${LD_LIBRARY_PATH:-}"
missing="$(ldd "$PACK/cuda" "$PACK"/lib/cuda/*.so 2>&1 | awk '/=> not found/ {print $1}' | sort -u | paste -sd' ')"
[ -z "$missing" ] || die "the packed program needs $missing, which is not in the pack"

command -v nvidia-smi > /dev/null && nvidia-smi -L > /dev/null 2>&1 \
    || die "no NVIDIA GPU here (nvidia-smi finds none): the pack is whole and its libraries resolve; run this on the GPU machine"
nvidia-smi -L

# The plugins are loaded from the folder compiled into the program: point it at the pack's.
if [ -d "$LIBDIR" ] && [ ! -L "$LIBDIR" ]; then
    cmp -s "$LIBDIR/plugins.txt" "$PACK/lib/cuda/plugins.txt" \
        || die "$LIBDIR exists and is not this pack's plugin folder; move it away"
else
    mkdir -p "$(dirname "$LIBDIR")" && ln -sfn "$PWD/$PACK/lib/cuda" "$LIBDIR" \
        || die "cannot link $LIBDIR to the pack's plugins"
fi
. scripts/gpu-nvrtc.sh

echo "== the reference's --validation on Quiver's counts ($EVENTS events)"
log="$(mktemp)"
trap 'rm -f "$log"; rm -rf "${WORK:-}"' EXIT
"$PACK/cuda" --data "$PACK/data" --numberOfThreads 1 --numberOfStreams 1 --validation > "$log" 2>&1 \
    || { tail -n 20 "$log"; die "the reference's --validation run failed"; }
grep -E '^CountValidator' "$log" || true
grep -q "^CountValidator: all $EVENTS events passed validation" "$log" \
    || { tail -n 40 "$log"; die "the reference's validation did not pass on Quiver's counts"; }

echo "== timing on $N events: the reference (threads:streams $CONFIGS), then Quiver's GPU reconstruction"
mkdir -p docs/perf
CSV="docs/perf/reference-cuda-$(date -u +%Y%m%d).csv"
echo "program,threads,streams,batch_size,events,wall_s,events_per_s" > "$CSV"
for c in $CONFIGS; do
    t="${c%:*}" s="${c#*:}"
    "$PACK/cuda" --data "$PACK/data" --numberOfThreads "$t" --numberOfStreams "$s" \
        --warmupEvents 200 --maxEvents "$N" > "$log" 2>&1 || { tail -n 20 "$log"; die "the reference failed at $c"; }
    # "Processed N events in T seconds, throughput R events/s" (its event loop, warm-up excluded)
    line="$(grep '^Processed ' "$log")" || { tail -n 20 "$log"; die "the reference printed no throughput at $c"; }
    awk -v t="$t" -v s="$s" '{printf "reference-cuda,%d,%d,,%d,%.4f,%.1f\n", t, s, $2, $5, $8}' <<< "$line" | tee -a "$CSV"
done
WORK="$(mktemp -d)"
scripts/gpu-plans.sh "$BIN" "$WORK" > /dev/null
"$BIN" bench "$WORK/gpu-reco.toml" --cycle --input "$PACK/dataset" --events "$N" \
    --threads "${QUIVER_THREADS:-16,32}" --batch-size "${QUIVER_BATCH:-16}" --repeat 2 --csv "$WORK/quiver.csv" \
    || die "quiver bench of the GPU reconstruction failed"
# One row per run (its CSV repeats the run's columns on each step's row).
awk -F, 'NR > 1 && !seen[$1 FS $2 FS $4]++ {printf "quiver,%s,%s,%s,%s,%s,%s\n", $1, $1, $2, $3, $4, $5}' \
    "$WORK/quiver.csv" | tee -a "$CSV"
awk -F, 'NR > 1 && $7 > best[$1] {best[$1] = $7; at[$1] = $2 ":" $3}
    END {printf "best: reference-cuda %.1f events/s (%s), quiver %.1f events/s (%s threads:streams), quiver/reference %.3f\n",
        best["reference-cuda"], at["reference-cuda"], best["quiver"], at["quiver"], best["quiver"] / best["reference-cuda"]}' "$CSV"
echo "wrote $CSV"
# The device tool brings back only what is under its $OUT.
if [ -n "${OUT:-}" ] && [ -d "$OUT" ]; then cp "$CSV" "$OUT/"; fi
