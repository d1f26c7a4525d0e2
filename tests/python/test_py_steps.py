"""Steps written in Python and Polars, run from a Python driver and from `quiver run`."""

import pathlib
import subprocess
import sys
import textwrap

import numpy as np
import polars as pl
import pyarrow as pa
import pyarrow.compute as pc
import pytest
import quiver

ROOT = pathlib.Path(__file__).resolve().parents[2]


def numbers_plan(count=100):
    return quiver.Plan().add("numbers", "random_floats", count=count, seed=5)


def test_python_and_polars_square_equal_rust_square_bit_for_bit():
    r = quiver.Plan.load(ROOT / "plans/examples/square-python.toml").run(
        events=64, threads=2, batch_size=16
    )
    rust = r["squared"]
    assert rust.equals(r["squared_py"]) and rust.equals(r["squared_pl"])
    assert "python step squared_py (quiver.examples:Square): 4 batches" in r.summary
    assert "python step squared_pl (quiver.examples:square_polars): 4 batches" in r.summary


def test_compare_catches_a_python_step_that_differs():
    class OffByOne(quiver.Step):
        consumes = {"input": "floats"}
        produces = ["floats"]

        def produce(self, batch):
            x = batch.get("input", event=False).column("value").to_numpy()
            y = x * x
            if batch.first_event == 16:
                y[3] = np.nextafter(y[3], np.float32(2))
            batch.put("floats", {"value": y}, offsets="input")

    plan = numbers_plan()
    plan.add("squared", "square", input="numbers")
    plan.add("squared_py", OffByOne, input="numbers")
    plan.add("check", "compare", a="squared", b="squared_py")
    with pytest.raises(quiver.StepError, match=r"step 'check' failed on events 16\.\.32"):
        plan.run(events=40, threads=2, batch_size=16)


class Scale(quiver.Step):
    consumes = {"input": "floats"}
    produces = {"floats": pa.schema([pa.field("value", pa.float32(), nullable=False)])}
    params = {"factor": (2.0, "multiplier"), "tag": str}
    instances = []

    def __init__(self, params):
        super().__init__(params)
        self.batches = 0
        Scale.instances.append(self)

    def produce(self, batch):
        self.batches += 1
        t = batch.get("input")  # pyarrow RecordBatch with the event column
        assert t.column_names == ["event", "value"]
        y = pc.multiply(t.column("value"), pa.scalar(self.params["factor"], pa.float32()))
        batch.put("floats", pa.record_batch({"event": t.column("event"), "value": y}))

    def end_job(self):
        return f"{self.params['tag']}: {self.batches} batches"


def test_params_reach_the_constructor_and_end_job_runs_once_per_instance():
    Scale.instances.clear()
    plan = numbers_plan(10)
    plan.add("scaled", Scale, input="numbers", factor=3, tag="hello")
    r = plan.run(events=50, threads=2, batch_size=5)
    x = r["numbers"].column("value").to_numpy()
    assert (r["scaled"].column("value").to_numpy() == x * np.float32(3)).all()
    assert 1 <= len(Scale.instances) <= 2  # one per worker thread
    assert all(i.params == {"factor": 3.0, "tag": "hello"} for i in Scale.instances)
    assert sum(i.batches for i in Scale.instances) == 10
    assert r.summary.count("hello: ") == len(Scale.instances)
    with pytest.raises(
        quiver.PlanError, match="step 'scaled': missing required parameter 'tag' \\(string\\)"
    ):
        numbers_plan().add("scaled", Scale, input="numbers").check()
    with pytest.raises(
        quiver.PlanError,
        match=r"step 'scaled': unknown parameter 'fator' \(known: module, class, factor, tag\)",
    ):
        numbers_plan().add("scaled", Scale, input="numbers", fator=3, tag="x").check()
    with pytest.raises(
        quiver.PlanError, match="step 'scaled': parameter 'factor' must be float, got \"x\""
    ):
        numbers_plan().add("scaled", Scale, input="numbers", factor="x", tag="x").check()


