"""Driving Quiver from Python: plans built or loaded, validated, run; products as pyarrow
tables and Polars DataFrames."""

import pathlib
import threading
import time

import numpy as np
import polars as pl
import pyarrow as pa
import pytest
import quiver

ROOT = pathlib.Path(__file__).resolve().parents[2]


def toy_plan():
    plan = quiver.Plan()
    plan.add("numbers", "random_floats", count=50, seed=3)
    plan.add("squared", "square", input="numbers")
    return plan


def test_products_come_back_as_pyarrow_and_polars():
    r = toy_plan().run(events=20, threads=2, batch_size=8)
    assert sorted(r.keys()) == ["numbers:floats", "squared:floats"]
    t = r["squared"]
    assert isinstance(t, pa.Table)
    assert t.column_names == ["event", "value"]
    assert t.schema.field("value").type == pa.float32()
    assert t.schema.metadata[b"quiver.schema"] == b"floats"
    assert [len(c) for c in t.column("value").chunks] == [400, 400, 200]  # one chunk per batch
    ev = t.column("event").to_numpy()
    assert (ev == np.repeat(np.arange(20), 50)).all()
    x = r.table("numbers:floats").column("value").to_numpy()
    assert (t.column("value").to_numpy() == x * x).all()
    df = r.polars("squared")
    assert isinstance(df, pl.DataFrame)
    assert df.schema == {"event": pl.UInt32, "value": pl.Float32}
    assert df.group_by("event").len().sort("event")["len"].to_list() == [50] * 20
    assert r.numbers["events"] == 20 and r.numbers["threads"] == 2 and r.numbers["gil_released"]
    assert "threads 2 (Python " in r.summary and "; the driver waits without the GIL)" in r.summary


def test_results_do_not_depend_on_threads_or_batch_size():
    a = toy_plan().run(events=30, threads=1, batch_size=30)["squared"]
    b = toy_plan().run(events=30, threads=3, batch_size=7)["squared"]
    assert a.combine_chunks().equals(b.combine_chunks())


def test_python_plan_equals_toml_plan():
    text = (ROOT / "plans/examples/square.toml").read_text()
    from_toml = quiver.Plan.from_toml(text).run(events=5, threads=1, collect=["squared"])
    from_file = quiver.Plan.load(ROOT / "plans/examples/square.toml").run(
        events=5, threads=1, collect=["squared"]
    )
    built = quiver.Plan()
    built.add("numbers", "random_floats", count=1000, seed=1)
    built.add("squared", "square", input="numbers")
    ours = built.run(events=5, threads=1, collect=["squared"])
    assert ours["squared"].equals(from_toml["squared"])
    assert ours["squared"].equals(from_file["squared"])
    assert from_toml.keys() == ["squared:floats"]


@pytest.mark.parametrize(
    "extra, message",
    [
        (
            '[[step]]\nlabel = "x"\ntype = "cube"\n',
            "step 'x': unknown step type 'cube' (`quiver steps` lists the catalogue)",
        ),
        (
            '[[step]]\nlabel = "x"\ntype = "square"\ncolour = 1\n',
            "step 'x': unknown parameter 'colour' (known: method)",
        ),
        (
            '[[step]]\nlabel = "x"\ntype = "square"\nbackend = "gpu"\n',
            "step 'x': backend 'gpu' is not implemented by step type 'square' (it has: cpu)",
        ),
        (
            '[[step]]\nlabel = "x"\ntype = "square"\ninput = "nope"\n',
            "step 'x': input 'input' = \"nope\": no step of this plan has label 'nope'",
        ),
    ],
)
def test_plan_errors_are_the_same_from_toml_and_python(extra, message):
    base = '[[step]]\nlabel = "numbers"\ntype = "random_floats"\n'
    with pytest.raises(quiver.PlanError) as toml_err:
        quiver.Plan.from_toml(base + extra).check()
    assert str(toml_err.value) == message
    assert isinstance(toml_err.value, ValueError)

    import tomllib

    step = tomllib.loads(extra)["step"][0]
    plan = quiver.Plan().add("numbers", "random_floats")
    label, ty, backend = step.pop("label"), step.pop("type"), step.pop("backend", None)
    plan.add(label, ty, backend=backend, **step)
    with pytest.raises(quiver.PlanError) as py_err:
        plan.check()
    assert str(py_err.value) == message
    with pytest.raises(ValueError):
        plan.run(events=1)


def test_other_plan_errors():
    with pytest.raises(quiver.PlanError, match="a label may hold only letters"):
        quiver.Plan().add("bad label", "square")
    with pytest.raises(quiver.PlanError, match="the plan has no steps"):
        quiver.Plan().run(events=1)
    with pytest.raises(quiver.PlanError, match="no step knows how many events"):
        toy_plan().run()
    with pytest.raises(
        quiver.PlanError,
        match=r"collect 'squared:ints': step 'squared' produces no 'ints' \(it produces: floats\)",
    ):
        toy_plan().run(events=1, collect=["squared:ints"])
    with pytest.raises(quiver.PlanError, match="cannot be a plan value"):
        quiver.Plan().add("numbers", "random_floats", count=object())
    with pytest.raises(KeyError, match="no collected product 'numbers'"):
        toy_plan().run(events=1, collect=["squared"])["numbers"]


def test_gil_is_released_while_rust_steps_run():
    ticks = []
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks.append(time.perf_counter())
            time.sleep(0.001)

    t = threading.Thread(target=spin)
    plan = quiver.Plan()
    plan.add("numbers", "random_floats", count=200_000)
    plan.add("squared", "square", input="numbers")
    t.start()
    try:
        start = time.perf_counter()
        r = plan.run(events=200, threads=1, collect=[])
        end = time.perf_counter()
    finally:
        stop.set()
        t.join()
    assert r.keys() == []
    assert end - start > 0.05, "the job must run long enough to tell"
    during = [x for x in ticks if start < x < end]
    # A held GIL would freeze the Python thread for the whole job.
    assert len(during) > 10, (len(during), end - start)
