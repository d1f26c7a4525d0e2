#!/usr/bin/env bash
# Measures what the README's two set-up commands cost on a fresh machine: a clone of this
# repository in a temporary directory, with empty cargo and pip caches (crates and wheels are
# downloaded again), then the main job and the test command one after the other, as the
# README gives them. Prints the wall time of each and the disk they leave (the clone with its
# target/ and .venv/, the cargo home, the pip cache, the default dataset).
#
#   scripts/setup-cost.sh [WORKDIR]      (default: a new directory under /tmp)
#
# The machine should be otherwise idle; the numbers go to README.md ("Set up").
set -euo pipefail
src="$(cd "$(dirname "$0")/.." && pwd)"
work="${1:-$(mktemp -d /tmp/quiver-setup-XXXX)}"
mkdir -p "$work"
git clone --quiet "$src" "$work/quiver"
export CARGO_HOME="$work/cargo-home" PIP_CACHE_DIR="$work/pip-cache" QUIVER_DATA="$work/data"
# The toolchain itself stays where rustup put it; only the caches start empty.
export RUSTUP_HOME="${RUSTUP_HOME:-$HOME/.rustup}"
export PATH="$HOME/.cargo/bin:$PATH"
unset CARGO_TARGET_DIR
cd "$work/quiver"
t0=$(date +%s)
cargo run --release -- run > "$work/main-job.log" 2>&1
t1=$(date +%s)
./scripts/test.sh > "$work/tests.log" 2>&1
t2=$(date +%s)
du_of() { du -sm "$@" 2>/dev/null | awk '{s += $1} END {print s + 0}'; }
echo "main job (cargo run --release -- run): $((t1 - t0)) s"
echo "tests (./scripts/test.sh):             $((t2 - t1)) s"
echo "both:                                  $((t2 - t0)) s"
echo "disk: target $(du_of target) MiB, .venv $(du_of .venv) MiB, cargo home $(du_of "$CARGO_HOME") MiB," \
     "pip cache $(du_of "$PIP_CACHE_DIR") MiB, dataset $(du_of "$QUIVER_DATA") MiB," \
     "the main job's quiver-out $(du_of quiver-out) MiB; all $(du_of "$work") MiB"
