"""Queries over a run's products: quiver.open (lazy Polars frames with the schemas of
docs/products.md), quiver.sql (DataFusion) and `quiver query`."""

import pathlib
import re

import polars as pl
import pyarrow as pa
import pyarrow.csv as pcsv
import pyarrow.parquet as pq
import pytest
import quiver
import quiver.cli
from quiver.query import QueryError

ROOT = pathlib.Path(__file__).resolve().parents[2]
SIMPLE = {
    "UInt8": pa.uint8(),
    "UInt16": pa.uint16(),
    "UInt32": pa.uint32(),
    "UInt64": pa.uint64(),
    "Int8": pa.int8(),
    "Int16": pa.int16(),
    "Int32": pa.int32(),
    "Float32": pa.float32(),
    "Float64": pa.float64(),
    "Boolean": pa.bool_(),
    "Binary": pa.binary(),
    "Utf8": pa.string(),
}


def doc_type(text):
    """An Arrow type as docs/products.md writes it (UInt16, List<UInt32>,
    FixedSizeList<Float32, 5>)."""
    if m := re.fullmatch(r"List<(\w+)>", text):
        return "list", SIMPLE[m.group(1)]
    if m := re.fullmatch(r"FixedSizeList<(\w+), (\d+)>", text):
        return "fixed", SIMPLE[m.group(1)], int(m.group(2))
    return SIMPLE[text]


def arrow_type(t):
    if pa.types.is_list(t):
        return "list", t.value_type
    if pa.types.is_fixed_size_list(t):
        return "fixed", t.value_type, t.list_size
    return t


def documented_columns(product_type):
    """(name, type) of the first table after the heading of `product_type` in docs/products.md."""
    text = (ROOT / "docs/products.md").read_text()
    head = re.search(rf"^###[^\n]*`{product_type}` \(v\d+\)[^\n]*$", text, flags=re.M)
    assert head, f"docs/products.md documents no `{product_type}`"
    cols = []
    for line in text[head.end() :].splitlines()[1:]:
        if line.startswith("###"):
            break
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if line.startswith("|") and len(cells) >= 3 and cells[0].startswith("`"):
            for name in re.findall(r"`(\w+)`", cells[0]):
                cols.append((name, doc_type(cells[1])))
        elif cols and not line.startswith("|"):
            break
    return cols


def test_open_gives_lazy_frames_with_the_documented_schemas(small_run, small_dataset, tmp_path):
    frames = quiver.open(small_run)
    assert {"digis", "clustered_digis", "hits", "tracks", "vertices", "histograms"} <= set(frames)
    # One word away in the plan (docs/decisions/0024-default-plan-outputs.md).
    assert "calibrated_digis" not in frames
    for name, lf in frames.items():
        assert isinstance(lf, pl.LazyFrame), name
    # The calibrated digis, written by adding their label to the default plan's output.
    text = (
        (ROOT / "plans/pixel.toml")
        .read_text()
        .replace('products = ["digis",', 'products = ["digis", "calib",')
    )
    calib_run = tmp_path / "calib_run"
    quiver.Plan.from_toml(text).run(input=small_dataset, output=calib_run, threads=1, collect=[])
    frames["calibrated_digis"] = quiver.open(calib_run)["calibrated_digis"]
    runs = {"calibrated_digis": calib_run}
    for ty in ["digis", "calibrated_digis", "clustered_digis", "hits", "tracks", "vertices"]:
        (path,) = runs.get(ty, small_run).glob(f"{ty}.*.parquet")
        schema = pq.read_schema(path)
        documented = [("event", pa.uint32())] + documented_columns(ty)
        assert [(f.name, arrow_type(f.type)) for f in schema] == documented, ty
        names = [n for n, _ in documented]
        if (
            ty == "tracks"
        ):  # the quality's name follows its code (added by quiver.open, not in the file)
            names.insert(names.index("quality") + 1, "quality_name")
        assert frames[ty].collect_schema().names() == names
    # Lazy: a filter runs on the file, not on a loaded table.
    n = frames["tracks"].filter(pl.col("quality") >= 2).select(pl.len()).collect().item()
    assert 0 < n < pq.read_metadata(small_run / "tracks.tracks.parquet").num_rows


def test_dataset_truth_tables_are_added(small_run, small_dataset):
    frames = quiver.open(small_run, dataset=small_dataset)
    assert {"truth_particles", "truth_simhits", "truth_vertices", "truth_pixel_truth"} <= set(
        frames
    )
    assert "lx" in frames["truth_simhits"].collect_schema().names()


