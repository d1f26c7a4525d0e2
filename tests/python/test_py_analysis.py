"""Products for analysts: awkward arrays over the Arrow buffers (no copy), quality names,
notebook rendering, where a run from Python writes, and the hints of bad plans and inputs."""

import os
import pathlib

import awkward as ak
import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import quiver
from conftest import ROOT
from quiver._analysis import to_awkward


@pytest.fixture(scope="module")
def tracks_run(small_dataset):
    """The default chain over the 12 events in one batch: one Arrow chunk per product."""
    plan = quiver.Plan.load(ROOT / "plans/pixel.toml")
    return plan.run(
        input=small_dataset,
        events=12,
        threads=1,
        batch_size=12,
        collect=["tracks", "vertices"],
        output=None,
    )


def _field(array, name):
    return array.layout.content.content(name)


def test_result_awkward_is_per_event_and_shares_rusts_buffers(tracks_run):
    tracks = tracks_run.awkward("tracks")
    assert len(tracks) == 12
    assert set(tracks.fields) == set(tracks_run["tracks"].column_names) - {"event"}
    rust = tracks_run.rust_addresses("tracks")
    assert len(rust["pt"]) == 1  # one batch
    for col in ("pt", "eta", "quality", "chi2", "n_hits"):
        assert _field(tracks, col).data.ctypes.data == rust[col][0], col
    # A list column (hits) and a fixed-size list (state): their values are Rust's too.
    arrow_tracks = tracks_run["tracks"]
    hits_values = arrow_tracks.column("hits").chunk(0).values
    assert (
        _field(tracks, "hits").content.data.ctypes.data
        == hits_values.buffers()[1].address + 4 * hits_values.offset
    )
    state_values = arrow_tracks.column("state").chunk(0).values
    assert _field(tracks, "state").content.data.ctypes.data == state_values.buffers()[1].address
    # Per event: the rows of that event, in order.
    df = tracks_run.polars("tracks")
    counts = df.group_by("event").len().sort("event")
    expected = np.zeros(12, dtype=np.int64)
    expected[counts["event"].to_numpy()] = counts["len"].to_numpy()
    assert ak.num(tracks, axis=1).to_list() == expected.tolist()
    assert ak.flatten(tracks.pt).to_list() == df["pt"].to_list()
    assert tracks.hits[3].to_list() == df.filter(pl.col("event") == 3)["hits"].to_list()
    # What an analysis does: loose tracks per event, their summed pT.
    loose = tracks[tracks.quality >= quiver.Quality.loose]
    assert ak.sum(ak.num(loose, axis=1)) == df.filter(pl.col("quality") >= 2).height
    assert np.allclose(
        ak.to_numpy(ak.sum(loose.pt, axis=1)),
        [
            df.filter((pl.col("event") == e) & (pl.col("quality") >= 2))["pt"].sum()
            for e in range(12)
        ],
        rtol=1e-5,
    )


def test_result_awkward_of_several_batches_is_the_same(small_dataset, tracks_run):
    plan = quiver.Plan.load(ROOT / "plans/pixel.toml")
    r = plan.run(input=small_dataset, events=12, threads=2, batch_size=5, collect=["tracks"])
    assert r["tracks"].column("pt").num_chunks == 3
    assert r.awkward("tracks").to_list() == tracks_run.awkward("tracks").to_list()


def test_to_awkward_of_one_chunk_copies_no_column():
    t = pa.table(
        {
            "event": pa.array([1, 1, 3], pa.uint32()),
            "x": pa.array([1.5, 2.5, 3.5], pa.float32()),
            "ids": pa.array([[1], [], [2, 3]], pa.list_(pa.uint32())),
        }
    )
    a = to_awkward(t, first_event=0, n_events=5)
    assert a.to_list() == [
        [],
        [{"x": 1.5, "ids": [1]}, {"x": 2.5, "ids": []}],
        [],
        [{"x": 3.5, "ids": [2, 3]}],
        [],
    ]
    assert str(a.type) == "5 * var * {x: float32, ids: var * uint32}"
    assert _field(a, "x").data.ctypes.data == t.column("x").chunk(0).buffers()[1].address
    assert (
        _field(a, "ids").content.data.ctypes.data
        == t.column("ids").chunk(0).values.buffers()[1].address
    )
    with pytest.raises(ValueError, match="ordered by event"):
        to_awkward(t, first_event=2, n_events=5)
    empty = to_awkward(t.slice(0, 0), first_event=0, n_events=2)
    assert empty.to_list() == [[], []]


def test_open_gives_awkward_arrays_and_quality_names(small_run, tracks_run):
    frames = quiver.open(small_run)
    assert frames.types["tracks"] == "tracks"
    assert frames.event_range() == (0, 12)
    from_files = frames.awkward("tracks")
    assert from_files.to_list() == tracks_run.awkward("tracks").to_list()
    with pytest.raises(quiver.query.QueryError, match="not a product"):
        frames.awkward("nope")
    tracks = frames["tracks"].collect()
    names = tracks.columns
    assert names[names.index("quality") + 1] == "quality_name"
    assert tracks["quality_name"].dtype == pl.Enum(quiver.QUALITY_NAMES)
    assert tracks["quality_name"].cast(pl.String).to_list() == [
        quiver.QUALITY_NAMES[q] for q in tracks["quality"]
    ]
    loose_by_name = frames["tracks"].filter(pl.col("quality_name") >= "loose").collect().height
    assert loose_by_name == tracks.filter(pl.col("quality") >= 2).height > 0
    assert (
        loose_by_name == tracks.filter(pl.col("quality_name") == "loose").height
    )  # 3–5 are never produced
    assert set(tracks["quality_name"].cast(pl.String).unique()) <= {"bad", "dup", "loose"}
    # The files keep the reference's columns: no name column written.
    assert "quality_name" not in pq.read_schema(small_run / "tracks.tracks.parquet").names
    # Tables without a quality are left alone.
    assert "quality_name" not in frames["vertices"].collect_schema().names()


