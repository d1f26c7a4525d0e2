#!/usr/bin/env bash
# The benchmark plans of the GPU scripts (gpu-check.sh, gpu-ab.sh), from plans/pixel.toml
# and BINARY's step catalogue, written into DIR:
#   cpu.toml       the default chain without its output step
#   gpu.toml       the same with every step type that has a GPU implementation on the GPU
#   cpu-reco.toml, gpu-reco.toml   both without the validation histograms (the
#                  reconstruction alone: raw data to tracks and vertices)
# Prints the GPU step types, one line.
#   scripts/gpu-plans.sh BINARY DIR
set -euo pipefail
cd "$(dirname "$0")/.."
[ $# -eq 2 ] || { echo "usage: $0 BINARY DIR" >&2; exit 2; }
BIN="$1" DIR="$2"
GPU_TYPES="$("$BIN" steps | awk '/^[a-z_]+ +\[cpu, gpu\]/{print $1}' | paste -sd'|')"
[ -n "$GPU_TYPES" ] || { echo "error: $BIN lists no GPU step types (its registry must call quiver_gpu::register)" >&2; exit 1; }
awk 'BEGIN{RS=""; ORS="\n\n"} !/type = "write_parquet"/' plans/pixel.toml > "$DIR/cpu.toml"
awk -v re="^type = \"($GPU_TYPES)\"$" '{print} $0 ~ re {print "backend = \"gpu\""}' "$DIR/cpu.toml" > "$DIR/gpu.toml"
for kind in cpu gpu; do
    awk 'BEGIN{RS=""; ORS="\n\n"} !/type = "histograms"/' "$DIR/$kind.toml" > "$DIR/$kind-reco.toml"
done
echo "GPU step types: ${GPU_TYPES//|/, }"