def test_sql_equals_polars(small_run):
    q = """SELECT event, count(*) AS n, avg(pt) AS mean_pt FROM tracks
           WHERE quality >= 2 GROUP BY event ORDER BY event"""
    got = quiver.sql(q, small_run)
    assert isinstance(got, pa.Table) and got.num_rows > 0
    expected = (
        quiver.open(small_run)["tracks"]
        .filter(pl.col("quality") >= 2)
        .group_by("event")
        .agg(n=pl.len(), mean_pt=pl.col("pt").mean())
        .sort("event")
        .collect()
    )
    df = quiver.sql(q, small_run, polars=True)
    assert isinstance(df, pl.DataFrame)
    assert df["event"].to_list() == expected["event"].to_list()
    assert df["n"].to_list() == expected["n"].to_list()
    assert df["mean_pt"].to_list() == pytest.approx(expected["mean_pt"].to_list(), rel=1e-6)


def test_sql_join_products_and_truth(small_run, small_dataset):
    """Rec hits joined to the truth sim hits of their module (a JOIN across products and the
    dataset), and vertices with their track lists unnested."""
    q = """SELECT count(*) AS n FROM hits h JOIN truth_simhits s
           ON h.event = s.event AND h.det_index = s.module
           WHERE abs(h.x_local - s.lx) < 0.01 AND abs(h.y_local - s.ly) < 0.02"""
    n = quiver.sql(q, small_run, dataset=small_dataset).column("n")[0].as_py()
    sim = pq.read_metadata(small_dataset / "simhits.parquet").num_rows
    assert 0.5 * sim < n < 2 * sim
    per_vertex = (
        quiver.sql("SELECT sum(array_length(tracks)) AS n FROM vertices", small_run)
        .column("n")[0]
        .as_py()
    )
    unnested = quiver.sql(
        "SELECT count(*) AS n FROM (SELECT unnest(tracks) AS t FROM vertices)", small_run
    )
    assert unnested.column("n")[0].as_py() == per_vertex > 0


def test_bad_queries_name_the_problem(small_run, tmp_path):
    with pytest.raises(QueryError, match=r"tables: .*tracks"):
        quiver.sql("SELECT * FROM no_such_table", small_run)
    with pytest.raises(QueryError, match="does not exist"):
        quiver.open(tmp_path / "nothing")


def test_query_command(small_run, tmp_path, capsys):
    q = "SELECT event, count(*) AS n FROM hits GROUP BY event ORDER BY event"
    assert quiver.cli.main(["query", str(small_run), q]) == 0
    printed = capsys.readouterr().out
    assert "shape: (12, 2)" in printed and "event" in printed
    assert (
        quiver.cli.main(["query", str(small_run), q, "--output", str(tmp_path / "n.parquet")]) == 0
    )
    assert quiver.cli.main(["query", str(small_run), q, "--output", str(tmp_path / "n.csv")]) == 0
    a, b = pq.read_table(tmp_path / "n.parquet"), pcsv.read_csv(tmp_path / "n.csv")
    assert a.num_rows == b.num_rows == 12
    assert a.column("n").to_pylist() == b.column("n").to_pylist()
    assert (
        a.column("n").to_pylist()
        == pl.read_parquet(small_run / "hits.hits.parquet")
        .group_by("event")
        .len()
        .sort("event")["len"]
        .to_list()
    )
    assert quiver.cli.main(["query", str(small_run), "--tables"]) == 0
    assert "tracks: event uint32, quality uint8" in capsys.readouterr().out
    assert quiver.cli.main(["query", str(small_run), "SELECT nonsense FROM tracks"]) == 2
    assert "error: query failed" in capsys.readouterr().out


