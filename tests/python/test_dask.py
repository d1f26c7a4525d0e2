"""Batch reconstruction on a Dask LocalCluster of 2 worker processes (quiver.dask): the merged
partitions equal a single-process run product by product, reruns skip complete partitions,
and a worker killed mid-partition leaves nothing that looks complete and one copy in the end."""

import json
import os
import pathlib
import subprocess
import sys
import textwrap

import distributed
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
import quiver
import quiver.dask as qd
from quiver.query import QueryError

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLAN = ROOT / "plans/pixel.toml"


@pytest.fixture(scope="module")
def client():
    """LocalCluster(n_workers=2, threads_per_worker=1, processes=True), as users run it."""
    with (
        distributed.LocalCluster(
            n_workers=2,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
            silence_logs=40,
        ) as cluster,
        distributed.Client(cluster) as c,
    ):
        yield c


def product_files(run_dir):
    return sorted(
        p.name for p in pathlib.Path(run_dir).glob("*.parquet") if p.name != "histograms.parquet"
    )


def assert_same_products(dask_out, single):
    """Every product file: the partitions concatenated in event order equal the single run's."""
    parts = [d for _, _, d in qd.complete_parts(dask_out)]
    names = product_files(single)
    assert names and all(product_files(d) == names for d in parts)
    for name in names:
        merged = pa.concat_tables([pq.read_table(d / name) for d in parts])
        expected = pq.read_table(single / name)
        assert merged.num_rows == expected.num_rows, name
        assert merged.equals(expected), f"{name} differs from the single-process run"


def test_partitions_cover_the_range():
    assert qd.partitions(12, 5) == [(0, 5), (5, 5), (10, 2)]
    assert qd.partitions(4, 10, first_event=3) == [(3, 4)]
    assert qd.part_name(5, 5) == "part-00000005-00000009"
    with pytest.raises(ValueError, match="partition_events"):
        qd.partitions(10, 0)


def test_reconstruct_equals_single_run_and_reruns_skip(client, small_dataset, small_run, tmp_path):
    out = tmp_path / "dask"
    s = qd.reconstruct(PLAN, small_dataset, out, client=client, partition_events=5)
    print("\n" + str(s))
    assert s.ok and s.events == 12 and s.workers == 2
    assert s.done == [(0, 5), (5, 5), (10, 2)] and s.skipped == []
    assert [d.name for _, _, d in qd.complete_parts(out)] == [
        "part-00000000-00000004",
        "part-00000005-00000009",
        "part-00000010-00000011",
    ]
    assert not list(out.glob(".tmp-*"))
    # Per-step time summed over the workers: every step of the plan, and it adds up.
    assert set(s.step_seconds) >= {"raw", "clusters", "hits", "tracks", "vertices"}
    assert sum(s.step_seconds.values()) == pytest.approx(
        sum(sum(m["step_seconds"].values()) for m in s.manifests)
    )
    assert s.throughput > 0
    m = qd.read_manifest(out / "part-00000005-00000009")
    assert m["first_event"] == 5 and m["events"] == 5 and m["last_event"] == 9
    assert m["dataset_checksum"] == qd.dataset_info(small_dataset)[1]
    assert m["plan_sha256"] and m["code_version"].startswith(quiver.__version__)
    assert_same_products(out, small_run)

    # Events keep their absolute numbers.
    tracks = pq.read_table(out / "part-00000005-00000009" / "tracks.tracks.parquet")
    assert set(tracks.column("event").to_pylist()) <= set(range(5, 10))

    # The merged view (quiver.open / quiver.sql) equals the single run, histograms summed.
    merged, single = quiver.open(out), quiver.open(small_run)
    assert sorted(merged) == sorted(single)
    for name in merged:
        assert merged[name].collect().equals(single[name].collect()), name
    q = "SELECT event, count(*) AS n, sum(pt) AS s FROM tracks GROUP BY event ORDER BY event"
    assert quiver.sql(q, out).equals(quiver.sql(q, small_run))

    # A rerun skips every complete partition and touches no file.
    mtimes = {
        p: p.stat().st_mtime_ns
        for p in out.rglob("*")
        if p.is_file() and p.name not in (qd.SUMMARY, qd.OUTPUT_MANIFEST)
    }
    again = qd.reconstruct(PLAN, small_dataset, out, client=client, partition_events=5)
    assert again.ok and again.events == 0 and again.done == [] and len(again.skipped) == 3
    assert again.events_total == 12
    assert {p: p.stat().st_mtime_ns for p in mtimes} == mtimes

    # A partition removed is the only one run again.
    import shutil

    shutil.rmtree(out / "part-00000010-00000011")
    third = qd.reconstruct(PLAN, small_dataset, out, client=client, partition_events=5)
    assert third.done == [(10, 2)] and third.events == 2
    assert_same_products(out, small_run)

    # Another plan, or another partitioning, is refused rather than mixed in.
    other_plan = PLAN.read_text() + "\n# changed\n"
    with pytest.raises(qd.ReconstructError, match="another plan_sha256"):
        qd.reconstruct(other_plan, small_dataset, out, client=client, partition_events=5)
    with pytest.raises(qd.ReconstructError, match="overlaps"):
        qd.reconstruct(PLAN, small_dataset, out, client=client, partition_events=4)


