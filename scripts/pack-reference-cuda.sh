#!/usr/bin/env bash
# Packs the reference's `cuda` program (pixeltrack-standalone, built outside this repo, see
# docs/gpu.md) with the shared libraries it needs, one small dataset in both programs'
# formats and a stripped Quiver binary into OUT (default .devbin): OUT/ref-cuda/ and
# OUT/quiver, the two paths the device tool carries (64 MiB in all). Needs no GPU.
# Usage: scripts/pack-reference-cuda.sh --reference-cuda DIR [--events N] [--input DATASET]
#            [--quiver BIN] [--output OUT]
#   --events N       events of the generated dataset (default 40; seed 1, pile-up 50)
#   --input DATASET  pack this Quiver dataset (all its events) instead of generating one
set -euo pipefail
shopt -s nullglob
cd "$(dirname "$0")/.."
die() { echo "pack-reference-cuda: $*" >&2; exit 1; }

ref="" events=40 input="" quiver="${QUIVER_BIN:-target/release/quiver}" outdir=.devbin
while [ $# -gt 0 ]; do
    case "$1" in
        --reference-cuda) ref="${2:-}"; shift 2 ;;
        --events) events="${2:-}"; shift 2 ;;
        --input) input="${2:-}"; shift 2 ;;
        --quiver) quiver="${2:-}"; shift 2 ;;
        --output) outdir="${2:-}"; shift 2 ;;
        *) die "unknown argument '$1'" ;;
    esac
done
[ -n "$ref" ] || die "--reference-cuda DIR is required (the pixeltrack-standalone checkout where 'make cuda' ran)"
[ -f "$ref/cuda" ] && [ -x "$ref/cuda" ] || die "--reference-cuda: $ref/cuda is not an executable; build it first (docs/gpu.md)"
[[ "$events" =~ ^[1-9][0-9]*$ ]] || die "--events: '$events' is not a positive whole number"
[ -x "$quiver" ] || die "--quiver: $quiver is not an executable (cargo build --release)"
[ -z "$input" ] || [ -f "$input/raw.arrow" ] || die "--input: $input is not a Quiver dataset (no raw.arrow)"
[ -n "$outdir" ] || die "--output: empty"

