#!/usr/bin/env bash
# The wheel as a user gets it: builds it with maturin, installs it into a new virtual
# environment, and runs the `quiver` command and the package with no Rust toolchain
# reachable (PATH holds only the environment and the system's directories). Fails loudly at
# the first step that does not work. Called by scripts/test.sh; CARGO_TARGET_DIR as there,
# so the build reuses the extension that `maturin develop` compiled.
#
#   scripts/check-wheel.sh [PYTHON]      (default: .venv/bin/python, which has maturin)
set -euo pipefail
cd "$(dirname "$0")/.."
py="${1:-.venv/bin/python}"
tmp="$(mktemp -d /tmp/quiver-wheel-XXXX)"
trap 'rm -rf "$tmp"' EXIT
"$(dirname "$py")/maturin" build --quiet --release -m py/Cargo.toml --out "$tmp/dist" >/dev/null
wheel=("$tmp"/dist/quiver-*.whl)
[ -f "${wheel[0]}" ] || { echo "check-wheel: maturin made no wheel" >&2; exit 1; }
# The docs' one supported range is py/pyproject.toml's requires-python; say which Python of
# it this check ran (CI runs its floor, 3.11) and refuse one outside it.
pyver="$("$py" - <<'PY'
import re, sys, tomllib
floor = tomllib.load(open("py/pyproject.toml", "rb"))["project"]["requires-python"]
want = tuple(int(x) for x in re.fullmatch(r">=(\d+)\.(\d+)", floor).groups())
if sys.version_info[:2] < want:
    sys.exit(f"check-wheel: requires-python is {floor}, but this is Python {sys.version.split()[0]}")
print(sys.version.split()[0])
PY
)"
"$py" -m venv "$tmp/venv"
"$tmp/venv/bin/python" -m pip install --quiet --disable-pip-version-check --no-compile "${wheel[0]}"
# No cargo or rustc on PATH, no cargo home, another working directory: only what the wheel
# installed can answer.
env -i HOME="$tmp" PATH="$tmp/venv/bin:/usr/local/bin:/usr/bin:/bin" LANG=C.UTF-8 QUIVER_DATA="$tmp/data" \
    bash -euo pipefail -c '
    cd "$1"
    if command -v cargo >/dev/null || command -v rustc >/dev/null; then
        echo "check-wheel: a Rust toolchain is reachable; the check would prove nothing" >&2; exit 1
    fi
    quiver --version
    quiver steps | grep -q "^ca_ntuplets"
    quiver generate --events 4 --pileup 10 --seed 3 --output ds > /dev/null
    quiver run --input ds --output out --no-progress > run.txt
    grep -q "quiver-run.toml" run.txt
    # A Python step and the package, from the installed wheel only.
    python - <<PY
import quiver, pyarrow as pa
res = quiver.Plan.from_toml("""
[[step]]
label = "numbers"
type = "random_floats"
count = 10
""").run(events=3, collect=["numbers"])
t = res.table("numbers")
assert isinstance(pa.table(t), pa.Table) and pa.table(t).num_rows == 30, t
assert quiver.query.verified("out")["events"] == 4
print("wheel ok:", quiver.__file__)
PY
    # A missing extra is one line naming the pip install to run.
    if quiver query out "SELECT 1" > q.txt 2>&1; then echo "check-wheel: query ran without datafusion" >&2; exit 1; fi
    grep -q "pip install" q.txt || { cat q.txt >&2; exit 1; }
' check-wheel "$tmp"
echo "check-wheel: $(basename "${wheel[0]}") installs and runs in a clean environment without Rust (Python $pyver)"
