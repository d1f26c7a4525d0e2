#!/usr/bin/env bash
# Two quiver builds side by side on a GPU machine, in one run: the default chain without
# its output step with every GPU step type on the device, benchmarked alternately with
# binary A and binary B on the same dataset (A, B, A, B), at the given thread counts.
# Prints each run's events/s and the B/A ratio per thread count, from the best of the
# runs of each (the machine is shared: alternating keeps drifts out of the ratio). Each
# benchmark discards a warm-up run; use a dataset of a few thousand events, so that 16
# workers run many batches each (400 events are 25 batches: the last round half empty).
#   scripts/gpu-ab.sh OLD_BINARY NEW_BINARY DATASET [THREADS (default 1,16)] [ROUNDS (default 2)]
# Environment: GPU_AB_EVENTS (default: all events of DATASET; more than it has replays it,
# with builds that know `bench --cycle`: give both builds a dataset that large, or two
# builds that both know it), GPU_AB_BATCH (default 16).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ $# -lt 3 ]; then
    echo "usage: $0 OLD_BINARY NEW_BINARY DATASET [THREADS] [ROUNDS]" >&2
    exit 2
fi
A="$1" B="$2" DS="$3" THREADS="${4:-1,16}" ROUNDS="${5:-2}"
for bin in "$A" "$B"; do
    [ -x "$bin" ] || { echo "error: $bin is not an executable quiver binary" >&2; exit 2; }
done
[ -d "$DS" ] || { echo "error: dataset $DS is not a directory" >&2; exit 2; }
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
EVENTS=()
[ -n "${GPU_AB_EVENTS:-}" ] && EVENTS=(--events "$GPU_AB_EVENTS")
# The GPU plan as scripts/gpu-check.sh builds it, from B's catalogue (A must know the same
# step types; a plan error says so).
scripts/gpu-plans.sh "$B" "$WORK" > /dev/null
for round in $(seq "$ROUNDS"); do
    for side in A B; do
        bin="$A"; [ "$side" = B ] && bin="$B"
        # --repeat 2: the first run of each thread count is a warm-up (kernels compiled, the
        # device pool and staging filled) and is not reported; with one run, the 16-thread
        # numbers measured mostly that set-up.
        # Builds that can replay the dataset do (more events than it has: GPU_AB_EVENTS).
        CYCLE=(); "$bin" bench --help | grep -q -- '--cycle' && CYCLE=(--cycle)
        "$bin" bench ${CYCLE[@]+"${CYCLE[@]}"} "$WORK/gpu.toml" --input "$DS" ${EVENTS[@]+"${EVENTS[@]}"} --threads "$THREADS" --repeat 2 \
            --batch-size "${GPU_AB_BATCH:-16}" --csv "$WORK/$side-$round.csv" > "$WORK/$side-$round.txt"
        awk -F, -v s="$side" -v r="$round" 'NR > 1 && !seen[$1]++ {printf "%s round %s: %s threads %.1f events/s\n", s, r, $1, $5}' "$WORK/$side-$round.csv"
    done
done
echo "B/A (best of $ROUNDS runs each):"
cat "$WORK"/A-*.csv | awk -F, 'NR > 1 && $1 ~ /^[0-9]+$/ {if ($5 > a[$1]) a[$1] = $5} END {for (t in a) print t, a[t]}' | sort -n > "$WORK/a.best"
cat "$WORK"/B-*.csv | awk -F, 'NR > 1 && $1 ~ /^[0-9]+$/ {if ($5 > b[$1]) b[$1] = $5} END {for (t in b) print t, b[t]}' | sort -n > "$WORK/b.best"
join "$WORK/a.best" "$WORK/b.best" | awk '{printf "  %s threads: A %.1f, B %.1f events/s, B/A %.2f\n", $1, $2, $3, $3 / $2}'
echo "ms/event per step (wall time of its calls summed over workers; least of the rounds):"
for side in A B; do
    cat "$WORK/$side"-*.csv | awk -F, -v s="$side" 'NR > 1 && $1 ~ /^[0-9]+$/ {k = $1 " " $6; if (!(k in m) || $8 < m[k]) m[k] = $8} END {for (k in m) print s, k, m[k]}'
done | awk '{v[$2 " " $3 " " $1] = $4; key[$2 " " $3] = 1} END {printf "%8s %-12s %9s %9s %6s\n", "threads", "step", "A", "B", "B/A"; for (k in key) {split(k, p, " "); a = v[k " A"]; b = v[k " B"]; printf "%8s %-12s %9.3f %9.3f %6.2f\n", p[1], p[2], a, b, (a > 0 ? b / a : 0)}}' | sort -k1,1n -k2,2