# The program loads its plugins from the folder compiled into it (make's LIB_DIR), the same
# on every machine: the device script links that path to the pack's copy.
libdir="$(strings -a "$ref/cuda" | sed -n 's#^\(/.*\)/plugins\.txt$#\1#p' | head -n 1)"
[ -n "$libdir" ] || die "$ref/cuda names no plugin folder ('LIB_DIR/plugins.txt'): is it pixeltrack-standalone's cuda program?"
[ -f "$libdir/plugins.txt" ] || die "$ref/cuda loads its plugins from $libdir, which has no plugins.txt: build it with this LIB_DIR (docs/gpu.md)"
plugins=("$libdir"/*.so)
[ ${#plugins[@]} -gt 0 ] || die "$libdir has no plugin libraries (*.so)"
# Device code: without it the program was built with no CUDA architecture.
fatbins=0
for so in "${plugins[@]}"; do
    if readelf -S "$so" 2> /dev/null | grep -q '\.nv_fatbin'; then fatbins=$((fatbins + 1)); fi
done
[ "$fatbins" -gt 0 ] || die "no library in $libdir holds device code (.nv_fatbin): build with CUDA_ARCH=90"

# Built in a staging folder and put in place only whole: a failed pack leaves the last one.
mkdir -p "$outdir"
pack="$outdir/.ref-cuda.partial" qpack="$outdir/.quiver.partial"
work="$(mktemp -d)"
trap 'rm -rf "$work" "$pack" "$qpack"' EXIT
rm -rf "$pack" "$qpack" && mkdir -p "$pack/lib/cuda" "$pack/data"
cp "$ref/cuda" "$pack/cuda"
cp "$libdir/plugins.txt" "${plugins[@]}" "$pack/lib/cuda/"
# Every library the program and its plugins load, except the driver's (libcuda comes with the
# device's driver and the runtime opens it itself) and glibc's, which the device has.
# libstdc++ and libgcc_s go in: the device's may be older than the compiler's here.
for bin in "$pack/cuda" "$pack"/lib/cuda/*.so; do
    deps="$(LD_LIBRARY_PATH="$libdir:${LD_LIBRARY_PATH:-}" ldd "$bin" 2>&1)" || die "ldd $bin failed: $deps"
    missing="$(echo "$deps" | awk '/=> not found/ {print $1}' | paste -sd' ')"
    [ -z "$missing" ] || die "$bin needs $missing, which the loader cannot find here (set LD_LIBRARY_PATH to its folder, for libcudart the CUDA runtime's lib64)"
    while read -r name path; do
        case "$name" in
            libcuda.so* | libc.so* | libm.so* | libdl.so* | librt.so* | libpthread.so* | ld-linux*) ;;
            *) [ -e "$pack/lib/cuda/$name" ] || [ -e "$pack/lib/$name" ] || cp -L "$path" "$pack/lib/$name" ;;
        esac
    done < <(echo "$deps" | awk '$2 == "=>" && $3 ~ /^\// {print $1, $3}')
done
strip --strip-unneeded "$pack/cuda" "$pack"/lib/*.so* "$pack"/lib/cuda/*.so
cp "$quiver" "$qpack" && strip --strip-unneeded "$qpack"

# The events: Quiver reads its dataset (the raw data and conditions only: the truth files stay
# behind), the reference the same events exported to its format.
if [ -z "$input" ]; then
    input="$work/generated"
    "$quiver" generate --events "$events" --seed 1 --output "$input" > /dev/null \
        || die "quiver generate --events $events failed"
fi
mkdir -p "$pack/dataset"
for f in manifest.toml raw.arrow faults.parquet conditions; do
    [ -e "$input/$f" ] || die "--input: $input has no $f"
    cp -r "$input/$f" "$pack/dataset/"
done
events="$(sed -n 's/^events = \([0-9]*\)$/\1/p' "$pack/dataset/manifest.toml" | head -n 1)"
[ -n "$events" ] || die "$input/manifest.toml has no 'events = N' line"
"$quiver" export pixeltrack --input "$pack/dataset" --output "$pack/data" > /dev/null \
    || die "quiver export pixeltrack --input $pack/dataset failed"
# Our per-event counts as the reference's validation files: it reads one record per event of
# raw.bin, so every event is counted.
{ cat plans/examples/chain.toml
  printf '\n[[step]]\nlabel = "counts"\ntype = "event_counts"\nreference_files = true\n'; } > "$work/plan.toml"
"$quiver" run "$work/plan.toml" --input "$pack/dataset" --output "$work/run" --no-progress > /dev/null \
    || die "the counts run (quiver run with event_counts) failed"
for f in digicluster.bin tracks.bin vertices.bin; do
    [ -f "$work/run/$f" ] || die "the counts run wrote no $f"
    cp "$work/run/$f" "$pack/data/"
done
size() { stat -c %s "$pack/data/$1"; }
[ "$(size digicluster.bin)" -eq $((12 * events)) ] && [ "$(size tracks.bin)" -eq $((4 * events)) ] \
    && [ "$(size vertices.bin)" -eq $((4 * events)) ] \
    || die "the count files do not hold $events events (digicluster.bin $(size digicluster.bin) bytes)"

cat > "$pack/INFO" << EOF
events $events
libdir $libdir
EOF
(cd "$pack" && find . -type f -print0 | sort -z | xargs -0 sha256sum | sed 's#  \./#  ref-cuda/#'
 cd .. && sha256sum "$(basename "$qpack")" | sed 's#  .*#  quiver#') > "$work/MANIFEST"
mv "$work/MANIFEST" "$pack/MANIFEST"
bytes() { du -sb "$@" | awk '{s += $1} END {print s}'; }
total=$(($(bytes "$pack") + $(stat -c %s "$qpack")))
limit=$((64 * 1024 * 1024))
echo "total $total bytes: program and libraries $(bytes "$pack/cuda" "$pack/lib"), reference data $(bytes "$pack/data"), Quiver dataset $(bytes "$pack/dataset"), quiver $(stat -c %s "$qpack")"
[ "$total" -lt "$limit" ] \
    || die "the pack is $total bytes with the quiver binary, over the device tool's 64 MiB ($limit bytes) carry limit; pack fewer --events (the last pack in $outdir is kept)"
rm -rf "$outdir/ref-cuda" "$outdir/quiver"
mv "$pack" "$outdir/ref-cuda" && mv "$qpack" "$outdir/quiver"
echo "packed $events events into $outdir/ref-cuda; carry [\"$outdir/ref-cuda\", \"$outdir/quiver\"]"
