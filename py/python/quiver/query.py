"""Queries over a run's products: lazy Polars frames (:func:`open`) and SQL with DataFusion
(:func:`sql`), Arrow-native, without loading anything until a query runs.

A run directory is what ``quiver run`` / ``Plan.run(output=...)`` writes (one
``<type>.<label>.parquet`` per product, see docs/products.md) or what
:func:`quiver.dask.reconstruct` writes (the same files in ``part-<first>-<last>/``
directories, read as one table per product in event order). A run directory is read only
when its run manifest (``quiver-run.toml``, written last by the run) matches its files
(:func:`verified`): never a run that is incomplete or mixed with another's files.

Table names: the product type (``tracks``, ``hits``, ``vertices``, …) when one file of the
run has that type, otherwise ``<type>_<label>``; other Parquet files by their name
(``histograms``, ``counts``). With ``dataset=``, the dataset's truth tables are added as
``truth_<name>`` (``truth_particles``, ``truth_simhits``, …, see docs/datasets.md).
"""

from __future__ import annotations

import builtins
import collections
import pathlib
import re

from ._analysis import to_awkward, with_quality_name
from ._optional import MissingExtraError, require

_PART_RE = re.compile(r"^part-(\d+)-(\d+)$")
_PRODUCT_RE = re.compile(r"^([^.]+)\.([^.]+)\.parquet$")


class QueryError(ValueError):
    """The run directory, a table or the query is not usable (the message says why)."""


def _parts(run: pathlib.Path) -> list[tuple[pathlib.Path, tuple[int, int] | None]]:
    """The partition directories of a reconstruct output, in event order, each with the
    ``(first_event, events)`` its output's manifest gives it; ``[(run, None)]`` for a plain
    run directory. A reconstruct output is read only when its manifest
    (``quiver-reconstruct.json``, written last) says it is complete and its partitions are
    all there, of one plan and one dataset, with no gap."""
    from .dask import _IDENTITY, MANIFEST, OUTPUT_FORMAT, OUTPUT_MANIFEST, part_name, read_manifest

    found = {d.name for d in run.iterdir() if d.is_dir() and _PART_RE.match(d.name)}
    top = run / OUTPUT_MANIFEST
    if not found and not top.exists():
        return [(run, None)]
    try:
        import json

        m = json.loads(top.read_text())
        if m.get("format") != OUTPUT_FORMAT:
            raise ValueError(f"format {m.get('format')!r}, expected {OUTPUT_FORMAT!r}")
        listed = [
            (str(p["name"]), int(p["first_event"]), int(p["events"])) for p in m["partitions"]
        ]
        complete = m["complete"] is True
    except FileNotFoundError:
        raise QueryError(
            f"{run} holds partitions of a quiver reconstruct output but no {OUTPUT_MANIFEST} "
            "(written last, "
            "when reconstruct ends): the reconstruct did not finish, or an older Quiver made it; "
            "rerun quiver "
            "reconstruct with the same plan and dataset into it"
        ) from None
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise QueryError(f"{top}: not a valid reconstruct manifest ({e})") from None
    if not listed:
        raise QueryError(f"{run}: its {OUTPUT_MANIFEST} lists no partition")
    missing, at = [], listed[0][1]
    for name, first, n in listed:
        if name != part_name(first, n) or n < 1 or first < at:
            raise QueryError(
                f"{top}: partition {name} (events {first}, {n}) is out of order or misnamed"
            )
        if first > at:
            missing.append((at, first - 1, "no partition"))
        if name not in found:
            missing.append((first, first + n - 1, f"{name} absent"))
        at = first + n
    if missing:
        shown = "; ".join(f"events {a} to {b} ({why})" for a, b, why in missing)
        raise QueryError(
            f"{run} is an incomplete quiver reconstruct output: missing {shown}; rerun quiver "
            "reconstruct with the same plan and dataset to complete it"
        )
    if not complete:
        recorded = m.get("missing_events") or []
        shown = (
            "; ".join(f"events {a} to {b}" for a, b in recorded)
            if recorded
            else "the reconstruct did not finish"
        )
        raise QueryError(
            f"{run} is an incomplete quiver reconstruct output (its {OUTPUT_MANIFEST} is not "
            "marked "
            f"complete): {shown}; rerun quiver reconstruct with the same plan and dataset to "
            "complete it"
        )
    extra = sorted(found - {name for name, _, _ in listed})
    if extra:
        raise QueryError(
            f"{run}: partitions not part of the output its {OUTPUT_MANIFEST} describes: "
            f"{', '.join(extra)} (another reconstruct's, or a copy): move them away"
        )
    for name, first, n in listed:
        pm = read_manifest(run / name) or {}
        want = dict((k, m.get(k)) for k in _IDENTITY[:3])
        want.update(first_event=first, events=n)
        diff = [k for k in _IDENTITY if pm.get(k) != want[k]]
        if diff:
            raise QueryError(
                f"{run / name}: its {MANIFEST} differs from the output's {OUTPUT_MANIFEST} in "
                f"{', '.join(diff)}: the output mixes runs (another plan or dataset); rerun quiver "
                "reconstruct with overwrite, or into another directory"
            )
    return [(run / name, (first, n)) for name, first, n in listed]