def test_result_polars_has_quality_names_and_the_arrow_table_is_rusts(tracks_run):
    df = tracks_run.polars("tracks")
    assert df["quality_name"].dtype == pl.Enum(quiver.QUALITY_NAMES)
    assert (df["quality_name"].to_physical() == df["quality"].cast(pl.UInt32)).all()
    assert "quality_name" not in tracks_run["tracks"].column_names
    assert "quality_name" not in tracks_run.polars("vertices:vertices").columns
    assert [getattr(quiver.Quality, n) for n in quiver.QUALITY_NAMES] == list(range(6))
    assert quiver.Quality.loose == 2 and quiver.Quality.name(1) == "dup"
    with pytest.raises(ValueError, match="quality code 6"):
        quiver.Quality.name(6)


def test_repr_html_of_plan_and_result(tracks_run):
    plan = (
        quiver.Plan()
        .add("numbers", "random_floats", count=3)
        .add("squared", "square", input="numbers")
    )
    html = plan._repr_html_()
    assert (
        html.startswith("<div><b>quiver.Plan</b>, 2 steps<pre>") and "squared (square, cpu)" in html
    )
    bad = quiver.Plan().add("x", "sqaure")._repr_html_()
    assert "color:#b00" in bad and "did you mean &#x27;square&#x27;?" in bad
    r = plan.run(events=4, threads=1)
    html = r._repr_html_()
    assert "<b>quiver.Result</b>: 4 events, 1 threads" in html
    assert "<td>squared:floats</td><td>12</td><td>event, value</td>" in html
    assert "<details><summary>summary</summary><pre>" in html and "events" in html
    big = tracks_run._repr_html_()
    assert "<td>tracks:tracks</td>" in big and "<td>rechits</td>" not in big  # labels, not types
    assert "<td>hits</td>" in big  # the rechits step's label, with its seconds
    counts = tracks_run.quality_counts("tracks")
    df = tracks_run.polars("tracks")
    assert counts == {
        n: df.filter(pl.col("quality_name") == n).height for n in ("bad", "dup", "loose")
    }
    assert (
        "tracks:tracks by quality: bad " + str(counts["bad"]) + ", dup " + str(counts["dup"]) in big
    )


def test_run_without_output_writes_to_a_temporary_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    text = (ROOT / "plans/examples/square.toml").read_text()
    r = quiver.Plan.from_toml(text).run(events=4, threads=1)
    assert not (tmp_path / "quiver-out").exists()
    out = pathlib.Path(r.output)
    assert out.name.startswith("quiver-run-") and (out / "floats.squared.parquet").exists()
    assert pq.read_table(out / "floats.squared.parquet").num_rows == 4000
    # A plan that writes nothing leaves nothing behind.
    before = set(pathlib.Path(os.path.dirname(r.output)).glob("quiver-run-*"))
    r2 = quiver.Plan().add("numbers", "random_floats", count=3).run(events=2)
    assert r2.output is None
    assert set(pathlib.Path(os.path.dirname(r.output)).glob("quiver-run-*")) == before
    # output= is used as given.
    r3 = quiver.Plan.from_toml(text).run(events=2, output=tmp_path / "mine")
    assert (
        r3.output == str(tmp_path / "mine") and (tmp_path / "mine/floats.squared.parquet").exists()
    )


def test_unknown_step_type_gets_a_suggestion():
    with pytest.raises(quiver.PlanError) as e:
        quiver.Plan().add("x", "rechit").check()
    assert (
        str(e.value)
        == "step 'x': unknown step type 'rechit' (did you mean 'rechits'? `quiver steps` lists the "
        "catalogue)"
    )


def test_input_pointing_nowhere_names_quiver_generate(tmp_path):
    with pytest.raises(quiver.QuiverError) as e:
        quiver.Plan.load(ROOT / "plans/pixel.toml").run(
            input=tmp_path / "nope", events=1, output=tmp_path / "o"
        )
    assert (
        f"input dataset: {tmp_path / 'nope'} does not exist; make one with `quiver generate "
        f"--output {tmp_path / 'nope'}`" in str(e.value)
    )


def test_report_object_renders_and_points_at_report_html(small_run, small_dataset, tmp_path):
    rep = quiver.report(small_run, small_dataset, tmp_path / "report")
    assert rep.html_path == tmp_path / "report/report.html" and rep.html_path.stat().st_size > 1000
    assert rep.summary["events"] == 12
    html = rep._repr_html_()
    assert html.startswith("<div><b>quiver.Report</b>") and "<td>track_efficiency</td>" in html
    assert rep.html_path.resolve().as_uri() in html
    assert "open " in repr(rep)
    with pytest.raises(quiver.QuiverError, match="no summary.json"):
        quiver.Report(tmp_path)
    with pytest.raises(quiver.QuiverError, match="quiver report failed"):
        quiver.report(tmp_path / "nothing", small_dataset, tmp_path / "r2")