def test_collect_returns_pyarrow_tables(client, small_dataset, small_run, tmp_path):
    s = qd.reconstruct(
        PLAN,
        small_dataset,
        tmp_path / "dask",
        client=client,
        events=6,
        partition_events=3,
        collect=["tracks", "vertices:vertices"],
    )
    assert s.ok and s.events == 6
    tracks = s.products["tracks"]
    assert isinstance(tracks, pa.Table) and tracks.column_names[0] == "event"
    expected = pq.read_table(small_run / "tracks.tracks.parquet")
    expected = expected.filter(pc.less(expected.column("event"), 6))
    assert tracks.equals(expected)
    assert s.products["vertices:vertices"].num_rows > 0


CRASH_STEP = textwrap.dedent('''
    """A step that kills its process the first time it sees event EVENT (a worker dying
    mid-partition); the marker file makes the retry go through."""
    import os

    import numpy as np
    import quiver


    class CrashOnce(quiver.Step):
        consumes = {"input": "fed_raw"}
        produces = ["floats"]
        params = {"event": 0, "marker": ""}

        def produce(self, batch):
            e = self.params["event"]
            if batch.first_event <= e < batch.first_event + batch.n_events:
                try:
                    fd = os.open(self.params["marker"], os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    pass
                else:
                    os.write(fd, str(os.getpid()).encode())
                    os.close(fd)
                    os._exit(17)
            batch.put(
                "floats", {"value": np.zeros(0, np.float32)}, offsets=[0] * (batch.n_events + 1)
            )


    class FailAt(quiver.Step):
        """Raises on every attempt at event EVENT."""
        consumes = {"input": "fed_raw"}
        produces = ["floats"]
        params = {"event": 0, "marker": ""}

        def produce(self, batch):
            if batch.first_event <= self.params["event"] < batch.first_event + batch.n_events:
                raise ValueError("bad event")
            batch.put(
                "floats", {"value": np.zeros(0, np.float32)}, offsets=[0] * (batch.n_events + 1)
            )
''')


def crash_plan(tmp_path, event, cls="CrashOnce"):
    """plans/pixel.toml with CrashOnce (or FailAt) after the raw data, acting at `event`."""
    step = tmp_path / "crash_step.py"
    step.write_text(CRASH_STEP)
    marker = tmp_path / "crashed"
    text = PLAN.read_text().replace(
        'type = "read_raw"\n',
        f'''type = "read_raw"

[[step]]
label = "crash"
type = "python"
backend = "python"
module = "{step}"
class = "{cls}"
input = "raw"
event = {event}
marker = "{marker}"
''',
        1,
    )
    assert cls in text
    return text, marker


