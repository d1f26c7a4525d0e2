"""docs/analysis.md is executed: its `quiver …` shell lines (through the package's command
line, in-process) and its Python blocks, in order, in one namespace, from a scratch
directory; the Polars and SQL versions of each example must agree."""

import os
import pathlib
import re
import shlex

import pyarrow.parquet as pq
import pytest
import quiver.cli

ROOT = pathlib.Path(__file__).resolve().parents[2]


def blocks(text):
    """(language, code) of every fenced block, in order."""
    return re.findall(r"```(sh|python)\n(.*?)```", text, flags=re.S)


def test_analysis_guide_examples_run(tmp_path, capsys):
    (tmp_path / "plans").symlink_to(ROOT / "plans")
    found = blocks((ROOT / "docs/analysis.md").read_text())
    assert sum(lang == "python" for lang, _ in found) >= 5
    namespace = {"__name__": "quiver_analysis_docs"}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for i, (lang, code) in enumerate(found):
            if lang == "python":
                exec(compile(code, f"docs/analysis.md block {i + 1}", "exec"), namespace)
                continue
            for line in code.splitlines():
                if line.strip().startswith("quiver "):
                    args = shlex.split(line, comments=True)[1:]
                    assert quiver.cli.main(args) == 0, f"docs/analysis.md: `{line}` failed"
    finally:
        os.chdir(cwd)
    printed = capsys.readouterr().out
    ns = namespace

    # Each Polars example equals its SQL version.
    assert ns["per_vertex_pl"].equals(ns["per_vertex_sql"]), (
        ns["per_vertex_pl"],
        ns["per_vertex_sql"],
    )
    assert ns["per_vertex_pl"]["vertices"].sum() > 10
    assert ns["spectrum_pl"].equals(ns["spectrum_sql"]), (ns["spectrum_pl"], ns["spectrum_sql"])
    loose = pq.read_table(
        tmp_path / "analysis/run/tracks.tracks.parquet", filters=[("quality", ">=", 2)]
    )
    assert ns["spectrum_pl"]["tracks"].sum() == loose.num_rows > 0
    r_pl, r_sql = ns["residuals_pl"], ns["residuals_sql"]
    assert r_pl["layer"].to_list() == r_sql["layer"].to_list() == list(range(10))
    assert r_pl["hits"].to_list() == r_sql["hits"].to_list()
    assert r_pl["name"].to_list() == r_sql["name"].to_list()
    for col in ["mean_x", "rms_x", "mean_y", "rms_y"]:
        assert r_pl[col].to_list() == pytest.approx(r_sql[col].to_list(), rel=1e-9, abs=1e-9), col
    # Physics sanity, as in test_pixel_truth: the barrel's RMS at the CPE's resolution.
    barrel = r_pl.filter(ns["pl"].col("layer") < 4)
    n = barrel["hits"].cast(float)
    rms_x = ((n * barrel["rms_x"] ** 2).sum() / n.sum()) ** 0.5
    rms_y = ((n * barrel["rms_y"] ** 2).sum() / n.sum()) ** 0.5
    assert n.sum() > 10_000 and rms_x <= 25 and rms_y <= 40, barrel
    # The leading vertex holds tracks, and the shell examples printed and wrote.
    assert (ns["leading"]["n_tracks"] > 0).all() and ns["leading"].height == 10
    assert "BPix1" in printed and "loose" in printed
    assert (tmp_path / "analysis/leading.parquet").exists()
