#!/usr/bin/env bash
# Coverage-guided fuzzing of Quiver's input readers with libFuzzer (cargo-fuzz, nightly):
#   fed_decoder       raw_to_digis on arbitrary FED buffers
#   dataset_ipc       the dataset reader's Arrow IPC decoding (every .arrow file of a dataset)
#   dataset_manifest  manifest.toml
#   plan              plan TOML parsed and validated against the full step registry
# Usage: scripts/fuzz.sh [SECONDS per target, default 60] [TARGET ...]
# Seeds: fuzz/seeds/TARGET (committed); the growing corpus: fuzz/corpus/TARGET (not
# committed). A crash stops its target and leaves the input in fuzz/artifacts/TARGET: turn
# it into a regression test of the normal suite, then fix it. Not part of CI.
set -euo pipefail
cd "$(dirname "$0")/.."
SECS="${1:-60}"
shift || true
TARGETS=("$@")
if [ ${#TARGETS[@]} -eq 0 ]; then TARGETS=(fed_decoder dataset_ipc dataset_manifest plan); fi
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-fuzz-target}"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz
cargo +nightly fuzz build -O "${TARGETS[@]:0:1}" >/dev/null 2>&1 || true   # warm the build quietly
status=0
for t in "${TARGETS[@]}"; do
    mkdir -p "fuzz/corpus/$t"
    echo "== $t ($SECS s)"
    if ! cargo +nightly fuzz run -O "$t" "fuzz/corpus/$t" "fuzz/seeds/$t" -- \
        -max_total_time="$SECS" -print_final_stats=1 -rss_limit_mb=4096 2> "fuzz/$t.log"; then
        status=1
        echo "CRASH in $t: see fuzz/$t.log and fuzz/artifacts/$t"
    fi
    grep -E '^stat::number_of_executed_units|^stat::peak_rss_mb|^#[0-9]+ +DONE' "fuzz/$t.log" || tail -3 "fuzz/$t.log"
done
exit $status
