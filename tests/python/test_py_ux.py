"""An analyst's session without surprises: editing a loaded plan, one-line messages for
typos, one readable summary header, temporary output that goes away, Python steps charged
only for their own time."""

import gc
import json
import os
import pathlib
import re
import subprocess
import sys
import traceback

import pytest
import quiver
import quiver.cli
import quiver.examples
from conftest import ROOT, leftovers

SQUARE = (ROOT / "plans/examples/square.toml").read_text()


def toy_plan():
    return (
        quiver.Plan()
        .add("numbers", "random_floats", count=5)
        .add("squared", "square", input="numbers")
    )


def test_replace_swaps_a_step_in_place():
    rust = toy_plan().add("total", "square", input="squared")
    before = rust.run(events=3, threads=1, collect=["total"])["total"]
    plan = toy_plan().add("total", "square", input="squared")
    assert plan.replace("squared", quiver.examples.Square) is plan
    assert plan.labels == ["numbers", "squared", "total"]  # same place, same label
    resolved = plan.check()
    assert "squared (python, python)" in resolved and "total (square, cpu)" in resolved
    # The consumer reads the new step; the kept input key still points at numbers.
    assert plan.run(events=3, threads=1, collect=["total"])["total"].equals(before)
    # Back to a Rust type: module/class go, a parameter is set, another dropped with None.
    plan.replace("squared", "square", method="powi")
    plan.replace("squared", "square", method=None)
    assert "squared (square, cpu)" in plan.check()


def test_replace_validates_at_once_and_leaves_the_plan_as_it_was():
    plan = toy_plan()
    resolved = plan.check()
    with pytest.raises(quiver.PlanError, match=r"^step 'squared': unknown parameter 'colour'"):
        plan.replace("squared", "square", colour=1)
    with pytest.raises(
        quiver.PlanError,
        match=r"^step 'squared': unknown step type 'sqare' \(did you mean 'square'\?",
    ):
        plan.replace("squared", "sqare")
    assert plan.check() == resolved
    with pytest.raises(quiver.PlanError) as e:
        plan.replace("sqared", "square")
    assert str(e.value) == (
        "step 'sqared': no step of this plan has this label "
        "(did you mean 'squared'? its steps: numbers, squared)"
    )


def test_remove_refuses_a_step_others_consume():
    plan = toy_plan().add("cubed", "square", input="squared")
    with pytest.raises(quiver.PlanError) as e:
        plan.remove("squared")
    assert str(e.value) == (
        "step 'squared': cannot remove it: step 'cubed' (input 'input') consumes "
        "its products (remove or replace those first)"
    )
    assert plan.labels == ["numbers", "squared", "cubed"]
    plan.remove("cubed").remove("squared")
    assert plan.labels == ["numbers"]
    with pytest.raises(quiver.PlanError, match="did you mean 'numbers'"):
        plan.remove("number")
    # A plan still being built (squared's input does not exist yet) names the key instead.
    partial = quiver.Plan().add("a", "square", input="b").add("c", "square", input="a")
    with pytest.raises(quiver.PlanError, match=r"step 'c' \(key 'input'\) consumes"):
        partial.remove("a")


def test_misspelled_python_class_is_a_one_line_plan_error(tmp_path, capfd):
    def check(module, cls):
        plan = toy_plan().add(
            "p", "python", backend="python", module=module, input="numbers", **{"class": cls}
        )
        with pytest.raises(quiver.PlanError) as e:
            plan.check()
        return str(e.value)

    msg = check("quiver.examples", "Sqare")
    assert msg == (
        "step 'p': parameter 'class': 'quiver.examples' has no 'Sqare' "
        "(did you mean 'Square'? its step classes: Square, square_polars)"
    )
    msg = check("quiver.exampls", "Square")
    assert msg.startswith(
        "step 'p': parameter 'module': no Python module 'quiver.exampls' "
        "(did you mean 'quiver.examples'?"
    )
    assert "no Python file" in check(str(tmp_path / "nope.py"), "X")
    # The command line says the same, in one line.
    toml = tmp_path / "p.toml"
    toml.write_text(
        '[[step]]\nlabel = "p"\ntype = "python"\nbackend = "python"\n'
        'module = "quiver.examples"\nclass = "Sqare"\n'
    )
    capfd.readouterr()
    assert (
        quiver.cli.main(["run", str(toml), "--events", "1", "--output", str(tmp_path / "o")]) == 1
    )
    err = capfd.readouterr().err
    assert "did you mean 'Square'?" in err and "Traceback" not in err and "_steps.py" not in err
    # A module that fails on import keeps its traceback: that is the user's bug, not a typo.
    broken = tmp_path / "broken.py"
    broken.write_text("import no_such_dependency\n")
    msg = check(str(broken), "X")
    assert "Traceback" in msg and "No module named 'no_such_dependency'" in msg


def test_plan_error_says_plan_error_once():
    with pytest.raises(quiver.PlanError) as e:
        quiver.Plan.from_toml('[[step]]\nlabel = "x"\ntype = "cube"\n').check()
    line = "".join(traceback.format_exception_only(e.value)).strip()
    assert line == (
        "quiver.PlanError: step 'x': unknown step type 'cube' (`quiver steps` lists the catalogue)"
    )


