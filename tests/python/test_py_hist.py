"""quiver.hist.to_hist: histograms tables as scikit-hep hist.Hist objects."""

import math
import subprocess

import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from conftest import ROOT
from quiver.hist import to_hist

INF = math.inf


def table(rows):
    """A histograms table (docs/products.md) from (name, bin, low, high, count) rows."""
    names, bins, lows, highs, counts = zip(*rows)
    return pa.table(
        {
            "histogram": pa.array(names, pa.utf8()),
            "bin": pa.array(bins, pa.uint32()),
            "low_edge": pa.array(lows, pa.float64()),
            "high_edge": pa.array(highs, pa.float64()),
            "count": pa.array(counts, pa.uint64()),
        }
    )


# Two histograms, counters deliberately out of order.
ROWS = [
    ("b", 0, -INF, -1.0, 0),
    ("b", 1, -1.0, 1.0, 9),
    ("b", 2, 1.0, INF, 4),
    ("a", 3, 1.0, 1.5, 6),
    ("a", 0, -INF, 0.0, 2),
    ("a", 1, 0.0, 0.5, 3),
    ("a", 2, 0.5, 1.0, 5),
    ("a", 4, 1.5, 2.0, 1),
    ("a", 5, 2.0, INF, 7),
]


def check_a(h):
    import hist

    ax = h.axes[0]
    assert isinstance(ax, hist.axis.Regular)
    assert ax.name == "a" and len(ax) == 4
    assert ax.edges.tolist() == [0.0, 0.5, 1.0, 1.5, 2.0]
    assert ax.traits.underflow and ax.traits.overflow
    assert h.values().tolist() == [3, 5, 6, 1]
    assert h.view(flow=True).tolist() == [2, 3, 5, 6, 1, 7]
    assert h.sum(flow=True) == 24


def test_hand_built_table(tmp_path):
    t = table(ROWS)
    check_a(to_hist(t, "a"))
    all_ = to_hist(t)
    assert list(all_) == ["a", "b"]
    check_a(all_["a"])
    assert all_["b"].view(flow=True).tolist() == [0, 9, 4]
    assert all_["b"].axes[0].edges.tolist() == [-1.0, 1.0]
    # Polars and a Parquet path give the same.
    check_a(to_hist(pl.from_arrow(t), "a"))
    pq.write_table(t, tmp_path / "h.parquet")
    check_a(to_hist(tmp_path / "h.parquet", "a"))
    check_a(to_hist(str(tmp_path / "h.parquet"))["a"])


def test_bad_tables():
    with pytest.raises(KeyError, match="no histogram 'c'"):
        to_hist(table(ROWS), "c")
    with pytest.raises(ValueError, match="missing column"):
        to_hist(table(ROWS).drop_columns(["count"]))
    with pytest.raises(ValueError, match="counters must be"):
        to_hist(table([r for r in ROWS if not (r[0] == "a" and r[1] == 2)]), "a")
    irregular = [r if r[1] != 2 else ("a", 2, 0.5, 1.1, 5) for r in ROWS if r[0] == "a"]
    with pytest.raises(ValueError, match="not a regular bin"):
        to_hist(table(irregular), "a")
    with pytest.raises(TypeError):
        to_hist(42)


def test_histograms_step_output(quiver_bin, tmp_path):
    """The histograms step's own file converts, counter for counter."""
    ds, out = tmp_path / "ds", tmp_path / "out"
    subprocess.run(
        [quiver_bin, "generate", "--events", "2", "--output", str(ds)],
        check=True,
        capture_output=True,
    )
    plan = tmp_path / "plan.toml"
    plan.write_text(
        (ROOT / "plans/pixel.toml").read_text()
        + '\n[[step]]\nlabel = "histos"\ntype = "histograms"\nfile = "histos"\n'
    )
    subprocess.run(
        [quiver_bin, "run", str(plan), "--input", str(ds), "--output", str(out), "--no-progress"],
        check=True,
        capture_output=True,
    )
    # Its own file: two histograms steps may not write one (refused before any event).
    t = pq.read_table(out / "histos.parquet")
    hs = to_hist(t)
    names = t.column("histogram").to_pylist()
    assert sorted(hs) == sorted(set(names)) and len(hs) > 10
    for name, h in hs.items():
        rows = sorted(
            (b, lo, hi, c)
            for n, b, lo, hi, c in zip(
                names, *(t.column(c).to_pylist() for c in ("bin", "low_edge", "high_edge", "count"))
            )
            if n == name
        )
        assert h.view(flow=True).tolist() == [r[3] for r in rows]
        assert h.axes[0].edges[0] == rows[1][1] and h.axes[0].edges[-1] == rows[-2][2]
        assert len(h.axes[0]) == len(rows) - 2
    # Something was filled.
    assert sum(h.sum(flow=True) for h in hs.values()) > 0
