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
    """LocalCluster(n_workers=2, threads_per_worker=1, processes=True), as the issue asks."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as c:
        yield c


def product_files(run_dir):
    return sorted(p.name for p in pathlib.Path(run_dir).glob("*.parquet") if p.name != "histograms.parquet")


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
        "part-00000000-00000004", "part-00000005-00000009", "part-00000010-00000011"]
    assert not list(out.glob(".tmp-*"))
    # Per-step time summed over the workers: every step of the plan, and it adds up.
    assert set(s.step_seconds) >= {"raw", "clusters", "hits", "tracks", "vertices"}
    assert sum(s.step_seconds.values()) == pytest.approx(sum(sum(m["step_seconds"].values()) for m in s.manifests))
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
    mtimes = {p: p.stat().st_mtime_ns for p in out.rglob("*")
              if p.is_file() and p.name not in (qd.SUMMARY, qd.OUTPUT_MANIFEST)}
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
    s = qd.reconstruct(PLAN, small_dataset, tmp_path / "dask", client=client, events=6, partition_events=3,
                       collect=["tracks", "vertices:vertices"])
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
            batch.put("floats", {"value": np.zeros(0, np.float32)}, offsets=[0] * (batch.n_events + 1))


    class FailAt(quiver.Step):
        """Raises on every attempt at event EVENT."""
        consumes = {"input": "fed_raw"}
        produces = ["floats"]
        params = {"event": 0, "marker": ""}

        def produce(self, batch):
            if batch.first_event <= self.params["event"] < batch.first_event + batch.n_events:
                raise ValueError("bad event")
            batch.put("floats", {"value": np.zeros(0, np.float32)}, offsets=[0] * (batch.n_events + 1))
''')


def crash_plan(tmp_path, event, cls="CrashOnce"):
    """plans/pixel.toml with CrashOnce (or FailAt) after the raw data, acting at `event`."""
    step = tmp_path / "crash_step.py"
    step.write_text(CRASH_STEP)
    marker = tmp_path / "crashed"
    text = PLAN.read_text().replace('type = "read_raw"\n', f'''type = "read_raw"

[[step]]
label = "crash"
type = "python"
backend = "python"
module = "{step}"
class = "{cls}"
input = "raw"
event = {event}
marker = "{marker}"
''', 1)
    assert cls in text
    return text, marker


def test_killed_attempt_leaves_nothing_that_looks_complete(small_dataset, tmp_path):
    """A process killed mid-partition: only an empty .tmp-* directory remains, with the
    run's staging directory beside it (the files of the events it had written), no part-*
    directory, and queries refuse the output."""
    text, marker = crash_plan(tmp_path, event=3)
    out = tmp_path / "out"
    code = (f"import quiver.dask as qd\n"
            f"qd.run_partition({text!r}, 'crash', {str(small_dataset)!r}, {str(out)!r}, 0, 5, {{}}, 1, 1)\n")
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
    assert [(f, l) for f, l, _ in qd.complete_parts(out)] == [(0, 4), (5, 9), (10, 11)]
    assert sorted(p.name for p in out.iterdir()) == [
        "part-00000000-00000004", "part-00000005-00000009", "part-00000010-00000011", qd.OUTPUT_MANIFEST,
        qd.SUMMARY]
    assert qd.read_manifest(out / "part-00000005-00000009")["pid"] != killed_pid
    assert_same_products(out, small_run)
    # The nanny restarts the killed worker: the cluster gets its two workers back.
    client.wait_for_workers(2, timeout=120)


def test_failed_partition_is_reported_and_rerun(client, small_dataset, small_run, tmp_path):
    text, _ = crash_plan(tmp_path, event=6, cls="FailAt")
    out = tmp_path / "dask"
    s = qd.reconstruct(text, small_dataset, out, client=client, partition_events=5, retries=1)
    assert not s.ok and [f["partition"] for f in s.failures] == [(5, 5)]
    assert "step 'crash' failed on events" in s.failures[0]["error"] and "bad event" in s.failures[0]["error"]
    assert "FAILED events 5..10" in str(s)
    assert [(f, l) for f, l, _ in qd.complete_parts(out)] == [(0, 4), (10, 11)]
    assert not list(out.glob(".tmp-*"))
    # With the plan fixed (the step now acts past the last event), overwrite=True redoes every
    # partition: the plan is part of a partition's identity.
    fixed = text.replace("event = 6\n", "event = 99\n")
    again = qd.reconstruct(fixed, small_dataset, out, client=client, partition_events=5, overwrite=True)
    assert again.ok and again.done == [(0, 5), (5, 5), (10, 2)]
    assert_same_products(out, small_run)


def test_command_line(client, small_dataset, small_run, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["reconstruct", str(PLAN), "--input", str(small_dataset), "--output", str(out),
            "--scheduler", client.scheduler.address, "--events", "4", "--partition-events", "2"]
    assert quiver.cli.main(args) == 0
    printed = capsys.readouterr().out
    assert "events 4 in 2 partitions (0 already complete, 0 failed)" in printed
    assert "throughput" in printed and "clusters" in printed
    assert quiver.cli.main(args) == 0
    assert "events 0 in 0 partitions (2 already complete, 0 failed)" in capsys.readouterr().out
    summary = json.loads((out / qd.SUMMARY).read_text())
    assert summary["events_total"] == 4
    # Errors name the problem, with exit status 2.
    assert quiver.cli.main(["reconstruct", str(PLAN), "--input", str(tmp_path / "nothing"), "--output",
                            str(out), "--scheduler", client.scheduler.address]) == 2
    assert "manifest.toml" in capsys.readouterr().out


def test_plan_without_output_is_refused(client, small_dataset, tmp_path):
    text = PLAN.read_text().split('[[step]]\nlabel = "output"')[0]
    with pytest.raises(qd.ReconstructError, match="writes no products"):
        qd.reconstruct(text, small_dataset, tmp_path / "x", client=client)
    with pytest.raises(qd.ReconstructError, match="outside the dataset"):
        qd.reconstruct(PLAN, small_dataset, tmp_path / "x", client=client, first_event=12)


def test_quiver_package_is_importable_without_dask():
    """quiver.dask imports distributed only when used."""
    code = "import sys, quiver, quiver.dask; assert 'distributed' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ})


def test_workers_get_the_command_s_allocator_settings_despite_the_nanny():
    """Dask's nanny sets MALLOC_TRIM_THRESHOLD_; the plain setting respects a user's choice,
    the worker's overrides it (quiver_columnar::tune, not a second copy in Python)."""
    code = ("from quiver import _quiver\n"
            "import quiver.dask as qd\n"
            "assert _quiver.tune_malloc() is False, 'a user setting was overridden'\n"
            "assert _quiver.tune_malloc(always=True) is True\n"
            "qd._tune_malloc()\n")
    env = dict(os.environ, MALLOC_TRIM_THRESHOLD_="65536")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=60)
    assert r.returncode == 0, r.stderr