def test_killed_attempt_leaves_nothing_that_looks_complete(small_dataset, tmp_path):
    """A process killed mid-partition: only an empty .tmp-* directory remains, with the
    run's staging directory beside it (the files of the events it had written), no part-*
    directory, and queries refuse the output."""
    text, marker = crash_plan(tmp_path, event=3)
    out = tmp_path / "out"
    code = (
        f"import quiver.dask as qd\n"
        f"qd.run_partition({text!r}, 'crash', {str(small_dataset)!r}, {str(out)!r}, "
        "0, 5, {}, 1, 1)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.returncode == 17, r.stderr
    assert marker.exists()
    assert qd.complete_parts(out) == []
    (tmp,) = out.glob(".quiver-tmp-00000000-00000004.*")
    assert not any(tmp.iterdir()), "the run had not committed, its directory stays empty"
    (staging,) = out.glob(f".{tmp.name}.quiver-staging-*")
    written = [p for p in staging.iterdir() if p.is_file()]
    assert written, "the killed attempt had written part of its files"
    assert all(".tmp-" in p.name for p in written), written  # no final product name
    with pytest.raises(QueryError, match="holds no complete Quiver run"):
        quiver.open(out)


def test_worker_killed_mid_partition_gives_one_copy(client, small_dataset, small_run, tmp_path):
    text, marker = crash_plan(tmp_path, event=7)
    out = tmp_path / "dask"
    s = qd.reconstruct(text, small_dataset, out, client=client, partition_events=5, batch_size=1)
    print("\n" + str(s))
    assert marker.exists(), "the worker was not killed"
    killed_pid = int(marker.read_text())
    assert s.ok, s.failures
    assert s.done == [(0, 5), (5, 5), (10, 2)]
    # Exactly one copy of each partition, no temporary directory left.
    assert [(first, last) for first, last, _ in qd.complete_parts(out)] == [
        (0, 4),
        (5, 9),
        (10, 11),
    ]
    assert sorted(p.name for p in out.iterdir()) == [
        "part-00000000-00000004",
        "part-00000005-00000009",
        "part-00000010-00000011",
        qd.OUTPUT_MANIFEST,
        qd.SUMMARY,
    ]
    assert qd.read_manifest(out / "part-00000005-00000009")["pid"] != killed_pid
    assert_same_products(out, small_run)
    # The nanny restarts the killed worker: the cluster gets its two workers back.
    client.wait_for_workers(2, timeout=120)


def test_failed_partition_is_reported_and_rerun(client, small_dataset, small_run, tmp_path):
    text, _ = crash_plan(tmp_path, event=6, cls="FailAt")
    out = tmp_path / "dask"
    s = qd.reconstruct(text, small_dataset, out, client=client, partition_events=5, retries=1)
    assert not s.ok and [f["partition"] for f in s.failures] == [(5, 5)]
    assert (
        "step 'crash' failed on events" in s.failures[0]["error"]
        and "bad event" in s.failures[0]["error"]
    )
    assert "FAILED events 5..10" in str(s)
    assert [(first, last) for first, last, _ in qd.complete_parts(out)] == [(0, 4), (10, 11)]
    assert not list(out.glob(".tmp-*"))
    # With the plan fixed (the step now acts past the last event), overwrite=True redoes every
    # partition: the plan is part of a partition's identity.
    fixed = text.replace("event = 6\n", "event = 99\n")
    again = qd.reconstruct(
        fixed, small_dataset, out, client=client, partition_events=5, overwrite=True
    )
    assert again.ok and again.done == [(0, 5), (5, 5), (10, 2)]
    assert_same_products(out, small_run)


def test_command_line(client, small_dataset, small_run, tmp_path, capsys):
    out = tmp_path / "cli"
    args = [
        "reconstruct",
        str(PLAN),
        "--input",
        str(small_dataset),
        "--output",
        str(out),
        "--scheduler",
        client.scheduler.address,
        "--events",
        "4",
        "--partition-events",
        "2",
    ]
    assert quiver.cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "events 4 in 2 partitions (0 already complete, 0 failed)" in printed
    assert "throughput" in printed and "clusters" in printed
    assert quiver.cli.main(args) == 0
    assert "events 0 in 0 partitions (2 already complete, 0 failed)" in capsys.readouterr().out
    summary = json.loads((out / qd.SUMMARY).read_text())
    assert summary["events_total"] == 4
    # Errors name the problem, with exit status 2.
    assert (
        quiver.cli.main(
            [
                "reconstruct",
                str(PLAN),
                "--input",
                str(tmp_path / "nothing"),
                "--output",
                str(out),
                "--scheduler",
                client.scheduler.address,
            ]
        )
        == 2
    )
    assert "manifest.toml" in capsys.readouterr().out


def test_plan_without_output_is_refused(client, small_dataset, tmp_path):
    text = PLAN.read_text().split('[[step]]\nlabel = "output"')[0]
    with pytest.raises(qd.ReconstructError, match="writes no products"):
        qd.reconstruct(text, small_dataset, tmp_path / "x", client=client)
    with pytest.raises(qd.ReconstructError, match="outside the dataset"):
        qd.reconstruct(PLAN, small_dataset, tmp_path / "x", client=client, first_event=12)
    # A plan that is not TOML: one line naming it, not a traceback.
    bad = tmp_path / "bad.toml"
    bad.write_text("[[step]\nlabel = ")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "quiver",
            "reconstruct",
            str(bad),
            "--input",
            str(small_dataset),
            "--output",
            str(tmp_path / "y"),
            "--scheduler",
            client.scheduler.address,
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 2 and r.stdout.startswith(f"error: plan {bad}: not valid TOML"), (
        r.stdout + r.stderr
    )
    assert r.stdout.count("\n") == 1 and not (tmp_path / "y").exists()


def test_quiver_package_is_importable_without_dask():
    """quiver.dask imports distributed only when used."""
    code = "import sys, quiver, quiver.dask; assert 'distributed' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


def test_workers_get_the_command_s_allocator_settings_despite_the_nanny():
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_; the plain setting respects a user's choice,
    the worker's overrides it (quiver_columnar::tune, not a second copy in Python)."""
    code = (
        "from quiver import _quiver\n"
        "import quiver.dask as qd\n"
        "assert _quiver.tune_malloc() is False, 'a user setting was overridden'\n"
        "assert _quiver.tune_malloc(always=True) is True\n"
        "qd._tune_malloc()\n"
    )
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="65536")
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60
    )
    assert r.returncode == 0, r.stderr


