#!/usr/bin/env bash
# Packs the reference's `cuda` program (pixeltrack-standalone, built outside this repo) with the
# shared libraries it needs and one exported dataset into .devbin/ref-cuda/, for the device tool,
# whose carried paths must stay under 64 MiB in all. Needs no GPU.
# Usage: scripts/pack-reference-cuda.sh --reference-cuda DIR [--events N] [--input DATASET] [--quiver BIN]
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
die() { echo "pack-reference-cuda: $*" >&2; exit 1; }

ref="" events=100 input="" quiver="target/release/quiver"
while [ $# -gt 0 ]; do
  case "$1" in
    --reference-cuda) ref="${2:-}"; shift 2 ;;
    --events) events="${2:-}"; shift 2 ;;
    --input) input="${2:-}"; shift 2 ;;
    --quiver) quiver="${2:-}"; shift 2 ;;
    *) die "unknown argument '$1'" ;;
  esac
done
[ -n "$ref" ] || die "--reference-cuda DIR is required (the pixeltrack-standalone checkout where 'make cuda' ran)"
[ -x "$ref/cuda" ] || die "--reference-cuda: $ref/cuda is not an executable; build it first (docs/gpu.md)"
[ -d "$ref/lib/cuda" ] || die "--reference-cuda: $ref/lib/cuda (the program's plugin libraries) is missing"
[[ "$events" =~ ^[1-9][0-9]*$ ]] || die "--events: '$events' is not a positive whole number"
[ -x "$quiver" ] || die "--quiver: $quiver is not an executable (cargo build --release)"
# The same default dataset as scripts/bench-reference.py.
[ -n "$input" ] || input="${QUIVER_DATA:-$HOME/.cache/quiver/datasets}/default"
[ -e "$input" ] || die "--input: $input does not exist"

out=.devbin/ref-cuda
rm -rf "$out" && mkdir -p "$out/lib" "$out/data"
cp "$ref/cuda" "$out/cuda"
for so in "$ref"/lib/cuda/*.so; do cp "$so" "$out/lib/"; done
# Every library the program and its plugins load, except the driver (libcuda comes with the
# device's driver) and glibc's own, which the device has.
export LD_LIBRARY_PATH="$ref/lib/cuda:$ref/external/tbb/lib:${LD_LIBRARY_PATH:-}"
for bin in "$out/cuda" "$out"/lib/*.so; do
  ldd "$bin" | awk '/=>/ {print $1, $3}' | while read -r name path; do
    case "$name" in
      libcuda.so*|libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|ld-linux*|libgcc_s.so*|libstdc++.so*) ;;
      *) [ "$path" != "not" ] || die "$bin needs $name, which ldd cannot find"
         [ -e "$out/lib/$name" ] || cp -L "$path" "$out/lib/$name" ;;
    esac
  done
done
strip --strip-unneeded "$out/cuda" "$out"/lib/*.so* 2>/dev/null || true

# One exported dataset and our per-event counts as the reference's validation files.
"$quiver" export pixeltrack --input "$input" --output "$out/data"
plan=$(mktemp) counts=$(mktemp -d)
trap 'rm -rf "$plan" "$counts"' EXIT
{ cat plans/examples/chain.toml
  printf '\n[[step]]\nlabel = "counts"\ntype = "event_counts"\nreference_files = true\n'; } > "$plan"
"$quiver" run "$plan" --input "$input" --events "$events" --output "$counts/run" --no-progress
find "$counts/run" -maxdepth 1 -type f ! -name quiver-run.toml -exec cp {} "$out/data/" \;

(cd "$out" && find . -type f ! -name MANIFEST -print0 | sort -z | xargs -0 sha256sum) > "$out/MANIFEST"
total=$(du -sb "$out" | cut -f1)
echo "events $events, total bytes $total" >> "$out/MANIFEST"
limit=$((64 * 1024 * 1024))
[ "$total" -lt "$limit" ] || die "$out is $total bytes, over the device tool's 64 MiB carry limit (with .devbin/quiver too); use fewer --events"
echo "packed $out: $total bytes; carry [\".devbin/ref-cuda\", \".devbin/quiver\"]"
