"""The local reconstruction against the generator's truth, as an analyst would check it
with Polars: hit residuals per layer, hits per event."""

import subprocess

import polars as pl
import pytest
from conftest import ROOT

LAYER_START = [0, 96, 320, 672, 1184, 1296, 1408, 1520, 1632, 1744, 1856]
LAYER_NAMES = [
    "BPix1",
    "BPix2",
    "BPix3",
    "BPix4",
    "FPix+1",
    "FPix+2",
    "FPix+3",
    "FPix-1",
    "FPix-2",
    "FPix-3",
]


@pytest.fixture(scope="session")
def pixel_run(quiver_bin, tmp_path_factory):
    """A 10-event dataset at <PU> 50 and the default plan's outputs on it."""
    base = tmp_path_factory.mktemp("pixel")
    ds, out = base / "ds", base / "out"
    subprocess.run(
        [
            quiver_bin,
            "generate",
            "--events",
            "10",
            "--pileup",
            "50",
            "--seed",
            "3",
            "--output",
            str(ds),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    subprocess.run(
        [
            quiver_bin,
            "run",
            str(ROOT / "plans/pixel.toml"),
            "--input",
            str(ds),
            "--output",
            str(out),
            "--no-progress",
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return ds, out


def layer_expr(col):
    expr = pl.lit(None, dtype=pl.Int32)
    for i in range(10):
        expr = (
            pl.when((pl.col(col) >= LAYER_START[i]) & (pl.col(col) < LAYER_START[i + 1]))
            .then(i)
            .otherwise(expr)
        )
    return expr


def residuals(ds, out):
    """Each sim hit matched to the nearest rec hit of its module (within 0.5 mm in x, 1 mm in y)."""
    hits = pl.read_parquet(out / "hits.hits.parquet").with_row_index("hit")
    sim = pl.read_parquet(ds / "simhits.parquet")
    pairs = sim.join(hits, left_on=["event", "module"], right_on=["event", "det_index"])
    pairs = pairs.with_columns(
        dx=(pl.col("x_local") - pl.col("lx")) * 1e4,  # µm
        dy=(pl.col("y_local") - pl.col("ly")) * 1e4,
    ).filter((pl.col("dx").abs() < 500) & (pl.col("dy").abs() < 1000))
    nearest = pairs.sort(pl.col("dx") ** 2 + pl.col("dy") ** 2).unique(
        ["event", "module", "lx", "ly"], keep="first"
    )
    return nearest.with_columns(
        layer=layer_expr("module"), edge=(pl.col("size_x") < 0) | (pl.col("size_y") < 0)
    )


def test_hit_residuals_per_layer(pixel_run):
    ds, out = pixel_run
    r = residuals(ds, out).filter(~pl.col("edge"))
    table = (
        r.group_by("layer")
        .agg(
            n=pl.len(),
            mean_x=pl.col("dx").mean(),
            rms_x=(pl.col("dx") ** 2).mean().sqrt(),
            mean_y=pl.col("dy").mean(),
            rms_y=(pl.col("dy") ** 2).mean().sqrt(),
        )
        .sort("layer")
        .with_columns(
            name=pl.col("layer").map_elements(lambda i: LAYER_NAMES[i], return_dtype=pl.String)
        )
    )
    print("\n" + str(table))
    barrel = r.filter(pl.col("layer") < 4)
    rms_x = (barrel["dx"] ** 2).mean() ** 0.5
    rms_y = (barrel["dy"] ** 2).mean() ** 0.5
    print(f"barrel, non-edge: RMS x {rms_x:.1f} µm, RMS y {rms_y:.1f} µm over {barrel.height} hits")
    assert barrel.height > 10_000
    assert rms_x <= 25.0, table
    assert rms_y <= 40.0, table
    # Most sim hits find a rec hit.
    assert r.height > 0.8 * pl.read_parquet(ds / "simhits.parquet").height


def test_hits_per_event_in_the_reference_range(pixel_run):
    _, out = pixel_run
    per_event = pl.read_parquet(out / "hits.hits.parquet").group_by("event").len()
    assert per_event.height == 10
    # The reference quotes 18 300 ± 3 500 hits per event; pile-up is Poisson, so single
    # events spread.
    assert 12_000 <= per_event["len"].mean() <= 21_000, per_event
    assert per_event["len"].min() >= 8_000 and per_event["len"].max() <= 28_000, per_event