def test_only_quiver_s_own_leftovers_are_removed(tmp_path):
    """_cleanup_temp removed every .tmp-* / .old-* of the output directory, a user's too.
    Now only names with the Quiver marker, of this host, of a dead process (or this one)."""
    out = tmp_path / "out"
    out.mkdir()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    dead_pid, alive_pid = int(dead.stdout), os.getppid()
    host = qd._HOST
    names = {
        ".tmp-x": False,
        ".old-y": False,
        ".tmp-00000000-00000004-0123456789ab": False,  # a user's
        f".quiver-tmp-00000000-00000004.{host}-{dead_pid}-0123456789ab": True,
        f"..quiver-tmp-00000000-00000004.{host}-{dead_pid}-0123456789ab"
        f".quiver-staging-{host}-{dead_pid}": True,
        f".quiver-tmp-00000005-00000009.{host}-{dead_pid}-0123456789ab.partial": True,
        f".quiver-old-part-00000000-00000004.{host}-{os.getpid()}-0123456789ab": True,
        f".quiver-tmp-00000000-00000004.{host}-{alive_pid}-0123456789ab": False,  # still running
        f".quiver-tmp-00000000-00000004.{host}x-{dead_pid}-0123456789ab": False,  # another host
    }
    for name in names:
        (out / name).mkdir()
        (out / name / "data").write_text("keep")
    qd._cleanup_temp(out)
    assert {p.name for p in out.iterdir()} == {n for n, gone in names.items() if not gone}
    assert (out / ".tmp-x" / "data").read_text() == "keep"