def verified(run_dir, *, checksums: bool = True) -> dict:
    """The run manifest (``quiver-run.toml``) of a run directory, checked against its files:
    every listed file present with its size and SHA-256, no unlisted Parquet or Arrow file.
    A directory without a manifest (a run still writing, killed or failed, or files from
    elsewhere) or with files that do not match raises :class:`QueryError` saying why."""
    from . import _quiver

    try:
        return _quiver.verify_run(str(run_dir), checksums)
    except (ValueError, RuntimeError, OSError) as e:  # PlanError / StepError / QuiverIOError
        raise QueryError(str(e)) from None


def _tables(run_dir, dataset=None) -> tuple[dict[str, list[pathlib.Path]], list[dict]]:
    run = pathlib.Path(run_dir)
    if not run.is_dir():
        raise QueryError(f"run directory {run_dir} does not exist")
    expected = _parts(run)
    parts = [d for d, _ in expected]
    manifests = [verified(d) for d in parts]
    for (d, want), m in zip(expected, manifests):
        if want is not None and (m.get("first_event"), m.get("events")) != want:
            raise QueryError(
                f"{d}: its run covers events {m.get('first_event')} (+{m.get('events')}), "
                f"not {want[0]} (+{want[1]}) as its name and the output's manifest say"
            )
    files: dict[str, list[pathlib.Path]] = collections.defaultdict(list)
    for d, m in zip(parts, manifests):
        for name in sorted(m["files"]):
            if name.endswith(".parquet"):
                files[name].append(d / name)
    incomplete = [
        f"{name} ({len(fs)} of {len(parts)} partitions)"
        for name, fs in files.items()
        if len(fs) != len(parts)
    ]
    if incomplete:
        raise QueryError(f"{run_dir}: files missing from some partitions: {', '.join(incomplete)}")
    types = collections.Counter(m.group(1) for name in files if (m := _PRODUCT_RE.match(name)))
    out = {}
    for name, fs in sorted(files.items()):
        m = _PRODUCT_RE.match(name)
        if m:
            ty, label = m.groups()
            out[ty if types[ty] == 1 else f"{ty}_{label}"] = fs
        else:
            out[name.removesuffix(".parquet")] = fs
    if not out:
        raise QueryError(
            f"{run_dir} holds no Parquet products (a plan writes them with a write_parquet step)"
        )
    if dataset is not None:
        ds = pathlib.Path(dataset)
        truth = sorted(ds.glob("*.parquet"))
        if not truth:
            raise QueryError(f"dataset {dataset} has no Parquet truth tables")
        for p in truth:
            out[f"truth_{p.stem}"] = [p]
    return out, manifests


def tables(run_dir, *, dataset=None) -> dict[str, list[pathlib.Path]]:
    """Table name -> its Parquet files in event order (one per partition). Every run
    directory is checked against its run manifest first (:func:`verified`)."""
    return _tables(run_dir, dataset)[0]


def _is_histograms(path: pathlib.Path) -> bool:
    import pyarrow.parquet as pq

    meta = pq.read_schema(path).metadata or {}
    return meta.get(b"quiver.schema") == b"histograms"


def _merged_histograms(files):
    """Histograms of several partitions: counters of the same bin summed."""
    pl = require("polars", extra="polars")

    return (
        pl.scan_parquet([str(f) if isinstance(f, pathlib.PurePath) else f for f in files])
        .group_by("histogram", "bin", maintain_order=True)
        .agg(pl.col("low_edge").first(), pl.col("high_edge").first(), pl.col("count").sum())
        .sort("histogram", "bin")
    )


