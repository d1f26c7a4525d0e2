#!/usr/bin/env bash
# Runs every test of Quiver: the Rust workspace (unit, integration and doc tests, the CUDA
# kernels compiled to PTX by NVRTC) and the Python tests (the `quiver` package built with
# maturin, outputs read with pyarrow and Polars). Works on a fresh machine: it makes the
# virtual environment .venv and installs everything the tests need into it.
set -euo pipefail
cd "$(dirname "$0")/.."
# One target directory and one profile for everything the README's commands build: the
# main job (`cargo run --release`), these tests and the Python extension share one compiled
# dependency graph (workspace-hack/Cargo.toml; scripts/check-features.py guards it), so a
# fresh machine compiles arrow, parquet and Quiver once, not three times
# (docs/decisions/0009-one-build.md). CI sets its own target
# directory, outside the clone.
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}"
# A fresh machine builds everything once: incremental compilation's caches would only be
# kept, never used (the release profile has it off already; this keeps it off for a
# CARGO_PROFILE_* override too). Set CARGO_INCREMENTAL=1 when iterating.
export CARGO_INCREMENTAL="${CARGO_INCREMENTAL:-0}"

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
# --no-compile: Python caches the bytecode of what the tests import when they import it,
# instead of pip compiling every module of every package up front (115 MB, and time).
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile -r tests/python/requirements.txt
# NVRTC (no GPU needed): the GPU crate's tests compile every CUDA kernel to PTX with it, and
# must fail rather than skip when it is missing.
.venv/bin/python -m pip install --quiet --disable-pip-version-check --no-compile "nvidia-cuda-nvrtc==13.0.88"
export QUIVER_REQUIRE_NVRTC=1
# The GPU kernels' emulation tests compile them as C++ for the host: without a compiler
# they must fail, not pass having checked nothing.
export QUIVER_REQUIRE_CXX=1

# Formatting and lints first: they take a minute, and a reviewer would ask for them anyway.
# Clippy builds its own (check-only) artifacts; they live in a temporary target directory
# so that they cost no disk after the run.
cargo fmt --all --check
(cd fuzz && cargo fmt --check)
lint_target="$(mktemp -d)"
trap 'rm -rf "$lint_target"' EXIT
CARGO_TARGET_DIR="$lint_target" cargo clippy --release --workspace --all-targets -- -D warnings
rm -rf "$lint_target"
.venv/bin/ruff check --config py/pyproject.toml py/python tests/python
.venv/bin/ruff format --check --config py/pyproject.toml py/python tests/python

# quiver-py, the extension module, is built by maturin below and tested from Python.
cargo test --release --workspace --exclude quiver-py --all-targets
cargo test --release --workspace --exclude quiver-py --doc

# The Python package (py/) into the virtual environment.
VIRTUAL_ENV="$PWD/.venv" .venv/bin/maturin develop --quiet -m py/Cargo.toml --release
python3 scripts/check-features.py

QUIVER_BIN="$CARGO_TARGET_DIR/release/quiver" .venv/bin/python -m pytest -q tests/python

# The example notebook, run exactly as docs/python.md tells a user (`jupyter execute`), in a
# temporary directory of its own that must be empty afterwards (rmdir fails otherwise).
nb_tmp="$(mktemp -d)"
TMPDIR="$nb_tmp" PATH="$PWD/.venv/bin:$PATH" jupyter execute docs/examples/analysis.ipynb
rmdir "$nb_tmp"

# The wheel installs and runs in a clean environment with no Rust toolchain.
./scripts/check-wheel.sh .venv/bin/python
