"""A reader opened on a run directory keeps reading the run it opened when another run is
committed into the same directory (quiver.open)."""

import polars as pl
import pyarrow.parquet as pq
import quiver


def write_run(out, seed, events):
    plan = (
        quiver.Plan()
        .add("numbers", "random_floats", count=500, seed=seed)
        .add("w", "write_parquet", products=["numbers"])
    )
    plan.run(events=events, threads=1, output=out, collect=[])


def test_open_frames_read_the_run_they_opened_after_a_new_commit(tmp_path):
    out = tmp_path / "out"
    write_run(out, seed=1, events=30)
    old = pl.from_arrow(pq.read_table(out / "floats.numbers.parquet"))
    frames = quiver.open(out)
    big = frames["floats"].filter(pl.col("value") > 0.5)
    derived_only = quiver.open(out)["floats"].select(pl.len())  # the dict itself is gone

    write_run(out, seed=2, events=7)  # replaces the run: the old files are deleted
    assert pq.read_metadata(out / "floats.numbers.parquet").num_rows == 7 * 500

    assert frames["floats"].collect().equals(old)
    assert big.collect().equals(old.filter(pl.col("value") > 0.5))
    assert derived_only.collect().item() == 30 * 500
    assert len(frames.awkward("floats")) == 30
    assert frames.event_range() == (0, 30)
    # A new open sees the new run.
    assert quiver.open(out)["floats"].collect().height == 7 * 500