class Run(dict):
    """What :func:`open` returns: a dict of table name -> ``polars.LazyFrame``, plus
    :meth:`awkward` and the run's event range."""

    def __init__(self, frames: dict, files: dict, types: dict, run_dir, manifests: list):
        super().__init__(frames)
        self._files = files
        self.types = types
        """Table name -> product type (``tracks``, …) for the run's product tables."""
        self.run_dir = pathlib.Path(run_dir)
        self.manifests = manifests
        """The run manifest of each run directory read (one per partition of a Dask run)."""

    def event_range(self) -> tuple[int, int]:
        """``(first_event, n_events)`` of the run, from its run manifests (the partitions
        of a Dask run together)."""
        first = min(m["first_event"] for m in self.manifests)
        return first, sum(m["events"] for m in self.manifests)

    def awkward(self, name: str):
        """Table ``name`` (a product) as an awkward array of one list of records per event
        of the run (entry ``i`` is event ``first_event + i``, see :meth:`event_range`).
        The file is read once with pyarrow; awkward then uses those Arrow buffers without
        copying them."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        if name not in self.types:
            raise QueryError(
                f"'{name}' is not a product of {self.run_dir} (products: "
                f"{', '.join(self.types) or 'none'})"
            )
        first, n = self.event_range()
        table = pa.concat_tables([pq.read_table(_reopened(f)) for f in self._files[name]])
        return to_awkward(table, first, n)


def _reopened(f) -> str:
    """A path to the file that ``f`` holds open (a new description: its own position), on
    Linux even after a newer run replaced it; elsewhere its path."""
    fd_path = f"/proc/self/fd/{f.fileno()}"
    return fd_path if _HAS_PROC_FD else f.name


_HAS_PROC_FD = pathlib.Path("/proc/self/fd").is_dir()


def _pin(run_dir, dataset):
    """Table name -> open files of a run, read from the run directory as it was when opened:
    the directory is held by a file descriptor, checked against its manifest through it, and
    every file is opened before this returns. A run committed into the same directory later
    exchanges directories; these files stay readable, with the run they were opened from."""
    import os

    run = pathlib.Path(run_dir)
    if not run.is_dir():
        raise QueryError(f"run directory {run_dir} does not exist")
    dirfd = os.open(run, os.O_RDONLY | os.O_DIRECTORY)
    # Without /proc (not Linux), files are opened by path: pinned once open, but a commit
    # between the manifest check and the opens is caught only by the size check below.
    held = f"/proc/self/fd/{dirfd}" if _HAS_PROC_FD else str(run)
    try:
        try:
            files_of, manifests = _tables(held, dataset)
        except QueryError as e:
            raise QueryError(str(e).replace(held, str(run))) from None
        pinned = {}
        for name, paths in files_of.items():
            opened = pinned[name] = []
            truth = dataset is not None and name.startswith("truth_")
            # A product's files are one per partition, in the order of `manifests`.
            for p, m in zip(paths, [None] * len(paths) if truth else manifests):
                f = builtins.open(p, "rb")  # noqa: SIM115 - held open past this function (pinned)
                opened.append(f)
                # A partition replaced between the manifest check and this open: its files
                # no longer match what was checked.
                if m is not None and os.fstat(f.fileno()).st_size != m["files"][p.name]["bytes"]:
                    raise FileNotFoundError(f"{p} changed while it was opened")
        return pinned, manifests
    finally:
        os.close(dirfd)


def open(run_dir, *, dataset=None) -> Run:
    """One lazy ``polars.LazyFrame`` per product of a run (``pl.scan_parquet``): nothing is
    read until ``.collect()``. Keys as described in the module docstring. Products with a
    track quality (``tracks``, ``track_fits``, ``ntuplets``) get a ``quality_name`` column
    (``polars.Enum``: bad, dup, loose, …) after the integer ``quality``. The returned dict
    also gives each product as an awkward array: ``frames.awkward("tracks")``.

    The frames read the run that was in ``run_dir`` when ``open`` was called, even after
    another run is committed into the same directory: its files are held open (their disk
    space is freed when the last frame and the returned dict are gone). Call ``open`` again
    to see the new run.

    >>> frames = quiver.open("out")                                     # doctest: +SKIP
    >>> frames["tracks"].filter(pl.col("quality_name") >= "loose").collect()  # doctest: +SKIP
    """
    pl = require("polars", extra="polars")

    for attempt in range(3):
        try:
            files_of, manifests = _pin(run_dir, dataset)
            break
        except FileNotFoundError:
            # A new run was committed while this one was being opened: open that one.
            if attempt == 2:
                raise QueryError(
                    f"{run_dir}: runs are being committed into it faster than it can be opened"
                ) from None
    out, types = {}, {}
    for name, files in files_of.items():
        if len(files) > 1 and _is_histograms(_reopened(files[0])):
            out[name] = _merged_histograms(files)
        else:
            # Polars takes its own descriptor of each open file: the frame keeps the file.
            out[name] = pl.scan_parquet(files)
        m = _PRODUCT_RE.match(pathlib.Path(files[0].name).name)
        if m and not (dataset is not None and name.startswith("truth_")):
            types[name] = m.group(1)
            out[name] = with_quality_name(out[name], m.group(1))
    return Run(out, files_of, types, run_dir, manifests)


def context(run_dir, *, dataset=None):
    """A ``datafusion.SessionContext`` with every table of the run registered (Parquet read
    by DataFusion itself, lazily, with projection and predicate pushdown)."""
    import pyarrow.dataset as pads

    SessionContext = require("datafusion", extra="sql").SessionContext

    ctx = SessionContext()
    for name, files in tables(run_dir, dataset=dataset).items():
        if len(files) == 1:
            ctx.register_parquet(name, str(files[0]))
        elif _is_histograms(files[0]):
            ctx.register_record_batches(
                name, [_merged_histograms(files).collect().to_arrow().to_batches()]
            )
        else:
            # Several partitions: one dataset over the files, in event order.
            ctx.register_dataset(name, pads.dataset([str(f) for f in files], format="parquet"))
    return ctx


def _read_only():
    """DataFusion's SQL options for queries that change nothing: no DDL (CREATE, DROP), no
    DML (INSERT, COPY … TO, which writes files anywhere), no statements (SET, PREPARE)."""
    SQLOptions = require("datafusion", extra="sql").SQLOptions

    return SQLOptions().with_allow_ddl(False).with_allow_dml(False).with_allow_statements(False)


_REFUSED = (
    "DDL not supported",
    "DML not supported",
    "Statement not supported",
    "only supports a single SQL statement",
)


def _engine_error(e: Exception, run_dir, dataset) -> QueryError:
    """An engine's error as one line, naming the tables (or why the query is refused)."""
    msg = " ".join(str(e).split()) or type(e).__name__
    if any(r in msg for r in _REFUSED):
        return QueryError(
            f"query refused: queries are read-only, one SELECT (or WITH … SELECT) at a time; "
            f"no CREATE, INSERT, COPY, SET or second statement ({msg})"
        )
    try:
        known = ", ".join(tables(run_dir, dataset=dataset))
    except QueryError:
        known = "?"
    return QueryError(f"query failed: {msg} (tables: {known})")