def test_polars_step_from_a_decorated_function():
    @quiver.polars_step(consumes={"x": "floats"}, produces="floats", params={"offset": 1.0})
    def shift(x, offset):
        return x.with_columns(pl.col("value") + pl.lit(offset, pl.Float32))

    plan = numbers_plan(7)
    plan.add("shifted", shift, x="numbers", offset=0.5)
    r = plan.run(events=9, threads=2, batch_size=4)
    x = r.polars("numbers")
    assert r.polars("shifted").equals(x.with_columns(pl.col("value") + pl.lit(0.5, pl.Float32)))
    assert shift.fn(x, offset=0.0).equals(x)  # the plain function stays testable


def failing_plan(cls, events=40):
    plan = numbers_plan(10)
    plan.add("bad", cls, input="numbers")
    return plan


def test_an_exception_names_the_step_the_events_and_the_traceback():
    class Boom(quiver.Step):
        consumes = {"input": "floats"}
        produces = ["floats"]

        def produce(self, batch):
            if batch.first_event >= 16:
                _ = 1 / 0
            batch.put("floats", batch.get("input", event=False), offsets="input")

    with pytest.raises(quiver.StepError) as e:
        failing_plan(Boom).run(events=40, threads=2, batch_size=16)
    msg = str(e.value)
    assert msg.startswith("step 'bad' failed on events 16..32: Python exception in ")
    assert (
        "Traceback (most recent call last)" in msg and "ZeroDivisionError: division by zero" in msg
    )
    assert "in produce" in msg and "1 / 0" in msg
    assert isinstance(e.value, RuntimeError)


def put_step(fn):
    return type(
        "Putter",
        (quiver.Step,),
        {"consumes": {"input": "floats"}, "produces": ["floats"], "produce": fn},
    )


@pytest.mark.parametrize(
    "produce, message",
    [
        (
            lambda self, b: b.put("floats", {"value": np.zeros(10 * b.n_events)}, offsets="input"),
            "product 'floats', column 'value': expected type Float32, got Float64",
        ),
        (
            lambda self, b: b.put(
                "floats", {"x": np.zeros(10 * b.n_events, np.float32)}, offsets="input"
            ),
            "product 'floats': missing column 'value' (expected type Float32); got columns [x], "
            "expected [value]",
        ),
        (
            lambda self, b: b.put(
                "floats",
                {
                    "event": np.arange(b.n_events)[::-1] + b.first_event,
                    "value": np.zeros(b.n_events, np.float32),
                },
            ),
            "product 'floats', column 'event': rows must be ordered by event, but row 1 has event "
            "2 after event 3",
        ),
        (
            lambda self, b: b.put(
                "floats", {"event": np.full(2, 99), "value": np.zeros(2, np.float32)}
            ),
            "product 'floats', column 'event': row 0 has event 99, outside this batch's events "
            "0..4",
        ),
        (
            lambda self, b: b.put("floats", {"value": np.zeros(3, np.float32)}),
            "product 'floats': no 'event' column; add one or give offsets=",
        ),
        (
            lambda self, b: b.put("ints", {"value": np.zeros(3, np.float32)}),
            "product type 'ints' is not declared in produces (declared: floats)",
        ),
        (
            lambda self, b: b.put("floats", 42, offsets="input"),
            "product 'floats': not an Arrow table or record batch",
        ),
        (lambda self, b: None, "declared product 'floats' was not published"),
    ],
)
def test_wrong_products_are_errors_naming_product_column_and_type(produce, message):
    with pytest.raises(quiver.StepError) as e:
        failing_plan(put_step(produce)).run(events=4, threads=1, batch_size=4)
    assert str(e.value).startswith("step 'bad' failed on events 0..4: ")
    assert message in str(e.value)


def test_bad_classes_are_plan_errors():
    with pytest.raises(
        quiver.PlanError, match="step 'p': parameter 'class': 'quiver.examples' has no 'Nope'"
    ):
        numbers_plan().add(
            "p", "python", backend="python", module="quiver.examples", **{"class": "Nope"}
        ).check()
    with pytest.raises(
        quiver.PlanError, match="step 'p': parameter 'module': no Python module 'no_such_module'"
    ):
        numbers_plan().add(
            "p", "python", backend="python", module="no_such_module", **{"class": "X"}
        ).check()
    with pytest.raises(
        quiver.PlanError,
        match=r"backend 'cpu' is not implemented by step type 'python' \(it has: python\)",
    ):
        numbers_plan().add(
            "p", "python", module="quiver.examples", input="numbers", **{"class": "Square"}
        ).check()
    with pytest.raises(TypeError, match="is not a quiver.Step subclass"):
        numbers_plan().add("p", dict)


