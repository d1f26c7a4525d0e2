"""Ctrl-C and SIGTERM: `quiver run` (the Python package's command and the Rust binary) and
Plan.run stop the job within about a second, commit nothing, leave the previous run in the
output directory as it was, leave no staging directory, and say so in one line (Plan.run:
a KeyboardInterrupt raised once the job has stopped)."""

import pathlib
import signal
import subprocess
import sys
import textwrap
import time

import pytest

PLAN = textwrap.dedent("""
    [[step]]
    label = "numbers"
    type = "random_floats"
    count = 200000
    seed = 1
    [[step]]
    label = "squared"
    type = "square"
    input = "numbers"
    [[step]]
    label = "output"
    type = "write_parquet"
    products = ["numbers", "squared"]
""")


def default_signals():
    """SIGINT and SIGTERM as a terminal's command gets them, however pytest was started
    (a script's background job ignores SIGINT, and so would its children)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def snapshot(d: pathlib.Path) -> dict:
    return {p.name: p.read_bytes() for p in sorted(d.iterdir())}


def staging(parent: pathlib.Path) -> list:
    return [p.name for p in parent.iterdir() if "quiver-staging" in p.name]


def wait_for_staging(proc, parent, timeout=30.0):
    t0 = time.monotonic()
    while not staging(parent) or time.monotonic() - t0 < 0.5:
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() - t0 < timeout, "the run never started writing"
        time.sleep(0.02)


def previous_run(command, tmp_path):
    (tmp_path / "plan.toml").write_text(PLAN)
    out = tmp_path / "out"
    args = [*command, "run", "plan.toml", "--output", "out", "--no-progress", "--threads", "2"]
    subprocess.run([*args, "--events", "3"], cwd=tmp_path, check=True, capture_output=True)
    return out, args


@pytest.fixture(params=["python package", "rust binary"])
def command(request, quiver_bin):
    if request.param == "rust binary":
        return [quiver_bin]
    return [str(pathlib.Path(sys.executable).parent / "quiver")]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_quiver_run_interrupted_commits_nothing(command, sig, tmp_path):
    out, args = previous_run(command, tmp_path)
    before = snapshot(out)
    proc = subprocess.Popen(
        [*args, "--events", "1000000"],
        cwd=tmp_path,
        preexec_fn=default_signals,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        wait_for_staging(proc, tmp_path)
        t0 = time.monotonic()
        proc.send_signal(sig)
        _, err = proc.communicate(timeout=20)
        stopped = time.monotonic() - t0
    finally:
        proc.kill()
    assert stopped < 3.0, f"stopped {stopped:.1f} s after the signal"
    assert proc.returncode == 128 + sig, err
    assert (
        err == f"quiver: interrupted; nothing was written, the previous run in {out.resolve()} is "
        "intact\n"
    )
    assert snapshot(out) == before
    assert staging(tmp_path) == []


PLAN_RUN = textwrap.dedent("""
    import os, signal, sys, threading, time
    import quiver

    class Stop(quiver.Step):
        consumes = {"input": "floats"}
        produces = []
        def produce(self, batch):
            if batch.first_event == 3:
                raise KeyboardInterrupt

    plan = (quiver.Plan().add("numbers", "random_floats", count=200000, seed=1)
            .add("squared", "square", input="numbers")
            .add("w", "write_parquet", products=["numbers", "squared"]))
    if sys.argv[2] == "step":
        plan.add("stop", Stop, input="numbers")
    else:
        threading.Timer(1.0, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    t0 = time.monotonic()
    try:
        events = 1000000 if sys.argv[2] == "signal" else 50
        plan.run(events=events, threads=2, output=sys.argv[1], collect=[])
    except KeyboardInterrupt as e:
        print(f"KeyboardInterrupt {time.monotonic() - t0:.2f}: {e}")
    else:
        print("not interrupted")
""")


@pytest.mark.parametrize("source", ["signal", "step"])
def test_plan_run_interrupted_raises_keyboardinterrupt_and_commits_nothing(
    quiver_bin, source, tmp_path
):
    out, _ = previous_run([quiver_bin], tmp_path)
    before = snapshot(out)
    (tmp_path / "job.py").write_text(PLAN_RUN)
    r = subprocess.run(
        [sys.executable, "job.py", str(out), source],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        preexec_fn=default_signals,
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("KeyboardInterrupt "), r.stdout + r.stderr
    took = float(r.stdout.split()[1].rstrip(":"))
    if source == "signal":
        assert took < 1.0 + 3.0
    assert r.stdout.endswith(
        f": interrupted; nothing was written, the previous run in {out.resolve()} is intact\n"
    )
    assert snapshot(out) == before
    assert staging(tmp_path) == []
    assert not (tmp_path / "out.partial").exists()


SLOW_STEP = textwrap.dedent("""
    import time
    import quiver

    class Slow(quiver.Step):
        consumes = {"input": "digis"}
        produces = []
        def produce(self, batch):
            time.sleep(1.0)
""")


def test_quiver_reconstruct_interrupted_prints_one_line(small_dataset, tmp_path):
    from conftest import pixel_chain_toml

    (tmp_path / "slow.py").write_text(SLOW_STEP)
    (tmp_path / "plan.toml").write_text(
        pixel_chain_toml("digis")
        + textwrap.dedent("""
        [[step]]
        label = "slow"
        type = "python"
        backend = "python"
        module = "slow.py"
        class = "Slow"
        input = "digis"
        [[step]]
        label = "out"
        type = "write_parquet"
        products = ["digis"]
    """)
    )
    cmd = [
        str(pathlib.Path(sys.executable).parent / "quiver"),
        "reconstruct",
        "plan.toml",
        "--input",
        str(small_dataset),
        "--output",
        "out",
        "--workers",
        "1",
        "--partition-events",
        "1",
    ]
    proc = subprocess.Popen(
        cmd,
        cwd=tmp_path,
        preexec_fn=default_signals,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(4.0)  # the cluster is up and the partitions (1 s each) are running
        assert proc.poll() is None, proc.communicate()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == 130, out + err
    assert "Traceback" not in err, err
    assert (
        "quiver reconstruct: interrupted; complete partitions stay in the output directory and a "
        "rerun skips them\n" in err
    )