def _frame(query: str, run_dir, dataset):
    """The query as a lazy ``datafusion.DataFrame`` (planned, nothing computed)."""
    ctx = context(run_dir, dataset=dataset)
    try:
        return ctx.sql_with_options(query, _read_only())
    except Exception as e:  # DataFusion raises plain Exception subclasses
        raise _engine_error(e, run_dir, dataset) from None


def sql(query: str, run_dir, *, dataset=None, polars: bool = False):
    """Runs an SQL query (DataFusion's dialect) over a run's products; returns a
    ``pyarrow.Table`` (or a ``polars.DataFrame`` with ``polars=True``). Queries are
    read-only: DDL (CREATE, DROP), DML (INSERT, COPY … TO) and statements (SET) are refused
    with :class:`QueryError`, as is a second statement after ``;``.

    >>> quiver.sql("SELECT count(*) AS n FROM tracks WHERE quality >= 2", "out")  # doctest: +SKIP
    """
    if polars:
        require("polars", extra="polars")
    df = _frame(query, run_dir, dataset)
    try:
        return df.to_polars() if polars else df.to_arrow_table()
    except Exception as e:
        raise _engine_error(e, run_dir, dataset) from None


def _write(df, out: pathlib.Path, run_dir, dataset) -> int:
    """Streams the query's result into ``out`` (Parquet or CSV) batch by batch, through a
    temporary file renamed at the end: a failed query leaves ``out`` as it was."""
    import os

    if out.suffix not in (".parquet", ".csv"):
        raise QueryError(f"--output {out}: the file name must end in .parquet or .csv")
    run = pathlib.Path(run_dir).resolve()
    target = out.resolve()
    if target == run or run in target.parents:
        raise QueryError(
            f"--output {out} is inside the run directory {run_dir} being read (a file there would "
            "make it no longer a complete run): write the result elsewhere"
        )
    tmp = target.with_name(f".{target.name}.quiver-query-{os.getpid()}")
    rows = 0
    try:
        schema = df.schema()
        if out.suffix == ".parquet":
            import pyarrow.parquet as pq

            writer = pq.ParquetWriter(tmp, schema)
        else:
            import pyarrow.csv as pcsv

            try:
                writer = pcsv.CSVWriter(tmp, schema)
            except Exception as e:
                raise QueryError(
                    f"cannot write CSV ({' '.join(str(e).split())}); list columns need Parquet, "
                    "or unnest them in SQL"
                ) from None
        with writer:
            try:
                for batch in df.execute_stream():
                    b = batch.to_pyarrow()
                    writer.write_batch(b)
                    rows += b.num_rows
            except QueryError:
                raise
            except OSError:
                raise
            except Exception as e:
                raise _engine_error(e, run_dir, dataset) from None
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
    return rows