STEP_FILE = """
import numpy as np
import quiver

class Cube(quiver.Step):
    consumes = {"input": "floats"}
    produces = ["floats"]

    def produce(self, batch):
        x = batch.get("input", event=False).column("value").to_numpy()
        batch.put("floats", {"value": x * x * x}, offsets="input")
"""


def quiver_command():
    exe = pathlib.Path(sys.executable).parent / "quiver"
    assert exe.exists(), "the quiver package installs a `quiver` command next to python"
    return str(exe)


def test_quiver_run_runs_python_steps_from_toml(tmp_path):
    (tmp_path / "cube.py").write_text(STEP_FILE)
    (tmp_path / "plan.toml").write_text(
        textwrap.dedent("""
        [[step]]
        label = "numbers"
        type = "random_floats"
        count = 100
        [[step]]
        label = "cubed"
        type = "python"
        backend = "python"
        module = "cube.py"
        class = "Cube"
        input = "numbers"
        [[step]]
        label = "out"
        type = "write_parquet"
        products = ["numbers", "cubed"]
    """)
    )
    out = subprocess.run(
        [
            quiver_command(),
            "run",
            "plan.toml",
            "--events",
            "20",
            "--threads",
            "2",
            "--no-progress",
            "--output",
            "out",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert "python step cubed (cube.py:Cube): " in out.stdout
    import pyarrow.parquet as pq

    x = pq.read_table(tmp_path / "out/floats.numbers.parquet").column("value").to_numpy()
    y = pq.read_table(tmp_path / "out/floats.cubed.parquet").column("value").to_numpy()
    assert (y == x * x * x).all()

    check = subprocess.run(
        [quiver_command(), "plan", "check", "plan.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert check.returncode == 0 and "cubed (python, python)" in check.stdout
    steps = subprocess.run([quiver_command(), "steps"], capture_output=True, text=True)
    assert "python  [python]" in steps.stdout


def test_quiver_run_example_plan_and_errors():
    out = subprocess.run(
        [
            quiver_command(),
            "run",
            str(ROOT / "plans/examples/square-python.toml"),
            "--events",
            "32",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert out.returncode == 0, out.stderr
    assert "check_py" in out.stdout and "check_pl" in out.stdout
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "quiver",
            "run",
            str(ROOT / "plans/examples/square-python.toml"),
            "--events",
            "0x",
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "invalid value '0x'" in bad.stderr


def test_an_exception_in_the_constructor_is_reported_as_such():
    class BadInit(quiver.Step):
        consumes = {"input": "floats"}
        produces = ["floats"]

        def __init__(self, params):
            raise RuntimeError("cannot start")

    with pytest.raises(quiver.StepError) as e:
        failing_plan(BadInit).run(events=4, threads=1, batch_size=4)
    assert "step 'bad' failed on events 0..4: Python exception in " in str(e.value)
    assert ".BadInit.__init__(params):" in str(e.value) and "RuntimeError: cannot start" in str(
        e.value
    )


def test_two_classes_of_the_same_name_stay_apart():
    def make(factor):
        class Times(quiver.Step):
            consumes = {"input": "floats"}
            produces = ["floats"]

            def produce(self, batch):
                x = batch.get("input", event=False).column("value").to_numpy()
                batch.put("floats", {"value": x * np.float32(factor)}, offsets="input")

        return Times

    plan = (
        numbers_plan(4).add("two", make(2), input="numbers").add("three", make(3), input="numbers")
    )
    r = plan.run(events=3, threads=1)
    x = r["numbers"].column("value").to_numpy()
    assert (r["two"].column("value").to_numpy() == x * 2).all()
    assert (r["three"].column("value").to_numpy() == x * 3).all()
