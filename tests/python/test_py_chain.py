"""The Python ports of the package (quiver.pixel) in the example plans, over the default
dataset (100 events, <PU> 50): every port equals its Rust twin bit for bit
(plans/examples/compare-python.toml), and the chain with the ports
(plans/examples/python-chain.toml) gives the default chain's products."""

import re

import quiver
from conftest import ROOT


def test_compare_python_plan_finds_zero_differences(tmp_path):
    result = quiver.Plan.load(ROOT / "plans/examples/compare-python.toml").run(
        threads=2, batch_size=16, output=tmp_path, collect=[]
    )
    assert result.numbers["events"] == 100
    found = re.findall(r"compared (\S+) with (\S+): (\d+) rows, (\d+) differences", result.summary)
    assert len(found) == 9, result.summary
    for a, b, rows, diffs in found:
        assert int(rows) > 0 and int(diffs) == 0, f"{a} vs {b}: {rows} rows, {diffs} differences"


def test_python_chain_gives_the_default_chain_products(tmp_path):
    keep = [
        "hits:hits",
        "hits:hit_layers",
        "tracks:tracks",
        "vertices:vertices",
        "vertices:track_vertices",
        "chargecut:clustered_digis",
    ]
    rust = quiver.Plan.load(ROOT / "plans/pixel.toml").run(
        threads=2, output=tmp_path / "rust", collect=keep
    )
    py = quiver.Plan.load(ROOT / "plans/examples/python-chain.toml").run(
        threads=2, batch_size=7, output=tmp_path / "py", collect=keep
    )
    assert "python step hits (quiver.pixel:RecHits)" in py.summary
    for k in keep:
        a, b = rust[k].combine_chunks(), py[k].combine_chunks()
        assert a.num_rows > 0 and a.equals(b), k
    # The histograms written by both runs are the same file content.
    assert (tmp_path / "rust/histograms.txt").read_text() == (
        tmp_path / "py/histograms.txt"
    ).read_text()