def _count(name: str, value: int, lo: int, hi: int | None = None, allowed=()) -> None:
    if value in allowed:
        return
    if value < lo or (hi is not None and value > hi):
        rng = f"at least {lo}" if hi is None else f"from {lo} to {hi}"
        extra = "".join(f" or {v}" for v in allowed)
        raise QueryError(f"{name} must be {rng}{extra} (got {value})")


def main(argv=None) -> int:
    """``quiver query RUN_DIR "SELECT …"``: prints the result as a table (only the rows
    printed are computed), or streams it to Parquet or CSV (``--output file.parquet|file.csv``);
    ``--tables`` lists the tables."""
    import argparse

    ap = argparse.ArgumentParser(
        prog="quiver query",
        description=(
            "SQL (DataFusion) over the products of a run directory (quiver run, or quiver "
            "reconstruct's "
            "partitions). Tables are named by product type: tracks, hits, vertices, ... Queries "
            "are read-only."
        ),
    )
    ap.add_argument("run_dir", help="output directory of a run")
    ap.add_argument("query", nargs="?", help="SQL query")
    ap.add_argument(
        "--dataset", metavar="DIR", help="also the dataset's truth tables, as truth_<name>"
    )
    ap.add_argument(
        "--output",
        metavar="FILE",
        help="write the result to FILE (.parquet or .csv) instead of printing",
    )
    ap.add_argument(
        "--max-rows",
        type=int,
        default=50,
        metavar="N",
        help="rows printed (default 50; -1: all); only those are computed",
    )
    ap.add_argument("--tables", action="store_true", help="list the tables and their columns")
    a = ap.parse_args(argv)
    try:
        _count("--max-rows", a.max_rows, 1, allowed=(-1,))
        if a.tables or not a.query:
            import pyarrow.parquet as pq

            for name, files in tables(a.run_dir, dataset=a.dataset).items():
                schema = pq.read_schema(files[0])
                cols = ", ".join(f"{f.name} {f.type}" for f in schema)
                print(f"{name}: {cols}")
            return 0
        df = _frame(a.query, a.run_dir, a.dataset)
        if a.output:
            rows = _write(df, pathlib.Path(a.output), a.run_dir, a.dataset)
            print(f"{rows} rows -> {a.output}")
            return 0
        pl = require("polars", extra="polars")

        # The row limit is part of the query's plan: the engine stops once it has the rows
        # printed (plus one, to know whether there are more), instead of computing them all.
        limited = a.max_rows != -1 and a.max_rows < 2**62
        try:
            result = (df.limit(a.max_rows + 1) if limited else df).to_arrow_table()
        except Exception as e:
            raise _engine_error(e, a.run_dir, a.dataset) from None
        more = limited and result.num_rows > a.max_rows
        if more:
            result = result.slice(0, a.max_rows)
        names = result.column_names
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise QueryError(
                f"the result has several columns named {', '.join(dup)}: name them apart with "
                "AS (SELECT a.event AS event_a, b.event AS event_b, …)"
            )
        try:
            frame = pl.from_arrow(result)
        except Exception as e:
            raise QueryError(
                f"cannot show the result ({' '.join(str(e).split())}); write it with --output"
            ) from None
        with pl.Config(tbl_rows=-1, tbl_cols=-1, fmt_str_lengths=60, tbl_width_chars=200):
            print(frame)
        if more:
            print(
                f"(the first {a.max_rows} rows; the query has more, not computed: --max-rows N, -1 "
                "for all, "
                "or --output FILE)"
            )
    except (QueryError, OSError, MissingExtraError) as e:
        print(f"error: {e}")
        return 2
    return 0
