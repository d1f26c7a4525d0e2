#!/usr/bin/env python3
"""One compiled dependency graph for the README's two commands: fails when it drifts apart.

Cargo compiles a crate again for every distinct feature set, and a changed crate changes the
hash of everything above it. Each build unifies features over the packages it selects: the
main job (`cargo run --release`: the `quiver` package), the tests (`cargo test --release
--workspace --exclude quiver-py`, with dev-dependencies) and the Python extension (maturin:
`quiver-py`) share one compiled graph only while every crate they have in common gets the
same features; `workspace-hack/Cargo.toml` asks for the union up front. This script compares
the three with `cargo tree` (offline, locked: nothing is resolved or downloaded) and names
each crate whose features differ, for workspace-hack/Cargo.toml.

    python3 scripts/check-features.py        (run by scripts/test.sh after the builds)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def graph(edges: str, select: list[str]) -> dict[str, str]:
    """name version -> features of every crate `cargo tree` lists for the host, for one selection."""
    cmd = ["cargo", "tree", "--offline", "--locked", "--manifest-path", str(ROOT / "Cargo.toml"), "-e", edges,
           "--prefix", "none", "-f", "{p}|{f}"] + select
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"check-features: `{' '.join(cmd)}` failed:\n{p.stderr[-2000:]}")
    out: dict[str, str] = {}
    for line in p.stdout.splitlines():
        if "|" not in line:
            continue
        pkg, feats = line.split("|", 1)
        # `(*)` marks a crate listed before (its subtree left out), not another feature set.
        out[" ".join(pkg.split()[:2])] = feats.replace("(*)", "").strip()
    if not out:
        sys.exit(f"check-features: `{' '.join(cmd)}` listed no crate")
    return out


def main() -> None:
    main_job = graph("normal,build", ["-p", "quiver"])
    others = {
        "the tests": graph("normal,build,dev", ["--workspace", "--exclude", "quiver-py"]),
        "the extension": graph("normal,build", ["-p", "quiver-py"]),
    }
    bad = []
    for what, g in others.items():
        for name in sorted(set(main_job) & set(g)):
            if main_job[name] != g[name]:
                bad.append(f"  {name}: main job [{main_job[name]}], {what} [{g[name]}]")
    if bad:
        sys.exit("check-features: these crates would be compiled twice; add the missing features to\n"
                 "workspace-hack/Cargo.toml:\n" + "\n".join(bad))
    print(f"check-features: the main job, the tests and the extension share all {len(main_job)} crates of the main job")


if __name__ == "__main__":
    main()
