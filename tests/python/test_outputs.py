"""Quiver's Parquet outputs as pyarrow and Polars users read them."""

import numpy as np
import polars as pl
import pyarrow.parquet as pq


def test_pyarrow_reads_products_with_schema_metadata(square_run):
    f = pq.ParquetFile(square_run / "floats.squared.parquet")
    assert f.metadata.num_row_groups == 3  # 40 events in batches of 16
    t = pq.read_table(square_run / "floats.squared.parquet")
    assert t.column_names == ["event", "value"]
    for meta in (t.schema.metadata, f.metadata.metadata):  # Arrow schema and Parquet key-values
        assert meta[b"quiver.schema"] == b"floats"
        assert meta[b"quiver.schema_version"] == b"1"
    assert t.num_rows == 40 * 1000
    ev = t.column("event").to_numpy()
    assert (np.diff(ev) >= 0).all() and ev[0] == 0 and ev[-1] == 39


def test_polars_joins_products_by_event(square_run):
    x = pl.read_parquet(square_run / "floats.numbers.parquet")
    sq = pl.read_parquet(square_run / "floats.squared.parquet")
    assert x.schema["event"] == pl.UInt32 and x.schema["value"] == pl.Float32
    both = x.with_columns(sq["value"].alias("squared"))
    assert (both["value"] * both["value"] == both["squared"]).all()
    per_event = x.group_by("event").len().sort("event")
    assert per_event["len"].to_list() == [1000] * 40
    assert (
        pl.scan_parquet(square_run / "floats.numbers.parquet")
        .filter(pl.col("event") == 7)
        .collect()
        .height
        == 1000
    )


def test_no_temporary_or_partial_files(square_run):
    names = sorted(p.name for p in square_run.iterdir())
    assert names == ["floats.numbers.parquet", "floats.squared.parquet", "quiver-run.toml"]


def test_ipc_output_is_memory_mappable_by_pyarrow(quiver_bin, tmp_path):
    import subprocess

    import pyarrow as pa

    plan = tmp_path / "plan.toml"
    plan.write_text(
        '[[step]]\nlabel = "numbers"\ntype = "random_floats"\ncount = 5\n'
        '[[step]]\nlabel = "w"\ntype = "write_ipc"\nproducts = ["numbers"]\n'
    )
    subprocess.run(
        [
            quiver_bin,
            "run",
            str(plan),
            "--events",
            "7",
            "--batch-size",
            "3",
            "--no-progress",
            "--output",
            str(tmp_path / "out"),
        ],
        check=True,
        capture_output=True,
    )
    with pa.memory_map(str(tmp_path / "out" / "floats.numbers.arrow")) as source:
        reader = pa.ipc.open_file(source)
        assert reader.num_record_batches == 3
        t = reader.read_all()
    assert t.num_rows == 35
    assert t.schema.metadata[b"quiver.schema"] == b"floats"
    assert pl.from_arrow(t)["event"].unique().sort().to_list() == list(range(7))