def test_run_summary_header_is_one_readable_line():
    head = toy_plan().run(events=2, threads=2).summary.splitlines()[0]
    assert ") (" not in head, head
    assert re.search(
        r"  threads 2 \(Python [0-9.]+[a-z0-9+]*, GIL (enabled: Python steps take turns, "
        r"Rust steps run in parallel; the driver waits without the GIL|disabled)\)  wall ",
        head,
    ), head


def test_temporary_output_goes_with_the_result_unless_kept(tmp_path):
    plan = quiver.Plan.from_toml(SQUARE)
    r = plan.run(events=2, threads=1)
    out = pathlib.Path(r.output)
    assert out.name.startswith("quiver-run-") and (out / "floats.squared.parquet").exists()
    del r
    gc.collect()
    assert not out.exists(), "the temporary output outlived its result"

    r = plan.run(events=2, threads=1)
    out = pathlib.Path(r.output)
    with pytest.raises(FileExistsError, match="exists already"):
        r.keep(tmp_path)
    kept = r.keep(tmp_path / "kept")
    assert kept == str(tmp_path / "kept") == r.output and not out.exists()
    del r
    gc.collect()
    assert (tmp_path / "kept" / "floats.squared.parquet").exists()

    # An output directory given to the run is never removed.
    r = plan.run(events=2, threads=1, output=tmp_path / "mine")
    del r
    gc.collect()
    assert (tmp_path / "mine" / "floats.squared.parquet").exists()


def test_a_run_refused_before_it_starts_leaves_no_temporary_directory():
    from conftest import SESSION_TMP

    before = leftovers(SESSION_TMP)
    with pytest.raises(quiver.PlanError, match="nope"):
        quiver.Plan.from_toml(SQUARE).run(events=2, threads=1, collect=["nope"])
    assert leftovers(SESSION_TMP) == before


def test_temporary_output_goes_when_python_exits(tmp_path):
    code = (
        "import quiver, pathlib, sys; r = quiver.Plan.load(sys.argv[1]).run(events=2, threads=1); "
        "assert pathlib.Path(r.output).exists(); print(r.output)"
    )
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    p = subprocess.run(
        [sys.executable, "-c", code, str(ROOT / "plans/examples/square.toml")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert p.stdout.strip().startswith(str(tmp_path / "quiver-run-"))
    assert leftovers(tmp_path) == []


TOUCH = """
import json, sys, time
import quiver

class Touch(quiver.Step):
    consumes = {"hits": "hits"}
    def __init__(self, params):
        super().__init__(params)
        time.sleep(0.3)  # a model loaded once per worker
    def produce(self, batch):
        assert "BeamSpot" in batch.conditions
        batch.conditions.clear()  # a copy: the next batch still sees every condition

assert "pyarrow" not in sys.modules
plan = quiver.Plan.load(sys.argv[1]).add("touch", Touch, hits="hits")
r = plan.run(input=sys.argv[2], threads=2, batch_size=1, collect=[], output=sys.argv[3])
step_s, one_off = r.numbers["step_s"]["touch"], r.numbers["step_one_off_s"]["touch"]
print(json.dumps({"step_s": step_s, "one_off_s": one_off, "summary": r.summary}))
"""


def test_python_step_is_not_charged_for_one_off_setup(small_dataset, tmp_path):
    """pyarrow's import and the conditions as pyarrow (a few hundred ms, once) were counted
    in the first batch of each worker: a trivial step read as 15 ms/event. So was each
    worker's ``__init__`` (here 0.3 s, as a model loaded once per worker would take)."""
    script = tmp_path / "touch.py"
    script.write_text(TOUCH)
    p = subprocess.run(
        [
            sys.executable,
            str(script),
            str(ROOT / "plans/pixel.toml"),
            str(small_dataset),
            str(tmp_path / "out"),
        ],
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, p.stderr
    got = json.loads(p.stdout)
    m = re.search(r"setup, once per job and not in the step's time: ([0-9.]+) ms", got["summary"])
    assert m, got["summary"]
    setup_s = float(m.group(1)) / 1e3
    assert got["step_s"] < setup_s / 2, (got["step_s"], setup_s)
    # __init__: at least one worker slept 0.3 s in it; reported apart, not in step_s.
    m = re.search(r"__init__ on ([12]) worker\(s\): ([0-9.]+) ms", got["summary"])
    assert m, got["summary"]
    n_init, init_s = int(m.group(1)), float(m.group(2)) / 1e3
    assert 0.3 * n_init <= init_s < 0.3 * n_init + 0.5, (n_init, init_s)
    assert abs(got["one_off_s"] - init_s) < 0.01, (got["one_off_s"], init_s)
    assert got["step_s"] < 0.15, got["step_s"]
    one_off_line = r"touch +one-off work in its first calls, not in ms/event: [0-9.]+ ms"
    assert re.search(one_off_line, got["summary"]), got["summary"]
