#!/usr/bin/env bash
# Runs every test of Quiver: the Rust workspace (unit, integration, doc tests) and the
# Python tests (outputs read with pyarrow and Polars). Works on a fresh machine: it makes
# the virtual environment .venv and installs the Python test dependencies into it.
set -euo pipefail
cd "$(dirname "$0")/.."
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"

if [ ! -x .venv/bin/python ]; then
    python3 -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -r tests/python/requirements.txt

cargo test --workspace --all-targets
cargo test --workspace --doc

QUIVER_BIN="$CARGO_TARGET_DIR/debug/quiver" .venv/bin/python -m pytest -q tests/python
