#!/usr/bin/env bash
# The throughput benchmark of docs/performance.md: one release build, one dataset
# (100 events at <PU> 50, seed 1), the local reconstruction and the whole chain at 1 and 2
# threads, measured side by side in one invocation each (CSV next to the tables).
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
cargo build --release --quiet
Q="$CARGO_TARGET_DIR/release/quiver"
DS="${BENCH_DATASET:-$HOME/.cache/quiver/datasets/bench-pu50}"
[ -f "$DS/manifest.toml" ] || "$Q" generate --events 100 --pileup 50 --seed 1 --output "$DS"
OUT="${BENCH_OUT:-bench-results}"
mkdir -p "$OUT"
echo "== local reconstruction (plans/examples/local.toml)"
"$Q" bench plans/examples/local.toml --input "$DS" --threads 1,2 --repeat 3 --csv "$OUT/local.csv"
echo "== whole chain (plans/examples/chain.toml)"
"$Q" bench plans/examples/chain.toml --input "$DS" --threads 1,2 --repeat 3 --csv "$OUT/chain.csv"