def test_readers_refuse_a_directory_that_is_not_one_complete_run(small_run, tmp_path):
    """quiver.open / quiver.sql / quiver query read a run only when its run manifest
    (quiver-run.toml, written last) matches its files."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    m = quiver.query.verified(run)
    assert m["format"] == "quiver-run/1" and m["events"] == quiver.open(run).event_range()[1]
    assert "tracks.tracks.parquet" in m["files"] and len(m["plan_sha256"]) == 64

    # A product file of another run copied in.
    shutil.copy(run / "hits.hits.parquet", run / "hits.other.parquet")
    with pytest.raises(QueryError, match=r"hits\.other\.parquet: not part of the run"):
        quiver.open(run)
    (run / "hits.other.parquet").unlink()
    # A file changed after the run (same size, other bytes).
    data = bytearray((run / "vertices.vertices.parquet").read_bytes())
    data[len(data) // 2] ^= 0xFF
    (run / "vertices.vertices.parquet").write_bytes(bytes(data))
    with pytest.raises(QueryError, match="SHA-256 differs"):
        quiver.sql("SELECT count(*) FROM tracks", run)
    assert quiver.cli.main(["query", str(run), "SELECT count(*) FROM tracks"]) == 2
    # No manifest: a run still writing, killed or failed.
    shutil.copy(small_run / "vertices.vertices.parquet", run / "vertices.vertices.parquet")
    quiver.open(run)
    (run / "quiver-run.toml").unlink()
    with pytest.raises(QueryError, match="holds no complete Quiver run"):
        quiver.open(run)


def tree_state(d):
    """Every file under `d` with its size and modification time."""
    return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in pathlib.Path(d).rglob("*")}


@pytest.mark.parametrize(
    "statement",
    [
        "COPY tracks TO '{target}'",
        "COPY (SELECT * FROM hits) TO '{run}/hits.hits.parquet'",
        "WITH t AS (SELECT 1) COPY tracks TO '{target}'",
        "/* comment */ ;  COPY tracks TO '{target}'",
        "CREATE TABLE t AS SELECT * FROM tracks",
        "CREATE EXTERNAL TABLE e STORED AS PARQUET LOCATION '{target}'",
        "INSERT INTO tracks SELECT * FROM tracks",
        "SET datafusion.execution.batch_size = 1",
        "SELECT 1; COPY tracks TO '{target}'",
        "DROP TABLE tracks",
    ],
)
def test_queries_are_read_only(small_run, tmp_path, capsys, statement):
    """quiver query / quiver.sql once ran COPY … TO and overwrote a product of the run."""
    target = tmp_path / "written.parquet"
    q = statement.format(target=target, run=small_run)
    before = tree_state(small_run)
    # Refused when planned, or not even valid SQL (COPY after WITH): never run.
    refused = r"^query (refused: queries are read-only|failed: SQL error: ParserError)"
    with pytest.raises(QueryError, match=refused):
        quiver.sql(q, small_run)
    assert quiver.cli.main(["query", str(small_run), q]) == 2
    out = capsys.readouterr().out
    assert re.match("error: " + refused[1:], out) and out.count("\n") == 1, out
    assert not target.exists()
    assert tree_state(small_run) == before
    quiver.query.verified(small_run)


def test_engine_errors_are_one_line(small_run, capsys):
    # A self-join's duplicate column names made polars raise DuplicateError (a traceback).
    for q in [
        "SELECT * FROM tracks a JOIN tracks b ON a.event = b.event",
        "SELECT nonsense FROM tracks",
        "SELECT event / 0 FROM tracks",
        "SELEC",
    ]:
        assert quiver.cli.main(["query", str(small_run), q]) == 2, q
        out = capsys.readouterr().out
        assert out.startswith("error: ") and out.count("\n") == 1, out


def test_query_numbers_and_output_are_checked(small_run, tmp_path, capsys):
    q = "SELECT event FROM tracks"
    for bad in ["0", "-2", "-100"]:
        assert quiver.cli.main(["query", str(small_run), q, "--max-rows", bad]) == 2
        out = capsys.readouterr().out
        assert out.startswith("error: --max-rows must be") and out.count("\n") == 1, out
    # Huge: every row, as -1 does.
    assert (
        quiver.cli.main(
            [
                "query",
                str(small_run),
                "SELECT DISTINCT event FROM tracks ORDER BY event",
                "--max-rows",
                str(10**30),
            ]
        )
        == 0
    )
    assert "shape: (12, 1)" in capsys.readouterr().out
    # --output into the run being read would make it no longer a complete run.
    before = tree_state(small_run)
    assert (
        quiver.cli.main(["query", str(small_run), q, "--output", str(small_run / "x.parquet")]) == 2
    )
    assert "inside the run directory" in capsys.readouterr().out
    assert tree_state(small_run) == before
    # A query failing while its result is written leaves an earlier file as it was.
    dest = tmp_path / "r.csv"
    dest.write_text("mine\n")
    assert (
        quiver.cli.main(
            [
                "query",
                str(small_run),
                "SELECT hits.event / (hits.event - 5) AS x FROM hits",
                "--output",
                str(dest),
            ]
        )
        == 2
    )
    assert dest.read_text() == "mine\n" and sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]


MEMORY_LIMITED_QUERY = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (4 << 30, resource.RLIM_INFINITY))
import quiver.cli
sys.exit(quiver.cli.main(["query", sys.argv[1], sys.argv[2], "--max-rows", "5"]))
"""


def test_printing_computes_only_the_rows_printed(small_run):
    """The row limit is in the query's plan: a cross join of the hits (50 000² rows, about
    20 GB if computed) prints its first rows within a 4 GiB address space."""
    import os
    import subprocess
    import sys

    assert pq.read_metadata(small_run / "hits.hits.parquet").num_rows > 20000
    q = "SELECT a.event AS e1, b.event AS e2 FROM hits a CROSS JOIN hits b"
    env = dict(os.environ, POLARS_MAX_THREADS="2", RAYON_NUM_THREADS="2")
    r = subprocess.run(
        [sys.executable, "-c", MEMORY_LIMITED_QUERY, str(small_run), q],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "shape: (5, 2)" in r.stdout and "the query has more, not computed" in r.stdout
