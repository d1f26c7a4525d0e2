#!/usr/bin/env bash
# Runs every test of Quiver: the Rust workspace (unit, integration and doc tests, the CUDA
# kernels compiled to PTX by NVRTC) and the Python tests (the `quiver` package built with
# maturin, outputs read with pyarrow and Polars). Works on a fresh machine: it makes the
# virtual environment .venv and installs everything the tests need into it.
set -euo pipefail
cd "$(dirname "$0")/.."
# One target directory for everything the README's commands build (`cargo run --release`
# uses ./target too): the release build of the extension shares what it can with the main
# job's. CI sets its own, outside the clone.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
# A fresh machine builds everything once: incremental compilation's caches (610 MB of the
# debug build) would only be kept, never used. Set CARGO_INCREMENTAL=1 when iterating.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt
# NVRTC (no GPU needed): the GPU crate's tests compile every CUDA kernel to PTX with it, and
# must fail rather than skip when it is missing.
.venv/bin/python -m pip install --quiet --disable-pip-version-check "nvidia-cuda-nvrtc==13.0.88"
export QUIVER_REQUIRE_NVRTC=1

cargo test --workspace --all-targets
cargo test --workspace --doc

# The Python package (py/, its own cargo workspace) into the virtual environment.
VIRTUAL_ENV="$PWD/.venv" .venv/bin/maturin develop --quiet -m py/Cargo.toml --release

QUIVER_BIN="$CARGO_TARGET_DIR/debug/quiver" .venv/bin/python -m pytest -q tests/python

# The wheel installs and runs in a clean environment with no Rust toolchain.
./scripts/check-wheel.sh .venv/bin/python
