#!/usr/bin/env bash
# The buffer pool's, the executor's and the residency tests under AddressSanitizer (nightly):
# every pooled block, product and device-copy hand-over of quiver-columnar checked for
# use-after-free, overflows and leaks of the instrumented code. Not part of CI (a separate
# nightly build of arrow takes ~10 minutes on 2 cores); the result is in docs/reliability.md.
# Usage: scripts/asan.sh [extra cargo test args]
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-asan-target}"
export RUSTFLAGS="-Zsanitizer=address ${RUSTFLAGS:-}"
export RUSTDOCFLAGS="-Zsanitizer=address"
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:detect_stack_use_after_return=1}"
# --target keeps build scripts and proc macros uninstrumented (they cannot link ASan).
cargo +nightly test --target x86_64-unknown-linux-gnu -p quiver-columnar --lib --tests "$@"
