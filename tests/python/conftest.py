import gc
import os
import pathlib
import shutil
import subprocess
import tempfile

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]

# The session's temporary files (this process's, its subprocesses' and the Rust side's) go to
# a directory of their own, so that what the tests leave behind can be told apart from what
# other programs on the machine write to the temp dir.
_SYSTEM_TMP = tempfile.gettempdir()
SESSION_TMP = pathlib.Path(tempfile.mkdtemp(prefix="quiver-pytest-", dir=_SYSTEM_TMP))
os.environ["TMPDIR"] = str(SESSION_TMP)
tempfile.tempdir = None  # gettempdir() reads TMPDIR again


def leftovers(tmp: pathlib.Path) -> list[str]:
    """Entries named quiver* in `tmp`: what Quiver or the tests made there and did not remove."""
    return sorted(p.name for p in tmp.iterdir() if p.name.lower().startswith("quiver"))


def pytest_sessionfinish(session, exitstatus):
    """Fails the session when it left temporary files behind (`quiver-run-*` of runs without
    an output directory, a notebook's scratch directory, ...)."""
    gc.collect()  # results nobody holds remove their temporary output now
    left = leftovers(SESSION_TMP)
    if left:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
        print(f"\nerror: the tests left temporary files in {SESSION_TMP}: {', '.join(left)}")
    else:
        shutil.rmtree(SESSION_TMP, ignore_errors=True)


def pixel_chain_toml(until: str) -> str:
    """The steps of the default chain (plans/pixel.toml) up to and including label `until`,
    as TOML text: the inputs a port is tested on, exactly as the default plan makes them."""
    text = (ROOT / "plans/pixel.toml").read_text()
    blocks = text.split("[[step]]")[1:]
    for i, b in enumerate(blocks):
        if f'label = "{until}"' in b:
            return "".join("[[step]]" + x for x in blocks[: i + 1])
    raise KeyError(f"plans/pixel.toml has no step '{until}'")


@pytest.fixture(scope="session")
def quiver_bin():
    """The quiver binary built by `cargo test` (scripts/test.sh passes its path)."""
    path = os.environ.get("QUIVER_BIN") or shutil.which("quiver")
    if not path or not pathlib.Path(path).exists():
        pytest.fail("set QUIVER_BIN to the quiver binary (scripts/test.sh does)")
    return path


@pytest.fixture(scope="session")
def square_run(quiver_bin, tmp_path_factory):
    """Output directory of the toy plan run over 40 events in batches of 16."""
    out = tmp_path_factory.mktemp("square")
    subprocess.run(
        [
            quiver_bin,
            "run",
            str(ROOT / "plans/examples/square.toml"),
            "--events",
            "40",
            "--batch-size",
            "16",
            "--threads",
            "2",
            "--no-progress",
            "--output",
            str(out),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return out


@pytest.fixture(scope="session")
def small_dataset(tmp_path_factory):
    """A 12-event dataset at <PU> 10 (seed 5), made by the package's `quiver generate`."""
    import quiver.cli

    ds = tmp_path_factory.mktemp("small") / "dataset"
    code = quiver.cli.main(
        ["generate", "--events", "12", "--pileup", "10", "--seed", "5", "--output", str(ds)]
    )
    assert code == 0, "quiver generate failed"
    return ds


@pytest.fixture(scope="session")
def small_run(small_dataset, tmp_path_factory):
    """The default plan (plans/pixel.toml) over small_dataset in one process: its output dir."""
    import quiver

    out = tmp_path_factory.mktemp("small_run")
    quiver.Plan.load(ROOT / "plans/pixel.toml").run(
        input=small_dataset, output=out, threads=1, collect=[]
    )
    return out