def test_foreign_output_directories_are_refused_and_untouched(
    client, small_dataset, small_run, tmp_path
):
    """reconstruct wrote into a plain `quiver run` output and into a directory of a user's
    files (removing its .tmp-* / .old-* directories at the end)."""
    import shutil

    def state(d):
        return {p: (p.stat().st_size, p.stat().st_mtime_ns) for p in d.rglob("*")}

    run = tmp_path / "run"
    shutil.copytree(small_run, run)
    before = state(run)
    with pytest.raises(
        qd.ReconstructError, match=rf"{run} holds a `quiver run` output .*choose another --output"
    ):
        qd.reconstruct(PLAN, small_dataset, run, client=client, events=2, partition_events=2)
    assert state(run) == before
    quiver.query.verified(run)

    mine = tmp_path / "mine"
    (mine / ".tmp-x").mkdir(parents=True)
    (mine / ".old-y").mkdir()
    (mine / ".tmp-x" / "notes").write_text("mine")
    before = state(mine)
    with pytest.raises(
        qd.ReconstructError, match=r"did not write: \.old-y, \.tmp-x; .*move those files away"
    ):
        qd.reconstruct(PLAN, small_dataset, mine, client=client, events=2, partition_events=2)
    assert state(mine) == before
    # From the command line: one line, exit status 2.
    before = state(run)
    args = [
        "reconstruct",
        str(PLAN),
        "--input",
        str(small_dataset),
        "--output",
        str(run),
        "--scheduler",
        client.scheduler.address,
        "--events",
        "2",
    ]
    r = subprocess.run(
        [sys.executable, "-m", "quiver", *args], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2 and r.stdout.startswith("error: ") and r.stdout.count("\n") == 1, (
        r.stdout + r.stderr
    )
    assert "quiver run" in r.stdout and state(run) == before


def test_a_failed_partition_makes_the_output_unreadable_naming_its_events(
    client, small_dataset, small_run, tmp_path, capsys
):
    """After a failed partition, quiver.open read the other partitions as the run (events 0
    to 4 and 10 to 11 as "12 events") and quiver query counted them, exit status 0."""
    import quiver.cli

    text, _ = crash_plan(tmp_path, event=6, cls="FailAt")
    out = tmp_path / "dask"
    s = qd.reconstruct(text, small_dataset, out, client=client, partition_events=5, retries=0)
    assert [f["partition"] for f in s.failures] == [(5, 5)]
    top = json.loads((out / qd.OUTPUT_MANIFEST).read_text())
    assert top["complete"] is False and top["missing_events"] == [[5, 9]]
    assert s.missing == [(5, 9)]
    assert "output INCOMPLETE, not readable until a rerun fills it: missing events 5 to 9" in str(s)
    missing = (
        r"incomplete quiver reconstruct output: missing events 5 to 9 "
        r"\(part-00000005-00000009 absent\)"
    )
    with pytest.raises(QueryError, match=missing):
        quiver.open(out)
    with pytest.raises(QueryError, match=missing):
        quiver.sql("SELECT count(*) FROM tracks", out)
    assert quiver.cli.main(["query", str(out), "SELECT count(*) FROM tracks"]) == 2
    printed = capsys.readouterr().out
    assert "missing events 5 to 9" in printed and printed.count("\n") == 1

    # A rerun with the plan fixed and overwrite=True completes it; then it reads as before.
    fixed = text.replace("event = 6\n", "event = 99\n")
    assert qd.reconstruct(
        fixed, small_dataset, out, client=client, partition_events=5, overwrite=True
    ).ok
    assert json.loads((out / qd.OUTPUT_MANIFEST).read_text())["complete"] is True
    assert quiver.open(out).event_range() == (0, 12)
    assert quiver.sql("SELECT count(*) AS n FROM tracks", out).equals(
        quiver.sql("SELECT count(*) AS n FROM tracks", small_run)
    )

    # A partition removed afterwards, or the output's manifest, is named too.
    import shutil

    shutil.move(out / "part-00000010-00000011", tmp_path / "aside")
    with pytest.raises(
        QueryError, match=r"missing events 10 to 11 \(part-00000010-00000011 absent\)"
    ):
        quiver.open(out)
    shutil.move(tmp_path / "aside", out / "part-00000010-00000011")
    quiver.open(out)
    (out / qd.OUTPUT_MANIFEST).unlink()
    with pytest.raises(QueryError, match=f"no {qd.OUTPUT_MANIFEST}"):
        quiver.open(out)


def test_outputs_of_two_plans_are_never_read_as_one(client, small_dataset, tmp_path):
    """Two reconstructs with different plans (disjoint events) into one directory were
    accepted and read as one run."""
    import shutil

    out = tmp_path / "dask"
    other = PLAN.read_text() + "\n# another plan\n"
    assert qd.reconstruct(PLAN, small_dataset, out, client=client, events=5, partition_events=5).ok
    with pytest.raises(qd.ReconstructError, match="another plan_sha256"):
        qd.reconstruct(
            other, small_dataset, out, client=client, first_event=5, events=5, partition_events=5
        )
    assert [d.name for _, _, d in qd.complete_parts(out)] == ["part-00000000-00000004"]
    assert quiver.open(out).event_range() == (0, 5)

    # A partition of another plan's output moved in: refused by the readers.
    b = tmp_path / "b"
    assert qd.reconstruct(other, small_dataset, b, client=client, events=10, partition_events=5).ok
    shutil.copytree(b / "part-00000005-00000009", out / "part-00000005-00000009")
    with pytest.raises(
        QueryError, match="partitions not part of the output .*part-00000005-00000009"
    ):
        quiver.open(out)
    shutil.rmtree(out / "part-00000000-00000004")
    shutil.copytree(b / "part-00000000-00000004", out / "part-00000000-00000004")
    shutil.rmtree(out / "part-00000005-00000009")
    with pytest.raises(
        QueryError, match="differs from the output's quiver-reconstruct.json in plan_sha256"
    ):
        quiver.sql("SELECT count(*) FROM tracks", out)

    # Two calls of the same plan with a gap between their events: resumable, unreadable until
    # filled.
    g = tmp_path / "gap"
    assert qd.reconstruct(PLAN, small_dataset, g, client=client, events=3, partition_events=3).ok
    s = qd.reconstruct(
        PLAN, small_dataset, g, client=client, first_event=6, events=3, partition_events=3
    )
    assert s.ok and s.missing == [(3, 5)] and "missing events 3 to 5" in str(s)
    with pytest.raises(QueryError, match=r"missing events 3 to 5 \(no partition\)"):
        quiver.open(g)
    s = qd.reconstruct(PLAN, small_dataset, g, client=client, events=9, partition_events=3)
    assert s.done == [(3, 3)] and s.skipped == [(0, 3), (6, 3)] and s.missing == []
    assert quiver.open(g).event_range() == (0, 9)

    # overwrite=True replaces the whole output: the other plan's events only.
    c = tmp_path / "c"
    assert qd.reconstruct(PLAN, small_dataset, c, client=client, events=5, partition_events=5).ok
    assert qd.reconstruct(
        other,
        small_dataset,
        c,
        client=client,
        first_event=5,
        events=5,
        partition_events=5,
        overwrite=True,
    ).ok
    assert [d.name for _, _, d in qd.complete_parts(c)] == ["part-00000005-00000009"]
    assert quiver.open(c).event_range() == (5, 5)
    assert (
        qd.read_manifest(c / "part-00000005-00000009")["plan_sha256"]
        == qd.read_manifest(b / "part-00000005-00000009")["plan_sha256"]
    )


@pytest.mark.parametrize(
    "option, value",
    [
        ("--workers", "0"),
        ("--workers", "-3"),
        ("--workers", "100000"),
        ("--partition-events", "0"),
        ("--partition-events", "-1"),
        ("--events", "-5"),
        ("--events", "0"),
        ("--events", "13"),
        ("--events", str(10**30)),
        ("--first-event", "-1"),
        ("--first-event", "12"),
        ("--threads", "0"),
        ("--threads", str(10**9)),
        ("--batch-size", "0"),
        ("--batch-size", str(10**30)),
        ("--retries", "-1"),
    ],
)
def test_numeric_options_get_one_line_errors(client, small_dataset, tmp_path, option, value):
    """--workers 0 hung, --partition-events 0 printed a traceback, --events -5 succeeded
    doing nothing, --events beyond the dataset was cut to it silently."""
    out = tmp_path / "out"
    args = [
        "reconstruct",
        str(PLAN),
        "--input",
        str(small_dataset),
        "--output",
        str(out),
        option,
        value,
    ]
    if option != "--workers":
        args += ["--scheduler", client.scheduler.address]
    r = subprocess.run(
        [sys.executable, "-m", "quiver", *args], capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stdout.startswith("error: ") and r.stdout.count("\n") == 1 and not r.stderr.strip(), (
        r.stdout + r.stderr
    )
    name = option[2:].replace("-", "_")
    assert name in r.stdout or "outside the dataset" in r.stdout, r.stdout
    assert not out.exists()


def test_default_partitioning_gives_every_worker_work():
    """The fixed default of 50 events made one partition of the README's 20 events, leaving
    the second worker idle: about 4 partitions per worker thread, 5 to 50 events each."""
    assert qd.default_partition_events(20, 2) == 5
    assert qd.partitions(20, qd.default_partition_events(20, 2)) == [
        (0, 5),
        (5, 5),
        (10, 5),
        (15, 5),
    ]
    assert qd.default_partition_events(100, 2) == 13
    assert qd.default_partition_events(10_000, 2) == 50
    assert qd.default_partition_events(3, 2) == 5
    assert qd.default_partition_events(1000, 64) == 5
    assert qd.default_partition_events(20, 0) == 5  # a cluster without workers yet


def test_default_partitioning_follows_the_cluster_and_an_earlier_output(
    client, small_dataset, small_run, tmp_path
):
    out = tmp_path / "default"
    s = qd.reconstruct(PLAN, small_dataset, out, client=client)
    # 12 events on 2 workers: partitions of 5, both workers busy (50 would make one).
    assert s.ok and s.done == [(0, 5), (5, 5), (10, 2)], s.done
    assert_same_products(out, small_run)
    # An output made with another partitioning keeps it on a rerun with the default,
    # whatever the cluster: every partition is found complete, none redone.
    other = tmp_path / "by4"
    assert qd.reconstruct(PLAN, small_dataset, other, client=client, partition_events=4).ok
    again = qd.reconstruct(PLAN, small_dataset, other, client=client)
    assert again.ok and again.done == [] and again.skipped == [(0, 4), (4, 4), (8, 4)]


def _on_a_terminal(args):
    """Runs ``python -m quiver ARGS`` with stdin, stdout and stderr on a new pseudo-terminal;
    returns everything the terminal received and the exit status."""
    import pty

    master, slave = pty.openpty()
    p = subprocess.Popen(
        [sys.executable, "-m", "quiver", *args],
        stdin=slave,
        stdout=slave,
        stderr=slave,
        close_fds=True,
    )
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: every descriptor of the terminal's other side is closed
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    return seen.decode(errors="replace"), p.wait(timeout=120)


def test_progress_line_on_a_terminal_and_nothing_when_piped(client, small_dataset, tmp_path):
    def args(name, *extra):
        return [
            "reconstruct",
            str(PLAN),
            "--input",
            str(small_dataset),
            "--output",
            str(tmp_path / name),
            "--scheduler",
            client.scheduler.address,
            "--partition-events",
            "3",
            *extra,
        ]

    seen, code = _on_a_terminal(args("tty"))
    assert code == 0, seen
    assert "/4 partitions" in seen and " running " in seen and " failed " in seen, seen
    assert "events/s" in seen and "eta " in seen and "\r[" in seen, seen
    assert "events 12 in 4 partitions" in seen, seen

    r = subprocess.run(
        [sys.executable, "-m", "quiver", *args("piped")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    assert "eta " not in r.stdout + r.stderr and "\r" not in r.stdout + r.stderr, (
        r.stdout + r.stderr
    )
    assert "events 12 in 4 partitions" in r.stdout

    seen, code = _on_a_terminal(args("quiet", "--no-progress"))
    assert code == 0 and "eta " not in seen and "events 12 in 4 partitions" in seen, seen
