#!/usr/bin/env bash
# Re-checks Quiver's fidelity to the C++ reference (cms-patatrack/pixeltrack-standalone)
# from a checkout you provide; nothing of the reference is downloaded or kept here.
#
#   scripts/refcheck.sh --reference DIR [--serial PATH/TO/serial]
#   scripts/refcheck.sh --reference-cuda DIR   (the cuda program, packed for the device)
#
# DIR is a pixeltrack-standalone checkout (its src/serial is read). The checks:
#   1. fits     — our harness scripts/refcheck/refit.cc, compiled against the reference's
#                 BrokenLine.h / RiemannFit.h with Eigen 3.4, runs the reference's fits on
#                 600 generated tracks; reco's ignored test `reference_fit_cross_check`
#                 compares every output (Broken Line ≤ 1e-12 relative, Riemann ≤ 1e-5).
#   2. CA       — every tuple, its hits, its quality and its fitted parameters against the
#                 reference's serial CA, fit and classification on synthetic events
#                 (`reference_ca_cross_check`, harness scripts/refcheck/cah.cc).
#   3. vertices — clustering (density, DBSCAN, iterative), fits, split and sort against the
#                 reference's vertex finder on 123 generated events
#                 (`vertices::tests::matches_reference_harness`, harness
#                 scripts/refcheck/vertices.cc).
#   4. counts and histograms — scripts/bench-reference.py --checks-only with the reference's
#                 `serial` program (--serial, or DIR/serial): its CountValidator on our
#                 per-event counts and its --histogram file against ours, byte for byte.
# Every check that cannot run (a harness not written yet, no Eigen, no serial program) is a
# failure, named at the end: the script passes only when all four ran and passed.
# Environment: EIGEN_INCLUDE (default /usr/include/eigen3; Debian: apt-get install
# libeigen3-dev), CXX (default g++), CARGO_TARGET_DIR.
set -uo pipefail
cd "$(dirname "$0")/.."
REF="" SERIAL="" REF_CUDA=""
while [ $# -gt 0 ]; do
    case "$1" in
        --reference) REF="${2:-}"; shift 2 ;;
        --serial) SERIAL="${2:-}"; shift 2 ;;
        --reference-cuda) REF_CUDA="${2:-}"; shift 2 ;;
        -h|--help) sed -n '2,30p' "$0"; exit 0 ;;
        *) echo "refcheck: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done
# --reference-cuda DIR: the reference's cuda program (built in DIR) packed for the device and
# run there beside Quiver (docs/gpu.md); without a GPU this stops, with a clear error, after
# the pack is made and checked.
if [ -n "$REF_CUDA" ]; then
    scripts/pack-reference-cuda.sh --reference-cuda "$REF_CUDA" --quiver "${QUIVER_BIN:-target/release/quiver}" || exit 1
    exec scripts/gpu-reference.sh
fi
if [ -z "$REF" ] || [ ! -d "$REF/src/serial/plugin-PixelTriplets" ]; then
    echo "refcheck: --reference must name a pixeltrack-standalone checkout (no $REF/src/serial/plugin-PixelTriplets)" >&2
    exit 2
fi
REF="$(cd "$REF" && pwd)"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/quiver-target}"
EIGEN="${EIGEN_INCLUDE:-/usr/include/eigen3}"
CXX="${CXX:-g++}"
BUILD="$(mktemp -d)"
trap 'rm -rf "$BUILD"' EXIT
declare -a PASSED=() FAILED=()
pass() { PASSED+=("$1"); echo "refcheck: $1: passed"; }
fail() { FAILED+=("$1: $2"); echo "refcheck: $1: FAILED — $2" >&2; }

# The reference's sources compiled with the code-generation flags of its Makefile
# (HOST_CXXFLAGS: -O2 -fno-math-errno -ftree-vectorize -msse3, C++20), plus -DNDEBUG: its
# serial CA asserts a path of at most 4 cells where the CUDA build (and Quiver) keeps 6-hit
# tuples; without the assert the two can be compared on crowded synthetic events.
PT="$REF/src/serial/plugin-PixelTriplets"
compile() {
    "$CXX" -std=c++20 -O2 -fno-math-errno -ftree-vectorize -msse3 --param vect-max-version-for-alias-checks=50 -DNDEBUG \
        -I"$REF/src/serial" -I"$PT" -I"$REF/src/serial/plugin-PixelVertexFinding" -I"$EIGEN" "$@"
}

# One harness check: builds the harness from its sources and runs reco's ignored test
# with the environment variable naming the program.
#   harness_check NAME VARIABLE TEST SOURCE...
harness_check() {
    local name="$1" var="$2" test="$3"
    shift 3
    if [ ! -f "$EIGEN/Eigen/Core" ]; then
        fail "$name" "Eigen not found in $EIGEN (set EIGEN_INCLUDE)"
    elif ! compile "$@" -o "$BUILD/$name"; then
        fail "$name" "$1 did not compile against $REF"
    elif env "$var=$BUILD/$name" cargo test --release -p quiver-reco --lib "$test" -- --ignored --nocapture; then
        pass "$name"
    else
        fail "$name" "$test failed"
    fi
}

echo "== 1. fits"
harness_check fits QUIVER_REF_FIT reference_fit_cross_check scripts/refcheck/refit.cc

echo "== 2. CA tuples and quality"
harness_check CA QUIVER_REF_CA reference_ca_cross_check scripts/refcheck/cah.cc "$PT/CAHitNtupletGeneratorKernels.cc" \
    "$PT/CAHitNtupletGeneratorKernelsAlloc.cc" "$PT/HelixFitOnGPU.cc" "$PT/BrokenLineFitOnGPU.cc" "$PT/RiemannFitOnGPU.cc"

echo "== 3. vertices"
harness_check vertices QUIVER_VERTEX_REF_HARNESS matches_reference_harness scripts/refcheck/vertices.cc

echo "== 4. counts and histograms"
[ -z "$SERIAL" ] && [ -x "$REF/serial" ] && SERIAL="$REF/serial"
if [ -z "$SERIAL" ] || [ ! -x "$SERIAL" ]; then
    fail counts "no reference serial program (build it in the checkout with 'make serial', or pass --serial)"
elif ! cargo build --release --bin quiver; then
    fail counts "the quiver release binary did not build"
elif python3 scripts/bench-reference.py --serial "$SERIAL" --checks-only; then
    pass counts
else
    fail counts "the reference's CountValidator or its histograms disagree with ours"
fi

echo
echo "refcheck: ${#PASSED[@]} passed${PASSED[*]:+ (${PASSED[*]})}, ${#FAILED[@]} failed"
for f in "${FAILED[@]}"; do echo "  - $f"; done
[ ${#FAILED[@]} -eq 0 ]
